//! One bounded launch of a command through a backend's own wrap.
//!
//! The command is prepared with [`Backend::prepare`] and turned into a plain
//! `Command` with [`Confinement::into_command`](sandbox_core::Confinement::into_command),
//! the same wrap `sandbox run` uses, and the backend's supervisor (the
//! broker) serves it while it runs. It runs in its own process group with a
//! minimal environment; when it overruns its deadline the whole group is
//! killed and the launch reports that it timed out.

use std::ffi::OsString;
use std::fs::File;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use sandbox_core::{decode_pre_exec_error, Backend, ResolvedPolicy};

/// How a launch ended.
#[derive(Debug)]
pub(crate) enum Ended {
    /// The command ran and exited (or was killed by a signal).
    Exited {
        /// Its status.
        status: ExitStatus,
    },
    /// The command overran its deadline and was killed with its group.
    TimedOut {
        /// The deadline it overran.
        after: Duration,
    },
    /// Nothing ran.
    NotStarted {
        /// What was attempted and what went wrong.
        why: String,
    },
}

impl Ended {
    /// One line for evidence text.
    pub(crate) fn describe(&self) -> String {
        match self {
            Ended::Exited { status } => describe_status(*status),
            Ended::TimedOut { after } => format!(
                "overran its {} ms deadline and was killed",
                after.as_millis()
            ),
            Ended::NotStarted { why } => format!("did not start: {why}"),
        }
    }
}

fn describe_status(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(sig)) => format!("was killed by signal {sig}"),
        (None, None) => format!("ended with {status}"),
    }
}

/// What to launch and where its output goes.
pub(crate) struct Launch<'a> {
    /// The command, unwrapped.
    pub argv: &'a [OsString],
    /// The complete environment of the command.
    pub env: &'a [(OsString, OsString)],
    /// File that receives stdout (discarded when `None`).
    pub stdout: Option<&'a Path>,
    /// File that receives stderr (discarded when `None`).
    pub stderr: Option<&'a Path>,
    /// Wall-clock bound.
    pub deadline: Duration,
}

/// The environment probes run with: enough for `/bin/sh` and `python3`.
pub(crate) fn minimal_env() -> Vec<(OsString, OsString)> {
    vec![
        ("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()),
        ("LC_ALL".into(), "C".into()),
    ]
}

/// Prepares `launch.argv` under `policy` with `backend` and runs it, bounded.
pub(crate) fn launch(backend: &dyn Backend, policy: &ResolvedPolicy, launch: &Launch<'_>) -> Ended {
    let mut confinement = match backend.prepare(policy, launch.argv) {
        Ok(c) => c,
        Err(e) => {
            return Ended::NotStarted {
                why: format!("the backend refused to prepare the command: {e}"),
            }
        }
    };
    // The backend's supervisor (the Landlock backend's broker) runs for the
    // launch as it does under `sandbox run`: without it, brokered calls fail.
    let supervisor = confinement.supervisor.take();
    let Some((mut cmd, _report)) = confinement.into_command() else {
        return Ended::NotStarted {
            why: "the backend's wrap produced an empty argv".into(),
        };
    };
    let sink = |path: Option<&Path>| -> Result<Stdio, String> {
        match path {
            None => Ok(Stdio::null()),
            Some(p) => File::create(p)
                .map(Stdio::from)
                .map_err(|e| format!("cannot create output file {}: {e}", p.display())),
        }
    };
    let (stdout, stderr) = match (sink(launch.stdout), sink(launch.stderr)) {
        (Ok(o), Ok(e)) => (o, e),
        (Err(why), _) | (_, Err(why)) => return Ended::NotStarted { why },
    };
    cmd.env_clear()
        .envs(launch.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .process_group(0);
    let child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => {
            let why = match decode_pre_exec_error(&e) {
                Some(errno) => format!(
                    "the backend's pre-exec hook failed: {}",
                    std::io::Error::from_raw_os_error(errno)
                ),
                None => format!("spawning {:?} failed: {e}", cmd.get_program()),
            };
            return Ended::NotStarted { why };
        }
    };
    // The hooks (and the child's end of the broker's channel) go with `cmd`.
    drop(cmd);
    let running = match supervisor.map(|s| s.start()).transpose() {
        Ok(running) => running,
        Err(e) => {
            let mut child = child;
            let _ = child.kill();
            let _ = child.wait();
            return Ended::NotStarted {
                why: format!("the backend's supervisor did not start: {e}"),
            };
        }
    };
    let ended = wait_bounded(child, launch.deadline);
    if let Some(r) = running {
        r.finish();
    }
    ended
}

/// Waits for `child` at most `deadline`; kills its process group on overrun.
///
/// std has no bounded wait; a pidfd gives one without a polling loop or a
/// SIGCHLD handler (which would be process-global state a library must not own).
fn wait_bounded(mut child: Child, deadline: Duration) -> Ended {
    let exited = wait_pidfd(&child, deadline).unwrap_or_else(|| wait_polling(&mut child, deadline));
    // The child is a zombie or still running: its pid (= its group id) cannot
    // have been reused, so killing the group reaches only its own descendants.
    kill_group(&child);
    if !exited {
        let _ = child.kill();
    }
    match child.wait() {
        Ok(status) if exited => Ended::Exited { status },
        Ok(_) => Ended::TimedOut { after: deadline },
        Err(e) => Ended::NotStarted {
            why: format!("waiting for the command failed: {e}"),
        },
    }
}

/// `Some(exited)` when a pidfd could be used, `None` when it is unavailable.
#[cfg(not(target_os = "linux"))]
fn wait_pidfd(_: &Child, _: Duration) -> Option<bool> {
    None
}

/// `Some(exited)` when a pidfd could be used, `None` when it is unavailable.
#[cfg(target_os = "linux")]
fn wait_pidfd(child: &Child, deadline: Duration) -> Option<bool> {
    let pid = libc::pid_t::try_from(child.id()).ok()?;
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    let fd = libc::c_int::try_from(fd).ok().filter(|fd| *fd >= 0)?;
    // SAFETY: `fd` was just returned by pidfd_open and is owned here alone.
    let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    let start = Instant::now();
    loop {
        let left = deadline.saturating_sub(start.elapsed());
        let ms = libc::c_int::try_from(left.as_millis()).unwrap_or(libc::c_int::MAX);
        let mut pfd = libc::pollfd {
            fd: std::os::fd::AsRawFd::as_raw_fd(&fd),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n > 0 {
            return Some(true);
        }
        if n == 0 {
            return Some(false);
        }
        if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return None;
        }
    }
}

fn wait_polling(child: &mut Child, deadline: Duration) -> bool {
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => return true,
            Ok(None) if start.elapsed() < deadline => std::thread::sleep(Duration::from_millis(1)),
            _ => return false,
        }
    }
}

fn kill_group(child: &Child) {
    if let Ok(pid) = libc::pid_t::try_from(child.id()) {
        // SAFETY: signalling a process group we created; failure (ESRCH) is fine.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandbox_core::{ExpandContext, NoopBackend, SandboxPolicy};

    #[test]
    fn an_overrunning_launch_is_killed_with_its_descendants() {
        let dir = tempfile::tempdir().unwrap();
        let beat = dir.path().join("beat");
        let argv: Vec<OsString> = vec![
            "/bin/sh".into(),
            "-c".into(),
            r#"(while :; do echo b >> "$1"; sleep 0.02; done) & sleep 60"#.into(),
            "sh".into(),
            beat.clone().into(),
        ];
        let policy = SandboxPolicy::default()
            .resolve(&ExpandContext::default())
            .unwrap();
        let ended = launch(
            &NoopBackend,
            &policy,
            &Launch {
                argv: &argv,
                env: &minimal_env(),
                stdout: None,
                stderr: None,
                deadline: Duration::from_millis(300),
            },
        );
        assert!(matches!(ended, Ended::TimedOut { .. }), "{ended:?}");
        assert!(
            ended.describe().contains("deadline"),
            "{}",
            ended.describe()
        );
        // The background loop belonged to the killed group: it beats no more.
        let size = || std::fs::metadata(&beat).map(|m| m.len()).unwrap_or(0);
        let before = size();
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(size(), before);
    }

    #[test]
    fn a_failing_pre_exec_hook_is_reported_as_not_started() {
        #[derive(Debug)]
        struct Failing;
        impl Backend for Failing {
            fn name(&self) -> &'static str {
                "failing"
            }
            fn axes(&self) -> &'static [sandbox_core::Axis] {
                &[]
            }
            fn prepare(
                &self,
                _: &ResolvedPolicy,
                argv: &[OsString],
            ) -> Result<sandbox_core::Confinement, sandbox_core::SandboxUnavailable> {
                // SAFETY: returns an error value only; no allocation happens in the child
                // (the io::Error is built from a raw os error code).
                let hook = unsafe {
                    sandbox_core::PreExecHook::new(|| {
                        Err(sandbox_core::encode_pre_exec_error(libc::EPERM))
                    })
                };
                Ok(sandbox_core::Confinement::new(
                    argv.to_vec(),
                    Some(hook),
                    sandbox_core::EnforcementReport {
                        backend: "failing".into(),
                        details: Vec::new(),
                        axes: Vec::new(),
                    },
                ))
            }
            fn wrap_argv(
                &self,
                _: &ResolvedPolicy,
                _: &[OsString],
            ) -> Result<sandbox_core::WrappedArgv, sandbox_core::SandboxUnavailable> {
                Err(sandbox_core::SandboxUnavailable::new("failing", "none"))
            }
        }
        let policy = SandboxPolicy::default()
            .resolve(&ExpandContext::default())
            .unwrap();
        let argv: Vec<OsString> = vec!["/bin/true".into()];
        let ended = launch(
            &Failing,
            &policy,
            &Launch {
                argv: &argv,
                env: &minimal_env(),
                stdout: None,
                stderr: None,
                deadline: LAUNCH_DEADLINE_FOR_TESTS,
            },
        );
        match ended {
            Ended::NotStarted { why } => assert!(why.contains("pre-exec hook failed"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    const LAUNCH_DEADLINE_FOR_TESTS: Duration = Duration::from_secs(5);
}
