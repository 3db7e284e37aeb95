//! Broker for a confined process's filesystem writes that Landlock cannot
//! govern alone: it performs chmod, chown, xattr, timestamp and truncate
//! requests, but only on objects beneath a write path; when the policy has
//! read-deny paths, its xattr reads, refusing those of objects beneath a
//! read-deny path; and when a deny path lies beneath a write path, its
//! writing opens and directory-entry calls, refusing those that would write
//! into a denied path (see [below](#writing-opens-and-entry-calls)); and
//! with network on, every `connect`, so that a pathname UNIX socket is
//! reached only beneath a write path or when allowed (see [below](#connect)).
//!
//! The seccomp filter routes these syscalls to a seccomp user-notification
//! listener: [`brokered_syscalls`] always, [`brokered_truncate_syscalls`]
//! when Landlock lacks the truncate right, [`brokered_xattr_read_syscalls`]
//! when the policy has read-deny paths, [`brokered_entry_syscalls`] when a
//! deny path lies beneath a write path, [`brokered_connect_syscalls`] when
//! network is on. The [`Broker`] serves that listener
//! on a thread of the runner, which a backend starts from inside the run's
//! own Landlock domain (see [below](#the-brokers-own-domain)). For every request (`connect`: see
//! [below](#connect)) it
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
//!    ([`brokered_umask_syscalls`]), which the broker only notes, to know
//!    when the umasks it keeps under fixed credentials change; and the calls
//!    that name another process by pid or tid ([`brokered_process_syscalls`]:
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
//! connects under way at once, see [below](#connect)); a
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
//! returns 0 without a look at the path (fs/utimes.c). `tests/tests/fidelity.rs`
//! in the workspace holds this: one syscall matrix run bare, under `-w`,
//! under `-w` with a deny path and under workspace-write, compared call by
//! call, as root and as an unprivileged user; `tests/tests/real_tools.rs`
//! runs npm, make install, cp -a, git worktree and submodule, a venv and cargo
//! both ways.
//!
//! # Writing opens and entry calls
//! With a deny path beneath a write path, Landlock grants the write path
//! whole and the filter routes [`brokered_entry_syscalls`] here (opens only
//! when they can write: access mode not `O_RDONLY`, or `O_CREAT`, `O_TRUNC`,
//! `__O_TMPFILE`). The broker performs each call itself:
//!
//! * **open, openat, creat**: flags as the kernel keeps them (unknown bits
//!   dropped; `O_CREAT | O_DIRECTORY` and a malformed `O_TMPFILE` are `EINVAL`).
//!   Refused: access mode 3, `O_TRUNC` without write access, `S_ISUID`/`S_ISGID`
//!   in a creation mode, and `O_PATH` with other bits (an `O_PATH` fd cannot be
//!   handed over). An existing object (its last symlink followed unless
//!   `O_NOFOLLOW` or `O_CREAT | O_EXCL`) is admitted as a change when the open
//!   can write, else as a read, and opened again through `/proc/self/fd` with
//!   the caller's flags, so the kernel's permission checks and `O_TRUNC` apply.
//!   A missing one with `O_CREAT` is created on its admitted parent, with
//!   `O_NOFOLLOW`; through a dangling symlink, as the kernel, the link's
//!   target is created, resolved from the link's directory and admitted like
//!   any new name (up to 40 links). `O_TMPFILE` needs an
//!   admitted directory that is not denied. `/dev/null` and `/dev/zero` are
//!   always writable. A path to the caller's own fd N (`/proc/self/fd/N`,
//!   `/proc/thread-self/fd/N`, `/proc/TID/fd/N`, `/dev/stdin`, `/dev/stdout`,
//!   `/dev/stderr`, `/dev/fd/N`) reopens that fd when it is open for writing
//!   (and for reading, if asked) or is an anonymous pipe, since that grants
//!   nothing new; otherwise its object goes through the rules above.
//! * **Entries** (the last component of the path): the directory part is
//!   resolved as the kernel does (symlinks followed) and admitted beneath a
//!   directory write path; the call is then made on that directory's fd with
//!   the final name, which is never followed. `.`, `..`, `/` and trailing
//!   slashes get the kernel's answers. No entry may be *denied*; the calls
//!   that remove, move or replace one (`unlink`, `rmdir`, `rename`) and those
//!   that put a link there (`symlink`, `link`) also refuse an ancestor of a
//!   deny path ([`Refusal::AncestorOfDenyPath`]): moving `W/.git` would move
//!   `W/.git/hooks`, a symlink at `W/.git` would redirect it. `mkdir` of an
//!   ancestor is fine: what is made inside it is checked in turn.
//! * **link** also needs its source beneath a write path and not denied (a
//!   new name for a denied file would make it writable; one for a file
//!   outside would make that file writable), or the caller's own fd open for
//!   writing (`AT_EMPTY_PATH`, `/proc/self/fd/N`: an `O_TMPFILE` given a name).
//!   **mknod** refuses set-id bits.
//!
//! The caller's umask applies (the broker thread has a filesystem context of
//! its own, `unshare(CLONE_FS)`, and takes on the caller's umask). The broker
//! thread never waits on an open: it opens with `O_NONBLOCK` (cleared again
//! unless the caller asked for it) and `O_NOCTTY`. A FIFO opened for writing
//! without `O_NONBLOCK` that has no reader yet waits as the kernel's open
//! would (fifo(7)), in a pool worker (the connects' workers, at most 64 at
//! once): it tries again without blocking, every 1 to 20 ms, until a reader
//! comes, the caller stops waiting (a signal, its death) or the broker stops.
//! A reader that opens and closes the FIFO between two tries is missed (the
//! kernel would have woken the writer); the writer then waits for the next.
//! An existing file opened with `O_NOFOLLOW` is reopened through
//! `/proc/self/fd`, which cannot take that flag: its `F_GETFL` lacks it. Filters are installed with
//! `SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV` (Linux 5.19), so once the broker
//! has a call only a fatal signal ends the caller's wait: a performed call is
//! never reported as interrupted and restarted (a second `mkdir` would fail).
//!
//! # Connect
//! With network on, a confined command could `connect` to any pathname UNIX
//! socket it can see: `/run/docker.sock` (root on the host), systemd's
//! private socket, D-Bus, an ssh-agent. Landlock cannot restrict pathname
//! UNIX connects, and a seccomp filter cannot see the address (it is behind a
//! pointer) nor the socket's family, so the filter routes every `connect` here
//! ([`brokered_connect_syscalls`]). The broker never answers it with
//! `SECCOMP_USER_NOTIF_FLAG_CONTINUE`: between its check and the kernel's
//! second read the caller could rewrite the address, or `dup2` another
//! socket over the fd. It performs the connect itself, on the caller's own
//! socket: `pidfd_getfd` gives a duplicate of the same open file
//! description, so connecting it connects the caller's socket.
//!
//! 1. The address is read once (at most `sizeof(struct sockaddr_storage)`;
//!    a larger or negative `addrlen` is `EINVAL`, an unreadable one `EFAULT`),
//!    and the fd is taken (`EBADF` when it is none, or an `O_PATH` one;
//!    `ENOTSOCK` when it is no socket), in the kernel's order.
//! 2. The decision rests on the socket object (`SO_DOMAIN` of the broker's
//!    duplicate) and on the bytes read, never on memory read again:
//!    * an **`AF_UNIX` socket** with a pathname (`sun_path[0] != 0`; the path
//!      ends at its first NUL or at `addrlen`, as in the kernel): the path is
//!      resolved as the caller would (relative to its cwd, symlinks followed,
//!      with its credentials; no magic links, nothing on procfs, except the
//!      caller's own `/proc/self/fd/N`) to an `O_PATH` fd on the socket
//!      inode. Admitted when its canonical path equals an allowed UNIX socket
//!      (the policy's `allow_unix_sockets`, and those added with
//!      [`BrokerRules::with_allow_unix`]) or lies beneath a write path and
//!      not beneath a deny path (reached again beneath the write path, as a
//!      change is). The socket is then connected to `/proc/self/fd/N` of that
//!      fd, so the kernel reaches exactly the inode checked, and with the
//!      caller's credentials, so its write-permission check on the socket
//!      applies. Refused with `EACCES` otherwise
//!      ([`Refusal::UnixSocketNotAllowed`], or the deny path's refusal), the
//!      canonical path recorded. A path that does not resolve gets the
//!      kernel's errno (`ENOENT`, `ENOTDIR`, `EACCES`); one that is not a
//!      socket `ECONNREFUSED`, from the kernel's own connect;
//!    * an **abstract address** (`sun_path[0] == 0`) is refused with `EPERM`
//!      ([`Refusal::AbstractUnixSocket`]): the broker's domain is not the
//!      caller's (it is the one above it), so connecting for the caller could
//!      pass Landlock's abstract-socket scoping, and an abstract name has no inode
//!      to hold against the write paths (any host abstract socket, an X
//!      server's `@/tmp/.X11-unix/X0`, a `unix:abstract=` D-Bus, would be
//!      reachable). Abstract sockets between processes of the sandbox are rare;
//!      they are refused too;
//!    * an `AF_UNIX` address the kernel looks nothing up for (`AF_UNSPEC`,
//!      which dissolves a datagram socket's association; a wrong family or
//!      length, `EINVAL`) is passed to the kernel as read;
//!    * **any other socket domain** (`AF_INET`, `AF_INET6`, netlink, ...):
//!      network is on, so the connect is performed with the bytes read,
//!      unchanged; the kernel reads them for the socket's own family (a UNIX
//!      address on a TCP socket is `EAFNOSUPPORT`, never a path lookup). The
//!      broker's domain is the run's, which loses nothing
//!      here: with network on the sandbox handles no Landlock network right
//!      (`LANDLOCK_ACCESS_NET_CONNECT_TCP` only with network off, when
//!      `connect` is denied by the filter and never reaches the broker).
//!    * **egress rules** ([`BrokerRules::with_allow_net`], [`NetRule`]): when
//!      set, an IP socket is connected only to a destination a rule admits
//!      (read by the family in the bytes: an `AF_INET6` datagram socket takes
//!      an `AF_INET` address; IPv4-mapped IPv6 is the IPv4 address it
//!      reaches); `0.0.0.0`, loopback, private, link-local and the other
//!      special ranges only by a rule that lies within them (`0.0.0.0/0` does
//!      not admit `127.0.0.1`); `AF_UNSPEC` always. Everything else, a
//!      malformed address and sockets of a family other than IP, UNIX and
//!      netlink included, is refused with `ECONNREFUSED`
//!      ([`Refusal::NetNotAllowed`], recorded with `host:port`).
//! 3. The connect runs on a worker thread (at most 64 under way; beyond
//!    that `EAGAIN`, [`Refusal::TooManyConnects`]), so that one that waits
//!    never holds up the broker thread, which keeps serving the caller's other
//!    requests. The worker takes on the caller's credentials (netlink's
//!    `CAP_NET_ADMIN` checks, the socket inode's permission), connects, gives
//!    them back, checks `ID_VALID` and answers. Every connect runs there, not
//!    only those of blocking files: a caller could clear `O_NONBLOCK` between
//!    the broker's look at the flags and the call. The kernel applies the
//!    file's `O_NONBLOCK` itself: a non-blocking connect answers at once
//!    (`EINPROGRESS`, `EAGAIN` for a full UNIX backlog). A blocking UNIX-stream
//!    or TCP connect waits as the kernel's would, up to the socket's
//!    `SO_SNDTIMEO` (then `EAGAIN`, or `EINPROGRESS` for TCP), but in slices
//!    of 100 ms (the socket's timeout is set to the slice for each call and
//!    put back right after), so that a worker notices a caller that no longer
//!    waits and never outlives the run for long. Errors (`ECONNREFUSED`,
//!    `ETIMEDOUT`, `EISCONN`, ...) are the kernel's.
//! 4. Every answer is recorded with the address as written (a path,
//!    `@name`, `ip:port`, `[ip6]:port`) and, for a pathname, the canonical
//!    path: [`Decision::Performed`] when connected, [`Decision::Failed`] with
//!    the kernel's errno (`EINPROGRESS` included), [`Decision::Refused`].
//!
//! # The broker's own domain
//! A deputy must do no more than the sandbox lets the command do. The
//! Landlock backend ([`sandbox-landlock`]) therefore starts the broker from
//! a thread that has entered the run's own Landlock domain (the same ruleset
//! as the command's: the write paths whole, reads, `IOCTL_DEV` only where the
//! run grants it) and spawns the command from that thread, so the command's
//! domain is nested beneath the broker's. The broker's threads inherit it
//! (a thread's Landlock domain is part of its credentials, copied by
//! `clone`). The kernel then holds the broker to the sandbox's Landlock
//! layer, whatever its own checks miss:
//!
//! * a hard link or rename that would give a file more rights than it has
//!   where it lies (a handed fd's file from outside the write paths given a
//!   name inside) fails with `EXDEV`, as the command's own would
//!   (Documentation/userspace-api/landlock.rst, "Filesystem flags",
//!   `LANDLOCK_ACCESS_FS_REFER`; before ABI 2 every cross-directory link);
//! * an fd the broker opens carries only the rights the run's domain grants
//!   on its path: no device ioctls on a terminal outside the write paths
//!   (`LANDLOCK_ACCESS_FS_IOCTL_DEV`, ABI 5), no write outside them;
//! * the broker can still reach the command: Landlock lets a thread trace
//!   (and so `process_vm_readv`, `pidfd_getfd`) only processes in its own
//!   domain or one nested beneath it ("Ptrace restrictions"), which the
//!   command's is; the command cannot signal the broker's threads (ABI 6
//!   signal scoping: the broker's domain is not beneath the command's).
//!
//! The broker's own checks (deny paths, set-id bits, ownership) stay as the
//! second layer. What the kernel resolves per process is answered as the
//! caller's: `/dev/tty` (character device 5:0, under any name) is opened only
//! when the caller's controlling terminal (`tty_nr` in `/proc/TID/stat`) is
//! the runner's, `ENXIO` when it has none, refused
//! ([`Refusal::ForeignTerminal`]) otherwise; `/proc/self`, `/dev/fd/N`,
//! `/dev/std*` and the cwd are the caller's (see [Known limits](#known-limits)).
//! A domain the command adds beneath its own cannot narrow what the broker
//! performs, so the filter refuses nested Landlock while a broker serves the
//! run (`landlock_create_ruleset` answers `EOPNOTSUPP`).
//!
//! # Threat table
//! The caller controls its memory (every pointer argument, rewritten at
//! will by other threads), its fds and cwd, its thread ids, timing, and its
//! own further restrictions. Each entry point, what it takes from the caller,
//! and the tests that attack it:
//!
//! | entry point | caller controls | attacked by |
//! |---|---|---|
//! | notification receive / answer | tid, syscall nr, args; can die or be replaced mid-call | `tests/robustness.rs`, `tests/race.rs` (`ID_VALID` before every answer) |
//! | argument reads (`process_vm_readv`) | path and buffer bytes, rewritten concurrently | `tests/race.rs`, `tests/entry_race.rs`, `tests/connect_race.rs` |
//! | path resolution (cwd, dirfd, `/proc/self/fd/N`, `/dev/tty`) | symlinks swapped during the walk, deleted cwd, magic links | `tests/decisions.rs`, `tests/entries.rs`, `tests/read_deny.rs`, end-to-end `tests/tests/broker_domain.rs` |
//! | metadata changes (chmod, chown, xattr, utimes, truncate) | target, mode bits, owner, xattr names and values | `tests/decisions.rs`, `tests/credentials.rs`, `tests/xattr_reads.rs` |
//! | writing opens and entry calls | flags, modes, both paths of link/rename, handed fds | `tests/entry_calls.rs`, `tests/entries.rs`, `tests/fdpass.rs`, end-to-end `broker_domain.rs` (handed-fd link, device ioctls) |
//! | connect | address bytes, socket fd swapped by `dup2`, blocking | `tests/connect.rs`, `tests/connect_race.rs`, `tests/connect_net.rs` |
//! | caller credentials and umask | ids, groups, capabilities, umask per thread | `tests/credentials.rs`, `sandbox-landlock/tests/umask_threads.rs` |
//! | calls on another process (`prlimit64`, `sched_set*`, `setpriority`, `ioprio_set`) | the target pid or tid, which may exit and be reused | end-to-end `tests/tests/real_tools.rs` (`a_process_outside_the_run_is_never_reniced_or_limited` beside the run's own) |
//! | kernel-first errors | names that exist, are missing, have trailing slashes, loop | end-to-end `tests/tests/fidelity.rs` (the matrix against bare and against Landlock's own answers) |
//! | broker resources | request rate, concurrent connects, fds it holds | `tests/fd_leak.rs`, `tests/cost.rs`, `tests/robustness.rs` |
//! | its own domain | a nested Landlock domain, signals to the runner's threads, core dumps | end-to-end `broker_domain.rs` (nested domain, core dumps), `sandbox-landlock/tests/process.rs` |
//!
//! [`sandbox-landlock`]: https://docs.rs/sandbox-landlock
//!
//! # Acting with the caller's credentials
//! The runner may be root with every capability; the caller may be root with
//! every capability dropped. The kernel's permission rules depend on who acts
//! (e.g. truncating a set-user-ID file clears `S_ISUID` only when the actor
//! lacks `CAP_FSETID`), so for the walk and the operation the broker thread takes
//! on the caller's filesystem uid and gid, its supplementary groups, and the
//! effective capabilities the broker's own effective set shares with the
//! caller's `CapEff` (none when the caller is in another user namespace: those
//! capabilities do not reach the broker's objects). Then it restores its own.
//!
//! * Credentials change per thread only with the raw syscalls (`setgroups`,
//!   `setfsgid`, `setfsuid`, `capset` with pid 0); glibc's wrappers broadcast to
//!   every thread of the process and are not used. The order is groups (while
//!   `CAP_SETGID` is effective), fsgid, fsuid, then the lower effective set
//!   (the permitted set stays, so it can be raised again); the way back is the
//!   reverse, the effective set written again last, because the kernel raises the
//!   filesystem capabilities when the fsuid returns to 0 (capabilities(7),
//!   "Effect of user ID changes on capabilities"). Every change is read back.
//! * Only what differs from the broker thread's own credentials (read when it
//!   starts) is changed: an unprivileged runner serving a caller of its own uid
//!   changes nothing and needs no `CAP_SETGID`.
//! * A needed change that fails refuses the request
//!   ([`Refusal::CallerCredentials`], naming the [`CredentialChange`]): the broker
//!   never acts with more than the caller has. If the thread cannot get its own
//!   credentials back, the broker stops ([`BrokerLog::stopped_by_error`]); later
//!   calls then fail.
//! * The runner must not change its own credentials while a broker runs (a glibc
//!   `set*id` broadcast would reach the broker thread too).
//!
//! # The broker's own rules
//! A first layer, checked before the kernel's (which still apply, see above);
//! they never grant more than an unprivileged owner has:
//! * **chmod**: the caller owns the file (fsuid) or holds `CAP_FOWNER`. Adding
//!   `S_ISUID` or `S_ISGID` is always refused, also for root callers: a confined
//!   process must not create set-id binaries, even inside write paths. Bits the
//!   file already has may stay.
//! * **chown**: the owner stays, or becomes the caller's euid when the caller
//!   holds `CAP_CHOWN` (giving a file to another user is refused). The group may
//!   change to the caller's fsgid or a supplementary group, by the owner or a
//!   `CAP_CHOWN` holder. The kernel clears set-id bits on chown as usual.
//! * **xattr changes**: the `user.` namespace, with write permission on the
//!   file, and the POSIX ACLs (`system.posix_acl_access`,
//!   `system.posix_acl_default`), with the kernel's owner check (they grant
//!   nothing `chmod` could not; `cp -p`, `cp -a` and `install` write them).
//!   Never `security.` (whose `security.capability` would grant file
//!   capabilities), `trusted.` or other `system.` names.
//! * **timestamps**: explicit times need ownership or `CAP_FOWNER`; "now" also
//!   accepts write permission, as in the kernel.
//! * **truncate**: regular files with write permission.
//! * **xattr reads**: no rule of the broker's own beyond the read-deny paths;
//!   the kernel's apply (read permission for `user.`, `CAP_SYS_ADMIN` for
//!   `trusted.`, which `listxattr` also leaves out without it).
//!
//! Write permission in these rules is the classic mode-bit check with the
//! caller's fsuid, groups and `CAP_DAC_OVERRIDE`; ACLs that grant more are not
//! honoured by this layer.
//!
//! # Xattr reads
//! `getxattr`, `lgetxattr`, `fgetxattr`, `listxattr`, `llistxattr` and
//! `flistxattr` are answered as the kernel answers them: size 0 returns the
//! length needed without writing; a buffer too small gets `ERANGE`; a name
//! longer than 255 bytes or empty gets `ERANGE`; sizes above 65536
//! (`XATTR_SIZE_MAX`, `XATTR_LIST_MAX`) are clamped; an unwritable buffer gets
//! `EFAULT`. The answer carries the length ([`Decision::Read`]).
//!
//! # Known limits
//! * `/proc/self/fd/N` (also `thread-self` and the caller's own tid, and
//!   `/dev/stdin`, `/dev/stdout`, `/dev/stderr`, `/dev/fd/N` when they are the
//!   usual symlinks to it) is taken as the caller's fd N and checked like an
//!   fd-based call; every other path through `/proc` is refused, for reads too. Unlinked files (`(deleted)`),
//!   pipes, sockets and memfds are refused for fd-based calls, reads included:
//!   without a path the broker cannot tell whether they lie beneath a deny path.
//! * The proof that a changed object lies beneath its write path (the second
//!   walk, from the write path's fd) also runs with the caller's credentials: an
//!   fd-based change of a file below a directory the caller may not search is
//!   refused (`Unresolvable`, `EACCES`), where the kernel would perform it.
//!   Narrower, never wider.
//! * A hard link inside a write path to a file outside, or outside a read-deny
//!   path to a file inside, is indistinguishable from any other file (as for
//!   Landlock's own rights), unless the file is itself a deny path that existed
//!   when the rules were made. A deny path created later is recognised by name
//!   only (case-blind).
//! * Case-blind comparison refuses a little more on case-sensitive filesystems
//!   (`W/.GIT` when `W/.git` is denied); never less.
//! * Because the broker never waits: a write-only open of a FIFO without a
//!   reader gets `ENXIO` (the kernel would wait for one), an open that would
//!   have to break a lease gets `EWOULDBLOCK`, and opening a terminal never
//!   makes it the caller's controlling terminal.
//! * The reopen of an existing object carries no `O_CREAT`, so
//!   `fs.protected_regular` and `fs.protected_fifos` (which refuse `O_CREAT`
//!   opens of someone else's file in a sticky world-writable directory) do not
//!   apply to it.
//! * A file the broker opens for the caller records the broker thread as its
//!   opener (`f_cred`: the runner's euid, the caller's fsuid, groups and
//!   capabilities). Files that check the opener on write (procfs, sysfs,
//!   cgroupfs) lie outside every write path, and a caller's fd on one is not
//!   reopened directly.
//! * Without `WAIT_KILLABLE_RECV` (kernels before 5.19) a signal during a
//!   brokered call can make a performed call fail when restarted.
//! * Copying a read's bytes into the caller's memory is guarded by `ID_VALID`
//!   right before `process_vm_writev`, which addresses the thread by id: a caller
//!   killed in between would need its id reused by another process first, which
//!   takes the whole pid space to cycle.
//! * **Connect.** The listener of a connected UNIX socket sees the connecting
//!   thread, a worker of the runner, as its peer (`SO_PEERCRED`: the runner's
//!   pid, the runner's euid and egid; `SO_PEERGROUPS` are the caller's; LSM
//!   checks of the connect see the runner's context): a server that judges
//!   its client by pid judges the runner. Only sockets beneath the write paths
//!   and allowed ones are reached at all.
//! * A blocking connect waiting in the broker ends only with its result or a
//!   fatal signal: a caught signal no longer interrupts it with `EINTR`
//!   (`WAIT_KILLABLE_RECV`).
//! * While a blocking UNIX-stream or TCP connect waits, the socket's
//!   `SO_SNDTIMEO` reads as the slice (at most 100 ms) for the caller's
//!   other threads. A negative `SO_SNDTIMEO`, which the kernel keeps as "do
//!   not wait" and reports as 0 like "no timeout", is put back as "no timeout".
//! * A connect of another protocol that waits (SCTP, vsock, ...) is one call
//!   on its worker; when the run ends first, [`Broker::finish`] waits for it
//!   300 ms and then leaves it to end on its own.
//! * Datagrams: `sendto`/`sendmsg` with an address are not brokered; the
//!   filter refuses `AF_UNIX` datagram sockets and socketpairs, so no
//!   addressed datagram reaches a host socket. A datagram socket's
//!   `connect` is checked like any other.
//! * Egress rules govern `connect` only. An addressed `sendto`/`sendmsg`
//!   (UDP, TCP `MSG_FASTOPEN`) and SCTP's `sctp_connectx` (a socket option)
//!   reach a destination without one: a policy with egress rules needs the
//!   filter to refuse those (a `NULL` destination and no `MSG_FASTOPEN`, as
//!   with network off). Name resolution needs its resolver listed (often a
//!   loopback address, `127.0.0.53:53`). Destinations are addresses, not
//!   names; a NAT64 (`64:ff9b::/96`) or 6to4 prefix reaches IPv4 hosts
//!   through a gateway and is matched as the IPv6 address it is.
//! * Taking the caller's socket with `pidfd_getfd` sets its cgroup-v1
//!   `net_cls` class id and `net_prio` index to the runner's
//!   (`__receive_sock`); cgroup v2 has neither.
//! * Without a pidfd for the calling thread (`PIDFD_THREAD`, Linux 6.9, for a
//!   thread that does not lead its group) there is no duplicate of its
//!   socket: the connect is refused ([`Refusal::UnreadableCaller`], `ENOSYS`).
//! * The runner needs ptrace-level access to the confined process
//!   (`process_vm_readv`/`writev`, `pidfd_getfd`): its parent or root, and Yama
//!   `ptrace_scope` below 2.
//!
//! # Wiring it into a backend
//! 1. Runner, before spawning: [`BrokerRules::new`] (it takes the policy's
//!    `allow_unix_sockets`; [`BrokerRules::with_allow_unix`] adds others,
//!    [`BrokerRules::with_allow_net`] sets egress rules) and
//!    [`listener_channel`].
//! 2. Filter: route [`brokered_syscalls`] (and [`brokered_truncate_syscalls`]
//!    when Landlock lacks the truncate right, [`brokered_xattr_read_syscalls`]
//!    when the policy has read-deny paths, [`brokered_entry_syscalls`], opens
//!    only when they can write, when a deny path lies beneath a write path;
//!    `openat2` then answered `ENOSYS`; [`brokered_connect_syscalls`] when
//!    network is on) to `SECCOMP_RET_USER_NOTIF`, only
//!    when a broker serves the run: without a listener that action fails with
//!    `ENOSYS`.
//! 3. Child, in the pre-exec hook after `NO_NEW_PRIVS` and Landlock: install the
//!    filter with [`install_filter_with_listener`] on the child end of the
//!    channel (the socket must still be open there: do not close it with the
//!    other inherited fds before the hook runs).
//! 4. Runner, after spawn: drop the child end, [`recv_fd`] the listener,
//!    [`Broker::start`] (from a thread with the credentials the broker should
//!    have: its thread inherits them). Confined calls made before that simply wait.
//! 5. After the process tree ended: [`Broker::finish`]; its refusals are the
//!    denial evidence for the outcome record ([`BrokerLog::explain`] for humans).
//!
//! Requires Linux >= 5.9 (`pidfd_getfd`, `openat2`, user notification with
//! `ID_VALID`); `fchmodat2` routing needs nothing more, kernels without it never
//! issue it.
#![warn(missing_docs)]
#![warn(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

mod log;

pub use log::{BrokerLog, BrokerRecord, CredentialChange, Decision, Refusal, Target};
// The egress rule types live in `sandbox-core` (the proxy and the policy use
// them too); `sandbox_broker::NetRule` stays what it was.
pub use sandbox_core::net::{NetRule, NetRuleError};

#[cfg(target_os = "linux")]
mod answer;
#[cfg(target_os = "linux")]
mod broker;
#[cfg(target_os = "linux")]
mod caller;
#[cfg(target_os = "linux")]
pub mod caps;
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
mod identity;
#[cfg(target_os = "linux")]
mod notif;
#[cfg(target_os = "linux")]
mod ops;
#[cfg(target_os = "linux")]
mod pool;
#[cfg(target_os = "linux")]
mod resolve;
#[cfg(target_os = "linux")]
mod samecpu;
#[cfg(target_os = "linux")]
mod syscalls;
#[cfg(target_os = "linux")]
mod umasks;

#[cfg(target_os = "linux")]
pub use broker::Broker;
#[cfg(target_os = "linux")]
pub use creds::FixedCredentials;
#[cfg(target_os = "linux")]
pub use error::BrokerError;
#[cfg(target_os = "linux")]
pub use fdpass::{
    install_filter_with_listener, install_filter_with_listener_checked, listener_channel, recv_fd,
    recv_listener, send_fd,
};
#[cfg(target_os = "linux")]
pub use resolve::BrokerRules;
#[cfg(target_os = "linux")]
pub use syscalls::{
    brokered_connect_syscalls, brokered_entry_syscalls, brokered_listen_syscalls,
    brokered_process_syscalls, brokered_syscalls, brokered_truncate_syscalls,
    brokered_umask_syscalls, brokered_xattr_read_syscalls,
};
