//! Behavioral legs on macOS: real `sandbox-exec` runs under generated profiles.
//! Every deny has an allowed twin under the same profile family, so a command
//! that fails for an unrelated reason never reads as "denied".
#![cfg(target_os = "macos")]

use std::ffi::OsString;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::Output;

use sandbox_core::{Backend, ExpandContext, Level, SandboxPolicy};
use sandbox_seatbelt::SeatbeltBackend;

/// Runs `argv` under `policy` through the backend's own `prepare`.
fn run(policy: &SandboxPolicy, argv: &[&str], env: &[(&str, &str)]) -> Output {
    let resolved = policy.resolve(&ExpandContext::default()).unwrap();
    let argv: Vec<OsString> = argv.iter().map(OsString::from).collect();
    let confinement = SeatbeltBackend::new().prepare(&resolved, &argv).unwrap();
    assert!(confinement.pre_exec.is_none());
    assert_eq!(confinement.argv[0], "/usr/bin/sandbox-exec");
    let (mut cmd, report) = confinement.into_command().unwrap();
    assert!(report.axes.iter().all(|a| a.level == Level::Full));
    cmd.envs(env.iter().copied());
    cmd.output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn sh_write(policy: &SandboxPolicy, file: &Path) -> Output {
    run(
        policy,
        &[
            "/bin/sh",
            "-c",
            "echo x > \"$1\"",
            "sh",
            file.to_str().unwrap(),
        ],
        &[],
    )
}

#[test]
fn write_inside_succeeds_and_outside_is_denied() {
    // A hostile name exercises the -D NAME=VALUE path through the real tool.
    let root = tempfile::tempdir().unwrap();
    let inside = root.path().join("we=ird \"dir\" (allow default)");
    std::fs::create_dir(&inside).unwrap();
    let outside = tempfile::tempdir().unwrap();
    let policy = SandboxPolicy {
        write_paths: vec![inside.to_str().unwrap().into()],
        ..SandboxPolicy::default()
    };
    let ok = sh_write(&policy, &inside.join("f"));
    assert!(ok.status.success(), "{}", text(&ok.stderr));
    assert!(inside.join("f").exists());
    // The sibling of the write path is outside it.
    let sibling = sh_write(&policy, &root.path().join("f"));
    assert!(!sibling.status.success());
    assert!(!root.path().join("f").exists());

    let denied = sh_write(&policy, &outside.path().join("f"));
    assert!(!denied.status.success());
    assert!(
        text(&denied.stderr).contains("not permitted"),
        "{}",
        text(&denied.stderr)
    );
    assert!(!outside.path().join("f").exists());
}

#[test]
fn write_deny_inside_a_write_path_is_denied_even_when_new() {
    let dir = tempfile::tempdir().unwrap();
    let policy = SandboxPolicy {
        write_paths: vec![dir.path().to_str().unwrap().into()],
        write_deny_paths: vec![dir.path().join("protected").to_str().unwrap().into()],
        ..SandboxPolicy::default()
    };
    let ok = sh_write(&policy, &dir.path().join("sibling"));
    assert!(ok.status.success(), "{}", text(&ok.stderr));
    let denied = sh_write(&policy, &dir.path().join("protected"));
    assert!(!denied.status.success());
    assert!(!dir.path().join("protected").exists());
}

#[test]
fn read_deny_is_denied_and_siblings_stay_readable() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("secret"), "s3cret").unwrap();
    std::fs::write(dir.path().join("public"), "hello").unwrap();
    let policy = SandboxPolicy {
        read_deny_paths: vec![dir.path().join("secret").to_str().unwrap().into()],
        ..SandboxPolicy::default()
    };
    let cat = |name: &str| {
        run(
            &policy,
            &["/bin/cat", dir.path().join(name).to_str().unwrap()],
            &[],
        )
    };
    let ok = cat("public");
    assert_eq!(text(&ok.stdout), "hello", "{}", text(&ok.stderr));
    let denied = cat("secret");
    assert!(!denied.status.success());
    assert!(!text(&denied.stdout).contains("s3cret"));
}

#[test]
fn fork_is_denied_under_deny_subprocess_and_exec_still_works() {
    let forking = ["/bin/sh", "-c", "/usr/bin/true && echo forked"];
    let allowed = run(&SandboxPolicy::default(), &forking, &[]);
    assert_eq!(
        text(&allowed.stdout).trim(),
        "forked",
        "{}",
        text(&allowed.stderr)
    );

    let deny = SandboxPolicy {
        deny_subprocess: true,
        ..SandboxPolicy::default()
    };
    let non_forking = run(&deny, &["/bin/echo", "non-forking"], &[]);
    assert!(
        non_forking.status.success(),
        "{}",
        text(&non_forking.stderr)
    );
    assert_eq!(text(&non_forking.stdout).trim(), "non-forking");

    let denied = run(&deny, &forking, &[]);
    assert!(!text(&denied.stdout).contains("forked"));
}

const HELPER: &str = "SEATBELT_TEST_HELPER";

/// Re-runs this test binary as the confined client: `HELPER` names the action.
fn helper(policy: &SandboxPolicy, action: &str) -> String {
    let exe = std::env::current_exe().unwrap();
    let out = run(
        policy,
        &[
            exe.to_str().unwrap(),
            "--exact",
            "macos_behavior::helper_entry",
            "--nocapture",
            "--test-threads=1",
        ],
        &[(HELPER, action)],
    );
    let stdout = text(&out.stdout);
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("HELPER:"))
        .unwrap_or_else(|| panic!("helper printed no result: {stdout}\n{}", text(&out.stderr)))
        .to_owned()
}

/// In helper mode performs the action; otherwise checks the helper works unconfined.
#[test]
fn helper_entry() {
    match std::env::var(HELPER) {
        Ok(action) => println!("HELPER:{}", perform(&action)),
        Err(_) => {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap().to_string();
            assert_eq!(perform(&format!("connect={addr}")), "connected");
            assert_eq!(perform("socketpair"), "socketpair-ok");
            assert_eq!(perform("spawn"), "spawned");
        }
    }
}

fn perform(action: &str) -> String {
    if let Some(addr) = action.strip_prefix("connect=") {
        return match TcpStream::connect(addr) {
            Ok(_) => "connected".into(),
            Err(e) => format!("error:{:?}:{e}", e.kind()),
        };
    }
    if let Some(path) = action.strip_prefix("unix=") {
        return match UnixStream::connect(path) {
            Ok(_) => "connected".into(),
            Err(e) => format!("error:{:?}:{e}", e.kind()),
        };
    }
    if action == "spawn" {
        // std uses posix_spawn on macOS, which must be refused like fork.
        return match std::process::Command::new("/usr/bin/true").status() {
            Ok(status) if status.success() => "spawned".into(),
            Ok(status) => format!("error:status {status}"),
            Err(e) => format!("error:{:?}:{e}", e.kind()),
        };
    }
    if action == "socketpair" {
        let (mut a, mut b) = match UnixStream::pair() {
            Ok(pair) => pair,
            Err(e) => return format!("error:{e}"),
        };
        let mut buf = [0u8; 1];
        return match a.write_all(b"x").and_then(|()| b.read_exact(&mut buf)) {
            Ok(()) if &buf == b"x" => "socketpair-ok".into(),
            other => format!("error:{other:?}"),
        };
    }
    if let Some(service) = action.strip_prefix("mach=") {
        return mach_look_up(service);
    }
    format!("error:unknown action {action}")
}

/// Looks `service` up in the bootstrap namespace, as a client of it would.
fn mach_look_up(service: &str) -> String {
    extern "C" {
        static bootstrap_port: u32;
        fn bootstrap_look_up(bp: u32, name: *const std::ffi::c_char, sp: *mut u32) -> i32;
    }
    let name = std::ffi::CString::new(service).unwrap();
    let mut port = 0u32;
    // SAFETY: a NUL-terminated name and a valid out pointer; bootstrap_port
    // is libSystem's, set up before main.
    let kr = unsafe { bootstrap_look_up(bootstrap_port, name.as_ptr(), &mut port) };
    if kr == 0 {
        "found".into()
    } else {
        format!("error:kern_return {kr}")
    }
}

/// `--no-network` closes trustd (which fetches certificate URLs for its
/// clients) and the other services that reach the network (#46 item 3).
/// Twin: with the network on, the same look-up finds it.
#[test]
fn trustd_is_closed_without_network() {
    for service in ["com.apple.trustd", "com.apple.trustd.agent"] {
        let on = helper(&SandboxPolicy::default(), &format!("mach={service}"));
        assert_eq!(on, "found", "{service} with the network on");
        let off = SandboxPolicy {
            network: false,
            ..SandboxPolicy::default()
        };
        let refused = helper(&off, &format!("mach={service}"));
        assert!(refused.starts_with("error:"), "{service}: {refused}");
    }
}

/// A new pseudo-terminal; its controller fd (kept open) and its device path.
fn pty() -> (std::fs::File, String) {
    use std::os::fd::FromRawFd;
    // SAFETY: plain libc calls on an fd this function owns.
    unsafe {
        let fd = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
        assert!(fd >= 0);
        assert_eq!(libc::grantpt(fd), 0);
        assert_eq!(libc::unlockpt(fd), 0);
        let name = std::ffi::CStr::from_ptr(libc::ptsname(fd))
            .to_str()
            .unwrap()
            .to_owned();
        (std::fs::File::from_raw_fd(fd), name)
    }
}

/// Only the run's own terminal is writable (#46 item 2): a profile naming
/// one terminal (as a run names those of its stdio) lets the command write
/// to it and not to another of the same user.
#[test]
fn only_the_runs_own_terminal_is_writable() {
    let (_own_controller, own) = pty();
    let (_other_controller, other) = pty();
    let resolved = SandboxPolicy::default()
        .resolve(&ExpandContext::default())
        .unwrap();
    let profile = sandbox_seatbelt::ProfileInput {
        terminals: vec![own.clone().into()],
        ..sandbox_seatbelt::ProfileInput::from(&resolved)
    }
    .profile()
    .unwrap();
    let write = |tty: &str| {
        let argv: Vec<OsString> = ["/bin/sh", "-c", "printf x > \"$1\"", "sh", tty]
            .iter()
            .map(OsString::from)
            .collect();
        let argv = profile.sandbox_exec_argv(&argv);
        std::process::Command::new(&argv[0])
            .args(&argv[1..])
            .output()
            .unwrap()
    };
    let ok = write(&own);
    assert!(ok.status.success(), "{}", text(&ok.stderr));
    let refused = write(&other);
    assert!(!refused.status.success(), "wrote to another terminal");
}

#[test]
fn network_off_denies_connect_and_network_on_allows_it() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let connect = format!("connect={}", listener.local_addr().unwrap());

    let on = helper(&SandboxPolicy::default(), &connect);
    assert_eq!(on, "connected");

    let off = SandboxPolicy {
        network: false,
        ..SandboxPolicy::default()
    };
    let denied = helper(&off, &connect);
    assert!(denied.starts_with("error:PermissionDenied"), "{denied}");
}

#[test]
fn network_off_keeps_unix_socketpairs() {
    let off = SandboxPolicy {
        network: false,
        ..SandboxPolicy::default()
    };
    assert_eq!(helper(&off, "socketpair"), "socketpair-ok");
}

#[test]
fn posix_spawn_is_denied_under_deny_subprocess() {
    assert_eq!(helper(&SandboxPolicy::default(), "spawn"), "spawned");
    let deny = SandboxPolicy {
        deny_subprocess: true,
        ..SandboxPolicy::default()
    };
    let denied = helper(&deny, "spawn");
    assert!(denied.starts_with("error:"), "{denied}");
}

/// The bypasses the peers' Seatbelt tests name, each beside its twin: a
/// read-denied directory inside a write path is not writable; a read-denied
/// file and the ancestor of a write-denied path cannot be moved away.
#[test]
fn denied_paths_cannot_be_written_or_moved_away() {
    let dir = tempfile::tempdir().unwrap();
    let w = std::fs::canonicalize(dir.path()).unwrap();
    let secret_dir = w.join("secret");
    std::fs::create_dir_all(&secret_dir).unwrap();
    std::fs::write(secret_dir.join("key"), "k").unwrap();
    std::fs::create_dir_all(w.join("repo/.git")).unwrap();
    let policy = SandboxPolicy {
        write_paths: vec![w.to_str().unwrap().into()],
        read_deny_paths: vec![secret_dir.to_str().unwrap().into()],
        write_deny_paths: vec![w.join("repo/.git").to_str().unwrap().into()],
        ..SandboxPolicy::default()
    };
    let sh = |script: &str| run(&policy, &["/bin/sh", "-c", script], &[]);
    let q = |p: &Path| p.to_str().unwrap().to_owned();
    assert!(!sh(&format!("echo x > '{}/new'", q(&secret_dir)))
        .status
        .success());
    assert!(!secret_dir.join("new").exists());
    assert!(!sh(&format!(
        "mv '{}' '{}/moved'",
        q(&secret_dir.join("key")),
        q(&w)
    ))
    .status
    .success());
    assert!(!sh(&format!("mv '{}' '{}/moved'", q(&secret_dir), q(&w)))
        .status
        .success());
    assert!(secret_dir.join("key").exists());
    assert!(
        !sh(&format!("mv '{}' '{}/repo2'", q(&w.join("repo")), q(&w)))
            .status
            .success()
    );
    assert!(w.join("repo/.git").is_dir());
    // Twins: the rest of the write path is writable and movable.
    let ok = sh(&format!(
        "echo x > '{w}/plain' && mkdir '{w}/d' && mv '{w}/d' '{w}/e'",
        w = q(&w)
    ));
    assert!(ok.status.success(), "{}", text(&ok.stderr));
    assert!(w.join("e").is_dir());
}

/// Host UNIX sockets as on Linux (#46): with the network on, only beneath a
/// write path or listed in `allow_unix_sockets`; every other one refused.
#[test]
fn host_unix_sockets_only_beneath_write_paths_or_listed() {
    use std::os::unix::net::UnixListener;
    let host = tempfile::tempdir().unwrap();
    let host = std::fs::canonicalize(host.path()).unwrap();
    let work = tempfile::tempdir().unwrap();
    let work = std::fs::canonicalize(work.path()).unwrap();
    let outside = host.join("agent.sock");
    let inside = work.join("app.sock");
    let _l1 = UnixListener::bind(&outside).unwrap();
    let _l2 = UnixListener::bind(&inside).unwrap();
    let connect = |p: &Path| format!("unix={}", p.display());
    let policy = SandboxPolicy {
        write_paths: vec![work.to_str().unwrap().into()],
        ..SandboxPolicy::default()
    };
    let refused = helper(&policy, &connect(&outside));
    assert!(refused.starts_with("error:"), "{refused}");
    assert_eq!(helper(&policy, &connect(&inside)), "connected");
    let listed = SandboxPolicy {
        allow_unix_sockets: vec![outside.to_str().unwrap().into()],
        ..policy.clone()
    };
    assert_eq!(helper(&listed, &connect(&outside)), "connected");
    // Network off: not even the listed one.
    let off = SandboxPolicy {
        network: false,
        ..listed
    };
    assert!(helper(&off, &connect(&outside)).starts_with("error:"));
}

/// A protected name's folder that does not exist yet cannot be made: not
/// as a symlink (#46 item 4), not as a directory filled elsewhere and
/// renamed into place, not by mkdir (Seatbelt cannot tell the two apart).
/// Twins: a symlink and a directory rename elsewhere in the write path work,
/// and once the folder exists its other files are writable.
#[test]
fn protected_folders_cannot_be_made() {
    let dir = tempfile::tempdir().unwrap();
    let w = std::fs::canonicalize(dir.path()).unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let policy = SandboxPolicy {
        write_paths: vec![w.to_str().unwrap().into()],
        write_deny_paths: vec![w.join(".claude/settings.json").to_str().unwrap().into()],
        ..SandboxPolicy::default()
    };
    let sh = |script: &str| run(&policy, &["/bin/sh", "-c", script], &[]);
    let e = elsewhere.path().to_str().unwrap();
    let w = w.to_str().unwrap();
    let claude = Path::new(w).join(".claude");
    assert!(!sh(&format!("ln -s '{e}' '{w}/.claude'")).status.success());
    assert!(std::fs::symlink_metadata(&claude).is_err());
    assert!(!sh(&format!(
        "ln -s '{e}' '{w}/tmp' && mv '{w}/tmp' '{w}/.claude'"
    ))
    .status
    .success());
    assert!(std::fs::symlink_metadata(&claude).is_err());
    let filled = format!(
        "mkdir '{w}/prep' && echo planted > '{w}/prep/settings.json' && mv '{w}/prep' '{w}/.claude'"
    );
    assert!(!sh(&filled).status.success());
    assert!(std::fs::symlink_metadata(&claude).is_err());
    assert!(!sh(&format!("mkdir '{w}/.claude'")).status.success());
    assert!(std::fs::symlink_metadata(&claude).is_err());
    // Twins: a symlink and a renamed directory elsewhere.
    let ok = sh(&format!(
        "ln -s '{e}' '{w}/other' && mkdir '{w}/a' && echo x > '{w}/a/f' && mv '{w}/a' '{w}/b'"
    ));
    assert!(ok.status.success(), "{}", text(&ok.stderr));
    // Twin: made before the run, the folder's other files are writable and
    // the protected name is still not.
    std::fs::create_dir(&claude).unwrap();
    let ok = sh(&format!(
        "mkdir -p '{w}/.claude/notes' && echo x > '{w}/.claude/notes/n'"
    ));
    assert!(ok.status.success(), "{}", text(&ok.stderr));
    assert!(!sh(&format!("echo x > '{w}/.claude/settings.json'"))
        .status
        .success());
    assert!(!claude.join("settings.json").exists());
}

/// workspace-write's git protection with no repository yet, and in nested
/// repositories made during the run (#46 item 5).
#[test]
fn git_config_and_hooks_are_protected_before_any_repository_exists() {
    let dir = tempfile::tempdir().unwrap();
    let w = std::fs::canonicalize(dir.path()).unwrap();
    let policy = SandboxPolicy {
        write_paths: vec![w.to_str().unwrap().into()],
        protect_git_dirs: true,
        ..SandboxPolicy::default()
    };
    let sh = |script: &str| run(&policy, &["/bin/sh", "-c", script], &[]);
    let w = w.to_str().unwrap();
    for refused in [
        format!("mkdir -p '{w}/.git' && echo x > '{w}/.git/config'"),
        format!("mkdir -p '{w}/.git/hooks'"),
        format!("mkdir -p '{w}/sub/.git' && echo x > '{w}/sub/.git/config'"),
        format!("mkdir -p '{w}/sub/.git/modules/m' && echo x > '{w}/sub/.git/modules/m/config'"),
        format!("mkdir -p '{w}/s2' && echo 'gitdir: {w}/elsewhere' > '{w}/s2/.git'"),
    ] {
        assert!(!sh(&refused).status.success(), "{refused}");
    }
    assert!(!Path::new(w).join(".git/config").exists());
    assert!(!Path::new(w).join("s2/.git").exists());
    // Twins: the rest of a git directory, and names that only look alike.
    let ok = sh(&format!(
        "mkdir -p '{w}/r/.git/objects' && echo ref > '{w}/r/.git/HEAD' && echo x > '{w}/r/config' && echo x > '{w}/r/.gitx'"
    ));
    assert!(ok.status.success(), "{}", text(&ok.stderr));
}
