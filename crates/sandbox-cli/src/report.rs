//! Writing the outcome record without following links: `--report FILE`.
//!
//! The command may write inside the directory of the report (it can be a
//! write path), and the CLI may run as root. So the directory is opened
//! before the command starts and everything after goes through that fd; the
//! file itself is never opened by name for writing: a temporary file of
//! unpredictable name (64 random bits, so the command cannot create it first)
//! is created next to it (`O_CREAT | O_EXCL | O_NOFOLLOW`) and renamed over
//! it, which replaces a link instead of following it. A report path that is
//! a symlink or not a regular file is refused before the run; after it, a
//! record that cannot be written is said in one `sandbox:` line and the
//! command's own exit status is kept (see `main.rs`). `-` writes the record
//! to standard output.

use std::ffi::{CString, OsStr};
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::Fatal;

/// Where the record goes.
pub(crate) enum Target {
    Stdout,
    File {
        shown: PathBuf,
        dir: OwnedFd,
        name: CString,
    },
}

impl Target {
    /// Checks `path` and opens its directory.
    pub(crate) fn open(path: &Path) -> Result<Self, Fatal> {
        if path.as_os_str() == "-" {
            return Ok(Target::Stdout);
        }
        let shown = path.to_path_buf();
        let refuse = |why: String| Fatal(format!("--report {}: {why}", shown.display()));
        let name = match path.file_name() {
            Some(n) if n != OsStr::new("..") => n,
            _ => return Err(refuse("name a file, not a directory".into())),
        };
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let c = |s: &OsStr| {
            CString::new(s.as_bytes()).map_err(|_| refuse("the path contains a NUL byte".into()))
        };
        let dir_c = c(parent.as_os_str())?;
        #[cfg(target_os = "linux")]
        const DIR: libc::c_int = libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC;
        #[cfg(not(target_os = "linux"))]
        const DIR: libc::c_int = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;
        // SAFETY: open of a NUL-terminated path.
        let raw = unsafe { libc::open(dir_c.as_ptr(), DIR) };
        if raw < 0 {
            return Err(refuse(format!(
                "cannot open its directory: {}",
                std::io::Error::last_os_error()
            )));
        }
        // SAFETY: a fresh fd we own.
        let dir = unsafe { OwnedFd::from_raw_fd(raw) };
        let target = Target::File {
            shown: shown.clone(),
            dir,
            name: c(name)?,
        };
        target.check()?;
        Ok(target)
    }

    /// Refuses an existing report path that is a symlink or not a regular file.
    fn check(&self) -> Result<(), Fatal> {
        let Target::File { shown, dir, name } = self else {
            return Ok(());
        };
        // SAFETY: stat is plain data; fstatat fills it.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: valid dir fd, NUL-terminated name and out-pointer.
        let rc = unsafe {
            libc::fstatat(
                dir.as_raw_fd(),
                name.as_ptr(),
                &mut st,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        if rc != 0 {
            return Ok(()); // not there yet
        }
        match st.st_mode & libc::S_IFMT {
            libc::S_IFREG => Ok(()),
            libc::S_IFLNK => Err(Fatal(format!(
                "--report {}: the path is a symlink; refusing to write through it",
                shown.display()
            ))),
            _ => Err(Fatal(format!(
                "--report {}: the path exists and is not a regular file",
                shown.display()
            ))),
        }
    }

    /// Writes `json` and a newline: atomically, never through a link.
    pub(crate) fn write(&self, json: &[u8]) -> Result<(), Fatal> {
        let Target::File { shown, dir, name } = self else {
            let mut out = std::io::stdout().lock();
            return out
                .write_all(json)
                .and_then(|()| out.write_all(b"\n"))
                .and_then(|()| out.flush())
                .map_err(|e| Fatal(format!("cannot write the report to stdout: {e}")));
        };
        self.check()?;
        let fail = |what: &str, e: std::io::Error| {
            Fatal(format!(
                "cannot write report {}: {what}: {e}",
                shown.display()
            ))
        };
        let (tmp, raw) = create_temporary(dir.as_raw_fd(), name)
            .map_err(|e| fail("creating the temporary file", e))?;
        // SAFETY: a fresh fd we own.
        let mut file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(raw) });
        let unlink_tmp = || {
            // SAFETY: unlinkat relative to our dir fd.
            unsafe { libc::unlinkat(dir.as_raw_fd(), tmp.as_ptr(), 0) };
        };
        if let Err(e) = file
            .write_all(json)
            .and_then(|()| file.write_all(b"\n"))
            .and_then(|()| file.sync_all())
        {
            unlink_tmp();
            return Err(fail("writing", e));
        }
        // SAFETY: renameat within our dir fd, NUL-terminated names.
        let rc = unsafe {
            libc::renameat(
                dir.as_raw_fd(),
                tmp.as_ptr(),
                dir.as_raw_fd(),
                name.as_ptr(),
            )
        };
        if rc != 0 {
            let e = std::io::Error::last_os_error();
            unlink_tmp();
            return Err(fail("renaming it into place", e));
        }
        Ok(())
    }
}

/// How many fresh names [`create_temporary`] tries.
const TMP_TRIES: usize = 8;

/// Creates a temporary file for the record beside `name` in `dir`: a hidden
/// name with 64 random bits, never an existing entry (`O_EXCL`, no link
/// followed). Returns its name and fd.
fn create_temporary(dir: libc::c_int, name: &CString) -> std::io::Result<(CString, libc::c_int)> {
    let mut last = std::io::Error::from_raw_os_error(libc::EEXIST);
    for _ in 0..TMP_TRIES {
        let tmp = CString::new(format!(
            ".{}.{:016x}.tmp",
            String::from_utf8_lossy(name.as_bytes()),
            random_u64()
        ))
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: openat relative to a dir fd with a NUL-terminated name.
        let raw = unsafe {
            libc::openat(
                dir,
                tmp.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                0o644 as libc::c_uint,
            )
        };
        if raw >= 0 {
            return Ok((tmp, raw));
        }
        last = std::io::Error::last_os_error();
        if last.raw_os_error() != Some(libc::EEXIST) {
            break;
        }
    }
    Err(last)
}

/// 64 unpredictable bits: std's hasher keys come from the OS's random source.
fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temporary_names_are_unpredictable_and_never_an_existing_entry() {
        let dir = tempfile::tempdir().unwrap();
        let target = Target::open(&dir.path().join("out.json")).unwrap();
        let Target::File { dir: fd, name, .. } = &target else {
            unreachable!()
        };
        let (a, fa) = create_temporary(fd.as_raw_fd(), name).unwrap();
        let (b, fb) = create_temporary(fd.as_raw_fd(), name).unwrap();
        // SAFETY: closing the fds just opened.
        unsafe { (libc::close(fa), libc::close(fb)) };
        assert_ne!(a, b);
        target.write(b"{}").unwrap();
        assert_eq!(std::fs::read(dir.path().join("out.json")).unwrap(), b"{}\n");
    }
}
