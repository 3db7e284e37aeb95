//! The broker keeps a caller's umask by thread id between creates (fixed
//! credentials, `umask` routed). A thread made by `clone(CLONE_THREAD)`
//! without `CLONE_FS` has a umask of its own, and when it calls `execve` it
//! takes over its group leader's thread id (`de_thread`, fs/exec.c): the
//! leader's kept umask would then be applied to the new image's creates.
//!
//! The confined program is this test executable itself, run with
//! [`HELPER`] set: it forks (the child leads its own thread group) and the
//! child plays the attack.
#![cfg(target_os = "linux")]

use std::ffi::CString;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::common::*;
use sandbox_core::SandboxPolicy;

/// Set to `FLAGS:DIR` in the confined helper run.
const HELPER: &str = "SANDBOX_TEST_UMASK_THREAD_HELPER";

/// Exit code of the helper when `clone` was refused (plus its errno).
const CLONE_REFUSED: i32 = 100;

static STEP: AtomicU32 = AtomicU32::new(0);
static mut STACK: [u8; 256 * 1024] = [0; 256 * 1024];

struct Exec {
    sh: CString,
    argv: [*const libc::c_char; 4],
}

extern "C" fn thread_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the leader's `Exec`, alive until the leader dies (it
    // waits for this thread's execve); raw syscalls only.
    unsafe {
        let exec = &*(arg as *const Exec);
        libc::umask(0o077);
        STEP.store(1, Ordering::SeqCst);
        while STEP.load(Ordering::SeqCst) != 2 {
            libc::sched_yield();
        }
        let envp: [*const libc::c_char; 1] = [std::ptr::null()];
        libc::execve(exec.sh.as_ptr(), exec.argv.as_ptr(), envp.as_ptr());
        libc::_exit(4)
    }
}

/// The confined side: `umask 022`, a thread (`clone` with `extra` flags)
/// sets `umask 077`, the leader then creates `a` (the broker reads and keeps
/// 022 for the leader's id), and the thread execs `sh -c ': > b'`.
fn helper(extra: i32, dir: &Path) -> i32 {
    let a = CString::new(dir.join("a").into_os_string().into_encoded_bytes()).unwrap();
    let script = CString::new(format!(": > {}/b", dir.display())).unwrap();
    let (sh_arg0, dash_c) = (c"sh", c"-c");
    let exec = Exec {
        sh: CString::new("/bin/sh").unwrap(),
        argv: [
            sh_arg0.as_ptr(),
            dash_c.as_ptr(),
            script.as_ptr(),
            std::ptr::null(),
        ],
    };
    // SAFETY: the forked child makes raw syscalls only and ends with _exit
    // (or its thread's execve, which ends it).
    unsafe {
        libc::umask(0o022);
        let pid = libc::fork();
        if pid == 0 {
            let stack = std::ptr::addr_of_mut!(STACK) as *mut u8;
            let top = stack.add(256 * 1024 - 64) as *mut libc::c_void;
            let flags = libc::CLONE_VM
                | libc::CLONE_SIGHAND
                | libc::CLONE_THREAD
                | libc::CLONE_SYSVSEM
                | libc::CLONE_FILES
                | extra;
            let rc = libc::clone(
                thread_main,
                top,
                flags,
                &exec as *const Exec as *mut libc::c_void,
            );
            if rc < 0 {
                libc::_exit(CLONE_REFUSED + *libc::__errno_location());
            }
            while STEP.load(Ordering::SeqCst) != 1 {
                libc::sched_yield();
            }
            let fd = libc::open(
                a.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
                0o666,
            );
            if fd < 0 {
                libc::_exit(3);
            }
            libc::close(fd);
            STEP.store(2, Ordering::SeqCst);
            loop {
                libc::pause();
            }
        }
        let mut status = 0;
        if pid < 0 || libc::waitpid(pid, &mut status, 0) != pid {
            return 2;
        }
        if libc::WIFEXITED(status) {
            libc::WEXITSTATUS(status)
        } else {
            128 + libc::WTERMSIG(status)
        }
    }
}

/// Not a test of its own: the confined helper (does nothing unless [`HELPER`] is set).
#[test]
#[ignore = "helper: re-executed confined by the umask tests"]
fn umask_thread_helper() {
    let Ok(spec) = std::env::var(HELPER) else {
        return;
    };
    let (flags, dir) = spec.split_once(':').expect("FLAGS:DIR");
    std::process::exit(helper(flags.parse().unwrap(), Path::new(dir)));
}

/// Runs the helper confined (write path `w`, `.git` denied beneath it: the
/// broker takes creates, with fixed credentials when the test runs as one
/// uid and gid); its exit code and the modes of `a` and `b`.
fn attack(extra: i32) -> (i32, Option<u32>, Option<u32>) {
    let t = temp();
    let w = t.path.join("w");
    std::fs::create_dir(&w).unwrap();
    let policy = resolve(SandboxPolicy {
        network: true,
        write_paths: vec![path_str(&w)],
        write_deny_paths: vec![path_str(&w.join(".git"))],
        ..Default::default()
    });
    let exe = std::env::current_exe().unwrap();
    let exe = path_str(&exe);
    let helper = test_path(module_path!(), "umask_thread_helper");
    let (mut cmd, supervisor) = confined(
        &policy,
        &[
            &exe,
            "--exact",
            "--ignored",
            &helper,
            "--nocapture",
            "--test-threads=1",
        ],
    );
    cmd.env(HELPER, format!("{extra}:{}", w.display()));
    let out = output_supervised(cmd, supervisor);
    let mode = |n: &str| {
        std::fs::metadata(w.join(n))
            .ok()
            .map(|m| m.permissions().mode() & 0o777)
    };
    let code = out.status.code().unwrap_or(-1);
    (code, mode("a"), mode("b"))
}

/// Twin: a thread sharing the leader's fs (as every pthread does) shares its
/// umask: both files get 077.
#[test]
fn a_thread_sharing_fs_shares_the_umask_it_sets() {
    assert_eq!(attack(libc::CLONE_FS), (0, Some(0o600), Some(0o600)));
}

/// A thread with its own fs (no `CLONE_FS`) that execs must not create with
/// the leader's kept umask: either such a thread is refused, or `b` gets the
/// thread's own 077.
#[test]
fn exec_from_a_thread_with_its_own_umask_applies_that_umask() {
    let (code, a, b) = attack(0);
    if code >= CLONE_REFUSED {
        assert_eq!(
            code,
            CLONE_REFUSED + libc::EPERM,
            "clone refused with EPERM"
        );
        assert_eq!((a, b), (None, None));
        return;
    }
    assert_eq!(
        (code, a, b),
        (0, Some(0o644), Some(0o600)),
        "the exec'd image created `b` with the leader's umask"
    );
}
