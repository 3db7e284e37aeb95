//! One boundary probe per declared exception, run by name: each shows its
//! exception works under the policy that denies the axis, beside its nearest
//! neighbour that must stay refused (so neither "allowed" nor "refused" can
//! read as the other).

use std::net::TcpListener;
use std::path::PathBuf;

use sandbox_core::SandboxPolicy;

use super::harness::{
    refused, resolve, s, show, succeeded, unwitnessed, Ctx, Outcome, Tree, PY_PRELUDE,
};
use super::LegResult;

/// A probe's check.
type Probe = fn(&Ctx<'_>) -> Result<Outcome, Outcome>;

/// The probe with id `id` (as named by [`sandbox_core::axis::Exception::probe`]).
pub fn probe(id: &str) -> Option<Probe> {
    PROBES.iter().find(|(n, _)| *n == id).map(|(_, p)| *p)
}

const PROBES: &[(&str, Probe)] = &[
    ("network.null-address-send", null_address_send),
    ("network.unix-socketpair", unix_socketpair),
    ("network.bind", bind),
    ("read_deny.listing-names", listing_names),
];

fn verdict(pass: bool, evidence: String) -> Outcome {
    (
        if pass {
            LegResult::Passed
        } else {
            LegResult::Failed
        },
        evidence,
    )
}

fn no_network(
    ctx: &Ctx<'_>,
    script: &str,
) -> Result<std::collections::BTreeMap<String, String>, Outcome> {
    let policy = resolve(SandboxPolicy {
        network: false,
        ..SandboxPolicy::default()
    })?;
    ctx.python(&policy, &format!("{PY_PRELUDE}{script}"), &[])?
        .started()
}

/// The exception: a send with no address (on a connected socket) works with
/// the network off. Its neighbour: the same send *with* an address, which on
/// a TCP socket with `MSG_FASTOPEN` connects to a real loopback listener
/// (and sends) wherever nothing refuses it. Its allowed twin is that very
/// call under `network = true`: it must succeed and the listener must accept,
/// so the refusal with the network off (exactly `EPERM`, nothing accepted)
/// is the policy's and not the kernel's (an unconnected TCP socket without
/// `MSG_FASTOPEN` fails with `EPIPE` whatever the policy).
fn null_address_send(ctx: &Ctx<'_>) -> Result<Outcome, Outcome> {
    let (listener, port) = loopback_listener()?;
    let script = format!(
        "{PY_PRELUDE}{}",
        r#"
import socket
a, b = socket.socketpair()
attempt("exception_send", lambda: a.send(b"x") and b.recv(1).decode())
t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
attempt("neighbour_addressed_sendto",
        lambda: t.sendto(b"x", socket.MSG_FASTOPEN, ("127.0.0.1", int(sys.argv[1]))))
"#
    );
    let run = |network: bool| -> Result<_, Outcome> {
        let policy = resolve(SandboxPolicy {
            network,
            ..SandboxPolicy::default()
        })?;
        let v = ctx.python(&policy, &script, &[&port])?.started()?;
        // Connections complete in the kernel's backlog without an accept().
        std::thread::sleep(std::time::Duration::from_millis(50));
        Ok((v, accepted(&listener)))
    };
    let keys = ["exception_send", "neighbour_addressed_sendto"];
    let (twin, twin_accepted) = run(true)?;
    if !succeeded(twin.get("neighbour_addressed_sendto")) || twin_accepted == 0 {
        return Err(unwitnessed(format!(
            "allowed twin not seen: with network=true {} and the listener accepted \
             {twin_accepted} (is net.ipv4.tcp_fastopen's client bit off?)",
            show(&twin, &keys)
        )));
    }
    let (v, n) = run(false)?;
    Ok(verdict(
        v.get("exception_send").map(String::as_str) == Some("ok:x")
            && v.get("neighbour_addressed_sendto").map(String::as_str) == Some("err:EPERM")
            && n == 0,
        format!(
            "network=false: {}, listener accepted {n} (allowed twin, network=true: \
             neighbour_addressed_sendto={}, accepted {twin_accepted})",
            show(&v, &keys),
            twin.get("neighbour_addressed_sendto")
                .map_or("(absent)", String::as_str)
        ),
    ))
}

/// A non-blocking loopback TCP listener and its port (as an argument).
pub(crate) fn loopback_listener() -> Result<(TcpListener, PathBuf), Outcome> {
    let l = TcpListener::bind("127.0.0.1:0")
        .map_err(|e| unwitnessed(format!("cannot listen on loopback: {e}")))?;
    l.set_nonblocking(true)
        .map_err(|e| unwitnessed(e.to_string()))?;
    let port = l
        .local_addr()
        .map_err(|e| unwitnessed(e.to_string()))?
        .port();
    Ok((l, PathBuf::from(port.to_string())))
}

/// How many connections `listener` has waiting (each is accepted and closed).
pub(crate) fn accepted(listener: &TcpListener) -> usize {
    std::iter::from_fn(|| listener.accept().ok()).count()
}

fn unix_socketpair(ctx: &Ctx<'_>) -> Result<Outcome, Outcome> {
    let v = no_network(
        ctx,
        r#"
import socket
attempt("exception_stream_pair", lambda: len(socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)))
attempt("neighbour_datagram_pair", lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM))
"#,
    )?;
    let keys = ["exception_stream_pair", "neighbour_datagram_pair"];
    Ok(verdict(
        succeeded(v.get("exception_stream_pair")) && refused(v.get("neighbour_datagram_pair")),
        format!("network=false: {}", show(&v, &keys)),
    ))
}

fn bind(ctx: &Ctx<'_>) -> Result<Outcome, Outcome> {
    let v = no_network(
        ctx,
        r#"
import socket
t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
attempt("exception_bind", lambda: t.bind(("127.0.0.1", 0)))
attempt("neighbour_listen", lambda: t.listen(1))
"#,
    )?;
    let keys = ["exception_bind", "neighbour_listen"];
    Ok(verdict(
        succeeded(v.get("exception_bind")) && refused(v.get("neighbour_listen")),
        format!("network=false: {}", show(&v, &keys)),
    ))
}

fn listing_names(ctx: &Ctx<'_>) -> Result<Outcome, Outcome> {
    let tree = Tree::new()?;
    let secret = tree.dir("secret")?;
    tree.file("secret/key", "k\n")?;
    let policy = resolve(SandboxPolicy {
        read_deny_paths: vec![s(&secret)],
        ..SandboxPolicy::default()
    })?;
    let script = format!(
        "{PY_PRELUDE}\nd = sys.argv[1]\nattempt(\"exception_list\", lambda: sorted(os.listdir(d)))\nattempt(\"neighbour_read\", lambda: open(d + \"/key\").read())\n"
    );
    let run = ctx.python(&policy, &script, &[&secret])?;
    let v = run.started()?;
    if !v.contains_key("exception_list") {
        return Err(unwitnessed(format!(
            "the child printed nothing ({})",
            run.describe()
        )));
    }
    let keys = ["exception_list", "neighbour_read"];
    Ok(verdict(
        v.get("exception_list").map(String::as_str) == Some("ok:['key']")
            && refused(v.get("neighbour_read")),
        format!(
            "read_deny_paths=[{}]: {}",
            secret.display(),
            show(&v, &keys)
        ),
    ))
}

#[cfg(test)]
mod tests {
    /// Every exception the registry declares has its probe.
    #[test]
    fn every_declared_exception_has_a_probe() {
        for (axis, e) in sandbox_core::axis::exceptions() {
            assert!(
                super::probe(e.probe).is_some(),
                "{axis} exception {:?} names probe {:?}, which does not exist",
                e.name,
                e.probe
            );
        }
    }
}
