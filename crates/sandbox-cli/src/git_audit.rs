//! After a workspace-write run: git repositories the command made whose
//! config or hooks run programs.
//!
//! A repository from before the run keeps its config and hooks unwritable
//! (the broker protects every git directory beneath the write paths). A
//! repository the run makes is its own (`git init`, `git clone` are everyday
//! work), but git reaches it from the parent: added to the parent's index as
//! a gitlink, it is a submodule to `git status`, which runs git there, with
//! that repository's `core.fsmonitor`. So the sandbox says which new ones
//! carry code that git would run, once, after the run. The repositories are
//! those the broker saw made (it made the directory and wrote a `HEAD` in
//! it), wherever they are; without a broker (no record of the run's entries)
//! the workspace is walked before and after, within bounds.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

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
/// The value beside a config file the audit did not read ([`Read::Refused`]).
const NOT_READ: &str = "\0not read";

/// Why a file is named "not read" for being outside what the run could
/// read ([`Scope`]).
const OUTSIDE: &str = "outside the write paths";

/// What the audit may read: files and directories beneath the run's write
/// paths (the run made them) and not beneath its read-deny paths. The
/// audit runs in the runner, unconfined, after the run; a path the
/// command's config names anywhere else (another user's file, a read-denied
/// secret, `/proc/kmsg`, whose read has side effects) is named, never read:
/// the deputy does no more than the sandbox let the command do.
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
    /// a directory when `dir`) if it is in the scope: checked on its
    /// canonical path before the open (no symlink followed from there, and
    /// no magic link anywhere: `openat2` where the kernel has it) and
    /// again on the opened file itself (the path the kernel gives for the
    /// fd; its file system not procfs, sysfs or another pseudo file
    /// system), so a process of the run that survives it cannot swap what
    /// is opened. `Err(None)`: missing or unopenable (git would see nothing
    /// either); `Err(Some(why))`: not opened or not read, and why.
    fn open(&self, path: &Path, dir: bool) -> Result<std::fs::File, Option<&'static str>> {
        let real = std::fs::canonicalize(path).map_err(|_| None)?;
        if !self.admits(&real) {
            return Err(Some(OUTSIDE));
        }
        let file = open_no_links(&real, dir).map_err(|_| None)?;
        match fd_path(&file) {
            Some(at) if self.admits(&at) && !pseudo_fs(&file) => Ok(file),
            _ => Err(Some(OUTSIDE)),
        }
    }
}

/// `real` (a canonical path) opened without following a symlink (none is
/// left in it: one there now was put there since) or a magic link.
fn open_no_links(real: &Path, dir: bool) -> std::io::Result<std::fs::File> {
    use std::os::fd::FromRawFd;
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(real.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    let flags = libc::O_RDONLY
        | libc::O_NONBLOCK
        | libc::O_NOCTTY
        | libc::O_CLOEXEC
        | libc::O_NOFOLLOW
        | if dir { libc::O_DIRECTORY } else { 0 };
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

/// What the audit read of a file the command could have made.
enum Read {
    /// Missing or unreadable: git would see nothing either.
    Nothing,
    Text(String),
    /// Not read, and why: outside what the run could read ([`OUTSIDE`]),
    /// a FIFO (whose open or read would block the runner forever: nothing
    /// of the run is left to write it), a device (`/dev/zero` never ends),
    /// or a file over [`FILE_CAP`].
    Refused(&'static str),
}

/// `path` read without ever blocking or growing without bound, and only
/// if `scope` admits it ([`Scope::open`]): only a regular file (checked
/// before the open, which is non-blocking and takes no terminal, and again
/// on the open file), at most [`FILE_CAP`] bytes.
fn read_bounded(path: &Path, scope: &Scope) -> Read {
    use std::io::Read as _;
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
    let Ok(real) = std::fs::canonicalize(path) else {
        return Read::Nothing;
    };
    if !scope.admits(&real) {
        return Read::Refused(OUTSIDE);
    }
    let Ok(meta) = std::fs::metadata(&real) else {
        return Read::Nothing;
    };
    if let Err(why) = regular(&meta) {
        // A special file or a huge one is named without an open.
        return Read::Refused(why);
    }
    let file = match scope.open(&real, false) {
        Ok(file) => file,
        Err(None) => return Read::Nothing,
        Err(Some(why)) => return Read::Refused(why),
    };
    match file.metadata() {
        Ok(meta) => {
            if let Err(why) = regular(&meta) {
                return Read::Refused(why);
            }
        }
        Err(_) => return Read::Nothing,
    }
    let mut bytes = Vec::new();
    if file.take(FILE_CAP).read_to_end(&mut bytes).is_err() {
        return Read::Nothing;
    }
    match String::from_utf8(bytes) {
        Ok(text) => Read::Text(text),
        Err(_) => Read::Nothing,
    }
}

/// The text of `path` when it is a small regular file ([`read_bounded`]).
fn read_text(path: &Path, scope: &Scope) -> Option<String> {
    match read_bounded(path, scope) {
        Read::Text(text) => Some(text),
        Read::Nothing | Read::Refused(_) => None,
    }
}

/// The names in the directory `dir` (at most [`HOOKS_CAP`]), if `scope`
/// admits it ([`Scope::open`]), read from the opened directory.
fn list_dir(dir: &Path, scope: &Scope) -> Result<Vec<std::ffi::OsString>, Option<&'static str>> {
    use std::os::fd::IntoRawFd;
    use std::os::unix::ffi::OsStrExt;
    let file = scope.open(dir, true)?;
    let fd = file.into_raw_fd();
    // SAFETY: fdopendir takes the fd (closed by closedir).
    let d = unsafe { libc::fdopendir(fd) };
    if d.is_null() {
        // SAFETY: the fd is still ours when fdopendir fails.
        unsafe { libc::close(fd) };
        return Err(None);
    }
    let mut names = Vec::new();
    while names.len() < HOOKS_CAP {
        // SAFETY: a live DIR stream.
        let e = unsafe { libc::readdir(d) };
        if e.is_null() {
            break;
        }
        // SAFETY: d_name is NUL-terminated in the entry readdir returned.
        let name = unsafe { std::ffi::CStr::from_ptr((*e).d_name.as_ptr()) };
        let name = std::ffi::OsStr::from_bytes(name.to_bytes());
        if name != "." && name != ".." {
            names.push(name.to_os_string());
        }
    }
    // SAFETY: the stream opened above, closed once.
    unsafe { libc::closedir(d) };
    Ok(names)
}

/// Config keys whose value git runs as a program (git-config(1)).
const RUNS: &[&str] = &[
    "core.fsmonitor",
    "core.hookspath",
    "core.sshcommand",
    "core.gitproxy",
    "core.editor",
    "core.pager",
    "core.askpass",
    "sequence.editor",
    "diff.external",
    "gpg.program",
    "credential.helper",
    "uploadpack.packobjectshook",
];

/// Section prefixes whose subsection keys git runs (`filter.<x>.clean`, ...).
const RUNS_IN: &[(&str, &[&str])] = &[
    ("filter.", &["clean", "smudge", "process"]),
    ("diff.", &["textconv", "command"]),
    ("merge.", &["driver"]),
    ("gpg.", &["program"]),
    ("credential.", &["helper"]),
    ("remote.", &["uploadpack", "receivepack", "vcs"]),
    ("pager.", &[]),
];

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

/// The git directory `dot_git` names: itself, or what a `.git` file points to.
fn git_dir_of(dot_git: &Path, scope: &Scope) -> Option<PathBuf> {
    if dot_git.is_dir() {
        return Some(dot_git.to_path_buf());
    }
    let text = read_text(dot_git, scope)?;
    let p = PathBuf::from(text.lines().find_map(|l| l.strip_prefix("gitdir:"))?.trim());
    Some(if p.is_absolute() {
        p
    } else {
        dot_git.parent().unwrap_or(Path::new("/")).join(p)
    })
}

/// What in the repository at `dot_git` (a git directory or a `.git` file)
/// runs programs: config keys (in `config`, `config.worktree` and the common
/// directory's config, every `include.path` and `includeIf.*.path` they
/// name followed, whatever its condition) and hooks (in `hooks` and where
/// `core.hooksPath` points).
///
/// Only what `scope` admits is read or listed (what the run could read
/// and made); a config, include or hooks directory elsewhere is named
/// "not read (outside the write paths)".
pub(crate) fn runs_code(dot_git: &Path, scope: &Scope) -> Vec<String> {
    let Some(gitdir) = git_dir_of(dot_git, scope) else {
        return Vec::new();
    };
    let mut configs = vec![gitdir.join("config"), gitdir.join("config.worktree")];
    if let Some(common) = read_text(&gitdir.join("commondir"), scope) {
        configs.push(gitdir.join(common.trim()).join("config"));
    }
    let mut entries = Vec::new();
    let mut seen = BTreeSet::new();
    for config in configs {
        read_config(&config, scope, 0, &mut seen, &mut entries);
    }
    let mut out: Vec<String> = entries
        .iter()
        .filter(|(k, v)| runs(k) || v == NOT_READ)
        .map(|(k, _)| k.clone())
        .collect();
    out.dedup();
    let worktree = dot_git.parent().unwrap_or(Path::new("/"));
    let mut hook_dirs = vec![gitdir.join("hooks")];
    hook_dirs.extend(
        entries
            .iter()
            .filter(|(k, _)| k == "core.hookspath")
            .map(|(_, v)| expand(v, worktree)),
    );
    for dir in hook_dirs {
        match list_dir(&dir, scope) {
            Ok(hooks) => out.extend(
                hooks
                    .into_iter()
                    .map(|h| h.to_string_lossy().into_owned())
                    .filter(|n| !n.ends_with(".sample"))
                    .map(|n| format!("{}/{n}", dir.display())),
            ),
            Err(Some(why)) => out.push(not_read(&dir, why)),
            Err(None) => {}
        }
    }
    out
}

/// Whether git runs the value of the config key `key` as a program.
fn runs(key: &str) -> bool {
    RUNS.contains(&key)
        || RUNS_IN.iter().any(|(section, keys)| {
            key.strip_prefix(section)
                .and_then(|rest| rest.rsplit_once('.').map(|(_, k)| k).or(Some(rest)))
                .is_some_and(|k| keys.is_empty() || keys.contains(&k))
        })
}

/// `path` as git reads a path value: `~/` from `$HOME`, relative to `base`.
fn expand(path: &str, base: &Path) -> PathBuf {
    match (path.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => Path::new(&home).join(rest),
        _ => base.join(path),
    }
}

/// The entries of the git config file `path` and of every file it includes,
/// as `(section[.subsection].key, value)`.
fn read_config(
    path: &Path,
    scope: &Scope,
    depth: usize,
    seen: &mut BTreeSet<PathBuf>,
    out: &mut Vec<(String, String)>,
) {
    if depth > INCLUDE_DEPTH || !seen.insert(path.to_path_buf()) {
        return;
    }
    let text = match read_bounded(path, scope) {
        Read::Text(text) => text,
        Read::Nothing => return,
        // Named in the warning: git reading it would block or never end,
        // or read what the audit did not.
        Read::Refused(why) => {
            out.push((not_read(path, why), NOT_READ.to_owned()));
            return;
        }
    };
    let base = path.parent().unwrap_or(Path::new("/"));
    for (key, value) in config_entries(&text) {
        let include =
            key == "include.path" || (key.starts_with("includeif.") && key.ends_with(".path"));
        if include {
            read_config(&expand(&value, base), scope, depth + 1, seen, out);
        }
        out.push((key, value));
    }
}

/// How the warning names `path`, not read for `why`.
fn not_read(path: &Path, why: &str) -> String {
    if why == OUTSIDE {
        format!("{}: not read ({why})", path.display())
    } else {
        format!("{} ({why}: not read)", path.display())
    }
}

/// The entries a git config text sets, as `(section[.subsection].key,
/// value)`: section and key lowercase, the subsection's case kept, as git
/// does; a value's quotes removed.
fn config_entries(text: &str) -> Vec<(String, String)> {
    let mut section = String::new();
    let mut entries = Vec::new();
    for line in text.lines() {
        let mut line = line.trim();
        if let Some(rest) = line.strip_prefix('[') {
            let Some((head, after)) = rest.split_once(']') else {
                continue;
            };
            section = match head.split_once(char::is_whitespace) {
                Some((name, sub)) => {
                    format!(
                        "{}.{}",
                        name.to_ascii_lowercase(),
                        sub.trim().trim_matches('"')
                    )
                }
                None => head.trim().to_ascii_lowercase(),
            };
            line = after.trim();
        }
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        let (key, value) = match line.split_once('=') {
            Some((k, v)) => (k.trim(), v.trim()),
            None => (line.split([' ', '\t']).next().unwrap_or(""), ""),
        };
        let value = match value.strip_prefix('"') {
            Some(quoted) => quoted.split('"').next().unwrap_or(""),
            None => value.split(['#', ';']).next().unwrap_or("").trim(),
        };
        let key = key.to_ascii_lowercase();
        if !key.is_empty() && !section.is_empty() {
            entries.push((format!("{section}.{key}"), value.to_owned()));
        }
    }
    entries
}

/// One `sandbox:` line per repository in `made` (git directories or `.git`
/// files the run made) that runs code, reading only what `scope` admits.
pub(crate) fn warnings<'a>(
    made: impl IntoIterator<Item = &'a PathBuf>,
    scope: &Scope,
) -> Vec<String> {
    made.into_iter()
        .filter_map(|dot_git| {
            let runs = runs_code(dot_git, scope);
            let at = if dot_git.file_name() == Some(std::ffi::OsStr::new(".git")) {
                dot_git.parent().unwrap_or(dot_git)
            } else {
                dot_git
            };
            (!runs.is_empty()).then(|| {
                format!(
                    "sandbox: the run made a git repository at {} whose {} run programs; git in \
                     the workspace would run them (a submodule's fsmonitor runs at `git status`): \
                     review it before running git there",
                    at.display(),
                    runs.join(", ")
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn config_keys_are_read_with_sections_and_subsections() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config");
        std::fs::write(
            &config,
            "[core]\n\tFSMonitor = x\n\tbare = false\n[filter \"lfs\"]\n\tclean = y\n# c\n[user] name = a\n",
        )
        .unwrap();
        let keys: Vec<String> = config_entries(&std::fs::read_to_string(&config).unwrap())
            .into_iter()
            .map(|(k, _)| k)
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
            read_bounded(&status, &proc_scope),
            Read::Refused(OUTSIDE)
        ));
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), "[a]\nb = c\n").unwrap();
        assert!(matches!(
            read_bounded(&dir.path().join("f"), &scope(dir.path(), &[])),
            Read::Text(t) if t.contains("b = c")
        ));
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
