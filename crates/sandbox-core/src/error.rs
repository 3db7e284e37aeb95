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
    /// The op envelope has no command.
    #[error("the op's argv is empty; give the program to run")]
    EmptyArgv,
}

/// Operator config that cannot be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config {}: {source}", path.display())]
    Read {
        /// Config path.
        path: PathBuf,
        /// OS error.
        source: std::io::Error,
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

/// The sandbox could not confine the command; nothing was run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{SANDBOX_UNAVAILABLE}: backend `{backend}`: {reason}")]
pub struct SandboxUnavailable {
    /// Backend that was tried.
    pub backend: String,
    /// What was attempted and what was seen.
    pub reason: String,
}

impl SandboxUnavailable {
    /// Builds the error.
    pub fn new(backend: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            backend: backend.into(),
            reason: reason.into(),
        }
    }

    /// The stable code, [`SANDBOX_UNAVAILABLE`].
    pub fn code(&self) -> &'static str {
        SANDBOX_UNAVAILABLE
    }
}
