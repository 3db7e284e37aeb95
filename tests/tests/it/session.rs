//! `sandbox session` (#45, version 1): newline-delimited JSON requests in,
//! events out; each command keeps every per-run guarantee (containment,
//! timeout, refusals), and nothing a command writes reaches the channel.
//! Root and nobody where the guarantee depends on who runs it.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

#[cfg(target_os = "linux")]
use sandbox_tests::is_root;
use sandbox_tests::{sandbox, sandbox_as_nobody, sandbox_bin, shared_dir, users};
use serde_json::{json, Value};

/// The real backend for this host, failing if absent.
const BACKEND: &[&str] = &["--backend", "auto", "--on-unsupported", "error"];
/// How long any one event may take before the test fails (not hangs).
const EVENT_WAIT: Duration = Duration::from_secs(60);

/// A session as the harness sees it: every line it reads must be an event.
struct Harness {
    child: Child,
    stdin: Option<ChildStdin>,
    events: Receiver<Value>,
    hello: Value,
}

impl Harness {
    fn open(nobody: bool, flags: &[&str]) -> Self {
        Self::open_with(nobody, flags, &[])
    }

    /// [`Harness::open`] with variables set in the session's environment.
    fn open_with(nobody: bool, flags: &[&str], env: &[(&str, &str)]) -> Self {
        Self::open_in(nobody, flags, env, None)
    }

    /// [`Harness::open_with`], the session started in `cwd` when given.
    fn open_in(nobody: bool, flags: &[&str], env: &[(&str, &str)], cwd: Option<&Path>) -> Self {
        let mut cmd = if nobody {
            sandbox_as_nobody()
        } else {
            sandbox()
        };
        cmd.envs(env.iter().copied());
        if let Some(cwd) = cwd {
            cmd.current_dir(cwd);
        }
        cmd.arg("session")
            .args(BACKEND)
            .args(flags)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = cmd.spawn().expect("spawn sandbox session");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().unwrap();
        let (tx, events) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let line = line.expect("the channel is UTF-8 text");
                let event: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("not an event on the channel ({e}): {line:?}"));
                assert!(
                    event.get("event").and_then(Value::as_str).is_some(),
                    "a line without \"event\" on the channel: {line:?}"
                );
                if tx.send(event).is_err() {
                    break;
                }
            }
        });
        let mut h = Harness {
            child,
            stdin,
            events,
            hello: Value::Null,
        };
        h.hello = h.next();
        assert_eq!(h.hello["event"], "hello", "{}", h.hello);
        assert_eq!(h.hello["v"], 1, "{}", h.hello);
        h
    }

    fn send_line(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    fn send(&mut self, request: &Value) {
        self.send_line(&request.to_string());
    }

    #[track_caller]
    fn next(&self) -> Value {
        match self.events.recv_timeout(EVENT_WAIT) {
            Ok(event) => event,
            Err(RecvTimeoutError::Timeout) => panic!("no event within {EVENT_WAIT:?}"),
            Err(RecvTimeoutError::Disconnected) => panic!("the session ended its channel"),
        }
    }

    /// Sends a run request and returns its started and exit events.
    #[track_caller]
    fn run(&mut self, id: &str, argv: &[&str], extra: Value) -> (Value, Value) {
        let mut request = json!({"id": id, "op": "run", "argv": argv});
        if let Value::Object(more) = extra {
            request.as_object_mut().unwrap().extend(more);
        }
        self.send(&request);
        self.answer(id)
    }

    /// The started and exit events of request `id`, the next two events.
    #[track_caller]
    fn answer(&self, id: &str) -> (Value, Value) {
        let started = self.next();
        assert_eq!(started["id"], id, "{started}");
        assert_eq!(started["event"], "started", "{started}");
        // The command's live `refused` events come first (see
        // session_refused.rs); its exit event lists them all.
        let exit = loop {
            let e = self.next();
            if e["event"] != "refused" {
                break e;
            }
            assert_eq!(e["id"], id, "{e}");
        };
        assert_eq!(exit["id"], id, "{exit}");
        assert_eq!(exit["event"], "exit", "{exit}");
        (started, exit)
    }

    /// Closes the session and checks it ends with 0 and a `closed` event.
    fn close(mut self) {
        self.send(&json!({"op": "close"}));
        let closed = self.next();
        assert_eq!(closed["event"], "closed", "{closed}");
        drop(self.stdin.take());
        let status = self.child.wait().unwrap();
        assert_eq!(status.code(), Some(0));
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn pid_alive(pid: i32) -> bool {
    // A zombie is dead for our purpose; so is another program on a reused pid.
    let stat = match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s,
        Err(_) => return false,
    };
    let zombie = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .trim_start()
        .starts_with('Z');
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    !zombie && cmdline.starts_with(b"sleep\x001000")
}

/// A command's `started` event is held back for its first 5 ms only (a
/// short command has it written with its exit event): a command that runs
/// longer has it while it runs. The command here waits for a file the
/// test writes after `started` came; twin: the short command's events come
/// in order, `started` first (`Harness::answer`).
#[test]
fn a_long_commands_started_event_comes_while_it_runs() {
    let (_dir, dir) = shared_dir();
    let mut h = Harness::open(false, &["-w", dir.to_str().unwrap()]);
    let go = dir.join("go");
    let script = format!(
        "while [ ! -e {go} ]; do sleep 0.05; done; echo ran",
        go = go.display()
    );
    h.send(&json!({"id": "w", "op": "run", "argv": ["/bin/sh", "-c", script], "output": true}));
    let started = h.next();
    assert_eq!(
        (started["id"].clone(), started["event"].clone()),
        (json!("w"), json!("started")),
        "{started}"
    );
    std::fs::write(&go, "").unwrap();
    let exit = h.next();
    assert_eq!(exit["event"], "exit", "{exit}");
    assert_eq!(
        (exit["status"].clone(), exit["stdout"].clone()),
        (json!(0), json!("ran\n"))
    );
    let (started, exit) = h.run("short", &["/bin/true"], json!({}));
    assert_eq!(
        (started["id"].clone(), exit["status"].clone()),
        (json!("short"), json!(0))
    );
    h.close();
}

/// Each `run` is answered with its id and the command's status, a bad
/// request by an error naming it (and the session goes on), and `close`
/// ends the session with 0. EOF ends it too.
#[test]
fn each_run_is_answered_with_its_id_and_status() {
    for nobody in users() {
        let mut h = Harness::open(nobody, &[]);
        let (started, exit) = h.run("a", &["/bin/sh", "-c", "exit 7"], json!({}));
        assert_eq!(started["argv"], json!(["/bin/sh", "-c", "exit 7"]));
        assert_eq!(exit["status"], 7, "{exit}");
        assert_eq!(exit["classification"], "task_failure", "{exit}");
        assert!(exit["duration_ms"].as_f64().is_some(), "{exit}");
        assert_eq!(exit["refusals"], json!([]), "{exit}");
        let (_, exit) = h.run("b", &["/bin/true"], json!({}));
        assert_eq!(exit["status"], 0, "{exit}");
        assert_eq!(exit["classification"], "ok", "{exit}");
        // A number as id is echoed as given.
        h.send(&json!({"id": 3, "op": "run", "argv": ["/bin/false"]}));
        assert_eq!(h.next()["id"], 3);
        let exit = h.next();
        assert_eq!(
            (exit["id"].clone(), exit["status"].clone()),
            (json!(3), json!(1))
        );
        // Not found: 127, as `sandbox run`.
        let (_, exit) = h.run("nf", &["no-such-program-xyz"], json!({}));
        assert_eq!(exit["status"], 127, "{exit}");
        assert_eq!(exit["classification"], "runner_failure", "{exit}");
        assert!(
            exit["reason"].as_str().unwrap().contains("not found"),
            "{exit}"
        );
        // Malformed requests: each answered by an error naming the bad
        // input; none ends the session.
        for (line, id, names) in [
            ("not json", Value::Null, "not JSON"),
            ("[1, 2]", Value::Null, "JSON object"),
            (
                r#"{"id": "m1", "op": "rnu", "argv": ["/bin/true"]}"#,
                json!("m1"),
                "rnu",
            ),
            (r#"{"id": "m2", "argv": ["/bin/true"]}"#, json!("m2"), "op"),
            (r#"{"id": "m3", "op": "run"}"#, json!("m3"), "argv"),
            (
                r#"{"id": "m4", "op": "run", "argv": []}"#,
                json!("m4"),
                "argv",
            ),
            (
                r#"{"id": "m5", "op": "run", "argv": ["x"], "colour": 1}"#,
                json!("m5"),
                "colour",
            ),
            (
                r#"{"id": "m6", "op": "run", "argv": ["x"], "timeout": "10"}"#,
                json!("m6"),
                "timeout",
            ),
            (r#"{"op": "run", "argv": ["/bin/true"]}"#, Value::Null, "id"),
        ] {
            h.send_line(line);
            let e = h.next();
            assert_eq!(e["event"], "error", "{line}: {e}");
            assert_eq!(e["id"], id, "{line}: {e}");
            assert!(
                e["message"].as_str().unwrap().contains(names),
                "{line}: the error should name {names:?}: {e}"
            );
        }
        // Twin: the same session still runs commands.
        let (_, exit) = h.run("after", &["/bin/sh", "-c", "exit 5"], json!({}));
        assert_eq!(exit["status"], 5, "{exit}");
        h.close();
    }
    // A session that cannot start says why on the channel (one error
    // event, `fatal`) and on stderr, and exits 125.
    let gone = tempfile::tempdir().unwrap().path().join("missing");
    let out = sandbox()
        .arg("session")
        .arg("-w")
        .arg(&gone)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(
        (lines[0]["event"].clone(), lines[0]["fatal"].clone()),
        (json!("error"), json!(true))
    );
    assert!(lines[0]["message"]
        .as_str()
        .unwrap()
        .contains(gone.to_str().unwrap()));
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("sandbox: "));
    // End of input ends a session too, with 0.
    let mut h = Harness::open(false, &[]);
    h.run("only", &["/bin/true"], json!({}));
    drop(h.stdin.take());
    assert_eq!(h.next()["event"], "closed");
    assert_eq!(h.child.wait().unwrap().code(), Some(0));
}

/// 100 commands in one session, each contained: the background child each
/// one starts (alive while it runs, which the command itself checks) is gone
/// when its exit event arrives, before the next command starts; and each
/// command's foreground part ran (its marker and output are there).
#[test]
fn a_hundred_commands_each_contained() {
    // The check itself sees a live `sleep 1000` (else "gone" proves nothing),
    // once it has exec'd; the guard ends it whatever happens.
    struct Live(std::process::Child);
    impl Drop for Live {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let live = Live(
        std::process::Command::new("sleep")
            .arg("1000")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let pid = live.0.id() as i32;
    let begun = Instant::now();
    while !pid_alive(pid) {
        assert!(
            begun.elapsed() < EVENT_WAIT,
            "a live sleep 1000 is never seen alive"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(live);
    assert!(!pid_alive(pid));
    for nobody in users() {
        let (_dir, dir) = shared_dir();
        let w = dir.to_str().unwrap();
        let mut h = Harness::open(nobody, &["-w", w]);
        if landlock_abi() >= 6 {
            assert_eq!(h.hello["launch"], "shared", "{}", h.hello);
        }
        for i in 0..100 {
            let id = format!("c{i}");
            let script =
                format!("sleep 1000 & echo $!; kill -0 $! && echo alive; echo ran > {w}/m{i}");
            let (_, exit) = h.run(&id, &["/bin/sh", "-c", &script], json!({"output": true}));
            assert_eq!(exit["status"], 0, "{exit}");
            let out = exit["stdout"].as_str().unwrap();
            let mut lines = out.lines();
            let pid: i32 = lines
                .next()
                .and_then(|l| l.parse().ok())
                .unwrap_or_else(|| panic!("command {i} printed no pid: {exit}"));
            assert_eq!(lines.next(), Some("alive"), "{exit}");
            assert!(
                !pid_alive(pid),
                "command {i}'s background child {pid} outlived it (nobody: {nobody})"
            );
            assert!(
                dir.join(format!("m{i}")).is_file(),
                "command {i} did not run"
            );
        }
        h.close();
    }
}

/// A request's timeout ends its command (exit 124, classification timeout),
/// beside a command that finishes within its own; a timeout above the
/// operator's ceiling is refused (an error naming it), never truncated.
#[test]
fn a_requests_timeout_is_honoured() {
    for nobody in users() {
        let mut h = Harness::open(nobody, &[]);
        let begun = Instant::now();
        let (started, exit) = h.run("slow", &["/bin/sleep", "30"], json!({"timeout": 1}));
        assert_eq!(started["timeout"], 1, "{started}");
        assert_eq!(exit["status"], 124, "{exit}");
        assert_eq!(exit["classification"], "timeout", "{exit}");
        assert_eq!(exit["timed_out"], true, "{exit}");
        assert!(
            begun.elapsed() < Duration::from_secs(20),
            "{:?}",
            begun.elapsed()
        );
        // Twin: one that ends in time.
        let (_, exit) = h.run("quick", &["/bin/sleep", "0.1"], json!({"timeout": 5}));
        assert_eq!(exit["status"], 0, "{exit}");
        assert_eq!(exit["timed_out"], false, "{exit}");
        // Without a timeout, the session's (the default 120 s).
        let (started, _) = h.run("default", &["/bin/true"], json!({}));
        assert_eq!(started["timeout"], 120, "{started}");
        // Above the ceiling (the default 600 s): refused, nothing ran.
        h.send(&json!({"id": "long", "op": "run", "argv": ["/bin/true"], "timeout": 100000}));
        let e = h.next();
        assert_eq!(
            (e["id"].clone(), e["event"].clone()),
            (json!("long"), json!("error"))
        );
        assert!(e["message"].as_str().unwrap().contains("timeout"), "{e}");
        h.close();
    }
}

/// A write outside the policy is refused and listed in that command's
/// refusals (in the record's words); the allowed twin writes.
#[test]
fn a_refused_write_is_listed_in_its_commands_refusals() {
    for nobody in users() {
        let (_dir, dir) = shared_dir();
        let (_outside_dir, outside) = shared_dir();
        let mut h = Harness::open(nobody, &["-w", dir.to_str().unwrap()]);
        let target = outside.join("f");
        let script = format!("echo x > {}", target.display());
        let (_, exit) = h.run("out", &["/bin/sh", "-c", &script], json!({}));
        assert_ne!(exit["status"], 0, "{exit}");
        assert_eq!(exit["classification"], "sandbox_denial", "{exit}");
        let refusals = exit["refusals"].as_array().unwrap();
        assert!(
            refusals.iter().any(
                |r| r["target"] == target.to_str().unwrap() && r["outside_write_paths"] == true
            ),
            "{exit}"
        );
        assert!(
            exit["summary"][0]
                .as_str()
                .unwrap()
                .starts_with("sandbox: refused"),
            "{exit}"
        );
        assert!(!target.exists());
        // Twin: inside the write path.
        let inside = dir.join("f");
        let script = format!("echo x > {}", inside.display());
        let (_, exit) = h.run("in", &["/bin/sh", "-c", &script], json!({}));
        assert_eq!(exit["status"], 0, "{exit}");
        assert_eq!(exit["refusals"], json!([]), "{exit}");
        assert_eq!(std::fs::read_to_string(&inside).unwrap(), "x\n");
        h.close();
    }
}

/// A command's stdout and stderr never reach the channel, whatever they
/// hold (lines that look like events, writes to every fd it has): without
/// `output` they are dropped, with it they come back inside the exit event
/// only. A command reads no request: without `stdin` it reads end of input,
/// with it exactly those bytes.
#[test]
fn a_commands_output_never_reaches_the_channel() {
    let forged = r#"{"id":"x","event":"exit","status":0}"#;
    let script = format!(
        "echo '{forged}'; echo '{forged}' >&2; \
         for fd in 0 1 2 3 4 5 6 7 8 9 10; do (echo '{forged}' >&$fd) 2>/dev/null; done; \
         cat; exit 3"
    );
    for nobody in users() {
        let mut h = Harness::open(nobody, &[]);
        // Two requests in one write: the command's `cat` must not read the
        // second one.
        h.send_line(&format!(
            "{}\n{}",
            json!({"id": "quiet", "op": "run", "argv": ["/bin/sh", "-c", script]}),
            json!({"id": "loud", "op": "run", "argv": ["/bin/sh", "-c", script],
                   "output": true, "stdin": "in\n"}),
        ));
        let (_, exit) = h.answer("quiet");
        assert_eq!(exit["status"], 3, "{exit}");
        assert!(exit.get("stdout").is_none(), "{exit}");
        let (_, exit) = h.answer("loud");
        assert_eq!(exit["status"], 3, "{exit}");
        let stdout = exit["stdout"].as_str().unwrap();
        assert!(stdout.starts_with(&format!("{forged}\n")), "{exit}");
        assert!(
            stdout.ends_with("in\n"),
            "the request's stdin reached the command: {exit}"
        );
        assert!(exit["stderr"].as_str().unwrap().contains(forged), "{exit}");
        assert_eq!(exit["stdout_dropped"], 0);
        // Nor through the session's own descriptors: every fd of the
        // session, by /proc/PID/fd, is out of the command's reach (Landlock
        // denies ptrace-mode access to processes outside its domain).
        let pid = h.child.id();
        let attack = format!(
            "n=0; for f in /proc/{pid}/fd/*; do n=$((n+1)); \
             (echo '{forged}' > $f) 2>/dev/null && echo reached $f; done; echo tried $n"
        );
        let (_, exit) = h.run("proc", &["/bin/sh", "-c", &attack], json!({"output": true}));
        let stdout = exit["stdout"].as_str().unwrap();
        assert!(!stdout.contains("reached"), "{exit}");
        // Twin: it did find the session's descriptors to try.
        let tried: u32 = stdout
            .trim()
            .strip_prefix("tried ")
            .unwrap()
            .parse()
            .unwrap();
        assert!(tried >= 3, "{exit}");
        h.close();
    }
}

/// Output beyond the cap is dropped and counted, and the command is never
/// blocked by it.
#[test]
fn output_is_bounded() {
    let mut h = Harness::open(false, &[]);
    let (_, exit) = h.run(
        "big",
        &["/bin/sh", "-c", "head -c 3000000 /dev/zero"],
        json!({"output": true}),
    );
    assert_eq!(exit["status"], 0, "{exit}");
    let cap = h.hello["output_cap"].as_u64().unwrap();
    assert_eq!(exit["stdout"].as_str().unwrap().len() as u64, cap);
    assert_eq!(exit["stdout_dropped"].as_u64().unwrap(), 3_000_000 - cap);
    h.close();
}

/// The Python client (clients/python/sandbox_session.py) drives a session end
/// to end: statuses, output, a refusal, a timeout.
#[test]
fn the_python_client_drives_a_session() {
    let clients = Path::new(env!("CARGO_MANIFEST_DIR")).join("../clients/python");
    let (_dir, dir) = shared_dir();
    let script = r#"
import json, os, sys
from sandbox_session import Session, SessionError
w = sys.argv[1]
with Session(args=["--backend", "auto", "--on-unsupported", "error", "-w", w],
             sandbox=os.environ["SANDBOX_BIN"]) as s:
    assert s.hello["v"] == 1, s.hello
    r = s.run(["/bin/sh", "-c", "exit 3"])
    assert r["status"] == 3 and r["event"] == "exit", r
    r = s.run(["/bin/echo", "hi"], output=True)
    assert r["status"] == 0 and r["stdout"] == "hi\n", r
    r = s.run(["/bin/sh", "-c", "echo x > /etc/sandbox-session-test"])
    assert r["classification"] == "sandbox_denial", r
    assert any(x["target"] == "/etc/sandbox-session-test" for x in r["refusals"]), r
    r = s.run(["/bin/sleep", "30"], timeout=1)
    assert r["status"] == 124 and r["classification"] == "timeout", r
    r = s.run(["/bin/sh", "-c", "echo ok > " + w + "/f"])
    assert r["status"] == 0, r
    try:
        s.run([])
        raise AssertionError("an empty argv was accepted")
    except SessionError as e:
        assert "argv" in str(e), e
print("client ok")
"#;
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(&dir)
        .env("PYTHONPATH", &clients)
        .env("SANDBOX_BIN", sandbox_bin())
        .env_remove("SANDBOX_CONFIG")
        .env("XDG_CONFIG_HOME", "/nonexistent/sandbox-tests-config")
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "client ok\n");
    assert!(!Path::new("/etc/sandbox-session-test").exists());
    assert_eq!(std::fs::read_to_string(dir.join("f")).unwrap(), "ok\n");
}

/// The TypeScript client (clients/typescript/session.ts) drives a session
/// end to end, as the Python one does: statuses, output, a refusal, a
/// timeout, a refused request. Node runs it after the `typescript` module
/// (Debian's node-typescript, which .ci/run installs) strips its types.
#[test]
fn the_typescript_client_drives_a_session() {
    let client = Path::new(env!("CARGO_MANIFEST_DIR")).join("../clients/typescript/session.ts");
    let (_dir, dir) = shared_dir();
    let build = tempfile::tempdir().unwrap();
    let transpile = r#"
const ts = require("typescript"), fs = require("fs"), path = require("path");
const out = ts.transpileModule(fs.readFileSync(process.argv[1], "utf8"), {
  compilerOptions: { module: ts.ModuleKind.CommonJS, target: ts.ScriptTarget.ES2020 },
  reportDiagnostics: true,
});
if (out.diagnostics.length) { console.error(out.diagnostics); process.exit(1); }
fs.writeFileSync(path.join(process.argv[2], "session.js"), out.outputText);
"#;
    let node = |args: &[&std::ffi::OsStr]| {
        std::process::Command::new("node")
            .args(args)
            .env("NODE_PATH", "/usr/share/nodejs")
            .env("SANDBOX_BIN", sandbox_bin())
            .env_remove("SANDBOX_CONFIG")
            .env("XDG_CONFIG_HOME", "/nonexistent/sandbox-tests-config")
            .output()
            .expect("node is not installed: .ci/run installs it")
    };
    let out = node(&[
        "-e".as_ref(),
        transpile.as_ref(),
        client.as_os_str(),
        build.path().as_os_str(),
    ]);
    assert!(
        out.status.success(),
        "transpiling session.ts (needs Debian's node-typescript, which .ci/run installs): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let script = r#"
const assert = require("assert");
const { Session, SessionError } = require(process.argv[1] + "/session.js");
const w = process.argv[2];
(async () => {
  const s = await Session.open(["--backend", "auto", "--on-unsupported", "error", "-w", w]);
  assert.strictEqual(s.hello.v, 1);
  let r = await s.run(["/bin/sh", "-c", "exit 3"]);
  assert.ok(r.status === 3 && r.event === "exit", JSON.stringify(r));
  r = await s.run(["/bin/echo", "hi"], { output: true });
  assert.ok(r.status === 0 && r.stdout === "hi\n", JSON.stringify(r));
  r = await s.run(["/bin/sh", "-c", "echo x > /etc/sandbox-session-ts-test"]);
  assert.strictEqual(r.classification, "sandbox_denial", JSON.stringify(r));
  assert.ok(r.refusals.some((x) => x.target === "/etc/sandbox-session-ts-test"), JSON.stringify(r));
  r = await s.run(["/bin/sleep", "30"], { timeout: 1 });
  assert.ok(r.status === 124 && r.classification === "timeout", JSON.stringify(r));
  r = await s.run(["/bin/sh", "-c", "echo ok > " + w + "/f"]);
  assert.strictEqual(r.status, 0, JSON.stringify(r));
  await assert.rejects(s.run([]), (e) => e instanceof SessionError && /argv/.test(e.message));
  assert.strictEqual(await s.close(), 0);
  console.log("client ok");
})().catch((e) => { console.error(e); process.exit(1); });
"#;
    let out = node(&[
        "-e".as_ref(),
        script.as_ref(),
        build.path().as_os_str(),
        dir.as_os_str(),
    ]);
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "client ok\n");
    assert!(!Path::new("/etc/sandbox-session-ts-test").exists());
    assert_eq!(std::fs::read_to_string(dir.join("f")).unwrap(), "ok\n");
}

/// A stop signal (SIGTERM here) while a command runs ends that command and
/// its tree, its exit event says so (143), and the session ends with 143
/// after a `closed` event.
#[test]
fn a_stop_signal_ends_the_command_and_the_session() {
    let (_dir, dir) = shared_dir();
    let mut h = Harness::open(false, &["-w", dir.to_str().unwrap()]);
    let pidfile = dir.join("bg");
    let script = format!("sleep 1000 & echo $! > {}; sleep 30", pidfile.display());
    h.send(&json!({"id": "s", "op": "run", "argv": ["/bin/sh", "-c", script]}));
    assert_eq!(h.next()["event"], "started");
    let begun = Instant::now();
    // The pid is written when the shell has forked, maybe before the child
    // has exec'd sleep (pid_alive checks the program): wait for both.
    let pid: i32 = loop {
        if let Some(pid) = std::fs::read_to_string(&pidfile)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .filter(|&pid| pid_alive(pid))
        {
            break pid;
        }
        assert!(begun.elapsed() < EVENT_WAIT, "the command never started");
        std::thread::sleep(Duration::from_millis(20));
    };
    // SAFETY: a signal to the session this test started.
    assert_eq!(unsafe { libc::kill(h.child.id() as i32, libc::SIGTERM) }, 0);
    let exit = h.next();
    assert_eq!(
        (exit["id"].clone(), exit["event"].clone()),
        (json!("s"), json!("exit"))
    );
    assert_eq!(exit["status"], 143, "{exit}");
    assert_eq!(h.next()["event"], "closed");
    assert_eq!(h.child.wait().unwrap().code(), Some(143));
    assert!(
        !pid_alive(pid),
        "the command's background child outlived the stop"
    );
    assert!(begun.elapsed() < Duration::from_secs(20));
}

/// Red-team F3: a stop signal between commands (SIGTERM, SIGINT, SIGHUP)
/// killed the session where it stood (the signals were caught only while a
/// command ran, or once one was kept): its private TMPDIR, with the files
/// the commands left there, stayed in /tmp, and no `closed` event came. Now
/// they are caught for the whole session: it ends as at the end of input,
/// with a `closed` event, 128+N, and the TMPDIR removed. Also before any
/// command. Twin: a session left alone keeps its TMPDIR between commands.
#[test]
fn a_stop_signal_between_commands_ends_the_session_cleanly() {
    for nobody in users() {
        for (sig, first) in [
            (libc::SIGTERM, true),
            (libc::SIGINT, true),
            (libc::SIGHUP, true),
            (libc::SIGTERM, false),
        ] {
            let ctx = format!("nobody={nobody} signal={sig} after a command={first}");
            let (_dir, dir) = shared_dir();
            let mut h = Harness::open(nobody, &["-w", dir.to_str().unwrap(), "--private-tmp"]);
            let mut tmp = None;
            if first {
                let (_, exit) = h.run(
                    "1",
                    &[
                        "/bin/sh",
                        "-c",
                        "echo secret > \"$TMPDIR/f\"; echo \"$TMPDIR\"",
                    ],
                    json!({"output": true}),
                );
                assert_eq!(exit["status"], 0, "{ctx}: {exit}");
                let path = std::path::PathBuf::from(exit["stdout"].as_str().unwrap().trim());
                assert!(path.starts_with("/tmp"), "{ctx}: {path:?}");
                // Twin: between commands, the TMPDIR and its files stay.
                std::thread::sleep(Duration::from_millis(300));
                assert_eq!(
                    std::fs::read_to_string(path.join("f")).unwrap(),
                    "secret\n",
                    "{ctx}"
                );
                tmp = Some(path);
            }
            // SAFETY: a signal to the session this test started.
            assert_eq!(unsafe { libc::kill(h.child.id() as i32, sig) }, 0);
            let closed = h.next();
            assert_eq!(closed["event"], "closed", "{ctx}: {closed}");
            assert_eq!(closed["why"], "stopped by a signal", "{ctx}: {closed}");
            assert_eq!(h.child.wait().unwrap().code(), Some(128 + sig), "{ctx}");
            if let Some(tmp) = tmp {
                assert!(!tmp.exists(), "{ctx}: {tmp:?} left behind");
            }
        }
    }
}

/// After each command the runner reads the config of every git repository
/// the command made (to warn of programs git would run there). Those files
/// are the command's: a FIFO as `config` (no writer is left once the run
/// ended, so a blocking open never returns) or an `include.path` naming
/// `/dev/zero` (a read that never ends) must not hang or starve the
/// session: the exit event still comes, naming the file it did not read,
/// and the next request is answered. An include naming a file outside the
/// write paths is named "not read", its keys not read (the audit reads only
/// what the run could). Twin: a regular config that runs a program is read
/// and named.
#[test]
fn a_repository_the_command_made_cannot_hang_the_audit_after_it() {
    for nobody in users() {
        let (_dir, dir) = shared_dir();
        // A repository from before the session: its git directory is
        // write-denied, so the broker mediates the write path and sees the
        // repositories the command makes.
        let old = std::process::Command::new("git")
            .args(["init", "-q"])
            .arg(dir.join("old"))
            .status()
            .unwrap();
        assert!(old.success());
        let elsewhere = tempfile::tempdir().unwrap();
        std::fs::set_permissions(
            elsewhere.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let away = elsewhere.path().join("inc");
        std::fs::write(&away, "[core]\n\tfsmonitor = x\n").unwrap();
        let mut h = Harness::open(nobody, &["-w", dir.to_str().unwrap()]);
        let made = |name: &str, then: &str| {
            format!(
                "cd {} && git init -q {name} && cd {name}/.git && {then} && echo made",
                dir.display()
            )
        };
        let cases = [
            (
                "fifo",
                made("fifo", "rm config && mkfifo config"),
                "config (not a regular file: not read)",
            ),
            (
                "zero",
                made(
                    "zero",
                    "printf '[include]\\n\\tpath = /dev/zero\\n' > config",
                ),
                "/dev/zero: not read (outside the write paths)",
            ),
            // The audit reads nothing outside the write paths: an include
            // naming a file elsewhere is named, its keys not read.
            (
                "outside",
                made(
                    "outside",
                    &format!(
                        "printf '[include]\\n\\tpath = {}\\n' > config",
                        away.display()
                    ),
                ),
                ": not read (outside the write paths)",
            ),
            (
                "twin",
                made("twin", "printf '[core]\\n\\tfsmonitor = x\\n' > config"),
                "whose core.fsmonitor run programs",
            ),
        ];
        for (id, script, named) in cases {
            let (_, exit) = h.run(id, &["/bin/sh", "-c", &script], json!({"output": true}));
            assert_eq!(exit["status"], 0, "{exit}");
            assert_eq!(exit["stdout"], "made\n", "{exit}");
            let summary = exit["summary"].to_string();
            assert!(summary.contains(named), "{id}: {exit}");
            if id == "outside" {
                assert!(!summary.contains("core.fsmonitor"), "{id}: {exit}");
            }
        }
        let (_, exit) = h.run("after", &["true"], json!({}));
        assert_eq!(exit["status"], 0, "{exit}");
        h.close();
    }
}

/// The Landlock ABI the session uses (0 without Landlock): the host's,
/// lowered by `SANDBOX_TEST_LANDLOCK_ABI` when the tests run with it (the
/// session inherits it).
fn landlock_abi() -> i64 {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: landlock_create_ruleset(NULL, 0,
        // LANDLOCK_CREATE_RULESET_VERSION) only returns the ABI version.
        let v = unsafe { libc::syscall(444, std::ptr::null::<u8>(), 0usize, 1u32) };
        let ceiling = std::env::var("SANDBOX_TEST_LANDLOCK_ABI")
            .ok()
            .and_then(|c| c.parse().ok())
            .unwrap_or(i64::MAX);
        v.max(0).min(ceiling)
    }
    #[cfg(not(target_os = "linux"))]
    0
}

/// Whether the session process is stopped (`T`) or gone.
fn stopped_or_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat.rsplit(')').next().unwrap_or("").trim_start();
            state.starts_with('T') || state.starts_with('Z')
        }
        Err(_) => true,
    }
}

/// A command that knows the session's pid cannot reach its channel or stop
/// it: opening `/proc/<session>/fd/N` for writing (the channel's fds, the
/// harness's pipes) fails for every N, and SIGSTOP, SIGTERM and SIGKILL to
/// the session are refused (Landlock ABI >= 6 scopes signals; below, the
/// documented gap). The forged events never reach the harness (its reader
/// fails on anything but the session's own events, ids included), and the
/// session answers the next request. Twin: the same command signals its own
/// child and writes its own stdout.
#[test]
fn a_command_cannot_write_to_or_signal_the_session() {
    for nobody in users() {
        for write in [false, true] {
            let (_dir, dir) = shared_dir();
            let flags: Vec<&str> = if write {
                vec!["-w", dir.to_str().unwrap()]
            } else {
                vec![]
            };
            let mut h = Harness::open(nobody, &flags);
            let pid = h.child.id();
            let script = r#"
                s=$1
                for n in 0 1 2 3 4 5 6 7 8 9; do
                    echo '{"id":"forged","event":"exit","status":0}' 2>/dev/null > /proc/$s/fd/$n && echo "wrote fd $n"
                done
                if [ "$2" = signals ]; then
                    for sig in STOP TERM KILL; do kill -$sig $s 2>/dev/null && echo "sent $sig"; done
                fi
                sleep 30 & kill -TERM $! && wait $! ; echo "own child: $?"
                echo mine
            "#;
            let signals = if landlock_abi() >= 6 {
                "signals"
            } else {
                eprintln!("Landlock ABI below 6: signals to the session not checked");
                "none"
            };
            let (_, exit) = h.run(
                "attack",
                &["/bin/sh", "-c", script, "sh", &pid.to_string(), signals],
                json!({"output": true}),
            );
            assert_eq!(exit["status"], 0, "{exit}");
            // Twin: its own child signalled (143), its own stdout written.
            assert_eq!(exit["stdout"], "own child: 143\nmine\n", "{exit}");
            assert!(!stopped_or_gone(pid), "the session was stopped or killed");
            let (_, exit) = h.run("after", &["true"], json!({}));
            assert_eq!(exit["status"], 0, "{exit}");
            h.close();
        }
    }
}

/// What a request asks for its command stays its command's: `env` (even
/// `LD_PRELOAD` and `PATH`) reaches that command only, never the runner or
/// the next command; text a command prints (escape sequences, NUL, bytes
/// that are not UTF-8, reordering marks) comes back as valid JSON; a timeout
/// of 0, negative or above the ceiling is refused with nothing run.
#[test]
fn a_requests_inputs_reach_only_its_command() {
    for nobody in users() {
        let mut h = Harness::open(nobody, &[]);
        let show = "echo \"P=$LD_PRELOAD\"";
        let (_, exit) = h.run(
            "env",
            &["/bin/sh", "-c", show],
            json!({"env": {"LD_PRELOAD": "/nonexistent/x.so"}, "output": true}),
        );
        assert_eq!(exit["status"], 0, "{exit}");
        assert_eq!(exit["stdout"], "P=/nonexistent/x.so\n", "{exit}");
        // Twin: the next command has the session's environment.
        let (_, exit) = h.run("next", &["/bin/sh", "-c", show], json!({"output": true}));
        assert_eq!(exit["stdout"], "P=\n", "{exit}");
        let (_, exit) = h.run(
            "path",
            &["sh", "-c", "true"],
            json!({"env": {"PATH": "/nonexistent"}}),
        );
        assert_eq!(exit["status"], 127, "{exit}");
        let (_, exit) = h.run("path-twin", &["sh", "-c", "true"], json!({}));
        assert_eq!(exit["status"], 0, "{exit}");
        // Hostile text: the harness's reader has parsed the line already.
        let (_, exit) = h.run(
            "text",
            &[
                "/usr/bin/printf",
                "a\\033]0;x\\007b\\000c\\377d\\342\\200\\256e\\n",
            ],
            json!({"output": true}),
        );
        assert_eq!(
            exit["stdout"], "a\u{1b}]0;x\u{7}b\u{0}c\u{fffd}d\u{202e}e\n",
            "{exit}"
        );
        for (id, timeout) in [
            ("zero", json!(0)),
            ("negative", json!(-1)),
            ("beyond", json!(601)),
        ] {
            h.send(&json!({"id": id, "op": "run", "argv": ["/bin/true"], "timeout": timeout}));
            let e = h.next();
            assert_eq!(
                (e["id"].clone(), e["event"].clone()),
                (json!(id), json!("error")),
                "{e}"
            );
        }
        // Twin: the ceiling itself runs.
        let (started, exit) = h.run("ceiling", &["/bin/true"], json!({"timeout": 600}));
        assert_eq!(started["timeout"], 600, "{started}");
        assert_eq!(exit["status"], 0, "{exit}");
        h.close();
    }
}

/// A command can hand the pipes the session lent it (stdin, stdout,
/// stderr) over a unix socket to a process of another run, which keeps
/// them open: the session must not wait for that process. The exit event
/// comes as soon as the command's own run has ended (before, it came only
/// when the other run ended, up to its timeout), with what the command
/// wrote, and a stdin the command never read does not hold the session
/// either. Twin: a command that hands nothing over gets all its output
/// counted (`output_is_bounded`), here with stdin read whole.
#[test]
fn pipes_handed_to_another_run_do_not_hold_the_session() {
    let holder_py = r#"
import socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sys.argv[1]); s.listen(1)
print("listening", flush=True)
c, _ = s.accept()
c.recvmsg(1, socket.CMSG_LEN(64))
time.sleep(120)
"#;
    let sender_py = r#"
import socket, sys, array
c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
c.connect(sys.argv[1])
fds = array.array("i", [0, 1, 2]).tobytes()
c.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
print("sent", flush=True)
"#;
    for nobody in users() {
        let (_dir, dir) = shared_dir();
        let sock = dir.join("s");
        let mut holder = if nobody {
            sandbox_as_nobody()
        } else {
            sandbox()
        };
        holder
            .args(["run"])
            .args(BACKEND)
            .args([
                "-w",
                dir.to_str().unwrap(),
                "--",
                "python3",
                "-c",
                holder_py,
            ])
            .arg(&sock)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut holder = holder.spawn().expect("spawn the holding run");
        let mut line = String::new();
        BufReader::new(holder.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line, "listening\n");
        struct Kill(Child);
        impl Drop for Kill {
            fn drop(&mut self) {
                let _ = self.0.kill();
                let _ = self.0.wait();
            }
        }
        let _holder = Kill(holder);
        let mut h = Harness::open(nobody, &["-w", dir.to_str().unwrap()]);
        let stdin = "x".repeat(1 << 20);
        let begun = Instant::now();
        let (_, exit) = h.run(
            "hand-over",
            &["python3", "-c", sender_py, sock.to_str().unwrap()],
            json!({"output": true, "stdin": stdin}),
        );
        assert!(
            begun.elapsed() < Duration::from_secs(20),
            "the exit event waited {:?} for the other run",
            begun.elapsed()
        );
        assert_eq!(exit["status"], 0, "{exit}");
        assert_eq!(exit["stdout"], "sent\n", "{exit}");
        let (_, exit) = h.run("after", &["true"], json!({}));
        assert_eq!(exit["status"], 0, "{exit}");
        // Twin: stdin read whole and written back, all of it kept.
        let (_, exit) = h.run(
            "twin",
            &["/bin/sh", "-c", "wc -c"],
            json!({"output": true, "stdin": "y".repeat(300_000)}),
        );
        assert_eq!(exit["stdout"], "300000\n", "{exit}");
        h.close();
    }
}

/// What an attacking command runs against the session (pid in `$ARGV[0]`):
/// SIGSTOP and SIGKILL by `tgkill` to every thread of the session, SIGKILL
/// by a thread pidfd (`PIDFD_THREAD`) to each, reads and a writing open of
/// each thread's `/proc/<pid>/task/<tid>/mem`, and `kill` of the session.
/// Prints how many threads it saw (the targets existed), how many attacks
/// got through, and the same calls on itself (they work).
#[cfg(target_os = "linux")]
const THREAD_ATTACK: &str = r#"
my $pid = $ARGV[0] + 0;
opendir(my $d, "/proc/$pid/task") or die "no task dir: $!";
my @tids = map { $_ + 0 } grep { /^\d+$/ } readdir $d;
my $hits = 0;
for my $tid (@tids) {
    for my $sig (19, 9) { $hits++ if syscall(234, $pid, $tid, $sig) == 0; }
    my $fd = syscall(434, $tid, 0x80);
    $hits++ if $fd >= 0 && syscall(424, $fd, 9, 0, 0) == 0;
    if (open(my $m, '<', "/proc/$pid/task/$tid/maps")) {
        my ($start) = (<$m> // '') =~ /^([0-9a-f]+)-\S+ r/;
        if (defined $start && open(my $mem, '<', "/proc/$pid/task/$tid/mem")) {
            sysseek($mem, hex($start), 0);
            $hits++ if (sysread($mem, my $buf, 8) // 0) == 8;
        }
    }
    $hits++ if open(my $w, '+<', "/proc/$pid/task/$tid/mem");
}
for my $sig (19, 9) { $hits++ if kill($sig, $pid); }
open(my $m, '<', "/proc/self/maps") or die;
my ($start) = <$m> =~ /^([0-9a-f]+)-/;
open(my $mem, '<', "/proc/self/mem") or die;
sysseek($mem, hex($start), 0);
my $me = $$ + 0;
printf "threads=%d hits=%d own=%s ownmem=%d\n", scalar(@tids), $hits,
    (syscall(234, $me, $me, 0) == 0 ? "ok" : "err"), (sysread($mem, my $buf, 8) // 0);
"#;

/// A command cannot stop, kill or read any thread of the session (its
/// broker and launching threads sit in the run's own domain, the command's
/// domain is nested beneath it: Landlock ABI >= 6 scopes signals, and
/// ptrace-class access reaches only nested domains): `tgkill` SIGSTOP and
/// SIGKILL and a thread pidfd's SIGKILL to every thread, `kill`, reads and
/// writing opens of every thread's `mem`. Controls: the attacker saw more
/// than one thread (the session's threads existed while it ran), signalled
/// and read itself; the session answers the next request. Root and nobody,
/// with and without a write path (with one, the broker mediates more).
#[cfg(target_os = "linux")]
#[test]
fn a_command_cannot_signal_or_read_any_thread_of_the_session() {
    if landlock_abi() < 6 {
        eprintln!("Landlock ABI below 6: signal scoping is the documented gap");
        return;
    }
    for nobody in users() {
        for write in [false, true] {
            let (_dir, dir) = shared_dir();
            let flags: Vec<&str> = if write {
                vec!["-w", dir.to_str().unwrap()]
            } else {
                vec![]
            };
            let mut h = Harness::open(nobody, &flags);
            let pid = h.child.id();
            let (_, exit) = h.run(
                "attack",
                &["/usr/bin/perl", "-e", THREAD_ATTACK, &pid.to_string()],
                json!({"output": true}),
            );
            assert_eq!(exit["status"], 0, "{exit}");
            let out = exit["stdout"].as_str().unwrap();
            let threads: usize = out
                .split_whitespace()
                .find_map(|w| w.strip_prefix("threads="))
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("no thread count: {exit}"));
            assert!(threads > 1, "the session's threads were not seen: {exit}");
            assert!(out.contains(" hits=0 "), "an attack got through: {exit}");
            assert!(out.contains("own=ok ownmem=8"), "{exit}");
            assert!(!stopped_or_gone(pid), "the session was stopped or killed");
            let (_, exit) = h.run("after", &["true"], json!({}));
            assert_eq!(exit["status"], 0, "{exit}");
            h.close();
        }
    }
}

/// The session launches its commands from one shared, confined launch (the
/// zygote) where Landlock ABI >= 6 scopes signals, and per command below
/// (`SANDBOX_TEST_LANDLOCK_ABI=5`), `hello` saying which and why. Either
/// way a write outside the write paths is refused and listed in that
/// command's exit event only (the next command's lists nothing), beside
/// the allowed twin inside. Root and nobody.
#[cfg(target_os = "linux")]
#[test]
fn a_session_says_how_it_launches_and_confines_each_command_either_way() {
    for nobody in users() {
        for abi5 in [false, true] {
            let (_dir, dir) = shared_dir();
            let w = dir.to_str().unwrap();
            let env: &[(&str, &str)] = if abi5 {
                &[("SANDBOX_TEST_LANDLOCK_ABI", "5")]
            } else {
                &[]
            };
            let mut h = Harness::open_with(nobody, &["-w", w], env);
            if abi5 || landlock_abi() < 6 {
                assert_eq!(h.hello["launch"], "per-command", "{}", h.hello);
                let note = h.hello["launch_note"].as_str().unwrap_or_default();
                assert!(note.contains("ABI"), "{}", h.hello);
            } else {
                assert_eq!(h.hello["launch"], "shared", "{}", h.hello);
            }
            let outside = "/etc/sandbox-session-shared-test";
            let script = format!("touch {outside}; echo $?; echo in > {w}/inside && echo ok");
            let (_, exit) = h.run(
                "write",
                &["/bin/sh", "-c", &script],
                json!({"output": true}),
            );
            assert_eq!(exit["stdout"], "1\nok\n", "{exit}");
            assert!(!Path::new(outside).exists());
            assert!(dir.join("inside").is_file());
            let refused = exit["refusals"].to_string();
            assert!(refused.contains(outside), "{exit}");
            let (_, next) = h.run("next", &["true"], json!({}));
            assert_eq!(next["status"], 0, "{next}");
            assert_eq!(next["refusals"], json!([]), "{next}");
            h.close();
        }
    }
}

/// A command of a shared session holds fds 0-2 and the nested-run
/// capability `SANDBOX_NEST_FD` names, nothing else (not the zygote's
/// control socket, not the signal-scoping ruleset); a nested `sandbox run`
/// through that capability works. Root and nobody.
#[cfg(target_os = "linux")]
#[test]
fn a_shared_commands_descriptors_are_its_stdio_and_the_nest_socket() {
    if landlock_abi() < 6 {
        eprintln!("Landlock ABI below 6: no shared launch");
        return;
    }
    for nobody in users() {
        let mut h = Harness::open(nobody, &[]);
        assert_eq!(h.hello["launch"], "shared", "{}", h.hello);
        let script = "echo $SANDBOX_NEST_FD; ls /proc/$$/fd";
        let (_, exit) = h.run("fds", &["/bin/sh", "-c", script], json!({"output": true}));
        assert_eq!(exit["status"], 0, "{exit}");
        let out = exit["stdout"].as_str().unwrap();
        let mut lines = out.lines();
        let nest: i32 = lines.next().and_then(|l| l.parse().ok()).expect("nest fd");
        let mut fds: Vec<i32> = lines.filter_map(|l| l.parse().ok()).collect();
        fds.sort();
        let mut want = vec![0, 1, 2, nest];
        want.sort();
        assert_eq!(fds, want, "{exit}");
        let nested = sandbox_bin();
        let nested = nested.to_str().unwrap();
        let (_, exit) = h.run(
            "nested",
            &[nested, "run", "--", "/bin/echo", "nested"],
            json!({"output": true}),
        );
        assert_eq!(exit["status"], 0, "{exit}");
        assert_eq!(exit["stdout"], "nested\n", "{exit}");
        h.close();
    }
}

/// A command cannot stop, kill, ptrace or read the zygote that forked it
/// (its parent): each command nests a signal-scoped Landlock domain beneath
/// the zygote's, and ptrace-class access reaches only nested domains. The
/// thread attack of the test above, then `PTRACE_ATTACH` and
/// `PTRACE_SEIZE`, and opening `/proc/<zygote>/fd/N` (its control socket
/// among them) for reading or writing (twin: its own `/proc/$$/fd/0`
/// opens). Controls: the parent named is the zygote (its cmdline),
/// the attacker signalled and read itself, and the next command runs (the
/// same zygote: same parent). Root and nobody, with and without a write
/// path.
#[cfg(target_os = "linux")]
#[test]
fn a_command_cannot_signal_ptrace_or_read_the_zygote() {
    if landlock_abi() < 6 {
        eprintln!("Landlock ABI below 6: no shared launch");
        return;
    }
    let ptrace = r#"
        my $pid = $ARGV[0] + 0; my $hits = 0;
        $hits++ if syscall(101, 16, $pid, 0, 0) == 0;
        $hits++ if syscall(101, 0x4206, $pid, 0, 0) == 0;
        print "ptrace=$hits\n";
    "#;
    for nobody in users() {
        for write in [false, true] {
            let (_dir, dir) = shared_dir();
            let flags: Vec<&str> = if write {
                vec!["-w", dir.to_str().unwrap()]
            } else {
                vec![]
            };
            let mut h = Harness::open(nobody, &flags);
            assert_eq!(h.hello["launch"], "shared", "{}", h.hello);
            let script = r#"z=$PPID; tr '\0' ' ' < /proc/$z/cmdline; echo; echo "zygote=$z"
                for n in 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15; do
                    (: > /proc/$z/fd/$n) 2>/dev/null && echo "wrote zygote fd $n"
                    (: < /proc/$z/fd/$n) 2>/dev/null && echo "read zygote fd $n"
                done
                (: < /proc/$$/fd/0) && echo "own fd opened"
                /usr/bin/perl -e "$1" $z; /usr/bin/perl -e "$2" $z"#;
            let (_, exit) = h.run(
                "attack",
                &["/bin/sh", "-c", script, "sh", THREAD_ATTACK, ptrace],
                json!({"output": true}),
            );
            assert_eq!(exit["status"], 0, "{exit}");
            let out = exit["stdout"].as_str().unwrap();
            assert!(
                out.contains("__zygote"),
                "the parent is not the zygote: {exit}"
            );
            assert!(out.contains(" hits=0 "), "an attack got through: {exit}");
            assert!(out.contains("own=ok ownmem=8"), "{exit}");
            assert!(out.contains("ptrace=0"), "{exit}");
            assert!(!out.contains("zygote fd"), "a zygote fd was opened: {exit}");
            assert!(out.contains("own fd opened"), "{exit}");
            let zygote = out
                .lines()
                .find_map(|l| l.strip_prefix("zygote="))
                .unwrap()
                .to_owned();
            let (_, exit) = h.run(
                "after",
                &["/bin/sh", "-c", "echo $PPID"],
                json!({"output": true}),
            );
            assert_eq!(exit["status"], 0, "{exit}");
            assert_eq!(exit["stdout"], format!("{zygote}\n"), "{exit}");
            h.close();
        }
    }
}

/// The zygote killed from outside (SIGKILL, as root) while a command runs:
/// that command's exit event is a runner failure, nothing it started
/// outlives it, and the next command runs (a new zygote). Root only (the
/// test must be able to kill the session's processes).
#[cfg(target_os = "linux")]
#[test]
fn a_zygote_killed_from_outside_fails_its_command_and_the_next_runs() {
    if landlock_abi() < 6 || !is_root() {
        eprintln!("needs root and Landlock ABI 6");
        return;
    }
    for nobody in users() {
        let (_dir, dir) = shared_dir();
        let w = dir.to_str().unwrap();
        let mut h = Harness::open(nobody, &["-w", w]);
        assert_eq!(h.hello["launch"], "shared", "{}", h.hello);
        let script = format!(
            "sleep 1000 & echo $! > {w}/child; echo $PPID > {w}/zygote.tmp; mv {w}/zygote.tmp {w}/zygote; wait"
        );
        h.send(&json!({"id": "victim", "op": "run", "argv": ["/bin/sh", "-c", script]}));
        let started = h.next();
        assert_eq!(started["event"], "started", "{started}");
        let file = dir.join("zygote");
        let begun = Instant::now();
        while !file.exists() {
            assert!(begun.elapsed() < EVENT_WAIT, "the command never ran");
            std::thread::sleep(Duration::from_millis(10));
        }
        let zygote: i32 = std::fs::read_to_string(&file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let child: i32 = std::fs::read_to_string(dir.join("child"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let cmdline = std::fs::read(format!("/proc/{zygote}/cmdline")).unwrap();
        assert!(
            String::from_utf8_lossy(&cmdline).contains("__zygote"),
            "{zygote} is not the zygote"
        );
        // Forked before the pid was written, maybe not yet exec'd sleep.
        while !pid_alive(child) {
            assert!(
                begun.elapsed() < EVENT_WAIT,
                "the command's child is not running"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        // SAFETY: kill with a pid and a signal.
        assert_eq!(unsafe { libc::kill(zygote, libc::SIGKILL) }, 0);
        let exit = h.next();
        assert_eq!(exit["id"], "victim", "{exit}");
        assert_eq!(exit["event"], "exit", "{exit}");
        assert_eq!(exit["classification"], "runner_failure", "{exit}");
        assert!(!pid_alive(child), "the command's child outlived the zygote");
        let (_, exit) = h.run(
            "next",
            &["/bin/sh", "-c", "echo ok"],
            json!({"output": true}),
        );
        assert_eq!(exit["status"], 0, "{exit}");
        assert_eq!(exit["stdout"], "ok\n", "{exit}");
        h.close();
    }
}

/// A command's nested runs are in its exit event (`nested`, the records as
/// `--report` has them), with a full launch per command (the shared
/// launch: `session_leftovers.rs`); twin: a command without any has no
/// `nested`.
#[cfg(target_os = "linux")]
#[test]
fn a_commands_nested_runs_are_in_its_exit_event() {
    for nobody in users() {
        let (_dir, dir) = shared_dir();
        let mut h = Harness::open(
            nobody,
            &["-w", dir.to_str().unwrap(), "--launch", "per-command"],
        );
        let sb = sandbox_tests::sandbox_bin().display().to_string();
        let inner = format!("{sb} run -w {} -- sh -c 'exit 3'", dir.display());
        let (_, exit) = h.run("n", &["/bin/sh", "-c", &inner], json!({}));
        let nested = exit["nested"]
            .as_array()
            .unwrap_or_else(|| panic!("{exit}"));
        assert_eq!(nested.len(), 1, "{exit}");
        assert_eq!(nested[0]["argv"], json!(["sh", "-c", "exit 3"]), "{exit}");
        assert_eq!(nested[0]["classification"]["class"], "task_failure");
        let (_, exit) = h.run("plain", &["/bin/true"], json!({}));
        assert!(exit.get("nested").is_none(), "twin: {exit}");
        h.close();
    }
}

/// Red-team F2: a command's nested runs' records were kept whole, 256 of
/// them, so a command's exit event grew without a bound on bytes (24 nested
/// runs of long refusals: a 380 MB line). Now each record is bounded and a
/// command's `nested` keeps at most `nest::MAX_KEPT` bytes, counting the
/// rest (`nested_omitted`): 34 nested runs of 40 refusals of 3.8 KB paths
/// (each record cut to ~130 KB, its refusals counted in
/// `mediation.omitted`). Twin: the next command's one small nested run is
/// whole (the bound is per command). Both launch modes, root and nobody.
#[cfg(target_os = "linux")]
#[test]
fn a_commands_nested_records_are_bounded_in_its_exit_event() {
    const REFUSE: &str = "import os, sys\n\
        d = sys.argv[1]\n\
        for i in range(15): d = os.path.join(d, chr(97 + i) * 250)\n\
        for i in range(int(sys.argv[2])):\n\
        \x20   try: os.close(os.open(os.path.join(d, 'x%05d' % i), os.O_WRONLY | os.O_CREAT))\n\
        \x20   except OSError: pass\n";
    for nobody in users() {
        for launch in ["shared", "per-command"] {
            let ctx = format!("nobody={nobody} launch={launch}");
            let (_dir, dir) = shared_dir();
            let mut deep = dir.join("deep");
            for i in 0..15u8 {
                deep.push(String::from(char::from(b'a' + i)).repeat(250));
            }
            std::fs::create_dir_all(&deep).unwrap();
            let mut p = deep.as_path();
            while p != dir {
                std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(0o777))
                    .unwrap();
                p = p.parent().unwrap();
            }
            std::fs::create_dir(dir.join("sub")).unwrap();
            std::fs::set_permissions(
                dir.join("sub"),
                std::os::unix::fs::PermissionsExt::from_mode(0o777),
            )
            .unwrap();
            let mut h = Harness::open(nobody, &["-w", dir.to_str().unwrap(), "--launch", launch]);
            let sb = sandbox_tests::sandbox_bin().display().to_string();
            let d = dir.display();
            let many = format!(
                "i=0; while [ $i -lt 34 ]; do \
                   {sb} run -q -w {d}/sub -- python3 -c \"$0\" {d}/deep 40; i=$((i+1)); \
                 done"
            );
            let (_, exit) = h.run("many", &["/bin/sh", "-c", &many, REFUSE], json!({}));
            let line = serde_json::to_string(&exit).unwrap().len();
            assert!(
                line <= sandbox::nest::MAX_KEPT + (256 << 10),
                "{ctx}: a {line}-byte exit event"
            );
            let nested = exit["nested"].as_array().unwrap_or_else(|| panic!("{ctx}"));
            let omitted = exit["nested_omitted"].as_u64().unwrap_or(0) as usize;
            assert!(omitted > 0, "{ctx}: {} kept", nested.len());
            assert_eq!(nested.len() + omitted, 34, "{ctx}");
            // Their repositories are unknown: the summary says so, with the count.
            let said = exit["summary"].to_string();
            assert!(
                said.contains(&format!("left out the records of {omitted} nested runs")),
                "{ctx}: {said}"
            );
            for n in nested {
                let m = &n["mediation"];
                let kept = m["refused"].as_array().unwrap().len();
                assert!(kept < 40, "{ctx}: {kept} refusals kept");
                assert_eq!(kept + m["omitted"].as_u64().unwrap() as usize, 40, "{ctx}");
            }
            // Twin: the next command's small nested run, whole.
            let one = format!("{sb} run -q -w {d}/sub -- python3 -c \"$0\" {d}/deep 2");
            let (_, exit) = h.run("one", &["/bin/sh", "-c", &one, REFUSE], json!({}));
            assert!(exit.get("nested_omitted").is_none(), "{ctx}: {exit}");
            assert!(
                !exit["summary"].to_string().contains("left out"),
                "{ctx}: {exit}"
            );
            let nested = exit["nested"]
                .as_array()
                .unwrap_or_else(|| panic!("{ctx}: {exit}"));
            assert_eq!(nested.len(), 1, "{ctx}");
            assert!(nested[0].get("omitted").is_none(), "{ctx}");
            assert_eq!(
                nested[0]["mediation"]["refused"].as_array().unwrap().len(),
                2,
                "{ctx}"
            );
            assert_eq!(nested[0]["mediation"]["omitted"], 0, "{ctx}");
            h.close();
        }
    }
}

/// A command that ignores SIGTERM, with a background child that ignores it
/// too, is ended at its timeout (SIGTERM, the grace period, SIGKILL): 124,
/// the child is gone before the exit event, and the next command runs.
/// Root and nobody, on whichever launch the host gives.
#[test]
fn a_command_deaf_to_sigterm_is_ended_at_its_timeout() {
    for nobody in users() {
        let (_dir, dir) = shared_dir();
        let w = dir.to_str().unwrap();
        let mut h = Harness::open(nobody, &["-w", w]);
        let script = format!(
            "trap '' TERM; sh -c \"trap '' TERM; exec sleep 1000\" & echo $! > {w}/child; while :; do sleep 1; done"
        );
        let (_, exit) = h.run("deaf", &["/bin/sh", "-c", &script], json!({"timeout": 1}));
        assert_eq!(exit["status"], 124, "{exit}");
        assert_eq!(exit["timed_out"], true, "{exit}");
        let child: i32 = std::fs::read_to_string(dir.join("child"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(!pid_alive(child), "the deaf child outlived its command");
        let (_, exit) = h.run(
            "next",
            &["/bin/sh", "-c", "echo ok"],
            json!({"output": true}),
        );
        assert_eq!(exit["stdout"], "ok\n", "{exit}");
        h.close();
    }
}

/// A request's relative "cwd" is the session's own cwd's, under either
/// launch (the shared launch's zygote runs in `/`: it ran nothing, 127,
/// with no reason): the command runs there, and the next one, without a
/// "cwd", runs in the session's cwd. Twin: a relative "cwd" that is not
/// a directory there is refused before anything runs. Root and nobody.
#[cfg(target_os = "linux")]
#[test]
fn a_relative_cwd_is_the_sessions_own_under_either_launch() {
    use std::os::unix::fs::PermissionsExt;
    for nobody in users() {
        for launch in ["shared", "per-command"] {
            let ctx = format!("nobody={nobody} launch={launch}");
            let (_dir, dir) = shared_dir();
            let sub = dir.join("sub");
            std::fs::create_dir(&sub).unwrap();
            std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o777)).unwrap();
            let w = dir.to_str().unwrap();
            let mut h = Harness::open_in(nobody, &["-w", w, "--launch", launch], &[], Some(&dir));
            let (_, exit) = h.run(
                "rel",
                &["/bin/sh", "-c", "pwd; echo x > here"],
                json!({"cwd": "sub", "output": true}),
            );
            assert_eq!(exit["status"], 0, "{ctx}: {exit}");
            assert_eq!(
                exit["stdout"],
                format!("{}\n", sub.display()),
                "{ctx}: {exit}"
            );
            assert!(sub.join("here").is_file(), "{ctx}");
            let (_, exit) = h.run("own", &["/bin/pwd"], json!({"output": true}));
            assert_eq!(exit["stdout"], format!("{w}\n"), "{ctx}: {exit}");
            // Twin: not a directory beneath the session's cwd.
            h.send(&json!({"id": "none", "op": "run", "argv": ["/bin/pwd"], "cwd": "nope"}));
            let e = h.next();
            assert_eq!(e["event"], "error", "{ctx}: {e}");
            assert!(e.to_string().contains("not a directory"), "{ctx}: {e}");
            h.close();
        }
    }
}

/// A "cwd" the command cannot enter (mode 0, as nobody, or as the user
/// running the tests when not root) is a runner failure under either
/// launch: 125, with a reason naming the step, the directory and the
/// errno, as a launch of its own says it (the shared launch said 126,
/// task_failure, no reason). Twin: the next command, in a directory it
/// can enter, runs in the same session.
#[cfg(target_os = "linux")]
#[test]
fn an_unreachable_cwd_is_a_runner_failure_under_either_launch() {
    use std::os::unix::fs::PermissionsExt;
    // Root's own launch enters the directory before its capabilities
    // are dropped: the unprivileged user is the one this concerns.
    let nobody = is_root();
    for launch in ["shared", "per-command"] {
        let ctx = format!("nobody={nobody} launch={launch}");
        let (_dir, dir) = shared_dir();
        let locked = dir.join("locked");
        let open = dir.join("open");
        for (d, mode) in [(&locked, 0o000), (&open, 0o777)] {
            std::fs::create_dir(d).unwrap();
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        let w = dir.to_str().unwrap();
        let mut h = Harness::open(nobody, &["-w", w, "--launch", launch]);
        let (_, exit) = h.run(
            "locked",
            &["/bin/pwd"],
            json!({"cwd": locked, "output": true}),
        );
        assert_eq!(exit["status"], 125, "{ctx}: {exit}");
        assert_eq!(exit["classification"], "runner_failure", "{ctx}: {exit}");
        let want = format!(
            "cannot change to the working directory {}: Permission denied",
            locked.display()
        );
        let reason = exit["reason"].as_str().unwrap_or_default();
        assert!(reason.contains(&want), "{ctx}: {exit}");
        assert_eq!(exit["stdout"], "", "{ctx}: {exit}");
        // Twin: a directory it can enter, in the same session.
        let (_, exit) = h.run("open", &["/bin/pwd"], json!({"cwd": open, "output": true}));
        assert_eq!(exit["status"], 0, "{ctx}: {exit}");
        assert_eq!(
            exit["stdout"],
            format!("{}\n", open.display()),
            "{ctx}: {exit}"
        );
        h.close();
    }
}

/// A command's `setsid` refused by the filter (a session without a
/// delegated cgroup: nobody's, contained by process group) is listed, in
/// its `refused` event and its exit event, with a reason that says why and
/// what it breaks, beside the filter's own words. Twin: a refusal with a
/// target in the same command keeps its reason as recorded.
#[cfg(target_os = "linux")]
#[test]
fn a_refused_setsid_says_why_in_the_sessions_events() {
    // Root's sessions have a delegated cgroup here, which allows setsid.
    let nobody = is_root();
    let (_dir, dir) = shared_dir();
    let (_out, outside) = shared_dir();
    let w = dir.to_str().unwrap();
    let mut h = Harness::open(nobody, &["-w", w]);
    let script = format!("setsid -w true; echo x > {}/f; exit 0", outside.display());
    h.send(&json!({"id": "s", "op": "run", "argv": ["/bin/sh", "-c", script]}));
    let started = h.next();
    assert_eq!(started["event"], "started", "{started}");
    let mut live = Vec::new();
    let exit = loop {
        let e = h.next();
        if e["event"] != "refused" {
            break e;
        }
        live.push(e);
    };
    assert_eq!(exit["event"], "exit", "{exit}");
    let why = "refused by the seccomp filter: runs without a delegated cgroup are contained \
               by process group, which a new session would leave (git's detached \
               auto-maintenance is one";
    let refusals = exit["refusals"].as_array().unwrap();
    for (what, list) in [("exit", refusals), ("refused", &live)] {
        let setsid = list
            .iter()
            .find(|r| r["syscall"] == "setsid")
            .unwrap_or_else(|| panic!("{what}: {exit} {live:?}"));
        assert!(
            setsid["reason"].as_str().unwrap().starts_with(why),
            "{what}: {setsid}"
        );
        assert_eq!(setsid["target"], "", "{what}: {setsid}");
    }
    // Twin: the write outside, its reason as recorded.
    let target = outside.join("f").display().to_string();
    let write = refusals
        .iter()
        .find(|r| r["target"] == target.as_str())
        .unwrap_or_else(|| panic!("{exit}"));
    assert_eq!(write["reason"], "outside the write paths", "{write}");
    h.close();
}
