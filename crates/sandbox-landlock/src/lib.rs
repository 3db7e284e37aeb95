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
//! `LandlockBackend` is Landlock plus the seccomp filter plus the broker (a
//! seccomp user-notification supervisor that performs metadata writes and,
//! when a deny path lies beneath a write path, writing opens and entry calls
//! for the command); the [`Confinement`](sandbox_core::Confinement) it
//! prepares carries that supervisor, to start once the command is spawned:
//!
//! ```
//! # #[cfg(target_os = "linux")]
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use sandbox_core::{Backend, ExpandContext, SandboxPolicy};
//! let out = tempfile::tempdir()?;
//! let policy = SandboxPolicy {
//!     write_paths: vec![out.path().to_string_lossy().into_owned()],
//!     ..SandboxPolicy::default()
//! }
//! .resolve(&ExpandContext::default())?;
//! let argv = ["/bin/sh".into(), "-c".into(), "touch \"$0/made\"".into(), out.path().into()];
//! let mut confinement = sandbox_landlock::LandlockBackend::new()?.prepare(&policy, &argv)?;
//! let supervisor = confinement.supervisor.take();
//! let (mut cmd, _report) = confinement.into_command().expect("argv is not empty");
//! let mut child = cmd.spawn()?;
//! drop(cmd); // the child's end of the broker's channel
//! let broker = supervisor.map(|s| s.start()).transpose()?;
//! assert!(child.wait()?.success());
//! broker.map(|b| b.finish());
//! assert!(out.path().join("made").exists());
//! # Ok(())
//! # }
//! # #[cfg(not(target_os = "linux"))]
//! # fn main() {}
//! ```
//!
//! [`ResolvedPolicy`]: sandbox_core::ResolvedPolicy
//! [`EnforcementReport`]: sandbox_core::EnforcementReport
#![warn(missing_docs)]
#![warn(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

// The `weaken-*` features drop one mechanism each, for the conformance
// proof's mutation check (`cargo xtask conformance --weaken AXIS`): a test
// build only, never one that ships.
#[cfg(all(
    not(debug_assertions),
    any(
        feature = "weaken-write",
        feature = "weaken-network",
        feature = "weaken-spawn",
        feature = "weaken-broker"
    )
))]
compile_error!(
    "the weaken-* features weaken the sandbox on purpose (conformance mutation checks); \
     they are never enabled in a release build"
);

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
