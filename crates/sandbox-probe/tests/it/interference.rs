//! The self-test against a process that changes its scratch while it runs
//! (red team R6b F2): an inotify racer, as the red team's `proberacer`,
//! watching the scratch's base and acting on the probe's directories as
//! they appear. The probe is either not fooled (passes) or says it was
//! interfered with, never that the backend does not enforce, so no
//! `on_unsupported` fallback runs a command unconfined. Positive controls:
//! the undisturbed probe passes; the same racer on another directory
//! changes nothing; a backend that really lets writes through still fails.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use std::collections::HashMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use crate::support::{Kind, TestBackend};
use sandbox_core::{Backend, UnavailableKind};
use sandbox_probe::{enforcement_self_test_in, gate_in, GateFailure, GateReport, ProbeResult};

/// What the racer does to each probe scratch it sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Attack {
    /// Creates `outside/created` as soon as `outside/` appears (the red
    /// team's racer): the forbidden file, made by someone else.
    PlantCreated,
    /// Creates a stray file in `outside/`.
    PlantStray,
    /// Removes `grant/control` as soon as it appears: a positive control
    /// that seems not to have happened.
    RemoveControl,
    /// Replaces `outside/` with a new empty directory.
    ReplaceOutside,
}

struct Racer {
    stop: Arc<AtomicBool>,
    hits: Arc<AtomicUsize>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Racer {
    fn start(base: &Path, attack: Attack) -> Racer {
        let stop = Arc::new(AtomicBool::new(false));
        let hits = Arc::new(AtomicUsize::new(0));
        let (s, h, base) = (stop.clone(), hits.clone(), base.to_path_buf());
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || race(&base, attack, &s, &h, ready_tx));
        ready_rx.recv().expect("the racer watches");
        Racer {
            stop,
            hits,
            thread: Some(thread),
        }
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

impl Drop for Racer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn watch(fd: i32, dir: &Path) -> i32 {
    let c = CString::new(dir.as_os_str().as_bytes()).unwrap();
    // SAFETY: a live inotify fd and a NUL-terminated path.
    unsafe { libc::inotify_add_watch(fd, c.as_ptr(), libc::IN_CREATE | libc::IN_MOVED_TO) }
}

fn race(
    base: &Path,
    attack: Attack,
    stop: &AtomicBool,
    hits: &AtomicUsize,
    ready: std::sync::mpsc::Sender<()>,
) {
    // SAFETY: plain syscall.
    let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
    assert!(fd >= 0);
    let mut dirs: HashMap<i32, PathBuf> = HashMap::new();
    let base_wd = watch(fd, base);
    assert!(base_wd >= 0);
    dirs.insert(base_wd, base.to_path_buf());
    ready.send(()).unwrap();
    let hit = || {
        hits.fetch_add(1, Ordering::SeqCst);
    };
    let mut buf = vec![0u8; 64 * 1024];
    while !stop.load(Ordering::SeqCst) {
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut pfd, 1, 20) };
        // SAFETY: a live fd and a buffer of that length.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            continue;
        }
        let mut at = 0usize;
        while at < n as usize {
            // SAFETY: the kernel wrote whole events; read_unaligned copes with alignment.
            let ev: libc::inotify_event =
                unsafe { std::ptr::read_unaligned(buf[at..].as_ptr().cast()) };
            let name_start = at + std::mem::size_of::<libc::inotify_event>();
            let raw = &buf[name_start..name_start + ev.len as usize];
            at = name_start + ev.len as usize;
            let name =
                String::from_utf8_lossy(raw.split(|b| *b == 0).next().unwrap_or(&[])).into_owned();
            let Some(dir) = dirs.get(&ev.wd).cloned() else {
                continue;
            };
            let path = dir.join(&name);
            if ev.wd == base_wd && name.starts_with("sandbox-probe-") {
                let wd = watch(fd, &path);
                if wd >= 0 {
                    dirs.insert(wd, path.clone());
                }
                // It may hold its directories already.
                for sub in ["outside", "grant"] {
                    if path.join(sub).is_dir() {
                        act(attack, &path.join(sub), sub, fd, &mut dirs, &hit);
                    }
                }
            } else if name == "outside" || name == "grant" {
                act(attack, &path, &name, fd, &mut dirs, &hit);
            } else if name == "control"
                && attack == Attack::RemoveControl
                && std::fs::remove_file(&path).is_ok()
            {
                hit();
            }
        }
    }
    // SAFETY: closes our own fd.
    unsafe { libc::close(fd) };
}

fn act(
    attack: Attack,
    dir: &Path,
    name: &str,
    fd: i32,
    dirs: &mut HashMap<i32, PathBuf>,
    hit: &dyn Fn(),
) {
    let done = match (attack, name) {
        (Attack::PlantCreated, "outside") => {
            std::fs::write(dir.join("created"), "forbidden\n").is_ok()
        }
        (Attack::PlantStray, "outside") => std::fs::write(dir.join("stray"), "x").is_ok(),
        (Attack::ReplaceOutside, "outside") => {
            let old = dir.with_file_name("outside.old");
            std::fs::rename(dir, &old).is_ok() && std::fs::create_dir(dir).is_ok()
        }
        (Attack::RemoveControl, "grant") => {
            let wd = watch(fd, dir);
            if wd >= 0 {
                dirs.insert(wd, dir.to_path_buf());
            }
            false
        }
        _ => false,
    };
    if done {
        hit();
    }
}

/// A private base for the scratch (what `sandbox` passes as its trusted
/// directory), and its canonical path.
fn base() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = std::fs::canonicalize(dir.path()).unwrap();
    (dir, path)
}

/// Passed, or interfered with and said so in its error's kind; never a
/// verdict on the backend. Returns whether it was interfered with.
#[track_caller]
fn passed_or_interfered(report: &GateReport) -> bool {
    if report.passed {
        assert!(!report.interfered());
        return false;
    }
    for p in report.probes() {
        assert!(
            matches!(
                p.result,
                ProbeResult::Interfered { .. } | ProbeResult::Witnessed
            ),
            "{} probe: a verdict on the backend from a disturbed scratch: {:?}",
            p.probe.as_str(),
            p.result
        );
    }
    assert!(report.interfered(), "{report:?}");
    let leaked: &'static GateReport = Box::leak(Box::new(report.clone()));
    let unavailable = GateFailure { report: leaked }.to_unavailable();
    assert_eq!(unavailable.kind(), UnavailableKind::SelfTestInterfered);
    assert!(
        unavailable.reason.contains("interfered with")
            && unavailable.reason.contains("sandbox-probe-"),
        "{}",
        unavailable.reason
    );
    true
}

fn each_attack(backend: &dyn Backend) {
    for attack in [
        Attack::PlantCreated,
        Attack::PlantStray,
        Attack::RemoveControl,
        Attack::ReplaceOutside,
    ] {
        // Until the racer has acted and the probe said it was interfered
        // with (at once, unless a loaded host lets the probe finish before
        // the racer acts: passing is right then too); every self-test is
        // passed or interfered with, never a verdict on the backend.
        let (mut hits, mut interfered, mut rounds) = (0, 0, 0);
        while rounds < 20 && (hits == 0 || interfered == 0) {
            rounds += 1;
            let (_keep, base) = base();
            let racer = Racer::start(&base, attack);
            let report = enforcement_self_test_in(backend, Some(&base));
            hits += racer.hits();
            drop(racer);
            if passed_or_interfered(&report) {
                interfered += 1;
                eprintln!(
                    "{} {attack:?}: interfered: {}",
                    backend.name(),
                    report.problems().join("; ")
                );
            }
        }
        eprintln!(
            "{} {attack:?}: {rounds} rounds, {hits} hits, {interfered} interfered",
            backend.name()
        );
        assert!(hits > 0, "{attack:?}: the racer never acted");
        assert!(interfered > 0, "{attack:?}: never interfered with");
    }
}

#[test]
fn a_racer_in_the_scratch_is_interference_never_a_failed_backend() {
    each_attack(&TestBackend::new("test-raced", Kind::Working));
}

#[test]
fn a_racer_in_the_real_landlock_backends_scratch_is_interference() {
    each_attack(&sandbox_landlock::LandlockBackend::new().expect("Landlock is available here"));
}

/// Positive controls: undisturbed, and with the racer on another
/// directory, the probe passes in its base, and leaves nothing there.
#[test]
fn undisturbed_the_probe_passes_in_its_base() {
    let (_keep, base) = base();
    let (_other, elsewhere) = self::base();
    let backend = TestBackend::new("test-undisturbed", Kind::Working);
    let report = enforcement_self_test_in(&backend, Some(&base));
    assert!(report.passed, "{:?}", report.problems());
    let racer = Racer::start(&elsewhere, Attack::PlantCreated);
    let report = enforcement_self_test_in(&backend, Some(&base));
    drop(racer);
    assert!(report.passed, "{:?}", report.problems());
    let checked = report
        .write
        .checks
        .iter()
        .map(|c| c.attempted.clone())
        .collect::<Vec<_>>()
        .join(" ");
    assert!(checked.contains(base.to_str().unwrap()), "{checked}");
    assert_eq!(std::fs::read_dir(&base).unwrap().count(), 0);
}

/// A backend that lets writes through still fails the write probe by its
/// own report (open(2) succeeded), racer or not: the errno decides, and a
/// file planted beside it does not make it "interfered" instead.
#[test]
fn a_backend_that_lets_writes_through_still_fails() {
    let (_keep, base) = base();
    let backend = TestBackend::new("test-raced-ignores", Kind::IgnoresWritePaths);
    let report = enforcement_self_test_in(&backend, Some(&base));
    assert!(!report.passed && !report.interfered());
    let ProbeResult::Failed { observed, .. } = &report.write.result else {
        panic!("{:?}", report.write.result);
    };
    assert!(observed.contains("open(2) succeeded"), "{observed}");
}

/// An interfered report is not cached: the next gate call, undisturbed,
/// runs the self-test again and passes.
#[test]
fn an_interfered_gate_is_not_cached() {
    let (_keep, base) = base();
    let backend = TestBackend::new("test-interfered-then-clean", Kind::Working);
    let racer = Racer::start(&base, Attack::PlantCreated);
    let err = gate_in(&backend, Some(&base)).unwrap_err();
    drop(racer);
    assert!(err.report.interfered(), "{err}");
    assert_eq!(
        err.to_unavailable().kind(),
        UnavailableKind::SelfTestInterfered
    );
    let report = gate_in(&backend, Some(&base)).expect("undisturbed, it passes");
    assert!(report.passed);
    assert!(sandbox_probe::cached("test-interfered-then-clean").is_some());
}
