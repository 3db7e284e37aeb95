//! An unlinked object handed in from outside the write paths is not the
//! run's (issue 39): the host makes an `O_TMPFILE` in a directory outside `W`
//! (or holds a file there open and deletes it) and hands it to the run as
//! stdout or stdin. `fchmod`, `fchown` (to the caller's own ids), `futimens`,
//! `fsetxattr` (a `user.*` attribute, and a POSIX ACL that grants another
//! uid write access) and `fremovexattr` are refused exactly as on the named
//! twin (a named file outside `W`), and the host sees no change, also once it
//! links the file into place. Beside each, its twin: the same objects made
//! inside `W` (by the host, and by the run itself: `O_TMPFILE`, and the
//! `open; unlink; fchmod` of ordinary tools) are changed. One made in a
//! write-deny path is refused. Bare, the outside objects are changed (the
//! refusals are the sandbox's), as root and as nobody.

#![cfg(target_os = "linux")]

use std::ffi::CString;
use std::fs::{self, File};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

use sandbox_tests::sandbox_bin;
use serde_json::Value;

/// Every fd-form metadata change on stdin and stdout (the handed objects),
/// and on an `O_TMPFILE` and an unlinked file the run makes in `W` itself.
/// Results go to `W/<tag>.json`.
const CHANGES: &str = r#"
import errno, json, os, struct, sys
W, TAG = sys.argv[1], sys.argv[2]
# A POSIX access ACL granting uid 12345 read and write.
ACL = struct.pack("<I", 2) + b"".join(struct.pack("<HHI", t, p, i) for t, p, i in [
    (0x01, 6, 0xFFFFFFFF), (0x02, 6, 12345), (0x04, 4, 0xFFFFFFFF),
    (0x10, 6, 0xFFFFFFFF), (0x20, 4, 0xFFFFFFFF)])
def err(f):
    try:
        f()
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
def changes(fd):
    return {
        "fchmod": err(lambda: os.fchmod(fd, 0o640)),
        "fchown": err(lambda: os.fchown(fd, os.geteuid(), os.getegid())),
        "futimens": err(lambda: os.utime(fd)),
        "fsetxattr": err(lambda: os.setxattr(fd, "user.run", b"v")),
        "acl": err(lambda: os.setxattr(fd, "system.posix_acl_access", ACL)),
        "fremovexattr": err(lambda: os.removexattr(fd, "user.host")),
    }
r = {"stdin": changes(0), "stdout": changes(1)}
own = os.open(W, os.O_TMPFILE | os.O_RDWR, 0o600)
os.setxattr(own, "user.host", b"x")
r["own_tmpfile"] = changes(own)
own = os.open(W + "/own-" + TAG, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
os.unlink(W + "/own-" + TAG)
os.setxattr(own, "user.host", b"x")
r["own_unlinked"] = changes(own)
json.dump(r, open(W + "/" + TAG + ".json", "w"))
"#;

/// The changes the script makes, each must be refused or done as a whole.
const CALLS: [&str; 6] = [
    "fchmod",
    "fchown",
    "futimens",
    "fsetxattr",
    "acl",
    "fremovexattr",
];

#[derive(Clone, Copy, Debug, PartialEq)]
enum Who {
    Root,
    Nobody,
}

impl Who {
    fn uid(self) -> u32 {
        match self {
            Who::Root => 0,
            Who::Nobody => 65534,
        }
    }
}

struct Scene {
    _dir: tempfile::TempDir,
    w: PathBuf,
    outside: PathBuf,
    script: PathBuf,
}

fn scene() -> Scene {
    let dir = tempfile::tempdir().unwrap();
    let base = fs::canonicalize(dir.path()).unwrap();
    let w = base.join("w");
    let outside = base.join("outside");
    fs::create_dir_all(w.join("deny")).unwrap();
    fs::create_dir_all(&outside).unwrap();
    let script = base.join("changes.py");
    fs::write(&script, CHANGES).unwrap();
    for p in [&base, &w, &w.join("deny"), &outside] {
        fs::set_permissions(p, fs::Permissions::from_mode(0o777)).unwrap();
    }
    fs::set_permissions(&script, fs::Permissions::from_mode(0o644)).unwrap();
    Scene {
        _dir: dir,
        w,
        outside,
        script,
    }
}

fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

fn owned(fd: i32, what: &str) -> OwnedFd {
    assert!(fd >= 0, "{what}: {}", std::io::Error::last_os_error());
    // SAFETY: a fresh fd of our own.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// How the host made the object it hands in.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Made {
    /// `O_TMPFILE` in the directory (never named).
    Tmpfile,
    /// Named there, opened, then unlinked.
    Deleted,
    /// Named there, and it keeps its name (the named twin).
    Named,
}

/// An object the host makes in `dir`, owned by `who` (so only the sandbox
/// stands between the run and a change), with old times and a `user.host`
/// attribute: every change would show.
fn host_object(dir: &Path, made: Made, who: Who) -> OwnedFd {
    let fd = match made {
        // SAFETY: plain open of an unnamed file in `dir`.
        Made::Tmpfile => owned(
            unsafe {
                libc::open(
                    cstr(dir).as_ptr(),
                    libc::O_TMPFILE | libc::O_RDWR | libc::O_CLOEXEC,
                    0o644,
                )
            },
            "O_TMPFILE",
        ),
        Made::Deleted | Made::Named => {
            static N: AtomicUsize = AtomicUsize::new(0);
            let n = N.fetch_add(1, Ordering::Relaxed);
            let name = dir.join(format!("named-{}-{n}", who.uid()));
            let fd = owned(
                // SAFETY: plain open of a new file.
                unsafe {
                    libc::open(
                        cstr(&name).as_ptr(),
                        libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
                        0o644,
                    )
                },
                "named",
            );
            if made == Made::Deleted {
                fs::remove_file(&name).unwrap();
            }
            fd
        }
    };
    let raw = fd.as_raw_fd();
    let old = [libc::timespec {
        tv_sec: 1_000_000_000,
        tv_nsec: 0,
    }; 2];
    // SAFETY: plain syscalls on our own fd with live arguments.
    unsafe {
        assert_eq!(libc::fchmod(raw, 0o644), 0);
        assert_eq!(libc::fchown(raw, who.uid(), who.uid()), 0);
        assert_eq!(
            libc::fsetxattr(raw, c"user.host".as_ptr(), b"x".as_ptr().cast(), 1, 0),
            0,
            "user.* xattrs on {}: {}",
            dir.display(),
            std::io::Error::last_os_error()
        );
        assert_eq!(libc::futimens(raw, old.as_ptr()), 0);
    }
    fd
}

/// What any metadata change would alter: mode, owner, times (ctime too:
/// every change sets it) and every extended attribute with its value.
#[derive(Debug, PartialEq)]
struct Seen {
    mode: u32,
    owner: (u32, u32),
    times: [i64; 6],
    xattrs: Vec<(Vec<u8>, Vec<u8>)>,
}

fn seen(fd: &OwnedFd) -> Seen {
    let raw = fd.as_raw_fd();
    // SAFETY: stat is plain data; fstat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: our own fd and a live out-pointer.
    assert_eq!(unsafe { libc::fstat(raw, &mut st) }, 0);
    let mut names = vec![0u8; 4096];
    // SAFETY: our own fd and a live buffer of that length.
    let n = unsafe { libc::flistxattr(raw, names.as_mut_ptr().cast(), names.len()) };
    assert!(n >= 0);
    names.truncate(n as usize);
    let mut xattrs: Vec<(Vec<u8>, Vec<u8>)> = names
        .split(|&b| b == 0)
        .filter(|n| !n.is_empty())
        .map(|name| {
            let c = CString::new(name).unwrap();
            let mut value = vec![0u8; 4096];
            // SAFETY: our own fd, a NUL-terminated name and a live buffer.
            let n =
                unsafe { libc::fgetxattr(raw, c.as_ptr(), value.as_mut_ptr().cast(), value.len()) };
            assert!(n >= 0);
            value.truncate(n as usize);
            (name.to_vec(), value)
        })
        .collect();
    xattrs.sort();
    Seen {
        mode: st.st_mode,
        owner: (st.st_uid, st.st_gid),
        times: [
            st.st_atime,
            st.st_atime_nsec,
            st.st_mtime,
            st.st_mtime_nsec,
            st.st_ctime,
            st.st_ctime_nsec,
        ],
        xattrs,
    }
}

fn has_xattr(s: &Seen, name: &str) -> bool {
    s.xattrs.iter().any(|(n, _)| n == name.as_bytes())
}

/// How the script runs: confined (with a write-deny path beneath `W` or
/// without), or bare.
#[derive(Clone, Copy, Debug, PartialEq)]
enum How {
    Write,
    WriteDeny,
    Bare,
}

/// Runs [`CHANGES`] as `who` with `stdin` and `stdout` handed in; its results.
fn run(s: &Scene, how: How, who: Who, tag: &str, stdin: &OwnedFd, stdout: &OwnedFd) -> Value {
    let mut cmd = match who {
        Who::Root => Command::new("/usr/bin/env"),
        Who::Nobody => {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]);
            c
        }
    };
    let w = s.w.to_str().unwrap();
    if how != How::Bare {
        cmd.arg(sandbox_bin()).args(["run", "-w", w]);
        if how == How::WriteDeny {
            cmd.arg("--write-deny").arg(s.w.join("deny"));
        }
        cmd.arg("--");
    }
    cmd.arg("/usr/bin/python3")
        .arg(&s.script)
        .arg(&s.w)
        .arg(tag)
        .env_remove("SANDBOX_CONFIG")
        .env("XDG_CONFIG_HOME", "/nonexistent/sandbox-tests-config")
        // Outside W: a home inside it would add write-denied config directories.
        .env("HOME", s.w.parent().unwrap())
        .env_remove("XDG_RUNTIME_DIR")
        .current_dir(&s.w)
        .stdin(Stdio::from(File::from(stdin.try_clone().unwrap())))
        .stdout(Stdio::from(File::from(stdout.try_clone().unwrap())));
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{how:?} {who:?} {tag}: {:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let result = fs::read_to_string(s.w.join(format!("{tag}.json")))
        .unwrap_or_else(|e| panic!("{how:?} {who:?} {tag}: no result ({e})"));
    serde_json::from_str(&result).unwrap()
}

#[track_caller]
fn all(r: &Value, fd: &str, want: &str, ctx: &str) {
    for call in CALLS {
        assert_eq!(r[fd][call], want, "{ctx}: {fd} {call}: {r}");
    }
}

/// Asserts the host sees no change at all on `fd` since `before`.
#[track_caller]
fn untouched(fd: &OwnedFd, before: &Seen, ctx: &str) {
    assert_eq!(&seen(fd), before, "{ctx}: the host's object changed");
}

/// Asserts every change landed on `fd`.
#[track_caller]
fn changed(fd: &OwnedFd, before: &Seen, ctx: &str) {
    let after = seen(fd);
    // The ACL sets the mode bits last: its owner (rw), mask (rw), other (r).
    assert_eq!(after.mode & 0o7777, 0o664, "{ctx}: {after:?}");
    assert_ne!(after.times, before.times, "{ctx}");
    assert!(has_xattr(&after, "user.run"), "{ctx}: {after:?}");
    assert!(has_xattr(&after, "system.posix_acl_access"), "{ctx}");
    assert!(!has_xattr(&after, "user.host"), "{ctx}");
}

/// Gives the host's `O_TMPFILE` its name at `at`, as a host that made it
/// to write a file into place does.
fn link_into_place(fd: &OwnedFd, at: &Path) {
    let from = CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap();
    // SAFETY: linkat with NUL-terminated paths.
    let rc = unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            cstr(at).as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    };
    assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
}

fn check(who: Who) {
    let s = scene();
    let ctx = format!("{who:?}");

    // 1. Handed in from outside W: an O_TMPFILE as stdout, a deleted file
    // as stdin. Refused as the named twin is (2), nothing changes, and the
    // file linked into place carries nothing either.
    let tmp_out = host_object(&s.outside, Made::Tmpfile, who);
    let del_out = host_object(&s.outside, Made::Deleted, who);
    let (tmp_before, del_before) = (seen(&tmp_out), seen(&del_out));
    let r = run(&s, How::Write, who, "outside", &del_out, &tmp_out);
    let outside_errnos = r.clone();
    all(&r, "stdout", "EPERM", &format!("{ctx} O_TMPFILE outside"));
    all(&r, "stdin", "EPERM", &format!("{ctx} deleted file outside"));
    untouched(&tmp_out, &tmp_before, &format!("{ctx} O_TMPFILE outside"));
    untouched(
        &del_out,
        &del_before,
        &format!("{ctx} deleted file outside"),
    );
    // The run's own objects in W are its own, whatever it was handed.
    all(
        &r,
        "own_tmpfile",
        "ok",
        &format!("{ctx} the run's O_TMPFILE"),
    );
    all(
        &r,
        "own_unlinked",
        "ok",
        &format!("{ctx} the run's unlinked file"),
    );
    let placed = s.outside.join("placed");
    link_into_place(&tmp_out, &placed);
    assert_eq!(
        fs::metadata(&placed).unwrap().permissions().mode() & 0o7777,
        0o644,
        "{ctx}"
    );
    // Its new name changed its link count and ctime, nothing else.
    let placed_seen = seen(&tmp_out);
    assert_eq!(
        (placed_seen.mode, placed_seen.owner, &placed_seen.xattrs),
        (tmp_before.mode, tmp_before.owner, &tmp_before.xattrs),
        "{ctx} O_TMPFILE placed"
    );
    assert_eq!(placed_seen.times[..4], tmp_before.times[..4], "{ctx}");

    // 2. The named twin: a named file outside W, handed in the same way.
    let named = host_object(&s.outside, Made::Named, who);
    let null = OwnedFd::from(File::open("/dev/null").unwrap());
    let named_before = seen(&named);
    let r = run(&s, How::Write, who, "named", &null, &named);
    all(&r, "stdout", "EPERM", &format!("{ctx} named file outside"));
    untouched(&named, &named_before, &format!("{ctx} named file outside"));
    assert_eq!(r["stdout"], outside_errnos["stdout"], "{ctx}");
    assert_eq!(r["stdout"], outside_errnos["stdin"], "{ctx}");

    // 3. The twins, made by the host inside W: changed.
    let tmp_in = host_object(&s.w, Made::Tmpfile, who);
    let del_in = host_object(&s.w, Made::Deleted, who);
    let (tmp_before, del_before) = (seen(&tmp_in), seen(&del_in));
    let r = run(&s, How::Write, who, "inside", &del_in, &tmp_in);
    all(&r, "stdout", "ok", &format!("{ctx} O_TMPFILE in W"));
    all(&r, "stdin", "ok", &format!("{ctx} deleted file in W"));
    changed(&tmp_in, &tmp_before, &format!("{ctx} O_TMPFILE in W"));
    changed(&del_in, &del_before, &format!("{ctx} deleted file in W"));

    // 4. Under a write-deny path beneath W: an O_TMPFILE made in it is
    // refused, one made beside it in W is changed.
    let tmp_denied = host_object(&s.w.join("deny"), Made::Tmpfile, who);
    let tmp_beside = host_object(&s.w, Made::Tmpfile, who);
    let (denied_before, beside_before) = (seen(&tmp_denied), seen(&tmp_beside));
    let r = run(&s, How::WriteDeny, who, "deny", &tmp_beside, &tmp_denied);
    all(
        &r,
        "stdout",
        "EPERM",
        &format!("{ctx} O_TMPFILE in a denied path"),
    );
    all(&r, "stdin", "ok", &format!("{ctx} O_TMPFILE beside it"));
    untouched(&tmp_denied, &denied_before, &format!("{ctx} denied"));
    changed(&tmp_beside, &beside_before, &format!("{ctx} beside"));
    all(
        &r,
        "own_tmpfile",
        "ok",
        &format!("{ctx} the run's O_TMPFILE"),
    );
    all(
        &r,
        "own_unlinked",
        "ok",
        &format!("{ctx} the run's unlinked file"),
    );

    // 5. Bare, the same script changes the outside objects: the refusals
    // above are the sandbox's, not the kernel's.
    let tmp_out = host_object(&s.outside, Made::Tmpfile, who);
    let del_out = host_object(&s.outside, Made::Deleted, who);
    let (tmp_before, del_before) = (seen(&tmp_out), seen(&del_out));
    let r = run(&s, How::Bare, who, "bare", &del_out, &tmp_out);
    all(&r, "stdout", "ok", &format!("{ctx} bare O_TMPFILE outside"));
    all(
        &r,
        "stdin",
        "ok",
        &format!("{ctx} bare deleted file outside"),
    );
    changed(
        &tmp_out,
        &tmp_before,
        &format!("{ctx} bare O_TMPFILE outside"),
    );
    changed(
        &del_out,
        &del_before,
        &format!("{ctx} bare deleted file outside"),
    );
}

#[test]
fn a_handed_in_unlinked_object_is_not_the_runs_as_root() {
    check(Who::Root);
}

#[test]
fn a_handed_in_unlinked_object_is_not_the_runs_as_nobody() {
    check(Who::Nobody);
}
