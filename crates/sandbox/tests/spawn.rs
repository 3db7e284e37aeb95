//! The runner's own spawn (a vfork-style child on Linux): hooks run in the
//! child only, a failing hook runs nothing, and cwd and environment arrive.

#![cfg(target_os = "linux")]
use std::ffi::OsString;
use std::path::Path;

use sandbox::{
    backend::{
        Axis, Backend, Confinement, EnforcementReport, PreExecHook, SandboxUnavailable, WrappedArgv,
    },
    policy::{ExpandContext, ResolvedPolicy, SandboxPolicy},
    runner::{run, RunError, RunRequest, Termination},
};
use sandbox_core::encode_pre_exec_error;

/// A backend whose only confinement is `hook` (a plain function, so it is
/// trivially async-signal-safe when the function is).
#[derive(Debug)]
struct HookBackend(fn() -> std::io::Result<()>);

impl Backend for HookBackend {
    fn name(&self) -> &'static str {
        "hook-test"
    }

    fn axes(&self) -> &'static [Axis] {
        &[]
    }

    fn prepare(
        &self,
        _policy: &ResolvedPolicy,
        argv: &[OsString],
    ) -> Result<Confinement, SandboxUnavailable> {
        let report = EnforcementReport {
            backend: "hook-test".into(),
            details: Vec::new(),
            axes: Vec::new(),
        };
        // SAFETY: every hook below makes only raw syscalls and allocates nothing.
        let hook = unsafe { PreExecHook::new(self.0) };
        Ok(Confinement::new(argv.to_vec(), Some(hook), report))
    }

    fn wrap_argv(
        &self,
        _policy: &ResolvedPolicy,
        _argv: &[OsString],
    ) -> Result<WrappedArgv, SandboxUnavailable> {
        Err(SandboxUnavailable::new("hook-test", "no argv form"))
    }
}

fn policy() -> ResolvedPolicy {
    SandboxPolicy::default()
        .resolve(&ExpandContext::default())
        .unwrap()
}

fn sh(script: &str) -> RunRequest {
    let mut req = RunRequest::new(
        vec!["/bin/sh".into(), "-c".into(), script.into()],
        Some(policy()),
    );
    req.echo_stderr = false;
    req
}

fn succeed() -> std::io::Result<()> {
    Ok(())
}

fn refuse() -> std::io::Result<()> {
    Err(encode_pre_exec_error(libc::EACCES))
}

/// Sets the process name, which a hook sharing the parent's process (rather
/// than running in a child) would change for the parent.
fn rename() -> std::io::Result<()> {
    // SAFETY: prctl with a static NUL-terminated string.
    let rc = unsafe { libc::prctl(libc::PR_SET_NAME, c"hooked".as_ptr(), 0, 0, 0) };
    if rc == 0 {
        Ok(())
    } else {
        Err(encode_pre_exec_error(libc::EINVAL))
    }
}

fn marker_script(marker: &Path) -> String {
    format!("echo ran > '{}'", marker.display())
}

#[test]
fn a_failing_hook_runs_nothing_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");

    // Positive control: the same request with a hook that succeeds runs.
    let outcome = run(&HookBackend(succeed), &sh(&marker_script(&marker))).unwrap();
    assert_eq!(outcome.termination, Termination::Exited { code: 0 });
    assert!(marker.exists(), "the command ran under a succeeding hook");
    std::fs::remove_file(&marker).unwrap();

    let err = run(&HookBackend(refuse), &sh(&marker_script(&marker))).unwrap_err();
    match err {
        RunError::ApplyFailed { backend, source } => {
            assert_eq!(backend, "hook-test");
            assert_eq!(source.raw_os_error(), Some(libc::EACCES));
        }
        other => panic!("expected ApplyFailed, got {other:?}"),
    }
    assert!(!marker.exists(), "nothing ran after the hook failed");
}

#[test]
fn hooks_change_the_child_only() {
    let dir = tempfile::tempdir().unwrap();
    let comm = dir.path().join("comm");
    let script = format!("cat /proc/$$/comm > '{}'", comm.display());
    let before = std::fs::read_to_string("/proc/thread-self/comm").unwrap();
    let outcome = run(&HookBackend(rename), &sh(&script)).unwrap();
    assert_eq!(outcome.termination, Termination::Exited { code: 0 });
    // exec renames the child after its program; the parent keeps its name.
    assert_eq!(std::fs::read_to_string(&comm).unwrap().trim(), "sh");
    assert_eq!(
        std::fs::read_to_string("/proc/thread-self/comm").unwrap(),
        before,
        "a hook renamed the parent: it did not run in a child"
    );
}

#[test]
fn cwd_and_environment_overrides_arrive() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let script = format!(
        "printf '%s %s' \"$PWD\" \"$SPAWN_TEST\" > '{}'",
        out.display()
    );
    let mut req = sh(&script);
    req.cwd = Some(dir.path().to_path_buf());
    req.env = Some(vec![
        ("PATH".into(), "/usr/bin:/bin".into()),
        ("SPAWN_TEST".into(), "from-env".into()),
    ]);
    req.env_overrides
        .push(("SPAWN_TEST".into(), "overridden".into()));
    let outcome = run(&HookBackend(succeed), &req).unwrap();
    assert_eq!(outcome.termination, Termination::Exited { code: 0 });
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        format!("{} overridden", dir.path().display())
    );
}

#[test]
fn the_command_starts_with_default_signals_and_an_empty_mask() {
    let dir = tempfile::tempdir().unwrap();
    let status = dir.path().join("status");
    // SIGPIPE is ignored by Rust programs; the command must see it at default.
    // `exec`, so the reader is the shell itself: a forked reader of the
    // shell's status could catch the shell inside its own fork, while it
    // blocks every signal (dash does), and read that transient mask.
    let script = format!(
        "exec grep -E '^(SigBlk|SigIgn)' /proc/self/status > '{}'",
        status.display()
    );
    let outcome = run(&HookBackend(succeed), &sh(&script)).unwrap();
    assert_eq!(outcome.termination, Termination::Exited { code: 0 });
    let text = std::fs::read_to_string(&status).unwrap();
    let field = |name: &str| {
        let line = text.lines().find(|l| l.starts_with(name)).unwrap();
        u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap()
    };
    assert_eq!(field("SigBlk:"), 0, "{text}");
    assert_eq!(field("SigIgn:") & (1 << (libc::SIGPIPE - 1)), 0, "{text}");
}

#[test]
fn a_missing_working_directory_is_named_and_nothing_runs() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let missing = dir.path().join("no-such-dir");
    let mut req = sh(&marker_script(&marker));
    req.cwd = Some(missing.clone());
    let err = run(&HookBackend(succeed), &req).unwrap_err();
    assert!(matches!(err, RunError::Spawn { .. }), "{err:?}");
    assert!(err.to_string().contains("no-such-dir"), "{err}");
    assert_eq!(err.exit_code(), sandbox::runner::EXIT_SANDBOX);
    assert!(!marker.exists());
    // Positive control: the same request in an existing directory runs.
    req.cwd = Some(dir.path().to_path_buf());
    run(&HookBackend(succeed), &req).unwrap();
    assert!(marker.exists());
}
