//! Relaying bytes both ways between a client and its destination.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};

use crate::state::Slot;

/// Copy buffer per direction: large reads keep a bulk transfer to few
/// syscalls (std's `io::copy` uses 8 KiB between two sockets).
const BUF: usize = 64 * 1024;

/// Copies `from` to `to` until end of stream, then shuts `to`'s write side
/// (the half-close travels on). On an error both sockets are shut down
/// entirely, so the other direction ends too. On Linux the bytes move
/// through a pipe with splice(2), never copied into the proxy's memory
/// ([`splice_pump`]); elsewhere, or when the kernel refuses splice, through
/// a buffer.
fn pump(mut from: TcpStream, mut to: TcpStream) {
    #[cfg(target_os = "linux")]
    let result = match splice_pump(&from, &to) {
        Spliced::Done(result) => result,
        Spliced::Unsupported => copy(&mut from, &mut to),
    };
    #[cfg(not(target_os = "linux"))]
    let result = copy(&mut from, &mut to);
    match result {
        Ok(()) => {
            let _ = to.shutdown(Shutdown::Write);
        }
        Err(_) => {
            let _ = from.shutdown(Shutdown::Both);
            let _ = to.shutdown(Shutdown::Both);
        }
    }
}

/// Copies through a buffer until end of stream.
fn copy(from: &mut TcpStream, to: &mut TcpStream) -> io::Result<()> {
    let mut buf = vec![0u8; BUF];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        to.write_all(&buf[..n])?;
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
fn splice_pump(from: &TcpStream, to: &TcpStream) -> Spliced {
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
    let spliced = splice_loop(from, to);
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
fn splice_loop(from: &TcpStream, to: &TcpStream) -> Spliced {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 writes two descriptors into `fds`, which we then own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Spliced::Unsupported;
    }
    // SAFETY: both were just created and are owned by nothing else.
    let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: fcntl on a descriptor we own; a refusal leaves the default size.
    let size = unsafe { libc::fcntl(wr.as_raw_fd(), libc::F_SETPIPE_SZ, PIPE as libc::c_int) };
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
        }
    }
}

/// Relays between `client` and `upstream` until both directions ended:
/// client to upstream on a second thread, upstream to client on this one.
pub(crate) fn relay(slot: &Slot, client: TcpStream, upstream: TcpStream) {
    slot.track(&upstream);
    let _ = client.set_read_timeout(None);
    let (client2, upstream2) = match (client.try_clone(), upstream.try_clone()) {
        (Ok(c), Ok(u)) => (c, u),
        _ => return,
    };
    let up = std::thread::Builder::new()
        .name("sandbox-proxy-relay".into())
        .stack_size(128 * 1024)
        .spawn(move || pump(client2, upstream2));
    let Ok(up) = up else {
        // Dropping the clones and the originals closes both connections.
        return;
    };
    pump(upstream, client);
    let _ = up.join();
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
        let pumping = std::thread::spawn(move || pump(from, to));
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
            let pumping = std::thread::spawn(move || pump(from, to));
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
}
