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
    backend::LandlockBackend,
    policy::{ExpandContext, ResolvedPolicy, SandboxPolicy},
    runner::{RunError, RunRequest},
};

/// The tests count this process's threads and fds: one at a time, each in
/// a process of its own ([`sandbox_tests::isolated`]; the other modules'
/// tests run beside them in this binary).
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
    if !sandbox_tests::isolated(module_path!(), "runs_leave_no_thread_and_no_fd_behind") {
        return;
    }
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    let backend = LandlockBackend::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let policy = policy(dir.path());
    // Warm up (the self-test verdict, the first containment) before counting.
    sandbox::runner::run(&backend, &request(&["/bin/true"], &policy)).unwrap();
    assert!(eventually(|| launch_threads() == 0));
    let fds = open_fds();

    // Twin: while a run runs, its launching and broker threads are there.
    let go = dir.path().join("go");
    let script = format!("while [ ! -e {} ]; do sleep 0.01; done", go.display());
    let waiting = request(&["/bin/sh", "-c", &script], &policy);
    let running = std::thread::scope(|s| {
        let run = s.spawn(|| sandbox::runner::run(&backend, &waiting));
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

    // Both threads are joined before the run returns. (A joined thread can
    // still be listed for a few microseconds: the kernel wakes the joiner
    // when it clears the thread's tid, before it releases the task.)
    for _ in 0..50 {
        let outcome = sandbox::runner::run(&backend, &request(&["/bin/true"], &policy)).unwrap();
        assert_eq!(outcome.exit_code(), 0, "{outcome:?}");
        assert!(
            eventually(|| launch_threads() == 0),
            "a launch or broker thread outlived its run"
        );
    }
    assert_eq!(open_fds(), fds, "the runs left fds open");
}

#[test]
fn a_child_that_cannot_exec_fails_at_once_with_the_kernels_error() {
    if !sandbox_tests::isolated(
        module_path!(),
        "a_child_that_cannot_exec_fails_at_once_with_the_kernels_error",
    ) {
        return;
    }
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
    let failed = sandbox::runner::run(
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
    // The broker's listener wait is five seconds: a run that waited it out
    // took at least that.
    assert!(
        took < Duration::from_secs(4),
        "the failed run took {took:?}"
    );
    assert!(eventually(|| launch_threads() == 0));

    // Twin: an executable file runs, brokered, with its own exit code.
    let outcome =
        sandbox::runner::run(&backend, &request(&[a_program.to_str().unwrap()], &policy)).unwrap();
    assert_eq!(outcome.exit_code(), 3, "{outcome:?}");
}

/// Set in the re-executed test binary that runs [`holder_scene`] as nobody.
const HOLDER_SCENE: &str = "SANDBOX_TEST_HOLDER_SCENE";

/// A child that fails before it sends its listener (its working directory
/// cannot be entered: `chdir` fails with EACCES, as nobody, and the error
/// says it was the working directory), while another
/// thread of the caller keeps forking helpers that hold a copy of every fd
/// for a while (a pre-fork pool): each failed run still answers at once
/// with the kernel's error, instead of waiting until every copy of the
/// child's channel end has closed. Twin: an enterable directory runs.
#[test]
fn a_child_that_fails_before_its_listener_fails_at_once_while_the_caller_forks() {
    if let Some(scene) = std::env::var_os(HOLDER_SCENE) {
        holder_scene(Path::new(&scene));
        return;
    }
    assert_eq!(
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() },
        0,
        "this test sets up its scene as root and runs it as nobody (CI runs as root)"
    );
    let dir = tempfile::tempdir().unwrap();
    use std::os::unix::fs::PermissionsExt;
    let shut = dir.path().join("shut");
    let open = dir.path().join("open");
    let w = dir.path().join("w");
    for (d, mode) in [(&shut, 0o000), (&open, 0o777), (&w, 0o777)] {
        std::fs::create_dir(d).unwrap();
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // This very binary, for nobody to run (root's `/proc/self/exe` is not
    // nobody's to follow), even when a build replaces the file meanwhile.
    let exe = dir.path().join("it");
    sandbox_tests::copy_for_exec(
        Path::new(&format!("/proc/{}/exe", std::process::id())),
        &exe,
    );
    // Bounded: a failed run that waits for the channel would wait forever.
    let out = std::process::Command::new("timeout")
        .args([
            "60",
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
        ])
        .arg(&exe)
        .arg(sandbox_tests::test_name(
            module_path!(),
            "a_child_that_fails_before_its_listener_fails_at_once_while_the_caller_forks",
        ))
        .args(["--exact", "--nocapture", "--test-threads=1"])
        .env(HOLDER_SCENE, dir.path())
        .output()
        .expect("timeout and setpriv run the scene as nobody");
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("1 passed"),
        "the scene as nobody failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn holder_scene(dir: &Path) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let backend = LandlockBackend::new().unwrap();
    let policy = policy(&dir.join("w"));
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                // SAFETY: the child only sleeps and exits (async-signal-safe).
                let pid = unsafe { libc::fork() };
                if pid == 0 {
                    // SAFETY: as above.
                    unsafe {
                        libc::usleep(2_000_000);
                        libc::_exit(0);
                    }
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        });
        for _ in 0..10 {
            let mut req = request(&["/bin/true"], &policy);
            req.cwd = Some(dir.join("shut"));
            let started = Instant::now();
            let failed = sandbox::runner::run(&backend, &req);
            let took = started.elapsed();
            let said = match &failed {
                Err(err @ RunError::Spawn { .. }) => err.to_string(),
                other => panic!("expected the kernel's EACCES from chdir, got {other:?}"),
            };
            assert!(
                said.contains("cannot change to the working directory")
                    && said.contains("Permission denied"),
                "{said}"
            );
            assert!(took < Duration::from_secs(1), "a failed run took {took:?}");
        }
        let mut req = request(&["/bin/true"], &policy);
        req.cwd = Some(dir.join("open"));
        let outcome = sandbox::runner::run(&backend, &req).unwrap();
        assert_eq!(outcome.exit_code(), 0, "{outcome:?}");
        stop.store(true, Ordering::Relaxed);
    });
    // Reap the helpers.
    // SAFETY: waitpid with a valid out-pointer; -1 waits for any child.
    while unsafe { libc::waitpid(-1, std::ptr::null_mut(), 0) } > 0 {}
}
