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
//! [`SameCpu::pin`] pins the caller and the broker thread to the CPU the
//! broker runs on (the caller's, after the notification's synchronous
//! wake-up) for the `ADDFD` alone, without `SEND`: the caller installs the fd
//! and waits again, [`Pinned::restore`] gives both their masks back while
//! it waits, and only then does `NOTIF_SEND` (a synchronous wake-up) answer
//! it. So the caller never runs its own code pinned, and no mask it sets
//! afterwards can be overwritten (only the caller itself may set its mask:
//! the filter refuses `sched_setaffinity` on any other thread). When either
//! mask cannot be read or set (a caller the runner may not reschedule, a CPU
//! outside the caller's mask), the fd goes back unpinned, `ADDFD` and `SEND`
//! in one step: pinning only saves time.

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

    /// Pins caller `tid` and this thread to this thread's CPU; `None`
    /// (nothing pinned) when that cannot be done.
    pub(crate) fn pin(&self, tid: i32) -> Option<Pinned<'_>> {
        let own = self.own.as_ref()?;
        // SAFETY: sched_getcpu has no arguments.
        let cpu = usize::try_from(unsafe { libc::sched_getcpu() }).ok()?;
        if cpu >= libc::CPU_SETSIZE as usize {
            return None;
        }
        let caller = get(tid)?;
        // SAFETY: CPU_ISSET reads a mask we own; `cpu` is below CPU_SETSIZE.
        if !unsafe { libc::CPU_ISSET(cpu, &caller) } {
            return None;
        }
        // SAFETY: cpu_set_t is plain data.
        let mut one: libc::cpu_set_t = unsafe { zeroed() };
        // SAFETY: `cpu` is below CPU_SETSIZE.
        unsafe { libc::CPU_SET(cpu, &mut one) };
        if !set(tid, &one) {
            return None;
        }
        Some(Pinned {
            tid,
            caller,
            own: set(0, &one).then_some(own),
        })
    }
}

/// A caller and the broker thread pinned to one CPU.
pub(crate) struct Pinned<'a> {
    tid: i32,
    caller: libc::cpu_set_t,
    /// The broker thread's own mask, when it was pinned too.
    own: Option<&'a libc::cpu_set_t>,
}

impl Pinned<'_> {
    /// Gives the caller and the broker thread their masks back.
    pub(crate) fn restore(self) {
        set(self.tid, &self.caller);
        if let Some(own) = self.own {
            set(0, own);
        }
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
