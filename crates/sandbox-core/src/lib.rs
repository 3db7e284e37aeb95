//! Core types of the sandbox workspace.
//!
//! * [`SandboxPolicy`]: what a command may do, as written by a user or operator.
//! * [`ResolvedPolicy`]: the validated, canonicalised policy backends consume.
//! * [`SandboxConfig`]: the operator's config (backend choice, `on_unsupported`,
//!   an optional bounding policy).
//! * [`SandboxedExecOp`]: the op envelope in the legacy `allow_` vocabulary, and
//!   its intersection with the operator policy.
//! * [`SandboxMode`]: the `read-only`, `workspace-write` and `danger-full-access` presets.
//! * [`Backend`]: the contract every enforcing backend implements, with the
//!   [`EnforcementReport`] it returns; [`NoopBackend`] is the audit-only one.
//! * [`net`]: egress rules, by address ([`NetRule`]) or host name ([`EgressRule`]).
//! * [`axis`]: the axis-contract types and registry used by the conformance suite.
//!
//! ```
//! use sandbox_core::{ExpandContext, SandboxPolicy};
//! # fn main() -> Result<(), sandbox_core::PolicyError> {
//! let policy = SandboxPolicy {
//!     network: false,
//!     write_paths: vec!["/tmp".into()],
//!     ..SandboxPolicy::default()
//! }
//! .resolve(&ExpandContext::default())?;
//! assert!(!policy.network());
//! // Paths are canonical once resolved (on macOS /tmp is /private/tmp).
//! assert!(policy.write_paths()[0].is_absolute());
//! # Ok(())
//! # }
//! ```
#![warn(missing_docs)]
#![warn(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

pub mod axis;
mod backend;
mod caches;
mod config;
mod env;
mod error;
pub mod home;
mod limits;
mod mode;
pub mod net;
mod noop;
mod op;
mod pins;
mod policy;
pub mod protect;
mod report;
pub mod request;
pub mod text;

pub use axis::Axis;
pub use backend::{
    decode_pre_exec_error, encode_pre_exec_error, Backend, Confinement, LaunchDomain,
    LaunchOptions, MediatedCall, Mediation, MediationTap, PreExecHook, RunningSupervisor,
    Supervisor, WrappedArgv, PRE_EXEC_ERROR_TAG,
};
pub use caches::{ToolCache, TOOL_CACHES};
#[cfg(feature = "toml")]
pub use config::MAX_CONFIG_BYTES;
pub use config::{
    config_candidates, BackendChoice, ConfigSource, EgressConfig, OnUnsupported, SandboxConfig,
    CONFIG_ENV,
};
pub use env::{env_name_denied, scrub_env};
pub use error::{
    ConfigError, PolicyError, SandboxUnavailable, UnavailableKind, SANDBOX_UNAVAILABLE,
};
pub use limits::{
    CpuLimit, LimitError, MemoryLimit, PidsLimit, ResourceLimits, MAX_CPUS, MIN_MEMORY_BYTES,
};
pub use mode::SandboxMode;
pub use net::{
    EgressRule, EgressRuleError, EgressRules, HostAddrs, NameMatch, NameRule, NetRule, NetRuleError,
};
pub use noop::NoopBackend;
pub use op::{builtin_op_bound, SandboxedExecOp};
pub use pins::{DatagramSockets, DnsRoute, Pins, MAX_PINS, MAX_PIN_TTL};
pub use policy::{ExpandContext, NetworkMode, OperatorPolicy, ResolvedPolicy, SandboxPolicy};
pub use report::{AxisEnforcement, Enforcement, EnforcementReport, Level};
pub use request::{
    normalize_path, NormalPath, PathProblem, RequestRule, RequestRuleError, SecretSource,
    SecretSpec,
};
pub use text::{json_terminal_safe, terminal_safe};
