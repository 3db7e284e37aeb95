//! The crate's integration tests, one binary (`it`) with a module per area.

mod bounds;
mod egress;
#[cfg(feature = "toml")]
mod readme_forms;
