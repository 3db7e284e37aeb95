//! Per-request egress rules and the secrets the proxy injects.
//!
//! A [`RequestRule`] (`METHODS URL-PATTERN`, e.g.
//! `GET,HEAD https://pkgs.example.com/simple/**`) admits requests by method,
//! host, port and path. A host such a rule names is *intercepted* by the
//! egress proxy: it terminates the command's TLS, checks each request against
//! the rules and forwards the admitted ones over its own TLS connection.
//!
//! Paths are compared after [`normalize_path`]: percent-encoded unreserved
//! characters are decoded, other escapes are kept (hex upper-cased), empty
//! segments (`//`) and `.` segments are dropped, `..` removes the segment
//! before it. A path that climbs above `/`, or that is ambiguous (an encoded
//! `/` or `\`, an encoded `.` in a dot segment, a dot segment with
//! parameters (`..;`), an escaped `%` before a dot or separator, overlong
//! UTF-8 decoded once or twice, a NUL, a bad escape, a raw `\`), is refused whatever the rules say: the origin might read it
//! differently from the proxy. These checks apply to the raw segment and to
//! the normalised one the proxy sends (`%25%32%65` normalises to `%252e`).
//!
//! A flag the sandbox proposes (`--allow-request 'GET https://...'`,
//! `--allow-net HOST:PORT`, `-w PATH`) is written by [`flag`]: its value is
//! one shell word ([`shell_word`], POSIX single quotes), so pasting it runs
//! nothing the command chose; a value no pasted word can carry safely (a
//! control or invisible character) is not proposed at all.
//!
//! A [`SecretSpec`] (`NAME@HOST[,HOST...]` or `NAME=file:PATH@HOST[,...]`)
//! names a credential the runner reads and the proxy writes into request
//! headers for those hosts only; the command sees a placeholder.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::net::EgressRule;

/// Why a [`RequestRule`] or [`SecretSpec`] could not be parsed; each names
/// the text at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RequestRuleError {
    /// No space between the methods and the URL pattern.
    #[error("request rule {0:?}: write METHODS URL-PATTERN, e.g. 'GET,HEAD https://pkgs.example.com/simple/**'")]
    Shape(String),
    /// A method is not an HTTP token (or `*`).
    #[error("request rule: {0:?} is not an HTTP method (write e.g. GET,HEAD or * for any)")]
    Method(String),
    /// The URL pattern is not `https://HOST[:PORT]/PATH`.
    #[error("request rule: URL pattern {0:?} must be https://HOST[:PORT]/PATH (only https is intercepted)")]
    Url(String),
    /// The host is not a plain host name.
    #[error("request rule: {host:?} in {url:?} is not a host name (IP literals and wildcards are not intercepted): {why}")]
    Host {
        /// The URL pattern.
        url: String,
        /// The host part.
        host: String,
        /// Why it is refused.
        why: String,
    },
    /// The path pattern itself is not normal or uses `**` within a segment.
    #[error("request rule: path pattern {path:?}: {why}")]
    Path {
        /// The path pattern.
        path: String,
        /// Why it is refused.
        why: String,
    },
    /// A secret specification is malformed.
    #[error("secret {spec:?}: {why} (write NAME@HOST[,HOST...] or NAME=file:PATH@HOST[,HOST...])")]
    Secret {
        /// The specification as given.
        spec: String,
        /// What is wrong.
        why: String,
    },
}

/// Why a request path is refused before any rule is consulted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PathProblem {
    /// The path does not start with `/`.
    #[error("the path does not start with '/'")]
    NotAbsolute,
    /// `..` climbs above the root.
    #[error("the path climbs above '/' with '..'")]
    Outside,
    /// An encoded `/` or `\` (`%2F`, `%5C`): one segment to the proxy, two
    /// to some origins.
    #[error("the path holds an encoded '/' or '\\' ({0}), which origins read differently")]
    EncodedSeparator(String),
    /// An encoded dot in a `.` or `..` segment (`%2e%2e`).
    #[error(
        "the path holds a dot segment written with escapes ({0:?}), which origins read differently"
    )]
    EncodedDot(String),
    /// A `%` not followed by two hex digits.
    #[error("the path holds a bad percent escape ({0:?})")]
    BadEscape(String),
    /// A byte no request target may hold raw (control, space, non-ASCII,
    /// `\`, `#`), or an encoded NUL.
    #[error("the path holds a byte requests may not carry (0x{0:02x})")]
    Byte(u8),
    /// A segment some origins read as another: a dot segment with
    /// parameters (`..;x`, Tomcat and Spring drop the parameters), an
    /// escaped `%` before a dot or separator (`%252e`, decoded twice, or
    /// `%25%32%65`, which normalises to it), an overlong UTF-8 form
    /// (`%C0%AE`, or `%25C0%25AE` decoded twice).
    #[error("the path holds {0}, which origins read differently")]
    Ambiguous(String),
}

/// A request path after [`normalize_path`]: segments without `.`/`..`, no
/// empty segment, unreserved characters decoded, other escapes upper-cased.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NormalPath {
    segments: Vec<String>,
    trailing_slash: bool,
}

impl NormalPath {
    /// The segments, in order (none for `/`).
    pub fn segments(&self) -> &[String] {
        &self.segments
    }

    /// Whether the path ends with `/` (and is not `/` itself).
    pub fn trailing_slash(&self) -> bool {
        self.trailing_slash
    }
}

impl fmt::Display for NormalPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.segments.is_empty() {
            return f.write_str("/");
        }
        for s in &self.segments {
            write!(f, "/{s}")?;
        }
        if self.trailing_slash {
            f.write_str("/")?;
        }
        Ok(())
    }
}

fn unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// Bytes a path may hold raw (RFC 3986 `pchar` without `%`, plus `/`).
fn raw_path_byte(b: u8) -> bool {
    unreserved(b)
        || matches!(
            b,
            b'!' | b'$'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'*'
                | b'+'
                | b','
                | b';'
                | b'='
                | b':'
                | b'@'
        )
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// One segment: unreserved escapes decoded, others upper-cased; whether an
/// escape was decoded.
fn normal_segment(raw: &str) -> Result<(String, bool), PathProblem> {
    let bytes = raw.as_bytes();
    let mut out = String::with_capacity(raw.len());
    let mut decoded = false;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'%' {
            let (Some(hi), Some(lo)) = (
                bytes.get(i + 1).copied().and_then(hex),
                bytes.get(i + 2).copied().and_then(hex),
            ) else {
                let end = (i + 3).min(bytes.len());
                return Err(PathProblem::BadEscape(
                    String::from_utf8_lossy(&bytes[i..end]).into_owned(),
                ));
            };
            let v = hi * 16 + lo;
            match v {
                b'/' | b'\\' => {
                    return Err(PathProblem::EncodedSeparator(
                        String::from_utf8_lossy(&bytes[i..i + 3]).into_owned(),
                    ))
                }
                0 => return Err(PathProblem::Byte(0)),
                v if unreserved(v) => {
                    out.push(char::from(v));
                    decoded = true;
                }
                v => {
                    out.push('%');
                    out.push(char::from(b"0123456789ABCDEF"[usize::from(v >> 4)]));
                    out.push(char::from(b"0123456789ABCDEF"[usize::from(v & 15)]));
                }
            }
            i += 3;
        } else if raw_path_byte(b) {
            out.push(char::from(b));
            i += 1;
        } else {
            return Err(PathProblem::Byte(b));
        }
    }
    Ok((out, decoded))
}

/// `bytes` with each `%` and two hex digits decoded once; anything else
/// (a lone `%` included) kept as it is.
fn percent_decode(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(hi), Some(lo)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push(hi * 16 + lo);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    out
}

/// Refuses a raw segment an origin may read as another one than the proxy
/// does: see [`PathProblem::Ambiguous`].
fn ambiguous(raw: &str) -> Result<(), PathProblem> {
    let lower = raw.to_ascii_lowercase();
    if let Some((name, _)) = lower.split_once(';') {
        if matches!(name, "." | ".." | "%2e" | "%2e%2e" | ".%2e" | "%2e.") {
            return Err(PathProblem::Ambiguous(format!(
                "a dot segment with parameters ({raw:?})"
            )));
        }
    }
    for twice in ["%252e", "%252f", "%255c", "%2525"] {
        if lower.contains(twice) {
            return Err(PathProblem::Ambiguous(format!(
                "an escaped '%' before a dot or separator ({raw:?}), decoded twice by some"
            )));
        }
    }
    // Overlong UTF-8: a lead byte C0 or C1, or E0 / F0 followed by a
    // continuation byte below the shortest form's range; decoded once
    // (`%C0%AE`) or, for an origin that decodes twice, twice
    // (`%25C0%25AE`).
    let once = percent_decode(lower.as_bytes());
    let twice = percent_decode(&once);
    let overlong = |bytes: &[u8]| {
        bytes.windows(2).any(|w| {
            matches!(w[0], 0xc0 | 0xc1)
                || (w[0] == 0xe0 && (0x80..0xa0).contains(&w[1]))
                || (w[0] == 0xf0 && (0x80..0x90).contains(&w[1]))
        }) || bytes.last().is_some_and(|b| matches!(b, 0xc0 | 0xc1))
    };
    if overlong(&once) || overlong(&twice) {
        return Err(PathProblem::Ambiguous(format!(
            "an overlong UTF-8 form ({raw:?})"
        )));
    }
    Ok(())
}

/// Normalises an origin-form request path (without the query): see the
/// [module documentation](self). Deterministic and idempotent: the
/// normalised path's text normalises to itself.
pub fn normalize_path(path: &str) -> Result<NormalPath, PathProblem> {
    let Some(rest) = path.strip_prefix('/') else {
        return Err(PathProblem::NotAbsolute);
    };
    let mut segments: Vec<String> = Vec::new();
    let mut trailing_slash = false;
    for raw in rest.split('/') {
        ambiguous(raw)?;
        let (seg, decoded) = normal_segment(raw)?;
        // What is checked is what is sent: decoding the escapes of
        // unreserved bytes may make one (`%25%32%65` is `%252e`).
        ambiguous(&seg)?;
        trailing_slash = false;
        match seg.as_str() {
            "." | ".." if decoded => return Err(PathProblem::EncodedDot(raw.to_string())),
            "" | "." => trailing_slash = true,
            ".." => {
                if segments.pop().is_none() {
                    return Err(PathProblem::Outside);
                }
                trailing_slash = true;
            }
            _ => segments.push(seg),
        }
    }
    let trailing_slash = trailing_slash && !segments.is_empty();
    Ok(NormalPath {
        segments,
        trailing_slash,
    })
}

/// The methods a rule admits.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Methods {
    Any,
    /// Upper case, sorted, without duplicates.
    Listed(Vec<String>),
}

/// One segment of a path pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
enum PatternSegment {
    /// Exactly this (normalised) segment, kept with `*` for `%2A`
    /// ([`star_canonical`]); written with `%2A` for each `*`, so that a
    /// literal `*` or `**` is never read back as a wildcard.
    Literal(String),
    /// `*`: any one segment.
    One,
    /// `**`: any number of segments, none included.
    Any,
}

/// A per-request egress rule: `METHODS https://HOST[:PORT]/PATH-PATTERN`.
///
/// Methods are HTTP tokens separated by commas (case-insensitive, kept upper
/// case) or `*` for any. In the path pattern a segment `*` matches any one
/// segment and `**` any number of segments (none included); other segments
/// match the request's normalised segment exactly (escapes of unreserved
/// characters decoded on both sides). A literal `*` is written `%2A` (a
/// segment that is `*` or `**` is a wildcard, and `*` within a segment is
/// refused); it matches a request's `*` and `%2A` alike, and a rule prints
/// every literal `*` so, so that the printed rule parses back to itself. The query string is not matched. A
/// pattern ending in `/` matches only paths ending in `/`; one ending in
/// `/**` matches the directory itself and everything beneath it.
///
/// ```
/// use sandbox_core::RequestRule;
/// let rule: RequestRule = "GET,HEAD https://pkgs.example.com/simple/**".parse().unwrap();
/// assert!(rule.admits("GET", "pkgs.example.com", 443, "/simple/requests/").unwrap());
/// assert!(!rule.admits("POST", "pkgs.example.com", 443, "/simple/requests/").unwrap());
/// assert!(!rule.admits("GET", "pkgs.example.com", 443, "/simple/../private").unwrap());
/// assert!(rule.admits("GET", "pkgs.example.com", 443, "/simple/a/%2e%2e/b").is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRule {
    methods: Methods,
    host: String,
    port: u16,
    pattern: Vec<PatternSegment>,
    trailing_slash: bool,
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Whether `method` is a plain request method: upper-case ASCII letters
/// and `-` (`GET`, `M-SEARCH`, `VERSION-CONTROL`), starting with a letter,
/// at most 32 bytes. Every method real clients send is one; the egress
/// proxy refuses a request with any other on an intercepted host (`*`
/// would read as "any method" in a rule, a comma as a list) and proposes
/// no rule for one ([`RequestRule::exact`]).
pub fn plain_method(method: &str) -> bool {
    method.len() <= 32
        && method
            .as_bytes()
            .first()
            .is_some_and(u8::is_ascii_uppercase)
        && method.bytes().all(|b| b.is_ascii_uppercase() || b == b'-')
}

fn parse_methods(text: &str) -> Result<Methods, RequestRuleError> {
    if text == "*" {
        return Ok(Methods::Any);
    }
    let mut list = Vec::new();
    for m in text.split(',') {
        let m = m.trim();
        if m.is_empty() || m == "*" || !m.bytes().all(is_tchar) {
            return Err(RequestRuleError::Method(m.to_string()));
        }
        list.push(m.to_ascii_uppercase());
    }
    list.sort();
    list.dedup();
    Ok(Methods::Listed(list))
}

/// A lower-case host name (no IP literal, no wildcard) through the egress
/// rule parser's checks.
fn parse_host_name(host: &str, port: u16) -> Result<String, String> {
    if host.starts_with("*.") || host.starts_with('[') {
        return Err("write one exact host name".into());
    }
    match format!("{host}:{port}").parse::<EgressRule>() {
        Ok(EgressRule::Name(rule)) if !rule.is_wildcard() => Ok(rule.name().to_string()),
        Ok(_) => Err("write one exact host name".into()),
        Err(e) => Err(e.to_string()),
    }
}

fn parse_pattern(path: &str) -> Result<(Vec<PatternSegment>, bool), RequestRuleError> {
    let bad = |why: String| RequestRuleError::Path {
        path: path.to_string(),
        why,
    };
    if path.contains(['?', '#']) {
        return Err(bad("a pattern holds no query or fragment".into()));
    }
    let rest = path.strip_prefix('/').unwrap_or(path);
    let mut segments = Vec::new();
    let raw: Vec<&str> = if rest.is_empty() {
        Vec::new()
    } else {
        rest.split('/').collect()
    };
    let mut trailing_slash = false;
    for (i, seg) in raw.iter().enumerate() {
        let last = i + 1 == raw.len();
        match *seg {
            "" if last => trailing_slash = true,
            "" => return Err(bad("empty segment ('//')".into())),
            "." | ".." => return Err(bad("'.' and '..' segments are not allowed".into())),
            "*" => segments.push(PatternSegment::One),
            "**" => segments.push(PatternSegment::Any),
            s if s.contains('*') => {
                return Err(bad(format!(
                    "{s:?}: '*' and '**' stand only as whole segments"
                )))
            }
            s => {
                let (norm, decoded) = normal_segment(s).map_err(|e| bad(e.to_string()))?;
                if decoded && (norm == "." || norm == "..") {
                    return Err(bad("'.' and '..' segments are not allowed".into()));
                }
                segments.push(PatternSegment::Literal(star_canonical(&norm).into_owned()));
            }
        }
    }
    if trailing_slash && matches!(segments.last(), Some(PatternSegment::Any)) {
        return Err(bad("'**/' is written '**'".into()));
    }
    Ok((segments, trailing_slash))
}

/// A normalised segment with each `%2A` (an escaped `*`) written `*`:
/// the form literal pattern segments are kept and compared in, so that a
/// rule's `%2A` (how a literal `*` is written in a pattern) matches a
/// request's `*` and `%2A` alike. In a normalised segment every `%` begins
/// a three-byte escape with upper-case hex, so `%2A` is never part of
/// another escape (`%252A` is `%25` then `2A`).
fn star_canonical(seg: &str) -> std::borrow::Cow<'_, str> {
    if seg.contains("%2A") {
        std::borrow::Cow::Owned(seg.replace("%2A", "*"))
    } else {
        std::borrow::Cow::Borrowed(seg)
    }
}

/// Whether the literal `lit` (canonical, [`star_canonical`]) is the
/// request's normalised segment `seg`.
fn literal_is(lit: &str, seg: &str) -> bool {
    lit == seg || (seg.contains("%2A") && lit == star_canonical(seg))
}

/// Whether `pattern` matches `segs` entirely: wildcard matching with
/// backtracking only to the last `**` (linear in segments per `**`, never
/// exponential, whatever a request holds).
fn matches(pattern: &[PatternSegment], segs: &[String]) -> bool {
    let (mut p, mut s) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while s < segs.len() {
        match pattern.get(p) {
            Some(PatternSegment::Any) => {
                star = Some((p, s));
                p += 1;
                continue;
            }
            Some(PatternSegment::One) => {
                p += 1;
                s += 1;
                continue;
            }
            Some(PatternSegment::Literal(l)) if literal_is(l, &segs[s]) => {
                p += 1;
                s += 1;
                continue;
            }
            _ => {}
        }
        match star {
            Some((sp, ss)) => {
                p = sp + 1;
                s = ss + 1;
                star = Some((sp, ss + 1));
            }
            None => return false,
        }
    }
    pattern[p..].iter().all(|x| *x == PatternSegment::Any)
}

impl RequestRule {
    /// The rule admitting exactly `method` on `host:port` at `path` (a
    /// normalised path): what a refusal proposes. `None` for a method that
    /// is not [`plain_method`]: `*` reads as any method in a rule, a comma
    /// as a list, a lower-case one as its upper case (a rule admitting
    /// other methods than the one refused, or not that one).
    pub fn exact(method: &str, host: &str, port: u16, path: &NormalPath) -> Option<RequestRule> {
        if !plain_method(method) {
            return None;
        }
        let methods = Methods::Listed(vec![method.to_string()]);
        let host = parse_host_name(host, port).ok()?;
        Some(RequestRule {
            methods,
            host,
            port,
            pattern: path
                .segments
                .iter()
                .map(|s| PatternSegment::Literal(star_canonical(s).into_owned()))
                .collect(),
            trailing_slash: path.trailing_slash,
        })
    }

    /// The host (lower case) whose requests this rule governs.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The port (443 unless the pattern names one).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Whether the rule admits `method` (case-sensitive, as HTTP methods
    /// are) on a normalised path of `host:port`.
    pub fn admits_normal(&self, method: &str, host: &str, port: u16, path: &NormalPath) -> bool {
        let method_ok = match &self.methods {
            Methods::Any => true,
            Methods::Listed(list) => list.iter().any(|m| m == method),
        };
        let slash_ok = !self.trailing_slash || path.trailing_slash || path.segments.is_empty();
        method_ok
            && self.port == port
            && host
                .strip_suffix('.')
                .unwrap_or(host)
                .eq_ignore_ascii_case(&self.host)
            && slash_ok
            && matches(&self.pattern, &path.segments)
    }

    /// [`RequestRule::admits_normal`] on a raw path (without the query),
    /// normalised first: an error when the path is refused whatever the
    /// rules.
    pub fn admits(
        &self,
        method: &str,
        host: &str,
        port: u16,
        path: &str,
    ) -> Result<bool, PathProblem> {
        Ok(self.admits_normal(method, host, port, &normalize_path(path)?))
    }
}

impl fmt::Display for RequestRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.methods {
            Methods::Any => f.write_str("*")?,
            Methods::Listed(list) => f.write_str(&list.join(","))?,
        }
        write!(f, " https://{}", self.host)?;
        if self.port != 443 {
            write!(f, ":{}", self.port)?;
        }
        if self.pattern.is_empty() {
            return f.write_str("/");
        }
        for seg in &self.pattern {
            match seg {
                // A literal `*` is written `%2A`: `*` and `**` standing
                // alone are wildcards, and `*` within a segment is refused.
                PatternSegment::Literal(s) => write!(f, "/{}", s.replace('*', "%2A"))?,
                PatternSegment::One => f.write_str("/*")?,
                PatternSegment::Any => f.write_str("/**")?,
            }
        }
        if self.trailing_slash {
            f.write_str("/")?;
        }
        Ok(())
    }
}

impl FromStr for RequestRule {
    type Err = RequestRuleError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let text = text.trim();
        let Some((methods, url)) = text.split_once(char::is_whitespace) else {
            return Err(RequestRuleError::Shape(text.to_string()));
        };
        RequestRule::from_parts(methods, url.trim())
    }
}

impl RequestRule {
    fn from_parts(methods: &str, url: &str) -> Result<RequestRule, RequestRuleError> {
        let methods = parse_methods(methods)?;
        let bad_url = || RequestRuleError::Url(url.to_string());
        let scheme_end = url.find("://").ok_or_else(bad_url)?;
        if !url[..scheme_end].eq_ignore_ascii_case("https") {
            return Err(bad_url());
        }
        let rest = &url[scheme_end + 3..];
        let end = rest.find('/').unwrap_or(rest.len());
        let (authority, path) = rest.split_at(end);
        if authority.is_empty() || authority.contains('@') {
            return Err(bad_url());
        }
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) => {
                let digits = !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
                let port = p
                    .parse::<u16>()
                    .ok()
                    .filter(|&p| digits && p != 0)
                    .ok_or_else(bad_url)?;
                (h, port)
            }
            None => (authority, 443),
        };
        let host = parse_host_name(host, port).map_err(|why| RequestRuleError::Host {
            url: url.to_string(),
            host: host.to_string(),
            why,
        })?;
        let (pattern, trailing_slash) = parse_pattern(if path.is_empty() { "/" } else { path })?;
        Ok(RequestRule {
            methods,
            host,
            port,
            pattern,
            trailing_slash,
        })
    }
}

/// The configuration form: `{ methods = ["GET", "HEAD"], url = "https://..." }`
/// (`[[sandbox.policy.requests]]`).
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RequestRuleTable {
    methods: Vec<String>,
    url: String,
}

impl TryFrom<RequestRuleTable> for RequestRule {
    type Error = RequestRuleError;
    fn try_from(t: RequestRuleTable) -> Result<Self, Self::Error> {
        RequestRule::from_parts(&t.methods.join(","), &t.url)
    }
}

impl From<&RequestRule> for RequestRuleTable {
    fn from(rule: &RequestRule) -> Self {
        let text = rule.to_string();
        let (methods, url) = text.split_once(' ').unwrap_or((&text, ""));
        RequestRuleTable {
            methods: methods.split(',').map(str::to_string).collect(),
            url: url.to_string(),
        }
    }
}

impl Serialize for RequestRule {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        RequestRuleTable::from(self).serialize(s)
    }
}

impl<'de> Deserialize<'de> for RequestRule {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let table = RequestRuleTable::deserialize(d)?;
        RequestRule::try_from(table).map_err(serde::de::Error::custom)
    }
}

/// Where the runner reads a secret's value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum SecretSource {
    /// The runner's environment variable of the secret's name.
    Env,
    /// A file (its contents, one trailing newline removed).
    File(PathBuf),
}

/// A credential the proxy injects: `NAME@HOST[,HOST...]` (from the runner's
/// `$NAME`) or `NAME=file:PATH@HOST[,HOST...]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "SecretTable", into = "SecretTable")]
pub struct SecretSpec {
    name: String,
    source: SecretSource,
    hosts: Vec<String>,
}

/// The configuration form: `{ name = "TOKEN", hosts = ["api.example.com"],
/// file = "/path" }` (`file` optional).
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SecretTable {
    name: String,
    hosts: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    file: Option<PathBuf>,
}

impl TryFrom<SecretTable> for SecretSpec {
    type Error = RequestRuleError;
    fn try_from(t: SecretTable) -> Result<Self, Self::Error> {
        let spec = format!("{}@{}", t.name, t.hosts.join(","));
        let source = t.file.map_or(SecretSource::Env, SecretSource::File);
        SecretSpec::new(&spec, &t.name, source, &t.hosts.join(","))
    }
}

impl From<SecretSpec> for SecretTable {
    fn from(s: SecretSpec) -> Self {
        SecretTable {
            name: s.name,
            hosts: s.hosts,
            file: match s.source {
                SecretSource::Env => None,
                SecretSource::File(p) => Some(p),
            },
        }
    }
}

impl SecretSpec {
    fn new(
        spec: &str,
        name: &str,
        source: SecretSource,
        hosts: &str,
    ) -> Result<SecretSpec, RequestRuleError> {
        let bad = |why: String| RequestRuleError::Secret {
            spec: spec.to_string(),
            why,
        };
        let name_ok = name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !name_ok {
            return Err(bad(format!(
                "{name:?} is not an environment variable name (letters, digits, '_')"
            )));
        }
        if let SecretSource::File(p) = &source {
            if !p.is_absolute() {
                return Err(bad(format!("{} is not an absolute path", p.display())));
            }
        }
        let mut list = Vec::new();
        for host in hosts.split(',') {
            let host = host.trim();
            let (h, port) = match host.rsplit_once(':') {
                Some((h, p)) => (
                    h,
                    Some(
                        p.parse::<u16>()
                            .ok()
                            .filter(|p| *p != 0)
                            .ok_or_else(|| bad(format!("bad port in {host:?}")))?,
                    ),
                ),
                None => (host, None),
            };
            let name = parse_host_name(h, port.unwrap_or(443))
                .map_err(|why| bad(format!("{host:?}: {why}")))?;
            // A port given binds the secret to that port of the host; none,
            // to every intercepted port of it.
            let h = match port {
                Some(port) => format!("{name}:{port}"),
                None => name,
            };
            if !list.contains(&h) {
                list.push(h);
            }
        }
        Ok(SecretSpec {
            name: name.to_string(),
            source,
            hosts: list,
        })
    }

    /// The environment variable name the command sees (with a placeholder).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Where the runner reads the value.
    pub fn source(&self) -> &SecretSource {
        &self.source
    }

    /// The hosts (lower case) whose requests may carry it: `HOST` (every
    /// intercepted port of it) or `HOST:PORT` (that port only).
    pub fn hosts(&self) -> &[String] {
        &self.hosts
    }
}

impl FromStr for SecretSpec {
    type Err = RequestRuleError;

    fn from_str(spec: &str) -> Result<Self, Self::Err> {
        let bad = |why: &str| RequestRuleError::Secret {
            spec: spec.to_string(),
            why: why.to_string(),
        };
        let (left, hosts) = spec
            .rsplit_once('@')
            .ok_or_else(|| bad("no '@HOST' names where the secret may go"))?;
        let (name, source) = match left.split_once('=') {
            None => (left, SecretSource::Env),
            Some((name, src)) => {
                let path = src
                    .strip_prefix("file:")
                    .ok_or_else(|| bad("the only source besides the environment is file:PATH"))?;
                (name, SecretSource::File(PathBuf::from(path)))
            }
        };
        SecretSpec::new(spec, name, source, hosts)
    }
}

impl fmt::Display for SecretSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)?;
        if let SecretSource::File(p) = &self.source {
            write!(f, "=file:{}", p.display())?;
        }
        write!(f, "@{}", self.hosts.join(","))
    }
}

/// Why [`shell_word`] gives no word for a value: it holds a character no
/// pasted flag carries safely: a control character (a newline would end
/// the pasted command there), one that reorders or hides text (as
/// [`crate::terminal_safe`] escapes), or a backslash (printed output shows
/// it escaped, doubled, so the flag pasted from it would name another
/// value).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub struct Unquotable(pub char);

impl fmt::Display for Unquotable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == '\\' {
            f.write_str(
                "it holds a backslash, which printed output shows escaped (doubled), so a pasted \
                 flag would name another value",
            )
        } else {
            write!(
                f,
                "it holds U+{:04X}, a control or invisible character that a pasted flag cannot \
                 carry safely",
                u32::from(self.0)
            )
        }
    }
}

/// Characters a word may hold bare: none of them means anything to a POSIX
/// shell (or zsh) anywhere in a word (no `~`, `*`, `?`, `[`, `#`, `!`, `$`,
/// `=`, quote, space or separator).
fn bare(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '/' | ':' | ',' | '@' | '%' | '+' | '-')
}

/// `text` as exactly one POSIX shell word that reads back as `text`: bare
/// when every character is one no shell acts on, else in single quotes
/// (inside which nothing is special to `sh`, `bash`, `zsh` or `dash`,
/// history expansion included), each `'` written `'"'"'` (closed, a `'`
/// in double quotes, reopened). The one quoting of every flag the sandbox
/// proposes ([`flag`]). Its words hold no backslash and nothing
/// [`crate::terminal_safe`] escapes, so they print as they paste. A value
/// holding a control character, one that reorders or hides text, or a
/// backslash is not quoted: no printed word shows it as it is
/// ([`Unquotable`]).
///
/// ```
/// use sandbox_core::request::shell_word;
/// assert_eq!(shell_word("example.com:443").unwrap(), "example.com:443");
/// assert_eq!(shell_word("GET https://h.example/a'b").unwrap(), r#"'GET https://h.example/a'"'"'b'"#);
/// assert!(shell_word("a\nb").is_err());
/// ```
pub fn shell_word(text: &str) -> Result<String, Unquotable> {
    let mut buf = [0u8; 4];
    if let Some(c) = text
        .chars()
        .find(|&c| crate::terminal_safe(c.encode_utf8(&mut buf)).len() != c.len_utf8())
    {
        return Err(Unquotable(c));
    }
    if !text.is_empty() && text.chars().all(bare) {
        return Ok(text.to_owned());
    }
    let mut out = String::with_capacity(text.len() + 2);
    out.push('\'');
    for c in text.chars() {
        if c == '\'' {
            out.push_str(r#"'"'"'"#);
        } else {
            out.push(c);
        }
    }
    out.push('\'');
    Ok(out)
}

/// The flag `name` with the value `value` as one shell word
/// ([`shell_word`]): `--allow-request 'GET https://h.example/x'`,
/// `--allow-net example.com:443`.
pub fn flag(name: &str, value: &str) -> Result<String, Unquotable> {
    Ok(format!("{name} {}", shell_word(value)?))
}

/// The value of a word [`shell_word`] wrote (bare characters, single-quoted
/// runs and `"'"`); `None` for any other text.
pub fn shell_unword(word: &str) -> Option<String> {
    let mut out = String::with_capacity(word.len());
    let mut rest = word;
    while let Some(c) = rest.chars().next() {
        if let Some(quoted) = rest.strip_prefix('\'') {
            let end = quoted.find('\'')?;
            out.push_str(&quoted[..end]);
            rest = &quoted[end + 1..];
        } else if let Some(after) = rest.strip_prefix(r#""'""#) {
            out.push('\'');
            rest = after;
        } else if bare(c) {
            out.push(c);
            rest = &rest[c.len_utf8()..];
        } else {
            return None;
        }
    }
    (!word.is_empty()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn n(p: &str) -> Result<String, PathProblem> {
        normalize_path(p).map(|p| p.to_string())
    }

    #[test]
    fn paths_normalise() {
        assert_eq!(n("/").unwrap(), "/");
        assert_eq!(n("//").unwrap(), "/");
        assert_eq!(n("/a//b").unwrap(), "/a/b");
        assert_eq!(n("/a/./b/").unwrap(), "/a/b/");
        assert_eq!(n("/a/b/..").unwrap(), "/a/");
        assert_eq!(n("/a/b/../c").unwrap(), "/a/c");
        assert_eq!(n("/%61%2D%7e").unwrap(), "/a-~");
        assert_eq!(
            n("/a%2fb").unwrap_err(),
            PathProblem::EncodedSeparator("%2f".into())
        );
        assert_eq!(
            n("/a%5Cb").unwrap_err(),
            PathProblem::EncodedSeparator("%5C".into())
        );
        assert_eq!(n("/a%20b%c3%a9").unwrap(), "/a%20b%C3%A9");
        assert_eq!(n("/..").unwrap_err(), PathProblem::Outside);
        assert_eq!(n("/a/../..").unwrap_err(), PathProblem::Outside);
        assert_eq!(
            n("/a/%2e%2e/b").unwrap_err(),
            PathProblem::EncodedDot("%2e%2e".into())
        );
        assert_eq!(
            n("/a/.%2E/b").unwrap_err(),
            PathProblem::EncodedDot(".%2E".into())
        );
        assert_eq!(
            n("/a/%2e").unwrap_err(),
            PathProblem::EncodedDot("%2e".into())
        );
        assert_eq!(n("/a%2").unwrap_err(), PathProblem::BadEscape("%2".into()));
        assert_eq!(
            n("/a%zz").unwrap_err(),
            PathProblem::BadEscape("%zz".into())
        );
        assert_eq!(n("/a%00").unwrap_err(), PathProblem::Byte(0));
        assert_eq!(n("/a\\b").unwrap_err(), PathProblem::Byte(b'\\'));
        assert_eq!(n("/a b").unwrap_err(), PathProblem::Byte(b' '));
        assert_eq!(n("a").unwrap_err(), PathProblem::NotAbsolute);
        // `.x` and `..x` are ordinary names.
        assert_eq!(n("/.x/..y/%2ex").unwrap(), "/.x/..y/.x");
    }

    #[test]
    fn segments_origins_read_as_others_are_refused_beside_their_twins() {
        // A dot segment with parameters: Tomcat and Spring drop `;...` and
        // climb (`/v1/..;/admin` reaches `/admin` behind a `/v1/**` rule).
        for raw in [
            "/v1/..;/v2",
            "/v1/.;x/v2",
            "/v1/%2e%2e;/v2",
            "/v1/.%2E;a=b/v2",
        ] {
            let e = n(raw).unwrap_err();
            assert!(
                matches!(&e, PathProblem::Ambiguous(w) if w.starts_with("a dot segment with parameters")),
                "{raw}: {e}"
            );
        }
        assert_eq!(n("/v1/a;b/...;x/c").unwrap(), "/v1/a;b/...;x/c");
        assert_eq!(n("/v1;x/../v2").unwrap(), "/v2");
        // An escaped `%` before a dot or separator: decoded twice, a dot
        // segment or a separator.
        for raw in ["/v1/%252e%252e/v2", "/v1/%252F", "/a%255cb", "/a%25252e"] {
            let e = n(raw).unwrap_err();
            assert!(
                matches!(&e, PathProblem::Ambiguous(w) if w.starts_with("an escaped '%'")),
                "{raw}: {e}"
            );
        }
        assert_eq!(n("/100%25/a%2541").unwrap(), "/100%25/a%2541");
        // The same forms with their hex digits escaped: normalising decodes
        // the digits (unreserved) and would send the form refused above.
        for raw in [
            "/simple/%25%32%65%25%32%65/admin",
            "/simple/%25%32%65%25%32%65/%25%32%65%25%32%65/admin",
            "/simple/..%25%32%66admin",
            "/simple/..%25%32%46admin",
            "/simple/..%25%35%63admin",
            "/simple/%25%32%35%32%65",
            "/simple/%25%32%65%2e",
        ] {
            let e = n(raw).unwrap_err();
            assert!(
                matches!(&e, PathProblem::Ambiguous(w) if w.starts_with("an escaped '%'")),
                "{raw}: {e}"
            );
        }
        // Twins: an escaped '%' before other text stays admitted, its
        // digits escaped or not, and normalises to itself.
        assert_eq!(n("/simple/100%25/x").unwrap(), "/simple/100%25/x");
        assert_eq!(n("/simple/100%25%34%31/x").unwrap(), "/simple/100%2541/x");
        assert_eq!(n("/simple/100%2541/x").unwrap(), "/simple/100%2541/x");
        assert_eq!(n("/simple/%25%33%30").unwrap(), "/simple/%2530");
        // Overlong UTF-8 (`%C0%AE` is '.' to a lax decoder).
        for raw in [
            "/v1/%c0%ae%c0%ae/v2",
            "/%C1%9C",
            "/%e0%80%ae",
            "/%f0%80%80%ae",
            "/a%c0",
            // Decoded twice by the origin: `%c0%ae` then '.'.
            "/simple/%25c0%25ae%25c0%25ae/admin",
            "/simple/%25C0%25AE",
            "/simple/%25%63%30%25%61%65",
            "/%25e0%2580%25ae",
        ] {
            let e = n(raw).unwrap_err();
            assert!(
                matches!(&e, PathProblem::Ambiguous(w) if w.starts_with("an overlong UTF-8")),
                "{raw}: {e}"
            );
        }
        assert_eq!(
            n("/%c3%a9/%e0%a4%85/%f0%9f%98%80").unwrap(),
            "/%C3%A9/%E0%A4%85/%F0%9F%98%80"
        );
    }

    fn rule(text: &str) -> RequestRule {
        text.parse().unwrap()
    }

    #[test]
    fn rules_parse_and_print() {
        let r = rule("get,HEAD,get https://Pkgs.Example.com/simple/**");
        assert_eq!(r.to_string(), "GET,HEAD https://pkgs.example.com/simple/**");
        assert_eq!((r.host(), r.port()), ("pkgs.example.com", 443));
        let r = rule("* https://api.example.com:8443");
        assert_eq!(r.to_string(), "* https://api.example.com:8443/");
        assert_eq!(r.port(), 8443);
        assert_eq!(
            rule("POST https://h.example/a/*/c/").to_string(),
            "POST https://h.example/a/*/c/"
        );
        for (bad, needle) in [
            ("GET", "METHODS URL-PATTERN"),
            ("G(T https://h.example/", "\"G(T\""),
            ("GET http://h.example/", "only https"),
            ("GET https://10.0.0.1/", "\"10.0.0.1\""),
            ("GET https://*.example.com/", "\"*.example.com\""),
            ("GET https://h.example:0/", "h.example:0"),
            ("GET https://u@h.example/", "u@h.example"),
            ("GET https://h.example/a/../b", "'..'"),
            ("GET https://h.example/a//b", "'//'"),
            ("GET https://h.example/a*", "whole segments"),
            ("GET https://h.example/a?x", "query"),
            ("GET https://h.example/a%2fb", "encoded '/'"),
            ("GET,,HEAD https://h.example/", "\"\""),
        ] {
            let e = bad.parse::<RequestRule>().unwrap_err().to_string();
            assert!(e.contains(needle), "{bad}: {e}");
        }
    }

    #[test]
    fn rules_match_methods_hosts_and_paths() {
        let r = rule("GET,HEAD https://pkgs.example.com/simple/**");
        let a = |m: &str, h: &str, port: u16, p: &str| r.admits(m, h, port, p);
        assert!(a("GET", "pkgs.example.com", 443, "/simple").unwrap());
        assert!(a("GET", "pkgs.example.com", 443, "/simple/").unwrap());
        assert!(a("HEAD", "PKGS.example.com.", 443, "/simple/x/y").unwrap());
        assert!(a("GET", "pkgs.example.com", 443, "/%73imple/x").unwrap());
        assert!(a("GET", "pkgs.example.com", 443, "//simple//x").unwrap());
        assert!(!a("get", "pkgs.example.com", 443, "/simple/x").unwrap());
        assert!(!a("POST", "pkgs.example.com", 443, "/simple/x").unwrap());
        assert!(!a("GET", "pkgs.example.com", 8443, "/simple/x").unwrap());
        assert!(!a("GET", "other.example.com", 443, "/simple/x").unwrap());
        assert!(!a("GET", "pkgs.example.com", 443, "/simplex").unwrap());
        assert!(!a("GET", "pkgs.example.com", 443, "/simple/../private").unwrap());
        assert!(!a("GET", "pkgs.example.com", 443, "/private").unwrap());
        assert!(a("GET", "pkgs.example.com", 443, "/simple/%2e%2e/private").is_err());
        assert!(a("GET", "pkgs.example.com", 443, "/simple%2f..%2fprivate").is_err());
        let one = rule("GET https://h.example/a/*/c/");
        assert!(one.admits("GET", "h.example", 443, "/a/b/c/").unwrap());
        assert!(!one.admits("GET", "h.example", 443, "/a/b/c").unwrap());
        assert!(!one.admits("GET", "h.example", 443, "/a/c/").unwrap());
        let mid = rule("* https://h.example/a/**/z");
        assert!(mid.admits("DELETE", "h.example", 443, "/a/z").unwrap());
        assert!(mid.admits("PUT", "h.example", 443, "/a/b/c/z").unwrap());
        assert!(!mid.admits("PUT", "h.example", 443, "/a/b/c/z/y").unwrap());
        let root = rule("GET https://h.example/");
        assert!(root.admits("GET", "h.example", 443, "/").unwrap());
        assert!(!root.admits("GET", "h.example", 443, "/x").unwrap());
    }

    #[test]
    fn only_plain_methods_get_a_proposal() {
        let path = normalize_path("/upload").unwrap();
        for method in ["GET", "PUT", "M-SEARCH", "VERSION-CONTROL"] {
            assert!(plain_method(method), "{method}");
            let r = RequestRule::exact(method, "h.example", 443, &path).unwrap();
            assert_eq!(r.to_string(), format!("{method} https://h.example/upload"));
        }
        for method in [
            "*",
            "",
            "get",
            "Get",
            "GET,POST",
            "-X",
            "G*T",
            "A1",
            "SANDBOX_SECRET_00",
        ] {
            assert!(!plain_method(method), "{method}");
            assert!(RequestRule::exact(method, "h.example", 443, &path).is_none());
        }
        assert!(!plain_method(&"A".repeat(33)));
    }

    #[test]
    fn an_exact_rule_admits_what_was_refused() {
        let path = normalize_path("/a/./b%41/").unwrap();
        let r = RequestRule::exact("PUT", "h.example", 8443, &path).unwrap();
        assert_eq!(r.to_string(), "PUT https://h.example:8443/a/bA/");
        assert!(r.admits_normal("PUT", "h.example", 8443, &path));
        let reparsed: RequestRule = r.to_string().parse().unwrap();
        assert_eq!(reparsed, r);
    }

    /// F2: the exact rule for a request whose segment is a literal `*` or
    /// `**` (or holds `*`) prints it `%2A`, parses back to itself, and
    /// admits that request alone; its twin, the wildcard written as such,
    /// admits the subtree.
    #[test]
    fn an_exact_rule_for_a_literal_star_is_no_wildcard() {
        for raw in [
            "/v1/**",
            "/v1/*",
            "/v1/*/x",
            "/a*b/**c",
            "/v1/%2a",
            "/v1/%2A%2A",
        ] {
            let path = normalize_path(raw).unwrap();
            let r = RequestRule::exact("GET", "h.example", 443, &path).unwrap();
            let text = r.to_string();
            assert!(!text.contains('*'), "{raw}: {text}");
            let back: RequestRule = text.parse().unwrap();
            assert_eq!(back, r, "{raw}: {text}");
            assert!(back.admits("GET", "h.example", 443, raw).unwrap(), "{raw}");
            assert!(
                !back
                    .admits("GET", "h.example", 443, "/v1/admin/delete")
                    .unwrap(),
                "{raw}"
            );
            assert!(
                !back.admits("GET", "h.example", 443, "/v1/x").unwrap(),
                "{raw}"
            );
        }
        let r = RequestRule::exact("GET", "h.example", 443, &normalize_path("/v1/**").unwrap());
        assert_eq!(r.unwrap().to_string(), "GET https://h.example/v1/%2A%2A");
        // `%2A` in a pattern is a literal `*`: it matches `*` and `%2A`.
        let lit = rule("GET https://h.example/v1/%2a");
        assert!(lit.admits("GET", "h.example", 443, "/v1/*").unwrap());
        assert!(lit.admits("GET", "h.example", 443, "/v1/%2A").unwrap());
        assert!(!lit.admits("GET", "h.example", 443, "/v1/x").unwrap());
        // The twin: a wildcard written as one admits the subtree.
        let glob = rule("GET https://h.example/v1/**");
        assert!(glob
            .admits("GET", "h.example", 443, "/v1/admin/delete")
            .unwrap());
    }

    /// F1: every value becomes one word that `sh` reads back as the value,
    /// whatever it holds; a value with a control or invisible character is
    /// not quoted at all. Twin: a plain value stays bare.
    #[test]
    fn shell_words_read_back_as_one_word_in_sh() {
        let hostile = [
            "GET https://api.example.com/v1/x';touch$IFS/tmp/PWNED;''",
            "x;touch$IFS/tmp/PWNED;#.example.com:443",
            "a$(touch${IFS}/tmp/PWNED2).example.com:443",
            "`id` \"q\" !! ~root *.rs ?[a] {a,b} & | < > # '\"'\"'",
            "'",
            "''",
            "-n",
            "",
            "/home/me/ünï côdé",
        ];
        for v in hostile {
            let word = shell_word(v).unwrap();
            assert_eq!(shell_unword(&word).as_deref(), Some(v), "{word}");
            // Printed (escaped for the terminal), it is the same word.
            assert_eq!(crate::terminal_safe(&word), word);
            for sh in ["sh", "bash", "zsh"] {
                let Ok(out) = std::process::Command::new(sh)
                    .arg("-c")
                    .arg(format!("printf '%s\\0' {word}"))
                    .output()
                else {
                    assert_ne!(sh, "sh", "no sh");
                    continue;
                };
                assert!(out.status.success(), "{sh} {word}");
                assert_eq!(out.stdout, format!("{v}\0").as_bytes(), "{sh} {word}");
            }
        }
        assert_eq!(shell_word("example.com:443").unwrap(), "example.com:443");
        assert_eq!(
            flag("--allow-request", "GET https://h.example/x").unwrap(),
            "--allow-request 'GET https://h.example/x'"
        );
        for bad in [
            "a\nb",
            "a\rb",
            "a\x1b]0;t\x07",
            "a\u{202e}b",
            "a\u{9b}b",
            "\x7f",
            "a\0",
            "a\\b",
        ] {
            assert!(shell_word(bad).is_err(), "{bad:?}");
            assert!(flag("--allow-net", bad).is_err(), "{bad:?}");
        }
        assert_eq!(shell_unword("a b"), None);
        assert_eq!(shell_unword("'a"), None);
    }

    #[test]
    fn config_tables_deny_unknown_fields() {
        let r: RequestRule =
            serde_json::from_str(r#"{"methods":["GET","HEAD"],"url":"https://h.example/x/**"}"#)
                .unwrap();
        assert_eq!(r.to_string(), "GET,HEAD https://h.example/x/**");
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            r#"{"methods":["GET","HEAD"],"url":"https://h.example/x/**"}"#
        );
        let e = serde_json::from_str::<RequestRule>(
            r#"{"methods":["GET"],"url":"https://h.example/","host":"x"}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("unknown field"), "{e}");
        let e =
            serde_json::from_str::<RequestRule>(r#"{"methods":["GET"],"url":"http://h.example/"}"#)
                .unwrap_err()
                .to_string();
        assert!(e.contains("http://h.example/"), "{e}");
        let s: SecretSpec =
            serde_json::from_str(r#"{"name":"TOKEN","hosts":["api.example.com"]}"#).unwrap();
        assert_eq!(s.to_string(), "TOKEN@api.example.com");
        assert!(
            serde_json::from_str::<SecretSpec>(r#"{"name":"T","hosts":["h.example"],"x":1}"#)
                .is_err()
        );
    }

    #[test]
    fn secrets_parse() {
        let s: SecretSpec = "GH_TOKEN@github.example,API.example.com".parse().unwrap();
        assert_eq!(s.name(), "GH_TOKEN");
        assert_eq!(s.hosts(), ["github.example", "api.example.com"]);
        // A port binds: kept, beside the same host without one.
        let s: SecretSpec = "T@API.example.com:8443,api.example.com".parse().unwrap();
        assert_eq!(s.hosts(), ["api.example.com:8443", "api.example.com"]);
        assert_eq!(s.to_string(), "T@api.example.com:8443,api.example.com");
        assert!("T@api.example.com:0".parse::<SecretSpec>().is_err());
        assert!("T@api.example.com:x".parse::<SecretSpec>().is_err());
        assert_eq!(s.source(), &SecretSource::Env);
        let s: SecretSpec = "T=file:/run/keys/t@x@h.example".parse().unwrap();
        assert_eq!(s.source(), &SecretSource::File("/run/keys/t@x".into()));
        assert_eq!(s.to_string(), "T=file:/run/keys/t@x@h.example");
        for (bad, needle) in [
            ("TOKEN", "'@HOST'"),
            ("1T@h.example", "\"1T\""),
            ("T=env:X@h.example", "file:PATH"),
            ("T=file:rel@h.example", "absolute"),
            ("T@10.0.0.1", "10.0.0.1"),
            ("T@*.example.com", "*.example.com"),
            ("T@", "\"\""),
        ] {
            let e = bad.parse::<SecretSpec>().unwrap_err().to_string();
            assert!(e.contains(needle), "{bad}: {e}");
        }
    }

    fn path_strategy() -> impl Strategy<Value = String> {
        let seg = prop_oneof![
            Just(String::new()),
            Just(".".to_string()),
            Just("..".to_string()),
            Just("%2e".to_string()),
            Just("%2F".to_string()),
            Just("%41".to_string()),
            Just("%c3%a9".to_string()),
            Just("%25".to_string()),
            Just("%25%32%65".to_string()),
            Just("%25c0%25ae".to_string()),
            "[a-zA-Z0-9._~%-]{1,6}",
            // Escapes of hex digits, of '%' and of dots, among plain bytes:
            // what normalising decodes may build an escape.
            proptest::collection::vec(
                prop_oneof![
                    Just("%25"),
                    Just("%2e"),
                    Just("%32"),
                    Just("%35"),
                    Just("%36"),
                    Just("%43"),
                    Just("%63"),
                    Just("%65"),
                    Just("%66"),
                    Just("%46"),
                    Just("2"),
                    Just("e"),
                    Just("c"),
                    Just("."),
                    Just("a"),
                ],
                1..6
            )
            .prop_map(|parts| parts.concat()),
        ];
        proptest::collection::vec(seg, 0..8).prop_map(|segs| format!("/{}", segs.join("/")))
    }

    fn literal_strategy() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("*".to_string()),
            Just("**".to_string()),
            Just("%2A".to_string()),
            Just("%2a%2A".to_string()),
            Just("a*b".to_string()),
            Just("'".to_string()),
            Just("%25".to_string()),
            Just("%".to_string()),
            Just(";$`!".to_string()),
            "[a-zA-Z0-9._~%*'!$&()+,;=:@-]{1,6}",
        ]
    }

    proptest! {
        /// F2: parse(display(rule)) == rule, for the exact rule of any
        /// path (literal `*`, `**`, quotes, escapes) and for patterns.
        #[test]
        fn rules_print_as_text_that_parses_back_to_them(
            segs in proptest::collection::vec(literal_strategy(), 0..6),
            slash in any::<bool>(),
            pat in proptest::collection::vec(prop_oneof![Just("a"), Just("*"), Just("**"), Just("%2A"), Just("x%2ay")], 0..5),
        ) {
            let raw = format!("/{}{}", segs.join("/"), if slash { "/" } else { "" });
            if let Ok(path) = normalize_path(&raw) {
                let r = RequestRule::exact("GET", "h.example", 8443, &path).unwrap();
                let text = r.to_string();
                let back: RequestRule = text.parse().unwrap();
                prop_assert_eq!(&back, &r);
                prop_assert!(back.admits_normal("GET", "h.example", 8443, &path));
                // No wildcard: the rule admits no other segment count.
                let mut longer = path.segments().to_vec();
                longer.push("zz".into());
                prop_assert!(!matches(&back.pattern, &longer));
                // Shell-quoted, it is one word that reads back.
                let word = shell_word(&text).unwrap();
                prop_assert_eq!(crate::terminal_safe(&word), word.as_str());
                prop_assert_eq!(shell_unword(&word), Some(text));
            }
            if let Ok(r) = format!("* https://h.example/{}", pat.join("/")).parse::<RequestRule>() {
                let back: RequestRule = r.to_string().parse().unwrap();
                prop_assert_eq!(back, r);
            }
        }

        /// Finding 4: the rule a refusal proposes admits the refused
        /// method and no other (any token, `*`, lists, lower case): for a
        /// method that is not plain there is no proposal at all.
        #[test]
        fn an_exact_rule_admits_only_its_method(
            method in prop_oneof![
                Just("*".to_string()),
                Just("GET,POST".to_string()),
                Just("get".to_string()),
                Just("M-SEARCH".to_string()),
                "[A-Z]{1,8}",
                "[!#$%&'*+.^_`|~0-9A-Za-z,-]{1,6}",
            ],
            other in prop_oneof![
                Just("GET".to_string()),
                Just("POST".to_string()),
                Just("DELETE".to_string()),
                Just("get".to_string()),
                "[!#$%&'*+.^_`|~0-9A-Za-z-]{1,6}",
            ],
        ) {
            let path = normalize_path("/upload").unwrap();
            match RequestRule::exact(&method, "h.example", 8443, &path) {
                Some(r) => {
                    prop_assert!(plain_method(&method));
                    prop_assert!(r.admits_normal(&method, "h.example", 8443, &path));
                    prop_assert_eq!(
                        r.admits_normal(&other, "h.example", 8443, &path),
                        other == method
                    );
                    // As text (what is proposed and stored), the same.
                    let back: RequestRule = r.to_string().parse().unwrap();
                    prop_assert_eq!(&back, &r);
                    prop_assert_eq!(
                        back.admits_normal(&other, "h.example", 8443, &path),
                        other == method
                    );
                }
                None => prop_assert!(!plain_method(&method)),
            }
        }

        #[test]
        fn shell_words_round_trip(text in "\\PC{0,24}") {
            if let Ok(word) = shell_word(&text) {
                prop_assert_eq!(shell_unword(&word), Some(text));
            }
        }

        #[test]
        fn normalising_is_idempotent_and_never_climbs(path in path_strategy()) {
            if let Ok(normal) = normalize_path(&path) {
                let text = normal.to_string();
                let again = normalize_path(&text).expect("a normal path normalises");
                prop_assert_eq!(&again, &normal);
                prop_assert_eq!(again.to_string(), text.clone());
                prop_assert!(!text.contains("//"));
                for seg in normal.segments() {
                    prop_assert!(seg != "." && seg != ".." && !seg.is_empty());
                    prop_assert!(!seg.to_ascii_lowercase().contains("%2f"));
                    // What is sent passes the checks the raw path did.
                    prop_assert!(ambiguous(seg).is_ok(), "{:?} from {:?}", seg, path);
                }
                // A rule for exactly the normal path admits the raw one.
                let r = RequestRule::exact("GET", "h.example", 443, &normal).unwrap();
                prop_assert!(r.admits("GET", "h.example", 443, &path).unwrap());
            }
        }

        #[test]
        fn matching_agrees_with_the_recursive_definition(
            pat in proptest::collection::vec(prop_oneof![Just("a"), Just("b"), Just("*"), Just("**")], 0..6),
            segs in proptest::collection::vec(prop_oneof![Just("a"), Just("b")], 0..7),
        ) {
            fn slow(p: &[PatternSegment], s: &[String]) -> bool {
                match p.split_first() {
                    None => s.is_empty(),
                    Some((PatternSegment::Any, rest)) => (0..=s.len()).any(|i| slow(rest, &s[i..])),
                    Some((PatternSegment::One, rest)) => !s.is_empty() && slow(rest, &s[1..]),
                    Some((PatternSegment::Literal(l), rest)) => s.first() == Some(l) && slow(rest, &s[1..]),
                }
            }
            let (pattern, _) = parse_pattern(&format!("/{}", pat.join("/"))).unwrap();
            let segs: Vec<String> = segs.iter().map(|s| s.to_string()).collect();
            prop_assert_eq!(matches(&pattern, &segs), slow(&pattern, &segs));
        }

        #[test]
        fn any_bytes_never_panic(path in "\\PC{0,40}") {
            let _ = normalize_path(&path);
        }

        #[test]
        fn a_prefix_rule_never_admits_a_path_that_climbs_out(
            tail in proptest::collection::vec(prop_oneof![Just(".."), Just("."), Just("x"), Just("")], 0..6)
        ) {
            let path = format!("/pub/{}", tail.join("/"));
            let r = rule("GET https://h.example/pub/**");
            match normalize_path(&path) {
                Ok(normal) => {
                    let inside = normal.segments().first().is_some_and(|s| s == "pub");
                    prop_assert_eq!(r.admits_normal("GET", "h.example", 443, &normal), inside);
                }
                Err(e) => prop_assert_eq!(e, PathProblem::Outside),
            }
        }
    }
}
