//! The run's own loopback listeners, under egress rules: a `connect` to a
//! loopback address no rule lists is admitted when every socket listening on
//! that port is one the run made listen, and one of them is bound to exactly
//! that address.
//!
//! The broker performs every `listen` under egress rules (the filter routes
//! it here) and refuses one whose socket is not bound to a loopback address
//! with a port. When it performs one on a socket that was not listening
//! before (`SO_ACCEPTCONN`; a listener handed in from outside is not the
//! run's), it records the socket's cookie (`SO_COOKIE`: a 64-bit number the
//! kernel never gives another socket, `sock_gen_cookie`, net/core/sock_diag.c).
//! It keeps no reference to the socket: the run closing it frees the port
//! exactly as without a broker.
//!
//! At connect time (on the broker thread, and again on the worker right
//! before it connects) the broker lists the TCP sockets listening on the
//! destination port, IPv4 and IPv6, with their cookies (`NETLINK_SOCK_DIAG`,
//! `inet_diag`, as `ss -ltn` does) and admits only when each one's cookie is
//! recorded, and one is bound to the destination address. A port the run
//! stopped listening on and a host service took since shows that service's
//! socket, whose cookie was never recorded: refused, with `ECONNREFUSED` as
//! every refused connect under egress rules. A run's socket that joined a
//! host service's `SO_REUSEPORT` group shows the host's socket beside its
//! own: refused too.
//!
//! Known gap: the check and the kernel's delivery of the SYN are two steps.
//! A host service of the same uid that binds and listens on that port with
//! `SO_REUSEPORT` in the microseconds between them, after the run set
//! `SO_REUSEPORT` on its own listener, would share the connection's
//! delivery. Without `SO_REUSEPORT` on the run's socket the kernel refuses
//! any other bind to the port while it listens (`inet_bind_conflict`,
//! net/ipv4/inet_connection_sock.c), so the check holds until the connect.

use std::collections::HashSet;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex};

use crate::caller::cvt;

/// Records kept before the broker drops those no longer listening.
const PRUNE_AT: usize = 4096;

/// The cookies of the sockets the run made listen on loopback.
#[derive(Debug, Default, Clone)]
pub(crate) struct OwnListeners {
    cookies: Arc<Mutex<HashSet<u64>>>,
}

impl OwnListeners {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<u64>> {
        self.cookies
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether `sock` listens already (before the broker performs a
    /// `listen` on it).
    pub(crate) fn listening(sock: &OwnedFd) -> bool {
        sockopt::<libc::c_int>(sock, libc::SO_ACCEPTCONN).is_ok_and(|v| v != 0)
    }

    /// Records `sock`, which the run just made listen.
    pub(crate) fn record(&self, sock: &OwnedFd) {
        let Ok(cookie) = sockopt::<u64>(sock, libc::SO_COOKIE) else {
            return;
        };
        let mut cookies = self.lock();
        if cookies.len() >= PRUNE_AT {
            if let Ok(live) = listening_sockets(None) {
                let live: HashSet<u64> = live.into_iter().map(|l| l.cookie).collect();
                cookies.retain(|c| live.contains(c));
            }
        }
        cookies.insert(cookie);
    }

    /// Whether a connect to `dest` reaches only the run's own listeners:
    /// `dest` is a loopback address, every socket listening on its port is
    /// recorded, and one is bound to `dest`'s address.
    pub(crate) fn admits(&self, dest: SocketAddr) -> bool {
        let ip = unmapped(dest.ip());
        if !ip.is_loopback() || dest.port() == 0 {
            return false;
        }
        let Ok(found) = listening_sockets(Some(dest.port())) else {
            return false;
        };
        let cookies = self.lock();
        !found.is_empty()
            && found.iter().all(|l| cookies.contains(&l.cookie))
            && found.iter().any(|l| unmapped(l.addr) == ip)
    }
}

fn unmapped(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

fn sockopt<T: Default>(sock: &OwnedFd, opt: libc::c_int) -> io::Result<T> {
    let mut v = T::default();
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: getsockopt into a live T of the size given.
    cvt(libc::c_long::from(unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            opt,
            (&mut v as *mut T).cast(),
            &mut len,
        )
    }))?;
    Ok(v)
}

/// One listening TCP socket, as `inet_diag` reports it.
#[derive(Debug)]
struct Listening {
    addr: IpAddr,
    cookie: u64,
}

const NETLINK_SOCK_DIAG: libc::c_int = 4;
const SOCK_DIAG_BY_FAMILY: u16 = 20;
const TCP_LISTEN: u32 = 10;
/// `sizeof(struct nlmsghdr)`.
const NLMSG_HDR: usize = 16;
/// `sizeof(struct inet_diag_req_v2)`.
const REQ_V2: usize = 56;
/// `sizeof(struct inet_diag_msg)`.
const DIAG_MSG: usize = 72;

/// The TCP sockets listening (on `port`, or on any port), IPv4 and IPv6.
fn listening_sockets(port: Option<u16>) -> io::Result<Vec<Listening>> {
    let mut all = Vec::new();
    for family in [libc::AF_INET, libc::AF_INET6] {
        dump(family, port, &mut all)?;
    }
    Ok(all)
}

/// `inet_diag` dump of the listening TCP sockets of `family`, filtered by
/// source port when one is given (`inet_diag_dump_icsk` compares
/// `idiag_sport` for listeners; checked again here).
fn dump(family: i32, port: Option<u16>, out: &mut Vec<Listening>) -> io::Result<()> {
    // SAFETY: socket(2) with constant arguments; the fd is owned at once.
    let raw = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            NETLINK_SOCK_DIAG,
        )
    };
    cvt(libc::c_long::from(raw))?;
    // SAFETY: a new fd of ours.
    let sock = unsafe { OwnedFd::from_raw_fd(raw) };
    let mut req = [0u8; NLMSG_HDR + REQ_V2];
    req[0..4].copy_from_slice(&((NLMSG_HDR + REQ_V2) as u32).to_ne_bytes());
    req[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    let flags = (libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16;
    req[6..8].copy_from_slice(&flags.to_ne_bytes());
    req[8..12].copy_from_slice(&1u32.to_ne_bytes());
    let body = &mut req[NLMSG_HDR..];
    body[0] = family as u8;
    body[1] = libc::IPPROTO_TCP as u8;
    body[4..8].copy_from_slice(&(1u32 << TCP_LISTEN).to_ne_bytes());
    // inet_diag_sockid at 8: idiag_sport (big-endian) first.
    body[8..10].copy_from_slice(&port.unwrap_or(0).to_be_bytes());
    // SAFETY: send from a live buffer of its length; the kernel is the peer
    // of an unbound netlink socket.
    let sent = unsafe { libc::send(sock.as_raw_fd(), req.as_ptr().cast(), req.len(), 0) };
    cvt(sent as libc::c_long)?;
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        // SAFETY: recv into a live buffer of its length.
        let n = unsafe { libc::recv(sock.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        let n = cvt(n as libc::c_long)? as usize;
        if n == 0 {
            return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
        }
        let mut at = 0;
        while at + NLMSG_HDR <= n {
            let h = &buf[at..n];
            let len = u32::from_ne_bytes([h[0], h[1], h[2], h[3]]) as usize;
            let ty = u16::from_ne_bytes([h[4], h[5]]);
            if len < NLMSG_HDR || len > h.len() {
                return Err(io::Error::from(io::ErrorKind::InvalidData));
            }
            match i32::from(ty) {
                libc::NLMSG_DONE => return Ok(()),
                libc::NLMSG_ERROR => {
                    let errno = h
                        .get(NLMSG_HDR..NLMSG_HDR + 4)
                        .map_or(libc::EIO, |e| -i32::from_ne_bytes([e[0], e[1], e[2], e[3]]));
                    return Err(io::Error::from_raw_os_error(errno));
                }
                _ if ty == SOCK_DIAG_BY_FAMILY && len >= NLMSG_HDR + DIAG_MSG => {
                    if let Some(l) = parse(&h[NLMSG_HDR..len], port) {
                        out.push(l);
                    }
                }
                _ => {}
            }
            // NLMSG_ALIGN
            at += (len + 3) & !3;
        }
    }
}

/// One `inet_diag_msg`: family, state, then `inet_diag_sockid` at 4
/// (sport, dport, src[16], dst[16], if, cookie[2]).
fn parse(m: &[u8], port: Option<u16>) -> Option<Listening> {
    let family = i32::from(m[0]);
    let id = &m[4..52];
    let sport = u16::from_be_bytes([id[0], id[1]]);
    if port.is_some_and(|p| p != sport) || u32::from(m[1]) != TCP_LISTEN {
        return None;
    }
    let src = &id[4..20];
    let addr = match family {
        libc::AF_INET => IpAddr::V4(Ipv4Addr::new(src[0], src[1], src[2], src[3])),
        libc::AF_INET6 => {
            let mut o = [0u8; 16];
            o.copy_from_slice(src);
            IpAddr::V6(Ipv6Addr::from(o))
        }
        _ => return None,
    };
    let c = &id[40..48];
    let cookie = u64::from(u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
        | (u64::from(u32::from_ne_bytes([c[4], c[5], c[6], c[7]])) << 32);
    Some(Listening { addr, cookie })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::os::fd::AsFd;

    fn owned(l: &TcpListener) -> OwnedFd {
        l.as_fd().try_clone_to_owned().unwrap()
    }

    #[test]
    fn the_dump_shows_a_listener_with_its_cookie() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let cookie: u64 = sockopt(&owned(&l), libc::SO_COOKIE).unwrap();
        let found = listening_sockets(Some(port)).unwrap();
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].cookie, cookie);
        assert_eq!(found[0].addr, IpAddr::V4(Ipv4Addr::LOCALHOST));
    }

    #[test]
    fn only_recorded_listeners_are_admitted() {
        let own = OwnListeners::default();
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        assert!(OwnListeners::listening(&owned(&l)));
        assert!(!own.admits(addr));
        own.record(&owned(&l));
        assert!(own.admits(addr));
        // Another loopback address, the same port: nothing listens there.
        assert!(!own.admits(SocketAddr::new(
            Ipv4Addr::new(127, 0, 0, 2).into(),
            addr.port()
        )));
        // IPv4-mapped is the same destination.
        let mapped = Ipv4Addr::LOCALHOST.to_ipv6_mapped();
        assert!(own.admits(SocketAddr::new(mapped.into(), addr.port())));
        // Closed, then the port taken by another (unrecorded) listener.
        drop(l);
        assert!(!own.admits(addr));
        if let Ok(other) = TcpListener::bind(addr) {
            assert!(!own.admits(addr));
            drop(other);
        }
    }
}
