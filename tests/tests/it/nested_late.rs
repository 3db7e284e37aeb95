//! A nested request that arrives, or is still being checked, when its
//! command ends (red team F3): in a session's shared launch it must never
//! start after the end-of-command sweep (and so run during the next
//! command), and in a plain run it must not hold the runner past its
//! timeout or a stop signal. Each beside a positive control; root and
//! nobody.
//!
//! `late.py` captures a genuine request from the real `sandbox run` client
//! (served by a fake door), pads its `trusted_files`, and sends it on the
//! inherited nest socket with its own connection end as the nested
//! command's stdin (so the runner itself keeps the connection open once the
//! requester is gone); then it exits, sleeps, or waits for the answer.
#![cfg(target_os = "linux")]

use std::process::Stdio;
use std::time::{Duration, Instant};

use sandbox_tests::{sandbox, sandbox_as_nobody, sandbox_bin, shared_dir, users};
use serde_json::Value;

const LATE: &str = r#"
import array, json, os, socket, struct, subprocess, sys, time
sb, d, pad, tag, then, inner = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
HELLO = b"sandbox-nest 1\n"
real_door = int(os.environ["SANDBOX_NEST_FD"])
a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
env = dict(os.environ, SANDBOX_NEST_FD=str(b.fileno()))
p = subprocess.Popen([sb, "run", "-w", d, "--", "sh", "-c", inner], env=env, pass_fds=(b.fileno(),),
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
msg, anc, _, _ = a.recvmsg(16, socket.CMSG_SPACE(4 * 4))
fds = array.array("i"); [fds.frombytes(x[:len(x) - len(x) % 4]) for (_, _, x) in anc]
conn = socket.socket(fileno=fds[0]); conn.sendall(HELLO)
n = struct.unpack("<I", conn.recv(4, socket.MSG_WAITALL))[0]
body = b""
while len(body) < n:
    body += conn.recv(n - len(body))
p.kill(); p.wait(); conn.close()
wire = json.loads(body)
wire["trusted_files"] += ["/x"] * pad
data = json.dumps(wire, separators=(",", ":")).encode()
mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
door = socket.socket(fileno=real_door)
door.sendmsg([b"hello"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [theirs.fileno()]))])
theirs.close()
got = b""
while len(got) < len(HELLO):
    got += mine.recv(len(HELLO) - len(got))
null = os.open("/dev/null", os.O_WRONLY)
frame = struct.pack("<I", len(data)) + data
stdin = mine.fileno() if then != "wait" else null
mine.sendmsg([frame[:4]], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [stdin, null, null]))])
mine.sendall(frame[4:])
if then == "wait":
    n = struct.unpack("<I", mine.recv(4, socket.MSG_WAITALL))[0]
    reply = json.loads(mine.recv(n, socket.MSG_WAITALL))
    print(reply.get("reply"), reply.get("reason", ""), flush=True)
elif then == "sleep":
    time.sleep(60)
os._exit(0)
"#;

/// Runs `commands` (shell lines) in one shared-launch session; each
/// command's exit event.
fn session(nobody: bool, dir: &str, commands: &[String]) -> Vec<Value> {
    crate::session_leftovers::session(nobody, dir, "shared", commands)
}

/// `late.py` in `dir` sending a request padded with `pad` trusted files,
/// whose nested command is `inner`, then `then` (exit, sleep, wait).
fn late(dir: &std::path::Path, pad: usize, tag: &str, then: &str, inner: &str) -> String {
    format!(
        "python3 {d}/late.py {sb} {d} {pad} {tag} {then} '{inner}'",
        d = dir.display(),
        sb = sandbox_bin().display(),
    )
}

/// Shared launch: command 0 sends its request (a long one, refused by its
/// size, and a short one, within bounds) and exits at once; the nested
/// command would write a file 2 s later; command 1 runs 4 s and looks for
/// it. Nothing command 0 asked for runs during command 1, and command 1's
/// exit event carries no record of it. Positive controls: the same
/// request, its answer awaited, runs (its file written, its record in its
/// own command's event), and the long one is refused saying why.
#[test]
fn a_commands_nested_request_never_starts_in_the_next_command() {
    for nobody in users() {
        let (_tmp, dir) = shared_dir();
        std::fs::write(dir.join("late.py"), LATE).unwrap();
        let d = dir.display();
        for (pad, tag) in [(30_000, "long"), (0, "short")] {
            let inner = format!("sleep 2; date > {d}/late_{tag}; sleep 30");
            let probe = format!("sleep 4; cat {d}/late_{tag} 2>/dev/null || echo none");
            let exits = session(
                nobody,
                &dir.to_string_lossy(),
                &[late(&dir, pad, tag, "exit", &inner), probe],
            );
            assert_eq!(exits[0]["status"], 0, "{}", exits[0]);
            assert_eq!(
                exits[1]["stdout"], "none\n",
                "nobody {nobody}, pad {pad}: command 0's nested run ran during command 1: {}",
                exits[1]
            );
            assert!(
                exits[1].get("nested").is_none(),
                "nobody {nobody}, pad {pad}: command 1's event has command 0's record: {}",
                exits[1]
            );
        }
        // Controls: awaited, the request within bounds runs; the long one
        // is refused with the bound named.
        let inner = format!("date > {d}/ran");
        let exits = session(
            nobody,
            &dir.to_string_lossy(),
            &[
                late(&dir, 256, "ok", "wait", &inner),
                late(&dir, 30_000, "long", "wait", &inner),
            ],
        );
        assert!(
            exits[0]["stdout"].as_str().unwrap().starts_with("outcome"),
            "nobody {nobody}: {}",
            exits[0]
        );
        assert!(dir.join("ran").exists(), "nobody {nobody}: {}", exits[0]);
        assert_eq!(
            exits[0]["nested"].as_array().map(Vec::len),
            Some(1),
            "{}",
            exits[0]
        );
        let said = exits[1]["stdout"].as_str().unwrap();
        assert!(
            said.starts_with("refused") && said.contains("30000 trusted files, more than the 256"),
            "nobody {nobody}: {}",
            exits[1]
        );
    }
}

/// A plain run whose command sends a huge request (700,000 trusted files,
/// under the request's byte limit) and sleeps on returns at its timeout
/// (124, within seconds of `--timeout 3`), and on a SIGINT soon after it;
/// it used to be held ~25 s while the runner checked the request. Control:
/// the same with a short request (its nested command sleeping) returns
/// alike.
#[test]
fn a_huge_nested_request_holds_no_run_past_its_timeout_or_a_stop_signal() {
    for nobody in users() {
        let (_tmp, dir) = shared_dir();
        std::fs::write(dir.join("late.py"), LATE).unwrap();
        for pad in [700_000, 0] {
            for sigint in [false, true] {
                let mut cmd = if nobody {
                    sandbox_as_nobody()
                } else {
                    sandbox()
                };
                let line = late(&dir, pad, "t", "sleep", "sleep 60");
                let start = Instant::now();
                let mut child = cmd
                    .args(["run", "--timeout", "3", "-w"])
                    .arg(&dir)
                    .args(["--", "/bin/sh", "-c", &line])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap();
                if sigint {
                    std::thread::sleep(Duration::from_millis(1500));
                    // SAFETY: kill(2) on our own child's pid.
                    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
                }
                let status = child.wait().unwrap();
                let took = start.elapsed();
                let bound = if sigint { 8 } else { 10 };
                assert!(
                    took < Duration::from_secs(bound),
                    "nobody {nobody}, pad {pad}, sigint {sigint}: the run returned after {took:?}"
                );
                if sigint {
                    assert_ne!(status.code(), Some(0), "nobody {nobody}, pad {pad}");
                } else {
                    assert_eq!(status.code(), Some(124), "nobody {nobody}, pad {pad}");
                }
            }
        }
    }
}
