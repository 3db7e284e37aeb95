//! The two production probes: the write boundary and the spawn gate.
//!
//! Each probe launches `/bin/sh` through the backend's own wrap in a fresh
//! scratch directory. A probe first establishes its positive control (an
//! action the policy grants is seen to happen); without it, "nothing
//! happened" would read like "the deny fired".
//!
//! The verdict is the launch's own word: the shell and the opener report
//! each call's result (0 or its errno) on a stdout only the launch and the
//! probe hold ([`Capture`]), and a forbidden write counts as refused by its
//! `EACCES`/`EPERM`, as let through by its success, never by whether a file
//! exists afterwards. The tree is read through fds held from its making.
//! What another process can cause (a file there before an exclusive create,
//! `EEXIST`; a file that shows otherwise than the call reported; an entry or
//! a directory the probe did not make) is *interference*: the probes run
//! again in a fresh scratch, and when it keeps happening the verdict is
//! [`ProbeResult::Interfered`], which says nothing of the backend and is
//! never taken for "unsupported" (red team R6b F2).
//!
//! Where the scratch lies: in the caller's trusted directory when it names
//! one (`sandbox` passes the self-test cache's directory, which every run
//! write-denies: no confined run reaches the scratch), else in
//! [`scratch_base`] (the runtime directory, else `$TMPDIR`), where a run of
//! the same user allowed to write there can reach it and the reports above
//! are what holds.

use std::ffi::{CString, OsString};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sandbox_core::{Backend, ExpandContext, ResolvedPolicy, SandboxPolicy};
use serde::Serialize;

use crate::launch::{minimal_env, Capture, Ended, Launch, Sink};

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
    /// Another process changed the probe's scratch directory (what the
    /// launches reported and what the tree shows disagree), in each fresh
    /// scratch tried: nothing is known of the backend. Never a reason to
    /// run unconfined.
    Interfered {
        /// The scratch directory of the last attempt.
        scratch: String,
        /// What disagreed.
        observed: String,
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
/// file inside the write path; then `perl` (else `python3`: a shell knows no
/// errno and cannot set `O_TRUNC` on a read-only open) tries to create a file
/// (`O_CREAT|O_EXCL`) and to overwrite an existing one in a sibling directory
/// that is not a write path, reporting 0 or the errno of each call.
///
/// Then the read-only truncate class (`open(2)` with `O_RDONLY|O_TRUNC`
/// truncates an existing file, and a read-only open is not a write to the
/// usual rules). Positive control: `O_WRONLY|O_TRUNC` on a non-empty file
/// inside the write path empties it. Deny: `O_RDONLY|O_TRUNC` on a non-empty
/// file outside is refused and leaves its size and content as they were.
/// With neither interpreter the denies cannot be witnessed and the probe says
/// so (unwitnessed: fail closed).
pub fn write_probe(backend: &dyn Backend) -> ProbeReport {
    probes(backend, Which::Write, None).0
}

/// Runs the spawn probe against `backend` (two launches).
///
/// Positive control (`deny_subprocess` false): a shell forks a subshell that
/// writes a file, and the file appears. Under `deny_subprocess` true the shell
/// first leaves a mark with a builtin (the non-forking control), then tries the
/// same child, whose file must never appear.
pub fn spawn_probe(backend: &dyn Backend) -> ProbeReport {
    probes(backend, Which::Spawn, None).1
}

/// Both probes, sharing the launch under `deny_subprocess` false (two
/// launches in all), their scratch in `trusted` when given ([`Scratch::in_base`]).
pub(crate) fn both_probes(
    backend: &dyn Backend,
    trusted: Option<&Path>,
) -> (ProbeReport, ProbeReport) {
    probes(backend, Which::Both, trusted)
}

#[derive(PartialEq, Eq)]
enum Which {
    Write,
    Spawn,
    Both,
}

/// Fresh scratch directories a probe is run in before an interference it
/// keeps meeting is its verdict.
const ATTEMPTS: usize = 3;

fn probes(
    backend: &dyn Backend,
    which: Which,
    trusted: Option<&Path>,
) -> (ProbeReport, ProbeReport) {
    let mut seen = Vec::new();
    loop {
        let (mut write, mut spawn) = probes_once(backend, &which, trusted);
        let interfered = [&write, &spawn].into_iter().find_map(|p| match &p.result {
            ProbeResult::Interfered { scratch, observed } => {
                Some((scratch.clone(), observed.clone()))
            }
            _ => None,
        });
        let Some((scratch, observed)) = interfered else {
            return (write, spawn);
        };
        seen.push(scratch);
        if seen.len() >= ATTEMPTS {
            let observed = format!(
                "{observed} (the same in each of {} fresh scratch directories: {})",
                seen.len(),
                seen.join(", ")
            );
            for p in [&mut write, &mut spawn] {
                if let ProbeResult::Interfered { observed: o, .. } = &mut p.result {
                    *o = observed.clone();
                }
            }
            return (write, spawn);
        }
    }
}

fn probes_once(
    backend: &dyn Backend,
    which: &Which,
    trusted: Option<&Path>,
) -> (ProbeReport, ProbeReport) {
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
    // The two launches are independent (different directories, output
    // files and policies), so they run at the same time: the gate costs one launch.
    let opener = (*which != Which::Spawn).then(Opener::find).flatten();
    let open = Scratch::in_base(trusted).and_then(|s| {
        for (dir, name) in [
            (&s.outside, "existing"),
            (&s.outside, RO_TRUNCATE),
            (&s.grant, TRUNCATE_CONTROL),
        ] {
            dir.write_new(name, ORIGINAL)?;
        }
        // A write path the policy cannot resolve is gone: changed by another
        // process when the tree shows it.
        let policy = s.policy(false).map_err(|why| s.setup_failed(why, None))?;
        let confined_setup = (*which != Which::Write).then(|| confined_setup(&s));
        let (open_run, confined) = std::thread::scope(|scope| {
            let confined = scope.spawn(|| {
                confined_setup.map(|setup| {
                    setup.and_then(|(dir, policy, brief)| {
                        let (run, facts) =
                            s.run_sh(backend, &policy, CONFINED_SCRIPT, &dir.path, &[])?;
                        Ok((dir, brief, run, facts))
                    })
                })
            });
            let opener_args = opener.as_ref().map(Opener::args).unwrap_or_default();
            let open_run = s.run_sh(backend, &policy, OPEN_SCRIPT, &s.grant.path, &opener_args);
            let confined = confined.join().unwrap_or_else(|_| {
                Some(Err(SetupError::from(
                    "the confined probe launch panicked".to_owned(),
                )))
            });
            (open_run, confined)
        });
        let (open_run, facts) = open_run?;
        write.launch = facts;
        Ok((s, open_run, confined))
    });
    let (s, open_run, confined) = match open {
        Ok(v) => v,
        Err(e) => {
            let result = match e.interfered {
                Some(scratch) => ProbeResult::Interfered {
                    scratch,
                    observed: e.why,
                },
                None => ProbeResult::Unwitnessed { why: e.why },
            };
            write.result = result.clone();
            spawn.result = result;
            return (write, spawn);
        }
    };
    let confined = confined.map(|c| {
        c.map(|(dir, brief, run, facts)| {
            spawn.launch = facts;
            (dir, brief, run)
        })
    });
    // Before any verdict: the scratch is still the probe's own tree.
    let confined_dir = confined
        .as_ref()
        .and_then(|c| c.as_ref().ok())
        .map(|c| &c.0);
    if let Some(observed) = s.tampered(confined_dir) {
        for p in [&mut write, &mut spawn] {
            p.result = s.interfered(observed.clone());
        }
        return (write, spawn);
    }
    if *which != Which::Spawn {
        write.result = judge_write(&s, opener.as_ref(), &open_run, &mut write.checks);
    }
    if let Some(confined) = confined {
        spawn.result = judge_spawn(&s, &open_run, confined, &mut spawn.checks);
    }
    (write, spawn)
}

/// What the spawn probe's confined launch ran in: its directory, its policy and a brief.
type ConfinedSetup = Result<(Dir, ResolvedPolicy, String), SetupError>;

/// The spawn probe's confined launch: a fresh directory under `grant`, deny_subprocess true.
fn confined_setup(s: &Scratch) -> ConfinedSetup {
    let confined = s.grant.make("confined")?;
    let policy = s
        .policy(true)
        .map_err(|why| s.setup_failed(why, Some(&confined)))?;
    Ok((confined, policy, s.brief(true)))
}

/// Why the probe's tree could not be made or used.
#[derive(Debug)]
pub(crate) struct SetupError {
    why: String,
    /// `Some(scratch)` when another process's doing: a call in a directory
    /// the probe had just made failed as no fresh directory of its own
    /// makes it fail (`EEXIST`, `ENOENT`, ...), or the tree was changed.
    interfered: Option<String>,
}

impl From<String> for SetupError {
    fn from(why: String) -> Self {
        SetupError {
            why,
            interfered: None,
        }
    }
}

/// One probe launch: how it ended, what it reported on stdout (lines
/// `NAME CODE`), and its stderr, in brief.
pub(crate) struct Run {
    ended: Ended,
    reports: Vec<(String, String)>,
    stderr: String,
}

impl Run {
    /// The code the command reported under `name` (the first such line).
    fn code(&self, name: &str) -> Option<&str> {
        self.reports
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, c)| c.as_str())
    }

    /// How it ended, with its own stderr.
    fn evidence(&self) -> String {
        let mut text = self.ended.describe();
        let err = self.stderr.trim();
        if !err.is_empty() {
            text.push_str(&format!(", stderr: {}", clip(err)));
        }
        text
    }
}

/// Runs under `deny_subprocess` false: the write probe and the spawn probe's
/// positive control. `$3 $4 $5`, when given, run the opener (interpreter,
/// its "run this code" flag, [`Opener`] code) on `$1 $2`: its files are
/// its own. Every result is reported on stdout, which only this launch
/// holds ([`Capture`]), as a line `NAME CODE`; the forked child reports
/// that it ran before it writes.
const OPEN_SCRIPT: &str = r#"echo control > "$1/control"
echo "control $?"
(echo "child-ran 0"; echo child > "$1/child")
if [ -n "$3" ]; then "$3" "$4" "$5" "$1" "$2"; echo "opener $?"; fi
"#;

/// Inside the write path: emptied by the opener's `O_WRONLY|O_TRUNC` control.
const TRUNCATE_CONTROL: &str = "truncate-control";
/// Outside the write path: the target of the opener's `O_RDONLY|O_TRUNC`.
const RO_TRUNCATE: &str = "ro-truncate";

/// The opener's code, each call's result (0 or its errno) printed as a line
/// `NAME CODE` on stdout: create `$outside/created` with
/// `O_WRONLY|O_CREAT|O_EXCL` (exclusive: a file some other process put
/// there first is `EEXIST`, never a refusal) and write to it, open
/// `$outside/existing` with `O_WRONLY|O_TRUNC` and write to it, open
/// `$grant/truncate-control` with `O_WRONLY|O_TRUNC` (the control), then
/// `$outside/ro-truncate` with `O_RDONLY|O_TRUNC`.
///
/// The flags are Linux's numbers, in octal (`O_WRONLY` 1, `O_CREAT` 0100,
/// `O_EXCL` 0200, `O_TRUNC` 01000, the same on x86_64 and aarch64), not
/// `use Fcntl`: loading that module was about half of perl's start-up here.
const PERL_OPENER: &str = r#"my ($g, $o) = @ARGV;
$| = 1;
sub rec {
    my ($name, $path, $flags, $text) = @_;
    my $code = 0;
    if (sysopen(my $fh, $path, $flags, 0644)) {
        syswrite($fh, $text) if defined $text;
        close($fh);
    } else {
        $code = ($! + 0) || -1;
    }
    print "$name $code\n";
}
rec("create", "$o/created", 0301, "forbidden\n");
rec("overwrite", "$o/existing", 01001, "forbidden\n");
rec("truncate-control", "$g/truncate-control", 01001);
rec("ro-truncate", "$o/ro-truncate", 01000);
"#;

/// [`PERL_OPENER`] in Python.
const PYTHON_OPENER: &str = r#"import os, sys
g, o = sys.argv[1], sys.argv[2]
def rec(name, path, flags, text=None):
    try:
        fd = os.open(path, flags, 0o644)
        try:
            if text is not None:
                os.write(fd, text)
        finally:
            os.close(fd)
        code = 0
    except OSError as e:
        code = e.errno or -1
    sys.stdout.write("%s %d\n" % (name, code))
    sys.stdout.flush()
rec("create", o + "/created", os.O_WRONLY | os.O_CREAT | os.O_EXCL, b"forbidden\n")
rec("overwrite", o + "/existing", os.O_WRONLY | os.O_TRUNC, b"forbidden\n")
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

/// Runs under `deny_subprocess` true. The subshell is a forked child: it
/// reports that it ran (on stdout, which only this launch holds) before it
/// writes.
const CONFINED_SCRIPT: &str = r#"echo alive > "$1/nofork"
echo "nofork $?"
(echo "child-ran 0"; echo child > "$1/child")
echo "fork $?"
"#;

const ORIGINAL: &str = "original\n";
const FORBIDDEN: &str = "forbidden\n";

/// An `open(2)` errno that means the call was refused.
fn is_refusal(code: i32) -> bool {
    matches!(code, libc::EACCES | libc::EPERM | libc::EROFS)
}

/// An `open(2)` errno no refusal gives in a tree the probe made: the file
/// was there already (`O_EXCL`), or a directory of the tree is gone or
/// replaced. Only another process can have done that.
fn is_interference(code: i32) -> bool {
    matches!(
        code,
        libc::EEXIST | libc::ENOENT | libc::ENOTDIR | libc::ELOOP | libc::EISDIR
    )
}

fn errno_text(code: i32) -> String {
    std::io::Error::from_raw_os_error(code).to_string()
}

fn judge_write(
    s: &Scratch,
    opener: Option<&Opener>,
    run: &Run,
    checks: &mut Vec<Check>,
) -> ProbeResult {
    let brief = s.brief(false);
    let evidence = run.evidence();
    let control = s.grant.path.join("control");
    let reported = run.code("control") == Some("0");
    let seen = s.grant.read("control").as_deref() == Some("control\n");
    if reported != seen {
        return s.interfered(if reported {
            format!(
                "the shell reported writing {} but the file is not what it wrote",
                control.display()
            )
        } else {
            format!(
                "{} holds what the probe's shell writes, but the shell did not report writing it \
                 (the command {evidence})",
                control.display()
            )
        });
    }
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
    let Some(opener) = opener else {
        let why = format!(
            "no perl or python3 in {} to make the open(2) calls the probe judges by their \
             errno (creating, overwriting and opening with O_RDONLY|O_TRUNC {}), so whether \
             writes outside write_paths are refused is not known",
            PROBE_PATH_DIRS.join(":"),
            s.outside.path.display()
        );
        checks.push(Check {
            role: CheckRole::PositiveControl,
            policy: brief.clone(),
            attempted: format!(
                "truncate {} (inside write_paths) by open(O_WRONLY|O_TRUNC)",
                s.grant.path.join(TRUNCATE_CONTROL).display()
            ),
            observed: why.clone(),
            ok: false,
        });
        return ProbeResult::Unwitnessed { why };
    };
    let opener_ran = || match run.code("opener") {
        Some(code) => format!("{} exited with status {code}", opener.name),
        None => format!("{} did not run to the end", opener.name),
    };

    let created = s.outside.path.join("created");
    let create = Attempt {
        attempted: format!("create {} outside write_paths ({brief})", created.display()),
        code: run.code("create"),
        // What a create that happened leaves; anything else there is another's.
        effect: match s.outside.read("created") {
            None => Effect::None,
            Some(c) if c == FORBIDDEN => Effect::Done(format!("the file was created with {c:?}")),
            Some(c) => Effect::Other(format!("{} holds {c:?}", created.display())),
        },
    };
    let existing = s.outside.path.join("existing");
    let overwrite = Attempt {
        attempted: format!(
            "overwrite {} outside write_paths ({brief})",
            existing.display()
        ),
        code: run.code("overwrite"),
        effect: match s.outside.read("existing") {
            Some(c) if c == ORIGINAL => Effect::None,
            Some(c) if c == FORBIDDEN => {
                Effect::Done(format!("the file's content changed to {c:?}"))
            }
            Some(c) => Effect::Other(format!("{} holds {c:?}", existing.display())),
            None => Effect::Other(format!("{} is gone", existing.display())),
        },
    };
    for attempt in [create, overwrite] {
        if let Some(verdict) = attempt.judge(s, &brief, &evidence, checks) {
            return verdict;
        }
    }

    // The read-only truncate leg: its positive control, then the deny.
    let control = s.grant.path.join(TRUNCATE_CONTROL);
    let emptied = s.grant.size(TRUNCATE_CONTROL) == Some(0);
    let control_code = run.code(TRUNCATE_CONTROL);
    if emptied != (control_code == Some("0")) {
        return s.interfered(format!(
            "{} reported open(O_WRONLY|O_TRUNC) of {} as {}, but the file is {}",
            opener.name,
            control.display(),
            control_code.unwrap_or("not made"),
            if emptied { "empty" } else { "not empty" }
        ));
    }
    checks.push(Check {
        role: CheckRole::PositiveControl,
        policy: brief.clone(),
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
                opener_ran(),
                control_code.unwrap_or("not recorded")
            )
        },
        ok: emptied,
    });
    if !emptied {
        return ProbeResult::Unwitnessed {
            why: format!(
                "positive control not seen: open(O_WRONLY|O_TRUNC) of {} inside write_paths \
                 with {} did not truncate it ({}; the command {evidence}), so an untouched \
                 file outside would prove nothing",
                control.display(),
                opener.name,
                opener_ran()
            ),
        };
    }
    let target = s.outside.path.join(RO_TRUNCATE);
    let truncate = Attempt {
        attempted: format!(
            "truncate {} outside write_paths by open(O_RDONLY|O_TRUNC) with {} ({brief})",
            target.display(),
            opener.name
        ),
        code: run.code(RO_TRUNCATE),
        effect: match (s.outside.size(RO_TRUNCATE), s.outside.read(RO_TRUNCATE)) {
            (Some(0), _) => Effect::Done(format!(
                "the file was truncated: 0 bytes, was {}",
                ORIGINAL.len()
            )),
            (_, Some(c)) if c == ORIGINAL => Effect::None,
            (_, Some(c)) => Effect::Other(format!("{} holds {c:?}", target.display())),
            (_, None) => Effect::Other(format!("{} is gone", target.display())),
        },
    };
    match truncate.judge(s, &brief, &evidence, checks) {
        Some(verdict) => verdict,
        None => ProbeResult::Witnessed,
    }
}

/// What a forbidden attempt's file shows after the launch.
enum Effect {
    /// Untouched.
    None,
    /// What the attempt does when it is let through.
    Done(String),
    /// Neither: some other process changed it.
    Other(String),
}

/// One forbidden write, as the opener reported it and as the file shows.
struct Attempt<'a> {
    attempted: String,
    /// 0 or the errno the opener reported.
    code: Option<&'a str>,
    effect: Effect,
}

impl Attempt<'_> {
    /// Records the check; returns a verdict unless the deny was witnessed.
    ///
    /// The verdict is the opener's word: its call succeeded (a failure: the
    /// backend let the write through), or was refused (`EACCES`, `EPERM`,
    /// `EROFS`). A file that shows otherwise than that word, or an errno no
    /// refusal gives here (`EEXIST`: a file was there before the exclusive
    /// create), is another process's doing: interfered.
    fn judge(
        self,
        s: &Scratch,
        brief: &str,
        evidence: &str,
        checks: &mut Vec<Check>,
    ) -> Option<ProbeResult> {
        let code = self.code.map(|c| c.parse::<i32>().unwrap_or(-1));
        let (ok, observed, verdict) = match (code, &self.effect) {
            (Some(0), Effect::Done(what)) => (
                false,
                what.clone(),
                Some(ProbeResult::Failed {
                    attempted: self.attempted.clone(),
                    observed: format!("{what} (open(2) succeeded)"),
                }),
            ),
            (Some(0), Effect::None | Effect::Other(_)) => {
                return Some(s.interfered(format!(
                    "{}: open(2) succeeded, but the file does not show what the call did",
                    self.attempted
                )))
            }
            (Some(c), _) if is_interference(c) => {
                return Some(s.interfered(format!(
                    "{}: open(2) failed with {}, which no refusal gives in the probe's own \
                     fresh directory",
                    self.attempted,
                    errno_text(c)
                )))
            }
            (Some(c), Effect::Done(what) | Effect::Other(what)) => {
                return Some(s.interfered(format!(
                    "{}: open(2) failed ({}), but {what}",
                    self.attempted,
                    if c > 0 { errno_text(c) } else { c.to_string() }
                )))
            }
            (Some(c), Effect::None) if is_refusal(c) => (
                true,
                format!(
                    "refused: open(2) failed with {} and nothing changed",
                    errno_text(c)
                ),
                None,
            ),
            (Some(c), Effect::None) => {
                let why = format!(
                    "open(2) failed with {}, which is no refusal",
                    if c > 0 { errno_text(c) } else { c.to_string() }
                );
                (
                    false,
                    why.clone(),
                    Some(ProbeResult::Unwitnessed {
                        why: format!("{}: {why}", self.attempted),
                    }),
                )
            }
            (None, _) => {
                let why = format!("the opener did not report the attempt (the command {evidence})");
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
    open_run: &Run,
    confined_run: Result<(Dir, String, Run), SetupError>,
    checks: &mut Vec<Check>,
) -> ProbeResult {
    let open_evidence = open_run.evidence();
    let open_child = s.grant.path.join("child");
    let reported = open_run.code("child-ran").is_some();
    let seen = s.grant.read("child").as_deref() == Some("child\n");
    if reported != seen {
        return s.interfered(format!(
            "with deny_subprocess false the forked child {} but {} {}",
            if reported {
                "reported running"
            } else {
                "did not report running"
            },
            open_child.display(),
            if seen {
                "holds what it writes"
            } else {
                "does not hold what it writes"
            }
        ));
    }
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

    let (confined, brief, run) = match confined_run {
        Ok(run) => run,
        Err(SetupError {
            why,
            interfered: Some(scratch),
        }) => {
            return ProbeResult::Interfered {
                scratch,
                observed: why,
            }
        }
        Err(SetupError {
            why,
            interfered: None,
        }) => return ProbeResult::Unwitnessed { why },
    };
    let evidence = run.evidence();
    let mark = confined.path.join("nofork");
    let reported = run.code("nofork") == Some("0");
    let alive = confined.read("nofork").as_deref() == Some("alive\n");
    if reported != alive {
        return s.interfered(format!(
            "under deny_subprocess true the shell {} writing {} but the file {}",
            if reported {
                "reported"
            } else {
                "did not report"
            },
            mark.display(),
            if alive {
                "holds what it writes"
            } else {
                "does not hold what it writes"
            }
        ));
    }
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

    let child = confined.path.join("child");
    let attempted = format!("fork a subshell that writes {} ({brief})", child.display());
    // The child's own word: it reports that it ran before it writes.
    let ran = run.code("child-ran").is_some();
    if !ran && confined.exists("child") {
        return s.interfered(format!(
            "{} exists, but no forked child reported running ({attempted})",
            child.display()
        ));
    }
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
            observed: format!(
                "the child ran (it reported so) and wrote {}",
                child.display()
            ),
        };
    }
    ProbeResult::Witnessed
}

/// Where probe scratch trees go when the caller names no trusted directory
/// ([`Scratch::in_base`]): the user's runtime directory (`/run/user/<euid>`,
/// or `/run` for root; never a place the environment names), else the
/// temporary directory. A run whose write paths reach that place (`-w /tmp`
/// for the temporary directory) can reach the scratch: the probe then holds
/// by judging the launches' own reports ([`Run`]), never the file system
/// alone. A probe that cannot create its tree fails (the gate then fails
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

fn cstring(name: &str) -> Result<CString, String> {
    CString::new(name).map_err(|_| format!("a name with a NUL byte: {name:?}"))
}

/// A directory of the probe's tree, held open: what the probe reads and
/// makes there is found through this fd (`openat`, `mkdirat`, never
/// following a link), so a path another process swaps leads nowhere.
pub(crate) struct Dir {
    /// Its path, for the policy and the messages.
    pub(crate) path: PathBuf,
    fd: File,
    /// Device and inode when made.
    id: (u64, u64),
}

impl Dir {
    /// Opens `name` beneath `parent` (a path when `parent` is `None`) as a
    /// directory, without following a link.
    fn open(parent: Option<&File>, path: PathBuf, name: &str) -> Result<Dir, String> {
        use std::os::fd::FromRawFd;
        use std::os::unix::fs::MetadataExt;
        let c = cstring(name)?;
        let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        let at = parent.map_or(libc::AT_FDCWD, |p| p.as_raw_fd());
        // SAFETY: a live dirfd (or AT_FDCWD) and a NUL-terminated name.
        let fd = unsafe { libc::openat(at, c.as_ptr(), flags) };
        if fd < 0 {
            return Err(format!(
                "cannot open the probe directory {}: {}",
                path.display(),
                std::io::Error::last_os_error()
            ));
        }
        // SAFETY: a fresh fd owned here alone.
        let fd = unsafe { File::from_raw_fd(fd) };
        let meta = fd
            .metadata()
            .map_err(|e| format!("cannot stat {}: {e}", path.display()))?;
        Ok(Dir {
            id: (meta.dev(), meta.ino()),
            path,
            fd,
        })
    }

    /// A new directory `name` in this one, mode 0700.
    pub(crate) fn make(&self, name: &str) -> Result<Dir, SetupError> {
        let c = cstring(name)?;
        let path = self.path.join(name);
        // SAFETY: a live dirfd, a NUL-terminated name and a mode.
        if unsafe { libc::mkdirat(self.fd.as_raw_fd(), c.as_ptr(), 0o700) } != 0 {
            let e = std::io::Error::last_os_error();
            return Err(self.failed(
                format!("cannot create probe directory {}: {e}", path.display()),
                &e,
            ));
        }
        // Just made: gone or replaced is another's doing.
        Dir::open(Some(&self.fd), path, name).map_err(|why| SetupError {
            why,
            interfered: Some(self.path.display().to_string()),
        })
    }

    /// A failed call in this directory, interfered with when its errno is one
    /// no refusal or shortage gives ([`is_interference`]).
    fn failed(&self, why: String, e: &std::io::Error) -> SetupError {
        SetupError {
            why,
            interfered: e
                .raw_os_error()
                .filter(|c| is_interference(*c))
                .map(|_| self.path.display().to_string()),
        }
    }

    /// A new directory `prefix` + a random name in this one, mode 0700.
    fn make_random(&self, prefix: &str) -> Result<Dir, SetupError> {
        use std::hash::{BuildHasher, Hasher};
        let mut last = String::new();
        for _ in 0..16 {
            // RandomState's keys come from the OS's random source.
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u128(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos()),
            );
            let name = format!("{prefix}{:016x}", h.finish());
            match self.make(&name) {
                Ok(dir) => return Ok(dir),
                Err(e) => last = e.why,
            }
        }
        // Not the probe's own tree yet: nothing to interfere with.
        Err(last.into())
    }

    fn open_file(&self, name: &str, flags: libc::c_int) -> std::io::Result<File> {
        use std::os::fd::FromRawFd;
        let c = CString::new(name).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
        let flags = flags | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        // SAFETY: a live dirfd, a NUL-terminated name, flags and a mode.
        let fd = unsafe { libc::openat(self.fd.as_raw_fd(), c.as_ptr(), flags, 0o600) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a fresh fd owned here alone.
        Ok(unsafe { File::from_raw_fd(fd) })
    }

    /// Creates the file `name` (it must not exist) holding `text`.
    pub(crate) fn write_new(&self, name: &str, text: &str) -> Result<(), SetupError> {
        use std::io::Write;
        self.open_file(name, libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL)
            .and_then(|mut f| f.write_all(text.as_bytes()))
            .map_err(|e| {
                self.failed(
                    format!(
                        "cannot create probe file {}: {e}",
                        self.path.join(name).display()
                    ),
                    &e,
                )
            })
    }

    /// The content of the regular file `name`, if it is one and is text (at most 4 KiB).
    pub(crate) fn read(&self, name: &str) -> Option<String> {
        use std::io::Read;
        let f = self
            .open_file(name, libc::O_RDONLY | libc::O_NONBLOCK)
            .ok()?;
        if !f.metadata().ok()?.is_file() {
            return None;
        }
        let mut text = String::new();
        f.take(4096).read_to_string(&mut text).ok()?;
        Some(text)
    }

    /// The size of the regular file `name`.
    pub(crate) fn size(&self, name: &str) -> Option<u64> {
        let f = self
            .open_file(name, libc::O_RDONLY | libc::O_NONBLOCK)
            .ok()?;
        let meta = f.metadata().ok()?;
        meta.is_file().then_some(meta.len())
    }

    /// Whether an entry `name` exists (a link not followed).
    pub(crate) fn exists(&self, name: &str) -> bool {
        self.names()
            .is_ok_and(|names| names.iter().any(|n| n == name))
    }

    /// The names in this directory but `.` and `..`.
    fn names(&self) -> Result<Vec<String>, String> {
        let fail = |e: std::io::Error| format!("cannot list {}: {e}", self.path.display());
        // SAFETY: dup of a live fd.
        let fd = unsafe { libc::fcntl(self.fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 0) };
        if fd < 0 {
            return Err(fail(std::io::Error::last_os_error()));
        }
        // SAFETY: fdopendir takes the fd (closed by closedir).
        let stream = unsafe { libc::fdopendir(fd) };
        if stream.is_null() {
            let e = std::io::Error::last_os_error();
            // SAFETY: the fd is still ours when fdopendir fails.
            unsafe { libc::close(fd) };
            return Err(fail(e));
        }
        // The copy shares the fd's offset: from the start, each time.
        // SAFETY: a live DIR stream.
        unsafe { libc::rewinddir(stream) };
        let mut out = Vec::new();
        loop {
            // SAFETY: a live DIR stream.
            let e = unsafe { libc::readdir(stream) };
            if e.is_null() {
                break;
            }
            // SAFETY: d_name is NUL-terminated in the entry readdir returned.
            let name = unsafe { std::ffi::CStr::from_ptr((*e).d_name.as_ptr()) };
            let name = name.to_string_lossy();
            if name != "." && name != ".." {
                out.push(name.into_owned());
            }
        }
        // SAFETY: the stream opened above, closed once.
        unsafe { libc::closedir(stream) };
        Ok(out)
    }

    /// `None` while its path still names this very directory, and it holds
    /// only entries named in `allowed`; else what changed.
    fn changed(&self, allowed: &[&str]) -> Option<String> {
        use std::os::unix::fs::MetadataExt;
        match std::fs::symlink_metadata(&self.path) {
            Ok(m) if m.is_dir() && (m.dev(), m.ino()) == self.id => {}
            Ok(_) => return Some(format!("{} was replaced", self.path.display())),
            Err(e) => return Some(format!("{} is gone ({e})", self.path.display())),
        }
        match self.names() {
            Ok(names) => names
                .into_iter()
                .find(|n| !allowed.contains(&n.as_str()))
                .map(|n| {
                    format!(
                        "{} appeared in {}, which the probe did not make",
                        n,
                        self.path.display()
                    )
                }),
            Err(e) => Some(e),
        }
    }
}

/// A fresh tree: `grant/` (the write path) and `outside/` (not one), in a
/// directory of a random name, mode 0700, made by fd and removed when dropped.
pub(crate) struct Scratch {
    root: Dir,
    pub(crate) grant: Dir,
    pub(crate) outside: Dir,
    /// Whether it lies in the caller's trusted directory (no confined run
    /// can write there).
    trusted: bool,
}

impl Scratch {
    /// In [`scratch_base`].
    #[cfg(test)]
    pub(crate) fn new() -> Result<Self, SetupError> {
        Self::in_base(None)
    }

    /// In `trusted`, a directory of this user's trusted state that every
    /// confined run write-denies (made, mode 0700, if missing; used only
    /// when it is a real directory of this user that no one else may
    /// write), else in [`scratch_base`].
    pub(crate) fn in_base(trusted: Option<&Path>) -> Result<Self, SetupError> {
        let (base, trusted) = match trusted.and_then(open_trusted) {
            Some(base) => {
                sweep_stale(&base);
                (base, true)
            }
            None => {
                let base = scratch_base();
                let base = std::fs::canonicalize(&base)
                    .map_err(|e| format!("cannot resolve {}: {e}", base.display()))?;
                (
                    Dir::open(None, base.clone(), &base.to_string_lossy())?,
                    false,
                )
            }
        };
        let root = base.make_random("sandbox-probe-").map_err(|e| {
            format!(
                "cannot create a temporary directory for the probe in {}: {}",
                base.path.display(),
                e.why
            )
        })?;
        let made = root
            .make("grant")
            .and_then(|grant| Ok((grant, root.make("outside")?)));
        match made {
            Ok((grant, outside)) => Ok(Scratch {
                root,
                grant,
                outside,
                trusted,
            }),
            Err(e) => {
                let _ = std::fs::remove_dir_all(&root.path);
                Err(e)
            }
        }
    }

    /// A step of the set-up failed with `why`: interfered with when the
    /// tree shows a change ([`Scratch::tampered`]).
    fn setup_failed(&self, why: String, confined: Option<&Dir>) -> SetupError {
        match self.tampered(confined) {
            Some(changed) => SetupError {
                why: format!("{why}: {changed}"),
                interfered: Some(self.root.path.display().to_string()),
            },
            None => why.into(),
        }
    }

    /// The verdict when what the launches reported and what the tree
    /// shows disagree: another process changed the tree.
    fn interfered(&self, observed: String) -> ProbeResult {
        ProbeResult::Interfered {
            scratch: self.root.path.display().to_string(),
            observed: if self.trusted {
                observed
            } else {
                format!(
                    "{observed} (the scratch lies in {}, which a run of this user allowed to \
                     write there can reach)",
                    self.root.path.parent().unwrap_or(Path::new("/")).display()
                )
            },
        }
    }

    /// What changed in the tree besides what the probes make, if anything:
    /// a directory replaced, or an entry the probe did not make.
    fn tampered(&self, confined: Option<&Dir>) -> Option<String> {
        let dirs: [(Option<&Dir>, &[&str]); 4] = [
            (Some(&self.root), &["grant", "outside"]),
            (
                Some(&self.grant),
                &["control", "child", TRUNCATE_CONTROL, "confined"],
            ),
            (Some(&self.outside), &["existing", RO_TRUNCATE, "created"]),
            (confined, &["nofork", "child"]),
        ];
        dirs.into_iter()
            .find_map(|(dir, allowed)| dir.and_then(|d| d.changed(allowed)))
    }

    /// The probe policy: `grant` writable, network open, timeout default.
    pub(crate) fn policy(&self, deny_subprocess: bool) -> Result<ResolvedPolicy, String> {
        SandboxPolicy {
            write_paths: vec![self.grant.path.to_string_lossy().into_owned()],
            deny_subprocess,
            ..SandboxPolicy::default()
        }
        .resolve(&ExpandContext::default())
        .map_err(|e| format!("cannot build the probe policy: {e}"))
    }

    pub(crate) fn brief(&self, deny_subprocess: bool) -> String {
        format!(
            "write_paths = [{}], deny_subprocess = {deny_subprocess}",
            self.grant.path.display()
        )
    }

    /// Runs `sh -c script sh <dir> <outside> <extra>...`, its stdout and
    /// stderr captured where only it and the probe can write ([`Capture`]).
    fn run_sh(
        &self,
        backend: &dyn Backend,
        policy: &ResolvedPolicy,
        script: &str,
        dir: &Path,
        extra: &[OsString],
    ) -> Result<(Run, Option<crate::launch::LaunchFacts>), String> {
        let mut argv: Vec<OsString> = vec![
            "/bin/sh".into(),
            "-c".into(),
            script.into(),
            "sh".into(),
            dir.into(),
            self.outside.path.clone().into(),
        ];
        argv.extend_from_slice(extra);
        let (stdout, stderr) = (Capture::new()?, Capture::new()?);
        let (ended, facts) = crate::launch::launch_with_facts(
            backend,
            policy,
            &Launch {
                argv: &argv,
                env: &minimal_env(),
                stdout: Sink::Capture(&stdout),
                stderr: Sink::Capture(&stderr),
                deadline: LAUNCH_DEADLINE,
            },
        );
        let reports = stdout
            .text()
            .lines()
            .filter_map(|l| {
                let (name, code) = l.trim().split_once(' ')?;
                Some((name.to_owned(), code.trim().to_owned()))
            })
            .collect();
        Ok((
            Run {
                ended,
                reports,
                stderr: stderr.text(),
            },
            facts,
        ))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // A link put in its place is removed, never followed.
        let _ = std::fs::remove_dir_all(&self.root.path);
    }
}

/// How old a scratch left in the trusted directory must be to be removed
/// by a later probe: one whose process was killed before it removed its
/// own (a live probe's is at most [`ATTEMPTS`] launch deadlines old).
const STALE: Duration = Duration::from_secs(600);

/// Removes the scratches older than [`STALE`] from the trusted directory
/// `base` (no confined run can write there, so what lies there is the
/// probes' own); at most 64 per call.
fn sweep_stale(base: &Dir) {
    let Ok(names) = base.names() else {
        return;
    };
    let now = std::time::SystemTime::now();
    for name in names
        .iter()
        .filter(|n| n.starts_with("sandbox-probe-"))
        .take(64)
    {
        let path = base.path.join(name);
        let old = std::fs::symlink_metadata(&path)
            .and_then(|m| m.modified())
            .is_ok_and(|t| now.duration_since(t).is_ok_and(|age| age > STALE));
        if old {
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}

/// The trusted directory `dir`, made (mode 0700) when missing; `None`
/// unless it is a real directory of this user that no one else may write.
fn open_trusted(dir: &Path) -> Option<Dir> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let _ = std::fs::DirBuilder::new().mode(0o700).create(dir);
    let path = std::fs::canonicalize(dir).ok()?;
    let d = Dir::open(None, path.clone(), &path.to_string_lossy()).ok()?;
    let meta = d.fd.metadata().ok()?;
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    (meta.is_dir() && meta.uid() == euid && meta.mode() & 0o022 == 0).then_some(d)
}

/// The file's content, if it exists and is text.
#[cfg_attr(not(feature = "conformance"), allow(dead_code))]
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
    use std::os::unix::process::ExitStatusExt;

    /// Runs `opener` unconfined on `grant outside`; its report lines.
    fn run_opener(opener: (&str, &Path, &str, &str), s: &Scratch) -> Vec<(String, String)> {
        let (name, path, flag, code) = opener;
        let out = std::process::Command::new(path)
            .args([flag, code])
            .arg(&s.grant.path)
            .arg(&s.outside.path)
            .env_clear()
            .output()
            .unwrap();
        assert!(out.status.success(), "{name}: {out:?}");
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| {
                let (n, c) = l.split_once(' ').unwrap();
                (n.to_owned(), c.to_owned())
            })
            .collect()
    }

    fn openers() -> Vec<(&'static str, PathBuf, &'static str, &'static str)> {
        [
            ("perl", "-e", PERL_OPENER),
            ("python3", "-ISc", PYTHON_OPENER),
        ]
        .into_iter()
        .filter_map(|(name, flag, code)| {
            let path = PROBE_PATH_DIRS
                .iter()
                .map(|d| Path::new(d).join(name))
                .find(|p| is_executable(p))?;
            Some((name, path, flag, code))
        })
        .collect()
    }

    /// Runs each opener unconfined: every call succeeds and reports 0, the
    /// exclusive create makes the file, the overwrite rewrites it and both
    /// truncating opens empty theirs. This is the claim the deny leg rests
    /// on: a read-only open with O_TRUNC truncates (open(2): "the file will
    /// be truncated to length 0" for O_TRUNC on a regular file; the access
    /// mode does not matter).
    #[test]
    fn unconfined_each_opener_does_every_call_and_reports_0() {
        let mut ran = Vec::new();
        for (name, path, flag, code) in openers() {
            let s = Scratch::new().unwrap();
            s.grant.write_new(TRUNCATE_CONTROL, ORIGINAL).unwrap();
            s.outside.write_new(RO_TRUNCATE, ORIGINAL).unwrap();
            s.outside.write_new("existing", ORIGINAL).unwrap();
            let reports = run_opener((name, &path, flag, code), &s);
            let names: Vec<&str> = reports.iter().map(|(n, _)| n.as_str()).collect();
            assert_eq!(
                names,
                ["create", "overwrite", TRUNCATE_CONTROL, RO_TRUNCATE],
                "{name}"
            );
            assert!(reports.iter().all(|(_, c)| c == "0"), "{name}: {reports:?}");
            assert_eq!(s.outside.read("created").as_deref(), Some(FORBIDDEN));
            assert_eq!(s.outside.read("existing").as_deref(), Some(FORBIDDEN));
            assert_eq!(s.grant.size(TRUNCATE_CONTROL), Some(0), "{name}");
            assert_eq!(s.outside.size(RO_TRUNCATE), Some(0), "{name}");
            ran.push(name);
        }
        // A host with neither makes the write probe unwitnessed (tested below), never green.
        assert!(
            !ran.is_empty(),
            "neither perl nor python3 in {PROBE_PATH_DIRS:?}"
        );
        eprintln!("openers tested: {ran:?}");
    }

    /// The opener reports a file already there as EEXIST (its create is
    /// exclusive: what another process planted is never taken for the
    /// opener's own write), and a missing file by its errno.
    #[test]
    fn an_opener_reports_the_errno_of_each_call() {
        for (name, path, flag, code) in openers() {
            let s = Scratch::new().unwrap();
            s.outside.write_new("created", "planted\n").unwrap();
            let reports = run_opener((name, &path, flag, code), &s);
            let code = |n: &str| reports.iter().find(|(k, _)| k == n).map(|(_, c)| c.clone());
            assert_eq!(code("create"), Some(libc::EEXIST.to_string()), "{name}");
            assert_eq!(code(RO_TRUNCATE), Some(libc::ENOENT.to_string()), "{name}");
            assert_eq!(s.outside.read("created").as_deref(), Some("planted\n"));
        }
    }

    fn run(reports: &[(&str, &str)]) -> Run {
        Run {
            ended: Ended::Exited {
                status: std::process::ExitStatus::from_raw(0),
            },
            reports: reports
                .iter()
                .map(|(n, c)| ((*n).to_owned(), (*c).to_owned()))
                .collect(),
            stderr: String::new(),
        }
    }

    #[test]
    fn without_an_opener_the_write_probe_is_unwitnessed() {
        let s = Scratch::new().unwrap();
        s.grant.write_new("control", "control\n").unwrap();
        let mut checks = Vec::new();
        let verdict = judge_write(&s, None, &run(&[("control", "0")]), &mut checks);
        let ProbeResult::Unwitnessed { why } = verdict else {
            panic!("{verdict:?}");
        };
        assert!(
            why.contains("no perl or python3") && why.contains("O_RDONLY|O_TRUNC"),
            "{why}"
        );
        assert_eq!(
            checks.iter().map(|c| (c.role, c.ok)).collect::<Vec<_>>(),
            [
                (CheckRole::PositiveControl, true),
                (CheckRole::PositiveControl, false)
            ]
        );
    }

    /// Every pairing of what the opener reported and what the file shows:
    /// only the opener's success is a failure, only its refusal with the
    /// file untouched a witnessed deny; a file that shows otherwise than
    /// the report, or EEXIST, is interference, whatever the file holds.
    #[test]
    fn an_attempt_is_judged_by_the_report_and_told_apart_from_interference() {
        let s = Scratch::new().unwrap();
        let judge = |code: Option<&str>, effect: Effect| {
            let mut checks = Vec::new();
            let verdict = Attempt {
                attempted: "create x".into(),
                code,
                effect,
            }
            .judge(&s, "brief", "exited with status 0", &mut checks);
            (verdict, checks)
        };
        let done = || Effect::Done("the file was created".into());
        let eacces = libc::EACCES.to_string();
        let eperm = libc::EPERM.to_string();
        let eexist = libc::EEXIST.to_string();
        // Refused and untouched: witnessed (positive control of the judge).
        for code in [&eacces, &eperm] {
            let (verdict, checks) = judge(Some(code), Effect::None);
            assert_eq!(verdict, None);
            assert!(
                checks[0].ok
                    && checks[0]
                        .observed
                        .starts_with("refused: open(2) failed with")
            );
        }
        // Let through: failed.
        let (verdict, _) = judge(Some("0"), done());
        assert!(
            matches!(verdict, Some(ProbeResult::Failed { .. })),
            "{verdict:?}"
        );
        // What only another process does: interfered, never failed.
        for (code, effect) in [
            (eacces.as_str(), done()),
            (eperm.as_str(), Effect::Other("x holds \"planted\"".into())),
            (eexist.as_str(), done()),
            (eexist.as_str(), Effect::None),
            ("0", Effect::None),
            ("0", Effect::Other("x holds \"planted\"".into())),
        ] {
            let (verdict, checks) = judge(Some(code), effect);
            assert!(
                matches!(&verdict, Some(ProbeResult::Interfered { scratch, .. }) if scratch.contains("sandbox-probe-")),
                "{code}: {verdict:?}"
            );
            assert!(checks.is_empty());
        }
        // Not reported: unwitnessed.
        let (verdict, _) = judge(None, Effect::None);
        assert!(matches!(verdict, Some(ProbeResult::Unwitnessed { .. })));
    }

    /// The scratch is made in the trusted directory when one is given
    /// (mode 0700, a random name), and the tree's check sees an entry the
    /// probe did not make and a directory replaced.
    #[test]
    fn the_scratch_lies_in_the_trusted_directory_and_notices_changes() {
        use std::os::unix::fs::PermissionsExt;
        let base = tempfile::tempdir().unwrap();
        let trusted = base.path().join("sandbox");
        let s = Scratch::in_base(Some(&trusted)).unwrap();
        let trusted = std::fs::canonicalize(&trusted).unwrap();
        assert!(s.trusted && s.root.path.parent() == Some(trusted.as_path()));
        assert_eq!(
            std::fs::metadata(&s.root.path)
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o700
        );
        assert_eq!(s.tampered(None), None, "control: nothing changed");
        std::fs::write(s.outside.path.join("planted"), "x").unwrap();
        let changed = s.tampered(None).unwrap();
        assert!(changed.contains("planted appeared"), "{changed}");
        std::fs::remove_file(s.outside.path.join("planted")).unwrap();
        std::fs::rename(&s.grant.path, s.root.path.join("moved")).unwrap();
        std::fs::create_dir(&s.grant.path).unwrap();
        let changed = s.tampered(None).unwrap();
        assert!(
            changed.contains("was replaced") || changed.contains("moved appeared"),
            "{changed}"
        );
        // A scratch left by a killed probe is swept once stale; a fresh one stays.
        let stale = trusted.join("sandbox-probe-0000000000000000");
        let fresh = trusted.join("sandbox-probe-1111111111111111");
        std::fs::create_dir_all(stale.join("grant")).unwrap();
        std::fs::create_dir(&fresh).unwrap();
        let long_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
        std::fs::File::open(&stale)
            .unwrap()
            .set_modified(long_ago)
            .unwrap();
        let _again = Scratch::in_base(Some(&trusted)).unwrap();
        assert!(!stale.exists() && fresh.exists());
        // A trusted directory others may write is not used.
        let open = base.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let s = Scratch::in_base(Some(&open)).unwrap();
        assert!(!s.trusted && !s.root.path.starts_with(&open));
    }
}
