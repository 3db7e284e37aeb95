//! The shared launch of a session's commands (issue #45): one confined run,
//! the *zygote*, started once through [`crate::runner::run`] (the session's
//! policy, domain, filter, broker, limits and containment), forks each
//! command after nesting a Landlock layer that only scopes signals, and
//! ends everything nested beneath its own domain when the command ends.
//!
//! * [`serve`] is the zygote's side: the program given to [`Zygote::start`]
//!   calls it (the CLI's hidden `sandbox __zygote`).
//! * [`Zygote`] is the runner's side: it keeps the zygote's run on a thread,
//!   sends it one command at a time and keeps each command's deadline.
//!
//! The protocol runs on a `SOCK_SEQPACKET` socket pair (one message per
//! request or answer, bounded). Runner to zygote: a spawn request
//! ([`MAX_REQUEST`] bytes at most: the program's path, argv, environment and
//! working directory, NUL-separated and counted, with the command's three
//! stdio fds by `SCM_RIGHTS`), or one byte `e` (end the command now).
//! Zygote to runner: fixed 9-byte answers, one per request (`x`, the
//! errno and the step that failed, [`PreExec`], when the command could not
//! be executed, else `s` + its wait status +
//! how many other processes were ended, once nothing of it is left). A
//! zygote started for a kept command ([`Shared::run_kept`], the environment
//! variable `SANDBOX_ZYGOTE_KEEP`) serves that one command only: its first
//! `s` comes when the command's main process exits and carries how many of
//! its processes are alive (nothing is ended), and a second `s`, after the
//! runner's `e` or its socket's end, how many it then ended. Every answer is checked by the runner and
//! waited for with a bound: the zygote is inside the sandbox.
//!
//! Cleanup needs no cgroup: under Landlock ABI 6 signal scoping, `kill(-1,
//! sig)` from the zygote reaches exactly the processes in domains nested
//! beneath its own (Documentation/userspace-api/landlock.rst, "Scoped
//! access"), that is its commands and their descendants, and the zygote, a
//! child subreaper, reaps them until `waitpid` says `ECHILD` (orphans are
//! reparented to it) before it answers.
//!
//! Each command is started as `posix_spawn` starts one: `clone` with
//! `CLONE_VM | CLONE_VFORK` on a stack of its own, every signal blocked
//! meanwhile, so nothing of the zygote is copied and the zygote waits
//! until the child has exec'd (or failed, its errno written to memory the
//! zygote reads then). Until its exec the child runs only the zygote's
//! code (stdio, working directory, the nested layer, the signal mask put
//! back); every process of the previous command is gone by then, so no
//! command's process shares the zygote's memory. A fork copied the
//! zygote's page tables for each command, about 100 µs of a 0.9 ms
//! `/bin/true` on the 2-core VM.
//!
//! # Threat table
//! The command is hostile (perhaps root, capabilities dropped); the zygote
//! runs under the session's policy, so it is treated as taken over too.
//! Tests in `tests/tests/it/session.rs`:
//!
//! | part | who controls what | held by | attacked by |
//! |---|---|---|---|
//! | the zygote process | the command: signals (`kill`, `tgkill`, pidfd), `ptrace` attach or seize, `/proc/<zygote>/mem`, knowing its pid (its parent) | each command nests a Landlock domain that scopes signals beneath the zygote's (no shared launch below ABI 6); ptrace-class access reaches only nested domains; the zygote is non-dumpable and ignores the stop signals its launch passes on; the filter admits `landlock_restrict_self` only with the layer's fd number and no flags, and that fd is closed in each command | `a_command_cannot_signal_ptrace_or_read_the_zygote` |
//! | the zygote's answers | a zygote taken over or killed: any bytes, none, late | fixed 9-byte answers, tag and values checked; every wait bounded (10 s; the deadline plus grace plus 10 s after an end); anything else ends the zygote's run (its launch ends every process of it, cgroup or process group), that command gets a runner failure and the next a new zygote | `a_zygote_killed_from_outside_fails_its_command_and_the_next_runs` |
//! | the spawn request | the harness's argv, env, cwd (the runner's own checks first) | at most [`MAX_REQUEST`] bytes of counted NUL-free strings and exactly 3 fds, else refused (`EINVAL`); a larger request takes a launch of its own | `a_requests_inputs_reach_only_its_command` |
//! | the zygote's descriptors | the command's fds | the control socket and the layer are close-on-exec in the zygote, the stdio received close-on-exec: a command holds 0-2 and the nest socket only | `a_shared_commands_descriptors_are_its_stdio_and_the_nest_socket` |
//! | what a command leaves | background processes, double forks, processes ignoring SIGTERM, stopped processes and orphans, siblings made with `CLONE_PARENT` (children of the zygote itself); the broker's per-command state (refusal log, FIFO openers waiting, `/dev/shm` objects, CPU budget, repositories made) | `kill(-1)` SIGTERM, grace, SIGKILL from the zygote (reaching only the domains nested beneath it), reaped until `ECHILD` before the answer; then the broker closes the command (`sandbox_broker::Between`) before the next starts | `a_hundred_commands_each_contained`, `a_session_says_how_it_launches_and_confines_each_command_either_way`, `a_repository_the_command_made_cannot_hang_the_audit_after_it`, `stopped_orphaned_and_deaf_processes_do_not_outlive_their_command`, `a_sibling_made_with_clone_parent_does_not_outlive_its_command` |
//! | a command's nested runs | `sandbox run` inside a command: the runner serves it for the zygote's run, outside the zygote's process tree, so `kill(-1)` does not reach it; a nested command deaf to SIGTERM; a request sent just before its command ends | once the zygote has answered, the runner ends every nested run alive (as on a timeout: SIGTERM, grace, SIGKILL) and waits until none is, before the command's answer and so before the next command; one that starts meanwhile is ended too; a request still being read or checked when its command ends is refused, never started (`nest::Commands::end_all` closes the command's generation) | `a_commands_nested_run_does_not_outlive_it_shared`, twin `a_commands_nested_run_does_not_outlive_it_per_command`, `a_commands_nested_request_never_starts_in_the_next_command` |
//! | a kept command (`"keep": true`, [`Shared::run_kept`]) | background processes that outlive its main process, until the session ends; signals to later commands; the count of its processes and its answers (its zygote is inside the sandbox) | a zygote run of its own (own Landlock domain, filter, broker, containment, limits), beside the shared zygote's domain, not beneath it: the shared zygote's `kill(-1)` does not reach it, and scoping keeps it and later commands from signalling each other; its zygote waits for the main process only and ends nothing then (reaping what exits: `SIGCHLD` ignored), and ends all of it on the runner's `e` or the socket's end (SIGTERM, grace, SIGKILL), then the run's own end ends what is left; its deadline is the policy's ceiling; the count it reports is only reported. Once none of its processes is left its zygote answers and exits, so its run ends and its slot is free for the next keep (the runner ends it then, with its record). Its nested runs (started by its processes, also while later commands run) are served for its run, ended with it and recorded with it ([`KeptEnd::nested`]); every refusal is in its run's record ([`KeptEnd::run`]), and [`Shared::live`] for a later command never reads its tap | `tests/tests/it/session_keep.rs`: `a_kept_commands_nested_runs_are_recorded_when_it_ends`, `the_command_after_a_kept_one_reports_only_its_own_refusals`, `a_kept_slot_is_freed_when_its_processes_are_gone`, `a_kept_commands_repositories_are_audited` |
//! | a command's egress (an allowlist, `--approval channel`, secrets) | the proxy and the resolver, which are the zygote run's (started once by [`crate::runner::run`], its CA files and secrets' placeholders with it); connections a command leaves open; refusals made after it ended | each command gets the variables a run of its own gets ([`sandbox_proxy::EgressTap::set_env`]); its processes, and so its proxy connections, are gone before its answer; its refusals are a window of their own, closed once the proxy has no connection open (at most 1 s): a refusal a closed window's connection makes later goes to the zygote run's record only, never to a later command | `tests/tests/it/session_egress.rs` |
//! | a command's lifetime | never ending, a stop signal to the session | the runner keeps the deadline and the stop signals and sends the end; the zygote's own run ends at the policy's ceiling, so a command that could outlast it gets a new zygote | `a_requests_timeout_is_honoured`, `a_stop_signal_ends_the_command_and_the_session` |

use std::ffi::{CStr, CString, OsString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sandbox_core::Backend;

use crate::outcome::{Classification, Outcome, Termination};
use crate::running::{RunError, RunRequest};

/// The signals a launch passes on to its command's process group.
#[cfg(target_os = "linux")]
const STOP_SIGNALS: [libc::c_int; 4] = [libc::SIGINT, libc::SIGQUIT, libc::SIGTERM, libc::SIGHUP];

/// The environment variable naming the zygote's control socket.
pub const SOCKET_ENV: &str = "SANDBOX_ZYGOTE_FD";
/// The environment variable naming the signal-scoping ruleset's fd.
pub const LAYER_ENV: &str = "SANDBOX_ZYGOTE_LAYER";
/// The environment variable that makes a zygote serve one kept command
/// (its background processes outlive it until the runner ends the run).
const KEEP_ENV: &str = "SANDBOX_ZYGOTE_KEEP";
/// The largest spawn request (argv, environment, working directory).
pub const MAX_REQUEST: usize = 128 * 1024;
/// How long the runner waits for the zygote's answer to a spawn request,
/// and, past the grace period, for its answer after an end.
const ANSWER_WAIT: Duration = Duration::from_secs(10);
/// How long a command's refusals by the egress wait for its proxy
/// connections to end once its processes are gone
/// ([`sandbox_proxy::EgressTap::take`]).
const EGRESS_SETTLE: Duration = Duration::from_secs(1);

/// Why the shared launch cannot serve (the caller falls back to a launch
/// per command, or reports a runner failure).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ZygoteError {
    /// The shared launch is not possible here (which condition).
    #[error("the shared launch is not available: {0}")]
    Unavailable(String),
    /// The zygote did not answer as it must (dead, unresponsive, or a
    /// malformed answer); its run was ended.
    #[error("the session's zygote failed: {0}")]
    Failed(String),
}

/// One command for the zygote.
#[derive(Debug, Clone)]
pub struct ZygoteCommand<'a> {
    /// The program's path (located by the caller).
    pub path: &'a Path,
    /// argv, `argv[0]` included.
    pub argv: &'a [OsString],
    /// The complete environment (the zygote adds only the nest socket's
    /// variable, with its own value).
    pub env: &'a [(OsString, OsString)],
    /// The working directory.
    pub cwd: &'a Path,
    /// stdin, stdout and stderr (the caller's, open until the call returns).
    pub stdio: [RawFd; 3],
    /// When the command is ended if it has not exited.
    pub deadline: Instant,
    /// Time between SIGTERM and SIGKILL when ending it.
    pub grace: Duration,
}

/// How a command of the zygote ended.
#[derive(Debug, Clone, Copy)]
pub struct ZygoteExit {
    /// The wait status (as `waitpid` reports it).
    pub status: i32,
    /// Whether the deadline ended it.
    pub timed_out: bool,
    /// Processes besides the command that were still there and ended.
    pub others: usize,
    /// The step before its exec that failed, and the errno: the command
    /// never ran (`status` is then 127 << 8). `None` when it ran, or when
    /// its exec itself failed (`status` says 127 or 126).
    pub pre_exec: Option<(PreExec, i32)>,
}

/// A step of a command's child before its exec, as the zygote's `x`
/// answer names it (its second value).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PreExec {
    /// Making the received fd its stdin, stdout or stderr (which: 0-2).
    Stdio(u8),
    /// Changing to its working directory.
    Cwd,
    /// Nesting the signal-scoping Landlock layer.
    Layer,
}

/// The step values of the `x` answer (0: the exec itself).
const STEP_EXEC: u32 = 0;
const STEP_CWD: u32 = 1;
const STEP_LAYER: u32 = 2;
/// Plus the fd (0-2).
const STEP_STDIO: u32 = 0x100;

impl PreExec {
    /// The step an answer's value names; `None` for the exec itself;
    /// `Err` for a value no zygote sends.
    fn of(v: u32) -> Result<Option<Self>, ()> {
        match v {
            STEP_EXEC => Ok(None),
            STEP_CWD => Ok(Some(PreExec::Cwd)),
            STEP_LAYER => Ok(Some(PreExec::Layer)),
            v if (STEP_STDIO..STEP_STDIO + 3).contains(&v) => {
                Ok(Some(PreExec::Stdio((v - STEP_STDIO) as u8)))
            }
            _ => Err(()),
        }
    }

    /// The reason a launch of its own would give (`cwd`: the command's
    /// working directory).
    pub fn reason(self, errno: i32, cwd: &Path) -> String {
        let err = std::io::Error::from_raw_os_error(errno);
        match self {
            PreExec::Stdio(fd) => format!("cannot set up its fd {fd} (dup2): {err}"),
            PreExec::Cwd => format!(
                "cannot change to the working directory {}: {err}",
                cwd.display()
            ),
            PreExec::Layer => {
                format!("cannot nest its signal-scoping Landlock layer: {err}")
            }
        }
    }
}

/// The runner's side of a shared launch: the zygote's run, on a thread.
pub struct Zygote {
    sock: OwnedFd,
    /// Closing it ends the zygote's run (the launch's cancel socket).
    cancel: Option<OwnedFd>,
    run: Option<std::thread::JoinHandle<Result<Outcome, RunError>>>,
    /// The pid the zygote reported (untrusted: for tests and logs only).
    pid: Option<libc::pid_t>,
    tap: Arc<std::sync::OnceLock<sandbox_core::MediationTap>>,
    /// The zygote run's egress (proxy, resolver), when its policy has one:
    /// each command's environment for it and its refusals.
    egress: Arc<std::sync::OnceLock<sandbox_proxy::EgressTap>>,
    /// When the zygote's own run reaches its deadline.
    expires: Instant,
    /// The nested runs the zygote's run serves (its commands' `sandbox
    /// run`s), ended when their command ends.
    #[cfg(target_os = "linux")]
    nested: Arc<std::sync::OnceLock<Arc<crate::nest::Commands>>>,
}

impl std::fmt::Debug for Zygote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Zygote").finish_non_exhaustive()
    }
}

/// A close-on-exec `SOCK_SEQPACKET` pair.
fn seqpacket_pair() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: socketpair writes two fds into `fds`.
    let rc = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both fds were just made and are owned here only.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

impl Zygote {
    /// Whether a shared launch can serve `req` under `backend`: `Err` names
    /// why not (the caller then launches per command).
    pub fn check(backend: &dyn Backend, req: &RunRequest) -> Result<(), ZygoteError> {
        let no = |why: &str| Err(ZygoteError::Unavailable(why.to_owned()));
        let Some(policy) = &req.policy else {
            return no("danger-full-access runs commands unconfined");
        };
        if backend.name() != "landlock" {
            return no("the backend is not landlock");
        }
        if policy.deny_subprocess() {
            return no("the policy denies subprocesses");
        }
        Ok(())
    }

    /// Starts `program` (which calls [`serve`]) as a confined run of
    /// `req` (argv, stdio and cwd replaced) on a thread of its own.
    #[cfg(target_os = "linux")]
    pub fn start(
        backend: Arc<dyn Backend>,
        req: &RunRequest,
        program: &Path,
    ) -> Result<Self, ZygoteError> {
        Self::start_for(backend, req, program, false)
    }

    /// [`Zygote::start`]; with `keep`, the zygote serves one command whose
    /// background processes outlive it (see [`Kept`]).
    #[cfg(target_os = "linux")]
    fn start_for(
        backend: Arc<dyn Backend>,
        req: &RunRequest,
        program: &Path,
        keep: bool,
    ) -> Result<Self, ZygoteError> {
        Self::check(backend.as_ref(), req)?;
        let failed =
            |what: &str, e: &dyn std::fmt::Display| ZygoteError::Failed(format!("{what}: {e}"));
        let layer = sandbox_landlock::LandlockBackend::new()
            .and_then(|b| b.child_layer())
            .map_err(|e| failed("the signal-scoping layer", &e))?
            .ok_or_else(|| {
                ZygoteError::Unavailable(
                    "Landlock ABI below 6 (no signal scoping for each command)".into(),
                )
            })?;
        let (ours, theirs) = seqpacket_pair().map_err(|e| failed("socketpair", &e))?;
        let (cancel, cancel_theirs) = seqpacket_pair().map_err(|e| failed("socketpair", &e))?;
        let mut zreq = req.clone();
        zreq.argv = vec![program.as_os_str().to_owned(), "__zygote".into()];
        zreq.cwd = Some(PathBuf::from("/"));
        zreq.stdio = None;
        zreq.echo_stderr = false;
        zreq.inherit = Some(theirs.as_raw_fd());
        zreq.child_layer = Some(layer.as_raw_fd());
        zreq.cancel = Some(cancel_theirs.as_raw_fd());
        // A stop signal ends the command the runner is waiting for (its
        // `e`, then the zygote's answer), and the zygote's run with the
        // session: the run must not end the zygote on it meanwhile.
        zreq.relayed_signals_only = true;
        let mut env = req
            .env
            .clone()
            .unwrap_or_else(|| std::env::vars_os().collect());
        env.retain(|(n, _)| n != SOCKET_ENV && n != LAYER_ENV && n != KEEP_ENV);
        env.push((SOCKET_ENV.into(), theirs.as_raw_fd().to_string().into()));
        env.push((LAYER_ENV.into(), layer.as_raw_fd().to_string().into()));
        if keep {
            env.push((KEEP_ENV.into(), "1".into()));
        }
        zreq.env = Some(env);
        // The zygote lives as long as the policy's ceiling allows (its own
        // run's deadline); each command's deadline is kept here.
        if let Some(policy) = &req.policy {
            let mut raw = policy.to_policy();
            raw.timeout_seconds = policy.max_timeout_seconds();
            zreq.policy = Some(
                raw.resolve(&sandbox_core::ExpandContext::default())
                    .map_err(|e| failed("the zygote's policy", &e))?,
            );
        }
        let expires = Instant::now() + zreq.policy.as_ref().map_or(Duration::ZERO, |p| p.timeout());
        let tap = Arc::new(std::sync::OnceLock::new());
        zreq.tap = Some(Arc::clone(&tap));
        let egress = Arc::new(std::sync::OnceLock::new());
        zreq.egress_tap = Some(Arc::clone(&egress));
        let nested = Arc::new(std::sync::OnceLock::new());
        let publish = Arc::clone(&nested);
        let run = std::thread::Builder::new()
            .name("sandbox-zygote".into())
            .spawn(move || {
                crate::nest::publish_commands(publish);
                let out = crate::running::run(backend.as_ref(), &zreq);
                drop((theirs, cancel_theirs, layer));
                out
            })
            .map_err(|e| failed("thread", &e))?;
        let mut z = Zygote {
            sock: ours,
            cancel: Some(cancel),
            run: Some(run),
            pid: None,
            tap,
            egress,
            expires,
            nested,
        };
        // The zygote says it is ready (one byte `r`) once it serves.
        match z.answer(Instant::now() + ANSWER_WAIT, 9) {
            Ok(a) if a[0] == b'r' => {
                let pid = i32::from_ne_bytes([a[1], a[2], a[3], a[4]]);
                z.pid = (pid > 0).then_some(pid);
                // The zygote can say `ready` before the launching thread has
                // confirmed the supervisor and published its tap; a command
                // closed before then would find no broker to close it.
                let deadline = Instant::now() + ANSWER_WAIT;
                while z.tap.get().is_none() {
                    if z.run_finished() || Instant::now() > deadline {
                        return Err(z.fail("the run's supervisor was not ready".into()));
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                // The egress starts before the launch: a run with secrets
                // and no egress tap would give its commands their values.
                if !req.egress.secrets.is_empty() && z.egress.get().is_none() {
                    return Err(z.fail("the run's egress gave no tap".into()));
                }
                Ok(z)
            }
            Ok(_) => Err(z.fail("the zygote's first answer is not `ready`".into())),
            Err(why) => Err(z.fail(why)),
        }
    }

    /// Closes the command that just ended in the run's supervisor (the
    /// broker): what it left waiting is dropped, its shared memory
    /// removed, and what it refused returned (`None`: the supervisor did
    /// not answer, or there is none).
    pub fn take_mediation(&self) -> Option<sandbox_core::Mediation> {
        let mut m = self.tap.get().and_then(|t| t.take())?;
        // The proxy's and the resolver's, once the command's connections
        // have ended (bounded: a question held for a decider waits).
        if let Some(egress) = self.egress.get() {
            m.absorb(egress.take(EGRESS_SETTLE));
        }
        Some(m)
    }

    /// The refusals of the running command since the last call, and how
    /// many it had so far ([`live_of`]).
    fn live(&self) -> Option<(Vec<sandbox_core::MediatedCall>, u64)> {
        live_of(&self.tap, &self.egress)
    }

    /// Sets what a command needs in `env` to use the run's egress (proxy,
    /// resolver, CA files, secrets' placeholders), as a run of its own
    /// gets it ([`sandbox_proxy::Egress::set_env`]).
    fn set_egress_env(&self, env: &mut Vec<(OsString, OsString)>) {
        if let Some(egress) = self.egress.get() {
            egress.set_env(env);
        }
    }

    /// When the zygote's own run reaches its deadline (the policy's
    /// ceiling): a command that could outlast it needs a new zygote.
    pub fn expires(&self) -> Instant {
        self.expires
    }

    /// The zygote's pid (for tests: it must be out of each command's reach).
    pub fn pid(&self) -> Option<libc::pid_t> {
        self.pid
    }

    /// Ends the zygote's run and returns `Failed(why)` (with the run's
    /// own error, when it failed to start).
    fn fail(&mut self, why: String) -> ZygoteError {
        let ended = self.end();
        match ended {
            Some(Err(e)) => ZygoteError::Failed(format!("{why} ({e})")),
            _ => ZygoteError::Failed(why),
        }
    }

    /// Ends the zygote's run (as at its deadline) and waits for it.
    pub fn end(&mut self) -> Option<Result<Outcome, RunError>> {
        // The zygote sees the end of its socket and exits (it ignores stop
        // signals), then the run's end ends whatever is left.
        // SAFETY: shutdown on a socket this value owns.
        unsafe { libc::shutdown(self.sock.as_raw_fd(), libc::SHUT_RDWR) };
        self.cancel = None;
        self.run.take().and_then(|h| h.join().ok())
    }

    /// Waits until `deadline` for one answer of `len` bytes.
    fn answer(&self, deadline: Instant, len: usize) -> Result<[u8; 9], String> {
        let mut buf = [0u8; 9];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let mut p = libc::pollfd {
                fd: self.sock.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            let ms = left.as_millis().min(100) as libc::c_int;
            // SAFETY: one pollfd, valid for the call.
            let rc = unsafe { libc::poll(&mut p, 1, ms) };
            if rc > 0 {
                // SAFETY: reads at most 9 bytes into `buf`.
                let n = unsafe {
                    libc::recv(
                        self.sock.as_raw_fd(),
                        buf.as_mut_ptr().cast(),
                        buf.len(),
                        libc::MSG_DONTWAIT,
                    )
                };
                return match n {
                    n if n as usize == len => Ok(buf),
                    0 => Err("the zygote is gone".into()),
                    n if n < 0 => Err(format!(
                        "reading the zygote's answer: {}",
                        std::io::Error::last_os_error()
                    )),
                    n => Err(format!("the zygote's answer has {n} bytes, not {len}")),
                };
            }
            if left.is_zero() {
                return Err("the zygote did not answer in time".into());
            }
            if self.run.as_ref().is_some_and(|h| h.is_finished()) {
                return Err("the zygote's run ended".into());
            }
        }
    }

    /// Runs one command and waits for it and everything it left to end.
    /// On `Err` the zygote's run has been ended: start a new one for the
    /// next command.
    pub fn run(&mut self, cmd: &ZygoteCommand<'_>) -> Result<ZygoteExit, ZygoteError> {
        let ran = self.run_command(cmd);
        // The command's nested runs are served outside the zygote's process
        // tree: they end with it, before the next command starts.
        #[cfg(target_os = "linux")]
        if let Some(nested) = self.nested.get() {
            nested.end_all();
        }
        ran
    }

    fn run_command(&mut self, cmd: &ZygoteCommand<'_>) -> Result<ZygoteExit, ZygoteError> {
        let msg = encode(cmd).map_err(ZygoteError::Unavailable)?;
        if let Err(e) = send_with_fds(self.sock.as_raw_fd(), &msg, &cmd.stdio) {
            return Err(self.fail(format!("sending the command: {e}")));
        }
        let mut timed_out = false;
        let mut ended_at = None;
        loop {
            let now = Instant::now();
            let stop = sandbox_launch::stop_requested().is_some();
            if ended_at.is_none() && (now >= cmd.deadline || stop) {
                timed_out = !stop;
                // SAFETY: sends one byte from a local.
                let sent = unsafe {
                    libc::send(
                        self.sock.as_raw_fd(),
                        b"e".as_ptr().cast(),
                        1,
                        libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
                    )
                };
                if sent != 1 {
                    return Err(self.fail("the zygote does not take the end".into()));
                }
                ended_at = Some(now);
            }
            let limit = match ended_at {
                Some(at) => at + cmd.grace + ANSWER_WAIT,
                None => cmd.deadline.min(now + Duration::from_millis(100)),
            };
            match self.answer(limit, 9) {
                Ok(a) if a[0] == b's' => {
                    let status = i32::from_ne_bytes([a[1], a[2], a[3], a[4]]);
                    let others = u32::from_ne_bytes([a[5], a[6], a[7], a[8]]) as usize;
                    return Ok(ZygoteExit {
                        status,
                        timed_out,
                        others,
                        pre_exec: None,
                    });
                }
                Ok(a) if a[0] == b'x' => {
                    // The command never ran; its status says why, or the
                    // step before its exec that failed.
                    let errno = i32::from_ne_bytes([a[1], a[2], a[3], a[4]]);
                    let step = u32::from_ne_bytes([a[5], a[6], a[7], a[8]]);
                    let Ok(step) = PreExec::of(step) else {
                        return Err(self.fail("the zygote's answer is malformed".into()));
                    };
                    return Ok(ZygoteExit {
                        status: match step {
                            Some(_) => 127 << 8,
                            None => exec_failure_status(errno),
                        },
                        timed_out,
                        others: 0,
                        pre_exec: step.map(|s| (s, errno)),
                    });
                }
                Ok(_) => return Err(self.fail("the zygote's answer is malformed".into())),
                Err(_) if ended_at.is_none() && !self.run_finished() => continue,
                Err(why) => return Err(self.fail(why)),
            }
        }
    }

    fn run_finished(&self) -> bool {
        self.run.as_ref().map_or(true, |h| h.is_finished())
    }
}

impl Drop for Zygote {
    fn drop(&mut self) {
        let _ = self.end();
    }
}

/// A command's refusals since the last call, the broker's (`tap`) then
/// the egress's, and how many it had so far; `None` until the broker's
/// tap is published.
fn live_of(
    tap: &std::sync::OnceLock<sandbox_core::MediationTap>,
    egress: &std::sync::OnceLock<sandbox_proxy::EgressTap>,
) -> Option<(Vec<sandbox_core::MediatedCall>, u64)> {
    let tap = tap.get()?;
    let egress = egress.get().map(|e| e.live());
    match (tap.live(), egress) {
        (None, None) => None,
        (b, e) => {
            let (mut calls, mut count) = b.unwrap_or_default();
            if let Some((more, n)) = e {
                calls.extend(more);
                count += n;
            }
            Some((calls, count))
        }
    }
}

/// The runner failure for a command whose child failed `pre_exec` (a
/// step before its exec), said as a launch of its own says it.
#[cfg(target_os = "linux")]
fn pre_exec_error(req: &RunRequest, cwd: &Path, pre_exec: Option<(PreExec, i32)>) -> RunError {
    let program = req.argv.first().cloned().unwrap_or_default();
    let source = match pre_exec {
        Some((step, errno)) => {
            let kind = std::io::Error::from_raw_os_error(errno).kind();
            std::io::Error::new(kind, step.reason(errno, cwd))
        }
        None => std::io::Error::other("the command never ran"),
    };
    RunError::Spawn { program, source }
}

/// The wait status a shell-like runner reports for a program that could
/// not be executed (errno `e`): 127 when not found, else 126.
fn exec_failure_status(e: i32) -> i32 {
    let code = if e == libc::ENOENT { 127 } else { 126 };
    code << 8
}

/// The outcome record of one command of the zygote.
pub fn outcome(
    argv: &[OsString],
    policy: Option<&sandbox_core::ResolvedPolicy>,
    exit: &ZygoteExit,
    started: Instant,
) -> Outcome {
    let termination = if libc::WIFEXITED(exit.status) {
        Termination::Exited {
            code: libc::WEXITSTATUS(exit.status),
        }
    } else if libc::WIFSIGNALED(exit.status) {
        Termination::Signaled {
            signal: libc::WTERMSIG(exit.status),
        }
    } else {
        Termination::Exited { code: -1 }
    };
    let classification = Classification::of(&termination, exit.timed_out, true);
    Outcome {
        schema: crate::outcome::SCHEMA_VERSION,
        argv: argv
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        policy: policy.cloned(),
        backend: "landlock".to_owned(),
        report: None,
        termination,
        timed_out: exit.timed_out,
        leftover_processes_ended: exit.others,
        containment: None,
        mediation: None,
        limits: Vec::new(),
        duration_ms: started.elapsed().as_secs_f64() * 1000.0,
        classification,
        nested: Vec::new(),
        omitted: crate::outcome::Omitted::default(),
    }
}

/// The spawn request: `path\0argc argv...\0 envc env...\0 cwd\0`, counts as
/// decimal strings; `Err` when it is larger than [`MAX_REQUEST`] or holds
/// a NUL inside a string.
fn encode(cmd: &ZygoteCommand<'_>) -> Result<Vec<u8>, String> {
    // One allocation: every string and its NUL (`=` for a variable).
    let size = cmd.path.as_os_str().len()
        + cmd.cwd.as_os_str().len()
        + cmd.argv.iter().map(|a| a.len() + 1).sum::<usize>()
        + cmd
            .env
            .iter()
            .map(|(n, v)| n.len() + v.len() + 2)
            .sum::<usize>()
        + 48;
    let mut out = Vec::with_capacity(size.min(MAX_REQUEST + 1));
    let nul = |bytes: &[u8]| -> Result<(), String> {
        match bytes.contains(&0) {
            true => Err("a NUL byte in the command".into()),
            false => Ok(()),
        }
    };
    let mut push = |parts: &[&[u8]]| -> Result<(), String> {
        for part in parts {
            nul(part)?;
            out.extend_from_slice(part);
        }
        out.push(0);
        Ok(())
    };
    push(&[cmd.path.as_os_str().as_bytes()])?;
    push(&[cmd.argv.len().to_string().as_bytes()])?;
    for a in cmd.argv {
        push(&[a.as_bytes()])?;
    }
    push(&[cmd.env.len().to_string().as_bytes()])?;
    for (n, v) in cmd.env {
        push(&[n.as_bytes(), b"=", v.as_bytes()])?;
    }
    push(&[cmd.cwd.as_os_str().as_bytes()])?;
    if out.len() > MAX_REQUEST {
        return Err(format!(
            "the command's argv and environment exceed {MAX_REQUEST} bytes"
        ));
    }
    Ok(out)
}

/// What [`decode`] reads: C strings borrowed from the message (each
/// field is NUL-terminated there), nothing copied.
struct Spawn<'a> {
    path: &'a CStr,
    argv: Vec<&'a CStr>,
    env: Vec<&'a CStr>,
    cwd: &'a CStr,
}

fn decode(msg: &[u8]) -> Option<Spawn<'_>> {
    // Every field ends with its NUL, the last one too.
    if msg.last() != Some(&0) {
        return None;
    }
    let mut parts = msg.split_inclusive(|&b| b == 0);
    let mut next = || parts.next().and_then(|p| CStr::from_bytes_with_nul(p).ok());
    let count = |c: &CStr| -> Option<usize> { c.to_str().ok()?.parse().ok() };
    let path = next()?;
    let argc = count(next()?)?;
    let argv: Vec<&CStr> = (0..argc).map(|_| next()).collect::<Option<_>>()?;
    let envc = count(next()?)?;
    let env: Vec<&CStr> = (0..envc).map(|_| next()).collect::<Option<_>>()?;
    let cwd = next()?;
    if argv.is_empty() || next().is_some() {
        return None;
    }
    Some(Spawn {
        path,
        argv,
        env,
        cwd,
    })
}

/// Sends `msg` with three fds.
fn send_with_fds(sock: RawFd, msg: &[u8], fds: &[RawFd; 3]) -> std::io::Result<()> {
    let mut cbuf = [0u64; 8];
    // SAFETY: msghdr is plain data; every pointer set below points into
    // locals that outlive the call, and the control buffer holds one
    // SCM_RIGHTS message of three fds (CMSG_SPACE(12) <= 64 bytes).
    unsafe {
        let mut iov = libc::iovec {
            iov_base: msg.as_ptr() as *mut libc::c_void,
            iov_len: msg.len(),
        };
        let mut m: libc::msghdr = std::mem::zeroed();
        m.msg_iov = &mut iov;
        m.msg_iovlen = 1;
        m.msg_control = cbuf.as_mut_ptr().cast();
        m.msg_controllen = libc::CMSG_SPACE(12) as _;
        let c = libc::CMSG_FIRSTHDR(&m);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(12) as _;
        std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(c).cast(), 3);
        if libc::sendmsg(sock, &m, libc::MSG_NOSIGNAL) != msg.len() as isize {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// One message from the runner: its bytes and the fds it carried.
enum Received {
    Gone,
    Message(Vec<u8>, Vec<OwnedFd>),
}

fn recv_with_fds(sock: RawFd, buf: &mut [u8]) -> Received {
    let mut cbuf = [0u64; 16];
    // SAFETY: as in send_with_fds; the kernel writes at most msg_controllen
    // bytes of control data and `buf.len()` bytes of data.
    unsafe {
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        let mut m: libc::msghdr = std::mem::zeroed();
        m.msg_iov = &mut iov;
        m.msg_iovlen = 1;
        m.msg_control = cbuf.as_mut_ptr().cast();
        m.msg_controllen = std::mem::size_of_val(&cbuf) as _;
        let n = loop {
            let n = libc::recvmsg(sock, &mut m, libc::MSG_CMSG_CLOEXEC);
            if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            break n;
        };
        if n <= 0 {
            return Received::Gone;
        }
        let mut fds = Vec::new();
        let mut c = libc::CMSG_FIRSTHDR(&m);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let bytes = (*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                let data = libc::CMSG_DATA(c).cast::<RawFd>();
                for i in 0..bytes / 4 {
                    fds.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i))));
                }
            }
            c = libc::CMSG_NXTHDR(&m, c);
        }
        let truncated = m.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0;
        if truncated {
            return Received::Message(Vec::new(), fds);
        }
        Received::Message(buf[..n as usize].to_vec(), fds)
    }
}

fn reply(sock: RawFd, tag: u8, a: i32, b: u32) {
    let mut out = [0u8; 9];
    out[0] = tag;
    out[1..5].copy_from_slice(&a.to_ne_bytes());
    out[5..9].copy_from_slice(&b.to_ne_bytes());
    // SAFETY: sends 9 bytes from a local.
    unsafe { libc::send(sock, out.as_ptr().cast(), 9, libc::MSG_NOSIGNAL) };
}

fn env_fd(name: &str) -> Option<RawFd> {
    std::env::var(name).ok()?.parse().ok().filter(|&fd| fd > 2)
}

/// The zygote: serves spawn requests on the socket [`SOCKET_ENV`] names
/// until the runner closes it; returns the exit code for the zygote's
/// process. Called by the program [`Zygote::start`] runs, at its start,
/// single-threaded.
#[cfg(target_os = "linux")]
pub fn serve() -> i32 {
    let (Some(sock), Some(layer)) = (env_fd(SOCKET_ENV), env_fd(LAYER_ENV)) else {
        return 2;
    };
    // SAFETY: fcntl and prctl with integer arguments; marks the two fds
    // this process owns close-on-exec so no command inherits them.
    unsafe {
        libc::fcntl(sock, libc::F_SETFD, libc::FD_CLOEXEC);
        libc::fcntl(layer, libc::F_SETFD, libc::FD_CLOEXEC);
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
        // A stop signal the zygote's launch passes on to its process group
        // is for the command (as from a terminal); the zygote ends on the
        // runner's word (its socket, its run's end) only. Each child sets
        // them back to the default before exec.
        for sig in STOP_SIGNALS {
            libc::signal(sig, libc::SIG_IGN);
        }
    }
    // The nest capability's variable: the command gets the zygote's own.
    let nest = std::env::var_os(crate::nest::NEST_FD_ENV).and_then(|v| {
        let mut kv = OsString::from(crate::nest::NEST_FD_ENV);
        kv.push("=");
        kv.push(v);
        CString::new(kv.into_vec()).ok()
    });
    let grace = Duration::from_secs(2);
    let keep = std::env::var_os(KEEP_ENV).is_some();
    let Some(mut stack) = ChildStack::new() else {
        return 2;
    };
    reply(sock, b'r', std::process::id() as i32, 0);
    let mut buf = vec![0u8; MAX_REQUEST + 1];
    loop {
        let (msg, fds) = match recv_with_fds(sock, &mut buf) {
            Received::Gone => return 0,
            Received::Message(m, f) => (m, f),
        };
        if msg == b"e" {
            continue; // an end for a command that has already ended
        }
        let spawn = match (decode(&msg), fds.len()) {
            (Some(s), 3) => s,
            _ => {
                reply(sock, b'x', libc::EINVAL, 0);
                continue;
            }
        };
        let mut envp: Vec<*const libc::c_char> = spawn
            .env
            .iter()
            .filter(|kv| {
                let name = kv.to_bytes().split(|&b| b == b'=').next();
                name != Some(crate::nest::NEST_FD_ENV.as_bytes())
            })
            .map(|c| c.as_ptr())
            .collect();
        if let Some(n) = &nest {
            envp.push(n.as_ptr());
        }
        envp.push(std::ptr::null());
        let mut argv: Vec<*const libc::c_char> = spawn.argv.iter().map(|c| c.as_ptr()).collect();
        argv.push(std::ptr::null());
        let mut args = ChildArgs {
            stdio: [fds[0].as_raw_fd(), fds[1].as_raw_fd(), fds[2].as_raw_fd()],
            path: spawn.path.as_ptr(),
            cwd: spawn.cwd.as_ptr(),
            layer,
            argv: argv.as_ptr(),
            envp: envp.as_ptr(),
            mask: None,
            errno: 0,
            step: STEP_EXEC,
        };
        let pid = spawn_child(&mut stack, &mut args);
        drop(fds);
        let Some(pid) = pid else {
            reply(sock, b'x', libc::EAGAIN, 0);
            continue;
        };
        // The child has exec'd or exited (CLONE_VFORK): a failure is known.
        let failed = (args.errno != 0).then_some((args.errno, args.step));
        if keep {
            serve_kept(sock, pid, grace, failed);
            return 0;
        }
        let (status, others) = supervise(sock, pid, grace);
        match failed {
            Some((errno, step)) => reply(sock, b'x', errno, step),
            None => reply(sock, b's', status, others),
        }
    }
}

/// The stack a command's child runs on until its exec (see
/// [`spawn_child`]): [`CHILD_STACK`] bytes above a guard page.
#[cfg(target_os = "linux")]
struct ChildStack {
    base: *mut libc::c_void,
    len: usize,
}

/// The usable size of [`ChildStack`] (the child calls a few wrappers).
#[cfg(target_os = "linux")]
const CHILD_STACK: usize = 64 * 1024;

#[cfg(target_os = "linux")]
impl ChildStack {
    fn new() -> Option<Self> {
        let page = 4096;
        let len = CHILD_STACK + page;
        // SAFETY: a fresh private anonymous mapping; its lowest page is
        // made inaccessible (an overflow faults instead of writing below).
        unsafe {
            let base = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            );
            if base == libc::MAP_FAILED {
                return None;
            }
            if libc::mprotect(base, page, libc::PROT_NONE) != 0 {
                libc::munmap(base, len);
                return None;
            }
            Some(ChildStack { base, len })
        }
    }

    /// Its top (stacks grow down), 16-byte aligned.
    fn top(&mut self) -> *mut libc::c_void {
        // SAFETY: one past the mapping's end, which is page-aligned.
        unsafe { self.base.cast::<u8>().add(self.len).cast() }
    }
}

/// What a command's child needs, prepared before the clone: the child
/// only reads it, but for `errno`.
#[cfg(target_os = "linux")]
struct ChildArgs {
    /// The fds that become its 0, 1 and 2 (above 2: 0-2 are open in the
    /// zygote).
    stdio: [RawFd; 3],
    path: *const libc::c_char,
    cwd: *const libc::c_char,
    /// The signal-scoping ruleset.
    layer: RawFd,
    /// NULL-terminated.
    argv: *const *const libc::c_char,
    /// NULL-terminated.
    envp: *const *const libc::c_char,
    /// The zygote's signal mask, which the child restores just before its
    /// exec (set by [`spawn_child`]).
    mask: Option<libc::sigset_t>,
    /// Set by the child when it could not exec (why); 0 when it did.
    errno: i32,
    /// Set by the child with `errno`: the step that failed (`STEP_*`).
    step: u32,
}

/// Starts the command's child, as `posix_spawn` does: `clone` with
/// `CLONE_VM | CLONE_VFORK` on `stack`, every signal blocked meanwhile,
/// so the child shares this process's memory (nothing is copied) and this
/// process waits until it has exec'd or exited; `None` when it could not
/// be started. The child sets `args.errno` when its exec failed.
#[cfg(target_os = "linux")]
fn spawn_child(stack: &mut ChildStack, args: &mut ChildArgs) -> Option<libc::pid_t> {
    // SAFETY: sigset_t is plain data, every bit of `all` set; the kernel
    // reads and writes its first KERNEL_SIGSET bytes.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        std::ptr::write_bytes(&mut all, 0xff, 1);
        // No handler of this process runs in the child, which shares its
        // memory, before its dispositions are reset or it execs; glibc's
        // internal signals (32, 33) too, which its sigprocmask leaves
        // unblocked: so the raw system call, as posix_spawn does.
        if set_mask(&all, &mut old) != 0 {
            return None;
        }
        args.mask = Some(old);
        // SAFETY: `child` runs on `stack` (mapped, writable, unused by
        // anything else: this process is single-threaded and waits until
        // the child execs or exits), reads `args`, which outlives the
        // call, and makes only async-signal-safe calls.
        let pid = libc::clone(
            child,
            stack.top(),
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            (args as *mut ChildArgs).cast(),
        );
        set_mask(&old, std::ptr::null_mut());
        // The child wrote `errno` and `step` through another pointer.
        args.errno = std::ptr::read_volatile(&args.errno);
        args.step = std::ptr::read_volatile(&args.step);
        (pid > 0).then_some(pid)
    }
}

/// The size of the kernel's signal set (`_NSIG / 8` on x86-64 and aarch64).
#[cfg(target_os = "linux")]
const KERNEL_SIGSET: usize = 8;

/// Sets this thread's signal mask to `set` exactly (the old one into `old`
/// unless null) by the raw `rt_sigprocmask`: glibc's `sigprocmask` leaves
/// its internal signals (32, 33) out. Async-signal-safe.
///
/// # Safety
/// `set` points to a valid sigset_t; `old` to a writable one, or is null.
#[cfg(target_os = "linux")]
unsafe fn set_mask(set: *const libc::sigset_t, old: *mut libc::sigset_t) -> libc::c_long {
    // SAFETY: as the caller promises; the kernel reads and writes only
    // KERNEL_SIGSET bytes of each.
    unsafe {
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK,
            set,
            old,
            KERNEL_SIGSET,
        )
    }
}

/// The command's child: stdio, working directory, the signal-scoping
/// layer, exec; on failure the errno goes to `args.errno`, the step to
/// `args.step`, and the child exits 127. It runs on [`spawn_child`]'s
/// stack, in the zygote's memory, until its exec: it writes nothing but
/// `args.errno`, `args.step` and its own stack.
#[cfg(target_os = "linux")]
extern "C" fn child(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `ChildArgs` spawn_child passed, valid while
    // the zygote waits for this child's exec or exit; every pointer in it
    // is valid (prepared before the clone). Only async-signal-safe calls.
    unsafe {
        let args = arg.cast::<ChildArgs>();
        let fail = |e: i32, step: u32| -> ! {
            std::ptr::write_volatile(&mut (*args).step, step);
            std::ptr::write_volatile(&mut (*args).errno, if e == 0 { libc::EINVAL } else { e });
            libc::_exit(127)
        };
        let errno = || *libc::__errno_location();
        for sig in STOP_SIGNALS {
            libc::signal(sig, libc::SIG_DFL);
        }
        for (to, from) in (*args).stdio.iter().enumerate() {
            if libc::dup2(*from, to as RawFd) < 0 {
                fail(errno(), STEP_STDIO + to as u32);
            }
        }
        if libc::chdir((*args).cwd) != 0 {
            fail(errno(), STEP_CWD);
        }
        if libc::syscall(libc::SYS_landlock_restrict_self, (*args).layer, 0) != 0 {
            fail(errno(), STEP_LAYER);
        }
        if let Some(mask) = &(*args).mask {
            set_mask(mask, std::ptr::null_mut());
        }
        libc::execve((*args).path, (*args).argv, (*args).envp);
        fail(errno(), STEP_EXEC)
    }
}

/// Reaps the children of the zygote (the command, and every process of it
/// reparented here: the zygote is a child subreaper).
#[cfg(target_os = "linux")]
struct Reaper {
    /// The command's main process.
    pid: libc::pid_t,
    /// Its wait status, once reaped.
    status: Option<i32>,
    /// How many other processes were reaped.
    others: u32,
}

#[cfg(target_os = "linux")]
impl Reaper {
    fn new(pid: libc::pid_t) -> Self {
        Reaper {
            pid,
            status: None,
            others: 0,
        }
    }

    /// Reaps one child (waiting for one when `block`); whether one was.
    fn reap(&mut self, block: bool) -> bool {
        let mut st = 0;
        // SAFETY: reaps a child of this process.
        let got = unsafe { libc::waitpid(-1, &mut st, if block { 0 } else { libc::WNOHANG }) };
        if got == self.pid {
            self.status = Some(st);
        } else if got > 0 {
            self.others += 1;
        }
        got > 0
    }

    /// Whether no child is left (every zombie reaped first).
    fn none_left(&mut self) -> bool {
        while self.reap(false) {}
        let mut st = 0;
        // SAFETY: only asks whether this process has children.
        let got = unsafe { libc::waitpid(-1, &mut st, libc::WNOHANG | libc::__WALL) };
        got < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD)
    }

    /// Waits until the main process has exited (then `false`) or the
    /// runner asks for the end or goes away (`true`).
    fn wait_main(&mut self, sock: RawFd) -> bool {
        // SAFETY: pidfd_open on our own child.
        let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, self.pid, 0) } as RawFd;
        let mut end = false;
        while self.status.is_none() && !end {
            let mut p = [
                libc::pollfd {
                    fd: pidfd,
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: sock,
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // Without a pidfd, look every 5 ms.
            let timeout = if pidfd < 0 { 5 } else { -1 };
            // SAFETY: two pollfds, valid for the call (a negative fd is ignored).
            unsafe { libc::poll(p.as_mut_ptr(), 2, timeout) };
            if p[1].revents != 0 {
                let mut b = [0u8; 16];
                // SAFETY: reads into a local.
                let n =
                    unsafe { libc::recv(sock, b.as_mut_ptr().cast(), b.len(), libc::MSG_DONTWAIT) };
                if n == 0 || (n == 1 && b[0] == b'e') || n > 1 {
                    end = true;
                }
            }
            while self.status.is_none() && self.reap(false) {}
        }
        if pidfd >= 0 {
            // SAFETY: closes the pidfd this function opened.
            unsafe { libc::close(pidfd) };
        }
        end
    }

    /// Ends everything left: SIGTERM (to the command too when the runner
    /// ended it), the grace period, then SIGKILL, and reaps all. This
    /// process is a child subreaper, so every process left beneath it is a
    /// child of it (orphans are reparented here): none is left once
    /// `waitpid` says ECHILD. (`kill(-1, 0)` cannot tell: it succeeds
    /// whenever any process exists, the scoped ones refused with EPERM
    /// included, kill(2).)
    fn end_all(&mut self, grace: Duration) {
        if self.none_left() {
            return;
        }
        // SAFETY: kill(-1) reaches only the domains nested beneath this one
        // (Landlock signal scoping, see the module doc).
        unsafe { libc::kill(-1, libc::SIGTERM) };
        let until = Instant::now() + grace;
        while !self.none_left() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        // SAFETY: as above.
        unsafe { libc::kill(-1, libc::SIGKILL) };
        while self.reap(true) {}
    }
}

/// Waits for `pid` (or an end from the runner), then ends everything
/// nested beneath this process's domain and reaps it: the wait status and
/// how many other processes were reaped.
#[cfg(target_os = "linux")]
fn supervise(sock: RawFd, pid: libc::pid_t, grace: Duration) -> (i32, u32) {
    let mut r = Reaper::new(pid);
    r.wait_main(sock);
    r.end_all(grace);
    (r.status.unwrap_or(libc::SIGKILL), r.others)
}

/// A kept command (its zygote serves no other): waits for its main
/// process only and answers (`s`, its wait status, how many of its
/// processes are alive), ending nothing; then reaps what exits on its own
/// while it waits for the runner's end (`e`, or the socket's end), ends
/// everything left as [`supervise`] does and answers again (`s`, 0, how
/// many were ended). When none of its processes is left before that, it
/// answers (`s`, 0, 0) at once and returns: its run ends, and so its
/// kept slot. An end before the main process exited (the timeout,
/// a stop signal) ends all of it at once, as [`supervise`].
#[cfg(target_os = "linux")]
fn serve_kept(sock: RawFd, pid: libc::pid_t, grace: Duration, failed: Option<(i32, u32)>) {
    let mut r = Reaper::new(pid);
    if r.wait_main(sock) {
        r.end_all(grace);
        match failed {
            Some((errno, step)) => reply(sock, b'x', errno, step),
            None => reply(sock, b's', r.status.unwrap_or(libc::SIGKILL), r.others),
        }
        return;
    }
    let status = r.status.unwrap_or(libc::SIGKILL);
    if let Some((errno, step)) = failed {
        r.end_all(grace);
        reply(sock, b'x', errno, step);
        return;
    }
    while r.reap(false) {}
    let alive = match count_descendants() {
        0 if !r.none_left() => 1,
        n => n,
    };
    reply(sock, b's', status, alive);
    // What exits from now on is reaped by the kernel (orphans reparented
    // here too); the zombies already there are reaped here.
    // SAFETY: a disposition for SIGCHLD; this process is single-threaded.
    unsafe { libc::signal(libc::SIGCHLD, libc::SIG_IGN) };
    while r.reap(false) {}
    loop {
        // Every 100 ms: is anything of it left? (With SIGCHLD ignored,
        // `waitpid` says ECHILD once every child, orphans reparented here
        // included, has exited.)
        let mut p = libc::pollfd {
            fd: sock,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd, valid for the call.
        let rc = unsafe { libc::poll(&mut p, 1, 100) };
        if rc == 0 {
            if r.none_left() {
                reply(sock, b's', 0, 0);
                return;
            }
            continue;
        }
        let mut b = [0u8; 16];
        // SAFETY: reads into a local, never waiting.
        let n = unsafe { libc::recv(sock, b.as_mut_ptr().cast(), b.len(), libc::MSG_DONTWAIT) };
        if n < 0
            && matches!(
                std::io::Error::last_os_error().raw_os_error(),
                Some(libc::EINTR | libc::EAGAIN)
            )
        {
            continue;
        }
        if n <= 0 || (n == 1 && b[0] == b'e') {
            break;
        }
    }
    // SAFETY: as above: back to the default, so `waitpid` reports each.
    unsafe { libc::signal(libc::SIGCHLD, libc::SIG_DFL) };
    r.others = 0;
    r.end_all(grace);
    reply(sock, b's', 0, r.others);
}

/// How many processes are beneath this one (its children, theirs, ...), by
/// the `children` lists of `/proc/<pid>/task/<tid>/` (0 when they cannot be
/// read); at most 65,536 are counted.
#[cfg(target_os = "linux")]
fn count_descendants() -> u32 {
    const MAX: usize = 1 << 16;
    let mut seen = std::collections::BTreeSet::new();
    let mut queue = vec![std::process::id()];
    while let Some(pid) = queue.pop() {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let Ok(list) = std::fs::read_to_string(task.path().join("children")) else {
                continue;
            };
            for child in list
                .split_whitespace()
                .filter_map(|c| c.parse::<u32>().ok())
            {
                if seen.len() < MAX && seen.insert(child) {
                    queue.push(child);
                }
            }
        }
    }
    seen.len() as u32
}

/// A command's environment as [`crate::runner::run`] would give it, but
/// for the nest socket's variable, which the zygote sets: `req.env` (or
/// this process's), scrubbed by the policy, with `req.env_overrides`.
pub fn command_env(req: &RunRequest) -> Vec<(OsString, OsString)> {
    let env: Vec<(OsString, OsString)> = req
        .env
        .clone()
        .unwrap_or_else(|| std::env::vars_os().collect());
    let mut env = match &req.policy {
        Some(p) => sandbox_core::scrub_env(env, p.env_deny_names()),
        None => env,
    };
    for (name, value) in req.env_overrides.iter().cloned() {
        env.retain(|(n, _)| *n != name);
        env.push((name, value));
    }
    env.retain(|(n, _)| {
        n != crate::nest::NEST_FD_ENV && n != SOCKET_ENV && n != LAYER_ENV && n != KEEP_ENV
    });
    env
}

/// The program of `req`, located as [`crate::runner::run`] locates it (by
/// the `PATH` of `env`, relative to `cwd`).
pub fn locate_program(
    req: &RunRequest,
    env: &[(OsString, OsString)],
    cwd: &Path,
) -> Result<PathBuf, RunError> {
    let program = req.argv.first().ok_or(RunError::EmptyArgv)?;
    let search = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_os_str());
    sandbox_launch::locate(program, search, Some(cwd)).map_err(|e| match e {
        sandbox_launch::LocateError::NotExecutable { path, reason } => {
            RunError::NotExecutable { path, reason }
        }
        _ => RunError::NotFound(program.clone()),
    })
}

/// What the zygote needs of `req` besides its argv: its environment, its
/// working directory (the request's, else this process's) and its program,
/// located; `None` when this process's working directory is gone.
#[allow(clippy::type_complexity)]
fn command_parts(
    req: &RunRequest,
) -> Option<Result<(Vec<(OsString, OsString)>, PathBuf, PathBuf), RunError>> {
    let env = command_env(req);
    let cwd = match &req.cwd {
        Some(c) => c.clone(),
        None => std::env::current_dir().ok()?,
    };
    Some(locate_program(req, &env, &cwd).map(|path| (env, cwd, path)))
}

/// `req`'s command for the zygote: its argv and grace, with the parts
/// [`command_parts`] gave (`env` as the egress completed it).
fn zygote_command<'a>(
    req: &'a RunRequest,
    env: &'a [(OsString, OsString)],
    cwd: &'a Path,
    path: &'a Path,
    stdio: [RawFd; 3],
    deadline: Instant,
) -> ZygoteCommand<'a> {
    ZygoteCommand {
        path,
        argv: &req.argv,
        env,
        cwd,
        stdio,
        deadline,
        grace: req.grace,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd<'a>(argv: &'a [OsString], env: &'a [(OsString, OsString)]) -> ZygoteCommand<'a> {
        ZygoteCommand {
            path: Path::new("/bin/echo"),
            argv,
            env,
            cwd: Path::new("/tmp"),
            stdio: [0, 1, 2],
            deadline: Instant::now(),
            grace: Duration::ZERO,
        }
    }

    #[test]
    fn a_request_round_trips_and_a_malformed_one_is_refused() {
        let argv = vec![
            OsString::from("echo"),
            OsString::from("a b"),
            OsString::new(),
        ];
        let env = vec![(OsString::from("A"), OsString::from("x=y"))];
        let msg = encode(&cmd(&argv, &env)).unwrap();
        let got = decode(&msg).unwrap();
        assert_eq!(got.path.to_bytes(), b"/bin/echo");
        assert_eq!(got.argv.len(), 3);
        assert_eq!(got.argv[2].to_bytes(), b"");
        assert_eq!(got.env[0].to_bytes(), b"A=x=y");
        assert_eq!(got.cwd.to_bytes(), b"/tmp");
        // A missing terminator, trailing fields, counts that lie, no argv.
        assert!(decode(&msg[..msg.len() - 1]).is_none());
        let mut more = msg.clone();
        more.extend_from_slice(b"extra\0");
        assert!(decode(&more).is_none());
        assert!(decode(b"/bin/echo\x0099999999999\0").is_none());
        assert!(decode(b"/bin/echo\x000\x000\x00/\0").is_none());
        assert!(decode(b"").is_none());
        // A NUL inside a string, or a request past the bound, is not sent.
        let bad = vec![OsString::from("a\0b")];
        assert!(encode(&cmd(&bad, &[])).is_err());
        let big = vec![OsString::from("x".repeat(MAX_REQUEST))];
        assert!(encode(&cmd(&big, &[])).is_err());
    }
}

/// The environment of a session's commands whose request changes nothing
/// in it (`RunRequest::env` is `None`): [`command_env`]'s, made at the
/// first such command (this process's environment, which a session never
/// changes, scrubbed by the policy's deny names, with the overrides), and
/// used as long as a request has the same deny names and overrides,
/// instead of reading and scrubbing the environment per command.
#[cfg(target_os = "linux")]
#[derive(Debug)]
struct BaseEnv {
    deny: Vec<String>,
    overrides: Vec<(OsString, OsString)>,
    env: Arc<[(OsString, OsString)]>,
}

/// A session's shared launch as an embedder uses it: the zygote, started
/// again when one fails, and each [`RunRequest`] run as its command.
#[cfg(target_os = "linux")]
#[derive(Debug)]
pub struct Shared {
    backend: Arc<dyn Backend>,
    base: RunRequest,
    program: PathBuf,
    zygote: Option<Zygote>,
    /// The environment of the commands that change nothing in it, made
    /// once ([`BaseEnv`]).
    base_env: Option<BaseEnv>,
    /// The taps (broker, egress) of the zygote running the current
    /// command, for [`Shared::live`].
    #[allow(clippy::type_complexity)]
    current: Arc<
        std::sync::Mutex<
            Option<(
                Arc<std::sync::OnceLock<sandbox_core::MediationTap>>,
                Arc<std::sync::OnceLock<sandbox_proxy::EgressTap>>,
            )>,
        >,
    >,
}

#[cfg(target_os = "linux")]
impl Shared {
    /// Starts the zygote for requests like `base` (`program` calls
    /// [`serve`]); `Err` says why the caller must launch per command.
    pub fn start(
        backend: Arc<dyn Backend>,
        base: RunRequest,
        program: PathBuf,
    ) -> Result<Self, ZygoteError> {
        let zygote = Zygote::start(Arc::clone(&backend), &base, &program)?;
        Ok(Shared {
            backend,
            base,
            program,
            zygote: Some(zygote),
            base_env: None,
            current: Arc::default(),
        })
    }

    /// [`command_parts`] for `req`, its environment taken from
    /// [`BaseEnv`] when `req` changes nothing in the session's (no `env`,
    /// the same deny names and overrides), made once for those.
    #[allow(clippy::type_complexity)]
    fn parts(
        &mut self,
        req: &RunRequest,
    ) -> Option<Result<(Arc<[(OsString, OsString)]>, PathBuf, PathBuf), RunError>> {
        let deny = req.policy.as_ref().map(|p| p.env_deny_names());
        let same =
            |b: &BaseEnv| Some(b.deny.as_slice()) == deny && b.overrides == req.env_overrides;
        let env = match (&req.env, &self.base_env) {
            (Some(_), _) => Arc::from(command_env(req)),
            (None, Some(b)) if same(b) => Arc::clone(&b.env),
            (None, _) => {
                let env: Arc<[(OsString, OsString)]> = Arc::from(command_env(req));
                self.base_env = deny.map(|deny| BaseEnv {
                    deny: deny.to_vec(),
                    overrides: req.env_overrides.clone(),
                    env: Arc::clone(&env),
                });
                env
            }
        };
        let cwd = match &req.cwd {
            Some(c) => c.clone(),
            None => std::env::current_dir().ok()?,
        };
        Some(locate_program(req, &env, &cwd).map(|path| (env, cwd, path)))
    }

    /// The refusals of the next command [`Shared::run`] or
    /// [`Shared::run_kept`] runs, as they are answered: what
    /// [`sandbox_core::MediationTap::live`] says for the zygote running it
    /// (`None` while there is none). Call it before that command starts:
    /// until the command's zygote is published it says `None`, never a
    /// previous command's (a kept run's tap goes on counting its
    /// processes' refusals after its exit). Called from any thread; never
    /// waits for the run.
    pub fn live(
        &self,
    ) -> impl Fn() -> Option<(Vec<sandbox_core::MediatedCall>, u64)> + Send + Sync + 'static {
        if let Ok(mut current) = self.current.lock() {
            *current = None;
        }
        // The last command's refusals it did not look at are not this one's.
        if let Some(egress) = self.zygote.as_ref().and_then(|z| z.egress.get()) {
            egress.forget_closed();
        }
        let current = Arc::clone(&self.current);
        move || {
            // The zygote's tap is set once its supervisor is confirmed,
            // which may follow its first answer.
            let (tap, egress) = current.lock().ok()?.clone()?;
            live_of(&tap, &egress)
        }
    }

    /// Runs `req` (a request like the base one, with its own argv, env,
    /// cwd and timeout) with `stdio` as its fds 0-2; `None` when this
    /// request is beyond the shared launch (the caller runs it with
    /// [`crate::runner::run`]). A zygote that fails makes this command a
    /// runner failure ([`RunError::SharedLaunch`]) and is replaced for the
    /// next.
    pub fn run(
        &mut self,
        req: &RunRequest,
        stdio: [RawFd; 3],
    ) -> Option<Result<Outcome, RunError>> {
        let policy = req.policy.as_ref()?;
        let started = Instant::now();
        let (base_env, cwd, path) = match self.parts(req)? {
            Ok(parts) => parts,
            Err(e) => return Some(Err(e)),
        };
        let deadline = started + policy.timeout();
        // A zygote whose own run could end before this command may: a new one.
        let margin = req.grace + Duration::from_secs(15);
        if self
            .zygote
            .as_ref()
            .is_some_and(|z| z.expires() < deadline + margin)
        {
            self.zygote = None;
        }
        if self.zygote.is_none() {
            // None starts: this command gets a launch of its own (which
            // fails as a run would if the cause is the run's).
            self.zygote =
                Some(Zygote::start(Arc::clone(&self.backend), &self.base, &self.program).ok()?);
        }
        let zygote = self.zygote.as_mut()?;
        // The egress's variables, when the run has one, on a copy.
        let egress_env = zygote.egress.get().map(|_| {
            let mut env = base_env.to_vec();
            zygote.set_egress_env(&mut env);
            env
        });
        let env = egress_env.as_deref().unwrap_or(&base_env);
        let cmd = zygote_command(req, env, &cwd, &path, stdio, deadline);
        if let Ok(mut current) = self.current.lock() {
            *current = Some((Arc::clone(&zygote.tap), Arc::clone(&zygote.egress)));
        }
        let failed = |e: ZygoteError| Some(Err(RunError::SharedLaunch(e.to_string())));
        match zygote.run(&cmd) {
            Ok(exit) => {
                let mut outcome = outcome(&req.argv, Some(policy), &exit, started);
                // Its nested runs, ended with it.
                if let Some(nested) = zygote.nested.get() {
                    nested.take().into_outcome(&mut outcome);
                }
                // What the broker refused for this command, taken (and its
                // per-command state reset) now that all of it is gone.
                match zygote.take_mediation() {
                    // It never ran: a runner failure, as a launch of its
                    // own reports it.
                    Some(_) if exit.pre_exec.is_some() => {
                        Some(Err(pre_exec_error(req, &cwd, exit.pre_exec)))
                    }
                    Some(m) => {
                        outcome.classification = outcome.classification.with_refusals(&m);
                        outcome.mediation = Some(m);
                        Some(Ok(outcome))
                    }
                    None => {
                        self.zygote = None;
                        failed(ZygoteError::Failed(
                            "the broker did not close the command".into(),
                        ))
                    }
                }
            }
            // This request is beyond the zygote (too large): on its own.
            Err(ZygoteError::Unavailable(_)) => None,
            Err(e) => {
                self.zygote = None;
                failed(e)
            }
        }
    }

    /// Runs `req` as [`Shared::run`] does, but as a kept command: on a
    /// zygote run of its own (started as the shared one is: the same
    /// request, policy, library call, its own Landlock domain, filter,
    /// broker, containment and limits), never on the shared zygote. Its
    /// zygote waits for the command's main process only and ends nothing
    /// when it exits: the outcome is the main process's (status,
    /// classification, duration; no `mediation`, the refusals so far being
    /// what [`Shared::live`] handed out), with the [`Kept`] run whose
    /// background processes live until [`Kept::end`]. `None` beside the
    /// outcome: nothing of it is alive (it left nothing, could not be
    /// executed, or its timeout or a stop signal ended all of it), and the
    /// outcome is final (its run's `mediation` and nested runs included).
    /// `None` instead of a result: the request is beyond the shared launch
    /// (too large), and nothing was run.
    #[allow(clippy::type_complexity)]
    pub fn run_kept(
        &mut self,
        req: &RunRequest,
        stdio: [RawFd; 3],
    ) -> Option<Result<(Outcome, Option<Kept>), RunError>> {
        let policy = req.policy.as_ref()?;
        let started = Instant::now();
        let (mut env, cwd, path) = match command_parts(req)? {
            Ok(parts) => parts,
            Err(e) => return Some(Err(e)),
        };
        let fits = encode(&zygote_command(req, &env, &cwd, &path, stdio, started));
        if fits.is_err() {
            return None;
        }
        let failed = |e: ZygoteError| Some(Err(RunError::SharedLaunch(e.to_string())));
        // Its run's egress asks the request's decider (a session's, bound
        // to this command, whose processes alone use this egress).
        let mut base = self.base.clone();
        if base.egress.decider.is_some() && req.egress.decider.is_some() {
            base.egress.decider.clone_from(&req.egress.decider);
        }
        let mut zygote =
            match Zygote::start_for(Arc::clone(&self.backend), &base, &self.program, true) {
                Ok(z) => z,
                Err(e) => return failed(e),
            };
        // Its own run's egress (a request within the bound stays within it:
        // the egress adds a few short variables).
        zygote.set_egress_env(&mut env);
        let deadline = started + policy.timeout();
        let cmd = zygote_command(req, &env, &cwd, &path, stdio, deadline);
        if let Ok(mut current) = self.current.lock() {
            *current = Some((Arc::clone(&zygote.tap), Arc::clone(&zygote.egress)));
        }
        let exit = match zygote.run_command(&cmd) {
            Ok(exit) => exit,
            Err(e) => return failed(e),
        };
        let mut outcome = outcome(&req.argv, Some(policy), &exit, started);
        let ended_all = exit.timed_out || sandbox_launch::stop_requested().is_some();
        if !ended_all && exit.others > 0 {
            outcome.leftover_processes_ended = 0;
            let kept = Kept {
                zygote,
                grace: req.grace,
                alive: exit.others,
                ending: false,
            };
            return Some(Ok((outcome, Some(kept))));
        }
        // Nothing of it is alive: its run ends now, and its record is final.
        if let Some(nested) = zygote.nested.get() {
            nested.end_all();
            nested.take().into_outcome(&mut outcome);
        }
        match zygote.end() {
            Some(Ok(_)) if exit.pre_exec.is_some() => {
                Some(Err(pre_exec_error(req, &cwd, exit.pre_exec)))
            }
            Some(Ok(run)) => {
                if let Some(m) = run.mediation {
                    outcome.classification = outcome.classification.with_refusals(&m);
                    outcome.mediation = Some(m);
                }
                Some(Ok((outcome, None)))
            }
            Some(Err(e)) => failed(ZygoteError::Failed(format!("its run: {e}"))),
            None => failed(ZygoteError::Failed("its run's thread failed".into())),
        }
    }
}

/// A command run with [`Shared::run_kept`] whose background processes
/// outlived its main process: its zygote run, kept until [`Kept::end`]
/// (or dropped, which ends it too). The run is a Landlock domain of its
/// own, beside the shared zygote's and not beneath it: the shared
/// zygote's `kill(-1)` after later commands does not reach these
/// processes, and they cannot signal later commands. It still ends at its
/// own deadline, the policy's ceiling (`max_timeout_seconds`) after it
/// started.
#[cfg(target_os = "linux")]
#[derive(Debug)]
pub struct Kept {
    zygote: Zygote,
    grace: Duration,
    alive: usize,
    ending: bool,
}

/// How a kept command's run ended ([`Kept::end`]).
#[cfg(target_os = "linux")]
#[derive(Debug)]
#[non_exhaustive]
pub struct KeptEnd {
    /// Processes of the command still alive at the end, which its zygote
    /// ended (SIGTERM, the grace period, SIGKILL); `None` when the zygote
    /// did not answer (gone at its run's deadline, or taken over): its
    /// run's end ended what was left.
    pub ended: Option<usize>,
    /// The kept run's own record: its `mediation` lists every refusal of
    /// the command and of its processes, from its start to its end;
    /// `leftover_processes_ended` what the run's containment ended beyond
    /// its zygote; `timed_out` when its deadline came first.
    pub run: Option<Result<Outcome, RunError>>,
    /// The records of the nested runs its processes started (`sandbox
    /// run` inside it), from its start to its end, their refusals
    /// included (at most 256, as for any run's tree, and
    /// [`crate::nest::MAX_KEPT`] bytes, each bounded as
    /// [`crate::nest::MAX_RECORD`] says).
    pub nested: Vec<Outcome>,
    /// How many nested runs' records were left out of `nested`.
    pub nested_omitted: usize,
}

#[cfg(target_os = "linux")]
impl Kept {
    /// How many processes of the command were alive when its main process
    /// exited, as its zygote counted them (from `/proc`; at least 1).
    pub fn alive_at_exit(&self) -> usize {
        self.alive
    }

    /// Whether its run still lives (it ends at its deadline on its own,
    /// and once none of its processes is left: its zygote then answers
    /// and exits).
    pub fn running(&self) -> bool {
        !self.zygote.run_finished()
    }

    /// The refusals of its processes since the last call (and since the
    /// command's main process exited, those [`Shared::live`] did not
    /// hand out), as [`Shared::live`] says them.
    pub fn live(&self) -> Option<(Vec<sandbox_core::MediatedCall>, u64)> {
        self.zygote.live()
    }

    /// The git directories its processes made so far, where they are now
    /// (what [`sandbox_core::MediationTap::git_dirs_made`] says for its
    /// run), without closing anything: its [`KeptEnd`]'s record names
    /// them again, with those made later. `None` while its supervisor
    /// cannot tell.
    pub fn git_dirs_made(&self) -> Option<Vec<std::path::PathBuf>> {
        self.zygote.tap.get()?.git_dirs_made()
    }

    /// Asks its zygote to end what is left, without waiting: a caller
    /// ending many calls this on each, then [`Kept::end`] on each, so
    /// their grace periods run at once.
    pub fn begin_end(&mut self) {
        if !self.ending {
            self.ending = true;
            // SAFETY: sends one byte from a static.
            unsafe {
                libc::send(
                    self.zygote.sock.as_raw_fd(),
                    b"e".as_ptr().cast(),
                    1,
                    libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
                )
            };
        }
    }

    /// Ends every process of it (its zygote: SIGTERM, grace, SIGKILL,
    /// within its domain; then its run's end, as any run's) and waits for
    /// its run; its nested runs are ended too.
    pub fn end(mut self) -> KeptEnd {
        self.begin_end();
        let ended = match self
            .zygote
            .answer(Instant::now() + self.grace + ANSWER_WAIT, 9)
        {
            Ok(a) if a[0] == b's' => Some(u32::from_ne_bytes([a[5], a[6], a[7], a[8]]) as usize),
            _ => None,
        };
        let mut records = crate::nest::Kept::default();
        if let Some(nested) = self.zygote.nested.get() {
            nested.end_all();
            records = nested.take();
        }
        let run = self.zygote.end();
        if let Some(nested) = self.zygote.nested.get() {
            let more = nested.take();
            records.records.extend(more.records);
            records.omitted += more.omitted;
        }
        KeptEnd {
            ended,
            run,
            nested: records.records,
            nested_omitted: records.omitted,
        }
    }
}
