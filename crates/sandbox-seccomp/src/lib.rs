//! Compiles a sandbox policy to a default-deny seccomp-BPF program.
//!
//! Landlock governs paths; this filter covers the rest of what the policy
//! promises on Linux: no network, no child processes, and no syscall that
//! gets around the path rules. Building a [`Filter`] is pure data; installing
//! it ([`Filter::apply`]) is a separate, async-signal-safe call made in the
//! child after `fork`.
//!
//! # Shape of the program
//!
//! 1. Architecture check, then the x32 bit (x86_64): both kill the process.
//! 2. A balanced binary search on the syscall number (`jge` only) over runs
//!    of consecutive numbers with the same answer, built from the table
//!    (`table.rs`, one row per syscall, grouped by purpose). Its leaves are
//!    constant answers (`ALLOW`; `EPERM` for explicit denials;
//!    [`broker_or_refuse`] for metadata writes Landlock cannot govern:
//!    `SECCOMP_RET_USER_NOTIF` to the broker when [`FilterSpec::broker`] is
//!    set, else `EPERM`; `ENOSYS` for `clone3` and every number the table
//!    does not know) or the argument checks of one syscall, compiled by
//!    `seccompiler`.
//!
//! Constant answers are shared `ret` instructions after the search, and the
//! instructions no path reaches (seccompiler pads its blocks) are dropped, so
//! the program stays small (about 135 to 225 instructions; the kernel converts
//! and JIT-compiles every one on attach). A call costs about ten comparisons
//! instead of a scan of the table, and the kernel's action cache, which it
//! prepares on attach by emulating the program for every syscall number,
//! takes about ten instructions per number. The disassembly lists the
//! numbers each `ret` answers for.
//!
//! # Syscalls with argument checks
//!
//! Every other allowed syscall is allowed unconditionally, so the kernel's
//! per-syscall action cache serves it without running the filter.
//!
//! | syscall | allowed when | otherwise |
//! |---|---|---|
//! | `open`, `openat` | access mode 0–2; `O_TRUNC` only with write access; no set-id bits in the mode with `O_CREAT`/`O_TMPFILE` | `EPERM` |
//! | `creat`, `mknod`, `mknodat` | no set-id bits in the mode | `EPERM` |
//! | `ioctl` | request (low 32 bits) is not in [`DENIED_IOCTLS`] (terminal state, inode flags, filesystem changes without a writable fd), nor a request of [`DENIED_IOCTL_ARGS`] with an argument it lists (`TCXONC` with `TCOOFF` or `TCIOFF`: a stopped terminal outlives the run) | `EPERM` |
//! | `fcntl` | not `F_SETLEASE` (a lease needs only ownership and a read-only fd, and blocks a host process opening the file for writing) | `EACCES`, the kernel's answer to a lease the caller may not take |
//! | `personality` | persona (low 32 bits) is `0xffffffff` (query) or `PER_LINUX` | `EPERM` |
//! | `seccomp` | no `SECCOMP_FILTER_FLAG_NEW_LISTENER` | `EPERM` |
//! | `prctl` | not `PR_SCHED_CORE` | `EPERM` |
//! | `prlimit64`, `sched_setaffinity`, `sched_setparam`, `sched_setscheduler`, `sched_setattr` | pid 0 (the caller) | `EPERM` |
//! | `setpriority`, `ioprio_set` | the caller or its process group (who 0), never a user | `EPERM` |
//! | `clone` | no `CLONE_NEW*` flag; with `deny_subprocess` also `CLONE_THREAD`; with entry calls brokered, `CLONE_THREAD` only with `CLONE_FS` (the broker keeps umasks by thread id, and an `execve` gives a thread its leader's id) | `EPERM` |
//! | `socket` (network off) | `AF_UNIX` stream/seqpacket, or `AF_INET`/`AF_INET6` stream with protocol 0 or TCP | `EPERM` |
//! | `socketpair` (network off) | `AF_UNIX` stream/seqpacket | `EPERM` |
//! | `sendto` (network off) | address is NULL and no `MSG_FASTOPEN` | `EPERM` |
//! | `sendmsg`, `sendmmsg` (network off) | no `MSG_FASTOPEN` | `EPERM` |
//!
//! Policy-dependent rows without argument checks: `connect`, `listen`,
//! `accept`, `accept4` are `EPERM` with network off; `fork`, `vfork` are
//! `EPERM` with `deny_subprocess`; `setsid`, `setpgid` are `EPERM` when the
//! runner holds the run by its process group ([`FilterSpec::hold_group`]);
//! `truncate` (Landlock's truncate right is never handled),
//! `utimensat` (path and fd forms) and the chmod, chown and xattr-write
//! families are always [`broker_or_refuse`]; with read denials
//! ([`FilterSpec::read_deny`]) the xattr reads are [`xattr_read`] and
//! `getxattrat`/`listxattrat` `ENOSYS`. System V IPC is `EPERM` (no IPC
//! namespace). `clone3` and `openat2` are always `ENOSYS`: their flags sit
//! behind a pointer a filter cannot read, and `ENOSYS` makes libc fall back
//! to `clone` and `openat`, whose flags it can.
//!
//! # In the child
//!
//! What runs after `fork` in the confined child is here, async-signal-safe
//! (stack only, raw errno on failure): [`Filter::apply`],
//! [`install_with_listener`], [`listener`] (install with a listener and send
//! it to the broker, which receives it) and [`caps`] (the capability sets,
//! which the broker's credential switches use too).
//!
//! # Targets
//!
//! Linux on x86_64 and aarch64. Elsewhere the crate builds, and [`compile`]
//! returns [`SeccompError::UnsupportedTarget`].
#![warn(missing_docs)]
#![warn(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

#[cfg(target_os = "linux")]
pub mod caps;
#[doc(hidden)]
pub mod codegen;
#[cfg(target_os = "linux")]
pub mod listener;
mod spec;

use std::sync::{Arc, Mutex, PoisonError};

pub use spec::{
    broker_or_refuse, xattr_read, Action, Cmp, Cond, Entry, EntryForm, ExecForm, FilterSpec,
    Handler, MetaForm, Rule, Width, XattrForm, DENY, ENOSYS, EOPNOTSUPP, EPERM, METADATA_WRITE,
    UNKNOWN, XATTR_READ_UNBROKERED,
};

/// One classic BPF instruction, in the kernel's `struct sock_filter` layout.
///
/// A [`Filter`]'s program is a slice of these ([`Filter::instructions`]);
/// the layout is the kernel's on every target, so a program can be handed to
/// `seccomp(2)` or `SO_ATTACH_FILTER` as `struct sock_filter *`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct BpfInstruction {
    /// Opcode (`BPF_LD | BPF_W | BPF_ABS`, `BPF_RET | BPF_K`, ...).
    pub code: u16,
    /// Jump offset when the comparison holds.
    pub jt: u8,
    /// Jump offset when it does not.
    pub jf: u8,
    /// Operand (a constant, offset or return value).
    pub k: u32,
}

impl BpfInstruction {
    /// An instruction from its four fields.
    pub const fn new(code: u16, jt: u8, jf: u8, k: u32) -> Self {
        BpfInstruction { code, jt, jf, k }
    }
}

// The kernel's `struct sock_filter` (and libc's copy of it): apply_program
// hands a `&[BpfInstruction]` to the kernel as `*const sock_filter`.
#[cfg(target_os = "linux")]
const _: () = {
    assert!(std::mem::size_of::<BpfInstruction>() == std::mem::size_of::<libc::sock_filter>());
    assert!(std::mem::align_of::<BpfInstruction>() == std::mem::align_of::<libc::sock_filter>());
    assert!(
        std::mem::offset_of!(BpfInstruction, code) == std::mem::offset_of!(libc::sock_filter, code)
    );
    assert!(
        std::mem::offset_of!(BpfInstruction, jt) == std::mem::offset_of!(libc::sock_filter, jt)
    );
    assert!(
        std::mem::offset_of!(BpfInstruction, jf) == std::mem::offset_of!(libc::sock_filter, jf)
    );
    assert!(std::mem::offset_of!(BpfInstruction, k) == std::mem::offset_of!(libc::sock_filter, k));
};

cfg_if::cfg_if! {
    if #[cfg(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64")))] {
        mod arch;
        // The assembler and its raw opcodes, public only for this crate's
        // examples (`perf` times `assemble` without the cache); not part of
        // the supported API.
        #[doc(hidden)]
        pub mod bpf;
        mod table;
        #[cfg(feature = "libseccomp")]
        pub mod libseccomp_backend;
        pub use arch::AUDIT_ARCH;
        pub use table::{
            handler, handlers, table, DENIED_IOCTLS, DENIED_IOCTL_ARGS, HIGHEST_KNOWN, REFUSED_WITH_BROKER,
            SOCKET_IOCTLS_READ, SOCKET_IOCTLS_REFUSED, SOCKET_OPTIONS_REFUSED,
        };
        const SUPPORTED: bool = true;
    } else {
        const SUPPORTED: bool = false;
    }
}

/// Why a policy could not be compiled to a filter.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SeccompError {
    /// No syscall table exists for this target.
    #[error(
        "seccomp filter: no syscall table for {os}/{arch}; only linux on x86_64 and aarch64 \
         are supported, so run without the Landlock backend here"
    )]
    UnsupportedTarget {
        /// `std::env::consts::OS`.
        os: &'static str,
        /// `std::env::consts::ARCH`.
        arch: &'static str,
    },
    /// The program would exceed the kernel's 4096-instruction limit.
    #[error("seccomp filter: the program has {0} instructions, the kernel accepts at most 4096")]
    TooLong(usize),
    /// A compiler back end failed; this is a bug in this crate.
    #[error("seccomp filter: internal error while compiling: {0} (please report this)")]
    Internal(String),
}

/// A compiled, ready-to-install seccomp-BPF program. Cloning is cheap.
#[derive(Debug, Clone)]
pub struct Filter {
    program: Program,
    spec: FilterSpec,
}

#[derive(Debug, Clone)]
enum Program {
    /// Written by `cargo xtask codegen` to `generated/x86_64.rs`; a test
    /// fails when that file differs from what the compiler makes of the table.
    #[allow(dead_code)]
    Prebuilt(&'static [BpfInstruction]),
    Built(Arc<[BpfInstruction]>),
}

/// Compiles `policy` to a default-deny filter for the target architecture.
pub fn compile(policy: &sandbox_core::ResolvedPolicy) -> Result<Filter, SeccompError> {
    compile_spec(&FilterSpec::new(policy))
}

/// Compiles a [`FilterSpec`] (the policy facts the filter depends on).
///
/// On x86_64 the program of every spec a Landlock launch can ask for is
/// prebuilt into this crate (`FilterSpec::prebuilt_slot`; `cargo xtask
/// codegen` writes them to `generated/x86_64.rs` and a test proves each
/// equals what the compiler produces), so a launch pays nothing to get
/// one. Other specs, and other architectures, are compiled once per spec and
/// cached for the life of the process.
pub fn compile_spec(spec: &FilterSpec) -> Result<Filter, SeccompError> {
    if let Some(program) = prebuilt(spec) {
        return Ok(Filter {
            program: Program::Prebuilt(program),
            spec: *spec,
        });
    }
    static CACHE: Mutex<Vec<Filter>> = Mutex::new(Vec::new());
    // Nothing panics while the lock is held; a poisoned cache is still valid.
    let mut cache = CACHE.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(filter) = cache.iter().find(|f| f.spec == *spec) {
        return Ok(filter.clone());
    }
    let filter = build(spec)?;
    cache.push(filter.clone());
    Ok(filter)
}

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod prebuilt {
    // Written by `cargo xtask codegen` ([`codegen`]), outside `src/`.
    include!("../generated/x86_64.rs");
}

/// How many specs have a prebuilt program ([`FilterSpec::prebuilt_slot`]):
/// every spec a Landlock launch can ask for; the rest are compiled once per
/// process.
#[cfg(all(test, target_os = "linux", target_arch = "x86_64"))]
const PREBUILT_SPECS: usize = 128;

fn prebuilt(spec: &FilterSpec) -> Option<&'static [BpfInstruction]> {
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    {
        spec.prebuilt_slot()
            .and_then(|slot| prebuilt::PROGRAMS.get(slot).copied())
    }
    #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
    {
        let _ = spec;
        None
    }
}

/// Compiles `spec` without the cache.
fn build(spec: &FilterSpec) -> Result<Filter, SeccompError> {
    if !SUPPORTED {
        return Err(SeccompError::UnsupportedTarget {
            os: std::env::consts::OS,
            arch: std::env::consts::ARCH,
        });
    }
    #[cfg(all(
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "aarch64")
    ))]
    {
        let program = bpf::assemble(&table::table(spec))?;
        Ok(Filter::new(program, *spec))
    }
    #[cfg(not(all(
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "aarch64")
    )))]
    {
        let _ = spec;
        unreachable!("SUPPORTED is false on this target")
    }
}

impl Filter {
    #[allow(dead_code)]
    fn new(program: Vec<BpfInstruction>, spec: FilterSpec) -> Self {
        Filter {
            program: Program::Built(program.into()),
            spec,
        }
    }

    /// The program's instructions.
    pub fn instructions(&self) -> &[BpfInstruction] {
        match &self.program {
            Program::Prebuilt(p) => p,
            Program::Built(p) => p,
        }
    }

    /// Number of instructions.
    pub fn len(&self) -> usize {
        self.instructions().len()
    }

    /// Whether the program is empty (never true for a compiled filter).
    pub fn is_empty(&self) -> bool {
        self.instructions().is_empty()
    }

    /// The syscall name the table gives `nr`, if any.
    pub fn syscall_name(&self, nr: u32) -> Option<&'static str> {
        #[cfg(all(
            target_os = "linux",
            any(target_arch = "x86_64", target_arch = "aarch64")
        ))]
        {
            name_in(&table::table(&self.spec), nr)
        }
        #[cfg(not(all(
            target_os = "linux",
            any(target_arch = "x86_64", target_arch = "aarch64")
        )))]
        {
            let _ = nr;
            None
        }
    }

    /// The program in libc's layout, for [`install_with_listener`].
    #[cfg(target_os = "linux")]
    pub fn libc_program(&self) -> Vec<libc::sock_filter> {
        self.instructions()
            .iter()
            .map(|i| libc::sock_filter {
                code: i.code,
                jt: i.jt,
                jf: i.jf,
                k: i.k,
            })
            .collect()
    }

    /// Installs the filter on the calling thread (`SECCOMP_SET_MODE_FILTER`,
    /// no flags). Async-signal-safe: no allocation, no panic; returns the raw
    /// errno on failure. The caller must already have set `PR_SET_NO_NEW_PRIVS`
    /// (or hold `CAP_SYS_ADMIN`).
    pub fn apply(&self) -> Result<(), i32> {
        apply_program(self.instructions())
    }

    /// Human-readable disassembly, one instruction per line, with syscall
    /// names and `seccomp_data` fields spelled out.
    pub fn disassemble(&self) -> String {
        #[cfg(all(
            target_os = "linux",
            any(target_arch = "x86_64", target_arch = "aarch64")
        ))]
        {
            let rows = table::table(&self.spec);
            bpf::disassemble(self.instructions(), |nr| name_in(&rows, nr))
        }
        #[cfg(not(all(
            target_os = "linux",
            any(target_arch = "x86_64", target_arch = "aarch64")
        )))]
        {
            String::new()
        }
    }
}

/// The name `rows` give syscall `nr`.
#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
fn name_in(rows: &[Entry], nr: u32) -> Option<&'static str> {
    rows.iter().find(|e| e.nr == nr).map(|e| e.name)
}

#[cfg(target_os = "linux")]
fn apply_program(program: &[BpfInstruction]) -> Result<(), i32> {
    // SAFETY: `BpfInstruction` is `#[repr(C)]` with the kernel's layout,
    // identical to `libc::sock_filter` (asserted at compile time above), so
    // the same memory is a valid `sock_filter` slice of the same length.
    let raw = unsafe {
        std::slice::from_raw_parts(program.as_ptr().cast::<libc::sock_filter>(), program.len())
    };
    install(raw, 0).map(|_| ())
}

/// `seccomp(SECCOMP_SET_MODE_FILTER, flags, program)` on the calling
/// thread: what it returns (the listener fd, with
/// `SECCOMP_FILTER_FLAG_NEW_LISTENER`) or the raw errno. Async-signal-safe:
/// the `sock_fprog` lives on this stack frame, nothing is allocated.
#[cfg(target_os = "linux")]
fn install(program: &[libc::sock_filter], flags: libc::c_ulong) -> Result<libc::c_long, i32> {
    let Ok(len) = u16::try_from(program.len()) else {
        return Err(libc::EINVAL);
    };
    let prog = libc::sock_fprog {
        len,
        filter: program.as_ptr().cast_mut(),
    };
    // SAFETY: `prog` points at `len` valid instructions that outlive the call;
    // the kernel copies the program before returning.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            flags,
            &prog as *const libc::sock_fprog,
        )
    };
    if rc < 0 {
        // SAFETY: reading the calling thread's errno right after the call.
        Err(unsafe { *libc::__errno_location() })
    } else {
        Ok(rc)
    }
}

/// Installs `program` on the calling thread with a user-notification
/// listener (`SECCOMP_FILTER_FLAG_NEW_LISTENER`) and returns the listener
/// fd, which the caller then owns; the raw errno on failure.
/// Async-signal-safe. The caller must already have set
/// `PR_SET_NO_NEW_PRIVS` (or hold `CAP_SYS_ADMIN`).
///
/// Where the kernel has it (5.19) the filter also gets
/// `SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV`: once the supervisor has
/// received a call, only a fatal signal ends the caller's wait, so a call
/// the supervisor already performed (a file created, a directory removed)
/// is never interrupted and restarted (which would then fail with `EEXIST`
/// or `ENOENT`). Kernels before 5.19 refuse the flag (`EINVAL`); the filter
/// is installed without it there.
#[cfg(target_os = "linux")]
pub fn install_with_listener(program: &[libc::sock_filter]) -> Result<std::os::fd::RawFd, i32> {
    let listener = match install(
        program,
        libc::SECCOMP_FILTER_FLAG_NEW_LISTENER | libc::SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV,
    ) {
        Err(libc::EINVAL) => install(program, libc::SECCOMP_FILTER_FLAG_NEW_LISTENER)?,
        other => other?,
    };
    Ok(listener as std::os::fd::RawFd)
}

#[cfg(not(target_os = "linux"))]
fn apply_program(_: &[BpfInstruction]) -> Result<(), i32> {
    Err(libc::ENOSYS)
}

#[cfg(all(test, target_os = "linux", target_arch = "x86_64"))]
mod prebuilt_tests {
    use super::*;

    /// The prebuilt programs are exactly what the compiler makes of the table.
    /// After changing the table or the assembler, regenerate them with
    /// `cargo xtask codegen`. Nothing here writes into the source tree.
    #[test]
    fn prebuilt_programs_match_the_compiler() {
        const FILE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/generated/x86_64.rs");
        const CHECKED_IN: &str = include_str!("../generated/x86_64.rs");
        let built = codegen::built();
        assert_eq!(built.len(), PREBUILT_SPECS);
        for (spec, filter) in &built {
            assert!(
                prebuilt(spec) == Some(filter.instructions()),
                "{FILE} is stale for {spec:?}: run `cargo xtask codegen`"
            );
        }
        assert!(
            codegen::prebuilt_source().as_deref() == Some(CHECKED_IN),
            "{FILE} differs from what `cargo xtask codegen` writes: run `cargo xtask codegen`"
        );
    }
}
