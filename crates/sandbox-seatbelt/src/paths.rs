//! Paths as macOS sees them, checked before they become `-D` parameters.

use std::path::{Path, PathBuf};

use crate::error::SeatbeltError;

/// Top-level directories that are symlinks into `/private` on macOS.
const PRIVATE_ALIASES: [&str; 3] = ["/etc", "/tmp", "/var"];

/// `path` as macOS names it: `/tmp`, `/var` and `/etc` (and anything beneath
/// them) are moved under `/private`.
///
/// Seatbelt matches the path the kernel resolved, so a rule for `/tmp/x`
/// never matches on macOS. On macOS the policy's own canonicalisation already
/// yields `/private/...` and this mapping changes nothing; on other hosts
/// (where `/tmp` is a real directory) it lets the generated profile show
/// what macOS will match. The mapping is pure: it never touches the file system.
pub fn macos_canonical(path: &Path) -> PathBuf {
    for alias in PRIVATE_ALIASES {
        if let Ok(rest) = path.strip_prefix(alias) {
            let mapped = Path::new("/private").join(alias.trim_start_matches('/'));
            return if rest.as_os_str().is_empty() {
                mapped
            } else {
                mapped.join(rest)
            };
        }
    }
    path.to_path_buf()
}

/// Checks that `path` can travel as a `-D NAME=VALUE` argument and returns its text.
///
/// Refused: non-UTF-8 paths, relative paths, and paths holding NUL or any
/// other control character (a newline in a parameter is not a structural
/// risk, since parameters never enter the profile text, but such a path is
/// almost certainly an attack or a mistake and is easier to refuse than to
/// review).
pub fn parameter_value(field: &'static str, path: &Path) -> Result<String, SeatbeltError> {
    let bad = |reason: String| SeatbeltError::UnusablePath {
        field,
        path: path.to_path_buf(),
        reason,
    };
    let text = path
        .to_str()
        .ok_or_else(|| bad("the path is not valid UTF-8".into()))?;
    if let Some(c) = text.chars().find(|c| c.is_control()) {
        return Err(bad(format!(
            "it contains the control character U+{:04X}",
            u32::from(c)
        )));
    }
    if !path.is_absolute() {
        return Err(bad("the path is not absolute".into()));
    }
    Ok(text.to_owned())
}

/// The terminal devices of this process's stdin, stdout and stderr (those
/// that are terminals), found by device number among the terminal nodes of
/// `/dev` (`/dev/ttys003` on macOS, `/dev/pts/3` on Linux). Empty when none
/// is a terminal or its node cannot be found (then no terminal is writable
/// by name, which fails closed).
pub(crate) fn stdio_terminals() -> Vec<PathBuf> {
    #[cfg(unix)]
    {
        use std::io::IsTerminal;
        use std::os::fd::{AsFd, BorrowedFd};
        use std::os::unix::fs::{FileTypeExt, MetadataExt};

        fn device(fd: BorrowedFd<'_>) -> Option<u64> {
            let meta = std::fs::File::from(fd.try_clone_to_owned().ok()?)
                .metadata()
                .ok()?;
            meta.file_type().is_char_device().then(|| meta.rdev())
        }
        let (stdin, stdout, stderr) = (std::io::stdin(), std::io::stdout(), std::io::stderr());
        let devices: Vec<u64> = [
            (stdin.is_terminal(), stdin.as_fd()),
            (stdout.is_terminal(), stdout.as_fd()),
            (stderr.is_terminal(), stderr.as_fd()),
        ]
        .into_iter()
        .filter(|(tty, _)| *tty)
        .filter_map(|(_, fd)| device(fd))
        .collect();
        if devices.is_empty() {
            return Vec::new();
        }
        let mut found = Vec::new();
        for (dir, terminal_name) in [
            (
                "/dev",
                (|n: &str| n.starts_with("tty") && n != "tty") as fn(&str) -> bool,
            ),
            ("/dev/pts", |n: &str| n.bytes().all(|b| b.is_ascii_digit())),
        ] {
            let Ok(entries) = std::fs::read_dir(dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let name = entry.file_name();
                if !name.to_str().is_some_and(terminal_name) {
                    continue;
                }
                let path = entry.path();
                if std::fs::symlink_metadata(&path)
                    .is_ok_and(|m| m.file_type().is_char_device() && devices.contains(&m.rdev()))
                {
                    found.push(path);
                }
            }
        }
        found.sort();
        found.dedup();
        found
    }
    #[cfg(not(unix))]
    {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_aliases_are_mapped_by_component() {
        let m = |p: &str| macos_canonical(Path::new(p));
        assert_eq!(m("/tmp"), Path::new("/private/tmp"));
        assert_eq!(m("/tmp/a/b"), Path::new("/private/tmp/a/b"));
        assert_eq!(m("/var/folders/x"), Path::new("/private/var/folders/x"));
        assert_eq!(m("/etc/hosts"), Path::new("/private/etc/hosts"));
        assert_eq!(m("/private/tmp/a"), Path::new("/private/tmp/a"));
        assert_eq!(m("/tmpfoo"), Path::new("/tmpfoo"));
        assert_eq!(m("/Users/dev/tmp"), Path::new("/Users/dev/tmp"));
        assert_eq!(m("/"), Path::new("/"));
    }

    #[test]
    fn control_characters_and_relative_paths_are_refused() {
        for (bad, needle) in [
            ("/a\nb", "U+000A"),
            ("/a\u{7f}b", "U+007F"),
            ("/a\u{85}b", "U+0085"),
            ("/a\0b", "U+0000"),
            ("rel/dir", "not absolute"),
        ] {
            let err = parameter_value("write_paths", Path::new(bad))
                .unwrap_err()
                .to_string();
            assert!(err.contains(needle) && err.contains("write_paths"), "{err}");
            assert!(err.contains(&format!("{:?}", Path::new(bad))), "{err}");
        }
        assert_eq!(
            parameter_value("write_paths", Path::new("/a \"b\" (c)")).unwrap(),
            "/a \"b\" (c)"
        );
    }

    /// Whatever this test's stdio is, only terminal nodes of `/dev` are named
    /// (none when stdio is no terminal, as under `cargo test` in CI).
    #[cfg(unix)]
    #[test]
    fn stdio_terminals_are_terminal_devices_only() {
        use std::io::IsTerminal;
        use std::os::unix::fs::FileTypeExt;
        let found = stdio_terminals();
        for path in &found {
            assert!(path.starts_with("/dev"), "{path:?}");
            assert!(
                std::fs::metadata(path)
                    .unwrap()
                    .file_type()
                    .is_char_device(),
                "{path:?}"
            );
        }
        let any_tty = std::io::stdin().is_terminal()
            || std::io::stdout().is_terminal()
            || std::io::stderr().is_terminal();
        if !any_tty {
            assert!(found.is_empty(), "{found:?}");
        }
    }

    #[cfg(unix)]
    #[test]
    fn non_utf8_is_refused() {
        use std::os::unix::ffi::OsStrExt;
        let p = Path::new(std::ffi::OsStr::from_bytes(b"/a\xffb"));
        let err = parameter_value("read_deny_paths", p)
            .unwrap_err()
            .to_string();
        assert!(err.contains("UTF-8"), "{err}");
    }
}
