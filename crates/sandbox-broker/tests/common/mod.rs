//! Test harness: a forked child installs a minimal user-notification filter for
//! the brokered syscalls, passes the listener with `send_fd`, and runs an action;
//! the parent serves it with a real `Broker`.
#![allow(dead_code)]

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use sandbox_broker::{
    brokered_syscalls, brokered_truncate_syscalls, install_filter_with_listener, listener_channel,
    recv_fd, Broker, BrokerLog, BrokerRules,
};
use sandbox_core::{ExpandContext, ResolvedPolicy, SandboxPolicy};

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

/// A temp dir with a write path `w` and a directory `o` outside it.
pub struct Fixture {
    pub tmp: tempfile::TempDir,
    pub w: PathBuf,
    pub o: PathBuf,
}

impl Fixture {
    pub fn new() -> Self {
        let tmp = tempfile::tempdir().expect("tempdir");
        let base = std::fs::canonicalize(tmp.path()).expect("canonical");
        let w = base.join("w");
        let o = base.join("o");
        std::fs::create_dir(&w).expect("mkdir w");
        std::fs::create_dir(&o).expect("mkdir o");
        Self { tmp, w, o }
    }

    /// Rules with `w` as the only write path and `deny` (relative to `w`) denied.
    pub fn rules(&self, deny: &[&str]) -> BrokerRules {
        BrokerRules::new(&self.policy(deny)).expect("rules")
    }

    pub fn policy(&self, deny: &[&str]) -> ResolvedPolicy {
        SandboxPolicy {
            write_paths: vec![self.w.display().to_string()],
            write_deny_paths: deny
                .iter()
                .map(|d| self.w.join(d).display().to_string())
                .collect(),
            ..SandboxPolicy::default()
        }
        .resolve(&ExpandContext::default())
        .expect("policy resolves")
    }

    /// Creates a file with `mode` and returns its path.
    pub fn file(&self, path: &Path, mode: u32) -> PathBuf {
        std::fs::write(path, b"x").expect("write file");
        set_mode(path, mode);
        path.to_path_buf()
    }
}

pub fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

pub fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path).expect("stat").mode() & 0o7777
}

pub fn cstr(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).expect("no NUL")
}

/// The classic-BPF filter: arch check (kill), brokered syscalls -> USER_NOTIF, else allow.
pub fn filter() -> Vec<libc::sock_filter> {
    let stmt = |code: u32, k: u32| libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    };
    let jeq = |k: u32, jt: u8, jf: u8| libc::sock_filter {
        code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
        jt,
        jf,
        k,
    };
    let ld = libc::BPF_LD | libc::BPF_W | libc::BPF_ABS;
    let ret = libc::BPF_RET | libc::BPF_K;
    let mut f = vec![
        stmt(ld, 4),
        jeq(AUDIT_ARCH, 1, 0),
        stmt(ret, libc::SECCOMP_RET_KILL_PROCESS),
        stmt(ld, 0),
    ];
    for nr in brokered_syscalls()
        .iter()
        .chain(brokered_truncate_syscalls())
    {
        f.push(jeq(*nr as u32, 0, 1));
        f.push(stmt(ret, libc::SECCOMP_RET_USER_NOTIF));
    }
    f.push(stmt(ret, libc::SECCOMP_RET_ALLOW));
    f
}

pub fn errno() -> i32 {
    // SAFETY: reading the thread's errno.
    unsafe { *libc::__errno_location() }
}

/// 0 when `rc >= 0`, else errno (async-signal-safe).
pub fn result(rc: libc::c_int) -> i32 {
    if rc < 0 {
        errno()
    } else {
        0
    }
}

/// What the confined child reported, and what the broker answered.
pub struct Run {
    /// Exit code of the child (128+N for signal N).
    pub code: i32,
    pub log: BrokerLog,
}

/// Forks; the child installs the filter, passes the listener and runs `action`
/// (which must be async-signal-safe and allocation-free); its return value is the
/// exit code. The parent serves the listener with a `Broker` until the child ends.
pub fn confined<F: FnOnce() -> i32>(rules: BrokerRules, action: F) -> Run {
    let mut pid = 0;
    let broker = start(rules, action, &mut pid);
    let code = wait(pid);
    Run {
        code,
        log: broker.finish(),
    }
}

/// Like [`confined`] but returns the running broker and child pid.
pub fn start<F: FnOnce() -> i32>(rules: BrokerRules, action: F, pid_out: &mut i32) -> Broker {
    let listener = spawn(action, pid_out);
    Broker::start(listener, rules).expect("broker starts")
}

/// Forks the confined child and returns the listener it sent.
pub fn spawn<F: FnOnce() -> i32>(action: F, pid_out: &mut i32) -> OwnedFd {
    let filter = filter();
    let (parent, child) = listener_channel().expect("socketpair");
    // SAFETY: the child only makes async-signal-safe calls and exits with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        // SAFETY: raw syscalls with valid arguments; no allocation, no unwinding.
        unsafe {
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                libc::_exit(120);
            }
            if install_filter_with_listener(&filter, child.as_raw_fd()).is_err() {
                libc::_exit(121);
            }
            libc::close(child.as_raw_fd());
            let code = action();
            libc::_exit(code);
        }
    }
    drop(child);
    *pid_out = pid;
    match recv_fd(&parent) {
        Ok(fd) => fd,
        Err(e) => panic!("child {pid} sent no listener ({e}), exit {}", wait(pid)),
    }
}

/// Waits for `pid`; its exit code, or 128+signal.
pub fn wait(pid: i32) -> i32 {
    let mut status = 0;
    loop {
        // SAFETY: waiting for our own child.
        let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
        if rc == pid {
            break;
        }
        assert_eq!(errno(), libc::EINTR, "waitpid");
    }
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        128 + libc::WTERMSIG(status)
    }
}

/// A prepared `/bin/sh -c CMD` exec for the child.
pub struct Sh {
    _strings: Vec<CString>,
    argv: Vec<*const libc::c_char>,
}

impl Sh {
    pub fn new(cmd: &str) -> Self {
        let strings = vec![
            CString::new("/bin/sh").unwrap(),
            CString::new("-c").unwrap(),
            CString::new(cmd).unwrap(),
        ];
        let mut argv: Vec<_> = strings.iter().map(|s| s.as_ptr()).collect();
        argv.push(std::ptr::null());
        Self {
            _strings: strings,
            argv,
        }
    }

    /// execv; returns 127 if exec fails (async-signal-safe).
    pub fn exec(&self) -> i32 {
        // SAFETY: argv is NUL-terminated and its strings live in self.
        unsafe { libc::execv(self.argv[0], self.argv.as_ptr()) };
        127
    }
}

/// Runs `cmd` under `sh` in a confined child.
pub fn sh(rules: BrokerRules, cmd: &str) -> Run {
    let sh = Sh::new(cmd);
    confined(rules, || sh.exec())
}

/// Single-quotes a path for sh.
pub fn q(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', r"'\''"))
}
