//! The argv form: `wrap_argv` starts the `sandbox` binary with the policy.
//! In a process of its own (`isolated`) because it changes the environment.
#![cfg(target_os = "linux")]

use std::ffi::OsString;

use crate::common::*;
use sandbox_core::{Backend, SandboxPolicy};
use sandbox_landlock::{LandlockBackend, SANDBOX_BIN_ENV};

#[test]
fn wrap_argv_starts_the_sandbox_binary_with_the_policy() {
    if !isolated(
        module_path!(),
        "wrap_argv_starts_the_sandbox_binary_with_the_policy",
    ) {
        return;
    }
    let t = temp();
    let bin = t.path.join("sandbox");
    std::fs::write(&bin, "#!/bin/sh\n").unwrap();
    let no_exec = t.path.join("not-executable");
    std::fs::write(&no_exec, "").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let policy = resolve(write_policy(&[&t.path], false));
    let b = LandlockBackend::new().unwrap();
    let argv = [OsString::from("echo"), OsString::from("hi")];

    // The only test in this process: nothing else reads the environment.
    std::env::set_var(SANDBOX_BIN_ENV, &bin);
    let wrapped = b.wrap_argv(&policy, &argv).unwrap();
    assert_eq!(wrapped.argv[0], bin.as_os_str());
    assert_eq!(
        wrapped.argv[1..3],
        [OsString::from("run"), OsString::from("--policy-json")]
    );
    let json = wrapped.argv[3].to_str().unwrap();
    let back: SandboxPolicy = serde_json::from_str(json).unwrap();
    assert_eq!(back, policy.to_policy());
    assert_eq!(wrapped.argv[4..], ["--", "echo", "hi"].map(OsString::from));

    std::env::set_var(SANDBOX_BIN_ENV, &no_exec);
    let err = b.wrap_argv(&policy, &argv).unwrap_err();
    assert!(err.reason.contains("not-executable"), "{err}");

    std::env::remove_var(SANDBOX_BIN_ENV);
    let old_path = std::env::var_os("PATH");
    std::env::set_var("PATH", t.path.join("empty"));
    let err = b.wrap_argv(&policy, &argv).unwrap_err();
    if let Some(p) = old_path {
        std::env::set_var("PATH", p);
    }
    assert!(
        err.reason.contains("SANDBOX_BIN") && err.reason.contains("sandbox"),
        "{err}"
    );
    std::env::set_var(
        "PATH",
        format!("{}:{}", t.path.display(), std::env::var("PATH").unwrap()),
    );
    assert_eq!(
        b.wrap_argv(&policy, &argv).unwrap().argv[0],
        bin.as_os_str()
    );
}
