//! Axes of confinement and the contract each one is proven against.
//!
//! An axis is one promise a policy makes (no network, writes only under
//! `write_paths`, no child processes, ...). Its [`AxisContract`] names three
//! legs the conformance suite runs against a real backend: *deny* (the
//! forbidden action is refused), *boundary* (the declared exceptions still
//! work and their near misses stay refused) and *workload* (a real permitted
//! use succeeds).

use serde::{Deserialize, Serialize};

/// One promise a policy makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Axis {
    /// `network = false` refuses network access.
    Network,
    /// Writes only beneath `write_paths`.
    Write,
    /// `deny_subprocess` refuses child processes.
    Spawn,
    /// `read_deny_paths` cannot be read.
    ReadDeny,
    /// `write_deny_paths` cannot be written, even beneath a write path.
    WriteDeny,
    /// `env_deny_names` never reach the command.
    Env,
    /// The process tree ends at `timeout_seconds`.
    Timeout,
}

impl Axis {
    /// Every axis, in declaration order.
    pub const ALL: &'static [Axis] = &[
        Axis::Network,
        Axis::Write,
        Axis::Spawn,
        Axis::ReadDeny,
        Axis::WriteDeny,
        Axis::Env,
        Axis::Timeout,
    ];

    /// Stable snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Axis::Network => "network",
            Axis::Write => "write",
            Axis::Spawn => "spawn",
            Axis::ReadDeny => "read_deny",
            Axis::WriteDeny => "write_deny",
            Axis::Env => "env",
            Axis::Timeout => "timeout",
        }
    }
}

impl std::fmt::Display for Axis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The three legs every axis is proven by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LegKind {
    /// The forbidden action is refused.
    Deny,
    /// Declared exceptions survive; their near misses stay refused.
    Boundary,
    /// A real permitted use succeeds.
    Workload,
}

impl LegKind {
    /// All legs, in the order they are run.
    pub const ALL: [LegKind; 3] = [LegKind::Deny, LegKind::Boundary, LegKind::Workload];

    /// Stable name.
    pub fn as_str(self) -> &'static str {
        match self {
            LegKind::Deny => "deny",
            LegKind::Boundary => "boundary",
            LegKind::Workload => "workload",
        }
    }
}

/// How strongly a backend's leg is witnessed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum WitnessStrength {
    /// A real process attempted the action and the kernel answered.
    Behavioral,
    /// Only the generated profile text was checked.
    ProfileText,
}

/// One leg of an axis contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Leg {
    /// Which leg.
    pub kind: LegKind,
    /// What it attempts and what counts as passing.
    pub description: &'static str,
}

/// An action the axis deliberately leaves allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Exception {
    /// Short name, e.g. `null-address sendto`.
    pub name: &'static str,
    /// Why it is allowed.
    pub why: &'static str,
}

/// The contract of one axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct AxisContract {
    /// The axis.
    pub axis: Axis,
    /// The deny, boundary and workload legs.
    pub legs: &'static [Leg],
    /// Declared exceptions; an empty list states there are none.
    pub exceptions: &'static [Exception],
    /// Witness strength per backend name.
    pub witness: &'static [(&'static str, WitnessStrength)],
}

impl AxisContract {
    /// The leg of kind `kind`, if declared.
    pub fn leg(&self, kind: LegKind) -> Option<&'static Leg> {
        self.legs.iter().find(|l| l.kind == kind)
    }

    /// Witness strength for `backend`, if the backend is covered.
    pub fn witness_for(&self, backend: &str) -> Option<WitnessStrength> {
        self.witness
            .iter()
            .find(|(name, _)| *name == backend)
            .map(|(_, w)| *w)
    }
}

/// The axes the conformance suite must cover, written out by hand.
///
/// This list is never derived from [`REGISTRY`]: a test compares the two, so
/// an axis dropped from the registry cannot pass unnoticed.
pub const EXPECTED_AXES: &[Axis] = &[];

/// The registered axis contracts.
pub const REGISTRY: &[AxisContract] = &[];

/// The contract for `axis`, if registered.
pub fn contract(axis: Axis) -> Option<&'static AxisContract> {
    REGISTRY.iter().find(|c| c.axis == axis)
}
