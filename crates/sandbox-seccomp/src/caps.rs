//! The calling thread's capability sets, read and written with the raw
//! syscalls: capget(2), and capset(2) with pid 0, which changes the calling
//! thread only (glibc has no wrapper that would broadcast it). Both are
//! async-signal-safe (no allocation) and report the raw errno, so the
//! child of a spawn may use them before exec.

/// `_LINUX_CAPABILITY_VERSION_3`: two 32-bit words per set.
const VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct Header {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Data {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// The three capability sets of a thread, one bit per capability.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Caps {
    /// The effective set.
    pub effective: u64,
    /// The permitted set.
    pub permitted: u64,
    /// The inheritable set.
    pub inheritable: u64,
}

impl Caps {
    /// No capability in any set.
    pub const NONE: Caps = Caps {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    };

    /// Whether every set is empty.
    pub fn is_empty(&self) -> bool {
        *self == Self::NONE
    }
}

fn errno() -> i32 {
    // SAFETY: reading the calling thread's errno.
    unsafe { *libc::__errno_location() }
}

/// The calling thread's capability sets.
pub fn get() -> Result<Caps, i32> {
    let mut header = Header {
        version: VERSION_3,
        pid: 0,
    };
    let mut data = [Data::default(); 2];
    // SAFETY: capget(header, data) with a v3 header and two data words.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_capget,
            &mut header as *mut Header,
            data.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return Err(errno());
    }
    let join = |lo: u32, hi: u32| u64::from(lo) | (u64::from(hi) << 32);
    Ok(Caps {
        effective: join(data[0].effective, data[1].effective),
        permitted: join(data[0].permitted, data[1].permitted),
        inheritable: join(data[0].inheritable, data[1].inheritable),
    })
}

/// Sets the calling thread's capability sets to `caps`.
pub fn set(caps: Caps) -> Result<(), i32> {
    let mut header = Header {
        version: VERSION_3,
        pid: 0,
    };
    let word = |set: u64, i: u32| (set >> (32 * i)) as u32;
    let data = [0, 1].map(|i| Data {
        effective: word(caps.effective, i),
        permitted: word(caps.permitted, i),
        inheritable: word(caps.inheritable, i),
    });
    // SAFETY: capset(header, data) with a v3 header and two data words.
    let rc = unsafe { libc::syscall(libc::SYS_capset, &mut header as *mut Header, data.as_ptr()) };
    if rc != 0 {
        return Err(errno());
    }
    Ok(())
}
