//! The one launch of a confined command, shared by the runner
//! (`sandbox::runner::run`, `sandbox run`) and the enforcement self-test's probes,
//! so that what the self-test witnesses is what runs: the same spawn, the
//! same containment, the same bounded wait.
//!
//! * [`spawn`]: a vfork-style spawn that runs the confining hooks in the
//!   child, into the run's cgroup when it has one.
//! * [`Containment`]: how the run's processes are held together and ended.
//! * [`RunLimits`]: memory, process and CPU limits held by cgroups.
//! * [`locate`]: the program, found as a shell would.
//! * [`Watch`]: a bounded wait for the main process.
//! * [`launch()`]: the one sequence that ties them together, the backend's
//!   preparation included: nothing else prepares a launch.
//!
//! # Threat table
//! The command (hostile, perhaps root with its capabilities dropped) controls
//! every process it starts, their sessions and groups where the filter allows,
//! their timing, and how it dies; a runner in another namespace, or one that
//! was killed, shares the parent cgroup. What each part takes from them, and
//! the tests that attack it:
//!
//! | part | who controls what | held by | attacked by |
//! |---|---|---|---|
//! | the run's processes ([`Containment`]) | double forks, setsid, fork relays, subreapers, processes that ignore SIGTERM | a cgroup of the run's own (`cgroup.kill`), else a process group the filter keeps every process in; the run ends only when `cgroup.events` says no live process is left | `tests/tests/it/lifetime.rs` (`nothing_outlives_a_run_*`, `the_timeout_ends_everything_promptly`) |
//! | the runner's death or stop | SIGKILL leaves survivors to the next run's sweep; SIGINT, SIGQUIT, SIGTERM, SIGHUP to the CLI reach the command's process group as a shell passes them on, and the whole run ends after the grace period ([`stop_runs_on`]); the command cannot signal the runner (Landlock signal scoping) | parent-death signal on the main process; the sweep of stale cgroups | `lifetime.rs` (`a_killed_runner_leaves_nothing_past_the_next_run`, `a_stop_signal_to_the_runner_ends_the_whole_run`, `a_stop_signal_reaches_the_command_as_from_a_terminal`, `a_stop_signal_at_any_moment_leaves_nothing`) |
//! | per-run cgroup names and the sweep | a survivor may take a dead runner's pid; runners in other pid or time namespaces see other pids and start times; a dead runner may stay a zombie | names carry the pid and start time as this runner's `/proc` shows them, that `/proc` and the time namespace, and a random token; a sweep judges only names made with its own `/proc` and time namespace (others wait for a runner there); a zombie is dead | `contain::tests`, `lifetime.rs` (`a_reused_runner_pid_does_not_shield_survivors`, `a_runner_in_other_namespaces_does_not_end_a_live_run`) |
//! | the launching thread | its exit fires the main process's parent-death signal; it ends the run from inside the run's Landlock domain | it spawns, waits for, ends and reaps the run itself, so it outlives the child, and is joined before the run returns; what ending the run needs (the cgroup's `cgroup.procs`, `cgroup.kill`, `cgroup.events`) is opened before it enters the domain | `tests/tests/it/launch_threads.rs`, `lifetime.rs` (`a_read_denial_over_the_runs_cgroup_does_not_stop_its_end`) |
//! | the runner's own work for the run | a flood of brokered calls (CPU per request), callers left waiting in brokered calls (FIFO writers, blocking connects); neither is in the run's cgroup, whose threads are the command's alone | the limits asked for (`LaunchOptions::limits`) reach the backend's supervisor: the broker draws its CPU time from a bucket at the `--cpu` rate and runs at most `--pids` connect workers; FIFO writers hold no runner thread (`sandbox_broker::RunBudget`, docs/broker.md) | `tests/tests/it/broker_budget.rs` |
//! | the fds a run inherits and the cancel fd ([`Launch::inherit`](launch::Launch), `inherit_also`, `child_layer`, `cancel`) | the command holds the inherited fds (the nest socket, `sandbox::nest`; a session zygote's control socket and signal-scoping ruleset, `sandbox::zygote`, which the zygote makes close-on-exec for its own commands) | only those fds escape the close-on-exec sweep, set in the child after it; the filter admits `landlock_restrict_self` only with the `child_layer` fd number and no flags; the cancel fd is the runner's own | `tests/tests/it/nested.rs`, `tests/tests/it/session.rs` (`a_shared_commands_descriptors_are_its_stdio_and_the_nest_socket`) |
//! | the terminal the command inherits | its settings (`stty raw -echo -isig -ixon`), its output stopped (`tcflow(TCOOFF)`): both outlive the command, and a stopped output blocks every later writer, the runner's summary and the user's shell | the launch saves each terminal among the command's stdio before it starts and, once every process of the run has ended (exit, timeout, stop signal, a failed launch), sets its settings again where they changed (`TCSANOW`) and restarts its output (`TCOON`), with `SIGTTOU` blocked for a background runner; the filter refuses `TCOOFF` and `TCIOFF` (`sandbox_seccomp::DENIED_IOCTL_ARGS`) | `terminal::tests`, `tests/tests/it/terminal.rs` |
//! | the broker's listener channel | a child that fails before sending; other forks of the caller holding a copy of the child's end | the broker's receive is shut down when no listener will come | `launch_threads.rs` (`a_child_that_fails_before_its_listener_fails_at_once_while_the_caller_forks`) |
#![warn(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

pub mod contain;
pub mod fds;
mod launch;
pub mod limit;
mod locate;
pub mod spawn;
mod terminal;
mod wait;

pub use contain::{Containment, ContainmentKind};
pub use launch::{launch, BeforeRemoval, Contained, Launch, LaunchError, Launched, RunGroups};
pub use limit::{LimitKind, LimitRecord, RunLimits};
pub use locate::{locate, LocateError};
pub use wait::{stop_requested, stop_runs_on, StopSignals, Waited, Watch};
