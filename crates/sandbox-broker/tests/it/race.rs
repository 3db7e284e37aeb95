//! A symlink inside the write path is swapped between an inside and an outside
//! target while the confined process chmods through it in a loop: the outside
//! file's mode never changes.
#![cfg(target_os = "linux")]

use std::ffi::CString;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::common::*;
use sandbox_broker::BrokerDecision;

/// Upper bound on iterations; the child stops as soon as it has seen both outcomes often.
const MAX_ITERATIONS: u32 = 200_000;
const WANT_EACH: u32 = 200;

fn exchange(a: &CString, b: &CString) {
    // SAFETY: renameat2 with two live paths.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    assert_eq!(rc, 0, "renameat2(RENAME_EXCHANGE)");
}

/// The child chmods `via` until it saw WANT_EACH successes and refusals;
/// exit 0 when it did, 1 when MAX_ITERATIONS ran out, 2 on an unexpected errno.
fn chmod_loop(via: &CString) -> impl FnOnce() -> i32 + '_ {
    move || {
        let (mut ok, mut refused) = (0u32, 0u32);
        for i in 0..MAX_ITERATIONS {
            let mode = if i % 2 == 0 { 0o600 } else { 0o640 };
            // SAFETY (child): one syscall.
            match result(unsafe { libc::chmod(via.as_ptr(), mode) }) {
                0 => ok += 1,
                libc::EPERM => refused += 1,
                _ => return 2,
            }
            if ok >= WANT_EACH && refused >= WANT_EACH {
                return 0;
            }
        }
        1
    }
}

fn race(fx: &Fixture, link: &Path, swap_a: &Path, swap_b: &Path, inside: &Path, outside: &Path) {
    let (a, b) = (cstr(swap_a), cstr(swap_b));
    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicU64::new(0));
    let swapper = {
        let (stop, swaps) = (stop.clone(), swaps.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                exchange(&a, &b);
                swaps.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let via = cstr(link);
    let run = confined(fx.rules(&[]), chmod_loop(&via));
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();

    assert_eq!(mode(outside), 0o644, "the outside file's mode changed");
    assert_eq!(run.code, 0, "the child did not see both outcomes");
    assert!(swaps.load(Ordering::Relaxed) > 0);
    assert!(
        mode(inside) == 0o600 || mode(inside) == 0o640,
        "positive control"
    );
    let performed = run.log.performed().count();
    let refused = run.log.refusals().count();
    // The child counted both outcomes (exit 0); the log keeps only the first
    // BrokerLog::MAX_RECORDS answers, so it is checked for kinds, not counts.
    assert!(run.log.records.iter().all(|r| matches!(
        r.decision,
        BrokerDecision::Performed | BrokerDecision::Refused { .. }
    )));
    let mut reasons = std::collections::BTreeMap::new();
    for r in run.log.refusals() {
        if let BrokerDecision::Refused { reason } = &r.decision {
            *reasons.entry(format!("{reason:?}")).or_insert(0) += 1;
        }
    }
    println!(
        "race via {}: {performed} performed, {refused} refused {reasons:?}, {} swaps",
        link.display(),
        swaps.load(Ordering::Relaxed)
    );
}

#[test]
fn swapping_a_file_symlink_never_reaches_outside() {
    let fx = Fixture::new();
    let inside = fx.file(&fx.w.join("in"), 0o644);
    let outside = fx.file(&fx.o.join("out"), 0o644);
    std::os::unix::fs::symlink(&inside, fx.w.join("link")).unwrap();
    std::os::unix::fs::symlink(&outside, fx.w.join("spare")).unwrap();
    race(
        &fx,
        &fx.w.join("link"),
        &fx.w.join("link"),
        &fx.w.join("spare"),
        &inside,
        &outside,
    );
}

#[test]
fn swapping_a_directory_symlink_never_reaches_outside() {
    let fx = Fixture::new();
    std::fs::create_dir(fx.w.join("sub")).unwrap();
    let inside = fx.file(&fx.w.join("sub/f"), 0o644);
    let outside = fx.file(&fx.o.join("f"), 0o644);
    std::os::unix::fs::symlink(fx.w.join("sub"), fx.w.join("dir")).unwrap();
    std::os::unix::fs::symlink(&fx.o, fx.w.join("spare")).unwrap();
    race(
        &fx,
        &fx.w.join("dir/f"),
        &fx.w.join("dir"),
        &fx.w.join("spare"),
        &inside,
        &outside,
    );
}
