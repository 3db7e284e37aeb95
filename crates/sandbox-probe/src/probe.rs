//! The two production probes: the write boundary and the spawn gate.
//!
//! Each probe launches `/bin/sh` through the backend's own wrap and reads the
//! marks the shell leaves in a fresh temporary directory. A probe first
//! establishes its positive control (an action the policy grants is seen to
//! happen); without it, "nothing happened" would read like "the deny fired".

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sandbox_core::{Backend, ExpandContext, ResolvedPolicy, SandboxPolicy};
use serde::Serialize;

use crate::launch::{minimal_env, Ended, Launch};

/// Wall-clock bound of one probe launch.
pub const LAUNCH_DEADLINE: Duration = Duration::from_secs(5);

/// Which probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeKind {
    /// Writes only beneath `write_paths` (deny_subprocess false).
    Write,
    /// No child processes under `deny_subprocess` true.
    Spawn,
}

impl ProbeKind {
    /// Stable name.
    pub fn as_str(self) -> &'static str {
        match self {
            ProbeKind::Write => "write",
            ProbeKind::Spawn => "spawn",
        }
    }
}

/// The verdict of one probe.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "result", rename_all = "kebab-case")]
#[non_exhaustive]
pub enum ProbeResult {
    /// Every control was seen and the deny fired.
    Witnessed,
    /// A forbidden action happened: the backend does not enforce the axis.
    Failed {
        /// What the probe tried, under which policy.
        attempted: String,
        /// What it saw happen.
        observed: String,
    },
    /// A control was not seen, so the deny proves nothing.
    Unwitnessed {
        /// Which control is missing and what was seen instead.
        why: String,
    },
}

impl ProbeResult {
    /// Whether this is [`ProbeResult::Witnessed`].
    pub fn is_witnessed(&self) -> bool {
        matches!(self, ProbeResult::Witnessed)
    }
}

/// The role of one check inside a probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CheckRole {
    /// A granted action must be seen to happen.
    PositiveControl,
    /// Under `deny_subprocess`, a command that does not fork must still run.
    NonForkingControl,
    /// A forbidden action must not happen.
    Deny,
}

/// One observation made by a probe.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// Control or deny.
    pub role: CheckRole,
    /// The policy of the launch, in brief.
    pub policy: String,
    /// What was attempted.
    pub attempted: String,
    /// What was seen.
    pub observed: String,
    /// Whether what was seen is what an enforcing backend produces.
    pub ok: bool,
}

/// A probe's verdict with every check it made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProbeReport {
    /// Which probe.
    pub probe: ProbeKind,
    /// The verdict.
    #[serde(flatten)]
    pub result: ProbeResult,
    /// The controls and denies, in the order they were made.
    pub checks: Vec<Check>,
    /// What the probe's launch was (containment, seccomp program): the
    /// same as a run of the same policy switches gets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch: Option<crate::launch::LaunchFacts>,
}

/// Runs the write probe against `backend` (one launch).
///
/// Policy: one temporary write path, `deny_subprocess` false (so the syscall
/// layer cannot stand in for the write boundary). The shell writes a control
/// file inside the write path, then tries to create a file and to overwrite an
/// existing one in a sibling directory that is not a write path, recording the
/// status of each attempt.
///
/// Then the read-only truncate class (`open(2)` with `O_RDONLY|O_TRUNC`
/// truncates an existing file, and a read-only open is not a write to the
/// usual rules): a shell cannot set `O_TRUNC` on a read-only open, so `perl`
/// (else `python3`) makes the two calls. Positive control: `O_WRONLY|O_TRUNC`
/// on a non-empty file inside the write path empties it. Deny: `O_RDONLY|O_TRUNC`
/// on a non-empty file outside leaves its size and content as they were. With
/// neither interpreter the class cannot be witnessed and the probe says so
/// (unwitnessed: fail closed).
pub fn write_probe(backend: &dyn Backend) -> ProbeReport {
    probes(backend, Which::Write).0
}

/// Runs the spawn probe against `backend` (two launches).
///
/// Positive control (`deny_subprocess` false): a shell forks a subshell that
/// writes a file, and the file appears. Under `deny_subprocess` true the shell
/// first leaves a mark with a builtin (the non-forking control), then tries the
/// same child, whose file must never appear.
pub fn spawn_probe(backend: &dyn Backend) -> ProbeReport {
    probes(backend, Which::Spawn).1
}

/// Both probes, sharing the launch under `deny_subprocess` false (two launches in all).
pub(crate) fn both_probes(backend: &dyn Backend) -> (ProbeReport, ProbeReport) {
    probes(backend, Which::Both)
}

#[derive(PartialEq, Eq)]
enum Which {
    Write,
    Spawn,
    Both,
}

fn probes(backend: &dyn Backend, which: Which) -> (ProbeReport, ProbeReport) {
    let mut write = ProbeReport {
        probe: ProbeKind::Write,
        result: ProbeResult::Unwitnessed {
            why: "not run".into(),
        },
        checks: Vec::new(),
        launch: None,
    };
    let mut spawn = ProbeReport {
        probe: ProbeKind::Spawn,
        ..write.clone()
    };
    // The two launches are independent (different files, stderr files and
    // policies included), so they run at the same time: the gate costs one launch.
    let opener = (which != Which::Spawn).then(Opener::find).flatten();
    let open = Scratch::new().and_then(|s| {
        for existing in [
            s.outside.join("existing"),
            s.outside.join(RO_TRUNCATE),
            s.grant.join(TRUNCATE_CONTROL),
        ] {
            std::fs::write(&existing, ORIGINAL)
                .map_err(|e| format!("cannot create probe file {}: {e}", existing.display()))?;
        }
        let policy = s.policy(false)?;
        let confined_setup = (which != Which::Write).then(|| confined_setup(&s));
        let (evidence, confined) = std::thread::scope(|scope| {
            let confined = scope.spawn(|| {
                confined_setup.map(|setup| {
                    setup.map(|(dir, policy, brief)| {
                        let (ended, facts) = s.run_sh(backend, &policy, CONFINED_SCRIPT, &dir, &[]);
                        let evidence = s.evidence(&ended, &dir);
                        (dir, brief, evidence, facts)
                    })
                })
            });
            let opener_args = opener.as_ref().map(Opener::args).unwrap_or_default();
            let (ended, facts) = s.run_sh(backend, &policy, OPEN_SCRIPT, &s.grant, &opener_args);
            let evidence = s.evidence(&ended, &s.grant);
            write.launch = facts;
            let confined = confined
                .join()
                .unwrap_or_else(|_| Some(Err("the confined probe launch panicked".into())));
            (evidence, confined)
        });
        Ok((s, evidence, confined))
    });
    let (s, evidence, confined) = match open {
        Ok(v) => v,
        Err(why) => {
            write.result = ProbeResult::Unwitnessed { why: why.clone() };
            spawn.result = ProbeResult::Unwitnessed { why };
            return (write, spawn);
        }
    };
    if which != Which::Spawn {
        write.result = judge_write(&s, opener.as_ref(), &evidence, &mut write.checks);
    }
    if let Some(confined) = confined {
        let confined = confined.map(|(dir, brief, evidence, facts)| {
            spawn.launch = facts;
            (dir, brief, evidence)
        });
        spawn.result = judge_spawn(&s, &evidence, confined, &mut spawn.checks);
    }
    (write, spawn)
}

/// What the spawn probe's confined launch ran in: its directory, its policy and a brief.
type ConfinedSetup = Result<(PathBuf, ResolvedPolicy, String), String>;

/// The spawn probe's confined launch: a fresh directory under `grant`, deny_subprocess true.
fn confined_setup(s: &Scratch) -> ConfinedSetup {
    let confined = s.grant.join("confined");
    std::fs::create_dir(&confined)
        .map_err(|e| format!("cannot create probe directory {}: {e}", confined.display()))?;
    Ok((confined, s.policy(true)?, s.brief(true)))
}

/// Runs under `deny_subprocess` false: the write probe and the spawn probe's
/// positive control. `$3 $4 $5`, when given, run the truncate opener
/// (interpreter, its "run this code" flag, [`Opener`] code) on `$1 $2`,
/// started first and waited for last: its files are its own, and its
/// start-up (an interpreter's) overlaps the shell's checks.
const OPEN_SCRIPT: &str = r#"echo control > "$1/control"
(echo child > "$1/child")
echo forbidden > "$2/created"
echo $? > "$1/create-status"
echo forbidden > "$2/existing"
echo $? > "$1/overwrite-status"
if [ -n "$3" ]; then "$3" "$4" "$5" "$1" "$2"; echo $? > "$1/opener-status"; fi
"#;

/// Inside the write path: emptied by the opener's `O_WRONLY|O_TRUNC` control.
const TRUNCATE_CONTROL: &str = "truncate-control";
/// Outside the write path: the target of the opener's `O_RDONLY|O_TRUNC`.
const RO_TRUNCATE: &str = "ro-truncate";

/// The opener's code: open `$grant/truncate-control` with `O_WRONLY|O_TRUNC`,
/// then `$outside/ro-truncate` with `O_RDONLY|O_TRUNC`, recording 0 or the
/// errno of each in `$grant/truncate-control-status` and `$grant/ro-truncate-status`.
///
/// The flags are Linux's numbers, in octal (`O_WRONLY` 1, `O_CREAT` 0100,
/// `O_TRUNC` 01000, the same on x86_64 and aarch64), not `use Fcntl`:
/// loading that module was about half of perl's start-up here.
const PERL_OPENER: &str = r#"my ($g, $o) = @ARGV;
sub rec {
    my ($name, $path, $flags) = @_;
    my $code = sysopen(my $fh, $path, $flags) ? 0 : (($! + 0) || -1);
    sysopen(my $s, "$g/$name-status", 01101, 0644) or exit 2;
    syswrite($s, "$code\n") or exit 2;
    close($s) or exit 2;
}
rec("truncate-control", "$g/truncate-control", 01001);
rec("ro-truncate", "$o/ro-truncate", 01000);
"#;

/// [`PERL_OPENER`] in Python.
const PYTHON_OPENER: &str = r#"import os, sys
g, o = sys.argv[1], sys.argv[2]
def rec(name, path, flags):
    try:
        os.close(os.open(path, flags))
        code = 0
    except OSError as e:
        code = e.errno or -1
    with open(g + "/" + name + "-status", "w") as s:
        s.write("%d\n" % code)
rec("truncate-control", g + "/truncate-control", os.O_WRONLY | os.O_TRUNC)
rec("ro-truncate", o + "/ro-truncate", os.O_RDONLY | os.O_TRUNC)
"#;

/// The interpreter that makes the `open(2)` calls a shell cannot.
pub(crate) struct Opener {
    name: &'static str,
    path: PathBuf,
    flag: &'static str,
    code: &'static str,
}

impl Opener {
    /// `perl` (starts in a few ms), else `python3`, in the probe's `PATH`.
    fn find() -> Option<Opener> {
        let candidates = [
            ("perl", "-e", PERL_OPENER),
            // Isolated (no script directory or cwd on sys.path, no PYTHON*
            // variables) and without site: a planted module cannot stand in.
            ("python3", "-ISc", PYTHON_OPENER),
        ];
        candidates.into_iter().find_map(|(name, flag, code)| {
            PROBE_PATH_DIRS
                .iter()
                .map(|dir| Path::new(dir).join(name))
                .find(|p| is_executable(p))
                .map(|path| Opener {
                    name,
                    path,
                    flag,
                    code,
                })
        })
    }

    fn args(&self) -> Vec<OsString> {
        vec![self.path.clone().into(), self.flag.into(), self.code.into()]
    }
}

/// The directories of the probe's `PATH` ([`minimal_env`]).
const PROBE_PATH_DIRS: &[&str] = &["/usr/local/bin", "/usr/bin", "/bin"];

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// Runs under `deny_subprocess` true. The subshell is a forked child: its
/// write happens only if the fork did.
const CONFINED_SCRIPT: &str = r#"echo alive > "$1/nofork"
(echo child > "$1/child")
echo $? > "$1/status"
"#;

const ORIGINAL: &str = "original\n";

fn judge_write(
    s: &Scratch,
    opener: Option<&Opener>,
    evidence: &str,
    checks: &mut Vec<Check>,
) -> ProbeResult {
    let brief = s.brief(false);
    let control = s.grant.join("control");
    let seen = read(&control).as_deref() == Some("control\n");
    checks.push(Check {
        role: CheckRole::PositiveControl,
        policy: brief.clone(),
        attempted: format!("write {} (inside write_paths)", control.display()),
        observed: if seen {
            "the file was written".into()
        } else {
            format!("the file was not written; the command {evidence}")
        },
        ok: seen,
    });
    if !seen {
        return ProbeResult::Unwitnessed {
            why: format!(
                "positive control not seen: a write to {} inside write_paths did not happen \
                 (the command {evidence}), so an absent forbidden file would prove nothing",
                control.display()
            ),
        };
    }

    let created = s.outside.join("created");
    let existing = s.outside.join("existing");
    let create = Attempt {
        attempted: format!("create {} outside write_paths ({brief})", created.display()),
        happened: read(&created).map(|c| format!("the file was created with {c:?}")),
        status: read(&s.grant.join("create-status")),
        by: Reporter::Shell,
    };
    let overwrite = Attempt {
        attempted: format!(
            "overwrite {} outside write_paths ({brief})",
            existing.display()
        ),
        happened: read(&existing)
            .filter(|c| c != ORIGINAL)
            .map(|c| format!("the file's content changed to {c:?}")),
        status: read(&s.grant.join("overwrite-status")),
        by: Reporter::Shell,
    };
    for attempt in [create, overwrite] {
        if let Some(verdict) = attempt.judge(&brief, evidence, checks) {
            return verdict;
        }
    }
    judge_ro_truncate(s, opener, &brief, evidence, checks)
}

/// The read-only truncate leg: its positive control, then the deny.
fn judge_ro_truncate(
    s: &Scratch,
    opener: Option<&Opener>,
    brief: &str,
    evidence: &str,
    checks: &mut Vec<Check>,
) -> ProbeResult {
    let control = s.grant.join(TRUNCATE_CONTROL);
    let target = s.outside.join(RO_TRUNCATE);
    let Some(opener) = opener else {
        let why = format!(
            "no perl or python3 in {} to open {} with O_RDONLY|O_TRUNC (a shell cannot),              so whether a read-only open truncates outside write_paths is not known",
            PROBE_PATH_DIRS.join(":"),
            target.display()
        );
        checks.push(Check {
            role: CheckRole::PositiveControl,
            policy: brief.to_owned(),
            attempted: format!(
                "truncate {} (inside write_paths) by open(O_WRONLY|O_TRUNC)",
                control.display()
            ),
            observed: why.clone(),
            ok: false,
        });
        return ProbeResult::Unwitnessed { why };
    };
    let status = |name: &str| read(&s.grant.join(format!("{name}-status")));
    let ran = || match status("opener") {
        Some(code) => format!("{} exited with status {}", opener.name, code.trim()),
        None => format!("{} did not run to the end", opener.name),
    };
    let emptied = std::fs::metadata(&control).map(|m| m.len()).ok() == Some(0);
    let control_status = status(TRUNCATE_CONTROL);
    checks.push(Check {
        role: CheckRole::PositiveControl,
        policy: brief.to_owned(),
        attempted: format!(
            "truncate {} (inside write_paths) by open(O_WRONLY|O_TRUNC) with {}",
            control.display(),
            opener.name
        ),
        observed: if emptied {
            "the file was truncated".into()
        } else {
            format!(
                "the file was not truncated ({}, open status {}; the command {evidence})",
                ran(),
                control_status.as_deref().map_or("not recorded", str::trim)
            )
        },
        ok: emptied,
    });
    if !emptied {
        return ProbeResult::Unwitnessed {
            why: format!(
                "positive control not seen: open(O_WRONLY|O_TRUNC) of {} inside write_paths                  with {} did not truncate it ({}; the command {evidence}), so an untouched                  file outside would prove nothing",
                control.display(),
                opener.name,
                ran()
            ),
        };
    }
    let attempt = Attempt {
        attempted: format!(
            "truncate {} outside write_paths by open(O_RDONLY|O_TRUNC) with {} ({brief})",
            target.display(),
            opener.name
        ),
        happened: match (std::fs::metadata(&target), read(&target)) {
            (Ok(m), _) if m.len() != ORIGINAL.len() as u64 => Some(format!(
                "the file was truncated: {} bytes, was {}",
                m.len(),
                ORIGINAL.len()
            )),
            (_, Some(c)) if c != ORIGINAL => Some(format!("the file's content changed to {c:?}")),
            (Err(e), _) => Some(format!("the file is gone ({e})")),
            _ => None,
        },
        status: status(RO_TRUNCATE),
        by: Reporter::Open,
    };
    match attempt.judge(brief, evidence, checks) {
        Some(verdict) => verdict,
        None => ProbeResult::Witnessed,
    }
}

/// Who reported an attempt's status.
#[derive(Clone, Copy)]
enum Reporter {
    /// `$?` of a shell command.
    Shell,
    /// 0 or the errno of an `open(2)` made by the opener.
    Open,
}

impl Reporter {
    fn refused(self, code: &str) -> String {
        match self {
            Reporter::Shell => format!("the shell reported status {code}"),
            Reporter::Open => match code.parse::<i32>() {
                Ok(errno) if errno > 0 => format!(
                    "open(2) failed with {}",
                    std::io::Error::from_raw_os_error(errno)
                ),
                _ => format!("open(2) failed ({code})"),
            },
        }
    }

    fn succeeded(self) -> &'static str {
        match self {
            Reporter::Shell => "the shell reported success but nothing changed",
            Reporter::Open => "open(2) succeeded but nothing changed",
        }
    }

    fn silent(self) -> &'static str {
        match self {
            Reporter::Shell => "the shell did not record the attempt",
            Reporter::Open => "the opener did not record the attempt",
        }
    }
}

/// One forbidden write and what became of it.
struct Attempt {
    attempted: String,
    /// `Some(what)` when the forbidden effect is visible.
    happened: Option<String>,
    /// The status after the attempt, if it got that far.
    status: Option<String>,
    /// What `status` is.
    by: Reporter,
}

impl Attempt {
    /// Records the check; returns a verdict unless the deny was witnessed.
    fn judge(self, brief: &str, evidence: &str, checks: &mut Vec<Check>) -> Option<ProbeResult> {
        let status = self.status.as_deref().map(str::trim);
        let (ok, observed, verdict) = match (&self.happened, status) {
            (Some(what), _) => (
                false,
                what.clone(),
                Some(ProbeResult::Failed {
                    attempted: self.attempted.clone(),
                    observed: what.clone(),
                }),
            ),
            (None, Some(code)) if code != "0" => (
                true,
                format!("refused: {} and nothing changed", self.by.refused(code)),
                None,
            ),
            (None, other) => {
                let why = match other {
                    Some(_) => self.by.succeeded().to_owned(),
                    None => format!("{} (the command {evidence})", self.by.silent()),
                };
                (
                    false,
                    why.clone(),
                    Some(ProbeResult::Unwitnessed {
                        why: format!("{}: {why}", self.attempted),
                    }),
                )
            }
        };
        checks.push(Check {
            role: CheckRole::Deny,
            policy: brief.to_owned(),
            attempted: self.attempted,
            observed,
            ok,
        });
        verdict
    }
}

fn judge_spawn(
    s: &Scratch,
    open_evidence: &str,
    confined_run: Result<(PathBuf, String, String), String>,
    checks: &mut Vec<Check>,
) -> ProbeResult {
    let open_child = s.grant.join("child");
    let seen = read(&open_child).as_deref() == Some("child\n");
    checks.push(Check {
        role: CheckRole::PositiveControl,
        policy: s.brief(false),
        attempted: format!("fork a subshell that writes {}", open_child.display()),
        observed: if seen {
            "the child ran".into()
        } else {
            format!("the child did not run; the command {open_evidence}")
        },
        ok: seen,
    });
    if !seen {
        return ProbeResult::Unwitnessed {
            why: format!(
                "positive control not seen: with deny_subprocess false the shell's forked \
                 child did not write {} (the command {open_evidence})",
                open_child.display()
            ),
        };
    }

    let (confined, brief, evidence) = match confined_run {
        Ok(run) => run,
        Err(why) => return ProbeResult::Unwitnessed { why },
    };
    let mark = confined.join("nofork");
    let alive = read(&mark).as_deref() == Some("alive\n");
    checks.push(Check {
        role: CheckRole::NonForkingControl,
        policy: brief.clone(),
        attempted: format!("write {} with a shell builtin (no fork)", mark.display()),
        observed: if alive {
            "the mark was written".into()
        } else {
            format!("no mark; the command {evidence}")
        },
        ok: alive,
    });
    if !alive {
        return ProbeResult::Unwitnessed {
            why: format!(
                "non-forking control not seen: under deny_subprocess true a shell builtin did \
                 not write {} (the command {evidence}); a backend that refuses everything is \
                 not one that refuses fork",
                mark.display()
            ),
        };
    }

    let child = confined.join("child");
    let attempted = format!("fork a subshell that writes {} ({brief})", child.display());
    let ran = read(&child).is_some();
    checks.push(Check {
        role: CheckRole::Deny,
        policy: brief,
        attempted: attempted.clone(),
        observed: if ran {
            "the child ran".into()
        } else {
            format!("the child never ran; the command {evidence}")
        },
        ok: !ran,
    });
    if ran {
        return ProbeResult::Failed {
            attempted,
            observed: format!("the child ran and wrote {}", child.display()),
        };
    }
    ProbeResult::Witnessed
}

/// Where probe scratch trees go: the user's runtime directory
/// (`/run/user/<euid>`, or `/run` for root; never a place the environment
/// names, which an earlier run may have been able to write), a private tmpfs that confined
/// runs do not share with their write paths, so a run that filled its
/// filesystem cannot starve the next self-test; else the temporary
/// directory. A probe that cannot create its tree fails (the gate then fails
/// closed), it never passes.
pub(crate) fn scratch_base() -> PathBuf {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    let private = |p: &Path| {
        std::fs::symlink_metadata(p)
            .is_ok_and(|m| m.is_dir() && (m.uid() == euid || m.uid() == 0) && m.mode() & 0o022 == 0)
    };
    let runtime = if euid == 0 {
        PathBuf::from("/run")
    } else {
        PathBuf::from(format!("/run/user/{euid}"))
    };
    Some(runtime)
        .filter(|p| private(p))
        .unwrap_or_else(std::env::temp_dir)
}

/// A fresh temporary tree: `grant/` (the write path) and `outside/` (not one).
pub(crate) struct Scratch {
    dir: tempfile::TempDir,
    pub(crate) grant: PathBuf,
    pub(crate) outside: PathBuf,
}

impl Scratch {
    pub(crate) fn new() -> Result<Self, String> {
        let base = scratch_base();
        let dir = tempfile::Builder::new()
            .prefix("sandbox-probe-")
            .tempdir_in(&base)
            .map_err(|e| {
                format!(
                    "cannot create a temporary directory for the probe in {}: {e}",
                    base.display()
                )
            })?;
        let root = std::fs::canonicalize(dir.path())
            .map_err(|e| format!("cannot resolve {}: {e}", dir.path().display()))?;
        let grant = root.join("grant");
        let outside = root.join("outside");
        for d in [&grant, &outside] {
            std::fs::create_dir(d)
                .map_err(|e| format!("cannot create probe directory {}: {e}", d.display()))?;
        }
        Ok(Self {
            dir,
            grant,
            outside,
        })
    }

    /// The probe policy: `grant` writable, network open, timeout default.
    pub(crate) fn policy(&self, deny_subprocess: bool) -> Result<ResolvedPolicy, String> {
        SandboxPolicy {
            write_paths: vec![self.grant.to_string_lossy().into_owned()],
            deny_subprocess,
            ..SandboxPolicy::default()
        }
        .resolve(&ExpandContext::default())
        .map_err(|e| format!("cannot build the probe policy: {e}"))
    }

    pub(crate) fn brief(&self, deny_subprocess: bool) -> String {
        format!(
            "write_paths = [{}], deny_subprocess = {deny_subprocess}",
            self.grant.display()
        )
    }

    /// Where the stderr of the launch working in `dir` goes: one file per
    /// launch (the two probe launches run at the same time).
    fn stderr_path(&self, dir: &Path) -> PathBuf {
        let name: String = dir
            .strip_prefix(self.dir.path())
            .unwrap_or(dir)
            .to_string_lossy()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        self.dir.path().join(format!("stderr-{name}"))
    }

    /// Runs `sh -c script sh <dir> <outside> <extra>...`.
    fn run_sh(
        &self,
        backend: &dyn Backend,
        policy: &ResolvedPolicy,
        script: &str,
        dir: &Path,
        extra: &[OsString],
    ) -> (Ended, Option<crate::launch::LaunchFacts>) {
        let mut argv: Vec<OsString> = vec![
            "/bin/sh".into(),
            "-c".into(),
            script.into(),
            "sh".into(),
            dir.into(),
            self.outside.clone().into(),
        ];
        argv.extend_from_slice(extra);
        let stderr = self.stderr_path(dir);
        crate::launch::launch_with_facts(
            backend,
            policy,
            &Launch {
                argv: &argv,
                env: &minimal_env(),
                stdout: None,
                stderr: Some(&stderr),
                deadline: LAUNCH_DEADLINE,
            },
        )
    }

    /// How the launch working in `dir` ended, with its own stderr.
    fn evidence(&self, ended: &Ended, dir: &Path) -> String {
        let mut text = ended.describe();
        if let Some(err) = read(&self.stderr_path(dir)) {
            let err = err.trim();
            if !err.is_empty() {
                text.push_str(&format!(", stderr: {}", clip(err)));
            }
        }
        text
    }
}

/// The file's content, if it exists and is text.
pub(crate) fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// At most 300 characters of `text`, on one line.
pub(crate) fn clip(text: &str) -> String {
    let one_line = text.replace('\n', " | ");
    match one_line.char_indices().nth(300) {
        Some((i, _)) => format!("{}...", &one_line[..i]),
        None => one_line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs each opener unconfined: both calls succeed and both files are
    /// emptied. This is the claim the deny leg rests on: a read-only open
    /// with O_TRUNC truncates (open(2): "the file will be truncated to length
    /// 0" for O_TRUNC on a regular file; the access mode does not matter).
    #[test]
    fn unconfined_each_opener_truncates_both_files() {
        let mut ran = Vec::new();
        for (name, flag, code) in [
            ("perl", "-e", PERL_OPENER),
            ("python3", "-ISc", PYTHON_OPENER),
        ] {
            let Some(path) = PROBE_PATH_DIRS
                .iter()
                .map(|d| Path::new(d).join(name))
                .find(|p| is_executable(p))
            else {
                continue;
            };
            let s = Scratch::new().unwrap();
            let (control, target) = (s.grant.join(TRUNCATE_CONTROL), s.outside.join(RO_TRUNCATE));
            std::fs::write(&control, ORIGINAL).unwrap();
            std::fs::write(&target, ORIGINAL).unwrap();
            let status = std::process::Command::new(&path)
                .args([flag, code])
                .arg(&s.grant)
                .arg(&s.outside)
                .env_clear()
                .status()
                .unwrap();
            assert!(status.success(), "{name}: {status}");
            for file in [&control, &target] {
                assert_eq!(
                    std::fs::metadata(file).unwrap().len(),
                    0,
                    "{name}: {file:?}"
                );
            }
            for status in ["truncate-control-status", "ro-truncate-status"] {
                assert_eq!(
                    read(&s.grant.join(status)).as_deref(),
                    Some("0\n"),
                    "{name}"
                );
            }
            ran.push(name);
        }
        // A host with neither makes the leg unwitnessed (tested below), never green.
        assert!(
            !ran.is_empty(),
            "neither perl nor python3 in {PROBE_PATH_DIRS:?}"
        );
        eprintln!("openers tested: {ran:?}");
    }

    #[test]
    fn without_an_opener_the_truncate_leg_is_unwitnessed() {
        let s = Scratch::new().unwrap();
        let mut checks = Vec::new();
        let verdict = judge_ro_truncate(&s, None, "brief", "exited with status 0", &mut checks);
        let ProbeResult::Unwitnessed { why } = verdict else {
            panic!("{verdict:?}");
        };
        assert!(
            why.contains("no perl or python3") && why.contains("O_RDONLY|O_TRUNC"),
            "{why}"
        );
        assert_eq!(checks.len(), 1);
        assert!(checks[0].role == CheckRole::PositiveControl && !checks[0].ok);
    }

    #[test]
    fn an_opener_records_the_errno_of_a_refused_open() {
        let s = Scratch::new().unwrap();
        // No such files: both opens fail with ENOENT, recorded as 2.
        let opener = Opener::find().expect("perl or python3 on this host");
        let status = std::process::Command::new(&opener.path)
            .args([opener.flag, opener.code])
            .arg(&s.grant)
            .arg(&s.outside)
            .status()
            .unwrap();
        assert!(status.success());
        assert_eq!(
            read(&s.grant.join("ro-truncate-status")).as_deref(),
            Some(format!("{}\n", libc::ENOENT).as_str())
        );
        assert_eq!(
            Reporter::Open.refused("13"),
            format!(
                "open(2) failed with {}",
                std::io::Error::from_raw_os_error(13)
            )
        );
    }
}
