//! The enforcement report: per axis, which mechanism and how completely.

use landlock::ABI;
use sandbox_core::{Axis, AxisEnforcement, EnforcementReport, Level, ResolvedPolicy};

use super::abi::{abi_number, KernelAbi, ABI_CEILING_ENV, TESTED_ABI};
use super::ruleset::Extras;

/// Facts about a prepared ruleset that the report states.
#[derive(Debug, Default)]
pub(crate) struct RulesetFacts {
    pub rules: usize,
    pub handled: String,
    pub skipped: Vec<String>,
    pub drops_capabilities: bool,
    pub seccomp_instructions: usize,
    /// FNV-1a (64-bit) of the filter's instructions: names the program.
    pub seccomp_fingerprint: u64,
    /// Deny paths beneath write paths are kept by the broker, not by splitting.
    pub brokered_denials: bool,
}

const NOT_RESTRICTED: &str = "not restricted by the policy";

/// Builds the report for `policy` on `abi`.
pub(crate) fn report(
    policy: &ResolvedPolicy,
    abi: KernelAbi,
    facts: Option<&RulesetFacts>,
) -> EnforcementReport {
    let eff = abi.effective;
    let extras = Extras::for_policy(policy, eff);
    let mut details = vec![match abi.ceiling {
        Some(ceiling) => format!(
            "landlock ABI {} (kernel reports {}; lowered by {ABI_CEILING_ENV}={ceiling})",
            abi_number(eff),
            abi.kernel
        ),
        None => format!(
            "landlock ABI {} (kernel reports {})",
            abi_number(eff),
            abi.kernel
        ),
    }];
    if abi.kernel > abi_number(TESTED_ABI) {
        details.push(format!(
            "rights newer than ABI {} are not requested: this crate was tested up to it",
            abi_number(TESTED_ABI)
        ));
    }
    details.push("no_new_privs set in the child".into());
    details.push(if policy.read_deny_paths().is_empty() {
        "read rights not handled (no read_deny_paths): reads cost no path walk".into()
    } else {
        "read rights handled because read_deny_paths is not empty".into()
    });
    if let Some(facts) = facts {
        details.push(format!(
            "{} path rules; handled filesystem rights: {}",
            facts.rules, facts.handled
        ));
        if facts.drops_capabilities {
            details.push(
                "capabilities dropped in the child (bounding, ambient, effective, permitted, inheritable)"
                    .into(),
            );
        }
        details.push(format!(
            "seccomp filter of {} instructions (program {:016x})",
            facts.seccomp_instructions, facts.seccomp_fingerprint
        ));
        for skipped in &facts.skipped {
            details.push(format!("no rule (narrower than the policy): {skipped}"));
        }
    }
    if eff < ABI::V2 {
        details.push(
            "Landlock ABI < 2 (no REFER right): linking or renaming across directories is refused everywhere"
                .into(),
        );
    }
    details.push(
        "truncation: seccomp refuses O_TRUNC without write access (and access mode 3) on every ABI, truncate(2) by path is brokered, ftruncate needs a writable fd, which Landlock's WRITE_FILE governs (its TRUNCATE right is left unhandled: it would cost a path walk on every open)"
            .into(),
    );
    let brokered = facts.is_some_and(|f| f.brokered_denials);
    if (!policy.write_deny_paths().is_empty() || !policy.read_deny_paths().is_empty()) && !brokered
    {
        details.push(
            "deny paths are cut out by rule splitting: new entries directly in a denied path's ancestors are refused"
                .into(),
        );
    }

    let axes = vec![
        network(policy, extras),
        write(eff),
        spawn(policy, eff),
        read_deny(policy),
        write_deny(policy),
    ];
    EnforcementReport {
        backend: "landlock".into(),
        details,
        axes,
    }
}

fn entry(axis: Axis, mechanism: &str, gaps: Vec<String>) -> AxisEnforcement {
    AxisEnforcement {
        axis,
        mechanism: mechanism.into(),
        level: if gaps.is_empty() {
            Level::Full
        } else {
            Level::Partial { gaps }
        },
    }
}

fn network(policy: &ResolvedPolicy, extras: Extras) -> AxisEnforcement {
    if policy.network_mode() == sandbox_core::NetworkMode::Allowlist {
        return entry(
            Axis::Network,
            "listed destinations only: connect and listen go to the broker, which connects only to the allow_net IP rules and the runner's proxy (host names) and lets only loopback-bound sockets listen; IP sockets TCP only, no MSG_FASTOPEN (without a broker every connect is refused)",
            Vec::new(),
        );
    }
    if policy.network() {
        return entry(
            Axis::Network,
            "open, but host UNIX sockets confined: connect goes to the broker, which admits only sockets beneath the write paths and allow_unix_sockets (no AF_UNIX datagram sockets)",
            Vec::new(),
        );
    }
    // seccomp refuses connect/listen/accept and non-stream sockets on every
    // ABI; Landlock adds CONNECT_TCP and the abstract-socket scope on top.
    let mechanism = match (extras.connect_tcp, extras.abstract_unix_scope) {
        (true, true) => "seccomp + landlock (connect_tcp, abstract unix scope)",
        (true, false) => "seccomp + landlock (connect_tcp)",
        _ => "seccomp",
    };
    entry(Axis::Network, mechanism, Vec::new())
}

fn write(abi: ABI) -> AxisEnforcement {
    let mut gaps = Vec::new();
    if abi < ABI::V5 {
        gaps.push(
            "ioctl on device files is not governed because Landlock ABI < 5 (no IOCTL_DEV right)"
                .into(),
        );
    }
    entry(
        Axis::Write,
        "landlock (paths) + seccomp (truncate by path, chmod/chown/xattr families)",
        gaps,
    )
}

/// The spawn axis also carries what the command can do to processes outside
/// the sandbox (signals), which only Landlock ABI 6 scopes.
fn spawn(policy: &ResolvedPolicy, abi: ABI) -> AxisEnforcement {
    let mut gaps = Vec::new();
    if abi < ABI::V6 {
        gaps.push(
            "signals (kill, SIGIO) to processes outside the sandbox are not scoped because Landlock ABI < 6: the command can signal any process of the same user"
                .into(),
        );
    }
    let mechanism = match (policy.deny_subprocess(), abi >= ABI::V6) {
        (true, true) => "seccomp + landlock (signal scope)",
        (true, false) => "seccomp",
        (false, true) => "landlock (signal scope); subprocesses not restricted by the policy",
        (false, false) => NOT_RESTRICTED,
    };
    entry(Axis::Spawn, mechanism, gaps)
}

fn read_deny(policy: &ResolvedPolicy) -> AxisEnforcement {
    if policy.read_deny_paths().is_empty() {
        return entry(Axis::ReadDeny, NOT_RESTRICTED, Vec::new());
    }
    entry(
        Axis::ReadDeny,
        "landlock (read rights split around each denied path)",
        vec![
            "metadata (stat, readlink) of denied paths stays visible: Landlock does not govern it"
                .into(),
            "a hard link to a denied file made before the run, outside the denied path, still reads it"
                .into(),
            "names inside a denied directory stay listable (READ_DIR is not handled, so its ancestors stay listable)"
                .into(),
        ],
    )
}

fn write_deny(policy: &ResolvedPolicy) -> AxisEnforcement {
    if policy.write_deny_paths().is_empty() {
        return entry(Axis::WriteDeny, NOT_RESTRICTED, Vec::new());
    }
    let gaps = Vec::new();
    entry(
        Axis::WriteDeny,
        "landlock (write rights split around each denied path)",
        gaps,
    )
}
