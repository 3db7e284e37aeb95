//! "A deputy is indistinguishable from the kernel" (red-team R6b F5): a
//! call the kernel itself refuses for lack of ownership or permission gets
//! the same errno through the broker as bare, and is no refusal of the
//! sandbox's (nothing recorded as refused). Each case runs twice as uid and
//! gid 65534 without capabilities: bare (a forked child, no filter), then
//! confined; the errnos are compared, and the bare one against the kernel's
//! documented answer. Controls: calls the policy itself refuses are still
//! recorded as refusals, and the caller's own file is changed.
#![cfg(target_os = "linux")]

use std::ffi::{CStr, CString};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::common::*;
use sandbox_broker::{BrokerDecision, Refusal};

/// One call of the caller on `path`; returns 0 or the errno.
type Call = fn(&CStr) -> i32;

struct Case {
    name: &'static str,
    path: CString,
    call: Call,
    /// The kernel's answer (checked bare first).
    want: i32,
}

fn chmod(p: &CStr) -> i32 {
    // SAFETY (child): one syscall on a live NUL-terminated path.
    result(unsafe { libc::chmod(p.as_ptr(), 0o600) })
}

fn fchmod(p: &CStr) -> i32 {
    // SAFETY (child): open + fchmod on a live path.
    unsafe {
        let fd = libc::open(p.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return 200;
        }
        result(libc::fchmod(fd, 0o600))
    }
}

fn chown_to_self(p: &CStr) -> i32 {
    // SAFETY (child): one syscall.
    result(unsafe { libc::chown(p.as_ptr(), 65534, u32::MAX) })
}

fn chgrp_to_own_group(p: &CStr) -> i32 {
    // SAFETY (child): one syscall.
    result(unsafe { libc::chown(p.as_ptr(), u32::MAX, 65534) })
}

fn chgrp_to_root(p: &CStr) -> i32 {
    // SAFETY (child): one syscall.
    result(unsafe { libc::chown(p.as_ptr(), u32::MAX, 0) })
}

fn utimens(p: &CStr, times: Option<[libc::timespec; 2]>) -> i32 {
    let ptr = times.as_ref().map_or(std::ptr::null(), |t| t.as_ptr());
    // SAFETY (child): one syscall with a live path and times (or NULL).
    result(unsafe { libc::utimensat(libc::AT_FDCWD, p.as_ptr(), ptr, 0) })
}

fn ts(sec: i64, nsec: i64) -> libc::timespec {
    libc::timespec {
        tv_sec: sec,
        tv_nsec: nsec,
    }
}

fn times_explicit(p: &CStr) -> i32 {
    utimens(p, Some([ts(1_577_836_800, 0), ts(1_577_836_800, 0)]))
}

fn times_null(p: &CStr) -> i32 {
    utimens(p, None)
}

fn times_both_now(p: &CStr) -> i32 {
    utimens(p, Some([ts(0, libc::UTIME_NOW), ts(0, libc::UTIME_NOW)]))
}

fn times_now_and_omit(p: &CStr) -> i32 {
    utimens(p, Some([ts(0, libc::UTIME_NOW), ts(0, libc::UTIME_OMIT)]))
}

fn truncate(p: &CStr) -> i32 {
    // SAFETY (child): one syscall.
    result(unsafe { libc::truncate(p.as_ptr(), 0) })
}

fn set_user_xattr(p: &CStr) -> i32 {
    // SAFETY (child): one syscall with live buffers.
    result(unsafe { libc::setxattr(p.as_ptr(), c"user.k".as_ptr(), b"v".as_ptr().cast(), 1, 0) })
}

fn remove_user_xattr(p: &CStr) -> i32 {
    // SAFETY (child): one syscall.
    result(unsafe { libc::removexattr(p.as_ptr(), c"user.k".as_ptr()) })
}

fn chmod_setuid(p: &CStr) -> i32 {
    // SAFETY (child): one syscall.
    result(unsafe { libc::chmod(p.as_ptr(), 0o4755) })
}

fn chmod_setgid(p: &CStr) -> i32 {
    // SAFETY (child): one syscall.
    result(unsafe { libc::chmod(p.as_ptr(), 0o2775) })
}

fn fchmod_setgid(p: &CStr) -> i32 {
    // SAFETY (child): open + fchmod on a live path.
    unsafe {
        let fd = libc::open(p.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return 200;
        }
        let rc = result(libc::fchmod(fd, 0o2775));
        libc::close(fd);
        rc
    }
}

fn fchmodat2_setgid(p: &CStr) -> i32 {
    // SAFETY (child): one syscall (fchmodat2, Linux 6.6).
    result(unsafe { libc::syscall(452, libc::AT_FDCWD, p.as_ptr(), 0o2775, 0) } as libc::c_int)
}

fn chmod_setuid_dir(p: &CStr) -> i32 {
    // SAFETY (child): one syscall.
    result(unsafe { libc::chmod(p.as_ptr(), 0o4775) })
}

/// Runs `call` on `path` as uid/gid 65534 without capabilities, without
/// a filter; its errno (0 on success), or 90+ when it could not become it.
fn bare(call: Call, path: &CStr) -> i32 {
    // SAFETY: the child makes raw syscalls only and leaves with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        let became = become_nobody();
        let code = if became != 0 { 90 + became } else { call(path) };
        // SAFETY: leaving the forked child.
        unsafe { libc::_exit(code) };
    }
    wait(pid)
}

/// The same, confined: the broker answers the brokered calls.
fn through_broker(fx: &Fixture, call: Call, path: &CStr) -> Run {
    confined(fx.rules(&[]), || {
        let became = become_nobody();
        if became != 0 {
            return 90 + became;
        }
        call(path)
    })
}

/// A fixture on a filesystem with user xattrs, its write path
/// world-writable and its ancestors searchable by 65534.
fn fixture() -> Fixture {
    let fx = Fixture::with_user_xattrs();
    set_mode(fx.tmp.path(), 0o755);
    set_mode(&fx.w, 0o777);
    set_mode(&fx.o, 0o777);
    fx
}

#[test]
fn the_kernels_own_refusals_are_answered_as_bare_and_not_recorded() {
    let fx = fixture();
    // Owned by root (the test runs as root), readable by all.
    let roots = fx.file(&fx.w.join("roots"), 0o644);
    let roots_dir = fx.w.join("roots_dir");
    std::fs::create_dir(&roots_dir).expect("mkdir");
    set_mode(&roots_dir, 0o755);
    let sticky = fx.w.join("sticky");
    std::fs::create_dir(&sticky).expect("mkdir");
    set_mode(&sticky, 0o1777);
    for p in [&roots, &roots_dir, &sticky] {
        set_xattr(p, "user.k", b"root's");
    }
    // The caller's own file (for the group it is not in).
    let mine = fx.file(&fx.w.join("mine"), 0o644);
    std::os::unix::fs::chown(&mine, Some(65534), Some(65534)).expect("chown");
    let before = |p: &Path| {
        let m = meta(p);
        (m.mode(), m.uid(), m.gid(), m.mtime(), m.len())
    };
    let (r, d, s, m) = (cstr(&roots), cstr(&roots_dir), cstr(&sticky), cstr(&mine));
    let case = |name, path: &CString, call: Call, want| Case {
        name,
        path: path.clone(),
        call,
        want,
    };
    let cases = [
        case("chmod of another's file", &r, chmod as Call, libc::EPERM),
        case("fchmod of another's file", &r, fchmod, libc::EPERM),
        case("chown to oneself", &r, chown_to_self, libc::EPERM),
        case(
            "chgrp of another's file",
            &r,
            chgrp_to_own_group,
            libc::EPERM,
        ),
        case(
            "chgrp of one's own file to a group one is not in",
            &m,
            chgrp_to_root,
            libc::EPERM,
        ),
        case("explicit times", &r, times_explicit, libc::EPERM),
        case(
            "UTIME_NOW and UTIME_OMIT",
            &r,
            times_now_and_omit,
            libc::EPERM,
        ),
        case(
            "times NULL without write access",
            &r,
            times_null,
            libc::EACCES,
        ),
        case(
            "both UTIME_NOW without write access",
            &r,
            times_both_now,
            libc::EACCES,
        ),
        case("truncate without write access", &r, truncate, libc::EACCES),
        case(
            "user xattr without write access",
            &r,
            set_user_xattr,
            libc::EACCES,
        ),
        case(
            "user xattr removed without write access",
            &r,
            remove_user_xattr,
            libc::EACCES,
        ),
        case(
            "user xattr of a directory",
            &d,
            set_user_xattr,
            libc::EACCES,
        ),
        case(
            "user xattr of a sticky directory",
            &s,
            set_user_xattr,
            libc::EPERM,
        ),
    ];
    let state = || [&roots, &roots_dir, &sticky, &mine].map(|p| before(p));
    let at_start = state();
    for c in &cases {
        let bare = bare(c.call, &c.path);
        assert_eq!(bare, c.want, "{}: bare", c.name);
        let run = through_broker(&fx, c.call, &c.path);
        assert_eq!(
            run.code,
            bare,
            "{}: through the broker\n{}",
            c.name,
            run.log.explain(5)
        );
        assert!(
            run.log.refusals().next().is_none(),
            "{}: recorded as a refusal\n{}",
            c.name,
            run.log.explain(5)
        );
        // The broker answered it (so the parity is the broker's, not a
        // call the filter let through).
        assert!(
            run.log
                .records
                .iter()
                .any(|r| r.decision == BrokerDecision::Failed { errno: bare }),
            "{}: not answered by the broker\n{}",
            c.name,
            run.log.explain(5)
        );
        assert_eq!(state(), at_start, "{}: changed something", c.name);
    }
    assert_eq!(get_xattr(&roots, "user.k").as_deref(), Some(&b"root's"[..]));
}

/// Controls: the policy's own refusals are still refusals, recorded, and
/// the caller's own file in the write path is changed as bare.
#[test]
fn the_policys_refusals_are_still_recorded() {
    let fx = fixture();
    let mine_in = fx.file(&fx.w.join("mine"), 0o644);
    let mine_out = fx.file(&fx.o.join("mine"), 0o644);
    let twin_out = fx.file(&fx.o.join("twin"), 0o644);
    let twin_setuid = fx.file(&fx.w.join("twin-setuid"), 0o644);
    let setuid = fx.file(&fx.w.join("setuid"), 0o644);
    for p in [&mine_in, &mine_out, &twin_out, &twin_setuid, &setuid] {
        std::os::unix::fs::chown(p, Some(65534), Some(65534)).expect("chown");
    }
    // Positive control: its own file inside, performed, as bare.
    let run = through_broker(&fx, chmod, &cstr(&mine_in));
    assert_eq!(run.code, 0, "{}", run.log.explain(5));
    assert_eq!(meta(&mine_in).mode() & 0o7777, 0o600);
    assert_eq!(run.log.performed().count(), 1);

    // Outside the write paths: bare it works (its own file) ...
    assert_eq!(bare(chmod, &cstr(&twin_out)), 0);
    assert_eq!(meta(&twin_out).mode() & 0o7777, 0o600);
    // ... confined it is the policy's refusal, recorded.
    let run = through_broker(&fx, chmod, &cstr(&mine_out));
    assert_ne!(run.code, 0);
    assert_eq!(meta(&mine_out).mode() & 0o7777, 0o644);
    assert_eq!(refusals(&run.log), vec![Refusal::OutsideWritePaths]);

    // A set-uid bit on its own file: the kernel allows it, the policy not.
    assert_eq!(bare(chmod_setuid, &cstr(&twin_setuid)), 0);
    assert_eq!(meta(&twin_setuid).mode() & 0o7777, 0o4755);
    let run = through_broker(&fx, chmod_setuid, &cstr(&setuid));
    assert_eq!(run.code, libc::EPERM);
    assert_eq!(meta(&setuid).mode() & 0o7777, 0o644);
    assert_eq!(refusals(&run.log), vec![Refusal::SetIdBits]);
}

/// Workload sweep P7: `chmod g+s` of nobody's own directory in the write
/// path, in every form, answers as bare: kept for the directory's group
/// (nobody's), silently dropped for a group nobody is not in
/// (setattr_prepare, no CAP_FSETID), and no refusal either way. Controls:
/// S_ISGID of a file and S_ISUID of a directory stay the policy's refusals
/// (bare both succeed).
#[test]
fn setgid_on_a_directory_answers_as_bare() {
    let fx = fixture();
    let calls: [(&str, Call); 3] = [
        ("chmod", chmod_setgid),
        ("fchmod", fchmod_setgid),
        ("fchmodat2", fchmodat2_setgid),
    ];
    for (name, call) in calls {
        for (group, kept) in [(65534, 0o2000), (4242, 0)] {
            let mut modes = Vec::new();
            for how in ["bare", "confined"] {
                let d = fx.w.join(format!("{name}-{group}-{how}"));
                std::fs::create_dir(&d).unwrap();
                set_mode(&d, 0o755);
                std::os::unix::fs::chown(&d, Some(65534), Some(group)).expect("chown");
                let code = if how == "bare" {
                    bare(call, &cstr(&d))
                } else {
                    let run = through_broker(&fx, call, &cstr(&d));
                    assert_eq!(refusals(&run.log), vec![], "{name} {group}");
                    assert_eq!(run.log.performed().count(), 1, "{name} {group}");
                    run.code
                };
                assert_eq!(code, 0, "{name} {group} {how}");
                modes.push(meta(&d).mode() & 0o7777);
            }
            assert_eq!(modes, vec![0o775 | kept; 2], "{name} group {group}");
        }
    }
    // Controls: a file's S_ISGID and a directory's S_ISUID, refused
    // confined (bare the kernel allows both).
    for (what, call) in [("file", chmod_setgid as Call), ("dir", chmod_setuid_dir)] {
        let [b, c] = ["bare", "confined"].map(|how| {
            let p = fx.w.join(format!("control-{what}-{how}"));
            if what == "file" {
                fx.file(&p, 0o644);
            } else {
                std::fs::create_dir(&p).unwrap();
            }
            std::os::unix::fs::chown(&p, Some(65534), Some(65534)).expect("chown");
            p
        });
        assert_eq!(bare(call, &cstr(&b)), 0, "{what}");
        assert_ne!(meta(&b).mode() & 0o6000, 0, "{what}");
        let run = through_broker(&fx, call, &cstr(&c));
        assert_eq!(run.code, libc::EPERM, "{what}");
        assert_eq!(meta(&c).mode() & 0o6000, 0, "{what}");
        assert_eq!(refusals(&run.log), vec![Refusal::SetIdBits], "{what}");
    }
}

/// R6b F4: a flood of performed calls (more than the log keeps of them)
/// then one refusal: the refusal is kept, the performed ones past the cap
/// are counted. Control: the same flood
/// without the refusal has none.
#[test]
fn a_refusal_after_a_flood_of_performed_calls_is_kept() {
    let fx = Fixture::new();
    let mine = fx.file(&fx.w.join("mine"), 0o644);
    let out = fx.file(&fx.o.join("out"), 0o644);
    let flood = sandbox_broker::BrokerLog::MAX_RECORDS + 104;
    let (m, o) = (cstr(&mine), cstr(&out));
    let run_flood = |then_refused: bool| {
        confined(fx.rules(&[]), || {
            for i in 0..flood {
                let mode = if i % 2 == 0 { 0o600 } else { 0o644 };
                // SAFETY (child): one syscall on a live path.
                if unsafe { libc::chmod(m.as_ptr(), mode) } != 0 {
                    return 80;
                }
            }
            if then_refused {
                return chmod(&o);
            }
            0
        })
    };
    let run = run_flood(true);
    assert_eq!(run.code, libc::EPERM, "{}", run.log.explain(5));
    assert_eq!(refusals(&run.log), vec![Refusal::OutsideWritePaths]);
    assert_eq!(run.log.refusals_omitted, 0);
    assert_eq!(run.log.performed_count(), flood as u64);
    assert_eq!(run.log.omitted, 104);
    assert_eq!(run.log.performed_omitted, 104);
    assert_eq!(meta(&out).mode() & 0o7777, 0o644);
    let control = run_flood(false);
    assert_eq!(control.code, 0, "{}", control.log.explain(5));
    assert_eq!(control.log.refusals_count(), 0);
    assert_eq!(control.log.performed_count(), flood as u64);
}
