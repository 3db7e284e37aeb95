//! Interception of the hosts per-request rules name (Linux): the proxy
//! answers the command's `CONNECT` itself, terminates its TLS with a leaf of
//! the run's CA ([`ca`]), reads HTTP/1.1 requests ([`exchange`]; HTTP/2
//! streams are read as HTTP/1.1 requests, [`h2`]), checks each
//! against the [`RequestRule`]s and forwards the admitted ones over its own
//! TLS connection to the origin, verified against the system roots or the
//! operator's upstream CA file.

pub(crate) mod body;
pub(crate) mod ca;
mod exchange;
mod h2;

use std::path::Path;
use std::sync::{Arc, Mutex};

use rustls::crypto::CryptoProvider;
use rustls::{ClientConfig, RootCertStore};
use sandbox_core::RequestRule;

use crate::{ProxyError, Secret};

/// The one crypto provider (ring) of both sides: ring's default suites,
/// none added or removed, with AES-128-GCM before AES-256-GCM in each group
/// (as BoringSSL and Go order them). The proxy decrypts and re-encrypts every
/// intercepted byte, and AES-128 runs 10 rounds a block where AES-256 runs
/// 14; the command's side honours this order over the client's
/// ([`ca::RunCa::server_config`] sets `ignore_client_order`), the origin's
/// side offers it first.
pub(crate) fn provider() -> Arc<CryptoProvider> {
    let mut provider = rustls::crypto::ring::default_provider();
    aes_128_first(&mut provider.cipher_suites);
    Arc::new(provider)
}

/// Puts each AES-256-GCM suite after the AES-128-GCM suite that follows it
/// (same protocol version and key exchange, as ring lists them).
fn aes_128_first(suites: &mut [rustls::SupportedCipherSuite]) {
    let name = |s: &rustls::SupportedCipherSuite| s.suite().as_str().unwrap_or("");
    let mut i = 0;
    while i + 1 < suites.len() {
        let (a, b) = (name(&suites[i]), name(&suites[i + 1]));
        if a.contains("AES_256_GCM") && a.replace("AES_256_GCM_SHA384", "AES_128_GCM_SHA256") == b {
            suites.swap(i, i + 1);
            i += 2;
        } else {
            i += 1;
        }
    }
}

/// What the proxy intercepts and how it reaches the origins.
pub(crate) struct Interceptor {
    rules: Vec<RequestRule>,
    ca: ca::RunCa,
    upstream: Arc<ClientConfig>,
    secrets: Vec<Secret>,
    /// Every form of the secrets' values kept out of responses, and what a
    /// response head gets instead ([`value_forms`]).
    forms: Vec<(Vec<u8>, Vec<u8>)>,
    /// Each value as [`decode_view`] reads its encodings back, with the
    /// placeholder ([`decoded_form`]).
    decoded: Vec<(Vec<u8>, Vec<u8>)>,
    /// The `Basic` credentials the proxy re-encoded in this run (each with
    /// what the command sent), at most [`MAX_SENT_CREDENTIALS`]: kept out
    /// of every later response too, as an origin may store a request's
    /// headers and serve them back to a later request.
    sent: Mutex<Vec<(Vec<u8>, Vec<u8>)>>,
}

/// How many re-encoded `Basic` credentials a run remembers
/// ([`Interceptor::scrub`]); past them, the value inside each is still
/// masked in every base64 alignment ([`value_forms`]).
const MAX_SENT_CREDENTIALS: usize = 256;

/// Base64 forms shorter than this are not masked (too short to tell from
/// other text: masking them would garble responses); the raw value is
/// masked whatever its length.
const MIN_BASE64_FORM: usize = 6;

impl std::fmt::Debug for Interceptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Interceptor")
            .field("rules", &self.rules.len())
            .finish_non_exhaustive()
    }
}

impl Interceptor {
    /// A new run CA for the hosts `rules` name, and the client side trusting
    /// the certificates of `upstream_ca` (PEM) or else the system roots.
    pub(crate) fn new(
        rules: Vec<RequestRule>,
        upstream_ca: Option<&Path>,
        secrets: Vec<Secret>,
    ) -> Result<Interceptor, ProxyError> {
        let mut hosts: Vec<String> = rules.iter().map(|r| r.host().to_string()).collect();
        hosts.sort();
        hosts.dedup();
        let ca = ca::RunCa::new(&hosts)?;
        let mut roots = RootCertStore::empty();
        match upstream_ca {
            Some(path) => {
                let text = std::fs::read(path).map_err(|e| {
                    ProxyError::Interception(format!(
                        "cannot read the upstream CA file {}: {e}",
                        path.display()
                    ))
                })?;
                let certs = ca::parse_pem_certs(&text).map_err(|e| {
                    ProxyError::Interception(format!(
                        "the upstream CA file {} holds no usable certificate: {e}",
                        path.display()
                    ))
                })?;
                let (added, _) = roots.add_parsable_certificates(certs);
                if added == 0 {
                    return Err(ProxyError::Interception(format!(
                        "the upstream CA file {} holds no usable certificate",
                        path.display()
                    )));
                }
            }
            None => {
                let native = rustls_native_certs::load_native_certs();
                roots.add_parsable_certificates(native.certs);
                if roots.is_empty() {
                    return Err(ProxyError::Interception(
                        "no system root certificate found to verify the intercepted hosts' \
                         origins (give --upstream-ca FILE)"
                            .into(),
                    ));
                }
            }
        }
        let mut client = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| ProxyError::Interception(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        client.alpn_protocols = vec![b"http/1.1".to_vec()];
        let forms = secrets.iter().flat_map(value_forms).collect();
        let decoded = secrets.iter().filter_map(decoded_form).collect();
        Ok(Interceptor {
            rules,
            ca,
            upstream: Arc::new(client),
            secrets,
            forms,
            decoded,
            sent: Mutex::new(Vec::new()),
        })
    }

    /// Whether `host:port` is intercepted: some rule names it.
    pub(crate) fn intercepts(&self, host: &str, port: u16) -> bool {
        let host = host.strip_suffix('.').unwrap_or(host);
        self.rules
            .iter()
            .any(|r| r.port() == port && r.host().eq_ignore_ascii_case(host))
    }

    /// Whether some rule names `host`, at whatever port: such a host is
    /// reached at its other ports only where an exact `--allow-net
    /// HOST:PORT` lists it ([`crate::RefusalReason::InterceptedElsewhere`]).
    pub(crate) fn names(&self, host: &str) -> bool {
        let host = host.strip_suffix('.').unwrap_or(host);
        self.rules
            .iter()
            .any(|r| r.host().eq_ignore_ascii_case(host))
    }

    /// The run CA's certificate (PEM), which the command trusts.
    pub(crate) fn ca_pem(&self) -> String {
        self.ca.cert_pem()
    }

    /// The rules.
    pub(crate) fn rules(&self) -> &[RequestRule] {
        &self.rules
    }

    /// The secrets.
    pub(crate) fn secrets(&self) -> &[Secret] {
        &self.secrets
    }

    /// The [`Scrub`] of the response to a request whose header values were
    /// `sent` (as the command wrote them, each with its value as
    /// injected): every form of every secret's value, and every `Basic`
    /// credential the proxy re-encoded in this run (this request's first).
    pub(crate) fn scrub<'a>(&self, sent: impl Iterator<Item = (&'a [u8], Vec<u8>)>) -> Scrub {
        let own = sent_credentials(sent);
        let mut kept = self.sent.lock().unwrap_or_else(|p| p.into_inner());
        for pair in &own {
            if kept.len() < MAX_SENT_CREDENTIALS && !kept.contains(pair) {
                kept.push(pair.clone());
            }
        }
        let needles = own
            .into_iter()
            .chain(kept.iter().cloned())
            .chain(self.forms.iter().cloned())
            .collect();
        drop(kept);
        Scrub::from_needles(needles, self.decoded.clone())
    }

    /// The first secret whose placeholder `bytes` carry (also inside a
    /// Basic credential's base64).
    pub(crate) fn placeholder_in(&self, bytes: &[u8]) -> Option<&Secret> {
        self.secrets
            .iter()
            .find(|s| carries(bytes, s.placeholder().as_bytes()))
    }
}

/// Whether `secret` may go to `host:port`: a host the secret names with a
/// port means that port only; one named without a port, every intercepted
/// port of that host.
pub(crate) fn goes_to(secret: &Secret, host: &str, port: u16) -> bool {
    secret.hosts().iter().any(|h| match h.rsplit_once(':') {
        Some((name, p)) => name == host && p.parse::<u16>().ok() == Some(port),
        None => h == host,
    })
}

/// Watches a request body streamed to an origin for the placeholders of
/// the secrets that may not go there, across reads and chunks: the last
/// bytes that could begin a placeholder are held back until the next read
/// shows they do not, so no whole placeholder ever leaves. At the body's
/// end those bytes go (they are not a whole placeholder).
pub(crate) struct BodyGuard<'a> {
    finders: Vec<(memchr::memmem::Finder<'a>, &'a Secret)>,
    /// How many bytes may begin a placeholder (the longest, less one).
    hold: usize,
    /// Bytes read and not yet passed on.
    carry: Vec<u8>,
}

impl<'a> BodyGuard<'a> {
    /// A guard for `watched` (the secrets that may not go where the body
    /// goes); `None` when there is none, and the body passes untouched.
    pub(crate) fn new(watched: impl Iterator<Item = &'a Secret>) -> Option<BodyGuard<'a>> {
        let finders: Vec<_> = watched
            .filter(|s| !s.placeholder().is_empty())
            .map(|s| (memchr::memmem::Finder::new(s.placeholder().as_bytes()), s))
            .collect();
        let hold = finders.iter().map(|(f, _)| f.needle().len()).max()? - 1;
        Some(BodyGuard {
            finders,
            hold,
            carry: Vec::with_capacity(64 * 1024 + hold),
        })
    }

    /// Takes `more` body bytes: `out` gets those that may go now (the ones
    /// held back before first), or the secret whose placeholder they carry.
    pub(crate) fn pass(&mut self, more: &[u8], out: &mut Vec<u8>) -> Result<(), &'a Secret> {
        self.carry.extend_from_slice(more);
        if let Some((_, secret)) = self
            .finders
            .iter()
            .find(|(f, _)| f.find(&self.carry).is_some())
        {
            return Err(secret);
        }
        let emit = self.carry.len() - self.hold.min(self.carry.len());
        out.clear();
        out.extend_from_slice(&self.carry[emit..]);
        self.carry.truncate(emit);
        std::mem::swap(out, &mut self.carry);
        Ok(())
    }

    /// The bytes still held back, at the body's end.
    pub(crate) fn finish(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.carry)
    }

    /// For a stream whose end the proxy does not know (a plain HTTP
    /// relay): whether `more`, after what went before, completes a
    /// placeholder. Nothing is held back (holding could stall a request
    /// whose body ends there), so the bytes before `more`, which may begin
    /// the placeholder, may have gone; the read that completes it never
    /// does.
    pub(crate) fn check(&mut self, more: &[u8]) -> Result<(), &'a Secret> {
        let head = &more[..self.hold.min(more.len())];
        self.carry.extend_from_slice(head);
        let found = self
            .finders
            .iter()
            .find(|(f, _)| f.find(&self.carry).is_some() || f.find(more).is_some());
        if let Some((_, secret)) = found {
            return Err(secret);
        }
        if more.len() >= self.hold {
            self.carry.clear();
            self.carry
                .extend_from_slice(&more[more.len() - self.hold..]);
        } else {
            let drop = self.carry.len().saturating_sub(self.hold);
            self.carry.drain(..drop);
        }
        Ok(())
    }
}

/// Whether `hay` holds `needle`, as is or in a `Basic` credential (base64).
pub(crate) fn carries(hay: &[u8], needle: &[u8]) -> bool {
    contains(hay, needle) || basic(hay).is_some_and(|decoded| contains(&decoded, needle))
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}

/// The decoded credential of a `Basic` authorization value.
pub(crate) fn basic(value: &[u8]) -> Option<Vec<u8>> {
    use base64::Engine;
    let text = std::str::from_utf8(value).ok()?.trim();
    let (scheme, cred) = text.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    base64::engine::general_purpose::STANDARD
        .decode(cred.trim())
        .ok()
}

/// `value` with every placeholder of `secrets` for `host:port` replaced by its
/// value (inside a `Basic` credential too).
pub(crate) fn inject(value: &[u8], secrets: &[Secret], host: &str, port: u16) -> Vec<u8> {
    use base64::Engine;
    let ours: Vec<&Secret> = secrets.iter().filter(|s| goes_to(s, host, port)).collect();
    let replace = |bytes: &[u8]| -> Vec<u8> {
        let mut out = bytes.to_vec();
        for s in &ours {
            out = crate::replace_bytes(&out, s.placeholder().as_bytes(), s.value());
        }
        out
    };
    if let Some(decoded) = basic(value) {
        if ours
            .iter()
            .any(|s| contains(&decoded, s.placeholder().as_bytes()))
        {
            let cred = base64::engine::general_purpose::STANDARD.encode(replace(&decoded));
            return format!("Basic {cred}").into_bytes();
        }
    }
    replace(value)
}

/// The forms of `secret`'s value an origin may give back, each with what a
/// response head gets instead: the value itself, percent-encoded (upper-
/// and lower-case hex), JSON-escaped ([`json_forms`]) and HTML-escaped
/// ([`html_forms`]), each replaced by the placeholder; and its base64 (standard and URL-safe
/// alphabets) at each of the three alignments a prefix may give it, the
/// characters that depend on the value alone (so `b64(user:VALUE)`, and
/// any other base64 of text holding the value, whatever the prefix the
/// command chose; with `\/` for `/` too), replaced by `*`. Percent and
/// HTML forms with another set of characters escaped, or mixed, are read
/// back by [`decode_view`] ([`Scrub`]'s decoded forms). Best effort:
/// what an origin encodes otherwise (hex, hashed, encrypted) the proxy
/// cannot see (docs/enforcement.md, Known gaps); compressed and chunked
/// bodies are decoded first ([`body`]).
pub(crate) fn value_forms(secret: &Secret) -> Vec<(Vec<u8>, Vec<u8>)> {
    use base64::Engine;
    let value = secret.value();
    let placeholder = secret.placeholder().as_bytes().to_vec();
    let mut forms = vec![(value.to_vec(), placeholder.clone())];
    if value.is_empty() {
        return forms;
    }
    for hex in [b"0123456789ABCDEF", b"0123456789abcdef"] {
        let mut pct = Vec::with_capacity(value.len() * 3);
        for &b in value {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
                pct.push(b);
            } else {
                pct.extend_from_slice(&[b'%', hex[usize::from(b >> 4)], hex[usize::from(b & 15)]]);
            }
        }
        forms.push((pct, placeholder.clone()));
    }
    for form in json_forms(value).into_iter().chain(html_forms(value)) {
        forms.push((form, placeholder.clone()));
    }
    let mut base64_forms = Vec::new();
    for engine in [
        base64::engine::general_purpose::STANDARD_NO_PAD,
        base64::engine::general_purpose::URL_SAFE_NO_PAD,
    ] {
        for k in 0..3usize {
            // `k` bytes before the value: the characters from the first
            // whose bits are all the value's to the last such one.
            let mut framed = vec![0u8; k];
            framed.extend_from_slice(value);
            let text = engine.encode(&framed);
            let first = (8 * k).div_ceil(6);
            let last = 8 * (k + value.len()) / 6;
            if let Some(inner) = text.as_bytes().get(first..last) {
                if inner.len() >= MIN_BASE64_FORM {
                    base64_forms.push(inner.to_vec());
                }
            }
        }
    }
    for form in base64_forms {
        // Inside JSON whose encoder escapes '/' (PHP's default) too.
        if form.contains(&b'/') {
            let escaped = crate::replace_bytes(&form, b"/", b"\\/");
            forms.push((escaped.clone(), vec![b'*'; escaped.len()]));
        }
        forms.push((form.clone(), vec![b'*'; form.len()]));
    }
    forms
}

/// The value as common JSON encoders write it in a string: `"` and `\`
/// escaped (with `/` as `\/` or not), controls as `\n`-style or `\u00xx`
/// escapes; each then also with `<`, `>`, `&` (and `'`) as `\u003c`-style
/// escapes (Go's `encoding/json`, Gson, PHP's `JSON_HEX_*`, in lower- and
/// upper-case hex), with non-ASCII characters (and U+2028, U+2029) as
/// `\uXXXX` (Python's `ensure_ascii`, Go), and every character other than
/// a letter or digit as `\u00XX` (both cases). A value that is not UTF-8
/// gets its bytes escaped alike.
fn json_forms(value: &[u8]) -> Vec<Vec<u8>> {
    let text = String::from_utf8_lossy(value);
    let utf8 = std::str::from_utf8(value).is_ok();
    let mut forms = Vec::new();
    let u = |out: &mut String, c: char, upper: bool| {
        let mut units = [0u16; 2];
        for unit in c.encode_utf16(&mut units) {
            if upper {
                out.push_str(&format!("\\u{unit:04X}"));
            } else {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        }
    };
    // Which characters besides `"` and `\` are `\u`-escaped, and in
    // which case: none; `<>&` (Go); `<>&='` (Gson); `<>&'"` upper case
    // (PHP's JSON_HEX_*); `<>&` upper case.
    let sets: [(&str, bool); 5] = [
        ("", false),
        ("<>&", false),
        ("<>&='", false),
        ("<>&'\"", true),
        ("<>&", true),
    ];
    // (slash escaped, the set, non-ASCII escaped: 0 no / 1 lower / 2
    // upper, every non-alphanumeric escaped)
    let mut styles = Vec::new();
    for slash in [false, true] {
        for set in sets {
            for wide in 0..3u8 {
                styles.push((slash, set, wide, false));
            }
        }
    }
    styles.push((false, sets[0], 1, true));
    styles.push((false, sets[0], 2, true));
    for (slash, (set, upper), wide, every) in styles {
        let mut out = String::with_capacity(value.len() * 2);
        for c in text.chars() {
            match c {
                c if c.is_ascii_alphanumeric() => out.push(c),
                c if every => u(&mut out, c, wide == 2),
                c if set.contains(c) => u(&mut out, c, upper),
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '/' if slash => out.push_str("\\/"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                c if (c as u32) < 0x20 => u(&mut out, c, upper),
                '\u{2028}' | '\u{2029}' if !set.is_empty() || wide > 0 => {
                    u(&mut out, c, upper || wide == 2)
                }
                c if !c.is_ascii() && wide > 0 => u(&mut out, c, wide == 2),
                c => out.push(c),
            }
        }
        if utf8 {
            forms.push(out.into_bytes());
        }
    }
    if !utf8 {
        // Bytes: each non-alphanumeric one as \u00XX.
        for upper in [false, true] {
            let mut out = String::new();
            for &b in value {
                if b.is_ascii_alphanumeric() {
                    out.push(char::from(b));
                } else {
                    u(&mut out, char::from(b), upper);
                }
            }
            forms.push(out.into_bytes());
        }
    }
    forms
}

/// The value as common HTML (and XML) escapers write it: `&`, `<`, `>` as
/// `&amp;`, `&lt;`, `&gt;`, and `"` and `'` as `&quot;` / `&#x27;`
/// (Python's `html.escape`), `&#34;` / `&#39;` (Go's `html.EscapeString`),
/// `&quot;` / `&#039;` (PHP's `htmlspecialchars`), `&quot;` / `&#39;`, or
/// `&quot;` / `&apos;` (XML).
fn html_forms(value: &[u8]) -> Vec<Vec<u8>> {
    let mut forms = Vec::new();
    for (quot, apos) in [
        ("&quot;", "&#x27;"),
        ("&#34;", "&#39;"),
        ("&quot;", "&#039;"),
        ("&quot;", "&#39;"),
        ("&quot;", "&apos;"),
    ] {
        let mut out = Vec::with_capacity(value.len() + 16);
        for &b in value {
            match b {
                b'&' => out.extend_from_slice(b"&amp;"),
                b'<' => out.extend_from_slice(b"&lt;"),
                b'>' => out.extend_from_slice(b"&gt;"),
                b'"' => out.extend_from_slice(quot.as_bytes()),
                b'\'' => out.extend_from_slice(apos.as_bytes()),
                _ => out.push(b),
            }
        }
        forms.push(out);
    }
    forms
}

/// The longest text [`decode_view`] reads as one character (`&#1114111;`,
/// `&#x10FFFF;`).
const MAX_FORM: usize = 10;

/// `secret`'s value as [`decode_view`] reads back any of its encodings
/// (every `+` a space), with its placeholder; `None` for an empty value.
fn decoded_form(secret: &Secret) -> Option<(Vec<u8>, Vec<u8>)> {
    let value = secret.value();
    if value.is_empty() {
        return None;
    }
    let canonical = value.iter().copied().map(plus_as_space).collect();
    Some((canonical, secret.placeholder().as_bytes().to_vec()))
}

/// Whether `text` holds a byte that may begin a form [`decode_view`]
/// reads (else its view is the text, and the raw value a needle).
fn encoded(text: &[u8]) -> bool {
    memchr::memchr3(b'%', b'&', b'+', text).is_some() || memchr::memchr(b'\\', text).is_some()
}

/// `+` read as a space (whether form encoding wrote it for one or not),
/// on both sides of the comparison.
fn plus_as_space(b: u8) -> u8 {
    if b == b'+' {
        b' '
    } else {
        b
    }
}

/// `text` read back as percent-encoding (either hex case, whichever
/// characters the encoder escaped: Python's `quote` and `quote_plus`, JS
/// `encodeURIComponent`, form encoding, ...), HTML character references
/// (`&amp;` `&lt;` `&gt;` `&quot;` `&apos;`, decimal `&#N;` and hex
/// `&#xN;` of any character, whichever characters the escaper chose: Go's
/// html/template `&#43;` `&#61;`, OWASP's `&#x2F;`, ...), JSON string
/// escapes (`\uXXXX` of any character, surrogate pairs, `\/`, `\"`,
/// `\\`, `\n`-style, whichever characters the encoder escaped) and form
/// encoding (every `+`, escaped or not, read as a space), in one pass: `out`
/// gets the bytes, `spans` for each the range of `text` its form covers.
/// Forms mixed in one text are read alike. A form is at most
/// [`MAX_FORM`] bytes.
fn decode_view(text: &[u8], out: &mut Vec<u8>, spans: &mut Vec<(usize, usize)>) {
    fn hex(b: u8) -> Option<u32> {
        char::from(b).to_digit(16)
    }
    /// A character reference at the start of `t`: the character and the
    /// reference's length.
    fn reference(t: &[u8]) -> Option<(char, usize)> {
        for (name, c) in [
            (&b"&amp;"[..], '&'),
            (b"&lt;", '<'),
            (b"&gt;", '>'),
            (b"&quot;", '"'),
            (b"&apos;", '\''),
        ] {
            if t.starts_with(name) {
                return Some((c, name.len()));
            }
        }
        let rest = t.strip_prefix(b"&#")?;
        let (radix, digits, max) = match rest.first() {
            Some(b'x' | b'X') => (16, &rest[1..], 6),
            _ => (10, rest, 7),
        };
        let n = digits
            .iter()
            .take(max + 1)
            .take_while(|b| char::from(**b).is_digit(radix))
            .count();
        if n == 0 || n > max || digits.get(n) != Some(&b';') {
            return None;
        }
        let code = digits[..n].iter().fold(0u32, |acc, &b| {
            acc * radix + char::from(b).to_digit(radix).unwrap_or(0)
        });
        let len = t.len() - digits.len() + n + 1;
        char::from_u32(code).map(|c| (c, len))
    }
    /// A JSON string escape at the start of `t` (`\uXXXX`, a surrogate
    /// pair of them, `\/`, `\"`, `\\`, `\n`-style): the character and the
    /// escape's length.
    fn json_escape(t: &[u8]) -> Option<(char, usize)> {
        let unit = |at: usize| -> Option<u32> {
            if t.get(at..at + 2)? != b"\\u" {
                return None;
            }
            t.get(at + 2..at + 6)?
                .iter()
                .try_fold(0u32, |acc, &b| Some(acc * 16 + hex(b)?))
        };
        if let Some(high) = unit(0) {
            if (0xD800..0xDC00).contains(&high) {
                let low = unit(6).filter(|l| (0xDC00..0xE000).contains(l))?;
                let c = char::from_u32(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))?;
                return Some((c, 12));
            }
            return char::from_u32(high).map(|c| (c, 6));
        }
        let c = match t.get(1)? {
            b'/' => '/',
            b'"' => '"',
            b'\\' => '\\',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            _ => return None,
        };
        Some((c, 2))
    }
    out.clear();
    spans.clear();
    let mut i = 0;
    while i < text.len() {
        let b = text[i];
        if b == b'%' {
            if let (Some(h), Some(l)) = (
                text.get(i + 1).copied().and_then(hex),
                text.get(i + 2).copied().and_then(hex),
            ) {
                out.push(plus_as_space((h * 16 + l) as u8));
                spans.push((i, i + 3));
                i += 3;
                continue;
            }
        } else if b == b'\\' || b == b'&' {
            // A JSON escape, or an HTML character reference: one character.
            let decoded = if b == b'\\' {
                json_escape(&text[i..])
            } else {
                reference(&text[i..])
            };
            if let Some((c, len)) = decoded {
                let mut utf8 = [0u8; 4];
                for &byte in c.encode_utf8(&mut utf8).as_bytes() {
                    out.push(plus_as_space(byte));
                    spans.push((i, i + len));
                }
                i += len;
                continue;
            }
        }
        out.push(plus_as_space(b));
        spans.push((i, i + 1));
        i += 1;
    }
}

/// The `Basic` credentials the proxy re-encoded among `sent` (header values
/// as the command wrote them, each with its value as injected): each with
/// what the command sent.
fn sent_credentials<'a>(
    sent: impl Iterator<Item = (&'a [u8], Vec<u8>)>,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    for (original, injected) in sent {
        if injected.as_slice() == original {
            continue;
        }
        if let (Some(cred), Some(was)) = (basic_cred(&injected), basic_cred(original)) {
            out.push((cred.to_vec(), was.to_vec()));
        }
    }
    out
}

/// Keeps the secrets' values out of every intercepted response (an origin
/// that reflects a request header, in a CORS header, a cookie, an error
/// page, an echo endpoint, or that stores it and serves it to a later
/// request, would hand the command the real value): every form of every
/// value ([`value_forms`]) and each `Basic` credential the proxy re-encoded
/// in the run ([`Interceptor::scrub`]) is replaced in the response head
/// (status line, header names and values: by what the command sent, or
/// `*`) and masked in the body (the same number of `*`, so its framing
/// holds), also across reads.
/// No `Debug`: it holds the values.
pub(crate) struct Scrub {
    /// What must not reach the command, and what the head gets instead;
    /// longest first (a credential before the value inside it).
    needles: Vec<(Vec<u8>, Vec<u8>)>,
    /// The values as [`decode_view`] reads their encodings back, each with
    /// what the head gets instead ([`decoded_form`]).
    decoded: Vec<(Vec<u8>, Vec<u8>)>,
    /// How many bytes a body holds back: the longest needle or decoded
    /// form, less one.
    hold: usize,
    /// Body bytes held back: the start of a needle may end a read.
    carry: Vec<u8>,
    /// [`decode_view`]'s output and spans (reused).
    view: Vec<u8>,
    spans: Vec<(usize, usize)>,
}

impl Scrub {
    /// For a request whose header values were `sent`, with `secrets`
    /// ([`Interceptor::scrub`] without the run's earlier credentials).
    #[cfg(test)]
    pub(crate) fn new<'a>(
        secrets: &[Secret],
        sent: impl Iterator<Item = (&'a [u8], Vec<u8>)>,
    ) -> Scrub {
        let needles = sent_credentials(sent)
            .into_iter()
            .chain(secrets.iter().flat_map(value_forms))
            .collect();
        Scrub::from_needles(needles, secrets.iter().filter_map(decoded_form).collect())
    }

    /// The needles, empty ones dropped, longest first, each once; and the
    /// decoded forms.
    fn from_needles(
        mut needles: Vec<(Vec<u8>, Vec<u8>)>,
        decoded: Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Scrub {
        needles.retain(|(n, _)| !n.is_empty());
        // Stable: of two equal needles the first (the more specific head
        // replacement) stays.
        needles.sort_by_key(|(n, _)| std::cmp::Reverse(n.len()));
        let mut seen: Vec<Vec<u8>> = Vec::with_capacity(needles.len());
        needles.retain(|(n, _)| {
            let new = !seen.contains(n);
            if new {
                seen.push(n.clone());
            }
            new
        });
        let longest = needles.first().map_or(0, |(n, _)| n.len());
        let widest = decoded
            .iter()
            .map(|(d, _)| d.len().saturating_mul(MAX_FORM))
            .max()
            .unwrap_or(0);
        Scrub {
            needles,
            decoded,
            hold: longest.max(widest).saturating_sub(1),
            carry: Vec::new(),
            view: Vec::new(),
            spans: Vec::new(),
        }
    }

    /// Whether there is anything to keep out.
    pub(crate) fn is_empty(&self) -> bool {
        self.needles.is_empty() && self.decoded.is_empty()
    }

    /// A response head's text (a header value or name, the reason phrase),
    /// every needle replaced, then every decoded form.
    pub(crate) fn head_value(&self, value: &[u8]) -> Vec<u8> {
        let mut out = value.to_vec();
        for (needle, with) in &self.needles {
            out = crate::replace_bytes(&out, needle, with);
        }
        if self.decoded.is_empty() || !encoded(&out) {
            return out;
        }
        let (mut view, mut spans) = (Vec::new(), Vec::new());
        for (form, with) in &self.decoded {
            decode_view(&out, &mut view, &mut spans);
            let mut replaced = Vec::with_capacity(out.len());
            let mut at = 0;
            for s in memchr::memmem::find_iter(&view, form) {
                let (from, _) = spans[s];
                if from < at {
                    continue;
                }
                let to = spans[s + form.len() - 1].1;
                replaced.extend_from_slice(&out[at..from]);
                replaced.extend_from_slice(with);
                at = to;
            }
            replaced.extend_from_slice(&out[at..]);
            out = replaced;
        }
        out
    }

    /// Masks every decoded form in the carry whose text begins before
    /// `before` (each then lies whole in the carry: the hold covers the widest).
    fn mask_decoded(&mut self, before: usize) {
        if self.decoded.is_empty() || !encoded(&self.carry) {
            // Nothing encoded: the raw value is a needle.
            return;
        }
        for (form, _) in &self.decoded {
            decode_view(&self.carry, &mut self.view, &mut self.spans);
            let mut masked_to = 0;
            for s in memchr::memmem::find_iter(&self.view, form) {
                let (from, _) = self.spans[s];
                if from >= before {
                    break;
                }
                if from < masked_to {
                    continue;
                }
                let to = self.spans[s + form.len() - 1].1;
                self.carry[from..to].fill(b'*');
                masked_to = to;
            }
        }
    }

    /// The body bytes that may go to the client now, of `more` read (every
    /// needle masked); [`Scrub::finish`] gives the rest. The last
    /// `longest - 1` bytes are held back, and only needles that begin
    /// before them are masked now (each then lies whole in what was read,
    /// longer ones first): a shorter needle inside a longer one not yet
    /// complete waits for it.
    pub(crate) fn body(&mut self, more: &[u8]) -> Vec<u8> {
        if self.is_empty() {
            return more.to_vec();
        }
        self.carry.extend_from_slice(more);
        let keep = self.hold.min(self.carry.len());
        let emit = self.carry.len() - keep;
        for (needle, _) in &self.needles {
            mask(&mut self.carry, needle, emit);
        }
        self.mask_decoded(emit);
        self.carry.drain(..emit).collect()
    }

    /// The bytes held back, at the body's end, every needle masked.
    pub(crate) fn finish(&mut self) -> Vec<u8> {
        let end = self.carry.len();
        for (needle, _) in &self.needles {
            mask(&mut self.carry, needle, end);
        }
        self.mask_decoded(end);
        std::mem::take(&mut self.carry)
    }
}

/// Every `needle` in `hay` that begins before `before` overwritten with `*`.
fn mask(hay: &mut [u8], needle: &[u8], before: usize) {
    let finder = memchr::memmem::Finder::new(needle);
    let mut i = 0;
    while i < before {
        match finder.find(&hay[i..]) {
            Some(at) if i + at < before => {
                hay[i + at..i + at + needle.len()].fill(b'*');
                i += at + needle.len();
            }
            _ => break,
        }
    }
}

/// The credential (base64) of a `Basic` authorization value.
fn basic_cred(value: &[u8]) -> Option<&[u8]> {
    let text = std::str::from_utf8(value).ok()?.trim();
    let (scheme, cred) = text.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("basic")
        .then(|| cred.trim().as_bytes())
}

pub(crate) use exchange::{partial_refused, serve};

#[cfg(test)]
mod tests {
    use super::*;

    /// The proxy's suites are ring's default ones, no more, no fewer, with
    /// AES-128-GCM first in each group; the command's side picks AES-128-GCM
    /// for a client that prefers AES-256-GCM (rustls' and OpenSSL's order),
    /// and a client offering only AES-256-GCM still gets it (twin).
    #[test]
    fn aes_128_gcm_is_preferred_on_both_sides_and_no_suite_is_added() {
        use rustls::{CipherSuite as C, ClientConfig, ClientConnection, ServerConnection};
        let ring = rustls::crypto::ring::default_provider();
        let ours = provider();
        let names = |s: &[rustls::SupportedCipherSuite]| s.iter().map(|s| s.suite()).collect();
        let (mut want, mut have): (Vec<C>, Vec<C>) =
            (names(&ring.cipher_suites), names(&ours.cipher_suites));
        assert_eq!(
            &have[..3],
            [
                C::TLS13_AES_128_GCM_SHA256,
                C::TLS13_AES_256_GCM_SHA384,
                C::TLS13_CHACHA20_POLY1305_SHA256
            ]
        );
        for pair in have.windows(2) {
            let [a, b] = [pair[0].as_str().unwrap(), pair[1].as_str().unwrap()];
            assert!(
                !(a.contains("AES_256_GCM") && b.contains("AES_128_GCM")),
                "{have:?}"
            );
        }
        want.sort_by_key(|s| u16::from(*s));
        have.sort_by_key(|s| u16::from(*s));
        assert_eq!(want, have);

        let ca = ca::RunCa::new(&["origin.test".to_string()]).unwrap();
        let server = ca.server_config("origin.test").unwrap();
        let mut roots = RootCertStore::empty();
        for cert in ca::parse_pem_certs(ca.cert_pem().as_bytes()).unwrap() {
            roots.add(cert).unwrap();
        }
        for (offered, agreed) in [
            (ring.cipher_suites.clone(), C::TLS13_AES_128_GCM_SHA256),
            (
                vec![rustls::crypto::ring::cipher_suite::TLS13_AES_256_GCM_SHA384],
                C::TLS13_AES_256_GCM_SHA384,
            ),
        ] {
            let client_provider = CryptoProvider {
                cipher_suites: offered,
                ..rustls::crypto::ring::default_provider()
            };
            let config = ClientConfig::builder_with_provider(Arc::new(client_provider))
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(roots.clone())
                .with_no_client_auth();
            let name = "origin.test".try_into().unwrap();
            let mut client = ClientConnection::new(Arc::new(config), name).unwrap();
            let mut server = ServerConnection::new(Arc::clone(&server)).unwrap();
            while client.is_handshaking() || server.is_handshaking() {
                let mut wire = Vec::new();
                while client.wants_write() {
                    client.write_tls(&mut wire).unwrap();
                }
                server.read_tls(&mut wire.as_slice()).unwrap();
                server.process_new_packets().unwrap();
                wire.clear();
                while server.wants_write() {
                    server.write_tls(&mut wire).unwrap();
                }
                client.read_tls(&mut wire.as_slice()).unwrap();
                client.process_new_packets().unwrap();
            }
            let suite = |s: Option<rustls::SupportedCipherSuite>| s.map(|s| s.suite());
            assert_eq!(suite(server.negotiated_cipher_suite()), Some(agreed));
            assert_eq!(suite(client.negotiated_cipher_suite()), Some(agreed));
        }
    }

    /// `body` scrubbed of `secrets` in two reads split at `cut`, and the end.
    fn split_scrubbed(secrets: &[Secret], body: &[u8], cut: usize) -> Vec<u8> {
        let mut scrub = Scrub::new(secrets, std::iter::empty());
        let mut out = scrub.body(&body[..cut]);
        out.extend(scrub.body(&body[cut..]));
        out.extend(scrub.finish());
        out
    }

    /// `text` passes a scrub of `secrets` untouched, as a head and a body.
    #[track_caller]
    fn passes_untouched(secrets: &[Secret], text: &str) {
        let scrub = Scrub::new(secrets, std::iter::empty());
        assert_eq!(scrub.head_value(text.as_bytes()), text.as_bytes());
        let mut body = Scrub::new(secrets, std::iter::empty());
        let mut out = body.body(text.as_bytes());
        out.extend(body.finish());
        assert_eq!(out, text.as_bytes());
    }

    #[test]
    fn injected_values_are_kept_out_of_responses_also_across_reads() {
        use base64::Engine;
        let spec: sandbox_core::SecretSpec = "TOKEN@api.example.com".parse().unwrap();
        let secret = Secret::new(&spec, b"s3cret-value".to_vec()).unwrap();
        let p = secret.placeholder().to_string();
        let b64 = base64::engine::general_purpose::STANDARD;
        let basic = format!("Basic {}", b64.encode(format!("me:{p}")));
        let secrets = vec![secret];
        let injected = inject(basic.as_bytes(), &secrets, "api.example.com", 443);
        let sent = [(basic.as_bytes(), injected.clone())];
        let scrub = Scrub::new(&secrets, sent.iter().map(|(o, i)| (*o, i.clone())));
        assert_eq!(
            scrub.head_value(&injected),
            basic.as_bytes(),
            "the head gets what the command sent"
        );
        assert_eq!(
            scrub.head_value(b"x s3cret-value y"),
            format!("x {p} y").as_bytes()
        );
        // Split anywhere across reads, the body is masked, its length kept.
        let body = format!(
            "a s3cret-value b {} c",
            String::from_utf8_lossy(&injected[6..])
        );
        for cut in 0..body.len() {
            let mut scrub = Scrub::new(&secrets, sent.iter().map(|(o, i)| (*o, i.clone())));
            let mut out = scrub.body(&body.as_bytes()[..cut]);
            out.extend(scrub.body(&body.as_bytes()[cut..]));
            out.extend(scrub.finish());
            assert_eq!(out.len(), body.len());
            let out = String::from_utf8(out).unwrap();
            assert!(
                !out.contains("s3cret") && !out.contains(&body[17..25]),
                "{out}"
            );
            assert!(
                out.starts_with("a ************ b ") && out.ends_with(" c"),
                "{out}"
            );
        }
        // Its twin: a request without secrets passes bytes as they are.
        let mut none = Scrub::new(&[], std::iter::empty());
        assert!(none.is_empty());
        assert_eq!(none.body(b"s3cret-value"), b"s3cret-value");
    }

    /// F4: the value is kept out in every base64 alignment (whatever
    /// prefix the command chose for `user:`, whatever follows), in both
    /// alphabets, percent-encoded and JSON-escaped, in heads and bodies
    /// split anywhere; the twin: another value's forms pass untouched.
    #[test]
    fn every_encoding_of_the_value_is_kept_out() {
        use base64::Engine;
        let spec: sandbox_core::SecretSpec = "TOKEN@api.example.com".parse().unwrap();
        let value = b"real/secret+value?42\"";
        let secret = Secret::new(&spec, value.to_vec()).unwrap();
        let secrets = vec![secret];
        let std = &base64::engine::general_purpose::STANDARD;
        let url = &base64::engine::general_purpose::URL_SAFE;
        let decoded_holds_value = |text: &str| {
            // Whatever survived, read back as base64 (masks as 'A') in
            // every alignment: never the value.
            let cleaned: String = text
                .chars()
                .map(|c| if c == '*' { 'A' } else { c })
                .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '-' | '_'))
                .collect();
            let lax = base64::engine::GeneralPurposeConfig::new()
                .with_decode_allow_trailing_bits(true)
                .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent);
            (0..4).any(|skip| {
                let t = cleaned.get(skip..).unwrap_or("");
                let t = if t.len() % 4 == 1 {
                    &t[..t.len() - 1]
                } else {
                    t
                };
                [&base64::alphabet::STANDARD, &base64::alphabet::URL_SAFE]
                    .into_iter()
                    .any(|a| {
                        base64::engine::GeneralPurpose::new(a, lax)
                            .decode(t)
                            .is_ok_and(|d| d.windows(value.len()).any(|w| w == value))
                    })
            })
        };
        for prefix in ["", "m", "me", "me:", "user:", "ab:cd"] {
            for suffix in ["", "x", "xy", ":z"] {
                let framed = [prefix.as_bytes(), value, suffix.as_bytes()].concat();
                for text in [std.encode(&framed), url.encode(&framed)] {
                    assert!(decoded_holds_value(&text), "the test reads it: {text}");
                    let scrub = Scrub::new(&secrets, std::iter::empty());
                    let head = String::from_utf8(scrub.head_value(text.as_bytes())).unwrap();
                    assert!(!decoded_holds_value(&head), "{prefix:?} {suffix:?}: {head}");
                    let body = format!("{{\"auth\": \"Basic {text}\"}}");
                    for cut in 0..body.len() {
                        let out = split_scrubbed(&secrets, body.as_bytes(), cut);
                        assert_eq!(out.len(), body.len());
                        let out = String::from_utf8(out).unwrap();
                        assert!(!decoded_holds_value(&out), "{cut}: {out}");
                    }
                }
            }
        }
        let scrub = Scrub::new(&secrets, std::iter::empty());
        let p = secrets[0].placeholder().to_string();
        for echoed in [
            "real%2Fsecret%2Bvalue%3F42%22",
            "real%2fsecret%2bvalue%3f42%22",
            "real/secret+value?42\\\"",
            "real\\/secret+value?42\\\"",
        ] {
            let out = scrub.head_value(format!("a {echoed} b").as_bytes());
            assert_eq!(out, format!("a {p} b").as_bytes(), "{echoed}");
        }
        // The twin: another value's encodings, and ordinary text, pass.
        let other = std.encode(b"me:another-value-of-the-same-size");
        passes_untouched(&secrets, &other);
    }

    /// G8: the value as Go's encoding/json, Gson, PHP (JSON_HEX_*),
    /// Python (ensure_ascii), an every-character `\u` escaper and HTML
    /// escapers write it is masked in heads and bodies; the twin: the
    /// same escapes of another value pass.
    #[test]
    fn json_unicode_escapes_and_html_entities_of_the_value_are_kept_out() {
        let spec: sandbox_core::SecretSpec = "TOKEN@api.example.com".parse().unwrap();
        let value = "sk&ab<cd>ef-'q\"/\u{e9}\u{2028}-0123456789";
        let secrets = vec![Secret::new(&spec, value.as_bytes().to_vec()).unwrap()];
        let p = secrets[0].placeholder().to_string();
        let echoed = [
            // Go: <>& and U+2028 as \u, lower case; é raw.
            r#"sk\u0026ab\u003ccd\u003eef-'q\"/é\u2028-0123456789"#,
            // Gson: ' too.
            r#"sk\u0026ab\u003ccd\u003eef-\u0027q\"/é\u2028-0123456789"#,
            // PHP with every JSON_HEX_* flag: upper case, \/ and é escaped.
            r#"sk\u0026ab\u003Ccd\u003Eef-\u0027q\u0022\/\u00e9\u2028-0123456789"#,
            // Python ensure_ascii.
            r#"sk&ab<cd>ef-'q\"/\u00e9\u2028-0123456789"#,
            // Every character other than a letter or digit.
            r#"sk\u0026ab\u003ccd\u003eef\u002d\u0027q\u0022\u002f\u00e9\u2028\u002d0123456789"#,
            r#"sk\u0026ab\u003Ccd\u003Eef\u002D\u0027q\u0022\u002F\u00E9\u2028\u002D0123456789"#,
            // HTML: Python, Go, PHP.
            "sk&amp;ab&lt;cd&gt;ef-&#x27;q&quot;/\u{e9}\u{2028}-0123456789",
            "sk&amp;ab&lt;cd&gt;ef-&#39;q&#34;/\u{e9}\u{2028}-0123456789",
            "sk&amp;ab&lt;cd&gt;ef-&#039;q&quot;/\u{e9}\u{2028}-0123456789",
        ];
        for form in echoed {
            let scrub = Scrub::new(&secrets, std::iter::empty());
            assert_eq!(
                String::from_utf8_lossy(&scrub.head_value(format!("a {form} b").as_bytes())),
                format!("a {p} b"),
                "{form}"
            );
            let body = format!("{{\"auth\": \"{form}\"}}");
            for cut in 0..body.len() {
                let out = split_scrubbed(&secrets, body.as_bytes(), cut);
                let out = String::from_utf8_lossy(&out);
                assert!(!out.contains("0123456789"), "{form} {cut}: {out}");
            }
        }
        let other = r#"sk\u0026ab\u003ccd\u003eef-other-0123456789"#;
        let scrub = Scrub::new(&secrets, std::iter::empty());
        assert_eq!(scrub.head_value(other.as_bytes()), other.as_bytes());
    }

    /// Finding 6: the value percent-encoded with any set of characters
    /// escaped (Python's `quote`, `/` kept; `quote_plus`, space as `+`;
    /// either hex case), as HTML character references of any style
    /// (Go html/template `&#43;` `&#61;`, `&#x2F;`, `&#47;`, an escaper
    /// that escapes only some characters) or mixed, is masked in heads and
    /// in bodies split anywhere; the twins: the same encodings of another
    /// value, and text with `+`, `%` and `&` around, pass untouched.
    #[test]
    fn percent_and_html_encodings_with_any_escaped_set_are_kept_out() {
        let spec: sandbox_core::SecretSpec = "TOKEN@api.example.com".parse().unwrap();
        let value = "abc/def+ghi=jk&l<m>\"q'r 12\u{e9}";
        let secrets = vec![Secret::new(&spec, value.as_bytes().to_vec()).unwrap()];
        let p = secrets[0].placeholder().to_string();
        let echoed = [
            // urllib.parse.quote (safe='/'), quote_plus, lower-case hex.
            "abc/def%2Bghi%3Djk%26l%3Cm%3E%22q%27r%2012%C3%A9",
            "abc%2Fdef%2Bghi%3Djk%26l%3Cm%3E%22q%27r+12%C3%A9",
            "abc%2fdef%2bghi%3djk%26l%3cm%3e%22q%27r%2012%c3%a9",
            // encodeURIComponent (' kept), encodeURI (/+=& kept).
            "abc%2Fdef%2Bghi%3Djk%26l%3Cm%3E%22q'r%2012%C3%A9",
            "abc/def+ghi=jk&l%3Cm%3E%22q'r%2012%C3%A9",
            // Go html/template (text and unquoted attribute).
            "abc/def&#43;ghi=jk&amp;l&lt;m&gt;&#34;q&#39;r 12\u{e9}",
            "abc/def&#43;ghi&#61;jk&amp;l&lt;m&gt;&#34;q&#39;r&#32;12\u{e9}",
            // OWASP-style, every character decimal, hex, as rt2's origin.
            "abc&#x2F;def+ghi=jk&amp;l&lt;m&gt;&quot;q&#x27;r 12\u{e9}",
            "abc&#47;def&#43;ghi&#61;jk&#38;l&#60;m&#62;&#34;q&#39;r&#32;12&#233;",
            "abc&#x2f;def&#X2B;ghi&#x3D;jk&#x26;l&#x3c;m&#x3E;&#x22;q&#x27;r&#x20;12&#xE9;",
            "abc/def&#43;ghi=jk&amp;l&lt;m>\"q'r 12\u{e9}",
            // Mixed.
            "abc%2Fdef&#43;ghi=jk&amp;l%3cm&gt;\"q&apos;r+12%C3%A9",
            // JSON with any set escaped, mixed with the others.
            r#"abc\/def\u002bghi\u003Djk\u0026l<m>\"q'r 12\u00e9"#,
            r#"abc\u002Fdef+ghi=jk&l\u003cm\u003e\u0022q\u0027r\u002012\u00E9"#,
            r#"abc/def%2Bghi\u003djk&amp;l<m>\"q&#39;r+12\u00e9"#,
        ];
        for form in echoed {
            let scrub = Scrub::new(&secrets, std::iter::empty());
            assert_eq!(
                String::from_utf8_lossy(&scrub.head_value(format!("a={form}; b").as_bytes())),
                format!("a={p}; b"),
                "{form}"
            );
            let body = format!("x+1&y=%41 {form} z&amp;+");
            for cut in 0..body.len() {
                let out = split_scrubbed(&secrets, body.as_bytes(), cut);
                assert_eq!(out.len(), body.len());
                let out = String::from_utf8_lossy(&out);
                assert!(
                    out.starts_with("x+1&y=%41 ") && out.ends_with(" z&amp;+"),
                    "{form} {cut}: {out}"
                );
                assert!(
                    !out.contains("ghi") && !out.contains("12"),
                    "{form} {cut}: {out}"
                );
            }
        }
        // The twins: another value's encodings, and encoded text, pass.
        for other in [
            "abc/def%2Bghi%3Djk%26l%3Cm%3E%22q%27r%2013%C3%A9",
            "abc/def&#43;ghi=jk&amp;l&lt;m&gt;&#34;q&#39;r 13\u{e9}",
            "a+b%20c&amp;d&#x2F;&#47;%zz&#;&#x;&#99999999;&",
        ] {
            passes_untouched(&secrets, other);
        }
    }

    /// A character outside the BMP as a JSON surrogate pair (either hex
    /// case) is read back; the twins: a lone surrogate, or an escaped
    /// backslash before `u`, is not the character.
    #[test]
    fn json_surrogate_pairs_are_read_back_and_lone_ones_not() {
        let spec: sandbox_core::SecretSpec = "TOKEN@api.example.com".parse().unwrap();
        let secrets = vec![Secret::new(&spec, "k\u{1F600}v-123456".as_bytes().to_vec()).unwrap()];
        let p = secrets[0].placeholder().to_string();
        let scrub = Scrub::new(&secrets, std::iter::empty());
        for form in [r"k\uD83D\uDE00v-123456", r"k\ud83d\ude00v\u002d123456"] {
            assert_eq!(
                String::from_utf8_lossy(&scrub.head_value(form.as_bytes())),
                p,
                "{form}"
            );
        }
        for other in [
            r"k\uD83Dv-123456",
            r"k\\uD83D\uDE00v-123456",
            r"k\uDE00\uD83Dv-123456",
        ] {
            assert_eq!(
                scrub.head_value(other.as_bytes()),
                other.as_bytes(),
                "{other}"
            );
        }
    }

    proptest::proptest! {
        /// Any bytes, split anywhere: the masked body keeps its length and
        /// holds no encoding of the value that decode_view reads back.
        #[test]
        fn decoded_masking_keeps_lengths_on_any_bytes(
            parts in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::strategy::Just(b"%2B".to_vec()),
                    proptest::strategy::Just(b"&#43;".to_vec()),
                    proptest::strategy::Just(b"k+v".to_vec()),
                    proptest::strategy::Just(b"&amp;".to_vec()),
                    proptest::strategy::Just(br"\u002B".to_vec()),
                    proptest::strategy::Just(br"\u0026".to_vec()),
                    proptest::collection::vec(proptest::prelude::any::<u8>(), 0..6),
                ],
                0..12,
            ),
            cut in 0usize..80,
        ) {
            let spec: sandbox_core::SecretSpec = "TOKEN@api.example.com".parse().unwrap();
            let secrets = vec![Secret::new(&spec, b"k+v&".to_vec()).unwrap()];
            let body = parts.concat();
            let cut = cut.min(body.len());
            let mut scrub = Scrub::new(&secrets, std::iter::empty());
            let mut out = scrub.body(&body[..cut]);
            out.extend(scrub.body(&body[cut..]));
            out.extend(scrub.finish());
            proptest::prop_assert_eq!(out.len(), body.len());
            let (mut view, mut spans) = (Vec::new(), Vec::new());
            decode_view(&out, &mut view, &mut spans);
            proptest::prop_assert!(memchr::memmem::find(&view, b"k v&").is_none());
            let head = scrub.head_value(&body);
            decode_view(&head, &mut view, &mut spans);
            proptest::prop_assert!(memchr::memmem::find(&view, b"k v&").is_none());
        }
    }

    #[test]
    fn body_placeholders_are_found_across_reads_and_none_leaves_whole() {
        let api: sandbox_core::SecretSpec = "TOKEN@api.example.com".parse().unwrap();
        let secret = Secret::new(&api, b"v".to_vec()).unwrap();
        let p = secret.placeholder().to_string();
        let secrets = [secret];
        let body = format!("a=1&token={p}&b=2");
        for cut in 0..=body.len() {
            let mut guard = BodyGuard::new(secrets.iter()).unwrap();
            let mut sent = Vec::new();
            let mut out = Vec::new();
            let first = guard.pass(&body.as_bytes()[..cut], &mut out);
            sent.extend_from_slice(&out);
            let found = first.is_err() || guard.pass(&body.as_bytes()[cut..], &mut out).is_err();
            assert!(found, "cut at {cut}");
            if first.is_ok() {
                // What went before it: never the whole placeholder.
                assert!(!String::from_utf8_lossy(&sent).contains(&p), "cut at {cut}");
                assert!(body.as_bytes().starts_with(&sent));
            }
        }
        // One byte at a time.
        let mut guard = BodyGuard::new(secrets.iter()).unwrap();
        let mut out = Vec::new();
        let mut sent = Vec::new();
        let mut found = false;
        for b in body.as_bytes() {
            if guard.pass(std::slice::from_ref(b), &mut out).is_err() {
                found = true;
                break;
            }
            sent.extend_from_slice(&out);
        }
        assert!(found && !String::from_utf8_lossy(&sent).contains(&p));
        // The twin: a body without it passes whole, in order, split anywhere.
        let plain = format!("a=1&token={}&b=2", &p[..p.len() - 1]);
        for cut in 0..=plain.len() {
            let mut guard = BodyGuard::new(secrets.iter()).unwrap();
            let mut sent = Vec::new();
            let mut out = Vec::new();
            guard.pass(&plain.as_bytes()[..cut], &mut out).unwrap();
            sent.extend_from_slice(&out);
            guard.pass(&plain.as_bytes()[cut..], &mut out).unwrap();
            sent.extend_from_slice(&out);
            sent.extend(guard.finish());
            assert_eq!(sent, plain.as_bytes());
        }
        // Nothing watched: no guard.
        assert!(BodyGuard::new(std::iter::empty()).is_none());
    }

    #[test]
    fn a_secret_named_with_a_port_goes_to_that_port_only() {
        let spec: sandbox_core::SecretSpec = "TOKEN@api.example.com:8443,pkgs.example.com"
            .parse()
            .unwrap();
        let secret = Secret::new(&spec, b"v".to_vec()).unwrap();
        assert!(goes_to(&secret, "api.example.com", 8443));
        assert!(!goes_to(&secret, "api.example.com", 443));
        assert!(goes_to(&secret, "pkgs.example.com", 443));
        assert!(goes_to(&secret, "pkgs.example.com", 8443));
        assert!(!goes_to(&secret, "other.example.com", 8443));
    }
}
