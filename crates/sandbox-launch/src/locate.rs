//! Finding the program to run as a shell would, so "not found" and "not
//! executable" are told apart before anything is spawned.

use std::ffi::{CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Why a program cannot be run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LocateError {
    /// No such program (in `PATH`, or at the path given).
    #[error("{}: command not found", .0.display())]
    NotFound(PathBuf),
    /// The program exists but cannot be executed.
    #[error("{}: cannot execute: {reason}", path.display())]
    NotExecutable {
        /// The first candidate found.
        path: PathBuf,
        /// `is a directory` or `permission denied`.
        reason: String,
    },
}

/// The executable `program` names: with a slash, that path (relative to
/// `cwd` when given); otherwise the first executable file of that name in
/// `path_var` (default `/usr/local/bin:/usr/bin:/bin`). An empty name is not
/// found, as in a shell.
pub fn locate(
    program: &OsStr,
    path_var: Option<&OsStr>,
    cwd: Option<&Path>,
) -> Result<PathBuf, LocateError> {
    if program.is_empty() {
        return Err(LocateError::NotFound(PathBuf::from(program)));
    }
    let check = |candidate: PathBuf| -> Option<Result<PathBuf, LocateError>> {
        let meta = std::fs::metadata(&candidate).ok()?;
        let executable = meta.is_file() && {
            let c = CString::new(candidate.as_os_str().as_bytes()).ok()?;
            // SAFETY: c is a valid NUL-terminated path.
            unsafe { libc::access(c.as_ptr(), libc::X_OK) == 0 }
        };
        Some(if executable {
            Ok(candidate)
        } else {
            Err(LocateError::NotExecutable {
                reason: if meta.is_dir() {
                    "is a directory".into()
                } else {
                    "permission denied".into()
                },
                path: candidate,
            })
        })
    };
    if program.as_bytes().contains(&b'/') {
        let path = match cwd {
            Some(dir) if !Path::new(program).is_absolute() => dir.join(program),
            _ => PathBuf::from(program),
        };
        return check(path).unwrap_or_else(|| Err(LocateError::NotFound(PathBuf::from(program))));
    }
    let search = path_var.unwrap_or(OsStr::new("/usr/local/bin:/usr/bin:/bin"));
    let mut first_error = None;
    for dir in std::env::split_paths(search) {
        match check(dir.join(program)) {
            Some(Ok(found)) => return Ok(found),
            Some(Err(e)) => {
                first_error.get_or_insert(e);
            }
            None => {}
        }
    }
    Err(first_error.unwrap_or_else(|| LocateError::NotFound(PathBuf::from(program))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn found_not_found_and_not_executable_are_told_apart() {
        assert!(locate(OsStr::new("sh"), None, None).is_ok());
        assert!(matches!(
            locate(OsStr::new(""), None, None),
            Err(LocateError::NotFound(_))
        ));
        assert!(matches!(
            locate(OsStr::new("no-such-program-here"), None, None),
            Err(LocateError::NotFound(_))
        ));
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("script");
        std::fs::write(&file, "#!/bin/sh\n").unwrap();
        assert!(matches!(
            locate(file.as_os_str(), None, None),
            Err(LocateError::NotExecutable { .. })
        ));
        assert!(matches!(
            locate(OsStr::new("./script"), None, Some(dir.path())),
            Err(LocateError::NotExecutable { .. })
        ));
        assert!(matches!(
            locate(dir.path().as_os_str(), None, None),
            Err(LocateError::NotExecutable { reason, .. }) if reason == "is a directory"
        ));
    }
}
