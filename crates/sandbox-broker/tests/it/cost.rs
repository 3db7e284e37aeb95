//! Per-call cost of a brokered chmod against an unbrokered one (printed; run
//! with `--nocapture`). Not a timed assertion: it only checks the calls worked.
#![cfg(target_os = "linux")]

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::common::*;

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

const FILES: usize = 2000;

/// Creates (or, with `names` all equal, rewrites) each file: open(O_CREAT |
/// O_TRUNC), a 64-byte write, close. Total ns, or None if one failed
/// (async-signal-safe).
fn create_loop(names: &[std::ffi::CString]) -> Option<u64> {
    let data = [b'x'; 64];
    let start = now_ns();
    for name in names {
        // SAFETY: open, write, close with live buffers.
        unsafe {
            let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC;
            let fd = libc::open(name.as_ptr(), flags, 0o644);
            if fd < 0 || libc::write(fd, data.as_ptr().cast(), 64) != 64 {
                return None;
            }
            libc::close(fd);
        }
    }
    Some(now_ns() - start)
}

/// ns per call of `create_loop` in a child under the entry filter (deny
/// paths beneath W, so writing opens go to the broker).
fn brokered_create(fx: &Fixture, names: &[std::ffi::CString]) -> (u64, sandbox_broker::BrokerLog) {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two fds.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: fresh fds.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let wfd = w.as_raw_fd();
    let run = confined_entries(fx.rules(&[".git/hooks", ".bashrc"]), || {
        match create_loop(names) {
            Some(ns) => {
                // SAFETY (child): write 8 bytes from a live buffer.
                unsafe { libc::write(wfd, (&ns as *const u64).cast(), 8) };
                0
            }
            None => 1,
        }
    });
    drop(w);
    assert_eq!(run.code, 0, "{}", run.log.explain(5));
    let mut buf = [0u8; 8];
    // SAFETY: read into a live 8-byte buffer.
    assert_eq!(
        unsafe { libc::read(r.as_raw_fd(), buf.as_mut_ptr().cast(), 8) },
        8
    );
    (u64::from_ne_bytes(buf) / names.len() as u64, run.log)
}

#[test]
fn brokered_create_write_close_cost() {
    let fx = Fixture::new();
    for d in ["b", "p"] {
        std::fs::create_dir(fx.w.join(d)).unwrap();
    }
    let names = |dir: &str| -> Vec<std::ffi::CString> {
        (0..FILES)
            .map(|i| cstr(&fx.w.join(format!("{dir}/f{i:05}"))))
            .collect()
    };
    let same = |dir: &str| vec![cstr(&fx.w.join(format!("{dir}/same"))); FILES];
    let (created, log) = brokered_create(&fx, &names("b"));
    assert_eq!(
        log.performed().count() as u64 + log.omitted,
        FILES as u64,
        "every open was brokered"
    );
    let (rewritten, _) = brokered_create(&fx, &same("b"));
    let plain_created = create_loop(&names("p")).expect("bare create") / FILES as u64;
    let plain_rewritten = create_loop(&same("p")).expect("bare rewrite") / FILES as u64;
    assert_eq!(
        std::fs::read_dir(fx.w.join("b")).unwrap().count(),
        FILES + 1
    );
    let us = |ns: u64| ns as f64 / 1000.0;
    println!(
        "create+write+close per file: brokered {:.1} µs, bare {:.1} µs; rewrite (O_TRUNC): brokered {:.1} µs, bare {:.1} µs ({FILES} files, {} build)",
        us(created),
        us(plain_created),
        us(rewritten),
        us(plain_rewritten),
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
    );
}

const CONNECTS: u32 = 2000;

/// CONNECTS times: a new blocking socket of `domain`, connect (timed), close.
/// ns spent in connect, or None if one failed (async-signal-safe).
fn connect_loop(domain: i32, addr: &[u8]) -> Option<u64> {
    let mut total = 0;
    for _ in 0..CONNECTS {
        let fd = new_socket(domain, libc::SOCK_STREAM);
        if fd < 0 {
            return None;
        }
        let start = now_ns();
        let rc = connect_to(fd, addr);
        total += now_ns() - start;
        // SAFETY: our socket.
        unsafe { libc::close(fd) };
        if rc != 0 {
            return None;
        }
    }
    Some(total)
}

/// µs per connect: brokered (in a confined child, connect routed) and bare.
fn connect_cost(fx: &Fixture, domain: i32, addr: &[u8], listener: OwnedFd) -> (f64, f64) {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let drain = drain_in_thread(listener, stop.clone());
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two fds.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: fresh fds.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let wfd = w.as_raw_fd();
    let run = confined_connect(fx.rules(&[]), || match connect_loop(domain, addr) {
        Some(ns) => {
            // SAFETY (child): write 8 bytes from a live buffer.
            unsafe { libc::write(wfd, (&ns as *const u64).cast(), 8) };
            0
        }
        None => 1,
    });
    drop(w);
    assert_eq!(run.code, 0, "{}", run.log.explain(5));
    let mut buf = [0u8; 8];
    // SAFETY: read into a live 8-byte buffer.
    assert_eq!(
        unsafe { libc::read(r.as_raw_fd(), buf.as_mut_ptr().cast(), 8) },
        8
    );
    assert_eq!(
        run.log.performed().count() as u64 + run.log.omitted,
        u64::from(CONNECTS),
        "every connect was brokered"
    );
    let bare = connect_loop(domain, addr).expect("bare connects work");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (accepted, _) = drain.join().unwrap();
    assert_eq!(accepted, 2 * CONNECTS as usize);
    let per = |ns: u64| ns as f64 / f64::from(CONNECTS) / 1000.0;
    (per(u64::from_ne_bytes(buf)), per(bare))
}

#[test]
fn brokered_connect_cost() {
    let fx = Fixture::new();
    // A backlog that never overflows (a dropped SYN waits a second).
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    tcp.set_nonblocking(true).unwrap();
    // SAFETY: listen again on our socket, only raising the backlog.
    assert_eq!(unsafe { libc::listen(tcp.as_raw_fd(), 4096) }, 0);
    let tcp_addr = sockaddr_ip(tcp.local_addr().unwrap());
    let (tcp_brokered, tcp_bare) = connect_cost(&fx, libc::AF_INET, &tcp_addr, tcp.into());
    let path = fx.w.join("cost.sock");
    let unix = unix_listener(&path, libc::SOCK_STREAM, 4096);
    let unix_addr = sockaddr_un(std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str()));
    let (unix_brokered, unix_bare) = connect_cost(&fx, libc::AF_UNIX, &unix_addr, unix);
    println!(
        "blocking connect per call: TCP to loopback brokered {tcp_brokered:.1} µs, bare {tcp_bare:.1} µs; \
         UNIX socket beneath the write path brokered {unix_brokered:.1} µs, bare {unix_bare:.1} µs \
         ({CONNECTS} connects each, {} build)",
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
    );
}
