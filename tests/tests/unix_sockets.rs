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
/// Twins: a stream socket as stdout works, and so does the datagram socket
/// with the network off (the filter refuses addressed sends there).
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

    let (code, stderr, got) = with_socket_stdout(libc::SOCK_DGRAM, &["--no-network"]);
    assert_eq!((code, got.as_str()), (0, "hi\n"), "{stderr}");
}
