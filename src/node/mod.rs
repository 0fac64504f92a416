//! One Redis deployment the client talks to, and the typed script calls on it: `deploy/` knows
//! the deployment (one server, a Redis Cluster, Sentinel; TLS, ACL, replicas) and how a command
//! is sent; `calls/` holds the typed calls. This is the only place that knows the deployment's
//! shape (`deploy/shape.rs`); lock logic calls these methods and never asks which. Every
//! script touches the keys of one lock, which share its `{name}` hash tag and so one cluster
//! slot; calls that carry several locks (renewals, coalesced batches) are split by
//! [`Node::shard`] first.

use std::sync::Arc;
use std::time::Duration;

use crate::error::Result;
use crate::keys::LockKeys;
use crate::scripts;

mod calls;
mod deploy;
mod tracking;

use calls::{batch, family_calls, lock_calls, queue_read, release_calls};
use deploy::{acl, capabilities, dial, link, replicas, sentinel, shape, tls, transport};

pub(crate) use acl::denied;
pub(crate) use calls::renew_by_node::RENEWAL_BATCH;
pub use capabilities::ServerWarning;
#[allow(unused_imports)] // For the kinds that will choose by what the server can do.
pub(crate) use capabilities::{Capabilities, ServerInfo, Version};
pub(crate) use dial::Dial;
pub(crate) use family_calls::FamilyScript;
pub(crate) use link::{Event, Link, Sink};
use lock_calls::Batches;
pub(crate) use lock_calls::{AcquireCall, AcquireTerms, QueueTerms};
pub(crate) use queue_read::QueueView;
pub(crate) use release_calls::{Latch, ReleaseArgs, Successor};
pub(crate) use replicas::{Acks, Shortfall, WaitFor};
use shape::Conn;
pub(crate) use shape::Target;
#[cfg(feature = "tls-rustls")]
pub use tls::TlsOptions;
pub(crate) use tracking::{Moves, Presence, Tracked, Unavailable};
pub(crate) use transport::bounded;
pub(crate) use transport::resent_if_dropped;
use transport::{UNBOUNDED, evalsha, evalsha_without_keys, once_more_if_dropped};

/// Names one release request (`<client uuid>:<n>`), so a retry of it is recognised.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RequestId<'a> {
    pub client: &'a Arc<str>,
    pub n: u64,
}

/// One renewal request of the watchdog's batch.
#[derive(Clone, Copy)]
pub(crate) struct Renewal<'a> {
    pub hash: &'a str,
    pub field: &'a str,
    pub lease_ms: u64,
    /// The lock's lock-delay in milliseconds (0: none): its marker is renewed for the lease
    /// plus this.
    pub delay_ms: u64,
}

impl Renewal<'_> {
    /// The lease argument of `renew.lua` and `renew_node.lua`: `<lease>`, or `<lease>+<delay>`
    /// for a lock with a lock-delay.
    pub(crate) fn lease_arg(&self) -> String {
        match self.delay_ms {
            0 => self.lease_ms.to_string(),
            delay => format!("{}+{delay}", self.lease_ms),
        }
    }
}

/// The server's view of one lock, for `status` and introspection.
#[derive(Debug, Clone, Default)]
pub(crate) struct Snapshot {
    pub owners: Vec<(String, u64)>,
    pub ttl: Option<Duration>,
    pub fence: Option<u64>,
    /// The waiter queue's owner fields, in no order (dead entries included).
    pub queued: Vec<String>,
}

/// Which keys one script call may carry together: the keys of one cluster slot (every key on
/// one server). Ordered, so a list sorted by it is grouped by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub(crate) struct Shard(u16);

/// What identifies a deployment, whatever server answers now: the server (`host:port`) and
/// database named; a cluster by its first seed; behind Sentinel, the sentinels and the
/// master's name (not the master found, which a failover changes).
#[derive(Debug)]
pub(crate) struct Keyspace {
    /// `host:port`, or `sentinels <host:port,...>/<master>`.
    pub server: String,
    pub db: i64,
}

impl Keyspace {
    fn of(target: &Target, dial: &Dial) -> Result<Keyspace> {
        if let Target::Sentinel(spec) = target {
            let mut sentinels = spec.sentinels.clone();
            sentinels.sort();
            return Ok(Keyspace {
                server: format!("sentinels {}/{}", sentinels.join(","), spec.master),
                db: spec.db,
            });
        }
        let client = dial.server_client(target.first_url()?)?;
        let info = client.get_connection_info();
        Ok(Keyspace {
            server: info.addr().to_string(),
            db: info.redis_settings().db(),
        })
    }
}

#[derive(Clone)]
pub(crate) struct Node {
    conn: Conn,
    /// What identifies the deployment (`multi/`: duplicate members, RedLock's independent masters).
    keyspace: Arc<Keyspace>,
    /// How the subscriber connects to the same deployment.
    link: Link,
    timeout: Duration,
    /// How long a fencing counter outlives the lease it was last written with
    /// ([`Config::fence_grace`](crate::Config::fence_grace)), in milliseconds.
    fence_grace_ms: u64,
    batches: Arc<Batches>,
    /// What the node learnt about its replicas (`deploy/replicas.rs`), shared by its clones.
    replicas: Arc<replicas::ReplicaState>,
    /// A lazy client's rights check, run before its first script call or pipeline.
    rights: Option<Arc<acl::Pending>>,
    /// What the servers are and can do, learnt at connect (`deploy/capabilities.rs`).
    capabilities: Arc<Capabilities>,
    /// On a cluster: a fingerprint of the slot map last read (`CLUSTER SLOTS`, at each
    /// watchdog tick and each connect of the loss notice), which the notice watches to follow
    /// a map that changed without telling its connections (`tracking.rs`).
    slot_map: Arc<tokio::sync::watch::Sender<u64>>,
}

impl Node {
    /// Connects now, or (`lazy`) on first use so that a server that is down at start-up
    /// only fails the operations that need it.
    pub(crate) async fn connect(
        target: &Target,
        timeout: Duration,
        lazy: bool,
        dial: &Dial,
    ) -> Result<Node> {
        let keyspace = Arc::new(Keyspace::of(target, dial)?);
        let conn = shape::connect(target, timeout, lazy, dial).await?;
        let link = Link::new(target, &conn, timeout, dial)?;
        let mut node = Node {
            conn,
            keyspace,
            link,
            timeout,
            fence_grace_ms: crate::config::DEFAULT_FENCE_GRACE.as_millis() as u64,
            batches: Arc::default(),
            replicas: Arc::default(),
            rights: None,
            capabilities: Arc::default(),
            slot_map: Arc::new(tokio::sync::watch::Sender::new(0)),
        };
        if !lazy {
            node.capabilities = Arc::new(node.learn_capabilities().await);
        }
        Ok(node)
    }

    /// Sets how long fencing counters outlive their lease (from the client's config).
    pub(crate) fn set_fence_grace(&mut self, grace: Duration) {
        self.fence_grace_ms = grace.as_millis().min(u128::from(u64::MAX)) as u64;
    }

    /// What identifies this deployment.
    pub(crate) fn keyspace(&self) -> &Keyspace {
        &self.keyspace
    }

    /// How to open a subscriber connection to this deployment.
    pub(crate) fn link(&self) -> Link {
        self.link.clone()
    }

    /// The group of keys that `key` may share a script call with.
    /// Whether this is a Redis Cluster (else one server).
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.conn, Conn::Cluster(_))
    }

    pub(crate) fn shard(&self, key: &str) -> Shard {
        match self.conn {
            Conn::Server(_) => Shard(0),
            Conn::Cluster(_) => Shard(shape::slot(key)),
        }
    }

    /// The publishing scripts in the variant this deployment's subscriber listens with.
    fn release_script(&self) -> &'static redis::Script {
        match self.conn {
            Conn::Server(_) => &scripts::RELEASE,
            Conn::Cluster(_) => &shape::sharded::RELEASE,
        }
    }

    fn acquire_script(&self) -> &'static redis::Script {
        match self.conn {
            Conn::Server(_) => &scripts::ACQUIRE,
            Conn::Cluster(_) => &shape::sharded::ACQUIRE,
        }
    }

    fn withdraw_script(&self) -> &'static redis::Script {
        match self.conn {
            Conn::Server(_) => &scripts::WITHDRAW,
            Conn::Cluster(_) => &shape::sharded::WITHDRAW,
        }
    }

    fn force_release_script(&self) -> &'static redis::Script {
        match self.conn {
            Conn::Server(_) => &scripts::FORCE_RELEASE,
            Conn::Cluster(_) => &shape::sharded::FORCE_RELEASE,
        }
    }

    /// Renews a batch of leases; one flag per lock, in order. Locks of one [`Shard`] go in one
    /// script call; the calls of several shards leave together (pipelined per server).
    pub(crate) async fn renew(&self, batch: &[Renewal<'_>]) -> Result<Vec<bool>> {
        let renewed = self.renew_acked(batch, None).await?;
        Ok(renewed.into_iter().map(|(flag, _)| flag).collect())
    }

    /// [`renew`](Self::renew), with `WAIT` behind each script call when `wait` asks for it:
    /// per lock, renewed or not and what its call's `WAIT` answered.
    pub(crate) async fn renew_acked(
        &self,
        batch: &[Renewal<'_>],
        wait: Option<WaitFor>,
    ) -> Result<Vec<(bool, Option<Acks>)>> {
        let mut order: Vec<usize> = (0..batch.len()).collect();
        order.sort_by_key(|&i| self.shard(batch[i].hash));
        let groups: Vec<&[usize]> = order
            .chunk_by(|&a, &b| self.shard(batch[a].hash) == self.shard(batch[b].hash))
            .collect();
        let calls = groups.iter().map(|group| async move {
            let requests: Vec<&Renewal<'_>> = group.iter().map(|&i| &batch[i]).collect();
            self.renew_group(&requests, wait).await
        });
        let replies = futures_util::future::join_all(calls).await;
        let mut out = vec![(false, None); batch.len()];
        for (group, reply) in groups.iter().zip(replies) {
            let (flags, acks) = reply?;
            for (&i, flag) in group.iter().zip(flags) {
                out[i] = (flag, acks.clone());
            }
        }
        Ok(out)
    }

    /// Renews the leases of one shard in one script call (with `WAIT` behind it for `wait`).
    async fn renew_group(
        &self,
        batch: &[&Renewal<'_>],
        wait: Option<WaitFor>,
    ) -> Result<(Vec<bool>, Option<Acks>)> {
        let bytes: usize = batch.iter().map(|r| r.hash.len() + r.field.len() + 8).sum();
        let mut cmd = evalsha(&scripts::RENEW, batch.len(), 2 * batch.len(), bytes);
        // KEYS: the hashes; ARGV: field and lease of each, in the same order.
        for r in batch {
            cmd.arg(r.hash);
        }
        for r in batch {
            cmd.arg(r.field).arg(r.lease_arg());
        }
        let script = &scripts::RENEW;
        let (reply, acks) = match wait {
            None => (self.eval_retried("renew", "", script, &cmd).await?, None),
            Some(wait) => {
                let acked = || self.eval_acked("renew", "", self.timeout, script, &cmd, wait);
                let (reply, acks) = once_more_if_dropped(acked).await?;
                (reply, Some(acks))
            }
        };
        Ok((scripts::renewed("renew", reply, batch.len())?, acks))
    }

    pub(crate) async fn force_release(&self, keys: &LockKeys) -> Result<bool> {
        let script = self.force_release_script();
        let mut cmd = evalsha(script, 1, 0, keys.hash.len());
        cmd.arg(&*keys.hash);
        let reply: i64 = self
            .eval_retried("force unlock", &keys.hash, script, &cmd)
            .await?;
        Ok(reply == 1)
    }

    /// Raises the lock's fencing counter to at least `token` (RedLock); the counter after.
    pub(crate) async fn raise_fence(
        &self,
        keys: &LockKeys,
        token: u64,
        lease_ms: u64,
    ) -> Result<u64> {
        let mut cmd = evalsha(&scripts::RAISE_FENCE, 1, 2, keys.hash.len() + 32);
        cmd.arg(keys.fence())
            .arg(token)
            .arg(lease_ms.saturating_add(self.fence_grace_ms));
        self.eval_retried("raise fence", &keys.hash, &scripts::RAISE_FENCE, &cmd)
            .await
    }

    /// Owners, remaining lease and fencing counter, read in one pipelined round trip.
    pub(crate) async fn snapshot(&self, keys: &LockKeys) -> Result<Snapshot> {
        let mut pipe = redis::pipe();
        pipe.hgetall(&*keys.hash)
            .pttl(&*keys.hash)
            .get(keys.fence())
            // HGETALL, a right every user of the locks has already (docs/acl.md).
            .hgetall(keys.queue_entries());
        type Pairs<V> = Vec<(String, V)>;
        let (owners, ttl, fence, queued): (Pairs<u64>, i64, Option<u64>, Pairs<String>) =
            self.query_pipeline("inspect", &keys.hash, &pipe).await?;
        // '@<name>' is when a name was listed, beside its entry.
        let queued = queued
            .into_iter()
            .map(|(field, _)| field)
            .filter(|field| !field.starts_with('@'))
            .collect();
        Ok(Snapshot {
            owners: owners.into_iter().map(|(f, n)| (f, holds(n))).collect(),
            ttl: (ttl >= 0).then(|| Duration::from_millis(ttl as u64)),
            fence,
            queued,
        })
    }

    /// The hold count of one owner field (0 when it holds nothing).
    pub(crate) async fn hold_count(&self, keys: &LockKeys, field: &str) -> Result<u32> {
        let mut cmd = redis::cmd("HGET");
        cmd.arg(&*keys.hash).arg(field);
        let cmd = &cmd;
        let count: Option<u32> = self
            .through_transitions(self.timeout, |limit| {
                once_more_if_dropped(move || {
                    let mut conn = self.conn.clone();
                    let hash = &keys.hash;
                    async move {
                        bounded("hold count", hash, limit, cmd.query_async(&mut conn)).await
                    }
                })
            })
            .await?;
        Ok(count.map_or(0, holds))
    }
}

/// The holds an owner field's count on the server stands for: a hold granted from the queue
/// is written with count 0 until it is claimed, and is one hold (`lua/queue_lock.lua`).
fn holds<N: Ord + From<u8>>(count: N) -> N {
    count.max(N::from(1))
}
