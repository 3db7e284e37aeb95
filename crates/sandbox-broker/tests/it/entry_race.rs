//! A confined process rewrites a path while it opens it: one thread flips a
//! byte of the path buffer between a harmless and a denied name while others
//! call `open(O_WRONLY | O_CREAT | O_TRUNC)` on it in a loop. The broker reads
//! the path once and performs the open itself, so the denied file is never
//! created or written. And a caller interrupted by signals mid-call never sees
//! a performed call fail when restarted.
//!
//! The threads run in a re-executed worker (`worker_entry` with
//! `BROKER_ENTRY_WORKER` set): a forked child of the harness may not start threads.
#![cfg(target_os = "linux")]

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, Ordering};
use std::sync::Arc;

use crate::common::*;
use sandbox_broker::BrokerDecision;

const MAX_OPENS: u32 = 100_000;
const WANT_EACH: u32 = 300;

/// A NUL-terminated path in shared memory whose byte `at` flips between two values.
struct Flipping {
    bytes: Vec<AtomicU8>,
    at: usize,
    values: [u8; 2],
}

impl Flipping {
    fn new(path: &str, at: usize, values: [u8; 2]) -> Self {
        let bytes = path.bytes().chain([0]).map(AtomicU8::new).collect();
        Self { bytes, at, values }
    }
    fn ptr(&self) -> *const libc::c_char {
        self.bytes.as_ptr().cast()
    }
    fn flip(&self, i: u32) {
        self.bytes[self.at].store(self.values[(i & 1) as usize], Ordering::Relaxed);
    }
}

/// Opens `path` for writing until both outcomes were seen often; writes "evil"
/// into what it opened. Returns (performed, refused, unexpected).
fn opener(path: &Flipping, stop: &AtomicBool) -> (u32, u32, u32) {
    let (mut ok, mut refused, mut bad) = (0, 0, 0);
    for _ in 0..MAX_OPENS {
        if stop.load(Ordering::Relaxed) || (ok >= WANT_EACH && refused >= WANT_EACH) {
            break;
        }
        let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC;
        // SAFETY: open on a NUL-terminated buffer that another thread rewrites.
        let fd = unsafe { libc::open(path.ptr(), flags, 0o644) };
        if fd >= 0 {
            // SAFETY: write to and close the fd just opened.
            unsafe {
                libc::write(fd, b"evil".as_ptr().cast(), 4);
                libc::close(fd);
            }
            ok += 1;
        } else if errno() == libc::EACCES {
            refused += 1;
        } else {
            bad += 1;
        }
    }
    (ok, refused, bad)
}

/// Re-exec entry point (does nothing without `BROKER_ENTRY_WORKER`).
#[test]
fn worker_entry() {
    let Ok(w) = std::env::var("BROKER_ENTRY_WORKER") else {
        return;
    };
    // W/.bashrc (missing, denied) vs W/xbashrc; W/.git/config (exists,
    // denied) vs W/.git/confxg.
    let rc = format!("{w}/.bashrc");
    let cfg = format!("{w}/.git/config");
    let paths = Arc::new([
        Flipping::new(&rc, w.len() + 1, [b'.', b'x']),
        Flipping::new(&cfg, cfg.len() - 2, [b'i', b'x']),
    ]);
    let stop = Arc::new(AtomicBool::new(false));
    let flips = Arc::new(AtomicU32::new(0));
    let flipper = {
        let (paths, stop, flips) = (paths.clone(), stop.clone(), flips.clone());
        std::thread::spawn(move || {
            let mut i = 0u32;
            while !stop.load(Ordering::Relaxed) {
                for p in paths.iter() {
                    p.flip(i);
                }
                i = i.wrapping_add(1);
                flips.store(i, Ordering::Relaxed);
            }
        })
    };
    let openers: Vec<_> = (0..2)
        .map(|k| {
            let (paths, stop) = (paths.clone(), stop.clone());
            std::thread::spawn(move || opener(&paths[k], &stop))
        })
        .collect();
    let counts: Vec<_> = openers.into_iter().map(|t| t.join().unwrap()).collect();
    stop.store(true, Ordering::Relaxed);
    flipper.join().unwrap();
    println!(
        "worker: {counts:?}, {} flips",
        flips.load(Ordering::Relaxed)
    );
    let code = if counts.iter().any(|c| c.2 > 0) {
        2
    } else if counts.iter().all(|c| c.0 >= WANT_EACH && c.1 >= WANT_EACH) {
        0
    } else {
        1
    };
    std::process::exit(code);
}

/// Prepared execve of this binary as a worker.
struct Worker {
    _strings: Vec<CString>,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
}

impl Worker {
    fn new(w: &std::path::Path) -> Self {
        let exe = std::env::current_exe().unwrap();
        let strings: Vec<CString> = [
            exe.display().to_string(),
            "--exact".into(),
            test_path(module_path!(), "worker_entry"),
            "--nocapture".into(),
            "--test-threads=1".into(),
            "-q".into(),
            format!("BROKER_ENTRY_WORKER={}", w.display()),
        ]
        .into_iter()
        .map(|s| CString::new(s).unwrap())
        .collect();
        let n = strings.len() - 1;
        let mut argv: Vec<_> = strings[..n].iter().map(|s| s.as_ptr()).collect();
        argv.push(std::ptr::null());
        let envp = vec![strings[n].as_ptr(), std::ptr::null()];
        Self {
            _strings: strings,
            argv,
            envp,
        }
    }

    fn exec(&self) -> i32 {
        // SAFETY: execve with NUL-terminated arrays that live in self.
        unsafe { libc::execve(self.argv[0], self.argv.as_ptr(), self.envp.as_ptr()) };
        127
    }
}

#[test]
fn rewriting_the_path_while_opening_never_writes_the_denied_file() {
    let fx = Fixture::new();
    std::fs::create_dir(fx.w.join(".git")).unwrap();
    std::fs::write(fx.w.join(".git/config"), "[core]\n").unwrap();
    let worker = Worker::new(&fx.w);
    let run = confined_entries(fx.rules(&[".git/config", ".bashrc"]), || worker.exec());
    assert!(
        std::fs::symlink_metadata(fx.w.join(".bashrc")).is_err(),
        "the denied file was created"
    );
    assert_eq!(
        std::fs::read(fx.w.join(".git/config")).unwrap(),
        b"[core]\n"
    );
    assert_eq!(
        run.code, 0,
        "the worker did not see both outcomes (or an unexpected errno)"
    );
    // Positive control: the harmless names were written.
    assert_eq!(std::fs::read(fx.w.join("xbashrc")).unwrap(), b"evil");
    assert_eq!(std::fs::read(fx.w.join(".git/confxg")).unwrap(), b"evil");
    assert!(run.log.records.iter().all(|r| matches!(
        r.decision,
        BrokerDecision::Opened { .. } | BrokerDecision::Refused { .. }
    )));
}

extern "C" fn on_alarm(_: libc::c_int) {}

/// In the child: a SIGALRM every 20 µs (SA_RESTART), then `rounds` of
/// mkdir/rmdir and exclusive create/unlink, each of which must succeed.
/// 0, or 100 + the step that failed (async-signal-safe).
fn interrupted_loop(dir: &CString, file: &CString, rounds: u32) -> i32 {
    // SAFETY (child): sigaction, setitimer and plain syscalls with live buffers.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_alarm as *const () as usize;
        sa.sa_flags = libc::SA_RESTART;
        if libc::sigaction(libc::SIGALRM, &sa, std::ptr::null_mut()) != 0 {
            return 90;
        }
        let tick = libc::timeval {
            tv_sec: 0,
            tv_usec: 20,
        };
        let timer = libc::itimerval {
            it_interval: tick,
            it_value: tick,
        };
        if libc::setitimer(libc::ITIMER_REAL, &timer, std::ptr::null_mut()) != 0 {
            return 91;
        }
        for _ in 0..rounds {
            if libc::mkdir(dir.as_ptr(), 0o755) != 0 {
                return 101;
            }
            if libc::rmdir(dir.as_ptr()) != 0 {
                return 102;
            }
            let fd = libc::open(
                file.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
                0o644,
            );
            if fd < 0 {
                return 103;
            }
            libc::close(fd);
            if libc::unlink(file.as_ptr()) != 0 {
                return 104;
            }
        }
    }
    0
}

#[test]
fn signals_never_make_a_performed_call_fail_when_restarted() {
    let fx = Fixture::new();
    let (dir, file) = (cstr(&fx.w.join("d")), cstr(&fx.w.join("f")));
    let run = confined_entries(fx.rules(&[".bashrc"]), || {
        interrupted_loop(&dir, &file, 1500)
    });
    assert_eq!(run.code, 0, "step {} failed", run.code - 100);
    assert_eq!(run.log.stopped_by_error, None);
    // Twin: without SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV a call the broker
    // performed comes back interrupted, restarts and fails (EEXIST, ENOENT);
    // here within the first rounds, every time.
    let mut pid = 0;
    let listener = spawn_without_killable_wait(
        &entry_filter(),
        || interrupted_loop(&dir, &file, 1500),
        &mut pid,
    );
    let broker = sandbox_broker::Broker::start(listener, fx.rules(&[".bashrc"])).unwrap();
    let code = wait(pid);
    drop(broker.finish());
    assert!(
        (101..=104).contains(&code),
        "without the flag the loop was expected to fail (exit {code})"
    );
}

/// Like `spawn_filtered`, installing the filter without
/// `SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV`.
fn spawn_without_killable_wait<F: FnOnce() -> i32>(
    filter: &[libc::sock_filter],
    action: F,
    pid_out: &mut i32,
) -> OwnedFd {
    let (parent, child) = sandbox_broker::listener_channel().unwrap();
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr().cast_mut(),
    };
    // SAFETY: the child only makes async-signal-safe calls and exits with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        // SAFETY (child): raw syscalls with valid arguments; no allocation.
        unsafe {
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                libc::_exit(120);
            }
            let fd = libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
                &prog as *const libc::sock_fprog,
            );
            if fd < 0 || sandbox_seccomp::listener::send_fd(child.as_raw_fd(), fd as i32).is_err() {
                libc::_exit(121);
            }
            libc::close(fd as i32);
            libc::close(child.as_raw_fd());
            libc::_exit(action());
        }
    }
    drop(child);
    *pid_out = pid;
    sandbox_broker::recv_fd(&parent).expect("listener")
}
