//! One bounded launch of a command through a backend's own wrap.
//!
//! The command goes through [`sandbox_launch::launch`], the one launch
//! `sandbox run` and the library runner take: prepared by the backend for
//! the same containment (a cgroup of its own where the runner may create
//! one, else its process group), the same hooks, the backend's supervisor
//! serving it. It runs with a minimal environment,
//! stdin from `/dev/null`; when it overruns its deadline every process of
//! it is ended and the launch reports that it timed out.

use std::ffi::OsString;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use sandbox_core::{Backend, ResolvedPolicy};
use sandbox_launch::LaunchError;

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

/// Where one output stream of a launch goes.
#[derive(Clone, Copy)]
#[allow(dead_code)] // `Discard` and `File`: the launch tests and the conformance arms
pub(crate) enum Sink<'a> {
    /// Discarded (`/dev/null`).
    Discard,
    /// A file created (or truncated) at this path.
    File(&'a Path),
    /// A [`Capture`] only the launcher and the command hold.
    Capture(&'a Capture),
}

/// What to launch and where its output goes.
pub(crate) struct Launch<'a> {
    /// The command, unwrapped.
    pub argv: &'a [OsString],
    /// The complete environment of the command.
    pub env: &'a [(OsString, OsString)],
    /// Where stdout goes.
    pub stdout: Sink<'a>,
    /// Where stderr goes.
    pub stderr: Sink<'a>,
    /// Wall-clock bound.
    pub deadline: Duration,
}

/// An output stream no other process can reach: a file with no name on
/// any file system (`memfd_create(2)` on Linux; elsewhere a temporary
/// file unlinked at once), held by the launcher and given to the command
/// as its stdout or stderr. What the probe's command reports there is its
/// own word: no process outside the launch can write, replace or remove it.
pub(crate) struct Capture(File);

impl Capture {
    pub(crate) fn new() -> Result<Capture, String> {
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::FromRawFd;
            // SAFETY: a NUL-terminated name and a flag; returns a new fd or -1.
            let fd = unsafe { libc::memfd_create(c"sandbox-probe".as_ptr(), libc::MFD_CLOEXEC) };
            if fd < 0 {
                return Err(format!(
                    "cannot create the probe's output file: {}",
                    std::io::Error::last_os_error()
                ));
            }
            // SAFETY: a fresh fd owned here alone.
            Ok(Capture(unsafe { File::from_raw_fd(fd) }))
        }
        #[cfg(not(target_os = "linux"))]
        {
            tempfile::tempfile()
                .map(Capture)
                .map_err(|e| format!("cannot create the probe's output file: {e}"))
        }
    }

    /// What was written, from the start (at most 64 KiB), as text.
    pub(crate) fn text(&self) -> String {
        use std::os::unix::fs::FileExt;
        let mut buf = vec![0u8; 64 * 1024];
        let mut len = 0;
        while len < buf.len() {
            match self.0.read_at(&mut buf[len..], len as u64) {
                Ok(0) | Err(_) => break,
                Ok(n) => len += n,
            }
        }
        buf.truncate(len);
        String::from_utf8_lossy(&buf).into_owned()
    }
}

/// The environment probes run with: enough for `/bin/sh` and `python3`.
pub(crate) fn minimal_env() -> Vec<(OsString, OsString)> {
    vec![
        ("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()),
        ("LC_ALL".into(), "C".into()),
    ]
}

/// What a probe launch was: the containment that held it and the
/// backend's account of its seccomp program, to compare with a run's.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LaunchFacts {
    /// How the launch's processes were held.
    pub containment: sandbox_launch::ContainmentKind,
    /// The backend's report line naming its seccomp program, if it has one.
    pub seccomp: Option<String>,
}

/// Launches `launch.argv` under `policy` with `backend` through the run's
/// own launch ([`sandbox_launch::launch`]: prepared for the containment a
/// run of this process gets, and started, waited for and ended as a run
/// is), bounded by `launch.deadline`.
#[cfg_attr(not(any(test, feature = "conformance")), allow(dead_code))]
pub(crate) fn launch(backend: &dyn Backend, policy: &ResolvedPolicy, launch: &Launch<'_>) -> Ended {
    launch_with_facts(backend, policy, launch).0
}

/// [`launch`], and what the launch was (`None` when it did not run).
pub(crate) fn launch_with_facts(
    backend: &dyn Backend,
    policy: &ResolvedPolicy,
    launch: &Launch<'_>,
) -> (Ended, Option<LaunchFacts>) {
    let null = |write: bool| {
        std::fs::OpenOptions::new()
            .read(!write)
            .write(write)
            .open("/dev/null")
            .map_err(|e| format!("cannot open /dev/null: {e}"))
    };
    let sink = |sink: Sink<'_>| -> Result<File, String> {
        match sink {
            Sink::Discard => null(true),
            Sink::File(p) => File::create(p)
                .map_err(|e| format!("cannot create output file {}: {e}", p.display())),
            Sink::Capture(c) => {
                c.0.try_clone()
                    .map_err(|e| format!("cannot share the probe's output file: {e}"))
            }
        }
    };
    let (stdin, stdout, stderr) = match (null(false), sink(launch.stdout), sink(launch.stderr)) {
        (Ok(i), Ok(o), Ok(e)) => (i, o, e),
        (Err(why), _, _) | (_, Err(why), _) | (_, _, Err(why)) => {
            return (Ended::NotStarted { why }, None)
        }
    };
    let mut one = sandbox_launch::Launch::new(launch.argv, launch.env);
    one.search_path = launch
        .env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_os_str());
    one.stdin = Some(stdin.as_raw_fd());
    one.stdout = Some(stdout.as_raw_fd());
    one.stderr = Some(stderr.as_raw_fd());
    one.deadline = Some(Instant::now() + launch.deadline);
    let launched = match sandbox_launch::launch(backend, Some(policy), &one) {
        Ok(launched) => launched,
        Err(e) => {
            let why = match e {
                LaunchError::Unavailable(e) => {
                    format!("the backend refused to prepare the command: {e}")
                }
                LaunchError::Apply(e) => format!("the backend's pre-exec hook failed: {e}"),
                LaunchError::Spawn(e) => format!("spawning {:?} failed: {e}", launch.argv[0]),
                // The runner was told to stop: the probe says nothing of the host.
                LaunchError::Stopped(signal) => {
                    format!("the runner got signal {signal} and stopped the probe")
                }
                other => other.to_string(),
            };
            return (Ended::NotStarted { why }, None);
        }
    };
    let facts = LaunchFacts {
        containment: launched.containment,
        seccomp: launched.report.and_then(|report| {
            report
                .details
                .into_iter()
                .find(|d| d.starts_with("seccomp filter of"))
        }),
    };
    let ended = match launched.stopped_by {
        // The runner was told to stop: the probe says nothing of the host.
        Some(signal) => Ended::NotStarted {
            why: format!("the runner got signal {signal} and stopped the probe"),
        },
        None if launched.timed_out => Ended::TimedOut {
            after: launch.deadline,
        },
        None => Ended::Exited {
            status: launched.status,
        },
    };
    (ended, Some(facts))
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
                stdout: Sink::Discard,
                stderr: Sink::Discard,
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
                stdout: Sink::Discard,
                stderr: Sink::Discard,
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
                    stdout: Sink::File(&out),
                    stderr: Sink::Discard,
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
            Ended::NotStarted { why } => {
                assert_eq!(why, "sandbox-probe-no-such-program: command not found")
            }
            other => panic!("{other:?}"),
        }
    }

    const LAUNCH_DEADLINE_FOR_TESTS: Duration = Duration::from_secs(5);
}
