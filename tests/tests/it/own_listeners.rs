//! The run's own loopback servers under an allowlist (#42): with
//! `--allow-net example.com:443` (a host never contacted: nothing here
//! leaves the machine), a server the run starts on `127.0.0.1:0` (and `::1`
//! where the host has it) is reached by `urllib` (which honours the proxy
//! variables: loopback is in `NO_PROXY`, so it goes directly and the broker
//! decides) and by a raw socket; a host service on another loopback port is
//! refused directly and through the proxy, and a port the run listened on,
//! closed, then taken over by a listener outside the run is refused. As root
//! and as nobody.
#![cfg(target_os = "linux")]

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use sandbox_tests::{sandbox, sandbox_as_nobody};

const SCRIPT: &str = r#"
import http.server, os, socket, sys, threading, urllib.request, urllib.error
host, host6, v6 = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"

class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", "3"); self.end_headers()
        self.wfile.write(b"own")
    def log_message(self, *a): pass

class V6(http.server.ThreadingHTTPServer):
    address_family = socket.AF_INET6

def serve(cls, addr):
    s = cls((addr, 0), H)
    threading.Thread(target=s.serve_forever, daemon=True).start()
    return s.server_address[1]

def fetch(name, url, opener=None):
    try:
        r = (opener or urllib.request.build_opener()).open(url, timeout=10)
        print(name, r.read().decode())
    except urllib.error.HTTPError as e:
        print(name, e.code)
    except urllib.error.URLError as e:
        print(name, "refused", getattr(e.reason, "errno", e.reason))

def raw(name, fam, addr):
    s = socket.socket(fam)
    s.settimeout(10)
    try:
        s.connect(addr)
        s.sendall(b"GET / HTTP/1.0\r\n\r\n")
        print(name, s.recv(100).split(b"\r\n")[0].decode())
    except OSError as e:
        print(name, "refused", e.errno)
    finally:
        s.close()

p = serve(http.server.ThreadingHTTPServer, "127.0.0.1")
fetch("own-urllib", f"http://127.0.0.1:{p}/")
fetch("own-localhost", f"http://localhost:{p}/")
raw("own-raw", socket.AF_INET, ("127.0.0.1", p))
if v6:
    p6 = serve(V6, "::1")
    fetch("own6-urllib", f"http://[::1]:{p6}/")
    raw("own6-raw", socket.AF_INET6, ("::1", p6))
    raw("host6-raw", socket.AF_INET6, ("::1", host6))
fetch("host-urllib", f"http://127.0.0.1:{host}/")
raw("host-raw", socket.AF_INET, ("127.0.0.1", host))
# Through the proxy, asked explicitly (the bypass list would send it around).
proxy = os.environ["HTTP_PROXY"]
for k in ("NO_PROXY", "no_proxy"):
    os.environ.pop(k, None)
via = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy}))
fetch("host-proxy", f"http://127.0.0.1:{host}/", via)
fetch("own-proxy", f"http://127.0.0.1:{p}/", via)

# A port the run listened on, closed, then taken over from outside.
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(4)
q = s.getsockname()[1]
c = socket.socket(); c.settimeout(10)
try:
    c.connect(("127.0.0.1", q)); print("takeover-before ok")
except OSError as e:
    print("takeover-before refused", e.errno)
c.close(); s.close()
print("takeover", q, flush=True)
sys.stdin.readline()
c = socket.socket(); c.settimeout(10)
try:
    c.connect(("127.0.0.1", q)); print("takeover-after reached")
except OSError as e:
    print("takeover-after refused", e.errno)
"#;

/// A listener outside the run that counts the connections it accepts.
fn counting(addr: &str) -> Option<(u16, Arc<AtomicUsize>)> {
    let l = TcpListener::bind(addr).ok()?;
    let port = l.local_addr().unwrap().port();
    let seen = Arc::new(AtomicUsize::new(0));
    let n = Arc::clone(&seen);
    std::thread::spawn(move || {
        for s in l.incoming() {
            if s.is_ok() {
                n.fetch_add(1, Ordering::SeqCst);
            }
        }
    });
    Some((port, seen))
}

fn own_servers_reached_host_services_refused(mut cmd: Command, who: &str) {
    let (host, host_seen) = counting("127.0.0.1:0").unwrap();
    let six = counting("[::1]:0");
    let (host6, v6) = six.as_ref().map_or((0, false), |(p, _)| (*p, true));
    for var in [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "NO_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
        "no_proxy",
    ] {
        cmd.env_remove(var);
    }
    let mut child = cmd
        .args(["run", "-q", "--allow-net", "example.com:443", "--"])
        .args(["python3", "-c", SCRIPT])
        .args([
            host.to_string(),
            host6.to_string(),
            u8::from(v6).to_string(),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut lines = Vec::new();
    let mut taken = None;
    loop {
        let mut line = String::new();
        if out.read_line(&mut line).unwrap() == 0 {
            break;
        }
        let line = line.trim_end().to_owned();
        if let Some(q) = line.strip_prefix("takeover ") {
            // The run closed its listener on q: a host service takes the port.
            let l = counting(&format!("127.0.0.1:{q}"));
            assert!(l.is_some(), "{who}: port {q} could not be taken over");
            taken = l;
            writeln!(stdin, "go").unwrap();
            lines.push("takeover".to_owned());
            continue;
        }
        lines.push(line);
    }
    let done = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&done.stderr);
    let mut want = vec![
        "own-urllib own",
        "own-localhost own",
        "own-raw HTTP/1.0 200 OK",
    ];
    if v6 {
        want.extend([
            "own6-urllib own",
            "own6-raw HTTP/1.0 200 OK",
            "host6-raw refused 111",
        ]);
    }
    want.extend([
        // ECONNREFUSED, as for a port nothing listens on.
        "host-urllib refused 111",
        "host-raw refused 111",
        "host-proxy 403",
        // The proxy does not know the run's listeners: loopback goes around it.
        "own-proxy 403",
        "takeover-before ok",
        "takeover",
        "takeover-after refused 111",
    ]);
    assert_eq!(lines, want, "{who}: {err}");
    assert_eq!(host_seen.load(Ordering::SeqCst), 0, "{who}");
    if let Some((_, seen)) = &six {
        assert_eq!(seen.load(Ordering::SeqCst), 0, "{who}");
    }
    let (_, taken_seen) = taken.unwrap();
    assert_eq!(taken_seen.load(Ordering::SeqCst), 0, "{who}");
}

#[test]
fn the_runs_own_loopback_servers_are_reached_and_host_services_are_not() {
    own_servers_reached_host_services_refused(sandbox(), "root");
}

#[test]
fn the_runs_own_loopback_servers_as_nobody() {
    own_servers_reached_host_services_refused(sandbox_as_nobody(), "nobody");
}

/// A pytest run whose fixture serves HTTP on `127.0.0.1:0`, as a test
/// suite does, gives under `--allow-net example.com:443` the exit status and
/// the summary line it gives bare; a test in the same suite that reaches a
/// host service on another loopback port fails confined (the twin: it
/// passes bare). As root and as nobody.
#[test]
fn a_pytest_fixture_server_works_under_an_allowlist() {
    let python = ["/usr/bin/python3", "python3"].into_iter().find(|p| {
        Command::new(p)
            .args(["-m", "pytest", "--version"])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    let Some(python) = python else {
        sandbox_tests::cannot_do_its_job(
            "a_pytest_fixture_server_works_under_an_allowlist",
            "no python3 with pytest (apt-get install python3-pytest)",
        );
        return;
    };
    let host = TcpListener::bind("127.0.0.1:0").unwrap();
    let host_port = host.local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let suite = format!(
        r#"
import http.server, threading, urllib.request, pytest

class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", "2"); self.end_headers()
        self.wfile.write(b"ok")
    def log_message(self, *a): pass

@pytest.fixture
def server():
    s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=s.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{{s.server_address[1]}}/"
    s.shutdown()

def test_own_server(server):
    assert urllib.request.urlopen(server, timeout=10).read() == b"ok"

def test_host_service():
    import socket
    socket.create_connection(("127.0.0.1", {host_port}), timeout=5).close()
"#
    );
    std::fs::write(dir.path().join("test_fixture.py"), suite).unwrap();
    let pytest = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider"];
    let summary = |out: &std::process::Output| {
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .rev()
            .find(|l| l.contains("passed") || l.contains("failed"))
            .map(|l| l.split(" in ").next().unwrap_or(l).to_owned())
            .unwrap_or_default()
    };
    let users: &[bool] = if unsafe { libc::geteuid() } == 0 {
        &[false, true]
    } else {
        &[false]
    };
    for &nobody in users {
        let mut bare = if nobody {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]);
            c.args(pytest);
            c
        } else {
            let mut c = Command::new(pytest[0]);
            c.args(&pytest[1..]);
            c
        };
        let bare = bare.current_dir(dir.path()).output().unwrap();
        assert_eq!(summary(&bare), "2 passed", "bare: {bare:?}");
        let confined = if nobody {
            sandbox_as_nobody()
        } else {
            sandbox()
        }
        .arg("run")
        .arg("-w")
        .arg(dir.path())
        .args(["--allow-net", "example.com:443", "--"])
        .args(pytest)
        .current_dir(dir.path())
        .output()
        .unwrap();
        assert_eq!(
            summary(&confined),
            "1 failed, 1 passed",
            "nobody {nobody}: {}\n{}",
            String::from_utf8_lossy(&confined.stdout),
            String::from_utf8_lossy(&confined.stderr)
        );
        assert!(String::from_utf8_lossy(&confined.stdout)
            .contains("FAILED test_fixture.py::test_host_service"));
        // Twin: the suite without the host-service test exits as bare does.
        let own_only = if nobody {
            sandbox_as_nobody()
        } else {
            sandbox()
        }
        .arg("run")
        .arg("-w")
        .arg(dir.path())
        .args(["--allow-net", "example.com:443", "--"])
        .args(pytest)
        .args(["-k", "own_server"])
        .current_dir(dir.path())
        .output()
        .unwrap();
        assert_eq!(own_only.status.code(), Some(0), "{own_only:?}");
        assert!(summary(&own_only).starts_with("1 passed"), "{own_only:?}");
    }
    drop(host);
}
