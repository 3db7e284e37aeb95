//! Brokered xattr reads: refused beneath a read-deny path (wherever it lies),
//! answered like the kernel elsewhere, with the caller's credentials.
#![cfg(target_os = "linux")]

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use crate::common::*;
use sandbox_broker::{BrokerDecision, BrokerLog, BrokerRules, Refusal};

/// What one xattr call returned: its value, errno, and the caller's buffer after it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Got {
    rc: isize,
    errno: i32,
    buf: Vec<u8>,
}

const BUF: usize = 64;
/// The buffer's fill before the call, to see what was written.
const FILL: u8 = 0xAA;

/// One xattr call writing into `buf` (64 bytes); async-signal-safe.
type Call<'a> = &'a dyn Fn(*mut libc::c_void) -> isize;
type BoxedCall<'a> = Box<dyn Fn(*mut libc::c_void) -> isize + 'a>;

fn run_call(call: Call<'_>) -> Got {
    let mut buf = [FILL; BUF];
    let rc = call(buf.as_mut_ptr().cast());
    let errno = if rc < 0 { errno() } else { 0 };
    Got {
        rc,
        errno,
        buf: buf.to_vec(),
    }
}

/// Runs `call` in a confined child (after `setup`, e.g. dropping
/// capabilities) with the xattr reads routed to the broker.
fn brokered(rules: BrokerRules, setup: fn() -> i32, call: Call<'_>) -> (Got, BrokerLog) {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two fds.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: fresh fds.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let wfd = w.as_raw_fd();
    let run = confined_reads(rules, move || {
        let rc = setup();
        if rc != 0 {
            return 90 + rc;
        }
        let mut buf = [FILL; BUF];
        let rc = call(buf.as_mut_ptr().cast());
        let e = if rc < 0 { errno() } else { 0 };
        let mut out = [0u8; 12 + BUF];
        out[..8].copy_from_slice(&(rc as i64).to_ne_bytes());
        out[8..12].copy_from_slice(&e.to_ne_bytes());
        out[12..].copy_from_slice(&buf);
        // SAFETY: one write of a live buffer (fits the pipe, so it is atomic).
        let n = unsafe { libc::write(wfd, out.as_ptr().cast(), out.len()) };
        if n == out.len() as isize {
            0
        } else {
            89
        }
    });
    drop(w);
    assert_eq!(run.code, 0, "child failed; {}", run.log.explain(5));
    let mut out = [0u8; 12 + BUF];
    // SAFETY: reading into a live buffer.
    let n = unsafe { libc::read(r.as_raw_fd(), out.as_mut_ptr().cast(), out.len()) };
    assert_eq!(n, out.len() as isize);
    let mut rc = [0u8; 8];
    rc.copy_from_slice(&out[..8]);
    let mut e = [0u8; 4];
    e.copy_from_slice(&out[8..12]);
    let got = Got {
        rc: i64::from_ne_bytes(rc) as isize,
        errno: i32::from_ne_bytes(e),
        buf: out[12..].to_vec(),
    };
    (got, run.log)
}

fn untouched() -> Vec<u8> {
    vec![FILL; BUF]
}

/// The tree: `D` (read-denied) with `D/f` and `D/sub` carrying user.k;
/// `plain` (user.k = "value"), `bare` (no attribute), and `lnk -> D/f`, all
/// in `dir`.
struct Tree {
    d: PathBuf,
    plain: PathBuf,
    bare: PathBuf,
    lnk: PathBuf,
}

fn tree(fx: &Fixture, d: &Path, dir: &Path) -> Tree {
    std::fs::create_dir(d).expect("mkdir D");
    std::fs::create_dir(d.join("sub")).expect("mkdir D/sub");
    let f = fx.file(&d.join("f"), 0o644);
    set_xattr(&f, "user.k", b"value");
    set_xattr(&d.join("sub"), "user.k", b"value");
    set_xattr(d, "user.k", b"value");
    let plain = fx.file(&dir.join("plain"), 0o644);
    set_xattr(&plain, "user.k", b"value");
    let bare = fx.file(&dir.join("bare"), 0o644);
    let lnk = dir.join("lnk");
    std::os::unix::fs::symlink(&f, &lnk).expect("symlink");
    Tree {
        d: d.to_path_buf(),
        plain,
        bare,
        lnk,
    }
}

fn getxattr<'a>(
    path: &'a CString,
    name: &'a CString,
    size: usize,
) -> impl Fn(*mut libc::c_void) -> isize + 'a {
    // SAFETY (child): one syscall; the buffer is 64 bytes and size says how many may be written.
    move |buf| unsafe { libc::getxattr(path.as_ptr(), name.as_ptr(), buf, size) }
}

fn lgetxattr<'a>(
    path: &'a CString,
    name: &'a CString,
    size: usize,
) -> impl Fn(*mut libc::c_void) -> isize + 'a {
    // SAFETY (child): as getxattr.
    move |buf| unsafe { libc::lgetxattr(path.as_ptr(), name.as_ptr(), buf, size) }
}

fn listxattr(path: &CString, size: usize) -> impl Fn(*mut libc::c_void) -> isize + '_ {
    // SAFETY (child): as getxattr.
    move |buf| unsafe { libc::listxattr(path.as_ptr(), buf.cast(), size) }
}

fn llistxattr(path: &CString, size: usize) -> impl Fn(*mut libc::c_void) -> isize + '_ {
    // SAFETY (child): as getxattr.
    move |buf| unsafe { libc::llistxattr(path.as_ptr(), buf.cast(), size) }
}

/// Opens `path` O_RDONLY (a directory too), then f{get,list}xattr on the fd.
fn by_fd<'a>(
    path: &'a CString,
    name: Option<&'a CString>,
    size: usize,
) -> impl Fn(*mut libc::c_void) -> isize + 'a {
    move |buf| {
        // SAFETY (child): open + one syscall + close.
        unsafe {
            let fd = libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return -1;
            }
            let rc = match name {
                Some(n) => libc::fgetxattr(fd, n.as_ptr(), buf, size),
                None => libc::flistxattr(fd, buf.cast(), size),
            };
            let e = errno();
            libc::close(fd);
            *libc::__errno_location() = e;
            rc
        }
    }
}

/// getxattr on `/proc/self/fd/N` of `path` opened O_RDONLY (fd < 100).
fn via_proc<'a>(path: &'a CString, name: &'a CString) -> impl Fn(*mut libc::c_void) -> isize + 'a {
    move |buf| {
        let mut p = *b"/proc/self/fd/\0\0\0\0";
        // SAFETY (child): open + one syscall.
        unsafe {
            let fd = libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
            if !(0..100).contains(&fd) {
                return -1;
            }
            p[14] = b'0' + (fd / 10) as u8;
            p[15] = b'0' + (fd % 10) as u8;
            libc::getxattr(p.as_ptr().cast(), name.as_ptr(), buf, BUF)
        }
    }
}

fn refused_read_deny(log: &BrokerLog) -> bool {
    log.records.iter().any(|r| {
        r.decision
            == BrokerDecision::Refused {
                reason: Refusal::ReadDenyPath,
            }
    })
}

fn read_deny_case(inside_write_path: bool) {
    let fx = Fixture::with_user_xattrs();
    let parent = if inside_write_path { &fx.w } else { &fx.o };
    let t = tree(&fx, &parent.join("D"), parent);
    let rules = || fx.read_deny_rules(&[&t.d]);
    let k = CString::new("user.k").unwrap();
    let (df, dsub, d) = (cstr(&t.d.join("f")), cstr(&t.d.join("sub")), cstr(&t.d));
    let (plain, lnk) = (cstr(&t.plain), cstr(&t.lnk));
    let value = {
        let mut v = b"value".to_vec();
        v.resize(BUF, FILL);
        v
    };
    let list = {
        let mut v = b"user.k\0".to_vec();
        v.resize(BUF, FILL);
        v
    };
    let ok_value = Got {
        rc: 5,
        errno: 0,
        buf: value.clone(),
    };
    let ok_list = Got {
        rc: 7,
        errno: 0,
        buf: list.clone(),
    };
    let eperm = Got {
        rc: -1,
        errno: libc::EPERM,
        buf: untouched(),
    };
    // (what, call on the denied object, its twin on a plain one, the twin's answer)
    let cases: Vec<(&str, BoxedCall<'_>, BoxedCall<'_>, Got)> = vec![
        (
            "getxattr",
            Box::new(getxattr(&df, &k, BUF)),
            Box::new(getxattr(&plain, &k, BUF)),
            ok_value.clone(),
        ),
        (
            "lgetxattr",
            Box::new(lgetxattr(&df, &k, BUF)),
            Box::new(lgetxattr(&plain, &k, BUF)),
            ok_value.clone(),
        ),
        (
            "listxattr",
            Box::new(listxattr(&df, BUF)),
            Box::new(listxattr(&plain, BUF)),
            ok_list.clone(),
        ),
        (
            "llistxattr",
            Box::new(llistxattr(&df, BUF)),
            Box::new(llistxattr(&plain, BUF)),
            ok_list.clone(),
        ),
        (
            "fgetxattr on a directory",
            Box::new(by_fd(&dsub, Some(&k), BUF)),
            Box::new(by_fd(&plain, Some(&k), BUF)),
            ok_value.clone(),
        ),
        (
            "flistxattr on a directory",
            Box::new(by_fd(&dsub, None, BUF)),
            Box::new(by_fd(&plain, None, BUF)),
            ok_list.clone(),
        ),
        (
            "getxattr on D itself",
            Box::new(getxattr(&d, &k, BUF)),
            Box::new(getxattr(&plain, &k, BUF)),
            ok_value.clone(),
        ),
        (
            "getxattr through a link into D",
            Box::new(getxattr(&lnk, &k, BUF)),
            Box::new(getxattr(&plain, &k, BUF)),
            ok_value.clone(),
        ),
        (
            "getxattr on /proc/self/fd/N",
            Box::new(via_proc(&df, &k)),
            Box::new(via_proc(&plain, &k)),
            ok_value.clone(),
        ),
    ];
    for (what, denied, twin, expected) in &cases {
        let (got, log) = brokered(rules(), nothing, twin.as_ref());
        assert_eq!(&got, expected, "{what}: twin; {}", log.explain(5));
        assert!(
            log.performed().count() >= 1,
            "{what}: twin was not brokered"
        );
        let (got, log) = brokered(rules(), nothing, denied.as_ref());
        assert_eq!(got, eperm, "{what}: {}", log.explain(5));
        assert!(refused_read_deny(&log), "{what}: {}", log.explain(5));
    }
    // lgetxattr on the link itself reads the link (outside D): user.* never
    // exists on a symlink, so the kernel's ENODATA, not a refusal.
    let (got, log) = brokered(rules(), nothing, &lgetxattr(&lnk, &k, BUF));
    assert_eq!(
        (got.rc, got.errno),
        (-1, libc::ENODATA),
        "{}",
        log.explain(5)
    );
    assert!(!refused_read_deny(&log));
    // A file without the attribute.
    let bare = cstr(&t.bare);
    let (got, _) = brokered(rules(), nothing, &getxattr(&bare, &k, BUF));
    assert_eq!((got.rc, got.errno), (-1, libc::ENODATA));
}

#[test]
fn reads_beneath_a_read_deny_path_inside_the_write_path_are_refused() {
    read_deny_case(true);
}

#[test]
fn reads_beneath_a_read_deny_path_outside_the_write_paths_are_refused() {
    read_deny_case(false);
}

/// Each brokered answer equals the kernel's own for the same call (made by the
/// test process directly), buffer contents included.
#[test]
fn reads_answer_like_the_kernel() {
    let fx = Fixture::with_user_xattrs();
    let t = tree(&fx, &fx.o.join("D"), &fx.w);
    let rules = || fx.read_deny_rules(&[&t.d]);
    let k = CString::new("user.k").unwrap();
    let long = CString::new(format!("user.{}", "x".repeat(251))).unwrap();
    assert_eq!(long.as_bytes().len(), 256);
    let (plain, bare, missing) = (cstr(&t.plain), cstr(&t.bare), cstr(&fx.w.join("missing")));
    let bad_buf = |buf: *mut libc::c_void| {
        let _ = buf;
        // SAFETY (child): getxattr into an unmapped address: EFAULT.
        unsafe { libc::getxattr(plain.as_ptr(), k.as_ptr(), 8 as *mut libc::c_void, BUF) }
    };
    let cases: Vec<(&str, BoxedCall<'_>, isize, i32)> = vec![
        (
            "size 0 asks for the length",
            Box::new(getxattr(&plain, &k, 0)),
            5,
            0,
        ),
        ("exact buffer", Box::new(getxattr(&plain, &k, 5)), 5, 0),
        (
            "too small",
            Box::new(getxattr(&plain, &k, 4)),
            -1,
            libc::ERANGE,
        ),
        (
            "size above XATTR_SIZE_MAX is clamped",
            Box::new(getxattr(&plain, &k, 1 << 20)),
            5,
            0,
        ),
        (
            "lgetxattr, size 0",
            Box::new(lgetxattr(&plain, &k, 0)),
            5,
            0,
        ),
        (
            "fgetxattr, too small",
            Box::new(by_fd(&plain, Some(&k), 2)),
            -1,
            libc::ERANGE,
        ),
        (
            "no such attribute",
            Box::new(getxattr(&bare, &k, BUF)),
            -1,
            libc::ENODATA,
        ),
        (
            "no such file",
            Box::new(getxattr(&missing, &k, BUF)),
            -1,
            libc::ENOENT,
        ),
        (
            "name of 256 bytes",
            Box::new(getxattr(&plain, &long, BUF)),
            -1,
            libc::ERANGE,
        ),
        ("listxattr, size 0", Box::new(listxattr(&plain, 0)), 7, 0),
        ("listxattr, exact", Box::new(listxattr(&plain, 7)), 7, 0),
        (
            "listxattr, too small",
            Box::new(listxattr(&plain, 3)),
            -1,
            libc::ERANGE,
        ),
        (
            "listxattr, clamped",
            Box::new(listxattr(&plain, 1 << 20)),
            7,
            0,
        ),
        ("flistxattr, size 0", Box::new(by_fd(&plain, None, 0)), 7, 0),
        (
            "listxattr of a file without any",
            Box::new(listxattr(&bare, BUF)),
            0,
            0,
        ),
        ("unwritable buffer", Box::new(bad_buf), -1, libc::EFAULT),
    ];
    for (what, call, rc, errno) in &cases {
        let direct = run_call(call.as_ref());
        assert_eq!(
            (direct.rc, direct.errno),
            (*rc, *errno),
            "{what}: the kernel itself"
        );
        let (got, log) = brokered(rules(), nothing, call.as_ref());
        assert_eq!(got, direct, "{what}: {}", log.explain(5));
        let decision = &log.records[0].decision;
        if *rc >= 0 {
            assert_eq!(
                decision,
                &BrokerDecision::Read { len: *rc as u64 },
                "{what}"
            );
        } else {
            assert_eq!(
                decision,
                &BrokerDecision::Failed { errno: *errno },
                "{what}"
            );
        }
    }
}

/// The broker answered (not the kernel directly).
fn answered(log: &BrokerLog, expected: BrokerDecision) {
    assert_eq!(log.records.len(), 1, "{}", log.explain(5));
    assert_eq!(log.records[0].decision, expected);
}

fn drop_caps() -> i32 {
    drop_all_caps()
}

fn nobody() -> i32 {
    become_nobody()
}

/// The read runs with the caller's credentials, so the kernel's rules apply:
/// trusted.* needs CAP_SYS_ADMIN, user.* needs read permission.
#[test]
fn reads_use_the_callers_credentials() {
    let fx = Fixture::with_user_xattrs();
    set_mode(fx.tmp.path(), 0o755);
    let t = tree(&fx, &fx.o.join("D"), &fx.w);
    let rules = || fx.read_deny_rules(&[&t.d]);
    let k = CString::new("user.k").unwrap();
    let tr = CString::new("trusted.t").unwrap();
    set_xattr(&t.plain, "trusted.t", b"x");
    let plain = cstr(&t.plain);
    // listxattr: a root caller keeping CAP_SYS_ADMIN sees trusted.t ...
    let (with, log) = brokered(rules(), nothing, &listxattr(&plain, BUF));
    answered(&log, BrokerDecision::Read { len: 17 });
    let names = |g: &Got| g.buf[..g.rc.max(0) as usize].to_vec();
    assert_eq!(with.rc, 17, "{with:?}");
    assert!(names(&with).windows(10).any(|w| w == b"trusted.t\0"));
    // ... one without capabilities does not, as from the kernel.
    let (without, log) = brokered(rules(), drop_caps, &listxattr(&plain, BUF));
    assert_eq!(without.rc, 7, "{}", log.explain(5));
    assert_eq!(names(&without), b"user.k\0");
    answered(&log, BrokerDecision::Read { len: 7 });
    let (got, log) = brokered(rules(), drop_caps, &getxattr(&plain, &tr, BUF));
    assert_eq!((got.rc, got.errno), (-1, libc::ENODATA));
    answered(
        &log,
        BrokerDecision::Failed {
            errno: libc::ENODATA,
        },
    );
    let (got, log) = brokered(rules(), nothing, &getxattr(&plain, &tr, BUF));
    assert_eq!(got.rc, 1);
    answered(&log, BrokerDecision::Read { len: 1 });
    // user.*: uid 65534 may read the attribute of a world-readable file ...
    let (got, log) = brokered(rules(), nobody, &getxattr(&plain, &k, BUF));
    assert_eq!(got.rc, 5, "{}", log.explain(5));
    answered(&log, BrokerDecision::Read { len: 5 });
    // ... not of one it may not read.
    set_mode(&t.plain, 0o600);
    let (got, log) = brokered(rules(), nobody, &getxattr(&plain, &k, BUF));
    assert_eq!(
        (got.rc, got.errno),
        (-1, libc::EACCES),
        "{}",
        log.explain(5)
    );
}
