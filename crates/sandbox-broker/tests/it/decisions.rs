//! Each brokered family inside a write path (performed, effect observed) beside
//! its escape attempts (refused, target unchanged), on the real kernel.
#![cfg(target_os = "linux")]

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::common::*;
use sandbox_broker::{BrokerDecision, BrokerLog, Refusal};

fn performed(log: &BrokerLog) -> usize {
    log.performed().count()
}

#[test]
fn chmod_inside_is_performed_and_outside_refused() {
    let fx = Fixture::new();
    let inside = fx.file(&fx.w.join("f"), 0o644);
    let outside = fx.file(&fx.o.join("f"), 0o644);

    let run = sh(fx.rules(&[]), &format!("chmod 700 {}", q(&inside)));
    assert_eq!(run.code, 0);
    assert_eq!(mode(&inside), 0o700);
    assert_eq!(performed(&run.log), 1);
    assert_eq!(
        run.log.records[0].target.resolved.as_deref(),
        Some(inside.as_path())
    );

    let run = sh(fx.rules(&[]), &format!("chmod 600 {}", q(&outside)));
    assert_ne!(run.code, 0, "chmod outside must fail");
    assert_eq!(mode(&outside), 0o644);
    assert_eq!(refusals(&run.log), vec![Refusal::OutsideWritePaths]);
    let text = run.log.explain(5);
    assert!(text.starts_with("broker: 0 performed, 1 refused"), "{text}");
    assert!(text.contains("refused, outside the write paths"), "{text}");
    assert!(text.contains(&outside.display().to_string()), "{text}");
}

#[test]
fn fchmod_by_read_only_fd() {
    let fx = Fixture::new();
    let inside = cstr(&fx.file(&fx.w.join("f"), 0o644));
    let outside = cstr(&fx.file(&fx.o.join("f"), 0o644));
    fn via_fd(path: &std::ffi::CString) -> impl FnOnce() -> i32 + '_ {
        // SAFETY (child): open + fchmod, async-signal-safe.
        move || unsafe {
            let fd = libc::open(path.as_ptr(), libc::O_RDONLY);
            if fd < 0 {
                return 99;
            }
            result(libc::fchmod(fd, 0o600))
        }
    }
    assert_eq!(confined(fx.rules(&[]), via_fd(&inside)).code, 0);
    assert_eq!(mode(&fx.w.join("f")), 0o600);
    // An O_PATH fd gets EBADF, as from the kernel.
    let run = confined(fx.rules(&[]), || {
        // SAFETY (child): open + fchmod.
        unsafe {
            let fd = libc::open(inside.as_ptr(), libc::O_PATH);
            result(libc::fchmod(fd, 0o644))
        }
    });
    assert_eq!(run.code, libc::EBADF);
    assert_eq!(mode(&fx.w.join("f")), 0o600);
    let run = confined(fx.rules(&[]), via_fd(&outside));
    assert_eq!(run.code, libc::EPERM);
    assert_eq!(mode(&fx.o.join("f")), 0o644);
    assert_eq!(run.log.records[0].syscall, "fchmod");
}

#[test]
fn symlink_inside_pointing_out_is_refused() {
    let fx = Fixture::new();
    let outside = fx.file(&fx.o.join("f"), 0o644);
    let target_in = fx.file(&fx.w.join("t"), 0o644);
    std::os::unix::fs::symlink(&outside, fx.w.join("out")).unwrap();
    std::os::unix::fs::symlink("t", fx.w.join("in")).unwrap();

    let run = sh(fx.rules(&[]), &format!("chmod 600 {}", q(&fx.w.join("in"))));
    assert_eq!(run.code, 0);
    assert_eq!(mode(&target_in), 0o600);

    let run = sh(
        fx.rules(&[]),
        &format!("chmod 600 {}", q(&fx.w.join("out"))),
    );
    assert_ne!(run.code, 0);
    assert_eq!(mode(&outside), 0o644);
    assert_eq!(refusals(&run.log), vec![Refusal::OutsideWritePaths]);
}

#[test]
fn dotdot_out_of_the_write_path_is_refused() {
    let fx = Fixture::new();
    let outside = fx.file(&fx.o.join("f"), 0o644);
    let inside = fx.file(&fx.w.join("f"), 0o644);
    std::fs::create_dir(fx.w.join("sub")).unwrap();

    let run = sh(
        fx.rules(&[]),
        &format!("cd {} && chmod 600 sub/../f", q(&fx.w)),
    );
    assert_eq!(run.code, 0);
    assert_eq!(mode(&inside), 0o600);

    let run = sh(
        fx.rules(&[]),
        &format!("cd {} && chmod 600 ../o/f", q(&fx.w)),
    );
    assert_ne!(run.code, 0);
    assert_eq!(mode(&outside), 0o644);
    assert_eq!(refusals(&run.log), vec![Refusal::OutsideWritePaths]);
}

#[test]
fn proc_self_fd_paths_name_the_callers_fd() {
    let fx = Fixture::new();
    let outside = cstr(&fx.file(&fx.o.join("f"), 0o644));
    let inside = cstr(&fx.file(&fx.w.join("f"), 0o644));
    fn via_proc(path: &std::ffi::CString) -> impl FnOnce() -> i32 + '_ {
        move || {
            let mut buf = *b"/proc/self/fd/\0\0\0\0";
            // SAFETY (child): open, then chmod through the magic link.
            unsafe {
                let fd = libc::open(path.as_ptr(), libc::O_RDONLY);
                if !(0..100).contains(&fd) {
                    return 99;
                }
                buf[14] = b'0' + (fd / 10) as u8;
                buf[15] = b'0' + (fd % 10) as u8;
                result(libc::chmod(buf.as_ptr().cast(), 0o600))
            }
        }
    }
    // An fd to a file outside the write paths: refused, unchanged.
    let run = confined(fx.rules(&[]), via_proc(&outside));
    assert_eq!(run.code, libc::EPERM);
    assert_eq!(mode(&fx.o.join("f")), 0o644);
    assert_eq!(refusals(&run.log), vec![Refusal::OutsideWritePaths]);
    // Positive control: the same path form on a file inside (what tar does).
    let run = confined(fx.rules(&[]), via_proc(&inside));
    assert_eq!(run.code, 0);
    assert_eq!(mode(&fx.w.join("f")), 0o600);
}

#[test]
fn other_proc_paths_are_refused() {
    let fx = Fixture::new();
    let inside = cstr(&fx.file(&fx.w.join("f"), 0o644));
    let run = confined(fx.rules(&[]), move || {
        // SAFETY (child): open, then chmod through the parent's /proc entry.
        unsafe {
            let fd = libc::open(inside.as_ptr(), libc::O_RDONLY);
            if fd < 0 {
                return 99;
            }
            result(libc::chmod(c"/proc/1/cwd".as_ptr(), 0o700))
        }
    });
    assert_eq!(run.code, libc::EPERM);
    assert_eq!(refusals(&run.log), vec![Refusal::ProcfsPath]);
}

#[test]
fn write_deny_path_inside_the_write_path_is_refused() {
    let fx = Fixture::new();
    std::fs::create_dir(fx.w.join(".git")).unwrap();
    let denied = fx.file(&fx.w.join(".git/config"), 0o644);
    let sibling = fx.file(&fx.w.join("other"), 0o644);
    std::os::unix::fs::symlink(".git/config", fx.w.join("link")).unwrap();

    let run = sh(fx.rules(&[".git"]), &format!("chmod 600 {}", q(&sibling)));
    assert_eq!(run.code, 0);
    assert_eq!(mode(&sibling), 0o600);

    for path in [&denied, &fx.w.join("link"), &fx.w.join(".git")] {
        let run = sh(fx.rules(&[".git"]), &format!("chmod 700 {}", q(path)));
        assert_ne!(run.code, 0, "{}", path.display());
        assert_eq!(refusals(&run.log), vec![Refusal::WriteDenyPath]);
    }
    assert_eq!(mode(&denied), 0o644);
}

#[test]
fn set_id_bits_are_never_added() {
    let fx = Fixture::new();
    let f = fx.file(&fx.w.join("f"), 0o644);
    for bits in ["4755", "2755", "u+s", "g+s"] {
        let run = sh(fx.rules(&[]), &format!("chmod {bits} {}", q(&f)));
        assert_ne!(run.code, 0, "chmod {bits}");
        assert_eq!(mode(&f), 0o644, "chmod {bits}");
        assert_eq!(refusals(&run.log), vec![Refusal::SetIdBits]);
    }
    // Allowed twin: the same file without set-id bits.
    assert_eq!(sh(fx.rules(&[]), &format!("chmod 755 {}", q(&f))).code, 0);
    assert_eq!(mode(&f), 0o755);
    // A bit the file already has may stay.
    set_mode(&f, 0o4755);
    assert_eq!(sh(fx.rules(&[]), &format!("chmod 4700 {}", q(&f))).code, 0);
    assert_eq!(mode(&f), 0o4700);
}

#[test]
fn chown_only_to_the_caller_and_only_inside() {
    let fx = Fixture::new();
    let inside = fx.file(&fx.w.join("f"), 0o644);
    let outside = fx.file(&fx.o.join("f"), 0o644);
    for p in [&inside, &outside] {
        std::os::unix::fs::chown(p, Some(0), Some(1234)).unwrap();
    }
    // The test runs as root with CAP_CHOWN: taking the file back to root:root works.
    let run = sh(fx.rules(&[]), &format!("chown 0:0 {}", q(&inside)));
    assert_eq!(run.code, 0);
    assert_eq!(meta(&inside).gid(), 0);
    // Giving it to another user is refused.
    let run = sh(fx.rules(&[]), &format!("chown 1000 {}", q(&inside)));
    assert_ne!(run.code, 0);
    assert_eq!(meta(&inside).uid(), 0);
    assert_eq!(refusals(&run.log), vec![Refusal::OwnershipChange]);
    // Outside: refused, unchanged.
    let run = sh(fx.rules(&[]), &format!("chown 0:0 {}", q(&outside)));
    assert_ne!(run.code, 0);
    assert_eq!(meta(&outside).gid(), 1234);
}

#[test]
fn lchown_acts_on_the_link_itself() {
    let fx = Fixture::new();
    let target = fx.file(&fx.w.join("t"), 0o644);
    let link = fx.w.join("l");
    std::os::unix::fs::symlink("t", &link).unwrap();
    for p in [&target, &link] {
        std::os::unix::fs::lchown(p, Some(0), Some(1234)).unwrap();
    }
    let c = cstr(&link);
    // SAFETY (child): one syscall.
    let run = confined(fx.rules(&[]), || {
        result(unsafe { libc::lchown(c.as_ptr(), u32::MAX, 0) })
    });
    assert_eq!(run.code, 0);
    assert_eq!(meta(&link).gid(), 0);
    assert_eq!(meta(&target).gid(), 1234);
    // chown (following) changes the target.
    // SAFETY (child): one syscall.
    let run = confined(fx.rules(&[]), || {
        result(unsafe { libc::chown(c.as_ptr(), u32::MAX, 0) })
    });
    assert_eq!(run.code, 0);
    assert_eq!(meta(&target).gid(), 0);
}

#[test]
fn xattrs_user_namespace_inside_only() {
    let fx = Fixture::new();
    let inside = fx.file(&fx.w.join("f"), 0o644);
    let outside = fx.file(&fx.o.join("f"), 0o644);
    let set_value = |path: &Path, name: &'static str, value: Vec<u8>| {
        let p = cstr(path);
        let n = std::ffi::CString::new(name).unwrap();
        confined(fx.rules(&[]), move || {
            // SAFETY (child): one syscall with live buffers.
            result(unsafe {
                libc::setxattr(
                    p.as_ptr(),
                    n.as_ptr(),
                    value.as_ptr().cast(),
                    value.len(),
                    0,
                )
            })
        })
    };
    let set = |path: &Path, name: &'static str| set_value(path, name, b"v1".to_vec());
    assert_eq!(set(&inside, "user.test").code, 0);
    assert_eq!(get_xattr(&inside, "user.test").as_deref(), Some(&b"v1"[..]));

    let run = set(&outside, "user.test");
    assert_eq!(run.code, libc::EPERM);
    assert_eq!(get_xattr(&outside, "user.test"), None);

    // A well-formed file capability (revision 2, 20 bytes): the policy's
    // namespace refusal.
    let mut caps = 0x0200_0000u32.to_le_bytes().to_vec();
    caps.resize(20, 0);
    for (name, value) in [("trusted.x", b"v1".to_vec()), ("security.capability", caps)] {
        let run = set_value(&inside, name, value);
        assert_eq!(run.code, libc::EPERM, "{name}");
        assert_eq!(refusals(&run.log), vec![Refusal::XattrNamespace]);
        assert_eq!(get_xattr(&inside, name), None);
    }
    // Red-team R6a F7: what the kernel answers from the name and value alone
    // comes first, inside and outside the write path, and is no refusal: a
    // malformed capability or ACL is EINVAL, a name in no namespace
    // EOPNOTSUPP.
    for path in [&inside, &outside] {
        for (name, want) in [
            ("security.capability", libc::EINVAL),
            ("system.posix_acl_access", libc::EINVAL),
            ("foo", libc::EOPNOTSUPP),
        ] {
            let run = set_value(path, name, b"v".to_vec());
            assert_eq!(run.code, want, "{name} {}", path.display());
            assert!(refusals(&run.log).is_empty(), "{name}: {:?}", run.log);
            assert_eq!(get_xattr(path, name), None);
        }
    }

    let p = cstr(&inside);
    // SAFETY (child): one syscall.
    let run = confined(fx.rules(&[]), || {
        result(unsafe { libc::removexattr(p.as_ptr(), c"user.test".as_ptr()) })
    });
    assert_eq!(run.code, 0);
    assert_eq!(get_xattr(&inside, "user.test"), None);
}

#[test]
fn touch_d_sets_times_inside_only() {
    let fx = Fixture::new();
    let inside = fx.file(&fx.w.join("f"), 0o644);
    let outside = fx.file(&fx.o.join("f"), 0o644);
    let before = meta(&outside).mtime();
    assert_eq!(
        sh(
            fx.rules(&[]),
            &format!("touch -d @981173106 {}", q(&inside))
        )
        .code,
        0
    );
    assert_eq!(meta(&inside).mtime(), 981_173_106);
    let run = sh(
        fx.rules(&[]),
        &format!("touch -d @981173106 {}", q(&outside)),
    );
    assert_ne!(run.code, 0);
    assert_eq!(meta(&outside).mtime(), before);
}

#[test]
fn utimensat_by_path_and_by_fd() {
    let fx = Fixture::new();
    let inside = cstr(&fx.file(&fx.w.join("f"), 0o644));
    let outside = cstr(&fx.file(&fx.o.join("f"), 0o644));
    let before = meta(&fx.o.join("f")).mtime();
    let times = [
        libc::timespec {
            tv_sec: 1_000_000,
            tv_nsec: 0,
        },
        libc::timespec {
            tv_sec: 2_000_000,
            tv_nsec: 0,
        },
    ];
    // SAFETY (child): one syscall with live buffers.
    let run = confined(fx.rules(&[]), || {
        result(unsafe { libc::utimensat(libc::AT_FDCWD, inside.as_ptr(), times.as_ptr(), 0) })
    });
    assert_eq!(run.code, 0);
    assert_eq!(meta(&fx.w.join("f")).mtime(), 2_000_000);
    // futimens = utimensat(fd, NULL, ...) on a read-only fd outside.
    let run = confined(fx.rules(&[]), || {
        // SAFETY (child): open + utimensat.
        unsafe {
            let fd = libc::open(outside.as_ptr(), libc::O_RDONLY);
            result(libc::futimens(fd, times.as_ptr()))
        }
    });
    assert_eq!(run.code, libc::EPERM);
    assert_eq!(meta(&fx.o.join("f")).mtime(), before);
}

#[test]
fn dirfd_relative_and_empty_path_forms() {
    let fx = Fixture::new();
    fx.file(&fx.w.join("f"), 0o644);
    fx.file(&fx.o.join("f"), 0o644);
    let (w, o) = (cstr(&fx.w), cstr(&fx.o));
    fn at(dir: &std::ffi::CString) -> impl FnOnce() -> i32 + '_ {
        move || {
            // SAFETY (child): open + fchmodat + fchownat(AT_EMPTY_PATH).
            unsafe {
                let d = libc::open(dir.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY);
                let r = result(libc::fchmodat(d, c"f".as_ptr(), 0o600, 0));
                if r != 0 {
                    return r;
                }
                let f = libc::openat(d, c"f".as_ptr(), libc::O_RDONLY);
                result(libc::fchownat(
                    f,
                    c"".as_ptr(),
                    u32::MAX,
                    0,
                    libc::AT_EMPTY_PATH,
                ))
            }
        }
    }
    assert_eq!(confined(fx.rules(&[]), at(&w)).code, 0);
    assert_eq!(mode(&fx.w.join("f")), 0o600);
    assert_eq!(confined(fx.rules(&[]), at(&o)).code, libc::EPERM);
    assert_eq!(mode(&fx.o.join("f")), 0o644);
}

#[test]
fn truncate_inside_only() {
    let fx = Fixture::new();
    let inside = cstr(&fx.file(&fx.w.join("f"), 0o644));
    let outside = cstr(&fx.file(&fx.o.join("f"), 0o644));
    // SAFETY (child): one syscall each.
    assert_eq!(
        confined(fx.rules(&[]), || result(unsafe {
            libc::truncate(inside.as_ptr(), 0)
        }))
        .code,
        0
    );
    assert_eq!(meta(&fx.w.join("f")).len(), 0);
    let run = confined(fx.rules(&[]), || {
        result(unsafe { libc::truncate(outside.as_ptr(), 0) })
    });
    // EACCES, as Landlock's truncate right answers.
    assert_eq!(run.code, libc::EACCES);
    assert_eq!(meta(&fx.o.join("f")).len(), 1);
}

#[test]
fn missing_objects_get_the_kernels_errno_and_the_log_round_trips() {
    let fx = Fixture::new();
    let missing = cstr(&fx.w.join("nope"));
    // SAFETY (child): one syscall.
    let run = confined(fx.rules(&[]), || {
        result(unsafe { libc::chmod(missing.as_ptr(), 0o600) })
    });
    assert_eq!(run.code, libc::ENOENT);
    assert_eq!(
        run.log.records[0].decision,
        BrokerDecision::Failed {
            errno: libc::ENOENT
        }
    );
    let json = serde_json::to_string(&run.log).unwrap();
    let back: BrokerLog = serde_json::from_str(&json).unwrap();
    assert_eq!(back, run.log);
}

#[test]
fn nofollow_forms_on_a_symlink_match_the_kernel() {
    let fx = Fixture::new();
    let target = fx.file(&fx.w.join("t"), 0o644);
    let link = cstr(&fx.w.join("l"));
    std::os::unix::fs::symlink("t", fx.w.join("l")).unwrap();
    // fchmodat2(AT_SYMLINK_NOFOLLOW) on a symlink: EOPNOTSUPP, target unchanged.
    let run = confined(fx.rules(&[]), || {
        // SAFETY (child): one raw syscall.
        let rc = unsafe {
            libc::syscall(
                452,
                libc::AT_FDCWD,
                link.as_ptr(),
                0o600,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        result(rc as i32)
    });
    assert_eq!(run.code, libc::EOPNOTSUPP);
    assert_eq!(mode(&target), 0o644);
    // lsetxattr(user.*) on a symlink: EPERM (as the kernel), target without the attribute.
    let run = confined(fx.rules(&[]), || {
        // SAFETY (child): one syscall with live buffers.
        result(unsafe {
            libc::lsetxattr(
                link.as_ptr(),
                c"user.a".as_ptr(),
                b"v".as_ptr().cast(),
                1,
                0,
            )
        })
    });
    assert_eq!(run.code, libc::EPERM);
    assert_eq!(get_xattr(&target, "user.a"), None);
    // Twin: setxattr follows the link and sets it on the target.
    let run = confined(fx.rules(&[]), || {
        // SAFETY (child): one syscall with live buffers.
        result(unsafe {
            libc::setxattr(
                link.as_ptr(),
                c"user.a".as_ptr(),
                b"v".as_ptr().cast(),
                1,
                0,
            )
        })
    });
    assert_eq!(run.code, 0);
    assert_eq!(get_xattr(&target, "user.a").as_deref(), Some(&b"v"[..]));
}

#[test]
fn unprivileged_caller_may_only_change_its_own_files() {
    let fx = Fixture::new();
    let mine = fx.file(&fx.w.join("mine"), 0o644);
    let roots = fx.file(&fx.w.join("roots"), 0o644);
    std::os::unix::fs::chown(&mine, Some(1000), Some(1000)).unwrap();
    let (m, r) = (cstr(&mine), cstr(&roots));
    let as_user = |path: &std::ffi::CString, gid: u32| {
        let p = path.clone();
        move || {
            // SAFETY (child): raw setresgid/setresuid, then chmod and chown.
            unsafe {
                if libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<u32>()) != 0
                    || libc::syscall(libc::SYS_setresgid, 1000, 1000, 1000) != 0
                    || libc::syscall(libc::SYS_setresuid, 1000, 1000, 1000) != 0
                {
                    return 98;
                }
                let a = result(libc::chmod(p.as_ptr(), 0o600));
                if a != 0 {
                    return a;
                }
                result(libc::chown(p.as_ptr(), u32::MAX, gid))
            }
        }
    };
    assert_eq!(confined(fx.rules(&[]), as_user(&m, 1000)).code, 0);
    assert_eq!(mode(&mine), 0o600);
    // Another's file: the kernel's own EPERM (R6b F5), no refusal.
    let run = confined(fx.rules(&[]), as_user(&r, 1000));
    assert_eq!(run.code, libc::EPERM);
    assert_eq!(refusals(&run.log), vec![]);
    assert_eq!(
        run.log.records[0].decision,
        BrokerDecision::Failed { errno: libc::EPERM }
    );
    assert_eq!(mode(&roots), 0o644);
    // chown of its own file to a group it is not in, without CAP_CHOWN:
    // the kernel's EPERM too.
    set_mode(&mine, 0o644);
    let run = confined(fx.rules(&[]), as_user(&m, 0));
    assert_eq!(run.code, libc::EPERM);
    assert_eq!(meta(&mine).gid(), 1000);
    assert_eq!(refusals(&run.log), vec![]);
    assert!(
        run.log.records.iter().any(|r| r.syscall.contains("chown")
            && r.decision == BrokerDecision::Failed { errno: libc::EPERM }),
        "{}",
        run.log.explain(5)
    );
}

#[test]
fn the_write_path_itself_may_change() {
    let fx = Fixture::new();
    set_mode(&fx.w, 0o755);
    assert_eq!(
        sh(fx.rules(&[]), &format!("chmod 750 {}", q(&fx.w))).code,
        0
    );
    assert_eq!(mode(&fx.w), 0o750);
    assert_ne!(
        sh(
            fx.rules(&[]),
            &format!("chmod 700 {}", q(fx.w.parent().unwrap()))
        )
        .code,
        0
    );
}

#[test]
fn rules_name_a_write_path_that_vanished() {
    let fx = Fixture::new();
    let policy = fx.policy(&[]);
    std::fs::remove_dir(&fx.w).unwrap();
    let err = sandbox_broker::BrokerRules::new(&policy).unwrap_err();
    assert!(
        err.to_string().contains(&fx.w.display().to_string()),
        "{err}"
    );
}

/// A write path that is one file admits exactly that file: its sibling in the
/// same directory, and a symlink swapped in for it, stay refused.
#[test]
fn a_file_write_path_admits_exactly_itself() {
    use sandbox_core::{ExpandContext, SandboxPolicy};
    let fx = Fixture::new();
    let file = fx.file(&fx.o.join("granted"), 0o644);
    let sibling = fx.file(&fx.o.join("sibling"), 0o644);
    let policy = SandboxPolicy {
        write_paths: vec![file.display().to_string()],
        ..SandboxPolicy::default()
    }
    .resolve(&ExpandContext::default())
    .expect("policy resolves");
    let rules = || sandbox_broker::BrokerRules::new(&policy).expect("rules");
    let run = sh(rules(), &format!("chmod 600 {}", q(&file)));
    assert_eq!(run.code, 0);
    assert_eq!(mode(&file), 0o600);
    let run = sh(rules(), &format!("chmod 600 {}", q(&sibling)));
    assert_ne!(run.code, 0);
    assert_eq!(mode(&sibling), 0o644);
    assert_eq!(refusals(&run.log), vec![Refusal::OutsideWritePaths]);
    // Replace the granted file by a symlink to the sibling: the object the
    // path now names is not the granted one.
    std::fs::remove_file(&file).unwrap();
    std::os::unix::fs::symlink(&sibling, &file).unwrap();
    let run = sh(rules(), &format!("chmod 600 {}", q(&file)));
    assert_ne!(run.code, 0);
    assert_eq!(mode(&sibling), 0o644);
}

/// What a metadata change on an object would show: mode, owner, times
/// (ctime too: every change sets it) and its extended attributes.
fn snapshot(fd: &std::os::fd::OwnedFd) -> (u32, u32, u32, [i64; 6], Vec<u8>) {
    use std::os::fd::AsRawFd;
    // SAFETY: stat is plain data; fstat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: our own fd and a live out-pointer.
    assert_eq!(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) }, 0);
    let mut names = vec![0u8; 4096];
    // SAFETY: our own fd and a live buffer of that length.
    let n = unsafe { libc::flistxattr(fd.as_raw_fd(), names.as_mut_ptr().cast(), names.len()) };
    names.truncate(n.max(0) as usize);
    (
        st.st_mode,
        st.st_uid,
        st.st_gid,
        [
            st.st_atime,
            st.st_atime_nsec,
            st.st_mtime,
            st.st_mtime_nsec,
            st.st_ctime,
            st.st_ctime_nsec,
        ],
        names,
    )
}

/// Opens an unlinked object the test process (the host) holds: an
/// `O_TMPFILE` made in `dir`, or (`deleted`) a file named there and unlinked.
fn unlinked_in(dir: &Path, deleted: bool) -> std::os::fd::OwnedFd {
    use std::os::fd::{FromRawFd, OwnedFd};
    let fd = if deleted {
        let name = dir.join("named");
        let c = cstr(&name);
        // SAFETY: plain open of a new file.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
                0o644,
            )
        };
        std::fs::remove_file(&name).expect("unlink");
        fd
    } else {
        let c = cstr(dir);
        // SAFETY: plain open of an unnamed file in `dir`.
        unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_TMPFILE | libc::O_RDWR | libc::O_CLOEXEC,
                0o644,
            )
        }
    };
    assert!(
        fd >= 0,
        "open in {}: {}",
        dir.display(),
        std::io::Error::last_os_error()
    );
    // SAFETY: fresh fd.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // Old times, so a futimens(NULL) would show.
    let old = [libc::timespec {
        tv_sec: 1_000_000_000,
        tv_nsec: 0,
    }; 2];
    // SAFETY: our own fd and two live timespecs.
    assert_eq!(
        unsafe { libc::futimens(std::os::fd::AsRawFd::as_raw_fd(&fd), old.as_ptr()) },
        0
    );
    fd
}

/// Every fd-form metadata change, each in its own confined child, on `fd`
/// (inherited): fchmod, fchown to the caller's own ids, futimens(NULL) and
/// fsetxattr of a `user.*` attribute. The errno of each (0: done).
fn fd_changes(rules: impl Fn() -> sandbox_broker::BrokerRules, fd: i32) -> Vec<(i32, BrokerLog)> {
    type Call = fn(i32) -> i32;
    let calls: [Call; 4] = [
        // SAFETY (child): one syscall each, on an inherited fd.
        |fd| result(unsafe { libc::fchmod(fd, 0o600) }),
        |fd| result(unsafe { libc::fchown(fd, libc::geteuid(), libc::getegid()) }),
        |fd| result(unsafe { libc::futimens(fd, std::ptr::null()) }),
        |fd| result(unsafe { libc::fsetxattr(fd, c"user.t".as_ptr(), b"v".as_ptr().cast(), 1, 0) }),
    ];
    calls
        .iter()
        .map(|call| {
            let run = confined(rules(), move || call(fd));
            (run.code, run.log)
        })
        .collect()
}

/// An unlinked object the run was handed from outside the write paths (the
/// host's `O_TMPFILE` or deleted file, as stdout or any fd) is refused every
/// fd-form metadata change, as its named twin is, and shows none; the same
/// made inside the write path (by anyone: only who may write there can) is
/// changed. Made inside and moved out by its directory, or made in a
/// write-deny path, it is refused too.
#[test]
fn unlinked_objects_are_changed_only_when_made_inside_a_write_path() {
    use std::os::fd::AsRawFd;
    let fx = Fixture::with_user_xattrs();
    std::fs::create_dir(fx.w.join("deny")).unwrap();
    std::fs::create_dir(fx.w.join("leaves")).unwrap();
    let rules = || fx.rules(&["deny"]);
    let named_outside = fx.file(&fx.o.join("named-twin"), 0o644);
    // SAFETY: memfd_create with a NUL-terminated name; the fd is owned below.
    let memfd = unsafe { libc::memfd_create(c"host".as_ptr(), libc::MFD_CLOEXEC) };
    assert!(memfd >= 0);
    // SAFETY: fresh fd.
    let memfd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(memfd) };
    let cases: [(&str, std::os::fd::OwnedFd, Option<Refusal>); 8] = [
        ("memfd", memfd, Some(Refusal::OutsideWritePaths)),
        (
            "O_TMPFILE outside",
            unlinked_in(&fx.o, false),
            Some(Refusal::OutsideWritePaths),
        ),
        (
            "deleted file outside",
            unlinked_in(&fx.o, true),
            Some(Refusal::OutsideWritePaths),
        ),
        ("O_TMPFILE in W", unlinked_in(&fx.w, false), None),
        ("deleted file in W", unlinked_in(&fx.w, true), None),
        (
            "O_TMPFILE in a write-deny path",
            unlinked_in(&fx.w.join("deny"), false),
            Some(Refusal::WriteDenyPath),
        ),
        (
            "O_TMPFILE whose directory left W",
            unlinked_in(&fx.w.join("leaves"), false),
            Some(Refusal::OutsideWritePaths),
        ),
        (
            "named file outside",
            {
                let f = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(&named_outside)
                    .unwrap();
                std::os::fd::OwnedFd::from(f)
            },
            Some(Refusal::OutsideWritePaths),
        ),
    ];
    std::fs::rename(fx.w.join("leaves"), fx.o.join("left")).unwrap();
    for (what, fd, refused) in &cases {
        let before = snapshot(fd);
        let runs = fd_changes(rules, fd.as_raw_fd());
        let after = snapshot(fd);
        match refused {
            Some(reason) => {
                for (code, log) in &runs {
                    assert_eq!(*code, libc::EPERM, "{what}: {log:?}");
                    assert_eq!(refusals(log), vec![reason.clone()], "{what}: {log:?}");
                }
                assert_eq!(after, before, "{what}: the object changed");
            }
            None => {
                for (code, log) in &runs {
                    assert_eq!(*code, 0, "{what}: {log:?}");
                    assert_eq!(performed(log), 1, "{what}: {log:?}");
                }
                assert_eq!(after.0 & 0o7777, 0o600, "{what}");
                assert_ne!(after.3, before.3, "{what}: times");
                assert!(
                    after.4.split(|&b| b == 0).any(|n| n == b"user.t"),
                    "{what}: xattrs"
                );
            }
        }
    }
}
