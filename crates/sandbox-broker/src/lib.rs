//! Metadata broker: performs chmod, chown, xattr, timestamp and truncate requests
//! of a confined process, but only on objects beneath a write path.
//!
//! Landlock has no right for file metadata, so the seccomp filter routes the
//! metadata syscalls ([`brokered_syscalls`], and [`brokered_truncate_syscalls`]
//! when Landlock lacks the truncate right) to a seccomp user-notification
//! listener. The [`Broker`] serves that listener on a thread of the unconfined
//! runner. For every request it
//!
//! 1. reads the caller's arguments (paths bounded by `PATH_MAX`, xattr names and
//!    values bounded by the kernel's limits) with `process_vm_readv`, then checks
//!    `SECCOMP_IOCTL_NOTIF_ID_VALID`, so a recycled thread id cannot feed it
//!    another process's memory;
//! 2. resolves the object the caller named: relative to the caller's cwd
//!    (`/proc/TID/cwd`), to its dirfd or its own fd (both via `pidfd_getfd`),
//!    following the last symlink exactly when the syscall would
//!    (`lchown`, `lsetxattr`, `AT_SYMLINK_NOFOLLOW` do not), never through
//!    `/proc` magic links;
//! 3. admits the object only when its canonical path lies beneath a write path
//!    and not beneath a write-deny path, and the same object is reached again
//!    with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` from the write path's
//!    directory fd, so no symlink, `..` or concurrent swap leads out;
//! 4. checks the credential rules below against the caller's identity
//!    (`/proc/TID/status`) and the object's owner;
//! 5. performs the operation itself on the `O_PATH` fd it resolved and answers
//!    with the result. The original syscall never continues
//!    (`SECCOMP_USER_NOTIF_FLAG_CONTINUE` is racy and unused).
//!
//! Everything refused is answered with `EPERM`; a missing object is answered
//! with the kernel's own `ENOENT`/`ENOTDIR`. Every answer is recorded in the
//! [`BrokerLog`] returned by [`Broker::finish`].
//!
//! # Credential rules
//! The broker acts with the runner's privileges, so it applies the owner rules
//! itself and never grants more than an unprivileged owner has:
//! * **chmod**: the caller owns the file (fsuid) or holds `CAP_FOWNER`. Adding
//!   `S_ISUID` or `S_ISGID` is always refused, also for root callers: a confined
//!   process must not create set-id binaries, even inside write paths. Bits the
//!   file already has may stay.
//! * **chown**: the owner stays, or becomes the caller's euid when the caller
//!   holds `CAP_CHOWN` (giving a file to another user is refused). The group may
//!   change to the caller's fsgid or a supplementary group, by the owner or a
//!   `CAP_CHOWN` holder. The kernel clears set-id bits on chown as usual.
//! * **xattr**: only the `user.` namespace (never `security.`, whose
//!   `security.capability` would grant file capabilities, nor `trusted.` or
//!   `system.`), with write permission on the file.
//! * **timestamps**: explicit times need ownership or `CAP_FOWNER`; "now" also
//!   accepts write permission, as in the kernel.
//! * **truncate**: regular files with write permission.
//!
//! Write permission is the classic mode-bit check with the caller's fsuid,
//! groups and `CAP_DAC_OVERRIDE`; ACLs that grant more are not honoured.
//!
//! # Known limits
//! * `/proc/self/fd/N` (also `thread-self` and the caller's own tid) is taken
//!   as the caller's fd N and checked like an fd-based call; every other path
//!   through `/proc` is refused. Unlinked files (`(deleted)`), pipes, sockets
//!   and memfds are refused for fd-based calls.
//! * A hard link inside a write path to a file outside is indistinguishable from
//!   a file inside (as for Landlock's own write rights).
//! * The runner needs ptrace-level access to the confined process
//!   (`process_vm_readv`, `pidfd_getfd`): its parent or root, and Yama
//!   `ptrace_scope` below 2.
//!
//! # Wiring it into a backend
//! 1. Runner, before spawning: [`BrokerRules::new`] and [`listener_channel`].
//! 2. Filter: route [`brokered_syscalls`] (and [`brokered_truncate_syscalls`]
//!    when Landlock lacks the truncate right) to `SECCOMP_RET_USER_NOTIF`, only
//!    when a broker serves the run: without a listener that action fails with
//!    `ENOSYS`.
//! 3. Child, in the pre-exec hook after `NO_NEW_PRIVS` and Landlock: install the
//!    filter with [`install_filter_with_listener`] on the child end of the
//!    channel (the socket must still be open there: do not close it with the
//!    other inherited fds before the hook runs).
//! 4. Runner, after spawn: drop the child end, [`recv_fd`] the listener,
//!    [`Broker::start`]. Confined calls made before that simply wait.
//! 5. After the process tree ended: [`Broker::finish`]; its refusals are the
//!    denial evidence for the outcome record ([`BrokerLog::explain`] for humans).
//!
//! Requires Linux >= 5.9 (`pidfd_getfd`, `openat2`, user notification with
//! `ID_VALID`); `fchmodat2` routing needs nothing more, kernels without it never
//! issue it.
#![warn(missing_docs)]

mod log;

pub use log::{BrokerLog, BrokerRecord, CredentialChange, Decision, Refusal, Target};

#[cfg(target_os = "linux")]
mod broker;
#[cfg(target_os = "linux")]
mod caller;
#[cfg(target_os = "linux")]
mod creds;
#[cfg(target_os = "linux")]
mod error;
#[cfg(target_os = "linux")]
mod fdpass;
#[cfg(target_os = "linux")]
mod notif;
#[cfg(target_os = "linux")]
mod ops;
#[cfg(target_os = "linux")]
mod resolve;
#[cfg(target_os = "linux")]
mod syscalls;

#[cfg(target_os = "linux")]
pub use broker::Broker;
#[cfg(target_os = "linux")]
pub use error::BrokerError;
#[cfg(target_os = "linux")]
pub use fdpass::{install_filter_with_listener, listener_channel, recv_fd, send_fd};
#[cfg(target_os = "linux")]
pub use resolve::BrokerRules;
#[cfg(target_os = "linux")]
pub use syscalls::{brokered_syscalls, brokered_truncate_syscalls, brokered_xattr_read_syscalls};
