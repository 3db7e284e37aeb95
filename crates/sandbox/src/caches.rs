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

/// The directory that holds `tool`'s cache for this user, made (mode 0700)
/// when missing. Refused when it, or `sandbox-tools` above it, is a symlink
/// or not a directory this user owns: a run that could write its parent
/// could otherwise point the next run's write grant anywhere.
pub fn tool_cache_dir(tool: ToolCache) -> Result<PathBuf, ToolCacheError> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| {
            std::env::var_os("HOME")
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
                .map(|h| h.join(".cache"))
        })
        .ok_or(ToolCacheError::NoBase(tool))?;
    let unusable = |path: &Path, reason: String| ToolCacheError::Unusable {
        tool,
        path: path.to_owned(),
        reason,
    };
    std::fs::create_dir_all(&base).map_err(|e| unusable(&base, e.to_string()))?;
    let tools = base.join("sandbox-tools");
    let dir = tools.join(tool.name());
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
    Ok(dir)
}
