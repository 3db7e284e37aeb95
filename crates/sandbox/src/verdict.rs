//! The enforcement self-test every real backend passes before it is handed out,
//! and the per-boot cache that lets a CLI launch skip it.
//!
//! The verdict is cached in-process by `sandbox-probe`. Across processes, a
//! *passing* verdict is remembered in a file in one place per user that no
//! environment variable moves: `/run/user/<euid>/sandbox` (the runtime
//! directory systemd-logind makes for each user), and `/run/sandbox` for
//! root. `$XDG_RUNTIME_DIR` is not consulted: a later run may be started
//! with it pointing at a directory an earlier run could write, and would
//! then trust a verdict that run forged. The file is keyed by boot id,
//! kernel release, backend and the identity of the running binary (device,
//! inode, size, mtime and ctime: hashing the binary would cost more than the
//! probes it saves). It is trusted only when it and its directories belong
//! to this user (the base may be root's) and are writable by no one else,
//! when it has one name (a hard link is a way in that no path shows),
//! and never when it lies beneath a write path of the run; and no confined
//! run can write it: the runner write-denies the cache directory in every
//! run whose write paths contain it ([`crate::trusted`]). Without that
//! directory (no login session, as in most containers) the verdict lives in
//! the `.cache` directory of the user's passwd home (never `$HOME` or
//! `$XDG_CACHE_HOME`), which is trusted state in the same way: every run whose
//! write paths reach it write-denies it. Without a home of the user's own
//! there is no cross-process cache and every launch runs the self-test.
//! Failing verdicts are never cached.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use sandbox_core::{Backend, SandboxUnavailable};

/// Checks that `backend` really enforces on this host.
///
/// `writable` are the write paths of the run about to start (`None` when
/// unknown, which disables the cross-process cache). Audit-only backends are
/// not probed: they claim nothing.
pub(crate) fn check(
    backend: &dyn Backend,
    writable: Option<&[PathBuf]>,
) -> Result<(), SandboxUnavailable> {
    if !backend.enforces() {
        return Ok(());
    }
    let cache = writable.and_then(|w| VerdictCache::locate(backend.name(), w));
    if cache.as_ref().is_some_and(VerdictCache::holds_pass) {
        return Ok(());
    }
    // The probes' scratch lies in the cache's directory, which every run
    // write-denies (`crate::trusted`): no confined run can tamper with it.
    sandbox_probe::gate_in(backend, cache_dir().as_deref())
        .map_err(|failure| failure.to_unavailable())?;
    if let Some(cache) = cache {
        cache.record_pass();
    }
    Ok(())
}

struct VerdictCache {
    file: PathBuf,
    key: String,
}

impl VerdictCache {
    fn locate(backend: &str, writable: &[PathBuf]) -> Option<Self> {
        // SAFETY: geteuid has no preconditions.
        let euid = unsafe { libc::geteuid() };
        let base = base_dir(euid)?;
        if !base.exists() && base.ends_with(".cache") {
            // The passwd home's cache directory, made as XDG tools make it,
            // only in a home that is the user's own.
            let home = base.parent().filter(|h| private_dir(h, euid, false))?;
            let _ = fs::DirBuilder::new()
                .mode(0o700)
                .create(home.join(".cache"));
        }
        Self::locate_in(&base, backend, writable)
    }

    fn locate_in(base: &Path, backend: &str, writable: &[PathBuf]) -> Option<Self> {
        // SAFETY: geteuid has no preconditions.
        let euid = unsafe { libc::geteuid() };
        let base = fs::canonicalize(base).ok()?;
        if !private_dir(&base, euid, true) {
            return None;
        }
        let dir = base.join("sandbox");
        let private = private_dir(&dir, euid, false)
            || (fs::DirBuilder::new().mode(0o700).create(&dir).is_ok()
                && private_dir(&dir, euid, false));
        if !private
            || writable
                .iter()
                .any(|w| dir.starts_with(w) || w.starts_with(&dir))
        {
            return None;
        }
        let exe = std::env::current_exe().ok()?;
        Some(Self {
            // One file per binary path, so two installed builds do not evict
            // each other's verdict on every alternate launch.
            file: dir.join(format!("gate-{backend}-{:016x}", path_hash(&exe))),
            key: cache_key(backend, &exe)?,
        })
    }

    fn holds_pass(&self) -> bool {
        let Ok(file) = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&self.file)
        else {
            return false;
        };
        let Ok(meta) = file.metadata() else {
            return false;
        };
        // SAFETY: geteuid has no preconditions.
        let euid = unsafe { libc::geteuid() };
        // One name only: a hard link elsewhere (a write path of some run)
        // would let that run rewrite the verdict (see `crate::trusted`).
        if !meta.is_file() || meta.nlink() != 1 || meta.uid() != euid || meta.mode() & 0o022 != 0 {
            return false;
        }
        let expected = self.expected();
        read_small(file, expected.len() + 1).is_some_and(|text| text == expected.as_bytes())
    }

    fn record_pass(&self) {
        let tmp = self
            .file
            .with_extension(format!("tmp{}", std::process::id()));
        let written = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)
            .and_then(|mut f| f.write_all(self.expected().as_bytes()));
        if written.is_err() || fs::rename(&tmp, &self.file).is_err() {
            let _ = fs::remove_file(&tmp);
        }
    }

    fn expected(&self) -> String {
        format!("{}\npassed\n", self.key)
    }
}

/// Where verdicts live: the user's runtime directory under `/run/user`, or
/// `/run` for root; never a place named by the environment.
///
/// Without a runtime directory (no login session, as in most containers),
/// the `.cache` directory of the user's passwd home: a place no environment
/// variable moves either, and one every run write-denies as trusted state.
fn base_dir(euid: u32) -> Option<PathBuf> {
    if euid == 0 {
        return Some(PathBuf::from("/run"));
    }
    let runtime = PathBuf::from(format!("/run/user/{euid}"));
    if runtime.is_dir() {
        return Some(runtime);
    }
    crate::trusted::passwd_home_of(euid).map(|home| home.join(".cache"))
}

/// The directory the cross-process verdicts live in (whether or not it
/// exists yet), for the runner to write-deny in runs that could reach it.
pub(crate) fn cache_dir() -> Option<PathBuf> {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    Some(base_dir(euid)?.join("sandbox"))
}

/// A directory is private when it is a real directory owned by `euid` (or by
/// root, for a shared base such as `/run`) that nobody else can write.
fn private_dir(dir: &Path, euid: u32, root_may_own: bool) -> bool {
    fs::symlink_metadata(dir).is_ok_and(|m| {
        m.is_dir() && (m.uid() == euid || (root_may_own && m.uid() == 0)) && m.mode() & 0o022 == 0
    })
}

/// FNV-1a of the path's bytes: a stable file-name suffix (std's hashers make
/// no stability promise across releases).
fn path_hash(path: &Path) -> u64 {
    use std::os::unix::ffi::OsStrExt;
    path.as_os_str()
        .as_bytes()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
}

/// Up to `limit` bytes of `file` in one read (the files read here are tiny;
/// std's `read_to_string` costs three more syscalls on every launch).
fn read_small(mut file: fs::File, limit: usize) -> Option<Vec<u8>> {
    use std::io::Read;
    let mut buf = vec![0; limit];
    let n = file.read(&mut buf).ok()?;
    buf.truncate(n);
    Some(buf)
}

fn kernel_release() -> Option<String> {
    // SAFETY: utsname is plain data; uname fills it.
    let mut uts: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: uname writes into the local above.
    if unsafe { libc::uname(&mut uts) } != 0 {
        return None;
    }
    // SAFETY: uname NUL-terminates the field.
    let release = unsafe { std::ffi::CStr::from_ptr(uts.release.as_ptr()) };
    Some(release.to_string_lossy().into_owned())
}

fn cache_key(backend: &str, exe: &Path) -> Option<String> {
    let boot = read_small(fs::File::open("/proc/sys/kernel/random/boot_id").ok()?, 64)?;
    let kernel = kernel_release()?;
    let exe = fs::metadata(exe).ok()?;
    Some(format!(
        "v1 backend={backend} boot={} kernel={} exe={}:{}:{}:{}.{}:{}.{}",
        String::from_utf8_lossy(&boot).trim(),
        kernel.trim(),
        exe.dev(),
        exe.ino(),
        exe.size(),
        exe.mtime(),
        exe.mtime_nsec(),
        exe.ctime(),
        exe.ctime_nsec()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn base() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700)).unwrap();
        dir
    }

    #[test]
    fn a_recorded_pass_is_trusted_only_when_private() {
        let dir = base();
        let cache = VerdictCache::locate_in(dir.path(), "t", &[]).unwrap();
        assert!(!cache.holds_pass(), "nothing recorded yet");
        cache.record_pass();
        assert!(cache.holds_pass());
        fs::set_permissions(&cache.file, fs::Permissions::from_mode(0o622)).unwrap();
        assert!(
            !cache.holds_pass(),
            "a file others can write is never trusted"
        );
        fs::set_permissions(&cache.file, fs::Permissions::from_mode(0o600)).unwrap();
        fs::write(&cache.file, "v1 backend=t forged\npassed\n").unwrap();
        assert!(!cache.holds_pass(), "a verdict for another key is ignored");
    }

    /// A verdict with a second name (a hard link some run could write
    /// through) is not trusted; the next pass is recorded under a new inode,
    /// which the old link no longer reaches.
    #[test]
    fn a_verdict_with_a_second_name_is_not_trusted() {
        let dir = base();
        let cache = VerdictCache::locate_in(dir.path(), "t", &[]).unwrap();
        cache.record_pass();
        assert!(cache.holds_pass(), "twin: one name");
        let other = dir.path().join("elsewhere");
        fs::hard_link(&cache.file, &other).unwrap();
        assert!(!cache.holds_pass());
        cache.record_pass();
        assert!(cache.holds_pass());
        fs::write(&other, "forged").unwrap();
        assert!(
            cache.holds_pass(),
            "the old name reaches the old inode only"
        );
    }

    #[test]
    fn verdicts_live_where_no_environment_moves_them() {
        assert_eq!(base_dir(0), Some(PathBuf::from("/run")));
        // Without /run/user/UID: the passwd home's .cache, or nowhere.
        let nobody = base_dir(65534);
        assert!(
            nobody
                .as_ref()
                .is_some_and(|b| b.ends_with(".cache") || b.starts_with("/run/user")),
            "{nobody:?}"
        );
        // The integration test `trusted_state::verdict_forged_in_a_runtime_dir`
        // shows that `$XDG_RUNTIME_DIR` does not move it.
        assert!(cache_dir().map_or(true, |d| d.starts_with("/run")));
    }

    #[test]
    fn no_cache_beneath_a_write_path_or_in_a_shared_dir() {
        let dir = base();
        assert!(VerdictCache::locate_in(dir.path(), "t", &[dir.path().to_path_buf()]).is_none());
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o777)).unwrap();
        assert!(VerdictCache::locate_in(dir.path(), "t", &[]).is_none());
    }
}
