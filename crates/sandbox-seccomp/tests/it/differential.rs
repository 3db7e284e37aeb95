//! The seccompiler program and the libseccomp program agree on the same inputs.
//!
//! Every row agrees except the pinned known gap ([`KNOWN_GAPS`], see the
//! `libseccomp_backend` docs: libseccomp drops a syscall's conditional rules
//! next to an unconditional fallback). Those rows are compared too: each
//! must still disagree somewhere, so the list shrinks as the backend is
//! fixed and cannot hide a new disagreement. Nothing here is ignored:
//! `cargo xtask ci` runs it with `--features libseccomp`, and a host without
//! libseccomp-dev (and pkg-config) fails that build rather than skipping it.
#![cfg(all(feature = "libseccomp", target_os = "linux", target_arch = "x86_64"))]

use crate::common::*;
use proptest::prelude::*;
use sandbox_seccomp::{compile_spec, libseccomp_backend, Filter, FilterSpec, HIGHEST_KNOWN};

fn pairs() -> &'static [(FilterSpec, Filter, Filter)] {
    static P: std::sync::OnceLock<Vec<(FilterSpec, Filter, Filter)>> = std::sync::OnceLock::new();
    P.get_or_init(|| {
        FilterSpec::all()
            .map(|s| {
                let ours = compile_spec(&s).unwrap();
                let theirs = libseccomp_backend::compile_spec(&s).unwrap();
                println!(
                    "{s:?}: seccompiler {} vs libseccomp {} instructions",
                    ours.len(),
                    theirs.len()
                );
                (s, ours, theirs)
            })
            .collect()
    })
}

fn agree(i: usize, d: &SeccompData) {
    let (spec, ours, theirs) = &pairs()[i];
    let (a, b) = (run(ours.instructions(), d), run(theirs.instructions(), d));
    assert_eq!(
        a,
        b,
        "{spec:?} {d:x?}: seccompiler {} libseccomp {}",
        ret_name(a),
        ret_name(b)
    );
}

fn data(nr: u32, args: [u64; 6]) -> SeccompData {
    SeccompData {
        nr,
        arch: AUDIT_ARCH_X86_64,
        ip: 0,
        args,
    }
}

/// The rows whose libseccomp program differs from ours (the known gap of
/// the libseccomp backend): rows with argument checks whose fallback is not
/// the default action. Today that is every row with argument checks in some
/// policy, so the differential proves the unchecked rows, the default and
/// the architecture checks, and pins the rest.
const KNOWN_GAPS: &[(i64, &str)] = &[
    (libc::SYS_open, "open"),
    (libc::SYS_ioctl, "ioctl"),
    (libc::SYS_socket, "socket"),
    (libc::SYS_sendto, "sendto"),
    (libc::SYS_sendmsg, "sendmsg"),
    (libc::SYS_socketpair, "socketpair"),
    (libc::SYS_clone, "clone"),
    (libc::SYS_creat, "creat"),
    (libc::SYS_mknod, "mknod"),
    (libc::SYS_personality, "personality"),
    (libc::SYS_setpriority, "setpriority"),
    (libc::SYS_sched_setparam, "sched_setparam"),
    (libc::SYS_sched_setscheduler, "sched_setscheduler"),
    (libc::SYS_sched_setaffinity, "sched_setaffinity"),
    (libc::SYS_ioprio_set, "ioprio_set"),
    (libc::SYS_openat, "openat"),
    (libc::SYS_mknodat, "mknodat"),
    (libc::SYS_prlimit64, "prlimit64"),
    (libc::SYS_sendmmsg, "sendmmsg"),
    (libc::SYS_sched_setattr, "sched_setattr"),
    (libc::SYS_seccomp, "seccomp"),
    (libc::SYS_setsockopt, "setsockopt"),
    (libc::SYS_getsockopt, "getsockopt"),
    (libc::SYS_prctl, "prctl"),
];

fn known_gap(nr: u32) -> bool {
    KNOWN_GAPS.iter().any(|(n, _)| *n == i64::from(nr))
}

/// Argument vectors that reach the checked rows' interesting values.
const ARGS: &[[u64; 6]] = &[
    [0; 6],
    [u64::MAX; 6],
    [1, 2, 3, 4, 5, 6],
    [0x5412; 6],
    [2, 1, 0, 0, 0, 0],
    [10, 1, 6, 0, 0, 0],
    [1, 0, 0, 0, 0, 0],
    [0, 0x2000_0000, 0, 0, 0, 0],
];

#[test]
fn every_known_number_agrees_outside_the_known_gap() {
    for i in 0..pairs().len() {
        for nr in (0..=HIGHEST_KNOWN + 64).filter(|nr| !known_gap(*nr)) {
            for args in ARGS {
                agree(i, &data(nr, *args));
            }
        }
        agree(
            i,
            &SeccompData {
                arch: AUDIT_ARCH_I386,
                ..data(0, [0; 6])
            },
        );
        agree(i, &data(0x4000_0001, [0; 6]));
    }
}

/// The pin: every row of [`KNOWN_GAPS`] still disagrees for some policy and
/// arguments (the fixed [`ARGS`], then a deterministic pseudo-random sweep
/// of values the checks look at). When one agrees everywhere, the backend
/// was fixed for it: take it off the list (and the `libseccomp_backend`
/// docs).
#[test]
fn the_known_gap_is_still_a_gap() {
    let mut x: u64 = 0x1234_5678_9abc_def1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let picks = [
        0u64,
        1,
        2,
        3,
        62,
        0x5412,
        0x541c,
        0x10000,
        0x1000_0000,
        0x2000_0000,
        u64::MAX,
    ];
    for (nr, name) in KNOWN_GAPS {
        let nr = u32::try_from(*nr).unwrap();
        let differs_on = |args: [u64; 6], i: usize| {
            let (_, ours, theirs) = &pairs()[i];
            let d = data(nr, args);
            run(ours.instructions(), &d) != run(theirs.instructions(), &d)
        };
        let fixed = ARGS
            .iter()
            .any(|args| (0..pairs().len()).any(|i| differs_on(*args, i)));
        let swept = fixed
            || (0..200_000).any(|_| {
                let mut args = [0u64; 6];
                for a in &mut args {
                    let r = next();
                    let pick = picks[(r as usize / 4) % picks.len()];
                    *a = match r % 4 {
                        0 => next(),
                        1 => r % 64,
                        2 => pick,
                        _ => (next() << 32) | (pick & 0xffff_ffff),
                    };
                }
                differs_on(args, (next() % 256) as usize)
            });
        assert!(
            swept,
            "{name} ({nr}) now agrees: remove it from KNOWN_GAPS and the backend's docs"
        );
    }
}

/// The rows without argument checks already agree: this part runs.
#[test]
fn unchecked_rows_agree() {
    for i in 0..pairs().len() {
        let checked: Vec<u32> = sandbox_seccomp::table(&pairs()[i].0)
            .into_iter()
            .filter(|e| matches!(e.rule, sandbox_seccomp::Rule::AllowIf { .. }))
            .map(|e| e.nr)
            .collect();
        for nr in (0..=HIGHEST_KNOWN + 64).filter(|n| !checked.contains(n)) {
            for args in [[0u64; 6], [u64::MAX; 6]] {
                agree(i, &data(nr, args));
            }
        }
        agree(
            i,
            &SeccompData {
                arch: AUDIT_ARCH_I386,
                ..data(0, [0; 6])
            },
        );
        agree(i, &data(0x4000_0001, [0; 6]));
    }
}

fn arg() -> impl Strategy<Value = u64> {
    prop_oneof![
        any::<u64>(),
        0u64..64,
        (
            any::<u32>(),
            prop::sample::select(vec![
                0x5412u32, 0x541c, 0x5413, 0x10000, 0x10000000, 0x20000000
            ])
        )
            .prop_map(|(h, l)| (u64::from(h) << 32) | u64::from(l)),
    ]
}

/// Every row with argument checks, in any policy.
fn checked_rows() -> Vec<u32> {
    let mut nrs: Vec<u32> = pairs()
        .iter()
        .flat_map(|(spec, ..)| sandbox_seccomp::table(spec))
        .filter(|e| {
            matches!(
                e.rule,
                sandbox_seccomp::Rule::AllowIf { .. } | sandbox_seccomp::Rule::RefuseIf { .. }
            )
        })
        .map(|e| e.nr)
        .collect();
    nrs.sort_unstable();
    nrs.dedup();
    assert!(!nrs.is_empty());
    nrs
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4096, ..ProptestConfig::default() })]
    /// Random arguments on every checked row: the programs agree, or the
    /// row is one of the pinned [`KNOWN_GAPS`].
    #[test]
    fn checked_syscalls_agree_outside_the_known_gap(
        nr in prop::sample::select(checked_rows()),
        args in proptest::array::uniform6(arg()),
        i in 0usize..320,
    ) {
        let (spec, ours, theirs) = &pairs()[i];
        let d = data(nr, args);
        let (a, b) = (run(ours.instructions(), &d), run(theirs.instructions(), &d));
        prop_assert!(
            a == b || known_gap(nr),
            "{:?} {:x?}: seccompiler {} libseccomp {}, and {} is not a known gap",
            spec, d, ret_name(a), ret_name(b), nr
        );
    }
}
