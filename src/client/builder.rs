//! [`ClientBuilder`]: a deployment and its settings, then `build`, which connects, checks the
//! server (rights, replicas, what it can do) and starts the client's background work.

use std::sync::Arc;
use std::time::Duration;

use uuid::Uuid;

use crate::config::{Config, Replicas, WaitBy};
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::identity::{self, ClientInfo};
#[cfg(doc)]
use crate::lock::Lock;
use crate::node::{Dial, Node, Target, denied};
use crate::shared::{Client, Inner};
use crate::telemetry::LockLabel;
use crate::watchdog;

/// Builds a [`Client`]; see [`Client::builder`].
#[derive(Debug, Clone)]
#[must_use]
pub struct ClientBuilder {
    pub(super) target: Target,
    pub(super) config: Config,
    pub(super) lazy: bool,
    pub(super) dial: Dial,
    pub(super) check_rights: bool,
}

impl ClientBuilder {
    /// Default settings for `target`.
    pub(super) fn new(target: Target) -> ClientBuilder {
        ClientBuilder {
            target,
            config: Config::default(),
            lazy: false,
            dial: Dial::default(),
            check_rights: true,
        }
    }

    /// Prefix of every key and channel. Defaults to `"redlease"`.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.config.prefix = prefix.into();
        self
    }

    /// Lease of watchdog-kept locks (renewed every third of it). Defaults to 30 seconds.
    pub fn watchdog_lease(mut self, lease: Duration) -> Self {
        self.config.watchdog_lease = lease;
        self
    }

    /// How long a fencing counter outlives the lease it was last written with; see
    /// [`Config::fence_grace`]. Defaults to 60 seconds.
    pub fn fence_grace(mut self, grace: Duration) -> Self {
        self.config.fence_grace = grace;
        self
    }

    /// How long a lock given to a queued waiter stays its own until claimed; see
    /// [`Config::claim_lease`]. Defaults to 2 seconds.
    pub fn claim_lease(mut self, lease: Duration) -> Self {
        self.config.claim_lease = lease;
        self
    }

    /// How long a lock's channel stays subscribed after its last waiter left; see
    /// [`Config::channel_linger`]. Defaults to 500 milliseconds; zero unsubscribes at once.
    pub fn channel_linger(mut self, linger: Duration) -> Self {
        self.config.channel_linger = linger;
        self
    }

    /// Whether the server tells this client at once when a held lock's key is deleted,
    /// flushed, evicted or forced; see [`Config::loss_notice`]. Defaults to `true`; switch it
    /// off for servers or proxies without `CLIENT TRACKING`.
    pub fn loss_notice(mut self, on: bool) -> Self {
        self.config.loss_notice = on;
        self
    }

    /// How long after its grant a hold is armed for the loss notice; see
    /// [`Config::loss_notice_delay`]. Defaults to 100 milliseconds.
    pub fn loss_notice_delay(mut self, delay: Duration) -> Self {
        self.config.loss_notice_delay = delay;
        self
    }

    /// Limit for connecting and for each round trip. Defaults to 2 seconds.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.config.timeout = timeout;
        self
    }

    /// Connect on first use instead of in [`build`](ClientBuilder::build), so a server that
    /// is down at start-up fails only the operations that need it (and later ones succeed once
    /// it is up). Useful for RedLock, whose quorum is counted over every node given, reachable
    /// or not. Defaults to `false`: `build` fails when the server cannot be reached.
    pub fn lazy(mut self, lazy: bool) -> Self {
        self.lazy = lazy;
        self
    }

    /// How many times a release is retried when its reply was lost (the retry is idempotent).
    /// Defaults to 2.
    pub fn release_retries(mut self, retries: u32) -> Self {
        self.config.release_retries = retries;
        self
    }

    /// Safety margin subtracted from every lease when computing how long a lock is known
    /// valid, as a fraction of the lease (2 ms are added on top); from 0.0 to below 0.5.
    /// Defaults to 0.01.
    pub fn drift_factor(mut self, factor: f64) -> Self {
        self.config.drift_factor = factor;
        self
    }

    /// How waiters of every lock kind learn that what they wait for may be free: pub/sub
    /// messages (the default) or, for proxies without pub/sub, polling with backoff
    /// ([`WaitBy::POLLING`]).
    ///
    /// ```no_run
    /// # async fn demo() -> redlease::Result<()> {
    /// let client = redlease::Client::builder("redis://proxy:6379")
    ///     .wait_by(redlease::WaitBy::POLLING)
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn wait_by(mut self, wait_by: WaitBy) -> Self {
        self.config.wait_by = wait_by;
        self
    }

    /// Whether the locks of this client wait for replicas to acknowledge their acquisitions
    /// and renewals (`WAIT`); [`Lock::replicas`] overrides it per lock. Defaults to
    /// [`Replicas::Off`] (no `WAIT` is sent).
    ///
    /// ```no_run
    /// # async fn demo() -> redlease::Result<()> {
    /// use std::time::Duration;
    ///
    /// let client = redlease::Client::builder("redis://primary:6379")
    ///     .replicas(redlease::Replicas::Wait { replicas: 1, timeout: Duration::from_millis(100) })
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn replicas(mut self, replicas: Replicas) -> Self {
        self.config.replicas = replicas;
        self
    }

    /// Labels this client's per-lock metrics (acquire wait, contention, `waiting`, `held`,
    /// hold time, leases lost) with `lock = group(name)`. Off by default: without it those
    /// metrics have one series per kind (and outcome or reason), whatever the lock names.
    ///
    /// Every distinct value is a series of its own in your metrics backend for as long as the
    /// process lives, so map names to a few groups: `orders:42` and `orders:43` both to
    /// `orders`. Returning the name itself is safe only when the set of names is small and
    /// fixed. `group` runs on every acquisition and grant, so keep it cheap.
    ///
    /// ```no_run
    /// # async fn demo() -> redlease::Result<()> {
    /// let client = redlease::Client::builder("redis://127.0.0.1:6379")
    ///     // `orders:42` → `orders`, `invoice` → `invoice`.
    ///     .lock_label(|name| name.split(':').next().unwrap_or(name).to_owned())
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn lock_label(mut self, group: impl Fn(&str) -> String + Send + Sync + 'static) -> Self {
        self.config.lock_label = LockLabel::mapped(group);
        self
    }

    /// Connects and starts the watchdog.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] or [`Error::InvalidDuration`] for a bad URL or setting;
    /// [`Error::Timeout`] or [`Error::Redis`] when the server cannot be reached within the
    /// timeout; [`Error::UnknownMaster`] when no sentinel knows the master's name;
    /// [`Error::Tls`] when the TLS handshake fails (an untrusted server certificate, a
    /// refused client certificate); [`Error::NoPermission`] when the Redis user lacks a right
    /// this crate needs (see [`check_rights`](ClientBuilder::check_rights)); [`Error::Auth`]
    /// when the server refuses the credentials (none given, or wrong); [`Error::NoRuntime`]
    /// when polled outside a tokio runtime.
    ///
    /// # Cancel safety
    /// Dropping the future closes the connections made so far. An announcement already
    /// written (`redlease list` shows it; a lazy client writes none) expires a watchdog lease
    /// and a second later.
    pub async fn build(self) -> Result<Client> {
        crate::task::in_runtime()?;
        self.config.validate()?;
        if let Some(risk) = self.config.risks() {
            tracing::warn!("{risk}");
        }
        let mut node = Node::connect(&self.target, self.config.timeout, self.lazy, &self.dial)
            .await
            .map_err(|e| denied(e, &self.config.prefix))?;
        node.set_fence_grace(self.config.fence_grace);
        node.report_server_warnings(self.config.refuse_evicting_servers)?;
        if self.check_rights {
            let pubsub = self.config.wait_by == WaitBy::PubSub;
            if self.lazy {
                node.check_rights_on_first_use(&self.config.prefix, pubsub);
            } else {
                node.check_rights(&self.config.prefix, pubsub).await?;
            }
        }
        let id = Uuid::new_v4();
        let id_text: Arc<str> = id.to_string().into();
        let me = ClientInfo::this_process(&id_text);
        if !self.lazy {
            // Announced now so operators see who holds what at once; the watchdog refreshes it.
            let ttl = self.config.watchdog_lease + Duration::from_secs(1);
            let announced = identity::announce(&node, &self.config.prefix, &me, ttl).await;
            if let Err(e) = announced {
                tracing::warn!(error = %e, "could not announce this client; lock holders will be shown by id only");
            }
        }
        let inner = Inner::new(id, me, self.config, node);
        let _ = inner.dialed.set((self.target, self.dial));
        inner.watchdog.start(watchdog::spawn(&inner));
        Ok(Client { inner })
    }
}

impl ClientBuilder {
    /// A builder for another client of the deployment `client` connected to, with its
    /// settings (connected at once; its rights are not checked again).
    #[cfg(feature = "testing")]
    pub(crate) fn like(client: &Client) -> Option<ClientBuilder> {
        let (target, dial) = client.inner.dialed.get()?.clone();
        Some(ClientBuilder {
            target,
            config: client.inner.config.clone(),
            lazy: false,
            dial,
            check_rights: false,
        })
    }
}
