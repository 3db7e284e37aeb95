//! Keeps an fd hand-back on one CPU.
//!
//! An fd goes back with `SECCOMP_IOCTL_NOTIF_ADDFD` (`SECCOMP_ADDFD_FLAG_SEND`):
//! the caller installs it in its own context while the broker waits. Both
//! wake-ups of that exchange are plain ones: `seccomp_notify_addfd` wakes the
//! caller with `complete()`, the caller wakes the broker with `complete()`,
//! and `SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP` changes only the notification and
//! `NOTIF_SEND` (kernel/seccomp.c, Linux 6.6+). The scheduler therefore puts
//! the woken caller on an idle CPU, since the broker occupies its own, and the
//! broker on the CPU it slept on: two wake-ups of idle CPUs per brokered
//! `open`. On a virtual machine without halt polling each costs tens of
//! microseconds.
//!
//! [`SameCpu::around`] pins the caller and the broker thread to the CPU the
//! broker runs on (the caller's, after the notification's synchronous
//! wake-up) for the one ioctl, then gives both their masks back. The caller
//! is blocked in its system call throughout; a mask it sets for itself in
//! that window (from another thread) is overwritten. When either mask cannot
//! be read or set (a caller the runner may not reschedule, a CPU outside the
//! caller's mask), the hand-back happens unpinned: pinning only saves time.

use std::mem::{size_of, zeroed};

/// The broker thread's own CPU mask, to return to after each hand-back.
pub(crate) struct SameCpu {
    own: Option<libc::cpu_set_t>,
}

impl SameCpu {
    /// Reads the calling thread's mask.
    pub(crate) fn current() -> Self {
        Self { own: get(0) }
    }

    /// Runs `f` with caller `tid` and this thread pinned to this thread's CPU.
    pub(crate) fn around<T>(&self, tid: i32, f: impl FnOnce() -> T) -> T {
        let Some(own) = &self.own else { return f() };
        // SAFETY: sched_getcpu has no arguments.
        let cpu = unsafe { libc::sched_getcpu() };
        let Ok(cpu) = usize::try_from(cpu) else {
            return f();
        };
        let caller = get(tid).filter(|mask| {
            // SAFETY: CPU_ISSET reads a mask we own; `cpu` is below CPU_SETSIZE
            // (the kernel numbered it).
            cpu < libc::CPU_SETSIZE as usize && unsafe { libc::CPU_ISSET(cpu, mask) }
        });
        let Some(caller) = caller else { return f() };
        // SAFETY: cpu_set_t is plain data.
        let mut one: libc::cpu_set_t = unsafe { zeroed() };
        // SAFETY: `cpu` is below CPU_SETSIZE (checked above).
        unsafe { libc::CPU_SET(cpu, &mut one) };
        if !set(tid, &one) {
            return f();
        }
        let pinned_self = set(0, &one);
        let out = f();
        set(tid, &caller);
        if pinned_self {
            set(0, own);
        }
        out
    }
}

fn get(tid: i32) -> Option<libc::cpu_set_t> {
    // SAFETY: cpu_set_t is plain data.
    let mut mask: libc::cpu_set_t = unsafe { zeroed() };
    // SAFETY: the kernel writes at most size_of::<cpu_set_t>() bytes.
    let rc = unsafe { libc::sched_getaffinity(tid, size_of::<libc::cpu_set_t>(), &mut mask) };
    (rc == 0).then_some(mask)
}

fn set(tid: i32, mask: &libc::cpu_set_t) -> bool {
    // SAFETY: the kernel reads size_of::<cpu_set_t>() bytes of a live mask.
    unsafe { libc::sched_setaffinity(tid, size_of::<libc::cpu_set_t>(), mask) == 0 }
}
