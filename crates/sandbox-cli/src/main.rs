//! The `sandbox` command: run a command confined by a declared policy.
//!
//! The binary defines the C `main` itself (`no_main`): std's start-up would
//! read `/proc/self/maps` to place a stack guard and set up an alternate
//! signal stack, about 80 µs of every launch (measured), for a stack-overflow
//! message. What of it matters here is done in [`main`].
#![cfg_attr(not(test), no_main)]
#![warn(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]
// Unit tests run under the test harness's own `main`; what only our `main`
// reaches is then unused, not dead.
#![cfg_attr(test, allow(dead_code))]

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};

use clap::Parser;
use sandbox::{
    backend::resolve_backend,
    policy::{
        ExpandContext, ResolvedPolicy, SandboxConfig, SandboxMode, SandboxPolicy, SandboxedExecOp,
    },
    runner::{Outcome, RunRequest, EXIT_SANDBOX},
};

/// The static build's allocator (see `Cargo.toml`: musl's returns memory
/// to the kernel at every emptied group, dozens of syscalls per launch).
/// The full `GlobalTlsf`, not `SmallGlobalTlsf` (in-place reallocation,
/// pooled system memory): a few µs less per session command, the same
/// peak memory (docs/benchmarks-history.md).
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: rlsf::GlobalTlsf = rlsf::GlobalTlsf::new();

mod approval;
mod args;
mod dispatch;
mod egress_flags;
mod error_chain;
mod git_audit;
mod log;
mod private_tmp;
mod report;
mod session;
mod show;

use args::{
    CheckArgs, Cli, Cmd, ConfigFlags, ExecOpArgs, PolicyCmd, PolicyFlags, ProfileCmd, RunArgs,
};

/// A failure before or around the command: exit 125 with one `sandbox:` line.
#[derive(Debug)]
pub(crate) struct Fatal(pub(crate) String);

/// An error becomes its line with every cause that adds something
/// ([`error_chain::error_chain`] walks `source()`), so a typed error from
/// the facade (an egress start failure, a launch step) keeps its cause.
impl<E: std::error::Error + 'static> From<E> for Fatal {
    fn from(e: E) -> Self {
        Fatal(error_chain::error_chain(&e))
    }
}

/// The process entry point: standard fds made safe, SIGPIPE set, the
/// command run, and stdout flushed by `process::exit`.
#[cfg(not(test))]
#[no_mangle]
extern "C" fn main(argc: libc::c_int, argv: *const *const libc::c_char) -> libc::c_int {
    open_missing_standard_fds();
    // SAFETY: the C runtime passes `argc` valid NUL-terminated strings.
    let args = unsafe { arguments(argc, argv) };
    let code = run_cli(args);
    log::flush();
    std::process::exit(code)
}

/// The arguments as the C runtime passed them. `std::env::args` is empty
/// without std's own entry point on musl (glibc alone hands them to
/// `.init_array` functions, which is where std reads them).
///
/// # Safety
/// `argv` holds `argc` valid NUL-terminated strings.
#[cfg(not(test))]
unsafe fn arguments(
    argc: libc::c_int,
    argv: *const *const libc::c_char,
) -> Vec<std::ffi::OsString> {
    // SAFETY: this fn's contract: `argv` holds `argc` valid NUL-terminated strings.
    unsafe {
        use std::os::unix::ffi::OsStrExt;
        (0..usize::try_from(argc).unwrap_or(0))
            .map(|i| *argv.add(i))
            .take_while(|p| !p.is_null())
            .map(|p| std::ffi::OsStr::from_bytes(std::ffi::CStr::from_ptr(p).to_bytes()).to_owned())
            .collect()
    }
}

/// Opens `/dev/null` on each of fds 0-2 that is closed, as std's start-up
/// does, so nothing this process opens can land on a standard stream.
fn open_missing_standard_fds() {
    for fd in 0..=2 {
        // Closed only when `F_GETFD` says EBADF: `poll` reports an open
        // `O_PATH` fd as invalid too (POLLNVAL), and /dev/null opened
        // then would land elsewhere.
        // SAFETY: fcntl with F_GETFD only reads the fd's flags.
        if unsafe { libc::fcntl(fd, libc::F_GETFD) } >= 0
            || std::io::Error::last_os_error().raw_os_error() != Some(libc::EBADF)
        {
            continue;
        }
        // SAFETY: open returns the lowest free fd, which is this one.
        let opened = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) };
        debug_assert!(opened == fd || opened < 0);
    }
}

fn run_cli(args: Vec<std::ffi::OsString>) -> i32 {
    // The session's shared launch (`sandbox session --launch shared`): this
    // binary, started confined, serves the session's commands. Hidden.
    #[cfg(target_os = "linux")]
    if args.len() == 2 && args[1] == "__zygote" {
        return sandbox::zygote::serve();
    }
    // The runner's descriptors serve the run (proxy connections, broker,
    // resolver): its soft limit goes up to the hard one before anything is
    // opened; each command gets the one found here back
    // (`sandbox_launch::fds`).
    let _ = sandbox::runner::fds::raise_for_runner();
    // SAFETY: setting dispositions before any thread exists. SIGCHLD
    // inherited ignored would have the kernel reap the run's processes
    // before the runner could wait for them (wait(2), "NOTES").
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
        libc::signal(libc::SIGCHLD, libc::SIG_DFL);
    }
    log::init();
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(err) => return usage_error(err),
    };
    if !matches!(cli.command, Cmd::Run(_) | Cmd::ExecOp(_)) {
        // Printing commands end quietly when their reader goes away (as in
        // `sandbox policy | head`), like other Unix tools. `run` keeps SIGPIPE
        // ignored: it must outlive a closed stderr to end the command's tree.
        // SAFETY: restoring a default disposition, before any thread exists.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    let result = match cli.command {
        Cmd::Run(args) => cmd_run(args.0),
        Cmd::ExecOp(args) => cmd_exec_op(args.0),
        Cmd::Session(args) => session::cmd_session(args.0),
        Cmd::Policy(args) => cmd_policy(args.0),
        Cmd::Check(args) => cmd_check(args.0),
        Cmd::Profile(args) => cmd_profile(args.0),
        Cmd::Completions(args) => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(args.0.shell, &mut cmd, "sandbox", &mut std::io::stdout());
            Ok(0)
        }
        Cmd::Man(args) => cmd_man(args.0.subcommand.as_deref()),
    };
    match result {
        Ok(code) => code.clamp(0, 255),
        Err(Fatal(message)) => {
            show::say(&format!("sandbox: {}", message.replace('\n', " ")));
            // Stopped (Ctrl-C) before the run: the caller learns it was the
            // signal, as from the run.
            sandbox::runner::stop_requested().map_or(EXIT_SANDBOX, |sig| 128 + sig)
        }
    }
}

/// `sandbox man [SUBCOMMAND]`: the top-level page and then each
/// subcommand's (as `clap_mangen::generate_to` writes them to files),
/// concatenated on stdout, or only `SUBCOMMAND`'s page.
fn cmd_man(only: Option<&str>) -> Result<i32, Fatal> {
    let mut cmd = <Cli as clap::CommandFactory>::command().disable_help_subcommand(true);
    cmd.build();
    let subcommands: Vec<clap::Command> = cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .cloned()
        .collect();
    let pages = match only {
        None => std::iter::once(cmd).chain(subcommands).collect(),
        Some(name) => match subcommands.iter().find(|s| s.get_name() == name) {
            Some(sub) => vec![sub.clone()],
            None => {
                let names: Vec<&str> = subcommands.iter().map(|s| s.get_name()).collect();
                return Err(Fatal(format!(
                    "man: no subcommand {name:?} (one of: {})",
                    names.join(", ")
                )));
            }
        },
    };
    let mut out = std::io::stdout().lock();
    for page in pages {
        clap_mangen::Man::new(page)
            .source(concat!("sandbox ", env!("CARGO_PKG_VERSION")))
            .render(&mut out)?;
    }
    std::io::Write::flush(&mut out)?;
    Ok(0)
}

/// `--help` and `--version` print and exit 0; every other parse error is a
/// usage error: exit 125 with one `sandbox:` line (as GNU `timeout` and `env`
/// do), so it cannot be mistaken for the command's own exit status.
fn usage_error(err: clap::Error) -> i32 {
    use clap::error::ErrorKind;
    match err.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = err.print();
            0
        }
        _ => {
            let text = err.render().to_string();
            let first = text
                .lines()
                .map(|l| l.trim().trim_start_matches("error:").trim())
                .find(|l| !l.is_empty())
                .unwrap_or("invalid arguments");
            show::say(&format!("sandbox: {first} (see `sandbox --help`)"));
            EXIT_SANDBOX
        }
    }
}

/// The operator config: `--config FILE`, else the discovery of
/// [`sandbox::policy::ConfigSource::from_env`] (never the working directory).
struct Operator {
    config: SandboxConfig,
    /// The file it came from, if any.
    path: Option<PathBuf>,
}

fn load_config(flags: &ConfigFlags) -> Result<Operator, Fatal> {
    let (path, mut config) = match &flags.config {
        Some(path) => (Some(path.clone()), SandboxConfig::load(path)?),
        None => sandbox::policy::ConfigSource::from_env().load()?,
    };
    if let Some(b) = flags.backend {
        config.backend = b.into();
    }
    if let Some(w) = flags.on_unsupported {
        config.on_unsupported = w.into();
    }
    config.require_full |= flags.require_full;
    Ok(Operator { config, path })
}

impl Operator {
    /// The files this run must not be able to change, for
    /// [`RunRequest::trusted_files`]: the operator config that bounds it.
    /// With the home directory as the workspace the command could otherwise
    /// write the config that sets the rules (`backend = "noop"`,
    /// `allow_danger_full_access`) of every later run. The run itself
    /// write-denies every other place later runs load trusted state from
    /// ([`sandbox::trusted::protect_trusted`]).
    fn trusted_files(&self) -> Vec<(&'static str, PathBuf)> {
        self.path
            .iter()
            .map(|path| ("the operator config", path.clone()))
            .collect()
    }
}

fn absolute(path: &Path) -> Result<String, Fatal> {
    let abs = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()?.join(path)
    };
    abs.to_str()
        .map(str::to_owned)
        .ok_or_else(|| Fatal(format!("path {} is not valid UTF-8", abs.display())))
}

/// The effective policy for `run` and `policy`: flags (or `--policy-json`) and
/// mode, bounded by the config's policy. `None` means danger-full-access.
fn effective_policy(
    flags: &PolicyFlags,
    config: &SandboxConfig,
    private_tmp: Option<&Path>,
) -> Result<Option<ResolvedPolicy>, Fatal> {
    Ok(policy_and_caches(flags, config, private_tmp)?.0)
}

/// A tool and the directory of its cache for this run.
type Caches = Vec<(sandbox::policy::ToolCache, PathBuf)>;

/// [`effective_policy`] and the tool caches it gives write access to
/// ([`tool_caches`], keyed by the policy's write roots).
fn policy_and_caches(
    flags: &PolicyFlags,
    config: &SandboxConfig,
    private_tmp: Option<&Path>,
) -> Result<(Option<ResolvedPolicy>, Caches), Fatal> {
    let workspace = flags
        .workspace
        .as_deref()
        .map(absolute)
        .transpose()?
        .map(PathBuf::from);
    let ctx = ExpandContext::from_env(workspace.clone());
    let mode = flags.mode.unwrap_or(SandboxMode::ReadOnly);
    if !mode.is_confined() {
        if !config.allow_danger_full_access {
            return Err(Fatal(
                "--mode danger-full-access runs the command unconfined and is refused unless the \
                 operator config sets `allow_danger_full_access = true` in [sandbox]"
                    .into(),
            ));
        }
        let key = sandbox::runner::CacheKey::unconfined();
        return Ok((None, tool_caches(flags, config, &key)?));
    }
    let mut requested = match &flags.policy_json {
        Some(json) => serde_json::from_str::<SandboxPolicy>(json)
            .map_err(|e| Fatal(format!("invalid --policy-json: {e}")))?,
        None => {
            let operator = config
                .policy
                .as_ref()
                .map(sandbox::policy::OperatorPolicy::to_policy)
                .unwrap_or_default();
            let abs = |paths: &[PathBuf]| {
                paths
                    .iter()
                    .map(|p| absolute(p))
                    .collect::<Result<Vec<_>, _>>()
            };
            SandboxPolicy {
                network: !flags.no_network,
                // Without --allow-net, the operator's list applies (it bounds the request).
                allow_net: flags.allow_net.clone(),
                requests: flags.egress.allow_request.clone(),
                write_paths: abs(&flags.write)?,
                read_deny_paths: abs(&flags.read_deny)?,
                write_deny_paths: abs(&flags.write_deny)?,
                deny_subprocess: flags.deny_subprocess,
                env_deny_names: flags.env_deny.clone(),
                timeout_seconds: flags.timeout.unwrap_or(operator.timeout_seconds),
                max_timeout_seconds: operator.max_timeout_seconds,
                // Without --allow-unix, the operator's own list (it bounds the request).
                allow_unix_sockets: if flags.allow_unix.is_empty() {
                    operator.allow_unix_sockets.clone()
                } else {
                    abs(&flags.allow_unix)?
                },
                // Set by workspace-write (below) or the operator's bound.
                protect_git_dirs: operator.protect_git_dirs,
                private_shm: !flags.no_private_shm && operator.private_shm,
            }
        }
    };
    for (name, from) in config
        .unprotect
        .iter()
        .map(|n| (n, "the operator config's `unprotect`"))
        .chain(flags.unprotect.iter().map(|n| (n, "--unprotect")))
    {
        if !sandbox::protect::is_default_protection(name) {
            return Err(Fatal(format!(
                "{from} names {name:?}, which is no default protection; name one as \
                 `sandbox policy` lists it, relative to its write path (`.bashrc`, \
                 `.vscode`, `.git/hooks`, `.git/config`, ...)"
            )));
        }
    }
    let unprotect: Vec<String> = config
        .unprotect
        .iter()
        .chain(&flags.unprotect)
        .cloned()
        .collect();
    let protection = sandbox::protect::Protection {
        add: &config.protect,
        remove: &unprotect,
    };
    mode.extend(
        &mut requested,
        workspace.as_deref(),
        private_tmp,
        &protection,
    )
    .map_err(|e| Fatal(e.to_owned()))?;
    let resolve = |policy: &SandboxPolicy| {
        policy.resolve(&ctx).map_err(|e| match &flags.policy_json {
            Some(_) => Fatal(format!("invalid --policy-json: {e}")),
            None => flag_error(e),
        })
    };
    // The caches' trust domain: the write roots the user's policy gives
    // (not the private TMPDIR, not the caches), canonical as resolved.
    let tmp = private_tmp.map(|t| std::fs::canonicalize(t).unwrap_or_else(|_| t.to_owned()));
    let asked = resolve(&requested)?;
    if let Some(operator) = &config.policy {
        // A write path outside the operator's bound is said before a cache.
        operator.bound(&asked, tmp.as_slice(), &ctx)?;
    }
    let roots = asked
        .write_paths()
        .iter()
        .filter(|w| Some(*w) != tmp.as_ref())
        .cloned()
        .collect::<Vec<_>>();
    let caches = tool_caches(
        flags,
        config,
        &sandbox::runner::CacheKey::of_write_roots(roots),
    )?;
    // The runner's own directories for this run (its private TMPDIR, the
    // tool caches): written, but asked for by no request, so an operator's
    // write bound does not refuse them.
    let mut own: Vec<PathBuf> = caches.iter().map(|(_, dir)| dir.clone()).collect();
    if let Some(tmp) = private_tmp {
        if mode == SandboxMode::WorkspaceWrite || flags.private_tmp {
            own.push(tmp.to_path_buf());
        }
    }
    if let (SandboxMode::ReadOnly, true, Some(tmp)) = (mode, flags.private_tmp, private_tmp) {
        requested
            .write_paths
            .push(tmp.to_string_lossy().into_owned());
    }
    requested.write_paths.extend(
        caches
            .iter()
            .map(|(_, dir)| dir.to_string_lossy().into_owned()),
    );
    if flags.secrets || config.secrets {
        if let Some(home) = ctx.home.as_deref() {
            requested.read_deny_paths.extend(
                sandbox::protect::secrets(home)
                    .into_iter()
                    .map(|p| p.to_string_lossy().into_owned()),
            );
        }
    }
    let mut resolved = resolve(&requested)?;
    if protect_write_paths(
        &mut requested,
        &resolved,
        &own,
        ctx.home.as_deref(),
        &protection,
    ) {
        resolved = resolve(&requested)?;
    }
    let requested = resolved;
    let policy = match &config.policy {
        Some(operator) => operator.bound(&requested, &own, &ctx)?,
        None => requested,
    };
    Ok((Some(policy), caches))
}

/// Gives every requested write path that holds something worth protecting
/// (a git repository, an rc file, editor or agent settings) the workspace's
/// protections, in any mode ([`sandbox::protect::write_path_protections`]);
/// the runner's own directories (`own`) are left alone. Whether `policy`
/// changed.
fn protect_write_paths(
    policy: &mut SandboxPolicy,
    resolved: &ResolvedPolicy,
    own: &[PathBuf],
    home: Option<&Path>,
    protection: &sandbox::protect::Protection<'_>,
) -> bool {
    let own: Vec<PathBuf> = own
        .iter()
        .map(|o| std::fs::canonicalize(o).unwrap_or_else(|_| o.clone()))
        .collect();
    let mut changed = false;
    for dir in resolved.write_paths().iter().filter(|d| !own.contains(d)) {
        let Some(found) = sandbox::protect::write_path_protections(dir, home, protection) else {
            continue;
        };
        for path in found {
            if !resolved.write_deny_paths().contains(&path) {
                policy
                    .write_deny_paths
                    .push(path.to_string_lossy().into_owned());
                changed = true;
            }
        }
        if protection.keeps_git() && !policy.protect_git_dirs {
            policy.protect_git_dirs = true;
            changed = true;
        }
    }
    changed
}

/// The tool caches a run gets (`--cache`, the config's `caches`, and in
/// workspace-write every tool's unless `--no-default-caches` or the
/// config's `default_caches = false`), each with its directory, made when
/// missing. A cache asked for that cannot be given refuses the run; a
/// default one is left out (the tool then finds its own cache read-only,
/// as without it) with one line saying why. Each is the one of `key`'s runs
/// ([`sandbox::runner::tool_cache_dir`]).
fn tool_caches(
    flags: &PolicyFlags,
    config: &SandboxConfig,
    key: &sandbox::runner::CacheKey,
) -> Result<Caches, Fatal> {
    let defaults = flags.mode == Some(SandboxMode::WorkspaceWrite)
        && !flags.no_default_caches
        && config.default_caches;
    let mut asked: Vec<sandbox::policy::ToolCache> =
        flags.cache.iter().chain(&config.caches).copied().collect();
    asked.sort();
    asked.dedup();
    let mut caches = asked
        .iter()
        .map(|&t| Ok((t, sandbox::runner::tool_cache_dir(t, key)?)))
        .collect::<Result<Vec<_>, sandbox::runner::ToolCacheError>>()
        .map_err(|e| Fatal(format!("--cache: {e}")))?;
    for &tool in sandbox::policy::TOOL_CACHES
        .iter()
        .filter(|t| defaults && !asked.contains(t))
    {
        match sandbox::runner::tool_cache_dir(tool, key) {
            Ok(dir) => caches.push((tool, dir)),
            Err(e) => {
                static SAID: std::sync::atomic::AtomicBool =
                    std::sync::atomic::AtomicBool::new(false);
                // Their own caches are writable where a write path holds them.
                let theirs = match e {
                    sandbox::runner::ToolCacheError::WritableByRun { .. } => {
                        "use their own caches, writable where the write paths hold them"
                    }
                    _ => "find their own caches read-only",
                };
                if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
                    show::say(&format!(
                        "sandbox: warning: no private tool caches for this run ({e}); the tools \
                         {theirs} (--no-default-caches leaves them out without this line)"
                    ));
                }
                caches.retain(|(t, _)| asked.contains(t));
                break;
            }
        }
    }
    caches.sort();
    if !caches.is_empty() {
        // Keys no run used for a month (a fresh workspace per task makes
        // one each): removed once a day, on a thread of their own.
        sandbox::runner::prune_unused_tool_caches();
    }
    Ok(caches)
}

/// A resolution error of a policy built from flags, naming the flag typed
/// rather than the config field behind it.
fn flag_error(e: sandbox::policy::PolicyError) -> Fatal {
    use sandbox::policy::PolicyError as E;
    let flag = |field: &str| match field {
        "write_paths" => "-w/--write",
        "read_deny_paths" => "--read-deny",
        "write_deny_paths" => "--write-deny",
        "allow_unix_sockets" => "--allow-unix",
        _ => "",
    };
    Fatal(match e {
        E::BadPath {
            field,
            value,
            reason,
        } if !flag(field).is_empty() => {
            format!("{} {value:?} is not a usable path: {reason}", flag(field))
        }
        E::GlobInDenyPath { field, value, glob } if !flag(field).is_empty() => format!(
            "{} {value:?} contains the glob character `{glob}`, and deny paths are not globs: \
             give each path to deny (a literal name with `{glob}` is accepted when it exists)",
            flag(field)
        ),
        E::WritePathMissing { path, reason } => format!(
            "write path {} (from -w/--write or --workspace) does not exist or cannot be resolved \
             ({reason}); create it or leave it out",
            path.display()
        ),
        E::TimeoutAboveCeiling { requested, ceiling } => format!(
            "--timeout {requested} is above the ceiling of {ceiling} s; ask for at most \
             {ceiling}, or raise the ceiling in the operator config (--config FILE or \
             $SANDBOX_CONFIG) with the line `max_timeout_seconds = {requested}` under \
             `[sandbox.policy]`"
        ),
        E::BadEnvName { name } => {
            format!("--env-deny {name:?} is not a valid variable name or glob")
        }
        other => other.to_string(),
    })
}

fn cmd_policy(args: PolicyCmd) -> Result<i32, Fatal> {
    let config = load_config(&args.config)?.config;
    let policy = effective_policy(&args.policy, &config, None)?;
    let json = serde_json::json!({
        "schema": sandbox::runner::SCHEMA_VERSION,
        "network": policy.as_ref().map(|p| p.network_mode()),
        // How names are reached under an allowlist (as `sandbox check` says).
        "names": policy
            .as_ref()
            .filter(|p| p.network_mode() == sandbox::policy::NetworkMode::Allowlist)
            .map(network_line),
        "policy": policy,
    });
    println!("{}", sandbox::runner::json_terminal_safe(&json, true)?);
    Ok(0)
}

/// Ctrl-C, Ctrl-\, a terminal hang-up or a service manager's stop reach the
/// runner alone (the command has a session of its own): while the guard
/// lives (the self-test and the run, not a prompt or a read around them)
/// the runner passes them on to the command's process group, as a shell
/// would, then ends the whole run after the grace period, instead of dying
/// alone, which would leave the run's background processes to a later
/// run's sweep.
fn stop_runs_on_signals() -> Result<sandbox::runner::StopSignals, Fatal> {
    sandbox::runner::stop_runs_on(&[libc::SIGINT, libc::SIGQUIT, libc::SIGTERM, libc::SIGHUP])
        .map_err(|e| Fatal(format!("cannot catch the stop signals: {e}")))
}

fn cmd_run(args: RunArgs) -> Result<i32, Fatal> {
    let report = report::Asked::from_flags(args.report.as_deref(), args.report_fd);
    report.map(report::Asked::claim).transpose()?;
    // Past parsing, every refusal still leaves a record for --report.
    let recorded = |why: Fatal| record_refusal(&args.argv, report, why);
    let operator = load_config(&args.config).map_err(recorded)?;
    let config = &operator.config;
    let private_tmp = private_tmp_for(&args.policy).map_err(recorded)?;
    let tmp = private_tmp.as_ref().map(|t| t.path());
    let run_once = |flags: &PolicyFlags| -> Result<Result<Outcome, i32>, Fatal> {
        let (policy, caches) = policy_and_caches(flags, config, tmp).map_err(recorded)?;
        let mut req = RunRequest::new(args.argv.clone(), policy);
        req.trusted_files = operator.trusted_files();
        req.egress = flags.egress.options(&config.egress);
        for (tool, dir) in caches {
            req.env_overrides.extend(tool.env(&dir));
        }
        req.limits = args.limits.resources();
        req.allow_unlimited = args.limits.allow_unlimited && config.limits.is_empty();
        // What --explain and --report say includes the writes the kernel
        // refused on its own.
        req.observe_writes = args.explain || report.is_some();
        if let Some(tmp) = tmp {
            req.env_overrides.push(("TMPDIR".into(), tmp.into()));
        }
        execute(config, req, report)
    };
    // Git repositories the run makes, which git in the parent would enter
    // (see `git_audit`): as the broker saw them made, or else (no broker)
    // by a bounded walk of a workspace-write workspace before and after.
    let workspace_write = args.policy.mode == Some(SandboxMode::WorkspaceWrite);
    let walked = match (workspace_write, &args.policy.workspace) {
        (true, Some(ws)) if !cfg!(target_os = "linux") => std::fs::canonicalize(ws)
            .ok()
            .map(|ws| (git_audit::git_dirs(&ws), ws)),
        _ => None,
    };
    let outcome = match run_once(&args.policy)? {
        Ok(outcome) => outcome,
        Err(code) => return Ok(code),
    };
    let made: Vec<PathBuf> = match &walked {
        Some((before, ws)) => git_audit::git_dirs(ws)
            .difference(before)
            .cloned()
            .collect(),
        // With those of the runs nested in it (F7).
        None => git_audit::made_in(&outcome),
    };
    let secrets = args.policy.egress.options(&config.egress).secrets;
    let scope = git_audit::Scope::of(outcome.policy.as_ref(), &secrets);
    for line in git_audit::warnings(&made, &scope) {
        show::say(&line);
    }
    if let Some(line) = git_audit::unnamed_warning(&outcome) {
        show::say(&line);
    }
    if args.explain {
        for line in show::explain(&outcome) {
            show::say(&line);
        }
    } else if !args.quiet {
        for line in [
            show::refusal_summary(&outcome),
            show::limit_summary(&outcome),
            show::unheld_summary(&outcome),
            show::runner_summary(&outcome),
            show::egress_summary(&outcome),
            show::leftover_summary(&outcome),
            show::unobserved_summary(&outcome, report.is_some()),
        ]
        .into_iter()
        .flatten()
        .chain(show::nested_summary(&outcome))
        {
            show::say(&line);
        }
    }
    if let Some(flags) = approval::escalate(&args, &outcome)? {
        show::say("sandbox: re-running once with the approved escalation");
        return Ok(match run_once(&flags)? {
            Ok(outcome) => outcome.exit_code(),
            Err(code) => code,
        });
    }
    Ok(outcome.exit_code())
}

fn cmd_exec_op(args: ExecOpArgs) -> Result<i32, Fatal> {
    let report = report::Asked::from_flags(args.report.as_deref(), args.report_fd);
    report.map(report::Asked::claim).transpose()?;
    let operator = load_config(&args.config)?;
    let config = &operator.config;
    let text = if args.op.as_os_str() == "-" {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s)?;
        s
    } else {
        std::fs::read_to_string(&args.op)
            .map_err(|e| Fatal(format!("cannot read op {}: {e}", args.op.display())))?
    };
    let op =
        SandboxedExecOp::from_json(&text).map_err(|e| Fatal(format!("invalid op JSON: {e}")))?;
    // The workspace (`{{workspace}}`): `--workspace`, else the working
    // directory.
    let workspace = match args.workspace.as_deref() {
        Some(w) => PathBuf::from(absolute(w)?),
        None => std::env::current_dir().map_err(|e| {
            Fatal(format!(
                "cannot tell the working directory (the workspace without --workspace): {e}"
            ))
        })?,
    };
    let ctx = ExpandContext::from_env(Some(workspace.clone()));
    // Without an operator policy, the built-in bound: writes only inside the
    // workspace, no network. An operator policy without `write_paths` keeps
    // the built-in write bound.
    let builtin = sandbox::policy::builtin_op_bound(&workspace);
    let bound = match &config.policy {
        Some(policy) => {
            let mut bound = policy.to_policy();
            if policy.write_paths.is_none() {
                bound.write_paths = builtin.write_paths;
            }
            bound
        }
        None => builtin,
    };
    let bound = &bound;
    // The operator's bound first (a request beyond it is refused before
    // anyone is asked), then the declared scope through the permission
    // model: nothing runs unless a layer grants all of it.
    // A harness reading the record learns why nothing ran.
    let argv: Vec<OsString> = op.argv.iter().map(OsString::from).collect();
    let recorded = |why: Fatal| record_refusal(&argv, report, why);
    let policy = op
        .effective_policy(Some(bound), &ctx, std::env::vars_os().map(|(k, _)| k))
        .map_err(|e| recorded(e.into()))?;
    let dispatch = dispatch::Dispatch {
        skill: &args.skill,
        workspace: &workspace,
        config: operator.path.as_deref(),
        session: args.session.as_deref(),
    };
    dispatch::check(&dispatch, &op, &policy, &ctx).map_err(recorded)?;
    let mut req = RunRequest::new(argv.clone(), Some(policy));
    req.trusted_files = operator.trusted_files();
    // env_passthrough is an allowlist: keep exactly PATH and the names it
    // lists, compared byte-wise (a name that is not UTF-8 cannot be listed,
    // so it is never passed).
    if let Some(keep) = &op.env_passthrough {
        use std::os::unix::ffi::OsStrExt;
        req.env = Some(
            std::env::vars_os()
                .filter(|(name, _)| {
                    name.as_bytes() == b"PATH"
                        || keep.iter().any(|k| k.as_bytes() == name.as_bytes())
                })
                .collect(),
        );
    }
    Ok(match execute(config, req, report)? {
        Ok(outcome) => outcome.exit_code(),
        Err(code) => code,
    })
}

/// Runs `req`; `Err(code)` when the command could not start (126/127).
fn execute(
    config: &SandboxConfig,
    req: RunRequest,
    report: Option<report::Asked>,
) -> Result<Result<Outcome, i32>, Fatal> {
    let _stop = stop_runs_on_signals()?;
    // Checked and its directory opened before the command runs: the command
    // may plant a symlink there or swap the directory meanwhile.
    let report = report.map(report::Asked::open).transpose()?;
    // Inside a confined run that hands a nest capability, the outer runner
    // runs the command under both policies (see `nest`).
    let mut req = req;
    req.require_full = config.require_full;
    // The operator's limits are ceilings a request only lowers.
    req.limits = req.limits.bounded_by(&config.limits);
    req.allow_unlimited |= config.allow_unlimited;
    if let Some(capability) = sandbox::nest::Capability::find() {
        return finish(capability.run(&req), &req, "nested", report.as_ref());
    }
    let resolved = match &req.policy {
        Some(policy) => match sandbox::backend::resolve_backend_for(config, policy) {
            Ok(r) => r.backend,
            Err(err) => {
                let backend = format!("{:?}", config.backend).to_lowercase();
                let record =
                    Outcome::runner_failure(&req, &backend, &err.to_string(), EXIT_SANDBOX);
                write_report(report.as_ref(), &record)?;
                return Err(Fatal(error_chain::error_chain(&err)));
            }
        },
        None => std::sync::Arc::new(sandbox::backend::NoopBackend),
    };
    finish(
        sandbox::runner::run(resolved.as_ref(), &req),
        &req,
        resolved.name(),
        report.as_ref(),
    )
}

/// What `execute` does with a run's result: the record written, the
/// outcome back, or the refusal said.
fn finish(
    ran: Result<Outcome, sandbox::runner::RunError>,
    req: &RunRequest,
    backend: &str,
    report: Option<&report::Target>,
) -> Result<Result<Outcome, i32>, Fatal> {
    match ran {
        Ok(outcome) => {
            // The command ran: its exit status is what the caller gets, even
            // when the record cannot be written (its directory may be one the
            // command could write, and so spoil).
            let written = match report {
                Some(target) => sandbox::runner::json_terminal_safe(&outcome, true)
                    .map_err(Fatal::from)
                    .and_then(|json| {
                        target.write_after_run(json.as_bytes(), |dir| {
                            outcome.policy.as_ref().map_or(true, |p| p.may_write(dir))
                                && !git_audit::in_git_dir(dir)
                        })
                    }),
                None => Ok(None),
            };
            match written {
                Ok(Some(moved)) => show::say(&moved),
                Ok(None) => {}
                Err(Fatal(why)) => show::say(&format!(
                    "sandbox: {}; the exit status is the command's ({})",
                    why.replace('\n', " "),
                    outcome.exit_code()
                )),
            }
            Ok(Ok(outcome))
        }
        Err(err) => {
            let code = err.exit_code();
            // A harness reading the record learns why nothing ran.
            let record = Outcome::runner_failure(req, backend, &err.to_string(), code);
            write_report(report, &record)?;
            if code == EXIT_SANDBOX {
                return Err(Fatal(error_chain::error_chain(&err)));
            }
            show::say(&format!("sandbox: {}", error_chain::error_chain(&err)));
            Ok(Err(code))
        }
    }
}

/// Writes a `runner_failure` record for a run refused before it started
/// (a config that cannot be read, a policy that does not resolve), when
/// `--report` asks for one, and hands the refusal back.
fn record_refusal(argv: &[OsString], report: Option<report::Asked>, why: Fatal) -> Fatal {
    if let Some(target) = report.and_then(|r| r.open().ok()) {
        let req = RunRequest::new(argv.to_vec(), None);
        let record = Outcome::runner_failure(&req, "none", &why.0, EXIT_SANDBOX);
        if let Err(Fatal(e)) = write_report(Some(&target), &record) {
            return Fatal(format!("{}; and {e}", why.0));
        }
    }
    why
}

fn write_report(target: Option<&report::Target>, outcome: &Outcome) -> Result<(), Fatal> {
    if let Some(target) = target {
        let json = sandbox::runner::json_terminal_safe(outcome, true)?;
        target.write(json.as_bytes())?;
    }
    Ok(())
}

/// The run's private temporary directory: workspace-write's, or asked for
/// with `--private-tmp`.
fn private_tmp_for(flags: &PolicyFlags) -> Result<Option<private_tmp::PrivateTmp>, Fatal> {
    match flags.mode {
        Some(SandboxMode::WorkspaceWrite) => private_tmp_dir().map(Some),
        Some(SandboxMode::DangerFullAccess) => Ok(None),
        _ if flags.private_tmp => private_tmp_dir().map(Some),
        _ => Ok(None),
    }
}

fn private_tmp_dir() -> Result<private_tmp::PrivateTmp, Fatal> {
    private_tmp::PrivateTmp::new().map_err(|e| {
        Fatal(format!(
            "cannot create the private temporary directory: {e}"
        ))
    })
}

fn cmd_profile(args: ProfileCmd) -> Result<i32, Fatal> {
    let config = load_config(&args.config)?.config;
    // The same inputs `run` uses, its private TMPDIR included: the profile
    // printed is the one that runs (only that directory's name differs per run).
    let private_tmp = private_tmp_for(&args.policy)?;
    let tmp = private_tmp.as_ref().map(|t| t.path());
    let Some(policy) = effective_policy(&args.policy, &config, tmp)? else {
        return Err(Fatal(
            "danger-full-access runs unconfined: there is no profile to print".into(),
        ));
    };
    let profile = sandbox::seatbelt::profile(&policy)?;
    if args.json {
        let json = serde_json::json!({
            "schema": sandbox::runner::SCHEMA_VERSION,
            "text": profile.text,
            "params": profile.params,
        });
        println!("{}", sandbox::runner::json_terminal_safe(&json, true)?);
    } else {
        print!("{}", profile.text);
        if !profile.text.ends_with('\n') {
            println!();
        }
        for (name, value) in &profile.params {
            show::out(&format!(";; -D {name}={value}"));
        }
    }
    Ok(0)
}

/// Exit status of `sandbox check` when the resolved backend enforces nothing.
const CHECK_NOTHING_ENFORCED: i32 = 1;

fn cmd_check(args: CheckArgs) -> Result<i32, Fatal> {
    let config = load_config(&args.config)?.config;
    let resolved = resolve_backend(&config)?;
    let probe_policy = SandboxPolicy::default().resolve(&ExpandContext::default())?;
    let report = resolved
        .backend
        .prepare(&probe_policy, &[OsString::from("/bin/true")])
        .map(|c| c.report)?;
    let gate = sandbox::gate::report(resolved.backend.name());
    // The network the operator's policy leaves a run (a request only narrows it).
    let ctx = ExpandContext::from_env(None);
    let operator = match &config.policy {
        Some(p) => p.to_policy().resolve(&ctx)?,
        None => probe_policy.clone(),
    };
    let network = network_line(&operator);
    let limits = sandbox::runner::limit_support();
    if args.json {
        let json = serde_json::json!({
            "schema": sandbox::runner::SCHEMA_VERSION,
            "backend": resolved.backend.name(),
            "network": operator.network_mode(),
            "allow_net": operator.allow_net(),
            "enforces": resolved.backend.enforces(),
            "containment": sandbox::runner::containment(),
            "limits": limits,
            "fallback_reason": resolved.fallback.as_ref().map(|e| e.to_string()),
            "self_test": gate,
            "report": report,
            "enforcement": report.enforcement(),
        });
        println!("{}", sandbox::runner::json_terminal_safe(&json, true)?);
        return Ok(check_status(resolved.backend.enforces()));
    }
    show::out(&format!("backend: {}", resolved.backend.name()));
    if let Some(why) = &resolved.fallback {
        show::out(&format!("fallback: {why}"));
    }
    show::out(&format!(
        "containment: {}",
        sandbox::runner::containment().describe()
    ));
    show::out(&format!("limits: {}", show::limit_support(&limits)));
    show::out(&format!("network (operator policy): {network}"));
    for d in &report.details {
        show::out(&format!("  {d}"));
    }
    show::out("axes (for the default policy):");
    for a in &report.axes {
        show::out(&format!(
            "  {:<11} {} [{}]",
            a.axis.as_str(),
            show::level_text(&a.level),
            a.mechanism
        ));
    }
    match gate {
        Some(g) => {
            show::out(&format!(
                "self-test: {} in {:.2} ms",
                if g.passed { "passed" } else { "FAILED" },
                g.elapsed_us as f64 / 1000.0
            ));
            use sandbox::gate::ProbeResult;
            for probe in g.probes() {
                let verdict = match &probe.result {
                    ProbeResult::Witnessed => "witnessed".to_owned(),
                    ProbeResult::Failed {
                        attempted,
                        observed,
                    } => {
                        format!("FAILED: attempted {attempted}; observed {observed}")
                    }
                    ProbeResult::Unwitnessed { why } => {
                        format!("UNWITNESSED: {why}")
                    }
                    ProbeResult::Interfered { scratch, observed } => {
                        format!("INTERFERED WITH (scratch {scratch}): {observed}")
                    }
                    _ => "unknown".to_owned(),
                };
                show::out(&format!("  {:?} probe: {verdict}", probe.probe));
                for c in &probe.checks {
                    show::out(&format!(
                        "    {} {:?} [{}] {} -> {}",
                        if c.ok { "ok " } else { "BAD" },
                        c.role,
                        c.policy,
                        c.attempted,
                        c.observed
                    ));
                }
            }
        }
        None => show::out("self-test: not run (the noop backend claims nothing)"),
    }
    if !resolved.backend.enforces() {
        show::out("nothing is enforced: commands would run unconfined");
    }
    Ok(check_status(resolved.backend.enforces()))
}

/// The network mode of `policy`, with its destinations when listed.
fn network_line(policy: &ResolvedPolicy) -> String {
    let mode = policy.network_mode().as_str();
    if policy.allow_net().is_empty() {
        return mode.to_owned();
    }
    let rules: Vec<String> = policy.allow_net().iter().map(|r| r.to_string()).collect();
    let how = match sandbox::runner::datagram_namespace() {
        Ok(()) => {
            "DNS over UDP or TCP to any address, RES_OPTIONS=use-vc for glibc; other UDP reaches \
             nothing"
                .to_owned()
        }
        Err(why) => format!(
            "DNS over TCP only, RES_OPTIONS=use-vc for glibc; UDP refused (no datagram \
             namespace: {why})"
        ),
    };
    format!(
        "{mode} ({}); names through the proxy, or resolved by the runner's resolver ({how}) and \
         then reached by address",
        rules.join(", ")
    )
}

fn check_status(enforces: bool) -> i32 {
    if enforces {
        0
    } else {
        CHECK_NOTHING_ENFORCED
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A typed error turned into the one `sandbox:` line keeps each cause
    /// its own text does not already quote. Twin: a cause the text quotes
    /// is not repeated.
    #[test]
    fn a_fatal_error_keeps_its_causes() {
        #[derive(Debug)]
        struct Outer(std::io::Error, bool);
        impl std::fmt::Display for Outer {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                match self.1 {
                    true => write!(f, "cannot start the egress proxy: {}", self.0),
                    false => f.write_str("cannot start the egress proxy"),
                }
            }
        }
        impl std::error::Error for Outer {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let cause = || std::io::Error::other("address in use");
        assert_eq!(
            Fatal::from(Outer(cause(), false)).0,
            "cannot start the egress proxy; caused by: address in use"
        );
        assert_eq!(
            Fatal::from(Outer(cause(), true)).0,
            "cannot start the egress proxy: address in use"
        );
    }
}
