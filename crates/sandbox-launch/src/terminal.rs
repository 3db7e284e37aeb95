//! The terminal a run was given, given back as the runner found it.
//!
//! A command that inherits the user's terminal may change its settings
//! (`stty raw -echo -isig -ixon`, a full-screen program killed on the run's
//! timeout): those settings belong to the terminal, not to the command, and
//! outlive it. As `script` and `ssh` do, the launch saves the settings of
//! each terminal among the command's stdio before the command starts and
//! puts them back once every process of the run has ended, on every path
//! (exit, timeout, stop signal, a failed launch): `tcsetattr(TCSANOW)`
//! (not `TCSADRAIN`, which would wait on a stopped output), then
//! `tcflow(TCOON)`, which undoes a `TCOOFF` (the filter refuses that call
//! too: `sandbox_seccomp::DENIED_IOCTL_ARGS`). Only the terminals the runner
//! passed on, and only to the state it saw; a terminal whose settings did
//! not change is not written. Window size and the foreground process group
//! are left alone.
//!
//! A runner in a background process group of the terminal (a shell's `&`
//! job) would be stopped by `SIGTTOU` for changing it: the calling thread
//! blocks `SIGTTOU` around the restore, so the kernel lets the change
//! through (`tty_check_change`). Such a runner puts back the state it saw
//! when it started, which may undo the line editing mode of the shell in
//! the foreground for the line being typed at that moment; the shell sets
//! it again at its next prompt.

use std::os::fd::RawFd;

/// The settings of each terminal a command inherits, saved before it
/// starts; put back when dropped ([`Saved::restore`]).
pub(crate) struct Saved {
    terminals: Vec<(RawFd, libc::termios)>,
}

impl Saved {
    /// Saves the settings of each of `fds` that is a terminal (each
    /// terminal once, by its device number).
    pub(crate) fn of(fds: [RawFd; 3]) -> Saved {
        let mut terminals: Vec<(RawFd, libc::termios)> = Vec::new();
        let mut devices: Vec<libc::dev_t> = Vec::new();
        for fd in fds {
            // SAFETY: isatty only reads the fd's state.
            if unsafe { libc::isatty(fd) } != 1 {
                continue;
            }
            // SAFETY: zeroed plain-data structs filled by the kernel; valid
            // out-pointers.
            let (mut st, mut t) = unsafe {
                (
                    std::mem::zeroed::<libc::stat>(),
                    std::mem::zeroed::<libc::termios>(),
                )
            };
            // SAFETY: as above.
            if unsafe { libc::fstat(fd, &mut st) } != 0 || devices.contains(&st.st_rdev) {
                continue;
            }
            // SAFETY: as above.
            if unsafe { libc::tcgetattr(fd, &mut t) } != 0 {
                continue;
            }
            devices.push(st.st_rdev);
            terminals.push((fd, t));
        }
        Saved { terminals }
    }

    /// Puts each saved terminal's settings back (where they changed) and
    /// restarts its output, with `SIGTTOU` blocked in the calling thread.
    /// Failures are ignored: a terminal hung up or closed meanwhile has no
    /// state left to give back.
    pub(crate) fn restore(&self) {
        if self.terminals.is_empty() {
            return;
        }
        // SAFETY: sigset_t is plain data, initialised by sigemptyset.
        let (mut ttou, mut old) = unsafe {
            (
                std::mem::zeroed::<libc::sigset_t>(),
                std::mem::zeroed::<libc::sigset_t>(),
            )
        };
        // SAFETY: valid sigset pointers; the calling thread's mask only.
        let blocked = unsafe {
            libc::sigemptyset(&mut ttou);
            libc::sigaddset(&mut ttou, libc::SIGTTOU);
            libc::pthread_sigmask(libc::SIG_BLOCK, &ttou, &mut old) == 0
        };
        for (fd, saved) in &self.terminals {
            // SAFETY: zeroed plain data filled by the kernel.
            let mut now = unsafe { std::mem::zeroed::<libc::termios>() };
            // SAFETY: valid fd number and out-pointer; on failure `now`
            // stays zeroed and differs.
            let read = unsafe { libc::tcgetattr(*fd, &mut now) } == 0;
            if !read || !same(&now, saved) {
                // SAFETY: a termios the kernel filled for this terminal.
                unsafe { libc::tcsetattr(*fd, libc::TCSANOW, saved) };
            }
            // SAFETY: no memory effects.
            unsafe { libc::tcflow(*fd, libc::TCOON) };
        }
        if blocked {
            // SAFETY: the mask saved above.
            unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
        }
    }
}

impl Drop for Saved {
    fn drop(&mut self) {
        self.restore();
    }
}

/// Whether two terminal settings are the same (every field `tcsetattr`
/// sets).
fn same(a: &libc::termios, b: &libc::termios) -> bool {
    // SAFETY: cfget*speed only read the structs.
    let speeds = unsafe {
        (libc::cfgetispeed(a), libc::cfgetospeed(a)) == (libc::cfgetispeed(b), libc::cfgetospeed(b))
    };
    a.c_iflag == b.c_iflag
        && a.c_oflag == b.c_oflag
        && a.c_cflag == b.c_cflag
        && a.c_lflag == b.c_lflag
        && a.c_cc == b.c_cc
        && speeds
        && line(a) == line(b)
}

#[cfg(target_os = "linux")]
fn line(t: &libc::termios) -> u8 {
    t.c_line
}

#[cfg(not(target_os = "linux"))]
fn line(_: &libc::termios) -> u8 {
    0
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// A pty pair (master, slave), neither the controlling terminal.
    fn pty() -> (RawFd, RawFd) {
        // SAFETY: plain pty setup in the test process.
        unsafe {
            let master = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
            assert!(master >= 0);
            assert_eq!(libc::grantpt(master), 0);
            assert_eq!(libc::unlockpt(master), 0);
            let mut name = [0 as libc::c_char; 64];
            assert_eq!(libc::ptsname_r(master, name.as_mut_ptr(), name.len()), 0);
            let slave = libc::open(
                name.as_ptr(),
                libc::O_RDWR | libc::O_NOCTTY | libc::O_NONBLOCK,
            );
            assert!(slave >= 0);
            (master, slave)
        }
    }

    fn settings(fd: RawFd) -> libc::termios {
        // SAFETY: zeroed plain data filled by the kernel.
        let mut t = unsafe { std::mem::zeroed::<libc::termios>() };
        // SAFETY: valid out-pointer.
        assert_eq!(unsafe { libc::tcgetattr(fd, &mut t) }, 0);
        t
    }

    fn writes(fd: RawFd) -> bool {
        // SAFETY: one byte from a static buffer.
        let n = unsafe { libc::write(fd, b"x".as_ptr().cast(), 1) };
        n == 1
    }

    /// What a hostile command leaves (echo, canonical mode, signals and
    /// IXON off, output stopped) is put back; the same terminal on three
    /// fds is saved once; a non-terminal is skipped.
    #[test]
    fn a_terminal_is_given_back_as_it_was_found() {
        let (master, slave) = pty();
        let before = settings(slave);
        let mut null = [0; 2];
        // SAFETY: valid out-array.
        assert_eq!(unsafe { libc::pipe(null.as_mut_ptr()) }, 0);
        let saved = Saved::of([null[0], slave, slave]);
        assert_eq!(saved.terminals.len(), 1);
        let mut broken = before;
        broken.c_lflag &= !(libc::ECHO | libc::ICANON | libc::ISIG);
        broken.c_iflag &= !libc::IXON;
        // SAFETY: valid termios; no memory effects for tcflow.
        unsafe {
            assert_eq!(libc::tcsetattr(slave, libc::TCSANOW, &broken), 0);
            assert_eq!(libc::tcflow(slave, libc::TCOOFF), 0);
        }
        assert!(!writes(slave), "the output is stopped");
        assert!(!same(&settings(slave), &before));
        drop(saved);
        assert!(same(&settings(slave), &before), "settings given back");
        assert!(writes(slave), "output started again");
        // Twin: nothing changed, nothing written, output still flows.
        let saved = Saved::of([slave, slave, slave]);
        drop(saved);
        assert!(same(&settings(slave), &before));
        assert!(writes(slave));
        // SAFETY: closing our own fds.
        unsafe {
            libc::close(null[0]);
            libc::close(null[1]);
            libc::close(slave);
            libc::close(master);
        }
    }
}
