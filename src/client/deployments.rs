//! Clients of the deployments named by more than one address: a Redis Cluster by its seed
//! nodes, a master by the sentinels that monitor it.

#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::node::Target;

use super::{Client, ClientBuilder};

impl Client {
    /// A builder for a client of a Redis Cluster (or Valkey cluster), given the URLs of one or
    /// more of its nodes (`redis://[user:pass@]host:port`); the other nodes are found from
    /// them, and so are later changes of the topology.
    ///
    /// Every feature works as on one server. The keys of one lock share its `{name}` hash tag,
    /// so each script call touches one slot; calls that carry several locks (the watchdog's
    /// renewals, coalesced acquisitions and releases) are split by slot and pipelined per node.
    /// Commands go to primaries only. Waiters listen on sharded pub/sub (`SSUBSCRIBE`; Redis 7+
    /// and Valkey), or on plain pub/sub on older servers, and subscribe again when a slot moves
    /// or fails over; a message lost meanwhile costs a waiter at most the holder's remaining
    /// lease. A RedLock over several clusters takes one such client per cluster.
    ///
    /// ```no_run
    /// # async fn demo() -> redlease::Result<()> {
    /// let client = redlease::Client::builder_cluster([
    ///     "redis://10.0.0.1:7000",
    ///     "redis://10.0.0.2:7000",
    /// ])
    /// .build()
    /// .await?;
    /// let guard = client.lock("orders:42")?.lock().await?;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn builder_cluster<I, S>(seeds: I) -> ClientBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ClientBuilder::new(Target::Cluster(seeds.into_iter().map(Into::into).collect()))
    }

    /// Connects to a Redis Cluster with the default [`Config`](crate::Config); see
    /// [`builder_cluster`](Client::builder_cluster).
    ///
    /// # Errors
    /// As [`ClientBuilder::build`]; also [`Error::InvalidArgument`] when no seed is given.
    ///
    /// # Cancel safety
    /// As [`ClientBuilder::build`].
    pub async fn connect_cluster<I, S>(seeds: I) -> Result<Client>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Client::builder_cluster(seeds).build().await
    }

    /// A builder for a client of the Redis master that Redis Sentinel monitors as
    /// `master_name`, given the addresses of one or more sentinels: each `host:port` or
    /// `redis://[user:pass@]host:port[/db][?query]`. The credentials, db and query of the first
    /// sentinel that gives them are the master's (as in the URL form
    /// `redis+sentinel://[user:pass@]host:port[,host:port...]/<master-name>[/db][?query]`,
    /// which [`builder`](Client::builder) also reads); each sentinel is asked with those
    /// credentials, and without any when it refuses them.
    ///
    /// The master is found by asking the sentinels in turn and checking with `ROLE` that the
    /// address they name is a master. When a command finds the connection refused or the
    /// server demoted (`READONLY`), the sentinels are asked again and the command is sent to the
    /// new master, within the call's timeout; the subscriber follows the same way and wakes
    /// every waiter when it reconnects. Locks taken on the old master are kept if the promoted
    /// replica had them; if not, the watchdog's next renewal reports them lost. See
    /// `docs/sentinel.md` for what a failover can and cannot keep (fencing tokens included).
    ///
    /// ```no_run
    /// # async fn demo() -> redlease::Result<()> {
    /// let client = redlease::Client::builder_sentinel(
    ///     "mymaster",
    ///     ["10.0.0.1:26379", "10.0.0.2:26379", "10.0.0.3:26379"],
    /// )
    /// .build()
    /// .await?;
    /// let guard = client.lock("orders:42")?.lock().await?;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn builder_sentinel<I, S>(master_name: impl Into<String>, sentinels: I) -> ClientBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let sentinels = sentinels.into_iter().map(Into::into).collect();
        ClientBuilder::new(Target::sentinel(master_name.into(), sentinels))
    }

    /// Connects to the master that sentinels monitor as `master_name`, with the default
    /// [`Config`](crate::Config); see [`builder_sentinel`](Client::builder_sentinel).
    ///
    /// # Errors
    /// As [`ClientBuilder::build`]; also [`Error::InvalidArgument`] when no sentinel or an empty
    /// name is given, and [`Error::UnknownMaster`] when no sentinel knows the name.
    ///
    /// # Cancel safety
    /// As [`ClientBuilder::build`].
    pub async fn connect_sentinel<I, S>(
        master_name: impl Into<String>,
        sentinels: I,
    ) -> Result<Client>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Client::builder_sentinel(master_name, sentinels)
            .build()
            .await
    }
}
