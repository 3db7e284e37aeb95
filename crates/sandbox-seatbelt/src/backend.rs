//! The macOS backend: runs commands under `/usr/bin/sandbox-exec`.

use std::ffi::OsString;
use std::path::Path;

use sandbox_core::{Axis, Backend, Confinement, ResolvedPolicy, SandboxUnavailable, WrappedArgv};

use crate::profile::{profile_for_run, SANDBOX_EXEC};
use crate::report::{enforcement_report, AXES, BACKEND_NAME};

/// Confines commands with Seatbelt via `/usr/bin/sandbox-exec -p`.
#[derive(Debug, Clone, Copy, Default)]
pub struct SeatbeltBackend;

impl SeatbeltBackend {
    /// The backend.
    pub fn new() -> Self {
        Self
    }

    /// Checks that `/usr/bin/sandbox-exec` exists.
    pub fn check_available() -> Result<(), SandboxUnavailable> {
        match Path::new(SANDBOX_EXEC).metadata() {
            Ok(meta) if meta.is_file() => Ok(()),
            Ok(_) => Err(unavailable(format!("{SANDBOX_EXEC} is not a regular file"))),
            Err(e) => Err(unavailable(format!(
                "{SANDBOX_EXEC} cannot be used ({e}); this macOS release may no longer ship it"
            ))),
        }
    }

    fn wrap(
        &self,
        policy: &ResolvedPolicy,
        argv: &[OsString],
    ) -> Result<WrappedArgv, SandboxUnavailable> {
        if argv.is_empty() {
            return Err(unavailable("the command is empty; give the program to run"));
        }
        Self::check_available()?;
        let profile = profile_for_run(policy).map_err(|e| unavailable(e.to_string()))?;
        Ok(WrappedArgv {
            argv: profile.sandbox_exec_argv(argv),
            report: enforcement_report(policy, &profile),
        })
    }
}

fn unavailable(reason: impl Into<String>) -> SandboxUnavailable {
    SandboxUnavailable::new(BACKEND_NAME, reason)
}

impl Backend for SeatbeltBackend {
    fn name(&self) -> &'static str {
        BACKEND_NAME
    }

    fn axes(&self) -> &'static [Axis] {
        AXES
    }

    fn prepare(
        &self,
        policy: &ResolvedPolicy,
        argv: &[OsString],
    ) -> Result<Confinement, SandboxUnavailable> {
        let wrapped = self.wrap(policy, argv)?;
        Ok(Confinement::new(wrapped.argv, None, wrapped.report))
    }

    fn wrap_argv(
        &self,
        policy: &ResolvedPolicy,
        argv: &[OsString],
    ) -> Result<WrappedArgv, SandboxUnavailable> {
        self.wrap(policy, argv)
    }
}
