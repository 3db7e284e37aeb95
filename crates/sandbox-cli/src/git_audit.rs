//! After a workspace-write run: git repositories the command made whose
//! config or hooks run programs.
//!
//! A repository from before the run keeps its config and hooks unwritable
//! (the broker protects every git directory beneath the write paths). A
//! repository the run makes is its own (`git init`, `git clone` are everyday
//! work), but git reaches it from the parent: added to the parent's index as
//! a gitlink, it is a submodule to `git status`, which runs git there, with
//! that repository's `core.fsmonitor`. So the sandbox says which new ones
//! carry code that git would run, once, after the run (the settings git
//! runs as programs, and apart every setting it does not know to be
//! harmless: [`classify`]; each config parsed byte for byte as git parses
//! it: [`parse_config`]). The repositories are
//! those the broker saw made (it made the directory and wrote a `HEAD` in
//! it), wherever they are, and those the records of its nested runs name;
//! without a broker (no record of the run's entries) the workspace is
//! walked before and after, within bounds. In a session each command's
//! audit covers every repository made so far ([`Memory`]).
//!
//! The command made what the audit reads, so the audit reads only beneath
//! the write paths ([`Scope`]), on a thread without capabilities, each
//! file and hooks directory once, within one budget ([`MAX_FILES`] ...
//! [`MAX_TIME`]); past it, it names what it did not check.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How deep beneath the workspace repositories are looked for (walk only).
const DEPTH: usize = 6;
/// How many directory entries the walk reads at most.
const BUDGET: usize = 50_000;
/// How deep `include.path` chains are followed (git's own limit is 10).
const INCLUDE_DEPTH: usize = 10;
/// The most of one file the audit reads (a config, a `.git` file,
/// `commondir`), and the most hooks it names per directory: the command
/// made these files, and the runner reading them must stay bounded.
const FILE_CAP: u64 = 1 << 20;
const HOOKS_CAP: usize = 1000;
/// What one audit (every repository of one run, or of one command of a
/// session and those before it) may do at most, whatever the command made
/// (F1: a config including itself many ways, a hooks directory named many
/// times, huge files): files read, bytes read, hook directories listed,
/// directory entries read, wall time. Past any of them the audit stops
/// and says so: what it did not check is named, never taken as clean.
const MAX_FILES: usize = 512;
const MAX_BYTES: u64 = 8 << 20;
const MAX_DIRS: usize = 128;
const MAX_ENTRIES: usize = 20_000;
const MAX_TIME: Duration = Duration::from_secs(2);
/// The most programs, hooks or files one warning names (then how many
/// more), and the most characters of each.
const MAX_NAMED: usize = 20;
const MAX_NAME_LEN: usize = 300;

/// Why a file is named "not read" for being outside what the run could
/// read ([`Scope`]).
const OUTSIDE: &str = "outside the write paths";

/// Why a file or directory is named "not read" when the audit (without
/// capabilities) may not open it: git may (root's git, or after a
/// `chmod`) and run what it holds (red-team round 4, F3).
const DENIED: &str = "permission denied";
/// Why one is named "not read" when opening or reading it failed otherwise
/// than for being missing.
const FAILED: &str = "could not be read";

/// What an error opening or reading a file is to the audit: `None` when
/// missing (`ENOENT`, `ENOTDIR`: git sees nothing either), else why it is
/// named "not read" ([`DENIED`], [`FAILED`]).
fn why_not(err: &std::io::Error) -> Option<&'static str> {
    match err.raw_os_error() {
        Some(libc::ENOENT | libc::ENOTDIR) => None,
        Some(libc::EACCES | libc::EPERM) => Some(DENIED),
        _ => Some(FAILED),
    }
}

/// What the audit may read: files and directories beneath the run's write
/// paths (the run made them) and not beneath its read-deny paths. The
/// audit runs in the runner, unconfined, after the run; a path the
/// command's config names anywhere else (another user's file, a read-denied
/// secret, `/proc/kmsg`, whose read has side effects) is named, never read:
/// the deputy does no more than the sandbox let the command do.
#[derive(Clone)]
pub(crate) struct Scope {
    write: Vec<PathBuf>,
    deny: Vec<PathBuf>,
}

impl Scope {
    /// The scope of a run under `policy` (none: nothing is read) with
    /// `secrets` (`--secret`): a secret's file is read-denied to the
    /// command by its egress (`sandbox::egress`), not by `policy`, so it is
    /// out of the scope too, wherever it is (beneath a write path as well).
    pub(crate) fn of(
        policy: Option<&sandbox::policy::ResolvedPolicy>,
        secrets: &[sandbox::policy::SecretSpec],
    ) -> Scope {
        let files = secrets.iter().filter_map(|s| match s.source() {
            sandbox::policy::SecretSource::File(path) => Some(path),
            _ => None,
        });
        // As the policy's paths are: canonical (the file as given too, in
        // case it cannot be resolved now).
        let files = files.flat_map(|p| [std::fs::canonicalize(p).ok(), Some(p.clone())]);
        Scope {
            write: policy.map_or_else(Vec::new, |p| p.write_paths().to_vec()),
            deny: policy
                .map_or_else(Vec::new, |p| p.read_deny_paths().to_vec())
                .into_iter()
                .chain(files.flatten())
                .collect(),
        }
    }

    /// Whether the real (canonical) path `real` is in the scope.
    fn admits(&self, real: &Path) -> bool {
        self.write.iter().any(|w| real.starts_with(w))
            && !self.deny.iter().any(|d| real.starts_with(d))
    }

    /// `path` opened (read-only, non-blocking, no terminal, close-on-exec;
    /// as [`Open`] says) if it is in the scope: checked on its
    /// canonical path before the open (no symlink followed from there, and
    /// no magic link anywhere: `openat2` where the kernel has it) and
    /// again on the opened file itself (the path the kernel gives for the
    /// fd; its file system not procfs, sysfs or another pseudo file
    /// system), so a process of the run that survives it cannot swap what
    /// is opened. `Err(None)`: missing (git would see nothing either);
    /// `Err(Some(why))`: not opened, and why ([`why_not`]: unopenable for
    /// the audit is not nothing, git may open it).
    fn open(&self, path: &Path, how: Open) -> Result<std::fs::File, Option<&'static str>> {
        let real = std::fs::canonicalize(path).map_err(|e| why_not(&e))?;
        if !self.admits(&real) {
            return Err(Some(OUTSIDE));
        }
        let file = open_no_links(&real, how).map_err(|e| why_not(&e))?;
        match fd_path(&file) {
            Some(at) if self.admits(&at) && !pseudo_fs(&file) => Ok(file),
            _ => Err(Some(OUTSIDE)),
        }
    }
}

/// What [`Scope::open`] opens.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Open {
    /// A file, to read.
    File,
    /// A directory, to list.
    Dir,
    /// A directory, to look names up in only (`O_PATH` on Linux: a
    /// directory the audit may search but not read; elsewhere as `Dir`).
    Search,
}

/// `real` (a canonical path) opened without following a symlink (none is
/// left in it: one there now was put there since) or a magic link.
fn open_no_links(real: &Path, how: Open) -> std::io::Result<std::fs::File> {
    use std::os::fd::FromRawFd;
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(real.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    let flags = libc::O_RDONLY
        | libc::O_NONBLOCK
        | libc::O_NOCTTY
        | libc::O_CLOEXEC
        | libc::O_NOFOLLOW
        | if how == Open::File {
            0
        } else {
            libc::O_DIRECTORY
        };
    // O_PATH takes no other flags but these (openat2 refuses the others).
    #[cfg(target_os = "linux")]
    let flags = if how == Open::Search {
        libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC
    } else {
        flags
    };
    #[cfg(target_os = "linux")]
    {
        // SAFETY: open_how is plain data, all-zero valid.
        let mut how: libc::open_how = unsafe { std::mem::zeroed() };
        how.flags = flags as u64;
        how.resolve = libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
        // SAFETY: a NUL-terminated path and an open_how of the size given.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                libc::AT_FDCWD,
                c.as_ptr(),
                &how as *const libc::open_how,
                std::mem::size_of::<libc::open_how>(),
            )
        };
        if fd >= 0 {
            // SAFETY: a fresh fd owned here alone.
            return Ok(unsafe { std::fs::File::from_raw_fd(fd as i32) });
        }
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::ENOSYS) {
            return Err(err);
        }
        // Before Linux 5.6: the checks on the opened file stand alone.
    }
    // SAFETY: a NUL-terminated path; flags without O_CREAT take no mode.
    let fd = unsafe { libc::open(c.as_ptr(), flags) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh fd owned here alone.
    Ok(unsafe { std::fs::File::from_raw_fd(fd) })
}

/// The path the kernel gives for the open `file`.
fn fd_path(file: &std::fs::File) -> Option<PathBuf> {
    use std::os::fd::AsRawFd;
    #[cfg(target_os = "linux")]
    {
        std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).ok()
    }
    #[cfg(target_os = "macos")]
    {
        use std::os::unix::ffi::OsStrExt;
        let mut buf = vec![0u8; libc::PATH_MAX as usize];
        // SAFETY: F_GETPATH writes at most PATH_MAX bytes into buf.
        if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETPATH, buf.as_mut_ptr()) } != 0 {
            return None;
        }
        let len = buf.iter().position(|&b| b == 0)?;
        Some(PathBuf::from(std::ffi::OsStr::from_bytes(&buf[..len])))
    }
    #[cfg(not(any(target_os = "linux", target_os = "macos")))]
    {
        let _ = file.as_raw_fd();
        None
    }
}

/// Whether `file` lies on a pseudo file system whose files are not what a
/// run writes (procfs, sysfs, debugfs, ...: a read may have side effects).
fn pseudo_fs(file: &std::fs::File) -> bool {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        const PSEUDO: &[u64] = &[
            0x9fa0,      // proc
            0x6265_6572, // sysfs
            0x6462_6720, // debugfs
            0x7472_6163, // tracefs
            0x7363_6673, // securityfs
            0x0027_e0eb, // cgroup
            0x6367_7270, // cgroup2
            0xcafe_4a11, // bpf
            0x1cd1,      // devpts
            0x6265_6570, // configfs
            0x6e73_6673, // nsfs
            0x5345_4c46, // selinuxfs
            0xf97c_ff8c, // selinux
            0x4249_4e4d, // binfmt_misc
            0x6573_5546, // fuse control
            0x6165_676c, // pstore
            0xde5e_81e4, // efivarfs
        ];
        // SAFETY: statfs is plain data, all-zero valid; fstatfs fills it.
        let mut st: libc::statfs = unsafe { std::mem::zeroed() };
        // SAFETY: a live fd and a statfs to fill.
        if unsafe { libc::fstatfs(file.as_raw_fd(), &mut st) } != 0 {
            return true;
        }
        PSEUDO.contains(&((st.f_type as u64) & 0xffff_ffff))
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = file;
        false
    }
}

/// What is left of one audit's budget ([`MAX_FILES`], [`MAX_BYTES`],
/// [`MAX_DIRS`], [`MAX_ENTRIES`], [`MAX_TIME`]), and which limit stopped
/// it, once one did (from then on nothing more is read).
struct Budget {
    deadline: Instant,
    files: u64,
    bytes: u64,
    dirs: u64,
    entries: u64,
    stopped: Option<String>,
    /// What it did: files and bytes read, directories and entries listed.
    spent: [u64; 4],
}

impl Budget {
    fn new(time: Duration) -> Budget {
        Budget {
            deadline: Instant::now() + time,
            files: MAX_FILES as u64,
            bytes: MAX_BYTES,
            dirs: MAX_DIRS as u64,
            entries: MAX_ENTRIES as u64,
            stopped: None,
            spent: [0; 4],
        }
    }

    /// Whether the audit may go on (its time is checked here).
    fn ok(&mut self) -> bool {
        if self.stopped.is_none() && Instant::now() >= self.deadline {
            self.stopped = Some(format!("its time limit, {} s", MAX_TIME.as_secs()));
        }
        self.stopped.is_none()
    }

    /// Takes `n` from what `left` picks if the audit may go on and that
    /// much is left; else the audit stops, for `limit`.
    fn take(
        &mut self,
        n: u64,
        left: fn(&mut Budget) -> &mut u64,
        limit: &dyn Fn() -> String,
    ) -> bool {
        if !self.ok() {
            return false;
        }
        let left = left(self);
        if *left < n {
            self.stopped = Some(limit());
            return false;
        }
        *left -= n;
        true
    }

    /// One file of `len` bytes read.
    fn file(&mut self, len: u64) -> bool {
        let took = self.take(1, |b| &mut b.files, &|| {
            format!("its limit of {MAX_FILES} files")
        }) && self.take(len, |b| &mut b.bytes, &|| {
            format!("its limit of {} MiB read", MAX_BYTES >> 20)
        });
        if took {
            self.spent[0] += 1;
            self.spent[1] += len;
        }
        took
    }

    /// One hook directory listed.
    fn dir(&mut self) -> bool {
        let took = self.take(1, |b| &mut b.dirs, &|| {
            format!("its limit of {MAX_DIRS} hook directories")
        });
        self.spent[2] += u64::from(took);
        took
    }

    /// One directory entry read.
    fn entry(&mut self) -> bool {
        let took = self.take(1, |b| &mut b.entries, &|| {
            format!("its limit of {MAX_ENTRIES} directory entries")
        });
        self.spent[3] += u64::from(took);
        took
    }

    /// What the audit did, for the warning that says it stopped.
    fn spent(&self) -> String {
        let [files, bytes, dirs, entries] = self.spent;
        format!(
            "{files} files ({bytes} bytes) read and {dirs} hook directories ({entries} \
             entries) listed"
        )
    }
}

/// What the audit read of a file the command could have made.
enum Read {
    /// Missing: git would see nothing either.
    Nothing,
    /// Its bytes, as git reads them (whatever their encoding).
    Text(Vec<u8>),
    /// Not read, and why: outside what the run could read ([`OUTSIDE`]),
    /// a FIFO (whose open or read would block the runner forever: nothing
    /// of the run is left to write it), a device (`/dev/zero` never ends),
    /// a file over [`FILE_CAP`], or one the audit could not open or read
    /// ([`DENIED`], [`FAILED`]: git may).
    Refused(&'static str),
    /// Not read: the audit's budget is spent ([`Budget::stopped`] says).
    Stopped,
}

/// `path` opened if `scope` admits it ([`Scope::open`]) and it is a
/// regular file of at most [`FILE_CAP`] bytes (checked before the open,
/// which is non-blocking and takes no terminal, and again on the open
/// file), with its metadata.
fn open_regular(path: &Path, scope: &Scope) -> Result<(std::fs::File, std::fs::Metadata), Read> {
    let regular = |m: &std::fs::Metadata| {
        if !m.is_file() {
            Err("not a regular file")
        } else if m.len() > FILE_CAP {
            Err("over 1 MiB")
        } else {
            Ok(())
        }
    };
    // Nothing outside the scope is looked at further (not even its kind).
    let nothing = |e: std::io::Error| why_not(&e).map_or(Read::Nothing, Read::Refused);
    let real = std::fs::canonicalize(path).map_err(nothing)?;
    if !scope.admits(&real) {
        return Err(Read::Refused(OUTSIDE));
    }
    let meta = std::fs::metadata(&real).map_err(nothing)?;
    // A special file or a huge one is named without an open.
    regular(&meta).map_err(Read::Refused)?;
    let file = match scope.open(&real, Open::File) {
        Ok(file) => file,
        Err(None) => return Err(Read::Nothing),
        Err(Some(why)) => return Err(Read::Refused(why)),
    };
    let meta = file.metadata().map_err(nothing)?;
    regular(&meta).map_err(Read::Refused)?;
    Ok((file, meta))
}

/// The text of `file` ([`open_regular`]), at most [`FILE_CAP`] bytes, if
/// `budget` has room for it.
fn read_opened(file: std::fs::File, meta: &std::fs::Metadata, budget: &mut Budget) -> Read {
    use std::io::Read as _;
    if !budget.file(meta.len()) {
        return Read::Stopped;
    }
    let mut bytes = Vec::new();
    if let Err(e) = file.take(FILE_CAP).read_to_end(&mut bytes) {
        return why_not(&e).map_or(Read::Nothing, Read::Refused);
    }
    // Not UTF-8 is no reason to skip it: git reads bytes.
    Read::Text(bytes)
}

/// `path` read without ever blocking or growing without bound, and only
/// if `scope` admits it ([`open_regular`]) and `budget` has room.
fn read_bounded(path: &Path, scope: &Scope, budget: &mut Budget) -> Read {
    match open_regular(path, scope) {
        Ok((file, meta)) => read_opened(file, &meta, budget),
        Err(read) => read,
    }
}

/// The hook names git knows: each is looked up in a hooks directory by
/// name ([`list_dir`]), however many other names the directory holds.
const HOOK_NAMES: &[&str] = &[
    "applypatch-msg",
    "pre-applypatch",
    "post-applypatch",
    "pre-commit",
    "pre-merge-commit",
    "prepare-commit-msg",
    "commit-msg",
    "post-commit",
    "pre-rebase",
    "post-checkout",
    "post-merge",
    "pre-push",
    "pre-receive",
    "update",
    "proc-receive",
    "post-receive",
    "post-update",
    "reference-transaction",
    "push-to-checkout",
    "pre-auto-gc",
    "post-rewrite",
    "sendemail-validate",
    "fsmonitor-watchman",
    "p4-changelist",
    "p4-prepare-changelist",
    "p4-post-changelist",
    "p4-pre-submit",
    "post-index-change",
];

/// A hooks directory as [`list_dir`] read it.
struct Listed {
    /// Whether it could only be searched, not listed ([`DENIED`]): only
    /// the hook names git knows were looked up.
    denied: bool,
    /// The names in it not ending in `.sample`: each hook name git knows
    /// that is there, then the others listed.
    names: Vec<std::ffi::OsString>,
    /// Whether the listing stopped at [`HOOKS_CAP`] names before its end.
    partial: bool,
}

/// The names in the directory `dir` not ending in `.sample` (each hook
/// name git knows looked up on the opened directory, then at most
/// [`HOOKS_CAP`] listed, within `budget`), if `scope` admits it
/// ([`Scope::open`]; one the audit may search but not read: the names git
/// knows only, [`Listed::denied`]); `Ok(None)` when that directory (device and inode) is
/// in `seen` already (listed once however many names it has).
fn list_dir(
    dir: &Path,
    scope: &Scope,
    budget: &mut Budget,
    seen: &mut HashSet<(u64, u64)>,
) -> Result<Option<Listed>, Option<&'static str>> {
    use std::os::fd::{AsRawFd, IntoRawFd};
    use std::os::unix::ffi::OsStrExt;
    let (file, denied) = match scope.open(dir, Open::Dir) {
        Ok(file) => (file, false),
        Err(Some(DENIED)) => (scope.open(dir, Open::Search)?, true),
        Err(why) => return Err(why),
    };
    let meta = file.metadata().map_err(|e| why_not(&e))?;
    if !seen.insert((meta.dev(), meta.ino())) || !budget.dir() {
        return Ok(None);
    }
    let mut names: Vec<std::ffi::OsString> = Vec::new();
    for hook in HOOK_NAMES {
        let Ok(c) = std::ffi::CString::new(*hook) else {
            continue;
        };
        // SAFETY: stat is plain data, all-zero valid; fstatat fills it.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a live directory fd, a NUL-terminated name, a stat to fill.
        let r = unsafe {
            libc::fstatat(
                file.as_raw_fd(),
                c.as_ptr(),
                &mut st,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        if r == 0 {
            names.push(hook.into());
        }
    }
    let known = names.len();
    if denied {
        return Ok(Some(Listed {
            denied,
            names,
            partial: false,
        }));
    }
    let fd = file.into_raw_fd();
    // SAFETY: fdopendir takes the fd (closed by closedir).
    let d = unsafe { libc::fdopendir(fd) };
    if d.is_null() {
        let err = std::io::Error::last_os_error();
        // SAFETY: the fd is still ours when fdopendir fails.
        unsafe { libc::close(fd) };
        return Err(why_not(&err).or(Some(FAILED)));
    }
    let mut partial = false;
    while budget.entry() {
        // SAFETY: a live DIR stream.
        let e = unsafe { libc::readdir(d) };
        if e.is_null() {
            break;
        }
        // SAFETY: d_name is NUL-terminated in the entry readdir returned.
        let name = unsafe { std::ffi::CStr::from_ptr((*e).d_name.as_ptr()) };
        let name = std::ffi::OsStr::from_bytes(name.to_bytes());
        if name == "." || name == ".." || name.as_bytes().ends_with(b".sample") {
            continue;
        }
        if names[..known].iter().any(|k| k == name) {
            continue;
        }
        if names.len() - known >= HOOKS_CAP {
            partial = true;
            break;
        }
        names.push(name.to_os_string());
    }
    // SAFETY: the stream opened above, closed once.
    unsafe { libc::closedir(d) };
    Ok(Some(Listed {
        denied,
        names,
        partial,
    }))
}

/// What a config entry is to the audit ([`classify`]).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Kind {
    /// `include.path`, `includeIf.<cond>.path`: the file is read too.
    Include,
    /// Known not to make git run a program (what `git init`, `git clone`,
    /// `git config user.*`, `git submodule`, ... write, and the like).
    Harmless,
    /// Git runs its value (or a program it names) as a program.
    Runs,
    /// Neither: the audit does not know it to be harmless, so it is named.
    Unknown,
}

/// The `core.<key>` settings known harmless.
const CORE_HARMLESS: &[&str] = &[
    "repositoryformatversion",
    "filemode",
    "bare",
    "logallrefupdates",
    "ignorecase",
    "precomposeunicode",
    "symlinks",
    "autocrlf",
    "eol",
    "safecrlf",
    // Not `worktree`: git runs hooks there, so it moves where a relative
    // `core.hooksPath` points (red team R12 F2): beside one, it is named
    // and expanded against (`runs_code_beside`); alone (a submodule's git
    // directory sets it) it is harmless.
    "sparsecheckout",
    "sparsecheckoutcone",
    "quotepath",
    "untrackedcache",
    "checkstat",
    "trustctime",
    "abbrev",
    "compression",
    "loosecompression",
    "preloadindex",
    "multipackindex",
    "commitgraph",
    "splitindex",
    "whitespace",
    "commentchar",
    "commentstring",
    "warnambiguousrefs",
    "bigfilethreshold",
];

/// The `remote.<name>.<key>` settings known harmless (`url` and `pushurl`
/// unless a transport helper: [`classify`]).
const REMOTE_HARMLESS: &[&str] = &[
    "url",
    "pushurl",
    "fetch",
    "push",
    "tagopt",
    "mirror",
    "promisor",
    "partialclonefilter",
    "prune",
    "prunetags",
    "skipdefaultupdate",
    "skipfetchall",
    "followremotehead",
];

/// The `branch.<name>.<key>` settings known harmless.
const BRANCH_HARMLESS: &[&str] = &[
    "remote",
    "pushremote",
    "merge",
    "rebase",
    "description",
    "vscode-merge-base",
];

/// The `submodule.<name>.<key>` settings known harmless (`url` unless a
/// transport helper, `update` unless `!command`: [`classify`]).
const SUBMODULE_HARMLESS: &[&str] = &[
    "url",
    "update",
    "active",
    "branch",
    "fetchrecursesubmodules",
    "ignore",
    "shallow",
];

/// Other `section.key` settings (no subsection) known harmless.
const HARMLESS: &[&str] = &[
    "init.defaultbranch",
    "remote.pushdefault",
    "branch.autosetupmerge",
    "branch.autosetuprebase",
    "branch.sort",
    "submodule.active",
    "submodule.recurse",
    "submodule.fetchjobs",
    "pull.rebase",
    "pull.ff",
    "push.default",
    "push.autosetupremote",
    "push.followtags",
    "fetch.prune",
    "fetch.prunetags",
    "fetch.writecommitgraph",
    "fetch.recursesubmodules",
    "fetch.parallel",
    "merge.ff",
    "merge.conflictstyle",
    "merge.renames",
    "rebase.autosquash",
    "rebase.autostash",
    "rebase.updaterefs",
    "rerere.enabled",
    "rerere.autoupdate",
    "commit.gpgsign",
    "tag.gpgsign",
    "gpg.format",
    "index.version",
    "index.sparse",
    "index.skiphash",
    "feature.manyfiles",
    "feature.experimental",
    "gc.auto",
    "gc.autodetach",
    "gc.autopacklimit",
    "gc.writecommitgraph",
    "maintenance.auto",
    "maintenance.strategy",
    "diff.renames",
    "diff.algorithm",
    "diff.colormoved",
    "diff.mnemonicprefix",
    "diff.noprefix",
    "diff.submodule",
    "diff.renamelimit",
    "receive.denycurrentbranch",
    "receive.denynonfastforwards",
    "http.postbuffer",
    "http.version",
    "clone.defaultremotename",
    "lfs.repositoryformatversion",
    "worktree.guessremote",
];

/// Sections whose every key (no subsection) is known harmless: names,
/// addresses, colours, hints, formats, booleans.
const HARMLESS_SECTIONS: &[&str] = &[
    "extensions",
    "user",
    "author",
    "committer",
    "advice",
    "color",
    "status",
    "log",
];

/// Protocols whose `protocol.<name>.allow` is harmless whatever it says
/// (git allows them always by default; `ext` runs a command).
const SAFE_PROTOCOLS: &[&[u8]] = &[b"http", b"https", b"git", b"ssh", b"file"];

/// The URL schemes git serves itself (or with its own `git-remote-http`).
const GIT_SCHEMES: &[&[u8]] = &[
    b"file", b"git", b"ssh", b"git+ssh", b"ssh+git", b"http", b"https", b"ftp", b"ftps",
];

/// Whether `url` names a transport helper, as git's `transport_get`
/// reads it: `<helper>::<address>` (`ext::` runs its command, `fd::`
/// talks over inherited descriptors, any other runs `git-remote-<helper>`),
/// or `<scheme>://` of a scheme git does not serve itself (it runs
/// `git-remote-<scheme>`).
fn transport_helper(url: &[u8]) -> bool {
    let scheme = url
        .iter()
        .enumerate()
        .take_while(|&(i, &c)| c.is_ascii_alphanumeric() || (i > 0 && b"+-.".contains(&c)))
        .count();
    let rest = &url[scheme..];
    rest.starts_with(b"::")
        || (scheme > 0
            && rest.starts_with(b"://")
            && !GIT_SCHEMES
                .iter()
                .any(|s| s.eq_ignore_ascii_case(&url[..scheme])))
}

/// What the config entry named `name` (as git gives it to its callbacks:
/// `section[.subsection].key`, section and key lowercase) with `value`
/// is to the audit. The name is split as git's `parse_config_key` does:
/// the section up to the first dot, the key after the last.
fn classify(name: &[u8], value: Option<&[u8]>) -> Kind {
    let (Some(first), Some(last)) = (
        name.iter().position(|&b| b == b'.'),
        name.iter().rposition(|&b| b == b'.'),
    ) else {
        return Kind::Unknown;
    };
    let section = std::str::from_utf8(&name[..first]).unwrap_or("");
    let key = std::str::from_utf8(&name[last + 1..]).unwrap_or("");
    let sub = (first != last).then(|| &name[first + 1..last]);
    let value = value.unwrap_or(b"");
    let bang = value.first() == Some(&b'!');
    let never = value.eq_ignore_ascii_case(b"never");
    let runs_if = |runs: bool| if runs { Kind::Runs } else { Kind::Harmless };
    match (section, sub, key) {
        ("include", None, "path") | ("includeif", Some(_), "path") => Kind::Include,
        (
            "core",
            None,
            "fsmonitor"
            | "hookspath"
            | "sshcommand"
            | "gitproxy"
            | "editor"
            | "pager"
            | "askpass"
            | "alternaterefscommand",
        )
        | ("sequence", None, "editor")
        | ("diff", None, "external")
        | ("interactive", None, "difffilter")
        | ("uploadpack", None, "packobjectshook")
        | ("gc", None, "recentobjectshook")
        | ("diff", Some(_), "textconv" | "command")
        | ("merge", Some(_), "driver")
        | ("filter", Some(_), "clean" | "smudge" | "process")
        | ("difftool" | "mergetool" | "browser" | "man", Some(_), "cmd" | "path")
        | ("guitool", Some(_), "cmd")
        | ("trailer", Some(_), "command" | "cmd")
        | ("remote", Some(_), "uploadpack" | "receivepack" | "vcs")
        | ("credential", _, "helper")
        | ("pager", _, _)
        | ("sendemail", _, "sendmailcmd" | "smtpserver" | "tocmd" | "cccmd" | "headercmd") => {
            Kind::Runs
        }
        ("gpg", _, k) if k.ends_with("program") || k.ends_with("command") => Kind::Runs,
        // `!command` runs it; any other alias may still run one through
        // options (`fetch --upload-pack=...`): named either way.
        ("alias", _, _) => {
            if bang {
                Kind::Runs
            } else {
                Kind::Unknown
            }
        }
        ("remote", Some(_), "url" | "pushurl") | ("submodule", Some(_), "url") => {
            runs_if(transport_helper(value))
        }
        ("url", Some(base), "insteadof" | "pushinsteadof") => runs_if(transport_helper(base)),
        ("submodule", Some(_), "update") => runs_if(bang),
        // `protocol.allow=always` or `protocol.ext.allow` lets `ext::`
        // URLs run their commands.
        ("protocol", None, "allow") => runs_if(!never),
        ("protocol", Some(p), "allow") => runs_if(!never && !SAFE_PROTOCOLS.contains(&p)),
        ("core", None, k) if CORE_HARMLESS.contains(&k) => Kind::Harmless,
        ("remote", Some(_), k) if REMOTE_HARMLESS.contains(&k) => Kind::Harmless,
        ("branch", Some(_), k) if BRANCH_HARMLESS.contains(&k) => Kind::Harmless,
        ("submodule", Some(_), k) if SUBMODULE_HARMLESS.contains(&k) => Kind::Harmless,
        ("color", Some(_), _) => Kind::Harmless,
        (s, None, _) if HARMLESS_SECTIONS.contains(&s) => Kind::Harmless,
        (s, None, k) if HARMLESS.iter().any(|h| h.split_once('.') == Some((s, k))) => {
            Kind::Harmless
        }
        _ => Kind::Unknown,
    }
}

/// The git directories (`.git` directories and files) beneath `root`.
pub(crate) fn git_dirs(root: &Path) -> BTreeSet<PathBuf> {
    let mut found = BTreeSet::new();
    let mut budget = BUDGET;
    walk(root, 0, &mut budget, &mut found);
    found
}

fn walk(dir: &Path, depth: usize, budget: &mut usize, found: &mut BTreeSet<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        if *budget == 0 {
            return;
        }
        *budget -= 1;
        let name = e.file_name();
        let Ok(kind) = e.file_type() else { continue };
        if name == ".git" {
            found.insert(e.path());
            continue;
        }
        if kind.is_dir() && depth < DEPTH && name != "node_modules" && name != "target" {
            walk(&e.path(), depth + 1, budget, found);
        }
    }
}

/// Whether `dir` is a git directory or lies in one (`HEAD`, and `objects`
/// and `refs` or a `commondir`): a place the sandbox writes nothing of its
/// own, whatever the run could write, since git reads it.
pub(crate) fn in_git_dir(dir: &Path) -> bool {
    dir.ancestors().any(|d| {
        d.join("HEAD").symlink_metadata().is_ok()
            && ((d.join("objects").is_dir() && d.join("refs").is_dir())
                || d.join("commondir").is_file())
    })
}

/// A path from the bytes git read (a C string: up to a NUL).
fn path_of(bytes: &[u8]) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    PathBuf::from(std::ffi::OsStr::from_bytes(c_str(bytes)))
}

/// `bytes` up to the first NUL, as git's C strings end there.
fn c_str(bytes: &[u8]) -> &[u8] {
    bytes.split(|&b| b == 0).next().unwrap_or(bytes)
}

/// The git directory `dot_git` names: itself, or what a `.git` file points
/// to (as git's `read_gitfile_gently` reads it: `gitdir: ` first, trailing
/// newlines and carriage returns dropped, relative to the file's directory).
/// `Err(Some(line))`: a `.git` file the audit did not read, named.
fn git_dir_of(
    dot_git: &Path,
    scope: &Scope,
    budget: &mut Budget,
) -> Result<PathBuf, Option<String>> {
    if dot_git.is_dir() {
        return Ok(dot_git.to_path_buf());
    }
    let text = match read_bounded(dot_git, scope, budget) {
        Read::Text(text) => text,
        Read::Refused(why) => return Err(Some(not_read(dot_git, why))),
        Read::Nothing | Read::Stopped => return Err(None),
    };
    let mut rest = text.strip_prefix(b"gitdir: ").ok_or(None)?;
    while let [head @ .., b'\n' | b'\r'] = rest {
        rest = head;
    }
    let p = path_of(rest);
    Ok(if p.is_absolute() {
        p
    } else {
        dot_git.parent().unwrap_or(Path::new("/")).join(p)
    })
}

/// What the audit found in one repository ([`runs_code_within`]).
#[derive(Default, Debug)]
struct Findings {
    /// What runs programs: config keys, hooks, and files not (fully) read.
    runs: Vec<String>,
    /// Config keys the audit does not know to be harmless ([`Kind::Unknown`]).
    unknown: Vec<String>,
}

/// What in the repository at `dot_git` (a git directory or a `.git` file)
/// runs programs: config keys (in `config`, `config.worktree` and the common
/// directory's config, every `include.path` and `includeIf.*.path` they
/// name followed, whatever its condition) and hooks (in `hooks` and where
/// `core.hooksPath` points); and the config keys it does not know.
///
/// Only what `scope` admits is read or listed (what the run could read
/// and made); a config, include or hooks directory elsewhere is named
/// "not read (outside the write paths)". Within `budget` ([`warnings`]
/// shares one between repositories): what it found before the budget was
/// spent, if it was ([`Budget::stopped`]).
///
/// The hooks of a `commondir` that leads to a git directory in `audited`
/// (canonical: one this audit already named, as a linked worktree's leads
/// to its main repository's) are not listed again: they were named under
/// that repository. Only that exact directory: hooks reached any other way
/// (a hooks directory that is a link to another repository's) are named
/// under each repository that has them (red team R10 F3); the common
/// config is read for each (R11 F3).
fn runs_code_beside(
    dot_git: &Path,
    scope: &Scope,
    budget: &mut Budget,
    audited: &HashSet<PathBuf>,
) -> Findings {
    let gitdir = match git_dir_of(dot_git, scope, budget) {
        Ok(gitdir) => gitdir,
        Err(named) => {
            return Findings {
                runs: named.into_iter().collect(),
                unknown: Vec::new(),
            }
        }
    };
    let mut configs = vec![gitdir.join("config"), gitdir.join("config.worktree")];
    let mut hook_dirs = vec![gitdir.join("hooks")];
    let mut unread = Vec::new();
    let commondir = gitdir.join("commondir");
    match read_bounded(&commondir, scope, budget) {
        Read::Text(common) => {
            // As git's `get_common_dir_noenv`: trailing newlines dropped.
            let mut common = common.as_slice();
            while let [head @ .., b'\n'] = common {
                common = head;
            }
            let common = gitdir.join(path_of(common));
            // Its config is read for each worktree: a relative
            // `core.hooksPath` there names each worktree's own directory
            // (red team R11 F3).
            configs.push(common.join("config"));
            if !std::fs::canonicalize(&common).is_ok_and(|c| audited.contains(&c)) {
                // Git keeps hooks in the common directory (red-team round 4, F1).
                hook_dirs.push(common.join("hooks"));
            }
        }
        Read::Refused(why) => unread.push(not_read(&commondir, why)),
        Read::Nothing | Read::Stopped => {}
    }
    let mut found = Found::default();
    let mut seen = HashMap::new();
    for config in configs {
        read_config(&config, scope, budget, 0, &mut seen, &mut found);
    }
    let named = |kind: Kind| {
        let mut had = HashSet::new();
        found
            .entries
            .iter()
            .filter(|(k, name, _)| *k == kind && had.insert(name.clone()))
            .map(|(_, name, _)| name.clone())
            .collect::<Vec<String>>()
    };
    let runs = named(Kind::Runs);
    let mut unknown = named(Kind::Unknown);
    // A key set once to what runs and once to what is unknown: said once.
    unknown.retain(|u| !runs.contains(u));
    let relative_hooks = found.entries.iter().any(|(_, name, value)| {
        name == "core.hookspath" && !matches!(c_str(value).first(), Some(b'/' | b'~'))
    });
    if !relative_hooks {
        unknown.retain(|u| u != "core.worktree");
    }
    let mut out = Findings { runs, unknown };
    out.runs.extend(unread);
    // A relative `core.hooksPath` is the worktree's: the `.git` entry's
    // directory, and for a linked worktree's git directory also the
    // worktree its `gitdir` file names (gitrepository-layout(5); both,
    // as git runs in whichever holds a `.git` naming this directory).
    let mut worktrees = vec![dot_git.parent().unwrap_or(Path::new("/")).to_path_buf()];
    // `core.worktree` (relative to the git directory) is where git runs:
    // resolved as git resolves it, through the links on the way (red team
    // R13 F2: `.git` a link, `..` taken by name named a decoy); one that
    // does not resolve holds no hooks.
    worktrees.extend(
        found
            .entries
            .iter()
            .filter(|(_, name, _)| name == "core.worktree")
            .filter_map(|(_, _, value)| {
                std::fs::canonicalize(gitdir.join(path_of(c_str(value)))).ok()
            }),
    );
    if gitdir.join("commondir").exists() {
        if let Read::Text(named) = read_bounded(&gitdir.join("gitdir"), scope, budget) {
            let mut named = named.as_slice();
            while let [head @ .., b'\n'] = named {
                named = head;
            }
            if let Some(worktree) = gitdir.join(path_of(named)).parent() {
                worktrees.push(worktree.to_path_buf());
            }
        }
    }
    let mut values = HashSet::new();
    for (_, name, value) in &found.entries {
        if name == "core.hookspath" && values.insert(value.clone()) {
            for worktree in &worktrees {
                match expand(value, worktree) {
                    Some(dir) => hook_dirs.push(dir),
                    None => out.runs.push(unexpanded(value)),
                }
            }
        }
    }
    // Each directory once, however many names lead to it.
    let mut listed = HashSet::new();
    for dir in hook_dirs {
        match list_dir(&dir, scope, budget, &mut listed) {
            Ok(Some(listed)) => {
                out.runs.extend(
                    listed
                        .names
                        .iter()
                        .map(|n| format!("{}/{}", dir.display(), n.to_string_lossy())),
                );
                if listed.denied {
                    out.runs.push(not_read(&dir, DENIED));
                }
                if listed.partial {
                    out.runs.push(format!(
                        "{} (not fully listed: over {HOOKS_CAP} names; treat as suspicious)",
                        dir.display()
                    ));
                }
            }
            Ok(None) | Err(None) => {}
            Err(Some(why)) => out.runs.push(not_read(&dir, why)),
        }
    }
    out
}

/// The config entries an audit keeps of one repository: those that run
/// programs or that it does not know, and the files it did not (fully)
/// read (as [`Kind::Runs`]), each once (the value kept only for
/// `core.hooksPath`, whose directories are listed, and `core.worktree`,
/// against which they are), at most [`MAX_FOUND`]
/// (then the budget stops: the audit says so).
#[derive(Default)]
struct Found {
    entries: Vec<(Kind, String, Vec<u8>)>,
    had: HashSet<(Kind, String, Vec<u8>)>,
}

/// The most config entries [`Found`] keeps of one repository.
const MAX_FOUND: usize = 10_000;

impl Found {
    fn push(&mut self, kind: Kind, name: String, value: Vec<u8>, budget: &mut Budget) {
        if matches!(kind, Kind::Harmless | Kind::Include) {
            return;
        }
        let value = if name == "core.hookspath" || name == "core.worktree" {
            value
        } else {
            Vec::new()
        };
        // The kind too: `alias.x = status` then `alias.x = !cmd` is kept twice.
        if self.had.contains(&(kind, name.clone(), value.clone())) {
            return;
        }
        if self.entries.len() >= MAX_FOUND {
            if budget.stopped.is_none() {
                budget.stopped = Some(format!("its limit of {MAX_FOUND} config entries"));
            }
            return;
        }
        self.had.insert((kind, name.clone(), value.clone()));
        self.entries.push((kind, name, value));
    }
}

/// `path` as git reads a path value (`interpolate_path`): `~` and `~/`
/// from `$HOME`, relative to `base`; `None` for `~user/` and
/// `%(prefix)/`, which the audit does not expand (it names them).
fn expand(path: &[u8], base: &Path) -> Option<PathBuf> {
    let path = c_str(path);
    if path.starts_with(b"%(prefix)/") {
        return None;
    }
    if let Some(user) = path.strip_prefix(b"~") {
        let (name, rest) = match user.iter().position(|&b| b == b'/') {
            Some(at) => (&user[..at], &user[at + 1..]),
            None => (user, &b""[..]),
        };
        if !name.is_empty() {
            return None;
        }
        let home = std::env::var_os("HOME")?;
        return Some(Path::new(&home).join(path_of(rest)));
    }
    Some(base.join(path_of(path)))
}

/// How the warning names a path value the audit did not expand.
fn unexpanded(path: &[u8]) -> String {
    format!(
        "{} (a path the git audit does not expand: not read)",
        String::from_utf8_lossy(c_str(path))
    )
}

/// The entries of the git config file `path` and of every file it includes
/// that run programs or are not known ([`Found`]), within `budget`. A file
/// is read once per directory its includes resolve from (`seen`: its
/// device and inode and that directory, however the include spelled its
/// path), again only when reached at a lesser include depth (its includes
/// then go deeper). A file git would refuse (a line that is not config
/// syntax) is named: git stops there, and the audit reads no further.
fn read_config(
    path: &Path,
    scope: &Scope,
    budget: &mut Budget,
    depth: usize,
    seen: &mut HashMap<(u64, u64, PathBuf), usize>,
    out: &mut Found,
) {
    if depth > INCLUDE_DEPTH || !budget.ok() {
        return;
    }
    let base = path.parent().unwrap_or(Path::new("/"));
    let (file, meta) = match open_regular(path, scope) {
        Ok(opened) => opened,
        Err(Read::Refused(why)) => {
            // Named in the warning: git reading it would block or never
            // end, or read what the audit did not.
            out.push(Kind::Runs, not_read(path, why), Vec::new(), budget);
            return;
        }
        Err(_) => return,
    };
    let key = (
        meta.dev(),
        meta.ino(),
        std::fs::canonicalize(base).unwrap_or_else(|_| base.to_path_buf()),
    );
    if seen.get(&key).is_some_and(|&d| d <= depth) {
        return;
    }
    seen.insert(key, depth);
    let Read::Text(text) = read_opened(file, &meta, budget) else {
        return;
    };
    let parsed = parse_config(&text);
    for (name, value) in parsed.entries {
        let kind = classify(&name, value.as_deref());
        if let (Kind::Include, Some(value)) = (kind, &value) {
            match expand(value, base) {
                Some(include) => read_config(&include, scope, budget, depth + 1, seen, out),
                None => out.push(Kind::Runs, unexpanded(value), Vec::new(), budget),
            }
        }
        let name = String::from_utf8_lossy(&name).into_owned();
        out.push(kind, name, value.unwrap_or_default(), budget);
    }
    if let Some(line) = parsed.bad_line {
        let why = format!(
            "{} (line {line} is not git config syntax: git refuses it; not read past it)",
            path.display()
        );
        out.push(Kind::Runs, why, Vec::new(), budget);
    }
}

/// How the warning names `path`, not read for `why`.
fn not_read(path: &Path, why: &str) -> String {
    if why == DENIED || why == FAILED {
        format!(
            "{}: not read ({why}): git may still run it; treat as suspicious",
            path.display()
        )
    } else if why == OUTSIDE {
        format!("{}: not read ({why})", path.display())
    } else {
        format!("{} ({why}: not read)", path.display())
    }
}

/// A config entry's name and value (`None`: a key without `=`).
type Entry = (Vec<u8>, Option<Vec<u8>>);

/// A git config file as git reads it ([`parse_config`]).
#[derive(Debug, PartialEq, Eq)]
struct Parsed {
    /// Each entry's name (`section[.subsection].key`: section and key
    /// lowercase, a quoted subsection's case kept) and value (`None`: a
    /// key without `=`), as git gives them to its callbacks: C strings,
    /// each cut at its first NUL.
    entries: Vec<Entry>,
    /// The line at which git stops and refuses the file, if it does.
    bad_line: Option<usize>,
}

/// The reader of a config text, one character at a time, as git's
/// `get_next_char`: a carriage return before a newline is dropped, the
/// end reads as a newline (and sets `eof`).
struct Cursor<'a> {
    text: &'a [u8],
    at: usize,
    eof: bool,
    line: usize,
}

impl Cursor<'_> {
    fn next(&mut self) -> u8 {
        let Some(&c) = self.text.get(self.at) else {
            self.eof = true;
            return b'\n';
        };
        self.at += 1;
        if c == b'\r' && self.text.get(self.at) == Some(&b'\n') {
            self.at += 1;
            self.line += 1;
            return b'\n';
        }
        if c == b'\n' {
            self.line += 1;
        }
        c
    }
}

/// git's `isspace` (ASCII space, tab, newline, carriage return only).
fn git_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | b'\r')
}

/// git's `iskeychar`.
fn key_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'-'
}

/// The entries of the git config text `text`, parsed as git's config.c
/// (`git_parse_source`, `get_base_var`, `get_extended_base_var`,
/// `get_value`, `parse_value`) parses a file: a UTF-8 byte order mark
/// skipped (a partial one refused), `#` and `;` comments, `[section]`,
/// `[section.sub]` (lowercase) and `[section "sub"]` (case kept, `\`
/// escaping the next character), `key = value` with quotes, the escapes
/// `\t \b \n \\ \"`, and a `\` ending a line joining the next (in quotes
/// too: the red-team's `x \` + `[user]` + `fsmonitor = ...` is one value
/// of `core.x` then `core.fsmonitor`). Past a line git refuses, nothing:
/// git stops there ([`Parsed::bad_line`]).
fn parse_config(text: &[u8]) -> Parsed {
    let mut cur = Cursor {
        text,
        at: 0,
        eof: false,
        line: 1,
    };
    let mut entries = Vec::new();
    let bad = |cur: &Cursor, entries| Parsed {
        entries,
        bad_line: Some(cur.line),
    };
    const BOM: &[u8] = b"\xef\xbb\xbf";
    if text.starts_with(BOM) {
        cur.at = BOM.len();
    } else if text.first() == Some(&BOM[0]) {
        return bad(&cur, entries);
    }
    let mut var: Vec<u8> = Vec::new();
    let mut base = 0;
    let mut comment = false;
    loop {
        let c = cur.next();
        if c == b'\n' {
            if cur.eof {
                return Parsed {
                    entries,
                    bad_line: None,
                };
            }
            comment = false;
            continue;
        }
        if comment || git_space(c) {
            continue;
        }
        if c == b'#' || c == b';' {
            comment = true;
            continue;
        }
        if c == b'[' {
            var.clear();
            if !section_header(&mut cur, &mut var) || var.is_empty() {
                return bad(&cur, entries);
            }
            var.push(b'.');
            base = var.len();
            continue;
        }
        if !c.is_ascii_alphabetic() {
            return bad(&cur, entries);
        }
        var.truncate(base);
        var.push(c.to_ascii_lowercase());
        let Some(value) = entry_value(&mut cur, &mut var) else {
            return bad(&cur, entries);
        };
        entries.push((c_str(&var).to_vec(), value.map(|v| c_str(&v).to_vec())));
    }
}

/// The rest of a `[section]` or `[section "sub"]` header, appended to
/// `var` (git's `get_base_var`, `get_extended_base_var`); false if git
/// refuses it.
fn section_header(cur: &mut Cursor, var: &mut Vec<u8>) -> bool {
    let mut c;
    loop {
        c = cur.next();
        if cur.eof {
            return false;
        }
        if git_space(c) {
            break;
        }
        if c == b']' {
            return true;
        }
        if !key_char(c) && c != b'.' {
            return false;
        }
        var.push(c.to_ascii_lowercase());
    }
    loop {
        if c == b'\n' {
            return false;
        }
        c = cur.next();
        if !git_space(c) {
            break;
        }
    }
    if c != b'"' {
        return false;
    }
    var.push(b'.');
    loop {
        let mut c = cur.next();
        if c == b'\n' {
            return false;
        }
        if c == b'"' {
            break;
        }
        if c == b'\\' {
            c = cur.next();
            if c == b'\n' {
                return false;
            }
        }
        var.push(c);
    }
    cur.next() == b']'
}

/// The rest of a key, appended to `var`, and its value (git's
/// `get_value`): `Some(None)` for a key without `=`, `None` if git
/// refuses the line.
fn entry_value(cur: &mut Cursor, var: &mut Vec<u8>) -> Option<Option<Vec<u8>>> {
    let mut c;
    loop {
        c = cur.next();
        if cur.eof || !key_char(c) {
            break;
        }
        var.push(c.to_ascii_lowercase());
    }
    while c == b' ' || c == b'\t' {
        c = cur.next();
    }
    if c == b'\n' {
        return Some(None);
    }
    if c != b'=' {
        return None;
    }
    parse_value(cur).map(Some)
}

/// A value (git's `parse_value`): unquoted whitespace runs kept inside,
/// dropped at either end; `#` or `;` outside quotes starts a comment; a
/// `\` before a newline joins the next line; an unknown escape or a quote
/// left open refused (`None`).
fn parse_value(cur: &mut Cursor) -> Option<Vec<u8>> {
    let mut value = Vec::new();
    let (mut quote, mut comment, mut trim) = (false, false, 0);
    loop {
        let c = cur.next();
        if c == b'\n' {
            if quote {
                return None;
            }
            if trim != 0 {
                value.truncate(trim);
            }
            return Some(value);
        }
        if comment {
            continue;
        }
        if git_space(c) && !quote {
            if trim == 0 {
                trim = value.len();
            }
            if !value.is_empty() {
                value.push(c);
            }
            continue;
        }
        if !quote && (c == b';' || c == b'#') {
            comment = true;
            continue;
        }
        trim = 0;
        if c == b'\\' {
            let c = match cur.next() {
                b'\n' => continue,
                b't' => b'\t',
                b'b' => 0x08,
                b'n' => b'\n',
                c @ (b'\\' | b'"') => c,
                _ => return None,
            };
            value.push(c);
            continue;
        }
        if c == b'"' {
            quote = !quote;
            continue;
        }
        value.push(c);
    }
}

/// Where a warning says the repository at `dot_git` is.
fn repo_at(dot_git: &Path) -> &Path {
    if dot_git.file_name() == Some(std::ffi::OsStr::new(".git")) {
        dot_git.parent().unwrap_or(dot_git)
    } else {
        dot_git
    }
}

/// `items` as a warning names them: at most [`MAX_NAMED`], each cut at
/// [`MAX_NAME_LEN`] characters, then how many more there are.
fn listed<S: AsRef<str>>(items: &[S]) -> String {
    let mut named: Vec<String> = items
        .iter()
        .take(MAX_NAMED)
        .map(|i| {
            let i = i.as_ref();
            match i.char_indices().nth(MAX_NAME_LEN) {
                Some((at, _)) => format!("{}...", &i[..at]),
                None => i.to_owned(),
            }
        })
        .collect();
    if items.len() > MAX_NAMED {
        named.push(format!("{} more", items.len() - MAX_NAMED));
    }
    named.join(", ")
}

/// One `sandbox:` line per repository in `made` (git directories or `.git`
/// files the run made) that runs code, reading only what `scope` admits,
/// within one budget for all of them: a repository the budget did not
/// cover is named as not (fully) checked. The audit runs on a thread of
/// its own without capabilities (F5): a root runner reads only what a
/// process of its uid without `CAP_DAC_OVERRIDE` or `CAP_DAC_READ_SEARCH`
/// could (not another user's 0700 directory the command could not list).
pub(crate) fn warnings<'a>(
    made: impl IntoIterator<Item = &'a PathBuf>,
    scope: &Scope,
) -> Vec<String> {
    let made: Vec<PathBuf> = made.into_iter().cloned().collect();
    if made.is_empty() {
        return Vec::new();
    }
    warnings_within(made, scope.clone(), MAX_TIME)
}

fn warnings_within(made: Vec<PathBuf>, scope: Scope, time: Duration) -> Vec<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    let repos: Vec<String> = made
        .iter()
        .map(|d| repo_at(d).display().to_string())
        .collect();
    let spawned = std::thread::Builder::new()
        .name("sandbox-git-audit".into())
        .spawn(move || {
            let lines = sandbox::runner::drop_thread_capabilities()
                .map(|()| audit(&made, &scope, &mut Budget::new(time)));
            // The runner may have given up waiting: nothing to tell.
            let _ = tx.send(lines);
        });
    // The thread is bounded by its budget; a file system that hangs it
    // (a stuck FUSE mount the run made) is not waited for past the limit.
    let why = match spawned {
        Err(e) => format!("its thread did not start: {e}"),
        Ok(_) => match rx.recv_timeout(time + Duration::from_secs(1)) {
            Ok(Ok(lines)) => return lines,
            Ok(Err(e)) => format!("its thread could not drop its capabilities: {e}"),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => "it did not end in time".to_owned(),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => "its thread failed".to_owned(),
        },
    };
    vec![printable(&format!(
        "sandbox: the git audit did not run ({why}): the {} repositories the run made at {} \
         were not checked; treat them as suspicious and review them before running git there",
        repos.len(),
        listed(&repos)
    ))]
}

/// `line` with every control character (an escape sequence a name the
/// command chose would send to the terminal, a newline that would forge a
/// line) written as its Rust escape (`\u{1b}`).
fn printable(line: &str) -> String {
    line.chars()
        .flat_map(|c| {
            let escaped = c.is_control().then(|| c.escape_default());
            escaped
                .into_iter()
                .flatten()
                .chain((!c.is_control()).then_some(c))
        })
        .collect()
}

/// [`warnings`] on this thread, within `budget`.
fn audit(made: &[PathBuf], scope: &Scope, budget: &mut Budget) -> Vec<String> {
    let mut lines = Vec::new();
    let mut unchecked = Vec::new();
    let mut audited = HashSet::new();
    for dot_git in made {
        let at = repo_at(dot_git);
        if !budget.ok() {
            unchecked.push(at.display().to_string());
            continue;
        }
        let Findings { runs, unknown } = runs_code_beside(dot_git, scope, budget, &audited);
        if let Ok(gitdir) = git_dir_of(dot_git, scope, budget) {
            if let Ok(canonical) = std::fs::canonicalize(gitdir) {
                audited.insert(canonical);
            }
        }
        let stopped = budget.stopped.as_deref();
        let more = stopped.map_or_else(String::new, |why| {
            format!(" (the git audit stopped in it at {why}: it may run more)")
        });
        let unknown_sets = || {
            format!(
                "config sets {}, which the git audit does not know to be harmless",
                listed(&unknown)
            )
        };
        match (runs.is_empty(), unknown.is_empty(), stopped) {
            (true, true, None) => {}
            (false, _, _) => lines.push(format!(
                "sandbox: the run made a git repository at {} whose {} run programs{}; git in \
                 the workspace would run them (a submodule's fsmonitor runs at `git status`): \
                 review it before running git there{more}",
                at.display(),
                listed(&runs),
                if unknown.is_empty() {
                    String::new()
                } else {
                    format!(" and whose {}", unknown_sets())
                },
            )),
            (true, false, _) => lines.push(format!(
                "sandbox: the run made a git repository at {} whose {} (git may run programs \
                 from them): review it before running git there{more}",
                at.display(),
                unknown_sets(),
            )),
            (true, true, Some(why)) => lines.push(format!(
                "sandbox: the run made a git repository at {} that the git audit did not \
                 fully check (it stopped at {why}): treat it as suspicious and review it \
                 before running git there",
                at.display()
            )),
        }
    }
    if !unchecked.is_empty() {
        lines.push(format!(
            "sandbox: the git audit stopped after {} ({}): the {} repositories the run made at \
             {} were not checked; treat them as suspicious and review them before running git \
             there",
            budget.spent(),
            budget.stopped.as_deref().unwrap_or("its limits"),
            unchecked.len(),
            listed(&unchecked)
        ));
    }
    // The names come from the command (directories, subsections, hooks):
    // no control character of theirs reaches the user's terminal.
    lines.iter().map(|l| printable(l)).collect()
}

/// The git directories the run of `outcome` made, and those of every run
/// nested in it (F7: a `sandbox run` inside the command has a broker of
/// its own, whose record names what it saw made), each once. The nested
/// records come from inside the sandbox: they may name anything, but the
/// audit reads only what the outer run's scope admits, within its budget.
pub(crate) fn made_in(outcome: &sandbox::runner::Outcome) -> Vec<PathBuf> {
    let mut made = Vec::new();
    let mut had = HashSet::new();
    let mut runs = vec![outcome];
    while let Some(run) = runs.pop() {
        for dir in run.mediation.iter().flat_map(|m| &m.git_dirs_made) {
            if had.insert(dir.clone()) {
                made.push(dir.clone());
            }
        }
        runs.extend(run.nested.iter().rev());
    }
    made
}

/// The warning for git directories the run of `outcome` (or a run nested
/// in it) may have made that no record names: a broker that lost track of
/// them (moved after they were made, or too many), a nested record cut to
/// its bound, or nested records left out whole. `None` when every one made
/// is named.
pub(crate) fn unnamed_warning(outcome: &sandbox::runner::Outcome) -> Option<String> {
    let mut unnamed = 0usize;
    let mut records_left_out = 0usize;
    let mut runs = vec![outcome];
    while let Some(run) = runs.pop() {
        unnamed = unnamed.saturating_add(run.mediation.as_ref().map_or(0, |m| m.git_dirs_unnamed));
        records_left_out = records_left_out.saturating_add(run.omitted.nested);
        runs.extend(run.nested.iter());
    }
    let what = match (unnamed, records_left_out) {
        (0, 0) => return None,
        (n, 0) => format!("may have made {n} more git repositories that cannot be named"),
        (0, r) => format!("left out the records of {r} nested runs, whose git repositories were not checked"),
        (n, r) => format!(
            "may have made {n} more git repositories that cannot be named, and left out the records of {r} nested runs, whose git repositories were not checked"
        ),
    };
    Some(format!(
        "sandbox: the run {what} (moved after they were made, too many to follow, or beyond a record's bound); review the workspace (`find . -name HEAD`) before running git there"
    ))
}

/// A session's git audit (F6): each command's audit covers the
/// repositories every command so far made (a clean one made by one
/// command may be given code-running config by the next, in a shared
/// launch whose broker names each repository once, to the command that
/// made it), and gives each warning once, with the first command after
/// which it holds.
#[derive(Default)]
pub(crate) struct Memory {
    made: std::cell::RefCell<(Vec<PathBuf>, HashSet<PathBuf>)>,
    said: std::cell::RefCell<HashSet<String>>,
}

impl Memory {
    /// The warnings over `now` (the repositories a command made: first in
    /// the budget) and those earlier commands made, but for those given
    /// already.
    pub(crate) fn warnings(&self, now: Vec<PathBuf>, scope: &Scope) -> Vec<String> {
        let all: Vec<PathBuf> = {
            let mut made = self.made.borrow_mut();
            let (order, had) = &mut *made;
            let mut all = now.clone();
            let now: HashSet<&PathBuf> = now.iter().collect();
            all.extend(order.iter().filter(|d| !now.contains(d)).cloned());
            for dir in now {
                if had.insert(dir.clone()) {
                    order.push(dir.clone());
                }
            }
            all
        };
        let mut said = self.said.borrow_mut();
        warnings(&all, scope)
            .into_iter()
            .filter(|w| said.insert(w.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`runs_code_beside`] alone (nothing audited before).
    fn runs_code_within(dot_git: &Path, scope: &Scope, budget: &mut Budget) -> Findings {
        runs_code_beside(dot_git, scope, budget, &HashSet::new())
    }

    /// [`runs_code_within`] with a budget of its own.
    fn runs_code(dot_git: &Path, scope: &Scope) -> Vec<String> {
        runs_code_within(dot_git, scope, &mut Budget::new(MAX_TIME)).runs
    }

    /// The scope of a run writing `dir` (canonical), denying reads of `deny`.
    fn scope(dir: &Path, deny: &[&Path]) -> Scope {
        Scope {
            write: vec![std::fs::canonicalize(dir).unwrap()],
            deny: deny
                .iter()
                .map(|d| std::fs::canonicalize(d).unwrap())
                .collect(),
        }
    }

    /// What git 2.x itself reads of the config text `text`
    /// (`git config --file --list -z`): the entries before any bad line,
    /// and whether it refused the file.
    fn git_reads(text: &[u8]) -> (Vec<Entry>, bool) {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config");
        std::fs::write(&file, text).unwrap();
        let out = std::process::Command::new("git")
            .args(["config", "--file"])
            .arg(&file)
            .args(["--list", "-z"])
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", dir.path())
            .output()
            .expect("git runs");
        let entries = out
            .stdout
            .split(|&b| b == 0)
            .filter(|e| !e.is_empty())
            .map(|e| match e.iter().position(|&b| b == b'\n') {
                Some(at) => (e[..at].to_vec(), Some(e[at + 1..].to_vec())),
                None => (e.to_vec(), None),
            })
            .collect();
        (entries, !out.status.success())
    }

    /// The parser reads every config as git does (the red-team's F1 b: a
    /// `\` ending a line joins the next; a NUL in a subsection cuts the
    /// name there, so `[core "fsmonitor\0"] x = ...` is `core.fsmonitor`
    /// to git): the same entries, the same refusal, for tricky texts and
    /// for thousands of random ones made of config syntax.
    #[test]
    fn configs_parse_as_git_parses_them() {
        let cases: &[&[u8]] = &[
            b"[core]\n\tzzz = x \\\n[user]\n\tfsmonitor = \"touch p; false\"\n",
            b"[core]\n\tzzz = \"x \\\n[user]\"\n\tfsmonitor = y\n",
            b"[core \"fsmonitor\0\"]\n\tx = touch p\n",
            b"[core]\n\tfsmonitor = a\0b\n",
            b"[core]\n\ta = x\r\n\tb = \"q \\\r\n r\"\n",
            b"[a]b=1\n[c]\n\td = 1 \x01 2\n\te = x\n\tf= \"  a \"b\" c \" ; x\n",
            b"[a]\n\tb\n\tc = x\\q\n\td = e\n",
            b"\xef\xbb\xbf[a]\nb=1\n",
            b"\xef\xbb[a]\nb=1\n",
            b"b=1\n[a]\n",
            b"[a \"x\\y\"]\nb\n",
            b"[a.B.c \"D\"]\nb\n[ \"x\"]\ny\n[]\nz\n",
            b"[a]\nb=1\\",
            b"[a]\nb = \\t\\n\\b\\\\\\\" # c\n\tc = \"#;\" ; d\n",
            b"[core]\n  FSMonitor=x\t\t\n[core]fsmonitor=\"y\"z ; w\n",
            b"[a \"b\"] c = d\n[a \"b\" ]\n",
            b"[a]\nb = \xff\xfe\n[\xff]\n",
            b"[a]\nb = \"open\n",
            b"[a]\r\n\tb = 1\r\r\n",
        ];
        for text in cases {
            let (entries, refused) = git_reads(text);
            let parsed = parse_config(text);
            assert_eq!(
                parsed.entries,
                entries,
                "{:?}",
                String::from_utf8_lossy(text)
            );
            assert_eq!(parsed.bad_line.is_some(), refused, "{text:?}");
        }
        // Random texts of config syntax (a fixed seed: reproducible).
        const PIECES: &[&[u8]] = &[
            b"[core]",
            b"[a \"S.b\"]",
            b"[x.Y]",
            b"[",
            b"]",
            b"\"",
            b"\\",
            b"\\n",
            b"\\t",
            b"\\\n",
            b"\\\r\n",
            b"\n",
            b"\r\n",
            b"\r",
            b" ",
            b"\t",
            b"key",
            b"K-2",
            b"=",
            b"#",
            b";",
            b"x",
            b"\0",
            b"\xef\xbb\xbf",
            b"\xff",
            b"fsmonitor",
            b".",
        ];
        let mut seed: u64 = 0x5eed;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..800 {
            let mut text = Vec::new();
            for _ in 0..next() % 24 {
                text.extend_from_slice(PIECES[(next() % PIECES.len() as u64) as usize]);
            }
            let (entries, refused) = git_reads(&text);
            let parsed = parse_config(&text);
            assert_eq!(
                parsed.entries,
                entries,
                "{:?}",
                String::from_utf8_lossy(&text)
            );
            assert_eq!(parsed.bad_line.is_some(), refused, "{text:?}");
        }
    }

    /// The red-team's F1: settings git runs that the audit missed are
    /// named, each alone in a repository: a continuation hiding
    /// `core.fsmonitor` (b), `gpg.ssh.defaultKeyCommand` (c), an `ext::`
    /// remote (d) and `protocol.ext.allow` (d), `interactive.diffFilter`
    /// and a `!` alias (e), a NUL cutting a subsection into
    /// `core.fsmonitor`, a config that is not UTF-8, `url.<ext::>.insteadOf`,
    /// a `!` submodule update, `core.alternateRefsCommand`, a difftool.
    /// Positive controls: the config `git init` writes, and `git clone`'s
    /// with `git config user.*`, name nothing.
    #[test]
    fn what_git_runs_is_named_and_what_init_and_clone_write_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let git = dir.path().join(".git");
        std::fs::create_dir_all(&git).unwrap();
        let scope = scope(dir.path(), &[]);
        let audit_of = |config: &[u8]| {
            std::fs::write(git.join("config"), config).unwrap();
            runs_code_within(&git, &scope, &mut Budget::new(MAX_TIME))
        };
        for (config, want) in [
            (
                &b"[core]\n\tzzz = x \\\n[user]\n\tfsmonitor = \"touch p; false\"\n"[..],
                "core.fsmonitor",
            ),
            (
                b"[commit]\n\tgpgsign = true\n[gpg]\n\tformat = ssh\n[gpg \"ssh\"]\n\t\
                  defaultKeyCommand = touch p\n",
                "gpg.ssh.defaultkeycommand",
            ),
            (
                b"[remote \"origin\"]\n\turl = ext::sh -c touch% p\n\tfetch = +refs/*:refs/*\n",
                "remote.origin.url",
            ),
            (
                b"[protocol \"ext\"]\n\tallow = always\n",
                "protocol.ext.allow",
            ),
            (b"[protocol]\n\tallow = always\n", "protocol.allow"),
            (
                b"[interactive]\n\tdiffFilter = touch p\n",
                "interactive.difffilter",
            ),
            (b"[alias]\n\tst = !touch p\n", "alias.st"),
            (b"[alias]\n\tst = status\n\tst = !touch p\n", "alias.st"),
            (b"[core \"fsmonitor\0\"]\n\tx = touch p\n", "core.fsmonitor"),
            (
                b"# \xff\xfe\n[core]\n\tfsmonitor = touch p\n",
                "core.fsmonitor",
            ),
            (
                b"[url \"ext::sh -c touch% p #\"]\n\tinsteadOf = https://\n",
                "url.ext::sh -c touch% p #.insteadof",
            ),
            (
                b"[submodule \"s\"]\n\tupdate = !touch p\n",
                "submodule.s.update",
            ),
            (b"[submodule \"s\"]\n\turl = fd::3\n", "submodule.s.url"),
            (
                b"[remote \"o\"]\n\tpushurl = evil://x/y\n",
                "remote.o.pushurl",
            ),
            (
                b"[core]\n\talternateRefsCommand = touch p\n",
                "core.alternaterefscommand",
            ),
            (b"[difftool \"x\"]\n\tcmd = touch p\n", "difftool.x.cmd"),
            (
                b"[gc]\n\trecentObjectsHook = touch p\n",
                "gc.recentobjectshook",
            ),
        ] {
            let found = audit_of(config);
            assert!(
                found.runs.iter().any(|r| r == want),
                "{want} in {found:?} of {}",
                String::from_utf8_lossy(config)
            );
        }
        // A line git refuses is named: git reads nothing past it.
        let found = audit_of(b"[core]\n\tbare = false\n\tx = \\q\n[core]\n\tfsmonitor = y\n");
        assert!(
            found.runs.iter().any(|r| r.ends_with(
                "config (line 3 is not git config syntax: git refuses it; not read past it)"
            )),
            "{found:?}"
        );
        // Neither known to run programs nor known harmless: named apart.
        let found = audit_of(b"[alias]\n\tst = status\n[trace2]\n\teventTarget = /tmp/x\n");
        assert!(found.runs.is_empty(), "{found:?}");
        assert_eq!(found.unknown, ["alias.st", "trace2.eventtarget"]);
        // Positive controls: what `git init` and `git clone` write.
        let global = dir.path().join("gitconfig");
        std::fs::write(&global, "").unwrap();
        let git_in = |args: &[&str]| {
            let ok = std::process::Command::new("git")
                .args(args)
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .env("GIT_CONFIG_GLOBAL", &global)
                .env("HOME", dir.path())
                .current_dir(dir.path())
                .output()
                .unwrap();
            assert!(
                ok.status.success(),
                "git {args:?}: {}",
                String::from_utf8_lossy(&ok.stderr)
            );
        };
        git_in(&["init", "-q", "src"]);
        git_in(&[
            "-C",
            "src",
            "-c",
            "user.name=a",
            "-c",
            "user.email=a@b",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "x",
        ]);
        git_in(&["clone", "-q", "src", "dst"]);
        git_in(&["-C", "dst", "config", "user.name", "A U Thor"]);
        git_in(&["-C", "dst", "config", "user.email", "a@example.com"]);
        git_in(&["-C", "dst", "config", "pull.rebase", "false"]);
        git_in(&["-C", "dst", "branch", "-q", "--set-upstream-to=origin/HEAD"]);
        for repo in ["src", "dst"] {
            let found = runs_code_within(
                &dir.path().join(repo).join(".git"),
                &scope,
                &mut Budget::new(MAX_TIME),
            );
            assert!(
                found.runs.is_empty() && found.unknown.is_empty(),
                "{repo}: {found:?}"
            );
        }
        // A name with control characters is written escaped.
        std::fs::write(
            git.join("config"),
            "[filter \"\x1b]0;x\x07\"]\n\tclean = y\n[filter \"\x1b[2J\"]\n\tclean = y\n",
        )
        .unwrap();
        let lines = audit(
            std::slice::from_ref(&git),
            &scope,
            &mut Budget::new(MAX_TIME),
        );
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(!lines[0].chars().any(char::is_control), "{lines:?}");
        assert!(lines[0].contains("filter.\\u{1b}[2J.clean"), "{lines:?}");
        // And the audit's line for each kind.
        std::fs::write(git.join("config"), "[trace2]\n\teventTarget = /x\n").unwrap();
        let lines = audit(
            std::slice::from_ref(&git),
            &scope,
            &mut Budget::new(MAX_TIME),
        );
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].contains(
                " whose config sets trace2.eventtarget, which the git audit does not know to \
                 be harmless (git may run programs from them): review it"
            ),
            "{lines:?}"
        );
        std::fs::write(
            git.join("config"),
            "[trace2]\n\teventTarget = /x\n[core]\n\tpager = y\n",
        )
        .unwrap();
        let lines = audit(&[git], &scope, &mut Budget::new(MAX_TIME));
        assert!(
            lines[0].contains(
                " whose core.pager run programs and whose config sets trace2.eventtarget, \
                 which the git audit does not know to be harmless; git in the workspace"
            ),
            "{lines:?}"
        );
    }

    /// Remote URLs git serves itself are harmless; a transport helper's
    /// (`ext::`, `fd::`, `<x>::`, an unknown `<scheme>://`) run programs.
    #[test]
    fn remote_urls_are_told_apart() {
        for url in [
            &b"https://github.com/o/r.git"[..],
            b"git@github.com:o/r.git",
            b"ssh://[::1]/r",
            b"git+ssh://h/r",
            b"/abs/path",
            b"../rel",
            b"file:///x",
            b"",
        ] {
            assert_eq!(
                classify(b"remote.origin.url", Some(url)),
                Kind::Harmless,
                "{url:?}"
            );
        }
        for url in [&b"ext::sh -c x"[..], b"fd::3", b"gcrypt::x", b"evil://h/r"] {
            assert_eq!(
                classify(b"remote.origin.url", Some(url)),
                Kind::Runs,
                "{url:?}"
            );
            assert_eq!(
                classify(&[b"url.", url, b".insteadof"].concat(), Some(b"https://")),
                Kind::Runs,
                "{url:?}"
            );
        }
    }

    #[test]
    fn config_keys_are_read_with_sections_and_subsections() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config");
        std::fs::write(
            &config,
            "[core]\n\tFSMonitor = x\n\tbare = false\n[filter \"lfs\"]\n\tclean = y\n# c\n[user] name = a\n",
        )
        .unwrap();
        let keys: Vec<String> = parse_config(&std::fs::read(&config).unwrap())
            .entries
            .into_iter()
            .map(|(k, _)| String::from_utf8(k).unwrap())
            .collect();
        assert_eq!(
            keys,
            [
                "core.fsmonitor",
                "core.bare",
                "filter.lfs.clean",
                "user.name"
            ]
        );
        let git = dir.path().join(".git");
        std::fs::create_dir_all(git.join("hooks")).unwrap();
        std::fs::rename(&config, git.join("config")).unwrap();
        std::fs::write(git.join("hooks/pre-commit.sample"), "").unwrap();
        std::fs::write(git.join("hooks/post-checkout"), "").unwrap();
        assert_eq!(
            runs_code(&git, &scope(dir.path(), &[])),
            [
                "core.fsmonitor".to_owned(),
                "filter.lfs.clean".to_owned(),
                format!("{}/post-checkout", git.join("hooks").display())
            ]
        );
    }

    /// Programs named in an included file, in `config.worktree`, or in a
    /// hooks directory `core.hooksPath` names are found too.
    #[test]
    fn includes_worktree_config_and_hooks_path_are_followed() {
        let dir = tempfile::tempdir().unwrap();
        let git = dir.path().join(".git");
        std::fs::create_dir_all(git.join("hooks")).unwrap();
        std::fs::write(
            git.join("config"),
            "[include]\n\tpath = ../inc/a\n[includeIf \"gitdir:/x/\"]\n\tpath = ../inc/b\n\
             [core]\n\thooksPath = myhooks\n",
        )
        .unwrap();
        std::fs::create_dir_all(dir.path().join("inc")).unwrap();
        std::fs::write(
            dir.path().join("inc/a"),
            "[core]\n\tfsmonitor = \"touch /tmp/x\"\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("inc/b"), "[include]\npath = c\n").unwrap();
        std::fs::write(dir.path().join("inc/c"), "[diff \"x\"]\n\ttextconv = cat\n").unwrap();
        std::fs::write(git.join("config.worktree"), "[pager]\n\tlog = less\n").unwrap();
        std::fs::create_dir_all(dir.path().join("myhooks")).unwrap();
        std::fs::write(dir.path().join("myhooks/pre-commit"), "").unwrap();
        let runs = runs_code(&git, &scope(dir.path(), &[]));
        for want in [
            "core.fsmonitor",
            "diff.x.textconv",
            "core.hookspath",
            "pager.log",
        ] {
            assert!(runs.iter().any(|r| r == want), "{want} in {runs:?}");
        }
        assert!(
            runs.iter().any(|r| r.ends_with("myhooks/pre-commit")),
            "{runs:?}"
        );
        // Twin: a config that runs nothing says nothing.
        std::fs::write(git.join("config"), "[user]\n\tname = a\n").unwrap();
        std::fs::remove_file(git.join("config.worktree")).unwrap();
        assert!(runs_code(&git, &scope(dir.path(), &[])).is_empty());
    }

    /// A linked worktree's git directory shares the main one's hooks
    /// (`commondir`): an audit of both names the hook once, under the main
    /// repository, not again through `worktrees/wt/../../hooks`. Twin: the
    /// worktree audited alone names it.
    #[test]
    fn a_linked_worktrees_shared_hooks_are_named_once() {
        let dir = tempfile::tempdir().unwrap();
        let git = dir.path().join("repo/.git");
        let wt = git.join("worktrees/wt");
        std::fs::create_dir_all(git.join("hooks")).unwrap();
        std::fs::create_dir_all(&wt).unwrap();
        std::fs::write(git.join("hooks/pre-commit"), "").unwrap();
        std::fs::write(wt.join("commondir"), "../..\n").unwrap();
        std::fs::write(wt.join("HEAD"), "ref: refs/heads/feat\n").unwrap();
        let scope = scope(dir.path(), &[]);
        let lines = audit(
            &[git.clone(), wt.clone()],
            &scope,
            &mut Budget::new(MAX_TIME),
        );
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(lines[0].contains("repo/.git/hooks/pre-commit"), "{lines:?}");
        let alone = runs_code(&wt, &scope);
        assert!(
            alone.iter().any(|r| r.ends_with("hooks/pre-commit")),
            "{alone:?}"
        );
    }

    /// Red team R10 F3: a decoy repository whose hooks directory is a link
    /// to another repository's, audited first, does not hide the other's
    /// hook: each repository that has it is named.
    #[test]
    fn a_hooks_directory_shared_by_a_link_is_named_under_each_repository() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a/.git"), dir.path().join("b/.git"));
        for git in [&a, &b] {
            std::fs::create_dir_all(git.join("objects")).unwrap();
            std::fs::write(git.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        }
        std::fs::create_dir_all(b.join("hooks")).unwrap();
        std::fs::write(b.join("hooks/pre-commit"), "").unwrap();
        std::os::unix::fs::symlink("../../b/.git/hooks", a.join("hooks")).unwrap();
        let scope = scope(dir.path(), &[]);
        let lines = audit(&[a, b.clone()], &scope, &mut Budget::new(MAX_TIME));
        assert!(
            lines
                .iter()
                .any(|l| l.contains(&format!("{}/hooks/pre-commit", b.display()))),
            "{lines:?}"
        );
    }

    /// Red team R11 F3: a linked worktree of a repository this audit named
    /// reads the common config again, its relative `core.hooksPath` naming
    /// the worktree's own directory (found through the git directory's
    /// `gitdir` file): its hook is named. Twin: the main repository's
    /// hook, named under it.
    #[test]
    fn a_linked_worktrees_relative_hooks_path_is_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let git = dir.path().join("a/.git");
        let wt = git.join("worktrees/b");
        std::fs::create_dir_all(git.join("objects")).unwrap();
        std::fs::create_dir_all(&wt).unwrap();
        std::fs::write(git.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(git.join("config"), "[core]\n\thooksPath = .githooks\n").unwrap();
        std::fs::write(wt.join("commondir"), "../..\n").unwrap();
        std::fs::write(wt.join("HEAD"), "ref: refs/heads/b\n").unwrap();
        let b = dir.path().join("b");
        std::fs::write(wt.join("gitdir"), format!("{}/.git\n", b.display())).unwrap();
        for hooks in [dir.path().join("a/.githooks"), b.join(".githooks")] {
            std::fs::create_dir_all(&hooks).unwrap();
            std::fs::write(hooks.join("pre-commit"), "").unwrap();
        }
        let scope = scope(dir.path(), &[]);
        let lines = audit(&[git, wt], &scope, &mut Budget::new(MAX_TIME));
        let all = lines.join("\n");
        assert!(all.contains("a/.githooks/pre-commit"), "{all}");
        assert!(all.contains("b/.githooks/pre-commit"), "{all}");
    }

    /// Red team R12 F2: `core.worktree` moves where git runs hooks, and a
    /// relative `core.hooksPath` with it: beside one, it is named and the
    /// hooks there are found. Twin: alone it says nothing.
    #[test]
    fn a_repository_setting_core_worktree_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let git = dir.path().join("r/.git");
        std::fs::create_dir_all(git.join("objects")).unwrap();
        std::fs::write(git.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(
            git.join("config"),
            "[core]\n\tworktree = ../../w2\n\thooksPath = .githooks\n",
        )
        .unwrap();
        for hooks in [
            dir.path().join("r/.githooks"),
            dir.path().join("w2/.githooks"),
        ] {
            std::fs::create_dir_all(&hooks).unwrap();
            std::fs::write(hooks.join("pre-commit"), "").unwrap();
        }
        let scope = scope(dir.path(), &[]);
        let lines = audit(
            std::slice::from_ref(&git),
            &scope,
            &mut Budget::new(MAX_TIME),
        );
        let all = lines.join("\n");
        assert!(all.contains("core.worktree"), "{all}");
        assert!(all.contains("w2/.githooks/pre-commit"), "{all}");
        // Through a link (R13 F2): `r2/.git` -> `x/y/g`, `../../w2` from
        // there is `x/w2`, not `w2` beside `r2`.
        let real = dir.path().join("x/y/g");
        std::fs::create_dir_all(real.join("objects")).unwrap();
        std::fs::write(real.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(
            real.join("config"),
            "[core]\n\tworktree = ../../w2\n\thooksPath = .githooks\n",
        )
        .unwrap();
        std::fs::create_dir_all(dir.path().join("x/w2/.githooks")).unwrap();
        std::fs::write(dir.path().join("x/w2/.githooks/pre-commit"), "").unwrap();
        std::fs::create_dir_all(dir.path().join("r2")).unwrap();
        std::os::unix::fs::symlink("../x/y/g", dir.path().join("r2/.git")).unwrap();
        let lines = audit(
            &[dir.path().join("r2/.git")],
            &scope,
            &mut Budget::new(MAX_TIME),
        );
        let all = lines.join("\n");
        assert!(all.contains("x/w2/.githooks/pre-commit"), "{all}");
        // Alone (as in a submodule's git directory), it says nothing.
        std::fs::write(git.join("config"), "[core]\n\tworktree = ../../w2\n").unwrap();
        assert!(audit(&[git], &scope, &mut Budget::new(MAX_TIME)).is_empty());
    }

    /// The files a run made are read without blocking and within bounds: a
    /// FIFO `config` (no writer: a blocking open never returns), an include
    /// of `/dev/zero` (never ends) and an oversized include are named, not
    /// read; the twin, a small regular include, is read.
    #[test]
    fn a_fifo_a_device_or_a_huge_file_is_named_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let git = dir.path().join(".git");
        std::fs::create_dir_all(&git).unwrap();
        let fifo = std::process::Command::new("mkfifo")
            .arg(git.join("config"))
            .status()
            .unwrap();
        assert!(fifo.success());
        let runs = runs_code(&git, &scope(dir.path(), &[]));
        assert_eq!(runs.len(), 1, "{runs:?}");
        assert!(runs[0].ends_with("config (not a regular file: not read)"));
        std::fs::remove_file(git.join("config")).unwrap();
        let big = dir.path().join("big");
        std::fs::File::create(&big)
            .unwrap()
            .set_len(FILE_CAP + 1)
            .unwrap();
        std::fs::write(dir.path().join("small"), "[core]\n\tpager = less\n").unwrap();
        std::fs::write(
            git.join("config"),
            "[include]\n\tpath = /dev/zero\n\tpath = ../big\n\tpath = ../small\n",
        )
        .unwrap();
        let runs = runs_code(&git, &scope(dir.path(), &[]));
        assert!(runs.contains(&"/dev/zero: not read (outside the write paths)".to_owned()));
        assert!(runs
            .iter()
            .any(|r| r.ends_with("big (over 1 MiB: not read)")));
        assert!(runs.contains(&"core.pager".to_owned()), "{runs:?}");
        assert_eq!(runs.len(), 3, "{runs:?}");
    }

    /// What the command's config names outside what the run could read is
    /// named, never read (F: the unconfined audit as a deputy): an include
    /// in another directory, one beneath a read-deny path inside the write
    /// path, a symlink in the workspace to a file outside, procfs files
    /// (`/proc/self/status`; `/proc/kmsg` would drain the kernel log), and
    /// a `core.hooksPath` directory outside (its hooks not listed). Twin:
    /// the same include and hooks directory inside the workspace are read.
    #[test]
    fn nothing_outside_the_write_paths_is_read_or_listed() {
        let dir = tempfile::tempdir().unwrap();
        let away = tempfile::tempdir().unwrap();
        let a = away.path();
        std::fs::write(a.join("inc"), "[core]\n\tfsmonitor = x\n").unwrap();
        std::fs::create_dir_all(a.join("hooks")).unwrap();
        std::fs::write(a.join("hooks/pre-commit"), "").unwrap();
        let w = dir.path();
        std::fs::create_dir_all(w.join("secret")).unwrap();
        std::fs::write(w.join("secret/inc"), "[core]\n\tsshcommand = y\n").unwrap();
        std::os::unix::fs::symlink(a.join("inc"), w.join("link")).unwrap();
        std::os::unix::fs::symlink("/proc/self/status", w.join("proclink")).unwrap();
        let git = w.join(".git");
        std::fs::create_dir_all(&git).unwrap();
        std::fs::write(
            git.join("config"),
            format!(
                "[include]\n\tpath = {a}/inc\n\tpath = ../secret/inc\n\tpath = ../link\n\t\
                 path = /proc/self/status\n\tpath = ../proclink\n[core]\n\thooksPath = {a}/hooks\n",
                a = a.display()
            ),
        )
        .unwrap();
        let runs = runs_code(&git, &scope(w, &[&w.join("secret")]));
        let outside = |p: &Path| format!("{}: not read (outside the write paths)", p.display());
        for want in [
            outside(&a.join("inc")),
            outside(&git.join("../secret/inc")),
            outside(&git.join("../link")),
            outside(Path::new("/proc/self/status")),
            outside(&git.join("../proclink")),
            outside(&a.join("hooks")),
            "core.hookspath".to_owned(),
        ] {
            assert!(runs.contains(&want), "{want} in {runs:?}");
        }
        for never in ["core.fsmonitor", "core.sshcommand"] {
            assert!(!runs.iter().any(|r| r == never), "{never} in {runs:?}");
        }
        assert!(!runs.iter().any(|r| r.ends_with("pre-commit")), "{runs:?}");
        // Twin: inside the workspace, the include is read, the hooks listed.
        std::fs::copy(a.join("inc"), w.join("inc")).unwrap();
        std::fs::create_dir_all(w.join("hooks")).unwrap();
        std::fs::write(w.join("hooks/pre-commit"), "").unwrap();
        std::fs::write(
            git.join("config"),
            "[include]\n\tpath = ../inc\n[core]\n\thooksPath = hooks\n",
        )
        .unwrap();
        let runs = runs_code(&git, &scope(w, &[&w.join("secret")]));
        assert!(runs.contains(&"core.fsmonitor".to_owned()), "{runs:?}");
        assert!(
            runs.iter().any(|r| r.ends_with("hooks/pre-commit")),
            "{runs:?}"
        );
    }

    /// A `--secret NAME=file:PATH@HOST` file is out of the scope even
    /// beneath a write path (the egress read-denies it to the command, not
    /// the policy): an include naming it is named, never read. Twin: the
    /// same include with the secret from the environment is read.
    #[test]
    fn a_secret_file_beneath_a_write_path_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let w = std::fs::canonicalize(dir.path()).unwrap();
        let policy = sandbox::policy::ResolvedPolicy::try_from(sandbox::policy::SandboxPolicy {
            write_paths: vec![w.display().to_string()],
            ..Default::default()
        })
        .unwrap();
        std::fs::write(w.join("token"), "[core]\n\tfsmonitor = x\n").unwrap();
        let git = w.join(".git");
        std::fs::create_dir_all(&git).unwrap();
        std::fs::write(git.join("config"), "[include]\n\tpath = ../token\n").unwrap();
        let secret = |spec: &str| spec.parse::<sandbox::policy::SecretSpec>().unwrap();
        let file = secret(&format!(
            "TOKEN=file:{}@api.example.com",
            w.join("token").display()
        ));
        let runs = runs_code(&git, &Scope::of(Some(&policy), &[file]));
        let not_read = format!(
            "{}: not read (outside the write paths)",
            git.join("../token").display()
        );
        assert!(runs.contains(&not_read), "{runs:?}");
        assert!(!runs.iter().any(|r| r == "core.fsmonitor"), "{runs:?}");
        // Twin: the secret from the environment; the file is the command's.
        let env = secret("TOKEN@api.example.com");
        let runs = runs_code(&git, &Scope::of(Some(&policy), &[env]));
        assert!(runs.contains(&"core.fsmonitor".to_owned()), "{runs:?}");
    }

    /// A file on procfs is refused on the opened file even where the scope
    /// would admit its path (a write path of `/proc`): `/proc/self/status`
    /// is a regular file of size 0 there. Twin: a file on a real file
    /// system in the scope is read.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_procfs_file_is_refused_on_the_opened_file() {
        let proc_scope = Scope {
            write: vec![PathBuf::from("/proc")],
            deny: Vec::new(),
        };
        let status = std::fs::canonicalize("/proc/self/status").unwrap();
        assert!(matches!(
            read_bounded(&status, &proc_scope, &mut Budget::new(MAX_TIME)),
            Read::Refused(OUTSIDE)
        ));
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), "[a]\nb = c\n").unwrap();
        assert!(matches!(
            read_bounded(
                &dir.path().join("f"),
                &scope(dir.path(), &[]),
                &mut Budget::new(MAX_TIME)
            ),
            Read::Text(t) if t.windows(5).any(|w| w == b"b = c")
        ));
    }

    /// A config including itself many ways, each a different spelling
    /// (`path = dK/../config`: B^11 reads when deduplicated on the path),
    /// is read once (deduplicated on the file); a hooks directory named
    /// 2000 times is listed once, and the warning names 20 hooks and how
    /// many more. Both fast, both still warned of (the positive control).
    #[test]
    fn a_self_including_config_or_a_repeated_hooks_dir_is_read_once() {
        let dir = tempfile::tempdir().unwrap();
        let git = dir.path().join("fan/.git");
        let mut config = "[core]\n\tfsmonitor = x\n[include]\n".to_owned();
        for i in 0..8 {
            std::fs::create_dir_all(git.join(format!("d{i}"))).unwrap();
            config.push_str(&format!("\tpath = d{i}/../config\n"));
        }
        std::fs::write(git.join("config"), config).unwrap();
        let hooks = dir.path().join("hooks/.git");
        std::fs::create_dir_all(dir.path().join("hooks/h")).unwrap();
        std::fs::create_dir_all(&hooks).unwrap();
        for i in 0..1000 {
            std::fs::write(dir.path().join(format!("hooks/h/{i:0200}")), "").unwrap();
        }
        let mut config = "[core]\n".to_owned();
        for _ in 0..2000 {
            config.push_str("\thooksPath = ../h\n\thooksPath = h\n");
        }
        std::fs::write(hooks.join("config"), config).unwrap();
        let scope = scope(dir.path(), &[]);
        let begun = std::time::Instant::now();
        let mut budget = Budget::new(MAX_TIME);
        assert_eq!(
            runs_code_within(&git, &scope, &mut budget).runs,
            ["core.fsmonitor"]
        );
        assert_eq!(budget.files, MAX_FILES as u64 - 1);
        let lines = audit(&[git, hooks], &scope, &mut budget);
        assert!(begun.elapsed() < Duration::from_secs(2));
        assert!(budget.stopped.is_none(), "{:?}", budget.stopped);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines[0].contains("whose core.fsmonitor run"), "{lines:?}");
        assert!(lines[1].contains("core.hookspath, "), "{}", lines[1]);
        assert!(lines[1].ends_with(
            "981 more run programs; git in the workspace would run them (a submodule's \
             fsmonitor runs at `git status`): review it before running git there"
        ));
        assert!(lines[1].len() < 8 * 1024, "{}", lines[1].len());
    }

    /// A file first reached at the include depth limit (its includes not
    /// followed) and again at a lesser depth is read again: what it
    /// includes is found.
    #[test]
    fn a_file_reached_again_at_a_lesser_depth_is_followed() {
        let dir = tempfile::tempdir().unwrap();
        let git = dir.path().join(".git");
        std::fs::create_dir_all(&git).unwrap();
        // config -> c1 -> ... -> c9 -> x (depth 10, its includes not
        // followed); and config -> x (depth 1); x -> y (fsmonitor).
        let mut config = "[include]\n\tpath = c1\n\tpath = x\n".to_owned();
        for i in 1..=9 {
            let next = if i == 9 {
                "x".to_owned()
            } else {
                format!("c{}", i + 1)
            };
            std::fs::write(
                git.join(format!("c{i}")),
                format!("[include]\n\tpath = {next}\n"),
            )
            .unwrap();
        }
        config.push('\n');
        std::fs::write(git.join("config"), config).unwrap();
        std::fs::write(git.join("x"), "[include]\n\tpath = y\n").unwrap();
        std::fs::write(git.join("y"), "[core]\n\tfsmonitor = z\n").unwrap();
        assert_eq!(runs_code(&git, &scope(dir.path(), &[])), ["core.fsmonitor"]);
    }

    /// Hooks in the common directory a `commondir` names are named (git
    /// keeps its hooks there: red-team round 4, F1). Positive control: the
    /// same layout with only `.sample` hooks says nothing.
    #[test]
    fn hooks_in_the_common_directory_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let git = dir.path().join("wt/.git");
        let common = dir.path().join("common");
        std::fs::create_dir_all(git.join("hooks")).unwrap();
        std::fs::create_dir_all(common.join("hooks")).unwrap();
        std::fs::write(git.join("commondir"), "../../common\n").unwrap();
        std::fs::write(common.join("hooks/pre-commit.sample"), "").unwrap();
        assert!(runs_code(&git, &scope(dir.path(), &[])).is_empty());
        std::fs::write(common.join("hooks/pre-commit"), "").unwrap();
        let runs = runs_code(&git, &scope(dir.path(), &[]));
        assert_eq!(runs.len(), 1, "{runs:?}");
        assert!(runs[0].ends_with("common/hooks/pre-commit"), "{runs:?}");
    }

    /// A hook git knows is named however many `.sample` names come before
    /// it in the listing (F2), and a directory of more names than the
    /// audit lists is said to be not fully listed, with the hook git knows
    /// still named. Positive control: `.sample` names alone say nothing.
    #[test]
    fn a_hook_behind_many_names_is_found_and_a_long_listing_is_said() {
        let dir = tempfile::tempdir().unwrap();
        let git = dir.path().join(".git");
        let hooks = git.join("hooks");
        std::fs::create_dir_all(&hooks).unwrap();
        for i in 0..HOOKS_CAP + 100 {
            std::fs::write(hooks.join(format!("h{i}.sample")), "").unwrap();
        }
        assert!(runs_code(&git, &scope(dir.path(), &[])).is_empty());
        std::fs::write(hooks.join("post-checkout"), "").unwrap();
        let runs = runs_code(&git, &scope(dir.path(), &[]));
        assert_eq!(runs.len(), 1, "{runs:?}");
        assert!(runs[0].ends_with("hooks/post-checkout"), "{runs:?}");
        // Over HOOKS_CAP other names: the known hook first, then the cap.
        for i in 0..=HOOKS_CAP {
            std::fs::write(hooks.join(format!("x{i}")), "").unwrap();
        }
        let runs = runs_code(&git, &scope(dir.path(), &[]));
        assert!(runs[0].ends_with("hooks/post-checkout"), "{:?}", &runs[..3]);
        assert_eq!(runs.len(), HOOKS_CAP + 2);
        assert!(
            runs.last().is_some_and(|r| r.contains("not fully listed")),
            "{:?}",
            runs.last()
        );
    }

    /// A config, `.git` file or hooks directory the audit may not open
    /// (permission denied, F3) is named "not read": a thread without
    /// capabilities, as the audit runs. Positive control: the same files
    /// readable are read (the config's `core.fsmonitor` named).
    #[cfg(target_os = "linux")]
    #[test]
    fn what_the_audit_may_not_open_is_named() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let git = dir.path().join(".git");
        std::fs::create_dir_all(git.join("hooks")).unwrap();
        std::fs::write(git.join("config"), "[core]\n\tfsmonitor = x\n").unwrap();
        std::fs::write(git.join("hooks/pre-commit.sample"), "").unwrap();
        let wt = dir.path().join("wt");
        std::fs::create_dir_all(&wt).unwrap();
        std::fs::write(wt.join(".git"), format!("gitdir: {}\n", git.display())).unwrap();
        let sc = scope(dir.path(), &[]);
        let audit = |sc: Scope, dot_git: PathBuf| {
            std::thread::spawn(move || {
                sandbox::runner::drop_thread_capabilities().unwrap();
                runs_code(&dot_git, &sc)
            })
            .join()
            .unwrap()
        };
        assert_eq!(audit(sc.clone(), git.clone()), ["core.fsmonitor"]);
        assert_eq!(audit(sc.clone(), wt.join(".git")), ["core.fsmonitor"]);
        let mode = |p: &Path, m: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
        };
        let denied = |runs: &[String], p: &Path| {
            let want = format!("{}: not read (permission denied)", p.display());
            assert!(
                runs.iter().any(|r| r.starts_with(&want)),
                "{want} in {runs:?}"
            );
        };
        mode(&git.join("config"), 0o000);
        denied(&audit(sc.clone(), git.clone()), &git.join("config"));
        mode(&git.join("config"), 0o644);
        mode(&wt.join(".git"), 0o000);
        denied(&audit(sc.clone(), wt.join(".git")), &wt.join(".git"));
        mode(&wt.join(".git"), 0o644);
        std::fs::write(git.join("hooks/pre-commit"), "").unwrap();
        mode(&git.join("hooks"), 0o111);
        let runs = audit(sc.clone(), git.clone());
        denied(&runs, &git.join("hooks"));
        // Searched still: the hook git knows is named.
        assert!(
            runs.iter().any(|r| r.ends_with("hooks/pre-commit")),
            "{runs:?}"
        );
        mode(&git.join("hooks"), 0o755);
    }

    /// Past its budget the audit stops and says so: a repository it was in
    /// is named as not fully checked, those after as not checked. Positive
    /// control: those before, within the budget, are warned of.
    #[test]
    fn past_its_budget_the_audit_says_what_it_did_not_check() {
        let dir = tempfile::tempdir().unwrap();
        let made: Vec<PathBuf> = (0..4)
            .map(|i| {
                let git = dir.path().join(format!("r{i}/.git"));
                std::fs::create_dir_all(&git).unwrap();
                std::fs::write(git.join("config"), "[core]\n\tfsmonitor = x\n").unwrap();
                git
            })
            .collect();
        let mut budget = Budget::new(MAX_TIME);
        budget.files = 2;
        let lines = audit(&made, &scope(dir.path(), &[]), &mut budget);
        assert_eq!(lines.len(), 4, "{lines:?}");
        for (i, line) in lines[..2].iter().enumerate() {
            assert!(
                line.contains(&format!("r{i} whose core.fsmonitor")),
                "{line}"
            );
        }
        assert!(
            lines[2].contains(
                "r2 that the git audit did not fully check (it stopped at its limit of 512 files)"
            ),
            "{}",
            lines[2]
        );
        assert!(
            lines[3].starts_with("sandbox: the git audit stopped after 2 files"),
            "{}",
            lines[3]
        );
        assert!(
            lines[3].contains("the 1 repositories the run made at "),
            "{}",
            lines[3]
        );
        assert!(lines[3].contains("r3 were not checked"), "{}", lines[3]);
        // Out of time: nothing is read, every repository is named.
        let mut budget = Budget::new(Duration::ZERO);
        let lines = audit(&made, &scope(dir.path(), &[]), &mut budget);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].contains("(its time limit, 2 s): the 4 repositories"),
            "{lines:?}"
        );
    }

    /// Config entries that run programs are kept at most [`MAX_FOUND`] of
    /// a repository: past that the audit says it stopped; the first are
    /// named (the positive control).
    #[test]
    fn config_entries_kept_are_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let git = dir.path().join("r/.git");
        std::fs::create_dir_all(&git).unwrap();
        let mut config = "[core]\n\tfsmonitor = x\n".to_owned();
        for i in 0..MAX_FOUND + 10 {
            config.push_str(&format!("[filter \"f{i}\"]\n\tclean = c\n"));
        }
        std::fs::write(git.join("config"), config).unwrap();
        let lines = audit(&[git], &scope(dir.path(), &[]), &mut Budget::new(MAX_TIME));
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].contains("whose core.fsmonitor, filter.f0.clean, "),
            "{}",
            lines[0]
        );
        assert!(
            lines[0].contains(", 9980 more run programs"),
            "{}",
            lines[0]
        );
        assert!(
            lines[0].ends_with("(the git audit stopped in it at its limit of 10000 config entries: it may run more)"),
            "{}",
            lines[0]
        );
    }

    /// A session's audit covers the repositories earlier commands made
    /// and gives each warning once (F6).
    #[test]
    fn a_sessions_audit_covers_earlier_repositories_once() {
        let dir = tempfile::tempdir().unwrap();
        let git = dir.path().join("r/.git");
        std::fs::create_dir_all(&git).unwrap();
        std::fs::write(git.join("config"), "[core]\n\tbare = false\n").unwrap();
        let memory = Memory::default();
        let scope = scope(dir.path(), &[]);
        assert!(memory.warnings(vec![git.clone()], &scope).is_empty());
        std::fs::write(git.join("config"), "[core]\n\tfsmonitor = x\n").unwrap();
        let lines = memory.warnings(Vec::new(), &scope);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(lines[0].contains("core.fsmonitor"), "{lines:?}");
        assert!(memory.warnings(Vec::new(), &scope).is_empty());
    }

    /// With no policy (nothing the run could read is known) nothing is
    /// read: the config itself is named.
    #[test]
    fn without_a_policy_nothing_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let git = dir.path().join(".git");
        std::fs::create_dir_all(&git).unwrap();
        std::fs::write(git.join("config"), "[core]\n\tfsmonitor = x\n").unwrap();
        let runs = runs_code(&git, &Scope::of(None, &[]));
        assert_eq!(
            runs,
            [format!(
                "{}: not read (outside the write paths)",
                std::fs::canonicalize(&git)
                    .unwrap()
                    .join("config")
                    .display()
            )]
        );
    }
}
