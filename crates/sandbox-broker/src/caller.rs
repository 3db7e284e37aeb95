//! The calling thread: its memory, identity, cwd and fds.
//!
//! Handles are opened before the request id is re-validated, so once
//! `ID_VALID` succeeds they are known to belong to the thread that made the call
//! (a thread id cannot be reused while that thread waits in the syscall).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// `PIDFD_THREAD` (Linux >= 6.9): a pidfd for a thread that need not lead its group.
const PIDFD_THREAD: libc::c_uint = libc::O_EXCL as libc::c_uint;

/// Effective capabilities the rules consult.
pub(crate) const CAP_CHOWN: u32 = 0;
pub(crate) const CAP_DAC_OVERRIDE: u32 = 1;
pub(crate) const CAP_FOWNER: u32 = 3;

/// The thread that made a request.
pub(crate) struct Caller {
    tid: i32,
    /// `/proc/TID`, unless the request needs nothing from it (then every
    /// use fails with `EBADF`).
    proc_dir: Option<OwnedFd>,
    pidfd: Option<OwnedFd>,
}

/// Credentials of the caller, from `/proc/TID/status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Identity {
    pub(crate) euid: u32,
    pub(crate) fsuid: u32,
    pub(crate) fsgid: u32,
    /// fsgid and supplementary groups.
    pub(crate) groups: Vec<u32>,
    /// The supplementary groups alone.
    pub(crate) supplementary: Vec<u32>,
    pub(crate) cap_eff: u64,
    /// The file-mode creation mask (`Umask:`; `0o077` if the kernel does not say).
    pub(crate) umask: u32,
}

impl Identity {
    pub(crate) fn has(&self, cap: u32) -> bool {
        self.cap_eff & (1u64 << cap) != 0
    }
    pub(crate) fn in_group(&self, gid: u32) -> bool {
        self.groups.contains(&gid)
    }
}

pub(crate) fn cvt(rc: libc::c_long) -> io::Result<libc::c_long> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

pub(crate) fn errno_of(err: &io::Error) -> i32 {
    err.raw_os_error().unwrap_or(libc::EIO)
}

impl Caller {
    /// The caller's thread id.
    pub(crate) fn tid(&self) -> i32 {
        self.tid
    }

    /// Opens `/proc/TID` for the thread (see [`Caller::open_pidfd`] for its fds).
    pub(crate) fn open(tid: i32) -> io::Result<Self> {
        let mut caller = Self::unopened(tid);
        caller.open_proc()?;
        Ok(caller)
    }

    /// The thread, with no handle on it yet.
    pub(crate) fn unopened(tid: i32) -> Self {
        Self {
            tid,
            proc_dir: None,
            pidfd: None,
        }
    }

    /// Opens `/proc/TID`; like every handle, before the request id is
    /// re-validated.
    pub(crate) fn open_proc(&mut self) -> io::Result<()> {
        let tid = self.tid;
        let dir = CString::new(format!("/proc/{tid}"))
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        // openat, not open: musl's open follows O_CLOEXEC with an fcntl.
        // SAFETY: plain openat of a NUL-terminated path.
        let fd = cvt(unsafe {
            libc::openat(
                libc::AT_FDCWD,
                dir.as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        } as libc::c_long)?;
        // SAFETY: fd was just returned to us.
        self.proc_dir = Some(unsafe { OwnedFd::from_raw_fd(fd as RawFd) });
        Ok(())
    }

    /// The `/proc/TID` fd [`Caller::open_proc`] opened.
    pub(crate) fn proc_dir(&self) -> io::Result<RawFd> {
        self.proc_dir
            .as_ref()
            .map(AsRawFd::as_raw_fd)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EBADF))
    }

    /// Opens a pidfd for the thread, needed by [`Caller::fd`]; like every
    /// handle, before the request id is re-validated. Without one (kernels
    /// before 6.9 for non-leader threads), fds are reopened via `/proc/TID/fd`.
    pub(crate) fn open_pidfd(&mut self) {
        self.pidfd = [PIDFD_THREAD, 0].into_iter().find_map(|flags| {
            // SAFETY: pidfd_open takes a pid and flags.
            let rc = unsafe { libc::syscall(libc::SYS_pidfd_open, self.tid, flags) };
            // SAFETY: rc is a fresh fd when non-negative.
            (rc >= 0).then(|| unsafe { OwnedFd::from_raw_fd(rc as RawFd) })
        });
    }

    /// The pidfd [`Caller::open_pidfd`] opened, if any.
    pub(crate) fn pidfd(&self) -> Option<&OwnedFd> {
        self.pidfd.as_ref()
    }

    /// Reads `len` bytes at `addr` of the caller's memory.
    pub(crate) fn read(&self, addr: u64, len: usize) -> io::Result<Vec<u8>> {
        let mut out = vec![0u8; len];
        let mut done = 0;
        while done < len {
            let n = self.read_some(addr + done as u64, &mut out[done..])?;
            if n == 0 {
                return Err(io::Error::from_raw_os_error(libc::EFAULT));
            }
            done += n;
        }
        Ok(out)
    }

    fn read_some(&self, addr: u64, buf: &mut [u8]) -> io::Result<usize> {
        if addr == 0 {
            return Err(io::Error::from_raw_os_error(libc::EFAULT));
        }
        let local = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        let remote = libc::iovec {
            iov_base: addr as *mut libc::c_void,
            iov_len: buf.len(),
        };
        // SAFETY: `local` covers `buf`; the remote side is checked by the kernel.
        let n = unsafe { libc::process_vm_readv(self.tid, &local, 1, &remote, 1, 0) };
        cvt(n as libc::c_long).map(|n| n as usize)
    }

    /// Writes `data` at `addr` of the caller's memory with `process_vm_writev`,
    /// which honours page protections as the kernel's own copy to user space
    /// does. `EFAULT` when some byte could not be written.
    pub(crate) fn write(&self, addr: u64, data: &[u8]) -> io::Result<()> {
        let mut done = 0;
        while done < data.len() {
            let at = addr
                .checked_add(done as u64)
                .filter(|a| *a != 0)
                .ok_or_else(|| io::Error::from_raw_os_error(libc::EFAULT))?;
            let rest = &data[done..];
            let local = libc::iovec {
                iov_base: rest.as_ptr() as *mut libc::c_void,
                iov_len: rest.len(),
            };
            let remote = libc::iovec {
                iov_base: at as *mut libc::c_void,
                iov_len: rest.len(),
            };
            // SAFETY: `local` covers `rest`, which the kernel only reads; the
            // remote side is checked by the kernel.
            let n = unsafe { libc::process_vm_writev(self.tid, &local, 1, &remote, 1, 0) };
            match cvt(n as libc::c_long) {
                Ok(0) => return Err(io::Error::from_raw_os_error(libc::EFAULT)),
                Ok(n) => done += n as usize,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Device and inode of the caller's user namespace (`/proc/TID/ns/user`).
    pub(crate) fn user_ns(&self) -> io::Result<(u64, u64)> {
        // SAFETY: stat is plain data; fstatat fills it.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        let dir = self.proc_dir()?;
        // SAFETY: fstatat relative to our /proc/TID fd, following the ns link on purpose.
        let rc = unsafe { libc::fstatat(dir, c"ns/user".as_ptr(), &mut st, 0) };
        cvt(rc as libc::c_long)?;
        Ok((st.st_dev, st.st_ino))
    }

    /// Reads a NUL-terminated string of at most `max` bytes (NUL included).
    ///
    /// Reads page by page, since a string may end just before an unmapped page.
    pub(crate) fn read_cstr(&self, addr: u64, max: usize) -> io::Result<CString> {
        const PAGE: u64 = 4096;
        let mut out = Vec::new();
        let mut at = addr;
        // On the stack: a fresh heap page per call costs a page fault.
        let mut page = [0u8; PAGE as usize];
        while out.len() < max {
            let to_page_end = (PAGE - at % PAGE) as usize;
            let want = to_page_end.min(max - out.len());
            let chunk = &mut page[..want];
            let n = self.read_some(at, chunk)?;
            if n == 0 {
                return Err(io::Error::from_raw_os_error(libc::EFAULT));
            }
            if let Some(nul) = chunk[..n].iter().position(|&b| b == 0) {
                out.extend_from_slice(&chunk[..nul]);
                // No interior NUL by construction.
                return CString::new(out).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL));
            }
            out.extend_from_slice(&chunk[..n]);
            at += n as u64;
        }
        Err(io::Error::from_raw_os_error(libc::ENAMETOOLONG))
    }

    /// The caller's credentials.
    pub(crate) fn identity(&self) -> io::Result<Identity> {
        // CapEff follows every other line parse_status needs but Umask,
        // which comes second.
        self.read_proc_file(c"status", |t| has_line(t, b"\nCapEff:"), parse_status)?
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))
    }

    /// The caller's umask alone (`Umask:` in `/proc/TID/status`, Linux
    /// 4.7+; `0o077` if the kernel does not say, as [`Caller::identity`]).
    pub(crate) fn umask(&self) -> io::Result<u32> {
        self.read_proc_file(c"status", |t| has_line(t, b"\nUmask:"), parse_umask)
    }

    /// The caller's controlling terminal (`tty_nr` in `/proc/TID/stat`, 0 for none).
    ///
    /// By path when `/proc/TID` was not opened for this request: the thread
    /// waits for the answer, so its id names it (a thread killed meanwhile
    /// makes the answer void, whatever was read).
    pub(crate) fn controlling_tty(&self) -> io::Result<u64> {
        let parsed = if self.proc_dir.is_some() {
            self.read_proc_file(c"stat", |_| false, parse_tty_nr)?
        } else {
            parse_tty_nr(&std::fs::read_to_string(format!(
                "/proc/{}/stat",
                self.tid
            ))?)
        };
        parsed.ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))
    }

    /// Reads `/proc/TID/NAME` until `enough` says the text read holds what is
    /// needed, or to its end, and parses it.
    fn read_proc_file<T>(
        &self,
        name: &std::ffi::CStr,
        enough: impl Fn(&[u8]) -> bool,
        parse: impl FnOnce(&str) -> T,
    ) -> io::Result<T> {
        use std::io::Read;
        // SAFETY: openat relative to our /proc/TID fd.
        let fd = cvt(unsafe {
            libc::openat(
                self.proc_dir()?,
                name.as_ptr(),
                libc::O_RDONLY | libc::O_CLOEXEC,
            )
        } as libc::c_long)?;
        // SAFETY: fresh fd, owned by the File from here on.
        let mut file = unsafe { std::fs::File::from_raw_fd(fd as RawFd) };
        // One read takes the whole file (procfs renders it on the first
        // read); read_to_string would stat it and probe with small reads
        // first, each a syscall on every brokered call.
        // The first 4 KiB on the stack (a status file is about 1.5 KiB): a
        // fresh heap buffer per call costs a page fault.
        let mut first = [0u8; 4096];
        let mut more = Vec::new();
        let mut len = 0;
        loop {
            let buf: &mut [u8] = if more.is_empty() && len < first.len() {
                &mut first
            } else {
                if more.is_empty() {
                    more.extend_from_slice(&first);
                }
                if len == more.len() {
                    more.resize(len * 2, 0);
                }
                &mut more
            };
            match file.read(&mut buf[len..]) {
                Ok(0) => break,
                Ok(n) => {
                    len += n;
                    // procfs renders the whole file on the first read and
                    // hands out as much as fits: usually no second read.
                    if enough(&buf[..len]) {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        let text = if more.is_empty() {
            &first[..len]
        } else {
            &more[..len]
        };
        std::str::from_utf8(text)
            .map(parse)
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
    }

    /// The device and inode of what `link` (`cwd`, `fd/N`) in the caller's
    /// `/proc/TID` reaches (the magic link followed).
    pub(crate) fn proc_stat(&self, link: &std::ffi::CStr) -> io::Result<libc::stat> {
        // SAFETY: stat is plain data; fstatat fills it.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: our /proc/TID fd, a NUL-terminated name, a live out-pointer.
        cvt(libc::c_long::from(unsafe {
            libc::fstatat(self.proc_dir()?, link.as_ptr(), &mut st, 0)
        }))?;
        Ok(st)
    }

    /// The `stat` of `link` in the caller's `/proc/TID`, not followed: the
    /// entry itself (`fd/N` exists while the caller's fd N is open).
    pub(crate) fn proc_lstat(&self, link: &std::ffi::CStr) -> io::Result<libc::stat> {
        // SAFETY: stat is plain data; fstatat fills it.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: our /proc/TID fd, a NUL-terminated name, a live out-pointer.
        cvt(libc::c_long::from(unsafe {
            libc::fstatat(
                self.proc_dir()?,
                link.as_ptr(),
                &mut st,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        }))?;
        Ok(st)
    }

    /// Whether the caller's fd table has no free slot: its lowest unused fd
    /// number is at or past its `RLIMIT_NOFILE` soft limit, where the
    /// kernel's `alloc_fd` answers `EMFILE` (`prlimit`, else
    /// `/proc/TID/limits`; then `/proc/TID/fd`). `false` when they cannot be
    /// read.
    pub(crate) fn fd_table_full(&self) -> bool {
        let Some(soft) = self.nofile_soft().and_then(|n| usize::try_from(n).ok()) else {
            return false;
        };
        if soft == 0 {
            return true;
        }
        // The last slot free: there is room (the usual case, one lookup).
        let Ok(last) = CString::new(format!("/proc/{}/fd/{}", self.tid, soft - 1)) else {
            return false;
        };
        // SAFETY: stat is plain data; lstat fills it.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a NUL-terminated path and a live out-pointer; the magic
        // link itself, not followed.
        if unsafe { libc::lstat(last.as_ptr(), &mut st) } != 0 {
            return false;
        }
        let Ok(fds) = std::fs::read_dir(format!("/proc/{}/fd", self.tid)) else {
            return false;
        };
        // Which numbers below the limit are taken.
        let mut used = vec![false; soft.min(1 << 20)];
        for entry in fds.flatten() {
            if let Some(n) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<usize>().ok())
            {
                if let Some(slot) = used.get_mut(n) {
                    *slot = true;
                }
            }
        }
        used.len() == soft && used.iter().all(|&u| u)
    }

    /// The caller's `RLIMIT_NOFILE` soft limit: `prlimit` (same ids or
    /// `CAP_SYS_RESOURCE`), else `/proc/TID/limits`.
    fn nofile_soft(&self) -> Option<u64> {
        // SAFETY: rlimit is plain data; prlimit fills it.
        let mut old: libc::rlimit = unsafe { std::mem::zeroed() };
        // SAFETY: no new limit, a live out-pointer.
        if unsafe { libc::prlimit(self.tid, libc::RLIMIT_NOFILE, std::ptr::null(), &mut old) } == 0
        {
            return Some(old.rlim_cur);
        }
        let limits = std::fs::read_to_string(format!("/proc/{}/limits", self.tid)).ok()?;
        limits
            .lines()
            .find_map(|l| l.strip_prefix("Max open files"))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse::<u64>().ok())
    }

    /// An `O_PATH` fd on the caller's working directory.
    pub(crate) fn cwd(&self) -> io::Result<OwnedFd> {
        // SAFETY: openat relative to our /proc/TID fd; the magic link is followed on purpose.
        let fd = cvt(unsafe {
            libc::openat(
                self.proc_dir()?,
                c"cwd".as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        } as libc::c_long)?;
        // SAFETY: fresh fd.
        Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
    }

    /// A duplicate of the caller's fd `n` (`pidfd_getfd`; `/proc/TID/fd/N`
    /// opened `O_PATH` on kernels without thread pidfds).
    pub(crate) fn fd(&self, n: i32) -> io::Result<OwnedFd> {
        if n < 0 {
            return Err(io::Error::from_raw_os_error(libc::EBADF));
        }
        if self.pidfd.is_some() {
            return self.dup_fd(n);
        }
        let path = CString::new(format!("fd/{n}"))
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: openat relative to our /proc/TID fd.
        let fd = cvt(unsafe {
            libc::openat(
                self.proc_dir()?,
                path.as_ptr(),
                libc::O_PATH | libc::O_CLOEXEC,
            )
        } as libc::c_long)?;
        // SAFETY: fresh fd.
        Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
    }
}

impl Caller {
    /// A duplicate of the caller's fd `n` sharing its open file description
    /// (`pidfd_getfd`), so that acting on it acts on the caller's own file
    /// (connecting a socket). Needs [`Caller::open_pidfd`]; without a pidfd
    /// (`ENOSYS`) there is no such duplicate: the `/proc/TID/fd` fallback of
    /// [`Caller::fd`] opens a new file.
    pub(crate) fn dup_fd(&self, n: i32) -> io::Result<OwnedFd> {
        if n < 0 {
            return Err(io::Error::from_raw_os_error(libc::EBADF));
        }
        let Some(pidfd) = &self.pidfd else {
            return Err(io::Error::from_raw_os_error(libc::ENOSYS));
        };
        // SAFETY: pidfd_getfd(pidfd, targetfd, flags) returns a new fd.
        let rc = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), n, 0) };
        let fd = cvt(rc)?;
        // SAFETY: fresh fd (pidfd_getfd sets close-on-exec).
        Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
    }
}

/// Whether `text` holds a complete line starting with `key` (`key` begins
/// with the newline ending the line before).
fn has_line(text: &[u8], key: &[u8]) -> bool {
    text.windows(key.len())
        .position(|w| w == key)
        .is_some_and(|at| text[at + key.len()..].contains(&b'\n'))
}

fn parse_umask(text: &str) -> u32 {
    text.lines()
        .find_map(|l| l.strip_prefix("Umask:"))
        .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        .unwrap_or(0o077)
        & 0o777
}

fn parse_status(text: &str) -> Option<Identity> {
    let ids = |key: &str| -> Option<Vec<u32>> {
        let line = text.lines().find(|l| l.starts_with(key))?;
        line[key.len()..]
            .split_whitespace()
            .map(|v| v.parse().ok())
            .collect()
    };
    let uids = ids("Uid:")?;
    let gids = ids("Gid:")?;
    let supplementary = ids("Groups:").unwrap_or_default();
    let mut groups = supplementary.clone();
    let cap_eff = text
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())?;
    let umask = parse_umask(text);
    let (euid, fsuid) = (*uids.get(1)?, *uids.get(3)?);
    let fsgid = *gids.get(3)?;
    groups.push(fsgid);
    Some(Identity {
        euid,
        fsuid,
        fsgid,
        groups,
        supplementary,
        cap_eff,
        umask,
    })
}

/// The runner's own controlling terminal (`tty_nr` of `/proc/self/stat`).
pub(crate) fn own_controlling_tty() -> io::Result<u64> {
    let text = std::fs::read_to_string("/proc/self/stat")?;
    parse_tty_nr(&text).ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))
}

/// `tty_nr`, the 7th field of a `stat` file (proc(5)); the command name
/// (field 2) may hold spaces and parentheses, so fields count from its last `)`.
fn parse_tty_nr(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let tty: i64 = rest.split_ascii_whitespace().nth(4)?.parse().ok()?;
    u64::try_from(tty).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_is_parsed() {
        let text = "Name:\tx\nUmask:\t0027\nUid:\t1000\t1001\t1002\t1003\nGid:\t50\t51\t52\t53\nGroups:\t7 8 \nCapEff:\t0000000000000009\n";
        let id = parse_status(text).expect("parses");
        assert_eq!(id.euid, 1001);
        assert_eq!(id.fsuid, 1003);
        assert_eq!(id.fsgid, 53);
        assert_eq!(id.groups, vec![7, 8, 53]);
        assert_eq!(id.supplementary, vec![7, 8]);
        assert_eq!(id.umask, 0o027);
        assert!(id.has(CAP_CHOWN) && id.has(CAP_FOWNER) && !id.has(CAP_DAC_OVERRIDE));
    }

    #[test]
    fn a_line_counts_once_it_is_complete() {
        assert!(has_line(b"Name:\tx\nUmask:\t0022\nState", b"\nUmask:"));
        assert!(!has_line(b"Name:\tx\nUmask:\t00", b"\nUmask:"));
        assert!(!has_line(b"Name:\tx\nState:\tR\n", b"\nUmask:"));
        assert_eq!(parse_umask("Name:\tx\nUmask:\t0027\n"), 0o027);
        assert_eq!(parse_umask("Name:\tx\n"), 0o077);
    }

    #[test]
    fn status_without_caps_is_rejected() {
        assert_eq!(parse_status("Uid:\t1\t1\t1\t1\nGid:\t1\t1\t1\t1\n"), None);
    }

    #[test]
    fn tty_nr_counts_fields_from_the_last_parenthesis() {
        let stat = "42 (a) b (c)) S 1 42 42 34817 42 4194560";
        assert_eq!(super::parse_tty_nr(stat), Some(34817));
        assert_eq!(super::parse_tty_nr("1 (x) S 0 1 1 0 -1"), Some(0));
        assert_eq!(super::parse_tty_nr("garbage"), None);
    }
}
