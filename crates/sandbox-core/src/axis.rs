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
    /// The boundary probe that shows exactly this exception works and its
    /// nearest neighbour does not (an id the conformance arms know; a test
    /// checks every exception has one).
    pub probe: &'static str,
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
pub const EXPECTED_AXES: &[Axis] = &[
    Axis::Network,
    Axis::Write,
    Axis::Spawn,
    Axis::ReadDeny,
    Axis::WriteDeny,
    Axis::Env,
    Axis::Timeout,
];

/// Witness strength of every axis: behavioral on Landlock (a real process
/// tries and the kernel answers); on Seatbelt behavioral where the legs run
/// against the real `sandbox-exec` (macOS), profile text elsewhere.
const WITNESS: &[(&str, WitnessStrength)] = &[
    ("landlock", WitnessStrength::Behavioral),
    (
        "seatbelt",
        if cfg!(target_os = "macos") {
            WitnessStrength::Behavioral
        } else {
            WitnessStrength::ProfileText
        },
    ),
];

/// No declared exceptions: the axis carries no deliberate hole.
const NO_EXCEPTIONS: &[Exception] = &[];

const fn legs(deny: &'static str, boundary: &'static str, workload: &'static str) -> [Leg; 3] {
    [
        Leg {
            kind: LegKind::Deny,
            description: deny,
        },
        Leg {
            kind: LegKind::Boundary,
            description: boundary,
        },
        Leg {
            kind: LegKind::Workload,
            description: workload,
        },
    ]
}

const NETWORK_LEGS: [Leg; 3] = legs(
    "network = false: a TCP connect to a loopback listener the arm opens is refused \
     (positive control: the same connect succeeds with network = true)",
    "network = false: NULL-address send/recv on a connected AF_UNIX socketpair and bind \
     survive, while an addressed UDP sendto to 127.0.0.1 and listen stay refused",
    "network = false: local IPC (pipe, AF_UNIX socketpair, an asyncio event loop woken \
     from a thread through its self-pipe) runs to completion",
);
const NETWORK_EXCEPTIONS: &[Exception] = &[
    Exception {
        name: "null-address sendto/recvfrom",
        why: "send/recv on an already-connected socket carry no address and reach only \
              the peer; event loops wake themselves through such a self-pipe",
        probe: "network.null-address-send",
    },
    Exception {
        name: "AF_UNIX socketpair",
        why: "an anonymous pair connects only the two ends the process holds",
        probe: "network.unix-socketpair",
    },
    Exception {
        name: "bind",
        why: "binding reaches no peer; listen, accept and connect stay refused",
        probe: "network.bind",
    },
];

const WRITE_LEGS: [Leg; 3] = legs(
    "creating and overwriting files outside write_paths is refused (the production \
     gate's write probe, with its positive control)",
    "near misses stay refused: a prefix-named sibling of a write path, `..` out of it, a \
     symlink inside it pointing outside, renaming a file out of it, truncating and \
     chmod-ing a file outside it",
    "a build-like workload under a write path (mkdir -p, write, rename, read back, \
     remove) succeeds",
);

const SPAWN_LEGS: [Leg; 3] = legs(
    "deny_subprocess = true: the child of a forking command never runs, while a \
     non-forking command still does (the production gate's spawn probe)",
    "deny_subprocess = true: fork, posix_spawn and subprocess stay refused while \
     threads and the command's own exec keep working",
    "deny_subprocess = false: a command that starts a pipeline of child processes \
     completes with their output",
);

const READ_DENY_LEGS: [Leg; 3] = legs(
    "reading a file beneath read_deny_paths is refused (positive control: a sibling \
     file is readable under the same policy)",
    "near misses: a prefix-named sibling stays readable and the denied directory's \
     names stay listable (the declared exception), while a symlink from a readable \
     directory into the denied one stays refused",
    "a program reading broadly (system files, a sibling project tree) works with a \
     read-deny path in place",
);

const WRITE_DENY_LEGS: [Leg; 3] = legs(
    "writing beneath a write_deny path inside a write path is refused (positive \
     control: a sibling inside the write path is writable)",
    "near misses stay refused: creating a new file in the denied directory, renaming \
     a file into it, writing through a symlink pointing into it",
    "a workload writing across existing siblings of the denied path succeeds",
);

const ENV_LEGS: [Leg; 3] = legs(
    "a variable named in env_deny_names (exact and by `*` glob) does not reach the \
     command",
    "near misses of a glob (`AWS_*` against `AWSX`) and unrelated variables still \
     reach the command",
    "the command runs with PATH, HOME and the remaining variables intact",
);

const TIMEOUT_LEGS: [Leg; 3] = legs(
    "a command overrunning timeout_seconds is ended with its whole process tree; no \
     descendant keeps running",
    "a command finishing within timeout_seconds keeps its own exit status",
    "a command with child processes that finishes in time returns its output",
);

const READ_DENY_EXCEPTIONS: &[Exception] = &[Exception {
    name: "listing names",
    why: "Landlock cannot refuse listing one directory while its ancestors stay \
          listable; names inside a denied directory are visible, contents are not",
    probe: "read_deny.listing-names",
}];

/// Every declared exception of every registered axis, with its axis.
pub fn exceptions() -> impl Iterator<Item = (Axis, &'static Exception)> {
    REGISTRY
        .iter()
        .flat_map(|c| c.exceptions.iter().map(move |e| (c.axis, e)))
}

/// The registered axis contracts.
pub const REGISTRY: &[AxisContract] = &[
    AxisContract {
        axis: Axis::Network,
        legs: &NETWORK_LEGS,
        exceptions: NETWORK_EXCEPTIONS,
        witness: WITNESS,
    },
    AxisContract {
        axis: Axis::Write,
        legs: &WRITE_LEGS,
        exceptions: NO_EXCEPTIONS,
        witness: WITNESS,
    },
    AxisContract {
        axis: Axis::Spawn,
        legs: &SPAWN_LEGS,
        exceptions: NO_EXCEPTIONS,
        witness: WITNESS,
    },
    AxisContract {
        axis: Axis::ReadDeny,
        legs: &READ_DENY_LEGS,
        exceptions: READ_DENY_EXCEPTIONS,
        witness: WITNESS,
    },
    AxisContract {
        axis: Axis::WriteDeny,
        legs: &WRITE_DENY_LEGS,
        exceptions: NO_EXCEPTIONS,
        witness: WITNESS,
    },
    AxisContract {
        axis: Axis::Env,
        legs: &ENV_LEGS,
        exceptions: NO_EXCEPTIONS,
        witness: WITNESS,
    },
    AxisContract {
        axis: Axis::Timeout,
        legs: &TIMEOUT_LEGS,
        exceptions: NO_EXCEPTIONS,
        witness: WITNESS,
    },
];

/// The contract for `axis`, if registered.
pub fn contract(axis: Axis) -> Option<&'static AxisContract> {
    REGISTRY.iter().find(|c| c.axis == axis)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_and_expected_axes_agree() {
        assert!(
            !EXPECTED_AXES.is_empty(),
            "the guard must not pass vacuously"
        );
        let registered: Vec<Axis> = REGISTRY.iter().map(|c| c.axis).collect();
        assert_eq!(
            registered, EXPECTED_AXES,
            "registry and EXPECTED_AXES disagree"
        );
        let mut unique = registered.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(
            unique.len(),
            registered.len(),
            "an axis is registered twice"
        );
    }

    #[test]
    fn every_contract_has_three_legs_and_both_backends() {
        for contract in REGISTRY {
            let kinds: Vec<LegKind> = contract.legs.iter().map(|l| l.kind).collect();
            assert_eq!(kinds, LegKind::ALL, "{}", contract.axis);
            assert!(contract.legs.iter().all(|l| !l.description.is_empty()));
            assert_eq!(
                contract.witness_for("landlock"),
                Some(WitnessStrength::Behavioral),
                "{}",
                contract.axis
            );
            assert_eq!(
                contract.witness_for("seatbelt"),
                Some(WitnessStrength::ProfileText),
                "{}",
                contract.axis
            );
        }
    }

    #[test]
    fn exceptions_are_stated_explicitly() {
        let names = |axis| -> Vec<&str> {
            contract(axis)
                .unwrap()
                .exceptions
                .iter()
                .map(|e| e.name)
                .collect()
        };
        assert_eq!(
            names(Axis::Network),
            ["null-address sendto/recvfrom", "AF_UNIX socketpair", "bind"]
        );
        assert!(names(Axis::Write).is_empty());
        assert!(names(Axis::Spawn).is_empty());
        assert_eq!(names(Axis::ReadDeny), ["listing names"]);
    }
}
