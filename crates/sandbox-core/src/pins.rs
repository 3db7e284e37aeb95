//! Addresses the runner's resolver answered for listed host names, which a
//! run may then connect to by IP, directly, for as long as the answer
//! lives: how programs that resolve names themselves (ssh, database
//! clients, JVM tools) reach the hosts an allowlist names without the
//! proxy.

use std::net::{IpAddr, SocketAddr};
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::net::{canonical_ip, is_special, EgressRule, EgressRules, HostAddrs, NameMatch};

/// The most pins a run keeps; the oldest go first.
pub const MAX_PINS: usize = 4096;

/// The longest any answer is pinned for.
pub const MAX_PIN_TTL: Duration = Duration::from_secs(300);

#[derive(Debug)]
struct Pin {
    name: String,
    ip: IpAddr,
    expires: Instant,
}

#[derive(Debug)]
struct Table {
    rules: EgressRules,
    own: HostAddrs,
    /// Names a request rule intercepts (lowercase, no trailing dot), each
    /// with the ports it is intercepted at: never listed, so never answered
    /// or pinned, whatever rule would list them.
    intercepted: Vec<(String, Vec<u16>)>,
    /// Addresses intercepted names were found at ([`Pins::shadow`]).
    shadows: Vec<Pin>,
    /// When the runner's resolver last looked the intercepted names up
    /// ([`Pins::shadows_due`]).
    looked: Option<Instant>,
    pins: Vec<Pin>,
}

/// `name` lowercase, without a trailing dot.
fn normal(name: &str) -> String {
    name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase()
}

/// The pinned answers of one run, shared by the runner's resolver (which
/// pins) and the broker (which admits connects by them).
#[derive(Debug, Clone)]
pub struct Pins(Arc<Mutex<Table>>);

impl Pins {
    /// An empty table that admits by `rules`, with `own` as this host's
    /// addresses (which wildcard rules do not reach).
    pub fn new(rules: EgressRules, own: HostAddrs) -> Self {
        Self(Arc::new(Mutex::new(Table {
            rules,
            own,
            intercepted: Vec::new(),
            shadows: Vec::new(),
            looked: None,
            pins: Vec::new(),
        })))
    }

    /// The same table with `hosts` (the names request rules intercept, each
    /// with a port it is intercepted at) left out at every port, whatever
    /// rule lists them: the run reaches those only through the runner's
    /// proxy, which checks each request, so the run's resolver never
    /// answers them and no pin admits a direct connect to them (an
    /// `--allow-net` rule, exact or wildcard, listing one does not open a
    /// way around the proxy).
    pub fn except_intercepted<S: AsRef<str>>(
        self,
        hosts: impl IntoIterator<Item = (S, u16)>,
    ) -> Self {
        {
            let mut table = self.table();
            for (name, port) in hosts {
                let name = normal(name.as_ref());
                match table.intercepted.iter_mut().find(|(n, _)| *n == name) {
                    Some((_, ports)) if !ports.contains(&port) => ports.push(port),
                    Some(_) => {}
                    None => table.intercepted.push((name, vec![port])),
                }
            }
        }
        self
    }

    /// Whether a request rule intercepts `name` ([`Pins::except_intercepted`]).
    pub fn intercepted(&self, name: &str) -> bool {
        let name = normal(name);
        self.table().intercepted.iter().any(|(n, _)| *n == name)
    }

    /// The names request rules intercept.
    pub fn intercepted_names(&self) -> Vec<String> {
        self.table()
            .intercepted
            .iter()
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// Notes that the intercepted `name` was found at `ip` (an `/etc/hosts`
    /// entry, the runner's lookup), for `ttl` (at most [`MAX_PIN_TTL`]):
    /// until then no pin admits a direct connect to `ip` at a port `name`
    /// is intercepted at, whatever other name was answered with that
    /// address (one address serving many names: a direct TLS connection
    /// may ask it for any). False when `name` is not intercepted.
    pub fn shadow(&self, name: &str, ip: IpAddr, ttl: Duration) -> bool {
        let name = normal(name);
        let now = Instant::now();
        let expires = now + ttl.min(MAX_PIN_TTL);
        let mut table = self.table();
        if !table.intercepted.iter().any(|(n, _)| *n == name) {
            return false;
        }
        table.shadows.retain(|p| p.expires > now);
        let ip = canonical_ip(ip);
        match table
            .shadows
            .iter_mut()
            .find(|p| p.ip == ip && p.name == name)
        {
            Some(p) => p.expires = p.expires.max(expires),
            None => {
                if table.shadows.len() >= MAX_PINS {
                    table.shadows.remove(0);
                }
                table.shadows.push(Pin { name, ip, expires });
            }
        }
        true
    }

    /// Whether the intercepted names are due to be looked up again (for
    /// [`Pins::shadow`]): never looked up, or last more than `every` ago.
    /// True once per period: the caller looks them up.
    pub fn shadows_due(&self, every: Duration) -> bool {
        let now = Instant::now();
        let mut table = self.table();
        if table.intercepted.is_empty()
            || table
                .looked
                .is_some_and(|at| now.saturating_duration_since(at) < every)
        {
            return false;
        }
        table.looked = Some(now);
        true
    }

    /// The intercepted name whose live shadow ([`Pins::shadow`]) holds
    /// `addr`'s address at a port that name is intercepted at, if any.
    pub fn shared_with_intercepted(&self, addr: SocketAddr) -> Option<String> {
        let now = Instant::now();
        let ip = canonical_ip(addr.ip());
        let table = self.table();
        table
            .shadows
            .iter()
            .filter(|p| p.expires > now && p.ip == ip)
            .find(|p| {
                table
                    .intercepted
                    .iter()
                    .any(|(n, ports)| *n == p.name && ports.contains(&addr.port()))
            })
            .map(|p| p.name.clone())
    }

    /// The intercepted name whose live shadow ([`Pins::shadow`]) holds
    /// `ip`, at whatever port: an IP rule for that address would reach the
    /// intercepted host around the proxy, so none is proposed for it.
    pub fn intercepted_at(&self, ip: IpAddr) -> Option<String> {
        let now = Instant::now();
        let ip = canonical_ip(ip);
        self.table()
            .shadows
            .iter()
            .find(|p| p.expires > now && p.ip == ip)
            .map(|p| p.name.clone())
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        // Nothing panics while the lock is held; a poisoned table is still valid.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How a name rule lists `name` at any port (`None`: not listed, or
    /// intercepted: [`Pins::except_intercepted`]).
    pub fn lists(&self, name: &str) -> Option<NameMatch> {
        let table = self.table();
        let normal = normal(name);
        if table.intercepted.iter().any(|(n, _)| *n == normal) {
            return None;
        }
        let mut found = None;
        for rule in table.rules.as_slice() {
            if let EgressRule::Name(r) = rule {
                if r.admits(name, r.port().unwrap_or(0)) {
                    if !r.is_wildcard() {
                        return Some(NameMatch::Exact);
                    }
                    found = Some(NameMatch::Wildcard);
                }
            }
        }
        found
    }

    /// Whether the resolver may answer `ip` for `name`: an exact rule lists
    /// the name, or a wildcard rule does and `ip` is neither special nor one
    /// of this host's own, or an IP rule covers `ip` (at some port).
    pub fn answerable(&self, name: &str, ip: IpAddr) -> bool {
        match self.lists(name) {
            Some(NameMatch::Exact) => true,
            Some(NameMatch::Wildcard) => {
                let table = self.table();
                !(is_special(ip) || table.own.contains(ip))
                    || table.rules.as_slice().iter().any(
                        |r| matches!(r, EgressRule::Ip(n) if n.admits(ip, n.port().unwrap_or(0))),
                    )
            }
            _ => false,
        }
    }

    /// Pins `ip` as an answer for `name` for `ttl` (at most
    /// [`MAX_PIN_TTL`]); refused (false) when [`Pins::answerable`] is not.
    pub fn pin(&self, name: &str, ip: IpAddr, ttl: Duration) -> bool {
        if !self.answerable(name, ip) {
            return false;
        }
        let now = Instant::now();
        let expires = now + ttl.min(MAX_PIN_TTL);
        let mut table = self.table();
        table.pins.retain(|p| p.expires > now);
        match table.pins.iter_mut().find(|p| p.ip == ip && p.name == name) {
            Some(p) => p.expires = p.expires.max(expires),
            None => {
                if table.pins.len() >= MAX_PINS {
                    table.pins.remove(0);
                }
                table.pins.push(Pin {
                    name: name.to_owned(),
                    ip,
                    expires,
                });
            }
        }
        true
    }

    /// The name a live pin admits `addr` for, if any: a name pinned to its
    /// address that the rules admit at its port, unless an intercepted name
    /// was found at that address and is intercepted at that port
    /// ([`Pins::shadow`]).
    pub fn admits(&self, addr: SocketAddr) -> Option<String> {
        if self.shared_with_intercepted(addr).is_some() {
            return None;
        }
        let now = Instant::now();
        let table = self.table();
        let ip = canonical_ip(addr.ip());
        table
            .pins
            .iter()
            .filter(|p| p.expires > now && canonical_ip(p.ip) == ip)
            .filter(|p| {
                let name = normal(&p.name);
                !table.intercepted.iter().any(|(n, _)| *n == name)
            })
            .find(|p| {
                table
                    .rules
                    .admits_resolved(&p.name, SocketAddr::new(ip, addr.port()), &table.own)
            })
            .map(|p| p.name.clone())
    }

    /// The name some live pin holds `ip` for, whatever the port.
    pub fn name_of(&self, ip: IpAddr) -> Option<String> {
        let now = Instant::now();
        let ip = canonical_ip(ip);
        self.table()
            .pins
            .iter()
            .find(|p| p.expires > now && canonical_ip(p.ip) == ip)
            .map(|p| p.name.clone())
    }
}

/// Where a run's DNS goes and what its answers pin: given to the backend
/// for a run under an allowlist (see [`crate::LaunchOptions`]).
#[derive(Debug, Clone)]
pub struct DnsRoute {
    /// The runner's resolver (TCP, on loopback): connects to port 53 of any
    /// address are made to it instead.
    pub resolver: SocketAddr,
    /// The answers it pinned.
    pub pins: Pins,
    /// Where the run's IP datagram sockets are made, if anywhere: a place
    /// from which a datagram reaches the runner's resolver and nothing else.
    /// `None`: IP datagram sockets stay refused.
    pub datagrams: Option<Arc<dyn DatagramSockets>>,
}

/// A maker of IP datagram sockets that reach the runner's resolver only
/// (Linux: a network namespace of the run's own), whatever address a
/// datagram names.
pub trait DatagramSockets: std::fmt::Debug + Send + Sync {
    /// A new socket, as `socket(domain, ty, protocol)` makes one there, or
    /// the error that call returned.
    fn socket(&self, domain: i32, ty: i32, protocol: i32) -> std::io::Result<OwnedFd>;

    /// Whether `sock` is one of the sockets made there.
    fn holds(&self, sock: BorrowedFd<'_>) -> bool;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pins(rules: &[&str]) -> Pins {
        let rules = EgressRules::new(rules.iter().map(|r| r.parse().unwrap()).collect());
        Pins::new(rules, HostAddrs::new(["192.0.2.2".parse().unwrap()]))
    }

    #[test]
    fn a_pin_admits_its_name_at_the_rules_ports_until_it_expires() {
        let p = pins(&["svc.example.com:22", "*.example.org"]);
        let ip: IpAddr = "203.0.113.7".parse().unwrap();
        assert!(
            p.admits(SocketAddr::new(ip, 22)).is_none(),
            "nothing pinned yet"
        );
        assert!(p.pin("svc.example.com", ip, Duration::from_secs(60)));
        assert_eq!(
            p.admits(SocketAddr::new(ip, 22)).as_deref(),
            Some("svc.example.com")
        );
        assert!(
            p.admits(SocketAddr::new(ip, 23)).is_none(),
            "port not listed"
        );
        let mapped: IpAddr = "::ffff:203.0.113.7".parse().unwrap();
        assert!(p.admits(SocketAddr::new(mapped, 22)).is_some());
        // Expiry.
        let short: IpAddr = "203.0.113.8".parse().unwrap();
        assert!(p.pin("svc.example.com", short, Duration::from_millis(1)));
        std::thread::sleep(Duration::from_millis(5));
        assert!(p.admits(SocketAddr::new(short, 22)).is_none());
    }

    #[test]
    fn wildcards_never_pin_special_or_own_addresses_and_unlisted_names_nothing() {
        let p = pins(&["svc.example.com", "*.example.org"]);
        let loopback: IpAddr = "127.0.0.1".parse().unwrap();
        assert!(!p.pin("a.example.org", loopback, Duration::from_secs(60)));
        assert!(!p.pin(
            "a.example.org",
            "192.0.2.2".parse().unwrap(),
            Duration::from_secs(60)
        ));
        assert!(p.pin(
            "a.example.org",
            "93.184.215.14".parse().unwrap(),
            Duration::from_secs(60)
        ));
        // An exact rule reaches what its name resolves to, loopback too.
        assert!(p.pin("svc.example.com", loopback, Duration::from_secs(60)));
        assert!(!p.pin(
            "other.example.com",
            "203.0.113.9".parse().unwrap(),
            Duration::from_secs(60)
        ));
        assert_eq!(p.lists("x.example.org"), Some(NameMatch::Wildcard));
        assert_eq!(p.lists("example.org"), None);
    }

    #[test]
    fn an_intercepted_name_is_never_listed_answered_or_pinned_whatever_rule_lists_it() {
        let p = pins(&["pkgs.example.com:8443", "*.example.org", "svc.example.com"])
            .except_intercepted([("pkgs.example.com", 8443), ("API.example.org.", 443)]);
        let ip: IpAddr = "203.0.113.7".parse().unwrap();
        let ttl = Duration::from_secs(60);
        for name in ["pkgs.example.com", "PKGS.example.com.", "api.example.org"] {
            assert!(p.intercepted(name), "{name}");
            assert_eq!(p.lists(name), None, "{name}");
            assert!(!p.answerable(name, ip), "{name}");
            assert!(!p.pin(name, ip, ttl), "{name}");
        }
        assert!(p.admits(SocketAddr::new(ip, 8443)).is_none());
        assert!(p.admits(SocketAddr::new(ip, 443)).is_none());
        // Positive controls: the other names of the same rules still pin.
        assert!(!p.intercepted("svc.example.com"));
        let public: IpAddr = "93.184.215.14".parse().unwrap();
        assert_eq!(p.lists("www.example.org"), Some(NameMatch::Wildcard));
        assert!(p.pin("www.example.org", public, ttl));
        assert_eq!(
            p.admits(SocketAddr::new(public, 443)).as_deref(),
            Some("www.example.org")
        );
        assert!(p.pin("svc.example.com", ip, ttl));
        assert_eq!(
            p.admits(SocketAddr::new(ip, 22)).as_deref(),
            Some("svc.example.com")
        );
    }

    #[test]
    fn an_address_an_intercepted_name_was_found_at_admits_no_direct_connect_at_its_port() {
        let p = pins(&["svc.example.com", "pkgs.example.com"])
            .except_intercepted([("pkgs.example.com", 8443), ("pkgs.example.com", 443)]);
        let shared: IpAddr = "203.0.113.7".parse().unwrap();
        let apart: IpAddr = "203.0.113.8".parse().unwrap();
        let ttl = Duration::from_secs(60);
        assert!(p.pin("svc.example.com", shared, ttl));
        assert!(p.pin("svc.example.com", apart, ttl));
        assert!(p.admits(SocketAddr::new(shared, 8443)).is_some());
        // Found at the shared address: no pin admits it at 8443 or 443.
        assert!(p.shadow("PKGS.example.com.", shared, ttl));
        assert!(!p.shadow("svc.example.com", apart, ttl), "not intercepted");
        for port in [8443, 443] {
            let addr = SocketAddr::new(shared, port);
            assert_eq!(
                p.shared_with_intercepted(addr).as_deref(),
                Some("pkgs.example.com")
            );
            assert!(p.admits(addr).is_none(), "{addr}");
            let mapped: IpAddr = "::ffff:203.0.113.7".parse().unwrap();
            assert!(p.admits(SocketAddr::new(mapped, port)).is_none());
        }
        // Twins: another port of the shared address, the same port of
        // another address.
        assert_eq!(
            p.admits(SocketAddr::new(shared, 22)).as_deref(),
            Some("svc.example.com")
        );
        assert!(p.admits(SocketAddr::new(apart, 8443)).is_some());
        // Where it was found, at any port (no IP rule is proposed there);
        // the other address not.
        assert_eq!(
            p.intercepted_at(shared).as_deref(),
            Some("pkgs.example.com")
        );
        let mapped: IpAddr = "::ffff:203.0.113.7".parse().unwrap();
        assert_eq!(
            p.intercepted_at(mapped).as_deref(),
            Some("pkgs.example.com")
        );
        assert_eq!(p.intercepted_at(apart), None);
        // The shadow expires.
        let q = pins(&["svc.example.com"]).except_intercepted([("pkgs.example.com", 443)]);
        assert!(q.pin("svc.example.com", shared, ttl));
        assert!(q.shadow("pkgs.example.com", shared, Duration::from_millis(1)));
        std::thread::sleep(Duration::from_millis(5));
        assert!(q.admits(SocketAddr::new(shared, 443)).is_some());
        assert_eq!(q.intercepted_at(shared), None);
        // Looked up once a period.
        assert!(q.shadows_due(Duration::from_secs(60)));
        assert!(!q.shadows_due(Duration::from_secs(60)));
        assert!(q.shadows_due(Duration::ZERO));
        assert!(!pins(&["svc.example.com"]).shadows_due(Duration::ZERO));
    }
}
