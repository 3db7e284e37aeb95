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
//! to standard output; `--report-fd N` to the inherited descriptor N, which
//! must be open for writing when the CLI starts (it is claimed then, and
//! marked close-on-exec: the command, whose inherited fds above 2 are
//! closed anyway, never gets it).
//!
//! The directory fd follows its directory when the command renames it. So
//! after the run, when nothing the run started is alive, the report's
//! directory is looked up by name again ([`Target::write_after_run`]): the
//! same directory takes the record as before; another one (the command moved
//! the first away and made a new one, to leave a record of its own there)
//! takes it only where the run itself could have written (no more than the
//! sandbox allowed: a link the command left cannot send it elsewhere), and
//! else the record goes to the first directory, wherever it is now. Either
//! way one `sandbox:` line says what happened and where the record is.

use std::ffi::{CString, OsStr};
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::Fatal;

/// What the user asked for: `--report PATH` or `--report-fd N`.
#[derive(Clone, Copy)]
pub(crate) enum Asked<'a> {
    Path(&'a Path),
    Fd(RawFd),
}

impl<'a> Asked<'a> {
    pub(crate) fn from_flags(path: Option<&'a Path>, fd: Option<RawFd>) -> Option<Self> {
        path.map(Asked::Path).or(fd.map(Asked::Fd))
    }

    /// Checks the request and opens where the record goes.
    pub(crate) fn open(self) -> Result<Target, Fatal> {
        match self {
            Asked::Path(path) => Target::open(path),
            Asked::Fd(fd) => Target::fd(fd),
        }
    }

    /// At start, before the CLI opens anything that could take its number:
    /// `--report-fd N` must name a descriptor the caller opened for writing.
    pub(crate) fn claim(self) -> Result<(), Fatal> {
        match self {
            Asked::Path(_) => Ok(()),
            Asked::Fd(fd) => Target::fd(fd).map(drop),
        }
    }
}

/// Where the record goes.
pub(crate) enum Target {
    Stdout,
    /// An inherited descriptor (`--report-fd`), not ours to close.
    Fd(RawFd),
    File {
        shown: PathBuf,
        /// The directory as named (looked up again after the run).
        parent: CString,
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
        let parent = c(parent.as_os_str())?;
        let dir =
            open_dir(&parent).map_err(|e| refuse(format!("cannot open its directory: {e}")))?;
        let target = Target::File {
            shown: shown.clone(),
            parent,
            dir,
            name: c(name)?,
        };
        target.check()?;
        Ok(target)
    }

    /// `--report-fd N`: N open for writing; marked close-on-exec, so no
    /// process the CLI starts inherits it.
    fn fd(fd: RawFd) -> Result<Self, Fatal> {
        // SAFETY: F_GETFL reads the flags of a descriptor number; no memory.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        if flags < 0 {
            return Err(Fatal(format!(
                "--report-fd {fd}: descriptor {fd} is not open ({}); open it for writing \
                 when starting sandbox (e.g. `{fd}>record.json`)",
                std::io::Error::last_os_error()
            )));
        }
        // The kernel's access mode bits (musl's O_ACCMODE adds O_PATH).
        if flags & 3 == libc::O_RDONLY {
            return Err(Fatal(format!(
                "--report-fd {fd}: descriptor {fd} is open for reading only; open it for \
                 writing (e.g. `{fd}>record.json`)"
            )));
        }
        // SAFETY: F_SETFD on an open descriptor; no memory.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
        Ok(Target::Fd(fd))
    }

    /// Refuses an existing report path that is a symlink or not a regular file.
    fn check(&self) -> Result<(), Fatal> {
        let Target::File {
            shown, dir, name, ..
        } = self
        else {
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

    /// After a run: writes `json` where the user asked, or, when the
    /// command replaced the report's directory, where [the module
    /// docs](self) say. `may_write` tells whether the run could write in a
    /// (canonical) directory. Returns the line that says where the record
    /// went when that is not the directory opened before the run.
    pub(crate) fn write_after_run(
        &self,
        json: &[u8],
        may_write: impl Fn(&Path) -> bool,
    ) -> Result<Option<String>, Fatal> {
        let Target::File {
            shown,
            parent,
            dir,
            name,
        } = self
        else {
            return self.write(json).map(|()| None);
        };
        let now = open_dir(parent).ok();
        if now.as_ref().is_some_and(|now| same_file(now, dir)) {
            return self.write(json).map(|()| None);
        }
        let first_now = fd_path(dir).map_or_else(
            || "unknown (removed?)".to_owned(),
            |p| p.display().to_string(),
        );
        let replaced = format!(
            "--report {}: its directory was moved or replaced during the run (the one opened \
             before it is now at {first_now})",
            shown.display()
        );
        // The directory now at the asked path, where the command could have
        // written a file of its own anyway.
        let asked = now.filter(|now| fd_path(now).is_some_and(|p| may_write(&p)));
        if let Some(now) = asked {
            let here = Target::File {
                shown: shown.clone(),
                parent: parent.clone(),
                dir: now,
                name: name.clone(),
            };
            here.write(json)?;
            return Ok(Some(format!(
                "sandbox: {replaced}; the record was written at {} as asked",
                shown.display()
            )));
        }
        self.write(json)
            .map_err(|Fatal(e)| Fatal(format!("{replaced}; {e}")))?;
        Ok(Some(format!(
            "sandbox: {replaced}, and the path now leads where the run may not write; the \
             record was written in {first_now} instead, and what {} holds is not the sandbox's",
            shown.display()
        )))
    }

    /// Writes `json` and a newline: atomically, never through a link.
    pub(crate) fn write(&self, json: &[u8]) -> Result<(), Fatal> {
        let Target::File {
            shown, dir, name, ..
        } = self
        else {
            // On a terminal, bounded as `show::say` is: a stopped terminal
            // never holds the runner.
            let fd = match self {
                Target::Fd(fd) => *fd,
                _ => libc::STDOUT_FILENO,
            };
            if crate::show::bounded::write(fd, &[json, b"\n"].concat()) {
                return Ok(());
            }
            if let Target::Fd(fd) = self {
                // SAFETY: the caller's open descriptor, borrowed: ManuallyDrop
                // never closes it (a re-run after approval writes again).
                let mut out =
                    std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(*fd) });
                return out
                    .write_all(json)
                    .and_then(|()| out.write_all(b"\n"))
                    .and_then(|()| out.flush())
                    .map_err(|e| Fatal(format!("cannot write the report to fd {fd}: {e}")));
            }
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

/// Opens the directory named `path` (links followed, as the user's path
/// may hold them) for `*at` calls.
fn open_dir(path: &CString) -> std::io::Result<OwnedFd> {
    #[cfg(target_os = "linux")]
    const DIR: libc::c_int = libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC;
    #[cfg(not(target_os = "linux"))]
    const DIR: libc::c_int = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;
    // SAFETY: open of a NUL-terminated path.
    let raw = unsafe { libc::open(path.as_ptr(), DIR) };
    if raw < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh fd we own.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Whether two fds are the same file (device and inode).
fn same_file(a: &OwnedFd, b: &OwnedFd) -> bool {
    let id = |fd: &OwnedFd| {
        // SAFETY: stat is plain data; fstat fills it.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a valid fd and out-pointer.
        (unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } == 0).then_some((st.st_dev, st.st_ino))
    };
    id(a).is_some_and(|a| Some(a) == id(b))
}

/// Where the directory open as `fd` is now, as the kernel tracks it; `None`
/// when it was removed or cannot be told.
fn fd_path(fd: &OwnedFd) -> Option<PathBuf> {
    #[cfg(target_os = "linux")]
    let path = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok()?;
    #[cfg(target_os = "macos")]
    let path = {
        let mut buf = vec![0u8; libc::PATH_MAX as usize];
        // SAFETY: F_GETPATH writes at most PATH_MAX bytes into `buf`.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETPATH, buf.as_mut_ptr()) } != 0 {
            return None;
        }
        let end = buf.iter().position(|&b| b == 0)?;
        PathBuf::from(OsStr::from_bytes(&buf[..end]))
    };
    #[cfg(not(any(target_os = "linux", target_os = "macos")))]
    let path: PathBuf = {
        let _ = fd;
        return None;
    };
    (path.is_absolute() && !path.as_os_str().as_bytes().ends_with(b" (deleted)")).then_some(path)
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
