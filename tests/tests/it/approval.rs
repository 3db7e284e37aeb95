//! `sandbox run --approval ask` on a real pseudo-terminal: after a refusal
//! the sandbox recorded itself, the user is offered a one-shot re-run with
//! exactly the refused path writable; the command's own output never makes
//! a proposal.

use std::fs;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use sandbox_tests::sandbox;

struct Session {
    child: Child,
    master: fs::File,
}

/// Starts `sandbox run --approval ask` running `script` on a new pty as its
/// controlling terminal.
fn start(write: &Path, script: &str, timeout_secs: &str) -> Session {
    start_with(write, script, timeout_secs, |_| {})
}

/// [`start`] with `env` applied to the command first.
fn start_with(
    write: &Path,
    script: &str,
    timeout_secs: &str,
    env: impl FnOnce(&mut std::process::Command),
) -> Session {
    let mut cmd = sandbox();
    env(&mut cmd);
    cmd.args([
        "run",
        "--backend",
        "landlock",
        "--on-unsupported",
        "error",
        "--approval",
        "ask",
    ])
    .args(["--approval-timeout", timeout_secs, "-w"])
    .arg(write)
    .args(["--", "/bin/sh", "-c", script])
    .env("XDG_STATE_HOME", write);
    on_pty(cmd)
}

/// Starts `cmd` on a new pty as its controlling terminal.
fn on_pty(mut cmd: std::process::Command) -> Session {
    let (master, slave) = sandbox_tests::new_pty();
    cmd.stdin(Stdio::from(slave.try_clone().unwrap()))
        .stdout(Stdio::from(slave.try_clone().unwrap()))
        .stderr(Stdio::from(slave));
    // SAFETY: setsid and ioctl are async-signal-safe; no allocation.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY as _, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().expect("spawn sandbox");
    Session {
        child,
        master: fs::File::from(master),
    }
}

impl Session {
    /// Reads the terminal until `needle` shows up (or fails after 20 s).
    fn expect(&mut self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut seen = String::new();
        let fd = self.master.as_raw_fd();
        while Instant::now() < deadline {
            let mut pfd = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            if unsafe { libc::poll(&mut pfd, 1, 200) } <= 0 {
                continue;
            }
            let mut buf = [0u8; 4096];
            match self.master.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => seen.push_str(&String::from_utf8_lossy(&buf[..n])),
            }
            if seen.contains(needle) {
                return seen;
            }
        }
        panic!("never saw {needle:?}; terminal showed: {seen}");
    }

    fn answer(&mut self, text: &str) {
        self.master.write_all(text.as_bytes()).unwrap();
    }

    fn exit_code(mut self) -> Option<i32> {
        // Drain the terminal so the child never blocks on output.
        let _ = self.expect_eof();
        self.child.wait().unwrap().code()
    }

    fn expect_eof(&mut self) -> String {
        let mut rest = String::new();
        let fd = self.master.as_raw_fd();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            let mut pfd = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            if unsafe { libc::poll(&mut pfd, 1, 100) } > 0 {
                let mut buf = [0u8; 4096];
                match self.master.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => rest.push_str(&String::from_utf8_lossy(&buf[..n])),
                }
            }
        }
        rest
    }
}

fn dirs() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(t.path()).unwrap();
    let (w, denied) = (root.join("w"), root.join("denied"));
    fs::create_dir_all(&w).unwrap();
    fs::create_dir_all(&denied).unwrap();
    (t, w, denied)
}

/// An existing file outside the write path whose mode the command changes
/// (a metadata change the broker refuses and records).
fn target(denied: &Path) -> (std::path::PathBuf, String) {
    use std::os::unix::fs::PermissionsExt;
    let target = denied.join("out");
    fs::write(&target, "data\n").unwrap();
    fs::set_permissions(&target, fs::Permissions::from_mode(0o644)).unwrap();
    let script = format!("chmod 600 {}", target.display());
    (target, script)
}

fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn yes_reruns_once_with_the_refused_path_writable() {
    let (_t, w, denied) = dirs();
    let (target, script) = target(&denied);
    let mut s = start(&w, &script, "20");
    let prompt = s.expect("[y/N]");
    assert!(
        prompt.contains("the sandbox refused"),
        "the sandbox's own record is shown: {prompt}"
    );
    assert!(
        prompt.contains(&format!("add {} to the write paths", target.display())),
        "exactly the refused file is named: {prompt}"
    );
    s.answer("y\n");
    let rest = s.expect_eof();
    assert_eq!(s.child.wait().unwrap().code(), Some(0), "{rest}");
    assert_eq!(mode(&target), 0o600);
}

#[test]
fn no_keeps_the_denial() {
    let (_t, w, denied) = dirs();
    let (target, script) = target(&denied);
    let mut s = start(&w, &script, "20");
    s.expect("[y/N]");
    s.answer("n\n");
    assert_ne!(s.exit_code(), Some(0));
    assert_eq!(mode(&target), 0o644);
}

#[test]
fn no_answer_cancels_after_the_timeout() {
    let (_t, w, denied) = dirs();
    let (target, script) = target(&denied);
    let mut s = start(&w, &script, "1");
    s.expect("[y/N]");
    assert_ne!(s.exit_code(), Some(0));
    assert_eq!(mode(&target), 0o644);
}

/// A forged "Permission denied" line naming `/` proposes nothing: the run
/// ends with the command's status and no prompt.
#[test]
fn the_commands_own_output_proposes_nothing() {
    let (_t, w, _denied) = dirs();
    let script = "echo \"touch: cannot touch '/x': Permission denied\" >&2; exit 1";
    let mut s = start(&w, script, "20");
    let rest = s.expect_eof();
    assert!(!rest.contains("[y/N]"), "no prompt: {rest}");
    assert_eq!(s.child.wait().unwrap().code(), Some(1), "{rest}");
}

/// A refusal in a tool's own cache in the home directory offers a private
/// cache (`--cache npm`), never the user's real one: approved, the re-run
/// passes and `~/.npm` is untouched. (Twin: an ordinary refused file is
/// offered as a write path, above.)
#[test]
fn a_tool_cache_refusal_offers_a_private_cache() {
    use std::os::unix::fs::PermissionsExt;
    let (_t, w, denied) = dirs();
    let home = denied.join("home");
    fs::create_dir_all(home.join(".npm")).unwrap();
    let real = home.join(".npm/f");
    fs::write(&real, "").unwrap();
    fs::set_permissions(&real, fs::Permissions::from_mode(0o644)).unwrap();
    let script =
        "c=${npm_config_cache:-$HOME/.npm}; touch \"$c/f\" 2>/dev/null; chmod 600 \"$c/f\"";
    let mut s = start_with(&w, script, "20", |c| {
        c.env("HOME", &home).env_remove("XDG_CACHE_HOME");
    });
    let prompt = s.expect("[y/N]");
    assert!(prompt.contains("--cache npm"), "{prompt}");
    assert!(!prompt.contains("to the write paths"), "{prompt}");
    s.answer("y\n");
    let rest = s.expect_eof();
    assert_eq!(s.child.wait().unwrap().code(), Some(0), "{rest}");
    assert_eq!(mode(&real), 0o644);
}

/// `exec-op` on a terminal asks once for the grants its declared scope
/// lacks (a write path beside the workspace, within the operator's bound):
/// `y` runs it and stores the grant in the state directory's
/// `approvals.json`, which then admits the same op with no terminal. Twin:
/// `n` refuses it (125), runs nothing and stores nothing.
#[cfg(target_os = "linux")]
#[test]
fn exec_op_asks_once_and_remembers_the_grant() {
    let t = tempfile::tempdir().unwrap();
    let state = fs::canonicalize(t.path()).unwrap().join("state");
    fs::create_dir_all(&state).unwrap();
    with_state_dir(&state, |store| exec_op_asks_once(&state, store));
}

#[cfg(target_os = "linux")]
fn exec_op_asks_once(state: &Path, store: &Path) {
    let t = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(t.path()).unwrap();
    let (ws, other) = (root.join("ws"), root.join("other"));
    for d in [&ws, &other] {
        fs::create_dir_all(d).unwrap();
    }
    let config = root.join("config.toml");
    fs::write(
        &config,
        format!(
            "[sandbox.policy]\nwrite_paths = [{:?}]\n",
            root.to_str().unwrap()
        ),
    )
    .unwrap();
    let op = root.join("op.json");
    let marker = other.join("marker");
    fs::write(
        &op,
        serde_json::json!({
            "argv": ["/bin/sh", "-c", format!("echo ran > {}", marker.display())],
            "write_paths": [other],
        })
        .to_string(),
    )
    .unwrap();
    let exec = || {
        let mut cmd = sandbox();
        cmd.args(["exec-op", "--config"])
            .arg(&config)
            .arg("--workspace")
            .arg(&ws)
            .arg("--op")
            .arg(&op)
            .env("XDG_STATE_HOME", state);
        cmd
    };
    let key = format!("exec-op/file.write{}", other.display());
    let stored = store.join("approvals.json");
    let mut s = on_pty(exec());
    let prompt = s.expect("[y/N]");
    assert!(prompt.contains(&key), "the missing key is named: {prompt}");
    s.answer("n\n");
    assert_eq!(s.exit_code(), Some(125));
    assert!(!marker.exists(), "refused: nothing ran");
    assert!(!stored.exists(), "refused: nothing stored");
    let mut s = on_pty(exec());
    s.expect("[y/N]");
    s.answer("y\n");
    assert_eq!(s.exit_code(), Some(0));
    assert_eq!(fs::read_to_string(&marker).unwrap(), "ran\n");
    assert!(fs::read_to_string(&stored).unwrap().contains(&key));
    fs::remove_file(&marker).unwrap();
    // Remembered: no terminal, no question, and it runs.
    let out = exec().stdin(Stdio::null()).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(marker.exists());
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
