//! The hook where the enforcement self-test runs before a real backend is handed out.

use sandbox_core::{Backend, SandboxUnavailable};

/// Checks that `backend` really enforces on this host.
pub(crate) fn check(backend: &dyn Backend) -> Result<(), SandboxUnavailable> {
    if !backend.enforces() {
        return Ok(());
    }
    Err(SandboxUnavailable::new(
        backend.name(),
        "the enforcement self-test is not available in this build, so the backend cannot be trusted",
    ))
}
