//! Runs one command under a backend: session, fds, environment, timeout,
//! process-tree cleanup and the outcome record.

use std::borrow::Cow;
use std::ffi::{OsStr, OsString};
use std::os::fd::AsRawFd;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sandbox_core::Pins;
use sandbox_core::{
    decode_pre_exec_error, scrub_env, Backend, EgressRule, MediatedCall, Mediation, NetworkMode,
    ResolvedPolicy,
};
use sandbox_proxy::dns::DnsServer;
use sandbox_proxy::{Proxy, ProxyOptions};

use sandbox_launch::spawn::SpawnPlan;
use sandbox_launch::{Containment, LaunchError, RunLimits};

use crate::outcome::{Classification, Outcome, Termination};

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
    /// The runner got a stop signal ([`crate::stop_runs_on`]) before or
    /// while the command ran; the signal was passed on to the command's
    /// process group, and every process of the run still there after the
    /// grace period was ended (SIGTERM, SIGKILL), or none was started.
    #[error("stopped by signal {signal}: no process of the run is left")]
    Stopped {
        /// The signal's number.
        signal: i32,
    },
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
/// such sockets only at creation (unix(7): an unconnected datagram socket
/// names its peer in each `sendto`/`sendmsg`; `tests/tests/unix_sockets.rs`
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
) -> Result<(), sandbox_core::SandboxUnavailable> {
    #[cfg(target_os = "linux")]
    {
        let names = ["stdin", "stdout", "stderr"];
        let count = if stderr_inherited { 3 } else { 2 };
        let off = !policy.network();
        for (fd, name) in names.iter().enumerate().take(count) {
            let (domain, kind) = socket_kind(fd as i32);
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
            let confined = off || policy.network_mode() == NetworkMode::Allowlist;
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

impl RunError {
    /// The exit code a shell-like runner reports for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            RunError::NotFound(_) => EXIT_NOT_FOUND,
            RunError::NotExecutable { .. } => EXIT_NOT_EXECUTABLE,
            // As a shell reports a command its signal ended.
            RunError::Stopped { signal } => 128 + signal,
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
        RunLimits::default()
    } else {
        let name = containment.run_name().map_err(|source| RunError::Spawn {
            program: program.clone(),
            source,
        })?;
        RunLimits::set(&req.limits, containment.cgroup_dir(), &name)
    };
    let unheld = limits.unheld();
    if !unheld.is_empty() {
        if !req.allow_unlimited {
            return Err(RunError::LimitsUnavailable(unheld));
        }
        tracing::debug!(limits = %unheld.join("; "), "running without limits that cannot be held here");
    }
    // The broker's work for the run is held to the limits asked for, held
    // by a cgroup or not.
    let mut options = sandbox_launch::launch_options(&containment)
        .with_writes_observed(req.observe_writes)
        .with_limits(req.limits);
    let mut proxy = None;
    let mut dns = None;
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
                // Programs that resolve names themselves: DNS over TCP goes
                // to the runner's resolver, whose answers are pinned (Linux:
                // the broker routes and admits by them).
                if cfg!(target_os = "linux") {
                    let (server, route) = start_dns(&policy, policy.timeout()).map_err(|e| {
                        sandbox_core::SandboxUnavailable::new(
                            backend.name(),
                            format!("cannot start the run's resolver: {e}"),
                        )
                    })?;
                    options = options.with_dns(Some(route));
                    dns = Some(server);
                }
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
    if dns.is_some() {
        // glibc's resolver asks over TCP (resolv.conf(5), RES_OPTIONS): the
        // broker sends connects to port 53 to the runner's resolver, so
        // glibc needs no datagram namespace, which then is made only for a
        // resolver of a program's own (musl's, Go's), and where the host
        // allows one.
        let opts = match env.iter().find(|(k, _)| k == "RES_OPTIONS") {
            Some((_, v)) => format!("{} use-vc", v.to_string_lossy()),
            None => "use-vc".to_owned(),
        };
        env.retain(|(k, _)| k != "RES_OPTIONS");
        env.push(("RES_OPTIONS".into(), opts.into()));
    }
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
        process_group: false,
        cgroup: None,
    };
    let confined = sandbox_launch::Confined {
        hook,
        supervisor,
        domain,
    };
    let deadline = timeout.map(|t| started + t);
    // A stop signal that came before the launch: nothing starts.
    if let Some(signal) = sandbox_launch::stop_requested() {
        return Err(RunError::Stopped { signal });
    }
    let launched = sandbox_launch::launch(
        &plan,
        &containment,
        &limits,
        req.policy.is_some(),
        confined,
        deadline,
        req.grace,
    )
    .map_err(|e| match e {
        LaunchError::Spawn(source) => spawn_error(backend, program, source),
        LaunchError::Supervisor(err) => RunError::Unavailable(err),
        LaunchError::Domain(e) => RunError::Unavailable(sandbox_core::SandboxUnavailable::new(
            backend.name(),
            format!("entering the launch domain failed: {e}"),
        )),
        other => RunError::Spawn {
            program: program.clone(),
            source: std::io::Error::other(other.to_string()),
        },
    })?;
    let (timed_out, status, mut mediation) =
        (launched.timed_out, launched.status, launched.mediation);
    if let Some(signal) = launched.stopped_by {
        return Err(RunError::Stopped { signal });
    }
    let leftovers = launched.others;
    let limit_records = limits.records();
    drop(limits);
    drop(containment);
    if let Some(mut server) = dns {
        server.shutdown();
        let (refused, omitted) = server.refused();
        let m = mediation.get_or_insert_with(Mediation::default);
        m.omitted += omitted;
        m.refused.extend(refused.into_iter().map(|r| MediatedCall {
            syscall: "dns".into(),
            target: r.name,
            reason: r.reason.to_string(),
            outside_write_paths: false,
        }));
    }
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

/// Starts the run's resolver for `policy`'s egress rules, with the exact
/// names `/etc/hosts` lists already pinned (for `ttl`, the run's timeout,
/// at most [`sandbox_core::MAX_PIN_TTL`]): a program that finds a name there
/// sends no DNS query, and still meets a pinned address. It answers over
/// TCP, and over UDP in the run's datagram namespace where one can be made
/// (Linux; unprivileged, that takes user namespaces), when the run first
/// asks for a datagram socket.
fn start_dns(
    policy: &ResolvedPolicy,
    ttl: Duration,
) -> std::io::Result<(DnsServer, sandbox_core::DnsRoute)> {
    let own = sandbox_proxy::host_addrs()?;
    let pins = Pins::new(
        sandbox_core::EgressRules::new(policy.allow_net().to_vec()),
        own,
    );
    if let Ok(hosts) = std::fs::read_to_string("/etc/hosts") {
        for (ip, name) in hosts_entries(&hosts) {
            if pins.lists(&name) == Some(sandbox_core::NameMatch::Exact) {
                pins.pin(&name, ip, ttl);
            }
        }
    }
    let server = DnsServer::start(pins.clone(), None)?;
    let datagrams = datagram_namespace(&server)?;
    let route = sandbox_core::DnsRoute {
        resolver: server.addr(),
        pins,
        datagrams,
    };
    Ok((server, route))
}

/// The run's datagram namespace, made at the first datagram socket the run
/// asks for, its resolver sockets then served by `server`.
#[cfg(target_os = "linux")]
fn datagram_namespace(
    server: &DnsServer,
) -> std::io::Result<Option<std::sync::Arc<dyn sandbox_core::DatagramSockets>>> {
    let service = server.datagram_service();
    let island =
        sandbox_proxy::island::Island::new(Box::new(move |sockets| service.serve(sockets)))?;
    Ok(Some(std::sync::Arc::new(island)))
}

#[cfg(not(target_os = "linux"))]
fn datagram_namespace(
    _: &DnsServer,
) -> std::io::Result<Option<std::sync::Arc<dyn sandbox_core::DatagramSockets>>> {
    Ok(None)
}

/// The (address, name) pairs of an `/etc/hosts` text (hosts(5)): names
/// lowercase, comments dropped.
fn hosts_entries(text: &str) -> Vec<(std::net::IpAddr, String)> {
    text.lines()
        .filter_map(|line| {
            let line = line.split('#').next()?;
            let mut fields = line.split_whitespace();
            let ip: std::net::IpAddr = fields.next()?.parse().ok()?;
            Some(
                fields
                    .map(|n| (ip, n.trim_end_matches('.').to_ascii_lowercase()))
                    .collect::<Vec<_>>(),
            )
        })
        .flatten()
        .collect()
}

/// Finds `program` as a shell would (see [`sandbox_launch::locate`]).
fn locate(
    program: &OsStr,
    path_var: Option<&OsStr>,
    cwd: Option<&Path>,
) -> Result<PathBuf, RunError> {
    sandbox_launch::locate(program, path_var, cwd).map_err(|e| match e {
        sandbox_launch::LocateError::NotExecutable { path, reason } => {
            RunError::NotExecutable { path, reason }
        }
        _ => RunError::NotFound(program.to_owned()),
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn hosts_entries_are_read_as_hosts5_says() {
        let text = "127.0.0.1 localhost Svc.Example.com. # a comment\n\
                    # 10.0.0.1 commented.example.com\n\
                    ::1 ip6-localhost\n\
                    not-an-ip name.example.com\n";
        let got = super::hosts_entries(text);
        let names: Vec<&str> = got.iter().map(|(_, n)| n.as_str()).collect();
        assert_eq!(names, ["localhost", "svc.example.com", "ip6-localhost"]);
        assert_eq!(got[2].0, "::1".parse::<std::net::IpAddr>().unwrap());
    }
}
