//! Typed errors of the core crate.

use std::path::PathBuf;

/// Stable machine-readable code carried by [`SandboxUnavailable`].
pub const SANDBOX_UNAVAILABLE: &str = "SANDBOX_UNAVAILABLE";

/// A policy that cannot be resolved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// A path field holds a value that cannot be used.
    #[error("policy field `{field}` has bad path {value:?}: {reason}")]
    BadPath {
        /// Field name, e.g. `write_paths`.
        field: &'static str,
        /// The value as written.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A write path does not exist (write paths are never skipped silently).
    #[error("write path {} does not exist or cannot be resolved ({reason}); create it or remove it from write_paths", path.display())]
    WritePathMissing {
        /// The expanded path.
        path: PathBuf,
        /// The OS error.
        reason: String,
    },
    /// A requested timeout exceeds the operator ceiling.
    #[error("timeout of {requested} s is above the ceiling max_timeout_seconds = {ceiling} s; request at most {ceiling} s")]
    TimeoutAboveCeiling {
        /// Requested seconds.
        requested: u64,
        /// Ceiling seconds.
        ceiling: u64,
    },
    /// A timeout of zero seconds.
    #[error("timeout_seconds must be at least 1")]
    ZeroTimeout,
    /// An env name that can never match a variable.
    #[error("env_deny_names entry {name:?} is not a valid variable name or glob")]
    BadEnvName {
        /// The entry as written.
        name: String,
    },
    /// A requested write path lies outside every operator write path.
    #[error("requested write path {} lies outside the operator's write paths; the operator policy can only be narrowed", path.display())]
    WriteOutsideOperator {
        /// The requested (resolved) path.
        path: PathBuf,
    },
    /// A nested run's write path lies outside every write path of the run
    /// it is nested in ([`crate::ResolvedPolicy::nested_within`]).
    #[error("the nested run's write path {} lies outside the outer run's write paths; a nested run can only narrow the outer run's policy", path.display())]
    WriteOutsideOuterRun {
        /// The nested run's (resolved) path.
        path: PathBuf,
    },
    /// A deny path holds a glob character and names no existing path.
    #[error("policy field `{field}` entry {value:?} contains the glob character `{glob}`, and deny paths are not globs: list each path to deny (a literal name with `{glob}` is accepted when it exists)")]
    GlobInDenyPath {
        /// Field name, e.g. `read_deny_paths`.
        field: &'static str,
        /// The value as written.
        value: String,
        /// The glob character found.
        glob: char,
    },
    /// A write path lies inside a read-denied path.
    #[error("write path {} lies inside the read-denied path {}: the command could write there but not read it back; remove one of the two", write.display(), deny.display())]
    WriteInsideReadDeny {
        /// The write path.
        write: PathBuf,
        /// The read-deny path containing it.
        deny: PathBuf,
    },
    /// A requested UNIX socket is not on the operator's allow list.
    #[error("requested UNIX socket {} is not among the operator's allow_unix_sockets; the operator policy can only be narrowed", path.display())]
    UnixSocketOutsideOperator {
        /// The requested (resolved) socket path.
        path: PathBuf,
    },
    /// Destinations are listed with the network off.
    #[error("allow_net ({rule}, ...) lists destinations but the network is off: drop `network = false` / --no-network to allow only those destinations")]
    AllowNetWithoutNetwork {
        /// The first listed destination.
        rule: String,
    },
    /// A requested destination is not within the operator's `allow_net`.
    #[error("requested destination {rule} is not within the operator's allow_net; the operator policy can only be narrowed")]
    EgressOutsideOperator {
        /// The requested rule.
        rule: String,
    },
    /// An exact destination rule names a host and port a request rule
    /// intercepts: whether that host:port is to be reached whole or request
    /// by request is ambiguous.
    #[error("allow_net / --allow-net {net} and requests / --allow-request '{request}' both name {host}:{port}: an intercepted host is reached only through the proxy, request by request, never directly; drop the --allow-net rule to have only the requests the request rules admit, or the request rules for {host}:{port} to reach the whole host")]
    AllowNetIntercepted {
        /// The destination rule, as written.
        net: String,
        /// The request rule.
        request: String,
        /// The host both name.
        host: String,
        /// The port both name.
        port: u16,
    },
    /// A requested per-request rule is not among the operator's `requests`,
    /// or (the operator listing none) its host is not within the operator's
    /// `allow_net`.
    #[error("requested request rule '{rule}' is not among the operator's requests (or its host not within the operator's allow_net); the operator policy can only be narrowed")]
    RequestOutsideOperator {
        /// The requested rule.
        rule: String,
    },
    /// The op envelope has no command.
    #[error("the op's argv is empty; give the program to run")]
    EmptyArgv,
}

/// Operator config that cannot be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A user config where `$XDG_CONFIG_HOME` or `$HOME` names it, which
    /// is not read: the user config is read from the passwd home only.
    #[error(
        "config {} is not read: the user config is read only from {} (the passwd home; \
         $XDG_CONFIG_HOME and $HOME no longer move it, since a run started with another \
         environment could write there); move it there, or name it with --config or \
         SANDBOX_CONFIG (a path outside every run's write paths)",
        path.display(),
        read_from.display()
    )]
    NotRead {
        /// The config found where the environment names it.
        path: PathBuf,
        /// Where the user config is read from.
        read_from: PathBuf,
    },
    /// The file could not be read.
    #[error("cannot read config {}: {source}", path.display())]
    Read {
        /// Config path.
        path: PathBuf,
        /// OS error.
        source: std::io::Error,
    },
    /// The path names something other than a regular file (a FIFO, device,
    /// socket or directory).
    #[error("config {} is not a regular file; name a TOML file", path.display())]
    NotRegular {
        /// Config path.
        path: PathBuf,
    },
    /// The file is larger than an operator config may be.
    #[error("config {} is larger than {limit} bytes; an operator config is a small TOML file", path.display())]
    TooLarge {
        /// Config path.
        path: PathBuf,
        /// The bound, in bytes.
        limit: u64,
    },
    /// The TOML is malformed or has unknown keys.
    #[error("invalid config {}: {message}", path.display())]
    Parse {
        /// Config path.
        path: PathBuf,
        /// Parser message (names the key and line).
        message: String,
    },
}

/// Why a backend could not confine, for callers that branch on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum UnavailableKind {
    /// No backend confines commands in this build or on this OS (or the
    /// chosen one does not exist here).
    NoBackend,
    /// The kernel has no Landlock: built without it, or too old.
    KernelLacksLandlock,
    /// The kernel has Landlock, but it is disabled at boot (`lsm=`).
    LandlockDisabled,
    /// The backend did not pass its enforcement self-test.
    SelfTestFailed,
    /// The enforcement self-test was interfered with: what its probe
    /// launches reported and what its scratch directory showed disagree
    /// (another process changed the scratch), again in fresh scratches. It
    /// says nothing of the host, so it is never a reason to run unconfined:
    /// `on_unsupported` does not apply, resolution fails closed.
    SelfTestInterfered,
    /// The enforcement self-test was inconclusive: no forbidden action was
    /// seen to get through, but a control was not seen or a probe launch
    /// could not start or finish (a fork refused with `EAGAIN` under a full
    /// `RLIMIT_NPROC`, `ENOMEM`, `EMFILE`, a timeout, ...). It says nothing
    /// of the backend, so, like [`SelfTestInterfered`](Self::SelfTestInterfered),
    /// `on_unsupported` does not apply: resolution fails closed, and the
    /// verdict is not cached.
    SelfTestInconclusive,
    /// Preparing the confinement failed (ruleset, seccomp program, broker,
    /// helper binary, ...).
    Setup,
    /// Anything else.
    Other,
}

/// The sandbox could not confine the command; nothing was run.
///
/// [`kind`](Self::kind) says why in a form to match on; the underlying
/// error, when there is one (a `LandlockError`, a `GateFailure`, an OS
/// error), is kept as the [`source`](std::error::Error::source).
#[derive(Debug, Clone)]
pub struct SandboxUnavailable {
    /// Backend that was tried.
    pub backend: String,
    /// What was attempted and what was seen.
    pub reason: String,
    kind: UnavailableKind,
    source: Option<std::sync::Arc<dyn std::error::Error + Send + Sync + 'static>>,
}

impl std::fmt::Display for SandboxUnavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{SANDBOX_UNAVAILABLE}: backend `{}`: {}",
            self.backend, self.reason
        )
    }
}

impl std::error::Error for SandboxUnavailable {
    /// The error itself, not the `Arc` holding it, so callers can downcast.
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.source {
            Some(source) => Some(source.as_ref()),
            None => None,
        }
    }
}

/// Equal when backend, reason and kind are (the source is not compared).
impl PartialEq for SandboxUnavailable {
    fn eq(&self, other: &Self) -> bool {
        self.backend == other.backend && self.reason == other.reason && self.kind == other.kind
    }
}

impl Eq for SandboxUnavailable {}

impl SandboxUnavailable {
    /// Builds the error, of kind [`UnavailableKind::Other`] and without a source.
    pub fn new(backend: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            backend: backend.into(),
            reason: reason.into(),
            kind: UnavailableKind::Other,
            source: None,
        }
    }

    /// The same error of kind `kind`.
    pub fn with_kind(self, kind: UnavailableKind) -> Self {
        Self { kind, ..self }
    }

    /// The same error caused by `source` (kept for [`std::error::Error::source`]).
    pub fn with_source(self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self {
            source: Some(std::sync::Arc::new(source)),
            ..self
        }
    }

    /// Why the backend could not confine.
    pub fn kind(&self) -> UnavailableKind {
        self.kind
    }

    /// The stable code, [`SANDBOX_UNAVAILABLE`].
    pub fn code(&self) -> &'static str {
        SANDBOX_UNAVAILABLE
    }
}
