//! Which objects the broker may touch, and resolving a caller's object safely.

use std::ffi::{CStr, CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sandbox_core::ResolvedPolicy;

use crate::caller::{cvt, errno_of, Caller};
use crate::creds::FixedCredentials;
use crate::error::BrokerError;
use crate::log::Refusal;
use crate::syscalls::Subject;
use sandbox_core::net::NetRule;

pub(crate) const RESOLVE_NO_SYMLINKS: u64 = 0x04;
pub(crate) const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
const RESOLVE_BENEATH: u64 = 0x08;

/// `struct open_how` (libc's is `#[non_exhaustive]`).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// The write paths (each with an `O_PATH` directory fd), write-deny and
/// read-deny paths of a policy.
#[derive(Debug)]
pub struct BrokerRules {
    write: Vec<WriteRoot>,
    write_deny: Vec<PathBuf>,
    /// Git directories of the workspace: those with a protected `hooks` or
    /// `config` (a write-deny path) beside their `HEAD`. No symlink may be
    /// made in them: git writes through one (`logs/HEAD`, a ref) at the
    /// user's next, unconfined command.
    git_dirs: Vec<PathBuf>,
    read_deny: Vec<PathBuf>,
    /// Device and inode of each deny path that existed when the rules were
    /// made, with the refusal it carries: the same file reached by another
    /// name (a hard link, a case-insensitive spelling) is refused too.
    deny_inodes: Vec<((u64, u64), Refusal)>,
    /// Each read-deny path that existed when the rules were made, with its
    /// device and inode.
    read_deny_ids: Vec<(PathBuf, (u64, u64))>,
    /// The strict ancestors of the read-deny paths (`/` among them): the
    /// directories Landlock's read rules are split in.
    read_split_dirs: std::collections::HashSet<PathBuf>,
    /// The objects (device, inode) Landlock's rules grant reading beneath,
    /// when the backend said ([`BrokerRules::with_read_grants`]).
    read_grants: Option<std::collections::HashSet<(u64, u64)>>,
    /// Whether `/dev/stdin`, `/dev/stdout`, `/dev/stderr` and `/dev/fd` are the
    /// usual symlinks into `/proc/self/fd`, so they name the caller's fds.
    dev_fd_links: bool,
    /// Pathname UNIX sockets a `connect` may reach outside the write paths
    /// (canonical, compared exactly).
    allow_unix: Vec<PathBuf>,
    /// Whether the policy allows the network at all: a `connect` that
    /// reaches the broker under `network = false` is refused, whatever
    /// routed it (the filter keeps it in the kernel; this is the second wall).
    pub(crate) network: bool,
    /// Egress rules for IP connects; `None`: every destination.
    allow_net: Option<Vec<NetRule>>,
    /// The runner's resolver and its pinned answers (see [`BrokerRules::with_dns`]).
    dns: Option<sandbox_core::DnsRoute>,
    /// Every caller's credentials, when the spawner vouches for them.
    pub(crate) fixed: Option<FixedCredentials>,
    /// Whether the filter routes `umask` to the listener.
    pub(crate) umask_routed: bool,
    /// Git directories that existed before the run stay protected
    /// ([`crate::gitdirs`]), when the policy asks for it.
    pub(crate) git: Option<Arc<crate::gitdirs::GitGuard>>,
    /// The run's own shared memory and semaphores ([`BrokerRules::with_private_shm`]).
    pub(crate) shm: Option<crate::shm::SharedMemory>,
    /// Under egress rules, the sockets the run made listen on loopback
    /// ([`crate::listeners`]): a connect reaches them unlisted.
    pub(crate) own_listeners: crate::listeners::OwnListeners,
}

/// One write path: a directory (everything beneath it) or a single file.
#[derive(Debug)]
struct WriteRoot {
    /// The write path.
    grant: PathBuf,
    /// A file write path admits exactly itself.
    exact: bool,
    /// The directory `dir` is opened on: the write path, or a file's parent.
    base: PathBuf,
    /// `O_PATH` fd on `base`.
    dir: OwnedFd,
    /// Whether `base` was `dir`'s canonical path when the rules were made.
    canonical: bool,
    /// The device `dir` lies on, unless that is procfs: a directory on it
    /// is not on procfs either.
    dev: Option<u64>,
}

impl WriteRoot {
    fn admits(&self, link: &Path) -> bool {
        if self.exact {
            link == self.grant
        } else {
            link.starts_with(&self.grant)
        }
    }
}

/// An admitted object: for a change, opened `O_PATH` beneath a write path; for
/// a read, the object the caller named.
pub(crate) struct Object {
    pub(crate) fd: OwnedFd,
    pub(crate) path: PathBuf,
    pub(crate) stat: libc::stat,
}

/// Why no object was produced.
pub(crate) enum Unresolved {
    /// Answer the caller with this errno (the kernel would have, e.g. `ENOENT`).
    Errno(i32),
    /// Refuse with `EPERM`.
    Refused(Refusal, Option<PathBuf>),
}

/// What the caller's request needs done to its object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// A metadata change: only beneath a write path, not beneath a deny path.
    Change,
    /// An xattr read: anywhere, not beneath a read-deny path.
    Read,
}

/// The handles a resolution starts from, taken from the caller with the
/// broker's own credentials (`/proc/TID/cwd`, `pidfd_getfd`); the walk from
/// them runs with the caller's ([`BrokerRules::resolve`]).
pub(crate) enum Start {
    /// The object itself: the caller's fd, or the fd a `/proc/self/fd/N` path
    /// or an `AT_EMPTY_PATH` call names.
    Object(OwnedFd),
    /// `path` to walk from `base` (`None`: an absolute path).
    Walk {
        base: Option<OwnedFd>,
        path: CString,
        follow: bool,
    },
}

impl BrokerRules {
    /// Opens every directory write path of `policy` as an `O_PATH` fd and
    /// keeps its write-deny and read-deny paths and its allowed UNIX sockets
    /// (`allow_unix_sockets`, which a `connect` may reach outside the write
    /// paths).
    ///
    /// A write path that is a single file admits exactly that file (reached
    /// again from its parent directory's fd, like every object).
    pub fn new(policy: &ResolvedPolicy) -> Result<Self, BrokerError> {
        let mut write = Vec::new();
        for path in policy.write_paths() {
            // A vanished path still fails below, naming it.
            let exact = std::fs::metadata(path).is_ok_and(|m| !m.is_dir());
            let base = match path.parent() {
                Some(parent) if exact => parent.to_path_buf(),
                _ => path.clone(),
            };
            let dir = open_dir(&base).map_err(|source| BrokerError::OpenWritePath {
                path: path.clone(),
                source,
            })?;
            write.push(WriteRoot {
                grant: path.clone(),
                exact,
                canonical: canonical(&dir).is_ok_and(|c| c == base),
                dev: fstat(&dir)
                    .ok()
                    .filter(|_| !on_procfs(&dir))
                    .map(|st| st.st_dev),
                base,
                dir,
            });
        }
        // Longest first, so the innermost write path is tried first.
        write.sort_by_key(|w| std::cmp::Reverse(w.grant.as_os_str().len()));
        let write_deny = policy.write_deny_paths().to_vec();
        let mut git_dirs: Vec<PathBuf> = write_deny
            .iter()
            .filter(|d| d.file_name().is_some_and(|n| n == "hooks" || n == "config"))
            .filter_map(|d| d.parent())
            .filter(|g| g.join("HEAD").is_file())
            .map(Path::to_path_buf)
            .collect();
        git_dirs.sort();
        git_dirs.dedup();
        let read_deny = policy.read_deny_paths().to_vec();
        let deny_inodes = write_deny
            .iter()
            .map(|p| (p, Refusal::WriteDenyPath))
            .chain(read_deny.iter().map(|p| (p, Refusal::ReadDenyPath)))
            .filter_map(|(p, r)| {
                use std::os::unix::fs::MetadataExt;
                let m = std::fs::symlink_metadata(p).ok()?;
                Some(((m.dev(), m.ino()), r))
            })
            .collect();
        let read_deny_ids = read_deny
            .iter()
            .filter_map(|d| Some((d.clone(), crate::reads::inode_of(d)?)))
            .collect();
        let read_split_dirs = read_deny
            .iter()
            .flat_map(|d| d.ancestors().skip(1).map(Path::to_path_buf))
            .collect();
        let link_is = |link: &str, target: &str| {
            std::fs::read_link(link).is_ok_and(|t| t.as_os_str().as_bytes() == target.as_bytes())
        };
        let dev_fd_links = link_is("/dev/stdin", "/proc/self/fd/0")
            && link_is("/dev/stdout", "/proc/self/fd/1")
            && link_is("/dev/stderr", "/proc/self/fd/2")
            && link_is("/dev/fd", "/proc/self/fd");
        Ok(Self {
            write,
            write_deny,
            git_dirs,
            read_deny,
            deny_inodes,
            read_deny_ids,
            read_split_dirs,
            read_grants: None,
            dev_fd_links,
            allow_unix: policy.allow_unix_sockets().to_vec(),
            // An allowlist admits its IP rules directly (names go through the
            // runner's proxy, whose address the runner adds as an IP rule).
            dns: None,
            allow_net: (policy.network_mode() == sandbox_core::NetworkMode::Allowlist).then(|| {
                policy
                    .allow_net()
                    .iter()
                    .filter_map(|r| r.as_ip().copied())
                    .collect()
            }),
            network: policy.network(),
            fixed: None,
            umask_routed: false,
            git: policy
                .protects_git_dirs()
                .then(|| Arc::new(crate::gitdirs::GitGuard::default())),
            shm: None,
            own_listeners: Default::default(),
        })
    }

    /// Lets the run make POSIX shared memory and semaphores of its own in
    /// `dir` (`/dev/shm`; the policy's `private_shm`): the broker makes new
    /// entries there and performs writing opens, links, renames, unlinks and
    /// truncates only of the inodes it made; every other call there gets
    /// what the rest of the rules (or the kernel) answer. What the run
    /// leaves there is removed when the broker stops
    /// ([`BrokerLog::shm_removed`](crate::BrokerLog::shm_removed)).
    ///
    /// The broker's own Landlock domain must grant writes in `dir` and the
    /// command's must not. `continue_others`: the filter routes writing
    /// opens and entry calls only for this (no deny path beneath a write
    /// path): a call that is not on the run's objects is let go on in the
    /// kernel, which decides it with the command's own domain, as without a
    /// broker (the broker grants nothing by continuing it).
    pub fn with_private_shm(
        mut self,
        dir: &Path,
        continue_others: bool,
    ) -> Result<Self, BrokerError> {
        self.shm = Some(
            crate::shm::SharedMemory::open(dir, continue_others).map_err(|source| {
                BrokerError::OpenSharedMemory {
                    path: dir.to_path_buf(),
                    source,
                }
            })?,
        );
        Ok(self)
    }

    /// Restricts IP connects to the destinations `rules` admit (see
    /// [`NetRule`]; the special-purpose ranges, loopback, private and
    /// link-local among them, only when listed explicitly); every other IP destination is refused with
    /// `ECONNREFUSED` ([`Refusal::NetNotAllowed`], recorded with
    /// `host:port`). Once set, sockets of a family that is neither IP, UNIX
    /// (governed by the socket rules) nor netlink (the local kernel) are
    /// refused as well, and an empty list refuses every IP connect. Calls
    /// again add rules. Without it every destination is connected (network
    /// is on).
    ///
    /// It governs `connect` only: addressed `sendto`/`sendmsg` (UDP, TCP
    /// `MSG_FASTOPEN`) reach the network without one, unless the filter
    /// refuses them (see `docs/broker.md`, Connect).
    pub fn with_allow_net(mut self, rules: Vec<NetRule>) -> Self {
        self.allow_net.get_or_insert_with(Vec::new).extend(rules);
        self
    }

    /// Takes `fixed` as every caller's credentials instead of reading them
    /// per request; see [`FixedCredentials`] for what the caller of this
    /// vouches for. The broker checks at start that its own thread has these
    /// ids and groups, and reads each caller's credentials otherwise.
    pub fn with_fixed_credentials(mut self, fixed: FixedCredentials) -> Self {
        self.fixed = Some(fixed);
        self
    }

    /// Says that the filter routes `umask` ([`Handler::Umask`](sandbox_seccomp::Handler::Umask))
    /// to the listener. Under fixed credentials the broker then keeps each
    /// caller's umask between the files it creates for it, instead of reading
    /// `/proc/TID/status` for each; a `umask` call it sees forgets them. A
    /// filter that lets `umask` through without this keeps the broker reading.
    ///
    /// The filter must also keep every thread of a group on one umask: refuse
    /// `unshare`, `clone3` and `clone(CLONE_THREAD)` without `CLONE_FS`. A
    /// thread that calls `execve` takes over its group leader's thread id,
    /// and the umask kept for that id would otherwise be the leader's.
    pub fn with_umask_routed(mut self) -> Self {
        self.umask_routed = true;
        self
    }

    /// Under egress rules: a TCP connect to port 53 of any address is made
    /// to `dns.resolver` instead (the runner's resolver, which answers only
    /// listed names), and a connect by IP is admitted too when one of
    /// `dns.pins` admits its destination (an address that resolver answered
    /// for a listed name, at a port that name's rules list, while the
    /// answer lives). With `dns.datagrams`, an IP datagram socket the
    /// filter refused is made there and handed over, and such a socket's
    /// connect is made as asked.
    pub fn with_dns(mut self, dns: sandbox_core::DnsRoute) -> Self {
        self.dns = Some(dns);
        self
    }

    /// The runner's resolver route, when set.
    pub(crate) fn dns(&self) -> Option<&sandbox_core::DnsRoute> {
        self.dns.as_ref()
    }

    /// The egress rules, when set.
    pub(crate) fn allow_net(&self) -> Option<&[NetRule]> {
        self.allow_net.as_deref()
    }

    /// Adds pathname UNIX sockets that a `connect` may reach although they lie
    /// outside every write path, besides the policy's own `allow_unix_sockets`
    /// (e.g. for an embedder's own socket). Each is canonicalised now when it exists (`/var/run/x.sock`
    /// becomes `/run/x.sock`), and kept as given when it does not (a socket
    /// made later); a connect is admitted when the canonical path of the
    /// socket it reaches equals one of them exactly (no prefix, no case
    /// folding). A path that is not absolute never matches.
    pub fn with_allow_unix(mut self, sockets: Vec<PathBuf>) -> Self {
        self.allow_unix.extend(
            sockets
                .into_iter()
                .map(|p| std::fs::canonicalize(&p).unwrap_or(p)),
        );
        self
    }

    /// Whether the canonical path `path` is an allowed UNIX socket.
    pub(crate) fn unix_allowed(&self, path: &Path) -> bool {
        path.is_absolute() && self.allow_unix.iter().any(|a| a == path)
    }

    /// The deny path `path` lies beneath (itself included), as its refusal.
    pub(crate) fn denied(&self, path: &Path) -> Option<Refusal> {
        if self.write_deny.iter().any(|d| beneath(path, d)) {
            return Some(Refusal::WriteDenyPath);
        }
        if self.read_deny.iter().any(|d| beneath(path, d)) {
            return Some(Refusal::ReadDenyPath);
        }
        None
    }

    /// Whether `path` is a strict ancestor of a deny path.
    /// Whether `path` lies in one of the workspace's git directories.
    pub(crate) fn in_git_dir(&self, path: &Path) -> bool {
        self.git_dirs.iter().any(|g| beneath(path, g))
    }

    /// Whether `dir` is a directory write path that lies beneath no other
    /// write path: the run can neither rename nor swap it, nor any of its
    /// ancestors (nothing above it is writable to the run).
    pub(crate) fn top_write_root(&self, dir: &Path) -> bool {
        let roots = || self.write.iter().filter(|w| !w.exact);
        roots().any(|w| w.grant == dir)
            && !roots().any(|w| w.grant != dir && beneath(dir, &w.grant))
    }

    pub(crate) fn ancestor_of_denied(&self, path: &Path) -> bool {
        self.write_deny
            .iter()
            .chain(&self.read_deny)
            .any(|d| beneath(d, path) && !beneath(path, d))
    }

    /// The refusal for a change to the existing object `obj` that a git
    /// directory from before the run protects ([`crate::gitdirs`]).
    pub(crate) fn git_protected(&self, obj: &Object) -> Option<Refusal> {
        self.git.as_ref()?.object(&obj.fd, &obj.path)
    }

    /// Tells the broker which objects the command's Landlock rules grant
    /// reading beneath (device and inode of each rule's object with
    /// `READ_FILE`), so that it finds exactly the reads Landlock refuses
    /// when reads are observed: the read-deny paths' contents, and a file
    /// the run made in a directory on the way to one (those directories'
    /// rules are split, one per entry present at launch). Without it, only
    /// the first (the read-deny paths' contents).
    pub fn with_read_grants(mut self, grants: impl IntoIterator<Item = (u64, u64)>) -> Self {
        self.read_grants = Some(grants.into_iter().collect());
        self
    }

    /// The canonical path of the non-directory `obj`, and why, when Landlock
    /// refuses to read it. Landlock grants a read when some object on the
    /// path walked up from it has a rule that grants it; the rules for
    /// reads are split around each read-deny path: none on the deny path
    /// and its ancestors, one on each other entry of those ancestors
    /// present at launch. So the path is followed down from `/` through the
    /// ancestors of deny paths; the first entry that is none of them
    /// decides: granted, or, when neither it nor anything beneath it on
    /// the path has a rule, refused (the deny path itself, by its name or
    /// inode, or an entry made during the run). Without the rules' objects
    /// ([`BrokerRules::with_read_grants`]): the deny paths' contents only,
    /// by the inode at the deny path's depth. Not a hard link elsewhere to
    /// a denied file, not a name that matches a deny path only when case is
    /// ignored (unlike [`BrokerRules::denied`], which refuses changes to
    /// both).
    pub(crate) fn read_denied(&self, obj: &OwnedFd) -> Option<(PathBuf, Refusal)> {
        use crate::reads::{inode_of, prefix};
        if self.read_deny_ids.is_empty() && self.read_grants.is_none() {
            return None;
        }
        let link = canonical(obj).ok()?;
        let Some(grants) = &self.read_grants else {
            return self
                .read_deny_ids
                .iter()
                .any(|(d, id)| {
                    beneath(&link, d)
                        && inode_of(&prefix(&link, d.components().count())) == Some(*id)
                })
                .then_some((link, Refusal::ReadDenyPath));
        };
        let mut at = PathBuf::new();
        let mut parts = link.components();
        for part in parts.by_ref() {
            at.push(part);
            if !self.read_split_dirs.contains(&at) {
                break;
            }
        }
        if self.read_split_dirs.contains(&at) {
            // The path is an ancestor of a deny path: a directory.
            return None;
        }
        // The first entry off the way to the deny paths, then what lies
        // beneath it on the path.
        let mut denied = false;
        loop {
            let id = inode_of(&at)?;
            if grants.contains(&id) {
                return None;
            }
            denied |= self.read_deny_ids.iter().any(|(_, deny)| *deny == id)
                || self.read_deny.contains(&at);
            match parts.next() {
                Some(part) => at.push(part),
                None => break,
            }
        }
        let why = if denied {
            Refusal::ReadDenyPath
        } else {
            Refusal::BesideReadDenyPath
        };
        Some((link, why))
    }

    /// The refusal of a deny path that is the object `st` describes.
    pub(crate) fn denied_inode(&self, st: &libc::stat) -> Option<Refusal> {
        self.deny_inodes
            .iter()
            .find(|(id, _)| *id == (st.st_dev, st.st_ino))
            .map(|(_, r)| r.clone())
    }

    /// Takes the handles `subject` starts from (with the broker's credentials).
    pub(crate) fn start(&self, caller: &Caller, subject: &Subject) -> Result<Start, Unresolved> {
        let errno = |e: io::Error| Unresolved::Errno(errno_of(&e));
        match subject {
            Subject::Fd(n) => {
                let fd = caller.fd(*n).map_err(errno)?;
                // As the kernel: fchmod, fchown, f*xattr and futimens refuse O_PATH fds.
                // SAFETY: F_GETFL on our own fd.
                if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) } & libc::O_PATH != 0 {
                    return Err(Unresolved::Errno(libc::EBADF));
                }
                Ok(Start::Object(fd))
            }
            Subject::At {
                dirfd,
                path,
                follow,
                empty_path,
            } => {
                let absolute = path.as_bytes().first() == Some(&b'/');
                if let Some(n) = crate::syscalls::dev_fd(path.as_bytes()) {
                    if *follow && self.dev_fd_links {
                        // /dev/stdout -> /proc/self/fd/1: the caller's fd, as below.
                        return Ok(Start::Object(caller.fd(n).map_err(errno)?));
                    }
                }
                if absolute && is_proc_path(path.as_bytes()) {
                    // The caller's own fd through its /proc magic link: the
                    // same object as the fd-based call, checked the same way.
                    return match crate::syscalls::proc_fd(path.as_bytes(), Some(caller.tid())) {
                        Some(n) if *follow => Ok(Start::Object(caller.fd(n).map_err(errno)?)),
                        _ => Err(Unresolved::Refused(Refusal::ProcfsPath, None)),
                    };
                }
                let base = if absolute {
                    None
                } else if *dirfd == libc::AT_FDCWD {
                    Some(caller.cwd().map_err(errno)?)
                } else {
                    Some(caller.fd(*dirfd).map_err(errno)?)
                };
                if base.as_ref().is_some_and(on_procfs) {
                    return Err(Unresolved::Refused(Refusal::ProcfsPath, None));
                }
                if path.as_bytes().is_empty() {
                    return match (*empty_path, base) {
                        (true, Some(base)) => Ok(Start::Object(base)),
                        _ => Err(Unresolved::Errno(libc::ENOENT)),
                    };
                }
                Ok(Start::Walk {
                    base,
                    path: path.clone(),
                    follow: *follow,
                })
            }
        }
    }

    /// The object `start` refers to, not yet admitted: the caller's fd, or
    /// the walk's result (with the kernel's errno when it fails).
    pub(crate) fn reach_start(&self, start: Start) -> Result<OwnedFd, Unresolved> {
        Ok(match start {
            Start::Object(fd) => fd,
            Start::Walk { base, path, follow } => {
                let nofollow = if follow { 0 } else { libc::O_NOFOLLOW };
                walk(base.as_ref(), &path, nofollow)?
            }
        })
    }

    /// Admits the directory `first` refers to as the parent of a new or
    /// removed entry: it lies beneath a directory write path (a file write
    /// path has no entries) and is reached again beneath it. Deny paths are
    /// the entry's business ([`BrokerRules::denied`]).
    pub(crate) fn admit_dir(&self, first: &OwnedFd) -> Result<Object, Unresolved> {
        self.reach(first, true)
    }

    /// The directory `dir` names from `base` (`None`: `dir` is absolute),
    /// admitted without the walk [`BrokerRules::admit_dir`] needs, when its
    /// text shows where it lies: `base`'s canonical path joined with `dir`
    /// has no `..` and lies beneath a directory write path's canonical path,
    /// and the rest is reached beneath that write path's fd with symlinks
    /// forbidden. That is the directory the kernel reaches for the caller,
    /// and its canonical path is that text (a path with no symlink and no
    /// `..` names what it reaches), so this admits exactly what the walk
    /// would. `None` (a symlink or `..` on the way, a path outside every write
    /// path, any error): decide with the walk, which also gives the
    /// kernel's errno.
    pub(crate) fn admit_dir_by_name(
        &self,
        base: Option<&OwnedFd>,
        dir: &[u8],
    ) -> Option<Result<Object, Unresolved>> {
        use std::path::Component;
        let mut path = match base {
            None => PathBuf::new(),
            Some(base) => canonical(base).ok()?,
        };
        for part in Path::new(OsStr::from_bytes(dir)).components() {
            match part {
                Component::RootDir if base.is_none() => path.push("/"),
                Component::Normal(name) => path.push(name),
                Component::CurDir => {}
                _ => return None,
            }
        }
        let root = self
            .write
            .iter()
            .find(|w| !w.exact && w.canonical && w.admits(&path))?;
        let rel = path.strip_prefix(&root.base).ok()?;
        let rel = if rel.as_os_str().is_empty() {
            CString::new(".")
        } else {
            CString::new(rel.as_os_str().as_bytes())
        }
        .ok()?;
        let fd = openat2(
            root.dir.as_raw_fd(),
            &rel,
            libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW,
            RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
        )
        .ok()?;
        let stat = fstat(&fd).ok()?;
        if root.dev != Some(stat.st_dev) && on_procfs(&fd) {
            return Some(Err(Unresolved::Refused(Refusal::ProcfsPath, Some(path))));
        }
        Some(Ok(Object { fd, path, stat }))
    }

    /// Admits the object `first` refers to when it lies beneath a write path,
    /// not beneath a write-deny or read-deny path nor in the program parts of
    /// a git directory from before the run, and is reached again beneath the
    /// write path.
    pub(crate) fn admit_change(&self, first: &OwnedFd) -> Result<Object, Unresolved> {
        let obj = self.reach(first, false)?;
        if let Some(r) = self
            .denied(&obj.path)
            .or_else(|| self.denied_inode(&obj.stat))
            .or_else(|| self.git_protected(&obj))
        {
            return Err(Unresolved::Refused(r, Some(obj.path)));
        }
        Ok(obj)
    }

    /// The object `first` refers to, reached again from the write path its
    /// canonical path lies beneath (a directory write path only, for `dirs_only`).
    fn reach(&self, first: &OwnedFd, dirs_only: bool) -> Result<Object, Unresolved> {
        let refused =
            |r: Refusal, p: Option<&Path>| Unresolved::Refused(r, p.map(Path::to_path_buf));
        let link = canonical(first)?;
        let Some(WriteRoot {
            base: root, dir, ..
        }) = self
            .write
            .iter()
            .find(|w| w.admits(&link) && !(dirs_only && w.exact))
        else {
            return Err(refused(Refusal::OutsideWritePaths, Some(&link)));
        };
        let rel = link.strip_prefix(root).unwrap_or(Path::new(""));
        let rel = if rel.as_os_str().is_empty() {
            Path::new(".")
        } else {
            rel
        };
        let rel = CString::new(rel.as_os_str().as_bytes())
            .map_err(|_| refused(Refusal::NoPath, Some(&link)))?;
        // The canonical path has no symlink and no `..`: reaching it again with
        // both forbidden, beneath the write path's fd, proves it lies there now.
        let second = openat2(
            dir.as_raw_fd(),
            &rel,
            libc::O_PATH | libc::O_NOFOLLOW,
            RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
        )
        .map_err(|e| {
            refused(
                Refusal::Unresolvable {
                    errno: errno_of(&e),
                },
                Some(&link),
            )
        })?;
        let a = fstat(first).map_err(|e| Unresolved::Errno(errno_of(&e)))?;
        let b = fstat(&second).map_err(|e| Unresolved::Errno(errno_of(&e)))?;
        if (a.st_dev, a.st_ino) != (b.st_dev, b.st_ino) {
            return Err(refused(Refusal::Moved, Some(&link)));
        }
        Ok(Object {
            fd: second,
            path: link,
            stat: b,
        })
    }

    /// Admits an unlinked object (`st_nlink` 0: an `O_TMPFILE`, a deleted
    /// file or directory) for a metadata change only when it was made inside
    /// a directory write path: its path in `/proc/self/fd` (d_path,
    /// fs/d_path.c) reads `<dir>/#<ino> (deleted)` for an `O_TMPFILE`, the
    /// directory it was made in, and `<old path> (deleted)` for a deleted
    /// file. Everything before the last name is the directory the object
    /// hangs from now (its dentry's parent, followed through renames); only
    /// the last name was chosen by whoever named the file, and a name holds
    /// no `/`. That directory must lie beneath a directory write path,
    /// be reached again beneath it (no symlink, no `..`) on the object's own
    /// mount, and the object's path must not lie beneath a deny path.
    ///
    /// Why the text cannot be forged by the command: moving a directory (or
    /// the object itself) from outside the write paths into one needs write
    /// access to the directory it leaves, which the command does not have
    /// outside them, and a mount or a namespace of its own is refused. A path
    /// that only looks like one inside a write path (the object's mount is
    /// not reachable from the broker's root, as a memfd's or another mount
    /// namespace's) is told apart by the mount check. So a `(deleted)` path
    /// inside a write path was inside it; one outside was named outside, by
    /// whoever could write there. An object handed in from outside (the
    /// host's `O_TMPFILE` or deleted file as stdout) is refused as its named
    /// twin is ([`Refusal::OutsideWritePaths`]), and so is a memfd
    /// (`/memfd:NAME (deleted)`, on a mount of its own).
    pub(crate) fn admit_unlinked(&self, first: &OwnedFd) -> Result<Object, Unresolved> {
        let errno = |e: io::Error| Unresolved::Errno(errno_of(&e));
        let link =
            std::fs::read_link(format!("/proc/self/fd/{}", first.as_raw_fd())).map_err(errno)?;
        let stat = fstat(first).map_err(errno)?;
        let refused = |r: Refusal| Unresolved::Refused(r, Some(link.clone()));
        let named = match link.as_os_str().as_bytes().strip_suffix(b" (deleted)") {
            Some(named) if stat.st_nlink == 0 => Path::new(OsStr::from_bytes(named)),
            _ => return Err(refused(Refusal::NoPath)),
        };
        if !named.is_absolute() {
            return Err(refused(Refusal::NoPath));
        }
        let Some(dir) = named.parent() else {
            return Err(refused(Refusal::OutsideWritePaths));
        };
        let Some(root) = self.write.iter().find(|w| !w.exact && w.admits(dir)) else {
            return Err(refused(Refusal::OutsideWritePaths));
        };
        let rel = match dir.strip_prefix(&root.base) {
            Ok(rel) if rel.as_os_str().is_empty() => Path::new("."),
            Ok(rel) => rel,
            Err(_) => return Err(refused(Refusal::OutsideWritePaths)),
        };
        let rel = CString::new(rel.as_os_str().as_bytes()).map_err(|_| refused(Refusal::NoPath))?;
        let parent = openat2(
            root.dir.as_raw_fd(),
            &rel,
            libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW,
            RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
        )
        .map_err(|e| {
            refused(Refusal::Unresolvable {
                errno: errno_of(&e),
            })
        })?;
        let dir_stat = fstat(&parent).map_err(errno)?;
        let same_mount = match (mount_id(first), mount_id(&parent)) {
            (Some(a), Some(b)) => a == b,
            // Kernels before 5.8 report no mount id: the device alone.
            _ => true,
        };
        if dir_stat.st_dev != stat.st_dev || !same_mount {
            return Err(refused(Refusal::OutsideWritePaths));
        }
        if let Some(r) = self.denied(named).or_else(|| self.denied_inode(&stat)) {
            return Err(refused(r));
        }
        Ok(Object {
            fd: first.try_clone().map_err(errno)?,
            path: link.clone(),
            stat,
        })
    }

    /// Admits the object `first` refers to for reading when its canonical path
    /// does not lie beneath a read-deny path. The read is then made on `first`
    /// itself, so a later rename cannot swap another object in.
    pub(crate) fn admit_read(&self, first: OwnedFd) -> Result<Object, Unresolved> {
        let link = canonical(&first)?;
        let stat = fstat(&first).map_err(|e| Unresolved::Errno(errno_of(&e)))?;
        let read_denied = self.read_deny.iter().any(|d| beneath(&link, d))
            || self.denied_inode(&stat) == Some(Refusal::ReadDenyPath);
        if read_denied {
            return Err(Unresolved::Refused(Refusal::ReadDenyPath, Some(link)));
        }
        Ok(Object {
            fd: first,
            path: link,
            stat,
        })
    }
}

/// Whether `path` lies beneath `base` (or is it), comparing components
/// without regard to case: on a case-insensitive filesystem `W/.GIT/config`
/// is `W/.git/config`. On a case-sensitive one this refuses a little more,
/// never less.
pub(crate) fn beneath(path: &Path, base: &Path) -> bool {
    let mut parts = path.components();
    base.components().all(|b| {
        parts
            .next()
            .is_some_and(|p| same_name(p.as_os_str().as_bytes(), b.as_os_str().as_bytes()))
    })
}

fn same_name(a: &[u8], b: &[u8]) -> bool {
    if a.eq_ignore_ascii_case(b) {
        return true;
    }
    if a.is_ascii() && b.is_ascii() {
        return false;
    }
    match (std::str::from_utf8(a), std::str::from_utf8(b)) {
        // Upper then lower case folds as the kernel's casefolding (full
        // case folding, CaseFolding.txt) does where lowercasing alone does
        // not: `ſ` (U+017F) and `s`, the ligature `ﬁ` and `fi`, `ß` and `ss`.
        (Ok(a), Ok(b)) if !a.is_ascii() || !b.is_ascii() => a
            .chars()
            .flat_map(char::to_uppercase)
            .flat_map(char::to_lowercase)
            .eq(b
                .chars()
                .flat_map(char::to_uppercase)
                .flat_map(char::to_lowercase)),
        _ => false,
    }
}

/// Walks `path` from `base` (`None`: the path is absolute) to an `O_PATH` fd,
/// with `flags` added (`O_NOFOLLOW`, `O_DIRECTORY`). Magic links
/// (`/proc/*/fd/N`, `/proc/*/cwd`, ...) would resolve in the broker's own
/// context, and `/proc/self` names the broker: both are refused, as is any
/// object the walk ends on in procfs.
pub(crate) fn walk(base: Option<&OwnedFd>, path: &CStr, flags: i32) -> Result<OwnedFd, Unresolved> {
    let dir = base.map_or(libc::AT_FDCWD, |b| b.as_raw_fd());
    let fd =
        openat2(dir, path, libc::O_PATH | flags, RESOLVE_NO_MAGICLINKS).map_err(
            |e| match errno_of(&e) {
                n @ (libc::ENOENT | libc::ENOTDIR | libc::ENAMETOOLONG | libc::EACCES) => {
                    Unresolved::Errno(n)
                }
                // ELOOP is both a symlink loop (or more than 40 links), the
                // kernel's answer to the caller, and a magic link refused by
                // RESOLVE_NO_MAGICLINKS. The same lookup without that flag
                // tells them apart: it still fails for a loop. (An O_PATH
                // open has no effect on what it names; the fd is dropped.)
                libc::ELOOP
                    if openat2(dir, path, libc::O_PATH | flags, 0)
                        .is_err_and(|e| errno_of(&e) == libc::ELOOP) =>
                {
                    Unresolved::Errno(libc::ELOOP)
                }
                n => Unresolved::Refused(Refusal::Unresolvable { errno: n }, None),
            },
        )?;
    if on_procfs(&fd) {
        return Err(Unresolved::Refused(Refusal::ProcfsPath, None));
    }
    Ok(fd)
}

/// The `stat` of `fd` when its inode lies on no file system a path can
/// name: pipefs, sockfs or the anon_inode file system (an anonymous pipe, a
/// socket, an eventfd...).
pub(crate) fn pathless(fd: &OwnedFd) -> Option<libc::stat> {
    /// include/uapi/linux/magic.h
    const PATHLESS: [i64; 3] = [0x5049_5045, 0x534f_434b, 0x0904_1934];
    // SAFETY: statfs is plain data; fstatfs fills it.
    let mut sfs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid fd and out-pointer.
    if unsafe { libc::fstatfs(fd.as_raw_fd(), &mut sfs) } != 0 {
        return None;
    }
    #[allow(clippy::unnecessary_cast)]
    let kind = sfs.f_type as i64;
    if !PATHLESS.contains(&kind) {
        return None;
    }
    fstat(fd).ok()
}

/// The canonical path of the object `fd` refers to, from `/proc/self/fd`; an
/// object without one (pipe, socket, memfd, unlinked file) is refused.
pub(crate) fn canonical(fd: &OwnedFd) -> Result<PathBuf, Unresolved> {
    let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .map_err(|e| Unresolved::Errno(errno_of(&e)))?;
    // The kernel appends " (deleted)" to the path of an object without a
    // name (d_path, fs/d_path.c); a real name may end so too, and then the
    // object still has a link.
    let deleted = link.as_os_str().as_bytes().ends_with(b" (deleted)")
        && fstat(fd).map_or(true, |st| st.st_nlink == 0);
    if !link.is_absolute() || deleted {
        return Err(Unresolved::Refused(Refusal::NoPath, Some(link)));
    }
    Ok(link)
}

/// The id of the mount `fd`'s object was reached through (`statx`
/// `STATX_MNT_ID`, Linux 5.8), when the kernel reports it.
fn mount_id(fd: &OwnedFd) -> Option<u64> {
    // SAFETY: statx is plain data; statx fills it.
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: our own fd with an empty path (AT_EMPTY_PATH) and a live out-pointer.
    let rc = unsafe {
        libc::statx(
            fd.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
            libc::STATX_MNT_ID,
            &mut st,
        )
    };
    (rc == 0 && st.stx_mask & libc::STATX_MNT_ID != 0).then_some(st.stx_mnt_id)
}

/// `/proc` or beneath it, lexically (also `//proc`, `/./proc`).
pub(crate) fn is_proc_path(path: &[u8]) -> bool {
    let first = path
        .split(|&b| b == b'/')
        .find(|c| !c.is_empty() && *c != b".");
    first == Some(b"proc")
}

pub(crate) fn on_procfs(fd: &OwnedFd) -> bool {
    // SAFETY: statfs is plain data; fstatfs fills it.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid fd and out-pointer.
    let rc = unsafe { libc::fstatfs(fd.as_raw_fd(), &mut st) };
    // f_type is signed in glibc, unsigned in musl.
    rc == 0 && st.f_type as u64 == libc::PROC_SUPER_MAGIC as u64
}

fn open_dir(path: &Path) -> io::Result<OwnedFd> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    openat2(libc::AT_FDCWD, &c, libc::O_PATH | libc::O_DIRECTORY, 0)
}

/// `openat2` with close-on-exec; retries `EAGAIN` (a concurrent rename seen
/// during `RESOLVE_BENEATH`) a few times.
pub(crate) fn openat2(dir: RawFd, path: &CStr, flags: i32, resolve: u64) -> io::Result<OwnedFd> {
    let how = OpenHow {
        flags: (flags | libc::O_CLOEXEC) as u64,
        mode: 0,
        resolve,
    };
    let mut tries = 0;
    loop {
        // SAFETY: openat2(dirfd, path, &how, size) with a live, correctly sized how.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                dir,
                path.as_ptr(),
                &how as *const OpenHow,
                std::mem::size_of::<OpenHow>(),
            )
        };
        match cvt(rc) {
            // SAFETY: fresh fd.
            Ok(fd) => return Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) }),
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) && tries < 8 => tries += 1,
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
            Err(e) => return Err(e),
        }
    }
}

pub(crate) fn fstat(fd: &OwnedFd) -> io::Result<libc::stat> {
    // SAFETY: stat is plain data; fstat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid fd and out-pointer.
    cvt(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } as libc::c_long)?;
    Ok(st)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn beneath_is_component_wise_and_case_blind() {
        let b = |p: &str, base: &str| beneath(Path::new(p), Path::new(base));
        assert!(b("/w/.git/config", "/w/.git"));
        assert!(b("/w/.git", "/w/.git"));
        assert!(b("/w/.GIT/Config", "/w/.git/config"));
        assert!(b("/w/ÄRGER/x", "/w/ärger"));
        // Spellings a casefolding directory (ext4/tmpfs +F) takes for the
        // protected names: the long s, the fi ligature, the Kelvin sign.
        assert!(b("/w/.baſhrc", "/w/.bashrc"));
        assert!(b("/w/.gitconﬁg", "/w/.gitconfig"));
        assert!(b("/w/.\u{212A}x", "/w/.kx"));
        // Twins: other names stay other names.
        assert!(!b("/w/.baſhrc2", "/w/.bashrc"));
        assert!(!b("/w/.gitconﬂg", "/w/.gitconfig"));
        assert!(!b("/w/.gitx", "/w/.git"));
        assert!(!b("/w", "/w/.git"));
        assert!(!b("/v/.git", "/w/.git"));
    }
}
