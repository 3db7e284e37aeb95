//! Policy -> SBPL profile text plus its `-D` parameters.
//!
//! The text depends only on the policy's booleans, on how many paths each
//! list holds and on how many ancestors of deny paths lie inside the write
//! paths; path values travel exclusively as parameters referenced by
//! `(param "NAME")`, so no path text can change the profile's structure.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use sandbox_core::{EgressRule, NetworkMode, ResolvedPolicy};
use serde::Serialize;

use crate::error::SeatbeltError;
use crate::paths::{macos_canonical, parameter_value};
use crate::sbpl::{GIT_CONFIG_REGEX, GIT_HOOKS_REGEX, GIT_LINK_REGEX};

/// Absolute path of the macOS `sandbox-exec` tool.
pub const SANDBOX_EXEC: &str = "/usr/bin/sandbox-exec";

/// Prefix of the parameters naming write paths (`WRITE_PATH_0`, ...).
pub const WRITE_PARAM: &str = "WRITE_PATH";
/// Prefix of the parameters naming read-deny paths.
pub const READ_DENY_PARAM: &str = "READ_DENY_PATH";
/// Prefix of the parameters naming write-deny paths.
pub const WRITE_DENY_PARAM: &str = "WRITE_DENY_PATH";
/// Prefix of the parameters naming the ancestors of deny paths that lie
/// inside a write path (never unlinked or renamed).
pub const ANCESTOR_PARAM: &str = "DENY_ANCESTOR";
/// Prefix of the parameters naming the pathname UNIX sockets of
/// `allow_unix_sockets` (reachable with the network on).
pub const UNIX_SOCKET_PARAM: &str = "UNIX_SOCKET";
/// Prefix of the parameters naming the run's own terminal devices (the
/// terminals of the runner's stdin, stdout and stderr when the profile is made).
pub const TERMINAL_PARAM: &str = "TERMINAL";

/// A generated Seatbelt profile: SBPL text and the parameters it references.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SeatbeltProfile {
    /// The SBPL profile, passed to `sandbox-exec -p`.
    pub text: String,
    /// `(name, value)` pairs, passed as `-D name=value`, in the order the text uses them.
    pub params: Vec<(String, String)>,
}

impl SeatbeltProfile {
    /// The argv that runs `argv` under this profile:
    /// `/usr/bin/sandbox-exec -p TEXT -D NAME=VALUE ... -- argv...`.
    pub fn sandbox_exec_argv(&self, argv: &[OsString]) -> Vec<OsString> {
        let mut out = Vec::with_capacity(4 + 2 * self.params.len() + argv.len());
        out.push(OsString::from(SANDBOX_EXEC));
        out.push(OsString::from("-p"));
        out.push(OsString::from(&self.text));
        for (name, value) in &self.params {
            out.push(OsString::from("-D"));
            out.push(OsString::from(format!("{name}={value}")));
        }
        out.push(OsString::from("--"));
        out.extend(argv.iter().cloned());
        out
    }

    /// The value of parameter `name`, if the profile defines it.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// The parts of a policy a Seatbelt profile depends on.
///
/// [`profile`] builds one from a [`ResolvedPolicy`]; build one directly only
/// when the paths are already canonical and absolute (the generator checks
/// absoluteness and characters, not existence or symlinks).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProfileInput {
    /// Whether network access is allowed.
    pub network: bool,
    /// With the network on, only these loopback ports may be connected to
    /// (the runner's proxy, and exact `127.0.0.1:PORT` rules); `None`: any
    /// destination.
    pub loopback_ports: Option<Vec<u16>>,
    /// Whether child processes are refused.
    pub deny_subprocess: bool,
    /// Paths writable beneath.
    pub write_paths: Vec<PathBuf>,
    /// Paths removed from the broad read surface.
    pub read_deny_paths: Vec<PathBuf>,
    /// Paths removed from the write surface.
    pub write_deny_paths: Vec<PathBuf>,
    /// Pathname UNIX sockets reachable with the network on besides those
    /// beneath the write paths (`allow_unix_sockets`, `--allow-unix`).
    pub allow_unix_sockets: Vec<PathBuf>,
    /// Whether the git directories beneath the write paths keep the parts
    /// that run programs unwritable (`protect_git_dirs`, workspace-write).
    pub protect_git_dirs: bool,
    /// The run's own terminal devices (e.g. `/dev/ttys003`), writable and
    /// controllable; no other terminal is. [`profile_for_run`] fills it.
    pub terminals: Vec<PathBuf>,
}

impl From<&ResolvedPolicy> for ProfileInput {
    fn from(policy: &ResolvedPolicy) -> Self {
        Self {
            network: policy.network(),
            // Rules other than loopback ports are refused by `profile`.
            loopback_ports: (policy.network_mode() == NetworkMode::Allowlist).then(|| {
                policy
                    .allow_net()
                    .iter()
                    .filter_map(loopback_port)
                    .collect()
            }),
            deny_subprocess: policy.deny_subprocess(),
            write_paths: policy.write_paths().to_vec(),
            read_deny_paths: policy.read_deny_paths().to_vec(),
            write_deny_paths: policy.write_deny_paths().to_vec(),
            allow_unix_sockets: policy.allow_unix_sockets().to_vec(),
            protect_git_dirs: policy.protects_git_dirs(),
            terminals: Vec::new(),
        }
    }
}

/// The Seatbelt profile enforcing `policy`.
///
/// Paths are mapped to the names macOS resolves them to (see
/// [`macos_canonical`](crate::macos_canonical)), sorted and deduplicated.
/// A path with a control character, or one that is not UTF-8, is refused.
pub fn profile(policy: &ResolvedPolicy) -> Result<SeatbeltProfile, SeatbeltError> {
    if policy.network_mode() == NetworkMode::Allowlist {
        if let Some(rule) = policy
            .allow_net()
            .iter()
            .find(|r| r.as_ip().is_some() && loopback_port(r).is_none())
        {
            return Err(SeatbeltError::UnsupportedEgress {
                rule: rule.to_string(),
            });
        }
    }
    ProfileInput::from(policy).profile()
}

/// [`profile`] for a run started from this process: the terminals of its
/// stdin, stdout and stderr (if any) become the run's own terminal
/// ([`ProfileInput::terminals`]), resolved now; every other terminal stays
/// unwritable.
pub fn profile_for_run(policy: &ResolvedPolicy) -> Result<SeatbeltProfile, SeatbeltError> {
    profile(policy)?;
    ProfileInput {
        terminals: crate::paths::stdio_terminals(),
        ..ProfileInput::from(policy)
    }
    .profile()
}

/// The port of an IP rule admitting exactly one loopback address and port.
fn loopback_port(rule: &EgressRule) -> Option<u16> {
    let ip = rule.as_ip()?;
    let exact = ip.prefix() == if ip.addr().is_ipv4() { 32 } else { 128 };
    (exact && ip.addr().is_loopback()).then_some(ip.port()?)
}

impl ProfileInput {
    /// The Seatbelt profile for this input; see [`profile`].
    pub fn profile(&self) -> Result<SeatbeltProfile, SeatbeltError> {
        let write = params("write_paths", WRITE_PARAM, &self.write_paths)?;
        let read_deny = params("read_deny_paths", READ_DENY_PARAM, &self.read_deny_paths)?;
        let write_deny = params("write_deny_paths", WRITE_DENY_PARAM, &self.write_deny_paths)?;
        let ancestors = params(
            "deny path ancestors",
            ANCESTOR_PARAM,
            &ancestors_in_write_paths(
                &self.write_paths,
                self.read_deny_paths.iter().chain(&self.write_deny_paths),
            ),
        )?;
        let unix = params(
            "allow_unix_sockets",
            UNIX_SOCKET_PARAM,
            &self.allow_unix_sockets,
        )?;
        let terminals = params("terminals", TERMINAL_PARAM, &self.terminals)?;
        // Read-denied paths are write-denied too, as on Linux (Landlock
        // removes every right beneath them).
        let denied: Vec<(String, String)> = write_deny.iter().chain(&read_deny).cloned().collect();

        let mut text = String::from(BASE);
        if terminals.is_empty() {
            text.push_str(
                "; Terminals: none named (a run names those of the runner's stdin, stdout and stderr); no other terminal is writable.\n",
            );
        } else {
            text.push_str(
                "; Terminals: only the run's own (those of the runner's stdin, stdout and stderr); no other terminal is writable.\n",
            );
            rule(
                &mut text,
                "allow file-write-data file-ioctl",
                &terminals,
                &["literal"],
            );
        }
        text.push_str(READS);
        if read_deny.is_empty() {
            text.push_str("; Read denies: none (read_deny_paths is empty).\n");
        } else {
            text.push_str("; Read denies: each read_deny_paths entry and everything beneath it.\n");
            rule(
                &mut text,
                "deny file-read*",
                &read_deny,
                &["literal", "subpath"],
            );
        }
        if write.is_empty() {
            text.push_str("; Writes: none beyond the devices above (write_paths is empty).\n");
        } else {
            text.push_str("; Writes: beneath each write_paths entry.\n");
            rule(&mut text, "allow file-write*", &write, &["subpath"]);
        }
        if denied.is_empty() {
            text.push_str(
                "; Write denies: none (write_deny_paths and read_deny_paths are empty).\n",
            );
        } else {
            text.push_str(
                "; Write denies: each write_deny_paths and read_deny_paths entry and everything beneath it, existing or not.\n",
            );
            rule(
                &mut text,
                "deny file-write*",
                &denied,
                &["literal", "subpath"],
            );
        }
        if !ancestors.is_empty() {
            // Moving an ancestor away would carry the denied path out from
            // under the path-based rules above (and a read-denied file could
            // then be read at its new name). Made where it does not exist
            // yet, a symlink would redirect the denied path, and a directory
            // renamed into place would bring the denied path's content
            // written under another name. Seatbelt checks mkdir and a rename
            // onto a new name alike (`file-write-create`), so a missing
            // ancestor cannot be made at all; creating one that exists fails
            // with EEXIST before the sandbox is asked.
            text.push_str(
                "; Deny path ancestors inside the write paths: never unlinked or renamed; one that does not exist cannot be made (no symlink, no directory renamed into its place, no mkdir).\n",
            );
            rule(
                &mut text,
                "deny file-write-unlink file-write-create",
                &ancestors,
                &["literal"],
            );
        }
        if self.protect_git_dirs && !write.is_empty() {
            text.push_str(GIT_DIRS_HEAD);
            text.push_str("(deny file-write*");
            for (name, _) in &write {
                for re in [GIT_CONFIG_REGEX, GIT_HOOKS_REGEX] {
                    let _ = write!(
                        text,
                        "\n  (require-all (subpath (param \"{name}\")) (regex #\"{re}\"))"
                    );
                }
            }
            text.push_str(")\n(deny file-write-create");
            for (name, _) in &write {
                for kind in ["SYMLINK", "REGULAR-FILE"] {
                    let _ = write!(
                        text,
                        "\n  (require-all (subpath (param \"{name}\")) (regex #\"{GIT_LINK_REGEX}\") (vnode-type {kind}))"
                    );
                }
            }
            text.push_str(")\n");
        } else if self.protect_git_dirs {
            text.push_str("; Git directories: nothing beneath a write path to protect (write_paths is empty).\n");
        }
        match (&self.loopback_ports, self.network) {
            (Some(ports), true) => {
                let ports: BTreeSet<&u16> = ports.iter().collect();
                text.push_str(NETWORK_LOOPBACK);
                for port in &ports {
                    let _ = writeln!(
                        text,
                        "(allow network-outbound (remote ip \"localhost:{port}\"))"
                    );
                }
                if !ports.is_empty() {
                    text.push_str("; ...but no listening on the listed loopback ports (the proxy's and the allowed services').\n(deny network-bind");
                    for port in &ports {
                        let _ = write!(text, "\n  (local ip \"localhost:{port}\")");
                    }
                    text.push_str(")\n");
                }
                unix_sockets(&mut text, &write, &unix, &denied);
                text.push_str(TLS_SERVICES);
            }
            (None, true) => {
                text.push_str(NETWORK_ON);
                unix_sockets(&mut text, &write, &unix, &denied);
                text.push_str(NAME_SERVICES);
                text.push_str(TLS_SERVICES);
            }
            (_, false) => text.push_str(NETWORK_OFF),
        }
        if self.network {
            if read_deny.is_empty() {
                text.push_str(KEYCHAIN_ON);
            } else {
                text.push_str(KEYCHAIN_OFF);
            }
        }
        text.push_str(if self.deny_subprocess {
            SUBPROCESS_DENIED
        } else {
            SUBPROCESS_ALLOWED
        });

        let params = write
            .into_iter()
            .chain(read_deny)
            .chain(write_deny)
            .chain(ancestors)
            .chain(unix)
            .chain(terminals)
            .collect();
        Ok(SeatbeltProfile { text, params })
    }
}

/// Host UNIX sockets with the network on, as on Linux: only beneath the
/// write paths (outside every deny path) and those `allow_unix_sockets` lists.
fn unix_sockets(
    text: &mut String,
    write: &[(String, String)],
    unix: &[(String, String)],
    denied: &[(String, String)],
) {
    if write.is_empty() && unix.is_empty() {
        text.push_str(
            "; Host UNIX sockets: none (no write paths, allow_unix_sockets is empty); every one is refused.\n",
        );
        return;
    }
    text.push_str(
        "; Host UNIX sockets: only beneath the write paths and those allow_unix_sockets lists; every other one is refused.\n",
    );
    if !write.is_empty() {
        rule(
            text,
            "allow network-bind network-inbound network-outbound",
            write,
            &["subpath"],
        );
    }
    if !unix.is_empty() {
        text.push_str("(allow network-outbound");
        for (name, _) in unix {
            let _ = write!(
                text,
                "\n  (remote unix-socket (path-literal (param \"{name}\")))"
            );
        }
        text.push_str(")\n");
    }
    if !denied.is_empty() {
        text.push_str("; ...and none beneath a deny path.\n");
        rule(
            text,
            "deny network-bind network-inbound network-outbound",
            denied,
            &["literal", "subpath"],
        );
    }
}

/// Every directory between a write path (included) and a deny path beneath
/// it (excluded).
fn ancestors_in_write_paths<'a>(
    write_paths: &[PathBuf],
    denies: impl Iterator<Item = &'a PathBuf>,
) -> Vec<PathBuf> {
    let mut out = BTreeSet::new();
    for deny in denies {
        for write in write_paths
            .iter()
            .filter(|w| deny.starts_with(w) && *w != deny)
        {
            let mut a = deny.parent();
            while let Some(dir) = a {
                if !dir.starts_with(write) {
                    break;
                }
                out.insert(dir.to_path_buf());
                a = dir.parent();
            }
        }
    }
    out.into_iter().collect()
}

/// Checks, maps, sorts and names the paths of one policy field.
fn params(
    field: &'static str,
    prefix: &str,
    paths: &[PathBuf],
) -> Result<Vec<(String, String)>, SeatbeltError> {
    let mut values = BTreeSet::new();
    for path in paths {
        let checked = parameter_value(field, path)?;
        values.insert(
            macos_canonical(Path::new(&checked))
                .to_string_lossy()
                .into_owned(),
        );
    }
    Ok(values
        .into_iter()
        .enumerate()
        .map(|(i, value)| (format!("{prefix}_{i}"), value))
        .collect())
}

/// Appends `(head (filter (param "P")) ...)`, one filter per line.
fn rule(text: &mut String, head: &str, params: &[(String, String)], filters: &[&str]) {
    text.push('(');
    text.push_str(head);
    for (name, _) in params {
        for filter in filters {
            // Names are generated here (`PREFIX_N`), never taken from input.
            let _ = write!(text, "\n  ({filter} (param \"{name}\"))");
        }
    }
    text.push_str(")\n");
}

/// Header and the sections every profile shares.
const BASE: &str = r#"(version 1)
; Refuse everything that is not allowed below.
(deny default)
; Apple's BSD base profile: dyld, libSystem and logging support (needed on macOS 26).
(import "bsd.sb")
; Processes: run programs; signal and inspect only processes in this sandbox.
(allow process-exec*)
(allow signal (target same-sandbox))
(allow process-info* (target same-sandbox))
; System information: sysctl reads, broad like file reads, except the
; arguments and environment of processes (kern.procargs, kern.procargs2).
(allow sysctl-read)
(deny sysctl-read (sysctl-name-prefix "kern.procargs"))
; Local IPC ordinary tools use: preferences reads, POSIX semaphores (Python multiprocessing).
(allow user-preference-read)
(allow ipc-posix-sem)
; Services ordinary tools look up: users and groups, logging, preferences, per-user dirs.
(allow mach-lookup
  (global-name "com.apple.bsd.dirhelper")
  (global-name "com.apple.cfprefsd.agent")
  (global-name "com.apple.cfprefsd.daemon")
  (global-name "com.apple.logd")
  (global-name "com.apple.system.logger")
  (global-name "com.apple.system.notification_center")
  (global-name "com.apple.system.opendirectoryd.libinfo")
  (global-name "com.apple.system.opendirectoryd.membership"))
; Devices: /dev/null, and /dev/tty (the controlling terminal, the run's own).
(allow file-write-data file-ioctl
  (literal "/dev/null")
  (literal "/dev/tty"))
"#;

const READS: &str = r#"; Reads: the whole file system (read denies below take precedence).
(allow file-read*)
"#;

const GIT_DIRS_HEAD: &str = r#"; Git directories beneath the write paths (protect_git_dirs), existing or made by the run:
; config, config.worktree, commondir and hooks are never written, and no .git file or
; symlink (naming a git directory elsewhere) is made; the write path stays out of the regex.
"#;

const NETWORK_LOOPBACK: &str = r#"; Network: listed destinations only, through the runner's proxy on localhost;
; listening on localhost only.
(allow system-socket)
(allow network-bind network-inbound (local ip "localhost:*"))
"#;

const NETWORK_ON: &str = r#"; Network: on for IP (any address); sockets, connections, listening.
(allow system-socket)
(allow network-outbound (remote ip "*:*"))
(allow network-bind network-inbound (local ip "*:*"))
"#;

const NAME_SERVICES: &str = r#"; Name resolution: mDNSResponder's socket and the DNS services.
(allow network-outbound (literal "/private/var/run/mDNSResponder"))
(allow mach-lookup
  (global-name "com.apple.SystemConfiguration.DNSConfiguration")
  (global-name "com.apple.SystemConfiguration.configd")
  (global-name "com.apple.dnssd.service")
  (global-name "com.apple.networkd"))
"#;

const TLS_SERVICES: &str = r#"; Certificate trust for TLS (these services may fetch OCSP/CRL/AIA URLs).
(allow mach-lookup
  (global-name "com.apple.ocspd")
  (global-name "com.apple.trustd")
  (global-name "com.apple.trustd.agent"))
"#;

const KEYCHAIN_ON: &str = r#"; Keychain (com.apple.SecurityServer): with the network on and no read denies.
(allow mach-lookup (global-name "com.apple.SecurityServer"))
"#;

const KEYCHAIN_OFF: &str = r#"; Keychain (com.apple.SecurityServer): closed, since the policy read-denies paths
; (--secrets): the service would read keychains on the command's behalf.
(deny mach-lookup (global-name "com.apple.SecurityServer"))
"#;

const NETWORK_OFF: &str = r#"; Network: off; only local unix socketpairs work, and they need no rule. The
; services that reach the network on a caller's behalf, granted by Apple's
; base profiles, are closed again, as is mDNSResponder's socket.
(deny mach-lookup
  (global-name "com.apple.SecurityServer")
  (global-name "com.apple.dnssd.service")
  (global-name "com.apple.networkd")
  (global-name "com.apple.nsurlsessiond")
  (global-name "com.apple.nsurlstorage-cache")
  (global-name "com.apple.ocspd")
  (global-name "com.apple.trustd")
  (global-name "com.apple.trustd.agent"))
(deny network-outbound (literal "/private/var/run/mDNSResponder"))
"#;

const SUBPROCESS_ALLOWED: &str = r#"; Subprocesses: allowed.
(allow process-fork)
"#;

const SUBPROCESS_DENIED: &str =
    "; Subprocesses: denied (no process-fork); the command's own exec still works.\n";
