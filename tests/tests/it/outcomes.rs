//! Honest outcomes: full enforcement on demand, and a record for every run
//! that got as far as parsing its input.

use sandbox_tests::{assert_exit, sandbox, sandbox_lines};

#[test]
fn require_full_refuses_a_partial_abi_and_runs_under_the_full_one() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let touch = format!("touch {}", marker.display());
    // ABI 5 lacks the signal scope: a named gap, so enforcement is partial.
    let out = sandbox()
        .env("SANDBOX_TEST_LANDLOCK_ABI", "5")
        .args(["run", "--require-full", "-w"])
        .arg(dir.path())
        .args(["--", "/bin/sh", "-c", &touch])
        .output()
        .unwrap();
    assert_exit(&out, 125);
    let lines = sandbox_lines(&out);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("SANDBOX_UNAVAILABLE") && lines[0].contains("signal"),
        "{lines:?}"
    );
    assert!(!marker.exists(), "nothing ran");
    // Twin: the same ABI without --require-full runs (partial is reported, not refused) ...
    let out = sandbox()
        .env("SANDBOX_TEST_LANDLOCK_ABI", "5")
        .args(["run", "-w"])
        .arg(dir.path())
        .args(["--", "/bin/sh", "-c", &touch])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(marker.exists());
    std::fs::remove_file(&marker).unwrap();
    // ... and the host's full ABI runs with --require-full.
    let out = sandbox()
        .args(["run", "--require-full", "-w"])
        .arg(dir.path())
        .args(["--", "/bin/sh", "-c", &touch])
        .output()
        .unwrap();
    assert_exit(&out, 0);
    assert!(marker.exists());
}

#[test]
fn a_run_that_cannot_be_applied_still_gets_a_record() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("outcome.json");
    for args in [
        // No backend: Seatbelt does not exist here.
        &["--backend", "seatbelt"][..],
        // Partial enforcement refused.
        &["--require-full"],
    ] {
        let _ = std::fs::remove_file(&report);
        let out = sandbox()
            .env("SANDBOX_TEST_LANDLOCK_ABI", "5")
            .arg("run")
            .args(args)
            .arg("--report")
            .arg(&report)
            .args(["--", "/bin/true"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(125), "{args:?}");
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
        assert_eq!(
            v["classification"]["class"], "runner_failure",
            "{args:?}: {v}"
        );
        assert!(v["classification"]["reason"]
            .as_str()
            .unwrap()
            .contains("SANDBOX_UNAVAILABLE"));
        assert_eq!(v["termination"]["code"], 125);
    }
    // A command that is not found: 127 and a runner_failure record too.
    let out = sandbox()
        .args(["run", "--report"])
        .arg(&report)
        .args(["--", "no-such-program-xyz"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(v["classification"]["class"], "runner_failure");
}

/// An op's env_passthrough is an allowlist byte for byte: PATH and the
/// listed names pass, everything else (a name that is not UTF-8 included)
/// does not.
#[test]
fn env_passthrough_keeps_path_and_only_the_listed_names() {
    use std::os::unix::ffi::OsStrExt;
    let ws = tempfile::tempdir().unwrap();
    let op = ws.path().join("op.json");
    std::fs::write(
        &op,
        r#"{"argv": ["/usr/bin/env"], "env_passthrough": ["KEEP_ME"]}"#,
    )
    .unwrap();
    let out = sandbox()
        .args(["exec-op", "--workspace"])
        .arg(ws.path())
        .arg("--op")
        .arg(&op)
        .env("KEEP_ME", "1")
        .env("DROP_ME", "1")
        .env(std::ffi::OsStr::from_bytes(b"BAD\xffNAME"), "1")
        .output()
        .unwrap();
    assert_exit(&out, 0);
    let env = out.stdout;
    let has = |n: &[u8]| env.split(|b| *b == b'\n').any(|l| l.starts_with(n));
    assert!(has(b"PATH="), "PATH always passes");
    assert!(has(b"KEEP_ME="));
    assert!(!has(b"DROP_ME="));
    assert!(!has(b"BAD\xffNAME="), "a non-UTF-8 name is never passed");
}

/// on_unsupported = ignore falls back silently (no warning line) and runs.
#[test]
fn on_unsupported_ignore_runs_without_a_word() {
    let out = sandbox()
        .args([
            "run",
            "--backend",
            "seatbelt",
            "--on-unsupported",
            "ignore",
            "--",
            "/bin/echo",
            "ran",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ran\n");
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("falling back"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// What the sandbox refused is said in one line on stderr after a command
/// that failed: for a refused connection and a refused write, never for a
/// clean run, and not with `--quiet`.
#[test]
fn a_refusal_is_summed_up_in_one_line_after_the_run() {
    let w = tempfile::tempdir().unwrap();
    let w = std::fs::canonicalize(w.path()).unwrap();
    let ws = w.to_str().unwrap().to_owned();
    let run = |extra: &[&str], script: &str| {
        sandbox()
            .args(["run", "--mode", "workspace-write", "--workspace", &ws])
            .args(extra)
            .args(["--", "/bin/sh", "-c", script])
            .env("HOME", "/nonexistent/sandbox-tests-home")
            .current_dir(&w)
            .output()
            .unwrap()
    };
    let summary = |out: &std::process::Output| {
        sandbox_lines(out)
            .into_iter()
            .filter(|l| l.starts_with("sandbox: refused"))
            .collect::<Vec<_>>()
    };
    // A write to a protected file: refused by the broker.
    let out = run(&[], "echo x > .bashrc; echo done; exit 1");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "done\n");
    let lines = summary(&out);
    assert_eq!(lines.len(), 1, "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        lines[0].contains("1 file change") && lines[0].contains(".bashrc"),
        "{lines:?}"
    );
    assert!(lines[0].ends_with("--explain for details"), "{lines:?}");
    // The line comes after everything the command printed.
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.trim_end().ends_with("--explain for details"), "{err}");
    // A connection to a name no rule lists, through the proxy.
    let out = run(
        &["--allow-net", "listed.example.test:443"],
        "curl -s -o /dev/null https://not-listed.example.test/; echo done; exit 1",
    );
    let lines = summary(&out);
    assert_eq!(lines.len(), 1, "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        lines[0].contains("1 connection (not-listed.example.test:443 not in --allow-net)"),
        "{lines:?}"
    );
    // Twin: a clean run says nothing, and --quiet keeps the line back.
    let out = run(&[], "echo x > ok; echo done");
    assert!(
        summary(&out).is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run(&["--quiet"], "echo x > .bashrc; echo done; exit 1");
    assert!(
        summary(&out).is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "done\n");
}

/// No noise after success: a command that got past a refusal and exited 0
/// prints nothing of the sandbox's (its output is untouched), while the
/// record under `--report` holds the refusal and `--explain` lists it.
/// Twin: the same refusal followed by a failure is summed up (above).
#[test]
fn a_successful_run_says_nothing_of_its_refusals_unless_asked() {
    let w = tempfile::tempdir().unwrap();
    let w = std::fs::canonicalize(w.path()).unwrap();
    let report = w.join("r.json");
    let run = |extra: &[&str]| {
        sandbox()
            .args(["run", "--mode", "workspace-write", "--workspace", "."])
            .args(extra)
            .args(["--", "/bin/sh", "-c", "echo x > .bashrc; echo done"])
            .env("HOME", "/nonexistent/sandbox-tests-home")
            .current_dir(&w)
            .output()
            .unwrap()
    };
    let out = run(&["--report", report.to_str().unwrap()]);
    assert_exit(&out, 0);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "done\n");
    assert!(sandbox_lines(&out).is_empty(), "{:?}", sandbox_lines(&out));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(v["classification"]["class"], "ok", "{v}");
    let refused = v["mediation"]["refused"].as_array().unwrap();
    assert!(
        refused
            .iter()
            .any(|c| c["target"] == w.join(".bashrc").display().to_string()),
        "{v}"
    );
    let out = run(&["--explain"]);
    assert_exit(&out, 0);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(".bashrc") && err.contains("refused"), "{err}");
}

/// A run the sandbox ends at its timeout says so in one `sandbox:` line,
/// with how to give it more (`--timeout N`, bounded by the operator's
/// `max_timeout_seconds`); at the operator's ceiling, that only the
/// operator can raise it. Twin: a run that ends in time says nothing.
#[test]
fn a_timeout_is_said_with_how_to_raise_it() {
    let lines = |extra: &[&str], secs: &str| {
        let out = sandbox()
            .arg("run")
            .args(extra)
            .args(["--", "/bin/sleep", secs])
            .output()
            .unwrap();
        (out.status.code(), sandbox_lines(&out))
    };
    let (code, said) = lines(&["--timeout", "1"], "30");
    assert_eq!(code, Some(124));
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(
        said[0].contains("timeout of 1 s")
            && said[0].contains("--timeout N")
            && said[0].contains("at most 600 s")
            && said[0].contains("max_timeout_seconds"),
        "{said:?}"
    );
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        "[sandbox.policy]\ntimeout_seconds = 1\nmax_timeout_seconds = 1\n",
    )
    .unwrap();
    let (code, said) = lines(&["--config", config.to_str().unwrap()], "30");
    assert_eq!(code, Some(124));
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(
        said[0].contains("timeout of 1 s") && said[0].contains("only the operator"),
        "{said:?}"
    );
    let (code, said) = lines(&["--timeout", "5"], "0");
    assert_eq!(code, Some(0));
    assert!(said.is_empty(), "{said:?}");
}

/// A run refused while its policy is resolved (a write path that does not
/// exist) still leaves a `runner_failure` record. Twin: a run that resolves
/// writes an ordinary record.
#[test]
fn a_run_refused_before_it_starts_still_gets_a_record() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("r.json");
    let out = sandbox()
        .args(["run", "--report"])
        .arg(&report)
        .args(["-w", "/nonexistent/sandbox-tests-w", "--", "/bin/true"])
        .output()
        .unwrap();
    assert_exit(&out, 125);
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(v["classification"]["class"], "runner_failure", "{v}");
    let reason = v["classification"]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("/nonexistent/sandbox-tests-w"), "{v}");
    let out = sandbox()
        .args(["run", "--report"])
        .arg(&report)
        .args(["--", "/bin/true"])
        .output()
        .unwrap();
    assert_exit(&out, 0);
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(v["classification"]["class"], "ok", "{v}");
}

/// Only policy refusals are evidence. bash without a controlling terminal
/// opens `/dev/tty` at start-up and the kernel answers `ENXIO`: a failing
/// `bash -c 'exit 3'` under `--report` (every writing open observed) is a
/// task failure with nothing refused. Twin: a write outside the write path,
/// then `exit 1`, is a sandbox denial with that refusal as evidence.
#[test]
fn a_kernel_answer_is_no_evidence_and_a_refusal_is() {
    let w = tempfile::tempdir().unwrap();
    let o = tempfile::tempdir().unwrap();
    let o = std::fs::canonicalize(o.path()).unwrap();
    let report = w.path().join("r.json");
    let run = |script: &str| {
        let out = sandbox()
            .args(["run", "--report"])
            .arg(&report)
            .arg("-w")
            .arg(w.path())
            .args(["--", "/bin/bash", "-c", script])
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
        (out, v)
    };
    let (out, v) = run("exit 3");
    assert_exit(&out, 3);
    assert_eq!(v["classification"]["class"], "task_failure", "{v}");
    assert_eq!(v["mediation"]["refused"], serde_json::json!([]), "{v}");
    assert!(sandbox_lines(&out).is_empty(), "{:?}", sandbox_lines(&out));

    let target = o.join("f");
    let (out, v) = run(&format!("echo x > {}; exit 1", target.display()));
    assert_exit(&out, 1);
    assert!(!target.exists());
    assert_eq!(v["classification"]["class"], "sandbox_denial", "{v}");
    let evidence = v["classification"]["evidence"].as_array().unwrap();
    assert_eq!(evidence.len(), 1, "{v}");
    let line = evidence[0].as_str().unwrap();
    assert!(
        line.contains(&target.display().to_string()) && line.contains("outside the write paths"),
        "{v}"
    );
    assert!(!line.contains("/dev/tty"), "{v}");
}

/// `/dev/tty` without a terminal, in a run's own session: reads get the
/// kernel's `ENXIO` (reads are not handled); writing opens are refused by
/// Landlock (`EACCES`) in a plain run, and answered `ENXIO` by the broker,
/// unrecorded, where it sees them (`--report`); as root and as nobody. The
/// alias is not granted to Landlock: a command can make a terminal it can
/// read its controlling one (see
/// `an_acquired_terminal_is_not_writable_through_dev_tty`). Twins: the same
/// opens bare (`setsid`) all answer `ENXIO`, and a write outside the write
/// path is refused (`EACCES`).
#[cfg(target_os = "linux")]
#[test]
fn dev_tty_without_a_terminal_answers_as_the_kernel_does() {
    let w = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        w.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let o = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        o.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let script = format!(
        "import os\nfor p, fl in (('/dev/tty', os.O_WRONLY), ('/dev/tty', os.O_RDWR), ('/dev/tty', os.O_RDONLY), ('{}', os.O_WRONLY | os.O_CREAT)):\n    try: os.open(p, fl); print('opened')\n    except OSError as e: print(e.errno)",
        o.path().join("f").display()
    );
    let bare = std::process::Command::new("setsid")
        .args(["/usr/bin/python3", "-c", &script])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let bare = String::from_utf8_lossy(&bare.stdout).into_owned();
    let enxio = libc::ENXIO.to_string();
    let eacces = libc::EACCES.to_string();
    assert_eq!(
        bare.lines().collect::<Vec<_>>(),
        [enxio.as_str(), &enxio, &enxio, "opened"],
        "bare"
    );
    let _ = std::fs::remove_file(o.path().join("f"));
    let report = w.path().join("r.json");
    for nobody in [false, true] {
        for observed in [false, true] {
            let mut cmd = if nobody {
                sandbox_tests::sandbox_as_nobody()
            } else {
                sandbox()
            };
            cmd.arg("run").arg("-w").arg(w.path());
            if observed {
                cmd.arg("--report").arg(&report);
            }
            let out = cmd
                .args(["--", "/usr/bin/python3", "-c", &script])
                .stdin(std::process::Stdio::null())
                .output()
                .unwrap();
            let ctx = format!("nobody={nobody} observed={observed}");
            assert_exit(&out, 0);
            let got = String::from_utf8_lossy(&out.stdout).into_owned();
            let write = if observed { &enxio } else { &eacces };
            assert_eq!(
                got.lines().collect::<Vec<_>>(),
                [write.as_str(), write, &enxio, &eacces],
                "{ctx}"
            );
            assert!(!o.path().join("f").exists(), "{ctx}");
            if observed {
                let record: serde_json::Value =
                    serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
                let mediation = record["mediation"].to_string();
                assert!(!mediation.contains("/dev/tty"), "{ctx}: {mediation}");
            }
        }
    }
}

/// A command that makes a terminal it can read its controlling one (as the
/// leader of its session, opening it without `O_NOCTTY`) still cannot write
/// to it through `/dev/tty`: the terminal here is a pty no session holds,
/// owned by the caller, open for reading only. Refused in a plain run
/// (Landlock) and in an observed one (the broker: a terminal that is not the
/// runner's own), as root and as nobody. Twin: the same script bare (under
/// `setsid`) writes through `/dev/tty` and the bytes reach the pty.
#[cfg(target_os = "linux")]
#[test]
fn an_acquired_terminal_is_not_writable_through_dev_tty() {
    let w = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        w.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let script = "import os, sys\nfd = os.open(sys.argv[1], os.O_RDONLY)\nprint('ctty' if int(open('/proc/self/stat').read().rsplit(')', 1)[1].split()[4]) else 'none', flush=True)\ntry:\n    t = os.open('/dev/tty', os.O_WRONLY); os.write(t, b'INJECTED'); print('wrote')\nexcept OSError as e: print(e.errno)";
    let report = w.path().join("r.json");
    for nobody in [false, true] {
        for run in ["bare", "plain", "observed"] {
            let (master, slave) = open_pty();
            if nobody {
                std::os::unix::fs::chown(&slave, Some(65534), Some(65534)).unwrap();
            }
            let mut cmd = match (run, nobody) {
                ("bare", false) => std::process::Command::new("setsid"),
                ("bare", true) => {
                    let mut c = std::process::Command::new("setpriv");
                    c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "setsid"]);
                    c
                }
                (_, true) => sandbox_tests::sandbox_as_nobody(),
                (_, false) => sandbox(),
            };
            if run != "bare" {
                cmd.arg("run").arg("-w").arg(w.path());
                if run == "observed" {
                    cmd.arg("--report").arg(&report);
                }
                cmd.arg("--");
            }
            let out = cmd
                .args(["/usr/bin/python3", "-c", script])
                .arg(&slave)
                .stdin(std::process::Stdio::null())
                .output()
                .unwrap();
            let ctx = format!("nobody={nobody} run={run}");
            let got = String::from_utf8_lossy(&out.stdout).into_owned();
            let got: Vec<&str> = got.lines().collect();
            // The positive control of the scene: the terminal was made the
            // command's controlling one.
            assert_eq!(got.first(), Some(&"ctty"), "{ctx}: {out:?}");
            let written = drain(&master);
            if run == "bare" {
                assert_eq!(got.get(1), Some(&"wrote"), "{ctx}");
                assert!(written.contains("INJECTED"), "{ctx}: {written:?}");
            } else {
                assert_eq!(
                    got.get(1),
                    Some(&libc::EACCES.to_string().as_str()),
                    "{ctx}"
                );
                assert!(!written.contains("INJECTED"), "{ctx}: {written:?}");
            }
        }
    }
}

/// A new pty: its master, and its slave's path (no session holds it).
#[cfg(target_os = "linux")]
fn open_pty() -> (std::os::fd::OwnedFd, std::path::PathBuf) {
    let (master, slave) = sandbox_tests::new_pty();
    let path = std::fs::read_link(format!(
        "/proc/self/fd/{}",
        std::os::fd::AsRawFd::as_raw_fd(&slave)
    ))
    .unwrap();
    (master, path)
}

/// What is waiting on a pty's master, without blocking.
#[cfg(target_os = "linux")]
fn drain(master: &std::os::fd::OwnedFd) -> String {
    use std::os::fd::AsRawFd;
    let fd = master.as_raw_fd();
    // SAFETY: fcntl on an fd we own.
    unsafe {
        libc::fcntl(
            fd,
            libc::F_SETFL,
            libc::fcntl(fd, libc::F_GETFL) | libc::O_NONBLOCK,
        )
    };
    let mut buf = [0u8; 4096];
    // SAFETY: read into a stack buffer of its length.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    String::from_utf8_lossy(&buf[..n.max(0) as usize]).into_owned()
}

/// `rmdir` of a protected directory that is not empty (`.git` under
/// workspace-write) answers `ENOTEMPTY`, as the kernel would, and is no
/// refusal. Twin: an empty protected directory (`.vscode`) is refused and
/// recorded, and stays.
#[test]
fn rmdir_of_a_full_protected_directory_is_enotempty_not_a_refusal() {
    let ws = tempfile::tempdir().unwrap();
    let ws = std::fs::canonicalize(ws.path()).unwrap();
    let git = std::process::Command::new("git")
        .args(["init", "-q"])
        .arg(&ws)
        .status()
        .unwrap();
    assert!(git.success());
    std::fs::create_dir(ws.join(".vscode")).unwrap();
    let report = ws.join("r.json");
    let script = "import os\n\
                  for p in ('.git', '.vscode'):\n\
                  \x20   try: os.rmdir(p); print(p, 'removed')\n\
                  \x20   except OSError as e: print(p, e.errno)\n";
    let out = sandbox()
        .args(["run", "--mode", "workspace-write", "--workspace", "."])
        .arg("--report")
        .arg(&report)
        .args(["--", "/usr/bin/python3", "-c", script])
        .current_dir(&ws)
        .output()
        .unwrap();
    assert_exit(&out, 0);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!(".git {}\n.vscode {}\n", libc::ENOTEMPTY, libc::EACCES)
    );
    assert!(ws.join(".git/HEAD").exists() && ws.join(".vscode").is_dir());
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let refused = v["mediation"]["refused"].as_array().unwrap();
    assert_eq!(refused.len(), 1, "{v}");
    assert_eq!(
        refused[0]["target"],
        ws.join(".vscode").display().to_string()
    );
}
