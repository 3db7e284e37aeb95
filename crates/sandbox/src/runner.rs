//! Runs one command under a backend: session, fds, environment, timeout,
//! process-tree cleanup and the outcome record.

use std::borrow::Cow;
use std::ffi::{OsStr, OsString};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sandbox_core::{
    decode_pre_exec_error, scrub_env, Backend, EgressRule, LaunchDomain, LaunchOptions,
    MediatedCall, Mediation, NetworkMode, PreExecHook, ResolvedPolicy, RunningSupervisor,
};
use sandbox_proxy::{Proxy, ProxyOptions};

use crate::contain::Containment;
use crate::outcome::{Classification, Outcome, Termination};
use crate::spawn::{self, SpawnPlan};

/// Exit code when the timeout ended the command.
pub const EXIT_TIMEOUT: i32 = 124;
/// Exit code when the sandbox could not be applied or the input was bad.
pub const EXIT_SANDBOX: i32 = 125;
/// Exit code when the program exists but cannot be executed.
pub const EXIT_NOT_EXECUTABLE: i32 = 126;
/// Exit code when the program is not found.
pub const EXIT_NOT_FOUND: i32 = 127;

/// What to run and how.
#[derive(Debug, Clone)]
pub struct RunRequest {
    /// Program and arguments.
    pub argv: Vec<OsString>,
    /// The policy; `None` runs the command unconfined (danger-full-access).
    pub policy: Option<ResolvedPolicy>,
    /// Working directory (default: the runner's).
    pub cwd: Option<PathBuf>,
    /// Environment before scrubbing (default: the runner's).
    pub env: Option<Vec<(OsString, OsString)>>,
    /// Extra variables set after scrubbing (e.g. `TMPDIR` for a private temp dir).
    pub env_overrides: Vec<(OsString, OsString)>,
    /// Time between SIGTERM and SIGKILL when ending the process tree.
    pub grace: Duration,
    /// Whether the command's stderr is this process's own (`true`, passed
    /// through untouched: a terminal stays a terminal) or `/dev/null`. The
    /// runner never reads it: evidence comes from the sandbox's own records.
    pub echo_stderr: bool,
    /// Refuse to run when the backend's enforcement would be partial
    /// ([`Enforcement::Partial`](sandbox_core::Enforcement)): the run then
    /// fails with [`RunError::Unavailable`] naming every gap.
    pub require_full: bool,
    /// Record every write the sandbox refuses in the outcome's mediation,
    /// those the kernel refuses on its own included (Linux: writing opens
    /// and directory-entry calls then go through the broker, at a cost per
    /// call; see BENCHMARKS.md).
    pub observe_writes: bool,
    /// Limits on the whole run (memory, processes, CPU), held by cgroups.
    pub limits: sandbox_core::ResourceLimits,
    /// Run even when some of `limits` cannot be held on this host (the
    /// outcome's `limits` says which held); otherwise such a run fails with
    /// [`RunError::LimitsUnavailable`].
    pub allow_unlimited: bool,
}

impl RunRequest {
    /// A request with defaults: runner's cwd and environment, 2 s grace,
    /// standard streams passed through.
    pub fn new(argv: Vec<OsString>, policy: Option<ResolvedPolicy>) -> Self {
        Self {
            argv,
            policy,
            cwd: None,
            env: None,
            env_overrides: Vec::new(),
            grace: Duration::from_secs(2),
            echo_stderr: true,
            require_full: false,
            observe_writes: false,
            limits: sandbox_core::ResourceLimits::default(),
            allow_unlimited: false,
        }
    }
}

/// Why a run could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// The argv is empty.
    #[error("nothing to run: the command is empty")]
    EmptyArgv,
    /// The program was not found.
    #[error("{}: command not found", .0.to_string_lossy())]
    NotFound(OsString),
    /// The program cannot be executed.
    #[error("{}: cannot execute: {reason}", path.display())]
    NotExecutable {
        /// The program path.
        path: PathBuf,
        /// The OS reason.
        reason: String,
    },
    /// The backend could not confine the command.
    #[error(transparent)]
    Unavailable(#[from] sandbox_core::SandboxUnavailable),
    /// Applying confinement in the child failed.
    #[error("could not apply the `{backend}` sandbox in the child: {source}")]
    ApplyFailed {
        /// Backend name.
        backend: String,
        /// The errno the child reported.
        source: std::io::Error,
    },
    /// Requested limits cannot be held on this host, and running without
    /// them was not allowed.
    #[error(
        "the requested limits cannot be enforced here: {}; run where the runner may create \
         cgroups (as root, or in a delegated cgroup subtree), or allow running without them \
         (--allow-unlimited, or `allow_unlimited = true` in [sandbox])",
        .0.join("; ")
    )]
    LimitsUnavailable(Vec<String>),
    /// Spawning failed for another reason.
    #[error("could not start {}: {source}", program.to_string_lossy())]
    Spawn {
        /// The program.
        program: OsString,
        /// The OS error.
        source: std::io::Error,
    },
}

/// Refuses partial or absent enforcement, naming what is missing.
fn require_full(
    backend: &dyn Backend,
    report: &sandbox_core::EnforcementReport,
) -> Result<(), sandbox_core::SandboxUnavailable> {
    use sandbox_core::Enforcement;
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
    Err(sandbox_core::SandboxUnavailable::new(backend.name(), why))
}

/// Refuses a run with network whose stdio includes a UNIX datagram socket:
/// the command inherits it, and an addressed send on it reaches any host
/// datagram socket (`/dev/log`, ...) past the confinement, which refuses
/// such sockets only at creation. (Without network, addressed sends are
/// refused by the filter.) Under egress rules, an IP socket other than
/// TCP is refused as well: a UDP socket sends to any host by address.
fn refuse_stdio_datagram(
    backend: &dyn Backend,
    policy: &ResolvedPolicy,
    stderr_inherited: bool,
) -> Result<(), sandbox_core::SandboxUnavailable> {
    #[cfg(target_os = "linux")]
    if policy.network() {
        let names = ["stdin", "stdout", "stderr"];
        let count = if stderr_inherited { 3 } else { 2 };
        for (fd, name) in names.iter().enumerate().take(count) {
            let (domain, kind) = socket_kind(fd as i32);
            if domain == Some(libc::AF_UNIX) && kind == Some(libc::SOCK_DGRAM) {
                return Err(sandbox_core::SandboxUnavailable::new(
                    backend.name(),
                    format!(
                        "{name} (fd {fd}) is a UNIX datagram socket, through which the command \
                         could send to any host datagram socket; pass a pipe, a file or a \
                         stream socket instead, or run without network"
                    ),
                ));
            }
            if policy.network_mode() == NetworkMode::Allowlist
                && matches!(domain, Some(libc::AF_INET | libc::AF_INET6))
                && kind != Some(libc::SOCK_STREAM)
            {
                return Err(sandbox_core::SandboxUnavailable::new(
                    backend.name(),
                    format!(
                        "{name} (fd {fd}) is an IP datagram or raw socket, through which the \
                         command could send to any host past the egress rules; pass a pipe, \
                         a file or a stream socket instead"
                    ),
                ));
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (backend, policy, stderr_inherited);
    Ok(())
}

/// The socket domain and type of `fd` (`None`s when it is no socket).
#[cfg(target_os = "linux")]
fn socket_kind(fd: i32) -> (Option<i32>, Option<i32>) {
    let opt = |name: i32| {
        let mut value: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: value and len are valid for getsockopt's writes.
        let rc = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                name,
                (&mut value as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        (rc == 0).then_some(value)
    };
    (opt(libc::SO_DOMAIN), opt(libc::SO_TYPE))
}

/// Makes the calling process a child subreaper, once: orphans of a run held
/// by its process group are re-parented here and reaped by the runner
/// (Linux only). A process-wide setting, documented on [`run`].
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

impl RunError {
    /// The exit code a shell-like runner reports for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            RunError::NotFound(_) => EXIT_NOT_FOUND,
            RunError::NotExecutable { .. } => EXIT_NOT_EXECUTABLE,
            _ => EXIT_SANDBOX,
        }
    }
}

/// Runs `req` under `backend` and waits for it (and every descendant) to end.
///
/// Every process the run starts is dead when this returns, whatever it did
/// (double fork, setsid, fork relays): the run gets a cgroup of its own where
/// the runner may create one (root, or a delegated cgroup subtree), else it
/// is held by its process group, which the filter keeps every process in
/// ([`ContainmentKind`](crate::ContainmentKind); the outcome says which).
///
/// Process-wide side effects: in process-group mode the calling process
/// becomes a child subreaper (`PR_SET_CHILD_SUBREAPER`, kept for its
/// lifetime), and the runner reaps the run's processes that become its
/// children, never others.
pub fn run(backend: &dyn Backend, req: &RunRequest) -> Result<Outcome, RunError> {
    let started = Instant::now();
    let (program, _) = req.argv.split_first().ok_or(RunError::EmptyArgv)?;
    let env: Vec<(OsString, OsString)> = req
        .env
        .clone()
        .unwrap_or_else(|| std::env::vars_os().collect());
    let path_var = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone());
    if let Some(cwd) = req.cwd.as_deref().filter(|d| !d.is_dir()) {
        // Said here: the child's chdir would fail with ENOENT, which reads as
        // "command not found".
        return Err(RunError::Spawn {
            program: program.clone(),
            source: std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("the working directory {} is not a directory", cwd.display()),
            ),
        });
    }
    let located = locate(program, path_var.as_deref(), req.cwd.as_deref())?;

    // Prepared before anything starts, so ending the run needs nothing the
    // command could exhaust or change.
    let containment = Containment::new();
    let containment_kind = containment.kind();
    let limits = if req.limits.is_empty() {
        crate::limit::RunLimits::default()
    } else {
        let name = containment.run_name().map_err(|source| RunError::Spawn {
            program: program.clone(),
            source,
        })?;
        crate::limit::RunLimits::set(&req.limits, containment.cgroup_dir(), &name)
    };
    let unheld = limits.unheld();
    if !unheld.is_empty() {
        if !req.allow_unlimited {
            return Err(RunError::LimitsUnavailable(unheld));
        }
        tracing::debug!(limits = %unheld.join("; "), "running without limits that cannot be held here");
    }
    let options = LaunchOptions::default()
        .with_process_group_held(containment.kind() == crate::ContainmentKind::ProcessGroup)
        .with_writes_observed(req.observe_writes);
    let mut proxy = None;
    let (argv, hook, report, supervisor, domain) = match &req.policy {
        Some(policy) => {
            let mut policy = Cow::Borrowed(policy);
            // What later runs trust (operator config, the self-test's
            // verdict) is write-denied wherever a write path reaches it.
            if let Cow::Owned(protected) = crate::trusted::protect_trusted(&policy)
                .map_err(|e| sandbox_core::SandboxUnavailable::new(backend.name(), e.to_string()))?
            {
                policy = Cow::Owned(protected);
            }
            if policy.network_mode() == NetworkMode::Allowlist {
                // Host names are reached through the runner's proxy: the
                // command may connect to it, and nothing else but the
                // policy's IP rules.
                let started = Proxy::start(policy.allow_net().to_vec(), ProxyOptions::default())
                    .map_err(|e| {
                        sandbox_core::SandboxUnavailable::new(
                            backend.name(),
                            format!("cannot start the egress proxy: {e}"),
                        )
                    })?;
                policy = Cow::Owned(policy.with_allowed(EgressRule::Ip(started.net_rule())));
                proxy = Some(started);
            }
            refuse_stdio_datagram(backend, &policy, req.echo_stderr)?;
            let c = backend.prepare_for_launch(&policy, &req.argv, options)?;
            if req.require_full {
                require_full(backend, &c.report)?;
            }
            (c.argv, c.pre_exec, Some(c.report), c.supervisor, c.domain)
        }
        None => (req.argv.clone(), None, None, None, None),
    };
    let mut env = match &req.policy {
        Some(p) => scrub_env(env, p.env_deny_names()),
        None => env,
    };
    let proxy_env = proxy
        .iter()
        .flat_map(|p| p.env())
        .map(|(k, v)| (k.into(), v.into()));
    for (name, value) in req.env_overrides.iter().cloned().chain(proxy_env) {
        env.retain(|(n, _)| *n != name);
        env.push((name, value));
    }
    let timeout = req.policy.as_ref().map(|p| p.timeout());
    // A backend may put its own launcher in front of the command.
    let path = match argv.first() {
        Some(first) if first == program => located,
        Some(first) => locate(first, path_var.as_deref(), req.cwd.as_deref())?,
        None => return Err(RunError::EmptyArgv),
    };
    let null = if req.echo_stderr {
        None
    } else {
        Some(
            std::fs::OpenOptions::new()
                .write(true)
                .open("/dev/null")
                .map_err(|source| RunError::Spawn {
                    program: program.clone(),
                    source,
                })?,
        )
    };
    let plan = SpawnPlan {
        path: &path,
        argv: &argv,
        env: &env,
        cwd: req.cwd.as_deref(),
        stdin: None,
        stdout: None,
        stderr: null.as_ref().map(|f| f.as_raw_fd()),
        // The runner's own hook starts a session (a new group with it).
        process_group: false,
        cgroup: containment.cgroup(),
    };
    // The runner's own setup first, then the backend's confinement.
    let hooks: Vec<PreExecHook> = limits
        .join_hook()
        .into_iter()
        .chain(std::iter::once(spawn::session_hook(req.policy.is_some())))
        .chain(hook)
        .collect();

    if containment.kind() == crate::ContainmentKind::ProcessGroup {
        // Members of the run's group that end up our children are reaped by
        // us, so an emptied group is seen as empty (see `contain`).
        become_subreaper();
    }
    // The child is spawned, and the supervisor started, on a thread inside
    // the backend's domain (the broker's threads then share it); that thread
    // stays until the run has ended. The hooks (and the fds they hold for
    // the child) are gone once `spawn` returns, so a supervisor's channel
    // sees only the child's end.
    let start = || {
        let child =
            spawn::spawn(&plan, hooks).map_err(|source| spawn_error(backend, program, source))?;
        let pid = child.pid;
        match supervisor.map(|s| s.start()).transpose() {
            Ok(s) => Ok((pid, s)),
            Err(err) => {
                containment.end(pid, Duration::ZERO);
                spawn::kill_and_reap(pid);
                Err(RunError::Unavailable(err))
            }
        }
    };
    let run = |launched: Result<(libc::pid_t, Option<Box<dyn RunningSupervisor>>), RunError>| {
        let (pid, supervisor) = launched?;
        let deadline = timeout.map(|t| started + t);
        let timed_out = !Watch::new(pid).wait_exit(deadline);
        // Every process of the run ends here, the main one too on a timeout.
        let ended = containment.end(pid, req.grace);
        let status = match ended.main {
            Some(status) => status,
            None => spawn::wait(pid).map_err(|source| RunError::Spawn {
                program: program.clone(),
                source,
            })?,
        };
        Ok::<_, RunError>((timed_out, ended, status, supervisor.map(|s| s.finish())))
    };
    let (timed_out, ended, status, mut mediation) =
        LaunchDomain::launch(domain.as_ref(), start, run).map_err(|e| {
            RunError::Unavailable(sandbox_core::SandboxUnavailable::new(
                backend.name(),
                format!("entering the launch domain failed: {e}"),
            ))
        })??;
    let leftovers = ended.others;
    let limit_records = limits.records();
    drop(limits);
    drop(containment);
    if let Some(mut proxy) = proxy {
        proxy.shutdown();
        let m = mediation.get_or_insert_with(Mediation::default);
        let kept = proxy.refusals();
        m.omitted += usize::try_from(proxy.refusal_count())
            .unwrap_or(usize::MAX)
            .saturating_sub(kept.len());
        m.refused.extend(kept.into_iter().map(|r| MediatedCall {
            syscall: "proxy".into(),
            target: r.target(),
            reason: r.reason.to_string(),
            outside_write_paths: false,
        }));
    }

    let termination = match (status.code(), status.signal()) {
        (Some(code), _) => Termination::Exited { code },
        (None, Some(signal)) => Termination::Signaled { signal },
        _ => Termination::Exited { code: -1 },
    };
    let confined = report.is_some() && backend.enforces();
    let mut classification = Classification::of(&termination, timed_out, confined);
    if let Some(m) = &mediation {
        classification = classification.with_refusals(m);
    }
    classification = classification.with_limits(&limit_records);
    Ok(Outcome {
        schema: crate::outcome::SCHEMA_VERSION,
        argv: req
            .argv
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        policy: req.policy.clone(),
        backend: if req.policy.is_some() {
            backend.name().to_owned()
        } else {
            "none (danger-full-access)".to_owned()
        },
        report,
        termination,
        timed_out,
        leftover_processes_ended: leftovers,
        containment: Some(containment_kind),
        mediation,
        limits: limit_records,
        duration_ms: started.elapsed().as_secs_f64() * 1000.0,
        classification,
    })
}

fn spawn_error(backend: &dyn Backend, program: &OsStr, source: std::io::Error) -> RunError {
    if let Some(errno) = decode_pre_exec_error(&source) {
        return RunError::ApplyFailed {
            backend: backend.name().to_owned(),
            source: std::io::Error::from_raw_os_error(errno),
        };
    }
    match source.raw_os_error() {
        Some(libc::ENOENT) => RunError::NotFound(program.to_owned()),
        Some(libc::EACCES | libc::ENOEXEC | libc::EISDIR | libc::EPERM) => {
            RunError::NotExecutable {
                path: PathBuf::from(program),
                reason: source.to_string(),
            }
        }
        _ => RunError::Spawn {
            program: program.to_owned(),
            source,
        },
    }
}

/// Finds `program` the way a shell would, so "not found" and "not executable"
/// are told apart before anything is spawned.
fn locate(
    program: &OsStr,
    path_var: Option<&OsStr>,
    cwd: Option<&Path>,
) -> Result<PathBuf, RunError> {
    // As a shell: an empty program name is not found (never a PATH directory).
    if program.is_empty() {
        return Err(RunError::NotFound(program.to_owned()));
    }
    let check = |candidate: PathBuf| -> Option<Result<PathBuf, RunError>> {
        let meta = std::fs::metadata(&candidate).ok()?;
        let executable = meta.is_file() && {
            let c = std::ffi::CString::new(candidate.as_os_str().as_bytes()).ok()?;
            // SAFETY: c is a valid NUL-terminated path.
            unsafe { libc::access(c.as_ptr(), libc::X_OK) == 0 }
        };
        Some(if executable {
            Ok(candidate)
        } else {
            Err(RunError::NotExecutable {
                reason: if meta.is_dir() {
                    "is a directory".into()
                } else {
                    "permission denied".into()
                },
                path: candidate,
            })
        })
    };
    if program.as_bytes().contains(&b'/') {
        let path = match cwd {
            Some(dir) if !Path::new(program).is_absolute() => dir.join(program),
            _ => PathBuf::from(program),
        };
        return check(path).unwrap_or_else(|| Err(RunError::NotFound(program.to_owned())));
    }
    let search = path_var.unwrap_or(OsStr::new("/usr/local/bin:/usr/bin:/bin"));
    let mut first_error = None;
    for dir in std::env::split_paths(search) {
        match check(dir.join(program)) {
            Some(Ok(found)) => return Ok(found),
            Some(Err(e)) => {
                first_error.get_or_insert(e);
            }
            None => {}
        }
    }
    Err(first_error.unwrap_or_else(|| RunError::NotFound(program.to_owned())))
}

#[cfg(target_os = "linux")]
fn pidfd_open(pid: i32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes integer arguments; a returned fd is ours to own.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    (fd >= 0).then(|| unsafe { std::os::fd::FromRawFd::from_raw_fd(fd as i32) })
}

#[cfg(not(target_os = "linux"))]
fn pidfd_open(_pid: i32) -> Option<OwnedFd> {
    None
}

/// Waits on a child via its pidfd.
struct Watch {
    pid: i32,
    pidfd: Option<OwnedFd>,
}

impl Watch {
    fn new(pid: i32) -> Self {
        Self {
            pid,
            pidfd: pidfd_open(pid),
        }
    }

    /// Waits until the child exits (true) or `deadline` passes (false).
    fn wait_exit(&mut self, deadline: Option<Instant>) -> bool {
        loop {
            let wait_ms = match deadline {
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return false;
                    }
                    left.as_millis().min(i32::MAX as u128) as i32 + 1
                }
                None => -1,
            };
            let Some(pidfd) = &self.pidfd else {
                // No pidfd (very old kernel): check with a short tick.
                return self.wait_without_pidfd(deadline);
            };
            let mut pfd = libc::pollfd {
                fd: pidfd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            let n = unsafe { libc::poll(&mut pfd, 1, wait_ms) };
            if n > 0 {
                return true;
            }
            // n == 0: the deadline check at the top ends the loop; n < 0: EINTR.
        }
    }

    /// Fallback for kernels without pidfd_open: check with `waitid(WNOWAIT)` on a short tick,
    /// leaving the child for `Child::wait` to reap.
    fn wait_without_pidfd(&mut self, deadline: Option<Instant>) -> bool {
        loop {
            // SAFETY: info is a valid out-pointer; WNOWAIT leaves the child unreaped.
            let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
            let rc = unsafe {
                libc::waitid(
                    libc::P_PID,
                    self.pid as libc::id_t,
                    &mut info,
                    libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
                )
            };
            // SAFETY: si_pid is valid to read for waitid results.
            if rc == 0 && unsafe { info.si_pid() } != 0 {
                return true;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}
