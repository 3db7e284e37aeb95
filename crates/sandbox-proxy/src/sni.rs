//! The first flight of an opaque tunnel (`CONNECT`, SOCKS) to a port that
//! a request rule intercepts on some host: when it is a TLS ClientHello,
//! the server name it asks for must be the tunnel's host, and no
//! intercepted host's.
//!
//! Why: a tunnel goes to an address, and one address often serves many
//! names (a shared origin, a CDN). A tunnel to `other.example.com:8443`,
//! which an `--allow-net` rule admits, whose TLS asks for
//! `pkgs.example.com` (SNI), would reach the intercepted host's origin past
//! the request rules, when both names share the address. The origin picks
//! the name by the SNI, so that is what is checked. It cannot see what
//! the TLS carries: an origin that routes by the `Host` header alone
//! (whatever the SNI), or serves the intercepted host as its default
//! name, is still reached; so an `--allow-net` host that shares an address
//! with an intercepted one is not to be listed (docs/cli.md).
//!
//! The ClientHello is read by a small strict parser of our own (RFC 8446
//! section 4.1.2, RFC 6066 section 3): rustls, which the proxy holds,
//! parses a ClientHello only to serve it (`Acceptor`), and reads an SNI it
//! finds invalid, or of an unknown name type, as no SNI, which here would
//! pass a name an origin may still read; `tls-parser` would bring `nom`
//! and a full TLS message model for one extension. This parser refuses
//! anything it does not read one way: a first record that says handshake
//! and is not one whole, well-formed ClientHello within bounds (split over
//! several records is fine, another record type inside it is not), a
//! repeated extension, a server name list of other than one host name, a
//! name that is not a host name, and an encrypted ClientHello (ECH, whose
//! inner name no one but the origin reads). A first record of another TLS
//! type (change_cipher_spec, alert, application data, heartbeat; version
//! 3.x) is refused too: rustls and Go servers skip a warning alert before
//! the ClientHello, whose name would then go unread. An SSLv2-format
//! ClientHello counts as one without a server name.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::time::Instant;

use crate::state::Slot;
use crate::target::{Host, Target};
use crate::{RefusalReason, Refused};

/// The longest ClientHello message read (its body): real ones are under
/// 2 KiB, with a post-quantum key share some 1.2 KiB more.
const MAX_HELLO: usize = 32 * 1024;

/// The most bytes read before the ClientHello is whole: its body, and the
/// record and handshake headers around it, at one byte a record at worst
/// the same again five times over. More is refused.
const MAX_FLIGHT: usize = 6 * MAX_HELLO + 4;

/// A TLS record's type: handshake.
const HANDSHAKE: u8 = 0x16;
/// The other TLS record types, change_cipher_spec (0x14), alert (0x15),
/// handshake (0x16, above), application_data (0x17) and heartbeat (0x18),
/// bound the range.
const CHANGE_CIPHER_SPEC: u8 = 0x14;
const HEARTBEAT: u8 = 0x18;
/// A handshake message's type: ClientHello.
const CLIENT_HELLO: u8 = 1;
/// The largest plaintext record fragment (RFC 8446 section 5.1).
const MAX_FRAGMENT: usize = 1 << 14;
/// Extension: server_name (RFC 6066).
const EXT_SERVER_NAME: u16 = 0;
/// Extensions that hide the name asked for: encrypted_client_hello (RFC
/// 9849, 0xfe0d, and its drafts' 0xfe08 to 0xfe0c) and the older
/// encrypted_server_name (0xffce).
fn hides_name(ext: u16) -> bool {
    matches!(ext, 0xfe08..=0xfe0d | 0xffce)
}

/// What the first bytes of a tunnel are.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Hello {
    /// Not a TLS handshake record: another protocol, passed as it is.
    NotTls,
    /// A handshake record, the ClientHello not whole yet.
    Incomplete,
    /// A whole ClientHello.
    Parsed {
        /// The host name it asks for (lowercase, no trailing dot), if any.
        server_name: Option<String>,
        /// It carries an encrypted ClientHello (or server name).
        hidden_name: bool,
    },
    /// A handshake record that is no well-formed ClientHello (why).
    Malformed(&'static str),
}

/// Reads the first flight of a tunnel, `bytes` as received so far, from
/// its start (a [`Parser`] of its own).
#[cfg(test)]
pub(crate) fn parse(bytes: &[u8]) -> Hello {
    Parser::default().parse(bytes)
}

/// Reads a tunnel's first flight as it grows, each record once: the
/// records read whole are kept (where they end, the handshake bytes they
/// carried), so a hello dripped a byte a record costs work in proportion
/// to its length, not its square (it was read again from the start on
/// every read).
#[derive(Debug, Default)]
pub(crate) struct Parser {
    /// How many bytes of the flight are whole records, read.
    pos: usize,
    /// The handshake messages' bytes those records carried.
    handshake: Vec<u8>,
    /// The flight's bytes looked at so far, over all calls (the work done,
    /// for tests).
    work: usize,
}

impl Parser {
    /// Reads the first flight, `bytes` as received so far: each call's
    /// `bytes` extend the previous call's (the same flight, grown).
    pub(crate) fn parse(&mut self, bytes: &[u8]) -> Hello {
        self.work += 1;
        match bytes.first() {
            None => return Hello::Incomplete,
            Some(&HANDSHAKE) => {}
            // An SSLv2-format ClientHello (RFC 5246 appendix E.2: a
            // two-byte length with the top bit set, then message type 1
            // and a version 3.x), which some servers still take to
            // negotiate TLS: it carries no extensions, so no server name,
            // which a tunnel to a name does not pass. Message type 1 with
            // another version is a hello no one should read: refused.
            Some(b) if b & 0x80 != 0 => {
                return match (bytes.get(2), bytes.get(3)) {
                    (None, _) => Hello::Incomplete,
                    (Some(&CLIENT_HELLO), None) => Hello::Incomplete,
                    (Some(&CLIENT_HELLO), Some(3)) => Hello::Parsed {
                        server_name: None,
                        hidden_name: false,
                    },
                    (Some(&CLIENT_HELLO), Some(_)) => {
                        Hello::Malformed("an SSLv2-format ClientHello of a version other than 3.x")
                    }
                    (Some(_), _) => Hello::NotTls,
                }
            }
            // Another TLS record type first (change_cipher_spec, alert,
            // application_data, heartbeat) with a version 3.x: rustls and
            // Go servers skip a warning alert before the ClientHello, so
            // the name asked for would come after bytes not read here.
            // No client sends one first: refused.
            Some(&(CHANGE_CIPHER_SPEC..=HEARTBEAT)) => {
                return match bytes.get(1) {
                    None => Hello::Incomplete,
                    Some(3) => Hello::Malformed("another TLS record came before the ClientHello"),
                    Some(_) => Hello::NotTls,
                }
            }
            Some(_) => return Hello::NotTls,
        }
        loop {
            let Some(rest) = bytes.get(self.pos..) else {
                return Hello::Malformed("the flight shrank");
            };
            if rest.len() < 5 {
                return Hello::Incomplete;
            }
            if rest[0] != HANDSHAKE {
                return Hello::Malformed("another record came before the ClientHello ended");
            }
            if rest[1] != 3 {
                return Hello::Malformed("a record version other than 3.x");
            }
            let len = usize::from(u16::from_be_bytes([rest[3], rest[4]]));
            if len == 0 || len > MAX_FRAGMENT {
                return Hello::Malformed("a handshake record of length 0 or above 16 KiB");
            }
            if rest.len() < 5 + len {
                return Hello::Incomplete;
            }
            self.work += 5 + len;
            self.handshake.extend_from_slice(&rest[5..5 + len]);
            self.pos += 5 + len;
            let handshake = &self.handshake;
            if handshake.len() < 4 {
                continue;
            }
            if handshake[0] != CLIENT_HELLO {
                return Hello::Malformed("the first handshake message is no ClientHello");
            }
            let body_len = usize::from(handshake[1]) << 16
                | usize::from(handshake[2]) << 8
                | usize::from(handshake[3]);
            if body_len > MAX_HELLO {
                return Hello::Malformed("a ClientHello above 32 KiB");
            }
            match handshake.len().cmp(&(4 + body_len)) {
                std::cmp::Ordering::Less => continue,
                // Nothing follows a ClientHello in its records: the client
                // waits for the server's answer.
                std::cmp::Ordering::Greater => {
                    return Hello::Malformed("more handshake bytes after the ClientHello")
                }
                std::cmp::Ordering::Equal => {
                    self.work += body_len;
                    return client_hello(&handshake[4..]);
                }
            }
        }
    }
}

/// A cursor over a message's bytes; every read is bounds-checked.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Some(head)
    }

    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_be_bytes([b[0], b[1]]))
    }

    /// A vector with a one-byte length.
    fn vec8(&mut self) -> Option<&'a [u8]> {
        let n = self.u8()?;
        self.take(usize::from(n))
    }

    /// A vector with a two-byte length.
    fn vec16(&mut self) -> Option<&'a [u8]> {
        let n = self.u16()?;
        self.take(usize::from(n))
    }
}

/// A ClientHello's body (RFC 8446 section 4.1.2; TLS 1.2's has the same
/// layout).
fn client_hello(body: &[u8]) -> Hello {
    let mut r = Reader(body);
    let fixed = (|| {
        r.take(2 + 32)?; // legacy_version, random
        let session = r.vec8()?;
        let suites = r.vec16()?;
        let compression = r.vec8()?;
        Some(
            session.len() <= 32
                && !suites.is_empty()
                && suites.len() % 2 == 0
                && !compression.is_empty(),
        )
    })();
    if fixed != Some(true) {
        return Hello::Malformed("a ClientHello whose fixed fields do not parse");
    }
    if r.0.is_empty() {
        // No extensions (TLS 1.2 allows that): no server name.
        return Hello::Parsed {
            server_name: None,
            hidden_name: false,
        };
    }
    let Some(extensions) = r.vec16().filter(|_| r.0.is_empty()) else {
        return Hello::Malformed("a ClientHello whose extensions do not fill it exactly");
    };
    let mut r = Reader(extensions);
    let mut seen: Vec<u16> = Vec::new();
    let mut server_name = None;
    let mut hidden_name = false;
    while !r.0.is_empty() {
        let (Some(ext), Some(data)) = (r.u16(), r.vec16()) else {
            return Hello::Malformed("an extension that does not parse");
        };
        if seen.contains(&ext) {
            return Hello::Malformed("an extension given twice");
        }
        seen.push(ext);
        if hides_name(ext) {
            hidden_name = true;
        }
        if ext == EXT_SERVER_NAME {
            match host_name(data) {
                Some(name) => server_name = Some(name),
                None => {
                    return Hello::Malformed(
                        "a server_name extension other than one host name of letters, digits, '-', '_' and '.'",
                    )
                }
            }
        }
    }
    Hello::Parsed {
        server_name,
        hidden_name,
    }
}

/// The one host name a server_name extension's data lists (RFC 6066
/// section 3: a list of one name per type, type 0 the only one defined),
/// lowercase, without a trailing dot; `None` for anything else.
fn host_name(data: &[u8]) -> Option<String> {
    let mut r = Reader(data);
    let list = r.vec16()?;
    if !r.0.is_empty() {
        return None;
    }
    let mut r = Reader(list);
    if r.u8()? != 0 {
        return None;
    }
    let name = r.vec16()?;
    if !r.0.is_empty() {
        return None;
    }
    let name = std::str::from_utf8(name).ok()?;
    if !crate::target::is_host_name(name) || name.parse::<std::net::IpAddr>().is_ok() {
        return None;
    }
    Some(name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase())
}

/// Whether a parsed ClientHello may go through a tunnel to `host` (a name,
/// or `None` for an IP literal) at a port where some host is intercepted:
/// `Err` says why not. `intercepted` tells whether a name is intercepted
/// at the tunnel's port. Every refusal's text (here and in
/// [`first_flight`]) starts with `its TLS ClientHello`: the summary line
/// of sandbox-cli tells them by it.
pub(crate) fn admits(
    server_name: Option<&str>,
    hidden_name: bool,
    host: Option<&str>,
    intercepted: impl Fn(&str) -> bool,
) -> Result<(), String> {
    if hidden_name {
        return Err(
            "its TLS ClientHello hides the server name (encrypted ClientHello), and a request rule \
             intercepts a host at this port: the proxy cannot tell whether it asks for that host"
                .into(),
        );
    }
    if let Some(name) = server_name {
        if intercepted(name) {
            return Err(format!(
                "its TLS ClientHello asks for {name} (SNI), which a request rule intercepts at \
                 this port: that host is reached only through the proxy's interception (CONNECT \
                 to {name} itself)"
            ));
        }
    }
    let Some(host) = host else {
        return Ok(());
    };
    let host = host.strip_suffix('.').unwrap_or(host);
    match server_name {
        Some(name) if name.eq_ignore_ascii_case(host) => Ok(()),
        Some(name) => Err(format!(
            "its TLS ClientHello asks for {name} (SNI), not {host}, the host of the tunnel, and a \
             request rule intercepts a host at this port: the origin could serve the intercepted \
             host through it"
        )),
        None => Err(format!(
            "its TLS ClientHello names no server (SNI) though the tunnel is to {host}, and a \
             request rule intercepts a host at this port: the origin could serve the intercepted \
             host through it"
        )),
    }
}

/// How the first flight of a tunnel went.
pub(crate) enum Flight {
    /// Forward these bytes (what was read of the client) and relay.
    Pass(Vec<u8>),
    /// Refused: why (the client gets a TLS alert).
    Refuse(String),
    /// The client went away, or nothing was said by `deadline`.
    Gone,
}

/// Reads the client's first flight of a tunnel whose upstream is open,
/// `first` what the client sent already, and checks it with `check`
/// (given the parsed server name and whether it was hidden) when it is a
/// TLS ClientHello. A protocol whose server speaks first (the upstream is
/// readable before the client sent anything) passes unread; so does one
/// whose first byte is no TLS handshake record. Fail closed: a flight that
/// starts as a handshake record and is no whole ClientHello by `deadline`,
/// or within [`MAX_FLIGHT`], is refused; a tunnel on which neither side
/// says anything by `deadline` is closed.
pub(crate) fn first_flight(
    client: &mut TcpStream,
    upstream: &TcpStream,
    first: Vec<u8>,
    deadline: Instant,
    check: impl Fn(Option<&str>, bool) -> Result<(), String>,
) -> Flight {
    let mut buf = first;
    let mut parser = Parser::default();
    // One read buffer for the whole flight (a hello may come a few bytes
    // a read).
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        match parser.parse(&buf) {
            Hello::NotTls => return Flight::Pass(buf),
            Hello::Malformed(why) => {
                return Flight::Refuse(format!(
                    "its TLS ClientHello is not one well-formed ClientHello ({why}), and a \
                     request rule intercepts a host at this port"
                ))
            }
            Hello::Parsed {
                server_name,
                hidden_name,
            } => {
                return match check(server_name.as_deref(), hidden_name) {
                    Ok(()) => Flight::Pass(buf),
                    Err(why) => Flight::Refuse(why),
                }
            }
            Hello::Incomplete => {}
        }
        if buf.len() >= MAX_FLIGHT {
            return Flight::Refuse(
                "its TLS ClientHello did not end within 192 KiB, and a request rule intercepts a \
                 host at this port"
                    .into(),
            );
        }
        match wait(client, upstream, buf.is_empty(), deadline) {
            Waited::Client => {}
            Waited::Upstream => return Flight::Pass(buf),
            Waited::TimedOut if buf.is_empty() => return Flight::Gone,
            Waited::TimedOut => {
                return Flight::Refuse(
                    "its TLS ClientHello did not arrive whole in time, and a request rule \
                     intercepts a host at this port"
                        .into(),
                )
            }
            Waited::Failed => return Flight::Gone,
        }
        let room = (MAX_FLIGHT - buf.len()).min(chunk.len());
        match client.read(&mut chunk[..room]) {
            Ok(0) => return Flight::Gone,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock
                ) => {}
            Err(_) => return Flight::Gone,
        }
    }
}

/// What [`wait`] saw first.
enum Waited {
    /// The client has bytes (or its end).
    Client,
    /// The upstream has bytes (or its end) and the client has sent none.
    Upstream,
    TimedOut,
    Failed,
}

/// Waits by `deadline` until the client is readable, or (with
/// `upstream_too`) the upstream is.
fn wait(client: &TcpStream, upstream: &TcpStream, upstream_too: bool, deadline: Instant) -> Waited {
    let mut fds = [
        libc::pollfd {
            fd: client.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: upstream.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    let nfds: libc::nfds_t = if upstream_too { 2 } else { 1 };
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Waited::TimedOut;
        }
        let ms = i32::try_from(left.as_millis().max(1)).unwrap_or(i32::MAX);
        for fd in &mut fds {
            fd.revents = 0;
        }
        // SAFETY: `fds` is a valid array of at least `nfds` pollfd; both
        // descriptors stay open while the borrowed streams live.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), nfds, ms) };
        if n < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Waited::Failed;
        }
        if fds[0].revents != 0 {
            return Waited::Client;
        }
        if upstream_too && fds[1].revents != 0 {
            return Waited::Upstream;
        }
    }
}

/// The check of a tunnel to `target`, its upstream open and the client
/// told so, `first` what the client sent already: on a port a request rule
/// intercepts on some host, its first flight ([`first_flight`], checked by
/// [`admits`]); elsewhere nothing. `Some`: the bytes to forward before
/// relaying. `None`: refused (recorded, the client sent a TLS alert), or
/// gone; the caller drops both connections.
pub(crate) fn gate(
    slot: &Slot,
    client: &mut TcpStream,
    upstream: &TcpStream,
    target: &Target,
    first: Vec<u8>,
) -> Option<Vec<u8>> {
    let Some(interception) = &slot.shared.opts.interception else {
        return Some(first);
    };
    let inner = &interception.inner;
    if !inner.rules().iter().any(|r| r.port() == target.port) {
        return Some(first);
    }
    let (host, name) = match &target.host {
        Host::Name(name) => (name.clone(), Some(name.as_str())),
        Host::Ip(ip) => (ip.to_string(), None),
    };
    let deadline = Instant::now() + slot.shared.opts.head_timeout;
    let flight = first_flight(client, upstream, first, deadline, |sni, hidden| {
        admits(sni, hidden, name, |n| inner.intercepts(n, target.port))
    });
    match flight {
        Flight::Pass(bytes) => Some(bytes),
        Flight::Refuse(why) => {
            slot.shared.refuse(Refused {
                host,
                port: target.port,
                reason: RefusalReason::TunnelServerName { why },
            });
            let _ = client.write_all(&ACCESS_DENIED);
            None
        }
        Flight::Gone => None,
    }
}

/// A fatal TLS alert `access_denied` (RFC 8446 section 6.2), what a refused
/// ClientHello is answered with.
pub(crate) const ACCESS_DENIED: [u8; 7] = [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x31];

#[cfg(test)]
mod tests {
    use super::*;

    /// A ClientHello record (or records of `split` bytes each) with `exts`
    /// as its extensions (type, data).
    fn hello(exts: &[(u16, Vec<u8>)], split: Option<usize>) -> Vec<u8> {
        let mut body = vec![3, 3];
        body.extend_from_slice(&[7; 32]);
        body.push(0); // session id
        body.extend_from_slice(&[0, 2, 0x13, 0x01]); // one suite
        body.extend_from_slice(&[1, 0]); // null compression
        let mut e = Vec::new();
        for (t, d) in exts {
            e.extend_from_slice(&t.to_be_bytes());
            e.extend_from_slice(&(d.len() as u16).to_be_bytes());
            e.extend_from_slice(d);
        }
        body.extend_from_slice(&(e.len() as u16).to_be_bytes());
        body.extend_from_slice(&e);
        let mut hs = vec![CLIENT_HELLO, 0, (body.len() >> 8) as u8, body.len() as u8];
        hs.extend_from_slice(&body);
        let mut out = Vec::new();
        for piece in hs.chunks(split.unwrap_or(hs.len())) {
            out.extend_from_slice(&[HANDSHAKE, 3, 1]);
            out.extend_from_slice(&(piece.len() as u16).to_be_bytes());
            out.extend_from_slice(piece);
        }
        out
    }

    fn sni(name: &[u8]) -> (u16, Vec<u8>) {
        let mut entry = vec![0];
        entry.extend_from_slice(&(name.len() as u16).to_be_bytes());
        entry.extend_from_slice(name);
        let mut d = (entry.len() as u16).to_be_bytes().to_vec();
        d.extend_from_slice(&entry);
        (EXT_SERVER_NAME, d)
    }

    fn named(name: &str) -> Hello {
        Hello::Parsed {
            server_name: Some(name.into()),
            hidden_name: false,
        }
    }

    #[test]
    fn the_server_name_is_read_whole_or_split_at_any_byte() {
        let one = hello(&[(10, vec![0, 2, 0, 29]), sni(b"PKGS.example.com.")], None);
        assert_eq!(parse(&one), named("pkgs.example.com"));
        // Every prefix is incomplete, never a verdict.
        for cut in 0..one.len() {
            assert_eq!(parse(&one[..cut]), Hello::Incomplete, "cut at {cut}");
        }
        // The handshake split over records of any size reads the same.
        for split in [1, 2, 3, 5, 17, 100] {
            let many = hello(&[sni(b"pkgs.example.com")], Some(split));
            assert_eq!(parse(&many), named("pkgs.example.com"), "split {split}");
        }
        // No extensions, or none naming a server: no name.
        let none = Hello::Parsed {
            server_name: None,
            hidden_name: false,
        };
        assert_eq!(parse(&hello(&[(10, vec![0, 0])], None)), none);
        let mut bare = hello(&[], None);
        // Drop the (empty) extensions block: a TLS 1.2 hello without any.
        bare.truncate(bare.len() - 2);
        bare[4] -= 2;
        bare[8] -= 2;
        assert_eq!(parse(&bare), none);
        // An SSLv2-format ClientHello: no name.
        assert_eq!(parse(&[0x80]), Hello::Incomplete);
        assert_eq!(parse(&[0x80, 0x2e, 1, 3, 1]), none);
        assert_eq!(parse(&[0x80, 0x2e, 1]), Hello::Incomplete);
        assert!(matches!(parse(&[0x80, 0x2e, 1, 2, 0]), Hello::Malformed(_)));
        // Another TLS record first (a warning alert, change_cipher_spec,
        // application data, heartbeat), then the hello: refused, whatever
        // name follows; incomplete until its version is read.
        for first in [
            vec![0x15, 3, 1, 0, 2, 1, 0x5a],
            vec![0x14, 3, 3, 0, 1, 1],
            vec![0x17, 3, 3, 0, 1, 0],
            vec![0x18, 3, 0, 0, 1, 0],
        ] {
            assert_eq!(parse(&first[..1]), Hello::Incomplete);
            for name in [&b"pkgs.example.com"[..], b"other.example.com"] {
                let mut flight = first.clone();
                flight.extend_from_slice(&hello(&[sni(name)], None));
                assert!(
                    matches!(parse(&flight), Hello::Malformed(_)),
                    "{first:02x?}: {:?}",
                    parse(&flight)
                );
            }
            assert!(matches!(parse(&first[..2]), Hello::Malformed(_)));
        }
        // Those bytes without a 3.x version are no TLS record: as before.
        assert_eq!(parse(&[0x15, 0x41, 0x42]), Hello::NotTls);
        assert_eq!(parse(&[0x17, 2, 0]), Hello::NotTls);
        assert_eq!(parse(&[0x13, 3, 1]), Hello::NotTls);
        assert_eq!(parse(&[0x19, 3, 1]), Hello::NotTls);
        // Another protocol.
        assert_eq!(parse(&[0x80, 0x2e, 7]), Hello::NotTls);
        assert_eq!(parse(b"SSH-2.0-x\r\n"), Hello::NotTls);
        assert_eq!(parse(b"GET / HTTP/1.1\r\n"), Hello::NotTls);
        // An encrypted ClientHello is seen.
        assert_eq!(
            parse(&hello(
                &[sni(b"public.example.com"), (0xfe0d, vec![0])],
                None
            )),
            Hello::Parsed {
                server_name: Some("public.example.com".into()),
                hidden_name: true
            }
        );
    }

    #[test]
    fn a_handshake_that_is_not_one_clear_client_hello_is_malformed() {
        let good = hello(&[sni(b"pkgs.example.com")], None);
        let bad = |b: Vec<u8>, what: &str| {
            assert!(
                matches!(parse(&b), Hello::Malformed(_)),
                "{what}: {:?}",
                parse(&b)
            );
        };
        // Two server names, another name type, an empty or odd name, an
        // IP literal, the extension twice, trailing bytes in it.
        let mut two = sni(b"a.example.com");
        let extra = sni(b"b.example.com").1;
        two.1.extend_from_slice(&extra[2..]);
        let len = (two.1.len() - 2) as u16;
        two.1[..2].copy_from_slice(&len.to_be_bytes());
        bad(hello(&[two], None), "two names");
        let mut other_type = sni(b"pkgs.example.com");
        other_type.1[2] = 1;
        bad(hello(&[other_type], None), "name type 1");
        bad(hello(&[sni(b"")], None), "empty name");
        bad(hello(&[sni(b"pkgs.example.com\0.evil")], None), "NUL");
        bad(hello(&[sni(b"pkgs example.com")], None), "space");
        bad(hello(&[sni(b"1.2.3.4")], None), "IP literal");
        bad(
            hello(&[sni(b"a.example.com"), sni(b"pkgs.example.com")], None),
            "twice",
        );
        let mut trailing = sni(b"pkgs.example.com");
        trailing.1.push(0);
        bad(hello(&[trailing], None), "trailing");
        // Another record type inside the hello; a record version 2; an
        // empty record; a record above 16 KiB; another message first; a
        // length beyond the bound; bytes after the hello.
        let mut cut = hello(&[sni(b"pkgs.example.com")], Some(20));
        cut[25] = 0x17;
        bad(cut, "application data inside");
        let mut v2 = good.clone();
        v2[1] = 2;
        bad(v2, "version 2");
        bad(vec![HANDSHAKE, 3, 1, 0, 0], "empty record");
        bad(vec![HANDSHAKE, 3, 1, 0x40, 0x01], "above 16 KiB");
        let mut server_hello = good.clone();
        server_hello[5] = 2;
        bad(server_hello, "a ServerHello");
        bad(
            vec![HANDSHAKE, 3, 1, 0, 4, CLIENT_HELLO, 1, 0, 0],
            "64 KiB hello",
        );
        let mut after = good.clone();
        after[4] += 1;
        after.push(0);
        bad(after, "a byte after");
        // Fixed fields: a session id above 32 bytes, no suites.
        let mut long_session = good.clone();
        long_session[5 + 4 + 34] = 33;
        bad(long_session, "session id 33");
        // Positive control: the unchanged hello parses.
        assert_eq!(parse(&good), named("pkgs.example.com"));
    }

    #[test]
    fn a_hello_dripped_a_byte_a_record_is_read_in_linear_work() {
        // A 32 KiB hello (its padding extension), one handshake byte a
        // record, fed a record at a time as the flight grows.
        let big = hello(
            &[sni(b"other.example.com"), (21, vec![0; 32 * 1024 - 200])],
            Some(1),
        );
        assert_eq!(big.len() % 6, 0);
        let records = big.len() / 6;
        assert!(records > 32_000, "{records}");
        let mut parser = Parser::default();
        for end in (6..big.len()).step_by(6) {
            assert_eq!(parser.parse(&big[..end]), Hello::Incomplete, "at {end}");
        }
        assert_eq!(parser.parse(&big), named("other.example.com"));
        // Each byte looked at a bounded number of times, plus one step a
        // call: read again from the start on each call it was
        // records * flight / 2, some 3 * 10^9 here.
        assert!(
            parser.work <= 2 * big.len() + records,
            "{} steps for {} bytes",
            parser.work,
            big.len()
        );
        // Fed a byte at a time, likewise; the verdict is the same as read
        // whole (twin: records as large as may be).
        let mut parser = Parser::default();
        for end in 1..big.len() {
            assert_eq!(parser.parse(&big[..end]), Hello::Incomplete, "at {end}");
        }
        assert_eq!(parser.parse(&big), named("other.example.com"));
        assert!(parser.work <= 3 * big.len(), "{}", parser.work);
        let whole = hello(
            &[sni(b"other.example.com"), (21, vec![0; 32 * 1024 - 200])],
            Some(MAX_FRAGMENT),
        );
        assert_eq!(parse(&whole), named("other.example.com"));
        // A refusal met midway stays one: a record of another type after
        // a few handshake ones.
        let mut parser = Parser::default();
        assert_eq!(parser.parse(&big[..60]), Hello::Incomplete);
        let mut bad = big[..60].to_vec();
        bad.extend_from_slice(&[0x17, 3, 3, 0, 1, 0]);
        assert!(matches!(parser.parse(&bad), Hello::Malformed(_)));
    }

    /// Two connected TCP streams on loopback.
    fn pair() -> (TcpStream, TcpStream) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        (a, b)
    }

    /// `first_flight` between a client (whose peer end `feed` writes to)
    /// and an upstream (whose peer end `serve` writes to), within `wait`,
    /// the check admitting `other.example.com` alone.
    fn flight(
        feed: impl FnOnce(&mut TcpStream) + Send + 'static,
        serve: impl FnOnce(&mut TcpStream) + Send + 'static,
        wait: std::time::Duration,
    ) -> Flight {
        let (mut client_peer, mut client) = pair();
        let (mut upstream_peer, upstream) = pair();
        // Each peer stays open until the flight is over (its other end
        // dropped).
        let until_closed = |s: &mut TcpStream| {
            let _ = s.set_read_timeout(Some(std::time::Duration::from_secs(20)));
            let mut sink = [0u8; 64];
            while matches!(s.read(&mut sink), Ok(n) if n > 0) {}
        };
        let feeder = std::thread::spawn(move || {
            feed(&mut client_peer);
            until_closed(&mut client_peer);
        });
        let server = std::thread::spawn(move || {
            serve(&mut upstream_peer);
            until_closed(&mut upstream_peer);
        });
        let got = first_flight(
            &mut client,
            &upstream,
            Vec::new(),
            Instant::now() + wait,
            |sni, hidden| {
                admits(sni, hidden, Some("other.example.com"), |n| {
                    n == "pkgs.example.com"
                })
            },
        );
        drop((client, upstream));
        let _ = (feeder.join(), server.join());
        got
    }

    #[test]
    fn the_first_flight_is_read_as_it_arrives_and_fails_closed() {
        use std::time::Duration;
        // What a flight that passes takes is far below it; those that wait
        // it out end at it.
        let short = Duration::from_millis(500);
        let slow = |hello: Vec<u8>| {
            move |s: &mut TcpStream| {
                for piece in hello.chunks(7) {
                    s.write_all(piece).unwrap();
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
        };
        let pkgs = hello(&[sni(b"pkgs.example.com")], Some(40));
        let other = hello(&[sni(b"other.example.com")], Some(40));
        // Arriving in pieces: the name is read whole, then judged.
        match flight(slow(pkgs), |_| {}, short) {
            Flight::Refuse(why) => assert!(why.contains("asks for pkgs.example.com"), "{why}"),
            _ => panic!("a hello for the intercepted host passed"),
        }
        match flight(slow(other.clone()), |_| {}, short) {
            Flight::Pass(bytes) => assert_eq!(bytes, other, "every byte read is forwarded"),
            _ => panic!("a hello for the tunnel's own host was refused"),
        }
        // The hello for the intercepted host after a warning alert record
        // (which rustls and Go servers skip): refused.
        let mut alert_first = vec![0x15, 3, 1, 0, 2, 1, 0x5a];
        alert_first.extend_from_slice(&hello(&[sni(b"pkgs.example.com")], None));
        match flight(slow(alert_first), |_| {}, short) {
            Flight::Refuse(why) => {
                assert!(why.contains("another TLS record came before"), "{why}")
            }
            _ => panic!("a hello after an alert record passed"),
        }
        // Half a hello, then silence: refused at the deadline.
        let half = other[..other.len() / 2].to_vec();
        match flight(move |s| s.write_all(&half).unwrap(), |_| {}, short) {
            Flight::Refuse(why) => assert!(why.contains("did not arrive whole"), "{why}"),
            _ => panic!("half a hello passed"),
        }
        // The server speaks first (SSH, SMTP): passed unread.
        match flight(|_| {}, |s| s.write_all(b"SSH-2.0-x\r\n").unwrap(), short) {
            Flight::Pass(bytes) => assert!(bytes.is_empty()),
            _ => panic!("a server-first protocol was held"),
        }
        // Another protocol from the client: passed.
        match flight(
            |s| s.write_all(b"GET / HTTP/1.1\r\n").unwrap(),
            |_| {},
            short,
        ) {
            Flight::Pass(bytes) => assert_eq!(bytes, b"GET / HTTP/1.1\r\n"),
            _ => panic!("plain text was held"),
        }
        // Nobody says anything: closed.
        assert!(matches!(flight(|_| {}, |_| {}, short), Flight::Gone));
    }

    #[test]
    fn a_server_name_goes_only_to_its_own_tunnel_and_never_to_an_intercepted_host() {
        let intercepted = |n: &str| n == "pkgs.example.com";
        let ok = |sni: Option<&str>, host: Option<&str>| admits(sni, false, host, intercepted);
        assert!(ok(Some("other.example.com"), Some("other.example.com")).is_ok());
        assert!(ok(Some("other.example.com"), Some("Other.Example.com.")).is_ok());
        assert!(ok(None, None).is_ok(), "an IP tunnel without SNI");
        assert!(ok(Some("other.example.com"), None).is_ok());
        let refused = [
            (Some("pkgs.example.com"), Some("other.example.com")),
            (Some("evil.example.com"), Some("other.example.com")),
            (None, Some("other.example.com")),
            (Some("pkgs.example.com"), None),
        ];
        for (sni, host) in refused {
            assert!(ok(sni, host).is_err(), "{sni:?} to {host:?}");
        }
        assert!(admits(
            Some("other.example.com"),
            true,
            Some("other.example.com"),
            intercepted
        )
        .is_err());
    }
}
