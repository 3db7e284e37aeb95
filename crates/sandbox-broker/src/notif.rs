//! The seccomp user-notification listener: receive, validate, answer.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use crate::error::BrokerError;

/// A listener fd with the kernel's structure sizes.
pub(crate) struct Listener {
    fd: OwnedFd,
    /// u64 words, big enough for the kernel's `struct seccomp_notif`.
    notif_words: usize,
    /// u64 words, big enough for the kernel's `struct seccomp_notif_resp`.
    resp_words: usize,
}

/// Outcome of one receive.
pub(crate) enum Received {
    Notification(libc::seccomp_notif),
    /// The caller went away between poll and receive.
    Gone,
}

fn words(kernel: u16, ours: usize) -> usize {
    (kernel as usize).max(ours).div_ceil(8)
}

impl Listener {
    pub(crate) fn new(fd: OwnedFd) -> Result<Self, BrokerError> {
        let mut sizes = libc::seccomp_notif_sizes {
            seccomp_notif: 0,
            seccomp_notif_resp: 0,
            seccomp_data: 0,
        };
        // SAFETY: SECCOMP_GET_NOTIF_SIZES writes one seccomp_notif_sizes.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_GET_NOTIF_SIZES,
                0,
                &mut sizes as *mut libc::seccomp_notif_sizes,
            )
        };
        if rc != 0 {
            return Err(BrokerError::Notify {
                what: "SECCOMP_GET_NOTIF_SIZES",
                source: io::Error::last_os_error(),
            });
        }
        Ok(Self {
            fd,
            notif_words: words(
                sizes.seccomp_notif,
                std::mem::size_of::<libc::seccomp_notif>(),
            ),
            resp_words: words(
                sizes.seccomp_notif_resp,
                std::mem::size_of::<libc::seccomp_notif_resp>(),
            ),
        })
    }

    pub(crate) fn raw(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    /// `SECCOMP_IOCTL_NOTIF_RECV` into a zeroed buffer of the kernel's size.
    pub(crate) fn recv(&self) -> io::Result<Received> {
        let mut buf = vec![0u64; self.notif_words];
        loop {
            buf.fill(0);
            // SAFETY: the buffer is at least the kernel's seccomp_notif size.
            let rc = unsafe {
                libc::ioctl(self.raw(), libc::SECCOMP_IOCTL_NOTIF_RECV, buf.as_mut_ptr())
            };
            if rc == 0 {
                // SAFETY: the buffer holds at least size_of::<seccomp_notif>() bytes
                // and is 8-aligned.
                let n = unsafe { std::ptr::read(buf.as_ptr().cast::<libc::seccomp_notif>()) };
                return Ok(Received::Notification(n));
            }
            let err = io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::ENOENT) => return Ok(Received::Gone),
                _ => return Err(err),
            }
        }
    }

    /// Whether the request `id` is still pending (its caller alive and waiting).
    /// An error other than `ENOENT` means the kernel could not say.
    pub(crate) fn id_valid(&self, id: u64) -> io::Result<bool> {
        let mut id = id;
        loop {
            // SAFETY: ID_VALID reads one u64.
            let rc = unsafe {
                libc::ioctl(
                    self.raw(),
                    libc::SECCOMP_IOCTL_NOTIF_ID_VALID,
                    &mut id as *mut u64,
                )
            };
            if rc == 0 {
                return Ok(true);
            }
            let err = io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::ENOENT) => return Ok(false),
                _ => return Err(err),
            }
        }
    }

    /// Answers `id` with 0 (`errno == 0`) or `-errno`. `Ok(false)`: the caller is gone.
    pub(crate) fn send(&self, id: u64, errno: i32) -> io::Result<bool> {
        let mut buf = vec![0u64; self.resp_words];
        let resp = libc::seccomp_notif_resp {
            id,
            val: 0,
            error: -errno,
            flags: 0,
        };
        // SAFETY: the buffer is at least size_of::<seccomp_notif_resp>() and 8-aligned.
        unsafe { std::ptr::write(buf.as_mut_ptr().cast::<libc::seccomp_notif_resp>(), resp) };
        loop {
            // SAFETY: the buffer is at least the kernel's seccomp_notif_resp size.
            let rc = unsafe {
                libc::ioctl(self.raw(), libc::SECCOMP_IOCTL_NOTIF_SEND, buf.as_mut_ptr())
            };
            if rc == 0 {
                return Ok(true);
            }
            let err = io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::ENOENT) => return Ok(false),
                _ => return Err(err),
            }
        }
    }
}
