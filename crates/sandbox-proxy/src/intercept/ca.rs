//! The per-run certificate authority: made when the proxy starts, its key
//! only in this process's memory, a leaf certificate per intercepted host
//! made on demand and kept for the run; and the files that let the
//! command trust it (system roots plus the CA), removed when the proxy
//! stops.

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::fs;
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, GeneralSubtree, IsCa, KeyPair, KeyUsagePurpose, NameConstraints,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::ServerConfig;

use super::provider;
use crate::ProxyError;

/// How long the CA and leaf certificates are valid: a day around now (a
/// run lasts at most the operator's ceiling, minutes).
const VALIDITY: Duration = Duration::from_secs(24 * 3600);

/// The run's CA and its leaf certificates.
pub(crate) struct RunCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
    /// One key for every leaf of the run.
    leaf_key: KeyPair,
    leaves: Mutex<HashMap<String, Arc<ServerConfig>>>,
}

fn ca_error(what: &str, e: impl std::fmt::Display) -> ProxyError {
    ProxyError::Interception(format!("{what}: {e}"))
}

fn validity(params: &mut CertificateParams) {
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + VALIDITY;
}

impl RunCa {
    /// A new CA whose certificates name only `hosts` (a name constraint:
    /// clients that check it trust it for nothing else).
    pub(crate) fn new(hosts: &[String]) -> Result<RunCa, ProxyError> {
        let key = KeyPair::generate().map_err(|e| ca_error("cannot make the run's CA key", e))?;
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, "sandbox egress proxy (this run only)");
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params.name_constraints = Some(NameConstraints {
            permitted_subtrees: hosts
                .iter()
                .map(|h| GeneralSubtree::DnsName(h.clone()))
                .collect(),
            excluded_subtrees: Vec::new(),
        });
        validity(&mut params);
        let issuer = CertifiedIssuer::self_signed(params, key)
            .map_err(|e| ca_error("cannot make the run's CA certificate", e))?;
        let leaf_key =
            KeyPair::generate().map_err(|e| ca_error("cannot make the run's leaf key", e))?;
        Ok(RunCa {
            issuer,
            leaf_key,
            leaves: Mutex::default(),
        })
    }

    /// The CA certificate, PEM.
    pub(crate) fn cert_pem(&self) -> String {
        self.issuer.pem()
    }

    /// The TLS server configuration presenting `host`'s leaf certificate
    /// (made on first use, then kept).
    pub(crate) fn server_config(&self, host: &str) -> Result<Arc<ServerConfig>, String> {
        let mut leaves = self.leaves.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(config) = leaves.get(host) {
            return Ok(Arc::clone(config));
        }
        let mut params =
            CertificateParams::new(vec![host.to_string()]).map_err(|e| e.to_string())?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, host);
        params.distinguished_name = dn;
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        validity(&mut params);
        let leaf = params
            .signed_by(&self.leaf_key, &self.issuer)
            .map_err(|e| e.to_string())?;
        let chain = vec![leaf.der().clone(), self.issuer.der().clone()];
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.leaf_key.serialize_der()));
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|e| e.to_string())?;
        // HTTP/2 first (each stream checked as an HTTP/1.1 request,
        // [`super::h2`]), then HTTP/1.1; a client that offers neither
        // speaks HTTP/1.1.
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        // The provider's suite order (AES-128-GCM first), not the client's.
        config.ignore_client_order = true;
        let config = Arc::new(config);
        leaves.insert(host.to_string(), Arc::clone(&config));
        Ok(config)
    }
}

/// The files that make the command trust the run's CA: `bundle.pem` (the
/// system roots and the CA) and `ca.pem` (the CA alone, for
/// `NODE_EXTRA_CA_CERTS`), in a directory of their own made with
/// `mkdtemp(3)` (mode 0700, a name nobody can predict), removed on drop.
///
/// The run may write where that directory lies (`-w /tmp`), and as its
/// owner (the same uid) rename it and put a symlink in its place; so the
/// files are written and removed through a descriptor of the directory
/// itself, never by its path, and the directory's name is removed only
/// while it still names that directory (else the planted link would have
/// the runner delete `bundle.pem` and `ca.pem` wherever it points).
#[derive(Debug)]
pub(crate) struct CaFiles {
    dir: PathBuf,
    /// The directory made (`O_DIRECTORY | O_NOFOLLOW`).
    fd: std::os::fd::OwnedFd,
    pub(crate) bundle: PathBuf,
    pub(crate) ca: PathBuf,
}

/// Writes `text` into a new file `name` of the directory `dir` (never
/// through a symlink, never over an existing file).
fn write_new(dir: &std::os::fd::OwnedFd, name: &CStr, text: &str) -> io::Result<()> {
    use std::os::fd::{AsRawFd, FromRawFd};
    // SAFETY: `dir` is an open directory fd and `name` NUL-terminated; the
    // returned fd, when valid, is owned by the `File` made from it.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            0o644 as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned by nothing else.
    let mut f = unsafe { fs::File::from_raw_fd(fd) };
    f.write_all(text.as_bytes())?;
    f.sync_all()
}

const BUNDLE: &CStr = c"bundle.pem";
const CA: &CStr = c"ca.pem";

impl CaFiles {
    /// Writes the files under `parent`: the system roots
    /// (`rustls-native-certs`, which honours `SSL_CERT_FILE` and
    /// `SSL_CERT_DIR`), then `ca_pem`.
    pub(crate) fn write(parent: &Path, ca_pem: &str) -> io::Result<CaFiles> {
        let template = CString::new(parent.join("sandbox-ca-XXXXXX").as_os_str().as_bytes())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let mut raw = template.into_bytes_with_nul();
        // SAFETY: `raw` is a NUL-terminated, writable template that
        // mkdtemp fills in place; it is not used elsewhere meanwhile.
        let made = unsafe { libc::mkdtemp(raw.as_mut_ptr().cast()) };
        if made.is_null() {
            return Err(io::Error::last_os_error());
        }
        raw.pop();
        let dir = PathBuf::from(<std::ffi::OsStr as OsStrExt>::from_bytes(&raw).to_os_string());
        let fd = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&dir)
            .inspect_err(|_| {
                let _ = fs::remove_dir(&dir);
            })?;
        let files = CaFiles {
            bundle: dir.join("bundle.pem"),
            ca: dir.join("ca.pem"),
            fd: fd.into(),
            dir,
        };
        let mut bundle = String::new();
        for cert in rustls_native_certs::load_native_certs().certs {
            bundle.push_str(&pem::encode(&pem::Pem::new("CERTIFICATE", cert.to_vec())));
        }
        bundle.push_str(ca_pem);
        write_new(&files.fd, BUNDLE, &bundle)?;
        write_new(&files.fd, CA, ca_pem)?;
        Ok(files)
    }
}

impl Drop for CaFiles {
    fn drop(&mut self) {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::MetadataExt;
        for name in [BUNDLE, CA] {
            // SAFETY: an open directory fd and a NUL-terminated name.
            unsafe { libc::unlinkat(self.fd.as_raw_fd(), name.as_ptr(), 0) };
        }
        // The name, only while it still is this directory (the run's tree
        // has ended: nothing swaps it between the check and the removal).
        let made = self
            .fd
            .try_clone()
            .and_then(|fd| fs::File::from(fd).metadata());
        let named = fs::symlink_metadata(&self.dir);
        if let (Ok(made), Ok(named)) = (made, named) {
            if named.is_dir() && named.dev() == made.dev() && named.ino() == made.ino() {
                let _ = fs::remove_dir(&self.dir);
            }
        }
    }
}

/// The certificates of PEM `text` (`CERTIFICATE` blocks; others ignored).
pub(crate) fn parse_pem_certs(text: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let blocks = pem::parse_many(text).map_err(|e| e.to_string())?;
    let certs: Vec<CertificateDer<'static>> = blocks
        .into_iter()
        .filter(|b| b.tag() == "CERTIFICATE")
        .map(|b| CertificateDer::from(b.into_contents()))
        .collect();
    if certs.is_empty() {
        return Err("no CERTIFICATE block".into());
    }
    Ok(certs)
}
