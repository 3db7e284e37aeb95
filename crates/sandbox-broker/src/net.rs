//! Egress rules for IP connects: an address or network, with an optional port.
// Matching is used by the Linux broker only; the type exists everywhere.
#![cfg_attr(not(target_os = "linux"), allow(dead_code))]

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// One allowed IP destination: an address or a CIDR network (IPv4 or IPv6),
/// and optionally one port (any port without).
///
/// Written `10.0.0.0/8`, `192.0.2.7`, `192.0.2.7:443`, `198.51.100.0/24:80`,
/// `2001:db8::/32`, `::1`, `[2001:db8::1]:443`, `[2001:db8::/32]:443`. Host
/// bits beyond the prefix are cleared (`10.1.2.3/8` is `10.0.0.0/8`). An
/// IPv4-mapped IPv6 rule (`::ffff:192.0.2.0/120`) is the IPv4 rule it maps.
///
/// A destination in a *special* range (this host `0.0.0.0/8` and `::`,
/// loopback, private `10/8`, `172.16/12`, `192.168/16`, shared `100.64/10`,
/// link-local `169.254/16` and `fe80::/10` (cloud metadata services live
/// there), unique-local `fc00::/7`, site-local `fec0::/10`, multicast,
/// `240/4` and broadcast) matches only a rule that lies within that range:
/// `0.0.0.0/0` admits every public IPv4 address but not `127.0.0.1`, which
/// needs e.g. `127.0.0.1:8080` or `127.0.0.0/8` listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NetRule {
    addr: IpAddr,
    prefix: u8,
    port: Option<u16>,
}

/// Why a [`NetRule`] could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NetRuleError {
    /// The prefix length exceeds the address's bits (32 or 128).
    #[error("prefix /{prefix} is longer than the {bits} bits of {addr}")]
    Prefix {
        /// The address.
        addr: IpAddr,
        /// The prefix length given.
        prefix: u8,
        /// The address's bits.
        bits: u8,
    },
    /// The text is not an address, a CIDR network, or either with a port.
    #[error("{text:?} is not an IP address or CIDR network with an optional port (e.g. 10.0.0.0/8, 192.0.2.7:443, [2001:db8::/32]:443)")]
    Syntax {
        /// The text.
        text: String,
    },
}

fn bits(addr: IpAddr) -> u8 {
    match addr {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => 128,
    }
}

/// The address with its bits beyond `prefix` cleared.
fn masked(addr: IpAddr, prefix: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let m = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(u32::from(a) & m))
        }
        IpAddr::V6(a) => {
            let m = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(u128::from(a) & m))
        }
    }
}

/// An IPv4-mapped IPv6 address as the IPv4 address it reaches.
fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Special ranges (see [`NetRule`]) as (network, prefix).
fn special(ip: IpAddr) -> Option<(IpAddr, u8)> {
    const V4: &[([u8; 4], u8)] = &[
        ([0, 0, 0, 0], 8),
        ([127, 0, 0, 0], 8),
        ([10, 0, 0, 0], 8),
        ([172, 16, 0, 0], 12),
        ([192, 168, 0, 0], 16),
        ([100, 64, 0, 0], 10),
        ([169, 254, 0, 0], 16),
        ([224, 0, 0, 0], 4),
        ([240, 0, 0, 0], 4),
    ];
    const V6: &[(u128, u8)] = &[
        (0, 128),
        (1, 128),
        (0xfc00 << 112, 7),
        (0xfe80 << 112, 10),
        (0xfec0 << 112, 10),
        (0xff00 << 112, 8),
    ];
    match ip {
        IpAddr::V4(_) => V4.iter().find_map(|(net, prefix)| {
            let net = IpAddr::V4(Ipv4Addr::from(*net));
            (masked(ip, *prefix) == net).then_some((net, *prefix))
        }),
        IpAddr::V6(_) => V6.iter().find_map(|(net, prefix)| {
            let net = IpAddr::V6(Ipv6Addr::from(*net));
            (masked(ip, *prefix) == net).then_some((net, *prefix))
        }),
    }
}

impl NetRule {
    /// The network `addr/prefix` (host bits cleared), one port or any.
    pub fn new(addr: IpAddr, prefix: u8, port: Option<u16>) -> Result<Self, NetRuleError> {
        if prefix > bits(addr) {
            return Err(NetRuleError::Prefix {
                addr,
                prefix,
                bits: bits(addr),
            });
        }
        let (addr, prefix) = match addr {
            IpAddr::V6(v6) if prefix >= 96 => match v6.to_ipv4_mapped() {
                Some(v4) => (IpAddr::V4(v4), prefix - 96),
                None => (addr, prefix),
            },
            _ => (addr, prefix),
        };
        Ok(Self {
            addr: masked(addr, prefix),
            prefix,
            port,
        })
    }

    /// Whether `ip` (IPv4-mapped taken as IPv4) lies in the rule's network.
    fn contains(&self, ip: IpAddr) -> bool {
        let ip = canonical_ip(ip);
        bits(ip) == bits(self.addr) && masked(ip, self.prefix) == self.addr
    }

    fn port_matches(&self, port: u16) -> bool {
        self.port.map_or(true, |p| p == port)
    }

    /// Whether the destination `ip:port` is admitted by `rules`: some rule
    /// contains it and its port, and for a destination in a special range,
    /// that rule lies within the range.
    pub(crate) fn admit(rules: &[NetRule], ip: IpAddr, port: u16) -> bool {
        let ip = canonical_ip(ip);
        let range = special(ip);
        rules.iter().any(|r| {
            r.contains(ip)
                && r.port_matches(port)
                && range.map_or(true, |(net, prefix)| {
                    r.prefix >= prefix && masked(r.addr, prefix) == net
                })
        })
    }
}

impl FromStr for NetRule {
    type Err = NetRuleError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let syntax = || NetRuleError::Syntax { text: text.into() };
        // [v6 or v6/len]:port, v4:port, v4/len:port, or a bare network.
        let (net, port) = if let Some(rest) = text.strip_prefix('[') {
            let (inner, after) = rest.split_once(']').ok_or_else(syntax)?;
            let port = match after {
                "" => None,
                p => Some(p.strip_prefix(':').ok_or_else(syntax)?),
            };
            (inner, port)
        } else if text.matches(':').count() == 1 {
            let (net, port) = text.split_once(':').ok_or_else(syntax)?;
            (net, Some(port))
        } else {
            (text, None)
        };
        let port = port
            .map(|p| p.parse::<u16>().map_err(|_| syntax()))
            .transpose()?;
        let (addr, prefix) = match net.split_once('/') {
            Some((a, p)) => {
                let addr: IpAddr = a.parse().map_err(|_| syntax())?;
                let prefix: u8 = p.parse().map_err(|_| syntax())?;
                (addr, prefix)
            }
            None => {
                let addr: IpAddr = net.parse().map_err(|_| syntax())?;
                (addr, bits(addr))
            }
        };
        NetRule::new(addr, prefix, port)
    }
}

impl fmt::Display for NetRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let whole = self.prefix == bits(self.addr);
        match (self.addr, self.port) {
            (IpAddr::V4(a), None) if whole => write!(f, "{a}"),
            (IpAddr::V4(a), None) => write!(f, "{a}/{}", self.prefix),
            (IpAddr::V4(a), Some(p)) if whole => write!(f, "{a}:{p}"),
            (IpAddr::V4(a), Some(p)) => write!(f, "{a}/{}:{p}", self.prefix),
            (IpAddr::V6(a), None) if whole => write!(f, "{a}"),
            (IpAddr::V6(a), None) => write!(f, "{a}/{}", self.prefix),
            (IpAddr::V6(a), Some(p)) if whole => write!(f, "[{a}]:{p}"),
            (IpAddr::V6(a), Some(p)) => write!(f, "[{a}/{}]:{p}", self.prefix),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(s: &str) -> NetRule {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn rules_parse_and_print() {
        for s in [
            "10.0.0.0/8",
            "192.0.2.7",
            "192.0.2.7:443",
            "198.51.100.0/24:80",
            "2001:db8::/32",
            "::1",
            "[2001:db8::1]:443",
            "[2001:db8::/32]:443",
            "0.0.0.0/0",
            "::/0",
        ] {
            assert_eq!(r(s).to_string(), s);
        }
        assert_eq!(r("10.1.2.3/8").to_string(), "10.0.0.0/8");
        assert_eq!(r("[::1]").to_string(), "::1");
        assert_eq!(r("::ffff:192.0.2.0/120").to_string(), "192.0.2.0/24");
        assert_eq!(r("[::ffff:127.0.0.1]:80").to_string(), "127.0.0.1:80");
        for bad in [
            "",
            "10.0.0.0/33",
            "::/129",
            "host.example",
            "10.0.0.1:",
            "10.0.0.1:70000",
            "[::1",
            "[::1]x",
            "::1:80:",
            "10.0.0.0/8/8",
        ] {
            assert!(bad.parse::<NetRule>().is_err(), "{bad:?}");
        }
        assert!(matches!(
            NetRule::new(ip("10.0.0.0"), 40, None),
            Err(NetRuleError::Prefix { bits: 32, .. })
        ));
    }

    #[test]
    fn admission() {
        let admit = |rules: &[&str], dest: &str, port: u16| {
            let rules: Vec<NetRule> = rules.iter().map(|s| r(s)).collect();
            NetRule::admit(&rules, ip(dest), port)
        };
        // Public: any covering rule, port when given.
        assert!(admit(&["0.0.0.0/0"], "192.0.2.7", 443));
        assert!(admit(&["192.0.2.0/24:443"], "192.0.2.7", 443));
        assert!(!admit(&["192.0.2.0/24:443"], "192.0.2.7", 80));
        assert!(!admit(&["192.0.2.0/24"], "198.51.100.1", 80));
        assert!(admit(&["::/0"], "2001:db8::1", 443));
        assert!(!admit(&[], "192.0.2.7", 443));
        // Special ranges: only rules within them.
        for dest in [
            "127.0.0.1",
            "0.0.0.0",
            "10.1.1.1",
            "172.16.0.1",
            "192.168.1.1",
            "100.64.0.1",
            "169.254.169.254",
            "224.0.0.1",
            "255.255.255.255",
        ] {
            assert!(!admit(&["0.0.0.0/0"], dest, 80), "{dest}");
        }
        for dest in ["::1", "::", "fd00::1", "fe80::1", "fec0::1", "ff02::1"] {
            assert!(!admit(&["::/0"], dest, 80), "{dest}");
        }
        assert!(admit(&["127.0.0.1:8080"], "127.0.0.1", 8080));
        assert!(admit(&["127.0.0.0/8"], "127.0.0.1", 8080));
        assert!(!admit(&["127.0.0.1:8080"], "127.0.0.1", 8081));
        assert!(!admit(&["127.0.0.1"], "0.0.0.0", 80));
        assert!(admit(&["10.0.0.0/8"], "10.1.1.1", 80));
        assert!(!admit(&["10.0.0.0/7"], "10.1.1.1", 80));
        assert!(admit(&["::1"], "::1", 80));
        // IPv4-mapped IPv6 destinations are the IPv4 ones.
        assert!(!admit(&["::/0"], "::ffff:127.0.0.1", 80));
        assert!(!admit(&["::/0"], "::ffff:192.0.2.7", 80));
        assert!(admit(&["0.0.0.0/0"], "::ffff:192.0.2.7", 80));
        assert!(!admit(&["0.0.0.0/0"], "::ffff:127.0.0.1", 80));
        assert!(admit(&["127.0.0.1:80"], "::ffff:127.0.0.1", 80));
        // IPv4 rules never match IPv6 destinations and the other way round.
        assert!(!admit(&["0.0.0.0/0"], "2001:db8::1", 80));
    }
}
