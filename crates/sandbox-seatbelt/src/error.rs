//! Typed errors of the profile generator.

use std::path::PathBuf;

/// A policy that cannot be expressed as a Seatbelt profile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SeatbeltError {
    /// A path cannot be passed to `sandbox-exec` as a `-D` parameter.
    #[error("seatbelt: policy field `{field}` has path {path:?} that cannot be passed to sandbox-exec: {reason}; rename the path or remove it from `{field}`")]
    UnusablePath {
        /// Policy field, e.g. `write_paths`.
        field: &'static str,
        /// The path as given (printed escaped).
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// An egress rule Seatbelt cannot express: it filters remote addresses
    /// only as `localhost:PORT` or `*:PORT`.
    #[error("seatbelt: egress rule {rule} cannot be enforced on macOS, which filters remote addresses only as localhost:PORT; list host names instead (they go through the runner's proxy)")]
    UnsupportedEgress {
        /// The rule.
        rule: String,
    },
}
