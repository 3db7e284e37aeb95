//! Errors of setting up or running the broker.

use std::io;
use std::path::PathBuf;

/// Why the broker could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BrokerError {
    /// A write path could not be opened as a directory.
    #[error("cannot open write path {path} for the broker: {source}; check that it exists and is a directory")]
    OpenWritePath {
        /// The write path.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// The shared-memory directory (`/dev/shm`) could not be opened.
    #[error("cannot open {path} for the run's own shared memory: {source}")]
    OpenSharedMemory {
        /// The directory.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// The kernel refused a seccomp user-notification request.
    #[error("seccomp user notification: {what} failed: {source}; the kernel needs Linux >= 5.9 with seccomp user notification")]
    Notify {
        /// What was attempted.
        what: &'static str,
        /// The cause.
        source: io::Error,
    },
    /// Passing the listener fd over the socket failed.
    #[error("receiving the listener fd over the socket failed: {reason}")]
    FdPassing {
        /// What went wrong.
        reason: String,
    },
    /// The broker thread could not read its own credentials, which it takes
    /// the caller's from and returns to on every request.
    #[error("the broker thread cannot read its own credentials: {0}")]
    OwnCredentials(io::Error),
    /// The broker thread could not be started.
    #[error("cannot start the broker thread: {0}")]
    Thread(io::Error),
}
