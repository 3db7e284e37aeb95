//! Brokered `connect` against a caller with threads: one thread rewrites the
//! address bytes, or `dup2`s another socket over the fd, while another
//! connects; a blocking connect that waits does not hold up the caller's other
//! brokered calls; more than 64 connects at once get `EAGAIN`.
//!
//! The threads run in a re-executed worker (`worker_entry` with
//! `BROKER_CONNECT_WORKER` set): a forked child of the harness may not start threads.
#![cfg(target_os = "linux")]

use std::ffi::CString;
use std::net::TcpListener;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::*;
use sandbox_broker::{BrokerDecision, Refusal};

const WANT_EACH: u32 = 300;
const MAX_TRIES: u32 = 200_000;
/// The fd the worker reports on (a pipe's write end, dup2'd there before exec).
const REPORT_FD: i32 = 50;

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} not set"))
}

fn report() {
    // SAFETY: one byte to the inherited pipe.
    unsafe { libc::write(REPORT_FD, b"x".as_ptr().cast(), 1) };
}

/// Re-exec entry point (does nothing without `BROKER_CONNECT_WORKER`).
#[test]
fn worker_entry() {
    let Ok(mode) = std::env::var("BROKER_CONNECT_WORKER") else {
        return;
    };
    let code = match mode.as_str() {
        "flip" => flip_worker(),
        "dup2" => dup2_worker(),
        "slow" => slow_worker(),
        "limit" => limit_worker(),
        other => panic!("unknown mode {other}"),
    };
    std::process::exit(code);
}

/// Connects to the address whose byte flips until both outcomes were seen
/// often: (connected, refused, unexpected).
fn flip_worker() -> i32 {
    let path = env("SOCK");
    let at: usize = env("AT").parse().unwrap();
    let values = env("VALUES").into_bytes();
    let mut bytes = sockaddr_un(path.as_bytes());
    let at = at + 2;
    bytes[at] = values[0];
    let addr: Arc<Vec<AtomicU8>> = Arc::new(bytes.into_iter().map(AtomicU8::new).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let flipper = {
        let (addr, stop, values) = (addr.clone(), stop.clone(), values.clone());
        std::thread::spawn(move || {
            let mut i = 0usize;
            while !stop.load(Ordering::Relaxed) {
                addr[at].store(values[i & 1], Ordering::Relaxed);
                i = i.wrapping_add(1);
            }
        })
    };
    let connectors: Vec<_> = (0..2)
        .map(|_| {
            let (addr, stop) = (addr.clone(), stop.clone());
            std::thread::spawn(move || {
                let (mut ok, mut refused, mut bad) = (0u32, 0u32, 0u32);
                for _ in 0..MAX_TRIES {
                    if stop.load(Ordering::Relaxed) || (ok >= WANT_EACH && refused >= WANT_EACH) {
                        break;
                    }
                    let fd = new_socket(libc::AF_UNIX, libc::SOCK_STREAM);
                    // SAFETY: connect reads the bytes another thread rewrites
                    // (atomics, so the race is on purpose and defined here).
                    let rc = unsafe {
                        libc::connect(fd, addr.as_ptr().cast(), addr.len() as libc::socklen_t)
                    };
                    match result(rc) {
                        0 => ok += 1,
                        libc::EACCES => refused += 1,
                        _ => bad += 1,
                    }
                    // SAFETY: our socket.
                    unsafe { libc::close(fd) };
                }
                (ok, refused, bad)
            })
        })
        .collect();
    let counts: Vec<_> = connectors.into_iter().map(|t| t.join().unwrap()).collect();
    stop.store(true, Ordering::Relaxed);
    flipper.join().unwrap();
    println!("flip worker: (connected, refused, unexpected) {counts:?}");
    if counts.iter().any(|c| c.2 > 0) {
        2
    } else if counts.iter().all(|c| c.0 >= WANT_EACH && c.1 >= WANT_EACH) {
        0
    } else {
        1
    }
}

/// One thread swaps a fresh UNIX socket and a TCP socket at fd TARGET while
/// another connects TARGET to SOCK: counts per outcome.
fn dup2_worker() -> i32 {
    let path = env("SOCK");
    let allowed = env("EXPECT") == "allowed";
    let target: i32 = 100;
    let mut addr = sockaddr_un(path.as_bytes());
    // The full sockaddr_un length, so the TCP socket answers EAFNOSUPPORT.
    addr.resize(110, 0);
    let inet = new_socket(libc::AF_INET, libc::SOCK_STREAM);
    // TARGET is open before the first connect.
    // SAFETY: dup2 of our own socket.
    unsafe { libc::dup2(inet, target) };
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let s = new_socket(libc::AF_UNIX, libc::SOCK_STREAM);
                // SAFETY: dup2 and close of our own fds.
                unsafe {
                    libc::dup2(s, target);
                    libc::close(s);
                    libc::dup2(inet, target);
                }
            }
        })
    };
    let (mut unix, mut tcp, mut bad, mut connected) = (0u32, 0u32, 0u32, 0u32);
    for _ in 0..MAX_TRIES {
        if unix >= WANT_EACH && tcp >= WANT_EACH {
            break;
        }
        match connect_to(target, &addr) {
            0 if allowed => {
                unix += 1;
                connected += 1;
            }
            libc::EISCONN if allowed => unix += 1,
            libc::EACCES if !allowed => unix += 1,
            libc::EAFNOSUPPORT => tcp += 1,
            e => {
                if bad < 5 {
                    println!("dup2 worker: unexpected errno {e}");
                }
                bad += 1
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();
    println!("dup2 worker: unix {unix} (connected {connected}), tcp {tcp}, unexpected {bad}");
    if bad > 0 {
        2
    } else if unix >= WANT_EACH && tcp >= WANT_EACH && (!allowed || connected > 0) {
        0
    } else {
        1
    }
}

/// A thread connects (blocking) to FULL, whose backlog is full, while this
/// one chmods FILE through the broker; reports when the chmods are done, then
/// waits for the connect (the parent accepts only after the report).
fn slow_worker() -> i32 {
    let full = env("FULL");
    let file = CString::new(env("FILE")).unwrap();
    let connected = Arc::new(AtomicBool::new(false));
    let connector = {
        let connected = connected.clone();
        std::thread::spawn(move || {
            let fd = new_socket(libc::AF_UNIX, libc::SOCK_STREAM);
            let rc = connect_to(fd, &sockaddr_un(full.as_bytes()));
            connected.store(true, Ordering::SeqCst);
            rc
        })
    };
    // Let the connect reach the broker and start waiting.
    std::thread::sleep(Duration::from_millis(200));
    let start = Instant::now();
    for i in 0..200 {
        // SAFETY: chmod of a NUL-terminated path (brokered).
        if unsafe { libc::chmod(file.as_ptr(), 0o600 | (i & 0o40)) } != 0 {
            return 3;
        }
    }
    let chmods = start.elapsed();
    let early = connected.load(Ordering::SeqCst);
    report();
    let rc = connector.join().unwrap();
    println!("slow worker: 200 chmods in {chmods:?} while the connect waited; connect {rc}");
    if early {
        4
    } else if rc != 0 {
        5
    } else {
        0
    }
}

/// 64 threads wait in blocking connects to FULL; then non-blocking TCP
/// connects to TCP until one gets EAGAIN; reports; after the parent drained
/// FULL, every waiting connect must have succeeded and TCP works again.
fn limit_worker() -> i32 {
    let full = env("FULL");
    let tcp: std::net::SocketAddr = env("TCP").parse().unwrap();
    let tcp = sockaddr_ip(tcp);
    let done = Arc::new(AtomicUsize::new(0));
    let waiting: Vec<_> = (0..64)
        .map(|_| {
            let (full, done) = (full.clone(), done.clone());
            std::thread::spawn(move || {
                let addr = sockaddr_un(full.as_bytes());
                // A probe below may take the last slot first: try again.
                let rc = loop {
                    let fd = new_socket(libc::AF_UNIX, libc::SOCK_STREAM);
                    match connect_to(fd, &addr) {
                        libc::EAGAIN => {
                            // SAFETY: our socket.
                            unsafe { libc::close(fd) };
                            std::thread::sleep(Duration::from_millis(20));
                        }
                        rc => break rc,
                    }
                };
                done.fetch_add(1, Ordering::SeqCst);
                rc
            })
        })
        .collect();
    let nonblocking_tcp = || {
        let fd = new_socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_NONBLOCK);
        let rc = connect_to(fd, &tcp);
        // SAFETY: our socket.
        unsafe { libc::close(fd) };
        rc
    };
    std::thread::sleep(Duration::from_millis(100));
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut tries = 0;
    let mut refused = false;
    while Instant::now() < deadline {
        tries += 1;
        match nonblocking_tcp() {
            libc::EAGAIN => {
                refused = true;
                break;
            }
            libc::EINPROGRESS => std::thread::sleep(Duration::from_millis(5)),
            other => {
                println!("limit worker: TCP connect answered {other}");
                return 3;
            }
        }
    }
    let early = done.load(Ordering::SeqCst);
    report();
    let rcs: Vec<i32> = waiting.into_iter().map(|t| t.join().unwrap()).collect();
    let again = nonblocking_tcp();
    println!(
        "limit worker: EAGAIN after {tries} TCP connects: {refused}; {early} waiting connects ended early; ended with {:?}; TCP afterwards {again}",
        rcs.iter().filter(|r| **r != 0).collect::<Vec<_>>()
    );
    if !refused {
        1
    } else if early > 0 || rcs.iter().any(|r| *r != 0) {
        4
    } else if again != libc::EINPROGRESS {
        5
    } else {
        0
    }
}

/// Waits up to `secs` for the worker's report byte.
fn wait_report(r: &OwnedFd, secs: i32) -> bool {
    let mut p = libc::pollfd {
        fd: r.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one live pollfd.
    unsafe { libc::poll(&mut p, 1, secs * 1000) == 1 }
}

/// Runs the worker confined (connect and the metadata calls brokered), its
/// report pipe at REPORT_FD.
fn run_worker(
    rules: sandbox_broker::BrokerRules,
    mode: &str,
    env: &[(&str, String)],
    report_w: Option<&OwnedFd>,
) -> Run {
    let mut env = env.to_vec();
    env.push(("BROKER_CONNECT_WORKER", mode.into()));
    let worker = Reexec::new(&test_path(module_path!(), "worker_entry"), &env);
    let w = report_w.map(|w| w.as_raw_fd());
    confined_connect(rules, || {
        if let Some(w) = w {
            // SAFETY (child): dup2 clears close-on-exec on the copy.
            unsafe { libc::dup2(w, REPORT_FD) };
        }
        worker.exec()
    })
}

fn resolved_of(run: &Run, decision: fn(&BrokerDecision) -> bool) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = run
        .log
        .records
        .iter()
        .filter(|r| r.syscall == "connect" && decision(&r.decision))
        .filter_map(|r| r.target.resolved.clone())
        .collect();
    v.sort();
    v.dedup();
    v
}

#[test]
fn rewriting_the_address_while_connecting_never_reaches_the_denied_socket() {
    let fx = Fixture::new();
    let inside = fx.w.join("s.sock");
    let outside = fx.o.join("s.sock");
    let allowed = unix_listener(&inside, libc::SOCK_STREAM, 128);
    // Room for everything, so a connect that got through would not block.
    let denied = unix_listener(&outside, libc::SOCK_STREAM, 4096);
    let stop = Arc::new(AtomicBool::new(false));
    let drain = drain_in_thread(allowed, stop.clone());
    // Flip the byte that tells W/s.sock from O/s.sock.
    let at = fx.w.as_os_str().len() - 1;
    let (w, o) = (
        fx.w.as_os_str().as_bytes()[at],
        fx.o.as_os_str().as_bytes()[at],
    );
    assert_eq!(fx.w.as_os_str().len(), fx.o.as_os_str().len());
    let values = String::from_utf8(vec![w, o]).unwrap();
    let run = run_worker(
        fx.rules(&[]),
        "flip",
        &[
            ("SOCK", inside.display().to_string()),
            ("AT", at.to_string()),
            ("VALUES", values),
        ],
        None,
    );
    stop.store(true, Ordering::Relaxed);
    let (accepted, _allowed) = drain.join().unwrap();
    assert_eq!(
        accept_all(&denied),
        0,
        "a connect reached the denied socket"
    );
    assert_eq!(
        run.code, 0,
        "the worker did not see both outcomes (or an unexpected errno)"
    );
    assert!(accepted >= 2 * WANT_EACH as usize, "{accepted}");
    assert_eq!(
        resolved_of(&run, |d| *d == BrokerDecision::Performed),
        vec![inside]
    );
    assert_eq!(
        resolved_of(&run, |d| matches!(d, BrokerDecision::Refused { .. })),
        vec![outside]
    );
}

#[test]
fn swapping_the_socket_under_the_fd_never_reaches_the_denied_socket() {
    for (path, allowed) in [("o/d.sock", false), ("w/ok.sock", true)] {
        let fx = Fixture::new();
        let path = fx.w.parent().unwrap().join(path);
        let listener = unix_listener(&path, libc::SOCK_STREAM, 4096);
        let stop = Arc::new(AtomicBool::new(false));
        // The allowed twin's listener is drained; the denied one must stay empty.
        let (drain, denied) = if allowed {
            (Some(drain_in_thread(listener, stop.clone())), None)
        } else {
            (None, Some(listener))
        };
        let run = run_worker(
            fx.rules(&[]),
            "dup2",
            &[
                ("SOCK", path.display().to_string()),
                ("EXPECT", if allowed { "allowed" } else { "denied" }.into()),
            ],
            None,
        );
        stop.store(true, Ordering::Relaxed);
        for r in run.log.records.iter().filter(|r| {
            !matches!(
                r.decision,
                BrokerDecision::Performed
                    | BrokerDecision::Refused { .. }
                    | BrokerDecision::Failed {
                        errno: libc::EAFNOSUPPORT | libc::EISCONN
                    }
            )
        }) {
            println!("odd record: {r:?}");
        }
        assert_eq!(
            run.code,
            0,
            "{}: the worker saw too few or unexpected outcomes",
            path.display()
        );
        if let Some(d) = drain {
            assert!(d.join().unwrap().0 > 0, "the twin never connected");
        }
        if let Some(denied) = denied {
            assert_eq!(
                accept_all(&denied),
                0,
                "a connect reached the denied socket"
            );
        }
        let refused: Vec<&Refusal> = run
            .log
            .records
            .iter()
            .filter_map(|r| match &r.decision {
                BrokerDecision::Refused { reason } => Some(reason),
                _ => None,
            })
            .collect();
        if allowed {
            assert!(refused.is_empty(), "{}", run.log.explain(5));
        } else {
            assert!(refused.iter().all(|r| **r == Refusal::UnixSocketNotAllowed));
            // The log keeps the first MAX_RECORDS; the rest are counted.
            assert!(refused.len() as u64 + run.log.omitted >= u64::from(WANT_EACH));
            assert!(!refused.is_empty());
        }
    }
}

#[test]
fn a_blocking_connect_that_waits_does_not_hold_up_other_calls() {
    let fx = Fixture::new();
    let full_path = fx.w.join("full.sock");
    let full = unix_listener(&full_path, libc::SOCK_STREAM, 0);
    let filler = new_socket(libc::AF_UNIX, libc::SOCK_STREAM);
    assert_eq!(
        connect_to(filler, &sockaddr_un(full_path.as_os_str().as_bytes())),
        0
    );
    let file = fx.file(&fx.w.join("f"), 0o644);
    let (r, w) = pipe();
    let acceptor = std::thread::spawn(move || {
        // Accept nothing until the worker's chmods are done.
        let reported = wait_report(&r, 60);
        let mut accepted = 0;
        let deadline = Instant::now() + Duration::from_secs(10);
        while accepted < 2 && Instant::now() < deadline {
            accepted += accept_all(&full);
            std::thread::sleep(Duration::from_millis(10));
        }
        (reported, accepted)
    });
    let run = run_worker(
        fx.rules(&[]),
        "slow",
        &[
            ("FULL", full_path.display().to_string()),
            ("FILE", file.display().to_string()),
        ],
        Some(&w),
    );
    drop(w);
    let (reported, accepted) = acceptor.join().unwrap();
    assert!(
        reported,
        "the chmods never finished while the connect waited"
    );
    assert_eq!(run.code, 0, "{}", run.log.explain(5));
    assert_eq!(accepted, 2);
    let chmods = run
        .log
        .records
        .iter()
        .filter(|r| r.syscall == "chmod" && r.decision == BrokerDecision::Performed)
        .count();
    assert_eq!(chmods, 200);
    assert!(run
        .log
        .records
        .iter()
        .any(|r| r.syscall == "connect" && r.decision == BrokerDecision::Performed));
    // SAFETY: our socket.
    unsafe { libc::close(filler) };
}

#[test]
fn more_than_64_connects_at_once_get_eagain() {
    let fx = Fixture::new();
    let full_path = fx.w.join("full.sock");
    let full = unix_listener(&full_path, libc::SOCK_STREAM, 0);
    let filler = new_socket(libc::AF_UNIX, libc::SOCK_STREAM);
    assert_eq!(
        connect_to(filler, &sockaddr_un(full_path.as_os_str().as_bytes())),
        0
    );
    let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
    tcp.set_nonblocking(true).unwrap();
    let tcp_addr = tcp.local_addr().unwrap();
    let (r, w) = pipe();
    let stop = Arc::new(AtomicBool::new(false));
    let acceptor = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let reported = wait_report(&r, 60);
            let mut accepted = 0;
            while !stop.load(Ordering::Relaxed) {
                accepted += accept_all(&full);
                while tcp.accept().is_ok() {}
                std::thread::sleep(Duration::from_millis(5));
            }
            // Those that connected since the last round.
            accepted += accept_all(&full);
            (reported, accepted)
        })
    };
    let run = run_worker(
        fx.rules(&[]),
        "limit",
        &[
            ("FULL", full_path.display().to_string()),
            ("TCP", tcp_addr.to_string()),
        ],
        Some(&w),
    );
    stop.store(true, Ordering::Relaxed);
    drop(w);
    let (reported, accepted) = acceptor.join().unwrap();
    assert!(reported);
    assert_eq!(run.code, 0, "{}", run.log.explain(5));
    assert_eq!(accepted, 65, "the filler and the 64 waiting connects");
    let refused: Vec<_> = run.log.refusals().map(|r| r.decision.clone()).collect();
    assert!(!refused.is_empty());
    assert!(
        refused.iter().all(|d| *d
            == BrokerDecision::Refused {
                reason: Refusal::TooManyConnects { limit: 64 }
            }),
        "{}",
        run.log.explain(5)
    );
    // SAFETY: our socket.
    unsafe { libc::close(filler) };
}
