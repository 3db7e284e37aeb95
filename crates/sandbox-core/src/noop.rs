//! The audit-only backend.

use std::ffi::OsString;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::axis::Axis;
use crate::backend::{Backend, Confinement, WrappedArgv};
use crate::error::SandboxUnavailable;
use crate::policy::ResolvedPolicy;
use crate::report::{AxisEnforcement, EnforcementReport, Level};

static WARNED: AtomicBool = AtomicBool::new(false);

/// Runs commands unconfined; logs one WARN line per process on first use.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoopBackend;

impl NoopBackend {
    fn report() -> EnforcementReport {
        EnforcementReport {
            backend: "noop".into(),
            details: vec!["audit only: nothing is enforced".into()],
            axes: [
                Axis::Network,
                Axis::Write,
                Axis::Spawn,
                Axis::ReadDeny,
                Axis::WriteDeny,
            ]
            .into_iter()
            .map(|axis| AxisEnforcement {
                axis,
                mechanism: "none".into(),
                level: Level::None {
                    reason: "noop backend".into(),
                },
            })
            .collect(),
        }
    }

    fn warn_once() {
        if !WARNED.swap(true, Ordering::Relaxed) {
            #[cfg(feature = "tracing")]
            tracing::warn!(
                "sandbox: noop backend in use: commands run without confinement (audit only)"
            );
        }
    }
}

impl Backend for NoopBackend {
    fn name(&self) -> &'static str {
        "noop"
    }

    fn axes(&self) -> &'static [Axis] {
        &[]
    }

    fn enforces(&self) -> bool {
        false
    }

    fn prepare(
        &self,
        _: &ResolvedPolicy,
        argv: &[OsString],
    ) -> Result<Confinement, SandboxUnavailable> {
        Self::warn_once();
        Ok(Confinement::new(argv.to_vec(), None, Self::report()))
    }

    fn wrap_argv(
        &self,
        _: &ResolvedPolicy,
        argv: &[OsString],
    ) -> Result<WrappedArgv, SandboxUnavailable> {
        Self::warn_once();
        Ok(WrappedArgv {
            argv: argv.to_vec(),
            report: Self::report(),
        })
    }
}
