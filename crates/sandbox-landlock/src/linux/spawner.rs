//! Many launches under one policy: a thread confines itself once, then
//! spawns every command, which inherits its confinement.
//!
//! `no_new_privs`, the capability sets, the Landlock domain and the seccomp
//! filter all belong to a thread, not to the whole process, and a child
//! inherits those of the thread that created it: prctl(2) on
//! `PR_SET_NO_NEW_PRIVS` (per thread, inherited across fork and clone),
//! capabilities(7) (the sets are per thread),
//! Documentation/userspace-api/landlock.rst (`landlock_restrict_self`
//! confines the calling thread and its future children) and seccomp(2)
//! (without `SECCOMP_FILTER_FLAG_TSYNC` a filter applies to the calling
//! thread). `tests/it/spawner.rs`,
//! `children_are_confined_and_the_rest_of_the_process_is_not`, shows it.
//! So the thread applies the
//! same [`PreparedLandlock::apply_in_child`] a forked child would, and from
//! then each `Command::spawn` has no filter to attach (measured: about 1.2x
//! a plain spawn, against 1.5x for the Command form). The rest of the
//! process is untouched.
//!
//! Each child nests one more Landlock domain beneath the spawner thread's,
//! after fork, with a ruleset that handles nothing and scopes signals
//! (ABI >= 6): a child in the thread's own domain could `tgkill` that
//! thread (Landlock's signal scoping admits the same domain,
//! Documentation/userspace-api/landlock.rst, "Scoped access"), and a
//! SIGKILL or SIGSTOP to one thread kills or stops the whole hosting
//! process; it could also read that process's memory through
//! `/proc/<pid>/task/<tid>/mem` (ptrace-class access is admitted into the
//! same domain, "Ptrace restrictions"). `tests/it/spawner.rs`,
//! `children_cannot_signal_the_spawner`, attacks every thread. The filter,
//! inherited from the thread, admits `landlock_restrict_self` only with
//! that ruleset's fd number and no flags (`FilterSpec::child_layer`); the
//! fd is closed on exec. The hook makes std fork instead of `posix_spawn`.
//! What that admits beyond the hook: a command cannot make a ruleset
//! (`landlock_create_ruleset` is refused under a broker), so only one handed
//! to it from outside, put at that fd number, could nest a domain, and the
//! broker's calls would not be narrowed by it (the reason nested Landlock is
//! refused under a broker at all); the policy's own limits hold either way.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::sync::mpsc;
use std::thread::JoinHandle;

use sandbox_core::{EnforcementReport, Mediation, ResolvedPolicy, RunningSupervisor, Supervisor};

use super::PreparedLandlock;
use crate::LandlockError;

type Job = (Command, mpsc::SyncSender<io::Result<Child>>);

/// Spawns commands confined by one policy (see [`LandlockBackend::spawner`]).
///
/// Each child is confined exactly as the Command form would confine it, and
/// its metadata writes go to the spawner's broker. Dropping the spawner (or
/// [`ConfinedSpawner::finish`]) stops its thread and its broker; children
/// still running keep their confinement, and brokered calls they make after
/// that fail with `ENOSYS`.
///
/// [`LandlockBackend::spawner`]: crate::LandlockBackend::spawner
#[derive(Debug)]
pub struct ConfinedSpawner {
    jobs: Option<mpsc::Sender<Job>>,
    thread: Option<JoinHandle<()>>,
    supervisor: Option<Box<dyn RunningSupervisor>>,
    report: EnforcementReport,
    /// The ruleset each child nests its own domain with (ABI >= 6).
    layer: Option<OwnedFd>,
}

impl ConfinedSpawner {
    pub(crate) fn start(
        prepared: PreparedLandlock,
        supervisor: Option<Box<dyn Supervisor>>,
        layer: Option<OwnedFd>,
    ) -> Result<Self, LandlockError> {
        let report = prepared.report().clone();
        let (jobs, queue) = mpsc::channel::<Job>();
        // A first thread enters the run's own Landlock domain, starts the
        // spawner thread (which confines itself further, so every command's
        // domain is nested beneath it) and then the broker, whose threads so
        // share the run's domain (see `PreparedLandlock::enter_domain`).
        let domain = std::thread::Builder::new()
            .name("sandbox-domain".into())
            .spawn(move || {
                if supervisor.is_some() {
                    prepared.enter_domain().map_err(|errno| {
                        format!(
                            "entering the run's domain failed: {}",
                            io::Error::from_raw_os_error(errno)
                        )
                    })?;
                }
                let (ready_tx, ready_rx) = mpsc::sync_channel::<Result<(), i32>>(1);
                let thread = std::thread::Builder::new()
                    .name("sandbox-spawner".into())
                    .spawn(move || {
                        // Confines this thread, for good: it only ever spawns.
                        let applied = prepared.apply_in_child();
                        drop(prepared);
                        let confined = applied.is_ok();
                        let _ = ready_tx.send(applied);
                        if confined {
                            for (mut cmd, reply) in queue {
                                let _ = reply.send(cmd.spawn());
                            }
                        }
                    })
                    .map_err(|e| format!("starting its thread failed: {e}"))?;
                match ready_rx.recv() {
                    Ok(Ok(())) => {}
                    Ok(Err(errno)) => {
                        return Err(format!(
                            "confining its thread failed: {}",
                            io::Error::from_raw_os_error(errno)
                        ))
                    }
                    Err(_) => return Err("its thread ended before confining itself".into()),
                }
                let running = supervisor
                    .map(|s| {
                        let mut running = s.start()?;
                        running.confirm().map(|()| running)
                    })
                    .transpose()
                    .map_err(|e| e.to_string())?;
                Ok((thread, running))
            })
            .map_err(|e| LandlockError::Spawner(format!("starting its thread failed: {e}")))?;
        let (thread, running) = domain
            .join()
            .map_err(|_| LandlockError::Spawner("its thread panicked".into()))?
            .map_err(LandlockError::Spawner)?;
        Ok(ConfinedSpawner {
            jobs: Some(jobs),
            thread: Some(thread),
            supervisor: running,
            report,
            layer,
        })
    }

    /// Spawns `cmd`, confined, in a Landlock domain nested beneath the
    /// spawner thread's (ABI >= 6). `pre_exec` hooks on `cmd` run before
    /// that restriction.
    pub fn spawn(&self, mut cmd: Command) -> io::Result<Child> {
        let ended = || io::Error::other("the spawner's thread has ended");
        if let Some(layer) = &self.layer {
            let fd = layer.as_raw_fd();
            // SAFETY: the hook makes one raw syscall on an fd this spawner
            // keeps open until its thread has ended; no allocation, no lock.
            unsafe {
                cmd.pre_exec(move || {
                    super::child::restrict_self(fd).map_err(io::Error::from_raw_os_error)
                });
            }
        }
        let (reply, answer) = mpsc::sync_channel(1);
        self.jobs
            .as_ref()
            .ok_or_else(ended)?
            .send((cmd, reply))
            .map_err(|_| ended())?;
        answer.recv().map_err(|_| ended())?
    }

    /// What is enforced on every child.
    pub fn report(&self) -> &EnforcementReport {
        &self.report
    }

    /// Stops the thread and the broker; returns what the broker mediated.
    pub fn finish(mut self) -> Option<Mediation> {
        self.stop()
    }

    fn stop(&mut self) -> Option<Mediation> {
        drop(self.jobs.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        self.supervisor.take().map(|s| s.finish())
    }
}

impl Drop for ConfinedSpawner {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Refuses a policy the spawner cannot serve.
pub(crate) fn check(policy: &ResolvedPolicy) -> Result<(), LandlockError> {
    if policy.deny_subprocess() {
        // The thread would carry the filter that refuses new processes.
        return Err(LandlockError::Spawner(
            "a policy with deny_subprocess cannot use a spawner (its thread could not start \
             the command); use the Command form"
                .into(),
        ));
    }
    Ok(())
}
