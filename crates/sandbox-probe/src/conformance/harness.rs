//! What every arm needs: a scratch tree, a policy, a bounded launch whose
//! output is captured, and the `name=value` lines the child programs print.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sandbox_core::{Backend, ExpandContext, ResolvedPolicy, SandboxPolicy};

use super::LegResult;
use crate::launch::{launch, minimal_env, Ended, Launch};
use crate::probe::{clip, read};

/// Wall-clock bound of one conformance launch (python3 start-up included).
const DEADLINE: Duration = Duration::from_secs(30);

/// A leg's result and the evidence for it.
pub(crate) type Outcome = (LegResult, String);

/// Shorthand for an unwitnessed outcome.
pub(crate) fn unwitnessed(why: impl Into<String>) -> Outcome {
    let why = why.into();
    (LegResult::Unwitnessed { why: why.clone() }, why)
}

/// The backend under test and the tools the arms use.
pub(crate) struct Ctx<'a> {
    pub backend: &'a dyn Backend,
    pub python: Option<PathBuf>,
    /// No sandbox at all (the proof's mutation check): the runner's parts
    /// (the env scrub) are left out too.
    pub unconfined: bool,
}

impl<'a> Ctx<'a> {
    pub(crate) fn new(backend: &'a dyn Backend) -> Self {
        let python = ["/usr/bin/python3", "/usr/local/bin/python3", "/bin/python3"]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| p.is_file());
        Self {
            backend,
            python,
            unconfined: false,
        }
    }

    /// No sandbox at all: the noop backend and none of the runner's parts.
    pub(crate) fn unconfined(backend: &'a dyn Backend) -> Self {
        Self {
            unconfined: true,
            ..Self::new(backend)
        }
    }

    /// Runs `python3 -c script args...` under `policy`.
    pub(crate) fn python(
        &self,
        policy: &ResolvedPolicy,
        script: &str,
        args: &[&Path],
    ) -> Result<Run, Outcome> {
        let Some(python) = &self.python else {
            return Err((
                LegResult::Skipped {
                    why: "python3 not found in /usr/bin, /usr/local/bin or /bin".into(),
                },
                String::new(),
            ));
        };
        let mut argv: Vec<OsString> = vec![python.into(), "-I".into(), "-c".into(), script.into()];
        argv.extend(args.iter().map(|a| OsString::from(a.as_os_str())));
        let mut env = minimal_env();
        env.push(("PYTHONDONTWRITEBYTECODE".into(), "1".into()));
        self.run(policy, &argv, &env)
    }

    /// Runs `/bin/sh -c script sh args...` under `policy`.
    pub(crate) fn sh(
        &self,
        policy: &ResolvedPolicy,
        script: &str,
        args: &[&Path],
        env: &[(OsString, OsString)],
    ) -> Result<Run, Outcome> {
        let mut argv: Vec<OsString> =
            vec!["/bin/sh".into(), "-c".into(), script.into(), "sh".into()];
        argv.extend(args.iter().map(|a| OsString::from(a.as_os_str())));
        self.run(policy, &argv, env)
    }

    /// Runs `argv` as given under `policy`.
    pub(crate) fn run(
        &self,
        policy: &ResolvedPolicy,
        argv: &[OsString],
        env: &[(OsString, OsString)],
    ) -> Result<Run, Outcome> {
        let out = tempfile::Builder::new()
            .prefix("sandbox-conformance-out-")
            .tempdir()
            .map_err(|e| unwitnessed(format!("cannot create an output directory: {e}")))?;
        let (stdout, stderr) = (out.path().join("stdout"), out.path().join("stderr"));
        let ended = launch(
            self.backend,
            policy,
            &Launch {
                argv,
                env,
                stdout: crate::launch::Sink::File(&stdout),
                stderr: crate::launch::Sink::File(&stderr),
                deadline: DEADLINE,
            },
        );
        Ok(Run {
            ended,
            stdout: read(&stdout).unwrap_or_default(),
            stderr: read(&stderr).unwrap_or_default(),
        })
    }
}

/// One finished launch.
pub(crate) struct Run {
    pub ended: Ended,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// The `name=value` lines of stdout.
    pub(crate) fn values(&self) -> BTreeMap<String, String> {
        self.stdout
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }

    /// How the launch ended, with stderr, for evidence.
    pub(crate) fn describe(&self) -> String {
        let mut text = self.ended.describe();
        let err = self.stderr.trim();
        if !err.is_empty() {
            text.push_str(&format!(", stderr: {}", clip(err)));
        }
        text
    }

    /// Unwitnessed unless the child printed `started=ok` (its own control).
    pub(crate) fn started(&self) -> Result<BTreeMap<String, String>, Outcome> {
        let values = self.values();
        if values.get("started").map(String::as_str) == Some("ok") {
            Ok(values)
        } else {
            Err(unwitnessed(format!(
                "the child program did not start (it {})",
                self.describe()
            )))
        }
    }

    pub(crate) fn exited_ok(&self) -> bool {
        matches!(&self.ended, Ended::Exited { status } if status.success())
    }
}

/// A fresh canonical temporary directory.
pub(crate) struct Tree {
    _dir: tempfile::TempDir,
    pub root: PathBuf,
}

impl Tree {
    pub(crate) fn new() -> Result<Self, Outcome> {
        let dir = tempfile::Builder::new()
            .prefix("sandbox-conformance-")
            .tempdir()
            .map_err(|e| unwitnessed(format!("cannot create a temporary directory: {e}")))?;
        let root = std::fs::canonicalize(dir.path())
            .map_err(|e| unwitnessed(format!("cannot resolve {}: {e}", dir.path().display())))?;
        Ok(Self { _dir: dir, root })
    }

    /// Creates directory `rel` (and parents) and returns its path.
    pub(crate) fn dir(&self, rel: &str) -> Result<PathBuf, Outcome> {
        let p = self.root.join(rel);
        std::fs::create_dir_all(&p)
            .map_err(|e| unwitnessed(format!("cannot create {}: {e}", p.display())))?;
        Ok(p)
    }

    /// Writes file `rel` with `content` and returns its path.
    pub(crate) fn file(&self, rel: &str, content: &str) -> Result<PathBuf, Outcome> {
        let p = self.root.join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| unwitnessed(format!("cannot create {}: {e}", parent.display())))?;
        }
        std::fs::write(&p, content)
            .map_err(|e| unwitnessed(format!("cannot write {}: {e}", p.display())))?;
        Ok(p)
    }

    /// Creates symlink `rel` pointing at `target`.
    pub(crate) fn symlink(&self, rel: &str, target: &Path) -> Result<PathBuf, Outcome> {
        let p = self.root.join(rel);
        std::os::unix::fs::symlink(target, &p)
            .map_err(|e| unwitnessed(format!("cannot create symlink {}: {e}", p.display())))?;
        Ok(p)
    }
}

/// Resolves `policy`, as an unwitnessed outcome on error.
pub(crate) fn resolve(policy: SandboxPolicy) -> Result<ResolvedPolicy, Outcome> {
    policy
        .resolve(&ExpandContext::default())
        .map_err(|e| unwitnessed(format!("cannot build the leg's policy: {e}")))
}

/// `path` as a policy string.
pub(crate) fn s(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

/// Whether a child's `err:NAME` value is a sandbox refusal (EPERM or EACCES).
pub(crate) fn refused(value: Option<&String>) -> bool {
    matches!(value.map(String::as_str), Some("err:EPERM" | "err:EACCES"))
}

/// Whether a child's value reports exactly the error `name` (as Python's
/// `errno.errorcode` spells it, e.g. `EXDEV`; `ENOTSUP` for `EOPNOTSUPP`).
pub(crate) fn failed_with(value: Option<&String>, name: &str) -> bool {
    value.is_some_and(|v| v.strip_prefix("err:") == Some(name))
}

/// Whether a child's value reports success.
pub(crate) fn succeeded(value: Option<&String>) -> bool {
    value.is_some_and(|v| v == "ok" || v.starts_with("ok:"))
}

/// `name=value` pairs for evidence, in a fixed order.
pub(crate) fn show(values: &BTreeMap<String, String>, names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("{n}={}", values.get(*n).map_or("(absent)", String::as_str)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The Python helper every python arm starts with: `attempt(name, f)` prints
/// `name=ok[:value]` or `name=err:ERRNO`.
pub(crate) const PY_PRELUDE: &str = r#"
import errno, os, sys
def attempt(name, f):
    try:
        r = f()
        print(name + "=ok" + ("" if r is None else ":" + str(r)), flush=True)
    except OSError as e:
        print(name + "=err:" + errno.errorcode.get(e.errno, str(e.errno)), flush=True)
import ctypes
_libc = ctypes.CDLL(None, use_errno=True)
def _check(rc):
    if rc < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return rc
def link_fd(fd, path):
    # linkat(fd, "", AT_FDCWD, path, AT_EMPTY_PATH): a name for an open file
    _check(_libc.linkat(fd, b"", -100, path.encode(), 0x1000))
def link_own(path, new):
    # the same linkat(AT_EMPTY_PATH) on a file the command opened itself:
    # the kernel's flink gate (path_init, LOOKUP_LINKAT_EMPTY) admits it
    # without CAP_DAC_READ_SEARCH (Linux >= 6.10)
    fd = os.open(path, os.O_RDONLY)
    try:
        link_fd(fd, new)
    finally:
        os.close(fd)
def link_follow(src, new):
    # linkat(AT_FDCWD, src, AT_FDCWD, new, AT_SYMLINK_FOLLOW); os.link calls
    # link(2), which never follows (a /proc/self/fd/N link would be EXDEV)
    _check(_libc.linkat(-100, src.encode(), -100, new.encode(), 0x400))
def link_proc(path, new):
    # a file the command opened, linked through its /proc/self/fd magic link
    fd = os.open(path, os.O_RDONLY)
    try:
        link_follow("/proc/self/fd/%d" % fd, new)
    finally:
        os.close(fd)
def same_fs(a, b):
    # EXDEV means the policy only when both names are on one file system
    return os.stat(a).st_dev == os.stat(b).st_dev
def nested_landlock():
    # landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)
    return _check(_libc.syscall(444, None, 0, 1))
print("started=ok", flush=True)
"#;
