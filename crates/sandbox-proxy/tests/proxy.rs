//! The proxy end to end, on loopback only: a tiny origin server on
//! 127.0.0.1, reached through CONNECT, HTTP forwarding and SOCKS5, by hand
//! and with curl and Python. Names other than `localhost` go through a test
//! resolver, so no query leaves the machine. Each refusal sits beside a
//! positive control. The tests of the host's own addresses reach an origin
//! bound to the unspecified address through one of this host's interface
//! addresses (delivered locally), or through a public address configured in
//! a network namespace of their own that has nothing but loopback.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use sandbox_core::net::is_special;
use sandbox_proxy::{EgressRule, NetRule, Proxy, ProxyOptions, RefusalReason, Resolver};

const BODY: &str = "hello from the origin";

/// A tiny HTTP origin on 127.0.0.1: answers every request with `body`
/// (`Connection: close`) and keeps each request head (and body) it saw.
struct Origin {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Origin {
    fn start(body: Vec<u8>) -> Origin {
        Origin::start_at("127.0.0.1:0".parse().unwrap(), body)
    }

    /// An origin listening on `bind` (port 0: one the system picks).
    fn start_at(bind: SocketAddr, body: Vec<u8>) -> Origin {
        let listener = TcpListener::bind(bind).unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        let body = Arc::new(body);
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let log = Arc::clone(&log);
                let body = Arc::clone(&body);
                thread::spawn(move || {
                    let head = read_head(&mut stream);
                    let len = head
                        .lines()
                        .find_map(|l| {
                            let (k, v) = l.split_once(':')?;
                            k.eq_ignore_ascii_case("content-length")
                                .then(|| v.trim().parse::<usize>().ok())?
                        })
                        .unwrap_or(0);
                    let mut req_body = vec![0; len];
                    let _ = stream.read_exact(&mut req_body);
                    log.lock()
                        .unwrap()
                        .push(format!("{head}{}", String::from_utf8_lossy(&req_body)));
                    let _ = write!(
                        stream,
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = stream.write_all(&body);
                });
            }
        });
        Origin { addr, seen }
    }

    fn port(&self) -> u16 {
        self.addr.port()
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

fn origin() -> Origin {
    Origin::start(BODY.as_bytes().to_vec())
}

/// A loopback port nothing listens on.
fn closed_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// Reads up to and including the blank line that ends a head, byte by byte
/// (so nothing after it is consumed).
fn read_head(stream: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&head).into_owned()
}

fn read_all(stream: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    let _ = stream.read_to_end(&mut out);
    out
}

/// The body of an HTTP response read to its end.
fn body_of(response: &[u8]) -> String {
    let text = String::from_utf8_lossy(response);
    match text.split_once("\r\n\r\n") {
        Some((_, body)) => body.to_string(),
        None => panic!("no head in {text:?}"),
    }
}

fn rules(list: &[&str]) -> Vec<EgressRule> {
    list.iter()
        .map(|s| s.parse().unwrap_or_else(|e| panic!("{s}: {e}")))
        .collect()
}

fn start(list: &[&str]) -> Proxy {
    Proxy::start(rules(list), ProxyOptions::default()).unwrap()
}

/// A resolver that knows `localhost` and `rebind.example.com` (both
/// 127.0.0.1) and nothing else, and records what it was asked.
fn test_resolver(asked: Arc<Mutex<Vec<String>>>) -> Resolver {
    Arc::new(move |name: &str, port: u16| {
        asked.lock().unwrap().push(name.to_string());
        match name {
            "localhost" | "rebind.example.com" => {
                Ok(vec![SocketAddr::from(([127, 0, 0, 1], port))])
            }
            _ => Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "unknown test name",
            )),
        }
    })
}

fn start_with_resolver(list: &[&str]) -> (Proxy, Arc<Mutex<Vec<String>>>) {
    let asked = Arc::new(Mutex::new(Vec::new()));
    let opts = ProxyOptions::default().resolver(test_resolver(Arc::clone(&asked)));
    (Proxy::start(rules(list), opts).unwrap(), asked)
}

fn client(proxy: &Proxy) -> TcpStream {
    let s = TcpStream::connect(proxy.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s
}

/// Sends `CONNECT target` and returns the reply head and the stream.
fn connect(proxy: &Proxy, target: &str) -> (String, TcpStream) {
    let mut s = client(proxy);
    write!(s, "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").unwrap();
    let head = read_head(&mut s);
    (head, s)
}

/// CONNECT to `target`, then GET / through the tunnel: the body.
fn get_through_tunnel(proxy: &Proxy, target: &str) -> String {
    let (head, mut s) = connect(proxy, target);
    assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
    s.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .unwrap();
    body_of(&read_all(&mut s))
}

/// The status line and body of a refused or failed request.
fn refused(proxy: &Proxy, request: &str) -> (String, String) {
    let mut s = client(proxy);
    s.write_all(request.as_bytes()).unwrap();
    let response = read_all(&mut s);
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text.lines().next().unwrap_or("").to_string();
    (status, body_of(&response))
}

#[test]
fn connect_reaches_a_listed_name() {
    let o = origin();
    let proxy = start(&[&format!("localhost:{}", o.port())]);
    assert_eq!(
        get_through_tunnel(&proxy, &format!("localhost:{}", o.port())),
        BODY
    );
    // Bytes sent right after the CONNECT head (before the 200) are relayed.
    let mut s = client(&proxy);
    write!(
        s,
        "CONNECT localhost:{p} HTTP/1.1\r\n\r\nGET /early HTTP/1.1\r\nHost: x\r\n\r\n",
        p = o.port()
    )
    .unwrap();
    assert!(read_head(&mut s).starts_with("HTTP/1.1 200 Connection established"));
    assert_eq!(body_of(&read_all(&mut s)), BODY);
    assert!(o.seen().iter().any(|r| r.starts_with("GET /early ")));
    assert!(proxy.refusals().is_empty());
}

#[test]
fn connect_refuses_another_port() {
    let o = origin();
    let other = origin();
    let proxy = start(&[&format!("localhost:{}", o.port())]);
    assert_eq!(
        get_through_tunnel(&proxy, &format!("localhost:{}", o.port())),
        BODY
    );
    let target = format!("localhost:{}", other.port());
    let (status, body) = refused(&proxy, &format!("CONNECT {target} HTTP/1.1\r\n\r\n"));
    assert!(status.starts_with("HTTP/1.1 403 "), "{status}");
    assert!(
        body.contains(&target) && body.contains("no egress rule lists"),
        "{body}"
    );
    assert!(other.seen().is_empty());
    let r = proxy.refusals();
    assert_eq!(r.len(), 1);
    assert_eq!((r[0].host.as_str(), r[0].port), ("localhost", other.port()));
    assert_eq!(r[0].reason, RefusalReason::NameNotListed);
}

#[test]
fn connect_refuses_an_unlisted_name_without_resolving_it() {
    let o = origin();
    let (proxy, asked) = start_with_resolver(&[&format!("localhost:{}", o.port())]);
    assert_eq!(
        get_through_tunnel(&proxy, &format!("localhost:{}", o.port())),
        BODY
    );
    let (status, body) = refused(
        &proxy,
        &format!("CONNECT unlisted.example:{} HTTP/1.1\r\n\r\n", o.port()),
    );
    assert!(status.starts_with("HTTP/1.1 403 "), "{status}");
    assert!(
        body.contains(&format!("unlisted.example:{}", o.port())),
        "{body}"
    );
    assert_eq!(*asked.lock().unwrap(), ["localhost"]);
    assert_eq!(proxy.refusals()[0].reason, RefusalReason::NameNotListed);
}

/// Red team F1(b): a `CONNECT` or SOCKS5 host that is no host name (shell
/// code ending in a wildcard's suffix, an empty label, a label past 63
/// bytes, a control character) is refused as such before any rule or
/// lookup, so no proposal is built from it; the twins: a name the wildcard
/// lists reaches the resolver, an unlisted one is `NameNotListed`.
#[test]
fn a_host_that_is_no_host_name_is_refused_before_any_rule_or_lookup() {
    let o = origin();
    let (proxy, asked) = start_with_resolver(&[
        &format!("localhost:{}", o.port()),
        &format!("*.example.com:{}", o.port()),
    ]);
    let long = format!("{}.example.com", "a".repeat(64));
    let bad = [
        "x;touch$IFS/tmp/PWNED;#.example.com",
        "a$(touch${IFS}/tmp/PWNED2).example.com",
        "a..example.com",
        long.as_str(),
    ];
    for host in bad {
        let (status, body) = refused(
            &proxy,
            &format!("CONNECT {host}:{} HTTP/1.1\r\n\r\n", o.port()),
        );
        assert!(status.starts_with("HTTP/1.1 403 "), "{host}: {status}");
        assert!(body.contains("not a host name"), "{host}: {body}");
    }
    let (code, _, _) = socks(&proxy, 1, 3, &name("a`id`.example.com"), o.port());
    assert_eq!(code, 2);
    let (code, _, _) = socks(&proxy, 1, 3, &name("local\x1b[31mhost"), o.port());
    assert_eq!(code, 2);
    let r = proxy.refusals();
    assert_eq!(r.len(), bad.len() + 2, "{r:?}");
    assert!(
        r.iter().all(|r| r.reason == RefusalReason::NotAHostName),
        "{r:?}"
    );
    assert!(asked.lock().unwrap().is_empty(), "nothing looked up");
    // The twins.
    assert_eq!(
        get_through_tunnel(&proxy, &format!("localhost:{}", o.port())),
        BODY
    );
    let (status, _) = refused(
        &proxy,
        &format!("CONNECT ok1.example.com:{} HTTP/1.1\r\n\r\n", o.port()),
    );
    assert!(!status.starts_with("HTTP/1.1 200 "), "{status}");
    assert!(asked
        .lock()
        .unwrap()
        .contains(&"ok1.example.com".to_string()));
    let (status, _) = refused(
        &proxy,
        &format!("CONNECT unlisted.example:{} HTTP/1.1\r\n\r\n", o.port()),
    );
    assert!(status.starts_with("HTTP/1.1 403 "), "{status}");
    assert_eq!(
        proxy.refusals().last().unwrap().reason,
        RefusalReason::NameNotListed
    );
}

#[test]
fn ip_literals_need_ip_rules() {
    let o = origin();
    let literal = format!("127.0.0.1:{}", o.port());
    // A name rule does not admit the address it resolves to as a literal.
    let proxy = start(&[&format!("localhost:{}", o.port())]);
    let (status, body) = refused(&proxy, &format!("CONNECT {literal} HTTP/1.1\r\n\r\n"));
    assert!(status.starts_with("HTTP/1.1 403 "), "{status}");
    assert!(
        body.contains(&literal) && body.contains("no IP egress rule"),
        "{body}"
    );
    assert_eq!(proxy.refusals()[0].reason, RefusalReason::AddressNotAllowed);
    // Every public address is not loopback.
    let proxy = start(&["0.0.0.0/0"]);
    let (status, _) = refused(&proxy, &format!("CONNECT {literal} HTTP/1.1\r\n\r\n"));
    assert!(status.starts_with("HTTP/1.1 403 "), "{status}");
    // The IP rule itself admits it.
    let proxy = start(&[&literal]);
    assert_eq!(get_through_tunnel(&proxy, &literal), BODY);
}

#[test]
fn a_wildcard_never_reaches_a_special_range() {
    let o = origin();
    let target = format!("rebind.example.com:{}", o.port());
    let (proxy, _) = start_with_resolver(&["*.example.com"]);
    let (status, body) = refused(&proxy, &format!("CONNECT {target} HTTP/1.1\r\n\r\n"));
    assert!(status.starts_with("HTTP/1.1 403 "), "{status}");
    assert!(
        body.contains(&target) && body.contains("127.0.0.1"),
        "{body}"
    );
    assert_eq!(
        proxy.refusals()[0].reason,
        RefusalReason::WildcardToSpecial {
            resolved: vec!["127.0.0.1".parse().unwrap()]
        }
    );
    assert!(o.seen().is_empty());
    // Exact, the same name reaches it; so does the wildcard with an IP rule.
    let (proxy, _) = start_with_resolver(&[&target]);
    assert_eq!(get_through_tunnel(&proxy, &target), BODY);
    let (proxy, _) = start_with_resolver(&["*.example.com", &format!("127.0.0.1:{}", o.port())]);
    assert_eq!(get_through_tunnel(&proxy, &target), BODY);
}

/// A resolver that answers `name` with `ip` and nothing else.
fn fixed_resolver(name: &'static str, ip: IpAddr) -> Resolver {
    Arc::new(move |asked: &str, port: u16| {
        if asked == name {
            Ok(vec![SocketAddr::new(ip, port)])
        } else {
            Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "unknown test name",
            ))
        }
    })
}

/// Every address configured on this host's interfaces (in this thread's
/// network namespace), as `getifaddrs(3)` lists them.
fn interface_addresses() -> Vec<IpAddr> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: on success `head` is a list freed below, once.
    assert_eq!(unsafe { libc::getifaddrs(&mut head) }, 0, "getifaddrs");
    let mut out = Vec::new();
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: a node of the list, not yet freed; a non-null address of
        // family AF_INET or AF_INET6 is a sockaddr_in or sockaddr_in6.
        unsafe {
            let sa = (*cur).ifa_addr;
            if !sa.is_null() {
                match i32::from((*sa).sa_family) {
                    libc::AF_INET => {
                        let sin = &*sa.cast::<libc::sockaddr_in>();
                        out.push(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                            sin.sin_addr.s_addr,
                        ))));
                    }
                    libc::AF_INET6 => {
                        let sin6 = &*sa.cast::<libc::sockaddr_in6>();
                        out.push(IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)));
                    }
                    _ => {}
                }
            }
            cur = (*cur).ifa_next;
        }
    }
    // SAFETY: from a successful getifaddrs, freed once.
    unsafe { libc::freeifaddrs(head) };
    out
}

/// Shows, for an address `ip` of this host's own, that `*.example.test`
/// does not reach an origin bound to the unspecified address through a name
/// resolving to `ip` (403, nothing arrives), while an exact rule for the
/// name, and the wildcard beside an IP rule listing the address, do.
fn wildcard_refuses_own_address(ip: IpAddr) {
    let unspecified = match ip {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    };
    let o = Origin::start_at(SocketAddr::new(unspecified, 0), BODY.as_bytes().to_vec());
    let target = format!("x.example.test:{}", o.port());
    let start = |list: &[&str]| {
        let opts = ProxyOptions::default().resolver(fixed_resolver("x.example.test", ip));
        Proxy::start(rules(list), opts).unwrap()
    };
    let proxy = start(&["*.example.test"]);
    let (status, body) = refused(&proxy, &format!("CONNECT {target} HTTP/1.1\r\n\r\n"));
    assert!(status.starts_with("HTTP/1.1 403 "), "{ip}: {status}");
    let want = if is_special(ip) {
        // This host's address is in a special range (e.g. private): refused
        // for that already.
        eprintln!(
            "note: {ip} is special, so the wildcard refuses it as special; \
             the public-address test runs in a network namespace of its own"
        );
        RefusalReason::WildcardToSpecial { resolved: vec![ip] }
    } else {
        assert!(body.contains("this host's own addresses"), "{body}");
        RefusalReason::WildcardToHost {
            resolved: vec![ip],
            own: vec![ip],
        }
    };
    assert!(
        body.contains(&target) && body.contains(&ip.to_string()),
        "{body}"
    );
    assert_eq!(proxy.refusals()[0].reason, want);
    assert!(o.seen().is_empty());
    // Twins: an exact name rule reaches it (the operator named that host);
    // so does the wildcard with an IP rule listing the address.
    let proxy = start(&[&target]);
    assert_eq!(get_through_tunnel(&proxy, &target), BODY, "{ip}");
    let exact_ip = NetRule::exact(SocketAddr::new(ip, o.port())).to_string();
    let proxy = start(&["*.example.test", &exact_ip]);
    assert_eq!(get_through_tunnel(&proxy, &target), BODY, "{ip}");
    assert_eq!(o.seen().len(), 2);
}

#[test]
fn a_wildcard_never_reaches_an_interface_address_of_this_host() {
    // IPv4 first; link-local IPv6 needs a scope, which a name cannot carry.
    let mut addrs: Vec<IpAddr> = interface_addresses()
        .into_iter()
        .filter(|ip| match ip {
            IpAddr::V4(v4) => !v4.is_loopback(),
            IpAddr::V6(v6) => !v6.is_loopback() && (v6.segments()[0] & 0xffc0) != 0xfe80,
        })
        .collect();
    addrs.sort_by_key(|ip| (ip.is_ipv6(), is_special(*ip)));
    if let Some(&ip) = addrs.first() {
        wildcard_refuses_own_address(ip);
        return;
    }
    // This host has no address but loopback and link-local ones: give it
    // one, in a network namespace of this test's own.
    #[cfg(target_os = "linux")]
    {
        let own = thread::spawn(|| {
            let (v4, _) = netns_with_public_addresses()?;
            wildcard_refuses_own_address(v4);
            Ok::<_, std::io::Error>(())
        })
        .join()
        .unwrap();
        if let Err(e) = own {
            cannot_do_its_job(
                "a_wildcard_never_reaches_an_interface_address_of_this_host",
                &format!(
                    "no address but loopback and link-local ones, and no network \
                     namespace of its own ({e})"
                ),
            );
        }
    }
    #[cfg(not(target_os = "linux"))]
    cannot_do_its_job(
        "a_wildcard_never_reaches_an_interface_address_of_this_host",
        "this host has no address but loopback and link-local ones",
    );
}

/// A test that cannot do its job on this host fails under CI (`CI` set) and
/// as root; elsewhere it prints one `SKIPPED` line and returns.
#[track_caller]
fn cannot_do_its_job(test: &str, why: &str) {
    // SAFETY: geteuid has no preconditions.
    let must = std::env::var_os("CI").is_some() || unsafe { libc::geteuid() } == 0;
    assert!(
        !must,
        "{test} cannot do its job here ({why}); under CI or as root that is a failure"
    );
    eprintln!("SKIPPED {test}: {why}");
}

/// Enters a new network namespace (this thread only) with loopback up and
/// the public addresses `1.2.3.4` and `2a00::1` on it: an interface
/// configuration of the kind the host-address check exists for, where
/// nothing but loopback exists, so nothing leaves. Needs CAP_SYS_ADMIN and
/// CAP_NET_ADMIN; `Err` without them.
#[cfg(target_os = "linux")]
fn netns_with_public_addresses() -> std::io::Result<(IpAddr, IpAddr)> {
    use std::io::Error;
    let v4 = Ipv4Addr::new(1, 2, 3, 4);
    let v6 = Ipv6Addr::new(0x2a00, 0, 0, 0, 0, 0, 0, 1);
    let check = |r: libc::c_int| {
        if r < 0 {
            Err(Error::last_os_error())
        } else {
            Ok(r)
        }
    };
    // SAFETY: plain system calls on descriptors and structures owned here.
    unsafe {
        check(libc::unshare(libc::CLONE_NEWNET))?;
        let fd = check(libc::socket(
            libc::AF_INET,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            0,
        ))?;
        let named = |name: &str| {
            let mut ifr: libc::ifreq = std::mem::zeroed();
            for (d, s) in ifr.ifr_name.iter_mut().zip(name.bytes()) {
                *d = s as libc::c_char;
            }
            ifr
        };
        let mut ifr = named("lo");
        let up = check(libc::ioctl(fd, libc::SIOCGIFFLAGS as _, &mut ifr)).and_then(|_| {
            ifr.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
            check(libc::ioctl(fd, libc::SIOCSIFFLAGS as _, &ifr))
        });
        let mut ifr = named("lo:1");
        let sin = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: 0,
            sin_addr: libc::in_addr {
                s_addr: u32::from(v4).to_be(),
            },
            sin_zero: [0; 8],
        };
        std::ptr::write(
            std::ptr::addr_of_mut!(ifr.ifr_ifru.ifru_addr).cast::<libc::sockaddr_in>(),
            sin,
        );
        let added = up.and_then(|_| check(libc::ioctl(fd, libc::SIOCSIFADDR as _, &ifr)));
        libc::close(fd);
        added?;
        let fd6 = check(libc::socket(
            libc::AF_INET6,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            0,
        ))?;
        let ifr6 = libc::in6_ifreq {
            ifr6_addr: libc::in6_addr {
                s6_addr: v6.octets(),
            },
            ifr6_prefixlen: 128,
            ifr6_ifindex: libc::if_nametoindex(c"lo".as_ptr()) as libc::c_int,
        };
        let added = check(libc::ioctl(fd6, libc::SIOCSIFADDR as _, &ifr6));
        libc::close(fd6);
        added?;
    }
    Ok((IpAddr::V4(v4), IpAddr::V6(v6)))
}

#[cfg(target_os = "linux")]
#[test]
fn a_wildcard_never_reaches_a_public_address_of_this_host() {
    // The namespace is this thread's (and the proxy's threads it starts).
    thread::spawn(|| {
        let (v4, v6) = match netns_with_public_addresses() {
            Ok(addrs) => addrs,
            Err(e) => {
                cannot_do_its_job(
                    "a_wildcard_never_reaches_a_public_address_of_this_host",
                    &format!("cannot configure a network namespace of its own ({e}); run as root"),
                );
                return;
            }
        };
        let own = interface_addresses();
        assert!(own.contains(&v4) && own.contains(&v6), "{own:?}");
        for ip in [v4, v6] {
            assert!(!is_special(ip), "{ip}");
            wildcard_refuses_own_address(ip);
        }
    })
    .join()
    .unwrap();
}

#[test]
fn the_proxy_is_not_its_own_destination() {
    let o = origin();
    let proxy = start(&["127.0.0.0/8"]);
    assert_eq!(
        get_through_tunnel(&proxy, &format!("127.0.0.1:{}", o.port())),
        BODY
    );
    let (status, _) = refused(
        &proxy,
        &format!("CONNECT {} HTTP/1.1\r\n\r\n", proxy.addr()),
    );
    assert!(status.starts_with("HTTP/1.1 403 "), "{status}");
    assert_eq!(proxy.refusals()[0].reason, RefusalReason::ProxyItself);
}

#[test]
fn malformed_requests_get_400() {
    let o = origin();
    let proxy = start(&[&format!("localhost:{}", o.port())]);
    assert_eq!(
        get_through_tunnel(&proxy, &format!("localhost:{}", o.port())),
        BODY
    );
    for request in [
        "HELLO\r\n\r\n".to_string(),
        "CONNECT localhost HTTP/1.1\r\n\r\n".to_string(),
        "CONNECT [localhost]:80 HTTP/1.1\r\n\r\n".to_string(),
        "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n".to_string(),
        format!("GET https://localhost:{}/ HTTP/1.1\r\n\r\n", o.port()),
        format!("GET http://u@localhost:{}/ HTTP/1.1\r\n\r\n", o.port()),
        "GET http://localhost:0/ HTTP/1.1\r\n\r\n".to_string(),
        "GET http://lo calhost/ HTTP/1.1\r\n\r\n".to_string(),
    ] {
        let (status, body) = refused(&proxy, &request);
        assert!(status.starts_with("HTTP/1.1 400 "), "{request:?}: {status}");
        assert!(body.contains("bad request"), "{body}");
    }
    assert!(o.seen().len() == 1, "{:?}", o.seen());
    assert!(proxy.refusals().is_empty());
}

#[test]
fn heads_are_bounded_in_size_and_time() {
    let o = origin();
    let opts = ProxyOptions::default()
        .max_head_bytes(1024)
        .head_timeout(Duration::from_millis(300));
    let proxy = Proxy::start(rules(&[&format!("localhost:{}", o.port())]), opts).unwrap();
    assert_eq!(
        get_through_tunnel(&proxy, &format!("localhost:{}", o.port())),
        BODY
    );
    let big = format!(
        "GET http://localhost:{}/ HTTP/1.1\r\nX-Big: {}\r\n\r\n",
        o.port(),
        "a".repeat(2000)
    );
    let (status, _) = refused(&proxy, &big);
    assert!(status.starts_with("HTTP/1.1 431 "), "{status}");
    // A head that never ends: 408 after the head timeout.
    let started = Instant::now();
    let (status, _) = refused(&proxy, "GET http://localhost/ HTTP/1.1\r\n");
    assert!(status.starts_with("HTTP/1.1 408 "), "{status}");
    assert!(started.elapsed() < Duration::from_secs(10));
    // A silent SOCKS5 client is dropped after the head timeout too.
    let mut s = client(&proxy);
    s.write_all(&[5]).unwrap();
    let started = Instant::now();
    assert!(read_all(&mut s).is_empty());
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn forwarding_rewrites_the_request() {
    let o = origin();
    let proxy = start(&[&format!("localhost:{}", o.port())]);
    let mut s = client(&proxy);
    write!(
        s,
        "POST http://localhost:{p}/path?q=1 HTTP/1.1\r\nHost: elsewhere.example\r\n\
         Proxy-Connection: keep-alive\r\nProxy-Authorization: Basic eDp5\r\nX-Keep: 1\r\n\
         Content-Length: 4\r\n\r\nping",
        p = o.port()
    )
    .unwrap();
    assert_eq!(body_of(&read_all(&mut s)), BODY);
    let seen = o.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        seen[0],
        format!(
            "POST /path?q=1 HTTP/1.1\r\nHost: localhost:{}\r\nX-Keep: 1\r\nContent-Length: 4\r\n\
             Connection: close\r\n\r\nping",
            o.port()
        )
    );
    // Refused: another port.
    let other = origin();
    let (status, body) = refused(
        &proxy,
        &format!("GET http://localhost:{}/ HTTP/1.1\r\n\r\n", other.port()),
    );
    assert!(status.starts_with("HTTP/1.1 403 "), "{status}");
    assert!(
        body.contains(&format!("localhost:{}", other.port())),
        "{body}"
    );
    assert!(other.seen().is_empty());
}

#[test]
fn unreachable_destinations_get_502() {
    let o = origin();
    let closed = closed_port();
    let proxy = start(&[
        &format!("localhost:{}", o.port()),
        &format!("localhost:{closed}"),
    ]);
    assert_eq!(
        get_through_tunnel(&proxy, &format!("localhost:{}", o.port())),
        BODY
    );
    let (status, body) = refused(
        &proxy,
        &format!("CONNECT localhost:{closed} HTTP/1.1\r\n\r\n"),
    );
    assert!(status.starts_with("HTTP/1.1 502 "), "{status}");
    assert!(body.contains(&format!("localhost:{closed}")), "{body}");
    assert!(proxy.refusals().is_empty());
}

/// SOCKS5: greeting with `methods`; the method the proxy chose.
fn socks_greet(s: &mut TcpStream, methods: &[u8]) -> [u8; 2] {
    let mut greeting = vec![5, methods.len() as u8];
    greeting.extend_from_slice(methods);
    s.write_all(&greeting).unwrap();
    let mut choice = [0u8; 2];
    s.read_exact(&mut choice).unwrap();
    choice
}

/// SOCKS5: a request with `cmd`, address type and bytes; the reply code,
/// the bound address, and the stream.
fn socks(proxy: &Proxy, cmd: u8, atyp: u8, addr: &[u8], port: u16) -> (u8, SocketAddr, TcpStream) {
    let mut s = client(proxy);
    assert_eq!(socks_greet(&mut s, &[0]), [5, 0]);
    let mut req = vec![5, cmd, 0, atyp];
    req.extend_from_slice(addr);
    req.extend_from_slice(&port.to_be_bytes());
    s.write_all(&req).unwrap();
    let mut head = [0u8; 4];
    s.read_exact(&mut head).unwrap();
    assert_eq!((head[0], head[2]), (5, 0));
    let bound = match head[3] {
        1 => {
            let mut b = [0u8; 6];
            s.read_exact(&mut b).unwrap();
            SocketAddr::from(([b[0], b[1], b[2], b[3]], u16::from_be_bytes([b[4], b[5]])))
        }
        4 => {
            let mut b = [0u8; 18];
            s.read_exact(&mut b).unwrap();
            let ip: [u8; 16] = b[..16].try_into().unwrap();
            SocketAddr::from((ip, u16::from_be_bytes([b[16], b[17]])))
        }
        other => panic!("bound address type {other}"),
    };
    (head[1], bound, s)
}

fn name(n: &str) -> Vec<u8> {
    let mut v = vec![n.len() as u8];
    v.extend_from_slice(n.as_bytes());
    v
}

fn socks_get(mut s: TcpStream) -> String {
    s.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .unwrap();
    body_of(&read_all(&mut s))
}

#[test]
fn socks5_reaches_a_listed_name_and_refuses_others() {
    let o = origin();
    let proxy = start(&[&format!("localhost:{}", o.port())]);
    let (code, bound, s) = socks(&proxy, 1, 3, &name("localhost"), o.port());
    assert_eq!(code, 0);
    assert_eq!(bound.ip().to_string(), "127.0.0.1");
    assert_ne!(bound.port(), 0);
    assert_eq!(socks_get(s), BODY);
    // Refused: another port, an unlisted name, the IP literal the name
    // resolves to (name rules admit no literals; an IP literal sent as a
    // domain name is a literal too).
    let other = origin();
    for (atyp, addr, port) in [
        (3, name("localhost"), other.port()),
        (3, name("unlisted.example"), o.port()),
        (1, vec![127, 0, 0, 1], o.port()),
        (3, name("127.0.0.1"), o.port()),
        (4, std::net::Ipv6Addr::LOCALHOST.octets().to_vec(), o.port()),
    ] {
        let (code, bound, mut s) = socks(&proxy, 1, atyp, &addr, port);
        assert_eq!(code, 2, "{atyp} {addr:?}");
        assert_eq!(bound, SocketAddr::from(([0, 0, 0, 0], 0)));
        assert!(read_all(&mut s).is_empty());
    }
    // A name with control characters is refused and logged escaped.
    let (code, _, _) = socks(&proxy, 1, 3, &name("local\x1b[31mhost\n"), o.port());
    assert_eq!(code, 2);
    assert_eq!(proxy.refusals()[5].host, "local\\x1b[31mhost\\n");
    let reasons: Vec<_> = proxy
        .refusals()
        .into_iter()
        .take(5)
        .map(|r| r.reason)
        .collect();
    assert_eq!(
        reasons,
        [
            RefusalReason::NameNotListed,
            RefusalReason::NameNotListed,
            RefusalReason::AddressNotAllowed,
            RefusalReason::AddressNotAllowed,
            RefusalReason::AddressNotAllowed,
        ]
    );
    assert!(other.seen().is_empty());
}

#[test]
fn socks5_ipv4_needs_an_ip_rule() {
    let o = origin();
    let proxy = start(&[&format!("127.0.0.1:{}", o.port())]);
    let (code, _, s) = socks(&proxy, 1, 1, &[127, 0, 0, 1], o.port());
    assert_eq!(code, 0);
    assert_eq!(socks_get(s), BODY);
    // The IP rule admits no name.
    let (code, _, _) = socks(&proxy, 1, 3, &name("localhost"), o.port());
    assert_eq!(code, 2);
}

#[test]
fn socks5_refuses_what_it_does_not_speak() {
    let o = origin();
    let proxy = start(&[&format!("localhost:{}", o.port())]);
    let (code, _, _) = socks(&proxy, 1, 3, &name("localhost"), o.port());
    assert_eq!(code, 0);
    // Only the no-authentication method: username/password alone gets 0xFF.
    let mut s = client(&proxy);
    assert_eq!(socks_greet(&mut s, &[2]), [5, 0xFF]);
    assert!(read_all(&mut s).is_empty());
    let mut s = client(&proxy);
    assert_eq!(socks_greet(&mut s, &[]), [5, 0xFF]);
    // BIND and UDP ASSOCIATE: command not supported; an unknown address type.
    for cmd in [2, 3] {
        let (code, _, _) = socks(&proxy, cmd, 3, &name("localhost"), o.port());
        assert_eq!(code, 7, "command {cmd}");
    }
    let mut s = client(&proxy);
    assert_eq!(socks_greet(&mut s, &[0]), [5, 0]);
    s.write_all(&[5, 1, 0, 9, 0, 0]).unwrap();
    let mut reply = [0u8; 10];
    s.read_exact(&mut reply).unwrap();
    assert_eq!(reply[1], 8);
    // Unreachable: connection refused.
    let closed = closed_port();
    let proxy = start(&[&format!("localhost:{closed}")]);
    let (code, _, _) = socks(&proxy, 1, 3, &name("localhost"), closed);
    assert_eq!(code, 5);
    assert!(proxy.refusals().is_empty());
}

#[test]
fn a_large_transfer_arrives_intact() {
    let data: Vec<u8> = (0..24 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    let o = Origin::start(data.clone());
    let proxy = start(&[&format!("localhost:{}", o.port())]);
    let (head, mut s) = connect(&proxy, &format!("localhost:{}", o.port()));
    assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let head = read_head(&mut s);
    assert!(
        head.contains(&format!("Content-Length: {}", data.len())),
        "{head}"
    );
    let got = read_all(&mut s);
    assert!(got == data, "{} bytes, expected {}", got.len(), data.len());
}

#[test]
fn connections_beyond_the_cap_are_closed() {
    let o = origin();
    let opts = ProxyOptions::default().max_connections(2);
    let proxy = Proxy::start(rules(&[&format!("localhost:{}", o.port())]), opts).unwrap();
    let a = client(&proxy);
    let b = client(&proxy);
    // Both idle clients hold their slots; a third is closed at once.
    thread::sleep(Duration::from_millis(200));
    let mut c = client(&proxy);
    let mut byte = [0u8; 1];
    assert_eq!(c.read(&mut byte).unwrap_or(0), 0);
    drop((a, b));
    // Freed slots serve again.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        // A write may meet the proxy closing this one while it is full.
        let mut s = client(&proxy);
        let _ = write!(s, "CONNECT localhost:{} HTTP/1.1\r\n\r\n", o.port());
        if read_head(&mut s).starts_with("HTTP/1.1 200 ") {
            break;
        }
        assert!(Instant::now() < deadline, "slots were not freed");
        thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn refusals_are_kept_bounded_and_counted() {
    let o = origin();
    let proxy = start(&[&format!("localhost:{}", o.port())]);
    for i in 0..70 {
        let (status, _) = refused(
            &proxy,
            &format!("CONNECT host{i}.example:1 HTTP/1.1\r\n\r\n"),
        );
        assert!(status.starts_with("HTTP/1.1 403 "));
    }
    let kept = proxy.refusals();
    assert_eq!(kept.len(), sandbox_proxy::MAX_REFUSALS_KEPT);
    assert_eq!(kept[0].host, "host0.example");
    assert_eq!(
        kept[0].to_string(),
        "host0.example:1: no egress rule lists this host name and port (IP rules do not admit names)"
    );
    assert_eq!(proxy.refusal_count(), 70);
    assert_eq!(
        get_through_tunnel(&proxy, &format!("localhost:{}", o.port())),
        BODY
    );
}

#[test]
fn shutdown_closes_the_listener_and_open_tunnels() {
    let o = origin();
    let mut proxy = start(&[&format!("localhost:{}", o.port())]);
    let addr = proxy.addr();
    let (head, mut tunnel) = connect(&proxy, &format!("localhost:{}", o.port()));
    assert!(head.starts_with("HTTP/1.1 200 "));
    let idle = client(&proxy);
    let started = Instant::now();
    proxy.shutdown();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    // The tunnel and the idle client were closed; nothing listens any more.
    let mut byte = [0u8; 1];
    assert_eq!(tunnel.read(&mut byte).unwrap_or(0), 0);
    drop(idle);
    assert!(TcpStream::connect(addr).is_err());
    proxy.shutdown();
    // Drop alone does the same.
    let proxy = start(&[]);
    let addr = proxy.addr();
    assert!(TcpStream::connect(addr).is_ok());
    drop(proxy);
    assert!(TcpStream::connect(addr).is_err());
    let _ = tunnel.shutdown(Shutdown::Both);
}

#[test]
fn env_points_clients_at_the_proxy() {
    let proxy = start(&[]);
    let http = format!("http://{}", proxy.addr());
    let socks = format!("socks5h://{}", proxy.addr());
    let env = proxy.env();
    let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    for k in ["HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy"] {
        assert_eq!(get(k), Some(http.as_str()), "{k}");
    }
    for k in ["ALL_PROXY", "all_proxy"] {
        assert_eq!(get(k), Some(socks.as_str()), "{k}");
    }
    // Loopback goes around the proxy: the connect broker decides it (the
    // run's own listeners, listed addresses, pinned localhost).
    for k in ["NO_PROXY", "no_proxy"] {
        assert_eq!(get(k), Some(sandbox_proxy::LOOPBACK_BYPASS), "{k}");
    }
    assert_eq!(env.len(), 8);
    assert_eq!(proxy.net_rule().to_string(), proxy.addr().to_string());
}

/// The proxy's environment for a client whose origin stands in for a remote
/// host: the origins of these tests listen on loopback, which the real
/// bypass list ([`sandbox_proxy::LOOPBACK_BYPASS`]) sends around the proxy.
fn remote_env(proxy: &Proxy) -> Vec<(String, String)> {
    let mut env = proxy.env();
    env.retain(|(k, _)| !k.eq_ignore_ascii_case("no_proxy"));
    env.extend([
        ("NO_PROXY".to_string(), String::new()),
        ("no_proxy".to_string(), String::new()),
    ]);
    env
}

/// A command with a clean environment: PATH, then `env`.
fn command(program: &str, env: &[(String, String)]) -> Command {
    let mut cmd = Command::new(program);
    cmd.env_clear();
    if let Some(path) = std::env::var_os("PATH") {
        cmd.env("PATH", path);
    }
    cmd.envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    cmd
}

/// Runs `cmd`; stdout, stderr and success. Fails when the program is
/// missing (curl and python3 are required on the machine and in CI).
fn run(mut cmd: Command) -> (String, String, bool) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?} (it is required): {e}"));
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.status.success(),
    )
}

#[test]
fn curl_goes_through_the_http_proxy() {
    let o = origin();
    let other = origin();
    let proxy = start(&[&format!("localhost:{}", o.port())]);
    let via = format!("http://{}", proxy.addr());
    let curl = |port: u16| {
        let mut cmd = command("curl", &[]);
        cmd.args([
            "-sS",
            "--max-time",
            "20",
            "-w",
            "\n%{http_code}",
            "--proxy",
            &via,
        ]);
        cmd.arg(format!("http://localhost:{port}/"));
        run(cmd)
    };
    let (out, err, ok) = curl(o.port());
    assert!(ok, "{err}");
    assert_eq!(out, format!("{BODY}\n200"));
    // The unlisted port is refused: curl did not bypass the proxy for
    // localhost.
    let (out, err, ok) = curl(other.port());
    assert!(ok, "{err}");
    assert!(out.ends_with("\n403") && out.contains("refused"), "{out}");
    assert!(other.seen().is_empty());
}

#[test]
fn curl_honours_the_proxy_environment() {
    let o = origin();
    let other = origin();
    let proxy = start(&[&format!("localhost:{}", o.port())]);
    let curl = |env: &[(String, String)], port: u16| {
        let mut cmd = command("curl", env);
        cmd.args(["-sS", "--max-time", "20", "-w", "\n%{http_code}"]);
        cmd.arg(format!("http://localhost:{port}/"));
        run(cmd)
    };
    // The whole environment, over a bypass list as a runner may have it
    // (its own list comes after and wins; loopback made remote here).
    let mut env = vec![
        ("NO_PROXY".to_string(), "pkgs.example.com".to_string()),
        ("no_proxy".to_string(), "pkgs.example.com".to_string()),
    ];
    env.extend(remote_env(&proxy));
    let (out, err, ok) = curl(&env, o.port());
    assert!(ok, "{err}");
    assert_eq!(out, format!("{BODY}\n200"));
    let (out, _, _) = curl(&env, other.port());
    assert!(out.ends_with("\n403"), "{out}");
    // ALL_PROXY alone: SOCKS5 with proxy-side resolution (socks5h).
    let socks: Vec<(String, String)> = remote_env(&proxy)
        .into_iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("all_proxy") || k.eq_ignore_ascii_case("no_proxy"))
        .collect();
    assert!(socks.iter().any(|(_, v)| v.starts_with("socks5h://")));
    let before = proxy.refusal_count();
    let (out, err, ok) = curl(&socks, o.port());
    assert!(ok, "{err}");
    assert_eq!(out, format!("{BODY}\n200"));
    let (_, err, ok) = curl(&socks, other.port());
    assert!(!ok, "curl reached an unlisted port through SOCKS5");
    assert!(
        err.to_lowercase().contains("socks") || err.contains("proxy"),
        "{err}"
    );
    let r = proxy.refusals();
    assert_eq!(proxy.refusal_count(), before + 1);
    assert_eq!(r.last().unwrap().host, "localhost");
    assert_eq!(r.last().unwrap().port, other.port());
    assert!(other.seen().is_empty());
}

#[test]
fn python_urllib_honours_the_proxy_environment() {
    let o = origin();
    let other = origin();
    let proxy = start(&[&format!("localhost:{}", o.port())]);
    let python = |port: u16| {
        let mut cmd = command("python3", &remote_env(&proxy));
        cmd.args([
            "-c",
            "import sys, urllib.request\n\
             try:\n    print(urllib.request.urlopen(sys.argv[1], timeout=20).read().decode(), end='')\n\
             except urllib.error.HTTPError as e:\n    print('HTTP', e.code, e.read().decode(), end='')\n    sys.exit(3)",
        ]);
        cmd.arg(format!("http://localhost:{port}/"));
        run(cmd)
    };
    let (out, err, ok) = python(o.port());
    assert!(ok, "{err}");
    assert_eq!(out, BODY);
    let seen = o.seen();
    assert!(seen[0].starts_with("GET / HTTP/1.1\r\n"), "{seen:?}");
    let (out, _, ok) = python(other.port());
    assert!(!ok);
    assert!(
        out.starts_with("HTTP 403 ") && out.contains(&format!("localhost:{}", other.port())),
        "{out}"
    );
    assert!(other.seen().is_empty());
}

/// A decider that keeps each question (and its reply) for the test to
/// answer, or answers every one with `auto`.
#[derive(Debug, Default)]
struct Keeper {
    asked: Mutex<Vec<(sandbox_proxy::Pending, sandbox_proxy::Reply)>>,
    auto: Option<sandbox_proxy::Decision>,
}

impl sandbox_proxy::Decider for Keeper {
    fn ask(&self, pending: sandbox_proxy::Pending, reply: sandbox_proxy::Reply) {
        if let Some(d) = self.auto {
            reply.answer(d);
        }
        self.asked.lock().unwrap().push((pending, reply));
    }

    fn hold_limit(&self) -> Duration {
        Duration::from_secs(600)
    }
}

impl Keeper {
    /// Waits until `n` questions were asked.
    fn wait_for(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.asked.lock().unwrap().len() < n {
            assert!(Instant::now() < deadline, "no question asked");
            thread::sleep(Duration::from_millis(5));
        }
    }
}

/// A held connection is asked about and waits: "once" admits it (the
/// origin serves it), "deny" refuses it (403, recorded). Beyond the cap a
/// refusal is not asked about (HeldLimit, recorded), while listed
/// destinations are still served (the accepting loop is not blocked by a
/// held connection). Stopping the proxy denies what is still held.
#[test]
fn held_connections_wait_for_the_decider() {
    let origin = origin();
    let keeper = Arc::new(Keeper::default());
    let asked = Arc::new(Mutex::new(Vec::new()));
    let opts = ProxyOptions::default()
        .resolver(test_resolver(Arc::clone(&asked)))
        .decider(keeper.clone())
        .max_held(2);
    let mut proxy = Proxy::start(rules(&["localhost:1"]), opts).unwrap();
    let target = format!("rebind.example.com:{}", origin.port());
    // Once: admitted.
    let t = {
        let (addr, target) = (proxy.addr(), target.clone());
        thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            write!(s, "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").unwrap();
            let head = read_head(&mut s);
            s.write_all(b"GET /once HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                .unwrap();
            (head, body_of(&read_all(&mut s)))
        })
    };
    keeper.wait_for(1);
    {
        let asked = keeper.asked.lock().unwrap();
        assert_eq!(
            asked[0].0,
            sandbox_proxy::Pending::Connect {
                host: "rebind.example.com".into(),
                port: origin.port(),
                addresses: None,
                local: false,
                resolution: false,
            }
        );
        assert!(asked[0].1.answer(sandbox_proxy::Decision::Once));
    }
    // Admitted, resolved to loopback (local): asked again, with it.
    keeper.wait_for(2);
    {
        let asked = keeper.asked.lock().unwrap();
        assert_eq!(
            asked[1].0,
            sandbox_proxy::Pending::Connect {
                host: "rebind.example.com".into(),
                port: origin.port(),
                addresses: Some(vec![IpAddr::V4(Ipv4Addr::LOCALHOST)]),
                local: true,
                resolution: true,
            }
        );
        assert!(asked[1].1.answer(sandbox_proxy::Decision::Once));
    }
    let (head, body) = t.join().unwrap();
    assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
    assert_eq!(body, BODY);
    assert_eq!(origin.seen().len(), 1);
    assert_eq!(*asked.lock().unwrap(), ["rebind.example.com"]);
    // Two held (the cap): a third is refused unasked; the proxy still
    // answers meanwhile.
    let held: Vec<_> = (0..2)
        .map(|_| {
            let (addr, target) = (proxy.addr(), target.clone());
            thread::spawn(move || {
                let mut s = TcpStream::connect(addr).unwrap();
                write!(s, "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").unwrap();
                read_head(&mut s)
            })
        })
        .collect();
    keeper.wait_for(4);
    let (status, body) = refused(
        &proxy,
        &format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n"),
    );
    assert!(status.contains(" 403 "), "{status}");
    assert!(body.contains("without asking"), "{body}");
    assert_eq!(
        keeper.asked.lock().unwrap().len(),
        4,
        "the third was not asked"
    );
    // Deny one; stop the proxy with the other still held.
    assert!(keeper.asked.lock().unwrap()[2]
        .1
        .answer(sandbox_proxy::Decision::Deny));
    proxy.shutdown();
    for h in held {
        let head = h.join().unwrap();
        assert!(!head.starts_with("HTTP/1.1 200 "), "{head}");
    }
    assert_eq!(
        *asked.lock().unwrap(),
        ["rebind.example.com"],
        "nothing held, denied or refused unasked was looked up"
    );
    let last = &keeper.asked.lock().unwrap()[3].1;
    assert_eq!(last.settled(), Some(sandbox_proxy::Settled::Stopped));
    assert!(!last.answer(sandbox_proxy::Decision::Once), "too late");
    assert_eq!(origin.seen().len(), 1, "nothing denied reached the origin");
    let reasons: Vec<_> = proxy.refusals().into_iter().map(|r| r.reason).collect();
    assert!(
        reasons.contains(&RefusalReason::HeldLimit { held: 2 }),
        "{reasons:?}"
    );
    assert_eq!(
        reasons
            .iter()
            .filter(|r| **r == RefusalReason::NameNotListed)
            .count(),
        2,
        "{reasons:?}"
    );
}

/// Without a decider nothing is held (the twin of the test above): the same
/// destination is refused at once.
#[test]
fn without_a_decider_nothing_is_held() {
    let origin = origin();
    let (proxy, _) = start_with_resolver(&["localhost:1"]);
    let target = format!("rebind.example.com:{}", origin.port());
    let (status, _) = refused(
        &proxy,
        &format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n"),
    );
    assert!(status.contains(" 403 "), "{status}");
    assert!(origin.seen().is_empty());
}

/// DNS rebinding through an approval: the name is asked about by name
/// alone, resolved once admitted, and (its address being local) asked
/// about again with that address; the admitted connection reaches only it.
/// The test's resolver answers 127.0.0.2 (origin A) until the second
/// question is asked, then 127.0.0.1 (origin B, "the host's loopback
/// service"): admitted "once" twice, the connection reaches A, and B never
/// sees a request. The next connection's second question names the new
/// address (B, whose twin admission reaches B: the pin follows the
/// question, not the name).
#[test]
fn an_admitted_name_reaches_only_the_addresses_asked_about() {
    let a = Origin::start_at("127.0.0.2:0".parse().unwrap(), b"origin A".to_vec());
    let b = Origin::start_at(
        SocketAddr::from(([127, 0, 0, 1], a.port())),
        b"origin B".to_vec(),
    );
    let flipped = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let resolver: Resolver = {
        let flipped = Arc::clone(&flipped);
        Arc::new(move |name: &str, port: u16| match name {
            "flip.example.com" if flipped.load(std::sync::atomic::Ordering::SeqCst) => {
                Ok(vec![SocketAddr::from(([127, 0, 0, 1], port))])
            }
            "flip.example.com" => Ok(vec![SocketAddr::from(([127, 0, 0, 2], port))]),
            _ => Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "unknown test name",
            )),
        })
    };
    let keeper = Arc::new(Keeper::default());
    let opts = ProxyOptions::default()
        .resolver(resolver)
        .decider(keeper.clone());
    let proxy = Proxy::start(rules(&["localhost:1"]), opts).unwrap();
    let target = format!("flip.example.com:{}", a.port());
    let fetch = |path: &'static str| {
        let (addr, target) = (proxy.addr(), target.clone());
        thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            write!(s, "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").unwrap();
            let head = read_head(&mut s);
            write!(
                s,
                "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            )
            .unwrap();
            (head, body_of(&read_all(&mut s)))
        })
    };
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    for (n, path, shown, body) in [
        (2, "/pinned", "127.0.0.2", "origin A"),
        (4, "/asked-again", "127.0.0.1", "origin B"),
    ] {
        let t = fetch(path);
        keeper.wait_for(n - 1);
        {
            let asked = keeper.asked.lock().unwrap();
            assert_eq!(
                asked[n - 2].0,
                sandbox_proxy::Pending::Connect {
                    host: "flip.example.com".into(),
                    port: a.port(),
                    addresses: None,
                    local: false,
                    resolution: false,
                }
            );
            assert!(asked[n - 2].1.answer(sandbox_proxy::Decision::Once));
        }
        keeper.wait_for(n);
        {
            let asked = keeper.asked.lock().unwrap();
            assert_eq!(
                asked[n - 1].0,
                sandbox_proxy::Pending::Connect {
                    host: "flip.example.com".into(),
                    port: a.port(),
                    addresses: Some(vec![ip(shown)]),
                    local: true,
                    resolution: true,
                }
            );
            // The name now resolves elsewhere; the answer admits what was
            // shown.
            flipped.store(true, std::sync::atomic::Ordering::SeqCst);
            assert!(asked[n - 1].1.answer(sandbox_proxy::Decision::Once));
        }
        let (head, got) = t.join().unwrap();
        assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
        assert_eq!(got, body);
    }
    assert_eq!(a.seen().len(), 1, "{:?}", a.seen());
    assert!(a.seen()[0].starts_with("GET /pinned "), "{:?}", a.seen());
    assert_eq!(b.seen().len(), 1, "{:?}", b.seen());
    assert!(
        b.seen()[0].starts_with("GET /asked-again "),
        "{:?}",
        b.seen()
    );
}

/// A held IP literal names itself and whether it is local (a public
/// address is not, a private one is); a name is asked about by name alone
/// and, denied, is never looked up (neither one the resolver knows nor one
/// it does not: the resolver is never called), and stays recorded as
/// unlisted.
#[test]
fn questions_say_whether_an_address_is_local() {
    let keeper = Arc::new(Keeper {
        auto: Some(sandbox_proxy::Decision::Deny),
        ..Keeper::default()
    });
    let asked = Arc::new(Mutex::new(Vec::new()));
    let opts = ProxyOptions::default()
        .resolver(test_resolver(Arc::clone(&asked)))
        .decider(keeper.clone());
    let proxy = Proxy::start(rules(&["localhost:1"]), opts).unwrap();
    for target in [
        "93.184.215.14:443",
        "[2606:2800:21f:cb07:6820:80da:af6b:8b2c]:443",
        "10.1.2.3:443",
        "nowhere.example.com:443",
        "rebind.example.com:443",
    ] {
        let (status, _) = refused(
            &proxy,
            &format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n"),
        );
        assert!(status.contains(" 403 "), "{target}: {status}");
    }
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    let got: Vec<_> = keeper
        .asked
        .lock()
        .unwrap()
        .iter()
        .map(|(p, _)| p.clone())
        .collect();
    let q = |host: &str, addr: &str, local: bool| sandbox_proxy::Pending::Connect {
        host: host.into(),
        port: 443,
        addresses: Some(vec![ip(addr)]),
        local,
        resolution: false,
    };
    let name = |host: &str| sandbox_proxy::Pending::Connect {
        host: host.into(),
        port: 443,
        addresses: None,
        local: false,
        resolution: false,
    };
    assert_eq!(
        got,
        [
            q("93.184.215.14", "93.184.215.14", false),
            q(
                "2606:2800:21f:cb07:6820:80da:af6b:8b2c",
                "2606:2800:21f:cb07:6820:80da:af6b:8b2c",
                false
            ),
            q("10.1.2.3", "10.1.2.3", true),
            name("nowhere.example.com"),
            name("rebind.example.com"),
        ]
    );
    assert!(
        asked.lock().unwrap().is_empty(),
        "a denied name is never looked up: {:?}",
        asked.lock().unwrap()
    );
    let refusals = proxy.refusals();
    assert!(
        refusals
            .iter()
            .any(|r| r.host == "nowhere.example.com" && r.reason == RefusalReason::NameNotListed),
        "{refusals:?}"
    );
}

/// Nothing is looked up before the decider admits it, and the held limit
/// applies first: two names held (the limit) and a third refused unasked
/// (HeldLimit) reach no resolver; the denied one never does. Positive
/// control: the admitted one is looked up exactly once, and (resolving to
/// loopback) asked about again with its address; denied then, nothing is
/// connected.
#[test]
fn a_name_is_looked_up_only_once_admitted() {
    let keeper = Arc::new(Keeper::default());
    let looked_up = Arc::new(Mutex::new(Vec::new()));
    let resolver: Resolver = {
        let looked_up = Arc::clone(&looked_up);
        Arc::new(move |name: &str, port: u16| {
            looked_up.lock().unwrap().push(name.to_string());
            Ok(vec![SocketAddr::from(([127, 0, 0, 1], port))])
        })
    };
    let opts = ProxyOptions::default()
        .resolver(resolver)
        .decider(keeper.clone())
        .max_held(2);
    let proxy = Proxy::start(rules(&["localhost:1"]), opts).unwrap();
    let open = |name: &str| {
        let (addr, target) = (proxy.addr(), format!("{name}:443"));
        thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            write!(s, "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").unwrap();
            read_head(&mut s)
        })
    };
    let denied = open("s3cr3t-one.leak.example.com");
    keeper.wait_for(1);
    let admitted = open("s3cr3t-two.leak.example.com");
    keeper.wait_for(2);
    let target = "s3cr3t-three.leak.example.com:443";
    let (status, body) = refused(
        &proxy,
        &format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n"),
    );
    assert!(status.contains(" 403 "), "{status}");
    assert!(body.contains("without asking"), "{body}");
    assert!(
        looked_up.lock().unwrap().is_empty(),
        "held or refused unasked, nothing was looked up: {:?}",
        looked_up.lock().unwrap()
    );
    let reply = |n: usize| keeper.asked.lock().unwrap()[n].1.clone();
    let host = |n: usize| match &keeper.asked.lock().unwrap()[n].0 {
        sandbox_proxy::Pending::Connect {
            host, addresses, ..
        } => (host.clone(), addresses.clone()),
        other => panic!("{other:?}"),
    };
    // Which of the two is which depends on the order they were asked in.
    let (first, second) = if host(0).0.starts_with("s3cr3t-one") {
        (0, 1)
    } else {
        (1, 0)
    };
    assert!(reply(first).answer(sandbox_proxy::Decision::Deny));
    let head = denied.join().unwrap();
    assert!(head.starts_with("HTTP/1.1 403 "), "{head}");
    assert!(looked_up.lock().unwrap().is_empty(), "the denied name");
    assert!(reply(second).answer(sandbox_proxy::Decision::Once));
    keeper.wait_for(3);
    assert_eq!(
        host(2),
        (
            "s3cr3t-two.leak.example.com".to_string(),
            Some(vec![IpAddr::V4(Ipv4Addr::LOCALHOST)])
        )
    );
    assert_eq!(
        *looked_up.lock().unwrap(),
        ["s3cr3t-two.leak.example.com"],
        "the admitted name, once"
    );
    assert!(reply(2).answer(sandbox_proxy::Decision::Deny));
    let head = admitted.join().unwrap();
    assert!(head.starts_with("HTTP/1.1 403 "), "{head}");
    assert_eq!(keeper.asked.lock().unwrap().len(), 3);
}

/// While a run has secrets, a plain `http://` chunked body sent with its
/// head in one write is watched before any of it goes: a placeholder
/// split by the chunk framing is refused (403, the origin never reached),
/// as is a framing the proxy's chunked decoder refuses (400: a lenient
/// origin could join what the proxy saw apart); the twin: the same body
/// with another value in place of the placeholder is forwarded.
#[cfg(target_os = "linux")]
#[test]
fn a_chunked_body_sent_with_its_head_is_watched_before_it_goes() {
    let dir = std::env::temp_dir().join(format!("proxy-test-ca-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca = dir.join("ca.pem");
    let cert = rcgen::generate_simple_self_signed(vec!["upstream.test".to_string()]).unwrap();
    std::fs::write(&ca, cert.cert.pem()).unwrap();
    let spec: sandbox_core::SecretSpec = "TOKEN@api.example.com".parse().unwrap();
    let secret = sandbox_proxy::Secret::new(&spec, b"the-value".to_vec()).unwrap();
    let p = secret.placeholder().to_string();
    let interception = sandbox_proxy::Interception::new(
        vec!["GET https://api.example.com/**".parse().unwrap()],
        Some(&ca),
        vec![secret],
    )
    .unwrap();
    let o = origin();
    let proxy = Proxy::start(
        rules(&[&format!("localhost:{}", o.port())]),
        ProxyOptions::default().interception(interception),
    )
    .unwrap();
    let (a, b) = p.split_at(p.len() / 2);
    let request = |framing: &str, second: &str| {
        format!(
            "POST http://localhost:{port}/p HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n\
             {framing}\r\nx=1\r\n{:x}\r\n{a}\r\n{:x}\r\n{second}\r\n0\r\n\r\n",
            a.len(),
            second.len(),
            port = o.port()
        )
    };
    let (status, body) = refused(&proxy, &request("3", b));
    assert!(status.starts_with("HTTP/1.1 403 "), "{status} {body}");
    assert!(body.contains("placeholder of the secret TOKEN"), "{body}");
    let (status, body) = refused(&proxy, &request("3 ", &"y".repeat(b.len())));
    assert!(status.starts_with("HTTP/1.1 400 "), "{status} {body}");
    assert!(body.contains("chunked body is malformed"), "{body}");
    assert!(o.seen().is_empty(), "{:?}", o.seen());
    // The twin: another value where the placeholder's end was reaches
    // the origin (which reads no chunked body: its answer may be cut by
    // the reset its close sends, so only what it saw is checked).
    let mut s = client(&proxy);
    s.write_all(request("3", &"y".repeat(b.len())).as_bytes())
        .unwrap();
    let _ = read_all(&mut s);
    let seen = o.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(seen[0].starts_with("POST /p HTTP/1.1\r\n"), "{seen:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// #44: an IP literal at an address where the run's resolver found an
/// intercepted host ([`ProxyOptions::shadows`]), which no rule admits, is
/// refused without asking the decider (an approval would reach that host
/// around its request rules), recorded with the host's name, at whatever
/// port. The twin: another address no rule admits is asked about and, admitted,
/// reached.
#[test]
fn an_intercepted_hosts_address_is_not_asked_about() {
    let shadowed = Origin::start_at("127.0.0.3:0".parse().unwrap(), BODY.as_bytes().to_vec());
    let twin = Origin::start_at("127.0.0.2:0".parse().unwrap(), BODY.as_bytes().to_vec());
    let pins = sandbox_core::Pins::new(
        sandbox_core::EgressRules::new(rules(&["localhost:1"])),
        sandbox_core::HostAddrs::new([]),
    )
    .except_intercepted([("pkgs.example.com", 443)]);
    assert!(pins.shadow(
        "pkgs.example.com",
        "127.0.0.3".parse().unwrap(),
        Duration::from_secs(60)
    ));
    let keeper = Arc::new(Keeper {
        auto: Some(sandbox_proxy::Decision::Once),
        ..Keeper::default()
    });
    let opts = ProxyOptions::default()
        .decider(keeper.clone())
        .shadows(pins);
    let proxy = Proxy::start(rules(&["localhost:1"]), opts).unwrap();
    let target = format!("127.0.0.3:{}", shadowed.port());
    let (status, body) = refused(
        &proxy,
        &format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n"),
    );
    assert!(status.contains(" 403 "), "{status}");
    assert!(body.contains("pkgs.example.com was found at it"), "{body}");
    assert!(
        keeper.asked.lock().unwrap().is_empty(),
        "it was asked about"
    );
    assert!(shadowed.seen().is_empty());
    assert_eq!(
        proxy.refusals()[0].reason,
        RefusalReason::InterceptedAddress {
            host: "pkgs.example.com".into()
        }
    );
    // The twin: asked about, admitted, reached.
    let target = format!("127.0.0.2:{}", twin.port());
    assert_eq!(get_through_tunnel(&proxy, &target), BODY);
    assert_eq!(keeper.asked.lock().unwrap().len(), 1);
    assert_eq!(twin.seen().len(), 1);
}
