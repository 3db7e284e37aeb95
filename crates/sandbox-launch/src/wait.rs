//! Waiting for a launched child, bounded by a deadline.
//!
//! std has no bounded wait. A pidfd (Linux 5.3) becomes readable when the
//! process exits (pidfd_open(2)), which gives one without a polling loop or
//! a SIGCHLD handler (process-global state a library must not own). Where
//! no pidfd can be had, `waitid(WNOWAIT)` on a short tick leaves the child
//! unreaped, so its pid (and process group id) stays the launcher's until
//! it is reaped with [`crate::spawn::wait`].

use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// A child to wait for.
#[derive(Debug)]
pub struct Watch {
    pid: libc::pid_t,
    pidfd: Option<OwnedFd>,
}

impl Watch {
    /// Watches `pid`, an unreaped child of this process.
    pub fn new(pid: libc::pid_t) -> Self {
        Self {
            pid,
            pidfd: pidfd_open(pid),
        }
    }

    /// Waits until the child exits (`true`) or `deadline` passes (`false`);
    /// `None` waits without bound. The child is left unreaped.
    pub fn wait_exit(&self, deadline: Option<Instant>) -> bool {
        if let Some(pidfd) = &self.pidfd {
            if let Some(exited) = wait_pidfd(pidfd, deadline) {
                return exited;
            }
        }
        self.wait_polling(deadline)
    }

    /// Checks with `waitid(WNOWAIT)` on a short tick.
    fn wait_polling(&self, deadline: Option<Instant>) -> bool {
        loop {
            // SAFETY: info is a valid out-pointer; WNOWAIT leaves the child unreaped.
            let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
            // SAFETY: as above.
            let rc = unsafe {
                libc::waitid(
                    libc::P_PID,
                    self.pid as libc::id_t,
                    &mut info,
                    libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
                )
            };
            // SAFETY: si_pid is valid to read for waitid results.
            if rc == 0 && unsafe { info.si_pid() } != 0 {
                return true;
            }
            if rc != 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted
            {
                // Not our child (already reaped): nothing left to wait for.
                return true;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

#[cfg(target_os = "linux")]
fn pidfd_open(pid: libc::pid_t) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes integer arguments and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    let fd = libc::c_int::try_from(fd).ok().filter(|fd| *fd >= 0)?;
    // SAFETY: a fresh fd owned here alone.
    Some(unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) })
}

#[cfg(not(target_os = "linux"))]
fn pidfd_open(_pid: libc::pid_t) -> Option<OwnedFd> {
    None
}

/// `Some(exited)` from polling the pidfd; `None` when `poll` fails with
/// anything but `EINTR` (the caller then polls with `waitid`).
fn wait_pidfd(pidfd: &OwnedFd, deadline: Option<Instant>) -> Option<bool> {
    loop {
        let ms = match deadline {
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Some(false);
                }
                // Rounded up, so the wait never ends just short of the deadline.
                libc::c_int::try_from(left.as_millis() + 1).unwrap_or(libc::c_int::MAX)
            }
            None => -1,
        };
        let mut pfd = libc::pollfd {
            fd: pidfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n > 0 {
            return Some(true);
        }
        if n < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return None;
        }
        // n == 0: the deadline check at the top ends the loop; EINTR: again.
    }
}
