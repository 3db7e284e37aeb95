//! The user's terminal after a run (red team R6a F1): a command that
//! inherits it may change its settings and try to stop its output; after
//! the run the terminal is as the runner found it, a write to it goes
//! through, and the runner itself exits even when the terminal's output is
//! stopped under it. Each run is on a new pty, as an interactive user's
//! terminal (the runner's controlling terminal, in the foreground or, for
//! one test, in the background), as root and as nobody.
#![cfg(target_os = "linux")]

use std::fs;
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use sandbox_tests::{sandbox, sandbox_as_nobody, users};

/// A run of `sandbox run ARGS` on a new pty.
struct OnPty {
    child: Child,
    master: fs::File,
    slave: OwnedFd,
    /// The terminal's settings before the runner started.
    before: libc::termios,
    seen: String,
}

/// Starts `sandbox run ARGS` (as nobody if asked) on a new pty, its
/// controlling terminal; with `background`, a process group of the same
/// session holds the terminal's foreground, so the runner is a background
/// job (as after a shell's `&`).
fn start(nobody: bool, args: &[&str], background: bool) -> OnPty {
    let (master, slave) = sandbox_tests::new_pty();
    let before = settings(slave.as_raw_fd());
    let mut cmd = if nobody {
        sandbox_as_nobody()
    } else {
        sandbox()
    };
    cmd.arg("run").args(args);
    cmd.stdin(Stdio::from(slave.try_clone().unwrap()))
        .stdout(Stdio::from(slave.try_clone().unwrap()))
        .stderr(Stdio::from(slave.try_clone().unwrap()));
    // SAFETY: setsid, ioctl, fork, setpgid, tcsetpgrp, alarm, pause and
    // _exit are async-signal-safe; no allocation.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY as _, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if background {
                // The foreground: a group of its own, alive for 30 s.
                let holder = libc::fork();
                if holder < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if holder == 0 {
                    libc::setpgid(0, 0);
                    libc::alarm(30);
                    loop {
                        libc::pause();
                    }
                }
                if libc::setpgid(holder, holder) < 0 && *libc::__errno_location() != libc::EACCES {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::tcsetpgrp(0, holder) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let child = cmd.spawn().expect("spawn sandbox");
    OnPty {
        child,
        master: fs::File::from(master),
        slave,
        before,
        seen: String::new(),
    }
}

fn settings(fd: RawFd) -> libc::termios {
    // SAFETY: zeroed plain data filled by the kernel; valid out-pointer.
    let mut t = unsafe { std::mem::zeroed::<libc::termios>() };
    assert_eq!(unsafe { libc::tcgetattr(fd, &mut t) }, 0, "tcgetattr");
    t
}

/// Every field `tcsetattr` sets.
fn same(a: &libc::termios, b: &libc::termios) -> bool {
    a.c_iflag == b.c_iflag
        && a.c_oflag == b.c_oflag
        && a.c_cflag == b.c_cflag
        && a.c_lflag == b.c_lflag
        && a.c_line == b.c_line
        && a.c_cc == b.c_cc
        && a.c_ispeed == b.c_ispeed
        && a.c_ospeed == b.c_ospeed
}

impl OnPty {
    /// Reads what the terminal shows for up to `limit`, until `needle`
    /// (if any) shows up or the runner exits; the runner's status, if it
    /// exited.
    fn pump(&mut self, limit: Duration, needle: Option<&str>) -> Option<ExitStatus> {
        let deadline = Instant::now() + limit;
        let fd = self.master.as_raw_fd();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                self.read_for(Duration::from_millis(200), fd);
                return Some(status);
            }
            if needle.is_some_and(|n| self.seen.contains(n)) || Instant::now() >= deadline {
                return None;
            }
            self.read_for(Duration::from_millis(100), fd);
        }
    }

    fn read_for(&mut self, wait: Duration, fd: RawFd) {
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        if unsafe { libc::poll(&mut pfd, 1, wait.as_millis() as i32) } > 0 {
            let mut buf = [0u8; 4096];
            if let Ok(n) = self.master.read(&mut buf) {
                self.seen.push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        }
    }

    /// The runner's exit code, waited for at most `limit` (it is killed
    /// and the test fails past it).
    fn exit_code(&mut self, limit: Duration) -> i32 {
        match self.pump(limit, None) {
            Some(status) => status.code().expect("the runner exited"),
            None => {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "the runner was still running after {limit:?}; the terminal showed: {}",
                    self.seen
                );
            }
        }
    }

    /// Whether the terminal is as it was before the run and a write to it
    /// (another process of the user's, after the run) goes through.
    fn given_back(&mut self) -> Result<(), String> {
        let now = settings(self.slave.as_raw_fd());
        if !same(&now, &self.before) {
            return Err(format!(
                "settings differ: lflag {:#o} (was {:#o}), iflag {:#o} (was {:#o})",
                now.c_lflag, self.before.c_lflag, now.c_iflag, self.before.c_iflag
            ));
        }
        let name = nix::unistd::ttyname(&self.slave).unwrap();
        let w = fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(name)
            .unwrap();
        // SAFETY: a valid buffer.
        let n = unsafe { libc::write(w.as_raw_fd(), b"after the run\n".as_ptr().cast(), 14) };
        if n != 14 {
            return Err(format!(
                "a write after the run: {n} ({})",
                std::io::Error::last_os_error()
            ));
        }
        self.pump(Duration::from_millis(500), Some("after the run"));
        if !self.seen.contains("after the run") {
            return Err(format!("the write never showed: {}", self.seen));
        }
        Ok(())
    }
}

use std::os::unix::fs::OpenOptionsExt;

const BREAK: &str = "stty -echo -icanon -isig -ixon -opost min 0 time 9; echo broke it";

/// A command that turns off echo, canonical mode, signals, flow control
/// and output processing and exits 3: the terminal is given back, and a
/// write goes through; the runner passes on the command's status.
#[test]
fn a_terminal_the_command_changed_is_given_back_as_found() {
    for nobody in users() {
        let script = format!("{BREAK}; exit 3");
        let mut run = start(nobody, &["--", "/bin/sh", "-c", &script], false);
        assert_eq!(run.exit_code(Duration::from_secs(30)), 3, "{}", run.seen);
        assert!(run.seen.contains("broke it"), "{}", run.seen);
        run.given_back()
            .unwrap_or_else(|e| panic!("nobody={nobody}: {e}"));
    }
}

/// Twin: a command that leaves the terminal alone finds and leaves it as
/// it was (the runner writes no settings back: nothing changed).
#[test]
fn a_terminal_the_command_left_alone_stays_as_it_was() {
    for nobody in users() {
        let mut run = start(nobody, &["--", "/bin/sh", "-c", "echo untouched"], false);
        assert_eq!(run.exit_code(Duration::from_secs(30)), 0, "{}", run.seen);
        assert!(run.seen.contains("untouched"), "{}", run.seen);
        run.given_back()
            .unwrap_or_else(|e| panic!("nobody={nobody}: {e}"));
    }
}

/// The timeout path, with the runner a background job of its terminal
/// (the shell's foreground group holds it): it gives the terminal back
/// without being stopped by SIGTTOU, and exits 124.
#[test]
fn a_background_run_ended_at_its_timeout_gives_the_terminal_back() {
    for nobody in users() {
        let script = format!("{BREAK}; sleep 60");
        let mut run = start(
            nobody,
            &["--timeout", "1", "--", "/bin/sh", "-c", &script],
            true,
        );
        assert_eq!(run.exit_code(Duration::from_secs(30)), 124, "{}", run.seen);
        assert!(run.seen.contains("broke it"), "{}", run.seen);
        run.given_back()
            .unwrap_or_else(|e| panic!("nobody={nobody}: {e}"));
    }
}

/// `tcflow(TCOOFF)` and `TCIOFF` are refused in the run (the refusal is
/// recorded and said), `TCOON` works, and the output still flows after it.
#[test]
fn stopping_the_terminals_output_is_refused() {
    let script = "import termios\n\
                  for name in ('TCOOFF', 'TCIOFF', 'TCOON', 'TCION'):\n\
                  \x20   try:\n\
                  \x20       termios.tcflow(1, getattr(termios, name)); print(name, 'ok', flush=True)\n\
                  \x20   except termios.error as e:\n\
                  \x20       print(name, 'refused', e.args[0], flush=True)\n\
                  raise SystemExit(1)\n";
    for nobody in users() {
        let mut run = start(nobody, &["--", "python3", "-c", script], false);
        // A failed run says its refusals.
        assert_eq!(run.exit_code(Duration::from_secs(30)), 1, "{}", run.seen);
        for line in [
            "TCOOFF refused 1",
            "TCIOFF refused 1",
            "TCOON ok",
            "TCION ok",
        ] {
            assert!(
                run.seen.contains(line),
                "nobody={nobody}: no {line:?} in {}",
                run.seen
            );
        }
        assert!(
            run.seen.contains("refused 2 other calls (ioctl)"),
            "{}",
            run.seen
        );
        run.given_back()
            .unwrap_or_else(|e| panic!("nobody={nobody}: {e}"));
    }
}

/// The terminal's output stopped under the runner (the user's Ctrl-S,
/// which `TCOON` does not undo) while it has a summary line to write: the
/// runner gives the line up after a bounded wait and exits with the
/// command's status. Twin: without Ctrl-S the line shows.
#[test]
fn a_stopped_terminal_does_not_hold_the_runner() {
    let (_outside, outside) = sandbox_tests::shared_dir();
    let victim = outside.join("victim");
    fs::write(&victim, "x").unwrap();
    let (_w, write) = sandbox_tests::shared_dir();
    let script = format!(
        "echo ready; sleep 1; chmod 777 {} 2>/dev/null; exit 3",
        victim.display()
    );
    for nobody in users() {
        for stop in [false, true] {
            let mut run = start(
                nobody,
                &[
                    "-w",
                    write.to_str().unwrap(),
                    "--",
                    "/bin/sh",
                    "-c",
                    &script,
                ],
                false,
            );
            assert!(
                run.pump(Duration::from_secs(20), Some("ready")).is_none(),
                "{}",
                run.seen
            );
            let started = Instant::now();
            if stop {
                use std::io::Write;
                run.master.write_all(b"\x13").unwrap();
            }
            assert_eq!(run.exit_code(Duration::from_secs(20)), 3, "{}", run.seen);
            let summary = run.seen.contains("refused 1 file change");
            if stop {
                // The command's 1 s, then at most the 2 s wait and the end.
                assert!(
                    started.elapsed() < Duration::from_secs(10),
                    "{:?}",
                    started.elapsed()
                );
                assert!(!summary, "nobody={nobody}: {}", run.seen);
                use std::io::Write;
                run.master.write_all(b"\x11").unwrap();
                run.pump(Duration::from_millis(300), None);
            } else {
                assert!(summary, "nobody={nobody}: {}", run.seen);
            }
            run.given_back()
                .unwrap_or_else(|e| panic!("nobody={nobody} stop={stop}: {e}"));
        }
    }
}
