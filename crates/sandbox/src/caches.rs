//! Private, persistent caches for package tools (npm, pip, cargo, go,
//! yarn), so a confined run keeps its downloads between runs without being
//! given the user's own caches or `$HOME`.
//!
//! Each tool gets a directory of its own beneath `$XDG_CACHE_HOME` (else
//! `~/.cache`) in `sandbox-tools/`, made writable for the run, and the
//! tool's own variable pointing at it. The user's real caches (`~/.npm`,
//! `~/.cache/pip`, `~/.cargo`) stay as they are: a run could otherwise
//! plant a package there that the user's next unconfined build would use.
//! What one confined run leaves in a tool cache, later runs that ask for
//! the same cache read; no one else does.

use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use sandbox_core::ToolCache;

/// Why a tool cache could not be given.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ToolCacheError {
    /// No cache base: neither `$XDG_CACHE_HOME` nor `$HOME` is an absolute path.
    #[error("no place for the {0} cache: set HOME or XDG_CACHE_HOME to an absolute path")]
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
}

/// Where every tool cache lives: `sandbox-tools` beneath `$XDG_CACHE_HOME`,
/// else `$HOME/.cache`. It is trusted state ([`crate::trusted`]): a run
/// whose write paths reach it gets it write-denied, so no run can swap it
/// (or its ancestors) for a link while another run is given a cache.
pub fn tools_root() -> Option<PathBuf> {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| {
            std::env::var_os("HOME")
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
                .map(|h| h.join(".cache"))
        })
        .map(|base| base.join(TOOLS))
}

/// The name of the tool caches' directory.
pub(crate) const TOOLS: &str = "sandbox-tools";

/// The directory that holds `tool`'s cache for this user, made (mode 0700)
/// when missing, canonical. Refused when the way to it goes through a
/// symlink (an earlier run that could write `$HOME` could have planted one),
/// when it, or `sandbox-tools` above it, is not a directory this user owns,
/// or when it lies on a cgroup, sysfs or proc filesystem (where a directory
/// made is a kernel object).
pub fn tool_cache_dir(tool: ToolCache) -> Result<PathBuf, ToolCacheError> {
    let tools = tools_root().ok_or(ToolCacheError::NoBase(tool))?;
    let unusable = |path: &Path, reason: String| ToolCacheError::Unusable {
        tool,
        path: path.to_owned(),
        reason,
    };
    let base = tools.parent().unwrap_or(Path::new("/")).to_owned();
    std::fs::create_dir_all(&base).map_err(|e| unusable(&base, e.to_string()))?;
    let dir = tools.join(tool.name());
    // No link anywhere on the way: each existing component is what it says.
    let mut walked = PathBuf::from("/");
    for part in dir.components().skip(1) {
        walked.push(part);
        match std::fs::symlink_metadata(&walked) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(unusable(
                    &walked,
                    "is a symlink on the way to the cache; give the real directory \
                     (XDG_CACHE_HOME) or remove the link"
                        .into(),
                ))
            }
            _ => {}
        }
    }
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    for path in [&tools, &dir] {
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
    Ok(dir)
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
