//! The Linux implementation.

pub(crate) mod abi;
pub(crate) mod backend;
mod child;
mod report;
mod rules;
mod ruleset;

use std::os::fd::{AsRawFd, OwnedFd};

use sandbox_core::{EnforcementReport, ResolvedPolicy};
use sandbox_seccomp::{Filter, LandlockCoverage};

use crate::LandlockError;
use abi::KernelAbi;

/// Confinement prepared in the parent, ready to apply in a forked child.
#[derive(Debug)]
pub struct PreparedLandlock {
    ruleset: OwnedFd,
    filter: Filter,
    drop_capabilities: bool,
    abi: KernelAbi,
    report: EnforcementReport,
}

/// Prepares confinement for `policy`: detects the ABI, opens every path,
/// builds the Landlock ruleset, compiles the seccomp filter and writes the report.
pub fn prepare(policy: &ResolvedPolicy) -> Result<PreparedLandlock, LandlockError> {
    let abi = abi::detect_abi()?;
    prepare_with(policy, abi)
}

pub(crate) fn prepare_with(
    policy: &ResolvedPolicy,
    abi: KernelAbi,
) -> Result<PreparedLandlock, LandlockError> {
    let plan = rules::plan(policy, abi.effective)?;
    let extras = ruleset::Extras::for_policy(policy, abi.effective);
    let ruleset = ruleset::build(&plan, extras)?;
    // Landlock never handles TRUNCATE (see `rules::plan`): seccomp covers truncate(2).
    let filter = sandbox_seccomp::compile(policy, LandlockCoverage { truncate: false })?;
    let drop_capabilities = child::holds_capabilities().map_err(LandlockError::Capabilities)?;
    let facts = report::RulesetFacts {
        rules: plan.rules.len(),
        handled: format!("{:?}", plan.handled.iter().collect::<Vec<_>>()),
        skipped: plan.skipped,
        drops_capabilities: drop_capabilities,
        seccomp_instructions: filter.len(),
    };
    let report = report::report(policy, abi, Some(&facts));
    // The path fds in `plan` close here: the kernel keeps the rules.
    Ok(PreparedLandlock {
        ruleset,
        filter,
        drop_capabilities,
        abi,
        report,
    })
}

/// The report for `policy` on this kernel without building a ruleset.
pub(crate) fn report_only(policy: &ResolvedPolicy, abi: KernelAbi) -> EnforcementReport {
    report::report(policy, abi, None)
}

impl PreparedLandlock {
    /// Confines the calling process: `no_new_privs`, capability drop (when
    /// the parent held any), `landlock_restrict_self`, then the seccomp filter.
    ///
    /// Async-signal-safe and allocation-free, for use between `fork` and
    /// `exec`. Returns the raw errno of the first step that failed; the
    /// process is then partially confined and must not run the command.
    pub fn apply_in_child(&self) -> Result<(), i32> {
        child::set_no_new_privs()?;
        if self.drop_capabilities {
            child::drop_capabilities()?;
        }
        child::restrict_self(self.ruleset.as_raw_fd())?;
        self.filter.apply()
    }

    /// What is enforced for this policy on this kernel.
    pub fn report(&self) -> &EnforcementReport {
        &self.report
    }

    /// The kernel's Landlock ABI and the one in use.
    pub fn abi(&self) -> KernelAbi {
        self.abi
    }

    /// The compiled seccomp filter.
    pub fn filter(&self) -> &Filter {
        &self.filter
    }
}
