//! HTTP/2 from the command (a client that chose `h2` in the TLS handshake
//! with the proxy): an HTTP/2 to HTTP/1.1 gateway in front of the one
//! request checker. The hyperium `h2` crate reads the connection on a
//! current-thread tokio runtime made for it alone (HTTP/1.1 connections
//! and runs without request rules never start one); each stream becomes
//! one canonical HTTP/1.1 request (method, `:path` as the target, `Host`
//! from `:authority`, the fields, the body framed with the client's
//! `content-length` or else chunked) written into a socket pair, whose
//! other end [`super::exchange::exchange`] reads on a thread of its own as
//! it reads a request on an HTTP/1.1 connection: the same rules, path
//! normalisation, override headers, placeholders, secret injection,
//! masking, refusal records, 403 explanations and approvals. The HTTP/1.1
//! response it writes back (framed with `Content-Length`, chunks, or the
//! end of the stream) is read (httparse) into the stream's HEADERS and DATA
//! frames, HTTP/1.1's connection fields dropped (its `100 Continue`, to a
//! client that asked for it, as an informational response). The origin is
//! reached over HTTP/1.1 as for every intercepted request; the checker
//! sends a request's body before it reads the response, so a client that
//! waits for an answer before it ends its body (a duplex stream) is not
//! served.
//!
//! Refused at the HTTP/2 layer, before the checker (recorded, answered
//! with the explanation as an HTTP/2 response): `CONNECT` (also the
//! extended form), no `:authority`, a `:scheme` other than `https`, an
//! `:authority` with user information or disagreeing with a `Host` field,
//! more than one `Host` or `content-length`, request trailers, DATA frames
//! that do not add up to the `content-length` (what would complete the
//! request at the origin, the chunked body's last chunk or the DATA that
//! reaches the `content-length`, is held back until the stream's end
//! shows neither, so such a request never completes there; the rest of a
//! body streams), a stream still open the head timeout after its whole
//! `content-length` came (408).
//!
//! Refused by the `h2` crate itself, before the proxy sees a request:
//! nothing of it reaches the checker or the origin, and the proxy records
//! it ([`Watch`], from the frames it writes, once a connection:
//! "malformed HTTP/2 from the command: ..."). The stream is reset
//! (`PROTOCOL_ERROR`) for connection-specific fields (`connection`,
//! `keep-alive`, `proxy-connection`, `transfer-encoding`, `upgrade`, `te`
//! other than `trailers`) and missing, repeated, unknown or misplaced
//! pseudo-headers; it is answered 431 for a header list over the bound;
//! the connection ends (`GOAWAY`) for a field its HPACK decoder does not
//! take (a CR, LF or NUL in a value, an upper-case name), `GOAWAY
//! ENHANCE_YOUR_CALM` for a header list past its abuse bound (an HPACK
//! list bomb) or a flood. [`h1_head`] checks the connection-specific
//! fields again, a second line.
//!
//! Bounds: at most [`MAX_STREAMS`] streams at once per connection, and each
//! stream takes one of the proxy's connection slots (its
//! `max_connections` and the process's budget bound the origins' sockets
//! as for HTTP/1.1: a stream over them is refused with `REFUSED_STREAM`);
//! the header list is bounded as a request head is
//! ([`crate::ProxyOptions::max_head_bytes`]); flow-control windows of
//! [`STREAM_WINDOW`] per stream and [`CONNECTION_WINDOW`] per connection
//! and [`MAX_SEND_BUFFER`] queued per stream bound its memory; a
//! connection without streams is closed after the head timeout.

use std::io;
use std::net::{Shutdown, TcpStream};
use std::os::unix::net::UnixStream as StdUnix;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use h2::server::SendResponse;
use h2::{RecvStream, SendStream};
use rustls::{ServerConnection, StreamOwned};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::UnixStream;

use super::exchange::{self, explanation, record, refusal, url, Buffered, Refusal};
use super::Interceptor;
use crate::state::Slot;

/// Streams open at once on one connection (SETTINGS_MAX_CONCURRENT_STREAMS).
pub(crate) const MAX_STREAMS: u32 = 100;

/// Each stream's receive window: request body bytes the client may send
/// before the proxy has passed them on.
pub(crate) const STREAM_WINDOW: u32 = 64 * 1024;

/// The connection's receive window.
pub(crate) const CONNECTION_WINDOW: u32 = 1024 * 1024;

/// Response bytes queued per stream for the client at most.
pub(crate) const MAX_SEND_BUFFER: usize = 64 * 1024;

/// Request body bytes read before the request goes to the checker: a body
/// that ends within them is checked whole (its length against its
/// `content-length`, no trailers) before anything reaches the origin.
const EARLY_BODY: usize = 64 * 1024;

/// How long the next DATA is waited for before the request goes to the
/// checker without the rest of its early body: a client that waits for
/// `100 Continue` before its body (the checker answers it once the request
/// is admitted) is not held.
const EARLY_GAP: std::time::Duration = std::time::Duration::from_millis(100);

/// How long the rest of a request body may still come once the stream is
/// answered (as `exchange::answer` reads it over HTTP/1.1).
const ANSWERED_BODY_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

/// Response bytes read from the checker at a time.
const RELAY_CHUNK: usize = 64 * 1024;

/// A response head from the checker is at most this long.
const MAX_RESPONSE_HEAD: usize = 64 * 1024;

/// Stack of a stream's thread (as a connection's: buffers are on the heap).
const STACK: usize = 256 * 1024;

/// Serves an intercepted connection whose client chose `h2`, its TLS
/// handshake done: until the client closes it, it fails, or it stays
/// without streams for the head timeout.
pub(crate) fn serve(
    slot: &Slot,
    interceptor: &Arc<Interceptor>,
    tls: StreamOwned<ServerConnection, TcpStream>,
    host: &str,
    port: u16,
) {
    let StreamOwned { conn, sock } = tls;
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
    else {
        return;
    };
    // A clone each stream's slot tracks: ending the proxy (or the run's
    // window) shuts the connection down whichever slot it finds.
    let Ok(tracked) = sock.try_clone() else {
        return;
    };
    if sock.set_nonblocking(true).is_err() {
        return;
    }
    let watch = Arc::new(Watch {
        shared: Arc::clone(&slot.shared),
        host: host.to_string(),
        port,
        accepted: AtomicU32::new(0),
        done: AtomicBool::new(false),
        recorded: AtomicU32::new(0),
    });
    runtime.block_on(async move {
        let Ok(sock) = tokio::net::TcpStream::from_std(sock) else {
            return;
        };
        let io = AsyncTls {
            conn,
            sock,
            eof: false,
            scan: Scan::new(Arc::clone(&watch)),
        };
        connection(slot, interceptor, io, tracked, &watch).await;
    });
}

/// Counts a connection's open streams; one less when dropped.
struct Active(Arc<AtomicUsize>);

impl Active {
    fn new(count: &Arc<AtomicUsize>) -> Active {
        count.fetch_add(1, Ordering::AcqRel);
        Active(Arc::clone(count))
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

async fn connection(
    slot: &Slot,
    interceptor: &Arc<Interceptor>,
    io: AsyncTls,
    tracked: TcpStream,
    watch: &Arc<Watch>,
) {
    let opts = &slot.shared.opts;
    let mut builder = h2::server::Builder::new();
    builder
        .max_concurrent_streams(MAX_STREAMS)
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_header_list_size(u32::try_from(opts.max_head_bytes).unwrap_or(u32::MAX))
        .max_send_buffer_size(MAX_SEND_BUFFER);
    let Ok(Ok(mut conn)) =
        tokio::time::timeout(opts.head_timeout, builder.handshake::<_, Bytes>(io)).await
    else {
        return;
    };
    let active = Arc::new(AtomicUsize::new(0));
    let mut closing = false;
    loop {
        match tokio::time::timeout(opts.head_timeout, conn.accept()).await {
            Ok(Some(Ok((request, mut respond)))) => {
                // Before anything is sent on it: what the proxy writes on
                // this stream is the proxy's, not the crate's refusal.
                let id = u32::from(respond.stream_id());
                watch.accepted.fetch_max(id, Ordering::AcqRel);
                let Some(stream_slot) = slot.shared.claim() else {
                    // Over the proxy's connections: the client may retry.
                    slot.shared.closed_at_limit();
                    respond.send_reset(h2::Reason::REFUSED_STREAM);
                    continue;
                };
                let job = Stream {
                    slot: stream_slot,
                    interceptor: Arc::clone(interceptor),
                    tracked: tracked.try_clone().ok(),
                    host: watch.host.clone(),
                    port: watch.port,
                    watch: Arc::clone(watch),
                    id,
                    _active: Active::new(&active),
                };
                tokio::spawn(job.serve(request, respond));
            }
            // A connection error the crate raised (it sent GOAWAY): the
            // command's malformed HTTP/2, recorded (once a connection; the
            // writer has as a rule recorded it already, as the GOAWAY went
            // out). One the client sent, or a failed socket, is its end.
            Ok(Some(Err(e))) => {
                if e.is_go_away() && e.is_library() {
                    if let Some(reason) = e.reason().filter(|r| *r != h2::Reason::NO_ERROR) {
                        watch.goaway(u32::from(reason));
                    }
                }
                return;
            }
            Ok(None) => return,
            // Idle for the head timeout: closed (gracefully, once).
            Err(_) if active.load(Ordering::Acquire) == 0 => {
                if closing {
                    return;
                }
                conn.graceful_shutdown();
                closing = true;
            }
            Err(_) => {}
        }
    }
}

/// One stream's request: what serves it.
struct Stream {
    slot: Slot,
    interceptor: Arc<Interceptor>,
    tracked: Option<TcpStream>,
    host: String,
    port: u16,
    /// The connection's record of what the crate refused itself.
    watch: Arc<Watch>,
    /// The stream's id.
    id: u32,
    _active: Active,
}

/// What the `h2` crate refuses by itself, before the proxy sees a request
/// (it never hands such a stream to `accept`, and a connection error only
/// ends `accept`): read off the frames the proxy writes ([`Scan`]) and
/// recorded as a refusal, once a connection, as the frame goes out
/// (before the client can read it). A `GOAWAY` with an error code (the
/// proxy itself only ever sends `NO_ERROR`), and on a stream the proxy has
/// not taken yet (above [`Watch::accepted`]) a `RST_STREAM`
/// `PROTOCOL_ERROR` or a `HEADERS` (the crate's 431).
struct Watch {
    shared: Arc<crate::state::Shared>,
    host: String,
    port: u16,
    /// The highest stream id the accept loop has taken.
    accepted: AtomicU32,
    /// A refusal was recorded for the connection.
    done: AtomicBool,
    /// The stream it was recorded for (0: the connection).
    recorded: AtomicU32,
}

impl Watch {
    fn record(&self, stream: u32, refused: &Refusal) {
        if self.done.swap(true, Ordering::AcqRel) {
            return;
        }
        self.recorded.store(stream, Ordering::Release);
        record(&self.shared, &self.host, self.port, "", "", refused);
    }

    /// Whether `stream`'s refusal was recorded here (a stream the crate
    /// reset while it waited to be accepted: the proxy records it not
    /// twice).
    fn recorded(&self, stream: u32) -> bool {
        self.done.load(Ordering::Acquire) && self.recorded.load(Ordering::Acquire) == stream
    }

    fn goaway(&self, code: u32) {
        self.record(
            0,
            &refusal(
                400,
                "Bad Request",
                format!(
                    "malformed HTTP/2 from the command: the h2 crate ended the connection \
                     (GOAWAY {:?}): a field its HPACK decoder does not take (a CR, LF or NUL \
                     in a value, an upper-case name), a header list past its abuse bound, a \
                     flood, or another protocol error",
                    h2::Reason::from(code)
                ),
            ),
        );
    }

    fn reset(&self, stream: u32, code: u32) {
        if code != u32::from(h2::Reason::PROTOCOL_ERROR)
            || stream <= self.accepted.load(Ordering::Acquire)
        {
            return;
        }
        self.record(
            stream,
            &refusal(
                400,
                "Bad Request",
                format!(
                    "malformed HTTP/2 from the command: the h2 crate reset stream {stream} \
                     (PROTOCOL_ERROR) before the proxy read its request: a connection-specific \
                     field, a te other than \"trailers\", a missing, repeated or misplaced \
                     pseudo-header, or DATA frames that do not add up to the content-length"
                ),
            ),
        );
    }

    fn headers(&self, stream: u32) {
        if stream <= self.accepted.load(Ordering::Acquire) {
            return;
        }
        let max = self.shared.opts.max_head_bytes;
        self.record(
            stream,
            &refusal(
                431,
                "Request Header Fields Too Large",
                format!(
                    "malformed HTTP/2 from the command: a header list past {max} bytes on \
                     stream {stream} (the h2 crate answered 431)"
                ),
            ),
        );
    }
}

/// Reads the frames the proxy writes to the client (the plaintext given to
/// rustls, frame after frame from the server's preface, a SETTINGS frame)
/// for what [`Watch`] records.
struct Scan {
    watch: Arc<Watch>,
    /// The current frame's header, `have` bytes of it so far.
    head: [u8; 9],
    have: usize,
    /// Payload bytes of the current frame still to come.
    left: usize,
    /// The first payload bytes of a RST_STREAM (its code) or a GOAWAY (the
    /// last stream and its code), `got` of them so far.
    first: [u8; 8],
    got: usize,
}

const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const GOAWAY: u8 = 0x7;

impl Scan {
    fn new(watch: Arc<Watch>) -> Scan {
        Scan {
            watch,
            head: [0; 9],
            have: 0,
            left: 0,
            first: [0; 8],
            got: 0,
        }
    }

    fn kind(&self) -> u8 {
        self.head[3]
    }

    fn stream(&self) -> u32 {
        u32::from_be_bytes([
            self.head[5] & 0x7f,
            self.head[6],
            self.head[7],
            self.head[8],
        ])
    }

    /// The bytes written next.
    fn feed(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            if self.have < self.head.len() {
                let n = (self.head.len() - self.have).min(bytes.len());
                self.head[self.have..self.have + n].copy_from_slice(&bytes[..n]);
                self.have += n;
                bytes = &bytes[n..];
                if self.have == self.head.len() {
                    self.left =
                        u32::from_be_bytes([0, self.head[0], self.head[1], self.head[2]]) as usize;
                    self.got = 0;
                    if self.kind() == HEADERS {
                        self.watch.headers(self.stream());
                    }
                    self.payload(&[]);
                }
                continue;
            }
            let n = self.left.min(bytes.len());
            self.payload(&bytes[..n]);
            bytes = &bytes[n..];
        }
    }

    /// `bytes` of the current frame's payload (none: its header just read).
    fn payload(&mut self, bytes: &[u8]) {
        let want = match self.kind() {
            RST_STREAM => 4,
            GOAWAY => 8,
            _ => 0,
        };
        if self.got < want {
            let n = (want - self.got).min(bytes.len());
            self.first[self.got..self.got + n].copy_from_slice(&bytes[..n]);
            self.got += n;
            if self.got == want {
                let [a, b, c, d, e, f, g, h] = self.first;
                match self.kind() {
                    RST_STREAM => self
                        .watch
                        .reset(self.stream(), u32::from_be_bytes([a, b, c, d])),
                    _ => {
                        let code = u32::from_be_bytes([e, f, g, h]);
                        if code != u32::from(h2::Reason::NO_ERROR) {
                            self.watch.goaway(code);
                        }
                    }
                }
            }
        }
        self.left -= bytes.len();
        if self.left == 0 {
            self.have = 0;
        }
    }
}

/// How the HTTP/1.1 request's body is framed.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Framing {
    /// No body.
    None,
    /// The client's `content-length` (its DATA add up to it: the `h2`
    /// crate checks).
    Length,
    /// Chunks: the body's end is the stream's.
    Chunked,
}

/// The fields HTTP/2 forbids (RFC 9113 8.2.2), refused when present.
const CONNECTION_SPECIFIC: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
];

/// The HTTP/1.1 head of an HTTP/2 request to `host:port` (the `CONNECT`
/// it came in), with a body framed as `framing` (`Some(n)`: the whole
/// body, `n` bytes, is known); shapes the checker could not see in it are
/// refused.
fn h1_head(
    parts: &http::request::Parts,
    framing: Framing,
    whole: Option<usize>,
) -> Result<Vec<u8>, Refusal> {
    let bad = |why: String| refusal(400, "Bad Request", why);
    if parts.method == http::Method::CONNECT
        || parts.extensions.get::<h2::ext::Protocol>().is_some()
    {
        return Err(bad(
            "a CONNECT request inside an intercepted connection (HTTP/2)".into(),
        ));
    }
    // Without `:authority` the crate drops `:scheme` from the URI too: it
    // could no longer be checked.
    if parts.uri.authority().is_none() {
        return Err(bad("no :authority (HTTP/2)".into()));
    }
    if parts.uri.scheme_str() != Some("https") {
        return Err(bad(format!(
            "the :scheme {:?} on an intercepted TLS connection (HTTP/2)",
            parts.uri.scheme_str().unwrap_or("")
        )));
    }
    let authority = parts.uri.authority().map(|a| a.as_str());
    if authority.is_some_and(|a| a.contains('@')) {
        return Err(bad("user information in :authority (HTTP/2)".into()));
    }
    let hosts: Vec<&[u8]> = parts
        .headers
        .get_all(http::header::HOST)
        .iter()
        .map(|v| v.as_bytes())
        .collect();
    if hosts.len() > 1 {
        return Err(bad("more than one Host".into()));
    }
    if let (Some(a), Some(h)) = (authority, hosts.first()) {
        if !a.as_bytes().eq_ignore_ascii_case(h) {
            return Err(bad(format!(
                "the :authority {a:?} and the Host {:?} disagree (HTTP/2)",
                String::from_utf8_lossy(h)
            )));
        }
    }
    if parts
        .headers
        .get_all(http::header::CONTENT_LENGTH)
        .iter()
        .count()
        > 1
    {
        return Err(bad("more than one content-length".into()));
    }
    // A second line: the h2 crate resets a stream with these fields (or a
    // `te` other than `trailers`) before the proxy sees it, recorded by
    // [`Watch`]; kept should it ever pass one.
    for name in CONNECTION_SPECIFIC {
        if parts.headers.contains_key(*name) {
            return Err(bad(format!(
                "the connection-specific field {name} (HTTP/2 forbids it)"
            )));
        }
    }
    if parts
        .headers
        .get_all(http::header::TE)
        .iter()
        .any(|v| v.as_bytes() != b"trailers")
    {
        return Err(bad("a te field other than \"trailers\" (HTTP/2)".into()));
    }
    let target = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str())
        .filter(|p| !p.is_empty())
        .ok_or_else(|| bad("no :path (HTTP/2)".into()))?;
    let mut out = format!("{} {target} HTTP/1.1\r\n", parts.method).into_bytes();
    let host = authority.map(str::as_bytes).or(hosts.first().copied());
    if let Some(host) = host {
        out.extend_from_slice(b"Host: ");
        out.extend_from_slice(host);
        out.extend_from_slice(b"\r\n");
    }
    let mut cookies: Vec<&[u8]> = Vec::new();
    for (name, value) in &parts.headers {
        match name.as_str() {
            // Written above; `te: trailers` means nothing over HTTP/1.1.
            "host" | "te" => continue,
            // Only as the checker reads it: it answers 100 itself once
            // the request is admitted (sent on as an informational
            // response), and drops the field.
            "expect" if !value.as_bytes().eq_ignore_ascii_case(b"100-continue") => continue,
            "content-length" if framing != Framing::Length => continue,
            // Split into several fields by HTTP/2 (RFC 9113 8.2.3): one
            // field in HTTP/1.1.
            "cookie" => {
                cookies.push(value.as_bytes());
                continue;
            }
            _ => {}
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if !cookies.is_empty() {
        out.extend_from_slice(b"Cookie: ");
        out.extend_from_slice(&cookies.join(&b"; "[..]));
        out.extend_from_slice(b"\r\n");
    }
    match (framing, whole) {
        (Framing::Chunked, _) => out.extend_from_slice(b"Transfer-Encoding: chunked\r\n"),
        (Framing::None, Some(n)) if n > 0 => {
            out.extend_from_slice(format!("Content-Length: {n}\r\n").as_bytes())
        }
        _ => {}
    }
    out.extend_from_slice(b"\r\n");
    Ok(out)
}

/// Why a request body was not passed on whole.
enum BodyStop {
    /// Refused (recorded by the caller, answered if nothing was yet).
    Refused(Refusal),
    /// The client reset the stream or the connection failed.
    Gone,
}

/// Reads the next DATA of `body` (its capacity released: the window
/// bounds what is buffered); `None` at its end. A stream error the proxy
/// raised (DATA beyond the `content-length` or short of it, malformed) is
/// a refusal.
async fn next_data(body: &mut RecvStream) -> Result<Option<Bytes>, BodyStop> {
    match body.data().await {
        None => Ok(None),
        Some(Ok(data)) => {
            let _ = body.flow_control().release_capacity(data.len());
            Ok(Some(data))
        }
        Some(Err(e)) if !e.is_remote() && e.reason() == Some(h2::Reason::PROTOCOL_ERROR) => {
            Err(BodyStop::Refused(refusal(
                400,
                "Bad Request",
                "the DATA frames do not add up to the content-length, or the stream is \
                 malformed (HTTP/2)",
            )))
        }
        Some(Err(_)) => Err(BodyStop::Gone),
    }
}

/// Refuses trailers at the body's end (as HTTP/1.1 chunked trailers are).
async fn no_trailers(body: &mut RecvStream) -> Result<(), BodyStop> {
    match body.trailers().await {
        Ok(None) => Ok(()),
        Ok(Some(_)) => Err(BodyStop::Refused(refusal(
            400,
            "Bad Request",
            "request trailers (HTTP/2): they are not forwarded",
        ))),
        Err(_) => Err(BodyStop::Gone),
    }
}

impl Stream {
    async fn serve(self, request: http::Request<RecvStream>, mut respond: SendResponse<Bytes>) {
        let Stream {
            slot,
            interceptor,
            tracked,
            host,
            port,
            watch,
            id,
            _active,
        } = self;
        let shared = Arc::clone(&slot.shared);
        let (parts, mut body) = request.into_parts();
        let path = parts.uri.path().to_string();
        let shown = format!("{} {}", parts.method, url(&host, port, &path));
        let method = parts.method.to_string();
        let refuse = |refused: Refusal, respond: &mut SendResponse<Bytes>| {
            // Not twice: reset by the crate while it waited to be accepted.
            if !watch.recorded(id) {
                record(&shared, &host, port, &method, &path, &refused);
            }
            answer(respond, &refused, &shown);
        };
        // The client's content-length (the h2 crate read it as a number).
        let length: Option<u64> = parts
            .headers
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse().ok());
        // The body's first bytes (all of it, when it ends within them).
        let mut early = Vec::new();
        let mut ended = body.is_end_stream();
        while !ended {
            // All of the content-length is in: only the stream's end (or
            // trailers) may follow, and nothing goes before it does.
            let complete = length == Some(early.len() as u64);
            if !complete && early.len() >= EARLY_BODY {
                break;
            }
            let next = if complete {
                // Only the stream's end may come, within the head timeout
                // (as a request head must), or the slot would be held.
                match tokio::time::timeout(shared.opts.head_timeout, next_data(&mut body)).await {
                    Ok(next) => Ok(next),
                    Err(_) => {
                        return refuse(
                            refusal(
                                408,
                                "Request Timeout",
                                "the stream stayed open after its whole content-length \
                                 (HTTP/2): its end did not come within the head timeout",
                            ),
                            &mut respond,
                        )
                    }
                }
            } else {
                tokio::time::timeout(EARLY_GAP, next_data(&mut body)).await
            };
            match next {
                Err(_) => break,
                Ok(Ok(Some(data))) => early.extend_from_slice(&data),
                Ok(Ok(None)) => ended = true,
                Ok(Err(BodyStop::Refused(r))) => return refuse(r, &mut respond),
                Ok(Err(BodyStop::Gone)) => return,
            }
        }
        if ended {
            match no_trailers(&mut body).await {
                Ok(()) => {}
                Err(BodyStop::Refused(r)) => return refuse(r, &mut respond),
                Err(BodyStop::Gone) => return,
            }
        }
        let framing = if parts.headers.contains_key(http::header::CONTENT_LENGTH) {
            Framing::Length
        } else if ended {
            Framing::None
        } else {
            Framing::Chunked
        };
        let mut first = match h1_head(&parts, framing, ended.then_some(early.len())) {
            Ok(head) => head,
            Err(r) => return refuse(r, &mut respond),
        };
        match framing {
            Framing::Chunked => {
                chunk(&mut first, &early);
                if ended {
                    first.extend_from_slice(b"0\r\n\r\n");
                }
            }
            _ => first.extend_from_slice(&early),
        }
        // What of the content-length is still to come.
        let left = length.map(|n| n.saturating_sub(early.len() as u64));
        drop(early);
        let Some((sock, closer, theirs)) = socket_pair() else {
            return respond.send_reset(h2::Reason::INTERNAL_ERROR);
        };
        let head_timeout = shared.opts.head_timeout;
        let (checker_host, checker_slot) = (host.clone(), slot);
        let checker = std::thread::Builder::new()
            .name("sandbox-proxy-h2".into())
            .stack_size(STACK)
            .spawn(move || {
                // Its refusals belong to the window its slot was taken in;
                // ending the proxy (or the window) shuts the connection.
                if let Some(tracked) = tracked {
                    checker_slot.track(&tracked);
                }
                // A response the client does not take (it grants no
                // window) holds the thread no longer than over HTTP/1.1.
                let _ = theirs.set_write_timeout(Some(exchange::IDLE));
                let _ = theirs.set_read_timeout(Some(head_timeout));
                let mut client = Buffered::new(theirs);
                exchange::exchange(
                    &checker_slot,
                    &interceptor,
                    &mut client,
                    &checker_host,
                    port,
                );
                // Dropped here: the end of the response.
            });
        if checker.is_err() {
            return respond.send_reset(h2::Reason::REFUSED_STREAM);
        }
        // The head and the early body, then the rest as it comes, beside
        // the response (the checker may answer before the body's end).
        let pump = {
            let (sock, closer) = (Arc::clone(&sock), closer.try_clone().ok());
            tokio::spawn(async move {
                let sent = async {
                    write_all(&sock, &first).await.map_err(|_| BodyStop::Gone)?;
                    if !ended {
                        pump_body(&sock, body, framing, left).await?;
                    }
                    Ok(())
                }
                .await;
                if sent.is_err() {
                    // The checker sees the body cut off: nothing of it
                    // completes at the origin.
                    if let Some(closer) = closer {
                        let _ = closer.shutdown(Shutdown::Both);
                    }
                }
                sent
            })
        };
        let head_request = parts.method == http::Method::HEAD;
        let answered = relay_response(&sock, &mut respond, head_request).await;
        // A pump that stopped has stopped by now (it shut the pair down
        // before it returned). One still running after an answer (a
        // refusal, or an origin that answered early) may finish the body
        // for a while, as over HTTP/1.1 ([`exchange::answer`] reads it
        // then), so that the client reads the answer before its stream is
        // reset (curl 7.88 fails a transfer whose stream is reset, even
        // with `NO_ERROR` after a whole response); then it is not needed.
        let mut pump = pump;
        let pumped = if pump.is_finished() {
            pump.await.ok()
        } else if answered {
            match tokio::time::timeout(ANSWERED_BODY_WAIT, &mut pump).await {
                Ok(pumped) => pumped.ok(),
                Err(_) => {
                    pump.abort();
                    None
                }
            }
        } else {
            pump.abort();
            None
        };
        let _ = closer.shutdown(Shutdown::Both);
        if !answered {
            match pumped {
                Some(Err(BodyStop::Refused(r))) => refuse(r, &mut respond),
                _ => respond.send_reset(h2::Reason::INTERNAL_ERROR),
            }
        }
    }
}

/// A socket pair for one stream: the async end, a handle of it to shut
/// it down, and the checker's end.
fn socket_pair() -> Option<(Arc<UnixStream>, StdUnix, StdUnix)> {
    let (ours, theirs) = StdUnix::pair().ok()?;
    let closer = ours.try_clone().ok()?;
    ours.set_nonblocking(true).ok()?;
    let ours = UnixStream::from_std(ours).ok()?;
    Some((Arc::new(ours), closer, theirs))
}

/// Appends `data` to `out` as one chunk (nothing when empty).
fn chunk(out: &mut Vec<u8>, data: &[u8]) {
    if data.is_empty() {
        return;
    }
    out.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// Passes the rest of a request body to the checker, framed as
/// `framing`, as it comes; what would complete the request at the origin
/// (the DATA that reaches the content-length, `left` bytes from now, or
/// the last chunk) goes only once the stream's end shows no trailers.
async fn pump_body(
    sock: &UnixStream,
    mut body: RecvStream,
    framing: Framing,
    mut left: Option<u64>,
) -> Result<(), BodyStop> {
    let mut held: Option<Bytes> = None;
    let mut out = Vec::new();
    while let Some(data) = next_data(&mut body).await? {
        if data.is_empty() {
            continue;
        }
        if let Some(n) = &mut left {
            // The h2 crate refuses DATA past the content-length.
            *n = n.saturating_sub(data.len() as u64);
            if *n == 0 {
                held = Some(data);
                continue;
            }
        }
        out.clear();
        match framing {
            Framing::Chunked => chunk(&mut out, &data),
            _ => out.extend_from_slice(&data),
        }
        write_all(sock, &out).await.map_err(|_| BodyStop::Gone)?;
    }
    no_trailers(&mut body).await?;
    out.clear();
    out.extend_from_slice(held.as_deref().unwrap_or(&[]));
    if framing == Framing::Chunked {
        out.extend_from_slice(b"0\r\n\r\n");
    }
    write_all(sock, &out).await.map_err(|_| BodyStop::Gone)
}

/// Writes all of `bytes` to the pair.
async fn write_all(sock: &UnixStream, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        sock.writable().await?;
        match sock.try_write(bytes) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Reads from the pair, or fails when the client resets the stream first.
async fn read_or_reset(
    sock: &UnixStream,
    buf: &mut [u8],
    reset: &mut (dyn FnMut(&mut Context<'_>) -> bool + Send),
) -> io::Result<usize> {
    std::future::poll_fn(|cx| {
        if reset(cx) {
            return Poll::Ready(Err(io::ErrorKind::ConnectionReset.into()));
        }
        loop {
            match sock.poll_read_ready(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) => match sock.try_read(buf) {
                    Ok(n) => return Poll::Ready(Ok(n)),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    Err(e) => return Poll::Ready(Err(e)),
                },
            }
        }
    })
    .await
}

/// The response's fields HTTP/2 has no place for (connection-specific),
/// dropped.
const DROPPED_IN_RESPONSES: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
    "te",
    "http2-settings",
];

/// How the checker's response body is framed.
enum Body {
    None,
    Length(u64),
    Chunked,
    /// To the end of the pair.
    Close,
}

/// Reads the checker's HTTP/1.1 response and sends it on the stream;
/// whether a response was begun (otherwise the caller answers or resets).
/// A response cut short is reset, so the client sees it cut.
async fn relay_response(
    sock: &UnixStream,
    respond: &mut SendResponse<Bytes>,
    head_request: bool,
) -> bool {
    let mut buf = Vec::new();
    let mut chunk_buf = vec![0u8; RELAY_CHUNK];
    // The final head: its length in `buf`, the response, the body framing.
    let (len, response, framing) = loop {
        let mut slots = [httparse::EMPTY_HEADER; 128];
        let mut parsed = httparse::Response::new(&mut slots);
        match parsed.parse(&buf) {
            Ok(httparse::Status::Complete(len)) => {
                let code = parsed.code.unwrap_or(502);
                if code < 200 {
                    // The checker's 100 Continue (the client asked for it)
                    // goes on; others (an origin's 103) do not.
                    if code == 100 {
                        let mut informational = http::Response::new(());
                        *informational.status_mut() = http::StatusCode::CONTINUE;
                        let _ = respond.send_informational(informational);
                    }
                    buf.drain(..len);
                    continue;
                }
                match response_head(&parsed, head_request) {
                    Some((response, framing)) => break (len, response, framing),
                    None => return false,
                }
            }
            Ok(httparse::Status::Partial) if buf.len() <= MAX_RESPONSE_HEAD => {}
            _ => return false,
        }
        let mut reset = |cx: &mut Context<'_>| respond.poll_reset(cx).is_ready();
        match read_or_reset(sock, &mut chunk_buf, &mut reset).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&chunk_buf[..n]),
        }
    };
    buf.drain(..len);
    let end = matches!(framing, Body::None);
    let Ok(mut send) = respond.send_response(response, end) else {
        return true;
    };
    if end {
        return true;
    }
    if relay_body(sock, &mut send, framing, buf, &mut chunk_buf)
        .await
        .is_err()
    {
        send.send_reset(h2::Reason::INTERNAL_ERROR);
    }
    true
}

/// The HTTP/2 response of a parsed HTTP/1.1 head, and how its body is
/// framed; `None` for a head HTTP/2 cannot carry.
fn response_head(
    parsed: &httparse::Response<'_, '_>,
    head_request: bool,
) -> Option<(http::Response<()>, Body)> {
    let code = parsed.code?;
    let mut response = http::Response::new(());
    *response.status_mut() = http::StatusCode::from_u16(code).ok()?;
    let header = |name: &'static str| {
        parsed
            .headers
            .iter()
            .filter(move |h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value)
    };
    let encodings: Vec<&[u8]> = header("transfer-encoding").collect();
    let lengths: Vec<&[u8]> = header("content-length").collect();
    let framing = if head_request || code == 204 || code == 304 {
        Body::None
    } else {
        match (encodings.as_slice(), lengths.as_slice()) {
            ([], [one]) => Body::Length(std::str::from_utf8(one).ok()?.trim().parse().ok()?),
            ([], []) => Body::Close,
            ([te], []) if te.eq_ignore_ascii_case(b"chunked") => Body::Chunked,
            // Another coding, or both: HTTP/2 has no way to say it.
            _ => return None,
        }
    };
    for h in parsed.headers.iter() {
        if DROPPED_IN_RESPONSES
            .iter()
            .any(|d| h.name.eq_ignore_ascii_case(d))
        {
            continue;
        }
        // A field HTTP/2 cannot carry (its name or value) is dropped.
        let (Ok(name), Ok(value)) = (
            http::HeaderName::from_bytes(h.name.as_bytes()),
            http::HeaderValue::from_bytes(h.value),
        ) else {
            continue;
        };
        response.headers_mut().append(name, value);
    }
    Some((response, framing))
}

/// Sends the response body read from the pair (`buf`: what was read after
/// the head) on `send`, as the client's flow control allows; an error
/// when it ends short of its framing.
async fn relay_body(
    sock: &UnixStream,
    send: &mut SendStream<Bytes>,
    framing: Body,
    buf: Vec<u8>,
    chunk_buf: &mut [u8],
) -> io::Result<()> {
    let short = || io::Error::from(io::ErrorKind::UnexpectedEof);
    let mut left = match framing {
        Body::Length(n) => Some(n),
        _ => None,
    };
    let mut decoder = matches!(framing, Body::Chunked).then(crate::chunked::Decoder::new);
    let mut pending = buf;
    loop {
        // `pending` holds the raw bytes just read: decode, then send.
        let mut data = Vec::new();
        match &mut decoder {
            Some(decoder) => {
                let used = decoder
                    .feed(&pending, &mut |bytes: &[u8]| {
                        data.extend_from_slice(bytes);
                        Ok::<(), ()>(())
                    })
                    .map_err(|_| io::Error::from(io::ErrorKind::InvalidData))?;
                pending.drain(..used);
            }
            None => {
                let take = left.map_or(pending.len(), |n| {
                    usize::try_from(n).unwrap_or(usize::MAX).min(pending.len())
                });
                data.extend_from_slice(&pending[..take]);
                if let Some(n) = &mut left {
                    *n -= take as u64;
                }
                pending.clear();
            }
        }
        send_data(send, Bytes::from(data)).await?;
        let done = match (&decoder, left) {
            (Some(decoder), _) => decoder.done(),
            (None, Some(n)) => n == 0,
            (None, None) => false,
        };
        if done {
            break;
        }
        let mut reset = |cx: &mut Context<'_>| send.poll_reset(cx).is_ready();
        let n = read_or_reset(sock, chunk_buf, &mut reset).await?;
        if n == 0 {
            if left.is_none() && decoder.is_none() {
                // Framed by the end: this is it.
                break;
            }
            return Err(short());
        }
        pending.extend_from_slice(&chunk_buf[..n]);
    }
    // A chunked response's trailers (the checker masked them) as HTTP/2
    // trailers.
    let trailers: &[(Vec<u8>, Vec<u8>)] = decoder.as_ref().map_or(&[], |d| d.trailers());
    let mut map = http::HeaderMap::new();
    for (name, value) in trailers {
        if let (Ok(name), Ok(value)) = (
            http::HeaderName::from_bytes(name),
            http::HeaderValue::from_bytes(value),
        ) {
            if !DROPPED_IN_RESPONSES.contains(&name.as_str()) {
                map.append(name, value);
            }
        }
    }
    if map.is_empty() {
        send.send_data(Bytes::new(), true).map_err(io::Error::other)
    } else {
        send.send_trailers(map).map_err(io::Error::other)
    }
}

/// Sends `data` as the client's window allows.
async fn send_data(send: &mut SendStream<Bytes>, mut data: Bytes) -> io::Result<()> {
    while !data.is_empty() {
        send.reserve_capacity(data.len());
        let granted = std::future::poll_fn(|cx| send.poll_capacity(cx)).await;
        let n = match granted {
            Some(Ok(n)) => n.min(data.len()),
            Some(Err(e)) => return Err(io::Error::other(e)),
            None => return Err(io::ErrorKind::ConnectionReset.into()),
        };
        if n == 0 {
            continue;
        }
        send.send_data(data.split_to(n), false)
            .map_err(io::Error::other)?;
    }
    Ok(())
}

/// Answers a refusal on the stream: the explanation, as over HTTP/1.1.
fn answer(respond: &mut SendResponse<Bytes>, refused: &Refusal, shown: &str) {
    let (admit, body) = explanation(refused, shown);
    let mut response = http::Response::new(());
    *response.status_mut() =
        http::StatusCode::from_u16(refused.code).unwrap_or(http::StatusCode::FORBIDDEN);
    let headers = response.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(http::header::CONTENT_LENGTH, body.len().into());
    if let Some(flag) = admit.and_then(|f| http::HeaderValue::from_str(&f).ok()) {
        headers.insert("sandbox-admit-with", flag);
    }
    match respond.send_response(response, false) {
        // Small: queued whatever the window (MAX_SEND_BUFFER bounds it).
        Ok(mut send) => {
            let _ = send.send_data(Bytes::from(body), true);
        }
        Err(_) => respond.send_reset(h2::Reason::INTERNAL_ERROR),
    }
}

/// The command's TLS connection (handshake done, by the blocking code that
/// served it until the client chose `h2`) as tokio's `AsyncRead` and
/// `AsyncWrite`, for the `h2` crate. Written here rather than taken from
/// `tokio-rustls`, which makes its streams only by running the handshake
/// itself: the proxy knows the protocol only once the handshake is over.
/// The same shape as `tokio-rustls`' stream: records read from the socket
/// when rustls wants them, plaintext taken from its reader; plaintext
/// given to its writer, records written out as the socket takes them.
struct AsyncTls {
    conn: ServerConnection,
    sock: tokio::net::TcpStream,
    /// The socket's end was read.
    eof: bool,
    /// The frames written, read for what the crate refused itself.
    scan: Scan,
}

/// The socket as the blocking `Read`/`Write` rustls asks for: not ready
/// is `WouldBlock` (the task is woken when it is).
struct SyncIo<'a, 'b> {
    sock: &'a mut tokio::net::TcpStream,
    cx: &'a mut Context<'b>,
}

impl io::Read for SyncIo<'_, '_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut buf = ReadBuf::new(buf);
        match Pin::new(&mut *self.sock).poll_read(self.cx, &mut buf) {
            Poll::Ready(Ok(())) => Ok(buf.filled().len()),
            Poll::Ready(Err(e)) => Err(e),
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
}

impl io::Write for SyncIo<'_, '_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match Pin::new(&mut *self.sock).poll_write(self.cx, buf) {
            Poll::Ready(result) => result,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        match Pin::new(&mut *self.sock).poll_write_vectored(self.cx, bufs) {
            Poll::Ready(result) => result,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match Pin::new(&mut *self.sock).poll_flush(self.cx) {
            Poll::Ready(result) => result,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
}

/// `WouldBlock` as `Pending`.
fn pending<T>(result: io::Result<T>) -> Poll<io::Result<T>> {
    match result {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Poll::Pending,
        other => Poll::Ready(other),
    }
}

impl AsyncTls {
    /// Writes out the records rustls holds: `Ready(Ok(()))` when none is
    /// left.
    fn poll_write_tls(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.conn.wants_write() {
            let mut io = SyncIo {
                sock: &mut self.sock,
                cx,
            };
            match pending(self.conn.write_tls(&mut io)) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(_)) => {}
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(()))
    }

    /// Reads records from the socket and processes them: `Ready(Ok(0))`
    /// at its end.
    fn poll_read_tls(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let mut io = SyncIo {
            sock: &mut self.sock,
            cx,
        };
        let n = match pending(self.conn.read_tls(&mut io)) {
            Poll::Ready(Ok(n)) => n,
            other => return other,
        };
        if let Err(e) = self.conn.process_new_packets() {
            // The alert rustls queued for the client, best effort.
            let _ = self.poll_write_tls(cx);
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, e)));
        }
        Poll::Ready(Ok(n))
    }
}

impl AsyncRead for AsyncTls {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            match io::Read::read(&mut this.conn.reader(), buf.initialize_unfilled()) {
                Ok(n) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // The client closed without close_notify: its end.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Poll::Ready(Ok(())),
                Err(e) => return Poll::Ready(Err(e)),
            }
            if this.eof {
                return Poll::Ready(Ok(()));
            }
            // Records rustls wants to send first (a key update's answer).
            if let Poll::Ready(Err(e)) = this.poll_write_tls(cx) {
                return Poll::Ready(Err(e));
            }
            match this.poll_read_tls(cx) {
                Poll::Ready(Ok(0)) => this.eof = true,
                Poll::Ready(Ok(_)) => {}
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl AsyncWrite for AsyncTls {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let mut taken = 0;
        loop {
            match io::Write::write(&mut this.conn.writer(), &buf[taken..]) {
                Ok(n) => {
                    // Recorded before the client can read it.
                    this.scan.feed(&buf[taken..taken + n]);
                    taken += n;
                }
                Err(e) => return Poll::Ready(Err(e)),
            }
            if taken == buf.len() {
                // Written out now if the socket takes it (h2 flushes too).
                return match this.poll_write_tls(cx) {
                    Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                    _ => Poll::Ready(Ok(taken)),
                };
            }
            // rustls' buffer is full: out with it first.
            match this.poll_write_tls(cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending if taken > 0 => return Poll::Ready(Ok(taken)),
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Err(e) = io::Write::flush(&mut this.conn.writer()) {
            return Poll::Ready(Err(e));
        }
        match this.poll_write_tls(cx) {
            Poll::Ready(Ok(())) => Pin::new(&mut this.sock).poll_flush(cx),
            other => other,
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.conn.send_close_notify();
        match this.poll_write_tls(cx) {
            Poll::Ready(Ok(())) => Pin::new(&mut this.sock).poll_shutdown(cx),
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(method: &str, uri: &str, fields: &[(&str, &str)]) -> http::request::Parts {
        let mut request = http::Request::builder().method(method).uri(uri);
        for (name, value) in fields {
            request = request.header(*name, *value);
        }
        request.body(()).unwrap().into_parts().0
    }

    fn head(p: &http::request::Parts, framing: Framing, whole: Option<usize>) -> String {
        String::from_utf8(h1_head(p, framing, whole).map_err(|r| r.why).unwrap()).unwrap()
    }

    fn why(p: &http::request::Parts) -> String {
        match h1_head(p, Framing::None, Some(0)) {
            Ok(head) => panic!("admitted: {}", String::from_utf8_lossy(&head)),
            Err(refused) => {
                assert_eq!(refused.code, 400);
                refused.why
            }
        }
    }

    const U: &str = "https://pkgs.example.com:8443";

    #[test]
    fn a_stream_becomes_one_canonical_http1_request() {
        let p = parts(
            "GET",
            &format!("{U}/simple/a%2e/?q=1"),
            &[
                ("cookie", "a=1"),
                ("accept", "*/*"),
                ("cookie", "b=2"),
                ("te", "trailers"),
            ],
        );
        assert_eq!(
            head(&p, Framing::None, Some(0)),
            "GET /simple/a%2e/?q=1 HTTP/1.1\r\nHost: pkgs.example.com:8443\r\naccept: */*\r\n\
             Cookie: a=1; b=2\r\n\r\n"
        );
        // A body known whole gets its length; one that streams, chunks;
        // the client's content-length is kept (the h2 crate holds the
        // DATA to it), a `Host` equal to `:authority` written once.
        let p = parts(
            "POST",
            &format!("{U}/simple/up"),
            &[("host", "PKGS.example.com:8443"), ("expect", "other")],
        );
        // `expect: 100-continue` goes to the checker, which answers it.
        let continues = parts(
            "POST",
            &format!("{U}/simple/up"),
            &[("expect", "100-continue")],
        );
        assert!(head(&continues, Framing::Chunked, None).contains("\r\nexpect: 100-continue\r\n"));
        assert_eq!(
            head(&p, Framing::None, Some(3)),
            "POST /simple/up HTTP/1.1\r\nHost: pkgs.example.com:8443\r\nContent-Length: 3\r\n\r\n"
        );
        assert_eq!(
            head(&p, Framing::Chunked, None),
            "POST /simple/up HTTP/1.1\r\nHost: pkgs.example.com:8443\r\n\
             Transfer-Encoding: chunked\r\n\r\n"
        );
        let p = parts("PUT", &format!("{U}/simple/up"), &[("content-length", "5")]);
        assert_eq!(
            head(&p, Framing::Length, None),
            "PUT /simple/up HTTP/1.1\r\nHost: pkgs.example.com:8443\r\ncontent-length: 5\r\n\r\n"
        );
    }

    #[test]
    fn shapes_the_checker_could_not_see_are_refused_beside_their_twins() {
        let twin = parts("GET", &format!("{U}/simple/a"), &[("x-a", "1")]);
        assert!(h1_head(&twin, Framing::None, Some(0)).is_ok());
        assert!(why(&parts("CONNECT", "pkgs.example.com:8443", &[])).contains("CONNECT"));
        assert!(
            why(&parts("GET", "http://pkgs.example.com:8443/simple/a", &[]))
                .contains(":scheme \"http\"")
        );
        assert!(why(&parts(
            "GET",
            "https://me@pkgs.example.com:8443/simple/a",
            &[]
        ))
        .contains("user information"));
        assert!(why(&parts(
            "GET",
            &format!("{U}/simple/a"),
            &[("host", "other.example.com:8443")]
        ))
        .contains("disagree"));
        assert!(why(&parts(
            "GET",
            &format!("{U}/simple/a"),
            &[("host", "a.example.com"), ("host", "b.example.com")]
        ))
        .contains("more than one Host"));
        assert!(why(&parts(
            "POST",
            &format!("{U}/simple/a"),
            &[("content-length", "3"), ("content-length", "3")]
        ))
        .contains("more than one content-length"));
        for name in CONNECTION_SPECIFIC {
            let refused = why(&parts("GET", &format!("{U}/simple/a"), &[(name, "x")]));
            assert!(refused.contains(name), "{name}: {refused}");
        }
        assert!(
            why(&parts("GET", &format!("{U}/simple/a"), &[("te", "gzip")])).contains("te field")
        );
        // R9 F3: `Host` without `:authority` (the crate drops `:scheme`
        // then): refused for what it is, not for a `:scheme` never seen.
        let refused = why(&parts(
            "GET",
            "/simple/a",
            &[("host", "pkgs.example.com:8443")],
        ));
        assert_eq!(refused, "no :authority (HTTP/2)");
    }

    fn response(raw: &str, head_request: bool) -> Option<(http::Response<()>, Body)> {
        let mut slots = [httparse::EMPTY_HEADER; 32];
        let mut parsed = httparse::Response::new(&mut slots);
        assert!(parsed.parse(raw.as_bytes()).unwrap().is_complete());
        response_head(&parsed, head_request)
    }

    #[test]
    fn responses_lose_their_connection_fields_and_keep_their_framing() {
        let (r, body) = response(
            "HTTP/1.1 200 OK\r\nConnection: close\r\nKeep-Alive: 5\r\nX-A: 1\r\nContent-Length: 7\r\n\r\n",
            false,
        )
        .unwrap();
        assert!(matches!(body, Body::Length(7)));
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers().len(), 2, "{:?}", r.headers());
        assert_eq!(r.headers()["x-a"], "1");
        let (r, body) = response(
            "HTTP/1.1 403 Forbidden\r\nTransfer-Encoding: chunked\r\nSandbox-Admit-With: x\r\n\r\n",
            false,
        )
        .unwrap();
        assert!(matches!(body, Body::Chunked));
        assert!(!r.headers().contains_key("transfer-encoding"));
        assert_eq!(r.headers()["sandbox-admit-with"], "x");
        let (_, body) = response("HTTP/1.1 200 OK\r\n\r\n", false).unwrap();
        assert!(matches!(body, Body::Close));
        for (raw, head_request) in [
            ("HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\n", true),
            ("HTTP/1.1 204 No Content\r\n\r\n", false),
            (
                "HTTP/1.1 304 Not Modified\r\nContent-Length: 7\r\n\r\n",
                false,
            ),
        ] {
            assert!(matches!(response(raw, head_request).unwrap().1, Body::None));
        }
        // A framing HTTP/2 cannot say: no response (the stream is reset).
        for raw in [
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
        ] {
            assert!(response(raw, false).is_none(), "{raw}");
        }
    }

    /// A raw HTTP/2 client over TLS trusting `ca` (frames by hand, so a
    /// stream can be left open).
    struct RawClient {
        tls: rustls::StreamOwned<rustls::ClientConnection, std::net::TcpStream>,
        buf: Vec<u8>,
    }

    impl RawClient {
        fn connect(addr: std::net::SocketAddr, ca: &str) -> RawClient {
            let mut roots = rustls::RootCertStore::empty();
            for cert in super::super::ca::parse_pem_certs(ca.as_bytes()).unwrap() {
                roots.add(cert).unwrap();
            }
            let mut config = rustls::ClientConfig::builder_with_provider(super::super::provider())
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(roots)
                .with_no_client_auth();
            config.alpn_protocols = vec![b"h2".to_vec()];
            let name = rustls::pki_types::ServerName::try_from("pkgs.example.com").unwrap();
            let conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
            let tcp = TcpStream::connect(addr).unwrap();
            tcp.set_read_timeout(Some(std::time::Duration::from_secs(10)))
                .unwrap();
            let mut tls = rustls::StreamOwned::new(conn, tcp);
            while tls.conn.is_handshaking() {
                tls.conn.complete_io(&mut tls.sock).unwrap();
            }
            assert_eq!(tls.conn.alpn_protocol(), Some(&b"h2"[..]));
            let mut client = RawClient {
                tls,
                buf: Vec::new(),
            };
            client.send(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
            client.frame(4, 0, 0, b"");
            client
        }

        fn send(&mut self, bytes: &[u8]) {
            io::Write::write_all(&mut self.tls, bytes).unwrap();
            io::Write::flush(&mut self.tls).unwrap();
        }

        fn frame(&mut self, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
            let mut out = (payload.len() as u32).to_be_bytes()[1..].to_vec();
            out.extend_from_slice(&[kind, flags]);
            out.extend_from_slice(&stream.to_be_bytes());
            out.extend_from_slice(payload);
            self.send(&out);
        }

        /// A GET of `path`, the stream left open unless `end`.
        fn get(&mut self, stream: u32, path: &str, end: bool) {
            self.request(
                stream,
                &[
                    (":method", "GET"),
                    (":scheme", "https"),
                    (":authority", "pkgs.example.com"),
                    (":path", path),
                ],
                end,
            );
        }

        /// A request of `fields` in order, the stream left open unless
        /// `end`.
        fn request(&mut self, stream: u32, fields: &[(&str, &str)], end: bool) {
            let mut block = Vec::new();
            for &(name, value) in fields {
                // A literal field never indexed, no Huffman coding.
                block.push(0x10);
                block.push(name.len() as u8);
                block.extend_from_slice(name.as_bytes());
                block.push(value.len() as u8);
                block.extend_from_slice(value.as_bytes());
            }
            self.frame(1, 4 | u8::from(end), stream, &block);
        }

        /// The next frame for `stream` (kind, flags, payload); frames
        /// for others skipped.
        fn until(&mut self, stream: u32) -> (u8, u8, Vec<u8>) {
            loop {
                let (kind, flags, got, payload) = self.next();
                if got == stream {
                    return (kind, flags, payload);
                }
            }
        }

        /// The next frame for a stream (kind, flags, stream, payload);
        /// SETTINGS acknowledged on the way.
        fn next(&mut self) -> (u8, u8, u32, Vec<u8>) {
            loop {
                while self.buf.len() < 9
                    || self.buf.len()
                        < 9 + u32::from_be_bytes([0, self.buf[0], self.buf[1], self.buf[2]])
                            as usize
                {
                    let mut more = [0u8; 16 * 1024];
                    let n = io::Read::read(&mut self.tls, &mut more).unwrap();
                    assert!(n > 0, "the proxy closed");
                    self.buf.extend_from_slice(&more[..n]);
                }
                let len = u32::from_be_bytes([0, self.buf[0], self.buf[1], self.buf[2]]) as usize;
                let (kind, flags) = (self.buf[3], self.buf[4]);
                let stream =
                    u32::from_be_bytes([self.buf[5] & 0x7f, self.buf[6], self.buf[7], self.buf[8]]);
                let payload = self.buf[9..9 + len].to_vec();
                self.buf.drain(..9 + len);
                if kind == 4 && flags & 1 == 0 {
                    self.frame(4, 1, 0, b"");
                }
                if stream != 0 {
                    return (kind, flags, stream, payload);
                }
            }
        }
    }

    /// #44: each HTTP/2 stream takes one of the proxy's connection slots
    /// (here 3: the connection's and two streams'): a third stream open at
    /// once is refused (RST_STREAM REFUSED_STREAM) and counted; the twin:
    /// once the others have ended (answered 403 over HTTP/2), a new stream
    /// is served.
    #[test]
    fn each_stream_takes_a_connection_slot_and_one_past_the_limit_is_refused() {
        let interceptor = test_interceptor("slots");
        let shared = Arc::new(crate::state::Shared::new(
            sandbox_core::net::EgressRules::new(Vec::new()),
            sandbox_core::net::HostAddrs::new([]),
            crate::ProxyOptions::default().max_connections(3),
            "127.0.0.1:9".parse().unwrap(),
        ));
        let slot = shared.claim().unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = {
            let interceptor = Arc::clone(&interceptor);
            std::thread::spawn(move || {
                let (tcp, _) = listener.accept().unwrap();
                slot.track(&tcp);
                exchange::serve(&slot, &interceptor, tcp, "pkgs.example.com", 443, None);
            })
        };
        let mut client = RawClient::connect(addr, &interceptor.ca_pem());
        // Two streams left open (their bodies pending) hold two slots.
        client.get(1, "/private", false);
        client.get(3, "/private", false);
        client.get(5, "/private", false);
        let (kind, _, payload) = client.until(5);
        assert_eq!(kind, 3, "RST_STREAM on the third");
        assert_eq!(payload, 7u32.to_be_bytes(), "REFUSED_STREAM");
        let mut counted = sandbox_core::Mediation::default();
        shared.ended().add_to(&mut counted);
        assert_eq!(counted.egress_closed_at_limit, 1);
        // The two are answered (their requests go to the checker once no
        // more of their bodies comes: refused, 403 over HTTP/2).
        let mut bodies = [Vec::new(), Vec::new()];
        let mut ended = [false, false];
        while ended != [true, true] {
            let (kind, flags, stream, payload) = client.next();
            let at = match stream {
                1 => 0,
                3 => 1,
                _ => continue,
            };
            if kind == 0 {
                bodies[at].extend_from_slice(&payload);
            }
            ended[at] |= flags & 1 != 0;
        }
        for body in bodies {
            let body = String::from_utf8(body).unwrap();
            assert!(
                body.starts_with(
                    "sandbox egress proxy: refused GET https://pkgs.example.com/private"
                ),
                "{body}"
            );
        }
        // Their slots are free again (once their threads have ended): a
        // new stream is served.
        let mut served = false;
        for stream in (7..100).step_by(2) {
            client.get(stream, "/private", true);
            let (kind, _, _) = client.until(stream);
            if kind == 1 {
                served = true;
                break;
            }
            assert_eq!(kind, 3);
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        assert!(served, "no stream served after the others ended");
        drop(client);
        server.join().unwrap();
    }

    /// The interceptor of these tests: GET of `/simple/**` on
    /// pkgs.example.com, the origin verified against a throwaway CA.
    fn test_interceptor(tag: &str) -> Arc<Interceptor> {
        use std::io::Write as _;
        let dir = std::env::temp_dir().join(format!("h2-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let upstream = dir.join("upstream.pem");
        let cert = rcgen::generate_simple_self_signed(vec!["upstream.test".to_string()]).unwrap();
        std::fs::File::create(&upstream)
            .unwrap()
            .write_all(cert.cert.pem().as_bytes())
            .unwrap();
        let interceptor = Arc::new(
            Interceptor::new(
                vec!["GET https://pkgs.example.com/simple/**".parse().unwrap()],
                Some(&upstream),
                Vec::new(),
            )
            .unwrap(),
        );
        let _ = std::fs::remove_dir_all(&dir);
        interceptor
    }

    /// A proxy serving one intercepted HTTP/2 connection (rules: GET of
    /// `/simple/**`), its options `opts`; its state, its address, its CA,
    /// the thread serving it.
    fn one_connection(
        opts: crate::ProxyOptions,
        tag: &str,
    ) -> (
        Arc<crate::state::Shared>,
        std::net::SocketAddr,
        String,
        std::thread::JoinHandle<()>,
    ) {
        let interceptor = test_interceptor(tag);
        let shared = Arc::new(crate::state::Shared::new(
            sandbox_core::net::EgressRules::new(Vec::new()),
            sandbox_core::net::HostAddrs::new([]),
            opts,
            "127.0.0.1:9".parse().unwrap(),
        ));
        let slot = shared.claim().unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let ca = interceptor.ca_pem();
        let server = std::thread::spawn(move || {
            let (tcp, _) = listener.accept().unwrap();
            slot.track(&tcp);
            exchange::serve(&slot, &interceptor, tcp, "pkgs.example.com", 443, None);
        });
        (shared, addr, ca, server)
    }

    /// The reasons of the refusals the run recorded so far.
    fn refusals(shared: &crate::state::Shared) -> Vec<String> {
        shared
            .refusals()
            .iter()
            .map(|r| r.reason.to_string())
            .collect()
    }

    /// The body of the answer on `stream` (until its end), or its reset.
    fn answer_of(client: &mut RawClient, stream: u32) -> Result<String, u32> {
        let mut body = Vec::new();
        loop {
            let (kind, flags, payload) = client.until(stream);
            match kind {
                0 => body.extend_from_slice(&payload),
                3 => return Err(u32::from_be_bytes(payload[..4].try_into().unwrap())),
                _ => {}
            }
            if kind <= 1 && flags & 1 != 0 {
                return Ok(String::from_utf8(body).unwrap());
            }
        }
    }

    /// R9 F2: a stream the h2 crate resets itself before the proxy sees
    /// it (a connection-specific field: RST_STREAM PROTOCOL_ERROR) is
    /// recorded as malformed HTTP/2, once for the connection; the twin
    /// before it (no such field) is answered by the checker and recorded as
    /// its refusal only. A GOAWAY the crate sends (an upper-case name) is
    /// recorded too, on a connection of its own.
    #[test]
    fn what_the_h2_crate_refuses_itself_is_recorded_beside_its_twin() {
        let opts = crate::ProxyOptions::default();
        let (shared, addr, ca, server) = one_connection(opts, "malformed");
        let mut client = RawClient::connect(addr, &ca);
        let base = [
            (":method", "GET"),
            (":scheme", "https"),
            (":authority", "pkgs.example.com"),
            (":path", "/private"),
        ];
        client.request(1, &base, true);
        let twin = answer_of(&mut client, 1).unwrap();
        assert!(twin.contains("no request rule admits it"), "{twin}");
        let twin = refusals(&shared);
        assert_eq!(twin.len(), 1, "{twin:?}");
        assert!(!twin[0].contains("malformed HTTP/2"), "{twin:?}");
        for stream in [3, 5] {
            let mut fields = base.to_vec();
            fields.push(("connection", "close"));
            client.request(stream, &fields, true);
            assert_eq!(answer_of(&mut client, stream), Err(1), "PROTOCOL_ERROR");
        }
        let recorded = refusals(&shared);
        assert_eq!(recorded.len(), 2, "once a connection: {recorded:?}");
        assert!(
            recorded[1]
                .starts_with("malformed HTTP/2 from the command: the h2 crate reset stream 3"),
            "{recorded:?}"
        );
        drop(client);
        server.join().unwrap();

        let opts = crate::ProxyOptions::default();
        let (shared, addr, ca, server) = one_connection(opts, "goaway");
        let mut client = RawClient::connect(addr, &ca);
        let mut fields = base.to_vec();
        fields.push(("X-Upper", "1"));
        client.request(1, &fields, true);
        // The GOAWAY (on stream 0) then the end: the client reads to it.
        let mut rest = Vec::new();
        while let Ok(n) = io::Read::read(&mut client.tls, &mut [0u8; 4096]) {
            if n == 0 {
                break;
            }
            rest.push(n);
        }
        server.join().unwrap();
        let recorded = refusals(&shared);
        assert_eq!(recorded.len(), 1, "{recorded:?}");
        assert!(
            recorded[0].starts_with(
                "malformed HTTP/2 from the command: the h2 crate ended the connection (GOAWAY PROTOCOL_ERROR)"
            ),
            "{recorded:?}"
        );
    }

    /// R9 F4: a stream whose whole content-length (0 here) has come but
    /// which stays open is answered 408 within the head timeout and
    /// recorded (its slot freed); the twin that ends its stream is served
    /// (by the checker: the refusal of its path).
    #[test]
    fn a_stream_left_open_after_its_content_length_is_answered_408() {
        let timeout = std::time::Duration::from_millis(700);
        let opts = crate::ProxyOptions::default().head_timeout(timeout);
        let (shared, addr, ca, server) = one_connection(opts, "open");
        let mut client = RawClient::connect(addr, &ca);
        let fields = [
            (":method", "GET"),
            (":scheme", "https"),
            (":authority", "pkgs.example.com"),
            (":path", "/simple/open"),
            ("content-length", "0"),
        ];
        client.request(1, &fields, true);
        let twin = answer_of(&mut client, 1).unwrap();
        assert!(!twin.contains("stayed open"), "{twin}");
        assert_eq!(refusals(&shared), Vec::<String>::new());
        let started = std::time::Instant::now();
        client.request(3, &fields, false);
        let body = answer_of(&mut client, 3).unwrap();
        let took = started.elapsed();
        assert!(
            body.starts_with("sandbox egress proxy: refused GET https://pkgs.example.com/simple/open: the stream stayed open after its whole content-length"),
            "{body}"
        );
        assert!(took >= timeout && took < timeout * 5, "{took:?}");
        let recorded = refusals(&shared);
        assert_eq!(recorded.len(), 1, "{recorded:?}");
        assert!(recorded[0].contains("stayed open"), "{recorded:?}");
        // Its slot is free again: a stream after it is served.
        client.request(5, &fields, true);
        assert!(answer_of(&mut client, 5).is_ok());
        drop(client);
        server.join().unwrap();
    }

    /// The frames the proxy writes, however split, are read for what the
    /// crate refused itself: its own answers on accepted streams, other
    /// reset codes and a graceful GOAWAY are not; a PROTOCOL_ERROR reset
    /// of a stream never accepted is, once.
    #[test]
    fn the_scan_reads_frames_split_anywhere() {
        let shared = Arc::new(crate::state::Shared::new(
            sandbox_core::net::EgressRules::new(Vec::new()),
            sandbox_core::net::HostAddrs::new([]),
            crate::ProxyOptions::default(),
            "127.0.0.1:9".parse().unwrap(),
        ));
        let watch = Arc::new(Watch {
            shared: Arc::clone(&shared),
            host: "pkgs.example.com".into(),
            port: 443,
            accepted: AtomicU32::new(3),
            done: AtomicBool::new(false),
            recorded: AtomicU32::new(0),
        });
        let frame = |kind: u8, stream: u32, payload: &[u8]| {
            let mut out = (payload.len() as u32).to_be_bytes()[1..].to_vec();
            out.extend_from_slice(&[kind, 0]);
            out.extend_from_slice(&stream.to_be_bytes());
            out.extend_from_slice(payload);
            out
        };
        let mut quiet = frame(4, 0, &[0; 12]);
        quiet.extend(frame(HEADERS, 3, b"\x88"));
        quiet.extend(frame(0, 3, &[7; 300]));
        quiet.extend(frame(RST_STREAM, 3, &1u32.to_be_bytes()));
        quiet.extend(frame(RST_STREAM, 5, &7u32.to_be_bytes()));
        quiet.extend(frame(GOAWAY, 0, &[0, 0, 0, 5, 0, 0, 0, 0]));
        let mut scan = Scan::new(Arc::clone(&watch));
        for byte in &quiet {
            scan.feed(std::slice::from_ref(byte));
        }
        assert!(shared.refusals().is_empty());
        let mut reset = frame(RST_STREAM, 7, &1u32.to_be_bytes());
        reset.extend(frame(RST_STREAM, 9, &1u32.to_be_bytes()));
        scan.feed(&reset[..5]);
        scan.feed(&reset[5..]);
        let recorded = shared.refusals();
        assert_eq!(recorded.len(), 1);
        assert!(
            recorded[0].to_string().contains("reset stream 7"),
            "{}",
            recorded[0]
        );
        assert!(watch.recorded(7) && !watch.recorded(9));
    }
}
