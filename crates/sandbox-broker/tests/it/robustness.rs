//! The broker survives callers that die mid-request and floods from many threads.
//!
//! Multi-threaded callers re-execute this test binary as a worker
//! (`worker_entry` with `BROKER_WORKER` set), since a forked child of the
//! harness may not start threads.
#![cfg(target_os = "linux")]

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

use crate::common::*;
use sandbox_broker::{Broker, BrokerDecision, Refusal};

const THREADS: usize = 16;
const PER_THREAD: usize = 400;

/// Re-exec entry point for the worker processes (does nothing without `BROKER_WORKER`).
#[test]
fn worker_entry() {
    let Ok(spec) = std::env::var("BROKER_WORKER") else {
        return;
    };
    let parts: Vec<String> = spec.split('\n').map(str::to_owned).collect();
    let (mode, inside, outside) = (parts[0].clone(), parts[1].clone(), parts[2].clone());
    let forever = mode == "forever";
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            let (inside, outside) = (cstr(Path::new(&inside)), cstr(Path::new(&outside)));
            std::thread::spawn(move || {
                let mut bad = 0;
                let mut i = 0;
                while forever || i < PER_THREAD {
                    // SAFETY: plain chmod calls.
                    let (a, b) = unsafe {
                        (
                            result(libc::chmod(inside.as_ptr(), 0o600 | (i as u32 & 0o40))),
                            result(libc::chmod(outside.as_ptr(), 0o600)),
                        )
                    };
                    if a != 0 || b != libc::EPERM {
                        bad += 1;
                    }
                    i += 2;
                    if forever && i == 100 {
                        // Tell the parent requests are in flight (fd 3 is its pipe).
                        // SAFETY: one-byte write to an inherited fd.
                        unsafe { libc::write(3, b"r".as_ptr().cast(), 1) };
                    }
                }
                bad
            })
        })
        .collect();
    let bad: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    std::process::exit(if bad == 0 { 0 } else { 1 });
}

/// Prepared execve of this binary as a worker; fd 3 is `signal` when given.
struct Worker {
    _strings: Vec<CString>,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
}

impl Worker {
    fn new(mode: &str, inside: &Path, outside: &Path) -> Self {
        let exe = std::env::current_exe().unwrap();
        let mut strings: Vec<CString> = [
            exe.display().to_string(),
            "--exact".into(),
            test_path(module_path!(), "worker_entry"),
            "--nocapture".into(),
            "--test-threads=1".into(),
            "-q".into(),
        ]
        .into_iter()
        .map(|s| CString::new(s).unwrap())
        .collect();
        let n_args = strings.len();
        strings.push(
            CString::new(format!(
                "BROKER_WORKER={mode}\n{}\n{}",
                inside.display(),
                outside.display()
            ))
            .unwrap(),
        );
        let mut argv: Vec<_> = strings[..n_args].iter().map(|s| s.as_ptr()).collect();
        argv.push(std::ptr::null());
        let envp = vec![strings[n_args].as_ptr(), std::ptr::null()];
        Self {
            _strings: strings,
            argv,
            envp,
        }
    }

    /// execve, with `signal` as fd 3 (async-signal-safe).
    fn exec(&self, signal: Option<i32>) -> i32 {
        // SAFETY: dup2 + execve with NUL-terminated arrays that live in self.
        unsafe {
            if let Some(fd) = signal {
                if libc::dup2(fd, 3) != 3 {
                    return 126;
                }
            }
            libc::execve(self.argv[0], self.argv.as_ptr(), self.envp.as_ptr());
        }
        127
    }
}

#[test]
fn flood_from_many_threads_is_answered_correctly() {
    let fx = Fixture::new();
    let inside = fx.file(&fx.w.join("f"), 0o644);
    let outside = fx.file(&fx.o.join("f"), 0o644);
    let worker = Worker::new("flood", &inside, &outside);
    let run = confined(fx.rules(&[]), || worker.exec(None));
    assert_eq!(run.code, 0, "a worker thread got a wrong answer");
    assert_eq!(mode(&outside), 0o644);
    assert_eq!(run.log.stopped_by_error, None);
    let answered = run.log.records.len() as u64 + run.log.omitted;
    assert_eq!(answered, (THREADS * PER_THREAD) as u64);
    for r in run.log.refusals() {
        assert_eq!(
            r.decision,
            BrokerDecision::Refused {
                reason: Refusal::OutsideWritePaths
            }
        );
    }
    assert!(run.log.performed().count() > 0);
}

#[test]
fn caller_killed_while_its_request_is_pending() {
    let fx = Fixture::new();
    let f = fx.file(&fx.w.join("f"), 0o644);
    let c = cstr(&f);
    let mut pid = 0;
    // SAFETY (child): one syscall; it blocks until answered.
    let listener = spawn(
        || result(unsafe { libc::chmod(c.as_ptr(), 0o600) }),
        &mut pid,
    );
    // Wait until the request is pending, then kill the caller before any answer.
    let mut pfd = libc::pollfd {
        fd: listener.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one live pollfd.
    assert_eq!(unsafe { libc::poll(&mut pfd, 1, -1) }, 1);
    // SAFETY: killing our own child.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    assert_eq!(wait(pid), 128 + libc::SIGKILL);
    let log = Broker::start(listener, fx.rules(&[])).unwrap().finish();
    assert_eq!(log.performed().count(), 0);
    assert_eq!(log.stopped_by_error, None);
    assert_eq!(mode(&f), 0o644);
    // Positive control: the same request from a live caller is performed.
    // SAFETY (child): one syscall.
    let run = confined(fx.rules(&[]), || {
        result(unsafe { libc::chmod(c.as_ptr(), 0o600) })
    });
    assert_eq!(run.code, 0);
    assert_eq!(mode(&f), 0o600);
}

#[test]
fn caller_killed_during_a_flood() {
    let fx = Fixture::new();
    let inside = fx.file(&fx.w.join("f"), 0o644);
    let outside = fx.file(&fx.o.join("f"), 0o644);
    let worker = Worker::new("forever", &inside, &outside);
    for round in 0..3 {
        let mut fds = [0; 2];
        // SAFETY: pipe2 fills two fds.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        // SAFETY: fresh fds.
        let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let wfd = w.as_raw_fd();
        let mut pid = 0;
        let broker = start(fx.rules(&[]), || worker.exec(Some(wfd)), &mut pid);
        drop(w);
        let mut byte = [0u8; 1];
        // SAFETY: reading one byte into a live buffer.
        let n = unsafe { libc::read(r.as_raw_fd(), byte.as_mut_ptr().cast(), 1) };
        assert_eq!(n, 1, "round {round}: the worker never started flooding");
        // SAFETY: killing our own child.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        assert_eq!(wait(pid), 128 + libc::SIGKILL);
        let log = broker.finish();
        assert_eq!(log.stopped_by_error, None, "round {round}");
        assert!(log.performed().count() > 0, "round {round}");
        assert_eq!(mode(&outside), 0o644);
    }
}
