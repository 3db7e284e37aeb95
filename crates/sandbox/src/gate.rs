//! The enforcement self-test every real backend passes before it is handed out.

use sandbox_core::{Backend, SandboxUnavailable};

/// Checks that `backend` really enforces on this host (cached per backend per process).
///
/// Audit-only backends are not probed: they claim nothing.
pub(crate) fn check(backend: &dyn Backend) -> Result<(), SandboxUnavailable> {
    if !backend.enforces() {
        return Ok(());
    }
    sandbox_probe::gate(backend)
        .map(|_| ())
        .map_err(|failure| failure.to_unavailable())
}
