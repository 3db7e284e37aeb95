//! The broker can do no more than the sandbox itself: it acts from inside
//! the run's own Landlock domain and in the caller's own context. Each class
//! a hostile command tried (a handed fd's outside file linked into the
//! workspace, device ioctls on a terminal it was never given, the runner's
//! `/dev/tty`, a nested Landlock domain that brokered calls ignored, a core
//! dump into a denied directory) is attacked here beside its allowed twin,
//! under `-w W`, `-w W --write-deny W/sub` and `--mode workspace-write`, as
//! root and as nobody, at Landlock ABI 1, 4 and the host's.

#![cfg(target_os = "linux")]

use std::fs;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use sandbox_tests::sandbox_bin;
use serde_json::Value;

/// Every attack and its twin, in one confined Python process. Results go
/// to `W/result.json`: stdout is the handed fd to a file outside `W`.
const ATTACKS: &str = r#"
import ctypes, errno, fcntl, json, os, resource, signal, struct, sys, termios
W, PTY, OUTSIDE = sys.argv[1], sys.argv[2], sys.argv[3]
libc = ctypes.CDLL(None, use_errno=True)
r = {}
def err(f):
    try:
        v = f()
        return v if isinstance(v, int) and v < 0 else "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
def rc(v):
    return "ok" if v >= 0 else errno.errorcode[ctypes.get_errno()]

# 1. the handed fd (stdout, a file outside W) given a name inside W
r["link_empty_path"] = rc(libc.linkat(1, b"", -100, (W + "/h1").encode(), 0x1000))
r["link_proc_fd"] = err(lambda: os.link("/proc/self/fd/1", W + "/h2", follow_symlinks=True))
r["outside_linked"] = os.path.exists(W + "/h1") or os.path.exists(W + "/h2")
open(W + "/src", "w").write("x")
r["link_inside"] = err(lambda: os.link(W + "/src", W + "/dst"))

# 2. a terminal never given: the ioctl through a brokered open (O_CREAT) and
# through a kernel one must end alike; one given (stdin) works
def winsz(flags):
    try:
        fd = os.open(PTY, flags)
    except OSError as e:
        return "open " + errno.errorcode[e.errno]
    try:
        return err(lambda: fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 7, 7, 0, 0)))
    finally:
        os.close(fd)
r["pty_kernel"] = winsz(os.O_RDONLY | os.O_NOCTTY)
r["pty_brokered"] = winsz(os.O_RDONLY | os.O_NOCTTY | os.O_CREAT)
r["pty_given"] = err(lambda: fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 9, 9, 0, 0)))

# 3. /dev/tty is the caller's controlling terminal, brokered or not
def tty(flags):
    try:
        fd = os.open("/dev/tty", flags)
    except OSError as e:
        return errno.errorcode[e.errno]
    name = os.ttyname(fd)
    os.close(fd)
    return "opened"
r["tty_kernel"] = tty(os.O_RDONLY | os.O_NOCTTY)
r["tty_brokered"] = tty(os.O_RDONLY | os.O_NOCTTY | os.O_CREAT)

# 4. a nested Landlock domain: refused while a broker serves the run, and
# the brokered calls it would have narrowed still work for the command
r["landlock_create"] = rc(libc.syscall(444, None, 0, 1))
r["landlock_restrict"] = rc(libc.syscall(446, 0, 0))
open(W + "/t", "w").write("abc")
r["truncate_path"] = err(lambda: os.truncate(W + "/t", 1))

# 5. core dumps: the hard limit, and a crash in a directory beside W/sub
r["core_hard"] = resource.getrlimit(resource.RLIMIT_CORE)[1]
os.makedirs(W + "/crash", exist_ok=True)
pid = os.fork()
if pid == 0:
    os.chdir(W + "/crash")
    try:
        h = resource.getrlimit(resource.RLIMIT_CORE)[1]
        resource.setrlimit(resource.RLIMIT_CORE, (h, h))
    except Exception:
        pass
    os.kill(os.getpid(), signal.SIGSEGV)
    os._exit(3)
_, status = os.waitpid(pid, 0)
r["crash_signal"] = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
r["core_files"] = sorted(n for n in os.listdir(W + "/crash") if n.startswith("core"))

# 6. the runner's threads (the broker's among them) cannot be signalled
ppid = os.getppid()
r["runner_threads"] = sorted(rc(libc.syscall(234, ppid, int(t), 0)) for t in os.listdir("/proc/%d/task" % ppid))
r["self_signal"] = rc(libc.syscall(234, os.getpid(), libc.syscall(186), 0))
json.dump(r, open(W + "/result.json", "w"))
"#;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Write,
    WriteDeny,
    WorkspaceWrite,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Who {
    Root,
    Nobody,
}

/// A pseudo-terminal pair; the slave's path and both ends stay open.
struct Pty {
    master: OwnedFd,
    slave: OwnedFd,
    path: PathBuf,
}

fn pty(owner: Who) -> Pty {
    let (master, slave) = sandbox_tests::new_pty();
    let path = fs::read_link(format!("/proc/self/fd/{}", slave.as_raw_fd())).unwrap();
    if owner == Who::Nobody {
        std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
    }
    Pty {
        master,
        slave,
        path,
    }
}

fn winsize(pty: &Pty) -> (u16, u16) {
    // SAFETY: TIOCGWINSZ fills a winsize struct on our own pty master.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::ioctl(pty.master.as_raw_fd(), libc::TIOCGWINSZ, &mut ws) };
    assert_eq!(rc, 0);
    (ws.ws_row, ws.ws_col)
}

struct Scene {
    _dir: tempfile::TempDir,
    w: PathBuf,
    outside: PathBuf,
    script: PathBuf,
}

/// The scene; with `git`, the write path holds a git directory (so even a
/// plain `-w` protects it and the broker keeps the write path).
fn scene(git: bool) -> Scene {
    let dir = tempfile::tempdir().unwrap();
    let base = fs::canonicalize(dir.path()).unwrap();
    let w = base.join("w");
    fs::create_dir_all(w.join("sub")).unwrap();
    if git {
        fs::create_dir_all(w.join(".git/hooks")).unwrap();
    }
    let outside = base.join("outside.log");
    fs::write(&outside, "").unwrap();
    let script = base.join("attacks.py");
    fs::write(&script, ATTACKS).unwrap();
    for p in [
        &base,
        &w,
        &w.join("sub"),
        &w.join(".git"),
        &w.join(".git/hooks"),
    ] {
        if !git && p.starts_with(w.join(".git")) {
            continue;
        }
        fs::set_permissions(p, fs::Permissions::from_mode(0o777)).unwrap();
    }
    for p in [&outside, &script] {
        fs::set_permissions(p, fs::Permissions::from_mode(0o666)).unwrap();
    }
    Scene {
        _dir: dir,
        w,
        outside,
        script,
    }
}

/// Runs [`ATTACKS`] confined, with a terminal of its own as the runner's
/// controlling terminal, another given as stdin and a third never given.
fn attack(mode: Mode, who: Who, abi: Option<&str>) -> (Value, Scene, Pty) {
    // A plain write path with nothing to protect is the unbrokered case.
    let s = scene(mode != Mode::Write);
    let ctty = pty(who);
    let given = pty(who);
    let hidden = pty(who);
    let mut cmd = match who {
        Who::Root => Command::new(sandbox_bin()),
        Who::Nobody => {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
                .arg(sandbox_bin());
            c
        }
    };
    let w = s.w.to_str().unwrap();
    cmd.arg("run");
    match mode {
        Mode::Write => cmd.args(["-w", w]),
        Mode::WriteDeny => cmd.args(["-w", w, "--write-deny"]).arg(s.w.join("sub")),
        Mode::WorkspaceWrite => cmd.args(["--mode", "workspace-write", "--workspace", w]),
    };
    cmd.args(["--", "/usr/bin/python3"])
        .arg(&s.script)
        .arg(&s.w)
        .arg(&hidden.path)
        .arg(&s.outside)
        .env_remove("SANDBOX_CONFIG")
        .env("XDG_CONFIG_HOME", "/nonexistent/sandbox-tests-config")
        // Outside W: a home inside it would add write-denied config
        // directories, so plain `-w` would be brokered too.
        .env("HOME", s.w.parent().unwrap())
        .env_remove("XDG_RUNTIME_DIR")
        .current_dir(&s.w)
        .stdin(Stdio::from(given.slave.try_clone().unwrap()))
        .stdout(Stdio::from(
            fs::OpenOptions::new()
                .append(true)
                .open(&s.outside)
                .unwrap(),
        ));
    if let Some(abi) = abi {
        cmd.env("SANDBOX_TEST_LANDLOCK_ABI", abi);
    }
    let ctty_fd = ctty.slave.as_raw_fd();
    with_controlling_terminal(&mut cmd, ctty_fd);
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{mode:?} {who:?} abi {abi:?}: {:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let result = fs::read_to_string(s.w.join("result.json"))
        .unwrap_or_else(|e| panic!("{mode:?} {who:?}: no result ({e})"));
    drop((ctty, given));
    (serde_json::from_str(&result).unwrap(), s, hidden)
}

/// Starts `cmd` in a session of its own with `tty` as its controlling terminal.
fn with_controlling_terminal(cmd: &mut Command, tty: std::os::fd::RawFd) {
    // SAFETY: setsid and TIOCSCTTY are async-signal-safe syscalls.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setsid() < 0 || libc::ioctl(tty, libc::TIOCSCTTY, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

fn host_abi() -> i64 {
    // SAFETY: landlock_create_ruleset with the VERSION flag reads nothing.
    let v = unsafe { libc::syscall(libc::SYS_landlock_create_ruleset, 0usize, 0usize, 1u32) };
    assert!(v >= 1, "this host must have Landlock");
    v
}

fn check(mode: Mode, who: Who, abi: Option<&str>) {
    let (r, s, hidden) = attack(mode, who, abi);
    let ctx = format!("{mode:?} {who:?} abi {abi:?}: {r}");
    let abi: i64 = abi.map_or_else(host_abi, |a| a.parse().unwrap());
    let brokered = mode != Mode::Write;

    // 1. Never a name inside W for the outside file; a link inside works.
    assert_ne!(r["link_empty_path"], "ok", "{ctx}");
    assert_ne!(r["link_proc_fd"], "ok", "{ctx}");
    assert_eq!(r["outside_linked"], false, "{ctx}");
    assert_eq!(r["link_inside"], "ok", "{ctx}");
    assert_eq!(
        fs::metadata(&s.outside).unwrap().permissions().mode() & 0o777,
        0o666
    );

    // 2. The brokered open grants the ioctl exactly when the kernel's does:
    // never at ABI >= 5 (IOCTL_DEV), and the never-given terminal keeps
    // its size then; the given one is usable.
    assert_eq!(r["pty_brokered"], r["pty_kernel"], "{ctx}");
    if abi >= 5 {
        assert_eq!(r["pty_kernel"], "EACCES", "{ctx}");
        assert_eq!(winsize(&hidden), (0, 0), "{ctx}");
    }
    assert_eq!(r["pty_given"], "ok", "{ctx}");

    // 3. /dev/tty is the caller's: the run has a session of its own and no
    // controlling terminal, brokered or not (the runner has one).
    assert_eq!(r["tty_brokered"], r["tty_kernel"], "{ctx}");
    assert_ne!(r["tty_kernel"], "opened", "{ctx}");

    // 4. Nested Landlock is unavailable while the broker serves the run
    // (it always does under the CLI), and the brokered truncate still works.
    assert_eq!(r["landlock_create"], "ENOTSUP", "{ctx}"); // EOPNOTSUPP
    assert_eq!(r["landlock_restrict"], "EPERM", "{ctx}");
    assert_eq!(r["truncate_path"], "ok", "{ctx}");
    assert_eq!(fs::read(s.w.join("t")).unwrap(), b"a");

    // 6. Signal scoping (ABI 6) keeps the runner's threads, the broker's
    // included, out of the command's reach; its own are not.
    assert_eq!(r["self_signal"], "ok", "{ctx}");
    if abi >= 6 {
        let threads = r["runner_threads"].as_array().unwrap();
        assert!(threads.len() >= 2, "{ctx}");
        assert!(threads.iter().all(|t| t == "EPERM"), "{ctx}");
    }

    // 5. No core dump where deny paths lie beneath the write path; with the
    // write path alone the kernel may dump one there (positive control, when
    // the host's core pattern writes plain files and the runner may dump).
    assert_eq!(r["crash_signal"], libc::SIGSEGV, "{ctx}");
    if brokered {
        assert_eq!(r["core_hard"], 0, "{ctx}");
        assert_eq!(r["core_files"], serde_json::json!([]), "{ctx}");
    } else if core_to_cwd() && runner_may_dump() {
        assert_ne!(r["core_hard"], 0, "{ctx}");
        assert_ne!(r["core_files"], serde_json::json!([]), "{ctx}");
    }
}

/// `kernel.core_pattern` names a file in the crashing process's cwd.
fn core_to_cwd() -> bool {
    fs::read_to_string("/proc/sys/kernel/core_pattern")
        .is_ok_and(|p| !p.starts_with('|') && !p.contains('/'))
}

fn runner_may_dump() -> bool {
    let mut lim: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: getrlimit fills `lim`.
    unsafe { libc::getrlimit(libc::RLIMIT_CORE, &mut lim) };
    lim.rlim_max != 0
}

fn matrix(who: Who) {
    for abi in [Some("1"), Some("4"), None] {
        for mode in [Mode::Write, Mode::WriteDeny, Mode::WorkspaceWrite] {
            check(mode, who, abi);
        }
    }
}

#[test]
fn the_broker_does_no_more_than_the_sandbox_as_root() {
    matrix(Who::Root);
}

#[test]
fn the_broker_does_no_more_than_the_sandbox_as_nobody() {
    matrix(Who::Nobody);
}

/// The twin of every attack, bare: the calls the sandbox refuses are real
/// (Landlock answers, `/dev/tty` is a terminal here), so a refusal above is
/// the sandbox's and not the host's.
#[test]
fn bare_the_same_calls_succeed() {
    let s = scene(true);
    let ctty = pty(Who::Root);
    let given = pty(Who::Root);
    let hidden = pty(Who::Root);
    let ctty_fd = ctty.slave.as_raw_fd();
    let mut cmd = Command::new("/usr/bin/python3");
    cmd.arg(&s.script)
        .arg(&s.w)
        .arg(&hidden.path)
        .arg(&s.outside)
        .stdin(Stdio::from(given.slave.try_clone().unwrap()))
        .stdout(Stdio::from(
            fs::OpenOptions::new()
                .append(true)
                .open(&s.outside)
                .unwrap(),
        ));
    with_controlling_terminal(&mut cmd, ctty_fd);
    assert!(cmd.status().unwrap().success());
    let r: Value =
        serde_json::from_str(&fs::read_to_string(s.w.join("result.json")).unwrap()).unwrap();
    assert_eq!(r["link_empty_path"], "ok", "{r}"); // root: CAP_DAC_READ_SEARCH
    assert_eq!(r["outside_linked"], true, "{r}");
    assert_eq!(r["pty_brokered"], "ok", "{r}");
    assert_eq!(winsize(&hidden), (7, 7), "{r}");
    assert_eq!(r["tty_kernel"], "opened", "{r}");
    assert_eq!(r["tty_brokered"], "opened", "{r}");
    assert_ne!(r["landlock_create"], "ENOTSUP", "{r}");
    assert!(
        r["runner_threads"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t == "ok"),
        "{r}"
    );
    assert_eq!(r["truncate_path"], "ok", "{r}");
}
