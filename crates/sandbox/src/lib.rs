//! Confine commands with kernel mechanisms.
//!
//! This facade resolves a backend from a [`SandboxConfig`] (Landlock + seccomp
//! on Linux, Seatbelt on macOS, noop on request or by `on_unsupported`), and
//! runs commands under it with [`run`]: own session, inherited fds closed,
//! environment scrubbed, timeout, and no descendant outliving the run.
#![warn(missing_docs)]

mod contain;
mod gate;
mod outcome;
mod resolve;
mod runner;
mod spawn;

pub use contain::ContainmentKind;
pub use outcome::{Classification, Outcome, Termination, SCHEMA_VERSION};
pub use resolve::{resolve_backend, resolve_backend_for, ResolvedBackend};
pub use runner::{
    run, RunError, RunRequest, EXIT_NOT_EXECUTABLE, EXIT_NOT_FOUND, EXIT_SANDBOX, EXIT_TIMEOUT,
};
pub use sandbox_core::*;
#[cfg(target_os = "linux")]
pub use sandbox_landlock::{ConfinedSpawner, LandlockBackend};
pub use sandbox_probe::{GateReport, ProbeReport};
#[cfg(target_os = "macos")]
pub use sandbox_seatbelt::SeatbeltBackend;

/// How runs started by this process are held together on this host (probed
/// by creating and removing a cgroup).
pub fn containment() -> ContainmentKind {
    contain::Containment::new().kind()
}

/// The cached enforcement self-test report for `backend`, if it ran in this process.
pub fn gate_report(backend: &'static str) -> Option<&'static GateReport> {
    sandbox_probe::cached(backend)
}
