//! [`LandlockBackend`]: the [`Backend`] implementation.

use std::ffi::OsString;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use sandbox_core::{
    encode_pre_exec_error, Axis, Backend, Confinement, LaunchOptions, PreExecHook, ResolvedPolicy,
    SandboxUnavailable, Supervisor, UnavailableKind, WrappedArgv,
};

use super::abi::{detect_abi, KernelAbi};
use super::broker::BrokerSupervisor;
use super::spawner::{self, ConfinedSpawner};
use super::PreparedLandlock;
use crate::LandlockError;

const NAME: &str = "landlock";

/// Environment variable naming the `sandbox` binary used by [`Backend::wrap_argv`].
pub const SANDBOX_BIN_ENV: &str = "SANDBOX_BIN";

/// The Linux backend: Landlock rules, a seccomp filter, and a broker (a
/// seccomp user-notification supervisor in the launching process).
///
/// Landlock governs paths (and TCP ports, signal and abstract-socket scopes
/// where the ABI has them); the filter refuses what Landlock cannot see
/// (namespaces, io_uring, inode ioctls, other processes, set-id modes, the
/// network when off); the broker performs the calls neither can decide
/// alone, on the command's behalf and with its credentials: metadata writes,
/// writing opens and entry calls when a deny path lies beneath a write path,
/// `connect` (host UNIX sockets, egress rules) and `listen` under egress
/// rules. Each [`Confinement`] carries the broker as a supervisor the runner
/// starts after spawning; without it ([`LandlockBackend::with_broker`]
/// `false`) those calls are refused instead.
#[derive(Debug, Clone, Copy)]
pub struct LandlockBackend {
    abi: KernelAbi,
    broker: bool,
}

impl LandlockBackend {
    /// The backend for this kernel; fails when the kernel has no Landlock.
    pub fn new() -> Result<Self, SandboxUnavailable> {
        detect_abi()
            .map(|abi| Self { abi, broker: true })
            .map_err(unavailable)
    }

    /// Whether metadata writes inside write paths are brokered (`true`) or
    /// refused with `EPERM` everywhere (`false`).
    pub fn with_broker(self, broker: bool) -> Self {
        Self { broker, ..self }
    }

    /// The same backend using at most Landlock ABI `ceiling` (never more than
    /// the kernel offers): what a user of an older kernel gets. Rights the
    /// lower ABI lacks are covered by seccomp where it can, and named as gaps
    /// in the report where it cannot.
    pub fn with_abi_ceiling(self, ceiling: i32) -> Result<Self, SandboxUnavailable> {
        let abi = self.abi.lowered_to(ceiling).map_err(unavailable)?;
        Ok(Self { abi, ..self })
    }

    /// The kernel's Landlock ABI and the one in use.
    pub fn abi(&self) -> KernelAbi {
        self.abi
    }

    /// A ruleset fd that handles no access and scopes signals only, for a
    /// confined process to nest beneath its domain before each command it
    /// forks (the session's shared launch); `None` below Landlock ABI 6
    /// (in use, so lowered by [`ABI_CEILING_ENV`](crate::ABI_CEILING_ENV)),
    /// where a nested domain cannot scope signals.
    pub fn child_layer(&self) -> Result<Option<std::os::fd::OwnedFd>, SandboxUnavailable> {
        super::ruleset::signal_scope_only(self.abi.effective).map_err(unavailable)
    }

    /// A spawner for many commands under `policy`: the policy is prepared
    /// and applied once, to a thread that then spawns each command.
    ///
    /// Refused for policies with `deny_subprocess` (the thread could not
    /// start anything); use the Command form for those.
    pub fn spawner(&self, policy: &ResolvedPolicy) -> Result<ConfinedSpawner, SandboxUnavailable> {
        spawner::check(policy).map_err(unavailable)?;
        let layer = super::ruleset::signal_scope_only(self.abi.effective).map_err(unavailable)?;
        let number = layer
            .as_ref()
            .and_then(|fd| u32::try_from(fd.as_raw_fd()).ok());
        let (prepared, supervisor) =
            self.prepare_brokered(policy, LaunchOptions::default(), number)?;
        let supervisor = supervisor.map(|s| Box::new(s) as Box<dyn Supervisor>);
        ConfinedSpawner::start(prepared, supervisor, layer).map_err(unavailable)
    }

    /// Prepares `policy`, with the broker's channel when brokering is on.
    fn prepare_brokered(
        &self,
        policy: &ResolvedPolicy,
        options: LaunchOptions,
        child_layer: Option<u32>,
    ) -> Result<(PreparedLandlock, Option<BrokerSupervisor>), SandboxUnavailable> {
        let channel = if self.broker {
            Some(
                super::broker::channel(policy, options.dns.clone(), &options.limits)
                    .map_err(unavailable)?,
            )
        } else {
            None
        };
        super::prepare_with(policy, self.abi, channel, options, child_layer).map_err(unavailable)
    }

    /// The confinement of `argv` under `policy` with `options` (what both
    /// [`Backend::prepare`] and [`Backend::prepare_for_launch`] give).
    fn confinement(
        &self,
        policy: &ResolvedPolicy,
        argv: &[OsString],
        options: LaunchOptions,
    ) -> Result<Confinement, SandboxUnavailable> {
        if argv.is_empty() {
            return Err(SandboxUnavailable::new(
                NAME,
                "the command is empty; give the program to run",
            ));
        }
        let layer = options.child_layer;
        let (prepared, supervisor) = self.prepare_brokered(policy, options, layer)?;
        let report = prepared.report().clone();
        // With a broker, the child is spawned and the broker started from a
        // thread in the run's own Landlock domain (see `enter_domain`).
        let companion = match supervisor {
            Some(s) => Some((s, prepared.launch_domain().map_err(unavailable)?)),
            None => None,
        };
        let hook = move || prepared.apply_in_child().map_err(encode_pre_exec_error);
        // SAFETY: `apply_in_child` makes raw syscalls only (prctl, capset,
        // landlock_restrict_self, seccomp) on data prepared above: no
        // allocation, no locks, no panics; failures go through
        // `encode_pre_exec_error`, which builds an `io::Error` from a raw
        // code without allocating.
        let hook = unsafe { PreExecHook::new(hook) };
        let confinement = Confinement::new(argv.to_vec(), Some(hook), report);
        Ok(match companion {
            Some((s, d)) => confinement.with_supervisor(Box::new(s)).with_domain(d),
            None => confinement,
        })
    }
}

fn unavailable(err: LandlockError) -> SandboxUnavailable {
    let kind = match err {
        LandlockError::Unsupported { .. } => UnavailableKind::KernelLacksLandlock,
        LandlockError::Disabled { .. } => UnavailableKind::LandlockDisabled,
        _ => UnavailableKind::Setup,
    };
    SandboxUnavailable::new(NAME, err.to_string())
        .with_kind(kind)
        .with_source(err)
}

impl Backend for LandlockBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    fn axes(&self) -> &'static [Axis] {
        &[
            Axis::Network,
            Axis::Write,
            Axis::Spawn,
            Axis::ReadDeny,
            Axis::WriteDeny,
        ]
    }

    fn prepare(
        &self,
        policy: &ResolvedPolicy,
        argv: &[OsString],
    ) -> Result<Confinement, SandboxUnavailable> {
        self.confinement(policy, argv, LaunchOptions::default())
    }

    /// Honours [`LaunchOptions::hold_process_group`]: the filter then refuses
    /// `setsid` and `setpgid`.
    fn prepare_for_launch(
        &self,
        policy: &ResolvedPolicy,
        argv: &[OsString],
        options: LaunchOptions,
    ) -> Result<Confinement, SandboxUnavailable> {
        self.confinement(policy, argv, options)
    }

    fn wrap_argv(
        &self,
        policy: &ResolvedPolicy,
        argv: &[OsString],
    ) -> Result<WrappedArgv, SandboxUnavailable> {
        let bin = sandbox_binary()?;
        let json = serde_json::to_string(&policy.to_policy()).map_err(|e| {
            SandboxUnavailable::new(NAME, format!("serialising the policy to JSON failed: {e}"))
        })?;
        let mut wrapped: Vec<OsString> = vec![
            bin.into_os_string(),
            "run".into(),
            "--policy-json".into(),
            json.into(),
            "--".into(),
        ];
        wrapped.extend(argv.iter().cloned());
        Ok(WrappedArgv {
            argv: wrapped,
            report: super::report_only(policy, self.abi),
        })
    }
}

/// The `sandbox` binary: `$SANDBOX_BIN`, else `sandbox` on `PATH`.
fn sandbox_binary() -> Result<PathBuf, SandboxUnavailable> {
    if let Some(bin) = std::env::var_os(SANDBOX_BIN_ENV).filter(|v| !v.is_empty()) {
        let bin = PathBuf::from(bin);
        return if is_executable(&bin) {
            Ok(bin)
        } else {
            Err(SandboxUnavailable::new(
                NAME,
                format!(
                    "{SANDBOX_BIN_ENV}={} is not an executable file; point it at the `sandbox` binary",
                    bin.display()
                ),
            ))
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join("sandbox"))
        .find(|candidate| is_executable(candidate))
        .ok_or_else(|| {
            SandboxUnavailable::new(
                NAME,
                format!(
                    "the argv form needs the `sandbox` binary: {SANDBOX_BIN_ENV} is unset and no executable `sandbox` is on PATH ({}); install it or set {SANDBOX_BIN_ENV}",
                    path.to_string_lossy()
                ),
            )
        })
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel's answer survives as a kind to match on, and the Landlock
    /// error as the source.
    #[test]
    fn unavailability_keeps_its_kind_and_source() {
        let cases = [
            (
                LandlockError::Unsupported { reason: "r".into() },
                UnavailableKind::KernelLacksLandlock,
            ),
            (
                LandlockError::Disabled { reason: "r".into() },
                UnavailableKind::LandlockDisabled,
            ),
            (
                LandlockError::Broker(sandbox_broker::BrokerError::FdPassing {
                    reason: "b".into(),
                }),
                UnavailableKind::Setup,
            ),
        ];
        for (err, kind) in cases {
            let text = err.to_string();
            let u = unavailable(err);
            assert_eq!(u.kind(), kind);
            assert_eq!(u.reason, text);
            let source = std::error::Error::source(&u).expect("the Landlock error is kept");
            assert!(source.downcast_ref::<LandlockError>().is_some());
        }
    }
}
