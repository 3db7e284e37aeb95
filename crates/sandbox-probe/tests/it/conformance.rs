//! The conformance arms against the real Landlock backend and against the
//! noop backend (which must fail every deny leg), on the real kernel.
#![cfg(all(feature = "conformance", target_os = "linux"))]

use std::ffi::OsString;
use std::time::Duration;

use sandbox_core::axis::{Axis, LegKind, WitnessStrength, EXPECTED_AXES};
use sandbox_core::{Backend, NoopBackend, ResolvedPolicy};
use sandbox_probe::conformance::{
    problems, run_conformance, run_conformance_with, table, to_json, LegResult, RunEnd,
    TimeoutRunner,
};

/// A minimal runner for the timeout arms: own process group, killed as a
/// group at the policy's timeout. The facade's runner plugs in the same way.
struct GroupKillRunner;

impl TimeoutRunner for GroupKillRunner {
    fn run(
        &self,
        backend: &dyn Backend,
        policy: &ResolvedPolicy,
        argv: &[OsString],
    ) -> Result<RunEnd, String> {
        use std::os::unix::process::CommandExt;
        let (mut cmd, _) = backend
            .prepare(policy, argv)
            .map_err(|e| e.to_string())?
            .into_command()
            .ok_or("empty argv")?;
        cmd.process_group(0).stdin(std::process::Stdio::null());
        let mut child = cmd.spawn().map_err(|e| e.to_string())?;
        let pid = child.id() as i32;
        let start = std::time::Instant::now();
        let mut timed_out = false;
        let status = loop {
            if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
                break status;
            }
            if start.elapsed() >= policy.timeout() {
                timed_out = true;
                // SAFETY: signalling the process group this runner created.
                unsafe { libc::kill(-pid, libc::SIGKILL) };
                break child.wait().map_err(|e| e.to_string())?;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        // SAFETY: as above; descendants of a finished run go too.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
        Ok(RunEnd {
            timed_out,
            exit_code: if timed_out { Some(124) } else { status.code() },
        })
    }
}

#[test]
fn every_leg_passes_against_the_real_landlock_backend() {
    let backend = sandbox_landlock::LandlockBackend::new().expect("Landlock is available here");
    let records = run_conformance_with(&backend, Some(&GroupKillRunner));
    eprintln!("{}", table(&records));
    assert_eq!(records.len(), EXPECTED_AXES.len() * 3);
    assert!(records
        .iter()
        .all(|r| r.witness == Some(WitnessStrength::Behavioral)));
    let problems = problems(&records, "landlock");
    assert!(problems.is_empty(), "{problems:#?}");
    let json: serde_json::Value = serde_json::from_str(&to_json(&records)).unwrap();
    assert_eq!(json[0]["axis"], "network");
    assert_eq!(json[0]["leg"], "deny");
    assert_eq!(json[0]["result"], "passed");
}

#[test]
fn without_a_runner_the_timeout_legs_are_skipped_and_never_pass() {
    // The noop backend keeps this cheap; only the timeout legs are inspected.
    let records = run_conformance(&NoopBackend);
    let timeout: Vec<_> = records.iter().filter(|r| r.axis == Axis::Timeout).collect();
    assert_eq!(timeout.len(), 3);
    assert!(timeout
        .iter()
        .all(|r| matches!(r.result, LegResult::Skipped { .. })));
    let problems = problems(&records, "noop");
    assert!(
        problems.iter().any(|p| p.contains("timeout deny: skipped")),
        "{problems:#?}"
    );
    // A backend nothing ran against is missing every leg.
    assert_eq!(
        sandbox_probe::conformance::problems(&[], "landlock").len(),
        21
    );
}

#[test]
fn the_noop_backend_fails_every_deny_and_boundary_leg_of_the_confinement_axes() {
    let records = run_conformance(&NoopBackend);
    eprintln!("{}", table(&records));
    for axis in [
        Axis::Network,
        Axis::Write,
        Axis::Spawn,
        Axis::ReadDeny,
        Axis::WriteDeny,
    ] {
        for leg in [LegKind::Deny, LegKind::Boundary] {
            let r = records
                .iter()
                .find(|r| r.axis == axis && r.leg == leg)
                .unwrap();
            assert_eq!(
                r.result,
                LegResult::Failed,
                "{axis} {}: {}",
                leg.as_str(),
                r.evidence
            );
        }
        // Workloads need no confinement: they pass unconfined, so they are no deny witness.
        let w = records
            .iter()
            .find(|r| r.axis == axis && r.leg == LegKind::Workload)
            .unwrap();
        assert_eq!(
            w.result,
            LegResult::Passed,
            "{axis} workload: {}",
            w.evidence
        );
    }
}
