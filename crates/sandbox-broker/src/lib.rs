//! Broker for a confined process's filesystem writes that Landlock cannot
//! govern alone: it performs chmod, chown, xattr, timestamp and truncate
//! requests, but only on objects beneath a write path; when the policy has
//! read-deny paths, its xattr reads, refusing those of objects beneath a
//! read-deny path; and when a deny path lies beneath a write path, its
//! writing opens and directory-entry calls, refusing those that would write
//! into a denied path (see [below](#writing-opens-and-entry-calls)); and
//! with network on, every `connect`, so that a pathname UNIX socket is
//! reached only beneath a write path or when allowed (see `docs/broker.md`, Connect).
//!
//! The seccomp filter routes these syscalls to a seccomp user-notification
//! listener. Which calls, under which policy, and how the broker handles
//! each is one table, `sandbox-seccomp`'s: a row that routes a call the
//! broker decodes names its handler ([`sandbox_seccomp::Handler`]:
//! metadata changes always, xattr reads when the policy has read-deny
//! paths, writing opens and entry calls when a deny path lies beneath a
//! write path, `connect` when network is on, ...), and the broker dispatches
//! every notification by looking its number up there
//! ([`sandbox_seccomp::handler`]); a routed call without a handler was
//! refused by the filter and is only recorded. The [`Broker`] serves that listener
//! on a thread of the runner, which a backend starts from inside the run's
//! own Landlock domain (see [below](#the-brokers-own-domain)). For every request (`connect`: see
//! `docs/broker.md`, Connect) it
//!
//! 1. reads the caller's arguments (paths bounded by `PATH_MAX`, xattr names and
//!    values bounded by the kernel's limits, flags checked as the kernel checks
//!    them) with `process_vm_readv`, once, then checks
//!    `SECCOMP_IOCTL_NOTIF_ID_VALID`, so a recycled thread id cannot feed it
//!    another process's memory;
//! 2. reads the caller's credentials and umask (`/proc/TID/status`; with
//!    [`BrokerRules::with_fixed_credentials`], which the spawner sets only when
//!    the child vouched for them, the credentials are those and only the umask
//!    is read, for calls that apply one) and takes the
//!    handles the path starts from: the caller's cwd (`/proc/TID/cwd`), its
//!    dirfd or its own fd (both via `pidfd_getfd`);
//! 3. takes on the caller's credentials on the broker thread (see
//!    [below](#acting-with-the-callers-credentials)) and, with them, resolves
//!    the object the caller named, following the last symlink exactly when the
//!    syscall would (`lchown`, `lsetxattr`, `lgetxattr`, `AT_SYMLINK_NOFOLLOW`
//!    do not), never through `/proc` magic links nor onto procfs (whose `self`
//!    would be the broker); the kernel's own search permissions apply to that walk;
//! 4. admits the object by its canonical path (`/proc/self/fd` readlink of
//!    the resolved fd):
//!    * a **change** only when the path lies beneath a write path and is not
//!      *denied* (beneath a write-deny or a read-deny path: a change to a file
//!      the caller may not read is refused too), and the same object is
//!      reached again with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` from the
//!      write path's directory fd, so no symlink, `..` or concurrent swap leads out;
//!    * a **read** anywhere on the read surface, unless the path lies beneath a
//!      read-deny path; the read is made on the very fd that was checked;
//! 5. checks the broker's own rules below against the caller's identity and the
//!    object's owner;
//! 6. performs the operation on the fd it resolved (through `/proc/self/fd/N`
//!    where the syscall takes a path, on the admitted parent's fd for an
//!    entry), still with the caller's credentials, gives the thread its own
//!    back, and answers with the result: a new fd is installed in the caller
//!    and the call answered with its number in one step
//!    (`SECCOMP_IOCTL_NOTIF_ADDFD` with `SECCOMP_ADDFD_FLAG_SEND`). An xattr
//!    read's bytes are copied into the caller's buffer with `process_vm_writev`,
//!    after one more `ID_VALID` check right before the write. The original
//!    syscall never continues (`SECCOMP_USER_NOTIF_FLAG_CONTINUE` would let the
//!    kernel read again memory the caller can rewrite after the check). The
//!    calls that do have no pointer the decision rests on: `umask`
//!    ([`Handler::Umask`](sandbox_seccomp::Handler::Umask)), which the broker only notes, to know
//!    when the umasks it keeps under fixed credentials change; and the calls
//!    that name another process by pid or tid ([`Handler::Process`](sandbox_seccomp::Handler::Process):
//!    `prlimit64`, `sched_set*`, `setpriority`, `ioprio_set`), let go on only
//!    when the target is in the caller's session, the run's own (a command
//!    starts in a session of its own that no outside process can join), with
//!    `ESRCH` for a missing one and [`Refusal::ForeignProcess`] otherwise.
//!
//! *Denied* compares paths component by component without regard to case
//! (`W/.GIT/config` is `W/.git/config` on a case-insensitive filesystem), and
//! also refuses the inode of every deny path that existed when the rules were
//! made, under any name (e.g. a hard link made before the run).
//!
//! Everything refused is answered with `EPERM`, except writing opens, entry
//! calls and `truncate` refused by the paths (outside every write path, under
//! a deny path, an ancestor of one), which get `EACCES` as from Landlock, and
//! connects (`EACCES` for a pathname UNIX socket, `EAGAIN` beyond the
//! connects under way at once, see `docs/broker.md`, Connect); a
//! missing object is answered with the kernel's own `ENOENT`/`ENOTDIR`, a
//! directory the caller may not search with `EACCES`. Every answer is recorded
//! in the [`BrokerLog`] returned by [`Broker::finish`].
//!
//! # Answers as the kernel's
//! A brokered call returns what the kernel would return to the caller (value,
//! errno, side effects, fd flags) unless the policy refuses it, and a refusal
//! comes only after every error the kernel reports before its permission
//! checks and security hooks (fs/namei.c): for a new name, the walk of the
//! directory part (`ENOENT`, `ENOTDIR`, `ELOOP`, `ENAMETOOLONG`), then
//! `EEXIST` for a name that exists and `ENOENT` for a missing one with a
//! trailing slash (`filename_create`); for `unlink`/`rmdir`, `ENOENT` for a
//! missing name and, for `unlink` of a name with a trailing slash, `EISDIR` or
//! `ENOTDIR` (`do_unlinkat`, `do_rmdir`); for `rename`, both parents, then
//! `EBUSY` for `.` and `..` (`EEXIST` with `RENAME_NOREPLACE`), both names
//! (`ENOENT`, `EEXIST`), then `ENOTDIR` for a non-directory named with a
//! trailing slash (`do_renameat2`); for `link`, the source's lookup before
//! the new name's (`do_linkat`); for `open` with `O_CREAT`, `EISDIR` for a
//! trailing slash (`open_last_lookups`); for `truncate`, `EISDIR` and `EINVAL`
//! (`vfs_truncate`, fs/open.c); `utimensat` with both times `UTIME_OMIT`
//! returns 0 without a look at the path (fs/utimes.c); for an open, `EMFILE`
//! when the caller's fd table is full, before the path and with nothing
//! created or truncated (`O_TRUNC` applied only after the install, a creation
//! undone when the install fails); for `setxattr`, the name's and value's
//! errors (`EOPNOTSUPP`, `EINVAL`) before any refusal; `bind` records the
//! caller's own `sun_path` (`getsockname`); metadata calls on a pipe, socket
//! or anon_inode are the kernel's (red-team R6a). `tests/tests/it/fidelity.rs`
//! in the workspace holds this: one syscall matrix run bare, under `-w`,
//! under `-w` with a deny path and under workspace-write, compared call by
//! call, as root and as an unprivileged user; `tests/tests/it/real_tools.rs`
//! runs npm, make install, cp -a, git worktree and submodule, a venv and cargo
//! both ways.
//!
//! # Design
//! How writing opens and entry calls, connects, the broker's own domain,
//! the caller's credentials, the rules and xattr reads are decided and
//! performed, and the known limits, is in `docs/broker.md` in the
//! repository.
//!
//! # Threat table
//! The caller controls its memory (every pointer argument, rewritten at
//! will by other threads), its fds and cwd, its thread ids, timing, and its
//! own further restrictions. Each entry point, what it takes from the caller,
//! and the tests that attack it:
//!
//! | entry point | caller controls | attacked by |
//! |---|---|---|
//! | notification receive / answer | tid, syscall nr, args; can die or be replaced mid-call | `tests/it/robustness.rs`, `tests/it/race.rs` (`ID_VALID` before every answer) |
//! | argument reads (`process_vm_readv`) | path and buffer bytes, rewritten concurrently | `tests/it/race.rs`, `tests/it/entry_race.rs`, `tests/it/connect_race.rs` |
//! | path resolution (cwd, dirfd, `/proc/self/fd/N`, `/dev/tty`) | symlinks swapped during the walk, deleted cwd, magic links | `tests/it/decisions.rs`, `tests/it/entries.rs`, `tests/it/read_deny.rs`, end-to-end `tests/tests/it/broker_domain.rs` |
//! | metadata changes (chmod, chown, xattr, utimes, truncate) | target, mode bits, owner, xattr names and values | `tests/it/decisions.rs`, `tests/it/credentials.rs`, `tests/it/xattr_reads.rs`; a check that mirrors the kernel's (owner, `CAP_FOWNER`/`CAP_CHOWN`, write permission) answers the kernel's errno and records no refusal (docs/broker.md): `tests/it/kernel_parity.rs` (each call bare and confined as uid 65534 without capabilities, same errno, nothing refused, nothing changed; controls: outside the write paths and a set-id bit still refused and recorded) |
//! | the record of the answers ([`BrokerLog`]) | how many calls it makes of each kind (a flood of performed calls before a refusal, a flood of refusals) | refusals and other answers kept within caps of their own ([`BrokerLog::MAX_REFUSALS`], [`BrokerLog::MAX_RECORDS`]), the rest counted apart (`refusals_omitted`, `omitted`); a failed run with a refusal only counted is a sandbox denial all the same | `log::tests`, `tests/it/kernel_parity.rs` (`a_refusal_after_a_flood_of_performed_calls_is_kept`, with its twin without the refusal), end-to-end `tests/tests/it/broker_record.rs` (the red-team's flood: `sandbox_denial`, the refusal listed, root and nobody, with twin; the kernel's own `EPERM` as nobody recorded as no refusal, with a refused control) |
//! | unlinked objects (fd-form chmod, chown, utimes, xattr changes on an `O_TMPFILE`, a deleted file, a memfd) | which object it holds (handed in from outside, made in a write path, unlinked by itself), the name it gave a file before deleting it | admitted only when the directory the kernel shows for it (`<dir>/#ino (deleted)`) lies beneath a directory write path on the object's own mount and outside the deny paths, else refused as the named twin (`OutsideWritePaths`, `EPERM`): `tests/it/decisions.rs` (`unlinked_objects_are_changed_only_when_made_inside_a_write_path`), end-to-end `tests/tests/it/unlinked_handed.rs` (the host's `O_TMPFILE` and deleted file as stdout and stdin, the named twin, the twins in `W`, a write-deny path, bare; root and nobody) |
//! | writing opens and entry calls | flags, modes, both paths of link/rename, handed fds | `tests/it/entry_calls.rs`, `tests/it/entries.rs`, `tests/it/fdpass.rs`, end-to-end `broker_domain.rs` (handed-fd link, device ioctls) |
//! | git directories beneath the write paths (`gitdirs`, under a policy that protects them) | which directory looks like a git directory (it may empty one, move one away, make one), the names it writes, renames racing the check | a git directory counts from its content (`HEAD` and `objects`+`refs`, or `commondir`), which cannot be removed or moved out of one from before the run; "made by the run" is the directory's inode among those the broker made, not its name; a `hooks` above an entry is opened by path and the entry reached again from it (else `Moved`); an exchange is a removal of both names; the run's own repositories are every directory it made `HEAD`, `objects`, `refs`, `commondir` or `config` in (by any call: open, mknod, symlink, rename, link) while it was no git directory from before the run, followed by fd (the first 256) or path, and what cannot be named is counted and said | end-to-end `tests/tests/it/workspace.rs` (`every_git_directory_in_the_workspace_is_protected`: a nested clone, a separate git dir, a bare repository, root and nobody, with twins; `repositories_made_during_the_run_are_named_wherever_they_are`) |
//! | the run's own shared memory (`shm`, [`BrokerRules::with_private_shm`]: writing opens, `link`, `rename`, `unlink` and `truncate` in `/dev/shm`, and the mode, owner and times of its own objects there) | names (the path bytes, rewritten by another thread; a bare name resolved from its cwd or dirfd), flags and modes, which entry it made, symlinks and names planted there by others, another process replacing a name it made | the broker makes every new entry itself (`O_CREAT|O_EXCL|O_NOFOLLOW` on its own `/dev/shm` fd; its domain grants `/dev/shm`, the command's does not) and records the inode, held `O_PATH` so its number is not reused; later calls act only on a recorded inode, reached without following a symlink (an open through the very fd checked, a link through `/proc/self/fd`); everything else keeps the kernel's answer: without deny paths beneath the write paths it continues in the kernel (`SECCOMP_USER_NOTIF_FLAG_CONTINUE`, which grants nothing: the command's own Landlock domain decides whatever the memory says by then) after the flag refusals the filter would make (`O_TRUNC` without write access, access mode 3, set-id modes), else the general rules; what the run left is removed at its end when the name still holds its inode. Known gap: a name checked then unlinked or renamed is two steps, and a process outside the run that can replace it (the run's uid or root, `/dev/shm` is sticky) could have it removed in between | end-to-end `tests/tests/it/shm.rs` (foreign segment: write, `O_TRUNC`, truncate, link, rename, unlink, replace by rename refused with the errnos of a run without the feature, the own segment in the same run and the bare twin changed, `--read-deny` not read; a thread flipping the path between own and foreign names; the run's name replaced from outside; a planted symlink; leftovers removed; Pool, ProcessPoolExecutor, Queue, SharedMemory as bare; `chmod`, `fchmod`, `chown`, `utime`, `touch` of the own segment as bare, of a foreign one refused; root and nobody) |
//! | connect | address bytes, socket fd swapped by `dup2`, blocking | `tests/it/connect.rs`, `tests/it/connect_race.rs`, `tests/it/connect_net.rs` |
//! | the run's own loopback listeners (`listen` and `connect` under egress rules, `src/listeners.rs`) | which sockets listen (one handed in from outside, one that joined a host service's `SO_REUSEPORT` group), when they close, which port a host service takes after them, timing between check and connect | a `listen` the broker performs on a loopback-bound IP socket that was not listening records its `SO_COOKIE` (never reused; no reference kept, so closing frees the port as without a broker); a connect no rule admits is admitted when every TCP socket listening on the port (`NETLINK_SOCK_DIAG` dump, IPv4 and IPv6) has a recorded cookie and one is bound to the destination address, checked on the broker thread and again on the worker right before the connect, else `ECONNREFUSED` as every refused connect. Known gap: a host service of the same uid binding the port with `SO_REUSEPORT` in the microseconds between the second check and the SYN, after the run set `SO_REUSEPORT` on its listener | end-to-end `tests/tests/it/own_listeners.rs` (urllib through the proxy variables and a raw socket reach the run's server on `127.0.0.1` and `::1`; a host service on another loopback port refused directly and through the proxy, and a port the run closed then taken over from outside refused, neither seeing a connection; root and nobody), `listeners::tests` |
//! | `socket` (egress rules) | domain, type and flags, protocol; how many | only IP `SOCK_DGRAM` (protocol 0 or UDP) is made, in the datagram namespace, with the caller's arguments (the kernel's errors are the caller's); the rest refused and recorded | end-to-end `tests/tests/it/dns.rs` (`no_datagram_reaches_anything_but_the_runners_resolver`: raw refused, datagrams reach nothing) |
//! | caller credentials and umask | ids, groups, capabilities, umask per thread | `tests/it/credentials.rs`, `sandbox-landlock/tests/it/umask_threads.rs` |
//! | calls on another process (`prlimit64`, `sched_set*`, `setpriority`, `ioprio_set`) | the target pid or tid, which may exit and be reused | end-to-end `tests/tests/it/real_tools.rs` (`a_process_outside_the_run_is_never_reniced_or_limited` beside the run's own) |
//! | kernel-first errors | names that exist, are missing, have trailing slashes, loop | end-to-end `tests/tests/it/fidelity.rs` (the matrix against bare and against Landlock's own answers) |
//! | broker resources | request rate, concurrent connects, fds it holds | `tests/it/fd_leak.rs`, `tests/it/cost.rs`, `tests/it/robustness.rs` |
//! | the runner's work for the run (`RunBudget`) | CPU per request and request rate (a `chmod` flood), callers left waiting (FIFO writers without a reader, blocking connects) | CPU time of the broker thread and its workers drawn from a bucket at the run's `--cpu` rate (no request taken while it is empty: callers wait in the kernel); connect workers at most the run's `--pids`, the rest queued; FIFO writers hold no thread (the broker thread tries each FIFO again between requests), never refused for their number | end-to-end `tests/tests/it/broker_budget.rs` (a flood under `--cpu 0.1` beside an unlimited twin; 100 FIFO writers beside the bare kernel; connects under `--pids`; root and nobody), `budget::tests` |
//! | its own domain | a nested Landlock domain, signals to the runner's threads, core dumps | end-to-end `broker_domain.rs` (nested domain, core dumps), `sandbox-landlock/tests/it/process.rs` |
//! | a broker shared by a session's commands ([`Between`]) | what command N leaves for N+1: refusals, FIFO openers waiting, `/dev/shm` objects, a spent CPU budget, repositories made; connects in flight when N ends | closed between commands on the broker's own thread (log handed over and capped per command, waiters dropped, objects removed, budget refilled, each repository named once); skipped only when the listener was not readable since the last close; a connect still in flight is recorded with N+1 (docs/broker.md) | `tests/tests/it/session.rs` (`a_session_says_how_it_launches_and_confines_each_command_either_way`, `a_repository_the_command_made_cannot_hang_the_audit_after_it`) |
//! | the live view of a command's refusals ([`Between::live`], a session's `refused` events) | their rate and number (the command sets both), a reader that stops reading | offered on the broker's thread with `try_lock` (never waits: a refusal that finds the reader holding the lock is only missing from the live view; the log keeps it), at most [`Between::LIVE_CAP`] kept per command, the rest counted; reset when the command is closed | `tests/tests/it/session_refused.rs` (an event before the exit, none for the allowed twin; 10,000 refusals give at most the cap, counted in full; root and nobody, both launch modes) |
//!
//! [`sandbox-landlock`]: https://docs.rs/sandbox-landlock
//!
//! # Wiring it into a backend
//! 1. Runner, before spawning: [`BrokerRules::new`] (it takes the policy's
//!    `allow_unix_sockets`; [`BrokerRules::with_allow_unix`] adds others,
//!    [`BrokerRules::with_allow_net`] sets egress rules) and
//!    [`listener_channel`].
//! 2. Filter: `sandbox-seccomp`'s, compiled with
//!    [`FilterSpec::broker`](sandbox_seccomp::FilterSpec::broker) set only
//!    when a broker serves the run (without a listener
//!    `SECCOMP_RET_USER_NOTIF` fails with `ENOSYS`); its table routes the
//!    calls each handler takes (see above).
//! 3. Child, in the pre-exec hook after `NO_NEW_PRIVS` and Landlock: install the
//!    filter with
//!    [`install_filter_with_listener`](sandbox_seccomp::listener::install_filter_with_listener)
//!    (or `_checked`, after [`FixedCredentials::verify_in_child`]) on the child end of the
//!    channel (the socket must still be open there: do not close it with the
//!    other inherited fds before the hook runs).
//! 4. Runner: [`Broker::start`] once the listener is received (after spawn,
//!    with the child end dropped: [`recv_fd`]), or, before spawning,
//!    [`Broker::start_receiving`], whose thread receives it itself while the
//!    child execs ([`PendingBroker::ready`] after the spawn). Either from a
//!    thread with the credentials the broker should have: its thread
//!    inherits them. Confined calls made before the broker serves simply wait.
//! 5. After the process tree ended: [`Broker::finish`]; its refusals are the
//!    denial evidence for the outcome record ([`BrokerLog::explain`] for humans).
//!
//! Requires Linux >= 5.9 (`pidfd_getfd`, `openat2`, user notification with
//! `ID_VALID`); `fchmodat2` routing needs nothing more, kernels without it never
//! issue it.
#![warn(missing_docs)]
#![warn(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

mod log;

pub use log::{BrokerDecision, BrokerLog, BrokerRecord, BrokerTarget, CredentialChange, Refusal};
// The egress rule types live in `sandbox-core` (the proxy and the policy use
// them too); `sandbox_broker::NetRule` stays what it was.
pub use sandbox_core::net::{NetRule, NetRuleError};

#[cfg(target_os = "linux")]
mod answer;
#[cfg(target_os = "linux")]
mod broker;
#[cfg(target_os = "linux")]
mod budget;
#[cfg(target_os = "linux")]
mod caller;
#[cfg(target_os = "linux")]
mod connect;
#[cfg(target_os = "linux")]
mod creds;
#[cfg(target_os = "linux")]
mod entries;
#[cfg(target_os = "linux")]
mod error;
#[cfg(target_os = "linux")]
mod fdpass;
#[cfg(target_os = "linux")]
mod fifo;
#[cfg(target_os = "linux")]
mod gitdirs;
#[cfg(target_os = "linux")]
mod identity;
#[cfg(target_os = "linux")]
mod listeners;
#[cfg(target_os = "linux")]
mod notif;
#[cfg(target_os = "linux")]
mod ops;
#[cfg(target_os = "linux")]
mod pool;
#[cfg(target_os = "linux")]
mod reads;
#[cfg(target_os = "linux")]
mod resolve;
#[cfg(target_os = "linux")]
mod samecpu;
#[cfg(target_os = "linux")]
mod shm;
#[cfg(target_os = "linux")]
mod syscalls;
#[cfg(target_os = "linux")]
mod umasks;

#[cfg(target_os = "linux")]
pub use broker::{Between, Broker, PendingBroker};
#[cfg(target_os = "linux")]
pub use budget::RunBudget;
#[cfg(target_os = "linux")]
pub use creds::FixedCredentials;
#[cfg(target_os = "linux")]
pub use error::BrokerError;
#[cfg(target_os = "linux")]
pub use fdpass::{listener_channel, recv_fd, recv_listener};
#[cfg(target_os = "linux")]
pub use resolve::BrokerRules;
