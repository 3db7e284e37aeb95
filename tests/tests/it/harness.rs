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

/// A workspace, a directory beside it the operator's write bound also
/// reaches, a private state directory (`XDG_STATE_HOME`), and an op that
/// writes a marker into the directory beside the workspace.
struct Dispatch {
    _dir: tempfile::TempDir,
    root: std::path::PathBuf,
    ws: std::path::PathBuf,
    other: std::path::PathBuf,
    state: std::path::PathBuf,
}

impl Dispatch {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let (ws, other, state) = (root.join("ws"), root.join("other"), root.join("state"));
        for d in [&ws, &other, &state, &ws.join("out")] {
            std::fs::create_dir_all(d).unwrap();
        }
        Self {
            _dir: dir,
            root,
            ws,
            other,
            state,
        }
    }

    /// An operator config bounding writes to the root (so the bound admits
    /// the directory beside the workspace), plus `extra`.
    fn config(&self, extra: &str) -> std::path::PathBuf {
        let path = self.root.join("config.toml");
        std::fs::write(
            &path,
            format!(
                "[sandbox.policy]\nwrite_paths = [{:?}]\n{extra}",
                self.root.to_str().unwrap()
            ),
        )
        .unwrap();
        path
    }

    /// An op envelope writing `marker` beneath `write` (declared), with
    /// `network` declared as given.
    fn op(&self, write: &Path, network: bool) -> std::path::PathBuf {
        let path = self.root.join("op.json");
        let script = format!("echo ran > {}/marker", write.display());
        std::fs::write(
            &path,
            serde_json::json!({
                "argv": ["/bin/sh", "-c", script],
                "write_paths": [write],
                "network": network,
            })
            .to_string(),
        )
        .unwrap();
        path
    }

    /// `sandbox exec-op` without a terminal, with this state directory.
    fn exec(&self, config: &Path, op: &Path, extra: &[&str]) -> Output {
        sandbox()
            .args(["exec-op", "--config"])
            .arg(config)
            .arg("--workspace")
            .arg(&self.ws)
            .arg("--op")
            .arg(op)
            .args(extra)
            .env("XDG_STATE_HOME", &self.state)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }
}

/// An op whose declared scope no layer grants (a write path beside the
/// workspace, within the operator's bound; the network) is refused before
/// it runs: exit 125, one `sandbox:` line naming the op and the missing
/// keys, nothing run, and a `runner_failure` record for `--report`. Twin:
/// the same op writing inside the workspace (the defaults) runs.
#[test]
fn an_op_whose_declared_scope_no_layer_grants_is_refused_with_nothing_run() {
    let d = Dispatch::new();
    let config = d.config("");
    let report = d.root.join("record.json");
    let op = d.op(&d.other, false);
    let out = d.exec(&config, &op, &["--report", report.to_str().unwrap()]);
    assert_exit(&out, 125);
    let lines = sandbox_lines(&out);
    assert_eq!(lines.len(), 1, "{lines:?}");
    let key = format!("exec-op/file.write{}", d.other.display());
    assert!(
        lines[0].contains("refused before it ran") && lines[0].contains(&key),
        "{lines:?}"
    );
    assert!(!d.other.join("marker").exists(), "nothing ran");
    let rec = record(&std::fs::read_to_string(&report).unwrap());
    assert_eq!(rec["classification"]["class"], "runner_failure", "{rec}");
    // The network is scope too: declared, it needs `exec-op/network/*`.
    let op = d.op(&d.ws.join("out"), true);
    let out = d.exec(&config, &op, &[]);
    assert_exit(&out, 125);
    assert!(
        sandbox_lines(&out)[0].contains("exec-op/network/*"),
        "{:?}",
        sandbox_lines(&out)
    );
    assert!(!d.ws.join("out/marker").exists());
    // Twin: within the defaults (beneath the workspace), it runs.
    let op = d.op(&d.ws.join("out"), false);
    let out = d.exec(&config, &op, &[]);
    assert_exit(&out, 0);
    assert_eq!(
        std::fs::read_to_string(d.ws.join("out/marker")).unwrap(),
        "ran\n"
    );
}

/// `[permissions.pre_approved]` in the operator config admits the op; the
/// grant is the skill's own: the same op under `--skill build` is refused.
/// Twin: without the pre-approval the `exec-op` skill is refused too.
#[test]
fn a_pre_approval_in_the_config_admits_the_op_for_its_skill_only() {
    let d = Dispatch::new();
    let key = format!("exec-op/file.write{}", d.other.display());
    let config = d.config(&format!(
        "[permissions.pre_approved]\n{key:?} = \"allow\"\n"
    ));
    let op = d.op(&d.other, false);
    let out = d.exec(&config, &op, &["--skill", "build"]);
    assert_exit(&out, 125);
    assert!(sandbox_lines(&out)[0].contains("build/file.write"));
    assert!(!d.other.join("marker").exists());
    let out = d.exec(&config, &op, &[]);
    assert_exit(&out, 0);
    assert!(d.other.join("marker").exists());
    std::fs::remove_file(d.other.join("marker")).unwrap();
    let out = d.exec(&d.config(""), &op, &[]);
    assert_exit(&out, 125);
    assert!(!d.other.join("marker").exists());
}

/// A grant stored by an earlier interactive approval (`approvals.json` in
/// the state directory) admits the op, non-interactively. Twin: a stored
/// grant for another path does not.
#[cfg(target_os = "linux")]
#[test]
fn a_stored_grant_admits_the_op() {
    let d = Dispatch::new();
    with_state_dir(&d.state, |store| {
        let config = d.config("");
        let op = d.op(&d.other, false);
        std::fs::create_dir_all(store).unwrap();
        let grant = |path: &Path| {
            let key = format!("exec-op/file.write{}", path.display());
            std::fs::write(
                store.join("approvals.json"),
                serde_json::json!({
                    "version": 1,
                    "grants": [{"key": key, "granted_at_unix_ms": 1}],
                })
                .to_string(),
            )
            .unwrap();
        };
        grant(&d.root.join("elsewhere"));
        let out = d.exec(&config, &op, &[]);
        assert_exit(&out, 125);
        assert!(!d.other.join("marker").exists());
        grant(&d.other);
        let out = d.exec(&config, &op, &[]);
        assert_exit(&out, 0);
        assert!(d.other.join("marker").exists());
    });
}

/// Red-team R7 (F1/F3 class, the approvals): a run started without
/// `XDG_STATE_HOME` whose write path holds the directory the victim's
/// `sandbox exec-op` names by it writes `sandbox/approvals.json` there,
/// granting the op's scope; the victim's `exec-op` (with that
/// `XDG_STATE_HOME`) does not read it: the approvals lie in the passwd
/// home whatever the environment says, and the op stays refused. Positive
/// control: the same grant in the passwd home's state directory admits the
/// op. Root only, against a fresh `/root` in a mount namespace of the
/// test's; nobody (no usable passwd home) keeps its approvals where its
/// environment says, the documented gap.
#[cfg(target_os = "linux")]
#[test]
fn approvals_planted_under_another_runs_state_home_are_not_read() {
    if !sandbox_tests::is_root() {
        sandbox_tests::cannot_do_its_job(
            "approvals_planted_under_another_runs_state_home_are_not_read",
            "needs root (the passwd home is /root)",
        );
        return;
    }
    let d = Dispatch::new();
    let data = d.root.join("data");
    let xdg = data.join("state");
    std::fs::create_dir_all(&xdg).unwrap();
    let key = format!("exec-op/file.write{}", d.other.display());
    let grant = serde_json::json!({
        "version": 1,
        "grants": [{"key": key, "granted_at_unix_ms": 1}],
    })
    .to_string();
    sandbox_tests::with_private_mounts(&["/root"], || {
        let planted = xdg.join("sandbox/approvals.json");
        let out = sandbox()
            .env_remove("XDG_STATE_HOME")
            .env("HOME", d.root.join("home"))
            .args(["run", "--mode", "workspace-write", "--workspace"])
            .arg(&data)
            .args(["--", "/bin/sh", "-c"])
            .arg(format!(
                "mkdir -p {s} && printf '%s' '{grant}' > {p} && echo PLANTED",
                s = xdg.join("sandbox").display(),
                p = planted.display()
            ))
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            text(&out.stdout).contains("PLANTED") && planted.is_file(),
            "the hostile run could not write its own workspace: {}",
            text(&out.stderr)
        );
        let config = d.config("");
        let op = d.op(&d.other, false);
        let victim = || {
            sandbox()
                .args(["exec-op", "--config"])
                .arg(&config)
                .arg("--workspace")
                .arg(&d.ws)
                .arg("--op")
                .arg(&op)
                .env("XDG_STATE_HOME", &xdg)
                .stdin(Stdio::null())
                .output()
                .unwrap()
        };
        let out = victim();
        assert_exit(&out, 125);
        assert!(
            !d.other.join("marker").exists(),
            "the planted grant was read"
        );
        // Positive control: the grant in the passwd home's state directory.
        let store = Path::new("/root/.local/state/sandbox");
        std::fs::create_dir_all(store).unwrap();
        std::fs::write(store.join("approvals.json"), &grant).unwrap();
        let out = victim();
        assert_exit(&out, 0);
        assert!(d.other.join("marker").exists());
    })
    .expect("a mount namespace with a tmpfs on /root (root)");
}

/// Runs `f` where `sandbox exec-op` keeps its approvals: `.local/state/sandbox`
/// of the passwd home whatever `$XDG_STATE_HOME` says (root: a fresh
/// `/root` in a mount namespace of the test's, so the host's approvals are
/// never read or touched), else (no usable passwd home: nobody)
/// `$XDG_STATE_HOME/sandbox`, with `XDG_STATE_HOME` the `state` the test
/// sets. `f` gets that directory.
#[cfg(target_os = "linux")]
fn with_state_dir(state: &Path, f: impl FnOnce(&Path) + Send) {
    match sandbox_core::home::trusted_home() {
        None => f(&state.join("sandbox")),
        Some(_) if sandbox_tests::is_root() => {
            sandbox_tests::with_private_mounts(&["/root"], || {
                f(Path::new("/root/.local/state/sandbox"))
            })
            .expect("a mount namespace with a tmpfs on /root (root)");
        }
        Some(home) => panic!(
            "the approvals live in {}: run this test as root (a private /root) or as a user \
             without a usable passwd home",
            home.display()
        ),
    }
}

/// The approvals file is trusted state: a confined run whose write path
/// holds the state directory (`-w HOME`) cannot make or change it, so it
/// cannot grant itself a later op's scope; the later op stays refused.
/// Twin: the same run writes a file of the same name beside it.
#[test]
fn no_confined_run_can_write_the_approvals_file() {
    let d = Dispatch::new();
    let home = d.root.join("home");
    let state = home.join(".local/state/sandbox");
    std::fs::create_dir_all(&state).unwrap();
    let key = format!("exec-op/file.write{}", d.other.display());
    let forged = serde_json::json!({
        "version": 1,
        "grants": [{"key": key, "granted_at_unix_ms": 1}],
    })
    .to_string();
    let write = |dir: &Path| {
        let script = format!("printf '%s' '{forged}' > {}/approvals.json", dir.display());
        sandbox()
            .args(["run", "-w"])
            .arg(&home)
            .args(["--", "/bin/sh", "-c", &script])
            .env("HOME", &home)
            .env_remove("XDG_STATE_HOME")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let out = write(&state);
    // The command ran (not 125) and its write was refused.
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("protected"),
        "{}",
        text(&out.stderr)
    );
    assert!(!state.join("approvals.json").exists());
    // The op that grant would admit is still refused.
    let op = d.op(&d.other, false);
    let out = sandbox()
        .args(["exec-op", "--config"])
        .arg(d.config(""))
        .arg("--workspace")
        .arg(&d.ws)
        .arg("--op")
        .arg(&op)
        .env("HOME", &home)
        .env_remove("XDG_STATE_HOME")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_exit(&out, 125);
    assert!(!d.other.join("marker").exists());
    // Twin: beside the state directory the same write lands.
    let out = write(&home);
    assert_exit(&out, 0);
    assert_eq!(
        std::fs::read_to_string(home.join("approvals.json")).unwrap(),
        forged
    );
}

/// The approval policy comes from the session log (`--session FILE`, its
/// last `approval-policy-changed`) before the config's `[permissions]
/// approval`: under `never` the refusal says nothing is asked, and names
/// the key. Twin: without the log the config's `ask` holds (and, with no
/// terminal, the refusal says the run is not interactive).
#[test]
fn the_session_log_sets_the_approval_policy() {
    let d = Dispatch::new();
    let config = d.config("[permissions]\napproval = \"ask\"\n");
    let op = d.op(&d.other, false);
    let session = d.root.join("session.jsonl");
    std::fs::write(
        &session,
        concat!(
            r#"{"schema":1,"at_ms":1,"event":{"kind":"approval-policy-changed","policy":"ask"}}"#,
            "\n",
            r#"{"schema":1,"at_ms":2,"event":{"kind":"approval-policy-changed","policy":"never"}}"#,
            "\n",
        ),
    )
    .unwrap();
    let key = format!("exec-op/file.write{}", d.other.display());
    let out = d.exec(&config, &op, &["--session", session.to_str().unwrap()]);
    assert_exit(&out, 125);
    let line = &sandbox_lines(&out)[0];
    assert!(
        line.contains("approval policy is never") && line.contains(&key),
        "{line}"
    );
    assert!(!d.other.join("marker").exists());
    let out = d.exec(&config, &op, &[]);
    assert_exit(&out, 125);
    let line = &sandbox_lines(&out)[0];
    assert!(
        line.contains("not interactive") && !line.contains("never"),
        "{line}"
    );
}
