//! `connect` brokered: a pathname UNIX socket is reached only beneath a write
//! path (not beneath a deny path) or when allowed; abstract addresses are
//! refused; everything else is connected as the kernel would, with the
//! kernel's answers; the connect runs with the caller's credentials.
#![cfg(target_os = "linux")]

use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::common::*;
use sandbox_broker::{BrokerDecision, Refusal};

fn un(path: &Path) -> Vec<u8> {
    sockaddr_un(path.as_os_str().as_bytes())
}

/// One socket per address, connected and closed; errno of each into `out`
/// (async-signal-safe).
fn connect_each(addrs: &[Vec<u8>], out: &Shared, from: usize) {
    for (i, a) in addrs.iter().enumerate() {
        let fd = new_socket(libc::AF_UNIX, libc::SOCK_STREAM);
        if fd < 0 {
            out.set(from + i, 1000 - fd);
            continue;
        }
        out.set(from + i, connect_to(fd, a));
        // SAFETY: our socket.
        unsafe { libc::close(fd) };
    }
}

#[test]
fn unix_sockets_are_reached_only_beneath_write_paths_or_when_allowed() {
    let fx = Fixture::new();
    std::fs::create_dir(fx.w.join(".git")).unwrap();
    let docker = unix_listener(&fx.o.join("docker.sock"), libc::SOCK_STREAM, 16);
    let inside = unix_listener(&fx.w.join("in.sock"), libc::SOCK_STREAM, 16);
    let allowed = unix_listener(&fx.o.join("allowed.sock"), libc::SOCK_STREAM, 16);
    let denied = unix_listener(&fx.w.join(".git/hook.sock"), libc::SOCK_STREAM, 16);
    let abstract_name = format!("\0sandbox-broker-test-{}", std::process::id());
    let abstract_l = unix_listener_abstract(abstract_name.as_bytes());
    std::os::unix::fs::symlink(fx.o.join("docker.sock"), fx.w.join("link.sock")).unwrap();
    std::os::unix::fs::symlink(fx.o.join("allowed.sock"), fx.w.join("link-allowed.sock")).unwrap();
    std::os::unix::fs::symlink(fx.w.join("in.sock"), fx.w.join("link-in.sock")).unwrap();
    // An O_PATH fd on each, at fixed numbers in the child: /proc/self/fd/N.
    let opath = |p: &Path| {
        // SAFETY: open of a NUL-terminated path.
        let fd = unsafe { libc::open(cstr(p).as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
        assert!(fd >= 0);
        // SAFETY: fresh fd.
        unsafe { OwnedFd::from_raw_fd(fd) }
    };
    let (op_in, op_out) = (
        opath(&fx.w.join("in.sock")),
        opath(&fx.o.join("docker.sock")),
    );
    let addrs = vec![
        un(&fx.o.join("docker.sock")),
        un(&fx.w.join("in.sock")),
        un(&fx.o.join("allowed.sock")),
        un(&fx.w.join("link.sock")),
        un(&fx.w.join("link-allowed.sock")),
        un(&fx.w.join("link-in.sock")),
        un(&fx.w.join(".git/hook.sock")),
        sockaddr_un(abstract_name.as_bytes()),
        sockaddr_un(b"/proc/self/fd/200"),
        sockaddr_un(b"/proc/self/fd/201"),
    ];
    let relative = [sockaddr_un(b"in.sock"), sockaddr_un(b"docker.sock")];
    let (cw, co) = (cstr(&fx.w), cstr(&fx.o));
    let out = Shared::new(addrs.len() + 2);
    let rules = fx
        .rules(&[".git"])
        .with_allow_unix(vec![fx.o.join("allowed.sock")]);
    let run = confined_connect(rules, || {
        // SAFETY (child): dup2 and chdir with live arguments.
        unsafe {
            libc::dup2(op_in.as_raw_fd(), 200);
            libc::dup2(op_out.as_raw_fd(), 201);
        }
        connect_each(&addrs, &out, 0);
        // SAFETY (child): chdir to a NUL-terminated path.
        unsafe { libc::chdir(cw.as_ptr()) };
        connect_each(&relative[..1], &out, addrs.len());
        // SAFETY (child): as above.
        unsafe { libc::chdir(co.as_ptr()) };
        connect_each(&relative[1..], &out, addrs.len() + 1);
        0
    });
    assert_eq!(run.code, 0);
    let (ok, acces, perm) = (0, libc::EACCES, libc::EPERM);
    assert_eq!(
        out.to_vec(),
        vec![acces, ok, ok, acces, ok, ok, acces, perm, ok, acces, ok, acces],
        "docker, in, allowed, link->docker, link->allowed, link->in, .git/hook, abstract, /proc/self/fd in, /proc/self/fd docker, relative in, relative docker\n{}",
        run.log.explain(20)
    );
    // The listeners' side: nothing reached the refused ones.
    assert_eq!(accept_all(&docker), 0);
    assert_eq!(accept_all(&denied), 0);
    assert_eq!(accept_all(&abstract_l), 0);
    assert_eq!(accept_all(&inside), 4);
    assert_eq!(accept_all(&allowed), 2);
    // The log: each refusal names the canonical path it refused.
    let refused: Vec<(Option<&Path>, &Refusal)> = run
        .log
        .records
        .iter()
        .filter_map(|r| match &r.decision {
            BrokerDecision::Refused { reason } => Some((r.target.resolved.as_deref(), reason)),
            _ => None,
        })
        .collect();
    let docker_path = fx.o.join("docker.sock");
    let not_allowed = (Some(docker_path.as_path()), &Refusal::UnixSocketNotAllowed);
    assert_eq!(
        refused,
        vec![
            not_allowed,
            not_allowed,
            (
                Some(fx.w.join(".git/hook.sock").as_path()),
                &Refusal::WriteDenyPath
            ),
            (None, &Refusal::AbstractUnixSocket),
            not_allowed,
            not_allowed,
        ],
        "{}",
        run.log.explain(20)
    );
    let performed: Vec<_> = run
        .log
        .performed()
        .map(|r| {
            assert_eq!(r.syscall, "connect");
            r.target.resolved.clone().unwrap()
        })
        .collect();
    assert_eq!(performed.len(), 6, "{}", run.log.explain(20));
    // The path as written beside the canonical path refused.
    let link = fx.w.join("link.sock");
    let link = run
        .log
        .records
        .iter()
        .find(|r| r.target.path.as_deref() == link.to_str())
        .expect("the symlink's record");
    assert_eq!(link.target.resolved.as_deref(), Some(docker_path.as_path()));
    assert!(
        run.log.explain(20).contains("docker.sock"),
        "{}",
        run.log.explain(20)
    );
}

#[test]
fn the_policys_allowed_unix_sockets_are_reachable() {
    let fx = Fixture::new();
    let agent = unix_listener(&fx.o.join("agent.sock"), libc::SOCK_STREAM, 16);
    let docker = unix_listener(&fx.o.join("docker.sock"), libc::SOCK_STREAM, 16);
    let policy = sandbox_core::SandboxPolicy {
        write_paths: vec![fx.w.display().to_string()],
        allow_unix_sockets: vec![fx.o.join("agent.sock").display().to_string()],
        ..sandbox_core::SandboxPolicy::default()
    }
    .resolve(&sandbox_core::ExpandContext::default())
    .expect("policy resolves");
    assert_eq!(policy.allow_unix_sockets(), &[fx.o.join("agent.sock")]);
    let addrs = vec![un(&fx.o.join("agent.sock")), un(&fx.o.join("docker.sock"))];
    let out = Shared::new(2);
    let rules = sandbox_broker::BrokerRules::new(&policy).unwrap();
    let run = confined_connect(rules, || {
        connect_each(&addrs, &out, 0);
        0
    });
    assert_eq!(run.code, 0);
    assert_eq!(
        out.to_vec(),
        vec![0, libc::EACCES],
        "{}",
        run.log.explain(5)
    );
    assert_eq!(accept_all(&agent), 1);
    assert_eq!(accept_all(&docker), 0);
}

fn unix_listener_abstract(name: &[u8]) -> OwnedFd {
    let fd = new_socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_NONBLOCK);
    assert!(fd >= 0);
    let addr = sockaddr_un(name);
    // SAFETY: bind and listen on our socket with a live address.
    unsafe {
        assert_eq!(
            libc::bind(fd, addr.as_ptr().cast(), addr.len() as libc::socklen_t),
            0
        );
        assert_eq!(libc::listen(fd, 16), 0);
        OwnedFd::from_raw_fd(fd)
    }
}

/// What a table case connects.
#[derive(Clone, Copy)]
enum Sock {
    /// An fd number the test set up (or none at all).
    Raw(i32),
    /// A new socket(domain, type).
    New(i32, i32),
}

struct Case {
    name: &'static str,
    sock: Sock,
    addr: Vec<u8>,
    /// addrlen when it is not addr.len().
    len: Option<i32>,
    /// An address pointer other than addr's.
    ptr: Option<*const u8>,
    /// Connect once more after a success.
    twice: bool,
    /// SO_SNDTIMEO to set first (ms); checked to be unchanged afterwards.
    sndtimeo_ms: Option<i64>,
}

fn case(name: &'static str, sock: Sock, addr: Vec<u8>) -> Case {
    Case {
        name,
        sock,
        addr,
        len: None,
        ptr: None,
        twice: false,
        sndtimeo_ms: None,
    }
}

/// errno of the case's connect (0 for success), async-signal-safe.
fn run_case(c: &Case) -> i32 {
    let (fd, owned) = match c.sock {
        Sock::Raw(n) => (n, false),
        Sock::New(domain, kind) => (new_socket(domain, kind), true),
    };
    if owned && fd < 0 {
        return 1000 - fd;
    }
    let tv = |ms: i64| libc::timeval {
        tv_sec: (ms / 1000) as _,
        tv_usec: ((ms % 1000) * 1000) as _,
    };
    let tv_len = std::mem::size_of::<libc::timeval>() as libc::socklen_t;
    if let Some(ms) = c.sndtimeo_ms {
        let t = tv(ms);
        // SAFETY: setsockopt with a live timeval.
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_SNDTIMEO,
                (&t as *const libc::timeval).cast(),
                tv_len,
            )
        };
    }
    let ptr = c.ptr.unwrap_or(c.addr.as_ptr());
    let len = c.len.unwrap_or(c.addr.len() as i32) as u32;
    // SAFETY: connect with the case's (possibly bad on purpose) pointer.
    let mut r = result(unsafe { libc::connect(fd, ptr.cast(), len) });
    if c.twice && r == 0 {
        // SAFETY: as above.
        r = result(unsafe { libc::connect(fd, ptr.cast(), len) });
    }
    if let Some(ms) = c.sndtimeo_ms {
        let mut t = tv(0);
        let mut l = tv_len;
        // SAFETY: getsockopt into a live timeval.
        unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_SNDTIMEO,
                (&mut t as *mut libc::timeval).cast(),
                &mut l,
            )
        };
        if t.tv_sec != tv(ms).tv_sec || t.tv_usec != tv(ms).tv_usec {
            r = 9999;
        }
    }
    if owned {
        // SAFETY: our socket.
        unsafe { libc::close(fd) };
    }
    r
}

#[test]
fn connect_answers_as_the_kernel() {
    let fx = Fixture::new();
    let _inside = unix_listener(&fx.w.join("in.sock"), libc::SOCK_STREAM, 64);
    let _dgram = unix_listener(&fx.w.join("dgram.sock"), libc::SOCK_DGRAM, 0);
    let full = unix_listener(&fx.w.join("full.sock"), libc::SOCK_STREAM, 0);
    // Backlog 0 holds one connection: this one fills it.
    let filler = new_socket(libc::AF_UNIX, libc::SOCK_STREAM);
    assert_eq!(connect_to(filler, &un(&fx.w.join("full.sock"))), 0);
    let file = fx.file(&fx.w.join("file"), 0o644);
    let regular = std::fs::File::open(&file).unwrap();
    let opath = {
        // SAFETY: open of a NUL-terminated path.
        let fd = unsafe { libc::open(cstr(&file).as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
        // SAFETY: fresh fd.
        unsafe { OwnedFd::from_raw_fd(fd) }
    };
    // SAFETY: an anonymous PROT_NONE page: any read of it faults.
    let guard = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    } as *const u8;
    let stream = Sock::New(libc::AF_UNIX, libc::SOCK_STREAM);
    let inside = un(&fx.w.join("in.sock"));
    let mut padded = inside.clone();
    padded.resize(129, 0);
    let mut no_nul = inside.clone();
    no_nul.pop();
    let family_only = (libc::AF_UNIX as u16).to_ne_bytes().to_vec();
    let unspec = (libc::AF_UNSPEC as u16).to_ne_bytes().to_vec();
    let mut unspec16 = unspec.clone();
    unspec16.resize(16, 0);
    let v4 = |port: u16| sockaddr_ip(SocketAddr::from(([127, 0, 0, 1], port)));
    let mut unix110 = un(Path::new("/x"));
    unix110.resize(110, 0);
    let tcp = Sock::New(libc::AF_INET, libc::SOCK_STREAM);
    let udp = Sock::New(libc::AF_INET, libc::SOCK_DGRAM);
    let cases = vec![
        case("fd -1", Sock::Raw(-1), inside.clone()),
        case("fd not open", Sock::Raw(4000), inside.clone()),
        case("O_PATH fd", Sock::Raw(opath.as_raw_fd()), inside.clone()),
        case(
            "regular file",
            Sock::Raw(regular.as_raw_fd()),
            inside.clone(),
        ),
        Case {
            len: Some(129),
            ..case(
                "regular file, addrlen 129",
                Sock::Raw(regular.as_raw_fd()),
                padded.clone(),
            )
        },
        Case {
            len: Some(129),
            ..case("fd not open, addrlen 129", Sock::Raw(4000), padded.clone())
        },
        Case {
            len: Some(129),
            ..case("addrlen 129", stream, padded.clone())
        },
        Case {
            len: Some(-1),
            ..case("addrlen -1", stream, padded.clone())
        },
        Case {
            ptr: Some(guard),
            len: Some(16),
            ..case("unreadable address", stream, Vec::new())
        },
        Case {
            ptr: Some(std::ptr::null()),
            len: Some(0),
            ..case("NULL address, addrlen 0", stream, Vec::new())
        },
        case("family only", stream, family_only),
        case("AF_UNSPEC on a stream socket", stream, unspec.clone()),
        case("AF_INET bytes on a UNIX socket", stream, v4(9)),
        case("a regular file", stream, un(&file)),
        case("missing", stream, un(&fx.w.join("missing.sock"))),
        case("through a file", stream, un(&file.join("x.sock"))),
        case(
            "stream to a datagram socket",
            stream,
            un(&fx.w.join("dgram.sock")),
        ),
        Case {
            twice: true,
            ..case("connected twice", stream, inside.clone())
        },
        case("path ends at addrlen", stream, no_nul),
        case(
            "full backlog, non-blocking",
            Sock::New(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_NONBLOCK),
            un(&fx.w.join("full.sock")),
        ),
        Case {
            sndtimeo_ms: Some(200),
            ..case(
                "full backlog, SO_SNDTIMEO 200 ms",
                stream,
                un(&fx.w.join("full.sock")),
            )
        },
        case(
            "datagram AF_UNSPEC",
            Sock::New(libc::AF_UNIX, libc::SOCK_DGRAM),
            unspec.clone(),
        ),
        case(
            "datagram to a datagram socket",
            Sock::New(libc::AF_UNIX, libc::SOCK_DGRAM),
            un(&fx.w.join("dgram.sock")),
        ),
        case("TCP, short UNIX address", tcp, un(Path::new("/x"))),
        case("TCP, UNIX address", tcp, unix110),
        Case {
            len: Some(8),
            ..case("TCP, addrlen 8", tcp, v4(9))
        },
        case("TCP, AF_UNSPEC", tcp, unspec16.clone()),
        case("UDP", udp, v4(9)),
        case("UDP, AF_UNSPEC", udp, unspec16),
    ];
    let bare: Vec<i32> = cases.iter().map(run_case).collect();
    let out = Shared::new(cases.len());
    let run = confined_connect(fx.rules(&[]), || {
        for (i, c) in cases.iter().enumerate() {
            out.set(i, run_case(c));
        }
        0
    });
    assert_eq!(run.code, 0);
    let names: Vec<&str> = cases.iter().map(|c| c.name).collect();
    let confined = out.to_vec();
    let differ: Vec<_> = names
        .iter()
        .zip(bare.iter().zip(&confined))
        .filter(|(_, (b, c))| b != c)
        .collect();
    assert!(
        differ.is_empty(),
        "(case, (bare, brokered)): {differ:?}\n{}",
        run.log.explain(40)
    );
    // Spot checks that the table means what it says.
    let errno_of = |name: &str| bare[names.iter().position(|n| *n == name).unwrap()];
    assert_eq!(errno_of("fd -1"), libc::EBADF);
    assert_eq!(errno_of("regular file"), libc::ENOTSOCK);
    assert_eq!(errno_of("regular file, addrlen 129"), libc::EINVAL);
    assert_eq!(errno_of("unreadable address"), libc::EFAULT);
    assert_eq!(errno_of("a regular file"), libc::ECONNREFUSED);
    assert_eq!(errno_of("stream to a datagram socket"), libc::EPROTOTYPE);
    assert_eq!(errno_of("connected twice"), libc::EISCONN);
    assert_eq!(errno_of("full backlog, non-blocking"), libc::EAGAIN);
    assert_eq!(errno_of("full backlog, SO_SNDTIMEO 200 ms"), libc::EAGAIN);
    assert_eq!(errno_of("TCP, UNIX address"), libc::EAFNOSUPPORT);
    assert_eq!(errno_of("path ends at addrlen"), 0);
    assert!(
        run.log.refusals().next().is_none(),
        "{}",
        run.log.explain(40)
    );
    drop(full);
    // SAFETY: our socket.
    unsafe { libc::close(filler) };
}

#[test]
fn the_connect_runs_with_the_callers_credentials() {
    let fx = Fixture::new();
    // nobody may search the way to W.
    set_mode(fx.tmp.path(), 0o755);
    set_mode(&fx.w, 0o755);
    let _private = unix_listener(&fx.w.join("private.sock"), libc::SOCK_STREAM, 16);
    let _open = unix_listener(&fx.w.join("open.sock"), libc::SOCK_STREAM, 16);
    set_mode(&fx.w.join("private.sock"), 0o600);
    set_mode(&fx.w.join("open.sock"), 0o666);
    std::fs::create_dir(fx.w.join("closed")).unwrap();
    set_mode(&fx.w.join("closed"), 0o700);
    let _hidden = unix_listener(&fx.w.join("closed/x.sock"), libc::SOCK_STREAM, 16);
    set_mode(&fx.w.join("closed/x.sock"), 0o666);
    let addrs = vec![
        un(&fx.w.join("private.sock")),
        un(&fx.w.join("open.sock")),
        un(&fx.w.join("closed/x.sock")),
    ];
    let out = Shared::new(addrs.len());
    let run = confined_connect(fx.rules(&[]), || {
        let rc = become_nobody();
        if rc != 0 {
            return 100 + rc;
        }
        connect_each(&addrs, &out, 0);
        0
    });
    assert_eq!(run.code, 0);
    // The kernel's write-permission check on the socket and its search
    // permission on the way, both as nobody (the broker itself is root).
    assert_eq!(
        out.to_vec(),
        vec![libc::EACCES, 0, libc::EACCES],
        "{}",
        run.log.explain(10)
    );
    // The same as root: all three connect.
    let out = Shared::new(addrs.len());
    let run = confined_connect(fx.rules(&[]), || {
        connect_each(&addrs, &out, 0);
        0
    });
    assert_eq!(run.code, 0);
    assert_eq!(out.to_vec(), vec![0, 0, 0], "{}", run.log.explain(10));
}

/// TCP: blocking connect, non-blocking connect then poll, and the refused
/// forms of both; results into `out` from `at` (async-signal-safe).
fn tcp_cases(open: &[u8], closed: &[u8], domain: i32, out: &Shared, at: usize) {
    let fd = new_socket(domain, libc::SOCK_STREAM);
    out.set(at, connect_to(fd, open));
    // SAFETY: our socket.
    unsafe { libc::close(fd) };
    let fd = new_socket(domain, libc::SOCK_STREAM);
    out.set(at + 1, connect_to(fd, closed));
    // SAFETY: our socket.
    unsafe { libc::close(fd) };
    for (i, addr) in [open, closed].into_iter().enumerate() {
        let fd = new_socket(domain, libc::SOCK_STREAM | libc::SOCK_NONBLOCK);
        out.set(at + 2 + 3 * i, connect_to(fd, addr));
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLOUT,
            revents: 0,
        };
        // SAFETY: one live pollfd.
        out.set(at + 3 + 3 * i, unsafe { libc::poll(&mut p, 1, 5000) });
        let mut err: libc::c_int = -1;
        let mut len = 4;
        // SAFETY: getsockopt into a live int.
        unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_ERROR,
                (&mut err as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        out.set(at + 4 + 3 * i, err);
        // SAFETY: our socket.
        unsafe { libc::close(fd) };
    }
}

const TCP_SLOTS: usize = 8;

#[test]
fn tcp_connects_as_the_kernel_blocking_and_not() {
    let fx = Fixture::new();
    let mut families = vec![(libc::AF_INET, "127.0.0.1:0")];
    if TcpListener::bind("[::1]:0").is_ok() {
        families.push((libc::AF_INET6, "[::1]:0"));
    } else {
        eprintln!("no ::1 on this host: IPv6 loopback not tried");
    }
    let mut setups = Vec::new();
    for (domain, bind) in &families {
        let listener = TcpListener::bind(bind).unwrap();
        listener.set_nonblocking(true).unwrap();
        let closed = TcpListener::bind(bind).unwrap().local_addr().unwrap();
        let open = sockaddr_ip(listener.local_addr().unwrap());
        setups.push((*domain, listener, open, sockaddr_ip(closed)));
    }
    let out = Shared::new(TCP_SLOTS * setups.len());
    let run = confined_connect(fx.rules(&[]), || {
        for (i, (domain, _, open, closed)) in setups.iter().enumerate() {
            tcp_cases(open, closed, *domain, &out, i * TCP_SLOTS);
        }
        0
    });
    assert_eq!(run.code, 0);
    let bare = Shared::new(TCP_SLOTS * setups.len());
    for (i, (domain, _, open, closed)) in setups.iter().enumerate() {
        tcp_cases(open, closed, *domain, &bare, i * TCP_SLOTS);
    }
    let want = [
        0,
        libc::ECONNREFUSED,
        libc::EINPROGRESS,
        1,
        0,
        libc::EINPROGRESS,
        1,
        libc::ECONNREFUSED,
    ];
    for (i, (domain, listener, _, _)) in setups.iter().enumerate() {
        let got = &out.to_vec()[i * TCP_SLOTS..(i + 1) * TCP_SLOTS];
        assert_eq!(got, want, "domain {domain}:\n{}", run.log.explain(20));
        assert_eq!(
            &bare.to_vec()[i * TCP_SLOTS..(i + 1) * TCP_SLOTS],
            want,
            "bare, domain {domain}"
        );
        // The brokered blocking and non-blocking connects, then the bare ones.
        let mut accepted = 0;
        while listener.accept().is_ok() {
            accepted += 1;
        }
        assert_eq!(accepted, 4, "domain {domain}");
    }
    // The log names ip:port and what the kernel answered.
    let open = setups[0].1.local_addr().unwrap().to_string();
    let closed = SocketAddr::from((
        [127, 0, 0, 1],
        u16::from_be_bytes([setups[0].3[2], setups[0].3[3]]),
    ))
    .to_string();
    let seen = |path: &str, decision: BrokerDecision| {
        run.log.records.iter().any(|r| {
            r.syscall == "connect"
                && r.target.path.as_deref() == Some(path)
                && r.decision == decision
        })
    };
    assert!(
        seen(&open, BrokerDecision::Performed),
        "{:?}",
        run.log.records
    );
    assert!(seen(
        &open,
        BrokerDecision::Failed {
            errno: libc::EINPROGRESS
        }
    ));
    assert!(seen(
        &closed,
        BrokerDecision::Failed {
            errno: libc::ECONNREFUSED
        }
    ));
    assert!(seen(
        &closed,
        BrokerDecision::Failed {
            errno: libc::EINPROGRESS
        }
    ));
    assert_eq!(run.log.records.len(), 4 * setups.len());
    assert!(run.log.refusals().next().is_none());
}

#[test]
fn without_routing_nothing_changes() {
    // Positive control of the harness: the same refused socket connects when
    // connect is not routed (the filter decides routing, not the broker).
    let fx = Fixture::new();
    let docker = unix_listener(&fx.o.join("docker.sock"), libc::SOCK_STREAM, 16);
    let addrs = vec![un(&fx.o.join("docker.sock"))];
    let out = Shared::new(1);
    let run = confined(fx.rules(&[]), || {
        connect_each(&addrs, &out, 0);
        0
    });
    assert_eq!(run.code, 0);
    assert_eq!(out.get(0), 0);
    assert_eq!(accept_all(&docker), 1);
    assert!(run.log.records.is_empty());
}

/// The second wall: a `connect` that reaches the broker under a policy
/// without network (the filter keeps it in the kernel, so only a filter bug
/// could route one) is refused and never performed; the same connect under
/// network on is performed.
#[test]
fn a_routed_connect_without_network_is_refused() {
    let fx = Fixture::new();
    for network in [false, true] {
        let name = format!("s-{network}.sock");
        let listener = unix_listener(&fx.w.join(&name), libc::SOCK_STREAM, 16);
        let policy = sandbox_core::SandboxPolicy {
            write_paths: vec![fx.w.display().to_string()],
            network,
            ..sandbox_core::SandboxPolicy::default()
        }
        .resolve(&sandbox_core::ExpandContext::default())
        .expect("policy resolves");
        let addrs = vec![un(&fx.w.join(&name))];
        let out = Shared::new(1);
        let rules = sandbox_broker::BrokerRules::new(&policy).unwrap();
        let run = confined_connect(rules, || {
            connect_each(&addrs, &out, 0);
            0
        });
        assert_eq!(run.code, 0);
        let log = run.log.explain(5);
        if network {
            assert_eq!(out.to_vec(), vec![0], "{log}");
            assert_eq!(accept_all(&listener), 1);
        } else {
            assert_ne!(out.to_vec(), vec![0], "{log}");
            assert_eq!(accept_all(&listener), 0, "never performed");
            assert!(
                run.log.refusals().any(|r| matches!(
                    r.decision,
                    BrokerDecision::Refused {
                        reason: Refusal::NetworkOff
                    }
                )),
                "{log}"
            );
        }
    }
}
