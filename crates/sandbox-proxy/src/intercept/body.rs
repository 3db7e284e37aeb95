//! Response bodies masked as the command will read them, while a run has
//! secrets: the origin's framing taken off (`Transfer-Encoding: chunked`
//! de-chunked, so a value split across chunks stands whole), a `gzip` or
//! `deflate` content coding decoded (bounded: at most [`MAX_DECODED`]
//! bytes), every form of every value masked in that stream ([`Scrub`],
//! which holds back the last bytes that could begin a form across reads),
//! and the result framed again for the client (chunked, the origin's
//! trailers after it masked as a head is; or up to the connection's end,
//! without them) without `Content-Encoding`. The chunked framing is read
//! by the proxy's one decoder, [`crate::chunked`]. Any other content coding
//! is refused ([`coding`]): its body could carry a value in a form the
//! proxy cannot see. Without secrets none of this runs: responses pass as
//! they are.

use std::io::{self, Write};

use flate2::write::{DeflateDecoder, MultiGzDecoder, ZlibDecoder};

use super::Scrub;
use crate::chunked::{self, Decoder};

/// How many decoded bytes one response body may have: past them the
/// response is cut off and the refusal recorded (a decompression bomb
/// never holds more than a read's worth of the proxy's memory, nor its
/// time beyond this).
pub(crate) const MAX_DECODED: u64 = 256 << 20;

/// A response's content coding, as the proxy decodes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Coding {
    /// None (or `identity`).
    Identity,
    /// `gzip` or `x-gzip` (members one after another too).
    Gzip,
    /// `deflate`: zlib-wrapped, or raw deflate as some servers send it.
    Deflate,
}

/// The content coding a response's `Content-Encoding` values name: one of
/// `gzip`, `x-gzip`, `deflate`, or none; anything else (`br`, `zstd`,
/// `compress`, an unknown one, two stacked) is why it is refused.
pub(crate) fn coding<'a>(values: impl Iterator<Item = &'a [u8]>) -> Result<Coding, String> {
    let mut named = Vec::new();
    for value in values {
        for token in String::from_utf8_lossy(value).split(',') {
            let token = token.trim().to_ascii_lowercase();
            if !token.is_empty() && token != "identity" {
                named.push(token);
            }
        }
    }
    match named.as_slice() {
        [] => Ok(Coding::Identity),
        [one] if one == "gzip" || one == "x-gzip" => Ok(Coding::Gzip),
        [one] if one == "deflate" => Ok(Coding::Deflate),
        _ => Err(format!(
            "the response's Content-Encoding ({}) is not one the proxy decodes (gzip, deflate) \
             while the run has secrets: its body could carry a secret's value in a form the \
             proxy cannot mask",
            named.join(", ")
        )),
    }
}

/// What `Accept-Encoding` the proxy sends an origin while the run has
/// secrets, for what the client asked (`values`): `gzip, deflate` when it
/// accepts one of them, else `identity`; never a coding the proxy cannot
/// decode.
pub(crate) fn accept_encoding<'a>(values: impl Iterator<Item = &'a [u8]>) -> &'static str {
    let asks = values.into_iter().any(|v| {
        String::from_utf8_lossy(v).split(',').any(|t| {
            let t = t.split(';').next().unwrap_or("").trim();
            ["gzip", "x-gzip", "deflate"]
                .iter()
                .any(|c| t.eq_ignore_ascii_case(c))
        })
    });
    if asks {
        "gzip, deflate"
    } else {
        "identity"
    }
}

/// How the origin framed a response body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// `Content-Length` bytes.
    Length(u64),
    /// Up to the connection's end.
    Close,
}

/// Why a masked body was not relayed whole.
#[derive(Debug)]
pub(crate) enum BodyError {
    /// Decoded, it would pass [`MAX_DECODED`] (a decompression bomb).
    TooLarge(u64),
    /// The framing or the coding is broken, or the body ended early.
    Malformed(String),
    /// Writing to the client failed.
    Io(io::Error),
}

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BodyError::TooLarge(max) => write!(
                f,
                "the response body decodes to more than {max} bytes (a decompression bomb?); \
                 it was cut off"
            ),
            BodyError::Malformed(why) => write!(f, "{why}"),
            BodyError::Io(e) => write!(f, "{e}"),
        }
    }
}

/// Trailer fields never relayed to the client: framing, routing and
/// hop-by-hop fields, which RFC 9110 (section 6.5.1) keeps out of
/// trailers, and the coding of a body the proxy decoded.
const DROPPED_TRAILERS: &[&str] = &[
    "transfer-encoding",
    "content-length",
    "content-encoding",
    "content-range",
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
    "host",
];

/// The decoded output, counted and capped.
struct Capped {
    out: Vec<u8>,
    total: u64,
    max: u64,
}

impl Write for Capped {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.total += bytes.len() as u64;
        if self.total > self.max {
            return Err(io::Error::other("decoded body too large"));
        }
        self.out.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A content decoder.
enum Inflate {
    /// `deflate` before its first two bytes tell zlib from raw.
    Deflate(Vec<u8>, u64),
    Gzip(Box<MultiGzDecoder<Capped>>),
    Zlib(Box<ZlibDecoder<Capped>>),
    Raw(Box<DeflateDecoder<Capped>>),
}

/// How much compressed input goes to the decoder at once (each call
/// writes at most its internal buffer's worth out).
const INFLATE_STEP: usize = 4096;

impl Inflate {
    fn new(coding: Coding, max: u64) -> Option<Inflate> {
        let capped = Capped {
            out: Vec::new(),
            total: 0,
            max,
        };
        match coding {
            Coding::Identity => None,
            Coding::Gzip => Some(Inflate::Gzip(Box::new(MultiGzDecoder::new(capped)))),
            Coding::Deflate => Some(Inflate::Deflate(Vec::new(), max)),
        }
    }

    /// Decodes `input`, giving `data` what comes out as it comes.
    fn feed(
        &mut self,
        input: &[u8],
        data: &mut impl FnMut(&[u8]) -> Result<(), BodyError>,
    ) -> Result<(), BodyError> {
        let mut input = input;
        let pending;
        if let Inflate::Deflate(start, max) = self {
            start.extend_from_slice(input);
            if start.len() < 2 {
                return Ok(());
            }
            let capped = Capped {
                out: Vec::new(),
                total: 0,
                max: *max,
            };
            // A zlib header: CM 8, and the two bytes a multiple of 31.
            let zlib =
                start[0] & 0x0f == 8 && (u16::from(start[0]) << 8 | u16::from(start[1])) % 31 == 0;
            pending = std::mem::take(start);
            input = &pending;
            *self = if zlib {
                Inflate::Zlib(Box::new(ZlibDecoder::new(capped)))
            } else {
                Inflate::Raw(Box::new(DeflateDecoder::new(capped)))
            };
        }
        while !input.is_empty() {
            let step = &input[..input.len().min(INFLATE_STEP)];
            let n = match self {
                Inflate::Deflate(..) => Ok(0),
                Inflate::Gzip(d) => d.write(step),
                Inflate::Zlib(d) => d.write(step),
                Inflate::Raw(d) => d.write(step),
            };
            let n = n.map_err(|e| self.error(&e))?;
            self.drain(data)?;
            if n == 0 {
                // The stream ended: what follows it is not relayed.
                break;
            }
            input = &input[n..];
        }
        Ok(())
    }

    /// At the body's end: the rest of the output.
    fn finish(
        &mut self,
        data: &mut impl FnMut(&[u8]) -> Result<(), BodyError>,
    ) -> Result<(), BodyError> {
        if let Inflate::Deflate(start, _) = self {
            if start.is_empty() {
                return Ok(());
            }
            let start = std::mem::take(start);
            // One byte: raw deflate (zlib needs two).
            self.feed(&start, data)?;
            if matches!(self, Inflate::Deflate(..)) {
                return Err(BodyError::Malformed(
                    "the origin's deflate body is truncated".into(),
                ));
            }
        }
        let done = match self {
            Inflate::Deflate(..) => Ok(()),
            Inflate::Gzip(d) => d.try_finish(),
            Inflate::Zlib(d) => d.try_finish(),
            Inflate::Raw(d) => d.try_finish(),
        };
        done.map_err(|e| self.error(&e))?;
        self.drain(data)
    }

    fn capped(&mut self) -> Option<&mut Capped> {
        match self {
            Inflate::Deflate(..) => None,
            Inflate::Gzip(d) => Some(d.get_mut()),
            Inflate::Zlib(d) => Some(d.get_mut()),
            Inflate::Raw(d) => Some(d.get_mut()),
        }
    }

    fn drain(
        &mut self,
        data: &mut impl FnMut(&[u8]) -> Result<(), BodyError>,
    ) -> Result<(), BodyError> {
        if let Some(capped) = self.capped() {
            let out = std::mem::take(&mut capped.out);
            data(&out)?;
            // The buffer's room is kept for the next write.
            capped.out = out;
            capped.out.clear();
        }
        Ok(())
    }

    fn error(&mut self, e: &io::Error) -> BodyError {
        match self.capped() {
            Some(c) if c.total > c.max => BodyError::TooLarge(c.max),
            _ => BodyError::Malformed(format!("the origin's compressed body is corrupt: {e}")),
        }
    }
}

/// One response body on its way to the client, masked ([`body`](self)).
pub(crate) struct Masked {
    scrub: Scrub,
    chunks: Option<Decoder>,
    /// Bytes left of a `Content-Length` body.
    left: Option<u64>,
    inflate: Option<Inflate>,
    /// Whether the client gets it chunked (else up to the connection's
    /// end).
    chunked_out: bool,
    done: bool,
    /// Body bytes written to the client (framing included).
    pub(crate) written: u64,
}

impl Masked {
    /// A body framed as `framing`, in `coding`, masked with `scrub`,
    /// decoded to at most `max` bytes; `chunked_out` frames it in chunks
    /// for the client.
    pub(crate) fn new(
        scrub: Scrub,
        framing: Framing,
        coding: Coding,
        chunked_out: bool,
        max: u64,
    ) -> Masked {
        Masked {
            scrub,
            chunks: (framing == Framing::Chunked).then(Decoder::new),
            left: match framing {
                Framing::Length(n) => Some(n),
                _ => None,
            },
            inflate: Inflate::new(coding, max),
            chunked_out,
            done: false,
            written: 0,
        }
    }

    /// Bytes as the origin sent them, masked as they are (a head
    /// included): what was relayed before bodies were decoded.
    pub(crate) fn raw(scrub: Scrub) -> Masked {
        Masked::new(scrub, Framing::Close, Coding::Identity, false, MAX_DECODED)
    }

    /// Whether the body ended (by its framing).
    pub(crate) fn done(&self) -> bool {
        self.done
    }

    /// Takes what the origin sent next; writes to `client` what may go now.
    /// Once the body ended ([`Masked::done`]) the rest is written and
    /// later bytes are ignored.
    pub(crate) fn feed(&mut self, raw: &[u8], client: &mut impl Write) -> Result<(), BodyError> {
        if self.done {
            return Ok(());
        }
        let (scrub, inflate, chunked_out, written) = (
            &mut self.scrub,
            &mut self.inflate,
            self.chunked_out,
            &mut self.written,
        );
        let mut decoded = |plain: &[u8]| -> Result<(), BodyError> {
            let out = scrub.body(plain);
            emit(client, &out, chunked_out, written)
        };
        let mut data = |bytes: &[u8]| -> Result<(), BodyError> {
            match inflate {
                Some(inflate) => inflate.feed(bytes, &mut decoded),
                None => decoded(bytes),
            }
        };
        let ended = if let Some(chunks) = &mut self.chunks {
            chunks.feed(raw, &mut data).map_err(|e| match e {
                chunked::Error::Malformed(why) => {
                    BodyError::Malformed(format!("the origin's chunked body: {why}"))
                }
                chunked::Error::Sink(e) => e,
            })?;
            chunks.done()
        } else if let Some(left) = &mut self.left {
            let take = usize::try_from(*left).unwrap_or(usize::MAX).min(raw.len());
            data(&raw[..take])?;
            *left -= take as u64;
            *left == 0
        } else {
            data(raw)?;
            false
        };
        if ended {
            self.end(client)?;
        }
        Ok(())
    }

    /// At the origin's end: the rest; an error when the body was cut short
    /// (then the client's framing is not ended either).
    pub(crate) fn finish(&mut self, client: &mut impl Write) -> Result<(), BodyError> {
        if self.done {
            return Ok(());
        }
        if self.chunks.is_some() || self.left.is_some_and(|l| l > 0) {
            return Err(BodyError::Malformed(
                "the origin's response ended before its body".into(),
            ));
        }
        self.end(client)
    }

    fn end(&mut self, client: &mut impl Write) -> Result<(), BodyError> {
        self.done = true;
        let (scrub, chunked_out, written) = (&mut self.scrub, self.chunked_out, &mut self.written);
        if let Some(inflate) = &mut self.inflate {
            inflate.finish(&mut |plain: &[u8]| {
                let out = scrub.body(plain);
                emit(client, &out, chunked_out, written)
            })?;
        }
        let rest = self.scrub.finish();
        emit(client, &rest, self.chunked_out, &mut self.written)?;
        if self.chunked_out {
            // The origin's trailers go on, masked as a head is (framing
            // and hop-by-hop fields dropped).
            let mut last = b"0\r\n".to_vec();
            for (name, value) in self.chunks.iter().flat_map(Decoder::trailers) {
                if DROPPED_TRAILERS
                    .iter()
                    .any(|d| d.as_bytes().eq_ignore_ascii_case(name))
                {
                    continue;
                }
                last.extend_from_slice(&self.scrub.head_value(name));
                last.extend_from_slice(b": ");
                last.extend_from_slice(&self.scrub.head_value(value));
                last.extend_from_slice(b"\r\n");
            }
            last.extend_from_slice(b"\r\n");
            client.write_all(&last).map_err(BodyError::Io)?;
            self.written += last.len() as u64;
        }
        Ok(())
    }
}

/// Writes `bytes` to the client (as one chunk when `chunked`).
fn emit(
    client: &mut impl Write,
    bytes: &[u8],
    chunked: bool,
    written: &mut u64,
) -> Result<(), BodyError> {
    if bytes.is_empty() {
        return Ok(());
    }
    let result = if chunked {
        let mut framed = Vec::with_capacity(bytes.len() + 20);
        framed.extend_from_slice(format!("{:x}\r\n", bytes.len()).as_bytes());
        framed.extend_from_slice(bytes);
        framed.extend_from_slice(b"\r\n");
        *written += framed.len() as u64;
        client.write_all(&framed)
    } else {
        *written += bytes.len() as u64;
        client.write_all(bytes)
    };
    result.map_err(BodyError::Io)
}

/// A plain `http://` response relayed while the run has secrets, read as
/// the origin sends it: the heads parsed (1xx ones passed on), and a final
/// response whose body is chunked or in `gzip`/`deflate` given to the
/// client de-chunked, decoded and masked ([`Masked`]), framed in chunks
/// for an HTTP/1.1 client (or up to the connection's end), `Connection:
/// close`; any other response masked byte for byte as it comes, head
/// included (a head the proxy cannot parse too).
pub(crate) struct PlainResponse {
    state: Plain,
    /// The client's request was `HEAD` (no body follows).
    head_request: bool,
    /// The client's request was HTTP/1.1 (may read chunks).
    client_11: bool,
    max: u64,
    /// Bytes of 1xx heads written.
    informational: u64,
}

enum Plain {
    /// Reading a head (bytes so far).
    Head(Vec<u8>, Scrub),
    Body(Masked),
    /// Between states (never seen outside [`PlainResponse::feed`]).
    Gone,
}

/// The largest response head parsed.
const MAX_HEAD: usize = 64 * 1024;

impl PlainResponse {
    /// The response to a request (`HEAD` or not, HTTP/1.1 or 1.0), masked
    /// with `scrub`.
    pub(crate) fn new(scrub: Scrub, head_request: bool, client_11: bool) -> PlainResponse {
        PlainResponse {
            state: Plain::Head(Vec::new(), scrub),
            head_request,
            client_11,
            max: MAX_DECODED,
            informational: 0,
        }
    }

    #[cfg(test)]
    fn with_max(mut self, max: u64) -> PlainResponse {
        self.max = max;
        self
    }

    /// Bytes written to the client.
    pub(crate) fn written(&self) -> u64 {
        self.informational
            + match &self.state {
                Plain::Body(m) => m.written,
                _ => 0,
            }
    }

    /// Takes what the origin sent next; writes to `client` what may go
    /// now. `Err(Ok(why))`: the response is refused before any of it was
    /// written (a content coding the proxy cannot decode).
    pub(crate) fn feed(
        &mut self,
        raw: &[u8],
        client: &mut impl Write,
    ) -> Result<(), Result<String, BodyError>> {
        match &mut self.state {
            Plain::Body(m) => return m.feed(raw, client).map_err(Err),
            Plain::Head(buf, _) => buf.extend_from_slice(raw),
            Plain::Gone => return Ok(()),
        }
        loop {
            let Plain::Head(buf, scrub) = std::mem::replace(&mut self.state, Plain::Gone) else {
                return Ok(());
            };
            let mut slots = [httparse::EMPTY_HEADER; 128];
            let mut resp = httparse::Response::new(&mut slots);
            let parsed = resp.parse(&buf);
            let (len, code) = match parsed {
                Ok(httparse::Status::Partial) if buf.len() <= MAX_HEAD => {
                    self.state = Plain::Head(buf, scrub);
                    return Ok(());
                }
                Ok(httparse::Status::Complete(len)) => (len, resp.code.unwrap_or(0)),
                // Not parsed: masked as bytes.
                _ => {
                    let mut m = Masked::raw(scrub);
                    let fed = m.feed(&buf, client);
                    self.state = Plain::Body(m);
                    return fed.map_err(Err);
                }
            };
            let header = |name: &'static str| {
                resp.headers
                    .iter()
                    .filter(move |h| h.name.eq_ignore_ascii_case(name))
                    .map(|h| h.value)
            };
            if (100..200).contains(&code) {
                let mut out = Vec::with_capacity(len);
                out.extend_from_slice(&buf[..len]);
                let out = scrub.head_value(&out);
                client.write_all(&out).map_err(|e| Err(BodyError::Io(e)))?;
                self.informational += out.len() as u64;
                self.state = Plain::Head(buf[len..].to_vec(), scrub);
                continue;
            }
            // No range was asked for (dropped while the run has secrets).
            if code == 206 {
                return Err(Ok(super::partial_refused()));
            }
            let no_body = self.head_request || code == 204 || code == 304;
            let encodings: Vec<&[u8]> = header("transfer-encoding").collect();
            let lengths: Vec<&[u8]> = header("content-length").collect();
            let coding = if no_body {
                Coding::Identity
            } else {
                coding(header("content-encoding")).map_err(Ok)?
            };
            let chunked =
                match encodings.as_slice() {
                    [] => false,
                    [one] if one.eq_ignore_ascii_case(b"chunked") => true,
                    _ => return Err(Ok(
                        "the response's Transfer-Encoding is not exactly 'chunked' while the run \
                         has secrets: its body could carry a secret's value in a form the proxy \
                         cannot mask"
                            .into(),
                    )),
                };
            if no_body || (!chunked && coding == Coding::Identity) {
                // As it comes, head included.
                let mut m = Masked::raw(scrub);
                let fed = m.feed(&buf, client);
                self.state = Plain::Body(m);
                return fed.map_err(Err);
            }
            let framing = if chunked {
                Framing::Chunked
            } else {
                match lengths.as_slice() {
                    [one] => std::str::from_utf8(one)
                        .ok()
                        .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
                        .and_then(|t| t.parse().ok())
                        .map_or(Framing::Close, Framing::Length),
                    _ => Framing::Close,
                }
            };
            let chunked_out = self.client_11 && resp.version == Some(1);
            let mut out = format!("HTTP/1.{} {code} ", resp.version.unwrap_or(1)).into_bytes();
            out.extend_from_slice(&scrub.head_value(resp.reason.unwrap_or("").as_bytes()));
            out.extend_from_slice(b"\r\n");
            for h in resp.headers.iter() {
                let dropped = [
                    "connection",
                    "keep-alive",
                    "proxy-connection",
                    "content-length",
                    "transfer-encoding",
                    "content-encoding",
                ];
                if dropped.iter().any(|d| h.name.eq_ignore_ascii_case(d)) {
                    continue;
                }
                out.extend_from_slice(&scrub.head_value(h.name.as_bytes()));
                out.extend_from_slice(b": ");
                out.extend_from_slice(&scrub.head_value(h.value));
                out.extend_from_slice(b"\r\n");
            }
            if chunked_out {
                out.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
            }
            out.extend_from_slice(b"Connection: close\r\n\r\n");
            client.write_all(&out).map_err(|e| Err(BodyError::Io(e)))?;
            let mut m = Masked::new(scrub, framing, coding, chunked_out, self.max);
            m.written += out.len() as u64;
            let fed = m.feed(&buf[len..], client);
            self.state = Plain::Body(m);
            return fed.map_err(Err);
        }
    }

    /// At the origin's end: the rest.
    pub(crate) fn finish(&mut self, client: &mut impl Write) -> Result<(), BodyError> {
        match std::mem::replace(&mut self.state, Plain::Gone) {
            Plain::Head(buf, scrub) => {
                let mut m = Masked::raw(scrub);
                let result = m.feed(&buf, client).and_then(|()| m.finish(client));
                self.state = Plain::Body(m);
                result
            }
            Plain::Body(mut m) => {
                let result = m.finish(client);
                self.state = Plain::Body(m);
                result
            }
            Plain::Gone => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Secret;
    use flate2::write::{DeflateEncoder, GzEncoder, ZlibEncoder};
    use flate2::Compression;

    const VALUE: &[u8] = b"real-secret-value-42";

    fn scrub() -> Scrub {
        let spec: sandbox_core::SecretSpec = "TOKEN@api.example.com".parse().unwrap();
        Scrub::new(
            &[Secret::new(&spec, VALUE.to_vec()).unwrap()],
            std::iter::empty(),
        )
    }

    /// `body` chunked: the given chunk sizes, then the rest in one chunk.
    fn chunked(body: &[u8], sizes: &[usize]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut rest = body;
        let mut sizes = sizes.iter().copied();
        while !rest.is_empty() {
            let n = sizes.next().unwrap_or(rest.len()).min(rest.len());
            out.extend_from_slice(format!("{n:x}\r\n").as_bytes());
            out.extend_from_slice(&rest[..n]);
            out.extend_from_slice(b"\r\n");
            rest = &rest[n..];
        }
        out.extend_from_slice(b"0\r\nX-Trailer: t\r\n\r\n");
        out
    }

    /// The data of a chunked body, and whether it was ended.
    fn dechunk(raw: &[u8]) -> (Vec<u8>, bool) {
        let mut chunks = Decoder::new();
        let mut out = Vec::new();
        chunks
            .feed(raw, &mut |d: &[u8]| {
                out.extend_from_slice(d);
                Ok::<(), ()>(())
            })
            .unwrap();
        (out, chunks.done())
    }

    /// `raw` through a [`Masked`] of `framing` and `coding`, fed in reads
    /// cut at `cuts`; the client's bytes, de-chunked.
    fn relay(raw: &[u8], framing: Framing, coding: Coding, cuts: &[usize]) -> Vec<u8> {
        let mut masked = Masked::new(scrub(), framing, coding, true, MAX_DECODED);
        let mut client = Vec::new();
        let mut at = 0;
        for &cut in cuts.iter().chain(std::iter::once(&raw.len())) {
            masked.feed(&raw[at..cut], &mut client).unwrap();
            at = cut;
        }
        masked.finish(&mut client).unwrap();
        assert!(masked.done());
        let (out, ended) = dechunk(&client);
        assert!(ended, "the client's body is ended");
        out
    }

    fn gzip(body: &[u8]) -> Vec<u8> {
        let mut e = GzEncoder::new(Vec::new(), Compression::default());
        e.write_all(body).unwrap();
        e.finish().unwrap()
    }

    /// The origin's trailers reach an HTTP/1.1 client after the body,
    /// masked as a head is (the value replaced by the placeholder), split
    /// anywhere; framing fields among them are dropped; the twin: a
    /// client read up to the connection's end gets none (it has no place
    /// for them), and a trailer without the value passes as it is.
    #[test]
    fn trailers_are_relayed_masked() {
        let spec: sandbox_core::SecretSpec = "TOKEN@api.example.com".parse().unwrap();
        let secret = Secret::new(&spec, VALUE.to_vec()).unwrap();
        let placeholder = secret.placeholder().as_bytes().to_vec();
        let secrets = [secret];
        let raw = b"4\r\nbody\r\n0\r\nX-Sig: real-secret-value-42\r\nContent-Length: 9\r\n\
                    X-Ok:  fine \r\n\r\n";
        for cut in 0..=raw.len() {
            let scrub = Scrub::new(&secrets, std::iter::empty());
            let mut masked =
                Masked::new(scrub, Framing::Chunked, Coding::Identity, true, MAX_DECODED);
            let mut client = Vec::new();
            masked.feed(&raw[..cut], &mut client).unwrap();
            masked.feed(&raw[cut..], &mut client).unwrap();
            assert!(masked.done(), "{cut}");
            let mut decoder = Decoder::new();
            let mut data = Vec::new();
            let used = decoder
                .feed(&client, &mut |d: &[u8]| {
                    data.extend_from_slice(d);
                    Ok::<(), ()>(())
                })
                .unwrap();
            assert!(decoder.done() && used == client.len(), "{cut}");
            assert_eq!(data, b"body");
            assert_eq!(
                decoder.trailers(),
                &[
                    (b"X-Sig".to_vec(), placeholder.clone()),
                    (b"X-Ok".to_vec(), b"fine".to_vec())
                ],
                "{cut}"
            );
            assert_eq!(masked.written, client.len() as u64);
        }
        let scrub = Scrub::new(&secrets, std::iter::empty());
        let mut masked = Masked::new(
            scrub,
            Framing::Chunked,
            Coding::Identity,
            false,
            MAX_DECODED,
        );
        let mut client = Vec::new();
        masked.feed(raw, &mut client).unwrap();
        assert!(masked.done());
        assert_eq!(client, b"body");
    }

    /// G1: a value split across chunk boundaries (two chunks, at every
    /// offset; and chunks of every size), fed in reads cut anywhere, is
    /// masked; the twin: a body without it comes out as it went in.
    #[test]
    fn a_value_split_across_chunks_is_masked() {
        let body = b"{\"auth\": \"Bearer real-secret-value-42\"}\n".to_vec();
        let masked_body = b"{\"auth\": \"Bearer ********************\"}\n".to_vec();
        let start = 17;
        for split in 0..=VALUE.len() {
            let raw = chunked(&body, &[start + split]);
            for cut in 0..=raw.len() {
                assert_eq!(
                    relay(&raw, Framing::Chunked, Coding::Identity, &[cut]),
                    masked_body,
                    "split {split}, read cut {cut}"
                );
            }
        }
        for size in 1..=VALUE.len() {
            let sizes = vec![size; body.len()];
            let raw = chunked(&body, &sizes);
            assert_eq!(
                relay(&raw, Framing::Chunked, Coding::Identity, &[]),
                masked_body,
                "chunks of {size}"
            );
            // One byte per read.
            let cuts: Vec<usize> = (1..raw.len()).collect();
            assert_eq!(
                relay(&raw, Framing::Chunked, Coding::Identity, &cuts),
                masked_body
            );
        }
        let plain = b"{\"auth\": \"Bearer another-value-of-it\"}\n";
        for size in 1..=plain.len() {
            let raw = chunked(plain, &vec![size; plain.len()]);
            assert_eq!(
                relay(&raw, Framing::Chunked, Coding::Identity, &[raw.len() / 2]),
                plain
            );
        }
    }

    /// G2: a gzip, x-gzip or deflate (zlib and raw) body is decoded and
    /// masked, chunked or not, read in pieces; the twin: one without the
    /// value decodes to what was compressed.
    #[test]
    fn compressed_bodies_are_decoded_and_masked() {
        let body = b"auth=Bearer real-secret-value-42\n".repeat(50);
        let masked_body = b"auth=Bearer ********************\n".repeat(50);
        let plain = b"auth=Bearer another-value-of-it!\n".repeat(50);
        let zlib = |b: &[u8]| {
            let mut e = ZlibEncoder::new(Vec::new(), Compression::default());
            e.write_all(b).unwrap();
            e.finish().unwrap()
        };
        let raw_deflate = |b: &[u8]| {
            let mut e = DeflateEncoder::new(Vec::new(), Compression::default());
            e.write_all(b).unwrap();
            e.finish().unwrap()
        };
        type Encode<'a> = &'a dyn Fn(&[u8]) -> Vec<u8>;
        let encoders: [(&str, Coding, Encode); 3] = [
            ("gzip", Coding::Gzip, &gzip),
            ("zlib", Coding::Deflate, &zlib),
            ("raw deflate", Coding::Deflate, &raw_deflate),
        ];
        for (name, coding, encode) in encoders {
            for (input, want) in [(&body, &masked_body), (&plain, &plain)] {
                let compressed = encode(input);
                for cut in [0, 1, 2, 5, compressed.len() / 2, compressed.len()] {
                    let len = Framing::Length(compressed.len() as u64);
                    assert_eq!(
                        &relay(&compressed, len, coding, &[cut]),
                        want,
                        "{name} {cut}"
                    );
                    assert_eq!(
                        &relay(&compressed, Framing::Close, coding, &[cut]),
                        want,
                        "{name} {cut}"
                    );
                    let raw = chunked(&compressed, &[3, 7, 1]);
                    assert_eq!(
                        &relay(&raw, Framing::Chunked, coding, &[cut]),
                        want,
                        "{name} chunked {cut}"
                    );
                }
            }
        }
        // Two gzip members one after the other.
        let two = [gzip(&body[..100]), gzip(&body[100..])].concat();
        assert_eq!(relay(&two, Framing::Close, Coding::Gzip, &[]), masked_body);
        assert_eq!(coding([&b"x-gzip"[..]].into_iter()), Ok(Coding::Gzip));
        assert_eq!(coding([&b"Deflate"[..]].into_iter()), Ok(Coding::Deflate));
        assert_eq!(coding(std::iter::empty()), Ok(Coding::Identity));
        assert_eq!(coding([&b"identity"[..]].into_iter()), Ok(Coding::Identity));
    }

    /// G2: codings the proxy cannot decode, and stacked ones, are refused
    /// (their twins above decode).
    #[test]
    fn other_and_stacked_codings_are_refused() {
        for named in [
            &b"br"[..],
            b"zstd",
            b"compress",
            b"x-custom",
            b"gzip, gzip",
            b"deflate, br",
        ] {
            let why = coding([named].into_iter()).unwrap_err();
            assert!(why.contains("cannot mask"), "{why}");
        }
        assert!(coding([&b"gzip"[..], b"gzip"].into_iter()).is_err());
        assert_eq!(
            accept_encoding([&b"gzip, deflate, br, zstd"[..]].into_iter()),
            "gzip, deflate"
        );
        assert_eq!(accept_encoding([&b"br"[..]].into_iter()), "identity");
        assert_eq!(accept_encoding(std::iter::empty()), "identity");
    }

    /// A decompression bomb is cut off past the cap, the proxy holding no
    /// more than a step's output at once; the twin: under the cap it
    /// decodes whole.
    #[test]
    fn a_decompression_bomb_is_cut_off() {
        let zeros = vec![0u8; 8 << 20];
        let bomb = gzip(&zeros);
        assert!(bomb.len() < 64 * 1024);
        struct Counting(u64, usize);
        impl Write for Counting {
            fn write(&mut self, b: &[u8]) -> io::Result<usize> {
                self.0 += b.len() as u64;
                self.1 = self.1.max(b.len());
                Ok(b.len())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let mut masked = Masked::new(scrub(), Framing::Close, Coding::Gzip, true, 1 << 20);
        let mut client = Counting(0, 0);
        let err = masked
            .feed(&bomb, &mut client)
            .and_then(|()| masked.finish(&mut client))
            .unwrap_err();
        assert!(matches!(err, BodyError::TooLarge(_)), "{err}");
        // The cap, and the chunks' framing.
        assert!(client.0 <= (1 << 20) + 4096, "{}", client.0);
        assert!(client.1 <= 256 * 1024, "{}", client.1);
        let mut masked = Masked::new(scrub(), Framing::Close, Coding::Gzip, true, 16 << 20);
        let mut client = Counting(0, 0);
        masked.feed(&bomb, &mut client).unwrap();
        masked.finish(&mut client).unwrap();
        assert!(client.0 > 8 << 20);
        // A corrupt body is cut too.
        let mut masked = Masked::new(scrub(), Framing::Close, Coding::Gzip, true, 1 << 20);
        let mut out = Vec::new();
        let broken = [&bomb[..20], &[0xff; 40][..]].concat();
        assert!(masked
            .feed(&broken, &mut out)
            .and_then(|()| masked.finish(&mut out))
            .is_err());
    }

    fn plain(response: &[u8], cuts: &[usize]) -> Result<Vec<u8>, String> {
        let mut plain = PlainResponse::new(scrub(), false, true).with_max(1 << 20);
        let mut client = Vec::new();
        let mut at = 0;
        for &cut in cuts.iter().chain(std::iter::once(&response.len())) {
            match plain.feed(&response[at..cut], &mut client) {
                Ok(()) => {}
                Err(Ok(why)) => return Err(why),
                Err(Err(e)) => return Err(e.to_string()),
            }
            at = cut;
        }
        plain.finish(&mut client).map_err(|e| e.to_string())?;
        assert_eq!(plain.written(), client.len() as u64);
        Ok(client)
    }

    /// The plain HTTP relay: a chunked, gzipped response (after a 100
    /// Continue) comes out de-chunked, decoded and masked, re-chunked,
    /// without Content-Encoding; br is refused before anything went; the
    /// twins: a Content-Length identity response passes byte for byte when
    /// it holds no value, masked when it does.
    #[test]
    fn plain_responses_are_decoded_and_masked_or_refused() {
        let body = b"stored=Bearer real-secret-value-42\n";
        let gz = gzip(body);
        let mut response =
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nTransfer-Encoding: chunked\r\nX-A: 1\r\n\r\n".to_vec();
        response.extend(chunked(&gz, &[5, 5, 5]));
        for cut in 0..response.len() {
            let out = plain(&response, &[cut]).unwrap();
            let text = String::from_utf8_lossy(&out);
            let (head, rest) = text.split_once("\r\n\r\nHTTP/1.1 200 OK\r\n").unwrap();
            assert_eq!(head, "HTTP/1.1 100 Continue");
            let (head, data) = rest.split_once("\r\n\r\n").unwrap();
            assert_eq!(
                head, "X-A: 1\r\nTransfer-Encoding: chunked\r\nConnection: close",
                "{cut}"
            );
            let (data, ended) = dechunk(data.as_bytes());
            assert!(ended);
            assert_eq!(data, b"stored=Bearer ********************\n");
        }
        let br = b"HTTP/1.1 200 OK\r\nContent-Encoding: br\r\nContent-Length: 4\r\n\r\nabcd";
        assert!(plain(br, &[10]).unwrap_err().contains("(br)"));
        // HEAD: no body, the coding does not matter.
        let mut head = PlainResponse::new(scrub(), true, true);
        let mut out = Vec::new();
        head.feed(br, &mut out).unwrap();
        let twin = b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nhello\n";
        assert_eq!(plain(twin, &[7]).unwrap(), twin);
        let secret = b"HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\nreal-secret-value-42";
        assert_eq!(
            plain(secret, &[50]).unwrap(),
            b"HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\n********************"
        );
        // Finding 2: a 206 (after a 1xx) is refused before any of it went;
        // the twin above (200) passes.
        let partial = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-3/20\r\nContent-Length: 4\r\n\r\nreal";
        for cut in [0, 30, partial.len()] {
            let why = plain(partial, &[cut]).unwrap_err();
            assert!(why.contains("206 Partial Content"), "{why}");
        }
        let mut out = Vec::new();
        assert!(PlainResponse::new(scrub(), false, true)
            .feed(partial, &mut out)
            .is_err());
        assert!(!out.windows(4).any(|w| w == b"real"));
        // An HTTP/1.0 client gets the body up to the connection's end.
        let mut old = PlainResponse::new(scrub(), false, false);
        let mut out = Vec::new();
        old.feed(&response, &mut out).unwrap();
        old.finish(&mut out).unwrap();
        assert!(out.ends_with(b"Connection: close\r\n\r\nstored=Bearer ********************\n"));
    }
}
