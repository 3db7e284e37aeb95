//! The operator's `[permissions]` config table.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::grant::GrantKey;
use crate::outcome::ApprovalPolicy;

/// The `[permissions]` table could not be read or parsed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PermissionsConfigError {
    /// The file could not be read.
    #[error("could not read the config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The table is not valid.
    #[error("invalid [permissions] table in {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// The only value a pre-approval can have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PreApproval {
    /// The key is granted without asking.
    Allow,
}

/// The operator's permission settings.
///
/// ```toml
/// [permissions]
/// approval = "ask"
/// [permissions.pre_approved]
/// "build/file.write/tmp/out" = "allow"
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PermissionsConfig {
    /// The session's approval policy unless the run sets one.
    pub approval: Option<ApprovalPolicy>,
    /// Project-wide pre-approvals: `"<skill>/<op>/<path>" = "allow"`.
    pub pre_approved: BTreeMap<GrantKey, PreApproval>,
}

impl PermissionsConfig {
    /// Parses the `[permissions]` table of a TOML document; other top-level
    /// tables belong to other components and are not read here.
    pub fn from_toml_str(text: &str, origin: &Path) -> Result<Self, PermissionsConfigError> {
        let parse = |message: String| PermissionsConfigError::Parse {
            path: origin.to_path_buf(),
            message,
        };
        let mut doc: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| parse(e.message().to_owned()))?;
        match doc.remove("permissions") {
            None => Ok(Self::default()),
            Some(table) => table
                .try_into()
                .map_err(|e: toml::de::Error| parse(e.message().to_owned())),
        }
    }

    /// Reads `path` and parses its `[permissions]` table.
    pub fn load(path: &Path) -> Result<Self, PermissionsConfigError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| PermissionsConfigError::Read {
                path: path.to_path_buf(),
                source,
            })?;
        Self::from_toml_str(&text, path)
    }

    /// The pre-approved keys.
    pub fn pre_approved_keys(&self) -> impl Iterator<Item = &GrantKey> {
        self.pre_approved.keys()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = r#"
[sandbox]
backend = "landlock"

[permissions]
approval = "never"
[permissions.pre_approved]
"build/file.write/tmp/out" = "allow"
"fetch/network/*" = "allow"
"#;

    #[test]
    fn parses_the_permissions_table_only() {
        let c = PermissionsConfig::from_toml_str(DOC, Path::new("c.toml")).unwrap();
        assert_eq!(c.approval, Some(ApprovalPolicy::Never));
        let keys: Vec<String> = c.pre_approved_keys().map(ToString::to_string).collect();
        assert_eq!(keys, ["build/file.write/tmp/out", "fetch/network/*"]);
        assert_eq!(
            PermissionsConfig::from_toml_str("[sandbox]\n", Path::new("c.toml")).unwrap(),
            PermissionsConfig::default()
        );
    }

    #[test]
    fn unknown_fields_and_bad_values_are_refused() {
        for (bad, needle) in [
            ("[permissions]\naproval = \"ask\"\n", "aproval"),
            (
                "[permissions.pre_approved]\n\"b/file.write/tmp\" = \"deny\"\n",
                "deny",
            ),
            (
                "[permissions.pre_approved]\n\"b/exec/tmp\" = \"allow\"\n",
                "exec",
            ),
            ("[[permissions.presets]]\nname = \"ci\"\n", "presets"),
        ] {
            let err = PermissionsConfig::from_toml_str(bad, Path::new("c.toml"))
                .unwrap_err()
                .to_string();
            assert!(err.contains(needle) && err.contains("c.toml"), "{err}");
        }
    }
}
