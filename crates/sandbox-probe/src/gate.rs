//! The production gate: a backend is handed out only after it fired real
//! denies on this host, through its own wrap.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Instant;

use sandbox_core::{Backend, SandboxUnavailable, UnavailableKind};
use serde::Serialize;

use crate::probe::{both_probes, ProbeReport, ProbeResult};

/// The outcome of [`enforcement_self_test`] for one backend.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GateReport {
    /// The backend tested.
    pub backend: String,
    /// Whether both probes were witnessed.
    pub passed: bool,
    /// The write probe.
    pub write: ProbeReport,
    /// The spawn probe.
    pub spawn: ProbeReport,
    /// Wall-clock cost of the self-test, in microseconds.
    pub elapsed_us: u64,
}

impl GateReport {
    /// Both probes, write first.
    pub fn probes(&self) -> [&ProbeReport; 2] {
        [&self.write, &self.spawn]
    }

    /// One line per probe that did not pass: what was attempted and observed.
    pub fn problems(&self) -> Vec<String> {
        self.probes()
            .into_iter()
            .filter_map(|p| match &p.result {
                ProbeResult::Witnessed => None,
                ProbeResult::Failed {
                    attempted,
                    observed,
                } => Some(format!(
                    "{} probe failed: attempted to {attempted}; observed: {observed}",
                    p.probe.as_str()
                )),
                ProbeResult::Unwitnessed { why } => {
                    Some(format!("{} probe unwitnessed: {why}", p.probe.as_str()))
                }
            })
            .collect()
    }
}

/// A backend did not pass its enforcement self-test; treat it as absent.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "backend `{}` did not pass its enforcement self-test, so it is treated as unavailable: {}",
    report.backend,
    report.problems().join("; ")
)]
pub struct GateFailure {
    /// The full report, for `sandbox check`.
    pub report: &'static GateReport,
}

impl GateFailure {
    /// The same failure as the error backend resolution reports.
    pub fn to_unavailable(&self) -> SandboxUnavailable {
        SandboxUnavailable::new(
            self.report.backend.clone(),
            format!(
                "enforcement self-test failed: {}",
                self.report.problems().join("; ")
            ),
        )
        // No source: the failure's text would repeat the reason, and the
        // report stays reachable through `cached(backend)`.
        .with_kind(UnavailableKind::SelfTestFailed)
    }
}

impl From<GateFailure> for SandboxUnavailable {
    fn from(f: GateFailure) -> Self {
        f.to_unavailable()
    }
}

/// Runs the write and spawn probes against `backend`, uncached.
///
/// Only two witnessed probes pass. Prefer [`gate`], which caches per backend
/// name per process.
pub fn enforcement_self_test(backend: &dyn Backend) -> GateReport {
    let start = Instant::now();
    let (write, spawn) = both_probes(backend);
    let elapsed_us = u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX);
    GateReport {
        backend: backend.name().to_owned(),
        passed: write.result.is_witnessed() && spawn.result.is_witnessed(),
        write,
        spawn,
        elapsed_us,
    }
}

type Cell = &'static OnceLock<GateReport>;

fn cell_for(name: &'static str) -> Cell {
    static CELLS: OnceLock<Mutex<HashMap<&'static str, Cell>>> = OnceLock::new();
    let mut cells = CELLS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    // One small cell per backend name, alive for the process: names are few and static.
    cells
        .entry(name)
        .or_insert_with(|| Box::leak(Box::new(OnceLock::new())))
}

/// The gate backend resolution calls before handing out `backend`.
///
/// Runs [`enforcement_self_test`] once per backend name per process (later
/// calls, also from other threads, get the cached report) and returns the
/// report when both probes were witnessed. Call it only when a real backend
/// is resolved, never on paths that do not touch the sandbox.
pub fn gate(backend: &dyn Backend) -> Result<&'static GateReport, GateFailure> {
    let report = cell_for(backend.name()).get_or_init(|| enforcement_self_test(backend));
    if report.passed {
        Ok(report)
    } else {
        Err(GateFailure { report })
    }
}

/// The cached report for `backend_name`, if the gate already ran in this process.
pub fn cached(backend_name: &'static str) -> Option<&'static GateReport> {
    cell_for(backend_name).get()
}
