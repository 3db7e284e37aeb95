//! The production gate against working and deliberately broken backends, on the real kernel.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use crate::support::{Kind, TestBackend};
use sandbox_core::{NoopBackend, SandboxUnavailable};
use sandbox_probe::{
    enforcement_self_test, gate, CheckRole, GateReport, ProbeKind, ProbeReport, ProbeResult,
};

fn unwitnessed_why(p: &ProbeReport) -> &str {
    match &p.result {
        ProbeResult::Unwitnessed { why } => why,
        other => panic!(
            "{} probe: expected unwitnessed, got {other:?}",
            p.probe.as_str()
        ),
    }
}

fn failed(p: &ProbeReport) -> (&str, &str) {
    match &p.result {
        ProbeResult::Failed {
            attempted,
            observed,
        } => (attempted, observed),
        other => panic!("{} probe: expected failed, got {other:?}", p.probe.as_str()),
    }
}

fn roles(p: &ProbeReport) -> Vec<(CheckRole, bool)> {
    p.checks.iter().map(|c| (c.role, c.ok)).collect()
}

#[test]
fn a_working_backend_passes_with_every_control_seen() {
    let backend = TestBackend::new("test-working", Kind::Working);
    let report = gate(&backend).expect("the working backend passes");
    assert!(report.passed);
    assert_eq!(report.write.result, ProbeResult::Witnessed);
    assert_eq!(report.spawn.result, ProbeResult::Witnessed);
    assert_eq!(
        roles(&report.write),
        [
            (CheckRole::PositiveControl, true),
            (CheckRole::Deny, true),
            (CheckRole::Deny, true),
            (CheckRole::PositiveControl, true),
            (CheckRole::Deny, true)
        ]
    );
    // The read-only truncate leg: its control emptied a file inside, its deny
    // saw the open refused with the file intact.
    let control = &report.write.checks[3];
    assert!(
        control.attempted.contains("O_WRONLY|O_TRUNC")
            && control.observed == "the file was truncated",
        "{control:?}"
    );
    let deny = &report.write.checks[4];
    assert!(
        deny.attempted.contains("O_RDONLY|O_TRUNC")
            && deny.attempted.contains("outside write_paths")
            && deny.observed.starts_with("refused: open(2) failed with "),
        "{deny:?}"
    );
    assert_eq!(
        roles(&report.spawn),
        [
            (CheckRole::PositiveControl, true),
            (CheckRole::NonForkingControl, true),
            (CheckRole::Deny, true)
        ]
    );
    // The deny checks saw the shell's refusal, not mere absence.
    let deny = &report.write.checks[1];
    assert!(deny.observed.contains("refused"), "{}", deny.observed);
    eprintln!(
        "gate cost (cold, working test backend): {} us",
        report.elapsed_us
    );
}

#[test]
fn the_gate_runs_once_per_backend_name() {
    let backend = TestBackend::new("test-cached", Kind::Working);
    let first: *const GateReport = gate(&backend).unwrap();
    let launches = backend.prepared.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(launches, 2, "one launch per policy");
    let second: *const GateReport = gate(&backend).unwrap();
    assert_eq!(first, second);
    assert_eq!(
        backend.prepared.load(std::sync::atomic::Ordering::SeqCst),
        launches
    );
    assert!(sandbox_probe::cached("test-cached").is_some());
}

#[test]
fn a_wrap_that_runs_nothing_is_unwitnessed_not_passed() {
    let backend = TestBackend::new("test-runs-nothing", Kind::RunsNothing);
    let err = gate(&backend).unwrap_err();
    let why = unwitnessed_why(&err.report.write);
    assert!(why.contains("positive control not seen"), "{why}");
    let why = unwitnessed_why(&err.report.spawn);
    assert!(why.contains("positive control not seen"), "{why}");
    // No deny was judged: nothing happening proves nothing.
    assert!(err
        .report
        .write
        .checks
        .iter()
        .all(|c| c.role != CheckRole::Deny));
    let msg = err.to_string();
    assert!(
        msg.contains("test-runs-nothing") && msg.contains("write probe unwitnessed"),
        "{msg}"
    );
}

#[test]
fn a_backend_that_ignores_write_paths_fails_the_write_probe() {
    let backend = TestBackend::new("test-ignores-write-paths", Kind::IgnoresWritePaths);
    let err = gate(&backend).unwrap_err();
    let (attempted, observed) = failed(&err.report.write);
    assert!(
        attempted.contains("outside write_paths") && attempted.contains("created"),
        "{attempted}"
    );
    assert!(observed.contains("the file was created"), "{observed}");
    let (attempted, observed) = failed(&err.report.spawn);
    assert!(attempted.contains("deny_subprocess = true"), "{attempted}");
    assert!(observed.contains("the child ran"), "{observed}");
    // The message names what was attempted and what was observed.
    let unavailable: SandboxUnavailable = err.clone().into();
    assert_eq!(unavailable.backend, "test-ignores-write-paths");
    assert!(
        unavailable.reason.contains("attempted to create")
            && unavailable
                .reason
                .contains("observed: the file was created"),
        "{}",
        unavailable.reason
    );
}

#[test]
fn a_backend_that_leaves_read_only_truncate_open_fails_the_write_probe() {
    // Creating and overwriting outside are refused (no writable fd), but
    // O_RDONLY|O_TRUNC empties the file: the probe must see that, by the
    // file's size, not by the open's return value.
    let backend = TestBackend::new("test-forgets-truncate", Kind::ForgetsTruncate);
    let err = gate(&backend).unwrap_err();
    assert_eq!(err.report.spawn.result, ProbeResult::Witnessed);
    let (attempted, observed) = failed(&err.report.write);
    assert!(
        attempted.contains("O_RDONLY|O_TRUNC") && attempted.contains("outside write_paths"),
        "{attempted}"
    );
    assert!(
        observed.starts_with("the file was truncated: 0 bytes"),
        "{observed}"
    );
    assert_eq!(
        roles(&err.report.write),
        [
            (CheckRole::PositiveControl, true),
            (CheckRole::Deny, true),
            (CheckRole::Deny, true),
            (CheckRole::PositiveControl, true),
            (CheckRole::Deny, false)
        ]
    );
    let msg = err.to_string();
    assert!(
        msg.contains("write probe failed") && msg.contains("O_RDONLY|O_TRUNC"),
        "{msg}"
    );
}

#[test]
fn a_backend_that_denies_every_syscall_is_unwitnessed() {
    let backend = TestBackend::new("test-denies-everything", Kind::DeniesEverything);
    let err = gate(&backend).unwrap_err();
    let why = unwitnessed_why(&err.report.write);
    assert!(
        why.contains("positive control not seen") && why.contains("signal 31"),
        "{why}"
    );
    unwitnessed_why(&err.report.spawn);
}

#[test]
fn a_filter_that_refuses_everything_is_told_apart_from_one_that_refuses_fork() {
    let backend = TestBackend::new("test-spawn-denies-everything", Kind::SpawnDeniesEverything);
    let err = gate(&backend).unwrap_err();
    assert_eq!(err.report.write.result, ProbeResult::Witnessed);
    let why = unwitnessed_why(&err.report.spawn);
    assert!(why.contains("non-forking control not seen"), "{why}");
}

#[test]
fn a_backend_that_forgets_the_spawn_rules_fails_the_spawn_probe_only() {
    let backend = TestBackend::new("test-forgets-spawn", Kind::ForgetsSpawnRules);
    let err = gate(&backend).unwrap_err();
    assert_eq!(err.report.write.result, ProbeResult::Witnessed);
    let (attempted, observed) = failed(&err.report.spawn);
    assert!(
        attempted.contains("fork a subshell") && attempted.contains("deny_subprocess = true"),
        "{attempted}"
    );
    assert!(observed.contains("the child ran"), "{observed}");
    assert_eq!(err.report.spawn.probe, ProbeKind::Spawn);
    let msg = err.to_string();
    assert!(msg.contains("spawn probe failed"), "{msg}");
    assert!(!msg.contains("write probe"), "{msg}");
}

#[test]
fn the_noop_backend_never_passes() {
    let report = enforcement_self_test(&NoopBackend);
    assert!(!report.passed);
    failed(&report.write);
    failed(&report.spawn);
}

#[test]
fn the_report_serialises_for_sandbox_check_json() {
    let report = enforcement_self_test(&TestBackend::new("test-json", Kind::ForgetsSpawnRules));
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["backend"], "test-json");
    assert_eq!(json["passed"], false);
    assert_eq!(json["write"]["result"], "witnessed");
    assert_eq!(json["spawn"]["result"], "failed");
    assert!(json["spawn"]["attempted"].is_string());
    assert_eq!(json["spawn"]["checks"][1]["role"], "non-forking-control");
}

#[test]
fn the_real_landlock_backend_passes() {
    let backend = sandbox_landlock::LandlockBackend::new().expect("Landlock is available here");
    let report = match gate(&backend) {
        Ok(r) => r,
        Err(e) => panic!("{e}"),
    };
    assert_eq!(report.backend, "landlock");
    for probe in report.probes() {
        assert!(probe.checks.iter().all(|c| c.ok), "{probe:?}");
    }
    eprintln!("gate cost (cold, landlock): {} us", report.elapsed_us);
    // Each probe quotes its own launch's stderr (the two launches run at the
    // same time): the spawn probe's refused fork, never the write probe's
    // refused write.
    let observed = |p: &ProbeReport| {
        p.checks
            .iter()
            .map(|c| c.observed.clone())
            .collect::<Vec<_>>()
            .join(" | ")
    };
    let spawn = observed(&report.spawn);
    assert!(!spawn.contains("cannot create"), "{spawn}");
    let write = observed(&report.write);
    assert!(!write.to_lowercase().contains("cannot fork"), "{write}");
}
