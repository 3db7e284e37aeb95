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

use sandbox_tests::{sandbox, sandbox_as_nobody, sandbox_lines};

/// Opens each path the way its name says and prints the errno (or `ok`):
/// the allowed file, the denied one by absolute and relative path, a
/// missing file, a file the mode bits refuse, a path through the denied
/// file, the denied directory (`O_DIRECTORY`), the denied file `O_PATH`.
/// Exits 1 when the denied read failed, as a command that needed it.
const SCRIPT: &str = r#"
import errno, os, sys
def code(p, flags=os.O_RDONLY):
    try:
        os.close(os.open(p, flags))
        return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]
d = sys.argv[1]
got = [
    code(d + "/ok"),
    code(d + "/secret/f"),
    code("secret/f"),
    code(d + "/secret/missing"),
    code(d + "/secret/locked"),
    code(d + "/secret/f/x"),
    code(d + "/secret", os.O_RDONLY | os.O_DIRECTORY),
    code(d + "/secret/f", os.O_PATH),
]
print(" ".join(got))
sys.exit(0 if got[1] == "ok" else 1)
"#;

/// What [`SCRIPT`] prints under the read denial, observed or not.
const EXPECTED: &str = "ok EACCES EACCES ENOENT EACCES ENOTDIR ok ok";

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
    Scene {
        _dirs: (a, b),
        dir,
        w,
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// `sandbox run ARGS --read-deny DIR/secret -- python3 -c SCRIPT DIR` in DIR, as `who`.
fn run(who: As, s: &Scene, args: &[&str]) -> Output {
    let mut cmd: Command = match who {
        As::Root => sandbox(),
        As::Nobody => sandbox_as_nobody(),
    };
    cmd.arg("run")
        .args(args)
        .arg("--read-deny")
        .arg(s.dir.join("secret"))
        .args(["--", "/usr/bin/python3", "-c", SCRIPT])
        .arg(&s.dir)
        .env("HOME", "/nonexistent/sandbox-tests-home")
        .current_dir(&s.dir)
        .output()
        .expect("spawn sandbox (setpriv from util-linux for nobody)")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn record(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Observed, with and without a write path: the two denied reads (by
/// absolute and relative path) are the record's only refusals, each named
/// with the file, and the failed run is a sandbox denial whose summary line
/// names the read.
fn observed(who: As) {
    let s = scene();
    let report = s.w.join("r.json");
    let w = s.w.to_str().unwrap();
    let denied = s.dir.join("secret/f").display().to_string();
    for extra in [&["-w", w][..], &[]] {
        let mut args = extra.to_vec();
        args.extend(["--report", report.to_str().unwrap()]);
        let out = run(who, &s, &args);
        let ctx = format!("{who:?} {extra:?}: {}", stderr(&out));
        assert_eq!(stdout(&out), EXPECTED, "{ctx}");
        assert_eq!(out.status.code(), Some(1), "{ctx}");
        let r = record(&report);
        assert_eq!(r["classification"]["class"], "sandbox_denial", "{ctx}\n{r}");
        let refused = r["mediation"]["refused"].as_array().unwrap();
        assert_eq!(refused.len(), 2, "{ctx}\n{r}");
        for c in refused {
            assert_eq!(c["syscall"], "openat", "{ctx}\n{r}");
            assert_eq!(c["target"], denied.as_str(), "{ctx}\n{r}");
            assert_eq!(c["reason"], "beneath a read-deny path", "{ctx}\n{r}");
        }
        let lines = sandbox_lines(&out);
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("sandbox: refused 2 file reads (")
                    && l.contains(&format!("{denied}: read-denied"))),
            "{ctx}"
        );
    }
    // `--explain` lists it, and proposes nothing (a deny path).
    let out = run(who, &s, &["-w", w, "--explain"]);
    let err = stderr(&out);
    assert_eq!(stdout(&out), EXPECTED, "{who:?}: {err}");
    assert!(
        err.contains("the sandbox refused something"),
        "{who:?}: {err}"
    );
    assert!(
        err.contains(&format!(
            "refused openat on {denied}: beneath a read-deny path"
        )),
        "{who:?}: {err}"
    );
    assert!(!err.contains("to admit it"), "{who:?}: {err}");
}

/// Twin: the same run but for the denied reads succeeds and records
/// nothing (the allowed read, the kernel's own answers beneath the deny
/// path, the directory and the `O_PATH` open are no refusals).
fn observed_twin(who: As) {
    let s = scene();
    let report = s.w.join("r.json");
    let script = SCRIPT.replace("sys.exit(0 if got[1] == \"ok\" else 1)", "");
    let script = script.replace(
        "    code(d + \"/secret/f\"),\n    code(\"secret/f\"),\n",
        "",
    );
    let mut cmd: Command = match who {
        As::Root => sandbox(),
        As::Nobody => sandbox_as_nobody(),
    };
    let out = cmd
        .args(["run", "-w", s.w.to_str().unwrap(), "--report"])
        .arg(&report)
        .arg("--read-deny")
        .arg(s.dir.join("secret"))
        .args(["--", "/usr/bin/python3", "-c", &script])
        .arg(&s.dir)
        .env("HOME", "/nonexistent/sandbox-tests-home")
        .current_dir(&s.dir)
        .output()
        .unwrap();
    let ctx = format!("{who:?}: {}", stderr(&out));
    assert_eq!(stdout(&out), "ok ENOENT EACCES ENOTDIR ok ok", "{ctx}");
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
/// the same answers and nothing is said (the kernel refuses them without
/// the broker: default runs pay nothing for this).
fn unobserved(who: As) {
    let s = scene();
    let out = run(who, &s, &["-w", s.w.to_str().unwrap()]);
    let ctx = format!("{who:?}: {}", stderr(&out));
    assert_eq!(stdout(&out), EXPECTED, "{ctx}");
    assert_eq!(out.status.code(), Some(1), "{ctx}");
    assert!(sandbox_lines(&out).is_empty(), "{ctx}");
}

#[test]
fn denied_reads_are_recorded_in_observed_runs_as_root() {
    observed(As::Root);
    observed_twin(As::Root);
    unobserved(As::Root);
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
}
