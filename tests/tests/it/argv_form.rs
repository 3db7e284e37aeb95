//! The argv form: a caller in another language spawns the argv that
//! `wrap_argv` returns, and the `sandbox` binary confines the command.
#![cfg(target_os = "linux")]

use std::ffi::OsString;
use std::process::Command;

use sandbox::{
    backend::{Backend, LandlockBackend},
    policy::{ExpandContext, SandboxPolicy},
};
use sandbox_tests::sandbox_bin;

/// In a process of its own: it sets `SANDBOX_BIN` in its environment.
#[test]
fn wrapped_argv_confines_writes() {
    if !sandbox_tests::isolated(module_path!(), "wrapped_argv_confines_writes") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let (inside, outside) = (root.join("in"), root.join("out"));
    std::fs::create_dir_all(&inside).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    let policy = SandboxPolicy {
        write_paths: vec![inside.display().to_string()],
        network: false,
        ..Default::default()
    }
    .resolve(&ExpandContext::default())
    .unwrap();
    // SANDBOX_BIN names the binary; set it for this process (this test's alone).
    std::env::set_var("SANDBOX_BIN", sandbox_bin());
    let script = format!(
        "echo ok > {0}/a && echo no > {1}/b",
        inside.display(),
        outside.display()
    );
    let argv: Vec<OsString> = ["/bin/sh", "-c", &script]
        .iter()
        .map(OsString::from)
        .collect();
    let wrapped = LandlockBackend::new()
        .unwrap()
        .wrap_argv(&policy, &argv)
        .unwrap();
    assert_eq!(wrapped.argv[0], sandbox_bin().into_os_string());
    let out = Command::new(&wrapped.argv[0])
        .args(&wrapped.argv[1..])
        .output()
        .unwrap();
    assert!(!out.status.success(), "the write outside must fail");
    // Positive control: the write inside happened; the one outside did not.
    assert_eq!(std::fs::read_to_string(inside.join("a")).unwrap(), "ok\n");
    assert!(!outside.join("b").exists());
    assert!(String::from_utf8_lossy(&out.stderr).contains("Permission denied"));
}
