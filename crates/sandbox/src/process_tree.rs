//! Finding and ending every descendant of a run.
//!
//! The runner is a child subreaper, so a descendant that double-forks into a
//! new session is re-parented to the runner instead of init. The process tree
//! is read from `/proc` (no crate exposes parent links without a full process
//! table dependency); descendants are stopped first, so none can fork while
//! being collected, then killed.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// Main pids of the runs in progress in this process. Cleanup of one run
/// never touches another's main process, its session, or its zombie.
static ACTIVE: Mutex<Vec<i32>> = Mutex::new(Vec::new());

fn active() -> MutexGuard<'static, Vec<i32>> {
    // Nothing panics while the lock is held; a poisoned list is still valid.
    ACTIVE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Keeps a run's main process registered as in progress; dropping it (once
/// the process is reaped) ends the registration.
pub(crate) struct Registration(i32);

impl Drop for Registration {
    fn drop(&mut self) {
        active().retain(|p| *p != self.0);
    }
}

/// Starts a run's main process with `start` and registers it, holding the
/// lock every cleanup scan takes: no scan can see the new process before it
/// is registered and take it for an orphan of the run being cleaned up.
pub(crate) fn start_registered<T, E>(
    start: impl FnOnce() -> Result<T, E>,
    pid_of: impl FnOnce(&T) -> i32,
) -> Result<(T, Registration), E> {
    let mut active = active();
    let started = start()?;
    let pid = pid_of(&started);
    active.push(pid);
    Ok((started, Registration(pid)))
}

/// The main pids of runs other than `root`.
fn others(active: &[i32], root: i32) -> HashSet<i32> {
    active.iter().copied().filter(|p| *p != root).collect()
}

/// Makes the calling process a child subreaper (once per process; Linux only,
/// elsewhere a descendant that leaves the session escapes cleanup).
pub(crate) fn become_subreaper() {
    #[cfg(target_os = "linux")]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            // SAFETY: prctl with integer arguments has no memory effects.
            unsafe {
                libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
            }
        });
    }
}

/// pid -> (ppid, sid, is_zombie) for every process visible in /proc.
///
/// Without /proc (macOS) the table is empty and only the run's process group
/// is signalled.
fn snapshot() -> HashMap<i32, (i32, i32, bool)> {
    let mut table = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return table;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // The command name is in parentheses and may contain spaces: parse after the last ')'.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.len() < 4 {
            continue;
        }
        let state = fields[0];
        let (Ok(ppid), Ok(sid)) = (fields[1].parse::<i32>(), fields[3].parse::<i32>()) else {
            continue;
        };
        table.insert(pid, (ppid, sid, state == "Z"));
    }
    table
}

/// Live descendants of a run: the subtree of `root`, processes in its session,
/// and orphans re-parented to this runner, except other runs' main processes
/// and sessions.
fn descendants(root: i32) -> Vec<i32> {
    let me = std::process::id() as i32;
    let active = active();
    let others = others(&active, root);
    let table = snapshot();
    drop(active);
    let mut found: HashSet<i32> = HashSet::new();
    let mut frontier: Vec<i32> = table
        .iter()
        .filter(|(pid, (ppid, sid, _))| {
            **pid != me
                && !others.contains(pid)
                && !others.contains(sid)
                && (**pid == root || *sid == root || *ppid == root || *ppid == me)
        })
        .map(|(pid, _)| *pid)
        .collect();
    while let Some(pid) = frontier.pop() {
        if found.insert(pid) {
            frontier.extend(
                table
                    .iter()
                    .filter(|(_, (ppid, _, _))| *ppid == pid)
                    .map(|(child, _)| *child),
            );
        }
    }
    found
        .into_iter()
        .filter(|pid| !table.get(pid).is_some_and(|(_, _, zombie)| *zombie))
        .collect()
}

/// Cheap check before scanning /proc: every live descendant is either in the
/// run's process group (the child called `setsid`) or was re-parented to this
/// runner (a subreaper), so with neither there is nothing to end. Only valid
/// when no other run is in progress in this process.
fn may_have_descendants(root: i32) -> bool {
    // SAFETY: kill with signal 0 only checks; waitid with WNOWAIT reaps nothing.
    unsafe {
        if libc::kill(-root, 0) == 0 {
            return true;
        }
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let rc = libc::waitid(
            libc::P_ALL,
            0,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        );
        !(rc < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD))
    }
}

fn signal_all(pids: &[i32], sig: i32) {
    for &pid in pids {
        // SAFETY: kill has no memory effects.
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

/// Reaps zombies among this runner's own children, except the main processes
/// of runs (each run reaps its own).
fn reap(root: i32) {
    let me = std::process::id() as i32;
    let active = active();
    for (pid, (ppid, _, zombie)) in snapshot() {
        if ppid == me && zombie && pid != root && !active.contains(&pid) {
            // SAFETY: waitpid on a specific pid with a null status pointer.
            unsafe {
                libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG);
            }
        }
    }
}

/// Ends every descendant of `root`: SIGTERM, up to `grace`, then SIGKILL.
///
/// Other runs in this process, their sessions and main processes survive.
/// Returns how many processes were signalled.
pub(crate) fn end_tree(root: i32, grace: Duration) -> usize {
    if !cfg!(target_os = "linux") {
        // SAFETY: killpg has no memory effects; the group is the run's own session.
        unsafe {
            libc::killpg(root, libc::SIGTERM);
            std::thread::sleep(grace.min(Duration::from_millis(200)));
            libc::killpg(root, libc::SIGKILL);
        }
        return 0;
    }
    if others(&active(), root).is_empty() && !may_have_descendants(root) {
        return 0;
    }
    let first = descendants(root);
    if first.is_empty() {
        return 0;
    }
    signal_all(&first, libc::SIGTERM);
    signal_all(&first, libc::SIGCONT);
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        reap(root);
        if descendants(root).is_empty() {
            return first.len();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    // Stop everything first so nothing forks while we collect, then kill.
    let mut seen: HashSet<i32> = HashSet::new();
    for _ in 0..100 {
        let live = descendants(root);
        if live.is_empty() {
            break;
        }
        let fresh: Vec<i32> = live.iter().copied().filter(|p| !seen.contains(p)).collect();
        signal_all(&live, libc::SIGSTOP);
        seen.extend(fresh);
        signal_all(&live, libc::SIGKILL);
        reap(root);
        std::thread::sleep(Duration::from_millis(2));
    }
    reap(root);
    first.len().max(seen.len())
}
