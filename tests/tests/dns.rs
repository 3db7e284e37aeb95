//! Name resolution under `--allow-net` for programs that resolve names
//! themselves: glibc's resolver asks the runner's resolver (over TCP, which
//! the broker routes there from any address's port 53), which answers only
//! listed names, and connects by IP to what it answered are admitted on the
//! listed ports without the proxy. Each in a private network and mount
//! namespace the test makes, with a stand-in DNS server on its loopback:
//! nothing leaves the machine.
#![cfg(target_os = "linux")]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sandbox_tests::sandbox_bin;

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/dns");

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Runs `script` in a new network and mount namespace (root only), with
/// loopback up, `/etc/resolv.conf` naming 127.0.0.1, a stand-in DNS server
/// there answering `svc.example.com`, `other.example.com` and
/// `a.example.org` with 127.0.0.1, and a listener on 127.0.0.1:8080 that
/// says `hello`. `$SANDBOX`, `$CLIENT` and `$D` (a scratch directory) are set.
fn in_private_net(script: &str) -> (Output, PathBuf, tempfile::TempDir) {
    assert!(
        is_root(),
        "network namespaces need root here: run this suite as root (CI does)"
    );
    let dir = tempfile::tempdir().unwrap();
    let d = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::write(d.join("resolv.conf"), "nameserver 127.0.0.1\n").unwrap();
    let setup = format!(
        r#"set -e
mount --bind "$D/resolv.conf" /etc/resolv.conf
python3 -c 'import fcntl, socket, struct; s = socket.socket(); fcntl.ioctl(s, 0x8914, struct.pack("16sH", b"lo", 0x1 | 0x8 | 0x40))'
python3 {dir}/fake_dns.py svc.example.com=127.0.0.1 other.example.com=127.0.0.1 a.example.org=127.0.0.1 > "$D/dns.log" 2>&1 < /dev/null &
dns=$!
python3 -c '
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 8080)); s.listen(16)
open("'"$D"'/listening", "w").close()
while True:
    c, _ = s.accept(); c.sendall(b"hello"); c.close()
' > /dev/null 2>&1 < /dev/null &
listener=$!
for i in $(seq 100); do [ -e "$D/listening" ] && grep -q ready "$D/dns.log" && break; sleep 0.05; done
set +e
{script}
kill $dns $listener 2>/dev/null
"#,
        dir = DIR
    );
    let out = Command::new("unshare")
        .args([
            "--net",
            "--mount",
            "--propagation",
            "private",
            "/bin/sh",
            "-c",
            &setup,
        ])
        .env("SANDBOX", sandbox_bin())
        .env("CLIENT", Path::new(DIR).join("client.py"))
        .env("D", &d)
        .env_remove("SANDBOX_CONFIG")
        .output()
        .expect("unshare (util-linux) makes the namespaces");
    (out, d, dir)
}

fn lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

#[track_caller]
fn has(lines: &[String], start: &str) {
    assert!(
        lines.iter().any(|l| l.starts_with(start)),
        "no line starting {start:?} in {lines:#?}"
    );
}

/// glibc resolves a listed name through the runner's resolver and connects
/// to its address without the proxy; an unlisted name the host's DNS server
/// knows (the control outside the sandbox resolves it) stays unresolved, and
/// its address, never answered, stays unreachable; a wildcard name that
/// resolves to loopback is withheld. The record names the refused lookups.
#[test]
fn glibc_resolves_listed_names_only_and_connects_directly() {
    let (out, d, _t) = in_private_net(
        r#"
echo "control $(getent hosts other.example.com)"
"$SANDBOX" run -q --report "$D/r.json" --allow-net svc.example.com:8080 -- /usr/bin/python3 "$CLIENT" svc.example.com 8080
"$SANDBOX" run --allow-net svc.example.com:8080 -- /usr/bin/python3 "$CLIENT" other.example.com 8080
"$SANDBOX" run -q --report "$D/p.json" --allow-net svc.example.com:9 -- /usr/bin/python3 "$CLIENT" svc.example.com 8080
"$SANDBOX" run -q --report "$D/w.json" --allow-net '*.example.org:8080' -- /usr/bin/python3 "$CLIENT" a.example.org 8080
"#,
    );
    let l = lines(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    // The stand-in server answers the unlisted name outside the sandbox.
    has(&l, "control 127.0.0.1");
    has(&l, "reached svc.example.com 127.0.0.1 hello");
    has(&l, "unresolved other.example.com");
    // Listed at another port: resolved, but the connect to 8080 is refused.
    has(&l, "refused svc.example.com 127.0.0.1");
    has(&l, "unresolved a.example.org");
    assert_eq!(
        l.iter().filter(|x| x.starts_with("reached")).count(),
        1,
        "{l:#?}\n{err}"
    );
    assert!(
        err.contains("sandbox: refused 1 name lookup (other.example.com not in --allow-net)"),
        "{err}"
    );
    // The refused connect names the name its address was answered for.
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("p.json")).unwrap()).unwrap();
    let refused = record["mediation"]["refused"].to_string();
    assert!(
        refused.contains(
            "127.0.0.1:8080 (answered for svc.example.com, whose rules do not list port 8080)"
        ),
        "{refused}"
    );
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("w.json")).unwrap()).unwrap();
    let refused = record["mediation"]["refused"].to_string();
    assert!(
        refused.contains("a.example.org") && refused.contains("\"dns\""),
        "{refused}"
    );
}

/// The same for a resolver of the program's own (DNS over TCP to the
/// resolv.conf server, as Go's and other self-contained resolvers can):
/// the listed name is answered, another gets NXDOMAIN. UDP stays refused
/// under an allowlist: an addressed datagram to the DNS server never
/// leaves. Twin: the same UDP query outside the sandbox is answered.
#[test]
fn an_own_resolver_is_answered_for_listed_names_and_udp_stays_refused() {
    let (out, _d, _t) = in_private_net(
        r#"
"$SANDBOX" run -q --allow-net svc.example.com:8080 -- /usr/bin/python3 "$DNSQ" svc.example.com other.example.com
UDP='import socket, sys
try:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(2)
    s.sendto(bytes.fromhex("1234010000010000000000000373766307657861"
                           "6d706c6503636f6d0000010001"), ("127.0.0.1", 53))
    print("udp answered", len(s.recv(512)))
except OSError as e:
    print("udp refused", e)'
/usr/bin/python3 -c "$UDP" | sed 's/^/outside /'
"$SANDBOX" run -q --allow-net svc.example.com:8080 -- /usr/bin/python3 -c "$UDP"
"#
        .replace("$DNSQ", &format!("{DIR}/dnsq.py"))
        .as_str(),
    );
    let l = lines(&out);
    has(&l, "svc.example.com 0 ['127.0.0.1']");
    has(&l, "other.example.com 3 []");
    has(&l, "outside udp answered");
    has(&l, "udp refused");
}
