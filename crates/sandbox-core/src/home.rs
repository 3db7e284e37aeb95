//! Where per-user trusted state lives: the user's home as the user database
//! (passwd) gives it, never as the environment (`$HOME`, `$XDG_*`) says.
//!
//! A run's write-denials are computed from its own environment, so state a
//! later run trusts (the operator config, the tool caches, the approvals)
//! must be found by nothing the environment moves: a run started with
//! another `$XDG_CACHE_HOME` (cron, an IDE, `sudo`) whose write paths hold
//! the directory this user's other runs name by that variable could
//! otherwise plant there what those runs trust.
//!
//! Known gap: an account whose passwd home is no usable directory (no
//! entry, missing, not a directory the user owns: `nobody`'s
//! `/nonexistent`) has no such place; its state is located by the
//! environment as before, and its runs started with different environments
//! can plant for each other.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The home directory the user database (NSS) gives `uid`, looked up once
/// per process and user; `None` without an entry or an absolute home.
pub fn passwd_home_of(uid: libc::uid_t) -> Option<PathBuf> {
    use std::sync::Mutex;
    static KNOWN: Mutex<Vec<(libc::uid_t, Option<PathBuf>)>> = Mutex::new(Vec::new());
    let mut known = KNOWN.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, home)) = known.iter().find(|(u, _)| *u == uid) {
        return home.clone();
    }
    let home = passwd_home(uid);
    known.push((uid, home.clone()));
    home
}

/// The passwd home of the effective user when it is a usable place for
/// trusted state: an absolute path naming a directory (after links) that
/// the effective user owns. `None` otherwise (then callers fall back to
/// the environment: the known gap in the module docs).
pub fn trusted_home() -> Option<PathBuf> {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    passwd_home_of(euid).filter(|home| usable(home, euid))
}

/// Whether `home` is a directory `euid` owns.
fn usable(home: &Path, euid: libc::uid_t) -> bool {
    std::fs::metadata(home).is_ok_and(|m| m.is_dir() && m.uid() == euid)
}

/// The home directory the user database (NSS) gives `uid`.
fn passwd_home(uid: libc::uid_t) -> Option<PathBuf> {
    let mut buf = vec![0u8; 1024];
    loop {
        // SAFETY: passwd is plain data that getpwuid_r fills.
        let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: valid out-pointers and a buffer of the given length.
        let rc = unsafe {
            libc::getpwuid_r(
                uid,
                &mut pwd,
                buf.as_mut_ptr().cast(),
                buf.len(),
                &mut result,
            )
        };
        if rc == libc::ERANGE && buf.len() < 1 << 20 {
            buf.resize(buf.len() * 4, 0);
            continue;
        }
        if rc != 0 || result.is_null() || pwd.pw_dir.is_null() {
            return None;
        }
        // SAFETY: getpwuid_r NUL-terminates pw_dir inside `buf`.
        let dir = unsafe { std::ffi::CStr::from_ptr(pwd.pw_dir) };
        let dir = PathBuf::from(OsStr::from_bytes(dir.to_bytes()));
        return dir.is_absolute().then_some(dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trusted_home_ignores_the_environment() {
        // SAFETY: geteuid has no preconditions.
        let euid = unsafe { libc::geteuid() };
        let home = trusted_home();
        if euid == 0 {
            assert_eq!(home.as_deref(), Some(Path::new("/root")));
        }
        if let Some(h) = &home {
            assert_eq!(passwd_home_of(euid).as_ref(), Some(h));
            assert!(usable(h, euid));
        }
        // A directory another user owns is not usable.
        assert!(!usable(Path::new("/"), euid.wrapping_add(1)));
        assert!(!usable(Path::new("/nonexistent/sandbox-home"), euid));
    }
}
