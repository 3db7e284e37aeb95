//! The crate's integration tests, one binary (`it`) with a module per area.
//! `conformance` needs the `conformance` feature; `gate` and its `support`
//! backends are Linux x86_64 only (each module's inner `#![cfg]` says so).

mod conformance;
mod gate;
mod inconclusive;
mod interference;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod support;
