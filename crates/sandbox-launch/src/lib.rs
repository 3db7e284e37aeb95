//! The one launch of a confined command, shared by the runner
//! (`sandbox::run`, `sandbox run`) and the enforcement self-test's probes,
//! so that what the self-test witnesses is what runs: the same spawn, the
//! same containment, the same bounded wait.
//!
//! * [`spawn`]: a vfork-style spawn that runs the confining hooks in the
//!   child, into the run's cgroup when it has one.
//! * [`Containment`]: how the run's processes are held together and ended.
//! * [`RunLimits`]: memory, process and CPU limits held by cgroups.
//! * [`locate`]: the program, found as a shell would.
//! * [`Watch`]: a bounded wait for the main process.
//! * [`launch()`]: the sequence that ties them together.
#![warn(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

pub mod contain;
mod launch;
pub mod limit;
mod locate;
pub mod spawn;
mod wait;

pub use contain::{Containment, ContainmentKind};
pub use launch::{launch, launch_options, Confined, LaunchError, Launched};
pub use limit::{LimitKind, LimitRecord, RunLimits};
pub use locate::{locate, LocateError};
pub use wait::{stop_requested, stop_runs_on, Waited, Watch};
