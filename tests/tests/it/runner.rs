//! The runner through the real binary: exit codes, process-tree cleanup,
//! environment scrub, and refusal of bad input before anything runs.

use std::path::Path;
use std::time::Duration;

use sandbox_tests::{assert_exit, run, sandbox, sandbox_lines};

/// Backend flags for runner tests: the real one for this host, failing if absent.
const BACKEND: &[&str] = &["--backend", "auto", "--on-unsupported", "error"];

fn run_cmd(extra: &[&str], argv: &[&str]) -> std::process::Output {
    let mut args = vec!["run"];
    args.extend_from_slice(BACKEND);
    args.extend_from_slice(extra);
    args.push("--");
    args.extend_from_slice(argv);
    run(&args)
}

#[test]
fn exit_codes_follow_the_shell() {
    let cases: &[(&[&str], i32)] = &[
        (&["/bin/true"], 0),
        (&["/bin/false"], 1),
        (&["/bin/sh", "-c", "exit 7"], 7),
        (&["/bin/sh", "-c", "kill -TERM $$"], 128 + 15),
        (&["/definitely/not/here"], 127),
        (&["no-such-program-xyz"], 127),
    ];
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("not-executable");
    std::fs::write(&plain, "#!/bin/sh\n").unwrap();
    let plain = plain.to_str().unwrap();
    let dir_path = dir.path().to_str().unwrap();
    let not_exec: &[(&[&str], i32)] = &[(&[plain], 126), (&[dir_path], 126)];
    for (argv, code) in cases.iter().chain(not_exec) {
        let out = run_cmd(&[], argv);
        assert_eq!(
            out.status.code(),
            Some(*code),
            "{argv:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = run_cmd(&["--timeout", "1"], &["/bin/sleep", "30"]);
    assert_eq!(out.status.code(), Some(124));
}

fn pid_alive(pid: i32) -> bool {
    // Zombies are dead for our purpose.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z'),
        Err(_) => false,
    }
}

fn read_pid(path: &Path) -> i32 {
    for _ in 0..100 {
        if let Some(pid) = std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            return pid;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("{} never written", path.display());
}

/// A grandchild that escapes into its own session and sleeps.
fn double_fork_script(pidfile: &Path, tail: &str) -> String {
    format!(
        "(setsid /bin/sh -c 'echo $$ > {}; exec sleep 300' &) ; {tail}",
        pidfile.display()
    )
}

#[test]
fn double_forked_descendant_is_gone_after_normal_exit() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let script = double_fork_script(
        &pidfile,
        &format!("while [ ! -s {} ]; do sleep 0.01; done", pidfile.display()),
    );
    let w = dir.path().to_str().unwrap();
    let out = run_cmd(&["-w", w], &["/bin/sh", "-c", &script]);
    assert_exit(&out, 0);
    let pid = read_pid(&pidfile);
    assert!(!pid_alive(pid), "descendant {pid} outlived the run");
}

#[test]
fn double_forked_descendant_is_gone_after_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let script = double_fork_script(&pidfile, "sleep 300");
    let w = dir.path().to_str().unwrap();
    let out = run_cmd(&["-w", w, "--timeout", "1"], &["/bin/sh", "-c", &script]);
    assert_exit(&out, 124);
    let pid = read_pid(&pidfile);
    assert!(!pid_alive(pid), "descendant {pid} outlived the timeout");
}

#[test]
fn env_denial_by_name_and_glob() {
    let out = sandbox()
        .args(["run"])
        .args(BACKEND)
        .args([
            "--env-deny",
            "SECRET_TOKEN",
            "--env-deny",
            "AWS_*",
            "--",
            "/usr/bin/env",
        ])
        .env("SECRET_TOKEN", "x")
        .env("AWS_KEY_ID", "y")
        .env("AWS_REGION", "z")
        .env("KEEP_ME", "k")
        .output()
        .unwrap();
    let env = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    // Positive control: an undenied variable arrives.
    assert!(env.lines().any(|l| l == "KEEP_ME=k"), "{env}");
    for gone in ["SECRET_TOKEN=", "AWS_KEY_ID=", "AWS_REGION="] {
        assert!(
            !env.lines().any(|l| l.starts_with(gone)),
            "{gone} leaked: {env}"
        );
    }
}

/// Runs `args`; asserts exit 125, exactly one `sandbox:` line containing `needle`, and that
/// the command (which would create `marker`) never ran.
fn refused(args: &[&str], marker: &Path, needle: &str) {
    let out = run(args);
    let lines = sandbox_lines(&out);
    assert_eq!(out.status.code(), Some(125), "{args:?}: {lines:?}");
    assert_eq!(lines.len(), 1, "{args:?}: {lines:?}");
    assert!(
        lines[0].contains(needle),
        "{args:?}: {lines:?} lacks {needle:?}"
    );
    assert!(!marker.exists(), "{args:?}: the command ran");
}

#[test]
fn bad_input_runs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let touch = format!("touch {}", marker.display());
    let cfg = |name: &str, body: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, body).unwrap();
        p.to_str().unwrap().to_owned()
    };
    let unknown = cfg(
        "unknown.toml",
        "[sandbox]\nbackend = \"noop\"\nbakend = \"x\"\n",
    );
    refused(
        &["run", "--config", &unknown, "--", "/bin/sh", "-c", &touch],
        &marker,
        "bakend",
    );
    let relative = cfg(
        "relative.toml",
        "[sandbox.policy]\nwrite_paths = [\"relative/dir\"]\n",
    );
    refused(
        &["run", "--config", &relative, "--", "/bin/sh", "-c", &touch],
        &marker,
        "relative/dir",
    );
    let missing = dir.path().join("missing");
    refused(
        &[
            "run",
            "--backend",
            "noop",
            "-w",
            missing.to_str().unwrap(),
            "--",
            "/bin/sh",
            "-c",
            &touch,
        ],
        &marker,
        "missing",
    );
    refused(
        &[
            "run",
            "--backend",
            "noop",
            "--timeout",
            "601",
            "--",
            "/bin/sh",
            "-c",
            &touch,
        ],
        &marker,
        "601",
    );
    let op = cfg(
        "op.json",
        &format!("{{\"argv\": [\"/bin/sh\", \"-c\", \"{touch}\"], \"netwrk\": true}}"),
    );
    refused(
        &["exec-op", "--backend", "noop", "--op", &op],
        &marker,
        "netwrk",
    );
    let op = cfg("op2.json", "{\"argv\": [\"/bin/true\"");
    refused(
        &["exec-op", "--backend", "noop", "--op", &op],
        &marker,
        "op JSON",
    );
    let op = cfg(
        "op3.json",
        &format!("{{\"argv\": [\"/bin/sh\", \"-c\", \"{touch}\"], \"timeout_seconds\": 900}}"),
    );
    refused(
        &["exec-op", "--backend", "noop", "--op", &op],
        &marker,
        "900",
    );
}

#[test]
fn report_records_the_outcome() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("outcome.json");
    let out = run_cmd(
        &["--report", report.to_str().unwrap()],
        &["/bin/sh", "-c", "echo oops >&2; exit 3"],
    );
    assert_eq!(out.status.code(), Some(3));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(v["termination"]["code"], 3);
    assert_eq!(v["classification"]["class"], "task_failure");
    assert_eq!(v["timed_out"], false);
    assert!(v["report"]["axes"].is_array(), "{v}");
}
