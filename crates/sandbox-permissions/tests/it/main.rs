//! The crate's integration tests, one binary (`it`) with a module per area.

mod permissions;
mod properties;
mod terminal_pty;
