//! Seatbelt (macOS) confinement: a [`ResolvedPolicy`](sandbox_core::ResolvedPolicy)
//! becomes an SBPL profile for `/usr/bin/sandbox-exec`.
//!
//! * [`profile`] generates the profile on any OS: `(deny default)`, a fixed
//!   base, then one commented section per policy part. Paths enter only as
//!   `-D NAME=VALUE` parameters referenced by `(param "NAME")`, so no path can
//!   change the profile's structure; reviewers read profiles as snapshots.
//! * [`conformance`] checks the generated text per axis (profile-text strength).
//! * `SeatbeltBackend` (macOS only) runs commands under `sandbox-exec`.
#![warn(missing_docs)]
#![warn(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

pub mod conformance;
mod error;
mod paths;
mod profile;
mod report;
pub mod sbpl;

#[cfg(target_os = "macos")]
mod backend;

#[cfg(target_os = "macos")]
pub use backend::SeatbeltBackend;
pub use error::SeatbeltError;
pub use paths::macos_canonical;
pub use profile::{
    profile, profile_for_run, ProfileInput, SeatbeltProfile, ANCESTOR_PARAM, READ_DENY_PARAM,
    SANDBOX_EXEC, TERMINAL_PARAM, UNIX_SOCKET_PARAM, WRITE_DENY_PARAM, WRITE_PARAM,
};
pub use report::{enforcement_report, AXES, BACKEND_NAME};
