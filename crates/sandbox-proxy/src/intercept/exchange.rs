//! One intercepted connection: the command's TLS terminated with the run
//! CA's leaf for the host it asked `CONNECT` for, HTTP/1.1 requests read
//! (httparse) and checked one by one, each admitted one forwarded over a
//! new TLS connection of the proxy's own to that host (`Connection: close`
//! there), the response relayed back. The client's connection carries the
//! next request only when that response was framed for it (no body, one
//! `Content-Length` and exactly that many bytes relayed, or, while the run
//! has secrets, a chunked or compressed body relayed de-chunked, decoded,
//! masked and re-chunked to its end: [`super::body`]) and the client did
//! not ask to close; otherwise, or after any refusal, it is closed. Every
//! request on it goes through the same checks: nothing follows unchecked.
//!
//! A request is refused before any rule is consulted when its shape could
//! be read two ways (request smuggling): bytes outside a plain CRLF head (a
//! NUL, a CR without LF, an LF without CR, a folded header line), more than
//! one `Content-Length` or `Host`, a `Transfer-Encoding` beside a
//! `Content-Length` or other than exactly `chunked`, a `Host` naming another
//! authority than the one `CONNECT` named, a target not in origin form.
//! The body is framed by the proxy (exactly `Content-Length` bytes, or the
//! chunks re-encoded by the proxy's one strict decoder, [`crate::chunked`];
//! a body with trailers is refused), so bytes after it never reach the
//! origin.
//!
//! A method that is not a plain upper-case token is refused (400) before
//! the rules too: `*` would read as any method in a proposed rule. So is a
//! request whose method or URL override header (`X-HTTP-Method-Override`,
//! `X-Original-URL`, ...) names a method or path the rules do not admit
//! there (403, [`OVERRIDES`]); forwarding headers the client wrote
//! (`Forwarded`, `X-Forwarded-*`, `X-Host`) are dropped: the proxy is the
//! client's only hop. While the run has secrets, `Range` and `If-Range` are
//! dropped and a `206` response refused: parts of an echo, each masked
//! alone, would carry a value in pieces.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::ServerName;
use rustls::{ClientConnection, ServerConnection, StreamOwned};
use sandbox_core::request::{normalize_path, plain_method, NormalPath, RequestRule};

use super::Interceptor;
use crate::state::Slot;
use crate::{RefusalReason, Refused, Secret};

/// Header slots for one request or response head.
const MAX_HEADERS: usize = 128;

/// How long a read from the origin, or of a request body, may wait.
pub(crate) const IDLE: Duration = Duration::from_secs(300);

/// Copy buffer.
const BUF: usize = 64 * 1024;

/// rustls' own limit of a connection's send buffer.
const DEFAULT_BUFFER_LIMIT: usize = 64 * 1024;

/// Headers never forwarded to the origin (hop-by-hop, or set by the proxy).
const DROPPED: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "proxy-authenticate",
    "upgrade",
    "host",
    "te",
    "trailer",
    "expect",
    "http2-settings",
    // Forwarding headers: the proxy is the client's only hop, and an
    // origin (or a server behind it) may read them as the host or scheme
    // asked for.
    "forwarded",
    "x-host",
];

/// Header name prefixes never forwarded (forwarding headers, as above).
const DROPPED_PREFIXES: &[&str] = &["x-forwarded-"];

/// Headers dropped while the run has secrets: an origin that echoes a
/// request would give a value back in parts (each masked alone).
/// `Request-Range` is the old name Apache httpd still reads.
pub(crate) const DROPPED_WITH_SECRETS: &[&str] = &["range", "if-range", "request-range"];

/// Whether the header `name` is `wanted` (lower case): ASCII case ignored,
/// and `_` read as `-` (CGI, PHP, WSGI and Rack servers name both
/// `HTTP_X_FORWARDED_HOST`, and some pass a field written with `_` on).
pub(crate) fn is_header(name: &str, wanted: &str) -> bool {
    name.len() == wanted.len()
        && name
            .bytes()
            .zip(wanted.bytes())
            .all(|(a, b)| a.to_ascii_lowercase() == b || (a == b'_' && b == b'-'))
}

/// Headers some servers and frameworks read as the request's method, or as
/// its path, instead of the request line's: each value must be one the
/// rules admit for the request ([`overrides`]).
const OVERRIDES: &[(&str, Override)] = &[
    ("x-http-method-override", Override::Method),
    ("x-method-override", Override::Method),
    ("x-http-method", Override::Method),
    ("x-original-url", Override::Path),
    ("x-rewrite-url", Override::Path),
];

#[derive(Clone, Copy, PartialEq)]
enum Override {
    Method,
    Path,
}

/// Whether the header `name` is never forwarded to the origin: the lists
/// above, and every name with a `_` (nginx's default
/// `underscores_in_headers off`, gunicorn 22 and later): CGI-style servers
/// read `SCRIPT_NAME: /simple/x` as the CGI variable (gunicorn 21.2 and
/// older strip it from `PATH_INFO`, routing past the rules). A secret's
/// placeholder in such a header is not written: the header is not sent.
fn dropped(name: &str, secrets: bool) -> bool {
    name.contains('_')
        || DROPPED.iter().any(|d| is_header(name, d))
        || DROPPED_PREFIXES
            .iter()
            .any(|p| name.get(..p.len()).is_some_and(|head| is_header(head, p)))
        || (secrets
            && (is_header(name, "accept-encoding")
                || DROPPED_WITH_SECRETS.iter().any(|d| is_header(name, d))))
}

type ClientTls = StreamOwned<ServerConnection, TcpStream>;

/// The command's side of an exchange: its TLS connection (HTTP/1.1), or
/// one end of the socket pair an HTTP/2 stream is served through
/// ([`super::h2`]), which carries the same HTTP/1.1 bytes in plain.
pub(crate) trait Client: Read + Write {
    /// The socket's descriptor (the origin's silence is bounded once the
    /// command has ended its side of it: [`ReadAhead::heard_by`]).
    fn fd(&self) -> std::os::fd::RawFd;
    /// Bounds each read of the socket.
    fn set_read_timeout(&self, timeout: Option<Duration>);
    /// Shuts the socket down.
    fn shutdown(&self, how: std::net::Shutdown);
    /// Reads from the socket itself (below TLS: what the client still
    /// sends after a refusal, dropped).
    fn read_raw(&mut self, buf: &mut [u8]) -> io::Result<usize>;
    /// Says the connection ends (TLS close_notify; nothing in plain).
    fn close_notify(&mut self) {}
    /// Takes `bytes` for the client, written out when a batch is full.
    fn send_batched(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.write_all(bytes)
    }
    /// Writes out what [`Client::send_batched`] holds.
    fn send_now(&mut self) -> io::Result<()> {
        self.flush()
    }
    /// Holds up to `limit` bytes in a batch (`None`: the default).
    fn batch(&mut self, _limit: Option<usize>) {}
}

impl Client for ClientTls {
    fn fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.sock)
    }
    fn set_read_timeout(&self, timeout: Option<Duration>) {
        let _ = self.sock.set_read_timeout(timeout);
    }
    fn shutdown(&self, how: std::net::Shutdown) {
        let _ = self.sock.shutdown(how);
    }
    fn read_raw(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.sock.read(buf)
    }
    fn close_notify(&mut self) {
        self.conn.send_close_notify();
    }
    fn send_batched(&mut self, bytes: &[u8]) -> io::Result<()> {
        send_batched(self, bytes)
    }
    fn send_now(&mut self) -> io::Result<()> {
        send_now(self)
    }
    fn batch(&mut self, limit: Option<usize>) {
        self.conn
            .set_buffer_limit(Some(limit.unwrap_or(DEFAULT_BUFFER_LIMIT)));
    }
}

impl Client for std::os::unix::net::UnixStream {
    fn fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(self)
    }
    fn set_read_timeout(&self, timeout: Option<Duration>) {
        let _ = std::os::unix::net::UnixStream::set_read_timeout(self, timeout);
    }
    fn shutdown(&self, how: std::net::Shutdown) {
        let _ = std::os::unix::net::UnixStream::shutdown(self, how);
    }
    fn read_raw(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read(buf)
    }
}

type OriginTls = StreamOwned<ClientConnection, ReadAhead>;

/// Bytes of the origin's TLS read per syscall at most: rustls asks for at
/// most one record (16 KiB) at a time, and a download read record by
/// record costs a syscall and a wake-up each.
const READ_AHEAD: usize = 256 * 1024;

/// How much encrypted response the client's side holds before it is
/// written (in one writev of its records).
const SEND_BATCH: usize = 256 * 1024;

/// The origin's socket, read through a buffer of [`READ_AHEAD`] bytes;
/// writes go straight through (vectored, as rustls writes records).
struct ReadAhead {
    sock: TcpStream,
    buf: Box<[u8]>,
    at: usize,
    end: usize,
    /// The command's connection (its descriptor: the connection outlives
    /// the origin's, which [`forward`] opens and drops) and the bound on
    /// the origin's silence once the command has ended its side of it
    /// ([`crate::relay::read_while_heard`]); none before
    /// [`ReadAhead::heard_by`].
    client: Option<(std::os::fd::RawFd, Duration, crate::state::SilenceNote)>,
}

impl ReadAhead {
    fn new(sock: TcpStream) -> Self {
        ReadAhead {
            sock,
            buf: vec![0u8; READ_AHEAD].into_boxed_slice(),
            at: 0,
            end: 0,
            client: None,
        }
    }

    /// Reads bound the origin's silence once `client` has ended its side
    /// (its end of stream, half-close or exit) to `idle`
    /// ([`crate::relay::HALF_CLOSED_IDLE`] but in tests), as a tunnel's.
    fn heard_by(
        &mut self,
        client: std::os::fd::RawFd,
        idle: Duration,
        cut: crate::state::SilenceNote,
    ) {
        self.client = Some((client, idle, cut));
    }

    /// Whether a read would go to the socket (and might wait).
    fn drained(&self) -> bool {
        self.at == self.end
    }
}

impl std::ops::Deref for ReadAhead {
    type Target = TcpStream;
    fn deref(&self) -> &TcpStream {
        &self.sock
    }
}

impl Read for ReadAhead {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.at == self.end {
            self.at = 0;
            self.end = 0;
            self.end = match &self.client {
                Some((client, idle, cut)) => crate::relay::read_while_heard(
                    &self.sock,
                    (*client, *idle, cut),
                    &mut self.buf,
                )?,
                None => self.sock.read(&mut self.buf)?,
            };
        }
        let n = out.len().min(self.end - self.at);
        out[..n].copy_from_slice(&self.buf[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

impl Write for ReadAhead {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.sock.write(bytes)
    }
    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        self.sock.write_vectored(bufs)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.sock.flush()
    }
}

/// Encrypts `bytes` for the client into its send buffer, writing the
/// buffer's records out only when it is full ([`SEND_BATCH`]).
fn send_batched(client: &mut ClientTls, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        let n = client.conn.writer().write(bytes)?;
        if n == 0 && !client.conn.wants_write() {
            // Nothing taken with nothing to send: it takes no more.
            return Err(io::ErrorKind::WriteZero.into());
        }
        bytes = &bytes[n..];
        if !bytes.is_empty() {
            send_now(client)?;
        }
    }
    Ok(())
}

/// Writes out every record the client's send buffer holds.
fn send_now(client: &mut ClientTls) -> io::Result<()> {
    while client.conn.wants_write() {
        if client.conn.write_tls(&mut client.sock)? == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
    }
    Ok(())
}

/// A stream and the bytes read from it but not yet used.
pub(crate) struct Buffered<S> {
    pub(crate) stream: S,
    pub(crate) buf: Vec<u8>,
    /// Where reads land (allocated once).
    chunk: Box<[u8]>,
}

impl<S: Read> Buffered<S> {
    pub(crate) fn new(stream: S) -> Self {
        Buffered {
            stream,
            buf: Vec::new(),
            chunk: vec![0u8; BUF].into_boxed_slice(),
        }
    }

    /// Reads once into `chunk`: how many bytes, `Ok(0)` at the end of the
    /// stream (an end without TLS close_notify counts as one).
    fn read_chunk(&mut self) -> io::Result<usize> {
        loop {
            match self.stream.read(&mut self.chunk) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
                Err(e) => return Err(e),
            }
        }
    }

    /// Reads more into the buffer; `Ok(0)` at the end of the stream.
    fn fill(&mut self) -> io::Result<usize> {
        let n = self.read_chunk()?;
        self.buf.extend_from_slice(&self.chunk[..n]);
        Ok(n)
    }
}

/// A request head as read, owned.
struct Head {
    method: String,
    target: String,
    headers: Vec<(String, Vec<u8>)>,
}

/// How the request body is framed.
enum Body {
    None,
    Length(u64),
    Chunked,
}

/// Why a request is not forwarded, and how to answer it.
pub(crate) struct Refusal {
    pub(crate) code: u16,
    pub(crate) reason: &'static str,
    pub(crate) why: String,
    /// The rule that would admit it (`METHODS URL`).
    pub(crate) admit_with: Option<String>,
}

pub(crate) fn refusal(code: u16, reason: &'static str, why: impl Into<String>) -> Refusal {
    Refusal {
        code,
        reason,
        why: why.into(),
        admit_with: None,
    }
}

/// Checks the raw head bytes (request line, headers, the final CRLF) for
/// what a parser might read differently: every line ends in CRLF, no CR or
/// NUL stands elsewhere, no header line is folded (starts with SP or HT).
fn plain_crlf(head: &[u8]) -> Result<(), String> {
    for (i, &b) in head.iter().enumerate() {
        match b {
            0 => return Err("a NUL byte in the request head".into()),
            b'\r' if head.get(i + 1) != Some(&b'\n') => {
                return Err("a CR not followed by LF in the request head".into())
            }
            b'\n' if i == 0 || head[i - 1] != b'\r' => {
                return Err("an LF not preceded by CR in the request head".into())
            }
            b'\n' if matches!(head.get(i + 1), Some(b' ' | b'\t')) => {
                return Err("a folded header line (obs-fold) in the request head".into())
            }
            _ => {}
        }
    }
    Ok(())
}

/// Reads one request head (at most `max` bytes); `None` when the client
/// closed first.
fn read_head(client: &mut Buffered<impl Client>, max: usize) -> Result<Option<Head>, Refusal> {
    loop {
        let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut req = httparse::Request::new(&mut slots);
        match req.parse(&client.buf) {
            Ok(httparse::Status::Complete(len)) => {
                plain_crlf(&client.buf[..len]).map_err(|why| refusal(400, "Bad Request", why))?;
                let (Some(method), Some(target), Some(1)) = (req.method, req.path, req.version)
                else {
                    return Err(refusal(
                        505,
                        "HTTP Version Not Supported",
                        "only HTTP/1.1 requests are intercepted",
                    ));
                };
                let head = Head {
                    method: method.to_string(),
                    target: target.to_string(),
                    headers: req
                        .headers
                        .iter()
                        .map(|h| (h.name.to_string(), h.value.to_vec()))
                        .collect(),
                };
                client.buf.drain(..len);
                return Ok(Some(head));
            }
            Ok(httparse::Status::Partial) => {
                // The part read so far must hold no smuggling shape either
                // (a bare CR at its end may still be followed by LF).
                let upto = client.buf.len().saturating_sub(1);
                plain_crlf(&client.buf[..upto]).map_err(|why| refusal(400, "Bad Request", why))?;
            }
            Err(httparse::Error::TooManyHeaders) => {
                return Err(refusal(
                    431,
                    "Request Header Fields Too Large",
                    "too many header fields",
                ))
            }
            Err(e) => {
                return Err(refusal(
                    400,
                    "Bad Request",
                    format!("malformed request: {e}"),
                ))
            }
        }
        if client.buf.len() >= max {
            return Err(refusal(
                431,
                "Request Header Fields Too Large",
                "the request head is too large",
            ));
        }
        match client.fill() {
            Ok(0) if client.buf.is_empty() => return Ok(None),
            Ok(0) => {
                return Err(refusal(
                    400,
                    "Bad Request",
                    "the request head is incomplete",
                ))
            }
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(refusal(
                    408,
                    "Request Timeout",
                    "the request head did not arrive in time",
                ))
            }
            Err(_) => return Ok(None),
        }
    }
}

fn values<'a>(head: &'a Head, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
    head.headers
        .iter()
        .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_slice())
}

/// The body's framing, refusing every ambiguous one.
fn framing(head: &Head) -> Result<Body, Refusal> {
    let lengths: Vec<&[u8]> = values(head, "content-length").collect();
    let encodings: Vec<&[u8]> = values(head, "transfer-encoding").collect();
    if lengths.len() > 1 {
        return Err(refusal(400, "Bad Request", "more than one Content-Length"));
    }
    if !encodings.is_empty() && !lengths.is_empty() {
        return Err(refusal(
            400,
            "Bad Request",
            "Transfer-Encoding together with Content-Length",
        ));
    }
    if let Some(len) = lengths.first() {
        let text = std::str::from_utf8(len).unwrap_or("");
        if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
            return Err(refusal(
                400,
                "Bad Request",
                "a Content-Length that is not a number",
            ));
        }
        return text
            .parse()
            .map(Body::Length)
            .map_err(|_| refusal(400, "Bad Request", "a Content-Length out of range"));
    }
    match encodings.as_slice() {
        [] => Ok(Body::None),
        [one] if one.eq_ignore_ascii_case(b"chunked") => Ok(Body::Chunked),
        _ => Err(refusal(
            501,
            "Not Implemented",
            "a Transfer-Encoding other than exactly 'chunked'",
        )),
    }
}

/// Checks the head's shape and `Host`, then the rules; the path to send
/// (normalised, with the query as sent).
fn admit(
    head: &Head,
    rules: &[RequestRule],
    host: &str,
    port: u16,
) -> Result<(String, Body), Refusal> {
    if !plain_method(&head.method) {
        return Err(refusal(
            400,
            "Bad Request",
            format!(
                "the method {:?} is not a plain one (upper-case letters and '-'): no rule \
                 names it",
                head.method
            ),
        ));
    }
    let body = framing(head)?;
    let hosts: Vec<&[u8]> = values(head, "host").collect();
    if hosts.len() > 1 {
        return Err(refusal(400, "Bad Request", "more than one Host"));
    }
    if let Some(sent) = hosts.first() {
        let sent = String::from_utf8_lossy(sent).to_ascii_lowercase();
        let (name, sent_port) = match sent.rsplit_once(':') {
            Some((n, p)) => (n, p.parse::<u16>().ok()),
            None => (sent.as_str(), Some(443)),
        };
        if !name.trim_end_matches('.').eq_ignore_ascii_case(host) || sent_port != Some(port) {
            return Err(refusal(
                400,
                "Bad Request",
                format!("the Host header names {sent:?}, not {host}:{port} the connection is for"),
            ));
        }
    }
    if !head.target.starts_with('/') {
        return Err(refusal(
            400,
            "Bad Request",
            "the request target is not in origin form (/path)",
        ));
    }
    let (path, query) = match head.target.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (head.target.as_str(), None),
    };
    let normal = normalize_path(path).map_err(|problem| {
        refusal(
            403,
            "Forbidden",
            format!("the path is refused whatever the rules: {problem}"),
        )
    })?;
    if !rules
        .iter()
        .any(|r| r.admits_normal(&head.method, host, port, &normal))
    {
        return Err(Refusal {
            code: 403,
            reason: "Forbidden",
            why: "no request rule admits it".into(),
            admit_with: RequestRule::exact(&head.method, host, port, &normal)
                .map(|r| r.to_string()),
        });
    }
    overrides(head, query, rules, (host, port), &normal)?;
    let mut target = normal.to_string();
    if let Some(q) = query {
        target.push('?');
        target.push_str(q);
    }
    Ok((target, body))
}

/// Refuses a request (admitted by its request line) whose method or URL
/// override headers ([`OVERRIDES`]), or `_method` query parameter (Symfony,
/// Laravel and others read it on a POST), name a method or path the rules
/// do not admit: every method it names (the request line's and each
/// override's) on every path it names must be admitted.
fn overrides(
    head: &Head,
    query: Option<&str>,
    rules: &[RequestRule],
    (host, port): (&str, u16),
    normal: &NormalPath,
) -> Result<(), Refusal> {
    // What names a method or path besides the request line: where (for
    // messages), what kind, the text.
    let mut named: Vec<(String, Override, String)> = Vec::new();
    for (name, value) in &head.headers {
        if let Some((_, kind)) = OVERRIDES.iter().find(|(o, _)| is_header(name, o)) {
            let text = String::from_utf8_lossy(value).trim().to_string();
            named.push((format!("its {name} header"), *kind, text));
        }
    }
    // `;` too: some servers split on it (PHP's arg_separator.input).
    for pair in query.unwrap_or("").split(['&', ';']) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if names_method_parameter(key) {
            let text = percent_decoded(value).trim().to_string();
            named.push((format!("its {key} query parameter"), Override::Method, text));
        }
    }
    // Each with what names it (`None`: the request line).
    let mut methods: Vec<(&str, Option<&str>)> = vec![(head.method.as_str(), None)];
    let mut paths: Vec<(NormalPath, Option<&str>)> = vec![(normal.clone(), None)];
    for (source, kind, text) in &named {
        let forbidden = |why: String| {
            refusal(
                403,
                "Forbidden",
                format!("{source} {why} (a server may read it instead of the request line)"),
            )
        };
        match kind {
            Override::Method if plain_method(text) => methods.push((text, Some(source))),
            Override::Method => {
                return Err(forbidden(format!("names no plain method ({text:?})")));
            }
            Override::Path => {
                let path = text.split('?').next().unwrap_or("");
                if !path.starts_with('/') {
                    return Err(forbidden(format!("is no origin-form path ({text:?})")));
                }
                let other = normalize_path(path)
                    .map_err(|problem| forbidden(format!("names a refused path: {problem}")))?;
                paths.push((other, Some(source)));
            }
        }
    }
    for (method, by_method) in &methods {
        for (path, by_path) in &paths {
            if !rules
                .iter()
                .any(|r| r.admits_normal(method, host, port, path))
            {
                let source = by_method.or(*by_path).unwrap_or("an override");
                return Err(refusal(
                    403,
                    "Forbidden",
                    format!(
                        "{source} asks for {method} {}, which no request rule admits \
                         (a server may read it instead of the request line)",
                        url(host, port, &path.to_string())
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Whether a query parameter's (raw) name is `_method` as a server may
/// read it, case aside. PHP (which Symfony and Laravel run on) reads
/// `+` as a space, decodes `%XX`, ends the name at a NUL, drops leading
/// spaces, and maps `.` and space (and a `[` that no `]` closes) to `_`:
/// `.method`, `%20_method`, `+_method` and `_method%00x` are all its
/// `$_GET['_method']`; `_method[x]` is an array under that name. So the
/// name is read that way, and both it whole and its part before a `[`
/// are compared (with every `[` read as `_`, a bit wider than PHP).
fn names_method_parameter(key: &str) -> bool {
    let decoded = percent_decoded(&key.replace('+', " "));
    let name = decoded.split('\0').next().unwrap_or("");
    let name = name.trim_start_matches(' ');
    let php = |text: &str| -> String {
        text.chars()
            .map(|c| if matches!(c, '.' | ' ' | '[') { '_' } else { c })
            .collect()
    };
    let base = name.split('[').next().unwrap_or("");
    php(name).eq_ignore_ascii_case("_method") || php(base).eq_ignore_ascii_case("_method")
}

/// `text` with its `%XX` escapes decoded (`+` kept), lossily as UTF-8.
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |at: usize| bytes.get(at).and_then(|b| char::from(*b).to_digit(16));
        if bytes[i] == b'%' {
            if let (Some(h), Some(l)) = (hex(i + 1), hex(i + 2)) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The URL of a request to `host:port` at `path`, for messages.
pub(crate) fn url(host: &str, port: u16, path: &str) -> String {
    if port == 443 {
        format!("https://{host}{path}")
    } else {
        format!("https://{host}:{port}{path}")
    }
}

/// The explanation of a refusal: the `--allow-request` flag that would
/// admit it (the `Sandbox-Admit-With` header), and the body.
pub(crate) fn explanation(refused: &Refusal, shown: &str) -> (Option<String>, String) {
    let admit = refused
        .admit_with
        .as_ref()
        .and_then(|r| sandbox_core::request::flag("--allow-request", r).ok());
    let mut body = format!("sandbox egress proxy: refused {shown}: {}", refused.why);
    if let Some(flag) = &admit {
        body.push_str(&format!("; to admit it: {flag}"));
    }
    body.push('\n');
    (admit, body)
}

/// Answers a refusal over the client's connection, the rule that would
/// admit it in a `Sandbox-Admit-With` header and the body.
fn answer(client: &mut impl Client, refused: &Refusal, shown: &str) {
    let (admit, body) = explanation(refused, shown);
    let mut text = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n",
        refused.code,
        refused.reason,
        body.len()
    );
    if let Some(flag) = &admit {
        text.push_str(&format!("Sandbox-Admit-With: {flag}\r\n"));
    }
    text.push_str("\r\n");
    text.push_str(&body);
    let _ = client.write_all(text.as_bytes());
    let _ = client.flush();
    client.close_notify();
    let _ = client.flush();
    // Read (and drop) a little of what the client still sends (a body the
    // proxy refused), so that closing does not reset the connection before
    // the client read the answer.
    client.shutdown(std::net::Shutdown::Write);
    let deadline = std::time::Instant::now() + Duration::from_millis(500);
    let mut sink = [0u8; 16 * 1024];
    let mut drained = 0usize;
    while drained < crate::http::REFUSED_BODY_DRAIN {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            break;
        }
        client.set_read_timeout(Some(left));
        match client.read_raw(&mut sink) {
            Ok(0) | Err(_) => break,
            Ok(n) => drained += n,
        }
    }
}

/// Serves one intercepted `CONNECT host:port`: `early` are the bytes the
/// client sent after its HTTP `CONNECT` head (`None` for SOCKS5, whose
/// success reply was sent already).
pub(crate) fn serve(
    slot: &Slot,
    interceptor: &Arc<Interceptor>,
    mut client: TcpStream,
    host: &str,
    port: u16,
    early: Option<&[u8]>,
) {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    let Ok(config) = interceptor.ca.server_config(&host) else {
        return;
    };
    let Ok(mut conn) = ServerConnection::new(config) else {
        return;
    };
    if early.is_some()
        && client
            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .is_err()
    {
        return;
    }
    if let Some(mut early) = early.filter(|e| !e.is_empty()) {
        if conn.read_tls(&mut early).is_err() || conn.process_new_packets().is_err() {
            return;
        }
    }
    let opts = &slot.shared.opts;
    let _ = client.set_read_timeout(Some(opts.head_timeout));
    let _ = client.set_write_timeout(Some(IDLE));
    unpaced(&client);
    let mut tls = StreamOwned::new(conn, client);
    // A client that does not trust the run's CA (it pins certificates, or
    // reads no CA variable) fails the handshake: nothing was sent. When it
    // says so (a certificate alert), that is recorded: the run's failure
    // then names its cause.
    while tls.conn.is_handshaking() {
        if let Err(e) = tls.conn.complete_io(&mut tls.sock) {
            if let Some(alert) = certificate_alert(&e) {
                let refused = refusal(
                    0,
                    "",
                    format!(
                        "the client refused the run CA's certificate ({alert}): it pins \
                         certificates or does not read the CA variables (SSL_CERT_FILE, ...), \
                         so its requests cannot be intercepted"
                    ),
                );
                record(&slot.shared, &host, port, "", "", &refused);
            }
            return;
        }
    }
    // HTTP/2 when the client chose it: each stream is checked as an
    // HTTP/1.1 request by [`exchange`] ([`super::h2`]).
    if tls.conn.alpn_protocol() == Some(b"h2") {
        super::h2::serve(slot, interceptor, tls, &host, port);
        return;
    }
    let mut client = Buffered::new(tls);
    // Request after request while each response can be framed for the
    // client; every one is checked.
    loop {
        client.stream.set_read_timeout(Some(opts.head_timeout));
        if !exchange(slot, interceptor, &mut client, &host, port) {
            return;
        }
    }
}

/// Sends on the command's connection (a local hop: loopback or the run's
/// own namespace) with CUBIC, which does not pace, where the host's default
/// congestion control may (BBR paces every flow, spreading a 256 KiB batch
/// of records over timer ticks). Measured on a 100 MB download: the
/// command's curl spent 4-7 ms less CPU per 100 MB (of about 70), the
/// proxy the same. Best effort: a kernel without CUBIC keeps its default.
fn unpaced(sock: &TcpStream) {
    use std::os::fd::AsRawFd;
    const CUBIC: &[u8] = b"cubic";
    // SAFETY: setsockopt reads CUBIC.len() bytes from a live static slice;
    // the descriptor is `sock`'s, open for the call.
    unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            CUBIC.as_ptr().cast(),
            CUBIC.len() as libc::socklen_t,
        );
    }
}

/// Reads, checks and forwards one request; whether the connection may carry
/// another.
pub(crate) fn exchange(
    slot: &Slot,
    interceptor: &Interceptor,
    client: &mut Buffered<impl Client>,
    host: &str,
    port: u16,
) -> bool {
    let host = host.to_string();
    let opts = &slot.shared.opts;
    let head = match read_head(client, opts.max_head_bytes) {
        Ok(Some(head)) => head,
        Ok(None) => return false,
        Err(refused) => {
            record(&slot.shared, &host, port, "", "", &refused);
            answer(
                &mut client.stream,
                &refused,
                &format!("a request to {host}"),
            );
            return false;
        }
    };
    if let Some(refused) = placeholder_refusal(&head, interceptor, &host, port) {
        let path = head.target.split('?').next().unwrap_or("");
        let shown = format!("{} {}", head.method, url(&host, port, path));
        record(&slot.shared, &host, port, &head.method, path, &refused);
        answer(&mut client.stream, &refused, &shown);
        return false;
    }
    let admitted = match admit(&head, interceptor.rules(), &host, port) {
        Ok(admitted) => Ok(admitted),
        // Only a request one rule would admit is asked about (never a
        // shape or a path refused whatever the rules).
        Err(refused) => match approved_rule(slot, &head, &host, port, &refused) {
            Some(rule) => admit(&head, std::slice::from_ref(&rule), &host, port),
            None => Err(refused),
        },
    };
    let (target, body) = match admitted {
        Ok(admitted) => admitted,
        Err(refused) => {
            let path = head.target.split('?').next().unwrap_or("");
            let shown = format!("{} {}", head.method, url(&host, port, path));
            record(&slot.shared, &host, port, &head.method, path, &refused);
            answer(&mut client.stream, &refused, &shown);
            return false;
        }
    };
    forward(slot, interceptor, client, &head, &host, port, &target, body)
}

/// The rule that would admit a refused request, when a decider was asked
/// and admitted it.
fn approved_rule(
    slot: &Slot,
    head: &Head,
    host: &str,
    port: u16,
    refused: &Refusal,
) -> Option<RequestRule> {
    let text = refused.admit_with.as_deref()?;
    let rule: RequestRule = text.parse().ok()?;
    let path = head.target.split('?').next().unwrap_or("");
    let path = normalize_path(path).ok()?;
    let pending = crate::hold::Pending::Request {
        host: host.to_string(),
        port,
        method: head.method.clone(),
        url: url(host, port, &path.to_string()),
        rule: text.to_string(),
    };
    match slot.shared.hold(pending)? {
        Ok(settled) if settled.decision().admits() => Some(rule),
        _ => None,
    }
}

/// A request that carries a secret's placeholder where it may not go: in
/// its target, or in a header to a host the secret is not for.
fn placeholder_refusal(
    head: &Head,
    interceptor: &Interceptor,
    host: &str,
    port: u16,
) -> Option<Refusal> {
    if let Some(secret) = interceptor
        .placeholder_in(head.target.as_bytes())
        .or_else(|| interceptor.placeholder_in(head.method.as_bytes()))
    {
        return Some(refusal(
            403,
            "Forbidden",
            format!(
                "the request carries the placeholder of the secret {} in its target or method, \
                 where no secret goes (attempted exfiltration)",
                secret.name()
            ),
        ));
    }
    for (name, value) in &head.headers {
        let Some(secret) = interceptor
            .placeholder_in(value)
            .or_else(|| interceptor.placeholder_in(name.as_bytes()))
        else {
            continue;
        };
        if !super::goes_to(secret, host, port)
            || interceptor.placeholder_in(name.as_bytes()).is_some()
        {
            return Some(refusal(
                403,
                "Forbidden",
                format!(
                    "the request carries the placeholder of the secret {}, which goes only to {} \
                     (attempted exfiltration)",
                    secret.name(),
                    secret.hosts().join(", ")
                ),
            ));
        }
    }
    None
}

/// The certificate alert a client sent during the handshake, if that is
/// why it failed.
fn certificate_alert(e: &io::Error) -> Option<String> {
    use rustls::AlertDescription as A;
    match e.get_ref()?.downcast_ref::<rustls::Error>()? {
        rustls::Error::AlertReceived(
            alert @ (A::UnknownCA
            | A::BadCertificate
            | A::CertificateUnknown
            | A::UnsupportedCertificate
            | A::CertificateExpired
            | A::AccessDenied),
        ) => Some(format!("{alert:?}")),
        _ => None,
    }
}

pub(crate) fn record(
    shared: &crate::state::Shared,
    host: &str,
    port: u16,
    method: &str,
    path: &str,
    refused: &Refusal,
) {
    shared.refuse(Refused {
        host: host.to_string(),
        port,
        reason: RefusalReason::Request {
            method: method.to_string(),
            path: path.to_string(),
            why: refused.why.clone(),
            admit_with: refused.admit_with.clone(),
        },
    });
}

/// The head sent to the origin, the secrets for `host` written into its
/// header values in place of their placeholders.
fn origin_head(head: &Head, host: &str, port: u16, target: &str, secrets: &[Secret]) -> Vec<u8> {
    let authority = if port == 443 {
        host.to_string()
    } else {
        format!("{host}:{port}")
    };
    let mut out =
        format!("{} {target} HTTP/1.1\r\nHost: {authority}\r\n", head.method).into_bytes();
    for (name, value) in &head.headers {
        if dropped(name, !secrets.is_empty()) {
            continue;
        }
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(&super::inject(value, secrets, host, port));
        out.extend_from_slice(b"\r\n");
    }
    // With secrets, the response is masked as the client will read it:
    // the origin is asked only for codings the proxy decodes.
    if !secrets.is_empty() {
        let asked = super::body::accept_encoding(values(head, "accept-encoding"));
        out.extend_from_slice(format!("Accept-Encoding: {asked}\r\n").as_bytes());
    }
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    out
}

/// Connects to the origin and verifies it.
fn connect_origin(
    slot: &Slot,
    interceptor: &Interceptor,
    host: &str,
    port: u16,
) -> Result<OriginTls, String> {
    let tcp =
        crate::target::open_intercepted(&slot.shared, host, port).map_err(|f| f.to_string())?;
    slot.track(&tcp);
    let _ = tcp.set_read_timeout(Some(IDLE));
    let _ = tcp.set_write_timeout(Some(IDLE));
    let name = ServerName::try_from(host.to_string()).map_err(|e| e.to_string())?;
    let conn = ClientConnection::new(Arc::clone(&interceptor.upstream), name)
        .map_err(|e| e.to_string())?;
    let mut tls = StreamOwned::new(conn, ReadAhead::new(tcp));
    while tls.conn.is_handshaking() {
        tls.conn
            .complete_io(&mut tls.sock)
            .map_err(|e| format!("TLS with the origin failed: {e}"))?;
    }
    Ok(tls)
}

/// Why a request body was not sent whole.
enum BodyStop {
    /// The client or the origin failed (the connection ends).
    Io,
    /// It carried this secret's placeholder, which may not go to the origin.
    Placeholder(String, Vec<String>),
}

impl From<io::Error> for BodyStop {
    fn from(_: io::Error) -> Self {
        BodyStop::Io
    }
}

/// Where a request body goes: the origin, framed as the client framed it
/// (`Content-Length` bytes as they are, or re-encoded chunks), through the
/// placeholder guard when some secret may not go there.
struct BodySink<'a> {
    origin: &'a mut OriginTls,
    chunked: bool,
    guard: Option<super::BodyGuard<'a>>,
    /// What the guard passes on (reused).
    out: Vec<u8>,
}

impl BodySink<'_> {
    fn data(&mut self, bytes: &[u8]) -> Result<(), BodyStop> {
        match &mut self.guard {
            None => write_piece(self.origin, self.chunked, bytes)?,
            Some(guard) => {
                guard.pass(bytes, &mut self.out).map_err(|secret| {
                    BodyStop::Placeholder(secret.name().to_string(), secret.hosts().to_vec())
                })?;
                write_piece(self.origin, self.chunked, &self.out)?;
            }
        }
        Ok(())
    }

    fn end(&mut self) -> Result<(), BodyStop> {
        if let Some(guard) = &mut self.guard {
            let rest = guard.finish();
            write_piece(self.origin, self.chunked, &rest)?;
        }
        if self.chunked {
            self.origin.write_all(b"0\r\n\r\n")?;
        }
        Ok(())
    }
}

/// Writes body bytes to the origin (as one chunk when `chunked`).
fn write_piece(origin: &mut OriginTls, chunked: bool, bytes: &[u8]) -> io::Result<()> {
    if bytes.is_empty() {
        return Ok(());
    }
    if chunked {
        let mut framed = Vec::with_capacity(bytes.len() + 20);
        framed.extend_from_slice(format!("{:x}\r\n", bytes.len()).as_bytes());
        framed.extend_from_slice(bytes);
        framed.extend_from_slice(b"\r\n");
        origin.write_all(&framed)
    } else {
        origin.write_all(bytes)
    }
}

/// Copies exactly `n` bytes of the client's body to `sink`.
fn copy_length(
    client: &mut Buffered<impl Client>,
    sink: &mut BodySink<'_>,
    mut n: u64,
) -> Result<(), BodyStop> {
    while n > 0 {
        if client.buf.is_empty() {
            // Straight from the read buffer, no copy into `buf`.
            let got = client.read_chunk()?;
            if got == 0 {
                return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into());
            }
            let take = usize::try_from(n).unwrap_or(usize::MAX).min(got);
            sink.data(&client.chunk[..take])?;
            if take < got {
                let rest = client.chunk[take..got].to_vec();
                client.buf.extend_from_slice(&rest);
            }
            n -= take as u64;
            continue;
        }
        let take = usize::try_from(n)
            .unwrap_or(usize::MAX)
            .min(client.buf.len());
        sink.data(&client.buf[..take])?;
        client.buf.drain(..take);
        n -= take as u64;
    }
    Ok(())
}

/// Copies a chunked body's data to `sink` (which frames it in chunks of
/// its own, extensions dropped), read by the proxy's one chunked decoder
/// ([`crate::chunked`]); a body with trailers is refused (they are not
/// forwarded). What follows the body stays in the client's buffer.
fn copy_chunked(
    client: &mut Buffered<impl Client>,
    sink: &mut BodySink<'_>,
) -> Result<(), BodyStop> {
    use crate::chunked::{Decoder, Error};
    let mut decoder = Decoder::new();
    let mut data = |bytes: &[u8]| sink.data(bytes);
    let mut feed = |decoder: &mut Decoder, bytes: &[u8]| -> Result<usize, BodyStop> {
        decoder.feed(bytes, &mut data).map_err(|e| match e {
            Error::Sink(stop) => stop,
            Error::Malformed(_) => BodyStop::Io,
        })
    };
    if !client.buf.is_empty() {
        let buffered = std::mem::take(&mut client.buf);
        let used = feed(&mut decoder, &buffered)?;
        client.buf = buffered;
        client.buf.drain(..used);
    }
    while !decoder.done() {
        let n = client.read_chunk()?;
        if n == 0 {
            return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into());
        }
        let used = feed(&mut decoder, &client.chunk[..n])?;
        if used < n {
            let rest = client.chunk[used..n].to_vec();
            client.buf.extend_from_slice(&rest);
        }
    }
    if !decoder.trailers().is_empty() {
        return Err(BodyStop::Io);
    }
    Ok(())
}

/// How a response was relayed.
enum Relayed {
    /// Whether the client's connection may carry another request.
    Done(bool),
    /// Refused (recorded): `answer` when nothing of it reached the client
    /// yet (it is answered 502), else the connection is cut.
    Refused { why: String, answer: bool },
}

/// Reads the origin's response heads (1xx ones passed on) and writes them
/// to the client, then relays the rest until the origin closes; whether the
/// client's connection may carry another request (`keep`, and the final
/// response framed and relayed whole; otherwise it says `Connection:
/// close` and the proxy ends the connection). While something is to be
/// masked, a chunked or `gzip`/`deflate` body is de-chunked, decoded and
/// masked, and relayed in chunks without `Content-Encoding`
/// ([`super::body`]); another content coding is refused. While the run has
/// `secrets`, a `206 Partial Content` is refused (the proxy asked for no
/// range: [`DROPPED_WITH_SECRETS`]).
fn relay_response(
    origin: &mut Buffered<OriginTls>,
    client: &mut impl Client,
    (head_request, keep, secrets): (bool, bool, bool),
    mut scrub: super::Scrub,
) -> io::Result<Relayed> {
    use super::body::{self, Coding, Framing};
    let bad = |why: String| io::Error::new(io::ErrorKind::InvalidData, why);
    // The final response's body length, when the client can frame it
    // without the connection's end: no body, or one Content-Length.
    let mut framed: Option<u64>;
    // The final response's body when it is decoded: its framing, coding.
    let mut decoded: Option<(Framing, Coding)>;
    loop {
        let (len, code, out, length, plan) = loop {
            let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
            let mut resp = httparse::Response::new(&mut slots);
            match resp.parse(&origin.buf) {
                Ok(httparse::Status::Complete(len)) => {
                    let code = resp.code.unwrap_or(502);
                    if secrets && code == 206 {
                        return Ok(Relayed::Refused {
                            why: partial_refused(),
                            answer: true,
                        });
                    }
                    let header = |name: &'static str| {
                        resp.headers
                            .iter()
                            .filter(move |h| h.name.eq_ignore_ascii_case(name))
                            .map(|h| h.value)
                    };
                    let lengths: Vec<&[u8]> = header("content-length").collect();
                    let encodings: Vec<&[u8]> = header("transfer-encoding").collect();
                    let chunked = !encodings.is_empty();
                    let no_body = head_request || code == 204 || code == 304 || code < 200;
                    let length = if no_body {
                        Some(0)
                    } else {
                        match (chunked, lengths.as_slice()) {
                            (false, [one]) => std::str::from_utf8(one)
                                .ok()
                                .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
                                .and_then(|t| t.parse::<u64>().ok()),
                            _ => None,
                        }
                    };
                    // With something to mask, the body the client reads
                    // is what is masked: a chunked one de-chunked, a
                    // compressed one decoded.
                    let mut plan = None;
                    if !scrub.is_empty() && !no_body {
                        let coding = match body::coding(header("content-encoding")) {
                            Ok(coding) => coding,
                            Err(why) => return Ok(Relayed::Refused { why, answer: true }),
                        };
                        let framing = match encodings.as_slice() {
                            [] => length.map_or(Framing::Close, Framing::Length),
                            [one] if one.eq_ignore_ascii_case(b"chunked") => Framing::Chunked,
                            _ => {
                                return Ok(Relayed::Refused {
                                    why: "the response's Transfer-Encoding is not exactly \
                                          'chunked' while the run has secrets: its body could \
                                          carry a secret's value in a form the proxy cannot mask"
                                        .into(),
                                    answer: true,
                                })
                            }
                        };
                        if framing == Framing::Chunked || coding != Coding::Identity {
                            plan = Some((framing, coding));
                        }
                    }
                    // The reason phrase and header names are the origin's
                    // text as much as the values: an origin may reflect a
                    // request header there (`401 bad credentials: ...`).
                    let mut out = format!("HTTP/1.1 {code} ").into_bytes();
                    out.extend_from_slice(&scrub.head_value(resp.reason.unwrap_or("").as_bytes()));
                    out.extend_from_slice(b"\r\n");
                    for h in resp.headers.iter() {
                        let mut dropped = vec!["connection", "keep-alive", "proxy-connection"];
                        if let Some((_, coding)) = plan {
                            dropped.extend(["content-length", "transfer-encoding"]);
                            if coding != Coding::Identity {
                                dropped.push("content-encoding");
                            }
                        }
                        if dropped.iter().any(|d| h.name.eq_ignore_ascii_case(d)) {
                            continue;
                        }
                        out.extend_from_slice(&scrub.head_value(h.name.as_bytes()));
                        out.extend_from_slice(b": ");
                        out.extend_from_slice(&scrub.head_value(h.value));
                        out.extend_from_slice(b"\r\n");
                    }
                    if plan.is_some() {
                        out.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
                    }
                    if code >= 200 && !(keep && (length.is_some() || plan.is_some())) {
                        out.extend_from_slice(b"Connection: close\r\n");
                    }
                    out.extend_from_slice(b"\r\n");
                    break (len, code, out, length, plan);
                }
                Ok(httparse::Status::Partial) => {
                    if origin.buf.len() > 64 * 1024 {
                        return Err(bad("the origin's response head is too large".into()));
                    }
                    if origin.fill()? == 0 {
                        return Err(bad("the origin closed before its response".into()));
                    }
                }
                Err(e) => return Err(bad(format!("the origin's response is malformed: {e}"))),
            }
        };
        origin.buf.drain(..len);
        client.write_all(&out)?;
        framed = length;
        decoded = plan;
        if code >= 200 {
            break;
        }
    }
    if let Some((framing, coding)) = decoded {
        let mut masked = body::Masked::new(scrub, framing, coding, true, body::MAX_DECODED);
        let first = std::mem::take(&mut origin.buf);
        let mut result = masked.feed(&first, client);
        while result.is_ok() && !masked.done() {
            match origin.read_chunk() {
                Ok(0) => result = masked.finish(client),
                Ok(n) => result = masked.feed(&origin.chunk[..n], client),
                Err(e) => result = Err(body::BodyError::Io(e)),
            }
        }
        client.flush()?;
        return match result {
            Ok(()) if keep => Ok(Relayed::Done(true)),
            Ok(()) => {
                client.close_notify();
                client.flush()?;
                Ok(Relayed::Done(false))
            }
            // The client's framing is not ended: it sees the body cut.
            Err(e @ body::BodyError::TooLarge(_)) => Ok(Relayed::Refused {
                why: e.to_string(),
                answer: false,
            }),
            Err(body::BodyError::Io(e)) => Err(e),
            Err(body::BodyError::Malformed(_)) => Ok(Relayed::Done(false)),
        };
    }
    // The origin closes after its response (the proxy asked it to). The
    // values injected into the request are masked in what it returns.
    let first = scrub.body(&origin.buf);
    let mut relayed = first.len() as u64;
    client.write_all(&first)?;
    origin.buf.clear();
    if scrub.is_empty() {
        // Nothing to mask: the records read ahead are decrypted and
        // re-encrypted for the client in batches, written when the batch
        // is full or before a read that may wait.
        client.batch(Some(SEND_BATCH));
        let copied = (|| loop {
            if origin.stream.sock.drained() {
                client.send_now()?;
            }
            // The plaintext as rustls holds it, not copied out first.
            let plain = match io::BufRead::fill_buf(&mut origin.stream) {
                Ok(plain) => plain,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => &[],
                Err(e) => return Err(e),
            };
            let n = plain.len();
            if n == 0 {
                return client.send_now();
            }
            client.send_batched(plain)?;
            io::BufRead::consume(&mut origin.stream, n);
            relayed += n as u64;
        })();
        client.batch(None);
        copied?;
    }
    while !scrub.is_empty() {
        let n = origin.read_chunk()?;
        if n == 0 {
            break;
        }
        let out = scrub.body(&origin.chunk[..n]);
        client.write_all(&out)?;
        relayed += out.len() as u64;
    }
    let rest = scrub.finish();
    client.write_all(&rest)?;
    relayed += rest.len() as u64;
    client.flush()?;
    // Another request may follow only after a body of exactly the length
    // announced: anything else ends the connection.
    if keep && framed == Some(relayed) {
        return Ok(Relayed::Done(true));
    }
    client.close_notify();
    client.flush()?;
    Ok(Relayed::Done(false))
}

/// Why a `206 Partial Content` response is refused while the run has
/// secrets (also on the plain `http://` relay).
pub(crate) fn partial_refused() -> String {
    "the origin answered 206 Partial Content while the run has secrets: parts of a response, \
     each masked alone, could carry a secret's value in pieces (the proxy drops Range and \
     If-Range from requests)"
        .into()
}

#[allow(clippy::too_many_arguments)]
fn forward(
    slot: &Slot,
    interceptor: &Interceptor,
    client: &mut Buffered<impl Client>,
    head: &Head,
    host: &str,
    port: u16,
    target: &str,
    body: Body,
) -> bool {
    let mut origin = match connect_origin(slot, interceptor, host, port) {
        Ok(origin) => origin,
        Err(why) => {
            let failed = refusal(
                502,
                "Bad Gateway",
                format!("cannot reach the origin: {why}"),
            );
            answer(
                &mut client.stream,
                &failed,
                &format!("{} {}", head.method, url(host, port, target)),
            );
            return false;
        }
    };
    client.stream.set_read_timeout(Some(IDLE));
    // As a tunnel's: once the command has ended its side, the origin may
    // stay silent HALF_CLOSED_IDLE at most (not IDLE).
    origin.sock.heard_by(
        client.stream.fd(),
        crate::relay::HALF_CLOSED_IDLE,
        slot.silence_note(),
    );
    let sent = origin_head(head, host, port, target, interceptor.secrets());
    if origin.write_all(&sent).is_err() {
        return false;
    }
    // The proxy answers `Expect: 100-continue` itself (it dropped it).
    let expects = values(head, "expect").any(|v| v.eq_ignore_ascii_case(b"100-continue"));
    if expects
        && !matches!(body, Body::None)
        && client
            .stream
            .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
            .and_then(|()| client.stream.flush())
            .is_err()
    {
        return false;
    }
    // A secret's placeholder may not go in the body to a host the secret
    // is not for. The head left already: on finding one the origin's
    // connection is dropped mid-body (the request never completes there)
    // and the client answered 403.
    let guard = super::BodyGuard::new(
        interceptor
            .secrets()
            .iter()
            .filter(|s| !super::goes_to(s, host, port)),
    );
    let mut sink = BodySink {
        origin: &mut origin,
        chunked: matches!(body, Body::Chunked),
        guard,
        out: Vec::new(),
    };
    let sent = match body {
        Body::None => Ok(()),
        Body::Length(n) => copy_length(client, &mut sink, n),
        Body::Chunked => copy_chunked(client, &mut sink),
    }
    .and_then(|()| sink.end());
    match sent {
        Ok(()) => {}
        Err(BodyStop::Io) => return false,
        Err(BodyStop::Placeholder(name, hosts)) => {
            let _ = origin.sock.shutdown(std::net::Shutdown::Both);
            drop(origin);
            let refused = refusal(
                403,
                "Forbidden",
                format!(
                    "the request body carries the placeholder of the secret {name}, which goes \
                     only to {} (attempted exfiltration; the request was cut off before it)",
                    hosts.join(", ")
                ),
            );
            let path = head.target.split('?').next().unwrap_or("");
            let shown = format!("{} {}", head.method, url(host, port, path));
            record(&slot.shared, host, port, &head.method, path, &refused);
            answer(&mut client.stream, &refused, &shown);
            return false;
        }
    }
    if origin.flush().is_err() {
        return false;
    }
    let mut origin = Buffered::new(origin);
    // The client may send another request unless it said it would not.
    let keep = !values(head, "connection").any(|v| {
        String::from_utf8_lossy(v)
            .split(',')
            .any(|t| t.trim().eq_ignore_ascii_case("close"))
    });
    // Every secret's value in each form, and every credential re-encoded
    // in the run (an origin may serve one stored earlier), not only this
    // request's.
    let scrub = interceptor.scrub(head.headers.iter().map(|(_, v)| {
        (
            v.as_slice(),
            super::inject(v, interceptor.secrets(), host, port),
        )
    }));
    match relay_response(
        &mut origin,
        &mut client.stream,
        (
            head.method == "HEAD",
            keep,
            !interceptor.secrets().is_empty(),
        ),
        scrub,
    ) {
        Ok(Relayed::Done(keep)) => keep,
        Ok(Relayed::Refused {
            why,
            answer: unsent,
        }) => {
            let refused = refusal(502, "Bad Gateway", why);
            let path = head.target.split('?').next().unwrap_or("");
            record(&slot.shared, host, port, &head.method, path, &refused);
            if unsent {
                let shown = format!("the response to {} {}", head.method, url(host, port, path));
                answer(&mut client.stream, &refused, &shown);
            } else {
                client.stream.shutdown(std::net::Shutdown::Both);
            }
            false
        }
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(raw: &str) -> Head {
        let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut req = httparse::Request::new(&mut slots);
        assert!(matches!(
            req.parse(raw.as_bytes()),
            Ok(httparse::Status::Complete(_))
        ));
        Head {
            method: req.method.unwrap().into(),
            target: req.path.unwrap().into(),
            headers: req
                .headers
                .iter()
                .map(|h| (h.name.into(), h.value.to_vec()))
                .collect(),
        }
    }

    fn rules() -> Vec<RequestRule> {
        vec!["GET,HEAD https://pkgs.example.com/simple/**"
            .parse()
            .unwrap()]
    }

    /// `raw` refused by [`rules`] at pkgs.example.com:443 with a 403; the
    /// rule the refusal proposes.
    #[track_caller]
    fn proposed_on_403(raw: &str) -> Option<String> {
        let refused = admit(&head(raw), &rules(), "pkgs.example.com", 443)
            .err()
            .unwrap();
        assert_eq!(refused.code, 403);
        refused.admit_with
    }

    fn check(raw: &str) -> Result<String, String> {
        admit(&head(raw), &rules(), "pkgs.example.com", 443)
            .map(|(t, _)| t)
            .map_err(|r| format!("{} {}", r.code, r.why))
    }

    #[test]
    fn admitted_requests_are_sent_normalised_and_refusals_name_the_rule() {
        assert_eq!(
            check("GET /simple/./a//b%7e?x=1 HTTP/1.1\r\nHost: pkgs.example.com\r\n\r\n").unwrap(),
            "/simple/a/b~?x=1"
        );
        assert_eq!(
            check("HEAD /simple/ HTTP/1.1\r\nHost: pkgs.example.com:443\r\n\r\n").unwrap(),
            "/simple/"
        );
        assert_eq!(
            proposed_on_403("POST /simple/x HTTP/1.1\r\n\r\n").unwrap(),
            "POST https://pkgs.example.com/simple/x"
        );
        // Its twin: the path outside the pattern, also through dot segments
        // and escapes.
        assert!(check("GET /private HTTP/1.1\r\n\r\n")
            .unwrap_err()
            .starts_with("403"));
        assert!(check("GET /simple/../private HTTP/1.1\r\n\r\n")
            .unwrap_err()
            .starts_with("403"));
        assert!(check("GET /simple/%2e%2e/private HTTP/1.1\r\n\r\n")
            .unwrap_err()
            .starts_with("403"));
        assert!(check("GET /simple%2f..%2fprivate HTTP/1.1\r\n\r\n")
            .unwrap_err()
            .starts_with("403"));
    }

    /// Finding 4: a method that is not plain is refused before the rules,
    /// with no rule proposed (`*` as a rule admits every method), even
    /// where a `*` rule would admit it; the twin: a plain method refused by
    /// the rules gets its exact rule.
    #[test]
    fn a_method_that_is_not_plain_is_refused_with_no_proposal() {
        let any: Vec<RequestRule> = vec!["* https://pkgs.example.com/**".parse().unwrap()];
        for method in ["*", "get", "G*T", "SANDBOX_SECRET_0a"] {
            let raw = format!("{method} /upload HTTP/1.1\r\n\r\n");
            for rules in [rules(), any.clone()] {
                let refused = admit(&head(&raw), &rules, "pkgs.example.com", 443)
                    .err()
                    .unwrap();
                assert_eq!(refused.code, 400, "{method}");
                assert!(refused.why.contains("not a plain one"), "{}", refused.why);
                assert!(refused.admit_with.is_none());
            }
        }
        assert_eq!(
            proposed_on_403("M-SEARCH /upload HTTP/1.1\r\n\r\n").as_deref(),
            Some("M-SEARCH https://pkgs.example.com/upload")
        );
        assert!(admit(
            &head("DELETE /upload HTTP/1.1\r\n\r\n"),
            &any,
            "pkgs.example.com",
            443
        )
        .is_ok());
    }

    /// Finding 5: a method or URL override header must name what the rules
    /// admit there; the twins: one naming an admitted method or path, and
    /// the request without it, pass.
    #[test]
    fn override_headers_must_name_what_the_rules_admit() {
        let ok = "GET /simple/a HTTP/1.1\r\nHost: pkgs.example.com\r\n";
        assert!(check(&format!("{ok}\r\n")).is_ok());
        for admitted in [
            "X-HTTP-Method-Override: HEAD",
            "x-method-override:  GET ",
            "X-HTTP-Method: HEAD",
            "X-Original-URL: /simple/b?q=1",
            "X-Rewrite-URL: /simple/./c/",
            "X_HTTP_Method_Override: HEAD",
        ] {
            assert_eq!(
                check(&format!("{ok}{admitted}\r\n\r\n")).unwrap(),
                "/simple/a",
                "{admitted}"
            );
        }
        for (refused, why) in [
            (
                "X-HTTP-Method-Override: DELETE",
                "asks for DELETE https://pkgs.example.com/simple/a",
            ),
            (
                "X-Method-Override: PUT",
                "X-Method-Override header asks for PUT",
            ),
            ("X-HTTP-Method: POST", "X-HTTP-Method header asks for POST"),
            ("X-HTTP-Method-Override: *", "names no plain method"),
            (
                "X-HTTP-Method-Override: GET, DELETE",
                "names no plain method",
            ),
            ("X-HTTP-Method-Override: delete", "names no plain method"),
            ("X_HTTP_METHOD_OVERRIDE: DELETE", "asks for DELETE"),
            (
                "X-HTTP-Method-Override: DELETE",
                "its X-HTTP-Method-Override header asks",
            ),
            (
                "X_Original_URL: /private",
                "asks for GET https://pkgs.example.com/private",
            ),
            (
                "X-Original-URL: /private",
                "asks for GET https://pkgs.example.com/private",
            ),
            (
                "X-Rewrite-URL: /simple/../admin",
                "asks for GET https://pkgs.example.com/admin",
            ),
            (
                "X-Original-URL: /simple/%2e%2e/%2e%2e/x",
                "names a refused path",
            ),
            (
                "X-Original-URL: https://pkgs.example.com/simple/a",
                "no origin-form path",
            ),
        ] {
            let err = check(&format!("{ok}{refused}\r\n\r\n")).unwrap_err();
            assert!(
                err.starts_with("403") && err.contains(why),
                "{refused}: {err}"
            );
        }
        // The `_method` query parameter (any escaping of its name), beside
        // its twins: an admitted method, another parameter.
        let req = |q: &str| check(&format!("GET /simple/a?{q} HTTP/1.1\r\n\r\n"));
        for admitted in [
            "_method=HEAD",
            "a=1&_method=GET",
            "method=DELETE",
            "x_method=PUT",
            // Twins of the PHP readings below: none of these is `_method`.
            "+method=DELETE",
            "%20method=DELETE",
            "_+method=DELETE",
            "x.method=DELETE",
            "_method_=DELETE",
            "a=_method;b=DELETE",
            "+_method=GET",
            ".method=HEAD",
        ] {
            assert!(req(admitted).is_ok(), "{admitted}");
        }
        for (refused, why) in [
            (
                "_method=DELETE",
                "its _method query parameter asks for DELETE",
            ),
            (
                "a=1&%5Fmethod=PUT",
                "its %5Fmethod query parameter asks for PUT",
            ),
            ("_METHOD=%50UT", "asks for PUT"),
            ("_method=delete", "names no plain method"),
            ("_method", "names no plain method"),
            // PHP's reading of a name: `+` and `%20` a space, leading
            // spaces dropped, `.`, space and `[` read as `_`, the name
            // ended at a NUL, `[...]` an array under it; `;` separates.
            (
                ".method=DELETE",
                "its .method query parameter asks for DELETE",
            ),
            ("%2Emethod=DELETE", "asks for DELETE"),
            ("+_method=DELETE", "asks for DELETE"),
            ("%20_method=DELETE", "asks for DELETE"),
            ("++.METHOD=PUT", "asks for PUT"),
            ("%5Bmethod=DELETE", "asks for DELETE"),
            ("_method%00x=DELETE", "asks for DELETE"),
            ("_method[]=DELETE", "asks for DELETE"),
            ("_method%5Bx%5D=DELETE", "asks for DELETE"),
            ("a=1;_method=DELETE", "asks for DELETE"),
        ] {
            let err = req(refused).unwrap_err();
            assert!(
                err.starts_with("403") && err.contains(why),
                "{refused}: {err}"
            );
        }
        // Method and path together: HEAD admitted, on a refused path not.
        let err = check(&format!(
            "{ok}X-HTTP-Method-Override: HEAD\r\nX-Original-URL: /private\r\n\r\n"
        ))
        .unwrap_err();
        assert!(err.contains("/private"), "{err}");
    }

    #[test]
    fn smuggling_shapes_are_refused_beside_their_plain_twins() {
        let ok = "GET /simple/a HTTP/1.1\r\nHost: pkgs.example.com\r\nContent-Length: 0\r\n\r\n";
        assert!(check(ok).is_ok());
        for (raw, why) in [
            ("GET /simple/a HTTP/1.1\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n", "more than one Content-Length"),
            ("GET /simple/a HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", "Transfer-Encoding together"),
            ("GET /simple/a HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", "other than exactly"),
            ("GET /simple/a HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", "other than exactly"),
            ("GET /simple/a HTTP/1.1\r\nContent-Length: +3\r\n\r\n", "not a number"),
            ("GET /simple/a HTTP/1.1\r\nHost: pkgs.example.com\r\nHost: other.example.com\r\n\r\n", "more than one Host"),
            ("GET /simple/a HTTP/1.1\r\nHost: other.example.com\r\n\r\n", "the Host header names"),
            ("GET /simple/a HTTP/1.1\r\nHost: pkgs.example.com:8443\r\n\r\n", "the Host header names"),
            ("GET https://pkgs.example.com/simple/a HTTP/1.1\r\n\r\n", "origin form"),
        ] {
            let err = check(raw).unwrap_err();
            assert!(err.contains(why), "{raw:?}: {err}");
        }
        let chunked = "POST /simple/a HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n";
        let rules: Vec<RequestRule> =
            vec!["POST https://pkgs.example.com/simple/**".parse().unwrap()];
        assert!(matches!(
            admit(&head(chunked), &rules, "pkgs.example.com", 443),
            Ok((_, Body::Chunked))
        ));
    }

    #[test]
    fn raw_heads_must_be_plain_crlf() {
        assert!(plain_crlf(b"GET / HTTP/1.1\r\nA: b\r\n\r\n").is_ok());
        for (raw, why) in [
            (&b"GET / HTTP/1.1\r\nA: b\0c\r\n\r\n"[..], "NUL"),
            (b"GET / HTTP/1.1\r\nA: b\rX: c\r\n\r\n", "CR not followed"),
            (b"GET / HTTP/1.1\nA: b\r\n\r\n", "LF not preceded"),
            (b"GET / HTTP/1.1\r\nA: b\r\n c\r\n\r\n", "obs-fold"),
            (b"GET / HTTP/1.1\r\nA: b\r\n\tc\r\n\r\n", "obs-fold"),
        ] {
            let err = plain_crlf(raw).unwrap_err();
            assert!(err.contains(why), "{raw:?}: {err}");
        }
    }

    #[test]
    fn origin_heads_drop_hop_by_hop_fields_and_close() {
        let h = head(
            "GET /simple/ HTTP/1.1\r\nHost: pkgs.example.com\r\nConnection: keep-alive\r\nProxy-Authorization: x\r\nExpect: 100-continue\r\nAccept: */*\r\n\r\n",
        );
        assert_eq!(
            String::from_utf8(origin_head(&h, "pkgs.example.com", 443, "/simple/", &[])).unwrap(),
            "GET /simple/ HTTP/1.1\r\nHost: pkgs.example.com\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
        assert!(
            String::from_utf8(origin_head(&h, "pkgs.example.com", 8443, "/", &[]))
                .unwrap()
                .contains("Host: pkgs.example.com:8443\r\n")
        );
    }

    /// Findings 2 and 5: forwarding headers never reach the origin; while
    /// the run has secrets neither do `Range` and `If-Range` (the twin:
    /// without secrets they do).
    #[test]
    fn forwarding_headers_are_dropped_and_ranges_while_there_are_secrets() {
        let h = head(
            "GET /simple/ HTTP/1.1\r\nForwarded: host=evil\r\nX-Forwarded-Host: evil\r\nx-forwarded-proto: http\r\nX_Forwarded_Host: evil\r\nX-Forwarded-For: 1.2.3.4\r\nX-Host: evil\r\nRange: bytes=0-4\r\nIf-Range: \"e\"\r\nRequest-Range: bytes=1-2\r\nAccept: */*\r\n\r\n",
        );
        assert_eq!(
            String::from_utf8(origin_head(&h, "pkgs.example.com", 443, "/simple/", &[])).unwrap(),
            "GET /simple/ HTTP/1.1\r\nHost: pkgs.example.com\r\nRange: bytes=0-4\r\nIf-Range: \"e\"\r\nRequest-Range: bytes=1-2\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
        let spec: sandbox_core::SecretSpec = "TOKEN@api.example.com".parse().unwrap();
        let secrets = vec![Secret::new(&spec, b"s3cret".to_vec()).unwrap()];
        let sent = String::from_utf8(origin_head(
            &h,
            "pkgs.example.com",
            443,
            "/simple/",
            &secrets,
        ))
        .unwrap();
        assert!(
            sent.starts_with("GET /simple/ HTTP/1.1\r\nHost: pkgs.example.com\r\nAccept: */*\r\n"),
            "{sent}"
        );
        assert!(!sent.to_ascii_lowercase().contains("range"), "{sent}");
    }

    /// Finding G2: a header whose name holds a `_` (`SCRIPT_NAME`, which
    /// gunicorn 21.2 reads as the CGI variable) never reaches the origin,
    /// nor does a placeholder in one; the twin, `Script-Name`, is an
    /// ordinary header and is sent.
    #[test]
    fn headers_with_an_underscore_are_dropped_beside_their_dashed_twin() {
        let spec: sandbox_core::SecretSpec = "TOKEN@api.example.com".parse().unwrap();
        let secret = Secret::new(&spec, b"s3cret".to_vec()).unwrap();
        let p = secret.placeholder().to_string();
        let secrets = [secret];
        let h = head(&format!(
            "GET /simple/x/admin HTTP/1.1\r\nSCRIPT_NAME: /simple/x\r\nscript_name: /simple\r\nX_Token: {p}\r\nScript-Name: /kept\r\nAccept: */*\r\n\r\n"
        ));
        for (host, with) in [
            ("pkgs.example.com", &[][..]),
            ("api.example.com", &secrets[..]),
        ] {
            let sent =
                String::from_utf8(origin_head(&h, host, 443, "/simple/x/admin", with)).unwrap();
            assert!(sent.contains("\r\nScript-Name: /kept\r\n"), "{sent}");
            assert!(sent.contains("\r\nAccept: */*\r\n"), "{sent}");
            assert!(!sent.contains('_'), "{sent}");
            assert!(!sent.contains("s3cret") && !sent.contains(&p), "{sent}");
        }
    }

    #[test]
    fn secrets_are_written_only_into_headers_for_their_hosts() {
        use base64::Engine;
        let spec: sandbox_core::SecretSpec = "TOKEN@api.example.com".parse().unwrap();
        let secret = Secret::new(&spec, b"s3cret".to_vec()).unwrap();
        let p = secret.placeholder().to_string();
        let secrets = vec![secret];
        let bearer = format!("Bearer {p}");
        assert_eq!(
            super::super::inject(bearer.as_bytes(), &secrets, "api.example.com", 443),
            b"Bearer s3cret"
        );
        assert_eq!(
            super::super::inject(bearer.as_bytes(), &secrets, "pkgs.example.com", 443),
            bearer.as_bytes()
        );
        let b64 = base64::engine::general_purpose::STANDARD;
        let basic = format!("Basic {}", b64.encode(format!("user:{p}")));
        let injected = super::super::inject(basic.as_bytes(), &secrets, "api.example.com", 443);
        assert_eq!(
            injected,
            format!("Basic {}", b64.encode("user:s3cret")).into_bytes()
        );
        assert!(super::super::carries(basic.as_bytes(), p.as_bytes()));
        assert!(!super::super::carries(b"Basic dXNlcjpwYXNz", p.as_bytes()));
    }
}

#[cfg(test)]
mod relay_tests {
    use super::*;

    /// A client config trusting a fresh run CA, and that CA's server config
    /// for `origin.test`.
    fn origin_test_tls() -> (Arc<ClientConfig>, Arc<rustls::ServerConfig>) {
        let ca = super::super::ca::RunCa::new(&["origin.test".to_string()]).unwrap();
        let mut roots = RootCertStore::empty();
        for cert in super::super::ca::parse_pem_certs(ca.cert_pem().as_bytes()).unwrap() {
            roots.add(cert).unwrap();
        }
        let client_config = Arc::new(
            ClientConfig::builder_with_provider(super::super::provider())
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(roots)
                .with_no_client_auth(),
        );
        (client_config, ca.server_config("origin.test").unwrap())
    }
    use rustls::{ClientConfig, RootCertStore};
    use std::net::TcpListener;

    /// Finishes a handshake on a blocking stream.
    macro_rules! handshake {
        ($tls:expr) => {
            while $tls.conn.is_handshaking() {
                $tls.conn.complete_io(&mut $tls.sock).unwrap();
            }
        };
    }

    /// The congestion control a socket sends with.
    fn congestion(sock: &TcpStream) -> String {
        use std::os::fd::AsRawFd;
        let mut name = [0u8; 16];
        let mut len = name.len() as libc::socklen_t;
        // SAFETY: getsockopt writes at most `len` bytes into `name`.
        let rc = unsafe {
            libc::getsockopt(
                sock.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_CONGESTION,
                name.as_mut_ptr().cast(),
                &mut len,
            )
        };
        assert_eq!(rc, 0, "{}", io::Error::last_os_error());
        let name = &name[..len as usize];
        String::from_utf8_lossy(&name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())])
            .into_owned()
    }

    /// The command's connection sends with CUBIC where the kernel has it;
    /// the twin, another socket, keeps the host's default.
    #[test]
    fn the_commands_connection_is_not_paced() {
        let available =
            std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
                .unwrap_or_default();
        let default = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
            .unwrap_or_default();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let near = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (far, _) = listener.accept().unwrap();
        // Without CAP_NET_ADMIN a socket may only pick what
        // tcp_allowed_congestion_control lists (ip-sysctl.rst); there the
        // best-effort change leaves the host's default.
        let allowed = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_allowed_congestion_control")
            .unwrap_or_default();
        // SAFETY: geteuid has no preconditions.
        let may_pick =
            unsafe { libc::geteuid() } == 0 || allowed.split_whitespace().any(|c| c == "cubic");
        unpaced(&far);
        if available.split_whitespace().any(|c| c == "cubic") && may_pick {
            assert_eq!(congestion(&far), "cubic");
        } else {
            assert_eq!(congestion(&far), default.trim());
        }
        assert_eq!(congestion(&near), default.trim());
    }

    /// A response of several MiB without secrets goes through the
    /// read-ahead and batched path whole and in order, its head as the
    /// origin sent it, and the client's connection may carry another
    /// request (its Content-Length relayed exactly); the twin: a response
    /// a byte short of its Content-Length ends the connection.
    #[test]
    fn a_large_response_without_secrets_passes_whole() {
        let (client_config, server_config) = origin_test_tls();
        let name = || ServerName::try_from("origin.test".to_string()).unwrap();
        let body: Vec<u8> = (0..5_000_003u32).map(|i| (i % 251) as u8).collect();
        for short in [false, true] {
            let origin_listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let origin_addr = origin_listener.local_addr().unwrap();
            let origin = {
                let (config, body) = (Arc::clone(&server_config), body.clone());
                std::thread::spawn(move || {
                    let (tcp, _) = origin_listener.accept().unwrap();
                    let mut tls = StreamOwned::new(ServerConnection::new(config).unwrap(), tcp);
                    let sent = if short { &body[1..] } else { &body[..] };
                    let head = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nX-Origin: yes\r\n\r\n",
                        body.len()
                    );
                    tls.write_all(head.as_bytes()).unwrap();
                    // In uneven writes, as an origin may send.
                    for piece in sent.chunks(70_001) {
                        tls.write_all(piece).unwrap();
                    }
                    tls.conn.send_close_notify();
                    tls.flush().unwrap();
                })
            };
            let tcp = TcpStream::connect(origin_addr).unwrap();
            let conn = ClientConnection::new(Arc::clone(&client_config), name()).unwrap();
            let mut origin_tls = StreamOwned::new(conn, ReadAhead::new(tcp));
            handshake!(origin_tls);

            let client_listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let client_addr = client_listener.local_addr().unwrap();
            let reader = {
                let config = Arc::clone(&client_config);
                std::thread::spawn(move || {
                    let tcp = TcpStream::connect(client_addr).unwrap();
                    let conn = ClientConnection::new(config, name()).unwrap();
                    let mut tls = StreamOwned::new(conn, tcp);
                    let mut out = Vec::new();
                    let _ = tls.read_to_end(&mut out);
                    out
                })
            };
            let (tcp, _) = client_listener.accept().unwrap();
            let conn = ServerConnection::new(Arc::clone(&server_config)).unwrap();
            let mut client = StreamOwned::new(conn, tcp);
            handshake!(client);

            let mut origin_side = Buffered::new(origin_tls);
            let relayed = relay_response(
                &mut origin_side,
                &mut client,
                (false, true, false),
                super::super::Scrub::new(&[], std::iter::empty()),
            )
            .unwrap();
            assert!(
                matches!(relayed, Relayed::Done(keep) if keep != short),
                "short: {short}"
            );
            client.conn.send_close_notify();
            client.flush().unwrap();
            drop(client);
            origin.join().unwrap();
            let out = reader.join().unwrap();
            let at = out.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
            let head = String::from_utf8_lossy(&out[..at]);
            assert!(
                head.starts_with("HTTP/1.1 200 OK\r\n") && head.contains("X-Origin: yes\r\n"),
                "{head}"
            );
            let want = if short { &body[1..] } else { &body[..] };
            assert!(
                out[at..] == *want,
                "{} bytes of {}",
                out.len() - at,
                want.len()
            );
        }
    }

    /// #44: once the command has ended its side of the connection (a
    /// half-close after its request), an origin that stays silent and open
    /// is cut after the silence bound (`idle`, 2 s here; 30 s in a run,
    /// not the 300 s of an origin's read): the relay fails timed out and
    /// the command's connection is released. Twin: an origin answering 1 s
    /// after the half-close is relayed whole.
    #[test]
    fn a_silent_origin_after_the_commands_end_is_cut_an_answering_one_is_not() {
        let (client_config, server_config) = origin_test_tls();
        let idle = Duration::from_secs(2);
        let relayed = move |answer: bool| {
            let name = || ServerName::try_from("origin.test".to_string()).unwrap();
            let origin_listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let origin_addr = origin_listener.local_addr().unwrap();
            let (hold, held) = std::sync::mpsc::channel::<()>();
            let origin = {
                let config = Arc::clone(&server_config);
                std::thread::spawn(move || {
                    let (tcp, _) = origin_listener.accept().unwrap();
                    let mut tls = StreamOwned::new(ServerConnection::new(config).unwrap(), tcp);
                    handshake!(tls);
                    if answer {
                        std::thread::sleep(Duration::from_secs(1));
                        tls.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                            .unwrap();
                        tls.conn.send_close_notify();
                        tls.flush().unwrap();
                    }
                    // Open (silent) until the test ends.
                    let _ = held.recv();
                })
            };
            let tcp = TcpStream::connect(origin_addr).unwrap();
            let conn = ClientConnection::new(Arc::clone(&client_config), name()).unwrap();
            let mut origin_tls = StreamOwned::new(conn, ReadAhead::new(tcp));
            handshake!(origin_tls);

            let client_listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let client_addr = client_listener.local_addr().unwrap();
            let reader = {
                let config = Arc::clone(&client_config);
                std::thread::spawn(move || {
                    let tcp = TcpStream::connect(client_addr).unwrap();
                    let conn = ClientConnection::new(config, name()).unwrap();
                    let mut tls = StreamOwned::new(conn, tcp);
                    handshake!(tls);
                    // The request went; the command ends its side.
                    tls.sock.shutdown(std::net::Shutdown::Write).unwrap();
                    let mut out = Vec::new();
                    let _ = tls.read_to_end(&mut out);
                    out
                })
            };
            let (tcp, _) = client_listener.accept().unwrap();
            let conn = ServerConnection::new(Arc::clone(&server_config)).unwrap();
            let mut client = StreamOwned::new(conn, tcp);
            handshake!(client);

            let slot = crate::state::test_slot();
            origin_tls
                .sock
                .heard_by(client.fd(), idle, slot.silence_note());
            let mut origin_side = Buffered::new(origin_tls);
            let started = std::time::Instant::now();
            let relayed = relay_response(
                &mut origin_side,
                &mut client,
                (false, true, false),
                super::super::Scrub::new(&[], std::iter::empty()),
            );
            let took = started.elapsed();
            drop(client);
            let out = reader.join().unwrap();
            drop(hold);
            origin.join().unwrap();
            let cuts = slot.shared.ended().silent();
            (
                relayed,
                String::from_utf8_lossy(&out).into_owned(),
                took,
                cuts,
            )
        };
        let answered = relayed.clone();
        let answering = std::thread::spawn(move || {
            let (relayed, out, took, cuts) = answered(true);
            (
                relayed.map(|r| matches!(r, Relayed::Done(true))),
                out,
                took,
                cuts,
            )
        });
        let (relayed, out, took, cuts) = relayed(false);
        // Counted for the run's record; the answered twin is not.
        assert_eq!(cuts, 1);
        match relayed {
            Err(e) => assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}"),
            Ok(_) => panic!("relayed: {out} {took:?}"),
        }
        assert_eq!(out, "");
        assert!(took >= idle && took < idle + idle / 2, "{took:?}");
        let (relayed, out, took, cuts) = answering.join().unwrap();
        assert_eq!(cuts, 0);
        assert!(relayed.unwrap(), "{out}");
        assert_eq!(out, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
        // The origin's pause started with its handshake, before the relay.
        assert!(
            took >= Duration::from_millis(900) && took < idle,
            "{took:?}"
        );
    }
}
