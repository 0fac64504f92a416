//! `Client`'s public API: connecting (`ClientBuilder`), the lock kinds it hands out, renewal,
//! shutdown and the operator's views. The state behind it is in `shared.rs`.

use uuid::Uuid;

use crate::config::Config;
use crate::election::Election;
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::family::{CountDownLatch, FairLock, PermitSemaphore, ReadWriteLock, Semaphore};
use crate::identity;
use crate::lock::Lock;
use crate::node::Target;
use crate::shared::{Client, Inner};
use crate::telemetry::LostReason;
use crate::watchdog::{self, RenewStats};

mod builder;
mod connection;
mod deployments;

pub use builder::ClientBuilder;

impl Client {
    /// Connects with the default [`Config`].
    ///
    /// # Errors
    /// As [`ClientBuilder::build`].
    ///
    /// # Cancel safety
    /// As [`ClientBuilder::build`].
    pub async fn connect(url: &str) -> Result<Client> {
        Client::builder(url).build().await
    }

    /// A builder for a client of the server at `url` (`redis://[user:pass@]host:port[/db]`).
    ///
    /// A URL of the form `redis+cluster://[user:pass@]host:port[,host:port...]` names a Redis
    /// Cluster by some of its nodes instead, as [`builder_cluster`](Client::builder_cluster)
    /// does (the credentials and any `?query` apply to every node); and a URL of the form
    /// `redis+sentinel://[user:pass@]host:port[,host:port...]/<master-name>[/db][?query]` names
    /// a master through Redis Sentinel, as [`builder_sentinel`](Client::builder_sentinel) does.
    pub fn builder(url: impl Into<String>) -> ClientBuilder {
        ClientBuilder::new(Target::parse(&url.into()))
    }

    /// A handle to the lock `name`. Nothing is sent to Redis until you use it.
    ///
    /// Names are UTF-8, 1 to 4096 bytes, and must not start with `}` (the name becomes the
    /// Redis Cluster hash tag of the lock's keys).
    ///
    /// # Errors
    /// [`Error::InvalidName`] for an empty, too long or `}`-led name.
    pub fn lock(&self, name: &str) -> Result<Lock> {
        Lock::new(self.clone(), name)
    }

    /// A handle on the counting semaphore `name` (see [`Semaphore`]).
    ///
    /// # Errors
    /// [`Error::InvalidName`] for an empty or too long name.
    pub fn semaphore(&self, name: &str) -> Result<Semaphore> {
        Semaphore::new(self.clone(), name)
    }

    /// A handle on the semaphore with expiring permits `name` (see [`PermitSemaphore`]).
    ///
    /// # Errors
    /// [`Error::InvalidName`] for an empty or too long name.
    pub fn permit_semaphore(&self, name: &str) -> Result<PermitSemaphore> {
        PermitSemaphore::new(self.clone(), name)
    }

    /// A handle on the fair (first come, first served) lock `name` (see [`FairLock`]).
    ///
    /// # Errors
    /// [`Error::InvalidName`] for an empty or too long name.
    pub fn fair_lock(&self, name: &str) -> Result<FairLock> {
        FairLock::new(self.clone(), name)
    }

    /// A handle on the count-down latch `name` (see [`CountDownLatch`]).
    ///
    /// # Errors
    /// [`Error::InvalidName`] for an empty or too long name.
    pub fn count_down_latch(&self, name: &str) -> Result<CountDownLatch> {
        CountDownLatch::new(self.clone(), name)
    }

    /// A handle on the election `name` (see [`Election`]): candidates campaign for it, the
    /// winner leads with a term that is its fencing token, and anyone can ask who leads or
    /// observe the changes. The election uses the lock `name` (and keys beside it).
    ///
    /// # Errors
    /// [`Error::InvalidName`] for an empty, too long or `}`-led name.
    pub fn election(&self, name: &str) -> Result<Election> {
        Election::new(self.clone(), name)
    }

    /// A handle on the read-write lock `name` (see [`ReadWriteLock`]).
    ///
    /// # Errors
    /// [`Error::InvalidName`] for an empty or too long name.
    pub fn read_write_lock(&self, name: &str) -> Result<ReadWriteLock> {
        ReadWriteLock::new(self.clone(), name)
    }

    /// This client's id, the first part of every owner field it writes.
    pub fn id(&self) -> Uuid {
        self.inner.id
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// How many holds this client keeps now, every kind: one per (lock, owner) of the
    /// reentrant locks however often it was re-entered, one per family hold (a read-write
    /// lock's read hold shared by this client's readers counts once).
    pub fn held_count(&self) -> usize {
        self.inner.holds.len()
    }

    /// Renews every watchdog-kept lock now, as one watchdog tick would, and reports what it
    /// did. Meant for benchmarks and diagnostics; the watchdog runs on its own.
    ///
    /// # Errors
    /// Never for a failed batch (those count in [`RenewStats::failed_batches`]); only
    /// [`Error::Shutdown`].
    ///
    /// # Cancel safety
    /// Dropping the future leaves renewal calls already sent to land; the watchdog renews
    /// on its own schedule all the same.
    pub async fn renew_now(&self) -> Result<RenewStats> {
        self.inner.check_open()?;
        Ok(watchdog::renew_all(&self.inner).await)
    }

    /// Releases every hold of this client (every lock kind: locks, fair locks, read-write and
    /// permit holds), stops the watchdog and the subscriber, and makes every later operation fail with
    /// [`Error::Shutdown`]. Guards still alive then report themselves lost (their `lost()`
    /// resolves) and [`Error::Shutdown`] from `unlock`, every kind alike. Plain [`Semaphore`]
    /// permits have no owner and stay taken.
    ///
    /// # Errors
    /// The first error met while releasing; the remaining holds are released anyway and the
    /// tasks are stopped in every case. Polled outside a tokio runtime it does nothing and
    /// answers an error for which [`Error::is_no_runtime`] is true; [`Error::NoRuntime`] too
    /// when the runtime the client was built on ended before the shutdown did (the leases then
    /// free what it held).
    ///
    /// # Cancel safety
    /// Once polled, the shutdown has begun and runs to its end on the client's runtime:
    /// dropping the future does not stop it. Every call, the first or a later one, answers
    /// once it has ended, with its outcome.
    pub async fn shutdown(&self) -> Result<()> {
        // Refused before it starts: a shutdown begun here could not finish, and a later one
        // would find it begun and do nothing.
        crate::task::in_runtime()?;
        if self.inner.begin_shutdown() {
            // Run on the client's runtime at once, whoever waits for it: it ends even when
            // every caller stops waiting (or never polls again).
            let ending = ShutdownEnding {
                inner: self.inner.clone(),
                outcome: None,
            };
            let client = self.clone();
            self.inner.background.spawn_untracked(async move {
                let mut ending = ending;
                ending.outcome = Some(client.finish_shutdown().await);
            });
        }
        self.inner.shutdown_outcome().await
    }

    /// The work of [`shutdown`](Client::shutdown), once begun.
    async fn finish_shutdown(self) -> Result<()> {
        // Wake every waiter of this client: each finds the client shut down and gives up.
        self.inner.local_queues.close_all();
        self.inner.subscriber.wake_all();
        // Let releases and give-backs already under way finish first, within the timeout.
        self.inner.background.close();
        let pending = self.inner.background.wait();
        if tokio::time::timeout(self.inner.config.timeout, pending)
            .await
            .is_err()
        {
            tracing::warn!("shutdown: background releases still running after the timeout");
        }
        // The usual release path, retries on a dropped connection included; everything the
        // server counts for each hold goes (adopted holds too).
        let drained = self.inner.holds.drain();
        // Their guards no longer hold them, as the family's guards are told below.
        for (hold, _) in &drained.locks {
            hold.mark_lost(LostReason::Shutdown, "the client shut down");
        }
        let client = &self;
        let releases = drained.locks.into_iter().map(|(hold, guards)| async move {
            let holds = hold.server_count(guards.max(1));
            crate::release::give_back(client, &hold.keys, &hold.key.field, hold.lease_ms(), holds)
                .await
        });
        // The lock family's guards still alive: each is told it is lost, then released.
        let family = drained.family.into_iter().map(|hold| hold.give_back());
        let (locks, family) = futures_util::future::join(
            futures_util::future::join_all(releases),
            futures_util::future::join_all(family),
        )
        .await;
        let lock_errors = locks.into_iter().filter_map(Result::err);
        let first_error = lock_errors
            .chain(family.into_iter().filter_map(Result::err))
            .next();
        self.inner.watchdog.stop();
        let inner = &self.inner;
        if let Err(e) = identity::withdraw(&inner.node, &inner.config.prefix, &inner.me).await {
            tracing::debug!(error = %e, "could not withdraw this client's announcement; it expires");
        }
        self.inner.subscriber.stop();
        first_error.map_or(Ok(()), Err)
    }

    /// The names of the locks that are held now, whose names match the glob `pattern` (`*` for
    /// all), at most `limit`: a `SCAN` of the server, or of every primary of a cluster, for
    /// operators (`redlease list`). Not a snapshot: locks taken or released during the scan
    /// may or may not show.
    ///
    /// ```no_run
    /// # async fn demo(client: redlease::Client) -> redlease::Result<()> {
    /// for name in client.held_locks("orders:*", 100).await? {
    ///     let status = client.lock(&name)?.status().await?;
    ///     println!("{name}: {:?}", status.holders);
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Timeout`] or [`Error::Redis`] when a server fails.
    ///
    /// # Cancel safety
    /// Cancel-safe: it only reads.
    pub async fn held_locks(&self, pattern: &str, limit: usize) -> Result<Vec<String>> {
        self.inner.check_open()?;
        let prefix = &self.inner.config.prefix;
        // The prefix as written: `*`, `?`, `[`, `]` and `\` are glob characters to SCAN.
        let mut literal = String::with_capacity(prefix.len() + 4);
        for c in prefix.chars() {
            if "*?[]\\".contains(c) {
                literal.push('\\');
            }
            literal.push(c);
        }
        let keys = self
            .inner
            .node
            .scan_hashes(&format!("{literal}:{{{pattern}}}"), limit)
            .await?;
        let head = format!("{prefix}:{{");
        let mut names: Vec<String> = keys
            .iter()
            .filter_map(|key| key.strip_prefix(&head)?.strip_suffix('}'))
            .map(str::to_owned)
            .collect();
        names.sort_unstable();
        Ok(names)
    }

    /// Sends one raw command with the client's timeout (for tools and tests).
    ///
    /// # Errors
    /// [`Error::Redis`] or [`Error::Timeout`].
    ///
    /// # Cancel safety
    /// As the command's: a command already sent may have run, and is not sent again.
    pub async fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T> {
        self.inner.node.query(cmd).await
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("id", &self.inner.id)
            .field("prefix", &self.inner.config.prefix)
            .finish_non_exhaustive()
    }
}

/// Says how a shutdown ended when its work is dropped: with its outcome once it finished, or,
/// dropped unfinished (the client's runtime ended), [`Error::NoRuntime`].
struct ShutdownEnding {
    inner: std::sync::Arc<Inner>,
    outcome: Option<Result<()>>,
}

impl Drop for ShutdownEnding {
    fn drop(&mut self) {
        let outcome = self.outcome.take().unwrap_or(Err(crate::Error::NoRuntime));
        self.inner.end_shutdown(outcome);
    }
}
