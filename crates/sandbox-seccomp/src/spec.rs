//! The vocabulary of the filter specification: actions, argument conditions,
//! rules and table entries. Pure data; nothing here touches the process.

/// What the filter does with a system call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Action {
    /// Let the call through.
    Allow,
    /// Fail the call with this errno.
    Errno(u16),
    /// Kill the whole process (architecture and ABI mismatches only).
    KillProcess,
    /// Hand the call to a user-space supervisor (`SECCOMP_RET_USER_NOTIF`):
    /// the metadata broker, when [`FilterSpec::broker`] is set.
    UserNotif,
}

/// Linux `EPERM` (spelled out: this module also builds on other systems).
pub const EPERM: u16 = 1;
/// Linux `ENOSYS`.
pub const ENOSYS: u16 = 38;

/// `EPERM`: the explicit-denial answer.
pub const DENY: Action = Action::Errno(EPERM);

/// `ENOSYS`: the answer for syscalls the table does not know, so libc and
/// runtimes fall back to older interfaces exactly as on an older kernel.
pub const UNKNOWN: Action = Action::Errno(ENOSYS);

/// The answer for metadata writes Landlock cannot govern (chmod, chown,
/// xattr writes, path-based utimes, and `truncate` without the Landlock
/// truncate right) when no broker mediates them.
pub const METADATA_WRITE: Action = DENY;

/// Linux `EOPNOTSUPP`.
pub const EOPNOTSUPP: u16 = 95;

/// The answer for extended-attribute reads under a policy with read denials
/// when no broker can check the path: "not supported" (tools such as `ls`
/// then show no attributes), never the value of a denied file's attribute.
pub const XATTR_READ_UNBROKERED: Action = Action::Errno(EOPNOTSUPP);

/// The answer for extended-attribute reads under `spec`: allowed without read
/// denials; with them, handed to the broker (which refuses denied paths) or
/// [`XATTR_READ_UNBROKERED`]. `None`: plain allow.
pub fn xattr_read(spec: &FilterSpec) -> Option<Action> {
    match (spec.read_deny, spec.broker) {
        (false, _) => None,
        (true, true) => Some(Action::UserNotif),
        (true, false) => Some(XATTR_READ_UNBROKERED),
    }
}

/// The answer for brokerable metadata writes under `spec`: handed to the
/// broker ([`Action::UserNotif`]) when one listens, else [`METADATA_WRITE`].
pub fn broker_or_refuse(spec: &FilterSpec) -> Action {
    if spec.broker {
        Action::UserNotif
    } else {
        METADATA_WRITE
    }
}

impl Action {
    /// The `SECCOMP_RET_*` value (kernel ABI constants) the BPF program returns for this action.
    pub fn ret(self) -> u32 {
        match self {
            Action::Allow => 0x7fff_0000,
            Action::Errno(e) => 0x0005_0000 | u32::from(e),
            Action::KillProcess => 0x8000_0000,
            Action::UserNotif => 0x7fc0_0000,
        }
    }
}

/// How much of a 64-bit syscall argument a condition compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Width {
    /// The low 32 bits only: the kernel reads this argument as an `int`, so
    /// high bits must not change the verdict (for example ioctl requests).
    Low32,
    /// All 64 bits (pointers).
    Full64,
}

/// A comparison on one argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmp {
    /// `arg == value`.
    Eq(u64),
    /// `arg != value`.
    Ne(u64),
    /// `arg & mask == value` (`value` has no bits outside `mask`).
    MaskedEq {
        /// Bits compared.
        mask: u64,
        /// Expected value of those bits.
        value: u64,
    },
    /// `arg >= value` (unsigned).
    Ge(u64),
}

/// One argument condition: `args[arg]`, seen at `width`, satisfies `cmp`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cond {
    /// Argument index, 0..=5.
    pub arg: u8,
    /// How many bits are compared.
    pub width: Width,
    /// The comparison.
    pub cmp: Cmp,
}

impl Cond {
    /// Low-32-bit condition.
    pub const fn low32(arg: u8, cmp: Cmp) -> Self {
        Cond {
            arg,
            width: Width::Low32,
            cmp,
        }
    }

    /// Full-64-bit condition.
    pub const fn full64(arg: u8, cmp: Cmp) -> Self {
        Cond {
            arg,
            width: Width::Full64,
            cmp,
        }
    }

    /// Whether the condition holds for these arguments.
    pub fn holds(&self, args: &[u64; 6]) -> bool {
        let raw = args[usize::from(self.arg)];
        let v = match self.width {
            Width::Low32 => raw & 0xffff_ffff,
            Width::Full64 => raw,
        };
        match self.cmp {
            Cmp::Eq(x) => v == x,
            Cmp::Ne(x) => v != x,
            Cmp::MaskedEq { mask, value } => v & mask == value,
            Cmp::Ge(x) => v >= x,
        }
    }
}

/// What a table entry does with its syscall.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rule {
    /// Always allowed (no argument checks, so the kernel's action cache applies).
    Allow,
    /// Allowed when every condition of at least one group holds, else `otherwise`.
    AllowIf {
        /// Disjunction of conjunctions.
        any_of: Vec<Vec<Cond>>,
        /// The answer when no group holds.
        otherwise: Action,
    },
    /// Always answered with this action, whatever the arguments (refused,
    /// or sent to the broker).
    Always(Action),
    /// Answered `action` when every condition of at least one group holds,
    /// else allowed (for a list of refused forms of a call that is
    /// otherwise harmless).
    RefuseIf {
        /// Disjunction of conjunctions.
        any_of: Vec<Vec<Cond>>,
        /// The answer when a group holds.
        action: Action,
    },
}

impl Rule {
    /// The action for a call with these arguments.
    pub fn eval(&self, args: &[u64; 6]) -> Action {
        match self {
            Rule::Allow => Action::Allow,
            Rule::Always(a) => *a,
            Rule::AllowIf { any_of, otherwise } => {
                if any_of.iter().any(|g| g.iter().all(|c| c.holds(args))) {
                    Action::Allow
                } else {
                    *otherwise
                }
            }
            Rule::RefuseIf { any_of, action } => {
                if any_of.iter().any(|g| g.iter().all(|c| c.holds(args))) {
                    *action
                } else {
                    Action::Allow
                }
            }
        }
    }
}

/// One row of the syscall table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Syscall name as in `man 2`.
    pub name: &'static str,
    /// Number on the target architecture.
    pub nr: u32,
    /// What the filter does with it.
    pub rule: Rule,
    /// Why (mandatory for anything that is not a plain allow).
    pub reason: &'static str,
    /// How the broker handles the call when the rule routes it there
    /// ([`Action::UserNotif`]); `None` for a call the broker does not decode
    /// (routed, if at all, only so that the refusal is recorded). The same
    /// for a syscall under every spec.
    pub handler: Option<Handler>,
}

/// How the broker handles a call the filter routes to it: the handler that
/// reads its arguments, decides and answers. Carried by the call's table row
/// ([`Entry::handler`]); the broker dispatches on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Handler {
    /// A metadata change the broker performs on the object the call names,
    /// only beneath a write path: chmod, chown, xattr set and remove,
    /// timestamps, `truncate` by path.
    Metadata(MetaForm),
    /// An extended-attribute read, refused on a read-denied path.
    XattrRead(XattrForm),
    /// A writing open or directory-entry call the broker performs itself.
    Entry(EntryForm),
    /// `bind`: a pathname UNIX socket is a new directory entry, admitted as
    /// `mknod`'s; the broker binds the caller's own socket.
    Bind,
    /// `connect`, decided and performed by the broker on the caller's own
    /// socket.
    Connect,
    /// `listen` under egress rules (loopback-bound sockets only).
    Listen,
    /// `socket` of a kind the filter does not allow itself.
    Socket,
    /// `umask`: noted, then let continue (no pointer argument).
    Umask,
    /// A call naming another process by pid or tid (`prlimit64`, the
    /// `sched_set*` calls, `setpriority`, `ioprio_set`): let continue only
    /// for one of the run's own processes.
    Process,
    /// `execve`, `execveat`, routed only when refused reads are recorded
    /// ([`FilterSpec::broker_reads`]): let continue unless Landlock would
    /// refuse executing the file (beneath a read-deny path), which the
    /// broker then answers `EACCES` and records.
    Exec(ExecForm),
}

/// The argument form of an exec ([`Handler::Exec`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[allow(missing_docs)]
pub enum ExecForm {
    Execve,
    Execveat,
}

impl Handler {
    /// Whether the broker performs the call when it reaches it (entry calls,
    /// `bind`, `connect`): a refusal of such a call is never routed to the
    /// broker just to be recorded, since the broker would act on it.
    pub fn performs(self) -> bool {
        matches!(self, Handler::Entry(_) | Handler::Bind | Handler::Connect)
    }
}

/// The argument form of a metadata change ([`Handler::Metadata`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[allow(missing_docs)]
pub enum MetaForm {
    Chmod,
    Fchmod,
    Fchmodat,
    Fchmodat2,
    Chown,
    Lchown,
    Fchown,
    Fchownat,
    Setxattr,
    Lsetxattr,
    Fsetxattr,
    Removexattr,
    Lremovexattr,
    Fremovexattr,
    /// Path and fd (`futimens`) forms.
    Utimensat,
    Utimes,
    Futimesat,
    Utime,
    /// `truncate(path)`.
    Truncate,
}

/// The argument form of an extended-attribute read ([`Handler::XattrRead`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[allow(missing_docs)]
pub enum XattrForm {
    Getxattr,
    Lgetxattr,
    Fgetxattr,
    Listxattr,
    Llistxattr,
    Flistxattr,
}

/// The argument form of a writing open or directory-entry call
/// ([`Handler::Entry`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[allow(missing_docs)]
pub enum EntryForm {
    Open,
    Openat,
    Creat,
    Mknod,
    Mknodat,
    Mkdir,
    Mkdirat,
    Unlink,
    Unlinkat,
    Rmdir,
    Rename,
    Renameat,
    Renameat2,
    Link,
    Linkat,
    Symlink,
    Symlinkat,
}

/// The facts a filter is compiled from: the policy's switches and how the
/// run is held and brokered. (Landlock's truncate right is never relied
/// on: handling it costs a path walk per open, so `truncate(2)` by path is
/// always brokered or refused here.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FilterSpec {
    /// Whether the policy allows network access.
    pub network: bool,
    /// Whether the policy forbids creating child processes.
    pub deny_subprocess: bool,
    /// Whether a metadata broker listens (`SECCOMP_FILTER_FLAG_NEW_LISTENER`):
    /// brokerable metadata writes go to it instead of failing with `EPERM`.
    pub broker: bool,
    /// Whether the policy denies reads anywhere: extended-attribute reads,
    /// which Landlock does not govern, then go through [`xattr_read`].
    pub read_deny: bool,
    /// Whether the runner holds the run by its process group: `setsid` and
    /// `setpgid` are then refused, so no process can leave it.
    pub hold_group: bool,
    /// Whether host UNIX sockets are confined with the network on: with a
    /// broker, `connect` goes to it (it admits only sockets beneath the write
    /// paths and those allowed, and performs every connect itself); without
    /// one, no AF_UNIX socket can be created with `socket` (pairs still can).
    /// Either way no AF_UNIX datagram socket exists, so no addressed send
    /// reaches a host socket.
    pub broker_connect: bool,
    /// Whether a deny path lies beneath a write path: with a broker, opens
    /// that can write and the directory-entry calls then go to it (Landlock
    /// grants the write path whole and the broker keeps the denied paths).
    pub broker_entries: bool,
    /// Whether the network is on for listed destinations only
    /// (`NetworkMode::Allowlist`): IP sockets made by the command are then
    /// TCP only, and every other socket goes to the broker (which makes IP
    /// datagram sockets where only the runner's resolver can be reached, and
    /// refuses the rest), `MSG_FASTOPEN` is refused (it would connect), and
    /// `connect` and `listen` go to the broker (all refused without one).
    pub egress: bool,
    /// Whether refused reads are to be recorded: with a broker and read
    /// denials, read-only opens that Landlock could refuse (not `O_PATH`,
    /// not `O_DIRECTORY`) and execs go to the broker too, which answers `EACCES` and
    /// records the refusal for an open Landlock would refuse (a file
    /// beneath a read-deny path, after every error the kernel gives first)
    /// and lets every other continue in the kernel. Asked for by observed
    /// runs only (it costs a round trip per open).
    pub broker_reads: bool,
    /// The fd number of the ruleset a spawner's children nest one more
    /// Landlock domain with, after fork, where a broker listens: only
    /// `landlock_restrict_self` with exactly that fd and no flags is then
    /// allowed (every other Landlock call stays refused). The filter is
    /// inherited from the spawner, so without it a child would stay in the
    /// spawner's own domain and could signal it (see
    /// `sandbox_landlock::ConfinedSpawner`).
    pub child_layer: Option<u32>,
}

impl FilterSpec {
    /// The spec for a resolved policy on a kernel with `coverage`.
    pub fn new(policy: &sandbox_core::ResolvedPolicy) -> Self {
        FilterSpec {
            network: policy.network(),
            deny_subprocess: policy.deny_subprocess(),
            broker: false,
            read_deny: !policy.read_deny_paths().is_empty(),
            hold_group: false,
            broker_entries: false,
            broker_connect: false,
            egress: policy.network_mode() == sandbox_core::NetworkMode::Allowlist,
            broker_reads: false,
            child_layer: None,
        }
    }

    /// The same spec letting children nest a domain with the ruleset at
    /// fd `fd` (see [`FilterSpec::child_layer`]).
    pub fn with_child_layer(self, fd: Option<u32>) -> Self {
        FilterSpec {
            child_layer: fd,
            ..self
        }
    }

    /// The same spec with read-only opens routed for their refusals to be
    /// recorded (or not); see [`FilterSpec::broker_reads`].
    pub fn with_broker_reads(self, broker_reads: bool) -> Self {
        FilterSpec {
            broker_reads,
            ..self
        }
    }

    /// Whether read-only opens go to the broker (refused reads recorded):
    /// asked for, a broker listens, and the policy denies reads somewhere.
    pub fn routes_reads(&self) -> bool {
        self.broker_reads && self.broker && self.read_deny
    }

    /// The same spec with writing opens and directory-entry calls brokered (or not).
    pub fn with_broker_entries(self, broker_entries: bool) -> Self {
        FilterSpec {
            broker_entries,
            ..self
        }
    }

    /// The same spec with host UNIX sockets confined (or not).
    pub fn with_broker_connect(self, broker_connect: bool) -> Self {
        FilterSpec {
            broker_connect,
            ..self
        }
    }

    /// Whether `connect` goes to the broker (network on, a broker listens).
    pub fn routes_connect(&self) -> bool {
        (self.broker_connect || self.egress) && self.broker && self.network
    }

    /// Whether `listen` goes to the broker (egress rules, a broker listens).
    pub fn routes_listen(&self) -> bool {
        self.egress && self.broker && self.network
    }

    /// Whether opens and entry calls go to the broker (it must listen).
    pub fn routes_entries(&self) -> bool {
        self.broker_entries && self.broker
    }

    /// The same spec with the process group held (or not).
    pub fn with_group_held(self, hold_group: bool) -> Self {
        FilterSpec { hold_group, ..self }
    }

    /// The same spec with metadata writes handed to a broker (or not).
    pub fn with_broker(self, broker: bool) -> Self {
        FilterSpec { broker, ..self }
    }

    /// This spec's slot among the prebuilt programs, `None` for specs that
    /// are compiled at run time. Prebuilt are the specs a Landlock launch
    /// can ask for: host UNIX sockets confined (the backend always asks)
    /// and Landlock's truncate right not relied on (it never is), with
    /// every combination of the other seven switches, the process group
    /// held or not included (unprivileged users hold it on every launch).
    /// A spec that routes reads ([`FilterSpec::routes_reads`], observed
    /// runs under read denials) is compiled at run time.
    #[cfg_attr(
        not(all(target_os = "linux", target_arch = "x86_64")),
        allow(dead_code)
    )]
    pub(crate) fn prebuilt_slot(&self) -> Option<usize> {
        (self.broker_connect && !self.routes_reads() && self.child_layer.is_none()).then(|| {
            usize::from(self.network)
                | usize::from(self.deny_subprocess) << 1
                | usize::from(self.broker) << 2
                | usize::from(self.read_deny) << 3
                | usize::from(self.hold_group) << 4
                | usize::from(self.broker_entries) << 5
                | usize::from(self.egress) << 6
        })
    }

    /// Every distinct spec: all 256 combinations of the eight switches other
    /// than [`FilterSpec::broker_reads`], which is set besides only where it
    /// changes the program ([`FilterSpec::routes_reads`]: with a broker and
    /// read denials), 64 more.
    pub fn all() -> impl Iterator<Item = FilterSpec> {
        let spec = |bits: u16| FilterSpec {
            network: bits & 1 != 0,
            deny_subprocess: bits & 2 != 0,
            broker_connect: bits & 4 != 0,
            broker: bits & 8 != 0,
            read_deny: bits & 16 != 0,
            hold_group: bits & 32 != 0,
            broker_entries: bits & 64 != 0,
            egress: bits & 128 != 0,
            broker_reads: false,
            child_layer: None,
        };
        (0u16..256).map(spec).chain(
            (0u16..256)
                .map(spec)
                .map(|s| s.with_broker_reads(true))
                .filter(FilterSpec::routes_reads),
        )
    }
}
