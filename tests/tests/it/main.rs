//! The end-to-end tests, in one binary (issue #43: each test binary links
//! the whole workspace). Each module was a test file of its own; helpers
//! they share are in the `sandbox_tests` library (`tests/src/lib.rs`).
//!
//! Run one module with a filter: `cargo test -p sandbox-tests --test it --
//! session::`. Tests that count this process's threads or fds, or change
//! its environment, run in a process of their own
//! ([`sandbox_tests::isolated`]).

mod approval;
mod argv_form;
mod broker_budget;
mod broker_domain;
mod broker_record;
mod default_caches;
mod dns;
mod egress;
mod egress_peers;
mod explain;
mod fail_closed;
mod fd_limit;
mod fidelity;
mod gate_witness;
mod git_audit;
mod harness;
mod intercept;
mod intercept_routes;
mod launch_threads;
mod lifetime;
mod limits;
mod native;
mod nested;
mod nested_attacks;
mod nested_late;
mod operator_bounds;
mod other_processes;
mod outcomes;
mod own_listeners;
mod private_net;
mod private_tmp;
mod probe_sabotage;
mod profile;
mod public_api;
mod read_refusals;
mod real_tools;
mod runner;
mod session;
mod session_approvals;
mod session_client_socket;
mod session_clients;
mod session_egress;
mod session_keep;
mod session_leftovers;
mod session_ns;
mod session_refused;
mod session_socket;
mod shm;
mod stdio_paths;
mod terminal;
mod tool_caches;
mod trusted_state;
mod unix_sockets;
mod unlinked_handed;
mod workloads;
mod workspace;
