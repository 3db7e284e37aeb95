//! Operator configuration, read from a `[sandbox]` TOML table.

#[cfg(feature = "toml")]
use std::path::Path;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

#[cfg(feature = "toml")]
use crate::error::ConfigError;
use crate::policy::OperatorPolicy;

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
///
/// The default is [`OnUnsupported::Error`]: a deliberate difference from the
/// original specification's `warn`. Whoever wraps a command in a sandbox
/// expects confinement or an error, never a silent unconfined run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum OnUnsupported {
    /// Fall back to the noop backend with a warning (only when asked for).
    Warn,
    /// Refuse to run.
    #[default]
    Error,
    /// Fall back to the noop backend silently.
    Ignore,
}

/// The operator's sandbox configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SandboxConfig {
    /// Backend selection.
    pub backend: BackendChoice,
    /// Behaviour when no working backend exists.
    pub on_unsupported: OnUnsupported,
    /// Whether `--mode danger-full-access` (no confinement at all) may be used.
    pub allow_danger_full_access: bool,
    /// Extra paths (relative to the workspace) workspace-write protects.
    pub protect: Vec<String>,
    /// Default protections (see [`crate::protect::WORKSPACE_PROTECTED`]) to drop.
    pub unprotect: Vec<String>,
    /// Read-deny the present [`crate::protect::SECRETS`] in every run.
    pub secrets: bool,
    /// Treat partial enforcement (named gaps, e.g. an older kernel's) like
    /// an unavailable backend: `on_unsupported` then applies.
    pub require_full: bool,
    /// Bounding policy: requests can only narrow it; a field left out
    /// bounds nothing.
    pub policy: Option<OperatorPolicy>,
    /// Limits for every run (`[sandbox.limits]`): ceilings a request can
    /// only lower.
    pub limits: crate::limits::ResourceLimits,
    /// Tool caches every run gets (`caches = ["npm", "pip"]`), as with
    /// `--cache`.
    pub caches: Vec<crate::caches::ToolCache>,
    /// Whether workspace-write gives every run a private cache for each
    /// tool in [`crate::TOOL_CACHES`] without being asked (true by default;
    /// `default_caches = false`, like `--no-default-caches`, leaves them to
    /// `--cache` and `caches`). Plain `-w` runs never get them by default.
    pub default_caches: bool,
    /// Run even where the requested limits cannot be enforced (no cgroup
    /// with the controller this user may write); the outcome then says
    /// which limits held. Without it such a run is refused.
    pub allow_unlimited: bool,
    /// How intercepted hosts are reached (`[sandbox.egress]`).
    pub egress: EgressConfig,
}

/// `[sandbox.egress]`: how the hosts per-request rules name are reached,
/// for every run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EgressConfig {
    /// Verify the intercepted hosts' origins against the certificates of
    /// this PEM file instead of the system roots (`--upstream-ca`, which
    /// wins).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream_ca: Option<std::path::PathBuf>,
    /// Credentials injected at the proxy in every run, as `--secret`
    /// (`[[sandbox.egress.secrets]]`: `name`, `hosts`, optional `file`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<crate::request::SecretSpec>,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            backend: BackendChoice::default(),
            on_unsupported: OnUnsupported::default(),
            allow_danger_full_access: false,
            protect: Vec::new(),
            unprotect: Vec::new(),
            secrets: false,
            require_full: false,
            policy: None,
            limits: crate::limits::ResourceLimits::default(),
            caches: Vec::new(),
            default_caches: true,
            allow_unlimited: false,
            egress: EgressConfig::default(),
        }
    }
}

/// Environment variable naming the operator config file.
pub const CONFIG_ENV: &str = "SANDBOX_CONFIG";

/// Where the operator config is looked for, in order, when no file is given:
/// `$SANDBOX_CONFIG`, then `<home>/.config/sandbox/config.toml` for the
/// user's passwd home (`trusted_home`, see [`crate::home::trusted_home`]),
/// then `/etc/sandbox/config.toml`. `$XDG_CONFIG_HOME` and `$HOME` do not
/// move the user's config: a run started with another environment whose
/// write paths hold the directory they name could otherwise plant a config
/// there for this user's next run. Only when there is no usable passwd
/// home (`trusted_home` is `None`: `nobody`'s `/nonexistent`) is it looked
/// for at `$XDG_CONFIG_HOME/sandbox/config.toml` (default
/// `$HOME/.config/sandbox/config.toml`), a known gap for such accounts.
/// Never the working directory: a cloned repository or an earlier confined
/// run controls it. `$SANDBOX_CONFIG` is an explicit path the caller
/// gives, which must lie outside every run's write paths; it is used even
/// when the file is missing (so a typo is an error, not a silently
/// different config); the others only when they exist.
pub fn config_candidates(
    env_config: Option<PathBuf>,
    trusted_home: Option<PathBuf>,
    xdg_config_home: Option<PathBuf>,
    home: Option<PathBuf>,
) -> ConfigSource {
    if let Some(path) = env_config.filter(|p| !p.as_os_str().is_empty()) {
        return ConfigSource::Required(path);
    }
    let user = match trusted_home.filter(|p| p.is_absolute()) {
        Some(home) => Some(home.join(".config/sandbox/config.toml")),
        None => env_user_config(xdg_config_home, home),
    };
    ConfigSource::FirstExisting(
        user.into_iter()
            .chain(std::iter::once(PathBuf::from("/etc/sandbox/config.toml")))
            .collect(),
    )
}

/// Where the environment names the user config:
/// `$XDG_CONFIG_HOME/sandbox/config.toml`, else
/// `$HOME/.config/sandbox/config.toml` (absolute paths only).
fn env_user_config(xdg_config_home: Option<PathBuf>, home: Option<PathBuf>) -> Option<PathBuf> {
    let absolute = |p: Option<PathBuf>| p.filter(|p| p.is_absolute());
    absolute(xdg_config_home)
        .or_else(|| absolute(home).map(|h| h.join(".config")))
        .map(|dir| dir.join("sandbox").join("config.toml"))
}

/// Where the operator config comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigSource {
    /// This file, which must exist.
    Required(PathBuf),
    /// The first of these that exists, or none.
    FirstExisting(Vec<PathBuf>),
    /// A user config where the environment names it (`$XDG_CONFIG_HOME`,
    /// `$HOME`), away from the passwd home's, which is no longer read:
    /// loading fails and says where it belongs, so restrictions it holds
    /// are never dropped without a word.
    NotRead {
        /// The config found where the environment names it.
        found: PathBuf,
        /// Where the user config is read from.
        read_from: PathBuf,
    },
}

impl ConfigSource {
    /// The discovery of [`config_candidates`] from this process's environment.
    pub fn from_env() -> Self {
        let var = |name: &str| std::env::var_os(name).map(PathBuf::from);
        let trusted = crate::home::trusted_home();
        let found = config_candidates(
            var(CONFIG_ENV),
            trusted.clone(),
            var("XDG_CONFIG_HOME"),
            var("HOME"),
        );
        // Where the environment alone would have put it (before the passwd
        // home was trusted): a config file there, other than the one read
        // (the same file through a symlinked or bind-mounted home is read),
        // is refused, not skipped. Only a file (links followed): a dangling
        // link or a FIFO planted there is no user's config.
        if let (ConfigSource::FirstExisting(paths), Some(_)) = (&found, &trusted) {
            let env_path = env_user_config(var("XDG_CONFIG_HOME"), var("HOME"));
            if let (Some(env_path), Some(read_from)) = (env_path, paths.first()) {
                use std::os::unix::fs::MetadataExt;
                let id = |p: &std::path::Path| {
                    std::fs::metadata(p)
                        .ok()
                        .filter(std::fs::Metadata::is_file)
                        .map(|m| (m.dev(), m.ino()))
                };
                if let Some(env_id) = id(&env_path) {
                    if id(read_from) != Some(env_id) {
                        return ConfigSource::NotRead {
                            found: env_path,
                            read_from: read_from.clone(),
                        };
                    }
                }
            }
        }
        found
    }

    /// Loads the config: the path it came from (if any) and its contents
    /// (the default config when there is none).
    #[cfg(feature = "toml")]
    pub fn load(&self) -> Result<(Option<PathBuf>, SandboxConfig), ConfigError> {
        match self {
            ConfigSource::Required(path) => {
                SandboxConfig::load(path).map(|c| (Some(path.clone()), c))
            }
            ConfigSource::FirstExisting(paths) => {
                match paths.iter().find(|p| std::fs::metadata(p).is_ok()) {
                    Some(path) => SandboxConfig::load(path).map(|c| (Some(path.clone()), c)),
                    None => Ok((None, SandboxConfig::default())),
                }
            }
            ConfigSource::NotRead { found, read_from } => Err(ConfigError::NotRead {
                path: found.clone(),
                read_from: read_from.clone(),
            }),
        }
    }
}

#[cfg(feature = "toml")]
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    #[serde(default)]
    sandbox: SandboxConfig,
    /// Read by the `sandbox-permissions` crate; checked there, not here.
    #[serde(default, rename = "permissions")]
    _permissions: Option<toml::Table>,
}

#[cfg(feature = "toml")]
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

    /// Reads and parses a TOML config file: a regular file of at most
    /// [`MAX_CONFIG_BYTES`] (a FIFO, device or directory is refused without
    /// blocking or reading it).
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = read_config(path)?;
        Self::from_toml_str(&text, path)
    }
}

/// The largest operator config [`SandboxConfig::load`] reads.
#[cfg(feature = "toml")]
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// The text of the config file at `path`, opened without blocking (a FIFO
/// opens at once) and checked to be a regular file before a byte is read.
#[cfg(feature = "toml")]
fn read_config(path: &Path) -> Result<String, ConfigError> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let read_err = |source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(read_err)?;
    let meta = file.metadata().map_err(read_err)?;
    if !meta.is_file() {
        return Err(ConfigError::NotRegular {
            path: path.to_path_buf(),
        });
    }
    let mut text = String::new();
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(read_err)?;
    if text.len() as u64 > MAX_CONFIG_BYTES {
        return Err(ConfigError::TooLarge {
            path: path.to_path_buf(),
            limit: MAX_CONFIG_BYTES,
        });
    }
    Ok(text)
}

#[cfg(feature = "toml")]
fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

#[cfg(all(test, feature = "toml"))]
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
        assert_eq!(c.policy.unwrap().network, Some(false));
    }

    #[test]
    fn parses_the_egress_table_and_request_rules() {
        let c = SandboxConfig::from_toml_str(
            "[sandbox.egress]\nupstream_ca = \"/etc/sandbox/origins.pem\"\n\
             [[sandbox.egress.secrets]]\nname = \"API_TOKEN\"\nhosts = [\"api.example.com\"]\n\
             [[sandbox.egress.secrets]]\nname = \"NPM_TOKEN\"\nhosts = [\"pkgs.example.com\"]\nfile = \"/run/npm-token\"\n\
             [[sandbox.policy.requests]]\nmethods = [\"GET\"]\nurl = \"https://api.example.com/v1/**\"\n",
            Path::new("x.toml"),
        )
        .unwrap();
        assert_eq!(
            c.egress.upstream_ca.as_deref(),
            Some(Path::new("/etc/sandbox/origins.pem"))
        );
        assert_eq!(c.egress.secrets.len(), 2);
        assert_eq!(c.egress.secrets[0].name(), "API_TOKEN");
        assert_eq!(
            c.egress.secrets[1].source(),
            &crate::request::SecretSource::File("/run/npm-token".into())
        );
        assert_eq!(c.policy.unwrap().requests.unwrap().len(), 1);
        for bad in [
            "[sandbox.egress]\nupstream = \"/x\"\n",
            "[[sandbox.egress.secrets]]\nname = \"T\"\nhosts = [\"a.example.com\"]\nvalue = \"x\"\n",
            "[[sandbox.egress.secrets]]\nname = \"T\"\nhosts = [\"1.2.3.4\"]\n",
        ] {
            assert!(
                SandboxConfig::from_toml_str(bad, Path::new("x.toml")).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn defaults_fail_closed() {
        let c = SandboxConfig::default();
        assert_eq!(c.on_unsupported, OnUnsupported::Error);
        assert!(!c.allow_danger_full_access);
        let c = SandboxConfig::from_toml_str(
            "[sandbox]\nallow_danger_full_access = true\non_unsupported = \"warn\"\n",
            Path::new("x.toml"),
        )
        .unwrap();
        assert!(c.allow_danger_full_access);
        assert_eq!(c.on_unsupported, OnUnsupported::Warn);
    }

    #[test]
    fn discovery_never_looks_in_the_working_directory() {
        let home = Some(PathBuf::from("/home/u"));
        let passwd = Some(PathBuf::from("/home/p"));
        assert_eq!(
            config_candidates(Some("/x/c.toml".into()), passwd.clone(), None, home.clone()),
            ConfigSource::Required("/x/c.toml".into())
        );
        // The passwd home wins over whatever the environment says.
        assert_eq!(
            config_candidates(None, passwd, Some("/xdg".into()), home.clone()),
            ConfigSource::FirstExisting(vec![
                "/home/p/.config/sandbox/config.toml".into(),
                "/etc/sandbox/config.toml".into()
            ])
        );
        // Without a usable passwd home: the environment (the known gap).
        assert_eq!(
            config_candidates(None, None, Some("/xdg".into()), home.clone()),
            ConfigSource::FirstExisting(vec![
                "/xdg/sandbox/config.toml".into(),
                "/etc/sandbox/config.toml".into()
            ])
        );
        assert_eq!(
            config_candidates(None, None, Some("relative".into()), home),
            ConfigSource::FirstExisting(vec![
                "/home/u/.config/sandbox/config.toml".into(),
                "/etc/sandbox/config.toml".into()
            ])
        );
        assert_eq!(
            config_candidates(Some("".into()), None, None, None),
            ConfigSource::FirstExisting(vec!["/etc/sandbox/config.toml".into()])
        );
    }

    #[test]
    fn a_missing_required_config_is_an_error() {
        let err = ConfigSource::Required("/nonexistent/sandbox.toml".into())
            .load()
            .unwrap_err();
        assert!(
            err.to_string().contains("/nonexistent/sandbox.toml"),
            "{err}"
        );
        let (path, config) = ConfigSource::FirstExisting(vec!["/nonexistent/a.toml".into()])
            .load()
            .unwrap();
        assert_eq!((path, config), (None, SandboxConfig::default()));
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
