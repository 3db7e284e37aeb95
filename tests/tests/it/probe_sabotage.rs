//! A confined run cannot make another launch's self-test send it down the
//! `on_unsupported = warn` fallback unconfined (red team R6b F2, High).
//!
//! The attacker is a `sandbox run` allowed to write where a self-test's
//! scratch could lie (`-w /tmp` for nobody, `-w /run` for root) running an
//! inotify racer (this test binary, [`RACER_ENV`] set) that plants
//! `outside/created` in every probe scratch it sees, as the red team's
//! `proberacer`. Each victim is a launch with no cached verdict (a fresh
//! copy of the binary) under `--on-unsupported warn` whose command writes
//! outside its policy: it either runs confined (the write refused) or
//! refuses as interfered with (125); it never falls back to the noop
//! backend and the file outside never appears. Root's scratch lies in
//! `/run/sandbox`, which the attacker's run write-denies: the racer never
//! reaches it and every victim runs confined. Positive control: without the
//! racer, the victim runs confined. Root and nobody.
#![cfg(target_os = "linux")]

use std::collections::HashMap;
use std::ffi::CString;
use std::io::{BufRead, BufReader};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sandbox_tests::{copy_for_exec, is_root, sandbox_bin, shared_dir, users};

/// Set (to the directories to watch, `:`-separated) in the racer's process.
const RACER_ENV: &str = "IT_PROBE_RACER";

fn watch(fd: i32, dir: &Path) -> i32 {
    let c = CString::new(dir.as_os_str().as_bytes()).unwrap();
    // SAFETY: a live inotify fd and a NUL-terminated path.
    unsafe { libc::inotify_add_watch(fd, c.as_ptr(), libc::IN_CREATE) }
}

/// The racer: plants `outside/created` in each `sandbox-probe-*` directory
/// appearing in the watched directories, printing `planted PATH` for each,
/// until killed (at most 60 s).
fn racer(bases: &str) {
    // SAFETY: plain syscall.
    let fd = unsafe { libc::inotify_init1(libc::IN_CLOEXEC) };
    assert!(fd >= 0);
    let mut dirs: HashMap<i32, (PathBuf, bool)> = HashMap::new();
    for base in bases.split(':') {
        let wd = watch(fd, Path::new(base));
        if wd >= 0 {
            dirs.insert(wd, (PathBuf::from(base), true));
        }
    }
    println!("ready {}", dirs.len());
    let plant = |outside: &Path| {
        if std::fs::write(outside.join("created"), "forbidden\n").is_ok() {
            println!("planted {}", outside.display());
        }
    };
    let end = Instant::now() + Duration::from_secs(60);
    let mut buf = vec![0u8; 64 * 1024];
    while Instant::now() < end {
        // SAFETY: a live fd and a buffer of that length.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            break;
        }
        let mut at = 0usize;
        while at < n as usize {
            // SAFETY: the kernel wrote whole events; read_unaligned copes with alignment.
            let ev: libc::inotify_event =
                unsafe { std::ptr::read_unaligned(buf[at..].as_ptr().cast()) };
            let start = at + std::mem::size_of::<libc::inotify_event>();
            let raw = &buf[start..start + ev.len as usize];
            at = start + ev.len as usize;
            let name =
                String::from_utf8_lossy(raw.split(|b| *b == 0).next().unwrap_or(&[])).into_owned();
            let Some((dir, is_base)) = dirs.get(&ev.wd).cloned() else {
                continue;
            };
            let path = dir.join(&name);
            if is_base && name.starts_with("sandbox-probe-") {
                let wd = watch(fd, &path);
                if wd >= 0 {
                    dirs.insert(wd, (path.clone(), false));
                }
                if path.join("outside").is_dir() {
                    plant(&path.join("outside"));
                }
            } else if !is_base && name == "outside" {
                plant(&path);
            }
        }
    }
}

/// The racer's entry: runs only inside the attacker's run ([`RACER_ENV`]
/// set); in the test binary's own run it is the test below's helper and
/// checks that the racer plants in a scratch-like directory it can reach.
#[test]
fn racer_in_a_run() {
    if let Ok(bases) = std::env::var(RACER_ENV) {
        racer(&bases);
        return;
    }
    // Its own check: the racer plants in a directory shaped like a scratch.
    let base = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(&exe)
        .args(["probe_sabotage::racer_in_a_run", "--exact", "--nocapture"])
        .env(RACER_ENV, base.path())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let line = ready(&mut out);
    assert!(line.starts_with("ready 1"), "{line}");
    let scratch = base.path().join("sandbox-probe-test");
    std::fs::create_dir(&scratch).unwrap();
    std::fs::create_dir(scratch.join("outside")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !scratch.join("outside/created").exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(
        std::fs::read_to_string(scratch.join("outside/created")).unwrap(),
        "forbidden\n"
    );
}

/// The racer's `ready N` line (the test harness prints its own lines first).
fn ready(out: &mut impl BufRead) -> String {
    let mut line = String::new();
    loop {
        line.clear();
        if out.read_line(&mut line).unwrap() == 0 || line.starts_with("ready") {
            return line;
        }
    }
}

fn as_user(nobody: bool, program: &Path) -> Command {
    let mut cmd = if nobody {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(program);
        c
    } else {
        Command::new(program)
    };
    cmd.current_dir("/tmp")
        .env_remove("SANDBOX_CONFIG")
        .env("XDG_CONFIG_HOME", "/nonexistent/sandbox-tests-config")
        .env_remove("XDG_RUNTIME_DIR");
    cmd
}

/// One victim launch: `--on-unsupported warn`, a command that writes
/// `proof` outside its write path. Returns whether it ran confined (else
/// it refused as interfered with).
#[track_caller]
fn victim(nobody: bool, bin: &Path, work: &Path, proof: &Path) -> bool {
    let out = as_user(nobody, bin)
        .args(["run", "--on-unsupported", "warn", "-w"])
        .arg(work)
        .args([
            "--",
            "/bin/sh",
            "-c",
            "echo x > \"$1\"; echo status $?",
            "sh",
        ])
        .arg(proof)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !proof.exists(),
        "nobody {nobody}: the victim wrote outside its policy: {out:?}"
    );
    assert!(
        !stderr.contains("falling back to the noop backend"),
        "nobody {nobody}: {stderr}"
    );
    if out.status.code() == Some(125) {
        assert!(
            stderr.contains("interfered with") && stderr.contains("sandbox-probe-"),
            "nobody {nobody}: refused, but not as interfered with: {stderr}"
        );
        return false;
    }
    assert!(
        out.status.success() && stdout.starts_with("status ") && stdout.trim() != "status 0",
        "nobody {nobody}: {out:?}"
    );
    true
}

#[test]
fn a_racing_run_never_sends_a_launch_unconfined() {
    let racer_exe = std::env::current_exe().unwrap();
    for nobody in users() {
        // A fresh binary: no cached verdict, every launch runs the self-test.
        let (_bins, bins) = shared_dir();
        let bin = bins.join("sandbox");
        copy_for_exec(&sandbox_bin(), &bin);
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        let (_work, work) = shared_dir();
        let (_outside, outside) = shared_dir();
        let proof = outside.join("unconfined-proof");

        // Positive control: undisturbed, the victim runs confined.
        assert!(victim(nobody, &bin, &work, &proof), "nobody {nobody}");

        // The attacker: a run that may write where a scratch could lie.
        let root = !nobody && is_root();
        let (write, bases) = if !root {
            ("/tmp", "/tmp".to_owned())
        } else {
            ("/run", "/run:/run/sandbox".to_owned())
        };
        let mut attacker = as_user(nobody, &sandbox_bin())
            .args(["run", "--timeout", "60", "-w", write, "--"])
            .arg(&racer_exe)
            .args(["probe_sabotage::racer_in_a_run", "--exact", "--nocapture"])
            .env(RACER_ENV, &bases)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(attacker.stdout.take().unwrap());
        let line = ready(&mut out);
        assert!(line.starts_with("ready "), "nobody {nobody}: {line:?}");
        let reader = std::thread::spawn(move || {
            out.lines()
                .map_while(Result::ok)
                .filter(|l| l.starts_with("planted "))
                .collect::<Vec<_>>()
        });
        let mut confined = 0;
        for _ in 0..3 {
            if victim(nobody, &bin, &work, &proof) {
                confined += 1;
            }
        }
        // SAFETY: signals the runner this test started.
        unsafe { libc::kill(attacker.id() as i32, libc::SIGTERM) };
        attacker.wait().unwrap();
        let planted = reader.join().unwrap();
        eprintln!(
            "nobody {nobody}: {confined} of 3 victims ran confined, the rest refused as \
             interfered with; the racer planted {} times: {planted:?}",
            planted.len()
        );
        if root {
            // Root's scratch lies in /run/sandbox, write-denied in the
            // attacker's run: never reached, every victim confined.
            assert!(
                planted.iter().all(|p| !p.contains("/run/sandbox/")),
                "{planted:?}"
            );
            assert_eq!(confined, 3);
        }
    }
}
