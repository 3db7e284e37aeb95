//! The hardening classes at the Landlock ABIs users have (Ubuntu 22.04: 1,
//! Debian 12: 2, Ubuntu 24.04: 4; tested at 1, 3, 5 and the host's), each
//! attack beside its allowed twin. Where Landlock lacks a right at an ABI,
//! another layer (seccomp, the broker) must hold; what cannot be held is a
//! named gap in the report.
#![cfg(target_os = "linux")]

use crate::common::*;
use sandbox_core::{Axis, Backend, Level};
use sandbox_landlock::LandlockBackend;
use std::net::TcpListener;

/// The ABIs every class is checked at (`None`: the host's).
const ABIS: [Option<i32>; 4] = [Some(1), Some(3), Some(5), None];

struct Setup {
    inside: Temp,
    outside: Temp,
}

fn setup() -> Setup {
    let s = Setup {
        inside: temp(),
        outside: temp(),
    };
    for dir in [&s.inside.path, &s.outside.path] {
        std::fs::write(dir.join("f"), "content").unwrap();
    }
    s
}

fn py(code: &str) -> String {
    format!("{PYTHON} -c '{code}'")
}

#[test]
fn writes_outside_are_refused_at_every_abi() {
    for abi in ABIS {
        let s = setup();
        let policy = resolve(write_policy(&[&s.inside.path], true));
        let (i, o) = (s.inside.path.join("f"), s.outside.path.join("f"));
        ok(&sh_at(abi, &policy, &format!("echo new > {}", i.display())));
        refused(&sh_at(abi, &policy, &format!("echo new > {}", o.display())));
        refused(&sh_at(
            abi,
            &policy,
            &format!("echo new > {}/g", s.outside.path.display()),
        ));
        assert_eq!(std::fs::read_to_string(&o).unwrap(), "content", "{abi:?}");
        assert!(!s.outside.path.join("g").exists(), "{abi:?}");
    }
}

#[test]
fn truncation_outside_is_refused_at_every_abi() {
    for abi in ABIS {
        let s = setup();
        let policy = resolve(write_policy(&[&s.inside.path], true));
        let (i, o) = (s.inside.path.join("f"), s.outside.path.join("f"));
        let ro_trunc = |p: &std::path::Path| {
            py(&format!(
                "import os; os.open(\"{}\", os.O_RDONLY | os.O_TRUNC)",
                p.display()
            ))
        };
        // The read-only O_TRUNC open is refused everywhere, inside too.
        denied(&sh_at(abi, &policy, &ro_trunc(&o)));
        denied(&sh_at(abi, &policy, &ro_trunc(&i)));
        refused(&sh_at(
            abi,
            &policy,
            &format!("truncate -s 0 {}", o.display()),
        ));
        refused(&sh_at(abi, &policy, &format!(": > {}", o.display())));
        assert_eq!(std::fs::read_to_string(&o).unwrap(), "content", "{abi:?}");
        assert_eq!(std::fs::read_to_string(&i).unwrap(), "content", "{abi:?}");
        // Twins: a writable O_TRUNC open and truncate(2) inside work.
        ok(&sh_at(abi, &policy, &format!(": > {}", i.display())));
        assert_eq!(std::fs::read_to_string(&i).unwrap(), "", "{abi:?}");
        std::fs::write(&i, "content").unwrap();
        ok(&sh_at(
            abi,
            &policy,
            &format!("truncate -s 2 {}", i.display()),
        ));
        assert_eq!(std::fs::read_to_string(&i).unwrap(), "co", "{abi:?}");
    }
}

#[test]
fn metadata_outside_is_refused_at_every_abi() {
    for abi in ABIS {
        let s = setup();
        let policy = resolve(write_policy(&[&s.inside.path], true));
        let (i, o) = (s.inside.path.join("f"), s.outside.path.join("f"));
        let mtime = |p: &std::path::Path| std::fs::metadata(p).unwrap().modified().unwrap();
        let before = mtime(&o);
        // futimens on a read-only fd, utimensat by path, chmod.
        let futimens = |p: &std::path::Path| {
            py(&format!(
                "import os; fd = os.open(\"{}\", os.O_RDONLY); os.utime(fd, (0, 0))",
                p.display()
            ))
        };
        denied(&sh_at(abi, &policy, &futimens(&o)));
        refused(&sh_at(
            abi,
            &policy,
            &format!("touch -d 2001-01-01 {}", o.display()),
        ));
        refused(&sh_at(abi, &policy, &format!("chmod 600 {}", o.display())));
        assert_eq!(mtime(&o), before, "{abi:?}");
        // Twins inside.
        ok(&sh_at(abi, &policy, &futimens(&i)));
        assert_eq!(
            mtime(&i),
            std::time::UNIX_EPOCH,
            "{abi:?}: the brokered futimens set the time"
        );
        ok(&sh_at(abi, &policy, &format!("chmod 600 {}", i.display())));
    }
}

#[test]
fn network_and_spawn_denials_hold_at_every_abi() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let connect = py(&format!(
        "import socket; socket.create_connection((\"127.0.0.1\", {port}), timeout=30)"
    ));
    for abi in ABIS {
        let s = setup();
        let open = resolve(write_policy(&[&s.inside.path], true));
        let mut closed = write_policy(&[&s.inside.path], false);
        ok(&sh_at(abi, &open, &connect));
        denied(&sh_at(abi, &resolve(closed.clone()), &connect));
        closed.deny_subprocess = true;
        let closed = resolve(closed);
        ok(&sh_at(abi, &closed, "exec /bin/true"));
        let err = denied(&sh_at(abi, &closed, "/bin/true; echo ran"));
        assert!(err.contains("Cannot fork"), "{abi:?}: {err}");
    }
}

/// Below ABI 6 the signal scope is missing: the report says so and calls
/// the enforcement partial; at the host's ABI it does not.
#[test]
fn the_report_names_what_a_lower_abi_cannot_cover() {
    let t = temp();
    let policy = resolve(write_policy(&[&t.path], false));
    let host = LandlockBackend::new().unwrap();
    let argv = ["/bin/true".into()];
    let spawn_gaps = |b: LandlockBackend| {
        let report = b.prepare(&policy, &argv).unwrap().report;
        let spawn = report.axes.iter().find(|a| a.axis == Axis::Spawn).cloned();
        (report, spawn.unwrap().level)
    };
    let (report, level) = spawn_gaps(host);
    assert_eq!(level, Level::Full, "{report:?}");
    let (report, level) = spawn_gaps(host.with_abi_ceiling(5).unwrap());
    match level {
        Level::Partial { gaps } => assert!(gaps.iter().any(|g| g.contains("signals")), "{gaps:?}"),
        other => panic!("ABI 5 should be partial: {other:?}"),
    }
    assert!(
        report.details[0].contains("lowered by SANDBOX_TEST_LANDLOCK_ABI=5"),
        "{:?}",
        report.details
    );
    // The ceiling only lowers: asking for more than the kernel has changes nothing.
    let abi = host.with_abi_ceiling(7).unwrap().abi();
    assert_eq!(abi.effective, host.abi().effective);
    assert!(host.with_abi_ceiling(0).is_err());
}

/// Signals to the launching process are refused from ABI 6 (the scope),
/// and the twin: the command signals its own child.
#[test]
fn signal_scope_holds_from_abi_6() {
    let t = temp();
    let policy = resolve(write_policy(&[&t.path], true));
    ok(&sh_plain("kill -0 $PPID"));
    refused(&sh_at(None, &policy, "kill -0 $PPID"));
    ok(&sh_at(None, &policy, "sleep 5 & kill $!"));
}
