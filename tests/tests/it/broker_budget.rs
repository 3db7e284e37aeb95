//! What the runner does for a run is held to the run's limits (issue 39,
//! item 4), and writers waiting for a FIFO's reader wait as the kernel
//! lets them, however many (item 6):
//!
//! * a `chmod` flood under `--cpu 0.1` makes the runner spend at most about
//!   a tenth of a CPU on it (CPU time of the runner process, read from
//!   `/proc/PID/stat` while the flood runs), beside a twin without the
//!   limit that makes it spend more;
//! * 100 writers blocked on FIFOs without a reader all wait (none gets
//!   `ENXIO`), hold a bounded number of runner threads, and all complete
//!   once the readers come, as they do bare;
//! * blocking connects under `--pids 6` hold at most 6 runner workers,
//!   beside a twin without the limit that holds one per connect.
//!
//! As root (limits held by cgroups) and as nobody (`--allow-unlimited`: no
//! cgroup holds them, the broker's budget still does). Assertions are on
//! counts and generous bounds, never on timing ratios.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use sandbox_tests::{is_root, sandbox_bin};

#[track_caller]
fn require_root() {
    assert!(
        is_root(),
        "these tests run the CLI as root and, through setpriv, as nobody: run them as root (CI does)"
    );
}

#[derive(Clone, Copy, Debug)]
enum As {
    Root,
    Nobody,
}

/// `sandbox run ARGS -- python3 -c SCRIPT SCRIPT_ARGS`, as `who`, with
/// stdin and stdout piped.
fn spawn(who: As, dir: &Path, args: &[&str], script: &str, script_args: &[&str]) -> Child {
    let mut cmd = match who {
        As::Root => Command::new(sandbox_bin()),
        As::Nobody => sandbox_tests::sandbox_as_nobody(),
    };
    cmd.arg("run")
        .args(args)
        .args(["--", "/usr/bin/python3", "-c", script])
        .args(script_args)
        .env_remove("SANDBOX_CONFIG")
        .env("XDG_CONFIG_HOME", "/nonexistent/sandbox-tests-config")
        // Not the workspace: a home inside a write path gets the trusted
        // state's deny paths there, which this test is not about.
        .env("HOME", "/nonexistent/sandbox-tests-home")
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd.spawn()
        .expect("spawn sandbox (setpriv from util-linux for nobody)")
}

/// A directory everyone may write (the run may be nobody's).
fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    dir
}

/// CPU time (user + system) of process `pid` so far, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let (_, rest) = stat.rsplit_once(')').unwrap();
    let f: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 (utime, stime); `rest` starts at field 3.
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    ticks as f64 / hz
}

/// Threads of process `pid` now.
fn threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .count()
}

/// Reads stdout lines until one starts with `prefix`; panics (with the
/// run's stderr) if the run ends first.
fn expect_line(out: &mut impl BufRead, child: &mut Child, prefix: &str) -> String {
    let mut line = String::new();
    loop {
        line.clear();
        if out.read_line(&mut line).unwrap() == 0 {
            let status = child.wait().unwrap();
            let mut err = String::new();
            let _ = std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err);
            panic!("the run ended ({status}) before {prefix:?}: {err}");
        }
        if line.starts_with(prefix) {
            return line.trim().to_owned();
        }
    }
}

fn finish(mut child: Child) -> (std::process::ExitStatus, String) {
    let status = child.wait().unwrap();
    let mut err = String::new();
    let _ = std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err);
    (status, err)
}

/// Four threads calling `chmod` for `argv[2]` seconds on `argv[1]`.
const CHMOD_FLOOD: &str = r#"
import os, sys, threading, time
p, dur = sys.argv[1], float(sys.argv[2])
open(p, 'w').close()
counts = [0] * 4
def run(i):
    end = time.time() + dur
    n = 0
    while time.time() < end:
        os.chmod(p, 0o644 if n & 1 else 0o600)
        n += 1
    counts[i] = n
print("ready", flush=True)
ts = [threading.Thread(target=run, args=(i,)) for i in range(4)]
[t.start() for t in ts]
[t.join() for t in ts]
print("done", sum(counts), flush=True)
sys.stdin.readline()
"#;

/// The runner's CPU time during a flood of `secs` under `limits`, the
/// flood's wall time as seen here, and how many chmods it made.
fn flood(who: As, limits: &[&str], secs: &str) -> (f64, f64, u64) {
    let dir = workspace();
    let ws = dir.path().to_str().unwrap();
    let file = dir.path().join("f");
    let mut args = vec!["--mode", "workspace-write", "--workspace", ws];
    args.extend_from_slice(limits);
    let mut child = spawn(
        who,
        dir.path(),
        &args,
        CHMOD_FLOOD,
        &[file.to_str().unwrap(), secs],
    );
    let pid = child.id();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    expect_line(&mut out, &mut child, "ready");
    let (cpu0, t0) = (cpu_seconds(pid), Instant::now());
    let done = expect_line(&mut out, &mut child, "done");
    let (cpu1, wall) = (cpu_seconds(pid), t0.elapsed().as_secs_f64());
    child.stdin.take().unwrap().write_all(b"\n").unwrap();
    let (status, err) = finish(child);
    assert!(status.success(), "{who:?} {limits:?}: {status}: {err}");
    let made: u64 = done.split_whitespace().nth(1).unwrap().parse().unwrap();
    (cpu1 - cpu0, wall, made)
}

/// Under `--cpu 0.1` the runner spends on a chmod flood at most the run's
/// share of its wall time (plus one period's quota and the clock's ticks:
/// 0.15 s); the same flood without the limit makes it spend more than that.
fn chmod_flood_is_held_to_the_share(who: As) {
    require_root();
    let mut limited = vec!["--cpu", "0.1"];
    if let As::Nobody = who {
        // No cgroup holds --cpu for nobody here: the broker's budget still does.
        limited.push("--allow-unlimited");
    }
    let (cpu, wall, made) = flood(who, &limited, "3");
    let bound = 0.1 * wall + 0.15;
    assert!(made > 0, "{who:?}: the flood made no chmod");
    assert!(
        cpu <= bound,
        "{who:?}: the runner spent {cpu:.2} s of CPU on {made} chmods in {wall:.2} s under --cpu 0.1 (bound {bound:.2} s)"
    );
    // Twin: unlimited, the runner spends well beyond that share.
    let (twin_cpu, twin_wall, twin_made) = flood(who, &[], "3");
    let twin_bound = 0.1 * twin_wall + 0.15;
    eprintln!(
        "{who:?}: --cpu 0.1: {cpu:.2} s CPU, {made} chmods in {wall:.2} s; \
         unlimited: {twin_cpu:.2} s CPU, {twin_made} chmods in {twin_wall:.2} s"
    );
    assert!(
        twin_cpu > twin_bound,
        "{who:?}: unlimited, the runner spent only {twin_cpu:.2} s on {twin_made} chmods in {twin_wall:.2} s"
    );
}

#[test]
fn a_chmod_flood_is_held_to_the_runs_cpu_share_as_root() {
    chmod_flood_is_held_to_the_share(As::Root);
}

#[test]
fn a_chmod_flood_is_held_to_the_runs_cpu_share_as_nobody() {
    chmod_flood_is_held_to_the_share(As::Nobody);
}

/// 100 writer threads on four FIFOs without a reader; once they have
/// waited a while, says how many still wait and how many failed, waits for
/// a line on stdin, opens the readers and reads what every writer wrote.
const FIFO_WRITERS: &str = r#"
import errno, os, sys, threading, time
from collections import Counter
d = sys.argv[1]
paths = [os.path.join(d, "fifo%d" % i) for i in range(4)]
for p in paths:
    os.mkfifo(p)
res = {}
def w(i):
    try:
        fd = os.open(paths[i % 4], os.O_WRONLY)
        os.write(fd, b"x")
        os.close(fd)
        res[i] = "ok"
    except OSError as e:
        res[i] = errno.errorcode[e.errno]
ts = [threading.Thread(target=w, args=(i,)) for i in range(100)]
[t.start() for t in ts]
time.sleep(1.5)
print("waiting", 100 - len(res), "failed", ",".join(sorted(set(res.values()))) or "-", flush=True)
sys.stdin.readline()
readers = [os.open(p, os.O_RDONLY | os.O_NONBLOCK) for p in paths]
[t.join() for t in ts]
data = b"".join(os.read(r, 4096) for r in readers)
print("done", " ".join("%s=%d" % kv for kv in sorted(Counter(res.values()).items())), "bytes", len(data), flush=True)
"#;

/// Runs the FIFO writers (`who`: confined as root or nobody, or `None`:
/// bare); the line said while they wait, the runner's threads then, and the
/// line said at the end.
fn fifo_writers(who: Option<As>) -> (String, usize, String) {
    let dir = workspace();
    let ws = dir.path().to_str().unwrap();
    let mut child = match who {
        Some(who) => spawn(
            who,
            dir.path(),
            &["--mode", "workspace-write", "--workspace", ws],
            FIFO_WRITERS,
            &[ws],
        ),
        None => Command::new("/usr/bin/python3")
            .args(["-c", FIFO_WRITERS, ws])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    };
    let pid = child.id();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let waiting = expect_line(&mut out, &mut child, "waiting");
    let held = threads(pid);
    child.stdin.take().unwrap().write_all(b"\n").unwrap();
    let done = expect_line(&mut out, &mut child, "done");
    let (status, err) = finish(child);
    assert!(status.success(), "{who:?}: {status}: {err}");
    (waiting, held, done)
}

fn fifo_writers_all_wait(who: As) {
    require_root();
    // Twin: bare, the kernel lets all 100 wait and completes them.
    let (waiting, _, done) = fifo_writers(None);
    assert_eq!(waiting, "waiting 100 failed -");
    assert_eq!(done, "done ok=100 bytes 100");
    let (waiting, held, done) = fifo_writers(Some(who));
    assert_eq!(waiting, "waiting 100 failed -", "{who:?}");
    assert_eq!(done, "done ok=100 bytes 100", "{who:?}");
    // The runner's main, launching and broker threads, with room to spare:
    // no thread per waiting writer (there were 64 + 3 before).
    eprintln!("{who:?}: {held} runner threads while 100 writers wait");
    assert!(
        held <= 8,
        "{who:?}: {held} runner threads for 100 waiting writers"
    );
}

#[test]
fn a_hundred_fifo_writers_wait_and_complete_as_root() {
    fifo_writers_all_wait(As::Root);
}

#[test]
fn a_hundred_fifo_writers_wait_and_complete_as_nobody() {
    fifo_writers_all_wait(As::Nobody);
}

/// 20 threads connect (blocking) to a UNIX socket that never accepts, with
/// a backlog of 0: the first connect is queued, the others wait. Once they
/// have waited a while, says so, waits for a line on stdin, closes the
/// listener (the waiting connects are then refused) and counts the answers.
const BLOCKED_CONNECTS: &str = r#"
import errno, os, socket, sys, threading, time
from collections import Counter
p = os.path.join(sys.argv[1], "sock")
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind(p)
srv.listen(0)
res = {}
def c(i):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(p)
        res[i] = "ok"
    except OSError as e:
        res[i] = errno.errorcode[e.errno]
ts = []
for i in range(20):
    t = threading.Thread(target=c, args=(i,))
    try:
        t.start()
    except RuntimeError:
        break  # the run's --pids, held by a cgroup
    ts.append(t)
time.sleep(1.5)
print("waiting", len(ts) - len(res), flush=True)
sys.stdin.readline()
srv.close()
[t.join() for t in ts]
print("done", " ".join("%s=%d" % kv for kv in sorted(Counter(res.values()).items())), flush=True)
"#;

/// The connects under `limits` as `who`: the runner's threads while they
/// wait, and the answers.
fn blocked_connects(who: As, limits: &[&str]) -> (usize, String) {
    let dir = workspace();
    let ws = dir.path().to_str().unwrap();
    let mut args = vec!["-w", ws];
    args.extend_from_slice(limits);
    let mut child = spawn(who, dir.path(), &args, BLOCKED_CONNECTS, &[ws]);
    let pid = child.id();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    expect_line(&mut out, &mut child, "waiting");
    let held = threads(pid);
    child.stdin.take().unwrap().write_all(b"\n").unwrap();
    let done = expect_line(&mut out, &mut child, "done");
    let (status, err) = finish(child);
    assert!(status.success(), "{who:?} {limits:?}: {status}: {err}");
    (held, done)
}

/// As nobody no cgroup holds `--pids`, so the command has its 20 threads:
/// the broker still runs at most 6 connect workers, the other connects wait
/// for one (never an error). Twin: without the limit, a worker per connect.
#[test]
fn blocking_connects_hold_no_more_workers_than_the_pids_limit() {
    require_root();
    let (held, done) = blocked_connects(As::Nobody, &["--pids", "6", "--allow-unlimited"]);
    // Main, launching, broker and nest-socket threads, and 6 workers.
    assert!(held <= 4 + 6, "{held} runner threads under --pids 6");
    // Every connect is answered as the kernel answers it: the queued one
    // connects, the others are refused once the listener is gone.
    assert_eq!(done, "done ECONNREFUSED=19 ok=1");
    let (twin_held, twin_done) = blocked_connects(As::Nobody, &[]);
    eprintln!("nobody: {held} runner threads under --pids 6, {twin_held} without");
    assert!(
        twin_held >= 3 + 19,
        "{twin_held} runner threads without a limit"
    );
    assert_eq!(twin_done, done);
    // As root the cgroup holds --pids: the run's own threads are fewer
    // than 6, and so are the workers.
    let (held, done) = blocked_connects(As::Root, &["--pids", "6"]);
    assert!(
        held <= 4 + 6,
        "{held} runner threads under --pids 6 as root"
    );
    assert!(!done.contains("EAGAIN"), "{done}");
}
