//! Read-deny paths are treated like write-deny paths for every metadata
//! change: an object beneath one is refused, its sibling is changed.
#![cfg(target_os = "linux")]

use std::ffi::CString;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::common::*;
use sandbox_broker::{BrokerDecision, Refusal};

/// The four families, by path, on `path`; 0 or errno (async-signal-safe).
fn change(which: &str, path: &CString) -> i32 {
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
    unsafe {
        result(match which {
            "chmod" => libc::chmod(path.as_ptr(), 0o600),
            "utimensat" => libc::utimensat(libc::AT_FDCWD, path.as_ptr(), times.as_ptr(), 0),
            "setxattr" => libc::setxattr(
                path.as_ptr(),
                c"user.k".as_ptr(),
                b"v".as_ptr().cast(),
                1,
                0,
            ),
            "truncate" => libc::truncate(path.as_ptr(), 0),
            _ => return 99,
        })
    }
}

/// Whether `which` took effect on `path` (created 0644 with one byte).
fn changed(which: &str, path: &Path) -> bool {
    let m = std::fs::metadata(path).expect("stat");
    match which {
        "chmod" => m.mode() & 0o777 == 0o600,
        "utimensat" => m.mtime() == 2_000_000,
        "setxattr" => get_xattr(path, "user.k").is_some(),
        "truncate" => m.len() == 0,
        _ => unreachable!(),
    }
}

#[test]
fn every_change_beneath_a_read_deny_path_is_refused_and_its_sibling_performed() {
    let fx = Fixture::with_user_xattrs();
    for which in ["chmod", "utimensat", "setxattr", "truncate"] {
        let env = fx.file(&fx.w.join(".env"), 0o644);
        let other = fx.file(&fx.w.join("other"), 0o644);
        let rules = || fx.read_deny_rules(&[&env]);
        // Positive control: the sibling.
        let c = cstr(&other);
        let run = confined(rules(), || change(which, &c));
        assert_eq!(run.code, 0, "{which}: {}", run.log.explain(5));
        assert!(changed(which, &other), "{which} on the sibling");
        // The denied file.
        let c = cstr(&env);
        let run = confined(rules(), || change(which, &c));
        assert_eq!(run.code, libc::EPERM, "{which}");
        assert!(!changed(which, &env), "{which} on .env");
        assert_eq!(
            run.log.records[0].decision,
            BrokerDecision::Refused {
                reason: Refusal::ReadDenyPath
            },
            "{which}"
        );
        let text = run.log.explain(5);
        assert!(text.contains("refused, beneath a read-deny path"), "{text}");
        std::fs::remove_file(&env).expect("rm");
        std::fs::remove_file(&other).expect("rm");
    }
}

#[test]
fn a_read_deny_directory_covers_its_contents_fds_and_links_to_it() {
    let fx = Fixture::new();
    let d = fx.w.join("secrets");
    std::fs::create_dir(&d).expect("mkdir");
    let inner = fx.file(&d.join("k"), 0o644);
    let sibling = fx.file(&fx.w.join("k"), 0o644);
    std::os::unix::fs::symlink("secrets/k", fx.w.join("link")).expect("symlink");
    let rules = || fx.read_deny_rules(&[&d]);
    let fchmod = |path: &Path| {
        let c = cstr(path);
        confined(rules(), move || {
            // SAFETY (child): open + fchmod.
            unsafe {
                let fd = libc::open(c.as_ptr(), libc::O_RDONLY);
                if fd < 0 {
                    return 98;
                }
                result(libc::fchmod(fd, 0o600))
            }
        })
    };
    // Positive control: fd-based and through a path, on the sibling.
    assert_eq!(fchmod(&sibling).code, 0);
    assert_eq!(mode(&sibling), 0o600);
    let run = fchmod(&inner);
    assert_eq!(run.code, libc::EPERM);
    assert_eq!(mode(&inner), 0o644);
    for path in [&inner, &fx.w.join("link"), &d] {
        let run = sh(rules(), &format!("chmod 700 {}", q(path)));
        assert_ne!(run.code, 0, "{}", path.display());
        assert_eq!(
            run.log.records[0].decision,
            BrokerDecision::Refused {
                reason: Refusal::ReadDenyPath
            }
        );
    }
    assert_eq!(mode(&inner), 0o644);
    assert_eq!(sh(rules(), &format!("chmod 700 {}", q(&fx.w))).code, 0);
}
