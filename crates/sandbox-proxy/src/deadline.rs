//! Reads bounded by a deadline, so a stuck client cannot pin a thread.

use std::io::{self, Read};
use std::net::TcpStream;
use std::time::Instant;

/// Sets the read timeout to what is left until `deadline`.
fn time_left(stream: &TcpStream, deadline: Instant) -> io::Result<()> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(io::ErrorKind::TimedOut.into());
    }
    stream.set_read_timeout(Some(left))
}

/// A read timeout shows as `WouldBlock` on Unix: call it `TimedOut`.
fn timed_out(e: io::Error) -> io::Error {
    if e.kind() == io::ErrorKind::WouldBlock {
        io::ErrorKind::TimedOut.into()
    } else {
        e
    }
}

/// One peek that ends by `deadline`.
pub(crate) fn peek_by(
    stream: &mut TcpStream,
    buf: &mut [u8],
    deadline: Instant,
) -> io::Result<usize> {
    by(stream, deadline, |s| s.peek(buf))
}

/// One read that ends by `deadline`.
pub(crate) fn read_by(
    stream: &mut TcpStream,
    buf: &mut [u8],
    deadline: Instant,
) -> io::Result<usize> {
    by(stream, deadline, |s| s.read(buf))
}

/// `op` on `stream` with the read timeout set to what is left, retried on
/// `EINTR`.
fn by(
    stream: &mut TcpStream,
    deadline: Instant,
    mut op: impl FnMut(&mut TcpStream) -> io::Result<usize>,
) -> io::Result<usize> {
    loop {
        time_left(stream, deadline)?;
        match op(stream) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            r => return r.map_err(timed_out),
        }
    }
}

/// Fills `buf` by `deadline`; an early end of stream is `UnexpectedEof`.
pub(crate) fn read_exact_by(
    stream: &mut TcpStream,
    buf: &mut [u8],
    deadline: Instant,
) -> io::Result<()> {
    let mut filled = 0;
    while filled < buf.len() {
        match read_by(stream, &mut buf[filled..], deadline)? {
            0 => return Err(io::ErrorKind::UnexpectedEof.into()),
            n => filled += n,
        }
    }
    Ok(())
}
