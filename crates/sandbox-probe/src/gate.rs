//! The production gate: a backend is handed out only after it fired real
//! denies on this host, through its own wrap.

use std::collections::HashMap;
use std::path::Path;
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
                ProbeResult::Interfered { scratch, observed } => Some(format!(
                    "{} probe interfered with: another process changed its scratch directory \
                     {scratch}: {observed}",
                    p.probe.as_str()
                )),
            })
            .collect()
    }

    /// Whether a probe was interfered with ([`ProbeResult::Interfered`]):
    /// the report then says nothing of the backend.
    pub fn interfered(&self) -> bool {
        self.probes()
            .into_iter()
            .any(|p| matches!(p.result, ProbeResult::Interfered { .. }))
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
    ///
    /// A self-test that was interfered with is
    /// [`UnavailableKind::SelfTestInterfered`], which `on_unsupported`
    /// never turns into an unconfined run.
    pub fn to_unavailable(&self) -> SandboxUnavailable {
        let problems = self.report.problems().join("; ");
        let (reason, kind) = if self.report.interfered() {
            (
                format!(
                    "enforcement self-test interfered with (not run unconfined whatever \
                     on_unsupported says): {problems}"
                ),
                UnavailableKind::SelfTestInterfered,
            )
        } else {
            (
                format!("enforcement self-test failed: {problems}"),
                UnavailableKind::SelfTestFailed,
            )
        };
        // No source: the failure's text would repeat the reason, and the
        // report stays reachable through `cached(backend)`.
        SandboxUnavailable::new(self.report.backend.clone(), reason).with_kind(kind)
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
/// name per process. The scratch lies in the runtime directory, else
/// `$TMPDIR`; [`enforcement_self_test_in`] puts it in a trusted directory.
pub fn enforcement_self_test(backend: &dyn Backend) -> GateReport {
    enforcement_self_test_in(backend, None)
}

/// [`enforcement_self_test`] with its scratch in `trusted` when given: a
/// directory of this user's trusted state that every confined run
/// write-denies (`sandbox` passes its self-test cache directory), made
/// mode 0700 if missing and used only when it is a real directory of this
/// user that no one else may write; else where [`enforcement_self_test`]
/// puts it.
pub fn enforcement_self_test_in(backend: &dyn Backend, trusted: Option<&Path>) -> GateReport {
    let start = Instant::now();
    let (write, spawn) = both_probes(backend, trusted);
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
    gate_in(backend, None)
}

/// [`gate`] with the self-test's scratch in `trusted` when given (see
/// [`enforcement_self_test_in`]).
///
/// A report that was interfered with is not cached: the next call runs the
/// self-test again (another process's interference says nothing of the
/// backend, and must not fail every later run of a long-lived process).
pub fn gate_in(
    backend: &dyn Backend,
    trusted: Option<&Path>,
) -> Result<&'static GateReport, GateFailure> {
    let cell = cell_for(backend.name());
    let report = match cell.get() {
        Some(report) => report,
        None => {
            // One self-test at a time: a second caller waits and takes the first's report.
            static RUNNING: Mutex<()> = Mutex::new(());
            let _one = RUNNING.lock().unwrap_or_else(PoisonError::into_inner);
            match cell.get() {
                Some(report) => report,
                None => {
                    let fresh = enforcement_self_test_in(backend, trusted);
                    if fresh.interfered() {
                        return Err(GateFailure {
                            report: keep_interfered(fresh),
                        });
                    }
                    cell.get_or_init(|| fresh)
                }
            }
        }
    };
    if report.passed {
        Ok(report)
    } else {
        Err(GateFailure { report })
    }
}

/// Keeps an interfered report for the caller's error: each one is kept
/// for the process (a [`GateFailure`] holds a `'static` report), at most
/// [`KEPT_INTERFERED`] of them; past that the last kept one is returned
/// again (an interference too), so a process interfered with forever does
/// not grow without bound.
fn keep_interfered(report: GateReport) -> &'static GateReport {
    static KEPT: Mutex<Vec<&'static GateReport>> = Mutex::new(Vec::new());
    let mut kept = KEPT.lock().unwrap_or_else(PoisonError::into_inner);
    match kept.last() {
        Some(last) if kept.len() >= KEPT_INTERFERED => last,
        _ => {
            let report: &'static GateReport = Box::leak(Box::new(report));
            kept.push(report);
            report
        }
    }
}

/// Interfered reports a process keeps at most ([`keep_interfered`]).
const KEPT_INTERFERED: usize = 16;

/// The cached report for `backend_name`, if the gate already ran in this process.
pub fn cached(backend_name: &'static str) -> Option<&'static GateReport> {
    cell_for(backend_name).get()
}
