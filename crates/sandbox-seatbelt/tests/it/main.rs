//! The crate's integration tests, one binary (`it`) with a module per area.
//! `macos_behavior` runs on macOS only (its inner `#![cfg]`).

mod macos_behavior;
mod profiles;
