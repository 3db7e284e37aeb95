//! The binary starts and rejects bad usage with exit 125 and one line.
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
    assert_eq!(out.status.code(), Some(125));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("sandbox: "), "{err}");
}

/// Library warnings reach stderr (the CLI's own log subscriber), and each
/// subcommand keeps its own description although its arguments are deferred.
#[cfg(target_os = "linux")]
#[test]
fn warnings_reach_stderr_and_subcommands_keep_their_help() {
    let out = Command::new(env!("CARGO_BIN_EXE_sandbox"))
        .args(["run", "--backend", "seatbelt", "--on-unsupported", "warn"])
        .args(["--", "/bin/true"])
        .env_remove("SANDBOX_LOG")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("falling back to the noop backend")
            && stderr.contains("noop backend in use"),
        "{stderr}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_sandbox"))
        .args(["run", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.starts_with("Run PROGRAM under the policy"), "{help}");
    assert!(help.contains("--write-deny"), "{help}");
}

/// A printing command whose reader has gone ends by SIGPIPE, quietly, like
/// other Unix tools; it does not panic.
#[cfg(unix)]
#[test]
fn a_closed_stdout_ends_printing_commands_quietly() {
    use std::os::fd::{FromRawFd, OwnedFd};
    use std::os::unix::process::ExitStatusExt;
    let mut fds = [0; 2];
    // SAFETY: fds has room for the two pipe ends, which we then own.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let (reader, writer) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_sandbox"))
        .args(["policy", "-w", "/tmp"])
        .stdout(writer)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// A closed stdin is reopened on /dev/null before anything else is opened,
/// so the command never finds one of the CLI's own files on fd 0.
#[cfg(target_os = "linux")]
#[test]
fn a_closed_stdin_becomes_dev_null() {
    use std::os::unix::process::CommandExt;
    let dir = std::env::temp_dir().join(format!("sandbox-cli-fd0-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("fd0");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sandbox"));
    cmd.args([
        "run",
        "--backend",
        "noop",
        "--on-unsupported",
        "ignore",
        "--",
    ])
    .args(["/bin/sh", "-c"])
    .arg(format!("readlink /proc/self/fd/0 > '{}'", out.display()));
    // SAFETY: close is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            libc::close(0);
            Ok(())
        });
    }
    let status = cmd.status().unwrap();
    assert!(status.success());
    assert_eq!(std::fs::read_to_string(&out).unwrap().trim(), "/dev/null");
    let _ = std::fs::remove_dir_all(&dir);
}
