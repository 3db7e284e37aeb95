//! Prints the cost of the gate (two `/bin/sh` launches) against the real
//! Landlock backend and, for comparison, the noop backend.
//!
//! Wall-clock time depends on machine load; the children's CPU time does not.
use std::time::Instant;

fn children_cpu_us() -> i64 {
    // SAFETY: getrusage fills the zeroed struct.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) };
    #[allow(clippy::useless_conversion)] // tv_usec is i64 on Linux, i32 on macOS
    let us = |t: libc::timeval| t.tv_sec * 1_000_000 + i64::from(t.tv_usec);
    us(u.ru_utime) + us(u.ru_stime)
}

fn main() {
    let landlock = sandbox_landlock::LandlockBackend::new().expect("Landlock available");
    let backends: [&dyn sandbox_core::Backend; 2] = [&landlock, &sandbox_core::NoopBackend];
    for backend in backends {
        measure(backend);
    }
}

fn measure(backend: &dyn sandbox_core::Backend) {
    for i in 0..5 {
        let cpu = children_cpu_us();
        let t = Instant::now();
        let report = sandbox_probe::enforcement_self_test(backend);
        println!(
            "{} run {i} (passed: {}): wall {} us, children cpu {} us",
            backend.name(),
            report.passed,
            t.elapsed().as_micros(),
            children_cpu_us() - cpu
        );
    }
}
