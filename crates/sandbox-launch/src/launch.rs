//! The launch every confined command takes, a run's and each of the
//! self-test's probes alike: the program located, the run's containment
//! and limits made, the backend's confinement prepared for them, the
//! runner's hooks then the backend's, spawned into the containment from the
//! backend's launch domain, the supervisor started, a bounded wait, every
//! process of the run ended, the supervisor's record collected.

use std::ffi::OsString;
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use sandbox_core::{
    decode_pre_exec_error, Backend, DnsRoute, Enforcement, EnforcementReport, LaunchDomain,
    LaunchOptions, Mediation, PreExecHook, ResolvedPolicy, ResourceLimits, RunningSupervisor,
    SandboxUnavailable, Supervisor,
};

use crate::contain::{Containment, ContainmentKind};
use crate::limit::{LimitRecord, RunLimits};
use crate::locate::{locate, LocateError};
use crate::spawn::{self, SpawnPlan};
use crate::wait::{Waited, Watch};

/// One command to launch, and how. Made with [`Launch::new`]; the other
/// fields are set as needed.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Launch<'a> {
    /// Program and arguments, as the caller gave them (the backend may put
    /// a launcher of its own in front).
    pub argv: &'a [OsString],
    /// The command's complete environment.
    pub env: &'a [(OsString, OsString)],
    /// Where a program name without a slash is looked for (the caller's
    /// `PATH`; `None`: `/usr/local/bin:/usr/bin:/bin`), see [`locate`].
    pub search_path: Option<&'a std::ffi::OsStr>,
    /// The working directory, or (`None`) the caller's.
    pub cwd: Option<&'a Path>,
    /// The command's stdin: this fd, or (`None`) the caller's own, untouched.
    pub stdin: Option<RawFd>,
    /// The command's stdout: this fd, or (`None`) the caller's own.
    pub stdout: Option<RawFd>,
    /// The command's stderr: this fd, or (`None`) the caller's own.
    pub stderr: Option<RawFd>,
    /// When the main process is ended if it has not exited (`None`: never).
    pub deadline: Option<Instant>,
    /// Time between SIGTERM and SIGKILL when ending the run.
    pub grace: Duration,
    /// Limits on the whole run (memory, processes, CPU), held by cgroups;
    /// what the runner spends on the run's behalf is held to them too.
    pub limits: ResourceLimits,
    /// Launch even when some of `limits` cannot be held here (the
    /// [`Launched::limits`] records say which held); otherwise such a launch
    /// fails with [`LaunchError::LimitsUnavailable`].
    pub allow_unlimited: bool,
    /// Record every write the confinement refuses, those the kernel refuses
    /// on its own included ([`LaunchOptions::observe_writes`]).
    pub observe_writes: bool,
    /// Refuse partial or absent enforcement ([`LaunchError::Unavailable`]
    /// naming every gap).
    pub require_full: bool,
    /// Under an allowlist: the runner's resolver and its pinned answers
    /// ([`LaunchOptions::dns`]).
    pub dns: Option<DnsRoute>,
    /// An fd the command inherits under its own number (every other fd
    /// above 2 is closed on exec): a capability the runner hands it, such
    /// as the nest socket of `sandbox::nest`.
    pub inherit: Option<RawFd>,
    /// A second fd the command inherits under its own number (the shared
    /// launch's control socket, `sandbox::zygote`).
    pub inherit_also: Option<RawFd>,
    /// A Landlock ruleset fd the command inherits under its own number and
    /// may nest beneath its domain ([`LaunchOptions::child_layer`]).
    pub child_layer: Option<RawFd>,
    /// A socket whose bytes are signals passed on to the command's process
    /// group and whose end ends the run as on its deadline
    /// ([`Watch::with_cancel`]): how a runner relays a requester's stop
    /// signals and ends a run whose requester or enclosing run is gone.
    pub cancel: Option<RawFd>,
    /// With [`Launch::cancel`]: the run's stop signals are those relayed
    /// through it alone, not this process's own ([`crate::stop_runs_on`]):
    /// a nested run, whose requester relays them (and gets the outer run's
    /// by its process group), would otherwise get each twice.
    pub relayed_signals_only: bool,
    /// Set to the main process's pid once it is started (it is a child of
    /// the launching thread until the launch returns).
    pub spawned: Option<&'a std::sync::OnceLock<libc::pid_t>>,
    /// Set, once the supervisor is confirmed, to what closes one command's
    /// share of it ([`RunningSupervisor::tap`]): for a command that forks
    /// many commands in turn (a session's shared launch).
    pub tap: Option<&'a std::sync::OnceLock<sandbox_core::MediationTap>>,
    /// Set, before the command starts, to where the run's processes and
    /// limits are held: a run launched [`Launch::within`] them is charged to
    /// this run's limits too.
    pub groups: Option<&'a std::sync::OnceLock<RunGroups>>,
    /// Another run's groups ([`Launch::groups`]) this run is held beneath:
    /// its cgroups are made inside that run's, so that run's memory,
    /// process and CPU limits bound this one too (a nested run that can
    /// only narrow).
    pub within: Option<&'a RunGroups>,
    /// Called once the main process has exited or the run is being ended
    /// (its timeout, a stop signal, a cancel), before the rest of the run's
    /// processes are ended and its cgroups removed: a runner ends there the
    /// runs it launched [`Launch::within`] this one (their cgroups are
    /// inside this run's, and their requesters among its processes).
    pub before_removal: Option<BeforeRemoval<'a>>,
    /// Called once the run's containment is made, before the command
    /// starts, with its cgroup v2 directory (`None`: held by its process
    /// group): a runner tells its egress proxy there which processes are
    /// the run's.
    pub contained: Option<Contained<'a>>,
}

/// Where one run's processes and limits are held (its cgroups), for a run
/// launched [`Launch::within`] them.
#[derive(Debug, Clone, Default)]
pub struct RunGroups {
    v2: Option<PathBuf>,
    v1: Vec<PathBuf>,
}

/// What [`Launch::before_removal`] calls.
#[derive(Clone, Copy)]
pub struct BeforeRemoval<'a>(pub &'a (dyn Fn() + Sync));

/// What [`Launch::contained`] calls.
#[derive(Clone, Copy)]
pub struct Contained<'a>(pub &'a (dyn Fn(Option<&Path>) + Sync));

impl std::fmt::Debug for Contained<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Contained")
    }
}

impl std::fmt::Debug for BeforeRemoval<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BeforeRemoval")
    }
}

impl<'a> Launch<'a> {
    /// `argv` with the environment `env`; every other field at its default:
    /// the caller's cwd and stdio, no deadline, no grace, no limits.
    pub fn new(argv: &'a [OsString], env: &'a [(OsString, OsString)]) -> Self {
        Self {
            argv,
            env,
            search_path: None,
            cwd: None,
            stdin: None,
            stdout: None,
            stderr: None,
            deadline: None,
            grace: Duration::ZERO,
            limits: ResourceLimits::default(),
            allow_unlimited: false,
            observe_writes: false,
            require_full: false,
            dns: None,
            inherit: None,
            inherit_also: None,
            child_layer: None,
            cancel: None,
            relayed_signals_only: false,
            spawned: None,
            tap: None,
            groups: None,
            within: None,
            before_removal: None,
            contained: None,
        }
    }
}

/// How a launch ended.
#[derive(Debug)]
#[non_exhaustive]
pub struct Launched {
    /// The main process's status.
    pub status: ExitStatus,
    /// Whether the deadline passed before the main process exited.
    pub timed_out: bool,
    /// Whether the cancel socket ([`Launch::cancel`]) ended the run before
    /// its main process exited.
    pub cancelled: bool,
    /// The stop signal ([`crate::wait::stop_runs_on`]) that ended the run
    /// before its main process exited, if one did.
    pub stopped_by: Option<i32>,
    /// Processes besides the main one that were still there at the end,
    /// and were ended.
    pub others: usize,
    /// The supervisor's record, when there was one.
    pub mediation: Option<Mediation>,
    /// What the backend enforced (`None` for an unconfined launch).
    pub report: Option<EnforcementReport>,
    /// How the run's processes were held.
    pub containment: ContainmentKind,
    /// How each of the limits asked for fared.
    pub limits: Vec<LimitRecord>,
}

/// Why a launch did not run to its end.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LaunchError {
    /// The argv (the caller's, or the backend's) is empty.
    #[error("nothing to run: the command is empty")]
    EmptyArgv,
    /// The working directory is not a directory (the child's `chdir` would
    /// fail with `ENOENT`, which reads as "command not found").
    #[error("the working directory {} is not a directory", .0.display())]
    WorkingDirectory(PathBuf),
    /// The program was not found, or cannot be executed.
    #[error(transparent)]
    Locate(#[from] LocateError),
    /// The run's cgroups could not be named.
    #[error("cannot name the run's cgroups: {0}")]
    Cgroup(#[source] std::io::Error),
    /// Limits asked for cannot be held here, and launching without them
    /// was not allowed (`--memory 64M (why)`, one per limit).
    #[error("the requested limits cannot be enforced here: {}", .0.join("; "))]
    LimitsUnavailable(Vec<String>),
    /// The backend cannot confine the command (it refused to prepare it, or
    /// full enforcement was required and it is not).
    #[error(transparent)]
    Unavailable(SandboxUnavailable),
    /// A stop signal ([`crate::wait::stop_runs_on`]) came before the launch:
    /// nothing started.
    #[error("stopped by signal {0} before the command started")]
    Stopped(i32),
    /// The child could not be started (exec failed, or the runner's own
    /// setup in the child did).
    #[error("starting the command failed: {0}")]
    Spawn(#[source] std::io::Error),
    /// The backend's hook failed in the child: the confinement could not be
    /// applied (the errno it reported).
    #[error("applying the confinement in the child failed: {0}")]
    Apply(#[source] std::io::Error),
    /// The backend's supervisor did not start (the child was ended).
    #[error("the backend's supervisor did not start: {0}")]
    Supervisor(#[source] SandboxUnavailable),
    /// The launching thread could not enter the backend's domain.
    #[error("entering the launch domain failed: {0}")]
    Domain(#[source] std::io::Error),
    /// Reaping the main process failed.
    #[error("waiting for the command failed: {0}")]
    Wait(#[source] std::io::Error),
    /// The run could not be ended: some of its processes were still there
    /// after SIGKILL for the whole bound, and the runner stopped waiting
    /// for them (what it found).
    #[error("the run's processes could not be ended ({0}); the runner stopped waiting for them")]
    Unended(String),
}

/// Launches `launch.argv` under `policy` with `backend` (unconfined when
/// `policy` is `None`) and waits for every process of it to end: the one
/// sequence `sandbox::runner::run` and every probe of the self-test take.
///
/// In order: the program is located (once; a launcher the backend puts in
/// front is executed by the absolute path it names); the run's containment
/// is made (a cgroup of its own where the runner may create one, else its
/// process group) and its limits set; the backend prepares the command
/// ([`Backend::prepare_for_launch`], with the options that containment and
/// `launch` imply); then the command is started with the runner's setup
/// (its own session, parent-death signal, inherited fds closed,
/// `no_new_privs` when confined) then the backend's hook, waited for until
/// it exits or the deadline passes, and every process of the run ended
/// (SIGTERM, `grace`, SIGKILL); the supervisor's record is collected. A
/// stop signal ([`crate::wait::stop_runs_on`]) is passed on to the
/// command's process group first, and the run ends `grace` after it
/// (SIGTERM to what is left, SIGKILL at once if the grace is spent).
///
/// In process-group mode the calling process becomes a child subreaper
/// (`PR_SET_CHILD_SUBREAPER`, kept), so the run's orphans are reaped here.
pub fn launch(
    backend: &dyn Backend,
    policy: Option<&ResolvedPolicy>,
    launch: &Launch<'_>,
) -> Result<Launched, LaunchError> {
    let program = launch.argv.first().ok_or(LaunchError::EmptyArgv)?;
    if let Some(cwd) = launch.cwd.filter(|d| !d.is_dir()) {
        return Err(LaunchError::WorkingDirectory(cwd.to_owned()));
    }
    let located = locate(program, launch.search_path, launch.cwd)?;
    // Prepared before anything starts, so ending the run needs nothing the
    // command could exhaust or change.
    let containment = Containment::within(launch.within.and_then(|g| g.v2.as_deref()));
    let limits = if launch.limits.is_empty() {
        RunLimits::default()
    } else {
        let name = containment.run_name().map_err(LaunchError::Cgroup)?;
        let parents = launch.within.map_or(&[][..], |g| &g.v1[..]);
        RunLimits::set_beneath(&launch.limits, containment.cgroup_dir(), &name, parents)
    };
    if let Some(groups) = launch.groups {
        let _ = groups.set(RunGroups {
            v2: containment.cgroup_dir().map(Path::to_path_buf),
            v1: limits.v1_groups(),
        });
    }
    if let Some(Contained(tell)) = launch.contained {
        tell(containment.cgroup_dir());
    }
    let unheld = limits.unheld();
    if !unheld.is_empty() {
        if !launch.allow_unlimited {
            return Err(LaunchError::LimitsUnavailable(unheld));
        }
        tracing::debug!(limits = %unheld.join("; "), "running without limits that cannot be held here");
    }
    let prepared = match policy {
        Some(policy) => {
            let options = LaunchOptions::default()
                .with_process_group_held(containment.kind() == ContainmentKind::ProcessGroup)
                .with_writes_observed(launch.observe_writes)
                .with_limits(launch.limits)
                .with_dns(launch.dns.clone())
                .with_child_layer(launch.child_layer.and_then(|fd| u32::try_from(fd).ok()))
                // A shared launch's commands get their fds later, each its own.
                .with_stdio(launch.child_layer.is_none().then(|| {
                    [
                        launch.stdin.unwrap_or(0),
                        launch.stdout.unwrap_or(1),
                        launch.stderr.unwrap_or(2),
                    ]
                }));
            let c = backend
                .prepare_for_launch(policy, launch.argv, options)
                .map_err(LaunchError::Unavailable)?;
            if launch.require_full {
                require_full(backend, &c.report).map_err(LaunchError::Unavailable)?;
            }
            Some(c)
        }
        None => None,
    };
    let (argv, report, hook, supervisor, domain) = match prepared {
        Some(c) => (c.argv, Some(c.report), c.pre_exec, c.supervisor, c.domain),
        None => (launch.argv.to_vec(), None, None, None, None),
    };
    // A backend may put its own launcher in front of the command, named by
    // its absolute path.
    let path = match argv.first() {
        Some(first) if first == program => located,
        Some(first) if Path::new(first).is_absolute() => PathBuf::from(first),
        Some(first) => {
            return Err(LaunchError::Unavailable(SandboxUnavailable::new(
                backend.name(),
                format!(
                    "the backend's launcher {} is not named by an absolute path",
                    first.to_string_lossy()
                ),
            )))
        }
        None => return Err(LaunchError::EmptyArgv),
    };
    let plan = SpawnPlan {
        path: &path,
        argv: &argv,
        env: launch.env,
        cwd: launch.cwd,
        stdin: launch.stdin,
        stdout: launch.stdout,
        stderr: launch.stderr,
        // The session hook makes the group (a group leader cannot start a
        // session).
        process_group: false,
        cgroup: containment.cgroup(),
    };
    let hooks: Vec<PreExecHook> = limits
        .join_hook()
        .into_iter()
        .chain(std::iter::once(spawn::session_hook(policy.is_some())))
        .chain(launch.inherit.map(spawn::inherit_hook))
        .chain(launch.inherit_also.map(spawn::inherit_hook))
        .chain(launch.child_layer.map(spawn::inherit_hook))
        .chain(hook)
        .collect();
    // A stop signal that came before the launch: nothing starts.
    if let Some(signal) = crate::wait::stop_requested() {
        return Err(LaunchError::Stopped(signal));
    }
    // The terminals the command inherits are given back as found once the
    // run has ended, whatever ended it (`terminal`).
    let terminals = crate::terminal::Saved::of([
        launch.stdin.unwrap_or(0),
        launch.stdout.unwrap_or(1),
        launch.stderr.unwrap_or(2),
    ]);
    let ended = run(&plan, hooks, &containment, supervisor, domain, launch);
    drop(terminals);
    // Again (it does nothing the second time) for a run that failed after
    // its main process started.
    if let Some(BeforeRemoval(f)) = launch.before_removal {
        f();
    }
    let ended = ended?;
    let records = limits.records();
    // The run's cgroups go before the caller reads the outcome.
    drop(limits);
    let containment_kind = containment.kind();
    drop(containment);
    Ok(Launched {
        status: ended.status,
        timed_out: ended.timed_out,
        cancelled: ended.cancelled,
        stopped_by: ended.stopped_by,
        others: ended.others,
        mediation: ended.mediation,
        report,
        containment: containment_kind,
        limits: records,
    })
}

/// Refuses partial or absent enforcement, naming what is missing.
fn require_full(
    backend: &dyn Backend,
    report: &EnforcementReport,
) -> Result<(), SandboxUnavailable> {
    let why = match report.enforcement() {
        Enforcement::Full => return Ok(()),
        Enforcement::Partial { gaps } => format!(
            "full enforcement was required (--require-full / require_full) but it is partial: {}",
            gaps.join("; ")
        ),
        _ => {
            "full enforcement was required (--require-full / require_full) but nothing is enforced"
                .to_owned()
        }
    };
    Err(SandboxUnavailable::new(backend.name(), why))
}

/// What the spawn-and-wait part of a launch gives back.
struct Ended {
    status: ExitStatus,
    timed_out: bool,
    cancelled: bool,
    stopped_by: Option<i32>,
    others: usize,
    mediation: Option<Mediation>,
}

/// Starts the supervisor, spawns `plan` with `hooks`, waits and ends the
/// run, all on one thread inside the backend's `domain`.
fn run(
    plan: &SpawnPlan<'_>,
    hooks: Vec<PreExecHook>,
    containment: &Containment,
    supervisor: Option<Box<dyn Supervisor>>,
    domain: Option<LaunchDomain>,
    launch: &Launch<'_>,
) -> Result<Ended, LaunchError> {
    let (deadline, grace) = (launch.deadline, launch.grace);
    if containment.kind() == ContainmentKind::ProcessGroup {
        become_subreaper();
    }
    // The supervisor is started, then the child spawned, waited for and
    // its run ended, all on one thread inside the backend's domain (the
    // broker's threads then share it). The supervisor starts first so that
    // it gets ready while the child execs. The hooks (and the fds they hold
    // for the child) are gone once `spawn` returns, so a supervisor's
    // channel then sees only the child's end.
    let tap = launch.tap;
    let start = move || {
        let mut running = supervisor
            .map(|s| s.start())
            .transpose()
            .map_err(|e| (None, LaunchError::Supervisor(e)))?;
        let child = spawn::spawn(plan, hooks).map_err(|e| (None, spawn_error(e)))?;
        if let Some(running) = running.as_mut() {
            running
                .confirm()
                .map_err(|e| (Some(child.pid), LaunchError::Supervisor(e)))?;
            if let (Some(slot), Some(t)) = (tap, running.tap()) {
                let _ = slot.set(t);
            }
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
        if let Some(spawned) = launch.spawned {
            let _ = spawned.set(pid);
        }
        let watch = Watch::new(pid)
            .with_cancel(launch.cancel)
            .with_relayed_signals_only(launch.relayed_signals_only);
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
        // The runs held within this one end first (their cgroups are inside
        // its, their requesters among its processes).
        if let Some(BeforeRemoval(f)) = launch.before_removal {
            f();
        }
        // Every process of the run ends here, the main one too on a timeout
        // or a stop signal it outlived the grace for.
        let ended = containment.end(pid, grace_left);
        let status = match ended.main {
            Some(status) => status,
            // Bounded: a main process that outlived every SIGKILL (or whose
            // thread group cannot end) must not hold the runner forever.
            None => match reap_within(pid, REAP_WAIT).map_err(LaunchError::Wait)? {
                Some(status) => status,
                None => {
                    return Err(LaunchError::Unended(if ended.all_ended {
                        "the main process could not be reaped".into()
                    } else {
                        "processes of the run outlived SIGKILL".into()
                    }))
                }
            },
        };
        Ok(Ended {
            status,
            timed_out: waited == Waited::TimedOut,
            cancelled: waited == Waited::Cancelled,
            stopped_by: match waited {
                Waited::Stopped(sig) => Some(sig),
                _ => None,
            },
            others: ended.others,
            mediation: running.map(|r| r.finish()),
        })
    };
    LaunchDomain::launch(domain, start, body).map_err(LaunchError::Domain)?
}

/// How long the main process is waited for once every process of its run
/// was ended (it is then a zombie, reaped at once).
const REAP_WAIT: Duration = Duration::from_secs(2);

/// Reaps `pid`, an unreaped child, if it exits within `limit`: its status,
/// or `None` (still unreaped) when it did not.
fn reap_within(pid: libc::pid_t, limit: Duration) -> std::io::Result<Option<ExitStatus>> {
    use std::os::unix::process::ExitStatusExt;
    let deadline = Instant::now() + limit;
    loop {
        let mut status = 0;
        // SAFETY: status is a valid out-pointer; WNOHANG never blocks.
        match unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } {
            0 => {}
            n if n > 0 => return Ok(Some(ExitStatus::from_raw(status))),
            _ => {
                let err = std::io::Error::last_os_error();
                if err.kind() != std::io::ErrorKind::Interrupted {
                    return Err(err);
                }
            }
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A failed spawn: [`LaunchError::Apply`] when a confining hook reported
/// its errno ([`sandbox_core::decode_pre_exec_error`]).
fn spawn_error(err: std::io::Error) -> LaunchError {
    match decode_pre_exec_error(&err) {
        Some(errno) => LaunchError::Apply(std::io::Error::from_raw_os_error(errno)),
        None => LaunchError::Spawn(err),
    }
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
