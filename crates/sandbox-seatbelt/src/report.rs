//! What the Seatbelt backend enforces.

use sandbox_core::{Axis, AxisEnforcement, EnforcementReport, Level};

use crate::profile::{SeatbeltProfile, SANDBOX_EXEC};

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

/// The enforcement report for running under `profile`.
pub fn enforcement_report(profile: &SeatbeltProfile) -> EnforcementReport {
    EnforcementReport {
        backend: BACKEND_NAME.into(),
        details: vec![format!(
            "{SANDBOX_EXEC} -p <generated SBPL profile> with {} path parameter(s)",
            profile.params.len()
        )],
        axes: AXES
            .iter()
            .map(|&axis| AxisEnforcement {
                axis,
                mechanism: BACKEND_NAME.into(),
                level: Level::Full,
            })
            .collect(),
    }
}
