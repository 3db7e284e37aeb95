//! Kept commands of a `sandbox session` (#45, docs/session.md "Kept
//! commands"): `"keep": true` keeps a command's background processes until
//! the session ends, on a zygote run of its own. Root and nobody.
//!
//! Each test drives one session request by request, and looks at the kept
//! processes from outside the session (this process) too.
#![cfg(target_os = "linux")]

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Stdio};
use std::time::{Duration, Instant};

use sandbox_tests::{sandbox, sandbox_as_nobody, shared_dir, thread_group_gone, users};
use serde_json::{json, Value};

/// One session, driven a request at a time.
struct Session {
    child: Child,
    stdin: Option<ChildStdin>,
    events: std::sync::mpsc::Receiver<Value>,
    /// Every event read so far.
    seen: Vec<Value>,
}

impl Session {
    fn open(nobody: bool, dir: &Path, launch: &str) -> Self {
        Self::open_with(nobody, &["-w".as_ref(), dir.as_os_str()], launch)
    }

    /// A session with `policy` (its policy flags) and `--launch launch`.
    fn open_with(nobody: bool, policy: &[&std::ffi::OsStr], launch: &str) -> Self {
        let mut cmd = if nobody {
            sandbox_as_nobody()
        } else {
            sandbox()
        };
        let mut child = cmd
            .args(["session", "--backend", "auto", "--on-unsupported", "error"])
            .args(policy)
            .args(["--launch", launch])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn sandbox session");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().unwrap();
        let (tx, events) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let event: Value = serde_json::from_str(&line).expect("an event is JSON");
                if tx.send(event).is_err() {
                    break;
                }
            }
        });
        let mut s = Session {
            child,
            stdin,
            events,
            seen: Vec::new(),
        };
        let hello = s.next();
        assert_eq!(hello["event"], "hello", "{hello}");
        s
    }

    fn send(&mut self, req: Value) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{req}").unwrap();
        stdin.flush().unwrap();
    }

    fn next(&mut self) -> Value {
        let e = self
            .events
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("no event within 60 s; so far: {:?}", self.seen));
        self.seen.push(e.clone());
        e
    }

    /// The next `exit` or `error` event (skipping `started` and `refused`).
    fn answer(&mut self) -> Value {
        loop {
            let e = self.next();
            if e["event"] == "exit" || e["event"] == "error" {
                return e;
            }
        }
    }

    /// Runs `sh -c script` (with `extra` fields) and returns its answer.
    fn run(&mut self, id: &str, script: &str, extra: Value) -> Value {
        let mut req = json!({"id": id, "op": "run", "argv": ["/bin/sh", "-c", script]});
        if let Value::Object(extra) = extra {
            req.as_object_mut().unwrap().extend(extra);
        }
        self.send(req);
        self.answer()
    }

    /// Closes the session: every event up to `closed`, and its exit status.
    fn close(mut self) -> (Vec<Value>, i32) {
        self.send(json!({"op": "close"}));
        self.stdin = None;
        self.rest()
    }

    /// The events up to `closed`, and the exit status.
    fn rest(mut self) -> (Vec<Value>, i32) {
        let mut tail = Vec::new();
        loop {
            let e = self.next();
            let last = e["event"] == "closed";
            tail.push(e);
            if last {
                break;
            }
        }
        let status = self.child.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        (
            tail,
            status.code().unwrap_or(128 + status.signal().unwrap_or(0)),
        )
    }
}

fn pid_in(file: &Path) -> i32 {
    std::fs::read_to_string(file)
        .unwrap_or_else(|e| panic!("{}: {e}", file.display()))
        .trim()
        .parse()
        .unwrap()
}

/// Whether `pid` is a live process (not a zombie) whose command line
/// holds `mark`.
fn alive(pid: i32, mark: &str) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat
        .rsplit(')')
        .next()
        .and_then(|r| r.split_whitespace().next());
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    state != Some("Z") && String::from_utf8_lossy(&cmdline).contains(mark)
}

/// Waits up to 5 s for `what`.
fn eventually(what: impl Fn() -> bool) -> bool {
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        if what() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    what()
}

/// A loopback TCP server in Python that greets each connection, writes its
/// port and pid to files in `dir`, and runs until it is ended.
fn server(dir: &Path) -> String {
    let d = dir.display();
    std::fs::write(
        dir.join("server.py"),
        format!(
            "import os, socket\n\
             s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(8)\n\
             open('{d}/pid.tmp', 'w').write(str(os.getpid()))\n\
             os.rename('{d}/pid.tmp', '{d}/pid')\n\
             open('{d}/port.tmp', 'w').write(str(s.getsockname()[1]))\n\
             os.rename('{d}/port.tmp', '{d}/port')\n\
             while True:\n    c, _ = s.accept(); c.sendall(b'kept server\\n'); c.close()\n"
        ),
    )
    .unwrap();
    format!(
        "python3 {d}/server.py </dev/null >/dev/null 2>&1 & \
         until [ -s {d}/port ]; do sleep 0.05; done; echo up"
    )
}

/// A command that connects to the server's port and prints what it says.
fn client(dir: &Path) -> String {
    let d = dir.display();
    format!(
        "python3 -c 'import socket,sys\ntry:\n c = socket.create_connection((\"127.0.0.1\", \
         int(open(sys.argv[1]).read())), timeout=5); print(c.recv(100).decode().strip())\n\
         except OSError as e:\n print(\"errno\", e.errno)' {d}/port"
    )
}

/// Whether this process reaches a server on `port`.
fn port_open(port: u16) -> bool {
    std::net::TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_secs(2),
    )
    .is_ok()
}

/// A kept server is reached by a later command of the session, and it is
/// gone (pid, port) once the session closed. Twin: the same server
/// without keep is gone before the next command.
#[test]
fn a_kept_server_serves_later_commands_and_ends_with_the_session() {
    for nobody in users() {
        let (_tmp, dir) = shared_dir();
        let mut s = Session::open(nobody, &dir, "shared");
        let up = s.run("srv", &server(&dir), json!({"keep": true, "output": true}));
        assert_eq!(up["event"], "exit", "{up}");
        assert_eq!(up["status"], 0, "{up}");
        assert_eq!(up["stdout"], "up\n", "{up}");
        assert!(up["kept"].as_u64().unwrap() >= 1, "{up}");
        assert_eq!(up["leftover_processes_ended"], 0, "{up}");
        let pid = pid_in(&dir.join("pid"));
        let port: u16 = std::fs::read_to_string(dir.join("port"))
            .unwrap()
            .parse()
            .unwrap();
        // Positive control: a later command reaches it, twice.
        for id in ["c1", "c2"] {
            let got = s.run(id, &client(&dir), json!({"output": true}));
            assert_eq!(
                got["stdout"], "kept server\n",
                "nobody {nobody}: a later command does not reach the kept server: {got}"
            );
        }
        assert!(alive(pid, "server.py"), "kept server {pid} gone early");
        let (tail, status) = s.close();
        assert_eq!(status, 0, "{tail:?}");
        let ended: Vec<&Value> = tail.iter().filter(|e| e["event"] == "kept_ended").collect();
        assert_eq!(ended.len(), 1, "{tail:?}");
        assert_eq!(ended[0]["id"], "srv", "{tail:?}");
        assert!(
            ended[0]["processes_ended"].as_u64().unwrap() >= 1,
            "{tail:?}"
        );
        assert_eq!(ended[0]["timed_out"], false, "{tail:?}");
        assert_eq!(tail.last().unwrap()["why"], "close", "{tail:?}");
        // From outside the session: gone.
        assert!(
            eventually(|| !alive(pid, "server.py")),
            "nobody {nobody}: the kept server {pid} outlived its session"
        );
        assert!(!port_open(port), "port {port} still open after the session");

        // Twin: without keep, gone before the next command.
        let (_tmp, dir) = shared_dir();
        let mut s = Session::open(nobody, &dir, "shared");
        let up = s.run("srv", &server(&dir), json!({"output": true}));
        assert_eq!(up["stdout"], "up\n", "{up}");
        assert!(up.get("kept").is_none(), "{up}");
        assert!(
            up["leftover_processes_ended"].as_u64().unwrap() >= 1,
            "{up}"
        );
        let pid = pid_in(&dir.join("pid"));
        let got = s.run("c1", &client(&dir), json!({"output": true}));
        assert_eq!(
            got["stdout"],
            format!("errno {}\n", libc::ECONNREFUSED),
            "twin: the server outlived its command without keep: {got}"
        );
        assert!(!alive(pid, "server.py"), "twin: {pid} alive");
        let (tail, _) = s.close();
        assert!(tail.iter().all(|e| e["event"] != "kept_ended"), "{tail:?}");
    }
}

/// A later command's cleanup (the shared zygote's `kill(-1)`) does not end
/// a kept process; a later command cannot signal it (`EPERM`) while a
/// process of its own command can, nor can it signal a later command; a
/// refusal a kept process makes after its command's exit event is in
/// `kept_ended` (not in the exit event).
#[test]
fn later_commands_neither_end_nor_signal_a_kept_process() {
    for nobody in users() {
        let (_tmp, dir) = shared_dir();
        let d = dir.display();
        let outside = format!("/var/tmp/sandbox-kept-refusal-{}", std::process::id());
        let mut s = Session::open(nobody, &dir, "shared");
        // The target (sleep) and, of the same command, a watcher that
        // signals it when `go` appears, then writes outside the write paths.
        let kept = format!(
            "sleep 1000 & echo $! > {d}/pid; t=$!; \
             ( until [ -e {d}/go ]; do sleep 0.05; done; \
               kill -0 $t 2>/dev/null; echo $? > {d}/same.tmp; mv {d}/same.tmp {d}/same; \
               echo x > {outside} 2>/dev/null; echo done > {d}/wrote; \
               until [ -e {d}/victim ]; do sleep 0.05; done; \
               kill -0 $(cat {d}/victim) 2> {d}/tried.tmp; mv {d}/tried.tmp {d}/tried ) \
               </dev/null >/dev/null 2>&1 & \
             exit 0"
        );
        let up = s.run("k", &kept, json!({"keep": true}));
        assert_eq!(up["status"], 0, "{up}");
        assert!(up["kept"].as_u64().unwrap() >= 2, "{up}");
        assert_eq!(up["refusals"], json!([]), "{up}");
        let pid = pid_in(&dir.join("pid"));
        // A later command that leaves a process: its cleanup runs.
        let left = s.run("l", "sleep 100 & exit 0", json!({}));
        assert!(
            left["leftover_processes_ended"].as_u64().unwrap() >= 1,
            "{left}"
        );
        assert!(
            alive(pid, "sleep"),
            "nobody {nobody}: a later command's cleanup ended the kept process"
        );
        // A later command cannot signal it.
        let sig = s.run(
            "s",
            &format!("kill -0 $(cat {d}/pid) 2>&1; echo rc=$?"),
            json!({"output": true}),
        );
        assert!(
            sig["stdout"]
                .as_str()
                .unwrap()
                .contains("Operation not permitted"),
            "nobody {nobody}: a later command signalled the kept process: {sig}"
        );
        assert!(alive(pid, "sleep"));
        // Positive control: a process of the kept command can, now.
        let same = s.run(
            "g",
            &format!("touch {d}/go; until [ -e {d}/wrote ]; do sleep 0.05; done; cat {d}/same"),
            json!({"output": true}),
        );
        assert_eq!(
            same["stdout"], "0\n",
            "positive control: the kept command's own process could not signal it: {same}"
        );
        assert!(!Path::new(&outside).exists(), "{outside} was written");
        // Nor can the kept command's process signal a later command's.
        let later = s.run(
            "v",
            &format!(
                "echo $$ > {d}/victim.tmp; mv {d}/victim.tmp {d}/victim; \
                 until [ -e {d}/tried ]; do sleep 0.05; done; cat {d}/tried"
            ),
            json!({"output": true}),
        );
        assert!(
            later["stdout"]
                .as_str()
                .unwrap()
                .contains("Operation not permitted"),
            "nobody {nobody}: the kept process signalled a later command: {later}"
        );
        assert_eq!(later["status"], 0, "{later}");
        assert_eq!(
            same["refusals"],
            json!([]),
            "not the later command's: {same}"
        );
        let (tail, status) = s.close();
        assert_eq!(status, 0, "{tail:?}");
        let ended = tail
            .iter()
            .find(|e| e["event"] == "kept_ended")
            .unwrap_or_else(|| panic!("{tail:?}"));
        let refusals = ended["refusals"].as_array().unwrap();
        assert!(
            refusals
                .iter()
                .any(|r| r["target"].as_str().unwrap_or("").contains(&outside)),
            "nobody {nobody}: the kept process's later refusal is not in kept_ended: {ended}"
        );
        assert!(
            eventually(|| !alive(pid, "sleep")),
            "{pid} outlived the session"
        );
    }
}

/// A session that launches each command on its own answers `keep` with an
/// error event naming the cause, and runs nothing; the same request
/// without keep runs (positive control).
#[test]
fn a_per_command_session_refuses_keep_and_runs_nothing() {
    for nobody in users() {
        let (_tmp, dir) = shared_dir();
        let d = dir.display();
        let mut s = Session::open(nobody, &dir, "per-command");
        let got = s.run("k", &format!("touch {d}/ran"), json!({"keep": true}));
        assert_eq!(got["event"], "error", "{got}");
        assert_eq!(got["id"], "k", "{got}");
        let msg = got["message"].as_str().unwrap();
        assert!(
            msg.contains("keep needs the shared launch") && msg.contains("per-command"),
            "{msg}"
        );
        assert!(
            s.seen.iter().all(|e| e["event"] != "started"),
            "{:?}",
            s.seen
        );
        std::thread::sleep(Duration::from_millis(200));
        assert!(!dir.join("ran").exists(), "nobody {nobody}: keep ran");
        let twin = s.run("t", &format!("touch {d}/ran"), json!({}));
        assert_eq!(twin["status"], 0, "{twin}");
        assert!(dir.join("ran").exists());
        let (tail, status) = s.close();
        assert_eq!(status, 0, "{tail:?}");
    }
}

/// At most 8 kept commands live in a session: the 9th is answered with an
/// error event naming the limit, and runs nothing; the 8 end with the
/// session.
#[test]
fn a_ninth_kept_command_is_refused() {
    for nobody in users() {
        let (_tmp, dir) = shared_dir();
        let d = dir.display();
        let mut s = Session::open(nobody, &dir, "shared");
        let mut pids = Vec::new();
        for i in 0..8 {
            let got = s.run(
                &format!("k{i}"),
                &format!("sleep 1000 & echo $! > {d}/pid{i}"),
                json!({"keep": true}),
            );
            assert_eq!(got["event"], "exit", "{got}");
            assert!(got["kept"].as_u64().unwrap() >= 1, "{got}");
            pids.push(pid_in(&dir.join(format!("pid{i}"))));
        }
        let ninth = s.run(
            "k8",
            &format!("touch {d}/ran; sleep 1000 &"),
            json!({"keep": true}),
        );
        assert_eq!(ninth["event"], "error", "{ninth}");
        assert!(
            ninth["message"].as_str().unwrap().contains("at most 8"),
            "{ninth}"
        );
        assert!(!dir.join("ran").exists(), "the 9th ran");
        // Not kept, it still runs.
        let plain = s.run("p", &format!("touch {d}/ran"), json!({}));
        assert_eq!(plain["status"], 0, "{plain}");
        for &pid in &pids {
            assert!(alive(pid, "sleep"), "{pid}");
        }
        let (tail, status) = s.close();
        assert_eq!(status, 0, "{tail:?}");
        let ended: Vec<&Value> = tail.iter().filter(|e| e["event"] == "kept_ended").collect();
        assert_eq!(ended.len(), 8, "{tail:?}");
        for (i, e) in ended.iter().enumerate() {
            assert_eq!(e["id"], format!("k{i}"), "{e}");
        }
        for &pid in &pids {
            assert!(
                eventually(|| !alive(pid, "sleep")),
                "nobody {nobody}: {pid} outlived the session"
            );
        }
    }
}

/// A stop signal to the session between commands ends its kept processes
/// (a `kept_ended` event, then `closed`), and the session exits 128+N.
#[test]
fn a_stop_signal_between_commands_ends_the_kept_processes() {
    for nobody in users() {
        let (_tmp, dir) = shared_dir();
        let d = dir.display();
        let mut s = Session::open(nobody, &dir, "shared");
        let got = s.run(
            "k",
            &format!("sleep 1000 & echo $! > {d}/pid"),
            json!({"keep": true}),
        );
        assert!(got["kept"].as_u64().unwrap() >= 1, "{got}");
        let pid = pid_in(&dir.join("pid"));
        // Forked before its pid was written, maybe not yet exec'd sleep.
        assert!(eventually(|| alive(pid, "sleep")));
        // SAFETY: signals the session this test started.
        assert_eq!(unsafe { libc::kill(s.child.id() as i32, libc::SIGTERM) }, 0);
        let (tail, status) = s.rest();
        assert_eq!(status, 128 + libc::SIGTERM, "{tail:?}");
        assert!(
            tail.iter()
                .any(|e| e["event"] == "kept_ended" && e["id"] == "k"),
            "{tail:?}"
        );
        assert_eq!(tail.last().unwrap()["why"], "stopped by a signal");
        assert!(
            eventually(|| !alive(pid, "sleep")),
            "nobody {nobody}: {pid} outlived the stopped session"
        );
    }
}

/// With output, a kept command's background writer never blocks: the
/// session reads and discards what it writes after the exit event (counted
/// in `kept_ended`), and it is alive until the session ends.
#[test]
fn a_kept_writer_is_drained_until_the_session_ends() {
    for nobody in users() {
        let (_tmp, dir) = shared_dir();
        let d = dir.display();
        let mut s = Session::open(nobody, &dir, "shared");
        let got = s.run(
            "w",
            &format!(
                "echo first; ( while :; do yes line | head -c 65536; yes err | head -c 65536 >&2; \
                 done ) & \
                 echo $! > {d}/pid; exit 0"
            ),
            json!({"keep": true, "output": true}),
        );
        assert_eq!(got["status"], 0, "{got}");
        assert!(
            got["stdout"].as_str().unwrap().starts_with("first\n"),
            "{got}"
        );
        let pid = pid_in(&dir.join("pid"));
        // More than a pipe holds (64 KiB) is written meanwhile.
        let later = s.run("n", "sleep 1", json!({}));
        assert_eq!(later["status"], 0, "{later}");
        assert!(
            alive(pid, "sh"),
            "nobody {nobody}: the writer died (blocked or SIGPIPE?)"
        );
        let (tail, status) = s.close();
        assert_eq!(status, 0, "{tail:?}");
        let ended = tail
            .iter()
            .find(|e| e["event"] == "kept_ended")
            .unwrap_or_else(|| panic!("{tail:?}"));
        assert!(
            ended["stdout_discarded"].as_u64().unwrap() > 4 * 65536,
            "{ended}"
        );
        assert!(
            ended["stderr_discarded"].as_u64().unwrap() > 4 * 65536,
            "{ended}"
        );
        assert!(ended["processes_ended"].as_u64().unwrap() >= 1, "{ended}");
        assert!(
            eventually(|| !alive(pid, "sh")),
            "{pid} outlived the session"
        );
    }
}

/// `python3` or `node` with `args`, as nobody when `nobody`.
fn client_command(nobody: bool, program: &str) -> std::process::Command {
    // A user's tool shims (pyenv, nvm) may be out of nobody's reach.
    let system = format!("/usr/bin/{program}");
    let program = if Path::new(&system).exists() {
        system.as_str()
    } else {
        program
    };
    let mut cmd = if nobody {
        let mut c = std::process::Command::new("setpriv");
        c.args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
            program,
        ]);
        c
    } else {
        std::process::Command::new(program)
    };
    cmd.current_dir(std::env::temp_dir())
        .env("SANDBOX_BIN", sandbox_tests::sandbox_bin())
        .env_remove("SANDBOX_CONFIG")
        .env("XDG_CONFIG_HOME", "/nonexistent/sandbox-tests-config");
    cmd
}

/// The Python client's `keep=True`: the kept process is alive for a later
/// command (which cannot signal it) and gone after the session; a
/// per-command session raises `SessionError` naming the cause.
#[test]
fn the_python_client_keeps_a_command() {
    let clients = Path::new(env!("CARGO_MANIFEST_DIR")).join("../clients/python");
    let script = r#"
import os, sys
from sandbox_session import Session, SessionError
w = sys.argv[1]
args = ["--backend", "auto", "--on-unsupported", "error", "-w", w]
with Session(args=args, sandbox=os.environ["SANDBOX_BIN"]) as s:
    r = s.run(["/bin/sh", "-c", "sleep 1000 & echo $! > " + w + "/pid"], keep=True)
    assert r["status"] == 0 and r["kept"] >= 1, r
    pid = open(w + "/pid").read().strip()
    r = s.run(["/bin/sh", "-c", "test -d /proc/" + pid + " && ! kill -0 " + pid + " 2>/dev/null && echo alive"], output=True)
    assert r["stdout"] == "alive\n", r
with Session(args=args + ["--launch", "per-command"], sandbox=os.environ["SANDBOX_BIN"]) as s:
    try:
        s.run(["/bin/true"], keep=True)
        raise AssertionError("keep ran per command")
    except SessionError as e:
        assert "keep needs the shared launch" in str(e), e
    assert s.run(["/bin/true"])["status"] == 0
print("client ok")
"#;
    for nobody in users() {
        let (_tmp, dir) = shared_dir();
        let out = client_command(nobody, "python3")
            .arg("-c")
            .arg(script)
            .arg(&dir)
            .env("PYTHONPATH", &clients)
            .output()
            .expect("python3");
        assert!(
            out.status.success(),
            "nobody {nobody}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout), "client ok\n");
        let pid = pid_in(&dir.join("pid"));
        assert!(
            eventually(|| !alive(pid, "sleep")),
            "nobody {nobody}: {pid} outlived the Python client's session"
        );
    }
}

/// The TypeScript client's `{ keep: true }`, as the Python one's (Node
/// runs it after Debian's `typescript` module strips its types).
#[test]
fn the_typescript_client_keeps_a_command() {
    use std::os::unix::fs::PermissionsExt;
    let client = Path::new(env!("CARGO_MANIFEST_DIR")).join("../clients/typescript/session.ts");
    let build = tempfile::tempdir().unwrap();
    std::fs::set_permissions(build.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let transpile = r#"
const ts = require("typescript"), fs = require("fs"), path = require("path");
const out = ts.transpileModule(fs.readFileSync(process.argv[1], "utf8"), {
  compilerOptions: { module: ts.ModuleKind.CommonJS, target: ts.ScriptTarget.ES2020 },
  reportDiagnostics: true,
});
if (out.diagnostics.length) { console.error(out.diagnostics); process.exit(1); }
fs.writeFileSync(path.join(process.argv[2], "session.js"), out.outputText);
"#;
    let out = client_command(false, "node")
        .env("NODE_PATH", "/usr/share/nodejs")
        .args(["-e", transpile])
        .arg(&client)
        .arg(build.path())
        .output()
        .expect("node is not installed: .ci/run installs it");
    assert!(
        out.status.success(),
        "transpiling session.ts: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::set_permissions(
        build.path().join("session.js"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let script = r#"
const assert = require("assert");
const { Session, SessionError } = require(process.argv[1] + "/session.js");
const w = process.argv[2];
const args = ["--backend", "auto", "--on-unsupported", "error", "-w", w];
(async () => {
  let s = await Session.open(args);
  let r = await s.run(["/bin/sh", "-c", "sleep 1000 & echo $! > " + w + "/pid"], { keep: true });
  assert.ok(r.status === 0 && r.kept >= 1, JSON.stringify(r));
  const pid = require("fs").readFileSync(w + "/pid", "utf8").trim();
  r = await s.run(["/bin/sh", "-c", "test -d /proc/" + pid + " && ! kill -0 " + pid + " 2>/dev/null && echo alive"], { output: true });
  assert.strictEqual(r.stdout, "alive\n", JSON.stringify(r));
  assert.strictEqual(await s.close(), 0);
  s = await Session.open(args.concat(["--launch", "per-command"]));
  await assert.rejects(s.run(["/bin/true"], { keep: true }),
    (e) => e instanceof SessionError && /keep needs the shared launch/.test(e.message));
  assert.strictEqual((await s.run(["/bin/true"])).status, 0);
  assert.strictEqual(await s.close(), 0);
  console.log("client ok");
})().catch((e) => { console.error(e); process.exit(1); });
"#;
    for nobody in users() {
        let (_tmp, dir) = shared_dir();
        let out = client_command(nobody, "node")
            .args(["-e", script])
            .arg(build.path())
            .arg(&dir)
            .output()
            .expect("node");
        assert!(
            out.status.success(),
            "nobody {nobody}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout), "client ok\n");
        let pid = pid_in(&dir.join("pid"));
        assert!(
            eventually(|| !alive(pid, "sleep")),
            "nobody {nobody}: {pid} outlived the TypeScript client's session"
        );
    }
}

/// The request's timeout bounds a kept command's main process: at the
/// timeout all of it is ended, as for any command, and nothing is kept
/// (gone before the next command, no `kept_ended`).
#[test]
fn a_kept_commands_timeout_ends_all_of_it() {
    for nobody in users() {
        let (_tmp, dir) = shared_dir();
        let d = dir.display();
        let mut s = Session::open(nobody, &dir, "shared");
        let got = s.run(
            "k",
            &format!("sleep 1000 & echo $! > {d}/pid; sleep 60"),
            json!({"keep": true, "timeout": 1}),
        );
        assert_eq!(got["status"], 124, "{got}");
        assert_eq!(got["timed_out"], true, "{got}");
        assert_eq!(got["kept"], 0, "{got}");
        let pid = pid_in(&dir.join("pid"));
        assert!(
            !alive(pid, "sleep"),
            "nobody {nobody}: a kept command's process outlived its timeout"
        );
        let (tail, status) = s.close();
        assert_eq!(status, 0, "{tail:?}");
        assert!(tail.iter().all(|e| e["event"] != "kept_ended"), "{tail:?}");
    }
}

/// A kept run lives at most the operator's ceiling (`max_timeout_seconds`)
/// from its start: then its processes are ended, and its `kept_ended`
/// says `timed_out`. Twin: within the ceiling it is alive.
#[test]
fn a_kept_run_ends_at_the_operators_ceiling() {
    use std::os::unix::fs::PermissionsExt;
    for nobody in users() {
        let (_tmp, dir) = shared_dir();
        let d = dir.display();
        // Outside the write paths (a trusted file), readable by nobody.
        let conf = tempfile::tempdir().unwrap();
        std::fs::set_permissions(conf.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let file = conf.path().join("config.toml");
        std::fs::write(
            &file,
            "[sandbox.policy]\ntimeout_seconds = 2\nmax_timeout_seconds = 3\n",
        )
        .unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let mut cmd = if nobody {
            sandbox_as_nobody()
        } else {
            sandbox()
        };
        let mut child = cmd
            .args(["session", "--backend", "auto", "--on-unsupported", "error"])
            .arg("--config")
            .arg(&file)
            .arg("-w")
            .arg(&dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut next =
            || -> Value { serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap() };
        assert_eq!(next()["launch"], "shared");
        let req = json!({"id": "k", "op": "run", "keep": true,
            "argv": ["/bin/sh", "-c", format!("sleep 1000 & echo $! > {d}/pid")]});
        writeln!(stdin, "{req}").unwrap();
        let exit = loop {
            let e = next();
            if e["event"] == "exit" {
                break e;
            }
        };
        assert!(exit["kept"].as_u64().unwrap() >= 1, "{exit}");
        let pid = pid_in(&dir.join("pid"));
        assert!(
            eventually(|| alive(pid, "sleep")),
            "twin: within the ceiling"
        );
        let until = Instant::now() + Duration::from_secs(10);
        while alive(pid, "sleep") && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(
            !alive(pid, "sleep"),
            "nobody {nobody}: the kept process outlived the ceiling"
        );
        writeln!(stdin, "{}", json!({"op": "close"})).unwrap();
        let ended = next();
        assert_eq!(ended["event"], "kept_ended", "{ended}");
        assert_eq!(ended["timed_out"], true, "{ended}");
        assert_eq!(next()["event"], "closed");
        assert!(child.wait().unwrap().success());
    }
}

/// A kept command's exit event lists the refusals of its main process so
/// far (and its `refused` event came before it); a command without one
/// has none (twin).
#[test]
fn a_kept_commands_exit_event_lists_its_refusals_so_far() {
    for nobody in users() {
        let (_tmp, dir) = shared_dir();
        let d = dir.display();
        let outside = format!("/var/tmp/sandbox-kept-main-{}", std::process::id());
        let mut s = Session::open(nobody, &dir, "shared");
        let got = s.run(
            "k",
            &format!("echo x > {outside}; sleep 1000 & echo $! > {d}/pid; exit 0"),
            json!({"keep": true}),
        );
        assert!(got["kept"].as_u64().unwrap() >= 1, "{got}");
        let listed = |e: &Value| {
            e["refusals"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r["target"].as_str().unwrap_or("").contains(&outside))
        };
        assert!(listed(&got), "nobody {nobody}: {got}");
        assert!(
            s.seen
                .iter()
                .any(|e| e["event"] == "refused" && e["id"] == "k"),
            "{:?}",
            s.seen
        );
        assert!(!Path::new(&outside).exists());
        let twin = s.run(
            "t",
            &format!("sleep 1000 & echo $! > {d}/pid2"),
            json!({"keep": true}),
        );
        assert!(twin["kept"].as_u64().unwrap() >= 1, "{twin}");
        assert_eq!(twin["refusals"], json!([]), "{twin}");
        let (tail, status) = s.close();
        assert_eq!(status, 0, "{tail:?}");
        for (id, pid) in [("k", "pid"), ("t", "pid2")] {
            assert!(
                tail.iter()
                    .any(|e| e["event"] == "kept_ended" && e["id"] == id),
                "{tail:?}"
            );
            let pid = pid_in(&dir.join(pid));
            assert!(eventually(|| !alive(pid, "sleep")), "{pid}");
        }
    }
}

/// Whether the event `e` lists a refusal whose target contains `what`.
fn refuses(e: &Value, what: &str) -> bool {
    refused_in(&e["refusals"], what)
}

/// Whether a nested run's record (`--report`'s form) lists a refusal whose
/// target contains `what`.
fn record_refuses(r: &Value, what: &str) -> bool {
    refused_in(&r["mediation"]["refused"], what)
}

/// Whether the refusals `list` have one whose target contains `what`.
fn refused_in(list: &Value, what: &str) -> bool {
    list.as_array().is_some_and(|r| {
        r.iter()
            .any(|r| r["target"].as_str().unwrap_or("").contains(what))
    })
}

/// A kept command's nested runs (red team G4), the one its background
/// process starts while a later command runs included, are recorded in its
/// `kept_ended` (`nested`, with the nested command's refusal). Twin (the
/// positive control): a command without keep has the same nested run in
/// its exit event.
#[test]
fn a_kept_commands_nested_runs_are_recorded_when_it_ends() {
    let bin = sandbox_tests::sandbox_bin();
    let bin = bin.display();
    for nobody in users() {
        let (_tmp, dir) = shared_dir();
        let d = dir.display();
        let outside = format!("/var/tmp/sandbox-kept-nested-{}", std::process::id());
        let nested = format!(
            "{bin} run -w {d} -- /bin/sh -c 'echo x > {outside}; echo nested-ran > {d}/ran'"
        );
        let mut s = Session::open(nobody, &dir, "shared");
        let plain = s.run("plain", &nested, json!({}));
        assert_eq!(plain["event"], "exit", "{plain}");
        let records = plain["nested"].as_array().cloned().unwrap_or_default();
        assert!(
            records.iter().any(|r| record_refuses(r, &outside)),
            "nobody {nobody}: {plain}"
        );
        std::fs::remove_file(dir.join("ran")).unwrap();
        let kept = s.run(
            "k",
            &format!("(sleep 0.3; {nested}; sleep 1000) >/dev/null 2>&1 & exit 0"),
            json!({"keep": true}),
        );
        assert!(kept["kept"].as_u64().unwrap() >= 1, "{kept}");
        // The nested run happens while a later command runs.
        let later = s.run(
            "later",
            &format!(
                "i=0; while [ ! -e {d}/ran ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done"
            ),
            json!({}),
        );
        assert_eq!(later["status"], 0, "{later}");
        assert!(dir.join("ran").exists(), "the nested run did not run");
        assert!(later.get("nested").is_none(), "{later}");
        let (tail, status) = s.close();
        assert_eq!(status, 0, "{tail:?}");
        let ended = tail
            .iter()
            .find(|e| e["event"] == "kept_ended" && e["id"] == "k")
            .unwrap_or_else(|| panic!("{tail:?}"));
        let records = ended["nested"].as_array().cloned().unwrap_or_default();
        assert_eq!(records.len(), 1, "nobody {nobody}: {ended}");
        assert!(
            record_refuses(&records[0], &outside),
            "nobody {nobody}: {ended}"
        );
        assert!(!Path::new(&outside).exists());
    }
}

/// The command after a kept command whose processes go on refusing (a
/// loop writing outside the write paths every 10 ms) reports only its own
/// refusals (red team G5): no `refused_events_dropped` and no refusal, six
/// times over; the kept commands' refusals are in their `kept_ended`
/// (control), and a later command that refuses has its own (twin).
#[test]
fn the_command_after_a_kept_one_reports_only_its_own_refusals() {
    for nobody in users() {
        let (_tmp, dir) = shared_dir();
        let outside = format!("/var/tmp/sandbox-kept-loop-{}", std::process::id());
        let mine = format!("/var/tmp/sandbox-kept-mine-{}", std::process::id());
        let mut s = Session::open(nobody, &dir, "shared");
        for i in 0..6 {
            let kept = s.run(
                &format!("k{i}"),
                &format!("(while :; do echo x > {outside} 2>/dev/null; sleep 0.01; done) & exit 0"),
                json!({"keep": true}),
            );
            assert!(kept["kept"].as_u64().unwrap() >= 1, "{kept}");
            let next = s.run(&format!("b{i}"), "sleep 0.3", json!({}));
            assert_eq!(next["status"], 0, "{next}");
            assert!(
                next.get("refused_events_dropped").is_none(),
                "nobody {nobody}: {next}"
            );
            assert_eq!(next["refusals"], json!([]), "nobody {nobody}: {next}");
            assert!(
                !s.seen
                    .iter()
                    .any(|e| e["event"] == "refused" && e["id"] == format!("b{i}")),
                "{:?}",
                s.seen
            );
        }
        let twin = s.run("t", &format!("echo x > {mine}; exit 0"), json!({}));
        assert!(refuses(&twin, &mine), "nobody {nobody}: {twin}");
        assert!(!refuses(&twin, &outside), "nobody {nobody}: {twin}");
        let (tail, status) = s.close();
        assert_eq!(status, 0, "{tail:?}");
        let ended: Vec<&Value> = tail.iter().filter(|e| e["event"] == "kept_ended").collect();
        assert_eq!(ended.len(), 6, "{tail:?}");
        for e in ended {
            assert!(refuses(e, &outside), "nobody {nobody}: {e}");
        }
    }
}

/// A kept command none of whose processes is left frees its slot (red
/// team G7): eight kept commands whose background process exits after
/// 0.2 s, then a ninth is kept, and the eight got their `kept_ended`
/// before its exit event. Twin (the positive control): with eight alive,
/// the ninth is refused, the message saying that 8 have processes alive.
#[test]
fn a_kept_slot_is_freed_when_its_processes_are_gone() {
    for nobody in users() {
        let (_tmp, dir) = shared_dir();
        let d = dir.display();
        let mut s = Session::open(nobody, &dir, "shared");
        for i in 0..8 {
            let got = s.run(
                &format!("k{i}"),
                "(sleep 0.2) & exit 0",
                json!({"keep": true}),
            );
            assert!(got["kept"].as_u64().unwrap() >= 1, "{got}");
        }
        std::thread::sleep(Duration::from_millis(1200));
        let ninth = s.run(
            "k8",
            &format!("sleep 1000 & echo $! > {d}/pid8"),
            json!({"keep": true}),
        );
        assert_eq!(ninth["event"], "exit", "nobody {nobody}: {ninth}");
        assert!(ninth["kept"].as_u64().unwrap() >= 1, "{ninth}");
        let ended: Vec<&Value> = s
            .seen
            .iter()
            .filter(|e| e["event"] == "kept_ended")
            .collect();
        assert_eq!(ended.len(), 8, "nobody {nobody}: {:?}", s.seen);
        for e in &ended {
            assert_eq!(e["processes_ended"], 0, "{e}");
        }
        // Twin: eight alive (k8 and seven more), the next one is refused.
        for i in 9..16 {
            let got = s.run(
                &format!("k{i}"),
                &format!("sleep 1000 & echo $! > {d}/pid{i}"),
                json!({"keep": true}),
            );
            assert!(got["kept"].as_u64().unwrap() >= 1, "{got}");
        }
        let refused = s.run(
            "k16",
            &format!("touch {d}/ran; sleep 1000 &"),
            json!({"keep": true}),
        );
        assert_eq!(refused["event"], "error", "{refused}");
        assert!(
            refused["message"].as_str().unwrap().contains("and 8 do"),
            "{refused}"
        );
        assert!(!dir.join("ran").exists(), "the refused one ran");
        let (tail, status) = s.close();
        assert_eq!(status, 0, "{tail:?}");
        let ended = tail.iter().filter(|e| e["event"] == "kept_ended").count();
        assert_eq!(ended, 8, "{tail:?}");
        for i in 8..16 {
            let pid = pid_in(&dir.join(format!("pid{i}")));
            assert!(eventually(|| !alive(pid, "sleep")), "{pid}");
        }
    }
}

/// The git audit looks at kept commands (red team G6): in workspace-write,
/// the repositories with `core.fsmonitor` a kept command's main process
/// and its background process (while a later command runs) made are each
/// named once: the main process's in its exit event's `summary` (made
/// before it), the background's in its `kept_ended` `summary`. Twin (the positive control
/// of the other side): a kept command that makes a repository without
/// code-running config gets no summary.
#[test]
fn a_kept_commands_repositories_are_audited() {
    for nobody in users() {
        let (_tmp, dir) = shared_dir();
        let d = dir.display();
        let mk = |name: &str, evil: bool| {
            let config = if evil {
                format!(" && git -C {d}/{name} config core.fsmonitor 'touch {d}/PWNED'")
            } else {
                String::new()
            };
            format!("git init -q {d}/{name}{config}")
        };
        let mut s = Session::open_with(
            nobody,
            &[
                "--mode".as_ref(),
                "workspace-write".as_ref(),
                "--workspace".as_ref(),
                dir.as_os_str(),
            ],
            "shared",
        );
        let kept = s.run(
            "k",
            &format!(
                "{} && ({{ sleep 0.3; {}; touch {d}/made; sleep 1000; }} >/dev/null 2>&1 &) ; exit 0",
                mk("evil_main", true),
                mk("evil_bg", true)
            ),
            json!({"keep": true}),
        );
        assert_eq!(kept["status"], 0, "{kept}");
        assert!(kept["kept"].as_u64().unwrap() >= 1, "{kept}");
        let twin = s.run(
            "t",
            &format!("{} && (sleep 1000 &) ; exit 0", mk("fine", false)),
            json!({"keep": true}),
        );
        assert!(twin["kept"].as_u64().unwrap() >= 1, "{twin}");
        let later = s.run(
            "later",
            &format!(
                "i=0; while [ ! -e {d}/made ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done"
            ),
            json!({}),
        );
        assert_eq!(later["status"], 0, "{later}");
        assert!(
            dir.join("made").exists(),
            "the background repository was not made"
        );
        let (tail, status) = s.close();
        assert_eq!(status, 0, "{tail:?}");
        let ended = |id: &str| {
            tail.iter()
                .find(|e| e["event"] == "kept_ended" && e["id"] == id)
                .cloned()
                .unwrap_or_else(|| panic!("{tail:?}"))
        };
        // Each repository named once: the main process's in the exit
        // event (made before it), the background's in `kept_ended`.
        let named = |event: &serde_json::Value, name: &str| {
            let path = format!("{d}/{name} ");
            event["summary"].as_array().map_or(0, |a| {
                a.iter()
                    .filter_map(|l| l.as_str())
                    .filter(|l| l.contains(&path) && l.contains("core.fsmonitor"))
                    .count()
            })
        };
        let k = ended("k");
        assert_eq!(named(&kept, "evil_main"), 1, "nobody {nobody}: {kept}");
        assert_eq!(named(&kept, "evil_bg"), 0, "nobody {nobody}: {kept}");
        assert_eq!(named(&k, "evil_main"), 0, "nobody {nobody}: {k}");
        assert_eq!(named(&k, "evil_bg"), 1, "nobody {nobody}: {k}");
        assert!(twin.get("summary").is_none(), "{twin}");
        assert!(ended("t").get("summary").is_none(), "{}", ended("t"));
        assert!(!dir.join("PWNED").exists());
    }
}

/// A shell command that starts, in the background, Python with SIGTERM
/// ignored whose thread appends to `dir/beat-<name>` every 20 ms (`beats`
/// times, or forever; through an fd opened before, so that it goes on
/// once the run's broker is gone), writes its pid to `dir/<name>.pid`, and
/// whose main
/// thread then leaves by `SYS_exit` (not `exit_group`): a thread group
/// whose leader is a zombie while its other thread runs, which
/// `cgroup.kill` does not end (Linux 6.18).
fn leader_exits_thread_lives(dir: &Path, name: &str, beats: Option<u32>) -> String {
    let d = dir.display();
    let beats = beats.map_or("None".to_owned(), |n| n.to_string());
    std::fs::write(
        dir.join(format!("{name}.py")),
        format!(
            "import os, signal, threading, time, ctypes, platform\n\
             signal.signal(signal.SIGTERM, signal.SIG_IGN)\n\
             fd = os.open('{d}/beat-{name}', os.O_WRONLY | os.O_CREAT | os.O_APPEND)\n\
             def beats(n):\n    i = 0\n    while n is None or i < n:\n        \
             os.write(fd, b'x'); i += 1; time.sleep(0.02)\n\
             threading.Thread(target=beats, args=({beats},), daemon=False).start()\n\
             while os.fstat(fd).st_size == 0: time.sleep(0.01)\n\
             open('{d}/{name}.tmp', 'w').write(str(os.getpid()))\n\
             os.rename('{d}/{name}.tmp', '{d}/{name}.pid')\n\
             ctypes.CDLL(None).syscall(60 if platform.machine() == 'x86_64' else 93, 0)\n"
        ),
    )
    .unwrap();
    format!(
        "python3 {d}/{name}.py </dev/null >/dev/null 2>&1 & \
         until [ -s {d}/{name}.pid ]; do sleep 0.02; done"
    )
}

/// How many beats `dir/beat-<name>` holds.
fn beats(dir: &Path, name: &str) -> u64 {
    std::fs::metadata(dir.join(format!("beat-{name}"))).map_or(0, |m| m.len())
}

/// Whether `name`'s beat grows within 5 s.
fn beating(dir: &Path, name: &str) -> bool {
    let from = beats(dir, name);
    eventually(|| beats(dir, name) > from)
}

/// Asserts the thread group of `dir/<name>.pid` is gone (waiting up to
/// 5 s) and its beat stopped; kills it if not, so that it does not outlive
/// the test.
#[track_caller]
fn assert_thread_gone(dir: &Path, name: &str, what: &str) {
    let pid = pid_in(&dir.join(format!("{name}.pid")));
    let gone = eventually(|| thread_group_gone(pid));
    if !gone {
        // SAFETY: kill has no memory effects; cleanup of the escapee.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    assert!(gone, "{what}: a thread of {pid} outlived its kept run");
    assert!(!beating(dir, name), "{what}: its beat goes on");
}

/// A kept command's thread group whose leader exited while its thread
/// runs (SIGTERM ignored) is gone once its kept run ended, at the
/// session's close and at the operator's ceiling (there `cgroup.kill`
/// alone left the thread running after the session, reparented to pid 1).
/// Positive control: it beats after its command's exit event. Twin: the
/// same shape whose thread ends by itself frees its slot (`kept_ended`
/// with no process ended).
#[test]
fn a_kept_thread_outliving_its_leader_ends_with_its_kept_run() {
    use std::os::unix::fs::PermissionsExt;
    for nobody in users() {
        // At the session's close.
        let (_tmp, dir) = shared_dir();
        let mut s = Session::open(nobody, &dir, "shared");
        let got = s.run(
            "ends",
            &leader_exits_thread_lives(&dir, "ends", Some(10)),
            json!({"keep": true}),
        );
        assert_eq!(got["status"], 0, "{got}");
        let got = s.run(
            "k",
            &leader_exits_thread_lives(&dir, "k", None),
            json!({"keep": true}),
        );
        assert_eq!(got["status"], 0, "{got}");
        assert!(got["kept"].as_u64().unwrap() >= 1, "{got}");
        assert!(
            beating(&dir, "k"),
            "nobody {nobody}: positive control: the kept thread beats"
        );
        assert!(eventually(|| beats(&dir, "ends") == 10), "twin: 10 beats");
        std::thread::sleep(Duration::from_millis(1200));
        let got = s.run("c", "true", json!({}));
        assert_eq!(got["status"], 0, "{got}");
        let mut all = s.seen.clone();
        let (tail, status) = s.close();
        assert_eq!(status, 0, "{tail:?}");
        all.extend(tail);
        let ended = |id: &str| {
            all.iter()
                .find(|e| e["event"] == "kept_ended" && e["id"] == id)
                .unwrap_or_else(|| panic!("no kept_ended for {id}: {all:?}"))
        };
        assert_eq!(ended("ends")["processes_ended"], 0, "{all:?}");
        assert!(
            ended("k")["processes_ended"].as_u64().unwrap() >= 1,
            "{all:?}"
        );
        assert_thread_gone(&dir, "k", &format!("nobody {nobody}, close"));
        assert_thread_gone(&dir, "ends", &format!("nobody {nobody}, twin"));

        // At the operator's ceiling.
        let (_tmp, dir) = shared_dir();
        let conf = tempfile::tempdir().unwrap();
        std::fs::set_permissions(conf.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let file = conf.path().join("config.toml");
        std::fs::write(
            &file,
            "[sandbox.policy]\ntimeout_seconds = 2\nmax_timeout_seconds = 3\n",
        )
        .unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let mut s = Session::open_with(
            nobody,
            &[
                "--config".as_ref(),
                file.as_os_str(),
                "-w".as_ref(),
                dir.as_os_str(),
            ],
            "shared",
        );
        let got = s.run(
            "k",
            &leader_exits_thread_lives(&dir, "k", None),
            json!({"keep": true}),
        );
        assert!(got["kept"].as_u64().unwrap() >= 1, "{got}");
        assert!(beating(&dir, "k"), "positive control: within the ceiling");
        let pid = pid_in(&dir.join("k.pid"));
        let until = Instant::now() + Duration::from_secs(15);
        while !thread_group_gone(pid) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(50));
        }
        let (tail, status) = s.close();
        assert_eq!(status, 0, "{tail:?}");
        let k = tail
            .iter()
            .find(|e| e["event"] == "kept_ended" && e["id"] == "k")
            .unwrap_or_else(|| panic!("{tail:?}"));
        assert_eq!(k["timed_out"], true, "{k}");
        assert_thread_gone(&dir, "k", &format!("nobody {nobody}, ceiling"));
    }
}

/// Red team F2: a stop signal to a session while a SIGTERM-deaf command
/// runs ends the command with its own status (137: SIGKILL after the
/// grace) and class, not a runner failure (the zygote's own run obeyed the
/// stop signal and ended the zygote before it answered: "the zygote is
/// gone"). Twin: a plain `sleep` ends with 143. (Beside the kept commands'
/// stop signal tests: the same zygote run.)
#[test]
fn a_stop_signal_during_a_sigterm_deaf_command_reports_the_command() {
    for nobody in users() {
        for (script, status) in [("sleep 30", 143), ("trap '' TERM; sleep 30", 137)] {
            let what = format!("nobody {nobody}, {script}");
            let (_tmp, dir) = shared_dir();
            let d = dir.display();
            let mut s = Session::open(nobody, &dir, "shared");
            s.send(json!({"id": "s", "op": "run",
                "argv": ["/bin/sh", "-c", format!("echo $$ > {d}/pid.tmp; mv {d}/pid.tmp {d}/pid; {script}")]}));
            assert!(
                eventually(|| dir.join("pid").exists()),
                "{what}: never started"
            );
            let pid = pid_in(&dir.join("pid"));
            // SAFETY: signals the session this test started.
            assert_eq!(unsafe { libc::kill(s.child.id() as i32, libc::SIGTERM) }, 0);
            let (tail, code) = s.rest();
            let exit = tail
                .iter()
                .find(|e| e["event"] == "exit")
                .unwrap_or_else(|| panic!("{what}: {tail:?}"));
            assert_eq!(exit["status"], status, "{what}: {exit}");
            assert_eq!(exit["classification"], "task_failure", "{what}: {exit}");
            assert_eq!(code, 128 + libc::SIGTERM, "{what}: {tail:?}");
            assert_eq!(tail.last().unwrap()["why"], "stopped by a signal");
            assert!(!alive(pid, "sh"), "{what}: the command outlived the stop");
        }
    }
}
