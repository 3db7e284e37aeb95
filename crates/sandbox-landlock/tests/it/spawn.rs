//! deny_subprocess: forking fails, a non-forking command runs, threads work
//! (Python and Rust).
#![cfg(target_os = "linux")]

use crate::common::*;
use sandbox_core::SandboxPolicy;

fn policy(deny: bool) -> (Temp, sandbox_core::ResolvedPolicy) {
    let t = temp();
    let p = resolve(SandboxPolicy {
        write_paths: vec![path_str(&t.path)],
        deny_subprocess: deny,
        ..Default::default()
    });
    (t, p)
}

#[test]
fn forking_fails_non_forking_runs() {
    let (_t, open) = policy(false);
    let (_t2, closed) = policy(true);
    ok(&sh(&open, "true & wait $! && /bin/true"));
    denied(&sh(&closed, "true & wait $!"));
    denied(&sh(&closed, "/bin/true; /bin/true"));
    let out = confined_cmd(&closed, &["/bin/echo", "no-fork"])
        .output()
        .unwrap();
    assert_eq!(ok(&out).trim(), "no-fork");
}

#[test]
fn python_threads_work() {
    let (_t, closed) = policy(true);
    let script = "import threading\nout=[]\nts=[threading.Thread(target=out.append, args=(i,)) for i in range(4)]\n[t.start() for t in ts]\n[t.join() for t in ts]\nprint(sorted(out))";
    let out = confined_cmd(&closed, &[PYTHON, "-c", script])
        .output()
        .unwrap();
    assert_eq!(ok(&out).trim(), "[0, 1, 2, 3]");
    // ...but python cannot start a process.
    let out = confined_cmd(
        &closed,
        &[
            PYTHON,
            "-c",
            "import subprocess; subprocess.run(['/bin/true'])",
        ],
    )
    .output()
    .unwrap();
    denied(&out);
}

const HELPER_ENV: &str = "SANDBOX_LANDLOCK_THREAD_HELPER";

#[test]
#[ignore = "helper: re-executed confined by `rust_threads_work`"]
fn rust_thread_helper() {
    assert_eq!(std::env::var(HELPER_ENV).as_deref(), Ok("1"));
    let handle = std::thread::spawn(|| 6 * 7);
    assert_eq!(handle.join().unwrap(), 42);
    assert!(std::process::Command::new("/bin/true").status().is_err());
    println!("rust-thread-ok");
}

#[test]
fn rust_threads_work() {
    let (_t, closed) = policy(true);
    let exe = std::env::current_exe().unwrap();
    let exe = path_str(&exe);
    let helper = test_path(module_path!(), "rust_thread_helper");
    let mut cmd = confined_cmd(
        &closed,
        &[
            &exe,
            &helper,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ],
    );
    cmd.env(HELPER_ENV, "1");
    let out = cmd.output().unwrap();
    assert!(ok(&out).contains("rust-thread-ok"));
}
