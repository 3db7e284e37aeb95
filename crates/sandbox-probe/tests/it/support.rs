//! Test backends built from raw kernel mechanisms, working and deliberately broken.
//!
//! They are hand-written (raw Landlock and seccomp syscalls) so the gate's
//! tests do not depend on the real backend crate, and so each breakage is
//! exactly one missing piece. Linux x86_64 only.
#![allow(dead_code)]

use std::ffi::OsString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};

use sandbox_core::{
    encode_pre_exec_error, Axis, Backend, Confinement, EnforcementReport, PreExecHook,
    ResolvedPolicy, SandboxUnavailable, WrappedArgv,
};

fn report(name: &str) -> EnforcementReport {
    EnforcementReport {
        backend: name.into(),
        details: vec!["test backend".into()],
        axes: Vec::new(),
    }
}

fn unavailable(name: &str, what: &str) -> SandboxUnavailable {
    SandboxUnavailable::new(name, format!("{what}: {}", std::io::Error::last_os_error()))
}

/// What a [`TestBackend`] does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Landlock write rules + a seccomp filter refusing fork: passes the gate.
    Working,
    /// Replaces the command with `/bin/true`.
    RunsNothing,
    /// Runs the command unconfined (ignores write_paths and everything else).
    IgnoresWritePaths,
    /// A seccomp filter that kills on every syscall.
    DeniesEverything,
    /// Landlock write rules only: deny_subprocess is forgotten.
    ForgetsSpawnRules,
    /// Landlock write rules, and a filter refusing every syscall when deny_subprocess is set.
    SpawnDeniesEverything,
    /// [`Kind::Working`] without Landlock's TRUNCATE right handled: writes
    /// need a writable fd, but `open(O_RDONLY|O_TRUNC)` still truncates.
    ForgetsTruncate,
    /// Every launch fails to start with this errno (its pre-exec hook
    /// returns it): a probe launch refused `EAGAIN` as under a full
    /// `RLIMIT_NPROC` (red team R7 F2).
    LaunchFails(i32),
    /// [`Kind::Working`], and the launch's `RLIMIT_NPROC` set to 0: for a
    /// user other than root every fork in it fails `EAGAIN` (the kernel's
    /// own answer; root is exempt, so there it passes).
    NoProcessesLeft,
}

/// A backend whose behaviour is one [`Kind`]; counts its `prepare` calls.
#[derive(Debug)]
pub struct TestBackend {
    pub name: &'static str,
    pub kind: Kind,
    pub prepared: AtomicUsize,
}

impl TestBackend {
    pub fn new(name: &'static str, kind: Kind) -> Self {
        Self {
            name,
            kind,
            prepared: AtomicUsize::new(0),
        }
    }
}

impl Backend for TestBackend {
    fn name(&self) -> &'static str {
        self.name
    }

    fn axes(&self) -> &'static [Axis] {
        &[Axis::Write, Axis::Spawn]
    }

    fn prepare(
        &self,
        policy: &ResolvedPolicy,
        argv: &[OsString],
    ) -> Result<Confinement, SandboxUnavailable> {
        self.prepared.fetch_add(1, Ordering::SeqCst);
        let argv = match self.kind {
            Kind::RunsNothing => vec![OsString::from("/bin/true")],
            _ => argv.to_vec(),
        };
        let landlock = match self.kind {
            Kind::Working
            | Kind::ForgetsSpawnRules
            | Kind::SpawnDeniesEverything
            | Kind::NoProcessesLeft => Some(write_ruleset(self.name, policy, DIR_RIGHTS)?),
            Kind::ForgetsTruncate => {
                Some(write_ruleset(self.name, policy, DIR_RIGHTS & !TRUNCATE)?)
            }
            _ => None,
        };
        let filter = match self.kind {
            Kind::Working | Kind::ForgetsTruncate | Kind::NoProcessesLeft
                if policy.deny_subprocess() =>
            {
                Some(Filter::new(deny_fork_program()))
            }
            Kind::SpawnDeniesEverything if policy.deny_subprocess() => {
                Some(Filter::new(kill_everything_program()))
            }
            Kind::DeniesEverything => Some(Filter::new(kill_everything_program())),
            _ => None,
        };
        let hook = match self.kind {
            Kind::LaunchFails(errno) => {
                // SAFETY: the closure builds an error from a raw code; no allocation.
                Some(unsafe { PreExecHook::new(move || Err(encode_pre_exec_error(errno))) })
            }
            Kind::NoProcessesLeft => {
                // SAFETY: the closure makes raw setrlimit (a valid rlimit),
                // prctl and syscall calls only; no allocation.
                Some(unsafe {
                    PreExecHook::new(move || {
                        let none = libc::rlimit {
                            rlim_cur: 0,
                            rlim_max: 0,
                        };
                        if libc::setrlimit(libc::RLIMIT_NPROC, &none) != 0 {
                            return Err(encode_pre_exec_error(
                                std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
                            ));
                        }
                        apply(landlock.as_ref(), filter.as_ref())
                    })
                })
            }
            _ if landlock.is_none() && filter.is_none() => None,
            // SAFETY: the closure makes raw prctl/syscall calls only; no allocation.
            _ => {
                Some(unsafe { PreExecHook::new(move || apply(landlock.as_ref(), filter.as_ref())) })
            }
        };
        Ok(Confinement::new(argv, hook, report(self.name)))
    }

    fn wrap_argv(
        &self,
        _: &ResolvedPolicy,
        _: &[OsString],
    ) -> Result<WrappedArgv, SandboxUnavailable> {
        Err(SandboxUnavailable::new(self.name, "no argv form"))
    }
}

fn apply(landlock: Option<&OwnedFd>, filter: Option<&Filter>) -> std::io::Result<()> {
    let fail =
        || encode_pre_exec_error(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
    // SAFETY: async-signal-safe syscalls with valid arguments.
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(fail());
        }
        if let Some(fd) = landlock {
            if libc::syscall(libc::SYS_landlock_restrict_self, fd.as_raw_fd(), 0) != 0 {
                return Err(fail());
            }
        }
        if let Some(f) = filter {
            let prog = libc::sock_fprog {
                len: f.0.len() as u16,
                filter: f.0.as_ptr() as *mut libc::sock_filter,
            };
            if libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, &prog) != 0 {
                return Err(fail());
            }
        }
    }
    Ok(())
}

// ---- Landlock (write rights of ABI 1..3) ----

#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
}

#[repr(C, packed)]
struct PathBeneath {
    allowed_access: u64,
    parent_fd: i32,
}

const WRITE_FILE: u64 = 1 << 1;
const TRUNCATE: u64 = 1 << 14;
const FILE_RIGHTS: u64 = WRITE_FILE | TRUNCATE;
const DIR_RIGHTS: u64 = WRITE_FILE
    | (1 << 4)  // remove dir
    | (1 << 5)  // remove file
    | (1 << 6)  // make char
    | (1 << 7)  // make dir
    | (1 << 8)  // make reg
    | (1 << 9)  // make sock
    | (1 << 10) // make fifo
    | (1 << 11) // make block
    | (1 << 12) // make sym
    | (1 << 13) // refer
    | (1 << 14); // truncate

/// A ruleset handling `handled` (a subset of [`DIR_RIGHTS`]), granting it on the write paths.
fn write_ruleset(
    name: &str,
    policy: &ResolvedPolicy,
    handled: u64,
) -> Result<OwnedFd, SandboxUnavailable> {
    let attr = RulesetAttr {
        handled_access_fs: handled,
        handled_access_net: 0,
    };
    // SAFETY: valid attr pointer and size.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            &attr as *const RulesetAttr,
            std::mem::size_of::<RulesetAttr>(),
            0,
        )
    };
    if fd < 0 {
        return Err(unavailable(name, "landlock_create_ruleset"));
    }
    // SAFETY: a fresh fd owned here.
    let ruleset = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    let mut rules: Vec<(std::path::PathBuf, u64)> = policy
        .write_paths()
        .iter()
        .map(|p| (p.clone(), DIR_RIGHTS))
        .collect();
    rules.push(("/dev/null".into(), FILE_RIGHTS));
    for (path, rights) in rules {
        let file = std::fs::File::options()
            .read(true)
            .custom_flags(libc::O_PATH)
            .open(&path)
            .map_err(|e| SandboxUnavailable::new(name, format!("{}: {e}", path.display())))?;
        let beneath = PathBeneath {
            allowed_access: rights & handled,
            parent_fd: file.as_raw_fd(),
        };
        // SAFETY: valid fds and rule pointer.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_landlock_add_rule,
                ruleset.as_raw_fd(),
                1, // LANDLOCK_RULE_PATH_BENEATH
                &beneath as *const PathBeneath,
                0,
            )
        };
        if rc != 0 {
            return Err(unavailable(name, "landlock_add_rule"));
        }
    }
    Ok(ruleset)
}

use std::os::unix::fs::OpenOptionsExt;

// ---- seccomp ----

struct Filter(Vec<libc::sock_filter>);

impl Filter {
    fn new(program: Vec<libc::sock_filter>) -> Self {
        Self(program)
    }
}

fn stmt(code: u32, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u32, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    }
}

const LD_W_ABS: u32 = libc::BPF_LD | libc::BPF_W | libc::BPF_ABS;
const JEQ_K: u32 = libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K;
const JSET_K: u32 = libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K;
const RET_K: u32 = libc::BPF_RET | libc::BPF_K;
const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
const EPERM: u32 = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
const ENOSYS: u32 = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;

fn kill_everything_program() -> Vec<libc::sock_filter> {
    vec![stmt(RET_K, libc::SECCOMP_RET_KILL_PROCESS)]
}

/// Refuses fork, vfork, clone without CLONE_THREAD (EPERM) and clone3 (ENOSYS).
fn deny_fork_program() -> Vec<libc::sock_filter> {
    vec![
        stmt(LD_W_ABS, 4), // arch
        jump(JEQ_K, AUDIT_ARCH_X86_64, 1, 0),
        stmt(RET_K, libc::SECCOMP_RET_KILL_PROCESS),
        stmt(LD_W_ABS, 0), // nr
        jump(JEQ_K, libc::SYS_fork as u32, 6, 0),
        jump(JEQ_K, libc::SYS_vfork as u32, 5, 0),
        jump(JEQ_K, libc::SYS_clone3 as u32, 5, 0),
        jump(JEQ_K, libc::SYS_clone as u32, 1, 0),
        stmt(RET_K, libc::SECCOMP_RET_ALLOW),
        stmt(LD_W_ABS, 16), // args[0] low 32 bits: clone flags
        jump(JSET_K, libc::CLONE_THREAD as u32, 2, 0),
        stmt(RET_K, EPERM),
        stmt(RET_K, ENOSYS),
        stmt(RET_K, libc::SECCOMP_RET_ALLOW),
    ]
}
