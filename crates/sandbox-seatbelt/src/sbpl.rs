//! A reader for the SBPL subset this crate generates, used to check profiles
//! structurally rather than by substring.
//!
//! Hand-written on purpose: SBPL is TinyScheme with a `#"..."` regex literal,
//! which general s-expression crates reject, and the subset needed here
//! (lists, symbols, strings, regexes, `;` comments) is a few dozen lines.

/// One s-expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sexp {
    /// `( ... )`.
    List(Vec<Sexp>),
    /// A symbol or number, e.g. `allow`, `file-read*`, `1`.
    Atom(String),
    /// A string literal, unescaped.
    Str(String),
    /// A regex literal `#"..."`, unescaped.
    Regex(String),
}

impl Sexp {
    /// The first atom of a list (`allow` in `(allow ...)`).
    pub fn head(&self) -> Option<&str> {
        match self {
            Sexp::List(items) => match items.first() {
                Some(Sexp::Atom(a)) => Some(a),
                _ => None,
            },
            _ => None,
        }
    }

    /// The items after the head of a list; empty for non-lists.
    pub fn args(&self) -> &[Sexp] {
        match self {
            Sexp::List(items) if !items.is_empty() => &items[1..],
            _ => &[],
        }
    }
}

/// Why a text is not a well-formed SBPL s-expression sequence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("SBPL parse error at byte {offset}: {message}")]
pub struct ParseError {
    /// Byte offset in the text.
    pub offset: usize,
    /// What was expected.
    pub message: String,
}

/// Parses `text` into its top-level forms.
pub fn parse(text: &str) -> Result<Vec<Sexp>, ParseError> {
    let mut reader = Reader {
        bytes: text.as_bytes(),
        text,
        pos: 0,
    };
    let mut forms = Vec::new();
    while reader.skip_space() {
        forms.push(reader.form()?);
    }
    Ok(forms)
}

struct Reader<'a> {
    bytes: &'a [u8],
    text: &'a str,
    pos: usize,
}

impl Reader<'_> {
    fn err<T>(&self, message: &str) -> Result<T, ParseError> {
        Err(ParseError {
            offset: self.pos,
            message: message.to_owned(),
        })
    }

    /// Skips whitespace and comments; false at end of input.
    fn skip_space(&mut self) -> bool {
        while let Some(&b) = self.bytes.get(self.pos) {
            match b {
                b' ' | b'\t' | b'\n' | b'\r' => self.pos += 1,
                b';' => {
                    while self.bytes.get(self.pos).is_some_and(|&b| b != b'\n') {
                        self.pos += 1;
                    }
                }
                _ => return true,
            }
        }
        false
    }

    fn form(&mut self) -> Result<Sexp, ParseError> {
        match self.bytes[self.pos] {
            b'(' => {
                self.pos += 1;
                let mut items = Vec::new();
                loop {
                    if !self.skip_space() {
                        return self.err("unclosed `(`");
                    }
                    if self.bytes[self.pos] == b')' {
                        self.pos += 1;
                        return Ok(Sexp::List(items));
                    }
                    items.push(self.form()?);
                }
            }
            b')' => self.err("unbalanced `)`"),
            b'"' => self.string().map(Sexp::Str),
            b'#' if self.bytes.get(self.pos + 1) == Some(&b'"') => {
                self.pos += 1;
                self.string().map(Sexp::Regex)
            }
            _ => {
                let start = self.pos;
                while self
                    .bytes
                    .get(self.pos)
                    .is_some_and(|b| !b" \t\r\n()\";".contains(b))
                {
                    self.pos += 1;
                }
                Ok(Sexp::Atom(self.text[start..self.pos].to_owned()))
            }
        }
    }

    /// Reads `"..."` starting at the opening quote, handling `\"` and `\\`.
    fn string(&mut self) -> Result<String, ParseError> {
        self.pos += 1;
        let mut out = String::new();
        let mut chars = self.text[self.pos..].char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '"' => {
                    self.pos += i + 1;
                    return Ok(out);
                }
                '\\' => match chars.next() {
                    Some((_, e)) => out.push(e),
                    None => break,
                },
                c => out.push(c),
            }
        }
        self.pos = self.bytes.len();
        self.err("unterminated string")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_forms_comments_strings_and_regexes() {
        let forms = parse(
            "(version 1)\n; c (\n(allow file-write-data (literal \"/a\\\"b\") (regex #\"^/x$\"))",
        )
        .unwrap();
        assert_eq!(forms.len(), 2);
        assert_eq!(forms[0].head(), Some("version"));
        assert_eq!(
            forms[1].args()[1],
            Sexp::List(vec![
                Sexp::Atom("literal".into()),
                Sexp::Str("/a\"b".into())
            ])
        );
        assert_eq!(forms[1].args()[2].args()[0], Sexp::Regex("^/x$".into()));
    }

    #[test]
    fn refuses_unbalanced_and_unterminated_input() {
        for bad in ["(allow", "(allow))", ")", "(allow \"x)", "(a #\"x"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}

/// Operations a generated profile may name.
pub const KNOWN_OPERATIONS: &[&str] = &[
    "default",
    "file-ioctl",
    "file-read*",
    "file-write*",
    "file-write-create",
    "file-write-data",
    "file-write-unlink",
    "ipc-posix-sem",
    "mach-lookup",
    "network-bind",
    "network-inbound",
    "network-outbound",
    "process-exec*",
    "process-fork",
    "process-info*",
    "signal",
    "sysctl-read",
    "system-socket",
    "user-preference-read",
];

/// The only path strings a generated profile body contains: fixed devices.
pub const DEVICE_LITERALS: &[&str] = &["/dev/null", "/dev/tty"];

/// The only other path string: mDNSResponder's socket (name resolution with
/// the network on; denied with it off).
pub const SOCKET_LITERALS: &[&str] = &["/private/var/run/mDNSResponder"];

/// Any path component `.git`, then (at any depth: `modules/NAME/`,
/// `worktrees/NAME/`) the files that make git run programs. Written without
/// backslashes (`[.]`), so no reader's escape rules can change it.
pub const GIT_CONFIG_REGEX: &str = "/[.]git/(.+/)?(config|config[.]worktree|commondir)$";
/// Hooks directories of any git directory, and everything in them.
pub const GIT_HOOKS_REGEX: &str = "/[.]git/(.+/)?hooks(/|$)";
/// A `.git` entry (made as a file or symlink, it names a git directory elsewhere).
pub const GIT_LINK_REGEX: &str = "/[.]git$";

/// The only regexes a generated profile body contains: the parts of git
/// directories that make git run programs, each paired with a write-path
/// parameter by `require-all` (a regex cannot take a parameter).
pub const GIT_REGEXES: &[&str] = &[GIT_CONFIG_REGEX, GIT_HOOKS_REGEX, GIT_LINK_REGEX];

/// The only sysctl name prefix a generated profile names: process arguments.
pub const SYSCTL_PREFIXES: &[&str] = &["kern.procargs"];

/// Whether a rule allows or denies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// `(allow ...)`.
    Allow,
    /// `(deny ...)`.
    Deny,
}

/// One `(allow|deny operation... filter...)` form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Allow or deny.
    pub action: Action,
    /// The operations, e.g. `file-write*`.
    pub operations: Vec<String>,
    /// The filters; empty means the rule applies unconditionally.
    pub filters: Vec<Sexp>,
}

impl Rule {
    /// Whether the rule names `operation`.
    pub fn has(&self, operation: &str) -> bool {
        self.operations.iter().any(|o| o == operation)
    }

    /// The parameter names the rule's filters reference, with their filter kind
    /// (`("subpath", "WRITE_PATH_0")`).
    pub fn param_filters(&self) -> Vec<(&str, &str)> {
        self.filters
            .iter()
            .filter_map(|f| match f.args() {
                [inner] if inner.head() == Some("param") => match inner.args() {
                    [Sexp::Str(name)] => Some((f.head()?, name.as_str())),
                    _ => None,
                },
                _ => None,
            })
            .collect()
    }
}

/// Parses a generated profile and checks its shape, returning its rules in order.
///
/// Checked: balanced forms; `(version 1)` then `(deny default)` first; only
/// `version`, `import`, `allow` and `deny` at top level; only
/// [`KNOWN_OPERATIONS`]; string literals only as parameter names, Apple
/// service names, the `bsd.sb` import, the fixed [`DEVICE_LITERALS`],
/// [`SOCKET_LITERALS`], [`SYSCTL_PREFIXES`] and [`GIT_REGEXES`], so no policy
/// path text appears in the body.
pub fn validate(text: &str) -> Result<Vec<Rule>, String> {
    let forms = parse(text).map_err(|e| e.to_string())?;
    let version = Sexp::List(vec![Sexp::Atom("version".into()), Sexp::Atom("1".into())]);
    let deny_default = Sexp::List(vec![
        Sexp::Atom("deny".into()),
        Sexp::Atom("default".into()),
    ]);
    if forms.first() != Some(&version) || forms.get(1) != Some(&deny_default) {
        return Err("the profile must start with (version 1) (deny default)".into());
    }
    let mut rules = Vec::new();
    for form in &forms {
        check_literals(form, None)?;
        let action = match form.head() {
            Some("version") => continue,
            Some("import") if form.args() == [Sexp::Str("bsd.sb".into())] => continue,
            Some("allow") => Action::Allow,
            Some("deny") => Action::Deny,
            _ => return Err(format!("unexpected top-level form {form:?}")),
        };
        let mut operations = Vec::new();
        let mut filters = Vec::new();
        for arg in form.args() {
            match arg {
                Sexp::Atom(op) if filters.is_empty() => {
                    if !KNOWN_OPERATIONS.contains(&op.as_str()) {
                        return Err(format!("unknown operation `{op}`"));
                    }
                    operations.push(op.clone());
                }
                Sexp::List(_) => filters.push(arg.clone()),
                other => return Err(format!("unexpected rule argument {other:?} in {form:?}")),
            }
        }
        if operations.is_empty() {
            return Err(format!("rule without operation: {form:?}"));
        }
        rules.push(Rule {
            action,
            operations,
            filters,
        });
    }
    Ok(rules)
}

/// Checks that every string or regex literal sits where a fixed one is expected.
fn check_literals(form: &Sexp, parent: Option<&str>) -> Result<(), String> {
    match form {
        Sexp::List(items) => {
            let head = form.head();
            items.iter().try_for_each(|item| check_literals(item, head))
        }
        Sexp::Atom(_) => Ok(()),
        Sexp::Str(s) => {
            let ok = match parent {
                Some("import") => s == "bsd.sb",
                Some("global-name") => s.starts_with("com.apple.") && !s.contains('/'),
                Some("param") => is_param_name(s),
                Some("literal") => {
                    DEVICE_LITERALS.contains(&s.as_str()) || SOCKET_LITERALS.contains(&s.as_str())
                }
                Some("sysctl-name-prefix") => SYSCTL_PREFIXES.contains(&s.as_str()),
                // `(local ip "localhost:*")`, `(remote ip "localhost:PORT")`:
                // loopback, a port or any; `"*:*"`: any address (network on).
                Some("local" | "remote") => {
                    s == "*:*"
                        || s.strip_prefix("localhost:").is_some_and(|port| {
                            port == "*" || (!port.is_empty() && port.parse::<u16>().is_ok())
                        })
                }
                _ => false,
            };
            if ok {
                Ok(())
            } else {
                Err(format!(
                    "string literal {s:?} in ({}) is not a fixed base literal",
                    parent.unwrap_or("?")
                ))
            }
        }
        Sexp::Regex(r) if parent == Some("regex") && GIT_REGEXES.contains(&r.as_str()) => Ok(()),
        Sexp::Regex(r) => Err(format!("unexpected regex literal {r:?}")),
    }
}

/// `PREFIX_N` for one of the crate's parameter prefixes.
fn is_param_name(s: &str) -> bool {
    use crate::profile::{
        ANCESTOR_PARAM, READ_DENY_PARAM, TERMINAL_PARAM, UNIX_SOCKET_PARAM, WRITE_DENY_PARAM,
        WRITE_PARAM,
    };
    [
        WRITE_PARAM,
        READ_DENY_PARAM,
        WRITE_DENY_PARAM,
        ANCESTOR_PARAM,
        UNIX_SOCKET_PARAM,
        TERMINAL_PARAM,
    ]
    .iter()
    .any(|prefix| {
        s.strip_prefix(prefix)
            .and_then(|rest| rest.strip_prefix('_'))
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    })
}
