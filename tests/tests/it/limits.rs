//! Resource limits on a whole run (`--memory`, `--pids`, `--cpu`): each
//! stops its runaway beside an allowed twin under the same limit; the
//! command cannot leave or raise its limits; where no cgroup holds a limit
//! (an unprivileged user here) the run is refused unless allowed, and the
//! record says the limit did not hold.
//!
//! Holding limits needs a cgroup the runner may create: these tests run as
//! root for enforcement (CI does) and as nobody for the refusal.

use std::path::Path;
use std::process::{Command, Output};

use sandbox_tests::{is_root, sandbox, sandbox_bin, sandbox_lines, stderr};

#[track_caller]
fn require_root() {
    assert!(
        is_root(),
        "limits are held by cgroups only root may create on this kind of host: run this suite as \
         root (CI does); the unprivileged refusal is tested as nobody from root"
    );
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `sandbox run ARGS --report R -- python3 -c SCRIPT`, and the record.
fn run_py(dir: &Path, args: &[&str], script: &str) -> (Output, serde_json::Value) {
    let report = dir.join("report.json");
    let _ = std::fs::remove_file(&report);
    let out = sandbox()
        .arg("run")
        .args(args)
        .arg("--report")
        .arg(&report)
        .args(["--", "/usr/bin/python3", "-c", script])
        .output()
        .unwrap();
    let text = std::fs::read_to_string(&report)
        .unwrap_or_else(|e| panic!("no record ({e}): {}", stderr(&out)));
    (out, serde_json::from_str(&text).unwrap())
}

/// Forks up to `n` sleeping children; prints how many it made.
fn forker(n: u32) -> String {
    format!(
        "import os, sys, time\n\
         made = 0\n\
         for _ in range({n}):\n\
         \x20   try:\n\
         \x20       pid = os.fork()\n\
         \x20   except OSError:\n\
         \x20       break\n\
         \x20   if pid == 0:\n\
         \x20       time.sleep(20)\n\
         \x20       os._exit(0)\n\
         \x20   made += 1\n\
         print('made', made, flush=True)\n\
         sys.exit(0 if made == {n} else 3)\n"
    )
}

fn made(out: &Output) -> u32 {
    stdout(out)
        .trim()
        .strip_prefix("made ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count: {}{}", stdout(out), stderr(out)))
}

fn limit<'a>(record: &'a serde_json::Value, kind: &str) -> &'a serde_json::Value {
    record["limits"]
        .as_array()
        .and_then(|l| l.iter().find(|l| l["kind"] == kind))
        .unwrap_or_else(|| panic!("no {kind} limit in {record}"))
}

/// `--pids 50` stops a fork bomb short of 50 processes, and the run is
/// classified by the limit. Twin: 30 forks fit under the same limit.
#[test]
fn pids_stop_a_fork_bomb() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let (out, record) = run_py(dir.path(), &["--pids", "50"], &forker(30));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(made(&out), 30);
    assert_eq!(record["classification"]["class"], "ok");
    assert_eq!(limit(&record, "pids")["hits"], 0);
    assert!(limit(&record, "pids")["held_by"].is_string());

    let (out, record) = run_py(dir.path(), &["--pids", "50"], &forker(500));
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(made(&out) < 50, "{} forks under --pids 50", made(&out));
    assert_eq!(record["classification"]["class"], "limit_exceeded");
    assert_eq!(record["classification"]["limit"], "pids");
    assert!(limit(&record, "pids")["hits"].as_u64() > Some(0));
    let lines = sandbox_lines(&out);
    assert!(
        lines
            .iter()
            .any(|l| l.contains("--pids 50") && l.contains("refused")),
        "{lines:?}"
    );
}

/// `--memory 64M` ends a runaway allocation, classified by the limit (the
/// process is killed: exit 137). Twin: 16 MiB fits.
#[test]
fn memory_stops_a_runaway_allocation() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let fits = "x = bytearray(16 << 20); x[::4096] = b'x' * len(x[::4096]); print('ok')";
    let (out, record) = run_py(dir.path(), &["--memory", "64M"], fits);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(record["classification"]["class"], "ok");
    assert_eq!(limit(&record, "memory")["hits"], 0);

    let runaway = "x = []\nwhile True:\n    b = bytearray(1 << 20); b[::4096] = b'x' * len(b[::4096]); x.append(b)";
    let (out, record) = run_py(dir.path(), &["--memory", "64M", "--timeout", "60"], runaway);
    assert_eq!(out.status.code(), Some(137), "{}", stderr(&out));
    assert_eq!(record["classification"]["class"], "limit_exceeded");
    assert_eq!(record["classification"]["limit"], "memory");
    assert!(limit(&record, "memory")["hits"].as_u64() > Some(0));
    assert!(sandbox_lines(&out)
        .iter()
        .any(|l| l.contains("--memory 64M")));
}

/// `--cpu 0.2` throttles a busy loop (the record counts throttled periods)
/// without ending it. Twin: the same loop unlimited is never throttled.
#[test]
fn cpu_throttles_without_ending() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let busy = "import time\nt = time.time()\nwhile time.time() - t < 0.6: pass\nprint(time.process_time())";
    let (out, record) = run_py(dir.path(), &["--cpu", "0.2"], busy);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(record["classification"]["class"], "ok");
    assert!(limit(&record, "cpu")["hits"].as_u64() > Some(0), "{record}");
    let used: f64 = stdout(&out).trim().parse().unwrap();
    assert!(used < 0.45, "{used} s of CPU in 0.6 s at 0.2 CPUs");
    let (out, record) = run_py(dir.path(), &["--cpu", "64"], busy);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(limit(&record, "cpu")["hits"], 0);
}

/// The command can neither raise its limit nor leave its group, as root,
/// even with the cgroup files world-writable to it otherwise. Twin: it is
/// in the run's group (its `/proc/self/cgroup` names it) and may read the
/// limit.
#[test]
fn a_command_cannot_raise_or_leave_its_limits() {
    require_root();
    let script = r#"
own=$(sed -n 's/^[0-9]*:pids:\(.*\)$/\1/p' /proc/self/cgroup)
case "$own" in */sandbox-run-*) echo "in $own";; *) echo "not in a run group: $own"; exit 9;; esac
base=$(awk '$3 == "cgroup" && $4 ~ /pids/ {print $2}' /proc/mounts)
cat "$base$own/pids.max"
echo max > "$base$own/pids.max" && echo RAISED
echo 0 > "$base/cgroup.procs" && echo LEFT
grep ":pids:" /proc/self/cgroup
"#;
    let out = sandbox()
        .args(["run", "--pids", "40", "--", "/bin/sh", "-c", script])
        .output()
        .unwrap();
    let text = stdout(&out);
    assert!(
        text.starts_with("in ") && text.contains("sandbox-run-"),
        "{text}{}",
        stderr(&out)
    );
    assert!(text.lines().any(|l| l == "40"), "{text}");
    assert!(!text.contains("RAISED"), "{text}");
    assert!(!text.contains("LEFT"), "{text}");
    assert!(
        text.lines().last().unwrap().contains("sandbox-run-"),
        "{text}"
    );
}

/// An operator's `[sandbox.limits]` is a ceiling: a request above it gets
/// the operator's limit. Twin: a request below it is kept.
#[test]
fn operator_limits_are_ceilings() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(&config, "[sandbox.limits]\npids = 40\n").unwrap();
    let c = config.to_str().unwrap();
    let (out, record) = run_py(dir.path(), &["--config", c, "--pids", "500"], &forker(100));
    assert!(made(&out) < 40, "{}", made(&out));
    assert_eq!(limit(&record, "pids")["requested"], "40");
    let (out, record) = run_py(dir.path(), &["--config", c, "--pids", "20"], &forker(100));
    assert!(made(&out) < 20, "{}", made(&out));
    assert_eq!(limit(&record, "pids")["requested"], "20");
    // Without a flag, the operator's limit applies.
    let (_, record) = run_py(dir.path(), &["--config", c], &forker(1));
    assert_eq!(limit(&record, "pids")["requested"], "40");
}

/// As nobody (no cgroup it may create here), a run with limits is refused
/// with one line naming the limit and the way out; with `--allow-unlimited`
/// it runs and its record says the limit did not hold. An operator's limit
/// is not dropped by the flag. Twin: the same run without limits runs.
#[test]
fn unheld_limits_refuse_the_run_unless_allowed() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let nobody = |args: &[&str]| {
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(sandbox_bin())
            .arg("run")
            .args(args)
            .env("HOME", dir.path())
            .current_dir(dir.path())
            .output()
            .expect("setpriv (util-linux) runs the CLI as nobody")
    };
    let out = nobody(&["--", "/bin/true"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    let out = nobody(&["--pids", "10", "--", "/bin/true"]);
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    let lines = sandbox_lines(&out);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("--pids 10") && lines[0].contains("--allow-unlimited"),
        "{lines:?}"
    );

    let report = dir.path().join("r.json");
    let r = report.to_str().unwrap();
    let out = nobody(&[
        "--pids",
        "10",
        "--allow-unlimited",
        "--report",
        r,
        "--",
        "/bin/true",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(sandbox_lines(&out)
        .iter()
        .any(|l| l.contains("ran without --pids 10")));
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert!(limit(&record, "pids")["held_by"].is_null(), "{record}");
    assert!(limit(&record, "pids")["not_held"].is_string(), "{record}");

    let config = dir.path().join("config.toml");
    std::fs::write(&config, "[sandbox.limits]\npids = 10\n").unwrap();
    let c = config.to_str().unwrap();
    let out = nobody(&["--config", c, "--allow-unlimited", "--", "/bin/true"]);
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    std::fs::write(
        &config,
        "[sandbox]\nallow_unlimited = true\n[sandbox.limits]\npids = 10\n",
    )
    .unwrap();
    let out = nobody(&["--config", c, "--", "/bin/true"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

/// `sandbox check` says what holds each limit here.
#[test]
fn check_reports_limit_support() {
    let out = sandbox().arg("check").output().unwrap();
    let text = stdout(&out);
    let line = text
        .lines()
        .find(|l| l.starts_with("limits: "))
        .unwrap_or_else(|| panic!("no limits line: {text}"));
    for flag in ["--memory", "--pids", "--cpu"] {
        assert!(line.contains(flag), "{line}");
    }
    if is_root() {
        assert!(!line.contains("not available"), "{line}");
    }
}
