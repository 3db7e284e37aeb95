//! The egress of one run under an allowlist, as one component: the proxy
//! host names are reached through, the resolver programs that resolve
//! names themselves ask (with its datagram namespace on Linux), what the
//! command's environment needs to use them, and, at the end, everything
//! they refused.

use std::ffi::OsString;
use std::time::Duration;

use sandbox_core::{
    DnsRoute, EgressRule, EgressRules, MediatedCall, Mediation, NameMatch, NetworkMode, Pins,
    ResolvedPolicy,
};

use crate::dns::DnsServer;
use crate::{Proxy, ProxyError, ProxyOptions};

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
}

/// The egress of one run under an allowlist; stopped by [`Egress::finish`]
/// or when dropped.
#[derive(Debug)]
pub struct Egress {
    proxy: Proxy,
    dns: Option<(DnsServer, DnsRoute)>,
    policy: ResolvedPolicy,
}

impl Egress {
    /// Starts the egress `policy` needs: nothing (`None`) unless its network
    /// is an allowlist. Then host names are reached through the runner's
    /// proxy, which the command may connect to, and nothing else but the
    /// policy's IP rules; and (Linux) programs that resolve names
    /// themselves ask the runner's resolver over TCP, whose answers are
    /// pinned (the broker routes and admits by them), with the exact names
    /// `/etc/hosts` lists pinned already for the run's timeout.
    pub fn start(policy: &ResolvedPolicy) -> Result<Option<Egress>, EgressError> {
        if policy.network_mode() != NetworkMode::Allowlist {
            return Ok(None);
        }
        let proxy = Proxy::start(policy.allow_net().to_vec(), ProxyOptions::default())
            .map_err(EgressError::Proxy)?;
        let dns = if cfg!(target_os = "linux") {
            Some(start_dns(policy, policy.timeout()).map_err(EgressError::Resolver)?)
        } else {
            None
        };
        let policy = policy.with_allowed(EgressRule::Ip(proxy.net_rule()));
        Ok(Some(Egress { proxy, dns, policy }))
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
        if self.dns.is_some() {
            let opts = match env.iter().find(|(k, _)| k == "RES_OPTIONS") {
                Some((_, v)) => format!("{} use-vc", v.to_string_lossy()),
                None => "use-vc".to_owned(),
            };
            env.retain(|(k, _)| k != "RES_OPTIONS");
            env.push(("RES_OPTIONS".into(), opts.into()));
        }
        for (name, value) in self.proxy.env() {
            env.retain(|(n, _)| *n != *name);
            env.push((name.into(), value.into()));
        }
    }

    /// Stops the resolver and the proxy, and hands back what they refused
    /// (`syscall` is `dns` or `proxy`), with how many refusals were not kept.
    pub fn finish(mut self) -> Mediation {
        let mut m = Mediation::default();
        if let Some((mut server, _)) = self.dns.take() {
            server.shutdown();
            let (refused, omitted) = server.refused();
            m.omitted += omitted;
            m.refused.extend(refused.into_iter().map(|r| MediatedCall {
                syscall: "dns".into(),
                target: r.name,
                reason: r.reason.to_string(),
                outside_write_paths: false,
            }));
        }
        self.proxy.shutdown();
        let kept = self.proxy.refusals();
        m.omitted += usize::try_from(self.proxy.refusal_count())
            .unwrap_or(usize::MAX)
            .saturating_sub(kept.len());
        m.refused.extend(kept.into_iter().map(|r| MediatedCall {
            syscall: "proxy".into(),
            target: r.target(),
            reason: r.reason.to_string(),
            outside_write_paths: false,
        }));
        m
    }
}

/// Starts the run's resolver for `policy`'s egress rules, with the exact
/// names `/etc/hosts` lists already pinned (for `ttl`, the run's timeout,
/// at most [`sandbox_core::MAX_PIN_TTL`]): a program that finds a name there
/// sends no DNS query, and still meets a pinned address. It answers over
/// TCP, and over UDP in the run's datagram namespace where one can be made
/// (Linux; unprivileged, that takes user namespaces), when the run first
/// asks for a datagram socket.
fn start_dns(policy: &ResolvedPolicy, ttl: Duration) -> std::io::Result<(DnsServer, DnsRoute)> {
    let own = crate::host_addrs()?;
    let pins = Pins::new(EgressRules::new(policy.allow_net().to_vec()), own);
    if let Ok(hosts) = std::fs::read_to_string("/etc/hosts") {
        for (ip, name) in hosts_entries(&hosts) {
            if pins.lists(&name) == Some(NameMatch::Exact) {
                pins.pin(&name, ip, ttl);
            }
        }
    }
    let server = DnsServer::start(pins.clone(), None)?;
    let datagrams = datagram_namespace(&server)?;
    let route = DnsRoute {
        resolver: server.addr(),
        pins,
        datagrams,
    };
    Ok((server, route))
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
