//! Typed errors of the Landlock backend.

use std::path::PathBuf;

/// Why confinement could not be prepared.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LandlockError {
    /// The running kernel offers no Landlock.
    #[error("Landlock is not available on this kernel: {reason}")]
    Unsupported {
        /// What the kernel answered, and what to do about it.
        reason: String,
    },
    /// The kernel has Landlock, but it is disabled at boot (`lsm=`), or a
    /// seccomp filter around this process answers for it.
    #[error("Landlock is not available here: {reason}")]
    Disabled {
        /// What the kernel answered, and what to do about it.
        reason: String,
    },
    /// A path the policy grants could not be opened for a rule.
    #[error("cannot open {} to grant it in the Landlock ruleset: {source}; check that it exists and is accessible", path.display())]
    OpenPath {
        /// The path.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The kernel or the landlock crate refused the ruleset.
    #[error("building the Landlock ruleset failed while {attempted}: {source}")]
    Ruleset {
        /// What was being done (names the path for rules).
        attempted: String,
        /// The error the landlock crate returned.
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// The seccomp program could not be compiled.
    #[cfg(target_os = "linux")]
    #[error(transparent)]
    Seccomp(#[from] sandbox_seccomp::SeccompError),
    /// The parent's capabilities could not be read.
    #[error("reading the process capabilities (capget) failed: {0}")]
    Capabilities(std::io::Error),
    /// The metadata broker could not be set up.
    #[cfg(target_os = "linux")]
    #[error("setting up the metadata broker failed: {0}")]
    Broker(#[source] sandbox_broker::BrokerError),
    /// The launching thread's domain could not be prepared.
    #[error("preparing the launch domain (a duplicate of the ruleset fd) failed: {0}")]
    Domain(std::io::Error),
    /// A confined spawner could not be started.
    #[error("the confined spawner: {0}")]
    Spawner(String),
}
