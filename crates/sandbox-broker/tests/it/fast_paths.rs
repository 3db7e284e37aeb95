//! The broker's shortcuts refuse what its general path refuses.
//!
//! * Fixed credentials ([`FixedCredentials`]): the broker takes one uid, gid,
//!   group list and no capability as every caller's instead of reading them
//!   per call; set-id stripping and the chmod/chown refusals still hold, the
//!   caller's umask still applies, and a child only vouches for the
//!   credentials when it really has them.
//! * `O_CREAT` opens are first tried as an `O_EXCL` create in the admitted
//!   parent: a symlink in the parent chain into a deny path, `..` that climbs
//!   out and back into a deny path, and a directory swapped for a symlink
//!   during the calls are refused as before, each beside its allowed twin.
//! * An fd hand-back pins the caller to the broker's CPU: the caller's own
//!   CPU mask is back before its call returns.
#![cfg(target_os = "linux")]

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::common::*;
use sandbox_broker::{BrokerDecision, BrokerRules, FixedCredentials, Refusal};

fn fixed() -> FixedCredentials {
    FixedCredentials::of_this_thread().expect("the test harness has one uid and one gid")
}

fn refusals(run: &Run) -> Vec<Refusal> {
    run.log
        .records
        .iter()
        .filter_map(|r| match &r.decision {
            BrokerDecision::Refused { reason } => Some(reason.clone()),
            _ => None,
        })
        .collect()
}

/// Forks a child that runs `f` (async-signal-safe) and returns its exit code.
fn in_child(f: impl FnOnce() -> i32) -> i32 {
    // SAFETY: the child only makes raw syscalls and exits with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        // SAFETY (child): _exit after async-signal-safe work.
        unsafe { libc::_exit(f()) };
    }
    wait(pid)
}

fn verify_code(fixed: &FixedCredentials) -> i32 {
    match fixed.verify_in_child() {
        Ok(()) => 0,
        Err(e) => e,
    }
}

#[test]
fn a_child_vouches_only_for_credentials_it_has() {
    let me = fixed();
    // The harness holds capabilities (root): not vouched for.
    assert_ne!(get_caps().1, 0, "the test runs with capabilities");
    assert_eq!(in_child(|| verify_code(&me)), libc::EPERM);
    // Every capability dropped, same ids: vouched for.
    assert_eq!(
        in_child(|| {
            let d = drop_all_caps();
            if d != 0 {
                return 100 + d;
            }
            verify_code(&me)
        }),
        0
    );
    // Another uid (a Command::uid in the child): not vouched for.
    assert_eq!(
        in_child(|| {
            let b = become_nobody();
            if b != 0 {
                return 100 + b;
            }
            verify_code(&me)
        }),
        libc::EPERM
    );
    // The twin: as nobody, nobody's own credentials are vouched for
    // (setresuid away from 0 clears every capability).
    let nobody = FixedCredentials::new(65534, 65534, vec![]);
    assert_eq!(
        in_child(|| {
            let b = become_nobody();
            if b != 0 {
                return 100 + b;
            }
            verify_code(&nobody)
        }),
        0
    );
}

/// Rules with fixed credentials; the confined child drops its capabilities
/// first, as the landlock backend's child does.
fn fixed_rules(fx: &Fixture, deny: &[&str]) -> BrokerRules {
    fx.rules(deny).with_fixed_credentials(fixed())
}

#[test]
fn fixed_credentials_keep_set_id_stripping_and_the_chmod_chown_refusals() {
    let fx = Fixture::new();
    let f = fx.file(&fx.w.join("suid"), 0o644);
    set_mode(&f, 0o4755);
    let own = fx.file(&fx.w.join("plain"), 0o644);
    let (cf, cown) = (cstr(&f), cstr(&own));
    let run = confined_entries(fixed_rules(&fx, &[".git"]), || {
        let d = drop_all_caps();
        if d != 0 {
            return 90 + d;
        }
        // SAFETY (child): raw syscalls on live NUL-terminated paths.
        unsafe {
            // Truncating without CAP_FSETID clears S_ISUID.
            if libc::truncate(cf.as_ptr(), 0) != 0 {
                return 1;
            }
            // Adding S_ISUID is refused ...
            if libc::chmod(cown.as_ptr(), 0o4755) == 0 || errno() != libc::EPERM {
                return 2;
            }
            // ... an ordinary chmod of the caller's own file is performed.
            if libc::chmod(cown.as_ptr(), 0o600) != 0 {
                return 3;
            }
            // Giving the file away fails EPERM: without CAP_CHOWN, the
            // kernel's own answer (no refusal).
            if libc::chown(cown.as_ptr(), 65534, u32::MAX) == 0 || errno() != libc::EPERM {
                return 4;
            }
        }
        0
    });
    assert_eq!(run.code, 0, "{}", run.log.explain(5));
    assert_eq!(std::fs::metadata(&f).unwrap().mode() & 0o7777, 0o755);
    assert_eq!(std::fs::metadata(&own).unwrap().mode() & 0o7777, 0o600);
    assert_eq!(std::fs::metadata(&own).unwrap().uid(), 0);
    let r = refusals(&run);
    assert_eq!(r, vec![Refusal::SetIdBits], "{r:?}");
}

/// Creates `a`, `d` (umask 027), `b` (umask 002) and, in a forked child
/// that sets umask 077, `c`, then `e` in the parent again (still 002: a fork
/// copies the umask); the modes they get, by name.
fn umask_modes(rules: BrokerRules, fx: &Fixture) -> Vec<(&'static str, u32)> {
    let names = ["a", "d", "b", "c", "e"];
    let [a, d, b, c, e] = names.map(|n| cstr(&fx.w.join(n)));
    let create = |p: &std::ffi::CStr| {
        // SAFETY (child): raw syscalls on a live NUL-terminated path.
        unsafe {
            let fd = libc::open(
                p.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
                0o666,
            );
            fd >= 0 && libc::close(fd) == 0
        }
    };
    let run = confined_entries(rules, || {
        let dropped = drop_all_caps();
        if dropped != 0 {
            return 90 + dropped;
        }
        // SAFETY (child): raw syscalls on live NUL-terminated paths.
        unsafe {
            libc::umask(0o027);
            if !create(&a) {
                return 1;
            }
            if libc::mkdir(d.as_ptr(), 0o777) != 0 {
                return 2;
            }
            libc::umask(0o002);
            if !create(&b) {
                return 3;
            }
            let pid = libc::fork();
            if pid == 0 {
                libc::umask(0o077);
                libc::_exit(if create(&c) { 0 } else { 1 });
            }
            let mut status = 0;
            if pid < 0 || libc::waitpid(pid, &mut status, 0) != pid || status != 0 {
                return 4;
            }
            if !create(&e) {
                return 5;
            }
        }
        0
    });
    assert_eq!(run.code, 0, "{}", run.log.explain(5));
    names
        .iter()
        .map(|n| {
            let mode = std::fs::metadata(fx.w.join(n))
                .unwrap()
                .permissions()
                .mode();
            (*n, mode & 0o777)
        })
        .collect()
}

const UMASK_MODES: [(&str, u32); 5] = [
    ("a", 0o640),
    ("d", 0o750),
    ("b", 0o664),
    ("c", 0o600),
    ("e", 0o664),
];

#[test]
fn fixed_credentials_still_apply_the_callers_umask() {
    let fx = Fixture::new();
    assert_eq!(umask_modes(fixed_rules(&fx, &[".git"]), &fx), UMASK_MODES);
}

/// With `umask` routed the broker keeps umasks between creates: each change,
/// in the process or a forked child, still applies to the next create.
#[test]
fn kept_umasks_follow_every_umask_call() {
    let fx = Fixture::new();
    let rules = fixed_rules(&fx, &[".git"]).with_umask_routed();
    assert_eq!(umask_modes(rules, &fx), UMASK_MODES);
}

/// Runs `sh -c cmd` confined with `.git/hooks` denied; per-call and fixed
/// credentials alike.
fn sh_both(fx: &Fixture, cmd: &str) -> [Run; 2] {
    [
        sh_entries(fx.rules(&[".git/hooks"]), cmd),
        sh_entries(fixed_rules(fx, &[".git/hooks"]), cmd),
    ]
}

fn hooks(fx: &Fixture) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(fx.w.join(".git/hooks"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn git_fixture() -> Fixture {
    let fx = Fixture::new();
    std::fs::create_dir_all(fx.w.join(".git/hooks")).unwrap();
    std::fs::create_dir(fx.w.join("sub")).unwrap();
    fx
}

#[test]
fn a_symlink_in_the_parent_chain_into_a_deny_path_is_refused() {
    let fx = git_fixture();
    std::os::unix::fs::symlink(".git/hooks", fx.w.join("lnk")).unwrap();
    std::os::unix::fs::symlink("sub", fx.w.join("ok")).unwrap();
    let w = q(&fx.w);
    for run in sh_both(
        &fx,
        &format!(
            "set -e; rm -f {w}/sub/g; ! ( : > {w}/lnk/pre-commit ); ! ( set -C; : > {w}/lnk/post-commit ); \
             : > {w}/ok/f; set -C; : > {w}/ok/g"
        ),
    ) {
        assert_eq!(run.code, 0, "{}", run.log.explain(5));
        let r = refusals(&run);
        assert_eq!(r, vec![Refusal::WriteDenyPath; 2], "{r:?}");
    }
    assert!(hooks(&fx).is_empty(), "{:?}", hooks(&fx));
    // Twin: the symlink to an allowed directory works.
    assert!(fx.w.join("sub/f").exists() && fx.w.join("sub/g").exists());
}

#[test]
fn dot_dot_that_climbs_back_into_a_deny_path_is_refused() {
    let fx = git_fixture();
    let (w, o) = (q(&fx.w), q(&fx.o));
    for run in sh_both(
        &fx,
        &format!(
            "set -e; ! ( : > {w}/sub/../.git/hooks/a ); ! ( : > {o}/../w/.git/hooks/b ); \
             ! ( cd {w}/sub && : > ../.git/hooks/c ); ! ( cd {w}/sub && set -C && : > ../.git//hooks/./d ); \
             : > {w}/sub/../sub/e; cd {w}/sub; : > ../sub/f"
        ),
    ) {
        assert_eq!(run.code, 0, "{}", run.log.explain(5));
        assert_eq!(refusals(&run), vec![Refusal::WriteDenyPath; 4]);
    }
    assert!(hooks(&fx).is_empty(), "{:?}", hooks(&fx));
    assert!(fx.w.join("sub/e").exists() && fx.w.join("sub/f").exists());
}

const SWAP_NAMES: usize = 3000;

#[test]
fn a_directory_swapped_for_a_symlink_during_creates_never_leaks_into_the_deny_path() {
    for fixed_creds in [false, true] {
        let fx = git_fixture();
        std::fs::create_dir(fx.w.join("d")).unwrap();
        std::os::unix::fs::symlink(".git/hooks", fx.w.join("alt")).unwrap();
        let names: Vec<_> = (0..SWAP_NAMES)
            .map(|i| cstr(&fx.w.join(format!("d/f{i}"))))
            .collect();
        // The harness (unconfined) swaps W/d and W/alt atomically, all along.
        let stop = Arc::new(AtomicBool::new(false));
        let swapper = {
            let (stop, d, alt) = (stop.clone(), cstr(&fx.w.join("d")), cstr(&fx.w.join("alt")));
            std::thread::spawn(move || {
                let mut swaps = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    // SAFETY: renameat2 on live NUL-terminated paths.
                    let rc = unsafe {
                        libc::syscall(
                            libc::SYS_renameat2,
                            libc::AT_FDCWD,
                            d.as_ptr(),
                            libc::AT_FDCWD,
                            alt.as_ptr(),
                            libc::RENAME_EXCHANGE,
                        )
                    };
                    assert_eq!(rc, 0, "exchange");
                    swaps += 1;
                }
                swaps
            })
        };
        let rules = if fixed_creds {
            fixed_rules(&fx, &[".git/hooks"])
        } else {
            fx.rules(&[".git/hooks"])
        };
        let counts = Shared::new(3);
        let run = confined_entries(rules, || {
            if fixed_creds && drop_all_caps() != 0 {
                return 90;
            }
            let (mut ok, mut refused, mut other) = (0, 0, 0);
            for (i, name) in names.iter().enumerate() {
                let excl = if i % 2 == 0 {
                    libc::O_EXCL
                } else {
                    libc::O_TRUNC
                };
                let flags = libc::O_WRONLY | libc::O_CREAT | excl | libc::O_CLOEXEC;
                // SAFETY (child): open/close on a live NUL-terminated path.
                let fd = unsafe { libc::open(name.as_ptr(), flags, 0o644) };
                if fd >= 0 {
                    ok += 1;
                    // SAFETY (child): closing the fd just opened.
                    unsafe { libc::close(fd) };
                } else if matches!(errno(), libc::EACCES | libc::EPERM) {
                    // EACCES for the deny path, EPERM for a swap seen mid-check.
                    refused += 1;
                } else {
                    other += 1;
                }
            }
            counts.set(0, ok);
            counts.set(1, refused);
            counts.set(2, other);
            0
        });
        stop.store(true, Ordering::Relaxed);
        let swaps = swapper.join().unwrap();
        assert_eq!(run.code, 0);
        let [ok, refused, other] = counts.to_vec()[..] else {
            unreachable!()
        };
        println!(
            "fixed {fixed_creds}: {ok} created, {refused} refused, {other} other; {swaps} swaps"
        );
        assert!(
            hooks(&fx).is_empty(),
            "leaked into the deny path: {:?}",
            hooks(&fx)
        );
        assert_eq!(other, 0);
        // Both outcomes were seen: the race was real.
        assert!(ok > 0 && refused > 0, "{ok} created, {refused} refused");
        // Twin: what was created is in the real directory (under either name).
        let real: usize = ["d", "alt"]
            .iter()
            .map(|n| fx.w.join(n))
            .filter(|p| !p.is_symlink())
            .map(|p| std::fs::read_dir(p).unwrap().count())
            .sum();
        assert_eq!(real, ok as usize);
        assert!(!Path::new(&fx.w.join(".git/hooks/f0")).exists());
    }
}

/// Sets each of `masks` in turn as the caller's CPU mask, creates a file
/// through the broker (which pins the caller to one CPU for the fd
/// hand-back) and checks the mask is still the one set: 0, or 10 + the
/// index of the first mask that changed.
fn masks_survive_creates(fx: &Fixture, masks: &[Vec<usize>]) -> Run {
    let file = cstr(&fx.w.join("f"));
    let size = std::mem::size_of::<libc::cpu_set_t>();
    confined_entries(fixed_rules(fx, &[".git"]), || {
        for (i, mask) in masks.iter().enumerate() {
            // SAFETY (child): cpu_set_t is plain data; CPU_SET and CPU_ISSET
            // take CPUs this machine has (below CPU_SETSIZE); pid 0 is this
            // thread; live masks and a live NUL-terminated path.
            unsafe {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                for &cpu in mask {
                    libc::CPU_SET(cpu, &mut set);
                }
                if libc::sched_setaffinity(0, size, &set) != 0 {
                    return 1;
                }
                let fd = libc::open(file.as_ptr(), libc::O_WRONLY | libc::O_CREAT, 0o644);
                if fd < 0 {
                    return 2;
                }
                libc::close(fd);
                let mut now: libc::cpu_set_t = std::mem::zeroed();
                if libc::sched_getaffinity(0, size, &mut now) != 0 {
                    return 3;
                }
                if !libc::CPU_EQUAL(&set, &now) {
                    return 10 + i as i32;
                }
            }
        }
        0
    })
}

/// The hand-back's pin never outlives the call: the caller keeps whichever
/// mask it had (every CPU, the last one alone, the first one alone).
#[test]
fn a_create_leaves_the_callers_cpu_mask_as_it_was() {
    // SAFETY: sysconf has no preconditions.
    let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize;
    let all: Vec<usize> = (0..cpus).collect();
    let masks = [all.clone(), vec![cpus - 1], vec![0], all];
    let fx = Fixture::new();
    let run = masks_survive_creates(&fx, &masks);
    assert_eq!(run.code, 0, "{}", run.log.explain(5));
    let opened = run
        .log
        .records
        .iter()
        .filter(|r| matches!(r.decision, BrokerDecision::Opened { .. }))
        .count();
    assert_eq!(opened, masks.len(), "{}", run.log.explain(5));
}

/// Confines the calling thread (and the threads and children it starts) to a
/// Landlock domain that handles READ_FILE and grants it beneath `readable`
/// only, as the run's domain leaves a new entry directly in an ancestor of a
/// read-deny path; `None` when the kernel has no Landlock.
fn read_file_only_beneath(readable: &[&str]) -> Option<()> {
    const READ_FILE: u64 = 1 << 2;
    #[repr(C)]
    struct RulesetAttr {
        handled_access_fs: u64,
    }
    #[repr(C, packed)]
    struct PathBeneath {
        allowed_access: u64,
        parent_fd: i32,
    }
    let attr = RulesetAttr {
        handled_access_fs: READ_FILE,
    };
    // SAFETY: a valid attribute of the size given.
    let ruleset = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            &attr as *const RulesetAttr,
            std::mem::size_of::<RulesetAttr>(),
            0u32,
        )
    };
    if ruleset < 0 {
        return None;
    }
    let ruleset = ruleset as i32;
    for path in readable {
        let Ok(dir) = std::fs::File::open(path) else {
            continue;
        };
        let rule = PathBeneath {
            allowed_access: READ_FILE,
            parent_fd: std::os::fd::AsRawFd::as_raw_fd(&dir),
        };
        // SAFETY: a live ruleset fd and a valid rule.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_landlock_add_rule,
                ruleset,
                1u32, // LANDLOCK_RULE_PATH_BENEATH
                &rule as *const PathBeneath,
                0u32,
            )
        };
        assert_eq!(rc, 0, "landlock_add_rule {path}");
    }
    // SAFETY: this thread's own no_new_privs and domain.
    unsafe {
        assert_eq!(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
        assert_eq!(
            libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0u32),
            0
        );
        libc::close(ruleset);
    }
    Some(())
}

/// An exclusive create the kernel makes and then refuses (Landlock's
/// file_open hook: no READ_FILE for an `O_RDWR` open of the new file) is
/// the answer: the broker, in the same domain, answers `EACCES` with the
/// file made, as the kernel does, and never decides it again (which found
/// the file it had just made and answered `EEXIST`, so `git init` could not
/// lock its config). Twins: the write-only create opens; an `O_RDWR` create
/// where READ_FILE is granted opens; an existing name is `EEXIST`.
#[test]
fn an_exclusive_create_refused_after_it_is_made_is_answered_once() {
    let fx = Fixture::new();
    let readable = fx.w.join("readable");
    std::fs::create_dir(&readable).unwrap();
    std::fs::write(fx.w.join("there"), "x").unwrap();
    let [rdwr, wronly, granted, there] =
        ["rdwr.lock", "wronly.lock", "readable/rdwr.lock", "there"].map(|n| cstr(&fx.w.join(n)));
    let rules = fx.rules(&[]);
    let readable_s = readable.display().to_string();
    // On a thread of its own: the domain is the broker's and the child's.
    let run = std::thread::scope(|s| {
        s.spawn(|| {
            read_file_only_beneath(&["/proc", "/sys", "/etc", "/usr", "/dev", &readable_s])
                .expect("Landlock (the tests run on a kernel with it)");
            confined_entries(rules, || {
                let excl = |p: &std::ffi::CStr, access: i32| {
                    // SAFETY (child): raw syscalls on a live NUL-terminated path.
                    let fd = unsafe {
                        libc::open(p.as_ptr(), access | libc::O_CREAT | libc::O_EXCL, 0o644)
                    };
                    let r = result(fd);
                    if fd >= 0 {
                        // SAFETY (child): our own fd.
                        unsafe { libc::close(fd) };
                    }
                    r
                };
                if excl(&rdwr, libc::O_RDWR) != libc::EACCES {
                    return 1;
                }
                if excl(&wronly, libc::O_WRONLY) != 0 {
                    return 2;
                }
                if excl(&granted, libc::O_RDWR) != 0 {
                    return 3;
                }
                if excl(&there, libc::O_RDWR) != libc::EEXIST {
                    return 4;
                }
                0
            })
        })
        .join()
        .unwrap()
    });
    assert_eq!(run.code, 0, "{}", run.log.explain(10));
    // Made once, by the one open: left as the kernel leaves it.
    for made in ["rdwr.lock", "wronly.lock", "readable/rdwr.lock"] {
        assert!(fx.w.join(made).exists(), "{made}");
    }
}
