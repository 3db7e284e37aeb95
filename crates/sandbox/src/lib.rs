//! Confine commands with kernel mechanisms.
//!
//! The one entry is the [`Sandbox`] builder: a policy from a few calls, a
//! backend resolved for it (Landlock + seccomp on Linux, Seatbelt on macOS;
//! never unconfined unless asked), and a run that ends every process the
//! command started before it returns.
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
//! and a run ends every process the command started before it returns.
//!
//! Everything else sits in a named module:
//! * [`policy`]: what a run may do (the policy, its resolved form, the
//!   operator's config and bounds, modes, the op envelope, egress and
//!   request rules, limits, tool caches) and [`protect`], the paths
//!   workspace-write protects;
//! * [`runner`]: one run from a request ([`runner::run`],
//!   [`runner::RunRequest`]), its [`runner::Outcome`] and exit codes, and
//!   what this host can hold a run to;
//! * [`backend`]: backend resolution ([`backend::resolve_backend`]) and the
//!   backends, with what each reports it enforces;
//! * [`gate`]: the enforcement self-test a backend passes first;
//! * [`seatbelt`]: the macOS profile text on any OS;
//! * [`trusted`]: the state later runs trust, kept out of every run's reach.
#![warn(missing_docs)]
#![warn(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

mod backend_choice;
mod builder;
mod caches;
pub mod nest;
mod outcome;
mod remove_tree;
// `runner.rs`: the run itself; the public `runner` module below gathers
// what a caller of it needs.
#[path = "runner.rs"]
mod running;
pub mod trusted;
mod verdict;
#[cfg(target_os = "linux")]
pub mod zygote;

pub use builder::{Error, ErrorKind, Sandbox};

/// What a run may do: the policy and its resolved form, the operator's
/// config that bounds every request, sandbox modes, the op envelope,
/// egress and per-request rules, resource limits and tool caches.
pub mod policy {
    // The core types a library user needs, listed one by one: nothing
    // becomes public here by accident. Internals (the pre-exec errno tag
    // protocol, the `SANDBOX_UNAVAILABLE` code, environment scrubbing, the
    // conformance axis registry) stay in `sandbox_core`.
    pub use sandbox_core::net::{
        EgressRule, EgressRuleError, EgressRules, NameMatch, NameRule, NetRule, NetRuleError,
    };
    pub use sandbox_core::request::{
        flag, shell_unword, shell_word, RequestRule, RequestRuleError, SecretSource, SecretSpec,
    };
    pub use sandbox_core::{
        builtin_op_bound, config_candidates, ConfigError, ConfigSource, CpuLimit, EgressConfig,
        ExpandContext, LimitError, MemoryLimit, NetworkMode, OperatorPolicy, PidsLimit,
        PolicyError, ResolvedPolicy, ResourceLimits, SandboxConfig, SandboxMode, SandboxPolicy,
        SandboxedExecOp, ToolCache, CONFIG_ENV, TOOL_CACHES,
    };
}

pub use sandbox_core::protect;

pub mod runner {
    //! One run from a request: [`run`] under a resolved backend, the
    //! [`RunRequest`] it takes, the [`Outcome`] it records and the exit
    //! codes the CLI gives; what this host can hold a run to
    //! ([`containment`], [`limit_support`], [`datagram_namespace`]); the
    //! tool caches' directories; stopping runs on a signal.
    pub use crate::caches::{
        prune_unused_tool_caches, tool_cache_dir, tools_root, CacheKey, ToolCacheError, KEEP_UNUSED,
    };
    pub use crate::host::{
        containment, datagram_namespace, drop_thread_capabilities, limit_support,
    };
    pub use crate::outcome::{Classification, Omitted, Outcome, Termination, SCHEMA_VERSION};
    pub use crate::remove_tree::remove_tree;
    pub use crate::running::{
        run, RunError, RunRequest, EXIT_NOT_EXECUTABLE, EXIT_NOT_FOUND, EXIT_SANDBOX, EXIT_TIMEOUT,
    };
    pub use sandbox_core::{json_terminal_safe, terminal_safe};
    pub use sandbox_core::{MediatedCall, Mediation};
    pub use sandbox_launch::{
        fds, stop_requested, stop_runs_on, ContainmentKind, LimitKind, LimitRecord, StopSignals,
    };
    pub use sandbox_proxy::{Decider, Decision, Pending, Reply, Settled};
    pub use sandbox_proxy::{EgressOptions, EgressTap};
}

pub mod backend {
    //! Backend resolution ([`resolve_backend`]: `auto | landlock | seatbelt
    //! | noop` and `on_unsupported`, each backend through the [`crate::gate`]
    //! first), the backends, and what each reports it enforces.
    pub use crate::backend_choice::{resolve_backend, resolve_backend_for, ResolvedBackend};
    pub use sandbox_core::{
        Axis, AxisEnforcement, Backend, BackendChoice, Confinement, Enforcement, EnforcementReport,
        LaunchOptions, Level, NoopBackend, OnUnsupported, PreExecHook, RunningSupervisor,
        SandboxUnavailable, Supervisor, UnavailableKind, WrappedArgv,
    };
    #[cfg(target_os = "linux")]
    pub use sandbox_landlock::{ConfinedSpawner, LandlockBackend};
    #[cfg(target_os = "macos")]
    pub use sandbox_seatbelt::SeatbeltBackend;
}

/// The production gate: the enforcement self-test a backend passes (a
/// write probe and a spawn probe, launched as a run is) before
/// [`backend::resolve_backend`] hands it out. Only a probe that saw a
/// forbidden action get through counts as no backend (`on_unsupported`
/// applies); an unwitnessed (inconclusive) or interfered-with self-test is
/// refused whatever `on_unsupported` says, and is not cached.
pub mod gate {
    pub use sandbox_probe::{Check, CheckRole, GateReport, ProbeKind, ProbeReport, ProbeResult};

    /// The cached self-test report for `backend`, if it ran in this process.
    pub fn report(backend: &'static str) -> Option<&'static GateReport> {
        sandbox_probe::cached(backend)
    }
}

/// The macOS backend: the SBPL profile a policy gives, on any OS (what
/// `sandbox profile` prints for review), and the `sandbox-exec` backend
/// itself on macOS.
pub mod seatbelt {
    #[cfg(target_os = "macos")]
    pub use sandbox_seatbelt::SeatbeltBackend;
    pub use sandbox_seatbelt::{profile, SeatbeltError, SeatbeltProfile};
}

/// What this host can hold a run to (re-exported by [`runner`]).
mod host {
    use crate::policy::ResourceLimits;
    use crate::runner::{ContainmentKind, LimitRecord};

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
            Ok(name) => {
                sandbox_launch::RunLimits::set(&all, containment.cgroup_dir(), &name).records()
            }
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

    /// Empties the calling thread's effective, permitted and inheritable
    /// capability sets (capset(2) with pid 0 changes the calling thread
    /// only, so the process's other threads keep theirs): for work a
    /// trusted component does on a command's behalf with no more power
    /// than the command. Nothing to drop off Linux.
    pub fn drop_thread_capabilities() -> std::io::Result<()> {
        #[cfg(target_os = "linux")]
        {
            sandbox_seccomp::caps::set(sandbox_seccomp::caps::Caps::NONE)
                .map_err(std::io::Error::from_raw_os_error)
        }
        #[cfg(not(target_os = "linux"))]
        {
            Ok(())
        }
    }
}
