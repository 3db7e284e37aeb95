//! The network axis, against loopback sockets the arm opens itself.

use std::net::{TcpListener, UdpSocket};

use sandbox_core::SandboxPolicy;

use super::harness::{
    refused, resolve, show, succeeded, unwitnessed, Ctx, Outcome, Tree, PY_PRELUDE,
};
use super::LegResult;

fn policy(network: bool) -> SandboxPolicy {
    SandboxPolicy {
        network,
        ..SandboxPolicy::default()
    }
}

const CONNECT: &str = r#"
import socket
port = int(sys.argv[1])
def connect():
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"hello")
    s.close()
attempt("connect", connect)
def control():
    r, w = os.pipe()
    os.write(w, b"ok")
    return os.read(r, 2).decode()
attempt("non_network_control", control)
"#;

/// How many connections wait on `listener` (non-blocking accept).
fn accepted(listener: &TcpListener) -> usize {
    let mut n = 0;
    while listener.accept().is_ok() {
        n += 1;
    }
    n
}

pub(crate) fn deny(ctx: &Ctx<'_>) -> Result<Outcome, Outcome> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .map_err(|e| unwitnessed(format!("cannot open a loopback listener: {e}")))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| unwitnessed(format!("cannot make the listener non-blocking: {e}")))?;
    let port = listener
        .local_addr()
        .map_err(|e| unwitnessed(e.to_string()))?
        .port();
    let port_arg = std::path::PathBuf::from(port.to_string());
    let script = format!("{PY_PRELUDE}{CONNECT}");

    let open = ctx.python(&resolve(policy(true))?, &script, &[&port_arg])?;
    let values = open.started()?;
    let open_seen = accepted(&listener);
    if !succeeded(values.get("connect")) || open_seen == 0 {
        return Err(unwitnessed(format!(
            "positive control not seen: with network = true a connect to 127.0.0.1:{port} gave \
             {} and the listener accepted {open_seen} connection(s) (the child {})",
            show(&values, &["connect"]),
            open.describe()
        )));
    }

    let closed = ctx.python(&resolve(policy(false))?, &script, &[&port_arg])?;
    let values = closed.started()?;
    let closed_seen = accepted(&listener);
    // The non-networking control: the same denied run did run and work.
    if values.get("non_network_control").map(String::as_str) != Some("ok:ok") {
        return Err(unwitnessed(format!(
            "non-networking control not seen under network = false: {} (the child {})",
            show(&values, &["non_network_control"]),
            closed.describe()
        )));
    }
    let evidence = format!(
        "network=true: connect ok, listener accepted {open_seen}; network=false: {}, listener \
         accepted {closed_seen}",
        show(&values, &["connect", "non_network_control"])
    );
    let pass = refused(values.get("connect")) && closed_seen == 0;
    Ok((
        if pass {
            LegResult::Passed
        } else {
            LegResult::Failed
        },
        evidence,
    ))
}

const BOUNDARY: &str = r#"
import socket
udp_port = int(sys.argv[1])
def pair():
    a, b = socket.socketpair()
    a.send(b"ping")
    got = b.recv(4)
    b.send(b"pong")
    return (got + a.recv(4)).decode()
attempt("socketpair_null_sendto", pair)
def bind():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1] > 0
attempt("bind", bind)
def listen():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen(1)
attempt("listen", listen)
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.sendto(b"egress", ("127.0.0.1", udp_port))
attempt("addressed_udp_sendto", udp)
def unix_dgram():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    a.sendmsg([b"egress"], [], 0, sys.argv[2])
attempt("addressed_unix_sendmsg", unix_dgram)
"#;

const ALLOWLIST: &str = r#"
import socket
listed, other, udp_port = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
def connect(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.close()
attempt("listed_connect", lambda: connect(listed))
attempt("other_connect", lambda: connect(other))
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.sendto(b"egress", ("127.0.0.1", udp_port))
attempt("udp_sendto", udp)
"#;

const ALLOWLIST_KEYS: &[&str] = &["listed_connect", "other_connect", "udp_sendto"];

/// Network on for one listed destination only (`allow_net`): a connect to
/// it works, one to another loopback port is refused, and a UDP datagram
/// to a loopback listener never arrives (the send itself may succeed: the
/// run's datagram sockets live in a namespace of their own, where only the
/// runner's resolver listens). (The positive controls of the other two are
/// the network = true run above, which reached a listener and delivered a
/// datagram.)
fn allowlist(ctx: &Ctx<'_>, udp: &UdpSocket, udp_port: u16) -> Result<(bool, String), Outcome> {
    let listener = |what: &str| {
        let l = TcpListener::bind("127.0.0.1:0")
            .map_err(|e| unwitnessed(format!("cannot open the {what} loopback listener: {e}")))?;
        l.set_nonblocking(true)
            .map_err(|e| unwitnessed(e.to_string()))?;
        let port = l
            .local_addr()
            .map_err(|e| unwitnessed(e.to_string()))?
            .port();
        Ok::<_, Outcome>((l, port))
    };
    let (listed, listed_port) = listener("listed")?;
    let (other, other_port) = listener("other")?;
    let rule = format!("127.0.0.1:{listed_port}")
        .parse()
        .map_err(|e| unwitnessed(format!("egress rule: {e}")))?;
    let policy = SandboxPolicy {
        allow_net: vec![rule],
        ..policy(true)
    };
    let args = [listed_port, other_port, udp_port].map(|p| std::path::PathBuf::from(p.to_string()));
    let run = ctx.python(
        &resolve(policy)?,
        &format!("{PY_PRELUDE}{ALLOWLIST}"),
        &[&args[0], &args[1], &args[2]],
    )?;
    let values = run.started()?;
    let (listed_seen, other_seen, udp_seen) = (accepted(&listed), accepted(&other), datagrams(udp));
    if !succeeded(values.get("listed_connect")) || listed_seen == 0 {
        return Err(unwitnessed(format!(
            "positive control not seen: with allow_net = [127.0.0.1:{listed_port}] the listed \
             connect gave {} and its listener accepted {listed_seen} (the child {})",
            show(&values, &["listed_connect"]),
            run.describe()
        )));
    }
    let evidence = format!(
        "allow_net=[127.0.0.1:{listed_port}]: {}; accepted listed {listed_seen}, other \
         {other_seen}; datagrams {udp_seen}",
        show(&values, ALLOWLIST_KEYS)
    );
    // The broker answers an unlisted destination ECONNREFUSED, as a closed
    // port would: the other listener is open, so that is the sandbox's.
    let other_refused = matches!(
        values.get("other_connect").map(String::as_str),
        Some("err:ECONNREFUSED" | "err:EPERM" | "err:EACCES")
    );
    let pass = other_refused && other_seen == 0 && udp_seen == 0;
    Ok((pass, evidence))
}

const BOUNDARY_KEYS: &[&str] = &[
    "socketpair_null_sendto",
    "bind",
    "listen",
    "addressed_udp_sendto",
    "addressed_unix_sendmsg",
];

fn datagrams(socket: &UdpSocket) -> usize {
    let mut buf = [0u8; 64];
    let mut n = 0;
    while socket.recv_from(&mut buf).is_ok() {
        n += 1;
    }
    n
}

pub(crate) fn boundary(ctx: &Ctx<'_>) -> Result<Outcome, Outcome> {
    let udp = UdpSocket::bind("127.0.0.1:0")
        .map_err(|e| unwitnessed(format!("cannot open a loopback UDP socket: {e}")))?;
    udp.set_nonblocking(true)
        .map_err(|e| unwitnessed(format!("cannot make the UDP socket non-blocking: {e}")))?;
    let port = udp
        .local_addr()
        .map_err(|e| unwitnessed(e.to_string()))?
        .port();
    let port_arg = std::path::PathBuf::from(port.to_string());
    // A host pathname datagram socket (like /dev/log), outside every write path.
    let tree = Tree::new()?;
    let unix_path = tree.dir("sock")?.join("host.sock");
    let host_unix = std::os::unix::net::UnixDatagram::bind(&unix_path)
        .map_err(|e| unwitnessed(format!("cannot bind a unix datagram socket: {e}")))?;
    host_unix
        .set_nonblocking(true)
        .map_err(|e| unwitnessed(e.to_string()))?;
    let unix_datagrams = || {
        let mut buf = [0u8; 64];
        std::iter::from_fn(|| host_unix.recv(&mut buf).ok()).count()
    };
    let script = format!("{PY_PRELUDE}{BOUNDARY}");

    // Positive control: every attempt works with network allowed, and the
    // datagram arrives; except the addressed unix send, which host UNIX
    // socket confinement refuses with the network on too (no AF_UNIX
    // datagram socket exists in the sandbox either way).
    let open = ctx.python(&resolve(policy(true))?, &script, &[&port_arg, &unix_path])?;
    let values = open.started()?;
    let arrived_open = datagrams(&udp);
    let unix_open = unix_datagrams();
    let controls = BOUNDARY_KEYS
        .iter()
        .filter(|k| **k != "addressed_unix_sendmsg");
    let open_unix_refused = refused(values.get("addressed_unix_sendmsg")) && unix_open == 0;
    if !controls.clone().all(|k| succeeded(values.get(*k))) || arrived_open == 0 {
        return Err(unwitnessed(format!(
            "positive control not seen: with network = true {} and {arrived_open} datagram(s) \
             arrived (the child {})",
            show(&values, BOUNDARY_KEYS),
            open.describe()
        )));
    }

    let closed = ctx.python(&resolve(policy(false))?, &script, &[&port_arg, &unix_path])?;
    let values = closed.started()?;
    let arrived = datagrams(&udp) + unix_datagrams();
    let (listed_only, allowlist_evidence) = allowlist(ctx, &udp, port)?;
    let evidence = format!(
        "network=false: {}; datagrams arrived: {arrived} (network=true control: all ok but the \
         addressed unix send, refused there too; {arrived_open} udp and {unix_open} unix arrived); \
         {allowlist_evidence}",
        show(&values, BOUNDARY_KEYS)
    );
    let pass = values.get("socketpair_null_sendto").map(String::as_str) == Some("ok:pingpong")
        && succeeded(values.get("bind"))
        && refused(values.get("listen"))
        && refused(values.get("addressed_udp_sendto"))
        && refused(values.get("addressed_unix_sendmsg"))
        && open_unix_refused
        && arrived == 0
        && listed_only;
    Ok((
        if pass {
            LegResult::Passed
        } else {
            LegResult::Failed
        },
        evidence,
    ))
}

const WORKLOAD: &str = r#"
import asyncio, socket, threading
def pipe():
    # written from a thread while read here: a new pipe of a user whose
    # pipes account more than fs.pipe-user-pages-soft holds 8 KiB, not
    # 64 KiB (pipe(7)), and one write of it all would wait forever
    r, w = os.pipe()
    data = b"x" * 60000
    def put():
        left = memoryview(data)
        while left:
            left = left[os.write(w, left):]
    t = threading.Thread(target=put)
    t.start()
    got = b""
    while len(got) < len(data):
        got += os.read(r, 65536)
    t.join()
    return len(got)
attempt("pipe", pipe)
def capacity():
    # F_GETPIPE_SZ of a new pipe, for the evidence (8192: the user is over
    # its pipe pages' soft limit, a host state)
    import fcntl
    r, w = os.pipe()
    return fcntl.fcntl(w, 1032)
attempt("pipe_capacity", capacity)
def pair():
    a, b = socket.socketpair()
    data = os.urandom(1 << 20)
    t = threading.Thread(target=lambda: a.sendall(data))
    t.start()
    got = bytearray()
    while len(got) < len(data):
        got += b.recv(65536)
    t.join()
    return bytes(got) == data
attempt("socketpair_1mib", pair)
def loop():
    async def main():
        running = asyncio.get_running_loop()
        fut = running.create_future()
        threading.Thread(target=lambda: running.call_soon_threadsafe(fut.set_result, 42)).start()
        return await asyncio.wait_for(fut, 20)
    return asyncio.run(main())
attempt("asyncio_thread_wakeup", loop)
"#;

pub(crate) fn workload(ctx: &Ctx<'_>) -> Result<Outcome, Outcome> {
    let run = ctx.python(
        &resolve(policy(false))?,
        &format!("{PY_PRELUDE}{WORKLOAD}"),
        &[],
    )?;
    let values = run.started()?;
    let keys = [
        "pipe",
        "pipe_capacity",
        "socketpair_1mib",
        "asyncio_thread_wakeup",
    ];
    let evidence = format!(
        "network=false: {} (the child {})",
        show(&values, &keys),
        run.describe()
    );
    let pass = values.get("pipe").map(String::as_str) == Some("ok:60000")
        && values.get("socketpair_1mib").map(String::as_str) == Some("ok:True")
        && values.get("asyncio_thread_wakeup").map(String::as_str) == Some("ok:42")
        && run.exited_ok();
    Ok((
        if pass {
            LegResult::Passed
        } else {
            LegResult::Failed
        },
        evidence,
    ))
}
