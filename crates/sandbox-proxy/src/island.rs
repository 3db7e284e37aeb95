//! The run's datagram namespace: a network namespace of its own, in which
//! every address is local and only the runner's resolver listens.
//!
//! Under an allowlist the broker makes each IP datagram socket the command
//! asks for (`socket(AF_INET or AF_INET6, SOCK_DGRAM, 0 or IPPROTO_UDP)`) here
//! and hands it over. A socket belongs for its whole life to the network
//! namespace of the process that made it, whoever holds it later
//! (network_namespaces(7); `sk->sk_net` is set once, in `sk_alloc`), so
//! every datagram it sends, by `sendto`, `sendmsg`, `sendmmsg`, `io_uring`
//! or any call a later kernel adds, is routed here by the kernel, not by a
//! check of ours that a second thread could race. No datagram can leave:
//! the namespace has no interface but loopback.
//!
//! Loopback is up and the local table routes every address to it
//! (`local 0.0.0.0/0 dev lo` and `local ::/0 dev lo`, the `local` route
//! type of ip-route(8)), so a query sent to any resolver address
//! (resolv.conf's, or one a program carries, as Go's and musl's resolvers
//! may) is delivered to the runner's resolver, bound to port 53 of the
//! wildcard addresses; it answers from the address the query was sent to
//! (`IP_PKTINFO`, `IPV6_RECVPKTINFO`), which musl and Go check. Any other
//! port is unreachable: nothing else listens, and the command's own
//! sockets can only reach each other.
//!
//! A helper process makes the namespace and the sockets: a socket is made
//! in the network namespace of the task that calls socket(2), and joining
//! another one takes `CAP_SYS_ADMIN` in the caller's own user namespace
//! (setns(2)), which an unprivileged runner lacks. Unprivileged, the helper
//! first makes a user namespace of its own (user_namespaces(7)), mapping
//! only the runner's ids, which gives it the capabilities over the new
//! network namespace that configuring it takes. It lives for the run,
//! answering requests of the runner's alone (a socket pair only the two
//! hold), and dies with it.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{mpsc, Arc, Mutex, OnceLock, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

/// `SIOCGSKNS` (linux/sockios.h): the network namespace of a socket, as an
/// fd. Not in `libc`.
const SIOCGSKNS: libc::c_ulong = 0x894c;

/// `IPV6_FREEBIND` (linux/in6.h, Linux 4.15). Not in `libc`.
const IPV6_FREEBIND: libc::c_int = 78;

/// How long the helper may take to make the namespace.
const START_TIMEOUT: Duration = Duration::from_secs(5);

/// The steps the helper reports a failure of.
const STAGES: [&str; 7] = [
    "making the namespaces (unshare)",
    "mapping the runner's ids into its user namespace",
    "bringing loopback up",
    "routing every address to loopback",
    "binding the resolver's port 53",
    "sending the resolver's sockets",
    "opening the namespace's socket count (/proc/self/net/sockstat)",
];

/// How many of the run's datagram sockets may exist at once, for a host
/// whose `net.core.rmem_max` is `rmem_max` bytes; past it a new one fails
/// with `ENOBUFS`, as when the kernel has no memory for it.
///
/// Their buffers are charged to the helper, not the run: cgroup v1 charges
/// no UDP memory to any cgroup, and v2 charges a socket to the cgroup of
/// the task that made it (`sk->sk_memcg`, set in `sk_alloc` from
/// `current`). Unbounded, a run could hold gigabytes past its `--memory`
/// and push the host's UDP memory (`udp_mem`, global) over its limit, so
/// that UDP sockets in every namespace drop datagrams. A socket's receive
/// queue may hold twice `rmem_max` (`SO_RCVBUF` doubles the value asked
/// for), so the bound keeps a run's queues within [`SOCKET_MEMORY`]: 128
/// sockets at the default `rmem_max` (208 KiB), 8 at 4 MiB, never fewer
/// than 8 (a resolver needs one per query in flight).
pub fn socket_bound(rmem_max: u64) -> usize {
    let each = rmem_max.saturating_mul(2).max(1);
    usize::try_from(SOCKET_MEMORY / each)
        .unwrap_or(usize::MAX)
        .clamp(8, 128)
}

/// What a run's datagram sockets may hold in their receive queues at most
/// (at the lower bound of 8 sockets, more where `rmem_max` is over 4 MiB).
pub const SOCKET_MEMORY: u64 = 64 << 20;

/// `net.core.rmem_max`, or a value that gives the lower bound when it
/// cannot be read.
fn rmem_max() -> u64 {
    std::fs::read_to_string("/proc/sys/net/core/rmem_max")
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(u64::MAX)
}

/// Where the resolver's sockets in a new namespace go: UDP, port 53 of
/// `0.0.0.0`, and of `::` where IPv6 is on, with packet info on (see
/// [`crate::dns::DnsServer::datagram_service`]).
pub type Serve = Box<dyn Fn(Vec<OwnedFd>) -> io::Result<()> + Send + Sync>;

/// The run's datagram namespace, made when the first socket is asked for
/// (a run that makes none pays nothing); its helper is ended when this is
/// dropped.
///
/// The namespace is made on a thread of its own, started with this value:
/// the broker's thread, which asks for sockets, is in the run's Landlock
/// domain, and a helper forked from it would be too (it could not write
/// its user namespace's id maps, and would be the run's own process).
pub struct Island {
    inner: Arc<Inner>,
    /// Asks the thread to make the namespace; it answers on the sender sent.
    wake: Mutex<Option<mpsc::Sender<mpsc::Sender<()>>>>,
    thread: Option<JoinHandle<()>>,
}

struct Inner {
    serve: Serve,
    started: OnceLock<Result<Helper, String>>,
}

impl std::fmt::Debug for Island {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Island")
            .field("started", &self.inner.started.get())
            .finish()
    }
}

impl Island {
    /// A namespace not made yet; when it is, its resolver's sockets go to
    /// `serve`. Starts the thread that will make it, in the caller's own
    /// Landlock domain (if any): call this before the run's domain exists.
    pub fn new(serve: Serve) -> io::Result<Island> {
        let inner = Arc::new(Inner {
            serve,
            started: OnceLock::new(),
        });
        let (wake, asked) = mpsc::channel::<mpsc::Sender<()>>();
        let thread = {
            let inner = Arc::clone(&inner);
            std::thread::Builder::new()
                .name("sandbox-island".into())
                .spawn(move || {
                    for answer in asked {
                        inner.started.get_or_init(|| {
                            let (helper, sockets) = Helper::start().map_err(|e| e.to_string())?;
                            (inner.serve)(sockets)
                                .map_err(|e| format!("serving its resolver: {e}"))?;
                            Ok(helper)
                        });
                        let _ = answer.send(());
                    }
                })?
        };
        Ok(Island {
            inner,
            wake: Mutex::new(Some(wake)),
            thread: Some(thread),
        })
    }

    /// Makes the namespace now, if not yet made; or says why it cannot be.
    pub fn start(&self) -> Result<(), String> {
        self.helper().map(drop)
    }

    fn helper(&self) -> Result<&Helper, String> {
        if self.inner.started.get().is_none() {
            let (answer, answered) = mpsc::channel();
            let asked = self
                .wake
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .as_ref()
                .is_some_and(|wake| wake.send(answer).is_ok());
            if asked {
                let _ = answered.recv();
            }
        }
        match self.inner.started.get() {
            Some(Ok(helper)) => Ok(helper),
            Some(Err(why)) => Err(why.clone()),
            None => Err("its thread is gone".into()),
        }
    }
}

impl Drop for Island {
    fn drop(&mut self) {
        // Ends the thread's loop.
        drop(
            self.wake
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        );
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl sandbox_core::DatagramSockets for Island {
    /// A socket there; an error without an errno when the namespace cannot
    /// be made (its message says why).
    fn socket(&self, domain: i32, ty: i32, protocol: i32) -> io::Result<OwnedFd> {
        let helper = self
            .helper()
            .map_err(|why| io::Error::other(format!("no datagram namespace: {why}")))?;
        helper.socket(domain, ty, protocol)
    }

    fn holds(&self, sock: BorrowedFd<'_>) -> bool {
        match self.inner.started.get() {
            Some(Ok(helper)) => netns_of(sock).is_ok_and(|ns| ns == helper.netns),
            _ => false,
        }
    }
}

/// The namespace's helper process.
#[derive(Debug)]
struct Helper {
    /// The runner's end of the helper's socket pair (one request at a time).
    control: Mutex<OwnedFd>,
    helper: libc::pid_t,
    /// The namespace's identity (`st_dev`, `st_ino` of its nsfs inode).
    netns: (u64, u64),
}

impl Helper {
    /// Makes the namespace and returns it with the resolver's sockets there.
    fn start() -> io::Result<(Helper, Vec<OwnedFd>)> {
        let plan = Plan::new();
        let [ours, theirs] = seqpacket_pair()?;
        // SAFETY: the child runs `helper` only, which makes async-signal-safe
        // calls alone, allocates nothing and never returns.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            // SAFETY: in the forked child; see `helper`.
            unsafe { helper(theirs.as_raw_fd(), &plan) }
        }
        drop(theirs);
        let mut island = Helper {
            control: Mutex::new(ours),
            helper: pid,
            netns: (0, 0),
        };
        let (status, fds) = {
            let control = island
                .control
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if !readable(control.as_fd(), START_TIMEOUT)? {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the datagram namespace's helper did not answer in time",
                ));
            }
            recv_with_fds(control.as_raw_fd())?
        };
        if status[0] != 0 {
            let stage = STAGES
                .get(usize::try_from(status[1]).unwrap_or(usize::MAX))
                .copied()
                .unwrap_or("starting");
            let err = io::Error::from_raw_os_error(status[0]);
            return Err(io::Error::new(err.kind(), format!("{stage}: {err}")));
        }
        let Some(first) = fds.first() else {
            return Err(io::Error::other("the helper sent no resolver socket"));
        };
        island.netns = netns_of(first.as_fd())?;
        Ok((island, fds))
    }
}

impl Helper {
    fn socket(&self, domain: i32, ty: i32, protocol: i32) -> io::Result<OwnedFd> {
        let control = self.control.lock().unwrap_or_else(PoisonError::into_inner);
        let request = [domain, ty, protocol];
        send_with_fds(control.as_raw_fd(), &request, &[]).map_err(io::Error::from_raw_os_error)?;
        let ([errno, _], mut fds) = recv_with_fds(control.as_raw_fd())?;
        if errno != 0 {
            return Err(io::Error::from_raw_os_error(errno));
        }
        fds.pop()
            .ok_or_else(|| io::Error::other("the helper sent no socket"))
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        let control = self
            .control
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        // SAFETY: `helper` is our child, not yet reaped, so the pid is still
        // its own. It ends at its socket's end of file, which shutdown gives
        // it at once; the kill is for a helper that would not (the broker's
        // thread, in the run's Landlock domain, may not signal it: the
        // helper's own end of file is what counts then).
        unsafe {
            libc::shutdown(control.as_raw_fd(), libc::SHUT_RDWR);
            libc::kill(self.helper, libc::SIGKILL);
            let mut status = 0;
            while libc::waitpid(self.helper, &mut status, 0) < 0
                && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
            {}
        }
    }
}

/// The network namespace `sock` belongs to.
fn netns_of(sock: BorrowedFd<'_>) -> io::Result<(u64, u64)> {
    // SAFETY: SIOCGSKNS takes no argument and returns a new fd or -1.
    let ns = unsafe { libc::ioctl(sock.as_raw_fd(), SIOCGSKNS as _) };
    if ns < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `ns` is a new fd that nothing else owns.
    let ns = unsafe { OwnedFd::from_raw_fd(ns) };
    // SAFETY: stat is plain data; fstat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid fd and a stat buffer.
    if unsafe { libc::fstat(ns.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((st.st_dev, st.st_ino))
}

fn seqpacket_pair() -> io::Result<[OwnedFd; 2]> {
    let mut fds = [0; 2];
    // SAFETY: fds has room for the two fds.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    } != 0
    {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both fds are new and ours alone.
    Ok(unsafe { [OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])] })
}

fn readable(fd: BorrowedFd<'_>, timeout: Duration) -> io::Result<bool> {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    loop {
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut p, 1, ms) };
        if n >= 0 {
            return Ok(n > 0);
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// Control-message room for two fds, aligned for `cmsghdr`.
#[repr(C, align(8))]
struct CmsgBuf([u8; 64]);

/// Sends `words` with `fds` (at most two) as `SCM_RIGHTS`. Async-signal-safe:
/// stack buffers only; the errno on failure.
fn send_with_fds(sock: RawFd, words: &[i32], fds: &[RawFd]) -> Result<(), i32> {
    let mut iov = libc::iovec {
        iov_base: words.as_ptr() as *mut libc::c_void,
        iov_len: std::mem::size_of_val(words),
    };
    let mut buf = CmsgBuf([0; 64]);
    // SAFETY: msghdr is plain data; all-zero is a valid value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        let bytes = std::mem::size_of_val(fds) as u32;
        // SAFETY: CMSG_SPACE/CMSG_LEN are arithmetic.
        let (space, len) = unsafe { (libc::CMSG_SPACE(bytes), libc::CMSG_LEN(bytes)) };
        if space as usize > buf.0.len() {
            return Err(libc::EINVAL);
        }
        msg.msg_control = buf.0.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        // SAFETY: the control buffer holds `space` bytes, so the first header
        // and `bytes` of data fit.
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = len as _;
            std::ptr::copy_nonoverlapping(
                fds.as_ptr().cast::<u8>(),
                libc::CMSG_DATA(cmsg),
                bytes as usize,
            );
        }
    }
    loop {
        // SAFETY: msg points at live buffers for the call.
        if unsafe { libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) } >= 0 {
            return Ok(());
        }
        // SAFETY: reads this thread's errno.
        let errno = unsafe { *libc::__errno_location() };
        if errno != libc::EINTR {
            return Err(errno);
        }
    }
}

/// Receives two words and the fds sent with them (close-on-exec).
fn recv_with_fds(sock: RawFd) -> io::Result<([i32; 2], Vec<OwnedFd>)> {
    let mut words = [0i32; 2];
    let mut iov = libc::iovec {
        iov_base: words.as_mut_ptr().cast(),
        iov_len: std::mem::size_of_val(&words),
    };
    let mut buf = CmsgBuf([0; 64]);
    // SAFETY: msghdr is plain data; all-zero is a valid value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = buf.0.as_mut_ptr().cast();
    msg.msg_controllen = buf.0.len() as _;
    let n = loop {
        // SAFETY: msg points at live buffers for the call.
        let n = unsafe { libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n >= 0 {
            break n;
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    };
    let mut fds = Vec::new();
    // SAFETY: walks the control messages the kernel wrote into `buf`; each
    // SCM_RIGHTS payload is an array of new fds now ours.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg);
                let count = ((*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize)
                    / std::mem::size_of::<RawFd>();
                for i in 0..count {
                    let fd = std::ptr::read_unaligned(data.cast::<RawFd>().add(i));
                    fds.push(OwnedFd::from_raw_fd(fd));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    if n == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the datagram namespace's helper is gone",
        ));
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err(io::Error::other("the helper sent more fds than asked for"));
    }
    Ok((words, fds))
}

/// What the helper needs, made before `fork` (the child allocates nothing).
struct Plan {
    /// Whether to make a user namespace too (unprivileged runner).
    user: bool,
    /// How many of the run's sockets may exist at once ([`socket_bound`]).
    most: usize,
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
    routes: [[u8; 36]; 2],
}

impl Plan {
    fn new() -> Plan {
        // SAFETY: these never fail.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        Plan {
            user: uid != 0,
            most: socket_bound(rmem_max()),
            uid_map: format!("{uid} {uid} 1\n").into_bytes(),
            gid_map: format!("{gid} {gid} 1\n").into_bytes(),
            routes: [
                local_route(libc::AF_INET as u8),
                local_route(libc::AF_INET6 as u8),
            ],
        }
    }
}

/// An `RTM_NEWROUTE` request (rtnetlink(7)): type `local`, every address of
/// `family` (prefix length 0), table `local`, scope host, out of `lo`
/// (interface 1 in a new namespace).
fn local_route(family: u8) -> [u8; 36] {
    let mut m = [0u8; 36];
    m[0..4].copy_from_slice(&36u32.to_ne_bytes());
    m[4..6].copy_from_slice(&libc::RTM_NEWROUTE.to_ne_bytes());
    let flags = libc::NLM_F_REQUEST | libc::NLM_F_ACK | libc::NLM_F_CREATE | libc::NLM_F_EXCL;
    m[6..8].copy_from_slice(&(flags as u16).to_ne_bytes());
    m[8..12].copy_from_slice(&1u32.to_ne_bytes());
    // struct rtmsg
    m[16] = family;
    m[20] = libc::RT_TABLE_LOCAL;
    m[21] = libc::RTPROT_BOOT;
    m[22] = libc::RT_SCOPE_HOST;
    m[23] = libc::RTN_LOCAL;
    // struct rtattr RTA_OIF = 1
    m[28..30].copy_from_slice(&8u16.to_ne_bytes());
    m[30..32].copy_from_slice(&libc::RTA_OIF.to_ne_bytes());
    m[32..36].copy_from_slice(&1u32.to_ne_bytes());
    m
}

/// The helper, in the forked child: makes the namespace, sends the
/// resolver's sockets, then makes a socket per request until the runner's
/// end closes. Only async-signal-safe calls; reports a failure as
/// (errno, stage) and exits.
///
/// # Safety
/// Call only in a child just forked, with `control` its end of the pair.
unsafe fn helper(control: RawFd, plan: &Plan) -> ! {
    // SAFETY: the whole body makes plain syscalls on fds and stack buffers
    // this process owns; no allocation, no locks, no unwinding.
    unsafe {
        let fail = |stage: i32| -> ! {
            let errno = *libc::__errno_location();
            let _ = send_with_fds(control, &[errno.max(1), stage], &[]);
            libc::_exit(1)
        };
        // Ends with the runner; holds none of its other files (a pipe's
        // write end held here would keep its reader waiting).
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        if control > 0 {
            libc::syscall(libc::SYS_close_range, 0u32, (control - 1) as u32, 0u32);
        }
        libc::syscall(libc::SYS_close_range, (control + 1) as u32, u32::MAX, 0u32);
        // Root without CAP_SYS_ADMIN (a container) makes a user namespace
        // too, as an unprivileged runner does.
        // Every path below either has a new network namespace or fails:
        // a socket made in the runner's own would reach the network.
        let user = if plan.user {
            true
        } else if libc::unshare(libc::CLONE_NEWNET) == 0 {
            false
        } else if *libc::__errno_location() == libc::EPERM {
            true
        } else {
            fail(0)
        };
        if user && libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET) != 0 {
            fail(0);
        }
        if user {
            for (path, text) in [
                (c"/proc/self/setgroups", &b"deny"[..]),
                (c"/proc/self/uid_map", &plan.uid_map[..]),
                (c"/proc/self/gid_map", &plan.gid_map[..]),
            ] {
                let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 || libc::write(fd, text.as_ptr().cast(), text.len()) < 0 {
                    fail(1);
                }
                libc::close(fd);
            }
        }
        // Loopback up (netdevice(7): SIOCGIFFLAGS, SIOCSIFFLAGS).
        let s = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        let mut ifr: libc::ifreq = std::mem::zeroed();
        ifr.ifr_name[0] = b'l' as libc::c_char;
        ifr.ifr_name[1] = b'o' as libc::c_char;
        if s < 0 || libc::ioctl(s, libc::SIOCGIFFLAGS as _, &mut ifr) != 0 || {
            ifr.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
            libc::ioctl(s, libc::SIOCSIFFLAGS as _, &ifr) != 0
        } {
            fail(2);
        }
        libc::close(s);
        let nl = libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_ROUTE,
        );
        if nl < 0 {
            fail(3);
        }
        let mut v6 = true;
        for (i, route) in plan.routes.iter().enumerate() {
            let mut ack = [0u8; 64];
            let ok = libc::send(nl, route.as_ptr().cast(), route.len(), 0) == route.len() as isize
                && libc::recv(nl, ack.as_mut_ptr().cast(), ack.len(), 0) >= 20
                && i32::from_ne_bytes([ack[16], ack[17], ack[18], ack[19]]) == 0;
            match (ok, i) {
                (true, _) => {}
                // IPv6 off in this kernel: IPv4 alone.
                (false, 1) => v6 = false,
                (false, _) => fail(3),
            }
        }
        libc::close(nl);
        let v4 = resolver_socket(libc::AF_INET);
        if v4 < 0 {
            fail(4);
        }
        let v6 = if v6 {
            resolver_socket(libc::AF_INET6)
        } else {
            -1
        };
        let sent = if v6 >= 0 { [v4, v6] } else { [v4, v4] };
        let count = if v6 >= 0 { 2 } else { 1 };
        if send_with_fds(control, &[0, 0], &sent[..count]).is_err() {
            fail(5);
        }
        libc::close(v4);
        if v6 >= 0 {
            libc::close(v6);
        }
        // Counts every socket of this namespace (`sockets: used`, from
        // `sk_alloc`), bound or not: the resolver's and the run's.
        let sockstat = libc::open(
            c"/proc/self/net/sockstat".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        if sockstat < 0 {
            fail(6);
        }
        let most = plan.most + count;
        loop {
            let mut req = [0i32; 3];
            let n = libc::recv(
                control,
                req.as_mut_ptr().cast(),
                std::mem::size_of_val(&req),
                0,
            );
            if n < 0 && *libc::__errno_location() == libc::EINTR {
                continue;
            }
            if n != std::mem::size_of_val(&req) as isize {
                libc::_exit(0);
            }
            let fd = if sockets_in_use(sockstat).is_some_and(|n| n < most) {
                libc::socket(req[0], req[1], req[2])
            } else {
                *libc::__errno_location() = libc::ENOBUFS;
                -1
            };
            let errno = if fd < 0 { *libc::__errno_location() } else { 0 };
            let fds = [fd];
            let _ = send_with_fds(control, &[errno, 0], if fd < 0 { &[] } else { &fds });
            if fd >= 0 {
                libc::close(fd);
            }
        }
    }
}

/// The `sockets: used` count of a `/proc/net/sockstat` open at `fd`, or
/// `None` when it cannot be read (then no socket is made).
///
/// # Safety
/// Async-signal-safe; for the helper.
unsafe fn sockets_in_use(fd: RawFd) -> Option<usize> {
    let mut buf = [0u8; 256];
    // SAFETY: pread into a stack buffer from our own fd.
    let n = unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
    let text = buf.get(..usize::try_from(n).ok()?)?;
    let prefix = b"sockets: used ";
    let at = text.windows(prefix.len()).position(|w| w == prefix)? + prefix.len();
    let digits = text[at..].iter().take_while(|b| b.is_ascii_digit());
    let mut count: usize = 0;
    let mut any = false;
    for d in digits {
        count = count.checked_mul(10)?.checked_add(usize::from(d - b'0'))?;
        any = true;
    }
    any.then_some(count)
}

/// A UDP socket bound to port 53 of `family`'s wildcard address that
/// reports each datagram's destination, or -1.
///
/// # Safety
/// Async-signal-safe; for the helper.
unsafe fn resolver_socket(family: i32) -> RawFd {
    // SAFETY: plain syscalls on a new fd and stack buffers.
    unsafe {
        let fd = libc::socket(family, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return -1;
        }
        let one: libc::c_int = 1;
        let opt = |level, name| {
            libc::setsockopt(
                fd,
                level,
                name,
                (&one as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as u32,
            ) == 0
        };
        let bound = if family == libc::AF_INET {
            let mut a: libc::sockaddr_in = std::mem::zeroed();
            a.sin_family = libc::AF_INET as libc::sa_family_t;
            a.sin_port = 53u16.to_be();
            opt(libc::IPPROTO_IP, libc::IP_PKTINFO)
                && libc::bind(
                    fd,
                    (&a as *const libc::sockaddr_in).cast(),
                    std::mem::size_of::<libc::sockaddr_in>() as u32,
                ) == 0
        } else {
            let mut a: libc::sockaddr_in6 = std::mem::zeroed();
            a.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            a.sin6_port = 53u16.to_be();
            // IPv6 sends only from an address assigned to an interface,
            // which the local route does not make one: FREEBIND lets the
            // answer come from any address a query was sent to.
            opt(libc::IPPROTO_IPV6, libc::IPV6_V6ONLY)
                && opt(libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO)
                && opt(libc::IPPROTO_IPV6, IPV6_FREEBIND)
                && libc::bind(
                    fd,
                    (&a as *const libc::sockaddr_in6).cast(),
                    std::mem::size_of::<libc::sockaddr_in6>() as u32,
                ) == 0
        };
        if !bound {
            libc::close(fd);
            return -1;
        }
        fd
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandbox_core::DatagramSockets;
    use std::net::UdpSocket;

    #[test]
    fn a_socket_made_there_reaches_port_53_of_any_address_and_nothing_outside() {
        let resolver = std::sync::Arc::new(Mutex::new(Vec::new()));
        let kept = std::sync::Arc::clone(&resolver);
        let island = Island::new(Box::new(move |socks| {
            kept.lock().unwrap().extend(socks);
            Ok(())
        }))
        .unwrap();
        assert!(resolver.lock().unwrap().is_empty(), "made before asked for");
        let made = island.socket(libc::AF_INET, libc::SOCK_DGRAM, 0).unwrap();
        let server = UdpSocket::from(resolver.lock().unwrap().remove(0));
        // A listener outside, on this namespace's loopback.
        let outside = UdpSocket::bind("127.0.0.1:0").unwrap();
        outside
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        assert!(island.holds(made.as_fd()));
        assert!(!island.holds(outside.as_fd()));
        let client = UdpSocket::from(made);
        client.send_to(b"q", "192.0.2.53:53").unwrap();
        let mut buf = [0u8; 8];
        let (n, from) = server.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"q");
        assert_eq!(
            from.ip().to_string(),
            "192.0.2.53",
            "the source is the local route's"
        );
        // Positive control: the outside listener is reachable from here...
        let here = UdpSocket::bind("127.0.0.1:0").unwrap();
        here.send_to(b"x", outside.local_addr().unwrap()).unwrap();
        assert_eq!(outside.recv(&mut buf).unwrap(), 1);
        // ...but not from the island.
        client.send_to(b"y", outside.local_addr().unwrap()).unwrap();
        assert!(
            outside.recv(&mut buf).is_err(),
            "a datagram left the island"
        );
        // The kernel's own answer for a socket it cannot make.
        let err = island
            .socket(libc::AF_INET, libc::SOCK_DGRAM, 99)
            .unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EPROTONOSUPPORT));
    }
}
