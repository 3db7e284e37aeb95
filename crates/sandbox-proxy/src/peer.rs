//! Who may use a run's proxy and resolver: the processes of that run, told
//! apart by the kernel's record of the client socket (sock_diag), before a
//! byte of the connection is read.
//!
//! The proxy and the resolver listen on `127.0.0.1`, where any local
//! process may connect: a run with full network, an unconfined process of
//! any user (a run under an allowlist reaches only its own proxy port,
//! Landlock `LANDLOCK_ACCESS_NET_CONNECT_TCP` at ABI 4 and later). Without
//! this check such a process's requests were served as the run's: refused
//! ones recorded as the run's refusals, held ones asked about as its
//! command's, its connections taking the run's slots and held places.
//!
//! On accept, the client socket is looked up with a `SOCK_DIAG_BY_FAMILY`
//! request for exactly its TCP 4-tuple (as the client sees it: the
//! client's address and port, then the listener's), which any user may
//! make (sock_diag(7)); the answer carries the socket's owner
//! (`idiag_uid`: the file-system uid of the process that made it) and the
//! cgroup v2 id of the process that made it (`INET_DIAG_CGROUP_ID`, Linux
//! 5.9). A peer is served when:
//! * the run has a cgroup: the socket was made in that cgroup or one
//!   beneath it (a nested run's, a session command's); a cgroup's id is
//!   its directory's inode number on cgroup2, so the run's directory and
//!   its subtree are compared (the answers kept, ids are never reused);
//! * else (process-group containment, or a kernel without the cgroup
//!   attribute): the socket's owner is the uid the command runs as. Then a
//!   process of the same user with full network (another run, or an
//!   unconfined one) is still served as the run's: unprivileged, no per-run
//!   identity of a socket is available to tell them apart.
//!
//! Any other peer, and one that cannot be looked up (no netlink socket,
//! the client's socket gone, an answer that is not the socket asked for),
//! is closed at once: never served, asked about or recorded as the run's
//! (only counted). A proxy whose run is not launched yet serves no one.
//! Elsewhere than Linux nothing is checked (any local process is served,
//! as before).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// The processes a run's proxy and resolver serve
/// ([`crate::ProxyOptions::peers`]): set once, when the run's containment
/// is made ([`RunPeers::set`]); until then no client is served. Cloned
/// handles share it.
#[derive(Clone, Default)]
pub struct RunPeers(Arc<OnceLock<Members>>);

impl std::fmt::Debug for RunPeers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("RunPeers").field(&self.0.get()).finish()
    }
}

/// Whose sockets are the run's.
#[derive(Debug)]
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
enum Members {
    /// Made in the run's cgroup v2 (`dir`, whose id is `id`) or beneath it;
    /// on a kernel that does not say a socket's cgroup, owned by `uid`.
    Cgroup { dir: PathBuf, id: u64, uid: u32 },
    /// Owned by this uid (process-group containment).
    Uid(u32),
    /// The run's cgroup could not be read: no one.
    Nobody,
}

impl RunPeers {
    /// A run whose identity is not known yet: no client is served until
    /// [`RunPeers::set`].
    pub fn new() -> Self {
        Self::default()
    }

    /// The run's identity, once its containment is made (before its
    /// command starts): its cgroup v2 directory when it has one, and the
    /// uid its command runs as (what is compared without a cgroup). Later
    /// calls change nothing. A cgroup directory that cannot be read makes
    /// the proxy serve no one (fails closed).
    pub fn set(&self, uid: u32, cgroup: Option<&Path>) {
        let members = match cgroup {
            None => Members::Uid(uid),
            Some(dir) => match std::fs::metadata(dir) {
                Ok(meta) => Members::Cgroup {
                    dir: dir.to_path_buf(),
                    id: std::os::unix::fs::MetadataExt::ino(&meta),
                    uid,
                },
                Err(_) => Members::Nobody,
            },
        };
        let _ = self.0.set(members);
    }

    /// Whether [`RunPeers::set`] was called.
    pub fn is_set(&self) -> bool {
        self.0.get().is_some()
    }
}

/// How many cgroup ids a [`Gate`] remembers (each way) before it forgets
/// them all.
#[cfg(target_os = "linux")]
const REMEMBERED: usize = 4096;

/// How many directories of the run's cgroup subtree one look walks, at
/// most (a run's nested runs and their own are a handful).
#[cfg(target_os = "linux")]
const MAX_WALK: usize = 4096;

/// The check of one accepting thread: its netlink socket (opened at the
/// first check, again after a failure) and what it learnt of cgroup ids.
pub(crate) struct Gate {
    peers: RunPeers,
    #[cfg(target_os = "linux")]
    diag: Option<std::os::fd::OwnedFd>,
    #[cfg(target_os = "linux")]
    seq: u32,
    /// Cgroup ids found in the run's subtree.
    #[cfg(target_os = "linux")]
    inside: std::collections::HashSet<u64>,
    /// Cgroup ids not found there (ids are never reused, and a cgroup is
    /// never moved to another parent).
    #[cfg(target_os = "linux")]
    outside: std::collections::HashSet<u64>,
}

impl Gate {
    pub(crate) fn new(peers: RunPeers) -> Self {
        Self {
            peers,
            #[cfg(target_os = "linux")]
            diag: None,
            #[cfg(target_os = "linux")]
            seq: 0,
            #[cfg(target_os = "linux")]
            inside: std::collections::HashSet::new(),
            #[cfg(target_os = "linux")]
            outside: std::collections::HashSet::new(),
        }
    }

    /// Whether the client at `peer`, connected to `local` (the listener's
    /// address), is one of the run's processes.
    #[cfg(target_os = "linux")]
    pub(crate) fn admits(&mut self, peer: SocketAddr, local: SocketAddr) -> bool {
        let peers = Arc::clone(&self.peers.0);
        let Some(members) = peers.get() else {
            return false;
        };
        if matches!(members, Members::Nobody) {
            return false;
        }
        let Ok(owner) = self.look_up(peer, local) else {
            return false;
        };
        match members {
            Members::Nobody => false,
            Members::Uid(uid) => owner.uid == *uid,
            Members::Cgroup { dir, id, uid } => match owner.cgroup {
                Some(c) if c == *id => true,
                Some(c) => self.beneath(dir, c),
                // A kernel that does not say (before 5.9).
                None => owner.uid == *uid,
            },
        }
    }

    #[cfg(not(target_os = "linux"))]
    pub(crate) fn admits(&mut self, _peer: SocketAddr, _local: SocketAddr) -> bool {
        let _ = &self.peers;
        true
    }

    /// Whether the cgroup of id `id` is in the subtree of `dir`.
    #[cfg(target_os = "linux")]
    fn beneath(&mut self, dir: &Path, id: u64) -> bool {
        if self.inside.contains(&id) {
            return true;
        }
        if self.outside.contains(&id) {
            return false;
        }
        let found = subtree_holds(dir, id);
        let seen = if found {
            &mut self.inside
        } else {
            &mut self.outside
        };
        if seen.len() >= REMEMBERED {
            seen.clear();
        }
        seen.insert(id);
        found
    }

    /// The owner of the client socket at `peer` connected to `local`.
    #[cfg(target_os = "linux")]
    fn look_up(&mut self, peer: SocketAddr, local: SocketAddr) -> std::io::Result<diag::Owner> {
        let fd = match self.diag.take() {
            Some(fd) => fd,
            None => diag::open()?,
        };
        self.seq = self.seq.wrapping_add(1);
        let found = diag::owner(&fd, self.seq, peer, local);
        // A socket that failed (not a miss) is made anew next time, so no
        // late answer is read for another question.
        if found.is_ok() || found.as_ref().is_err_and(diag::is_miss) {
            self.diag = Some(fd);
        }
        found
    }
}

/// Whether a directory in the subtree of `dir` (beneath it, not `dir`
/// itself) has inode number `id`; at most [`MAX_WALK`] directories looked
/// at.
#[cfg(target_os = "linux")]
fn subtree_holds(dir: &Path, id: u64) -> bool {
    use std::os::unix::fs::MetadataExt;
    let mut todo = vec![dir.to_path_buf()];
    let mut walked = 0usize;
    while let Some(d) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if !kind.is_dir() {
                continue;
            }
            walked += 1;
            if walked > MAX_WALK {
                return false;
            }
            if entry.metadata().is_ok_and(|m| m.ino() == id) {
                return true;
            }
            todo.push(entry.path());
        }
    }
    false
}

/// The `SOCK_DIAG_BY_FAMILY` exact lookup of one TCP socket.
#[cfg(target_os = "linux")]
mod diag {
    use std::io;
    use std::net::{IpAddr, SocketAddr};
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

    /// What the kernel says of a socket.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub(super) struct Owner {
        /// The file-system uid of the process that made it.
        pub(super) uid: u32,
        /// The cgroup v2 id of the process that made it (Linux 5.9 and
        /// later).
        pub(super) cgroup: Option<u64>,
    }

    const NETLINK_SOCK_DIAG: i32 = 4;
    const SOCK_DIAG_BY_FAMILY: u16 = 20;
    const NLM_F_REQUEST: u16 = 1;
    const NLMSG_ERROR: u16 = 2;
    const INET_DIAG_CGROUP_ID: u16 = 21;
    /// `struct nlmsghdr`.
    const HDR: usize = 16;
    /// `struct inet_diag_req_v2`.
    const REQ: usize = 56;
    /// `struct inet_diag_msg`.
    const MSG: usize = 72;
    /// TCP states (include/net/tcp_states.h) whose socket is not a
    /// connected client's: its answer names another owner (a listener's,
    /// or none: a time-wait socket's is 0).
    const TCP_TIME_WAIT: u8 = 6;
    const TCP_LISTEN: u8 = 10;
    const TCP_NEW_SYN_RECV: u8 = 12;

    /// A netlink socket for sock_diag requests (any user may make them),
    /// whose answers wait at most a second.
    pub(super) fn open() -> io::Result<OwnedFd> {
        // SAFETY: socket(2) with constant arguments; the fd is owned below.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                NETLINK_SOCK_DIAG,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a new descriptor no one else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let timeout = libc::timeval {
            tv_sec: 1,
            tv_usec: 0,
        };
        // SAFETY: setsockopt reads a timeval of the size given.
        let set = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                std::ptr::from_ref(&timeout).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        if set != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(fd)
    }

    /// Whether `e` says the socket was not found (it is gone).
    pub(super) fn is_miss(e: &io::Error) -> bool {
        e.raw_os_error() == Some(libc::ENOENT)
    }

    /// The request for the TCP socket whose own address is `peer` and
    /// whose peer is `local` (IPv4 only).
    pub(super) fn request(
        seq: u32,
        peer: SocketAddr,
        local: SocketAddr,
    ) -> io::Result<[u8; HDR + REQ]> {
        let (IpAddr::V4(src), IpAddr::V4(dst)) = (peer.ip(), local.ip()) else {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "only IPv4 clients are looked up",
            ));
        };
        let mut m = [0u8; HDR + REQ];
        m[0..4].copy_from_slice(&((HDR + REQ) as u32).to_ne_bytes());
        m[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        m[6..8].copy_from_slice(&NLM_F_REQUEST.to_ne_bytes());
        m[8..12].copy_from_slice(&seq.to_ne_bytes());
        // nlmsg_pid 0: the kernel.
        let r = &mut m[HDR..];
        r[0] = libc::AF_INET as u8;
        r[1] = libc::IPPROTO_TCP as u8;
        // idiag_ext 0, pad 0; every state.
        r[4..8].copy_from_slice(&u32::MAX.to_ne_bytes());
        // struct inet_diag_sockid: ports and addresses in network order.
        r[8..10].copy_from_slice(&peer.port().to_be_bytes());
        r[10..12].copy_from_slice(&local.port().to_be_bytes());
        r[12..16].copy_from_slice(&src.octets());
        r[28..32].copy_from_slice(&dst.octets());
        // idiag_if 0 (any); idiag_cookie INET_DIAG_NOCOOKIE.
        r[48..56].copy_from_slice(&[0xff; 8]);
        Ok(m)
    }

    /// The owner of the TCP socket at `peer` connected to `local`.
    pub(super) fn owner(
        fd: &OwnedFd,
        seq: u32,
        peer: SocketAddr,
        local: SocketAddr,
    ) -> io::Result<Owner> {
        let req = request(seq, peer, local)?;
        let mut kernel: libc::sockaddr_nl = {
            // SAFETY: an all-zero sockaddr_nl is valid (nl_pid 0: the
            // kernel).
            unsafe { std::mem::zeroed() }
        };
        kernel.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        loop {
            // SAFETY: sendto reads `req` and the address of the sizes given.
            let sent = unsafe {
                libc::sendto(
                    fd.as_raw_fd(),
                    req.as_ptr().cast(),
                    req.len(),
                    0,
                    std::ptr::from_ref(&kernel).cast(),
                    std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
                )
            };
            if sent == req.len() as isize {
                break;
            }
            let e = io::Error::last_os_error();
            // A signal before anything was sent: send again (a run's own
            // client must not be refused for it).
            if sent < 0 && e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(if sent < 0 { e } else { bad("a short send") });
        }
        let mut buf = [0u8; 1024];
        loop {
            // SAFETY: recv writes at most `buf.len()` bytes into `buf`.
            let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            let n = match usize::try_from(n) {
                Ok(n) => n,
                Err(_) => {
                    let e = io::Error::last_os_error();
                    if e.kind() == io::ErrorKind::Interrupted {
                        continue;
                    }
                    return Err(e);
                }
            };
            match parse(&buf[..n.min(buf.len())], seq, peer, local) {
                // An answer to an earlier question: read on.
                Parsed::Other => continue,
                Parsed::Answer(owner) => return owner,
            }
        }
    }

    pub(super) enum Parsed {
        /// Not the answer to this question.
        Other,
        Answer(io::Result<Owner>),
    }

    fn u16_at(b: &[u8], at: usize) -> Option<u16> {
        Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
    }

    fn u32_at(b: &[u8], at: usize) -> Option<u32> {
        Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
    }

    fn u64_at(b: &[u8], at: usize) -> Option<u64> {
        Some(u64::from_ne_bytes(b.get(at..at + 8)?.try_into().ok()?))
    }

    fn bad(why: &str) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, format!("sock_diag: {why}"))
    }

    /// Reads one answer datagram (its first message) to question `seq`
    /// about the socket at `peer` connected to `local`.
    pub(super) fn parse(b: &[u8], seq: u32, peer: SocketAddr, local: SocketAddr) -> Parsed {
        let (Some(len), Some(kind), Some(got_seq)) = (u32_at(b, 0), u16_at(b, 4), u32_at(b, 8))
        else {
            return Parsed::Answer(Err(bad("a short answer")));
        };
        if got_seq != seq {
            return Parsed::Other;
        }
        let len = usize::try_from(len).unwrap_or(usize::MAX).min(b.len());
        if len < HDR {
            return Parsed::Answer(Err(bad("a short answer")));
        }
        let body = &b[HDR..len];
        if kind == NLMSG_ERROR {
            let errno = u32_at(body, 0).map_or(0, |e| e as i32);
            return Parsed::Answer(Err(if errno < 0 {
                io::Error::from_raw_os_error(-errno)
            } else {
                bad("an error answer without an error")
            }));
        }
        if kind != SOCK_DIAG_BY_FAMILY || body.len() < MSG {
            return Parsed::Answer(Err(bad("not a socket's answer")));
        }
        // struct inet_diag_msg: family, state, timer, retrans, then the
        // socket id (ports at 4 and 6, network order), ..., uid at 64.
        let state = body[1];
        let sport = u16::from_be_bytes([body[4], body[5]]);
        let dport = u16::from_be_bytes([body[6], body[7]]);
        if sport != peer.port() || dport != local.port() {
            return Parsed::Answer(Err(bad("an answer about another socket")));
        }
        if matches!(state, TCP_TIME_WAIT | TCP_LISTEN | TCP_NEW_SYN_RECV) {
            return Parsed::Answer(Err(bad("not a connected socket")));
        }
        let Some(uid) = u32_at(body, 64) else {
            return Parsed::Answer(Err(bad("a short answer")));
        };
        // Attributes (struct rtattr: length, type; 4-byte aligned).
        let mut cgroup = None;
        let mut at = MSG;
        while let (Some(alen), Some(atype)) = (u16_at(body, at), u16_at(body, at + 2)) {
            let alen = usize::from(alen);
            if alen < 4 {
                break;
            }
            if atype == INET_DIAG_CGROUP_ID {
                cgroup = u64_at(body, at + 4);
            }
            at += (alen + 3) & !3;
        }
        Parsed::Answer(Ok(Owner { uid, cgroup }))
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};
    use std::os::unix::fs::MetadataExt;
    use std::time::{Duration, Instant};

    fn own_cgroup() -> Option<PathBuf> {
        let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        let rel = text.lines().find_map(|l| l.strip_prefix("0::"))?;
        let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
        let root = mounts.lines().find_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f.get(2) == Some(&"cgroup2")).then(|| PathBuf::from(f[1]))
        })?;
        Some(root.join(rel.trim_start_matches('/')))
    }

    fn uid() -> u32 {
        // SAFETY: geteuid cannot fail.
        unsafe { libc::geteuid() }
    }

    /// The kernel names the owner of this process's own client socket:
    /// its uid, and its cgroup where this process's is (the cgroup
    /// directory's inode); a socket that is gone is a miss.
    #[test]
    fn a_client_socket_is_looked_up_exactly() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let local = listener.local_addr().unwrap();
        let client = TcpStream::connect(local).unwrap();
        let (_served, peer) = listener.accept().unwrap();
        assert_eq!(peer, client.local_addr().unwrap());
        let fd = diag::open().unwrap();
        let owner = diag::owner(&fd, 7, peer, local).unwrap();
        assert_eq!(owner.uid, uid());
        let cgroup = own_cgroup().expect("a cgroup v2 of this process");
        let ino = std::fs::metadata(&cgroup).unwrap().ino();
        assert_eq!(owner.cgroup, Some(ino), "{}", cgroup.display());
        // Twins: a port nothing connects from any more is a miss; one a
        // listener holds is not taken for a client (its owner is the
        // listener's).
        let unused = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let missed = diag::owner(&fd, 8, unused, local).unwrap_err();
        assert!(diag::is_miss(&missed), "{missed}");
        let other = TcpListener::bind("127.0.0.1:0").unwrap();
        let at = other.local_addr().unwrap();
        let listening = diag::owner(&fd, 9, at, local).unwrap_err();
        assert!(!diag::is_miss(&listening), "{listening}");
        assert_eq!(
            listening.kind(),
            std::io::ErrorKind::InvalidData,
            "{listening}"
        );
    }

    /// A gate serves the run's peers only: set to this process's uid (no
    /// cgroup) or its cgroup, its client is admitted; set to another uid,
    /// another cgroup, or not set at all, it is not.
    #[test]
    fn the_gate_admits_only_the_runs_own() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let local = listener.local_addr().unwrap();
        let _client = TcpStream::connect(local).unwrap();
        let (_served, peer) = listener.accept().unwrap();
        let gate = |set: &dyn Fn(&RunPeers)| {
            let peers = RunPeers::new();
            set(&peers);
            Gate::new(peers).admits(peer, local)
        };
        assert!(!gate(&|_| {}), "no identity yet: no one");
        assert!(gate(&|p| p.set(uid(), None)), "its uid");
        assert!(!gate(&|p| p.set(uid() ^ 1, None)), "another uid");
        let cgroup = own_cgroup().unwrap();
        assert!(gate(&|p| p.set(uid(), Some(&cgroup))), "its cgroup");
        // The parent's subtree holds this cgroup (a nested run's socket);
        // a cgroup made beside it, empty, holds nothing of this process.
        if let Some(parent) = cgroup.parent().filter(|p| p.join("cgroup.procs").exists()) {
            assert!(gate(&|p| p.set(uid(), Some(parent))), "beneath the run's");
        }
        let beside = cgroup.join(format!("peer-test-{}", std::process::id()));
        if std::fs::create_dir(&beside).is_ok() {
            let admitted = gate(&|p| p.set(uid(), Some(&beside)));
            let _ = std::fs::remove_dir(&beside);
            assert!(!admitted, "another cgroup, the same uid");
        }
        let gone = Path::new("/nonexistent/cgroup");
        assert!(
            !gate(&|p| p.set(uid(), Some(gone))),
            "an unreadable cgroup: no one"
        );
    }

    /// Accept to first byte, with and without the check (printed: 10th
    /// percentile and median of 1000 sequential clients each, interleaved): a `CONNECT` to a name no rule lists,
    /// answered `403` by a proxy serving this process's cgroup (and uid),
    /// beside one serving anyone; both answer (positive control), and a
    /// proxy of another uid's run closes the same client unanswered.
    #[test]
    fn accept_to_first_byte_with_and_without_the_check() {
        use std::io::{Read, Write};
        let first_byte = |proxy: &crate::Proxy| {
            let mut s = TcpStream::connect(proxy.addr()).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let start = Instant::now();
            s.write_all(b"CONNECT unlisted.example:443 HTTP/1.1\r\n\r\n")
                .unwrap();
            let mut b = [0u8; 1];
            let n = s.read(&mut b).unwrap_or(0);
            (start.elapsed(), n == 1 && b[0] == b'H')
        };
        let start = |peers: Option<RunPeers>| {
            let mut opts = crate::ProxyOptions::default();
            if let Some(p) = peers {
                opts = opts.peers(p);
            }
            crate::Proxy::start(Vec::<crate::EgressRule>::new(), opts).unwrap()
        };
        let mine = RunPeers::new();
        mine.set(uid(), own_cgroup().as_deref());
        let (open, gated) = (start(None), start(Some(mine)));
        // Interleaved, so both meet the same load.
        let (mut unchecked, mut checked) = (Vec::new(), Vec::new());
        for _ in 0..1000 {
            for (proxy, times) in [(&open, &mut unchecked), (&gated, &mut checked)] {
                let (t, answered) = first_byte(proxy);
                assert!(answered, "served");
                times.push(t);
            }
        }
        let at = |times: &mut Vec<Duration>, q: usize| {
            times.sort();
            times[times.len() * q / 100]
        };
        eprintln!(
            "accept to first byte (p10, median): unchecked {:?} {:?}, checked {:?} {:?}",
            at(&mut unchecked, 10),
            at(&mut unchecked, 50),
            at(&mut checked, 10),
            at(&mut checked, 50)
        );
        let theirs = RunPeers::new();
        theirs.set(uid() ^ 1, None);
        let other = start(Some(theirs));
        assert!(!first_byte(&other).1, "another run's proxy closes it");
        // Counted, not refused.
        let deadline = Instant::now() + Duration::from_secs(5);
        while other.shared.ended().foreign() != 1 {
            assert!(Instant::now() < deadline, "counted once");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(other.refusal_count(), 0);
    }

    /// A client on an IPv6 socket connected to the IPv4 listener (a
    /// v4-mapped address, as Java's dual-stack sockets connect) is found
    /// and admitted as the IPv4 one is; another uid's gate refuses it.
    #[test]
    fn a_v4_mapped_client_is_looked_up_too() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let local = listener.local_addr().unwrap();
        let mapped: SocketAddr = format!("[::ffff:127.0.0.1]:{}", local.port())
            .parse()
            .unwrap();
        let Ok(_client) = TcpStream::connect(mapped) else {
            // No IPv6 on this host: nothing can connect so.
            return;
        };
        let (_served, peer) = listener.accept().unwrap();
        assert!(peer.is_ipv4(), "{peer}");
        let gate = |uid: u32, cgroup: Option<PathBuf>| {
            let peers = RunPeers::new();
            peers.set(uid, cgroup.as_deref());
            Gate::new(peers).admits(peer, local)
        };
        assert!(gate(uid(), own_cgroup()), "its cgroup");
        assert!(gate(uid(), None), "its uid");
        assert!(!gate(uid() ^ 1, None), "another uid");
    }

    /// The cost of one check on accept (printed): a look-up on a kept
    /// netlink socket and the comparison, the run's own cgroup.
    #[test]
    fn the_check_costs_microseconds() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let local = listener.local_addr().unwrap();
        let _client = TcpStream::connect(local).unwrap();
        let (_served, peer) = listener.accept().unwrap();
        let peers = RunPeers::new();
        peers.set(uid(), own_cgroup().as_deref());
        let mut gate = Gate::new(peers);
        assert!(gate.admits(peer, local));
        let n = 2000u32;
        let start = Instant::now();
        for _ in 0..n {
            assert!(gate.admits(peer, local));
        }
        let each = start.elapsed() / n;
        eprintln!("one peer check: {each:?}");
        assert!(each < Duration::from_millis(5), "{each:?}");
    }
}
