//! A session whose policy has an egress (an `--allow-net` allowlist,
//! secrets, `--approval channel`) uses the shared launch (#45): the zygote
//! run starts the proxy and the resolver once, every command it forks gets
//! the variables a `sandbox run` gets, each command's exit event lists its
//! own proxy and resolver refusals only, which also come live as `refused`
//! events (under `--launch per-command` too), a
//! secret's placeholder is the session's, an approval asked during a
//! command names that command, a background process holding a proxy
//! connection is gone before the next command, and commands may be kept.
//! Each session runs in a private network and mount namespace with local
//! origins (`svc.example.com` is 93.184.215.34 there, routed to the
//! namespace's loopback; `pkgs.example.com` a TLS origin on 127.0.0.1:8443
//! that logs the `Authorization` it gets): nothing leaves the machine.
//! Root and nobody.
#![cfg(target_os = "linux")]

use std::collections::BTreeSet;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, ChildStdin};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::private_net::LOOPBACK_UP;

use crate::session_ns::{
    events_of, kill_pids, namespace_dir, next_event, unshare, users, EVENT_WAIT, SVC_IP,
};

/// The session's own flags (after `sandbox session`).
const SESSION: &str = r#""$SANDBOX" session --backend auto --on-unsupported error"#;

struct Harness {
    child: Child,
    stdin: Option<ChildStdin>,
    events: Receiver<Value>,
    dir: tempfile::TempDir,
    hello: Value,
}

impl Harness {
    /// In a private network and mount namespace with the origins, runs
    /// `tail` (`$WRAP` is the `setpriv` to nobody or nothing, `$SESSION`
    /// the session command without its policy flags), whose last step is a
    /// session; reads its `hello`. `env` is added to the namespace's
    /// environment.
    fn open(nobody: bool, tail: &str, env: &[(&str, &str)]) -> Self {
        let (dir, d, wrap) = namespace_dir(nobody);
        let setup = format!(
            r#"set -e
mount --bind "$D/hosts" /etc/hosts
{LOOPBACK_UP}
ip route add local {SVC_IP}/32 dev lo
python3 -c '
import http.server, sys, threading, time
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        with open(sys.argv[1], "a") as log: log.write(self.path + "\n")
        if self.path.startswith("/slow"):
            time.sleep(120)
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
    def do_GET(self):
        with open(sys.argv[1] + "/tls.log", "a") as log:
            log.write(self.path + " auth=" + str(self.headers.get("Authorization")) + "\n")
        body = b"secure"
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
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
"#,
            tail = tail.replace("$SESSION", SESSION)
        );
        let mut child = unshare(&setup, &[], wrap, &d, &[], env)
            .spawn()
            .expect("unshare (util-linux) makes the namespaces");
        let stdin = child.stdin.take();
        let events = events_of(child.stdout.take().unwrap());
        let mut h = Harness {
            child,
            stdin,
            events,
            dir,
            hello: Value::Null,
        };
        let hello = h.next();
        assert_eq!(hello["event"], "hello", "{hello}");
        h.hello = hello;
        h
    }

    fn path(&self) -> PathBuf {
        std::fs::canonicalize(self.dir.path()).unwrap()
    }

    fn send(&mut self, request: &Value) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(format!("{request}\n").as_bytes()).unwrap();
        stdin.flush().unwrap();
    }

    #[track_caller]
    fn next(&self) -> Value {
        next_event(&self.events, EVENT_WAIT)
    }

    /// Starts a shell script with its output captured; returns after its
    /// `started` event.
    #[track_caller]
    fn start(&mut self, id: &str, script: &str, extra: Value) {
        let mut request =
            json!({"id": id, "op": "run", "argv": ["/bin/sh", "-c", script], "output": true});
        if let (Some(r), Some(e)) = (request.as_object_mut(), extra.as_object()) {
            r.extend(e.clone());
        }
        self.send(&request);
        let started = self.next();
        assert_eq!(
            (started["id"].as_str(), started["event"].as_str()),
            (Some(id), Some("started")),
            "{started}"
        );
    }

    /// The events up to command `id`'s exit: its `refused` events (each
    /// checked to name `id`) and the exit event; any other event fails.
    #[track_caller]
    fn until_exit(&self, id: &str) -> (Vec<Value>, Value) {
        let mut refused = Vec::new();
        loop {
            let e = self.next();
            assert_eq!(e["id"].as_str(), Some(id), "{e}");
            match e["event"].as_str() {
                Some("refused") => refused.push(e),
                Some("exit") => return (refused, e),
                _ => panic!("unexpected event during {id}: {e}"),
            }
        }
    }

    /// Runs a script to its end: its `refused` events and its exit event.
    #[track_caller]
    fn run(&mut self, id: &str, script: &str) -> (Vec<Value>, Value) {
        self.start(id, script, json!({}));
        self.until_exit(id)
    }

    fn close(mut self) {
        self.send(&json!({"op": "close"}));
        let closed = loop {
            let e = self.next();
            if e["event"] != "kept_ended" {
                break e;
            }
        };
        assert_eq!(closed["event"], "closed", "{closed}");
        drop(self.stdin.take());
        assert_eq!(self.child.wait().unwrap().code(), Some(0));
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        kill_pids(&self.path(), &["origin.pid", "tls-origin.pid"]);
        if std::thread::panicking() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `curl` through the run's proxy to `http://HOST:8080PATH`, printing
/// `<body> <status>`.
fn curl_to(host: &str, path: &str) -> String {
    format!("curl -s -m 60 -w ' %{{http_code}}\\n' http://{host}:8080{path}")
}

/// The targets of a list of refusals (an exit event's `refusals`, or
/// `refused` events).
fn targets(refusals: &[Value]) -> Vec<String> {
    refusals
        .iter()
        .map(|r| r["target"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Under `--allow-net svc.example.com:8080` the session launches shared and
/// keeps commands; each command reaches the listed host through the proxy,
/// and its exit event lists only its own refusals, the first command's
/// refusal also coming live as a `refused` event with its id (twin: the
/// second command, admitted only, has none of either).
#[test]
fn an_allowlist_session_is_shared_and_each_command_has_its_own_refusals() {
    for nobody in users() {
        let tail = r#"exec $WRAP $SESSION --allow-net svc.example.com:8080"#;
        let mut h = Harness::open(nobody, tail, &[]);
        assert_eq!(h.hello["launch"], "shared", "{}", h.hello);
        assert_eq!(h.hello["launch_note"], Value::Null, "{}", h.hello);
        assert!(h.hello["max_kept"].as_u64() > Some(0), "{}", h.hello);

        let script = format!(
            "{}; {}",
            curl_to("other.example.com", "/refused"),
            curl_to("svc.example.com", "/one")
        );
        let (live, exit) = h.run("1", &script);
        let out = exit["stdout"].as_str().unwrap();
        assert!(
            out.contains(" 403\n"),
            "the unlisted host is refused: {exit}"
        );
        assert!(
            out.ends_with("hello 200\n"),
            "the listed host is reached: {exit}"
        );
        let listed = targets(exit["refusals"].as_array().unwrap());
        assert!(
            listed.iter().any(|t| t == "other.example.com:8080"),
            "{exit}"
        );
        assert!(
            targets(&live).iter().any(|t| t == "other.example.com:8080"),
            "the refusal came live too: {live:?}"
        );
        for e in &live {
            assert_eq!(e["syscall"], "proxy", "{e}");
        }

        let (live, exit) = h.run("2", &curl_to("svc.example.com", "/two"));
        assert_eq!(exit["stdout"], "hello 200\n", "{exit}");
        assert_eq!(
            exit["refusals"],
            json!([]),
            "the first command's refusal is not the second's: {exit}"
        );
        assert!(live.is_empty(), "{live:?}");

        // And a third refused again: its own refusal, once.
        let (live, exit) = h.run("3", &curl_to("third.example.com", "/x"));
        assert!(exit["stdout"].as_str().unwrap().contains(" 403"), "{exit}");
        assert_eq!(
            targets(exit["refusals"].as_array().unwrap()),
            ["third.example.com:8080"],
            "{exit}"
        );
        assert_eq!(targets(&live), ["third.example.com:8080"], "{live:?}");
        let served = std::fs::read_to_string(h.path().join("origin.log")).unwrap();
        assert_eq!(served, "/one\n/two\n");
        h.close();
    }
}

/// The names of the variables in `env` output.
fn names(env: &str) -> BTreeSet<String> {
    env.lines()
        .filter_map(|l| l.split_once('=').map(|(n, _)| n.to_owned()))
        .filter(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .collect()
}

/// A command of an allowlist session gets the same set of variables as
/// `sandbox run` under the same policy gives its command (the proxy's,
/// `RES_OPTIONS`, the run CA's bundle variables, the secret's placeholder,
/// the nest socket), values aside; and the same placeholder in every
/// command, which the proxy replaces with the value in each command's
/// intercepted request (the origin gets the value twice).
#[test]
fn commands_get_the_runs_egress_variables_and_one_placeholder() {
    for nobody in users() {
        let flags = r#"--upstream-ca "$D/ca.pem" --secret TOKEN@pkgs.example.com --allow-request 'GET https://pkgs.example.com:8443/**' --allow-net svc.example.com:8080"#;
        let tail = format!(
            r#"$WRAP "$SANDBOX" run -q --backend auto --on-unsupported error {flags} -- env > "$D/run.env"
exec $WRAP $SESSION {flags}"#
        );
        let mut h = Harness::open(nobody, &tail, &[("TOKEN", "real-token-value-77")]);
        assert_eq!(h.hello["launch"], "shared", "{}", h.hello);
        let (_, exit) = h.run("env", "exec env");
        let session_env = exit["stdout"].as_str().unwrap().to_owned();
        let run_env = std::fs::read_to_string(h.path().join("run.env")).unwrap();
        let (session_names, run_names) = (names(&session_env), names(&run_env));
        for must in [
            "HTTPS_PROXY",
            "https_proxy",
            "HTTP_PROXY",
            "ALL_PROXY",
            "NO_PROXY",
            "RES_OPTIONS",
            "SSL_CERT_FILE",
            "NODE_EXTRA_CA_CERTS",
            "CURL_CA_BUNDLE",
            "TOKEN",
            "SANDBOX_NEST_FD",
        ] {
            assert!(
                run_names.contains(must),
                "control: run has {must}: {run_env}"
            );
        }
        // `env` run by the shell of `sh -c` sees the shell's own three.
        let shell_own = ["PWD", "SHLVL", "_", "OLDPWD"];
        let differ: Vec<_> = session_names
            .symmetric_difference(&run_names)
            .filter(|n| !shell_own.contains(&n.as_str()))
            .collect();
        assert!(
            differ.is_empty(),
            "variables only one of them has: {differ:?}\nsession: {session_env}\nrun: {run_env}"
        );
        assert!(
            !session_env.contains("real-token-value-77"),
            "{session_env}"
        );

        let curl = r#"echo "sees $TOKEN"; curl -sS -m 60 -H "Authorization: Bearer $TOKEN" https://pkgs.example.com:8443/"#;
        let (_, one) = h.run("a", &format!("{curl}a"));
        let (_, two) = h.run("b", &format!("{curl}b"));
        let seen = |e: &Value| {
            let out = e["stdout"].as_str().unwrap().to_owned();
            assert!(out.ends_with("secure"), "{e}");
            out.lines().next().unwrap().to_owned()
        };
        let (p1, p2) = (seen(&one), seen(&two));
        assert!(p1.starts_with("sees SANDBOX_SECRET_"), "{p1}");
        assert_eq!(p1, p2, "one placeholder for the session's commands");
        let log = std::fs::read_to_string(h.path().join("tls.log")).unwrap();
        assert_eq!(
            log, "/a auth=Bearer real-token-value-77\n/b auth=Bearer real-token-value-77\n",
            "the origin got the value in both commands' requests"
        );
        h.close();
    }
}

/// With `--approval channel`, a connection held during the second command
/// is asked about with the second command's id, and its denial is that
/// command's refusal (live and in its exit event), not the first's or the
/// third's.
#[test]
fn an_approval_in_the_second_command_names_it() {
    for nobody in users() {
        let tail = r#"exec $WRAP $SESSION --approval channel --no-network"#;
        let mut h = Harness::open(nobody, tail, &[]);
        assert_eq!(h.hello["launch"], "shared", "{}", h.hello);
        let (_, first) = h.run("first", "true");
        assert_eq!(first["status"], 0, "{first}");
        h.start("second", &curl_to("svc.example.com", "/asked"), json!({}));
        let p = h.next();
        assert_eq!(p["event"], "permission", "{p}");
        assert_eq!(p["id"], "second", "{p}");
        assert_eq!(p["host"], "svc.example.com", "{p}");
        let permission = p["permission"].as_str().unwrap().to_owned();
        h.send(&json!({"op": "approve", "permission": permission, "answer": "deny"}));
        let (live, exit) = h.until_exit("second");
        assert!(exit["stdout"].as_str().unwrap().contains(" 403"), "{exit}");
        assert_eq!(
            targets(exit["refusals"].as_array().unwrap()),
            ["svc.example.com:8080"],
            "{exit}"
        );
        assert_eq!(targets(&live), ["svc.example.com:8080"], "{live:?}");
        let (live, third) = h.run("third", "true");
        assert_eq!(third["refusals"], json!([]), "{third}");
        assert!(live.is_empty(), "{live:?}");
        h.close();
    }
}

/// A command's background process holding a proxy connection (to an
/// origin that answers after 120 s) is gone before the next command
/// starts, and its exit event does not wait for the origin; a kept
/// command is allowed under an allowlist, and its background process lives
/// on until the session ends.
#[test]
fn a_background_proxy_connection_ends_with_its_command_and_keep_works() {
    for nobody in users() {
        let tail = r#"exec $WRAP $SESSION -w "$D" --allow-net svc.example.com:8080"#;
        let mut h = Harness::open(nobody, tail, &[]);
        assert_eq!(h.hello["launch"], "shared", "{}", h.hello);
        let d = h.path();
        let script = format!(
            "{} > /dev/null & echo $! > {}/bg.pid; \
             for i in $(seq 200); do grep -q /slow {}/origin.log 2>/dev/null && break; sleep 0.05; done; \
             echo started",
            curl_to("svc.example.com", "/slow"),
            d.display(),
            d.display()
        );
        let began = Instant::now();
        let (_, exit) = h.run("bg", &script);
        assert_eq!(exit["stdout"], "started\n", "{exit}");
        assert!(
            began.elapsed() < Duration::from_secs(30),
            "the exit event waited for the origin: {:?}",
            began.elapsed()
        );
        let pid: i32 = std::fs::read_to_string(d.join("bg.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // Control: the request reached the origin, so the connection was open.
        let served = std::fs::read_to_string(d.join("origin.log")).unwrap();
        assert!(served.contains("/slow"), "{served}");
        assert!(gone(pid), "the background curl outlived its command");
        let (_, next) = h.run("next", &curl_to("svc.example.com", "/next"));
        assert_eq!(next["stdout"], "hello 200\n", "{next}");
        assert_eq!(next["refusals"], json!([]), "{next}");

        // Kept: allowed now, its background process alive after its exit.
        h.start(
            "kept",
            &format!("sleep 60 & echo $! > {}/kept.pid", d.display()),
            json!({"keep": true}),
        );
        let (_, kept) = h.until_exit("kept");
        assert!(kept.get("reason").is_none(), "{kept}");
        assert_eq!(kept["kept"], 1, "{kept}");
        let pid: i32 = std::fs::read_to_string(d.join("kept.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(!gone(pid), "the kept process lives on");
        let (_, after) = h.run("after", &curl_to("svc.example.com", "/after"));
        assert_eq!(after["stdout"], "hello 200\n", "{after}");
        h.close();
        assert!(gone(pid), "the kept process ended with the session");
    }
}

/// Opens CONNECT tunnels through the run's proxy to `argv[1]` until one
/// is refused (at most `argv[2]`), writes a line into each, half-closes it
/// when `HALF` is set; prints how many were established and whether one
/// was refused, then exits (closing them). With `argv[3]`, a file: opens
/// one tunnel, waits until that file exists, then sends a GET through it
/// and prints the status line.
const TUNNELS_PY: &str = r#"
import os, socket, sys, time
proxy = os.environ["HTTPS_PROXY"].rsplit("/", 1)[1]; ph, pp = proxy.rsplit(":", 1)
def tunnel():
    s = socket.create_connection((ph, int(pp)), timeout=10)
    s.sendall(b"CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (sys.argv[1].encode(), sys.argv[1].encode()))
    r = s.recv(100)
    return s if r.startswith(b"HTTP/1.1 200") else None
if len(sys.argv) > 3:
    s = tunnel()
    while not os.path.exists(sys.argv[3]): time.sleep(0.05)
    s.sendall(b"GET /kept HTTP/1.1\r\nHost: svc.example.com\r\nConnection: close\r\n\r\n")
    print(s.recv(100).split(b"\r\n")[0].decode(), flush=True)
    sys.exit(0)
ok = 0; refused = False; held = []
for i in range(int(sys.argv[2])):
    try:
        s = tunnel()
    except OSError:
        s = None
    if s is None:
        refused = True; break
    ok += 1; s.sendall(b"hello\n"); held.append(s)
    if os.environ.get("HALF"): s.shutdown(socket.SHUT_WR)
print(ok, "refused" if refused else "all", flush=True)
"#;

/// A command that fills the proxy with tunnels to an upstream that accepts
/// and stays silent (never answers, never closes), half-closed or not, and
/// exits: its tunnels are ended with it, so the next command gets its own
/// (#44/#45); twin: a kept command's tunnel (its run's own proxy) stays
/// usable after later commands ended, until its own end.
#[test]
fn a_commands_tunnels_to_a_silent_upstream_end_with_it_a_kept_ones_live_on() {
    for nobody in users() {
        // The silent upstream, on svc.example.com:9000; gone after 300 s.
        let tail = format!(
            r#"python3 -c '
import signal, socket
signal.alarm(300)
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("{SVC_IP}", 9000)); s.listen(1024); held = []
open("'"$D"'/silent-listening", "w").close()
while True: held.append(s.accept()[0])
' > /dev/null 2>&1 < /dev/null &
for i in $(seq 200); do [ -e "$D/silent-listening" ] && break; sleep 0.05; done
exec $WRAP $SESSION -w "$D" --allow-net svc.example.com:9000 --allow-net svc.example.com:8080"#
        );
        let mut h = Harness::open(nobody, &tail, &[]);
        assert_eq!(h.hello["launch"], "shared", "{}", h.hello);
        let d = h.path();
        std::fs::write(d.join("tunnels.py"), TUNNELS_PY).unwrap();
        let py = format!("python3 {}/tunnels.py", d.display());
        for (half, first) in [("", "fill"), ("HALF=1 ", "fill-half")] {
            // Control: the proxy was full (a tunnel refused), so the next
            // command's tunnels need the slots these held.
            let (_, fill) = h.run(first, &format!("{half}{py} svc.example.com:9000 1000"));
            let out = fill["stdout"].as_str().unwrap_or_default().to_owned();
            let n: usize = out.split(' ').next().unwrap().parse().expect(&out);
            assert!(n >= 16 && out.ends_with(" refused\n"), "{fill}");
            let (_, next) = h.run(
                &format!("{first}-next"),
                &format!("{py} svc.example.com:9000 3"),
            );
            assert_eq!(next["stdout"], "3 all\n", "{next}");
        }

        // Kept: its tunnel lives on past a later command's end.
        let go = d.join("go");
        h.start(
            "kept",
            &format!(
                "{py} svc.example.com:8080 1 {} > {}/kept.out & sleep 0.5",
                go.display(),
                d.display()
            ),
            json!({"keep": true}),
        );
        let (_, kept) = h.until_exit("kept");
        assert_eq!(kept["kept"], 1, "{kept}");
        let (_, after) = h.run("after", &format!("{py} svc.example.com:9000 3"));
        assert_eq!(after["stdout"], "3 all\n", "{after}");
        std::fs::write(&go, "").unwrap();
        let out = d.join("kept.out");
        let began = Instant::now();
        while !std::fs::read_to_string(&out).is_ok_and(|s| s.ends_with('\n'))
            && began.elapsed() < Duration::from_secs(30)
        {
            std::thread::sleep(Duration::from_millis(50));
        }
        let got = std::fs::read_to_string(&out).unwrap_or_default();
        assert_eq!(got, "HTTP/1.0 200 OK\n", "the kept command's tunnel");
        h.close();
    }
}

/// Whether `pid` has exited (gone, or a zombie).
fn gone(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| s.contains(") Z "))
}

/// In both launch modes a name the resolver refuses (`dns`) and a host the
/// proxy refuses (`proxy`) come live as `refused` events and are in the
/// command's exit event; the next command, which reaches only the listed
/// host, has neither (twin).
#[test]
fn resolver_and_proxy_refusals_come_live_in_both_launch_modes() {
    for nobody in users() {
        for launch in ["shared", "per-command"] {
            let tail =
                format!("exec $WRAP $SESSION --launch {launch} --allow-net svc.example.com:8080");
            let mut h = Harness::open(nobody, &tail, &[]);
            assert_eq!(h.hello["launch"], launch, "{}", h.hello);
            let script = format!(
                "getent hosts unlisted.example.com || echo unresolved; {}; sleep 0.2",
                curl_to("other.example.com", "/refused")
            );
            let (live, exit) = h.run("1", &script);
            let out = exit["stdout"].as_str().unwrap();
            assert!(out.starts_with("unresolved\n"), "{launch}: {exit}");
            assert!(out.contains(" 403"), "{launch}: {exit}");
            let listed: Vec<(String, String)> = exit["refusals"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| {
                    (
                        r["syscall"].as_str().unwrap().to_owned(),
                        r["target"].as_str().unwrap().to_owned(),
                    )
                })
                .collect();
            for (syscall, target) in [
                ("dns", "unlisted.example.com"),
                ("proxy", "other.example.com:8080"),
            ] {
                assert!(
                    listed.contains(&(syscall.to_owned(), target.to_owned())),
                    "{launch}: {syscall} {target} in {exit}"
                );
                assert!(
                    live.iter()
                        .any(|e| e["syscall"] == syscall && e["target"] == target),
                    "{launch}: {syscall} {target} live: {live:?}"
                );
            }
            let (live, exit) = h.run("2", &curl_to("svc.example.com", "/two"));
            assert_eq!(exit["stdout"], "hello 200\n", "{launch}: {exit}");
            assert_eq!(exit["refusals"], json!([]), "{launch}: {exit}");
            assert!(live.is_empty(), "{launch}: {live:?}");
            h.close();
        }
    }
}
