//! Receiving the listener fd the child sends over a Unix socket (the
//! sending side, which runs in the child, is `sandbox_seccomp::listener`).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use crate::error::BrokerError;
use sandbox_seccomp::listener::FIXED_VERIFIED;

/// Control-message buffer for one fd, aligned for `cmsghdr`.
#[repr(C, align(8))]
struct CmsgBuf([u8; 64]);

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

/// Receives one fd sent with [`send_fd`](sandbox_seccomp::listener::send_fd)
/// (close-on-exec set).
pub fn recv_fd(sock: &OwnedFd) -> Result<OwnedFd, BrokerError> {
    recv_listener(sock).map(|(fd, _)| fd)
}

/// Receives the listener sent by
/// [`install_filter_with_listener_checked`](sandbox_seccomp::listener::install_filter_with_listener_checked)
/// (or [`send_fd`](sandbox_seccomp::listener::send_fd)) and whether the
/// child vouched for the fixed credentials it was given (`true` only after
/// its [`FixedCredentials::verify_in_child`](crate::FixedCredentials::verify_in_child) passed).
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
