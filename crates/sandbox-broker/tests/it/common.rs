//! Test harness: a forked child installs a minimal user-notification filter for
//! the brokered syscalls, passes the listener with `send_fd`, and runs an action;
//! the parent serves it with a real `Broker`.
#![allow(dead_code)]

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use sandbox_broker::{listener_channel, recv_fd, Broker, BrokerLog, BrokerRules};
use sandbox_core::{ExpandContext, ResolvedPolicy, SandboxPolicy};
use sandbox_seccomp::listener::install_filter_with_listener;
use sandbox_seccomp::{EntryForm, Handler};

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
        Self::at(tempfile::tempdir().expect("tempdir"))
    }

    /// A fixture on the filesystem of the target dir, checked to support
    /// `user.*` extended attributes (a tmpfs `/tmp` may not): fails, never skips.
    pub fn with_user_xattrs() -> Self {
        let tmp = tempfile::Builder::new()
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .expect("tempdir in CARGO_TARGET_TMPDIR");
        let fx = Self::at(tmp);
        let probe = fx.file(&fx.o.join("xattr-probe"), 0o644);
        if let Err(e) = try_set_xattr(&probe, "user.probe", b"1") {
            panic!(
                "{} does not support user.* xattrs ({e}); the xattr tests need a filesystem that does",
                fx.o.display()
            );
        }
        std::fs::remove_file(&probe).expect("rm probe");
        fx
    }

    fn at(tmp: tempfile::TempDir) -> Self {
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

    /// Rules with `w` as the only write path and `read_deny` (absolute) read-denied.
    pub fn read_deny_rules(&self, read_deny: &[&Path]) -> BrokerRules {
        let policy = SandboxPolicy {
            write_paths: vec![self.w.display().to_string()],
            read_deny_paths: read_deny.iter().map(|d| d.display().to_string()).collect(),
            ..SandboxPolicy::default()
        }
        .resolve(&ExpandContext::default())
        .expect("policy resolves");
        BrokerRules::new(&policy).expect("rules")
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

/// `setxattr` by the test process itself (not brokered).
pub fn try_set_xattr(path: &Path, name: &str, value: &[u8]) -> std::io::Result<()> {
    let (p, n) = (cstr(path), CString::new(name).expect("no NUL"));
    // SAFETY: NUL-terminated path and name, live value buffer.
    let rc = unsafe {
        libc::setxattr(
            p.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

pub fn set_xattr(path: &Path, name: &str, value: &[u8]) {
    try_set_xattr(path, name, value).expect("setxattr");
}

/// `getxattr` by the test process itself (not brokered).
pub fn get_xattr(path: &Path, name: &str) -> Option<Vec<u8>> {
    let (p, n) = (cstr(path), CString::new(name).expect("no NUL"));
    let mut buf = [0u8; 256];
    // SAFETY: buffer of 256 bytes.
    let len = unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), 256) };
    (len >= 0).then(|| buf[..len as usize].to_vec())
}

pub const CAP_SETGID: u32 = 6;
pub const CAP_SETUID: u32 = 7;

/// Sets the calling thread's capability sets (raw `capset`, async-signal-safe);
/// 0 or errno.
pub fn set_caps(effective: u64, permitted: u64, inheritable: u64) -> i32 {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let mut header = Header {
        version: 0x2008_0522,
        pid: 0,
    };
    let data = [0u32, 1].map(|i| Data {
        effective: (effective >> (32 * i)) as u32,
        permitted: (permitted >> (32 * i)) as u32,
        inheritable: (inheritable >> (32 * i)) as u32,
    });
    // SAFETY: capset with a v3 header and two data words.
    let rc = unsafe { libc::syscall(libc::SYS_capset, &mut header as *mut Header, data.as_ptr()) };
    result(rc as i32)
}

/// The calling thread's (effective, permitted, inheritable) capabilities.
pub fn get_caps() -> (u64, u64, u64) {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    let mut header = Header {
        version: 0x2008_0522,
        pid: 0,
    };
    let mut data = [[0u32; 3]; 2];
    // SAFETY: capget with a v3 header and two data words.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_capget,
            &mut header as *mut Header,
            data.as_mut_ptr(),
        )
    };
    assert_eq!(rc, 0, "capget");
    let join = |k: usize| u64::from(data[0][k]) | (u64::from(data[1][k]) << 32);
    (join(0), join(1), join(2))
}

/// In the child: drop every capability (a root caller with all caps dropped).
pub fn drop_all_caps() -> i32 {
    set_caps(0, 0, 0)
}

/// In the child: become uid/gid 65534 without supplementary groups (raw
/// syscalls, this thread only; the child has no other).
pub fn become_nobody() -> i32 {
    // SAFETY: raw syscalls with valid arguments.
    unsafe {
        if libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<u32>()) != 0
            || libc::syscall(libc::SYS_setresgid, 65534, 65534, 65534) != 0
            || libc::syscall(libc::SYS_setresuid, 65534, 65534, 65534) != 0
        {
            return errno();
        }
    }
    0
}

pub fn cstr(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).expect("no NUL")
}

/// The calls whose seccomp table row gives them a handler `pick` accepts.
pub fn handled(pick: impl Fn(Handler) -> bool) -> Vec<i64> {
    sandbox_seccomp::handlers()
        .iter()
        .filter(|&&(_, _, h)| pick(h))
        .map(|&(nr, _, _)| i64::from(nr))
        .collect()
}

/// The metadata changes (chmod, chown, xattr writes, utimes, truncate).
pub fn metadata() -> Vec<i64> {
    handled(|h| matches!(h, Handler::Metadata(_)))
}

/// The classic-BPF filter: arch check (kill), metadata changes -> USER_NOTIF, else allow.
pub fn filter() -> Vec<libc::sock_filter> {
    filter_routing(&metadata())
}

/// The metadata changes and the xattr reads (a policy with read-deny paths).
pub fn all_brokered() -> Vec<i64> {
    handled(|h| matches!(h, Handler::Metadata(_) | Handler::XattrRead(_)))
}

/// Like [`filter`], routing exactly `routed` to the listener.
pub fn filter_routing(routed: &[i64]) -> Vec<libc::sock_filter> {
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
    for nr in routed {
        f.push(jeq(*nr as u32, 0, 1));
        f.push(stmt(ret, libc::SECCOMP_RET_USER_NOTIF));
    }
    f.push(stmt(ret, libc::SECCOMP_RET_ALLOW));
    f
}

/// What the production filter routes when a deny path lies beneath a write
/// path: the metadata calls, `truncate`, the entry calls, `umask`, and `open`/`openat`
/// only when they can write (access mode not `O_RDONLY`, or `O_CREAT`,
/// `O_TRUNC` or `__O_TMPFILE`); read-only opens stay in the kernel.
pub fn entry_filter() -> Vec<libc::sock_filter> {
    let stmt = |code: u32, k: u32| libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    };
    let jump = |op: u32, k: u32, jt: u8, jf: u8| libc::sock_filter {
        code: (libc::BPF_JMP | op | libc::BPF_K) as u16,
        jt,
        jf,
        k,
    };
    let ld = libc::BPF_LD | libc::BPF_W | libc::BPF_ABS;
    let ret = libc::BPF_RET | libc::BPF_K;
    let opens: Vec<(i64, u32)> = sandbox_seccomp::handlers()
        .iter()
        .filter_map(|&(nr, _, h)| match h {
            Handler::Entry(EntryForm::Open) => Some((i64::from(nr), 1)),
            Handler::Entry(EntryForm::Openat) => Some((i64::from(nr), 2)),
            _ => None,
        })
        .collect();
    let mut f = vec![
        stmt(ld, 4),
        jump(libc::BPF_JEQ, AUDIT_ARCH, 1, 0),
        stmt(ret, libc::SECCOMP_RET_KILL_PROCESS),
        stmt(ld, 0),
    ];
    for nr in handled(|h| matches!(h, Handler::Metadata(_) | Handler::Entry(_) | Handler::Umask))
        .into_iter()
        .filter(|nr| !opens.iter().any(|(o, _)| o == nr))
    {
        f.push(jump(libc::BPF_JEQ, nr as u32, 0, 1));
        f.push(stmt(ret, libc::SECCOMP_RET_USER_NOTIF));
    }
    let writing = (3 /* O_ACCMODE: the kernel's, not musl's */ | libc::O_CREAT | libc::O_TRUNC | (libc::O_TMPFILE & !libc::O_DIRECTORY))
        as u32;
    for (nr, arg) in opens {
        // Low 32 bits of the flags argument (little-endian seccomp_data.args).
        f.push(jump(libc::BPF_JEQ, nr as u32, 0, 4));
        f.push(stmt(ld, 16 + 8 * arg));
        f.push(jump(libc::BPF_JSET, writing, 0, 1));
        f.push(stmt(ret, libc::SECCOMP_RET_USER_NOTIF));
        f.push(stmt(ret, libc::SECCOMP_RET_ALLOW));
    }
    f.push(stmt(ret, libc::SECCOMP_RET_ALLOW));
    f
}

/// Like [`confined`], under [`entry_filter`].
pub fn confined_entries<F: FnOnce() -> i32>(rules: BrokerRules, action: F) -> Run {
    let mut pid = 0;
    let listener = spawn_filtered(entry_filter(), action, &mut pid);
    let broker = Broker::start(listener, rules).expect("broker starts");
    let code = wait(pid);
    Run {
        code,
        log: broker.finish(),
    }
}

/// Runs `cmd` under `sh` in a child under [`entry_filter`].
pub fn sh_entries(rules: BrokerRules, cmd: &str) -> Run {
    let sh = Sh::new(cmd);
    confined_entries(rules, || sh.exec())
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

/// Like [`confined`], with the xattr reads routed to the broker too.
pub fn confined_reads<F: FnOnce() -> i32>(rules: BrokerRules, action: F) -> Run {
    let mut pid = 0;
    let listener = spawn_filtered(filter_routing(&all_brokered()), action, &mut pid);
    let broker = Broker::start(listener, rules).expect("broker starts");
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
    spawn_filtered(filter(), action, pid_out)
}

/// Like [`spawn`] with the given filter.
pub fn spawn_filtered<F: FnOnce() -> i32>(
    filter: Vec<libc::sock_filter>,
    action: F,
    pid_out: &mut i32,
) -> OwnedFd {
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

/// The metadata calls, `truncate` and `connect` routed to the listener (a
/// run with network on).
pub fn connect_filter() -> Vec<libc::sock_filter> {
    filter_routing(&handled(|h| {
        matches!(h, Handler::Metadata(_) | Handler::Connect)
    }))
}

/// Like [`confined`], under [`connect_filter`].
pub fn confined_connect<F: FnOnce() -> i32>(rules: BrokerRules, action: F) -> Run {
    let mut pid = 0;
    let listener = spawn_filtered(connect_filter(), action, &mut pid);
    let broker = Broker::start(listener, rules).expect("broker starts");
    let code = wait(pid);
    Run {
        code,
        log: broker.finish(),
    }
}

/// `n` i32 slots in anonymous shared memory: a forked child writes them
/// (async-signal-safe), the parent reads them after the child ended.
pub struct Shared {
    ptr: *mut i32,
    n: usize,
}

impl Shared {
    pub fn new(n: usize) -> Self {
        // SAFETY: a fresh anonymous shared mapping.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                n * 4,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(ptr, libc::MAP_FAILED, "mmap");
        Self { ptr: ptr.cast(), n }
    }
    pub fn set(&self, i: usize, v: i32) {
        assert!(i < self.n);
        // SAFETY: in bounds of the mapping.
        unsafe { self.ptr.add(i).write_volatile(v) }
    }
    pub fn get(&self, i: usize) -> i32 {
        assert!(i < self.n);
        // SAFETY: in bounds of the mapping.
        unsafe { self.ptr.add(i).read_volatile() }
    }
    pub fn to_vec(&self) -> Vec<i32> {
        (0..self.n).map(|i| self.get(i)).collect()
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // SAFETY: our own mapping.
        unsafe { libc::munmap(self.ptr.cast(), self.n * 4) };
    }
}

/// `struct sockaddr_un` bytes for `name` (a path, or `\0name` for an
/// abstract one), with addrlen = 2 + name length (+ 1 NUL for a path).
pub fn sockaddr_un(name: &[u8]) -> Vec<u8> {
    let mut a = (libc::AF_UNIX as u16).to_ne_bytes().to_vec();
    a.extend_from_slice(name);
    if name.first() != Some(&0) {
        a.push(0);
    }
    a
}

/// `struct sockaddr_in` / `sockaddr_in6` bytes.
pub fn sockaddr_ip(addr: std::net::SocketAddr) -> Vec<u8> {
    match addr {
        std::net::SocketAddr::V4(v4) => {
            let mut a = vec![0u8; 16];
            a[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
            a[2..4].copy_from_slice(&v4.port().to_be_bytes());
            a[4..8].copy_from_slice(&v4.ip().octets());
            a
        }
        std::net::SocketAddr::V6(v6) => {
            let mut a = vec![0u8; 28];
            a[..2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
            a[2..4].copy_from_slice(&v6.port().to_be_bytes());
            a[8..24].copy_from_slice(&v6.ip().octets());
            a[24..28].copy_from_slice(&v6.scope_id().to_ne_bytes());
            a
        }
    }
}

/// `connect(fd, addr, len)`: 0 or errno (async-signal-safe).
pub fn connect_to(fd: i32, addr: &[u8]) -> i32 {
    // SAFETY: connect reads addr.len() bytes of a live buffer.
    result(unsafe { libc::connect(fd, addr.as_ptr().cast(), addr.len() as libc::socklen_t) })
}

/// A new socket (`SOCK_CLOEXEC` added), or -errno (async-signal-safe).
pub fn new_socket(domain: i32, kind: i32) -> i32 {
    // SAFETY: plain socket(2).
    let fd = unsafe { libc::socket(domain, kind | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        -errno()
    } else {
        fd
    }
}

/// A UNIX socket of `kind` bound at `path`, listening with `backlog` when it
/// is a stream socket, non-blocking (so the test can count what it accepts).
pub fn unix_listener(path: &Path, kind: i32, backlog: i32) -> OwnedFd {
    use std::os::fd::FromRawFd;
    let fd = new_socket(libc::AF_UNIX, kind | libc::SOCK_NONBLOCK);
    assert!(fd >= 0, "socket: {}", -fd);
    let addr = sockaddr_un(path.as_os_str().as_bytes());
    // SAFETY: bind with a live address.
    let rc = unsafe { libc::bind(fd, addr.as_ptr().cast(), addr.len() as libc::socklen_t) };
    assert_eq!(rc, 0, "bind {}: {}", path.display(), errno());
    if kind == libc::SOCK_STREAM {
        // SAFETY: listen on our socket.
        assert_eq!(unsafe { libc::listen(fd, backlog) }, 0, "listen");
    }
    // SAFETY: fresh fd.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// Accepts every pending connection on a non-blocking listener; how many.
pub fn accept_all(listener: &OwnedFd) -> usize {
    let mut n = 0;
    loop {
        // SAFETY: accept4 on our listener, no address wanted.
        let fd = unsafe {
            libc::accept4(
                listener.as_raw_fd(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                libc::SOCK_CLOEXEC,
            )
        };
        if fd < 0 {
            assert_eq!(errno(), libc::EAGAIN, "accept");
            return n;
        }
        // SAFETY: the accepted fd is ours.
        unsafe { libc::close(fd) };
        n += 1;
    }
}

/// Accepts on `listener` (non-blocking) until `stop`, in a thread; the count.
pub fn drain_in_thread(
    listener: OwnedFd,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<(usize, OwnedFd)> {
    std::thread::spawn(move || {
        let mut n = 0;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let mut p = libc::pollfd {
                fd: listener.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one live pollfd.
            unsafe { libc::poll(&mut p, 1, 20) };
            n += accept_all(&listener);
        }
        n += accept_all(&listener);
        (n, listener)
    })
}

/// A prepared `execve` of this test binary running only test `name` (its full
/// path, [`test_path`]), with `env` as its whole environment: how a test gets
/// a confined process with threads (a forked child of the harness may not
/// start any).
pub struct Reexec {
    _strings: Vec<CString>,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
}

impl Reexec {
    pub fn new(name: &str, env: &[(&str, String)]) -> Self {
        let exe = std::env::current_exe().unwrap();
        let args = [
            exe.display().to_string(),
            "--exact".into(),
            name.into(),
            "--nocapture".into(),
            "--test-threads=1".into(),
            "-q".into(),
        ];
        let argc = args.len();
        let strings: Vec<CString> = args
            .into_iter()
            .chain(env.iter().map(|(k, v)| format!("{k}={v}")))
            .map(|s| CString::new(s).unwrap())
            .collect();
        let mut argv: Vec<_> = strings[..argc].iter().map(|s| s.as_ptr()).collect();
        argv.push(std::ptr::null());
        let mut envp: Vec<_> = strings[argc..].iter().map(|s| s.as_ptr()).collect();
        envp.push(std::ptr::null());
        Self {
            _strings: strings,
            argv,
            envp,
        }
    }

    /// execve; 127 if it fails (async-signal-safe).
    pub fn exec(&self) -> i32 {
        // SAFETY: NUL-terminated arrays whose strings live in self.
        unsafe { libc::execve(self.argv[0], self.argv.as_ptr(), self.envp.as_ptr()) };
        127
    }
}

/// The libtest name of test `name` in module `module` (`module_path!()`, which
/// starts with this binary's crate name, `it`): what `--exact` matches.
pub fn test_path(module: &str, name: &str) -> String {
    let module = module.split_once("::").map_or("", |(_, rest)| rest);
    if module.is_empty() {
        name.to_owned()
    } else {
        format!("{module}::{name}")
    }
}

/// Set in the process [`isolated`] starts for one test.
pub const ISOLATED_ENV: &str = "IT_ISOLATED";

/// Runs test `name` of `module` (`module_path!()`) in a process of its own,
/// for a test that counts the process's own fds or threads or changes
/// process-wide state while the other tests of this binary run in parallel
/// threads. Returns `true` in that process (the caller runs its body),
/// `false` in the caller's (after asserting the process passed and ran
/// exactly that one test, so a wrong name never reads as success).
pub fn isolated(module: &str, name: &str) -> bool {
    if std::env::var_os(ISOLATED_ENV).is_some() {
        return true;
    }
    let path = test_path(module, name);
    let exe = std::env::current_exe().expect("the test binary's path");
    let out = std::process::Command::new(exe)
        .args([path.as_str(), "--exact", "--test-threads=1", "--nocapture"])
        .env(ISOLATED_ENV, "1")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run the test binary");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("test result: ok. 1 passed;"),
        "{path} in a process of its own: {:?}\nstdout: {stdout}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    false
}

/// The reasons of the refused requests in `log`, in order.
pub fn refusals(log: &BrokerLog) -> Vec<sandbox_broker::Refusal> {
    log.records
        .iter()
        .filter_map(|r| match &r.decision {
            sandbox_broker::BrokerDecision::Refused { reason } => Some(reason.clone()),
            _ => None,
        })
        .collect()
}

/// `lstat` by the test process itself.
pub fn meta(path: &Path) -> std::fs::Metadata {
    std::fs::symlink_metadata(path).expect("stat")
}

/// A pipe (read end, write end), both `O_CLOEXEC`.
pub fn pipe() -> (OwnedFd, OwnedFd) {
    use std::os::fd::FromRawFd;
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two fds.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: fresh fds.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

/// A child action or setup that does nothing (exit code 0).
pub fn nothing() -> i32 {
    0
}
