//! Helpers for the end-to-end tests in `tests/tests/`: they run the real
//! `sandbox` binary on the real kernel.

use std::path::PathBuf;
use std::process::{Command, Output};

/// Path of the `sandbox` binary built by this workspace (`SANDBOX_BIN` overrides).
pub fn sandbox_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("SANDBOX_BIN") {
        return PathBuf::from(p);
    }
    // target/<profile>/deps/<test-exe> -> target/<profile>/sandbox
    let exe = std::env::current_exe().expect("current_exe");
    let bin = exe
        .parent()
        .and_then(|deps| deps.parent())
        .map(|profile| profile.join("sandbox"))
        .expect("test executable has a target directory");
    assert!(
        bin.is_file(),
        "{} is missing: run the tests with `cargo test --workspace` (or `cargo xtask ci`), which builds it",
        bin.display()
    );
    bin
}

/// A `sandbox` command with a clean config: no `$SANDBOX_CONFIG`, and a
/// `$XDG_CONFIG_HOME` without a sandbox config (a test that wants one passes
/// `--config` or sets the variable itself).
pub fn sandbox() -> Command {
    let mut cmd = Command::new(sandbox_bin());
    cmd.current_dir(std::env::temp_dir())
        .env_remove("SANDBOX_CONFIG")
        .env("XDG_CONFIG_HOME", "/nonexistent/sandbox-tests-config");
    cmd
}

/// [`sandbox`] run as nobody (`setpriv --reuid=65534 --regid=65534
/// --clear-groups`), with the same clean config environment.
pub fn sandbox_as_nobody() -> Command {
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(sandbox_bin())
        .current_dir(std::env::temp_dir())
        .env_remove("SANDBOX_CONFIG")
        .env("XDG_CONFIG_HOME", "/nonexistent/sandbox-tests-config");
    cmd
}

/// Output of `sandbox <args>`.
pub fn run(args: &[&str]) -> Output {
    sandbox().args(args).output().expect("spawn sandbox")
}

/// Lines of stderr that start with `sandbox:`.
pub fn sandbox_lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| l.starts_with("sandbox:"))
        .map(str::to_owned)
        .collect()
}

/// Asserts the run exited with `code`, quoting its stderr otherwise.
#[track_caller]
pub fn assert_exit(out: &Output, code: i32) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
