//! Name resolution under `--allow-net` for programs that resolve names
//! themselves: their queries, over UDP (each IP datagram socket of the run
//! is made in a network namespace of its own where only the runner's
//! resolver listens) or TCP (the broker routes any address's port 53
//! there), reach the runner's resolver, which answers only listed names;
//! connects by IP to what it answered are admitted on the listed ports
//! without the proxy. Each in a private network and mount namespace the
//! test makes, with a stand-in DNS server on its loopback: nothing leaves
//! the machine.
#![cfg(target_os = "linux")]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sandbox_tests::{assert_exit, is_root, sandbox_bin};

use crate::private_net::{lines, scratch_dir, LOOPBACK_UP};

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/dns");

/// Runs `script` in a new network and mount namespace (root only), with
/// loopback up, `/etc/resolv.conf` naming 127.0.0.1, a stand-in DNS server
/// there answering `svc.example.com`, `other.example.com` and
/// `a.example.org` with 127.0.0.1, and a listener on 127.0.0.1:8080 that
/// says `hello`. `$SANDBOX`, `$CLIENT`, `$DNSQ`, `$NOBODY` (`setpriv` to
/// nobody) and `$D` (a scratch directory, readable by all) are set; the
/// stand-in server's log, one `query NAME` line per question, is
/// `$D/dns.log`.
fn in_private_net(script: &str) -> (Output, PathBuf, tempfile::TempDir) {
    // nobody's runs read and run what is here.
    let (dir, d) = scratch_dir();
    std::fs::write(d.join("resolv.conf"), "nameserver 127.0.0.1\n").unwrap();
    let setup = format!(
        r#"set -e
mount --bind "$D/resolv.conf" /etc/resolv.conf
{LOOPBACK_UP}
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
        .env("DNSQ", Path::new(DIR).join("dnsq.py"))
        .env(
            "NOBODY",
            "setpriv --reuid=65534 --regid=65534 --clear-groups --",
        )
        .env("D", &d)
        .env_remove("SANDBOX_CONFIG")
        .output()
        .expect("unshare (util-linux) makes the namespaces");
    (out, d, dir)
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

/// Resolvers of the program's own (as Go's, musl's and other
/// self-contained ones): addressed UDP to resolv.conf's server (the answer
/// taken from that address only, as musl checks), a connected UDP socket to
/// an address the program carries (as Go's), and TCP. Listed names are
/// answered, others get NXDOMAIN, and no query reaches the host's DNS
/// server: the control's query outside the sandbox does, so the log shows it
/// would. glibc is asked for TCP (`RES_OPTIONS=use-vc`), so it needs no
/// datagram namespace.
#[test]
fn own_resolvers_over_udp_or_tcp_meet_the_runners_resolver_only() {
    let (out, d, _t) = in_private_net(
        r#"
/usr/bin/python3 "$DNSQ" --udp control.example.net | sed 's/^/outside /'
"$SANDBOX" run -q --allow-net svc.example.com:8080 -- /usr/bin/python3 "$DNSQ" --udp svc.example.com secret.example.net | sed 's/^/udp /'
"$SANDBOX" run -q --allow-net svc.example.com:8080 -- /usr/bin/python3 "$DNSQ" --connected --server 192.0.2.1 svc.example.com secret2.example.net | sed 's/^/connected /'
"$SANDBOX" run -q --allow-net svc.example.com:8080 -- /usr/bin/python3 "$DNSQ" --tcp svc.example.com secret3.example.net | sed 's/^/tcp /'
cd "$D" && $NOBODY "$SANDBOX" run -q --allow-net svc.example.com:8080 -- /usr/bin/python3 "$DNSQ" --udp svc.example.com | sed 's/^/nobody /'
"$SANDBOX" run -q --allow-net svc.example.com:8080 -- /bin/sh -c 'echo "res_options=${RES_OPTIONS-unset}"'
"#,
    );
    let l = lines(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    has(&l, "outside control.example.net 3 []");
    for mode in ["udp", "connected", "tcp", "nobody"] {
        assert!(
            l.contains(&format!("{mode} svc.example.com 0 ['127.0.0.1']")),
            "{mode}: {l:#?}\n{err}"
        );
    }
    has(&l, "udp secret.example.net 3 []");
    has(&l, "connected secret2.example.net 3 []");
    has(&l, "tcp secret3.example.net 3 []");
    has(&l, "res_options=use-vc");
    let log = std::fs::read_to_string(d.join("dns.log")).unwrap();
    assert!(log.contains("query control.example.net"), "{log}");
    assert!(
        log.contains("query svc.example.com"),
        "the runner resolves it: {log}"
    );
    assert!(!log.contains("secret"), "a query left the sandbox: {log}");
}

/// No datagram of the run reaches anything but the runner's resolver: a
/// UDP listener on the namespace's loopback gets the control's datagram,
/// and none of the sandboxed command's (addressed `sendto`, `sendmsg`, a
/// connected socket, an IPv4-mapped IPv6 address); a connected socket sees
/// the port unreachable. Raw sockets stay refused, and the record names
/// the call.
#[test]
fn no_datagram_reaches_anything_but_the_runners_resolver() {
    let (out, d, _t) = in_private_net(
        r#"
/usr/bin/python3 -c '
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1", 5353))
open("'"$D"'/udp-ready", "w").close()
while True:
    m, _ = s.recvfrom(512); open("'"$D"'/udp.log", "a").write(m.decode() + "\n")
' &
udp=$!
for i in $(seq 100); do [ -e "$D/udp-ready" ] && break; sleep 0.05; done
SEND='import socket, time
to = ("127.0.0.1", 5353)
a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
print("sendto", a.sendto(b"sendto", to))
print("sendmsg", a.sendmsg([b"sendmsg"], [], 0, to))
six = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
print("mapped", six.sendto(b"mapped", ("::ffff:127.0.0.1", 5353)))
c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); c.connect(to); c.send(b"connected")
time.sleep(0.2)
try:
    c.send(b"again"); print("connected no error")
except OSError as e:
    print("connected", e.strerror)
try:
    socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_UDP); print("raw made")
except OSError as e:
    print("raw", e.strerror)'
/usr/bin/python3 -c "$SEND" > /dev/null 2>&1
sleep 0.2
echo "outside $(cat "$D/udp.log" | tr '\n' ' ')"
rm "$D/udp.log"
"$SANDBOX" run -q --report "$D/r.json" --allow-net svc.example.com:8080 -- /usr/bin/python3 -c "$SEND"
sleep 0.2
echo "inside $(cat "$D/udp.log" 2>/dev/null | tr '\n' ' ')"
kill $udp
"#,
    );
    let l = lines(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    has(&l, "outside sendto sendmsg mapped connected again");
    has(&l, "sendto 6");
    has(&l, "sendmsg 7");
    has(&l, "mapped 6");
    has(&l, "connected Connection refused");
    has(&l, "raw Operation not permitted");
    assert!(
        l.contains(&"inside ".to_owned()),
        "a datagram got out: {l:#?}\n{err}"
    );
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("r.json")).unwrap()).unwrap();
    let refused = record["mediation"]["refused"].to_string();
    assert!(
        refused.contains("socket(AF_INET, SOCK_RAW, 17)"),
        "{refused}"
    );
}

/// Statically linked programs, whose C library's resolver reads no
/// environment a dynamic one might: musl's (UDP only; it takes answers only
/// from the address asked) and static glibc's, built here from
/// `dns/client.rs`. Both reach the listed name directly, as root and as
/// nobody, and find no address for another.
#[test]
fn static_glibc_and_musl_programs_resolve_listed_names_only() {
    let bin = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        bin.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let source = Path::new(DIR).join("client.rs");
    for (name, args) in [
        (
            "client-musl",
            &["--target", "x86_64-unknown-linux-musl"][..],
        ),
        (
            "client-glibc-static",
            &["-C", "target-feature=+crt-static"][..],
        ),
    ] {
        let out = Command::new("rustc")
            .args(args)
            .arg(&source)
            .arg("-o")
            .arg(bin.path().join(name))
            .output()
            .expect("rustc builds the client");
        assert!(
            out.status.success(),
            "building {name} (for musl: `rustup target add x86_64-unknown-linux-musl`, \
             as .ci/run does): {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let (out, _d, _t) = in_private_net(
        &r#"
for c in client-musl client-glibc-static; do
  "$BIN/$c" other.example.com 8080 | sed "s/^/$c outside /"
  "$SANDBOX" run -q --allow-net svc.example.com:8080 -- "$BIN/$c" svc.example.com 8080 | sed "s/^/$c /"
  "$SANDBOX" run -q --allow-net svc.example.com:8080 -- "$BIN/$c" other.example.com 8080 | sed "s/^/$c /"
  (cd "$D" && $NOBODY "$SANDBOX" run -q --allow-net svc.example.com:8080 -- "$BIN/$c" svc.example.com 8080) | sed "s/^/$c nobody /"
done
"#
        .replace("$BIN", &bin.path().display().to_string()),
    );
    let l = lines(&out);
    for c in ["client-musl", "client-glibc-static"] {
        has(
            &l,
            &format!("{c} outside reached other.example.com 127.0.0.1 hello"),
        );
        has(&l, &format!("{c} reached svc.example.com 127.0.0.1 hello"));
        has(&l, &format!("{c} unresolved other.example.com"));
        has(
            &l,
            &format!("{c} nobody reached svc.example.com 127.0.0.1 hello"),
        );
    }
}

/// Where the host lets the runner make no network namespace (root without
/// `CAP_SYS_ADMIN` and no user namespaces allowed: `max_user_namespaces`
/// is 0 in the test's own user namespace), IP datagram sockets are
/// refused, the record says why, and `sandbox policy` says names go over
/// TCP only. Twin: root without `CAP_SYS_ADMIN` but with user namespaces
/// makes one (a user namespace of its own, as an unprivileged runner).
#[test]
fn without_a_datagram_namespace_udp_is_refused_and_says_why() {
    assert!(is_root(), "run this suite as root (CI does)");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display().to_string();
    let script = r#"
MAKE='import socket
try:
    socket.socket(socket.AF_INET, socket.SOCK_DGRAM); print("made")
except OSError as e:
    print("udp", e.strerror)'
NOADMIN="setpriv --bounding-set=-sys_admin --inh-caps=-sys_admin --"
export MAKE NOADMIN
$NOADMIN "$SANDBOX" run -q --allow-net svc.example.com:8080 -- /usr/bin/python3 -c "$MAKE" | sed 's/^/twin /'
unshare --user --map-root-user /bin/sh -c '
echo 0 > /proc/sys/user/max_user_namespaces
$NOADMIN "$SANDBOX" run -q --report "$D/r.json" --allow-net svc.example.com:8080 -- /usr/bin/python3 -c "$MAKE"
$NOADMIN "$SANDBOX" policy --allow-net svc.example.com:8080'
"#;
    let out = Command::new("/bin/sh")
        .args(["-c", script])
        .env("SANDBOX", sandbox_bin())
        .env("D", &d)
        .env_remove("SANDBOX_CONFIG")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("twin made"), "{text}\n{err}");
    assert!(
        text.contains("\nudp Operation not permitted"),
        "{text}\n{err}"
    );
    assert!(
        text.contains(
            "DNS over TCP only, RES_OPTIONS=use-vc for glibc; UDP refused (no datagram namespace"
        ),
        "{text}"
    );
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("r.json")).unwrap()).unwrap();
    let refused = record["mediation"]["refused"].to_string();
    assert!(
        refused.contains(
            "socket(AF_INET, SOCK_DGRAM, 0): no datagram namespace: making the namespaces"
        ),
        "{refused}"
    );
}

/// An unprivileged runner's datagram namespace belongs to a user namespace
/// of its uid, the command's too, so the command holds every capability
/// over it: the control (the same script, unconfined, in a user and network
/// namespace of its own) configures loopback, adds a bridge, sets marks and
/// reaches netfilter. Confined, on its datagram socket, every one of those
/// is refused and the reads still work.
#[test]
fn the_datagram_namespace_cannot_be_administered_by_the_command() {
    let (out, d, _t) = in_private_net(
        r#"
mkdir -m 777 "$D/n" && cd "$D/n"
$NOBODY unshare -Urn /usr/bin/python3 "$ADMIN" | sed 's/^/owner /'
$NOBODY "$SANDBOX" run -q --report "$D/n/r.json" --allow-net svc.example.com:8080 -- /usr/bin/python3 "$ADMIN"
"#
        .replace("$ADMIN", &format!("{DIR}/ns_admin.py"))
        .as_str(),
    );
    let l = lines(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    for control in [
        "SIOCSIFFLAGS",
        "SIOCBRADDBR",
        "SO_MARK",
        "IP_TRANSPARENT",
        "IP_OPTIONS",
        "IPV6_HOPOPTS",
    ] {
        has(&l, &format!("owner {control} ok"));
    }
    // Netfilter answers the owner (no table by that name), never EPERM.
    for control in ["IPT_SO_GET_INFO", "IPT_SO_SET_REPLACE"] {
        has(&l, &format!("owner {control}"));
        assert!(
            !l.contains(&format!("owner {control} refused EPERM")),
            "{l:#?}"
        );
    }
    for read in ["SIOCGIFINDEX", "SIOCGIFFLAGS", "SIOCGIFMETRIC", "IP_TOS"] {
        assert!(l.contains(&format!("{read} ok")), "{read}: {l:#?}\n{err}");
    }
    for refused in [
        "SIOCSIFFLAGS",
        "SIOCBRADDBR",
        "SIOCGSKNS",
        "SO_MARK",
        "IP_TRANSPARENT",
        "IPT_SO_GET_INFO",
        "IPT_SO_SET_REPLACE",
        "IP_OPTIONS",
        "IPV6_HOPOPTS",
    ] {
        assert!(
            l.contains(&format!("{refused} refused EPERM")),
            "{refused}: {l:#?}\n{err}"
        );
    }
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("n/r.json")).expect(&err)).unwrap();
    let refused = record["mediation"]["refused"].to_string();
    assert!(
        refused.contains("ioctl") && refused.contains("setsockopt"),
        "{refused}"
    );
}

/// The run's datagram sockets read as the kernel's own: type, family,
/// protocol, `O_NONBLOCK` and `FD_CLOEXEC` as asked (also without
/// `SOCK_CLOEXEC`), and the kernel's errors for bad flags and types, as root
/// and as nobody, against the same script unconfined. The one difference
/// is the policy's: a datagram socket of another protocol is refused
/// (`EPERM`) before the kernel would say `EPROTONOSUPPORT`.
#[test]
fn datagram_sockets_read_as_the_kernels_own() {
    let script = format!("{DIR}/udp_sockets.py");
    let run = |nobody: bool, confined: bool| -> String {
        let mut argv = allowlisted(nobody, confined);
        argv.push("/usr/bin/python3".into());
        let mut c = Command::new(&argv[0]);
        c.args(&argv[1..]);
        let out = c
            .arg(&script)
            .current_dir("/")
            .env_remove("SANDBOX_CONFIG")
            .output()
            .unwrap();
        assert_exit(&out, 0);
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    for nobody in [false, true] {
        let bare = run(nobody, false);
        let confined = run(nobody, true);
        assert!(
            bare.contains("v4 bad protocol error EPROTONOSUPPORT"),
            "{bare}"
        );
        assert!(
            confined.contains("v4 bad protocol error EPERM"),
            "{confined}"
        );
        let same = |t: &str| -> Vec<String> {
            t.lines()
                .filter(|l| !l.starts_with("v4 bad protocol"))
                .map(str::to_owned)
                .collect()
        };
        assert_eq!(same(&bare), same(&confined), "nobody: {nobody}");
        assert!(bare.contains("raw v4 False False"), "{bare}");
    }
}

/// A run holds a bounded number of datagram sockets at once (128 at the
/// default `net.core.rmem_max`, fewer where it is larger, so that their
/// queues stay within 64 MiB): their buffers are not charged to the run's
/// cgroup, so without a bound a run could hold gigabytes past its
/// `--memory` and fill the host's UDP memory. The next one fails with
/// `ENOBUFS`; closing one makes room (twin), and unconfined the same script
/// makes all 300 (twin: the bound is the sandbox's, not the host's). As
/// root and as nobody.
#[test]
fn a_run_holds_a_bounded_number_of_datagram_sockets() {
    let script = r#"
import errno, socket
socks = []
try:
    while len(socks) < 300:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    print("made", len(socks))
except OSError as e:
    print("made", len(socks), errno.errorcode[e.errno])
socks.pop().close()
socks.append(socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
print("one closed, one more made")
"#;
    let rmem_max: u64 = std::fs::read_to_string("/proc/sys/net/core/rmem_max")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let bound = usize::try_from((64u64 << 20) / (2 * rmem_max))
        .unwrap()
        .clamp(8, 128);
    for nobody in [false, true] {
        for confined in [false, true] {
            let mut argv = allowlisted(nobody, confined);
            argv.extend(["/usr/bin/python3", "-c", script].map(Into::into));
            let out = Command::new(&argv[0])
                .args(&argv[1..])
                .current_dir("/")
                .env_remove("SANDBOX_CONFIG")
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            let lines: Vec<&str> = text.lines().collect();
            let why = format!(
                "nobody {nobody}, confined {confined}: {text}{}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert_eq!(lines.get(1), Some(&"one closed, one more made"), "{why}");
            let made: Vec<&str> = lines[0].split(' ').collect();
            if confined {
                // The bound, or a few fewer for a moment after the namespace
                // is made: its set-up sockets are counted until the kernel
                // has freed them (netlink's after an RCU grace period).
                let n: usize = made[1].parse().unwrap();
                assert!((bound.saturating_sub(3)..=bound).contains(&n), "{why}");
                assert_eq!(made.get(2), Some(&"ENOBUFS"), "{why}");
            } else {
                assert_eq!(made, ["made", "300"], "{why}");
            }
        }
    }
}

/// The argv that starts a command as nobody (or as this user) and under
/// `--allow-net svc.example.com:8080` (or bare): the command goes after it.
fn allowlisted(nobody: bool, confined: bool) -> Vec<std::ffi::OsString> {
    let mut argv: Vec<std::ffi::OsString> = Vec::new();
    if nobody {
        argv.extend(
            [
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "--",
            ]
            .map(Into::into),
        );
    }
    if confined {
        argv.push(sandbox_bin().into());
        argv.extend(["run", "-q", "--allow-net", "svc.example.com:8080", "--"].map(Into::into));
    }
    argv
}

/// A question whose name carries bytes no host name has (an OSC title
/// sequence, a newline that would add a line of the command's choosing) is
/// answered FORMERR, and the summary the sandbox prints after the run (one
/// that failed: a successful one prints none) shows it escaped on its own
/// line. Twin: a listed name is answered in the same
/// run, and an unlisted plain name is shown as it is.
#[test]
fn a_name_that_is_no_host_name_is_malformed_and_shown_escaped() {
    let (out, _d, _t) = in_private_net(
        r#"
evil="$(printf 'x\033]0;owned\007.example.com')"
line="$(printf 'y\nsandbox: all clear, nothing refused')"
"$SANDBOX" run --allow-net svc.example.com:8080 -- /bin/sh -c '/usr/bin/python3 "$@"; exit 1' sh "$DNSQ" --tcp svc.example.com "$evil" "$line" | sed 's/^/tcp /'
"$SANDBOX" run --allow-net svc.example.com:8080 -- /bin/sh -c '/usr/bin/python3 "$@"; exit 1' sh "$DNSQ" --tcp plain.example.net | sed 's/^/plain /'
"#,
    );
    let l = lines(&out);
    let err = &out.stderr;
    let text = String::from_utf8_lossy(err);
    has(&l, "tcp svc.example.com 0 ['127.0.0.1']");
    assert!(
        l.iter()
            .filter(|x| x.starts_with("tcp ") && x.ends_with(" 1 []"))
            .count()
            == 2,
        "both answered FORMERR: {l:#?}\n{text}"
    );
    has(&l, "plain plain.example.net 3 []");
    assert!(
        !err.iter().any(|&b| b == 0x1b || b == 0x07),
        "raw escape bytes on stderr: {text}"
    );
    assert!(
        !text.lines().any(|x| x.starts_with("sandbox: all clear")),
        "{text}"
    );
    assert!(
        text.contains(
            "sandbox: refused 2 name lookups (x\\\\x1b]0;owned\\\\x07.example.com, \
             y\\\\nsandbox: all clear, nothing refused are not host names)"
        ),
        "{text}"
    );
    assert!(
        text.contains("sandbox: refused 1 name lookup (plain.example.net not in --allow-net)"),
        "{text}"
    );
}
