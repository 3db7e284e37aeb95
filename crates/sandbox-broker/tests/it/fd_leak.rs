//! No fd leaks in the runner after thousands of brokered requests of every
//! outcome. In a process of its own (`isolated`), so no other test opens fds
//! while it counts.
#![cfg(target_os = "linux")]

use crate::common::*;

const ROUNDS: u32 = 1000;

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

#[test]
fn thousands_of_requests_leak_no_fd() {
    if !isolated(module_path!(), "thousands_of_requests_leak_no_fd") {
        return;
    }
    let fx = Fixture::new();
    let inside = cstr(&fx.file(&fx.w.join("f"), 0o644));
    let outside = cstr(&fx.file(&fx.o.join("f"), 0o644));
    let missing = cstr(&fx.w.join("missing"));
    let odir = cstr(&fx.o);
    let before = open_fds();
    let run = confined(fx.rules(&[]), || {
        // SAFETY (child): plain syscalls with live buffers.
        unsafe {
            let fd_in = libc::open(inside.as_ptr(), libc::O_RDONLY);
            let dir_out = libc::open(odir.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY);
            for i in 0..ROUNDS {
                let mode = 0o600 | (i & 0o40);
                let ok = result(libc::chmod(inside.as_ptr(), mode)) == 0
                    && result(libc::chmod(outside.as_ptr(), mode)) == libc::EPERM
                    && result(libc::fchmod(fd_in, mode)) == 0
                    && result(libc::fchmodat(dir_out, c"f".as_ptr(), mode, 0)) == libc::EPERM
                    && result(libc::chmod(missing.as_ptr(), mode)) == libc::ENOENT
                    && result(libc::setxattr(
                        inside.as_ptr(),
                        c"user.k".as_ptr(),
                        b"v".as_ptr().cast(),
                        1,
                        0,
                    )) == 0
                    && result(libc::futimens(fd_in, std::ptr::null())) == 0;
                if !ok {
                    return 1;
                }
            }
            0
        }
    });
    assert_eq!(run.code, 0, "a request got a wrong answer");
    assert_eq!(
        run.log.records.len() as u64 + run.log.omitted,
        7 * ROUNDS as u64
    );
    drop(run);
    assert_eq!(open_fds(), before, "fds leaked in the runner");
    assert_eq!(mode(&fx.o.join("f")), 0o644);

    // Callers killed while their request is pending leak nothing either.
    for _ in 0..50 {
        let mut pid = 0;
        // SAFETY (child): one syscall; it blocks until answered.
        let listener = spawn(
            || result(unsafe { libc::chmod(inside.as_ptr(), 0o600) }),
            &mut pid,
        );
        let broker = sandbox_broker::Broker::start(listener, fx.rules(&[])).unwrap();
        // SAFETY: killing our own child.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        wait(pid);
        assert_eq!(broker.finish().stopped_by_error, None);
    }
    assert_eq!(open_fds(), before, "fds leaked after killed callers");
}
