//! The broker acts with the caller's credentials (fsuid, fsgid, groups,
//! effective capabilities = the broker's own ∩ the caller's), so the kernel's
//! own permission rules apply to what it performs; and it refuses when it
//! cannot take them on. Every refusal sits beside its allowed twin.
#![cfg(target_os = "linux")]

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::common::*;
use sandbox_broker::{Broker, BrokerDecision, BrokerLog, CredentialChange, Refusal};

fn decisions(log: &BrokerLog) -> Vec<BrokerDecision> {
    log.records.iter().map(|r| r.decision.clone()).collect()
}

fn full_mode(path: &Path) -> u32 {
    meta(path).mode() & 0o7777
}

/// A set-uid root file inside the write path, with content.
fn setuid_file(fx: &Fixture) -> std::path::PathBuf {
    let f = fx.file(&fx.w.join("suid"), 0o644);
    std::fs::write(&f, b"#!/bin/sh\n").expect("write");
    set_mode(&f, 0o4755);
    assert_eq!(full_mode(&f), 0o4755);
    f
}

#[test]
fn truncate_by_a_caller_without_caps_strips_setuid() {
    let fx = Fixture::new();
    // Twin showing the test would catch a broker acting with the runner's
    // credentials: the runner (root, CAP_FSETID) truncating the file itself
    // keeps S_ISUID.
    assert_ne!(get_caps().0 & (1 << 4), 0, "the test runs with CAP_FSETID");
    let f = setuid_file(&fx);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&f)
        .expect("open")
        .set_len(0)
        .expect("truncate");
    assert_eq!(full_mode(&f), 0o4755, "CAP_FSETID keeps the bit");

    // A root caller with every capability dropped: the broker's truncate runs
    // without CAP_FSETID, so the kernel clears S_ISUID.
    let f = setuid_file(&fx);
    let c = cstr(&f);
    let run = confined(fx.rules(&[]), || {
        let dropped = drop_all_caps();
        if dropped != 0 {
            return 90 + dropped;
        }
        // SAFETY (child): one syscall.
        result(unsafe { libc::truncate(c.as_ptr(), 0) })
    });
    assert_eq!(run.code, 0, "{}", run.log.explain(5));
    assert_eq!(decisions(&run.log), vec![BrokerDecision::Performed]);
    assert_eq!(meta(&f).len(), 0);
    assert_eq!(full_mode(&f), 0o755, "S_ISUID must be gone");

    // And a root caller that keeps its capabilities keeps the bit through the
    // broker too: the broker takes on the caller's set, not simply fewer.
    let f = setuid_file(&fx);
    let c = cstr(&f);
    // SAFETY (child): one syscall.
    let run = confined(fx.rules(&[]), || {
        result(unsafe { libc::truncate(c.as_ptr(), 0) })
    });
    assert_eq!(run.code, 0);
    assert_eq!(meta(&f).len(), 0);
    assert_eq!(full_mode(&f), 0o4755);
}

/// A fixture whose write path is world-writable (its parent already is searchable).
fn world_writable() -> Fixture {
    let fx = Fixture::new();
    set_mode(fx.tmp.path(), 0o755);
    set_mode(&fx.w, 0o777);
    fx
}

/// The non-owner's chmod fails `EPERM` as the kernel's own answer would
/// (red-team R6b F5): no refusal is recorded, the file is unchanged.
#[test]
fn chmod_by_uid_65534_of_a_root_file_fails_as_bare_and_of_its_own_performed() {
    let fx = world_writable();
    let roots = fx.file(&fx.w.join("roots"), 0o644);
    let (r, mine) = (cstr(&roots), cstr(&fx.w.join("mine")));
    let run = confined(fx.rules(&[]), || {
        let became = become_nobody();
        if became != 0 {
            return 90 + became;
        }
        // SAFETY (child): plain syscalls on NUL-terminated paths.
        unsafe {
            // Twin first: its own file, created in the world-writable write path.
            let fd = libc::open(
                mine.as_ptr(),
                libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY,
                0o644,
            );
            if fd < 0 {
                return 80;
            }
            libc::close(fd);
            if libc::chmod(mine.as_ptr(), 0o600) != 0 {
                return 81;
            }
            result(libc::chmod(r.as_ptr(), 0o600))
        }
    });
    assert_eq!(run.code, libc::EPERM, "{}", run.log.explain(5));
    assert_eq!(full_mode(&roots), 0o644);
    assert_eq!(meta(&fx.w.join("mine")).uid(), 65534);
    assert_eq!(full_mode(&fx.w.join("mine")), 0o600);
    assert_eq!(
        decisions(&run.log),
        vec![
            BrokerDecision::Performed,
            BrokerDecision::Failed { errno: libc::EPERM }
        ]
    );
}

/// Where the broker's own rules allow a call and only the kernel's refuse it:
/// the owner of a read-only file may pass the owner test, but the kernel wants
/// write permission for a user.* attribute. With the runner's root
/// credentials (CAP_DAC_OVERRIDE) the broker used to perform it.
#[test]
fn the_kernel_checks_the_callers_own_permissions() {
    let fx = world_writable();
    let ro = fx.file(&fx.w.join("ro"), 0o444);
    let rw = fx.file(&fx.w.join("rw"), 0o644);
    for f in [&ro, &rw] {
        std::os::unix::fs::chown(f, Some(65534), Some(65534)).expect("chown");
    }
    let set = |path: &Path| {
        let p = cstr(path);
        confined(fx.rules(&[]), move || {
            let became = become_nobody();
            if became != 0 {
                return 90 + became;
            }
            // SAFETY (child): one syscall with live buffers.
            result(unsafe {
                libc::setxattr(p.as_ptr(), c"user.k".as_ptr(), b"v".as_ptr().cast(), 1, 0)
            })
        })
    };
    let run = set(&ro);
    assert_eq!(run.code, libc::EACCES, "{}", run.log.explain(5));
    assert_eq!(
        decisions(&run.log),
        vec![BrokerDecision::Failed {
            errno: libc::EACCES
        }]
    );
    assert_eq!(get_xattr(&ro, "user.k"), None);
    // Twin: its own writable file.
    let run = set(&rw);
    assert_eq!(run.code, 0, "{}", run.log.explain(5));
    assert_eq!(get_xattr(&rw, "user.k").as_deref(), Some(&b"v"[..]));
}

/// The path walk runs with the caller's credentials too: a directory it may
/// not search hides its own file, as the kernel would.
#[test]
fn the_walk_needs_the_callers_search_permission() {
    let fx = world_writable();
    for (dir, mode) in [("closed", 0o700), ("open", 0o755)] {
        std::fs::create_dir(fx.w.join(dir)).expect("mkdir");
        set_mode(&fx.w.join(dir), mode);
        let f = fx.file(&fx.w.join(dir).join("f"), 0o644);
        std::os::unix::fs::chown(&f, Some(65534), Some(65534)).expect("chown");
    }
    let chmod = |path: &Path| {
        let p = cstr(path);
        confined(fx.rules(&[]), move || {
            let became = become_nobody();
            if became != 0 {
                return 90 + became;
            }
            // SAFETY (child): one syscall.
            result(unsafe { libc::chmod(p.as_ptr(), 0o600) })
        })
    };
    let run = chmod(&fx.w.join("closed/f"));
    assert_eq!(run.code, libc::EACCES, "{}", run.log.explain(5));
    assert_eq!(full_mode(&fx.w.join("closed/f")), 0o644);
    let run = chmod(&fx.w.join("open/f"));
    assert_eq!(run.code, 0, "{}", run.log.explain(5));
    assert_eq!(full_mode(&fx.w.join("open/f")), 0o600);
}

/// A broker that cannot take on the caller's identity (started by a thread
/// without CAP_SETUID/CAP_SETGID) refuses rather than act with more.
#[test]
fn a_broker_that_cannot_take_on_the_caller_refuses() {
    let fx = world_writable();
    let theirs = fx.file(&fx.w.join("theirs"), 0o644);
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).expect("chown");
    let roots = fx.file(&fx.w.join("roots"), 0o644);
    let start_lowered = |listener| {
        let rules = fx.rules(&[]);
        std::thread::spawn(move || {
            let (eff, prm, inh) = get_caps();
            let setid = (1u64 << CAP_SETUID) | (1u64 << CAP_SETGID);
            assert_eq!(set_caps(eff & !setid, prm & !setid, inh & !setid), 0);
            // The broker thread inherits this thread's credentials.
            Broker::start(listener, rules).expect("broker starts")
        })
        .join()
        .expect("thread")
    };
    let run_lowered = |path: &Path, nobody: bool| {
        let p = cstr(path);
        let mut pid = 0;
        let listener = spawn(
            move || {
                if nobody {
                    let became = become_nobody();
                    if became != 0 {
                        return 90 + became;
                    }
                }
                // SAFETY (child): one syscall.
                result(unsafe { libc::chmod(p.as_ptr(), 0o600) })
            },
            &mut pid,
        );
        let broker = start_lowered(listener);
        let code = wait(pid);
        (code, broker.finish())
    };
    let (code, log) = run_lowered(&theirs, true);
    assert_eq!(code, libc::EPERM, "{}", log.explain(5));
    assert_eq!(full_mode(&theirs), 0o644);
    match &decisions(&log)[..] {
        [BrokerDecision::Refused {
            reason: Refusal::CallerCredentials { change },
        }] => assert!(
            matches!(
                change,
                CredentialChange::Fsgid | CredentialChange::Fsuid | CredentialChange::Groups
            ),
            "{change:?}"
        ),
        other => panic!("{other:?}"),
    }
    assert!(log.explain(5).contains("could not take on the caller's"));
    assert_eq!(log.stopped_by_error, None);
    // Twin: the same lowered broker serving a caller with its own identity
    // (root; only the effective set may shrink) performs the call.
    let (code, log) = run_lowered(&roots, false);
    assert_eq!(code, 0, "{}", log.explain(5));
    assert_eq!(full_mode(&roots), 0o600);
}

/// Capabilities a caller holds in a user namespace of its own are not
/// capabilities over the broker's objects: a caller that made one (and so has
/// a full CapEff there) is treated as having none.
#[test]
fn capabilities_in_another_user_namespace_count_for_nothing() {
    let fx = Fixture::new();
    let others = fx.file(&fx.w.join("others"), 0o644);
    std::os::unix::fs::chown(&others, Some(1000), Some(1000)).expect("chown");
    let roots = fx.file(&fx.w.join("roots"), 0o644);
    let chmod_in_userns = |path: &Path| {
        let p = cstr(path);
        confined(fx.rules(&[]), move || {
            // SAFETY (child): unshare + one syscall.
            unsafe {
                if libc::unshare(libc::CLONE_NEWUSER) != 0 {
                    return 90;
                }
                result(libc::chmod(p.as_ptr(), 0o600))
            }
        })
    };
    let run = chmod_in_userns(&others);
    assert_eq!(run.code, libc::EPERM, "{}", run.log.explain(5));
    // The kernel's own answer (no CAP_FOWNER over the file), no refusal.
    assert_eq!(
        decisions(&run.log),
        vec![BrokerDecision::Failed { errno: libc::EPERM }]
    );
    assert_eq!(full_mode(&others), 0o644);
    // Twin: the same caller changes a file it owns (uid 0 outside).
    let run = chmod_in_userns(&roots);
    assert_eq!(run.code, 0, "{}", run.log.explain(5));
    assert_eq!(full_mode(&roots), 0o600);
    // And a caller keeping its capabilities in the broker's namespace may
    // change the other user's file (CAP_FOWNER), so the refusal above is the
    // namespace's doing.
    let p = cstr(&others);
    // SAFETY (child): one syscall.
    let run = confined(fx.rules(&[]), || {
        result(unsafe { libc::chmod(p.as_ptr(), 0o600) })
    });
    assert_eq!(run.code, 0, "{}", run.log.explain(5));
    assert_eq!(full_mode(&others), 0o600);
}
