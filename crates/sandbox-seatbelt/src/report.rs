//! What the Seatbelt backend enforces.

use sandbox_core::{Axis, AxisEnforcement, EnforcementReport, Level, NetworkMode, ResolvedPolicy};

use crate::profile::{SeatbeltProfile, SANDBOX_EXEC, TERMINAL_PARAM};

/// The backend's stable name.
pub const BACKEND_NAME: &str = "seatbelt";

/// The axes a Seatbelt profile enforces (env and timeout belong to the runner).
pub const AXES: &[Axis] = &[
    Axis::Network,
    Axis::Write,
    Axis::Spawn,
    Axis::ReadDeny,
    Axis::WriteDeny,
];

/// The enforcement report for running `policy` under `profile`.
pub fn enforcement_report(policy: &ResolvedPolicy, profile: &SeatbeltProfile) -> EnforcementReport {
    let terminals = profile
        .params
        .iter()
        .filter(|(n, _)| n.starts_with(TERMINAL_PARAM))
        .count();
    EnforcementReport {
        backend: BACKEND_NAME.into(),
        details: vec![
            format!(
                "{SANDBOX_EXEC} -p <generated SBPL profile> with {} path parameter(s)",
                profile.params.len()
            ),
            format!(
                "terminals: only the run's own ({terminals} device(s) of the runner's stdio, by parameter); /dev/tty"
            ),
        ],
        axes: AXES
            .iter()
            .map(|&axis| AxisEnforcement {
                axis,
                mechanism: mechanism(axis, policy),
                level: Level::Full,
            })
            .collect(),
    }
}

fn mechanism(axis: Axis, policy: &ResolvedPolicy) -> String {
    const UNIX: &str = "host UNIX sockets confined: only those beneath the write paths (outside every deny path) and allow_unix_sockets can be reached";
    match (axis, policy.network_mode()) {
        (Axis::Network, NetworkMode::Off) => format!(
            "{BACKEND_NAME}: off (no network operation allowed; trustd, ocspd, dnssd, networkd, nsurlsessiond and SecurityServer closed)"
        ),
        (Axis::Network, NetworkMode::Allowlist) => format!(
            "{BACKEND_NAME}: listed destinations only (localhost proxy and loopback ports; listening on loopback except the listed ports); {UNIX}"
        ),
        (Axis::Network, _) => format!("{BACKEND_NAME}: open for IP; {UNIX}"),
        _ => BACKEND_NAME.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandbox_core::{ExpandContext, SandboxPolicy};

    fn network_mechanism(policy: SandboxPolicy) -> String {
        let resolved = policy.resolve(&ExpandContext::default()).unwrap();
        let profile = crate::profile(&resolved).unwrap();
        let report = enforcement_report(&resolved, &profile);
        report
            .axes
            .iter()
            .find(|a| a.axis == Axis::Network)
            .unwrap()
            .mechanism
            .clone()
    }

    /// The report says host UNIX sockets are confined, as on Linux.
    #[test]
    fn report_names_the_unix_socket_confinement() {
        let on = network_mechanism(SandboxPolicy::default());
        assert!(on.contains("host UNIX sockets confined"), "{on}");
        assert!(on.contains("allow_unix_sockets"), "{on}");
        let off = network_mechanism(SandboxPolicy {
            network: false,
            ..SandboxPolicy::default()
        });
        assert!(off.contains("off") && off.contains("trustd"), "{off}");
    }
}
