//! The library runner's launch threads: the broker's thread starts before
//! the child (it takes the child's listener itself, while the child execs)
//! and the launching thread is not joined (it ends by itself once the run
//! has). Attacked here: a run that leaves a thread or an fd behind, and a
//! child that fails after the broker started (the broker must not wait out
//! its listener timeout, and the kernel's error must reach the caller).
//! Twins: the threads are there while a run runs, and an executable twin of
//! the failing file runs.
#![cfg(target_os = "linux")]

use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sandbox::{
    ExpandContext, LandlockBackend, ResolvedPolicy, RunError, RunRequest, SandboxPolicy,
};

/// The tests count this process's threads and fds: one at a time.
static ALONE: Mutex<()> = Mutex::new(());

/// A policy whose runs have a broker: one write path.
fn policy(dir: &Path) -> ResolvedPolicy {
    SandboxPolicy {
        network: false,
        write_paths: vec![dir.to_string_lossy().into_owned()],
        ..SandboxPolicy::default()
    }
    .resolve(&ExpandContext::default())
    .unwrap()
}

fn request(argv: &[&str], policy: &ResolvedPolicy) -> RunRequest {
    let mut req = RunRequest::new(
        argv.iter().map(|a| (*a).into()).collect(),
        Some(policy.clone()),
    );
    req.echo_stderr = false;
    req
}

/// The runner's launch and broker threads in this process now.
fn launch_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
        .filter(|comm| comm.trim() == "sandbox-launch" || comm.trim() == "sandbox-broker")
        .count()
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// Waits up to five seconds for `done`.
fn eventually(done: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    done()
}

#[test]
fn runs_leave_no_thread_and_no_fd_behind() {
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    let backend = LandlockBackend::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let policy = policy(dir.path());
    // Warm up (the self-test verdict, the first containment) before counting.
    sandbox::run(&backend, &request(&["/bin/true"], &policy)).unwrap();
    assert!(eventually(|| launch_threads() == 0));
    let fds = open_fds();

    // Twin: while a run runs, its launching and broker threads are there.
    let go = dir.path().join("go");
    let script = format!("while [ ! -e {} ]; do sleep 0.01; done", go.display());
    let waiting = request(&["/bin/sh", "-c", &script], &policy);
    let running = std::thread::scope(|s| {
        let run = s.spawn(|| sandbox::run(&backend, &waiting));
        let seen = eventually(|| launch_threads() == 2);
        std::fs::write(&go, "").unwrap();
        let outcome = run.join().unwrap().unwrap();
        assert_eq!(outcome.exit_code(), 0, "{outcome:?}");
        seen
    });
    assert!(
        running,
        "no launching and broker thread was seen during a run"
    );

    for _ in 0..20 {
        let outcome = sandbox::run(&backend, &request(&["/bin/true"], &policy)).unwrap();
        assert_eq!(outcome.exit_code(), 0, "{outcome:?}");
    }
    assert!(
        eventually(|| launch_threads() == 0),
        "{} launch or broker threads are left after the runs",
        launch_threads()
    );
    assert_eq!(open_fds(), fds, "the runs left fds open");
}

#[test]
fn a_child_that_cannot_exec_fails_at_once_with_the_kernels_error() {
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    use std::os::unix::fs::PermissionsExt;
    let backend = LandlockBackend::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let policy = policy(dir.path());
    let bin = tempfile::tempdir().unwrap();
    let not_a_program = bin.path().join("not-a-program");
    std::fs::write(&not_a_program, "no interpreter line\n").unwrap();
    let a_program = bin.path().join("a-program");
    std::fs::write(&a_program, "#!/bin/sh\nexit 3\n").unwrap();
    for file in [&not_a_program, &a_program] {
        std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    // The child sends its listener, then its exec fails (ENOEXEC): the
    // broker had started, and must stop without waiting for anything.
    let started = Instant::now();
    let failed = sandbox::run(
        &backend,
        &request(&[not_a_program.to_str().unwrap()], &policy),
    );
    let took = started.elapsed();
    match failed {
        Err(RunError::NotExecutable { reason, .. }) => {
            assert!(reason.contains("Exec format error"), "{reason}")
        }
        other => panic!("expected the kernel's ENOEXEC, got {other:?}"),
    }
    // The broker's listener wait is thirty seconds: a run that waited it
    // out took at least that.
    assert!(
        took < Duration::from_secs(10),
        "the failed run took {took:?}"
    );
    assert!(eventually(|| launch_threads() == 0));

    // Twin: an executable file runs, brokered, with its own exit code.
    let outcome =
        sandbox::run(&backend, &request(&[a_program.to_str().unwrap()], &policy)).unwrap();
    assert_eq!(outcome.exit_code(), 3, "{outcome:?}");
}
