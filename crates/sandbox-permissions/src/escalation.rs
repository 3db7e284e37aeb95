//! One-shot escalation after a sandbox denial (`sandbox run --approval ask`).

use std::path::PathBuf;

use sandbox_core::ToolCache;
use serde::Serialize;

/// A widening of the policy offered for exactly one re-run of a denied command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind", content = "value")]
#[non_exhaustive]
pub enum Escalation {
    /// Add this existing path to the write paths.
    AddWritePath(PathBuf),
    /// Give the run a private, persistent cache for this package tool
    /// (`--cache TOOL`) instead of widening the write paths to the user's
    /// own cache. The policy is unchanged by it: the runner adds the
    /// cache's directory and the tool's variables (`sandbox::tool_cache_dir`).
    UseToolCache(ToolCache),
    /// Admit the requests of this per-request rule (`METHODS URL`, as
    /// `--allow-request` takes it): the exact method and normalised path
    /// the intercepting proxy refused.
    AddRequestRule(String),
    /// Admit a connection to this destination (`host:port`) that no egress
    /// rule lists, held by the proxy while the harness is asked
    /// (`sandbox session --approval channel`).
    AdmitDestination(String),
}

impl Escalation {
    /// One line for a human, e.g. `add /tmp/out to the write paths`.
    pub fn describe(&self) -> String {
        match self {
            Self::AddWritePath(p) => format!("add {} to the write paths", p.display()),
            Self::UseToolCache(t) => {
                format!("give the run a private {t} cache (--cache {t}), not the user's own")
            }
            // The flag's value is one shell word (`sandbox_core::request::flag`,
            // the one quoting of every proposal); none when it cannot be.
            Self::AddRequestRule(rule) => {
                match sandbox_core::request::flag("--allow-request", rule) {
                    Ok(flag) => format!("admit the requests {rule} ({flag})"),
                    Err(why) => format!("admit the requests {rule} (no flag: {why})"),
                }
            }
            Self::AdmitDestination(target) => {
                match sandbox_core::request::flag("--allow-net", target) {
                    Ok(flag) => format!("admit a connection to {target} ({flag})"),
                    Err(why) => format!("admit a connection to {target} (no flag: {why})"),
                }
            }
        }
    }
}

/// What the user is asked: re-run `argv` once with `escalation`, given the denial `evidence`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EscalationRequest {
    /// The command that was denied.
    pub argv: Vec<String>,
    /// Lines showing the denial (the sandbox's own record of the refusal).
    pub evidence: Vec<String>,
    /// The proposed widening.
    pub escalation: Escalation,
}
