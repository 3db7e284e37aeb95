//! The run's (or session's) private `TMPDIR`, removed when dropped.
//!
//! The command owns everything in it and may close it to its owner
//! (`chmod 000` a directory, `chmod 500` the directory itself) or make it
//! deeper than any stack: as the same non-root user, without
//! `CAP_DAC_OVERRIDE`, a plain `remove_dir_all` then fails and the
//! directory, with what the run put there, stays in `/tmp`. So it is
//! removed by [`sandbox::runner::remove_tree`] (by fds, no link followed,
//! closed directories opened again, any depth), which says on stderr,
//! escaped, what it could not remove.
//!
//! The runner is no deputy (red team G3): the walk runs on a thread of its
//! own that first empties its capability sets (`capset(2)` acts on the
//! calling thread only, capabilities(7)), so a root runner removes only
//! what its uid could remove without `CAP_DAC_OVERRIDE` or `CAP_FOWNER`,
//! as the confined command (which has no capabilities) could: another
//! user's files the command carried in (by moving a directory of its own
//! above them into the `TMPDIR`) stay, and are named.

use std::io;
use std::path::{Path, PathBuf};

/// A private temporary directory, removed (as above) when dropped.
pub(crate) struct PrivateTmp {
    path: PathBuf,
}

impl PrivateTmp {
    /// A new directory `sandbox-tmp-XXXXXX` in the system's temporary
    /// directory, mode 0700 from the start (tempfile's own default follows
    /// the umask): what the run keeps there is no other user's to read.
    pub(crate) fn new() -> io::Result<PrivateTmp> {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::Builder::new()
            .prefix("sandbox-tmp-")
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir()?;
        Ok(PrivateTmp { path: dir.keep() })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for PrivateTmp {
    fn drop(&mut self) {
        if let Err(e) = without_capabilities(|| sandbox::runner::remove_tree(&self.path)) {
            crate::show::say(&format!(
                "sandbox: the private temporary directory {} could not be removed: {e}",
                self.path.display()
            ));
        }
    }
}

/// Runs `f` on a thread of its own whose effective, permitted and
/// inheritable capability sets are emptied first (`capset(2)` on that
/// thread: the runner's other threads keep theirs); `Err` without calling
/// `f` when they cannot be.
fn without_capabilities<T: Send>(f: impl FnOnce() -> io::Result<T> + Send) -> io::Result<T> {
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("sandbox-tmp-rm".into())
            .spawn_scoped(scope, || {
                sandbox::runner::drop_thread_capabilities()?;
                f()
            })?
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("the removal's thread failed")))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(p: &Path, m: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    }

    /// Closed directories (mode 000 and 0500, the directory itself 0500)
    /// and a mode-000 file are removed; a symlink to a directory outside is
    /// removed, not followed (its target and the target's mode intact).
    /// Root or not (the e2e tests in `tests/tests/it/private_tmp.rs` run the
    /// runner as nobody too).
    #[test]
    fn closed_directories_are_removed_and_links_not_followed() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("keep"), "x").unwrap();
        mode(outside.path(), 0o500);
        let tmp = PrivateTmp::new().unwrap();
        let p = tmp.path().to_path_buf();
        std::fs::create_dir_all(p.join("a/b/c")).unwrap();
        std::fs::write(p.join("a/b/c/f"), "x").unwrap();
        std::fs::write(p.join("a/f0"), "x").unwrap();
        mode(&p.join("a/f0"), 0o000);
        mode(&p.join("a/b/c"), 0o000);
        mode(&p.join("a/b"), 0o500);
        std::os::unix::fs::symlink(outside.path(), p.join("out")).unwrap();
        mode(&p, 0o500);
        drop(tmp);
        assert!(!p.exists(), "{} survived", p.display());
        assert!(outside.path().join("keep").exists());
        assert_eq!(
            std::fs::metadata(outside.path())
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o500
        );
        mode(outside.path(), 0o700);
    }

    /// A tree deeper than the fds `remove_tree` holds (256), closed at the
    /// bottom, is removed too.
    #[test]
    fn a_deep_tree_is_removed() {
        let tmp = PrivateTmp::new().unwrap();
        let p = tmp.path().to_path_buf();
        let mut d = p.clone();
        for _ in 0..(256 * 2 + 10) {
            d.push("d");
        }
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("f"), "x").unwrap();
        mode(&d, 0o000);
        drop(tmp);
        assert!(!p.exists(), "{} survived", p.display());
    }

    /// The removal's thread has no capability left (`CapEff` 0 in its
    /// `/proc/thread-self/status`), root or not; as root it really cannot
    /// override DAC: a 0700 directory of another user (nobody) is not
    /// opened there (EACCES), while the runner's other threads still open
    /// it (the positive control: the sets are per thread).
    #[test]
    #[cfg(target_os = "linux")]
    fn the_removal_thread_cannot_override_dac() {
        let eff = without_capabilities(|| {
            let status = std::fs::read_to_string("/proc/thread-self/status")?;
            Ok(status
                .lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .map(|v| v.trim().to_owned()))
        })
        .unwrap();
        assert_eq!(eff.as_deref(), Some("0000000000000000"));
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let theirs = dir.path().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        std::fs::write(theirs.join("f"), "x").unwrap();
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
        mode(&theirs, 0o700);
        // Control: this thread (root, with its capabilities) reads it.
        assert!(std::fs::read_dir(&theirs).is_ok());
        let denied = without_capabilities(|| Ok(std::fs::read_dir(&theirs).map(drop))).unwrap();
        assert_eq!(
            denied.map_err(|e| e.raw_os_error()),
            Err(Some(libc::EACCES))
        );
        // And the control once more after it: the runner's thread kept its.
        assert!(std::fs::read_dir(&theirs).is_ok());
    }

    /// Twin: a plain directory with files is removed.
    #[test]
    fn a_plain_directory_is_removed() {
        let tmp = PrivateTmp::new().unwrap();
        let p = tmp.path().to_path_buf();
        std::fs::write(p.join("f"), "x").unwrap();
        drop(tmp);
        assert!(!p.exists());
    }
}
