//! Which Landlock ABI the running kernel offers.

use landlock::ABI;

use crate::LandlockError;

/// The newest Landlock ABI this crate was tested against; rights introduced
/// later are not requested even when the kernel offers them.
pub const TESTED_ABI: ABI = ABI::V7;

/// The Landlock ABI of the running kernel and the one this crate uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelAbi {
    /// The version the kernel reports (0 when Landlock is absent).
    pub kernel: i32,
    /// The version whose rights are requested: `min(kernel, TESTED_ABI)`.
    pub effective: ABI,
}

/// Asks the kernel for its Landlock ABI version.
///
/// Done by hand with `landlock_create_ruleset(NULL, 0, VERSION)` because the
/// landlock crate keeps its own detection private: we need the number to
/// choose the rights and to report what is and is not enforced.
pub fn detect_abi() -> Result<KernelAbi, LandlockError> {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: a NULL attribute with size 0 and the VERSION flag only queries.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if v < 0 {
        let err = std::io::Error::last_os_error();
        let reason = match err.raw_os_error() {
            Some(libc::EOPNOTSUPP) => format!(
                "the kernel has Landlock but it is disabled ({err}); add `landlock` to the `lsm=` boot parameter"
            ),
            Some(libc::ENOSYS) => format!(
                "the kernel was built without Landlock ({err}); Linux 5.13 or newer with CONFIG_SECURITY_LANDLOCK is needed"
            ),
            _ => format!("landlock_create_ruleset(VERSION) failed: {err}"),
        };
        return Err(LandlockError::Unsupported { reason });
    }
    let kernel = i32::try_from(v).unwrap_or(i32::MAX);
    let effective = ABI::from(kernel).min(TESTED_ABI);
    if effective == ABI::Unsupported {
        return Err(LandlockError::Unsupported {
            reason: format!("the kernel reports Landlock ABI {kernel}"),
        });
    }
    Ok(KernelAbi { kernel, effective })
}

/// The ABI as a number (`ABI` has no public conversion).
pub(crate) fn abi_number(abi: ABI) -> i32 {
    abi as i32
}
