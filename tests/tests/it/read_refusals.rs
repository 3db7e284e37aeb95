//! Reads the read denials refuse are visible (issue 41, "every refusal
//! visible"): in an observed run (`--report`, `--explain`) a read-only open
//! Landlock refuses beneath a read-deny path is named in the summary line
//! and the record, and a failure after it is a sandbox denial. Beside each,
//! its twin: an allowed read works and records nothing; a kernel answer
//! beneath the deny path (a missing file, a file the mode bits refuse, a
//! path through a file) is no refusal; a directory, which Landlock never
//! refuses, opens; and a default run (not observed) says nothing, as
//! before. As root (capabilities dropped) and as nobody.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sandbox_tests::{is_root, sandbox, sandbox_as_nobody, sandbox_lines, stderr};

/// Opens each case's path (relative to DIR, the working directory) with its
/// flags (a Python expression) and prints the errno (or `ok`), one line;
/// exits 1 when a case the denial refuses was among them and failed, as a
/// command that needed the file.
const SCRIPT: &str = r#"
import errno, json, os, sys
def code(p, flags):
    try:
        os.close(os.open(p, flags))
        return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]
cases = json.loads(sys.argv[1])
got = [code(p, eval(f, {"os": os})) for p, f in cases]
print(" ".join(got))
sys.exit(1 if "EACCES" in got[:1] else 0)
"#;

/// One open: path (relative to the scene's directory), flags, the answer
/// (the same observed or not), and the file a refusal of it names when
/// recorded (as root, as nobody).
struct Case {
    path: &'static str,
    flags: &'static str,
    answer: &'static str,
    recorded: [Option<&'static str>; 2],
}

const fn case(
    path: &'static str,
    flags: &'static str,
    answer: &'static str,
    recorded: [Option<&'static str>; 2],
) -> Case {
    Case {
        path,
        flags,
        answer,
        recorded,
    }
}

const RO: &str = "os.O_RDONLY";
const NO: [Option<&str>; 2] = [None, None];
const F: [Option<&str>; 2] = [Some("secret/f"), Some("secret/f")];

/// The denied reads first (the script exits 1 when the first fails), then
/// the kernel's own answers beneath the deny path, which are no refusal.
const DENIED: &[Case] = &[
    case("secret/f", RO, "EACCES", F),
    // By absolute path (the script's cwd is DIR; {dir} is replaced).
    case("{dir}/secret/f", RO, "EACCES", F),
    // Through a symlink outside the deny path: Landlock checks the file.
    case("link_in", RO, "EACCES", F),
    // A FIFO: refused before the open would wait (security_file_open
    // comes before the FIFO's own open).
    case(
        "secret/fifo",
        "os.O_RDONLY | os.O_NONBLOCK",
        "EACCES",
        [Some("secret/fifo"); 2],
    ),
    // O_NOATIME: root owns the file and may; nobody gets may_open's EPERM,
    // which comes before Landlock.
];
const NOATIME: [&Case; 2] = [
    &case("secret/f", "os.O_RDONLY | os.O_NOATIME", "EACCES", F),
    &case("secret/f", "os.O_RDONLY | os.O_NOATIME", "EPERM", NO),
];
const ANSWERED: &[Case] = &[
    case("ok", RO, "ok", NO),
    case("secret/missing", RO, "ENOENT", NO),
    // Mode 000, owned by root: the mode bits refuse it first (root has
    // no capability in the run).
    case("secret/locked", RO, "EACCES", NO),
    case("secret/f/x", RO, "ENOTDIR", NO),
    case("secret/f/", RO, "ENOTDIR", NO),
    case("secret", "os.O_RDONLY | os.O_DIRECTORY", "ok", NO),
    case("secret/f", "os.O_PATH", "ok", NO),
    // A symlink in the deny path to a file outside it: the file is read.
    case("secret/sym", RO, "ok", NO),
    case("secret/sym", "os.O_RDONLY | os.O_NOFOLLOW", "ELOOP", NO),
    case("secret/f", "os.O_RDONLY | os.O_DIRECTORY", "ENOTDIR", NO),
];

#[derive(Clone, Copy, Debug)]
enum As {
    Root,
    Nobody,
}

struct Scene {
    _dirs: (tempfile::TempDir, tempfile::TempDir),
    /// Holds `ok`, `secret/f`, `secret/locked` (mode 000).
    dir: PathBuf,
    /// A directory everyone may write: the write path and the report's place.
    w: PathBuf,
}

fn scene() -> Scene {
    let canonical = |t: &tempfile::TempDir| std::fs::canonicalize(t.path()).unwrap();
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (dir, w) = (canonical(&a), canonical(&b));
    let mode =
        |p: &Path, m: u32| std::fs::set_permissions(p, PermissionsExt::from_mode(m)).unwrap();
    mode(&dir, 0o755);
    mode(&w, 0o777);
    std::fs::create_dir(dir.join("secret")).unwrap();
    mode(&dir.join("secret"), 0o755);
    for (name, m) in [("ok", 0o644), ("secret/f", 0o644), ("secret/locked", 0o000)] {
        std::fs::write(dir.join(name), "x").unwrap();
        mode(&dir.join(name), m);
    }
    std::os::unix::fs::symlink("secret/f", dir.join("link_in")).unwrap();
    std::os::unix::fs::symlink("../ok", dir.join("secret/sym")).unwrap();
    let fifo =
        std::ffi::CString::new(dir.join("secret/fifo").as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo with a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    Scene {
        _dirs: (a, b),
        dir,
        w,
    }
}

/// The cases a run as `who` makes: the denied reads then the kernel's
/// answers (`denied`), or the answers alone.
fn cases(who: As, denied: bool) -> Vec<&'static Case> {
    let noatime = NOATIME[who as usize];
    let first: Vec<&Case> = if denied {
        DENIED.iter().chain([noatime]).collect()
    } else {
        Vec::new()
    };
    let mut all = first;
    all.extend(ANSWERED.iter());
    if !denied && noatime.recorded[0].is_none() {
        all.push(noatime);
    }
    all
}

/// `sandbox run ARGS --read-deny DIR/secret -- python3 -c SCRIPT CASES` in
/// DIR, as `who`.
fn run(who: As, s: &Scene, args: &[&str], cases: &[&Case]) -> Output {
    let dir = s.dir.to_str().unwrap();
    let json = serde_json::Value::from(
        cases
            .iter()
            .map(|c| serde_json::json!([c.path.replace("{dir}", dir), c.flags]))
            .collect::<Vec<_>>(),
    );
    let mut cmd: Command = match who {
        As::Root => sandbox(),
        As::Nobody => sandbox_as_nobody(),
    };
    cmd.arg("run")
        .args(args)
        .arg("--read-deny")
        .arg(s.dir.join("secret"))
        .args(["--", "/usr/bin/python3", "-c", SCRIPT])
        .arg(json.to_string())
        .env("HOME", "/nonexistent/sandbox-tests-home")
        .current_dir(&s.dir)
        .output()
        .expect("spawn sandbox (setpriv from util-linux for nobody)")
}

fn answers(cases: &[&Case]) -> String {
    cases.iter().map(|c| c.answer).collect::<Vec<_>>().join(" ")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn record(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Observed, with and without a write path: the denied reads are the
/// record's only refusals, each named with the file, and the failed run is
/// a sandbox denial whose summary line names the reads.
fn observed(who: As) {
    let s = scene();
    let report = s.w.join("r.json");
    let w = s.w.to_str().unwrap();
    let cases = cases(who, true);
    let mut want: Vec<String> = cases
        .iter()
        .filter_map(|c| c.recorded[who as usize])
        .map(|f| s.dir.join(f).display().to_string())
        .collect();
    want.sort();
    for extra in [&["-w", w][..], &[]] {
        let mut args = extra.to_vec();
        args.extend(["--report", report.to_str().unwrap()]);
        let out = run(who, &s, &args, &cases);
        let ctx = format!("{who:?} {extra:?}: {}", stderr(&out));
        assert_eq!(stdout(&out), answers(&cases), "{ctx}");
        assert_eq!(out.status.code(), Some(1), "{ctx}");
        let r = record(&report);
        assert_eq!(r["classification"]["class"], "sandbox_denial", "{ctx}\n{r}");
        let refused = r["mediation"]["refused"].as_array().unwrap();
        let mut got: Vec<String> = refused
            .iter()
            .map(|c| {
                assert_eq!(c["syscall"], "openat", "{ctx}\n{r}");
                assert_eq!(c["reason"], "beneath a read-deny path", "{ctx}\n{r}");
                c["target"].as_str().unwrap().to_owned()
            })
            .collect();
        got.sort();
        assert_eq!(got, want, "{ctx}\n{r}");
        let f = s.dir.join("secret/f").display().to_string();
        let line = format!("sandbox: refused {} file opens ({f}, ", want.len());
        assert!(
            sandbox_lines(&out)
                .iter()
                .any(|l| l.starts_with(&line) && l.contains(": read-denied)")),
            "{ctx}"
        );
    }
    // `--explain` lists them, and proposes nothing (a deny path).
    let out = run(who, &s, &["-w", w, "--explain"], &cases);
    let err = stderr(&out);
    assert_eq!(stdout(&out), answers(&cases), "{who:?}: {err}");
    assert!(
        err.contains("the sandbox refused something"),
        "{who:?}: {err}"
    );
    let f = s.dir.join("secret/f").display().to_string();
    assert!(
        err.contains(&format!("refused openat on {f}: beneath a read-deny path")),
        "{who:?}: {err}"
    );
    assert!(!err.contains("to admit it"), "{who:?}: {err}");
}

/// Twin: the kernel's answers beneath the deny path alone (a missing file,
/// mode bits, paths through a file, the directory, `O_PATH`, a symlink out
/// of it) and the allowed read: the same answers, nothing recorded.
fn observed_twin(who: As) {
    let s = scene();
    let report = s.w.join("r.json");
    let cases = cases(who, false);
    let args = [
        "-w",
        s.w.to_str().unwrap(),
        "--report",
        report.to_str().unwrap(),
    ];
    let out = run(who, &s, &args, &cases);
    let ctx = format!("{who:?}: {}", stderr(&out));
    assert_eq!(stdout(&out), answers(&cases), "{ctx}");
    assert_eq!(out.status.code(), Some(0), "{ctx}");
    let r = record(&report);
    assert_eq!(r["classification"]["class"], "ok", "{ctx}\n{r}");
    assert_eq!(
        r["mediation"]["refused"],
        serde_json::json!([]),
        "{ctx}\n{r}"
    );
    assert!(sandbox_lines(&out).is_empty(), "{ctx}");
}

/// Twin: not observed (no `--report`, no `--explain`), the same reads get
/// the same answers and nothing is said of them (the kernel refuses them
/// without the broker: default runs pay nothing for this), only the one
/// line after a failure saying that such refusals are not recorded.
fn unobserved(who: As) {
    let s = scene();
    let cases = cases(who, true);
    let out = run(who, &s, &["-w", s.w.to_str().unwrap()], &cases);
    let ctx = format!("{who:?}: {}", stderr(&out));
    assert_eq!(stdout(&out), answers(&cases), "{ctx}");
    assert_eq!(out.status.code(), Some(1), "{ctx}");
    assert_eq!(
        sandbox_lines(&out),
        vec![
            "sandbox: writes the kernel refused are not recorded in this mode; rerun with \
             --explain to see them"
        ],
        "{ctx}"
    );
}

/// A file the run makes in a directory on the way to a read-deny path (its
/// write path holds the deny path) cannot be read back: Landlock's read
/// rules there were made at launch, one per entry then present. Observed,
/// the refusal is recorded and says so; twin: a file made in a directory
/// that existed at launch reads back, nothing recorded; unobserved, the
/// same answers and nothing said.
fn made_beside(who: As) {
    let t = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(t.path()).unwrap();
    for d in [&dir, &dir.join("secret"), &dir.join("sub")] {
        std::fs::create_dir_all(d).unwrap();
        std::fs::set_permissions(d, PermissionsExt::from_mode(0o777)).unwrap();
    }
    let report = dir.join("sub/r.json");
    let script = "import errno, os\n\
                  def back(p):\n\
                  \x20   open(p, 'w').write('x')\n\
                  \x20   try:\n\
                  \x20       return open(p).read()\n\
                  \x20   except OSError as e:\n\
                  \x20       return errno.errorcode[e.errno]\n\
                  print(back('sub/kept'), back('made'))\n";
    let go = |extra: &[&str]| {
        let mut cmd: Command = match who {
            As::Root => sandbox(),
            As::Nobody => sandbox_as_nobody(),
        };
        cmd.arg("run")
            .arg("-w")
            .arg(&dir)
            .arg("--read-deny")
            .arg(dir.join("secret"))
            .args(extra)
            .args(["--", "/usr/bin/python3", "-c", script])
            .env("HOME", "/nonexistent/sandbox-tests-home")
            .current_dir(&dir)
            .output()
            .unwrap()
    };
    let out = go(&["--report", report.to_str().unwrap()]);
    let ctx = format!("{who:?}: {}", stderr(&out));
    assert_eq!(stdout(&out), "x EACCES", "{ctx}");
    let r = record(&report);
    let refused = r["mediation"]["refused"].as_array().unwrap();
    assert_eq!(refused.len(), 1, "{ctx}\n{r}");
    assert_eq!(
        refused[0]["target"],
        dir.join("made").to_str().unwrap(),
        "{r}"
    );
    assert!(
        refused[0]["reason"]
            .as_str()
            .unwrap()
            .starts_with("beneath a read-deny path's directory: made there during the run"),
        "{r}"
    );
    for f in ["made", "sub/kept", "sub/r.json"] {
        std::fs::remove_file(dir.join(f)).unwrap();
    }
    let out = go(&[]);
    let ctx = format!("{who:?}: {}", stderr(&out));
    assert_eq!(stdout(&out), "x EACCES", "{ctx}");
    assert!(sandbox_lines(&out).is_empty(), "{ctx}");
}

/// An exec of a file beneath a read-deny path is recorded as a read is;
/// the kernel's own answers are not: a file without an execute bit, a
/// missing one, the directory. Unobserved: the same answers, nothing said.
fn exec_denied(who: As) {
    let s = scene();
    sandbox_tests::copy_for_exec(Path::new("/bin/true"), &s.dir.join("secret/t"));
    std::fs::set_permissions(s.dir.join("secret/t"), PermissionsExt::from_mode(0o755)).unwrap();
    let report = s.w.join("e.json");
    let d = s.dir.display();
    let script = format!(
        "for p in {d}/secret/t {d}/secret/f {d}/secret/missing {d}/secret /bin/true; do \
         $p 2>/dev/null; printf '%s ' $?; done"
    );
    let go = |extra: &[&str]| {
        let mut cmd: Command = match who {
            As::Root => sandbox(),
            As::Nobody => sandbox_as_nobody(),
        };
        cmd.args(["run", "-w", s.w.to_str().unwrap(), "--read-deny"])
            .arg(s.dir.join("secret"))
            .args(extra)
            .args(["--", "/bin/sh", "-c", &script])
            .env("HOME", "/nonexistent/sandbox-tests-home")
            .current_dir(&s.dir)
            .output()
            .unwrap()
    };
    let out = go(&["--report", report.to_str().unwrap()]);
    let ctx = format!("{who:?}: {}", stderr(&out));
    assert_eq!(stdout(&out), "126 126 127 126 0", "{ctx}");
    let r = record(&report);
    let refused = r["mediation"]["refused"].as_array().unwrap();
    assert_eq!(refused.len(), 1, "{ctx}\n{r}");
    assert_eq!(refused[0]["syscall"], "execve", "{r}");
    let t = s.dir.join("secret/t").display().to_string();
    assert_eq!(refused[0]["target"], t.as_str(), "{r}");
    let out = go(&[]);
    assert_eq!(
        stdout(&out),
        "126 126 127 126 0",
        "{who:?}: {}",
        stderr(&out)
    );
    assert!(sandbox_lines(&out).is_empty(), "{who:?}: {}", stderr(&out));
}

/// Observed without a write path, the opens the filter refuses by their
/// flags go to the broker with the read-only ones: the same answers as
/// unobserved (EPERM; nothing truncated), now recorded; a read of an
/// allowed file and a write Landlock refuses are as before.
fn refused_forms(who: As) {
    let s = scene();
    let report = s.w.join("f.json");
    let ok = s.dir.join("ok");
    let script = format!(
        "import errno, os\n\
         def c(f, *a):\n\
         \x20   try:\n\
         \x20       os.close(os.open({ok:?}, f, *a))\n\
         \x20       return 'ok'\n\
         \x20   except OSError as e:\n\
         \x20       return errno.errorcode[e.errno]\n\
         print(c(os.O_RDONLY | os.O_TRUNC), c(3), c(os.O_WRONLY), c(os.O_RDONLY))\n"
    );
    let go = |extra: &[&str]| {
        let mut cmd: Command = match who {
            As::Root => sandbox(),
            As::Nobody => sandbox_as_nobody(),
        };
        cmd.args(["run", "--read-deny"])
            .arg(s.dir.join("secret"))
            .args(extra)
            .args(["--", "/usr/bin/python3", "-c", &script])
            .env("HOME", "/nonexistent/sandbox-tests-home")
            .current_dir(&s.dir)
            .output()
            .unwrap()
    };
    for extra in [&["--report", report.to_str().unwrap()][..], &[]] {
        let out = go(extra);
        let ctx = format!("{who:?} {extra:?}: {}", stderr(&out));
        assert_eq!(stdout(&out), "EPERM EPERM EACCES ok", "{ctx}");
        assert_eq!(std::fs::read(&ok).unwrap(), b"x", "{ctx}");
    }
    let r = record(&report);
    let refused = r["mediation"]["refused"].as_array().unwrap();
    assert_eq!(refused.len(), 2, "{r}");
}

#[test]
fn denied_reads_are_recorded_in_observed_runs_as_root() {
    observed(As::Root);
    observed_twin(As::Root);
    unobserved(As::Root);
    made_beside(As::Root);
    exec_denied(As::Root);
    refused_forms(As::Root);
}

#[test]
fn denied_reads_are_recorded_in_observed_runs_as_nobody() {
    assert!(
        is_root(),
        "this test runs the CLI as nobody through setpriv: run it as root (CI does)"
    );
    observed(As::Nobody);
    observed_twin(As::Nobody);
    unobserved(As::Nobody);
    made_beside(As::Nobody);
    exec_denied(As::Nobody);
    refused_forms(As::Nobody);
}

/// Creates each path (relative to the working directory) with
/// `O_RDWR|O_CREAT|O_EXCL` as git's lock files are, after making its
/// directory, and prints the errno (or `ok`) and whether the name exists
/// after (`+`, `-`); then `git init -q` of each repository argument, `ok`
/// or git's first error's reason; then reads each file of the third list.
const EXCL_SCRIPT: &str = r#"
import errno, os, subprocess, sys
got = []
for p in sys.argv[1].split():
    os.makedirs(os.path.dirname(p) or ".", exist_ok=True)
    try:
        os.close(os.open(p, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644))
        r = "ok"
    except OSError as e:
        r = errno.errorcode[e.errno]
    got.append(r + ("+" if os.path.lexists(p) else "-"))
for repo in sys.argv[2].split():
    out = subprocess.run(["git", "init", "-q", repo], capture_output=True, text=True)
    errs = [l for l in out.stderr.splitlines() if l.startswith(("error:", "fatal:"))]
    got.append("ok" if out.returncode == 0 else (errs or ["?: ?"])[0].split(": ")[-1].replace(" ", "_"))
for p in sys.argv[3].split():
    try:
        os.close(os.open(p, os.O_RDONLY))
        got.append("ok")
    except OSError as e:
        got.append(errno.errorcode[e.errno])
print(" ".join(got))
"#;

/// The exclusive creates of the first list, then the repositories.
const EXCL_PATHS: &str = "kept/.git/x.lock kept/y.lock fresh/.git/x.lock top.lock";
const EXCL_REPOS: &str = "kept/repo made";
const EXCL_READS: &str = "secret/f";

/// A brokered exclusive create is made once (the broker never performs a
/// call's side effect and then decides it again): with a read denial
/// beneath the workspace, an `O_RDWR|O_CREAT|O_EXCL` open, as git's lock
/// files are made, answers as the kernel does. Beneath a directory that
/// existed (a fresh `.git` included) it opens, as bare, and `git init`
/// works; a new entry directly in the workspace, an ancestor of the deny
/// path, has no READ_FILE (rule splitting): the kernel makes the file and
/// answers `EACCES`, and so does the broker, where it answered `EEXIST`
/// (`could not lock config file: File exists`) before. Twins: the same
/// calls bare, and in the same runs without the read denial, all open;
/// plain and observed (`--report`), as root and as nobody.
#[test]
fn an_exclusive_create_is_made_once_beside_a_read_denial() {
    let bare_answer = "ok+ ok+ ok+ ok+ ok ok ok";
    // The denial holds (its positive control): the secret is not read.
    let denied_answer = "ok+ ok+ EACCES+ EACCES+ ok Permission_denied EACCES";
    let whos: &[As] = if is_root() {
        &[As::Root, As::Nobody]
    } else {
        &[As::Nobody]
    };
    for &who in whos {
        for observed in [false, true] {
            for denial in [false, true] {
                let t = tempfile::tempdir().unwrap();
                let ws = std::fs::canonicalize(t.path()).unwrap();
                let mode = |p: &Path| {
                    std::fs::set_permissions(p, PermissionsExt::from_mode(0o777)).unwrap()
                };
                mode(&ws);
                for d in ["kept", "kept/repo", "secret"] {
                    std::fs::create_dir(ws.join(d)).unwrap();
                    mode(&ws.join(d));
                }
                std::fs::write(ws.join("secret/f"), "x").unwrap();
                let r = tempfile::tempdir().unwrap();
                mode(r.path());
                let report = r.path().join("report.json");
                // The same calls bare, in a copy of the scene.
                let b = tempfile::tempdir().unwrap();
                let bare_ws = std::fs::canonicalize(b.path()).unwrap();
                mode(&bare_ws);
                for d in ["kept", "kept/repo", "secret"] {
                    std::fs::create_dir(bare_ws.join(d)).unwrap();
                    mode(&bare_ws.join(d));
                }
                std::fs::write(bare_ws.join("secret/f"), "x").unwrap();
                let mut bare = match who {
                    As::Root => Command::new("/usr/bin/python3"),
                    As::Nobody => {
                        let mut c = Command::new("setpriv");
                        c.args([
                            "--reuid=65534",
                            "--regid=65534",
                            "--clear-groups",
                            "--",
                            "/usr/bin/python3",
                        ]);
                        c
                    }
                };
                let out = bare
                    .args(["-c", EXCL_SCRIPT, EXCL_PATHS, EXCL_REPOS, EXCL_READS])
                    .env("HOME", "/nonexistent/sandbox-tests-home")
                    .current_dir(&bare_ws)
                    .output()
                    .unwrap();
                assert_eq!(stdout(&out), bare_answer, "bare {who:?}: {}", stderr(&out));

                let mut cmd: Command = match who {
                    As::Root => sandbox(),
                    As::Nobody => sandbox_as_nobody(),
                };
                cmd.args(["run", "--mode", "workspace-write", "--workspace"])
                    .arg(&ws);
                if observed {
                    cmd.arg("--report").arg(&report);
                }
                if denial {
                    cmd.arg("--read-deny").arg(ws.join("secret"));
                }
                let out = cmd
                    .args(["--", "/usr/bin/python3", "-c", EXCL_SCRIPT, EXCL_PATHS])
                    .args([EXCL_REPOS, EXCL_READS])
                    .env("HOME", "/nonexistent/sandbox-tests-home")
                    .current_dir(&ws)
                    .output()
                    .unwrap();
                let want = if denial { denied_answer } else { bare_answer };
                assert_eq!(
                    stdout(&out),
                    want,
                    "{who:?} observed {observed} denial {denial}: {}",
                    stderr(&out)
                );
                // Never the broker's second look at a file it just made.
                assert!(!stdout(&out).contains("EEXIST"));
                assert!(!stderr(&out).contains("File exists"), "{}", stderr(&out));
            }
        }
    }
}
