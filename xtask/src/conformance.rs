//! `cargo xtask conformance [--require BACKEND]... [--json FILE]`
//!
//! Runs every leg of every axis in `EXPECTED_AXES` against the backend this
//! host can run (behavioral; the timeout legs through the facade's runner),
//! and the Seatbelt profile-text legs on any host. Prints a table (axis, leg,
//! backend, witness, result, evidence), optionally writes the same as JSON,
//! and fails on any failed, unwitnessed or skipped leg, on any expected axis
//! of the host backend without all three legs, and when `--require` names a
//! backend this host cannot run.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use sandbox::{backend::Backend, policy::ResolvedPolicy, runner::RunRequest};
use sandbox_core::axis::{Axis, LegKind, WitnessStrength, EXPECTED_AXES};
use sandbox_probe::conformance::{
    problems, run_conformance_with, table, to_json, LegRecord, LegResult, RunEnd, TimeoutRunner,
};

/// Entry point; `args` follow `conformance`.
pub fn main(args: &[String]) -> Result<(), String> {
    let opts = Options::parse(args)?;
    if opts.against_noop {
        return against_noop();
    }
    if let Some(axis) = &opts.weaken {
        return weakened(axis);
    }
    if !WEAKENED.is_empty() {
        return Err(format!(
            "this xtask was built with weaken-{} (a test build that drops a mechanism): it \
             proves nothing; run `cargo xtask conformance` from a normal build",
            WEAKENED.join(", weaken-")
        ));
    }
    let mut records = Vec::new();
    let mut failures = Vec::new();

    let host = host_backend();
    let mut load_methods = Vec::new();
    let mut exception_rows = Vec::new();
    match &host {
        Ok(backend) => {
            eprintln!(
                "xtask: conformance: running every leg against `{}`",
                backend.name()
            );
            let found = run_conformance_with(backend.as_ref(), Some(&FacadeRunner));
            failures.extend(problems(&found, backend.name()));
            records.extend(found);
            exception_rows = sandbox_probe::conformance::run_exceptions(backend.as_ref());
            for r in &exception_rows {
                if r.result != LegResult::Passed {
                    failures.push(format!(
                        "exception {} / {}: {}: {}",
                        r.axis,
                        r.name,
                        r.result.as_str(),
                        r.evidence
                    ));
                }
            }
            if backend.name() == "landlock" {
                load_methods = sandbox_probe::conformance::load_method_witness(backend.as_ref());
                for r in &load_methods {
                    if r.result != LegResult::Passed {
                        failures.push(format!(
                            "load method {} / {}: {}: {}",
                            r.method,
                            r.claim,
                            r.result.as_str(),
                            r.evidence
                        ));
                    }
                }
            }
        }
        Err(why) => eprintln!("xtask: conformance: no behavioral backend on this host: {why}"),
    }

    let seatbelt = seatbelt_profile_text();
    failures.extend(seatbelt_problems(&seatbelt));
    records.extend(seatbelt);

    print!("{}", table(&records));
    for r in &exception_rows {
        println!(
            "exception   {:<10} {:<30} {:<7} {}",
            r.axis.as_str(),
            r.name,
            r.result.as_str(),
            r.evidence
        );
    }
    for r in &load_methods {
        println!(
            "load-method {:<12} {:<17} {:<9} {:<7} {}",
            r.method,
            r.claim,
            r.backend,
            r.result.as_str(),
            r.evidence
        );
    }
    if let Some(path) = &opts.json {
        std::fs::write(path, to_json(&records) + "\n")
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        eprintln!("xtask: conformance: wrote {}", path.display());
    }

    for required in &opts.require {
        let ran = records
            .iter()
            .any(|r| &r.backend == required && r.witness == Some(WitnessStrength::Behavioral));
        if !ran {
            failures.push(match (&host, required.as_str()) {
                (Err(why), _) => format!("--require {required}: this host cannot run it: {why}"),
                (Ok(b), _) => format!(
                    "--require {required}: this host runs `{}`, not `{required}`",
                    b.name()
                ),
            });
        }
    }

    if failures.is_empty() {
        eprintln!(
            "xtask: conformance: {} legs passed, none failed, unwitnessed, skipped or missing",
            records.len()
        );
        Ok(())
    } else {
        for f in &failures {
            eprintln!("xtask: conformance: {f}");
        }
        Err(format!(
            "conformance failed: {} problem(s) (listed above)",
            failures.len()
        ))
    }
}

struct Options {
    require: Vec<String>,
    json: Option<PathBuf>,
    against_noop: bool,
    weaken: Option<String>,
}

impl Options {
    fn parse(args: &[String]) -> Result<Self, String> {
        let mut opts = Options {
            require: Vec::new(),
            json: None,
            against_noop: false,
            weaken: None,
        };
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            let mut value = |flag: &str| {
                it.next()
                    .cloned()
                    .ok_or_else(|| format!("{flag} needs a value"))
            };
            match arg.as_str() {
                "--require" => opts.require.push(value("--require")?),
                "--json" => opts.json = Some(PathBuf::from(value("--json")?)),
                "--weaken" => {
                    let axis = value("--weaken")?;
                    if !WEAKENINGS.iter().any(|(a, _)| *a == axis) {
                        return Err(format!(
                            "--weaken {axis:?}: one of {}",
                            WEAKENINGS
                                .iter()
                                .map(|(a, _)| *a)
                                .collect::<Vec<_>>()
                                .join(", ")
                        ));
                    }
                    opts.weaken = Some(axis);
                }
                "--against" => match value("--against")?.as_str() {
                    "noop" => opts.against_noop = true,
                    other => {
                        return Err(format!(
                            "--against {other:?}: only `noop` (no sandbox at all) is known"
                        ))
                    }
                },
                other => {
                    return Err(format!(
                        "unknown argument {other:?}; usage: cargo xtask conformance \
                         [--require BACKEND]... [--json FILE] | --against noop | --weaken AXIS"
                    ))
                }
            }
        }
        Ok(opts)
    }
}

/// `--against noop`: the mutation check of the proof. Every leg, exception
/// row and load-method row runs with no sandbox at all (the noop backend, no
/// env scrub, a runner with no timeout or containment); it passes only when
/// every deny, boundary, exception and load-method row failed. Workload legs
/// need no sandbox and may pass.
fn against_noop() -> Result<(), String> {
    eprintln!(
        "xtask: conformance --against noop: running every row with no sandbox; each deny, \
         boundary, exception and load-method row must FAIL"
    );
    let run = sandbox_probe::conformance::run_without_sandbox();
    let expect = |r: &LegRecord| match r.leg {
        LegKind::Workload => "any",
        _ => "failed",
    };
    println!(
        "{:<11} {:<9} {:<8} {:<12} evidence",
        "axis", "leg", "expected", "result"
    );
    for r in &run.legs {
        println!(
            "{:<11} {:<9} {:<8} {:<12} {}",
            r.axis.as_str(),
            r.leg.as_str(),
            expect(r),
            r.result.as_str(),
            match &r.result {
                LegResult::Unwitnessed { why } | LegResult::Skipped { why } => why,
                _ => &r.evidence,
            }
        );
    }
    for r in &run.exceptions {
        println!(
            "exception   {:<10} {:<30} failed   {:<12} {}",
            r.axis.as_str(),
            r.name,
            r.result.as_str(),
            r.evidence
        );
    }
    for r in &run.load_methods {
        println!(
            "load-method {:<12} {:<17} failed   {:<12} {}",
            r.method,
            r.claim,
            r.result.as_str(),
            r.evidence
        );
    }
    let proving = run.legs.iter().filter(|r| r.leg != LegKind::Workload);
    let (proving_n, proving_failed) = proving.clone().fold((0, 0), |(n, f), r| {
        (n + 1, f + usize::from(r.result == LegResult::Failed))
    });
    let workloads: Vec<&LegRecord> = run
        .legs
        .iter()
        .filter(|r| r.leg == LegKind::Workload)
        .collect();
    let workloads_passed = workloads
        .iter()
        .filter(|r| r.result == LegResult::Passed)
        .count();
    let failed = |v: &[LegResult]| v.iter().filter(|r| **r == LegResult::Failed).count();
    let exc: Vec<LegResult> = run.exceptions.iter().map(|r| r.result.clone()).collect();
    let lm: Vec<LegResult> = run.load_methods.iter().map(|r| r.result.clone()).collect();
    eprintln!(
        "xtask: conformance --against noop: without a sandbox {proving_failed}/{proving_n} deny \
         and boundary legs, {}/{} exception rows and {}/{} load-method rows failed; \
         {workloads_passed}/{} workload legs passed (allowed)",
        failed(&exc),
        exc.len(),
        failed(&lm),
        lm.len(),
        workloads.len()
    );
    let problems = run.problems();
    if problems.is_empty() {
        eprintln!(
            "xtask: conformance --against noop: every proving row fails without the sandbox, so \
             none of them can pass by accident"
        );
        Ok(())
    } else {
        for p in &problems {
            eprintln!("xtask: conformance --against noop: PASSES WITHOUT A SANDBOX: {p}");
        }
        Err(format!(
            "conformance --against noop failed: {} row(s) do not fail without a sandbox \
             (listed above)",
            problems.len()
        ))
    }
}

/// The `weaken-*` features this xtask was built with.
const WEAKENED: &[&str] = &[
    #[cfg(feature = "weaken-write")]
    "write",
    #[cfg(feature = "weaken-network")]
    "network",
    #[cfg(feature = "weaken-spawn")]
    "spawn",
    #[cfg(feature = "weaken-broker")]
    "broker",
];

/// Each weakening (a `weaken-*` feature of sandbox-landlock) and the legs
/// that must fail without that one mechanism.
const WEAKENINGS: &[(&str, &[(Axis, LegKind)])] = &[
    // Landlock's write rules: the ruleset grants every write right on `/`.
    (
        "write",
        &[
            (Axis::Write, LegKind::Deny),
            (Axis::Write, LegKind::Boundary),
        ],
    ),
    // The filter's network part and Landlock's (CONNECT_TCP, abstract scope).
    (
        "network",
        &[
            (Axis::Network, LegKind::Deny),
            (Axis::Network, LegKind::Boundary),
        ],
    ),
    // The filter's spawn part.
    (
        "spawn",
        &[
            (Axis::Spawn, LegKind::Deny),
            (Axis::Spawn, LegKind::Boundary),
        ],
    ),
    // The broker: whatever the filter hands it continues unchecked, so the
    // deny paths beneath write paths and the metadata writes fall open.
    (
        "broker",
        &[
            (Axis::WriteDeny, LegKind::Deny),
            (Axis::WriteDeny, LegKind::Boundary),
            (Axis::Write, LegKind::Boundary),
        ],
    ),
];

/// `--weaken AXIS`: from a normal build, builds and runs a separate xtask
/// with `weaken-AXIS` (its own target directory, so no normal binary is
/// replaced by a weakened one); in that build, runs every leg, exception and
/// load-method row against the host backend and passes only when every leg
/// [`WEAKENINGS`] names for the axis failed.
fn weakened(axis: &str) -> Result<(), String> {
    let feature = format!("weaken-{axis}");
    if !WEAKENED.contains(&axis) {
        let target = crate::workspace_root().join("target/weaken");
        let target = target.to_str().ok_or("the target path is not UTF-8")?;
        return crate::cargo(&[
            "run",
            "--quiet",
            "-p",
            "xtask",
            "--features",
            &feature,
            "--target-dir",
            target,
            "--",
            "conformance",
            "--weaken",
            axis,
        ]);
    }
    let expected = WEAKENINGS
        .iter()
        .find(|(a, _)| *a == axis)
        .map(|(_, legs)| *legs)
        .ok_or_else(|| format!("no weakening named {axis:?}"))?;
    let backend = host_backend()?;
    eprintln!(
        "xtask: conformance --weaken {axis}: a build with {feature} (one mechanism dropped) \
         against `{}`; these legs must FAIL: {}",
        backend.name(),
        expected
            .iter()
            .map(|(a, l)| format!("{a} {}", l.as_str()))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let records = run_conformance_with(backend.as_ref(), Some(&FacadeRunner));
    let exceptions = sandbox_probe::conformance::run_exceptions(backend.as_ref());
    let load_methods = sandbox_probe::conformance::load_method_witness(backend.as_ref());
    print!("{}", table(&records));
    for r in &exceptions {
        println!(
            "exception   {:<10} {:<30} {:<7} {}",
            r.axis.as_str(),
            r.name,
            r.result.as_str(),
            r.evidence
        );
    }
    for r in &load_methods {
        println!(
            "load-method {:<12} {:<17} {:<7} {}",
            r.method,
            r.claim,
            r.result.as_str(),
            r.evidence
        );
    }
    let mut problems = Vec::new();
    for (a, l) in expected {
        match records.iter().find(|r| r.axis == *a && r.leg == *l) {
            Some(r) if r.result == LegResult::Failed => {}
            Some(r) => problems.push(format!(
                "{a} {}: {} with {feature}: {}",
                l.as_str(),
                r.result.as_str(),
                r.evidence
            )),
            None => problems.push(format!("{a} {}: missing", l.as_str())),
        }
    }
    let failed_elsewhere: Vec<String> = records
        .iter()
        .filter(|r| r.result != LegResult::Passed && !expected.contains(&(r.axis, r.leg)))
        .map(|r| format!("{} {}", r.axis, r.leg.as_str()))
        .chain(
            exceptions
                .iter()
                .filter(|r| r.result != LegResult::Passed)
                .map(|r| format!("exception {}", r.name)),
        )
        .chain(
            load_methods
                .iter()
                .filter(|r| r.result != LegResult::Passed)
                .map(|r| format!("load method {} {}", r.method, r.claim)),
        )
        .collect();
    eprintln!(
        "xtask: conformance --weaken {axis}: {}/{} of the axis's legs failed; also not passing \
         (the same mechanism, seen by other rows): {}",
        expected.len() - problems.len(),
        expected.len(),
        if failed_elsewhere.is_empty() {
            "none".to_owned()
        } else {
            failed_elsewhere.join(", ")
        }
    );
    if problems.is_empty() {
        eprintln!("xtask: conformance --weaken {axis}: every leg of the axis caught the weakening");
        Ok(())
    } else {
        for p in &problems {
            eprintln!("xtask: conformance --weaken {axis}: PASSES WITHOUT THE MECHANISM: {p}");
        }
        Err(format!(
            "conformance --weaken {axis} failed: {} leg(s) did not notice (listed above)",
            problems.len()
        ))
    }
}

/// The backend whose legs run behaviorally on this host.
fn host_backend() -> Result<Box<dyn Backend>, String> {
    #[cfg(target_os = "linux")]
    {
        sandbox_landlock::LandlockBackend::new()
            .map(|b| Box::new(b) as Box<dyn Backend>)
            .map_err(|e| e.to_string())
    }
    #[cfg(target_os = "macos")]
    {
        sandbox_seatbelt::SeatbeltBackend::check_available()
            .map(|()| Box::new(sandbox_seatbelt::SeatbeltBackend::new()) as Box<dyn Backend>)
            .map_err(|e| e.to_string())
    }
    #[cfg(not(any(target_os = "linux", target_os = "macos")))]
    {
        Err("behavioral legs run on Linux (Landlock) and macOS (Seatbelt)".into())
    }
}

/// The facade runner, so the timeout legs witness what `sandbox run` does.
struct FacadeRunner;

impl TimeoutRunner for FacadeRunner {
    fn run(
        &self,
        backend: &dyn Backend,
        policy: &ResolvedPolicy,
        argv: &[OsString],
    ) -> Result<RunEnd, String> {
        let mut req = RunRequest::new(argv.to_vec(), Some(policy.clone()));
        req.echo_stderr = false;
        req.grace = Duration::from_millis(200);
        let outcome = sandbox::runner::run(backend, &req).map_err(|e| e.to_string())?;
        Ok(RunEnd {
            timed_out: outcome.timed_out,
            exit_code: Some(outcome.exit_code()),
        })
    }
}

/// The Seatbelt profile-text legs (any host).
fn seatbelt_profile_text() -> Vec<LegRecord> {
    sandbox_seatbelt::conformance::run_all()
        .into_iter()
        .map(|(axis, leg, result)| {
            let (result, evidence) = match result {
                Ok(evidence) => (LegResult::Passed, evidence),
                Err(evidence) => (LegResult::Failed, evidence),
            };
            LegRecord {
                axis,
                leg,
                backend: "seatbelt".into(),
                witness: Some(sandbox_seatbelt::conformance::WITNESS),
                result,
                evidence,
            }
        })
        .collect()
}

/// Failed legs, and missing legs of the axes Seatbelt checks as profile text.
///
/// `env` and `timeout` are runner axes with no profile text; they are
/// witnessed behaviorally through the host backend's runner legs.
fn seatbelt_problems(records: &[LegRecord]) -> Vec<String> {
    let covered = sandbox_seatbelt::conformance::PROFILE_TEXT_AXES;
    let mut out: Vec<String> = problems(records, "seatbelt")
        .into_iter()
        .filter(|p| {
            !EXPECTED_AXES
                .iter()
                .filter(|a| !covered.contains(a))
                .any(|a: &Axis| p.starts_with(&format!("seatbelt {a} ")))
        })
        .collect();
    for &axis in covered {
        if !EXPECTED_AXES.contains(&axis) {
            out.push(format!("seatbelt {axis}: not in EXPECTED_AXES"));
        }
    }
    out
}
