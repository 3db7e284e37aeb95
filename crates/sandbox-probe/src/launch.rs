//! One bounded launch of a command through a backend's own wrap.
//!
//! The command is prepared with [`Backend::prepare`] and started by
//! [`crate::spawn`], the launch path `sandbox run` and the library runner
//! take, with the backend's pre-exec hook; the backend's supervisor (the
//! broker) serves it while it runs. It runs in its own process group with a
//! minimal environment, stdin from `/dev/null`; when it overruns its deadline
//! the whole group is killed and the launch reports that it timed out. It is
//! waited for and reaped by pid, as the runner does.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use sandbox_core::{
    decode_pre_exec_error, Backend, LaunchDomain, PreExecHook, ResolvedPolicy, RunningSupervisor,
};

use crate::spawn::{self, SpawnPlan};

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
    let Some(program) = confinement.argv.first() else {
        return Ended::NotStarted {
            why: "the backend's wrap produced an empty argv".into(),
        };
    };
    let null = |write: bool| {
        std::fs::OpenOptions::new()
            .read(!write)
            .write(write)
            .open("/dev/null")
            .map_err(|e| format!("cannot open /dev/null: {e}"))
    };
    let sink = |path: Option<&Path>| -> Result<File, String> {
        match path {
            None => null(true),
            Some(p) => File::create(p)
                .map_err(|e| format!("cannot create output file {}: {e}", p.display())),
        }
    };
    let (stdin, stdout, stderr) = match (null(false), sink(launch.stdout), sink(launch.stderr)) {
        (Ok(i), Ok(o), Ok(e)) => (i, o, e),
        (Err(why), _, _) | (_, Err(why), _) | (_, _, Err(why)) => return Ended::NotStarted { why },
    };
    let pre_exec = confinement.pre_exec.take();
    let domain = confinement.domain.take();
    let argv = &confinement.argv;
    // Spawned, and the supervisor started, from inside the backend's domain
    // (the broker's threads then share it), as `sandbox run` does.
    let start = || {
        let spawned = locate(program, launch.env).and_then(|path| {
            let plan = SpawnPlan {
                path: &path,
                argv,
                env: launch.env,
                cwd: None,
                stdin: Some(stdin.as_raw_fd()),
                stdout: Some(stdout.as_raw_fd()),
                stderr: Some(stderr.as_raw_fd()),
                process_group: false,
                cgroup: None,
            };
            // The runner's own setup first (its session is the probe's process
            // group), then the backend's confinement: as `sandbox run` does.
            let hooks: Vec<PreExecHook> = std::iter::once(spawn::session_hook(true))
                .chain(pre_exec)
                .collect();
            // The hooks (and the child's end of the broker's channel) are gone
            // once `spawn` returns, so the supervisor sees only the child's end.
            spawn::spawn(&plan, hooks)
        });
        let pid = match spawned {
            Ok(child) => child.pid,
            Err(e) => {
                let why = match decode_pre_exec_error(&e) {
                    Some(errno) => format!(
                        "the backend's pre-exec hook failed: {}",
                        std::io::Error::from_raw_os_error(errno)
                    ),
                    None => format!("spawning {program:?} failed: {e}"),
                };
                return Err(Ended::NotStarted { why });
            }
        };
        match supervisor.map(|s| s.start()).transpose() {
            Ok(running) => Ok((pid, running)),
            Err(e) => {
                kill_group(pid);
                spawn::kill_and_reap(pid);
                Err(Ended::NotStarted {
                    why: format!("the backend's supervisor did not start: {e}"),
                })
            }
        }
    };
    let run = |started: Result<(libc::pid_t, Option<Box<dyn RunningSupervisor>>), Ended>| {
        let (pid, running) = started?;
        let ended = wait_bounded(pid, launch.deadline);
        if let Some(r) = running {
            r.finish();
        }
        Ok(ended)
    };
    let ended = LaunchDomain::launch(domain.as_ref(), start, run);
    drop((stdin, stdout, stderr));
    match ended {
        Ok(Ok(ended) | Err(ended)) => ended,
        Err(e) => Ended::NotStarted {
            why: format!("entering the backend's launch domain failed: {e}"),
        },
    }
}

/// Finds `program` as `execvp` would, in the launch's own `PATH`: a name
/// with a slash as it is, otherwise the first executable file of that name.
fn locate(program: &OsStr, env: &[(OsString, OsString)]) -> std::io::Result<PathBuf> {
    if program.as_bytes().contains(&b'/') {
        return Ok(PathBuf::from(program));
    }
    let not_found = || std::io::Error::from_raw_os_error(libc::ENOENT);
    if program.is_empty() {
        return Err(not_found());
    }
    let search = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map_or(OsStr::new("/usr/local/bin:/usr/bin:/bin"), |(_, v)| v);
    std::env::split_paths(search)
        .map(|dir| dir.join(program))
        .find(|candidate| {
            candidate.is_file()
                && std::ffi::CString::new(candidate.as_os_str().as_bytes()).is_ok_and(|c| {
                    // SAFETY: c is a valid NUL-terminated path.
                    unsafe { libc::access(c.as_ptr(), libc::X_OK) == 0 }
                })
        })
        .ok_or_else(not_found)
}

/// Waits for `pid` at most `deadline`; kills its process group on overrun,
/// then reaps it.
///
/// std has no bounded wait; a pidfd gives one without a polling loop or a
/// SIGCHLD handler (which would be process-global state a library must not own).
fn wait_bounded(pid: libc::pid_t, deadline: Duration) -> Ended {
    let exited = wait_pidfd(pid, deadline).unwrap_or_else(|| wait_polling(pid, deadline));
    // The child is a zombie or still running: its pid (= its group id) cannot
    // have been reused, so killing the group reaches only its own descendants.
    kill_group(pid);
    if !exited {
        // SAFETY: signalling our unreaped child; failure (ESRCH) is fine.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
    }
    match spawn::wait(pid) {
        Ok(status) if exited => Ended::Exited { status },
        Ok(_) => Ended::TimedOut { after: deadline },
        Err(e) => Ended::NotStarted {
            why: format!("waiting for the command failed: {e}"),
        },
    }
}

/// `Some(exited)` when a pidfd could be used, `None` when it is unavailable.
#[cfg(not(target_os = "linux"))]
fn wait_pidfd(_: libc::pid_t, _: Duration) -> Option<bool> {
    None
}

/// `Some(exited)` when a pidfd could be used, `None` when it is unavailable.
#[cfg(target_os = "linux")]
fn wait_pidfd(pid: libc::pid_t, deadline: Duration) -> Option<bool> {
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
            fd: fd.as_raw_fd(),
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

/// Checks with `waitid(WNOWAIT)` on a short tick, leaving the child unreaped
/// (its pid, its group id, stays ours until [`spawn::wait`]).
fn wait_polling(pid: libc::pid_t, deadline: Duration) -> bool {
    let start = Instant::now();
    loop {
        // SAFETY: info is a valid out-pointer; WNOWAIT leaves the child unreaped.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let rc = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            )
        };
        // SAFETY: si_pid is valid to read for waitid results.
        if rc == 0 && unsafe { info.si_pid() } != 0 {
            return true;
        }
        if rc != 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return false;
        }
        if start.elapsed() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn kill_group(pid: libc::pid_t) {
    // SAFETY: signalling a process group we created; failure (ESRCH) is fine.
    unsafe {
        libc::kill(-pid, libc::SIGKILL);
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

    #[test]
    fn the_program_is_found_in_the_launch_path_and_a_missing_one_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let policy = SandboxPolicy::default()
            .resolve(&ExpandContext::default())
            .unwrap();
        let run = |argv: &[&str]| {
            let argv: Vec<OsString> = argv.iter().map(OsString::from).collect();
            launch(
                &NoopBackend,
                &policy,
                &Launch {
                    argv: &argv,
                    env: &minimal_env(),
                    stdout: Some(&out),
                    stderr: None,
                    deadline: LAUNCH_DEADLINE_FOR_TESTS,
                },
            )
        };
        // stdin is /dev/null: `read` meets end of file at once.
        let ended = run(&["sh", "-c", "read x || echo eof; echo \"$PATH\""]);
        assert!(
            matches!(ended, Ended::Exited { status } if status.success()),
            "{ended:?}"
        );
        assert_eq!(
            std::fs::read_to_string(&out).unwrap(),
            "eof\n/usr/local/bin:/usr/bin:/bin\n"
        );
        match run(&["sandbox-probe-no-such-program"]) {
            Ended::NotStarted { why } => assert_eq!(
                why,
                "spawning \"sandbox-probe-no-such-program\" failed: \
                 No such file or directory (os error 2)"
            ),
            other => panic!("{other:?}"),
        }
    }

    const LAUNCH_DEADLINE_FOR_TESTS: Duration = Duration::from_secs(5);
}
