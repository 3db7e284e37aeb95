//! Environment scrubbing by name and `*` glob.

use std::ffi::{OsStr, OsString};

/// Whether `name` matches any entry of `deny` (exact, or a glob where `*` matches any run).
///
/// Names are compared byte-wise, so a name that is not valid UTF-8 is matched
/// like any other (`AWS_*` denies `AWS_\xff`).
pub fn env_name_denied(name: &OsStr, deny: &[String]) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let name = name.as_bytes();
    deny.iter()
        .any(|pattern| glob_match(pattern.as_bytes(), name))
}

/// The environment `vars` minus every name denied by `deny`.
pub fn scrub_env(
    vars: impl IntoIterator<Item = (OsString, OsString)>,
    deny: &[String],
) -> Vec<(OsString, OsString)> {
    vars.into_iter()
        .filter(|(name, _)| !env_name_denied(name, deny))
        .collect()
}

// `*`-only globbing is all env names need; a glob crate would bring path semantics we do not want.
fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() && pattern[p] == b'*' {
            star = Some((p, t));
            p += 1;
        } else if p < pattern.len() && pattern[p] == text[t] {
            p += 1;
            t += 1;
        } else if let Some((sp, st)) = star {
            p = sp + 1;
            t = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_and_glob() {
        let deny = vec![
            "AWS_*".to_owned(),
            "TOKEN".to_owned(),
            "*_SECRET*".to_owned(),
        ];
        for (name, denied) in [
            ("AWS_KEY", true),
            ("AWS_", true),
            ("AWSX", false),
            ("TOKEN", true),
            ("TOKENS", false),
            ("MY_SECRET_X", true),
            ("PATH", false),
        ] {
            assert_eq!(env_name_denied(OsStr::new(name), &deny), denied, "{name}");
        }
    }

    /// Names that are not UTF-8 match byte-wise, beside a UTF-8 twin.
    #[test]
    fn non_utf8_names_match_bytewise() {
        use std::os::unix::ffi::OsStrExt;
        let deny = vec!["AWS_*".to_owned(), "*_TOKEN".to_owned()];
        for (name, denied) in [
            (&b"AWS_\xff"[..], true),
            (b"\xfe_TOKEN", true),
            (b"\xffKEEP", false),
            (b"AWS_KEY", true),
        ] {
            assert_eq!(
                env_name_denied(OsStr::from_bytes(name), &deny),
                denied,
                "{name:?}"
            );
        }
    }
}
