//! POSIX shared memory and named semaphores of the run's own, in `/dev/shm`
//! (`private_shm`): the broker makes the run's new entries there and keeps
//! the inodes it made; later writing opens, links, renames, unlinks and
//! truncates there, and changes of mode, owner and times (`broker::act`,
//! with the kernel's checks and the policy's), are performed only on those
//! inodes. Everything else in
//! `/dev/shm` keeps the answer the kernel gives the command, whose Landlock
//! domain has no write right there (the broker's own domain has: see
//! `sandbox-landlock`, the launch ruleset).
//!
//! glibc makes a semaphore (`sem_open`) by creating `sem.XXXXXX` with
//! `O_RDWR|O_CREAT|O_EXCL`, writing it, `link()`ing it to `sem.NAME` and
//! unlinking the temporary name; `shm_open` is `open(O_RDWR|O_CREAT)` of
//! `/dev/shm/NAME`, then `ftruncate` and `mmap` on the fd (no further check:
//! the fd carries the write access it was opened with).
//!
//! An object is the run's by its inode, held open (`O_PATH`) so that its
//! number cannot be given to another file while it is recorded: a name the
//! run made and another process replaced names a foreign inode, which is not
//! the run's. A name is resolved without following a symlink, so a link
//! planted in `/dev/shm` never leads the broker anywhere.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::caller::{cvt, errno_of, Caller};
use crate::entries::{finish_open, fstatat_nofollow, reopen, Deferred, Outcome};
use crate::resolve::{fstat, Unresolved};
use crate::syscalls::{EntryCall, PathArg, O_TMPFILE_BIT};

/// At most this many objects of the run's are kept at once (each holds an
/// fd of the broker's); beyond it a new one is not made (the kernel's
/// answer, `EACCES`), until the run removes some.
pub(crate) const MAX_OBJECTS: usize = 4096;

/// The shared-memory directory and the run's objects in it.
#[derive(Debug)]
pub(crate) struct SharedMemory {
    /// `O_PATH` fd on the directory.
    dir: OwnedFd,
    /// Its device and inode.
    id: (u64, u64),
    /// The absolute spellings of the directory that name it without a walk
    /// (`/dev/shm` and its canonical path), without the leading `/`.
    spellings: Vec<Vec<u8>>,
    /// Whether the calls that are not the run's objects' are let go on in
    /// the kernel (`SECCOMP_USER_NOTIF_FLAG_CONTINUE`): the filter routes
    /// entry calls only for the shared memory, and the command's own
    /// Landlock domain decides the rest. Otherwise the broker performs
    /// every entry call (deny paths beneath the write paths).
    pub(crate) continue_others: bool,
    objects: Mutex<Vec<Object>>,
}

#[derive(Debug)]
struct Object {
    id: (u64, u64),
    /// Holds the inode (and so its number) while it is recorded.
    fd: OwnedFd,
    /// The names the broker gave it.
    names: Vec<CString>,
}

/// The directory's place: a name in it, or elsewhere.
pub(crate) enum Place {
    Shm(CString),
    Elsewhere,
}

impl SharedMemory {
    /// Opens `dir` (`/dev/shm`).
    pub(crate) fn open(dir: &Path, continue_others: bool) -> io::Result<Self> {
        let path = CString::new(dir.as_os_str().as_bytes())
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: NUL-terminated path; a fresh fd or -1.
        let raw = cvt(libc::c_long::from(unsafe {
            libc::open(
                path.as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        }))?;
        // SAFETY: fresh fd.
        let fd = unsafe { OwnedFd::from_raw_fd(raw as RawFd) };
        let st = fstat(&fd)?;
        let mut spellings = vec![trimmed(dir.as_os_str().as_bytes())];
        if let Ok(canonical) = std::fs::canonicalize(dir) {
            let c = trimmed(canonical.as_os_str().as_bytes());
            if !spellings.contains(&c) {
                spellings.push(c);
            }
        }
        Ok(Self {
            dir: fd,
            id: (st.st_dev, st.st_ino),
            spellings,
            continue_others,
            objects: Mutex::new(Vec::new()),
        })
    }

    /// Where `at` names an entry: directly in the directory (by its text
    /// when absolute, by the caller's cwd or dirfd's inode when it is a bare
    /// name), or elsewhere. A path through a symlink, `..` or with a
    /// trailing slash counts as elsewhere (the kernel or the general rules
    /// decide it).
    pub(crate) fn place(&self, caller: &mut Caller, at: &PathArg) -> Place {
        let bytes = at.path.as_bytes();
        if bytes.last() == Some(&b'/') {
            return Place::Elsewhere;
        }
        if bytes.first() == Some(&b'/') {
            let parts: Vec<&[u8]> = bytes
                .split(|b| *b == b'/')
                .filter(|p| !p.is_empty() && *p != b".")
                .collect();
            let Some((name, dir)) = parts.split_last() else {
                return Place::Elsewhere;
            };
            if *name == b".." || dir.contains(&&b".."[..]) {
                return Place::Elsewhere;
            }
            let dir = dir.join(&b'/');
            if self.spellings.contains(&dir) {
                return CString::new(*name).map_or(Place::Elsewhere, Place::Shm);
            }
            return Place::Elsewhere;
        }
        if bytes.is_empty() || bytes.contains(&b'/') || bytes == b"." || bytes == b".." {
            return Place::Elsewhere;
        }
        // A bare name: where the caller's cwd or dirfd is (its inode, read
        // through /proc/TID; the call itself is decided afresh below).
        if caller.open_proc().is_err() {
            return Place::Elsewhere;
        }
        let link = if at.dirfd == libc::AT_FDCWD {
            c"cwd".to_owned()
        } else if at.dirfd >= 0 {
            match CString::new(format!("fd/{}", at.dirfd)) {
                Ok(l) => l,
                Err(_) => return Place::Elsewhere,
            }
        } else {
            return Place::Elsewhere;
        };
        match caller.proc_stat(&link) {
            Ok(st) if (st.st_dev, st.st_ino) == self.id => {
                CString::new(bytes).map_or(Place::Elsewhere, Place::Shm)
            }
            _ => Place::Elsewhere,
        }
    }

    /// Performs `call` when it is a call on the run's own objects (or makes
    /// a new one); `None` when it is not, for the kernel or the general rules
    /// to decide. `names`: the call's names in the directory, in the order
    /// of its paths. The broker thread holds the caller's credentials (and
    /// umask, for a create).
    pub(crate) fn act(
        &self,
        call: &EntryCall,
        names: &[CString],
    ) -> Option<Result<Outcome, Unresolved>> {
        match (call, names) {
            (EntryCall::Open { flags, mode, .. }, [name]) => self.open_entry(name, *flags, *mode),
            (
                EntryCall::Link {
                    follow,
                    empty_path: false,
                    ..
                },
                [from, to],
            ) => self.link(from, to, *follow),
            (EntryCall::Unlink { dir: false, .. }, [name]) => self.unlink(name),
            (EntryCall::Rename { flags, .. }, [from, to]) => self.rename(from, to, *flags),
            _ => None,
        }
    }

    fn open_entry(
        &self,
        name: &CStr,
        flags: i32,
        mode: u32,
    ) -> Option<Result<Outcome, Unresolved>> {
        if flags & (O_TMPFILE_BIT | libc::O_DIRECTORY | libc::O_PATH) != 0 {
            return None;
        }
        let creat = flags & libc::O_CREAT != 0;
        // What the general rules (and the filter, unrouted) refuse of any
        // writing open is refused here too, by them: access mode 3,
        // `O_RDONLY|O_TRUNC`, set-id bits in a creation mode (a confined
        // root made a set-user-ID-root file in /dev/shm otherwise).
        let access = flags & crate::syscalls::O_ACCMODE;
        if access == crate::syscalls::O_ACCMODE
            || (access == libc::O_RDONLY && flags & libc::O_TRUNC != 0)
            || (creat && mode & (libc::S_ISUID | libc::S_ISGID) != 0)
        {
            return None;
        }
        let excl = creat && flags & libc::O_EXCL != 0;
        // Twice: a name made by another process between the look and an
        // `O_CREAT` without `O_EXCL` is then opened as it exists.
        for _ in 0..2 {
            match self.at(name, libc::O_PATH | libc::O_NOFOLLOW) {
                Ok(fd) => {
                    // EEXIST, a symlink, another's file: the kernel's answer.
                    if excl || !self.owns_fd(&fd) {
                        return None;
                    }
                    return Some(reopen(&fd, flags));
                }
                Err(e) if creat && errno_of(&e) == libc::ENOENT => {
                    if !self.room() {
                        return None;
                    }
                    // O_EXCL never follows a final symlink (open(2)); no
                    // O_NOFOLLOW of ours, which F_GETFL would show the caller.
                    let how = (flags & !libc::O_CLOEXEC)
                        | libc::O_CREAT
                        | libc::O_EXCL
                        | libc::O_NOCTTY
                        | libc::O_NONBLOCK
                        | libc::O_CLOEXEC;
                    // SAFETY: openat on our dir fd with a NUL-terminated name.
                    let rc = unsafe {
                        libc::openat(
                            self.dir.as_raw_fd(),
                            name.as_ptr(),
                            how,
                            mode as libc::c_uint,
                        )
                    };
                    if rc < 0 {
                        let errno = errno_of(&io::Error::last_os_error());
                        if errno == libc::EEXIST && !excl {
                            continue;
                        }
                        return Some(Err(Unresolved::Errno(errno)));
                    }
                    // SAFETY: fresh fd.
                    let fd = unsafe { OwnedFd::from_raw_fd(rc) };
                    self.record(&fd, name);
                    let made = Deferred::created(&self.dir, name);
                    return Some(finish_open(fd, flags, made));
                }
                Err(_) => return None,
            }
        }
        None
    }

    fn link(&self, from: &CStr, to: &CStr, follow: bool) -> Option<Result<Outcome, Unresolved>> {
        let nofollow = if follow { 0 } else { libc::O_NOFOLLOW };
        let src = self.at(from, libc::O_PATH | nofollow).ok()?;
        if !self.owns_fd(&src) {
            return None;
        }
        // The very inode checked, by its fd (linkat(2): /proc/self/fd/N
        // with AT_SYMLINK_FOLLOW), never the name again.
        let path = proc_self_fd(src.as_raw_fd());
        // SAFETY: NUL-terminated paths; our own fds.
        let rc = unsafe {
            libc::linkat(
                libc::AT_FDCWD,
                path.as_ptr(),
                self.dir.as_raw_fd(),
                to.as_ptr(),
                libc::AT_SYMLINK_FOLLOW,
            )
        };
        if rc < 0 {
            return Some(Err(Unresolved::Errno(
                errno_of(&io::Error::last_os_error()),
            )));
        }
        if let Ok(st) = fstat(&src) {
            self.with_object((st.st_dev, st.st_ino), |o| o.names.push(to.to_owned()));
        }
        Some(Ok(Outcome::Done(crate::log::BrokerDecision::Performed)))
    }

    fn unlink(&self, name: &CStr) -> Option<Result<Outcome, Unresolved>> {
        let st = fstatat_nofollow(&self.dir, name).ok()?;
        let id = (st.st_dev, st.st_ino);
        if !self.owns(id) {
            return None;
        }
        // SAFETY: our dir fd, a NUL-terminated name.
        if unsafe { libc::unlinkat(self.dir.as_raw_fd(), name.as_ptr(), 0) } < 0 {
            return Some(Err(Unresolved::Errno(
                errno_of(&io::Error::last_os_error()),
            )));
        }
        self.with_object(id, |o| o.names.retain(|n| n.as_c_str() != name));
        self.forget_unlinked();
        Some(Ok(Outcome::Done(crate::log::BrokerDecision::Performed)))
    }

    fn rename(&self, from: &CStr, to: &CStr, flags: u32) -> Option<Result<Outcome, Unresolved>> {
        // RENAME_WHITEOUT leaves a character device at `from` that is none
        // of the run's (it outlived the run); unknown bits: the kernel's
        // EINVAL, from the general rules.
        if flags & !(libc::RENAME_NOREPLACE | libc::RENAME_EXCHANGE) != 0 {
            return None;
        }
        let src = fstatat_nofollow(&self.dir, from).ok()?;
        let src = (src.st_dev, src.st_ino);
        if !self.owns(src) {
            return None;
        }
        let dst = fstatat_nofollow(&self.dir, to)
            .ok()
            .map(|st| (st.st_dev, st.st_ino));
        if dst.is_some_and(|d| !self.owns(d)) {
            return None;
        }
        // SAFETY: our dir fd, NUL-terminated names.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_renameat2,
                self.dir.as_raw_fd(),
                from.as_ptr(),
                self.dir.as_raw_fd(),
                to.as_ptr(),
                flags,
            )
        };
        if rc < 0 {
            return Some(Err(Unresolved::Errno(
                errno_of(&io::Error::last_os_error()),
            )));
        }
        // Two names of one inode: the kernel does nothing and answers 0
        // (`vfs_rename`: source == target), so both names stay recorded
        // (they were left behind after the run otherwise).
        if dst == Some(src) {
            return Some(Ok(Outcome::Done(crate::log::BrokerDecision::Performed)));
        }
        let exchange = flags & libc::RENAME_EXCHANGE != 0;
        self.with_object(src, |o| {
            o.names.retain(|n| n.as_c_str() != from);
            o.names.push(to.to_owned());
        });
        if let Some(d) = dst {
            self.with_object(d, |o| {
                o.names.retain(|n| n.as_c_str() != to);
                if exchange {
                    o.names.push(from.to_owned());
                }
            });
        }
        self.forget_unlinked();
        Some(Ok(Outcome::Done(crate::log::BrokerDecision::Performed)))
    }

    /// The path `name` in the directory has, for the record.
    pub(crate) fn path_of(&self, name: &CStr) -> PathBuf {
        let dir = self.spellings.first().map_or(&[][..], |s| s);
        let mut path = PathBuf::from("/");
        path.push(std::ffi::OsStr::from_bytes(dir));
        path.join(std::ffi::OsStr::from_bytes(name.to_bytes()))
    }

    /// Whether `st` is one of the run's objects (truncate by path).
    pub(crate) fn owns_stat(&self, st: &libc::stat) -> bool {
        self.owns((st.st_dev, st.st_ino))
    }

    /// Removes the names the run's objects still have (the run has ended):
    /// each only while it still names that inode. Returns them.
    pub(crate) fn remove_left(&self) -> Vec<PathBuf> {
        let Ok(mut objects) = self.objects.lock() else {
            return Vec::new();
        };
        let mut removed = Vec::new();
        for o in objects.drain(..) {
            for name in &o.names {
                let same = fstatat_nofollow(&self.dir, name)
                    .is_ok_and(|st| (st.st_dev, st.st_ino) == o.id);
                // SAFETY: our dir fd, a NUL-terminated name.
                if same && unsafe { libc::unlinkat(self.dir.as_raw_fd(), name.as_ptr(), 0) } == 0 {
                    removed.push(self.path_of(name));
                }
            }
        }
        removed
    }

    fn at(&self, name: &CStr, flags: i32) -> io::Result<OwnedFd> {
        // SAFETY: openat on our dir fd with a NUL-terminated name.
        let rc =
            unsafe { libc::openat(self.dir.as_raw_fd(), name.as_ptr(), flags | libc::O_CLOEXEC) };
        let rc = cvt(libc::c_long::from(rc))?;
        // SAFETY: fresh fd.
        Ok(unsafe { OwnedFd::from_raw_fd(rc as RawFd) })
    }

    fn owns_fd(&self, fd: &OwnedFd) -> bool {
        fstat(fd).is_ok_and(|st| {
            st.st_mode & libc::S_IFMT == libc::S_IFREG && self.owns((st.st_dev, st.st_ino))
        })
    }

    fn owns(&self, id: (u64, u64)) -> bool {
        self.objects
            .lock()
            .is_ok_and(|objects| objects.iter().any(|o| o.id == id))
    }

    fn with_object(&self, id: (u64, u64), f: impl FnOnce(&mut Object)) {
        if let Ok(mut objects) = self.objects.lock() {
            if let Some(o) = objects.iter_mut().find(|o| o.id == id) {
                f(o);
            }
        }
    }

    /// Whether another object may be made (objects no name reaches any
    /// more are let go first).
    fn room(&self) -> bool {
        self.forget_unlinked();
        self.objects
            .lock()
            .is_ok_and(|objects| objects.len() < MAX_OBJECTS)
    }

    /// Drops the objects whose inode has no name left (their memory goes
    /// once the run's own fds and mappings are gone).
    fn forget_unlinked(&self) {
        if let Ok(mut objects) = self.objects.lock() {
            objects.retain(|o| fstat(&o.fd).is_ok_and(|st| st.st_nlink > 0));
        }
    }

    /// Records the object `fd` was just made as, under `name`.
    fn record(&self, fd: &OwnedFd, name: &CStr) {
        let Ok(st) = fstat(fd) else { return };
        let path = proc_self_fd(fd.as_raw_fd());
        // An O_PATH fd of the same inode: it holds the number, not the file
        // open for writing (no ETXTBSY for an exec of it).
        // SAFETY: NUL-terminated path naming our own fd.
        let rc = unsafe { libc::open(path.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
        if rc < 0 {
            return;
        }
        // SAFETY: fresh fd.
        let held = unsafe { OwnedFd::from_raw_fd(rc) };
        if let Ok(mut objects) = self.objects.lock() {
            objects.push(Object {
                id: (st.st_dev, st.st_ino),
                fd: held,
                names: vec![name.to_owned()],
            });
        }
    }
}

/// The names `call` has in the directory, when every path it names lies
/// there and it is a call the run's objects take (a writing open, `link`,
/// `unlink`, `rename`); `None` otherwise.
pub(crate) fn names(
    shm: &SharedMemory,
    caller: &mut Caller,
    call: &EntryCall,
) -> Option<Vec<CString>> {
    let paths: Vec<&PathArg> = match call {
        EntryCall::Open { at, .. } | EntryCall::Unlink { at, dir: false } => vec![at],
        EntryCall::Link { from, to, .. } | EntryCall::Rename { from, to, .. } => vec![from, to],
        _ => return None,
    };
    paths
        .into_iter()
        .map(|at| match shm.place(caller, at) {
            Place::Shm(name) => Some(name),
            Place::Elsewhere => None,
        })
        .collect()
}

/// What the seccomp filter refuses of a writing open or `mknod` when it
/// does not route them (`sandbox-seccomp`, `opening`): access mode 3,
/// `O_TRUNC` without write access (a read-only open with it truncates),
/// set-id bits in a creation mode. Routed only for the shared memory, the
/// broker refuses them itself (`EPERM`, as the filter) before it lets any
/// call continue: `nr` and `args` are the registers of the call, which
/// the caller cannot change.
pub(crate) fn filter_refusal(nr: i32, args: [u64; 6]) -> Option<crate::log::Refusal> {
    use crate::log::Refusal;
    let set_id = |mode: u64| mode as u32 & (libc::S_ISUID | libc::S_ISGID) != 0;
    let (flags, mode) = match i64::from(nr) {
        #[cfg(target_arch = "x86_64")]
        libc::SYS_open => (args[1] as i32, args[2]),
        libc::SYS_openat => (args[2] as i32, args[3]),
        #[cfg(target_arch = "x86_64")]
        libc::SYS_creat => (libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC, args[1]),
        #[cfg(target_arch = "x86_64")]
        libc::SYS_mknod => return set_id(args[1]).then_some(Refusal::SetIdBits),
        libc::SYS_mknodat => return set_id(args[2]).then_some(Refusal::SetIdBits),
        _ => return None,
    };
    let access = flags & crate::syscalls::O_ACCMODE;
    if access == crate::syscalls::O_ACCMODE
        || (access == libc::O_RDONLY && flags & libc::O_TRUNC != 0)
    {
        return Some(Refusal::OpenFlags);
    }
    (flags & (libc::O_CREAT | O_TMPFILE_BIT) != 0 && set_id(mode)).then_some(Refusal::SetIdBits)
}

fn trimmed(path: &[u8]) -> Vec<u8> {
    path.split(|b| *b == b'/')
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join(&b'/')
}

fn proc_self_fd(fd: RawFd) -> CString {
    // Digits only: no NUL possible.
    CString::new(format!("/proc/self/fd/{fd}")).unwrap_or_default()
}
