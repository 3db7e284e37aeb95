//! The syscall table: every syscall the filter knows, grouped by purpose.
//!
//! Anything not listed here answers `ENOSYS` ([`UNKNOWN`]). Plain allows carry
//! no argument checks, so the kernel's per-syscall action cache applies to
//! them; the few argument-checked rows are built in [`table`] below.

use crate::spec::{
    broker_or_refuse, xattr_read, Action, Cmp, Cond, Entry, EntryForm, ExecForm, FilterSpec,
    Handler, MetaForm, Rule, XattrForm, DENY, UNKNOWN,
};

/// libc's syscall numbers plus the ones this libc release does not name yet.
/// Numbers from 424 on are shared by every architecture.
#[allow(non_upper_case_globals, dead_code)]
mod sys {
    pub use libc::*;
    #[cfg(target_arch = "x86_64")]
    pub const SYS_io_pgetevents: c_long = 333;
    #[cfg(target_arch = "aarch64")]
    pub const SYS_io_pgetevents: c_long = 292;
    pub const SYS_cachestat: c_long = 451;
    pub const SYS_fchmodat2: c_long = 452;
    pub const SYS_map_shadow_stack: c_long = 453;
    pub const SYS_futex_wake: c_long = 454;
    pub const SYS_futex_wait: c_long = 455;
    pub const SYS_futex_requeue: c_long = 456;
    pub const SYS_statmount: c_long = 457;
    pub const SYS_listmount: c_long = 458;
    pub const SYS_lsm_get_self_attr: c_long = 459;
    pub const SYS_lsm_set_self_attr: c_long = 460;
    pub const SYS_lsm_list_modules: c_long = 461;
    pub const SYS_setxattrat: c_long = 463;
    pub const SYS_getxattrat: c_long = 464;
    pub const SYS_listxattrat: c_long = 465;
    pub const SYS_removexattrat: c_long = 466;
    pub const SYS_open_tree_attr: c_long = 467;
    pub const SYS_file_getattr: c_long = 468;
    pub const SYS_file_setattr: c_long = 469;
    #[cfg(target_arch = "aarch64")]
    pub const SYS_renameat: c_long = 38;
    #[cfg(target_arch = "aarch64")]
    pub const SYS_sync_file_range: c_long = 84;
    #[cfg(target_arch = "aarch64")]
    pub const SYS_getrlimit: c_long = 163;
    #[cfg(target_arch = "aarch64")]
    pub const SYS_setrlimit: c_long = 164;
}

/// The highest syscall number the table names.
pub const HIGHEST_KNOWN: u32 = 469;

/// A syscall by name and number, and how the broker handles it when the
/// filter routes it there (`None`: the broker does not decode it).
type Sys = (&'static str, i64, Option<Handler>);

macro_rules! sys {
    ($($name:ident),* $(,)?) => {
        &[$((stringify!($name), sys::$name as i64, None)),*]
    };
}

/// One syscall, optionally with its broker handler (`SYS_x => handler`).
macro_rules! one {
    ($name:ident) => {
        (stringify!($name), sys::$name as i64, None)
    };
    ($name:ident => $handler:expr) => {
        (stringify!($name), sys::$name as i64, Some($handler))
    };
}

/// Metadata-change rows: `SYS_x => form: reason`.
macro_rules! metadata {
    ($($name:ident => $form:ident: $reason:expr),* $(,)?) => {
        &[$((one!($name => meta(MetaForm::$form)), $reason)),*]
    };
}

const fn meta(form: MetaForm) -> Handler {
    Handler::Metadata(form)
}

const fn entry(form: EntryForm) -> Handler {
    Handler::Entry(form)
}

macro_rules! deny {
    ($($name:ident => $reason:expr),* $(,)?) => {
        &[$((stringify!($name), sys::$name as i64, $reason)),*]
    };
}

// ---------------------------------------------------------------------------
// Always allowed, by purpose.
// ---------------------------------------------------------------------------

/// The caller's own address space.
const MEMORY: &[Sys] = sys![
    SYS_brk,
    SYS_mmap,
    SYS_munmap,
    SYS_mremap,
    SYS_mprotect,
    SYS_madvise,
    SYS_msync,
    SYS_mincore,
    SYS_mlock,
    SYS_mlock2,
    SYS_munlock,
    SYS_mlockall,
    SYS_munlockall,
    SYS_pkey_alloc,
    SYS_pkey_free,
    SYS_pkey_mprotect,
    SYS_membarrier,
    SYS_mseal,
    SYS_get_mempolicy,
    SYS_set_mempolicy,
    SYS_set_mempolicy_home_node,
    SYS_mbind,
    SYS_remap_file_pages,
    SYS_memfd_create,
    SYS_memfd_secret,
    SYS_map_shadow_stack,
];

/// I/O on descriptors the process already holds (opening is Landlock's job).
const FD_IO: &[Sys] = sys![
    SYS_read,
    SYS_write,
    SYS_readv,
    SYS_writev,
    SYS_pread64,
    SYS_pwrite64,
    SYS_preadv,
    SYS_pwritev,
    SYS_preadv2,
    SYS_pwritev2,
    SYS_lseek,
    SYS_close,
    SYS_close_range,
    SYS_dup,
    SYS_dup3,
    SYS_flock,
    SYS_fsync,
    SYS_fdatasync,
    SYS_sync,
    SYS_syncfs,
    SYS_sync_file_range,
    SYS_fallocate,
    SYS_ftruncate,
    SYS_sendfile,
    SYS_splice,
    SYS_tee,
    SYS_vmsplice,
    SYS_copy_file_range,
    SYS_readahead,
    SYS_fadvise64,
    SYS_pipe2,
    SYS_fstat,
    SYS_fstatfs,
    SYS_getdents64,
    SYS_cachestat,
    SYS_io_setup,
    SYS_io_destroy,
    SYS_io_submit,
    SYS_io_cancel,
    SYS_io_getevents,
    SYS_io_pgetevents,
];

/// Waiting for events on descriptors.
const EVENTS: &[Sys] = sys![
    SYS_pselect6,
    SYS_ppoll,
    SYS_epoll_create1,
    SYS_epoll_ctl,
    SYS_epoll_pwait,
    SYS_epoll_pwait2,
    SYS_eventfd2,
    SYS_signalfd4,
    SYS_timerfd_create,
    SYS_timerfd_settime,
    SYS_timerfd_gettime,
    SYS_inotify_init1,
    SYS_inotify_add_watch,
    SYS_inotify_rm_watch,
];

/// Path operations whose effect Landlock governs (or that only read metadata).
const PATHS: &[Sys] = sys![
    SYS_newfstatat,
    SYS_statx,
    SYS_statfs,
    SYS_faccessat,
    SYS_faccessat2,
    SYS_getcwd,
    SYS_chdir,
    SYS_fchdir,
    SYS_readlinkat,
    SYS_file_getattr,
    SYS_statmount,
    SYS_listmount,
];

/// Clocks, sleeping and timers (reading only; setting clocks is denied).
const TIME: &[Sys] = sys![
    SYS_clock_gettime,
    SYS_clock_getres,
    SYS_clock_nanosleep,
    SYS_nanosleep,
    SYS_gettimeofday,
    SYS_times,
    SYS_getitimer,
    SYS_setitimer,
    SYS_timer_create,
    SYS_timer_settime,
    SYS_timer_gettime,
    SYS_timer_getoverrun,
    SYS_timer_delete,
];

/// Signals (Landlock ABI >= 6 scopes who may be signalled).
const SIGNALS: &[Sys] = sys![
    SYS_rt_sigaction,
    SYS_rt_sigprocmask,
    SYS_rt_sigreturn,
    SYS_rt_sigpending,
    SYS_rt_sigtimedwait,
    SYS_rt_sigqueueinfo,
    SYS_rt_tgsigqueueinfo,
    SYS_rt_sigsuspend,
    SYS_sigaltstack,
    SYS_kill,
    SYS_tkill,
    SYS_tgkill,
    SYS_pidfd_send_signal,
];

/// Threads, synchronisation and the caller's own scheduling.
const THREADS: &[Sys] = sys![
    SYS_set_tid_address,
    SYS_set_robust_list,
    SYS_rseq,
    SYS_futex,
    SYS_futex_waitv,
    SYS_futex_wake,
    SYS_futex_wait,
    SYS_futex_requeue,
    SYS_sched_yield,
    SYS_sched_getaffinity,
    SYS_sched_getparam,
    SYS_sched_getscheduler,
    SYS_sched_get_priority_max,
    SYS_sched_get_priority_min,
    SYS_sched_rr_get_interval,
    SYS_sched_getattr,
    SYS_getpriority,
    SYS_ioprio_get,
    SYS_getcpu,
    SYS_restart_syscall,
];

/// Process lifecycle and identity. Spawning is decided in [`table`].
const PROCESS: &[Sys] = sys![
    SYS_exit,
    SYS_exit_group,
    SYS_wait4,
    SYS_waitid,
    SYS_pidfd_open,
    SYS_getpid,
    SYS_getppid,
    SYS_gettid,
    SYS_getuid,
    SYS_geteuid,
    SYS_getgid,
    SYS_getegid,
    SYS_getgroups,
    SYS_getresuid,
    SYS_getresgid,
    SYS_getpgid,
    SYS_getsid,
    SYS_setuid,
    SYS_setgid,
    SYS_setreuid,
    SYS_setregid,
    SYS_setresuid,
    SYS_setresgid,
    SYS_setgroups,
    SYS_setfsuid,
    SYS_setfsgid,
    SYS_capget,
    SYS_capset,
    SYS_getrlimit,
    SYS_setrlimit,
    SYS_getrusage,
    SYS_sysinfo,
    SYS_uname,
    SYS_getrandom,
];

/// Self-confinement: a nested sandbox can only narrow what this one allows
/// (Landlock itself: see [`nested_landlock`]).
const SELF_CONFINEMENT: &[Sys] = sys![SYS_lsm_get_self_attr, SYS_lsm_list_modules];

/// Socket calls that need no check even without network: they act on sockets
/// the policy already let the process create.
const SOCKETS_ALWAYS: &[Sys] = &[
    one!(SYS_bind => Handler::Bind),
    one!(SYS_getsockname),
    one!(SYS_getpeername),
    one!(SYS_shutdown),
    one!(SYS_recvfrom),
    one!(SYS_recvmsg),
    one!(SYS_recvmmsg),
];

/// Legacy x86_64 entry points of calls allowed above (aarch64 never had them).
#[cfg(target_arch = "x86_64")]
const LEGACY_X86_64: &[Sys] = sys![
    SYS_stat,
    SYS_lstat,
    SYS_access,
    SYS_getdents,
    SYS_readlink,
    SYS_pipe,
    SYS_dup2,
    SYS_select,
    SYS_poll,
    SYS_epoll_create,
    SYS_epoll_wait,
    SYS_eventfd,
    SYS_signalfd,
    SYS_inotify_init,
    SYS_time,
    SYS_alarm,
    SYS_pause,
    SYS_getpgrp,
    SYS_arch_prctl,
];
#[cfg(not(target_arch = "x86_64"))]
const LEGACY_X86_64: &[Sys] = &[];

// ---------------------------------------------------------------------------
// Never allowed, each with its reason.
// ---------------------------------------------------------------------------

/// Denied with `EPERM` under every policy.
const ALWAYS_DENIED: &[(&str, i64, &str)] = deny![
    SYS_io_uring_setup => "io_uring runs file and network ops the filter never sees",
    SYS_io_uring_enter => "io_uring runs file and network ops the filter never sees",
    SYS_io_uring_register => "io_uring runs file and network ops the filter never sees",
    SYS_ptrace => "controls other processes, including unconfined ones",
    SYS_process_vm_readv => "reads another process's memory",
    SYS_process_vm_writev => "writes another process's memory",
    SYS_process_madvise => "acts on another process's memory",
    SYS_process_mrelease => "acts on another process's memory",
    SYS_pidfd_getfd => "steals descriptors from another process",
    SYS_kcmp => "ptrace-class inspection of another process",
    SYS_get_robust_list => "ptrace-class inspection of another process",
    SYS_migrate_pages => "moves another process's memory",
    SYS_move_pages => "moves another process's memory",
    SYS_mount => "mounting rearranges the paths Landlock governs",
    SYS_umount2 => "mounting rearranges the paths Landlock governs",
    SYS_fsopen => "new mount API",
    SYS_fsconfig => "new mount API",
    SYS_fsmount => "new mount API",
    SYS_fspick => "new mount API",
    SYS_move_mount => "new mount API",
    SYS_open_tree => "new mount API (clones mount trees)",
    SYS_open_tree_attr => "new mount API (clones mount trees)",
    SYS_mount_setattr => "new mount API",
    SYS_pivot_root => "changes the root the paths resolve against",
    SYS_chroot => "changes the root the paths resolve against",
    SYS_unshare => "new namespaces escape path and network rules",
    SYS_setns => "joins namespaces outside the sandbox",
    SYS_bpf => "loads kernel programs",
    SYS_perf_event_open => "kernel observation and a history of exploits",
    SYS_userfaultfd => "stalls the kernel at chosen points (exploit primitive)",
    SYS_keyctl => "kernel keyrings are shared outside the sandbox",
    SYS_add_key => "kernel keyrings are shared outside the sandbox",
    SYS_request_key => "kernel keyrings are shared outside the sandbox",
    SYS_kexec_load => "replaces the running kernel",
    SYS_kexec_file_load => "replaces the running kernel",
    SYS_init_module => "loads kernel modules",
    SYS_finit_module => "loads kernel modules",
    SYS_delete_module => "unloads kernel modules",
    SYS_reboot => "reboots the machine",
    SYS_swapon => "changes system swap",
    SYS_swapoff => "changes system swap",
    SYS_acct => "writes process accounting to an arbitrary file",
    SYS_quotactl => "changes filesystem quotas",
    SYS_quotactl_fd => "changes filesystem quotas",
    SYS_name_to_handle_at => "file handles bypass path resolution",
    SYS_open_by_handle_at => "opens files by handle, bypassing Landlock's path walk",
    SYS_fanotify_init => "intercepts other processes' file access",
    SYS_fanotify_mark => "intercepts other processes' file access",
    SYS_sethostname => "changes system identity",
    SYS_setdomainname => "changes system identity",
    SYS_settimeofday => "changes the system clock",
    SYS_clock_settime => "changes the system clock",
    SYS_clock_adjtime => "changes the system clock",
    SYS_adjtimex => "changes the system clock",
    SYS_syslog => "reads and clears the kernel log",
    SYS_vhangup => "hangs up the controlling terminal of others",
    SYS_lsm_set_self_attr => "changes the LSM security context",
    SYS_mq_open => "POSIX message queues live outside Landlock's view",
    SYS_mq_unlink => "POSIX message queues live outside Landlock's view",
    SYS_mq_timedsend => "POSIX message queues live outside Landlock's view",
    SYS_mq_timedreceive => "POSIX message queues live outside Landlock's view",
    SYS_mq_notify => "POSIX message queues live outside Landlock's view",
    SYS_mq_getsetattr => "POSIX message queues live outside Landlock's view",
    SYS_shmget => SYSV_IPC,
    SYS_shmat => SYSV_IPC,
    SYS_shmdt => SYSV_IPC,
    SYS_shmctl => SYSV_IPC,
    SYS_semget => SYSV_IPC,
    SYS_semop => SYSV_IPC,
    SYS_semtimedop => SYSV_IPC,
    SYS_semctl => SYSV_IPC,
    SYS_msgget => SYSV_IPC,
    SYS_msgsnd => SYSV_IPC,
    SYS_msgrcv => SYSV_IPC,
    SYS_msgctl => SYSV_IPC,
];

/// Why System V IPC is refused.
const SYSV_IPC: &str = "System V IPC objects are global (the sandbox has no IPC namespace): a \
     confined process could attach to and write a host process's shared memory, semaphores and \
     message queues";

/// x86_64-only denials.
#[cfg(target_arch = "x86_64")]
const ALWAYS_DENIED_X86_64: &[(&str, i64, &str)] = deny![
    SYS_iopl => "raw I/O port access",
    SYS_ioperm => "raw I/O port access",
    SYS_modify_ldt => "segment descriptor tricks, a history of exploits",
    SYS_uselib => "obsolete loader entry point",
    SYS_ustat => "obsolete",
    SYS_sysfs => "obsolete",
];
#[cfg(not(target_arch = "x86_64"))]
const ALWAYS_DENIED_X86_64: &[(&str, i64, &str)] = &[];

/// Metadata writes Landlock cannot govern and the broker mediates: answered
/// with [`broker_or_refuse`].
const METADATA: &[(Sys, &str)] = metadata![
    SYS_fchmod => Fchmod: "Landlock has no chmod right",
    SYS_fchmodat => Fchmodat: "Landlock has no chmod right",
    SYS_fchmodat2 => Fchmodat2: "Landlock has no chmod right",
    SYS_fchown => Fchown: "Landlock has no chown right",
    SYS_fchownat => Fchownat: "Landlock has no chown right",
    SYS_setxattr => Setxattr: "Landlock has no xattr right",
    SYS_lsetxattr => Lsetxattr: "Landlock has no xattr right",
    SYS_fsetxattr => Fsetxattr: "Landlock has no xattr right",
    SYS_removexattr => Removexattr: "Landlock has no xattr right",
    SYS_lremovexattr => Lremovexattr: "Landlock has no xattr right",
    SYS_fremovexattr => Fremovexattr: "Landlock has no xattr right",
];

/// Metadata writes refused even with a broker (newer calls it does not decode).
const METADATA_UNBROKERED: &[(&str, i64, &str)] = deny![
    SYS_setxattrat => "Landlock has no xattr right; not brokered (Linux 6.13+)",
    SYS_removexattrat => "Landlock has no xattr right; not brokered (Linux 6.13+)",
    SYS_file_setattr => "sets inode flags (immutable, append-only); no Landlock right",
];

/// x86_64-only metadata writes.
#[cfg(target_arch = "x86_64")]
const METADATA_X86_64: &[(Sys, &str)] = metadata![
    SYS_chmod => Chmod: "Landlock has no chmod right",
    SYS_chown => Chown: "Landlock has no chown right",
    SYS_lchown => Lchown: "Landlock has no chown right",
    SYS_utime => Utime: "path-based utimes; Landlock has no utimes right",
    SYS_utimes => Utimes: "path-based utimes; Landlock has no utimes right",
    SYS_futimesat => Futimesat: "path-based utimes; Landlock has no utimes right",
];
#[cfg(not(target_arch = "x86_64"))]
const METADATA_X86_64: &[(Sys, &str)] = &[];

// ---------------------------------------------------------------------------
// Argument-checked rows and policy-dependent rows.
// ---------------------------------------------------------------------------

/// Every `CLONE_NEW*` flag `clone` accepts (`CLONE_NEWTIME` is clone3-only;
/// in `clone` that bit is part of the exit signal).
pub const CLONE_NEW_MASK: u64 = (libc::CLONE_NEWNS
    | libc::CLONE_NEWCGROUP
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET) as u64;

/// `TIOCSTI` (asm-generic value, shared by x86_64 and aarch64).
pub const TIOCSTI: u64 = 0x5412;
/// `TIOCLINUX` (asm-generic value, shared by x86_64 and aarch64).
pub const TIOCLINUX: u64 = 0x541c;

/// `TCXONC` (asm-generic value, shared by x86_64 and aarch64): `tcflow`.
pub(crate) const TCXONC: u64 = 0x540a;
/// `TCOOFF`, `TCXONC`'s "suspend output".
pub(crate) const TCOOFF: u64 = 0;
/// `TCIOFF`, `TCXONC`'s "send STOP".
pub(crate) const TCIOFF: u64 = 2;

/// ioctl requests refused for some values of their third argument only, as
/// `(name, request, refused arguments, reason)`; any other argument is
/// allowed. The kernel reads that argument as an `unsigned long`
/// (`n_tty_ioctl_helper`, drivers/tty/tty_ioctl.c), so all 64 bits are
/// compared: a value with high bits set is none of the four actions, and
/// the kernel answers `EINVAL` for it.
///
/// `TCXONC` with `TCOOFF` stops the terminal's output until a `TCOON`:
/// nothing but that undoes it (a command that also clears `IXON` makes
/// Ctrl-Q plain input), so every later writer to the terminal, the runner's
/// own summary line and the user's shell after the run, blocks in
/// `n_tty_write`. `TCIOFF` sends the terminal STOP, which on a serial line
/// stops the device sending input. `TCOON` and `TCION`, which undo them,
/// stay allowed. The runner also restores the terminal it passed on as it
/// found it when the run ends (`sandbox_launch`'s terminal guard); this
/// refusal keeps a stopped terminal from blocking anyone during the run.
pub const DENIED_IOCTL_ARGS: &[(&str, u64, &[u64], &str)] = &[(
    "TCXONC",
    TCXONC,
    &[TCOOFF, TCIOFF],
    "TCOOFF stops the terminal's output (and TCIOFF sends it STOP), which outlives the run: every later writer to the terminal blocks; TCOON and TCION stay allowed",
)];

/// ioctl requests refused under every policy, each with its reason. The
/// values are the asm-generic `_IOC` encodings x86_64 and aarch64 share; the
/// kernel reads the request as 32 bits, so only those are compared.
///
/// An ioctl acts on an fd, and Landlock checks rights when a file is opened,
/// not per ioctl (its IOCTL_DEV right, ABI 5, covers device files only). A
/// file opened read-only outside the write paths therefore still reaches
/// every ioctl that needs only ownership of the inode, not a writable fd: as
/// root with capabilities dropped that is every root-owned file. These
/// change an inode, a filesystem or a terminal beyond the run without a
/// writable fd; ioctls that need a writable fd (FICLONE, FICLONERANGE,
/// EXT4_IOC_MOVE_EXT, XFS_IOC_SWAPEXT, ...) stay governed by Landlock's
/// WRITE_FILE and are allowed, and those that need a capability the sandbox
/// drops (FITRIM, FIFREEZE, TIOCCONS, ...) are listed where a mistake in the
/// capability drop would hurt.
pub const DENIED_IOCTLS: &[(&str, u64, &str)] = &[
    ("TIOCSTI", TIOCSTI, "injects input into the terminal"),
    ("TIOCLINUX", TIOCLINUX, "console selection and input injection"),
    ("TIOCSETD", 0x5423, "changes the terminal's line discipline, which outlives the run (N_NULL drops every later keystroke)"),
    ("TIOCCONS", 0x541d, "redirects the system console"),
    ("TIOCEXCL", 0x540c, "puts the terminal in exclusive mode, which outlives the run"),
    ("TIOCVHANGUP", 0x5437, "hangs up the terminal for every process using it"),
    ("TIOCSSERIAL", 0x541f, "changes serial line settings beyond the run"),
    ("TIOCSLCKTRMIOS", 0x5457, "locks termios settings beyond the run"),
    ("KDSKBMETA", 0x4b63, "sets a console keyboard's meta mode, which outlives the run (the kernel checks no permission for it)"),
    ("FS_IOC_SETFLAGS", 0x4008_6602, "sets inode flags (nodump, noatime, sync, immutable)"),
    ("FS_IOC32_SETFLAGS", 0x4004_6602, "sets inode flags (nodump, noatime, sync, immutable)"),
    ("FS_IOC_FSSETXATTR", 0x401c_5820, "sets inode flags and project ids"),
    ("FS_IOC_SETVERSION", 0x4008_7602, "sets the inode generation"),
    ("FS_IOC32_SETVERSION", 0x4004_7602, "sets the inode generation"),
    ("EXT4_IOC_SETVERSION", 0x4008_6604, "sets the inode generation"),
    ("EXT4_IOC32_SETVERSION", 0x4004_6604, "sets the inode generation"),
    ("EXT4_IOC_MIGRATE", 0x6609, "rewrites the inode's block map (owner only, no writable fd)"),
    ("EXT4_IOC_ALLOC_DA_BLKS", 0x660c, "forces block allocation of the inode (owner only)"),
    ("EXT4_IOC_SWAP_BOOT", 0x6611, "swaps the inode with the boot loader inode"),
    ("FS_IOC_SET_ENCRYPTION_POLICY", 0x800c_6613, "sets an encryption policy on a directory"),
    ("FS_IOC_ADD_ENCRYPTION_KEY", 0xc050_6617, "adds a key to the filesystem keyring, shared outside the run"),
    ("FS_IOC_REMOVE_ENCRYPTION_KEY", 0xc040_6618, "removes a key from the filesystem keyring"),
    ("FS_IOC_REMOVE_ENCRYPTION_KEY_ALL_USERS", 0xc040_6619, "removes a key from the filesystem keyring"),
    ("FS_IOC_ENABLE_VERITY", 0x4080_6685, "makes a file read-only for good (fs-verity) without a writable fd"),
    ("FIDEDUPERANGE", 0xc018_9436, "rewrites another file's extents; the owner may do it through a read-only fd"),
    ("FS_IOC_SETFSLABEL", 0x4100_9432, "renames the filesystem"),
    ("BTRFS_IOC_SNAP_CREATE", 0x5000_9401, "creates a subvolume snapshot (directory write permission only)"),
    ("BTRFS_IOC_DEFRAG", 0x5000_9402, "rewrites the file's extents"),
    ("BTRFS_IOC_SUBVOL_CREATE", 0x5000_940e, "creates a subvolume (directory write permission only)"),
    ("BTRFS_IOC_SNAP_DESTROY", 0x5000_940f, "deletes a subvolume"),
    ("BTRFS_IOC_DEFRAG_RANGE", 0x4030_9410, "rewrites the file's extents"),
    ("BTRFS_IOC_SNAP_CREATE_V2", 0x5000_9417, "creates a subvolume snapshot"),
    ("BTRFS_IOC_SUBVOL_CREATE_V2", 0x5000_9418, "creates a subvolume"),
    ("BTRFS_IOC_SUBVOL_SETFLAGS", 0x4008_941a, "makes a subvolume read-only or writable (owner only)"),
    ("BTRFS_IOC_SNAP_DESTROY_V2", 0x5000_943f, "deletes a subvolume"),
    ("F2FS_IOC_SET_PIN_FILE", 0x4004_f50d, "pins the file's blocks"),
];

/// The socket ioctls (`0x8900..=0x89ff`, linux/sockios.h) refused under
/// egress rules, as `(mask, value)` blocks of the request: every one but the
/// reads an unprivileged caller may make ([`SOCKET_IOCTLS_READ`]):
/// `FIOSETOWN`..`SIOCGSTAMPNS` (0x8901..=0x8907), `SIOCGIFNAME`,
/// `SIOCGIFCONF`, `SIOCGIFFLAGS`, `SIOCGIFADDR`, `SIOCGIFDSTADDR`,
/// `SIOCGIFBRDADDR`, `SIOCGIFNETMASK`, `SIOCGIFMETRIC`, `SIOCGIFMTU`,
/// `SIOCGIFHWADDR`, `SIOCGIFSLAVE`, `SIOCGIFINDEX`, `SIOCGIFPFLAGS`,
/// `SIOCGIFTXQLEN`, `SIOCOUTQNSD`, `SIOCGARP` and `SIOCGIFMAP`. A refused
/// request answers `EPERM` (the kernel: `EPERM` for one that takes a
/// capability, `ENOTTY` for one it does not know).
///
/// Why: the run's IP datagram sockets belong to a network namespace of its
/// own, which for an unprivileged runner is owned by a user namespace of
/// the runner's uid, the command's too, and so the command holds every
/// capability over it (user_namespaces(7): a process whose effective uid
/// owns a user namespace has all capabilities in it). The refused requests
/// are those that would use them: routes (`SIOCADDRT`), addresses and flags
/// (`SIOCSIF*`), ARP, bridges, VLANs, bonding, tunnels and device-private
/// calls, `SIOCGSKNS`. `sockios_blocks_refuse_exactly_the_non_reads` checks
/// the blocks against that list.
pub const SOCKET_IOCTLS_REFUSED: &[(u64, u64)] = &[
    (0xffff_ffff, 0x8900),
    (0xffff_fff8, 0x8908),
    (0xffff_ffff, 0x8911),
    (0xffff_ffff, 0x8914),
    (0xffff_ffff, 0x8916),
    (0xffff_ffff, 0x8918),
    (0xffff_ffff, 0x891a),
    (0xffff_ffff, 0x891c),
    (0xffff_fffe, 0x891e),
    (0xffff_ffff, 0x8920),
    (0xffff_fffe, 0x8922),
    (0xffff_fffe, 0x8924),
    (0xffff_ffff, 0x8926),
    (0xffff_ffff, 0x8928),
    (0xffff_fffe, 0x892a),
    (0xffff_fffc, 0x892c),
    (0xffff_fffe, 0x8930),
    (0xffff_ffff, 0x8932),
    (0xffff_ffff, 0x8934),
    (0xffff_fffe, 0x8936),
    (0xffff_fff8, 0x8938),
    (0xffff_fffe, 0x8940),
    (0xffff_ffff, 0x8943),
    (0xffff_fffc, 0x8944),
    (0xffff_fffe, 0x8948),
    (0xffff_ffff, 0x894a),
    (0xffff_fffc, 0x894c),
    (0xffff_fffc, 0x8950),
    (0xffff_ffff, 0x8955),
    (0xffff_fffe, 0x8956),
    (0xffff_fff8, 0x8958),
    (0xffff_fff0, 0x8960),
    (0xffff_ffff, 0x8971),
    (0xffff_fffe, 0x8972),
    (0xffff_fffc, 0x8974),
    (0xffff_fff8, 0x8978),
    (0xffff_ff80, 0x8980),
];

/// The socket ioctls the egress filter lets through (see
/// [`SOCKET_IOCTLS_REFUSED`]).
pub const SOCKET_IOCTLS_READ: &[u64] = &[
    0x8901, 0x8902, 0x8903, 0x8904, 0x8905, 0x8906, 0x8907, 0x8910, 0x8912, 0x8913, 0x8915, 0x8917,
    0x8919, 0x891b, 0x891d, 0x8921, 0x8927, 0x8929, 0x8933, 0x8935, 0x8942, 0x894b, 0x8954, 0x8970,
];

/// `SOL_IP`, `SOL_SOCKET` and `SOL_IPV6`.
const SOL_IP: u64 = 0;
const SOL_SOCKET: u64 = 1;
const SOL_IPV6: u64 = 41;

/// The socket options refused under egress rules, as `(level, optname)`
/// (`None`: from 64 up), for the same reason as [`SOCKET_IOCTLS_REFUSED`]:
/// each takes `CAP_NET_ADMIN` or `CAP_NET_RAW` over the socket's network
/// namespace. `SOL_IP` from 64 up reaches netfilter (ip_tables 64,
/// arp_tables 96, ebtables 128, IPVS 1152; ip(7) options end at 52), and
/// `SOL_IPV6` 64, 65, 68 and 69 ip6_tables; `IP(V6)_IPSEC_POLICY` and
/// `IP(V6)_XFRM_POLICY` set IPsec policies; `IP_OPTIONS` and the IPv6
/// extension headers (`IPV6_HOPOPTS`, `IPV6_RTHDRDSTOPTS`, `IPV6_DSTOPTS`,
/// `IPV6_2292PKTOPTIONS`) take `CAP_NET_RAW` for the option types an
/// unprivileged caller may not send; `IPV6_JOIN_ANYCAST`,
/// `IP(V6)_TRANSPARENT`, `SO_MARK` and `SO_SNDBUFFORCE`/`SO_RCVBUFFORCE`
/// take a capability outright. Not here: values a capability only widens
/// (`SO_PRIORITY` above 6, `SO_TXTIME` clocks), and the same options as
/// `sendmsg` control messages, which seccomp cannot read (SECURITY.md).
pub const SOCKET_OPTIONS_REFUSED: &[(u64, Option<u64>)] = &[
    (SOL_IP, None),
    (SOL_IP, Some(4)),
    (SOL_IP, Some(16)),
    (SOL_IP, Some(17)),
    (SOL_IP, Some(19)),
    (SOL_IPV6, Some(6)),
    (SOL_IPV6, Some(27)),
    (SOL_IPV6, Some(34)),
    (SOL_IPV6, Some(35)),
    (SOL_IPV6, Some(54)),
    (SOL_IPV6, Some(55)),
    (SOL_IPV6, Some(59)),
    (SOL_IPV6, Some(64)),
    (SOL_IPV6, Some(65)),
    (SOL_IPV6, Some(68)),
    (SOL_IPV6, Some(69)),
    (SOL_IPV6, Some(75)),
    (SOL_SOCKET, Some(32)),
    (SOL_SOCKET, Some(33)),
    (SOL_SOCKET, Some(36)),
];

/// `open`/`openat` flag bits the filter reads (asm-generic values, shared
/// by x86_64 and aarch64).
pub mod open_flags {
    /// `O_ACCMODE`.
    pub const ACCMODE: u64 = 0o3;
    /// `O_WRONLY`.
    pub const WRONLY: u64 = 0o1;
    /// `O_RDWR`.
    pub const RDWR: u64 = 0o2;
    /// `O_CREAT`.
    pub const CREAT: u64 = 0o100;
    /// `O_TRUNC`.
    pub const TRUNC: u64 = 0o1000;
    /// `__O_TMPFILE` (`O_TMPFILE` without `O_DIRECTORY`).
    pub const TMPFILE: u64 = 0o2000_0000;
    /// `S_ISUID | S_ISGID`.
    pub const SET_ID: u64 = 0o6000;
    /// `O_DIRECTORY` (the architecture's: aarch64's differs from asm-generic).
    pub const DIRECTORY: u64 = libc::O_DIRECTORY as u64;
    /// `O_PATH`.
    pub const PATH: u64 = libc::O_PATH as u64;
}

/// `PER_LINUX`, the default persona (libc does not name it).
pub const PER_LINUX: u64 = 0;

/// `personality(0xffffffff)` only queries the persona.
pub const PERSONALITY_QUERY: u64 = 0xffff_ffff;

fn masked(arg: u8, mask: u64, value: u64) -> Cond {
    Cond::low32(arg, Cmp::MaskedEq { mask, value })
}

fn allow_if(any_of: Vec<Vec<Cond>>) -> Rule {
    Rule::AllowIf {
        any_of,
        otherwise: DENY,
    }
}

/// The `ioctl` calls [`DENIED_IOCTL_ARGS`] refuses, one group each.
fn refused_ioctl_args() -> Vec<Vec<Cond>> {
    DENIED_IOCTL_ARGS
        .iter()
        .flat_map(|&(_, request, args, _)| {
            args.iter().map(move |&arg| {
                vec![
                    Cond::low32(1, Cmp::Eq(request)),
                    Cond::full64(2, Cmp::Eq(arg)),
                ]
            })
        })
        .collect()
}

/// The `ioctl` calls allowed: every request neither in [`DENIED_IOCTLS`] nor
/// in [`DENIED_IOCTL_ARGS`]; and each of the latter with an argument it
/// does not refuse.
fn allowed_ioctls() -> Vec<Vec<Cond>> {
    let plain = DENIED_IOCTLS
        .iter()
        .map(|&(_, request, _)| request)
        .chain(DENIED_IOCTL_ARGS.iter().map(|&(_, request, _, _)| request))
        .map(|request| Cond::low32(1, Cmp::Ne(request)))
        .collect();
    std::iter::once(plain)
        .chain(DENIED_IOCTL_ARGS.iter().map(|&(_, request, args, _)| {
            std::iter::once(Cond::low32(1, Cmp::Eq(request)))
                .chain(args.iter().map(|&arg| Cond::full64(2, Cmp::Ne(arg))))
                .collect()
        }))
        .collect()
}

/// `F_SETLEASE` (fcntl.h; the same on x86_64 and aarch64).
pub(crate) const F_SETLEASE: u64 = 1024;

/// The answer to `fcntl(F_SETLEASE)`: `EACCES`, the kernel's own answer to
/// a caller that may not take a lease on the file (not its owner, without
/// `CAP_LEASE`: `generic_setlease`, fs/locks.c), which lease users (Samba,
/// NFS servers) take as "no lease here" and go on without one. Why refused:
/// a lease needs only ownership of the file and any fd, read-only included,
/// and a root command with its capabilities dropped owns every root file it
/// can read; the lease holder is asked to give way (`SIGIO`) and a host
/// process opening the file for writing or truncating it blocks for up to
/// `lease-break-time` (45 s), which the run may take again at once.
/// Landlock, which checks rights when a file is opened, cannot see it.
/// Not `EPERM`, so the broker does not record it: a refused lease changes
/// nothing the command relies on.
pub(crate) const LEASE_REFUSED: crate::spec::Action = crate::spec::Action::Errno(13);

fn row(sys: Sys, rule: Rule, reason: &'static str) -> Entry {
    let (raw, nr, handler) = sys;
    Entry {
        name: raw.strip_prefix("SYS_").unwrap_or(raw),
        nr: nr as u32,
        rule,
        reason,
        handler,
    }
}

/// Rows whose rule carries argument checks that do not depend on the policy.
fn checked_always(spec: &FilterSpec) -> Vec<Entry> {
    let mut rows = vec![
        if spec.network && spec.egress {
            row(
                one!(SYS_ioctl),
                Rule::RefuseIf {
                    any_of: DENIED_IOCTLS
                        .iter()
                        .map(|&(_, request, _)| vec![Cond::low32(1, Cmp::Eq(request))])
                        .chain(refused_ioctl_args())
                        .chain(
                            SOCKET_IOCTLS_REFUSED
                                .iter()
                                .map(|&(mask, value)| vec![masked(1, mask, value)]),
                        )
                        .collect(),
                    action: DENY,
                },
                "requests in DENIED_IOCTLS change an inode, a filesystem or the terminal without \
                 a writable fd, and so do those in DENIED_IOCTL_ARGS with the arguments listed \
                 there (TCXONC TCOOFF/TCIOFF); egress rules: the socket requests that configure \
                 a network namespace too (SOCKET_IOCTLS_REFUSED), which the run's datagram \
                 namespace would be; the kernel reads the request as 32 bits, so only those are \
                 compared",
            )
        } else {
            row(
                one!(SYS_ioctl),
                allow_if(allowed_ioctls()),
                "requests in DENIED_IOCTLS change an inode, a filesystem or the terminal without \
                 a writable fd, and so do those in DENIED_IOCTL_ARGS with the arguments listed \
                 there (TCXONC TCOOFF/TCIOFF); the kernel reads the request as 32 bits, so only \
                 those are compared",
            )
        },
        row(
            one!(SYS_fcntl),
            Rule::RefuseIf {
                any_of: vec![vec![Cond::low32(1, Cmp::Eq(F_SETLEASE))]],
                action: LEASE_REFUSED,
            },
            "F_SETLEASE (EACCES, the kernel's answer to a lease the caller may not take): \
             the owner of a file may take a lease through a read-only fd, and a host process \
             opening it for writing then blocks until the lease is broken (up to \
             lease-break-time); file locks (flock, F_SETLK) stay allowed (docs/enforcement.md, \
             Known gaps)",
        ),
        row(
            one!(SYS_personality),
            allow_if(vec![
                vec![Cond::low32(0, Cmp::Eq(PERSONALITY_QUERY))],
                vec![Cond::low32(0, Cmp::Eq(PER_LINUX))],
            ]),
            "other personas disable ASLR or change the ABI; query and PER_LINUX only",
        ),
        row(
            one!(SYS_utimensat => meta(MetaForm::Utimensat)),
            Rule::Always(broker_or_refuse(spec)),
            "Landlock has no utimes right; the fd form (futimens) works on a read-only fd, \
             so it is brokered like the path form",
        ),
        row(
            one!(SYS_seccomp),
            allow_if(vec![vec![masked(1, SECCOMP_FILTER_FLAG_NEW_LISTENER, 0)]]),
            "a nested filter only narrows, but a listener of its own would receive (and could \
             CONTINUE) the calls this filter hands to the runner's broker",
        ),
        row(
            one!(SYS_prctl),
            allow_if(vec![vec![Cond::low32(0, Cmp::Ne(PR_SCHED_CORE))]]),
            "PR_SCHED_CORE shares core-scheduling cookies with other processes of the same user",
        ),
        row(
            one!(SYS_openat2),
            Rule::Always(UNKNOWN),
            "its flags and mode sit behind a pointer the filter cannot read (see openat); \
             ENOSYS makes callers fall back to openat",
        ),
    ];
    rows.extend(opening(spec));
    rows.extend(own_process(spec));
    rows
}

/// `SECCOMP_FILTER_FLAG_NEW_LISTENER`.
pub const SECCOMP_FILTER_FLAG_NEW_LISTENER: u64 = 1 << 3;
/// `PR_SCHED_CORE`.
pub const PR_SCHED_CORE: u64 = 62;

/// Opening and creating files: the flag checks Landlock cannot make.
///
/// * `O_TRUNC` needs `O_WRONLY` or `O_RDWR`: a read-only open with `O_TRUNC`
///   truncates the file (`do_open` in fs/namei.c), and Landlock checks only
///   READ_FILE for it unless its TRUNCATE right (ABI 3) is handled. Closing it
///   here covers every ABI, and is the cheaper of the two (measured on Linux
///   6.18, an open+close loop confined vs bare, 41 interleaved pairs): 1.16x
///   with this check, 1.12x without it (`openat` then runs the filter on every
///   call instead of hitting the kernel's action cache); handling TRUNCATE in
///   Landlock instead, 1.39x (1.42x with a read denial). The mode-3 and set-id
///   checks need the argument check anyway, so O_TRUNC rides along for free.
/// * Access mode 3 (`O_RDWR|O_WRONLY`, "ioctl only") is refused: the file
///   gets neither FMODE_READ nor FMODE_WRITE, so Landlock requires no right
///   for it (`get_required_file_open_access` in security/landlock/fs.c).
/// * No set-id bits in a creation mode (`O_CREAT`, `O_TMPFILE`, `creat`,
///   `mknod`): a root caller would create a set-user-ID-root file.
fn opening(spec: &FilterSpec) -> Vec<Entry> {
    use open_flags::*;
    let created = CREAT | TMPFILE;
    // Allowed iff access mode is 0, 1 or 2, and O_TRUNC only with 1 or 2, and
    // no set-id bits when creating; as a disjunction, the common read-only
    // open first.
    let groups = |flags: u8, mode: u8| {
        let f = |mask, value| masked(flags, mask, value);
        let no_set_id = masked(mode, SET_ID, 0);
        vec![
            vec![f(ACCMODE | TRUNC | created, 0)],
            vec![f(ACCMODE | TRUNC, 0), no_set_id],
            vec![f(ACCMODE | created, WRONLY)],
            vec![f(ACCMODE | created, RDWR)],
            vec![f(ACCMODE, WRONLY), no_set_id],
            vec![f(ACCMODE, RDWR), no_set_id],
        ]
    };
    const OPEN: &str = "O_TRUNC only with write access, no access mode 3, no set-id bits \
                        in a creation mode (see `opening`)";
    const OPEN_READS: &str = "O_TRUNC only with write access, no access mode 3, no set-id bits \
                              in a creation mode (see `opening`); refused reads recorded: \
                              read-only opens Landlock could refuse go to the broker, which \
                              refuses these forms too (see `observed_reads`)";
    const SET_ID_MODE: &str = "no set-id bits in a creation mode";
    let no_set_id = |arg| allow_if(vec![vec![masked(arg, SET_ID, 0)]]);
    if spec.routes_entries() {
        return brokered_entries(spec);
    }
    // Refused reads recorded: the plain read-only open (group 0, which
    // group 1 also matches without a set-id mode) goes to the broker, and
    // with it the forms refused here (the broker refuses them before
    // anything else, `Refusal::OpenFlags` and `SetIdBits`, and records them).
    let open = |flags: u8, mode: u8| {
        if !spec.routes_reads() {
            return (allow_if(groups(flags, mode)), OPEN);
        }
        let f = |mask, value| masked(flags, mask, value);
        let no_set_id = masked(mode, SET_ID, 0);
        let mut any_of = observed_reads(flags);
        any_of.extend([
            vec![f(ACCMODE | TRUNC | CREAT, CREAT), no_set_id],
            vec![f(ACCMODE | TRUNC | TMPFILE, TMPFILE), no_set_id],
        ]);
        any_of.extend(groups(flags, mode).into_iter().skip(2));
        let rule = Rule::AllowIf {
            any_of,
            otherwise: Action::UserNotif,
        };
        (rule, OPEN_READS)
    };
    let (openat, openat_why) = open(2, 3);
    #[allow(unused_mut)]
    let mut rows = vec![
        row(CALL_OPENAT, openat, openat_why),
        row(CALL_MKNODAT, no_set_id(2), SET_ID_MODE),
    ];
    #[cfg(target_arch = "x86_64")]
    rows.extend([
        {
            let (rule, why) = open(1, 2);
            row(CALL_OPEN, rule, why)
        },
        row(CALL_CREAT, no_set_id(1), SET_ID_MODE),
        row(CALL_MKNOD, no_set_id(1), SET_ID_MODE),
    ]);
    rows.extend(entry_calls().into_iter().map(|s| row(s, Rule::Allow, "")));
    rows.push(row(CALL_UMASK, Rule::Allow, ""));
    rows
}

/// The read-only opens that stay in the kernel when refused reads are
/// recorded ([`FilterSpec::routes_reads`]): those Landlock never refuses.
/// Every other plain read-only open goes to the broker, which lets it
/// continue unless Landlock would refuse it.
///
/// * `O_PATH` (its other bits but `O_DIRECTORY`, `O_NOFOLLOW` and
///   `O_CLOEXEC` are ignored): `do_dentry_open` (fs/open.c) returns for an
///   `O_PATH` file before `security_file_open`, Landlock's only check of an
///   open.
/// * `O_DIRECTORY`: it opens a directory or fails with `ENOTDIR` in
///   `do_open` (fs/namei.c) before the open; a directory needs Landlock's
///   READ_DIR, which the backend never handles (its ancestors of a
///   read-deny path stay listable), so Landlock refuses no such open.
fn observed_reads(flags: u8) -> Vec<Vec<Cond>> {
    use open_flags::*;
    let plain = ACCMODE | TRUNC | CREAT | TMPFILE;
    vec![
        vec![masked(flags, plain | PATH, PATH)],
        vec![masked(flags, plain | DIRECTORY, DIRECTORY)],
    ]
}

/// `execve` and `execveat`: allowed; when refused reads are recorded
/// ([`FilterSpec::routes_reads`]) routed to the broker, which lets each
/// continue unless Landlock would refuse executing the file (its EXECUTE
/// and READ_FILE rights, which a read-deny path takes away), and answers
/// that one `EACCES` itself and records it. One round trip per exec.
fn executing(spec: &FilterSpec) -> Vec<Entry> {
    let calls = [
        one!(SYS_execve => Handler::Exec(ExecForm::Execve)),
        one!(SYS_execveat => Handler::Exec(ExecForm::Execveat)),
    ];
    calls
        .into_iter()
        .map(|s| {
            if spec.routes_reads() {
                row(
                    s,
                    Rule::Always(Action::UserNotif),
                    "refused reads recorded: the broker lets an exec continue unless Landlock \
                     would refuse it beneath a read-deny path, which it records",
                )
            } else {
                row(s, Rule::Allow, "")
            }
        })
        .collect()
}

/// The opens and creating calls whose flags or mode the filter reads.
const CALL_OPENAT: Sys = one!(SYS_openat => entry(EntryForm::Openat));
const CALL_MKNODAT: Sys = one!(SYS_mknodat => entry(EntryForm::Mknodat));
#[cfg(target_arch = "x86_64")]
const CALL_OPEN: Sys = one!(SYS_open => entry(EntryForm::Open));
#[cfg(target_arch = "x86_64")]
const CALL_CREAT: Sys = one!(SYS_creat => entry(EntryForm::Creat));
#[cfg(target_arch = "x86_64")]
const CALL_MKNOD: Sys = one!(SYS_mknod => entry(EntryForm::Mknod));
const CALL_UMASK: Sys = one!(SYS_umask => Handler::Umask);

/// The directory-entry calls Landlock governs, besides open and mknod.
fn entry_calls() -> Vec<Sys> {
    #[allow(unused_mut)]
    let mut calls = vec![
        one!(SYS_mkdirat => entry(EntryForm::Mkdirat)),
        one!(SYS_unlinkat => entry(EntryForm::Unlinkat)),
        one!(SYS_renameat => entry(EntryForm::Renameat)),
        one!(SYS_renameat2 => entry(EntryForm::Renameat2)),
        one!(SYS_linkat => entry(EntryForm::Linkat)),
        one!(SYS_symlinkat => entry(EntryForm::Symlinkat)),
    ];
    #[cfg(target_arch = "x86_64")]
    calls.extend([
        one!(SYS_mkdir => entry(EntryForm::Mkdir)),
        one!(SYS_rmdir => entry(EntryForm::Rmdir)),
        one!(SYS_unlink => entry(EntryForm::Unlink)),
        one!(SYS_rename => entry(EntryForm::Rename)),
        one!(SYS_link => entry(EntryForm::Link)),
        one!(SYS_symlink => entry(EntryForm::Symlink)),
    ]);
    calls
}

/// With a deny path beneath a write path (and a broker): Landlock grants the
/// write path whole, and every call that could write into a denied subtree
/// goes to the broker, which resolves the path itself, refuses denied
/// entries and performs the call: opens that can write (the broker also
/// refuses the flag combinations [`opening`] refuses in-kernel), creat,
/// mknod and every directory-entry call. Read-only opens stay in the kernel.
fn brokered_entries(spec: &FilterSpec) -> Vec<Entry> {
    use open_flags::*;
    const WHY: &str = "a deny path lies beneath a write path: the broker keeps it \
                       (Landlock grants the write path whole)";
    // Refused reads recorded: read-only opens go to the broker too, but
    // for those Landlock never refuses (see `observed_reads`).
    let read_only = |flags: u8| Rule::AllowIf {
        any_of: if spec.routes_reads() {
            observed_reads(flags)
        } else {
            vec![vec![masked(flags, ACCMODE | TRUNC | CREAT | TMPFILE, 0)]]
        },
        otherwise: broker_or_refuse(spec),
    };
    let routed = Rule::Always(broker_or_refuse(spec));
    let mut rows = vec![
        row(CALL_OPENAT, read_only(2), WHY),
        row(CALL_MKNODAT, routed.clone(), WHY),
    ];
    #[cfg(target_arch = "x86_64")]
    rows.extend([
        row(CALL_OPEN, read_only(1), WHY),
        row(CALL_CREAT, routed.clone(), WHY),
        row(CALL_MKNOD, routed.clone(), WHY),
    ]);
    rows.extend(
        entry_calls()
            .into_iter()
            .map(|s| row(s, routed.clone(), WHY)),
    );
    rows.push(row(
        one!(SYS_bind => Handler::Bind),
        routed.clone(),
        "a deny path lies beneath a write path: binding a pathname UNIX socket makes a \
         directory entry, so the broker binds (Landlock grants the write path whole)",
    ));
    rows.push(row(
        CALL_UMASK,
        routed,
        "the broker applies each caller's umask to what it creates and keeps it between \
         calls: it notes the change and lets the call continue (no pointer argument)",
    ));
    rows
}

/// Calls that may name another process: the caller itself (`0`) always;
/// another pid or tid only through the broker, which lets the call go on
/// when the target is one of the run's own processes (in the caller's
/// session) and refuses it otherwise; without a broker, refused.
///
/// The kernel lets a process change the limits, scheduling and I/O priority
/// of any process of the same user (`check_same_owner`, `prlimit64`'s
/// `check_prlimit_permission`): the runner, the user's shell. Lowering the
/// runner's RLIMIT_CPU kills it; SCHED_IDLE starves it. The filter cannot
/// tell a thread's own tid (`pthread_setaffinity_np`, `renice -p $$`) from
/// another process's pid; the broker can.
fn own_process(spec: &FilterSpec) -> Vec<Entry> {
    let otherwise = if spec.broker { Action::UserNotif } else { DENY };
    let allow_if = |any_of| Rule::AllowIf { any_of, otherwise };
    let me = |arg| Cond::low32(arg, Cmp::Eq(0));
    let who_me = |which: u8, who: u8, kinds: &[u64]| {
        allow_if(
            kinds
                .iter()
                .map(|&k| vec![Cond::low32(which, Cmp::Eq(k)), me(who)])
                .collect(),
        )
    };
    const SELF_ONLY: &str = "pid 0 (the caller) directly; another pid or tid only when the \
                             broker finds it in the run (another process of the same user \
                             could be the runner)";
    let mut rows = vec![
        row(
            one!(SYS_prlimit64 => Handler::Process),
            allow_if(vec![vec![me(0)]]),
            SELF_ONLY,
        ),
        row(
            one!(SYS_sched_setaffinity => Handler::Process),
            allow_if(vec![vec![me(0)]]),
            SELF_ONLY,
        ),
        row(
            one!(SYS_sched_setparam => Handler::Process),
            allow_if(vec![vec![me(0)]]),
            SELF_ONLY,
        ),
        row(
            one!(SYS_sched_setscheduler => Handler::Process),
            allow_if(vec![vec![me(0)]]),
            SELF_ONLY,
        ),
        row(
            one!(SYS_sched_setattr => Handler::Process),
            allow_if(vec![vec![me(0)]]),
            SELF_ONLY,
        ),
        // PRIO_PROCESS 0, PRIO_PGRP 1 (the caller's own group); not PRIO_USER.
        row(
            one!(SYS_setpriority => Handler::Process),
            who_me(0, 1, &[0, 1]),
            "the caller or its own process group directly; another process or group only when \
             the broker finds it in the run; never PRIO_USER",
        ),
        // IOPRIO_WHO_PROCESS 1, IOPRIO_WHO_PGRP 2; not IOPRIO_WHO_USER.
        row(
            one!(SYS_ioprio_set => Handler::Process),
            who_me(0, 1, &[1, 2]),
            "the caller or its own process group directly; another process or group only when \
             the broker finds it in the run; never IOPRIO_WHO_USER",
        ),
    ];
    rows.sort_by_key(|e| e.nr);
    rows
}

/// Extended-attribute reads: Landlock has no right for them, so under read
/// denials they go to the broker, which refuses denied paths.
fn xattr_reads(spec: &FilterSpec) -> Vec<Entry> {
    use Handler::XattrRead as read;
    let reads = [
        one!(SYS_getxattr => read(XattrForm::Getxattr)),
        one!(SYS_lgetxattr => read(XattrForm::Lgetxattr)),
        one!(SYS_fgetxattr => read(XattrForm::Fgetxattr)),
        one!(SYS_listxattr => read(XattrForm::Listxattr)),
        one!(SYS_llistxattr => read(XattrForm::Llistxattr)),
        one!(SYS_flistxattr => read(XattrForm::Flistxattr)),
    ];
    let newer = [one!(SYS_getxattrat), one!(SYS_listxattrat)];
    match xattr_read(spec) {
        None => reads
            .into_iter()
            .chain(newer)
            .map(|s| row(s, Rule::Allow, ""))
            .collect(),
        Some(action) => reads
            .into_iter()
            .map(|s| {
                row(
                    s,
                    Rule::Always(action),
                    "read denials: xattr values of denied paths must not be read; \
                     Landlock has no xattr right",
                )
            })
            .chain(newer.into_iter().map(|s| {
                row(
                    s,
                    Rule::Always(UNKNOWN),
                    "read denials: not brokered (Linux 6.13+); ENOSYS as on an older kernel",
                )
            }))
            .collect(),
    }
}

/// `truncate(path)`: Landlock's truncate right is never handled (it would
/// cost a path walk on every open), so the broker decides it, or it is
/// refused.
fn truncate(spec: &FilterSpec) -> Entry {
    row(
        one!(SYS_truncate => meta(MetaForm::Truncate)),
        Rule::Always(broker_or_refuse(spec)),
        "Landlock's truncate right is not handled: the broker decides truncate by path",
    )
}

/// The Landlock calls the filter refuses only when a broker serves the run:
/// a nested Landlock domain would not narrow what the broker performs.
pub const REFUSED_WITH_BROKER: &[&str] = &[
    "landlock_create_ruleset",
    "landlock_add_rule",
    "landlock_restrict_self",
];

/// A nested Landlock domain: allowed without a broker (it can only narrow
/// what the kernel does for the command); refused with one.
///
/// The broker performs calls that Landlock rights govern (writing opens and
/// entry calls under deny paths, `truncate` by path, TCP `connect`) from the
/// run's own domain, which a domain the command adds beneath its own cannot
/// narrow: the kernel offers no way to learn a thread's domain, and tracking
/// who restricted itself by pid loses a child that is reparented. So rather
/// than silently widening a nested sandbox, Landlock is unavailable to the
/// command: `landlock_create_ruleset` answers `EOPNOTSUPP` (what a kernel
/// with Landlock disabled answers, so libraries report "not supported"),
/// and adding rules or restricting with a ruleset got elsewhere `EPERM`.
fn nested_landlock(spec: &FilterSpec) -> Vec<Entry> {
    let calls = [
        one!(SYS_landlock_create_ruleset),
        one!(SYS_landlock_add_rule),
        one!(SYS_landlock_restrict_self),
    ];
    if !spec.broker {
        return calls.into_iter().map(|c| row(c, Rule::Allow, "")).collect();
    }
    let reason = "a nested Landlock domain would not narrow the calls the broker performs \
                  from the run's own domain";
    let [create, add, restrict] = calls;
    // A spawner's child nests its own domain with the spawner's ruleset
    // (at a fixed fd number, closed on exec) and no flags; nothing else.
    let restrict = match spec.child_layer {
        Some(fd) => row(
            restrict,
            allow_if(vec![vec![
                masked(0, 0xffff_ffff, u64::from(fd)),
                masked(1, 0xffff_ffff, 0),
            ]]),
            reason,
        ),
        None => row(restrict, Rule::Always(DENY), reason),
    };
    vec![
        row(
            create,
            Rule::Always(crate::spec::Action::Errno(crate::spec::EOPNOTSUPP)),
            reason,
        ),
        row(add, Rule::Always(DENY), reason),
        restrict,
    ]
}

/// Process creation.
fn spawning(spec: &FilterSpec) -> Vec<Entry> {
    let no_namespaces = masked(0, CLONE_NEW_MASK, 0);
    let thread = libc::CLONE_THREAD as u64;
    let thread_fs = (libc::CLONE_THREAD | libc::CLONE_FS) as u64;
    let mut rows = Vec::new();
    if spec.deny_subprocess && spec.routes_entries() {
        rows.push(row(
            one!(SYS_clone),
            allow_if(vec![vec![no_namespaces, masked(0, thread_fs, thread_fs)]]),
            "deny_subprocess: threads (CLONE_THREAD) only, never CLONE_NEW*; a thread shares \
             its group's umask (CLONE_FS): the broker keeps umasks by thread id, which an \
             execve hands to the group leader's",
        ));
    } else if spec.deny_subprocess {
        rows.push(row(
            one!(SYS_clone),
            allow_if(vec![vec![no_namespaces, masked(0, thread, thread)]]),
            "deny_subprocess: threads (CLONE_THREAD) only, never CLONE_NEW*",
        ));
    } else if spec.routes_entries() {
        rows.push(row(
            one!(SYS_clone),
            allow_if(vec![
                vec![no_namespaces, masked(0, thread, 0)],
                vec![no_namespaces, masked(0, thread_fs, thread_fs)],
            ]),
            "CLONE_NEW* creates namespaces (see unshare); a thread shares its group's umask \
             (CLONE_FS): the broker keeps umasks by thread id, which an execve hands to the \
             group leader's",
        ));
    } else {
        rows.push(row(
            one!(SYS_clone),
            allow_if(vec![vec![no_namespaces]]),
            "CLONE_NEW* creates namespaces (see unshare)",
        ));
    }
    rows.push(row(
        one!(SYS_clone3),
        Rule::Always(UNKNOWN),
        "flags sit behind a pointer the filter cannot read; ENOSYS makes libc fall back to clone",
    ));
    #[cfg(target_arch = "x86_64")]
    for sys in [one!(SYS_fork), one!(SYS_vfork)] {
        rows.push(if spec.deny_subprocess {
            row(sys, Rule::Always(DENY), "deny_subprocess")
        } else {
            row(sys, Rule::Allow, "")
        });
    }
    rows
}

/// Leaving the run's process group, which the runner may hold the run by.
fn process_group(spec: &FilterSpec) -> Vec<Entry> {
    [one!(SYS_setsid), one!(SYS_setpgid)]
        .into_iter()
        .map(|s| {
            if spec.hold_group {
                row(
                    s,
                    Rule::Always(DENY),
                    "the runner ends this run by its process group (no cgroup here): \
                     leaving it would let a process outlive the run",
                )
            } else {
                row(s, Rule::Allow, "")
            }
        })
        .collect()
}

/// `setsockopt` and `getsockopt`: allowed, but under egress rules refused
/// for [`SOCKET_OPTIONS_REFUSED`] (`getsockopt`: the netfilter ones, which
/// read tables with the same capability).
fn socket_options(spec: &FilterSpec) -> Vec<Entry> {
    if !(spec.network && spec.egress) {
        return vec![
            row(one!(SYS_setsockopt), Rule::Allow, ""),
            row(one!(SYS_getsockopt), Rule::Allow, ""),
        ];
    }
    let groups = |netfilter_only: bool| -> Vec<Vec<Cond>> {
        SOCKET_OPTIONS_REFUSED
            .iter()
            .filter(|(level, name)| {
                !netfilter_only
                    || name.is_none()
                    || (*level == SOL_IPV6 && matches!(name, Some(64 | 65 | 68 | 69)))
            })
            .map(|&(level, name)| {
                vec![
                    Cond::low32(1, Cmp::Eq(level)),
                    Cond::low32(2, name.map_or(Cmp::Ge(64), Cmp::Eq)),
                ]
            })
            .collect()
    };
    vec![
        row(
            one!(SYS_setsockopt),
            Rule::RefuseIf {
                any_of: groups(false),
                action: DENY,
            },
            "egress rules: options that take CAP_NET_ADMIN or CAP_NET_RAW over the socket's \
             network namespace (SOCKET_OPTIONS_REFUSED), which the command holds over the run's \
             datagram namespace when the runner is unprivileged",
        ),
        row(
            one!(SYS_getsockopt),
            Rule::RefuseIf {
                any_of: groups(true),
                action: DENY,
            },
            "egress rules: netfilter's table reads, which take CAP_NET_ADMIN over the socket's \
             network namespace (the command holds it over the run's datagram namespace when the \
             runner is unprivileged)",
        ),
    ]
}

/// Socket creation and sending. With `network = false` only local sockets
/// and the declared exceptions remain.
fn network(spec: &FilterSpec) -> Vec<Entry> {
    let plain = [
        one!(SYS_socket => Handler::Socket),
        one!(SYS_socketpair),
        one!(SYS_connect => Handler::Connect),
        one!(SYS_listen => Handler::Listen),
        one!(SYS_accept),
        one!(SYS_accept4),
        one!(SYS_sendto),
        one!(SYS_sendmsg),
        one!(SYS_sendmmsg),
    ];
    let af = |a: i32| Cond::low32(0, Cmp::Eq(a as u64));
    let ty = |t: i32| masked(1, 0xf, t as u64);
    if spec.network && spec.egress {
        return egress(spec, &plain, af, ty);
    }
    if spec.network {
        if !spec.broker_connect {
            return plain.into_iter().map(|s| row(s, Rule::Allow, "")).collect();
        }
        return confined_unix(spec, &plain, af, ty);
    }
    let proto = |p: i32| Cond::low32(2, Cmp::Eq(p as u64));
    let no_fastopen = |arg| masked(arg, libc::MSG_FASTOPEN as u64, 0);
    let mut socket_groups = vec![
        vec![af(libc::AF_UNIX), ty(libc::SOCK_STREAM)],
        vec![af(libc::AF_UNIX), ty(libc::SOCK_SEQPACKET)],
    ];
    for domain in [libc::AF_INET, libc::AF_INET6] {
        for p in [0, libc::IPPROTO_TCP] {
            socket_groups.push(vec![af(domain), ty(libc::SOCK_STREAM), proto(p)]);
        }
    }
    let [socket, socketpair, connect, listen, accept, accept4, sendto, sendmsg, sendmmsg] = plain;
    vec![
        row(
            socket,
            allow_if(socket_groups),
            "network=false: AF_UNIX stream/seqpacket (not DGRAM, which SOCK_RAW aliases) \
             and TCP sockets that can bind but never connect",
        ),
        row(
            socketpair,
            allow_if(vec![
                vec![af(libc::AF_UNIX), ty(libc::SOCK_STREAM)],
                vec![af(libc::AF_UNIX), ty(libc::SOCK_SEQPACKET)],
            ]),
            "network=false: AF_UNIX stream/seqpacket pairs only: a datagram socket could send \
             to any host pathname socket (and pass fds with SCM_RIGHTS) by msg_name, which \
             sendmsg hides behind a pointer; stream sockets refuse an address (EISCONN / \
             EOPNOTSUPP) and seqpacket ignores it",
        ),
        row(
            connect,
            // The broker never performs one here (its rules refuse every
            // connect with the network off, after the kernel's own errors),
            // so routing it only records the refusal and its address.
            Rule::Always(if spec.broker {
                crate::spec::Action::UserNotif
            } else {
                DENY
            }),
            "network=false: with a broker, the refusal is recorded with its address (EPERM \
             after the kernel's own EBADF, EFAULT, ENOTSOCK)",
        ),
        row(listen, Rule::Always(DENY), "network=false"),
        row(accept, Rule::Always(DENY), "network=false"),
        row(accept4, Rule::Always(DENY), "network=false"),
        row(
            sendto,
            allow_if(vec![vec![Cond::full64(4, Cmp::Eq(0)), no_fastopen(3)]]),
            "network=false: connected sockets only (NULL address, no MSG_FASTOPEN)",
        ),
        row(
            sendmsg,
            allow_if(vec![vec![no_fastopen(2)]]),
            "network=false: MSG_FASTOPEN would connect",
        ),
        row(
            sendmmsg,
            allow_if(vec![vec![no_fastopen(3)]]),
            "network=false: MSG_FASTOPEN would connect",
        ),
    ]
}

/// Network on for listed destinations only ([`FilterSpec::egress`]): host
/// UNIX sockets confined as with [`FilterSpec::broker_connect`], IP sockets
/// TCP only, every connect and listen decided by the broker.
fn egress(
    spec: &FilterSpec,
    plain: &[Sys; 9],
    af: impl Fn(i32) -> Cond,
    ty: impl Fn(i32) -> Cond,
) -> Vec<Entry> {
    let proto = |p: i32| Cond::low32(2, Cmp::Eq(p as u64));
    let no_fastopen = |arg| masked(arg, libc::MSG_FASTOPEN as u64, 0);
    let unix_stream = vec![af(libc::AF_UNIX), ty(libc::SOCK_STREAM)];
    let unix_seqpacket = vec![af(libc::AF_UNIX), ty(libc::SOCK_SEQPACKET)];
    let mut sockets = vec![
        unix_stream.clone(),
        unix_seqpacket.clone(),
        // NETLINK_ROUTE only (interfaces and addresses, which getaddrinfo
        // and getifaddrs read): without CAP_NET_ADMIN it reaches the kernel
        // alone, while NETLINK_USERSOCK could message another local process.
        vec![af(libc::AF_NETLINK), proto(libc::NETLINK_ROUTE)],
    ];
    for domain in [libc::AF_INET, libc::AF_INET6] {
        for p in [0, libc::IPPROTO_TCP] {
            sockets.push(vec![af(domain), ty(libc::SOCK_STREAM), proto(p)]);
        }
    }
    // With a broker: handed to it; without: refused (`broker_or_refuse` is DENY then).
    let brokered = || Rule::Always(broker_or_refuse(spec));
    let [socket, socketpair, connect, listen, accept, accept4, sendto, sendmsg, sendmmsg] = *plain;
    vec![
        row(
            socket,
            allow_if(sockets),
            "egress rules: TCP, AF_UNIX stream/seqpacket and NETLINK_ROUTE only; with a broker \
             (which gets every refusal) an IP datagram socket is made in the run's datagram \
             namespace, where only the runner's resolver can be reached",
        ),
        row(
            socketpair,
            allow_if(vec![unix_stream, unix_seqpacket]),
            "egress rules: AF_UNIX stream/seqpacket pairs only (a datagram socket could \
             address any host socket by msg_name)",
        ),
        row(
            connect,
            brokered(),
            "egress rules: the broker reads the address once and connects only to listed \
             destinations (and the runner's proxy); refused without a broker",
        ),
        row(
            listen,
            brokered(),
            "egress rules: the broker lets only sockets bound to a loopback address listen, \
             so no unlisted host can connect in; refused without a broker",
        ),
        row(accept, Rule::Allow, ""),
        row(accept4, Rule::Allow, ""),
        row(
            sendto,
            allow_if(vec![vec![no_fastopen(3)]]),
            "egress rules: MSG_FASTOPEN would connect past the broker",
        ),
        row(
            sendmsg,
            allow_if(vec![vec![no_fastopen(2)]]),
            "egress rules: MSG_FASTOPEN would connect past the broker",
        ),
        row(
            sendmmsg,
            allow_if(vec![vec![no_fastopen(3)]]),
            "egress rules: MSG_FASTOPEN would connect past the broker",
        ),
    ]
}

/// Network on, host UNIX sockets confined ([`FilterSpec::broker_connect`]).
fn confined_unix(
    spec: &FilterSpec,
    plain: &[Sys; 9],
    af: impl Fn(i32) -> Cond,
    ty: impl Fn(i32) -> Cond,
) -> Vec<Entry> {
    let not_unix = Cond::low32(0, Cmp::Ne(libc::AF_UNIX as u64));
    let unix_stream = vec![af(libc::AF_UNIX), ty(libc::SOCK_STREAM)];
    let unix_seqpacket = vec![af(libc::AF_UNIX), ty(libc::SOCK_SEQPACKET)];
    let [socket, socketpair, connect, ..] = *plain;
    let mut rows = vec![row(
        socketpair,
        allow_if(vec![
            vec![not_unix],
            unix_stream.clone(),
            unix_seqpacket.clone(),
        ]),
        "host UNIX sockets confined: no AF_UNIX datagram pair (it could address any \
             host socket by msg_name)",
    )];
    if spec.broker {
        rows.push(row(
            socket,
            allow_if(vec![vec![not_unix], unix_stream, unix_seqpacket]),
            "host UNIX sockets confined: no AF_UNIX datagram socket (addressed sends \
             would reach any host socket)",
        ));
        rows.push(row(
            connect,
            Rule::Always(broker_or_refuse(spec)),
            "the broker reads the address once, admits UNIX sockets beneath the write \
             paths or allowed, and performs every connect itself (the filter cannot see \
             the address or the socket's family)",
        ));
    } else {
        rows.push(row(
            socket,
            allow_if(vec![vec![not_unix]]),
            "host UNIX sockets confined and no broker to admit them: no AF_UNIX socket \
             (pairs still work)",
        ));
        rows.push(row(connect, Rule::Allow, ""));
    }
    rows.extend(plain[3..].iter().map(|&s| row(s, Rule::Allow, "")));
    rows
}

/// The calls the broker handles on this architecture, sorted by number:
/// number, name and [`Handler`], as the table's rows give them (a row's
/// handler is the same under every spec, see
/// `handlers_are_the_same_under_every_spec`). The broker dispatches a
/// notification by looking its number up here ([`handler`]).
pub fn handlers() -> &'static [(u32, &'static str, Handler)] {
    static HANDLERS: std::sync::OnceLock<Vec<(u32, &'static str, Handler)>> =
        std::sync::OnceLock::new();
    HANDLERS.get_or_init(|| {
        table(&ANY_SPEC)
            .into_iter()
            .filter_map(|e| e.handler.map(|h| (e.nr, e.name, h)))
            .collect()
    })
}

/// The name and [`Handler`] of syscall `nr`, if the broker handles it.
pub fn handler(nr: u32) -> Option<(&'static str, Handler)> {
    let rows = handlers();
    rows.binary_search_by_key(&nr, |&(n, _, _)| n)
        .ok()
        .map(|i| (rows[i].1, rows[i].2))
}

/// The spec [`handlers`] reads the rows of (any spec gives the same).
const ANY_SPEC: FilterSpec = FilterSpec {
    network: false,
    deny_subprocess: false,
    broker: false,
    read_deny: false,
    hold_group: false,
    broker_connect: false,
    broker_entries: false,
    egress: false,
    broker_reads: false,
    child_layer: None,
};

/// The full table for `spec`, sorted by syscall number.
pub fn table(spec: &FilterSpec) -> Vec<Entry> {
    let allowed = [
        MEMORY,
        FD_IO,
        EVENTS,
        PATHS,
        TIME,
        SIGNALS,
        THREADS,
        PROCESS,
        SELF_CONFINEMENT,
        SOCKETS_ALWAYS,
        LEGACY_X86_64,
    ];
    let mut rows: Vec<Entry> = allowed
        .iter()
        .flat_map(|group| group.iter())
        // Routed to the broker with the entry calls (see `brokered_entries`).
        .filter(|s| !(spec.routes_entries() && s.0 == "SYS_bind"))
        .map(|&s| row(s, Rule::Allow, ""))
        .collect();
    for &(name, nr, reason) in ALWAYS_DENIED.iter().chain(ALWAYS_DENIED_X86_64) {
        rows.push(row((name, nr, None), Rule::Always(DENY), reason));
    }
    for &(sys, reason) in METADATA.iter().chain(METADATA_X86_64) {
        rows.push(row(sys, Rule::Always(broker_or_refuse(spec)), reason));
    }
    for &(name, nr, reason) in METADATA_UNBROKERED {
        rows.push(row((name, nr, None), Rule::Always(DENY), reason));
    }
    rows.extend(checked_always(spec));
    rows.extend(xattr_reads(spec));
    rows.push(truncate(spec));
    rows.extend(nested_landlock(spec));
    rows.extend(spawning(spec));
    rows.extend(executing(spec));
    rows.extend(process_group(spec));
    rows.extend(network(spec));
    rows.extend(socket_options(spec));
    if spec.broker {
        // With a broker, every explicit refusal goes to it first: it records
        // the call (denial evidence from the sandbox itself, never from the
        // command's output) and answers EPERM. Refusals are rare, so the
        // round trip costs nothing on the hot path.
        // Never for a call the broker can perform (it would act on it, not
        // just record it): those stay refused in the kernel.
        for e in rows
            .iter_mut()
            .filter(|e| !e.handler.is_some_and(Handler::performs))
        {
            match &mut e.rule {
                Rule::Always(a)
                | Rule::AllowIf { otherwise: a, .. }
                | Rule::RefuseIf { action: a, .. }
                    if *a == DENY =>
                {
                    *a = crate::spec::Action::UserNotif;
                }
                _ => {}
            }
        }
    }
    rows.sort_by_key(|e| e.nr);
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    fn egress() -> FilterSpec {
        FilterSpec {
            network: true,
            deny_subprocess: false,
            broker: false,
            read_deny: false,
            hold_group: true,
            broker_connect: true,
            broker_entries: false,
            egress: true,
            broker_reads: false,
            child_layer: None,
        }
    }

    fn rule(spec: &FilterSpec, name: &str) -> Rule {
        table(spec)
            .into_iter()
            .find(|e| e.name == name)
            .unwrap()
            .rule
    }

    /// A syscall's handler does not depend on the spec, every spec has a
    /// row for the same calls, and every call the broker is sent to perform
    /// (not only to record, which happens only to calls the filter refuses
    /// without a broker) has one.
    #[test]
    fn handlers_are_the_same_under_every_spec() {
        let want = handlers();
        assert!(!want.is_empty());
        assert!(want.windows(2).all(|w| w[0].0 < w[1].0));
        let routes = |r: &Rule| match r {
            Rule::Always(a)
            | Rule::AllowIf { otherwise: a, .. }
            | Rule::RefuseIf { action: a, .. } => *a == Action::UserNotif,
            Rule::Allow => false,
        };
        for spec in FilterSpec::all() {
            let rows = table(&spec);
            let got: Vec<(u32, &str, Handler)> = rows
                .iter()
                .filter_map(|e| e.handler.map(|h| (e.nr, e.name, h)))
                .collect();
            assert_eq!(got, want, "{spec:?}");
            let unbrokered = table(&FilterSpec {
                broker: false,
                ..spec
            });
            for e in rows
                .iter()
                .filter(|e| routes(&e.rule) && e.handler.is_none())
            {
                let Some(u) = unbrokered.iter().find(|u| u.nr == e.nr) else {
                    panic!("{} has no row without a broker", e.name);
                };
                let refused = match u.rule {
                    Rule::Always(a) => a == DENY,
                    Rule::AllowIf { otherwise, .. } => otherwise == DENY,
                    Rule::RefuseIf { action, .. } => action == DENY,
                    Rule::Allow => false,
                };
                assert!(
                    refused || REFUSED_WITH_BROKER.contains(&e.name),
                    "{} is routed but has no handler and is not refused ({spec:?})",
                    e.name
                );
            }
        }
        assert_eq!(
            handler(libc::SYS_connect as u32),
            Some(("connect", Handler::Connect))
        );
        assert_eq!(
            handler(452),
            Some(("fchmodat2", Handler::Metadata(MetaForm::Fchmodat2)))
        );
        assert_eq!(handler(libc::SYS_openat2 as u32), None);
        let entries: Vec<&str> = want
            .iter()
            .filter(|(_, _, h)| matches!(h, Handler::Entry(_)))
            .map(|&(_, name, _)| name)
            .collect();
        let mut expect = vec![
            "openat",
            "mknodat",
            "mkdirat",
            "unlinkat",
            "renameat",
            "renameat2",
            "linkat",
            "symlinkat",
        ];
        if cfg!(target_arch = "x86_64") {
            expect.extend([
                "open", "creat", "mknod", "mkdir", "unlink", "rmdir", "rename", "link", "symlink",
            ]);
        }
        let (mut entries, mut expect) = (entries, expect);
        entries.sort_unstable();
        expect.sort_unstable();
        assert_eq!(entries, expect);
    }

    #[test]
    fn sockios_blocks_refuse_exactly_the_non_reads() {
        let ioctl = rule(&egress(), "ioctl");
        for request in 0x8800u64..0x8b00 {
            let sockio = (0x8900..=0x89ff).contains(&request);
            let refused = DENIED_IOCTLS.iter().any(|&(_, r, _)| r == request)
                || (sockio && !SOCKET_IOCTLS_READ.contains(&request));
            let want = if refused { DENY } else { Action::Allow };
            assert_eq!(ioctl.eval(&[3, request, 0, 0, 0, 0]), want, "{request:#x}");
            // High bits the kernel ignores change nothing.
            assert_eq!(
                ioctl.eval(&[3, request | 1 << 40, 0, 0, 0, 0]),
                want,
                "{request:#x}"
            );
        }
        for &(_, request, _) in DENIED_IOCTLS {
            assert_eq!(ioctl.eval(&[0, request, 0, 0, 0, 0]), DENY);
        }
        // Without egress rules the socket requests are the kernel's to judge.
        let plain = rule(
            &FilterSpec {
                egress: false,
                ..egress()
            },
            "ioctl",
        );
        assert_eq!(plain.eval(&[3, 0x890b, 0, 0, 0, 0]), Action::Allow);
        assert_eq!(plain.eval(&[3, DENIED_IOCTLS[0].1, 0, 0, 0, 0]), DENY);
    }

    /// `tcflow(TCOOFF)` and `tcflow(TCIOFF)` are refused under every spec
    /// (routed to be recorded where a broker listens); `TCOON`, `TCION`,
    /// other requests and arguments the kernel rejects itself are not. The
    /// argument is compared whole: high bits make it none of the four.
    #[test]
    fn stopping_the_terminal_is_refused_and_starting_it_allowed() {
        for spec in FilterSpec::all() {
            let ioctl = rule(&spec, "ioctl");
            let refused = if spec.broker { Action::UserNotif } else { DENY };
            let at = |request: u64, arg: u64| ioctl.eval(&[1, request, arg, 0, 0, 0]);
            for arg in [TCOOFF, TCIOFF] {
                assert_eq!(at(TCXONC, arg), refused, "{spec:?} {arg}");
                assert_eq!(at(TCXONC | 1 << 40, arg), refused, "{spec:?} {arg}");
            }
            for arg in [1, 3, 4, u64::MAX, 1 << 32, (1 << 32) | 2] {
                assert_eq!(at(TCXONC, arg), Action::Allow, "{spec:?} {arg}");
            }
            // The twin: the requests beside it, with the same arguments.
            for request in [0x5409, 0x540b, 0x5401, 0x5402] {
                assert_eq!(at(request, TCOOFF), Action::Allow, "{spec:?} {request:#x}");
            }
        }
    }

    /// `fcntl(F_SETLEASE)` answers `EACCES` under every spec (never routed:
    /// the kernel's own answer to a lease it refuses); every other command,
    /// the locks and `F_GETLEASE` included, stays allowed.
    #[test]
    // libc's ioctl request type differs between targets.
    #[allow(clippy::unnecessary_cast)]
    fn leases_are_refused_and_locks_allowed() {
        for spec in FilterSpec::all() {
            let fcntl = rule(&spec, "fcntl");
            let at = |cmd: u64, arg: u64| fcntl.eval(&[3, cmd, arg, 0, 0, 0]);
            for arg in [0, 1, 2] {
                assert_eq!(at(F_SETLEASE, arg), LEASE_REFUSED, "{spec:?}");
                assert_eq!(at(F_SETLEASE | 1 << 32, arg), LEASE_REFUSED, "{spec:?}");
            }
            assert_eq!(LEASE_REFUSED, Action::Errno(libc::EACCES as u16));
            for cmd in [
                libc::F_GETLEASE,
                libc::F_SETLK,
                libc::F_SETLKW,
                libc::F_OFD_SETLK,
                libc::F_GETFL,
                libc::F_SETFD,
                libc::F_DUPFD_CLOEXEC,
                libc::F_NOTIFY,
            ] {
                assert_eq!(at(cmd as u64, 0), Action::Allow, "{spec:?} {cmd}");
            }
            assert_eq!(rule(&spec, "flock"), Rule::Allow);
        }
        assert_eq!(F_SETLEASE, libc::F_SETLEASE as u64);
        assert_eq!(TCXONC, libc::TCXONC as u64);
        assert_eq!((TCOOFF, TCIOFF), (libc::TCOOFF as u64, libc::TCIOFF as u64));
    }

    #[test]
    fn egress_refuses_the_socket_options_that_take_net_admin() {
        let set = rule(&egress(), "setsockopt");
        let get = rule(&egress(), "getsockopt");
        let at = |r: &Rule, level: u64, name: u64| r.eval(&[3, level, name, 0, 0, 0]);
        // Netfilter (IPT_SO_SET_REPLACE, arp_tables, ebtables, IPVS), xfrm,
        // transparent, marks, device binding, forced buffers.
        for (level, name) in [
            (0, 64),
            (0, 96),
            (0, 128),
            (0, 1152),
            (0, 16),
            (0, 17),
            (0, 19),
        ]
        .into_iter()
        .chain([(0, 4), (41, 6), (41, 27), (41, 54), (41, 55), (41, 59)])
        .chain([(41, 64), (41, 65), (41, 34), (41, 35), (41, 75)])
        .chain([(1, 36), (1, 32), (1, 33)])
        {
            assert_eq!(at(&set, level, name), DENY, "setsockopt({level}, {name})");
        }
        for (level, name) in [(0, 64), (0, 65), (41, 64), (41, 65), (41, 68), (41, 69)] {
            assert_eq!(at(&get, level, name), DENY, "getsockopt({level}, {name})");
        }
        // Twins: everyday options stay (IP_TOS, IP_PKTINFO, IPV6_V6ONLY,
        // SO_REUSEADDR, SO_RCVBUF, TCP_NODELAY, and SO_BINDTODEVICE and
        // SO_BINDTOIFINDEX, which an unbound socket may set unprivileged).
        for (level, name) in [
            (0, 1),
            (0, 8),
            (0, 52),
            (41, 26),
            (41, 76),
            (1, 2),
            (1, 8),
            (6, 1),
        ] {
            assert_eq!(
                at(&set, level, name),
                Action::Allow,
                "setsockopt({level}, {name})"
            );
        }
        for (level, name) in [(0, 1), (1, 25), (1, 36), (41, 26)] {
            assert_eq!(
                at(&get, level, name),
                Action::Allow,
                "getsockopt({level}, {name})"
            );
        }
        let plain = FilterSpec {
            egress: false,
            ..egress()
        };
        assert_eq!(rule(&plain, "setsockopt"), Rule::Allow);
        assert_eq!(rule(&plain, "getsockopt"), Rule::Allow);
    }
}
