//! Runs one command under a backend: session, fds, environment, timeout,
//! process-tree cleanup and the outcome record.

use std::borrow::Cow;
use std::ffi::{OsStr, OsString};
use std::os::fd::AsRawFd;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use sandbox_core::{scrub_env, Backend, Mediation, ResolvedPolicy};
use sandbox_launch::{Launch, LaunchError, LocateError};
use sandbox_proxy::{Egress, EgressError, EgressOptions};

use crate::outcome::{Classification, Outcome, Termination};
use crate::trusted::TrustedStateError;

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
    /// Files later runs trust (what each is, and where), such as the
    /// operator config that bounds this run: the run is refused
    /// ([`RunError::Trusted`]) when it could change one
    /// ([`crate::trusted::check_trusted_file`]).
    pub trusted_files: Vec<(&'static str, PathBuf)>,
    /// How the run's egress verifies the origins of intercepted hosts
    /// (the policy's request rules).
    pub egress: EgressOptions,
    /// The command's stdin, stdout and stderr (`None`: this process's own;
    /// `echo_stderr: false` still sends stderr to `/dev/null`). The fds stay
    /// the caller's, open until `run` returns.
    pub stdio: Option<[std::os::fd::RawFd; 3]>,
    /// A socket whose bytes are signals passed on to the command's process
    /// group (SIGINT, SIGQUIT, SIGTERM, SIGHUP) and whose end ends the run
    /// as on its timeout (how an outer runner relays a nested run's stop
    /// signals and ends it, [`crate::nest`]).
    pub cancel: Option<std::os::fd::RawFd>,
    /// With [`RunRequest::cancel`]: the run's stop signals are those relayed
    /// through it alone, not this process's own (a run whose runner ends
    /// its commands itself on a stop signal, such as the shared launch's
    /// zygote, [`crate::zygote`]; a nested run's are relayed always).
    pub relayed_signals_only: bool,
    /// An fd the command inherits under its own number, besides the nest
    /// socket (the shared launch's control socket, [`crate::zygote`]).
    pub inherit: Option<std::os::fd::RawFd>,
    /// A Landlock ruleset fd the command inherits and may nest beneath its
    /// domain (`sandbox_core::LaunchOptions::child_layer`).
    pub child_layer: Option<std::os::fd::RawFd>,
    /// Set, once the run's supervisor is confirmed, to what closes one
    /// command's share of it (`sandbox_core::RunningSupervisor::tap`; the
    /// shared launch, [`crate::zygote`]).
    pub tap: Option<std::sync::Arc<std::sync::OnceLock<sandbox_core::MediationTap>>>,
    /// Set, once the run's egress (proxy, resolver) has started, to what
    /// gives each command of the run its environment for it and its
    /// refusals (`sandbox_proxy::EgressTap`; the shared launch,
    /// [`crate::zygote`]); left unset when the run has no egress.
    pub egress_tap: Option<std::sync::Arc<std::sync::OnceLock<sandbox_proxy::EgressTap>>>,
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
            trusted_files: Vec::new(),
            egress: EgressOptions::default(),
            stdio: None,
            cancel: None,
            relayed_signals_only: false,
            inherit: None,
            child_layer: None,
            tap: None,
            egress_tap: None,
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
    /// The runner got a stop signal ([`crate::runner::stop_runs_on`]) before or
    /// while the command ran; the signal was passed on to the command's
    /// process group, and every process of the run still there after the
    /// grace period was ended (SIGTERM, SIGKILL), or none was started.
    #[error("stopped by signal {signal}: no process of the run is left")]
    Stopped {
        /// The signal's number.
        signal: i32,
    },
    /// What later runs trust could be changed by this run, or reached on
    /// a way it could change ([`crate::trusted`]).
    #[error(transparent)]
    Trusted(#[from] TrustedStateError),
    /// The run's egress (proxy, resolver) could not start.
    #[error(transparent)]
    Egress(#[from] EgressError),
    /// The launch failed after the command was prepared (entering the
    /// launch domain, reaping the command).
    #[error(transparent)]
    Launch(LaunchError),
    /// The outer runner refused or failed a nested run ([`crate::nest`]).
    #[error("{reason}")]
    Nested {
        /// Why (escaped for a terminal).
        reason: String,
        /// The exit code the nested run gives.
        exit_code: i32,
    },
    /// A session's shared launch failed while it ran the command (its
    /// zygote died or stopped answering; `sandbox::zygote`, Linux).
    #[error("the session's shared launch failed: {0}")]
    SharedLaunch(String),
    /// Spawning failed for another reason.
    #[error("could not start {}: {source}", program.to_string_lossy())]
    Spawn {
        /// The program.
        program: OsString,
        /// The OS error.
        source: std::io::Error,
    },
}

/// Refuses a run with network whose stdio includes a UNIX datagram socket:
/// the command inherits it, and an addressed send on it reaches any host
/// datagram socket (`/dev/log`, ...) past the confinement, which refuses
/// such sockets only at creation (unix(7): an unconnected datagram socket
/// names its peer in each `sendto`/`sendmsg`; `tests/tests/it/unix_sockets.rs`
/// attacks it with an inherited socket). The same holds with the network
/// off: the filter refuses an addressed `sendto`, but `sendmsg`'s `msg_name`
/// lies behind a pointer seccomp cannot read, so an inherited datagram socket
/// of any family would still send by address. With the network off or under
/// egress rules, every socket but a stream one (and a UNIX seqpacket one,
/// which ignores an address) is refused as well: a UDP, raw or netlink
/// socket sends to any peer by address.
fn refuse_stdio_datagram(
    backend: &dyn Backend,
    policy: &ResolvedPolicy,
    stderr_inherited: bool,
    stdio: Option<[std::os::fd::RawFd; 3]>,
) -> Result<(), sandbox_core::SandboxUnavailable> {
    #[cfg(target_os = "linux")]
    {
        let names = ["stdin", "stdout", "stderr"];
        let count = if stderr_inherited { 3 } else { 2 };
        let off = !policy.network();
        for (fd, name) in names.iter().enumerate().take(count) {
            let (domain, kind) = socket_kind(stdio.map_or(fd as i32, |s| s[fd]));
            if domain == Some(libc::AF_UNIX) && kind == Some(libc::SOCK_DGRAM) {
                let instead = if off { "" } else { ", or run without network" };
                return Err(sandbox_core::SandboxUnavailable::new(
                    backend.name(),
                    format!(
                        "{name} (fd {fd}) is a UNIX datagram socket, through which the command \
                         could send to any host datagram socket; pass a pipe, a file or a \
                         stream socket instead{instead}"
                    ),
                ));
            }
            let confined = off || policy.network_mode() == sandbox_core::NetworkMode::Allowlist;
            if confined
                && domain.is_some_and(|d| d != libc::AF_UNIX)
                && kind != Some(libc::SOCK_STREAM)
            {
                let past = if off {
                    "with the network off"
                } else {
                    "past the egress rules"
                };
                return Err(sandbox_core::SandboxUnavailable::new(
                    backend.name(),
                    format!(
                        "{name} (fd {fd}) is a datagram, raw or netlink socket (domain {}), \
                         through which the command could send to any host {past}; pass a \
                         pipe, a file or a stream socket instead",
                        domain.unwrap_or(0)
                    ),
                ));
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (backend, policy, stderr_inherited, stdio);
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

impl RunError {
    /// The exit code a shell-like runner reports for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            RunError::NotFound(_) => EXIT_NOT_FOUND,
            RunError::NotExecutable { .. } => EXIT_NOT_EXECUTABLE,
            // As a shell reports a command its signal ended.
            RunError::Stopped { signal } => 128 + signal,
            RunError::Nested { exit_code, .. } => *exit_code,
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
/// ([`ContainmentKind`](crate::runner::ContainmentKind); the outcome says which).
///
/// Process-wide side effects: in process-group mode the calling process
/// becomes a child subreaper (`PR_SET_CHILD_SUBREAPER`, kept for its
/// lifetime), and the runner reaps the run's processes that become its
/// children, never others.
pub fn run(backend: &dyn Backend, req: &RunRequest) -> Result<Outcome, RunError> {
    let started = Instant::now();
    let program = req.argv.first().ok_or(RunError::EmptyArgv)?;
    let env: Vec<(OsString, OsString)> = req
        .env
        .clone()
        .unwrap_or_else(|| std::env::vars_os().collect());
    let search_path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone());
    // What later runs trust (operator config, the self-test's verdict) is
    // write-denied wherever a write path reaches it, and the files the
    // caller names must be out of the run's reach.
    let policy = req.policy.as_ref().map(protect_trusted).transpose()?;
    if let Some(policy) = &policy {
        for (what, file) in &req.trusted_files {
            crate::trusted::check_trusted_file(policy, what, file)?;
        }
    }
    // Under an allowlist: the proxy, the resolver, and the policy that
    // admits the proxy.
    let egress = match &policy {
        Some(policy) => Egress::start(policy, &req.egress)?,
        // Unconfined, the command could read the secrets wherever they are.
        None if !req.egress.secrets.is_empty() => {
            return Err(RunError::Egress(EgressError::Secret(
                "secrets are injected only into a confined run's intercepted requests".into(),
            )))
        }
        None => None,
    };
    if let (Some(egress), Some(slot)) = (&egress, &req.egress_tap) {
        let _ = slot.set(egress.tap());
    }
    let confined_by = egress.as_ref().map(Egress::policy).or(policy.as_deref());
    if let Some(policy) = confined_by {
        refuse_stdio_datagram(backend, policy, req.echo_stderr, req.stdio)?;
    }
    let mut env = match &req.policy {
        Some(p) => scrub_env(env, p.env_deny_names()),
        None => env,
    };
    for (name, value) in req.env_overrides.iter().cloned() {
        env.retain(|(n, _)| *n != name);
        env.push((name, value));
    }
    if let Some(egress) = &egress {
        egress.set_env(&mut env);
    }
    // A confined run gets the nest socket (its own, whatever the caller's
    // environment names): nested runs of its own narrow its policy.
    let door = crate::nest::door_for(backend, policy.as_deref());
    env.retain(|(n, _)| n != crate::nest::NEST_FD_ENV);
    if let Some(door) = &door {
        env.push((
            crate::nest::NEST_FD_ENV.into(),
            door.handed().to_string().into(),
        ));
    }
    let null = if req.echo_stderr {
        None
    } else {
        let null = std::fs::OpenOptions::new().write(true).open("/dev/null");
        Some(null.map_err(|source| RunError::Spawn {
            program: program.clone(),
            source,
        })?)
    };

    let mut launch = Launch::new(&req.argv, &env);
    launch.search_path = search_path.as_deref();
    launch.cwd = req.cwd.as_deref();
    launch.stdin = req.stdio.map(|s| s[0]);
    launch.stdout = req.stdio.map(|s| s[1]);
    launch.stderr = null
        .as_ref()
        .map(|f| f.as_raw_fd())
        .or(req.stdio.map(|s| s[2]));
    launch.cancel = req.cancel;
    launch.inherit = door.as_ref().map(|d| d.handed());
    launch.spawned = door.as_ref().map(|d| d.main());
    // The run's cgroups hold its nested runs' (inside them, so its limits
    // bound them too), and a nested run's are inside its outer run's.
    launch.groups = door.as_ref().map(|d| d.groups());
    let within = crate::nest::within();
    launch.within = within.as_ref();
    // A nested run's stop signals come from its requester, relayed.
    launch.relayed_signals_only = within.is_some() || req.relayed_signals_only;
    let end_nested = door.as_ref().map(|d| move || d.end_nested());
    launch.before_removal = end_nested
        .as_ref()
        .map(|f| sandbox_launch::BeforeRemoval(f));
    launch.inherit_also = req.inherit;
    launch.child_layer = req.child_layer;
    launch.tap = req.tap.as_deref();
    launch.deadline = req.policy.as_ref().map(|p| started + p.timeout());
    launch.grace = req.grace;
    launch.limits = req.limits;
    launch.allow_unlimited = req.allow_unlimited;
    launch.observe_writes = req.observe_writes;
    launch.require_full = req.require_full;
    launch.dns = egress.as_ref().and_then(Egress::dns_route);
    // The run's proxy and resolver serve its processes only: its cgroup's
    // (subtree), else those of the uid its command runs as (this one's).
    let peers = egress.as_ref().map(|e| e.peers().clone());
    let tell_peers = move |cgroup: Option<&std::path::Path>| {
        if let Some(peers) = &peers {
            // SAFETY: geteuid cannot fail.
            peers.set(unsafe { libc::geteuid() }, cgroup);
        }
    };
    launch.contained = Some(sandbox_launch::Contained(&tell_peers));
    let nest = door.as_ref().zip(policy.as_deref()).map(|(door, policy)| {
        let outer = crate::nest::Outer {
            backend,
            policy,
            deadline: started + policy.timeout(),
            request: req,
        };
        (door, outer)
    });
    let (launched, nested) = crate::nest::serving(nest, || {
        sandbox_launch::launch(backend, confined_by, &launch)
    });
    let launched = launched.map_err(|e| launch_error(backend, program, e))?;
    if let Some(signal) = launched.stopped_by {
        return Err(RunError::Stopped { signal });
    }

    let mut mediation = launched.mediation;
    if let Some(egress) = egress {
        mediation
            .get_or_insert_with(Mediation::default)
            .absorb(egress.finish());
    }
    let status = launched.status;
    let termination = match (status.code(), status.signal()) {
        (Some(code), _) => Termination::Exited { code },
        (None, Some(signal)) => Termination::Signaled { signal },
        _ => Termination::Exited { code: -1 },
    };
    let report = launched.report;
    let confined = report.is_some() && backend.enforces();
    let mut classification = if launched.cancelled {
        Classification::Cancelled {
            reason: "its caller ended it".into(),
        }
    } else {
        Classification::of(&termination, launched.timed_out, confined)
    };
    if let Some(m) = &mediation {
        classification = classification.with_refusals(m);
    }
    classification = classification.with_limits(&launched.limits);
    let mut outcome = Outcome {
        schema: crate::outcome::SCHEMA_VERSION,
        argv: req
            .argv
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        policy: policy.map(Cow::into_owned),
        backend: if req.policy.is_some() {
            backend.name().to_owned()
        } else {
            "none (danger-full-access)".to_owned()
        },
        report,
        termination,
        timed_out: launched.timed_out,
        leftover_processes_ended: launched.others,
        containment: Some(launched.containment),
        mediation,
        limits: launched.limits,
        duration_ms: started.elapsed().as_secs_f64() * 1000.0,
        classification,
        nested: Vec::new(),
        omitted: crate::outcome::Omitted::default(),
    };
    nested.into_outcome(&mut outcome);
    Ok(outcome)
}

/// `policy` with the trusted state a write path reaches write-denied
/// ([`crate::trusted::protect_trusted`]).
fn protect_trusted(policy: &ResolvedPolicy) -> Result<Cow<'_, ResolvedPolicy>, RunError> {
    Ok(crate::trusted::protect_trusted(policy)?)
}

/// What a launch error means to a caller of [`run`].
fn launch_error(backend: &dyn Backend, program: &OsStr, err: LaunchError) -> RunError {
    match err {
        LaunchError::EmptyArgv => RunError::EmptyArgv,
        LaunchError::WorkingDirectory(cwd) => RunError::Spawn {
            program: program.to_owned(),
            source: std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("the working directory {} is not a directory", cwd.display()),
            ),
        },
        LaunchError::Locate(LocateError::NotExecutable { path, reason }) => {
            RunError::NotExecutable { path, reason }
        }
        LaunchError::Locate(_) => RunError::NotFound(program.to_owned()),
        LaunchError::Cgroup(source) => RunError::Spawn {
            program: program.to_owned(),
            source,
        },
        LaunchError::LimitsUnavailable(unheld) => RunError::LimitsUnavailable(unheld),
        LaunchError::Unavailable(e) | LaunchError::Supervisor(e) => RunError::Unavailable(e),
        LaunchError::Stopped(signal) => RunError::Stopped { signal },
        LaunchError::Apply(source) => RunError::ApplyFailed {
            backend: backend.name().to_owned(),
            source,
        },
        LaunchError::Spawn(source) => match source.raw_os_error() {
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
        },
        other => RunError::Launch(other),
    }
}
