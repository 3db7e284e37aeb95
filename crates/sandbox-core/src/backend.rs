//! The contract every backend implements.

use std::ffi::OsString;
use std::process::Command;

use crate::axis::Axis;
use crate::error::SandboxUnavailable;
use crate::policy::ResolvedPolicy;
use crate::report::EnforcementReport;

/// What a runner needs from a confinement besides the policy.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct LaunchOptions {
    /// The runner ends the run by its process group: no process of the run
    /// may leave it (`setsid` and `setpgid` refused).
    pub hold_process_group: bool,
    /// Every write the confinement would refuse is to be recorded in the
    /// run's [`Mediation`], the ones the kernel refuses on its own included
    /// (on Linux: writing opens and directory-entry calls go to the broker,
    /// which answers as the kernel would).
    pub observe_writes: bool,
    /// Under an allowlist: the runner's resolver, to which connects to
    /// port 53 are made instead, and the answers it pinned, by which
    /// connects by IP are admitted too.
    pub dns: Option<crate::pins::DnsRoute>,
    /// The run's limits: what the runner spends on the run's behalf (a
    /// supervisor's CPU time and threads) is held to them too.
    pub limits: crate::limits::ResourceLimits,
    /// A Landlock ruleset fd the command holds under this number: the
    /// filter admits `landlock_restrict_self` with it (and no flags) so
    /// the command can nest a signal-scoped domain for each child it forks
    /// (the session's shared launch, `sandbox::zygote`); backends without
    /// such a layer ignore it.
    pub child_layer: Option<u32>,
    /// The command's fds 0, 1 and 2 when they are its own for the whole run
    /// (not a shared launch's, whose commands each get theirs later): the
    /// files and terminals among them may be opened again by their own
    /// paths (`/dev/stdout`, `/proc/self/fd/1`, a log file's name) as the
    /// fd is open (for writing, for reading), which grants nothing the fd
    /// does not (`sandbox run -- sh -c 'echo x > /dev/stderr' > build.log`).
    pub stdio: Option<[std::os::fd::RawFd; 3]>,
}

impl LaunchOptions {
    /// Options whose filter admits nesting the ruleset at fd `fd`.
    pub fn with_child_layer(self, fd: Option<u32>) -> Self {
        Self {
            child_layer: fd,
            ..self
        }
    }

    /// Options with the process group held (or not).
    pub fn with_process_group_held(self, hold: bool) -> Self {
        Self {
            hold_process_group: hold,
            ..self
        }
    }

    /// Options with DNS routed to the runner's resolver.
    pub fn with_dns(self, dns: Option<crate::pins::DnsRoute>) -> Self {
        Self { dns, ..self }
    }

    /// Options whose command's fds 0-2 are `stdio` ([`LaunchOptions::stdio`]).
    pub fn with_stdio(self, stdio: Option<[std::os::fd::RawFd; 3]>) -> Self {
        Self { stdio, ..self }
    }

    /// Options for a run limited by `limits`.
    pub fn with_limits(self, limits: crate::limits::ResourceLimits) -> Self {
        Self { limits, ..self }
    }

    /// Options with refused writes observed (or not).
    pub fn with_writes_observed(self, observe: bool) -> Self {
        Self {
            observe_writes: observe,
            ..self
        }
    }
}

/// A confinement backend (Landlock + seccomp, Seatbelt, noop).
///
/// A backend turns a command and a [`ResolvedPolicy`] into something runnable.
/// Failing to confine is a [`SandboxUnavailable`] error, never a silent
/// pass-through.
pub trait Backend: Send + Sync + std::fmt::Debug {
    /// Stable name (`landlock`, `seatbelt`, `noop`).
    fn name(&self) -> &'static str;

    /// The axes this backend claims to enforce.
    fn axes(&self) -> &'static [Axis];

    /// Whether this backend enforces anything (false only for audit-only backends).
    fn enforces(&self) -> bool {
        true
    }

    /// Prepares confinement of `argv` under `policy` (the `Command` form).
    ///
    /// Everything that may allocate or fail slowly happens here, in the parent.
    fn prepare(
        &self,
        policy: &ResolvedPolicy,
        argv: &[OsString],
    ) -> Result<Confinement, SandboxUnavailable>;

    /// [`Backend::prepare`] for a runner that needs more of the confinement
    /// than the policy says ([`LaunchOptions`]). The default ignores the
    /// options: backends that cannot honour one say so in their docs.
    fn prepare_for_launch(
        &self,
        policy: &ResolvedPolicy,
        argv: &[OsString],
        options: LaunchOptions,
    ) -> Result<Confinement, SandboxUnavailable> {
        let _ = options;
        self.prepare(policy, argv)
    }

    /// An argv that runs `argv` confined, for callers that spawn it themselves.
    fn wrap_argv(
        &self,
        policy: &ResolvedPolicy,
        argv: &[OsString],
    ) -> Result<WrappedArgv, SandboxUnavailable>;
}

/// The argv form of a confined command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrappedArgv {
    /// What to execute; the first element is the program.
    pub argv: Vec<OsString>,
    /// What the backend enforces for this policy.
    pub report: EnforcementReport,
}

/// A closure run in the child between `fork` and `exec`.
///
/// Only [`PreExecHook::new`], which is `unsafe`, creates one: whoever builds a
/// hook promises it is async-signal-safe (no allocation, no locks, no panics),
/// and that it reports failure with [`encode_pre_exec_error`].
pub struct PreExecHook(Box<dyn FnMut() -> std::io::Result<()> + Send + Sync + 'static>);

impl PreExecHook {
    /// Wraps `hook`.
    ///
    /// # Safety
    /// `hook` must only make async-signal-safe calls: it runs in a forked
    /// child of a possibly multi-threaded parent, where allocation or taking
    /// a lock can deadlock. See [`std::os::unix::process::CommandExt::pre_exec`].
    pub unsafe fn new(hook: impl FnMut() -> std::io::Result<()> + Send + Sync + 'static) -> Self {
        Self(Box::new(hook))
    }

    /// Runs the hook in the calling process (for launchers that spawn without
    /// `std::process::Command`).
    ///
    /// # Safety
    /// Call it only in a child between `fork` (or `clone`) and `exec`: the hook
    /// confines the process that calls it, irreversibly.
    pub unsafe fn run_in_child(&mut self) -> std::io::Result<()> {
        (self.0)()
    }

    /// Installs the hook on `cmd`, after any hooks already installed.
    pub fn install(self, cmd: &mut Command) {
        let hook = self.0;
        // SAFETY: `PreExecHook::new` is unsafe and its caller promised the
        // hook is async-signal-safe.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(cmd, hook);
        }
    }
}

impl std::fmt::Debug for PreExecHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PreExecHook(..)")
    }
}

/// A prepared confinement: the argv to execute and the hook to run before exec.
#[derive(Debug)]
#[non_exhaustive]
pub struct Confinement {
    /// What to execute (a backend may prefix the command, e.g. `sandbox-exec`).
    pub argv: Vec<OsString>,
    /// Runs in the child after the runner's own hooks.
    pub pre_exec: Option<PreExecHook>,
    /// What the backend enforces for this policy.
    pub report: EnforcementReport,
    /// A parent-side companion to start after spawning, if the backend has one.
    ///
    /// Start it as soon as the child is spawned, or drop it before spawning:
    /// while it is held but not started, calls it mediates wait for it.
    pub supervisor: Option<Box<dyn Supervisor>>,
    /// The confinement of the thread that spawns the child and starts the
    /// supervisor, when the backend has one (see [`LaunchDomain`]).
    pub domain: Option<LaunchDomain>,
}

impl Confinement {
    /// Builds a confinement.
    pub fn new(
        argv: Vec<OsString>,
        pre_exec: Option<PreExecHook>,
        report: EnforcementReport,
    ) -> Self {
        Self {
            argv,
            pre_exec,
            report,
            supervisor: None,
            domain: None,
        }
    }

    /// The same confinement, spawned and supervised from inside `domain`.
    pub fn with_domain(mut self, domain: LaunchDomain) -> Self {
        self.domain = Some(domain);
        self
    }

    /// The same confinement with a supervisor the runner starts after spawning.
    pub fn with_supervisor(mut self, supervisor: Box<dyn Supervisor>) -> Self {
        self.supervisor = Some(supervisor);
        self
    }

    /// A plain `Command` for this confinement (no runner hooks, no supervisor).
    ///
    /// Returns `None` when the argv is empty. Prefer the facade's runner, which
    /// adds session, fd and process-tree control and runs the supervisor;
    /// without it, calls the supervisor would mediate fail (`ENOSYS`).
    pub fn into_command(self) -> Option<(Command, EnforcementReport)> {
        let (program, args) = self.argv.split_first()?;
        let mut cmd = Command::new(program);
        cmd.args(args);
        if let Some(hook) = self.pre_exec {
            hook.install(&mut cmd);
        }
        Some((cmd, self.report))
    }
}

/// A confinement for the launching thread: the thread that spawns the child
/// enters it first, and the supervisor is started from that thread, so the
/// supervisor's threads share it and the child's own confinement is nested
/// beneath it.
///
/// The Landlock backend's domain is the run's own Landlock domain: its broker
/// can then do no more than the sandbox allows, and the kernel still lets it
/// reach the child (Landlock permits ptrace-class access into nested
/// domains). Run the launch with [`LaunchDomain::launch`].
pub struct LaunchDomain(Box<dyn Fn() -> std::io::Result<()> + Send + Sync + 'static>);

impl LaunchDomain {
    /// Wraps `enter`, which confines the calling thread (and only it) for good.
    pub fn new(enter: impl Fn() -> std::io::Result<()> + Send + Sync + 'static) -> Self {
        Self(Box::new(enter))
    }

    /// Runs `launch` (start the supervisor, spawn the child), then `body`
    /// (wait, end, finish) with its result, both on a new thread that first
    /// enters `domain`; the calling thread only waits for that thread, which
    /// is joined before this returns (a single-threaded caller stays one).
    ///
    /// One thread does the whole launch, so the caller is not woken while
    /// the child starts (on a two-CPU host, the child's exec held the CPU
    /// the woken caller needed for up to 0.4 ms: BENCHMARKS.md). A child's
    /// parent-death signal fires when the *thread* that created it ends
    /// (prctl(2), `PR_SET_PDEATHSIG`); `body` reaps the child, so the thread
    /// outlives it. `body` runs inside `domain`: a file it needs (the run's
    /// cgroup files) must be opened before. The domain's copy of the ruleset
    /// is dropped as soon as it is entered. Without a domain, everything
    /// runs on the calling thread. Fails only when the thread cannot start
    /// or cannot enter the domain, before `launch` ran.
    pub fn launch<T, R: Send>(
        domain: Option<LaunchDomain>,
        launch: impl FnOnce() -> T + Send,
        body: impl FnOnce(T) -> R + Send,
    ) -> std::io::Result<R> {
        let Some(domain) = domain else {
            return Ok(body(launch()));
        };
        std::thread::scope(|scope| {
            let thread = std::thread::Builder::new()
                .name("sandbox-launch".into())
                .spawn_scoped(scope, move || {
                    let entered = (domain.0)();
                    drop(domain);
                    entered.map(|()| body(launch()))
                })?;
            thread
                .join()
                .unwrap_or_else(|_| Err(std::io::Error::other("the launching thread panicked")))
        })
    }
}

impl std::fmt::Debug for LaunchDomain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LaunchDomain(..)")
    }
}

/// Bit set on errno values reported by a pre-exec hook, so the parent can tell
/// "the sandbox could not be applied" from "exec failed".
pub const PRE_EXEC_ERROR_TAG: i32 = 1 << 16;

/// An error for a pre-exec hook to return when applying confinement fails.
pub fn encode_pre_exec_error(errno: i32) -> std::io::Error {
    std::io::Error::from_raw_os_error(PRE_EXEC_ERROR_TAG | (errno & 0xffff))
}

/// The errno a pre-exec hook reported, if `err` came from [`encode_pre_exec_error`].
pub fn decode_pre_exec_error(err: &std::io::Error) -> Option<i32> {
    err.raw_os_error()
        .filter(|code| code & PRE_EXEC_ERROR_TAG != 0)
        .map(|code| code & 0xffff)
}

/// A parent-side companion of a confined child, such as a broker that
/// performs permitted metadata changes on the child's behalf.
///
/// The runner starts it on the launching thread just before the child is
/// spawned, so that it gets ready while the child starts, confirms it once
/// the child is spawned (and the hooks, with their copies of any fds, are
/// dropped), and finishes it once the child's process tree has ended.
pub trait Supervisor: Send + std::fmt::Debug {
    /// Starts supervising. The child may not exist yet: this must not wait
    /// for it ([`RunningSupervisor::confirm`] does).
    fn start(self: Box<Self>) -> Result<Box<dyn RunningSupervisor>, SandboxUnavailable>;
}

/// A started [`Supervisor`].
pub trait RunningSupervisor: Send + std::fmt::Debug {
    /// Waits until the supervisor has what it needs from the child, which
    /// has been spawned (or has failed to start, its hooks then dropped).
    /// Called once, before the child is waited for.
    fn confirm(&mut self) -> Result<(), SandboxUnavailable>;

    /// Stops supervising and returns what was mediated.
    fn finish(self: Box<Self>) -> Mediation;

    /// After [`RunningSupervisor::confirm`]: what closes one command's share
    /// of this supervisor when a process of the run forks many commands in
    /// turn (a session's shared launch), if the supervisor has per-command
    /// state; see [`MediationTap`].
    fn tap(&self) -> Option<MediationTap> {
        None
    }
}

/// Called between two commands of a run that forks many in turn (every
/// process of the one that ended gone): resets what the supervisor keeps
/// per command and returns what it mediated for that command since the
/// last call, or `None` when the supervisor did not answer in time.
#[derive(Clone)]
pub struct MediationTap {
    take: std::sync::Arc<dyn Fn() -> Option<Mediation> + Send + Sync>,
    live: Option<LiveRefusals>,
    git_dirs_made: Option<GitDirsMade>,
}

/// What [`MediationTap::git_dirs_made`] calls.
type GitDirsMade = std::sync::Arc<dyn Fn() -> Vec<std::path::PathBuf> + Send + Sync>;

/// What [`MediationTap::live`] calls.
type LiveRefusals = std::sync::Arc<dyn Fn() -> (Vec<MediatedCall>, u64) + Send + Sync>;

impl MediationTap {
    /// A tap that calls `take`.
    pub fn new(take: impl Fn() -> Option<Mediation> + Send + Sync + 'static) -> Self {
        Self {
            take: std::sync::Arc::new(take),
            live: None,
            git_dirs_made: None,
        }
    }

    /// This tap, with `live` answering [`MediationTap::live`].
    pub fn with_live(
        mut self,
        live: impl Fn() -> (Vec<MediatedCall>, u64) + Send + Sync + 'static,
    ) -> Self {
        self.live = Some(std::sync::Arc::new(live));
        self
    }

    /// This tap, with `made` answering [`MediationTap::git_dirs_made`].
    pub fn with_git_dirs_made(
        mut self,
        made: impl Fn() -> Vec<std::path::PathBuf> + Send + Sync + 'static,
    ) -> Self {
        self.git_dirs_made = Some(std::sync::Arc::new(made));
        self
    }

    /// Closes the command that ended; what was mediated for it.
    pub fn take(&self) -> Option<Mediation> {
        (self.take)()
    }

    /// The current command's refusals since the last call, as its
    /// [`Mediation::refused`] will list them (the first few of the command
    /// only), and how many it had so far; `None` when the supervisor
    /// cannot tell while the command runs. Never waits for the supervisor.
    pub fn live(&self) -> Option<(Vec<MediatedCall>, u64)> {
        self.live.as_ref().map(|live| live())
    }

    /// The git directories the run made so far, where they are now (as
    /// [`Mediation::git_dirs_made`] names them), without closing the
    /// command (unlike [`MediationTap::take`]): every one since the run
    /// started. `None` when the supervisor cannot tell while the run
    /// goes on. Never waits for the supervisor.
    pub fn git_dirs_made(&self) -> Option<Vec<std::path::PathBuf>> {
        self.git_dirs_made.as_ref().map(|made| made())
    }
}

impl std::fmt::Debug for MediationTap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MediationTap").finish_non_exhaustive()
    }
}

/// What a supervisor mediated during one run.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Mediation {
    /// Requests performed on the command's behalf.
    pub performed: usize,
    /// Requests refused, with the reason for each.
    pub refused: Vec<MediatedCall>,
    /// Refusals not listed in `refused`, only counted (past the
    /// supervisor's cap for refusals, or cut to bound a nested run's
    /// record): refusals all the same. Performed calls past a cap are
    /// counted in `performed`.
    pub omitted: usize,
    /// Set when mediation stopped early because of an error.
    pub error: Option<String>,
    /// Git directories the run made, where they were when it ended (known
    /// when the policy protects git directories and a broker saw the run's
    /// directory entries).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub git_dirs_made: Vec<std::path::PathBuf>,
    /// How many more directories may have become repositories of the run's
    /// that cannot be named (moved after they were made, or too many).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub git_dirs_unnamed: usize,
    /// Calls of the command that failed because the runner ran out of file
    /// descriptors serving them (`EMFILE`, `ENFILE`): the runner's failure,
    /// not a refusal.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub runner_out_of_fds: usize,
    /// Connections the egress proxy closed on accept because a connection
    /// limit was reached (its own, or the runner's descriptor budget): a
    /// runner limit, not a refusal.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub egress_closed_at_limit: usize,
    /// Connections the egress proxy cut after their client had ended its
    /// side and the upstream then stayed silent for 30 s: the client got
    /// what had come until then.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub egress_cut_silent: usize,
    /// Connections to the run's egress proxy or resolver closed on accept
    /// because their client was not one of the run's processes (another
    /// local process's socket, by its cgroup or owner): never served,
    /// asked about or listed as the run's refusals.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub egress_foreign_closed: usize,
}

impl Mediation {
    /// Adds what another supervisor of the same run mediated (the egress's
    /// to the broker's): counts add up, lists are joined, the first error
    /// stays.
    pub fn absorb(&mut self, other: Mediation) {
        self.performed = self.performed.saturating_add(other.performed);
        self.refused.extend(other.refused);
        self.omitted = self.omitted.saturating_add(other.omitted);
        if self.error.is_none() {
            self.error = other.error;
        }
        self.git_dirs_made.extend(other.git_dirs_made);
        self.git_dirs_unnamed = self.git_dirs_unnamed.saturating_add(other.git_dirs_unnamed);
        self.runner_out_of_fds = self
            .runner_out_of_fds
            .saturating_add(other.runner_out_of_fds);
        self.egress_closed_at_limit = self
            .egress_closed_at_limit
            .saturating_add(other.egress_closed_at_limit);
        self.egress_cut_silent = self
            .egress_cut_silent
            .saturating_add(other.egress_cut_silent);
        self.egress_foreign_closed = self
            .egress_foreign_closed
            .saturating_add(other.egress_foreign_closed);
    }
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// One refused request.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MediatedCall {
    /// The system call, e.g. `fchmodat`.
    pub syscall: String,
    /// The object it named (path or fd), as resolved.
    pub target: String,
    /// Why it was refused.
    pub reason: String,
    /// Refused only because the object lies outside every write path: the
    /// one refusal an approval may offer to widen (never a deny path).
    #[serde(default)]
    pub outside_write_paths: bool,
}
