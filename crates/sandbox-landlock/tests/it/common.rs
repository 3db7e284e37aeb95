//! Helpers shared by the integration tests: build a policy, run a shell
//! script confined by the backend, and look at what happened.
#![allow(dead_code)]

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use sandbox_core::{Backend, ExpandContext, ResolvedPolicy, SandboxPolicy, Supervisor};
use sandbox_landlock::LandlockBackend;

/// A temporary directory whose path is canonical (tests compare paths).
pub struct Temp {
    _dir: tempfile::TempDir,
    pub path: PathBuf,
}

pub fn temp() -> Temp {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = std::fs::canonicalize(dir.path()).expect("canonicalize");
    Temp { _dir: dir, path }
}

pub fn resolve(policy: SandboxPolicy) -> ResolvedPolicy {
    policy
        .resolve(&ExpandContext::default())
        .expect("policy resolves")
}

pub fn path_str(p: &Path) -> String {
    p.to_str().expect("utf-8 path").to_owned()
}

/// A confined `Command` for `argv` under `policy`, and the metadata broker's
/// supervisor to start once it is spawned.
pub fn confined(policy: &ResolvedPolicy, argv: &[&str]) -> (Command, Option<Box<dyn Supervisor>>) {
    confined_at(None, policy, argv)
}

/// [`confined`] with the Landlock ABI lowered to `abi` (what older kernels get).
pub fn confined_at(
    abi: Option<i32>,
    policy: &ResolvedPolicy,
    argv: &[&str],
) -> (Command, Option<Box<dyn Supervisor>>) {
    let mut backend = LandlockBackend::new().expect("Landlock is available on this host");
    if let Some(abi) = abi {
        backend = backend.with_abi_ceiling(abi).expect("a valid ABI ceiling");
    }
    let argv: Vec<OsString> = argv.iter().map(OsString::from).collect();
    let mut confinement = backend.prepare(policy, &argv).expect("prepare");
    let supervisor = confinement.supervisor.take();
    let (mut cmd, _report) = confinement.into_command().expect("argv is not empty");
    cmd.stdin(Stdio::null());
    (cmd, supervisor)
}

/// Spawns `cmd` with output captured, runs its supervisor while it runs, and waits.
pub fn output_supervised(mut cmd: Command, supervisor: Option<Box<dyn Supervisor>>) -> Output {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = cmd.spawn().expect("spawn the confined command");
    drop(cmd);
    let running = supervisor.map(|s| {
        let mut running = s.start().expect("start the metadata broker");
        running
            .confirm()
            .expect("the metadata broker has the listener");
        running
    });
    let out = child.wait_with_output().expect("wait");
    if let Some(r) = running {
        r.finish();
    }
    out
}

/// Runs `script` with `/bin/sh -c` under `policy`.
pub fn sh(policy: &ResolvedPolicy, script: &str) -> Output {
    sh_env(policy, script, &[])
}

/// Runs `script` with `/bin/sh -c` under `policy` with extra environment.
pub fn sh_env(policy: &ResolvedPolicy, script: &str, env: &[(&str, &str)]) -> Output {
    let (mut cmd, supervisor) = confined(policy, &["/bin/sh", "-c", script]);
    cmd.envs(env.iter().copied());
    output_supervised(cmd, supervisor)
}

/// Runs `script` with `/bin/sh -c` under `policy` at Landlock ABI `abi`.
pub fn sh_at(abi: Option<i32>, policy: &ResolvedPolicy, script: &str) -> Output {
    let (cmd, supervisor) = confined_at(abi, policy, &["/bin/sh", "-c", script]);
    output_supervised(cmd, supervisor)
}

/// Runs `script` unconfined (positive controls that must hold without a sandbox).
pub fn sh_plain(script: &str) -> Output {
    Command::new("/bin/sh")
        .args(["-c", script])
        .stdin(Stdio::null())
        .output()
        .expect("spawn /bin/sh")
}

/// Asserts success and returns stdout.
#[track_caller]
pub fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "expected success, got {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Asserts failure and returns stderr.
#[track_caller]
pub fn denied(out: &Output) -> String {
    assert!(
        !out.status.success(),
        "expected failure, got success\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Asserts the failure was a permission refusal (EACCES/EPERM, as shells print it).
#[track_caller]
pub fn refused(out: &Output) -> String {
    let err = denied(out);
    let lower = err.to_lowercase();
    assert!(
        lower.contains("permission denied")
            || lower.contains("operation not permitted")
            || lower.contains("invalid cross-device link"),
        "failure was not a permission refusal: {err}"
    );
    err
}

/// A policy writing only beneath `dirs`, with network as given.
pub fn write_policy(dirs: &[&Path], network: bool) -> SandboxPolicy {
    SandboxPolicy {
        network,
        write_paths: dirs.iter().map(|d| path_str(d)).collect(),
        ..Default::default()
    }
}

/// The system Python (not a version-manager shim, which forks helpers).
pub const PYTHON: &str = "/usr/bin/python3";

/// [`confined`] without the broker: metadata writes fail (`ENOSYS`).
pub fn confined_cmd(policy: &ResolvedPolicy, argv: &[&str]) -> Command {
    confined(policy, argv).0
}

/// The libtest name of test `name` in module `module` (`module_path!()`, which
/// starts with this binary's crate name, `it`): what `--exact` matches.
pub fn test_path(module: &str, name: &str) -> String {
    let module = module.split_once("::").map_or("", |(_, rest)| rest);
    if module.is_empty() {
        name.to_owned()
    } else {
        format!("{module}::{name}")
    }
}

/// Set in the process [`isolated`] starts for one test.
pub const ISOLATED_ENV: &str = "IT_ISOLATED";

/// Runs test `name` of `module` (`module_path!()`) in a process of its own,
/// for a test that changes process-wide state (environment, umask, ...)
/// while the other tests of this binary run in parallel threads. Returns
/// `true` in that process (the caller runs its body), `false` in the caller's
/// (after asserting the process passed and ran exactly that one test, so a
/// wrong name never reads as success).
pub fn isolated(module: &str, name: &str) -> bool {
    if std::env::var_os(ISOLATED_ENV).is_some() {
        return true;
    }
    let path = test_path(module, name);
    let exe = std::env::current_exe().expect("the test binary's path");
    let out = Command::new(exe)
        .args([path.as_str(), "--exact", "--test-threads=1", "--nocapture"])
        .env(ISOLATED_ENV, "1")
        .stdin(Stdio::null())
        .output()
        .expect("run the test binary");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("test result: ok. 1 passed;"),
        "{path} in a process of its own: {:?}\nstdout: {stdout}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    false
}
