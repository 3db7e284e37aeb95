//! The policy a command runs under: the raw form and its validated form.

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::PolicyError;

/// Default wall-clock limit, in seconds.
pub const DEFAULT_TIMEOUT_SECONDS: u64 = 120;
/// Default operator ceiling for any requested timeout, in seconds.
pub const DEFAULT_MAX_TIMEOUT_SECONDS: u64 = 600;

/// What a sandboxed command may do, as written in config, op envelopes or CLI flags.
///
/// Every field but `write_paths` defaults to the compatible (open) value: the
/// sandbox bounds what the launching shell could already do, and writes are
/// closed unless granted. Paths may start with `~` and may contain
/// `{{workspace}}`; after expansion they must be absolute.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SandboxPolicy {
    /// Allow network access (outbound connections, listening).
    pub network: bool,
    /// Paths the command may write beneath (closed by default). Writing implies reading.
    pub write_paths: Vec<String>,
    /// Paths removed from the broad read surface.
    pub read_deny_paths: Vec<String>,
    /// Paths removed from the write surface, even beneath a write path.
    pub write_deny_paths: Vec<String>,
    /// Refuse creation of child processes (the command's own exec still works).
    pub deny_subprocess: bool,
    /// Environment variable names (exact, or `*` globs) not passed to the command.
    pub env_deny_names: Vec<String>,
    /// Wall-clock limit; the process tree is ended when it passes.
    pub timeout_seconds: u64,
    /// Operator ceiling that `timeout_seconds` and any requested timeout must not exceed.
    pub max_timeout_seconds: u64,
}

impl Default for SandboxPolicy {
    fn default() -> Self {
        Self {
            network: true,
            write_paths: Vec::new(),
            read_deny_paths: Vec::new(),
            write_deny_paths: Vec::new(),
            deny_subprocess: false,
            env_deny_names: Vec::new(),
            timeout_seconds: DEFAULT_TIMEOUT_SECONDS,
            max_timeout_seconds: DEFAULT_MAX_TIMEOUT_SECONDS,
        }
    }
}

/// Values substituted into policy paths.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExpandContext {
    /// Replaces a leading `~`.
    pub home: Option<PathBuf>,
    /// Replaces `{{workspace}}`.
    pub workspace: Option<PathBuf>,
}

impl ExpandContext {
    /// Home from `$HOME`, workspace as given.
    pub fn from_env(workspace: Option<PathBuf>) -> Self {
        Self {
            home: std::env::var_os("HOME")
                .filter(|h| !h.is_empty())
                .map(PathBuf::from),
            workspace,
        }
    }

    /// Expands `~` and `{{workspace}}` in `value` and checks the result is absolute.
    pub fn expand(&self, field: &'static str, value: &str) -> Result<PathBuf, PolicyError> {
        let bad = |reason: String| PolicyError::BadPath {
            field,
            value: value.to_owned(),
            reason,
        };
        if value.is_empty() {
            return Err(bad("the path is empty".into()));
        }
        if value.chars().any(|c| c == '\0') {
            return Err(bad("the path contains a NUL byte".into()));
        }
        let mut text = value.to_owned();
        if text.contains("{{workspace}}") {
            let ws = self.workspace.as_ref().ok_or_else(|| {
                bad("{{workspace}} is used but no workspace is set (pass --workspace)".into())
            })?;
            let ws = ws
                .to_str()
                .ok_or_else(|| bad("the workspace path is not valid UTF-8".into()))?;
            text = text.replace("{{workspace}}", ws);
        }
        if text == "~" || text.starts_with("~/") {
            let home = self
                .home
                .as_ref()
                .ok_or_else(|| bad("~ is used but HOME is not set".into()))?;
            let rest = text.trim_start_matches('~').trim_start_matches('/');
            let expanded = if rest.is_empty() {
                home.clone()
            } else {
                home.join(rest)
            };
            return absolute(expanded).map_err(bad);
        }
        absolute(PathBuf::from(text)).map_err(bad)
    }
}

fn absolute(path: PathBuf) -> Result<PathBuf, String> {
    if path.is_absolute() {
        Ok(path)
    } else {
        Err(
            "the path is not absolute after expansion (use an absolute path, ~ or {{workspace}})"
                .into(),
        )
    }
}

/// A policy whose paths are expanded, absolute, canonical and checked.
///
/// Only [`SandboxPolicy::resolve`] creates one, so a backend holding a
/// `ResolvedPolicy` never sees a relative, templated or missing write path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "SandboxPolicy")]
pub struct ResolvedPolicy {
    network: bool,
    write_paths: Vec<PathBuf>,
    read_deny_paths: Vec<PathBuf>,
    write_deny_paths: Vec<PathBuf>,
    deny_subprocess: bool,
    env_deny_names: Vec<String>,
    timeout_seconds: u64,
    max_timeout_seconds: u64,
}

impl SandboxPolicy {
    /// Validates and canonicalises the policy.
    ///
    /// Symlinks are resolved once, here. A write path must exist. A deny path
    /// may not exist yet: its longest existing ancestor is canonicalised and the
    /// rest appended, so the path stays denied once created.
    pub fn resolve(&self, ctx: &ExpandContext) -> Result<ResolvedPolicy, PolicyError> {
        if self.timeout_seconds == 0 {
            return Err(PolicyError::ZeroTimeout);
        }
        if self.timeout_seconds > self.max_timeout_seconds {
            return Err(PolicyError::TimeoutAboveCeiling {
                requested: self.timeout_seconds,
                ceiling: self.max_timeout_seconds,
            });
        }
        let mut write_paths = BTreeSet::new();
        for raw in &self.write_paths {
            let path = ctx.expand("write_paths", raw)?;
            let canonical =
                std::fs::canonicalize(&path).map_err(|e| PolicyError::WritePathMissing {
                    path: path.clone(),
                    reason: e.to_string(),
                })?;
            write_paths.insert(canonical);
        }
        let read_deny_paths = resolve_deny("read_deny_paths", &self.read_deny_paths, ctx)?;
        let write_deny_paths = resolve_deny("write_deny_paths", &self.write_deny_paths, ctx)?;
        let mut env_deny_names = BTreeSet::new();
        for name in &self.env_deny_names {
            if name.is_empty() || name.contains('=') || name.contains('\0') {
                return Err(PolicyError::BadEnvName { name: name.clone() });
            }
            env_deny_names.insert(name.clone());
        }
        Ok(ResolvedPolicy {
            network: self.network,
            write_paths: write_paths.into_iter().collect(),
            read_deny_paths,
            write_deny_paths,
            deny_subprocess: self.deny_subprocess,
            env_deny_names: env_deny_names.into_iter().collect(),
            timeout_seconds: self.timeout_seconds,
            max_timeout_seconds: self.max_timeout_seconds,
        })
    }
}

fn resolve_deny(
    field: &'static str,
    raw: &[String],
    ctx: &ExpandContext,
) -> Result<Vec<PathBuf>, PolicyError> {
    let mut out = BTreeSet::new();
    for value in raw {
        let path = ctx.expand(field, value)?;
        out.insert(
            canonicalize_lenient(&path).map_err(|reason| PolicyError::BadPath {
                field,
                value: value.clone(),
                reason,
            })?,
        );
    }
    Ok(out.into_iter().collect())
}

/// Canonicalises the longest existing ancestor of `path` and appends the rest.
fn canonicalize_lenient(path: &Path) -> Result<PathBuf, String> {
    let mut existing = path.to_path_buf();
    let mut rest: Vec<std::ffi::OsString> = Vec::new();
    loop {
        match std::fs::canonicalize(&existing) {
            Ok(mut base) => {
                for part in rest.iter().rev() {
                    base.push(part);
                }
                return Ok(base);
            }
            Err(_) => {
                let name = match existing.components().next_back() {
                    Some(Component::Normal(name)) => name.to_owned(),
                    Some(Component::ParentDir | Component::CurDir) => {
                        return Err(
                            "a not-yet-existing part of the path contains `.` or `..`".into()
                        )
                    }
                    _ => return Err("no ancestor of the path exists".into()),
                };
                rest.push(name);
                if !existing.pop() {
                    return Err("no ancestor of the path exists".into());
                }
            }
        }
    }
}

/// Deserialising a `ResolvedPolicy` resolves it again (absolute paths only, no
/// templates), so a serialised policy can never smuggle in an unchecked one.
impl TryFrom<SandboxPolicy> for ResolvedPolicy {
    type Error = PolicyError;
    fn try_from(policy: SandboxPolicy) -> Result<Self, PolicyError> {
        policy.resolve(&ExpandContext::default())
    }
}

impl ResolvedPolicy {
    /// Whether network access is allowed.
    pub fn network(&self) -> bool {
        self.network
    }
    /// Canonical write paths, sorted and deduplicated.
    pub fn write_paths(&self) -> &[PathBuf] {
        &self.write_paths
    }
    /// Canonical read-deny paths (may not exist yet).
    pub fn read_deny_paths(&self) -> &[PathBuf] {
        &self.read_deny_paths
    }
    /// Canonical write-deny paths (may not exist yet).
    pub fn write_deny_paths(&self) -> &[PathBuf] {
        &self.write_deny_paths
    }
    /// Whether child processes are refused.
    pub fn deny_subprocess(&self) -> bool {
        self.deny_subprocess
    }
    /// Environment names and globs removed from the command's environment.
    pub fn env_deny_names(&self) -> &[String] {
        &self.env_deny_names
    }
    /// Wall-clock limit.
    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout_seconds)
    }
    /// Wall-clock limit in seconds.
    pub fn timeout_seconds(&self) -> u64 {
        self.timeout_seconds
    }
    /// Operator ceiling for timeouts, in seconds.
    pub fn max_timeout_seconds(&self) -> u64 {
        self.max_timeout_seconds
    }

    /// Whether `path` (canonical) lies beneath a write path and not beneath a write-deny path.
    pub fn may_write(&self, path: &Path) -> bool {
        self.write_paths.iter().any(|w| path.starts_with(w))
            && !self.write_deny_paths.iter().any(|d| path.starts_with(d))
    }

    /// The raw policy this resolves from (absolute paths; resolving it again is a no-op).
    pub fn to_policy(&self) -> SandboxPolicy {
        let strings = |paths: &[PathBuf]| {
            paths
                .iter()
                .map(|p| p.to_string_lossy().into_owned())
                .collect()
        };
        SandboxPolicy {
            network: self.network,
            write_paths: strings(&self.write_paths),
            read_deny_paths: strings(&self.read_deny_paths),
            write_deny_paths: strings(&self.write_deny_paths),
            deny_subprocess: self.deny_subprocess,
            env_deny_names: self.env_deny_names.clone(),
            timeout_seconds: self.timeout_seconds,
            max_timeout_seconds: self.max_timeout_seconds,
        }
    }
}

impl ResolvedPolicy {
    /// The intersection of this (requested) policy with an operator policy.
    ///
    /// The operator side is never widened: network only if both allow it,
    /// subprocesses denied if either denies, deny lists and env denials united,
    /// and the timeout ceiling the smaller of the two. A requested write path
    /// outside every operator write path, or a timeout above the operator
    /// ceiling, is refused with an error rather than dropped or clipped.
    pub fn bounded_by(&self, operator: &ResolvedPolicy) -> Result<ResolvedPolicy, PolicyError> {
        if self.timeout_seconds > operator.max_timeout_seconds {
            return Err(PolicyError::TimeoutAboveCeiling {
                requested: self.timeout_seconds,
                ceiling: operator.max_timeout_seconds,
            });
        }
        if let Some(outside) = self
            .write_paths
            .iter()
            .find(|p| !operator.write_paths.iter().any(|w| p.starts_with(w)))
        {
            return Err(PolicyError::WriteOutsideOperator {
                path: outside.clone(),
            });
        }
        let union = |a: &[PathBuf], b: &[PathBuf]| -> Vec<PathBuf> {
            a.iter()
                .chain(b)
                .cloned()
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect()
        };
        Ok(ResolvedPolicy {
            network: self.network && operator.network,
            write_paths: self.write_paths.clone(),
            read_deny_paths: union(&self.read_deny_paths, &operator.read_deny_paths),
            write_deny_paths: union(&self.write_deny_paths, &operator.write_deny_paths),
            deny_subprocess: self.deny_subprocess || operator.deny_subprocess,
            env_deny_names: self
                .env_deny_names
                .iter()
                .chain(&operator.env_deny_names)
                .cloned()
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect(),
            timeout_seconds: self.timeout_seconds,
            max_timeout_seconds: self.max_timeout_seconds.min(operator.max_timeout_seconds),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(ws: &Path) -> ExpandContext {
        ExpandContext {
            home: Some(PathBuf::from("/home/u")),
            workspace: Some(ws.to_path_buf()),
        }
    }

    #[test]
    fn defaults_match_the_specification() {
        let p: SandboxPolicy = toml::from_str("").unwrap();
        assert!(p.network);
        assert!(p.write_paths.is_empty());
        assert!(!p.deny_subprocess);
        assert_eq!(p.timeout_seconds, 120);
        assert_eq!(p.max_timeout_seconds, 600);
    }

    #[test]
    fn unknown_field_is_refused() {
        let err = toml::from_str::<SandboxPolicy>("allow_network = true").unwrap_err();
        assert!(err.to_string().contains("allow_network"), "{err}");
    }

    #[test]
    fn expansion_and_absoluteness() {
        let c = ctx(Path::new("/ws"));
        assert_eq!(
            c.expand("f", "~/.ssh").unwrap(),
            PathBuf::from("/home/u/.ssh")
        );
        assert_eq!(c.expand("f", "~").unwrap(), PathBuf::from("/home/u"));
        assert_eq!(
            c.expand("f", "{{workspace}}/out").unwrap(),
            PathBuf::from("/ws/out")
        );
        let err = c.expand("write_paths", "rel/dir").unwrap_err().to_string();
        assert!(
            err.contains("write_paths") && err.contains("rel/dir"),
            "{err}"
        );
        let none = ExpandContext::default();
        assert!(none.expand("f", "{{workspace}}").is_err());
        assert!(none.expand("f", "~/x").is_err());
    }

    #[test]
    fn resolve_canonicalises_and_checks() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        std::fs::create_dir(&real).unwrap();
        std::os::unix::fs::symlink(&real, dir.path().join("link")).unwrap();
        let policy = SandboxPolicy {
            write_paths: vec!["{{workspace}}/link".into()],
            write_deny_paths: vec!["{{workspace}}/link/.git/hooks".into()],
            ..Default::default()
        };
        let r = policy.resolve(&ctx(dir.path())).unwrap();
        let canon = std::fs::canonicalize(&real).unwrap();
        assert_eq!(r.write_paths(), std::slice::from_ref(&canon));
        assert_eq!(r.write_deny_paths(), [canon.join(".git/hooks")]);
        assert!(r.may_write(&canon.join("a")));
        assert!(!r.may_write(&canon.join(".git/hooks/x")));
        assert_eq!(r.to_policy().resolve(&ExpandContext::default()).unwrap(), r);

        let missing = SandboxPolicy {
            write_paths: vec!["{{workspace}}/nope".into()],
            ..Default::default()
        };
        let err = missing.resolve(&ctx(dir.path())).unwrap_err().to_string();
        assert!(err.contains("nope"), "{err}");
    }

    #[test]
    fn timeout_above_ceiling_is_refused() {
        let p = SandboxPolicy {
            timeout_seconds: 700,
            ..Default::default()
        };
        assert!(matches!(
            p.resolve(&ExpandContext::default()),
            Err(PolicyError::TimeoutAboveCeiling {
                requested: 700,
                ceiling: 600
            })
        ));
    }
}
