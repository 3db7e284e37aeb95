//! Operator configuration, read from a `[sandbox]` TOML table.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::ConfigError;
use crate::policy::SandboxPolicy;

/// Which backend to use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum BackendChoice {
    /// The best backend for this platform.
    #[default]
    Auto,
    /// Linux Landlock + seccomp.
    Landlock,
    /// macOS Seatbelt.
    Seatbelt,
    /// Audit only: no enforcement.
    Noop,
}

/// What to do when the chosen backend is missing or fails its self-test.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum OnUnsupported {
    /// Fall back to the noop backend with a warning.
    #[default]
    Warn,
    /// Refuse to run.
    Error,
    /// Fall back to the noop backend silently.
    Ignore,
}

/// The operator's sandbox configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SandboxConfig {
    /// Backend selection.
    pub backend: BackendChoice,
    /// Behaviour when no working backend exists.
    pub on_unsupported: OnUnsupported,
    /// Bounding policy: requests can only narrow it.
    pub policy: Option<SandboxPolicy>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    #[serde(default)]
    sandbox: SandboxConfig,
    /// Read by the `sandbox-permissions` crate; checked there, not here.
    #[serde(default, rename = "permissions")]
    _permissions: Option<toml::Table>,
}

impl SandboxConfig {
    /// Parses the `[sandbox]` table of a TOML document.
    pub fn from_toml_str(text: &str, origin: &Path) -> Result<Self, ConfigError> {
        toml::from_str::<ConfigFile>(text)
            .map(|f| f.sandbox)
            .map_err(|e| ConfigError::Parse {
                path: origin.to_path_buf(),
                message: e.message().to_owned()
                    + &e.span()
                        .map(|s| line_of(text, s.start))
                        .map(|l| format!(" (line {l})"))
                        .unwrap_or_default(),
            })
    }

    /// Reads and parses a TOML config file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_toml_str(&text, path)
    }
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sandbox_table() {
        let c = SandboxConfig::from_toml_str(
            "[sandbox]\nbackend = \"landlock\"\non_unsupported = \"error\"\n[sandbox.policy]\nnetwork = false\n",
            Path::new("x.toml"),
        )
        .unwrap();
        assert_eq!(c.backend, BackendChoice::Landlock);
        assert_eq!(c.on_unsupported, OnUnsupported::Error);
        assert!(!c.policy.unwrap().network);
    }

    #[test]
    fn unknown_key_names_it() {
        let err =
            SandboxConfig::from_toml_str("[sandbox]\nbakend = \"noop\"\n", Path::new("x.toml"))
                .unwrap_err()
                .to_string();
        assert!(err.contains("bakend") && err.contains("line 2"), "{err}");
    }
}
