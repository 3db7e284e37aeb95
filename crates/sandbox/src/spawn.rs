//! Starting the command with the hooks that confine it.
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

use std::ffi::OsString;
use std::io;
use std::os::fd::RawFd;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;

use sandbox_core::PreExecHook;

/// What to start. `env` is the whole environment, each name once.
pub(crate) struct SpawnPlan<'a> {
    /// The executable, already located.
    pub(crate) path: &'a Path,
    /// `argv[0]` and the arguments.
    pub(crate) argv: &'a [OsString],
    pub(crate) env: &'a [(OsString, OsString)],
    pub(crate) cwd: Option<&'a Path>,
    /// The child's stderr: this fd, or (`None`) the runner's own, untouched.
    pub(crate) stderr: Option<RawFd>,
}

/// A started child: stdin, stdout and (unless the plan says otherwise)
/// stderr are the runner's own, untouched (a terminal stays a terminal).
pub(crate) struct Spawned {
    pub(crate) pid: i32,
}

/// Starts `plan`, running `hooks` in order in the child before `exec`.
///
/// A hook's error (or exec's) comes back as the raw OS error it carried;
/// the child then never ran the command and has been reaped.
pub(crate) fn spawn(plan: &SpawnPlan<'_>, hooks: Vec<PreExecHook>) -> io::Result<Spawned> {
    imp::spawn(plan, hooks)
}

/// Waits for `pid` to end and reaps it.
pub(crate) fn wait(pid: i32) -> io::Result<ExitStatus> {
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
pub(crate) fn kill_and_reap(pid: i32) {
    // SAFETY: kill with integer arguments; pid is our unreaped child.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let _ = wait(pid);
}

#[cfg(target_os = "linux")]
mod imp {
    use std::ffi::{CString, OsStr};
    use std::io;
    use std::os::fd::RawFd;
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
        stderr: RawFd,
        hooks: Vec<PreExecHook>,
        error: i32,
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
        let mut args = ChildArgs {
            path: cstr("program path", plan.path.as_os_str())?,
            argv: pointers(&argv_c),
            envp: pointers(&env_c),
            cwd: plan
                .cwd
                .map(|d| cstr("working directory", d.as_os_str()))
                .transpose()?,
            stderr: plan.stderr.unwrap_or(libc::STDERR_FILENO),
            hooks,
            error: 0,
        };
        let stack = Stack::new()?;

        // No handler may run in the child while it shares our memory: block
        // every signal across the clone; the child resets handlers first.
        // SAFETY: sigset_t is plain data; both calls take valid pointers.
        let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
        let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
        unsafe {
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        }
        // SAFETY: the stack is mapped, writable and unused; `args` outlives the
        // child's use of it, since CLONE_VFORK returns only once the child has
        // exec'd or exited. `child_main` only makes async-signal-safe calls.
        let pid = unsafe {
            libc::clone(
                child_main,
                stack.top(),
                libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
                (&mut args as *mut ChildArgs).cast(),
            )
        };
        let clone_error = io::Error::last_os_error();
        // SAFETY: restoring the mask saved above.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
        drop(stack);
        if pid < 0 {
            return Err(clone_error);
        }
        // SAFETY: the child wrote `error` (or not) before exec or exit; read it
        // as memory the compiler did not see change.
        let error = unsafe { std::ptr::read_volatile(&args.error) };
        if error != 0 {
            let _ = super::wait(pid);
            return Err(io::Error::from_raw_os_error(error));
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

    /// Resets signals, wires stderr and cwd, runs the hooks and execs.
    /// Returns the errno of the step that failed.
    unsafe fn prepare_and_exec(args: &mut ChildArgs) -> i32 {
        let errno = || *libc::__errno_location();
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
        if args.stderr == libc::STDERR_FILENO {
            if libc::fcntl(args.stderr, libc::F_SETFD, 0) < 0 {
                return errno();
            }
        } else if libc::dup2(args.stderr, libc::STDERR_FILENO) < 0 {
            return errno();
        }
        if let Some(cwd) = &args.cwd {
            if libc::chdir(cwd.as_ptr()) < 0 {
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
            .stdin(Stdio::inherit())
            .stdout(Stdio::inherit());
        if let Some(fd) = plan.stderr {
            // SAFETY: borrowing the caller's fd only to duplicate it.
            let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
            cmd.stderr(Stdio::from(borrowed.try_clone_to_owned()?));
        }
        if let Some(cwd) = plan.cwd {
            cmd.current_dir(cwd);
        }
        for hook in hooks {
            hook.install(&mut cmd);
        }
        let child = cmd.spawn()?;
        // Dropping `Child` neither waits nor kills: the runner reaps by pid.
        Ok(Spawned {
            pid: child.id() as i32,
        })
    }
}
