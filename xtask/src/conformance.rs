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

use sandbox::{Backend, ResolvedPolicy, RunRequest};
use sandbox_core::axis::{Axis, WitnessStrength, EXPECTED_AXES};
use sandbox_probe::conformance::{
    problems, run_conformance_with, table, to_json, LegRecord, LegResult, RunEnd, TimeoutRunner,
};

/// Entry point; `args` follow `conformance`.
pub fn main(args: &[String]) -> Result<(), String> {
    let opts = Options::parse(args)?;
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
}

impl Options {
    fn parse(args: &[String]) -> Result<Self, String> {
        let mut opts = Options {
            require: Vec::new(),
            json: None,
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
                other => {
                    return Err(format!(
                        "unknown argument {other:?}; usage: cargo xtask conformance \
                         [--require BACKEND]... [--json FILE]"
                    ))
                }
            }
        }
        Ok(opts)
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
        let outcome = sandbox::run(backend, &req).map_err(|e| e.to_string())?;
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
