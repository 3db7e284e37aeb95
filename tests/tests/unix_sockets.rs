//! Host UNIX sockets with the network on: a socket outside the write paths
//! (like docker.sock) is refused unless allowed; one inside a write path is
//! usable; TCP keeps working.

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
