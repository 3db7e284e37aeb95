//! Host UNIX sockets with the network on: a socket outside the write paths
//! (like docker.sock) is refused unless allowed; one inside a write path is
//! usable; TCP keeps working.
#![cfg(target_os = "linux")]

use std::os::fd::AsRawFd;
use std::os::unix::net::UnixListener;
use std::path::Path;

use sandbox_tests::sandbox;

const CONNECT: &str = "import socket, sys\n\
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n\
try:\n    s.connect(sys.argv[1]); print('connected')\n\
except OSError as e:\n    print('refused', e.errno)\n";

fn connect(extra: &[&str], w: &Path, socket: &Path) -> String {
    let out = sandbox()
        .args(["run", "-w"])
        .arg(w)
        .args(extra)
        .args(["--", "python3", "-c", CONNECT])
        .arg(socket)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[test]
fn host_unix_sockets_are_confined_with_the_network_on() {
    let host = tempfile::tempdir().unwrap();
    let w = tempfile::tempdir().unwrap();
    let outside = host.path().join("docker.sock");
    let inside = w.path().join("app.sock");
    let _a = UnixListener::bind(&outside).unwrap();
    let _b = UnixListener::bind(&inside).unwrap();
    // Twin: unconfined, the outside socket is reachable.
    assert!(std::os::unix::net::UnixStream::connect(&outside).is_ok());
    assert!(connect(&[], w.path(), &outside).starts_with("refused"));
    assert_eq!(connect(&[], w.path(), &inside), "connected");
    let allow = outside.to_str().unwrap();
    assert_eq!(
        connect(&["--allow-unix", allow], w.path(), &outside),
        "connected"
    );
    // A symlink inside the write path to the outside socket is refused too.
    let link = w.path().join("link.sock");
    std::os::unix::fs::symlink(&outside, &link).unwrap();
    assert!(connect(&[], w.path(), &link).starts_with("refused"));
}

#[test]
fn tcp_to_loopback_still_works_with_the_network_on() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let script = format!(
        "import socket; socket.create_connection(('127.0.0.1', {port}), timeout=10); print('ok')"
    );
    let out = sandbox()
        .args(["run", "--", "python3", "-c", &script])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "ok",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `sandbox run [extra] -- sh -c 'echo hi'` with stdout one end of a
/// socket pair of `kind`; the exit code, stderr and what reached the other end.
fn with_socket_stdout(kind: i32, extra: &[&str]) -> (i32, String, String) {
    use std::os::fd::FromRawFd;
    let mut fds = [0; 2];
    // SAFETY: fds has room for the two descriptors.
    assert_eq!(
        unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                kind | libc::SOCK_CLOEXEC,
                0,
                fds.as_mut_ptr(),
            )
        },
        0
    );
    // SAFETY: fresh descriptors we own.
    let (ours, theirs) = unsafe {
        (
            std::fs::File::from_raw_fd(fds[0]),
            std::os::fd::OwnedFd::from_raw_fd(fds[1]),
        )
    };
    let out = sandbox()
        .arg("run")
        .args(extra)
        .args(["--", "sh", "-c", "echo hi"])
        .stdout(std::process::Stdio::from(theirs))
        .output()
        .unwrap();
    let mut got = vec![0; 64];
    // SAFETY: a valid fd; MSG_DONTWAIT so an empty socket does not block.
    let n = unsafe {
        libc::recv(
            ours.as_raw_fd(),
            got.as_mut_ptr().cast(),
            64,
            libc::MSG_DONTWAIT,
        )
    };
    got.truncate(n.max(0) as usize);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        String::from_utf8_lossy(&got).into_owned(),
    )
}

/// A UNIX datagram socket as stdio could address any host datagram socket
/// (`/dev/log`) with the network on: such a run is refused, naming the fd.
/// Twins: a stream socket as stdout works, with the network on and off.
/// With the network off the datagram socket is refused too (red team: the
/// filter refuses an addressed `sendto`, but `sendmsg`'s `msg_name` is behind
/// a pointer, so the command reached a host datagram socket through it; see
/// [`a_datagram_socket_as_stdio_cannot_send_with_the_network_off`]).
#[test]
fn a_datagram_socket_as_stdio_is_refused_with_the_network_on() {
    let (code, stderr, got) = with_socket_stdout(libc::SOCK_DGRAM, &[]);
    assert_eq!(code, 125, "{stderr}");
    assert!(
        stderr.contains("stdout (fd 1) is a UNIX datagram socket"),
        "{stderr}"
    );
    assert_eq!(got, "", "the command never ran");

    let (code, stderr, got) = with_socket_stdout(libc::SOCK_STREAM, &[]);
    assert_eq!((code, got.as_str()), (0, "hi\n"), "{stderr}");

    let (code, stderr, got) = with_socket_stdout(libc::SOCK_STREAM, &["--no-network"]);
    assert_eq!((code, got.as_str()), (0, "hi\n"), "{stderr}");

    let (code, stderr, got) = with_socket_stdout(libc::SOCK_DGRAM, &["--no-network"]);
    assert_eq!((code, got.as_str()), (125, ""), "{stderr}");
    assert!(
        stderr.contains("stdout (fd 1) is a UNIX datagram socket"),
        "{stderr}"
    );
}

/// Sends by `sendmsg` with an address on stdin (a datagram socket handed
/// in): to the UNIX socket path in argv[1] or the loopback UDP port argv[2].
const SEND_ON_STDIN: &str = "import socket, sys\n\
s = socket.socket(fileno=0)\n\
dest = sys.argv[1] if s.family == socket.AF_UNIX else ('127.0.0.1', int(sys.argv[2]))\n\
try:\n    s.sendmsg([b'leak'], [], 0, dest); print('sent')\n\
except OSError as e:\n    print('refused', e.errno)\n";

/// Red team: with the network off, a datagram socket handed in as stdin (a
/// UNIX one, a UDP one) reached a host socket by `sendmsg` with `msg_name`
/// (loopback UDP and a pathname datagram socket received `leak`), as root
/// and as nobody. Now such a run is refused (exit 125) and nothing arrives.
/// Twin: the same send from a run whose stdin is a stream socket pair starts
/// and its `sendmsg` reaches nothing (stream sockets refuse an address).
#[test]
fn a_datagram_socket_as_stdio_cannot_send_with_the_network_off() {
    use std::os::unix::net::{UnixDatagram, UnixStream};
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let sock = dir.path().join("host.dsock");
    let host = UnixDatagram::bind(&sock).unwrap();
    std::fs::set_permissions(&sock, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    host.set_nonblocking(true).unwrap();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_nonblocking(true).unwrap();
    let port = udp.local_addr().unwrap().port().to_string();
    let received = || {
        let mut buf = [0u8; 16];
        host.recv(&mut buf).is_ok() || udp.recv(&mut buf).is_ok()
    };
    for nobody in [false, true] {
        let who = if nobody { "nobody" } else { "root" };
        let handed: Vec<(&str, std::process::Stdio)> = vec![
            (
                "unix",
                std::os::fd::OwnedFd::from(UnixDatagram::unbound().unwrap()).into(),
            ),
            (
                "udp",
                std::os::fd::OwnedFd::from(std::net::UdpSocket::bind("127.0.0.1:0").unwrap())
                    .into(),
            ),
            (
                "stream",
                std::os::fd::OwnedFd::from(UnixStream::pair().unwrap().0).into(),
            ),
        ];
        for (kind, stdin) in handed {
            let mut cmd = if nobody {
                sandbox_tests::sandbox_as_nobody()
            } else {
                sandbox()
            };
            let out = cmd
                .args([
                    "run",
                    "-q",
                    "--no-network",
                    "--",
                    "python3",
                    "-c",
                    SEND_ON_STDIN,
                ])
                .arg(&sock)
                .arg(&port)
                .stdin(stdin)
                .output()
                .unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            let stderr = String::from_utf8_lossy(&out.stderr);
            std::thread::sleep(std::time::Duration::from_millis(100));
            assert!(
                !received(),
                "{who} {kind}: a host socket received: {stdout} {stderr}"
            );
            if kind == "stream" {
                assert!(
                    stdout.starts_with("refused"),
                    "{who} {kind}: {stdout} {stderr}"
                );
            } else {
                assert_eq!(
                    out.status.code(),
                    Some(125),
                    "{who} {kind}: {stdout} {stderr}"
                );
                assert!(
                    stderr.contains("stdin (fd 0) is a"),
                    "{who} {kind}: {stderr}"
                );
            }
        }
    }
}

/// Binds a pathname socket at each argument; prints `ok` and the address
/// `getsockname` reports, or the errno name.
const BIND: &str = "import errno, os, socket, sys\n\
os.mkdir(sys.argv[1])\n\
for p in sys.argv[2:]:\n    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n    try:\n        s.bind(p); print('ok', s.getsockname())\n    except OSError as e:\n        print(errno.errorcode[e.errno])\n";

/// Binding a UNIX socket in a directory the run made, under workspace-write
/// (a deny path beneath the write path: the broker keeps entries, and
/// binds with them), works as bare (dev servers, language servers,
/// `uvicorn --uds`), as root and as nobody; refused (`EACCES`, as Landlock
/// refuses `MAKE_SOCK`) only under the deny path and outside, and a socket
/// that exists is `EADDRINUSE`. Twin: the same binds bare. Before the fix
/// every bind in the made directory was `EACCES`.
#[test]
fn a_unix_socket_binds_in_a_directory_the_run_made_under_workspace_write() {
    for nobody in [false, true] {
        let t = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(t.path()).unwrap();
        let (w, o) = (root.join("w"), root.join("o"));
        std::fs::create_dir_all(w.join("deny")).unwrap();
        std::fs::create_dir(&o).unwrap();
        for d in [&root, &w, &w.join("deny"), &o] {
            std::fs::set_permissions(d, std::os::unix::fs::PermissionsExt::from_mode(0o777))
                .unwrap();
        }
        let made = w.join("made");
        // Relative ones from the working directory (w), as the caller
        // wrote them: the kernel records the caller's bytes (red-team R6a
        // F3: the broker recorded the final name only).
        let paths = [
            made.join("app.sock"),
            made.join("app.sock"),
            w.join("top.sock"),
            w.join("deny/x.sock"),
            o.join("x.sock"),
            "rel.sock".into(),
            "made/rel.sock".into(),
            "./made/../made/dots.sock".into(),
        ];
        let as_who = |program: &Path| {
            let mut c = std::process::Command::new("setpriv");
            if nobody {
                c.args(["--reuid=65534", "--regid=65534", "--clear-groups"]);
            } else {
                c.args(["--bounding-set=-all", "--inh-caps=-all"]);
            }
            c.arg("--").arg(program);
            c
        };
        let bare = as_who(Path::new("/usr/bin/python3"))
            .args(["-c", BIND])
            .arg(&made)
            .args(&paths)
            .current_dir(&w)
            .output()
            .unwrap();
        for p in &paths {
            let _ = std::fs::remove_file(w.join(p));
        }
        let _ = std::fs::remove_dir(&made);
        let confined = as_who(&sandbox_tests::sandbox_bin())
            .args(["run", "--mode", "workspace-write", "--workspace"])
            .arg(&w)
            .arg("--write-deny")
            .arg(w.join("deny"))
            .args(["--", "/usr/bin/python3", "-c", BIND])
            .arg(&made)
            .args(&paths)
            .env_remove("SANDBOX_CONFIG")
            .env("XDG_CONFIG_HOME", "/nonexistent/sandbox-tests-config")
            .env("HOME", "/nonexistent/sandbox-tests-home")
            .current_dir(&w)
            .output()
            .unwrap();
        let text = |o: &std::process::Output| String::from_utf8_lossy(&o.stdout).into_owned();
        let ok = |p: &Path| format!("ok {}\n", p.display());
        let (made_sock, top) = (ok(&paths[0]), ok(&paths[2]));
        let rel = "ok rel.sock\nok made/rel.sock\nok ./made/../made/dots.sock\n";
        assert_eq!(
            text(&bare),
            format!(
                "{made_sock}EADDRINUSE\n{top}{}{}{rel}",
                ok(&paths[3]),
                ok(&paths[4])
            ),
            "{}",
            String::from_utf8_lossy(&bare.stderr)
        );
        assert_eq!(
            text(&confined),
            format!("{made_sock}EADDRINUSE\n{top}EACCES\nEACCES\n{rel}"),
            "nobody: {nobody}: {}",
            String::from_utf8_lossy(&confined.stderr)
        );
        assert!(w.join("made/dots.sock").exists() && w.join("rel.sock").exists());
        assert!(made.join("app.sock").exists());
        assert!(!w.join("deny/x.sock").exists() && !o.join("x.sock").exists());
    }
}

/// `multiprocessing.Manager()` serves on a UNIX socket in its temporary
/// directory and hands clients the address `getsockname` reports; a
/// brokered bind recorded the final name only, so every Manager failed
/// `FileNotFoundError` (red-team R6a F3), in the default workspace-write
/// mode and under `-w` with a deny path, as root and as nobody. The client
/// also connects by that address and sees it in `getpeername`.
#[test]
fn multiprocessing_manager_works_where_binds_are_brokered() {
    const MANAGER: &str = "import multiprocessing as mp, os, socket, sys\n\
if __name__ == '__main__':\n    os.chdir('/')\n    with mp.Manager() as m:\n        d = m.dict(); d['k'] = 1\n        assert os.path.isabs(m.address), m.address\n        c = socket.socket(socket.AF_UNIX); c.connect(m.address)\n        assert c.getpeername() == m.address, c.getpeername()\n        print('manager', d['k'])\n";
    for nobody in [false, true] {
        for workspace_write in [false, true] {
            let t = tempfile::tempdir().unwrap();
            let w = std::fs::canonicalize(t.path()).unwrap();
            std::fs::create_dir(w.join("deny")).unwrap();
            for d in [&w, &w.join("deny")] {
                std::fs::set_permissions(d, std::os::unix::fs::PermissionsExt::from_mode(0o777))
                    .unwrap();
            }
            let mut c = if nobody {
                sandbox_tests::sandbox_as_nobody()
            } else {
                sandbox()
            };
            c.arg("run");
            if workspace_write {
                c.args(["--mode", "workspace-write", "--workspace"]).arg(&w);
            } else {
                // TMPDIR in the write path: the socket is bound by the broker.
                c.arg("-w").arg(&w).env("TMPDIR", &w);
            }
            let out = c
                .arg("--write-deny")
                .arg(w.join("deny"))
                .args(["--", "/usr/bin/python3", "-c", MANAGER])
                .env("HOME", "/nonexistent/sandbox-tests-home")
                .output()
                .unwrap();
            assert_eq!(
                String::from_utf8_lossy(&out.stdout),
                "manager 1\n",
                "nobody {nobody}, workspace-write {workspace_write}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

/// A bind whose directory is swapped for a symlink to a place outside the
/// write path, again and again (`renameat2(RENAME_EXCHANGE)` by another
/// thread), while the broker binds the caller's own address (red-team R6a
/// F3 fix): no socket file is ever made outside; the binds that found the
/// directory are made in it (positive control), the others refused
/// (`EACCES`). Root (the broker checks the socket file's inode,
/// `SIOCUNIXFILE`) and nobody (checks around the bind).
#[test]
fn a_bind_racing_a_swapped_directory_makes_no_socket_outside() {
    const RACE: &str = "import os, socket, sys, threading, ctypes, time, errno\n\
W, E = sys.argv[1], sys.argv[2]\n\
libc = ctypes.CDLL(None, use_errno=True)\n\
os.makedirs(W + '/a/b')\n\
os.symlink(E, W + '/alink')\n\
stop = False\n\
def swap():\n    while not stop:\n        libc.renameat2(-100, (W + '/a').encode(), -100, (W + '/alink').encode(), 2)\n\
t = threading.Thread(target=swap); t.start()\n\
res = {}\n\
end = time.time() + 2\n\
n = 0\n\
while time.time() < end:\n    s = socket.socket(socket.AF_UNIX)\n    try:\n        s.bind(W + '/a/b/s%d.sock' % n); r = 'ok'\n    except OSError as e:\n        r = errno.errorcode[e.errno]\n    n += 1\n    res[r] = res.get(r, 0) + 1\n    s.close()\n\
stop = True; t.join()\n\
print(res.get('ok', 0), res.get('EACCES', 0), sum(res.values()))\n";
    for nobody in [false, true] {
        let t = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(t.path()).unwrap();
        let (w, e) = (root.join("w"), root.join("e"));
        std::fs::create_dir_all(w.join("deny")).unwrap();
        std::fs::create_dir_all(e.join("b")).unwrap();
        for d in [&root, &w, &w.join("deny"), &e, &e.join("b")] {
            std::fs::set_permissions(d, std::os::unix::fs::PermissionsExt::from_mode(0o777))
                .unwrap();
        }
        let mut c = if nobody {
            sandbox_tests::sandbox_as_nobody()
        } else {
            sandbox()
        };
        let out = c
            .arg("run")
            .arg("-w")
            .arg(&w)
            .arg("--write-deny")
            .arg(w.join("deny"))
            .args(["--", "/usr/bin/python3", "-c", RACE])
            .arg(&w)
            .arg(&e)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let counts: Vec<u64> = text
            .split_whitespace()
            .map(|n| n.parse().unwrap())
            .collect();
        assert_eq!(
            counts.len(),
            3,
            "nobody {nobody}: {text} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let (ok, refused, all) = (counts[0], counts[1], counts[2]);
        assert_eq!(
            ok + refused,
            all,
            "nobody {nobody}: only ok and EACCES: {text}"
        );
        assert!(
            ok > 0 && refused > 0,
            "nobody {nobody}: both sides raced: {text}"
        );
        let outside = std::fs::read_dir(e.join("b")).unwrap().count();
        assert_eq!(outside, 0, "nobody {nobody}: sockets made outside");
        // Every bind that succeeded made its file in the write path.
        let dir = ["a", "alink"]
            .iter()
            .map(|n| w.join(n))
            .find(|p| std::fs::symlink_metadata(p).unwrap().is_dir())
            .unwrap();
        let inside = std::fs::read_dir(dir.join("b")).unwrap().count() as u64;
        assert_eq!(inside, ok, "nobody {nobody}: files for the binds made");
    }
}
