//! The runner's resolver: DNS over TCP on loopback, and over UDP in the
//! run's datagram namespace, answering only the names the egress rules list.
//!
//! Under an allowlist the broker makes every TCP connect to port 53, of any
//! address, to this resolver instead; a datagram to port 53 of any address
//! reaches it because the run's IP datagram sockets are made in a network
//! namespace where it alone listens ([`crate::island`]). Where no such
//! namespace can be made, the run's environment asks glibc's resolver for
//! TCP (`RES_OPTIONS=use-vc`, resolv.conf(5)). A query for a
//! listed name is resolved here with the system resolver; the addresses the
//! rules admit for it (an exact rule: all; a wildcard: none in a special
//! range and none of this host's own, as the proxy) are answered and pinned
//! ([`sandbox_core::Pins`]), so the broker then admits connects to them by
//! IP, on the ports the name's rules list, while the answer lives. Any
//! other name is answered `NXDOMAIN` and recorded as refused; a name with
//! a label that is not a host name's (letters, digits, hyphens, underscores)
//! is answered `FORMERR` and recorded escaped (`\x1b`), since it is text the
//! command chose and the summary prints it.
//!
//! The DNS message format (RFC 1035, section 4; TCP framing with a two-byte
//! length, section 4.2.2; UDP answers at most 512 bytes, section 4.2.1,
//! else truncated with TC set so the client asks over TCP) is parsed by hand: only the header and one
//! question are read, and answers carry A and AAAA records. No crate in the
//! workspace's set does this small part without a full resolver.

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use sandbox_core::Pins;

/// How long an answer is pinned and what TTL it carries: the system
/// resolver does not say how long its answers live, so a short one.
pub const ANSWER_TTL: Duration = Duration::from_secs(60);

/// The most connections and UDP queries served at once; more connections
/// wait in the listen queue, more datagrams are dropped (clients ask again).
const MAX_CONNECTIONS: usize = 32;

/// How long a connection may sit idle between queries.
const IDLE: Duration = Duration::from_secs(10);

/// The most names recorded as refused (later ones are counted).
const MAX_REFUSALS: usize = 64;

const TYPE_A: u16 = 1;
const TYPE_AAAA: u16 = 28;
const CLASS_IN: u16 = 1;
const RCODE_FORMERR: u8 = 1;
const RCODE_SERVFAIL: u8 = 2;
const RCODE_NXDOMAIN: u8 = 3;
const RCODE_NOTIMP: u8 = 4;

/// How names are resolved: the system resolver, or (tests) a function.
pub type Lookup = Arc<dyn Fn(&str) -> io::Result<Vec<IpAddr>> + Send + Sync>;

/// A name the resolver refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedName {
    /// The name asked for (lowercase, without the trailing dot).
    pub name: String,
    /// Why.
    pub reason: &'static str,
}

#[derive(Default)]
struct Record {
    refused: Vec<RefusedName>,
    omitted: usize,
    /// The names refused since the window opened (one command of a shared
    /// launch; [`RefusalWindow::take_window`]), each once.
    window: Vec<RefusedName>,
    window_omitted: usize,
    /// How many of `window` [`RefusalWindow::live_window`] handed out.
    handed: usize,
    /// Which window is open (counts the closed ones).
    generation: u64,
}

std::thread_local! {
    /// The window the connection or datagram this thread answers came in
    /// (a refusal for a closed window's is not the current one's).
    static QUERY_WINDOW: std::cell::Cell<Option<u64>> = const { std::cell::Cell::new(None) };
}

/// The window open now.
fn window_now(shared: &Shared) -> u64 {
    shared
        .record
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .generation
}

struct Shared {
    pins: Pins,
    lookup: Option<Lookup>,
    stop: AtomicBool,
    active: AtomicUsize,
    record: Mutex<Record>,
    answered: AtomicUsize,
    /// The UDP sockets answered on, and their threads.
    datagrams: Mutex<Vec<(Arc<OwnedFd>, JoinHandle<()>)>>,
    /// Held while a UDP thread takes a datagram off its socket and counts
    /// it in `datagrams_active` (and while [`RefusalWindow::settle`] looks
    /// at the sockets): a datagram is either still queued or counted.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    receiving: Mutex<()>,
    /// The datagram queries being answered.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    datagrams_active: AtomicUsize,
    /// The processes served over TCP ([`DnsServer::serve_only`]); unset:
    /// any.
    peers: std::sync::OnceLock<crate::RunPeers>,
    /// TCP connections closed on accept: not the run's.
    foreign: AtomicUsize,
}

/// The running resolver; stopped when dropped.
pub struct DnsServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for DnsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DnsServer")
            .field("addr", &self.addr)
            .finish()
    }
}

impl DnsServer {
    /// Starts the resolver on a loopback port, answering by `pins`' rules
    /// and pinning its answers there. `lookup` replaces the system resolver
    /// (tests).
    pub fn start(pins: Pins, lookup: Option<Lookup>) -> io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0))?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            pins,
            lookup,
            stop: AtomicBool::new(false),
            active: AtomicUsize::new(0),
            record: Mutex::new(Record::default()),
            answered: AtomicUsize::new(0),
            datagrams: Mutex::new(Vec::new()),
            receiving: Mutex::new(()),
            datagrams_active: AtomicUsize::new(0),
            peers: std::sync::OnceLock::new(),
            foreign: AtomicUsize::new(0),
        });
        let accept = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("sandbox-dns".into())
                .spawn(move || accept_loop(&shared, &listener))?
        };
        Ok(Self {
            addr,
            shared,
            accept: Some(accept),
        })
    }

    #[cfg(target_os = "linux")]
    /// A handle that gives this resolver UDP sockets to answer on, while
    /// it runs.
    pub fn datagram_service(&self) -> DatagramService {
        DatagramService(Arc::clone(&self.shared))
    }

    /// Serves only the processes of one run over TCP ([`crate::RunPeers`],
    /// as [`crate::ProxyOptions::peers`]): another process's connection,
    /// or one that cannot be looked up, is closed on accept, unread and
    /// unrecorded ([`DnsServer::foreign_closed`] counts them). Connections
    /// accepted before the call are served. Later calls change nothing.
    /// (The datagram namespace's sockets are the run's own: only its
    /// processes reach them.)
    pub fn serve_only(&self, peers: crate::RunPeers) {
        let _ = self.shared.peers.set(peers);
    }

    /// How many TCP connections were closed on accept, not the run's
    /// ([`DnsServer::serve_only`]).
    pub fn foreign_closed(&self) -> usize {
        self.shared.foreign.load(Ordering::Relaxed)
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The names refused so far (at most 64), and how many more were.
    pub fn refused(&self) -> (Vec<RefusedName>, usize) {
        let r = self
            .shared
            .record
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        (r.refused.clone(), r.omitted)
    }

    /// A handle on the resolver's current window of refusals (one
    /// command of a shared launch), from any thread.
    pub fn window(&self) -> RefusalWindow {
        RefusalWindow(Arc::clone(&self.shared))
    }

    /// How many queries were answered with addresses.
    pub fn answered(&self) -> usize {
        self.shared.answered.load(Ordering::Relaxed)
    }

    /// Stops accepting; connections in progress end at their next read.
    pub fn shutdown(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        // Wakes the accept loop.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(100));
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
        let datagrams = std::mem::take(
            &mut *self
                .shared
                .datagrams
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for (sock, thread) in datagrams {
            // Wakes a blocked receive, which then returns 0 (also on an
            // unconnected UDP socket: inet_shutdown wakes its waiters).
            // SAFETY: shutdown on a socket we own.
            unsafe { libc::shutdown(sock.as_raw_fd(), libc::SHUT_RD) };
            let _ = thread.join();
        }
    }
}

impl Drop for DnsServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

#[cfg(target_os = "linux")]
/// Gives the resolver UDP sockets to answer on ([`DnsServer::datagram_service`]).
#[derive(Clone)]
pub struct DatagramService(Arc<Shared>);

#[cfg(target_os = "linux")]
impl std::fmt::Debug for DatagramService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DatagramService")
    }
}

#[cfg(target_os = "linux")]
impl DatagramService {
    /// Answers DNS over UDP on `sockets` too (bound, with packet info on,
    /// as [`crate::island::Island`] makes them), each answer sent from the
    /// address its query was sent to. Refused once the resolver stopped.
    pub fn serve(&self, sockets: Vec<OwnedFd>) -> io::Result<()> {
        let mut served = self
            .0
            .datagrams
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if self.0.stop.load(Ordering::Relaxed) {
            return Err(io::Error::other("the run's resolver has stopped"));
        }
        for sock in sockets {
            let sock = Arc::new(sock);
            let on = Arc::clone(&sock);
            let shared = Arc::clone(&self.0);
            let thread = std::thread::Builder::new()
                .name("sandbox-dns-udp".into())
                .spawn(move || serve_datagram_socket(&shared, &on))?;
            served.push((sock, thread));
        }
        Ok(())
    }
}

fn accept_loop(shared: &Arc<Shared>, listener: &TcpListener) {
    let mut gate: Option<crate::peer::Gate> = None;
    loop {
        let accepted = listener.accept();
        if shared.stop.load(Ordering::Relaxed) {
            return;
        }
        let Ok((conn, peer)) = accepted else { continue };
        if gate.is_none() {
            gate = shared.peers.get().cloned().map(crate::peer::Gate::new);
        }
        if let Some(gate) = &mut gate {
            if !listener
                .local_addr()
                .is_ok_and(|local| gate.admits(peer, local))
            {
                // Counted first: whoever sees it closed sees it counted.
                shared.foreign.fetch_add(1, Ordering::Relaxed);
                drop(conn);
                continue;
            }
        }
        if shared.active.fetch_add(1, Ordering::AcqRel) >= MAX_CONNECTIONS {
            shared.active.fetch_sub(1, Ordering::AcqRel);
            continue;
        }
        let shared = Arc::clone(shared);
        let window = window_now(&shared);
        let spawned = std::thread::Builder::new()
            .name("sandbox-dns-conn".into())
            .spawn(move || {
                QUERY_WINDOW.with(|w| w.set(Some(window)));
                serve(&shared, conn);
                shared.active.fetch_sub(1, Ordering::AcqRel);
            });
        if spawned.is_err() {
            // The closure (and its count) is gone with the failed spawn.
            continue;
        }
    }
}

/// Answers queries on one connection until it closes, idles or the
/// resolver stops.
fn serve(shared: &Shared, mut conn: TcpStream) {
    let _ = conn.set_read_timeout(Some(IDLE));
    let _ = conn.set_write_timeout(Some(IDLE));
    loop {
        if shared.stop.load(Ordering::Relaxed) {
            return;
        }
        let mut len = [0u8; 2];
        if conn.read_exact(&mut len).is_err() {
            return;
        }
        let mut query = vec![0u8; usize::from(u16::from_be_bytes(len))];
        if conn.read_exact(&mut query).is_err() {
            return;
        }
        let Some(answer) = answer(shared, &query) else {
            return;
        };
        let Ok(n) = u16::try_from(answer.len()) else {
            return;
        };
        let mut framed = n.to_be_bytes().to_vec();
        framed.extend_from_slice(&answer);
        if conn.write_all(&framed).is_err() {
            return;
        }
    }
}

#[cfg(target_os = "linux")]
/// The largest answer sent over UDP (RFC 1035, 4.2.1).
const UDP_ANSWER_MAX: usize = 512;

#[cfg(target_os = "linux")]
/// Answers the datagrams on `sock` until the resolver stops.
fn serve_datagram_socket(shared: &Arc<Shared>, sock: &Arc<OwnedFd>) {
    let mut buf = [0u8; 4096];
    loop {
        // Waits for a datagram (or the shutdown, which makes the socket
        // readable), then takes it off the queue and counts it under
        // `receiving`, so that a window is never closed between the two
        // ([`RefusalWindow::settle`]).
        datagram::wait_readable(sock);
        if shared.stop.load(Ordering::Relaxed) {
            return;
        }
        let receiving = shared
            .receiving
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let got = datagram::recv(sock, &mut buf, libc::MSG_DONTWAIT);
        if shared.stop.load(Ordering::Relaxed) {
            return;
        }
        let Ok((n, from, to)) = got else { continue };
        // Each query on a thread of its own (as each TCP connection), so a
        // name slow to resolve holds up no other; past the bound a query is
        // dropped, and the client asks again.
        if shared.active.fetch_add(1, Ordering::AcqRel) >= MAX_CONNECTIONS {
            shared.active.fetch_sub(1, Ordering::AcqRel);
            continue;
        }
        shared.datagrams_active.fetch_add(1, Ordering::AcqRel);
        let window = window_now(shared);
        drop(receiving);
        let query = buf[..n].to_vec();
        let (shared, sock) = (Arc::clone(shared), Arc::clone(sock));
        let counts = Arc::clone(&shared);
        let spawned = std::thread::Builder::new()
            .name("sandbox-dns-query".into())
            .spawn(move || {
                QUERY_WINDOW.with(|w| w.set(Some(window)));
                if let Some(answer) = answer(&shared, &query) {
                    let _ = datagram::send(&sock, &fit_datagram(answer), from, to);
                }
                shared.datagrams_active.fetch_sub(1, Ordering::AcqRel);
                shared.active.fetch_sub(1, Ordering::AcqRel);
            });
        if spawned.is_err() {
            // The query was never answered: its counts are given back.
            counts.datagrams_active.fetch_sub(1, Ordering::AcqRel);
            counts.active.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

#[cfg(target_os = "linux")]
/// `answer` as sent over UDP: whole up to 512 bytes; else cut to its header
/// and question with TC set (the client asks again over TCP); a question
/// too long for that gets its header alone, `FORMERR`.
fn fit_datagram(answer: Vec<u8>) -> Vec<u8> {
    if answer.len() <= UDP_ANSWER_MAX {
        return answer;
    }
    let cut = truncated(&answer);
    if cut.len() <= UDP_ANSWER_MAX {
        return cut;
    }
    let mut head = answer[..12].to_vec();
    head[3] = (head[3] & 0xf0) | RCODE_FORMERR;
    head[4..12].fill(0);
    head
}

#[cfg(target_os = "linux")]
/// `answer` cut to its header and question, with TC set and no records.
fn truncated(answer: &[u8]) -> Vec<u8> {
    let end = question(answer).map_or(12, |q| q.end);
    let mut out = answer[..end].to_vec();
    out[2] |= 0x02;
    out[6..12].fill(0);
    out
}

/// One question: its name (lowercase, no trailing dot; bytes other than
/// printable ASCII escaped, `\x1b`), whether every label is a host name's,
/// type, class, and where it ends in the message.
struct Question {
    name: String,
    host_name: bool,
    qtype: u16,
    qclass: u16,
    end: usize,
}

fn question(msg: &[u8]) -> Option<Question> {
    let mut i = 12;
    let mut labels: Vec<String> = Vec::new();
    let mut host_name = true;
    loop {
        let len = usize::from(*msg.get(i)?);
        i += 1;
        if len == 0 {
            break;
        }
        // Compression pointers (0xC0) and the reserved label types do not
        // appear in a question a client writes.
        if len > 63 {
            return None;
        }
        let label = msg.get(i..i + len)?;
        host_name &= label
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_'));
        labels.push(label.to_ascii_lowercase().escape_ascii().to_string());
        i += len;
    }
    let qtype = u16::from_be_bytes([*msg.get(i)?, *msg.get(i + 1)?]);
    let qclass = u16::from_be_bytes([*msg.get(i + 2)?, *msg.get(i + 3)?]);
    Some(Question {
        name: labels.join("."),
        host_name,
        qtype,
        qclass,
        end: i + 4,
    })
}

/// The response to `query`, or `None` for something that is no query.
fn answer(shared: &Shared, query: &[u8]) -> Option<Vec<u8>> {
    if query.len() < 12 {
        return None;
    }
    let flags = u16::from_be_bytes([query[2], query[3]]);
    let opcode = (flags >> 11) & 0xf;
    if flags & 0x8000 != 0 {
        return None; // a response, not a query
    }
    let qdcount = u16::from_be_bytes([query[4], query[5]]);
    let reply = |rcode: u8, q: Option<&Question>, records: &[IpAddr]| {
        let mut out = Vec::with_capacity(512);
        out.extend_from_slice(&query[..2]);
        // QR, the opcode, RD as asked; RA; the rcode.
        let flags = 0x8000 | (flags & 0x7900) | 0x0080 | u16::from(rcode);
        out.extend_from_slice(&flags.to_be_bytes());
        out.extend_from_slice(&u16::from(q.is_some()).to_be_bytes());
        out.extend_from_slice(&(records.len() as u16).to_be_bytes());
        out.extend_from_slice(&[0, 0, 0, 0]);
        if let Some(q) = q {
            out.extend_from_slice(&query[12..q.end]);
            for ip in records {
                // The name: a pointer to the question's (offset 12).
                out.extend_from_slice(&[0xc0, 12]);
                let (rtype, data) = match ip {
                    IpAddr::V4(v4) => (TYPE_A, v4.octets().to_vec()),
                    IpAddr::V6(v6) => (TYPE_AAAA, v6.octets().to_vec()),
                };
                out.extend_from_slice(&rtype.to_be_bytes());
                out.extend_from_slice(&CLASS_IN.to_be_bytes());
                out.extend_from_slice(&(ANSWER_TTL.as_secs() as u32).to_be_bytes());
                out.extend_from_slice(&(data.len() as u16).to_be_bytes());
                out.extend_from_slice(&data);
            }
        }
        out
    };
    if opcode != 0 {
        return Some(reply(RCODE_NOTIMP, None, &[]));
    }
    if qdcount != 1 {
        return Some(reply(RCODE_FORMERR, None, &[]));
    }
    let Some(q) = question(query) else {
        return Some(reply(RCODE_FORMERR, None, &[]));
    };
    if !q.host_name {
        // Recorded (escaped) for the summary: such a name is the command's
        // text, and no rule can list it.
        refuse(
            shared,
            &q.name,
            "not a host name (labels of letters, digits, hyphens and underscores)",
        );
        return Some(reply(RCODE_FORMERR, None, &[]));
    }
    if shared.pins.intercepted(&q.name) {
        refuse(
            shared,
            &q.name,
            "a request rule intercepts this name: it is reached only through the proxy (HTTPS_PROXY), never resolved for the command",
        );
        return Some(reply(RCODE_NXDOMAIN, Some(&q), &[]));
    }
    if shared.pins.lists(&q.name).is_none() {
        refuse(shared, &q.name, "no egress rule lists this name");
        return Some(reply(RCODE_NXDOMAIN, Some(&q), &[]));
    }
    if q.qclass != CLASS_IN || !matches!(q.qtype, TYPE_A | TYPE_AAAA) {
        // A listed name, another record type: no data (NOERROR, no answers).
        return Some(reply(0, Some(&q), &[]));
    }
    // Where the intercepted names are now (looked up at most once a
    // period): no pin admits a direct connect to such an address at an
    // intercepted port, whichever name it is answered for.
    if shared.pins.shadows_due(ANSWER_TTL) {
        for name in shared.pins.intercepted_names() {
            for ip in look_up(shared, &name).unwrap_or_default() {
                shared.pins.shadow(&name, ip, 2 * ANSWER_TTL);
            }
        }
    }
    let resolved = look_up(shared, &q.name);
    let Ok(resolved) = resolved else {
        return Some(reply(RCODE_SERVFAIL, Some(&q), &[]));
    };
    let mut records: Vec<IpAddr> = Vec::new();
    for ip in resolved {
        let family = if ip.is_ipv4() { TYPE_A } else { TYPE_AAAA };
        if family == q.qtype && !records.contains(&ip) && shared.pins.pin(&q.name, ip, ANSWER_TTL) {
            records.push(ip);
        }
    }
    if records.is_empty() && shared.pins.lists(&q.name) == Some(sandbox_core::NameMatch::Wildcard) {
        refuse(
            shared,
            &q.name,
            "only a wildcard rule lists this name, and none of its addresses may be reached by one (special ranges, this host's own)",
        );
    } else if !records.is_empty() {
        shared.answered.fetch_add(1, Ordering::Relaxed);
    }
    Some(reply(0, Some(&q), &records))
}

/// The addresses `name` resolves to: by the resolver's own lookup when it
/// has one (tests), else the system's.
fn look_up(shared: &Shared, name: &str) -> io::Result<Vec<IpAddr>> {
    match &shared.lookup {
        Some(lookup) => lookup(name),
        None => (name, 0)
            .to_socket_addrs()
            .map(|a| a.map(|a| a.ip()).collect()),
    }
}

#[cfg(target_os = "linux")]
/// UDP with packet info (ip(7) `IP_PKTINFO`, ipv6(7) `IPV6_RECVPKTINFO`):
/// hand-written over `libc`, which is this workspace's one syscall layer.
mod datagram {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    /// Control-message room for one packet-info message.
    #[repr(C, align(8))]
    struct Cmsg([u8; 64]);

    /// One datagram into `buf`: its length, sender and destination address.
    /// Waits until `sock` has a datagram queued (or is shut down, or the
    /// wait is interrupted).
    pub(super) fn wait_readable(sock: &OwnedFd) {
        let mut pfd = libc::pollfd {
            fd: sock.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one live pollfd.
        unsafe { libc::poll(&mut pfd, 1, -1) };
    }

    /// Whether `sock` has a datagram queued (also an empty one), without
    /// waiting.
    pub(super) fn queued(sock: &OwnedFd) -> bool {
        let mut pfd = libc::pollfd {
            fd: sock.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one live pollfd.
        let n = unsafe { libc::poll(&mut pfd, 1, 0) };
        n > 0 && pfd.revents & libc::POLLIN != 0
    }

    /// One datagram into `buf` (`flags` as recvmsg takes them): its length,
    /// sender and destination address.
    pub(super) fn recv(
        sock: &OwnedFd,
        buf: &mut [u8],
        flags: libc::c_int,
    ) -> io::Result<(usize, SocketAddr, IpAddr)> {
        // SAFETY: plain data; all-zero is valid.
        let mut from: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        let mut control = Cmsg([0; 64]);
        // SAFETY: plain data; all-zero is valid.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_name = (&mut from as *mut libc::sockaddr_storage).cast();
        msg.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as u32;
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.0.as_mut_ptr().cast();
        msg.msg_controllen = control.0.len() as _;
        // SAFETY: msg points at live buffers for the call.
        let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, flags) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut to = None;
        // SAFETY: walks the control messages the kernel wrote; each packet
        // info payload is read unaligned at its own size.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                let data = libc::CMSG_DATA(c);
                match ((*c).cmsg_level, (*c).cmsg_type) {
                    (libc::IPPROTO_IP, libc::IP_PKTINFO) => {
                        let info = std::ptr::read_unaligned(data.cast::<libc::in_pktinfo>());
                        to = Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                            info.ipi_addr.s_addr,
                        ))));
                    }
                    (libc::IPPROTO_IPV6, libc::IPV6_PKTINFO) => {
                        let info = std::ptr::read_unaligned(data.cast::<libc::in6_pktinfo>());
                        to = Some(IpAddr::V6(Ipv6Addr::from(info.ipi6_addr.s6_addr)));
                    }
                    _ => {}
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        let from = match i32::from(from.ss_family) {
            libc::AF_INET => {
                // SAFETY: the kernel wrote a sockaddr_in.
                let a = unsafe {
                    *(&from as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>()
                };
                SocketAddr::from((
                    Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
                    u16::from_be(a.sin_port),
                ))
            }
            libc::AF_INET6 => {
                // SAFETY: the kernel wrote a sockaddr_in6.
                let a = unsafe {
                    *(&from as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>()
                };
                SocketAddr::from((
                    Ipv6Addr::from(a.sin6_addr.s6_addr),
                    u16::from_be(a.sin6_port),
                ))
            }
            _ => return Err(io::Error::from_raw_os_error(libc::EAFNOSUPPORT)),
        };
        let to = to.ok_or_else(|| io::Error::other("no packet info"))?;
        Ok((n as usize, from, to))
    }

    /// Sends `data` to `dest` from the local address `src`.
    pub(super) fn send(
        sock: &OwnedFd,
        data: &[u8],
        dest: SocketAddr,
        src: IpAddr,
    ) -> io::Result<()> {
        // SAFETY: plain data; all-zero is valid.
        let mut name: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut control = Cmsg([0; 64]);
        let (namelen, level, kind, info_len) = match (dest, src) {
            (SocketAddr::V4(d), IpAddr::V4(s)) => {
                let a = libc::sockaddr_in {
                    sin_family: libc::AF_INET as libc::sa_family_t,
                    sin_port: d.port().to_be(),
                    sin_addr: libc::in_addr {
                        s_addr: u32::from(*d.ip()).to_be(),
                    },
                    sin_zero: [0; 8],
                };
                let info = libc::in_pktinfo {
                    ipi_ifindex: 0,
                    ipi_spec_dst: libc::in_addr {
                        s_addr: u32::from(s).to_be(),
                    },
                    ipi_addr: libc::in_addr { s_addr: 0 },
                };
                place(&mut name, &mut control, a, info);
                (
                    std::mem::size_of_val(&a),
                    libc::IPPROTO_IP,
                    libc::IP_PKTINFO,
                    std::mem::size_of_val(&info),
                )
            }
            (SocketAddr::V6(d), IpAddr::V6(s)) => {
                // SAFETY: plain data; all-zero is valid.
                let mut a: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
                a.sin6_family = libc::AF_INET6 as libc::sa_family_t;
                a.sin6_port = d.port().to_be();
                a.sin6_addr.s6_addr = d.ip().octets();
                a.sin6_scope_id = d.scope_id();
                let info = libc::in6_pktinfo {
                    ipi6_addr: libc::in6_addr {
                        s6_addr: s.octets(),
                    },
                    ipi6_ifindex: 0,
                };
                place(&mut name, &mut control, a, info);
                (
                    std::mem::size_of_val(&a),
                    libc::IPPROTO_IPV6,
                    libc::IPV6_PKTINFO,
                    std::mem::size_of_val(&info),
                )
            }
            _ => return Err(io::Error::from_raw_os_error(libc::EAFNOSUPPORT)),
        };
        let mut iov = libc::iovec {
            iov_base: data.as_ptr() as *mut libc::c_void,
            iov_len: data.len(),
        };
        // SAFETY: plain data; all-zero is valid.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_name = (&mut name as *mut libc::sockaddr_storage).cast();
        msg.msg_namelen = namelen as u32;
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.0.as_mut_ptr().cast();
        // SAFETY: CMSG_SPACE/CMSG_LEN are arithmetic; the header is written
        // at the start of the 64-byte buffer, which holds it and its payload.
        unsafe {
            msg.msg_controllen = libc::CMSG_SPACE(info_len as u32) as _;
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = level;
            (*c).cmsg_type = kind;
            (*c).cmsg_len = libc::CMSG_LEN(info_len as u32) as _;
        }
        // SAFETY: msg points at live buffers for the call.
        if unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Writes the address `a` into `name` and the packet info `info` where
    /// the first control message's payload goes.
    fn place<A: Copy, I: Copy>(
        name: &mut libc::sockaddr_storage,
        control: &mut Cmsg,
        a: A,
        info: I,
    ) {
        assert!(
            std::mem::size_of::<A>() <= std::mem::size_of::<libc::sockaddr_storage>()
                && cmsg_header() + std::mem::size_of::<I>() <= control.0.len()
        );
        // SAFETY: both fit their buffers (checked above); unaligned writes.
        unsafe {
            std::ptr::write_unaligned((name as *mut libc::sockaddr_storage).cast(), a);
            std::ptr::write_unaligned(control.0.as_mut_ptr().add(cmsg_header()).cast(), info);
        }
    }

    /// Where a control message's payload starts.
    fn cmsg_header() -> usize {
        // SAFETY: arithmetic.
        unsafe { libc::CMSG_LEN(0) as usize }
    }
}

/// The resolver's window of refusals ([`DnsServer::window`]).
#[derive(Clone)]
pub struct RefusalWindow(Arc<Shared>);

impl std::fmt::Debug for RefusalWindow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RefusalWindow").finish_non_exhaustive()
    }
}

impl RefusalWindow {
    /// Waits, at most `wait`, until no datagram is queued on the resolver's
    /// UDP sockets and none is being answered: the datagrams the closing
    /// command sent are then all refused (or answered) in its window.
    /// Those still queued after `wait` are taken off unanswered and counted
    /// as omitted refusals of the closing window: never the next one's.
    /// Call it only once the command's processes are gone.
    pub(crate) fn settle(&self, wait: Duration) {
        #[cfg(target_os = "linux")]
        {
            let deadline = std::time::Instant::now() + wait;
            let shared = &self.0;
            let sockets: Vec<Arc<OwnedFd>> = shared
                .datagrams
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .iter()
                .map(|(sock, _)| Arc::clone(sock))
                .collect();
            if sockets.is_empty() {
                return;
            }
            loop {
                {
                    let _receiving = shared
                        .receiving
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner);
                    let queued = sockets.iter().any(|s| datagram::queued(s));
                    if !queued && shared.datagrams_active.load(Ordering::Acquire) == 0 {
                        return;
                    }
                    if shared.stop.load(Ordering::Relaxed) {
                        return;
                    }
                    if std::time::Instant::now() >= deadline {
                        let mut buf = [0u8; 512];
                        let mut left = 0usize;
                        for sock in &sockets {
                            // Bounded: the command's processes are gone,
                            // so nothing refills the queue.
                            for _ in 0..65_536 {
                                // SAFETY: recv into a live buffer of its length.
                                let n = unsafe {
                                    libc::recv(
                                        sock.as_raw_fd(),
                                        buf.as_mut_ptr().cast(),
                                        buf.len(),
                                        libc::MSG_DONTWAIT,
                                    )
                                };
                                if n < 0 {
                                    break;
                                }
                                left += 1;
                            }
                        }
                        let mut r = shared.record.lock().unwrap_or_else(PoisonError::into_inner);
                        r.window_omitted += left;
                        return;
                    }
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        #[cfg(not(target_os = "linux"))]
        let _ = wait;
    }

    /// Closes the current window of refusals and opens the next: the names
    /// refused in it (at most 64, each once), and how many more were.
    pub fn take_window(&self) -> (Vec<RefusedName>, usize) {
        let mut r = self.0.record.lock().unwrap_or_else(PoisonError::into_inner);
        r.handed = 0;
        r.generation += 1;
        let omitted = std::mem::take(&mut r.window_omitted);
        (std::mem::take(&mut r.window), omitted)
    }

    /// The current window's refused names since the last call, and how
    /// many names it refused so far.
    pub fn live_window(&self) -> (Vec<RefusedName>, usize) {
        let mut r = self.0.record.lock().unwrap_or_else(PoisonError::into_inner);
        let new = r.window[r.handed..].to_vec();
        r.handed = r.window.len();
        (new, r.window.len() + r.window_omitted)
    }
}

fn refuse(shared: &Shared, name: &str, reason: &'static str) {
    let mut r = shared.record.lock().unwrap_or_else(PoisonError::into_inner);
    let current = QUERY_WINDOW
        .with(std::cell::Cell::get)
        .map_or(true, |w| w == r.generation);
    if current && !r.window.iter().any(|n| n.name == name) {
        if r.window.len() < MAX_REFUSALS {
            r.window.push(RefusedName {
                name: name.to_owned(),
                reason,
            });
        } else {
            r.window_omitted += 1;
        }
    }
    if r.refused.iter().any(|n| n.name == name) {
        return;
    }
    if r.refused.len() < MAX_REFUSALS {
        r.refused.push(RefusedName {
            name: name.to_owned(),
            reason,
        });
    } else {
        r.omitted += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandbox_core::{EgressRules, HostAddrs};

    fn query(name: &str, qtype: u16) -> Vec<u8> {
        let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        for label in name.split('.') {
            q.push(label.len() as u8);
            q.extend_from_slice(label.as_bytes());
        }
        q.push(0);
        q.extend_from_slice(&qtype.to_be_bytes());
        q.extend_from_slice(&CLASS_IN.to_be_bytes());
        q
    }

    /// Sends `q` framed on `c`; the reply.
    fn exchange(c: &mut TcpStream, q: &[u8]) -> Vec<u8> {
        let mut framed = (q.len() as u16).to_be_bytes().to_vec();
        framed.extend_from_slice(q);
        c.write_all(&framed).unwrap();
        let mut len = [0u8; 2];
        c.read_exact(&mut len).unwrap();
        let mut r = vec![0u8; usize::from(u16::from_be_bytes(len))];
        c.read_exact(&mut r).unwrap();
        r
    }

    fn ask(server: &DnsServer, name: &str, qtype: u16) -> (u8, Vec<IpAddr>) {
        let mut c = TcpStream::connect(server.addr()).unwrap();
        let q = query(name, qtype);
        let r = exchange(&mut c, &q);
        assert_eq!(&r[..2], &[0x12, 0x34]);
        let rcode = r[3] & 0xf;
        let an = u16::from_be_bytes([r[6], r[7]]);
        let mut i = q.len();
        let mut ips = Vec::new();
        for _ in 0..an {
            let rtype = u16::from_be_bytes([r[i + 2], r[i + 3]]);
            let rdlen = usize::from(u16::from_be_bytes([r[i + 10], r[i + 11]]));
            let data = &r[i + 12..i + 12 + rdlen];
            ips.push(if rtype == TYPE_A {
                IpAddr::from(<[u8; 4]>::try_from(data).unwrap())
            } else {
                IpAddr::from(<[u8; 16]>::try_from(data).unwrap())
            });
            i += 12 + rdlen;
        }
        (rcode, ips)
    }

    fn server(rules: &[&str]) -> (DnsServer, Pins) {
        let rules = EgressRules::new(rules.iter().map(|r| r.parse().unwrap()).collect());
        let pins = Pins::new(rules, HostAddrs::new([]));
        let lookup: Lookup = Arc::new(|name: &str| {
            Ok(match name {
                "svc.example.com" => vec!["127.0.0.1".parse().unwrap(), "::1".parse().unwrap()],
                "a.example.org" => vec!["127.0.0.2".parse().unwrap()],
                "b.example.org" => vec!["93.184.215.14".parse().unwrap()],
                "slow.example.com" => {
                    std::thread::sleep(Duration::from_secs(3));
                    vec!["198.51.100.1".parse().unwrap()]
                }
                "many.example.com" => (1..=40).map(|i| IpAddr::from([198, 51, 100, i])).collect(),
                _ => vec![],
            })
        });
        (DnsServer::start(pins.clone(), Some(lookup)).unwrap(), pins)
    }

    /// Serving one run's peers only: a client that is not the run's (a
    /// run of another uid) is closed unanswered, unrecorded and counted;
    /// twin: the run's own (this process's uid) is answered and its refusal
    /// recorded.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_client_outside_the_run_is_closed_unanswered() {
        // SAFETY: geteuid has no preconditions.
        let uid = unsafe { libc::geteuid() };
        let (theirs, _) = server(&["svc.example.com"]);
        let peers = crate::RunPeers::new();
        peers.set(uid ^ 1, None);
        theirs.serve_only(peers);
        let mut c = TcpStream::connect(theirs.addr()).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let q = query("unlisted.example.net", TYPE_A);
        let mut framed = (q.len() as u16).to_be_bytes().to_vec();
        framed.extend_from_slice(&q);
        let _ = c.write_all(&framed);
        let mut got = Vec::new();
        let _ = c.read_to_end(&mut got);
        assert!(got.is_empty(), "closed unanswered");
        assert_eq!(theirs.foreign_closed(), 1);
        assert!(theirs.refused().0.is_empty(), "not recorded");
        let (mine, _) = server(&["svc.example.com"]);
        let peers = crate::RunPeers::new();
        peers.set(uid, None);
        mine.serve_only(peers);
        assert_eq!(ask(&mine, "unlisted.example.net", TYPE_A).0, RCODE_NXDOMAIN);
        assert_eq!(ask(&mine, "svc.example.com", TYPE_A).0, 0);
        assert_eq!(mine.foreign_closed(), 0);
        assert_eq!(mine.refused().0.len(), 1);
    }

    #[test]
    fn an_intercepted_name_is_nxdomain_and_its_address_admits_no_direct_connect_at_its_port() {
        let rules = EgressRules::new(vec![
            "*.example.com".parse().unwrap(),
            "svc.example.com".parse().unwrap(),
        ]);
        let pins =
            Pins::new(rules, HostAddrs::new([])).except_intercepted([("pkgs.example.com", 443)]);
        let lookup: Lookup = Arc::new(|name: &str| {
            Ok(match name {
                // Co-hosted: the intercepted host and a listed one.
                "pkgs.example.com" | "shared.example.com" => vec!["93.184.215.14".parse().unwrap()],
                "svc.example.com" => vec!["93.184.215.15".parse().unwrap()],
                _ => vec![],
            })
        });
        let s = DnsServer::start(pins.clone(), Some(lookup)).unwrap();
        assert_eq!(
            ask(&s, "pkgs.example.com", TYPE_A),
            (RCODE_NXDOMAIN, vec![])
        );
        assert_eq!(
            ask(&s, "PKGS.example.com.", TYPE_A),
            (RCODE_NXDOMAIN, vec![])
        );
        let shared: IpAddr = "93.184.215.14".parse().unwrap();
        // The co-hosted name is answered, and its pin admits it at other
        // ports, never at the intercepted one.
        assert_eq!(ask(&s, "shared.example.com", TYPE_A), (0, vec![shared]));
        assert_eq!(
            pins.admits(SocketAddr::new(shared, 22)).as_deref(),
            Some("shared.example.com")
        );
        assert!(pins.admits(SocketAddr::new(shared, 443)).is_none());
        // Twin: a listed name at an address of its own.
        assert_eq!(
            ask(&s, "svc.example.com", TYPE_A),
            (0, vec!["93.184.215.15".parse().unwrap()])
        );
        assert!(pins.admits("93.184.215.15:443".parse().unwrap()).is_some());
        let (refused, _) = s.refused();
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert!(refused[0]
            .reason
            .starts_with("a request rule intercepts this name"));
    }

    #[test]
    fn listed_names_are_answered_and_pinned_others_are_nxdomain() {
        let (s, pins) = server(&["svc.example.com:22", "*.example.org:443"]);
        assert_eq!(
            ask(&s, "svc.example.com", TYPE_A),
            (0, vec!["127.0.0.1".parse().unwrap()])
        );
        assert_eq!(
            ask(&s, "SVC.example.com", TYPE_AAAA),
            (0, vec!["::1".parse().unwrap()])
        );
        assert!(pins.admits("127.0.0.1:22".parse().unwrap()).is_some());
        assert!(pins.admits("127.0.0.1:80".parse().unwrap()).is_none());
        // Unlisted: NXDOMAIN, recorded.
        assert_eq!(
            ask(&s, "other.example.net", TYPE_A),
            (RCODE_NXDOMAIN, vec![])
        );
        // A wildcard's loopback answer is withheld; a public one is given.
        assert_eq!(ask(&s, "a.example.org", TYPE_A), (0, vec![]));
        assert!(pins.admits("127.0.0.2:443".parse().unwrap()).is_none());
        assert_eq!(ask(&s, "b.example.org", TYPE_A).1.len(), 1);
        // Another type for a listed name: no data.
        assert_eq!(ask(&s, "svc.example.com", 16), (0, vec![]));
        let (refused, _) = s.refused();
        let names: Vec<&str> = refused.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["other.example.net", "a.example.org"]);
    }

    /// Asks `name` (type A) on the open connection `c`; the answer's rcode.
    fn ask_on(c: &mut TcpStream, name: &str) -> u8 {
        exchange(c, &query(name, TYPE_A))[3] & 0xf
    }

    /// Each window has the names refused on the connections accepted in
    /// it, each once, handed out live once; a connection of a closed window
    /// that asks later adds to the run's record only (twin: a new
    /// connection's refusal is the new window's).
    #[test]
    fn a_closed_windows_connection_refuses_into_the_record_only() {
        let (s, _pins) = server(&["svc.example.com:22"]);
        let window = s.window();
        let mut old = TcpStream::connect(s.addr()).unwrap();
        assert_eq!(ask_on(&mut old, "one.example.net"), RCODE_NXDOMAIN);
        assert_eq!(ask_on(&mut old, "one.example.net"), RCODE_NXDOMAIN);
        let (live, count) = window.live_window();
        assert_eq!((live.len(), count), (1, 1), "once: {live:?}");
        assert!(window.live_window().0.is_empty(), "handed out once");
        let (closed, omitted) = window.take_window();
        assert_eq!((closed.len(), omitted), (1, 0));
        assert_eq!(closed[0].name, "one.example.net");
        assert_eq!(ask_on(&mut old, "late.example.net"), RCODE_NXDOMAIN);
        assert_eq!(ask(&s, "two.example.net", TYPE_A).0, RCODE_NXDOMAIN);
        let (now, _) = window.take_window();
        let names: Vec<&str> = now.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["two.example.net"]);
        let (all, _) = s.refused();
        let names: Vec<&str> = all.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(
            names,
            ["one.example.net", "late.example.net", "two.example.net"]
        );
    }

    /// The datagrams a command leaves queued when its window closes are
    /// that window's: settled (answered, or past the bound taken off and
    /// counted as omitted), never the next window's. Served: 200 refused
    /// names sent at once, then the window taken: they are all in it (kept
    /// or omitted, those the resolver dropped past its bound aside) and the
    /// next window is empty. Unserved (a socket no thread answers, filled):
    /// past the bound all 50 are the closing window's omitted ones. Twin: a
    /// name sent after the take is the next window's.
    #[cfg(target_os = "linux")]
    #[test]
    fn queued_datagrams_are_the_closing_windows_never_the_next() {
        use sandbox_core::DatagramSockets;
        use std::net::UdpSocket;
        let (s, _pins) = server(&["svc.example.com:22"]);
        let window = s.window();
        let service = s.datagram_service();
        let island =
            crate::island::Island::new(Box::new(move |socks| service.serve(socks))).unwrap();
        let client = UdpSocket::from(island.socket(libc::AF_INET, libc::SOCK_DGRAM, 0).unwrap());
        for i in 0..200 {
            client
                .send_to(&query(&format!("q{i}.one.test"), TYPE_A), "127.0.0.53:53")
                .unwrap();
        }
        window.settle(Duration::from_secs(10));
        let (kept, omitted) = window.take_window();
        // (Some were dropped unanswered past the resolver's bound of
        // queries at once: those refuse nothing.)
        assert!(!kept.is_empty() && kept.len() <= MAX_REFUSALS, "{omitted}");
        assert!(
            kept.iter().all(|r| r.name.ends_with(".one.test")),
            "{kept:?}"
        );
        let (next, next_omitted) = window.take_window();
        assert_eq!((next.len(), next_omitted), (0, 0), "{next:?}");
        // Twin: a name asked now is the open window's.
        client
            .send_to(&query("two.example.net", TYPE_A), "127.0.0.53:53")
            .unwrap();
        let mut buf = [0u8; 512];
        client
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        while client.recv(&mut buf).is_ok() && buf[3] & 0xf == RCODE_NXDOMAIN {
            let (now, _) = window.live_window();
            if now.iter().any(|r| r.name == "two.example.net") {
                break;
            }
        }
        window.settle(Duration::from_secs(10));
        let (two, _) = window.take_window();
        assert!(two.iter().any(|r| r.name == "two.example.net"), "{two:?}");
        assert!(
            two.iter().all(|r| !r.name.ends_with(".one.test")),
            "{two:?}"
        );

        // A socket nothing answers on: the bound passes with all queued.
        let quiet = UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = quiet.local_addr().unwrap();
        let idle = std::thread::spawn(|| ());
        s.shared
            .datagrams
            .lock()
            .unwrap()
            .push((Arc::new(OwnedFd::from(quiet)), idle));
        let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
        for i in 0..50 {
            sender
                .send_to(&query(&format!("q{i}.late.test"), TYPE_A), to)
                .unwrap();
        }
        window.settle(Duration::from_millis(50));
        let (kept, omitted) = window.take_window();
        assert_eq!((kept.len(), omitted), (0, 50), "{kept:?}");
        window.settle(Duration::ZERO);
        assert_eq!(window.take_window(), (Vec::new(), 0), "the next window");
    }

    /// A question whose labels are not a host name's is answered FORMERR
    /// and recorded escaped. Twin: a host name with `_` and `-` is asked.
    #[test]
    fn a_name_that_is_no_host_name_is_malformed_and_recorded_escaped() {
        let (s, _pins) = server(&["example.com:443"]);
        for name in [
            "x\x1b]0;owned\x07",
            "a\nsandbox: all clear",
            "caf\u{e9}",
            "a b",
        ] {
            assert_eq!(ask(&s, name, TYPE_A).0, RCODE_FORMERR, "{name:?}");
        }
        assert_eq!(ask(&s, "ok_name-1.example.com", TYPE_A).0, RCODE_NXDOMAIN);
        let (refused, _) = s.refused();
        let names: Vec<&str> = refused.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "x\\x1b]0;owned\\x07",
                "a\\nsandbox: all clear",
                "caf\\xc3\\xa9",
                "a b",
                "ok_name-1.example.com"
            ]
        );
        assert!(refused[0].reason.starts_with("not a host name"));
    }

    /// Over UDP in the run's datagram namespace: a query sent to any
    /// address's port 53 is answered from that address; an answer over 512
    /// bytes comes truncated (TC, no records); shutdown ends the UDP
    /// threads (the drop would hang otherwise).
    #[cfg(target_os = "linux")]
    #[test]
    fn datagrams_are_answered_from_the_address_asked_and_truncated_past_512_bytes() {
        use sandbox_core::DatagramSockets;
        use std::net::UdpSocket;
        let (s, _pins) = server(&[
            "svc.example.com:22",
            "many.example.com:443",
            "slow.example.com",
        ]);
        let service = s.datagram_service();
        let island =
            crate::island::Island::new(Box::new(move |socks| service.serve(socks))).unwrap();
        let client = UdpSocket::from(island.socket(libc::AF_INET, libc::SOCK_DGRAM, 0).unwrap());
        client
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut buf = [0u8; 1024];
        for (name, resolver) in [
            ("svc.example.com", "192.0.2.53:53"),
            ("other.example.net", "127.0.0.53:53"),
        ] {
            client.send_to(&query(name, TYPE_A), resolver).unwrap();
            let (n, from) = client.recv_from(&mut buf).unwrap();
            assert_eq!(
                from,
                resolver.parse().unwrap(),
                "answered from another address"
            );
            let rcode = buf[3] & 0xf;
            let an = u16::from_be_bytes([buf[6], buf[7]]);
            match name {
                "svc.example.com" => {
                    assert_eq!((rcode, an, n), (0, 1, query(name, TYPE_A).len() + 16))
                }
                _ => assert_eq!((rcode, an), (RCODE_NXDOMAIN, 0)),
            }
        }
        client
            .send_to(&query("many.example.com", TYPE_A), "192.0.2.53:53")
            .unwrap();
        let n = client.recv(&mut buf).unwrap();
        assert!(n <= UDP_ANSWER_MAX);
        assert_ne!(buf[2] & 0x02, 0, "TC not set");
        assert_eq!(u16::from_be_bytes([buf[6], buf[7]]), 0);
        // The same name over TCP: every record.
        assert_eq!(ask(&s, "many.example.com", TYPE_A).1.len(), 40);
        // A question too long for 512 bytes: its header alone, FORMERR.
        let long = format!("{}.example.com", vec!["a".repeat(60); 9].join("."));
        client
            .send_to(&query(&long, TYPE_A), "192.0.2.53:53")
            .unwrap();
        let n = client.recv(&mut buf).unwrap();
        assert_eq!((n, buf[3] & 0xf), (12, RCODE_FORMERR));
        // A slow lookup holds up no other query.
        client
            .send_to(&query("slow.example.com", TYPE_A), "192.0.2.53:53")
            .unwrap();
        let asked = std::time::Instant::now();
        client
            .send_to(&query("svc.example.com", TYPE_A), "192.0.2.53:53")
            .unwrap();
        client.recv(&mut buf).unwrap();
        assert_eq!(
            u16::from_be_bytes([buf[6], buf[7]]),
            1,
            "the fast one first"
        );
        assert!(
            asked.elapsed() < Duration::from_secs(2),
            "{:?}",
            asked.elapsed()
        );
        // IPv6, to an address no interface has: answered from it.
        let six = UdpSocket::from(island.socket(libc::AF_INET6, libc::SOCK_DGRAM, 0).unwrap());
        six.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        six.send_to(&query("svc.example.com", TYPE_AAAA), "[2001:db8::1]:53")
            .unwrap();
        let (_, from) = six.recv_from(&mut buf).unwrap();
        assert_eq!(from, "[2001:db8::1]:53".parse().unwrap());
        assert_eq!(u16::from_be_bytes([buf[6], buf[7]]), 1);
        drop(s);
    }
}
