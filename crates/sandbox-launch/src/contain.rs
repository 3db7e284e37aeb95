//! Holding a run's processes together, so that ending the run ends all of
//! them, whatever they do (double fork, setsid, fork relays, reparenting).
//!
//! Two mechanisms, the first that works on this host:
//!
//! * **cgroup**: the run gets a cgroup v2 of its own beneath the runner's
//!   (root, or a delegated subtree); the command starts in it
//!   (`CLONE_INTO_CGROUP`, else it moves itself in before it execs), and the run ends with one write to `cgroup.kill`, which the
//!   kernel applies atomically to every member, forks in flight included
//!   (Documentation/admin-guide/cgroup-v2.rst, `cgroup.kill`), then, for
//!   what that misses (a thread group whose leader exited before its other
//!   threads), SIGKILL to each member's thread group by pidfd. A command
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
pub struct Containment(Inner);

#[derive(Debug)]
enum Inner {
    Cgroup(CgroupRun),
    ProcessGroup,
}

/// Prefix of the per-run cgroups, followed by `<pid>-<start time>-<token>`:
/// the runner's pid, its start time in clock ticks since boot (field 22 of
/// `/proc/PID/stat`, proc(5)) and a random token. Pid and start time
/// together name one process for the whole boot: a process that later gets
/// the same pid has a later start time, so a survivor that forks until it
/// holds a dead runner's pid does not make that runner look alive to the
/// sweep. The token makes the name unpredictable, so no one can take it
/// first.
const PREFIX: &str = "sandbox-run-";

/// How many fresh names creating the run's cgroup tries before it gives up.
const NAME_TRIES: usize = 4;

/// How long ending a run waits for the kernel to report the cgroup empty.
const EMPTY_WAIT: Duration = Duration::from_secs(10);

/// How long ending a run waits for `cgroup.kill` (then each SIGKILL round)
/// to empty the cgroup before it sends SIGKILL to each member again.
const KILL_TICK: Duration = Duration::from_millis(20);

impl Default for Containment {
    fn default() -> Self {
        Self::new()
    }
}

impl Containment {
    /// The best containment this host offers the calling process.
    pub fn new() -> Self {
        Self::within(None)
    }

    /// As [`Containment::new`], the run's cgroup v2 made beneath `parent`
    /// (another run's cgroup, [`Containment::cgroup_dir`]) when given: the
    /// kernel charges what this run's processes use to that run's limits
    /// too (Documentation/admin-guide/cgroup-v2.rst, "Resource
    /// Distribution Models": a limit holds for the whole subtree).
    pub fn within(parent: Option<&Path>) -> Self {
        if cfg!(target_os = "linux") {
            match CgroupRun::create(parent) {
                Ok(run) => return Containment(Inner::Cgroup(run)),
                Err(err) => {
                    tracing::debug!(%err, "no cgroup for the run; holding its process group")
                }
            }
        }
        Containment(Inner::ProcessGroup)
    }

    /// The run's cgroup v2 directory, in cgroup mode.
    pub fn cgroup_dir(&self) -> Option<&Path> {
        match &self.0 {
            Inner::Cgroup(run) => Some(&run.dir),
            Inner::ProcessGroup => None,
        }
    }

    /// The name of the run's cgroups (the v2 one's, or a fresh one).
    pub fn run_name(&self) -> io::Result<String> {
        match &self.0 {
            Inner::Cgroup(run) => run
                .dir
                .file_name()
                .and_then(|n| n.to_str())
                .map(str::to_owned)
                .ok_or_else(|| io::Error::other("the run's cgroup has no name")),
            Inner::ProcessGroup => fresh_name(),
        }
    }

    /// Which mechanism this is.
    pub fn kind(&self) -> ContainmentKind {
        match &self.0 {
            Inner::Cgroup(_) => ContainmentKind::Cgroup,
            Inner::ProcessGroup => ContainmentKind::ProcessGroup,
        }
    }

    /// Where the child starts: the run's cgroup (directory fd for
    /// `CLONE_INTO_CGROUP`, and `cgroup.procs` for hosts without it). `None`
    /// for the process group (the runner's own hook starts the session).
    pub fn cgroup(&self) -> Option<crate::spawn::CgroupTarget> {
        let Inner::Cgroup(run) = &self.0 else {
            return None;
        };
        Some(crate::spawn::CgroupTarget {
            dir: run.dirfd.as_raw_fd(),
            procs: run.procs.as_raw_fd(),
        })
    }

    /// Ends every process of the run whose main process is `pid` (its
    /// process group leader): SIGTERM, up to `grace` for them to go, then
    /// SIGKILL to all at once, repeated for a bounded time while any is
    /// left ([`Ended::all_ended`] says whether none is).
    pub fn end(&self, pid: i32, grace: Duration) -> Ended {
        match &self.0 {
            Inner::Cgroup(run) => {
                let (others, all_ended) = run.end(pid, grace);
                Ended {
                    others,
                    main: None,
                    all_ended,
                }
            }
            Inner::ProcessGroup => end_group(pid, grace),
        }
    }
}

/// What ending a run found.
#[derive(Debug)]
pub struct Ended {
    /// Processes besides the main one that were still there.
    pub others: usize,
    /// The main process's status, when ending the group reaped it.
    pub main: Option<ExitStatus>,
    /// Whether no process of the run is left (`false`: some outlived
    /// SIGKILL for the whole bound; the caller must not wait for the main
    /// process without a bound then).
    pub all_ended: bool,
}

/// A cgroup created for one run, removed when dropped.
#[derive(Debug)]
struct CgroupRun {
    dir: PathBuf,
    dirfd: OwnedFd,
    procs: OwnedFd,
    kill: OwnedFd,
    events: OwnedFd,
}

impl CgroupRun {
    fn create(parent: Option<&Path>) -> io::Result<Self> {
        let own = own_cgroup_dir()?;
        if sweep_due() {
            sweep_stale(&own);
        }
        let base = parent.map_or_else(|| own.clone(), Path::to_path_buf);
        let mut tries = 0;
        let dir = loop {
            let dir = base.join(fresh_name()?);
            match std::fs::create_dir(&dir) {
                Ok(()) => break dir,
                // Someone made this name first: never share it, take another.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && tries + 1 < NAME_TRIES => {
                    tracing::warn!(dir = %dir.display(), "a per-run cgroup name was taken; trying another");
                    tries += 1;
                }
                Err(e) => return Err(e),
            }
        };
        let opened = (|| {
            // Moving a process needs write access to the source cgroup's
            // cgroup.procs too (the common ancestor rule): check it here, so
            // a host that lets us create but not move falls back cleanly.
            access_w(&own.join("cgroup.procs"))?;
            Ok::<_, io::Error>(CgroupRun {
                dirfd: open(&dir, libc::O_RDONLY | libc::O_DIRECTORY)?,
                // Read too: the run is ended from the launching thread, whose
                // Landlock domain may not let it open the file then.
                procs: open(&dir.join("cgroup.procs"), libc::O_RDWR)?,
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

    /// Ends the run: SIGTERM to each member, up to `grace`, then SIGKILL
    /// ([`CgroupRun::kill_all`]). How many members besides `pid` there
    /// were, and whether the cgroup is empty now.
    fn end(&self, pid: i32, grace: Duration) -> (usize, bool) {
        // No live process left (cgroup-v2.rst, "populated": zombies, such
        // as the unreaped main process, do not count): nothing to end.
        if self.empty() {
            return (0, true);
        }
        let members = self.members();
        let others = members.iter().filter(|p| **p != pid).count();
        signal_members(self.procs.as_raw_fd(), &[libc::SIGTERM, libc::SIGCONT]);
        if self.wait_empty(grace) {
            return (others, true);
        }
        (others, self.kill_all())
    }

    /// SIGKILL to every process of the cgroup until it is empty, for at
    /// most [`EMPTY_WAIT`]: whether it is. One write to `cgroup.kill`
    /// first, then, while the cgroup stays populated, SIGKILL to each
    /// member's thread group through a pidfd ([`signal_members`]):
    /// `cgroup.kill` does not reach a thread group whose leader has exited
    /// (`SYS_exit`, not `exit_group`) while another of its threads runs (a
    /// zombie leader with a live thread, seen on Linux 6.18), which a
    /// signal to the thread group does end. In a domain cgroup (a run's is
    /// one: making it threaded needs a write to its `cgroup.type`, which
    /// the command's Landlock domain refuses) every thread of a process is
    /// in the process's cgroup, so `cgroup.procs` names every thread group.
    fn kill_all(&self) -> bool {
        // SAFETY: write(2) of a static byte to our cgroup.kill fd.
        unsafe { libc::write(self.kill.as_raw_fd(), b"1".as_ptr().cast(), 1) };
        let deadline = Instant::now() + EMPTY_WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if self.wait_empty(KILL_TICK.min(left)) {
                return true;
            }
            if left.is_zero() {
                tracing::warn!(dir = %self.dir.display(), "the run's cgroup did not empty after cgroup.kill and SIGKILL to each member");
                return false;
            }
            signal_members(self.procs.as_raw_fd(), &[libc::SIGKILL]);
        }
    }

    /// The pids in the cgroup now.
    fn members(&self) -> Vec<i32> {
        read_pids(self.procs.as_raw_fd())
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
            self.kill_all();
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// The pids a `cgroup.procs` fd lists now (read from offset 0).
fn read_pids(procs: RawFd) -> Vec<i32> {
    let mut text = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        // SAFETY: pread into a local buffer from the caller's fd.
        let n = unsafe {
            libc::pread(
                procs,
                buf.as_mut_ptr().cast(),
                buf.len(),
                text.len() as libc::off_t,
            )
        };
        match usize::try_from(n) {
            Ok(0) | Err(_) => break,
            Ok(n) => text.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&text)
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Sends `signals`, in order, to the thread group of each process the
/// `cgroup.procs` fd `procs` lists, never to a process outside it: each
/// listed pid is opened as a pidfd, the list read again, and only a pidfd
/// whose pid is still listed gets the signals. The pidfd names the process
/// that held the pid when it was opened; if the pid is listed afterwards,
/// either that process still holds it (and so is a member) or it has been
/// reaped (and the signal reaches no one): a pid reused by a process
/// outside the run between the two reads is never signalled. Where the
/// kernel has no pidfds (before 5.3), the pid itself gets them once it is
/// still listed (a narrow window for reuse, on such kernels only).
fn signal_members(procs: RawFd, signals: &[i32]) {
    let listed = read_pids(procs);
    if listed.is_empty() {
        return;
    }
    let opened: Vec<(i32, Option<OwnedFd>)> = listed
        .into_iter()
        .filter_map(|pid| match pidfd_open(pid) {
            Ok(fd) => Some((pid, Some(fd))),
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => Some((pid, None)),
            // Gone already (ESRCH), or not a thread group leader.
            Err(_) => None,
        })
        .collect();
    let still = read_pids(procs);
    for (pid, fd) in opened.iter().filter(|(pid, _)| still.contains(pid)) {
        for &sig in signals {
            match fd {
                Some(fd) => pidfd_send_signal(fd, sig),
                // SAFETY: kill has no memory effects; the pid is listed in
                // the run's cgroup.
                None => unsafe {
                    libc::kill(*pid, sig);
                },
            }
        }
    }
}

/// `pidfd_open(pid, 0)` (Linux 5.3).
#[cfg(target_os = "linux")]
fn pidfd_open(pid: i32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes integer arguments and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = RawFd::try_from(fd).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
    // SAFETY: a fresh fd (pidfds are close-on-exec) owned here alone.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(not(target_os = "linux"))]
fn pidfd_open(_pid: i32) -> io::Result<OwnedFd> {
    Err(io::Error::from_raw_os_error(libc::ENOSYS))
}

/// `pidfd_send_signal(fd, sig, NULL, 0)`: to the whole thread group the
/// pidfd names, as `kill(2)` sends (a reaped process gets nothing).
#[cfg(target_os = "linux")]
fn pidfd_send_signal(fd: &OwnedFd, sig: i32) {
    // SAFETY: a pidfd we own, a null siginfo and no flags.
    unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            fd.as_raw_fd(),
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
}

#[cfg(not(target_os = "linux"))]
fn pidfd_send_signal(_fd: &OwnedFd, _sig: i32) {}

/// Ends the run's process group: SIGTERM to all, up to `grace`, then SIGKILL
/// until the group is gone, reaping the members that are our children (the
/// main process among them; its status is handed back).
fn end_group(pgid: i32, grace: Duration) -> Ended {
    let mut ended = Ended {
        others: 0,
        main: None,
        all_ended: true,
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
            return ended;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    ended.all_ended = gone(&mut ended);
    if !ended.all_ended {
        tracing::warn!(pgid, "the run's process group did not end after SIGKILL");
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
    let mount = match cgroup2_at_usual_place() {
        Some(mount) => mount,
        None => {
            let mounts = std::fs::read_to_string("/proc/self/mountinfo")?;
            mounts
                .lines()
                .find_map(|line| {
                    let (left, right) = line.split_once(" - ")?;
                    (right.split_whitespace().next()? == "cgroup2")
                        .then(|| left.split_whitespace().nth(4).map(PathBuf::from))
                        .flatten()
                })
                .ok_or_else(|| not_found("no cgroup2 filesystem is mounted"))?
        }
    };
    let own = std::fs::read_to_string("/proc/self/cgroup")?;
    let rel = own
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .ok_or_else(|| not_found("the process has no cgroup v2 membership"))?;
    Ok(mount.join(rel.trim().trim_start_matches('/')))
}

/// Where systemd and container runtimes mount cgroup2 (unified, or the
/// hybrid layout's `unified`), when it is mounted there: two `statfs`
/// calls instead of generating and reading the whole mount table.
fn cgroup2_at_usual_place() -> Option<PathBuf> {
    /// `CGROUP2_SUPER_MAGIC` (linux/magic.h).
    const CGROUP2: i64 = 0x6367_7270;
    ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]
        .into_iter()
        .find(|dir| {
            let Ok(c) = CString::new(*dir) else {
                return false;
            };
            // SAFETY: statfs is plain data; all-zero is valid.
            let mut st: libc::statfs = unsafe { std::mem::zeroed() };
            // SAFETY: a NUL-terminated path and a statfs buffer.
            unsafe { libc::statfs(c.as_ptr(), &mut st) == 0 && st.f_type as i64 == CGROUP2 }
        })
        .map(PathBuf::from)
}

/// How often a process sweeps: a runner that died is swept by the next
/// process's first run, and by a long-lived one within this interval.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// Whether this run should sweep: the process's first, then one each
/// [`SWEEP_EVERY`] (the sweep lists the parent cgroup and reads each sibling
/// runner's start time).
fn sweep_due() -> bool {
    static LAST: std::sync::Mutex<Option<Instant>> = std::sync::Mutex::new(None);
    let mut last = LAST
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let now = Instant::now();
    let due = last.map_or(true, |at| now.duration_since(at) >= SWEEP_EVERY);
    if due {
        *last = Some(now);
    }
    due
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
        if runner_alive(rest) {
            continue;
        }
        let dir = entry.path();
        // The whole subtree: the nested runs' cgroups beneath it too.
        let _ = std::fs::write(dir.join("cgroup.kill"), "1");
        let deadline = Instant::now() + Duration::from_millis(500);
        while !end_tree(&dir) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// Removes a dead runner's cgroup `dir` and the cgroups beneath it (its
/// nested runs', made within it), deepest first: a cgroup with a child
/// cannot be removed (`EBUSY`), so removing the top alone never succeeded
/// and every later sweep waited its whole bound on it again. A cgroup
/// still populated gets SIGKILL to each member's thread group (what
/// `cgroup.kill` misses, see `CgroupRun::kill_all`). True when none is
/// left.
fn end_tree(dir: &Path) -> bool {
    let mut children_gone = true;
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                children_gone &= end_tree(&entry.path());
            }
        }
    }
    if children_gone && std::fs::remove_dir(dir).is_ok() {
        return true;
    }
    if let Ok(procs) = open(&dir.join("cgroup.procs"), libc::O_RDONLY) {
        signal_members(procs.as_raw_fd(), &[libc::SIGKILL]);
    }
    false
}

/// Removes the per-run groups in a cgroup v1 hierarchy whose runners died.
/// Their processes were ended through the run's cgroup v2 (by that run or
/// the sweep of [`CgroupRun::create`]); a group still in use stays.
pub(crate) fn sweep_stale_v1(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(PREFIX)) {
            if !runner_alive(rest) {
                let _ = std::fs::remove_dir(entry.path());
            }
        }
    }
}

/// A per-run cgroup name no one can predict: [`PREFIX`], this process's pid,
/// start time and namespaces ([`Identity`]), and a random token.
fn fresh_name() -> io::Result<String> {
    let me = Identity::of_self()?;
    Ok(format!(
        "{PREFIX}{}-{}-{}-{:016x}",
        me.seen,
        me.start,
        me.namespaces,
        token()
    ))
}

/// What names this runner process in its cgroups' names.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Identity {
    /// `getpid`, to tell a forked child from the process that read this.
    pid: u32,
    /// The pid `/proc` shows for it: the one in the name.
    seen: u32,
    /// Clock ticks since boot, as this process's time namespace counts.
    start: u64,
    /// `<device of /proc>.<time namespace inode>` in hex (0 for a time
    /// namespace the kernel lacks): a runner with another `/proc` (another
    /// pid namespace's) or in another time namespace sees other pids and
    /// start times, so a sweep judges only names made with its own; a dead
    /// runner's leftovers there wait for a runner there.
    namespaces: String,
}

impl Identity {
    /// This process's, read once: a process's start time and namespaces
    /// never change (`unshare` and `setns` of a pid or time namespace move
    /// only its later children); kept with its pid, since a forked child
    /// has the same static and another start time.
    fn of_self() -> io::Result<Identity> {
        static SELF: std::sync::Mutex<Option<Identity>> = std::sync::Mutex::new(None);
        let pid = std::process::id();
        let mut known = SELF
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(me) = known.as_ref().filter(|me| me.pid == pid) {
            return Ok(me.clone());
        }
        // As `/proc` shows this process, which may belong to another pid
        // namespace than the process (`unshare --pid` without a /proc of
        // its own): a sweep reads `/proc/<pid>` there.
        let seen = std::fs::read_link("/proc/self")
            .ok()
            .and_then(|p| p.to_str().and_then(|p| p.parse::<u32>().ok()))
            .ok_or_else(|| io::Error::other("this process is not in /proc"))?;
        let start = start_time("self")
            .ok_or_else(|| io::Error::other("cannot read this process's start time"))?;
        let me = Identity {
            pid,
            seen,
            start,
            namespaces: own_namespaces(),
        };
        *known = Some(me.clone());
        Ok(me)
    }
}

/// The `/proc` this process reads pids and start times in (its device:
/// one per procfs instance, so per pid namespace) and its time namespace
/// (start times are shown in the reader's).
fn own_namespaces() -> String {
    use std::os::unix::fs::MetadataExt;
    let proc_dev = std::fs::metadata("/proc").map_or(0, |m| m.dev());
    let time = std::fs::metadata("/proc/self/ns/time").map_or(0, |m| m.ino());
    format!("{proc_dev:x}.{time:x}")
}

/// Whether the runner a per-run cgroup name (after [`PREFIX`]) names is
/// still running: its pid exists with the start time in the name and is no
/// zombie (a dead runner its parent has not reaped). A name that does not
/// parse is left alone (it is not ours to end), and so is a name made in
/// other pid or time namespaces, and a process whose state cannot be read
/// for any reason but its absence. Names of the earlier form
/// `<pid>-<start>-<token>` are judged in this process's namespaces, and of
/// the form before it, `<pid>-<counter>`, alive while their pid exists.
fn runner_alive(name: &str) -> bool {
    let fields: Vec<&str> = name.split('-').collect();
    let Some(pid) = fields.first().and_then(|p| p.parse::<i32>().ok()) else {
        return true;
    };
    let judged = |start: &str| {
        let Ok(start) = start.parse::<u64>() else {
            return true;
        };
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(stat) => match (parse_state(&stat), parse_start_time(&stat)) {
                (Some('Z' | 'X'), _) => false,
                (_, Some(s)) => s == start,
                _ => true,
            },
            Err(e) => e.kind() != io::ErrorKind::NotFound,
        }
    };
    match fields[..] {
        [_, start, namespaces, token] if token.len() == 16 => {
            let ours = Identity::of_self().is_ok_and(|me| me.namespaces == namespaces);
            !ours || judged(start)
        }
        [_, start, token] if token.len() == 16 => judged(start),
        [_, _] => {
            // SAFETY: kill with signal 0 only checks.
            let found = unsafe { libc::kill(pid, 0) } == 0;
            found || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
        }
        _ => true,
    }
}

/// The start time (clock ticks since boot) of `/proc/<pid>`.
fn start_time(pid: &str) -> Option<u64> {
    parse_start_time(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Field 22 of a `/proc/PID/stat` line. The command name (field 2) may hold
/// spaces and parentheses, so fields are counted after its last `)`.
fn parse_start_time(stat: &str) -> Option<u64> {
    let (_, rest) = stat.rsplit_once(')')?;
    // `rest` starts with field 3 (state): field 22 is the 20th.
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Field 3 of a `/proc/PID/stat` line, the process state (`Z`: zombie).
fn parse_state(stat: &str) -> Option<char> {
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().next()?.chars().next()
}

/// 64 unpredictable bits: std's hasher keys come from the OS's random source.
fn token() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

pub(crate) fn open(path: &Path, flags: i32) -> io::Result<OwnedFd> {
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

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn the_start_time_is_read_past_any_command_name() {
        let fields: String = (3..=25).map(|i| format!(" {i}")).collect();
        let stat = format!("42 (a) b) (c){fields}\n");
        assert_eq!(parse_start_time(&stat), Some(22));
        assert_eq!(parse_start_time("42 (short) S 1"), None);
    }

    #[test]
    fn a_reused_pid_does_not_keep_a_dead_runner_alive() {
        let me = std::process::id();
        let start = start_time("self").unwrap();
        let ns = own_namespaces();
        let name = |pid: u32, start: u64| format!("{pid}-{start}-{ns}-{:016x}", token());
        // The name this process gives its runs is of that form.
        let fresh = fresh_name().unwrap();
        assert!(
            fresh.starts_with(&format!("{PREFIX}{me}-{start}-{ns}-")),
            "{fresh}"
        );
        assert!(runner_alive(fresh.strip_prefix(PREFIX).unwrap()));
        // The earlier form, without namespaces, is judged the same way.
        assert!(runner_alive(&format!("{me}-{start}-{:016x}", 0)));
        assert!(!runner_alive(&format!("{me}-{}-{:016x}", start + 1, 0)));
        // Positive control: this process, with its own start time, is alive.
        assert!(runner_alive(&name(me, start)));
        // The same pid with another start time is a different process: the
        // runner that made the cgroup is gone.
        assert!(!runner_alive(&name(me, start + 1)));
        // A pid that does not exist (beyond pid_max) is gone too.
        assert!(!runner_alive(&name(i32::MAX as u32, 1)));
        // Names that are not ours to judge are left alone.
        assert!(runner_alive("x-1-0000000000000000"));
        assert!(runner_alive(&format!("{me}-nope-{:016x}", 0)));
        // The earlier `<pid>-<counter>` form: alive while the pid exists.
        assert!(runner_alive(&format!("{me}-0")));
        assert!(!runner_alive(&format!("{}-0", i32::MAX)));
        // A name made in other pid or time namespaces is not judged here,
        // even where its pid and start time would read as dead.
        assert!(runner_alive(&format!("{}-1-{ns}0-{:016x}", i32::MAX, 0)));
    }

    /// A runner that died but is not reaped (a zombie) is dead: its run's
    /// leftovers are swept. Twin: the same child alive is alive.
    #[test]
    fn a_zombie_runner_is_dead() {
        let mut child = std::process::Command::new("/bin/sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id();
        let start = start_time(&pid.to_string()).unwrap();
        let ns = own_namespaces();
        let name = format!("{pid}-{start}-{ns}-{:016x}", token());
        assert!(runner_alive(&name), "a live runner is alive");
        child.kill().unwrap();
        // Not reaped yet: wait until it is a zombie.
        let deadline = Instant::now() + Duration::from_secs(5);
        while std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| parse_state(&s))
            != Some('Z')
        {
            assert!(Instant::now() < deadline, "the child never became a zombie");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(!runner_alive(&name), "a zombie runner is dead");
        child.wait().unwrap();
    }

    /// A dead runner's cgroup holding its nested runs' cgroups (two deep)
    /// is removed with them by one sweep (before: never, each sweep
    /// waiting 500 ms on it); beside it, a dead runner's plain cgroup
    /// (positive control) is removed and a live runner's, with a child,
    /// stays. As nobody (no delegated cgroup): cgroups cannot be made, so
    /// there is nothing to sweep (runs are held by their process group).
    #[test]
    fn a_dead_runners_cgroup_with_nested_ones_is_swept_whole() {
        let own = own_cgroup_dir().unwrap();
        let base = own.join(format!("sandbox-sweep-test-{:016x}", token()));
        if let Err(e) = std::fs::create_dir(&base) {
            // SAFETY: geteuid has no preconditions.
            let euid = unsafe { libc::geteuid() };
            assert_ne!(euid, 0, "root cannot make a cgroup: {e}");
            assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
            return;
        }
        let ns = own_namespaces();
        let dead = |t: u64| base.join(format!("{PREFIX}{}-1-{ns}-{t:016x}", i32::MAX));
        let nested = dead(1);
        let inner = nested.join(format!("{PREFIX}{}-1-{ns}-{:016x}", i32::MAX, 2));
        std::fs::create_dir_all(inner.join(format!("{PREFIX}{}-1-{ns}-{:016x}", i32::MAX, 3)))
            .unwrap();
        let plain = dead(4);
        std::fs::create_dir(&plain).unwrap();
        let live = base.join(fresh_name().unwrap());
        let live_child = live.join(fresh_name().unwrap());
        std::fs::create_dir_all(&live_child).unwrap();
        // Without the children first, the top stays (EBUSY).
        assert!(std::fs::remove_dir(&nested).is_err());

        sweep_stale(&base);
        let (nested_left, plain_left, live_left) =
            (nested.exists(), plain.exists(), live_child.exists());
        let _ = std::fs::remove_dir(&live_child);
        let _ = std::fs::remove_dir(&live);
        let _ = end_tree(&nested);
        let _ = std::fs::remove_dir(&plain);
        let _ = std::fs::remove_dir(&base);
        assert!(
            !nested_left,
            "the dead runner's cgroup with nested ones is left"
        );
        assert!(!plain_left, "the dead runner's plain cgroup is left");
        assert!(live_left, "a live runner's cgroup was swept");
    }

    #[test]
    fn names_are_unpredictable() {
        let a = token();
        let b = token();
        assert_ne!(a, b);
    }
}
