//! Holding a run's processes together, so that ending the run ends all of
//! them, whatever they do (double fork, setsid, fork relays, reparenting).
//!
//! Two mechanisms, the first that works on this host:
//!
//! * **cgroup**: the run gets a cgroup v2 of its own beneath the runner's
//!   (root, or a delegated subtree); the command starts in it
//!   (`CLONE_INTO_CGROUP`, else it moves itself in before it execs), and the run ends with one write to `cgroup.kill`, which the
//!   kernel applies atomically to every member, forks in flight included
//!   (Documentation/admin-guide/cgroup-v2.rst, `cgroup.kill`). A command
//!   cannot leave: moving out needs write access to `cgroup.procs` files,
//!   which Landlock refuses outside the write paths.
//! * **process group**: the command starts a new session, the seccomp filter
//!   refuses `setsid` and `setpgid` so no process can leave its process
//!   group, and the run ends with `kill(-pgid, SIGKILL)`: a signal to a
//!   process group reaches every member, and a fork racing with it fails
//!   (`copy_process` refuses to fork when a fatal signal is pending), so
//!   nothing escapes. The runner is a child subreaper in this mode, to reap
//!   the members that end up its children.
//!
//! Everything either needs is opened before the command starts: ending a run
//! reads no `/proc` and depends on nothing the command can change (it cannot
//! lower the runner's limits: `prlimit64` on other processes is refused).
//! If the runner itself dies, the main process gets SIGKILL (parent-death
//! signal); the rest of the run is ended by the next run's sweep of stale
//! cgroups in cgroup mode, and survives in process-group mode.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// The mechanism that holds a run's processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ContainmentKind {
    /// A cgroup v2 of the run's own, ended with `cgroup.kill`.
    Cgroup,
    /// The run's process group, which no process may leave; ended with
    /// `kill(-pgid, SIGKILL)`.
    ProcessGroup,
}

impl ContainmentKind {
    /// One line for `sandbox check`.
    pub fn describe(self) -> &'static str {
        match self {
            ContainmentKind::Cgroup => {
                "cgroup v2 per run, ended with cgroup.kill (atomic against fork)"
            }
            ContainmentKind::ProcessGroup => {
                "process group per run, setsid/setpgid refused, ended with kill(-pgid) (atomic against fork); descendants survive if the runner is killed"
            }
        }
    }
}

/// The containment of one run, prepared before the command starts.
#[derive(Debug)]
pub(crate) enum Containment {
    Cgroup(CgroupRun),
    ProcessGroup,
}

/// Prefix of the per-run cgroups, followed by the runner's pid.
const PREFIX: &str = "sandbox-run-";

/// How long ending a run waits for the kernel to report the cgroup empty.
const EMPTY_WAIT: Duration = Duration::from_secs(10);

impl Containment {
    /// The best containment this host offers the calling process.
    pub(crate) fn new() -> Self {
        if cfg!(target_os = "linux") {
            match CgroupRun::create() {
                Ok(run) => return Containment::Cgroup(run),
                Err(err) => {
                    tracing::debug!(%err, "no cgroup for the run; holding its process group")
                }
            }
        }
        Containment::ProcessGroup
    }

    /// Which mechanism this is.
    pub(crate) fn kind(&self) -> ContainmentKind {
        match self {
            Containment::Cgroup(_) => ContainmentKind::Cgroup,
            Containment::ProcessGroup => ContainmentKind::ProcessGroup,
        }
    }

    /// Where the child starts: the run's cgroup (directory fd for
    /// `CLONE_INTO_CGROUP`, and `cgroup.procs` for hosts without it). `None`
    /// for the process group (the runner's own hook starts the session).
    pub(crate) fn cgroup(&self) -> Option<crate::spawn::CgroupTarget> {
        let Containment::Cgroup(run) = self else {
            return None;
        };
        Some(crate::spawn::CgroupTarget {
            dir: run.dirfd.as_raw_fd(),
            procs: run.procs.as_raw_fd(),
        })
    }

    /// Ends every process of the run whose main process is `pid` (its
    /// process group leader): SIGTERM, up to `grace` for them to go, then
    /// SIGKILL to all at once.
    pub(crate) fn end(&self, pid: i32, grace: Duration) -> Ended {
        match self {
            Containment::Cgroup(run) => Ended {
                others: run.end(pid, grace),
                main: None,
            },
            Containment::ProcessGroup => end_group(pid, grace),
        }
    }
}

/// What ending a run found.
pub(crate) struct Ended {
    /// Processes besides the main one that were still there.
    pub(crate) others: usize,
    /// The main process's status, when ending the group reaped it.
    pub(crate) main: Option<ExitStatus>,
}

/// A cgroup created for one run, removed when dropped.
#[derive(Debug)]
pub(crate) struct CgroupRun {
    dir: PathBuf,
    dirfd: OwnedFd,
    procs: OwnedFd,
    kill: OwnedFd,
    events: OwnedFd,
}

impl CgroupRun {
    fn create() -> io::Result<Self> {
        let base = own_cgroup_dir()?;
        sweep_stale(&base);
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = base.join(format!(
            "{PREFIX}{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir(&dir)?;
        let opened = (|| {
            // Moving a process needs write access to the source cgroup's
            // cgroup.procs too (the common ancestor rule): check it here, so
            // a host that lets us create but not move falls back cleanly.
            access_w(&base.join("cgroup.procs"))?;
            Ok::<_, io::Error>(CgroupRun {
                dirfd: open(&dir, libc::O_RDONLY | libc::O_DIRECTORY)?,
                procs: open(&dir.join("cgroup.procs"), libc::O_WRONLY)?,
                kill: open(&dir.join("cgroup.kill"), libc::O_WRONLY)?,
                events: open(&dir.join("cgroup.events"), libc::O_RDONLY)?,
                dir: dir.clone(),
            })
        })();
        if opened.is_err() {
            let _ = std::fs::remove_dir(&dir);
        }
        opened
    }

    fn end(&self, pid: i32, grace: Duration) -> usize {
        let members = self.members();
        let others = members.iter().filter(|p| **p != pid).count();
        if members.is_empty() && self.empty() {
            return 0;
        }
        for p in &members {
            // SAFETY: kill has no memory effects; the pids are in our cgroup.
            unsafe {
                libc::kill(*p, libc::SIGTERM);
                libc::kill(*p, libc::SIGCONT);
            }
        }
        if !self.wait_empty(grace) {
            // SAFETY: write(2) of a static byte to our cgroup.kill fd.
            unsafe { libc::write(self.kill.as_raw_fd(), b"1".as_ptr().cast(), 1) };
            if !self.wait_empty(EMPTY_WAIT) {
                tracing::warn!(dir = %self.dir.display(), "the run's cgroup did not empty after cgroup.kill");
            }
        }
        others
    }

    /// The pids in the cgroup now.
    fn members(&self) -> Vec<i32> {
        std::fs::read_to_string(self.dir.join("cgroup.procs"))
            .map(|text| text.lines().filter_map(|l| l.trim().parse().ok()).collect())
            .unwrap_or_default()
    }

    /// Whether `cgroup.events` says no process is left.
    fn empty(&self) -> bool {
        let mut buf = [0u8; 256];
        // SAFETY: pread into a local buffer from our own fd.
        let n = unsafe {
            libc::pread(
                self.events.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                0,
            )
        };
        if n <= 0 {
            return false;
        }
        let text = String::from_utf8_lossy(&buf[..n as usize]);
        text.lines().any(|l| l.trim() == "populated 0")
    }

    /// Waits up to `limit` for the cgroup to empty (the kernel signals a
    /// change of `cgroup.events` as POLLPRI).
    fn wait_empty(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            if self.empty() {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            let mut pfd = libc::pollfd {
                fd: self.events.as_raw_fd(),
                events: libc::POLLPRI,
                revents: 0,
            };
            // At most 50 ms per wait, in case a change notification is missed.
            let ms = left.as_millis().min(50) as i32;
            // SAFETY: one valid pollfd.
            unsafe { libc::poll(&mut pfd, 1, ms.max(1)) };
        }
    }
}

impl Drop for CgroupRun {
    fn drop(&mut self) {
        if !self.empty() {
            // SAFETY: write(2) of a static byte to our cgroup.kill fd.
            unsafe { libc::write(self.kill.as_raw_fd(), b"1".as_ptr().cast(), 1) };
            self.wait_empty(EMPTY_WAIT);
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Ends the run's process group: SIGTERM to all, up to `grace`, then SIGKILL
/// until the group is gone, reaping the members that are our children (the
/// main process among them; its status is handed back).
fn end_group(pgid: i32, grace: Duration) -> Ended {
    let mut ended = Ended {
        others: 0,
        main: None,
    };
    let gone = |ended: &mut Ended| {
        reap_group(pgid, ended);
        // SAFETY: kill with signal 0 only checks.
        unsafe { libc::kill(-pgid, 0) != 0 }
    };
    if gone(&mut ended) {
        return ended;
    }
    // SAFETY: signals to our own run's process group.
    unsafe {
        libc::kill(-pgid, libc::SIGTERM);
        libc::kill(-pgid, libc::SIGCONT);
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if gone(&mut ended) {
            return ended;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let stop = Instant::now() + EMPTY_WAIT;
    while Instant::now() < stop {
        // SAFETY: signals to our own run's process group.
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
        if gone(&mut ended) {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    ended
}

/// Reaps every exited member of process group `pgid` that is our child.
fn reap_group(pgid: i32, ended: &mut Ended) {
    loop {
        let mut status = 0;
        // SAFETY: waitpid on a process group with a valid status pointer.
        let rc = unsafe { libc::waitpid(-pgid, &mut status, libc::WNOHANG) };
        if rc <= 0 {
            return;
        }
        if rc == pgid {
            ended.main = Some(ExitStatus::from_raw(status));
        } else {
            ended.others += 1;
        }
    }
}

/// The directory of the calling process's cgroup v2.
fn own_cgroup_dir() -> io::Result<PathBuf> {
    let not_found = |what: &str| io::Error::new(io::ErrorKind::NotFound, what.to_owned());
    let mounts = std::fs::read_to_string("/proc/self/mountinfo")?;
    let mount = mounts
        .lines()
        .find_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            (right.split_whitespace().next()? == "cgroup2")
                .then(|| left.split_whitespace().nth(4).map(PathBuf::from))
                .flatten()
        })
        .ok_or_else(|| not_found("no cgroup2 filesystem is mounted"))?;
    let own = std::fs::read_to_string("/proc/self/cgroup")?;
    let rel = own
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .ok_or_else(|| not_found("the process has no cgroup v2 membership"))?;
    Ok(mount.join(rel.trim().trim_start_matches('/')))
}

/// Ends and removes cgroups left by runners that died (their pid is gone).
fn sweep_stale(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(PREFIX)) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<i32>().ok()) else {
            continue;
        };
        // SAFETY: kill with signal 0 only checks.
        let alive = unsafe { libc::kill(pid, 0) } == 0
            || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
        if alive {
            continue;
        }
        let dir = entry.path();
        let _ = std::fs::write(dir.join("cgroup.kill"), "1");
        let deadline = Instant::now() + Duration::from_millis(500);
        while std::fs::remove_dir(&dir).is_err() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

fn open(path: &Path, flags: i32) -> io::Result<OwnedFd> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: plain open of a NUL-terminated path.
    let fd: RawFd = unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh fd we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn access_w(path: &Path) -> io::Result<()> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: faccessat on a NUL-terminated path.
    let rc = unsafe { libc::faccessat(libc::AT_FDCWD, c.as_ptr(), libc::W_OK, libc::AT_EACCESS) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
