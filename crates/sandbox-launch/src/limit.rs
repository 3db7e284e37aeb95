//! Resource limits on a whole run, held by cgroups: memory, processes and
//! CPU time across every process the run starts.
//!
//! Each limit is set where this host lets the runner set it, in order:
//!
//! * **cgroup v2**: in the run's own cgroup (see [`crate::contain`]), when
//!   its parent hands it the controller (`cgroup.controllers` lists it;
//!   Documentation/admin-guide/cgroup-v2.rst, "Enabling and Disabling").
//! * **cgroup v1**: in a cgroup of the run's own beneath the runner's in
//!   the controller's v1 hierarchy (hybrid hosts bind `memory`, `pids` and
//!   `cpu` there), which the command joins before it execs by writing `0`
//!   to the group's `cgroup.procs` (a pid of 0 names the writer, in v1 as
//!   in v2: `cgroup_procs_write_start` in kernel/cgroup/cgroup.c; the
//!   memory and pids tests in tests/tests/it/limits.rs show the join holds).
//!
//! A command cannot leave or raise its limits: both need writes to files
//! under `/sys/fs/cgroup`, which Landlock refuses outside the write paths.
//! A limit that no cgroup can hold is reported as not held; the runner
//! refuses such a run unless the caller allowed running without it.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sandbox_core::{PreExecHook, ResourceLimits};
use serde::{Deserialize, Serialize};

/// A resource a run can be limited in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum LimitKind {
    /// Memory of all the run's processes together, swap included.
    Memory,
    /// Processes and threads alive at once.
    Pids,
    /// CPU time per period.
    Cpu,
}

impl LimitKind {
    /// The `sandbox run` flag that sets it.
    pub fn flag(self) -> &'static str {
        match self {
            LimitKind::Memory => "--memory",
            LimitKind::Pids => "--pids",
            LimitKind::Cpu => "--cpu",
        }
    }

    fn controller(self) -> &'static str {
        match self {
            LimitKind::Memory => "memory",
            LimitKind::Pids => "pids",
            LimitKind::Cpu => "cpu",
        }
    }
}

/// How one requested limit fared in a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitRecord {
    /// The resource.
    pub kind: LimitKind,
    /// The limit asked for, as written (`64M`, `50`, `0.5`).
    pub requested: String,
    /// What held it (`cgroup v2`, `cgroup v1`); `None` when nothing did.
    pub held_by: Option<String>,
    /// Why nothing held it, when nothing did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_held: Option<String>,
    /// How often the run met the limit: processes killed for memory,
    /// forks refused for pids, periods throttled for CPU.
    pub hits: u64,
}

impl LimitRecord {
    /// Whether the limit ended processes or refused them (CPU throttling
    /// slows a run but never ends one).
    pub fn stopped_something(&self) -> bool {
        self.hits > 0 && self.kind != LimitKind::Cpu
    }
}

/// One limit as set: where its files are.
#[derive(Debug)]
struct Set {
    kind: LimitKind,
    requested: String,
    place: Option<Place>,
    not_held: Option<String>,
}

#[derive(Debug)]
enum Place {
    /// The run's own cgroup v2.
    V2(PathBuf),
    /// A v1 group made for this run (index into `RunLimits::v1`).
    V1(usize),
}

/// A cgroup made for this run in a v1 hierarchy, removed when dropped.
#[derive(Debug)]
struct V1Group {
    dir: PathBuf,
    procs: OwnedFd,
}

/// The limits of one run, set before the command starts (none by
/// default).
#[derive(Debug, Default)]
pub struct RunLimits {
    set: Vec<Set>,
    v1: Vec<V1Group>,
    /// The v1 groups of the run this one is nested in.
    parents: Vec<PathBuf>,
}

/// Period for CPU quotas, in microseconds (the kernel's default).
const CPU_PERIOD_US: u64 = 100_000;
/// The smallest quota the kernel accepts, in microseconds.
const CPU_MIN_QUOTA_US: u64 = 1_000;

impl RunLimits {
    /// Sets each of `limits`: in `v2` (the run's own cgroup v2, if it has
    /// one) where that cgroup has the controller, else in a v1 hierarchy.
    pub fn set(limits: &ResourceLimits, v2: Option<&Path>, name: &str) -> Self {
        Self::set_beneath(limits, v2, name, &[])
    }

    /// As [`RunLimits::set`], each v1 group made beneath the one of
    /// `parents` in the same hierarchy ([`RunLimits::v1_groups`] of another
    /// run), where there is one: the kernel charges what this run uses to
    /// that run's limits too (pids and memory are hierarchical in v1:
    /// Documentation/admin-guide/cgroup-v1/pids.rst, and memory.rst
    /// "Hierarchy support", `memory.use_hierarchy` always 1 since Linux
    /// 5.16; CFS quotas bound a group's subtree, sched-bwc.rst).
    pub fn set_beneath(
        limits: &ResourceLimits,
        v2: Option<&Path>,
        name: &str,
        parents: &[PathBuf],
    ) -> Self {
        let mut run = RunLimits {
            parents: parents.to_vec(),
            ..RunLimits::default()
        };
        for (kind, requested) in wanted(limits) {
            let values = values(kind, limits);
            let placed = match v2.filter(|dir| has_controller(dir, kind)) {
                Some(dir) => write_all(dir, &values.v2).map(|()| Place::V2(dir.to_owned())),
                None => run.v1_group(kind, name).and_then(|i| {
                    write_all(&run.v1[i].dir, &values.v1)?;
                    Ok(Place::V1(i))
                }),
            };
            let (place, not_held) = match placed {
                Ok(place) => (Some(place), None),
                Err(e) => (None, Some(e.to_string())),
            };
            run.set.push(Set {
                kind,
                requested,
                place,
                not_held,
            });
        }
        run
    }

    /// Each of `limits`, held by nothing, for `why`.
    pub fn unavailable(limits: &ResourceLimits, why: &str) -> Self {
        let mut run = RunLimits::default();
        for (kind, requested) in wanted(limits) {
            run.set.push(Set {
                kind,
                requested,
                place: None,
                not_held: Some(why.to_owned()),
            });
        }
        run
    }

    /// The limits that were asked for but are not held, each as
    /// `--memory 64M (why)`.
    pub fn unheld(&self) -> Vec<String> {
        self.set
            .iter()
            .filter(|s| s.place.is_none())
            .map(|s| {
                format!(
                    "{} {} ({})",
                    s.kind.flag(),
                    s.requested,
                    s.not_held.as_deref().unwrap_or("not available")
                )
            })
            .collect()
    }

    /// A hook that moves the child into the run's v1 groups before it
    /// execs; `None` when there are none.
    pub fn join_hook(&self) -> Option<PreExecHook> {
        if self.v1.is_empty() {
            return None;
        }
        let fds: Vec<RawFd> = self.v1.iter().map(|g| g.procs.as_raw_fd()).collect();
        // SAFETY: the closure makes only write(2) calls on fds that outlive
        // the spawn (they belong to `self`, dropped after the run), and
        // allocates nothing.
        Some(unsafe {
            PreExecHook::new(move || {
                for &fd in &fds {
                    if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                        // Reading errno allocates nothing.
                        let errno = io::Error::last_os_error().raw_os_error().unwrap_or(0);
                        return Err(sandbox_core::encode_pre_exec_error(errno));
                    }
                }
                Ok(())
            })
        })
    }

    /// The run's v1 groups (for a run nested in it, [`RunLimits::set_beneath`]).
    pub fn v1_groups(&self) -> Vec<PathBuf> {
        self.v1.iter().map(|g| g.dir.clone()).collect()
    }

    /// How each limit fared, read after the run.
    pub fn records(&self) -> Vec<LimitRecord> {
        self.set
            .iter()
            .map(|s| {
                let (held_by, hits) = match &s.place {
                    Some(Place::V2(dir)) => (Some("cgroup v2"), hits(s.kind, dir, false)),
                    Some(Place::V1(i)) => (Some("cgroup v1"), hits(s.kind, &self.v1[*i].dir, true)),
                    None => (None, 0),
                };
                LimitRecord {
                    kind: s.kind,
                    requested: s.requested.clone(),
                    held_by: held_by.map(str::to_owned),
                    not_held: s.not_held.clone(),
                    hits,
                }
            })
            .collect()
    }

    /// The run's group in `kind`'s v1 hierarchy, made on first use (`cpu`
    /// may share a hierarchy with `cpuacct`, so groups are per directory).
    fn v1_group(&mut self, kind: LimitKind, name: &str) -> io::Result<usize> {
        let own = v1_dir(kind.controller())?;
        // Beneath the enclosing run's group in this hierarchy, if it has one.
        let base = self
            .parents
            .iter()
            .find(|p| p.parent() == Some(own.as_path()))
            .cloned()
            .unwrap_or(own);
        let dir = base.join(name);
        if let Some(i) = self.v1.iter().position(|g| g.dir == dir) {
            return Ok(i);
        }
        crate::contain::sweep_stale_v1(&base);
        std::fs::create_dir(&dir).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot create a cgroup in {}: {e}", base.display()),
            )
        })?;
        let procs = match crate::contain::open(&dir.join("cgroup.procs"), libc::O_WRONLY) {
            Ok(fd) => fd,
            Err(e) => {
                let _ = std::fs::remove_dir(&dir);
                return Err(e);
            }
        };
        self.v1.push(V1Group { dir, procs });
        Ok(self.v1.len() - 1)
    }
}

impl Drop for V1Group {
    fn drop(&mut self) {
        // The run's processes are gone by now (ended through the run's
        // containment), but the kernel may take a moment to release them.
        let deadline = Instant::now() + Duration::from_millis(500);
        while std::fs::remove_dir(&self.dir).is_err() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// The limits set in `limits`, each with its value as written.
fn wanted(limits: &ResourceLimits) -> impl Iterator<Item = (LimitKind, String)> {
    [
        limits.memory.map(|m| (LimitKind::Memory, m.to_string())),
        limits.pids.map(|p| (LimitKind::Pids, p.to_string())),
        limits.cpu.map(|c| (LimitKind::Cpu, c.to_string())),
    ]
    .into_iter()
    .flatten()
}

/// The files to write for one limit, in order, per cgroup version; a file
/// marked optional may be missing (no swap accounting).
struct Values {
    v2: Vec<(&'static str, String, bool)>,
    v1: Vec<(&'static str, String, bool)>,
}

fn values(kind: LimitKind, limits: &ResourceLimits) -> Values {
    match kind {
        LimitKind::Memory => {
            let b = limits.memory.map_or(0, |m| m.bytes()).to_string();
            Values {
                // Swap would let the run hold more than its limit.
                v2: vec![
                    ("memory.max", b.clone(), false),
                    ("memory.swap.max", "0".into(), true),
                ],
                // memsw (memory + swap) may not be below the memory limit,
                // so it is written second.
                v1: vec![
                    ("memory.limit_in_bytes", b.clone(), false),
                    ("memory.memsw.limit_in_bytes", b, true),
                ],
            }
        }
        LimitKind::Pids => {
            let n = limits.pids.map_or(0, |p| p.get()).to_string();
            Values {
                v2: vec![("pids.max", n.clone(), false)],
                v1: vec![("pids.max", n, false)],
            }
        }
        LimitKind::Cpu => {
            let millis = u64::from(limits.cpu.map_or(1000, |c| c.millis()));
            // quota/period = millis/1000; a longer period keeps tiny
            // fractions above the kernel's smallest quota.
            let mut period = CPU_PERIOD_US;
            let mut quota = millis * period / 1000;
            if quota < CPU_MIN_QUOTA_US {
                period = 1_000_000;
                quota = millis * period / 1000;
            }
            Values {
                v2: vec![("cpu.max", format!("{quota} {period}"), false)],
                v1: vec![
                    ("cpu.cfs_period_us", period.to_string(), false),
                    ("cpu.cfs_quota_us", quota.to_string(), false),
                ],
            }
        }
    }
}

fn write_all(dir: &Path, files: &[(&'static str, String, bool)]) -> io::Result<()> {
    for (file, value, optional) in files {
        match std::fs::write(dir.join(file), value) {
            Ok(()) => {}
            Err(e) if *optional && e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("cannot write {value} to {}: {e}", dir.join(file).display()),
                ))
            }
        }
    }
    Ok(())
}

/// Whether a cgroup v2 directory has `kind`'s controller.
fn has_controller(dir: &Path, kind: LimitKind) -> bool {
    std::fs::read_to_string(dir.join("cgroup.controllers"))
        .is_ok_and(|c| c.split_whitespace().any(|n| n == kind.controller()))
}

/// How often the run met `kind`'s limit in the cgroup at `dir`.
fn hits(kind: LimitKind, dir: &Path, v1: bool) -> u64 {
    let (file, key) = match (kind, v1) {
        // memory.oom_control carries `oom_kill N` since Linux 4.13.
        (LimitKind::Memory, true) => ("memory.oom_control", "oom_kill"),
        (LimitKind::Memory, false) => ("memory.events", "oom_kill"),
        (LimitKind::Pids, _) => ("pids.events", "max"),
        (LimitKind::Cpu, _) => ("cpu.stat", "nr_throttled"),
    };
    std::fs::read_to_string(dir.join(file))
        .ok()
        .and_then(|text| field(&text, key))
        .unwrap_or(0)
}

/// The value of `key N` in a flat-keyed cgroup file.
fn field(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// The calling process's cgroup in the v1 hierarchy that binds `controller`.
fn v1_dir(controller: &str) -> io::Result<PathBuf> {
    let missing = || {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "no cgroup v2 with the {controller} controller for the run and no cgroup v1 \
                 hierarchy binds it"
            ),
        )
    };
    let mounts = std::fs::read_to_string("/proc/self/mountinfo")?;
    let mount = mounts
        .lines()
        .find_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let mut right = right.split_whitespace();
            if right.next()? != "cgroup" {
                return None;
            }
            let options = right.nth(1)?;
            options
                .split(',')
                .any(|o| o == controller)
                .then(|| left.split_whitespace().nth(4).map(PathBuf::from))
                .flatten()
        })
        .ok_or_else(missing)?;
    let own = std::fs::read_to_string("/proc/self/cgroup")?;
    let rel = own
        .lines()
        .find_map(|line| {
            let mut parts = line.splitn(3, ':');
            let _id = parts.next()?;
            let controllers = parts.next()?;
            let path = parts.next()?;
            controllers
                .split(',')
                .any(|c| c == controller)
                .then_some(path)
        })
        .ok_or_else(missing)?;
    let rel = rel.trim().trim_start_matches('/');
    Ok(if rel.is_empty() {
        mount
    } else {
        mount.join(rel)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flat_keyed_fields_are_read_by_exact_key() {
        let text = "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n";
        assert_eq!(field(text, "oom_kill"), Some(3));
        assert_eq!(field("max 12\n", "max"), Some(12));
        assert_eq!(
            field("nr_periods 5\nnr_throttled 2\n", "nr_throttled"),
            Some(2)
        );
        assert_eq!(field("maximum 1\n", "max"), None);
    }

    #[test]
    fn tiny_cpu_fractions_stay_above_the_smallest_quota() {
        let limits = |s: &str| ResourceLimits {
            cpu: Some(s.parse().unwrap()),
            ..Default::default()
        };
        let v = values(LimitKind::Cpu, &limits("0.5"));
        assert_eq!(v.v2[0].1, "50000 100000");
        let v = values(LimitKind::Cpu, &limits("0.001"));
        assert_eq!(v.v2[0].1, "1000 1000000");
        let v = values(LimitKind::Cpu, &limits("2"));
        assert_eq!(v.v1[1].1, "200000");
    }
}
