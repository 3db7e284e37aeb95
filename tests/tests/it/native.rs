//! Runs that feel native: the standard streams reach the command untouched
//! (a terminal stays a terminal), and outcomes rest on the sandbox's own
//! records, never on what the command printed.

use std::io::Read;
use std::process::Stdio;
use std::time::{Duration, Instant};

use sandbox_tests::sandbox;

/// Runs `sandbox run extra -- sh -c script` with a pty as stdin, stdout and
/// stderr; returns what the terminal showed.
fn on_pty(extra: &[&str], script: &str) -> String {
    let (master, slave) = sandbox_tests::new_pty();
    let mut child = sandbox()
        .arg("run")
        .args(extra)
        .args(["--", "/bin/sh", "-c", script])
        .env("TERM", "xterm")
        .stdin(Stdio::from(slave.try_clone().unwrap()))
        .stdout(Stdio::from(slave.try_clone().unwrap()))
        .stderr(Stdio::from(slave))
        .spawn()
        .unwrap();
    let mut master = std::fs::File::from(master);
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
    // Everything the command wrote is in the pty's buffer by now.
    let mut seen = String::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    let fd = std::os::fd::AsRawFd::as_raw_fd(&master);
    while Instant::now() < deadline {
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        if unsafe { libc::poll(&mut pfd, 1, 100) } <= 0 {
            break;
        }
        let mut buf = [0u8; 4096];
        match master.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => seen.push_str(&String::from_utf8_lossy(&buf[..n])),
        }
    }
    seen
}

#[test]
fn a_terminal_stays_a_terminal() {
    let script = "test -t 0 && test -t 1 && test -t 2 && echo ALL-THREE-TTYS; \
                  ls --color=always -d / >/dev/null; ls --color=auto -d /";
    for extra in [&[][..], &["--explain"]] {
        let seen = on_pty(extra, script);
        assert!(seen.contains("ALL-THREE-TTYS"), "{extra:?}: {seen:?}");
        assert!(
            seen.contains("\u{1b}["),
            "colour survives ({extra:?}): {seen:?}"
        );
    }
    // Twin: with stdout a pipe, the command sees no terminal there.
    let out = sandbox()
        .args([
            "run",
            "--",
            "/bin/sh",
            "-c",
            "test -t 1 && echo TTY || echo PIPE",
        ])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "PIPE\n");
}

#[test]
fn a_refused_fork_is_a_sandbox_denial_naming_the_call() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("r.json");
    let out = sandbox()
        .args(["run", "--deny-subprocess", "--report"])
        .arg(&report)
        .args(["--", "/bin/sh", "-c", "/bin/true"])
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(v["classification"]["class"], "sandbox_denial", "{v}");
    let evidence = v["classification"]["evidence"].to_string();
    assert!(
        evidence.contains("clone") || evidence.contains("fork"),
        "{evidence}"
    );
    // Twin: the same command without the policy runs and is ok.
    let out = sandbox()
        .args(["run", "--report"])
        .arg(&report)
        .args(["--", "/bin/sh", "-c", "/bin/true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn the_commands_own_permission_denied_is_a_task_failure() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("r.json");
    let out = sandbox()
        .args(["run", "--report"])
        .arg(&report)
        .args([
            "--",
            "/bin/sh",
            "-c",
            "echo \"touch: cannot touch '/etc/x': Permission denied\" >&2; exit 1",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(v["classification"]["class"], "task_failure", "{v}");
}

/// CLI conventions: the command without `--`, `--timeout 0` naming the flag,
/// enum flags with their possible values, an empty program name as a shell
/// reports it, and a schema version in every JSON output.
#[test]
fn cli_conventions() {
    let out = sandbox()
        .args(["run", "/bin/echo", "-n", "no-dashes"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "no-dashes");
    let out = sandbox()
        .args(["run", "--timeout", "0", "--", "/bin/true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--timeout"));
    let help = sandbox().args(["run", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("landlock") && help.contains("seatbelt"),
        "{help}"
    );
    let out = sandbox().args(["run", "--", ""]).output().unwrap();
    assert_eq!(out.status.code(), Some(127));
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("r.json");
    sandbox()
        .args(["run", "--report"])
        .arg(&report)
        .args(["--", "/bin/true"])
        .output()
        .unwrap();
    let outputs = [
        std::fs::read(&report).unwrap(),
        sandbox().args(["check", "--json"]).output().unwrap().stdout,
        sandbox().args(["policy"]).output().unwrap().stdout,
        sandbox()
            .args(["profile", "--json"])
            .output()
            .unwrap()
            .stdout,
    ];
    for text in outputs {
        let v: serde_json::Value = serde_json::from_slice(&text).unwrap();
        assert_eq!(v["schema"], 1, "{v}");
    }
    // `--report -` writes the record to stdout.
    let out = sandbox()
        .args(["run", "--report", "-", "--", "/bin/true"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["classification"]["class"], "ok");
}

/// Errors in a policy built from flags name the flag typed, not the config
/// field behind it; the same request as `--policy-json` names that.
#[test]
fn policy_errors_name_the_flag_typed() {
    let cases: [(&[&str], &str); 5] = [
        (
            &["--read-deny", "/nonexistent-sandbox-test*"],
            "--read-deny",
        ),
        (
            &["-w", "/tmp", "--write-deny", "/tmp/nonexistent-x*q"],
            "--write-deny",
        ),
        (&["-w", "/nonexistent-sandbox-test"], "-w/--write"),
        (&["--timeout", "99999"], "--timeout 99999"),
        (&["--env-deny", ""], "--env-deny"),
    ];
    for (flags, named) in cases {
        let out = sandbox()
            .arg("run")
            .args(flags)
            .args(["--", "/bin/true"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{flags:?}: {stderr}");
        assert!(stderr.contains(named), "{flags:?}: {stderr}");
        assert!(
            !stderr.contains("_paths") && !stderr.contains("env_deny_names"),
            "{stderr}"
        );
    }
    let out = sandbox()
        .args([
            "run",
            "--policy-json",
            r#"{"read_deny_paths":["/nonexistent-sandbox-test*"]}"#,
        ])
        .args(["--", "/bin/true"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--policy-json") && stderr.contains("read_deny_paths"),
        "{stderr}"
    );
    // Twin: a good request runs.
    let out = sandbox()
        .args(["run", "--timeout", "5", "--", "/bin/true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
}

/// Shell completions and the man page are generated and well-formed.
#[test]
fn completions_and_man_page() {
    let out = sandbox().args(["completions", "bash"]).output().unwrap();
    assert!(out.status.success());
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("sandbox.bash");
    std::fs::write(&script, &out.stdout).unwrap();
    let check = std::process::Command::new("bash")
        .arg("-n")
        .arg(&script)
        .status()
        .unwrap();
    assert!(check.success(), "bash -n on the completion script");
    let bash = String::from_utf8_lossy(&out.stdout);
    assert!(bash.contains("--no-network"));
    // --mode offers its values, not file names.
    assert!(
        bash.contains("read-only workspace-write danger-full-access"),
        "the completions do not list the modes"
    );
    let man = sandbox().arg("man").output().unwrap();
    assert!(man.status.success());
    assert!(String::from_utf8_lossy(&man.stdout).contains(".TH sandbox 1"));
}
