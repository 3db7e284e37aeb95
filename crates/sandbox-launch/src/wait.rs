//! Waiting for a launched child, bounded by a deadline.
//!
//! std has no bounded wait. A pidfd (Linux 5.3) becomes readable when the
//! process exits (pidfd_open(2)), which gives one without a polling loop or
//! a SIGCHLD handler (process-global state a library must not own). Where
//! no pidfd can be had, `waitid(WNOWAIT)` on a short tick leaves the child
//! unreaped, so its pid (and process group id) stays the launcher's until
//! it is reaped with [`crate::spawn::wait`].

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

/// How a wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Waited {
    /// The child exited.
    Exited,
    /// The deadline passed first.
    TimedOut,
    /// This process got a signal [`stop_runs_on`] names (the signal).
    Stopped(i32),
    /// The cancel socket ([`Watch::with_cancel`]) ended first.
    Cancelled,
}

/// The pipe the stop handler writes each signal's number to (-1: none).
static STOP_READ: AtomicI32 = AtomicI32::new(-1);
static STOP_WRITE: AtomicI32 = AtomicI32::new(-1);

/// Makes `signals` (for a CLI: SIGINT, SIGQUIT, SIGTERM, SIGHUP; those this
/// process ignores are left ignored) end the run in progress instead of this
/// process, until the returned guard is dropped (which restores what they
/// did before): a run's wait returns [`Waited::Stopped`], and the launch
/// then passes the signal on to the command's process group, as a shell
/// passes a terminal's on (so a Ctrl-C handler runs, a test runner prints
/// its summary), as it does each later one, waits up to the grace period,
/// and ends every process of the run still there. Once such a signal
/// has arrived, every later run of the process ends at once, and none
/// starts ([`stop_requested`]).
///
/// Process-global (signal dispositions are): for a program that owns its
/// signals, not for a library. Hold the guard only around runs, so that a
/// prompt or a read between them can still be interrupted.
pub fn stop_runs_on(signals: &[libc::c_int]) -> std::io::Result<StopSignals> {
    if STOP_WRITE.load(Ordering::Acquire) < 0 {
        let mut fds = [0; 2];
        // SAFETY: pipe fills two fds on success; fcntl takes them by value.
        // (macOS has no pipe2; no other thread forks before a run starts.)
        let made = unsafe {
            libc::pipe(fds.as_mut_ptr()) == 0
                && fds.iter().all(|&fd| {
                    libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) == 0
                        && libc::fcntl(fd, libc::F_SETFL, libc::O_NONBLOCK) == 0
                })
        };
        if !made {
            return Err(std::io::Error::last_os_error());
        }
        STOP_READ.store(fds[0], Ordering::Release);
        STOP_WRITE.store(fds[1], Ordering::Release);
    }
    let mut guard = StopSignals { before: Vec::new() };
    for &sig in signals {
        // SAFETY: sigaction is plain data, all-zero valid; reading the
        // disposition, then setting an async-signal-safe handler (an
        // atomic load and a write(2)).
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // Ignored when the process started (`nohup`, a shell's
            // background job): it stops nothing.
            if old.sa_sigaction == libc::SIG_IGN {
                continue;
            }
            let ours = on_stop_signal as extern "C" fn(libc::c_int) as usize;
            // Already caught by a guard that is still held (a session holds
            // one between its commands): nothing to set, nothing to restore
            // (that guard restores it).
            if old.sa_sigaction == ours {
                continue;
            }
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = ours;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            if libc::sigaction(sig, &action, std::ptr::null_mut()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            guard.before.push((sig, old));
        }
    }
    Ok(guard)
}

/// What [`stop_runs_on`] changed; dropping it restores each signal's
/// disposition before.
pub struct StopSignals {
    before: Vec<(libc::c_int, libc::sigaction)>,
}

impl std::fmt::Debug for StopSignals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let signals: Vec<libc::c_int> = self.before.iter().map(|(sig, _)| *sig).collect();
        f.debug_struct("StopSignals")
            .field("signals", &signals)
            .finish()
    }
}

impl Drop for StopSignals {
    fn drop(&mut self) {
        for (sig, old) in &self.before {
            // SAFETY: restoring a disposition read by `stop_runs_on`.
            unsafe { libc::sigaction(*sig, old, std::ptr::null_mut()) };
        }
    }
}

extern "C" fn on_stop_signal(sig: libc::c_int) {
    let fd = STOP_WRITE.load(Ordering::Relaxed);
    if fd >= 0 {
        let byte = u8::try_from(sig).unwrap_or(u8::MAX);
        // SAFETY: write(2) of one byte from the stack; async-signal-safe.
        unsafe { libc::write(fd, (&byte as *const u8).cast(), 1) };
    }
}

/// The first stop signal that arrived (0: none yet). Kept: a signal that
/// arrives between runs, or during the self-test's probes, stops the next.
static STOPPED: AtomicI32 = AtomicI32::new(0);

/// The stop signal ([`stop_runs_on`]) this process got, if it got one: no
/// run should start then.
pub fn stop_requested() -> Option<i32> {
    let seen = STOPPED.load(Ordering::Acquire);
    if seen != 0 {
        return Some(seen);
    }
    let fd = STOP_READ.load(Ordering::Acquire);
    if fd < 0 {
        return None;
    }
    let mut byte = 0u8;
    // SAFETY: a non-blocking read of one byte into the stack.
    let n = unsafe { libc::read(fd, (&mut byte as *mut u8).cast(), 1) };
    if n != 1 {
        return None;
    }
    let sig = i32::from(byte);
    STOPPED.store(sig, Ordering::Release);
    Some(sig)
}

/// Where a wait hands the stop signals that arrive during it (`None`: the
/// first one ends the wait).
type Forward<'a> = Option<&'a mut dyn FnMut(i32)>;

/// For a wait: the stop signal that ends it (`forward` is `None`), or
/// `None` after handing each stop signal not yet seen to `forward` (the
/// first one, which began the grace, was seen by [`stop_requested`]).
fn stopped(forward: &mut Forward<'_>) -> Option<i32> {
    let Some(forward) = forward else {
        return stop_requested();
    };
    // The first stop signal is kept in STOPPED; each later one waits in
    // the pipe.
    let _ = stop_requested();
    let fd = STOP_READ.load(Ordering::Acquire);
    if fd < 0 {
        return None;
    }
    let mut byte = 0u8;
    // SAFETY: non-blocking reads of one byte into the stack.
    while unsafe { libc::read(fd, (&mut byte as *mut u8).cast(), 1) } == 1 {
        forward(i32::from(byte));
    }
    None
}

/// A child to wait for.
#[derive(Debug)]
pub struct Watch {
    pid: libc::pid_t,
    pidfd: Option<OwnedFd>,
    cancel: Option<std::os::fd::RawFd>,
    relayed_only: bool,
}

impl Watch {
    /// Watches `pid`, an unreaped child of this process.
    pub fn new(pid: libc::pid_t) -> Self {
        Self {
            pid,
            pidfd: pidfd_open(pid),
            cancel: None,
            relayed_only: false,
        }
    }

    /// A socket the wait reads while it lasts (the caller keeps it open):
    /// each byte is a signal passed on to the child's process group, as a
    /// stop signal is (only SIGINT, SIGQUIT, SIGTERM, SIGHUP; others are
    /// dropped); its end of file (or an error) ends the wait
    /// ([`Waited::Cancelled`]), and the run then ends as on its deadline.
    pub fn with_cancel(mut self, fd: Option<std::os::fd::RawFd>) -> Self {
        self.cancel = fd;
        self
    }

    /// With a cancel socket ([`Watch::with_cancel`]) and `only`: the wait
    /// takes its stop signals from the socket alone, not from this
    /// process's ([`stop_runs_on`]). For a runner that relays a requester's
    /// signals there, which would otherwise reach the child a second time.
    pub fn with_relayed_signals_only(mut self, only: bool) -> Self {
        self.relayed_only = only;
        self
    }

    /// Reads what the cancel socket ([`Watch::with_cancel`]) holds, passing
    /// its signals on: whether it has ended (the wait then ends).
    fn cancelled(&self) -> bool {
        let Some(fd) = self.cancel else {
            return false;
        };
        loop {
            let mut buf = [0u8; 16];
            // SAFETY: a non-blocking receive into the stack buffer.
            let n =
                unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
            if n > 0 {
                for &byte in &buf[..n as usize] {
                    let sig = libc::c_int::from(byte);
                    if [libc::SIGINT, libc::SIGQUIT, libc::SIGTERM, libc::SIGHUP].contains(&sig) {
                        // SAFETY: kill has no memory effects; the child is
                        // unreaped and leads its own process group (the
                        // session hook), so the group is the run's.
                        unsafe { libc::kill(-self.pid, sig) };
                    }
                }
                continue;
            }
            if n == 0 {
                return true;
            }
            match std::io::Error::last_os_error().raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(e) if e == libc::EAGAIN || e == libc::EWOULDBLOCK => return false,
                _ => return true,
            }
        }
    }

    /// Waits until the child exits, `deadline` passes (`None`: no bound) or
    /// a stop signal arrives ([`stop_runs_on`]). The child is left unreaped.
    pub fn wait_exit(&self, deadline: Option<Instant>) -> Waited {
        self.wait(deadline, None)
    }

    /// Waits until the child exits or `deadline` passes, handing every stop
    /// signal that arrives meanwhile to `forward` (the wait goes on): the
    /// grace after a stop signal, when a second Ctrl-C reaches the command
    /// as the first did.
    pub(crate) fn wait_exit_forwarding(
        &self,
        deadline: Instant,
        forward: &mut dyn FnMut(i32),
    ) -> Waited {
        self.wait(Some(deadline), Some(forward))
    }

    fn wait(&self, deadline: Option<Instant>, mut forward: Forward<'_>) -> Waited {
        if let Some(pidfd) = &self.pidfd {
            if let Some(waited) = wait_pidfd(self, pidfd, deadline, &mut forward) {
                return waited;
            }
        }
        self.wait_polling(deadline, &mut forward)
    }

    /// Whether this wait leaves this process's stop signals alone.
    fn relayed_only(&self) -> bool {
        self.relayed_only && self.cancel.is_some()
    }

    /// The stop signal that ends this wait ([`stopped`]); never for a wait
    /// whose stop signals come through its cancel socket alone.
    fn stopped(&self, forward: &mut Forward<'_>) -> Option<i32> {
        if self.relayed_only() {
            return None;
        }
        stopped(forward)
    }

    /// One `waitid(WEXITED | WNOWAIT | WNOHANG)` for the child: whether it
    /// has exited (the child stays unreaped), or the errno.
    fn exited(&self) -> Result<bool, i32> {
        // SAFETY: siginfo_t is plain data, all-zero valid; waitid writes it.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: a valid out-pointer; WNOWAIT leaves the child waitable.
        let rc = unsafe {
            libc::waitid(
                libc::P_PID,
                self.pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT | libc::WNOHANG,
            )
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EINVAL));
        }
        // SAFETY: si_pid is valid to read for waitid results (0: WNOHANG
        // found no exited child).
        Ok(unsafe { info.si_pid() } != 0)
    }

    /// Checks with `waitid(WNOWAIT)` on a short tick.
    fn wait_polling(&self, deadline: Option<Instant>, forward: &mut Forward<'_>) -> Waited {
        loop {
            if let Some(sig) = self.stopped(forward) {
                return Waited::Stopped(sig);
            }
            if self.cancelled() {
                return Waited::Cancelled;
            }
            match self.exited() {
                Ok(true) => return Waited::Exited,
                Ok(false) | Err(libc::EINTR) => {}
                // Not our child (already reaped): nothing left to wait for.
                Err(_) => return Waited::Exited,
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Waited::TimedOut;
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

/// `Some(how)` from polling the pidfd (and the stop pipe); `None` when
/// `poll` fails with anything but `EINTR` (the caller then polls with
/// `waitid`).
fn wait_pidfd(
    watch: &Watch,
    pidfd: &OwnedFd,
    deadline: Option<Instant>,
    forward: &mut Forward<'_>,
) -> Option<Waited> {
    loop {
        if let Some(sig) = watch.stopped(forward) {
            return Some(Waited::Stopped(sig));
        }
        let ms = match deadline {
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Some(Waited::TimedOut);
                }
                // Rounded up, so the wait never ends just short of the deadline.
                libc::c_int::try_from(left.as_millis() + 1).unwrap_or(libc::c_int::MAX)
            }
            None => -1,
        };
        let mut pfds = [
            libc::pollfd {
                fd: pidfd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                // A wait taking relayed signals only leaves the pipe alone.
                fd: if watch.relayed_only() {
                    -1
                } else {
                    STOP_READ.load(Ordering::Acquire)
                },
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: watch.cancel.unwrap_or(-1),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: three pollfds (a negative fd is skipped by poll).
        let n = unsafe { libc::poll(pfds.as_mut_ptr(), 3, ms) };
        if n > 0 && pfds[0].revents != 0 {
            return Some(Waited::Exited);
        }
        if n > 0 && pfds[2].revents != 0 && watch.cancelled() {
            return Some(Waited::Cancelled);
        }
        if n < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return None;
        }
        // n == 0: the deadline check at the top ends the loop; the stop pipe
        // or EINTR: its check at the top.
    }
}
