//! The seccomp user-notification listener: receive, validate, answer.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use crate::error::BrokerError;

/// `SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP` (linux/seccomp.h; not in `libc` yet).
const SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP: libc::c_ulong = 1;

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

/// u64 words of a notification or answer kept on the stack (the kernel's
/// structures are 80 and 24 bytes today): a heap buffer per request costs
/// musl an mmap and a munmap.
const STACK_WORDS: usize = 32;

/// `words` zeroed u64s: `stack` when they fit, else `heap`.
fn words_buf<'a>(
    stack: &'a mut [u64; STACK_WORDS],
    heap: &'a mut Vec<u64>,
    words: usize,
) -> &'a mut [u64] {
    if words <= STACK_WORDS {
        &mut stack[..words]
    } else {
        heap.resize(words, 0);
        heap
    }
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
        // Wake the broker, and later the caller, on the waking CPU instead of
        // through the scheduler (Linux 6.6+): a brokered call's round trip is
        // two such wake-ups. Older kernels refuse the flag; the broker then
        // works as before, only slower.
        // SAFETY: SET_FLAGS takes its flags by value.
        unsafe {
            libc::ioctl(
                fd.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_SET_FLAGS as _,
                SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP,
            )
        };
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

    /// One notification ioctl on `arg`, retried on `EINTR`. `Ok(false)`: the
    /// kernel answered `ENOENT` (the request or its caller is gone).
    ///
    /// # Safety
    /// `arg` must point to a buffer of the size and alignment `request` expects.
    unsafe fn ioctl(
        &self,
        request: libc::c_ulong,
        arg: *mut u64,
        before_each: impl Fn(),
    ) -> io::Result<bool> {
        loop {
            before_each();
            // SAFETY: the caller guarantees `arg` fits `request`.
            if unsafe { libc::ioctl(self.raw(), request as _, arg) } == 0 {
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

    /// `SECCOMP_IOCTL_NOTIF_RECV` into a zeroed buffer of the kernel's size.
    pub(crate) fn recv(&self) -> io::Result<Received> {
        let mut stack = [0u64; STACK_WORDS];
        let mut heap = Vec::new();
        let buf = words_buf(&mut stack, &mut heap, self.notif_words);
        let ptr = buf.as_mut_ptr();
        let words = buf.len();
        // The kernel wants a zeroed buffer on every attempt.
        // SAFETY: `ptr` covers `words` u64s, at least the kernel's seccomp_notif size.
        let clear = || unsafe { std::ptr::write_bytes(ptr, 0, words) };
        // SAFETY: as above.
        if !unsafe { self.ioctl(libc::SECCOMP_IOCTL_NOTIF_RECV as _, ptr, clear)? } {
            return Ok(Received::Gone);
        }
        // SAFETY: the buffer holds at least size_of::<seccomp_notif>() bytes and is 8-aligned.
        let n = unsafe { std::ptr::read(buf.as_ptr().cast::<libc::seccomp_notif>()) };
        Ok(Received::Notification(n))
    }

    /// Whether the request `id` is still pending (its caller alive and waiting).
    /// An error other than `ENOENT` means the kernel could not say.
    pub(crate) fn id_valid(&self, id: u64) -> io::Result<bool> {
        let mut id = id;
        // SAFETY: ID_VALID reads one u64.
        unsafe { self.ioctl(libc::SECCOMP_IOCTL_NOTIF_ID_VALID as _, &mut id, || ()) }
    }

    /// Installs a copy of `fd` in the caller (`SECCOMP_IOCTL_NOTIF_ADDFD`)
    /// and returns its number there; with `send`, answers `id` with it in the
    /// same step (`SECCOMP_ADDFD_FLAG_SEND`), else the request stays pending,
    /// to be answered with [`Listener::send`]. `cloexec` sets `O_CLOEXEC` on
    /// the new fd. `Ok(None)`: the caller is gone. On any other error the
    /// request is still pending.
    pub(crate) fn add_fd(
        &self,
        id: u64,
        fd: RawFd,
        cloexec: bool,
        send: bool,
    ) -> io::Result<Option<i32>> {
        let addfd = libc::seccomp_notif_addfd {
            id,
            flags: if send {
                libc::SECCOMP_ADDFD_FLAG_SEND as u32
            } else {
                0
            },
            srcfd: fd as u32,
            newfd: 0,
            newfd_flags: if cloexec { libc::O_CLOEXEC as u32 } else { 0 },
        };
        loop {
            // SAFETY: ADDFD reads one seccomp_notif_addfd, which lives across the call.
            let rc = unsafe {
                libc::ioctl(
                    self.raw(),
                    libc::SECCOMP_IOCTL_NOTIF_ADDFD as _,
                    &addfd as *const libc::seccomp_notif_addfd,
                )
            };
            if rc >= 0 {
                return Ok(Some(rc));
            }
            let err = io::Error::last_os_error();
            match err.raw_os_error() {
                // Interrupted before the fd was installed: not done yet.
                Some(libc::EINTR) => continue,
                Some(libc::ENOENT) => return Ok(None),
                _ => return Err(err),
            }
        }
    }

    /// Answers `id` by letting the kernel run the call as made
    /// (`SECCOMP_USER_NOTIF_FLAG_CONTINUE`): only for calls without a pointer
    /// argument the kernel would read again. `Ok(false)`: the caller is gone.
    pub(crate) fn continue_call(&self, id: u64) -> io::Result<bool> {
        self.reply(libc::seccomp_notif_resp {
            id,
            val: 0,
            error: 0,
            flags: libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32,
        })
    }

    /// Answers `id`: the call returns `val` when `errno == 0`, else fails with
    /// `errno` (`val` is then ignored and sent as 0). `Ok(false)`: the caller is gone.
    pub(crate) fn send(&self, id: u64, val: i64, errno: i32) -> io::Result<bool> {
        self.reply(libc::seccomp_notif_resp {
            id,
            val: if errno == 0 { val } else { 0 },
            error: -errno,
            flags: 0,
        })
    }

    fn reply(&self, resp: libc::seccomp_notif_resp) -> io::Result<bool> {
        let mut stack = [0u64; STACK_WORDS];
        let mut heap = Vec::new();
        let buf = words_buf(&mut stack, &mut heap, self.resp_words);
        // SAFETY: the buffer is at least size_of::<seccomp_notif_resp>() and 8-aligned.
        unsafe { std::ptr::write(buf.as_mut_ptr().cast::<libc::seccomp_notif_resp>(), resp) };
        // SAFETY: the buffer is at least the kernel's seccomp_notif_resp size.
        unsafe { self.ioctl(libc::SECCOMP_IOCTL_NOTIF_SEND as _, buf.as_mut_ptr(), || ()) }
    }
}
