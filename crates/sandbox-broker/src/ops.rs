//! The credential rules, and performing an admitted operation on its object.

use std::ffi::CString;
use std::io;
use std::os::fd::AsRawFd;

use crate::caller::{cvt, Identity, CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_FOWNER};
use crate::log::Refusal;
use crate::resolve::Object;
use crate::syscalls::Op;

fn is_symlink(st: &libc::stat) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFLNK
}

/// Owner of the object, or privileged over its owner.
fn owns(id: &Identity, st: &libc::stat, cap: u32) -> bool {
    id.fsuid == st.st_uid || id.has(cap)
}

/// Classic mode-bit write permission (ACLs are not consulted).
fn may_write(id: &Identity, st: &libc::stat) -> bool {
    if id.has(CAP_DAC_OVERRIDE) {
        return true;
    }
    let bit = if id.fsuid == st.st_uid {
        0o200
    } else if id.in_group(st.st_gid) {
        0o020
    } else {
        0o002
    };
    st.st_mode & bit != 0
}

/// Applies the credential rules of the crate docs to `op` on `st`.
pub(crate) fn check(op: &Op, id: &Identity, st: &libc::stat) -> Result<(), Refusal> {
    match op {
        Op::Chmod { mode } => {
            if !owns(id, st, CAP_FOWNER) {
                return Err(Refusal::NotOwner);
            }
            let added = mode & !(st.st_mode & 0o7777);
            if added & (libc::S_ISUID | libc::S_ISGID) != 0 {
                return Err(Refusal::SetIdBits);
            }
        }
        Op::Chown { uid, gid } => {
            let uid_change = uid.filter(|u| *u != st.st_uid);
            let gid_change = gid.filter(|g| *g != st.st_gid);
            if let Some(u) = uid_change {
                if !(id.has(CAP_CHOWN) && u == id.euid) {
                    return Err(Refusal::OwnershipChange);
                }
            }
            if let Some(g) = gid_change {
                if !owns(id, st, CAP_CHOWN) {
                    return Err(Refusal::NotOwner);
                }
                if !id.in_group(g) {
                    return Err(Refusal::OwnershipChange);
                }
            }
        }
        Op::SetXattr { name, .. } | Op::RemoveXattr { name } => {
            if !name.as_bytes().starts_with(b"user.") {
                return Err(Refusal::XattrNamespace);
            }
            if !may_write(id, st) && !owns(id, st, CAP_FOWNER) {
                return Err(Refusal::NotOwner);
            }
        }
        Op::Times { times } => {
            let ok = owns(id, st, CAP_FOWNER) || (times.is_none() && may_write(id, st));
            if !ok {
                return Err(Refusal::NotOwner);
            }
        }
        Op::Truncate { .. } => {
            if !may_write(id, st) {
                return Err(Refusal::NotOwner);
            }
        }
    }
    Ok(())
}

fn proc_path(obj: &Object) -> CString {
    // Digits only: no NUL possible.
    CString::new(format!("/proc/self/fd/{}", obj.fd.as_raw_fd())).unwrap_or_default()
}

/// Performs `op` on the admitted object; `Ok(())` or the kernel's errno.
pub(crate) fn perform(op: &Op, obj: &Object) -> io::Result<()> {
    let fd = obj.fd.as_raw_fd();
    let symlink = is_symlink(&obj.stat);
    let fail = |errno| Err(io::Error::from_raw_os_error(errno));
    // SAFETY (all blocks below): plain syscalls on our own O_PATH fd, or on the
    // /proc/self/fd path naming it, with live argument buffers.
    let rc = match op {
        Op::Chmod { mode } => {
            if symlink {
                // As the kernel answers fchmodat2(AT_SYMLINK_NOFOLLOW) on a symlink.
                return fail(libc::EOPNOTSUPP);
            }
            let path = proc_path(obj);
            unsafe { libc::fchmodat(libc::AT_FDCWD, path.as_ptr(), *mode, 0) }
        }
        Op::Chown { uid, gid } => unsafe {
            libc::fchownat(
                fd,
                c"".as_ptr(),
                uid.unwrap_or(u32::MAX),
                gid.unwrap_or(u32::MAX),
                libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
            )
        },
        Op::SetXattr { name, value, flags } => {
            if symlink {
                // user.* attributes are not permitted on symlinks.
                return fail(libc::EPERM);
            }
            let path = proc_path(obj);
            unsafe {
                libc::setxattr(
                    path.as_ptr(),
                    name.as_ptr(),
                    value.as_ptr().cast(),
                    value.len(),
                    *flags,
                )
            }
        }
        Op::RemoveXattr { name } => {
            if symlink {
                return fail(libc::EPERM);
            }
            let path = proc_path(obj);
            unsafe { libc::removexattr(path.as_ptr(), name.as_ptr()) }
        }
        Op::Times { times } => {
            let now = [
                libc::timespec {
                    tv_sec: 0,
                    tv_nsec: libc::UTIME_NOW,
                },
                libc::timespec {
                    tv_sec: 0,
                    tv_nsec: libc::UTIME_NOW,
                },
            ];
            let t = times.as_ref().unwrap_or(&now);
            unsafe {
                libc::utimensat(
                    fd,
                    c"".as_ptr(),
                    t.as_ptr(),
                    libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
                )
            }
        }
        Op::Truncate { len } => return truncate(obj, *len),
    };
    cvt(rc as libc::c_long).map(|_| ())
}

fn truncate(obj: &Object, len: i64) -> io::Result<()> {
    match obj.stat.st_mode & libc::S_IFMT {
        libc::S_IFREG => {}
        libc::S_IFDIR => return Err(io::Error::from_raw_os_error(libc::EISDIR)),
        _ => return Err(io::Error::from_raw_os_error(libc::EINVAL)),
    }
    let path = proc_path(obj);
    // SAFETY: reopening our own O_PATH fd for writing (a regular file, so no
    // blocking open); the new fd is closed below.
    let fd = cvt(unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_WRONLY | libc::O_CLOEXEC | libc::O_NONBLOCK | libc::O_NOCTTY,
        )
    } as libc::c_long)?;
    // SAFETY: fresh fd, owned from here.
    let file = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd as i32) };
    file.set_len(len as u64)
}
