//! The approvals file: grants decided interactively, kept across runs.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};

use crate::audit::now_unix_ms;
use crate::grant::{GrantKey, Op, SkillName, Target};

/// The approvals file could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// An I/O step failed.
    #[error("could not {action} the approvals file {path}: {source}")]
    Io {
        /// What was attempted.
        action: &'static str,
        /// The file or folder involved.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// The file exists but is not a valid approvals file. It is left untouched.
    #[error("the approvals file {path} is not valid ({message}); fix or remove it (removing it forgets every stored grant)")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

const VERSION: u32 = 1;

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileFormat {
    version: u32,
    grants: Vec<StoredGrant>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredGrant {
    key: GrantKey,
    granted_at_unix_ms: u64,
}

/// Grants persisted in `<state>/approvals.json`.
///
/// Writes are atomic (temporary file in the same folder, fsync, rename) and
/// serialised between processes by a lock file, so a concurrent run's grants are
/// merged, never lost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalStore {
    path: PathBuf,
    grants: BTreeMap<GrantKey, u64>,
}

impl ApprovalStore {
    /// File name inside the project's state folder.
    pub const FILE_NAME: &'static str = "approvals.json";

    /// Loads `<state_dir>/approvals.json`; a missing file is an empty store.
    pub fn load(state_dir: &Path) -> Result<Self, StoreError> {
        let path = state_dir.join(Self::FILE_NAME);
        let grants = read(&path)?;
        Ok(Self { path, grants })
    }

    /// Every stored key.
    #[cfg(test)]
    fn keys(&self) -> impl Iterator<Item = &GrantKey> {
        self.grants.keys()
    }

    /// The stored key that lets `skill` do `op` on `target`, if any.
    pub fn covering(&self, skill: &SkillName, op: Op, target: &Target) -> Option<&GrantKey> {
        self.grants.keys().find(|k| k.covers(skill, op, target))
    }

    /// Adds `keys` and writes the file, merging grants other processes stored meanwhile.
    pub fn add(&mut self, keys: &[GrantKey]) -> Result<(), StoreError> {
        let dir = self.path.parent().unwrap_or(Path::new("/")).to_path_buf();
        let _lock = lock(&self.path)?;
        let mut merged = read(&self.path)?;
        let now = now_unix_ms();
        for k in keys {
            merged.entry(k.clone()).or_insert(now);
        }
        write_atomic(&self.path, &dir, &merged)?;
        self.grants = merged;
        Ok(())
    }
}

fn io_err<'p>(action: &'static str, path: &'p Path) -> impl FnOnce(io::Error) -> StoreError + 'p {
    move |source| StoreError::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}

/// The stored grants: never through a symlink (`O_NOFOLLOW`), only from a
/// regular file with one name. A second name (a hard link made in some
/// run's write path) would let that run write grants every later run
/// trusts; the file is then refused, not read.
fn read(path: &Path) -> Result<BTreeMap<GrantKey, u64>, StoreError> {
    let corrupt = |message: String| StoreError::Corrupt {
        path: path.to_path_buf(),
        message,
    };
    let mut file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(corrupt("it is a symbolic link".to_owned()))
        }
        Err(e) => return Err(io_err("read", path)(e)),
    };
    let meta = file.metadata().map_err(io_err("read", path))?;
    if !meta.is_file() {
        return Err(corrupt("it is not a regular file".to_owned()));
    }
    if meta.nlink() != 1 {
        return Err(corrupt(format!(
            "it has {} hard links, and a run that may write where another of its names lies \
             could write grants through it; give it one name",
            meta.nlink()
        )));
    }
    let mut text = String::new();
    file.read_to_string(&mut text)
        .map_err(io_err("read", path))?;
    let file: FileFormat = serde_json::from_str(&text).map_err(|e| corrupt(e.to_string()))?;
    if file.version != VERSION {
        return Err(corrupt(format!(
            "version {} is not supported; this build reads version {VERSION}",
            file.version
        )));
    }
    Ok(file
        .grants
        .into_iter()
        .map(|g| (g.key, g.granted_at_unix_ms))
        .collect())
}

fn lock(path: &Path) -> Result<Flock<File>, StoreError> {
    let mut lock_path = path.as_os_str().to_owned();
    lock_path.push(".lock");
    let lock_path = PathBuf::from(lock_path);
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(io_err("create the lock file for", &lock_path))?;
    Flock::lock(file, FlockArg::LockExclusive)
        .map_err(|(_, errno)| io_err("lock", &lock_path)(io::Error::from(errno)))
}

fn write_atomic(
    path: &Path,
    dir: &Path,
    grants: &BTreeMap<GrantKey, u64>,
) -> Result<(), StoreError> {
    let file = FileFormat {
        version: VERSION,
        grants: grants
            .iter()
            .map(|(key, &at)| StoredGrant {
                key: key.clone(),
                granted_at_unix_ms: at,
            })
            .collect(),
    };
    let mut text = serde_json::to_vec_pretty(&file).map_err(|e| StoreError::Corrupt {
        path: path.to_path_buf(),
        message: format!("could not serialise: {e}"),
    })?;
    text.push(b'\n');
    let mut tmp = tempfile::NamedTempFile::new_in(dir)
        .map_err(io_err("create a temporary file for", path))?;
    tmp.write_all(&text)
        .and_then(|()| tmp.as_file().sync_all())
        .map_err(io_err("write", path))?;
    tmp.persist(path)
        .map_err(|e| io_err("replace", path)(e.error))?;
    // The rename is durable only once the folder is synced.
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err("sync the folder of", path))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> GrantKey {
        s.parse().unwrap()
    }

    #[test]
    fn grants_survive_a_reload_and_concurrent_adds_merge() {
        let dir = tempfile::tempdir().unwrap();
        let mut a = ApprovalStore::load(dir.path()).unwrap();
        let mut b = ApprovalStore::load(dir.path()).unwrap();
        assert_eq!(a.keys().count(), 0);
        a.add(&[key("build/file.write/tmp/out")]).unwrap();
        b.add(&[key("lint/network/*")]).unwrap();
        let c = ApprovalStore::load(dir.path()).unwrap();
        let keys: Vec<String> = c.keys().map(ToString::to_string).collect();
        assert_eq!(keys, ["build/file.write/tmp/out", "lint/network/*"]);
        let skill = SkillName::new("build").unwrap();
        let t = Target::path("/tmp/out/x").unwrap();
        assert!(c.covering(&skill, Op::FileWrite, &t).is_some());
        assert!(c.covering(&skill, Op::FileRead, &t).is_none());
        // Only the file and its lock remain: the temporary file was renamed.
        let mut names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["approvals.json", "approvals.json.lock"]);
    }

    /// A symlink or a second name at the approvals file is refused and
    /// left alone; the twin: the same file with one name loads.
    #[test]
    fn a_linked_approvals_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(ApprovalStore::FILE_NAME);
        let real = dir.path().join("elsewhere.json");
        let text = r#"{"version":1,"grants":[{"key":"b/network/*","granted_at_unix_ms":1}]}"#;
        std::fs::write(&real, text).unwrap();
        std::os::unix::fs::symlink(&real, &path).unwrap();
        let err = ApprovalStore::load(dir.path()).unwrap_err().to_string();
        assert!(err.contains("symbolic link"), "{err}");
        std::fs::remove_file(&path).unwrap();
        std::fs::hard_link(&real, &path).unwrap();
        let err = ApprovalStore::load(dir.path()).unwrap_err().to_string();
        assert!(err.contains("2 hard links"), "{err}");
        assert_eq!(std::fs::read_to_string(&real).unwrap(), text);
        std::fs::remove_file(&real).unwrap();
        assert_eq!(ApprovalStore::load(dir.path()).unwrap().keys().count(), 1);
    }

    #[test]
    fn corrupt_file_is_refused_and_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(ApprovalStore::FILE_NAME);
        for bad in [
            "not json",
            r#"{"version":1,"grants":[],"extra":1}"#,
            r#"{"version":2,"grants":[]}"#,
            r#"{"version":1,"grants":[{"key":"x/bogus/*","granted_at_unix_ms":1}]}"#,
        ] {
            std::fs::write(&path, bad).unwrap();
            let err = ApprovalStore::load(dir.path()).unwrap_err().to_string();
            assert!(
                err.contains("approvals.json") && err.contains("not valid"),
                "{err}"
            );
            assert_eq!(std::fs::read_to_string(&path).unwrap(), bad);
        }
    }
}
