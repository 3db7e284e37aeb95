//! The binary starts and rejects bad usage with clap's usage error.
//! (Also makes `cargo test --workspace` build the `sandbox` binary the
//! end-to-end tests in `tests/` run.)

use std::process::Command;

#[test]
fn help_lists_subcommands() {
    let out = Command::new(env!("CARGO_BIN_EXE_sandbox"))
        .arg("--help")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    for sub in ["run", "exec-op", "policy", "check"] {
        assert!(text.contains(sub), "{sub} missing from help: {text}");
    }
}

#[test]
fn run_without_command_is_a_usage_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_sandbox"))
        .arg("run")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}
