//! `apply_in_child` allocates nothing: a counting global allocator in this
//! test binary, read before and after the call in a forked child. The count
//! is per thread (the other tests of the binary allocate in parallel; the
//! forked child has only the thread that forked).
#![cfg(target_os = "linux")]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use crate::common::*;
use sandbox_core::SandboxPolicy;

struct Counting;

thread_local! {
    /// Allocations, deallocations and reallocations by this thread.
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

/// This thread's count so far.
fn allocations() -> usize {
    ALLOCATIONS.with(Cell::get)
}

fn count() {
    // A const-initialised Cell without a destructor: no allocation, and
    // `try_with` cannot fail before the thread's locals are torn down.
    let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count();
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
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
    // SAFETY: the child only reads a thread-local, calls apply_in_child (which
    // is async-signal-safe) and _exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let before = allocations();
        let result = prepared.apply_in_child();
        let after = allocations();
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

    // Positive control: the counter sees this thread's allocation.
    let before = allocations();
    let boxed = std::hint::black_box(Box::new(7u64));
    drop(boxed);
    assert!(allocations() > before);

    assert_eq!(apply_in_forked_child(&prepared), CLEAN);
}
