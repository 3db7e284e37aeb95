//! The syscalls made in the child between `fork` and `exec`.
//!
//! Everything here is a raw syscall on pre-computed data: no allocation, no
//! locks, no panics. Errors are raw errno values. The landlock crate's
//! `RulesetCreated::restrict_self` consumes its ruleset and builds status
//! values, so the restrict step is a raw `landlock_restrict_self` on the fd
//! the crate created in the parent.

use std::os::fd::RawFd;

fn errno() -> i32 {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() }
}

/// `prctl(PR_SET_NO_NEW_PRIVS, 1)`.
pub(crate) fn set_no_new_privs() -> Result<(), i32> {
    // SAFETY: plain prctl with integer arguments.
    let rc = unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
    if rc == 0 {
        Ok(())
    } else {
        Err(errno())
    }
}

/// Empties the bounding and ambient sets, then the effective, permitted and
/// inheritable sets, so neither this process nor what it executes (even as
/// uid 0) holds a capability.
pub(crate) fn drop_capabilities() -> Result<(), i32> {
    for cap in 0..64 {
        // SAFETY: plain prctl with integer arguments.
        let rc = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) };
        if rc != 0 {
            match errno() {
                libc::EINVAL => break, // past the kernel's last capability
                e => return Err(e),
            }
        }
    }
    // SAFETY: plain prctl with integer arguments.
    let rc = unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        )
    };
    if rc != 0 {
        return Err(errno());
    }
    sandbox_seccomp::caps::set(sandbox_seccomp::caps::Caps::NONE)
}

/// `landlock_restrict_self(ruleset_fd, 0)`.
pub(crate) fn restrict_self(ruleset_fd: RawFd) -> Result<(), i32> {
    // SAFETY: integer arguments only.
    let rc = unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset_fd, 0u32) };
    if rc == 0 {
        Ok(())
    } else {
        Err(errno())
    }
}

/// Hard and soft `RLIMIT_CORE` of 0: the kernel writes no core file for
/// this process or what it runs (the command holds no `CAP_SYS_RESOURCE`
/// to raise a hard limit again, setrlimit(2)).
pub(crate) fn forbid_core_dumps() -> Result<(), i32> {
    let zero = libc::rlimit64 {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: prlimit64 on the calling process with a valid new limit.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_prlimit64,
            0,
            libc::RLIMIT_CORE,
            &zero as *const libc::rlimit64,
            std::ptr::null_mut::<libc::rlimit64>(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(errno())
    }
}

/// Whether the calling process holds any capability (read in the parent).
pub(crate) fn holds_capabilities() -> std::io::Result<bool> {
    sandbox_seccomp::caps::get()
        .map(|caps| !caps.is_empty())
        .map_err(std::io::Error::from_raw_os_error)
}
