//! The credential rules, and performing an admitted operation on its object.

use std::ffi::CString;
use std::io;
use std::os::fd::AsRawFd;

use crate::caller::{cvt, Identity, CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_FOWNER};
use crate::log::Refusal;
use crate::resolve::Object;
use crate::syscalls::{Op, XATTR_LIST_MAX, XATTR_SIZE_MAX};

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

/// The POSIX ACL attributes: `system.posix_acl_access` and
/// `system.posix_acl_default`. The kernel lets only the owner (or a holder of
/// `CAP_FOWNER`) set them (`posix_acl_xattr_set`, fs/posix_acl.c), and an
/// access ACL changes the mode bits as `chmod` would, never adding a set-id
/// bit: they grant nothing `chmod` could not. `cp -p`, `cp -a` and `install`
/// write the minimal ACL that mirrors a mode.
pub(crate) fn is_acl(name: &std::ffi::CStr) -> bool {
    matches!(
        name.to_bytes(),
        b"system.posix_acl_access" | b"system.posix_acl_default"
    )
}

/// The errno the kernel answers an xattr write with before any permission
/// check or policy, from its name and value alone (after the path lookup):
/// `security.capability`'s header (`cap_convert_nscap`, security/commoncap.c,
/// in `vfs_setxattr`), a POSIX ACL's encoding (`posix_acl_from_xattr` and
/// `posix_acl_valid`, fs/posix_acl.c, in `do_set_acl`), and a name in no
/// namespace the kernel knows, which no filesystem handles (`EOPNOTSUPP` from
/// `xattr_resolve_name`, fs/xattr.c, once `xattr_permission`'s
/// `inode_permission` passed: `EACCES` without write permission). A refusal of
/// the policy's comes after these (red-team R6a F7).
pub(crate) fn xattr_kernel_first(op: &Op, id: &Identity, st: &libc::stat) -> Option<i32> {
    let (name, value) = match op {
        Op::SetXattr { name, value, .. } => (name.to_bytes(), Some(value.as_slice())),
        Op::RemoveXattr { name } => (name.to_bytes(), None),
        _ => return None,
    };
    if let Some(value) = value.filter(|v| !v.is_empty()) {
        if name == b"security.capability" && !valid_caps_header(value) {
            return Some(libc::EINVAL);
        }
        if matches!(
            name,
            b"system.posix_acl_access" | b"system.posix_acl_default"
        ) {
            if let Err(errno) = valid_acl(value) {
                return Some(errno);
            }
        }
    }
    let known = [b"user.".as_slice(), b"trusted.", b"security.", b"system."];
    if !known.iter().any(|p| name.starts_with(p)) {
        return Some(if may_write(id, st) {
            libc::EOPNOTSUPP
        } else {
            libc::EACCES
        });
    }
    None
}

/// `validheader` (security/commoncap.c): a revision and its exact size.
fn valid_caps_header(value: &[u8]) -> bool {
    let Some(magic) = value.get(..4) else {
        return false;
    };
    let magic = u32::from_le_bytes([magic[0], magic[1], magic[2], magic[3]]) & 0xff00_0000;
    matches!(
        (magic, value.len()),
        (0x0100_0000, 12) | (0x0200_0000, 20) | (0x0300_0000, 24)
    )
}

/// `posix_acl_from_xattr` and `posix_acl_valid` (fs/posix_acl.c), as far as
/// the value alone tells: the version, a whole number of entries, known
/// tags, one owner, group and other entry, a mask where named entries are.
fn valid_acl(value: &[u8]) -> Result<(), i32> {
    const VERSION: u32 = 2;
    if value.len() < 4 {
        return Err(libc::EINVAL);
    }
    if u32::from_le_bytes([value[0], value[1], value[2], value[3]]) != VERSION {
        return Err(libc::EOPNOTSUPP);
    }
    let entries = &value[4..];
    if entries.len() % 8 != 0 {
        return Err(libc::EINVAL);
    }
    let (mut user_obj, mut group_obj, mut other, mut mask, mut named) = (0, 0, 0, 0, 0);
    for e in entries.chunks_exact(8) {
        match u16::from_le_bytes([e[0], e[1]]) {
            0x01 => user_obj += 1,
            0x04 => group_obj += 1,
            0x20 => other += 1,
            0x10 => mask += 1,
            0x02 | 0x08 => named += 1,
            _ => return Err(libc::EINVAL),
        }
    }
    // An empty ACL (a header only) removes it: no error.
    if entries.is_empty() {
        return Ok(());
    }
    if user_obj != 1 || group_obj != 1 || other != 1 || mask > 1 || (named > 0 && mask == 0) {
        return Err(libc::EINVAL);
    }
    Ok(())
}

/// Why [`check`] turned a call down.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Denied {
    /// A check that mirrors the kernel's own permission check (ownership,
    /// `CAP_FOWNER`, `CAP_CHOWN`, write permission): the call fails with
    /// the errno the kernel gives for it unconfined, and it is no refusal
    /// of the policy's (red-team R6b F5: a non-owner's `chmod` was recorded
    /// as a sandbox refusal although it fails `EPERM` bare too).
    Kernel(i32),
    /// The policy's own rule (set-id bits, giving a file away with
    /// `CAP_CHOWN`, an xattr namespace): a refusal.
    Policy(Refusal),
}

/// Applies the credential rules of the crate docs to `op` on `st`.
///
/// The errnos of [`Denied::Kernel`] are the kernel's (fs/attr.c,
/// fs/xattr.c, fs/open.c): `EPERM` for what only the owner (or a holder of
/// `CAP_FOWNER`/`CAP_CHOWN`) may do: a mode, an owner or group, explicit
/// times; `EACCES` from `inode_permission` for what write permission
/// suffices for: times set to "now", a size, a `user.` attribute of a
/// regular file or directory. Mode bits only: an ACL granting write is not
/// consulted (the call fails `EACCES` where the kernel would allow it).
pub(crate) fn check(op: &Op, id: &Identity, st: &libc::stat) -> Result<(), Denied> {
    match op {
        Op::Chmod { mode } => {
            // setattr_prepare: chmod needs inode_owner_or_capable.
            if !owns(id, st, CAP_FOWNER) {
                return Err(Denied::Kernel(libc::EPERM));
            }
            let added = mode & !(st.st_mode & 0o7777);
            // A directory's S_ISGID only gives its new entries its group
            // (inode_init_owner): no privilege, and the kernel's own rule
            // still applies (setattr_prepare clears it unless the caller is
            // in the directory's group or holds CAP_FSETID, with the
            // caller's credentials the broker acts with). S_ISUID stays
            // refused everywhere: Linux ignores it on a directory, but some
            // systems that may see the tree (FreeBSD's suiddir) give new
            // files the directory's owner, and no workload needs it.
            let is_dir = st.st_mode & libc::S_IFMT == libc::S_IFDIR;
            let refused = if is_dir {
                libc::S_ISUID
            } else {
                libc::S_ISUID | libc::S_ISGID
            };
            if added & refused != 0 {
                return Err(Denied::Policy(Refusal::SetIdBits));
            }
        }
        Op::Chown { uid, gid } => {
            let uid_change = uid.filter(|u| *u != st.st_uid);
            let gid_change = gid.filter(|g| *g != st.st_gid);
            // chown_ok (fs/attr.c): changing the owner needs CAP_CHOWN.
            if let Some(u) = uid_change {
                if !id.has(CAP_CHOWN) {
                    return Err(Denied::Kernel(libc::EPERM));
                }
                if u != id.euid {
                    return Err(Denied::Policy(Refusal::OwnershipChange));
                }
            }
            // chgrp_ok: the owner, to one of its groups, or CAP_CHOWN.
            if let Some(g) = gid_change {
                if !id.has(CAP_CHOWN) {
                    if id.fsuid != st.st_uid || !id.in_group(g) {
                        return Err(Denied::Kernel(libc::EPERM));
                    }
                } else if !id.in_group(g) {
                    return Err(Denied::Policy(Refusal::OwnershipChange));
                }
            }
        }
        Op::SetXattr { name, .. } | Op::RemoveXattr { name } => {
            // POSIX ACLs: the kernel's own owner check applies (the call is
            // made with the caller's credentials), as bare.
            if is_acl(name) {
                return Ok(());
            }
            if let Some(errno) = xattr_kernel_first(op, id, st) {
                return Err(Denied::Kernel(errno));
            }
            if !name.as_bytes().starts_with(b"user.") {
                return Err(Denied::Policy(Refusal::XattrNamespace));
            }
            if !may_write(id, st) && !owns(id, st, CAP_FOWNER) {
                // xattr_permission (fs/xattr.c): user.* of anything but a
                // regular file or directory, or of a sticky directory the
                // caller does not own, is EPERM; else inode_permission's
                // EACCES.
                let kind = st.st_mode & libc::S_IFMT;
                let sticky_dir = kind == libc::S_IFDIR && st.st_mode & libc::S_ISVTX != 0;
                let errno = if (kind != libc::S_IFREG && kind != libc::S_IFDIR) || sticky_dir {
                    libc::EPERM
                } else {
                    libc::EACCES
                };
                return Err(Denied::Kernel(errno));
            }
        }
        Op::Times { times } => {
            // may_setattr / setattr_prepare: explicit times need the owner
            // (EPERM); "now" (NULL, or both UTIME_NOW) write permission
            // (inode_permission's EACCES).
            if !owns(id, st, CAP_FOWNER) {
                match times {
                    Some(_) => return Err(Denied::Kernel(libc::EPERM)),
                    None if !may_write(id, st) => return Err(Denied::Kernel(libc::EACCES)),
                    None => {}
                }
            }
        }
        Op::Truncate { .. } => {
            // vfs_truncate: inode_permission(MAY_WRITE).
            if !may_write(id, st) {
                return Err(Denied::Kernel(libc::EACCES));
            }
        }
        // Reads are left to the kernel's own rules (read permission for
        // user.*, CAP_SYS_ADMIN for trusted.*), which apply because the read
        // is made with the caller's credentials.
        Op::GetXattr { .. } | Op::ListXattr { .. } => {}
    }
    Ok(())
}

fn proc_path(obj: &Object) -> CString {
    // Digits only: no NUL possible.
    CString::new(format!("/proc/self/fd/{}", obj.fd.as_raw_fd())).unwrap_or_default()
}

/// What an xattr read returns: the call's value and the bytes for the
/// caller's buffer (none for a size-0 probe).
pub(crate) struct ReadBack {
    pub(crate) len: usize,
    pub(crate) bytes: Vec<u8>,
    /// Where in the caller's memory the bytes go.
    pub(crate) buf: u64,
}

/// Performs the xattr read `op` on the admitted object, as the kernel's
/// `getxattr`/`listxattr` do: size 0 asks for the length, a buffer too small
/// gets `ERANGE` (`E2BIG` when even the maximum is too small).
pub(crate) fn read(op: &Op, obj: &Object) -> io::Result<ReadBack> {
    let path = proc_path(obj);
    let (size, buf, max) = match op {
        Op::GetXattr { size, buf, .. } => (*size, *buf, XATTR_SIZE_MAX),
        Op::ListXattr { size, buf } => (*size, *buf, XATTR_LIST_MAX),
        _ => return Err(io::Error::from_raw_os_error(libc::EINVAL)),
    };
    let mut bytes = vec![0u8; size];
    let out = if size == 0 {
        std::ptr::null_mut()
    } else {
        bytes.as_mut_ptr().cast()
    };
    // The path names our own fd, so no symlink is followed past the object:
    // for a symlink the magic link lands on the link itself (as lgetxattr).
    let rc = match op {
        // SAFETY: path and name are NUL-terminated; `out` covers `size`
        // bytes or is NULL with size 0.
        Op::GetXattr { name, .. } => unsafe {
            libc::getxattr(path.as_ptr(), name.as_ptr(), out, size)
        },
        // SAFETY: as for getxattr.
        _ => unsafe { libc::listxattr(path.as_ptr(), out.cast(), size) },
    };
    let len = match cvt(rc as libc::c_long) {
        Ok(n) => n as usize,
        Err(e) if e.raw_os_error() == Some(libc::ERANGE) && size >= max => {
            return Err(io::Error::from_raw_os_error(libc::E2BIG))
        }
        Err(e) => return Err(e),
    };
    bytes.truncate(if size == 0 { 0 } else { len.min(size) });
    Ok(ReadBack { len, bytes, buf })
}

/// Performs `op` on the admitted object; `Ok(())` or the kernel's errno.
pub(crate) fn perform(op: &Op, obj: &Object) -> io::Result<()> {
    let fd = obj.fd.as_raw_fd();
    let symlink = is_symlink(&obj.stat);
    let fail = |errno| Err(io::Error::from_raw_os_error(errno));
    // Each block below: a plain syscall on our own O_PATH fd, or on the
    // /proc/self/fd path naming it, with live argument buffers.
    let rc = match op {
        Op::Chmod { mode } => {
            if symlink {
                // As the kernel answers fchmodat2(AT_SYMLINK_NOFOLLOW) on a symlink.
                return fail(libc::EOPNOTSUPP);
            }
            let path = proc_path(obj);
            // SAFETY: a NUL-terminated /proc/self/fd path of our own fd.
            unsafe { libc::fchmodat(libc::AT_FDCWD, path.as_ptr(), *mode, 0) }
        }
        // SAFETY: our own fd with an empty path (AT_EMPTY_PATH).
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
                // user.* attributes are not permitted on symlinks, and POSIX
                // ACLs are not supported on them (vfs_set_acl).
                return fail(if is_acl(name) {
                    libc::EOPNOTSUPP
                } else {
                    libc::EPERM
                });
            }
            let path = proc_path(obj);
            // SAFETY: NUL-terminated path and name; `value` is live for its length.
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
                return fail(if is_acl(name) {
                    libc::EOPNOTSUPP
                } else {
                    libc::EPERM
                });
            }
            let path = proc_path(obj);
            // SAFETY: NUL-terminated path and name.
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
            // SAFETY: our own fd with an empty path; `t` holds two timespecs.
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
        Op::GetXattr { .. } | Op::ListXattr { .. } => return fail(libc::EINVAL),
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

#[cfg(test)]
mod tests {
    use std::os::fd::{FromRawFd, OwnedFd};
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use std::path::Path;

    use super::*;
    use crate::creds::{assume, Credentials};
    use crate::resolve::fstat;

    /// nobody's credentials, as the broker assumes a caller's.
    fn nobody() -> Identity {
        Identity {
            euid: 65534,
            fsuid: 65534,
            fsgid: 65534,
            groups: vec![65534],
            supplementary: Vec::new(),
            cap_eff: 0,
            umask: 0o022,
        }
    }

    fn object(path: &Path) -> Object {
        let c = CString::new(path.as_os_str().as_encoded_bytes()).expect("no NUL");
        // SAFETY: plain open; the fd is owned below.
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
        assert!(fd >= 0, "open {}", path.display());
        // SAFETY: fresh fd.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let stat = fstat(&fd).expect("fstat");
        Object {
            fd,
            path: path.to_path_buf(),
            stat,
        }
    }

    /// The second layer alone (no `check`): with a uid-65534 identity taken
    /// on, the kernel's own owner check refuses a chmod of a root file and
    /// allows one of the identity's own file.
    #[test]
    fn the_kernels_owner_check_applies_to_the_callers_identity() {
        let dir = tempfile::tempdir().expect("tempdir");
        let roots = dir.path().join("roots");
        let theirs = dir.path().join("theirs");
        for f in [&roots, &theirs] {
            std::fs::write(f, b"x").expect("write");
            std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        }
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534))
            .expect("chown (the test runs as root)");
        let (r, t) = (object(&roots), object(&theirs));
        std::thread::spawn(move || {
            let chmod = Op::Chmod { mode: 0o600 };
            let own = Credentials::current().expect("own");
            let nobody = nobody();
            let assumed = assume(&own, &nobody).expect("assume");
            let refused = perform(&chmod, &r).map_err(|e| e.raw_os_error());
            let allowed = perform(&chmod, &t).map_err(|e| e.raw_os_error());
            assumed.restore().expect("restore");
            assert_eq!(refused, Err(Some(libc::EPERM)));
            assert_eq!(allowed, Ok(()));
        })
        .join()
        .expect("thread");
        let mode = |p: &Path| std::fs::metadata(p).expect("stat").mode() & 0o7777;
        assert_eq!(mode(&roots), 0o644);
        assert_eq!(mode(&theirs), 0o600);
        // And with the runner's own credentials the kernel allows it: the
        // refusal above came from the identity, not from the object.
        perform(&Op::Chmod { mode: 0o600 }, &object(&roots)).expect("root chmods its file");
        assert_eq!(mode(&roots), 0o600);
    }

    /// `chmod g+s` of a directory is admitted (its new entries take its
    /// group: no privilege); S_ISGID of anything else and S_ISUID anywhere
    /// stay refused. Then the kernel's own rule, with the caller's
    /// credentials: a group the caller is not in loses the bit silently.
    #[test]
    fn setgid_is_admitted_on_directories_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ours = dir.path().join("ours");
        let foreign = dir.path().join("foreign");
        let file = dir.path().join("file");
        for d in [&ours, &foreign] {
            std::fs::create_dir(d).expect("mkdir");
        }
        std::fs::write(&file, b"x").expect("write");
        std::os::unix::fs::chown(&ours, Some(65534), Some(65534)).expect("chown (as root)");
        std::os::unix::fs::chown(&foreign, Some(65534), Some(4242)).expect("chown");
        std::os::unix::fs::chown(&file, Some(65534), Some(65534)).expect("chown");
        let nobody = nobody();
        let (o, f, r) = (object(&ours), object(&foreign), object(&file));
        let setgid = Op::Chmod { mode: 0o2775 };
        let setuid = Op::Chmod { mode: 0o4775 };
        let refused = Err(Denied::Policy(Refusal::SetIdBits));
        assert_eq!(check(&setgid, &nobody, &o.stat), Ok(()));
        assert_eq!(check(&setgid, &nobody, &f.stat), Ok(()));
        assert_eq!(check(&setgid, &nobody, &r.stat), refused);
        assert_eq!(check(&setuid, &nobody, &o.stat), refused);
        assert_eq!(check(&setuid, &nobody, &r.stat), refused);
        // Positive control of the refusal's other side: a plain mode passes.
        assert_eq!(check(&Op::Chmod { mode: 0o640 }, &nobody, &r.stat), Ok(()));
        std::thread::spawn(move || {
            let own = Credentials::current().expect("own");
            let assumed = assume(&own, &nobody).expect("assume");
            let got = (perform(&setgid, &o).is_ok(), perform(&setgid, &f).is_ok());
            assumed.restore().expect("restore");
            assert_eq!(got, (true, true));
        })
        .join()
        .expect("thread");
        let mode = |p: &Path| std::fs::metadata(p).expect("stat").mode() & 0o7777;
        assert_eq!(mode(&ours), 0o2775);
        // Not in group 4242, no CAP_FSETID: setattr_prepare dropped the bit.
        assert_eq!(mode(&foreign), 0o775);
    }
}
