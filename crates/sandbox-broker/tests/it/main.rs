//! The crate's integration tests, one binary (`it`) with a module per area
//! (Linux only: each module's inner `#![cfg]`). They run in parallel threads
//! of one process: a test that counts the process's own fds or changes
//! process-wide state runs in a process of its own (`common::isolated`), and
//! a test that re-executes this binary names its worker by full path
//! (`common::test_path`). Confined callers are forked children: what they
//! change (umask, credentials, limits) is theirs alone.

#[cfg(target_os = "linux")]
mod common;

mod connect;
mod connect_net;
mod connect_race;
mod cost;
mod credentials;
mod decisions;
mod entries;
mod entry_calls;
mod entry_race;
mod fast_paths;
mod fd_leak;
mod fdpass;
mod kernel_parity;
mod race;
mod read_deny;
mod robustness;
mod workloads;
mod xattr_reads;
