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

use crate::launch::{launch, minimal_env, Ended, Launch};

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
}

/// Runs the write probe against `backend` (one launch).
///
/// Policy: one temporary write path, `deny_subprocess` false (so the syscall
/// layer cannot stand in for the write boundary). The shell writes a control
/// file inside the write path, then tries to create a file and to overwrite an
/// existing one in a sibling directory that is not a write path, recording the
/// status of each attempt.
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
    };
    let mut spawn = ProbeReport {
        probe: ProbeKind::Spawn,
        ..write.clone()
    };
    // The two launches are independent (different files, different
    // policies), so they run at the same time: the gate costs one launch.
    let open = Scratch::new().and_then(|s| {
        let existing = s.outside.join("existing");
        std::fs::write(&existing, ORIGINAL)
            .map_err(|e| format!("cannot create probe file {}: {e}", existing.display()))?;
        let policy = s.policy(false)?;
        let confined_setup = (which != Which::Write).then(|| confined_setup(&s));
        let (evidence, confined) = std::thread::scope(|scope| {
            let confined = scope.spawn(|| {
                confined_setup.map(|setup| {
                    setup.map(|(dir, policy, brief)| {
                        let ended = s.run_sh(backend, &policy, CONFINED_SCRIPT, &dir);
                        (dir, brief, s.evidence(&ended))
                    })
                })
            });
            let ended = s.run_sh(backend, &policy, OPEN_SCRIPT, &s.grant);
            let evidence = s.evidence(&ended);
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
        write.result = judge_write(&s, &evidence, &mut write.checks);
    }
    if let Some(confined) = confined {
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

/// Runs under `deny_subprocess` false: the write probe and the spawn probe's positive control.
const OPEN_SCRIPT: &str = r#"echo control > "$1/control"
(echo child > "$1/child")
echo forbidden > "$2/created"
echo $? > "$1/create-status"
echo forbidden > "$2/existing"
echo $? > "$1/overwrite-status"
"#;

/// Runs under `deny_subprocess` true. The subshell is a forked child: its
/// write happens only if the fork did.
const CONFINED_SCRIPT: &str = r#"echo alive > "$1/nofork"
(echo child > "$1/child")
echo $? > "$1/status"
"#;

const ORIGINAL: &str = "original\n";

fn judge_write(s: &Scratch, evidence: &str, checks: &mut Vec<Check>) -> ProbeResult {
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
    };
    for attempt in [create, overwrite] {
        if let Some(verdict) = attempt.judge(&brief, evidence, checks) {
            return verdict;
        }
    }
    ProbeResult::Witnessed
}

/// One forbidden write and what became of it.
struct Attempt {
    attempted: String,
    /// `Some(what)` when the forbidden effect is visible.
    happened: Option<String>,
    /// The shell's `$?` after the attempt, if it got that far.
    status: Option<String>,
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
                format!("refused: the shell reported status {code} and nothing changed"),
                None,
            ),
            (None, other) => {
                let why = match other {
                    Some(_) => "the shell reported success but nothing changed".to_owned(),
                    None => {
                        format!("the shell did not record the attempt (the command {evidence})")
                    }
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

/// A fresh temporary tree: `grant/` (the write path) and `outside/` (not one).
pub(crate) struct Scratch {
    dir: tempfile::TempDir,
    pub(crate) grant: PathBuf,
    pub(crate) outside: PathBuf,
}

impl Scratch {
    pub(crate) fn new() -> Result<Self, String> {
        let dir = tempfile::Builder::new()
            .prefix("sandbox-probe-")
            .tempdir()
            .map_err(|e| format!("cannot create a temporary directory for the probe: {e}"))?;
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

    fn stderr_path(&self) -> PathBuf {
        self.dir.path().join("stderr")
    }

    /// Runs `sh -c script sh <dir> <outside>`.
    fn run_sh(
        &self,
        backend: &dyn Backend,
        policy: &ResolvedPolicy,
        script: &str,
        dir: &Path,
    ) -> Ended {
        let argv: Vec<OsString> = vec![
            "/bin/sh".into(),
            "-c".into(),
            script.into(),
            "sh".into(),
            dir.into(),
            self.outside.clone().into(),
        ];
        let stderr = self.stderr_path();
        launch(
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

    /// How the last launch ended, with its stderr.
    fn evidence(&self, ended: &Ended) -> String {
        let mut text = ended.describe();
        if let Some(err) = read(&self.stderr_path()) {
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
