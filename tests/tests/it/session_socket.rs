//! `sandbox session --channel-fd N` (#45): the channel over an inherited
//! UNIX stream socket instead of stdin/stdout. Commands run as over stdin;
//! nothing a command writes, and no descriptor it inherits, reaches the
//! channel; anything but an open UNIX stream socket is refused (exit 125)
//! naming N and what it is. Root and nobody.
#![cfg(target_os = "linux")]

use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::Duration;

use sandbox_tests::{sandbox, sandbox_as_nobody, users};
use serde_json::{json, Value};

const BACKEND: &[&str] = &["--backend", "auto", "--on-unsupported", "error"];
const EVENT_WAIT: Duration = Duration::from_secs(60);

fn command(nobody: bool) -> Command {
    if nobody {
        sandbox_as_nobody()
    } else {
        sandbox()
    }
}

/// Lets the child inherit `fd` (as the same number).
fn inherit(cmd: &mut Command, fd: i32) {
    // SAFETY: fcntl is async-signal-safe; it only clears close-on-exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::fcntl(fd, libc::F_SETFD, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// A session driven over one end of a socketpair; its own stdout and
/// stderr are pipes the test reads at the end.
struct Harness {
    child: Child,
    sock: Option<UnixStream>,
    events: Receiver<Value>,
    fd: i32,
    /// The channel socket as `/proc/*/fd` shows it (`socket:[inode]`).
    link: String,
}

impl Harness {
    fn open(nobody: bool) -> Self {
        let (mine, theirs) = UnixStream::pair().unwrap();
        let fd = theirs.as_raw_fd();
        let link = std::fs::read_link(format!("/proc/self/fd/{fd}"))
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let mut cmd = command(nobody);
        cmd.arg("session")
            .args(BACKEND)
            .args(["--channel-fd", &fd.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        inherit(&mut cmd, fd);
        let child = cmd.spawn().expect("spawn sandbox session");
        drop(theirs);
        let reader = mine.try_clone().unwrap();
        let (tx, events) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(reader).lines() {
                let line = line.expect("the channel is UTF-8 text");
                let event: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("not an event on the channel ({e}): {line:?}"));
                assert!(
                    event.get("event").and_then(Value::as_str).is_some(),
                    "a line without \"event\" on the channel: {line:?}"
                );
                assert_ne!(event["id"], "forged", "a forged event: {line:?}");
                if tx.send(event).is_err() {
                    break;
                }
            }
        });
        let h = Harness {
            child,
            sock: Some(mine),
            events,
            fd,
            link,
        };
        let hello = h.next();
        assert_eq!(hello["event"], "hello", "{hello}");
        h
    }

    #[track_caller]
    fn next(&self) -> Value {
        self.events
            .recv_timeout(EVENT_WAIT)
            .expect("an event on the channel socket")
    }

    #[track_caller]
    fn run(&mut self, id: &str, argv: &[&str], output: bool) -> Value {
        let request = json!({"id": id, "op": "run", "argv": argv, "output": output});
        let sock = self.sock.as_mut().unwrap();
        sock.write_all(format!("{request}\n").as_bytes()).unwrap();
        let started = self.next();
        assert_eq!(started["event"], "started", "{started}");
        assert_eq!(started["id"], id, "{started}");
        let exit = self.next();
        assert_eq!(exit["event"], "exit", "{exit}");
        assert_eq!(exit["id"], id, "{exit}");
        exit
    }

    /// Closes the harness's side of the socket (no `close` request): the
    /// session ends as at end of input. Returns its status, stdout, stderr.
    fn hang_up(mut self) -> (Option<i32>, String, String) {
        if let Some(sock) = self.sock.take() {
            // The reader thread holds a clone: shut the stream, not the fd.
            sock.shutdown(std::net::Shutdown::Write).unwrap();
        }
        let out = self.child.wait_with_output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

/// Over a socketpair, commands run; what they write without `output` goes
/// nowhere (not the channel, not the session's stdout or stderr); with
/// `output` it comes back in the exit event. The channel socket is not
/// among a command's descriptors (twin: the same listing shows the pipes
/// the session lends it and a descriptor it opened itself). The harness
/// hanging up ends the session with 0.
#[test]
fn a_session_runs_over_a_socketpair() {
    for nobody in users() {
        let mut h = Harness::open(nobody);
        let exit = h.run(
            "quiet",
            &[
                "/bin/sh",
                "-c",
                "echo marker-out-7f3; echo marker-err-7f3 >&2",
            ],
            false,
        );
        assert_eq!(exit["status"], 0, "{exit}");
        assert!(exit.get("stdout").is_none(), "{exit}");
        let exit = h.run(
            "loud",
            &[
                "/bin/sh",
                "-c",
                "echo marker-out-7f3; echo marker-err-7f3 >&2",
            ],
            true,
        );
        assert_eq!(exit["stdout"], "marker-out-7f3\n", "{exit}");
        assert_eq!(exit["stderr"], "marker-err-7f3\n", "{exit}");
        let exit = h.run(
            "fds",
            &["/bin/sh", "-c", "exec 7</dev/null; ls -l /proc/self/fd/"],
            true,
        );
        let listing = exit["stdout"].as_str().unwrap();
        // (Other sockets, the nest socket, are the command's by design.)
        assert!(
            !listing.contains(&h.link),
            "the channel {} among: {listing}",
            h.link
        );
        // Twin: the listing sees the lent pipes and the command's own fd.
        assert!(listing.contains(" 1 -> pipe:"), "{listing}");
        assert!(listing.contains(" 7 -> /dev/null"), "{listing}");
        let (status, stdout, stderr) = h.hang_up();
        assert_eq!(status, Some(0), "stderr: {stderr}");
        assert_eq!(stdout, "", "the session wrote its stdout");
        assert!(
            !stderr.contains("marker-"),
            "command output on stderr: {stderr}"
        );
    }
}

/// A command that knows the session's pid and the channel's number cannot
/// write to the channel through `/proc/<session>/fd/N` (for N and 0..9);
/// the forged events never reach the harness (its reader fails on them) and
/// the session answers the next request. Twin: the command writes its own
/// stdout.
#[test]
fn a_command_cannot_reach_the_channel_socket() {
    for nobody in users() {
        let mut h = Harness::open(nobody);
        let pid = h.child.id().to_string();
        let n = h.fd.to_string();
        let script = r#"
            for f in 0 1 2 3 4 5 6 7 8 9 "$2"; do
                echo '{"id":"forged","event":"exit","status":0}' 2>/dev/null > /proc/$1/fd/$f && echo "wrote fd $f"
            done
            echo mine
        "#;
        let exit = h.run("attack", &["/bin/sh", "-c", script, "sh", &pid, &n], true);
        assert_eq!(exit["stdout"], "mine\n", "{exit}");
        let exit = h.run("after", &["true"], false);
        assert_eq!(exit["status"], 0, "{exit}");
        let (status, _, stderr) = h.hang_up();
        assert_eq!(status, Some(0), "stderr: {stderr}");
    }
}

/// `--channel-fd N` where N is a file, a pipe, a closed descriptor, a UDP
/// socket or a UNIX datagram socket: exit 125, naming N and what it is,
/// with no event written. Twin: a UNIX stream socket is taken (hello).
#[test]
fn a_channel_fd_that_is_not_a_unix_stream_socket_is_refused() {
    for nobody in users() {
        let file = std::fs::File::open("/etc/hostname")
            .or_else(|_| std::fs::File::open("/etc/passwd"))
            .unwrap();
        let (pipe_read, _pipe_write) = {
            let mut fds = [0; 2];
            // SAFETY: pipe2 fills two fds.
            assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
            (fds[0], fds[1])
        };
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let dgram = std::os::unix::net::UnixDatagram::unbound().unwrap();
        let cases: Vec<(i32, &str)> = vec![
            (file.as_raw_fd(), "a regular file"),
            (pipe_read, "a pipe"),
            (987, "not an open descriptor"),
            (udp.as_raw_fd(), "an IPv4 socket"),
            (dgram.as_raw_fd(), "a UNIX datagram socket"),
        ];
        for (fd, what) in cases {
            let mut cmd = command(nobody);
            cmd.arg("session")
                .args(BACKEND)
                .args(["--channel-fd", &fd.to_string()])
                .stdin(Stdio::null());
            if fd != 987 {
                inherit(&mut cmd, fd);
            }
            let out = cmd.output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(125), "{what}: {stderr}");
            assert!(
                stderr.contains(&format!("--channel-fd {fd}: {what}")),
                "{what}: {stderr}"
            );
            assert!(out.stdout.is_empty(), "{what}: an event on stdout");
        }
        // SAFETY: closing the pipe's read end this test opened.
        unsafe { libc::close(pipe_read) };
        // Twin: a UNIX stream socket is taken.
        let h = Harness::open(nobody);
        let (status, _, stderr) = h.hang_up();
        assert_eq!(status, Some(0), "stderr: {stderr}");
    }
}
