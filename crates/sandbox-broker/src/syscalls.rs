//! How the arguments of a brokered syscall are read from the caller. Which
//! calls are brokered, and by which handler, is the seccomp table's
//! ([`sandbox_seccomp::handler`]).

use std::ffi::CString;
use std::io;

use sandbox_seccomp::{EntryForm, Handler, MetaForm, XattrForm};

use crate::caller::Caller;

/// Kernel limits on xattr names (with NUL), values and name lists.
const XATTR_NAME_MAX: usize = 255;
pub(crate) const XATTR_SIZE_MAX: usize = 65536;
pub(crate) const XATTR_LIST_MAX: usize = 65536;
const PATH_MAX: usize = libc::PATH_MAX as usize;

/// The object a request names.
#[derive(Debug)]
pub(crate) enum Subject {
    /// One of the caller's fds.
    Fd(i32),
    /// A path relative to a dirfd (or the cwd for `AT_FDCWD`).
    At {
        dirfd: i32,
        path: CString,
        follow: bool,
        /// `AT_EMPTY_PATH`: an empty path names the dirfd itself.
        empty_path: bool,
    },
}

impl Subject {
    /// Whether resolving it needs one of the caller's fds.
    pub(crate) fn needs_fd(&self) -> bool {
        match self {
            Subject::Fd(_) => true,
            Subject::At { dirfd, path, .. } => {
                (*dirfd != libc::AT_FDCWD && path.as_bytes().first() != Some(&b'/'))
                    || proc_fd(path.as_bytes(), None).is_some()
                    || dev_fd(path.as_bytes()).is_some()
            }
        }
    }
}

/// The fd number in `/proc/self/fd/N`, `/proc/thread-self/fd/N` or
/// `/proc/TID/fd/N` (TID the caller's thread, when `tid` is given): such a
/// path names the caller's own fd N, which tools like tar use to chmod a file
/// they hold open.
pub(crate) fn proc_fd(path: &[u8], tid: Option<i32>) -> Option<i32> {
    let text = std::str::from_utf8(path).ok()?;
    let mut parts = text.split('/').filter(|c| !c.is_empty());
    if parts.next()? != "proc" || !text.starts_with('/') {
        return None;
    }
    let who = parts.next()?;
    let own = who == "self"
        || who == "thread-self"
        || match tid {
            Some(tid) => who.parse::<i32>().ok() == Some(tid),
            None => who.bytes().all(|b| b.is_ascii_digit()),
        };
    if !own || parts.next()? != "fd" {
        return None;
    }
    let n = parts.next()?;
    if parts.next().is_some() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    n.parse().ok()
}

/// What to do to the object.
#[derive(Debug)]
pub(crate) enum Op {
    Chmod {
        mode: u32,
    },
    Chown {
        uid: Option<u32>,
        gid: Option<u32>,
    },
    SetXattr {
        name: CString,
        value: Vec<u8>,
        flags: i32,
    },
    RemoveXattr {
        name: CString,
    },
    /// `None`: both "now".
    Times {
        times: Option<[libc::timespec; 2]>,
    },
    Truncate {
        len: i64,
    },
    /// Read one attribute into the caller's `buf` of `size` bytes (already
    /// clamped to `XATTR_SIZE_MAX`; 0 asks for the length).
    GetXattr {
        name: CString,
        size: usize,
        buf: u64,
    },
    /// List the attribute names into the caller's `buf` of `size` bytes
    /// (clamped to `XATTR_LIST_MAX`; 0 asks for the length).
    ListXattr {
        size: usize,
        buf: u64,
    },
}

impl Op {
    /// Whether the op only reads (xattr reads): admitted anywhere on the read
    /// surface, not only beneath the write paths.
    pub(crate) fn is_read(&self) -> bool {
        matches!(self, Op::GetXattr { .. } | Op::ListXattr { .. })
    }
}

fn err(errno: i32) -> io::Error {
    io::Error::from_raw_os_error(errno)
}

fn at(dirfd: u64, path: CString, follow: bool, flags: u64) -> Subject {
    Subject::At {
        dirfd: dirfd as i32,
        path,
        follow: follow && flags & libc::AT_SYMLINK_NOFOLLOW as u64 == 0,
        empty_path: flags & libc::AT_EMPTY_PATH as u64 != 0,
    }
}

fn check_flags(flags: u64, allowed: i32) -> io::Result<()> {
    if flags & !(allowed as u64) != 0 {
        return Err(err(libc::EINVAL));
    }
    Ok(())
}

fn id(arg: u64) -> Option<u32> {
    let v = arg as u32;
    (v != u32::MAX).then_some(v)
}

/// A decoded request: a metadata operation on one object, or an entry call.
#[derive(Debug)]
pub(crate) enum Request {
    Meta(Subject, Op),
    Entry(EntryCall),
    /// A call the kernel answers with 0 without looking at its path:
    /// `utimensat` with both times `UTIME_OMIT` ("Nothing to do, we must not
    /// even check the path", fs/utimes.c).
    Nothing,
}

/// Reads the arguments of a call `handler` handles from the caller: a
/// metadata change, an xattr read or an entry call (the other handlers read
/// their arguments themselves; `ENOSYS` here).
///
/// Errors are what the kernel would answer (`EFAULT`, `EINVAL`, `ERANGE`,
/// `E2BIG`, `ENAMETOOLONG`) or a failure to read the caller at all.
pub(crate) fn decode(handler: Handler, a: [u64; 6], caller: &Caller) -> io::Result<Request> {
    match handler {
        Handler::Entry(form) => decode_entry(form, a, caller).map(Request::Entry),
        Handler::Metadata(MetaForm::Utimensat) if a[2] != 0 => {
            let [_, n0, _, n1] = words::<4>(caller, a[2])?;
            if n0 == libc::UTIME_OMIT && n1 == libc::UTIME_OMIT {
                return Ok(Request::Nothing);
            }
            decode_meta(MetaForm::Utimensat, a, caller)
                .map(|(subject, op)| Request::Meta(subject, op))
        }
        Handler::Metadata(form) => {
            decode_meta(form, a, caller).map(|(subject, op)| Request::Meta(subject, op))
        }
        Handler::XattrRead(form) => {
            decode_read(form, a, caller).map(|(subject, op)| Request::Meta(subject, op))
        }
        _ => Err(err(libc::ENOSYS)),
    }
}

fn decode_meta(form: MetaForm, a: [u64; 6], caller: &Caller) -> io::Result<(Subject, Op)> {
    let path = |addr: u64| caller.read_cstr(addr, PATH_MAX);
    let mode = |arg: u64| Op::Chmod {
        mode: arg as u32 & 0o7777,
    };
    let chown = |u: u64, g: u64| Op::Chown {
        uid: id(u),
        gid: id(g),
    };
    let nofollow_ok = libc::AT_SYMLINK_NOFOLLOW | libc::AT_EMPTY_PATH;
    Ok(match form {
        MetaForm::Chmod => (at(libc::AT_FDCWD as u64, path(a[0])?, true, 0), mode(a[1])),
        MetaForm::Fchmod => (Subject::Fd(a[0] as i32), mode(a[1])),
        MetaForm::Fchmodat => (at(a[0], path(a[1])?, true, 0), mode(a[2])),
        MetaForm::Fchmodat2 => {
            check_flags(a[3], nofollow_ok)?;
            (at(a[0], path(a[1])?, true, a[3]), mode(a[2]))
        }
        MetaForm::Chown => (
            at(libc::AT_FDCWD as u64, path(a[0])?, true, 0),
            chown(a[1], a[2]),
        ),
        MetaForm::Lchown => (
            at(libc::AT_FDCWD as u64, path(a[0])?, false, 0),
            chown(a[1], a[2]),
        ),
        MetaForm::Fchown => (Subject::Fd(a[0] as i32), chown(a[1], a[2])),
        MetaForm::Fchownat => {
            check_flags(a[4], nofollow_ok)?;
            (at(a[0], path(a[1])?, true, a[4]), chown(a[2], a[3]))
        }
        MetaForm::Setxattr | MetaForm::Lsetxattr => {
            let subject = at(
                libc::AT_FDCWD as u64,
                path(a[0])?,
                form == MetaForm::Setxattr,
                0,
            );
            (subject, set_xattr(caller, a[1], a[2], a[3], a[4])?)
        }
        MetaForm::Fsetxattr => (
            Subject::Fd(a[0] as i32),
            set_xattr(caller, a[1], a[2], a[3], a[4])?,
        ),
        MetaForm::Removexattr | MetaForm::Lremovexattr => {
            let subject = at(
                libc::AT_FDCWD as u64,
                path(a[0])?,
                form == MetaForm::Removexattr,
                0,
            );
            (
                subject,
                Op::RemoveXattr {
                    name: xattr_name(caller, a[1])?,
                },
            )
        }
        MetaForm::Fremovexattr => (
            Subject::Fd(a[0] as i32),
            Op::RemoveXattr {
                name: xattr_name(caller, a[1])?,
            },
        ),
        MetaForm::Utimensat => {
            check_flags(a[3], nofollow_ok)?;
            let times = Op::Times {
                times: timespecs(caller, a[2])?,
            };
            if a[1] == 0 {
                // utimensat(fd, NULL, ...) acts on the fd itself.
                if a[0] as i32 == libc::AT_FDCWD {
                    return Err(err(libc::EFAULT));
                }
                if a[3] & libc::AT_SYMLINK_NOFOLLOW as u64 != 0 {
                    return Err(err(libc::EINVAL));
                }
                (Subject::Fd(a[0] as i32), times)
            } else {
                (at(a[0], path(a[1])?, true, a[3]), times)
            }
        }
        MetaForm::Utimes => (
            at(libc::AT_FDCWD as u64, path(a[0])?, true, 0),
            Op::Times {
                times: timevals(caller, a[1])?,
            },
        ),
        MetaForm::Futimesat => {
            let times = Op::Times {
                times: timevals(caller, a[2])?,
            };
            // do_utimes (fs/utimes.c): a NULL path with a real dirfd acts on
            // the fd itself (EBADF for a bad one), as utimensat's.
            if a[1] == 0 && a[0] as i32 != libc::AT_FDCWD {
                (Subject::Fd(a[0] as i32), times)
            } else {
                (at(a[0], path(a[1])?, true, 0), times)
            }
        }
        MetaForm::Utime => (
            at(libc::AT_FDCWD as u64, path(a[0])?, true, 0),
            Op::Times {
                times: utimbuf(caller, a[1])?,
            },
        ),
        MetaForm::Truncate => {
            let len = a[1] as i64;
            if len < 0 {
                return Err(err(libc::EINVAL));
            }
            (
                at(libc::AT_FDCWD as u64, path(a[0])?, true, 0),
                Op::Truncate { len },
            )
        }
        _ => return Err(err(libc::ENOSYS)),
    })
}

fn decode_read(form: XattrForm, a: [u64; 6], caller: &Caller) -> io::Result<(Subject, Op)> {
    let path = |addr: u64| caller.read_cstr(addr, PATH_MAX);
    Ok(match form {
        XattrForm::Getxattr | XattrForm::Lgetxattr => {
            let subject = at(
                libc::AT_FDCWD as u64,
                path(a[0])?,
                form == XattrForm::Getxattr,
                0,
            );
            (subject, get_xattr(caller, a[1], a[2], a[3])?)
        }
        XattrForm::Fgetxattr => (
            Subject::Fd(a[0] as i32),
            get_xattr(caller, a[1], a[2], a[3])?,
        ),
        XattrForm::Listxattr | XattrForm::Llistxattr => {
            let subject = at(
                libc::AT_FDCWD as u64,
                path(a[0])?,
                form == XattrForm::Listxattr,
                0,
            );
            (subject, list_xattr(a[1], a[2]))
        }
        XattrForm::Flistxattr => (Subject::Fd(a[0] as i32), list_xattr(a[1], a[2])),
        _ => return Err(err(libc::ENOSYS)),
    })
}

/// A path argument of an entry call, relative to `dirfd` (`AT_FDCWD`: the cwd).
#[derive(Debug)]
pub(crate) struct PathArg {
    pub(crate) dirfd: i32,
    pub(crate) path: CString,
}

impl PathArg {
    fn is_absolute(&self) -> bool {
        self.path.as_bytes().first() == Some(&b'/')
    }

    fn needs_fd(&self) -> bool {
        let bytes = self.path.as_bytes();
        (self.dirfd != libc::AT_FDCWD && bytes.first() != Some(&b'/'))
            || proc_fd(bytes, None).is_some()
            || dev_fd(bytes).is_some()
    }
}

/// A writing open or a directory-entry call, as the kernel would take it.
#[derive(Debug)]
pub(crate) enum EntryCall {
    /// `flags` as the kernel keeps them (unknown bits dropped, `O_PATH`
    /// narrowed to its flags); `mode` only when creating.
    Open {
        at: PathArg,
        flags: i32,
        mode: u32,
    },
    Mknod {
        at: PathArg,
        mode: u32,
        dev: u32,
    },
    Mkdir {
        at: PathArg,
        mode: u32,
    },
    /// `dir`: `rmdir` or `AT_REMOVEDIR`.
    Unlink {
        at: PathArg,
        dir: bool,
    },
    Rename {
        from: PathArg,
        to: PathArg,
        flags: u32,
    },
    /// `follow`: `AT_SYMLINK_FOLLOW`; `empty_path`: `AT_EMPTY_PATH`.
    Link {
        from: PathArg,
        to: PathArg,
        follow: bool,
        empty_path: bool,
    },
    Symlink {
        target: CString,
        at: PathArg,
    },
}

impl EntryCall {
    /// Whether it creates an object with a mode the umask applies to
    /// (`O_CREAT` or `O_TMPFILE` opens, `mkdir`, `mknod`); symlinks and
    /// links take no mode.
    pub(crate) fn applies_umask(&self) -> bool {
        match self {
            EntryCall::Open { flags, .. } => flags & (libc::O_CREAT | O_TMPFILE_BIT) != 0,
            EntryCall::Mknod { .. } | EntryCall::Mkdir { .. } => true,
            _ => false,
        }
    }

    /// Whether every path it names is absolute (none starts at the caller's
    /// working directory or an fd).
    pub(crate) fn paths_absolute(&self) -> bool {
        match self {
            EntryCall::Open { at, .. }
            | EntryCall::Mknod { at, .. }
            | EntryCall::Mkdir { at, .. }
            | EntryCall::Unlink { at, .. }
            | EntryCall::Symlink { at, .. } => at.is_absolute(),
            EntryCall::Rename { from, to, .. } | EntryCall::Link { from, to, .. } => {
                from.is_absolute() && to.is_absolute()
            }
        }
    }

    /// Whether resolving it needs one of the caller's fds.
    pub(crate) fn needs_fd(&self) -> bool {
        match self {
            EntryCall::Open { at, .. }
            | EntryCall::Mknod { at, .. }
            | EntryCall::Mkdir { at, .. }
            | EntryCall::Unlink { at, .. }
            | EntryCall::Symlink { at, .. } => at.needs_fd(),
            EntryCall::Rename { from, to, .. } | EntryCall::Link { from, to, .. } => {
                from.needs_fd() || to.needs_fd()
            }
        }
    }
}

/// The access mode bits of open flags, as the kernel defines them
/// (include/uapi/asm-generic/fcntl.h: `O_ACCMODE 00000003`). Not
/// `libc::O_ACCMODE`: musl's adds `O_SEARCH` (its `O_PATH`), so access mode
/// 3 compared against it would go unnoticed in the static (musl) CLI.
pub(crate) const O_ACCMODE: i32 = 3;

/// The kernel's `O_LARGEFILE` (libc defines it as 0 on 64-bit targets).
#[cfg(target_arch = "x86_64")]
const O_LARGEFILE: i32 = 0o100000;
#[cfg(target_arch = "aarch64")]
const O_LARGEFILE: i32 = 0o400000;
/// `__O_TMPFILE`: `O_TMPFILE` without its `O_DIRECTORY`.
pub(crate) const O_TMPFILE_BIT: i32 = libc::O_TMPFILE & !libc::O_DIRECTORY;
/// `VALID_OPEN_FLAGS` (include/linux/fcntl.h).
const VALID_OPEN_FLAGS: i32 = O_ACCMODE
    | libc::O_CREAT
    | libc::O_EXCL
    | libc::O_NOCTTY
    | libc::O_TRUNC
    | libc::O_APPEND
    | libc::O_NONBLOCK
    | libc::O_SYNC
    | libc::O_DSYNC
    | libc::O_ASYNC
    | libc::O_DIRECT
    | O_LARGEFILE
    | libc::O_DIRECTORY
    | libc::O_NOFOLLOW
    | libc::O_NOATIME
    | libc::O_CLOEXEC
    | libc::O_PATH
    | O_TMPFILE_BIT;
/// `O_PATH_FLAGS` (fs/open.c).
const O_PATH_FLAGS: i32 = libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_PATH | libc::O_CLOEXEC;

/// `open`/`openat` flags and mode as `build_open_how` and `build_open_flags`
/// (fs/open.c) take them: unknown bits are dropped, `O_PATH` keeps only its
/// flags, the mode counts only when creating; `O_CREAT | O_DIRECTORY` and a
/// malformed `O_TMPFILE` are `EINVAL`.
pub(crate) fn open_flags(raw: u64, mode: u64) -> io::Result<(i32, u32)> {
    let mut flags = (raw as u32 as i32) & VALID_OPEN_FLAGS;
    if flags & libc::O_PATH != 0 {
        flags &= O_PATH_FLAGS;
    }
    let creates = flags & (libc::O_CREAT | O_TMPFILE_BIT) != 0;
    // umode_t is 16 bits wide.
    let mode = if creates {
        u32::from(mode as u16) & 0o7777
    } else {
        0
    };
    if flags & (libc::O_DIRECTORY | libc::O_CREAT) == libc::O_DIRECTORY | libc::O_CREAT {
        return Err(err(libc::EINVAL));
    }
    if flags & O_TMPFILE_BIT != 0 {
        let mask = libc::O_TMPFILE | libc::O_CREAT;
        let writes = matches!(flags & O_ACCMODE, libc::O_WRONLY | libc::O_RDWR);
        if flags & mask != libc::O_TMPFILE || !writes {
            return Err(err(libc::EINVAL));
        }
    }
    Ok((flags, mode))
}

/// `/dev/stdin`, `/dev/stdout`, `/dev/stderr` and `/dev/fd/N`: the fd number
/// the path names through its `/proc/self/fd` symlink, lexically.
pub(crate) fn dev_fd(path: &[u8]) -> Option<i32> {
    let text = std::str::from_utf8(path).ok()?;
    if !text.starts_with('/') {
        return None;
    }
    let parts: Vec<&str> = text.split('/').filter(|c| !c.is_empty()).collect();
    match parts.as_slice() {
        ["dev", "stdin"] => Some(0),
        ["dev", "stdout"] => Some(1),
        ["dev", "stderr"] => Some(2),
        ["dev", "fd", n] if n.bytes().all(|b| b.is_ascii_digit()) => n.parse().ok(),
        _ => None,
    }
}

fn decode_entry(form: EntryForm, a: [u64; 6], caller: &Caller) -> io::Result<EntryCall> {
    let path = |addr: u64| caller.read_cstr(addr, PATH_MAX);
    let cwd = |addr: u64| -> io::Result<PathArg> {
        Ok(PathArg {
            dirfd: libc::AT_FDCWD,
            path: path(addr)?,
        })
    };
    let at = |dirfd: u64, addr: u64| -> io::Result<PathArg> {
        Ok(PathArg {
            dirfd: dirfd as i32,
            path: path(addr)?,
        })
    };
    // umode_t is 16 bits wide; flags and dev are ints.
    let mode16 = |arg: u64| u32::from(arg as u16);
    let int = |arg: u64| arg as u32;
    Ok(match form {
        EntryForm::Open => {
            let (flags, mode) = open_flags(a[1], a[2])?;
            EntryCall::Open {
                at: cwd(a[0])?,
                flags,
                mode,
            }
        }
        EntryForm::Openat => {
            let (flags, mode) = open_flags(a[2], a[3])?;
            EntryCall::Open {
                at: at(a[0], a[1])?,
                flags,
                mode,
            }
        }
        EntryForm::Creat => {
            let flags = (libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC | O_LARGEFILE) as u64;
            let (flags, mode) = open_flags(flags, a[1])?;
            EntryCall::Open {
                at: cwd(a[0])?,
                flags,
                mode,
            }
        }
        EntryForm::Mknod => EntryCall::Mknod {
            at: cwd(a[0])?,
            mode: mode16(a[1]),
            dev: int(a[2]),
        },
        EntryForm::Mknodat => EntryCall::Mknod {
            at: at(a[0], a[1])?,
            mode: mode16(a[2]),
            dev: int(a[3]),
        },
        EntryForm::Mkdir => EntryCall::Mkdir {
            at: cwd(a[0])?,
            mode: mode16(a[1]),
        },
        EntryForm::Mkdirat => EntryCall::Mkdir {
            at: at(a[0], a[1])?,
            mode: mode16(a[2]),
        },
        EntryForm::Unlink => EntryCall::Unlink {
            at: cwd(a[0])?,
            dir: false,
        },
        EntryForm::Rmdir => EntryCall::Unlink {
            at: cwd(a[0])?,
            dir: true,
        },
        EntryForm::Unlinkat => {
            check_flags(u64::from(int(a[2])), libc::AT_REMOVEDIR)?;
            EntryCall::Unlink {
                at: at(a[0], a[1])?,
                dir: int(a[2]) as i32 & libc::AT_REMOVEDIR != 0,
            }
        }
        EntryForm::Rename => EntryCall::Rename {
            from: cwd(a[0])?,
            to: cwd(a[1])?,
            flags: 0,
        },
        EntryForm::Renameat | EntryForm::Renameat2 => {
            let flags = if form == EntryForm::Renameat2 {
                int(a[4])
            } else {
                0
            };
            let known = libc::RENAME_NOREPLACE | libc::RENAME_EXCHANGE | libc::RENAME_WHITEOUT;
            if flags & !known != 0
                || (flags & (libc::RENAME_NOREPLACE | libc::RENAME_WHITEOUT) != 0
                    && flags & libc::RENAME_EXCHANGE != 0)
            {
                return Err(err(libc::EINVAL));
            }
            EntryCall::Rename {
                from: at(a[0], a[1])?,
                to: at(a[2], a[3])?,
                flags,
            }
        }
        EntryForm::Link => EntryCall::Link {
            from: cwd(a[0])?,
            to: cwd(a[1])?,
            follow: false,
            empty_path: false,
        },
        EntryForm::Linkat => {
            let flags = int(a[4]) as i32;
            check_flags(
                u64::from(flags as u32),
                libc::AT_SYMLINK_FOLLOW | libc::AT_EMPTY_PATH,
            )?;
            EntryCall::Link {
                from: at(a[0], a[1])?,
                to: at(a[2], a[3])?,
                follow: flags & libc::AT_SYMLINK_FOLLOW != 0,
                empty_path: flags & libc::AT_EMPTY_PATH != 0,
            }
        }
        EntryForm::Symlink => EntryCall::Symlink {
            target: path(a[0])?,
            at: cwd(a[1])?,
        },
        EntryForm::Symlinkat => EntryCall::Symlink {
            target: path(a[0])?,
            at: at(a[1], a[2])?,
        },
        _ => return Err(err(libc::ENOSYS)),
    })
}

fn xattr_name(caller: &Caller, addr: u64) -> io::Result<CString> {
    let name = caller.read_cstr(addr, XATTR_NAME_MAX + 1).map_err(|e| {
        if e.raw_os_error() == Some(libc::ENAMETOOLONG) {
            err(libc::ERANGE)
        } else {
            e
        }
    })?;
    if name.as_bytes().is_empty() {
        return Err(err(libc::ERANGE));
    }
    Ok(name)
}

fn set_xattr(caller: &Caller, name: u64, value: u64, size: u64, flags: u64) -> io::Result<Op> {
    check_flags(flags, libc::XATTR_CREATE | libc::XATTR_REPLACE)?;
    let name = xattr_name(caller, name)?;
    let size = usize::try_from(size).map_err(|_| err(libc::E2BIG))?;
    if size > XATTR_SIZE_MAX {
        return Err(err(libc::E2BIG));
    }
    let value = if size == 0 {
        Vec::new()
    } else {
        caller.read(value, size)?
    };
    Ok(Op::SetXattr {
        name,
        value,
        flags: flags as i32,
    })
}

/// Sizes above the kernel's maximum are clamped to it, as the kernel does.
fn clamp(size: u64, max: usize) -> usize {
    usize::try_from(size).map_or(max, |s| s.min(max))
}

fn get_xattr(caller: &Caller, name: u64, buf: u64, size: u64) -> io::Result<Op> {
    Ok(Op::GetXattr {
        name: xattr_name(caller, name)?,
        size: clamp(size, XATTR_SIZE_MAX),
        buf,
    })
}

fn list_xattr(buf: u64, size: u64) -> Op {
    Op::ListXattr {
        size: clamp(size, XATTR_LIST_MAX),
        buf,
    }
}

fn words<const N: usize>(caller: &Caller, addr: u64) -> io::Result<[i64; N]> {
    let bytes = caller.read(addr, N * 8)?;
    let mut out = [0i64; N];
    for (slot, chunk) in out.iter_mut().zip(bytes.chunks_exact(8)) {
        let mut b = [0u8; 8];
        b.copy_from_slice(chunk);
        *slot = i64::from_ne_bytes(b);
    }
    Ok(out)
}

fn ts(sec: i64, nsec: i64) -> libc::timespec {
    libc::timespec {
        tv_sec: sec as _,
        tv_nsec: nsec as _,
    }
}

fn timespecs(caller: &Caller, addr: u64) -> io::Result<Option<[libc::timespec; 2]>> {
    if addr == 0 {
        return Ok(None);
    }
    let [s0, n0, s1, n1] = words::<4>(caller, addr)?;
    for n in [n0, n1] {
        let special = n == libc::UTIME_NOW || n == libc::UTIME_OMIT;
        if !special && !(0..1_000_000_000).contains(&n) {
            return Err(err(libc::EINVAL));
        }
    }
    if n0 == libc::UTIME_NOW && n1 == libc::UTIME_NOW {
        return Ok(None);
    }
    Ok(Some([ts(s0, n0), ts(s1, n1)]))
}

fn timevals(caller: &Caller, addr: u64) -> io::Result<Option<[libc::timespec; 2]>> {
    if addr == 0 {
        return Ok(None);
    }
    let [s0, u0, s1, u1] = words::<4>(caller, addr)?;
    if !(0..1_000_000).contains(&u0) || !(0..1_000_000).contains(&u1) {
        return Err(err(libc::EINVAL));
    }
    Ok(Some([ts(s0, u0 * 1000), ts(s1, u1 * 1000)]))
}

fn utimbuf(caller: &Caller, addr: u64) -> io::Result<Option<[libc::timespec; 2]>> {
    if addr == 0 {
        return Ok(None);
    }
    let [actime, modtime] = words::<2>(caller, addr)?;
    Ok(Some([ts(actime, 0), ts(modtime, 0)]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_flags_as_the_kernel() {
        let of = |flags: i32, mode: u32| open_flags(flags as u32 as u64, u64::from(mode));
        let einval = |r: io::Result<(i32, u32)>| r.err().and_then(|e| e.raw_os_error());
        // Unknown bits are dropped, not refused (legacy open).
        assert_eq!(
            of(libc::O_WRONLY | 0x4000_0000, 0).ok(),
            Some((libc::O_WRONLY, 0))
        );
        // The mode counts only when creating, 16 bits, S_IALLUGO.
        assert_eq!(of(libc::O_WRONLY, 0o644).ok(), Some((libc::O_WRONLY, 0)));
        assert_eq!(
            of(libc::O_WRONLY | libc::O_CREAT, 0x1_0000 | 0o10644).ok(),
            Some((libc::O_WRONLY | libc::O_CREAT, 0o644))
        );
        // O_PATH keeps only its flags.
        assert_eq!(
            of(
                libc::O_PATH | libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC,
                0o644
            )
            .ok(),
            Some((libc::O_PATH, 0))
        );
        assert_eq!(
            einval(of(libc::O_CREAT | libc::O_DIRECTORY, 0)),
            Some(libc::EINVAL)
        );
        assert_eq!(
            einval(of(libc::O_TMPFILE | libc::O_RDONLY, 0)),
            Some(libc::EINVAL)
        );
        assert_eq!(
            einval(of(libc::O_TMPFILE | libc::O_RDWR | libc::O_CREAT, 0)),
            Some(libc::EINVAL)
        );
        assert_eq!(
            einval(of(O_TMPFILE_BIT | libc::O_RDWR, 0)),
            Some(libc::EINVAL)
        );
        assert!(of(libc::O_TMPFILE | libc::O_WRONLY, 0o600).is_ok());
    }

    #[test]
    fn dev_fd_names() {
        assert_eq!(dev_fd(b"/dev/stdout"), Some(1));
        assert_eq!(dev_fd(b"//dev//stderr"), Some(2));
        assert_eq!(dev_fd(b"/dev/fd/7"), Some(7));
        assert_eq!(dev_fd(b"dev/stdout"), None);
        assert_eq!(dev_fd(b"/dev/fd/7/x"), None);
        assert_eq!(dev_fd(b"/dev/./stdout"), None);
        assert_eq!(dev_fd(b"/dev/null"), None);
    }
}
