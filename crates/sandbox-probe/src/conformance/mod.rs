//! CI-only conformance arms: every axis × deny/boundary/workload leg, run
//! against a real backend, each with evidence text.
//!
//! Never used by the production gate; the write and spawn deny legs reuse the
//! gate's own probes. Arms launch `/bin/sh` and `python3 -I -c` through the
//! backend's wrap, on temporary files and loopback only.
//!
//! Two axes belong to the runner rather than the backend:
//! * `env`: checked at process level, as [`sandbox_core::scrub_env`] followed
//!   by the backend's wrap (the facade runner's own env path is not exercised).
//! * `timeout`: the arms need a [`TimeoutRunner`] (the facade's runner);
//!   without one, [`run_conformance`] reports its legs as skipped, and a
//!   skip never counts as passed.

mod env;
mod exceptions;
mod files;
mod harness;
mod load_method;
mod network;
mod spawn;
mod timeout;

use std::ffi::OsString;

use sandbox_core::axis::{Axis, LegKind, WitnessStrength, EXPECTED_AXES};
use sandbox_core::{Backend, ResolvedPolicy};
use serde::Serialize;

use harness::{Ctx, Outcome};
pub use load_method::{load_method_witness, LoadMethodRecord};
pub use timeout::UnconfinedRunner;

/// One declared exception's own boundary probe, run by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExceptionRecord {
    /// The axis that declares it.
    pub axis: Axis,
    /// The exception's name.
    pub name: &'static str,
    /// The probe's id.
    pub probe: &'static str,
    /// The result.
    #[serde(flatten)]
    pub result: LegResult,
    /// What was attempted and seen.
    pub evidence: String,
}

/// Runs the boundary probe of every declared exception against `backend`;
/// an exception without a probe is a failed record.
pub fn run_exceptions(backend: &dyn Backend) -> Vec<ExceptionRecord> {
    exceptions_in(&Ctx::new(backend))
}

fn exceptions_in(ctx: &Ctx<'_>) -> Vec<ExceptionRecord> {
    sandbox_core::axis::exceptions()
        .map(|(axis, e)| {
            let (result, evidence) = match exceptions::probe(e.probe) {
                Some(p) => p(ctx).unwrap_or_else(|o| o),
                None => (LegResult::Failed, format!("no probe named {:?}", e.probe)),
            };
            ExceptionRecord {
                axis,
                name: e.name,
                probe: e.probe,
                result,
                evidence,
            }
        })
        .collect()
}

/// The result of one leg.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "result", rename_all = "kebab-case")]
#[non_exhaustive]
pub enum LegResult {
    /// The leg's controls were seen and its claim held.
    Passed,
    /// The claim did not hold (see the record's evidence).
    Failed,
    /// A control was not seen, so the leg proves nothing.
    Unwitnessed {
        /// Which control is missing.
        why: String,
    },
    /// The leg could not run here; never counts as passed.
    Skipped {
        /// Why not.
        why: String,
    },
}

impl LegResult {
    /// Stable short name.
    pub fn as_str(&self) -> &'static str {
        match self {
            LegResult::Passed => "passed",
            LegResult::Failed => "failed",
            LegResult::Unwitnessed { .. } => "unwitnessed",
            LegResult::Skipped { .. } => "skipped",
        }
    }
}

/// One leg run against one backend.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LegRecord {
    /// The axis.
    pub axis: Axis,
    /// The leg.
    pub leg: LegKind,
    /// The backend it ran against.
    pub backend: String,
    /// Witness strength the registry declares for this backend, if any.
    pub witness: Option<WitnessStrength>,
    /// The result.
    #[serde(flatten)]
    pub result: LegResult,
    /// What was attempted and what was seen.
    pub evidence: String,
}

/// How a facade runner ended a command, for the timeout arms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunEnd {
    /// Whether the runner ended it at the policy's timeout.
    pub timed_out: bool,
    /// The exit code the runner reports (124 on timeout by convention).
    pub exit_code: Option<i32>,
}

/// A runner that enforces `timeout_seconds` (the facade's), for the timeout arms.
pub trait TimeoutRunner {
    /// Runs `argv` confined by `backend` under `policy` and waits for it to end.
    fn run(
        &self,
        backend: &dyn Backend,
        policy: &ResolvedPolicy,
        argv: &[OsString],
    ) -> Result<RunEnd, String>;
}

/// Runs every leg of every axis in [`EXPECTED_AXES`] against `backend`
/// (timeout legs are skipped: they need a runner).
pub fn run_conformance(backend: &dyn Backend) -> Vec<LegRecord> {
    run_conformance_with(backend, None)
}

/// Like [`run_conformance`], with the runner that exercises the timeout legs.
pub fn run_conformance_with(
    backend: &dyn Backend,
    runner: Option<&dyn TimeoutRunner>,
) -> Vec<LegRecord> {
    let ctx = Ctx::new(backend);
    let mut records = Vec::new();
    for &axis in EXPECTED_AXES {
        for leg in LegKind::ALL {
            let (result, evidence) = run_leg(&ctx, runner, axis, leg);
            records.push(LegRecord {
                axis,
                leg,
                backend: backend.name().to_owned(),
                witness: sandbox_core::axis::contract(axis)
                    .and_then(|c| c.witness_for(backend.name())),
                result,
                evidence,
            });
        }
    }
    records
}

/// Runs one leg of one axis against `backend`.
pub fn run_leg_against(
    backend: &dyn Backend,
    runner: Option<&dyn TimeoutRunner>,
    axis: Axis,
    leg: LegKind,
) -> LegRecord {
    let ctx = Ctx::new(backend);
    let (result, evidence) = run_leg(&ctx, runner, axis, leg);
    LegRecord {
        axis,
        leg,
        backend: backend.name().to_owned(),
        witness: sandbox_core::axis::contract(axis).and_then(|c| c.witness_for(backend.name())),
        result,
        evidence,
    }
}

fn run_leg(ctx: &Ctx<'_>, runner: Option<&dyn TimeoutRunner>, axis: Axis, leg: LegKind) -> Outcome {
    use LegKind::{Boundary, Deny, Workload};
    let done = |r: Result<Outcome, Outcome>| r.unwrap_or_else(|o| o);
    match (axis, leg) {
        (Axis::Network, Deny) => done(network::deny(ctx)),
        (Axis::Network, Boundary) => done(network::boundary(ctx)),
        (Axis::Network, Workload) => done(network::workload(ctx)),
        (Axis::Write, Deny) => files::write_deny_leg(ctx),
        (Axis::Write, Boundary) => done(files::write_boundary(ctx)),
        (Axis::Write, Workload) => done(files::write_workload(ctx)),
        (Axis::Spawn, Deny) => spawn::deny(ctx),
        (Axis::Spawn, Boundary) => done(spawn::boundary(ctx)),
        (Axis::Spawn, Workload) => done(spawn::workload(ctx)),
        (Axis::ReadDeny, leg) => done(files::read_deny(ctx, leg)),
        (Axis::WriteDeny, leg) => done(files::write_deny_axis(ctx, leg)),
        (Axis::Env, leg) => done(env::leg(ctx, leg)),
        (Axis::Timeout, leg) => match runner {
            Some(runner) => done(timeout::leg(ctx, runner, leg)),
            None => (
                LegResult::Skipped {
                    why: "the timeout axis is enforced by the facade runner; pass a \
                          TimeoutRunner to run_conformance_with"
                        .into(),
                },
                String::new(),
            ),
        },
        (axis, leg) => (
            LegResult::Skipped {
                why: format!("no arm for {axis} {}", leg.as_str()),
            },
            String::new(),
        ),
    }
}

/// Every row of the proof run with no sandbox at all: the mutation check.
///
/// A deny, boundary, exception or load-method row that passes here proves
/// nothing: it would pass whatever the sandbox did. Workload legs need no
/// sandbox and may pass.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WithoutSandbox {
    /// Every leg of every axis in [`EXPECTED_AXES`].
    pub legs: Vec<LegRecord>,
    /// Every declared exception's probe.
    pub exceptions: Vec<ExceptionRecord>,
    /// The load-method rows.
    pub load_methods: Vec<LoadMethodRecord>,
}

/// Runs every leg, exception row and load-method row with no sandbox at
/// all: the [`NoopBackend`](sandbox_core::NoopBackend), no environment
/// scrub, and an [`UnconfinedRunner`] (no timeout, no containment) for the
/// timeout legs. See [`WithoutSandbox::problems`] for what must hold.
pub fn run_without_sandbox() -> WithoutSandbox {
    let backend = sandbox_core::NoopBackend;
    let ctx = Ctx::unconfined(&backend);
    let runner = UnconfinedRunner::default();
    let mut legs = Vec::new();
    for &axis in EXPECTED_AXES {
        for leg in LegKind::ALL {
            let (result, evidence) = run_leg(&ctx, Some(&runner), axis, leg);
            legs.push(LegRecord {
                axis,
                leg,
                backend: backend.name().to_owned(),
                witness: None,
                result,
                evidence,
            });
        }
    }
    // Whatever the timeout legs left running ends here.
    drop(runner);
    WithoutSandbox {
        legs,
        exceptions: exceptions_in(&ctx),
        load_methods: load_method::rows(&ctx),
    }
}

impl WithoutSandbox {
    /// The rows that did not fail with no sandbox (each a proof that cannot
    /// fail), and deny or boundary legs that are missing. Empty when every
    /// deny, boundary, exception and load-method row failed.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        let why = |r: &LegResult, evidence: &str| match r {
            LegResult::Unwitnessed { why } | LegResult::Skipped { why } => why.clone(),
            _ => evidence.to_owned(),
        };
        for &axis in EXPECTED_AXES {
            for leg in [LegKind::Deny, LegKind::Boundary] {
                match self.legs.iter().find(|r| r.axis == axis && r.leg == leg) {
                    None => out.push(format!("{axis} {}: missing", leg.as_str())),
                    Some(r) if r.result == LegResult::Failed => {}
                    Some(r) => out.push(format!(
                        "{axis} {}: {} without a sandbox: {}",
                        leg.as_str(),
                        r.result.as_str(),
                        why(&r.result, &r.evidence)
                    )),
                }
            }
        }
        let declared = sandbox_core::axis::exceptions().count();
        if self.exceptions.len() != declared {
            out.push(format!(
                "{} exception rows for {declared} declared exceptions",
                self.exceptions.len()
            ));
        }
        for r in self
            .exceptions
            .iter()
            .filter(|r| r.result != LegResult::Failed)
        {
            out.push(format!(
                "exception {} / {}: {} without a sandbox: {}",
                r.axis,
                r.name,
                r.result.as_str(),
                why(&r.result, &r.evidence)
            ));
        }
        if self.load_methods.is_empty() {
            out.push("no load-method rows".into());
        }
        for r in self
            .load_methods
            .iter()
            .filter(|r| r.result != LegResult::Failed)
        {
            out.push(format!(
                "load method {} / {}: {} without a sandbox: {}",
                r.method,
                r.claim,
                r.result.as_str(),
                why(&r.result, &r.evidence)
            ));
        }
        out
    }
}

/// Why `records` do not prove `backend` conforms: failed, unwitnessed and
/// skipped legs, and legs of [`EXPECTED_AXES`] that are missing. Empty when it does.
pub fn problems(records: &[LegRecord], backend: &str) -> Vec<String> {
    let mut out = Vec::new();
    for &axis in EXPECTED_AXES {
        for leg in LegKind::ALL {
            let found = records
                .iter()
                .find(|r| r.axis == axis && r.leg == leg && r.backend == backend);
            match found {
                None => out.push(format!("{backend} {axis} {}: missing", leg.as_str())),
                Some(r) if r.result == LegResult::Passed => {}
                Some(r) => out.push(format!(
                    "{backend} {axis} {}: {}: {}",
                    leg.as_str(),
                    r.result.as_str(),
                    match &r.result {
                        LegResult::Unwitnessed { why } | LegResult::Skipped { why } => why,
                        _ => &r.evidence,
                    }
                )),
            }
        }
    }
    out
}

/// The records as a plain-text table: axis, leg, backend, witness, result, evidence.
pub fn table(records: &[LegRecord]) -> String {
    let rows: Vec<[String; 6]> = records
        .iter()
        .map(|r| {
            [
                r.axis.to_string(),
                r.leg.as_str().to_owned(),
                r.backend.clone(),
                match r.witness {
                    Some(WitnessStrength::Behavioral) => "behavioral".to_owned(),
                    Some(WitnessStrength::ProfileText) => "profile-text".to_owned(),
                    Some(_) => "other".to_owned(),
                    None => "-".to_owned(),
                },
                r.result.as_str().to_owned(),
                match &r.result {
                    LegResult::Skipped { why } if r.evidence.is_empty() => why.clone(),
                    _ => r.evidence.clone(),
                },
            ]
        })
        .collect();
    let header = ["axis", "leg", "backend", "witness", "result", "evidence"].map(String::from);
    let mut widths = header.clone().map(|h| h.len());
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row).take(5) {
            *w = (*w).max(cell.len());
        }
    }
    let line = |row: &[String; 6]| {
        let mut text = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i < 5 {
                text.push_str(&format!("{cell:<w$}  ", w = widths[i]));
            } else {
                text.push_str(cell);
            }
        }
        text.trim_end().to_owned() + "\n"
    };
    let mut out = line(&header);
    for row in &rows {
        out.push_str(&line(row));
    }
    out
}

/// The records as pretty JSON (the same fields as the table).
pub fn to_json(records: &[LegRecord]) -> String {
    // Serialising plain data with string keys cannot fail.
    serde_json::to_string_pretty(records).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}
