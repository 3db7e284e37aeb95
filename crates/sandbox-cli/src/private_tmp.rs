//! The run's (or session's) private `TMPDIR`, removed when dropped.
//!
//! The command owns everything in it and may close it to its owner
//! (`chmod 000` a directory, `chmod 500` the directory itself): as the same
//! non-root user, without `CAP_DAC_OVERRIDE`, a plain `remove_dir_all`
//! then fails and the directory, with what the run put there, stays in
//! `/tmp`. So the removal walks it by fds (`openat` beneath the parent's
//! fd, `O_NOFOLLOW`, never a path string a surviving process could swap),
//! gives each directory the runner's user owns back its owner's `rwx`
//! (`fchmod` on the opened fd; `fchmodat(AT_SYMLINK_NOFOLLOW)` beneath the
//! parent's fd for one that cannot be opened), moves what lies deeper than
//! the fds it holds up into the top directory (`renameat` between fds) to
//! remove it in a later round, and says on stderr, escaped, what it could
//! not remove.
//!
//! The runner is no deputy (red team G3): the walk runs on a thread of its
//! own that first empties its capability sets (`capset(2)` acts on the
//! calling thread only, capabilities(7)), so a root runner removes only
//! what its uid could remove without `CAP_DAC_OVERRIDE` or `CAP_FOWNER`,
//! as the confined command (which has no capabilities) could: another
//! user's files the command carried in (by moving a directory of its own
//! above them into the `TMPDIR`) stay, and are named.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// How deep the removal descends (one fd held per level).
const DEPTH: usize = 256;

/// A private temporary directory, removed (as above) when dropped.
pub(crate) struct PrivateTmp {
    path: PathBuf,
}

impl PrivateTmp {
    /// A new directory `sandbox-tmp-XXXXXX` in the system's temporary
    /// directory, mode 0700 from the start (tempfile's own default follows
    /// the umask): what the run keeps there is no other user's to read.
    pub(crate) fn new() -> io::Result<PrivateTmp> {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::Builder::new()
            .prefix("sandbox-tmp-")
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir()?;
        Ok(PrivateTmp { path: dir.keep() })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for PrivateTmp {
    fn drop(&mut self) {
        if let Err(e) = without_capabilities(|| remove(&self.path)) {
            crate::show::say(&format!(
                "sandbox: the private temporary directory {} could not be removed: {e}",
                self.path.display()
            ));
        }
    }
}

/// Runs `f` on a thread of its own whose effective, permitted and
/// inheritable capability sets are emptied first (`capset(2)` on that
/// thread: the runner's other threads keep theirs); `Err` without calling
/// `f` when they cannot be.
fn without_capabilities<T: Send>(f: impl FnOnce() -> io::Result<T> + Send) -> io::Result<T> {
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("sandbox-tmp-rm".into())
            .spawn_scoped(scope, || {
                sandbox::runner::drop_thread_capabilities()?;
                f()
            })?
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("the removal's thread failed")))
    })
}

fn cvt(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// Removes the directory `path` and everything beneath it (see the module
/// doc); the first error met, after removing all else it could.
///
/// One fd is held per level, at most [`DEPTH`] levels: a directory deeper
/// is moved up (`renameat` between the fds) into the top directory under a
/// fresh name and removed from there in a later round, so a tree of any
/// depth goes, its fds bounded.
fn remove(path: &Path) -> io::Result<()> {
    let parent = path.parent().unwrap_or(Path::new("/"));
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
    let c_parent = CString::new(parent.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: a NUL-terminated path; flags without O_CREAT take no mode.
    let fd = cvt(unsafe {
        libc::open(
            c_parent.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    })?;
    // SAFETY: a fresh fd owned here alone.
    let parent = unsafe { OwnedFd::from_raw_fd(fd) };
    let name =
        CString::new(name.as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let top = match open_dir(parent.as_raw_fd(), &name) {
        Ok(top) => top,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(()),
        Err(e) => return Err(e),
    };
    let mut walk = Walk {
        top: top.as_raw_fd(),
        moved: 0,
    };
    let mut first = None;
    for _ in 0..ROUNDS {
        let before = walk.moved;
        first = None;
        for entry in names(&top)? {
            if let Err(e) = walk.entry(top.as_raw_fd(), &entry, 1) {
                first.get_or_insert(e);
            }
        }
        // Nothing moved up this round: nothing is left for another.
        if walk.moved == before {
            break;
        }
    }
    drop(top);
    // SAFETY: a live dirfd and a NUL-terminated name.
    let rmdir = unsafe { libc::unlinkat(parent.as_raw_fd(), name.as_ptr(), libc::AT_REMOVEDIR) };
    if let Err(e) = cvt(rmdir) {
        if e.raw_os_error() != Some(libc::ENOENT) {
            first.get_or_insert(e);
        }
    }
    match first {
        None => Ok(()),
        Some(e) => Err(e),
    }
}

/// Rounds of [`remove`] at most (each moves up what lies deeper than
/// [`DEPTH`]): a tree a million directories deep.
const ROUNDS: usize = 4096;

/// One removal: the top directory's fd, where what lies too deep is moved.
struct Walk {
    top: RawFd,
    moved: u64,
}

impl Walk {
    /// Removes the entry `name` beneath the directory `parent`: a file,
    /// link or other non-directory by `unlinkat`, a directory by
    /// [`Walk::dir`].
    fn entry(&mut self, parent: RawFd, name: &CStr, depth: usize) -> io::Result<()> {
        // SAFETY: a live dirfd and a NUL-terminated name.
        if unsafe { libc::unlinkat(parent, name.as_ptr(), 0) } == 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::ENOENT) => Ok(()),
            // A directory (EISDIR on Linux, EPERM as POSIX allows).
            Some(libc::EISDIR | libc::EPERM) => self.dir(parent, name, depth),
            _ => Err(err),
        }
    }

    /// Removes the directory `name` beneath `parent` and all beneath it;
    /// past [`DEPTH`], moves it up into the top directory instead.
    fn dir(&mut self, parent: RawFd, name: &CStr, depth: usize) -> io::Result<()> {
        if depth >= DEPTH {
            return self.move_up(parent, name);
        }
        let dir = match open_dir(parent, name) {
            Ok(dir) => dir,
            // Not a directory now (replaced meanwhile): an entry to unlink.
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTDIR | libc::ELOOP)) => {
                // SAFETY: a live dirfd and a NUL-terminated name.
                return cvt(unsafe { libc::unlinkat(parent, name.as_ptr(), 0) }).map(drop);
            }
            Err(e) => return Err(e),
        };
        let mut first = None;
        for entry in names(&dir)? {
            if let Err(e) = self.entry(dir.as_raw_fd(), &entry, depth + 1) {
                first.get_or_insert(e);
            }
        }
        drop(dir);
        // SAFETY: a live dirfd and a NUL-terminated name.
        if let Err(e) = cvt(unsafe { libc::unlinkat(parent, name.as_ptr(), libc::AT_REMOVEDIR) }) {
            first.get_or_insert(e);
        }
        match first {
            None => Ok(()),
            Some(e) => Err(e),
        }
    }

    /// Moves the directory `name` beneath `parent` into the top directory
    /// under a name not in use there (`renameat` between the two fds).
    fn move_up(&mut self, parent: RawFd, name: &CStr) -> io::Result<()> {
        for _ in 0..64 {
            self.moved += 1;
            let fresh = CString::new(format!(".sandbox-rm-{}", self.moved))
                .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
            // SAFETY: live dirfds and NUL-terminated names. An empty
            // directory of that name would be replaced: it is one of the
            // run's, and goes anyway.
            match cvt(unsafe { libc::renameat(parent, name.as_ptr(), self.top, fresh.as_ptr()) }) {
                Ok(_) => return Ok(()),
                Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTEMPTY | libc::EEXIST)) => {}
                Err(e) => return Err(e),
            }
        }
        Err(io::Error::from_raw_os_error(libc::EEXIST))
    }
}

/// The directory `name` beneath `parent` opened without following a
/// symlink; one its owner closed to itself (the runner's user) is given
/// back its owner's `rwx` first (`fchmodat` with `AT_SYMLINK_NOFOLLOW`:
/// on the entry itself, never a link's target).
fn open_dir(parent: RawFd, name: &CStr) -> io::Result<OwnedFd> {
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: a live dirfd and a NUL-terminated name.
    let fd = match cvt(unsafe { libc::openat(parent, name.as_ptr(), flags) }) {
        Ok(fd) => fd,
        Err(e) if e.raw_os_error() == Some(libc::EACCES) => {
            // SAFETY: as above; the mode a constant.
            cvt(unsafe {
                libc::fchmodat(
                    parent,
                    name.as_ptr(),
                    libc::S_IRWXU,
                    libc::AT_SYMLINK_NOFOLLOW,
                )
            })
            .map_err(|_| e)?;
            // SAFETY: as above.
            cvt(unsafe { libc::openat(parent, name.as_ptr(), flags) })?
        }
        Err(e) => return Err(e),
    };
    // SAFETY: a fresh fd owned here alone.
    let dir = unsafe { OwnedFd::from_raw_fd(fd) };
    // Entries can be removed only with write and search permission on it.
    // SAFETY: stat is plain data, all-zero valid; fstat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a live fd and a stat to fill.
    cvt(unsafe { libc::fstat(dir.as_raw_fd(), &mut st) })?;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let owner = (libc::S_IRWXU) as libc::mode_t;
    if st.st_uid == me && (st.st_mode as libc::mode_t) & owner != owner {
        // SAFETY: fchmod on a live fd.
        unsafe {
            libc::fchmod(
                dir.as_raw_fd(),
                (st.st_mode as libc::mode_t & 0o7777) | owner,
            )
        };
    }
    Ok(dir)
}

/// The names in the open directory `dir`, but `.` and `..`.
fn names(dir: &OwnedFd) -> io::Result<Vec<CString>> {
    // SAFETY: dup of a live fd.
    let fd = cvt(unsafe { libc::fcntl(dir.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 0) })?;
    // SAFETY: fdopendir takes the fd (closed by closedir).
    let stream = unsafe { libc::fdopendir(fd) };
    if stream.is_null() {
        let e = io::Error::last_os_error();
        // SAFETY: the fd is still ours when fdopendir fails.
        unsafe { libc::close(fd) };
        return Err(e);
    }
    // The copy shares the fd's offset: from the start, each time.
    // SAFETY: a live DIR stream.
    unsafe { libc::rewinddir(stream) };
    let mut out = Vec::new();
    loop {
        // SAFETY: a live DIR stream.
        let e = unsafe { libc::readdir(stream) };
        if e.is_null() {
            break;
        }
        // SAFETY: d_name is NUL-terminated in the entry readdir returned.
        let name = unsafe { CStr::from_ptr((*e).d_name.as_ptr()) };
        let bytes = name.to_bytes();
        if bytes != b"." && bytes != b".." {
            out.push(name.to_owned());
        }
    }
    // SAFETY: the stream opened above, closed once.
    unsafe { libc::closedir(stream) };
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(p: &Path, m: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    }

    /// Closed directories (mode 000 and 0500, the directory itself 0500)
    /// and a mode-000 file are removed; a symlink to a directory outside is
    /// removed, not followed (its target and the target's mode intact).
    /// Root or not (the e2e tests in `tests/tests/it/private_tmp.rs` run the
    /// runner as nobody too).
    #[test]
    fn closed_directories_are_removed_and_links_not_followed() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("keep"), "x").unwrap();
        mode(outside.path(), 0o500);
        let tmp = PrivateTmp::new().unwrap();
        let p = tmp.path().to_path_buf();
        std::fs::create_dir_all(p.join("a/b/c")).unwrap();
        std::fs::write(p.join("a/b/c/f"), "x").unwrap();
        std::fs::write(p.join("a/f0"), "x").unwrap();
        mode(&p.join("a/f0"), 0o000);
        mode(&p.join("a/b/c"), 0o000);
        mode(&p.join("a/b"), 0o500);
        std::os::unix::fs::symlink(outside.path(), p.join("out")).unwrap();
        mode(&p, 0o500);
        drop(tmp);
        assert!(!p.exists(), "{} survived", p.display());
        assert!(outside.path().join("keep").exists());
        assert_eq!(
            std::fs::metadata(outside.path())
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o500
        );
        mode(outside.path(), 0o700);
    }

    /// A tree deeper than the fds held (`DEPTH`), closed at the bottom,
    /// is removed too.
    #[test]
    fn a_deep_tree_is_removed() {
        let tmp = PrivateTmp::new().unwrap();
        let p = tmp.path().to_path_buf();
        let mut d = p.clone();
        for _ in 0..(DEPTH * 2 + 10) {
            d.push("d");
        }
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("f"), "x").unwrap();
        mode(&d, 0o000);
        drop(tmp);
        assert!(!p.exists(), "{} survived", p.display());
    }

    /// The removal's thread has no capability left (`CapEff` 0 in its
    /// `/proc/thread-self/status`), root or not; as root it really cannot
    /// override DAC: a 0700 directory of another user (nobody) is not
    /// opened there (EACCES), while the runner's other threads still open
    /// it (the positive control: the sets are per thread).
    #[test]
    #[cfg(target_os = "linux")]
    fn the_removal_thread_cannot_override_dac() {
        let eff = without_capabilities(|| {
            let status = std::fs::read_to_string("/proc/thread-self/status")?;
            Ok(status
                .lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .map(|v| v.trim().to_owned()))
        })
        .unwrap();
        assert_eq!(eff.as_deref(), Some("0000000000000000"));
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let theirs = dir.path().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        std::fs::write(theirs.join("f"), "x").unwrap();
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
        mode(&theirs, 0o700);
        // Control: this thread (root, with its capabilities) reads it.
        assert!(std::fs::read_dir(&theirs).is_ok());
        let denied = without_capabilities(|| Ok(std::fs::read_dir(&theirs).map(drop))).unwrap();
        assert_eq!(
            denied.map_err(|e| e.raw_os_error()),
            Err(Some(libc::EACCES))
        );
        // And the control once more after it: the runner's thread kept its.
        assert!(std::fs::read_dir(&theirs).is_ok());
    }

    /// Twin: a plain directory with files is removed.
    #[test]
    fn a_plain_directory_is_removed() {
        let tmp = PrivateTmp::new().unwrap();
        let p = tmp.path().to_path_buf();
        std::fs::write(p.join("f"), "x").unwrap();
        drop(tmp);
        assert!(!p.exists());
    }
}
