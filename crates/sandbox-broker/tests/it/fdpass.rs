//! The fd-passing helpers on their own.
#![cfg(target_os = "linux")]

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd};

use sandbox_broker::{listener_channel, recv_fd};
use sandbox_seccomp::listener::send_fd;

#[test]
fn an_fd_crosses_the_channel_and_still_works() {
    let (runner, child) = listener_channel().unwrap();
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two fds.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: fresh fds, owned from here.
    let (r, w) = unsafe {
        (
            std::fs::File::from_raw_fd(fds[0]),
            std::fs::File::from_raw_fd(fds[1]),
        )
    };
    send_fd(child.as_raw_fd(), w.as_raw_fd()).unwrap();
    drop(w);
    let got = recv_fd(&runner).unwrap();
    assert_ne!(got.as_raw_fd(), child.as_raw_fd());
    let mut w2 = std::fs::File::from(got);
    w2.write_all(b"ok").unwrap();
    drop(w2);
    let mut s = String::new();
    let mut r = r;
    r.read_to_string(&mut s).unwrap();
    assert_eq!(s, "ok");
}

#[test]
fn a_closed_peer_is_an_error_not_a_hang() {
    let (runner, child) = listener_channel().unwrap();
    drop(child);
    let err = recv_fd(&runner).unwrap_err();
    assert!(err.to_string().contains("closed"), "{err}");
}

#[test]
fn sending_a_bad_fd_reports_the_errno() {
    let (_runner, child) = listener_channel().unwrap();
    assert_eq!(send_fd(child.as_raw_fd(), -1), Err(libc::EBADF));
}
