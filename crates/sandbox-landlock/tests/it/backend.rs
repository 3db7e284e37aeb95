//! The `Backend` contract: availability, argv form, report and hook errors.
#![cfg(target_os = "linux")]

use std::ffi::OsString;

use crate::common::*;
use sandbox_core::{decode_pre_exec_error, Axis, Backend, Enforcement, Level, SandboxPolicy};
use sandbox_landlock::LandlockBackend;

#[test]
fn backend_is_available_and_claims_its_axes() {
    let b = LandlockBackend::new().expect("Landlock on this host");
    assert_eq!(b.name(), "landlock");
    assert!(b.enforces());
    assert_eq!(
        b.axes(),
        &[
            Axis::Network,
            Axis::Write,
            Axis::Spawn,
            Axis::ReadDeny,
            Axis::WriteDeny
        ]
    );
    assert!(b.abi().kernel >= 1);
}

#[test]
fn report_names_mechanisms_per_axis() {
    let t = temp();
    let policy = resolve(SandboxPolicy {
        network: false,
        write_paths: vec![path_str(&t.path)],
        write_deny_paths: vec![path_str(&t.path.join(".git"))],
        read_deny_paths: vec![path_str(&t.path.join("secret"))],
        deny_subprocess: true,
        ..Default::default()
    });
    let prepared = sandbox_landlock::prepare(&policy).unwrap();
    let report = prepared.report();
    println!("{}", serde_json::to_string_pretty(report).unwrap());
    assert_eq!(report.backend, "landlock");
    for axis in [
        Axis::Network,
        Axis::Write,
        Axis::Spawn,
        Axis::ReadDeny,
        Axis::WriteDeny,
    ] {
        let entry = report
            .axis(axis)
            .unwrap_or_else(|| panic!("{axis} reported"));
        assert!(!matches!(entry.level, Level::None { .. }), "{axis}");
    }
    assert!(report
        .axis(Axis::Spawn)
        .unwrap()
        .mechanism
        .contains("seccomp"));
    assert!(report
        .axis(Axis::WriteDeny)
        .unwrap()
        .mechanism
        .contains("landlock"));
    assert!(report.details.iter().any(|d| d.starts_with("landlock ABI")));
    assert!(matches!(report.enforcement(), Enforcement::Partial { .. }));
}

#[test]
fn hook_failure_is_a_tagged_pre_exec_error() {
    let t = temp();
    let policy = resolve(write_policy(&[&t.path], false));
    let b = LandlockBackend::new().unwrap();
    let argv = [OsString::from("/bin/true")];
    // Positive control: one hook applies and the command runs.
    let (mut cmd, _) = b.prepare(&policy, &argv).unwrap().into_command().unwrap();
    assert!(cmd.status().unwrap().success());
    // A second hook in the same child runs under the first one's seccomp
    // filter, which refuses the confinement syscalls: the spawn fails with
    // an error tagged as "sandbox could not be applied", not as exec failure.
    let (mut cmd, _) = b.prepare(&policy, &argv).unwrap().into_command().unwrap();
    let second = b.prepare(&policy, &argv).unwrap();
    second
        .pre_exec
        .expect("landlock installs a hook")
        .install(&mut cmd);
    let err = cmd.status().unwrap_err();
    assert!(decode_pre_exec_error(&err).is_some(), "{err:?}");
    // An exec failure is not tagged.
    let err = confined_cmd(&policy, &["/nonexistent/program"])
        .output()
        .unwrap_err();
    assert_eq!(decode_pre_exec_error(&err), None, "{err}");
}

#[test]
fn missing_write_path_is_an_error_naming_it() {
    let t = temp();
    let gone = t.path.join("gone");
    std::fs::create_dir(&gone).unwrap();
    let policy = resolve(write_policy(&[&gone], false));
    std::fs::remove_dir(&gone).unwrap();
    let b = LandlockBackend::new().unwrap();
    let err = b.prepare(&policy, &[OsString::from("true")]).unwrap_err();
    assert!(err.reason.contains("gone"), "{err}");
}
