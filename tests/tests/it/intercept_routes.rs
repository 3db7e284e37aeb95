//! Routes around interception (#44, red-team findings 1 and 3): an
//! `--allow-net` rule that covers an intercepted host (exact, wildcard, the
//! operator's) never lets the command reach it directly (the run's
//! resolver never answers its name; an exact rule for the same host and
//! port is refused as ambiguous), and a proxy tunnel to another host on an
//! intercepted port whose TLS asks for the intercepted host (SNI) is
//! refused. Each beside its positive control (the admitted request still
//! passes, a non-intercepted `--allow-net` host still resolves and is
//! reached directly and through a tunnel).
//!
//! Each in a private network and mount namespace the test makes (root):
//! the origin in a second namespace at 1.2.3.4 and 1.2.3.6 over a veth
//! pair (addresses no wildcard rule refuses: neither special nor this
//! host's own), `pkgs.example.com` and `shared.example.com` at 1.2.3.4 and
//! `other.example.com` at 1.2.3.6 in a private `/etc/hosts`, its
//! certificate signed by a test CA (rcgen).
#![cfg(target_os = "linux")]

use std::process::Output;

use crate::private_net::{certificates, has, lines, scratch_dir, unshare_output};

/// The origin: answers every request with what it saw, one line, also
/// printed to its log.
const ORIGIN: &str = r#"
import http.server, ssl, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def reply(self):
        out = ("origin saw %s %s host=%s\n" % (self.command, self.path, self.headers.get("Host"))).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
        print(out.decode().strip(), flush=True)
    do_GET = do_POST = do_PUT = do_HEAD = do_DELETE = reply
    def log_message(self, *a):
        pass
import threading
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[1] + "/leaf.pem", sys.argv[1] + "/leaf.key")
def listen(port):
    s = http.server.ThreadingHTTPServer(("0.0.0.0", port), H)
    s.socket = ctx.wrap_socket(s.socket, server_side=True)
    return s
main, other = listen(8443), listen(9443)
threading.Thread(target=other.serve_forever, daemon=True).start()
plain = http.server.ThreadingHTTPServer(("0.0.0.0", 8080), H)
threading.Thread(target=plain.serve_forever, daemon=True).start()
open(sys.argv[1] + "/ready", "w").close()
main.serve_forever()
"#;

/// Asks the run's resolver (over TCP, port 53 of the first nameserver,
/// which the broker sends to the runner's resolver) for `argv[1]`'s A
/// record; prints the response code and the last answer's address.
const DNSQ: &str = r#"
import socket, struct, sys
name = sys.argv[1]
ns = [l.split()[1] for l in open("/etc/resolv.conf") if l.startswith("nameserver")][0]
q = struct.pack(">HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0) + b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0" + struct.pack(">HH", 1, 1)
s = socket.create_connection((ns, 53), timeout=5)
s.sendall(struct.pack(">H", len(q)) + q)
r = s.recv(4096)[2:]
an = struct.unpack(">H", r[6:8])[0]
print("dns", name, "rcode", r[3] & 15, "answer", ".".join(str(b) for b in r[-4:]) if an else "none")
"#;

/// Inside a run (`sh direct.sh DNSQ CASE CA`): asks the run's resolver for
/// both names, then connects without the proxy (curl `--noproxy '*'`,
/// which finds the address in `/etc/hosts`) to each.
const DIRECT: &str = r#"
python3 "$1" pkgs.example.com
python3 "$1" other.example.com
curl -sS --max-time 5 --noproxy '*' --cacert "$3" -X DELETE https://pkgs.example.com:8443/direct-$2 2>&1
echo "curl rc=$?"
curl -sS --max-time 5 --noproxy '*' --cacert "$3" https://other.example.com:8443/other-$2 2>&1
"#;

/// Runs `script` in a new network and mount namespace, the origin at
/// 1.2.3.4 and 1.2.3.6, ports 8443 and 9443 (TLS) and 8080 (plain HTTP), in a namespace of its own behind a veth
/// pair (this side 1.2.3.5), `/etc/hosts` naming `pkgs.example.com` and
/// `shared.example.com` at 1.2.3.4, `other.example.com` at 1.2.3.6. `$SANDBOX`, `$D` (scratch, with
/// `ca.pem` and `op.toml`, readable by all), `$DNSQ` and `$NOBODY` are set.
fn in_private_net(script: &str) -> (Output, tempfile::TempDir) {
    let (dir, d) = scratch_dir();
    certificates(
        &d,
        &[
            "pkgs.example.com",
            "other.example.com",
            "shared.example.com",
        ],
        Some(("intercept_routes test CA", "pkgs.example.com")),
    );
    std::fs::write(
        d.join("hosts"),
        "127.0.0.1 localhost\n1.2.3.4 pkgs.example.com shared.example.com\n1.2.3.6 other.example.com\n",
    )
    .unwrap();
    std::fs::write(d.join("origin.py"), ORIGIN).unwrap();
    std::fs::write(d.join("dnsq.py"), DNSQ).unwrap();
    std::fs::write(d.join("direct.sh"), DIRECT).unwrap();
    std::fs::write(
        d.join("op.toml"),
        "[sandbox.policy]\nallow_net = [\"*.example.com:8443\"]\n",
    )
    .unwrap();
    let setup = format!(
        r#"set -e
mount --bind "$D/hosts" /etc/hosts
mkdir -p /run/netns
mount -t tmpfs tmpfs /run/netns
ip link set lo up
ip netns add origin
ip link add v0 type veth peer name v1
ip link set v1 netns origin
ip addr add 1.2.3.5/24 dev v0
ip link set v0 up
ip netns exec origin ip addr add 1.2.3.4/24 dev v1
ip netns exec origin ip addr add 1.2.3.6/24 dev v1
ip netns exec origin ip link set v1 up
ip netns exec origin ip link set lo up
ip netns exec origin python3 "$D/origin.py" "$D" > "$D/origin.log" 2>&1 < /dev/null &
origin=$!
for i in $(seq 100); do [ -e "$D/ready" ] && break; sleep 0.05; done
set +e
{script}
kill $origin 2>/dev/null
ip netns del origin
"#
    );
    let dnsq = d.join("dnsq.py");
    let out = unshare_output(
        &setup,
        &d,
        &[("DNSQ", dnsq.as_os_str())],
        "unshare (util-linux) and ip (iproute2) make the namespaces",
    );
    (out, dir)
}

#[track_caller]
fn lacks(lines: &[String], prefix: &str, unwanted: &str) {
    assert!(
        !lines
            .iter()
            .any(|l| l.starts_with(prefix) && l.contains(unwanted)),
        "a line {prefix:?} contains {unwanted:?} in {lines:#?}"
    );
}

const RULE: &str = "--allow-request 'GET https://pkgs.example.com:8443/simple/**'";

/// Finding 1: with an `--allow-net` rule covering the intercepted host
/// (its name at every port, a wildcard, the operator's wildcard), the
/// run's resolver answers `NXDOMAIN` for it and a direct connection (curl
/// `--noproxy '*'`, the address from `/etc/hosts`) is refused, as root and
/// as nobody; the summary says why. An exact rule for the same host and
/// port is refused (125) naming both flags. Twins: the admitted request
/// still passes through the proxy (and a refused one is refused there),
/// and `other.example.com`, which the same rules list, still resolves and
/// is reached directly.
#[test]
fn an_allow_net_rule_never_opens_a_direct_way_to_an_intercepted_host() {
    let (out, d) = in_private_net(&format!(
        r#"
U=https://pkgs.example.com:8443
"$SANDBOX" run -q --upstream-ca "$D/ca.pem" {RULE} --allow-net pkgs.example.com:8443 -- true > "$D/exact" 2>&1
echo "exact exit $?"
sed 's/^/exact /' "$D/exact"
"$SANDBOX" run -q --upstream-ca "$D/ca.pem" {RULE} --allow-net pkgs.example.com:9443 -- true; echo "other port exit $?"
for case in every-port wildcard operator nobody; do
  case $case in
    every-port) set -- --allow-net pkgs.example.com --allow-net other.example.com:8443 ;;
    wildcard|nobody) set -- --allow-net '*.example.com:8443' ;;
    operator) set -- --config "$D/op.toml" ;;
  esac
  as=""; [ $case = nobody ] && as="$NOBODY" && cd "$D"
  $as "$SANDBOX" run -q --upstream-ca "$D/ca.pem" {RULE} "$@" -- sh "$D/direct.sh" "$DNSQ" $case "$D/ca.pem" | sed "s/^/$case /"
  $as "$SANDBOX" run -q --upstream-ca "$D/ca.pem" {RULE} "$@" -- curl -sS $U/simple/$case | sed "s/^/$case proxied /"
  $as "$SANDBOX" run -q --upstream-ca "$D/ca.pem" {RULE} "$@" -- curl -sS -i --http1.1 $U/admin-$case | grep -E '^HTTP/1.1 [0-9]' | sed "s/^/$case refused /"
done
"$SANDBOX" run --upstream-ca "$D/ca.pem" {RULE} --allow-net '*.example.com:8443' -- sh -c 'python3 "$DNSQ" pkgs.example.com; exit 3' 2>&1 | grep '^sandbox:' | sed 's/^/summary /'
"#
    ));
    let l = lines(&out);
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    // One policy listing the host and port both ways: refused, naming both.
    has(&l, "exact exit 125");
    has(
        &l,
        "exact sandbox: allow_net / --allow-net pkgs.example.com:8443 and requests / --allow-request 'GET https://pkgs.example.com:8443/simple/**' both name pkgs.example.com:8443",
    );
    has(&l, "other port exit 0");
    for case in ["every-port", "wildcard", "operator", "nobody"] {
        has(
            &l,
            &format!("{case} dns pkgs.example.com rcode 3 answer none"),
        );
        has(&l, &format!("{case} curl: (7)"));
        lacks(&l, case, &format!("origin saw DELETE /direct-{case}"));
        // The twins: a name the same rules list resolves and is reached
        // directly; the admitted request passes the proxy, the other not.
        has(
            &l,
            &format!("{case} dns other.example.com rcode 0 answer 1.2.3.6"),
        );
        has(
            &l,
            &format!("{case} origin saw GET /other-{case} host=other.example.com:8443"),
        );
        has(
            &l,
            &format!("{case} proxied origin saw GET /simple/{case} host=pkgs.example.com:8443"),
        );
        has(&l, &format!("{case} refused HTTP/1.1 403"));
    }
    has(
        &l,
        "summary sandbox: refused 1 name lookup (pkgs.example.com intercepted: reached only through the proxy)",
    );
    let log = std::fs::read_to_string(d.path().join("origin.log")).unwrap_or_default();
    assert!(
        !log.contains("/direct-") && !log.contains("/admin-"),
        "a request reached the origin past interception: {log}"
    );
    assert!(log.contains("GET /simple/wildcard"), "{log}");
}

/// Finding 3: a tunnel through the proxy (HTTP `CONNECT`, SOCKS5) to
/// `shared.example.com:8443`, which `--allow-net` admits and which shares
/// the intercepted host's address, whose TLS asks for `pkgs.example.com`
/// (curl `--connect-to`), is refused with a TLS alert and recorded, as is
/// an IP-literal tunnel whose TLS asks for it; root and nobody. Twins: the
/// same tunnels asking for their own host pass, and so does an IP-literal
/// tunnel without a server name. A direct connection (no proxy) to the
/// shared address at the intercepted port is refused too (the run found
/// the intercepted host there), at another port not.
#[test]
fn a_tunnel_whose_tls_asks_for_an_intercepted_host_is_refused() {
    let (out, d) = in_private_net(&format!(
        r#"
R() {{ "$SANDBOX" run -q --upstream-ca "$D/ca.pem" {RULE} --allow-net shared.example.com:8443 --allow-net 1.2.3.4:8443 "$@"; }}
C="curl -sS --max-time 5 --cacert $D/ca.pem"
TO="--connect-to pkgs.example.com:8443:shared.example.com:8443"
R -- sh -c "$C $TO -X DELETE https://pkgs.example.com:8443/admin-connect 2>&1; echo rc=\$?" | sed 's/^/connect /'
R -- sh -c "$C $TO --proxy \"\$ALL_PROXY\" -X DELETE https://pkgs.example.com:8443/admin-socks 2>&1; echo rc=\$?" | sed 's/^/socks /'
R -- sh -c "$C --connect-to pkgs.example.com:8443:1.2.3.4:8443 -X DELETE https://pkgs.example.com:8443/admin-ip 2>&1; echo rc=\$?" | sed 's/^/ip /'
cd "$D" && $NOBODY "$SANDBOX" run -q --upstream-ca "$D/ca.pem" {RULE} --allow-net shared.example.com:8443 -- sh -c "$C $TO -X DELETE https://pkgs.example.com:8443/admin-nobody 2>&1; echo rc=\$?" | sed 's/^/nobody /'
for q in "" "python3 $DNSQ shared.example.com;"; do
  "$SANDBOX" run -q --upstream-ca "$D/ca.pem" {RULE} --allow-net shared.example.com -- sh -c "$q $C --noproxy '*' -X DELETE https://pkgs.example.com:8443/admin-direct 2>&1; echo rc=\$?; $C --noproxy '*' https://shared.example.com:9443/fine-direct" | sed 's/^/direct /'
done
R -- $C https://shared.example.com:8443/fine-connect | sed 's/^/connect twin /'
R -- sh -c "$C --proxy \"\$ALL_PROXY\" https://shared.example.com:8443/fine-socks" | sed 's/^/socks twin /'
R -- sh -c "curl -sS --max-time 5 -k --proxy \"\$HTTPS_PROXY\" https://1.2.3.4:8443/fine-ip" | sed 's/^/ip twin /'
R -- curl -sS https://pkgs.example.com:8443/simple/intercepted | sed 's/^/intercepted /'
"$SANDBOX" run --report "$D/r.json" --upstream-ca "$D/ca.pem" {RULE} --allow-net shared.example.com:8443 -- $C $TO https://pkgs.example.com:8443/simple/x 2>&1 | grep '^sandbox:' | sed 's/^/summary /'
"#
    ));
    let l = lines(&out);
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    for case in ["connect", "socks", "ip", "nobody"] {
        has(&l, &format!("{case} curl: (35)"));
        has(&l, &format!("{case} rc=35"));
        lacks(&l, &format!("{case} "), &format!("admin-{case}"));
    }
    has(&l, "connect curl: (35) OpenSSL");
    // A direct connection to the shared address at the intercepted port
    // (pinned for shared.example.com from /etc/hosts, or by the run's
    // resolver) is refused; the same address at another port is reached.
    assert_eq!(
        l.iter().filter(|x| x.as_str() == "direct rc=7").count(),
        2,
        "{l:#?}"
    );
    assert_eq!(
        l.iter()
            .filter(
                |x| x.as_str() == "direct origin saw GET /fine-direct host=shared.example.com:9443"
            )
            .count(),
        2,
        "{l:#?}"
    );
    has(&l, "alert access denied");
    has(
        &l,
        "connect twin origin saw GET /fine-connect host=shared.example.com:8443",
    );
    has(
        &l,
        "socks twin origin saw GET /fine-socks host=shared.example.com:8443",
    );
    has(&l, "ip twin origin saw GET /fine-ip host=1.2.3.4:8443");
    has(
        &l,
        "intercepted origin saw GET /simple/intercepted host=pkgs.example.com:8443",
    );
    has(
        &l,
        "summary sandbox: refused 1 connection (shared.example.com:8443 whose TLS asked for another host)",
    );
    let log = std::fs::read_to_string(d.path().join("origin.log")).unwrap_or_default();
    assert!(
        !log.contains("admin") && !log.contains("/simple/x"),
        "a tunnel reached the intercepted host: {log}"
    );
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.path().join("r.json")).unwrap()).unwrap();
    let refused = &record["mediation"]["refused"][0];
    assert_eq!(refused["syscall"], "proxy", "{record:#}");
    assert_eq!(refused["target"], "shared.example.com:8443", "{record:#}");
    assert!(
        refused["reason"]
            .as_str()
            .unwrap()
            .starts_with("its TLS ClientHello asks for pkgs.example.com (SNI)"),
        "{record:#}"
    );
}

/// #44 (a): through the proxy, the intercepted host at a port no request
/// rule names is reached only where an exact `--allow-net HOST:PORT` lists
/// it: with its name at every port, a wildcard (every port), the
/// operator's wildcard, or as nobody, a `CONNECT` and a SOCKS tunnel to
/// `pkgs.example.com:9443` and a plain `http://pkgs.example.com:8080`
/// request (any method, any path) are refused, recorded, and the summary
/// and `--explain` propose the exact `--allow-net HOST:PORT`. Twins: the
/// same rules reach `other.example.com` at those ports, and with the exact
/// rules added the intercepted host is reached there through the proxy
/// (root and nobody), never directly; the admitted request on the
/// intercepted port still passes.
#[test]
fn an_intercepted_host_at_another_port_takes_an_exact_allow_net_rule() {
    let (out, d) = in_private_net(&format!(
        r#"
printf '[sandbox.policy]\nallow_net = ["*.example.com"]\n' > "$D/opany.toml"
C="curl -sS --max-time 5 --cacert $D/ca.pem"
for case in every-port wildcard operator nobody; do
  case $case in
    every-port) set -- --allow-net pkgs.example.com --allow-net other.example.com ;;
    wildcard|nobody) set -- --allow-net '*.example.com' ;;
    operator) set -- --config "$D/opany.toml" ;;
  esac
  as=""; [ $case = nobody ] && as="$NOBODY" && cd "$D"
  R() {{ $as "$SANDBOX" run -q --upstream-ca "$D/ca.pem" {RULE} "$@"; }}
  R "$@" -- sh -c "$C https://pkgs.example.com:9443/tunnel-$case 2>&1; echo rc=\$?" | sed "s/^/$case connect /"
  R "$@" -- sh -c "$C --proxy \"\$ALL_PROXY\" https://pkgs.example.com:9443/socks-$case 2>&1; echo rc=\$?" | sed "s/^/$case socks /"
  R "$@" -- sh -c "$C -i -X DELETE http://pkgs.example.com:8080/plain-$case 2>&1" | grep -E '^HTTP/1.1 [0-9]' | sed "s/^/$case plain /"
  R "$@" -- sh -c "$C https://other.example.com:9443/twin-$case; $C http://other.example.com:8080/twin-$case" | sed "s/^/$case other /"
  R "$@" --allow-net pkgs.example.com:9443 --allow-net pkgs.example.com:8080 -- sh -c "$C https://pkgs.example.com:9443/exact-$case; $C --proxy \"\$ALL_PROXY\" https://pkgs.example.com:9443/exact-socks-$case; $C -X DELETE http://pkgs.example.com:8080/exact-$case; curl -sS https://pkgs.example.com:8443/simple/$case; $C --noproxy '*' https://pkgs.example.com:9443/direct-$case 2>&1; echo direct rc=\$?" | sed "s/^/$case exact /"
  cd /
done
"$SANDBOX" run --report "$D/r.json" --upstream-ca "$D/ca.pem" {RULE} --allow-net '*.example.com' -- $C https://pkgs.example.com:9443/x 2>&1 | grep '^sandbox:' | sed 's/^/summary /'
"$SANDBOX" run --explain --upstream-ca "$D/ca.pem" {RULE} --allow-net '*.example.com' -- $C http://pkgs.example.com:8080/x 2>&1 | sed 's/^/explain /'
for rules in "--allow-net *.example.com" ""; do
  "$SANDBOX" run --explain --upstream-ca "$D/ca.pem" {RULE} $rules -- $C -i http://pkgs.example.com:8443/simple/plain 2>&1 | sed "s/^/plain at 8443 ${{rules:-alone}} /"
  "$SANDBOX" run --upstream-ca "$D/ca.pem" {RULE} $rules -- $C -f http://pkgs.example.com:8443/simple/plain 2>&1 | grep '^sandbox:' | sed "s/^/plain at 8443 ${{rules:-alone}} /"
done
"#
    ));
    let l = lines(&out);
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    for case in ["every-port", "wildcard", "operator", "nobody"] {
        // curl: (56) CONNECT tunnel failed, response 403; (97) SOCKS refused.
        has(&l, &format!("{case} connect curl: (56)"));
        has(&l, &format!("{case} connect rc=56"));
        has(&l, &format!("{case} socks rc=97"));
        has(&l, &format!("{case} plain HTTP/1.1 403"));
        lacks(&l, case, &format!("/tunnel-{case}"));
        lacks(&l, case, &format!("/socks-{case}"));
        lacks(&l, case, &format!("/plain-{case}"));
        has(
            &l,
            &format!("{case} other origin saw GET /twin-{case} host=other.example.com:9443"),
        );
        has(
            &l,
            &format!("{case} other origin saw GET /twin-{case} host=other.example.com:8080"),
        );
        has(
            &l,
            &format!("{case} exact origin saw GET /exact-{case} host=pkgs.example.com:9443"),
        );
        has(
            &l,
            &format!("{case} exact origin saw GET /exact-socks-{case} host=pkgs.example.com:9443"),
        );
        has(
            &l,
            &format!("{case} exact origin saw DELETE /exact-{case} host=pkgs.example.com:8080"),
        );
        has(
            &l,
            &format!("{case} exact origin saw GET /simple/{case} host=pkgs.example.com:8443"),
        );
        // Directly (no proxy), not even the exact rule reaches it.
        has(&l, &format!("{case} exact direct rc=7"));
    }
    has(
        &l,
        "summary sandbox: refused 1 connection (pkgs.example.com:9443 not in --allow-net)",
    );
    has(
        &l,
        "explain       to admit it: --allow-net pkgs.example.com:8080",
    );
    has(
        &l,
        "explain     refused proxy on pkgs.example.com:8080: no egress rule lists this host name and port exactly: a request rule intercepts this host at another port",
    );
    // A plain http:// request to the intercepted port itself: refused with
    // or without a wider rule, nothing proposed (an exact rule for it is
    // refused as ambiguous).
    for rules in ["--allow-net *.example.com", "alone"] {
        let p = format!("plain at 8443 {rules} ");
        has(&l, &format!("{p}HTTP/1.1 403"));
        has(
            &l,
            &format!("{p}    refused proxy on pkgs.example.com:8443: a request rule intercepts this host and port: it is reached only over HTTPS"),
        );
        has(
            &l,
            &format!("{p}sandbox: refused 1 connection (pkgs.example.com:8443 intercepted: reached only over HTTPS)"),
        );
        lacks(&l, &p, "to admit it");
    }
    let log = std::fs::read_to_string(d.path().join("origin.log")).unwrap_or_default();
    for gone in [
        "/tunnel-",
        "/socks-",
        "/plain-",
        "/direct-",
        " /x ",
        "/simple/plain",
    ] {
        assert!(!log.contains(gone), "{gone} reached the origin: {log}");
    }
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.path().join("r.json")).unwrap()).unwrap();
    let refused = &record["mediation"]["refused"][0];
    assert_eq!(refused["syscall"], "proxy", "{record:#}");
    assert_eq!(refused["target"], "pkgs.example.com:9443", "{record:#}");
    assert!(
        refused["reason"]
            .as_str()
            .unwrap()
            .starts_with("no egress rule lists this host name and port exactly"),
        "{record:#}"
    );
}

/// #44 (b): `--explain` proposes no `--allow-net ADDRESS:PORT` for a direct
/// connect refused at the intercepted host's address, at its intercepted
/// port or another (such a rule would reach it around the proxy), and
/// says why; root and nobody. Twin: a direct connect to an address no rule
/// lists gets the proposal.
#[test]
fn explain_proposes_no_ip_rule_for_an_intercepted_hosts_address() {
    let (out, _d) = in_private_net(&format!(
        r#"
C="curl -sS --max-time 5 --noproxy '*' -k"
for who in root nobody; do
  as=""; [ $who = nobody ] && as="$NOBODY" && cd "$D"
  $as "$SANDBOX" run --explain --upstream-ca "$D/ca.pem" {RULE} --allow-net shared.example.com:8443 -- sh -c "$C https://shared.example.com:8443/a; $C https://1.2.3.4:9443/c; $C https://1.2.3.6:8443/b; exit 3" 2>&1 | sed "s/^/$who /"
done
"#
    ));
    let l = lines(&out);
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    for who in ["root", "nobody"] {
        // At the intercepted port, and at another port (where no IP rule
        // may reach the intercepted host either: it takes an exact
        // `--allow-net HOST:PORT` through the proxy).
        for port in [8443, 9443] {
            has(
                &l,
                &format!("{who}     refused connect on 1.2.3.4:{port} (where the intercepted host pkgs.example.com was found: a request rule intercepts it, so it is reached only through the proxy)"),
            );
        }
        assert_eq!(
            l.iter()
                .filter(|x| x.starts_with(&format!(
                    "{who}       not proposed: it is the address of a host a request rule intercepts"
                )))
                .count(),
            2,
            "{l:#?}"
        );
        has(
            &l,
            &format!(
                "{who}       not proposed: it is the address of a host a request rule intercepts"
            ),
        );
        lacks(&l, who, "--allow-net 1.2.3.4");
        lacks(&l, who, "origin saw");
        // The twin: an address no rule lists.
        has(
            &l,
            &format!("{who}       to admit it: --allow-net 1.2.3.6:8443"),
        );
    }
}
