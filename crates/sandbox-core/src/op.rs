//! The op envelope: a command request in the legacy `allow_` vocabulary.

use std::ffi::OsString;

use serde::{Deserialize, Serialize};

use crate::error::PolicyError;
use crate::policy::{ExpandContext, ResolvedPolicy, SandboxPolicy};

/// A request to run one command, as an agent or skill sends it.
///
/// The vocabulary is the legacy one (`allow_subprocess`, `env_passthrough`);
/// [`SandboxedExecOp::effective_policy`] converts it to a policy and bounds it
/// by the operator's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxedExecOp {
    /// Program and arguments.
    pub argv: Vec<String>,
    /// Allow network access (default false).
    #[serde(default)]
    pub network: bool,
    /// Allow child processes (default true).
    #[serde(default = "yes")]
    pub allow_subprocess: bool,
    /// Variables passed through; all others except `PATH` are removed. Absent: no scrub.
    #[serde(default)]
    pub env_passthrough: Option<Vec<String>>,
    /// Legacy read allowlist: reads are broad, so this only documents intent.
    #[serde(default)]
    pub read_paths: Vec<String>,
    /// Paths the command may write beneath.
    #[serde(default)]
    pub write_paths: Vec<String>,
    /// Requested wall-clock limit; absent means the operator's default.
    #[serde(default)]
    pub timeout_seconds: Option<u64>,
}

fn yes() -> bool {
    true
}

impl SandboxedExecOp {
    /// Parses an op from JSON.
    pub fn from_json(text: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// The op as a policy, before any operator bound.
    ///
    /// `env_names` are the variables present now: with `env_passthrough` set,
    /// every one of them that is neither listed nor `PATH` is denied.
    pub fn to_policy(
        &self,
        defaults: &SandboxPolicy,
        env_names: impl IntoIterator<Item = OsString>,
    ) -> SandboxPolicy {
        let env_deny_names = match &self.env_passthrough {
            None => Vec::new(),
            Some(keep) => env_names
                .into_iter()
                .filter_map(|n| n.into_string().ok())
                .filter(|n| n != "PATH" && !keep.iter().any(|k| k == n))
                .collect(),
        };
        SandboxPolicy {
            network: self.network,
            allow_net: Vec::new(),
            requests: Vec::new(),
            write_paths: self.write_paths.clone(),
            read_deny_paths: Vec::new(),
            write_deny_paths: Vec::new(),
            deny_subprocess: !self.allow_subprocess,
            env_deny_names,
            timeout_seconds: self.timeout_seconds.unwrap_or(defaults.timeout_seconds),
            max_timeout_seconds: defaults.max_timeout_seconds,
            allow_unix_sockets: Vec::new(),
            protect_git_dirs: false,
            private_shm: defaults.private_shm,
        }
    }

    /// The policy this op runs under: the op's own policy bounded by the operator's.
    ///
    /// Without an operator policy the op's policy stands alone under the
    /// default ceiling. Anything the operator does not allow is refused.
    pub fn effective_policy(
        &self,
        operator: Option<&SandboxPolicy>,
        ctx: &ExpandContext,
        env_names: impl IntoIterator<Item = OsString>,
    ) -> Result<ResolvedPolicy, PolicyError> {
        if self.argv.is_empty() {
            return Err(PolicyError::EmptyArgv);
        }
        for path in &self.read_paths {
            ctx.expand("read_paths", path)?;
        }
        let base = operator.cloned().unwrap_or_default();
        // `to_policy` carries the operator ceiling, so `resolve` refuses a
        // timeout above it with an error naming both numbers.
        let requested = self.to_policy(&base, env_names).resolve(ctx)?;
        match operator {
            Some(op) => requested.bounded_by(&op.resolve(ctx)?),
            None => Ok(requested),
        }
    }
}
/// The bound an op envelope gets when the operator config has no policy:
/// writes only beneath `root` (the workspace, else the working directory), no
/// network. An envelope can then never ask for `/` or for the network on its
/// own authority.
pub fn builtin_op_bound(root: &std::path::Path) -> SandboxPolicy {
    SandboxPolicy {
        network: false,
        write_paths: vec![root.to_string_lossy().into_owned()],
        ..SandboxPolicy::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The legacy envelope's defaults: network off, subprocesses allowed, the
    /// operator's timeout; `env_passthrough` keeps PATH whatever it lists.
    #[test]
    fn op_defaults_and_path_always_passing() {
        let op = SandboxedExecOp::from_json(r#"{"argv": ["/bin/true"]}"#).unwrap();
        assert!(!op.network);
        assert!(op.allow_subprocess);
        let p = op.to_policy(&SandboxPolicy::default(), Vec::<OsString>::new());
        assert!(!p.network && !p.deny_subprocess);
        assert_eq!(p.timeout_seconds, SandboxPolicy::default().timeout_seconds);
        let op =
            SandboxedExecOp::from_json(r#"{"argv": ["/bin/true"], "env_passthrough": ["HOME"]}"#)
                .unwrap();
        let names = ["PATH", "HOME", "AWS_SECRET"].map(OsString::from);
        let p = op.to_policy(&SandboxPolicy::default(), names);
        assert_eq!(p.env_deny_names, vec!["AWS_SECRET".to_owned()]);
    }
}
