//! `apply_in_child` allocates nothing: a counting global allocator in this
//! test binary, read before and after the call in a forked child.
#![cfg(target_os = "linux")]

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use common::*;
use sandbox_core::SandboxPolicy;

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::SeqCst);
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        ALLOCATIONS.fetch_add(1, Ordering::SeqCst);
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::SeqCst);
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Child exit codes.
const CLEAN: i32 = 0;
const ALLOCATED: i32 = 1;
const APPLY_FAILED: i32 = 2;

/// Forks; the child applies `prepared` and exits with a code saying whether
/// it allocated or failed. Returns the child's exit code.
fn apply_in_forked_child(prepared: &sandbox_landlock::PreparedLandlock) -> i32 {
    // SAFETY: the child only reads an atomic, calls apply_in_child (which
    // is async-signal-safe) and _exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let before = ALLOCATIONS.load(Ordering::SeqCst);
        let result = prepared.apply_in_child();
        let after = ALLOCATIONS.load(Ordering::SeqCst);
        let code = match (result, after == before) {
            (Err(_), _) => APPLY_FAILED,
            (Ok(()), false) => ALLOCATED,
            (Ok(()), true) => CLEAN,
        };
        // SAFETY: _exit is async-signal-safe and allowed by the filter.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(rc, pid);
    assert!(
        libc::WIFEXITED(status),
        "child did not exit normally: {status:#x}"
    );
    libc::WEXITSTATUS(status)
}

#[test]
fn apply_in_child_allocates_nothing() {
    let t = temp();
    let deny = t.path.join("w/.git");
    std::fs::create_dir_all(&deny).unwrap();
    let policy = resolve(SandboxPolicy {
        network: false,
        write_paths: vec![path_str(&t.path.join("w"))],
        write_deny_paths: vec![path_str(&deny)],
        read_deny_paths: vec![path_str(&t.path.join("secret"))],
        deny_subprocess: true,
        ..Default::default()
    });
    let prepared = sandbox_landlock::prepare(&policy).expect("prepare");

    // Positive control: the counter sees an allocation.
    let before = ALLOCATIONS.load(Ordering::SeqCst);
    let boxed = std::hint::black_box(Box::new(7u64));
    drop(boxed);
    assert!(ALLOCATIONS.load(Ordering::SeqCst) > before);

    assert_eq!(apply_in_forked_child(&prepared), CLEAN);
}
