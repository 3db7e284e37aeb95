//! HTTP: `CONNECT` tunnels and plain forwarding of absolute-form requests.

use std::io::{self, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

use crate::deadline::read_by;
use crate::relay::relay;
use crate::state::Slot;
use crate::target::{open, Failure, Target};

/// Header slots for one request head.
const MAX_HEADERS: usize = 128;

/// A parsed request head, owned.
#[derive(Debug)]
struct Head {
    method: String,
    target: String,
    /// The minor version: `HTTP/1.0` or `HTTP/1.1`.
    minor: u8,
    headers: Vec<(String, Vec<u8>)>,
    /// Bytes the client sent after the head (body, or tunnelled data).
    rest: Vec<u8>,
}

/// Why no head was read.
enum HeadError {
    /// The client closed or the connection failed: nothing to answer.
    Gone,
    TimedOut,
    TooLarge,
    Malformed(String),
}

/// Reads and parses one request head of at most `max` bytes by `deadline`.
fn read_head(client: &mut TcpStream, max: usize, deadline: Instant) -> Result<Head, HeadError> {
    let mut buf = vec![0u8; max];
    let mut len = 0;
    loop {
        if len == buf.len() {
            return Err(HeadError::TooLarge);
        }
        match read_by(client, &mut buf[len..], deadline) {
            Ok(0) => return Err(HeadError::Gone),
            Ok(n) => len += n,
            Err(e) if e.kind() == io::ErrorKind::TimedOut => return Err(HeadError::TimedOut),
            Err(_) => return Err(HeadError::Gone),
        }
        let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut req = httparse::Request::new(&mut slots);
        match req.parse(&buf[..len]) {
            Ok(httparse::Status::Partial) => continue,
            Ok(httparse::Status::Complete(head_len)) => {
                let (Some(method), Some(target), Some(minor)) = (req.method, req.path, req.version)
                else {
                    return Err(HeadError::Malformed("incomplete request line".into()));
                };
                return Ok(Head {
                    method: method.to_string(),
                    target: target.to_string(),
                    minor,
                    headers: req
                        .headers
                        .iter()
                        .map(|h| (h.name.to_string(), h.value.to_vec()))
                        .collect(),
                    rest: buf[head_len..len].to_vec(),
                });
            }
            Err(httparse::Error::TooManyHeaders) => return Err(HeadError::TooLarge),
            Err(e) => return Err(HeadError::Malformed(e.to_string())),
        }
    }
}

/// Answers `code` with a one-line plain-text `body` and closes the
/// connection, reading a little of what the client still sends so that the
/// answer is not lost to a reset.
/// How much of what a client still sends after a refusal (the body of a
/// refused request) is read and dropped, within half a second, before the
/// connection is closed: closing with unread data resets the connection
/// (RFC 9112 section 9.6), and a client still sending (a 3 MB upload) could
/// then lose the answer it was sent.
pub(crate) const REFUSED_BODY_DRAIN: usize = 16 << 20;

fn answer(mut client: TcpStream, code: u16, reason: &str, body: &str) {
    let _ = client.set_write_timeout(Some(Duration::from_secs(5)));
    let text = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}\n",
        body.len() + 1
    );
    if client.write_all(text.as_bytes()).is_err() {
        return;
    }
    let _ = client.shutdown(Shutdown::Write);
    let deadline = Instant::now() + Duration::from_millis(500);
    let mut sink = [0u8; 4096];
    let mut drained = 0usize;
    while drained < REFUSED_BODY_DRAIN {
        match read_by(&mut client, &mut sink, deadline) {
            Ok(0) | Err(_) => break,
            Ok(n) => drained += n,
        }
    }
}

fn answer_failure(client: TcpStream, target: &Target, failure: &Failure) {
    match failure {
        Failure::Refused(refused) => answer(
            client,
            403,
            "Forbidden",
            &format!("sandbox egress proxy: refused {refused}"),
        ),
        Failure::Unresolvable(e) => answer(
            client,
            502,
            "Bad Gateway",
            &format!("sandbox egress proxy: cannot resolve {target}: {e}"),
        ),
        Failure::Unreachable(e) => answer(
            client,
            502,
            "Bad Gateway",
            &format!("sandbox egress proxy: cannot connect to {target}: {e}"),
        ),
    }
}

fn bad_request(client: TcpStream, why: &str) {
    answer(
        client,
        400,
        "Bad Request",
        &format!("sandbox egress proxy: bad request: {why}"),
    );
}

/// Serves one HTTP request: a `CONNECT` tunnel or one forwarded request.
pub(crate) fn serve(slot: &Slot, mut client: TcpStream, deadline: Instant) {
    let head = match read_head(&mut client, slot.shared.opts.max_head_bytes, deadline) {
        Ok(head) => head,
        Err(HeadError::Gone) => return,
        Err(HeadError::TimedOut) => {
            return answer(
                client,
                408,
                "Request Timeout",
                "sandbox egress proxy: the request head did not arrive in time",
            )
        }
        Err(HeadError::TooLarge) => {
            return answer(
                client,
                431,
                "Request Header Fields Too Large",
                "sandbox egress proxy: the request head is too large",
            )
        }
        Err(HeadError::Malformed(why)) => return bad_request(client, &why),
    };
    #[cfg(target_os = "linux")]
    if let Some(interception) = &slot.shared.opts.interception {
        if let Some(refused) = placeholder_outside(&interception.inner, &head) {
            slot.shared.refuse(refused.clone());
            return answer(
                client,
                403,
                "Forbidden",
                &format!(
                    "sandbox egress proxy: refused {}: {}",
                    refused.what(),
                    refused.reason
                ),
            );
        }
    }
    if head.method.eq_ignore_ascii_case("CONNECT") {
        connect(slot, client, head);
    } else {
        forward(slot, client, head);
    }
}

/// A request head the proxy does not intercept (a `CONNECT`, a plain HTTP
/// request) that carries a secret's placeholder: the proxy could not keep
/// it from where it goes, so it is refused (an attempted exfiltration). A
/// `CONNECT` to an intercepted host is checked request by request instead.
#[cfg(target_os = "linux")]
fn placeholder_outside(
    interceptor: &crate::intercept::Interceptor,
    head: &Head,
) -> Option<crate::Refused> {
    let secret = [head.method.as_bytes(), head.target.as_bytes()]
        .into_iter()
        .chain(
            head.headers
                .iter()
                .flat_map(|(n, v)| [n.as_bytes(), v.as_slice()]),
        )
        .chain(std::iter::once(head.rest.as_slice()))
        .find_map(|bytes| interceptor.placeholder_in(bytes))?;
    let authority = match head.target.split_once("://") {
        Some((_, rest)) => rest.split('/').next().unwrap_or(""),
        None => head.target.as_str(),
    };
    let (host, port) = match Target::parse_authority(authority, Some(80)) {
        Some(Target {
            host: crate::target::Host::Name(name),
            port,
        }) => (name, port),
        Some(Target {
            host: crate::target::Host::Ip(ip),
            port,
        }) => (ip.to_string(), port),
        None => (String::new(), 0),
    };
    Some(crate::Refused {
        host,
        port,
        reason: crate::RefusalReason::Request {
            method: head.method.clone(),
            path: String::new(),
            why: format!(
                "the request carries the placeholder of the secret {}, which goes only to {} \
                 (attempted exfiltration)",
                secret.name(),
                secret.hosts().join(", ")
            ),
            admit_with: None,
        },
    })
}

fn connect(slot: &Slot, mut client: TcpStream, head: Head) {
    let Some(target) = Target::parse_authority(&head.target, None) else {
        return bad_request(
            client,
            &format!("CONNECT needs host:port, not {:?}", head.target),
        );
    };
    #[cfg(target_os = "linux")]
    if let (Some(interception), crate::target::Host::Name(name)) =
        (&slot.shared.opts.interception, &target.host)
    {
        if interception.inner.intercepts(name, target.port) {
            return crate::intercept::serve(
                slot,
                &interception.inner,
                client,
                name,
                target.port,
                Some(&head.rest),
            );
        }
    }
    let mut upstream = match open(&slot.shared, &target) {
        Ok(upstream) => upstream,
        Err(failure) => return answer_failure(client, &target, &failure),
    };
    if client
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .is_err()
    {
        return;
    }
    // On a port a request rule intercepts, a TLS ClientHello must ask for
    // the tunnel's own host (crate::sni).
    #[cfg(target_os = "linux")]
    let Some(rest) = crate::sni::gate(slot, &mut client, &upstream, &target, head.rest) else {
        return;
    };
    #[cfg(not(target_os = "linux"))]
    let rest = head.rest;
    if !rest.is_empty() && upstream.write_all(&rest).is_err() {
        return;
    }
    relay(slot, client, upstream);
}

/// An absolute `http://` URI split into its target, the authority as
/// written (for `Host`) and the origin-form path.
fn split_absolute(uri: &str) -> Result<(Target, &str, String), String> {
    let scheme_end = uri.find("://").ok_or_else(|| {
        format!("not a proxy request: {uri:?} is not an absolute URI (send http://host/path, or CONNECT host:port)")
    })?;
    let scheme = &uri[..scheme_end];
    if !scheme.eq_ignore_ascii_case("http") {
        return Err(format!(
            "only http:// URIs are forwarded, not {scheme}:// (use CONNECT host:port for HTTPS)"
        ));
    }
    let rest = &uri[scheme_end + 3..];
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    if authority.contains('@') {
        return Err("user information in the URI is not supported".into());
    }
    let target = Target::parse_authority(authority, Some(80))
        .ok_or_else(|| format!("bad host or port in {authority:?}"))?;
    let tail = tail.split('#').next().unwrap_or("");
    let path = if tail.starts_with('/') {
        tail.to_string()
    } else {
        format!("/{tail}")
    };
    Ok((target, authority, path))
}

/// Whether a header is hop-by-hop (never forwarded): the fixed ones and
/// those the `Connection` header names.
fn hop_by_hop(name: &str, named: &[String]) -> bool {
    const FIXED: &[&str] = &[
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authorization",
        "upgrade",
        "host",
    ];
    FIXED.iter().any(|h| name.eq_ignore_ascii_case(h))
        || named.iter().any(|h| name.eq_ignore_ascii_case(h))
}

/// The request head to send the origin: origin-form request line, `Host`
/// from the URI, hop-by-hop headers dropped, `Connection: close`.
/// With `secrets` (the run has some), the origin is asked only for content
/// codings the proxy decodes (`Accept-Encoding` rewritten), as the
/// response is masked as the client will read it.
fn origin_head(head: &Head, authority: &str, path: &str, secrets: bool) -> Vec<u8> {
    let named: Vec<String> = head
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("connection"))
        .flat_map(|(_, v)| {
            String::from_utf8_lossy(v)
                .split(',')
                .map(|t| t.trim().to_string())
                .filter(|t| !t.is_empty())
                .collect::<Vec<_>>()
        })
        .collect();
    let mut out = Vec::with_capacity(512);
    out.extend_from_slice(
        format!(
            "{} {path} HTTP/1.{}\r\nHost: {authority}\r\n",
            head.method, head.minor
        )
        .as_bytes(),
    );
    for (name, value) in &head.headers {
        // With secrets, no range either: parts of an echo, each masked
        // alone, would carry a value in pieces (a 206 is refused);
        // `Request-Range` is the old name Apache httpd still reads, and CGI
        // servers read `_` as `-`.
        let with_secrets = ["accept-encoding", "range", "if-range", "request-range"];
        if hop_by_hop(name, &named)
            || (secrets
                && with_secrets
                    .iter()
                    .any(|h| name.replace('_', "-").eq_ignore_ascii_case(h)))
        {
            continue;
        }
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    #[cfg(target_os = "linux")]
    if secrets {
        let asked = crate::intercept::body::accept_encoding(
            head.headers
                .iter()
                .filter(|(n, _)| n.eq_ignore_ascii_case("accept-encoding"))
                .map(|(_, v)| v.as_slice()),
        );
        out.extend_from_slice(format!("Accept-Encoding: {asked}\r\n").as_bytes());
    }
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    out
}

fn forward(slot: &Slot, client: TcpStream, head: Head) {
    let (target, authority, path) = match split_absolute(&head.target) {
        Ok(parts) => parts,
        Err(why) => return bad_request(client, &why),
    };
    // With secrets, no placeholder goes in the body either (no secret
    // goes over plain HTTP). A chunked body is also watched as the origin
    // reads it (the chunks joined), where a placeholder split by a chunk's
    // framing stands whole.
    #[cfg(target_os = "linux")]
    let mut watch = slot
        .shared
        .opts
        .interception
        .as_ref()
        .and_then(|interception| {
            let raw = crate::intercept::BodyGuard::new(interception.inner.secrets().iter())?;
            let chunked = head.headers.iter().any(|(n, v)| {
                n.eq_ignore_ascii_case("transfer-encoding")
                    && String::from_utf8_lossy(v)
                        .to_ascii_lowercase()
                        .contains("chunked")
            });
            Some(Watch {
                raw,
                joined: chunked
                    .then(|| crate::intercept::BodyGuard::new(interception.inner.secrets().iter()))
                    .flatten()
                    .map(|g| (Joined::Chunks(crate::chunked::Decoder::new()), g)),
            })
        });
    // The bytes read with the head start the body: watched before any of
    // it goes (or the origin is reached).
    #[cfg(target_os = "linux")]
    if let Some(Err(stop)) = watch.as_mut().map(|w| w.check(&head.rest)) {
        let (status, reason, why) = stop.refusal();
        let text = format!(
            "sandbox egress proxy: refused {} http://{authority}{path}: {why}",
            head.method
        );
        let (host, port) = match &target.host {
            crate::target::Host::Name(name) => (name.clone(), target.port),
            crate::target::Host::Ip(ip) => (ip.to_string(), target.port),
        };
        slot.shared.refuse(crate::Refused {
            host,
            port,
            reason: crate::RefusalReason::Request {
                method: head.method.clone(),
                path: String::new(),
                why,
                admit_with: None,
            },
        });
        return answer(client, status, reason, &text);
    }
    let mut upstream = match open(&slot.shared, &target) {
        Ok(upstream) => upstream,
        Err(failure) => return answer_failure(client, &target, &failure),
    };
    // The same condition as the masked relay below.
    #[cfg(target_os = "linux")]
    let secrets = slot.shared.opts.interception.as_ref().is_some_and(|i| {
        i.inner
            .secrets()
            .iter()
            .any(|s| !s.placeholder().is_empty())
    });
    #[cfg(not(target_os = "linux"))]
    let secrets = false;
    let mut first = origin_head(&head, authority, &path, secrets);
    first.extend_from_slice(&head.rest);
    if upstream.write_all(&first).is_err() {
        return;
    }
    #[cfg(target_os = "linux")]
    if let (Some(interception), Some(watch)) = (&slot.shared.opts.interception, watch) {
        let shown = format!("{} http://{authority}{path}", head.method);
        // The response passes the proxy in clear: the secrets' values
        // are masked in it as in an intercepted one (an origin that
        // serves what an intercepted host stored).
        let scrub = interception.inner.scrub(std::iter::empty());
        let response = crate::intercept::body::PlainResponse::new(
            scrub,
            head.method.eq_ignore_ascii_case("HEAD"),
            head.minor == 1,
        );
        return relay_guarded(
            slot,
            (client, upstream),
            (watch, response),
            &target,
            &head.method,
            &shown,
            crate::relay::HALF_CLOSED_IDLE,
        );
    }
    // The body (framed by the client's Content-Length or chunking) and
    // the response are relayed as bytes: everything goes to the one
    // destination admitted, and the origin closes after its response.
    relay(slot, client, upstream);
}

/// What a plain HTTP relay watches: the client's bytes as sent, and, for a
/// chunked body, its data joined.
#[cfg(target_os = "linux")]
struct Watch<'a> {
    raw: crate::intercept::BodyGuard<'a>,
    joined: Option<(Joined, crate::intercept::BodyGuard<'a>)>,
}

/// How a chunked request body is read for its joined view.
#[cfg(target_os = "linux")]
enum Joined {
    /// De-chunked by the proxy's one decoder ([`crate::chunked`]).
    Chunks(crate::chunked::Decoder),
    /// After the body's end (bytes a client sends after it): as they are.
    Raw,
}

/// Why a watched plain request body is cut off.
#[cfg(target_os = "linux")]
enum Stop<'a> {
    /// It carries this secret's placeholder.
    Placeholder(&'a crate::Secret),
    /// Its chunked framing does not read: the origin may read it
    /// otherwise, joining what the proxy saw apart.
    Framing(crate::chunked::Malformed),
}

#[cfg(target_os = "linux")]
impl Stop<'_> {
    /// The refusal's status, reason phrase and why.
    fn refusal(&self) -> (u16, &'static str, String) {
        match self {
            Stop::Placeholder(secret) => (
                403,
                "Forbidden",
                format!(
                    "the request body carries the placeholder of the secret {}, which goes only \
                     to {} (attempted exfiltration; the request was cut off before it)",
                    secret.name(),
                    secret.hosts().join(", ")
                ),
            ),
            Stop::Framing(why) => (
                400,
                "Bad Request",
                format!(
                    "the request's chunked body is malformed ({why}) while the run has secrets: \
                     the proxy could not read it as the origin may (a placeholder split by its \
                     framing would pass unseen); the request was cut off there"
                ),
            ),
        }
    }
}

#[cfg(target_os = "linux")]
impl<'a> Watch<'a> {
    fn check(&mut self, bytes: &[u8]) -> Result<(), Stop<'a>> {
        self.raw.check(bytes).map_err(Stop::Placeholder)?;
        let Some((view, guard)) = &mut self.joined else {
            return Ok(());
        };
        let mut rest = bytes;
        if let Joined::Chunks(decoder) = view {
            match decoder.feed(bytes, &mut |data| guard.check(data)) {
                Ok(used) => {
                    rest = &bytes[used..];
                    if decoder.done() {
                        *view = Joined::Raw;
                    }
                }
                Err(crate::chunked::Error::Sink(secret)) => return Err(Stop::Placeholder(secret)),
                Err(crate::chunked::Error::Malformed(why)) => return Err(Stop::Framing(why)),
            }
        }
        if matches!(view, Joined::Raw) && !rest.is_empty() {
            guard.check(rest).map_err(Stop::Placeholder)?;
        }
        Ok(())
    }
}

/// [`relay`], the client's bytes watched for a secret's placeholder: the
/// read that completes one is not sent; the origin's connection is cut
/// there (the request never completes), the refusal recorded, and the
/// client answered 403 when no response byte reached it yet. As
/// [`relay`], once the client has ended its side the origin may stay
/// silent `idle` ([`crate::relay::HALF_CLOSED_IDLE`] but in tests) at most;
/// both threads share the two sockets (no duplicate descriptors).
#[cfg(target_os = "linux")]
fn relay_guarded(
    slot: &Slot,
    (client, upstream): (TcpStream, TcpStream),
    (mut guard, mut response): (Watch<'_>, crate::intercept::body::PlainResponse),
    target: &Target,
    method: &str,
    shown: &str,
    idle: Duration,
) {
    use std::io::Read;
    use std::sync::atomic::{AtomicU64, Ordering};
    slot.track(&upstream);
    let _ = client.set_read_timeout(None);
    let caught = std::sync::atomic::AtomicBool::new(false);
    // The origin's bytes read, for the bound on its silence.
    let down = AtomicU64::new(0);
    let (relay_done, relay_end) = std::sync::mpsc::channel::<()>();
    let (found, relayed, refused) = std::thread::scope(|scope| {
        let (caught, down) = (&caught, &down);
        let (client, upstream) = (&client, &upstream);
        let up = std::thread::Builder::new()
            .name("sandbox-proxy-relay".into())
            .stack_size(128 * 1024)
            .spawn_scoped(scope, move || {
                let (mut from_client, mut to_upstream) = (client, upstream);
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    let n = match from_client.read(&mut buf) {
                        Ok(0) => {
                            let _ = to_upstream.shutdown(Shutdown::Write);
                            crate::relay::cut_when_silent(
                                slot,
                                &relay_end,
                                down,
                                idle,
                                (client, upstream),
                            );
                            return None;
                        }
                        Ok(n) => n,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                        Err(_) => break,
                    };
                    if let Err(stop) = guard.check(&buf[..n]) {
                        caught.store(true, std::sync::atomic::Ordering::SeqCst);
                        let _ = to_upstream.shutdown(Shutdown::Both);
                        return Some(stop.refusal());
                    }
                    if to_upstream.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
                let _ = from_client.shutdown(Shutdown::Both);
                let _ = to_upstream.shutdown(Shutdown::Both);
                None
            });
        let Ok(up) = up else {
            return (None, 1, None);
        };
        // The origin's answer, on this thread: masked as the client will
        // read it (de-chunked, decoded), or refused.
        let (mut upstream, mut client) = (upstream, client);
        let mut buf = vec![0u8; 64 * 1024];
        let mut refused: Option<(String, bool)> = None;
        let ended: Result<(), ()> = loop {
            match upstream.read(&mut buf) {
                Ok(0) => break Ok(()),
                Ok(n) => {
                    down.fetch_add(n as u64, Ordering::Relaxed);
                    match response.feed(&buf[..n], &mut client) {
                        Ok(()) => {}
                        Err(Ok(why)) => {
                            refused = Some((why, true));
                            break Err(());
                        }
                        Err(Err(e @ crate::intercept::body::BodyError::TooLarge(_))) => {
                            refused = Some((e.to_string(), false));
                            break Err(());
                        }
                        Err(Err(_)) => break Err(()),
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => break Err(()),
            }
        };
        // The bytes held back (the start of a value may end a read), masked.
        let ended = ended.and_then(|()| response.finish(&mut client).map_err(|_| ()));
        let relayed = response.written();
        // As `relay` does, unless the client is to be answered 403 or 502.
        let answers = refused
            .as_ref()
            .is_some_and(|(_, unsent)| *unsent && relayed == 0);
        if !caught.load(std::sync::atomic::Ordering::SeqCst) && !answers {
            if ended.is_ok() {
                let _ = client.shutdown(Shutdown::Write);
            } else {
                let _ = client.shutdown(Shutdown::Both);
                let _ = upstream.shutdown(Shutdown::Both);
            }
        }
        if answers {
            // The client's reader stops (it reads the end) so the join
            // does not wait on a client that waits for the answer.
            let _ = upstream.shutdown(Shutdown::Both);
            let _ = client.shutdown(Shutdown::Read);
        }
        // The client's reader no longer waits on the origin's silence.
        drop(relay_done);
        let found = up.join().unwrap_or_default();
        (found, relayed, refused)
    });
    let (host, port) = match &target.host {
        crate::target::Host::Name(name) => (name.clone(), target.port),
        crate::target::Host::Ip(ip) => (ip.to_string(), target.port),
    };
    // Recorded; answered when none of the response went, else cut off.
    let refuse = |why: String, status: u16, reason: &str, text: String| {
        slot.shared.refuse(crate::Refused {
            host,
            port,
            reason: crate::RefusalReason::Request {
                method: method.to_string(),
                path: String::new(),
                why,
                admit_with: None,
            },
        });
        if relayed == 0 {
            answer(client, status, reason, &text);
        } else {
            let _ = client.shutdown(Shutdown::Both);
        }
    };
    if let (None, Some((why, _))) = (&found, refused) {
        // A response the proxy could not mask: 502 when none of it went.
        let text = format!("sandbox egress proxy: refused the response to {shown}: {why}");
        return refuse(why, 502, "Bad Gateway", text);
    }
    let Some((status, reason, why)) = found else {
        return;
    };
    let text = format!("sandbox egress proxy: refused {shown}: {why}");
    refuse(why, status, reason, text);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// #44: a request-checked plain relay (a run with secrets) whose
    /// client sent its request and half-closed, to an origin that reads it
    /// and stays silent and open, is cut after the silence bound (`idle`,
    /// 2 s here): the client reads the end and the relay returns (its slot
    /// freed). Twin: an origin answering
    /// 1 s after the half-close is relayed whole.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_silent_origin_after_the_clients_end_is_cut_an_answering_one_is_not() {
        use std::io::Read;
        use std::net::TcpListener;
        let idle = Duration::from_secs(2);
        let pair = || {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let a = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            (a, listener.accept().unwrap().0)
        };
        let relayed = move |answer: bool| {
            let (mut client, near_client) = pair();
            let (near_origin, mut origin) = pair();
            let started = Instant::now();
            let relaying = std::thread::spawn(move || {
                let slot = crate::state::test_slot();
                let spec: sandbox_core::SecretSpec = "TOKEN@api.example.com".parse().unwrap();
                let secrets = [crate::Secret::new(&spec, b"the-value".to_vec()).unwrap()];
                let watch = Watch {
                    raw: crate::intercept::BodyGuard::new(secrets.iter()).unwrap(),
                    joined: None,
                };
                let scrub = crate::intercept::Scrub::new(&[], std::iter::empty());
                let response = crate::intercept::body::PlainResponse::new(scrub, false, true);
                let target = Target {
                    host: crate::target::Host::Name("localhost".into()),
                    port: 80,
                };
                relay_guarded(
                    &slot,
                    (near_client, near_origin),
                    (watch, response),
                    &target,
                    "POST",
                    "POST http://localhost/",
                    idle,
                );
                slot.shared.ended().silent()
            });
            client.write_all(b"x=1").unwrap();
            client.shutdown(Shutdown::Write).unwrap();
            let origin = std::thread::spawn(move || {
                let mut request = Vec::new();
                origin.read_to_end(&mut request).unwrap();
                assert_eq!(request, b"x=1");
                if answer {
                    std::thread::sleep(Duration::from_secs(1));
                    origin
                        .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                        .unwrap();
                    origin.shutdown(Shutdown::Write).unwrap();
                }
                // Silent: open until the test ends.
                origin
            });
            client
                .set_read_timeout(Some(Duration::from_secs(20)))
                .unwrap();
            let mut got = Vec::new();
            let _ = client.read_to_end(&mut got);
            let took = started.elapsed();
            let cuts = relaying.join().unwrap();
            drop(origin.join().unwrap());
            (String::from_utf8_lossy(&got).into_owned(), took, cuts)
        };
        let answering = std::thread::spawn(move || relayed(true));
        let (got, took, cuts) = relayed(false);
        assert_eq!(got, "", "{took:?}");
        assert!(took >= idle && took < idle * 2 + idle / 2, "{took:?}");
        // Counted for the run's record; the answered twin is not.
        assert_eq!(cuts, 1);
        let (got, took, cuts) = answering.join().unwrap();
        assert_eq!(cuts, 0);
        assert!(got.starts_with("HTTP/1.1 200 OK\r\n"), "{got}");
        assert!(got.ends_with("\r\n\r\nok"), "{got}");
        assert!(took >= Duration::from_secs(1) && took < idle, "{took:?}");
    }

    fn head(raw: &str) -> Head {
        let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut req = httparse::Request::new(&mut slots);
        let n = match req.parse(raw.as_bytes()) {
            Ok(httparse::Status::Complete(n)) => n,
            other => panic!("{other:?}"),
        };
        Head {
            method: req.method.unwrap().into(),
            target: req.path.unwrap().into(),
            minor: req.version.unwrap(),
            headers: req
                .headers
                .iter()
                .map(|h| (h.name.into(), h.value.to_vec()))
                .collect(),
            rest: raw.as_bytes()[n..].to_vec(),
        }
    }

    /// A placeholder split by a chunk's framing is found in the joined
    /// view, the body cut anywhere; the twin: a body without it passes;
    /// a framing the decoder refuses is refused (an origin may join what
    /// the proxy would see apart).
    #[cfg(target_os = "linux")]
    #[test]
    fn chunked_bodies_are_joined_as_the_origin_reads_them() {
        let spec: sandbox_core::SecretSpec = "TOKEN@api.example.com".parse().unwrap();
        let secret = crate::Secret::new(&spec, b"v".to_vec()).unwrap();
        let p = secret.placeholder().to_string();
        let secrets = [secret];
        let watch = |chunked: bool| Watch {
            raw: crate::intercept::BodyGuard::new(secrets.iter()).unwrap(),
            joined: chunked.then(|| {
                (
                    Joined::Chunks(crate::chunked::Decoder::new()),
                    crate::intercept::BodyGuard::new(secrets.iter()).unwrap(),
                )
            }),
        };
        let found = |raw: &[u8], chunked: bool| {
            (0..=raw.len()).all(|cut| {
                let mut w = watch(chunked);
                w.check(&raw[..cut]).is_err() || w.check(&raw[cut..]).is_err()
            })
        };
        let (a, b) = p.split_at(p.len() / 2);
        let split = format!(
            "3;ext=1\r\nx=1\r\n{:x}\r\n{a}\r\n{:x}\r\n{b}\r\n0\r\nT: x\r\n\r\n",
            a.len(),
            b.len()
        );
        assert!(found(split.as_bytes(), true));
        // The raw bytes alone do not hold it whole: the joined view found it.
        assert!(!(0..=split.len()).any(|cut| {
            let mut w = watch(false);
            w.check(&split.as_bytes()[..cut]).is_err() || w.check(&split.as_bytes()[cut..]).is_err()
        }));
        // The twin: the same framing without the placeholder passes.
        let plain = split.replace(b, &"y".repeat(b.len()));
        assert!((0..=plain.len()).all(|cut| {
            let mut w = watch(true);
            w.check(&plain.as_bytes()[..cut]).is_ok() && w.check(&plain.as_bytes()[cut..]).is_ok()
        }));
        // A framing the decoder refuses (a size with a trailing space, as
        // a lenient origin may read it), no placeholder in it: refused as
        // such, split anywhere (its well-formed twin is `plain` above).
        let bad = plain.replacen("3;ext=1\r\n", "3 \r\n", 1);
        for cut in 0..=bad.len() {
            let mut w = watch(true);
            let stop = w
                .check(&bad.as_bytes()[..cut])
                .and_then(|()| w.check(&bad.as_bytes()[cut..]));
            assert!(
                matches!(stop, Err(Stop::Framing(crate::chunked::Malformed::Size))),
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn absolute_uris_split() {
        let (t, a, p) = split_absolute("http://localhost:8080/x?y=1").unwrap();
        assert_eq!(
            (t.to_string().as_str(), a, p.as_str()),
            ("localhost:8080", "localhost:8080", "/x?y=1")
        );
        let (t, a, p) = split_absolute("HTTP://Example.com?q").unwrap();
        assert_eq!(
            (t.to_string().as_str(), a, p.as_str()),
            ("Example.com:80", "Example.com", "/?q")
        );
        let (t, _, p) = split_absolute("http://[::1]:81").unwrap();
        assert_eq!((t.to_string().as_str(), p.as_str()), ("[::1]:81", "/"));
        let (_, _, p) = split_absolute("http://h/a#frag").unwrap();
        assert_eq!(p, "/a");
        for bad in [
            "/",
            "*",
            "https://example.com/",
            "http://user@h/",
            "http://h:x/",
            "http:///x",
            "ftp://h/",
        ] {
            assert!(split_absolute(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn origin_heads_drop_hop_by_hop_headers() {
        let h = head(
            "POST http://localhost:8080/p HTTP/1.1\r\nHost: elsewhere\r\nProxy-Connection: keep-alive\r\n\
             Proxy-Authorization: Basic eA==\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\nKeep-Alive: 5\r\n\
             Content-Length: 3\r\nX-Keep: yes\r\n\r\nabc",
        );
        let out = String::from_utf8(origin_head(&h, "localhost:8080", "/p", false)).unwrap();
        assert_eq!(
            out,
            "POST /p HTTP/1.1\r\nHost: localhost:8080\r\nContent-Length: 3\r\nX-Keep: yes\r\nConnection: close\r\n\r\n"
        );
        assert_eq!(h.rest, b"abc");
        let h = head("GET http://h/ HTTP/1.0\r\n\r\n");
        assert_eq!(
            String::from_utf8(origin_head(&h, "h", "/", false)).unwrap(),
            "GET / HTTP/1.0\r\nHost: h\r\nConnection: close\r\n\r\n"
        );
    }

    /// Finding 2: while the run has secrets, no range is asked of a plain
    /// origin (its 206 is refused: body.rs); the twin: without secrets
    /// `Range` and `If-Range` pass.
    #[cfg(target_os = "linux")]
    #[test]
    fn ranges_are_dropped_while_there_are_secrets() {
        let h = head(
            "GET http://h/x HTTP/1.1\r\nRange: bytes=0-4,9-12\r\nIf-Range: \"e\"\r\nRequest-Range: bytes=1-2\r\nIf_Range: x\r\nX-A: 1\r\n\r\n",
        );
        let plain = String::from_utf8(origin_head(&h, "h", "/x", false)).unwrap();
        assert!(
            plain.contains("\r\nRange: bytes=0-4,9-12\r\nIf-Range: \"e\"\r\n"),
            "{plain}"
        );
        let masked = String::from_utf8(origin_head(&h, "h", "/x", true)).unwrap();
        assert!(!masked.to_ascii_lowercase().contains("range"), "{masked}");
        assert!(masked.contains("\r\nX-A: 1\r\n"), "{masked}");
    }
}
