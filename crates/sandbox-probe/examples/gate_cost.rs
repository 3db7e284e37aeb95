//! Prints the cost of the gate's probes against the noop backend: three plain
//! launches of `/bin/sh` (a real backend adds its own prepare and apply cost).
//!
//! Wall-clock time depends on machine load; the children's CPU time does not.
use std::time::Instant;

fn children_cpu_us() -> i64 {
    // SAFETY: getrusage fills the zeroed struct.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) };
    let us = |t: libc::timeval| t.tv_sec * 1_000_000 + t.tv_usec;
    us(u.ru_utime) + us(u.ru_stime)
}

fn main() {
    let backend = sandbox_core::NoopBackend;
    for i in 0..10 {
        let cpu = children_cpu_us();
        let t = Instant::now();
        let _ = sandbox_probe::enforcement_self_test(&backend);
        println!(
            "run {i}: wall {} us, children cpu {} us",
            t.elapsed().as_micros(),
            children_cpu_us() - cpu
        );
    }
}
