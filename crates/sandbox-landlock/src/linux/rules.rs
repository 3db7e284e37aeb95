//! Which rights each path gets: grants, denials and rule splitting.
//!
//! Landlock rights are additive: a rule on a directory grants its rights to
//! the whole subtree, and no rule beneath can take them back. A denial inside
//! a grant (a `write_deny_paths` entry beneath a write path, a
//! `read_deny_paths` entry beneath `/`) is therefore expressed by *splitting*:
//! instead of the ancestor, every sibling along the path down to the denied
//! entry gets the rights. The denied subtree gets none, and neither do its
//! ancestors themselves, so new entries directly in them are refused too
//! (fail closed: a denied path that does not exist yet cannot be created).

use std::fs::File;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use landlock::{AccessFs, BitFlags, ABI};
use sandbox_core::ResolvedPolicy;

use crate::LandlockError;

/// Device files every command may write (writes are discarded): `/dev/null`
/// for redirections, `/dev/zero` for programs that map it read-write. Not
/// `/dev/tty`: the runner starts a new session, and a granted terminal would
/// let the command write to the user's terminal when run without one.
pub(crate) const WRITABLE_DEVICES: &[&str] = &["/dev/null", "/dev/zero"];

/// One Landlock path-beneath rule: an `O_PATH` fd and the rights beneath it.
#[derive(Debug)]
pub(crate) struct Rule {
    pub path: PathBuf,
    pub fd: OwnedFd,
    pub access: BitFlags<AccessFs>,
    /// A rule the kernel may refuse (a standard fd on an internal
    /// filesystem, such as a memfd: `EBADFD`): left out then.
    pub optional: bool,
}

/// The rights the ruleset handles and the rules that grant them.
#[derive(Debug)]
pub(crate) struct Plan {
    /// Handled filesystem rights.
    pub handled: BitFlags<AccessFs>,
    pub rules: Vec<Rule>,
    /// Entries left without a rule (narrower, never wider, than the policy).
    pub skipped: Vec<String>,
}

/// Whether a deny path (write or read) lies beneath a write path: the case
/// rule splitting handles badly (the write path's own entries lose their
/// rights), so with a broker the write path is granted whole instead and the
/// broker keeps the denied paths ([`Mediation::Entries`]).
pub(crate) fn deny_beneath_write(policy: &ResolvedPolicy) -> bool {
    policy
        .write_deny_paths()
        .iter()
        .chain(policy.read_deny_paths())
        .any(|d| policy.write_paths().iter().any(|w| d.starts_with(w)))
}

/// Who keeps the deny paths beneath write paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mediation {
    /// Rule splitting (no broker for entries).
    Split,
    /// The broker: writing opens, entry calls and binds go to it, so only
    /// the read rights of read denials are split.
    Entries,
}

/// Where POSIX shared memory and named semaphores live (glibc's
/// `shm_open`, `sem_open`).
pub(crate) const SHM_DIR: &str = "/dev/shm";

/// The shared-memory directory for the run's own objects (`private_shm`):
/// its canonical path, when the policy asks for it, the directory exists
/// and no write path holds it already (then it is writable anyway).
///
/// Not when a read-deny path lies beneath it or holds it: the launch
/// domain's grant of the directory is then split (or lacks the read
/// rights), so the broker's `O_CREAT` made the entry and the open of it
/// failed: the caller got `EACCES` and an empty file nobody recorded
/// outlived the run.
pub(crate) fn private_shm_dir(policy: &ResolvedPolicy) -> Option<PathBuf> {
    if !policy.private_shm() {
        return None;
    }
    let dir = std::fs::canonicalize(SHM_DIR).ok()?;
    let overlaps = |p: &PathBuf| p.starts_with(&dir) || dir.starts_with(p);
    (dir.is_dir()
        && !policy.write_paths().iter().any(|w| dir.starts_with(w))
        && !policy.read_deny_paths().iter().any(overlaps))
    .then_some(dir)
}

/// Builds the plan for `policy` under `abi`.
pub(crate) fn plan(
    policy: &ResolvedPolicy,
    abi: ABI,
    mediation: Mediation,
) -> Result<Plan, LandlockError> {
    plan_with(policy, abi, mediation, None)
}

/// [`plan`] with every right also granted beneath `extra` (the broker's
/// launch domain: the shared-memory directory, where the broker makes the
/// run's own objects; the command's domain, nested beneath, lacks it).
pub(crate) fn plan_with(
    policy: &ResolvedPolicy,
    abi: ABI,
    mediation: Mediation,
    extra: Option<&Path>,
) -> Result<Plan, LandlockError> {
    // TRUNCATE is left unhandled: handling it makes the kernel walk the path on
    // every open(2), read-only ones included (about +25% per open here).
    // What it would cover is covered otherwise: ftruncate(2) needs an fd open
    // for writing (ftruncate(2), EINVAL), which WRITE_FILE governs; a
    // read-only open with O_TRUNC does truncate on Linux (open(2) leaves
    // O_TRUNC with O_RDONLY unspecified), so the seccomp filter refuses
    // O_TRUNC without write access
    // (sandbox-seccomp tests/it/kernel.rs,
    // read_only_open_with_o_trunc_is_refused_and_truncates_nothing; the
    // self-test's write probe witnesses it on every host); truncate(2) by path
    // is brokered (tests/it/write.rs, truncate_by_path_outside_is_refused).
    let write = AccessFs::from_write(abi) & !AccessFs::Truncate;
    let reads_handled = !policy.read_deny_paths().is_empty();
    // READ_DIR is left unhandled so the ancestors of a denied path stay
    // listable (`ls ~`, `find /` keep working); the denied files' contents
    // stay unreadable, their names do not.
    let read = if reads_handled {
        AccessFs::from_read(abi) & !AccessFs::ReadDir
    } else {
        BitFlags::EMPTY
    };
    let all = read | write;
    // What a deny path takes away: with the broker keeping entries, no write
    // right (bind(2), which creates a socket file, is brokered with them:
    // splitting MAKE_SOCK refused binds in every directory made in an
    // ancestor of a deny path); every write right stays with the write path.
    let denied_write = match mediation {
        Mediation::Split => write,
        Mediation::Entries => BitFlags::EMPTY,
    };
    let denies: Vec<(PathBuf, BitFlags<AccessFs>)> = policy
        .read_deny_paths()
        .iter()
        .map(|p| (p.clone(), read | denied_write))
        .chain(
            policy
                .write_deny_paths()
                .iter()
                .map(|p| (p.clone(), denied_write)),
        )
        .filter(|(_, rights)| !rights.is_empty())
        .collect();

    let mut planner = Planner {
        file_rights: AccessFs::from_file(abi),
        rules: Vec::new(),
        skipped: Vec::new(),
    };
    if reads_handled {
        planner.grant(Path::new("/"), read, &denies, Required::Yes)?;
    }
    for path in policy.write_paths() {
        planner.grant(path, all, &denies, Required::Yes)?;
    }
    for dev in WRITABLE_DEVICES {
        planner.grant(Path::new(dev), all, &denies, Required::No)?;
    }
    if let Some(extra) = extra {
        planner.grant(extra, all, &denies, Required::No)?;
    }
    Ok(Plan {
        handled: all,
        rules: planner.rules,
        skipped: planner.skipped,
    })
}

/// The objects (device, inode) whose rules grant reading files beneath
/// them: what the broker needs to find exactly the reads Landlock refuses
/// (`BrokerRules::with_read_grants`).
pub(crate) fn read_grants(plan: &Plan) -> Vec<(u64, u64)> {
    use std::os::fd::AsRawFd;
    plan.rules
        .iter()
        .filter(|r| r.access.contains(AccessFs::ReadFile))
        .filter_map(|r| {
            // SAFETY: stat is plain data; fstat fills it from our own fd.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: a live fd and out-pointer.
            let rc = unsafe { libc::fstat(r.fd.as_raw_fd(), &mut st) };
            #[allow(clippy::unnecessary_cast)]
            (rc == 0).then_some((st.st_dev as u64, st.st_ino as u64))
        })
        .collect()
}

/// Rules for the command's own fds 0-2 (`stdio`): each regular file or
/// character device (a terminal) among them may be opened again by its
/// paths as the fd is open: for writing (WRITE_FILE), for reading
/// (READ_FILE), of the rights `handled`. The fd already grants that,
/// whatever its path (`/dev/stdout` is `/proc/self/fd/1`, which the kernel
/// opens as the fd's own file, checked by Landlock on that file).
///
/// Never a device's ioctls (IOCTL_DEV): the fd's own follow the domain it
/// was opened in, and a nested run's stdio comes from a confined command,
/// which may hold a device it may read but not control (red team R11 F2).
/// Pipes and sockets need none (no path of theirs is checked); `/dev/tty`
/// gets none: the command runs in a session of its own, without a
/// controlling terminal ([`WRITABLE_DEVICES`]).
pub(crate) fn stdio_rules(
    stdio: Option<[std::os::fd::RawFd; 3]>,
    handled: BitFlags<AccessFs>,
    abi: ABI,
) -> Vec<Rule> {
    let Some(stdio) = stdio else {
        return Vec::new();
    };
    let file_rights = AccessFs::from_file(abi) & handled;
    let mut rules = Vec::new();
    for (n, fd) in stdio.into_iter().enumerate() {
        // SAFETY: stat is plain data; fcntl and fstat on an fd number,
        // filling that local.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let (flags, rc) = unsafe { (libc::fcntl(fd, libc::F_GETFL), libc::fstat(fd, &mut st)) };
        // An `O_PATH` fd reads as `O_RDONLY` but reads nothing (open(2));
        // Landlock does not check its open, so a command can hold one on
        // a file it may not read and hand it to a nested run as its stdin
        // (red team R10 F1): it grants nothing.
        if flags < 0 || rc != 0 || flags & libc::O_PATH != 0 {
            continue;
        }
        let kind = st.st_mode & libc::S_IFMT;
        if kind != libc::S_IFREG && kind != libc::S_IFCHR {
            continue;
        }
        // /dev/null and /dev/zero (1:3, 1:5) are granted already
        // ([`WRITABLE_DEVICES`]): no rule, no probe (a launch's usual
        // stdio when output is thrown away).
        if kind == libc::S_IFCHR
            && libc::major(st.st_rdev) == 1
            && matches!(libc::minor(st.st_rdev), 3 | 5)
        {
            continue;
        }
        let mut access = BitFlags::EMPTY;
        match flags & libc::O_ACCMODE {
            libc::O_WRONLY => access |= AccessFs::WriteFile,
            libc::O_RDWR => access |= AccessFs::WriteFile | AccessFs::ReadFile,
            libc::O_RDONLY => access |= AccessFs::ReadFile,
            _ => {}
        }
        access &= file_rights;
        if access.is_empty() {
            continue;
        }
        // SAFETY: duplicates an fd number into a new fd this rule owns.
        let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
        if dup < 0 {
            continue;
        }
        rules.push(Rule {
            path: PathBuf::from(format!("(fd {n})")),
            // SAFETY: a fresh fd from F_DUPFD_CLOEXEC.
            fd: unsafe { OwnedFd::from_raw_fd(dup) },
            access,
            optional: true,
        });
    }
    rules
}

/// Whether failing to open a grant's root is an error or a skipped entry.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Required {
    Yes,
    No,
}

struct Planner {
    file_rights: BitFlags<AccessFs>,
    rules: Vec<Rule>,
    skipped: Vec<String>,
}

impl Planner {
    /// Grants `access` beneath `root`, minus every denial that covers it.
    fn grant(
        &mut self,
        root: &Path,
        mut access: BitFlags<AccessFs>,
        denies: &[(PathBuf, BitFlags<AccessFs>)],
        required: Required,
    ) -> Result<(), LandlockError> {
        // A denial at or above the root wins over the grant (as in `may_write`).
        for (deny, rights) in denies {
            if root.starts_with(deny) {
                access &= !*rights;
            }
        }
        if access.is_empty() {
            self.skipped
                .push(format!("{}: fully denied by the policy", root.display()));
            return Ok(());
        }
        let inner = beneath(root, denies, access);
        match open_path(root) {
            Ok((fd, kind)) => {
                self.split(root, fd, kind, access, &inner);
                Ok(())
            }
            Err(source) if required == Required::Yes => Err(LandlockError::OpenPath {
                path: root.to_path_buf(),
                source,
            }),
            Err(e) => {
                self.skipped.push(format!("{}: {e}", root.display()));
                Ok(())
            }
        }
    }

    /// Grants `access` on `path` (already opened as `fd`), splitting around `inner`.
    fn split(
        &mut self,
        path: &Path,
        fd: OwnedFd,
        kind: Kind,
        access: BitFlags<AccessFs>,
        inner: &[(PathBuf, BitFlags<AccessFs>)],
    ) {
        let access = match kind {
            Kind::Dir => access,
            Kind::Symlink => return, // rights follow the target, never the link
            Kind::Other => access & self.file_rights,
        };
        if access.is_empty() {
            return;
        }
        if inner.is_empty() || kind != Kind::Dir {
            self.push(path, fd, access);
            return;
        }
        let denied = inner
            .iter()
            .fold(BitFlags::EMPTY, |acc, (_, rights)| acc | *rights)
            & access;
        let keep = access & !denied;
        let entries = match list_dir(path) {
            Ok(entries) => entries,
            Err(e) => {
                self.skipped.push(format!(
                    "{}: cannot list it to split rules ({e}); its entries get no rights",
                    path.display()
                ));
                if !keep.is_empty() {
                    self.push(path, fd, keep);
                }
                return;
            }
        };
        // The children are opened beneath this fd (a duplicate when it
        // goes into a rule).
        let dir = if keep.is_empty() {
            fd
        } else {
            match fd.try_clone() {
                Ok(dir) => {
                    self.push(path, fd, keep);
                    dir
                }
                Err(e) => {
                    self.skipped.push(format!(
                        "{}: cannot open its entries ({e}); they get no rights",
                        path.display()
                    ));
                    self.push(path, fd, keep);
                    return;
                }
            }
        };
        for child in entries {
            let mut child_access = denied;
            for (deny, rights) in inner {
                if *deny == child {
                    child_access &= !*rights;
                }
            }
            if child_access.is_empty() {
                continue;
            }
            let child_inner = beneath(&child, inner, child_access);
            // Beneath the directory already open, by its name alone: the
            // path may lead elsewhere by now.
            let opened = match child.file_name() {
                Some(name) => open_at(Some(&dir), Path::new(name)),
                None => Err(std::io::Error::from_raw_os_error(libc::EINVAL)),
            };
            match opened {
                Ok((child_fd, child_kind)) => {
                    self.split(&child, child_fd, child_kind, child_access, &child_inner)
                }
                Err(e) => self.skipped.push(format!("{}: {e}", child.display())),
            }
        }
    }

    fn push(&mut self, path: &Path, fd: OwnedFd, access: BitFlags<AccessFs>) {
        self.rules.push(Rule {
            path: path.to_path_buf(),
            fd,
            access,
            optional: false,
        });
    }
}

/// Denials strictly beneath `root` that remove some of `access`.
fn beneath(
    root: &Path,
    denies: &[(PathBuf, BitFlags<AccessFs>)],
    access: BitFlags<AccessFs>,
) -> Vec<(PathBuf, BitFlags<AccessFs>)> {
    denies
        .iter()
        .filter(|(deny, rights)| {
            deny.as_path() != root && deny.starts_with(root) && !(*rights & access).is_empty()
        })
        .cloned()
        .collect()
}

/// Entries of `dir`, sorted so the plan is deterministic.
fn list_dir(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut out = std::fs::read_dir(dir)?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<std::io::Result<Vec<_>>>()?;
    out.sort();
    Ok(out)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Dir,
    Symlink,
    Other,
}

/// Opens the absolute `path` as an `O_PATH` fd, one component at a time
/// from `/`, none followed if it is a symlink (`O_NOFOLLOW`): a symlink as
/// the last component is opened itself (its rights follow the target, so it
/// gets none), one before it fails the open (`ELOOP`), as does a `.`, `..`
/// or a path that is not absolute (`EINVAL`). The paths planned are
/// canonical when the policy is resolved; a command that controls a
/// directory on the way (a nested run's write path beneath the outer run's,
/// [`ResolvedPolicy::nested_within`]) cannot make the rule land elsewhere by
/// turning that directory into a symlink afterwards. What it can still put
/// there by `rename(2)` is a directory it could already write to: moving an
/// entry out of a directory needs the remove right there, which its
/// Landlock domain grants beneath its write paths only
/// (`LANDLOCK_ACCESS_FS_REMOVE_DIR`, `_REFER`, Documentation/userspace-api/
/// landlock.rst; tests/tests/it/nested_attacks.rs,
/// `a_directory_from_outside_cannot_be_moved_beneath_the_write_path`).
fn open_path(path: &Path) -> std::io::Result<(OwnedFd, Kind)> {
    use std::path::Component;
    let invalid = || std::io::Error::from_raw_os_error(libc::EINVAL);
    let mut components = path.components();
    if components.next() != Some(Component::RootDir) {
        return Err(invalid());
    }
    let mut at = open_at(None, Path::new("/"))?;
    for component in components {
        let Component::Normal(name) = component else {
            return Err(invalid());
        };
        let (fd, kind) = at;
        if kind != Kind::Dir {
            // A symlink on the way is not followed; a file is no directory.
            return Err(std::io::Error::from_raw_os_error(
                if kind == Kind::Symlink {
                    libc::ELOOP
                } else {
                    libc::ENOTDIR
                },
            ));
        }
        at = open_at(Some(&fd), Path::new(name))?;
    }
    Ok(at)
}

/// Opens `name` beneath `dir` (or the absolute `name` when `dir` is
/// `None`) with `O_PATH | O_NOFOLLOW`, and says what it is.
fn open_at(dir: Option<&OwnedFd>, name: &Path) -> std::io::Result<(OwnedFd, Kind)> {
    use std::os::fd::AsRawFd;
    let c_name = std::ffi::CString::new(name.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    let dirfd = dir.map_or(libc::AT_FDCWD, |d| d.as_raw_fd());
    // SAFETY: `c_name` is NUL-terminated, `dirfd` a live fd or AT_FDCWD;
    // these flags take no mode argument.
    let raw = unsafe {
        libc::openat(
            dirfd,
            c_name.as_ptr(),
            libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if raw < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `raw` is a fresh fd we own.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // fstat works on O_PATH fds; go through File for its metadata helper.
    let file = File::from(fd);
    let file_type = file.metadata()?.file_type();
    let kind = if file_type.is_dir() {
        Kind::Dir
    } else if file_type.is_symlink() {
        Kind::Symlink
    } else {
        Kind::Other
    };
    Ok((OwnedFd::from(file), kind))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory on the way that is a symlink fails the open (a nested
    /// run's write path cannot be pointed elsewhere after its check); a
    /// symlink as the last component is opened itself; twin: the real
    /// directory opens.
    #[test]
    fn open_path_follows_no_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(root.join("real/sub")).unwrap();
        std::os::unix::fs::symlink(root.join("real"), root.join("link")).unwrap();
        let err = open_path(&root.join("link/sub")).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ELOOP), "{err}");
        let (_, kind) = open_path(&root.join("link")).unwrap();
        assert_eq!(kind, Kind::Symlink);
        let (_, kind) = open_path(&root.join("real/sub")).unwrap();
        assert_eq!(kind, Kind::Dir);
        let err = open_path(&root.join("real/../real/sub")).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EINVAL), "{err}");
        assert_eq!(
            open_path(Path::new("relative")).unwrap_err().raw_os_error(),
            Some(libc::EINVAL)
        );
    }
}
