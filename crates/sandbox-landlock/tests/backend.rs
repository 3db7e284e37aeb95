//! The `Backend` contract: availability, argv form, report and hook errors.
#![cfg(target_os = "linux")]

mod common;

use std::ffi::OsString;
use std::process::Command;

use common::*;
use sandbox_core::{decode_pre_exec_error, Axis, Backend, Enforcement, Level, SandboxPolicy};
use sandbox_landlock::LandlockBackend;

#[test]
fn backend_is_available_and_claims_its_axes() {
    let b = LandlockBackend::new().expect("Landlock on this host");
    assert_eq!(b.name(), "landlock");
    assert!(b.enforces());
    assert_eq!(
        b.axes(),
        &[
            Axis::Network,
            Axis::Write,
            Axis::Spawn,
            Axis::ReadDeny,
            Axis::WriteDeny
        ]
    );
    assert!(b.abi().kernel >= 1);
}

#[test]
fn report_names_mechanisms_per_axis() {
    let t = temp();
    let policy = resolve(SandboxPolicy {
        network: false,
        write_paths: vec![path_str(&t.path)],
        write_deny_paths: vec![path_str(&t.path.join(".git"))],
        read_deny_paths: vec![path_str(&t.path.join("secret"))],
        deny_subprocess: true,
        ..Default::default()
    });
    let prepared = sandbox_landlock::prepare(&policy).unwrap();
    let report = prepared.report();
    println!("{}", serde_json::to_string_pretty(report).unwrap());
    assert_eq!(report.backend, "landlock");
    for axis in [
        Axis::Network,
        Axis::Write,
        Axis::Spawn,
        Axis::ReadDeny,
        Axis::WriteDeny,
    ] {
        let entry = report
            .axis(axis)
            .unwrap_or_else(|| panic!("{axis} reported"));
        assert!(!matches!(entry.level, Level::None { .. }), "{axis}");
    }
    assert!(report
        .axis(Axis::Spawn)
        .unwrap()
        .mechanism
        .contains("seccomp"));
    assert!(report
        .axis(Axis::WriteDeny)
        .unwrap()
        .mechanism
        .contains("landlock"));
    assert!(report.details.iter().any(|d| d.starts_with("landlock ABI")));
    assert!(matches!(report.enforcement(), Enforcement::Partial { .. }));
}

#[test]
fn hook_failure_is_a_tagged_pre_exec_error() {
    let t = temp();
    let policy = resolve(write_policy(&[&t.path], false));
    let b = LandlockBackend::new().unwrap();
    let argv = [OsString::from("/bin/true")];
    // Positive control: one hook applies and the command runs.
    let (mut cmd, _) = b.prepare(&policy, &argv).unwrap().into_command().unwrap();
    assert!(cmd.status().unwrap().success());
    // A second hook in the same child runs under the first one's seccomp
    // filter, which refuses the confinement syscalls: the spawn fails with
    // an error tagged as "sandbox could not be applied", not as exec failure.
    let (mut cmd, _) = b.prepare(&policy, &argv).unwrap().into_command().unwrap();
    let second = b.prepare(&policy, &argv).unwrap();
    second
        .pre_exec
        .expect("landlock installs a hook")
        .install(&mut cmd);
    let err = cmd.status().unwrap_err();
    assert!(decode_pre_exec_error(&err).is_some(), "{err:?}");
    // An exec failure is not tagged.
    let err = confined_cmd(&policy, &["/nonexistent/program"])
        .output()
        .unwrap_err();
    assert_eq!(decode_pre_exec_error(&err), None, "{err}");
}

#[test]
fn missing_write_path_is_an_error_naming_it() {
    let t = temp();
    let gone = t.path.join("gone");
    std::fs::create_dir(&gone).unwrap();
    let policy = resolve(write_policy(&[&gone], false));
    std::fs::remove_dir(&gone).unwrap();
    let b = LandlockBackend::new().unwrap();
    let err = b.prepare(&policy, &[OsString::from("true")]).unwrap_err();
    assert!(err.reason.contains("gone"), "{err}");
}

/// Set in the re-executed test binary that holds a controlling terminal.
const CTTY_CHILD: &str = "SANDBOX_TEST_CTTY_CHILD";

/// What a confined `python3` gets when it opens `/dev/tty` for writing.
const OPEN_TTY: &str = "import os\ntry:\n    os.open('/dev/tty', os.O_WRONLY); print('opened')\nexcept OSError as e: print(e.errno)";

/// `/dev/tty` is granted only to a launch whose child starts a session of
/// its own (`LaunchOptions::own_session`): the child's hook refuses to
/// confine (`ENOTTY`) when it holds a controlling terminal after all, which
/// the grant would reach. Twins: without the option the same open is
/// Landlock's `EACCES`, and bare it reaches the terminal. (The granted case,
/// `ENXIO` with no terminal, is `tests/outcomes.rs`'s.)
#[test]
fn dev_tty_is_granted_only_to_a_child_in_a_session_of_its_own() {
    if std::env::var_os(CTTY_CHILD).is_some() {
        return with_a_controlling_terminal();
    }
    // SAFETY: plain libc calls on a pty master this test owns.
    let (master, slave) = unsafe {
        let m = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        assert!(m >= 0, "posix_openpt: {}", std::io::Error::last_os_error());
        assert_eq!(libc::grantpt(m), 0);
        assert_eq!(libc::unlockpt(m), 0);
        let name = std::ffi::CStr::from_ptr(libc::ptsname(m)).to_owned();
        (m, name)
    };
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "dev_tty_is_granted_only_to_a_child_in_a_session_of_its_own",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CTTY_CHILD, "1");
    // SAFETY: async-signal-safe calls only; `slave` was built before fork.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
            // A session leader's first terminal open without O_NOCTTY
            // makes it the controlling terminal.
            if libc::setsid() < 0 || libc::open(slave.as_ptr(), libc::O_RDWR) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd.output().expect("re-run this test");
    // SAFETY: closes the master opened above.
    unsafe { libc::close(master) };
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("ctty child: all checked"), "{text}");
}

fn with_a_controlling_terminal() {
    let t = temp();
    let policy = resolve(write_policy(&[&t.path], true));
    let run = |options: sandbox_core::LaunchOptions| {
        let backend = LandlockBackend::new().expect("Landlock on this host");
        let argv: Vec<OsString> = [PYTHON, "-c", OPEN_TTY]
            .iter()
            .map(OsString::from)
            .collect();
        let confinement = backend
            .prepare_for_launch(&policy, &argv, options)
            .expect("prepare");
        let (mut cmd, _) = confinement.into_command().unwrap();
        cmd.stdin(std::process::Stdio::null()).output()
    };
    // Positive control: this process has a terminal, and bare the open reaches it.
    let bare = Command::new(PYTHON)
        .args(["-c", OPEN_TTY])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&bare.stdout).trim(), "opened");
    // Without the option, nothing is granted: Landlock's EACCES.
    let plain = run(sandbox_core::LaunchOptions::default()).expect("spawn");
    assert_eq!(
        String::from_utf8_lossy(&plain.stdout).trim(),
        libc::EACCES.to_string()
    );
    // With it, the child holds a terminal after all: the launch fails.
    let err = run(sandbox_core::LaunchOptions::default().with_own_session(true))
        .expect_err("a child with a controlling terminal is not confined with /dev/tty");
    assert_eq!(decode_pre_exec_error(&err), Some(libc::ENOTTY), "{err}");
    println!("ctty child: all checked");
}
