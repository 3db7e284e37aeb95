//! Package tools whose caches a run can be given privately (npm, pip,
//! cargo, go, yarn, pnpm, uv), and the variables that point each at its cache. The
//! facade's `tool_cache_dir` makes the directories.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// A package tool whose cache a run can be given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum ToolCache {
    /// npm (`npm_config_cache`).
    Npm,
    /// pip (`PIP_CACHE_DIR`).
    Pip,
    /// cargo (`CARGO_HOME`: registry, git checkouts; the user's
    /// `~/.cargo/config.toml` and credentials are then not read).
    Cargo,
    /// go (`GOMODCACHE`, `GOCACHE`).
    Go,
    /// yarn (`YARN_CACHE_FOLDER`).
    Yarn,
    /// pnpm (`pnpm_config_store_dir`, `pnpm_config_cache_dir`,
    /// `pnpm_config_state_dir`: the settings pnpm 11 reads from the
    /// environment; pnpm 10 and older read only the `npm_config_` names,
    /// which npm warns about as unknown, so they are not set).
    Pnpm,
    /// uv (`UV_CACHE_DIR`).
    Uv,
}

/// Every tool cache, in the order the CLI lists them.
pub const TOOL_CACHES: &[ToolCache] = &[
    ToolCache::Npm,
    ToolCache::Pip,
    ToolCache::Cargo,
    ToolCache::Go,
    ToolCache::Yarn,
    ToolCache::Pnpm,
    ToolCache::Uv,
];

impl ToolCache {
    /// The name used on the command line and in the config.
    pub fn name(self) -> &'static str {
        match self {
            ToolCache::Npm => "npm",
            ToolCache::Pip => "pip",
            ToolCache::Cargo => "cargo",
            ToolCache::Go => "go",
            ToolCache::Yarn => "yarn",
            ToolCache::Pnpm => "pnpm",
            ToolCache::Uv => "uv",
        }
    }

    /// The variables that point the tool at `dir`.
    pub fn env(self, dir: &Path) -> Vec<(OsString, OsString)> {
        let var = |name: &str, path: PathBuf| (OsString::from(name), path.into_os_string());
        match self {
            ToolCache::Npm => vec![var("npm_config_cache", dir.to_owned())],
            ToolCache::Pip => vec![var("PIP_CACHE_DIR", dir.to_owned())],
            ToolCache::Cargo => vec![var("CARGO_HOME", dir.to_owned())],
            ToolCache::Go => vec![
                var("GOMODCACHE", dir.join("mod")),
                var("GOCACHE", dir.join("build")),
            ],
            ToolCache::Yarn => vec![var("YARN_CACHE_FOLDER", dir.to_owned())],
            ToolCache::Pnpm => vec![
                var("pnpm_config_store_dir", dir.join("store")),
                var("pnpm_config_cache_dir", dir.join("cache")),
                var("pnpm_config_state_dir", dir.join("state")),
            ],
            ToolCache::Uv => vec![var("UV_CACHE_DIR", dir.to_owned())],
        }
    }
}

impl std::str::FromStr for ToolCache {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        TOOL_CACHES
            .iter()
            .copied()
            .find(|t| t.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = TOOL_CACHES.iter().map(|t| t.name()).collect();
                format!(
                    "unknown tool cache {s:?}; expected one of {}",
                    names.join(", ")
                )
            })
    }
}

impl std::fmt::Display for ToolCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl serde::Serialize for ToolCache {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> serde::Deserialize<'de> for ToolCache {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_ones_list_the_known() {
        for t in TOOL_CACHES {
            assert_eq!(t.name().parse::<ToolCache>(), Ok(*t));
        }
        let err = "maven".parse::<ToolCache>().unwrap_err();
        assert!(err.contains("npm, pip, cargo, go, yarn, pnpm, uv"), "{err}");
    }

    #[test]
    fn go_gets_its_module_and_build_caches_beneath_one_directory() {
        let env = ToolCache::Go.env(Path::new("/c/go"));
        assert_eq!(env[0], ("GOMODCACHE".into(), "/c/go/mod".into()));
        assert_eq!(env[1], ("GOCACHE".into(), "/c/go/build".into()));
    }
}
