//! Attacks on the nest socket (#45): the outer runner (unconfined, often
//! root) runs what a hostile command asks for, so each request that would
//! reach past the outer run is tried here, beside its allowed twin, as root
//! and as nobody. Everything it could reach is a temporary directory.
#![cfg(target_os = "linux")]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

use sandbox_tests::{sandbox, sandbox_as_nobody, sandbox_bin, users};

fn outer(nobody: bool) -> Command {
    if nobody {
        sandbox_as_nobody()
    } else {
        sandbox()
    }
}

/// A directory (with `dirs` inside) every user may write to.
fn shared(dirs: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for d in std::iter::once(&"").chain(dirs) {
        let p = dir.path().join(d);
        std::fs::create_dir_all(&p).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    dir
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn d(p: &Path) -> String {
    p.display().to_string()
}

/// Sends nested requests by hand (the hello, then the request and stdio),
/// each with the policy `write_paths=[OUT/a/b]`, while a thread swaps
/// `OUT/a` and the symlink `OUT/l -> TARGET` (`RENAME_EXCHANGE`), so the
/// path is a directory of the run when the runner checks it and a symlink
/// out of it when the launch opens it. The inner command writes into
/// `TARGET/b`. Prints how requests ended and whether `TARGET/b/pwn` exists.
const RACE: &str = r#"
import array, ctypes, json, os, socket, struct, sys, threading
out, target, tries, swapping = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
door = socket.socket(fileno=int(os.environ["SANDBOX_NEST_FD"]))
libc = ctypes.CDLL(None, use_errno=True)
os.makedirs(out + "/a/b")
os.symlink(target, out + "/l")
stop = False
def swap():
    while not stop:
        # renameat2(AT_FDCWD, a, AT_FDCWD, l, RENAME_EXCHANGE), x86-64 and aarch64 numbers
        nr = 316 if os.uname().machine == "x86_64" else 276
        libc.syscall(nr, -100, (out + "/a").encode(), -100, (out + "/l").encode(), 2)
t = threading.Thread(target=swap)
if swapping:
    t.start()
def recv_all(a, n):
    got = b""
    while len(got) < n:
        more = a.recv(n - len(got))
        if not more:
            raise EOFError
        got += more
    return got
def ask(argv, policy):
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    door.sendmsg([b"hello"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [b.fileno()]))])
    b.close()
    assert recv_all(a, 15) == b"sandbox-nest 1\n"
    req = dict(argv=[list(x) for x in argv], cwd=None, env=[], env_overrides=[],
               policy=policy, limits={}, allow_unlimited=True, observe_writes=False,
               require_full=False, echo_stderr=False, trusted_files=[])
    body = json.dumps(req).encode()
    a.sendmsg([struct.pack("<I", len(body)) + body], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0, 1, 2]))])
    n = struct.unpack("<I", recv_all(a, 4))[0]
    return json.loads(recv_all(a, n))
ran = outside = unopened = 0
script = "echo x > %s/b/pwn; echo x > %s/a/b/own" % (target, out)
for i in range(tries):
    r = ask([b"sh", b"-c", script.encode()], dict(write_paths=[out + "/a/b"]))
    if r["reply"] == "outcome":
        ran += 1
    elif "outside the outer run's write paths" in r["reason"]:
        outside += 1
    elif "symbolic link" in r["reason"].lower():
        unopened += 1
    else:
        print("other", r["reason"], flush=True)
    if os.path.exists(target + "/b/pwn"):
        break
stop = True
if swapping:
    t.join()
print("ran=%d outside=%d unopened=%d" % (ran, outside, unopened), flush=True)
print("escaped=%s" % os.path.exists(target + "/b/pwn"), flush=True)
print("own=%s" % os.path.exists(out + "/a/b/own"), flush=True)
"#;

/// A nested write path beneath the outer's, turned into a symlink out of
/// it between the runner's check and the launch's open of it (the command
/// controls everything beneath its write path), grants nothing outside:
/// the rule's open follows no symlink (it fails, `ELOOP`). Before the fix
/// the first request escaped. Twin: the same request without the swap runs
/// and writes to the inner write path.
#[test]
fn a_write_path_swapped_for_a_symlink_after_its_check_grants_nothing_outside() {
    for nobody in users() {
        let w = shared(&["out", "target", "target/b"]);
        let (out_dir, target) = (w.path().join("out"), w.path().join("target"));
        let race = |tries: &str, swapping: &str| {
            outer(nobody)
                .args(["run", "-w", &d(&out_dir), "--", "python3", "-c", RACE])
                .args([&d(&out_dir), &d(&target), tries, swapping])
                .output()
                .unwrap()
        };
        let out = race("60", "1");
        let ctx = format!("nobody={nobody}: {}", text(&out));
        assert!(text(&out).contains("escaped=False"), "{ctx}");
        assert!(!target.join("b/pwn").exists(), "{ctx}");
        // The swap reached the launch's open at least once (else the test
        // tried nothing): that request was refused, not run elsewhere.
        assert!(!text(&out).contains("unopened=0 "), "{ctx}");
        assert!(!text(&out).contains("other"), "{ctx}");
        // Twin: no swap, the inner write path is written, nothing outside.
        std::fs::remove_dir_all(&out_dir).unwrap();
        std::fs::create_dir(&out_dir).unwrap();
        std::fs::set_permissions(&out_dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let out = race("1", "0");
        let ctx = format!("nobody={nobody}: {}", text(&out));
        assert!(text(&out).contains("ran=1 outside=0 unopened=0"), "{ctx}");
        assert!(text(&out).contains("own=True"), "{ctx}");
        assert!(text(&out).contains("escaped=False"), "{ctx}");
    }
}

/// A secret read from a file is read-denied to the outer run by its egress
/// (not by its policy); a nested run is bounded by that too: its command
/// cannot read the file either. Before the fix it printed the value.
/// Twins: a file beside it is readable from the nested run, and the outer
/// command is refused the secret's file as well.
#[test]
fn a_nested_run_cannot_read_the_outer_runs_secret_file() {
    for nobody in users() {
        let w = shared(&["keys"]);
        let (key, beside) = (w.path().join("keys/token"), w.path().join("keys/other"));
        std::fs::write(&key, "nested-secret-valu\x65-1\n").unwrap();
        std::fs::write(&beside, "beside\n").unwrap();
        for f in [&key, &beside] {
            std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
        let script = format!(
            "cat {key}; echo outer=$?; {sb} run -- cat {key}; echo inner=$?; \
             {sb} run -- cat {beside}; echo twin=$?",
            key = d(&key),
            beside = d(&beside),
            sb = sandbox_bin().display(),
        );
        let out = outer(nobody)
            .args(["run", "-q", "--secret"])
            .arg(format!("TOKEN=file:{}@api.example.com", d(&key)))
            .args(["--allow-request", "GET https://api.example.com/**"])
            .args(["--", "sh", "-c", &script])
            .output()
            .unwrap();
        let ctx = format!("nobody={nobody}: {}", text(&out));
        assert!(!text(&out).contains("nested-secret-value-1"), "{ctx}");
        assert!(text(&out).contains("outer=1"), "{ctx}");
        assert!(text(&out).contains("inner=1"), "{ctx}");
        assert!(text(&out).contains("beside\ntwin=0"), "{ctx}");
    }
}

/// Red team R10 F1: an `O_PATH` fd opens without Landlock's check; a
/// command holding one on a file its run may not read (a read-denied file,
/// a secret's file) and handing it to a nested run as stdin got that file
/// granted to the nested command (its stdin's rule). It grants nothing
/// now: the nested `cat /proc/self/fd/0` is refused. Twin: a file the
/// command may read, handed open for reading, reads through its path.
#[test]
fn an_o_path_stdin_grants_a_nested_run_nothing() {
    const HAND: &str = r#"
import os, sys
fd = os.open(sys.argv[1], os.O_PATH if sys.argv[2] == "path" else os.O_RDONLY)
os.dup2(fd, 0)
os.execv(sys.argv[3], sys.argv[3:])
"#;
    for nobody in users() {
        let w = shared(&["denied", "ok"]);
        let (denied, ok) = (w.path().join("denied/f"), w.path().join("ok/f"));
        std::fs::write(&denied, "denied-conte\x6et\n").unwrap();
        std::fs::write(&ok, "readable\n").unwrap();
        for f in [&denied, &ok] {
            std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
        let sb = sandbox_bin().display().to_string();
        let hand = |file: &Path, how: &str| {
            format!(
                "python3 -c '{HAND}' {} {how} {sb} run -- cat /proc/self/fd/0; echo rc=$?",
                d(file)
            )
        };
        let script = format!("{}; {}", hand(&denied, "path"), hand(&ok, "read"));
        let out = outer(nobody)
            .args(["run", "-q", "--read-deny"])
            .arg(d(&w.path().join("denied")))
            .args(["--", "sh", "-c", &script])
            .output()
            .unwrap();
        let ctx = format!("nobody={nobody}: {}", text(&out));
        assert!(!text(&out).contains("denied-content"), "{ctx}");
        assert!(text(&out).contains("readable\nrc=0"), "{ctx}");
    }
}

/// Red team R11 F2: a terminal the command may read but not control (not
/// its own: its ioctls are refused to it), handed to a nested run as
/// stdin, is not controlled there either: reopened by its path it reads,
/// but a window-size ioctl is refused (it set the size of another user's
/// terminal and signalled its foreground). Twin: the open itself.
#[test]
fn a_terminal_handed_to_a_nested_run_is_not_controlled_there() {
    const HAND: &str = r#"
import os, sys
os.dup2(os.open(sys.argv[1], os.O_RDONLY | os.O_NONBLOCK), 0)
os.execv(sys.argv[2], sys.argv[2:])
"#;
    const TRY: &str = r#"
import fcntl, os, struct, termios
fd = os.open("/proc/self/fd/0", os.O_RDONLY | os.O_NONBLOCK)
print("opened")
try:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 7, 7, 0, 0))
    print("ioctl=ok")
except OSError as e:
    print("ioctl=errno%d" % e.errno)
"#;
    for nobody in users() {
        let (_master, slave) = sandbox_tests::new_pty();
        use std::os::fd::AsRawFd;
        let path = std::fs::read_link(format!("/proc/self/fd/{}", slave.as_raw_fd())).unwrap();
        if nobody {
            // SAFETY: fchown on a live fd (nobody may open it by its mode).
            assert_eq!(
                unsafe { libc::fchown(slave.as_raw_fd(), 65534, u32::MAX) },
                0
            );
        }
        let before = winsize(slave.as_raw_fd());
        let script = format!(
            "python3 -c '{HAND}' {} {} run -- python3 -c '{TRY}'",
            d(&path),
            sandbox_bin().display()
        );
        let out = outer(nobody)
            .args(["run", "-q", "--", "sh", "-c", &script])
            .output()
            .unwrap();
        let ctx = format!("nobody={nobody}: {}", text(&out));
        assert!(text(&out).contains("opened"), "{ctx}");
        assert!(text(&out).contains("ioctl=errno13"), "{ctx}");
        assert_eq!(winsize(slave.as_raw_fd()), before, "{ctx}");
    }
}

/// The terminal's window size (rows, columns).
fn winsize(fd: std::os::fd::RawFd) -> (u16, u16) {
    // SAFETY: winsize is plain data, filled by TIOCGWINSZ on a live fd.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut ws) };
    (ws.ws_row, ws.ws_col)
}

/// A nested write path inside a read denial of the outer run is refused
/// before anything runs, as a run's own policy refuses it (it used to run,
/// then its record failed to read back); twin: the outer's own write path,
/// the denial beneath it, runs and keeps the denial.
#[test]
fn a_nested_write_path_inside_the_outer_read_denial_is_refused() {
    for nobody in users() {
        let w = shared(&["ws", "ws/secret"]);
        let (ws, secret) = (w.path().join("ws"), w.path().join("ws/secret"));
        std::fs::write(secret.join("f"), "hidden\n").unwrap();
        std::fs::set_permissions(secret.join("f"), std::fs::Permissions::from_mode(0o644)).unwrap();
        let run = |inner_write: &Path| {
            let script = format!(
                "{sb} run -w {iw} -- sh -c 'echo ran; cat {f}'; echo inner=$?",
                sb = sandbox_bin().display(),
                iw = d(inner_write),
                f = d(&secret.join("f")),
            );
            outer(nobody)
                .args(["run", "-w", &d(&ws), "--read-deny", &d(&secret)])
                .args(["--", "sh", "-c", &script])
                .output()
                .unwrap()
        };
        let out = run(&secret);
        let ctx = format!("nobody={nobody}: {}", text(&out));
        assert!(text(&out).contains("inner=125"), "{ctx}");
        assert!(
            text(&out).contains("lies inside the read-denied path"),
            "{ctx}"
        );
        assert!(
            !text(&out).contains("ran\n"),
            "refused before it runs: {ctx}"
        );
        assert!(!text(&out).contains("hidden"), "{ctx}");
        let out = run(&ws);
        let ctx = format!("nobody={nobody}: {}", text(&out));
        assert!(text(&out).contains("ran\n"), "twin: {ctx}");
        assert!(
            text(&out).contains("inner=1"),
            "twin keeps the denial: {ctx}"
        );
        assert!(!text(&out).contains("hidden"), "{ctx}");
    }
}

/// Nested runs that nest again are served by the same outer runner: with a
/// count per level, a command holding 8 nested runs that each hold 8 more
/// (and so on) had the runner serve 8, 64, 512... at once. The count is
/// the whole tree's: a nested run holding one slot, its own nested runs get
/// the other 7 and the 8th of them is refused, saying so. Before the fix
/// all 8 ran. Twin: once they have ended, another nested run of a nested
/// run runs.
#[test]
fn nested_runs_of_nested_runs_count_with_them() {
    for nobody in users() {
        let w = shared(&[]);
        let dir = d(w.path());
        let sb = sandbox_bin().display().to_string();
        let inner = format!(
            "for i in 1 2 3 4 5 6 7 8; do \
               ( {sb} run -w {dir} -- sh -c \"touch {dir}/ready.\\$0; while [ ! -e {dir}/go ]; do sleep 0.05; done\" $i \
                 || touch {dir}/refused.$i ) & \
             done; \
             while [ $(ls {dir} | grep -c -e ready -e refused) -lt 8 ]; do sleep 0.05; done; \
             echo ready=$(ls {dir} | grep -c ready) refused=$(ls {dir} | grep -c refused); \
             touch {dir}/go; wait; \
             {sb} run -- true; echo after=$?"
        );
        let out = outer(nobody)
            .args(["run", "-w", &dir, "--", &sb, "run", "-w", &dir, "--"])
            .args(["sh", "-c", &inner])
            .output()
            .unwrap();
        let ctx = format!("nobody={nobody}: {}", text(&out));
        assert!(text(&out).contains("ready=7 refused=1"), "{ctx}");
        assert!(text(&out).contains("already serves 8 nested runs"), "{ctx}");
        assert!(text(&out).contains("after=0"), "twin: {ctx}");
    }
}

/// Asks for `sys.argv[2:]` run in the working directory `sys.argv[1]` (with
/// the trusted file `$TRUSTED` and the `PATH` `$NESTED_PATH`, if set) by a request made by hand (the CLI
/// sends its own working directory); prints the outer command's own read
/// of `f` there, then the runner's answer.
const CWD: &str = r#"
import array, json, os, socket, struct, sys
door = socket.socket(fileno=int(os.environ["SANDBOX_NEST_FD"]))
def recv_all(a, n):
    got = b""
    while len(got) < n:
        more = a.recv(n - len(got))
        if not more:
            raise EOFError
        got += more
    return got
a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
door.sendmsg([b"hello"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [b.fileno()]))])
b.close()
assert recv_all(a, 15) == b"sandbox-nest 1\n"
trusted = [os.environ["TRUSTED"]] if os.environ.get("TRUSTED") else []
env = [[list(b"PATH"), list(os.environ["NESTED_PATH"].encode())]] if os.environ.get("NESTED_PATH") else []
req = dict(argv=[list(x.encode()) for x in sys.argv[2:]], cwd=list(sys.argv[1].encode()),
           env=env, env_overrides=[], policy={}, limits={}, allow_unlimited=True,
           observe_writes=False, require_full=False, echo_stderr=True, trusted_files=trusted)
body = json.dumps(req).encode()
try:
    print("outer read", open(sys.argv[1] + "/f").read().strip(), flush=True)
except OSError as e:
    print("outer refused", e.strerror, flush=True)
a.sendmsg([struct.pack("<I", len(body)) + body], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0, 1, 2]))])
r = json.loads(recv_all(a, struct.unpack("<I", recv_all(a, 4))[0]))
print("answer", r.get("reason") or r["outcome"]["termination"], flush=True)
"#;

/// The runner enters the nested run's working directory for it before the
/// launch drops its capabilities: a command that is root (without
/// capabilities) named a directory beneath one its own permissions close
/// (mode 0700, another owner) and its nested command read a file there
/// (before the fix: `privy`). The directory is now entered as the command
/// would enter it (no capability), by the fd the launch then uses. Twin:
/// the same beneath an open directory works. Run as root (the owner change
/// needs it); as nobody the runner holds no capability either way.
#[test]
fn a_nested_run_enters_no_directory_its_command_cannot() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return;
    }
    for nobody in users() {
        let w = shared(&["closed", "closed/sub", "open", "open/sub"]);
        for dir in ["closed", "open"] {
            let f = w.path().join(dir).join("sub/f");
            std::fs::write(&f, format!("{dir}-privy\n")).unwrap();
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
        let closed = w.path().join("closed");
        std::os::unix::fs::chown(&closed, Some(1234), Some(1234)).unwrap();
        std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o700)).unwrap();
        let ask = |dir: &str| {
            outer(nobody)
                .args(["run", "--", "python3", "-c", CWD])
                .arg(w.path().join(dir).join("sub"))
                .args(["cat", "f"])
                .output()
                .unwrap()
        };
        let out = ask("closed");
        let ctx = format!("nobody={nobody}: {}", text(&out));
        assert!(
            text(&out).contains("outer refused Permission denied"),
            "{ctx}"
        );
        assert!(!text(&out).contains("closed-privy"), "{ctx}");
        assert!(text(&out).contains("cannot be entered"), "{ctx}");
        let out = ask("open");
        let ctx = format!("nobody={nobody}: {}", text(&out));
        assert!(text(&out).contains("outer read open-privy"), "twin: {ctx}");
        assert!(
            text(&out).contains("open-privy\nanswer {'kind': 'exited', 'code': 0}"),
            "twin: {ctx}"
        );
    }
}

/// The outer run kept every nested run's record in memory until it ended:
/// a command running nested runs one after another (about 70 a second
/// here) grew the runner by each record (up to tens of KiB with refusals)
/// for its whole timeout. The tree's first 256 are kept; every nested run
/// still gets its own record. Twin: those 256 are there, in order of
/// their end.
#[test]
fn the_outer_record_keeps_a_bounded_number_of_nested_records() {
    for nobody in users() {
        let w = shared(&[]);
        let report = w.path().join("report.json");
        let script = format!(
            "i=0; ok=0; while [ $i -lt 260 ]; do \
               {sb} run -q --report - -- true | grep -q '\"code\": 0' && ok=$((ok+1)); \
               i=$((i+1)); \
             done; echo ok=$ok",
            sb = sandbox_bin().display(),
        );
        let out = outer(nobody)
            .args(["run", "-q", "--report", &d(&report), "-w", &d(w.path())])
            .args(["--", "sh", "-c", &script])
            .output()
            .unwrap();
        let ctx = format!("nobody={nobody}: {}", text(&out));
        assert!(text(&out).contains("ok=260"), "each its own record: {ctx}");
        let record: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
        let nested = record["nested"].as_array().unwrap();
        assert_eq!(nested.len(), 256, "{ctx}");
        assert!(nested.iter().all(|n| n["argv"][0] == "true"), "{ctx}");
    }
}

/// The trusted files a nested run names are checked by the runner with
/// its capabilities: one beneath a directory the command cannot search
/// (mode 0700, another owner) told it that file's number of names (before
/// the fix: "has 2 hard links", and the run refused). Such a file, which the
/// command can neither reach nor write, is no longer checked; twin: the
/// same hard-linked file where the command can reach it is refused, as for
/// any run.
#[test]
fn a_nested_runs_trusted_files_reveal_nothing_its_command_cannot_reach() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return;
    }
    for nobody in users() {
        let w = shared(&["closed", "closed/sub", "open", "open/sub", "cwd"]);
        for dir in ["closed", "open"] {
            let f = w.path().join(dir).join("sub/f");
            std::fs::write(&f, "config\n").unwrap();
            std::fs::hard_link(&f, w.path().join(dir).join("sub/g")).unwrap();
        }
        let closed = w.path().join("closed");
        std::os::unix::fs::chown(&closed, Some(1234), Some(1234)).unwrap();
        std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o700)).unwrap();
        let ask = |dir: &str| {
            outer(nobody)
                .env("TRUSTED", w.path().join(dir).join("sub/f"))
                .args(["run", "--", "python3", "-c", CWD])
                .arg(w.path().join("cwd"))
                .arg("true")
                .output()
                .unwrap()
        };
        let out = ask("closed");
        let ctx = format!("nobody={nobody}: {}", text(&out));
        assert!(!text(&out).contains("hard links"), "{ctx}");
        assert!(
            text(&out).contains("answer {'kind': 'exited', 'code': 0}"),
            "{ctx}"
        );
        let out = ask("open");
        let ctx = format!("nobody={nobody}: {}", text(&out));
        assert!(text(&out).contains("has 2 hard links"), "twin: {ctx}");
    }
}

/// The outer command hands its nest socket to a nested run's command (as
/// its stdin): that command's processes are not the outer run's (another
/// cgroup or process group), so a hello it sends gets its connection closed
/// unanswered. Twin: the same hello from the outer command is answered.
#[test]
fn a_nest_socket_handed_to_a_nested_run_is_not_served() {
    let hello = r#"
import array, socket
door = socket.socket(fileno=0)
a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
door.sendmsg([b"hello"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [b.fileno()]))])
b.close()
print("answered" if a.recv(15) == b"sandbox-nest 1\n" else "closed", flush=True)
"#;
    for nobody in users() {
        let script = format!(
            "{sb} run -q -- python3 -c '{hello}' <&$SANDBOX_NEST_FD | sed 's/^/inner /'; \
             python3 -c '{hello}' <&$SANDBOX_NEST_FD | sed 's/^/outer /'",
            sb = sandbox_bin().display(),
        );
        let out = outer(nobody)
            .args(["run", "-q", "--", "sh", "-c", &script])
            .output()
            .unwrap();
        let ctx = format!("nobody={nobody}: {}", text(&out));
        assert!(text(&out).contains("inner closed\n"), "{ctx}");
        assert!(text(&out).contains("outer answered\n"), "twin: {ctx}");
    }
}

/// What a command can put on the way to a nested write path after its
/// check, with symlinks not followed, is a directory it moves there: never
/// one from outside its write paths (moving an entry out of a directory
/// needs the remove right there). Twin: a move within the write path works.
#[test]
fn a_directory_from_outside_cannot_be_moved_beneath_the_write_path() {
    for nobody in users() {
        let w = shared(&["ws", "ws/a", "outside", "outside/d"]);
        let (ws, outside) = (w.path().join("ws"), w.path().join("outside"));
        let script = format!(
            "mv {o}/d {ws}/d; echo moved-in=$?; mv {ws}/a {ws}/b; echo moved-within=$?",
            o = d(&outside),
            ws = d(&ws),
        );
        let out = outer(nobody)
            .args(["run", "-q", "-w", &d(&ws), "--", "sh", "-c", &script])
            .output()
            .unwrap();
        let ctx = format!("nobody={nobody}: {}", text(&out));
        assert!(!text(&out).contains("moved-in=0"), "{ctx}");
        assert!(
            outside.join("d").is_dir() && !ws.join("d").exists(),
            "{ctx}"
        );
        assert!(text(&out).contains("moved-within=0"), "twin: {ctx}");
    }
}

/// The working directory is entered through the fd the runner opened, and
/// a relative program with a slash (`./s.sh`, a script) still runs from it
/// (named through `/proc/self/fd`, its interpreter could not open it once
/// the fd is closed on exec); `pwd -P` there shows the real directory.
#[test]
fn a_nested_run_runs_a_relative_script_in_its_working_directory() {
    for nobody in users() {
        let w = shared(&["dir"]);
        let dir = w.path().join("dir");
        let script = dir.join("s.sh");
        sandbox_tests::write_for_exec(&script, "#!/bin/sh\necho script-ran \"$(pwd -P)\"\n");
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let out = outer(nobody)
            .current_dir(&dir)
            .args(["run", "-q", "--"])
            .arg(sandbox_bin())
            .args(["run", "-q", "--", "./s.sh"])
            .output()
            .unwrap();
        let ctx = format!("nobody={nobody}: {}", text(&out));
        let real = std::fs::canonicalize(&dir).unwrap();
        assert!(
            text(&out).contains(&format!("script-ran {}\n", real.display())),
            "{ctx}"
        );
        assert_eq!(out.status.code(), Some(0), "{ctx}");
    }
}

/// The program is looked up as the command would: the launch's lookup with
/// the runner's capabilities told a command that is root whether a program
/// exists beneath a directory it cannot search (before the fix: "not
/// found" for a missing one, a refused exec for one that is there), and a
/// `PATH` entry there shadowed the one the command's own exec would find.
/// Now both are "not found", and the `PATH` search finds the command's
/// program. Twin: the reachable program runs by its path.
#[test]
fn a_nested_runs_program_is_looked_up_as_its_command_would() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return;
    }
    for nobody in users() {
        let w = shared(&["closed", "closed/bin", "open", "open/bin", "cwd"]);
        for dir in ["closed", "open"] {
            let prog = w.path().join(dir).join("bin/prog");
            sandbox_tests::write_for_exec(&prog, &format!("#!/bin/sh\necho prog-{dir}\n"));
            std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let closed = w.path().join("closed");
        std::os::unix::fs::chown(&closed, Some(1234), Some(1234)).unwrap();
        std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o700)).unwrap();
        let ask = |program: &str, path: Option<String>| {
            let mut cmd = outer(nobody);
            if let Some(path) = path {
                cmd.env("NESTED_PATH", path);
            }
            cmd.args(["run", "--", "python3", "-c", CWD])
                .arg(w.path().join("cwd"))
                .arg(program)
                .output()
                .unwrap()
        };
        let there = ask(&d(&closed.join("bin/prog")), None);
        let missing = ask(&d(&closed.join("bin/none")), None);
        let answer = |out: &Output| {
            text(out)
                .lines()
                .find(|l| l.starts_with("answer"))
                .unwrap_or_default()
                .replace("prog", "PROGRAM")
                .replace("none", "PROGRAM")
        };
        let ctx = format!("nobody={nobody}: {} / {}", text(&there), text(&missing));
        assert!(!text(&there).contains("prog-closed"), "{ctx}");
        assert!(answer(&there).contains("not found"), "{ctx}");
        assert_eq!(answer(&there), answer(&missing), "{ctx}");
        let path = format!(
            "{}:{}",
            d(&closed.join("bin")),
            d(&w.path().join("open/bin"))
        );
        let out = ask("prog", Some(path));
        let ctx = format!("nobody={nobody}: {}", text(&out));
        assert!(text(&out).contains("prog-open\n"), "{ctx}");
        let out = ask(&d(&w.path().join("open/bin/prog")), None);
        let ctx = format!("nobody={nobody}: {}", text(&out));
        assert!(text(&out).contains("prog-open\n"), "twin: {ctx}");
    }
}

/// Makes `sys.argv[1]`'s 15 levels of 250-byte names (a path near
/// `PATH_MAX`), then tries to create `sys.argv[2]` files at its bottom (each
/// refused in the nested run, whose write path is elsewhere).
const REFUSE_DEEP: &str = r#"
import os, sys
d = sys.argv[1]
for i in range(15):
    d = os.path.join(d, chr(ord('a') + i) * 250)
for i in range(int(sys.argv[2])):
    try:
        os.close(os.open(os.path.join(d, "x%05d" % i), os.O_WRONLY | os.O_CREAT, 0o644))
    except OSError:
        pass
"#;

/// Red-team F2 and F4: a nested run's record was kept whole, bounded by
/// count only (256 a tree): 3000 refusals of paths near `PATH_MAX` and a
/// 100 KB argument made one record of ~12 MB (24 such runs: a 380 MB exit
/// event, 1.65 GB in the session), and a record past 4 MiB reached its
/// requester as "the request is larger than 4194304 bytes", exit 125,
/// although the command ran (and exited 3). Now the record is bounded
/// (`nest::MAX_RECORD`, beside its policy and report), saying what it left
/// out, the same for the requester, which exits as its command did.
/// Twin: a small nested run's record is whole, nothing said left out.
#[test]
fn a_nested_runs_record_is_bounded_and_says_what_it_left_out() {
    for nobody in users() {
        let w = shared(&["sub"]);
        let mut deep = w.path().join("deep");
        for i in 0..15u8 {
            deep.push(String::from(char::from(b'a' + i)).repeat(250));
        }
        std::fs::create_dir_all(&deep).unwrap();
        let mut p = deep.as_path();
        while p != w.path() {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o777)).unwrap();
            p = p.parent().unwrap();
        }
        let report = w.path().join("report.json");
        let (sb, dir) = (sandbox_bin().display().to_string(), d(w.path()));
        let big = "y".repeat(100_000);
        let script = format!(
            "{sb} run -q -w {dir}/sub -- python3 -c \"$0\" {dir}/deep 3000 {big}; echo big-rc=$?; \
             {sb} run -q -w {dir}/sub -- python3 -c \"$0\" {dir}/deep 2 small; echo small-rc=$?",
        );
        // Each exits 3 after its refusals.
        let py = format!("{REFUSE_DEEP}\nsys.exit(3)");
        let out = outer(nobody)
            .args(["run", "-q", "--report", &d(&report), "-w", &dir])
            .args(["--", "sh", "-c", &script, &py])
            .output()
            .unwrap();
        let ctx = format!("nobody={nobody}: {}", text(&out));
        assert!(text(&out).contains("big-rc=3"), "F4: it ran, exit 3: {ctx}");
        assert!(!text(&out).contains("larger than"), "{ctx}");
        assert!(text(&out).contains("small-rc=3"), "{ctx}");
        let record: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
        let nested = record["nested"].as_array().unwrap();
        assert_eq!(nested.len(), 2, "{ctx}");
        let (big_rec, small_rec) = (&nested[0], &nested[1]);
        let size = |v: &serde_json::Value| serde_json::to_string(v).unwrap().len();
        // Its policy and report are bounded by the request's bounds; the
        // rest by MAX_RECORD.
        let mut rest = big_rec.clone();
        rest["policy"] = serde_json::Value::Null;
        rest["report"] = serde_json::Value::Null;
        assert!(
            size(&rest) <= sandbox::nest::MAX_RECORD,
            "{} bytes: {ctx}",
            size(&rest)
        );
        assert!(size(big_rec) < 512 << 10, "{} bytes: {ctx}", size(big_rec));
        // What it left out, counted: the refusals (kept + left out = all
        // 3000), the argument's bytes.
        let m = &big_rec["mediation"];
        let kept = m["refused"].as_array().unwrap().len();
        assert!(kept > 0 && kept < 3000, "{kept}: {ctx}");
        assert_eq!(
            kept + m["omitted"].as_u64().unwrap() as usize,
            3000,
            "{ctx}"
        );
        let argv: Vec<&str> = big_rec["argv"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        let argv_bytes: usize = argv.iter().map(|a| a.len()).sum();
        let left_out = big_rec["omitted"]["argv_bytes"].as_u64().unwrap() as usize;
        let whole = ["python3", "-c", &py, &format!("{dir}/deep"), "3000", &big];
        assert_eq!(
            argv_bytes + left_out,
            whole.iter().map(|a| a.len()).sum::<usize>(),
            "{ctx}"
        );
        assert_eq!(big_rec["termination"]["code"], 3, "{ctx}");
        // Twin: whole.
        assert!(small_rec.get("omitted").is_none(), "{ctx}");
        assert_eq!(small_rec["argv"].as_array().unwrap().len(), 6, "{ctx}");
        assert_eq!(small_rec["argv"][5], "small", "{ctx}");
        assert_eq!(small_rec["mediation"]["omitted"], 0, "{ctx}");
        assert_eq!(
            small_rec["mediation"]["refused"].as_array().unwrap().len(),
            2,
            "{ctx}"
        );
    }
}
