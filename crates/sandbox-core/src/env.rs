//! Environment scrubbing by name and `*` glob.

use std::ffi::{OsStr, OsString};

/// Whether `name` matches any entry of `deny` (exact, or a glob where `*` matches any run).
pub fn env_name_denied(name: &OsStr, deny: &[String]) -> bool {
    let Some(name) = name.to_str() else {
        // A non-UTF-8 name cannot match a UTF-8 pattern except a lone `*`.
        return deny.iter().any(|d| d.chars().all(|c| c == '*'));
    };
    deny.iter()
        .any(|pattern| glob_match(pattern.as_bytes(), name.as_bytes()))
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
}
