//! Child side of passing the seccomp listener to the supervisor over a Unix
//! socket: install the filter with `SECCOMP_FILTER_FLAG_NEW_LISTENER`, send
//! the listener fd as `SCM_RIGHTS`. The receiving side is the broker's
//! (`sandbox_broker::recv_listener`).
//!
//! Written with raw `libc` because the sending side runs between fork and exec,
//! where only async-signal-safe calls and no allocation are allowed (nix's
//! `sendmsg` sizes its control buffer on the heap).

use std::os::fd::RawFd;

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

/// The payload byte of a listener sent without a statement (what the
/// broker's `recv_listener` reads).
pub const NO_STATEMENT: u8 = 0;
/// The payload byte of a listener whose sender checked, just before, that
/// the process has the fixed credentials it was prepared with.
pub const FIXED_VERIFIED: u8 = 1;

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

/// Child side, after `PR_SET_NO_NEW_PRIVS` (and Landlock): installs `filter` with
/// `SECCOMP_FILTER_FLAG_NEW_LISTENER`, sends the listener over `sock` with
/// [`send_fd`] and closes the child's copy of it.
///
/// Async-signal-safe (stack only, no allocation, no panics); returns the raw
/// errno on failure. `filter` routes the calls the broker handles to
/// `SECCOMP_RET_USER_NOTIF` (see [`FilterSpec::broker`](crate::FilterSpec::broker)).
/// Where the kernel has it (5.19), the filter gets
/// `SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV` (see [`install_with_listener`](crate::install_with_listener)).
pub fn install_filter_with_listener(filter: &[libc::sock_filter], sock: RawFd) -> Result<(), i32> {
    install_filter_with_listener_checked(filter, sock, false)
}

/// [`install_filter_with_listener`] that also tells the supervisor whether
/// this process has the fixed credentials it was prepared with: `verified`
/// is the result of the caller's check (the broker's
/// `FixedCredentials::verify_in_child`), made right before this call, after
/// `NO_NEW_PRIVS` and the capability drop, and only with a filter that
/// refuses new user namespaces; the broker's `recv_listener` reads it
/// ([`FIXED_VERIFIED`]).
///
/// Async-signal-safe, as [`install_filter_with_listener`].
pub fn install_filter_with_listener_checked(
    filter: &[libc::sock_filter],
    sock: RawFd,
    verified: bool,
) -> Result<(), i32> {
    let statement = if verified {
        FIXED_VERIFIED
    } else {
        NO_STATEMENT
    };
    // With WAIT_KILLABLE_RECV where the kernel has it (see there).
    let listener = crate::install_with_listener(filter)?;
    let sent = send_fd_with(sock, listener, statement);
    // SAFETY: closing the listener fd we own (the runner holds its own copy now).
    unsafe { libc::close(listener) };
    sent
}
