//! How connections are opened, beyond the URL: TLS certificates, a `redis::Client` the caller
//! built, and the connection manager's reconnect settings. The command connection
//! (`shape.rs`) and the subscriber's (`link.rs`) both open theirs through one [`Dial`], so
//! they reach the deployment the same way.

use std::time::Duration;

use redis::aio::ConnectionManagerConfig;
use redis::cluster::ClusterClientBuilder;

use crate::error::{Error, Result};
#[cfg(feature = "tls-rustls")]
use crate::node::tls::TlsOptions;
use crate::node::tls::{ensure_provider, is_tls_url};

/// Connection settings shared by every connection of one client.
#[derive(Debug, Clone, Default)]
pub(crate) struct Dial {
    /// Certificates for `rediss://` (a CA, a client identity).
    #[cfg(feature = "tls-rustls")]
    pub(crate) tls: Option<TlsOptions>,
    /// The caller's own client for one server, used as given instead of a URL.
    pub(crate) client: Option<redis::Client>,
    /// The caller's connection manager settings (one server), completed by [`Dial::manager`].
    pub(crate) manager: Option<ConnectionManagerConfig>,
}

impl Dial {
    /// Whether nothing beyond the URL was given.
    pub(crate) fn is_plain(&self) -> bool {
        #[cfg(feature = "tls-rustls")]
        if self.tls.is_some() {
            return false;
        }
        self.client.is_none() && self.manager.is_none()
    }

    /// The client for one server at `url` (or the caller's own).
    pub(crate) fn server_client(&self, url: &str) -> Result<redis::Client> {
        if let Some(client) = &self.client {
            ensure_provider();
            return Ok(client.clone());
        }
        if is_tls_url(url) {
            ensure_provider();
        }
        #[cfg(feature = "tls-rustls")]
        if let Some(tls) = &self.tls {
            if !is_tls_url(url) {
                return Err(Error::InvalidArgument(
                    "TLS options need a `rediss://` (or `valkeys://`) URL".into(),
                ));
            }
            return redis::Client::build_with_tls(url, tls.certificates())
                .map_err(|e| Error::InvalidArgument(format!("bad TLS settings: {e}")));
        }
        redis::Client::open(url)
            .map_err(|e| Error::InvalidArgument(format!("bad Redis URL `{url}`: {e}")))
    }

    /// The connection manager settings for one server: the caller's, or ours, with the
    /// connection timeout set to `timeout` unless the caller chose another. No response timeout:
    /// every call is bounded by `bounded`, and an abandoned acquire must be able to wait longer
    /// for its reply, to give back a late grant (see `lock/attempt.rs`).
    pub(crate) fn manager(&self, timeout: Duration) -> Result<ConnectionManagerConfig> {
        let Some(given) = &self.manager else {
            return Ok(ConnectionManagerConfig::new()
                .set_connection_timeout(Some(timeout))
                .set_response_timeout(None)
                // Reconnection is retried on the next command anyway; a long retry chain would
                // only stretch the time a caller waits for a down server.
                .set_number_of_retries(2)
                .set_max_delay(crate::backoff::LONGEST_RECONNECT));
        };
        // redis-rs's default response timeout (untouched by the caller) gives way to none; one
        // the caller chose is refused rather than silently dropped.
        let default = ConnectionManagerConfig::new();
        let chosen = given.response_timeout();
        if chosen.is_some() && chosen != default.response_timeout() {
            return Err(Error::InvalidArgument(
                "ConnectionManagerConfig: leave the response timeout at its default; every \
                 call is bounded by ClientBuilder::timeout"
                    .into(),
            ));
        }
        let connect = match given.connection_timeout() {
            Some(chosen) if Some(chosen) != default.connection_timeout() => chosen,
            _ => timeout,
        };
        Ok(given
            .clone()
            .set_connection_timeout(Some(connect))
            .set_response_timeout(None))
    }

    /// Adds the TLS settings to a cluster's builder; `seeds` tell whether TLS is asked for.
    pub(crate) fn cluster(
        &self,
        seeds: &[String],
        builder: ClusterClientBuilder,
    ) -> Result<ClusterClientBuilder> {
        let tls = seeds.first().is_some_and(|seed| is_tls_url(seed));
        if tls {
            ensure_provider();
        }
        #[cfg(feature = "tls-rustls")]
        if let Some(options) = &self.tls {
            if !tls {
                return Err(Error::InvalidArgument(
                    "TLS options need `rediss+cluster://` (or `rediss://` seed) URLs".into(),
                ));
            }
            return Ok(builder.certs(options.certificates()));
        }
        Ok(builder)
    }
}
