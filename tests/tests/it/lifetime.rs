//! Process lifetime no confined process can escape: as root (a cgroup per
//! run) and as an unprivileged user (the run's process group, which the
//! filter keeps every process in), nothing a run started outlives it.
//! Each attack beside its positive control: the attack's process really ran
//! (its beat file grew) before the run ended.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use sandbox_tests::{assert_exit, sandbox_bin, thread_group_gone};

/// Who runs the CLI: root (cgroup containment) or nobody (process group).
#[derive(Clone, Copy, Debug)]
enum As {
    Root,
    Nobody,
}

struct Scene {
    /// One scene at a time: a run's start sweeps every stale per-run cgroup,
    /// so a run of another test could end the survivor of a runner a test
    /// killed on purpose before that test has looked at it.
    _serial: std::sync::MutexGuard<'static, ()>,
    _dir: tempfile::TempDir,
    w: PathBuf,
    beat: PathBuf,
    token: String,
}

/// The lock every test of this file holds while it starts runs: a run's
/// start sweeps stale per-run cgroups (and a killed runner's survivor is
/// one until its test has looked at it).
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn scene() -> Scene {
    let serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let w = std::fs::canonicalize(dir.path()).unwrap().join("w");
    std::fs::create_dir(&w).unwrap();
    for p in [dir.path(), w.as_path()] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    let token = format!(
        "lifetime-{}-{}",
        std::process::id(),
        w.display().to_string().len() ^ rand()
    );
    Scene {
        _serial: serial,
        beat: w.join("beat"),
        w,
        _dir: dir,
        token,
    }
}

fn rand() -> usize {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as usize
}

fn cli(who: As) -> Command {
    let cmd = match who {
        As::Root => Command::new(sandbox_bin()),
        As::Nobody => {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
                .arg(sandbox_bin());
            c
        }
    };
    let mut cmd = without_config(cmd);
    cmd.env_remove("XDG_RUNTIME_DIR").current_dir("/");
    cmd
}

/// `cmd` (a wrapper such as `unshare`, or the CLI itself) with no operator
/// config reachable, and the stop signals at their defaults: a runner keeps
/// a stop signal it was started ignoring ignored, and a test process
/// started as a shell's background job (`cargo test &`) ignores SIGINT and
/// SIGQUIT.
fn without_config(mut cmd: Command) -> Command {
    use std::os::unix::process::CommandExt;
    cmd.env_remove("SANDBOX_CONFIG")
        .env("XDG_CONFIG_HOME", "/nonexistent/sandbox-tests-config");
    // SAFETY: signal(2) is async-signal-safe; the closure runs in the child
    // before exec and allocates nothing.
    unsafe {
        cmd.pre_exec(|| {
            for sig in [libc::SIGINT, libc::SIGQUIT, libc::SIGHUP, libc::SIGTERM] {
                libc::signal(sig, libc::SIG_DFL);
            }
            Ok(())
        });
    }
    cmd
}

/// The run printed `finished` and exited 0.
#[track_caller]
fn assert_finished(out: &Output, what: &str) {
    assert_ended(out, 0, "finished", what);
}

/// The run printed `stdout` (trimmed) and exited `code`.
#[track_caller]
fn assert_ended(out: &Output, code: i32, stdout: &str, what: &str) {
    assert_eq!(
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).trim()
        ),
        (Some(code), stdout),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `python3 -c code` confined to `s.w`, with `extra` flags.
fn run(who: As, s: &Scene, extra: &[&str], code: &str) -> Output {
    spawn_run(who, s, extra, code)
        .wait_with_output()
        .expect("wait for the CLI")
}

/// Starts `python3 -c code` confined to `s.w` with `extra` flags, its
/// stdout and stderr piped (unread until the caller reads them).
fn spawn_run(who: As, s: &Scene, extra: &[&str], code: &str) -> std::process::Child {
    run_command(who, s, extra, code)
        .spawn()
        .expect("run the CLI")
}

/// The command [`spawn_run`] starts.
fn run_command(who: As, s: &Scene, extra: &[&str], code: &str) -> Command {
    let mut cmd = cli(who);
    cmd.arg("run")
        .args(extra)
        .arg("-w")
        .arg(&s.w)
        .args(["--", "python3", "-c", code, &s.token])
        .arg(&s.beat)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// A cgroup v2 of a test's own (root only), beneath this process's: a
/// runner started in it makes its per-run cgroups there, where only a
/// runner started in it sweeps. Every other run on the host (this
/// binary's other tests, other test processes) sweeps its own parent
/// cgroup, so it cannot end a killed runner's survivor before the test has
/// looked at it. Removed, with anything left in it, when dropped.
struct PrivateCgroup {
    dir: PathBuf,
    procs: std::ffi::CString,
}

impl PrivateCgroup {
    fn new(s: &Scene) -> PrivateCgroup {
        let mount = ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]
            .into_iter()
            .map(PathBuf::from)
            .find(|m| m.join("cgroup.procs").exists() && m.join("cgroup.subtree_control").exists())
            .expect("a cgroup2 mount at /sys/fs/cgroup or /sys/fs/cgroup/unified");
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
        let rel = own
            .lines()
            .find_map(|l| l.strip_prefix("0::"))
            .expect("a cgroup v2 membership");
        let dir = mount
            .join(rel.trim().trim_start_matches('/'))
            .join(&s.token);
        std::fs::create_dir(&dir).unwrap();
        use std::os::unix::ffi::OsStrExt;
        let procs =
            std::ffi::CString::new(dir.join("cgroup.procs").as_os_str().as_bytes()).unwrap();
        PrivateCgroup { dir, procs }
    }

    /// `cmd` starts in this cgroup.
    fn enter(&self, cmd: &mut Command) {
        use std::os::unix::process::CommandExt;
        let procs = self.procs.clone();
        // SAFETY: open, write and close are async-signal-safe; the closure
        // runs in the child before exec and allocates nothing.
        unsafe {
            cmd.pre_exec(move || {
                let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // "0" moves the writing process.
                let n = libc::write(fd, b"0".as_ptr().cast(), 1);
                libc::close(fd);
                if n != 1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
}

impl Drop for PrivateCgroup {
    fn drop(&mut self) {
        let _ = std::fs::write(self.dir.join("cgroup.kill"), "1");
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            if let Ok(entries) = std::fs::read_dir(&self.dir) {
                for e in entries.flatten() {
                    if e.path().is_dir() {
                        let _ = std::fs::remove_dir(e.path());
                    }
                }
            }
            if std::fs::remove_dir(&self.dir).is_ok() || Instant::now() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Waits up to 10 s for the attack's first beat.
fn first_beat(s: &Scene) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while beat_len(s) == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The attack's survivor is alive now: its beat grows (up to 10 s) and a
/// process carrying the scene's token is there. Panics otherwise.
#[track_caller]
fn survivor_alive(s: &Scene, what: &str) {
    let from = beat_len(s);
    let deadline = Instant::now() + Duration::from_secs(10);
    while beat_len(s) == from && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        beat_len(s) > from,
        "{what}: positive control: the survivor kept beating after its runner died"
    );
    assert!(
        !survivors(s).is_empty(),
        "{what}: positive control: the survivor is alive"
    );
}

/// Waits up to 10 s for `marker` to exist; panics otherwise.
#[track_caller]
fn wait_for(marker: &std::path::Path, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !marker.exists() {
        assert!(
            Instant::now() < deadline,
            "{what}: {marker:?} never appeared"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A shell command for a run granted `dir`: leaves `dir/started`, waits
/// (up to 20 s) for `dir/go`, then prints `finished`.
fn started_then_go(dir: &std::path::Path) -> String {
    format!(
        "touch {d}/started; i=0; while [ ! -e {d}/go ] && [ $i -lt 2000 ]; do sleep 0.01; i=$((i+1)); done; echo finished",
        d = dir.display()
    )
}

fn beat_len(s: &Scene) -> u64 {
    std::fs::metadata(&s.beat).map(|m| m.len()).unwrap_or(0)
}

/// Processes whose command line carries the scene's token (those with a
/// live thread: a thread group whose leader exited while another thread
/// runs counts).
fn survivors(s: &Scene) -> Vec<i32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        // A zombie leader whose other thread runs is alive.
        if !thread_group_gone(pid)
            && cmdline
                .windows(s.token.len())
                .any(|w| w == s.token.as_bytes())
        {
            out.push(pid);
        }
    }
    out
}

/// After the run returned: nothing of it is left, and its beat stopped.
#[track_caller]
fn nothing_survives(s: &Scene, what: &str) {
    let before = beat_len(s);
    assert!(
        before > 0,
        "{what}: the attack never ran (positive control)"
    );
    std::thread::sleep(Duration::from_millis(400));
    let left = survivors(s);
    let after = beat_len(s);
    // Clean up whatever escaped, so one failure does not leak into others.
    for pid in &left {
        // SAFETY: kill has no memory effects.
        unsafe { libc::kill(*pid, libc::SIGKILL) };
    }
    assert!(
        left.is_empty(),
        "{what}: processes outlived the run: {left:?}"
    );
    assert_eq!(
        before, after,
        "{what}: something kept writing after the run"
    );
}

/// Python that starts the attack and returns at once (the main process
/// exits while the attack goes on), after the first beat.
fn attack(body: &str) -> String {
    format!(
        r#"
import os, sys, time, signal, ctypes
beat = sys.argv[2]
def pulse():
    with open(beat, "a") as f:
        f.write("x")
{body}
deadline = time.time() + 10
while not os.path.exists(beat) and time.time() < deadline:
    time.sleep(0.01)
"#
    )
}

const FORK_RELAY: &str = r#"
if os.fork() == 0:
    while True:
        if os.fork():
            os._exit(0)
        pulse()
        time.sleep(0.01)
"#;

const DOUBLE_FORK_SETSID: &str = r#"
if os.fork() == 0:
    try:
        os.setsid()
    except PermissionError:
        pass
    if os.fork():
        os._exit(0)
    while True:
        pulse()
        time.sleep(0.02)
"#;

const IGNORES_TERM: &str = r#"
if os.fork() == 0:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while True:
        pulse()
        time.sleep(0.02)
"#;

const OWN_SUBREAPER: &str = r#"
if os.fork() == 0:
    ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    if os.fork() == 0:
        if os.fork():
            os._exit(0)
        while True:
            pulse()
            time.sleep(0.02)
    while True:
        time.sleep(1)
"#;

fn each_attack(who: As, timeout: bool) {
    for (name, body) in [
        ("fork relay", FORK_RELAY),
        ("double fork with setsid", DOUBLE_FORK_SETSID),
        ("ignores SIGTERM", IGNORES_TERM),
        ("its own subreaper", OWN_SUBREAPER),
    ] {
        let s = scene();
        let extra: &[&str] = if timeout { &["--timeout", "30"] } else { &[] };
        let out = run(who, &s, extra, &attack(body));
        assert_eq!(
            out.status.code(),
            Some(0),
            "{who:?} {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        nothing_survives(&s, &format!("{who:?} {name} (timeout set: {timeout})"));
    }
}

#[test]
fn nothing_outlives_a_run_as_root() {
    each_attack(As::Root, false);
    each_attack(As::Root, true);
}

#[test]
fn nothing_outlives_a_run_as_an_unprivileged_user() {
    each_attack(As::Nobody, false);
    each_attack(As::Nobody, true);
}

/// A background process that ends on SIGTERM, leaving `BEAT.term`.
const ENDS_ON_TERM: &str = r#"
if os.fork() == 0:
    def term(*_):
        with open(beat + ".term", "w") as f:
            f.write("term")
        os._exit(0)
    signal.signal(signal.SIGTERM, term)
    while True:
        pulse()
        time.sleep(0.02)
"#;

/// The run is ended from the launching thread, inside the run's Landlock
/// domain: a read denial over the cgroup filesystem (where the run's
/// members are listed) still lets it send SIGTERM to every process left,
/// which then ends by itself (the graceful end, not only `cgroup.kill`).
#[test]
fn a_read_denial_over_the_runs_cgroup_does_not_stop_its_end() {
    for who in [As::Root, As::Nobody] {
        for extra in [&[][..], &["--read-deny", "/sys/fs/cgroup"][..]] {
            let s = scene();
            let out = run(who, &s, extra, &attack(ENDS_ON_TERM));
            let what = format!("{who:?} {extra:?}");
            assert_exit(&out, 0);
            nothing_survives(&s, &what);
            let term = s.beat.with_extension("term");
            assert_eq!(
                std::fs::read_to_string(&term).ok().as_deref(),
                Some("term"),
                "{what}: the process left was not sent SIGTERM"
            );
        }
    }
}

/// The timeout ends a command that ignores SIGTERM, with descendants, promptly.
#[test]
fn the_timeout_ends_everything_promptly() {
    for who in [As::Root, As::Nobody] {
        let s = scene();
        let code = format!(
            "{}\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True: time.sleep(1)\n",
            attack(IGNORES_TERM)
        );
        let started = Instant::now();
        let out = run(who, &s, &["--timeout", "1"], &code);
        let took = started.elapsed();
        assert_eq!(
            out.status.code(),
            Some(124),
            "{who:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // 1 s timeout + 2 s grace for SIGTERM; generous for a loaded host.
        assert!(took < Duration::from_secs(8), "{who:?}: took {took:?}");
        nothing_survives(&s, &format!("{who:?} timeout"));
    }
}

/// Python: SIGTERM ignored, a thread that appends to the beat file every
/// 20 ms (`beats` times, or forever; through an fd opened before, so that
/// it goes on once the run's broker is gone), the pid written to
/// `BEAT.pid`; then
/// the main thread either leaves by `SYS_exit` (not `exit_group`: a thread
/// group whose leader is a zombie while its other thread runs, which
/// `cgroup.kill` does not end on Linux 6.18) or joins the thread and
/// returns.
fn leader_exits_thread_lives(beats: Option<u32>, leader_exits: bool) -> String {
    let beats = beats.map_or("None".to_owned(), |n| n.to_string());
    let leader = if leader_exits {
        "ctypes.CDLL(None).syscall(60 if platform.machine() == 'x86_64' else 93, 0)"
    } else {
        "t.join()"
    };
    format!(
        r#"
import os, sys, time, signal, threading, ctypes, platform
beat = sys.argv[2]
signal.signal(signal.SIGTERM, signal.SIG_IGN)
fd = os.open(beat, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
def beats(n):
    i = 0
    while n is None or i < n:
        os.write(fd, b"x")
        i += 1
        time.sleep(0.02)
t = threading.Thread(target=beats, args=({beats},), daemon=False)
t.start()
while os.fstat(fd).st_size == 0:
    time.sleep(0.01)
with open(beat + ".pid", "w") as f:
    f.write(str(os.getpid()))
{leader}
print("joined", flush=True)
"#
    )
}

/// A command whose main thread exits (`SYS_exit`) while another thread of
/// it runs, SIGTERM ignored: the timeout ends it (124, in time) and the
/// thread is gone (its beat stops, no task of it runs). Root's `cgroup.kill`
/// alone left it running and the runner waiting forever. Twins: the same
/// thread ending by itself after 10 beats ends the run (0), whether its
/// leader joined it (an ordinary run) or had exited before it.
#[test]
fn a_thread_outliving_its_leader_ends_at_the_timeout() {
    for who in [As::Root, As::Nobody] {
        for leader_exits in [false, true] {
            let s = scene();
            let started = Instant::now();
            let out = run(
                who,
                &s,
                &["--timeout", "20"],
                &leader_exits_thread_lives(Some(10), leader_exits),
            );
            let what = format!("{who:?} twin (leader exits: {leader_exits})");
            let took = started.elapsed();
            let printed = if leader_exits { "" } else { "joined" };
            assert_ended(&out, 0, printed, &what);
            assert!(took < Duration::from_secs(10), "{what}: took {took:?}");
            assert_eq!(beat_len(&s), 10, "{what}: the thread beat 10 times");
        }
        let s = scene();
        let started = Instant::now();
        let out = run(
            who,
            &s,
            &["--timeout", "2"],
            &leader_exits_thread_lives(None, true),
        );
        let took = started.elapsed();
        let what = format!("{who:?} leader exited, thread lives");
        assert_eq!(
            out.status.code(),
            Some(124),
            "{what}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // 2 s timeout + 2 s grace for SIGTERM; generous for a loaded host.
        assert!(took < Duration::from_secs(12), "{what}: took {took:?}");
        let pid: i32 = std::fs::read_to_string(s.beat.with_extension("pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let gone = thread_group_gone(pid);
        if !gone {
            // SAFETY: kill has no memory effects; cleanup of the escapee.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        assert!(gone, "{what}: a thread of {pid} outlived the run");
        nothing_survives(&s, &what);
    }
}

/// A grandchild holding stdout open neither keeps the run going nor survives it.
#[test]
fn a_grandchild_holding_stdout_does_not_hold_the_run() {
    for who in [As::Root, As::Nobody] {
        let s = scene();
        let code = attack(
            r#"
if os.fork() == 0:
    while True:
        pulse()
        time.sleep(0.02)
print("main done", flush=True)
"#,
        );
        let started = Instant::now();
        let out = run(who, &s, &[], &code);
        assert!(started.elapsed() < Duration::from_secs(8));
        assert!(String::from_utf8_lossy(&out.stdout).contains("main done"));
        nothing_survives(&s, &format!("{who:?} stdout holder"));
    }
}

/// A caller that never reads the command's stderr cannot hold the run past
/// its timeout.
#[test]
fn the_timeout_holds_when_nobody_reads_stderr() {
    let s = scene();
    let code = format!(
        "{}\nchunk = b'e' * 65536\nwhile True:\n    pulse()\n    os.write(2, chunk)\n",
        attack("pulse()")
    );
    let mut child = cli(As::Root)
        .args(["run", "--timeout", "2", "-w"])
        .arg(&s.w)
        .args(["--", "python3", "-c", &code, &s.token])
        .arg(&s.beat)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped()) // never read
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(5500));
    let a = beat_len(&s);
    std::thread::sleep(Duration::from_millis(500));
    let b = beat_len(&s);
    // The CLI itself may still be draining into the unread pipe.
    let cli_pid = child.id() as i32;
    let left: Vec<i32> = survivors(&s)
        .into_iter()
        .filter(|p| *p != cli_pid)
        .collect();
    let _ = child.kill();
    let _ = child.wait();
    assert!(a > 0, "the command ran");
    assert_eq!(
        a, b,
        "the command was still running 3.5 s after its 2 s timeout"
    );
    assert!(left.is_empty(), "{left:?}");
}

/// The report is never written through a symlink the command planted.
#[test]
fn a_planted_report_symlink_is_refused() {
    let s = scene();
    let victim = s.w.parent().unwrap().join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    let report = s.w.join("report.json");
    let plant = format!(
        "import os, sys\nos.symlink({:?}, {:?})\nopen(sys.argv[2], 'a').write('x')",
        victim.display().to_string(),
        report.display().to_string()
    );
    let out = cli(As::Root)
        .args(["run", "--report"])
        .arg(&report)
        .arg("-w")
        .arg(&s.w)
        .args(["--", "python3", "-c", &plant, &s.token])
        .arg(&s.beat)
        .output()
        .unwrap();
    // The command ran: its exit status is kept, and one line says why no
    // record was written.
    assert_exit(&out, 0);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.lines().filter(|l| l.starts_with("sandbox:")).count() == 1,
        "{err}"
    );
    assert!(err.contains("symlink"), "{err}");
    assert!(err.contains("exit status is the command's (0)"), "{err}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    // A symlink there before the run: refused before anything runs.
    let out = cli(As::Root)
        .args(["run", "--report"])
        .arg(&report)
        .args(["--", "/bin/sh", "-c", "echo ran"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    assert!(out.stdout.is_empty(), "nothing ran");
    // Twin: without the link the report is written, atomically (no temp left).
    std::fs::remove_file(&report).unwrap();
    let out = cli(As::Root)
        .args(["run", "--report"])
        .arg(&report)
        .args(["--", "/bin/true"])
        .output()
        .unwrap();
    assert_exit(&out, 0);
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(v["containment"], "cgroup");
    let names: Vec<_> = std::fs::read_dir(&s.w)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(
        names.iter().all(|n| !n.to_string_lossy().ends_with(".tmp")),
        "{names:?}"
    );
}

/// A process that ignores SIGTERM and beats through a file it opened while
/// the runner lived: with the runner dead, every call the broker would
/// answer fails (`ENOSYS`), so a survivor that opens its beat file anew
/// each time would die at its next beat and prove nothing.
const KEEPS_BEATING: &str = r#"
if os.fork() == 0:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    fd = os.open(beat, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    while True:
        os.write(fd, b"x")
        time.sleep(0.02)
"#;

/// Starts a run (as root, in `cgroup`) whose attack leaves a process that
/// ignores SIGTERM, waits for its first beat, and kills the runner with
/// SIGKILL; returns the dead runner's pid.
fn kill_the_runner_after_its_first_beat(s: &Scene, cgroup: &PrivateCgroup) -> i32 {
    let code = attack(KEEPS_BEATING) + "\nwhile True: time.sleep(1)\n";
    let mut cmd = run_command(As::Root, s, &[], &code);
    cgroup.enter(&mut cmd);
    let mut child = cmd.spawn().expect("run the CLI");
    let runner = child.id() as i32;
    first_beat(s);
    child.kill().unwrap();
    child.wait().unwrap();
    runner
}

/// If the runner is killed, the command's main process dies with it, and
/// the next run ends what the dead run's cgroup still held.
#[test]
fn a_killed_runner_leaves_nothing_past_the_next_run() {
    let s = scene();
    let cgroup = PrivateCgroup::new(&s);
    kill_the_runner_after_its_first_beat(&s, &cgroup);
    survivor_alive(&s, "before the next run");
    // The next run (beside it) sweeps the dead run's cgroup.
    let mut next = cli(As::Root);
    cgroup.enter(&mut next);
    let out = next.args(["run", "--", "/bin/true"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    nothing_survives(&s, "after the runner was killed");
}

/// A process that leaves a thread group whose leader exited (`SYS_exit`)
/// while its thread beats through an fd opened before, SIGTERM ignored.
const THREAD_OUTLIVES_LEADER: &str = r#"
if os.fork() == 0:
    import threading, platform
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    fd = os.open(beat, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    def beats():
        while True:
            os.write(fd, b"x")
            time.sleep(0.02)
    threading.Thread(target=beats, daemon=False).start()
    ctypes.CDLL(None).syscall(60 if platform.machine() == "x86_64" else 93, 0)
"#;

/// As [`a_killed_runner_leaves_nothing_past_the_next_run`], the survivor a
/// thread group whose leader exited while its thread runs, which the
/// sweep's `cgroup.kill` alone does not end: the next run's sweep ends it
/// too. Positive control: it beats after its runner died.
#[test]
fn a_killed_runners_thread_outliving_its_leader_ends_at_the_next_run() {
    let s = scene();
    let cgroup = PrivateCgroup::new(&s);
    let code = attack(THREAD_OUTLIVES_LEADER) + "\nwhile True: time.sleep(1)\n";
    let mut cmd = run_command(As::Root, &s, &[], &code);
    cgroup.enter(&mut cmd);
    let mut child = cmd.spawn().expect("run the CLI");
    first_beat(&s);
    child.kill().unwrap();
    child.wait().unwrap();
    let from = beat_len(&s);
    let deadline = Instant::now() + Duration::from_secs(10);
    while beat_len(&s) == from && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        beat_len(&s) > from,
        "positive control: the thread kept beating after its runner died"
    );
    let mut next = cli(As::Root);
    cgroup.enter(&mut next);
    let out = next.args(["run", "--", "/bin/true"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    nothing_survives(&s, "the thread after its runner was killed");
}

/// A process of a dead run that holds the dead runner's pid (as a survivor
/// forking until it gets it would) does not make that runner look alive:
/// the next run still ends the dead run's cgroup, whose name carries the
/// runner's start time as well as its pid. Twin: the survivor really ran,
/// and outlived its runner until the next run.
#[test]
fn a_reused_runner_pid_does_not_shield_survivors() {
    let s = scene();
    // Its own cgroup: no other run's sweep takes the survivor first.
    let cgroup = PrivateCgroup::new(&s);
    let runner = kill_the_runner_after_its_first_beat(&s, &cgroup);
    survivor_alive(&s, "after its runner was killed");
    // Take the dead runner's pid: the next fork after ns_last_pid = pid - 1
    // gets it (root only; other forks on the host may race, so retry).
    let mut holder = None;
    for _ in 0..200 {
        std::fs::write("/proc/sys/kernel/ns_last_pid", format!("{}", runner - 1)).unwrap();
        let c = Command::new("sleep").arg("60").spawn().unwrap();
        if c.id() as i32 == runner {
            holder = Some(c);
            break;
        }
        let mut c = c;
        let _ = c.kill();
        let _ = c.wait();
    }
    let mut holder = holder.expect("a process took the dead runner's pid");
    let mut next = cli(As::Root);
    cgroup.enter(&mut next);
    let out = next.args(["run", "--", "/bin/true"]).output().unwrap();
    let _ = holder.kill();
    let _ = holder.wait();
    assert_eq!(out.status.code(), Some(0));
    nothing_survives(&s, "after the killed runner's pid was taken");
}

/// A runner in another pid or time namespace, whose sweep shares the live
/// run's parent cgroup, leaves that run alone: it cannot judge a runner's
/// pid and start time from there (the run's name says which namespaces it
/// was made in). Twin: the same live run, with a sweeping runner in the
/// same namespaces, also finishes (a live runner is never swept).
#[test]
fn a_runner_in_other_namespaces_does_not_end_a_live_run() {
    for wrap in [
        &[][..],
        &["unshare", "--pid", "--fork", "--mount-proc", "--"][..],
        &["unshare", "--time", "--boottime", "100000", "--"][..],
    ] {
        let s = scene();
        let live = cli(As::Root)
            .args(["run", "-w"])
            .arg(&s.w)
            .args(["--", "/bin/sh", "-c", &started_then_go(&s.w)])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        wait_for(&s.w.join("started"), "the live run");
        let sweeper = match wrap.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(sandbox_bin());
                c
            }
            None => Command::new(sandbox_bin()),
        };
        let sweeper = without_config(sweeper)
            .args(["run", "--", "/bin/true"])
            .output()
            .expect("unshare (util-linux) runs the sweeping runner");
        assert_exit(&sweeper, 0);
        std::fs::write(s.w.join("go"), "").unwrap();
        let out = live.wait_with_output().unwrap();
        assert_finished(
            &out,
            &format!("the live run beside a runner under {wrap:?}"),
        );
    }
}

/// A child that beats until it is ended.
const PULSING_CHILD: &str = r#"
if os.fork() == 0:
    while True:
        pulse()
        time.sleep(0.02)
"#;

/// SIGINT (Ctrl-C), SIGTERM or SIGHUP to the runner end the whole run, its
/// background processes too, and the runner exits as the signal's
/// (128 + N); they reach the runner alone, since the command has a session
/// of its own. Twin: the background process was running before the signal.
/// As root (cgroup) and nobody (process group).
#[test]
fn a_stop_signal_to_the_runner_ends_the_whole_run() {
    let code = attack(&format!(
        "{PULSING_CHILD}\nwhile True:\n    time.sleep(1)\n"
    ));
    for who in [As::Root, As::Nobody] {
        for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            let s = scene();
            let mut runner = spawn_run(who, &s, &["--timeout", "60"], &code);
            first_beat(&s);
            // setpriv execs the CLI: its pid is the runner's.
            // SAFETY: kill has no memory effects; the pid is our child.
            unsafe { libc::kill(runner.id() as i32, signal) };
            let started = Instant::now();
            let status = runner.wait().unwrap();
            assert!(started.elapsed() < Duration::from_secs(8));
            let mut err = String::new();
            std::io::Read::read_to_string(runner.stderr.as_mut().unwrap(), &mut err).unwrap();
            assert_eq!(
                status.code(),
                Some(128 + signal),
                "{who:?} signal {signal}: {err}"
            );
            assert!(err.contains("stopped by signal"), "{who:?}: {err}");
            nothing_survives(&s, &format!("{who:?} after signal {signal}"));
        }
    }
}

/// The command's handlers for the stop signals: each prints what it got
/// and ends the command; a background process pulses until then.
const HANDLES_STOPS: &str = r#"
import os, sys, time, signal
beat = sys.argv[2]
def got(n, _):
    print("got", signal.Signals(n).name, flush=True)
    sys.exit(3)
for s in (signal.SIGQUIT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(s, got)
try:
    # The fork is inside the try: the first beat can come before the
    # parent is back from fork, and a SIGINT then is still handled.
    if os.fork() == 0:
        for s in (signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_DFL)
        while True:
            with open(beat, "a") as f:
                f.write("x")
            time.sleep(0.02)
    while True:
        time.sleep(0.05)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(3)
"#;

/// The same, ignoring every stop signal (and its background process too).
const IGNORES_STOPS: &str = r#"
import os, sys, time, signal
beat = sys.argv[2]
for s in (signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(s, signal.SIG_IGN)
if os.fork() == 0:
    while True:
        with open(beat, "a") as f:
            f.write("x")
        time.sleep(0.02)
while True:
    print("ignored", flush=True)
    time.sleep(0.05)
"#;

/// SIGINT, SIGQUIT, SIGTERM and SIGHUP to the runner reach the command as a
/// shell passes a terminal's on (its process group gets the same signal):
/// Python's KeyboardInterrupt handler runs on SIGINT, the handlers of the
/// others run; the runner still exits 128 + N and nothing of the run is
/// left. Twin: a command that ignores the signal is ended after the grace
/// period (2 s), with its background process. As root (cgroup) and nobody
/// (process group).
#[test]
fn a_stop_signal_reaches_the_command_as_from_a_terminal() {
    for who in [As::Root, As::Nobody] {
        for (signal, name) in [
            (libc::SIGINT, "SIGINT"),
            (libc::SIGQUIT, "SIGQUIT"),
            (libc::SIGTERM, "SIGTERM"),
            (libc::SIGHUP, "SIGHUP"),
        ] {
            let what = format!("{who:?} {name}");
            for (handled, code) in [(true, HANDLES_STOPS), (false, IGNORES_STOPS)] {
                let s = scene();
                let runner = spawn_run(who, &s, &["--timeout", "60"], code);
                first_beat(&s);
                // SAFETY: kill has no memory effects; the pid is our child
                // (setpriv execs the CLI).
                unsafe { libc::kill(runner.id() as i32, signal) };
                let started = Instant::now();
                let out = runner.wait_with_output().unwrap();
                let took = started.elapsed();
                let stdout = String::from_utf8_lossy(&out.stdout);
                let stderr = String::from_utf8_lossy(&out.stderr);
                assert_eq!(
                    out.status.code(),
                    Some(128 + signal),
                    "{what} (handled: {handled}): {stderr}"
                );
                assert!(stderr.contains("stopped by signal"), "{what}: {stderr}");
                if handled {
                    let expected = if signal == libc::SIGINT {
                        "interrupted".to_owned()
                    } else {
                        format!("got {name}")
                    };
                    assert_eq!(stdout.trim(), expected, "{what}: {stderr}");
                    assert!(took < Duration::from_millis(1800), "{what}: took {took:?}");
                    nothing_survives(&s, &format!("{what}, handled"));
                } else {
                    assert!(stdout.contains("ignored"), "{what}: {stdout}");
                    assert!(
                        took >= Duration::from_millis(1900) && took < Duration::from_secs(8),
                        "{what} ignored: ended after {took:?}, not after the 2 s grace"
                    );
                    nothing_survives(&s, &format!("{what}, ignored"));
                }
            }
        }
    }
}

/// A stop signal at any moment of a launch (before the handler is set, in
/// the self-test, before the spawn, while the command starts): the CLI ends
/// with it (killed by it, or exiting 128 + N) and nothing the run started
/// is left. Twin: without the signal the same run's background process runs.
#[test]
fn a_stop_signal_at_any_moment_leaves_nothing() {
    let code = attack(PULSING_CHILD);
    for i in 0..12u64 {
        let s = scene();
        let mut runner = spawn_run(As::Root, &s, &[], &code);
        std::thread::sleep(Duration::from_millis(i * 4));
        // SAFETY: kill has no memory effects; the pid is our child.
        unsafe { libc::kill(runner.id() as i32, libc::SIGINT) };
        let status = runner.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert!(
            status.code() == Some(130) || status.signal() == Some(libc::SIGINT),
            "after {} ms: {status:?}",
            i * 4
        );
        std::thread::sleep(Duration::from_millis(300));
        let left = survivors(&s);
        for pid in &left {
            // SAFETY: kill has no memory effects.
            unsafe { libc::kill(*pid, libc::SIGKILL) };
        }
        assert!(
            left.is_empty(),
            "after {} ms: {left:?} outlived the run",
            i * 4
        );
    }
    // Twin: unsignalled, the background process ran (and the run ended it).
    let s = scene();
    let out = run(As::Root, &s, &[], &code);
    assert_eq!(out.status.code(), Some(0));
    nothing_survives(&s, "unsignalled twin");
}

/// Two runners in a pid namespace of their own that share the host's
/// `/proc` (`unshare --pid` without `--mount-proc`): the second's sweep
/// reads the first's pid and start time as that `/proc` shows them, so it
/// leaves the live run alone. Twin: the outer test above, with a `/proc`
/// of the namespace's own.
#[test]
fn runners_in_a_pid_namespace_without_their_own_proc_keep_each_others_runs() {
    let s = scene();
    // The first run starts, the second sweeps while it waits, then `go`.
    let script = format!(
        "\"$0\" run -w {w} -- /bin/sh -c '{cmd}' & \
         i=0; while [ ! -e {w}/started ] && [ $i -lt 2000 ]; do sleep 0.01; i=$((i+1)); done; \
         \"$0\" run -- /bin/true; touch {w}/go; wait",
        w = s.w.display(),
        cmd = started_then_go(&s.w)
    );
    let mut unshare = Command::new("unshare");
    unshare
        .args(["--pid", "--fork", "--", "/bin/sh", "-c", &script])
        .arg(sandbox_bin());
    let out = without_config(unshare)
        .stdin(Stdio::null())
        .output()
        .expect("unshare (util-linux)");
    assert_finished(&out, "the first run, beside the second's sweep");
}

/// A stop signal the runner was started ignoring (`nohup`, a shell's
/// background job) stays ignored: the run goes on. Twin: the same signal
/// not ignored stops the run (`a_stop_signal_to_the_runner_ends_the_whole_run`).
#[test]
fn an_ignored_stop_signal_stays_ignored() {
    for (signal, name) in [(libc::SIGHUP, "HUP"), (libc::SIGINT, "INT")] {
        let s = scene();
        let mut sh = Command::new("/bin/sh");
        sh.args([
            "-c",
            &format!(
                "trap '' {name}; exec \"$0\" run -w {w} -- /bin/sh -c '{cmd}'",
                w = s.w.display(),
                cmd = started_then_go(&s.w)
            ),
        ])
        .arg(sandbox_bin());
        let runner = without_config(sh)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        wait_for(&s.w.join("started"), &format!("SIG{name}"));
        // The runner still ignores it once the run is going, so the kernel
        // drops the signal as it is sent (nothing is left pending to act on
        // after `go`).
        let ign = std::fs::read_to_string(format!("/proc/{}/status", runner.id())).unwrap();
        let ign = ign
            .lines()
            .find_map(|l| l.strip_prefix("SigIgn:"))
            .map(|h| u64::from_str_radix(h.trim(), 16).unwrap())
            .unwrap();
        assert_ne!(
            ign & (1 << (signal - 1)),
            0,
            "SIG{name} ignored by the runner"
        );
        // SAFETY: kill has no memory effects; the pid is our child's (sh
        // exec'd the CLI).
        unsafe { libc::kill(runner.id() as i32, signal) };
        std::fs::write(s.w.join("go"), "").unwrap();
        let out = runner.wait_with_output().unwrap();
        assert_finished(&out, &format!("SIG{name} ignored at start"));
    }
}

/// Outside a run (here `exec-op` reading its op from stdin) the stop
/// signals do what they did before: SIGINT ends the CLI at once. Twin:
/// during a run the same signal stops the run
/// (`a_stop_signal_to_the_runner_ends_the_whole_run`).
#[test]
fn a_stop_signal_outside_a_run_ends_the_cli_at_once() {
    let _serial = serial();
    let mut cli = without_config(Command::new(sandbox_bin()))
        .args(["exec-op", "--op", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    reading_stdin(cli.id() as i32);
    // SAFETY: kill has no memory effects; the pid is our child.
    unsafe { libc::kill(cli.id() as i32, libc::SIGINT) };
    let deadline = Instant::now() + Duration::from_secs(5);
    let status = loop {
        if let Some(status) = cli.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let _ = cli.kill();
    let _ = cli.wait();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        status.and_then(|s| s.signal()),
        Some(libc::SIGINT),
        "the CLI did not end on SIGINT while reading its op: {status:?}"
    );
}

/// Waits (up to 10 s) until `pid`'s main thread is blocked in `read(0, …)`
/// (`/proc/PID/syscall`: number 0, first argument 0 on x86_64; `read` is
/// 63 on aarch64).
#[track_caller]
fn reading_stdin(pid: i32) {
    let read_nr = if cfg!(target_arch = "aarch64") { 63 } else { 0 };
    let want = format!("{read_nr} 0x0 ");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = std::fs::read_to_string(format!("/proc/{pid}/syscall")).unwrap_or_default();
        if now.starts_with(&want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "pid {pid} never read stdin: {now:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A runner started with SIGCHLD ignored (which makes the kernel reap its
/// children unasked) still waits for the command and reports its status.
/// Twin: the same run with SIGCHLD at its default.
#[test]
fn a_runner_started_with_sigchld_ignored_reports_the_commands_status() {
    use std::os::unix::process::CommandExt;
    let _serial = serial();
    for ignored in [false, true] {
        let mut cmd = without_config(Command::new(sandbox_bin()));
        cmd.args(["run", "--", "/bin/sh", "-c", "echo ran; exit 3"])
            .stdin(Stdio::null());
        if ignored {
            // SAFETY: signal(2) is async-signal-safe; the closure runs in the
            // child before exec and allocates nothing.
            unsafe {
                cmd.pre_exec(|| {
                    libc::signal(libc::SIGCHLD, libc::SIG_IGN);
                    Ok(())
                });
            }
        }
        let out = cmd.output().unwrap();
        assert_ended(&out, 3, "ran", &format!("SIGCHLD ignored: {ignored}"));
    }
}
