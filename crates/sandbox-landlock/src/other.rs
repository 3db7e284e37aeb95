//! Stand-ins for systems without Landlock: everything reports it is unavailable.

use std::ffi::OsString;

use sandbox_core::{
    Axis, Backend, Confinement, EnforcementReport, ResolvedPolicy, SandboxUnavailable,
    UnavailableKind, WrappedArgv,
};

use crate::LandlockError;

const WHY: &str = "Landlock exists only on Linux";

/// Never constructed off Linux.
#[derive(Debug)]
pub struct PreparedLandlock {
    report: EnforcementReport,
}

impl PreparedLandlock {
    /// Never succeeds off Linux.
    pub fn apply_in_child(&self) -> Result<(), i32> {
        Err(38) // ENOSYS
    }
    /// The report.
    pub fn report(&self) -> &EnforcementReport {
        &self.report
    }
}

/// Always fails off Linux.
pub fn prepare(_: &ResolvedPolicy) -> Result<PreparedLandlock, LandlockError> {
    Err(LandlockError::Unsupported { reason: WHY.into() })
}

/// The Linux backend; unavailable here.
#[derive(Debug, Clone, Copy)]
pub struct LandlockBackend(());

impl LandlockBackend {
    /// Always fails off Linux.
    pub fn new() -> Result<Self, SandboxUnavailable> {
        Err(SandboxUnavailable::new("landlock", WHY).with_kind(UnavailableKind::NoBackend))
    }
}

impl Backend for LandlockBackend {
    fn name(&self) -> &'static str {
        "landlock"
    }
    fn axes(&self) -> &'static [Axis] {
        &[]
    }
    fn prepare(
        &self,
        _: &ResolvedPolicy,
        _: &[OsString],
    ) -> Result<Confinement, SandboxUnavailable> {
        Err(SandboxUnavailable::new("landlock", WHY).with_kind(UnavailableKind::NoBackend))
    }
    fn wrap_argv(
        &self,
        _: &ResolvedPolicy,
        _: &[OsString],
    ) -> Result<WrappedArgv, SandboxUnavailable> {
        Err(SandboxUnavailable::new("landlock", WHY).with_kind(UnavailableKind::NoBackend))
    }
}
