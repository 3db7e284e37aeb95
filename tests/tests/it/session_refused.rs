//! `sandbox session` (#45): a command's refusals reach the harness as
//! `refused` events while it runs, before its exit event; at most the
//! broker's cap of them per command, the rest only counted; the exit event
//! lists every refusal as before. Root and nobody, both launch modes.
#![cfg(target_os = "linux")]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc::Receiver;
use std::time::Duration;

use sandbox_tests::{is_root, sandbox, sandbox_as_nobody, shared_dir};
use serde_json::{json, Value};

use crate::session_ns::next_event;

/// The real backend for this host, failing if absent.
const BACKEND: &[&str] = &["--backend", "auto", "--on-unsupported", "error"];
/// How long any one event may take before the test fails (not hangs).
const EVENT_WAIT: Duration = Duration::from_secs(60);
/// The broker's live cap (`sandbox_broker::Between::LIVE_CAP`).
const LIVE_CAP: usize = 100;

/// (nobody, launch) pairs: root and nobody when root, both launch modes.
fn cases() -> Vec<(bool, &'static str)> {
    let users = if is_root() {
        vec![false, true]
    } else {
        vec![false]
    };
    users
        .into_iter()
        .flat_map(|nobody| [(nobody, "shared"), (nobody, "per-command")])
        .collect()
}

/// A file anyone may change, in `dir`.
fn file_in(dir: &Path, name: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let f = dir.join(name);
    std::fs::write(&f, b"x").unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o666)).unwrap();
    f
}

struct Harness {
    child: Child,
    stdin: Option<ChildStdin>,
    events: Receiver<Value>,
}

impl Harness {
    fn open(nobody: bool, launch: &str, write: &Path) -> Self {
        let mut cmd = if nobody {
            sandbox_as_nobody()
        } else {
            sandbox()
        };
        cmd.arg("session")
            .args(BACKEND)
            .args(["--launch", launch, "--write"])
            .arg(write)
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
                    .unwrap_or_else(|e| panic!("not an event ({e}): {line:?}"));
                if tx.send(event).is_err() {
                    break;
                }
            }
        });
        let h = Harness {
            child,
            stdin,
            events,
        };
        let hello = h.next();
        assert_eq!(hello["event"], "hello", "{hello}");
        assert_eq!(hello["launch"], launch, "{hello}");
        h
    }

    fn send(&mut self, request: &Value) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(request.to_string().as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    #[track_caller]
    fn next(&self) -> Value {
        next_event(&self.events, EVENT_WAIT)
    }

    /// Events of `id` up to and including its exit event.
    #[track_caller]
    fn until_exit(&self, id: &str) -> (Vec<Value>, Value) {
        let mut before = Vec::new();
        loop {
            let e = self.next();
            assert_eq!(e["id"], id, "{e}");
            if e["event"] == "exit" {
                return (before, e);
            }
            before.push(e);
        }
    }

    fn close(mut self) {
        self.send(&json!({"op": "close"}));
        let closed = self.next();
        assert_eq!(closed["event"], "closed", "{closed}");
        drop(self.stdin.take());
        assert_eq!(self.child.wait().unwrap().code(), Some(0));
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

/// A command that changes `target`'s mode, then waits (bounded) for `go`
/// and says whether it came.
fn chmod_then_wait(target: &Path, go: &Path) -> Vec<String> {
    vec![
        "sh".into(),
        "-c".into(),
        "chmod 600 \"$1\" 2>/dev/null; i=0; while [ ! -e \"$2\" ] && [ $i -lt 3000 ]; do sleep 0.02; i=$((i+1)); done; [ -e \"$2\" ] && echo came"
            .into(),
        "sh".into(),
        target.display().to_string(),
        go.display().to_string(),
    ]
}

#[test]
fn a_refusal_is_an_event_before_the_exit_and_the_allowed_twin_has_none() {
    for (nobody, launch) in cases() {
        let (_w, write) = shared_dir();
        let (_o, outside) = shared_dir();
        let refused_file = file_in(&outside, "f");
        let allowed_file = file_in(&write, "f");
        if nobody {
            std::os::unix::fs::chown(&allowed_file, Some(65534), Some(65534)).unwrap();
        }
        let mut h = Harness::open(nobody, launch, &write);

        // Refused: the event comes while the command waits for `go`.
        let go = write.join("go");
        h.send(&json!({"id": "r", "op": "run", "argv": chmod_then_wait(&refused_file, &go), "output": true}));
        let started = h.next();
        assert_eq!(started["event"], "started", "{started}");
        let refused = h.next();
        assert_eq!(refused["id"], "r", "{nobody} {launch}: {refused}");
        assert_eq!(refused["event"], "refused", "{nobody} {launch}: {refused}");
        assert_eq!(refused["syscall"], "fchmodat", "{refused}");
        assert_eq!(
            refused["target"],
            refused_file.display().to_string(),
            "{refused}"
        );
        assert_eq!(refused["outside_write_paths"], true, "{refused}");
        std::fs::write(&go, b"").unwrap();
        let (more, exit) = h.until_exit("r");
        assert!(more.is_empty(), "{nobody} {launch}: {more:?}");
        assert_eq!(exit["stdout"], "came\n", "{nobody} {launch}: {exit}");
        // The exit event lists it as before, with the same fields.
        let listed = exit["refusals"].as_array().unwrap();
        assert_eq!(listed.len(), 1, "{exit}");
        let mut live = refused.as_object().unwrap().clone();
        live.remove("id");
        live.remove("event");
        assert_eq!(listed[0], Value::Object(live), "{exit}");
        assert!(exit.get("refused_events_dropped").is_none(), "{exit}");

        // The twin: allowed, no event before its exit.
        let go = write.join("go2");
        std::fs::write(&go, b"").unwrap();
        h.send(&json!({"id": "a", "op": "run", "argv": chmod_then_wait(&allowed_file, &go), "output": true}));
        let started = h.next();
        assert_eq!(started["event"], "started", "{started}");
        let (before, exit) = h.until_exit("a");
        assert!(before.is_empty(), "{nobody} {launch}: {before:?}");
        assert_eq!(exit["status"], 0, "{exit}");
        assert_eq!(exit["refusals"], json!([]), "{exit}");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&allowed_file)
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{nobody} {launch}");
        h.close();
    }
}

#[test]
fn a_flood_of_refusals_sends_at_most_the_cap_and_the_exit_counts_them_all() {
    const N: usize = 10_000;
    for (nobody, launch) in cases() {
        let (_w, write) = shared_dir();
        let (_o, outside) = shared_dir();
        file_in(&outside, "f");
        let mut h = Harness::open(nobody, launch, &write);
        // One chmod naming the file N times: N refused fchmodat calls.
        let script = format!(
            "set --; i=0; while [ $i -lt {N} ]; do set -- \"$@\" f; i=$((i+1)); done; chmod 600 \"$@\" 2>/dev/null; echo done"
        );
        h.send(
            &json!({"id": "flood", "op": "run", "argv": ["sh", "-c", script],
            "cwd": outside, "output": true}),
        );
        let started = h.next();
        assert_eq!(started["event"], "started", "{started}");
        let (before, exit) = h.until_exit("flood");
        assert!(before.iter().all(|e| e["event"] == "refused"), "{before:?}");
        assert!(
            before.len() <= LIVE_CAP,
            "{nobody} {launch}: {} live events",
            before.len()
        );
        assert!(!before.is_empty(), "{nobody} {launch}: no live event");
        assert_eq!(exit["stdout"], "done\n", "{exit}");
        let listed = exit["refusals"].as_array().unwrap().len();
        let omitted = exit["refusals_omitted"].as_u64().unwrap_or(0) as usize;
        assert_eq!(listed + omitted, N, "{nobody} {launch}");
        assert_eq!(
            exit["refused_events_dropped"].as_u64().unwrap_or(0) as usize + before.len(),
            N,
            "{nobody} {launch}"
        );
        // Still answering, and the next command starts afresh.
        h.send(&json!({"id": "next", "op": "run", "argv": ["true"]}));
        let started = h.next();
        assert_eq!(started["event"], "started", "{started}");
        let (before, exit) = h.until_exit("next");
        assert!(before.is_empty(), "{before:?}");
        assert_eq!(exit["status"], 0, "{exit}");
        assert!(exit.get("refused_events_dropped").is_none(), "{exit}");
        h.close();
    }
}

/// The Python client's `on_refused` sees a refusal while the command runs:
/// the callback makes the file the command waits for.
#[test]
fn the_python_clients_on_refused_sees_a_refusal_while_the_command_runs() {
    let clients = Path::new(env!("CARGO_MANIFEST_DIR")).join("../clients/python");
    for launch in ["shared", "per-command"] {
        let (_w, write) = shared_dir();
        let (_o, outside) = shared_dir();
        let refused_file = file_in(&outside, "f");
        let go = write.join("go");
        let argv = chmod_then_wait(&refused_file, &go);
        let script = r#"
import json, os, sys
from sandbox_session import Session
w, launch, go, argv = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
seen = []
def on_refused(e):
    seen.append(e)
    open(go, "w").close()
with Session(args=["--backend", "auto", "--on-unsupported", "error", "--launch", launch, "-w", w],
             sandbox=os.environ["SANDBOX_BIN"], on_refused=on_refused) as s:
    r = s.run(argv, output=True)
    assert r["stdout"] == "came\n", r
    assert len(seen) == 1, seen
    assert seen[0]["syscall"] == "fchmodat", seen
    assert [dict((k, v) for k, v in seen[0].items() if k not in ("id", "event"))] == r["refusals"], (seen, r)
    r = s.run(["true"])
    assert r["status"] == 0 and len(seen) == 1, (seen, r)
print("client ok")
"#;
        let out = std::process::Command::new("python3")
            .arg("-c")
            .arg(script)
            .arg(&write)
            .arg(launch)
            .arg(&go)
            .arg(serde_json::to_string(&argv).unwrap())
            .env("PYTHONPATH", &clients)
            .env("SANDBOX_BIN", sandbox_tests::sandbox_bin())
            .env_remove("SANDBOX_CONFIG")
            .env("XDG_CONFIG_HOME", "/nonexistent/sandbox-tests-config")
            .output()
            .expect("python3");
        assert!(
            out.status.success(),
            "{launch}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("client ok"));
    }
}
