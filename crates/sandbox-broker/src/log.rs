//! What the broker answered, for the outcome record and `--explain`.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Every request the broker answered, in the order answered (a connect is
/// answered by a worker thread: its record may follow later requests').
///
/// Refusals and the other answers are kept within caps of their own, so no
/// flood of performed calls can push a refusal out of the record (red-team
/// R6b F4: 4200 performed chmods left a later refusal only counted, and the
/// failed run read as the command's own failure): at most
/// [`BrokerLog::MAX_REFUSALS`] refusals and [`BrokerLog::MAX_RECORDS`]
/// other answers are kept; those past a cap are counted, refusals apart
/// ([`BrokerLog::refusals_omitted`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerLog {
    /// The recorded requests, in the order answered: at most
    /// [`BrokerLog::MAX_REFUSALS`] refusals and [`BrokerLog::MAX_RECORDS`]
    /// other answers.
    pub records: Vec<BrokerRecord>,
    /// Answers other than refusals that were not recorded because their
    /// share of the log was full (only counted; of them,
    /// [`BrokerLog::performed_omitted`] were performed).
    pub omitted: u64,
    /// Refusals not recorded because their share of the log was full (only
    /// counted): the record says how many refusals it does not list.
    #[serde(default)]
    pub refusals_omitted: u64,
    /// Of [`BrokerLog::omitted`], the requests performed (those
    /// [`BrokerLog::performed`] would have listed).
    #[serde(default)]
    pub performed_omitted: u64,
    /// Set when the broker stopped early; says why.
    pub stopped_by_error: Option<String>,
    /// Git directories the run made (or made of a directory from before
    /// it), where they are when the broker stops; only under a policy that
    /// protects git directories.
    pub git_dirs_made: Vec<std::path::PathBuf>,
    /// How many more directories may have become repositories of the run's
    /// but cannot be named (moved after, or past what the broker keeps).
    pub git_dirs_unnamed: usize,
    /// Shared memory and semaphores the run made in `/dev/shm` and left
    /// there, removed when the broker stopped (`private_shm`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shm_removed: Vec<std::path::PathBuf>,
    /// Calls answered [`BrokerDecision::RunnerOutOfFds`] (those past
    /// [`BrokerLog::MAX_RECORDS`] included): the runner ran out of file
    /// descriptors serving them.
    #[serde(default)]
    pub runner_out_of_fds: u64,
    /// How many of `records` are refusals (the caps are per kind).
    #[serde(skip)]
    pub(crate) kept_refusals: usize,
}

impl BrokerLog {
    /// Answers other than refusals kept before further ones are only
    /// counted ([`BrokerLog::omitted`]).
    pub const MAX_RECORDS: usize = 4096;

    /// Refusals kept before further ones are only counted
    /// ([`BrokerLog::refusals_omitted`]), whatever else the log holds.
    pub const MAX_REFUSALS: usize = 4096;

    /// The refused requests.
    pub fn refusals(&self) -> impl Iterator<Item = &BrokerRecord> {
        self.records
            .iter()
            .filter(|r| matches!(r.decision, BrokerDecision::Refused { .. }))
    }

    /// The requests the broker performed successfully (metadata changes,
    /// xattr reads, entry calls and opens).
    pub fn performed(&self) -> impl Iterator<Item = &BrokerRecord> {
        self.records.iter().filter(|r| r.decision.is_performed())
    }

    /// How many requests the broker performed, those only counted
    /// ([`BrokerLog::performed_omitted`]) included.
    pub fn performed_count(&self) -> u64 {
        (self.performed().count() as u64).saturating_add(self.performed_omitted)
    }

    /// How many refusals the broker answered, those only counted
    /// ([`BrokerLog::refusals_omitted`]) included.
    pub fn refusals_count(&self) -> u64 {
        (self.refusals().count() as u64).saturating_add(self.refusals_omitted)
    }

    /// A short human summary for `--explain`: counts, then one line per refusal
    /// (at most `max_lines`).
    pub fn explain(&self, max_lines: usize) -> String {
        let refused: Vec<&BrokerRecord> = self.refusals().collect();
        let failed = self
            .records
            .iter()
            .filter(|r| {
                matches!(
                    r.decision,
                    BrokerDecision::Failed { .. } | BrokerDecision::RunnerOutOfFds { .. }
                )
            })
            .count();
        let mut cut = Vec::new();
        if self.refusals_omitted > 0 {
            cut.push(format!("{} refusals", self.refusals_omitted));
        }
        if self.omitted > 0 {
            cut.push(format!("{} other answers", self.omitted));
        }
        let cut = if cut.is_empty() {
            String::new()
        } else {
            format!(" ({} counted, not recorded)", cut.join(" and "))
        };
        let mut out = format!(
            "broker: {} performed, {} refused, {failed} failed{cut}\n",
            self.performed_count(),
            self.refusals_count(),
        );
        for r in refused.iter().take(max_lines) {
            out.push_str(&format!("  {r}\n"));
        }
        let more =
            (refused.len().saturating_sub(max_lines) as u64).saturating_add(self.refusals_omitted);
        if more > 0 {
            out.push_str(&format!("  ... {more} more refusals\n"));
        }
        out
    }

    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) fn push(&mut self, record: BrokerRecord) {
        if let BrokerDecision::RunnerOutOfFds { .. } = record.decision {
            self.runner_out_of_fds += 1;
        }
        self.keep(record);
    }

    /// Keeps `record` within its kind's cap, or counts it.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    fn keep(&mut self, record: BrokerRecord) {
        if let BrokerDecision::Refused { .. } = record.decision {
            if self.kept_refusals < Self::MAX_REFUSALS {
                self.kept_refusals += 1;
                self.records.push(record);
            } else {
                self.refusals_omitted += 1;
            }
        } else if self.records.len() - self.kept_refusals < Self::MAX_RECORDS {
            self.records.push(record);
        } else {
            self.omitted += 1;
            if record.decision.is_performed() {
                self.performed_omitted += 1;
            }
        }
    }

    /// Moves what `other` answered into this log (one command's answers
    /// handed over to the runner, [`crate::Between::take`]): its records
    /// within this log's caps (the rest counted), its counts added, its
    /// lists joined. `other` keeps only its error.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) fn absorb(&mut self, other: &mut BrokerLog) {
        for r in other.records.drain(..) {
            self.keep(r);
        }
        other.kept_refusals = 0;
        self.omitted += std::mem::take(&mut other.omitted);
        self.refusals_omitted += std::mem::take(&mut other.refusals_omitted);
        self.performed_omitted += std::mem::take(&mut other.performed_omitted);
        self.runner_out_of_fds += std::mem::take(&mut other.runner_out_of_fds);
        self.shm_removed.append(&mut other.shm_removed);
        self.git_dirs_made.append(&mut other.git_dirs_made);
        self.git_dirs_unnamed += std::mem::take(&mut other.git_dirs_unnamed);
    }
}

impl BrokerDecision {
    /// Admitted and performed: [`BrokerDecision::Performed`],
    /// [`BrokerDecision::Read`] or [`BrokerDecision::Opened`].
    pub fn is_performed(&self) -> bool {
        matches!(
            self,
            BrokerDecision::Performed | BrokerDecision::Read { .. } | BrokerDecision::Opened { .. }
        )
    }
}

/// One answered request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerRecord {
    /// Syscall name, e.g. `fchmodat`.
    pub syscall: String,
    /// Thread id of the caller (in the broker's pid namespace).
    pub pid: i32,
    /// What the caller named.
    pub target: BrokerTarget,
    /// What the broker did.
    pub decision: BrokerDecision,
}

impl std::fmt::Display for BrokerRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}(", self.syscall)?;
        match (&self.target.fd, &self.target.path) {
            (Some(fd), Some(p)) => write!(f, "fd {fd}, {p:?}")?,
            (Some(fd), None) => write!(f, "fd {fd}")?,
            (None, Some(p)) => write!(f, "{p:?}")?,
            (None, None) => {}
        }
        if let Some(to) = &self.target.to {
            write!(f, ", {to:?}")?;
        }
        f.write_str(")")?;
        if let Some(r) = &self.target.resolved {
            write!(f, " -> {}", r.display())?;
        }
        match &self.decision {
            BrokerDecision::Performed => f.write_str(": performed"),
            BrokerDecision::Read { len } => write!(f, ": read, {len} bytes"),
            BrokerDecision::Opened { fd } => write!(f, ": opened as fd {fd}"),
            BrokerDecision::Failed { errno } => write!(f, ": failed with errno {errno}"),
            BrokerDecision::RunnerOutOfFds { errno } => write!(
                f,
                ": failed with errno {errno}, the runner out of file descriptors"
            ),
            BrokerDecision::Refused { reason } => write!(f, ": refused, {reason}"),
            BrokerDecision::CallerGone => f.write_str(": caller gone"),
        }
    }
}

/// The object a request named, as the caller wrote it and as the broker resolved it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerTarget {
    /// Path argument as written by the caller (lossy UTF-8), if any.
    pub path: Option<String>,
    /// File descriptor argument (the fd itself or the dirfd), if any.
    pub fd: Option<i32>,
    /// The second path of `rename` and `link` (the new name), as written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// Canonical path of the resolved object, when resolution got that far.
    pub resolved: Option<PathBuf>,
}

/// The broker's answer to one request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum BrokerDecision {
    /// Admitted and performed; the caller got 0 (for `connect`: the socket is
    /// connected; a connect the kernel answered with an error, `EINPROGRESS`
    /// included, is [`BrokerDecision::Failed`]).
    Performed,
    /// An xattr read (`getxattr`, `listxattr` and their forms) was admitted and
    /// performed; the caller got `len` (the bytes copied into its buffer, or the
    /// size it would need when it passed size 0).
    Read {
        /// The value the call returned.
        len: u64,
    },
    /// An open was admitted and performed; the caller got the new fd `fd`
    /// (handed over with `SECCOMP_IOCTL_NOTIF_ADDFD`).
    Opened {
        /// The fd number in the caller.
        fd: i32,
    },
    /// Admitted or unresolvable, and the kernel returned this errno (e.g.
    /// `ENOENT` for a missing path); the caller got the same errno.
    Failed {
        /// The errno the caller received.
        errno: i32,
    },
    /// The runner could not serve the call, out of file descriptors
    /// (`EMFILE`, `ENFILE`) while reading the caller's arguments or
    /// identity (it opens the caller's memory, `/proc` entries or a
    /// duplicate of its socket for them); the caller got that errno. The
    /// runner's failure, not the policy's: no refusal, and counted in
    /// [`BrokerLog::runner_out_of_fds`] for the run's record.
    RunnerOutOfFds {
        /// The errno the caller received.
        errno: i32,
    },
    /// Refused by the broker's rules; the caller got `EPERM`, or `EACCES`
    /// (as from Landlock) for a writing open or entry call outside the write
    /// paths and for a refused connect to a pathname UNIX socket, `EAGAIN`
    /// for [`Refusal::TooManyConnects`].
    Refused {
        /// Why.
        reason: Refusal,
    },
    /// The caller died or its request became invalid before an answer.
    CallerGone,
}

/// Why the broker refused a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Refusal {
    /// The object does not lie beneath any write path.
    OutsideWritePaths,
    /// The object lies beneath a write-deny path.
    WriteDenyPath,
    /// The entry is an ancestor of a deny path: removing, moving or replacing
    /// it, or planting a link there, would move or replace the denied path.
    AncestorOfDenyPath,
    /// A hard link whose source lies outside the write paths.
    LinkFromOutside,
    /// A symlink made in (or moved or linked into) a git directory of the
    /// workspace: git writes through it at the user's next command.
    SymlinkInGitDir,
    /// A change to the config or hooks of a git directory that existed
    /// before the run (or to its `.git` file, or removing what makes it a
    /// git directory): git would run what is written there at the next
    /// unconfined git command.
    GitDirBeforeRun,
    /// `O_CREAT` through a symlink whose target does not exist. No longer
    /// given: the target is created when its place is admitted, as the
    /// kernel creates it, and refused like any new name otherwise.
    DanglingSymlink,
    /// The open's flags are refused: access mode 3 (ioctl-only), `O_TRUNC`
    /// without write access, or `O_PATH` with bits the kernel would ignore
    /// (an `O_PATH` fd cannot be handed over).
    OpenFlags,
    /// The object lies beneath a read-deny path (refused for metadata changes
    /// and for xattr reads alike).
    ReadDenyPath,
    /// A read of a file the run made (or moved) in a directory on the way
    /// to a read-deny path: Landlock's read rules there were made at launch,
    /// one per entry then present, so the new entry has none and Landlock
    /// refuses reading it (recorded when reads are observed).
    BesideReadDenyPath,
    /// The object has no reachable path (pipe, socket, memfd, unlinked file, or a
    /// path outside the broker's root).
    NoPath,
    /// The path could not be resolved safely (e.g. through a `/proc` magic link).
    Unresolvable {
        /// The errno of the failed resolution.
        errno: i32,
    },
    /// The path goes through `/proc`, whose `self` would name the broker, not the caller.
    ProcfsPath,
    /// The object moved while it was being checked (a concurrent rename or swap).
    Moved,
    /// chmod would add a set-user-ID or set-group-ID bit, or a creating call's
    /// mode has one.
    SetIdBits,
    /// The caller neither owns the object nor holds the capability that
    /// would let it. No longer given: that is the kernel's own check, and
    /// the call is [`BrokerDecision::Failed`] with the kernel's errno
    /// (`EPERM`, or `EACCES` where write permission would do), as
    /// unconfined; kept so older records still read.
    NotOwner,
    /// chown by a caller holding `CAP_CHOWN` would give the object to
    /// another user or to a group the caller is not in (without
    /// `CAP_CHOWN` the kernel's own `EPERM`, no refusal).
    OwnershipChange,
    /// The extended attribute is outside the `user.` namespace.
    XattrNamespace,
    /// The caller's arguments or identity could not be read (but for
    /// `EMFILE`/`ENFILE`, the runner out of descriptors: that call fails,
    /// [`BrokerDecision::RunnerOutOfFds`], and is no refusal).
    UnreadableCaller {
        /// The errno of the failed read.
        errno: i32,
    },
    /// The syscall is not one the broker handles (the filter routed it by mistake).
    UnknownSyscall {
        /// The syscall number.
        nr: i64,
    },
    /// `connect` to a pathname UNIX socket that lies outside every write path
    /// and is not an allowed UNIX socket (answered `EACCES`).
    UnixSocketNotAllowed,
    /// `connect` to an abstract UNIX socket address (answered `EPERM`): the
    /// broker's domain is not the caller's, so connecting for the caller
    /// could pass Landlock's abstract-socket scoping.
    AbstractUnixSocket,
    /// `connect` to an IP destination no egress rule admits, or, with egress
    /// rules set, of a socket that is neither IP, UNIX nor netlink (answered
    /// `ECONNREFUSED`; the address is in [`BrokerTarget::path`]).
    NetNotAllowed,
    /// `socket` of a kind the filter refuses under this policy (answered
    /// `EPERM`, as the filter does without a broker). With egress rules:
    /// anything but TCP, UNIX stream or seqpacket, `NETLINK_ROUTE` and the
    /// IP datagram sockets the run's datagram namespace makes (so raw and
    /// packet sockets, other families, and datagram sockets where no such
    /// namespace could be made). The call is in [`BrokerTarget::path`].
    SocketNotAllowed,
    /// `connect` while the broker already performs its maximum of concurrent
    /// connects (answered `EAGAIN`), so a caller cannot exhaust the runner's threads.
    TooManyConnects {
        /// The maximum.
        limit: usize,
    },
    /// The broker thread could not take on the caller's credentials (it would
    /// have acted with more than the caller has), e.g. an unprivileged runner
    /// without `CAP_SETGID` serving a caller with other groups.
    CallerCredentials {
        /// The change that failed.
        change: CredentialChange,
    },
    /// An open of `/dev/tty` for a caller whose controlling terminal is not
    /// the runner's: the broker's `/dev/tty` would be another terminal.
    ForeignTerminal,
    /// A connect under a policy without network (never performed).
    NetworkOff,
    /// A call naming another process (`prlimit64`, `sched_setaffinity`,
    /// `setpriority`, ...) whose target is not one of the run's processes
    /// (not in the caller's session; answered `EPERM`).
    ForeignProcess,
    /// `listen`, with egress rules set, on an IP socket not bound to a
    /// loopback address (answered `EPERM`): listening on another address, or
    /// on an unbound socket (which the kernel binds to every address), would
    /// let hosts outside the egress rules connect in.
    ListenNotLoopback,
}

/// One part of the caller's credentials the broker thread takes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum CredentialChange {
    /// The supplementary groups (`setgroups`, needs `CAP_SETGID`).
    Groups,
    /// The filesystem gid (`setfsgid`).
    Fsgid,
    /// The filesystem uid (`setfsuid`).
    Fsuid,
    /// The effective capabilities (`capset`).
    Capabilities,
}

impl std::fmt::Display for CredentialChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Groups => "supplementary groups",
            Self::Fsgid => "filesystem gid",
            Self::Fsuid => "filesystem uid",
            Self::Capabilities => "effective capabilities",
        })
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::OutsideWritePaths => f.write_str("outside the write paths"),
            Self::WriteDenyPath => f.write_str("beneath a write-deny path"),
            Self::AncestorOfDenyPath => f.write_str(
                "an ancestor of a deny path (removing, moving or replacing it, or a link in its place, would move the denied path)",
            ),
            Self::LinkFromOutside => {
                f.write_str("a hard link to a file outside the write paths")
            }
            Self::SymlinkInGitDir => f.write_str(
                "a symlink in a git directory (git would write through it at the next unconfined git command)",
            ),
            Self::GitDirBeforeRun => f.write_str(
                "beneath a write-deny path: the config or hooks of a git directory that existed before the run (git would run what is written there at the next unconfined git command)",
            ),
            Self::DanglingSymlink => {
                f.write_str("creating a file through a dangling symlink is refused")
            }
            Self::OpenFlags => {
                f.write_str("access mode 3, O_TRUNC without write access and O_PATH with write or create flags are refused")
            }
            Self::ReadDenyPath => f.write_str("beneath a read-deny path"),
            Self::BesideReadDenyPath => f.write_str(
                "beneath a read-deny path's directory: made there during the run, after Landlock's read rules (one per entry present at launch)",
            ),
            Self::NoPath => f.write_str("the object has no reachable path"),
            Self::Unresolvable { errno } => {
                write!(f, "the path could not be resolved safely (errno {errno})")
            }
            Self::ProcfsPath => f.write_str("paths through /proc are refused (use the fd itself)"),
            Self::Moved => f.write_str("the object moved while it was checked"),
            Self::SetIdBits => f.write_str("set-user-ID/set-group-ID bits are refused"),
            Self::NotOwner => f.write_str("the caller does not own the object"),
            Self::OwnershipChange => {
                f.write_str("ownership may only go to the caller or its groups")
            }
            Self::XattrNamespace => f.write_str("only user.* extended attributes are allowed"),
            Self::ForeignProcess => f.write_str("the target process is not one of this run's"),
            Self::UnreadableCaller { errno } => {
                write!(
                    f,
                    "the caller's arguments could not be read (errno {errno})"
                )
            }
            Self::UnknownSyscall { nr } => write!(f, "syscall {nr} is not brokered"),
            Self::NetworkOff => f.write_str("the policy allows no network"),
            Self::SocketNotAllowed => f.write_str(
                "the policy refuses sockets of this kind (with egress rules: all but TCP, UNIX stream or seqpacket, NETLINK_ROUTE, and UDP that reaches the runner's resolver only)",
            ),
            Self::ForeignTerminal => f.write_str(
                "/dev/tty would be the runner's terminal, not the caller's controlling terminal",
            ),
            Self::UnixSocketNotAllowed => f.write_str(
                "the UNIX socket lies outside the write paths and is not an allowed UNIX socket",
            ),
            Self::AbstractUnixSocket => f.write_str(
                "abstract UNIX socket addresses are refused (the broker would connect outside the caller's Landlock scope)",
            ),
            Self::NetNotAllowed => f.write_str("no egress rule admits this destination"),
            Self::ListenNotLoopback => f.write_str(
                "with egress rules, only a socket bound to a loopback address may listen",
            ),
            Self::TooManyConnects { limit } => write!(
                f,
                "the broker already performs {limit} connects at once"
            ),
            Self::CallerCredentials { change } => write!(
                f,
                "the broker could not take on the caller's {change}, so it would act with more than the caller has"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(decision: BrokerDecision, i: usize) -> BrokerRecord {
        BrokerRecord {
            syscall: "fchmodat".into(),
            pid: 1,
            target: BrokerTarget {
                path: Some(format!("/w/f{i}")),
                ..BrokerTarget::default()
            },
            decision,
        }
    }

    fn refused(i: usize) -> BrokerRecord {
        record(
            BrokerDecision::Refused {
                reason: Refusal::OutsideWritePaths,
            },
            i,
        )
    }

    /// R6b F4: a flood of performed calls fills their share of the log,
    /// never the refusals'; the refusal after it is kept.
    #[test]
    fn a_flood_of_performed_calls_keeps_the_refusal_after_it() {
        let mut log = BrokerLog::default();
        for i in 0..4200 {
            log.push(record(BrokerDecision::Performed, i));
        }
        log.push(refused(0));
        assert_eq!(log.refusals().count(), 1);
        assert_eq!(log.refusals_omitted, 0);
        assert_eq!(log.refusals_count(), 1);
        assert_eq!(log.omitted, 4200 - BrokerLog::MAX_RECORDS as u64);
        assert_eq!(log.performed_omitted, log.omitted);
        assert_eq!(log.performed_count(), 4200);
        assert_eq!(log.records.len(), BrokerLog::MAX_RECORDS + 1);
        let text = log.explain(5);
        assert!(
            text.starts_with("broker: 4200 performed, 1 refused"),
            "{text}"
        );
        assert!(text.contains("104 other answers counted"), "{text}");
        // Control: the same flood without the refusal has none to show.
        let mut control = BrokerLog::default();
        for i in 0..4200 {
            control.push(record(BrokerDecision::Performed, i));
        }
        assert_eq!(control.refusals_count(), 0);
    }

    /// Refusals past their own cap are counted apart from other answers
    /// past theirs, and the cap holds (the log stays bounded).
    #[test]
    fn refusals_past_their_cap_are_counted_apart() {
        let mut log = BrokerLog::default();
        let extra = 7;
        for i in 0..BrokerLog::MAX_REFUSALS + extra {
            log.push(refused(i));
            log.push(record(
                BrokerDecision::Failed {
                    errno: libc::ENOENT,
                },
                i,
            ));
        }
        assert_eq!(log.refusals().count(), BrokerLog::MAX_REFUSALS);
        assert_eq!(log.refusals_omitted, extra as u64);
        assert_eq!(log.omitted, extra as u64);
        assert_eq!(log.performed_omitted, 0);
        assert_eq!(
            log.records.len(),
            BrokerLog::MAX_REFUSALS + BrokerLog::MAX_RECORDS
        );
        // The first ones are kept, in the order answered.
        assert_eq!(log.records[0], refused(0));
        assert!(log.explain(2).contains(&format!(
            "... {} more refusals",
            BrokerLog::MAX_REFUSALS - 2 + extra
        )));
    }

    /// One command's answers handed over ([`BrokerLog::absorb`]): counts
    /// move, caps hold in the receiving log, the source starts afresh.
    #[test]
    fn absorb_moves_counts_and_keeps_the_caps() {
        let mut source = BrokerLog::default();
        for i in 0..BrokerLog::MAX_RECORDS + 3 {
            source.push(record(BrokerDecision::Performed, i));
        }
        source.push(record(
            BrokerDecision::RunnerOutOfFds {
                errno: libc::EMFILE,
            },
            0,
        ));
        for i in 0..BrokerLog::MAX_REFUSALS + 2 {
            source.push(refused(i));
        }
        let mut handed = BrokerLog::default();
        handed.absorb(&mut source);
        assert_eq!(handed.performed_count(), BrokerLog::MAX_RECORDS as u64 + 3);
        assert_eq!(handed.refusals_count(), BrokerLog::MAX_REFUSALS as u64 + 2);
        assert_eq!(handed.runner_out_of_fds, 1);
        assert_eq!(handed.omitted, 4);
        assert!(source.records.is_empty());
        assert_eq!(
            (
                source.omitted,
                source.refusals_omitted,
                source.runner_out_of_fds
            ),
            (0, 0, 0)
        );
        // The source's caps start afresh for the next command.
        source.push(refused(0));
        assert_eq!(source.refusals().count(), 1);
        // A second hand-over into the full log: only counted there.
        handed.absorb(&mut source);
        assert_eq!(handed.refusals_omitted, 3);
        assert_eq!(handed.refusals().count(), BrokerLog::MAX_REFUSALS);
    }
}
