//! `sandbox run --approval ask` on a real pseudo-terminal: after a denial the
//! user is offered a one-shot re-run with the denied path writable.

use std::fs;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use sandbox_tests::sandbox;

struct Session {
    child: Child,
    master: fs::File,
}

/// Starts `sandbox run --approval ask` on a new pty as its controlling terminal.
fn start(write: &Path, target: &Path, timeout_secs: &str) -> Session {
    let pty = nix::pty::openpty(None, None).expect("openpty");
    let slave: OwnedFd = pty.slave;
    let mut cmd = sandbox();
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
    .args(["--", "/bin/sh", "-c"])
    .arg(format!("echo data > {}", target.display()))
    .env("XDG_STATE_HOME", write)
    .stdin(Stdio::from(slave.try_clone().unwrap()))
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
        master: fs::File::from(pty.master),
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

#[test]
fn yes_reruns_once_with_the_denied_path_writable() {
    let (_t, w, denied) = dirs();
    let target = denied.join("out");
    let mut s = start(&w, &target, "20");
    let prompt = s.expect("[y/N]");
    assert!(
        prompt.contains("Permission denied"),
        "evidence shown: {prompt}"
    );
    assert!(
        prompt.contains(&denied.display().to_string()),
        "escalation named: {prompt}"
    );
    s.answer("y\n");
    let rest = s.expect_eof();
    assert_eq!(s.child.wait().unwrap().code(), Some(0), "{rest}");
    assert_eq!(fs::read_to_string(&target).unwrap(), "data\n");
}

#[test]
fn no_keeps_the_denial() {
    let (_t, w, denied) = dirs();
    let target = denied.join("out");
    let mut s = start(&w, &target, "20");
    s.expect("[y/N]");
    s.answer("n\n");
    assert_ne!(s.exit_code(), Some(0));
    assert!(!target.exists());
}

#[test]
fn no_answer_cancels_after_the_timeout() {
    let (_t, w, denied) = dirs();
    let target = denied.join("out");
    let mut s = start(&w, &target, "1");
    s.expect("[y/N]");
    assert_ne!(s.exit_code(), Some(0));
    assert!(!target.exists());
}
