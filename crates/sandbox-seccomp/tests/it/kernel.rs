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
use sandbox_seccomp::{compile, Filter};

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
    compile(&policy).unwrap()
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

/// A sibling process outside the confined child (a child of this test that
/// allows any tracer and waits); killed and reaped on drop.
struct Sibling(libc::pid_t);

impl Sibling {
    fn start() -> Sibling {
        // SAFETY: the child only makes raw syscalls and never returns.
        unsafe {
            let pid = libc::fork();
            assert!(pid >= 0);
            if pid == 0 {
                libc::prctl(libc::PR_SET_PTRACER, libc::PR_SET_PTRACER_ANY, 0, 0, 0);
                loop {
                    libc::pause();
                }
            }
            Sibling(pid)
        }
    }
}

impl Drop for Sibling {
    fn drop(&mut self) {
        // SAFETY: our own child.
        unsafe {
            libc::kill(self.0, libc::SIGKILL);
            libc::waitpid(self.0, std::ptr::null_mut(), 0);
        }
    }
}

/// PTRACE_ATTACH and process_vm_writev on another process (a sibling
/// outside the filter) are refused; twins: both reach the same sibling
/// unconfined (the write aims at an unmapped address, so the permitted call
/// answers EFAULT and nothing of the sibling changes).
#[test]
fn other_processes_are_neither_traced_nor_written() {
    let sibling = Sibling::start();
    let pid = sibling.0;
    let attach = move || unsafe {
        status(libc::ptrace(
            libc::PTRACE_ATTACH,
            pid,
            std::ptr::null_mut::<libc::c_void>(),
            std::ptr::null_mut::<libc::c_void>(),
        ))
    };
    let write = move || unsafe {
        let byte = [0u8; 1];
        let local = libc::iovec {
            iov_base: byte.as_ptr() as *mut libc::c_void,
            iov_len: 1,
        };
        let remote = libc::iovec {
            iov_base: 16 as *mut libc::c_void,
            iov_len: 1,
        };
        status(libc::process_vm_writev(pid, &local, 1, &remote, 1, 0) as libc::c_long)
    };
    let f = filter(true, false);
    assert_eq!(confined(&f, attach), libc::EPERM);
    assert_eq!(confined(&f, write), libc::EPERM);
    assert_eq!(
        unconfined(write),
        libc::EFAULT,
        "unconfined twin reaches the sibling"
    );
    // Last: the attach stops the sibling (its tracer exits at once).
    assert_eq!(unconfined(attach), 0, "unconfined twin");
}

/// POSIX message queues are refused (created or opened); twin: the same
/// queue is created and opened unconfined.
#[test]
fn posix_message_queues_are_refused() {
    let name = CString::new(format!("/sandbox-kernel-test-{}", std::process::id())).unwrap();
    let n = name.as_ptr();
    let open = move |flags: libc::c_int| {
        move || unsafe {
            let q = libc::mq_open(n, flags, 0o600, std::ptr::null_mut::<libc::mq_attr>());
            if q < 0 {
                return errno();
            }
            libc::mq_close(q);
            0
        }
    };
    let f = filter(true, false);
    assert_eq!(
        confined(&f, open(libc::O_RDWR | libc::O_CREAT)),
        libc::EPERM
    );
    assert_eq!(
        unconfined(open(libc::O_RDONLY)),
        libc::ENOENT,
        "nothing was made"
    );
    assert_eq!(
        unconfined(open(libc::O_RDWR | libc::O_CREAT)),
        0,
        "unconfined twin"
    );
    assert_eq!(
        confined(&f, open(libc::O_RDONLY)),
        libc::EPERM,
        "an existing queue"
    );
    // SAFETY: a NUL-terminated name.
    assert_eq!(unsafe { libc::mq_unlink(n) }, 0);
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
        confined(&f, ioctl(high | libc::TIOCGWINSZ)),
        0,
        "allowed twin"
    );
    assert_eq!(
        unconfined(ioctl(high | libc::TIOCSTI)),
        0,
        "kernel ignores the high bits"
    );
    assert_eq!(confined(&f, ioctl(high | libc::TIOCSTI)), libc::EPERM);
    assert_eq!(confined(&f, ioctl(libc::TIOCSTI)), libc::EPERM);
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

// ------------------------------------------------- hardening: each beside its twin

fn c_path(p: &std::path::Path) -> CString {
    CString::new(p.to_str().unwrap()).unwrap()
}

/// A scratch file with content, world-readable (the filter alone is tested
/// here, without Landlock: the twin proves the call itself would work).
fn scratch_file(content: &[u8]) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("f");
    std::fs::write(&file, content).unwrap();
    (dir, file)
}

#[test]
fn read_only_open_with_o_trunc_is_refused_and_truncates_nothing() {
    let f = filter(true, false);
    let (_dir, file) = scratch_file(b"keep me");
    let path = c_path(&file);
    for (name, nr) in [("openat", libc::SYS_openat), ("open", -1)] {
        let code = confined(&f, || unsafe {
            let fd = if nr == libc::SYS_openat {
                libc::openat(
                    libc::AT_FDCWD,
                    path.as_ptr(),
                    libc::O_RDONLY | libc::O_TRUNC,
                )
            } else {
                #[cfg(target_arch = "x86_64")]
                {
                    libc::syscall(
                        libc::SYS_open,
                        path.as_ptr(),
                        libc::O_RDONLY | libc::O_TRUNC,
                        0,
                    ) as i32
                }
                #[cfg(not(target_arch = "x86_64"))]
                {
                    -1
                }
            };
            status(fd.into())
        });
        if cfg!(target_arch = "x86_64") || name == "openat" {
            assert_eq!(code, libc::EPERM, "{name}(O_RDONLY|O_TRUNC)");
        }
        assert_eq!(std::fs::read(&file).unwrap(), b"keep me", "{name}");
    }
    // Twins: a read-only open and a writable O_TRUNC open under the same filter.
    let code = confined(&f, || unsafe {
        status(libc::open(path.as_ptr(), libc::O_RDONLY).into())
    });
    assert_eq!(code, 0);
    let code = confined(&f, || unsafe {
        status(libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_TRUNC).into())
    });
    assert_eq!(code, 0);
    assert_eq!(
        std::fs::read(&file).unwrap(),
        b"",
        "the writable twin truncates"
    );
}

#[test]
fn access_mode_3_and_openat2_are_refused() {
    let f = filter(true, false);
    let (_dir, file) = scratch_file(b"x");
    let path = c_path(&file);
    assert_eq!(
        unconfined(|| unsafe { status(libc::open(path.as_ptr(), 3).into()) }),
        0
    );
    assert_eq!(
        confined(&f, || unsafe {
            status(libc::open(path.as_ptr(), 3).into())
        }),
        libc::EPERM
    );
    assert_eq!(
        confined(&f, || unsafe {
            status(libc::open(path.as_ptr(), libc::O_RDWR).into())
        }),
        0
    );
    let how = [0u64; 3]; // flags O_RDONLY, mode 0, resolve 0
    let openat2 = || unsafe {
        status(libc::syscall(
            libc::SYS_openat2,
            libc::AT_FDCWD,
            path.as_ptr(),
            how.as_ptr(),
            24usize,
        ))
    };
    assert_eq!(unconfined(openat2), 0);
    assert_eq!(confined(&f, openat2), libc::ENOSYS);
}

#[test]
fn set_id_creation_modes_are_refused() {
    let f = filter(true, false);
    let dir = tempfile::tempdir().unwrap();
    for (i, mode) in [0o4755u32, 0o2755, 0o6700].into_iter().enumerate() {
        let p = c_path(&dir.path().join(format!("suid{i}")));
        let open = || unsafe {
            status(libc::open(p.as_ptr(), libc::O_CREAT | libc::O_WRONLY, mode).into())
        };
        let openat_tmp = || unsafe {
            let d = c_path(dir.path());
            status(libc::open(d.as_ptr(), libc::O_TMPFILE | libc::O_WRONLY, mode).into())
        };
        let mknod = || unsafe { status(libc::mknod(p.as_ptr(), libc::S_IFREG | mode, 0).into()) };
        assert_eq!(confined(&f, open), libc::EPERM, "open O_CREAT {mode:o}");
        assert_eq!(confined(&f, openat_tmp), libc::EPERM, "O_TMPFILE {mode:o}");
        assert_eq!(confined(&f, mknod), libc::EPERM, "mknod {mode:o}");
        assert!(!dir.path().join(format!("suid{i}")).exists());
    }
    // Twins: the same calls without set-id bits create the files.
    let p = c_path(&dir.path().join("plain"));
    let q = c_path(&dir.path().join("node"));
    let code = confined(&f, || unsafe {
        let a = status(libc::open(p.as_ptr(), libc::O_CREAT | libc::O_WRONLY, 0o755).into());
        if a != 0 {
            return a;
        }
        status(libc::mknod(q.as_ptr(), libc::S_IFREG | 0o644, 0).into())
    });
    assert_eq!(code, 0);
    assert!(dir.path().join("plain").exists() && dir.path().join("node").exists());
    // Without O_CREAT the mode is ignored by the kernel and by the filter.
    let code = confined(&f, || unsafe {
        status(libc::open(p.as_ptr(), libc::O_RDONLY, 0o4755).into())
    });
    assert_eq!(code, 0);
}

/// `FS_IOC_GETFLAGS` / `FS_IOC_SETFLAGS` with a `long` argument.
const FS_IOC_GETFLAGS: libc::c_ulong = 0x8008_6601;
const FS_IOC_SETFLAGS: libc::c_ulong = 0x4008_6602;
const FS_NODUMP_FL: libc::c_long = 0x40;

#[test]
fn inode_flag_ioctls_on_a_read_only_fd_are_refused() {
    let f = filter(true, false);
    // A filesystem that supports inode flags (tmpfs may not): the target dir.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let file = dir.path().join("flags");
    std::fs::write(&file, b"x").unwrap();
    let path = c_path(&file);
    let set_nodump = || unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_RDONLY);
        if fd < 0 {
            return errno();
        }
        let mut flags: libc::c_long = 0;
        if libc::ioctl(fd, FS_IOC_GETFLAGS, &mut flags) != 0 {
            return errno();
        }
        flags |= FS_NODUMP_FL;
        status(libc::ioctl(fd, FS_IOC_SETFLAGS, &flags).into())
    };
    let supported = unconfined(set_nodump);
    if supported == libc::ENOTTY || supported == libc::EOPNOTSUPP {
        panic!(
            "{}: this filesystem has no inode flags; the test needs one",
            dir.path().display()
        );
    }
    assert_eq!(supported, 0, "the unconfined twin sets the flag");
    let flags = || {
        let mut v: libc::c_long = 0;
        let fd = std::fs::File::open(&file).unwrap();
        // SAFETY: valid fd and out-pointer.
        assert_eq!(
            unsafe { libc::ioctl(fd.as_raw_fd(), FS_IOC_GETFLAGS, &mut v) },
            0
        );
        v
    };
    // Clear it again unconfined, then try confined.
    let clear = || unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_RDONLY);
        let zero: libc::c_long = 0;
        status(libc::ioctl(fd, FS_IOC_SETFLAGS, &zero).into())
    };
    assert_eq!(unconfined(clear), 0);
    assert_eq!(flags() & FS_NODUMP_FL, 0);
    assert_eq!(confined(&f, set_nodump), libc::EPERM);
    assert_eq!(
        flags() & FS_NODUMP_FL,
        0,
        "the confined call changed nothing"
    );
    // The read twin works under the filter.
    let get = || unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_RDONLY);
        let mut v: libc::c_long = 0;
        status(libc::ioctl(fd, FS_IOC_GETFLAGS, &mut v).into())
    };
    assert_eq!(confined(&f, get), 0);
}

#[test]
fn terminal_state_that_outlives_the_run_is_refused_on_a_pty() {
    let f = filter(true, false);
    // SAFETY: plain pty setup in the test process.
    let master = unsafe { libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY) };
    assert!(master >= 0);
    unsafe {
        assert_eq!(libc::grantpt(master), 0);
        assert_eq!(libc::unlockpt(master), 0);
    }
    let name = unsafe { std::ffi::CStr::from_ptr(libc::ptsname(master)) }.to_owned();
    let slave = unsafe { libc::open(name.as_ptr(), libc::O_RDWR | libc::O_NOCTTY) };
    assert!(slave >= 0);
    let set_disc = |disc: libc::c_int| {
        move || unsafe { status(libc::ioctl(slave, libc::TIOCSETD, &disc).into()) }
    };
    // Twin: unconfined, setting the line discipline it already has works.
    assert_eq!(unconfined(set_disc(0)), 0);
    for request in [libc::TIOCSETD, libc::TIOCEXCL, libc::TIOCSTI] {
        let one: libc::c_int = 0;
        let code = confined(&f, || unsafe {
            status(libc::ioctl(slave, request, &one).into())
        });
        assert_eq!(code, libc::EPERM, "ioctl {request:#x}");
    }
    // Window size and termios keep working.
    let code = confined(&f, || unsafe {
        let mut ws: libc::winsize = std::mem::zeroed();
        if libc::ioctl(slave, libc::TIOCGWINSZ, &mut ws) != 0 {
            return errno();
        }
        ws.ws_col = 100;
        if libc::ioctl(slave, libc::TIOCSWINSZ, &ws) != 0 {
            return errno();
        }
        let mut t: libc::termios = std::mem::zeroed();
        if libc::tcgetattr(slave, &mut t) != 0 {
            return errno();
        }
        t.c_lflag &= !libc::ECHO;
        status(libc::tcsetattr(slave, libc::TCSANOW, &t).into())
    });
    assert_eq!(code, 0);
    unsafe {
        libc::close(slave);
        libc::close(master);
    }
}

/// A pty pair for the test process: (master, slave), neither the
/// controlling terminal.
fn pty_pair() -> (libc::c_int, libc::c_int) {
    // SAFETY: plain pty setup in the test process.
    unsafe {
        let master = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
        assert!(master >= 0);
        assert_eq!(libc::grantpt(master), 0);
        assert_eq!(libc::unlockpt(master), 0);
        let name = std::ffi::CStr::from_ptr(libc::ptsname(master)).to_owned();
        let slave = libc::open(
            name.as_ptr(),
            libc::O_RDWR | libc::O_NOCTTY | libc::O_NONBLOCK,
        );
        assert!(slave >= 0);
        (master, slave)
    }
}

/// Whether a write to the pty's slave goes through now (`false`: the
/// output is stopped, the non-blocking write answers `EAGAIN`).
fn pty_writes(slave: libc::c_int) -> bool {
    // SAFETY: writes one byte from a static buffer.
    let n = unsafe { libc::write(slave, b"x".as_ptr().cast(), 1) };
    assert!(n == 1 || errno() == libc::EAGAIN, "write: {}", errno());
    n == 1
}

/// R6a F1: `tcflow(TCOOFF)` stopped the user's terminal for good (with
/// `IXON` cleared, Ctrl-Q is plain input): every later writer, the runner's
/// summary line and the user's shell, blocked. Refused, as is `TCIOFF`;
/// `TCOON` and `TCION` work, and termios changes keep working.
#[test]
fn stopping_a_terminals_output_is_refused_and_starting_it_works() {
    let f = filter(true, false);
    let (master, slave) = pty_pair();
    let flow = |action: libc::c_int| move || unsafe { status(libc::tcflow(slave, action).into()) };
    // Twin: unconfined, TCOOFF stops the output, TCOON starts it again.
    assert!(pty_writes(slave));
    assert_eq!(unconfined(flow(libc::TCOOFF)), 0);
    assert!(
        !pty_writes(slave),
        "the unconfined TCOOFF stopped the output"
    );
    assert_eq!(unconfined(flow(libc::TCOON)), 0);
    assert!(pty_writes(slave));
    // Confined: both stops refused, the output still flows.
    assert_eq!(confined(&f, flow(libc::TCOOFF)), libc::EPERM);
    assert_eq!(confined(&f, flow(libc::TCIOFF)), libc::EPERM);
    assert!(pty_writes(slave), "the confined TCOOFF stopped nothing");
    // The same request with high bits in the action is none of the four.
    let high = confined(&f, || unsafe {
        status(libc::ioctl(slave, libc::TCXONC, (1u64 << 32) as libc::c_ulong).into())
    });
    assert_eq!(high, libc::EINVAL);
    // Starting works confined (after an unconfined stop), and so do
    // TCION and a termios change (IXON cleared).
    assert_eq!(unconfined(flow(libc::TCOOFF)), 0);
    assert!(!pty_writes(slave));
    assert_eq!(confined(&f, flow(libc::TCOON)), 0);
    assert!(pty_writes(slave), "the confined TCOON started the output");
    assert_eq!(confined(&f, flow(libc::TCION)), 0);
    let clear_ixon = confined(&f, || unsafe {
        let mut t: libc::termios = std::mem::zeroed();
        if libc::tcgetattr(slave, &mut t) != 0 {
            return errno();
        }
        t.c_iflag &= !libc::IXON;
        status(libc::tcsetattr(slave, libc::TCSANOW, &t).into())
    });
    assert_eq!(clear_ixon, 0);
    unsafe {
        libc::close(slave);
        libc::close(master);
    }
}

/// R6a F4: through a read-only fd the owner of a file (a root command owns
/// every root file it can read) took a read lease on a file outside the
/// write paths, and a host process opening it for writing blocked for the
/// lease-break time. `F_SETLEASE` answers `EACCES` (the kernel's answer to
/// a lease the caller may not take); the lease read and file locks work.
#[test]
fn a_lease_is_refused_and_file_locks_work() {
    let f = filter(true, false);
    let (_dir, file) = scratch_file(b"data");
    let path = c_path(&file);
    let read_only = move || unsafe { libc::open(path.as_ptr(), libc::O_RDONLY) };
    let lease = |kind: libc::c_int| {
        let open = read_only.clone();
        move || unsafe {
            let fd = open();
            if fd < 0 {
                return errno();
            }
            status(libc::fcntl(fd, libc::F_SETLEASE, kind).into())
        }
    };
    // Twin: the owner, unconfined, takes the read lease. (EAGAIN while a
    // writable fd to the file is open anywhere: a concurrent test's fork
    // may briefly hold the one that wrote it.)
    let mut twin = libc::EAGAIN;
    for _ in 0..100 {
        twin = unconfined(lease(libc::F_RDLCK));
        if twin != libc::EAGAIN {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(twin, 0);
    assert_eq!(confined(&f, lease(libc::F_RDLCK)), libc::EACCES);
    assert_eq!(confined(&f, lease(libc::F_WRLCK)), libc::EACCES);
    // The locks and the lease query stay allowed.
    let open = read_only.clone();
    let locks = confined(&f, move || unsafe {
        let fd = open();
        if fd < 0 {
            return errno();
        }
        if libc::flock(fd, libc::LOCK_SH | libc::LOCK_NB) != 0 {
            return errno();
        }
        let mut lock: libc::flock = std::mem::zeroed();
        lock.l_type = libc::F_RDLCK as libc::c_short;
        if libc::fcntl(fd, libc::F_SETLK, &lock) != 0 {
            return errno();
        }
        let held = libc::fcntl(fd, libc::F_GETLEASE);
        if held != libc::F_UNLCK {
            return if held < 0 {
                errno()
            } else {
                SUCCEEDED_UNEXPECTEDLY
            };
        }
        0
    });
    assert_eq!(locks, 0);
}

#[test]
fn limits_and_scheduling_of_other_processes_are_refused() {
    let f = filter(true, false);
    // The target: this test process (the child's parent), as the runner would be.
    let parent = std::process::id() as libc::pid_t;
    let before = unsafe {
        let mut r: libc::rlimit = std::mem::zeroed();
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
        r
    };
    let lower_parent = move || unsafe {
        let r = libc::rlimit {
            rlim_cur: 16,
            rlim_max: before.rlim_max,
        };
        status(libc::prlimit(parent, libc::RLIMIT_NOFILE, &r, std::ptr::null_mut()).into())
    };
    assert_eq!(confined(&f, lower_parent), libc::EPERM);
    let now = unsafe {
        let mut r: libc::rlimit = std::mem::zeroed();
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
        r
    };
    assert_eq!(
        now.rlim_cur, before.rlim_cur,
        "the parent's limit is unchanged"
    );
    // Twin: the caller's own limit (pid 0), which is what setrlimit uses.
    let own = move || unsafe {
        let r = libc::rlimit {
            rlim_cur: 16,
            rlim_max: before.rlim_max,
        };
        status(libc::prlimit(0, libc::RLIMIT_NOFILE, &r, std::ptr::null_mut()).into())
    };
    assert_eq!(confined(&f, own), 0);
    type Case = Box<dyn Fn() -> i32>;
    let others: [(&str, Case); 4] = [
        (
            "setpriority(PRIO_PROCESS, parent)",
            Box::new(move || unsafe {
                status(libc::setpriority(libc::PRIO_PROCESS, parent as u32, 0).into())
            }),
        ),
        (
            "setpriority(PRIO_USER)",
            Box::new(|| unsafe { status(libc::setpriority(libc::PRIO_USER, 0, 0).into()) }),
        ),
        (
            "sched_setaffinity(parent)",
            Box::new(move || unsafe {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set);
                status(libc::sched_setaffinity(parent, std::mem::size_of_val(&set), &set).into())
            }),
        ),
        (
            "sched_setscheduler(parent)",
            Box::new(move || unsafe {
                let p = libc::sched_param { sched_priority: 0 };
                status(libc::sched_setscheduler(parent, libc::SCHED_OTHER, &p).into())
            }),
        ),
    ];
    for (name, case) in &others {
        assert_eq!(unconfined(case), 0, "{name} works unconfined");
        assert_eq!(confined(&f, case), libc::EPERM, "{name}");
    }
    let own_sched = || unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set);
        let a = status(libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set).into());
        if a != 0 {
            return a;
        }
        status(libc::setpriority(libc::PRIO_PROCESS, 0, 1).into())
    };
    assert_eq!(confined(&f, own_sched), 0);
}

#[test]
fn a_nested_filter_may_narrow_but_never_listen() {
    let f = filter(true, false);
    // A one-instruction "allow everything" program.
    let install = |flags: libc::c_ulong| {
        move || unsafe {
            let insn = [libc::sock_filter {
                code: 0x06,
                jt: 0,
                jf: 0,
                k: 0x7fff_0000,
            }];
            let prog = libc::sock_fprog {
                len: 1,
                filter: insn.as_ptr() as *mut _,
            };
            status(libc::syscall(
                libc::SYS_seccomp,
                1, /* SET_MODE_FILTER */
                flags,
                &prog,
            ))
        }
    };
    assert_eq!(confined(&f, install(0)), 0, "a plain nested filter");
    assert_eq!(confined(&f, install(8 /* NEW_LISTENER */)), libc::EPERM);
}

#[test]
fn system_v_ipc_is_refused() {
    let f = filter(true, false);
    let shm = || unsafe {
        let id = libc::shmget(libc::IPC_PRIVATE, 4096, libc::IPC_CREAT | 0o600);
        if id < 0 {
            return errno();
        }
        libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut());
        0
    };
    let sem = || unsafe {
        let id = libc::semget(libc::IPC_PRIVATE, 1, 0o600);
        if id >= 0 {
            libc::semctl(id, 0, libc::IPC_RMID);
        }
        status(id.into())
    };
    let msg = || unsafe {
        let id = libc::msgget(libc::IPC_PRIVATE, 0o600);
        if id >= 0 {
            libc::msgctl(id, libc::IPC_RMID, std::ptr::null_mut());
        }
        status(id.into())
    };
    // Each kind beside its twin: the same call works unconfined.
    for (kind, call) in [("shm", shm as fn() -> i32), ("sem", sem), ("msg", msg)] {
        assert_eq!(unconfined(call), 0, "{kind}: unconfined twin");
        assert_eq!(confined(&f, call), libc::EPERM, "{kind}");
    }
}

#[test]
fn datagram_socketpairs_are_refused_without_network() {
    let f = filter(false, false);
    let pair = |ty: libc::c_int| {
        move || unsafe {
            let mut sv = [0; 2];
            status(libc::socketpair(libc::AF_UNIX, ty, 0, sv.as_mut_ptr()).into())
        }
    };
    assert_eq!(confined(&f, pair(libc::SOCK_DGRAM)), libc::EPERM);
    assert_eq!(
        confined(&f, pair(libc::SOCK_DGRAM | libc::SOCK_CLOEXEC)),
        libc::EPERM
    );
    assert_eq!(confined(&f, pair(libc::SOCK_STREAM)), 0);
    assert_eq!(
        confined(&f, pair(libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC)),
        0
    );
    // With network on, datagram pairs stay available.
    assert_eq!(confined(&filter(true, false), pair(libc::SOCK_DGRAM)), 0);
}

/// A host datagram socket is not reachable by an addressed sendmsg from any
/// socket the network-off filter lets the process create.
#[test]
fn addressed_sendmsg_reaches_no_host_socket_without_network() {
    use std::os::unix::net::UnixDatagram;
    let dir = tempfile::tempdir().unwrap();
    let host_path = dir.path().join("host.sock");
    let host = UnixDatagram::bind(&host_path).unwrap();
    host.set_nonblocking(true).unwrap();
    let f = filter(false, false);
    let p = host_path.clone();
    let send_from = |ty: libc::c_int| {
        let p = p.clone();
        move || unsafe {
            let s = libc::socket(libc::AF_UNIX, ty, 0);
            if s < 0 {
                return errno();
            }
            let mut addr: libc::sockaddr_un = std::mem::zeroed();
            addr.sun_family = libc::AF_UNIX as u16;
            for (d, b) in addr.sun_path.iter_mut().zip(p.to_str().unwrap().bytes()) {
                *d = b as libc::c_char;
            }
            let mut byte = *b"x";
            let mut iov = libc::iovec {
                iov_base: byte.as_mut_ptr().cast(),
                iov_len: 1,
            };
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_name = (&mut addr as *mut libc::sockaddr_un).cast();
            msg.msg_namelen = std::mem::size_of::<libc::sockaddr_un>() as u32;
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            status(libc::sendmsg(s, &msg, 0) as libc::c_long)
        }
    };
    // Twin: unconfined, a datagram socket reaches the host socket.
    assert_eq!(unconfined(send_from(libc::SOCK_DGRAM)), 0);
    let mut buf = [0u8; 4];
    assert_eq!(host.recv(&mut buf).unwrap(), 1);
    assert_eq!(confined(&f, send_from(libc::SOCK_DGRAM)), libc::EPERM);
    assert_ne!(confined(&f, send_from(libc::SOCK_STREAM)), 0);
    assert_ne!(confined(&f, send_from(libc::SOCK_SEQPACKET)), 0);
    assert!(
        host.recv(&mut buf).is_err(),
        "nothing reached the host socket"
    );
}

/// Network on, every optional part off: the base the single-feature tests
/// add one part to.
fn network_on() -> sandbox_seccomp::FilterSpec {
    sandbox_seccomp::FilterSpec {
        network: true,
        deny_subprocess: false,
        broker: false,
        read_deny: false,
        hold_group: false,
        broker_entries: false,
        broker_connect: false,
        egress: false,
        broker_reads: false,
        child_layer: None,
    }
}

#[test]
fn a_held_process_group_cannot_be_left() {
    use sandbox_seccomp::compile_spec;
    let base = network_on();
    let held = compile_spec(&base.with_group_held(true)).unwrap();
    let free = compile_spec(&base).unwrap();
    // Each case forks once so the caller is not a group leader (setsid then
    // only fails for the filter's reason).
    let leave = |how: u8| {
        move || unsafe {
            let pid = libc::fork();
            if pid == 0 {
                let rc = if how == 0 {
                    libc::setsid()
                } else {
                    libc::setpgid(0, 0)
                };
                libc::_exit(if rc < 0 { errno() } else { 0 });
            }
            let mut st = 0;
            libc::waitpid(pid, &mut st, 0);
            libc::WEXITSTATUS(st)
        }
    };
    for how in [0, 1] {
        assert_eq!(confined(&free, leave(how)), 0, "the twin leaves its group");
        assert_eq!(confined(&held, leave(how)), libc::EPERM);
    }
}

/// Network on with host UNIX sockets confined and no broker to admit them:
/// no AF_UNIX socket and no datagram pair, while stream pairs and IP sockets
/// work; the twin without the confinement creates them all.
#[test]
fn confined_unix_sockets_without_a_broker() {
    use sandbox_seccomp::compile_spec;
    let base = network_on();
    let held = compile_spec(&base.with_broker_connect(true)).unwrap();
    let open = compile_spec(&base).unwrap();
    let socket = |dom: i32, ty: i32| move || unsafe { status(libc::socket(dom, ty, 0).into()) };
    let pair = |ty: i32| {
        move || unsafe {
            let mut sv = [0; 2];
            status(libc::socketpair(libc::AF_UNIX, ty, 0, sv.as_mut_ptr()).into())
        }
    };
    assert_eq!(
        confined(&held, socket(libc::AF_UNIX, libc::SOCK_STREAM)),
        libc::EPERM
    );
    assert_eq!(
        confined(&held, socket(libc::AF_UNIX, libc::SOCK_DGRAM)),
        libc::EPERM
    );
    assert_eq!(confined(&held, pair(libc::SOCK_DGRAM)), libc::EPERM);
    assert_eq!(confined(&held, pair(libc::SOCK_STREAM)), 0);
    assert_eq!(confined(&held, socket(libc::AF_INET, libc::SOCK_STREAM)), 0);
    assert_eq!(confined(&held, socket(libc::AF_INET, libc::SOCK_DGRAM)), 0);
    assert_eq!(confined(&open, socket(libc::AF_UNIX, libc::SOCK_STREAM)), 0);
    assert_eq!(confined(&open, pair(libc::SOCK_DGRAM)), 0);
}
