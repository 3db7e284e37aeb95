//! What a backend enforces for a given policy on this host.

use serde::{Deserialize, Serialize};

use crate::axis::Axis;

/// How completely one axis is enforced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "level", rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Level {
    /// Enforced as the policy states.
    Full,
    /// Enforced with named gaps.
    Partial {
        /// What is not covered, and why.
        gaps: Vec<String>,
    },
    /// Not enforced.
    None {
        /// Why not.
        reason: String,
    },
}

/// Enforcement of one axis: by which mechanism, how completely.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AxisEnforcement {
    /// The axis.
    pub axis: Axis,
    /// The kernel or OS mechanism, e.g. `landlock`, `seccomp`, `runner`.
    pub mechanism: String,
    /// How completely.
    #[serde(flatten)]
    pub level: Level,
}

/// The overall verdict of an [`EnforcementReport`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "enforcement", rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Enforcement {
    /// Every axis fully enforced.
    Full,
    /// Some axes have gaps or are not enforced.
    Partial {
        /// One line per gap, prefixed by its axis.
        gaps: Vec<String>,
    },
    /// Nothing is enforced.
    None,
}

/// A backend's account of what it enforces for one policy on this host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnforcementReport {
    /// Backend name.
    pub backend: String,
    /// Mechanism facts, e.g. `landlock ABI 7`.
    pub details: Vec<String>,
    /// Per-axis enforcement.
    pub axes: Vec<AxisEnforcement>,
}

impl EnforcementReport {
    /// The overall verdict.
    pub fn enforcement(&self) -> Enforcement {
        if self
            .axes
            .iter()
            .all(|a| matches!(a.level, Level::None { .. }))
        {
            return Enforcement::None;
        }
        let gaps: Vec<String> = self
            .axes
            .iter()
            .flat_map(|a| match &a.level {
                Level::Full => Vec::new(),
                Level::Partial { gaps } => {
                    gaps.iter().map(|g| format!("{}: {g}", a.axis)).collect()
                }
                Level::None { reason } => vec![format!("{}: not enforced: {reason}", a.axis)],
            })
            .collect();
        if gaps.is_empty() {
            Enforcement::Full
        } else {
            Enforcement::Partial { gaps }
        }
    }

    /// The entry for `axis`, if reported.
    pub fn axis(&self, axis: Axis) -> Option<&AxisEnforcement> {
        self.axes.iter().find(|a| a.axis == axis)
    }
}
