//! Helpers for the end-to-end tests in `tests/tests/it/` (one test binary,
//! `it`, a module per subject): they run the real `sandbox` binary on the
//! real kernel.

use std::path::{Path, PathBuf};
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

/// Whether this process runs as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The users a test runs as, `true` for nobody (through `setpriv`): root
/// and nobody when root, else this user alone.
pub fn users() -> Vec<bool> {
    if is_root() {
        vec![false, true]
    } else {
        vec![false]
    }
}

/// A directory anyone may write to (by mode, 0777; the policy decides),
/// and its canonical path.
pub fn shared_dir() -> (tempfile::TempDir, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let path = std::fs::canonicalize(dir.path()).unwrap();
    (dir, path)
}

/// A run's stderr as text.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Makes `path` a new file holding `contents`, written by a child process
/// (`sh`), for a file something execs: a descriptor this process holds open
/// for writing is copied into every process another test forks meanwhile,
/// until that one execs, and an exec of the file then fails with `ETXTBSY`
/// ("Text file busy"). The caller sets the mode.
#[track_caller]
pub fn write_for_exec(path: &Path, contents: &str) {
    use std::io::Write;
    let mut child = Command::new("sh")
        .args(["-c", "cat > \"$1\"", "sh"])
        .arg(path)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("spawn sh");
    let mut stdin = child.stdin.take().expect("piped stdin");
    stdin.write_all(contents.as_bytes()).expect("write to sh");
    drop(stdin);
    let status = child.wait().expect("wait for sh");
    assert!(status.success(), "writing {}: {status}", path.display());
}

/// Copies `from` to a new file `to` through `cp`, for a file something
/// execs (see [`write_for_exec`]). The caller sets the mode.
#[track_caller]
pub fn copy_for_exec(from: &Path, to: &Path) {
    let status = Command::new("cp")
        .arg(from)
        .arg(to)
        .status()
        .expect("spawn cp");
    assert!(
        status.success(),
        "cp {} {}: {status}",
        from.display(),
        to.display()
    );
}

/// Set in the test binary [`isolated`] starts for one test.
pub const ISOLATED_ENV: &str = "IT_ISOLATED";

/// The name the test harness gives test `test` of the module whose
/// `module_path!()` is `module_path`: the path without the crate's name
/// (`it::lifetime`, `serial` -> `lifetime::serial`).
pub fn test_name(module_path: &str, test: &str) -> String {
    match module_path.split_once("::") {
        Some((_, module)) => format!("{module}::{test}"),
        None => test.to_owned(),
    }
}

/// Runs test `test` of the module at `module_path` (`module_path!()`) in a
/// process of its own, for a test that counts this process's threads or
/// fds, changes its environment, or makes it a subreaper: every module's
/// tests share one binary and run in parallel in it.
///
/// In the test binary's own run this starts the binary again with only
/// that test (`--exact`, one thread, [`ISOLATED_ENV`] set), asserts it
/// passed and ran exactly one test (so a wrong name never reads as
/// success), and returns `false`: the caller returns. In the process it
/// started it returns `true`: the caller runs the test's body.
/// `if !isolated(module_path!(), "the_test") { return; }` first thing in
/// the test.
#[must_use]
#[track_caller]
pub fn isolated(module_path: &str, test: &str) -> bool {
    if std::env::var_os(ISOLATED_ENV).is_some() {
        return true;
    }
    let name = test_name(module_path, test);
    // This very binary, even when a build replaced the file meanwhile.
    let exe = if cfg!(target_os = "linux") {
        PathBuf::from("/proc/self/exe")
    } else {
        std::env::current_exe().expect("current_exe")
    };
    let out = Command::new(&exe)
        .args([
            name.as_str(),
            "--exact",
            "--include-ignored",
            "--test-threads=1",
            "--nocapture",
        ])
        .env(ISOLATED_ENV, "1")
        .output()
        .expect("start the test binary again");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // What the test printed, with this test's (shown on failure or with
    // --nocapture).
    eprint!("{stderr}");
    assert!(
        out.status.success() && stdout.contains("test result: ok. 1 passed;"),
        "{name} in a process of its own ({}): {}\n{stdout}\n{stderr}",
        exe.display(),
        out.status
    );
    false
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

/// Whether a test that cannot do its job here must fail rather than say so
/// and pass: under CI (`CI` set, as every CI system does) and as root (what
/// CI runs as; every end-to-end test can do its job there).
pub fn must_do_its_job() -> bool {
    // SAFETY: geteuid has no preconditions.
    std::env::var_os("CI").is_some() || unsafe { libc::geteuid() } == 0
}

/// A test that cannot do its job on this host: fails under CI or as root
/// ([`must_do_its_job`]); elsewhere prints one `SKIPPED test: why` line on
/// stderr and lets the caller return.
#[track_caller]
pub fn cannot_do_its_job(test: &str, why: &str) {
    assert!(
        !must_do_its_job(),
        "{test} cannot do its job here ({why}); under CI or as root that is a failure"
    );
    eprintln!("SKIPPED {test}: {why}");
}

/// Runs `f` on a thread of its own in a mount namespace of its own (root
/// only), where `/` is made private and a fresh tmpfs is mounted on each of
/// `tmpfs`: what `f` and the processes it starts see there never reaches
/// the host (an operator's real `/root/.config`, `/run/user`). `Err` when
/// the namespace or a mount cannot be made.
#[cfg(target_os = "linux")]
pub fn with_private_mounts<T: Send>(
    tmpfs: &[&str],
    f: impl FnOnce() -> T + Send,
) -> Result<T, String> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                // SAFETY: plain system calls on this thread's own state; the
                // strings are NUL-terminated literals or CStrings alive here.
                unsafe {
                    if libc::unshare(libc::CLONE_NEWNS) != 0 {
                        return Err(format!("unshare: {}", std::io::Error::last_os_error()));
                    }
                    if libc::mount(
                        std::ptr::null(),
                        c"/".as_ptr(),
                        std::ptr::null(),
                        libc::MS_REC | libc::MS_PRIVATE,
                        std::ptr::null(),
                    ) != 0
                    {
                        return Err(format!("private /: {}", std::io::Error::last_os_error()));
                    }
                    for dir in tmpfs {
                        let c = std::ffi::CString::new(*dir).unwrap();
                        if libc::mount(
                            c"tmpfs".as_ptr(),
                            c.as_ptr(),
                            c"tmpfs".as_ptr(),
                            0,
                            c"mode=755".as_ptr().cast(),
                        ) != 0
                        {
                            return Err(format!(
                                "tmpfs on {dir}: {}",
                                std::io::Error::last_os_error()
                            ));
                        }
                    }
                }
                Ok(f())
            })
            .join()
            .unwrap_or_else(|e| std::panic::resume_unwind(e))
    })
}

/// Whether no thread of the thread group `pid` runs (it is reaped, or
/// every task of it is a zombie).
pub fn thread_group_gone(pid: i32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return true;
    };
    tasks.flatten().all(|t| {
        std::fs::read_to_string(t.path().join("stat")).map_or(true, |st| {
            let state = st.rsplit(')').next().unwrap_or("").trim_start();
            state.starts_with('Z') || state.starts_with('X')
        })
    })
}

/// A new pty (master, slave), both close-on-exec: a run started by
/// another test meanwhile must not inherit them (as its fd 3, say): every
/// test that needs a pty takes it here. (Elsewhere than Linux, `openpty`
/// then `FD_CLOEXEC`: not atomic, those hosts run few such tests.)
#[cfg(not(target_os = "linux"))]
pub fn new_pty() -> (std::os::fd::OwnedFd, std::os::fd::OwnedFd) {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let (mut master, mut slave) = (-1, -1);
    // SAFETY: openpty with valid out-pointers and null name/termios/winsize;
    // both fds checked, then owned.
    unsafe {
        let rc = libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        );
        assert_eq!(rc, 0, "openpty");
        let (master, slave) = (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave));
        for fd in [master.as_raw_fd(), slave.as_raw_fd()] {
            assert_eq!(libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC), 0);
        }
        (master, slave)
    }
}

/// A new pty (master, slave), both close-on-exec, made so at once.
#[cfg(target_os = "linux")]
pub fn new_pty() -> (std::os::fd::OwnedFd, std::os::fd::OwnedFd) {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let flags = libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC;
    // SAFETY: plain pty set-up; each fd checked, then owned.
    unsafe {
        let master = libc::posix_openpt(flags);
        assert!(master >= 0, "posix_openpt");
        let master = OwnedFd::from_raw_fd(master);
        assert_eq!(libc::grantpt(master.as_raw_fd()), 0);
        assert_eq!(libc::unlockpt(master.as_raw_fd()), 0);
        let mut name = [0 as libc::c_char; 128];
        assert_eq!(
            libc::ptsname_r(master.as_raw_fd(), name.as_mut_ptr(), name.len()),
            0
        );
        let slave = libc::open(name.as_ptr(), flags);
        assert!(slave >= 0, "open the pty's slave");
        (master, OwnedFd::from_raw_fd(slave))
    }
}
