//! The target architecture's identity as seccomp sees it.

/// `AUDIT_ARCH_*` of the architecture this crate was built for.
#[cfg(target_arch = "x86_64")]
pub const AUDIT_ARCH: u32 = 0xc000_003e;
/// `AUDIT_ARCH_*` of the architecture this crate was built for.
#[cfg(target_arch = "aarch64")]
pub const AUDIT_ARCH: u32 = 0xc000_00b7;

/// seccompiler's name for the target architecture.
#[cfg(target_arch = "x86_64")]
pub const SECCOMPILER_ARCH: seccompiler::TargetArch = seccompiler::TargetArch::x86_64;
/// seccompiler's name for the target architecture.
#[cfg(target_arch = "aarch64")]
pub const SECCOMPILER_ARCH: seccompiler::TargetArch = seccompiler::TargetArch::aarch64;

/// `__X32_SYSCALL_BIT`: x32 calls share `AUDIT_ARCH_X86_64` and differ only here.
pub const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// Whether the prologue must refuse the x32 ABI (x86_64 only).
pub const CHECK_X32_BIT: bool = cfg!(target_arch = "x86_64");
