//! TLS for `rediss://` deployments: the certificates a caller gives ([`TlsOptions`]), the
//! rustls crypto provider, and telling a failed handshake from an unreachable server.
//!
//! The system trust store is used unless a CA is given; a client certificate and key turn on
//! mutual TLS. Both connections of a client (commands and the subscriber) and every node of a
//! cluster use the same settings (`dial.rs`).

use crate::error::Error;

/// Certificates for `rediss://` connections: a CA to trust instead of the system's trust store,
/// and a client certificate for servers that require one (mutual TLS,
/// `tls-auth-clients yes`). Given to [`ClientBuilder::tls`](crate::ClientBuilder::tls).
///
/// ```no_run
/// # async fn demo() -> redlease::Result<()> {
/// let tls = redlease::TlsOptions::new()
///     .root_ca_pem(std::fs::read("ca.crt").unwrap_or_default())
///     .client_identity_pem(
///         std::fs::read("client.crt").unwrap_or_default(),
///         std::fs::read("client.key").unwrap_or_default(),
///     );
/// let client = redlease::Client::builder("rediss://redis.internal:6380")
///     .tls(tls)
///     .build()
///     .await?;
/// # Ok(()) }
/// ```
#[cfg(feature = "tls-rustls")]
#[cfg_attr(docsrs, doc(cfg(feature = "tls-rustls")))]
#[derive(Clone, Default)]
#[must_use]
pub struct TlsOptions {
    root_ca_pem: Option<Vec<u8>>,
    client_cert_pem: Option<Vec<u8>>,
    client_key_pem: Option<Vec<u8>>,
}

#[cfg(feature = "tls-rustls")]
impl TlsOptions {
    /// No CA (the system's trust store) and no client certificate.
    pub fn new() -> TlsOptions {
        TlsOptions::default()
    }

    /// Trust the CA certificate(s) in `pem` (one or more `BEGIN CERTIFICATE` blocks) instead
    /// of the system's trust store.
    pub fn root_ca_pem(mut self, pem: impl Into<Vec<u8>>) -> TlsOptions {
        self.root_ca_pem = Some(pem.into());
        self
    }

    /// Present this certificate chain and private key (both PEM) to the server: mutual TLS.
    pub fn client_identity_pem(
        mut self,
        cert_chain_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> TlsOptions {
        self.client_cert_pem = Some(cert_chain_pem.into());
        self.client_key_pem = Some(key_pem.into());
        self
    }

    /// What redis-rs takes.
    pub(crate) fn certificates(&self) -> redis::TlsCertificates {
        let client_tls = match (&self.client_cert_pem, &self.client_key_pem) {
            (Some(cert), Some(key)) => Some(redis::ClientTlsConfig {
                client_cert: cert.clone(),
                client_key: key.clone(),
            }),
            _ => None,
        };
        redis::TlsCertificates {
            client_tls,
            root_cert: self.root_ca_pem.clone(),
        }
    }
}

#[cfg(feature = "tls-rustls")]
impl std::fmt::Debug for TlsOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Certificates are not secret, but the key is: neither is printed.
        let set = |v: &Option<Vec<u8>>| if v.is_some() { "set" } else { "none" };
        f.debug_struct("TlsOptions")
            .field("root_ca_pem", &set(&self.root_ca_pem))
            .field("client_cert_pem", &set(&self.client_cert_pem))
            .field("client_key_pem", &set(&self.client_key_pem))
            .finish()
    }
}

/// Installs the ring crypto provider as the process default, unless one is installed already
/// (by the application, or by an earlier client). rustls cannot pick one by itself when the
/// application's dependencies enable more than one.
pub(crate) fn ensure_provider() {
    #[cfg(feature = "tls-rustls")]
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Err: another thread installed one meanwhile, which serves as well.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// Whether `url` asks for TLS.
pub(crate) fn is_tls_url(url: &str) -> bool {
    let lower = url.get(..10).unwrap_or(url).to_ascii_lowercase();
    lower.starts_with("rediss://") || lower.starts_with("valkeys://")
}

/// A connection error that is a failed TLS handshake (an untrusted or misnamed server
/// certificate, a client certificate the server refused, TLS spoken to a plain port) becomes
/// [`Error::Tls`]: a setting to fix, not an outage to wait out. Anything else is unchanged.
pub(crate) fn classify(error: Error) -> Error {
    let Error::Redis { operation, source } = &error else {
        return error;
    };
    let text = source.to_string();
    let lower = text.to_ascii_lowercase();
    let handshake = [
        "invalid peer certificate",
        "certificate",
        "received fatal alert",
        "handshake",
        "received corrupt message",
        "invalidcontenttype",
        "peer is incompatible",
    ];
    if handshake.iter().any(|needle| lower.contains(needle)) {
        Error::Tls {
            operation,
            reason: text,
        }
    } else {
        error
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_urls_are_recognised() {
        assert!(is_tls_url("rediss://h:1"));
        assert!(is_tls_url("VALKEYS://h:1"));
        assert!(!is_tls_url("redis://h:1"));
        assert!(!is_tls_url("valkey://h:1"));
    }

    #[test]
    fn an_unknown_issuer_is_a_tls_error() {
        let io = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "invalid peer certificate: UnknownIssuer",
        );
        let error = classify(Error::Redis {
            operation: "connect",
            source: io.into(),
        });
        assert!(matches!(error, Error::Tls { .. }), "{error:?}");
        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let error = classify(Error::Redis {
            operation: "connect",
            source: refused.into(),
        });
        assert!(error.is_unavailable(), "{error:?}");
    }
}
