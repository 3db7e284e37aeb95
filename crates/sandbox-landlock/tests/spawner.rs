//! The confined spawner: one thread confined once, every child it starts
//! confined like the Command form's, and the rest of the process untouched.
#![cfg(target_os = "linux")]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Output, Stdio};

use common::*;
use sandbox_core::SandboxPolicy;
use sandbox_landlock::{ConfinedSpawner, LandlockBackend};

fn spawner(policy: &sandbox_core::ResolvedPolicy) -> ConfinedSpawner {
    LandlockBackend::new()
        .expect("Landlock is available on this host")
        .spawner(policy)
        .expect("spawner starts")
}

fn sh(spawner: &ConfinedSpawner, script: &str) -> Output {
    let mut cmd = Command::new("/bin/sh");
    cmd.args(["-c", script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    spawner.spawn(cmd).unwrap().wait_with_output().unwrap()
}

#[test]
fn children_are_confined_and_the_rest_of_the_process_is_not() {
    let (w, outside) = (temp(), temp());
    let policy = resolve(write_policy(&[&w.path], false));
    let spawner = spawner(&policy);
    for round in 0..20 {
        // Positive control: inside the write path, the child writes.
        let inside = w.path.join(format!("in{round}"));
        ok(&sh(&spawner, &format!("echo x > '{}'", inside.display())));
        assert!(inside.exists());
        // Outside it, the same write is refused and nothing appears.
        let target = outside.path.join(format!("out{round}"));
        refused(&sh(&spawner, &format!("echo x > '{}'", target.display())));
        assert!(!target.exists());
    }
    // This thread is not confined: it writes outside.
    std::fs::write(outside.path.join("main"), "x").unwrap();
    let status = ok(&sh(&spawner, "cat /proc/self/status"));
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_owned()))
            .unwrap()
    };
    assert_eq!(field("NoNewPrivs:"), "1");
    assert_eq!(field("Seccomp:"), "2");
    if unsafe { libc::geteuid() } == 0 {
        assert_eq!(field("CapEff:"), "0000000000000000");
        assert_eq!(field("CapBnd:"), "0000000000000000");
    }
    assert!(spawner.report().backend.contains("landlock"));
}

#[test]
fn metadata_writes_go_to_the_spawners_broker() {
    let (w, outside) = (temp(), temp());
    let (inner, outer) = (w.path.join("f"), outside.path.join("f"));
    for f in [&inner, &outer] {
        std::fs::write(f, "x").unwrap();
        std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let policy = resolve(write_policy(&[&w.path], false));
    let spawner = spawner(&policy);
    ok(&sh(&spawner, &format!("chmod 600 '{}'", inner.display())));
    refused(&sh(&spawner, &format!("chmod 600 '{}'", outer.display())));
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&inner), 0o600, "the brokered chmod inside took effect");
    assert_eq!(mode(&outer), 0o644, "the chmod outside changed nothing");
    let mediation = spawner.finish().expect("the spawner ran a broker");
    assert!(mediation.performed >= 1, "{mediation:?}");
    assert!(!mediation.refused.is_empty(), "{mediation:?}");
}

#[test]
fn a_policy_denying_subprocesses_is_refused() {
    let w = temp();
    let policy = resolve(SandboxPolicy {
        deny_subprocess: true,
        ..write_policy(&[&w.path], false)
    });
    let err = LandlockBackend::new()
        .unwrap()
        .spawner(&policy)
        .unwrap_err();
    assert!(err.to_string().contains("deny_subprocess"), "{err}");
    // Positive control: the same policy without the switch gets a spawner.
    let policy = resolve(write_policy(&[&w.path], false));
    assert!(LandlockBackend::new().unwrap().spawner(&policy).is_ok());
}
