//! The runner's descriptor limit (`RLIMIT_NOFILE`) and the command's.
//!
//! The runner holds descriptors for what it serves a run (the proxy's
//! connections, the broker's work, the resolver): the common soft limit of
//! 1024 runs out long before what those serve is. [`raise_for_runner`]
//! raises the runner's soft limit to its hard limit at start (as Go's
//! runtime does), and records the soft limit it found: every command
//! [`crate::spawn`] starts gets that one back in the child before exec, so
//! `ulimit -n` in the command prints what it printed before the runner
//! (the kernel passes resource limits across fork and exec).

#[cfg(target_os = "linux")]
use std::sync::atomic::{AtomicU64, Ordering};

/// The soft limit the runner started with, [`NOT_SET`] when it did not
/// change it.
#[cfg(target_os = "linux")]
static COMMAND_SOFT: AtomicU64 = AtomicU64::new(NOT_SET);
#[cfg(target_os = "linux")]
const NOT_SET: u64 = u64::MAX - 1;

/// Raises this process's soft `RLIMIT_NOFILE` to its hard limit, recording
/// the soft limit it had for the commands it starts; returns the soft limit
/// in force after. Call it once, first thing, before any thread exists.
/// Linux only (elsewhere it changes nothing and returns the soft limit).
pub fn raise_for_runner() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct passed.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return None;
    }
    #[cfg(target_os = "linux")]
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: limit.rlim_max,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: setrlimit reads the struct passed.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            COMMAND_SOFT.store(limit.rlim_cur, Ordering::SeqCst);
            return Some(limit.rlim_max);
        }
    }
    Some(limit.rlim_cur)
}

/// This process's soft `RLIMIT_NOFILE` now.
pub fn soft_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct passed.
    (unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0).then_some(limit.rlim_cur)
}

/// In a child before exec: gives it back the soft limit the runner started
/// with, when [`raise_for_runner`] raised it. Async-signal-safe (an atomic
/// load and one system call); returns the errno of a failure.
#[cfg(target_os = "linux")]
pub(crate) fn restore_in_child() -> Result<(), i32> {
    let soft = COMMAND_SOFT.load(Ordering::Relaxed);
    if soft == NOT_SET {
        return Ok(());
    }
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit on structs of this frame.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return Err(*libc::__errno_location());
        }
        limit.rlim_cur = soft;
        if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
            return Err(*libc::__errno_location());
        }
    }
    Ok(())
}
