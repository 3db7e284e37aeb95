//! Egress rules: which network destinations a confined command may reach.
//!
//! * [`NetRule`]: an IP address or CIDR network with an optional port, as the
//!   connect broker checks a socket's destination.
//! * [`EgressRule`]: a [`NetRule`] or a host name pattern with an optional
//!   port (`example.com:443`, `*.example.com`), as the egress proxy checks a
//!   requested host; [`EgressRules`] is a list of them.
//! * [`is_special`]: whether an address lies in a special range (those of
//!   the IANA special-purpose registries: loopback, private, link-local,
//!   documentation, ...), which only rules naming it admit.
//! * [`HostAddrs`]: this host's own addresses, which a wildcard name rule
//!   does not reach either.
//!
//! All of them read and print as text, and (de)serialise as that text, so a
//! policy can say `allow_net = ["example.com:443", "10.0.0.0/8"]`.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// One allowed IP destination: an address or a CIDR network (IPv4 or IPv6),
/// and optionally one port (any port without).
///
/// Written `10.0.0.0/8`, `192.0.2.7`, `192.0.2.7:443`, `198.51.100.0/24:80`,
/// `2001:db8::/32`, `::1`, `[2001:db8::1]:443`, `[2001:db8::/32]:443`. Host
/// bits beyond the prefix are cleared (`10.1.2.3/8` is `10.0.0.0/8`). An
/// IPv4-mapped IPv6 rule (`::ffff:192.0.2.0/120`) is the IPv4 rule it maps.
///
/// # Special ranges
/// A destination in a *special* range matches only a rule that lies within
/// that range: `0.0.0.0/0` admits every public IPv4 address but not
/// `127.0.0.1`, which needs e.g. `127.0.0.1:8080` or `127.0.0.0/8` listed.
/// The special ranges are those of the IANA IPv4 and IPv6 Special-Purpose
/// Address Registries
/// (<https://www.iana.org/assignments/iana-ipv4-special-registry>,
/// <https://www.iana.org/assignments/iana-ipv6-special-registry>), plus
/// multicast and two deprecated IPv6 ranges:
/// * this host `0.0.0.0/8` and `::`, loopback `127/8` and `::1`, the
///   deprecated IPv4-compatible `::/96`;
/// * private `10/8`, `172.16/12`, `192.168/16`, shared `100.64/10`,
///   unique-local `fc00::/7`, site-local `fec0::/10`;
/// * link-local `169.254/16` and `fe80::/10` (cloud metadata services live
///   there);
/// * documentation `192.0.2/24`, `198.51.100/24`, `203.0.113/24`,
///   `2001:db8::/32`, `3fff::/20`; benchmarking `198.18/15`;
/// * protocol assignments `192.0.0/24` and `2001::/23` (Teredo among
///   them), AS112 `192.31.196/24`, `192.175.48/24`, `2620:4f:8000::/48`,
///   AMT `192.52.193/24`, the deprecated 6to4 relay `192.88.99/24`,
///   local-use translation `64:ff9b:1::/48`, discard-only `100::/64`, the
///   dummy prefix `100:0:0:1::/64`, segment-routing SIDs `5f00::/16`;
/// * multicast `224/4` and `ff00::/8`, reserved `240/4` with the broadcast
///   address.
///
/// A NAT64 address (`64:ff9b::/96`, the IPv4 address in its last 32 bits)
/// or a 6to4 address (`2002::/16`, the IPv4 address in bits 16 to 48) is
/// special exactly when the IPv4 address it embeds is, and its range is
/// that IPv4 range in the same place: `64:ff9b::a00:1` lies in
/// `64:ff9b::a00:0/104` (`10/8`), `2002:7f00:1::` in `2002:7f00::/24`
/// (`127/8`). So `::/0` admits `64:ff9b::808:808` (a public address reached
/// through DNS64) but not `64:ff9b::7f00:1`. Where one range lies within
/// another (`::1` within `::/96`), the innermost one counts: `::/96` does
/// not admit `::1`.
///
/// Serialised as its text (`"10.0.0.0/8"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
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
pub(crate) fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// The special-purpose IPv4 ranges as (network, prefix): the IANA IPv4
/// Special-Purpose Address Registry
/// (<https://www.iana.org/assignments/iana-ipv4-special-registry>), a whole
/// block where the registry lists parts of one (`192.0.0.0/24`), plus
/// multicast. Plain data: a new registry entry is one line here.
const SPECIAL_V4: &[(Ipv4Addr, u8)] = &[
    (Ipv4Addr::new(0, 0, 0, 0), 8),       // "this network" (RFC 791)
    (Ipv4Addr::new(10, 0, 0, 0), 8),      // private-use (RFC 1918)
    (Ipv4Addr::new(100, 64, 0, 0), 10),   // shared address space (RFC 6598)
    (Ipv4Addr::new(127, 0, 0, 0), 8),     // loopback (RFC 1122)
    (Ipv4Addr::new(169, 254, 0, 0), 16),  // link-local (RFC 3927): cloud metadata
    (Ipv4Addr::new(172, 16, 0, 0), 12),   // private-use (RFC 1918)
    (Ipv4Addr::new(192, 0, 0, 0), 24),    // IETF protocol assignments (RFC 6890)
    (Ipv4Addr::new(192, 0, 2, 0), 24),    // documentation TEST-NET-1 (RFC 5737)
    (Ipv4Addr::new(192, 31, 196, 0), 24), // AS112-v4 (RFC 7535)
    (Ipv4Addr::new(192, 52, 193, 0), 24), // AMT (RFC 7450)
    (Ipv4Addr::new(192, 88, 99, 0), 24),  // deprecated 6to4 relay anycast (RFC 7526)
    (Ipv4Addr::new(192, 168, 0, 0), 16),  // private-use (RFC 1918)
    (Ipv4Addr::new(192, 175, 48, 0), 24), // direct delegation AS112 service (RFC 7534)
    (Ipv4Addr::new(198, 18, 0, 0), 15),   // benchmarking (RFC 2544)
    (Ipv4Addr::new(198, 51, 100, 0), 24), // documentation TEST-NET-2 (RFC 5737)
    (Ipv4Addr::new(203, 0, 113, 0), 24),  // documentation TEST-NET-3 (RFC 5737)
    (Ipv4Addr::new(224, 0, 0, 0), 4),     // multicast (RFC 5771; not in the registry)
    (Ipv4Addr::new(240, 0, 0, 0), 4),     // reserved (RFC 1112), 255.255.255.255 included
];

/// The special-purpose IPv6 ranges as (network, prefix): the IANA IPv6
/// Special-Purpose Address Registry
/// (<https://www.iana.org/assignments/iana-ipv6-special-registry>), a whole
/// block where the registry lists parts of one (`2001::/23`), plus
/// multicast and the deprecated IPv4-compatible and site-local ranges.
/// NAT64 `64:ff9b::/96` and 6to4 `2002::/16` are not listed: an address
/// there is special when the IPv4 address it embeds is ([`special_within`]).
/// Nested ranges (`::1` in `::/96`) are fine: the innermost one counts.
const SPECIAL_V6: &[(Ipv6Addr, u8)] = &[
    (Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 0), 128), // unspecified (RFC 4291)
    (Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 1), 128), // loopback (RFC 4291)
    (Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 0), 96),  // deprecated IPv4-compatible (RFC 4291)
    // IPv4-mapped (RFC 4291); addresses are looked up as the IPv4 they map.
    (Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0, 0), 96),
    (Ipv6Addr::new(0x64, 0xff9b, 1, 0, 0, 0, 0, 0), 48), // local-use translation (RFC 8215)
    (Ipv6Addr::new(0x100, 0, 0, 0, 0, 0, 0, 0), 64),     // discard-only (RFC 6666)
    (Ipv6Addr::new(0x100, 0, 0, 1, 0, 0, 0, 0), 64),     // dummy prefix (RFC 9780)
    (Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0), 23),    // IETF protocol assignments (RFC 2928)
    (Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0), 32), // documentation (RFC 3849)
    (Ipv6Addr::new(0x2620, 0x4f, 0x8000, 0, 0, 0, 0, 0), 48), // direct delegation AS112 (RFC 7534)
    (Ipv6Addr::new(0x3fff, 0, 0, 0, 0, 0, 0, 0), 20),    // documentation (RFC 9637)
    (Ipv6Addr::new(0x5f00, 0, 0, 0, 0, 0, 0, 0), 16),    // segment routing SIDs (RFC 9602)
    (Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0), 7),     // unique-local (RFC 4193)
    (Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0), 10),    // link-local (RFC 4291)
    (Ipv6Addr::new(0xfec0, 0, 0, 0, 0, 0, 0, 0), 10),    // deprecated site-local (RFC 3879)
    (Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0), 8),     // multicast (RFC 4291)
];

/// NAT64's well-known prefix `64:ff9b::/96` (RFC 6052): the last 32 bits are
/// the IPv4 address reached.
const NAT64: (u128, u8) = (0x0064_ff9b << 96, 96);
/// 6to4's prefix `2002::/16` (RFC 3056): bits 16..48 are the IPv4 address
/// of the relay reached.
const SIX_TO_FOUR: (u128, u8) = (0x2002 << 112, 16);

/// The innermost entry of `table` that contains `ip` with a prefix of at
/// most `max_prefix`.
fn innermost<A: Copy + Into<IpAddr>>(
    table: &[(A, u8)],
    ip: IpAddr,
    max_prefix: u8,
) -> Option<(A, u8)> {
    table
        .iter()
        .copied()
        .filter(|&(net, prefix)| prefix <= max_prefix && masked(ip, prefix) == net.into())
        .max_by_key(|&(_, prefix)| prefix)
}

/// The innermost special range (network, prefix) that contains `ip` and is
/// no longer than `max_prefix` (so that a rule `ip/max_prefix` lies within
/// it), or `None`. `ip` is not canonicalised here: an IPv4-mapped address is
/// looked up as IPv6.
///
/// A NAT64 (`64:ff9b::/96`) or 6to4 (`2002::/16`) address lies in a special
/// range exactly when the IPv4 address it embeds does, and that range is the
/// IPv4 one in the same position of the IPv6 prefix: `64:ff9b::a00:1` is in
/// `64:ff9b::a00:0/104` because `10.0.0.1` is in `10.0.0.0/8`, and
/// `2002:a00:1::` is in `2002:a00::/24`.
fn special_within(ip: IpAddr, max_prefix: u8) -> Option<(IpAddr, u8)> {
    let IpAddr::V6(v6) = ip else {
        return innermost(SPECIAL_V4, ip, max_prefix).map(|(net, p)| (net.into(), p));
    };
    let v6 = u128::from(v6);
    // (prefix, its length, the shift of the embedded IPv4 address).
    for (net, len, shift) in [(NAT64.0, NAT64.1, 0u32), (SIX_TO_FOUR.0, SIX_TO_FOUR.1, 80)] {
        if v6 & (u128::MAX << (128 - u32::from(len))) != net {
            continue;
        }
        // Truncation intended: the 32 bits of the embedded IPv4 address.
        let embedded = IpAddr::V4(Ipv4Addr::from((v6 >> shift) as u32));
        let room = max_prefix.saturating_sub(len).min(32);
        let found = (max_prefix >= len)
            .then(|| innermost(SPECIAL_V4, embedded, room))
            .flatten()
            .map(|(v4, v4_prefix)| {
                let net6 = net | u128::from(u32::from(v4)) << shift;
                (IpAddr::V6(Ipv6Addr::from(net6)), len + v4_prefix)
            });
        // No entry of the IPv6 table overlaps these two prefixes.
        return found;
    }
    innermost(SPECIAL_V6, ip, max_prefix).map(|(net, p)| (net.into(), p))
}

/// The innermost special range (see [`NetRule`]) containing `ip`, as
/// (network, prefix).
fn special(ip: IpAddr) -> Option<(IpAddr, u8)> {
    special_within(ip, bits(ip))
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

    /// The rule admitting exactly `addr`'s address and port (an
    /// IPv4-mapped IPv6 address as the IPv4 one).
    pub fn exact(addr: SocketAddr) -> Self {
        let ip = canonical_ip(addr.ip());
        Self {
            addr: ip,
            prefix: bits(ip),
            port: Some(addr.port()),
        }
    }

    /// The network address (host bits cleared; IPv4 for an IPv4-mapped rule).
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// The prefix length.
    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    /// The one port admitted, or `None` for any.
    pub fn port(&self) -> Option<u16> {
        self.port
    }

    /// Whether `ip` (IPv4-mapped taken as IPv4) lies in the rule's network.
    fn contains(&self, ip: IpAddr) -> bool {
        let ip = canonical_ip(ip);
        bits(ip) == bits(self.addr) && masked(ip, self.prefix) == self.addr
    }

    fn port_matches(&self, port: u16) -> bool {
        self.port.map_or(true, |p| p == port)
    }

    /// Whether this rule admits the destination `ip:port`: it contains the
    /// address (IPv4-mapped IPv6 taken as IPv4) and the port, and for an
    /// address in a special range (see [`NetRule`]) the rule lies within
    /// that range.
    pub fn admits(&self, ip: IpAddr, port: u16) -> bool {
        let ip = canonical_ip(ip);
        self.contains(ip)
            && self.port_matches(port)
            && special(ip).map_or(true, |(net, prefix)| {
                self.prefix >= prefix && masked(self.addr, prefix) == net
            })
    }

    /// Whether every destination this rule admits, `other` admits too.
    pub fn within(&self, other: &NetRule) -> bool {
        let in_range = |rule: &NetRule, (net, prefix): (IpAddr, u8)| {
            rule.prefix >= prefix && masked(rule.addr, prefix) == net
        };
        bits(self.addr) == bits(other.addr)
            && other.prefix <= self.prefix
            && masked(self.addr, other.prefix) == other.addr
            && other.port.map_or(true, |p| self.port == Some(p))
            // The special addresses this rule admits lie in special ranges
            // it lies within; the innermost of those (nested ranges: `::1`
            // in `::/96`) needs `other` within it too, and so within all.
            && special_within(self.addr, self.prefix).map_or(true, |range| in_range(other, range))
    }

    /// Whether some rule of `rules` admits the destination `ip:port` (see
    /// [`NetRule::admits`]); an empty list admits nothing.
    pub fn admit(rules: &[NetRule], ip: IpAddr, port: u16) -> bool {
        rules.iter().any(|r| r.admits(ip, port))
    }
}

/// Whether `ip` (IPv4-mapped IPv6 taken as IPv4) lies in a special range:
/// one of the IANA special-purpose registries (this host, loopback,
/// private, shared, link-local, documentation, benchmarking, protocol
/// assignments, ...), multicast, reserved or broadcast, or a NAT64 or 6to4
/// address embedding such an IPv4 address (the list on [`NetRule`]).
pub fn is_special(ip: IpAddr) -> bool {
    special(canonical_ip(ip)).is_some()
}

impl TryFrom<String> for NetRule {
    type Error = NetRuleError;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        text.parse()
    }
}

impl From<NetRule> for String {
    fn from(rule: NetRule) -> Self {
        rule.to_string()
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

/// One allowed egress destination, as the egress proxy checks a requested
/// host: an IP rule ([`NetRule`]) or a host name pattern ([`NameRule`]).
///
/// Written as a [`NetRule`] (`10.0.0.0/8`, `192.0.2.7:443`, `[::1]:8080`) or
/// as a name with an optional port: an exact name (`example.com`,
/// `localhost`, `example.com:443`) or a suffix wildcard (`*.example.com`,
/// `*.example.com:443`), which matches every sub-domain of `example.com` at
/// any depth but not `example.com` itself. Names compare case-insensitively
/// and a trailing dot is ignored (`Example.COM.` is `example.com`). A name is
/// labels of 1 to 63 letters, digits and hyphens, at most 253 characters in
/// all; `*` stands only for the whole first label; text that looks like an
/// address (digits and dots, a `/`, `[` or more than one `:`) is read as a
/// [`NetRule`], and a name whose last label is numeric (`127.1`,
/// `0x7f000001`, which the system resolver reads as addresses) is refused.
///
/// # Names, addresses and special ranges
/// * A requested **IP literal** is admitted by IP rules only, with
///   [`NetRule`]'s special-range semantics; name rules never admit it.
/// * A requested **name** is admitted only by a name rule: an IP rule never
///   admits a name, so a name no rule lists is refused before it is
///   resolved (no DNS query for it leaves through the proxy).
/// * An address a listed name **resolves to** is admitted when the
///   matching rule is exact, whatever the address (the operator named that
///   host: `localhost:8080` reaches `127.0.0.1:8080`, and a name the
///   operator lists that resolves to this host's own address reaches it).
///   When only a wildcard matches, an address in a special range
///   ([`is_special`]: loopback, private, link-local, documentation, a NAT64
///   or 6to4 address embedding one of those, ...) or one of this host's own
///   addresses ([`HostAddrs`]: any address configured on one of its
///   interfaces, public ones included) is refused unless an IP rule admits
///   it as well. So a name under `*.example.com` that resolves to
///   `127.0.0.1`, `169.254.169.254`, `64:ff9b::7f00:1` or the host's own
///   public address (DNS rebinding, or a zone the command's author
///   controls) reaches nothing the rules did not already allow by address,
///   such as a service bound to `0.0.0.0` or `[::]`. See
///   [`EgressRules::admits_resolved`].
///
/// Serialised as its text (`"example.com:443"`), so a policy can say
/// `allow_net = ["example.com:443", "10.0.0.0/8"]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
#[non_exhaustive]
pub enum EgressRule {
    /// An address or network with an optional port.
    Ip(NetRule),
    /// A host name, exact or suffix wildcard, with an optional port.
    Name(NameRule),
}

/// A host name pattern with an optional port: the name part of an
/// [`EgressRule`] (`example.com:443`, `*.example.com`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NameRule {
    /// Lowercase, without trailing dot, without the `*.` of a wildcard.
    name: String,
    wildcard: bool,
    port: Option<u16>,
}

/// How a requested host name matched the rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NameMatch {
    /// An exact name rule lists the host: any address it resolves to is
    /// admitted.
    Exact,
    /// Only a wildcard rule matches: addresses in special ranges and this
    /// host's own addresses are refused unless an IP rule admits them.
    Wildcard,
}

/// Why an [`EgressRule`] could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EgressRuleError {
    /// The text is empty.
    #[error("an egress rule is empty; write a host name or an address (e.g. example.com:443, *.example.com, localhost:8080, 10.0.0.0/8)")]
    Empty,
    /// The text looks like an address but is not a valid [`NetRule`].
    #[error(transparent)]
    Ip(#[from] NetRuleError),
    /// `*` anywhere but as the whole first label (or with nothing after it).
    #[error("egress rule {text:?}: `*` stands only for the whole first label, followed by a name (e.g. *.example.com, which matches the sub-domains of example.com but not example.com itself)")]
    Wildcard {
        /// The rule as written.
        text: String,
    },
    /// A label is empty, longer than 63 characters, or holds a character
    /// other than a letter, digit or hyphen.
    #[error("egress rule {text:?}: label {label:?} is not 1 to 63 letters, digits or hyphens (e.g. example.com, *.example.com, localhost:8080)")]
    Label {
        /// The rule as written.
        text: String,
        /// The offending label.
        label: String,
    },
    /// The name is longer than 253 characters.
    #[error("egress rule {text:?}: the name is {len} characters long, more than the 253 a host name may have")]
    TooLong {
        /// The rule as written.
        text: String,
        /// The name's length (without a trailing dot).
        len: usize,
    },
    /// The name's last label is numeric: the resolver would read it as an address.
    #[error("egress rule {text:?}: the last label {label:?} is numeric, which the system resolver reads as an IP address; write the address as an IP rule (e.g. 127.0.0.1:8080, 10.0.0.0/8)")]
    Numeric {
        /// The rule as written.
        text: String,
        /// The numeric label.
        label: String,
    },
    /// The port is not a decimal number from 0 to 65535.
    #[error("egress rule {text:?}: port {port:?} is not a number from 0 to 65535 (e.g. example.com:443)")]
    Port {
        /// The rule as written.
        text: String,
        /// The port as written.
        port: String,
    },
}

/// What is wrong with a host name (without rule text).
enum NameProblem {
    Label(String),
    TooLong(usize),
    Numeric(String),
}

/// The longest host name, in characters without a trailing dot.
const MAX_NAME: usize = 253;
/// The longest label.
const MAX_LABEL: usize = 63;

/// `name` lowercased and without one trailing dot, when it is a valid host
/// name: labels of 1 to 63 letters, digits or hyphens, at most 253 characters,
/// the last label not numeric.
fn normal_name(name: &str) -> Result<String, NameProblem> {
    let name = name.strip_suffix('.').unwrap_or(name);
    if name.len() > MAX_NAME {
        return Err(NameProblem::TooLong(name.len()));
    }
    for label in name.split('.') {
        let ok = (1..=MAX_LABEL).contains(&label.len())
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-');
        if !ok {
            return Err(NameProblem::Label(label.into()));
        }
    }
    let last = name.rsplit('.').next().unwrap_or(name);
    let hex = last
        .strip_prefix("0x")
        .or_else(|| last.strip_prefix("0X"))
        .is_some_and(|h| h.bytes().all(|b| b.is_ascii_hexdigit()));
    if hex || last.bytes().all(|b| b.is_ascii_digit()) {
        return Err(NameProblem::Numeric(last.into()));
    }
    Ok(name.to_ascii_lowercase())
}

/// Whether the rule text is read as a [`NetRule`]: a `[`, a `/`, more than
/// one `:`, or a host part of only digits and dots.
fn looks_like_address(text: &str) -> bool {
    let host = text.split(':').next().unwrap_or(text);
    text.starts_with('[')
        || text.contains('/')
        || text.matches(':').count() > 1
        || (!host.is_empty() && host.bytes().all(|b| b.is_ascii_digit() || b == b'.'))
}

impl NameRule {
    /// The name, lowercase, without trailing dot and without the `*.` of a
    /// wildcard.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the rule matches the sub-domains of [`NameRule::name`]
    /// (`*.example.com`) rather than the name itself.
    pub fn is_wildcard(&self) -> bool {
        self.wildcard
    }

    /// The one port admitted, or `None` for any.
    pub fn port(&self) -> Option<u16> {
        self.port
    }

    /// Whether the rule admits the host name `host` (any case, trailing dot
    /// ignored) at `port`. A host that is not a valid name is never admitted.
    pub fn admits(&self, host: &str, port: u16) -> bool {
        normal_name(host).is_ok_and(|h| self.matches_normal(&h, port))
    }

    /// Whether every host this rule admits, `other` admits too.
    pub fn within(&self, other: &NameRule) -> bool {
        let port = other.port.map_or(true, |p| self.port == Some(p));
        let beneath = |name: &str| {
            name.strip_suffix(other.name.as_str())
                .and_then(|sub| sub.strip_suffix('.'))
                .is_some_and(|sub| !sub.is_empty())
        };
        let name = match (self.wildcard, other.wildcard) {
            (false, false) => self.name == other.name,
            (_, true) => beneath(&self.name) || (self.wildcard && self.name == other.name),
            (true, false) => false,
        };
        port && name
    }

    /// [`NameRule::admits`] for a host already through [`normal_name`].
    fn matches_normal(&self, host: &str, port: u16) -> bool {
        if self.port.is_some_and(|p| p != port) {
            return false;
        }
        if !self.wildcard {
            return host == self.name;
        }
        host.strip_suffix(self.name.as_str())
            .and_then(|sub| sub.strip_suffix('.'))
            .is_some_and(|sub| !sub.is_empty())
    }
}

impl fmt::Display for NameRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.wildcard {
            f.write_str("*.")?;
        }
        f.write_str(&self.name)?;
        if let Some(port) = self.port {
            write!(f, ":{port}")?;
        }
        Ok(())
    }
}

impl EgressRule {
    /// Whether this rule admits the host name `host` at `port`: a name rule
    /// that matches it (see [`NameRule::admits`]). An IP rule admits no name.
    pub fn admits_name(&self, host: &str, port: u16) -> bool {
        match self {
            EgressRule::Name(rule) => rule.admits(host, port),
            EgressRule::Ip(_) => false,
        }
    }

    /// Whether every destination this rule admits, `other` admits too (a
    /// name rule is never within an IP rule, nor the other way round).
    pub fn within(&self, other: &EgressRule) -> bool {
        match (self, other) {
            (EgressRule::Name(a), EgressRule::Name(b)) => a.within(b),
            (EgressRule::Ip(a), EgressRule::Ip(b)) => a.within(b),
            _ => false,
        }
    }

    /// The IP rule, if this is one.
    pub fn as_ip(&self) -> Option<&NetRule> {
        match self {
            EgressRule::Ip(rule) => Some(rule),
            EgressRule::Name(_) => None,
        }
    }

    /// Whether this rule admits the address `addr` requested as an IP
    /// literal: an IP rule that admits it (see [`NetRule::admits`]). A name
    /// rule admits no address by itself.
    pub fn admits_addr(&self, addr: SocketAddr) -> bool {
        match self {
            EgressRule::Ip(rule) => rule.admits(addr.ip(), addr.port()),
            EgressRule::Name(_) => false,
        }
    }
}

impl FromStr for EgressRule {
    type Err = EgressRuleError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if text.is_empty() {
            return Err(EgressRuleError::Empty);
        }
        if looks_like_address(text) {
            return Ok(EgressRule::Ip(text.parse()?));
        }
        let (host, port) = match text.split_once(':') {
            Some((host, port)) => {
                let parsed = port
                    .bytes()
                    .all(|b| b.is_ascii_digit())
                    .then(|| port.parse::<u16>().ok())
                    .flatten();
                match parsed {
                    Some(p) => (host, Some(p)),
                    None => {
                        return Err(EgressRuleError::Port {
                            text: text.into(),
                            port: port.into(),
                        })
                    }
                }
            }
            None => (text, None),
        };
        let (wildcard, name) = match host.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, host),
        };
        let bare = name.strip_suffix('.').unwrap_or(name);
        if name.contains('*') || (wildcard && bare.is_empty()) {
            return Err(EgressRuleError::Wildcard { text: text.into() });
        }
        let name = normal_name(name).map_err(|problem| match problem {
            NameProblem::Label(label) => EgressRuleError::Label {
                text: text.into(),
                label,
            },
            NameProblem::TooLong(len) => EgressRuleError::TooLong {
                text: text.into(),
                len,
            },
            NameProblem::Numeric(label) => EgressRuleError::Numeric {
                text: text.into(),
                label,
            },
        })?;
        Ok(EgressRule::Name(NameRule {
            name,
            wildcard,
            port,
        }))
    }
}

impl fmt::Display for EgressRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EgressRule::Ip(rule) => rule.fmt(f),
            EgressRule::Name(rule) => rule.fmt(f),
        }
    }
}

impl From<NetRule> for EgressRule {
    fn from(rule: NetRule) -> Self {
        EgressRule::Ip(rule)
    }
}

impl TryFrom<String> for EgressRule {
    type Error = EgressRuleError;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        text.parse()
    }
}

impl From<EgressRule> for String {
    fn from(rule: EgressRule) -> Self {
        rule.to_string()
    }
}

/// A list of [`EgressRule`]s: what the egress proxy admits (see
/// [`EgressRule`] for how names, addresses and special ranges combine). An
/// empty list admits nothing. Serialised as a list of rule texts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct EgressRules(Vec<EgressRule>);

impl EgressRules {
    /// The list `rules`.
    pub fn new(rules: Vec<EgressRule>) -> Self {
        Self(rules)
    }

    /// The rules.
    pub fn as_slice(&self) -> &[EgressRule] {
        &self.0
    }

    /// Whether an IP rule admits `addr`, requested as an IP literal.
    pub fn admits_addr(&self, addr: SocketAddr) -> bool {
        self.0.iter().any(|r| r.admits_addr(addr))
    }

    /// How the host name `host` at `port` matches the name rules: `Exact`
    /// when an exact rule lists it, else `Wildcard` when a wildcard rule
    /// does, else `None` (refused; not to be resolved). A host that is not a
    /// valid name, or an IP literal, matches nothing.
    pub fn name_match(&self, host: &str, port: u16) -> Option<NameMatch> {
        let host = normal_name(host).ok()?;
        let mut found = None;
        for rule in &self.0 {
            if let EgressRule::Name(rule) = rule {
                if rule.matches_normal(&host, port) {
                    if !rule.wildcard {
                        return Some(NameMatch::Exact);
                    }
                    found = Some(NameMatch::Wildcard);
                }
            }
        }
        found
    }

    /// Whether an exact name rule for this very port lists `host` at `port`
    /// (`--allow-net HOST:PORT`): neither a wildcard nor a rule for every
    /// port. What a host a request rule intercepts needs at its other ports.
    pub fn lists_exactly(&self, host: &str, port: u16) -> bool {
        let Ok(host) = normal_name(host) else {
            return false;
        };
        self.0.iter().any(|rule| {
            matches!(rule, EgressRule::Name(r)
                if !r.wildcard && r.port == Some(port) && r.matches_normal(&host, port))
        })
    }

    /// Whether the address `addr`, which the host name `host` resolved to,
    /// may be connected to: an exact rule lists `host` at `addr`'s port, or
    /// a wildcard rule does and `addr` is neither special ([`is_special`])
    /// nor one of this host's own addresses (`own`), or an IP rule admits it.
    pub fn admits_resolved(&self, host: &str, addr: SocketAddr, own: &HostAddrs) -> bool {
        match self.name_match(host, addr.port()) {
            Some(NameMatch::Exact) => true,
            Some(NameMatch::Wildcard) => {
                !(is_special(addr.ip()) || own.contains(addr.ip())) || self.admits_addr(addr)
            }
            None => false,
        }
    }

    /// Whether some rule is a wildcard name rule: the only rules for which
    /// [`EgressRules::admits_resolved`] consults the host's own addresses.
    pub fn has_wildcard(&self) -> bool {
        self.0
            .iter()
            .any(|r| matches!(r, EgressRule::Name(n) if n.wildcard))
    }
}

/// This host's own IP addresses: those configured on its interfaces (the
/// caller reads them, e.g. with `getifaddrs(3)`), which a wildcard name rule
/// does not reach unless an IP rule admits the address (see [`EgressRule`]).
/// A service bound to `0.0.0.0` or `[::]` answers on each of them, public
/// ones included, so a name that resolves to one reaches the host itself.
///
/// Kept canonical: IPv4-mapped IPv6 addresses as IPv4, sorted, without
/// duplicates.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HostAddrs(Vec<IpAddr>);

impl HostAddrs {
    /// The set of `addrs` (IPv4-mapped IPv6 taken as IPv4). An empty set
    /// means no address is the host's own: pass one only when the host
    /// really has no address, never for addresses that could not be read.
    pub fn new(addrs: impl IntoIterator<Item = IpAddr>) -> Self {
        let mut v: Vec<IpAddr> = addrs.into_iter().map(canonical_ip).collect();
        v.sort_unstable();
        v.dedup();
        Self(v)
    }

    /// Whether `ip` (IPv4-mapped IPv6 taken as IPv4) is one of them.
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.0.binary_search(&canonical_ip(ip)).is_ok()
    }

    /// The addresses, sorted.
    pub fn as_slice(&self) -> &[IpAddr] {
        &self.0
    }
}

impl FromIterator<IpAddr> for HostAddrs {
    fn from_iter<I: IntoIterator<Item = IpAddr>>(iter: I) -> Self {
        Self::new(iter)
    }
}

impl From<Vec<EgressRule>> for EgressRules {
    fn from(rules: Vec<EgressRule>) -> Self {
        Self(rules)
    }
}

impl FromIterator<EgressRule> for EgressRules {
    fn from_iter<I: IntoIterator<Item = EgressRule>>(iter: I) -> Self {
        Self(iter.into_iter().collect())
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
        // Public (no traffic is sent; these only need to be outside the
        // special ranges): any covering rule, port when given.
        assert!(admit(&["0.0.0.0/0"], "1.2.3.4", 443));
        assert!(admit(&["1.2.3.0/24:443"], "1.2.3.4", 443));
        assert!(!admit(&["1.2.3.0/24:443"], "1.2.3.4", 80));
        assert!(!admit(&["1.2.3.0/24"], "5.6.7.8", 80));
        assert!(admit(&["::/0"], "2a00::1", 443));
        assert!(!admit(&[], "1.2.3.4", 443));
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
        assert!(!admit(&["::/0"], "::ffff:1.2.3.4", 80));
        assert!(admit(&["0.0.0.0/0"], "::ffff:1.2.3.4", 80));
        assert!(!admit(&["0.0.0.0/0"], "::ffff:127.0.0.1", 80));
        assert!(admit(&["127.0.0.1:80"], "::ffff:127.0.0.1", 80));
        // IPv4 rules never match IPv6 destinations and the other way round.
        assert!(!admit(&["0.0.0.0/0"], "2a00::1", 80));
        assert!(!admit(&["::/0"], "1.2.3.4", 80));
    }

    #[test]
    fn registry_ranges_are_special_and_need_a_rule_within_them() {
        let admit = |rule: &str, dest: &str| r(rule).admits(ip(dest), 80);
        // One address inside (and the first and last) of each range added
        // from the IANA registries, refused by the broadest rule.
        for (net, first, last) in [
            ("192.0.0.0/24", "192.0.0.0", "192.0.0.255"),
            ("192.0.2.0/24", "192.0.2.0", "192.0.2.255"),
            ("192.31.196.0/24", "192.31.196.0", "192.31.196.255"),
            ("192.52.193.0/24", "192.52.193.0", "192.52.193.255"),
            ("192.88.99.0/24", "192.88.99.0", "192.88.99.255"),
            ("192.175.48.0/24", "192.175.48.0", "192.175.48.255"),
            ("198.18.0.0/15", "198.18.0.0", "198.19.255.255"),
            ("198.51.100.0/24", "198.51.100.0", "198.51.100.255"),
            ("203.0.113.0/24", "203.0.113.0", "203.0.113.255"),
            ("::/96", "::2", "::ffff:ffff"),
            (
                "64:ff9b:1::/48",
                "64:ff9b:1::",
                "64:ff9b:1:ffff:ffff:ffff:ffff:ffff",
            ),
            ("100::/64", "100::", "100::ffff:ffff:ffff:ffff"),
            (
                "100:0:0:1::/64",
                "100:0:0:1::",
                "100:0:0:1:ffff:ffff:ffff:ffff",
            ),
            (
                "2001::/23",
                "2001::",
                "2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff",
            ),
            (
                "2001:db8::/32",
                "2001:db8::",
                "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff",
            ),
            (
                "2620:4f:8000::/48",
                "2620:4f:8000::",
                "2620:4f:8000:ffff:ffff:ffff:ffff:ffff",
            ),
            (
                "3fff::/20",
                "3fff::",
                "3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff",
            ),
            (
                "5f00::/16",
                "5f00::",
                "5f00:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            ),
        ] {
            let all = if net.contains(':') {
                "::/0"
            } else {
                "0.0.0.0/0"
            };
            for dest in [first, last] {
                assert!(is_special(ip(dest)), "{dest} in {net}");
                assert!(!admit(all, dest), "{all} admits {dest}");
                assert!(admit(net, dest), "{net} admits {dest}");
                assert!(admit(dest, dest), "{dest} admits itself");
            }
        }
        // Just outside them, public.
        for dest in [
            "191.255.255.255",
            "192.0.1.0",
            "192.0.3.0",
            "192.31.195.255",
            "192.31.197.0",
            "198.17.255.255",
            "198.20.0.0",
            "198.51.99.255",
            "198.51.101.0",
            "203.0.112.255",
            "203.0.114.0",
            "1::",
            "100:0:0:2::",
            "2001:200::",
            "2001:db7:ffff::",
            "2001:db9::",
            "2620:4f:8001::",
            "3fff:1000::",
            "5eff:ffff::",
            "5f01::",
            "2003::",
        ] {
            assert!(!is_special(ip(dest)), "{dest}");
        }
        assert!(!admit("0.0.0.0/0", "198.18.0.1"));
        assert!(!admit("0.0.0.0/0", "255.255.255.255"));
        assert!(admit("198.18.0.0/15", "198.18.0.1"));
        assert!(!admit("198.18.0.0/14", "198.18.0.1"));
        // An exact rule in a documentation range admits it.
        assert!(admit("192.0.2.7:80", "192.0.2.7"));
        assert!(admit("[2001:db8::1]:80", "2001:db8::1"));
        assert!(!admit("192.0.2.7:80", "192.0.2.8"));
        // Nested ranges: the innermost counts; `::/96` does not admit
        // loopback or `::`, only the IPv4-compatible addresses.
        assert!(admit("::/96", "::2"));
        assert!(!admit("::/96", "::1"));
        assert!(!admit("::/96", "::"));
        assert!(admit("::1", "::1"));
    }

    #[test]
    fn nat64_and_6to4_are_special_as_their_embedded_ipv4() {
        // Embedded public: not special, admitted by broad rules (DNS64).
        for dest in [
            "64:ff9b::808:808",
            "64:ff9b::102:304",
            "2002:808:808::1",
            "2002:102:304::",
        ] {
            assert!(!is_special(ip(dest)), "{dest}");
            assert!(r("::/0").admits(ip(dest), 443), "{dest}");
        }
        assert!(r("64:ff9b::/96").admits(ip("64:ff9b::808:808"), 443));
        assert!(r("2002::/16").admits(ip("2002:808:808::1"), 443));
        // Embedded special: special, in the IPv4 range placed in the prefix.
        for (dest, net, prefix) in [
            ("64:ff9b::a00:1", "64:ff9b::a00:0", 104),
            ("64:ff9b::7f00:1", "64:ff9b::7f00:0", 104),
            ("64:ff9b::a9fe:a9fe", "64:ff9b::a9fe:0", 112),
            ("64:ff9b::c000:207", "64:ff9b::c000:200", 120),
            ("64:ff9b::ffff:ffff", "64:ff9b::f000:0", 100),
            ("64:ff9b::", "64:ff9b::", 104),
            ("2002:a00:1::", "2002:a00::", 24),
            ("2002:7f00:1::", "2002:7f00::", 24),
            ("2002:7f00:1:1:2:3:4:5", "2002:7f00::", 24),
            ("2002:c0a8:101::1", "2002:c0a8::", 32),
            ("2002::", "2002::", 24),
        ] {
            assert_eq!(special(ip(dest)), Some((ip(net), prefix)), "{dest}");
            assert!(is_special(ip(dest)), "{dest}");
            assert!(!r("::/0").admits(ip(dest), 80), "{dest}");
            assert!(!r("64:ff9b::/96").admits(ip(dest), 80), "{dest}");
            assert!(!r("2002::/16").admits(ip(dest), 80), "{dest}");
            assert!(r(&format!("{net}/{prefix}")).admits(ip(dest), 80), "{dest}");
            assert!(r(dest).admits(ip(dest), 80), "{dest}");
        }
        // Containment follows: the NAT64 prefix without its special parts
        // is within `::/0`, a special part of it is not.
        let within = |a: &str, b: &str| r(a).within(&r(b));
        assert!(within("64:ff9b::/96", "::/0"));
        assert!(within("2002::/16", "::/0"));
        assert!(!within("64:ff9b::7f00:0/104", "::/0"));
        assert!(!within("64:ff9b::7f00:0/104", "64:ff9b::/96"));
        assert!(within("64:ff9b::7f00:1", "64:ff9b::7f00:0/104"));
        assert!(!within("2002:7f00::/24", "2002::/16"));
        assert!(within("2002:7f00:1::/48", "2002:7f00::/24"));
    }

    #[test]
    fn exact_rules() {
        let rule = NetRule::exact("127.0.0.1:8080".parse().unwrap());
        assert_eq!(rule, r("127.0.0.1:8080"));
        assert!(rule.admits(ip("127.0.0.1"), 8080));
        assert!(!rule.admits(ip("127.0.0.1"), 8081));
        assert_eq!(
            NetRule::exact("[::ffff:10.0.0.1]:1".parse().unwrap()),
            r("10.0.0.1:1")
        );
        assert_eq!(
            NetRule::exact("[::1]:443".parse().unwrap()).to_string(),
            "[::1]:443"
        );
    }

    fn e(s: &str) -> EgressRule {
        s.parse().unwrap_or_else(|err| panic!("{s}: {err}"))
    }

    fn rules(list: &[&str]) -> EgressRules {
        list.iter().map(|s| e(s)).collect()
    }

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn is_special_follows_the_ranges() {
        for s in [
            "127.0.0.1",
            "10.0.0.1",
            "169.254.169.254",
            "::1",
            "fe80::1",
            "::ffff:127.0.0.1",
        ] {
            assert!(is_special(ip(s)), "{s}");
        }
        for s in ["1.2.3.4", "2a00::1", "::ffff:1.2.3.4", "8.8.8.8"] {
            assert!(!is_special(ip(s)), "{s}");
        }
        for s in ["192.0.2.7", "2001:db8::1", "::ffff:192.0.2.7", "198.18.0.1"] {
            assert!(is_special(ip(s)), "{s}");
        }
    }

    #[test]
    fn egress_rules_parse_and_print() {
        for s in [
            "example.com",
            "localhost",
            "example.com:443",
            "*.example.com",
            "*.example.com:443",
            "a-b.c0.example",
            "10.0.0.0/8",
            "192.0.2.7:443",
            "[::1]:8080",
        ] {
            assert_eq!(e(s).to_string(), s);
        }
        assert_eq!(e("Example.COM.").to_string(), "example.com");
        assert_eq!(e("*.Example.com.:443").to_string(), "*.example.com:443");
        assert_eq!(e("example.com:0443").to_string(), "example.com:443");
        assert!(matches!(e("10.0.0.0/8"), EgressRule::Ip(_)));
        assert!(matches!(e("localhost:80"), EgressRule::Name(_)));
        let EgressRule::Name(n) = e("*.Example.com:443") else {
            panic!("not a name rule")
        };
        assert_eq!(
            (n.name(), n.is_wildcard(), n.port()),
            ("example.com", true, Some(443))
        );
    }

    #[test]
    fn egress_refusals() {
        let err = |s: &str| s.parse::<EgressRule>().expect_err(s);
        assert_eq!(err(""), EgressRuleError::Empty);
        for s in [
            "*",
            "*.",
            "*:443",
            "foo.*.com",
            "*foo.com",
            "f*o.com",
            "**.example.com",
            "*.*.example.com",
            "*..",
            "example.*",
        ] {
            assert!(
                matches!(err(s), EgressRuleError::Wildcard { .. }),
                "{s}: {:?}",
                err(s)
            );
        }
        for (s, label) in [
            ("exa_mple.com", "exa_mple"),
            ("a..b", ""),
            (".example.com", ""),
            ("example.com..", ""),
            (":443", ""),
            ("ex ample.com", "ex ample"),
            ("bücher.example", "bücher"),
        ] {
            assert_eq!(
                err(s),
                EgressRuleError::Label {
                    text: s.into(),
                    label: label.into()
                },
                "{s}"
            );
        }
        let long_label = "a".repeat(64);
        assert!(matches!(
            err(&format!("{long_label}.com")),
            EgressRuleError::Label { .. }
        ));
        assert!(e(&format!("{}.com", "a".repeat(63))).to_string().len() == 67);
        // 4 labels of 63 plus 3 dots: 255 characters; 253 is the limit.
        let l = "a".repeat(63);
        let too_long = format!("{l}.{l}.{l}.{l}");
        assert_eq!(
            err(&too_long),
            EgressRuleError::TooLong {
                text: too_long.clone(),
                len: 255
            }
        );
        let just = format!("{l}.{l}.{l}.{}", "a".repeat(61));
        assert_eq!(e(&just).to_string().len(), 253);
        for (s, port) in [
            ("example.com:", ""),
            ("example.com:x", "x"),
            ("example.com:+1", "+1"),
            ("example.com:65536", "65536"),
        ] {
            assert_eq!(
                err(s),
                EgressRuleError::Port {
                    text: s.into(),
                    port: port.into()
                },
                "{s}"
            );
        }
        for (s, label) in [
            ("example.123", "123"),
            ("0x7f000001", "0x7f000001"),
            ("a.0X1f:80", "0X1f"),
        ] {
            assert_eq!(
                err(s),
                EgressRuleError::Numeric {
                    text: s.into(),
                    label: label.into()
                },
                "{s}"
            );
        }
        // Address-looking text is an IP rule, with its errors.
        for s in [
            "127.1",
            "10.0.0.256",
            "10.0.0.0/33",
            "[::1",
            "example.com/8",
            "a:b:c",
            "1.2.3.4:99999",
        ] {
            assert!(
                matches!(err(s), EgressRuleError::Ip(_)),
                "{s}: {:?}",
                err(s)
            );
        }
        // Messages name the text and show examples.
        let msg = err("foo.*.com").to_string();
        assert!(
            msg.contains("\"foo.*.com\"") && msg.contains("*.example.com"),
            "{msg}"
        );
        let msg = err("exa_mple.com").to_string();
        assert!(
            msg.contains("\"exa_mple.com\"") && msg.contains("e.g."),
            "{msg}"
        );
        let msg = err("10.0.0.256").to_string();
        assert!(
            msg.contains("\"10.0.0.256\"") && msg.contains("e.g."),
            "{msg}"
        );
    }

    #[test]
    fn only_an_exact_rule_for_the_port_lists_exactly() {
        let r = EgressRules::new(
            [
                "pkgs.example.com:8080",
                "*.example.com",
                "other.example.com",
                "*.example.org:80",
            ]
            .iter()
            .map(|t| t.parse().unwrap())
            .collect(),
        );
        assert!(r.lists_exactly("pkgs.example.com", 8080));
        assert!(r.lists_exactly("PKGS.example.com.", 8080));
        // Listed, but by no exact rule for that port.
        assert!(r.name_match("pkgs.example.com", 80).is_some());
        assert!(!r.lists_exactly("pkgs.example.com", 80));
        assert!(r.name_match("other.example.com", 80).is_some());
        assert!(!r.lists_exactly("other.example.com", 80));
        assert!(!r.lists_exactly("www.example.org", 80));
        assert!(!r.lists_exactly("bad name", 8080));
    }

    #[test]
    fn name_matching() {
        let exact = e("example.com:443");
        assert!(exact.admits_name("example.com", 443));
        assert!(exact.admits_name("EXAMPLE.com.", 443));
        assert!(!exact.admits_name("example.com", 80));
        assert!(!exact.admits_name("www.example.com", 443));
        assert!(!exact.admits_name("notexample.com", 443));
        assert!(e("localhost").admits_name("localhost", 1));
        let wild = e("*.example.com");
        assert!(wild.admits_name("www.example.com", 80));
        assert!(wild.admits_name("a.b.Example.COM.", 443));
        assert!(!wild.admits_name("example.com", 80));
        assert!(!wild.admits_name("wwwexample.com", 80));
        assert!(!wild.admits_name(".example.com", 80));
        assert!(!wild.admits_name("a..example.com", 80));
        assert!(!wild.admits_name("evil\0.example.com", 80));
        assert!(!wild.admits_name("127.0.0.1.example", 80));
        assert!(!e("*.example.com:443").admits_name("www.example.com", 80));
        // Name rules admit no address, IP rules no name.
        assert!(!e("localhost").admits_addr(sa("127.0.0.1:80")));
        assert!(!e("127.0.0.1").admits_name("localhost", 80));
        assert!(e("127.0.0.1:80").admits_addr(sa("127.0.0.1:80")));
        assert!(!e("0.0.0.0/0").admits_addr(sa("127.0.0.1:80")));
    }

    #[test]
    fn resolved_addresses_and_special_ranges() {
        let none = HostAddrs::new([]);
        let r = rules(&["localhost:8080", "*.example.com", "10.0.0.0/8"]);
        assert_eq!(r.name_match("localhost", 8080), Some(NameMatch::Exact));
        assert_eq!(r.name_match("localhost", 8081), None);
        assert_eq!(
            r.name_match("www.example.com", 1),
            Some(NameMatch::Wildcard)
        );
        assert_eq!(r.name_match("example.com", 1), None);
        assert_eq!(r.name_match("127.0.0.1", 8080), None);
        // An exact name reaches what it resolves to, special or not.
        assert!(r.admits_resolved("localhost", sa("127.0.0.1:8080"), &none));
        assert!(r.admits_resolved("localhost", sa("[::1]:8080"), &none));
        assert!(!r.admits_resolved("localhost", sa("127.0.0.1:8081"), &none));
        // A wildcard name reaches public addresses only, unless an IP rule
        // admits the special one by itself.
        assert!(r.admits_resolved("www.example.com", sa("1.2.3.4:443"), &none));
        assert!(!r.admits_resolved("www.example.com", sa("127.0.0.1:443"), &none));
        assert!(!r.admits_resolved("www.example.com", sa("169.254.169.254:80"), &none));
        assert!(!r.admits_resolved("www.example.com", sa("[::ffff:127.0.0.1]:80"), &none));
        assert!(r.admits_resolved("www.example.com", sa("10.1.2.3:80"), &none));
        // Documentation, benchmarking, NAT64 and 6to4 addresses of special
        // ones are special too; NAT64 of a public address is not.
        for dest in [
            "192.0.2.7:443",
            "198.18.0.1:443",
            "[2001:db8::1]:443",
            "[64:ff9b::7f00:1]:443",
            "[64:ff9b::a9fe:a9fe]:80",
            "[2002:7f00:1::]:443",
        ] {
            assert!(
                !r.admits_resolved("www.example.com", sa(dest), &none),
                "{dest}"
            );
        }
        assert!(r.admits_resolved("www.example.com", sa("[64:ff9b::808:808]:443"), &none));
        // The IPv4 rule `10.0.0.0/8` does not admit its NAT64 form; an IPv6
        // rule within the NAT64 range of `10/8` does.
        assert!(!r.admits_resolved("www.example.com", sa("[64:ff9b::a00:1]:80"), &none));
        assert!(
            rules(&["*.example.com", "64:ff9b::a00:0/104"]).admits_resolved(
                "www.example.com",
                sa("[64:ff9b::a00:1]:80"),
                &none
            )
        );
        // An exact rule wins over a wildcard that also matches.
        let both = rules(&["*.example.com", "api.example.com"]);
        assert_eq!(
            both.name_match("api.example.com", 1),
            Some(NameMatch::Exact)
        );
        assert!(both.admits_resolved("api.example.com", sa("127.0.0.1:1"), &none));
        // Unlisted names are not admitted even when an IP rule covers the
        // address they would resolve to.
        assert!(!rules(&["0.0.0.0/0"]).admits_resolved("example.org", sa("1.2.3.4:80"), &none));
        assert!(rules(&["0.0.0.0/0"]).admits_addr(sa("1.2.3.4:80")));
        assert!(!EgressRules::default().admits_addr(sa("1.2.3.4:80")));
    }

    #[test]
    fn a_wildcard_never_reaches_the_hosts_own_addresses() {
        let own = HostAddrs::new([
            ip("1.2.3.4"),
            ip("::ffff:5.6.7.8"),
            ip("2a00::1"),
            ip("127.0.0.1"),
            ip("1.2.3.4"),
        ]);
        assert_eq!(
            own.as_slice(),
            [ip("1.2.3.4"), ip("5.6.7.8"), ip("127.0.0.1"), ip("2a00::1")]
        );
        assert!(own.contains(ip("5.6.7.8")));
        assert!(own.contains(ip("::ffff:1.2.3.4")));
        assert!(!own.contains(ip("1.2.3.5")));
        let none = HostAddrs::new([]);
        let wild = rules(&["*.example.test"]);
        // The host's own public addresses: refused for a wildcard ...
        for dest in [
            "1.2.3.4:80",
            "5.6.7.8:80",
            "[::ffff:1.2.3.4]:80",
            "[2a00::1]:80",
        ] {
            assert!(
                !wild.admits_resolved("x.example.test", sa(dest), &own),
                "{dest}"
            );
            // ... and admitted when not the host's own (the positive control).
            assert!(
                wild.admits_resolved("x.example.test", sa(dest), &none),
                "{dest}"
            );
        }
        assert!(wild.admits_resolved("x.example.test", sa("1.2.3.5:80"), &own));
        // An exact name rule reaches them: the operator named that host.
        let exact = rules(&["x.example.test:80", "localhost:8080"]);
        assert!(exact.admits_resolved("x.example.test", sa("1.2.3.4:80"), &own));
        assert!(exact.admits_resolved("x.example.test", sa("[2a00::1]:80"), &own));
        assert!(exact.admits_resolved("localhost", sa("127.0.0.1:8080"), &own));
        // So does a wildcard beside an IP rule that admits the address.
        for ip_rule in ["1.2.3.4:80", "1.2.3.0/24", "0.0.0.0/0"] {
            let both = rules(&["*.example.test", ip_rule]);
            assert!(
                both.admits_resolved("x.example.test", sa("1.2.3.4:80"), &own),
                "{ip_rule}"
            );
        }
        assert!(!rules(&["*.example.test", "1.2.3.4:81"]).admits_resolved(
            "x.example.test",
            sa("1.2.3.4:80"),
            &own
        ));
        assert!(wild.has_wildcard());
        assert!(!exact.has_wildcard());
        assert!(!rules(&["0.0.0.0/0"]).has_wildcard());
    }

    #[test]
    fn within_is_containment_of_what_each_rule_admits() {
        let e = |s: &str| {
            s.parse::<EgressRule>()
                .unwrap_or_else(|err| panic!("{s}: {err}"))
        };
        let within = |a: &str, b: &str| e(a).within(&e(b));
        // Names: exact in exact, exact and wildcard beneath a wildcard.
        assert!(within("example.com", "example.com"));
        assert!(within("a.example.com:443", "*.example.com"));
        assert!(within("*.a.example.com", "*.example.com"));
        assert!(within("*.example.com", "*.example.com"));
        assert!(!within("example.com", "*.example.com"));
        assert!(!within("*.example.com", "a.example.com"));
        assert!(!within("example.org", "example.com"));
        // Ports: any covers one, one does not cover any.
        assert!(within("example.com:443", "example.com"));
        assert!(!within("example.com", "example.com:443"));
        assert!(!within("example.com:80", "example.com:443"));
        // Networks.
        assert!(within("10.1.0.0/16", "10.0.0.0/8"));
        assert!(within("10.1.2.3:22", "10.0.0.0/8"));
        assert!(!within("10.0.0.0/8", "10.1.0.0/16"));
        assert!(!within("192.0.2.7", "::/0"));
        // 0.0.0.0/0 admits no loopback address: a loopback rule is not within it.
        assert!(within("1.2.3.4:443", "0.0.0.0/0"));
        // Nor a documentation address, which needs a rule within its range.
        assert!(!within("192.0.2.7:443", "0.0.0.0/0"));
        assert!(within("192.0.2.7:443", "192.0.2.0/24"));
        assert!(!within("192.0.2.0/24", "0.0.0.0/0"));
        assert!(!within("2001:db8::/48", "::/0"));
        // Nested ranges: `::/96` admits `::2`, which `::/0` does not.
        assert!(!within("::/96", "::/0"));
        assert!(within("::/96", "::/96"));
        assert!(within("::1", "::1"));
        assert!(!within("::1", "::/96"));
        assert!(!within("127.0.0.1:8080", "0.0.0.0/0"));
        assert!(within("127.0.0.1:8080", "127.0.0.0/8"));
        assert!(within("0.0.0.0/0", "0.0.0.0/0"));
        // Kinds never mix.
        assert!(!within("localhost:8080", "127.0.0.1:8080"));
        assert!(!within("127.0.0.1:8080", "localhost:8080"));
    }
}
