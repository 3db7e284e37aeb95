//! The egress allowlist (`--allow-net`), on loopback only: host names go
//! through the runner's proxy (curl and Python honour its variables), IP
//! rules connect directly, everything else is refused and recorded; no
//! datagram socket, `MSG_FASTOPEN` or non-loopback listener gets around it.
#![cfg(target_os = "linux")]

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::Output;

use sandbox_tests::sandbox;

/// An HTTP server on 127.0.0.1 answering every request with `body`; its port.
pub(crate) fn http_server(body: &'static str) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let mut head = Vec::new();
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = write!(
                    s,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    port
}

/// `sandbox run --report R <flags> -- sh -c SCRIPT`, with no proxy variables
/// inherited; the output and the outcome record.
fn run(flags: &[String], script: &str) -> (Output, serde_json::Value) {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("outcome.json");
    let mut cmd = sandbox();
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
    let out = cmd
        .arg("run")
        .arg("--report")
        .arg(&report)
        .args(flags)
        .args(["--", "sh", "-c", script])
        .output()
        .unwrap();
    let record = std::fs::read_to_string(&report)
        .map(|t| serde_json::from_str(&t).unwrap())
        .unwrap_or(serde_json::Value::Null);
    (out, record)
}

/// Loopback stands in for a remote host in these tests, but the runner's
/// `NO_PROXY` sends loopback around the proxy (the broker decides it, see
/// `tests/tests/it/own_listeners.rs`): scripts that test the proxy clear it.
const VIA_PROXY: &str = "export NO_PROXY= no_proxy=; ";

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn allow(rules: &[String]) -> Vec<String> {
    rules
        .iter()
        .flat_map(|r| ["--allow-net".to_owned(), r.clone()])
        .collect()
}

/// The refusals of the outcome record, as `syscall target` lines.
fn refusals(record: &serde_json::Value) -> Vec<String> {
    record["mediation"]["refused"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|r| format!("{} {}", r["syscall"].as_str().unwrap_or(""), r["target"]))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_listed_name_is_reached_through_the_proxy_and_other_ports_are_refused() {
    let port = http_server("hello");
    let other = http_server("other");
    let curl = |p: u16| format!("curl -sS -o /dev/null -w '%{{http_code}} ' http://localhost:{p}/");
    let (out, record) = run(
        &allow(&[format!("localhost:{port}")]),
        &format!("{VIA_PROXY}{}; {}", curl(port), curl(other)),
    );
    // The listed port answers through the proxy; the other one gets the
    // proxy's 403 (unconfined, both answer 200: checked by the twin below).
    assert_eq!(
        stdout(&out),
        "200 403",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let refused = refusals(&record);
    assert!(
        refused
            .iter()
            .any(|r| r == &format!("proxy \"localhost:{other}\"")),
        "{refused:?}"
    );
    // Twin: with the network wholly on, both are reachable (no proxy).
    let (out, _) = run(&[], &format!("{}; {}", curl(port), curl(other)));
    assert_eq!(stdout(&out), "200 200");
}

#[test]
fn proxy_refusals_of_ipv6_literals_are_recorded_in_brackets() {
    let port = http_server("hello");
    // The proxy refuses `[::1]` (no IP rule admits it) before connecting,
    // so nothing needs to listen there.
    let curl = |url: &str| format!("curl -sS -o /dev/null -w '%{{http_code}} ' {url}");
    let (out, record) = run(
        &allow(&[format!("localhost:{port}")]),
        &format!(
            "{VIA_PROXY}{}; {}",
            curl(&format!("http://localhost:{port}/")),
            curl("http://[::1]:9/")
        ),
    );
    assert_eq!(
        stdout(&out),
        "200 403",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let refused = refusals(&record);
    assert!(
        refused.iter().any(|r| r == "proxy \"[::1]:9\""),
        "{refused:?}"
    );
}

#[test]
fn python_urllib_and_curl_over_socks_honour_the_proxy_variables() {
    let port = http_server("via-proxy");
    let url = format!("http://localhost:{port}/");
    let script = format!(
        "{VIA_PROXY}python3 -c \"import urllib.request; print(urllib.request.urlopen('{url}', timeout=10).read().decode())\"; \
         curl -sS --proxy \"$ALL_PROXY\" {url}; echo; \
         python3 -c \"import urllib.request\ntry: urllib.request.urlopen('http://localhost:1/', timeout=10)\nexcept Exception as e: print('refused', getattr(e, 'code', e))\""
    );
    let (out, _) = run(&allow(&[format!("localhost:{port}")]), &script);
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines,
        ["via-proxy", "via-proxy", "refused 403"],
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn direct_connects_reach_listed_addresses_only() {
    let port = http_server("direct");
    let direct = |p: u16| {
        format!("curl -sS --noproxy '*' -o /dev/null http://127.0.0.1:{p}/ && echo reached || echo refused")
    };
    // A name rule admits no address by itself: a name never resolved for
    // the run (none of its answers pinned) leaves the direct connect refused.
    let (out, record) = run(&allow(&[format!("svc.example.com:{port}")]), &direct(port));
    assert_eq!(stdout(&out), "refused");
    assert!(
        refusals(&record)
            .iter()
            .any(|r| r == &format!("connect \"127.0.0.1:{port}\"")),
        "{:?}",
        refusals(&record)
    );
    // An exact name that /etc/hosts lists is pinned at start: its address
    // is reached directly at the rule's port, and at no other.
    let (out, _) = run(&allow(&[format!("localhost:{port}")]), &direct(port));
    assert_eq!(
        stdout(&out),
        "reached",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (out, _) = run(&allow(&[format!("localhost:{}", port + 1)]), &direct(port));
    assert_eq!(stdout(&out), "refused");
    // Twin: the IP rule admits it directly.
    let (out, _) = run(&allow(&[format!("127.0.0.1:{port}")]), &direct(port));
    assert_eq!(
        stdout(&out),
        "reached",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // 0.0.0.0/0 admits public addresses but never loopback.
    let (out, _) = run(&allow(&["0.0.0.0/0".to_owned()]), &direct(port));
    assert_eq!(stdout(&out), "refused");
}

const SOCKETS: &str = r#"
import socket, sys
def attempt(name, f):
    try:
        f(); print(name, "ok")
    except OSError as e:
        print(name, "refused", e.errno)
def udp(): socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
def udplite(): socket.socket(socket.AF_INET, socket.SOCK_DGRAM, 136)
def netlink_route(): socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
def netlink_user(): socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 2)
def tcp(): socket.socket(socket.AF_INET, socket.SOCK_STREAM)
def listen_any():
    s = socket.socket(); s.bind(("0.0.0.0", 0)); s.listen()
def listen_unbound():
    s = socket.socket(); s.listen()
def listen_loopback():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
def fastopen():
    s = socket.socket()
    s.sendto(b"x", socket.MSG_FASTOPEN, ("127.0.0.1", int(sys.argv[1])))
for name, f in [("udp", udp), ("udplite", udplite), ("tcp", tcp), ("netlink_route", netlink_route),
                ("netlink_user", netlink_user), ("listen_any", listen_any),
                ("listen_unbound", listen_unbound), ("listen_loopback", listen_loopback),
                ("fastopen", fastopen)]:
    attempt(name, f)
"#;

/// UDP sockets are made (in the run's datagram namespace, from which
/// nothing but the runner's resolver is reached: `tests/tests/it/dns.rs`);
/// UDP-Lite and `NETLINK_USERSOCK` sockets, listening off loopback and
/// `MSG_FASTOPEN` are refused, and the summary line (after a failed run)
/// names them as socket calls.
#[test]
fn no_other_socket_fastopen_or_outside_listener_gets_past_the_list() {
    let port = http_server("x");
    let script = format!("python3 -c '{SOCKETS}' {port}; exit 1");
    let (out, _) = run(&allow(&["example.com:443".to_owned()]), &script);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stdout(&out),
        "udp ok\nudplite refused 1\ntcp ok\nnetlink_route ok\nnetlink_user refused 1\n\
         listen_any refused 1\nlisten_unbound refused 1\nlisten_loopback ok\nfastopen refused 1",
        "{err}"
    );
    assert!(
        err.contains(
            "socket calls (socket(AF_INET, SOCK_DGRAM, 136), socket(AF_NETLINK, SOCK_RAW, 2)"
        ),
        "{err}"
    );
    // Twin: with the network wholly on, every one of them works (the
    // fastopen send reaches the listener).
    let (out, _) = run(&[], &script);
    assert_eq!(
        stdout(&out),
        "udp ok\nudplite ok\ntcp ok\nnetlink_route ok\nnetlink_user ok\nlisten_any ok\n\
         listen_unbound ok\nlisten_loopback ok\nfastopen ok",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn allow_net_needs_the_network_and_names_a_bad_rule() {
    let (out, _) = run(
        &[
            "--no-network".into(),
            "--allow-net".into(),
            "example.com".into(),
        ],
        "true",
    );
    assert_eq!(
        out.status.code(),
        Some(125),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (out, _) = run(&allow(&["exa mple.com".to_owned()]), "true");
    assert_eq!(out.status.code(), Some(125));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("exa mple.com"), "{err}");
    // Twin: a good rule runs.
    let (out, _) = run(&allow(&["example.com".to_owned()]), "true");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
