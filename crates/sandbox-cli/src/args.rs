//! Command-line arguments.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::builder::{Resettable, StyledStr};
use clap::{ArgMatches, Args, Command, FromArgMatches, Parser, Subcommand};
use sandbox::policy::SandboxMode;
use sandbox_permissions::ApprovalPolicy;

#[derive(Parser)]
#[command(
    name = "sandbox",
    version,
    about = "Run commands confined by kernel mechanisms (Landlock + seccomp, Seatbelt)",
    after_help = "Examples:\n  \
        sandbox run -w ./out --no-network -- python3 script.py\n  \
        sandbox run --mode workspace-write --workspace . -- make\n  \
        sandbox run --secrets --env-deny 'AWS_*' -- ./build.sh\n  \
        sandbox check\n\n\
        Exit status: the command's; 128+N for signal N; 124 timeout; 125 the sandbox \
        could not be applied or bad usage; 126 not executable; 127 not found."
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Cmd,
}

#[derive(Subcommand)]
pub(crate) enum Cmd {
    /// Run PROGRAM under the policy given by flags, mode and config.
    Run(Deferred<RunArgs>),
    /// Run a JSON op envelope (file or `-` for stdin), bounded by the config.
    ExecOp(Deferred<ExecOpArgs>),
    /// Run many commands under one policy, driven by newline-delimited JSON
    /// requests on stdin (events on stdout; see docs/session.md).
    Session(Deferred<crate::session::SessionArgs>),
    /// Print the effective resolved policy as JSON.
    Policy(Deferred<PolicyCmd>),
    /// Report the resolved backend and what it enforces on this host.
    Check(Deferred<CheckArgs>),
    /// Print the macOS Seatbelt profile and parameters for a policy (on any OS).
    Profile(Deferred<ProfileCmd>),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(Deferred<CompletionsArgs>),
    /// Print the manual pages (roff): the top level's, then each
    /// subcommand's (`sandbox-run(1)`, ...), or only SUBCOMMAND's.
    Man(Deferred<ManArgs>),
}

#[derive(Args)]
pub(crate) struct ManArgs {
    /// The subcommand whose page to print (`run`, `exec-op`, ...).
    #[arg(value_name = "SUBCOMMAND")]
    pub(crate) subcommand: Option<String>,
}

#[derive(Args)]
pub(crate) struct CompletionsArgs {
    /// The shell.
    #[arg(value_enum)]
    pub(crate) shell: clap_complete::Shell,
}

/// A subcommand's arguments, defined only when that subcommand runs: clap
/// otherwise builds every subcommand's arguments on every launch.
pub(crate) struct Deferred<T>(pub(crate) T);

impl<T: FromArgMatches> FromArgMatches for Deferred<T> {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        T::from_arg_matches(matches).map(Self)
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        self.0.update_from_arg_matches(matches)
    }
}

impl<T: Args> Args for Deferred<T> {
    fn augment_args(cmd: Command) -> Command {
        cmd.defer(|cmd| keep_about(cmd, T::augment_args))
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        cmd.defer(|cmd| keep_about(cmd, T::augment_args_for_update))
    }
}

/// Runs `augment` without letting a flattened struct's doc comment replace
/// the subcommand's own description (set before the deferred part runs).
fn keep_about(cmd: Command, augment: fn(Command) -> Command) -> Command {
    let about = cmd.get_about().cloned();
    let long_about = cmd.get_long_about().cloned();
    let restore = |text: Option<StyledStr>| text.map_or(Resettable::Reset, Resettable::Value);
    augment(cmd)
        .about(restore(about))
        .long_about(restore(long_about))
}

/// `--backend` values.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub(crate) enum BackendArg {
    /// The best backend for this platform.
    Auto,
    /// Linux Landlock + seccomp.
    Landlock,
    /// macOS Seatbelt.
    Seatbelt,
    /// No confinement (audit only).
    Noop,
}

impl From<BackendArg> for sandbox::backend::BackendChoice {
    fn from(b: BackendArg) -> Self {
        match b {
            BackendArg::Auto => Self::Auto,
            BackendArg::Landlock => Self::Landlock,
            BackendArg::Seatbelt => Self::Seatbelt,
            BackendArg::Noop => Self::Noop,
        }
    }
}

/// `--on-unsupported` values.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub(crate) enum OnUnsupportedArg {
    /// Refuse to run (exit 125).
    Error,
    /// Run unconfined with a warning.
    Warn,
    /// Run unconfined silently.
    Ignore,
}

impl From<OnUnsupportedArg> for sandbox::backend::OnUnsupported {
    fn from(o: OnUnsupportedArg) -> Self {
        match o {
            OnUnsupportedArg::Error => Self::Error,
            OnUnsupportedArg::Warn => Self::Warn,
            OnUnsupportedArg::Ignore => Self::Ignore,
        }
    }
}

#[derive(Args)]
pub(crate) struct ProfileCmd {
    #[command(flatten)]
    pub(crate) policy: PolicyFlags,
    #[command(flatten)]
    pub(crate) config: ConfigFlags,
    /// Print JSON (`text` and `params`) instead of the profile and `-D` lines.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Policy flags shared by `run` and `policy`.
#[derive(Args, Clone, Default)]
pub(crate) struct PolicyFlags {
    /// Allow writes beneath PATH (repeatable).
    #[arg(short = 'w', long = "write", value_name = "PATH")]
    pub(crate) write: Vec<PathBuf>,
    /// Refuse writes beneath PATH even inside a write path (repeatable).
    #[arg(long = "write-deny", value_name = "PATH")]
    pub(crate) write_deny: Vec<PathBuf>,
    /// Refuse reads beneath PATH (repeatable).
    #[arg(long = "read-deny", value_name = "PATH")]
    pub(crate) read_deny: Vec<PathBuf>,
    /// Refuse network access.
    #[arg(long, conflicts_with = "allow_net")]
    pub(crate) no_network: bool,
    /// Allow network access only to this destination (repeatable): a host
    /// name (`example.com`, `*.example.com`) through a local proxy, or an IP
    /// address or CIDR network, each with an optional `:PORT`.
    #[arg(long = "allow-net", value_name = "HOST[:PORT]")]
    pub(crate) allow_net: Vec<sandbox::policy::EgressRule>,
    #[command(flatten)]
    pub(crate) egress: crate::egress_flags::EgressFlags,
    /// Refuse child processes.
    #[arg(long)]
    pub(crate) deny_subprocess: bool,
    /// Do not let the run make POSIX shared memory and semaphores of its
    /// own in /dev/shm (Python multiprocessing, joblib, pytest-xdist use
    /// them); /dev/shm is then writable only as a write path.
    #[arg(long)]
    pub(crate) no_private_shm: bool,
    /// Give the run a private, empty temporary directory as `$TMPDIR` (made
    /// writable, removed after the run), as workspace-write always does.
    #[arg(long)]
    pub(crate) private_tmp: bool,
    /// Give the run a private, persistent cache for this package tool
    /// (npm, pip, cargo, go, yarn, pnpm, uv; repeatable): a directory of
    /// its own in ~/.cache/sandbox-tools (shared only with runs of the
    /// same write paths: the directory is keyed by them), made writable, and the tool's
    /// variable (npm_config_cache, PIP_CACHE_DIR, CARGO_HOME,
    /// GOMODCACHE/GOCACHE, YARN_CACHE_FOLDER, pnpm_config_store_dir,
    /// UV_CACHE_DIR) pointing at it. The user's own caches stay untouched.
    /// Workspace-write gives every tool's cache unless --no-default-caches.
    #[arg(long = "cache", value_name = "TOOL", value_parser = cache_parser())]
    pub(crate) cache: Vec<sandbox::policy::ToolCache>,
    /// In workspace-write, give no tool a private cache unless --cache (or
    /// the config's `caches`) names it; the tools then find their own
    /// caches (~/.npm, ~/.cargo) read-only. Config: `default_caches = false`.
    #[arg(long)]
    pub(crate) no_default_caches: bool,
    /// Allow connecting to this pathname UNIX socket outside the write paths
    /// (repeatable; every other host socket is refused).
    #[arg(long = "allow-unix", value_name = "PATH")]
    pub(crate) allow_unix: Vec<PathBuf>,
    /// Read-deny the credential files and directories present in $HOME
    /// (~/.ssh, ~/.aws, ~/.gnupg, ~/.netrc, ...; `sandbox policy` lists them).
    #[arg(long)]
    pub(crate) secrets: bool,
    /// Do not pass this environment variable (name or `*` glob; repeatable).
    #[arg(long = "env-deny", value_name = "NAME")]
    pub(crate) env_deny: Vec<String>,
    /// Wall-clock limit in seconds (at least 1; the operator's ceiling bounds it).
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..),
          value_hint = clap::ValueHint::Other)]
    pub(crate) timeout: Option<u64>,
    /// Drop this default protection (repeatable), named as listed in the
    /// protections in docs/enforcement.md: `.vscode`, `.bashrc`, `.git/hooks`, ...
    /// Every write path holding a git repository, an rc file or editor and
    /// agent settings protects them, in any mode.
    #[arg(long = "unprotect", value_name = "NAME")]
    pub(crate) unprotect: Vec<String>,
    /// Sandbox mode preset: read-only, workspace-write or danger-full-access.
    #[arg(long, value_name = "MODE", value_parser = mode_parser())]
    pub(crate) mode: Option<SandboxMode>,
    /// Workspace directory (for `{{workspace}}` and workspace-write mode).
    #[arg(long, value_name = "DIR")]
    pub(crate) workspace: Option<PathBuf>,
    /// A whole policy as JSON, instead of the flags above (used by the argv form).
    #[arg(long, value_name = "JSON", conflicts_with_all = ["write", "write_deny", "read_deny", "no_network", "deny_subprocess", "env_deny", "timeout", "mode", "secrets", "allow_unix", "allow_net"])]
    pub(crate) policy_json: Option<String>,
}

/// Config flags shared by every command.
#[derive(Args, Clone, Default)]
pub(crate) struct ConfigFlags {
    /// Operator config file (default: $SANDBOX_CONFIG, else
    /// ~/.config/sandbox/config.toml of the passwd home (not moved by $HOME
    /// or $XDG_CONFIG_HOME), else /etc/sandbox/config.toml; never the
    /// working directory).
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// Backend (overrides the config).
    #[arg(long, value_enum, value_name = "BACKEND")]
    pub(crate) backend: Option<BackendArg>,
    /// When no working backend exists (overrides the config; default: error).
    #[arg(long, value_enum, value_name = "POLICY")]
    pub(crate) on_unsupported: Option<OnUnsupportedArg>,
    /// Refuse to run (exit 125) when the enforcement would be partial, e.g. on
    /// an older kernel (config: `require_full = true`).
    #[arg(long)]
    pub(crate) require_full: bool,
}

/// Limits on a run (each command's, in a session), held by its cgroup.
#[derive(Args)]
pub(crate) struct LimitFlags {
    /// Memory for the whole run, swap included (`64M`, `1.5G`; binary units):
    /// a process that would exceed it is killed. Held by the run's cgroup.
    #[arg(long, value_name = "SIZE", value_hint = clap::ValueHint::Other)]
    pub(crate) memory: Option<sandbox::policy::MemoryLimit>,
    /// Processes and threads the run may have at once: a fork beyond it fails.
    #[arg(long, value_name = "N", value_hint = clap::ValueHint::Other)]
    pub(crate) pids: Option<sandbox::policy::PidsLimit>,
    /// CPU time for the whole run, in CPUs (`0.5` = half of one CPU).
    #[arg(long, value_name = "CPUS", value_hint = clap::ValueHint::Other)]
    pub(crate) cpu: Option<sandbox::policy::CpuLimit>,
    /// Run even where --memory/--pids/--cpu cannot be held (no cgroup this
    /// user may create); the outcome then says which held. Limits set by
    /// the operator config need `allow_unlimited = true` there instead.
    #[arg(long)]
    pub(crate) allow_unlimited: bool,
}

impl LimitFlags {
    /// The limits asked for.
    pub(crate) fn resources(&self) -> sandbox::policy::ResourceLimits {
        sandbox::policy::ResourceLimits {
            memory: self.memory,
            pids: self.pids,
            cpu: self.cpu,
        }
    }
}

#[derive(Args)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    pub(crate) policy: PolicyFlags,
    #[command(flatten)]
    pub(crate) config: ConfigFlags,
    /// Write the outcome record as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub(crate) report: Option<PathBuf>,
    /// Write the outcome record as JSON to the inherited file descriptor N
    /// (e.g. `3>record.json`) after the run; the command does not get N.
    #[arg(long, value_name = "N", conflicts_with = "report", value_parser = clap::value_parser!(i32).range(0..))]
    pub(crate) report_fd: Option<i32>,
    /// After the command ends, print a short summary of what the sandbox refused.
    #[arg(long)]
    pub(crate) explain: bool,
    /// Do not print the one-line summary of what the sandbox refused (printed
    /// on stderr when something was refused and the command failed or the
    /// sandbox ended it; never after a command that exited 0).
    #[arg(long, short = 'q', conflicts_with = "explain")]
    pub(crate) quiet: bool,
    #[command(flatten)]
    pub(crate) limits: LimitFlags,
    /// After a sandbox denial: `ask` offers a one-shot re-run with the denied path
    /// writable (interactive terminals only); `never` does not.
    #[arg(long, value_name = "ask|never", default_value = "never")]
    pub(crate) approval: ApprovalPolicy,
    /// Seconds to wait for an answer to the approval prompt before cancelling.
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    pub(crate) approval_timeout: u64,
    /// The command (`--` before it is optional; it ends the sandbox's own flags).
    #[arg(required = true, trailing_var_arg = true, value_name = "PROGRAM")]
    pub(crate) argv: Vec<OsString>,
}

#[derive(Args)]
pub(crate) struct ExecOpArgs {
    /// The op envelope as JSON: a file, or `-` for stdin.
    #[arg(long, value_name = "FILE|-")]
    pub(crate) op: PathBuf,
    /// Workspace directory (for `{{workspace}}`).
    #[arg(long, value_name = "DIR")]
    pub(crate) workspace: Option<PathBuf>,
    /// The skill the op runs for: its declared scope must be granted to it
    /// (`<skill>/<op>/<path>` in `[permissions.pre_approved]` or an earlier
    /// interactive approval); grants are never shared between skills.
    #[arg(long, value_name = "NAME", default_value = "exec-op")]
    pub(crate) skill: String,
    /// A session log (JSON lines) whose last approval policy applies
    /// (`ask` or `never`), before the config's `[permissions] approval`.
    #[arg(long, value_name = "FILE")]
    pub(crate) session: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) config: ConfigFlags,
    /// Write the outcome record as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub(crate) report: Option<PathBuf>,
    /// Write the outcome record as JSON to the inherited file descriptor N
    /// (e.g. `3>record.json`) after the run; the command does not get N.
    #[arg(long, value_name = "N", conflicts_with = "report", value_parser = clap::value_parser!(i32).range(0..))]
    pub(crate) report_fd: Option<i32>,
}

#[derive(Args)]
pub(crate) struct PolicyCmd {
    #[command(flatten)]
    pub(crate) policy: PolicyFlags,
    #[command(flatten)]
    pub(crate) config: ConfigFlags,
}

#[derive(Args)]
pub(crate) struct CheckArgs {
    /// Print JSON instead of text.
    #[arg(long)]
    pub(crate) json: bool,
    #[command(flatten)]
    pub(crate) config: ConfigFlags,
}

/// `--mode`'s closed set of values, listed by `--help` and the completions.
fn mode_parser() -> impl clap::builder::TypedValueParser<Value = SandboxMode> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(["read-only", "workspace-write", "danger-full-access"])
        .try_map(|s| s.parse::<SandboxMode>())
}

/// The tool caches, as a closed list (shell completions offer them).
fn cache_parser() -> impl clap::builder::TypedValueParser<Value = sandbox::policy::ToolCache> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(sandbox::policy::TOOL_CACHES.iter().map(|t| t.name()))
        .try_map(|s| s.parse::<sandbox::policy::ToolCache>())
}
