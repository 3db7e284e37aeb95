//! Relaying bytes both ways between a client and its destination.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::state::Slot;

/// How long an upstream may stay silent once its client has ended its
/// side of a tunnel (end of stream, a half-close or the client's exit):
/// after that long without a byte toward the client the tunnel is ended
/// (both sockets shut down). An upstream still sending (a download after
/// the request's half-close) is never cut.
pub(crate) const HALF_CLOSED_IDLE: Duration = Duration::from_secs(30);

/// Copy buffer per direction: large reads keep a bulk transfer to few
/// syscalls (std's `io::copy` uses 8 KiB between two sockets).
const BUF: usize = 64 * 1024;

/// Copies `from` to `to` until end of stream, then shuts `to`'s write side
/// (the half-close travels on). On an error both sockets are shut down
/// entirely, so the other direction ends too. On Linux the bytes move
/// through a pipe with splice(2), never copied into the proxy's memory
/// ([`splice_pump`]); elsewhere, or when the kernel refuses splice, through
/// a buffer. Counts the bytes it moved in `moved`; true when it ended at
/// the end of `from`'s stream.
fn pump(from: &TcpStream, to: &TcpStream, moved: &AtomicU64) -> bool {
    #[cfg(target_os = "linux")]
    let result = match splice_pump(from, to, moved) {
        Spliced::Done(result) => result,
        Spliced::Unsupported => copy(from, to, moved),
    };
    #[cfg(not(target_os = "linux"))]
    let result = copy(from, to, moved);
    match result {
        Ok(()) => {
            let _ = to.shutdown(Shutdown::Write);
            true
        }
        Err(_) => {
            let _ = from.shutdown(Shutdown::Both);
            let _ = to.shutdown(Shutdown::Both);
            false
        }
    }
}

/// Copies through a buffer until end of stream.
fn copy(mut from: &TcpStream, mut to: &TcpStream, moved: &AtomicU64) -> io::Result<()> {
    let mut buf = vec![0u8; BUF];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        to.write_all(&buf[..n])?;
        moved.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// How a splice relay went.
#[cfg(target_os = "linux")]
enum Spliced {
    /// It ran to the end of the stream, or to an error.
    Done(io::Result<()>),
    /// No byte moved: the kernel cannot splice these (the caller copies).
    Unsupported,
}

/// The pipe a splice relay asks for (the default is 64 KiB; an
/// unprivileged process may grow it to `/proc/sys/fs/pipe-max-size`, 1 MiB
/// by default; when refused it stays as it is).
#[cfg(target_os = "linux")]
const PIPE: usize = 1 << 20;

/// Copies `from` to `to` through a pipe with splice(2): socket to pipe,
/// pipe to socket, the pages moved in the kernel.
#[cfg(target_os = "linux")]
fn splice_pump(from: &TcpStream, to: &TcpStream, moved: &AtomicU64) -> Spliced {
    // splice(2) to a socket whose peer is gone raises SIGPIPE (it has no
    // MSG_NOSIGNAL): blocked on this thread while it runs, and one raised
    // taken before the mask is restored, so a process that keeps the
    // default action is not ended by a closed connection.
    // SAFETY: sigset operations on local sets; pthread_sigmask changes
    // only this thread's mask.
    let old = unsafe {
        let mut pipe: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut pipe);
        libc::sigaddset(&mut pipe, libc::SIGPIPE);
        libc::pthread_sigmask(libc::SIG_BLOCK, &pipe, &mut old);
        old
    };
    let spliced = splice_loop(from, to, moved);
    // SAFETY: as above; sigtimedwait with a zero timeout only takes a
    // pending SIGPIPE, it never waits.
    unsafe {
        let mut pipe: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut pipe);
        libc::sigaddset(&mut pipe, libc::SIGPIPE);
        let zero = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        while libc::sigtimedwait(&pipe, std::ptr::null_mut(), &zero) == libc::SIGPIPE {}
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
    }
    spliced
}

#[cfg(target_os = "linux")]
fn splice_loop(from: &TcpStream, to: &TcpStream, counted: &AtomicU64) -> Spliced {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    // A pipe only once there is something to move (a silent connection
    // holds none), within the process's share of its user's pipe pages
    // (crate::pipes); past it, or on an error here, the caller copies.
    if !readable(from) {
        return Spliced::Unsupported;
    }
    let Some(lease) = crate::pipes::take() else {
        return Spliced::Unsupported;
    };
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 writes two descriptors into `fds`, which we then own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Spliced::Unsupported;
    }
    // SAFETY: both were just created and are owned by nothing else
    // (dropped before `lease`, declared after it).
    let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let size = match lease.grow_to() {
        // SAFETY: fcntl on a descriptor we own; a refusal leaves the default size.
        Some(size) => unsafe {
            libc::fcntl(
                wr.as_raw_fd(),
                libc::F_SETPIPE_SZ,
                libc::c_int::try_from(size.min(PIPE)).unwrap_or(0),
            )
        },
        // SAFETY: as above, a read of the pipe's size.
        None => unsafe { libc::fcntl(wr.as_raw_fd(), libc::F_GETPIPE_SZ) },
    };
    let chunk = usize::try_from(size)
        .ok()
        .filter(|&s| s > 0)
        .unwrap_or(64 * 1024);
    let mut moved = false;
    loop {
        // SAFETY: splice between descriptors we hold, no memory passed.
        let n = unsafe {
            libc::splice(
                from.as_raw_fd(),
                std::ptr::null_mut(),
                wr.as_raw_fd(),
                std::ptr::null_mut(),
                chunk,
                libc::SPLICE_F_MOVE,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EINVAL | libc::ENOSYS | libc::EPERM) if !moved => {
                    return Spliced::Unsupported
                }
                _ => return Spliced::Done(Err(e)),
            }
        }
        if n == 0 {
            return Spliced::Done(Ok(()));
        }
        moved = true;
        let mut left = n as usize;
        while left > 0 {
            // SAFETY: as above.
            let m = unsafe {
                libc::splice(
                    rd.as_raw_fd(),
                    std::ptr::null_mut(),
                    to.as_raw_fd(),
                    std::ptr::null_mut(),
                    left,
                    libc::SPLICE_F_MOVE,
                )
            };
            if m < 0 {
                let e = io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                return Spliced::Done(Err(e));
            }
            if m == 0 {
                return Spliced::Done(Err(io::ErrorKind::WriteZero.into()));
            }
            left -= m as usize;
            counted.fetch_add(m as u64, Ordering::Relaxed);
        }
    }
}

/// Waits until `from` has bytes or its end to read (or an error to
/// report): false only when poll(2) itself fails.
#[cfg(target_os = "linux")]
fn readable(from: &TcpStream) -> bool {
    use std::os::fd::AsRawFd;
    loop {
        let mut pfd = libc::pollfd {
            fd: from.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd for a socket we hold.
        if unsafe { libc::poll(&mut pfd, 1, -1) } >= 0 {
            return true;
        }
        if io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return false;
        }
    }
}

/// For a relay on two threads, called on the client-to-upstream one once
/// the client has ended its side: returns when the relay ends (`relay_end`
/// disconnected: the upstream-to-client direction is done) or, having shut
/// both sockets down, after a whole `idle` ([`HALF_CLOSED_IDLE`] but in
/// tests) in which `down`, the count of the upstream's bytes the other
/// thread read, did not grow (counted: [`Slot::cut_silent`]).
pub(crate) fn cut_when_silent(
    slot: &Slot,
    relay_end: &std::sync::mpsc::Receiver<()>,
    down: &AtomicU64,
    idle: Duration,
    (client, upstream): (&TcpStream, &TcpStream),
) {
    let mut seen = down.load(Ordering::Relaxed);
    while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = relay_end.recv_timeout(idle) {
        let now = down.load(Ordering::Relaxed);
        if now == seen {
            let _ = upstream.shutdown(Shutdown::Both);
            let _ = client.shutdown(Shutdown::Both);
            slot.cut_silent();
            return;
        }
        seen = now;
    }
}

/// For a relay on one thread: reads `upstream` into `buf` as
/// [`Read::read`] does (within its read timeout, if any), but once
/// `client` (the client's socket, open for the call) has ended its side
/// (its end of stream, half-close or exit, seen by poll(2) as
/// `POLLRDHUP`, whatever bytes it left unread) waits `idle`
/// ([`HALF_CLOSED_IDLE`] but in tests) at most for the upstream's next
/// byte: then fails with [`io::ErrorKind::TimedOut`], counted by `cut`.
#[cfg(target_os = "linux")]
pub(crate) fn read_while_heard(
    mut upstream: &TcpStream,
    (client, idle, cut): (std::os::fd::RawFd, Duration, &crate::state::SilenceNote),
    buf: &mut [u8],
) -> io::Result<usize> {
    use std::os::fd::AsRawFd;
    use std::time::Instant;
    // Rounded up: poll never returns before the bound.
    let limit = |d: Duration| {
        libc::c_int::try_from(d.as_micros().div_ceil(1000)).unwrap_or(libc::c_int::MAX)
    };
    let within = upstream.read_timeout()?;
    let started = Instant::now();
    let mut client_ended: Option<Instant> = None;
    loop {
        let left = match client_ended {
            Some(at) => Some(idle.saturating_sub(at.elapsed())),
            None => within.map(|t| t.saturating_sub(started.elapsed())),
        };
        let mut fds = [
            libc::pollfd {
                fd: upstream.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: client,
                events: libc::POLLRDHUP,
                revents: 0,
            },
        ];
        let watched = if client_ended.is_some() { 1 } else { 2 };
        // SAFETY: poll reads and writes `watched` (at most 2) entries of
        // `fds`, a live array of 2.
        let rc = unsafe { libc::poll(fds.as_mut_ptr(), watched, left.map_or(-1, limit)) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if fds[0].revents != 0 {
            // Readable, ended or failed: the read says which.
            return upstream.read(buf);
        }
        if rc == 0 {
            if client_ended.is_some() {
                cut.note();
            }
            return Err(io::ErrorKind::TimedOut.into());
        }
        if fds[1].revents != 0 && client_ended.is_none() {
            client_ended = Some(Instant::now());
        }
    }
}

/// Relays between `client` and `upstream` until both directions ended:
/// client to upstream on a second thread, upstream to client on this one;
/// once the client's side has ended, the upstream may stay silent
/// [`HALF_CLOSED_IDLE`] at most.
pub(crate) fn relay(slot: &Slot, client: TcpStream, upstream: TcpStream) {
    relay_within(slot, client, upstream, HALF_CLOSED_IDLE);
}

/// [`relay`] with `idle` for [`HALF_CLOSED_IDLE`]. Both threads share the
/// two sockets (no duplicate descriptors).
fn relay_within(slot: &Slot, client: TcpStream, upstream: TcpStream, idle: Duration) {
    slot.track(&upstream);
    let _ = client.set_read_timeout(None);
    let down = AtomicU64::new(0);
    let (done, ended) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|scope| {
        let (client, upstream, down) = (&client, &upstream, &down);
        let up = std::thread::Builder::new()
            .name("sandbox-proxy-relay".into())
            .stack_size(128 * 1024)
            .spawn_scoped(scope, move || {
                if !pump(client, upstream, &AtomicU64::new(0)) {
                    return;
                }
                // The client has ended its side: the upstream must keep
                // sending, or the tunnel ends.
                cut_when_silent(slot, &ended, down, idle, (client, upstream));
            });
        // Without a second thread the sockets are dropped: closed.
        if up.is_ok() {
            pump(upstream, client, down);
        }
        drop(done);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two ends of a loopback TCP connection.
    fn pair() -> (TcpStream, TcpStream) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (b, _) = listener.accept().unwrap();
        (a, b)
    }

    /// The bytes arrive whole and in order, the half-close travels on;
    /// and a peer gone mid-stream ends the pump with an error, not the
    /// process: with SIGPIPE at its default action (as a program
    /// embedding the proxy may keep it), splice(2) to the closed socket
    /// would raise it.
    #[test]
    fn pumps_bytes_whole_and_survive_a_closed_peer() {
        let data: Vec<u8> = (0..(3 << 20) + 7).map(|i| (i * 7 % 251) as u8).collect();
        let (mut src, from) = pair();
        let (to, mut dst) = pair();
        let pumping = std::thread::spawn(move || pump(&from, &to, &AtomicU64::new(0)));
        let writer = {
            let data = data.clone();
            std::thread::spawn(move || {
                src.write_all(&data).unwrap();
                src.shutdown(Shutdown::Write).unwrap();
            })
        };
        let mut got = Vec::new();
        dst.read_to_end(&mut got).unwrap();
        writer.join().unwrap();
        pumping.join().unwrap();
        assert!(got == data, "{} bytes of {}", got.len(), data.len());

        #[cfg(target_os = "linux")]
        {
            // SAFETY: the disposition is restored below; other tests'
            // sockets write with MSG_NOSIGNAL (std).
            let before = unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
            let (mut src, from) = pair();
            let (to, dst) = pair();
            drop(dst);
            let pumping = std::thread::spawn(move || pump(&from, &to, &AtomicU64::new(0)));
            let chunk = vec![b'x'; 1 << 16];
            // The pump ends (its error shuts `from`): writes then fail.
            for _ in 0..4096 {
                if src.write_all(&chunk).is_err() {
                    break;
                }
            }
            pumping.join().unwrap();
            // SAFETY: as above.
            unsafe { libc::signal(libc::SIGPIPE, before) };
        }
    }

    /// A tunnel whose client has ended its side (a half-close) and whose
    /// upstream stays silent and open ends after the idle bound: the
    /// client reads the end; twin: an upstream that keeps sending after
    /// the half-close, each pause shorter than the bound, for several
    /// bounds in all, is relayed whole.
    #[test]
    fn a_silent_upstream_after_the_clients_end_is_cut_a_sending_one_is_not() {
        use std::time::{Duration, Instant};
        let idle = Duration::from_millis(300);
        // Silent upstream: `far` (its end) is held open, never written.
        let (mut client, near_client) = pair();
        let (near_up, far) = pair();
        let started = Instant::now();
        let slot = std::sync::Arc::new(crate::state::test_slot());
        let relaying = {
            let slot = std::sync::Arc::clone(&slot);
            std::thread::spawn(move || relay_within(&slot, near_client, near_up, idle))
        };
        client.write_all(b"hello").unwrap();
        client.shutdown(Shutdown::Write).unwrap();
        let mut got = Vec::new();
        client
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        client.read_to_end(&mut got).unwrap();
        relaying.join().unwrap();
        let took = started.elapsed();
        assert!(got.is_empty());
        assert!(took >= idle && took < Duration::from_secs(5), "{took:?}");
        // The cut is counted for the run's record (not a refusal).
        assert_eq!(slot.shared.ended().silent(), 1);
        assert_eq!(slot.shared.refusal_count(), 0);
        drop(far);

        // Sending upstream: 10 pieces 100 ms apart (1 s, over 3 bounds).
        let (mut client, near_client) = pair();
        let (near_up, mut far) = pair();
        let slot = std::sync::Arc::new(crate::state::test_slot());
        let relaying = {
            let slot = std::sync::Arc::clone(&slot);
            std::thread::spawn(move || relay_within(&slot, near_client, near_up, idle))
        };
        client.write_all(b"hello").unwrap();
        client.shutdown(Shutdown::Write).unwrap();
        let origin = std::thread::spawn(move || {
            let mut request = Vec::new();
            far.read_to_end(&mut request).unwrap();
            assert_eq!(request, b"hello");
            for i in 0..10u8 {
                std::thread::sleep(Duration::from_millis(100));
                far.write_all(&[b'0' + i]).unwrap();
            }
            far.shutdown(Shutdown::Write).unwrap();
        });
        let mut got = Vec::new();
        client.read_to_end(&mut got).unwrap();
        origin.join().unwrap();
        relaying.join().unwrap();
        assert_eq!(got, b"0123456789");
        assert_eq!(slot.shared.ended().silent(), 0);
    }
}
