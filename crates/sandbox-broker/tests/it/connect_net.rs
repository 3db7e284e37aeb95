//! Egress rules for IP connects (`BrokerRules::with_allow_net`), on loopback:
//! only listed destinations are connected, loopback only when listed
//! explicitly, IPv4-mapped and `0.0.0.0` destinations taken for what they
//! reach; the rest refused with `ECONNREFUSED` and recorded with host:port.
#![cfg(target_os = "linux")]

use std::net::{Ipv6Addr, SocketAddr, SocketAddrV6, TcpListener};
use std::os::unix::ffi::OsStrExt;

use crate::common::*;
use sandbox_broker::{BrokerDecision, BrokerRules, NetRule, Refusal};

fn rules(fx: &Fixture, allow: &[String]) -> BrokerRules {
    let allow: Vec<NetRule> = allow.iter().map(|s| s.parse().unwrap()).collect();
    fx.rules(&[]).with_allow_net(allow)
}

fn listener() -> (TcpListener, u16) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.set_nonblocking(true).unwrap();
    let port = l.local_addr().unwrap().port();
    (l, port)
}

fn accepted(l: &TcpListener) -> usize {
    let mut n = 0;
    while l.accept().is_ok() {
        n += 1;
    }
    n
}

fn v4(ip: [u8; 4], port: u16) -> Vec<u8> {
    sockaddr_ip(SocketAddr::from((ip, port)))
}

fn mapped(port: u16) -> Vec<u8> {
    let ip = Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0x7f00, 1);
    sockaddr_ip(SocketAddr::V6(SocketAddrV6::new(ip, port, 0, 0)))
}

/// (domain, type, protocol, address) of one connect.
type Try = (i32, i32, i32, Vec<u8>);

/// errno of each connect on a fresh socket into `out` (async-signal-safe).
fn try_each(tries: &[Try], out: &Shared) {
    for (i, (domain, kind, protocol, addr)) in tries.iter().enumerate() {
        // SAFETY: plain socket(2).
        let fd = unsafe { libc::socket(*domain, *kind | libc::SOCK_CLOEXEC, *protocol) };
        if fd < 0 {
            out.set(i, 1000 + errno());
            continue;
        }
        out.set(i, connect_to(fd, addr));
        // SAFETY: our socket.
        unsafe { libc::close(fd) };
    }
}

fn netlink_kernel() -> Vec<u8> {
    // struct sockaddr_nl { family, pad, pid 0 (the kernel), groups 0 }
    let mut a = vec![0u8; 12];
    a[..2].copy_from_slice(&(libc::AF_NETLINK as u16).to_ne_bytes());
    a
}

fn packet_addr() -> Vec<u8> {
    // struct sockaddr_ll: AF_PACKET, the loopback interface.
    let mut a = vec![0u8; 20];
    a[..2].copy_from_slice(&(libc::AF_PACKET as u16).to_ne_bytes());
    a[4..8].copy_from_slice(&1i32.to_ne_bytes());
    a
}

#[test]
fn only_listed_destinations_are_connected() {
    let fx = Fixture::new();
    let (a, pa) = listener();
    let (b, pb) = listener();
    let inside = fx.w.join("in.sock");
    let _unix = unix_listener(&inside, libc::SOCK_STREAM, 16);
    let tcp = (libc::AF_INET, libc::SOCK_STREAM, 0);
    let tcp6 = (libc::AF_INET6, libc::SOCK_STREAM, 0);
    let udp = (libc::AF_INET, libc::SOCK_DGRAM, 0);
    let udp6 = (libc::AF_INET6, libc::SOCK_DGRAM, 0);
    let with = |(d, k, p): (i32, i32, i32), addr: Vec<u8>| (d, k, p, addr);
    let unspec = {
        let mut u = (libc::AF_UNSPEC as u16).to_ne_bytes().to_vec();
        u.resize(16, 0);
        u
    };
    let tries: Vec<Try> = vec![
        with(tcp, v4([127, 0, 0, 1], pa)),
        with(tcp, v4([127, 0, 0, 1], pb)),
        // 0.0.0.0 reaches this host.
        with(tcp, v4([0, 0, 0, 0], pa)),
        with(tcp6, mapped(pa)),
        with(tcp6, mapped(pb)),
        (
            libc::AF_INET,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK,
            0,
            v4([127, 0, 0, 1], pa),
        ),
        with(udp, v4([127, 0, 0, 1], pa)),
        with(udp, v4([127, 0, 0, 1], pb)),
        // An AF_INET6 datagram socket connects to an AF_INET address.
        with(udp6, v4([127, 0, 0, 1], pb)),
        with(udp, unspec),
        with(tcp, v4([127, 0, 0, 1], pa)[..8].to_vec()),
        (
            libc::AF_NETLINK,
            libc::SOCK_RAW,
            libc::NETLINK_ROUTE,
            netlink_kernel(),
        ),
        (libc::AF_PACKET, libc::SOCK_DGRAM, 0, packet_addr()),
        (
            libc::AF_UNIX,
            libc::SOCK_STREAM,
            0,
            sockaddr_un(inside.as_os_str().as_bytes()),
        ),
    ];
    let out = Shared::new(tries.len());
    let run = confined_connect(rules(&fx, &[format!("127.0.0.1:{pa}")]), || {
        try_each(&tries, &out);
        0
    });
    assert_eq!(run.code, 0);
    let refused = libc::ECONNREFUSED;
    assert_eq!(
        out.to_vec(),
        vec![
            0,
            refused,
            refused,
            0,
            refused,
            libc::EINPROGRESS,
            0,
            refused,
            refused,
            0,
            refused,
            0,
            refused,
            0
        ],
        "tcp a, tcp b, tcp 0.0.0.0:a, mapped a, mapped b, non-blocking a, udp a, udp b, udp6 with v4 b, udp AF_UNSPEC, short address, netlink, packet, unix\n{}",
        run.log.explain(20)
    );
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert_eq!(accepted(&a), 3, "tcp a, mapped a, non-blocking a");
    assert_eq!(accepted(&b), 0, "b is not listed");
    // Each refusal is recorded with what it named.
    let refusals: Vec<String> = run
        .log
        .refusals()
        .map(|r| {
            assert_eq!(
                r.decision,
                BrokerDecision::Refused {
                    reason: Refusal::NetNotAllowed
                }
            );
            r.target.path.clone().unwrap()
        })
        .collect();
    let mut want = vec![
        format!("127.0.0.1:{pb}"),
        format!("0.0.0.0:{pa}"),
        format!("[::ffff:127.0.0.1]:{pb}"),
        format!("127.0.0.1:{pb}"),
        format!("127.0.0.1:{pb}"),
        "address family 2, 8 bytes".into(),
        format!("address family {}, 20 bytes", libc::AF_PACKET),
    ];
    let mut got = refusals;
    got.sort();
    want.sort();
    assert_eq!(got, want);
    assert!(run.log.explain(20).contains("no egress rule admits"));

    // Bare: the refused destinations are reachable, and the kernel's own
    // answers for the short address and the packet socket.
    let bare = Shared::new(tries.len());
    try_each(&tries, &bare);
    let bare = bare.to_vec();
    assert_eq!(&bare[1..3], &[0, 0], "b and 0.0.0.0:a connect bare");
    assert_eq!(bare[4], 0, "mapped b connects bare");
    assert_eq!(bare[10], libc::EINVAL);
    assert_eq!(bare[12], libc::EOPNOTSUPP);
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert!(accepted(&b) >= 2);
}

#[test]
fn loopback_needs_a_rule_of_its_own() {
    let fx = Fixture::new();
    let (a, pa) = listener();
    let tries: Vec<Try> = vec![
        (libc::AF_INET, libc::SOCK_STREAM, 0, v4([127, 0, 0, 1], pa)),
        (libc::AF_INET6, libc::SOCK_STREAM, 0, mapped(pa)),
    ];
    for (allow, want) in [
        (
            vec!["0.0.0.0/0".to_string(), "::/0".into()],
            libc::ECONNREFUSED,
        ),
        (vec!["0.0.0.0/0".into(), "127.0.0.0/8".into()], 0),
        (vec![], libc::ECONNREFUSED),
    ] {
        let out = Shared::new(tries.len());
        let run = confined_connect(rules(&fx, &allow), || {
            try_each(&tries, &out);
            0
        });
        assert_eq!(run.code, 0);
        assert_eq!(out.to_vec(), vec![want, want], "{allow:?}");
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(accepted(&a), if want == 0 { 2 } else { 0 }, "{allow:?}");
    }
}
