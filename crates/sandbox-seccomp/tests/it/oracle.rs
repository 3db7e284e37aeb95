//! program == oracle: the compiled BPF, run by the test interpreter, gives
//! the same answer as a plain `match` written from the specification.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]
#![allow(non_upper_case_globals)]

use crate::common::*;
use proptest::prelude::*;
use sandbox_seccomp::{compile_spec, Filter, FilterSpec, HIGHEST_KNOWN};

const SPEC_TIOCSTI: u32 = 0x5412;
const SPEC_TIOCLINUX: u32 = 0x541c;
const SPEC_CLONE_THREAD: u32 = 0x0001_0000;
const SPEC_CLONE_FS: u32 = 0x0000_0200;
const SPEC_CLONE_NEW_ANY: u32 = 0x0002_0000 // NEWNS
    | 0x0200_0000 // NEWCGROUP
    | 0x0400_0000 // NEWUTS
    | 0x0800_0000 // NEWIPC
    | 0x1000_0000 // NEWUSER
    | 0x2000_0000 // NEWPID
    | 0x4000_0000; // NEWNET
const SPEC_MSG_FASTOPEN: u32 = 0x2000_0000;
const SPEC_O_CREAT: u32 = 0o100;
const SPEC_O_TRUNC: u32 = 0o1000;
const SPEC_O_TMPFILE_BIT: u32 = 0o2000_0000;
const SPEC_SET_ID: u32 = 0o6000;
const SPEC_NEW_LISTENER: u32 = 8;
const SPEC_PR_SCHED_CORE: u32 = 62;
/// `TCXONC` (tcflow), refused with `TCOOFF` (0) and `TCIOFF` (2): the third
/// argument is an `unsigned long`, compared whole.
const SPEC_TCXONC: u32 = 0x540a;
/// `fcntl(F_SETLEASE)`, answered `EACCES`.
const SPEC_F_SETLEASE: u32 = 1024;
const RET_EACCES: u32 = 0x0005_0000 | 13;
/// ioctl requests the specification refuses (terminal state, inode flags,
/// filesystem changes), restated from the kernel's uapi headers.
const SPEC_DENIED_IOCTLS: &[u32] = &[
    0x5412,
    0x541c,
    0x5423,
    0x541d,
    0x540c,
    0x5437,
    0x541f,
    0x5457, // terminal
    0x4008_6602,
    0x4004_6602,
    0x401c_5820,
    0x4008_7602,
    0x4004_7602,
    0x4008_6604,
    0x4004_6604,
    0x6609,
    0x660c,
    0x6611, // inode flags, versions, ext4
    0x800c_6613,
    0xc050_6617,
    0xc040_6618,
    0xc040_6619,
    0x4080_6685, // fscrypt, verity
    0xc018_9436,
    0x4100_9432, // dedupe, fs label
    0x5000_9401,
    0x5000_9402,
    0x5000_940e,
    0x5000_940f,
    0x4030_9410,
    0x5000_9417,
    0x5000_9418,
    0x4008_941a,
    0x5000_943f, // btrfs
    0x4004_f50d, // f2fs
];

/// open/openat: access mode 0..=2, O_TRUNC only with write access, no set-id
/// bits when creating.
fn open_ok(flags: u32, mode: u32) -> bool {
    let acc = flags & 3;
    let creates = flags & (SPEC_O_CREAT | SPEC_O_TMPFILE_BIT) != 0;
    acc != 3
        && (flags & SPEC_O_TRUNC == 0 || acc == 1 || acc == 2)
        && (!creates || mode & SPEC_SET_ID == 0)
}

/// The expected answer, restated from the specification (x86_64 numbers):
/// with a broker, every explicit refusal goes to it (it records the call and
/// answers EPERM).
fn oracle(spec: &FilterSpec, d: &SeccompData) -> u32 {
    use libc::*;
    // Calls the broker can perform are refused in the kernel, never routed
    // to it only to be recorded.
    let performable = matches!(
        i64::from(d.nr),
        SYS_open
            | SYS_openat
            | SYS_creat
            | SYS_mknod
            | SYS_mknodat
            | SYS_mkdir
            | SYS_mkdirat
            | SYS_unlink
            | SYS_unlinkat
            | SYS_rmdir
            | SYS_rename
            | SYS_renameat
            | SYS_renameat2
            | SYS_link
            | SYS_linkat
            | SYS_symlink
            | SYS_symlinkat
            | SYS_connect
    );
    match refusal_oracle(spec, d) {
        RET_EPERM if spec.broker && !performable => RET_USER_NOTIF,
        other => other,
    }
}

fn yes_or_notif(b: bool) -> u32 {
    if b {
        RET_ALLOW
    } else {
        RET_USER_NOTIF
    }
}

/// `ioctl(fd, TCXONC, TCOOFF or TCIOFF)`.
fn stops_terminal(d: &SeccompData) -> bool {
    d.args[1] as u32 == SPEC_TCXONC && matches!(d.args[2], 0 | 2)
}

fn refusal_oracle(spec: &FilterSpec, d: &SeccompData) -> u32 {
    if d.arch != AUDIT_ARCH_X86_64 || d.nr >= 0x4000_0000 {
        return RET_KILL_PROCESS;
    }
    let lo = |i: usize| d.args[i] as u32;
    let yes = |b: bool| if b { RET_ALLOW } else { RET_EPERM };
    let metadata = if spec.broker {
        RET_USER_NOTIF
    } else {
        RET_EPERM
    };
    use libc::*;
    match i64::from(d.nr) {
        // -- argument checks that hold under every policy
        SYS_ioctl if spec.network && spec.egress => {
            // Socket ioctls (linux/sockios.h) that only read or set the
            // socket's own owner: the rest configure a network namespace.
            const READS: [u32; 24] = [
                0x8901, 0x8902, 0x8903, 0x8904, 0x8905, 0x8906, 0x8907, // FIOSETOWN..SIOCGSTAMPNS
                0x8910, 0x8912, 0x8913, 0x8915, 0x8917, 0x8919, 0x891b, // SIOCGIFNAME..NETMASK
                0x891d, 0x8921, 0x8927, 0x8929, 0x8933, 0x8935, // METRIC, MTU, HWADDR, SLAVE, INDEX, PFLAGS
                0x8942, 0x894b, 0x8954, 0x8970, // TXQLEN, OUTQNSD, SIOCGARP, SIOCGIFMAP
            ];
            let request = lo(1);
            let sockio = (0x8900..=0x89ff).contains(&request) && !READS.contains(&request);
            yes(!SPEC_DENIED_IOCTLS.contains(&request) && !sockio && !stops_terminal(d))
        }
        SYS_ioctl => yes(!SPEC_DENIED_IOCTLS.contains(&lo(1)) && !stops_terminal(d)),
        SYS_fcntl if lo(1) == SPEC_F_SETLEASE => RET_EACCES,
        SYS_setsockopt | SYS_getsockopt if spec.network && spec.egress => {
            let (level, name) = (lo(1), lo(2));
            let netfilter = (level == 0 && name >= 64) || (level == 41 && matches!(name, 64 | 65 | 68 | 69));
            let admin = match level {
                0 => matches!(name, 4 | 16 | 17 | 19), // OPTIONS, IPSEC, XFRM policy, TRANSPARENT
                // 2292PKTOPTIONS, JOIN_ANYCAST, IPSEC, XFRM, HOPOPTS, RTHDRDSTOPTS, DSTOPTS, TRANSPARENT
                41 => matches!(name, 6 | 27 | 34 | 35 | 54 | 55 | 59 | 75),
                1 => matches!(name, 32 | 33 | 36), // *BUFFORCE, MARK
                _ => false,
            };
            let set = d.nr as i64 == SYS_setsockopt;
            yes(!(netfilter || set && admin))
        }
        SYS_personality => yes(lo(0) == 0xffff_ffff || lo(0) == 0),
        SYS_utimensat => metadata,
        // -- refused reads recorded (observed runs under read denials):
        //    read-only opens go to the broker too, but for O_PATH and
        //    O_DIRECTORY ones, which Landlock never refuses
        SYS_open | SYS_openat if spec.broker_reads && spec.broker && spec.read_deny => {
            let (flags, mode) = if d.nr as i64 == SYS_open {
                (lo(1), lo(2))
            } else {
                (lo(2), lo(3))
            };
            let plain = 3 | SPEC_O_TRUNC | SPEC_O_CREAT | SPEC_O_TMPFILE_BIT;
            let (path, dir) = (O_PATH as u32, O_DIRECTORY as u32);
            let creates = flags & (SPEC_O_CREAT | SPEC_O_TMPFILE_BIT) != 0;
            let never_refused = flags & (plain | path) == path || flags & (plain | dir) == dir;
            let allowed_write =
                !spec.broker_entries && open_ok(flags, mode) && (flags & 3 != 0 || creates);
            yes_or_notif(never_refused || allowed_write)
        }
        // -- writing opens and entry calls go to the broker when a deny
        //    path lies beneath a write path
        SYS_open | SYS_openat if spec.broker_entries && spec.broker => {
            let flags = lo(if d.nr as i64 == SYS_open { 1 } else { 2 });
            if flags & (3 | SPEC_O_TRUNC | SPEC_O_CREAT | SPEC_O_TMPFILE_BIT) == 0 {
                RET_ALLOW
            } else {
                RET_USER_NOTIF
            }
        }
        SYS_creat | SYS_mknod | SYS_mknodat | SYS_mkdir | SYS_mkdirat | SYS_unlink
        | SYS_unlinkat | SYS_rmdir | SYS_rename | SYS_renameat | SYS_renameat2 | SYS_link
        | SYS_linkat | SYS_symlink | SYS_symlinkat | SYS_umask | SYS_bind
            if spec.broker_entries && spec.broker =>
        {
            RET_USER_NOTIF
        }
        SYS_open => yes(open_ok(lo(1), lo(2))),
        SYS_openat => yes(open_ok(lo(2), lo(3))),
        SYS_openat2 => RET_ENOSYS,
        SYS_creat | SYS_mknod => yes(lo(1) & SPEC_SET_ID == 0),
        SYS_mknodat => yes(lo(2) & SPEC_SET_ID == 0),
        SYS_seccomp => yes(lo(1) & SPEC_NEW_LISTENER == 0),
        SYS_prctl => yes(lo(0) != SPEC_PR_SCHED_CORE),
        SYS_prlimit64 | SYS_sched_setaffinity | SYS_sched_setparam | SYS_sched_setscheduler
        | SYS_sched_setattr => yes(lo(0) == 0),
        SYS_setpriority => yes((lo(0) == 0 || lo(0) == 1) && lo(1) == 0),
        SYS_ioprio_set => yes((lo(0) == 1 || lo(0) == 2) && lo(1) == 0),
        // -- extended-attribute reads under read denials
        SYS_getxattr | SYS_lgetxattr | SYS_fgetxattr | SYS_listxattr | SYS_llistxattr
        | SYS_flistxattr
            if spec.read_deny =>
        {
            if spec.broker {
                RET_USER_NOTIF
            } else {
                0x0005_0000 | 95 // EOPNOTSUPP
            }
        }
        464 /* getxattrat */ | 465 /* listxattrat */ if spec.read_deny => RET_ENOSYS,
        // -- leaving the process group the runner holds the run by
        SYS_setsid | SYS_setpgid => yes(!spec.hold_group),
        // -- System V IPC
        SYS_shmget | SYS_shmat | SYS_shmdt | SYS_shmctl | SYS_semget | SYS_semop
        | SYS_semtimedop | SYS_semctl | SYS_msgget | SYS_msgsnd | SYS_msgrcv
        | SYS_msgctl => RET_EPERM,
        // -- spawning
        SYS_clone => {
            let f = lo(0);
            let thread_ok = !spec.deny_subprocess || f & SPEC_CLONE_THREAD != 0;
            // Under routed entry calls (and umask) a thread shares its
            // group's fs: the broker keeps umasks by thread id.
            let fs_ok = !(spec.broker_entries && spec.broker)
                || f & SPEC_CLONE_THREAD == 0
                || f & SPEC_CLONE_FS != 0;
            yes(f & SPEC_CLONE_NEW_ANY == 0 && thread_ok && fs_ok)
        }
        SYS_clone3 => RET_ENOSYS,
        SYS_fork | SYS_vfork => yes(!spec.deny_subprocess),
        // Refused reads recorded: the broker sees each exec (see Handler::Exec).
        SYS_execve | SYS_execveat => {
            if spec.broker_reads && spec.broker && spec.read_deny {
                RET_USER_NOTIF
            } else {
                RET_ALLOW
            }
        }
        // -- network
        SYS_socket if !spec.network => {
            let (dom, ty, proto) = (lo(0) as i32, lo(1) as i32 & 0xf, lo(2) as i32);
            yes(match dom {
                AF_UNIX => ty == SOCK_STREAM || ty == SOCK_SEQPACKET,
                AF_INET | AF_INET6 => ty == SOCK_STREAM && (proto == 0 || proto == IPPROTO_TCP),
                _ => false,
            })
        }
        // -- network on, listed destinations only
        SYS_socket if spec.network && spec.egress => {
            let (dom, ty, proto) = (lo(0) as i32, lo(1) as i32 & 0xf, lo(2) as i32);
            yes(match dom {
                AF_UNIX => ty == SOCK_STREAM || ty == SOCK_SEQPACKET,
                16 /* AF_NETLINK */ => proto == 0, // NETLINK_ROUTE
                AF_INET | AF_INET6 => ty == SOCK_STREAM && (proto == 0 || proto == IPPROTO_TCP),
                _ => false,
            })
        }
        SYS_socketpair if spec.network && spec.egress => {
            let ty = lo(1) as i32 & 0xf;
            yes(lo(0) as i32 == AF_UNIX && (ty == SOCK_STREAM || ty == SOCK_SEQPACKET))
        }
        SYS_connect | SYS_listen if spec.network && spec.egress => {
            if spec.broker {
                RET_USER_NOTIF
            } else {
                RET_EPERM
            }
        }
        SYS_sendto | SYS_sendmmsg if spec.network && spec.egress => {
            yes(lo(3) & SPEC_MSG_FASTOPEN == 0)
        }
        SYS_sendmsg if spec.network && spec.egress => yes(lo(2) & SPEC_MSG_FASTOPEN == 0),
        // -- network on, host UNIX sockets confined
        SYS_socket | SYS_socketpair if spec.network && spec.broker_connect => {
            let (dom, ty) = (lo(0) as i32, lo(1) as i32 & 0xf);
            let unix_ok = ty == SOCK_STREAM || ty == SOCK_SEQPACKET;
            let socket_needs_broker = d.nr as i64 == SYS_socket && !spec.broker;
            yes(dom != AF_UNIX || (unix_ok && !socket_needs_broker))
        }
        SYS_connect if spec.network && spec.broker_connect && spec.broker => RET_USER_NOTIF,
        SYS_socketpair if !spec.network => {
            let ty = lo(1) as i32 & 0xf;
            yes(lo(0) as i32 == AF_UNIX && (ty == SOCK_STREAM || ty == SOCK_SEQPACKET))
        }
        // A connect with the network off goes to the broker only to be
        // recorded (its rules refuse every one).
        SYS_connect if !spec.network && spec.broker => RET_USER_NOTIF,
        SYS_connect | SYS_listen | SYS_accept | SYS_accept4 if !spec.network => RET_EPERM,
        SYS_sendto if !spec.network => yes(d.args[4] == 0 && lo(3) & SPEC_MSG_FASTOPEN == 0),
        SYS_sendmsg if !spec.network => yes(lo(2) & SPEC_MSG_FASTOPEN == 0),
        SYS_sendmmsg if !spec.network => yes(lo(3) & SPEC_MSG_FASTOPEN == 0),
        SYS_socket | SYS_socketpair | SYS_connect | SYS_listen | SYS_accept | SYS_accept4
        | SYS_sendto | SYS_sendmsg | SYS_sendmmsg | SYS_bind | SYS_getsockname
        | SYS_getpeername | SYS_setsockopt | SYS_getsockopt | SYS_shutdown | SYS_recvfrom
        | SYS_recvmsg | SYS_recvmmsg => RET_ALLOW,
        // -- metadata writes Landlock cannot govern
        SYS_truncate => metadata,
        SYS_chmod | SYS_fchmod | SYS_fchmodat | 452 /* fchmodat2 */ | SYS_chown | SYS_fchown
        | SYS_lchown | SYS_fchownat | SYS_setxattr | SYS_lsetxattr | SYS_fsetxattr
        | SYS_removexattr | SYS_lremovexattr | SYS_fremovexattr | SYS_utime | SYS_utimes
        | SYS_futimesat => metadata,
        // -- metadata writes never brokered
        463 /* setxattrat */ | 466 /* removexattrat */ | 469 /* file_setattr */ => RET_EPERM,
        // -- never allowed
        SYS_io_uring_setup | SYS_io_uring_enter | SYS_io_uring_register | SYS_ptrace
        | SYS_process_vm_readv | SYS_process_vm_writev | SYS_process_madvise
        | SYS_process_mrelease | SYS_pidfd_getfd | SYS_kcmp | SYS_get_robust_list
        | SYS_migrate_pages | SYS_move_pages | SYS_mount | SYS_umount2 | SYS_fsopen
        | SYS_fsconfig | SYS_fsmount | SYS_fspick | SYS_move_mount | SYS_open_tree
        | 467 /* open_tree_attr */ | SYS_mount_setattr | SYS_pivot_root | SYS_chroot
        | SYS_unshare | SYS_setns | SYS_bpf | SYS_perf_event_open | SYS_userfaultfd
        | SYS_keyctl | SYS_add_key | SYS_request_key | SYS_kexec_load | SYS_kexec_file_load
        | SYS_init_module | SYS_finit_module | SYS_delete_module | SYS_reboot | SYS_swapon
        | SYS_swapoff | SYS_acct | SYS_quotactl | SYS_quotactl_fd | SYS_name_to_handle_at
        | SYS_open_by_handle_at | SYS_fanotify_init | SYS_fanotify_mark | SYS_sethostname
        | SYS_setdomainname | SYS_settimeofday | SYS_clock_settime | SYS_clock_adjtime
        | SYS_adjtimex | SYS_syslog | SYS_vhangup | 460 /* lsm_set_self_attr */
        | SYS_mq_open | SYS_mq_unlink | SYS_mq_timedsend | SYS_mq_timedreceive
        | SYS_mq_notify | SYS_mq_getsetattr | SYS_iopl | SYS_ioperm | SYS_modify_ldt
        | SYS_uselib | SYS_ustat | SYS_sysfs => RET_EPERM,
        // -- allowed unconditionally
        // memory
        SYS_brk | SYS_mmap | SYS_munmap | SYS_mremap | SYS_mprotect | SYS_madvise | SYS_msync
        | SYS_mincore | SYS_mlock | SYS_mlock2 | SYS_munlock | SYS_mlockall | SYS_munlockall
        | SYS_pkey_alloc | SYS_pkey_free | SYS_pkey_mprotect | SYS_membarrier | SYS_mseal
        | SYS_get_mempolicy | SYS_set_mempolicy | SYS_set_mempolicy_home_node | SYS_mbind
        | SYS_remap_file_pages | SYS_memfd_create | SYS_memfd_secret | 453
        // descriptors
        | SYS_read | SYS_write | SYS_readv | SYS_writev | SYS_pread64 | SYS_pwrite64
        | SYS_preadv | SYS_pwritev | SYS_preadv2 | SYS_pwritev2 | SYS_lseek | SYS_close
        | SYS_close_range | SYS_dup | SYS_dup2 | SYS_dup3 | SYS_fcntl | SYS_flock | SYS_fsync
        | SYS_fdatasync | SYS_sync | SYS_syncfs | SYS_sync_file_range | SYS_fallocate
        | SYS_ftruncate | SYS_sendfile | SYS_splice | SYS_tee | SYS_vmsplice
        | SYS_copy_file_range | SYS_readahead | SYS_fadvise64 | SYS_pipe | SYS_pipe2
        | SYS_fstat | SYS_fstatfs | SYS_getdents | SYS_getdents64 | 451 /* cachestat */
        | SYS_fgetxattr | SYS_flistxattr | SYS_io_setup | SYS_io_destroy | SYS_io_submit
        | SYS_io_cancel | SYS_io_getevents | 333 /* io_pgetevents */
        // events
        | SYS_select | SYS_pselect6 | SYS_poll | SYS_ppoll | SYS_epoll_create
        | SYS_epoll_create1 | SYS_epoll_ctl | SYS_epoll_wait | SYS_epoll_pwait
        | SYS_epoll_pwait2 | SYS_eventfd | SYS_eventfd2 | SYS_signalfd | SYS_signalfd4
        | SYS_timerfd_create | SYS_timerfd_settime | SYS_timerfd_gettime | SYS_inotify_init
        | SYS_inotify_init1 | SYS_inotify_add_watch | SYS_inotify_rm_watch
        // paths
        | SYS_stat | SYS_lstat
        | SYS_newfstatat | SYS_statx | SYS_statfs | SYS_access | SYS_faccessat
        | SYS_faccessat2 | SYS_getcwd | SYS_chdir | SYS_fchdir | SYS_readlink
        | SYS_readlinkat | SYS_mkdir | SYS_mkdirat | SYS_rmdir | SYS_unlink | SYS_unlinkat
        | SYS_rename | SYS_renameat | SYS_renameat2 | SYS_link | SYS_linkat | SYS_symlink
        | SYS_symlinkat | SYS_umask | SYS_getxattr
        | SYS_lgetxattr | SYS_listxattr | SYS_llistxattr | 464 | 465 | 468 | 457 | 458
        // time
        | SYS_clock_gettime | SYS_clock_getres | SYS_clock_nanosleep | SYS_nanosleep
        | SYS_gettimeofday | SYS_time | SYS_times | SYS_getitimer | SYS_setitimer
        | SYS_alarm | SYS_timer_create | SYS_timer_settime | SYS_timer_gettime
        | SYS_timer_getoverrun | SYS_timer_delete
        // signals
        | SYS_rt_sigaction | SYS_rt_sigprocmask | SYS_rt_sigreturn | SYS_rt_sigpending
        | SYS_rt_sigtimedwait | SYS_rt_sigqueueinfo | SYS_rt_tgsigqueueinfo
        | SYS_rt_sigsuspend | SYS_sigaltstack | SYS_kill | SYS_tkill | SYS_tgkill
        | SYS_pidfd_send_signal | SYS_pause
        // threads and scheduling
        | SYS_set_tid_address | SYS_set_robust_list | SYS_rseq | SYS_futex
        | SYS_futex_waitv | 454 | 455 | 456 | SYS_sched_yield | SYS_sched_getaffinity
        | SYS_sched_getparam | SYS_sched_getscheduler | SYS_sched_get_priority_max
        | SYS_sched_get_priority_min | SYS_sched_rr_get_interval | SYS_sched_getattr
        | SYS_getpriority | SYS_ioprio_get | SYS_getcpu | SYS_restart_syscall | SYS_arch_prctl
        // process and identity
        | SYS_exit | SYS_exit_group | SYS_wait4 | SYS_waitid | SYS_pidfd_open | SYS_getpid
        | SYS_getppid | SYS_gettid | SYS_getuid | SYS_geteuid | SYS_getgid | SYS_getegid
        | SYS_getgroups | SYS_getresuid | SYS_getresgid | SYS_getpgid | SYS_getpgrp
        | SYS_getsid | SYS_setuid | SYS_setgid | SYS_setreuid
        | SYS_setregid | SYS_setresuid | SYS_setresgid | SYS_setgroups | SYS_setfsuid
        | SYS_setfsgid | SYS_capget | SYS_capset | SYS_getrlimit
        | SYS_setrlimit | SYS_getrusage | SYS_sysinfo | SYS_uname
        | SYS_getrandom
        // self-confinement
        | 459 | 461 => RET_ALLOW,
        // a nested Landlock domain would not narrow what a broker performs
        SYS_landlock_create_ruleset if spec.broker => 0x0005_0000 | 95, // EOPNOTSUPP
        SYS_landlock_add_rule | SYS_landlock_restrict_self if spec.broker => RET_EPERM,
        SYS_landlock_create_ruleset | SYS_landlock_add_rule | SYS_landlock_restrict_self => {
            RET_ALLOW
        }
        _ => RET_ENOSYS,
    }
}

fn filters() -> &'static [(FilterSpec, Filter)] {
    static FILTERS: std::sync::OnceLock<Vec<(FilterSpec, Filter)>> = std::sync::OnceLock::new();
    FILTERS.get_or_init(|| {
        FilterSpec::all()
            .map(|s| (s, compile_spec(&s).expect("every combination compiles")))
            .collect()
    })
}

fn check(spec: &FilterSpec, f: &Filter, d: &SeccompData) {
    let got = run(f.instructions(), d);
    let want = oracle(spec, d);
    assert_eq!(
        got,
        want,
        "{spec:?} nr={} ({:?}) args={:x?}: program says {}, oracle says {}",
        d.nr,
        f.syscall_name(d.nr),
        d.args,
        ret_name(got),
        ret_name(want)
    );
}

fn data(nr: u32, args: [u64; 6]) -> SeccompData {
    SeccompData {
        nr,
        arch: AUDIT_ARCH_X86_64,
        ip: 0x7fff_0000_1234,
        args,
    }
}

#[test]
fn every_known_number_matches_the_oracle() {
    let arg_sets = [[0u64; 6], [u64::MAX; 6], [1, 2, 3, 4, 5, 6]];
    for (spec, f) in filters() {
        for nr in 0..=HIGHEST_KNOWN + 64 {
            for args in arg_sets {
                check(spec, f, &data(nr, args));
            }
        }
    }
}

/// The kernel's action cache serves exactly the unconditional allows, and
/// preparing it (done at attach, for every number) stays cheap: the
/// dispatch is a binary search, not a scan of the table.
#[test]
fn the_kernel_caches_exactly_the_unconditional_allows() {
    for spec in FilterSpec::all() {
        let f = compile_spec(&spec).unwrap();
        let rows = sandbox_seccomp::table(&spec);
        let mut total = 0;
        let mut deepest = 0;
        for nr in 0..=HIGHEST_KNOWN + 64 {
            let (allow, steps) = const_allow(f.instructions(), nr, AUDIT_ARCH_X86_64);
            let unconditional = rows
                .iter()
                .any(|e| e.nr == nr && e.rule == sandbox_seccomp::Rule::Allow);
            assert_eq!(
                allow,
                unconditional,
                "{spec:?} nr {nr} ({:?})",
                f.syscall_name(nr)
            );
            total += steps;
            deepest = deepest.max(steps);
        }
        println!("{spec:?}: cache preparation emulates {total} instructions, at most {deepest} per number");
        assert!(
            deepest <= 32,
            "{spec:?}: {deepest} instructions for one number"
        );
        // A foreign architecture is never cached as allowed.
        assert!(!const_allow(f.instructions(), 0, AUDIT_ARCH_I386).0);
    }
}

#[test]
fn every_combination_fits_the_kernel_limit() {
    let sizes: Vec<(FilterSpec, usize)> = filters().iter().map(|(s, f)| (*s, f.len())).collect();
    let (spec, largest) = sizes.iter().max_by_key(|(_, n)| *n).copied().unwrap();
    println!("largest program: {largest} instructions for {spec:?}");
    for (s, n) in &sizes {
        println!("{n:5} {s:?}");
        assert!(*n <= 4096, "{s:?}: {n} instructions");
    }
}

#[test]
fn prologue_kills_foreign_arch_and_x32_before_anything() {
    for (spec, f) in filters() {
        for arch in [AUDIT_ARCH_I386, AUDIT_ARCH_AARCH64, 0, u32::MAX] {
            let d = SeccompData {
                arch,
                ..data(libc::SYS_read as u32, [0; 6])
            };
            assert_eq!(
                run(f.instructions(), &d),
                RET_KILL_PROCESS,
                "{spec:?} arch {arch:#x}"
            );
        }
        for nr in [0x4000_0000u32, 0x4000_0000 | 1, 0x4000_0000 | 512, u32::MAX] {
            assert_eq!(
                run(f.instructions(), &data(nr, [0; 6])),
                RET_KILL_PROCESS,
                "{spec:?} nr {nr:#x}"
            );
        }
    }
}

/// Argument values that sit on the edges of the checks, plus random ones.
fn interesting_arg() -> impl Strategy<Value = u64> {
    let high = any::<u32>().prop_map(|h| u64::from(h) << 32);
    prop_oneof![
        any::<u64>(),
        Just(0u64),
        (0u64..64),
        Just(0xffff_ffff),
        (
            high.clone(),
            prop_oneof![
                Just(SPEC_TIOCSTI),
                Just(SPEC_TIOCLINUX),
                Just(0x5413u32),
                Just(0x5423u32),
                Just(SPEC_TCXONC),
                Just(SPEC_F_SETLEASE),
                Just(0x4008_6602u32),
                Just(0x8008_6601u32),
                Just(0xffff_ffff),
                Just(0)
            ]
        )
            .prop_map(|(h, l)| h | u64::from(l)),
        (high.clone(), any::<u32>()).prop_map(|(h, l)| h | u64::from(
            l & (SPEC_CLONE_THREAD | SPEC_CLONE_FS | SPEC_CLONE_NEW_ANY | 0x0f00 | 0x11)
        )),
        (high.clone(), any::<u32>()).prop_map(|(h, l)| h | u64::from(l & SPEC_MSG_FASTOPEN)),
        // open flags and creation modes around the checked bits
        (high.clone(), any::<u32>()).prop_map(|(h, l)| h | u64::from(
            l & (3 | SPEC_O_CREAT | SPEC_O_TRUNC | SPEC_O_TMPFILE_BIT | SPEC_SET_ID | 0o777 | 8)
        )),
        // the read-only opens that stay in the kernel when reads are observed
        (high.clone(), any::<u32>()).prop_map(|(h, l)| h | u64::from(
            l & (3 | SPEC_O_CREAT | SPEC_O_TRUNC | libc::O_PATH as u32 | libc::O_DIRECTORY as u32)
        )),
        prop_oneof![
            Just(libc::AF_UNIX),
            Just(libc::AF_INET),
            Just(libc::AF_INET6),
            Just(libc::AF_NETLINK)
        ]
        .prop_map(|v| v as u64),
        (
            0u64..16,
            prop_oneof![
                Just(0u64),
                Just(libc::SOCK_NONBLOCK as u64),
                Just(libc::SOCK_CLOEXEC as u64)
            ]
        )
            .prop_map(|(t, f)| t | f),
        prop_oneof![Just(0u64), Just(6u64), Just(17u64), Just(262u64)],
        // socket ioctls, option levels and names
        (high, 0x88f0u32..0x8a10).prop_map(|(h, l)| h | u64::from(l)),
        prop_oneof![
            Just(0u64),
            Just(1u64),
            Just(41u64),
            0u64..80,
            Just(96u64),
            Just(1152u64)
        ],
    ]
}

fn checked_syscall() -> impl Strategy<Value = u32> {
    use libc::*;
    prop::sample::select(vec![
        SYS_ioctl,
        SYS_fcntl,
        SYS_personality,
        SYS_utimensat,
        SYS_clone,
        SYS_clone3,
        SYS_socket,
        SYS_socketpair,
        SYS_sendto,
        SYS_sendmsg,
        SYS_sendmmsg,
        SYS_connect,
        SYS_fork,
        SYS_truncate,
        SYS_open,
        SYS_openat,
        SYS_creat,
        SYS_mknod,
        SYS_mknodat,
        SYS_seccomp,
        SYS_prctl,
        SYS_prlimit64,
        SYS_sched_setaffinity,
        SYS_setpriority,
        SYS_ioprio_set,
        SYS_getxattr,
        SYS_fgetxattr,
        SYS_setsockopt,
        SYS_getsockopt,
    ])
    .prop_map(|n| n as u32)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4096, ..ProptestConfig::default() })]

    #[test]
    fn argument_checks_match_the_oracle(
        nr in checked_syscall(),
        args in proptest::array::uniform6(interesting_arg()),
        which in 0usize..320,
    ) {
        let (spec, f) = &filters()[which];
        check(spec, f, &data(nr, args));
    }

    #[test]
    fn random_numbers_match_the_oracle(nr in any::<u32>(), args in proptest::array::uniform6(any::<u64>()), which in 0usize..320) {
        let (spec, f) = &filters()[which];
        check(spec, f, &data(nr, args));
    }

    #[test]
    fn random_arch_is_killed(arch in any::<u32>().prop_filter("foreign", |a| *a != AUDIT_ARCH_X86_64), nr in 0u32..512) {
        let (_, f) = &filters()[0];
        let d = SeccompData { arch, ..data(nr, [0; 6]) };
        prop_assert_eq!(run(f.instructions(), &d), RET_KILL_PROCESS);
    }
}

#[test]
fn every_exclusion_has_a_reason() {
    for spec in FilterSpec::all() {
        for e in sandbox_seccomp::table(&spec) {
            if e.rule != sandbox_seccomp::Rule::Allow {
                assert!(!e.reason.is_empty(), "{} has no reason", e.name);
            }
        }
    }
}

#[test]
fn unchecked_allows_do_not_depend_on_arguments() {
    // The kernel's action cache only applies when the verdict ignores args.
    let (spec, f) = (
        FilterSpec {
            network: false,
            deny_subprocess: true,
            broker: false,
            read_deny: true,
            hold_group: false,
            broker_entries: false,
            broker_connect: false,
            egress: false,
            broker_reads: false,
            child_layer: None,
        },
        compile_spec(&FilterSpec {
            network: false,
            deny_subprocess: true,
            broker: false,
            read_deny: true,
            hold_group: false,
            broker_entries: false,
            broker_connect: false,
            egress: false,
            broker_reads: false,
            child_layer: None,
        })
        .unwrap(),
    );
    for e in sandbox_seccomp::table(&spec) {
        if e.rule == sandbox_seccomp::Rule::Allow {
            for args in [[0u64; 6], [u64::MAX; 6], [0xdead_beef; 6]] {
                assert_eq!(
                    run(f.instructions(), &data(e.nr, args)),
                    RET_ALLOW,
                    "{}",
                    e.name
                );
            }
        }
    }
}

/// A spawner's filter admits exactly one nested restriction: with the
/// child layer's fd number and no flags; another fd, any flag, and adding
/// rules stay refused, and without the layer the same call is refused.
#[test]
fn the_child_layer_admits_only_its_own_ruleset() {
    use libc::{SYS_landlock_add_rule, SYS_landlock_restrict_self};
    let base = FilterSpec::all()
        .find(|s| s.broker && s.broker_connect && !s.deny_subprocess)
        .unwrap();
    let layered = compile_spec(&base.with_child_layer(Some(7))).unwrap();
    let plain = compile_spec(&base).unwrap();
    let restrict = SYS_landlock_restrict_self as u32;
    let call = |f: &Filter, nr: u32, fd: u64, flags: u64| {
        run(f.instructions(), &data(nr, [fd, flags, 0, 0, 0, 0]))
    };
    assert_eq!(call(&layered, restrict, 7, 0), RET_ALLOW);
    assert_eq!(
        call(&layered, restrict, 7 | 1 << 32, 0),
        RET_ALLOW,
        "an int fd: low 32 bits"
    );
    // Refused as without the layer (the broker answers and records it).
    let refused = call(&plain, restrict, 7, 0);
    assert_ne!(refused, RET_ALLOW);
    assert_eq!(call(&layered, restrict, 8, 0), refused);
    assert_eq!(call(&layered, restrict, 7, 1), refused);
    let add = SYS_landlock_add_rule as u32;
    assert_eq!(call(&layered, add, 7, 0), call(&plain, add, 7, 0));
    assert_ne!(call(&layered, add, 7, 0), RET_ALLOW);
}
