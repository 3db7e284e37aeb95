//! The one launch path: how `sandbox run`, the library runner
//! (`sandbox::runner::run`) and the enforcement self-test's probes start a command
//! with the hooks that confine it.
//!
//! It lives in the gate's crate so that the gate launches its probes through
//! exactly the code that launches a run: what the self-test witnesses is
//! what runs. It is shared by the workspace's own crates and not a public
//! API (hence hidden from the docs); the library's public ways to start a
//! confined command are the facade's runner,
//! `Confinement::into_command` and the `ConfinedSpawner`.
//!
//! std's `Command` runs `pre_exec` hooks after a full `fork`, which copies the
//! runner's page tables only for `exec` to throw them away (about 0.1 ms per
//! launch on a small VM). On Linux this module starts the child the way
//! `posix_spawn` does: `clone(CLONE_VM | CLONE_VFORK)` on a stack of its own,
//! while the parent waits for the child to exec or exit. The hooks are
//! async-signal-safe and allocation-free by `PreExecHook`'s contract, so they
//! are as safe on the borrowed memory as they are after `fork`. No crate
//! offers a vfork-style spawn that runs such hooks, hence the hand-written
//! code. Elsewhere std's `Command` does the work.
//!
//! The child is created with `clone3` (Linux 5.3), the same entry for every
//! launch, so the self-test's probes (no cgroup) take the path a run takes.
//! A run with a cgroup of its own starts there: `CLONE_INTO_CGROUP` (Linux
//! 5.7) places the child in the cgroup as it is created. Migrating it
//! afterwards (a write to `cgroup.procs`) takes the cgroup threadgroup lock
//! for writing (`cgroup_attach_lock` in kernel/cgroup/cgroup.c takes
//! `percpu_down_write(&cgroup_threadgroup_rwsem)`), and a per-CPU rwsem's
//! writer waits for an RCU grace period (`rcu_sync_enter` in
//! kernel/rcu/sync.c): about 0.25 ms per launch here (BENCHMARKS.md, the
//! `CLONE_INTO_CGROUP` measurement). `clone3` has no libc wrapper that runs a
//! function on a new stack, so a few lines of assembly call the child's
//! entry point (x86_64 and aarch64). Where `clone3` is refused (older
//! kernels, a seccomp filter that answers ENOSYS, another architecture) the
//! child is created with `clone` and, for a cgroup, writes `cgroup.procs`
//! itself, first of all its steps.

use std::ffi::OsString;
use std::io;
use std::os::fd::RawFd;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;

use sandbox_core::PreExecHook;

/// What to start. `env` is the whole environment, each name once.
///
/// The child's setup runs in this order: join the cgroup (when `clone3`
/// could not start it there), reset signal handlers, wire stdin, stdout and
/// stderr, make its own process group (`process_group`), change to `cwd`,
/// run the hooks in order, exec.
#[derive(Debug, Clone, Copy)]
pub struct SpawnPlan<'a> {
    /// The executable, already located (no `PATH` search happens here).
    pub path: &'a Path,
    /// `argv[0]` and the arguments.
    pub argv: &'a [OsString],
    /// The complete environment.
    pub env: &'a [(OsString, OsString)],
    /// The working directory, or (`None`) the caller's.
    pub cwd: Option<&'a Path>,
    /// The child's stdin: this fd, or (`None`) the caller's own, untouched.
    pub stdin: Option<RawFd>,
    /// The child's stdout: this fd, or (`None`) the caller's own, untouched.
    pub stdout: Option<RawFd>,
    /// The child's stderr: this fd, or (`None`) the caller's own, untouched.
    pub stderr: Option<RawFd>,
    /// Whether the child becomes the leader of a process group of its own
    /// (`setpgid(0, 0)`, before the hooks). A hook that calls `setsid`
    /// (the runner's) needs `false`: a group leader cannot start a session.
    pub process_group: bool,
    /// The cgroup the child starts in (Linux only; ignored elsewhere).
    pub cgroup: Option<CgroupTarget>,
}

/// A cgroup v2 to start the child in; both fds stay open until `spawn`
/// returns.
#[derive(Debug, Clone, Copy)]
pub struct CgroupTarget {
    /// The cgroup's directory, for `CLONE_INTO_CGROUP`.
    pub dir: RawFd,
    /// Its `cgroup.procs`, opened for writing, for the fallback.
    pub procs: RawFd,
}

/// A started child, not yet reaped: the caller waits for it by pid
/// ([`wait`], or a pidfd then [`wait`]).
#[derive(Debug)]
pub struct Spawned {
    /// Its process id.
    pub pid: i32,
}

/// How the child exits when the runner died before its parent-death signal
/// was armed (the runner's "sandbox failed" status).
#[cfg(target_os = "linux")]
const EXIT_PARENT_GONE: i32 = 125;

/// The launcher's own child setup, first of the hooks of every run and gate
/// probe: new session (and so its own process group), parent-death signal,
/// every inherited fd above 2 marked close-on-exec, and for confined runs
/// no_new_privs (no setuid gain, whatever the backend).
pub fn session_hook(no_new_privs: bool) -> PreExecHook {
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the closure only makes async-signal-safe syscalls with integer
    // arguments and allocates nothing; it runs in the child before exec,
    // which is `harden`'s contract.
    unsafe {
        PreExecHook::new(move || {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            child_sys::harden(parent, no_new_privs)
        })
    }
}

/// A hook (after [`session_hook`], which marks every fd above 2
/// close-on-exec) that keeps `fd` open across exec under its own number.
pub fn inherit_hook(fd: RawFd) -> PreExecHook {
    // SAFETY: one fcntl with integer arguments: async-signal-safe, no
    // allocation.
    unsafe {
        PreExecHook::new(move || {
            if libc::fcntl(fd, libc::F_SETFD, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

/// Child-side setup that differs by OS; async-signal-safe, no allocation.
mod child_sys {
    #[cfg(target_os = "linux")]
    pub(super) unsafe fn harden(parent: libc::pid_t, no_new_privs: bool) -> std::io::Result<()> {
        // SAFETY: the caller is a child between clone and exec (this fn's contract); every call is an async-signal-safe syscall with integer arguments.
        unsafe {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have died before PDEATHSIG was armed.
            if libc::getppid() != parent {
                libc::_exit(super::EXIT_PARENT_GONE);
            }
            if no_new_privs && libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // CLOSE_RANGE_CLOEXEC keeps a backend's ruleset fd usable until exec.
            if libc::syscall(
                libc::SYS_close_range,
                3u32,
                u32::MAX,
                libc::CLOSE_RANGE_CLOEXEC,
            ) < 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        }
    }

    /// No parent-death signal or no_new_privs exist here; fds are marked close-on-exec one by one.
    #[cfg(not(target_os = "linux"))]
    pub(super) unsafe fn harden(_parent: libc::pid_t, _no_new_privs: bool) -> std::io::Result<()> {
        // SAFETY: as the Linux version: async-signal-safe fcntl calls on integer fds.
        unsafe {
            let max = libc::getdtablesize();
            for fd in 3..max {
                let flags = libc::fcntl(fd, libc::F_GETFD);
                if flags >= 0 {
                    libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
                }
            }
            Ok(())
        }
    }
}

/// Starts `plan`, running `hooks` in order in the child before `exec`.
///
/// A hook's error (or exec's) comes back as the raw OS error it carried;
/// the child then never ran the command and has been reaped. The hooks are
/// dropped (with any fds they hold) before this returns.
pub fn spawn(plan: &SpawnPlan<'_>, hooks: Vec<PreExecHook>) -> io::Result<Spawned> {
    imp::spawn(plan, hooks)
}

/// Waits for `pid` to end and reaps it.
pub fn wait(pid: i32) -> io::Result<ExitStatus> {
    let mut status = 0;
    loop {
        // SAFETY: status is a valid out-pointer.
        if unsafe { libc::waitpid(pid, &mut status, 0) } >= 0 {
            return Ok(ExitStatus::from_raw(status));
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// Kills `pid` and reaps it (for a child that must not go on).
pub fn kill_and_reap(pid: i32) {
    // SAFETY: kill with integer arguments; pid is our unreaped child.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let _ = wait(pid);
}

#[cfg(target_os = "linux")]
mod imp {
    use std::ffi::{CString, OsStr};
    use std::io;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
    use std::os::unix::ffi::OsStrExt;

    use sandbox_core::PreExecHook;

    use super::{SpawnPlan, Spawned};

    /// The child's stack. Hooks are a few frames of raw syscalls; the guard
    /// page turns an overflow into a fault instead of a write into the
    /// parent's memory.
    const STACK_SIZE: usize = 256 * 1024;

    /// Everything the child reads, prepared by the parent (the child must
    /// not allocate), and the slot where it leaves its errno.
    struct ChildArgs {
        path: CString,
        argv: Vec<*const libc::c_char>,
        envp: Vec<*const libc::c_char>,
        cwd: Option<CString>,
        /// The fds to install as 0, 1 and 2; -1 keeps the caller's. Each is
        /// either its own target or above 2, so no `dup2` clobbers another's
        /// source.
        stdio: [RawFd; 3],
        process_group: bool,
        /// `cgroup.procs` to join first, or -1 (none, or already there).
        join: RawFd,
        hooks: Vec<PreExecHook>,
        error: i32,
        /// Set by the child when the step that failed was its `chdir`.
        in_cwd: bool,
    }

    fn nul_error(what: &str, value: &OsStr) -> io::Error {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{what} {value:?} contains a NUL byte"),
        )
    }

    pub(super) fn spawn(plan: &SpawnPlan<'_>, hooks: Vec<PreExecHook>) -> io::Result<Spawned> {
        let cstr =
            |what: &str, s: &OsStr| CString::new(s.as_bytes()).map_err(|_| nul_error(what, s));
        let argv_c = plan
            .argv
            .iter()
            .map(|a| cstr("argument", a))
            .collect::<io::Result<Vec<_>>>()?;
        let env_c = plan
            .env
            .iter()
            .map(|(k, v)| {
                if k.as_bytes().contains(&b'=') || k.is_empty() {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("environment variable name {k:?} is empty or contains '='"),
                    ));
                }
                let mut kv = k.clone();
                kv.push("=");
                kv.push(v);
                cstr("environment variable", &kv)
            })
            .collect::<io::Result<Vec<_>>>()?;
        // A source below 3 that is not its own target could be overwritten
        // by an earlier `dup2` in the child: use a copy above 2 instead.
        let mut copies: Vec<OwnedFd> = Vec::new();
        let mut stdio = [-1; 3];
        for (target, fd) in [plan.stdin, plan.stdout, plan.stderr]
            .into_iter()
            .enumerate()
        {
            stdio[target] = match fd {
                None => -1,
                Some(fd) if fd > 2 || fd == target as RawFd => fd,
                Some(fd) => {
                    // SAFETY: F_DUPFD_CLOEXEC takes an fd and a minimum and
                    // returns a new fd or -1.
                    let copy = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
                    if copy < 0 {
                        return Err(io::Error::last_os_error());
                    }
                    // SAFETY: `copy` was just returned and is owned here alone.
                    let copy = unsafe { OwnedFd::from_raw_fd(copy) };
                    let raw = copy.as_raw_fd();
                    copies.push(copy);
                    raw
                }
            };
        }
        let mut args = ChildArgs {
            path: cstr("program path", plan.path.as_os_str())?,
            argv: pointers(&argv_c),
            envp: pointers(&env_c),
            cwd: plan
                .cwd
                .map(|d| cstr("working directory", d.as_os_str()))
                .transpose()?,
            stdio,
            process_group: plan.process_group,
            join: -1,
            hooks,
            error: 0,
            in_cwd: false,
        };
        let stack = Stack::new()?;

        // No handler may run in the child while it shares our memory: block
        // every signal across the clone; the child resets handlers first.
        // SAFETY: sigset_t is plain data; both calls take valid pointers.
        let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: as above, plain data.
        let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: both calls take pointers to the locals above.
        unsafe {
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        }
        // Every launch takes the same entry, with a cgroup or without (the
        // self-test's probes, a run in a process group), so the gate's
        // launches go through the code a run does.
        // SAFETY: as for `clone` below; the trampoline calls `child_main`
        // on the fresh stack.
        let mut pid = unsafe { clone3_vfork(plan.cgroup.map(|c| c.dir), &stack, &mut args) };
        if pid < 0 {
            args.join = plan.cgroup.map_or(-1, |c| c.procs);
            // SAFETY: the stack is mapped, writable and unused; `args` outlives
            // the child's use of it, since CLONE_VFORK returns only once the
            // child has exec'd or exited. `child_main` only makes
            // async-signal-safe calls.
            pid = unsafe {
                libc::clone(
                    child_main,
                    stack.top(),
                    libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
                    (&mut args as *mut ChildArgs).cast(),
                )
            };
        }
        let clone_error = io::Error::last_os_error();
        // SAFETY: restoring the mask saved above.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
        drop(stack);
        drop(copies);
        if pid < 0 {
            return Err(clone_error);
        }
        // SAFETY: the child wrote `error` (or not) before exec or exit; read it
        // as memory the compiler did not see change.
        let error = unsafe { std::ptr::read_volatile(&args.error) };
        if error != 0 {
            let _ = super::wait(pid);
            let err = io::Error::from_raw_os_error(error);
            // SAFETY: as for `error` above.
            return Err(
                match (unsafe { std::ptr::read_volatile(&args.in_cwd) }, plan.cwd) {
                    // Said as env(1) says it, not as an exec failure.
                    (true, Some(cwd)) => io::Error::new(
                        err.kind(),
                        format!(
                            "cannot change to the working directory {}: {err}",
                            cwd.display()
                        ),
                    ),
                    _ => err,
                },
            );
        }
        Ok(Spawned { pid })
    }

    fn pointers(strings: &[CString]) -> Vec<*const libc::c_char> {
        strings
            .iter()
            .map(|s| s.as_ptr())
            .chain(std::iter::once(std::ptr::null()))
            .collect()
    }

    /// The child: runs on its own stack in the parent's memory until exec.
    extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
        // SAFETY: `arg` is the parent's `ChildArgs`, untouched by the parent
        // until this child execs or exits.
        let args = unsafe { &mut *arg.cast::<ChildArgs>() };
        // SAFETY: this is the child of a clone, before exec.
        let errno = unsafe { prepare_and_exec(args) };
        args.error = if errno == 0 { libc::EIO } else { errno };
        // SAFETY: _exit never returns and runs no atexit handlers.
        unsafe { libc::_exit(127) }
    }

    /// Joins the cgroup, resets signals, wires stdio, makes the process
    /// group, changes directory, runs the hooks and execs. Returns the errno
    /// of the step that failed.
    unsafe fn prepare_and_exec(args: &mut ChildArgs) -> i32 {
        // SAFETY: this fn's contract: the child of a clone, before exec, on its own stack; `args` was prepared by the parent and is not touched by it until the child execs or exits; every call is async-signal-safe.
        unsafe {
            let errno = || *libc::__errno_location();
            // "0" moves the writing process (cgroup-v2.rst, cgroup.procs).
            if args.join >= 0 && libc::write(args.join, b"0".as_ptr().cast(), 1) != 1 {
                return errno();
            }
            // The soft descriptor limit the runner started with, which it
            // raised for itself (`crate::fds`).
            if let Err(e) = crate::fds::restore_in_child() {
                return e;
            }
            // Handlers belong to the parent's memory: none may run here. Ignored
            // signals stay ignored across exec, except SIGPIPE, which std ignores
            // and a command expects at its default.
            for sig in 1..libc::SIGRTMAX() + 1 {
                if sig == libc::SIGKILL || sig == libc::SIGSTOP {
                    continue;
                }
                let mut current: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, std::ptr::null(), &mut current) != 0 {
                    continue;
                }
                let handler = current.sa_sigaction;
                if handler != libc::SIG_DFL && (handler != libc::SIG_IGN || sig == libc::SIGPIPE) {
                    let mut default: libc::sigaction = std::mem::zeroed();
                    default.sa_sigaction = libc::SIG_DFL;
                    libc::sigaction(sig, &default, std::ptr::null_mut());
                }
            }
            for (target, &fd) in (0..).zip(args.stdio.iter()) {
                if fd < 0 || fd == target {
                    // The caller's own (or the one asked for): open across exec.
                    // A closed one stays closed.
                    if libc::fcntl(target, libc::F_SETFD, 0) < 0 && errno() != libc::EBADF {
                        return errno();
                    }
                } else if libc::dup2(fd, target) < 0 {
                    return errno();
                }
            }
            if args.process_group && libc::setpgid(0, 0) < 0 {
                return errno();
            }
            if let Some(cwd) = &args.cwd {
                if libc::chdir(cwd.as_ptr()) < 0 {
                    args.in_cwd = true;
                    return errno();
                }
            }
            for hook in &mut args.hooks {
                if let Err(e) = hook.run_in_child() {
                    return e.raw_os_error().unwrap_or(libc::EIO);
                }
            }
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            libc::pthread_sigmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
            libc::execve(args.path.as_ptr(), args.argv.as_ptr(), args.envp.as_ptr());
            errno()
        }
    }

    /// `struct clone_args` up to `cgroup` (include/uapi/linux/sched.h,
    /// `CLONE_ARGS_SIZE_VER2`).
    #[repr(C)]
    #[derive(Default)]
    struct CloneArgs {
        flags: u64,
        pidfd: u64,
        child_tid: u64,
        parent_tid: u64,
        exit_signal: u64,
        stack: u64,
        stack_size: u64,
        tls: u64,
        set_tid: u64,
        set_tid_size: u64,
        cgroup: u64,
    }

    /// `CLONE_INTO_CGROUP` (include/uapi/linux/sched.h).
    const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

    /// `clone3(CLONE_VM | CLONE_VFORK)`, with `CLONE_INTO_CGROUP` when given
    /// a cgroup `dir`: runs `child_main(args)` on `stack` (in that cgroup).
    /// Returns the pid, or -1 with errno set when the kernel refused (nothing
    /// was started).
    ///
    /// # Safety
    /// As for `clone` with `child_main`: signals blocked, `args` and `stack`
    /// alive until the child has exec'd or exited (CLONE_VFORK ensures it).
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    unsafe fn clone3_vfork(dir: Option<RawFd>, stack: &Stack, args: &mut ChildArgs) -> i32 {
        // SAFETY: this fn's contract (a mapped, unused stack; `args` outliving the child's use of it); the assembly and syscalls are as documented beside them.
        unsafe {
            let (into, dir) = match dir.map(u64::try_from) {
                None => (0, 0),
                Some(Ok(dir)) => (CLONE_INTO_CGROUP, dir),
                Some(Err(_)) => {
                    *libc::__errno_location() = libc::EBADF;
                    return -1;
                }
            };
            let ca = CloneArgs {
                flags: (libc::CLONE_VM | libc::CLONE_VFORK) as u64 | into,
                exit_signal: libc::SIGCHLD as u64,
                stack: stack.base() as u64,
                stack_size: STACK_SIZE as u64,
                cgroup: dir,
                ..CloneArgs::default()
            };
            let entry: extern "C" fn(*mut libc::c_void) -> libc::c_int = child_main;
            let arg: *mut libc::c_void = (args as *mut ChildArgs).cast();
            let ret: isize;
            // The child resumes after the syscall with the parent's registers,
            // but on the new stack (clone3 sets the stack pointer to stack +
            // stack_size) and with a return value of 0: it calls `entry(arg)`,
            // which never returns (it execs or `_exit`s); the exit syscall after
            // it is a backstop. The parent only makes the syscall.
            #[cfg(target_arch = "x86_64")]
            core::arch::asm!(
                "syscall",
                "test rax, rax",
                "jnz 2f",
                "mov rdi, r13",
                "call r12",
                "mov edi, eax",
                "mov eax, 60", // SYS_exit
                "syscall",
                "ud2",
                "2:",
                inlateout("rax") libc::SYS_clone3 as isize => ret,
                in("rdi") &ca as *const CloneArgs,
                in("rsi") std::mem::size_of::<CloneArgs>(),
                in("r12") entry,
                in("r13") arg,
                lateout("rcx") _,
                lateout("r11") _,
                options(nostack),
            );
            #[cfg(target_arch = "aarch64")]
            core::arch::asm!(
                "svc #0",
                "cbnz x0, 2f",
                "mov x0, x21",
                "blr x20",
                "mov x8, #93", // SYS_exit
                "svc #0",
                "brk #0",
                "2:",
                inlateout("x0") &ca as *const CloneArgs as isize => ret,
                in("x1") std::mem::size_of::<CloneArgs>(),
                in("x8") libc::SYS_clone3,
                in("x20") entry,
                in("x21") arg,
                options(nostack),
            );
            if ret < 0 {
                *libc::__errno_location() = -ret as i32;
                return -1;
            }
            ret as i32
        }
    }

    /// Elsewhere the child is always cloned and joins the cgroup by writing.
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    unsafe fn clone3_vfork(_dir: Option<RawFd>, _stack: &Stack, _args: &mut ChildArgs) -> i32 {
        // SAFETY: nothing unsafe happens here; the block keeps the signature uniform.
        unsafe {
            *libc::__errno_location() = libc::ENOSYS;
            -1
        }
    }

    /// An mmap'd stack with a guard page at its low end.
    struct Stack(*mut libc::c_void);

    impl Stack {
        fn new() -> io::Result<Self> {
            // SAFETY: anonymous private mapping; checked for failure below.
            let base = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    STACK_SIZE,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK | libc::MAP_NORESERVE,
                    -1,
                    0,
                )
            };
            if base == libc::MAP_FAILED {
                return Err(io::Error::last_os_error());
            }
            let stack = Stack(base);
            // SAFETY: the first page lies inside the mapping just made.
            if unsafe { libc::mprotect(base, page_size(), libc::PROT_NONE) } < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(stack)
        }

        fn base(&self) -> *mut libc::c_void {
            self.0
        }

        fn top(&self) -> *mut libc::c_void {
            // SAFETY: one past the end of the mapping; stacks grow down.
            unsafe { self.0.cast::<u8>().add(STACK_SIZE).cast() }
        }
    }

    impl Drop for Stack {
        fn drop(&mut self) {
            // SAFETY: unmapping our own mapping, no longer used by any child.
            unsafe { libc::munmap(self.0, STACK_SIZE) };
        }
    }

    fn page_size() -> usize {
        // SAFETY: sysconf has no preconditions.
        usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096)
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use std::io;
    use std::os::fd::RawFd;
    use std::process::{Command, Stdio};

    use sandbox_core::PreExecHook;

    use super::{SpawnPlan, Spawned};

    pub(super) fn spawn(plan: &SpawnPlan<'_>, hooks: Vec<PreExecHook>) -> io::Result<Spawned> {
        let mut cmd = Command::new(plan.path);
        if let Some((arg0, args)) = plan.argv.split_first() {
            std::os::unix::process::CommandExt::arg0(&mut cmd, arg0);
            cmd.args(args);
        }
        cmd.env_clear()
            .envs(plan.env.iter().map(|(k, v)| (k, v)))
            .stdin(stdio(plan.stdin)?)
            .stdout(stdio(plan.stdout)?)
            .stderr(stdio(plan.stderr)?);
        if plan.process_group {
            std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        }
        if let Some(cwd) = plan.cwd {
            cmd.current_dir(cwd);
        }
        for hook in hooks {
            hook.install(&mut cmd);
        }
        let child = cmd.spawn()?;
        // Dropping `Child` neither waits nor kills: the caller reaps by pid.
        Ok(Spawned {
            pid: child.id() as i32,
        })
    }

    /// The caller's fd (`None`: its own, inherited), duplicated for `Command`.
    fn stdio(fd: Option<RawFd>) -> io::Result<Stdio> {
        let Some(fd) = fd else {
            return Ok(Stdio::inherit());
        };
        // SAFETY: borrowing the caller's fd only to duplicate it.
        let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
        Ok(Stdio::from(borrowed.try_clone_to_owned()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn stdio_cwd_env_and_process_group_are_as_planned() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in");
        std::fs::write(&input, "hello\n").unwrap();
        let stdin = std::fs::File::open(&input).unwrap();
        let stdout = std::fs::File::create(dir.path().join("out")).unwrap();
        let stderr = std::fs::File::create(dir.path().join("err")).unwrap();
        let argv: Vec<OsString> = vec![
            "sh".into(),
            "-c".into(),
            r#"read line; echo "$line $GREETING $(pwd)"; echo oops >&2"#.into(),
        ];
        let env = vec![("GREETING".into(), "world".into())];
        let plan = SpawnPlan {
            path: Path::new("/bin/sh"),
            argv: &argv,
            env: &env,
            cwd: Some(dir.path()),
            stdin: Some(stdin.as_raw_fd()),
            stdout: Some(stdout.as_raw_fd()),
            stderr: Some(stderr.as_raw_fd()),
            process_group: true,
            cgroup: None,
        };
        let child = spawn(&plan, Vec::new()).unwrap();
        // SAFETY: getpgid takes a pid; the child is not reaped yet.
        let group = unsafe { libc::getpgid(child.pid) };
        let status = wait(child.pid).unwrap();
        assert!(status.success(), "{status:?}");
        assert_eq!(group, child.pid, "the child leads a group of its own");
        let cwd = dir.path().canonicalize().unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("out")).unwrap(),
            format!("hello world {}\n", cwd.display())
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("err")).unwrap(),
            "oops\n"
        );
    }

    /// Where `clone3` is refused (a filter answering ENOSYS, as container
    /// runtimes' default profiles do), the child is created with `clone` and
    /// set up the same way.
    #[cfg(all(
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "aarch64")
    ))]
    #[test]
    fn where_clone3_is_refused_clone_starts_the_same_child() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let done = std::thread::spawn(move || {
            // A filter on this thread only: clone3 answers ENOSYS.
            let filter = [
                libc::sock_filter {
                    code: (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16,
                    jt: 0,
                    jf: 0,
                    k: 0,
                },
                libc::sock_filter {
                    code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
                    jt: 0,
                    jf: 1,
                    k: libc::SYS_clone3 as u32,
                },
                libc::sock_filter {
                    code: (libc::BPF_RET | libc::BPF_K) as u16,
                    jt: 0,
                    jf: 0,
                    k: libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32,
                },
                libc::sock_filter {
                    code: (libc::BPF_RET | libc::BPF_K) as u16,
                    jt: 0,
                    jf: 0,
                    k: libc::SECCOMP_RET_ALLOW,
                },
            ];
            let prog = libc::sock_fprog {
                len: filter.len() as u16,
                filter: filter.as_ptr().cast_mut(),
            };
            // SAFETY: prctl with a valid filter program; both affect this
            // thread (and its children) only.
            unsafe {
                assert_eq!(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
                assert_eq!(
                    libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, &prog),
                    0
                );
                assert_eq!(
                    libc::syscall(libc::SYS_clone3, std::ptr::null::<u8>(), 0),
                    -1
                );
            }
            assert_eq!(
                io::Error::last_os_error().raw_os_error(),
                Some(libc::ENOSYS)
            );
            let stdout = std::fs::File::create(&out).unwrap();
            let argv: Vec<OsString> = vec!["sh".into(), "-c".into(), "echo fell back".into()];
            let plan = SpawnPlan {
                path: Path::new("/bin/sh"),
                argv: &argv,
                env: &[],
                cwd: None,
                stdin: None,
                stdout: Some(stdout.as_raw_fd()),
                stderr: None,
                process_group: true,
                cgroup: None,
            };
            let child = spawn(&plan, Vec::new()).unwrap();
            // SAFETY: getpgid takes a pid; the child is not reaped yet.
            let group = unsafe { libc::getpgid(child.pid) };
            assert!(wait(child.pid).unwrap().success());
            assert_eq!(group, child.pid);
            std::fs::read_to_string(&out).unwrap()
        });
        assert_eq!(done.join().unwrap(), "fell back\n");
    }

    #[test]
    fn a_failing_hook_comes_back_as_its_error_and_the_child_is_reaped() {
        let argv: Vec<OsString> = vec!["true".into()];
        // SAFETY: the hook builds an io::Error from a raw code: no allocation.
        let hook = unsafe { PreExecHook::new(|| Err(io::Error::from_raw_os_error(libc::EPERM))) };
        let plan = SpawnPlan {
            path: Path::new("/bin/true"),
            argv: &argv,
            env: &[],
            cwd: None,
            stdin: None,
            stdout: None,
            stderr: None,
            process_group: false,
            cgroup: None,
        };
        let err = spawn(&plan, vec![hook]).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EPERM));
        let missing = SpawnPlan {
            path: Path::new("/nonexistent/program"),
            ..plan
        };
        let err = spawn(&missing, Vec::new()).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOENT));
    }
}
