//! The filter on the real kernel. Each case runs in a forked child that sets
//! `NO_NEW_PRIVS` and installs the filter, so this test process stays
//! unconfined. Every denial has a twin: the same call succeeding, either
//! unconfined or as the allowed variant under the same filter.
//!
//! Children report through their exit code: 0 for success, otherwise the
//! errno. After `fork` the cases use raw libc calls only (glibc's `fork`
//! resets its allocator and thread-stack locks in the child, which the
//! threads case relies on).
#![cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]

use std::ffi::CString;
use std::net::{TcpListener, UdpSocket};
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;

use sandbox_core::{ExpandContext, SandboxPolicy};
use sandbox_seccomp::{compile, Filter, LandlockCoverage};

const SETUP_PRCTL_FAILED: i32 = 250;
const SETUP_APPLY_FAILED: i32 = 251;
const SUCCEEDED_UNEXPECTEDLY: i32 = 252;

fn errno() -> i32 {
    // SAFETY: reads the calling thread's errno.
    unsafe { *libc::__errno_location() }
}

/// 0 if `rc >= 0`, else errno.
fn status(rc: libc::c_long) -> i32 {
    if rc >= 0 {
        0
    } else {
        errno()
    }
}

fn filter(network: bool, deny_subprocess: bool) -> Filter {
    let dir = tempfile::tempdir().unwrap();
    let policy = SandboxPolicy {
        network,
        deny_subprocess,
        write_paths: vec![dir.path().to_string_lossy().into_owned()],
        ..SandboxPolicy::default()
    }
    .resolve(&ExpandContext::default())
    .unwrap();
    compile(&policy, LandlockCoverage { truncate: true }).unwrap()
}

/// Runs `case` in a forked child, confined by `filter` if given; returns its exit code.
fn in_child(filter: Option<&Filter>, case: impl FnOnce() -> i32) -> i32 {
    // SAFETY: the child only makes raw syscalls and leaves with `_exit`.
    unsafe {
        let pid = libc::fork();
        assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
        if pid == 0 {
            if let Some(f) = filter {
                if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                    libc::_exit(SETUP_PRCTL_FAILED);
                }
                if f.apply().is_err() {
                    libc::_exit(SETUP_APPLY_FAILED);
                }
            }
            libc::_exit(case());
        }
        let mut st = 0;
        assert_eq!(libc::waitpid(pid, &mut st, 0), pid);
        assert!(
            libc::WIFEXITED(st),
            "child did not exit normally: status {st:#x}"
        );
        let code = libc::WEXITSTATUS(st);
        assert!(
            code != SETUP_PRCTL_FAILED && code != SETUP_APPLY_FAILED,
            "child setup failed: {code}"
        );
        code
    }
}

fn confined(f: &Filter, case: impl FnOnce() -> i32) -> i32 {
    in_child(Some(f), case)
}

fn unconfined(case: impl FnOnce() -> i32) -> i32 {
    in_child(None, case)
}

// ---------------------------------------------------------------- allowed twins

extern "C" fn thread_body(_: *mut libc::c_void) -> *mut libc::c_void {
    42usize as *mut libc::c_void
}

fn spawn_and_join_thread() -> i32 {
    // SAFETY: plain pthread calls with valid pointers.
    unsafe {
        let mut t: libc::pthread_t = 0;
        let rc = libc::pthread_create(&mut t, std::ptr::null(), thread_body, std::ptr::null_mut());
        if rc != 0 {
            return rc;
        }
        let mut ret: *mut libc::c_void = std::ptr::null_mut();
        let rc = libc::pthread_join(t, &mut ret);
        if rc != 0 {
            return rc;
        }
        if ret as usize == 42 {
            0
        } else {
            SUCCEEDED_UNEXPECTEDLY
        }
    }
}

#[test]
fn threads_work_even_without_subprocesses() {
    for (net, deny) in [(true, false), (false, true)] {
        assert_eq!(
            confined(&filter(net, deny), spawn_and_join_thread),
            0,
            "net={net} deny={deny}"
        );
    }
}

#[test]
fn socketpair_and_null_address_sendto_work_without_network() {
    let f = filter(false, false);
    let code = confined(&f, || unsafe {
        let mut sv = [0; 2];
        if libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, sv.as_mut_ptr()) != 0 {
            return errno();
        }
        let n = libc::sendto(sv[0], b"x".as_ptr().cast(), 1, 0, std::ptr::null(), 0);
        if n != 1 {
            return status(n as libc::c_long).max(SUCCEEDED_UNEXPECTEDLY);
        }
        let mut b = [0u8; 1];
        status(libc::read(sv[1], b.as_mut_ptr().cast(), 1) as libc::c_long)
    });
    assert_eq!(code, 0);
}

#[test]
fn pipe_write_works() {
    let f = filter(false, true);
    let code = confined(&f, || unsafe {
        let mut p = [0; 2];
        if libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            return errno();
        }
        status(libc::write(p[1], b"hello".as_ptr().cast(), 5) as libc::c_long)
    });
    assert_eq!(code, 0);
}

#[test]
fn exec_works_even_without_subprocesses() {
    let path = CString::new("/bin/true").unwrap();
    let argv = [path.as_ptr(), std::ptr::null()];
    let envp = [std::ptr::null::<libc::c_char>()];
    for deny in [false, true] {
        let f = filter(false, deny);
        // /bin/true exits 0 only if exec and the dynamic loader worked under the filter.
        let code = confined(&f, || unsafe {
            libc::execve(path.as_ptr(), argv.as_ptr(), envp.as_ptr());
            errno()
        });
        assert_eq!(code, 0, "deny_subprocess={deny}");
    }
}

// ---------------------------------------------------------------- network

fn tcp_connect(port: u16) -> i32 {
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
        if fd < 0 {
            return 200; // socket creation is allowed; report distinctly
        }
        let addr = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: port.to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from_be_bytes([127, 0, 0, 1]).to_be(),
            },
            sin_zero: [0; 8],
        };
        status(libc::connect(
            fd,
            (&addr as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        ) as libc::c_long)
    }
}

#[test]
fn connect_to_loopback_is_denied_without_network() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    assert_eq!(
        confined(&filter(true, false), || tcp_connect(port)),
        0,
        "allowed twin"
    );
    assert_eq!(
        confined(&filter(false, false), || tcp_connect(port)),
        libc::EPERM
    );
}

fn udp_sendto(port: u16, fd: libc::c_int) -> i32 {
    unsafe {
        let addr = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: port.to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from_be_bytes([127, 0, 0, 1]).to_be(),
            },
            sin_zero: [0; 8],
        };
        let n = libc::sendto(
            fd,
            b"ping".as_ptr().cast(),
            4,
            0,
            (&addr as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        );
        status(n as libc::c_long)
    }
}

#[test]
fn udp_sendto_with_address_is_denied_without_network() {
    let receiver = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = receiver.local_addr().unwrap().port();
    // The UDP socket is created before the filter, so sendto itself is judged.
    let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
    let fd = sender.as_raw_fd();
    assert_eq!(
        confined(&filter(true, false), || udp_sendto(port, fd)),
        0,
        "allowed twin"
    );
    assert_eq!(
        confined(&filter(false, false), || udp_sendto(port, fd)),
        libc::EPERM
    );
    let udp_socket =
        || unsafe { status(libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0) as libc::c_long) };
    assert_eq!(
        confined(&filter(true, false), udp_socket),
        0,
        "allowed twin"
    );
    assert_eq!(confined(&filter(false, false), udp_socket), libc::EPERM);
}

#[test]
fn tcp_socket_may_bind_but_not_listen_without_network() {
    let f = filter(false, false);
    let bind_then = |listen: bool| unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
        if fd < 0 {
            return 200;
        }
        let addr = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: 0,
            sin_addr: libc::in_addr {
                s_addr: u32::from_be_bytes([127, 0, 0, 1]).to_be(),
            },
            sin_zero: [0; 8],
        };
        let rc = libc::bind(
            fd,
            (&addr as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        );
        if rc != 0 || !listen {
            return status(rc as libc::c_long);
        }
        status(libc::listen(fd, 1) as libc::c_long)
    };
    assert_eq!(confined(&f, move || bind_then(false)), 0);
    assert_eq!(confined(&f, move || bind_then(true)), libc::EPERM);
}

// ---------------------------------------------------------------- subprocesses

fn fork_and_reap() -> i32 {
    unsafe {
        let pid = libc::fork();
        if pid < 0 {
            return errno();
        }
        if pid == 0 {
            libc::_exit(0);
        }
        let mut st = 0;
        libc::waitpid(pid, &mut st, 0);
        0
    }
}

#[test]
fn fork_is_denied_under_deny_subprocess() {
    assert_eq!(
        confined(&filter(true, false), fork_and_reap),
        0,
        "allowed twin"
    );
    assert_eq!(confined(&filter(true, true), fork_and_reap), libc::EPERM);
}

#[test]
fn clone3_answers_enosys_and_namespaces_are_refused() {
    let f = filter(true, false);
    let clone3 = || unsafe {
        // struct clone_args is at least 64 bytes; an all-zero one would fork.
        let args = [0u64; 11];
        let rc = libc::syscall(libc::SYS_clone3, args.as_ptr(), 88usize);
        if rc == 0 {
            libc::_exit(0);
        }
        if rc > 0 {
            let mut st = 0;
            libc::waitpid(rc as libc::pid_t, &mut st, 0);
        }
        status(rc)
    };
    assert_eq!(unconfined(clone3), 0, "clone3 works on this kernel");
    assert_eq!(confined(&f, clone3), libc::ENOSYS);
    let unshare_user = || unsafe { status(libc::unshare(libc::CLONE_NEWUSER) as libc::c_long) };
    assert_eq!(unconfined(unshare_user), 0, "unconfined twin");
    assert_eq!(confined(&f, unshare_user), libc::EPERM);
}

// ---------------------------------------------------------------- always denied

#[test]
fn io_uring_setup_is_denied() {
    let setup = || unsafe {
        let mut params = [0u8; 120]; // struct io_uring_params
        let fd = libc::syscall(libc::SYS_io_uring_setup, 1u32, params.as_mut_ptr());
        status(fd)
    };
    assert_eq!(unconfined(setup), 0, "io_uring works on this kernel");
    assert_eq!(confined(&filter(true, false), setup), libc::EPERM);
}

#[test]
fn chmod_is_denied_and_the_mode_stays() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("f");
    std::fs::write(&file, b"x").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let c = CString::new(file.as_os_str().as_encoded_bytes()).unwrap();
    let mode = || std::fs::metadata(&file).unwrap().permissions().mode() & 0o7777;

    let chmod = |m: libc::mode_t| {
        let p = c.as_ptr();
        move || unsafe { status(libc::chmod(p, m) as libc::c_long) }
    };
    assert_eq!(unconfined(chmod(0o640)), 0, "unconfined twin");
    assert_eq!(mode(), 0o640);
    let f = filter(true, false);
    assert_eq!(confined(&f, chmod(0o777)), libc::EPERM);
    assert_eq!(mode(), 0o640, "mode unchanged after the denied chmod");
    let fchmod = {
        let p = c.as_ptr();
        move || unsafe {
            let fd = libc::open(p, libc::O_RDONLY);
            if fd < 0 {
                return 200;
            }
            status(libc::fchmod(fd, 0o777) as libc::c_long)
        }
    };
    assert_eq!(confined(&f, fchmod), libc::EPERM);
    assert_eq!(mode(), 0o640);
}

#[test]
fn ptrace_is_denied() {
    let traceme = || unsafe {
        status(libc::ptrace(
            libc::PTRACE_TRACEME,
            0,
            std::ptr::null_mut::<libc::c_void>(),
            std::ptr::null_mut::<libc::c_void>(),
        ))
    };
    assert_eq!(unconfined(traceme), 0, "unconfined twin");
    assert_eq!(confined(&filter(true, false), traceme), libc::EPERM);
}

#[test]
fn tiocsti_with_high_bits_is_denied_while_other_ioctls_work() {
    let (mut master, mut slave) = (0, 0);
    // SAFETY: openpty with valid out-pointers.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
    let high: u64 = 0xdead_beef_0000_0000;
    let ioctl = move |req: u64| {
        move || unsafe {
            let mut buf = [b'x'; 64];
            status(libc::syscall(libc::SYS_ioctl, slave, req, buf.as_mut_ptr()))
        }
    };
    let f = filter(false, true);
    assert_eq!(
        confined(&f, ioctl(high | libc::TIOCGWINSZ as u64)),
        0,
        "allowed twin"
    );
    assert_eq!(
        unconfined(ioctl(high | libc::TIOCSTI as u64)),
        0,
        "kernel ignores the high bits"
    );
    assert_eq!(
        confined(&f, ioctl(high | libc::TIOCSTI as u64)),
        libc::EPERM
    );
    assert_eq!(confined(&f, ioctl(libc::TIOCSTI as u64)), libc::EPERM);
    unsafe {
        libc::close(master);
        libc::close(slave);
    }
}

#[test]
fn personality_only_queries() {
    let f = filter(true, false);
    let set = |p: u64| move || unsafe { status(libc::syscall(libc::SYS_personality, p)) };
    assert_eq!(confined(&f, set(0xffff_ffff)), 0, "query allowed");
    assert_eq!(confined(&f, set(0)), 0, "PER_LINUX allowed");
    assert_eq!(
        unconfined(set(libc::ADDR_NO_RANDOMIZE as u64)),
        0,
        "unconfined twin"
    );
    assert_eq!(
        confined(&f, set(libc::ADDR_NO_RANDOMIZE as u64)),
        libc::EPERM
    );
}

#[test]
fn unknown_syscalls_answer_enosys() {
    let f = filter(true, false);
    // 500 is unassigned on x86_64 and aarch64; unconfined the kernel says ENOSYS too.
    let call = || unsafe { status(libc::syscall(500)) };
    assert_eq!(unconfined(call), libc::ENOSYS);
    assert_eq!(confined(&f, call), libc::ENOSYS);
    // A known, harmless syscall denied by the table answers EPERM instead.
    let acct = || unsafe {
        status(libc::syscall(
            libc::SYS_acct,
            std::ptr::null::<libc::c_char>(),
        ))
    };
    assert_eq!(confined(&f, acct), libc::EPERM);
}
