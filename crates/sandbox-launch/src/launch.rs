//! The launch sequence every confined command takes, a run's and each of
//! the self-test's probes alike: the runner's hooks then the backend's,
//! spawned into the run's containment from the backend's launch domain,
//! the supervisor started, a bounded wait, every process of the run ended,
//! the supervisor's record collected.

use std::process::ExitStatus;
use std::time::{Duration, Instant};

use sandbox_core::{
    LaunchDomain, Mediation, PreExecHook, RunningSupervisor, SandboxUnavailable, Supervisor,
};

use crate::contain::{Containment, ContainmentKind};
use crate::limit::RunLimits;
use crate::spawn::{self, SpawnPlan};
use crate::wait::{Waited, Watch};

/// What a backend prepared for one command, besides its argv.
#[derive(Debug, Default)]
pub struct Confined {
    /// The backend's hook, run in the child after the runner's own.
    pub hook: Option<PreExecHook>,
    /// The backend's supervisor (the broker), started just before the child.
    pub supervisor: Option<Box<dyn Supervisor>>,
    /// The confinement of the thread that spawns the child.
    pub domain: Option<LaunchDomain>,
}

/// How a launch ended.
#[derive(Debug)]
pub struct Launched {
    /// The main process's status.
    pub status: ExitStatus,
    /// Whether the deadline passed before the main process exited.
    pub timed_out: bool,
    /// The stop signal ([`crate::wait::stop_runs_on`]) that ended the run
    /// before its main process exited, if one did.
    pub stopped_by: Option<i32>,
    /// Processes besides the main one that were still there at the end,
    /// and were ended.
    pub others: usize,
    /// The supervisor's record, when there was one.
    pub mediation: Option<Mediation>,
}

/// Why a launch did not run to its end.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LaunchError {
    /// The child could not be started, or one of its hooks failed (the
    /// error then carries the hook's tagged errno, see
    /// [`sandbox_core::decode_pre_exec_error`]).
    #[error("starting the command failed: {0}")]
    Spawn(#[source] std::io::Error),
    /// The backend's supervisor did not start (the child was ended).
    #[error(transparent)]
    Supervisor(SandboxUnavailable),
    /// The launching thread could not enter the backend's domain.
    #[error("entering the launch domain failed: {0}")]
    Domain(#[source] std::io::Error),
    /// Reaping the main process failed.
    #[error("waiting for the command failed: {0}")]
    Wait(#[source] std::io::Error),
}

/// The launch options a run held by `containment` needs from its backend.
pub fn launch_options(containment: &Containment) -> sandbox_core::LaunchOptions {
    sandbox_core::LaunchOptions::default()
        .with_process_group_held(containment.kind() == ContainmentKind::ProcessGroup)
}

/// Starts `plan` held by `containment` and limited by `limits`, with the
/// runner's setup (its own session, parent-death signal, inherited fds
/// closed, `no_new_privs` when asked) then `confined`'s hook; waits until
/// it exits or `deadline` passes; then ends every process of the run
/// (SIGTERM, `grace`, SIGKILL) and finishes the supervisor. A stop signal
/// ([`crate::wait::stop_runs_on`]) is passed on to the command's process
/// group first, and the run ends `grace` after it (SIGTERM to what is left,
/// SIGKILL at once if the grace is spent).
///
/// In process-group mode the calling process becomes a child subreaper
/// (`PR_SET_CHILD_SUBREAPER`, kept), so the run's orphans are reaped here.
/// `plan.cgroup` and `plan.process_group` are set from `containment`.
pub fn launch(
    plan: &SpawnPlan<'_>,
    containment: &Containment,
    limits: &RunLimits,
    no_new_privs: bool,
    confined: Confined,
    deadline: Option<Instant>,
    grace: Duration,
) -> Result<Launched, LaunchError> {
    // The session hook makes the group (a group leader cannot start a
    // session), so `process_group` is off.
    let plan = SpawnPlan {
        process_group: false,
        cgroup: containment.cgroup(),
        ..*plan
    };
    let hooks: Vec<PreExecHook> = limits
        .join_hook()
        .into_iter()
        .chain(std::iter::once(spawn::session_hook(no_new_privs)))
        .chain(confined.hook)
        .collect();
    if containment.kind() == ContainmentKind::ProcessGroup {
        become_subreaper();
    }
    let supervisor = confined.supervisor;
    // The supervisor is started, then the child spawned, waited for and
    // its run ended, all on one thread inside the backend's domain (the
    // broker's threads then share it). The supervisor starts first so that
    // it gets ready while the child execs. The hooks (and the fds they hold
    // for the child) are gone once `spawn` returns, so a supervisor's
    // channel then sees only the child's end.
    let start = move || {
        let mut running = supervisor
            .map(|s| s.start())
            .transpose()
            .map_err(|e| (None, LaunchError::Supervisor(e)))?;
        let child = spawn::spawn(&plan, hooks).map_err(|e| (None, LaunchError::Spawn(e)))?;
        if let Some(running) = running.as_mut() {
            running
                .confirm()
                .map_err(|e| (Some(child.pid), LaunchError::Supervisor(e)))?;
        }
        Ok((child.pid, running))
    };
    type Started = Result<
        (libc::pid_t, Option<Box<dyn RunningSupervisor>>),
        (Option<libc::pid_t>, LaunchError),
    >;
    let body = |started: Started| {
        let (pid, running) = match started {
            Ok(started) => started,
            Err((pid, err)) => {
                if let Some(pid) = pid {
                    // Not killed again once reaped: its pid may be reused.
                    if containment.end(pid, Duration::ZERO).main.is_none() {
                        spawn::kill_and_reap(pid);
                    }
                }
                return Err(err);
            }
        };
        let watch = Watch::new(pid);
        let waited = watch.wait_exit(deadline);
        let mut grace_left = grace;
        if let Waited::Stopped(sig) = waited {
            // As a shell passes a terminal's signal on: to the command's
            // process group (the session hook made the main process its
            // leader; unreaped, its pid names no other group), then the
            // grace period, each later stop signal passed on too.
            let mut forward = |sig: i32| {
                // SAFETY: kill has no memory effects; the run's own group.
                unsafe { libc::kill(-pid, sig) };
            };
            forward(sig);
            let until = Instant::now() + grace;
            watch.wait_exit_forwarding(until, &mut forward);
            grace_left = until.saturating_duration_since(Instant::now());
        }
        // Every process of the run ends here, the main one too on a timeout
        // or a stop signal it outlived the grace for.
        let ended = containment.end(pid, grace_left);
        let status = match ended.main {
            Some(status) => status,
            None => spawn::wait(pid).map_err(LaunchError::Wait)?,
        };
        Ok(Launched {
            status,
            timed_out: waited == Waited::TimedOut,
            stopped_by: match waited {
                Waited::Stopped(sig) => Some(sig),
                _ => None,
            },
            others: ended.others,
            mediation: running.map(|r| r.finish()),
        })
    };
    LaunchDomain::launch(confined.domain, start, body).map_err(LaunchError::Domain)?
}

/// Makes the calling process a child subreaper, once: orphans of a run held
/// by its process group are re-parented here and reaped by the runner
/// (Linux only).
fn become_subreaper() {
    #[cfg(target_os = "linux")]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            // SAFETY: prctl with integer arguments has no memory effects.
            unsafe {
                libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
            }
        });
    }
}
