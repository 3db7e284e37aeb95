//! Facade. Work in progress.
