//! The policy a command runs under: the raw form and its validated form.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::PolicyError;
use crate::net::EgressRule;
use crate::request::RequestRule;

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
    /// With the network on, allow only these destinations (none listed: any).
    ///
    /// Host names (`example.com`, `*.example.com`, each with an optional
    /// `:PORT`) are reached through a proxy the runner starts; IP addresses
    /// and networks (`192.0.2.7:443`, `10.0.0.0/8`) also directly. See
    /// [`EgressRule`].
    pub allow_net: Vec<EgressRule>,
    /// Per-request egress rules (`[[sandbox.policy.requests]]`, CLI
    /// `--allow-request 'METHODS URL-PATTERN'`): a host one names is
    /// intercepted by the runner's proxy (its TLS terminated with a per-run
    /// CA), and only the requests some rule admits reach it. Listing any
    /// makes the network an allowlist ([`NetworkMode::Allowlist`]). See
    /// [`RequestRule`]. Linux only: elsewhere a run with request rules does
    /// not start.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub requests: Vec<RequestRule>,
    /// Paths the command may write beneath (closed by default). Writing implies reading.
    pub write_paths: Vec<String>,
    /// Paths removed from the broad read surface.
    ///
    /// A deny path that is or passes through a symlink protects the link's
    /// directory entry (no remove, rename or replace) and its target.
    pub read_deny_paths: Vec<String>,
    /// Paths removed from the write surface, even beneath a write path.
    ///
    /// A deny path that is or passes through a symlink protects the link's
    /// directory entry (no remove, rename or replace) and its target.
    pub write_deny_paths: Vec<String>,
    /// Refuse creation of child processes (the command's own exec still works).
    pub deny_subprocess: bool,
    /// Environment variable names (exact, or `*` globs) not passed to the command.
    pub env_deny_names: Vec<String>,
    /// Wall-clock limit; the process tree is ended when it passes.
    pub timeout_seconds: u64,
    /// Operator ceiling that `timeout_seconds` and any requested timeout must not exceed.
    pub max_timeout_seconds: u64,
    /// Pathname UNIX sockets the command may connect to besides those beneath
    /// the write paths (every other host socket is refused, network on or off).
    pub allow_unix_sockets: Vec<String>,
    /// Keep the parts of every git directory beneath the write paths that
    /// make git run programs (`config`, `config.worktree`, `commondir`,
    /// `hooks`, a `.git` file naming the directory) unwritable when that
    /// directory existed before the run; a repository the run makes stays
    /// its own. workspace-write sets it.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub protect_git_dirs: bool,
    /// POSIX shared memory and named semaphores for the run's own objects
    /// (on by default; only with write paths): the command may make new
    /// entries in `/dev/shm` and open, link, rename, unlink and truncate
    /// those it made (the same inodes, whatever their names); every other
    /// entry there stays as without write paths (reads per the read
    /// policy, writes refused). What the run leaves there is removed when
    /// it ends. Off: `/dev/shm` is writable only as a write path.
    #[serde(skip_serializing_if = "is_true")]
    pub private_shm: bool,
}

fn is_true(b: &bool) -> bool {
    *b
}

impl Default for SandboxPolicy {
    fn default() -> Self {
        Self {
            network: true,
            allow_net: Vec::new(),
            requests: Vec::new(),
            write_paths: Vec::new(),
            read_deny_paths: Vec::new(),
            write_deny_paths: Vec::new(),
            deny_subprocess: false,
            env_deny_names: Vec::new(),
            timeout_seconds: DEFAULT_TIMEOUT_SECONDS,
            max_timeout_seconds: DEFAULT_MAX_TIMEOUT_SECONDS,
            allow_unix_sockets: Vec::new(),
            protect_git_dirs: false,
            private_shm: true,
        }
    }
}

/// The operator's bounding policy (`[sandbox.policy]` in the config): the
/// fields of [`SandboxPolicy`], each optional. A field left out bounds
/// nothing (`write_paths` left out: no write bound; `write_paths = []`: no
/// writes allowed); [`OperatorPolicy::to_policy`] gives the policy with the
/// fields left out at their defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OperatorPolicy {
    /// [`SandboxPolicy::network`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<bool>,
    /// [`SandboxPolicy::allow_net`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow_net: Option<Vec<EgressRule>>,
    /// [`SandboxPolicy::requests`]: a request's rules must be among these
    /// (left out: request rules are bounded by `allow_net` alone, a rule's
    /// host and port within it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requests: Option<Vec<RequestRule>>,
    /// [`SandboxPolicy::write_paths`]: a request's write paths must lie
    /// beneath one of these (left out: no write bound).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub write_paths: Option<Vec<String>>,
    /// [`SandboxPolicy::read_deny_paths`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_deny_paths: Option<Vec<String>>,
    /// [`SandboxPolicy::write_deny_paths`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub write_deny_paths: Option<Vec<String>>,
    /// [`SandboxPolicy::deny_subprocess`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deny_subprocess: Option<bool>,
    /// [`SandboxPolicy::env_deny_names`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub env_deny_names: Option<Vec<String>>,
    /// [`SandboxPolicy::timeout_seconds`]: the default timeout.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<u64>,
    /// [`SandboxPolicy::max_timeout_seconds`] (left out: the default
    /// ceiling, 600 s).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_timeout_seconds: Option<u64>,
    /// [`SandboxPolicy::allow_unix_sockets`]: a request's sockets must be
    /// among these (left out: no socket bound).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow_unix_sockets: Option<Vec<String>>,
    /// [`SandboxPolicy::protect_git_dirs`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protect_git_dirs: Option<bool>,
    /// [`SandboxPolicy::private_shm`] (`false`: no run gets it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub private_shm: Option<bool>,
}

impl OperatorPolicy {
    /// The policy with every field left out at its default.
    pub fn to_policy(&self) -> SandboxPolicy {
        let d = SandboxPolicy::default();
        SandboxPolicy {
            network: self.network.unwrap_or(d.network),
            allow_net: self.allow_net.clone().unwrap_or(d.allow_net),
            requests: self.requests.clone().unwrap_or(d.requests),
            write_paths: self.write_paths.clone().unwrap_or(d.write_paths),
            read_deny_paths: self.read_deny_paths.clone().unwrap_or(d.read_deny_paths),
            write_deny_paths: self.write_deny_paths.clone().unwrap_or(d.write_deny_paths),
            deny_subprocess: self.deny_subprocess.unwrap_or(d.deny_subprocess),
            env_deny_names: self.env_deny_names.clone().unwrap_or(d.env_deny_names),
            timeout_seconds: self.timeout_seconds.unwrap_or(d.timeout_seconds),
            max_timeout_seconds: self.max_timeout_seconds.unwrap_or(d.max_timeout_seconds),
            allow_unix_sockets: self
                .allow_unix_sockets
                .clone()
                .unwrap_or(d.allow_unix_sockets),
            protect_git_dirs: self.protect_git_dirs.unwrap_or(d.protect_git_dirs),
            private_shm: self.private_shm.unwrap_or(d.private_shm),
        }
    }

    /// `request` bounded by this policy ([`ResolvedPolicy::bounded_by`]),
    /// where only the fields set bound: without `write_paths` no write path
    /// is refused, without `allow_unix_sockets` no socket. `own` are the
    /// runner's own directories for this run (its private `TMPDIR`, the tool
    /// caches): no request asked for them, so a write bound does not refuse
    /// them (nor anything beneath them).
    pub fn bound(
        &self,
        request: &ResolvedPolicy,
        own: &[PathBuf],
        ctx: &ExpandContext,
    ) -> Result<ResolvedPolicy, PolicyError> {
        let mut operator = self.to_policy().resolve(ctx)?;
        match self.write_paths {
            None => operator.write_paths = request.write_paths.clone(),
            Some(_) => operator.write_paths.extend(
                own.iter()
                    .map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| p.clone())),
            ),
        }
        if self.allow_unix_sockets.is_none() {
            operator.allow_unix_sockets = request.allow_unix_sockets.clone();
        }
        request.bounded_by(&operator)
    }
}

/// How much network a policy allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum NetworkMode {
    /// No network (`network = false`).
    Off,
    /// Any destination (`network = true`, no `allow_net`).
    On,
    /// Only the destinations of `allow_net`: host names through the runner's
    /// proxy, IP rules also directly; everything else refused.
    Allowlist,
}

impl NetworkMode {
    /// The mode's name as `sandbox policy` and the outcome print it.
    pub fn as_str(self) -> &'static str {
        match self {
            NetworkMode::Off => "off",
            NetworkMode::On => "on",
            NetworkMode::Allowlist => "allowlist",
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

/// A policy whose paths are expanded, absolute, canonical and checked (a
/// deny path's symlink entries are canonical up to their own, unfollowed name).
///
/// Only [`SandboxPolicy::resolve`] creates one, so a backend holding a
/// `ResolvedPolicy` never sees a relative, templated or missing write path.
///
/// It serialises as [`ResolvedPolicy::to_policy`] and deserialises by resolving
/// that again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "SandboxPolicy", into = "SandboxPolicy")]
pub struct ResolvedPolicy {
    network: bool,
    allow_net: Vec<EgressRule>,
    requests: Vec<RequestRule>,
    write_paths: Vec<PathBuf>,
    read_deny: DenySet,
    write_deny: DenySet,
    deny_subprocess: bool,
    env_deny_names: Vec<String>,
    timeout_seconds: u64,
    max_timeout_seconds: u64,
    allow_unix_sockets: Vec<PathBuf>,
    protect_git_dirs: bool,
    private_shm: bool,
}

impl SandboxPolicy {
    /// Validates and canonicalises the policy.
    ///
    /// Symlinks are resolved once, here. A write path must exist. A deny path
    /// may not exist yet: its longest existing ancestor is canonicalised and the
    /// rest appended, so the path stays denied once created.
    ///
    /// A deny path that is or passes through a symlink protects the link's
    /// directory entry (no remove, rename or replace) and its target: every
    /// symlink met while resolving it, the final component or an intermediate
    /// one, becomes a deny path of its own (its parent canonicalised, its name
    /// kept, not followed) beside the canonical target. So `W/.git -> /elsewhere`
    /// denies both `W/.git` and `/elsewhere`, and `W/link/.git` with
    /// `W/link -> W/real` denies `W/link` and `W/real/.git` (not all of
    /// `W/real`). Resolving the result again ([`ResolvedPolicy::to_policy`]
    /// then `resolve`, as deserialising a [`ResolvedPolicy`] does) gives the
    /// same set: `to_policy` writes an intermediate link back as a path through
    /// it, never bare (a bare link would deny its whole target).
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
        if !self.network && !self.allow_net.is_empty() {
            return Err(PolicyError::AllowNetWithoutNetwork {
                rule: self.allow_net[0].to_string(),
            });
        }
        if !self.network && !self.requests.is_empty() {
            return Err(PolicyError::AllowNetWithoutNetwork {
                rule: self.requests[0].to_string(),
            });
        }
        let mut allow_net: Vec<EgressRule> = Vec::new();
        for rule in &self.allow_net {
            if !allow_net.contains(rule) {
                allow_net.push(rule.clone());
            }
        }
        let mut requests: Vec<RequestRule> = Vec::new();
        for rule in &self.requests {
            if !requests.contains(rule) {
                requests.push(rule.clone());
            }
        }
        if let Some((net, request)) = exact_intercepted(&allow_net, &requests).next() {
            return Err(PolicyError::AllowNetIntercepted {
                net: net.to_string(),
                request: request.to_string(),
                host: request.host().to_owned(),
                port: request.port(),
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
        let read_deny = resolve_deny("read_deny_paths", &self.read_deny_paths, ctx)?;
        let write_deny = resolve_deny("write_deny_paths", &self.write_deny_paths, ctx)?;
        // A write path inside a read denial is refused rather than half
        // granted: the narrower rule would silently win at run time.
        for write in &write_paths {
            if let Some(deny) = read_deny.paths.iter().find(|d| write.starts_with(d)) {
                return Err(PolicyError::WriteInsideReadDeny {
                    write: write.clone(),
                    deny: deny.clone(),
                });
            }
        }
        let mut allow_unix_sockets = BTreeSet::new();
        for raw in &self.allow_unix_sockets {
            let path = ctx.expand("allow_unix_sockets", raw)?;
            // A socket may appear after the run starts: its directory must exist.
            let canonical =
                std::fs::canonicalize(&path).or_else(|_| match (path.parent(), path.file_name()) {
                    (Some(dir), Some(name)) => std::fs::canonicalize(dir).map(|d| d.join(name)),
                    _ => Err(std::io::Error::from(std::io::ErrorKind::NotFound)),
                });
            allow_unix_sockets.insert(canonical.map_err(|e| PolicyError::BadPath {
                field: "allow_unix_sockets",
                value: raw.clone(),
                reason: format!("neither the socket nor its directory resolves ({e})"),
            })?);
        }
        let mut env_deny_names = BTreeSet::new();
        for name in &self.env_deny_names {
            if name.is_empty() || name.contains('=') || name.contains('\0') {
                return Err(PolicyError::BadEnvName { name: name.clone() });
            }
            env_deny_names.insert(name.clone());
        }
        Ok(ResolvedPolicy {
            network: self.network,
            allow_net,
            requests,
            write_paths: write_paths.into_iter().collect(),
            read_deny,
            write_deny,
            deny_subprocess: self.deny_subprocess,
            env_deny_names: env_deny_names.into_iter().collect(),
            timeout_seconds: self.timeout_seconds,
            max_timeout_seconds: self.max_timeout_seconds,
            allow_unix_sockets: allow_unix_sockets.into_iter().collect(),
            protect_git_dirs: self.protect_git_dirs,
            private_shm: self.private_shm,
        })
    }
}

/// Resolved deny paths and how to spell them again.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct DenySet {
    /// Canonical targets and symlink entries (canonical parent, name kept).
    paths: Vec<PathBuf>,
    /// Symlink entries met only with more of the path after them (an
    /// intermediate link), each with one spelling of a deny path through it.
    /// Written back as the bare link, such an entry would resolve again to
    /// the link *and its whole target*; written as the spelling, it resolves
    /// to the link and the entries already in `paths`.
    through: BTreeMap<PathBuf, PathBuf>,
}

impl DenySet {
    /// The deny paths to write back so that resolving them gives this set again.
    fn spellings(&self) -> Vec<String> {
        self.paths
            .iter()
            .map(|p| self.through.get(p).unwrap_or(p))
            .map(|p| p.to_string_lossy().into_owned())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect()
    }

    /// Whether `link` is in the set as a final link (bare, its target denied).
    fn has_final_link(&self, link: &Path) -> bool {
        !self.through.contains_key(link)
            && self
                .paths
                .binary_search_by(|p| p.as_path().cmp(link))
                .is_ok()
    }

    /// Both sets, as resolving both lists of deny paths together would give.
    fn union(&self, other: &DenySet) -> DenySet {
        let paths: BTreeSet<PathBuf> = self.paths.iter().chain(&other.paths).cloned().collect();
        let mut through: BTreeMap<PathBuf, PathBuf> = BTreeMap::new();
        for (link, spelling) in self.through.iter().chain(&other.through) {
            if self.has_final_link(link) || other.has_final_link(link) {
                continue;
            }
            match through.get(link) {
                Some(known) if known <= spelling => {}
                _ => {
                    through.insert(link.clone(), spelling.clone());
                }
            }
        }
        DenySet {
            paths: paths.into_iter().collect(),
            through,
        }
    }
}

fn resolve_deny(
    field: &'static str,
    raw: &[String],
    ctx: &ExpandContext,
) -> Result<DenySet, PolicyError> {
    let mut walk = DenyWalk::default();
    for value in raw {
        let path = ctx.expand(field, value)?;
        if let Some(glob) = value.chars().find(|c| matches!(c, '*' | '?' | '[')) {
            if std::fs::symlink_metadata(&path).is_err() {
                return Err(PolicyError::GlobInDenyPath {
                    field,
                    value: value.clone(),
                    glob,
                });
            }
        }
        walk.resolve(&path).map_err(|reason| PolicyError::BadPath {
            field,
            value: value.clone(),
            reason,
        })?;
    }
    // A link also met as a final component has its target in the set: the
    // bare link spells it.
    let mut through = walk.through;
    through.retain(|link, _| !walk.final_links.contains(link));
    Ok(DenySet {
        paths: walk.paths.into_iter().collect(),
        through,
    })
}

/// The kernel's limit on symlinks followed in one lookup (`MAXSYMLINKS`).
const MAX_SYMLINKS: usize = 40;

/// One step still to take while resolving a deny path.
enum Step {
    Parent,
    Name(OsString),
}

/// Pushes the components of `path` onto `steps` so they pop in order.
fn push_steps(steps: &mut Vec<Step>, path: &Path) {
    for component in path.components().rev() {
        match component {
            Component::Normal(name) => steps.push(Step::Name(name.to_owned())),
            Component::ParentDir => steps.push(Step::Parent),
            // The root resets the walk (the caller handles it); `.` is a no-op.
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
}

/// What resolving deny paths has found so far.
#[derive(Default)]
struct DenyWalk {
    paths: BTreeSet<PathBuf>,
    /// Intermediate links, each with the smallest spelling through it.
    through: BTreeMap<PathBuf, PathBuf>,
    /// Links met as the last step of a walk (their target is in `paths`).
    final_links: BTreeSet<PathBuf>,
    /// Directories (not links) met on the way so far: the deny paths of one
    /// set mostly share their parents (a workspace's protections, a home's),
    /// which one `lstat` each then answers for all of them.
    dirs: BTreeSet<PathBuf>,
}

impl DenyWalk {
    /// Resolves the absolute deny path `path`, as the kernel would walk it.
    ///
    /// Adds the canonical path it names (the longest existing prefix
    /// resolved, the not-yet-existing rest appended, so the path stays denied
    /// once created) and every symlink met on the way, final component or
    /// intermediate, in its own location: its parent canonical, its own name
    /// kept, not followed. The link's directory entry is then protected as
    /// well as its target (a command cannot remove the link and put a real
    /// directory in its place).
    fn resolve(&mut self, path: &Path) -> Result<(), String> {
        if !path.is_absolute() {
            return Err("the path is not absolute".into());
        }
        let mut steps = Vec::new();
        push_steps(&mut steps, path);
        // `base` never passes through a symlink: only non-link names are pushed.
        let mut base = PathBuf::from("/");
        let mut base_is_dir = true;
        let mut missing = false;
        let mut links = 0;
        while let Some(step) = steps.pop() {
            match step {
                Step::Parent if missing => {
                    return Err("a not-yet-existing part of the path is followed by `..`".into())
                }
                Step::Parent if !base_is_dir => {
                    return Err(format!(
                        "`..` follows {}, which is not a directory",
                        base.display()
                    ))
                }
                Step::Parent => {
                    base.pop();
                }
                Step::Name(name) if missing => base.push(name),
                Step::Name(name) => {
                    let here = base.join(&name);
                    if self.dirs.contains(&here) {
                        base = here;
                        base_is_dir = true;
                        continue;
                    }
                    match std::fs::symlink_metadata(&here) {
                        Ok(meta) if meta.file_type().is_symlink() => {
                            links += 1;
                            if links > MAX_SYMLINKS {
                                return Err(format!(
                                    "more than {MAX_SYMLINKS} symlinks met while resolving it"
                                ));
                            }
                            let target = std::fs::read_link(&here).map_err(|e| {
                                format!("cannot read the symlink {}: {e}", here.display())
                            })?;
                            self.met_link(&here, &steps);
                            if target.is_absolute() {
                                base = PathBuf::from("/");
                                base_is_dir = true;
                            }
                            push_steps(&mut steps, &target);
                        }
                        Ok(meta) => {
                            base_is_dir = meta.is_dir();
                            if base_is_dir {
                                self.dirs.insert(here.clone());
                            }
                            base = here;
                        }
                        // Not there yet (or not reachable by the runner, which
                        // the command, with the same uid, cannot pass either).
                        Err(_) => {
                            base = here;
                            missing = true;
                        }
                    }
                }
            }
        }
        self.paths.insert(base);
        Ok(())
    }

    /// Records the symlink `link`, with `rest` the steps still to take after it.
    fn met_link(&mut self, link: &Path, rest: &[Step]) {
        self.paths.insert(link.to_path_buf());
        if rest.is_empty() {
            self.final_links.insert(link.to_path_buf());
            return;
        }
        let mut spelling = link.to_path_buf();
        for step in rest.iter().rev() {
            match step {
                Step::Parent => spelling.push(".."),
                Step::Name(name) => spelling.push(name),
            }
        }
        match self.through.get_mut(link) {
            Some(known) if *known <= spelling => {}
            Some(known) => *known = spelling,
            None => {
                self.through.insert(link.to_path_buf(), spelling);
            }
        }
    }
}

/// The exact destination rules of `allow_net` that name the host and port
/// of a request rule of `requests` (with that rule): ambiguous in one
/// policy, as the host is intercepted, request by request, and listed
/// whole. A wildcard rule, or an exact one for another port or for every
/// port, is no conflict: interception wins for the intercepted host:port
/// (the run's resolver never answers an intercepted name).
fn exact_intercepted<'a>(
    allow_net: &'a [EgressRule],
    requests: &'a [RequestRule],
) -> impl Iterator<Item = (&'a EgressRule, &'a RequestRule)> + 'a {
    allow_net.iter().flat_map(move |net| {
        requests.iter().filter_map(move |request| match net {
            EgressRule::Name(rule)
                if !rule.is_wildcard()
                    && rule.port() == Some(request.port())
                    && rule.name() == request.host() =>
            {
                Some((net, request))
            }
            _ => None,
        })
    })
}

/// Deserialising a `ResolvedPolicy` resolves it again (absolute paths only, no
/// templates), so a serialised policy can never smuggle in an unchecked one.
impl TryFrom<SandboxPolicy> for ResolvedPolicy {
    type Error = PolicyError;
    fn try_from(policy: SandboxPolicy) -> Result<Self, PolicyError> {
        policy.resolve(&ExpandContext::default())
    }
}

/// Serialising a `ResolvedPolicy` writes [`ResolvedPolicy::to_policy`].
impl From<ResolvedPolicy> for SandboxPolicy {
    fn from(policy: ResolvedPolicy) -> Self {
        policy.to_policy()
    }
}

impl ResolvedPolicy {
    /// Whether network access is allowed, to any destination or to those of
    /// [`ResolvedPolicy::allow_net`] (see [`ResolvedPolicy::network_mode`]).
    pub fn network(&self) -> bool {
        self.network
    }

    /// Off, on, or on for the listed destinations only.
    pub fn network_mode(&self) -> NetworkMode {
        match (
            self.network,
            self.allow_net.is_empty() && self.requests.is_empty(),
        ) {
            (false, _) => NetworkMode::Off,
            (true, true) => NetworkMode::On,
            (true, false) => NetworkMode::Allowlist,
        }
    }

    /// The destinations allowed when [`NetworkMode::Allowlist`] (empty otherwise).
    pub fn allow_net(&self) -> &[EgressRule] {
        &self.allow_net
    }

    /// The per-request rules ([`SandboxPolicy::requests`]); the hosts they
    /// name are intercepted.
    pub fn requests(&self) -> &[RequestRule] {
        &self.requests
    }

    /// The same policy with `rule` added to the allowed destinations (for
    /// the runner's own proxy). Only in [`NetworkMode::Allowlist`]: the
    /// other modes are returned as they are.
    pub fn with_allowed(&self, rule: EgressRule) -> ResolvedPolicy {
        let mut policy = self.clone();
        if policy.network_mode() == NetworkMode::Allowlist && !policy.allow_net.contains(&rule) {
            policy.allow_net.push(rule);
        }
        policy
    }

    /// The same policy with the network an allowlist of `rule` alone when
    /// it is off (for a runner whose proxy asks before admitting anything
    /// else); the other modes are returned as they are.
    pub fn with_only_allowed(&self, rule: EgressRule) -> ResolvedPolicy {
        let mut policy = self.clone();
        if policy.network_mode() == NetworkMode::Off {
            policy.network = true;
            policy.allow_net = vec![rule];
            policy.requests.clear();
        }
        policy
    }

    /// Canonical write paths, sorted and deduplicated.
    pub fn write_paths(&self) -> &[PathBuf] {
        &self.write_paths
    }
    /// Read-deny paths (may not exist yet): canonical targets, and each symlink
    /// met resolving them in its own location (canonical parent, not followed).
    pub fn read_deny_paths(&self) -> &[PathBuf] {
        &self.read_deny.paths
    }
    /// Write-deny paths (may not exist yet): canonical targets, and each symlink
    /// met resolving them in its own location (canonical parent, not followed).
    pub fn write_deny_paths(&self) -> &[PathBuf] {
        &self.write_deny.paths
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

    /// The same policy with `path` (absolute) added to the write-deny paths.
    pub fn with_write_deny(&self, path: &Path) -> Result<ResolvedPolicy, PolicyError> {
        let mut raw = self.to_policy();
        raw.write_deny_paths
            .push(path.to_string_lossy().into_owned());
        raw.resolve(&ExpandContext::default())
    }

    /// The same policy with `path` (absolute) added to the read-deny paths.
    pub fn with_read_deny(&self, path: &Path) -> Result<ResolvedPolicy, PolicyError> {
        let mut raw = self.to_policy();
        raw.read_deny_paths
            .push(path.to_string_lossy().into_owned());
        raw.resolve(&ExpandContext::default())
    }

    /// Whether `path` (canonical) lies beneath a write path and not beneath a write-deny path.
    pub fn may_write(&self, path: &Path) -> bool {
        self.write_paths.iter().any(|w| path.starts_with(w))
            && !self.write_deny.paths.iter().any(|d| path.starts_with(d))
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
            allow_net: self.allow_net.clone(),
            requests: self.requests.clone(),
            write_paths: strings(&self.write_paths),
            read_deny_paths: self.read_deny.spellings(),
            write_deny_paths: self.write_deny.spellings(),
            deny_subprocess: self.deny_subprocess,
            env_deny_names: self.env_deny_names.clone(),
            timeout_seconds: self.timeout_seconds,
            max_timeout_seconds: self.max_timeout_seconds,
            allow_unix_sockets: strings(&self.allow_unix_sockets),
            protect_git_dirs: self.protect_git_dirs,
            private_shm: self.private_shm,
        }
    }

    /// Pathname UNIX sockets (canonical) the command may connect to besides
    /// those beneath the write paths.
    pub fn allow_unix_sockets(&self) -> &[PathBuf] {
        &self.allow_unix_sockets
    }

    /// Whether git directories beneath the write paths that existed before
    /// the run keep the parts that run programs unwritable
    /// ([`SandboxPolicy::protect_git_dirs`]).
    pub fn protects_git_dirs(&self) -> bool {
        self.protect_git_dirs
    }

    /// Whether the run may make and use POSIX shared memory and semaphores
    /// of its own in `/dev/shm` ([`SandboxPolicy::private_shm`]; a run
    /// without write paths makes none).
    pub fn private_shm(&self) -> bool {
        self.private_shm && !self.write_paths.is_empty()
    }
}

impl ResolvedPolicy {
    /// The intersection of this (requested) policy with an operator policy.
    ///
    /// The operator side is never widened: network only if both allow it,
    /// destinations the operator lists only (a request without a list gets
    /// the operator's, one outside it is refused),
    /// subprocesses denied if either denies, deny lists and env denials united,
    /// git directories protected if either protects them, the run's own
    /// shared memory only if both allow it,
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
        if let Some(socket) = self
            .allow_unix_sockets
            .iter()
            .find(|p| !operator.allow_unix_sockets.contains(p))
        {
            return Err(PolicyError::UnixSocketOutsideOperator {
                path: socket.clone(),
            });
        }
        let network = self.network && operator.network;
        let allow_net = if !network {
            Vec::new()
        } else if operator.allow_net.is_empty() && operator.requests.is_empty() {
            self.allow_net.clone()
        } else if self.allow_net.is_empty() {
            operator.allow_net.clone()
        } else {
            if let Some(rule) = self
                .allow_net
                .iter()
                .find(|r| !operator.allow_net.iter().any(|o| r.within(o)))
            {
                return Err(PolicyError::EgressOutsideOperator {
                    rule: rule.to_string(),
                });
            }
            self.allow_net.clone()
        };
        let requests = if !network {
            Vec::new()
        } else if !operator.requests.is_empty() {
            if self.requests.is_empty() {
                operator.requests.clone()
            } else {
                if let Some(rule) = self
                    .requests
                    .iter()
                    .find(|r| !operator.requests.contains(r))
                {
                    return Err(PolicyError::RequestOutsideOperator {
                        rule: rule.to_string(),
                    });
                }
                self.requests.clone()
            }
        } else {
            // The operator lists no request rules: its allow_net (when it
            // lists one) bounds the hosts a request rule may name.
            if !operator.allow_net.is_empty() {
                if let Some(rule) = self.requests.iter().find(|r| {
                    let dest = format!("{}:{}", r.host(), r.port()).parse::<EgressRule>();
                    !dest.is_ok_and(|d| operator.allow_net.iter().any(|o| d.within(o)))
                }) {
                    return Err(PolicyError::RequestOutsideOperator {
                        rule: rule.to_string(),
                    });
                }
            }
            self.requests.clone()
        };
        // One party's exact rule for a host:port the other's request rules
        // intercept (the operator allows pkgs.example.com:443, the run
        // narrows it to some requests): interception wins, the exact rule
        // goes (a policy of one party's own that lists both is refused by
        // `resolve`). What is left resolves again as it is.
        let mut allow_net = allow_net;
        let dropped: Vec<EgressRule> = exact_intercepted(&allow_net, &requests)
            .map(|(net, _)| net.clone())
            .collect();
        allow_net.retain(|r| !dropped.contains(r));
        Ok(ResolvedPolicy {
            network,
            allow_net,
            requests,
            write_paths: self.write_paths.clone(),
            read_deny: self.read_deny.union(&operator.read_deny),
            write_deny: self.write_deny.union(&operator.write_deny),
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
            allow_unix_sockets: self.allow_unix_sockets.clone(),
            protect_git_dirs: self.protect_git_dirs || operator.protect_git_dirs,
            private_shm: self.private_shm && operator.private_shm,
        })
    }
}

impl ResolvedPolicy {
    /// This (an inner run's) policy intersected with the policy of the run
    /// it is nested in (`outer`), for a nested `sandbox run`: it can only
    /// narrow.
    ///
    /// As [`ResolvedPolicy::bounded_by`] with `outer` as the bound (network
    /// only if both allow it, destinations within the outer's, deny lists
    /// and env denials united, subprocesses denied if either denies), except
    /// that the timeout is clipped rather than refused: the smallest of this
    /// one, the outer's and `remaining` (the outer run's time left, rounded
    /// up to whole seconds). A write path outside every outer write path is
    /// refused ([`PolicyError::WriteOutsideOuterRun`]), never dropped, and
    /// so is one inside a read denial of either
    /// ([`PolicyError::WriteInsideReadDeny`]), as [`SandboxPolicy::resolve`]
    /// refuses it.
    pub fn nested_within(
        &self,
        outer: &ResolvedPolicy,
        remaining: Duration,
    ) -> Result<ResolvedPolicy, PolicyError> {
        if let Some(outside) = self
            .write_paths
            .iter()
            .find(|p| !outer.write_paths.iter().any(|w| p.starts_with(w)))
        {
            return Err(PolicyError::WriteOutsideOuterRun {
                path: outside.clone(),
            });
        }
        let left = remaining
            .as_secs()
            .saturating_add(u64::from(remaining.subsec_nanos() > 0))
            .max(1);
        let mut inner = self.clone();
        inner.timeout_seconds = self
            .timeout_seconds
            .min(outer.timeout_seconds)
            .min(outer.max_timeout_seconds)
            .min(left);
        inner.max_timeout_seconds = inner.max_timeout_seconds.min(outer.max_timeout_seconds);
        let bounded = inner.bounded_by(outer)?;
        // As `resolve` refuses it: a write path inside a read denial (the
        // outer's, say) would be half granted, and the nested run's record
        // would not read back as a policy.
        for write in &bounded.write_paths {
            if let Some(deny) = bounded
                .read_deny
                .paths
                .iter()
                .find(|d| write.starts_with(d))
            {
                return Err(PolicyError::WriteInsideReadDeny {
                    write: write.clone(),
                    deny: deny.clone(),
                });
            }
        }
        Ok(bounded)
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
        assert!(p.read_deny_paths.is_empty());
        assert!(p.write_deny_paths.is_empty());
        assert!(p.env_deny_names.is_empty());
    }

    #[test]
    fn glob_characters_in_deny_paths_are_refused_unless_the_name_exists() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_str().unwrap();
        for field in ["read", "write"] {
            let policy = |value: String| {
                let mut p = SandboxPolicy::default();
                if field == "read" {
                    p.read_deny_paths = vec![value];
                } else {
                    p.write_deny_paths = vec![value];
                }
                p.resolve(&ExpandContext::default())
            };
            for glob in ["*.txt", "secret?", "[ab]"] {
                let err = policy(format!("{d}/{glob}")).unwrap_err().to_string();
                assert!(err.contains("glob") && err.contains(glob), "{err}");
            }
            // Twins: a plain path, and an existing name with a literal `*`.
            std::fs::write(dir.path().join("odd*name"), "").unwrap();
            assert!(policy(format!("{d}/plain.txt")).is_ok());
            assert!(policy(format!("{d}/odd*name")).is_ok());
        }
    }

    #[test]
    fn a_write_path_inside_a_read_denial_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let inner = dir.path().join("inner");
        std::fs::create_dir(&inner).unwrap();
        let s = |p: &Path| p.to_str().unwrap().to_owned();
        let err = SandboxPolicy {
            write_paths: vec![s(&inner)],
            read_deny_paths: vec![s(dir.path())],
            ..SandboxPolicy::default()
        }
        .resolve(&ExpandContext::default())
        .unwrap_err();
        assert!(
            matches!(err, PolicyError::WriteInsideReadDeny { .. }),
            "{err}"
        );
        // Twin: a read denial inside the write path is fine.
        SandboxPolicy {
            write_paths: vec![s(dir.path())],
            read_deny_paths: vec![s(&inner)],
            ..SandboxPolicy::default()
        }
        .resolve(&ExpandContext::default())
        .unwrap();
    }

    #[test]
    fn request_rules_make_an_allowlist_need_the_network_and_only_narrow() {
        let rule = |t: &str| -> RequestRule { t.parse().unwrap() };
        let with = |network: bool, requests: &[&str], allow_net: &[&str]| SandboxPolicy {
            network,
            requests: requests.iter().map(|r| rule(r)).collect(),
            allow_net: allow_net.iter().map(|r| r.parse().unwrap()).collect(),
            ..SandboxPolicy::default()
        };
        let get = "GET https://pkgs.example.com/simple/**";
        let post = "POST https://api.example.com/v1/*";
        let listed = with(true, &[get, get], &[])
            .resolve(&ExpandContext::default())
            .unwrap();
        assert_eq!(listed.network_mode(), NetworkMode::Allowlist);
        assert_eq!(listed.requests().len(), 1, "duplicates collapse");
        let err = with(false, &[get], &[])
            .resolve(&ExpandContext::default())
            .unwrap_err();
        assert!(
            matches!(err, PolicyError::AllowNetWithoutNetwork { .. }),
            "{err}"
        );
        let resolve = |p: SandboxPolicy| p.resolve(&ExpandContext::default()).unwrap();
        // The operator lists rules: a request takes them, or a subset.
        let operator = resolve(with(true, &[get, post], &[]));
        let open = resolve(with(true, &[], &[]));
        assert_eq!(open.bounded_by(&operator).unwrap().requests().len(), 2);
        assert_eq!(
            open.bounded_by(&operator).unwrap().network_mode(),
            NetworkMode::Allowlist
        );
        assert_eq!(listed.bounded_by(&operator).unwrap().requests().len(), 1);
        let other = resolve(with(true, &["GET https://pkgs.example.com/**"], &[]));
        assert!(matches!(
            other.bounded_by(&operator).unwrap_err(),
            PolicyError::RequestOutsideOperator { .. }
        ));
        // ... and no tunnels it does not list.
        let tunnel = resolve(with(true, &[], &["pkgs.example.com:443"]));
        assert!(tunnel.bounded_by(&operator).is_err());
        // Only allow_net: a rule's host and port must lie within it.
        let hosts = resolve(with(true, &[], &["*.example.com:443"]));
        assert_eq!(listed.bounded_by(&hosts).unwrap().requests().len(), 1);
        let narrow = resolve(with(true, &[], &["api.example.com:443"]));
        assert!(matches!(
            listed.bounded_by(&narrow).unwrap_err(),
            PolicyError::RequestOutsideOperator { .. }
        ));
        // Network off on either side: no rules.
        let off = resolve(with(false, &[], &[]));
        assert!(listed.bounded_by(&off).unwrap().requests().is_empty());
        // The config form.
        let p: SandboxPolicy = toml::from_str(
            "[[requests]]\nmethods = [\"GET\", \"HEAD\"]\nurl = \"https://pkgs.example.com/simple/**\"\n",
        )
        .unwrap();
        assert_eq!(
            p.requests,
            vec![rule("GET,HEAD https://pkgs.example.com/simple/**")]
        );
        let err = toml::from_str::<SandboxPolicy>(
            "[[requests]]\nmethods = [\"GET\"]\nurl = \"https://a.example.com/\"\nhost = \"x\"\n",
        )
        .unwrap_err();
        assert!(err.to_string().contains("host"), "{err}");
        // Serialising leaves the field out when empty.
        assert!(!serde_json::to_string(&SandboxPolicy::default())
            .unwrap()
            .contains("requests"));
    }

    #[test]
    fn an_exact_allow_net_rule_for_an_intercepted_host_port_is_refused_or_loses() {
        let with = |requests: &[&str], allow_net: &[&str]| SandboxPolicy {
            network: true,
            requests: requests.iter().map(|r| r.parse().unwrap()).collect(),
            allow_net: allow_net.iter().map(|r| r.parse().unwrap()).collect(),
            ..SandboxPolicy::default()
        };
        let resolve = |p: SandboxPolicy| p.resolve(&ExpandContext::default());
        let get = "GET https://pkgs.example.com:8443/simple/**";
        // One policy listing both: ambiguous, refused naming both rules.
        for exact in ["pkgs.example.com:8443", "PKGS.example.com.:8443"] {
            let err = resolve(with(&[get], &[exact])).unwrap_err();
            assert!(
                matches!(&err, PolicyError::AllowNetIntercepted { host, port: 8443, .. } if host == "pkgs.example.com"),
                "{err}"
            );
            let text = err.to_string();
            assert!(
                text.contains("--allow-net pkgs.example.com:8443")
                    && text
                        .contains("--allow-request 'GET https://pkgs.example.com:8443/simple/**'"),
                "{text}"
            );
        }
        // Positive controls: another port, every port, a wildcard, another
        // host: no conflict (interception wins at the intercepted port).
        for fine in [
            "pkgs.example.com:443",
            "pkgs.example.com",
            "*.example.com:8443",
            "other.example.com:8443",
        ] {
            let p = resolve(with(&[get], &[fine])).unwrap();
            assert_eq!(p.allow_net().len(), 1, "{fine}");
        }
        // The operator allows the host whole; the run narrows it to requests:
        // interception wins, the operator's exact rule is left out (and the
        // result resolves again as it is).
        let operator =
            resolve(with(&[], &["pkgs.example.com:8443", "api.example.com:443"])).unwrap();
        let run = resolve(with(&[get], &[])).unwrap();
        let bounded = run.bounded_by(&operator).unwrap();
        assert_eq!(bounded.requests().len(), 1);
        assert_eq!(
            bounded.allow_net(),
            &["api.example.com:443".parse::<EgressRule>().unwrap()]
        );
        assert_eq!(bounded.network_mode(), NetworkMode::Allowlist);
        let again = resolve(bounded.to_policy()).unwrap();
        assert_eq!(again.allow_net(), bounded.allow_net());
        // The operator intercepts; the run lists the host exactly: the same.
        let operator = resolve(with(&[get], &["*.example.com:8443"])).unwrap();
        let run = resolve(with(&[], &["pkgs.example.com:8443"])).unwrap();
        let bounded = run.bounded_by(&operator).unwrap();
        assert!(bounded.allow_net().is_empty());
        assert_eq!(bounded.requests().len(), 1);
    }

    #[test]
    fn allow_net_needs_the_network_and_only_narrows() {
        let policy = |network: bool, rules: &[&str]| SandboxPolicy {
            network,
            allow_net: rules.iter().map(|r| r.parse().unwrap()).collect(),
            ..SandboxPolicy::default()
        };
        let resolve = |p: SandboxPolicy| p.resolve(&ExpandContext::default());
        let err = resolve(policy(false, &["example.com"])).unwrap_err();
        assert!(
            matches!(err, PolicyError::AllowNetWithoutNetwork { .. }),
            "{err}"
        );
        let listed = resolve(policy(true, &["a.example.com:443", "a.example.com:443"])).unwrap();
        assert_eq!(listed.network_mode(), NetworkMode::Allowlist);
        assert_eq!(listed.allow_net().len(), 1, "duplicates collapse");
        let open = resolve(policy(true, &[])).unwrap();
        assert_eq!(open.network_mode(), NetworkMode::On);
        let off = resolve(policy(false, &[])).unwrap();
        assert_eq!(off.network_mode(), NetworkMode::Off);
        // The operator's list bounds the request.
        let operator = resolve(policy(true, &["*.example.com"])).unwrap();
        assert_eq!(
            listed.bounded_by(&operator).unwrap().allow_net(),
            listed.allow_net()
        );
        assert_eq!(
            open.bounded_by(&operator).unwrap().allow_net(),
            operator.allow_net()
        );
        let wider = resolve(policy(true, &["example.org"])).unwrap();
        assert!(matches!(
            wider.bounded_by(&operator),
            Err(PolicyError::EgressOutsideOperator { .. })
        ));
        // An operator without network turns a list off; one without a list keeps it.
        assert_eq!(
            listed.bounded_by(&off).unwrap().network_mode(),
            NetworkMode::Off
        );
        assert_eq!(
            listed.bounded_by(&open).unwrap().allow_net(),
            listed.allow_net()
        );
        // The runner's proxy rule is added to a list only.
        let proxy: EgressRule = "127.0.0.1:40000".parse().unwrap();
        assert_eq!(listed.with_allowed(proxy.clone()).allow_net().len(), 2);
        assert!(open.with_allowed(proxy).allow_net().is_empty());
        // TOML form.
        let p: SandboxPolicy =
            toml::from_str("allow_net = [\"example.com:443\", \"10.0.0.0/8\"]").unwrap();
        assert_eq!(p.allow_net.len(), 2);
        assert!(toml::from_str::<SandboxPolicy>("allow_net = [\"exa mple.com\"]").is_err());
    }

    #[test]
    fn allowed_unix_sockets_resolve_and_only_narrow() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("agent.sock");
        let s = |p: &Path| p.to_str().unwrap().to_owned();
        let policy = |allow: Vec<String>| SandboxPolicy {
            allow_unix_sockets: allow,
            ..SandboxPolicy::default()
        };
        // Not there yet: its directory resolves, so it is accepted.
        let r = policy(vec![s(&sock)])
            .resolve(&ExpandContext::default())
            .unwrap();
        let canon = std::fs::canonicalize(dir.path())
            .unwrap()
            .join("agent.sock");
        assert_eq!(r.allow_unix_sockets(), std::slice::from_ref(&canon));
        assert!(policy(vec!["/nonexistent/dir/x.sock".into()])
            .resolve(&ExpandContext::default())
            .is_err());
        // Beyond the operator's list: refused, never dropped.
        let operator = policy(vec![]).resolve(&ExpandContext::default()).unwrap();
        assert!(matches!(
            r.bounded_by(&operator),
            Err(PolicyError::UnixSocketOutsideOperator { .. })
        ));
        assert_eq!(r.bounded_by(&r).unwrap().allow_unix_sockets(), &[canon]);
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
        // The intermediate symlink `link` is denied in its own place too.
        let link = std::fs::canonicalize(dir.path()).unwrap().join("link");
        let mut deny = vec![canon.join(".git/hooks"), link];
        deny.sort();
        assert_eq!(r.write_deny_paths(), deny);
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

    /// Resolves `deny` (as write-deny paths) and checks a second resolution of
    /// the result gives the same set.
    fn deny_set(deny: &[PathBuf]) -> Vec<PathBuf> {
        let policy = SandboxPolicy {
            write_deny_paths: deny.iter().map(|p| p.to_string_lossy().into()).collect(),
            read_deny_paths: deny.iter().map(|p| p.to_string_lossy().into()).collect(),
            ..Default::default()
        };
        let r = policy.resolve(&ExpandContext::default()).unwrap();
        assert_eq!(r.read_deny_paths(), r.write_deny_paths());
        let again = r.to_policy().resolve(&ExpandContext::default()).unwrap();
        assert_eq!(again, r, "resolving a resolved policy is idempotent");
        let json = serde_json::to_string(&r).unwrap();
        assert_eq!(serde_json::from_str::<ResolvedPolicy>(&json).unwrap(), r);
        r.write_deny_paths().to_vec()
    }

    fn sorted(mut v: Vec<PathBuf>) -> Vec<PathBuf> {
        v.sort();
        v
    }

    fn canonical_temp() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        (dir, root)
    }

    #[test]
    fn deny_final_symlink_denies_link_entry_and_target() {
        let (_d, t) = canonical_temp();
        let (w, w2) = (t.join("w"), t.join("w2"));
        std::fs::create_dir_all(&w).unwrap();
        std::fs::create_dir_all(&w2).unwrap();
        std::os::unix::fs::symlink(&w2, w.join(".git")).unwrap();
        assert_eq!(
            deny_set(&[w.join(".git")]),
            sorted(vec![w.join(".git"), w2.clone()])
        );
        // A relative link and a chain of links: every link met is denied.
        std::os::unix::fs::symlink("w/.git", t.join("w2-alias")).unwrap();
        std::os::unix::fs::symlink("w2-alias", t.join("chain")).unwrap();
        assert_eq!(
            deny_set(&[t.join("chain")]),
            sorted(vec![
                t.join("chain"),
                t.join("w2-alias"),
                w.join(".git"),
                w2.clone()
            ])
        );
        // A dangling link: the link entry and its (not-yet-existing) target.
        std::os::unix::fs::symlink(t.join("later/x"), w.join("dangling")).unwrap();
        assert_eq!(
            deny_set(&[w.join("dangling")]),
            sorted(vec![w.join("dangling"), t.join("later/x")])
        );
    }

    #[test]
    fn deny_through_intermediate_symlink_denies_each_link() {
        let (_d, t) = canonical_temp();
        let real = t.join("real");
        std::fs::create_dir_all(real.join("inner/.git")).unwrap();
        std::os::unix::fs::symlink(&real, t.join("link")).unwrap();
        // A second, relative link inside the target of the first.
        std::os::unix::fs::symlink("inner", real.join("in-link")).unwrap();
        assert_eq!(
            deny_set(&[t.join("link/in-link/.git")]),
            sorted(vec![
                t.join("link"),
                real.join("in-link"),
                real.join("inner/.git")
            ])
        );
        // `..` after a link is taken from the link's target, as the kernel does.
        assert_eq!(
            deny_set(&[t.join("link/in-link/../inner")]),
            sorted(vec![
                t.join("link"),
                real.join("in-link"),
                real.join("inner")
            ])
        );
        // A plain path through no link is just itself.
        assert_eq!(deny_set(&[real.join("inner")]), vec![real.join("inner")]);
    }

    #[test]
    fn deny_with_a_not_yet_existing_tail_through_a_link() {
        let (_d, t) = canonical_temp();
        let real = t.join("real");
        std::fs::create_dir_all(&real).unwrap();
        std::os::unix::fs::symlink(&real, t.join("link")).unwrap();
        assert_eq!(
            deny_set(&[t.join("link/.git/hooks")]),
            sorted(vec![t.join("link"), real.join(".git/hooks")])
        );
        assert_eq!(
            deny_set(&[t.join("missing/deeper")]),
            vec![t.join("missing/deeper")]
        );
        // `..` in a not-yet-existing part, or after a file, is refused.
        std::fs::write(real.join("file"), "").unwrap();
        for bad in [t.join("missing/../x"), real.join("file/../x")] {
            let policy = SandboxPolicy {
                write_deny_paths: vec![bad.to_string_lossy().into()],
                ..Default::default()
            };
            let err = policy.resolve(&ExpandContext::default()).unwrap_err();
            assert!(matches!(err, PolicyError::BadPath { .. }), "{err}");
        }
    }

    #[test]
    fn deny_symlink_loop_is_refused() {
        let (_d, t) = canonical_temp();
        std::os::unix::fs::symlink("b", t.join("a")).unwrap();
        std::os::unix::fs::symlink("a", t.join("b")).unwrap();
        let policy = SandboxPolicy {
            read_deny_paths: vec![t.join("a/x").to_string_lossy().into()],
            ..Default::default()
        };
        let err = policy
            .resolve(&ExpandContext::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("symlinks"), "{err}");
    }

    #[test]
    fn resolving_twice_is_idempotent_with_links() {
        let (_d, t) = canonical_temp();
        let (w, w2) = (t.join("w"), t.join("w2"));
        std::fs::create_dir_all(w.join("sub")).unwrap();
        std::fs::create_dir_all(&w2).unwrap();
        std::os::unix::fs::symlink(&w2, w.join(".git")).unwrap();
        std::os::unix::fs::symlink(&w, t.join("wl")).unwrap();
        let policy = SandboxPolicy {
            write_paths: vec![w.to_string_lossy().into()],
            write_deny_paths: vec![
                t.join("wl/.git/hooks").to_string_lossy().into(),
                t.join("wl/.git").to_string_lossy().into(),
            ],
            read_deny_paths: vec![t.join("wl/sub/../.git").to_string_lossy().into()],
            ..Default::default()
        };
        let r = policy.resolve(&ExpandContext::default()).unwrap();
        assert_eq!(
            r.write_deny_paths(),
            sorted(vec![
                t.join("wl"),
                w.join(".git"),
                w2.clone(),
                w2.join("hooks")
            ])
        );
        assert_eq!(
            r.read_deny_paths(),
            sorted(vec![t.join("wl"), w.join(".git"), w2.clone()])
        );
        let once = r.to_policy().resolve(&ExpandContext::default()).unwrap();
        assert_eq!(once, r);
        assert_eq!(
            once.to_policy().resolve(&ExpandContext::default()).unwrap(),
            r
        );
        // Writes beneath the target and to the link entry are not allowed;
        // the rest of the write path is.
        assert!(!r.may_write(&w.join(".git")));
        assert!(!r.may_write(&w2.join("x")));
        assert!(r.may_write(&w.join("sub/x")));
        assert!(!r.may_write(&t.join("wl")));
    }

    #[test]
    fn an_intermediate_link_is_written_back_through_itself() {
        let (_d, t) = canonical_temp();
        let real = t.join("real");
        std::fs::create_dir_all(real.join("src")).unwrap();
        std::os::unix::fs::symlink(&real, t.join("link")).unwrap();
        let s = |p: PathBuf| p.to_string_lossy().into_owned();
        let requested = SandboxPolicy {
            write_paths: vec![s(t.join("link"))],
            write_deny_paths: vec![s(t.join("link/.git/hooks"))],
            ..Default::default()
        };
        let r = requested.resolve(&ExpandContext::default()).unwrap();
        assert_eq!(
            r.write_deny_paths(),
            sorted(vec![t.join("link"), real.join(".git/hooks")])
        );
        // Written bare, `link` would resolve to all of `real` (the write path).
        let back = r.to_policy().write_deny_paths;
        assert_eq!(
            back,
            [s(t.join("link/.git/hooks")), s(real.join(".git/hooks"))]
        );
        assert!(r.may_write(&real.join("src/x")));
        let again = r.to_policy().resolve(&ExpandContext::default()).unwrap();
        assert_eq!(again, r);
        assert!(again.may_write(&real.join("src/x")));

        // Bounded by an operator denying the link itself (a final link): the
        // union is what resolving both lists together gives, and stays so.
        let operator = SandboxPolicy {
            write_paths: vec![s(t.clone())],
            write_deny_paths: vec![s(t.join("link"))],
            ..Default::default()
        }
        .resolve(&ExpandContext::default())
        .unwrap();
        let bounded = r.bounded_by(&operator).unwrap();
        let together = SandboxPolicy {
            write_deny_paths: vec![s(t.join("link/.git/hooks")), s(t.join("link"))],
            ..requested.clone()
        }
        .resolve(&ExpandContext::default())
        .unwrap();
        assert_eq!(bounded, together);
        assert_eq!(
            bounded.write_deny_paths(),
            sorted(vec![t.join("link"), real.clone(), real.join(".git/hooks")])
        );
        assert_eq!(
            bounded
                .to_policy()
                .resolve(&ExpandContext::default())
                .unwrap(),
            bounded
        );
        // Bounded by an operator denying the same path: unchanged.
        let same = r
            .bounded_by(
                &SandboxPolicy {
                    write_paths: vec![s(t.clone())],
                    ..requested
                }
                .resolve(&ExpandContext::default())
                .unwrap(),
            )
            .unwrap();
        assert_eq!(same, r);
    }

    /// An operator field left out bounds nothing; set, it bounds, even
    /// empty (#41). The runner's own directories pass a set write bound.
    #[test]
    fn an_operator_bound_left_out_bounds_nothing() {
        let (_d, root) = canonical_temp();
        let (w, own, bound) = (root.join("w"), root.join("own"), root.join("bound"));
        for d in [&w, &own, &bound] {
            std::fs::create_dir(d).unwrap();
        }
        let request = SandboxPolicy {
            write_paths: vec![w.to_string_lossy().into_owned()],
            timeout_seconds: 1800,
            max_timeout_seconds: 3600,
            ..SandboxPolicy::default()
        }
        .resolve(&ExpandContext::default())
        .unwrap();
        let parse = |text: &str| -> OperatorPolicy { toml::from_str(text).unwrap() };
        let ctx = ExpandContext::default();
        let only_ceiling = parse("max_timeout_seconds = 3600");
        assert_eq!(only_ceiling.write_paths, None);
        let bounded = only_ceiling.bound(&request, &[], &ctx).unwrap();
        assert_eq!(bounded.write_paths(), std::slice::from_ref(&w));
        assert_eq!(bounded.max_timeout_seconds(), 3600);
        // Twin: the default ceiling still bounds the timeout.
        assert!(matches!(
            parse("network = true").bound(&request, &[], &ctx),
            Err(PolicyError::TimeoutAboveCeiling { ceiling: 600, .. })
        ));
        // Twin: an empty write bound, set, refuses every write path.
        let closed = parse("write_paths = []\nmax_timeout_seconds = 3600");
        assert_eq!(closed.write_paths, Some(Vec::new()));
        assert!(matches!(
            closed.bound(&request, &[], &ctx),
            Err(PolicyError::WriteOutsideOperator { path }) if path == w
        ));
        // A set bound: the runner's own directories pass, others do not.
        let set = parse(&format!(
            "write_paths = [{:?}]\nmax_timeout_seconds = 3600",
            bound.to_str().unwrap()
        ));
        let with_own = SandboxPolicy {
            write_paths: vec![own.to_string_lossy().into_owned()],
            ..request.to_policy()
        }
        .resolve(&ctx)
        .unwrap();
        assert_eq!(
            set.bound(&with_own, std::slice::from_ref(&own), &ctx)
                .unwrap()
                .write_paths(),
            std::slice::from_ref(&own)
        );
        assert!(matches!(
            set.bound(&with_own, &[], &ctx),
            Err(PolicyError::WriteOutsideOperator { path }) if path == own
        ));
        assert!(matches!(
            set.bound(&request, std::slice::from_ref(&own), &ctx),
            Err(PolicyError::WriteOutsideOperator { path }) if path == w
        ));
        // Unknown fields are still refused.
        assert!(toml::from_str::<OperatorPolicy>("write_path = []").is_err());
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

#[cfg(test)]
#[path = "policy_nest_tests.rs"]
mod nest_tests;
