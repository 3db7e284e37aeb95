//! Sandbox modes: named presets for the write surface.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::policy::SandboxPolicy;

/// A preset for how much a command may write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum SandboxMode {
    /// No writes beyond `/dev/null` and the policy's own write paths.
    ReadOnly,
    /// The workspace and a private temporary directory are writable.
    WorkspaceWrite,
    /// No confinement at all: the command is spawned directly and the outcome says so.
    DangerFullAccess,
}

impl SandboxMode {
    /// Stable kebab-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ReadOnly => "read-only",
            Self::WorkspaceWrite => "workspace-write",
            Self::DangerFullAccess => "danger-full-access",
        }
    }

    /// Whether commands in this mode run inside a sandbox.
    pub fn is_confined(self) -> bool {
        !matches!(self, Self::DangerFullAccess)
    }

    /// Adds the write paths this mode grants to `policy`, and the paths it
    /// protects inside them.
    ///
    /// `workspace-write` needs a workspace; it returns the name of what is
    /// missing otherwise. `private_tmp` is the run's own temporary directory.
    /// The workspace's [`protect::workspace_protections`](crate::protect::workspace_protections)
    /// (changed by `protection`) become write-deny paths, and every git
    /// directory in the write paths is protected
    /// ([`SandboxPolicy::protect_git_dirs`]).
    pub fn extend(
        self,
        policy: &mut SandboxPolicy,
        workspace: Option<&Path>,
        private_tmp: Option<&Path>,
        protection: &crate::protect::Protection<'_>,
    ) -> Result<(), &'static str> {
        if let Self::WorkspaceWrite = self {
            let ws =
                workspace.ok_or("workspace-write mode needs a workspace (pass --workspace)")?;
            policy.write_paths.push(ws.to_string_lossy().into_owned());
            // A linked worktree commits into its common git directory.
            policy.write_paths.extend(
                crate::protect::linked_worktree_grants(ws)
                    .into_iter()
                    .map(|p| p.to_string_lossy().into_owned()),
            );
            if let Some(tmp) = private_tmp {
                policy.write_paths.push(tmp.to_string_lossy().into_owned());
            }
            policy.write_deny_paths.extend(
                crate::protect::workspace_protections(ws, protection)
                    .into_iter()
                    .map(|p| p.to_string_lossy().into_owned()),
            );
            // Nested and sibling repositories too, wherever they lie in the
            // write paths, unless the operator unprotects both git entries.
            policy.protect_git_dirs |= protection.keeps_git();
        }
        Ok(())
    }
}

impl std::fmt::Display for SandboxMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for SandboxMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "read-only" => Ok(Self::ReadOnly),
            "workspace-write" => Ok(Self::WorkspaceWrite),
            "danger-full-access" => Ok(Self::DangerFullAccess),
            other => Err(format!(
                "unknown sandbox mode {other:?}; expected read-only, workspace-write or danger-full-access"
            )),
        }
    }
}
