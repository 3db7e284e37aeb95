//! Git directories beneath the write paths that the run did not make.
//!
//! git runs what a repository's `config` names (`core.fsmonitor`,
//! `core.hooksPath`, filters, ...) and its `hooks`, and `git status` in a
//! repository runs git in every nested repository its index records as a
//! gitlink. So a write to the config or hooks of *any* git directory the
//! user's next git command reaches is code run outside the sandbox. Under a
//! policy that protects git directories
//! (`ResolvedPolicy::protects_git_dirs`, set by workspace-write), the broker
//! refuses, in every git directory that existed before the run, wherever it
//! lies beneath the write paths:
//!
//! * any change to `config`, `config.worktree`, `commondir` and `hooks` (and
//!   everything beneath `hooks`): writing, creating, removing, renaming,
//!   linking, metadata;
//! * removing or moving away `HEAD`, `objects` and `refs`, which make it a
//!   git directory (gitrepository-layout(5); git's own test,
//!   `is_git_directory`, looks for `HEAD` and `objects`/`refs` or
//!   `commondir`): the directory stays one for the whole run, so the rule
//!   cannot be switched off by emptying it first. `HEAD` is still replaced by
//!   a rename, as git updates it;
//! * a `.git` file (a gitlink naming the git directory) the run did not make.
//!
//! Found as calls arrive, not by a walk at launch: a call names one entry,
//! and only a name above (`config`, `hooks`, ...) costs a look at its
//! directory. "Made by the run" is the directory's inode among those the
//! broker itself created (`mkdir`), so renaming a repository does not change
//! what it is. A repository the run makes (`git init`, `git clone`) stays
//! its own; the directories in which the run wrote a `HEAD` are reported
//! after the run ([`GitGuard::made_git_dirs`]), where they are now, so the
//! caller can name exactly the new repositories whose config runs programs.

use std::collections::HashSet;
use std::ffi::{CStr, CString, OsStr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use crate::entries::fstatat_nofollow;
use crate::log::Refusal;
use crate::resolve::{fstat, openat2};

/// Names in a git directory whose every change is refused.
const PROGRAM_PARTS: &[&[u8]] = &[b"config", b"config.worktree", b"commondir", b"hooks"];
/// Names that make a directory a git directory: never removed or moved away.
const MARKERS: &[&[u8]] = &[b"HEAD", b"objects", b"refs"];
/// Names whose making may turn a directory into a repository of the run's.
const MAKES_A_REPOSITORY: &[&[u8]] = &[b"HEAD", b"objects", b"refs", b"commondir", b"config"];
/// The most candidate directories followed by an fd (the rest by path).
const MAX_TRACKED: usize = 256;
/// The most candidate directories kept at all (the rest are counted).
const MAX_CANDIDATES: usize = 100_000;

/// What a call does to the entry it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    /// Makes, writes, replaces or changes the metadata of the entry.
    Write,
    /// Removes the entry or moves it away.
    Remove,
}

/// The run's own git state: what it made, and the directories that may
/// have become its repositories.
#[derive(Debug, Default)]
pub(crate) struct GitGuard {
    /// Device and inode of each directory, and each `.git` file, the run made.
    made: Mutex<HashSet<(u64, u64)>>,
    /// Directories that may have become repositories of the run's: it made
    /// `HEAD`, `objects`, `refs`, `commondir` or `config` in them while they
    /// were not git directories from before the run.
    candidates: Mutex<Candidates>,
}

/// The directories [`GitGuard::noted`] keeps, each by identity: the first
/// [`MAX_TRACKED`] with an `O_PATH` fd that follows them through renames,
/// the rest by the path they had.
#[derive(Debug, Default)]
struct Candidates {
    known: HashSet<(u64, u64)>,
    tracked: Vec<OwnedFd>,
    by_path: Vec<((u64, u64), PathBuf)>,
    /// Past [`MAX_CANDIDATES`]: how many more there were.
    dropped: usize,
}

impl GitGuard {
    /// The refusal for a change to `name` in the directory `parent` (an
    /// admitted fd, canonical path `parent_path`), when a git directory that
    /// existed before the run protects it.
    pub(crate) fn entry(
        &self,
        parent: &OwnedFd,
        parent_path: &Path,
        name: &[u8],
        change: Change,
    ) -> Option<Refusal> {
        let refuse = Some(Refusal::GitDirBeforeRun);
        let part =
            PROGRAM_PARTS.contains(&name) || (change == Change::Remove && MARKERS.contains(&name));
        if part && self.old_git_dir(parent) {
            return refuse;
        }
        if name == b".git" {
            let c = CString::new(name).ok()?;
            if let Ok(st) = fstatat_nofollow(parent, &c) {
                if st.st_mode & libc::S_IFMT == libc::S_IFREG && !self.made_inode(&st) {
                    return refuse;
                }
            }
        }
        // Beneath `hooks`: the git directory above it.
        self.beneath_hooks(parent, parent_path)
            .then_some(Refusal::GitDirBeforeRun)
    }

    /// The refusal for a change to the existing object `fd` (canonical path
    /// `path`): a program part of an old git directory, or an old `.git` file.
    pub(crate) fn object(&self, fd: &OwnedFd, path: &Path) -> Option<Refusal> {
        let name = path.file_name()?.as_bytes();
        let interesting = PROGRAM_PARTS.contains(&name)
            || name == b".git"
            || path.components().any(|c| c.as_os_str() == "hooks");
        if !interesting {
            return None;
        }
        let st = fstat(fd).ok()?;
        // The parent as it is now, and the object in it: the same inode, or
        // it moved while it was checked.
        let Some(parent) = path.parent().and_then(|p| open_path(p).ok()) else {
            return Some(Refusal::Moved);
        };
        let here = CString::new(name).ok()?;
        match fstatat_nofollow(&parent, &here) {
            Ok(now) if (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino) => {}
            _ => return Some(Refusal::Moved),
        }
        let parent_path = path.parent()?;
        self.entry(&parent, parent_path, name, Change::Write)
    }

    /// Notes that the run made the directory `name` in `parent` (`mkdir`:
    /// a new inode, never one moved there), then as [`GitGuard::noted`].
    pub(crate) fn made_dir(&self, parent: &OwnedFd, name: &[u8]) {
        if let Some(st) = entry_stat(parent, name) {
            if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
                lock(&self.made).insert((st.st_dev, st.st_ino));
            }
        }
        self.noted(parent, name);
    }

    /// Notes what the run just put at `name` in `parent` (made, renamed,
    /// linked or exchanged there): a `.git` file is then the run's own, and
    /// a name that makes a repository makes `parent` one to check after the
    /// run, unless it is a git directory from before it. A directory moved
    /// there stays what it was.
    pub(crate) fn noted(&self, parent: &OwnedFd, name: &[u8]) {
        let name = name.strip_suffix(b"/").unwrap_or(name);
        if name == b".git" {
            if let Some(st) = entry_stat(parent, name) {
                if st.st_mode & libc::S_IFMT == libc::S_IFREG {
                    lock(&self.made).insert((st.st_dev, st.st_ino));
                }
            }
        }
        if MAKES_A_REPOSITORY.contains(&name) && !self.old_git_dir(parent) {
            self.candidate(parent);
        }
    }

    /// The repositories the run made, where they are now, and how many more
    /// it may have made that cannot be named (moved after they were made,
    /// beyond what is kept): directories noted by [`GitGuard::noted`] that
    /// are git directories now (a removed one is left out).
    pub(crate) fn made_git_dirs(&self) -> (Vec<PathBuf>, usize) {
        let c = lock(&self.candidates);
        let mut unnamed = c.dropped;
        let mut out: Vec<PathBuf> = c
            .tracked
            .iter()
            .filter(|fd| is_git_dir(fd))
            .filter_map(|fd| {
                let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok()?;
                (link.is_absolute() && !link.as_os_str().as_bytes().ends_with(b" (deleted)"))
                    .then_some(link)
            })
            .collect();
        for (id, path) in &c.by_path {
            match open_path(path) {
                Ok(fd) if fstat(&fd).is_ok_and(|st| (st.st_dev, st.st_ino) == *id) => {
                    if is_git_dir(&fd) {
                        out.push(path.clone());
                    }
                }
                // Gone from where it was made: moved, or removed.
                _ => unnamed += 1,
            }
        }
        out.sort();
        out.dedup();
        (out, unnamed)
    }

    fn candidate(&self, dir: &OwnedFd) {
        let Ok(st) = fstat(dir) else { return };
        let id = (st.st_dev, st.st_ino);
        let mut c = lock(&self.candidates);
        if c.known.contains(&id) {
            return;
        }
        if c.known.len() >= MAX_CANDIDATES {
            c.dropped += 1;
            return;
        }
        c.known.insert(id);
        if c.tracked.len() < MAX_TRACKED {
            if let Ok(fd) = openat2(dir.as_raw_fd(), c".", libc::O_PATH | libc::O_DIRECTORY, 0) {
                c.tracked.push(fd);
                return;
            }
        }
        match std::fs::read_link(format!("/proc/self/fd/{}", dir.as_raw_fd())) {
            Ok(path) => c.by_path.push((id, path)),
            Err(_) => c.dropped += 1,
        }
    }

    /// Whether `dir` is a git directory the run did not make.
    fn old_git_dir(&self, dir: &OwnedFd) -> bool {
        is_git_dir(dir) && fstat(dir).is_ok_and(|st| !self.made_inode(&st))
    }

    fn made_inode(&self, st: &libc::stat) -> bool {
        lock(&self.made).contains(&(st.st_dev, st.st_ino))
    }

    /// Whether `dir` (canonical path `path`) lies beneath the `hooks` of a
    /// git directory the run did not make. Each `hooks` above it is opened
    /// by its path and `dir` reached again from it, so a concurrent rename
    /// cannot pass off one directory for another.
    fn beneath_hooks(&self, dir: &OwnedFd, path: &Path) -> bool {
        if !path.components().any(|c| c.as_os_str() == "hooks") {
            return false;
        }
        let Ok(target) = fstat(dir) else { return false };
        let mut below: Vec<&OsStr> = Vec::new();
        for ancestor in path.ancestors() {
            if ancestor.file_name() == Some(OsStr::new("hooks")) {
                let Some(git) = ancestor.parent().and_then(|g| open_path(g).ok()) else {
                    return true;
                };
                match descend(
                    &git,
                    std::iter::once(OsStr::new("hooks")).chain(below.iter().rev().copied()),
                ) {
                    Some(st) if (st.st_dev, st.st_ino) == (target.st_dev, target.st_ino) => {
                        if self.old_git_dir(&git) {
                            return true;
                        }
                    }
                    // Moved while checked: refused, as a change would be.
                    _ => return true,
                }
            }
            if let Some(name) = ancestor.file_name() {
                below.push(name);
            }
        }
        false
    }
}

/// Whether `dir` holds what makes a git directory: `HEAD`, and `objects` and
/// `refs` directories or a `commondir` file (a linked worktree's).
pub(crate) fn is_git_dir(dir: &OwnedFd) -> bool {
    let kind = |name: &CStr| {
        fstatat_nofollow(dir, name)
            .ok()
            .map(|st| st.st_mode & libc::S_IFMT)
    };
    let is_dir = |name: &CStr| kind(name) == Some(libc::S_IFDIR);
    kind(c"HEAD").is_some()
        && ((is_dir(c"objects") && is_dir(c"refs")) || kind(c"commondir") == Some(libc::S_IFREG))
}

/// The stat of `name` in `dir` (a trailing slash ignored), no symlink followed.
fn entry_stat(dir: &OwnedFd, name: &[u8]) -> Option<libc::stat> {
    let name = name.strip_suffix(b"/").unwrap_or(name);
    fstatat_nofollow(dir, &CString::new(name).ok()?).ok()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// An `O_PATH` fd on the directory at the absolute `path`, no final symlink
/// followed.
fn open_path(path: &Path) -> std::io::Result<OwnedFd> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    openat2(
        libc::AT_FDCWD,
        &c,
        libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW,
        0,
    )
}

/// The stat of what `names` reach from `from`, no symlink followed.
fn descend<'a>(from: &OwnedFd, names: impl Iterator<Item = &'a OsStr>) -> Option<libc::stat> {
    let mut at = from.try_clone().ok()?;
    for name in names {
        let c = CString::new(name.as_bytes()).ok()?;
        at = openat2(at.as_raw_fd(), &c, libc::O_PATH | libc::O_NOFOLLOW, 0).ok()?;
    }
    fstat(&at).ok()
}
