//! The self-test witnesses what runs: its probes go through the runner's
//! own launch sequence, so for the same policy switches a probe and a real
//! run are held by the same containment and install the same seccomp
//! program (the backend names the program by a fingerprint of its
//! instructions). Twin: a run with other switches installs another program,
//! so the comparison can tell programs apart.
#![cfg(target_os = "linux")]

use sandbox::{
    backend::LandlockBackend,
    policy::{ExpandContext, SandboxPolicy},
    runner::RunRequest,
};

fn seccomp_line(report: &sandbox::backend::EnforcementReport) -> String {
    report
        .details
        .iter()
        .find(|d| d.starts_with("seccomp filter of"))
        .cloned()
        .unwrap_or_else(|| panic!("no seccomp line in {:?}", report.details))
}

/// A run of the write probe's policy shape (one write path, network on,
/// subprocesses allowed) or the spawn probe's (subprocesses denied).
fn run(deny_subprocess: bool) -> sandbox::runner::Outcome {
    let dir = tempfile::tempdir().unwrap();
    let policy = SandboxPolicy {
        write_paths: vec![dir.path().to_string_lossy().into_owned()],
        deny_subprocess,
        ..SandboxPolicy::default()
    }
    .resolve(&ExpandContext::default())
    .unwrap();
    let req = RunRequest::new(vec!["/bin/true".into()], Some(policy));
    sandbox::runner::run(&LandlockBackend::new().unwrap(), &req).unwrap()
}

/// In a process of its own: runs in this process make it a child subreaper
/// (unprivileged) for every other test's orphans.
#[test]
fn the_gates_probes_launch_as_a_run_does() {
    if !sandbox_tests::isolated(module_path!(), "the_gates_probes_launch_as_a_run_does") {
        return;
    }
    let gate = sandbox_probe::enforcement_self_test(&LandlockBackend::new().unwrap());
    assert!(gate.passed, "{:?}", gate.problems());
    for (probe, deny_subprocess) in [(&gate.write, false), (&gate.spawn, true)] {
        let facts = probe
            .launch
            .as_ref()
            .unwrap_or_else(|| panic!("{:?} recorded no launch", probe.probe));
        let outcome = run(deny_subprocess);
        assert_eq!(
            Some(facts.containment),
            outcome.containment,
            "{:?}",
            probe.probe
        );
        let ran = seccomp_line(outcome.report.as_ref().unwrap());
        assert_eq!(
            facts.seccomp.as_deref(),
            Some(ran.as_str()),
            "{:?}",
            probe.probe
        );
    }
    // Twin: the two probes' programs differ (subprocesses denied or not),
    // so equal lines above are not equal by construction.
    assert_ne!(gate.write.launch, gate.spawn.launch);
}
