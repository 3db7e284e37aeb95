//! Per-call cost of a brokered chmod against an unbrokered one (printed; run
//! with `--nocapture`). Not a timed assertion: it only checks the calls worked.
#![cfg(target_os = "linux")]

mod common;

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use common::*;

const CALLS: u32 = 5000;

fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime into a live timespec (async-signal-safe).
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Runs CALLS chmods; total ns, or None if one failed (async-signal-safe).
fn chmod_loop(path: &std::ffi::CStr) -> Option<u64> {
    let start = now_ns();
    for i in 0..CALLS {
        // SAFETY: one syscall.
        if unsafe { libc::chmod(path.as_ptr(), 0o600 | (i & 0o40)) } != 0 {
            return None;
        }
    }
    Some(now_ns() - start)
}

#[test]
fn brokered_chmod_cost() {
    let fx = Fixture::new();
    let f = cstr(&fx.file(&fx.w.join("f"), 0o644));
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two fds.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: fresh fds.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let wfd = w.as_raw_fd();
    let run = confined(fx.rules(&[]), || match chmod_loop(&f) {
        Some(ns) => {
            // SAFETY (child): write 8 bytes from a live buffer.
            unsafe { libc::write(wfd, (&ns as *const u64).cast(), 8) };
            0
        }
        None => 1,
    });
    drop(w);
    assert_eq!(run.code, 0);
    let mut buf = [0u8; 8];
    // SAFETY: read into a live 8-byte buffer.
    assert_eq!(
        unsafe { libc::read(r.as_raw_fd(), buf.as_mut_ptr().cast(), 8) },
        8
    );
    let brokered = u64::from_ne_bytes(buf) / u64::from(CALLS);
    let plain = chmod_loop(&f).expect("unbrokered chmod works") / u64::from(CALLS);
    assert_eq!(
        run.log.performed().count() as u64 + run.log.omitted,
        u64::from(CALLS)
    );
    println!(
        "chmod per call: brokered {brokered} ns, unbrokered {plain} ns ({CALLS} calls, {} build)",
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
    );
}
