//! The closed result of an approval request and the per-session approval policy.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// How one approval request ended. Closed: only [`ApprovalOutcome::AllowedOnce`] permits anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ApprovalOutcome {
    /// The one operation that was asked about may run, once.
    AllowedOnce,
    /// An answerer explicitly refused.
    Rejected,
    /// The request was withdrawn (interrupted, end of input, no answer in time).
    Cancelled,
    /// Nobody could answer: no answerer, an answerer that failed, or a malformed answer.
    Unavailable,
}

impl ApprovalOutcome {
    /// Whether the operation may run. True only for `allowed-once`.
    pub fn permits(self) -> bool {
        matches!(self, Self::AllowedOnce)
    }

    /// Stable kebab-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::AllowedOnce => "allowed-once",
            Self::Rejected => "rejected",
            Self::Cancelled => "cancelled",
            Self::Unavailable => "unavailable",
        }
    }
}

impl fmt::Display for ApprovalOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether a session dispatches approval requests at all.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ApprovalPolicy {
    /// Ask the answerer chain; the first answerer that takes the request decides.
    #[default]
    Ask,
    /// Reject every request deterministically without asking anyone (CI, unattended runs).
    Never,
}

impl ApprovalPolicy {
    /// Stable kebab-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ask => "ask",
            Self::Never => "never",
        }
    }
}

impl fmt::Display for ApprovalPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ApprovalPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "ask" => Ok(Self::Ask),
            "never" => Ok(Self::Never),
            other => Err(format!(
                "unknown approval policy {other:?}; expected ask or never"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_allowed_once_permits() {
        let all = [
            ApprovalOutcome::AllowedOnce,
            ApprovalOutcome::Rejected,
            ApprovalOutcome::Cancelled,
            ApprovalOutcome::Unavailable,
        ];
        let permitting: Vec<_> = all.iter().filter(|o| o.permits()).collect();
        assert_eq!(permitting, [&ApprovalOutcome::AllowedOnce]);
    }

    #[test]
    fn names_round_trip_through_serde() {
        for o in [
            ApprovalOutcome::AllowedOnce,
            ApprovalOutcome::Rejected,
            ApprovalOutcome::Cancelled,
            ApprovalOutcome::Unavailable,
        ] {
            let json = serde_json::to_string(&o).unwrap();
            assert_eq!(json, format!("\"{o}\""));
            assert_eq!(serde_json::from_str::<ApprovalOutcome>(&json).unwrap(), o);
        }
        assert!(serde_json::from_str::<ApprovalOutcome>("\"allowed\"").is_err());
    }

    #[test]
    fn policy_parses() {
        assert_eq!("ask".parse::<ApprovalPolicy>(), Ok(ApprovalPolicy::Ask));
        assert_eq!("never".parse::<ApprovalPolicy>(), Ok(ApprovalPolicy::Never));
        let err = "always".parse::<ApprovalPolicy>().unwrap_err();
        assert!(
            err.contains("always") && err.contains("ask or never"),
            "{err}"
        );
    }
}
