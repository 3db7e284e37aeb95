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

    /// Whether a probe saw a forbidden action happen
    /// ([`ProbeResult::Failed`]: a write outside the write paths, or a
    /// child under `deny_subprocess`) and none was interfered with: the
    /// backend does not enforce on this host. The only failing report that
    /// says something of the backend, and the only one `on_unsupported` may
    /// turn into the noop backend.
    pub fn failed(&self) -> bool {
        !self.interfered()
            && self
                .probes()
                .into_iter()
                .any(|p| matches!(p.result, ProbeResult::Failed { .. }))
    }

    /// Whether the report did not pass and yet saw no forbidden action get
    /// through, nor interference: a control not seen, a probe launch that
    /// could not start or finish (`EAGAIN` from a fork or a thread under a
    /// full `RLIMIT_NPROC`, `ENOMEM`, `EMFILE`, a timeout, no opener, a
    /// scratch that could not be made). That says nothing of the backend
    /// (red team R7 F2): never a reason to run unconfined, and never cached.
    pub fn inconclusive(&self) -> bool {
        !self.passed && !self.interfered() && !self.failed()
    }

    /// The verdict in one word: `passed`, `failed`, `interfered` or `inconclusive`.
    pub fn verdict(&self) -> &'static str {
        if self.passed {
            "passed"
        } else if self.interfered() {
            "interfered"
        } else if self.failed() {
            "failed"
        } else {
            "inconclusive"
        }
    }
}

/// A backend did not pass its enforcement self-test.
///
/// Only a [`failed`](GateReport::failed) report (a forbidden action was
/// seen to happen) means the backend does not enforce here; an
/// [`interfered`](GateReport::interfered) or
/// [`inconclusive`](GateReport::inconclusive) one says nothing of it, and
/// [`to_unavailable`](Self::to_unavailable) gives it a kind that
/// `on_unsupported` never turns into an unconfined run.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "backend `{}` did not pass its enforcement self-test ({}): {}",
    report.backend,
    report.verdict(),
    report.problems().join("; ")
)]
pub struct GateFailure {
    /// The full report, for `sandbox check`.
    pub report: &'static GateReport,
}

impl GateFailure {
    /// The same failure as the error backend resolution reports.
    ///
    /// Only a [`failed`](GateReport::failed) self-test (a forbidden action
    /// was seen to happen) is [`UnavailableKind::SelfTestFailed`], which
    /// `on_unsupported` may turn into the noop backend. One that was
    /// interfered with is [`UnavailableKind::SelfTestInterfered`], any other
    /// (a control not seen, a launch that could not start: red team R7 F2)
    /// [`UnavailableKind::SelfTestInconclusive`]; `on_unsupported` never
    /// turns those into an unconfined run.
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
        } else if self.report.failed() {
            (
                format!("enforcement self-test failed: {problems}"),
                UnavailableKind::SelfTestFailed,
            )
        } else {
            (
                format!(
                    "enforcement self-test inconclusive: no forbidden action was seen to get \
                     through, but a control or a probe launch did not happen as it must (a \
                     shortage of processes, memory or file descriptors, a timeout, ...), so \
                     nothing is known of the backend (not run unconfined whatever \
                     on_unsupported says): {problems}"
                ),
                UnavailableKind::SelfTestInconclusive,
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
/// Only a report that passed or [failed](GateReport::failed) is cached. One
/// that was interfered with or is [inconclusive](GateReport::inconclusive)
/// is not: the next call runs the self-test again (another process's
/// interference, or a passing shortage of processes, says nothing of the
/// backend, and must not fail every later run of a long-lived process, nor
/// leave a session on the noop backend: red team R7 F2).
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
                    if !fresh.passed && !fresh.failed() {
                        return Err(GateFailure {
                            report: keep_uncached(fresh),
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

/// Keeps an uncached (interfered or inconclusive) report for the caller's
/// error: each one is kept for the process (a [`GateFailure`] holds a
/// `'static` report), at most [`KEPT_UNCACHED`] of each verdict; past that
/// the last kept one of the same verdict is returned again (so the error's
/// kind stays the same), and a process that meets them forever does not
/// grow without bound.
fn keep_uncached(report: GateReport) -> &'static GateReport {
    static KEPT: Mutex<Vec<&'static GateReport>> = Mutex::new(Vec::new());
    let mut kept = KEPT.lock().unwrap_or_else(PoisonError::into_inner);
    let verdict = report.verdict();
    let same: Vec<&'static GateReport> = kept
        .iter()
        .copied()
        .filter(|r| r.verdict() == verdict)
        .collect();
    match same.last() {
        Some(last) if same.len() >= KEPT_UNCACHED => last,
        _ => {
            let report: &'static GateReport = Box::leak(Box::new(report));
            kept.push(report);
            report
        }
    }
}

/// Uncached reports of each verdict a process keeps at most ([`keep_uncached`]).
const KEPT_UNCACHED: usize = 16;

/// The cached report for `backend_name`, if the gate already ran in this process.
pub fn cached(backend_name: &'static str) -> Option<&'static GateReport> {
    cell_for(backend_name).get()
}
