//! Which Landlock ABI the running kernel offers.

use landlock::ABI;

use crate::LandlockError;

/// The newest Landlock ABI this crate was tested against; rights introduced
/// later are not requested even when the kernel offers them.
pub const TESTED_ABI: ABI = ABI::V7;

/// Environment variable that lowers the Landlock ABI the backend uses (for
/// testing what users of older kernels get). It can only lower it: a value
/// above the kernel's is ignored, and the report says which was used.
pub const ABI_CEILING_ENV: &str = "SANDBOX_TEST_LANDLOCK_ABI";

/// The Landlock ABI of the running kernel and the one this crate uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelAbi {
    /// The version the kernel reports (0 when Landlock is absent).
    pub kernel: i32,
    /// The version whose rights are requested: `min(kernel, TESTED_ABI,
    /// ceiling)`.
    pub effective: ABI,
    /// The ceiling asked for ([`ABI_CEILING_ENV`] or
    /// [`LandlockBackend::with_abi_ceiling`](crate::LandlockBackend::with_abi_ceiling)), if any.
    pub ceiling: Option<i32>,
}

impl KernelAbi {
    /// The same kernel with the ABI in use lowered to at most `ceiling`
    /// (never raised).
    pub fn lowered_to(self, ceiling: i32) -> Result<Self, LandlockError> {
        let wanted = ABI::from(ceiling);
        if ceiling < 1 || wanted == ABI::Unsupported {
            return Err(LandlockError::Unsupported {
                reason: format!(
                    "a Landlock ABI ceiling of {ceiling} was asked for; use 1 to {}",
                    abi_number(TESTED_ABI)
                ),
            });
        }
        Ok(Self {
            effective: self.effective.min(wanted),
            ceiling: Some(ceiling),
            ..self
        })
    }
}

/// The ceiling in [`ABI_CEILING_ENV`], if set.
fn ceiling_from_env() -> Result<Option<i32>, LandlockError> {
    let Some(raw) = std::env::var_os(ABI_CEILING_ENV) else {
        return Ok(None);
    };
    let text = raw.to_string_lossy();
    text.trim()
        .parse::<i32>()
        .map(Some)
        .map_err(|_| LandlockError::Unsupported {
            reason: format!(
                "{ABI_CEILING_ENV}={text} is not a number; set it to a Landlock ABI from 1 to {}, or unset it",
                abi_number(TESTED_ABI)
            ),
        })
}

/// Asks the kernel for its Landlock ABI version, lowered by
/// [`ABI_CEILING_ENV`] when it is set.
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
        return Err(match err.raw_os_error() {
            Some(libc::EOPNOTSUPP) => match seccomp_filters() {
                // A filter can answer for the kernel: a sandbox's, such as
                // an enclosing `sandbox run` (whose filter refuses nested
                // Landlock while its broker serves the run), gives exactly
                // this answer.
                Some(n) if n > 0 => LandlockError::Disabled {
                    reason: format!(
                        "landlock_create_ruleset answered {err} under {n} seccomp filter(s) \
                         (Seccomp_filters in /proc/self/status): this process is most likely \
                         confined already, by an enclosing `sandbox run` or another sandbox, \
                         which refuses Landlock to what it runs; a sandbox run inside a run is \
                         not supported: run the command outside it"
                    ),
                },
                _ => LandlockError::Disabled {
                    reason: format!(
                        "the kernel has Landlock but it is disabled ({err}); add `landlock` to the `lsm=` boot parameter"
                    ),
                },
            },
            Some(libc::ENOSYS) => LandlockError::Unsupported {
                reason: format!(
                    "the kernel was built without Landlock ({err}); Linux 5.13 or newer with CONFIG_SECURITY_LANDLOCK is needed"
                ),
            },
            _ => LandlockError::Unsupported {
                reason: format!("landlock_create_ruleset(VERSION) failed: {err}"),
            },
        });
    }
    let kernel = i32::try_from(v).unwrap_or(i32::MAX);
    let effective = ABI::from(kernel).min(TESTED_ABI);
    if effective == ABI::Unsupported {
        return Err(LandlockError::Unsupported {
            reason: format!("the kernel reports Landlock ABI {kernel}"),
        });
    }
    let abi = KernelAbi {
        kernel,
        effective,
        ceiling: None,
    };
    match ceiling_from_env()? {
        Some(ceiling) => abi.lowered_to(ceiling),
        None => Ok(abi),
    }
}

/// How many seccomp filters confine this thread (`Seccomp_filters` of
/// `/proc/thread-self/status`, Linux 5.9), when it says.
fn seccomp_filters() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/thread-self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Seccomp_filters:"))
        .and_then(|v| v.trim().parse().ok())
}

/// The ABI as a number (`ABI` has no public conversion).
pub(crate) fn abi_number(abi: ABI) -> i32 {
    abi as i32
}
