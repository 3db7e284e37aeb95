//! One-shot escalation after a sandbox denial, and which sandbox mode a run uses.

use std::path::{Path, PathBuf};

use sandbox_core::{SandboxMode, SandboxPolicy, ToolCache};
use serde::Serialize;

/// A widening of the policy offered for exactly one re-run of a denied command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind", content = "value")]
#[non_exhaustive]
pub enum Escalation {
    /// Add this path to the write paths (it must exist; see [`Escalation::write_path_for`]).
    AddWritePath(PathBuf),
    /// Allow network access.
    AllowNetwork,
    /// Allow creating child processes.
    AllowSubprocess,
    /// Run under this sandbox mode instead of the session's.
    Mode(SandboxMode),
    /// Give the run a private, persistent cache for this package tool
    /// (`--cache TOOL`) instead of widening the write paths to the user's
    /// own cache. The policy is unchanged by it: the runner adds the
    /// cache's directory and the tool's variables (`sandbox::tool_cache_dir`).
    UseToolCache(ToolCache),
}

impl Escalation {
    /// Write-path escalation for a denied path: the path itself if it exists,
    /// otherwise its nearest existing ancestor (a file that was to be created).
    pub fn write_path_for(denied: &Path) -> Self {
        let existing = denied
            .ancestors()
            .find(|p| !p.as_os_str().is_empty() && p.exists())
            .unwrap_or(denied);
        Self::AddWritePath(existing.to_path_buf())
    }

    /// One line for a human, e.g. `add /tmp/out to the write paths`.
    pub fn describe(&self) -> String {
        match self {
            Self::AddWritePath(p) => format!("add {} to the write paths", p.display()),
            Self::AllowNetwork => "allow network access".to_owned(),
            Self::AllowSubprocess => "allow creating child processes".to_owned(),
            Self::Mode(m) => format!("run in sandbox mode {m}"),
            Self::UseToolCache(t) => {
                format!("give the run a private {t} cache (--cache {t}), not the user's own")
            }
        }
    }
}

/// What the user is asked: re-run `argv` once with `escalation`, given the denial `evidence`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EscalationRequest {
    /// The command that was denied.
    pub argv: Vec<String>,
    /// Lines showing the denial (for example the stderr lines that matched a denial signature).
    pub evidence: Vec<String>,
    /// The proposed widening.
    pub escalation: Escalation,
}

impl EscalationRequest {
    /// The policy and one-shot mode for the single approved retry.
    ///
    /// Call it only after the request was answered `allowed-once`; the
    /// result is meant for one run and is consumed by [`RetryPlan::mode`].
    pub fn retry_plan(&self, policy: &SandboxPolicy) -> RetryPlan {
        let mut policy = policy.clone();
        let mut one_shot_mode = None;
        match &self.escalation {
            Escalation::AddWritePath(p) => {
                policy.write_paths.push(p.to_string_lossy().into_owned())
            }
            Escalation::AllowNetwork => policy.network = true,
            Escalation::AllowSubprocess => policy.deny_subprocess = false,
            Escalation::Mode(m) => one_shot_mode = Some(*m),
            // The runner's own directory for the run: no policy change here.
            Escalation::UseToolCache(_) => {}
        }
        RetryPlan {
            policy,
            one_shot_mode,
        }
    }
}

/// The widened policy and optional mode for one approved retry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPlan {
    /// The session policy with the escalation applied.
    pub policy: SandboxPolicy,
    one_shot_mode: Option<SandboxMode>,
}

impl RetryPlan {
    /// The mode the retry runs under, given the session's mode and the deployment default.
    pub fn mode(
        &self,
        session: Option<SandboxMode>,
        deployment_default: SandboxMode,
    ) -> (SandboxMode, ModeSource) {
        effective_mode(self.one_shot_mode, session, deployment_default)
    }
}

/// Which layer chose the effective sandbox mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum ModeSource {
    /// A mode explicitly approved for one retry.
    ApprovedRetry,
    /// The session's current mode.
    Session,
    /// The deployment's configured default.
    DeploymentDefault,
}

/// The mode a run uses: an approved one-retry mode beats the session's mode,
/// which beats the deployment default.
pub fn effective_mode(
    approved_retry: Option<SandboxMode>,
    session: Option<SandboxMode>,
    deployment_default: SandboxMode,
) -> (SandboxMode, ModeSource) {
    match (approved_retry, session) {
        (Some(m), _) => (m, ModeSource::ApprovedRetry),
        (None, Some(m)) => (m, ModeSource::Session),
        (None, None) => (deployment_default, ModeSource::DeploymentDefault),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use SandboxMode::*;

    #[test]
    fn precedence_retry_then_session_then_default() {
        assert_eq!(
            effective_mode(Some(DangerFullAccess), Some(ReadOnly), WorkspaceWrite),
            (DangerFullAccess, ModeSource::ApprovedRetry)
        );
        assert_eq!(
            effective_mode(None, Some(ReadOnly), WorkspaceWrite),
            (ReadOnly, ModeSource::Session)
        );
        assert_eq!(
            effective_mode(None, None, WorkspaceWrite),
            (WorkspaceWrite, ModeSource::DeploymentDefault)
        );
    }

    #[test]
    fn retry_plan_widens_only_what_was_asked() {
        let base = SandboxPolicy {
            network: false,
            deny_subprocess: true,
            ..SandboxPolicy::default()
        };
        let req = |e| EscalationRequest {
            argv: vec!["touch".into(), "/x".into()],
            evidence: vec![],
            escalation: e,
        };
        let p = req(Escalation::AddWritePath("/x".into())).retry_plan(&base);
        assert_eq!(p.policy.write_paths, ["/x"]);
        assert!(!p.policy.network && p.policy.deny_subprocess);
        assert_eq!(p.mode(Some(ReadOnly), WorkspaceWrite).0, ReadOnly);

        let p = req(Escalation::AllowNetwork).retry_plan(&base);
        assert!(p.policy.network && p.policy.deny_subprocess);

        let p = req(Escalation::AllowSubprocess).retry_plan(&base);
        assert!(!p.policy.network && !p.policy.deny_subprocess);

        let p = req(Escalation::Mode(WorkspaceWrite)).retry_plan(&base);
        assert_eq!(p.policy, base);
        assert_eq!(
            p.mode(Some(ReadOnly), ReadOnly),
            (WorkspaceWrite, ModeSource::ApprovedRetry)
        );
    }

    #[test]
    fn write_path_for_missing_file_is_its_existing_parent() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("new/deeper/file.txt");
        assert_eq!(
            Escalation::write_path_for(&missing),
            Escalation::AddWritePath(dir.path().to_path_buf())
        );
        assert_eq!(
            Escalation::write_path_for(dir.path()),
            Escalation::AddWritePath(dir.path().to_path_buf())
        );
    }
}
