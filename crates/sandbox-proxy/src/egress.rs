//! The egress of one run under an allowlist, as one component: the proxy
//! host names are reached through, the resolver programs that resolve
//! names themselves ask (with its datagram namespace on Linux), what the
//! command's environment needs to use them, and, at the end, everything
//! they refused.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use sandbox_core::{
    DnsRoute, EgressRule, EgressRules, MediatedCall, Mediation, NameMatch, NetworkMode, Pins,
    ResolvedPolicy,
};

use crate::dns::DnsServer;
use crate::state::Budget;
use crate::{Decider, Interception, Proxy, ProxyError, ProxyOptions, Secret};
use sandbox_core::request::{SecretSource, SecretSpec};

/// The value of the secret `spec` names: the runner's environment variable
/// of its name, or its file (one trailing newline removed); never empty.
fn read_secret(spec: &SecretSpec) -> Result<Vec<u8>, EgressError> {
    use std::os::unix::ffi::OsStringExt;
    let value = match spec.source() {
        SecretSource::File(path) => {
            use std::io::Read;
            use std::os::unix::fs::MetadataExt;
            let cannot = |e: std::io::Error| {
                EgressError::Secret(format!(
                    "cannot read the secret {} from {}: {e}",
                    spec.name(),
                    path.display()
                ))
            };
            let mut file = std::fs::File::open(path).map_err(cannot)?;
            // The run is read-denied this path (Egress::start); another
            // name of the same inode (a hard link) it would still read.
            let links = file.metadata().map_err(cannot)?.nlink();
            if links > 1 {
                return Err(EgressError::Secret(format!(
                    "the secret file {} of {} has {links} names (hard links): the run is kept \
                     from reading it by its path, so it must have only that one",
                    path.display(),
                    spec.name()
                )));
            }
            let mut v = Vec::new();
            file.read_to_end(&mut v).map_err(cannot)?;
            if v.ends_with(b"\n") {
                v.pop();
                if v.ends_with(b"\r") {
                    v.pop();
                }
            }
            v
        }
        _ => std::env::var_os(spec.name())
            .map(OsStringExt::into_vec)
            .ok_or_else(|| {
                EgressError::Secret(format!(
                    "the secret {} is not set in the runner's environment",
                    spec.name()
                ))
            })?,
    };
    if value.is_empty() {
        return Err(EgressError::Secret(format!(
            "the secret {} is empty",
            spec.name()
        )));
    }
    if value.iter().any(|&b| b == b'\r' || b == b'\n' || b == 0) {
        return Err(EgressError::Secret(format!(
            "the secret {} holds a CR, LF or NUL, which no header value may",
            spec.name()
        )));
    }
    Ok(value)
}

/// Makes this process non-dumpable, so that no process without
/// `CAP_SYS_PTRACE` opens its `/proc/PID/environ` or `mem` (proc(5)).
fn no_dumps() -> Result<(), EgressError> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: prctl with PR_SET_DUMPABLE takes an integer argument and
        // touches no memory of ours.
        if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
            return Err(EgressError::Secret(format!(
                "cannot make the runner non-dumpable: {}",
                std::io::Error::last_os_error()
            )));
        }
    }
    Ok(())
}

/// The variables that make common clients trust the run's CA, each set to
/// the bundle (the system roots and the run CA), but `NODE_EXTRA_CA_CERTS`,
/// which Node adds to its own roots, set to the run CA alone.
pub const CA_BUNDLE_VARS: &[&str] = &[
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "GIT_SSL_CAINFO",
    "PIP_CERT",
    "CARGO_HTTP_CAINFO",
    "NODE_EXTRA_CA_CERTS",
];

/// How a run's egress reaches what its policy names, beyond the policy.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct EgressOptions {
    /// Verify the origins of intercepted hosts against the certificates of
    /// this PEM file instead of the system roots.
    pub upstream_ca: Option<PathBuf>,
    /// Credentials the proxy writes into the request headers of their
    /// (intercepted) hosts; the command sees placeholders.
    pub secrets: Vec<SecretSpec>,
    /// Asked, while the command waits, about each destination or request
    /// the policy refuses ([`crate::Decider`]). With the network off, the
    /// run then gets the proxy alone as its allowlist: every TCP connection
    /// it makes through the proxy is asked about.
    pub decider: Option<Arc<dyn Decider>>,
}

impl EgressOptions {
    /// [`EgressOptions::upstream_ca`].
    pub fn with_upstream_ca(mut self, file: Option<PathBuf>) -> Self {
        self.upstream_ca = file;
        self
    }

    /// [`EgressOptions::secrets`].
    pub fn with_secrets(mut self, secrets: Vec<SecretSpec>) -> Self {
        self.secrets = secrets;
        self
    }

    /// [`EgressOptions::decider`].
    pub fn with_decider(mut self, decider: Option<Arc<dyn Decider>>) -> Self {
        self.decider = decider;
        self
    }
}

/// Why a run's egress could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EgressError {
    /// The egress proxy did not start.
    #[error("cannot start the egress proxy: {0}")]
    Proxy(#[source] ProxyError),
    /// The run's resolver (or its datagram namespace) did not start.
    #[error("cannot start the run's resolver: {0}")]
    Resolver(#[source] std::io::Error),
    /// A secret could not be read, or has no intercepted host.
    #[error("{0}")]
    Secret(String),
    /// The files that let the command trust the run CA could not be written.
    #[error("cannot write the run CA's certificate files in {}: {source}", dir.display())]
    CaFiles {
        /// Where they were to be written.
        dir: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
}

/// The egress of one run under an allowlist; stopped by [`Egress::finish`]
/// or when dropped.
#[derive(Debug)]
pub struct Egress {
    proxy: Proxy,
    /// The processes its proxy and resolver serve ([`Egress::peers`]).
    peers: crate::RunPeers,
    dns: Option<(DnsServer, DnsRoute)>,
    policy: ResolvedPolicy,
    /// The secrets whose placeholders the command gets.
    secrets: Vec<Secret>,
    /// The files that make the command trust the run CA (removed on drop).
    #[cfg(target_os = "linux")]
    ca_files: Option<crate::intercept::ca::CaFiles>,
}

impl Egress {
    /// Starts the egress `policy` needs: nothing (`None`) unless its network
    /// is an allowlist, or off with a decider ([`EgressOptions::decider`]).
    /// Then host names are reached through the runner's
    /// proxy, which the command may connect to, and nothing else but the
    /// policy's IP rules; and (Linux) programs that resolve names
    /// themselves ask the runner's resolver over TCP, whose answers are
    /// pinned (the broker routes and admits by them), with the exact names
    /// `/etc/hosts` lists pinned already for the run's timeout.
    ///
    /// With request rules ([`ResolvedPolicy::requests`], Linux only; an
    /// error elsewhere) the hosts they name are intercepted
    /// ([`Interception`]): the proxy holds the run CA's key, and the
    /// command trusts its certificate through the files [`Egress::set_env`]
    /// names, in a directory of the runner's own (mode 0700, a name made by
    /// `mkdtemp(3)` in the runner's temporary directory), removed when the
    /// egress ends. Those hosts are not resolved or pinned for the command:
    /// it reaches them only through the proxy.
    ///
    /// With secrets ([`EgressOptions::secrets`]; each host a request rule
    /// must name) the runner reads each value (from its own environment or
    /// a file), the command gets a placeholder in the variable of the
    /// secret's name, and this process becomes non-dumpable
    /// (`PR_SET_DUMPABLE` 0, prctl(2)): its `/proc/PID/environ` and
    /// `/proc/PID/mem`, where the values are, are then open only to a
    /// process with `CAP_SYS_PTRACE`, which the command never holds.
    pub fn start(
        policy: &ResolvedPolicy,
        opts: &EgressOptions,
    ) -> Result<Option<Egress>, EgressError> {
        if !opts.secrets.is_empty() && policy.requests().is_empty() {
            return Err(EgressError::Secret(format!(
                "the secret {} needs a request rule for its hosts (--allow-request): only \
                 intercepted hosts get secrets",
                opts.secrets[0].name()
            )));
        }
        // With a decider, a run without network gets the proxy alone.
        let asks_for_all = opts.decider.is_some() && policy.network_mode() == NetworkMode::Off;
        if policy.network_mode() != NetworkMode::Allowlist && !asks_for_all {
            return Ok(None);
        }
        // Only the run's processes are served, once the launch says which
        // they are (Egress::peers): before that, no one.
        let peers = crate::RunPeers::new();
        let mut proxy_opts = ProxyOptions::default()
            .max_connections(MAX_CONNECTIONS_PER_EGRESS)
            .budget(process_budget())
            .peers(peers.clone());
        if let Some(decider) = &opts.decider {
            proxy_opts = proxy_opts.decider(Arc::clone(decider));
        }
        let mut ca_pem = None;
        let mut secrets = Vec::new();
        for spec in &opts.secrets {
            let value = read_secret(spec)?;
            secrets.push(Secret::new(spec, value).map_err(|e| {
                EgressError::Secret(format!(
                    "cannot make a placeholder for {}: {e}",
                    spec.name()
                ))
            })?);
        }
        if !secrets.is_empty() {
            no_dumps()?;
        }
        if !policy.requests().is_empty() {
            let interception = Interception::new(
                policy.requests().to_vec(),
                opts.upstream_ca.as_deref(),
                secrets.clone(),
            )
            .map_err(EgressError::Proxy)?;
            ca_pem = Some(interception.ca_pem());
            proxy_opts = proxy_opts.interception(interception);
        }
        #[cfg(target_os = "linux")]
        let ca_files = match ca_pem {
            Some(pem) => Some(
                crate::intercept::ca::CaFiles::write(&std::env::temp_dir(), &pem).map_err(
                    |source| EgressError::CaFiles {
                        dir: std::env::temp_dir(),
                        source,
                    },
                )?,
            ),
            None => None,
        };
        #[cfg(not(target_os = "linux"))]
        let _ = ca_pem;
        // The resolver's pins, made first: where it finds the intercepted
        // hosts, the proxy asks for no approval of an IP literal. (The
        // resolver itself starts after the proxy, as it always did.)
        let pins = if cfg!(target_os = "linux") {
            Some(dns_pins(policy, policy.timeout()).map_err(EgressError::Resolver)?)
        } else {
            None
        };
        if let Some(pins) = &pins {
            proxy_opts = proxy_opts.shadows(pins.clone());
        }
        let proxy =
            Proxy::start(policy.allow_net().to_vec(), proxy_opts).map_err(EgressError::Proxy)?;
        let dns = match pins {
            Some(pins) => Some(start_dns(pins, &peers).map_err(EgressError::Resolver)?),
            None => None,
        };
        let mut policy = if asks_for_all {
            policy.with_only_allowed(EgressRule::Ip(proxy.net_rule()))
        } else {
            policy.with_allowed(EgressRule::Ip(proxy.net_rule()))
        };
        // Reads are broad: a secret's file is read-denied to the run, or
        // the command would read the value where the runner did.
        for spec in &opts.secrets {
            if let SecretSource::File(path) = spec.source() {
                policy = policy.with_read_deny(path).map_err(|e| {
                    EgressError::Secret(format!(
                        "cannot keep the secret file {} of {} from the run: {e}",
                        path.display(),
                        spec.name()
                    ))
                })?;
            }
        }
        Ok(Some(Egress {
            proxy,
            peers,
            dns,
            policy,
            secrets,
            #[cfg(target_os = "linux")]
            ca_files,
        }))
    }

    /// Whose connections the proxy and the resolver serve: no one until
    /// the runner sets the run's identity ([`crate::RunPeers::set`]), once
    /// its containment is made and before its command starts; then only
    /// the run's processes (its cgroup's subtree, else its uid).
    pub fn peers(&self) -> &crate::RunPeers {
        &self.peers
    }

    /// The policy the run is confined by: the one it started with, the
    /// proxy's address admitted.
    pub fn policy(&self) -> &ResolvedPolicy {
        &self.policy
    }

    /// Where the broker sends the run's DNS and what its answers pin
    /// ([`sandbox_core::LaunchOptions::dns`]).
    pub fn dns_route(&self) -> Option<DnsRoute> {
        self.dns.as_ref().map(|(_, route)| route.clone())
    }

    /// Sets what the command's environment needs: the proxy's variables
    /// ([`Proxy::env`]), and `use-vc` in `RES_OPTIONS` when the run has a
    /// resolver. glibc's resolver asks over TCP then (resolv.conf(5)): the
    /// broker sends connects to port 53 to the runner's resolver, so glibc
    /// needs no datagram namespace, which then is made only for a resolver
    /// of a program's own (musl's, Go's), and where the host allows one.
    pub fn set_env(&self, env: &mut Vec<(OsString, OsString)>) {
        self.env_for_commands().apply(env);
    }

    /// What [`Egress::set_env`] sets, kept apart from the egress.
    fn env_for_commands(&self) -> EgressEnv {
        EgressEnv {
            resolver: self.dns.is_some(),
            proxy: self.proxy.env(),
            secrets: self.secrets.clone(),
            ca_files: self
                .ca_files()
                .map(|(bundle, ca)| (bundle.to_path_buf(), ca.to_path_buf())),
        }
    }

    /// A handle for a runner that starts many commands under this egress
    /// (a session's shared launch): each command's environment, and the
    /// refusals of each, live and at its end ([`EgressTap`]).
    pub fn tap(&self) -> EgressTap {
        EgressTap {
            env: Arc::new(self.env_for_commands()),
            proxy: Arc::clone(&self.proxy.shared),
            dns: self.dns.as_ref().map(|(server, _)| server.window()),
            closed: Arc::default(),
        }
    }

    /// The bundle (system roots and the run CA) and the run CA's own file,
    /// when hosts are intercepted.
    pub fn ca_files(&self) -> Option<(&Path, &Path)> {
        #[cfg(target_os = "linux")]
        {
            self.ca_files
                .as_ref()
                .map(|f| (f.bundle.as_path(), f.ca.as_path()))
        }
        #[cfg(not(target_os = "linux"))]
        {
            None
        }
    }

    /// Stops the resolver and the proxy, and hands back what they refused
    /// (`syscall` is `dns` or `proxy`), with how many refusals were not kept.
    pub fn finish(mut self) -> Mediation {
        let mut m = Mediation::default();
        if let Some((mut server, _)) = self.dns.take() {
            server.shutdown();
            m.egress_foreign_closed = m
                .egress_foreign_closed
                .saturating_add(server.foreign_closed());
            let (refused, omitted) = server.refused();
            m.omitted += omitted;
            m.refused.extend(refused.into_iter().map(dns_call));
        }
        self.proxy.shutdown();
        self.proxy.shared.ended().add_to(&mut m);
        let kept = self.proxy.refusals();
        m.omitted += usize::try_from(self.proxy.refusal_count())
            .unwrap_or(usize::MAX)
            .saturating_sub(kept.len());
        m.refused.extend(kept.into_iter().map(proxy_call));
        #[cfg(target_os = "linux")]
        drop(self.ca_files.take());
        m
    }
}

/// What a command's environment needs to use the egress
/// ([`Egress::set_env`]).
#[derive(Clone)]
struct EgressEnv {
    /// Whether the run has a resolver (`RES_OPTIONS` gets `use-vc`).
    resolver: bool,
    /// The proxy's variables ([`Proxy::env`]).
    proxy: Vec<(String, String)>,
    /// The secrets whose placeholders the command gets.
    secrets: Vec<Secret>,
    /// The bundle and the run CA's own file, when hosts are intercepted.
    ca_files: Option<(PathBuf, PathBuf)>,
}

impl EgressEnv {
    fn apply(&self, env: &mut Vec<(OsString, OsString)>) {
        if self.resolver {
            let opts = match env.iter().find(|(k, _)| k == "RES_OPTIONS") {
                Some((_, v)) => format!("{} use-vc", v.to_string_lossy()),
                None => "use-vc".to_owned(),
            };
            env.retain(|(k, _)| k != "RES_OPTIONS");
            env.push(("RES_OPTIONS".into(), opts.into()));
        }
        for (name, value) in &self.proxy {
            env.retain(|(n, _)| *n != **name);
            env.push((name.into(), value.into()));
        }
        // The command gets each secret's placeholder, and no variable keeps
        // a secret's value.
        for secret in &self.secrets {
            for (_, value) in env.iter_mut() {
                let bytes = value.as_encoded_bytes();
                if bytes
                    .windows(secret.value().len())
                    .any(|w| w == secret.value())
                {
                    let replaced = crate::replace_bytes(
                        bytes,
                        secret.value(),
                        secret.placeholder().as_bytes(),
                    );
                    // SAFETY: replacing whole byte strings (a value, a
                    // placeholder of ASCII) keeps the encoding valid.
                    *value = unsafe { OsString::from_encoded_bytes_unchecked(replaced) };
                }
            }
            env.retain(|(n, _)| n != secret.name());
            env.push((secret.name().into(), secret.placeholder().into()));
        }
        if let Some((bundle, ca)) = &self.ca_files {
            for name in CA_BUNDLE_VARS {
                let file = if *name == "NODE_EXTRA_CA_CERTS" {
                    ca
                } else {
                    bundle
                };
                env.retain(|(n, _)| n != name);
                env.push(((*name).into(), file.as_os_str().to_owned()));
            }
        }
    }
}

/// A run's egress as a runner starting many commands under it sees it
/// ([`Egress::tap`]; a session's shared launch): the environment each
/// command gets, and the refusals of the current command, one *window*
/// per command. Cloned freely; it does not keep the egress running.
///
/// A window holds the proxy's refusals for the connections accepted while
/// it was open, and the resolver's for the connections and datagrams it
/// received while it was open (each name once). [`EgressTap::take`] first
/// denies the questions still held for a decider (their command has ended:
/// their refusals are its window's), then waits, a bounded time, until the
/// proxy has no connection open: the command's processes are gone then, so
/// their connections end at once. Those still open after that bound (a
/// tunnel to an upstream that neither answers nor closes) are ended then:
/// their sockets shut down both ways, their slots free for the next
/// command (their threads are waited for at most half a second). A
/// refusal a connection of a closed window makes later (after that bound)
/// is in the run's record
/// ([`Egress::finish`]) only: never in a later command's window. (A kept
/// command has a run, and so an egress, of its own: its connections end
/// with that run.)
#[derive(Clone)]
pub struct EgressTap {
    env: Arc<EgressEnv>,
    proxy: Arc<crate::state::Shared>,
    dns: Option<crate::dns::RefusalWindow>,
    /// The refusals of the window [`EgressTap::take`] closed that
    /// [`EgressTap::live`] had not handed out yet: the next call hands
    /// them out, unless [`EgressTap::forget_closed`] came first.
    closed: Arc<std::sync::Mutex<Vec<MediatedCall>>>,
}

impl std::fmt::Debug for EgressTap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EgressTap").finish_non_exhaustive()
    }
}

impl EgressTap {
    /// Sets what a command's environment needs, as [`Egress::set_env`]
    /// does (the same variables and values: a secret's placeholder is the
    /// egress's, the same for every command).
    pub fn set_env(&self, env: &mut Vec<(OsString, OsString)>) {
        self.env.apply(env);
    }

    /// Closes the current command's window once the proxy has no open
    /// connection (or `wait` has passed) and opens the next: what the
    /// proxy and the resolver refused in it, as [`Egress::finish`] says
    /// them.
    pub fn take(&self, wait: Duration) -> Mediation {
        // The command has ended: what it still waits to be asked about is
        // denied now ("command ended"), so the refusal is its window's and
        // its exit waits for no decider.
        self.proxy.deny_held();
        let deadline = std::time::Instant::now() + wait;
        self.proxy.wait_idle(wait);
        // What is still open is ended: nothing of the command is left to
        // use it, and it would hold a slot and the runner's descriptors.
        self.proxy.end_window();
        self.proxy.wait_idle(ENDED_WAIT);
        if let Some(dns) = &self.dns {
            // The datagrams the command left queued are its window's too.
            dns.settle(deadline.saturating_duration_since(std::time::Instant::now()));
        }
        // What the last look did not see yet is the closed window's.
        let (unseen, _) = self.live_window();
        self.closed_calls().extend(unseen);
        let mut m = Mediation::default();
        if let Some(dns) = &self.dns {
            let (refused, omitted) = dns.take_window();
            m.omitted += omitted;
            m.refused.extend(refused.into_iter().map(dns_call));
        }
        let (kept, total, ended) = self.proxy.take_window();
        ended.add_to(&mut m);
        m.omitted += usize::try_from(total)
            .unwrap_or(usize::MAX)
            .saturating_sub(kept.len());
        m.refused.extend(kept.into_iter().map(proxy_call));
        m
    }

    /// The refusals since the last call, and how many the current window
    /// had so far (those of the window [`EgressTap::take`] just closed
    /// first, which the last call had not seen: a command's last refusals
    /// come after its end); never waits for a connection.
    pub fn live(&self) -> (Vec<MediatedCall>, u64) {
        let (mut calls, mut count) = {
            let closed = std::mem::take(&mut *self.closed_calls());
            let n = closed.len() as u64;
            (closed, n)
        };
        let (more, total) = self.live_window();
        calls.extend(more);
        count += total;
        (calls, count)
    }

    /// Drops what [`EgressTap::live`] would still hand out of the closed
    /// window: call it before the next command starts, whose refusals
    /// they are not.
    pub fn forget_closed(&self) {
        self.closed_calls().clear();
    }

    fn closed_calls(&self) -> std::sync::MutexGuard<'_, Vec<MediatedCall>> {
        self.closed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The current window's refusals since the last call, and how many it
    /// had so far.
    fn live_window(&self) -> (Vec<MediatedCall>, u64) {
        let mut calls = Vec::new();
        let mut count = 0u64;
        if let Some(dns) = &self.dns {
            let (refused, total) = dns.live_window();
            count += total as u64;
            calls.extend(refused.into_iter().map(dns_call));
        }
        let (refused, total) = self.proxy.live_window();
        count += total;
        calls.extend(refused.into_iter().map(proxy_call));
        (calls, count)
    }
}

/// The descriptors one proxy connection holds in the runner, at most: a
/// tunnel's two sockets, the clones registered to end them
/// ([`crate::state::Slot::track`]) and a splice pipe (two) per direction.
const FDS_PER_CONNECTION: u64 = 8;
/// The descriptors proxies never take, left to the rest of the runner: the
/// broker (a call's notification, pidfd, the `openat2(2)` pieces of a path
/// it walks, the descriptor it installs), each egress's resolver (its
/// listener and up to 32 TCP connections of two descriptors), launches
/// (pipes, the pidfd, the cgroup) and the session's own files: 256, plus a
/// quarter of the limit for the runs a runner hosts at once (a session's
/// shared run, up to 8 kept commands', up to 8 nested runs each: about 30
/// descriptors a run measured idle, more while their brokers serve); at
/// most half the limit, so that a proxy still serves under a small one.
/// (256 alone, all the runner kept before, ran out at a 20000 limit with 18
/// runs' proxies full: red team finding A.)
const FDS_KEPT: u64 = 256;

/// Connections one egress serves at once, at most (its share of the
/// process's [`process_budget`] is smaller when others hold theirs).
const MAX_CONNECTIONS_PER_EGRESS: usize = 256;

/// The connections ALL the egresses of this process serve at once: a
/// runner hosts many (a session's shared run, each kept command's, each
/// nested run's), whose connections hold descriptors of the one process.
/// Sized once, at the first egress (after the CLI raised the soft
/// `RLIMIT_NOFILE` to the hard one): the soft limit less [`FDS_KEPT`] and a
/// quarter of it (at most half of it), [`FDS_PER_CONNECTION`] each; at
/// least 1. A connection
/// over it is closed on accept, as one over an egress's own cap.
fn process_budget() -> Arc<Budget> {
    static BUDGET: OnceLock<Arc<Budget>> = OnceLock::new();
    Arc::clone(BUDGET.get_or_init(|| Budget::new(budget_for(nofile_limit()))))
}

/// The soft `RLIMIT_NOFILE` (1024 when it cannot be read).
fn nofile_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct passed.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return 1024;
    }
    limit.rlim_cur
}

/// The connections a descriptor limit of `limit` affords the proxies.
fn budget_for(limit: u64) -> usize {
    let kept = (FDS_KEPT + limit / 4).min(limit / 2);
    let fit = limit.saturating_sub(kept) / FDS_PER_CONNECTION;
    usize::try_from(fit).unwrap_or(usize::MAX).max(1)
}

/// How long [`EgressTap::take`] waits for the threads of the connections
/// it ended (shut down) to finish and free their slots.
const ENDED_WAIT: Duration = Duration::from_millis(500);

/// A name the resolver refused, as a record lists it.
fn dns_call(r: crate::dns::RefusedName) -> MediatedCall {
    MediatedCall {
        syscall: "dns".into(),
        target: r.name,
        reason: r.reason.to_string(),
        outside_write_paths: false,
    }
}

/// A destination or request the proxy refused, as a record lists it.
fn proxy_call(r: crate::Refused) -> MediatedCall {
    MediatedCall {
        syscall: match r.reason {
            crate::RefusalReason::Request { .. } => "request".into(),
            _ => "proxy".into(),
        },
        target: r.what(),
        reason: r.reason.to_string(),
        outside_write_paths: false,
    }
}

/// Starts the run's resolver answering by `pins` ([`dns_pins`]: the exact
/// names `/etc/hosts` lists already pinned for the run's timeout, at most
/// [`sandbox_core::MAX_PIN_TTL`]): a program that finds a name there
/// sends no DNS query, and still meets a pinned address. It answers over
/// TCP, and over UDP in the run's datagram namespace where one can be made
/// (Linux; unprivileged, that takes user namespaces), when the run first
/// asks for a datagram socket.
fn start_dns(pins: Pins, peers: &crate::RunPeers) -> std::io::Result<(DnsServer, DnsRoute)> {
    let server = DnsServer::start(pins.clone(), None)?;
    server.serve_only(peers.clone());
    let datagrams = datagram_namespace(&server)?;
    let route = DnsRoute {
        resolver: server.addr(),
        pins,
        datagrams,
    };
    Ok((server, route))
}

/// The pins of the run's resolver ([`start_dns`]) for `policy`'s egress
/// rules, with the exact names `/etc/hosts` lists pinned and the
/// intercepted ones it lists noted (for `ttl`).
fn dns_pins(policy: &ResolvedPolicy, ttl: Duration) -> std::io::Result<Pins> {
    let own = crate::host_addrs()?;
    // The hosts request rules intercept are left out, whatever rule lists
    // them: reached only through the proxy, which checks each request. Where
    // `/etc/hosts` puts one, no pin admits a direct connect at its
    // intercepted ports (another name listed at the same address).
    let pins = Pins::new(EgressRules::new(policy.allow_net().to_vec()), own)
        .except_intercepted(policy.requests().iter().map(|r| (r.host(), r.port())));
    if let Ok(hosts) = std::fs::read_to_string("/etc/hosts") {
        for (ip, name) in hosts_entries(&hosts) {
            if pins.intercepted(&name) {
                pins.shadow(&name, ip, ttl);
            } else if pins.lists(&name) == Some(NameMatch::Exact) {
                pins.pin(&name, ip, ttl);
            }
        }
    }
    Ok(pins)
}

/// The run's datagram namespace, made at the first datagram socket the run
/// asks for, its resolver sockets then served by `server`.
#[cfg(target_os = "linux")]
fn datagram_namespace(
    server: &DnsServer,
) -> std::io::Result<Option<std::sync::Arc<dyn sandbox_core::DatagramSockets>>> {
    let service = server.datagram_service();
    let island = crate::island::Island::new(Box::new(move |sockets| service.serve(sockets)))?;
    Ok(Some(std::sync::Arc::new(island)))
}

#[cfg(not(target_os = "linux"))]
fn datagram_namespace(
    _: &DnsServer,
) -> std::io::Result<Option<std::sync::Arc<dyn sandbox_core::DatagramSockets>>> {
    Ok(None)
}

/// The (address, name) pairs of an `/etc/hosts` text (hosts(5)): names
/// lowercase, comments dropped.
fn hosts_entries(text: &str) -> Vec<(std::net::IpAddr, String)> {
    text.lines()
        .filter_map(|line| {
            let line = line.split('#').next()?;
            let mut fields = line.split_whitespace();
            let ip: std::net::IpAddr = fields.next()?.parse().ok()?;
            Some(
                fields
                    .map(|n| (ip, n.trim_end_matches('.').to_ascii_lowercase()))
                    .collect::<Vec<_>>(),
            )
        })
        .flatten()
        .collect()
}

#[cfg(test)]
mod tests {
    /// The process's budget: the limit less 256 and a quarter kept (half a
    /// small limit), 8 descriptors a connection, at least 1; a proxy still
    /// serves under a tiny limit.
    #[test]
    fn the_process_budget_keeps_descriptors_for_the_runner() {
        assert_eq!(super::budget_for(20_000), (20_000 - 256 - 5000) / 8);
        assert_eq!(super::budget_for(4096), (4096 - 256 - 1024) / 8);
        assert_eq!(super::budget_for(1024), 512 / 8);
        assert_eq!(super::budget_for(64), 32 / 8);
        assert_eq!(super::budget_for(8), 1);
        assert_eq!(super::budget_for(0), 1);
    }

    #[test]
    fn hosts_entries_are_read_as_hosts5_says() {
        let text = "127.0.0.1 localhost Svc.Example.com. # a comment\n\
                    # 10.0.0.1 commented.example.com\n\
                    ::1 ip6-localhost\n\
                    not-an-ip name.example.com\n";
        let got = super::hosts_entries(text);
        let names: Vec<&str> = got.iter().map(|(_, n)| n.as_str()).collect();
        assert_eq!(names, ["localhost", "svc.example.com", "ip6-localhost"]);
        assert_eq!(got[2].0, "::1".parse::<std::net::IpAddr>().unwrap());
    }
}
