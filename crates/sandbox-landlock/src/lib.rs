//! Linux sandbox backend: Landlock filesystem, network and scope rules plus the
//! `sandbox-seccomp` filter, prepared in the parent and applied in the child.
//!
//! * [`prepare`] builds a [`PreparedLandlock`] from a [`ResolvedPolicy`]
//!   (ruleset fd, seccomp program, [`EnforcementReport`]).
//! * [`PreparedLandlock::apply_in_child`] confines the calling process with
//!   async-signal-safe syscalls only, for use between `fork` and `exec`.
//! * [`LandlockBackend`] implements [`sandbox_core::Backend`] on top of both.
//! * [`LandlockBackend::spawner`] confines one thread once and spawns many
//!   commands from it ([`ConfinedSpawner`]): the fast path for launching
//!   repeatedly under one policy.
//!
//! On other operating systems the crate compiles, but [`LandlockBackend::new`]
//! and [`prepare`] report that Landlock is unavailable.
//!
//! [`ResolvedPolicy`]: sandbox_core::ResolvedPolicy
//! [`EnforcementReport`]: sandbox_core::EnforcementReport
#![warn(missing_docs)]

mod error;

pub use error::LandlockError;

#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
pub use linux::{
    abi::{detect_abi, KernelAbi, ABI_CEILING_ENV, TESTED_ABI},
    backend::{LandlockBackend, SANDBOX_BIN_ENV},
    prepare,
    spawner::ConfinedSpawner,
    PreparedLandlock,
};

#[cfg(not(target_os = "linux"))]
mod other;
#[cfg(not(target_os = "linux"))]
pub use other::{prepare, LandlockBackend, PreparedLandlock};
