//! `connect`: decided on the broker thread from the bytes it read once and
//! the socket object itself, performed on a worker thread ([`crate::pool`])
//! with the caller's credentials, on the caller's own socket.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::answer::unresolved_decision;
use crate::caller::{cvt, errno_of, Caller, Identity};
use crate::identity::{caller_identity, with_credentials, Own, UmaskUse};
use crate::listeners::OwnListeners;
use crate::log::{BrokerDecision, BrokerTarget, Refusal};
use crate::notif::Listener;
use crate::resolve::{canonical, walk, BrokerRules, Start, Unresolved};
use crate::syscalls::Subject;
use sandbox_core::net::NetRule;

/// `sizeof(struct sockaddr_storage)`: the most `move_addr_to_kernel` copies in.
const SOCKADDR_STORAGE: usize = 128;
/// `offsetof(struct sockaddr_un, sun_path)`.
const SUN_PATH: usize = 2;
/// `sizeof(struct sockaddr_un)`.
const SOCKADDR_UN: usize = 110;
/// How long one blocking connect call of a worker may wait before the worker
/// looks again whether the caller still waits and the broker still runs.
pub(crate) const SLICE: Duration = Duration::from_millis(100);

/// What the broker thread does with a connect request.
pub(crate) enum Next {
    /// Answer now: refused (a refusal gets `refused`), or the kernel's own
    /// error that needs no connect (`EBADF`, `ENOTSOCK`, `EFAULT`, ...).
    Answer {
        decision: BrokerDecision,
        refused: i32,
    },
    /// Admitted: a worker performs it.
    Perform(Job),
}

impl Next {
    fn failed(errno: i32) -> Self {
        Next::Answer {
            decision: BrokerDecision::Failed { errno },
            refused: libc::EPERM,
        }
    }

    fn decision(decision: BrokerDecision) -> Self {
        Next::Answer {
            decision,
            refused: libc::EPERM,
        }
    }
}

/// An admitted connect, for a worker.
pub(crate) struct Job {
    pub(crate) id: u64,
    pub(crate) tid: i32,
    /// The caller's socket (`pidfd_getfd`: the same open file description).
    sock: OwnedFd,
    /// The address to connect to: the bytes the broker read, or for a
    /// pathname UNIX socket `/proc/self/fd/N` of `via`.
    addr: Vec<u8>,
    /// The `O_PATH` fd on the admitted socket inode that `addr` names; open
    /// until the connect is done.
    _via: Option<OwnedFd>,
    pub(crate) identity: Identity,
    pub(crate) target: BrokerTarget,
    wait: Wait,
    /// Admitted as a connect to one of the run's own loopback listeners
    /// ([`crate::listeners`]): checked again right before the connect.
    own_listener: Option<Box<(OwnListeners, std::net::SocketAddr)>>,
}

/// How a blocking connect of this socket waits (see [`perform`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// `AF_UNIX` stream or seqpacket: waits for room in the listener's
    /// backlog, for `SO_SNDTIMEO` (then `EAGAIN`).
    Unix,
    /// TCP: waits for the handshake, for `SO_SNDTIMEO` (then `EINPROGRESS`);
    /// a later call on the connecting socket waits on (`EALREADY` on timeout).
    Tcp,
    /// Anything else: one call.
    Once,
}

/// The name an `AF_UNIX` address gives the kernel to look up.
#[derive(Debug, PartialEq, Eq)]
enum UnixName<'a> {
    /// A pathname (`sun_path[0] != 0`), up to its first NUL.
    Path(&'a [u8]),
    /// An abstract name (`sun_path[0] == 0`), without the leading NUL.
    Abstract(&'a [u8]),
    /// No lookup: the kernel answers without one (`EINVAL`, or for a datagram
    /// socket `AF_UNSPEC` dissolving its association).
    None,
}

fn family(addr: &[u8]) -> Option<i32> {
    (addr.len() >= 2).then(|| i32::from(u16::from_ne_bytes([addr[0], addr[1]])))
}

/// As `unix_validate_addr` and `unix_mkname_bsd` (net/unix/af_unix.c): a
/// lookup happens for family `AF_UNIX` with `2 < addrlen <= 110`; a pathname
/// ends at its first NUL or at `addrlen`.
fn unix_name(addr: &[u8]) -> UnixName<'_> {
    if addr.len() <= SUN_PATH || addr.len() > SOCKADDR_UN || family(addr) != Some(libc::AF_UNIX) {
        return UnixName::None;
    }
    let sun = &addr[SUN_PATH..];
    if sun[0] == 0 {
        return UnixName::Abstract(&sun[1..]);
    }
    let end = sun.iter().position(|&b| b == 0).unwrap_or(sun.len());
    UnixName::Path(&sun[..end])
}

/// The address as a human reads it, for the log: a path, `@abstract`,
/// `ip:port`, `[ip6]:port`.
/// `socket(domain, type, protocol)` as a caller wrote it, with the common
/// names spelled out.
pub(crate) fn describe_socket(domain: i32, ty: i32, protocol: i32) -> String {
    let domain = match domain {
        libc::AF_UNIX => "AF_UNIX".to_owned(),
        libc::AF_INET => "AF_INET".to_owned(),
        libc::AF_INET6 => "AF_INET6".to_owned(),
        libc::AF_NETLINK => "AF_NETLINK".to_owned(),
        libc::AF_PACKET => "AF_PACKET".to_owned(),
        other => other.to_string(),
    };
    let kind = match ty & 0xf {
        libc::SOCK_STREAM => "SOCK_STREAM".to_owned(),
        libc::SOCK_DGRAM => "SOCK_DGRAM".to_owned(),
        libc::SOCK_RAW => "SOCK_RAW".to_owned(),
        libc::SOCK_SEQPACKET => "SOCK_SEQPACKET".to_owned(),
        other => other.to_string(),
    };
    format!("socket({domain}, {kind}, {protocol})")
}

pub(crate) fn describe(addr: &[u8]) -> String {
    let Some(fam) = family(addr) else {
        return format!("{}-byte address", addr.len());
    };
    let port = || u16::from_be_bytes([addr[2], addr[3]]);
    match fam {
        libc::AF_UNSPEC => "AF_UNSPEC".into(),
        libc::AF_UNIX => match unix_name(addr) {
            UnixName::Path(p) => String::from_utf8_lossy(p).into_owned(),
            UnixName::Abstract(name) => format!("@{}", name.escape_ascii()),
            UnixName::None => format!("AF_UNIX, {} bytes", addr.len()),
        },
        libc::AF_INET if addr.len() >= 16 => {
            let ip = std::net::Ipv4Addr::new(addr[4], addr[5], addr[6], addr[7]);
            format!("{ip}:{}", port())
        }
        libc::AF_INET6 if addr.len() >= 24 => {
            let mut ip = [0u8; 16];
            ip.copy_from_slice(&addr[8..24]);
            let scope = addr
                .get(24..28)
                .map_or(0, |s| u32::from_ne_bytes([s[0], s[1], s[2], s[3]]));
            std::net::SocketAddrV6::new(ip.into(), port(), 0, scope).to_string()
        }
        f => format!("address family {f}, {} bytes", addr.len()),
    }
}

fn status_flags(fd: &OwnedFd) -> i32 {
    // SAFETY: F_GETFL on our own fd.
    unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) }
}

fn sockopt_int(fd: &OwnedFd, opt: libc::c_int) -> io::Result<libc::c_int> {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt into a live int of the size given.
    cvt(libc::c_long::from(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            opt,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    }))?;
    Ok(v)
}

/// The address `/proc/self/fd/N`: the kernel's lookup of it follows the magic
/// link to exactly the inode `fd` holds (it fits in `sun_path`).
fn proc_fd_address(fd: RawFd) -> Vec<u8> {
    let mut addr = (libc::AF_UNIX as u16).to_ne_bytes().to_vec();
    addr.extend_from_slice(format!("/proc/self/fd/{fd}").as_bytes());
    addr.push(0);
    addr
}

/// Reads the request, checks it and either answers it or hands back the
/// connect to perform. Everything the decision rests on is the socket object
/// (its `SO_DOMAIN`, on the broker's duplicate) and the address bytes read once.
pub(crate) fn decide(
    listener: &Listener,
    rules: &BrokerRules,
    own: &Own,
    n: &libc::seccomp_notif,
    target: &mut BrokerTarget,
    fatal: &mut Option<String>,
) -> Next {
    let unreadable = |e: &io::Error| Next::decision(unreadable_caller(e));
    let tid = n.pid as i32;
    let [fd, addr_ptr, addr_len, ..] = n.data.args;
    let fd = fd as i32;
    target.fd = Some(fd);
    // move_addr_to_kernel: addrlen is an int, at most sockaddr_storage; 0
    // copies nothing.
    let read_addr = |caller: &Caller| match usize::try_from(addr_len as i32) {
        Ok(0) => Ok(Vec::new()),
        Ok(len) if len <= SOCKADDR_STORAGE => caller.read(addr_ptr, len),
        _ => Err(io::Error::from_raw_os_error(libc::EINVAL)),
    };
    // As __sys_connect: the fd first (fdget skips O_PATH files), then the
    // address, then whether it is a socket.
    let (caller, sock, addr) = match take_socket(listener, n, fd, read_addr) {
        Ok(taken) => taken,
        Err(decision) => return Next::decision(decision),
    };
    let addr = match addr {
        Ok(a) => a,
        Err(e) => {
            return match errno_of(&e) {
                errno @ (libc::EINVAL | libc::EFAULT) => Next::failed(errno),
                _ => unreadable(&e),
            }
        }
    };
    target.path = Some(describe(&addr));
    let domain = match sockopt_int(&sock, libc::SO_DOMAIN) {
        Ok(d) => d,
        Err(e) => return Next::failed(errno_of(&e)),
    };
    // With the network off every connect is refused, after the kernel's own
    // errors above (EBADF, EFAULT, EINVAL, ENOTSOCK) and with the address it
    // named; none is performed.
    if !rules.network {
        return Next::decision(BrokerDecision::Refused {
            reason: Refusal::NetworkOff,
        });
    }
    let kind = sockopt_int(&sock, libc::SO_TYPE).unwrap_or(0);
    let protocol = sockopt_int(&sock, libc::SO_PROTOCOL).unwrap_or(0);
    let identity = match caller_identity(&caller, own, UmaskUse::None) {
        Ok(id) => id,
        Err(e) => return unreadable(&e),
    };
    let mut job = Job {
        id: n.id,
        tid,
        sock,
        addr,
        _via: None,
        identity,
        target: BrokerTarget::default(),
        wait: Wait::Once,
        own_listener: None,
    };
    if domain == libc::AF_UNIX {
        if matches!(kind, libc::SOCK_STREAM | libc::SOCK_SEQPACKET) {
            job.wait = Wait::Unix;
        }
        let name = unix_name(&job.addr);
        match name {
            UnixName::None => {}
            UnixName::Abstract(_) => {
                return Next::Answer {
                    decision: BrokerDecision::Refused {
                        reason: Refusal::AbstractUnixSocket,
                    },
                    refused: libc::EPERM,
                }
            }
            UnixName::Path(path) => {
                // No NUL inside by construction.
                let Ok(path) = CString::new(path) else {
                    return Next::failed(libc::EINVAL);
                };
                let subject = Subject::At {
                    dirfd: libc::AT_FDCWD,
                    path,
                    follow: true,
                    empty_path: false,
                };
                let refused = |d: BrokerDecision| Next::Answer {
                    decision: d,
                    refused: libc::EACCES,
                };
                let start = match rules.start(&caller, &subject) {
                    Ok(start) => start,
                    Err(u) => return refused(unresolved_decision(u, target)),
                };
                match with_credentials(own, &job.identity, fatal, || admit_unix(rules, start)) {
                    Ok(Ok((via, path))) => {
                        target.resolved = Some(path);
                        job.addr = proc_fd_address(via.as_raw_fd());
                        job._via = Some(via);
                    }
                    Ok(Err(u)) => return refused(unresolved_decision(u, target)),
                    Err(d) => return Next::decision(d),
                }
            }
        }
    } else if kind == libc::SOCK_DGRAM
        && rules
            .dns()
            .and_then(|d| d.datagrams.as_ref())
            .is_some_and(|made| made.holds(job.sock.as_fd()))
    {
        // A socket of the run's datagram namespace: whatever it connects to,
        // it reaches only the runner's resolver there.
        target.resolved = Some(PathBuf::from("the run's datagram namespace"));
    } else {
        if let Some(allowed) = rules.allow_net() {
            let dest = socket_addr(domain, &job.addr);
            let dns = rules.dns().filter(|_| {
                kind == libc::SOCK_STREAM && dest.is_some_and(|d| d.port() == DNS_PORT)
            });
            if let (Some(dns), Some(to)) = (dns, dns.and_then(|d| encode(domain, d.resolver))) {
                // DNS over TCP, to whatever server: the runner's resolver answers.
                job.addr = to;
                target.resolved = Some(PathBuf::from(format!(
                    "the runner's resolver at {}",
                    dns.resolver
                )));
            } else if domain != libc::AF_NETLINK
                && !egress_admits(allowed, domain, &job.addr)
                && !dest.is_some_and(|d| pinned(rules, d, target))
                && !dest
                    .is_some_and(|d| own_listener(rules, kind, d, target, &mut job.own_listener))
            {
                // Say which name the address was answered for, where known;
                // an address an intercepted host was found at first (at any
                // port), in words `--explain` reads (sandbox-cli show.rs): it
                // proposes no IP rule there, which would route around the
                // proxy.
                if let Some((d, name)) =
                    dest.and_then(|d| Some((d, rules.dns()?.pins.intercepted_at(d.ip())?)))
                {
                    target.resolved = Some(PathBuf::from(format!(
                        "{d} (where the intercepted host {name} was found: a request rule \
                         intercepts it, so it is reached only through the proxy)"
                    )));
                } else if let Some((d, name)) =
                    dest.and_then(|d| Some((d, rules.dns()?.pins.name_of(d.ip())?)))
                {
                    target.resolved = Some(PathBuf::from(format!(
                        "{d} (answered for {name}, whose rules do not list port {})",
                        d.port()
                    )));
                }
                return Next::Answer {
                    decision: BrokerDecision::Refused {
                        reason: Refusal::NetNotAllowed,
                    },
                    refused: libc::ECONNREFUSED,
                };
            }
        }
        if matches!(domain, libc::AF_INET | libc::AF_INET6)
            && kind == libc::SOCK_STREAM
            && protocol == libc::IPPROTO_TCP
        {
            job.wait = Wait::Tcp;
        }
    }
    job.target = std::mem::take(target);
    Next::Perform(job)
}

/// Decides and performs a `listen` (on the broker thread: it never blocks).
/// With egress rules set, an IP socket may listen only when bound to a
/// loopback address with a port: bound, its address cannot change (`bind`
/// again is `EINVAL`), so the check cannot race with the caller. Without
/// rules every listen is performed. `listen` checks no credentials and
/// Landlock governs it not at all, so the broker performs it as itself.
pub(crate) fn decide_listen(
    listener: &Listener,
    rules: &BrokerRules,
    n: &libc::seccomp_notif,
    target: &mut BrokerTarget,
) -> (BrokerDecision, i32) {
    let refused = |reason| (BrokerDecision::Refused { reason }, libc::EPERM);
    let failed = |errno| (BrokerDecision::Failed { errno }, libc::EPERM);
    let [fd, backlog, ..] = n.data.args;
    let fd = fd as i32;
    target.fd = Some(fd);
    if !rules.network {
        return refused(Refusal::NetworkOff);
    }
    let sock = match take_socket(listener, n, fd, |_| ()) {
        Ok((_, sock, ())) => sock,
        Err(decision) => return (decision, libc::EPERM),
    };
    let domain = match sockopt_int(&sock, libc::SO_DOMAIN) {
        Ok(d) => d,
        Err(e) => return failed(errno_of(&e)),
    };
    if rules.allow_net().is_some() && matches!(domain, libc::AF_INET | libc::AF_INET6) {
        let local = match local_address(&sock) {
            Ok(a) => a,
            Err(e) => return failed(errno_of(&e)),
        };
        target.path = Some(describe(&local));
        if !loopback_bound(&local) {
            return refused(Refusal::ListenNotLoopback);
        }
    }
    // A socket listening already (handed in from outside) is not the run's
    // own: only one this call makes listen is recorded.
    let own = rules.allow_net().is_some()
        && matches!(domain, libc::AF_INET | libc::AF_INET6)
        && !OwnListeners::listening(&sock);
    // SAFETY: listen on our duplicate of the caller's socket (the same socket).
    if unsafe { libc::listen(sock.as_raw_fd(), backlog as i32) } == 0 {
        if own {
            rules.own_listeners.record(&sock);
        }
        (BrokerDecision::Performed, 0)
    } else {
        failed(errno_of(&io::Error::last_os_error()))
    }
}

/// The answer when the caller's arguments or identity could not be read:
/// a refusal ([`Refusal::UnreadableCaller`]), but when the runner is out of
/// file descriptors (`EMFILE`, `ENFILE`: the broker opens the caller's
/// memory or `/proc` entries to read them), which is the runner's failure
/// and not the policy's: the call then fails with that errno
/// ([`BrokerDecision::RunnerOutOfFds`], no refusal, so no
/// `sandbox_denial`; the run's record counts it).
pub(crate) fn unreadable_caller(e: &io::Error) -> BrokerDecision {
    match errno_of(e) {
        errno @ (libc::EMFILE | libc::ENFILE) => BrokerDecision::RunnerOutOfFds { errno },
        errno => BrokerDecision::Refused {
            reason: Refusal::UnreadableCaller { errno },
        },
    }
}

/// Decides and performs a `bind`, routed here with the entry calls (a deny
/// path lies beneath a write path, so Landlock grants the write path whole):
/// on the broker thread, which it never makes wait (`unix_bind`'s lock is
/// held only around the bind). A pathname `AF_UNIX` address makes a socket
/// file, a new directory entry, admitted as `mknod` admits one
/// ([`crate::entries::bind_unix`]); every other address is bound as asked,
/// with the caller's credentials (`CAP_NET_BIND_SERVICE` is the caller's).
/// Refused as Landlock refuses `MAKE_SOCK`: `EACCES`.
pub(crate) fn decide_bind(
    listener: &Listener,
    rules: &BrokerRules,
    own: &Own,
    n: &libc::seccomp_notif,
    target: &mut BrokerTarget,
    fatal: &mut Option<String>,
) -> (BrokerDecision, i32) {
    let failed = |errno| (BrokerDecision::Failed { errno }, libc::EPERM);
    let [fd, addr_ptr, addr_len, ..] = n.data.args;
    let fd = fd as i32;
    target.fd = Some(fd);
    let read_addr = |caller: &Caller| match usize::try_from(addr_len as i32) {
        Ok(0) => Ok(Vec::new()),
        Ok(len) if len <= SOCKADDR_STORAGE => caller.read(addr_ptr, len),
        _ => Err(io::Error::from_raw_os_error(libc::EINVAL)),
    };
    let (caller, sock, addr) = match take_socket(listener, n, fd, read_addr) {
        Ok(taken) => taken,
        Err(decision) => return (decision, libc::EPERM),
    };
    // __sys_bind: the fd, whether it is a socket, then the address.
    let domain = match sockopt_int(&sock, libc::SO_DOMAIN) {
        Ok(d) => d,
        Err(e) => return failed(errno_of(&e)),
    };
    let addr = match addr {
        Ok(a) => a,
        Err(e) => {
            return match errno_of(&e) {
                errno @ (libc::EINVAL | libc::EFAULT) => failed(errno),
                _ => (unreadable_caller(&e), libc::EPERM),
            }
        }
    };
    target.path = Some(describe(&addr));
    let path = match unix_name(&addr) {
        UnixName::Path(p) if domain == libc::AF_UNIX => CString::new(p).ok(),
        _ => None,
    };
    let umask = match own
        .umasks
        .as_ref()
        .and_then(|u| u.borrow_mut().lookup(caller.tid()))
    {
        Some(mask) => UmaskUse::Kept(mask),
        None if path.is_some() => UmaskUse::Read,
        None => UmaskUse::None,
    };
    let identity = match caller_identity(&caller, own, umask) {
        Ok(id) => id,
        Err(e) => return (unreadable_caller(&e), libc::EPERM),
    };
    let Some(path) = path else {
        // No file is made: an IP address, an abstract name, autobind.
        return match with_credentials(own, &identity, fatal, || bind_raw(sock.as_raw_fd(), &addr)) {
            Ok(0) => (BrokerDecision::Performed, libc::EPERM),
            Ok(errno) => failed(errno),
            Err(d) => (d, libc::EPERM),
        };
    };
    let subject = Subject::At {
        dirfd: libc::AT_FDCWD,
        path,
        follow: false,
        empty_path: false,
    };
    let start = match rules.start(&caller, &subject) {
        Ok(start) => start,
        Err(u) => return (unresolved_decision(u, target), libc::EACCES),
    };
    let bound = with_credentials(own, &identity, fatal, || {
        own.set_umask(identity.umask);
        crate::entries::bind_unix(rules, start, &sock, &addr, target)
    });
    // Settled with the broker's own credentials (SIOCUNIXFILE needs
    // CAP_NET_ADMIN).
    let bound = bound.map(|b| b.and_then(|b| b.settle(&sock)));
    match bound {
        Ok(Ok(())) => (BrokerDecision::Performed, libc::EACCES),
        Ok(Err(u)) => (unresolved_decision(u, target), libc::EACCES),
        Err(d) => (d, libc::EPERM),
    }
}

/// `bind(sock, addr)`: 0 or the errno.
pub(crate) fn bind_raw(sock: RawFd, addr: &[u8]) -> i32 {
    let empty = [0u8; 2];
    let ptr = if addr.is_empty() {
        empty.as_ptr()
    } else {
        addr.as_ptr()
    };
    // SAFETY: bind reads addr.len() bytes from a live buffer.
    let rc = unsafe { libc::bind(sock, ptr.cast(), addr.len() as libc::socklen_t) };
    if rc == 0 {
        0
    } else {
        errno_of(&io::Error::last_os_error())
    }
}

/// The caller of `n`, a duplicate of its fd `fd` (`pidfd_getfd`: the same
/// open file description, never an `O_PATH` one, which `fdget` skips), and
/// what `read` took from its memory in between; all three belong to the
/// caller only because its request was still pending after both were taken.
/// Otherwise the answer to give.
fn take_socket<T>(
    listener: &Listener,
    n: &libc::seccomp_notif,
    fd: i32,
    read: impl FnOnce(&Caller) -> T,
) -> Result<(Caller, OwnedFd, T), BrokerDecision> {
    let mut caller = match Caller::open(n.pid as i32) {
        Ok(c) => c,
        Err(_) if matches!(listener.id_valid(n.id), Ok(false)) => {
            return Err(BrokerDecision::CallerGone)
        }
        Err(e) => return Err(unreadable_caller(&e)),
    };
    caller.open_pidfd();
    let read = read(&caller);
    let sock = caller.dup_fd(fd);
    match listener.id_valid(n.id) {
        Ok(true) => {}
        Ok(false) => return Err(BrokerDecision::CallerGone),
        Err(e) => return Err(unreadable_caller(&e)),
    }
    let ebadf = BrokerDecision::Failed { errno: libc::EBADF };
    match sock {
        Ok(s) if status_flags(&s) & libc::O_PATH == 0 => Ok((caller, s, read)),
        Ok(_) => Err(ebadf),
        Err(e) if errno_of(&e) == libc::EBADF => Err(ebadf),
        Err(e) => Err(unreadable_caller(&e)),
    }
}

/// The socket's own address (`getsockname`), as bytes.
fn local_address(sock: &OwnedFd) -> io::Result<Vec<u8>> {
    let mut buf = [0u8; SOCKADDR_STORAGE];
    let mut len = SOCKADDR_STORAGE as libc::socklen_t;
    // SAFETY: getsockname writes at most len bytes into a live buffer.
    cvt(libc::c_long::from(unsafe {
        libc::getsockname(sock.as_raw_fd(), buf.as_mut_ptr().cast(), &mut len)
    }))?;
    Ok(buf[..(len as usize).min(SOCKADDR_STORAGE)].to_vec())
}

/// Whether an IP socket address is a loopback address with a port (IPv4,
/// IPv6 `::1`, or IPv4-mapped loopback).
fn loopback_bound(addr: &[u8]) -> bool {
    let port = || u16::from_be_bytes([addr[2], addr[3]]);
    match family(addr) {
        Some(libc::AF_INET) if addr.len() >= 16 => {
            port() != 0 && std::net::Ipv4Addr::new(addr[4], addr[5], addr[6], addr[7]).is_loopback()
        }
        Some(libc::AF_INET6) if addr.len() >= 24 => {
            let mut ip = [0u8; 16];
            ip.copy_from_slice(&addr[8..24]);
            let ip = std::net::Ipv6Addr::from(ip);
            port() != 0
                && (ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()))
        }
        _ => false,
    }
}

/// The DNS port: TCP connects to it go to the runner's resolver under an
/// allowlist with one.
const DNS_PORT: u16 = 53;

/// The destination of an IP `connect` address (IPv4-mapped IPv6 as IPv4).
fn socket_addr(domain: i32, addr: &[u8]) -> Option<std::net::SocketAddr> {
    if !matches!(domain, libc::AF_INET | libc::AF_INET6) {
        return None;
    }
    let port = u16::from_be_bytes([*addr.get(2)?, *addr.get(3)?]);
    let ip: std::net::IpAddr = match family(addr)? {
        libc::AF_INET if addr.len() >= 16 => {
            std::net::Ipv4Addr::new(addr[4], addr[5], addr[6], addr[7]).into()
        }
        libc::AF_INET6 if addr.len() >= 24 => {
            let mut ip = [0u8; 16];
            ip.copy_from_slice(&addr[8..24]);
            let v6 = std::net::Ipv6Addr::from(ip);
            v6.to_ipv4_mapped().map_or(v6.into(), Into::into)
        }
        _ => return None,
    };
    Some(std::net::SocketAddr::new(ip, port))
}

/// `to` as a `connect` address for a socket of `domain`: an IPv4 address
/// IPv4-mapped for an IPv6 socket; `None` for an IPv6 address and an IPv4
/// socket.
fn encode(domain: i32, to: std::net::SocketAddr) -> Option<Vec<u8>> {
    let port = to.port().to_be_bytes();
    let v6 = |ip: std::net::Ipv6Addr| {
        let mut a = vec![0u8; 28];
        a[..2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
        a[2..4].copy_from_slice(&port);
        a[8..24].copy_from_slice(&ip.octets());
        a
    };
    match (domain, to.ip()) {
        (libc::AF_INET, std::net::IpAddr::V4(ip)) => {
            let mut a = vec![0u8; 16];
            a[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
            a[2..4].copy_from_slice(&port);
            a[4..8].copy_from_slice(&ip.octets());
            Some(a)
        }
        (libc::AF_INET6, std::net::IpAddr::V4(ip)) => Some(v6(ip.to_ipv6_mapped())),
        (libc::AF_INET6, std::net::IpAddr::V6(ip)) => Some(v6(ip)),
        _ => None,
    }
}

/// Whether a pinned answer of the runner's resolver admits `dest`; the
/// name it was answered for goes into the record.
fn pinned(rules: &BrokerRules, dest: std::net::SocketAddr, target: &mut BrokerTarget) -> bool {
    let Some(name) = rules.dns().and_then(|d| d.pins.admits(dest)) else {
        return false;
    };
    target.resolved = Some(PathBuf::from(format!("{dest} (answered for {name})")));
    true
}

/// Whether a TCP connect to `dest`, which no rule admits, reaches one of the
/// run's own loopback listeners only ([`crate::listeners`]); if so the
/// record says so and the worker checks again before connecting.
fn own_listener(
    rules: &BrokerRules,
    kind: i32,
    dest: std::net::SocketAddr,
    target: &mut BrokerTarget,
    check: &mut Option<Box<(OwnListeners, std::net::SocketAddr)>>,
) -> bool {
    if kind != libc::SOCK_STREAM || !rules.own_listeners.admits(dest) {
        return false;
    }
    target.resolved = Some(PathBuf::from(format!("{dest} (the run's own listener)")));
    *check = Some(Box::new((rules.own_listeners.clone(), dest)));
    true
}

/// Whether the egress rules admit connecting a socket of `domain` to `addr`.
///
/// Only IP sockets can be admitted. The destination is read by the family
/// in the bytes, not the socket's (an `AF_INET6` datagram socket connects to
/// an `AF_INET` address), IPv4-mapped IPv6 as IPv4; `AF_UNSPEC` names no
/// destination (it dissolves the association). Anything else is refused,
/// also what the kernel would refuse anyway (a short address).
fn egress_admits(rules: &[NetRule], domain: i32, addr: &[u8]) -> bool {
    if !matches!(domain, libc::AF_INET | libc::AF_INET6) {
        return false;
    }
    if family(addr) == Some(libc::AF_UNSPEC) {
        return true;
    }
    socket_addr(domain, addr).is_some_and(|d| NetRule::admit(rules, d.ip(), d.port()))
}

/// The socket a pathname connect reaches (symlinks followed, as `connect`
/// follows them; no magic link, nothing on procfs), admitted when it is an
/// allowed UNIX socket or lies beneath a write path and not beneath a deny
/// path: an `O_PATH` fd on it and its canonical path. Runs with the caller's
/// credentials, so the walk meets the kernel's search permissions.
fn admit_unix(rules: &BrokerRules, start: Start) -> Result<(OwnedFd, PathBuf), Unresolved> {
    let first = match start {
        Start::Object(fd) => fd,
        Start::Walk { base, path, .. } => walk(base.as_ref(), &path, 0)?,
    };
    let link = canonical(&first)?;
    if rules.unix_allowed(&link) {
        return Ok((first, link));
    }
    match rules.admit_change(&first) {
        Ok(obj) => Ok((obj.fd, obj.path)),
        Err(Unresolved::Refused(Refusal::OutsideWritePaths, path)) => {
            Err(Unresolved::Refused(Refusal::UnixSocketNotAllowed, path))
        }
        Err(e) => Err(e),
    }
}

/// How a performed connect ended.
pub(crate) enum Done {
    /// The kernel's answer: 0 (connected) or an errno.
    Errno(i32),
    /// The caller stopped waiting (or the broker stops) before it ended.
    Gone,
    /// Refused on the worker: the run's own listener it was admitted to no
    /// longer is the only one on its port (answered `ECONNREFUSED`).
    NoLongerOwn,
}

fn connect_raw(sock: RawFd, addr: &[u8]) -> i32 {
    // A valid pointer even for an empty address.
    let empty = [0u8; 2];
    let ptr = if addr.is_empty() {
        empty.as_ptr()
    } else {
        addr.as_ptr()
    };
    // SAFETY: connect reads addr.len() bytes from a live buffer.
    let rc = unsafe { libc::connect(sock, ptr.cast(), addr.len() as libc::socklen_t) };
    if rc == 0 {
        0
    } else {
        errno_of(&io::Error::last_os_error())
    }
}

/// `SO_SNDTIMEO`; `None` for no timeout (the kernel reports none as zero).
fn send_timeout(sock: RawFd) -> io::Result<Option<Duration>> {
    let mut tv = libc::timeval {
        tv_sec: 0,
        tv_usec: 0,
    };
    let mut len = std::mem::size_of::<libc::timeval>() as libc::socklen_t;
    // SAFETY: getsockopt into a live timeval of the size given.
    cvt(libc::c_long::from(unsafe {
        libc::getsockopt(
            sock,
            libc::SOL_SOCKET,
            libc::SO_SNDTIMEO,
            (&mut tv as *mut libc::timeval).cast(),
            &mut len,
        )
    }))?;
    let t = Duration::from_secs(tv.tv_sec.max(0) as u64)
        + Duration::from_micros(tv.tv_usec.max(0) as u64);
    Ok((!t.is_zero()).then_some(t))
}

fn set_send_timeout(sock: RawFd, t: Option<Duration>) -> io::Result<()> {
    let t = t.unwrap_or_default();
    let tv = libc::timeval {
        tv_sec: t.as_secs() as _,
        tv_usec: t.subsec_micros() as _,
    };
    // SAFETY: setsockopt with a live timeval of the size given.
    cvt(libc::c_long::from(unsafe {
        libc::setsockopt(
            sock,
            libc::SOL_SOCKET,
            libc::SO_SNDTIMEO,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    }))
    .map(|_| ())
}

/// Connects the caller's socket (the thread holds the caller's credentials).
///
/// A connect of a non-blocking file returns at once, as the kernel decides
/// from the file's flags at the call. A blocking UNIX-stream or TCP connect
/// waits, as the kernel's would, up to the socket's own `SO_SNDTIMEO` (none:
/// forever), but in slices of [`SLICE`] (the socket's timeout is set to the
/// slice around each call and put back right after), so that the worker notices
/// a caller that stopped waiting (`ID_VALID`) or a broker that stops, and
/// never outlives either for long. The slices are the kernel's own restart:
/// a UNIX connect that timed out starts again from scratch, a TCP connect
/// already under way is waited on again (`EALREADY` on timeout).
pub(crate) fn perform(job: &Job, listener: &Listener, stop: &AtomicBool) -> Done {
    let sock = job.sock.as_raw_fd();
    let waits = |e: i32| match job.wait {
        Wait::Unix => e == libc::EAGAIN,
        Wait::Tcp => matches!(e, libc::EINPROGRESS | libc::EALREADY),
        Wait::Once => false,
    };
    if let Some((own, dest)) = job.own_listener.as_deref() {
        if !own.admits(*dest) {
            return Done::NoLongerOwn;
        }
    }
    if job.wait == Wait::Once {
        return Done::Errno(connect_raw(sock, &job.addr));
    }
    let Ok(own_timeout) = send_timeout(sock) else {
        return Done::Errno(connect_raw(sock, &job.addr));
    };
    let deadline = own_timeout.map(|t| Instant::now() + t);
    // What the kernel answers when a blocking connect's SO_SNDTIMEO ran out.
    let timed_out = if job.wait == Wait::Unix {
        libc::EAGAIN
    } else {
        libc::EINPROGRESS
    };
    loop {
        let slice = match deadline {
            None => SLICE,
            Some(d) => match d.checked_duration_since(Instant::now()) {
                Some(left) if left >= Duration::from_micros(1) => left.min(SLICE),
                _ => return Done::Errno(timed_out),
            },
        };
        if set_send_timeout(sock, Some(slice)).is_err() {
            return Done::Errno(connect_raw(sock, &job.addr));
        }
        let e = connect_raw(sock, &job.addr);
        let _ = set_send_timeout(sock, own_timeout);
        if !(waits(e) || e == libc::EINTR) {
            return Done::Errno(e);
        }
        if status_flags(&job.sock) & libc::O_NONBLOCK != 0 {
            // The kernel's answer for a non-blocking file.
            return Done::Errno(e);
        }
        if stop.load(Ordering::Relaxed) || !matches!(listener.id_valid(job.id), Ok(true)) {
            return Done::Gone;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn un(path: &[u8]) -> Vec<u8> {
        let mut a = (libc::AF_UNIX as u16).to_ne_bytes().to_vec();
        a.extend_from_slice(path);
        a
    }

    /// The runner out of descriptors (`EMFILE`, `ENFILE`) while reading
    /// the caller's arguments, or while opening the pieces of its path, is
    /// the runner's failure: the call fails with that errno, no refusal (so
    /// no `sandbox_denial`); twin: any other errno (the caller's memory
    /// unreadable, a path that cannot be resolved safely) stays a refusal.
    #[test]
    fn the_runner_out_of_descriptors_is_no_refusal() {
        for errno in [libc::EMFILE, libc::ENFILE] {
            let answer = unreadable_caller(&io::Error::from_raw_os_error(errno));
            assert_eq!(answer, BrokerDecision::RunnerOutOfFds { errno });
            let unresolvable = Unresolved::Refused(Refusal::Unresolvable { errno }, None);
            assert_eq!(
                unresolved_decision(unresolvable, &mut BrokerTarget::default()),
                BrokerDecision::RunnerOutOfFds { errno }
            );
        }
        for errno in [libc::EXDEV, libc::EAGAIN] {
            let unresolvable = Unresolved::Refused(Refusal::Unresolvable { errno }, None);
            assert_eq!(
                unresolved_decision(unresolvable, &mut BrokerTarget::default()),
                BrokerDecision::Refused {
                    reason: Refusal::Unresolvable { errno }
                }
            );
        }
        for errno in [libc::EFAULT, libc::ESRCH, libc::EACCES] {
            let answer = unreadable_caller(&io::Error::from_raw_os_error(errno));
            assert_eq!(
                answer,
                BrokerDecision::Refused {
                    reason: Refusal::UnreadableCaller { errno }
                }
            );
        }
    }

    #[test]
    fn unix_names_as_the_kernel_parses_them() {
        assert_eq!(
            unix_name(&un(b"/run/x.sock\0")),
            UnixName::Path(b"/run/x.sock")
        );
        // Without a NUL the path ends at addrlen.
        assert_eq!(unix_name(&un(b"rel")), UnixName::Path(b"rel"));
        assert_eq!(unix_name(&un(b"a\0b")), UnixName::Path(b"a"));
        assert_eq!(unix_name(&un(b"\0name")), UnixName::Abstract(b"name"));
        assert_eq!(unix_name(&un(b"\0")), UnixName::Abstract(b""));
        // addrlen 2 (family only), above sizeof(sockaddr_un), other families.
        assert_eq!(unix_name(&un(b"")), UnixName::None);
        assert_eq!(unix_name(&un(&[b'a'; 109])), UnixName::None);
        assert_eq!(unix_name(&un(&[b'a'; 108])), UnixName::Path(&[b'a'; 108]));
        let mut inet = un(b"/x");
        inet[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        assert_eq!(unix_name(&inet), UnixName::None);
        assert_eq!(unix_name(&[1]), UnixName::None);
    }

    #[test]
    fn addresses_are_described() {
        let mut v4 = vec![0u8; 16];
        v4[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        v4[2..4].copy_from_slice(&8080u16.to_be_bytes());
        v4[4..8].copy_from_slice(&[127, 0, 0, 1]);
        assert_eq!(describe(&v4), "127.0.0.1:8080");
        let mut v6 = vec![0u8; 28];
        v6[..2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
        v6[2..4].copy_from_slice(&443u16.to_be_bytes());
        v6[23] = 1;
        assert_eq!(describe(&v6), "[::1]:443");
        assert_eq!(describe(&un(b"/run/docker.sock\0")), "/run/docker.sock");
        assert_eq!(describe(&un(b"\0a\x01")), "@a\\x01");
        assert_eq!(describe(&[]), "0-byte address");
        assert_eq!(
            describe(&(libc::AF_UNSPEC as u16).to_ne_bytes()),
            "AF_UNSPEC"
        );
    }

    #[test]
    fn egress_reads_the_destination_by_the_address_family() {
        let rules: Vec<NetRule> = vec!["127.0.0.1:80".parse().unwrap()];
        let mut v4 = vec![0u8; 16];
        v4[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        v4[2..4].copy_from_slice(&80u16.to_be_bytes());
        v4[4..8].copy_from_slice(&[127, 0, 0, 1]);
        assert!(egress_admits(&rules, libc::AF_INET, &v4));
        // An AF_INET6 datagram socket takes an AF_INET address.
        assert!(egress_admits(&rules, libc::AF_INET6, &v4));
        assert!(!egress_admits(&rules, libc::AF_INET, &v4[..8]));
        assert!(!egress_admits(&rules, libc::AF_PACKET, &v4));
        let mut mapped = vec![0u8; 28];
        mapped[..2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
        mapped[2..4].copy_from_slice(&80u16.to_be_bytes());
        mapped[18..24].copy_from_slice(&[0xff, 0xff, 127, 0, 0, 1]);
        assert!(egress_admits(&rules, libc::AF_INET6, &mapped));
        mapped[3] = 81;
        assert!(!egress_admits(&rules, libc::AF_INET6, &mapped));
        let unspec = (libc::AF_UNSPEC as u16).to_ne_bytes();
        assert!(egress_admits(&[], libc::AF_INET, &unspec));
        assert!(!egress_admits(&[], libc::AF_INET, &v4));
        assert!(!egress_admits(&rules, libc::AF_INET, &[]));
    }

    #[test]
    fn the_proc_fd_address_fits_sun_path() {
        let a = proc_fd_address(i32::MAX);
        assert!(a.len() <= SOCKADDR_UN);
        assert_eq!(
            unix_name(&a),
            UnixName::Path(format!("/proc/self/fd/{}", i32::MAX).as_bytes())
        );
    }
}
