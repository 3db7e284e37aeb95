//! Read-only opens routed to the broker only so that the reads Landlock
//! refuses are recorded (`FilterSpec::broker_reads`: observed runs under
//! read denials).
//!
//! The broker decides nothing here that Landlock does not enforce anyway:
//! the read denial is Landlock's (the command's domain grants no read right
//! beneath a read-deny path). Its only job is to notice the refusal
//! Landlock will make, so that the run's record and summary can name it.
//! So every open it does not find refused goes on in the kernel
//! (`SECCOMP_USER_NOTIF_FLAG_CONTINUE`), which decides it with the
//! command's own Landlock domain, as without a broker. The kernel warns
//! that continuing is racy: the caller can rewrite the arguments its
//! pointers name while it waits, so the notifier "cannot be used to
//! implement a security policy", and a supervisor that continues a call
//! "should be sure that another security mechanism or the kernel itself
//! will sufficiently block syscalls if arguments are rewritten to
//! something unsafe" (include/uapi/linux/seccomp.h, on
//! `SECCOMP_USER_NOTIF_FLAG_CONTINUE`). That mechanism here is Landlock:
//! continuing grants nothing, a path swapped after the broker looked is
//! opened, or refused, by Landlock exactly as if the filter had let the
//! call through, and what the caller loses is only the record of its own
//! refusal. An open the broker finds refused it answers itself, with
//! Landlock's `EACCES` (`hook_file_open`, security/landlock/fs.c), so that
//! no refusal is recorded that did not happen.
//!
//! A refusal is recorded only after every error the kernel reports before
//! Landlock's hook (`do_open` and `may_open` in fs/namei.c, then
//! `security_file_open` in `do_dentry_open`, fs/open.c): the walk's own
//! errors (`ENOENT`, `ENOTDIR`, `ELOOP`, `EACCES` for a directory the caller
//! may not search), `ELOOP` for a final symlink under `O_NOFOLLOW`,
//! `ENOTDIR` for `O_DIRECTORY`, `EACCES` for a device on a `nodev` mount,
//! the mode bits (`inode_permission`, as `faccessat2(AT_EACCESS)` asks it
//! with the caller's credentials) and `EPERM` for `O_NOATIME` on a file the
//! caller does not own. In each of those cases the broker lets the call
//! continue, and the kernel answers. Directories are never refused
//! (Landlock's READ_DIR is not handled).

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use crate::caller::{cvt, Caller};
use crate::identity::{caller_identity, with_credentials, Own, UmaskUse};
use crate::log::BrokerTarget;
use crate::notif::Listener;
use crate::resolve::{fstat, walk, BrokerRules, Start};
use crate::syscalls::{self, EntryCall, Request, Subject, O_TMPFILE_BIT};
use sandbox_seccomp::{EntryForm, ExecForm, Handler};

/// `CAP_FOWNER` (linux/capability.h).
const CAP_FOWNER: u32 = 3;

/// Whether the call is a plain read-only open (no write access, no
/// `O_TRUNC`, `O_CREAT` or `O_TMPFILE`): the opens the filter routes only
/// for their refusals to be recorded. The flags are the call's own
/// arguments, which the caller cannot change.
pub(crate) fn plain_read(handler: Handler, args: &[u64; 6]) -> bool {
    let flags = match handler {
        Handler::Entry(EntryForm::Open) => args[1],
        Handler::Entry(EntryForm::Openat) => args[2],
        _ => return false,
    } as u32 as i32;
    flags & (syscalls::O_ACCMODE | libc::O_TRUNC | libc::O_CREAT | O_TMPFILE_BIT) == 0
}

/// What became of a plain read-only open.
pub(crate) enum Observed {
    /// Let it go on in the kernel.
    Continue,
    /// Landlock would refuse it: answered `EACCES` and recorded, with why.
    Refused(crate::log::Refusal),
}

/// Decides a plain read-only open ([`plain_read`]): [`Observed::Refused`]
/// (with `target` naming the file) only for an open Landlock would refuse
/// beneath a read-deny path, after every error the kernel gives first;
/// [`Observed::Continue`] for everything else, any doubt included.
pub(crate) fn observe(
    listener: &Listener,
    rules: &BrokerRules,
    own: &Own,
    n: &libc::seccomp_notif,
    handler: Handler,
    target: &mut BrokerTarget,
    fatal: &mut Option<String>,
) -> Observed {
    let mut caller = Caller::unopened(n.pid as i32);
    let Ok(Request::Entry(EntryCall::Open { at, flags, .. })) =
        syscalls::decode(handler, n.data.args, &caller)
    else {
        return Observed::Continue;
    };
    // O_PATH opens never reach Landlock's hook (see the filter's
    // `observed_reads`).
    if flags & libc::O_PATH != 0 {
        return Observed::Continue;
    }
    let absolute = at.path.as_bytes().first() == Some(&b'/');
    // /proc/TID for a relative path's working directory, and for the
    // caller's credentials when they are not fixed.
    let proc_needed = !absolute || own.fixed.is_none();
    if proc_needed && caller.open_proc().is_err() {
        return Observed::Continue;
    }
    let subject = Subject::At {
        dirfd: at.dirfd,
        path: at.path.clone(),
        follow: flags & libc::O_NOFOLLOW == 0,
        empty_path: false,
    };
    if subject.needs_fd() {
        if !proc_needed && caller.open_proc().is_err() {
            return Observed::Continue;
        }
        caller.open_pidfd();
    }
    // The path and handles are the waiting thread's only while its
    // request is pending.
    if !matches!(listener.id_valid(n.id), Ok(true)) {
        return Observed::Continue;
    }
    // Resolved with the broker's own credentials first: most opens are of
    // files no read-deny path holds, and continue without more ado.
    let Ok(start) = rules.start(&caller, &subject) else {
        return Observed::Continue;
    };
    let (first, again) = match start {
        Start::Object(fd) => {
            let Ok(again) = fd.try_clone() else {
                return Observed::Continue;
            };
            (fd, Again::Object(again))
        }
        Start::Walk { base, path, follow } => {
            let nofollow = if follow { 0 } else { libc::O_NOFOLLOW };
            let Ok(first) = walk(base.as_ref(), &path, nofollow) else {
                return Observed::Continue;
            };
            (
                first,
                Again::Walk {
                    base,
                    path,
                    nofollow,
                },
            )
        }
    };
    let Ok(st) = fstat(&first) else {
        return Observed::Continue;
    };
    match st.st_mode & libc::S_IFMT {
        // ELOOP (O_NOFOLLOW), or a directory: READ_DIR is not handled.
        libc::S_IFLNK | libc::S_IFDIR => return Observed::Continue,
        // ENOTDIR.
        _ if flags & libc::O_DIRECTORY != 0 => return Observed::Continue,
        _ => {}
    }
    let Some((path, why)) = rules.read_denied(&first) else {
        return Observed::Continue;
    };
    target.path = Some(String::from_utf8_lossy(at.path.as_bytes()).into_owned());
    target.fd = (at.dirfd != libc::AT_FDCWD && !absolute).then_some(at.dirfd);
    // Denied: the kernel's own checks first, with the caller's credentials.
    let Ok(identity) = caller_identity(&caller, own, UmaskUse::None) else {
        return Observed::Continue;
    };
    let kernel_first = with_credentials(own, &identity, fatal, || {
        let fd = match again {
            Again::Object(fd) => fd,
            Again::Walk {
                base,
                path,
                nofollow,
            } => match walk(base.as_ref(), &path, nofollow) {
                Ok(fd) => fd,
                // The caller's walk fails (EACCES for a directory it may
                // not search): the kernel's answer.
                Err(_) => return true,
            },
        };
        // Another object by now: the kernel decides.
        let same = fstat(&fd).is_ok_and(|now| (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino));
        // And still refused, looked at again (the path up to it could have
        // changed since, by a rename outside the run too): a refusal only
        // when both looks agree.
        !same
            || rules.read_denied(&fd).is_none()
            || (is_device(&st) && on_nodev_mount(&fd))
            || !may(&fd, libc::R_OK)
            || (flags & libc::O_NOATIME != 0
                && st.st_uid != identity.fsuid
                && !identity.has(CAP_FOWNER))
    });
    match kernel_first {
        Ok(false) => {
            target.resolved = Some(path);
            Observed::Refused(why)
        }
        _ => Observed::Continue,
    }
}

/// Decides an exec the filter routed only for its refusal to be recorded
/// ([`Handler::Exec`]), as [`observe`] decides a read: [`Observed::Refused`]
/// only for a regular file Landlock would refuse to execute (its EXECUTE
/// and READ_FILE rights, which a read-deny path takes away), after the
/// kernel's earlier answers in `do_open_execat` and `may_open` (fs/exec.c,
/// fs/namei.c): invalid flags (`EINVAL`), the walk's errors, `ELOOP` under
/// `AT_SYMLINK_NOFOLLOW`, `EACCES` for what is not a regular file, for a
/// `noexec` mount and for the mode bits (`MAY_EXEC`, as
/// `faccessat2(X_OK, AT_EACCESS)` asks it with the caller's credentials).
/// An interpreter a script names is opened by the kernel inside the exec:
/// not seen.
pub(crate) fn observe_exec(
    listener: &Listener,
    rules: &BrokerRules,
    own: &Own,
    n: &libc::seccomp_notif,
    form: ExecForm,
    target: &mut BrokerTarget,
    fatal: &mut Option<String>,
) -> Observed {
    let a = n.data.args;
    let (dirfd, addr, flags) = match form {
        ExecForm::Execve => (libc::AT_FDCWD, a[0], 0),
        ExecForm::Execveat => (a[0] as i32, a[1], a[4] as u32 as i32),
        _ => return Observed::Continue,
    };
    if flags & !(libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW) != 0 {
        return Observed::Continue;
    }
    let mut caller = Caller::unopened(n.pid as i32);
    let Ok(path) = caller.read_cstr(addr, libc::PATH_MAX as usize) else {
        return Observed::Continue;
    };
    let empty_path = flags & libc::AT_EMPTY_PATH != 0;
    if path.as_bytes().is_empty() && !empty_path {
        return Observed::Continue;
    }
    let absolute = path.as_bytes().first() == Some(&b'/');
    let subject = Subject::At {
        dirfd,
        path: path.clone(),
        follow: flags & libc::AT_SYMLINK_NOFOLLOW == 0,
        empty_path,
    };
    // /proc/TID for a relative path's working directory, and for the
    // caller's credentials when they are not fixed.
    let proc_needed = !absolute || own.fixed.is_none();
    if proc_needed && caller.open_proc().is_err() {
        return Observed::Continue;
    }
    if subject.needs_fd() || (empty_path && path.as_bytes().is_empty()) {
        if !proc_needed && caller.open_proc().is_err() {
            return Observed::Continue;
        }
        caller.open_pidfd();
    }
    if !matches!(listener.id_valid(n.id), Ok(true)) {
        return Observed::Continue;
    }
    let Some((first, again)) = reach(rules, &caller, &subject) else {
        return Observed::Continue;
    };
    let Ok(st) = fstat(&first) else {
        return Observed::Continue;
    };
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Observed::Continue;
    }
    let Some((resolved, why)) = rules.read_denied(&first) else {
        return Observed::Continue;
    };
    target.path = Some(String::from_utf8_lossy(path.as_bytes()).into_owned());
    target.fd = (dirfd != libc::AT_FDCWD && !absolute).then_some(dirfd);
    let Ok(identity) = caller_identity(&caller, own, UmaskUse::None) else {
        return Observed::Continue;
    };
    let kernel_first = with_credentials(own, &identity, fatal, || {
        let Some(fd) = again.reach() else {
            return true;
        };
        let same = fstat(&fd).is_ok_and(|now| (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino));
        !same || rules.read_denied(&fd).is_none() || on_noexec_mount(&fd) || !may(&fd, libc::X_OK)
    });
    match kernel_first {
        Ok(false) => {
            target.resolved = Some(resolved);
            Observed::Refused(why)
        }
        _ => Observed::Continue,
    }
}

/// The object `subject` names, reached with the broker's own credentials,
/// and how to reach it again.
fn reach(rules: &BrokerRules, caller: &Caller, subject: &Subject) -> Option<(OwnedFd, Again)> {
    match rules.start(caller, subject).ok()? {
        Start::Object(fd) => {
            let again = fd.try_clone().ok()?;
            Some((fd, Again::Object(again)))
        }
        Start::Walk { base, path, follow } => {
            let nofollow = if follow { 0 } else { libc::O_NOFOLLOW };
            let first = walk(base.as_ref(), &path, nofollow).ok()?;
            Some((
                first,
                Again::Walk {
                    base,
                    path,
                    nofollow,
                },
            ))
        }
    }
}

/// Whether `fd` lies on a mount where nothing executes (`path_noexec`).
fn on_noexec_mount(fd: &OwnedFd) -> bool {
    // SAFETY: statvfs is plain data; fstatvfs fills it.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid fd and out-pointer.
    let rc = unsafe { libc::fstatvfs(fd.as_raw_fd(), &mut st) };
    rc == 0 && st.f_flag & libc::ST_NOEXEC != 0
}

/// How to reach the object again with the caller's credentials.
enum Again {
    Object(OwnedFd),
    Walk {
        base: Option<OwnedFd>,
        path: CString,
        nofollow: i32,
    },
}

impl Again {
    /// The object again (with the thread's credentials now): `None` when
    /// the walk fails (a directory the caller may not search).
    fn reach(self) -> Option<OwnedFd> {
        match self {
            Again::Object(fd) => Some(fd),
            Again::Walk {
                base,
                path,
                nofollow,
            } => walk(base.as_ref(), &path, nofollow).ok(),
        }
    }
}

fn is_device(st: &libc::stat) -> bool {
    matches!(st.st_mode & libc::S_IFMT, libc::S_IFCHR | libc::S_IFBLK)
}

/// Whether `fd` lies on a mount without device access (`may_open_dev`).
fn on_nodev_mount(fd: &OwnedFd) -> bool {
    // SAFETY: statvfs is plain data; fstatvfs fills it.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid fd and out-pointer.
    let rc = unsafe { libc::fstatvfs(fd.as_raw_fd(), &mut st) };
    rc == 0 && st.f_flag & libc::ST_NODEV != 0
}

/// Whether the thread's credentials may read (`R_OK`) or execute (`X_OK`)
/// `fd`'s object by its mode bits (and ACLs, capabilities):
/// `inode_permission(MAY_READ)` (`MAY_EXEC`) as
/// `faccessat2(AT_EACCESS | AT_EMPTY_PATH)` asks it with the thread's own
/// (fs) credentials. Landlock does not take part: it has no hook there.
fn may(fd: &OwnedFd, mode: i32) -> bool {
    // SAFETY: faccessat2 on our own fd with an empty, NUL-terminated path.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_faccessat2,
            fd.as_raw_fd(),
            c"".as_ptr(),
            mode,
            libc::AT_EACCESS | libc::AT_EMPTY_PATH,
        )
    };
    cvt(rc).is_ok()
}

/// The canonical path `link` with only its first `n` components.
pub(crate) fn prefix(link: &std::path::Path, n: usize) -> PathBuf {
    link.components().take(n).collect()
}

/// `lstat` of `path`: its device and inode.
pub(crate) fn inode_of(path: &std::path::Path) -> Option<(u64, u64)> {
    let c = CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: stat is plain data; fstatat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a live out-pointer.
    let rc = unsafe {
        libc::fstatat(
            libc::AT_FDCWD,
            c.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    #[allow(clippy::unnecessary_cast)]
    (rc == 0).then_some((st.st_dev as u64, st.st_ino as u64))
}
