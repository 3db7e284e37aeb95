//! Interception of the hosts per-request rules name (Linux): the proxy
//! answers the command's `CONNECT` itself, terminates its TLS with a leaf of
//! the run's CA ([`ca`]), reads HTTP/1.1 requests ([`exchange`]), checks each
//! against the [`RequestRule`]s and forwards the admitted ones over its own
//! TLS connection to the origin, verified against the system roots or the
//! operator's upstream CA file.

pub(crate) mod ca;
mod exchange;

use std::path::Path;
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::{ClientConfig, RootCertStore};
use sandbox_core::RequestRule;

use crate::{ProxyError, Secret};

/// The one crypto provider (ring) of both sides.
pub(crate) fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// What the proxy intercepts and how it reaches the origins.
pub(crate) struct Interceptor {
    rules: Vec<RequestRule>,
    ca: ca::RunCa,
    upstream: Arc<ClientConfig>,
    secrets: Vec<Secret>,
}

impl std::fmt::Debug for Interceptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Interceptor")
            .field("rules", &self.rules.len())
            .finish_non_exhaustive()
    }
}

impl Interceptor {
    /// A new run CA for the hosts `rules` name, and the client side trusting
    /// the certificates of `upstream_ca` (PEM) or else the system roots.
    pub(crate) fn new(
        rules: Vec<RequestRule>,
        upstream_ca: Option<&Path>,
        secrets: Vec<Secret>,
    ) -> Result<Interceptor, ProxyError> {
        let mut hosts: Vec<String> = rules.iter().map(|r| r.host().to_string()).collect();
        hosts.sort();
        hosts.dedup();
        let ca = ca::RunCa::new(&hosts)?;
        let mut roots = RootCertStore::empty();
        match upstream_ca {
            Some(path) => {
                let text = std::fs::read(path).map_err(|e| {
                    ProxyError::Interception(format!(
                        "cannot read the upstream CA file {}: {e}",
                        path.display()
                    ))
                })?;
                let certs = ca::parse_pem_certs(&text).map_err(|e| {
                    ProxyError::Interception(format!(
                        "the upstream CA file {} holds no usable certificate: {e}",
                        path.display()
                    ))
                })?;
                let (added, _) = roots.add_parsable_certificates(certs);
                if added == 0 {
                    return Err(ProxyError::Interception(format!(
                        "the upstream CA file {} holds no usable certificate",
                        path.display()
                    )));
                }
            }
            None => {
                let native = rustls_native_certs::load_native_certs();
                roots.add_parsable_certificates(native.certs);
                if roots.is_empty() {
                    return Err(ProxyError::Interception(
                        "no system root certificate found to verify the intercepted hosts' \
                         origins (give --upstream-ca FILE)"
                            .into(),
                    ));
                }
            }
        }
        let mut client = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| ProxyError::Interception(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        client.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Interceptor {
            rules,
            ca,
            upstream: Arc::new(client),
            secrets,
        })
    }

    /// Whether `host:port` is intercepted: some rule names it.
    pub(crate) fn intercepts(&self, host: &str, port: u16) -> bool {
        let host = host.strip_suffix('.').unwrap_or(host);
        self.rules
            .iter()
            .any(|r| r.port() == port && r.host().eq_ignore_ascii_case(host))
    }

    /// The run CA's certificate (PEM), which the command trusts.
    pub(crate) fn ca_pem(&self) -> String {
        self.ca.cert_pem()
    }

    /// The rules.
    pub(crate) fn rules(&self) -> &[RequestRule] {
        &self.rules
    }

    /// The secrets.
    pub(crate) fn secrets(&self) -> &[Secret] {
        &self.secrets
    }

    /// The first secret whose placeholder `bytes` carry (also inside a
    /// Basic credential's base64).
    pub(crate) fn placeholder_in(&self, bytes: &[u8]) -> Option<&Secret> {
        self.secrets
            .iter()
            .find(|s| carries(bytes, s.placeholder().as_bytes()))
    }
}

/// Whether `hay` holds `needle`, as is or in a `Basic` credential (base64).
pub(crate) fn carries(hay: &[u8], needle: &[u8]) -> bool {
    contains(hay, needle) || basic(hay).is_some_and(|decoded| contains(&decoded, needle))
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}

/// The decoded credential of a `Basic` authorization value.
pub(crate) fn basic(value: &[u8]) -> Option<Vec<u8>> {
    use base64::Engine;
    let text = std::str::from_utf8(value).ok()?.trim();
    let (scheme, cred) = text.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    base64::engine::general_purpose::STANDARD
        .decode(cred.trim())
        .ok()
}

/// `value` with every placeholder of `secrets` for `host` replaced by its
/// value (inside a `Basic` credential too).
pub(crate) fn inject(value: &[u8], secrets: &[Secret], host: &str) -> Vec<u8> {
    use base64::Engine;
    let ours: Vec<&Secret> = secrets
        .iter()
        .filter(|s| s.hosts().iter().any(|h| h == host))
        .collect();
    let replace = |bytes: &[u8]| -> Vec<u8> {
        let mut out = bytes.to_vec();
        for s in &ours {
            out = crate::replace_bytes(&out, s.placeholder().as_bytes(), s.value());
        }
        out
    };
    if let Some(decoded) = basic(value) {
        if ours
            .iter()
            .any(|s| contains(&decoded, s.placeholder().as_bytes()))
        {
            let cred = base64::engine::general_purpose::STANDARD.encode(replace(&decoded));
            return format!("Basic {cred}").into_bytes();
        }
    }
    replace(value)
}

pub(crate) use exchange::serve;
