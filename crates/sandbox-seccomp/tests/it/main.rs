//! The crate's integration tests, one binary (`it`) with a module per area.
//! Each module's inner `#![cfg]` names where it runs; `differential` needs
//! the `libseccomp` feature (`cargo xtask ci` runs it as
//! `cargo test -p sandbox-seccomp --features libseccomp --test it -- differential::`).

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod common;
mod differential;
mod kernel;
mod oracle;
mod snapshots;
