//! `cargo xtask stress [--quick]`: many sequential and concurrent runs of the
//! CLI, each leaving a background descendant behind, then a check that
//! nothing of them is left: no process, cgroup, temporary directory, socket
//! or fd.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// What the runs could leave behind, as seen from outside.
#[derive(Debug, PartialEq, Eq)]
struct Residue {
    /// Live processes whose command line carries the stress marker.
    processes: Vec<i32>,
    /// `sandbox-run-*` cgroups.
    cgroups: BTreeSet<String>,
    /// `sandbox-probe-*`, `sandbox-tmp-*` and `sandbox-conformance-*` dirs in the temp dirs.
    temp_dirs: BTreeSet<String>,
    /// Unix sockets in this network namespace.
    unix_sockets: usize,
    /// This process's open fds.
    own_fds: usize,
}

const MARKER: &str = "sandbox-stress-marker";

pub fn main(args: &[String]) -> Result<(), String> {
    let quick = args.iter().any(|a| a == "--quick");
    if let Some(bad) = args.iter().find(|a| *a != "--quick") {
        return Err(format!("unknown stress flag {bad:?}; expected --quick"));
    }
    let (sequential, concurrent) = if quick { (100, 16) } else { (1000, 64) };
    let bin = crate::dist()?;
    let scratch = std::env::temp_dir().join(format!("xtask-stress-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).map_err(|e| format!("{}: {e}", scratch.display()))?;
    let before = residue();
    let one = |i: usize| -> Result<(), String> {
        // Each run leaves a descendant (a double-forked sleeper) behind.
        let script = format!(
            "(sh -c 'sleep 30; :' {MARKER} &) ; echo {i} > {}/out-{i}",
            scratch.display()
        );
        let out = Command::new(&bin)
            .args(["run", "-w"])
            .arg(&scratch)
            .args(["--", "/bin/sh", "-c", &script, MARKER])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("run {i}: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "run {i} failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(())
    };
    let started = std::time::Instant::now();
    for i in 0..sequential {
        one(i)?;
    }
    let seq_time = started.elapsed();
    let started = std::time::Instant::now();
    let results: Vec<Result<(), String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..concurrent)
            .map(|i| s.spawn(move || one(sequential + i)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a run thread panicked".into()))
            })
            .collect()
    });
    let conc_time = started.elapsed();
    results.into_iter().collect::<Result<Vec<()>, String>>()?;
    let written = (0..sequential + concurrent)
        .filter(|i| scratch.join(format!("out-{i}")).exists())
        .count();
    let _ = std::fs::remove_dir_all(&scratch);
    let after = residue();
    println!(
        "stress: {sequential} sequential runs in {:.1} s, {concurrent} concurrent in {:.1} s; {written} of {} wrote their file",
        seq_time.as_secs_f64(),
        conc_time.as_secs_f64(),
        sequential + concurrent
    );
    println!("stress: checked processes carrying the marker, sandbox-run-* cgroups, sandbox temp dirs, unix sockets, own fds");
    println!("stress: before {before:?}");
    println!("stress: after  {after:?}");
    if written != sequential + concurrent {
        return Err("some runs did not do their work".into());
    }
    // Older residue may be swept by these runs; nothing new may appear.
    let new = !after.processes.is_empty()
        || !after.cgroups.is_subset(&before.cgroups)
        || !after.temp_dirs.is_subset(&before.temp_dirs)
        || after.unix_sockets > before.unix_sockets
        || after.own_fds > before.own_fds;
    if new {
        return Err("the runs left something behind (see before/after)".into());
    }
    println!("stress: nothing left behind");
    Ok(())
}

fn residue() -> Residue {
    Residue {
        processes: marked_processes(),
        cgroups: run_cgroups(),
        temp_dirs: temp_dirs(),
        unix_sockets: std::fs::read_to_string("/proc/net/unix")
            .map(|t| t.lines().count().saturating_sub(1))
            .unwrap_or(0),
        own_fds: std::fs::read_dir("/proc/self/fd")
            .map(|d| d.count())
            .unwrap_or(0),
    }
}

fn marked_processes() -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out: Vec<i32> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map(|s| {
                    s.rsplit(')')
                        .next()
                        .unwrap_or("")
                        .trim_start()
                        .starts_with('Z')
                })
                .unwrap_or(true);
            !zombie
                && std::fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|c| c.windows(MARKER.len()).any(|w| w == MARKER.as_bytes()))
        })
        .collect();
    out.sort_unstable();
    out
}

fn cgroup2_mount() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    mounts.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        (right.split_whitespace().next()? == "cgroup2")
            .then(|| left.split_whitespace().nth(4).map(PathBuf::from))
            .flatten()
    })
}

fn run_cgroups() -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let Some(root) = cgroup2_mount() else {
        return out;
    };
    let mut todo = vec![root];
    while let Some(dir) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.starts_with("sandbox-run-") {
                    out.insert(e.path().display().to_string());
                }
                todo.push(e.path());
            }
        }
    }
    out
}

fn temp_dirs() -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut bases = vec![std::env::temp_dir(), PathBuf::from("/run")];
    if let Some(rt) = std::env::var_os("XDG_RUNTIME_DIR") {
        bases.push(PathBuf::from(rt));
    }
    for base in bases {
        let Ok(entries) = std::fs::read_dir(&base) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if ["sandbox-probe-", "sandbox-tmp-", "sandbox-conformance-"]
                .iter()
                .any(|p| name.starts_with(p))
            {
                out.insert(Path::new(&base).join(name).display().to_string());
            }
        }
    }
    out
}
