//! Policy to seccomp-BPF compiler (skeleton: API only, the filter is not yet complete).
#![warn(missing_docs)]

use sandbox_core::ResolvedPolicy;

pub use seccompiler::sock_filter;

/// What the Landlock side already governs on this kernel (so seccomp covers the rest).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LandlockCoverage {
    /// `LANDLOCK_ACCESS_FS_TRUNCATE` is handled (Landlock ABI >= 3).
    pub truncate: bool,
}

/// Why a policy could not be compiled to a filter.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SeccompError {
    /// The target architecture has no syscall table here.
    #[error("seccomp filter: architecture {0} is not supported (x86_64 and aarch64 are)")]
    UnsupportedArch(&'static str),
    /// seccompiler rejected the rule set.
    #[error("seccomp filter: compiling the rule set failed: {0}")]
    Compile(String),
    /// The program exceeds the kernel's instruction limit.
    #[error("seccomp filter: program has {0} instructions, the kernel allows at most 4096")]
    TooLong(usize),
}

/// A compiled, ready-to-install seccomp-BPF program.
#[derive(Debug, Clone)]
pub struct Filter {
    program: Vec<sock_filter>,
}

/// Compiles `policy` to a default-deny filter for the target architecture.
pub fn compile(
    policy: &ResolvedPolicy,
    coverage: LandlockCoverage,
) -> Result<Filter, SeccompError> {
    let _ = (policy, coverage);
    Ok(Filter {
        program: vec![sock_filter {
            code: 0x06,
            jt: 0,
            jf: 0,
            k: 0x7fff_0000,
        }],
    })
}

impl Filter {
    /// The program's instructions.
    pub fn instructions(&self) -> &[sock_filter] {
        &self.program
    }

    /// Number of instructions.
    pub fn len(&self) -> usize {
        self.program.len()
    }

    /// Whether the program is empty (never true for a compiled filter).
    pub fn is_empty(&self) -> bool {
        self.program.is_empty()
    }

    /// Installs the filter on the calling thread. Async-signal-safe (no
    /// allocation); returns the raw errno on failure. The caller must already
    /// have set `PR_SET_NO_NEW_PRIVS`.
    pub fn apply(&self) -> Result<(), i32> {
        Err(libc::ENOSYS)
    }

    /// Human-readable disassembly, one instruction per line.
    pub fn disassemble(&self) -> String {
        String::new()
    }
}
