//! Passing the listener fd from the child to the runner over a Unix socket.
//!
//! Written with raw `libc` because the sending side runs between fork and exec,
//! where only async-signal-safe calls and no allocation are allowed (nix's
//! `sendmsg` sizes its control buffer on the heap).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use crate::creds::FixedCredentials;
use crate::error::BrokerError;

/// Control-message buffer for one fd, aligned for `cmsghdr`.
#[repr(C, align(8))]
struct CmsgBuf([u8; 64]);

/// Sends `fd` over the Unix socket `sock` as `SCM_RIGHTS` with a one-byte payload.
///
/// Async-signal-safe: stack buffers only, no allocation, no panics; returns the
/// raw errno on failure so a pre-exec hook can report it.
pub fn send_fd(sock: RawFd, fd: RawFd) -> Result<(), i32> {
    send_fd_with(sock, fd, NO_STATEMENT)
}

/// The payload byte of a listener sent without a statement.
const NO_STATEMENT: u8 = 0;
/// The payload byte of a listener whose sender checked, just before, that
/// the process has the fixed credentials it was prepared with.
const FIXED_VERIFIED: u8 = 1;

fn send_fd_with(sock: RawFd, fd: RawFd, byte: u8) -> Result<(), i32> {
    let mut payload = [byte];
    let mut iov = libc::iovec {
        iov_base: payload.as_mut_ptr().cast(),
        iov_len: payload.len(),
    };
    let mut buf = CmsgBuf([0; 64]);
    // SAFETY: CMSG_SPACE/CMSG_LEN are pure arithmetic.
    let (space, len) = unsafe {
        (
            libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) as usize,
            libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as usize,
        )
    };
    if space > buf.0.len() {
        return Err(libc::EINVAL);
    }
    // SAFETY: msghdr is plain data; all-zero is a valid value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = buf.0.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: msg points at a control buffer of `space` bytes, so the first
    // header fits; we write exactly one fd into its data.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if cmsg.is_null() {
            return Err(libc::EINVAL);
        }
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = len as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), fd);
    }
    loop {
        // SAFETY: msg and its buffers are live for the call.
        let n = unsafe { libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) };
        if n >= 0 {
            return Ok(());
        }
        // SAFETY: reading errno right after the failed call.
        let errno = unsafe { *libc::__errno_location() };
        if errno != libc::EINTR {
            return Err(errno);
        }
    }
}

/// A connected `AF_UNIX` `SOCK_SEQPACKET` pair, both ends close-on-exec:
/// `(runner end, child end)`. Create it before fork; the runner closes the
/// child end after spawning, so [`recv_fd`] fails instead of hanging when the
/// child dies before sending.
pub fn listener_channel() -> Result<(OwnedFd, OwnedFd), BrokerError> {
    let mut sv = [0; 2];
    // SAFETY: socketpair fills two fds on success.
    let rc = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            sv.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return Err(BrokerError::FdPassing {
            reason: format!("socketpair: {}", std::io::Error::last_os_error()),
        });
    }
    // SAFETY: fresh fds, owned from here.
    Ok(unsafe { (OwnedFd::from_raw_fd(sv[0]), OwnedFd::from_raw_fd(sv[1])) })
}

/// Child side, after `PR_SET_NO_NEW_PRIVS` (and Landlock): installs `filter` with
/// `SECCOMP_FILTER_FLAG_NEW_LISTENER`, sends the listener over `sock` with
/// [`send_fd`] and closes the child's copy of it.
///
/// Async-signal-safe (stack only, no allocation, no panics); returns the raw
/// errno on failure. `filter` routes the calls the broker handles to
/// `SECCOMP_RET_USER_NOTIF` (see [`sandbox_seccomp::handler`]). Where the kernel has it (5.19), the filter gets
/// `SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV`: a call the broker has received
/// is no longer interrupted by a non-fatal signal, so a performed call is
/// never reported as interrupted and restarted.
pub fn install_filter_with_listener(filter: &[libc::sock_filter], sock: RawFd) -> Result<(), i32> {
    install_filter_with_listener_checked(filter, sock, None)
}

/// [`install_filter_with_listener`] that also tells the runner whether this
/// process has the credentials `fixed` describes, checked with
/// [`FixedCredentials::verify_in_child`] right before the filter is
/// installed (call it after `NO_NEW_PRIVS` and the capability drop, and only
/// with a filter that refuses new user namespaces); [`recv_listener`] reads
/// the answer. A process that differs (a `Command::uid` in the child, for
/// one) is simply not vouched for.
///
/// Async-signal-safe, as [`install_filter_with_listener`].
pub fn install_filter_with_listener_checked(
    filter: &[libc::sock_filter],
    sock: RawFd,
    fixed: Option<&FixedCredentials>,
) -> Result<(), i32> {
    let statement = match fixed.map(FixedCredentials::verify_in_child) {
        Some(Ok(())) => FIXED_VERIFIED,
        _ => NO_STATEMENT,
    };
    // With WAIT_KILLABLE_RECV where the kernel has it (see there).
    let listener = sandbox_seccomp::install_with_listener(filter)?;
    let sent = send_fd_with(sock, listener, statement);
    // SAFETY: closing the listener fd we own (the runner holds its own copy now).
    unsafe { libc::close(listener) };
    sent
}

/// Receives one fd sent with [`send_fd`] (close-on-exec set).
pub fn recv_fd(sock: &OwnedFd) -> Result<OwnedFd, BrokerError> {
    recv_listener(sock).map(|(fd, _)| fd)
}

/// Receives the listener sent by [`install_filter_with_listener_checked`]
/// (or [`send_fd`]) and whether the child vouched for the fixed credentials
/// it was given (`true` only after its check passed).
pub fn recv_listener(sock: &OwnedFd) -> Result<(OwnedFd, bool), BrokerError> {
    let fail = |reason: String| BrokerError::FdPassing { reason };
    let mut payload = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: payload.as_mut_ptr().cast(),
        iov_len: payload.len(),
    };
    let mut buf = CmsgBuf([0; 64]);
    // SAFETY: msghdr is plain data; all-zero is a valid value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = buf.0.as_mut_ptr().cast();
    msg.msg_controllen = buf.0.len() as _;
    let n = loop {
        // SAFETY: msg and its buffers are live for the call.
        let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n >= 0 {
            break n;
        }
        let err = std::io::Error::last_os_error();
        if err.kind() != std::io::ErrorKind::Interrupted {
            return Err(fail(format!("recvmsg: {err}")));
        }
    };
    if n == 0 {
        return Err(fail(
            "the peer closed the socket without sending (the child failed before installing its filter)".into(),
        ));
    }
    let mut received: Option<OwnedFd> = None;
    let mut extra = false;
    // SAFETY: walking the control buffer the kernel filled; each SCM_RIGHTS fd is
    // owned by us now and wrapped (or closed) exactly once.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg);
                let bytes = (*cmsg).cmsg_len as usize - (data as usize - cmsg as usize);
                for i in 0..bytes / std::mem::size_of::<RawFd>() {
                    let fd = std::ptr::read_unaligned(data.cast::<RawFd>().add(i));
                    let owned = OwnedFd::from_raw_fd(fd);
                    if received.is_none() {
                        received = Some(owned);
                    } else {
                        extra = true;
                    }
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err(fail("the control message was truncated".into()));
    }
    if extra {
        return Err(fail("more than one fd was sent".into()));
    }
    let fd = received.ok_or_else(|| fail("the message carried no fd".into()))?;
    Ok((fd, payload[0] == FIXED_VERIFIED))
}
