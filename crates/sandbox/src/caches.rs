//! Private, persistent caches for package tools (npm, pip, cargo, go,
//! yarn), so a confined run keeps its downloads between runs without being
//! given the user's own caches or `$HOME`.
//!
//! Each tool gets a directory of its own beneath `<passwd home>/.cache` in
//! `sandbox-tools/<key>/` ([`tools_root`]: no environment variable moves it;
//! `$XDG_CACHE_HOME`, else `$HOME/.cache`, only for an account without a
//! usable passwd home), made writable for the run, and the
//! tool's own variable pointing at it. The user's real caches (`~/.npm`,
//! `~/.cache/pip`, `~/.cargo`) stay as they are: a run could otherwise
//! plant a package there that the user's next unconfined build would use.
//!
//! A tool cache is code a later run executes: `$CARGO_HOME/config.toml`
//! (a `rustc-wrapper`), `$CARGO_HOME/bin`, extracted crate sources, go's
//! module and build caches, npm's tarballs are all trusted unverified. So a
//! cache is shared only by runs of one trust domain: the `<key>`
//! ([`CacheKey`]) is a hash of the run's write roots (the workspace and the
//! `-w` paths, canonical, as the user's policy gives them, without the
//! caches themselves and the run's private `TMPDIR`). Runs on the same
//! workspace share a warm cache run after run; a run on another workspace
//! (or with another set of write paths, a wider one included) gets another
//! cache, so nothing one run leaves there reaches a run that may write
//! elsewhere. Within one domain a cache adds no reach: a run that may write
//! the workspace can already leave code there (a `build.rs`, a package
//! script) that the next run on it executes. A run with no write path has
//! a key of its own; an unconfined run another ([`CacheKey::unconfined`]).
//! A session's commands use the session policy's key; a nested run its own
//! policy's, so a narrower nested run finds no directory of its key that it
//! may make (the outer run's caches stay readable to its tools).
//! A run whose write paths hold the caches' directory is given none
//! ([`tool_cache_dir`] refuses): it could make another domain's directory
//! and plant code there.
//!
//! Caches made before the key (`sandbox-tools/<tool>`) are left as they
//! are, unused: the first run of each domain starts cold.

use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use sandbox_core::ToolCache;

/// Why a tool cache could not be given.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ToolCacheError {
    /// No cache base: no usable passwd home, and neither `$XDG_CACHE_HOME`
    /// nor `$HOME` is an absolute path.
    #[error(
        "no place for the {0} cache: this user has no usable passwd home; set HOME or \
         XDG_CACHE_HOME to an absolute path"
    )]
    NoBase(ToolCache),
    /// The directory could not be made or is not one of this user's own.
    #[error("the {tool} cache {}: {reason}", path.display())]
    Unusable {
        /// The tool.
        tool: ToolCache,
        /// The entry that is wrong.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A write path of the run holds the tool caches' directory: the run
    /// could make another key's directory and plant a cache there, so it
    /// gets none (and the whole directory stays write-denied to it).
    #[error(
        "the write path {} holds the tool caches' directory {}: a run that may write it could \
         plant caches that runs on other workspaces execute, so it gets none (narrow the write \
         paths)",
        .root.display(), .tools.display()
    )]
    WritableByRun {
        /// The write path (a root of the key).
        root: PathBuf,
        /// The tool caches' directory.
        tools: PathBuf,
    },
}

/// Where every tool cache lives: `sandbox-tools` beneath `<home>/.cache` of
/// the user's passwd home ([`sandbox_core::home::trusted_home`]), which no
/// environment variable moves: a run started with another `$XDG_CACHE_HOME`
/// or `$HOME` whose write paths hold the directory this user's other runs
/// name by it could otherwise plant a cache there that they execute. Only
/// without a usable passwd home (a known gap for such accounts, see
/// [`sandbox_core::home`]): beneath `$XDG_CACHE_HOME`, else `$HOME/.cache`.
/// It is trusted state ([`crate::trusted`]): a run whose write paths reach
/// it gets it write-denied, so no run can swap it (or its ancestors) for a
/// link while another run is given a cache.
pub fn tools_root() -> Option<PathBuf> {
    let env_dir = |name: &str| {
        std::env::var_os(name)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    sandbox_core::home::trusted_home()
        .map(|h| h.join(".cache"))
        .or_else(|| env_dir("XDG_CACHE_HOME"))
        .or_else(|| env_dir("HOME").map(|h| h.join(".cache")))
        .map(|base| base.join(TOOLS))
}

/// The name of the tool caches' directory.
pub(crate) const TOOLS: &str = "sandbox-tools";

/// The hex digits of a key: 128 bits of SHA-256.
const KEY_HEX: usize = 32;

/// Which runs share a tool cache: those whose write roots are the same.
///
/// The key is the first 128 bits of a SHA-256 (in hex) of the run's write
/// roots, canonical (as a [`ResolvedPolicy`](sandbox_core::ResolvedPolicy)
/// holds them), sorted, each given once, and without those inside another
/// (they add nothing to what the run may write). The roots are those of the
/// user's policy (workspace, `-w` paths): not the tool caches themselves,
/// not the run's private `TMPDIR` or other paths the runner adds for the
/// run alone. No roots at all is a key of its own, and so is an unconfined
/// run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheKey {
    hex: String,
    roots: Vec<PathBuf>,
}

impl CacheKey {
    /// The key of a confined run that may write `roots` (canonical paths).
    pub fn of_write_roots<I>(roots: I) -> Self
    where
        I: IntoIterator<Item = PathBuf>,
    {
        let mut roots: Vec<PathBuf> = roots.into_iter().collect();
        roots.sort();
        roots.dedup();
        let all = roots.clone();
        roots.retain(|r| !all.iter().any(|o| o != r && r.starts_with(o)));
        let hex = Self::hash(b"confined", &roots);
        Self { hex, roots }
    }

    /// The key of unconfined runs (danger-full-access): no confined run's.
    pub fn unconfined() -> Self {
        Self {
            hex: Self::hash(b"unconfined", &[]),
            roots: Vec::new(),
        }
    }

    /// Each root length-prefixed, so no two lists of paths give one input.
    fn hash(kind: &[u8], roots: &[PathBuf]) -> String {
        let mut h = Sha256::new();
        h.update(b"sandbox-tools key 1\0");
        h.update(kind);
        for root in roots {
            let bytes = root.as_os_str().as_bytes();
            h.update((bytes.len() as u64).to_le_bytes());
            h.update(bytes);
        }
        h.finalize()[..KEY_HEX / 2]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// The key as the directory's name (32 lowercase hex digits).
    pub fn as_str(&self) -> &str {
        &self.hex
    }

    /// The write roots it was made of (sorted, none inside another).
    pub fn roots(&self) -> &[PathBuf] {
        &self.roots
    }
}

impl std::fmt::Display for CacheKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.hex)
    }
}

/// Whether `name` could be a [`CacheKey`]'s directory.
pub(crate) fn is_key_name(name: &str) -> bool {
    name.len() == KEY_HEX && name.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The directory that holds `tool`'s cache for this user and the runs of
/// `key` (`sandbox-tools/<key>/<tool>`), made (mode 0700) when missing,
/// canonical. Refused when one of the key's write roots holds the caches'
/// directory (that run could make and fill another key's directory), when
/// the way to it goes through a symlink (an earlier run that could write
/// `$HOME` could have planted one), when it, the key's directory or
/// `sandbox-tools` above them, is not a directory this user owns, or when
/// it lies on a cgroup, sysfs or proc filesystem (where a directory made is
/// a kernel object).
pub fn tool_cache_dir(tool: ToolCache, key: &CacheKey) -> Result<PathBuf, ToolCacheError> {
    let tools = tools_root().ok_or(ToolCacheError::NoBase(tool))?;
    let unusable = |path: &Path, reason: String| ToolCacheError::Unusable {
        tool,
        path: path.to_owned(),
        reason,
    };
    // `tools` is checked canonical below (no link on the way, `canonical`).
    if let Some(root) = key.roots().iter().find(|r| tools.starts_with(r)) {
        return Err(ToolCacheError::WritableByRun {
            root: root.clone(),
            tools,
        });
    }
    let base = tools.parent().unwrap_or(Path::new("/")).to_owned();
    std::fs::create_dir_all(&base).map_err(|e| unusable(&base, e.to_string()))?;
    let keyed = tools.join(key.as_str());
    let dir = keyed.join(tool.name());
    // No link anywhere on the way: each existing component is what it says.
    let mut walked = PathBuf::from("/");
    for part in dir.components().skip(1) {
        walked.push(part);
        match std::fs::symlink_metadata(&walked) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(unusable(
                    &walked,
                    "is a symlink on the way to the cache; remove the link".into(),
                ))
            }
            _ => {}
        }
    }
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    for path in [&tools, &keyed, &dir] {
        match std::fs::DirBuilder::new().mode(0o700).create(path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(unusable(path, format!("cannot be created: {e}"))),
        }
        let meta = std::fs::symlink_metadata(path).map_err(|e| unusable(path, e.to_string()))?;
        if !meta.file_type().is_dir() {
            return Err(unusable(
                path,
                "is not a directory (a symlink or file is refused: remove it)".into(),
            ));
        }
        if meta.uid() != me {
            return Err(unusable(
                path,
                format!("is owned by uid {}, not this user ({me})", meta.uid()),
            ));
        }
    }
    if let Some(kind) = kernel_filesystem(&dir) {
        let _ = std::fs::remove_dir(&dir);
        let _ = std::fs::remove_dir(&keyed);
        let _ = std::fs::remove_dir(&tools);
        return Err(unusable(
            &dir,
            format!("lies on a {kind} filesystem, where a directory is a kernel object"),
        ));
    }
    let canonical = std::fs::canonicalize(&dir).map_err(|e| unusable(&dir, e.to_string()))?;
    if canonical != dir {
        return Err(unusable(
            &dir,
            format!(
                "resolves to {}: something on the way changed",
                canonical.display()
            ),
        ));
    }
    // Used now: kept [`KEEP_UNUSED`] from here ([`prune_unused_tool_caches`]).
    touch(&keyed);
    Ok(dir)
}

/// How long a key's caches are kept without a run of that key: a harness
/// that gives each task a fresh workspace makes a key per task, whose
/// caches no later run finds.
pub const KEEP_UNUSED: std::time::Duration = std::time::Duration::from_secs(30 * 24 * 3600);

/// How often [`prune_unused_tool_caches`] looks.
const PRUNE_EVERY: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// The file in [`tools_root`] whose time says when it was last pruned.
const PRUNED: &str = ".pruned";

/// Sets `path`'s times to now, not following a link (best effort).
fn touch(path: &Path) {
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return;
    };
    // SAFETY: a NUL-terminated path; a null `times` means now.
    unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            std::ptr::null(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
}

/// Removes, at most once a day and on a thread of its own without
/// capabilities (it removes only what this user could), the keys' caches
/// no run used for [`KEEP_UNUSED`], in [`tools_root`] (each key's
/// directory of this user's, not a link, whose newest time and its tools'
/// directories' are older). Returns at once; a process that ends first
/// leaves the rest for the next day.
pub fn prune_unused_tool_caches() {
    let Some(tools) = tools_root() else {
        return;
    };
    let _ = std::thread::Builder::new()
        .name("sandbox-cache-prune".into())
        .spawn(move || {
            if crate::runner::drop_thread_capabilities().is_ok() {
                prune(&tools, std::time::SystemTime::now());
            }
        });
}

/// Removes each key's directory in `tools` (this user's own, not a link)
/// whose last use, the newest time of it and of its tools' directories,
/// is older than [`KEEP_UNUSED`] at `now`, unless `tools` was pruned
/// within [`PRUNE_EVERY`] (its [`PRUNED`] file's time, set now). Only
/// entries named as keys are looked at; a link is never followed, a tree
/// of any depth goes ([`crate::remove_tree`]). How many were removed.
fn prune(tools: &Path, now: std::time::SystemTime) -> usize {
    use std::os::unix::fs::OpenOptionsExt;
    let stamp = tools.join(PRUNED);
    let recent = |meta: &std::fs::Metadata, within: std::time::Duration| {
        meta.modified()
            .ok()
            .and_then(|t| now.duration_since(t).ok())
            .map_or(true, |age| age < within)
    };
    if std::fs::symlink_metadata(&stamp).is_ok_and(|m| m.is_file() && recent(&m, PRUNE_EVERY)) {
        return 0;
    }
    let Ok(entries) = std::fs::read_dir(tools) else {
        return 0;
    };
    let made = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&stamp);
    let times = std::fs::FileTimes::new()
        .set_modified(now)
        .set_accessed(now);
    if made.and_then(|f| f.set_times(times)).is_err() {
        return 0;
    }
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name.to_str().is_some_and(is_key_name) {
            continue;
        }
        let path = entry.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if !meta.is_dir() || meta.uid() != me || recent(&meta, KEEP_UNUSED) {
            continue;
        }
        // A tool's directory written lately is a use too (keys made
        // before their use was recorded).
        let used = std::fs::read_dir(&path).is_ok_and(|tools| {
            tools
                .flatten()
                .any(|t| std::fs::symlink_metadata(t.path()).is_ok_and(|m| recent(&m, KEEP_UNUSED)))
        });
        if !used && crate::remove_tree::remove_tree(&path).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// The kind of kernel filesystem `path` lies on (cgroup, sysfs, proc), if any.
fn kernel_filesystem(path: &Path) -> Option<&'static str> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: statfs is plain data, filled by statfs(2) below.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a pointer to the local above.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    // statfs(2) and include/uapi/linux/magic.h.
    #[allow(clippy::unnecessary_cast)]
    match st.f_type as i64 {
        0x0027_e0eb | 0x6367_7270 => Some("cgroup"),
        0x6265_6572 => Some("sysfs"),
        0x9fa0 => Some("proc"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sets `path`'s times `days` days before `now`.
    fn age(path: &Path, now: std::time::SystemTime, days: u64) {
        let t = now - std::time::Duration::from_secs(days * 24 * 3600);
        let f = std::fs::File::open(path).unwrap();
        f.set_times(std::fs::FileTimes::new().set_modified(t).set_accessed(t))
            .unwrap();
    }

    /// Keys unused for longer than KEEP_UNUSED are removed, at most once a
    /// day; kept: a recently used key, an old key whose tool directory was
    /// written lately, names that are no key, a link named as a key (and
    /// what it names). A second prune the same day removes nothing.
    #[test]
    fn unused_keys_are_pruned_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let tools = dir.path().join(TOOLS);
        let now = std::time::SystemTime::now();
        let k = |i: u8| tools.join(format!("{i:032x}"));
        for i in 1..=4 {
            std::fs::create_dir_all(k(i).join("npm/sub")).unwrap();
            std::fs::write(k(i).join("npm/sub/f"), "x").unwrap();
        }
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("keep"), "x").unwrap();
        std::os::unix::fs::symlink(&outside, k(5)).unwrap();
        std::fs::create_dir_all(tools.join("npm")).unwrap();
        // 1: unused for 40 days (and its tool dir too): removed.
        age(&k(1).join("npm"), now, 40);
        age(&k(1), now, 40);
        // 2: used yesterday: kept.
        age(&k(2).join("npm"), now, 40);
        age(&k(2), now, 1);
        // 3: an old key whose npm directory was written 2 days ago: kept.
        age(&k(3), now, 40);
        age(&k(3).join("npm"), now, 2);
        // 4: as 1, for the second prune.
        age(&k(4).join("npm"), now, 40);
        age(&k(4), now, 40);
        age(&tools.join("npm"), now, 400);
        assert_eq!(prune(&tools, now), 2);
        assert!(!k(1).exists() && !k(4).exists());
        assert!(k(2).join("npm/sub/f").exists() && k(3).join("npm/sub/f").exists());
        assert!(tools.join("npm").exists(), "not a key's name");
        assert!(outside.join("keep").exists(), "a link is not followed");
        assert!(std::fs::symlink_metadata(k(5)).is_ok(), "nor removed");
        // Pruned today: nothing more until tomorrow.
        std::fs::create_dir_all(k(6)).unwrap();
        age(&k(6), now, 40);
        assert_eq!(prune(&tools, now), 0);
        assert!(k(6).exists());
        assert_eq!(prune(&tools, now + PRUNE_EVERY), 1);
        assert!(!k(6).exists());
    }

    fn key(roots: &[&str]) -> CacheKey {
        CacheKey::of_write_roots(roots.iter().map(PathBuf::from))
    }

    #[test]
    fn a_key_is_its_write_roots_in_any_order_and_spelling() {
        let k = key(&["/w/a", "/w/b"]);
        assert_eq!(k.as_str().len(), KEY_HEX);
        assert!(is_key_name(k.as_str()), "{k}");
        assert_eq!(k, key(&["/w/b", "/w/a", "/w/a"]));
        // A root inside another adds nothing to what the run may write.
        assert_eq!(k, key(&["/w/a", "/w/b", "/w/a/target"]));
        assert_eq!(k.roots(), [PathBuf::from("/w/a"), PathBuf::from("/w/b")]);
    }

    #[test]
    fn other_write_roots_are_other_keys() {
        let a = key(&["/w/a"]);
        for other in [
            key(&["/w/b"]),
            key(&["/w/a", "/w/b"]),
            key(&["/w"]),
            key(&["/w/a/sub"]),
            key(&[]),
            CacheKey::unconfined(),
            // No two lists of paths hash the same bytes.
            key(&["/w/a/w/b"]),
        ] {
            assert_ne!(a, other);
        }
        assert_ne!(key(&[]), CacheKey::unconfined());
        assert_ne!(key(&["/a", "/b"]).as_str(), key(&["/a/b"]).as_str());
    }

    #[test]
    fn only_keys_are_key_names() {
        assert!(is_key_name(&"0".repeat(32)));
        for bad in ["npm", "", &"0".repeat(31), &"A".repeat(32), &"g".repeat(32)] {
            assert!(!is_key_name(bad), "{bad}");
        }
    }
}
