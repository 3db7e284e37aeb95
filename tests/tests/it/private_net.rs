//! What the tests that run a script in a private network and mount
//! namespace with a TLS origin (`intercept`, `intercept_routes`) share:
//! the test certificates (also `session_ns`'s), the `unshare` that runs
//! the script, its loopback line (also the session tests'), and reading
//! its output (also `dns`'s).
#![cfg(target_os = "linux")]

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sandbox_tests::{is_root, sandbox_bin};

/// A set-up script's line that brings the namespace's loopback up (`ip`
/// may be missing: Python's `SIOCSIFFLAGS`, IFF_UP | IFF_LOOPBACK |
/// IFF_RUNNING).
pub(crate) const LOOPBACK_UP: &str = r#"python3 -c 'import fcntl, socket, struct; s = socket.socket(); fcntl.ioctl(s, 0x8914, struct.pack("16sH", b"lo", 0x1 | 0x8 | 0x40))'"#;

/// A scratch directory for the namespace (root only: asserted), readable
/// by all; its canonical path.
pub(crate) fn scratch_dir() -> (tempfile::TempDir, PathBuf) {
    assert!(
        is_root(),
        "network namespaces need root here: run this suite as root (CI does)"
    );
    let dir = tempfile::tempdir().unwrap();
    let d = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::set_permissions(&d, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    (dir, d)
}

/// Writes a test CA (`ca.pem`) and the origin's certificate and key for
/// `names` into `dir`; with `common_names` (the CA's, the leaf's), each
/// has that subject (OpenSSL, as curl reaching the origin directly, takes
/// a leaf whose subject is its issuer's for a self-signed one).
pub(crate) fn certificates(dir: &Path, names: &[&str], common_names: Option<(&str, &str)>) {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    if let Some((ca, _)) = common_names {
        params.distinguished_name.push(DnType::CommonName, ca);
    }
    let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let mut leaf =
        CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
    if let Some((_, name)) = common_names {
        leaf.distinguished_name.push(DnType::CommonName, name);
    }
    let leaf = leaf.signed_by(&key, &ca).unwrap();
    std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
    std::fs::write(dir.join("leaf.pem"), leaf.pem()).unwrap();
    std::fs::write(dir.join("leaf.key"), key.serialize_pem()).unwrap();
}

/// Runs `sh -c setup` in a new network and mount namespace, with
/// `$SANDBOX`, `$D` (`d`), `env` and `$NOBODY` (the `setpriv` to nobody)
/// set, no configuration and no proxy of the caller's; its output
/// (`expect`: what failing to start it says).
pub(crate) fn unshare_output(
    setup: &str,
    d: &Path,
    env: &[(&str, &OsStr)],
    expect: &str,
) -> Output {
    Command::new("unshare")
        .args([
            "--net",
            "--mount",
            "--propagation",
            "private",
            "/bin/sh",
            "-c",
            setup,
        ])
        .env("SANDBOX", sandbox_bin())
        .env("D", d)
        .envs(env.iter().copied())
        .env(
            "NOBODY",
            "setpriv --reuid=65534 --regid=65534 --clear-groups --",
        )
        .env_remove("SANDBOX_CONFIG")
        .env_remove("HTTPS_PROXY")
        .env_remove("https_proxy")
        .output()
        .expect(expect)
}

/// The lines of `out`'s stdout.
pub(crate) fn lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Some line contains `want`.
#[track_caller]
pub(crate) fn has(lines: &[String], want: &str) {
    assert!(
        lines.iter().any(|l| l.contains(want)),
        "no line containing {want:?} in {lines:#?}"
    );
}
