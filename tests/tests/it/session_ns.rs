//! What the session tests that run in a private network and mount
//! namespace with local origins (`session_egress`, `session_approvals`)
//! share: the namespace's `/etc/hosts` and directory (with the test
//! certificates), the `unshare` command and the reading of a session's
//! events.
#![cfg(target_os = "linux")]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

use sandbox_tests::{is_root, sandbox_bin};
use serde_json::Value;

use crate::private_net::certificates;

/// How long any one event may take before the test fails (not hangs).
pub(crate) const EVENT_WAIT: Duration = Duration::from_secs(90);

/// The namespace's `/etc/hosts`.
pub(crate) const HOSTS: &str =
    "127.0.0.1 localhost\n93.184.215.34 svc.example.com\n127.0.0.1 pkgs.example.com\n";

/// `svc.example.com`'s address in the namespace (a `local` route to its
/// loopback, on no interface: not local to the proxy).
pub(crate) const SVC_IP: &str = "93.184.215.34";

/// Root and nobody (`true`).
pub(crate) fn users() -> [bool; 2] {
    [false, true]
}

/// The events read from `out`, one a line, on a thread.
pub(crate) fn events_of(out: impl std::io::Read + Send + 'static) -> Receiver<Value> {
    let (tx, events) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            let event: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("not an event on the channel ({e}): {line:?}"));
            if tx.send(event).is_err() {
                break;
            }
        }
    });
    events
}

/// The next event of `events` (a session's), failing the test past `wait`.
#[track_caller]
pub(crate) fn next_event(events: &Receiver<Value>, wait: Duration) -> Value {
    match events.recv_timeout(wait) {
        Ok(event) => event,
        Err(RecvTimeoutError::Timeout) => panic!("no event within {wait:?}"),
        Err(RecvTimeoutError::Disconnected) => panic!("the session ended its channel"),
    }
}

/// The namespace's directory (anyone may write it and its `state/`; the
/// `hosts` file and the certificates in it), its canonical path, and
/// `$WRAP`: the `setpriv` to nobody when `nobody`, else nothing.
pub(crate) fn namespace_dir(nobody: bool) -> (tempfile::TempDir, PathBuf, &'static str) {
    assert!(
        is_root(),
        "network namespaces need root here: run this suite as root (CI does)"
    );
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let d = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::create_dir(d.join("state")).unwrap();
    std::fs::set_permissions(d.join("state"), std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::write(d.join("hosts"), HOSTS).unwrap();
    certificates(&d, &["pkgs.example.com"], None);
    let wrap = if nobody {
        "setpriv --reuid=65534 --regid=65534 --clear-groups --"
    } else {
        ""
    };
    (dir, d, wrap)
}

/// `unshare` of a private network and mount namespace running `sh -c
/// setup` (then `args`) in `d`, with `$SANDBOX`, `$WRAP` (`wrap`), `$D`
/// (`d`), `extra` and then `env` in its environment, its own state
/// directory and no configuration; stdin and stdout piped.
pub(crate) fn unshare(
    setup: &str,
    args: &[&str],
    wrap: &str,
    d: &Path,
    extra: &[(&str, &std::ffi::OsStr)],
    env: &[(&str, &str)],
) -> Command {
    let mut command = Command::new("unshare");
    command
        .args(["--net", "--mount", "--propagation", "private"])
        .args(["/bin/sh", "-c", setup])
        .args(args)
        .env("SANDBOX", sandbox_bin())
        .env("WRAP", wrap)
        .envs(extra.iter().copied())
        .env("D", d)
        .envs(env.iter().copied())
        .env("XDG_STATE_HOME", d.join("state"))
        .env_remove("SANDBOX_CONFIG")
        .env("XDG_CONFIG_HOME", "/nonexistent/sandbox-tests-config")
        .current_dir(d)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    command
}

/// Kills the processes whose pids the files `files` in `d` hold (the
/// origins a test started), where there are such files.
pub(crate) fn kill_pids(d: &Path, files: &[&str]) {
    for file in files {
        if let Ok(pid) = std::fs::read_to_string(d.join(file)) {
            if let Ok(pid) = pid.trim().parse::<i32>() {
                // SAFETY: kill has no memory preconditions; the pid is
                // an origin this test started.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
}
