//! Finding and ending every descendant of a run.
//!
//! The runner is a child subreaper, so a descendant that double-forks into a
//! new session is re-parented to the runner instead of init. The process tree
//! is read from `/proc` (no crate exposes parent links without a full process
//! table dependency); descendants are stopped first, so none can fork while
//! being collected, then killed.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

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
/// and orphans re-parented to this runner that are not in `exclude`.
fn descendants(root: i32, exclude: &HashSet<i32>) -> Vec<i32> {
    let me = std::process::id() as i32;
    let table = snapshot();
    let mut found: HashSet<i32> = HashSet::new();
    let mut frontier: Vec<i32> = table
        .iter()
        .filter(|(pid, (ppid, sid, _))| {
            **pid != me
                && !exclude.contains(pid)
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

/// Reaps zombies among this runner's own children, except `root` (its
/// `Child` handle reaps it) and those in `exclude`.
fn reap(root: i32, exclude: &HashSet<i32>) {
    let me = std::process::id() as i32;
    for (pid, (ppid, _, zombie)) in snapshot() {
        if ppid == me && zombie && pid != root && !exclude.contains(&pid) {
            // SAFETY: waitpid on a specific pid with a null status pointer.
            unsafe {
                libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG);
            }
        }
    }
}

/// Ends every descendant of `root`: SIGTERM, up to `grace`, then SIGKILL.
///
/// `exclude` holds the main processes of other runs in this process, which
/// must survive. Returns how many processes were signalled.
pub(crate) fn end_tree(root: i32, grace: Duration, exclude: &HashSet<i32>) -> usize {
    if !cfg!(target_os = "linux") {
        // SAFETY: killpg has no memory effects; the group is the run's own session.
        unsafe {
            libc::killpg(root, libc::SIGTERM);
            std::thread::sleep(grace.min(Duration::from_millis(200)));
            libc::killpg(root, libc::SIGKILL);
        }
        return 0;
    }
    if exclude.is_empty() && !may_have_descendants(root) {
        return 0;
    }
    let first = descendants(root, exclude);
    if first.is_empty() {
        return 0;
    }
    signal_all(&first, libc::SIGTERM);
    signal_all(&first, libc::SIGCONT);
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        reap(root, exclude);
        if descendants(root, exclude).is_empty() {
            return first.len();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    // Stop everything first so nothing forks while we collect, then kill.
    let mut seen: HashSet<i32> = HashSet::new();
    for _ in 0..100 {
        let live = descendants(root, exclude);
        if live.is_empty() {
            break;
        }
        let fresh: Vec<i32> = live.iter().copied().filter(|p| !seen.contains(p)).collect();
        signal_all(&live, libc::SIGSTOP);
        seen.extend(fresh);
        signal_all(&live, libc::SIGKILL);
        reap(root, exclude);
        std::thread::sleep(Duration::from_millis(2));
    }
    reap(root, exclude);
    first.len().max(seen.len())
}
