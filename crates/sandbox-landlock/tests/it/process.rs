//! What the confined process holds: no_new_privs, no capabilities, and the
//! hook's failures are reported as pre-exec errors.
#![cfg(target_os = "linux")]

use crate::common::*;

fn status_field(status: &str, name: &str) -> String {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_owned()))
        .unwrap_or_else(|| panic!("{name} missing from {status}"))
}

#[test]
fn no_new_privs_and_no_capabilities() {
    let t = temp();
    let policy = resolve(write_policy(&[&t.path], false));
    let inside = ok(&sh(&policy, "cat /proc/self/status"));
    assert_eq!(status_field(&inside, "NoNewPrivs:"), "1");
    assert_eq!(status_field(&inside, "Seccomp:"), "2");
    let root = unsafe { libc::geteuid() } == 0;
    if root {
        for cap in ["CapEff:", "CapPrm:", "CapInh:", "CapBnd:", "CapAmb:"] {
            assert_eq!(status_field(&inside, cap), "0000000000000000", "{cap}");
        }
    }
    // Positive control: unconfined, the same shell has neither.
    let outside = ok(&sh_plain("cat /proc/self/status"));
    assert_eq!(status_field(&outside, "NoNewPrivs:"), "0");
    if root {
        assert_ne!(status_field(&outside, "CapEff:"), "0000000000000000");
    }
}

#[test]
fn a_root_child_cannot_regain_capabilities_through_exec() {
    let t = temp();
    let policy = resolve(write_policy(&[&t.path], false));
    // A setuid-root-like gain is impossible; re-exec of a root shell keeps CapEff 0.
    let inside = ok(&sh(&policy, "/bin/sh -c 'cat /proc/self/status'"));
    assert_eq!(status_field(&inside, "CapEff:"), "0000000000000000");
}
