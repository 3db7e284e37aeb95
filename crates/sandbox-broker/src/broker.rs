//! The broker thread: receive, decide, perform, answer, record.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::thread::JoinHandle;

use crate::caller::{errno_of, Caller};
use crate::error::BrokerError;
use crate::log::{BrokerLog, BrokerRecord, Decision, Refusal, Target};
use crate::notif::{Listener, Received};
use crate::ops;
use crate::resolve::{BrokerRules, Unresolved};
use crate::syscalls::{self, Subject};

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

/// Serves a seccomp listener on its own thread until [`Broker::finish`].
///
/// Dropping a `Broker` without `finish` stops it too (the log is lost).
#[derive(Debug)]
pub struct Broker {
    stop: OwnedFd,
    thread: Option<JoinHandle<BrokerLog>>,
}

impl Broker {
    /// Starts serving notifications from `listener` on a thread.
    pub fn start(listener: OwnedFd, rules: BrokerRules) -> Result<Broker, BrokerError> {
        let listener = Listener::new(listener)?;
        // SAFETY: eventfd returns a fresh fd or -1.
        let raw = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if raw < 0 {
            return Err(BrokerError::Notify {
                what: "eventfd for the stop signal",
                source: io::Error::last_os_error(),
            });
        }
        // SAFETY: fresh fd.
        let stop = unsafe { OwnedFd::from_raw_fd(raw) };
        let stop_for_thread = stop.try_clone().map_err(BrokerError::Thread)?;
        let thread = std::thread::Builder::new()
            .name("sandbox-broker".into())
            .spawn(move || serve(&listener, &rules, &stop_for_thread))
            .map_err(BrokerError::Thread)?;
        Ok(Broker {
            stop,
            thread: Some(thread),
        })
    }

    /// Stops the broker (call it after the confined process tree ended) and
    /// returns what it answered.
    pub fn finish(mut self) -> BrokerLog {
        self.stop_and_join().unwrap_or_default()
    }

    fn stop_and_join(&mut self) -> Option<BrokerLog> {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes to our eventfd.
        unsafe { libc::write(self.stop.as_raw_fd(), (&one as *const u64).cast(), 8) };
        let thread = self.thread.take()?;
        Some(thread.join().unwrap_or_else(|_| BrokerLog {
            stopped_by_error: Some("the broker thread panicked".into()),
            ..BrokerLog::default()
        }))
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.stop_and_join();
    }
}

fn serve(listener: &Listener, rules: &BrokerRules, stop: &OwnedFd) -> BrokerLog {
    let mut log = BrokerLog::default();
    loop {
        let mut fds = [
            libc::pollfd {
                fd: listener.raw(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: stop.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: two live pollfds.
        let rc = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if rc < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            log.stopped_by_error = Some(format!("poll on the seccomp listener: {err}"));
            break;
        }
        if fds[0].revents & libc::POLLIN != 0 {
            match listener.recv() {
                Ok(Received::Notification(n)) => {
                    log.push(handle(listener, rules, &n));
                }
                Ok(Received::Gone) => {}
                Err(err) => {
                    log.stopped_by_error = Some(format!("SECCOMP_IOCTL_NOTIF_RECV: {err}"));
                    break;
                }
            }
            continue;
        }
        if fds[1].revents != 0 {
            break;
        }
        if fds[0].revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
            // No process uses the filter any more.
            break;
        }
    }
    log
}

/// Decides and answers one notification.
fn handle(listener: &Listener, rules: &BrokerRules, n: &libc::seccomp_notif) -> BrokerRecord {
    let nr = i64::from(n.data.nr);
    let tid = n.pid as i32;
    let (name, kind) = match syscalls::lookup(nr) {
        Some(found) if n.data.arch == AUDIT_ARCH => found,
        _ => {
            let decision = Decision::Refused {
                reason: Refusal::UnknownSyscall { nr },
            };
            return answer(listener, n.id, tid, "unknown", Target::default(), decision);
        }
    };
    let mut target = Target::default();
    let decision = decide(listener, rules, n, kind, &mut target);
    answer(listener, n.id, tid, name, target, decision)
}

fn decide(
    listener: &Listener,
    rules: &BrokerRules,
    n: &libc::seccomp_notif,
    kind: syscalls::Kind,
    target: &mut Target,
) -> Decision {
    let unreadable = |e: io::Error| Decision::Refused {
        reason: Refusal::UnreadableCaller {
            errno: errno_of(&e),
        },
    };
    let mut caller = match Caller::open(n.pid as i32) {
        Ok(c) => c,
        Err(_) if matches!(listener.id_valid(n.id), Ok(false)) => return Decision::CallerGone,
        Err(e) => return unreadable(e),
    };
    let decoded = syscalls::decode(kind, n.data.args, &caller);
    if decoded
        .as_ref()
        .is_ok_and(|(subject, _)| subject.needs_fd())
    {
        caller.open_pidfd();
    }
    // TOCTOU guard: the memory we read and the handles we opened belong to the
    // thread that made this request only if it is still waiting for the answer.
    match listener.id_valid(n.id) {
        Ok(true) => {}
        Ok(false) => return Decision::CallerGone,
        // Fail closed: answer EPERM rather than act on unverified data.
        Err(e) => return unreadable(e),
    }
    let (subject, op) = match decoded {
        Ok(d) => d,
        Err(e) => {
            return match errno_of(&e) {
                errno @ (libc::EFAULT
                | libc::EINVAL
                | libc::ERANGE
                | libc::E2BIG
                | libc::ENAMETOOLONG) => Decision::Failed { errno },
                _ => unreadable(e),
            }
        }
    };
    match &subject {
        Subject::Fd(fd) => target.fd = Some(*fd),
        Subject::At { dirfd, path, .. } => {
            target.path = Some(String::from_utf8_lossy(path.as_bytes()).into_owned());
            target.fd = (*dirfd != libc::AT_FDCWD).then_some(*dirfd);
        }
    }
    let obj = match rules.resolve(&caller, &subject) {
        Ok(obj) => obj,
        Err(Unresolved::Errno(errno)) => return Decision::Failed { errno },
        Err(Unresolved::Refused(reason, path)) => {
            target.resolved = path;
            return Decision::Refused { reason };
        }
    };
    target.resolved = Some(PathBuf::from(&obj.path));
    let identity = match caller.identity() {
        Ok(id) => id,
        Err(e) => return unreadable(e),
    };
    if let Err(reason) = ops::check(&op, &identity, &obj.stat) {
        return Decision::Refused { reason };
    }
    match ops::perform(&op, &obj) {
        Ok(()) => Decision::Performed,
        Err(e) => Decision::Failed {
            errno: errno_of(&e),
        },
    }
}

fn answer(
    listener: &Listener,
    id: u64,
    tid: i32,
    name: &str,
    target: Target,
    decision: Decision,
) -> BrokerRecord {
    let errno = match &decision {
        Decision::Performed => Some(0),
        Decision::Failed { errno } => Some(*errno),
        Decision::Refused { .. } => Some(libc::EPERM),
        Decision::CallerGone => None,
    };
    let decision = match errno.map(|e| listener.send(id, e)) {
        Some(Ok(true)) | None => decision,
        Some(Ok(false)) => Decision::CallerGone,
        Some(Err(err)) => {
            tracing::warn!(%err, syscall = name, "answering a seccomp notification failed");
            Decision::CallerGone
        }
    };
    tracing::debug!(syscall = name, tid, ?target, ?decision, "metadata request");
    BrokerRecord {
        syscall: name.to_owned(),
        pid: tid,
        target,
        decision,
    }
}
