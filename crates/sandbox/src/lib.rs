//! Confine commands with kernel mechanisms.
//!
//! This facade resolves a backend from a [`SandboxConfig`] (Landlock + seccomp
//! on Linux, Seatbelt on macOS, noop on request or by `on_unsupported`), and
//! runs commands under it with [`run`]: own session, inherited fds closed,
//! environment scrubbed, timeout, and no descendant outliving the run.
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let scratch = tempfile::tempdir()?;
//! // Write only beneath the scratch directory, no network, at most 60 s.
//! let outcome = sandbox::Sandbox::new()
//!     .write(scratch.path())
//!     .deny_network()
//!     .timeout(60)
//!     .run(["/bin/echo", "confined"])?;
//! assert_eq!(outcome.exit_code(), 0);
//! # Ok(())
//! # }
//! ```
//!
//! Four things to know: policy paths are resolved once (relative ones
//! against the current directory) and write paths must exist; the network
//! is on unless denied; without a working backend running fails (exit 125
//! in the CLI), it never runs unconfined unless `on_unsupported` says so;
//! and [`run`] ends every process the command started before it returns.
#![warn(missing_docs)]
#![warn(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

mod backend_choice;
mod builder;
mod caches;
mod outcome;
mod runner;
pub mod trusted;
mod verdict;
// The one launch path, shared with the self-test so that it witnesses it.

pub use backend_choice::{resolve_backend, resolve_backend_for, ResolvedBackend};
pub use builder::{Error, ErrorKind, Sandbox};
pub use caches::{tool_cache_dir, tools_root, ToolCacheError};
pub use outcome::{Classification, Outcome, Termination, SCHEMA_VERSION};
pub use runner::{
    run, RunError, RunRequest, EXIT_NOT_EXECUTABLE, EXIT_NOT_FOUND, EXIT_SANDBOX, EXIT_TIMEOUT,
};
pub use sandbox_launch::{
    stop_requested, stop_runs_on, ContainmentKind, LimitKind, LimitRecord, StopSignals,
};
// The core types a library user needs, listed one by one: nothing becomes
// public here by accident. Internals (the pre-exec errno tag protocol, the
// `SANDBOX_UNAVAILABLE` code, environment scrubbing, the conformance axis
// registry) stay in `sandbox_core`, for the CLI, xtask and tests to use there.
pub use sandbox_core::net::{
    EgressRule, EgressRuleError, EgressRules, NameMatch, NameRule, NetRule, NetRuleError,
};
pub use sandbox_core::protect;
pub use sandbox_core::request::{RequestRule, RequestRuleError, SecretSpec};
pub use sandbox_core::terminal_safe;
pub use sandbox_core::{
    builtin_op_bound, config_candidates, Axis, AxisEnforcement, Backend, BackendChoice,
    ConfigError, ConfigSource, Confinement, CpuLimit, Enforcement, EnforcementReport,
    ExpandContext, LaunchOptions, Level, LimitError, MediatedCall, Mediation, MemoryLimit,
    NetworkMode, NoopBackend, OnUnsupported, OperatorPolicy, PidsLimit, PolicyError, PreExecHook,
    ResolvedPolicy, ResourceLimits, RunningSupervisor, SandboxConfig, SandboxMode, SandboxPolicy,
    SandboxUnavailable, SandboxedExecOp, Supervisor, ToolCache, UnavailableKind, WrappedArgv,
    CONFIG_ENV, TOOL_CACHES,
};
#[cfg(target_os = "linux")]
pub use sandbox_landlock::{ConfinedSpawner, LandlockBackend};
pub use sandbox_probe::{GateReport, ProbeReport};
#[cfg(target_os = "macos")]
pub use sandbox_seatbelt::SeatbeltBackend;

/// How runs started by this process are held together on this host (probed
/// by creating and removing a cgroup).
pub fn containment() -> ContainmentKind {
    sandbox_launch::Containment::new().kind()
}

/// Which resource limits runs started by this process can be held to on
/// this host, and by what (probed by creating and removing the run's
/// cgroups). Each record's `held_by` is `None` with the reason when that
/// limit cannot be held.
pub fn limit_support() -> Vec<LimitRecord> {
    let containment = sandbox_launch::Containment::new();
    let all = ResourceLimits {
        memory: "1T".parse().ok(),
        pids: "4194304".parse().ok(),
        cpu: "1024".parse().ok(),
    };
    match containment.run_name() {
        Ok(name) => sandbox_launch::RunLimits::set(&all, containment.cgroup_dir(), &name).records(),
        Err(e) => sandbox_launch::RunLimits::unavailable(&all, &e.to_string()).records(),
    }
}

/// How a run under an allowlist reaches DNS over UDP on this host: `Ok`
/// when its IP datagram sockets can be made in a network namespace of its
/// own, where only the runner's resolver listens (probed by making one);
/// otherwise why not (such runs then resolve over TCP only, and refuse IP
/// datagram sockets).
pub fn datagram_namespace() -> Result<(), String> {
    #[cfg(target_os = "linux")]
    {
        sandbox_proxy::island::Island::new(Box::new(|_| Ok(())))
            .map_err(|e| e.to_string())?
            .start()
    }
    #[cfg(not(target_os = "linux"))]
    {
        Err("not on this platform".into())
    }
}

/// The cached enforcement self-test report for `backend`, if it ran in this process.
pub fn gate_report(backend: &'static str) -> Option<&'static GateReport> {
    sandbox_probe::cached(backend)
}
