//! What a harness wrapping `sandbox` relies on: the record on a descriptor
//! of its own (`--report-fd`), `exec-op`'s `{{workspace}}` without
//! `--workspace`, and the manual pages. Each beside its twin.

use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use sandbox_tests::{assert_exit, sandbox, sandbox_lines};

/// `cmd` with `file` as its descriptor 3.
fn with_fd3(cmd: &mut Command, file: &std::fs::File) {
    let fd = file.as_raw_fd();
    // SAFETY: dup2 is async-signal-safe; the closure allocates nothing.
    // The new descriptor 3 is not close-on-exec.
    unsafe {
        cmd.pre_exec(move || {
            // dup2 onto itself keeps close-on-exec: clear it then.
            let ok = if fd == 3 {
                libc::fcntl(3, libc::F_SETFD, 0) == 0
            } else {
                libc::dup2(fd, 3) == 3
            };
            if !ok {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

fn record(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not one JSON record ({e}): {text}"))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `--report-fd 3`: the record goes to descriptor 3, the command's stdout
/// stays its own, and the command does not get descriptor 3 (its write
/// there fails). Twin: `--report FILE` writes the same record and leaves
/// the same stdout.
#[test]
fn report_fd_gets_the_record_and_stdout_stays_clean() {
    let dir = tempfile::tempdir().unwrap();
    let script = "echo out; echo leaked >&3 || echo 'no fd 3'";
    let via_fd = dir.path().join("via-fd.json");
    let file = std::fs::File::create(&via_fd).unwrap();
    let mut cmd = sandbox();
    cmd.args(["run", "--report-fd", "3", "--", "/bin/sh", "-c", script])
        .stdin(Stdio::null());
    with_fd3(&mut cmd, &file);
    let out = cmd.output().unwrap();
    drop(file);
    assert_exit(&out, 0);
    assert_eq!(text(&out.stdout), "out\nno fd 3\n", "{}", text(&out.stderr));
    // One JSON record and nothing else (the command's write to 3 failed).
    let by_fd = record(&std::fs::read_to_string(&via_fd).unwrap());
    // Twin: the same run with --report FILE.
    let via_file = dir.path().join("via-file.json");
    let out = sandbox()
        .args(["run", "--report"])
        .arg(&via_file)
        .args(["--", "/bin/sh", "-c", script])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_exit(&out, 0);
    assert_eq!(text(&out.stdout), "out\nno fd 3\n");
    let by_file = record(&std::fs::read_to_string(&via_file).unwrap());
    for key in ["argv", "termination", "classification", "policy"] {
        assert_eq!(by_fd[key], by_file[key], "{key}");
    }
    assert_eq!(by_fd["termination"]["code"], 0);
}

/// `--report-fd N` names a descriptor the caller opened for writing: one
/// that is not open, or open only for reading, is refused with 125 and one
/// `sandbox:` line, and nothing runs. Twin: the same run with descriptor 3
/// open for writing runs the command.
#[test]
fn report_fd_not_open_for_writing_is_refused_before_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let touch = format!("touch {}", marker.display());
    let start = |fd3: Option<&std::fs::File>| -> Output {
        let mut cmd = sandbox();
        cmd.args(["run", "-w"])
            .arg(dir.path())
            .args(["--report-fd", "3", "--", "/bin/sh", "-c", &touch])
            .stdin(Stdio::null());
        if let Some(f) = fd3 {
            with_fd3(&mut cmd, f);
        }
        cmd.output().unwrap()
    };
    let out = start(None);
    assert_exit(&out, 125);
    let lines = sandbox_lines(&out);
    assert!(
        lines.len() == 1 && lines[0].contains("--report-fd 3") && lines[0].contains("not open"),
        "{lines:?}"
    );
    assert!(!marker.exists(), "the command ran");
    let read_only = dir.path().join("read-only");
    std::fs::write(&read_only, "").unwrap();
    let out = start(Some(&std::fs::File::open(&read_only).unwrap()));
    assert_exit(&out, 125);
    assert!(
        sandbox_lines(&out)
            .iter()
            .any(|l| l.contains("--report-fd 3") && l.contains("reading only")),
        "{}",
        text(&out.stderr)
    );
    assert!(!marker.exists(), "the command ran");
    // Twin: open for writing.
    let out = start(Some(
        &std::fs::File::create(dir.path().join("rec.json")).unwrap(),
    ));
    assert_exit(&out, 0);
    assert!(marker.exists());
    record(&std::fs::read_to_string(dir.path().join("rec.json")).unwrap());
}

/// An op writing to `{{workspace}}/out` without `--workspace` runs with the
/// working directory as its workspace (as docs/config.md says), bounded there.
/// Twin: the same op with `--workspace` naming that directory.
#[test]
fn exec_op_workspace_defaults_to_the_working_directory() {
    let dir = tempfile::tempdir().unwrap();
    let ws = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::create_dir(ws.join("out")).unwrap();
    let op = ws.join("op.json");
    std::fs::write(
        &op,
        r#"{"argv": ["/bin/sh", "-c", "echo made > out/f && cat out/f"],
            "write_paths": ["{{workspace}}/out"]}"#,
    )
    .unwrap();
    let exec = |workspace: Option<&Path>| -> Output {
        let mut cmd = sandbox();
        cmd.current_dir(&ws).args(["exec-op", "--op"]).arg(&op);
        if let Some(w) = workspace {
            cmd.arg("--workspace").arg(w);
        }
        cmd.stdin(Stdio::null()).output().unwrap()
    };
    let out = exec(None);
    assert_exit(&out, 0);
    assert_eq!(text(&out.stdout), "made\n");
    std::fs::remove_file(ws.join("out/f")).unwrap();
    // Twin: explicit --workspace.
    let out = exec(Some(&ws));
    assert_exit(&out, 0);
    assert_eq!(text(&out.stdout), "made\n");
}

/// `--approval ask` with no terminal to ask on says so in one `sandbox:`
/// line: nothing was escalated. Twin: `--approval never` says nothing of
/// the kind. (On a terminal the same refusal prompts: `approval.rs`.)
#[test]
fn approval_ask_without_a_terminal_says_nothing_was_escalated() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let (w, denied) = (root.join("w"), root.join("denied"));
    std::fs::create_dir_all(&w).unwrap();
    std::fs::create_dir_all(&denied).unwrap();
    let target = denied.join("out");
    std::fs::write(&target, "data\n").unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o644)).unwrap();
    let script = format!("chmod 600 {}", target.display());
    let run = |approval: &str| -> Output {
        sandbox()
            .args(["run", "--approval", approval, "-w"])
            .arg(&w)
            .args(["--", "/bin/sh", "-c", &script])
            .env("XDG_STATE_HOME", &w)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .unwrap()
    };
    let says = |out: &Output| {
        sandbox_lines(out)
            .into_iter()
            .filter(|l| l.contains("no terminal to ask") && l.contains("nothing was escalated"))
            .count()
    };
    let out = run("ask");
    assert_ne!(out.status.code(), Some(0));
    assert_eq!(says(&out), 1, "{}", text(&out.stderr));
    let mode = std::fs::metadata(&target).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o644);
    // Twin: never asked, so nothing to say.
    let out = run("never");
    assert_ne!(out.status.code(), Some(0));
    assert_eq!(says(&out), 0, "{}", text(&out.stderr));
}

/// `sandbox man` prints the top-level page and one per subcommand;
/// `sandbox man run` only `sandbox-run(1)`, which documents run's own
/// flags; an unknown name is refused with 125. Twin: the top-level page
/// alone names no subcommand's flags.
#[test]
fn man_renders_a_page_per_subcommand() {
    let out = sandbox().arg("man").output().unwrap();
    assert_exit(&out, 0);
    let all = text(&out.stdout);
    let titles: Vec<&str> = all
        .lines()
        .filter_map(|l| l.strip_prefix(".TH "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    for page in [
        "sandbox",
        "sandbox-run",
        "sandbox-exec-op",
        "sandbox-policy",
        "sandbox-check",
        "sandbox-profile",
        "sandbox-completions",
        "sandbox-man",
    ] {
        assert!(titles.contains(&page), "{page} missing from {titles:?}");
    }
    let out = sandbox().args(["man", "run"]).output().unwrap();
    assert_exit(&out, 0);
    let run = text(&out.stdout);
    assert_eq!(run.matches(".TH ").count(), 1);
    assert!(run.contains(".TH sandbox-run 1"));
    assert!(run.contains(r"\-\-report\-fd") && run.contains(r"\-\-no\-network"));
    // Twin: the top-level page alone (the first of `sandbox man`) lists
    // the subcommands, not their flags.
    let top = all.split(".TH sandbox-run").next().unwrap();
    assert!(top.contains(".TH sandbox 1") && !top.contains(r"\-\-report\-fd"));
    let out = sandbox().args(["man", "nope"]).output().unwrap();
    assert_exit(&out, 125);
    assert!(sandbox_lines(&out)[0].contains("nope"));
}
