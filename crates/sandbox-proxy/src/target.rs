//! Requested destinations: parsing `host:port`, admission by the rules,
//! resolution and connecting.

use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream, ToSocketAddrs};

use sandbox_core::net::{is_special, HostAddrs};

use crate::state::Shared;
use crate::{RefusalReason, Refused};

/// A requested host: an IP literal or a name (not yet validated).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Host {
    Ip(IpAddr),
    Name(String),
}

/// A requested destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    pub(crate) host: Host,
    pub(crate) port: u16,
}

impl Host {
    /// `text` as an IP literal when it is one, else as a name.
    pub(crate) fn from_text(text: &str) -> Host {
        match text.parse::<IpAddr>() {
            Ok(ip) => Host::Ip(ip),
            Err(_) => Host::Name(text.to_string()),
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            Host::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]:{}", self.port),
            Host::Ip(ip) => write!(f, "{ip}:{}", self.port),
            Host::Name(name) => write!(f, "{name}:{}", self.port),
        }
    }
}

impl Target {
    /// An authority `host:port`, `[v6]:port`, or without the port when
    /// `default_port` is given. `None` for anything else (an empty host, an
    /// unbracketed IPv6 address, a bad port, a bracketed non-address).
    pub(crate) fn parse_authority(text: &str, default_port: Option<u16>) -> Option<Target> {
        let (host, port) = if let Some(rest) = text.strip_prefix('[') {
            let (inner, after) = rest.split_once(']')?;
            let ip: std::net::Ipv6Addr = inner.parse().ok()?;
            let port = match after {
                "" => default_port?,
                p => parse_port(p.strip_prefix(':')?)?,
            };
            (Host::Ip(IpAddr::V6(ip)), port)
        } else {
            let (host, port) = match text.rsplit_once(':') {
                Some((host, port)) => (host, parse_port(port)?),
                None => (text, default_port?),
            };
            if host.is_empty() || host.contains(':') {
                return None;
            }
            (Host::from_text(host), port)
        };
        Some(Target { host, port })
    }

    fn refused(&self, reason: RefusalReason) -> Failure {
        let host = match &self.host {
            Host::Ip(ip) => ip.to_string(),
            Host::Name(name) => name.clone(),
        };
        Failure::Refused(Box::new(Refused {
            host,
            port: self.port,
            reason,
        }))
    }
}

/// A decimal port, 1 to 65535.
fn parse_port(text: &str) -> Option<u16> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok().filter(|&p| p != 0)
}

/// Why no connection to a target was made.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The rules refuse it.
    Refused(Box<Refused>),
    /// A listed name could not be resolved.
    Unresolvable(io::Error),
    /// No admitted address could be connected to (the last error).
    Unreachable(io::Error),
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Refused(r) => write!(f, "refused {r}"),
            Failure::Unresolvable(e) => write!(f, "cannot resolve the name: {e}"),
            Failure::Unreachable(e) => write!(f, "cannot connect: {e}"),
        }
    }
}

/// Whether `addr` is the proxy's own listening socket (on any loopback or
/// the unspecified address, IPv4-mapped included).
fn is_proxy(shared: &Shared, addr: SocketAddr) -> bool {
    let ip = match addr.ip() {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    addr.port() == shared.addr.port() && (ip.is_loopback() || ip.is_unspecified())
}

fn resolve(shared: &Shared, name: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
    match &shared.opts.resolver {
        Some(resolver) => resolver(name, port),
        None => Ok((name, port).to_socket_addrs()?.collect()),
    }
}

/// The addresses `target` may be connected to, in the resolver's order.
/// Whether `name` (not an IP literal) is a host name: dot-separated
/// labels of 1 to 63 letters, digits, `-` and `_` (which real names
/// hold), 253 bytes in all, one final dot allowed.
pub(crate) fn is_host_name(name: &str) -> bool {
    let name = name.strip_suffix('.').unwrap_or(name);
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// Whether a request rule names the host `name` at `port`.
fn intercepted_at(shared: &Shared, name: &str, port: u16) -> bool {
    #[cfg(target_os = "linux")]
    {
        shared
            .opts
            .interception
            .as_ref()
            .is_some_and(|i| i.inner.intercepts(name, port))
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (shared, name, port);
        false
    }
}

/// Whether a request rule names the host `name`, at whatever port.
fn intercepted_host(shared: &Shared, name: &str) -> bool {
    #[cfg(target_os = "linux")]
    {
        shared
            .opts
            .interception
            .as_ref()
            .is_some_and(|i| i.inner.names(name))
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (shared, name);
        false
    }
}

fn admitted(shared: &Shared, target: &Target) -> Result<Vec<SocketAddr>, Failure> {
    let rules = &shared.rules;
    let candidates = match &target.host {
        Host::Ip(ip) => {
            let addr = SocketAddr::new(*ip, target.port);
            if !rules.admits_addr(addr) {
                return Err(target.refused(RefusalReason::AddressNotAllowed));
            }
            vec![addr]
        }
        Host::Name(name) => {
            // Refused before any rule, question or lookup: such text is no
            // name a rule could list, and a proposal built from it would be
            // the command's text.
            if !is_host_name(name) {
                return Err(target.refused(RefusalReason::NotAHostName));
            }
            // A host a request rule names is reached at its intercepted
            // ports only through the interception (a tunnel there is
            // served before this: what gets here is a plain `http://`
            // request, which no rule can admit), and at another port only
            // where an exact `--allow-net HOST:PORT` lists it: a wildcard
            // or every-port rule does not reach it.
            if intercepted_at(shared, name, target.port) {
                return Err(target.refused(RefusalReason::InterceptedPlain));
            }
            if rules.name_match(name, target.port).is_none() {
                return Err(target.refused(RefusalReason::NameNotListed));
            }
            if intercepted_host(shared, name) && !rules.lists_exactly(name, target.port) {
                return Err(target.refused(RefusalReason::InterceptedElsewhere));
            }
            let resolved = resolve(shared, name, target.port).map_err(Failure::Unresolvable)?;
            if resolved.is_empty() {
                return Err(Failure::Unresolvable(io::Error::new(
                    io::ErrorKind::NotFound,
                    "no address",
                )));
            }
            let admitted: Vec<SocketAddr> = resolved
                .iter()
                .map(|&a| {
                    let mut a = a;
                    a.set_port(target.port);
                    a
                })
                .filter(|&a| rules.admits_resolved(name, a, &shared.own))
                .collect();
            if admitted.is_empty() {
                // Only a wildcard can leave nothing: an exact rule admits all.
                let resolved: Vec<IpAddr> = resolved.iter().map(|a| a.ip()).collect();
                let own: Vec<IpAddr> = resolved
                    .iter()
                    .copied()
                    .filter(|&ip| shared.own.contains(ip) && !is_special(ip))
                    .collect();
                let reason = if own.is_empty() {
                    RefusalReason::WildcardToSpecial { resolved }
                } else {
                    RefusalReason::WildcardToHost { resolved, own }
                };
                return Err(target.refused(reason));
            }
            admitted
        }
    };
    let candidates: Vec<SocketAddr> = candidates
        .into_iter()
        .filter(|&a| !is_proxy(shared, a))
        .collect();
    if candidates.is_empty() {
        return Err(target.refused(RefusalReason::ProxyItself));
    }
    Ok(candidates)
}

/// This host's own addresses: every IPv4 and IPv6 address configured on one
/// of its interfaces (`getifaddrs(3)`), up or down.
pub(crate) fn host_addrs() -> io::Result<HostAddrs> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: on success `head` is a list that we free below, once.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut addrs = Vec::new();
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs made, not yet freed.
        let ifa = unsafe { &*cur };
        let sa = ifa.ifa_addr;
        if !sa.is_null() {
            // SAFETY: a non-null `ifa_addr` points to a socket address whose
            // family field tells its type; AF_INET and AF_INET6 ones are
            // `sockaddr_in` and `sockaddr_in6` (getifaddrs(3)).
            // SAFETY: as above: a non-null address getifaddrs made.
            match i32::from(unsafe { (*sa).sa_family }) {
                libc::AF_INET => {
                    // SAFETY: the family says it is a sockaddr_in.
                    let sin = unsafe { &*sa.cast::<libc::sockaddr_in>() };
                    let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
                    addrs.push(IpAddr::V4(ip));
                }
                libc::AF_INET6 => {
                    // SAFETY: the family says it is a sockaddr_in6.
                    let sin6 = unsafe { &*sa.cast::<libc::sockaddr_in6>() };
                    addrs.push(IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)));
                }
                _ => {}
            }
        }
        cur = ifa.ifa_next;
    }
    // SAFETY: `head` came from a successful getifaddrs and is freed once;
    // nothing borrowed from it is kept.
    unsafe { libc::freeifaddrs(head) };
    Ok(HostAddrs::new(addrs))
}

/// Resolves an intercepted host (one a request rule names exactly, as an
/// exact name rule: every address it resolves to is admitted, the proxy's
/// own excepted) and connects to the first address that answers.
#[cfg(target_os = "linux")]
pub(crate) fn open_intercepted(
    shared: &Shared,
    name: &str,
    port: u16,
) -> Result<TcpStream, Failure> {
    let resolved = resolve(shared, name, port).map_err(Failure::Unresolvable)?;
    let addrs = resolved.into_iter().map(|mut addr| {
        addr.set_port(port);
        addr
    });
    connect_first(shared, addrs.filter(|addr| !is_proxy(shared, *addr)))
}

/// Checks `target`, resolves it, and connects to the first admitted address
/// that answers. A refusal is logged.
///
/// With a [`crate::Decider`], a destination no rule lists (a name, an IP
/// literal) is held while it is asked about ([`crate::Pending::Connect`]):
/// a name by name alone, looked up only once admitted (and, when one of
/// its addresses is local, asked about again with them); an IP literal
/// with itself. An admitted connection reaches the addresses resolved
/// after the admission (or asked about) only, the proxy's own never.
pub(crate) fn open(shared: &Shared, target: &Target) -> Result<TcpStream, Failure> {
    let addrs = match admitted(shared, target) {
        Ok(addrs) => addrs,
        Err(Failure::Refused(mut refused)) => {
            // An address an intercepted host was found at: no approval of
            // it is asked for (it would reach that host unchecked).
            if let (RefusalReason::AddressNotAllowed, Host::Ip(ip), Some(pins)) =
                (&refused.reason, &target.host, &shared.opts.shadows)
            {
                if let Some(host) = pins.intercepted_at(*ip) {
                    refused.reason = RefusalReason::InterceptedAddress { host };
                }
            }
            if shared.opts.decider.is_some()
                && matches!(
                    refused.reason,
                    RefusalReason::NameNotListed
                        | RefusalReason::AddressNotAllowed
                        | RefusalReason::InterceptedElsewhere
                )
            {
                match ask(shared, target, &refused.host) {
                    Asked::Admitted(addrs) => return connect_first(shared, addrs),
                    Asked::Failed(failure) => return Err(failure),
                    Asked::Refused(Some(reason)) => refused.reason = reason,
                    Asked::Refused(None) => {}
                }
            }
            shared.refuse((*refused).clone());
            return Err(Failure::Refused(refused));
        }
        Err(other) => return Err(other),
    };
    connect_first(shared, addrs)
}

/// How asking the decider about a destination no rule lists ended.
enum Asked {
    /// Admitted: the addresses to connect to.
    Admitted(Vec<SocketAddr>),
    /// Refused (the reason replaced when `Some`).
    Refused(Option<RefusalReason>),
    /// Admitted, but the name does not resolve.
    Failed(Failure),
}

/// Whether `ip` is local: special-range or one of this host's own.
fn is_local(shared: &Shared, ip: IpAddr) -> bool {
    is_special(ip) || shared.own.contains(ip)
}

/// Asks the decider about `target` (`host` as requested). Nothing is looked
/// up before the decider admits the name, and the hold limit applies
/// first ([`Shared::hold`]): a name it refuses, or that waits beyond the
/// limit, never reaches a resolver.
fn ask(shared: &Shared, target: &Target, host: &str) -> Asked {
    let hold = |pending| match shared.hold(pending) {
        Some(Ok(settled)) if settled.decision().admits() => None,
        Some(Err(held)) => Some(Asked::Refused(Some(RefusalReason::HeldLimit { held }))),
        _ => Some(Asked::Refused(None)),
    };
    let name = match &target.host {
        Host::Ip(ip) => {
            let addr = SocketAddr::new(*ip, target.port);
            if is_proxy(shared, addr) {
                return Asked::Refused(Some(RefusalReason::ProxyItself));
            }
            let pending = crate::hold::Pending::Connect {
                host: host.to_owned(),
                port: target.port,
                addresses: Some(vec![*ip]),
                local: is_local(shared, *ip),
                resolution: false,
            };
            return hold(pending).unwrap_or(Asked::Admitted(vec![addr]));
        }
        Host::Name(name) => name,
    };
    let first = crate::hold::Pending::Connect {
        host: host.to_owned(),
        port: target.port,
        addresses: None,
        local: false,
        resolution: false,
    };
    if let Some(refused) = hold(first) {
        return refused;
    }
    // Admitted: only now is the name looked up.
    let resolved = match resolve(shared, name, target.port) {
        Ok(resolved) if !resolved.is_empty() => resolved,
        Ok(_) => {
            return Asked::Failed(Failure::Unresolvable(io::Error::new(
                io::ErrorKind::NotFound,
                "no address",
            )))
        }
        Err(e) => return Asked::Failed(Failure::Unresolvable(e)),
    };
    let mut addrs: Vec<SocketAddr> = Vec::with_capacity(resolved.len());
    for mut addr in resolved {
        addr.set_port(target.port);
        if !is_proxy(shared, addr) && !addrs.contains(&addr) {
            addrs.push(addr);
        }
    }
    if addrs.is_empty() {
        return Asked::Refused(Some(RefusalReason::ProxyItself));
    }
    if !addrs.iter().any(|a| is_local(shared, a.ip())) {
        return Asked::Admitted(addrs);
    }
    // A local address: the name's admission does not cover it.
    let second = crate::hold::Pending::Connect {
        host: host.to_owned(),
        port: target.port,
        addresses: Some(addrs.iter().map(SocketAddr::ip).collect()),
        local: true,
        resolution: true,
    };
    hold(second).unwrap_or(Asked::Admitted(addrs))
}

/// Connects to the first of `addrs` that answers.
fn connect_first(
    shared: &Shared,
    addrs: impl IntoIterator<Item = SocketAddr>,
) -> Result<TcpStream, Failure> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
    for addr in addrs {
        match TcpStream::connect_timeout(&addr, shared.opts.connect_timeout) {
            Ok(stream) => {
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Err(e) => last = e,
        }
    }
    Err(Failure::Unreachable(last))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(text: &str, default: Option<u16>) -> Option<String> {
        Target::parse_authority(text, default).map(|t| t.to_string())
    }

    #[test]
    fn authorities() {
        assert_eq!(
            t("example.com:443", None).as_deref(),
            Some("example.com:443")
        );
        assert_eq!(
            t("example.com", Some(80)).as_deref(),
            Some("example.com:80")
        );
        assert_eq!(t("127.0.0.1:8080", None).as_deref(), Some("127.0.0.1:8080"));
        assert_eq!(t("[::1]:443", None).as_deref(), Some("[::1]:443"));
        assert_eq!(t("[::1]", Some(80)).as_deref(), Some("[::1]:80"));
        assert!(matches!(
            Target::parse_authority("127.0.0.1:1", None).map(|t| t.host),
            Some(Host::Ip(_))
        ));
        for bad in [
            "example.com",
            "example.com:",
            ":443",
            "example.com:0",
            "example.com:65536",
            "example.com:+1",
            "::1:443",
            "[::1]443",
            "[example.com]:443",
            "[::1",
        ] {
            assert_eq!(t(bad, None), None, "{bad}");
        }
    }
}
