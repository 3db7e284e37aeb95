//! The pipes the splice relays hold, bounded for the whole process.
//!
//! The kernel accounts every pipe's buffer slots (one page each) to the
//! user that created it, across the host: once a user's pipes account more
//! than `fs.pipe-user-pages-soft` (16384 pages by default), every pipe a
//! process of that user without `CAP_SYS_RESOURCE` creates afterwards gets
//! 2 slots (8 KiB, not 64 KiB), and past `fs.pipe-user-pages-hard` (when
//! set) none at all (pipe(7), "/proc/sys/fs/pipe-user-pages-soft"). The
//! commands a runner starts have no capabilities, so a proxy that grew a
//! pipe to 1 MiB (256 slots) for each direction of each tunnel put the user
//! over the soft limit at 32 silent tunnels: a kept command holding
//! thousands shrank every later pipe of every run of its user on the host
//! (a program writing 60000 bytes into its own pipe before reading it then
//! waited forever). Now a relay takes a pipe only once its source has
//! something to move (a silent connection holds none, see
//! `relay::splice_loop`), and only within a [`Lease`] on the process's
//! share: an eighth of the soft limit (2048 pages by default), 1 MiB pipes
//! while at most half of it is taken, 64 KiB ones for the rest; past it a
//! relay copies through a buffer of its own (the bytes are the same).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Slots (pages) of a large splice pipe: 1 MiB with 4 KiB pages.
const LARGE: usize = 256;

/// Slots of a pipe at the kernel's default size (`PIPE_DEF_BUFFERS`).
const SMALL: usize = 16;

/// The soft limit assumed when `/proc/sys/fs/pipe-user-pages-soft` cannot be
/// read or says 0 (no limit): the kernel's default.
const DEFAULT_SOFT: usize = 16384;

/// The part of the user's soft limit one process's relays may hold: an
/// eighth.
const SHARE_DIVISOR: usize = 8;

/// Slots the process's splice pipes hold now.
static HELD: AtomicUsize = AtomicUsize::new(0);

/// A place for one splice pipe in the process's share, given back when
/// dropped (drop it after the pipe is closed).
#[derive(Debug)]
pub(crate) struct Lease {
    slots: usize,
    held: &'static AtomicUsize,
}

impl Lease {
    /// The size to ask for with `F_SETPIPE_SZ`, or `None` to leave the pipe
    /// at the kernel's default.
    pub(crate) fn grow_to(&self) -> Option<usize> {
        (self.slots > SMALL).then(|| self.slots * page_size())
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.held.fetch_sub(self.slots, Ordering::AcqRel);
    }
}

/// A lease on the process's share, or `None` when it is all taken (the
/// relay copies then).
pub(crate) fn take() -> Option<Lease> {
    take_from(&HELD, share())
}

/// A large pipe's place while the taken part stays within half of `share`,
/// else a default pipe's while it stays within `share`, else nothing.
fn take_from(held: &'static AtomicUsize, share: usize) -> Option<Lease> {
    let mut now = held.load(Ordering::Acquire);
    loop {
        let slots = if now + LARGE <= share / 2 {
            LARGE
        } else if now + SMALL <= share {
            SMALL
        } else {
            return None;
        };
        match held.compare_exchange_weak(now, now + slots, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Some(Lease { slots, held }),
            Err(seen) => now = seen,
        }
    }
}

/// The process's share in slots, read once.
fn share() -> usize {
    static SHARE: OnceLock<usize> = OnceLock::new();
    *SHARE.get_or_init(|| {
        let soft = std::fs::read_to_string("/proc/sys/fs/pipe-user-pages-soft")
            .ok()
            .and_then(|s| s.trim().parse::<usize>().ok())
            .filter(|&n| n > 0)
            .unwrap_or(DEFAULT_SOFT);
        soft / SHARE_DIVISOR
    })
}

/// The page size (one pipe slot), 4096 where it cannot be read.
fn page_size() -> usize {
    // SAFETY: sysconf reads a constant of the system.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).ok().filter(|&n| n > 0).unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counter() -> &'static AtomicUsize {
        Box::leak(Box::new(AtomicUsize::new(0)))
    }

    /// A share of 2048 slots gives four 1 MiB places (half of it), then
    /// sixty-four default ones, then none; twin: a place given back is
    /// taken again, and with everything given back nothing is held.
    #[test]
    fn the_share_bounds_the_pipes_and_a_lease_gives_its_place_back() {
        let held = counter();
        let mut leases = Vec::new();
        while let Some(lease) = take_from(held, 2048) {
            leases.push(lease);
            assert!(leases.len() <= 68, "more places than the share holds");
        }
        let large = leases.iter().filter(|l| l.grow_to().is_some()).count();
        assert_eq!((large, leases.len()), (4, 68));
        assert_eq!(held.load(Ordering::Acquire), 2048);
        assert!(take_from(held, 2048).is_none());

        // A default pipe's place given back: one default place again.
        let small = leases.pop().unwrap();
        assert!(small.grow_to().is_none());
        drop(small);
        let again = take_from(held, 2048).expect("a place given back is free");
        assert!(again.grow_to().is_none());
        assert!(take_from(held, 2048).is_none());

        drop(again);
        leases.clear();
        assert_eq!(held.load(Ordering::Acquire), 0);
        // Everything given back: a large place first again.
        assert!(take_from(held, 2048).unwrap().grow_to().is_some());
    }

    /// A share smaller than a large pipe still gives default ones.
    #[test]
    fn a_small_share_gives_default_pipes_only() {
        let held = counter();
        let a = take_from(held, 40).unwrap();
        let b = take_from(held, 40).unwrap();
        assert!(a.grow_to().is_none() && b.grow_to().is_none());
        assert!(take_from(held, 40).is_none());
    }
}
