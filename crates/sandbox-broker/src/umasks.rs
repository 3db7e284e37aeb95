//! The callers' umasks, kept between the files the broker creates for them.
//!
//! A create applies the caller's umask, which only `/proc/TID/status` tells
//! (a read that costs more than the create). Under fixed credentials the
//! filter also routes `umask` here (its table row's handler is `Handler::Umask`), which the
//! broker notes and lets continue, so a umask read once stays true until a
//! `umask` call is seen:
//!
//! * A `umask` call forgets every umask kept (the caller may share its
//!   umask with other threads and processes, `CLONE_FS`), and until it has
//!   taken effect (its thread makes another call, or shows the new mask) no
//!   umask is kept at all: one read between the answer and the call would
//!   keep the old mask.
//! * A kept umask is used only while the thread it was read from lives: it
//!   is kept with a pidfd taken before the request was validated, and a
//!   thread id the kernel has since given to another thread fails
//!   `pidfd_send_signal(pidfd, 0)`. No pidfd, no keeping.
//! * Every other way a umask changes (`fork`, `exec`, `unshare(CLONE_FS)`)
//!   keeps the thread's mask or makes a new thread, which is read afresh.
//! * A thread id can move to another live thread: a thread calling `execve`
//!   takes over its group leader's id (`de_thread`, fs/exec.c), and the
//!   leader's pidfd then refers to it. That is harmless only because every
//!   thread of a group shares one umask: the filter refuses
//!   `clone(CLONE_THREAD)` without `CLONE_FS` whenever it routes `umask`
//!   (and `unshare`), see sandbox-landlock's `tests/it/umask_threads.rs`.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd};

use crate::caller::Caller;

/// Threads whose umask is kept, at most: each holds a pidfd open in the
/// runner. When full, the threads that ended are forgotten (all, if that
/// frees too little).
const MAX_KEPT: usize = 64;

#[derive(Default)]
pub(crate) struct Umasks {
    kept: HashMap<i32, (OwnedFd, u32)>,
    /// `umask` calls let continue that may not have taken effect yet:
    /// (thread, the mask it sets).
    settling: Vec<(i32, u32)>,
}

impl Umasks {
    /// Thread `tid` calls `umask(mask)`, answered with "continue".
    pub(crate) fn changing(&mut self, tid: i32, mask: u32) {
        self.kept.clear();
        self.settling.retain(|&(t, _)| t != tid);
        self.settling.push((tid, mask & 0o777));
    }

    /// The umask kept for `tid`, whose request is pending: `None` when it
    /// must be read. Call it before the request is validated: a kept pidfd
    /// alive then is the requester's, as no two live threads share an id.
    pub(crate) fn lookup(&mut self, tid: i32) -> Option<u32> {
        // A thread making this call has finished its earlier umask call.
        self.settling.retain(|&(t, _)| t != tid);
        if !self.settling.is_empty() {
            self.settle();
            if !self.settling.is_empty() {
                return None;
            }
        }
        match self.kept.get(&tid) {
            Some((pidfd, mask)) if alive(pidfd) => Some(*mask),
            Some(_) => {
                self.kept.remove(&tid);
                None
            }
            None => None,
        }
    }

    /// Keeps `mask`, just read for `tid`, with the requester's `pidfd`
    /// (opened before its request was validated).
    pub(crate) fn keep(&mut self, tid: i32, pidfd: Option<&OwnedFd>, mask: u32) {
        if !self.settling.is_empty() {
            return;
        }
        let Some(pidfd) = pidfd.and_then(|p| p.try_clone().ok()) else {
            return;
        };
        if self.kept.len() >= MAX_KEPT {
            self.kept.retain(|_, (pidfd, _)| alive(pidfd));
            if self.kept.len() >= MAX_KEPT / 2 {
                self.kept.clear();
            }
        }
        self.kept.insert(tid, (pidfd, mask));
    }

    /// Drops the `umask` calls that have taken effect (their thread shows the
    /// mask it set) or whose thread is gone.
    fn settle(&mut self) {
        self.settling.retain(|&(tid, mask)| {
            Caller::open(tid)
                .and_then(|c| c.umask())
                .is_ok_and(|now| now != mask)
        });
    }
}

/// Whether the thread `pidfd` refers to still runs (or is a zombie holding
/// its id).
fn alive(pidfd: &OwnedFd) -> bool {
    // SAFETY: signal 0 with no siginfo only checks that the target exists
    // and may be signalled.
    unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            0,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        ) == 0
    }
}
