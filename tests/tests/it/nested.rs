//! Nested runs that narrow (#45): a `sandbox run` inside a confined run
//! asks the outer runner, through the nest socket it inherits, to run its
//! command under both policies. Each deny beside its working twin, as root
//! and as nobody.
#![cfg(target_os = "linux")]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use sandbox_tests::{sandbox, sandbox_as_nobody, sandbox_bin, stderr, users};

fn outer(nobody: bool) -> Command {
    if nobody {
        sandbox_as_nobody()
    } else {
        sandbox()
    }
}

/// A directory (with `dirs` inside) every user may write to.
fn shared(dirs: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for d in std::iter::once(&"").chain(dirs) {
        let p = dir.path().join(d);
        std::fs::create_dir_all(&p).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    dir
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn sb() -> String {
    sandbox_bin().display().to_string()
}

fn d(p: &Path) -> String {
    p.display().to_string()
}

/// The inner command cannot write where the inner policy forbids, even
/// where the outer allows; the outer command writes there, the inner
/// command writes to its own write path.
#[test]
fn a_nested_run_narrows_the_outer_policy() {
    for nobody in users() {
        let w = shared(&["inner"]);
        let (outer_made, inner_made, denied) = (
            w.path().join("outer-made"),
            w.path().join("inner/made"),
            w.path().join("denied"),
        );
        let script = format!(
            "echo o > {om}; {sb} run -w {inner} -- sh -c 'echo i > {im}; echo x > {den}'; \
             echo inner=$?",
            om = d(&outer_made),
            sb = sb(),
            inner = d(&w.path().join("inner")),
            im = d(&inner_made),
            den = d(&denied),
        );
        let out = outer(nobody)
            .args(["run", "-w", &d(w.path()), "--", "sh", "-c", &script])
            .output()
            .unwrap();
        let ctx = format!("nobody={nobody}: {}", stderr(&out));
        assert_eq!(out.status.code(), Some(0), "{ctx}");
        assert!(outer_made.exists(), "positive control: {ctx}");
        assert!(inner_made.exists(), "the inner write path: {ctx}");
        assert!(
            !denied.exists(),
            "the outer allows it, the inner must not: {ctx}"
        );
        assert!(
            !stdout(&out).contains("inner=0"),
            "the inner command's failed write is its status: {}",
            stdout(&out)
        );
        assert!(
            !stderr(&out).contains("not supported"),
            "the nested run used the capability: {ctx}"
        );
    }
}

/// An inner write path outside the outer's is refused with an error that
/// says so, and nothing is written there; twin: one inside works.
#[test]
fn a_nested_run_cannot_widen_the_write_paths() {
    for nobody in users() {
        let w = shared(&["a", "a/sub", "b"]);
        let target = w.path().join("b/x");
        let inner = |dir: &str, file: &Path| {
            format!(
                "{} run -w {} -- sh -c 'echo x > {}'",
                sb(),
                d(&w.path().join(dir)),
                d(file)
            )
        };
        let out = outer(nobody)
            .args(["run", "-w", &d(&w.path().join("a")), "--", "sh", "-c"])
            .arg(inner("b", &target))
            .output()
            .unwrap();
        let ctx = format!("nobody={nobody}: {}", stderr(&out));
        assert_eq!(out.status.code(), Some(125), "{ctx}");
        assert!(
            stderr(&out).contains("lies outside the outer run's write paths"),
            "{ctx}"
        );
        assert!(!target.exists(), "{ctx}");
        // Twin: inside the outer's write path.
        let inside = w.path().join("a/sub/x");
        let out = outer(nobody)
            .args(["run", "-w", &d(&w.path().join("a")), "--", "sh", "-c"])
            .arg(inner("a/sub", &inside))
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "nobody={nobody}: {}",
            stderr(&out)
        );
        assert!(inside.exists());
    }
}

/// Network: the inner run's allowlist does not open what the outer run
/// refuses (loopback only); twin: what the outer allows, the inner reaches
/// unless it refuses it itself.
#[test]
fn a_nested_run_cannot_widen_the_network() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || for _ in listener.incoming() {});
    let dest = format!("127.0.0.1:{port}");
    let connect = format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected");
    let nested = |nobody: bool, outer_flags: &[&str], inner_flags: &[&str]| {
        let mut cmd = outer(nobody);
        cmd.arg("run")
            .args(outer_flags)
            .arg("--")
            .arg(sandbox_bin());
        cmd.arg("run")
            .args(inner_flags)
            .args(["--", "bash", "-c", &connect]);
        cmd.output().unwrap()
    };
    for nobody in users() {
        // Outer off, inner asks for the destination: still off.
        let out = nested(nobody, &["--no-network"], &["--allow-net", &dest]);
        let ctx = format!("nobody={nobody}: {}", stderr(&out));
        assert_ne!(out.status.code(), Some(0), "{ctx}");
        assert!(!stdout(&out).contains("connected"), "{ctx}");
        assert!(!stderr(&out).contains("not supported"), "{ctx}");
        // Outer allows it: the inner reaches it (twin), unless it refuses.
        let out = nested(nobody, &["--allow-net", &dest], &[]);
        assert!(
            stdout(&out).contains("connected"),
            "nobody={nobody}: {}",
            stderr(&out)
        );
        let out = nested(nobody, &["--allow-net", &dest], &["--no-network"]);
        assert!(
            !stdout(&out).contains("connected"),
            "nobody={nobody}: {}",
            stderr(&out)
        );
        // An inner destination the outer does not list: refused.
        let other = format!("127.0.0.1:{}", port.wrapping_add(1).max(1));
        let out = nested(nobody, &["--allow-net", &dest], &["--allow-net", &other]);
        assert_eq!(
            out.status.code(),
            Some(125),
            "nobody={nobody}: {}",
            stderr(&out)
        );
        assert!(
            stderr(&out).contains("can only be narrowed"),
            "{}",
            stderr(&out)
        );
    }
}

/// The inner command's refusals are in the outer run's record, under
/// `nested`; the outer's own refusal stays in its own.
#[test]
fn the_inner_refusals_reach_the_outer_record() {
    for nobody in users() {
        let w = shared(&["inner"]);
        let report = w.path().join("report.json");
        let (inner_denied, outer_denied) = (w.path().join("inner-denied"), PathBuf::from("/"));
        let script = format!(
            "{} run -w {} -- sh -c 'echo x > {}'; echo y > {}/outer-denied",
            sb(),
            d(&w.path().join("inner")),
            d(&inner_denied),
            d(&outer_denied),
        );
        let out = outer(nobody)
            .args(["run", "--report", &d(&report), "-w", &d(w.path()), "--"])
            .args(["sh", "-c", &script])
            .output()
            .unwrap();
        let ctx = format!("nobody={nobody}: {}", stderr(&out));
        let record: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
        let targets = |v: &serde_json::Value| -> Vec<String> {
            v["mediation"]["refused"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|r| r["target"].as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default()
        };
        let nested = record["nested"].as_array().expect("nested records");
        assert_eq!(nested.len(), 1, "{ctx}");
        assert!(
            targets(&nested[0]).contains(&d(&inner_denied)),
            "{:?} {ctx}",
            targets(&nested[0])
        );
        assert_eq!(nested[0]["argv"][0], "sh");
        // Twin: the outer command's own refusal is the outer's.
        assert!(
            targets(&record).iter().any(|t| t.ends_with("outer-denied")),
            "{:?} {ctx}",
            targets(&record)
        );
        assert!(!targets(&record).contains(&d(&inner_denied)));
    }
}

/// Whether `pid` is a live process (not gone, not a zombie).
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| !rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

fn wait_for_file(path: &Path, child: &mut std::process::Child) -> i32 {
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(pid) = std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            return pid;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "the outer run ended before {} was written: {status}",
                path.display()
            );
        }
        assert!(Instant::now() < until, "{} never written", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The inner command and its background child are alive while the outer
/// run lasts, and gone once it ends: at the outer command's exit, and at
/// the outer run's timeout.
#[test]
fn nested_runs_end_with_the_outer_run() {
    for nobody in users() {
        for by_timeout in [false, true] {
            let w = shared(&[]);
            let (main, bg, go) = (
                w.path().join("pid"),
                w.path().join("bg"),
                w.path().join("go"),
            );
            let inner = format!(
                "{} run -w {} -- sh -c 'sleep 1000 & echo $! > {}; echo $$ > {}; wait'",
                sb(),
                d(w.path()),
                d(&bg),
                d(&main)
            );
            // Ended by the outer command's exit (once the test says so), or
            // by its timeout.
            let script = if by_timeout {
                inner
            } else {
                format!(
                    "{inner} & while [ ! -e {go} ]; do sleep 0.05; done; exit 0",
                    go = d(&go)
                )
            };
            let mut cmd = outer(nobody);
            cmd.args(["run", "-w", &d(w.path())]);
            if by_timeout {
                cmd.args(["--timeout", "5"]);
            }
            let mut child = cmd
                .args(["--", "sh", "-c", &script])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            let bg_pid = wait_for_file(&bg, &mut child);
            let main_pid = wait_for_file(&main, &mut child);
            let ctx = format!("nobody={nobody} by_timeout={by_timeout}");
            assert!(alive(bg_pid) && alive(main_pid), "{ctx}: alive first");
            std::fs::write(&go, "").unwrap();
            let out = child.wait_with_output().unwrap();
            let code = out.status.code();
            assert_eq!(
                code,
                Some(if by_timeout { 124 } else { 0 }),
                "{ctx}: {}",
                stderr(&out)
            );
            assert!(
                !alive(main_pid),
                "{ctx}: the inner command outlived the outer run"
            );
            assert!(
                !alive(bg_pid),
                "{ctx}: the inner background child outlived the outer run"
            );
        }
    }
}

/// A variable naming an fd that is no nest socket grants nothing: one
/// naming a file, or a socket the command made itself, leaves the inner
/// run to confine itself, which the outer run refuses (today's message);
/// outside any run, such a variable changes nothing (the run confines
/// itself and works). Twin: the real capability works.
#[test]
fn a_forged_capability_grants_nothing() {
    for nobody in users() {
        let w = shared(&[]);
        let made = w.path().join("made");
        let inner = format!("{} run -w {} -- touch {}", sb(), d(w.path()), d(&made));
        // A file under the variable's number.
        let file = format!("exec 7</dev/null; SANDBOX_NEST_FD=7 {inner}");
        // A socket pair the command made, its peer closed.
        let own = format!(
            "exec python3 -c 'import socket,os\n\
             a,b=socket.socketpair(socket.AF_UNIX,socket.SOCK_SEQPACKET)\n\
             b.close(); os.set_inheritable(a.fileno(),True)\n\
             os.environ[\"SANDBOX_NEST_FD\"]=str(a.fileno())\n\
             os.execvp(\"sh\",[\"sh\",\"-c\",\"{}\"])'",
            inner.replace('\'', "\\'")
        );
        for script in [&file, &own] {
            let out = outer(nobody)
                .args(["run", "-w", &d(w.path()), "--", "sh", "-c", script])
                .output()
                .unwrap();
            let ctx = format!("nobody={nobody} {script}: {}", stderr(&out));
            assert_eq!(out.status.code(), Some(125), "{ctx}");
            assert!(stderr(&out).contains("a sandbox run inside a run"), "{ctx}");
            assert!(!made.exists(), "{ctx}");
        }
        // Outside any run: the variable changes nothing.
        let out = outer(nobody)
            .env("SANDBOX_NEST_FD", "0")
            .args(["run", "-w", &d(w.path()), "--", "touch", &d(&made)])
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "nobody={nobody}: {}",
            stderr(&out)
        );
        assert!(made.exists());
        std::fs::remove_file(&made).unwrap();
        // Twin: the real capability.
        let out = outer(nobody)
            .args(["run", "-w", &d(w.path()), "--", "sh", "-c", &inner])
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "nobody={nobody}: {}",
            stderr(&out)
        );
        assert!(made.exists());
    }
}

/// The capability never runs a command unconfined: a nested
/// danger-full-access run is refused, and a request without a policy sent
/// by hand too; twin: the same command under a policy runs.
#[test]
fn the_capability_cannot_run_anything_unconfined() {
    for nobody in users() {
        let w = shared(&["out"]);
        let escaped = w.path().join("out/escaped");
        // The operator allows danger-full-access (for the inner run).
        let config = w.path().join("config.toml");
        std::fs::write(&config, "[sandbox]\nallow_danger_full_access = true\n").unwrap();
        let out = outer(nobody)
            .args(["run", "-w", &d(w.path()), "--"])
            .arg(sandbox_bin())
            .args([
                "run",
                "--config",
                &d(&config),
                "--mode",
                "danger-full-access",
            ])
            .args(["--", "touch"])
            .arg(&escaped)
            .output()
            .unwrap();
        let ctx = format!("nobody={nobody}: {}", stderr(&out));
        assert_eq!(out.status.code(), Some(125), "{ctx}");
        assert!(stderr(&out).contains("cannot run unconfined"), "{ctx}");
        // By hand: hello, then a request with `"policy": null`.
        let script = format!(
            r#"
import array, json, os, socket, struct
door = socket.socket(fileno=int(os.environ["SANDBOX_NEST_FD"]))
def ask(argv, policy):
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    door.sendmsg([b"hello"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [b.fileno()]))])
    b.close()
    assert a.recv(15) == b"sandbox-nest 1\n"
    req = dict(argv=[list(x) for x in argv], cwd=None, env=[], env_overrides=[],
               policy=policy, limits={{}}, allow_unlimited=True, observe_writes=False,
               require_full=False, echo_stderr=True, trusted_files=[])
    body = json.dumps(req).encode()
    a.sendmsg([struct.pack("<I", len(body)) + body], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0, 1, 2]))])
    head = a.recv(4)
    print(a.recv(struct.unpack("<I", head)[0]).decode())
ask([b"touch", {target:?}.encode()], None)
ask([b"touch", {target:?}.encode() + b"\0x"], dict(write_paths=[{dir:?}]))
"#,
            target = d(&escaped),
            dir = d(&w.path().join("out")),
        );
        let out = outer(nobody)
            .args([
                "run",
                "-w",
                &d(&w.path().join("out")),
                "--",
                "python3",
                "-c",
                &script,
            ])
            .output()
            .unwrap();
        let ctx = format!("nobody={nobody}: {} {}", stdout(&out), stderr(&out));
        assert!(stdout(&out).contains("cannot run unconfined"), "{ctx}");
        // A NUL in an argument: refused as a run refuses it.
        assert!(stdout(&out).contains("contains a NUL byte"), "{ctx}");
        assert!(!escaped.exists(), "{ctx}");
        // Twin: under a policy (the outer's write path), it runs.
        let out = outer(nobody)
            .args(["run", "-w", &d(&w.path().join("out")), "--"])
            .arg(sandbox_bin())
            .args(["run", "-w", &d(&w.path().join("out")), "--", "touch"])
            .arg(&escaped)
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "nobody={nobody}: {}",
            stderr(&out)
        );
        assert!(escaped.exists());
    }
}

/// The runner serves only requests made in the run: a process outside it
/// holding the run's nest socket (taken with `pidfd_getfd`, as root) gets
/// its connection closed without a hello; twin: the same request from the
/// run's command is answered.
#[test]
fn a_process_outside_the_run_cannot_use_the_socket() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        sandbox_tests::cannot_do_its_job(
            "a_process_outside_the_run_cannot_use_the_socket",
            "taking another process's fd (pidfd_getfd) needs root",
        );
        return;
    }
    let ask = r#"
import array, ctypes, os, socket, sys
if len(sys.argv) > 1:
    pid, fd = int(sys.argv[1]), int(sys.argv[2])
    fd = ctypes.CDLL(None, use_errno=True).syscall(438, os.pidfd_open(pid), fd, 0)
    assert fd >= 0, ctypes.get_errno()
else:
    fd = int(os.environ["SANDBOX_NEST_FD"])
door = socket.socket(fileno=fd)
a, b = socket.socketpair()
door.sendmsg([b"hello"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [b.fileno()]))])
b.close()
print("answer=" + repr(a.recv(15)))
"#;
    for nobody in users() {
        let w = shared(&[]);
        let (pid, fd, go) = (
            w.path().join("pid"),
            w.path().join("fd"),
            w.path().join("go"),
        );
        let script = format!(
            "python3 -c '{ask}' > {out}; echo $SANDBOX_NEST_FD > {fd}.t; mv {fd}.t {fd}; \
             echo $$ > {pid}; while [ ! -e {go} ]; do sleep 0.05; done",
            out = d(&w.path().join("inside")),
            fd = d(&fd),
            pid = d(&pid),
            go = d(&go),
        );
        let mut child = outer(nobody)
            .args(["run", "-w", &d(w.path()), "--", "sh", "-c", &script])
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let outer_pid = wait_for_file(&pid, &mut child);
        let door = std::fs::read_to_string(&fd).unwrap();
        let out = Command::new("python3")
            .args(["-c", ask, &outer_pid.to_string(), door.trim()])
            .output()
            .unwrap();
        std::fs::write(&go, "").unwrap();
        let ran = child.wait_with_output().unwrap();
        let ctx = format!("nobody={nobody}: {} {}", stderr(&out), stderr(&ran));
        assert_eq!(stdout(&out).trim(), "answer=b''", "{ctx}");
        let inside = std::fs::read_to_string(w.path().join("inside")).unwrap();
        assert_eq!(inside.trim(), "answer=b'sandbox-nest 1\\n'", "{ctx}");
    }
}

/// A stop signal to the nested `sandbox run` reaches its command through
/// the outer runner (the command's trap runs), and the nested run exits
/// with the command's status, as a run passes a signal on.
#[test]
fn a_stop_signal_reaches_the_nested_command() {
    for nobody in users() {
        let w = shared(&[]);
        let (client, ready, got) = (
            w.path().join("client"),
            w.path().join("ready"),
            w.path().join("got"),
        );
        let script = format!(
            "echo $$ > {client}; exec {sb} run -w {w} -- sh -c 'trap \"echo int > {got}; exit 7\" INT; \
             echo $$ > {ready}; while :; do sleep 0.05; done'",
            client = d(&client),
            sb = sb(),
            w = d(w.path()),
            got = d(&got),
            ready = d(&ready),
        );
        let mut child = outer(nobody)
            .args(["run", "-w", &d(w.path()), "--", "sh", "-c", &script])
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        wait_for_file(&ready, &mut child);
        let client_pid = wait_for_file(&client, &mut child);
        // SAFETY: kill has no memory effects; the pid is the nested run's
        // client, alive (its command is).
        assert_eq!(unsafe { libc::kill(client_pid, libc::SIGINT) }, 0);
        let out = child.wait_with_output().unwrap();
        let ctx = format!("nobody={nobody}: {}", stderr(&out));
        assert_eq!(out.status.code(), Some(7), "{ctx}");
        assert_eq!(
            std::fs::read_to_string(&got).unwrap_or_default().trim(),
            "int",
            "{ctx}"
        );
    }
}

/// At most 8 nested runs are served at once: a ninth is refused, saying so,
/// while eight run; twin: once they have ended, another runs.
#[test]
fn nested_runs_are_bounded() {
    for nobody in users() {
        let w = shared(&[]);
        let dir = d(w.path());
        let script = format!(
            "for i in 1 2 3 4 5 6 7 8; do \
               {sb} run -w {dir} -- sh -c \"touch {dir}/ready.$i; while [ ! -e {dir}/go ]; do sleep 0.05; done\" & \
             done; \
             while [ $(ls {dir} | grep -c ready) -lt 8 ]; do sleep 0.05; done; \
             {sb} run -- true; echo ninth=$?; touch {dir}/go; wait; \
             {sb} run -- true; echo after=$?",
            sb = sb(),
        );
        let out = outer(nobody)
            .args(["run", "-w", &dir, "--", "sh", "-c", &script])
            .output()
            .unwrap();
        let ctx = format!("nobody={nobody}: {} {}", stdout(&out), stderr(&out));
        assert!(stdout(&out).contains("ninth=125"), "{ctx}");
        assert!(
            stderr(&out).contains("already serves 8 nested runs"),
            "{ctx}"
        );
        assert!(stdout(&out).contains("after=0"), "{ctx}");
    }
}

/// A `sandbox run` outside any run (no seccomp filter) never uses
/// `SANDBOX_NEST_FD`: with the variable naming a `SOCK_SEQPACKET` socket
/// whose peer answers as a runner would, the run confines itself (its write
/// outside the write path is refused, the one inside works) and the peer
/// receives nothing. Twin: the same peer answers a hello sent by hand, so
/// it would have been trusted.
#[test]
fn an_unconfined_run_ignores_a_forged_capability() {
    for nobody in users() {
        let (w, elsewhere) = (shared(&[]), shared(&[]));
        let (inside, outside) = (w.path().join("in"), elsewhere.path().join("out"));
        let fake = r#"
import array, os, socket, subprocess, sys, threading
a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
got = []
def serve():
    while True:
        msg, anc, _, _ = a.recvmsg(64, socket.CMSG_SPACE(16))
        if not msg and not anc:
            return
        got.append(msg)
        for level, kind, data in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds = array.array("i")
                fds.frombytes(data[: len(data) - len(data) % 4])
                for fd in fds:
                    c = socket.socket(fileno=fd)
                    c.sendall(b"sandbox-nest 1\n")
                    got.append(c.recv(1 << 20))
                    c.close()
t = threading.Thread(target=serve)
t.start()
env = dict(os.environ, SANDBOX_NEST_FD=str(b.fileno()))
code = subprocess.run(sys.argv[1:], env=env, pass_fds=[b.fileno()]).returncode
print("received=%d" % len(got), flush=True)
# The twin: a hello by hand is answered.
x, y = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
b.sendmsg([b"hello"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [y.fileno()]))])
y.close()
print("answered=%s" % (x.recv(15) == b"sandbox-nest 1\n"), flush=True)
x.close()
b.close()
t.join()
print("code=%d" % code, flush=True)
"#;
        let script = format!("echo i > {}; echo o > {}", d(&inside), d(&outside));
        let mut cmd = if nobody {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]);
            c.arg("/usr/bin/python3");
            c
        } else {
            Command::new("python3")
        };
        let out = cmd
            .current_dir(std::env::temp_dir())
            .env_remove("SANDBOX_CONFIG")
            .env("XDG_CONFIG_HOME", "/nonexistent/sandbox-tests-config")
            .args(["-c", fake])
            .arg(sandbox_bin())
            .args(["run", "-w", &d(w.path()), "--", "sh", "-c", &script])
            .output()
            .unwrap();
        let ctx = format!("nobody={nobody}: {} {}", stdout(&out), stderr(&out));
        assert!(stdout(&out).contains("received=0\n"), "{ctx}");
        assert!(stdout(&out).contains("answered=True\n"), "twin: {ctx}");
        assert!(inside.exists(), "positive control: {ctx}");
        assert!(!outside.exists(), "the run confined itself: {ctx}");
        assert!(!stdout(&out).contains("code=0\n"), "{ctx}");
    }
}

/// A nested run is charged to the outer run's limits: under an outer
/// `--pids 40` whose command holds 25 processes, a nested run cannot start
/// 25 more (its own limit, the outer's 40, would admit them alone); its
/// cgroups are inside the outer run's. Twin: 5 held and 10 more fit. Root
/// only: as nobody no cgroup can be made here, so no limit is held (the
/// refusal is tested in limits.rs).
#[test]
fn a_nested_run_is_charged_to_the_outer_runs_limits() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        sandbox_tests::cannot_do_its_job(
            "a_nested_run_is_charged_to_the_outer_runs_limits",
            "per-run cgroups need root here",
        );
        return;
    }
    let w = shared(&[]);
    let forker = w.path().join("fork.py");
    std::fs::write(
        &forker,
        "import os, sys, time\n\
         made = 0\n\
         for _ in range(int(sys.argv[1])):\n\
         \x20   try:\n\
         \x20       pid = os.fork()\n\
         \x20   except OSError:\n\
         \x20       break\n\
         \x20   if pid == 0:\n\
         \x20       time.sleep(20)\n\
         \x20       os._exit(0)\n\
         \x20   made += 1\n\
         print(made, flush=True)\n\
         print(open('/proc/self/cgroup').read(), file=sys.stderr, flush=True)\n",
    )
    .unwrap();
    for (held, more, all_made) in [(25, 25, false), (5, 10, true)] {
        let (outer_out, inner_out) = (w.path().join("outer"), w.path().join("inner"));
        let script = format!(
            "/usr/bin/python3 {f} {held} > {oo} 2>{oo}.cg; \
             {sb} run -w {w} -- /usr/bin/python3 {f} {more} > {io} 2>{io}.cg",
            f = d(&forker),
            oo = d(&outer_out),
            io = d(&inner_out),
            sb = sb(),
            w = d(w.path()),
        );
        let out = sandbox()
            .args(["run", "--pids", "40", "-w", &d(w.path()), "--"])
            .args(["sh", "-c", &script])
            .output()
            .unwrap();
        let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
        let count = |p: &Path| read(p).trim().parse::<u32>().unwrap_or(0);
        let ctx = format!(
            "held={held} more={more}: outer {} inner {} {}",
            read(&outer_out),
            read(&inner_out),
            stderr(&out)
        );
        assert_eq!(count(&outer_out), held, "{ctx}");
        if all_made {
            assert_eq!(count(&inner_out), more, "twin: {ctx}");
        } else {
            assert!(
                count(&inner_out) < more,
                "the nested run's processes are not charged to the outer's limit: {ctx}"
            );
        }
        // The nested run's cgroups (v2 and the v1 pids group) are inside
        // the outer run's.
        let groups = |p: &Path| -> Vec<(String, String)> {
            read(&PathBuf::from(format!("{}.cg", d(p))))
                .lines()
                .filter_map(|l| {
                    let mut f = l.splitn(3, ':');
                    let (_, c, path) = (f.next()?, f.next()?, f.next()?);
                    (c.is_empty() || c == "pids").then(|| (c.to_owned(), path.to_owned()))
                })
                .collect()
        };
        let (og, ig) = (groups(&outer_out), groups(&inner_out));
        assert!(!og.is_empty(), "{ctx}");
        for (c, path) in &og {
            let inner = ig.iter().find(|(k, _)| k == c).map(|(_, p)| p.as_str());
            assert!(
                inner.is_some_and(|i| i.starts_with(&format!("{path}/"))),
                "{c}: outer {path}, inner {inner:?}"
            );
        }
    }
}

/// A nested run ended because its requester died is recorded as
/// `cancelled` (its requester ended), one still going when the outer
/// command exits as `cancelled` (the outer run ended), neither as a
/// timeout; twin: one that ends on its own is `ok`.
#[test]
fn a_nested_run_ended_from_outside_is_recorded_as_cancelled() {
    for nobody in users() {
        let w = shared(&[]);
        let report = w.path().join("report.json");
        let p = |n: &str| d(&w.path().join(n));
        let script = format!(
            "{sb} run -w {w} -- sh -c 'echo $$ > {a}; exec sleep 1000' & echo $! > {ca}; \
             {sb} run -w {w} -- true; \
             {sb} run -w {w} -- sh -c 'echo $$ > {b}; exec sleep 1000' & \
             while [ ! -s {a} ] || [ ! -s {b} ]; do sleep 0.05; done; \
             kill -9 $(cat {ca}); \
             while [ -e /proc/$(cat {a}) ]; do sleep 0.05; done; exit 0",
            sb = sb(),
            w = d(w.path()),
            a = p("a"),
            b = p("b"),
            ca = p("ca"),
        );
        let out = outer(nobody)
            .args(["run", "--report", &d(&report), "-w", &d(w.path()), "--"])
            .args(["sh", "-c", &script])
            .output()
            .unwrap();
        let ctx = format!("nobody={nobody}: {}", stderr(&out));
        assert_eq!(out.status.code(), Some(0), "{ctx}");
        let record: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
        let nested = record["nested"].as_array().expect("nested records");
        let find = |needle: &str| {
            nested
                .iter()
                .find(|n| n["argv"].to_string().contains(needle))
                .unwrap_or_else(|| panic!("no nested record for {needle}: {record}"))
        };
        let (a, b, t) = (find(&p("a")), find(&p("b")), find("\"true\""));
        assert_eq!(t["classification"]["class"], "ok", "twin: {t}");
        for (n, why) in [(a, "its requester"), (b, "the outer run ended")] {
            assert_eq!(n["classification"]["class"], "cancelled", "{n} {ctx}");
            assert!(
                n["classification"]["reason"]
                    .as_str()
                    .is_some_and(|r| r.starts_with(why)),
                "{n}"
            );
            assert_eq!(n["timed_out"], false, "{n}");
        }
    }
}

/// A stop signal to the outer `sandbox run` reaches a nested command once:
/// through the nested run's own `sandbox run` (in the outer command's
/// process group), which passes it on, and not a second time from the
/// outer runner's own stop handling. Shown with a nested `sandbox run`
/// that ignores SIGINT: its command gets none (pre-fix: the outer runner
/// sent it one); twin: one that does not ignore it passes it on.
#[test]
fn a_stop_signal_to_the_outer_run_reaches_the_nested_command_once() {
    for nobody in users() {
        for ignored in [false, true] {
            let w = shared(&[]);
            let (ready, got) = (w.path().join("ready"), w.path().join("got"));
            let script = format!(
                "{trap}{sb} run -w {w} -- sh -c 'trap \"echo int >> {got}\" INT; \
                 echo $$ > {ready}; while :; do sleep 0.05; done'",
                trap = if ignored { "trap '' INT; " } else { "" },
                sb = sb(),
                w = d(w.path()),
                got = d(&got),
                ready = d(&ready),
            );
            let mut child = outer(nobody)
                .args(["run", "-w", &d(w.path()), "--", "sh", "-c", &script])
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            wait_for_file(&ready, &mut child);
            // SAFETY: kill has no memory effects; the outer sandbox run, alive.
            assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
            let out = child.wait_with_output().unwrap();
            let ctx = format!("nobody={nobody} ignored={ignored}: {}", stderr(&out));
            let got = std::fs::read_to_string(&got).unwrap_or_default();
            if ignored {
                assert_eq!(got, "", "only the requester passes signals on: {ctx}");
            } else {
                assert_eq!(got, "int\n", "twin: passed on by the requester: {ctx}");
            }
        }
    }
}

/// The outer run's summary has one line per nested run that did not end
/// `ok`, and `--explain` one per nested run; the nested command's text in
/// them is escaped (no raw ESC, BEL or line break). Twin: the nested run
/// that ends `ok` has no summary line.
#[test]
fn nested_runs_are_listed_in_the_outer_runs_summary_and_explain() {
    for nobody in users() {
        let w = shared(&[]);
        let script = format!(
            "{sb} run -w {w} -- true; \
             {sb} run -w {w} -- sh -c 'exit 3' \"$(printf 'x\\033]0;t\\007\\nnext')\"; exit 0",
            sb = sb(),
            w = d(w.path()),
        );
        for explain in [false, true] {
            let mut cmd = outer(nobody);
            cmd.args(["run", "-w", &d(w.path())]);
            if explain {
                cmd.arg("--explain");
            }
            let out = cmd.args(["--", "sh", "-c", &script]).output().unwrap();
            let err = stderr(&out);
            let ctx = format!("nobody={nobody} explain={explain}: {err}");
            assert_eq!(out.status.code(), Some(0), "{ctx}");
            assert!(
                !err.contains('\u{1b}') && !err.contains('\u{7}'),
                "raw control bytes: {ctx}"
            );
            let failed = err
                .lines()
                .find(|l| l.contains("nested run `sh -c exit 3 x"))
                .unwrap_or_else(|| panic!("no line for the failed nested run: {ctx}"));
            assert!(
                failed.contains("next") && failed.contains("the command failed, exit 3"),
                "one escaped line: {ctx}"
            );
            let ok = err.lines().find(|l| l.contains("nested run `true`"));
            if explain {
                assert!(ok.is_some_and(|l| l.contains(": ok, exit 0")), "{ctx}");
            } else {
                assert!(failed.starts_with("sandbox: nested run"), "{ctx}");
                assert!(ok.is_none(), "twin: an ok nested run has no line: {ctx}");
            }
        }
    }
}
