//! [`Sandbox`]: confine a command in a few lines.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use sandbox_core::{
    BackendChoice, ExpandContext, OnUnsupported, PolicyError, ResolvedPolicy, SandboxConfig,
    SandboxPolicy, SandboxUnavailable, UnavailableKind,
};

use crate::runner::{Outcome, RunError, RunRequest};

/// A policy under construction and the way to run under it.
///
/// Defaults are the policy's own (no writes, network on, 120 s timeout) and
/// fail closed: without a working backend [`Sandbox::run`] is an error, never
/// an unconfined run. Relative paths are taken against the current directory
/// when the policy is resolved.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let out = tempfile::tempdir()?;
/// let outcome = sandbox::Sandbox::new()
///     .write(out.path())
///     .deny_network()
///     .timeout(30)
///     .run(["/bin/sh", "-c", "echo hello > \"$0/greeting\"", out.path().to_str().unwrap()])?;
/// assert_eq!(outcome.exit_code(), 0);
/// assert_eq!(std::fs::read_to_string(out.path().join("greeting"))?, "hello\n");
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Sandbox {
    policy: SandboxPolicy,
    config: SandboxConfig,
    require_full: bool,
    cwd: Option<PathBuf>,
}

/// Why a [`Sandbox`] could not run its command.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The policy is invalid (a missing write path, a bad deny path, ...).
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// No backend confines commands on this host (or it failed its self-test).
    #[error(transparent)]
    Unavailable(#[from] SandboxUnavailable),
    /// The command could not be started, or the sandbox not applied to it.
    #[error(transparent)]
    Run(#[from] RunError),
    /// The current directory (for relative paths) could not be read.
    #[error("cannot read the current directory to resolve relative paths: {0}")]
    CurrentDir(#[source] std::io::Error),
}

/// What kind of failure an [`Error`] is, for callers that branch on it.
///
/// The kinds for an unconfinable host ([`Unavailable`](Self::Unavailable),
/// [`KernelLacksLandlock`](Self::KernelLacksLandlock),
/// [`LandlockDisabled`](Self::LandlockDisabled),
/// [`SelfTestFailed`](Self::SelfTestFailed)) answer `true` to
/// [`is_unavailable`](Self::is_unavailable).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A policy value is wrong (a bad path, glob or name, a timeout above
    /// the ceiling, ...): fix the input.
    InvalidPolicy,
    /// A write path of the policy does not exist.
    PathMissing,
    /// This host cannot confine, for a reason none of the kinds below names
    /// (no backend for this OS, full enforcement required but partial, ...).
    Unavailable,
    /// The kernel has no Landlock (built without it, or too old).
    KernelLacksLandlock,
    /// The kernel has Landlock, but it is disabled at boot (`lsm=`).
    LandlockDisabled,
    /// The backend did not pass its enforcement self-test.
    SelfTestFailed,
    /// The enforcement self-test was interfered with (another process
    /// changed its scratch directory): nothing is known of the host, so this
    /// is not [`is_unavailable`](Self::is_unavailable) and never a reason to
    /// run unconfined.
    SelfTestInterfered,
    /// The enforcement self-test was inconclusive (a control not seen, a
    /// probe launch that could not start, e.g. under a full
    /// `RLIMIT_NPROC`): nothing is known of the host, so this is not
    /// [`is_unavailable`](Self::is_unavailable) and never a reason to run
    /// unconfined.
    SelfTestInconclusive,
    /// The program was not found or is not executable.
    Program,
    /// The command could not be started (spawning failed, or the sandbox
    /// could not be applied in the child).
    Spawn,
    /// Something else went wrong.
    Other,
}

impl ErrorKind {
    /// Whether the host could not confine the command (nothing was run).
    pub fn is_unavailable(self) -> bool {
        matches!(
            self,
            ErrorKind::Unavailable
                | ErrorKind::KernelLacksLandlock
                | ErrorKind::LandlockDisabled
                | ErrorKind::SelfTestFailed
        )
    }
}

impl Error {
    /// The kind of failure.
    pub fn kind(&self) -> ErrorKind {
        let unavailable = |u: &SandboxUnavailable| match u.kind() {
            UnavailableKind::KernelLacksLandlock => ErrorKind::KernelLacksLandlock,
            UnavailableKind::LandlockDisabled => ErrorKind::LandlockDisabled,
            UnavailableKind::SelfTestFailed => ErrorKind::SelfTestFailed,
            UnavailableKind::SelfTestInterfered => ErrorKind::SelfTestInterfered,
            UnavailableKind::SelfTestInconclusive => ErrorKind::SelfTestInconclusive,
            _ => ErrorKind::Unavailable,
        };
        match self {
            Error::Policy(PolicyError::WritePathMissing { .. }) => ErrorKind::PathMissing,
            Error::Policy(_) => ErrorKind::InvalidPolicy,
            Error::Unavailable(u) | Error::Run(RunError::Unavailable(u)) => unavailable(u),
            Error::Run(RunError::NotFound(_) | RunError::NotExecutable { .. }) => {
                ErrorKind::Program
            }
            Error::Run(RunError::Spawn { .. } | RunError::ApplyFailed { .. }) => ErrorKind::Spawn,
            _ => ErrorKind::Other,
        }
    }
}

impl Default for Sandbox {
    fn default() -> Self {
        Self::new()
    }
}

impl Sandbox {
    /// A sandbox with the default policy, the platform's backend and
    /// `on_unsupported = error`.
    pub fn new() -> Self {
        Self {
            policy: SandboxPolicy::default(),
            config: SandboxConfig::default(),
            require_full: false,
            cwd: None,
        }
    }

    fn path(p: impl AsRef<Path>) -> String {
        p.as_ref().to_string_lossy().into_owned()
    }

    /// Allows writes beneath `path` (which must exist).
    pub fn write(mut self, path: impl AsRef<Path>) -> Self {
        self.policy.write_paths.push(Self::path(path));
        self
    }

    /// Refuses writes beneath `path`, even inside a write path.
    pub fn write_deny(mut self, path: impl AsRef<Path>) -> Self {
        self.policy.write_deny_paths.push(Self::path(path));
        self
    }

    /// Refuses reads beneath `path`.
    pub fn read_deny(mut self, path: impl AsRef<Path>) -> Self {
        self.policy.read_deny_paths.push(Self::path(path));
        self
    }

    /// Refuses network access.
    pub fn deny_network(mut self) -> Self {
        self.policy.network = false;
        self
    }

    /// Allows network access only to `rule`'s destinations (repeatable):
    /// host names through the runner's proxy, IP rules directly; see
    /// [`EgressRule`](crate::policy::EgressRule). Only [`Sandbox::run`] starts the
    /// proxy: a [`Sandbox::spawner`] reaches the IP rules only.
    pub fn allow_net(mut self, rule: crate::policy::EgressRule) -> Self {
        self.policy.allow_net.push(rule);
        self
    }

    /// Allows the requests `rule` admits (repeatable; Linux): the host it
    /// names is intercepted by the runner's proxy, which checks each
    /// request's method and path; see
    /// [`RequestRule`](crate::policy::RequestRule). Only [`Sandbox::run`]
    /// starts the proxy.
    pub fn allow_request(mut self, rule: crate::policy::RequestRule) -> Self {
        self.policy.requests.push(rule);
        self
    }

    /// Refuses child processes (the command's own exec still works).
    pub fn deny_subprocess(mut self) -> Self {
        self.policy.deny_subprocess = true;
        self
    }

    /// Removes `name` (exact, or a `*` glob) from the command's environment.
    pub fn env_deny(mut self, name: impl Into<String>) -> Self {
        self.policy.env_deny_names.push(name.into());
        self
    }

    /// Ends the command (and everything it started) after `seconds`.
    pub fn timeout(mut self, seconds: u64) -> Self {
        self.policy.timeout_seconds = seconds;
        self
    }

    /// Limits the whole run's memory, processes and CPU (held by cgroups;
    /// a run whose limits cannot be held here fails unless
    /// [`Sandbox::allow_unlimited`]).
    pub fn limits(mut self, limits: crate::policy::ResourceLimits) -> Self {
        self.config.limits = limits;
        self
    }

    /// Runs even where the limits cannot be held; the outcome's `limits`
    /// says which held.
    pub fn allow_unlimited(mut self) -> Self {
        self.config.allow_unlimited = true;
        self
    }

    /// Refuses to run when the enforcement on this host would be partial.
    pub fn require_full(mut self) -> Self {
        self.require_full = true;
        self
    }

    /// Uses `backend` instead of the platform's.
    pub fn backend(mut self, backend: BackendChoice) -> Self {
        self.config.backend = backend;
        self
    }

    /// What to do without a working backend (default: an error).
    pub fn on_unsupported(mut self, what: OnUnsupported) -> Self {
        self.config.on_unsupported = what;
        self
    }

    /// Runs the command in `dir` (default: the current directory).
    pub fn current_dir(mut self, dir: impl AsRef<Path>) -> Self {
        self.cwd = Some(dir.as_ref().to_path_buf());
        self
    }

    /// The resolved policy: relative paths made absolute against the current
    /// directory, then expanded, canonicalised and checked.
    pub fn policy(&self) -> Result<ResolvedPolicy, Error> {
        let cwd = std::env::current_dir().map_err(Error::CurrentDir)?;
        let absolute = |paths: &[String]| -> Vec<String> {
            paths
                .iter()
                .map(|p| {
                    let path = Path::new(p);
                    if path.is_absolute() || p.starts_with('~') || p.starts_with("{{") {
                        p.clone()
                    } else {
                        cwd.join(path).to_string_lossy().into_owned()
                    }
                })
                .collect()
        };
        let policy = SandboxPolicy {
            write_paths: absolute(&self.policy.write_paths),
            read_deny_paths: absolute(&self.policy.read_deny_paths),
            write_deny_paths: absolute(&self.policy.write_deny_paths),
            ..self.policy.clone()
        };
        Ok(policy.resolve(&ExpandContext::from_env(None))?)
    }

    /// Runs `argv` confined and waits for it and everything it started
    /// (see [`crate::runner::run`], including its process-wide side effects).
    pub fn run<I, S>(&self, argv: I) -> Result<Outcome, Error>
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        let policy = self.policy()?;
        let backend = crate::backend::resolve_backend_for(&self.config, &policy)?.backend;
        let mut req = RunRequest::new(argv.into_iter().map(Into::into).collect(), Some(policy));
        req.cwd = self.cwd.clone();
        req.require_full = self.require_full;
        req.limits = self.config.limits;
        req.allow_unlimited = self.config.allow_unlimited;
        Ok(crate::runner::run(backend.as_ref(), &req)?)
    }

    /// A spawner that confines one thread once under this policy and
    /// starts many `std::process::Command`s from it, each in a Landlock
    /// domain nested beneath the thread's (about 1.2x a plain spawn; Linux).
    #[cfg(target_os = "linux")]
    pub fn spawner(&self) -> Result<crate::backend::ConfinedSpawner, Error> {
        let policy = self.policy()?;
        // The self-test first, as for every backend handed out.
        let config = SandboxConfig {
            backend: BackendChoice::Landlock,
            on_unsupported: OnUnsupported::Error,
            ..self.config.clone()
        };
        crate::backend::resolve_backend_for(&config, &policy)?;
        Ok(crate::backend::LandlockBackend::new()?.spawner(&policy)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_rules_make_an_allowlist() {
        let rule: crate::policy::RequestRule =
            "GET https://pkgs.example.com/simple/**".parse().unwrap();
        let policy = Sandbox::new().allow_request(rule.clone()).policy().unwrap();
        assert_eq!(policy.requests(), &[rule]);
        assert_eq!(policy.network_mode(), crate::policy::NetworkMode::Allowlist);
    }

    #[test]
    fn relative_paths_are_taken_against_the_current_directory() {
        let here = std::env::current_dir().unwrap();
        let p = Sandbox::new().write(".").policy().unwrap();
        assert_eq!(p.write_paths(), &[std::fs::canonicalize(here).unwrap()]);
    }

    #[test]
    fn errors_say_what_kind_they_are() {
        let err = Sandbox::new()
            .write("/nonexistent/sandbox-builder")
            .policy()
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::PathMissing);
        let err = Sandbox::new()
            .write_deny("/tmp/sandbox-builder-*")
            .policy()
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidPolicy, "{err}");
        let err = Sandbox::new()
            .backend(BackendChoice::Seatbelt)
            .run(["/bin/true"])
            .unwrap_err();
        #[cfg(not(target_os = "macos"))]
        {
            assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
            assert!(err.kind().is_unavailable());
        }
        let _ = err;
    }
}
