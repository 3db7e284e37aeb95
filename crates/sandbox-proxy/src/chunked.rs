//! The one decoder of HTTP/1.1 chunked bodies (RFC 9112, section 7.1) in
//! the proxy, fed bytes as they arrive (split anywhere) and strict about
//! what it reads, so that it never reads a body two ways:
//! * a chunk size is 1 to 16 hex digits, nothing else (no sign, no
//!   space, no `0x`; more digits are refused rather than overflow);
//! * a chunk extension is `;` after the size (optionally after spaces or
//!   tabs), the whole of it at most [`MAX_EXTENSIONS`] bytes of visible
//!   ASCII, spaces or tabs; extensions are read and dropped;
//! * every line ends with CRLF: a bare LF, or a CR not followed by LF, is
//!   refused, as is anything other than CRLF after a chunk's data;
//! * the trailer section is at most [`MAX_TRAILERS`] bytes of field lines
//!   (`token ":" value`, no folded line, no control byte but tab), kept
//!   for the caller ([`Decoder::trailers`]).
//!
//! Its users: the masking of response bodies while a run has secrets
//! ([`crate::intercept::body`]: de-chunked, masked, re-chunked, trailers
//! relayed masked) and the watch of a plain `http://` request body for a
//! secret's placeholder (`http.rs`: the chunks joined as the origin reads
//! them).

/// The longest chunk extension text (all after the size, before CRLF).
pub(crate) const MAX_EXTENSIONS: usize = 1024;

/// The largest trailer section (its lines and their CRLFs, the final empty
/// line included).
pub(crate) const MAX_TRAILERS: usize = 8 * 1024;

/// Hex digits of a chunk size at most (16 fit in a `u64`).
const MAX_DIGITS: usize = 16;

/// Why a chunked body is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Malformed {
    /// A size line without a hex size, or with something else than an
    /// extension after it.
    Size,
    /// A size of more than 16 hex digits.
    SizeTooLong,
    /// A chunk extension longer than [`MAX_EXTENSIONS`], or with a byte
    /// other than visible ASCII, space or tab.
    Extension,
    /// A line ended by a bare LF, or holding a CR not before its LF.
    NotCrlf,
    /// A chunk's data not followed by CRLF.
    DataEnd,
    /// A trailer section over [`MAX_TRAILERS`] bytes.
    TrailersTooLarge,
    /// A trailer line that is not a plain field line.
    Trailer,
}

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Malformed::Size => "a malformed chunk size",
            Malformed::SizeTooLong => "a chunk size of more than 16 hex digits",
            Malformed::Extension => "a chunk extension too long or with a control byte",
            Malformed::NotCrlf => "a line not ended by CRLF",
            Malformed::DataEnd => "a chunk not followed by CRLF",
            Malformed::TrailersTooLarge => "a trailer section too large",
            Malformed::Trailer => "a malformed trailer field",
        })
    }
}

/// Why [`Decoder::feed`] stopped: the body is malformed, or the data sink
/// failed.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Error<E> {
    Malformed(Malformed),
    Sink(E),
}

/// Where the decoder stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// In a chunk-size line (in `line`).
    Size,
    /// In a chunk's data: bytes left.
    Data(u64),
    /// After a chunk's data: CR expected.
    DataCr,
    /// After a chunk's data and its CR: LF expected.
    DataLf,
    /// In the trailer section (the current line in `line`).
    Trailer,
    /// After the trailer section's empty line.
    Done,
    /// Refused: every later feed is refused the same way.
    Failed(Malformed),
}

/// A chunked body's decoder ([`chunked`](self)).
#[derive(Debug)]
pub(crate) struct Decoder {
    state: State,
    /// The current size or trailer line, CRLF excluded once complete.
    line: Vec<u8>,
    /// Trailer bytes read so far.
    trailer_bytes: usize,
    /// The trailer fields: name and value (trimmed) as sent.
    trailers: Vec<(Vec<u8>, Vec<u8>)>,
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder::new()
    }
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

impl Decoder {
    /// A decoder at the start of a chunked body.
    pub(crate) fn new() -> Decoder {
        Decoder {
            state: State::Size,
            line: Vec::new(),
            trailer_bytes: 0,
            trailers: Vec::new(),
        }
    }

    /// Whether the body ended (the trailer section's empty line read).
    pub(crate) fn done(&self) -> bool {
        self.state == State::Done
    }

    /// The trailer fields read (all of them once [`Decoder::done`]).
    pub(crate) fn trailers(&self) -> &[(Vec<u8>, Vec<u8>)] {
        &self.trailers
    }

    /// Reads `bytes`, the next of the body as it arrived: each run of
    /// chunk data goes to `data`, in order. Returns how many bytes of
    /// `bytes` belong to the body: all of them, unless it ended inside
    /// `bytes` (then the rest follows the body). Once done, nothing more
    /// is read (`Ok(0)`); once refused, every call is refused.
    pub(crate) fn feed<E>(
        &mut self,
        bytes: &[u8],
        data: &mut impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<usize, Error<E>> {
        let mut at = 0;
        while at < bytes.len() {
            let rest = &bytes[at..];
            match self.state {
                State::Done => break,
                State::Failed(why) => return Err(Error::Malformed(why)),
                State::Data(left) => {
                    let take = usize::try_from(left).unwrap_or(usize::MAX).min(rest.len());
                    data(&rest[..take]).map_err(Error::Sink)?;
                    at += take;
                    let left = left - take as u64;
                    self.state = if left == 0 {
                        State::DataCr
                    } else {
                        State::Data(left)
                    };
                }
                State::DataCr | State::DataLf => {
                    let want = if self.state == State::DataCr {
                        b'\r'
                    } else {
                        b'\n'
                    };
                    if rest[0] != want {
                        return Err(self.fail(Malformed::DataEnd));
                    }
                    at += 1;
                    self.state = if want == b'\r' {
                        State::DataLf
                    } else {
                        State::Size
                    };
                }
                State::Size | State::Trailer => {
                    let end = memchr::memchr(b'\n', rest);
                    let take = end.map_or(rest.len(), |i| i + 1);
                    let cap = if self.state == State::Size {
                        MAX_DIGITS + MAX_EXTENSIONS + 2
                    } else {
                        MAX_TRAILERS - self.trailer_bytes
                    };
                    if self.line.len() + take > cap {
                        // Refused before its end: as the line's start reads.
                        let why = if self.state == State::Size {
                            let mut seen = std::mem::take(&mut self.line);
                            seen.extend_from_slice(&rest[..take]);
                            Self::size_line(&seen).err().unwrap_or(Malformed::Extension)
                        } else {
                            Malformed::TrailersTooLarge
                        };
                        return Err(self.fail(why));
                    }
                    self.line.extend_from_slice(&rest[..take]);
                    at += take;
                    if end.is_none() {
                        continue;
                    }
                    // A whole line: CRLF, and no other CR in it.
                    let line = std::mem::take(&mut self.line);
                    let text = match line.strip_suffix(b"\r\n") {
                        Some(text) if !text.contains(&b'\r') => text,
                        _ => return Err(self.fail(Malformed::NotCrlf)),
                    };
                    let next = if self.state == State::Size {
                        Self::size_line(text)
                    } else {
                        self.trailer_bytes += line.len();
                        self.trailer_line(text)
                    };
                    match next {
                        Ok(state) => self.state = state,
                        Err(why) => return Err(self.fail(why)),
                    }
                }
            }
        }
        Ok(at)
    }

    fn fail<E>(&mut self, why: Malformed) -> Error<E> {
        self.state = State::Failed(why);
        self.line = Vec::new();
        Error::Malformed(why)
    }

    /// The state after a size line (`text`, CRLF taken off).
    fn size_line(text: &[u8]) -> Result<State, Malformed> {
        let digits = text.iter().take_while(|b| b.is_ascii_hexdigit()).count();
        if digits == 0 {
            return Err(Malformed::Size);
        }
        if digits > MAX_DIGITS {
            return Err(Malformed::SizeTooLong);
        }
        let after = &text[digits..];
        if !after.is_empty() {
            // BWS ";" extension text.
            let ws = after
                .iter()
                .take_while(|b| matches!(b, b' ' | b'\t'))
                .count();
            if after.get(ws) != Some(&b';') {
                return Err(Malformed::Size);
            }
            if after.len() > MAX_EXTENSIONS
                || !after
                    .iter()
                    .all(|&b| b == b' ' || b == b'\t' || b.is_ascii_graphic())
            {
                return Err(Malformed::Extension);
            }
        }
        let size = text[..digits].iter().fold(0u64, |n, &b| {
            // At most 16 digits: never overflows.
            (n << 4) | u64::from((b as char).to_digit(16).unwrap_or(0))
        });
        Ok(if size == 0 {
            State::Trailer
        } else {
            State::Data(size)
        })
    }

    /// The state after a trailer line (`text`, CRLF taken off); a field
    /// is kept.
    fn trailer_line(&mut self, text: &[u8]) -> Result<State, Malformed> {
        if text.is_empty() {
            return Ok(State::Done);
        }
        let name_len = text.iter().take_while(|&&b| is_tchar(b)).count();
        if name_len == 0 || text.get(name_len) != Some(&b':') {
            // A folded line (leading space) is no token either.
            return Err(Malformed::Trailer);
        }
        let value = &text[name_len + 1..];
        if value.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f) {
            return Err(Malformed::Trailer);
        }
        let trim = |b: &u8| matches!(b, b' ' | b'\t');
        let start = value.iter().position(|b| !trim(b)).unwrap_or(value.len());
        let end = value
            .iter()
            .rposition(|b| !trim(b))
            .map_or(start, |i| i + 1);
        self.trailers
            .push((text[..name_len].to_vec(), value[start..end].to_vec()));
        Ok(State::Trailer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What a decoder made of a body: its data, trailers, how many bytes
    /// were the body's, whether it ended; or the refusal.
    type Outcome = Result<(Vec<u8>, Vec<(Vec<u8>, Vec<u8>)>, usize, bool), Malformed>;

    /// `raw` fed to one decoder in pieces cut at `cuts`.
    fn decode(raw: &[u8], cuts: &[usize]) -> Outcome {
        let mut d = Decoder::new();
        let mut out = Vec::new();
        let mut used = 0;
        let mut at = 0;
        for &cut in cuts.iter().chain(std::iter::once(&raw.len())) {
            let piece = &raw[at..cut.max(at)];
            let n = d
                .feed(piece, &mut |b: &[u8]| {
                    out.extend_from_slice(b);
                    Ok::<(), ()>(())
                })
                .map_err(|e| match e {
                    Error::Malformed(m) => m,
                    Error::Sink(()) => unreachable!(),
                })?;
            assert!(
                n == piece.len() || d.done(),
                "it stops early only at the end"
            );
            used += n;
            at = cut.max(at);
        }
        Ok((out, d.trailers().to_vec(), used, d.done()))
    }

    /// The reference: the whole body at once, read as RFC 9112's grammar
    /// says, with the same limits (written apart from the decoder, by
    /// lines).
    fn reference(raw: &[u8]) -> Outcome {
        let mut data = Vec::new();
        let mut at = 0;
        let line = |at: usize| -> Result<Option<(&[u8], usize)>, Malformed> {
            let Some(lf) = raw[at..].iter().position(|&b| b == b'\n') else {
                return Ok(None);
            };
            let whole = &raw[at..at + lf + 1];
            match whole.strip_suffix(b"\r\n") {
                Some(t) if !t.contains(&b'\r') => Ok(Some((t, at + lf + 1))),
                _ => Err(Malformed::NotCrlf),
            }
        };
        loop {
            let Some((text, next)) = line(at)? else {
                // Incomplete: what was read is data, not ended.
                return Ok((data, Vec::new(), raw.len(), false));
            };
            let hex: String = text
                .iter()
                .take_while(|b| b.is_ascii_hexdigit())
                .map(|&b| b as char)
                .collect();
            if hex.is_empty() {
                return Err(Malformed::Size);
            }
            if hex.len() > 16 {
                return Err(Malformed::SizeTooLong);
            }
            let ext = &text[hex.len()..];
            let trimmed: &[u8] = {
                let mut e = ext;
                while let [b' ' | b'\t', r @ ..] = e {
                    e = r;
                }
                e
            };
            if !ext.is_empty() && !trimmed.starts_with(b";") {
                return Err(Malformed::Size);
            }
            if ext.len() > MAX_EXTENSIONS
                || trimmed
                    .iter()
                    .any(|&b| !(b == b' ' || b == b'\t' || b.is_ascii_graphic()))
            {
                return Err(Malformed::Extension);
            }
            let size = u64::from_str_radix(&hex, 16).unwrap() as usize;
            at = next;
            if size == 0 {
                break;
            }
            if raw.len() < at + size {
                data.extend_from_slice(&raw[at..]);
                return Ok((data, Vec::new(), raw.len(), false));
            }
            data.extend_from_slice(&raw[at..at + size]);
            at += size;
            for (i, want) in [b'\r', b'\n'].into_iter().enumerate() {
                match raw.get(at + i) {
                    None => return Ok((data, Vec::new(), raw.len(), false)),
                    Some(&b) if b != want => return Err(Malformed::DataEnd),
                    Some(_) => {}
                }
            }
            at += 2;
        }
        let mut trailers = Vec::new();
        let start = at;
        loop {
            let Some((text, next)) = line(at)? else {
                if raw.len() - start > MAX_TRAILERS {
                    return Err(Malformed::TrailersTooLarge);
                }
                return Ok((data, trailers, raw.len(), false));
            };
            if next - start > MAX_TRAILERS {
                return Err(Malformed::TrailersTooLarge);
            }
            at = next;
            if text.is_empty() {
                return Ok((data, trailers, at, true));
            }
            let Some(colon) = text.iter().position(|&b| b == b':') else {
                return Err(Malformed::Trailer);
            };
            let (name, value) = (&text[..colon], &text[colon + 1..]);
            if name.is_empty()
                || !name.iter().all(|&b| is_tchar(b))
                || value.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f)
            {
                return Err(Malformed::Trailer);
            }
            let mut v = value;
            while let [b' ' | b'\t', r @ ..] = v {
                v = r;
            }
            while let [r @ .., b' ' | b'\t'] = v {
                v = r;
            }
            trailers.push((name.to_vec(), v.to_vec()));
        }
    }

    const VALID: &[&[u8]] = &[
        b"0\r\n\r\n",
        b"5\r\nhello\r\n0\r\n\r\n",
        b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
        b"A\r\n0123456789\r\n0000\r\n\r\n",
        b"a;name=value\r\n0123456789\r\n0;last\r\n\r\n",
        b"3 ;x=\"quoted; text\"\r\nabc\r\n0\t;e\r\n\r\n",
        b"0000000000000003\r\nabc\r\n0\r\n\r\n",
        b"1\r\n\n\r\n1\r\n\r\r\n0\r\n\r\n",
        b"4\r\nbody\r\n0\r\nX-Checksum: abc\r\nX-Empty:\r\nX-Pad:  v w \t\r\n\r\n",
        b"4\r\nbody\r\n0\r\n\r\nGET /next HTTP/1.1\r\n\r\n",
    ];

    const MALFORMED: &[(&[u8], Malformed)] = &[
        (b"-5\r\nhello\r\n0\r\n\r\n", Malformed::Size),
        (b"+5\r\nhello\r\n0\r\n\r\n", Malformed::Size),
        (b" 5\r\nhello\r\n0\r\n\r\n", Malformed::Size),
        (b"5 \r\nhello\r\n0\r\n\r\n", Malformed::Size),
        (b"0x5\r\nhello\r\n0\r\n\r\n", Malformed::Size),
        (b"\r\nhello\r\n0\r\n\r\n", Malformed::Size),
        (b"5g\r\nhello\r\n0\r\n\r\n", Malformed::Size),
        (b"10000000000000000\r\n", Malformed::SizeTooLong),
        (
            b"00000000000000005\r\nhello\r\n0\r\n\r\n",
            Malformed::SizeTooLong,
        ),
        (b"5\nhello\r\n0\r\n\r\n", Malformed::NotCrlf),
        (b"5\r\r\nhello\r\n0\r\n\r\n", Malformed::NotCrlf),
        (b"5;a\rb\r\nhello\r\n0\r\n\r\n", Malformed::NotCrlf),
        (b"5;\x00\r\nhello\r\n0\r\n\r\n", Malformed::Extension),
        (b"5;\x7f\r\nhello\r\n0\r\n\r\n", Malformed::Extension),
        (b"5\r\nhello0\r\n\r\n", Malformed::DataEnd),
        (b"5\r\nhello\n0\r\n\r\n", Malformed::DataEnd),
        (b"5\r\nhello\r\r0\r\n\r\n", Malformed::DataEnd),
        (b"0\r\nX: a\n\r\n", Malformed::NotCrlf),
        (b"0\r\n folded: x\r\n\r\n", Malformed::Trailer),
        (b"0\r\nX: a\r\n continued\r\n\r\n", Malformed::Trailer),
        (b"0\r\nno colon\r\n\r\n", Malformed::Trailer),
        (b"0\r\n: empty name\r\n\r\n", Malformed::Trailer),
        (b"0\r\nX : space before colon\r\n\r\n", Malformed::Trailer),
        (b"0\r\nX: nul\x00\r\n\r\n", Malformed::Trailer),
    ];

    /// Every valid shape, cut at every byte (and into single bytes),
    /// decodes as the reference reads it whole.
    #[test]
    fn split_anywhere_it_reads_as_the_reference() {
        for raw in VALID {
            let whole = reference(raw);
            let (_, _, _, ended) = whole.clone().unwrap();
            assert!(ended, "{}", String::from_utf8_lossy(raw));
            for cut in 0..=raw.len() {
                assert_eq!(decode(raw, &[cut]), whole, "cut {cut}");
            }
            let every: Vec<usize> = (0..raw.len()).collect();
            assert_eq!(decode(raw, &every), whole);
        }
        let (data, trailers, used, _) = decode(VALID[8], &[]).unwrap();
        assert_eq!(data, b"body");
        assert_eq!(
            trailers,
            vec![
                (b"X-Checksum".to_vec(), b"abc".to_vec()),
                (b"X-Empty".to_vec(), b"".to_vec()),
                (b"X-Pad".to_vec(), b"v w".to_vec()),
            ]
        );
        assert_eq!(used, VALID[8].len());
        // What follows the body is not the body's.
        let (data, _, used, ended) = decode(VALID[9], &[]).unwrap();
        assert!(ended && data == b"body" && used == b"4\r\nbody\r\n0\r\n\r\n".len());
    }

    /// Each malformed shape is refused (the same way split anywhere, and
    /// as the reference refuses it); its valid twin above passes.
    #[test]
    fn malformed_shapes_are_refused_split_anywhere() {
        for (raw, why) in MALFORMED {
            assert_eq!(
                reference(raw),
                Err(*why),
                "{}",
                String::from_utf8_lossy(raw)
            );
            for cut in 0..=raw.len() {
                assert_eq!(decode(raw, &[cut]), Err(*why), "cut {cut}");
            }
        }
        // A refused decoder stays refused.
        let mut d = Decoder::new();
        let mut sink = |_: &[u8]| Ok::<(), ()>(());
        assert!(d.feed(b"-1\r\n", &mut sink).is_err());
        assert_eq!(
            d.feed(b"0\r\n\r\n", &mut sink),
            Err(Error::Malformed(Malformed::Size))
        );
    }

    /// Limits: an extension of MAX_EXTENSIONS passes, one byte more is
    /// refused without waiting for its line's end; a trailer section of
    /// MAX_TRAILERS passes, one byte more is refused.
    #[test]
    fn extensions_and_trailers_are_bounded() {
        let ext = |n: usize| {
            let mut raw = b"1;".to_vec();
            raw.extend(std::iter::repeat(b'x').take(n - 1));
            raw.extend_from_slice(b"\r\na\r\n0\r\n\r\n");
            raw
        };
        assert!(decode(&ext(MAX_EXTENSIONS), &[]).unwrap().3);
        assert_eq!(
            decode(&ext(MAX_EXTENSIONS + 1), &[]),
            Err(Malformed::Extension)
        );
        // Endless, no line end: refused once past the bound.
        let mut d = Decoder::new();
        let mut sink = |_: &[u8]| Ok::<(), ()>(());
        let endless = vec![b'x'; 4096];
        assert!(d.feed(b"1;", &mut sink).is_ok());
        assert_eq!(
            d.feed(&endless, &mut sink),
            Err(Error::Malformed(Malformed::Extension))
        );
        let mut digits = Decoder::new();
        assert_eq!(
            digits.feed(&[b'0'; 4096], &mut sink),
            Err(Error::Malformed(Malformed::SizeTooLong))
        );
        let trailers = |n: usize| {
            // "0\r\n", then "X: " + pad + CRLF, then CRLF: n bytes of trailers.
            let mut raw = b"0\r\nX: ".to_vec();
            raw.extend(std::iter::repeat(b'v').take(n - 3 - 2 - 2));
            raw.extend_from_slice(b"\r\n\r\n");
            raw
        };
        for cut in [0, 5, MAX_TRAILERS / 2, MAX_TRAILERS] {
            assert!(decode(&trailers(MAX_TRAILERS), &[cut]).unwrap().3, "{cut}");
            assert_eq!(
                decode(&trailers(MAX_TRAILERS + 1), &[cut]),
                Err(Malformed::TrailersTooLarge),
                "{cut}"
            );
        }
        assert_eq!(
            reference(&trailers(MAX_TRAILERS + 1)),
            Err(Malformed::TrailersTooLarge)
        );
    }

    /// A sink's error stops the decoder and comes back as it was.
    #[test]
    fn a_sink_error_comes_back() {
        let mut d = Decoder::new();
        let r = d.feed(b"3\r\nabc\r\n0\r\n\r\n", &mut |_: &[u8]| Err("full"));
        assert_eq!(r, Err(Error::Sink("full")));
    }

    fn encode(chunks: &[(Vec<u8>, String)], trailers: &[(String, String)]) -> Vec<u8> {
        let mut raw = Vec::new();
        for (data, ext) in chunks.iter().filter(|(d, _)| !d.is_empty()) {
            raw.extend_from_slice(format!("{:x}{ext}\r\n", data.len()).as_bytes());
            raw.extend_from_slice(data);
            raw.extend_from_slice(b"\r\n");
        }
        raw.extend_from_slice(b"0\r\n");
        for (n, v) in trailers {
            raw.extend_from_slice(format!("{n}: {v}\r\n").as_bytes());
        }
        raw.extend_from_slice(b"\r\n");
        raw
    }

    proptest! {
        /// Any body of chunks (with extensions and trailers), cut into
        /// reads anywhere, decodes to its data and trailers, as the
        /// reference reads it.
        #[test]
        fn any_body_split_anywhere_decodes_to_its_data(
            chunks in proptest::collection::vec(
                (proptest::collection::vec(any::<u8>(), 0..300), "(;[a-z]{1,8}(=[a-z0-9]{0,8})?)?"),
                0..6,
            ),
            trailers in proptest::collection::vec(("[A-Za-z][A-Za-z0-9-]{0,10}", "[ -~]{0,20}"), 0..3),
            cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..8),
        ) {
            let raw = encode(&chunks, &trailers);
            let mut cuts: Vec<usize> = cuts.iter().map(|i| i.index(raw.len() + 1)).collect();
            cuts.sort_unstable();
            let want: Vec<u8> = chunks.iter().flat_map(|(d, _)| d.clone()).collect();
            let got = decode(&raw, &cuts).unwrap();
            prop_assert_eq!(&got, &reference(&raw).unwrap());
            prop_assert_eq!(&got.0, &want);
            prop_assert!(got.3);
            prop_assert_eq!(got.2, raw.len());
            prop_assert_eq!(got.1.len(), trailers.len());
        }

        /// Any bytes at all: the decoder, fed in pieces, agrees with the
        /// reference (data so far, or the same refusal), and never panics.
        #[test]
        fn any_bytes_decode_as_the_reference_reads_them(
            raw in proptest::collection::vec(
                prop_oneof![
                    Just(b'0'), Just(b'1'), Just(b'a'), Just(b'\r'), Just(b'\n'),
                    Just(b';'), Just(b' '), Just(b':'), Just(b'X'), any::<u8>(),
                ],
                0..64,
            ),
            cut in any::<prop::sample::Index>(),
        ) {
            let cut = cut.index(raw.len() + 1);
            prop_assert_eq!(decode(&raw, &[cut]), reference(&raw));
        }
    }
}
