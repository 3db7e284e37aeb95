//! The crate's integration tests, one binary (`it`) with a module per area
//! (Linux only: each module's inner `#![cfg]`). They run in parallel threads
//! of one process: a test that changes process-wide state runs in a process
//! of its own (`common::isolated`), and a test that re-executes this binary
//! names its helper by full path (`common::test_path`).

#[cfg(target_os = "linux")]
mod common;

mod abi;
mod alloc_free;
mod backend;
mod network;
mod process;
mod read_deny;
mod spawn;
mod spawner;
mod umask_threads;
mod workloads;
mod wrap_argv;
mod write;
mod write_deny;
