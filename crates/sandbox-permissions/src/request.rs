//! What an answerer is asked.

use serde::Serialize;

use crate::escalation::EscalationRequest;
use crate::grant::GrantRequest;

/// One operation awaiting a yes or no.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
#[non_exhaustive]
pub enum ApprovalRequest {
    /// Re-run a command denied by the sandbox once, with a wider policy.
    Escalation(EscalationRequest),
    /// Grant a skill the permissions a phase declared.
    Grants(GrantRequest),
}

impl ApprovalRequest {
    /// One line for a human.
    pub fn summary(&self) -> String {
        match self {
            Self::Escalation(e) => format!(
                "re-run `{}` once: {}",
                e.argv.join(" "),
                e.escalation.describe()
            ),
            Self::Grants(g) => {
                let keys: Vec<String> = g.keys.iter().map(ToString::to_string).collect();
                match &g.phase {
                    Some(phase) => format!(
                        "grant skill {} (phase {phase}): {}",
                        g.skill,
                        keys.join(", ")
                    ),
                    None => format!("grant skill {}: {}", g.skill, keys.join(", ")),
                }
            }
        }
    }
}
