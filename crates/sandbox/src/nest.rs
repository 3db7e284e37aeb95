//! Nested runs that narrow: a `sandbox run` inside a confined run asks the
//! outer runner to start its command, under its own policy intersected with
//! the outer run's ([`ResolvedPolicy::nested_within`]).
//!
//! A confined run on Linux (the `landlock` backend) inherits the nest
//! socket: one end of a `SOCK_SEQPACKET` socket pair, its number in
//! [`NEST_FD_ENV`]. The fd is the capability; the variable only names it.
//! A thread of the outer runner serves the other end for the run's
//! lifetime. A nested run ([`Capability::find`], then [`Capability::run`]):
//!
//! 1. makes a stream socket pair and sends one end over the nest socket;
//! 2. the runner checks that the pair was made by a process of the run
//!    (`SO_PEERCRED`: in the run's cgroup, or its process group when the run
//!    has no cgroup) and answers a hello on it; anything else (a fd that is
//!    no such socket, no answer) leaves the nested run to confine itself;
//! 3. the nested run sends its request (argv, cwd, environment, resolved
//!    policy, limits) with its stdin, stdout and stderr (`SCM_RIGHTS`);
//! 4. the runner validates it as a run's input, intersects the policies and
//!    runs the command through [`crate::runner::run`], which ends it when the
//!    nested run's connection closes or the outer run ends; its record goes
//!    back, and into the outer run's record (`nested`).
//!
//! A nested run never runs unconfined, at most [`MAX_NESTED`] are alive at
//! once per outer run (its nested runs' own nested runs, at any depth,
//! counted with them), and a request above [`MAX_REQUEST`] bytes is refused.
//!
//! # Threat table
//! The nest socket is a trusted entry point of the runner (unconfined, often
//! root) that the confined command (hostile, perhaps root with its
//! capabilities dropped) reaches. What the command controls, what holds,
//! and the tests in `tests/tests/it/nested.rs` and `nested_attacks.rs` that
//! attack it:
//!
//! | part | the command controls | held by | attacked by |
//! |---|---|---|---|
//! | the inner policy | every field of the request, a policy with no write bound or none at all | resolved as it is read (paths canonical: `..` and symlinks resolved by the runner), then [`ResolvedPolicy::nested_within`]: at most the outer's on every field (proptest in sandbox-core); an inner write path or destination outside the outer's refused, as is a write path inside a read denial; no policy refused | `a_nested_write_path_inside_the_outer_read_denial_is_refused`, `a_nested_run_narrows_the_outer_policy`, `a_nested_run_cannot_widen_the_write_paths`, `a_nested_run_cannot_widen_the_network`, `the_capability_cannot_run_anything_unconfined` |
//! | an inner write path after its check | every directory beneath the outer's write paths: one on the way to the inner write path turned into a symlink out of the run (or renamed) between the runner's check and the launch's open of it | the Landlock rules are opened one component at a time from `/`, no symlink followed (`ELOOP`: the run does not start), a split rule's entries beneath their directory's fd; a rename can put there only a directory the outer command writes already | `a_write_path_swapped_for_a_symlink_after_its_check_grants_nothing_outside` |
//! | what the outer run keeps beyond its policy | the nested run's reads | the bound is the outer's policy (its trusted state protected) with its secrets' files read-denied, as its egress denies them; the nested run's egress gets no secrets and no approvals (its proxy refuses what its own list lacks); the outer's trusted files are checked against the nested policy | `a_nested_run_cannot_read_the_outer_runs_secret_file` |
//! | the working directory | a path the runner would enter for it where the command cannot (the launch's child changes directory before it drops the runner's capabilities): beneath a directory its own permissions close, a process's `/proc/PID/cwd`; the path changed after the check | entered first by a thread of the runner holding no capability, as the command would (`fchdir`), and the launch enters the directory so opened (`/proc/self/fd/N`), not the path | `a_nested_run_enters_no_directory_its_command_cannot` |
//! | the nested run's trusted files | paths the runner checks with its capabilities (its answer would tell what lies beneath a directory the command cannot search) | only those the command could look up itself (a thread without capabilities) are checked; the outer run's trusted files always are | `a_nested_runs_trusted_files_reveal_nothing_its_command_cannot_reach` |
//! | the program's lookup | `argv[0]`, the `PATH` of its environment | looked up first as the command would (a thread without capabilities): one it cannot find is refused as not found, whatever lies where it cannot search; where the launch's lookup (with the runner's capabilities) would pick another file, the command's is named | `a_nested_runs_program_is_looked_up_as_its_command_would`, `a_nested_run_runs_a_relative_script_in_its_working_directory` |
//! | the outer's secret placeholders | the nested command's requests carrying them | known gap: the nested run's proxy does not know them, so a placeholder sent where the outer's proxy would refuse it and record an attempted exfiltration passes (a tripwire only: the value stays in the runner) | (none) |
//! | who asks | the variable, fds it makes (socket pairs, files), fds it hands to others | the fd grants, not the variable; the client looks only when it runs under a seccomp filter with `no_new_privs` (so a forged variable at top level reaches no one), and needs a `SOCK_SEQPACKET` socket that answers the hello; the runner serves only stream pairs made (`SO_PEERCRED`) by a process in the run's cgroup (or process group), so a nested run's processes and processes outside the run cannot use it | `a_forged_capability_grants_nothing`, `an_unconfined_run_ignores_a_forged_capability`, `a_process_outside_the_run_cannot_use_the_socket`, `a_nest_socket_handed_to_a_nested_run_is_not_served` |
//! | the request's contents | argv, env, cwd with NULs, `=`, bad paths; sizes; stdio fds | validated as a run's input (the errors a run gives, escaped); at most [`MAX_REQUEST`] bytes and 3 fds; datagram stdio refused as for any run; the lists whose checking touches the file system bounded before anything is resolved or looked up (at most [`MAX_TRUSTED_FILES`] trusted files, looked up on one thread; [`MAX_LIST`] entries per policy list and `PATH` directories; paths of at most [`MAX_PATH`] bytes, [`MAX_POLICY_PATHS`] in all), more refused naming the bound | `the_capability_cannot_run_anything_unconfined` (a request by hand), `a_huge_nested_request_holds_no_run_past_its_timeout_or_a_stop_signal` |
//! | the nested run's lifetime | the requester dies or is stopped; the outer command exits or times out; bytes after the request | the nested launch ends (as on a timeout: SIGTERM, grace, SIGKILL, its cgroup or process group) when its connection closes, the outer run ends (before the outer run's other processes are ended) or, in a session's shared launch, the command that asked ends (before the next command starts), recorded `cancelled` naming which; a connection counts from the moment the door takes it, in the generation of the command it came in: the end-of-command sweep (`Commands::end_all`) closes that generation, closes the connections still queued, and waits for every connection of it, so a request read or checked when its command ended is refused, never started (nor one when the outer run ended); its stop signals are those its requester relays, never the runner's own; the outer run returns only after every nested run has; bytes after the request are stop signals passed on by the launch to the nested command's own process group (SIGINT, SIGQUIT, SIGTERM, SIGHUP only; the launching thread, which alone reaps it, sends them) | `nested_runs_end_with_the_outer_run`, `a_stop_signal_reaches_the_nested_command`, `a_nested_run_ended_from_outside_is_recorded_as_cancelled`, `a_stop_signal_to_the_outer_run_reaches_the_nested_command_once`, `a_commands_nested_run_does_not_outlive_it_shared`, `a_commands_nested_request_never_starts_in_the_next_command` |
//! | the runner's threads and memory | many requests (one after another too), requests never finished, replies never read, nested runs that nest again (each level's count would multiply) | at most [`MAX_NESTED`] served at once in the whole tree (a nested run's door shares its outer's count; more refused, saying so); a connection that sends nothing holds one thread until the outer run ends; a reply not read is dropped after 10 s (100 ms once the outer run has ended); each nested record is bounded by bytes ([`MAX_RECORD`], `bound_record`: argv, refusals, git directories, its own nested records cut, counted in `omitted` and `mediation`), kept once (per command in a shared launch, else for the outer record), and the records kept are the tree's first 256 within [`MAX_KEPT`] bytes (a shared launch's: 256 and [`MAX_KEPT`] per command), the rest counted (`omitted.nested`); the requester gets the same bounded record, which always fits the reply it reads ([`MAX_REPLY`]), and an answer it cannot read says the command may have run | `nested_runs_are_bounded`, `nested_runs_of_nested_runs_count_with_them`, `the_outer_record_keeps_a_bounded_number_of_nested_records`, `a_nested_runs_record_is_bounded_and_says_what_it_left_out`, unit `a_record_is_bounded_and_counts_what_it_left_out`, `kept_records_are_bounded_by_bytes_and_count` |
//! | the outer run's limits | the nested commands' processes, memory and CPU, alongside the outer command's | the nested run's cgroups (v2, and the v1 groups that hold limits) are made inside the outer run's, so the kernel charges them to the outer run's limits; the outer run removes its cgroups only after every nested run has ended | `a_nested_run_is_charged_to_the_outer_runs_limits` |
//! | the record | the nested command's refusals | recorded by the nested run's own broker and proxy, under the outer record's `nested` (in a session's shared launch, under the exit event of the command that asked, at most 256 and [`MAX_KEPT`] bytes each) | `the_inner_refusals_reach_the_outer_record`, `a_shared_commands_nested_runs_are_in_its_own_exit_event` |

use std::ffi::OsString;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::outcome::Outcome;
use crate::policy::{ResolvedPolicy, ResourceLimits};
use crate::running::{RunError, RunRequest};

/// The environment variable naming the inherited nest socket's fd.
pub const NEST_FD_ENV: &str = "SANDBOX_NEST_FD";
/// Nested runs one outer run serves at once, its nested runs' own (at any
/// depth) counted with them; more are refused.
pub const MAX_NESTED: usize = 8;
/// The largest request a nested run may send, in bytes.
pub const MAX_REQUEST: usize = 4 << 20;

/// What the runner answers first on a connection it accepts.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
const HELLO: &[u8; 15] = b"sandbox-nest 1\n";

/// The most trusted files a nested request names.
pub const MAX_TRUSTED_FILES: usize = 256;
/// The most entries of each list of a nested request's policy (write
/// paths, read and write denials, network rules, request rules, unix
/// sockets, environment names), and of the directories of its `PATH`.
pub const MAX_LIST: usize = 256;
/// The most bytes of one path a nested request names (`PATH_MAX`), and of
/// all its policy's paths together: resolving a path walks it, and the
/// runner's work checking a request stays bounded.
pub const MAX_PATH: usize = 4096;
/// See [`MAX_PATH`].
pub const MAX_POLICY_PATHS: usize = 64 << 10;

/// The most bytes (as JSON) of one nested run's record as the outer runner
/// keeps it and answers it, beyond its policy and enforcement report
/// (which the request's bounds bound): its `argv`, refusals, git
/// directories and own nested records are cut to fit (`bound_record`),
/// saying how much was left out.
pub const MAX_RECORD: usize = 256 << 10;
/// The most bytes (as JSON) of the nested records one outer record keeps
/// (and, in a session's shared launch, one command's exit event): records
/// past it are counted (`omitted.nested`), not kept.
pub const MAX_KEPT: usize = 4 << 20;
/// The largest answer a nested run reads: a record bounded by
/// [`MAX_RECORD`] plus a policy and report bounded by the request
/// ([`MAX_REQUEST`]) fit with room to spare.
pub const MAX_REPLY: usize = 16 << 20;

/// The most bytes of `argv` a bounded record keeps.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
const KEPT_ARGV: usize = 16 << 10;
/// The most bytes of refusals (targets, reasons) a bounded record keeps.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
const KEPT_REFUSALS: usize = 128 << 10;
/// The most bytes of git directories' paths a bounded record keeps.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
const KEPT_GIT_DIRS: usize = 32 << 10;
/// The most bytes of one text of the classification (a reason, a line of
/// evidence) a bounded record keeps.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
const KEPT_TEXT: usize = 8 << 10;

/// `s` cut to at most `max` bytes (at a character boundary); how many
/// bytes were cut.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn cut(s: &mut String, max: usize) -> usize {
    if s.len() <= max {
        return 0;
    }
    let mut at = max;
    while !s.is_char_boundary(at) {
        at -= 1;
    }
    let cut = s.len() - at;
    s.truncate(at);
    cut
}

/// Bounds one nested run's record as its outer runner keeps and answers
/// it (F2): `argv` keeps its first [`KEPT_ARGV`] bytes, the refusals and
/// git directories those that fit their budget, each text of the
/// classification its first [`KEPT_TEXT`] bytes, and its own nested
/// records those that fit [`MAX_RECORD`]; what is left out is counted
/// (`omitted`, `mediation.omitted`, `mediation.git_dirs_unnamed`). Returns
/// the record's size as JSON.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) fn bound_record(outcome: &mut Outcome) -> usize {
    // argv: the first arguments, the last one kept cut short.
    let mut left = KEPT_ARGV;
    let mut kept = 0;
    for arg in &mut outcome.argv {
        if left == 0 {
            break;
        }
        let cut_off = cut(arg, left);
        outcome.omitted.argv_bytes += cut_off;
        left -= arg.len();
        kept += 1;
    }
    if kept < outcome.argv.len() {
        let dropped = outcome.argv.split_off(kept);
        outcome.omitted.argv_args += dropped.len();
        outcome.omitted.argv_bytes += dropped.iter().map(String::len).sum::<usize>();
    }
    if let Some(m) = &mut outcome.mediation {
        // A refusal's JSON beyond its texts is under 100 bytes.
        let cost = |c: &sandbox_core::MediatedCall| {
            c.syscall.len() + c.target.len() + c.reason.len() + 100
        };
        let mut spent = 0;
        let fit = m
            .refused
            .iter()
            .take_while(|c| {
                spent += cost(c);
                spent <= KEPT_REFUSALS
            })
            .count();
        let dropped = m.refused.len() - fit;
        m.refused.truncate(fit);
        m.omitted += dropped;
        let mut spent = 0;
        let fit = m
            .git_dirs_made
            .iter()
            .take_while(|d| {
                spent += d.as_os_str().len() + 8;
                spent <= KEPT_GIT_DIRS
            })
            .count();
        let dropped = m.git_dirs_made.len() - fit;
        m.git_dirs_made.truncate(fit);
        m.git_dirs_unnamed += dropped;
        if let Some(error) = &mut m.error {
            cut(error, KEPT_TEXT);
        }
    }
    match &mut outcome.classification {
        crate::outcome::Classification::SandboxDenial { evidence } => {
            evidence.truncate(16);
            for line in evidence {
                cut(line, KEPT_TEXT);
            }
        }
        crate::outcome::Classification::RunnerFailure { reason }
        | crate::outcome::Classification::Cancelled { reason } => {
            cut(reason, KEPT_TEXT);
        }
        crate::outcome::Classification::LimitExceeded { detail, .. } => {
            cut(detail, KEPT_TEXT);
        }
        _ => {}
    }
    // Its own nested records (each bounded when its runner kept it):
    // those that fit, in order.
    let nested = std::mem::take(&mut outcome.nested);
    let mut size = json_len(outcome);
    for record in nested {
        let len = json_len(&record) + 1;
        if size + len <= MAX_RECORD {
            size += len;
            outcome.nested.push(record);
        } else {
            outcome.omitted.nested += 1;
        }
    }
    json_len(outcome)
}

/// The size of `value` as JSON (0 when it cannot be written).
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn json_len<T: Serialize>(value: &T) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    match serde_json::to_writer(&mut count, value) {
        Ok(()) => count.0,
        Err(_) => 0,
    }
}

/// Nested runs' records kept, within [`MAX_KEPT`] bytes, and how many were
/// left out.
#[derive(Debug, Default)]
pub(crate) struct Kept {
    /// The records kept, in the order their runs ended.
    pub(crate) records: Vec<Outcome>,
    /// Their size as JSON.
    bytes: usize,
    /// Records left out.
    pub(crate) omitted: usize,
}

impl Kept {
    /// Keeps `record` (`size` bytes as JSON) if it fits: at most `max`
    /// records and [`MAX_KEPT`] bytes; counts it left out otherwise.
    /// Whether it was kept.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    fn keep(&mut self, record: Outcome, size: usize, max: usize) -> bool {
        if self.records.len() < max && self.bytes + size <= MAX_KEPT {
            self.bytes += size;
            self.records.push(record);
            true
        } else {
            self.omitted += 1;
            false
        }
    }

    /// Puts these records in `outcome` (`nested`, `omitted.nested`).
    pub(crate) fn into_outcome(self, outcome: &mut Outcome) {
        outcome.nested = self.records;
        outcome.omitted.nested += self.omitted;
    }
}

/// A nested run's request, as sent over the connection (the policy a
/// [`ResolvedPolicy`]; the runner reads it as the [`SandboxPolicy`] it
/// serialises to and resolves it only once its lists are within bounds).
///
/// [`SandboxPolicy`]: sandbox_core::SandboxPolicy
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire<P> {
    argv: Vec<Vec<u8>>,
    cwd: Option<Vec<u8>>,
    env: Vec<(Vec<u8>, Vec<u8>)>,
    env_overrides: Vec<(Vec<u8>, Vec<u8>)>,
    policy: Option<P>,
    limits: ResourceLimits,
    allow_unlimited: bool,
    observe_writes: bool,
    require_full: bool,
    echo_stderr: bool,
    trusted_files: Vec<PathBuf>,
}

/// The runner's answer to a request.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, tag = "reply", rename_all = "kebab-case")]
enum Reply {
    /// The nested run's record.
    Outcome { outcome: Box<Outcome> },
    /// The run did not start: why, and the exit code a run would give.
    Refused { reason: String, exit_code: i32 },
}

/// A valid nest capability: a connection the outer runner accepted.
#[derive(Debug)]
pub struct Capability {
    #[cfg(target_os = "linux")]
    conn: std::os::fd::OwnedFd,
}

impl Capability {
    /// The capability this process inherited, if it runs confined (under
    /// a seccomp filter with `no_new_privs`, as every process of a confined
    /// run does) and [`NEST_FD_ENV`] names a `SOCK_SEQPACKET` UNIX socket
    /// whose peer answers as an outer runner (`None` otherwise: the variable
    /// alone changes nothing). The named fd is made close-on-exec.
    ///
    /// An unconfined process never looks at the variable, so no hello (and
    /// no request) goes to whatever socket it names: a peer that answered
    /// as a runner would otherwise get the request and could run it
    /// unconfined while the user is told it ran confined.
    pub fn find() -> Option<Capability> {
        #[cfg(target_os = "linux")]
        {
            if !imp::confined() {
                return None;
            }
            let fd: i32 = std::env::var(NEST_FD_ENV).ok()?.trim().parse().ok()?;
            imp::connect(fd).map(|conn| Capability { conn })
        }
        #[cfg(not(target_os = "linux"))]
        None
    }

    /// Has the outer runner run `req` (its argv, cwd, environment,
    /// policy, limits; this process's stdin, stdout and, when
    /// `req.echo_stderr`, stderr) and waits for its record. A stop signal
    /// ([`crate::runner::stop_runs_on`]) is passed on to the nested
    /// command's process group; if the run has not ended `req.grace` later,
    /// the wait ends with [`RunError::Stopped`], which closes the
    /// connection, and the outer runner then ends the nested run.
    pub fn run(self, req: &RunRequest) -> Result<Outcome, RunError> {
        use std::os::unix::ffi::OsStrExt;
        let bytes = |s: &OsString| s.as_bytes().to_vec();
        let pairs = |v: &[(OsString, OsString)]| -> Vec<(Vec<u8>, Vec<u8>)> {
            v.iter().map(|(k, v)| (bytes(k), bytes(v))).collect()
        };
        let env = req
            .env
            .clone()
            .unwrap_or_else(|| std::env::vars_os().collect());
        let cwd = match &req.cwd {
            Some(cwd) => Some(cwd.clone()),
            None => std::env::current_dir().ok(),
        };
        let wire = Wire {
            argv: req.argv.iter().map(bytes).collect(),
            cwd: cwd.map(|c| c.as_os_str().as_bytes().to_vec()),
            env: pairs(&env),
            env_overrides: pairs(&req.env_overrides),
            policy: req.policy.clone(),
            limits: req.limits,
            allow_unlimited: req.allow_unlimited,
            observe_writes: req.observe_writes,
            require_full: req.require_full,
            echo_stderr: req.echo_stderr,
            trusted_files: req.trusted_files.iter().map(|(_, p)| p.clone()).collect(),
        };
        let json = serde_json::to_vec(&wire).map_err(|e| nest_failed(e.to_string()))?;
        #[cfg(target_os = "linux")]
        {
            let reply = imp::exchange(&self.conn, &json, req.grace)?;
            match serde_json::from_slice::<Reply>(&reply)
                .map_err(|e| nest_failed(format!("the outer runner's answer is not valid: {e}")))?
            {
                Reply::Outcome { outcome } => Ok(*outcome),
                Reply::Refused { reason, exit_code } => Err(RunError::Nested { reason, exit_code }),
            }
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (json, self);
            Err(nest_failed("nested runs are served on Linux only".into()))
        }
    }
}

fn nest_failed(reason: String) -> RunError {
    RunError::Nested {
        reason: format!("the nested run failed: {reason}"),
        exit_code: crate::running::EXIT_SANDBOX,
    }
}

/// The outer runner's side: the nest socket handed to one confined run and
/// the nested runs served on it.
#[cfg(target_os = "linux")]
pub(crate) use imp::Door;
#[cfg(target_os = "linux")]
pub(crate) use imp::{publish_commands, Commands};

/// No nested runs are served here.
#[cfg(not(target_os = "linux"))]
pub(crate) enum Door {}

#[cfg(not(target_os = "linux"))]
impl Door {
    fn open() -> std::io::Result<Door> {
        Err(std::io::ErrorKind::Unsupported.into())
    }
    pub(crate) fn handed(&self) -> std::os::fd::RawFd {
        match *self {}
    }
    pub(crate) fn main(&self) -> &std::sync::OnceLock<libc::pid_t> {
        match *self {}
    }
    pub(crate) fn groups(&self) -> &std::sync::OnceLock<sandbox_launch::RunGroups> {
        match *self {}
    }
    pub(crate) fn end_nested(&self) {
        match *self {}
    }
    fn finished(&self) {
        match *self {}
    }
    fn stop(&self) {
        match *self {}
    }
    fn serve(&self, _: &Outer<'_>) {
        match *self {}
    }
    fn take(&self) -> Kept {
        match *self {}
    }
}

/// What a nested run inherits from the outer one.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) struct Outer<'a> {
    /// The outer run's backend.
    pub(crate) backend: &'a dyn sandbox_core::Backend,
    /// The outer run's policy (its trusted state protected, before its
    /// egress admits the proxy).
    pub(crate) policy: &'a ResolvedPolicy,
    /// When the outer run times out.
    pub(crate) deadline: std::time::Instant,
    /// The outer run's request (limits, grace, trusted files, egress).
    pub(crate) request: &'a RunRequest,
}

/// The groups of the run this thread runs a nested run of (set while the
/// outer runner's thread runs it): the nested run's cgroups are made inside
/// them, so the outer run's limits bound it too.
pub(crate) fn within() -> Option<sandbox_launch::RunGroups> {
    #[cfg(target_os = "linux")]
    {
        imp::WITHIN.with(|w| w.borrow().clone())
    }
    #[cfg(not(target_os = "linux"))]
    None
}

/// The nest socket for a run confined by `backend` under `policy` (Linux,
/// `landlock`), or `None`: the run then gets no capability.
pub(crate) fn door_for(
    backend: &dyn sandbox_core::Backend,
    policy: Option<&ResolvedPolicy>,
) -> Option<Door> {
    if policy.is_none() || backend.name() != "landlock" {
        return None;
    }
    match Door::open() {
        Ok(door) => Some(door),
        Err(e) => {
            tracing::debug!(error = %e, "no nest socket for this run");
            None
        }
    }
}

/// Runs `launch` while `door` (if any) serves nested runs; once it returns,
/// every nested run still going is ended and waited for, and their records
/// come back with `launch`'s result.
pub(crate) fn serving<R: Send>(
    nest: Option<(&Door, Outer<'_>)>,
    launch: impl FnOnce() -> R + Send,
) -> (R, Kept) {
    let Some((door, outer)) = nest else {
        return (launch(), Kept::default());
    };
    let ran = std::thread::scope(|scope| {
        let outer = &outer;
        scope.spawn(move || {
            door.serve(outer);
            door.finished();
        });
        let ran = launch();
        door.stop();
        ran
    });
    (ran, door.take())
}

#[cfg(target_os = "linux")]
mod imp {
    use std::ffi::OsString;
    use std::io;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
    use std::os::unix::ffi::OsStringExt;
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex, OnceLock};
    use std::time::{Duration, Instant};

    use super::{
        Kept, Outer, Reply, Wire, HELLO, MAX_LIST, MAX_NESTED, MAX_PATH, MAX_POLICY_PATHS,
        MAX_REPLY, MAX_REQUEST, MAX_TRUSTED_FILES,
    };
    use crate::policy::ResolvedPolicy;
    use crate::running::{RunError, RunRequest, EXIT_SANDBOX};

    /// How long a nested run waits for the outer runner's hello.
    const HELLO_WAIT: Duration = Duration::from_secs(10);
    /// How long the runner waits to send a reply to a nested run that does
    /// not read it.
    const SEND_WAIT: Duration = Duration::from_secs(10);

    fn cvt(rc: libc::c_int) -> io::Result<libc::c_int> {
        if rc < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(rc)
        }
    }

    fn pair(kind: libc::c_int) -> io::Result<(OwnedFd, OwnedFd)> {
        let mut fds = [0; 2];
        // SAFETY: socketpair fills two fds on success.
        cvt(unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                kind | libc::SOCK_CLOEXEC,
                0,
                fds.as_mut_ptr(),
            )
        })?;
        // SAFETY: fresh fds owned here alone.
        Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
    }

    fn sockopt(fd: RawFd, name: libc::c_int) -> Option<libc::c_int> {
        let mut value: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: value and len are valid for getsockopt's writes.
        let rc = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                name,
                (&mut value as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        (rc == 0).then_some(value)
    }

    /// Sends `data` with `fds` attached (`SCM_RIGHTS`), all of it.
    fn send(sock: RawFd, data: &[u8], fds: &[RawFd]) -> io::Result<()> {
        let mut sent = 0;
        let mut fds = fds;
        while sent < data.len() || !fds.is_empty() {
            let rest = &data[sent..];
            let mut iov = libc::iovec {
                iov_base: rest.as_ptr() as *mut libc::c_void,
                iov_len: rest.len(),
            };
            // SAFETY: CMSG_SPACE is arithmetic.
            let space = unsafe { libc::CMSG_SPACE(std::mem::size_of_val(fds) as u32) } as usize;
            let mut control = vec![0u8; if fds.is_empty() { 0 } else { space }];
            // SAFETY: msghdr is plain data, all-zero valid.
            let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            if !fds.is_empty() {
                msg.msg_control = control.as_mut_ptr().cast();
                msg.msg_controllen = control.len() as _;
                // SAFETY: the control buffer holds one header of this size.
                unsafe {
                    let cmsg = libc::CMSG_FIRSTHDR(&msg);
                    (*cmsg).cmsg_level = libc::SOL_SOCKET;
                    (*cmsg).cmsg_type = libc::SCM_RIGHTS;
                    (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of_val(fds) as u32) as _;
                    std::ptr::copy_nonoverlapping(
                        fds.as_ptr(),
                        libc::CMSG_DATA(cmsg).cast::<RawFd>(),
                        fds.len(),
                    );
                }
            }
            // SAFETY: msg points at live buffers for the call.
            let n = unsafe { libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) };
            if n < 0 {
                let err = io::Error::last_os_error();
                if err.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(err);
            }
            sent += n as usize;
            fds = &[];
        }
        Ok(())
    }

    /// One `recvmsg` into `buf`, taking up to `max_fds` fds (more, or a
    /// truncated control message, is an error; the fds are closed).
    fn recv(sock: RawFd, buf: &mut [u8], max_fds: usize) -> io::Result<(usize, Vec<OwnedFd>)> {
        recv_with(sock, buf, max_fds, 0)
    }

    /// [`recv`] with `flags` added to `recvmsg`'s (`MSG_DONTWAIT`).
    fn recv_with(
        sock: RawFd,
        buf: &mut [u8],
        max_fds: usize,
        flags: libc::c_int,
    ) -> io::Result<(usize, Vec<OwnedFd>)> {
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // SAFETY: CMSG_SPACE is arithmetic.
        let space = unsafe { libc::CMSG_SPACE((max_fds.max(1) * 4) as u32) } as usize;
        let mut control = vec![0u8; space];
        loop {
            // SAFETY: msghdr is plain data, all-zero valid.
            let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = control.as_mut_ptr().cast();
            msg.msg_controllen = control.len() as _;
            // SAFETY: msg points at live buffers for the call.
            let n = unsafe { libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC | flags) };
            if n < 0 {
                let err = io::Error::last_os_error();
                if err.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(err);
            }
            let mut fds = Vec::new();
            // SAFETY: walking the control messages the kernel wrote.
            unsafe {
                let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
                while !cmsg.is_null() {
                    if (*cmsg).cmsg_level == libc::SOL_SOCKET
                        && (*cmsg).cmsg_type == libc::SCM_RIGHTS
                    {
                        let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                        let len = (*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                        for i in 0..len / 4 {
                            let fd = std::ptr::read_unaligned(data.add(i));
                            fds.push(OwnedFd::from_raw_fd(fd));
                        }
                    }
                    cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
                }
            }
            if msg.msg_flags & libc::MSG_CTRUNC != 0 || fds.len() > max_fds {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "more fds than a nested request carries",
                ));
            }
            return Ok((n as usize, fds));
        }
    }

    /// Waits until `fd` polls readable (or hung up): `Ok(true)`; `Ok(false)`
    /// when `until` passes or one of `stops` (at most two) polls readable
    /// or hung up first.
    fn readable(fd: RawFd, stops: &[RawFd], until: Option<Instant>) -> io::Result<bool> {
        loop {
            let ms = match until {
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Ok(false);
                    }
                    i32::try_from(left.as_millis() + 1).unwrap_or(i32::MAX)
                }
                None => -1,
            };
            let at = |i: usize| stops.get(i).copied().unwrap_or(-1);
            let mut pfds = [fd, at(0), at(1)].map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            });
            // SAFETY: three pollfds on the stack (a negative fd is ignored).
            let n = unsafe { libc::poll(pfds.as_mut_ptr(), 3, ms) };
            if n < 0 {
                let err = io::Error::last_os_error();
                if err.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(err);
            }
            if pfds[1].revents != 0 || pfds[2].revents != 0 {
                return Ok(false);
            }
            if pfds[0].revents != 0 {
                return Ok(true);
            }
        }
    }

    /// Reads one frame (a little-endian u32 length, then that many bytes,
    /// at most `max`) with up to `max_fds` fds on its first bytes.
    fn read_frame(
        sock: RawFd,
        stops: &[RawFd],
        max_fds: usize,
        max: usize,
    ) -> io::Result<(Vec<u8>, Vec<OwnedFd>)> {
        let eof = || io::Error::new(io::ErrorKind::UnexpectedEof, "the connection closed");
        let mut head = [0u8; 4];
        let mut got = 0;
        let mut fds = Vec::new();
        while got < 4 {
            if !readable(sock, stops, None)? {
                return Err(eof());
            }
            let (n, more) = recv(sock, &mut head[got..], max_fds - fds.len().min(max_fds))?;
            if n == 0 {
                return Err(eof());
            }
            fds.extend(more);
            got += n;
        }
        let len = u32::from_le_bytes(head) as usize;
        if len > max {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("the frame is larger than {max} bytes"),
            ));
        }
        let mut body = vec![0u8; len];
        let mut got = 0;
        while got < len {
            if !readable(sock, stops, None)? {
                return Err(eof());
            }
            let (n, more) = recv(sock, &mut body[got..], 0)?;
            if n == 0 || !more.is_empty() {
                return Err(eof());
            }
            got += n;
        }
        Ok((body, fds))
    }

    fn write_frame(sock: RawFd, body: &[u8], fds: &[RawFd]) -> io::Result<()> {
        let len = u32::try_from(body.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "frame too large"))?;
        let mut data = Vec::with_capacity(body.len() + 4);
        data.extend_from_slice(&len.to_le_bytes());
        data.extend_from_slice(body);
        send(sock, &data, fds)
    }

    // ---- the nested run's side ----

    /// Whether this process runs as a confined run's processes do: under
    /// a seccomp filter (`Seccomp: 2` with at least one filter in
    /// `/proc/self/status`, proc(5)) with `no_new_privs` set. Neither can be
    /// undone (seccomp(2), prctl(2) `PR_SET_NO_NEW_PRIVS`), so a process a
    /// run started cannot appear unconfined; a process outside any run that
    /// is filtered (a container's profile) still needs the real socket.
    /// An unreadable status reads as unconfined: the nested run confines
    /// itself.
    pub(super) fn confined() -> bool {
        let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
            return false;
        };
        let field = |name: &str| {
            status.lines().find_map(|l| {
                l.strip_prefix(name)
                    .and_then(|v| v.strip_prefix(':'))
                    .map(str::trim)
            })
        };
        // `Seccomp_filters` is shown since Linux 5.9.
        let filters = match field("Seccomp_filters") {
            Some(n) => n.parse::<u32>().is_ok_and(|n| n > 0),
            None => true,
        };
        field("Seccomp") == Some("2") && filters && field("NoNewPrivs") == Some("1")
    }

    /// The hello exchange on the fd `door` names: a connection the outer
    /// runner accepted, or `None`.
    pub(super) fn connect(door: RawFd) -> Option<OwnedFd> {
        if door < 3
            || sockopt(door, libc::SO_DOMAIN) != Some(libc::AF_UNIX)
            || sockopt(door, libc::SO_TYPE) != Some(libc::SOCK_SEQPACKET)
        {
            return None;
        }
        // The inner run's own children do not inherit it.
        // SAFETY: fcntl with integer arguments.
        unsafe { libc::fcntl(door, libc::F_SETFD, libc::FD_CLOEXEC) };
        let (mine, theirs) = pair(libc::SOCK_STREAM).ok()?;
        send(door, b"hello", &[theirs.as_raw_fd()]).ok()?;
        drop(theirs);
        let mut got = Vec::new();
        let until = Instant::now() + HELLO_WAIT;
        while got.len() < HELLO.len() {
            if !readable(mine.as_raw_fd(), &[], Some(until)).ok()? {
                return None;
            }
            let mut buf = [0u8; 16];
            let want = HELLO.len() - got.len();
            let (n, fds) = recv(mine.as_raw_fd(), &mut buf[..want], 0).ok()?;
            if n == 0 || !fds.is_empty() {
                return None;
            }
            got.extend_from_slice(&buf[..n]);
        }
        (got == HELLO).then_some(mine)
    }

    /// Sends the request with this process's stdio, waits for the answer.
    pub(super) fn exchange(
        conn: &OwnedFd,
        json: &[u8],
        grace: Duration,
    ) -> Result<Vec<u8>, RunError> {
        let failed =
            |e: io::Error| super::nest_failed(format!("the outer runner's connection failed: {e}"));
        if let Err(e) = write_frame(conn.as_raw_fd(), json, &[0, 1, 2]) {
            // A runner that refuses at once (too many nested runs) answers
            // and closes before the request is in.
            if !matches!(e.raw_os_error(), Some(libc::EPIPE | libc::ECONNRESET)) {
                return Err(failed(e));
            }
            return read_frame(conn.as_raw_fd(), &[], 0, MAX_REPLY)
                .map(|(reply, _)| reply)
                .map_err(|_| failed(e));
        }
        // A stop signal goes on to the nested command, as a run passes it
        // on; past the grace the connection closes, which ends the run.
        let mut signalled: Option<(i32, Instant)> = None;
        loop {
            if let Some(signal) = sandbox_launch::stop_requested() {
                match signalled {
                    None => {
                        let byte = u8::try_from(signal).unwrap_or(0);
                        let _ = send(conn.as_raw_fd(), &[byte], &[]);
                        signalled = Some((signal, Instant::now()));
                    }
                    Some((signal, at)) if at.elapsed() >= grace => {
                        return Err(RunError::Stopped { signal });
                    }
                    Some(_) => {}
                }
            }
            let until = Instant::now() + Duration::from_millis(100);
            if readable(conn.as_raw_fd(), &[], Some(until)).map_err(failed)? {
                break;
            }
        }
        // The request is in: the command may have run, whatever happens to
        // the answer (F4).
        let (reply, _) = read_frame(conn.as_raw_fd(), &[], 0, MAX_REPLY).map_err(|e| {
            super::nest_failed(format!(
                "its record could not be read from the outer runner ({e}); the command may \
                 have run: the outer run's record says"
            ))
        })?;
        Ok(reply)
    }

    // ---- the outer runner's side ----

    /// The nest socket of one confined run, and what its nested runs left.
    pub(crate) struct Door {
        served: OwnedFd,
        handed: OwnedFd,
        stop_read: OwnedFd,
        stop_write: OwnedFd,
        /// The run's main process, once started.
        main: OnceLock<libc::pid_t>,
        /// The counts of the whole tree this run belongs to: shared with
        /// the doors of its nested runs (and theirs), so nesting deeper
        /// serves no more at once than [`MAX_NESTED`] and keeps no more
        /// records than [`MAX_RECORDS`].
        tree: Arc<Tree>,
        /// The records kept for this run's own record; none when its
        /// commands' records are taken one command at a time (a shared
        /// launch's door: [`Commands::take`] has them, one copy only).
        nested: Mutex<Kept>,
        /// Whether [`Commands::take`] has this door's records.
        per_command: bool,
        /// Where the run's processes and limits are held, once made.
        groups: OnceLock<sandbox_launch::RunGroups>,
        /// Whether [`Door::serve`] has returned (every nested run ended).
        ended: (Mutex<bool>, std::sync::Condvar),
        /// The nested runs alive, to end them between commands.
        commands: Arc<Commands>,
    }

    /// Nested runs kept in the records of one tree of runs (the outermost
    /// run's `nested`, and theirs); the nested run's own record still goes
    /// to its requester.
    const MAX_RECORDS: usize = 256;

    /// What one tree of nested runs counts.
    #[derive(Default)]
    struct Tree {
        /// Nested runs alive.
        alive: AtomicUsize,
        /// Nested runs' records kept (or left out).
        records: AtomicUsize,
        /// The bytes (as JSON) of the records kept.
        bytes: AtomicUsize,
    }

    thread_local! {
        /// The outer run's groups, while this thread runs a nested run
        /// ([`Door::run`]): its launch makes its cgroups inside them.
        pub(super) static WITHIN: std::cell::RefCell<Option<sandbox_launch::RunGroups>> =
            const { std::cell::RefCell::new(None) };
        /// The tree's count of nested runs, while this thread runs a nested
        /// run ([`Door::run`]): the door that run opens shares it.
        static TREE: std::cell::RefCell<Option<Arc<Tree>>> =
            const { std::cell::RefCell::new(None) };
        /// Where the next door opened on this thread puts its
        /// [`Commands`] (a shared launch's zygote thread, #45).
        static PUBLISH: std::cell::RefCell<Option<Arc<OnceLock<Arc<Commands>>>>> =
            const { std::cell::RefCell::new(None) };
    }

    /// The next door opened on this thread (the run this thread starts)
    /// puts its [`Commands`] in `slot`.
    pub(crate) fn publish_commands(slot: Arc<OnceLock<Arc<Commands>>>) {
        PUBLISH.with(|p| *p.borrow_mut() = Some(slot));
    }

    /// The nested runs a door serves now, for a run whose commands come one
    /// after another (a session's shared launch, #45): [`Commands::end_all`]
    /// ends those of the command that ended, as its outer run's end would.
    ///
    /// A connection counts from the moment the door accepts it (before its
    /// hello, its request's reading and checking), and holds the read end
    /// of the pipe of the command it came in (its generation): the sweep
    /// closes that pipe's write end, takes in (and closes) the connections
    /// still queued on the nest socket, and waits until no connection is
    /// left, so a request of the command that ended is refused wherever it
    /// is (never started), and one that started is ended.
    pub(crate) struct Commands {
        /// A pipe whose write end closes to end the connections that hold
        /// a copy of its read end (made when a connection is accepted and
        /// there is none), and how many connections are alive.
        state: Mutex<(Option<(OwnedFd, OwnedFd)>, usize)>,
        changed: std::sync::Condvar,
        /// The door's end of the nest socket (a copy): the sweep takes the
        /// connections queued on it, under `state`'s lock, which the door
        /// also holds to take one.
        served: Option<OwnedFd>,
        /// The records of the nested runs ended since the last
        /// [`Commands::take`] (at most [`MAX_RECORDS`] and
        /// [`super::MAX_KEPT`] bytes), with a count of those left out.
        records: Mutex<Kept>,
    }

    /// One accepted connection, counted until dropped: the read end of
    /// its generation's pipe, which polls hung up once the command it came
    /// in has ended ([`Commands::end_all`]).
    pub(super) struct Admitted<'a> {
        commands: &'a Commands,
        between: OwnedFd,
    }

    impl Admitted<'_> {
        /// The fd that polls hung up when the connection's command ended.
        fn between(&self) -> RawFd {
            self.between.as_raw_fd()
        }

        /// Whether the command this connection came in has ended.
        fn ended(&self) -> bool {
            polls(self.between.as_raw_fd())
        }
    }

    impl Drop for Admitted<'_> {
        fn drop(&mut self) {
            self.commands.leave();
        }
    }

    impl Commands {
        fn new(served: Option<OwnedFd>) -> Commands {
            Commands {
                state: Mutex::new((None, 0)),
                changed: std::sync::Condvar::new(),
                served,
                records: Mutex::new(Kept::default()),
            }
        }

        /// Takes one connection queued on `served` (never waiting), and
        /// counts it in the current generation: `None` when none is queued
        /// or no pipe could be made (the connection is then closed: a run
        /// that could not be ended between commands is not started).
        fn accept(&self, served: RawFd) -> Option<(Admitted<'_>, OwnedFd)> {
            let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
            let mut buf = [0u8; 16];
            let (_, mut fds) = recv_with(served, &mut buf, 1, libc::MSG_DONTWAIT).ok()?;
            let conn = fds.pop()?;
            if st.0.is_none() {
                let mut p = [0; 2];
                // SAFETY: pipe2 fills two fds on success.
                if unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) } == 0 {
                    // SAFETY: fresh fds owned here alone.
                    st.0 =
                        Some(unsafe { (OwnedFd::from_raw_fd(p[0]), OwnedFd::from_raw_fd(p[1])) });
                }
            }
            let between = st.0.as_ref().and_then(|(r, _)| r.try_clone().ok())?;
            st.1 += 1;
            Some((
                Admitted {
                    commands: self,
                    between,
                },
                conn,
            ))
        }

        /// The records of the nested runs ended since the last call.
        pub(crate) fn take(&self) -> Kept {
            std::mem::take(&mut *self.records.lock().unwrap_or_else(|p| p.into_inner()))
        }

        /// A connection has ended.
        fn leave(&self) {
            let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
            st.1 = st.1.saturating_sub(1);
            self.changed.notify_all();
        }

        /// Ends every nested run of the command that ended (as on a
        /// timeout: SIGTERM, grace, SIGKILL), refuses every request of it
        /// not yet started (accepted, being read or checked, or still
        /// queued on the nest socket), and waits until no connection is
        /// left: nothing the command asked for runs after this returns.
        pub(crate) fn end_all(&self) {
            let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
            // Closing the write end: every copy of the read end polls
            // POLLHUP (pipe(7)).
            st.0 = None;
            // Connections sent before the command ended and not yet taken:
            // closed unanswered (the door takes one only under this lock).
            if let Some(served) = &self.served {
                let mut buf = [0u8; 16];
                let mut budget = 4096;
                while budget > 0 {
                    budget -= 1;
                    match recv_with(served.as_raw_fd(), &mut buf, 1, libc::MSG_DONTWAIT) {
                        // Each datagram's fds are closed as they go.
                        Ok(_) => {}
                        Err(e) if e.kind() == io::ErrorKind::InvalidData => {}
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(_) => break,
                    }
                }
            }
            while st.1 > 0 {
                st = match self.changed.wait_timeout(st, Duration::from_millis(100)) {
                    Ok((g, _)) => g,
                    Err(p) => p.into_inner().0,
                };
                // A connection accepted meanwhile is of the next generation
                // only if it came after this sweep; close its pipe too.
                st.0 = None;
            }
        }
    }

    impl Door {
        /// A nest socket pair and the pipe that stops its service.
        pub(super) fn open() -> io::Result<Door> {
            let (served, handed) = pair(libc::SOCK_SEQPACKET)?;
            let mut p = [0; 2];
            // SAFETY: pipe2 fills two fds on success.
            cvt(unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) })?;
            // SAFETY: fresh fds owned here alone.
            let (stop_read, stop_write) =
                unsafe { (OwnedFd::from_raw_fd(p[0]), OwnedFd::from_raw_fd(p[1])) };
            let commands = Arc::new(Commands::new(Some(served.try_clone()?)));
            let mut per_command = false;
            if let Some(slot) = PUBLISH.with(|p| p.borrow_mut().take()) {
                per_command = slot.set(Arc::clone(&commands)).is_ok();
            }
            Ok(Door {
                commands,
                served,
                handed,
                stop_read,
                stop_write,
                main: OnceLock::new(),
                tree: TREE.with(|tree| tree.borrow().clone()).unwrap_or_default(),
                nested: Mutex::new(Kept::default()),
                per_command,
                groups: OnceLock::new(),
                ended: (Mutex::new(false), std::sync::Condvar::new()),
            })
        }

        /// The fd the command inherits.
        pub(crate) fn handed(&self) -> RawFd {
            self.handed.as_raw_fd()
        }

        /// Where the launch puts the run's main pid.
        pub(crate) fn main(&self) -> &OnceLock<libc::pid_t> {
            &self.main
        }

        /// Where the launch puts the run's groups.
        pub(crate) fn groups(&self) -> &OnceLock<sandbox_launch::RunGroups> {
            &self.groups
        }

        /// Ends every nested run and waits until they have ended: their
        /// cgroups are inside the run's, which go next.
        pub(crate) fn end_nested(&self) {
            self.stop();
            let (done, changed) = &self.ended;
            let mut done = done.lock().unwrap_or_else(|p| p.into_inner());
            while !*done {
                done = changed.wait(done).unwrap_or_else(|p| p.into_inner());
            }
        }

        /// [`Door::serve`] has returned.
        pub(super) fn finished(&self) {
            let (done, changed) = &self.ended;
            *done.lock().unwrap_or_else(|p| p.into_inner()) = true;
            changed.notify_all();
        }

        /// Ends the service: nested runs still going end (as on a timeout),
        /// and [`Door::serve`] returns once they have.
        pub(super) fn stop(&self) {
            // One byte, never read: the pipe stays readable for every poller.
            // SAFETY: write(2) of one byte from a static.
            unsafe { libc::write(self.stop_write.as_raw_fd(), b"x".as_ptr().cast(), 1) };
        }

        /// The records of the nested runs served.
        pub(super) fn take(&self) -> Kept {
            match self.nested.lock() {
                Ok(mut nested) => std::mem::take(&mut *nested),
                Err(poisoned) => std::mem::take(&mut *poisoned.into_inner()),
            }
        }

        /// Serves nested runs until [`Door::stop`]; returns when every one
        /// it started has ended.
        pub(super) fn serve(&self, outer: &Outer<'_>) {
            std::thread::scope(|scope| loop {
                match readable(self.served.as_raw_fd(), &[self.stop_read.as_raw_fd()], None) {
                    Ok(true) => {}
                    _ => return,
                }
                // Counted from here, in the generation of the command that
                // sent it (taken under the lock the sweep holds).
                let Some((admitted, conn)) = self.commands.accept(self.served.as_raw_fd()) else {
                    continue;
                };
                if sockopt(conn.as_raw_fd(), libc::SO_DOMAIN) != Some(libc::AF_UNIX)
                    || sockopt(conn.as_raw_fd(), libc::SO_TYPE) != Some(libc::SOCK_STREAM)
                {
                    continue;
                }
                if !self.made_in_the_run(&conn) {
                    tracing::debug!("a nest request from outside the run was ignored");
                    continue;
                }
                if self.tree.alive.fetch_add(1, Ordering::AcqRel) >= MAX_NESTED {
                    self.tree.alive.fetch_sub(1, Ordering::AcqRel);
                    let _ = send(conn.as_raw_fd(), HELLO, &[]);
                    let reply = Reply::Refused {
                        reason: format!(
                            "the outer run already serves {MAX_NESTED} nested runs, the most \
                             it serves at once"
                        ),
                        exit_code: EXIT_SANDBOX,
                    };
                    let _ = reply_with(&conn, &reply);
                    continue;
                }
                scope.spawn(move || {
                    self.handle(admitted, conn, outer);
                    self.tree.alive.fetch_sub(1, Ordering::AcqRel);
                });
            })
        }

        /// Whether the process that made `conn`'s pair (`SO_PEERCRED`) is
        /// a process of the run: in its cgroup when it has one of its own,
        /// else in its process group (which the filter keeps every process
        /// of the run in).
        fn made_in_the_run(&self, conn: &OwnedFd) -> bool {
            // SAFETY: ucred is plain data, all-zero valid.
            let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
            let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
            // SAFETY: cred and len are valid for getsockopt's writes.
            let rc = unsafe {
                libc::getsockopt(
                    conn.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_PEERCRED,
                    (&mut cred as *mut libc::ucred).cast(),
                    &mut len,
                )
            };
            // The launch names the main process right after starting it; a
            // request may come first.
            let mut main = self.main.get().copied();
            for _ in 0..2000 {
                if main.is_some() || polls(self.stop_read.as_raw_fd()) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
                main = self.main.get().copied();
            }
            let Some(main) = main else {
                return false;
            };
            if rc != 0 || cred.pid <= 0 {
                return false;
            }
            let cgroup = |pid: &str| std::fs::read(format!("/proc/{pid}/cgroup")).ok();
            let (Some(own), Some(run), Some(peer)) = (
                cgroup("self"),
                cgroup(&main.to_string()),
                cgroup(&cred.pid.to_string()),
            ) else {
                return false;
            };
            if run != own {
                peer == run
            } else {
                // SAFETY: getpgid takes a pid and returns a pgid or -1.
                peer == run && unsafe { libc::getpgid(cred.pid) } == main
            }
        }

        /// One connection: hello, the request, the nested run, its record.
        fn handle(&self, admitted: Admitted<'_>, conn: OwnedFd, outer: &Outer<'_>) {
            // A requester that stops reading cannot hold this thread (and
            // so the end of the outer run) past a bounded send.
            send_wait(&conn, SEND_WAIT);
            if send(conn.as_raw_fd(), HELLO, &[]).is_err() {
                return;
            }
            // The request is read and checked only while the outer run and
            // the command it came in go on; it starts only if both still do.
            let stops = [self.stop_read.as_raw_fd(), admitted.between()];
            let Ok((body, stdio)) = read_frame(conn.as_raw_fd(), &stops, 3, MAX_REQUEST) else {
                return;
            };
            let checked = self.request(&body, stdio, outer);
            let reply = if polls(self.stop_read.as_raw_fd()) {
                Reply::Refused {
                    reason: "the nested run was not started: the outer run ended".into(),
                    exit_code: EXIT_SANDBOX,
                }
            } else if admitted.ended() {
                Reply::Refused {
                    reason: "the nested run was not started: the session command that asked for \
                             it ended"
                        .into(),
                    exit_code: EXIT_SANDBOX,
                }
            } else {
                match checked {
                    Ok(req) => self.run(&conn, req, &admitted, outer),
                    Err(refused) => refused,
                }
            };
            // Its record is in (`Commands::take`); the reply, which may wait
            // on a requester that does not read, holds no sweep, and once
            // the outer run has ended, not its end either (its requester,
            // a process of the outer run, is gone or going).
            drop(admitted);
            if polls(self.stop_read.as_raw_fd()) {
                send_wait(&conn, Duration::from_millis(100));
            }
            let _ = reply_with(&conn, &reply);
        }

        /// The nested run's request, validated, with the outer run's bounds,
        /// and the fds it holds: its stdin, stdout and stderr, then its
        /// working directory's (when it names one).
        fn request(
            &self,
            body: &[u8],
            mut stdio: Vec<OwnedFd>,
            outer: &Outer<'_>,
        ) -> Result<(RunRequest, Vec<OwnedFd>), Reply> {
            let refused = |reason: String, exit_code| Reply::Refused { reason, exit_code };
            let wire: Wire<sandbox_core::SandboxPolicy> =
                serde_json::from_slice(body).map_err(|e| {
                    refused(
                        format!("the nested run's request is not valid: {e}"),
                        EXIT_SANDBOX,
                    )
                })?;
            if stdio.len() != 3 {
                return Err(refused(
                    "the nested run's request carries no stdin, stdout and stderr".into(),
                    EXIT_SANDBOX,
                ));
            }
            let Some(policy) = &wire.policy else {
                return Err(refused(
                    "a nested run cannot run unconfined (danger-full-access): the outer run's \
                     policy bounds it"
                        .into(),
                    EXIT_SANDBOX,
                ));
            };
            // Bounded before anything is resolved or looked up: the checks
            // below touch the file system per entry.
            if let Err(why) = within_bounds(&wire, policy) {
                return Err(refused(
                    format!("the nested run's request is refused: {why}"),
                    EXIT_SANDBOX,
                ));
            }
            let policy = &ResolvedPolicy::try_from(policy.clone()).map_err(|e| {
                refused(
                    format!("the nested run's policy is not valid: {e}"),
                    EXIT_SANDBOX,
                )
            })?;
            // The outer run keeps its secrets' files from its command by its
            // egress's policy, not by `outer.policy`: the bound keeps them
            // too (reads are broad).
            let mut bound = std::borrow::Cow::Borrowed(outer.policy);
            for spec in &outer.request.egress.secrets {
                if let sandbox_core::request::SecretSource::File(path) = spec.source() {
                    let denied = bound.with_read_deny(path).map_err(|e| {
                        refused(
                            format!("the outer run's secret file cannot be kept from it: {e}"),
                            EXIT_SANDBOX,
                        )
                    })?;
                    bound = std::borrow::Cow::Owned(denied);
                }
            }
            let left = outer.deadline.saturating_duration_since(Instant::now());
            let policy = policy.nested_within(&bound, left).map_err(|e| {
                refused(
                    format!("the nested run asks for more than the outer run allows: {e}"),
                    EXIT_SANDBOX,
                )
            })?;
            let os = |b: Vec<u8>| OsString::from_vec(b);
            let nul = |what: &str, b: &[u8]| {
                b.contains(&0).then(|| {
                    refused(
                        format!(
                            "{what} {} contains a NUL byte",
                            crate::runner::terminal_safe(&String::from_utf8_lossy(b))
                        ),
                        EXIT_SANDBOX,
                    )
                })
            };
            for a in &wire.argv {
                if let Some(r) = nul("argument", a) {
                    return Err(r);
                }
            }
            for (k, v) in wire.env.iter().chain(&wire.env_overrides) {
                if k.is_empty() || k.contains(&b'=') {
                    return Err(refused(
                        format!(
                            "environment name {} is not valid",
                            crate::runner::terminal_safe(&String::from_utf8_lossy(k))
                        ),
                        EXIT_SANDBOX,
                    ));
                }
                if let Some(r) = nul("environment variable", k).or_else(|| nul("value", v)) {
                    return Err(r);
                }
            }
            let cwd = match wire.cwd {
                Some(c) => {
                    if let Some(r) = nul("working directory", &c) {
                        return Err(r);
                    }
                    let c = PathBuf::from(os(c));
                    let opened = if c.is_absolute() {
                        open_cwd(&c)
                    } else {
                        Err(io::Error::from_raw_os_error(libc::EINVAL))
                    };
                    match opened {
                        // The launch enters the directory opened here, not
                        // the path (which the command may have changed).
                        Ok(dir) => {
                            let at = PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd()));
                            stdio.push(dir);
                            Some(at)
                        }
                        Err(e) => {
                            return Err(refused(
                                format!(
                                    "the working directory {} cannot be entered by the nested \
                                     run's command: {e}",
                                    crate::runner::terminal_safe(&c.to_string_lossy())
                                ),
                                EXIT_SANDBOX,
                            ))
                        }
                    }
                }
                None => None,
            };
            let mut argv: Vec<OsString> = wire.argv.into_iter().map(os).collect();
            // A relative program with a slash is looked up beneath the
            // working directory: through the directory opened above, by the
            // path it has now (the launch would name it through
            // `/proc/self/fd`, which is closed when the program runs, and a
            // script's interpreter could not open it). Run by that path
            // without capabilities, it reaches only what the command can.
            if let (Some(at), Some(program)) = (&cwd, argv.first_mut()) {
                let relative = !std::path::Path::new(program).is_absolute();
                if relative && program.as_encoded_bytes().contains(&b'/') {
                    if let Ok(dir) = std::fs::read_link(at) {
                        *program = dir.join(&*program).into_os_string();
                    }
                }
            }
            // The program is looked up as the command would look it up (no
            // capabilities): one it cannot find is refused as not found,
            // whatever lies where it cannot search; where the launch's own
            // lookup (with the runner's capabilities) would pick another
            // file, the command's is named.
            if let Some(program) = argv.first_mut() {
                let path_var = wire
                    .env
                    .iter()
                    .find(|(k, _)| k == b"PATH")
                    .map(|(_, v)| OsString::from_vec(v.clone()));
                let located = |dir: Option<&std::path::Path>| {
                    sandbox_launch::locate(program, path_var.as_deref(), dir)
                };
                let real = cwd.as_deref().and_then(|at| std::fs::read_link(at).ok());
                match as_the_command(|| Ok(located(real.as_deref()))) {
                    Ok(Ok(found)) => {
                        if located(cwd.as_deref()).ok().as_ref() != Some(&found) {
                            *program = found.into_os_string();
                        }
                    }
                    Ok(Err(e)) => {
                        let err = match e {
                            sandbox_launch::LocateError::NotExecutable { path, reason } => {
                                RunError::NotExecutable { path, reason }
                            }
                            _ => RunError::NotFound(program.clone()),
                        };
                        return Err(refused(
                            crate::runner::terminal_safe(&err.to_string()).into_owned(),
                            err.exit_code(),
                        ));
                    }
                    Err(e) => {
                        return Err(refused(
                            format!("the nested run's program cannot be looked up: {e}"),
                            EXIT_SANDBOX,
                        ))
                    }
                }
            }
            let mut req = RunRequest::new(argv, Some(policy));
            req.cwd = cwd;
            req.env = Some(wire.env.into_iter().map(|(k, v)| (os(k), os(v))).collect());
            req.env_overrides = wire
                .env_overrides
                .into_iter()
                .map(|(k, v)| (os(k), os(v)))
                .collect();
            let base = outer.request;
            req.limits = wire.limits.bounded_by(&base.limits);
            req.allow_unlimited = wire.allow_unlimited && base.allow_unlimited;
            req.observe_writes = wire.observe_writes || base.observe_writes;
            req.require_full = wire.require_full || base.require_full;
            req.echo_stderr = wire.echo_stderr;
            req.grace = base.grace;
            req.trusted_files = base.trusted_files.clone();
            req.trusted_files.extend(
                reachable(wire.trusted_files)
                    .into_iter()
                    .map(|p| ("the nested run's trusted file", p)),
            );
            req.egress = crate::runner::EgressOptions::default()
                .with_upstream_ca(base.egress.upstream_ca.clone());
            Ok((req, stdio))
        }

        /// Runs the nested command; ends it when the connection closes or
        /// the outer run ends.
        fn run(
            &self,
            conn: &OwnedFd,
            (mut req, stdio): (RunRequest, Vec<OwnedFd>),
            admitted: &Admitted<'_>,
            outer: &Outer<'_>,
        ) -> Reply {
            let Ok((cancel_read, cancel_write)) = pair(libc::SOCK_STREAM) else {
                return Reply::Refused {
                    reason: "the nested run could not be started: no cancel channel".into(),
                    exit_code: EXIT_SANDBOX,
                };
            };
            req.stdio = Some([
                stdio[0].as_raw_fd(),
                stdio[1].as_raw_fd(),
                stdio[2].as_raw_fd(),
            ]);
            req.cancel = Some(cancel_read.as_raw_fd());
            let Ok((done_read, done_write)) = pair(libc::SOCK_STREAM) else {
                return Reply::Refused {
                    reason: "the nested run could not be started: no channel".into(),
                    exit_code: EXIT_SANDBOX,
                };
            };
            // Who ended the run, if it did not end on its own.
            let mut cancelled_by = "its caller ended it";
            let between_fd = admitted.between();
            let ran = std::thread::scope(|scope| {
                let req = &req;
                let tree = Arc::clone(&self.tree);
                let groups = self.groups.get().cloned();
                let running = scope.spawn(move || {
                    TREE.with(|t| *t.borrow_mut() = Some(tree));
                    WITHIN.with(|w| *w.borrow_mut() = groups);
                    let ran = crate::running::run(outer.backend, req);
                    TREE.with(|t| *t.borrow_mut() = None);
                    WITHIN.with(|w| *w.borrow_mut() = None);
                    drop(done_write);
                    ran
                });
                // The requester's stop signals (one byte each) are passed on
                // to the command; the run ends when its requester is gone
                // (its connection reads EOF) or the outer run ends; this
                // waits for one of those or the run's own end.
                let mut pfds = [
                    conn.as_raw_fd(),
                    self.stop_read.as_raw_fd(),
                    done_read.as_raw_fd(),
                    between_fd,
                ]
                .map(|fd| libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                });
                loop {
                    // SAFETY: four pollfds on the stack (a negative fd is
                    // ignored).
                    let n = unsafe { libc::poll(pfds.as_mut_ptr(), 4, -1) };
                    if n < 0 {
                        if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                            continue;
                        }
                        break;
                    }
                    if pfds[2].revents != 0 {
                        break;
                    }
                    if pfds[1].revents != 0 {
                        cancelled_by = "the outer run ended";
                        break;
                    }
                    if pfds[3].revents != 0 {
                        cancelled_by = "the session command that started it ended";
                        break;
                    }
                    let mut signals = [0u8; 16];
                    match recv(conn.as_raw_fd(), &mut signals, 0) {
                        Ok((n, _)) if n > 0 => {
                            let _ = send(cancel_write.as_raw_fd(), &signals[..n], &[]);
                        }
                        _ => {
                            cancelled_by = "its requester (the nested sandbox run) ended";
                            break;
                        }
                    }
                }
                drop(cancel_write);
                running.join()
            });
            drop(stdio);
            match ran {
                Ok(Ok(mut outcome)) => {
                    if let crate::runner::Classification::Cancelled { reason } =
                        &mut outcome.classification
                    {
                        cancelled_by.clone_into(reason);
                    }
                    // The record is bounded (F2): the requester gets it so
                    // (it always fits its reply), and it is kept once: for
                    // the command that asked (a shared launch's), at most
                    // MAX_RECORDS and MAX_KEPT bytes a command, or for the
                    // outer record, the tree's first MAX_RECORDS within
                    // MAX_KEPT bytes; past those, counted as left out.
                    let size = super::bound_record(&mut outcome);
                    let first_left_out = if self.per_command {
                        let mut mine = self
                            .commands
                            .records
                            .lock()
                            .unwrap_or_else(|p| p.into_inner());
                        !mine.keep(outcome.clone(), size, MAX_RECORDS) && mine.omitted == 1
                    } else {
                        let n = self.tree.records.fetch_add(1, Ordering::AcqRel);
                        let bytes = self.tree.bytes.fetch_add(size, Ordering::AcqRel);
                        let mut nested = self.nested.lock().unwrap_or_else(|p| p.into_inner());
                        if n < MAX_RECORDS && bytes + size <= super::MAX_KEPT {
                            !nested.keep(outcome.clone(), size, usize::MAX) && nested.omitted == 1
                        } else {
                            self.tree.bytes.fetch_sub(size, Ordering::AcqRel);
                            nested.omitted += 1;
                            nested.omitted == 1
                        }
                    };
                    if first_left_out {
                        tracing::warn!(
                            "nested runs' records are left out of their outer record past \
                             {MAX_RECORDS} records or {} bytes (counted in omitted.nested)",
                            super::MAX_KEPT
                        );
                    }
                    Reply::Outcome {
                        outcome: Box::new(outcome),
                    }
                }
                Ok(Err(err)) => Reply::Refused {
                    reason: crate::runner::terminal_safe(&err.to_string()).into_owned(),
                    exit_code: err.exit_code(),
                },
                Err(_) => Reply::Refused {
                    reason: "the nested run failed in the outer runner".into(),
                    exit_code: EXIT_SANDBOX,
                },
            }
        }
    }

    /// The directory `path` opened (`O_PATH`) as the nested run's command
    /// would enter it: by a thread of its own holding no capability (as the
    /// command holds none) with a working directory of its own, which
    /// enters it (`fchdir(2)`: search permission on it and every directory
    /// on the way, as the command's own `chdir` needs). The launch's child
    /// changes directory before it drops the runner's capabilities, so a
    /// path would let a command that is root reach through a directory
    /// its own permissions close (`CAP_DAC_OVERRIDE`, or a process's
    /// `/proc/PID/cwd` by `CAP_SYS_PTRACE`).
    fn open_cwd(path: &std::path::Path) -> io::Result<OwnedFd> {
        use std::os::unix::ffi::OsStrExt;
        let c_path = std::ffi::CString::new(path.as_os_str().as_bytes())
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        as_the_command(|| {
            // SAFETY: a NUL-terminated path; flags without a mode.
            let raw = cvt(unsafe {
                libc::open(
                    c_path.as_ptr(),
                    libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
                )
            })?;
            // SAFETY: a fresh fd owned here alone.
            let dir = unsafe { OwnedFd::from_raw_fd(raw) };
            // SAFETY: fchdir on a live fd; this thread's own cwd.
            cvt(unsafe { libc::fchdir(dir.as_raw_fd()) })?;
            Ok(dir)
        })
    }

    /// The paths of `paths` the nested run's command could look up (their
    /// directories searchable without a capability), all looked up on one
    /// thread: only those are checked as trusted files, which the runner
    /// does with its own capabilities (what it found would tell the command
    /// about a file it cannot reach, which it cannot write either). None
    /// when the thread cannot be made.
    fn reachable(paths: Vec<PathBuf>) -> Vec<PathBuf> {
        if paths.is_empty() {
            return paths;
        }
        as_the_command(|| {
            Ok(paths
                .into_iter()
                .filter(|p| {
                    std::fs::symlink_metadata(p)
                        .map_or_else(|e| e.kind() != io::ErrorKind::PermissionDenied, |_| true)
                })
                .collect())
        })
        .unwrap_or_default()
    }

    /// Whether a nested request's lists are within the bounds that keep
    /// the runner's work checking it small ([`MAX_TRUSTED_FILES`],
    /// [`MAX_LIST`], [`MAX_PATH`], [`MAX_POLICY_PATHS`]); why not.
    fn within_bounds(
        wire: &Wire<sandbox_core::SandboxPolicy>,
        policy: &sandbox_core::SandboxPolicy,
    ) -> Result<(), String> {
        let n = wire.trusted_files.len();
        if n > MAX_TRUSTED_FILES {
            return Err(format!(
                "it names {n} trusted files, more than the {MAX_TRUSTED_FILES} a nested run may"
            ));
        }
        let lists = [
            ("write paths", policy.write_paths.len()),
            ("read-deny paths", policy.read_deny_paths.len()),
            ("write-deny paths", policy.write_deny_paths.len()),
            ("network rules", policy.allow_net.len()),
            ("request rules", policy.requests.len()),
            ("unix sockets", policy.allow_unix_sockets.len()),
            ("environment names to deny", policy.env_deny_names.len()),
        ];
        for (what, n) in lists {
            if n > MAX_LIST {
                return Err(format!(
                    "its policy names {n} {what}, more than the {MAX_LIST} a nested run may"
                ));
            }
        }
        let paths = policy
            .write_paths
            .iter()
            .chain(&policy.read_deny_paths)
            .chain(&policy.write_deny_paths)
            .chain(&policy.allow_unix_sockets)
            .map(String::len);
        let mut total = 0usize;
        for len in paths {
            if len > MAX_PATH {
                return Err(format!(
                    "its policy names a path of {len} bytes, longer than {MAX_PATH}"
                ));
            }
            total += len;
        }
        if total > MAX_POLICY_PATHS {
            return Err(format!(
                "its policy's paths are {total} bytes in all, more than {MAX_POLICY_PATHS}"
            ));
        }
        let long = wire
            .trusted_files
            .iter()
            .map(|p| p.as_os_str().len())
            .chain(wire.cwd.as_ref().map(Vec::len))
            .find(|&len| len > MAX_PATH);
        if let Some(len) = long {
            return Err(format!(
                "it names a path of {len} bytes, longer than {MAX_PATH}"
            ));
        }
        let dirs = wire
            .env
            .iter()
            .filter(|(k, _)| k == b"PATH")
            .map(|(_, v)| v.split(|&b| b == b':').count())
            .max()
            .unwrap_or(0);
        if dirs > MAX_LIST {
            return Err(format!(
                "its PATH names {dirs} directories, more than the {MAX_LIST} a nested run may"
            ));
        }
        Ok(())
    }

    /// Runs `f` on a thread of its own holding no capability (as the
    /// nested run's command holds none), with a working directory of its
    /// own (`unshare(CLONE_FS)`).
    fn as_the_command<T: Send>(f: impl FnOnce() -> io::Result<T> + Send) -> io::Result<T> {
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    // SAFETY: unshare(CLONE_FS) affects this thread alone.
                    cvt(unsafe { libc::unshare(libc::CLONE_FS) })?;
                    crate::runner::drop_thread_capabilities()?;
                    f()
                })
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("the check failed")))
        })
    }

    /// Bounds each send on `conn` to `wait` (`SO_SNDTIMEO`).
    fn send_wait(conn: &OwnedFd, wait: Duration) {
        // The fields' own types (`as _`): musl deprecates naming
        // `time_t` and `suseconds_t` (libc#1848).
        let limit = libc::timeval {
            tv_sec: wait.as_secs() as _,
            tv_usec: wait.subsec_micros() as _,
        };
        // SAFETY: a timeval on the stack, its size given.
        unsafe {
            libc::setsockopt(
                conn.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_SNDTIMEO,
                (&limit as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
    }

    /// Whether `fd` polls readable (or hung up) now.
    fn polls(fd: RawFd) -> bool {
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd on the stack, no wait.
        unsafe { libc::poll(&mut pfd, 1, 0) > 0 }
    }

    fn reply_with(conn: &OwnedFd, reply: &Reply) -> io::Result<()> {
        let json = serde_json::to_vec(reply)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
        write_frame(conn.as_raw_fd(), &json, &[])
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        /// A connection sent to the door.
        fn hello(handed: &OwnedFd) -> OwnedFd {
            let (mine, theirs) = pair(libc::SOCK_STREAM).unwrap();
            send(handed.as_raw_fd(), b"hello", &[theirs.as_raw_fd()]).unwrap();
            mine
        }

        /// The sweep between commands: a connection accepted before it
        /// (being read or checked) sees its command ended and holds the
        /// sweep until it is dropped; one still queued is taken and closed
        /// (its requester reads EOF), never accepted after the sweep. Twin:
        /// a connection sent after the sweep is accepted, in a generation
        /// not ended.
        #[test]
        fn the_sweep_ends_accepted_and_queued_connections_of_its_command() {
            let (served, handed) = pair(libc::SOCK_SEQPACKET).unwrap();
            let commands = Commands::new(Some(served.try_clone().unwrap()));
            let _first = hello(&handed);
            let (admitted, _conn) = commands.accept(served.as_raw_fd()).unwrap();
            assert!(!admitted.ended());
            let queued = hello(&handed);
            std::thread::scope(|scope| {
                let sweep = scope.spawn(|| commands.end_all());
                let until = Instant::now() + Duration::from_secs(5);
                while !admitted.ended() && Instant::now() < until {
                    std::thread::sleep(Duration::from_millis(5));
                }
                assert!(admitted.ended(), "the sweep did not end the accepted one");
                std::thread::sleep(Duration::from_millis(100));
                assert!(!sweep.is_finished(), "the sweep did not wait for it");
                drop(admitted);
                sweep.join().unwrap();
            });
            assert!(commands.accept(served.as_raw_fd()).is_none());
            let mut buf = [0u8; 1];
            // SAFETY: recv on a live socket into a one-byte buffer.
            let n = unsafe {
                libc::recv(
                    queued.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    1,
                    libc::MSG_DONTWAIT,
                )
            };
            assert_eq!(n, 0, "the queued connection was not closed");
            // Twin: the next command's connection.
            let _next = hello(&handed);
            let (admitted, _conn) = commands.accept(served.as_raw_fd()).unwrap();
            assert!(!admitted.ended());
        }
    }
}

#[cfg(test)]
mod bound_tests {
    use super::{bound_record, json_len, Kept, MAX_KEPT, MAX_RECORD};
    use crate::outcome::{Classification, Outcome, Termination, SCHEMA_VERSION};

    fn record(argv: Vec<String>, refused: usize, target: usize) -> Outcome {
        Outcome {
            schema: SCHEMA_VERSION,
            argv,
            policy: None,
            backend: "landlock".into(),
            report: None,
            termination: Termination::Exited { code: 3 },
            timed_out: false,
            leftover_processes_ended: 0,
            containment: None,
            mediation: Some(sandbox_core::Mediation {
                refused: (0..refused)
                    .map(|i| sandbox_core::MediatedCall {
                        syscall: "openat".into(),
                        target: format!("/{i:05}{}", "d".repeat(target)),
                        reason: "outside the write paths".into(),
                        outside_write_paths: true,
                    })
                    .collect(),
                omitted: 7,
                ..Default::default()
            }),
            limits: Vec::new(),
            duration_ms: 1.0,
            classification: Classification::TaskFailure,
            nested: Vec::new(),
            omitted: Default::default(),
        }
    }

    /// The red-team's shapes (F2): 4096 refusals of 3.8 KB paths, a 1.2 MB
    /// argv, 300 records of 114 KB nested in it: bounded, with counts that
    /// add up to what was there. Twin: a small record is left whole.
    #[test]
    fn a_record_is_bounded_and_counts_what_it_left_out() {
        let argv: Vec<String> = std::iter::once("/bin/true".to_owned())
            .chain((0..9).map(|_| "a".repeat(131_000)))
            .collect();
        let argv_bytes: usize = argv.iter().map(String::len).sum();
        let mut big = record(argv, 4096, 3800);
        // Nested records as their runners kept them (each bounded).
        big.nested = (0..300)
            .map(|_| record(vec!["x".into()], 30, 3800))
            .collect();
        let size = bound_record(&mut big);
        assert_eq!(size, json_len(&big));
        assert!(size <= MAX_RECORD + (4 << 10), "{size}");
        let kept: usize = big.argv.iter().map(String::len).sum();
        assert_eq!(kept + big.omitted.argv_bytes, argv_bytes);
        assert_eq!(big.argv.len() + big.omitted.argv_args, 10);
        let m = big.mediation.as_ref().unwrap();
        assert!(!m.refused.is_empty());
        assert_eq!(m.refused.len() + m.omitted, 4096 + 7);
        assert_eq!(big.nested.len() + big.omitted.nested, 300);
        // A record past the bound reads back with its counts.
        let back: Outcome = serde_json::from_str(&serde_json::to_string(&big).unwrap()).unwrap();
        assert_eq!(back.omitted, big.omitted);

        let mut small = record(vec!["true".into(), "x".into()], 3, 20);
        small.nested = vec![record(vec!["y".into()], 1, 5)];
        let before = serde_json::to_value(&small).unwrap();
        bound_record(&mut small);
        assert_eq!(serde_json::to_value(&small).unwrap(), before);
        assert!(small.omitted.is_empty());
        assert!(!serde_json::to_string(&small)
            .unwrap()
            .contains("\"omitted\":{"));
    }

    /// The records kept for one outer record or command stay within
    /// MAX_KEPT bytes and the count asked for; the rest are counted.
    #[test]
    fn kept_records_are_bounded_by_bytes_and_count() {
        let mut kept = Kept::default();
        let mut one = record(vec!["x".into()], 4096, 3800);
        let size = bound_record(&mut one);
        let mut n = 0;
        while kept.keep(one.clone(), size, 256) {
            n += 1;
        }
        assert_eq!(n, MAX_KEPT / size);
        kept.keep(one.clone(), size, 256);
        assert_eq!(kept.omitted, 2);
        let mut small = Kept::default();
        for _ in 0..3 {
            assert!(small.keep(record(vec![], 0, 0), 100, 2) || small.omitted > 0);
        }
        assert_eq!((small.records.len(), small.omitted), (2, 1));
        let mut outer = record(vec![], 0, 0);
        kept.into_outcome(&mut outer);
        assert_eq!((outer.nested.len(), outer.omitted.nested), (n, 2));
    }
}
