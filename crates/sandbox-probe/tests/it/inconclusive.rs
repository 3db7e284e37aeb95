//! A self-test that could not be carried out (red team R7 F2): a probe
//! launch refused `EAGAIN` as under a full `RLIMIT_NPROC`, or a fork the
//! kernel refuses inside the launch. No forbidden action was seen, so the
//! report is *inconclusive*: its error is never the kind `on_unsupported`
//! turns into the noop backend, and the gate does not cache it. Controls: a
//! backend that really lets writes through still *fails* (cached, the kind
//! `on_unsupported` may fall back on), and the undisturbed backend passes.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use crate::support::{Kind, TestBackend};
use sandbox_core::UnavailableKind;
use sandbox_probe::{cached, gate_in, ProbeResult};

fn base() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = std::fs::canonicalize(dir.path()).unwrap();
    (dir, path)
}

/// Every probe launch fails to start with `EAGAIN`: inconclusive, refused
/// kind, nothing cached; the gate runs the self-test again next time.
#[test]
fn launches_refused_eagain_are_inconclusive_and_not_cached() {
    let (_keep, base) = base();
    let backend = TestBackend::new("test-launch-eagain", Kind::LaunchFails(libc::EAGAIN));
    let err = gate_in(&backend, Some(&base)).unwrap_err();
    let report = err.report;
    assert!(
        report.inconclusive() && !report.failed() && !report.interfered(),
        "{report:?}"
    );
    assert_eq!(report.verdict(), "inconclusive");
    for p in report.probes() {
        assert!(
            matches!(&p.result, ProbeResult::Unwitnessed { why } if why.contains("Resource temporarily unavailable")),
            "{:?}",
            p.result
        );
    }
    let unavailable = err.to_unavailable();
    assert_eq!(unavailable.kind(), UnavailableKind::SelfTestInconclusive);
    assert!(
        unavailable.reason.contains("inconclusive")
            && unavailable
                .reason
                .contains("not run unconfined whatever on_unsupported says"),
        "{}",
        unavailable.reason
    );
    assert!(err.to_string().contains("(inconclusive)"), "{err}");
    assert!(cached("test-launch-eagain").is_none(), "never cached");
    let launches = backend.prepared.load(std::sync::atomic::Ordering::SeqCst);
    assert!(launches > 0);
    // Not cached: the next call probes again (and is inconclusive again).
    let again = gate_in(&backend, Some(&base)).unwrap_err();
    assert!(again.report.inconclusive());
    assert!(backend.prepared.load(std::sync::atomic::Ordering::SeqCst) > launches);
    assert!(cached("test-launch-eagain").is_none());
    // The scratch is gone each time.
    assert_eq!(std::fs::read_dir(&base).unwrap().count(), 0);
}

/// Forks refused by the kernel inside the launch (`RLIMIT_NPROC` 0): as a
/// user other than root the spawn probe's positive control cannot be seen
/// and the opener never runs, so the report is inconclusive, never
/// "failed"; root is exempt from the limit, and there the same backend
/// passes (the positive control of the test).
#[test]
fn forks_refused_by_rlimit_nproc_are_inconclusive_not_failed() {
    let (_keep, base) = base();
    let backend = TestBackend::new("test-nproc-zero", Kind::NoProcessesLeft);
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        let report = gate_in(&backend, Some(&base)).expect("root is exempt from RLIMIT_NPROC");
        assert!(report.passed);
        assert!(cached("test-nproc-zero").is_some());
        eprintln!("root: RLIMIT_NPROC does not apply; the backend passes");
        return;
    }
    let err = gate_in(&backend, Some(&base)).unwrap_err();
    assert!(err.report.inconclusive(), "{err}");
    assert_eq!(
        err.to_unavailable().kind(),
        UnavailableKind::SelfTestInconclusive
    );
    let ProbeResult::Unwitnessed { why } = &err.report.spawn.result else {
        panic!("{:?}", err.report.spawn.result);
    };
    assert!(why.contains("positive control not seen"), "{why}");
    assert!(
        !matches!(err.report.write.result, ProbeResult::Failed { .. }),
        "{:?}",
        err.report.write.result
    );
    assert!(cached("test-nproc-zero").is_none(), "never cached");
}

/// Control: a backend that lets writes through is *failed* (a forbidden
/// write seen), the kind `on_unsupported` may fall back on, and cached.
#[test]
fn a_backend_that_lets_writes_through_is_failed_and_cached() {
    let (_keep, base) = base();
    let backend = TestBackend::new("test-inconclusive-control", Kind::IgnoresWritePaths);
    let err = gate_in(&backend, Some(&base)).unwrap_err();
    assert!(err.report.failed() && !err.report.inconclusive(), "{err}");
    assert_eq!(err.report.verdict(), "failed");
    assert_eq!(err.to_unavailable().kind(), UnavailableKind::SelfTestFailed);
    assert!(cached("test-inconclusive-control").is_some());
    // Control: the working backend passes.
    let working = TestBackend::new("test-inconclusive-working", Kind::Working);
    let report = gate_in(&working, Some(&base)).unwrap();
    assert!(report.passed && report.verdict() == "passed");
}
