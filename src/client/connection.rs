//! How a client reaches its deployment, beyond the URL: TLS certificates, the caller's own
//! `redis::Client` and connection manager settings, and the ACL rights check.

#[cfg(doc)]
use crate::error::Error;
use crate::node::{Dial, ServerWarning, Target};

use super::{Client, ClientBuilder};

impl ClientBuilder {
    /// Certificates for a `rediss://` (or `rediss+cluster://`) deployment: a CA to trust
    /// instead of the system's trust store, and a client certificate for mutual TLS. Used by
    /// every connection of the client, the subscriber's and every cluster node's included.
    /// Without it a `rediss://` URL still works against servers the system trusts.
    ///
    /// A server whose certificate the CA does not vouch for fails
    /// [`build`](ClientBuilder::build) with [`Error::Tls`].
    #[cfg(feature = "tls-rustls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls-rustls")))]
    pub fn tls(mut self, tls: crate::node::TlsOptions) -> Self {
        self.dial.tls = Some(tls);
        self
    }

    /// redis-rs's settings for the connection manager of one server (reconnect retries and
    /// their backoff, pipeline buffer, ...), instead of redlease's (2 retries, at most 500 ms
    /// apart). The connection timeout, unless chosen there, is
    /// [`timeout`](ClientBuilder::timeout). The response timeout must stay at redis-rs's
    /// default, which redlease replaces by none: every call is bounded by `timeout` already,
    /// and a request may outlive its caller to give back a late grant; a chosen one fails
    /// `build` with [`Error::InvalidArgument`]. Ignored for a cluster.
    ///
    /// ```no_run
    /// # async fn demo() -> redlease::Result<()> {
    /// use redis::aio::ConnectionManagerConfig;
    /// let settings = ConnectionManagerConfig::new().set_number_of_retries(5);
    /// let client = redlease::Client::builder("redis://127.0.0.1:6379")
    ///     .connection_manager_config(settings)
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn connection_manager_config(
        mut self,
        settings: redis::aio::ConnectionManagerConfig,
    ) -> Self {
        self.dial.manager = Some(settings);
        self
    }

    /// Whether [`build`](ClientBuilder::build) checks that the Redis user may do all this
    /// crate does (ACL): every command its scripts call, on keys and channels under the
    /// prefix, and subscribing when waiters use pub/sub. The check costs a script call, a
    /// pipeline and a short-lived subscriber connection, once per client. A
    /// [`lazy`](ClientBuilder::lazy) client checks before its first script call (a lock, a
    /// renewal, a status read) instead, and that call fails with the error. Defaults to
    /// `true`; docs/acl.md lists the rights.
    pub fn check_rights(mut self, check: bool) -> Self {
        self.check_rights = check;
        self
    }

    /// Whether [`build`](ClientBuilder::build) fails with [`Error::EvictingServer`] when a
    /// server's `maxmemory-policy` may evict lock keys (any policy but `noeviction`), instead
    /// of warning ([`Client::server_warnings`]). Defaults to `false`; see
    /// [`Config::refuse_evicting_servers`](crate::Config::refuse_evicting_servers).
    ///
    /// ```no_run
    /// # async fn demo() -> redlease::Result<()> {
    /// let client = redlease::Client::builder("redis://127.0.0.1:6379")
    ///     .refuse_evicting_servers(true)
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn refuse_evicting_servers(mut self, refuse: bool) -> Self {
        self.config.refuse_evicting_servers = refuse;
        self
    }
}

impl Client {
    /// What puts locks at risk on the servers this client connected to, as learnt when it
    /// connected (also logged as `tracing` warnings then, and counted in
    /// `redlease_server_warnings_total`): today a `maxmemory-policy` that may evict lock keys
    /// ([`ServerWarning::Eviction`]). Empty when all is well, and for a
    /// [`lazy`](ClientBuilder::lazy) client, which learns nothing at connect.
    ///
    /// ```no_run
    /// # async fn demo() -> redlease::Result<()> {
    /// let client = redlease::Client::connect("redis://127.0.0.1:6379").await?;
    /// for warning in client.server_warnings() {
    ///     eprintln!("warning: {warning}");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn server_warnings(&self) -> Vec<ServerWarning> {
        self.inner.node.capabilities().warnings()
    }

    /// A builder for a client of one server, reached through a `redis::Client` you built: any
    /// [`redis::ConnectionInfo`] (address, database, credentials, protocol), or
    /// `redis::Client::build_with_tls` with your own certificates. The subscriber connects
    /// through the same client.
    ///
    /// ```no_run
    /// # async fn demo() -> redlease::Result<()> {
    /// let redis = redis::Client::open("redis://127.0.0.1:6379/2")
    ///     .map_err(|e| redlease::Error::InvalidArgument(e.to_string()))?;
    /// let client = redlease::Client::builder_from_redis(redis).build().await?;
    /// # Ok(()) }
    /// ```
    pub fn builder_from_redis(client: redis::Client) -> ClientBuilder {
        let name = client.get_connection_info().addr().to_string();
        let mut builder = ClientBuilder::new(Target::Server(name));
        builder.dial = Dial {
            client: Some(client),
            ..Dial::default()
        };
        builder
    }
}
