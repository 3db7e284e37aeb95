//! POSIX shared memory and semaphores of the run's own (issue 42,
//! `private_shm`): a run with write paths makes new entries in `/dev/shm`
//! and uses what it made; every other entry there stays as Landlock keeps
//! it without the feature (reads per the read policy, writes `EACCES`).
//!
//! * Python's `multiprocessing.Pool(4)`, `ProcessPoolExecutor`, `Queue` and
//!   `shared_memory.SharedMemory` give the bare output under `-w W` and
//!   under workspace-write, as root and as nobody; twin: `--no-private-shm`
//!   fails with `EACCES`, as before the feature.
//! * A segment another process made (the test, outside the run) cannot be
//!   written, truncated, unlinked, renamed, replaced or linked by the run,
//!   with the errno the run gets without the feature; the run's own
//!   segment can, in the same run; bare, the foreign one can (the
//!   refusals are the sandbox's). Under `--read-deny` on it, not read.
//! * Attacks: a second thread rewrites the path while the broker resolves
//!   it (own name <-> foreign name); a symlink planted in `/dev/shm`; the
//!   run's own entry replaced by another process (the record is the
//!   inode, not the name); what the run leaves is removed at its end.

#![cfg(target_os = "linux")]

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sandbox_tests::{sandbox, sandbox_as_nobody};
use serde_json::Value;

/// The everyday workloads: Pool, ProcessPoolExecutor, Queue, SharedMemory.
const WORKLOADS: &str = r#"
import multiprocessing as m, concurrent.futures as cf
from multiprocessing import shared_memory
print(m.Pool(4).map(abs, range(-4, 4)))
with cf.ProcessPoolExecutor(4) as ex:
    print(list(ex.map(abs, range(-4, 4))))
q = m.Queue(); q.put("queued"); print(q.get())
s = shared_memory.SharedMemory(create=True, size=8192)
s.buf[:5] = b"hello"
t = shared_memory.SharedMemory(name=s.name)
print(bytes(t.buf[:5]).decode())
t.close(); s.close(); s.unlink()
"#;

/// Every change to the foreign entry `sys.argv[1]` and the same on an own
/// segment; results (errno names or "ok") as JSON on stdout.
const CHANGES: &str = r#"
import errno, json, os, sys
F, OWN, W = sys.argv[1], sys.argv[2], sys.argv[3]
def err(f):
    try:
        r = f()
        if isinstance(r, int) and r > 2:
            os.close(r)
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
def write(p):
    fd = os.open(p, os.O_RDWR)
    try:
        os.write(fd, b"run")
    finally:
        os.close(fd)
def read(p):
    with open(p, "rb") as f:
        f.read()
def ops(p, tag):
    return {
        "read": err(lambda: read(p)),
        "write": err(lambda: write(p)),
        "open_trunc": err(lambda: os.open(p, os.O_WRONLY | os.O_TRUNC)),
        "truncate": err(lambda: os.truncate(p, 1)),
        "link_shm": err(lambda: os.link(p, "/dev/shm/" + tag + "-link")),
        "link_w": err(lambda: os.link(p, W + "/" + tag + "-link")),
        "rename": err(lambda: os.rename(p, p + "-moved")),
        "unlink": err(lambda: os.unlink(p + "-moved" if os.path.exists(p + "-moved") else p)),
    }
r = {}
# Replacing the foreign entry with an own one (rename over it, link over it).
r["create_own"] = err(lambda: os.open(OWN + "-r", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600))
r["replace_by_rename"] = err(lambda: os.rename(OWN + "-r", F))
r["create_excl_over"] = err(lambda: os.open(F, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600))
r["foreign"] = ops(F, os.path.basename(OWN) + "-f")
if r["create_own"] == "ok":
    fd = os.open(OWN, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600); os.write(fd, b"own"); os.close(fd)
    r["own"] = ops(OWN, os.path.basename(OWN) + "-o")
for leftover in (OWN + "-r", "/dev/shm/" + os.path.basename(OWN) + "-o-link", W + "/" + os.path.basename(OWN) + "-o-link"):
    try:
        os.unlink(leftover)
    except OSError:
        pass
print(json.dumps(r))
"#;

/// The system interpreter (a pyenv shim under /root is not nobody's).
const PY: &str = "/usr/bin/python3";

fn python() -> bool {
    Command::new(PY)
        .arg("-c")
        .arg("import multiprocessing.shared_memory")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A fresh write path, world-writable so nobody can use it too.
fn workdir(tag: &str) -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix(&format!("sbx-shm-{tag}-"))
        .tempdir()
        .expect("tempdir");
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o777)).expect("chmod");
    // A project (it holds a git directory), so even a plain `-w` keeps its
    // protections in the broker, which then makes the run's shared memory.
    fs::create_dir(dir.path().join(".git")).expect("mkdir .git");
    dir
}

fn as_who(nobody: bool) -> Command {
    if nobody {
        sandbox_as_nobody()
    } else {
        sandbox()
    }
}

fn bare(nobody: bool) -> Command {
    if nobody {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]);
        c
    } else {
        Command::new("env")
    }
}

fn text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout {}\nstderr {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `/dev/shm` entries whose name starts with `prefix`.
fn shm_entries(prefix: &str) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(prefix))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// A foreign segment: a file in /dev/shm made by the test, owned by the
/// run's user (another process of the same user, which the sticky
/// /dev/shm lets remove it) and mode 0666, so that only the sandbox stands
/// between the run and it.
struct Foreign(PathBuf);

impl Foreign {
    fn new(name: &str, nobody: bool) -> Self {
        let p = PathBuf::from("/dev/shm").join(name);
        let _ = fs::remove_file(&p);
        fs::write(&p, b"host-segment").expect("foreign segment");
        fs::set_permissions(&p, fs::Permissions::from_mode(0o666)).expect("chmod");
        if nobody {
            std::os::unix::fs::chown(&p, Some(65534), Some(65534)).expect("chown");
        }
        Foreign(p)
    }
    fn intact(&self) -> bool {
        fs::read(&self.0).is_ok_and(|b| b == b"host-segment")
    }
}

impl Drop for Foreign {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
        let mut moved = self.0.clone().into_os_string();
        moved.push("-moved");
        let _ = fs::remove_file(moved);
    }
}

#[test]
fn python_multiprocessing_works_confined_as_bare() {
    assert!(
        python(),
        "{PY} with multiprocessing.shared_memory is needed"
    );
    for nobody in [false, true] {
        let w = workdir("mp");
        let script = w.path().join("mp.py");
        fs::write(&script, WORKLOADS).unwrap();
        let bare_out = bare(nobody).arg(PY).arg(&script).output().unwrap();
        assert!(bare_out.status.success(), "bare: {}", text(&bare_out));
        let ws = w.path().to_str().unwrap();
        let runs: [&[&str]; 2] = [
            &["run", "-w", ws, "--"],
            &["run", "--mode", "workspace-write", "--workspace", ws, "--"],
        ];
        for args in runs {
            let before = shm_entries("");
            let t = std::time::Instant::now();
            let out = as_who(nobody)
                .args(args)
                .arg(PY)
                .arg(&script)
                .output()
                .unwrap();
            eprintln!("nobody={nobody} {args:?}: {:?}", t.elapsed());
            assert!(
                out.status.success(),
                "{args:?} nobody={nobody}: {}",
                text(&out)
            );
            assert_eq!(out.stdout, bare_out.stdout, "{args:?} nobody={nobody}");
            // Nothing of the run's is left behind (Python removes its own;
            // the broker whatever is left).
            let after = shm_entries("");
            let new: Vec<_> = after
                .iter()
                .filter(|n| {
                    !before.contains(n) && (n.starts_with("sem.mp") || n.starts_with("psm_"))
                })
                .collect();
            assert!(new.is_empty(), "left in /dev/shm: {new:?}");
        }
        // Twin: without the feature, /dev/shm stays closed (EACCES).
        let out = as_who(nobody)
            .args(["run", "-w", ws, "--no-private-shm", "--", PY])
            .arg(&script)
            .output()
            .unwrap();
        assert!(!out.status.success(), "--no-private-shm: {}", text(&out));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("Permission denied"),
            "{}",
            text(&out)
        );
    }
}

fn changes(cmd: &mut Command, foreign: &Path, own: &str, w: &Path) -> Value {
    let script = w.join("changes.py");
    fs::write(&script, CHANGES).unwrap();
    let out = cmd
        .arg(PY)
        .arg(&script)
        .arg(foreign)
        .arg(format!("/dev/shm/{own}"))
        .arg(w)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out)))
}

#[test]
fn another_process_segment_cannot_be_changed_the_runs_own_can() {
    assert!(
        python(),
        "{PY} with multiprocessing.shared_memory is needed"
    );
    let pid = std::process::id();
    for nobody in [false, true] {
        let w = workdir("twin");
        let ws = w.path().to_str().unwrap().to_owned();
        let name = format!("sbx-foreign-{pid}-{nobody}");
        let own = format!("sbx-own-{pid}-{nobody}");
        let foreign = Foreign::new(&name, nobody);
        let ino = fs::metadata(&foreign.0).unwrap().ino();
        let confined = changes(
            as_who(nobody).args(["run", "-w", &ws, "--"]),
            &foreign.0,
            &own,
            w.path(),
        );
        assert!(foreign.intact(), "the foreign segment changed: {confined}");
        assert_eq!(fs::metadata(&foreign.0).unwrap().ino(), ino, "replaced");
        let f = &confined["foreign"];
        for op in [
            "write",
            "open_trunc",
            "truncate",
            "link_shm",
            "rename",
            "unlink",
        ] {
            assert_eq!(f[op], "EACCES", "foreign {op} nobody={nobody}: {confined}");
        }
        // A hard link into the write path would give it more rights: Landlock's EXDEV.
        assert_eq!(f["link_w"], "EXDEV", "{confined}");
        assert_eq!(f["read"], "ok", "reads per the read policy: {confined}");
        assert_eq!(confined["replace_by_rename"], "EACCES", "{confined}");
        assert_eq!(confined["create_excl_over"], "EEXIST", "{confined}");
        // The positive control, in the same run: its own segment.
        let o = &confined["own"];
        for op in [
            "read",
            "write",
            "open_trunc",
            "truncate",
            "link_shm",
            "rename",
            "unlink",
        ] {
            assert_eq!(o[op], "ok", "own {op} nobody={nobody}: {confined}");
        }
        assert_eq!(o["link_w"], "EXDEV", "{confined}");
        assert!(
            shm_entries(&own).is_empty(),
            "left: {:?}",
            shm_entries(&own)
        );

        // The errnos are Landlock's own: the same run without the feature
        // answers the foreign segment the same.
        let without = changes(
            as_who(nobody).args(["run", "-w", &ws, "--no-private-shm", "--"]),
            &foreign.0,
            &format!("{own}-off"),
            w.path(),
        );
        assert_eq!(without["create_own"], "EACCES", "{without}");
        assert_eq!(without["foreign"], confined["foreign"], "{without}");
        assert!(foreign.intact());

        // Read denied: not read either.
        let denied = changes(
            as_who(nobody)
                .args(["run", "-w", &ws, "--read-deny"])
                .arg(&foreign.0)
                .arg("--"),
            &foreign.0,
            &format!("{own}-rd"),
            w.path(),
        );
        assert_eq!(denied["foreign"]["read"], "EACCES", "{denied}");
        assert!(foreign.intact());
        // A read denial in /dev/shm splits the broker's grant there: the
        // feature is off (the kernel's EACCES), and nothing is left (the
        // broker's create once made the entry, failed to open it and left
        // it after the run).
        assert_eq!(denied["create_own"], "EACCES", "{denied}");
        let rd = shm_entries(&format!("{own}-rd"));
        for n in &rd {
            let _ = fs::remove_file(Path::new("/dev/shm").join(n));
        }
        assert!(rd.is_empty(), "left by the read-deny run: {rd:?}");

        // Bare twin: the same calls change it (the refusals are the sandbox's).
        let bare_foreign = Foreign::new(&format!("{name}-bare"), nobody);
        let b = changes(
            &mut bare(nobody),
            &bare_foreign.0,
            &format!("{own}-bare"),
            w.path(),
        );
        for op in [
            "write",
            "open_trunc",
            "truncate",
            "link_shm",
            "rename",
            "unlink",
        ] {
            assert_eq!(b["foreign"][op], "ok", "bare {op}: {b}");
        }
        let _ = fs::remove_file(format!("/dev/shm/{own}-bare-f-link"));
    }
}

/// Two threads: one opens (`O_RDWR|O_CREAT|O_TRUNC`, then writes) a path
/// the other flips between the run's own name and the foreign one (same
/// length), thousands of times. No fd ever reaches the foreign inode
/// writable; the own one is opened again and again (positive control).
const RACE: &str = r#"
import ctypes, os, sys, threading, json
libc = ctypes.CDLL(None, use_errno=True)
OWN, F = sys.argv[1].encode(), sys.argv[2].encode()
assert len(OWN) == len(F)
fino = os.stat(F).st_ino
buf = ctypes.create_string_buffer(OWN, len(OWN) + 1)
stop = False
def flip():
    while not stop:
        ctypes.memmove(buf, F, len(F))
        ctypes.memmove(buf, OWN, len(OWN))
t = threading.Thread(target=flip); t.start()
own_ok = foreign = refused = 0
flags = os.O_RDWR | os.O_CREAT | os.O_TRUNC
for _ in range(3000):
    fd = libc.open(buf, flags, 0o600)
    if fd < 0:
        refused += 1
        continue
    if os.fstat(fd).st_ino == fino:
        foreign += 1
    else:
        own_ok += 1
        os.write(fd, b"x")
    os.close(fd)
stop = True; t.join()
os.unlink(OWN)
print(json.dumps({"own": own_ok, "foreign": foreign, "refused": refused}))
"#;

#[test]
fn a_thread_rewriting_the_path_never_reaches_the_foreign_segment() {
    assert!(
        python(),
        "{PY} with multiprocessing.shared_memory is needed"
    );
    let pid = std::process::id();
    for nobody in [false, true] {
        let w = workdir("race");
        let ws = w.path().to_str().unwrap().to_owned();
        let foreign = Foreign::new(&format!("sbx-rf-{pid}-{}", u8::from(nobody)), nobody);
        let own = format!("/dev/shm/sbx-ro-{pid}-{}", u8::from(nobody));
        let script = w.path().join("race.py");
        fs::write(&script, RACE).unwrap();
        let out = as_who(nobody)
            .args(["run", "-w", &ws, "--", PY])
            .arg(&script)
            .arg(&own)
            .arg(&foreign.0)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out));
        let r: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(r["foreign"], 0, "{r}");
        assert!(r["own"].as_u64().unwrap() > 0, "positive control: {r}");
        assert!(foreign.intact(), "{r}");
    }
}

/// The run makes an entry, another process replaces it (unlink and a new
/// file under the same name), then the run tries the name: the new inode is
/// not the run's. A symlink planted in /dev/shm leads the run nowhere it
/// could not go already. What the run leaves is removed at its end, and a
/// name it made that now names another's file is not.
const REPLACED: &str = r#"
import errno, json, os, sys, time
OWN, GO, DONE, LINK, HOSTFILE, LEFT = sys.argv[1:7]
def err(f):
    try:
        r = f()
        if isinstance(r, int) and r > 2:
            os.close(r)
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
fd = os.open(OWN, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600); os.close(fd)
fd = os.open(LEFT, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600); os.write(fd, b"left"); os.close(fd)
r = {"own_before": err(lambda: os.open(OWN, os.O_RDWR))}
open(GO, "w").close()
for _ in range(1000):
    if os.path.exists(DONE):
        break
    time.sleep(0.01)
r["write_replaced"] = err(lambda: os.open(OWN, os.O_RDWR))
r["trunc_replaced"] = err(lambda: os.truncate(OWN, 0))
r["unlink_replaced"] = err(lambda: os.unlink(OWN))
r["symlink_write"] = err(lambda: os.open(LINK, os.O_RDWR))
r["symlink_unlink"] = err(lambda: os.unlink(LINK))
r["hostfile_write"] = err(lambda: os.open(HOSTFILE, os.O_RDWR))
print(json.dumps(r))
"#;

#[test]
fn the_record_is_the_inode_not_the_name() {
    assert!(
        python(),
        "{PY} with multiprocessing.shared_memory is needed"
    );
    let pid = std::process::id();
    for nobody in [false, true] {
        let w = workdir("repl");
        let ws = w.path().to_str().unwrap().to_owned();
        let n = u8::from(nobody);
        let own = PathBuf::from(format!("/dev/shm/sbx-rep-{pid}-{n}"));
        let left = PathBuf::from(format!("/dev/shm/sbx-left-{pid}-{n}"));
        let link = PathBuf::from(format!("/dev/shm/sbx-lnk-{pid}-{n}"));
        // A host file outside the write path, writable by anyone (mode),
        // and a symlink to it planted in /dev/shm by another user (root).
        let host = tempfile::Builder::new()
            .prefix("sbx-shm-host-")
            .tempdir()
            .unwrap();
        fs::set_permissions(host.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let hostfile = host.path().join("target");
        fs::write(&hostfile, b"host").unwrap();
        fs::set_permissions(&hostfile, fs::Permissions::from_mode(0o666)).unwrap();
        let _ = fs::remove_file(&link);
        std::os::unix::fs::symlink(&hostfile, &link).unwrap();
        let (go, done) = (w.path().join("go"), w.path().join("done"));
        let script = w.path().join("replaced.py");
        fs::write(&script, REPLACED).unwrap();
        let child = as_who(nobody)
            .args(["run", "-w", &ws, "--", PY])
            .arg(&script)
            .args([&own, &go, &done, &link, &hostfile, &left])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let t = std::time::Instant::now();
        while !go.exists() && t.elapsed().as_secs() < 20 {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(go.exists(), "the run never got going");
        // Another process replaces the run's entry.
        fs::remove_file(&own).unwrap();
        fs::write(&own, b"replaced").unwrap();
        fs::set_permissions(&own, fs::Permissions::from_mode(0o666)).unwrap();
        fs::write(&done, b"").unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", text(&out));
        let r: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(r["own_before"], "ok", "positive control: {r}");
        assert_eq!(r["write_replaced"], "EACCES", "{r}");
        assert_eq!(r["trunc_replaced"], "EACCES", "{r}");
        assert_eq!(r["unlink_replaced"], "EACCES", "{r}");
        assert_eq!(r["symlink_write"], "EACCES", "{r}");
        assert_eq!(r["symlink_unlink"], "EACCES", "{r}");
        assert_eq!(r["hostfile_write"], "EACCES", "{r}");
        assert_eq!(
            fs::read(&own).unwrap(),
            b"replaced",
            "the replacement changed"
        );
        assert_eq!(fs::read(&hostfile).unwrap(), b"host");
        assert!(fs::symlink_metadata(&link).is_ok(), "the planted link went");
        // Removed at the end: the run's own leftover; not the replacement.
        assert!(!left.exists(), "the run's leftover stayed");
        assert!(
            own.exists(),
            "another's file under the run's old name was removed"
        );
        let _ = fs::remove_file(&own);
        let _ = fs::remove_file(&link);
    }
}

/// What the filter refuses of every open is refused in `/dev/shm` too, and
/// nothing the run does there outlives it. Each refusal sits beside its
/// allowed twin in the same run:
/// * set-id bits in a creation mode (`EPERM`, no file; a confined root
///   made a set-user-ID-root file there), access mode 3 and
///   `O_RDONLY|O_TRUNC` (`EPERM`) beside a plain create (`ok`);
/// * `RENAME_WHITEOUT` (a character device the run would leave behind,
///   `EACCES` as in a run without the feature) beside a plain rename;
/// * a rename and an exchange between two names of one inode (the kernel
///   does nothing and answers 0; the record once lost both names, which
///   then stayed after the run) are `ok`, and every name is gone at the
///   end;
/// * a created fd's status flags are the caller's (no `O_NOFOLLOW` of the
///   broker's).
const FILTERED: &str = r#"
import ctypes, errno, fcntl, json, os, sys
P = sys.argv[1]
libc = ctypes.CDLL(None, use_errno=True)
def err(f):
    try:
        r = f()
        if isinstance(r, int) and r > 2:
            os.close(r)
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
def sc(*a):
    r = libc.syscall(*a)
    if r < 0:
        n = ctypes.get_errno(); raise OSError(n, os.strerror(n))
    return r
RENAME2 = {"x86_64": 316, "aarch64": 276}[os.uname().machine]
def rename2(a, b, flags):
    return sc(RENAME2, -100, a.encode(), -100, b.encode(), flags)
r = {}
r["plain"] = err(lambda: os.open(P + "-plain", os.O_RDWR | os.O_CREAT, 0o600))
r["set_id"] = err(lambda: os.open(P + "-suid", os.O_RDWR | os.O_CREAT, 0o6755))
r["set_id_exists"] = os.path.exists(P + "-suid")
r["set_id_own"] = err(lambda: os.open(P + "-plain", os.O_RDWR | os.O_CREAT, 0o4755))
r["mode3"] = err(lambda: os.open(P + "-m3", 3 | os.O_CREAT, 0o600))
r["mode3_own"] = err(lambda: os.open(P + "-plain", 3))
r["rdonly_trunc"] = err(lambda: os.open(P + "-rt", os.O_RDONLY | os.O_TRUNC | os.O_CREAT, 0o600))
r["rdonly_trunc_own"] = err(lambda: os.open(P + "-plain", os.O_RDONLY | os.O_TRUNC))
fd = libc.open((P + "-fl").encode(), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
r["status_flags"] = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_NOFOLLOW
os.close(fd)
r["rename"] = err(lambda: rename2(P + "-plain", P + "-renamed", 0))
r["whiteout"] = err(lambda: rename2(P + "-renamed", P + "-wo", 4))
r["whiteout_left"] = os.path.lexists(P + "-renamed") and not os.path.isfile(P + "-renamed")
r["link"] = err(lambda: os.link(P + "-renamed", P + "-second"))
r["rename_same_inode"] = err(lambda: os.rename(P + "-renamed", P + "-second"))
r["exchange_same_inode"] = err(lambda: rename2(P + "-renamed", P + "-second", 2))
print(json.dumps(r))
"#;

#[test]
fn the_filters_refusals_hold_in_dev_shm_and_nothing_outlives_the_run() {
    assert!(
        python(),
        "{PY} with multiprocessing.shared_memory is needed"
    );
    let pid = std::process::id();
    for nobody in [false, true] {
        let w = workdir("filt");
        let ws = w.path().to_str().unwrap().to_owned();
        let prefix = format!("sbx-filt-{pid}-{}", u8::from(nobody));
        let script = w.path().join("filtered.py");
        fs::write(&script, FILTERED).unwrap();
        let out = as_who(nobody)
            .args(["run", "-w", &ws, "--", PY])
            .arg(&script)
            .arg(format!("/dev/shm/{prefix}"))
            .output()
            .unwrap();
        let left = shm_entries(&prefix);
        for name in &left {
            let _ = fs::remove_file(Path::new("/dev/shm").join(name));
        }
        assert!(out.status.success(), "{}", text(&out));
        let r: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(r["plain"], "ok", "positive control: {r}");
        assert_eq!(r["set_id"], "EPERM", "{r}");
        assert_eq!(r["set_id_exists"], false, "{r}");
        assert_eq!(r["set_id_own"], "EPERM", "{r}");
        assert_eq!(r["mode3"], "EPERM", "{r}");
        assert_eq!(r["mode3_own"], "EPERM", "{r}");
        assert_eq!(r["rdonly_trunc"], "EPERM", "{r}");
        assert_eq!(r["rdonly_trunc_own"], "EPERM", "{r}");
        assert_eq!(r["status_flags"], 0, "{r}");
        assert_eq!(r["rename"], "ok", "positive control: {r}");
        assert_eq!(r["whiteout"], "EACCES", "{r}");
        assert_eq!(r["whiteout_left"], false, "{r}");
        assert_eq!(r["link"], "ok", "positive control: {r}");
        assert_eq!(r["rename_same_inode"], "ok", "{r}");
        assert_eq!(r["exchange_same_inode"], "ok", "{r}");
        assert!(left.is_empty(), "left in /dev/shm after the run: {left:?}");
    }
}

/// The run's own segment is memory charged to the run: under `--memory 64M`
/// filling a 200 MiB segment ends the run by the limit, and the segment is
/// gone afterwards. Twin: the same script with a 16 MiB segment prints its
/// line and exits 0. Root (the limit needs a cgroup of the run's own).
#[test]
fn the_memory_limit_holds_the_runs_shared_memory() {
    if unsafe { libc::geteuid() } != 0 {
        sandbox_tests::cannot_do_its_job(
            "the_memory_limit_holds_the_runs_shared_memory",
            "not root: no cgroup for --memory",
        );
        return;
    }
    let dir = workdir("mem");
    let ws = dir.path().to_str().unwrap();
    let script = |mib: u32, name: &str| {
        format!(
            "from multiprocessing import shared_memory as s\n\
             m = s.SharedMemory(name='{name}', create=True, size={mib} << 20)\n\
             for i in range({mib}): m.buf[i << 20:(i + 1) << 20] = b'x' * (1 << 20)\n\
             print('filled')\n\
             m.close(); m.unlink()\n"
        )
    };
    let run = |code: &str| {
        sandbox()
            .args([
                "run", "-w", ws, "--memory", "64M", "--", "python3", "-c", code,
            ])
            .current_dir(dir.path())
            .output()
            .unwrap()
    };
    let name = format!("sbx-mem-{}", std::process::id());
    let out = run(&script(200, &name));
    assert_ne!(out.status.code(), Some(0), "{}", text(&out));
    assert!(!String::from_utf8_lossy(&out.stdout).contains("filled"));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("memory limit"),
        "{}",
        text(&out)
    );
    assert!(!Path::new("/dev/shm").join(&name).exists(), "left behind");
    // Twin: a segment within the limit.
    let out = run(&script(16, &name));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("filled"));
}

/// The mode, owner and times of the run's own segment `sys.argv[1]` (made
/// here), then of the foreign `sys.argv[2]`; results as JSON.
const METADATA: &str = r#"
import errno, json, os, subprocess, sys
OWN, F = sys.argv[1], sys.argv[2]
def err(f):
    try:
        f()
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
r = {}
fd = os.open(OWN, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
r["fchmod"] = err(lambda: os.fchmod(fd, 0o640))
r["chmod"] = err(lambda: os.chmod(OWN, 0o644))
r["mode"] = oct(os.stat(OWN).st_mode & 0o7777)
r["utime_now"] = err(lambda: os.utime(OWN))
r["utime_set"] = err(lambda: os.utime(OWN, (1000, 2000)))
r["futime"] = err(lambda: os.utime(fd, (3000, 4000)))
r["mtime"] = os.stat(OWN).st_mtime
r["fchown_self"] = err(lambda: os.fchown(fd, os.getuid(), os.getgid()))
r["chown_self"] = err(lambda: os.chown(OWN, -1, os.getgid()))
os.close(fd)
r["touch_new"] = subprocess.run(["touch", OWN + "-touched"]).returncode
r["touched"] = os.path.exists(OWN + "-touched")
err(lambda: os.unlink(OWN + "-touched"))
err(lambda: os.unlink(OWN))
r["foreign_chmod"] = err(lambda: os.chmod(F, 0o600))
r["foreign_utime"] = err(lambda: os.utime(F, (1, 1)))
print(json.dumps(r))
"#;

/// Red-team O1 (deputy != kernel): `fchmod`, `chmod`, `utime` on the run's
/// own segment were refused (EPERM, recorded outside the write paths),
/// where the kernel allows them (`touch /dev/shm/x` made x, then failed).
/// Differential: the same calls bare and confined give the same answers
/// and the same mode and times, as root and as nobody. Twin (deny): on a
/// foreign segment (the test's) the run is still refused, where bare the
/// same user may.
#[test]
fn the_runs_own_segment_takes_mode_owner_and_times_as_bare() {
    assert!(python(), "{PY} is needed");
    let pid = std::process::id();
    for nobody in [false, true] {
        let w = workdir("meta");
        let ws = w.path().to_str().unwrap().to_owned();
        let script = w.path().join("meta.py");
        fs::write(&script, METADATA).unwrap();
        let own = format!("/dev/shm/sbx-meta-{pid}-{nobody}");
        let foreign = Foreign::new(&format!("sbx-meta-foreign-{pid}-{nobody}"), nobody);
        let run = |cmd: &mut Command| -> Value {
            let out = cmd
                .arg(PY)
                .arg(&script)
                .arg(&own)
                .arg(&foreign.0)
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", text(&out));
            serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out)))
        };
        let bare = run(&mut bare(nobody));
        let confined = run(as_who(nobody).args(["run", "-w", &ws, "--"]));
        let ctx = format!("nobody={nobody}\nbare     {bare}\nconfined {confined}");
        for key in [
            "fchmod",
            "chmod",
            "mode",
            "utime_now",
            "utime_set",
            "futime",
            "mtime",
            "fchown_self",
            "chown_self",
            "touch_new",
            "touched",
        ] {
            assert_eq!(confined[key], bare[key], "{key}: {ctx}");
        }
        assert_eq!(bare["fchmod"], "ok", "{ctx}");
        assert_eq!(bare["mtime"], 4000.0, "{ctx}");
        assert_eq!(bare["touch_new"], 0, "{ctx}");
        // Twin: the foreign segment, which bare the same user may change.
        assert_eq!(bare["foreign_chmod"], "ok", "{ctx}");
        assert_ne!(confined["foreign_chmod"], "ok", "{ctx}");
        assert_ne!(confined["foreign_utime"], "ok", "{ctx}");
        assert!(shm_entries(&format!("sbx-meta-{pid}")).is_empty(), "{ctx}");
    }
}
