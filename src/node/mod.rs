//! One Redis deployment the client talks to, and the typed script calls on it.
//!
//! This is the only place that knows the deployment's shape (one server or a Redis Cluster,
//! `shape.rs`); lock logic calls these methods and never asks which. Every script touches the
//! keys of one lock, which share its `{name}` hash tag and so one cluster slot; calls that carry
//! several locks (renewals, coalesced batches) are split by [`Node::shard`] first. The lock
//! scripts' calls, alone and coalesced, are in `lock_calls.rs`; the subscriber's connection is
//! in `link.rs`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use redis::{FromRedisValue, RedisResult};

use crate::error::{Error, Result};
use crate::keys::LockKeys;
use crate::scripts;

mod family_calls;
mod link;
mod lock_calls;
mod scan;
mod shape;

pub(crate) use family_calls::FamilyScript;
pub(crate) use link::{Event, Link, Sink};
use lock_calls::Batches;
pub(crate) use lock_calls::{Latch, ReleaseArgs, Successor, acquire_args};
use shape::Conn;
pub(crate) use shape::Target;

/// Names one release request (`<client uuid>:<n>`), so a retry of it is recognised.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RequestId<'a> {
    pub client: &'a Arc<str>,
    pub n: u64,
}

/// One renewal request of the watchdog's batch.
pub(crate) struct Renewal<'a> {
    pub hash: &'a str,
    pub field: &'a str,
    pub lease_ms: u64,
}

/// The server's view of one lock, for `status` and introspection.
#[derive(Debug, Clone, Default)]
pub(crate) struct Snapshot {
    pub owners: Vec<(String, u64)>,
    pub ttl: Option<Duration>,
    pub fence: Option<u64>,
}

/// Which keys one script call may carry together: the keys of one cluster slot (every key on
/// one server). Ordered, so a list sorted by it is grouped by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub(crate) struct Shard(u16);

#[derive(Clone)]
pub(crate) struct Node {
    conn: Conn,
    /// The (first) server named: what identifies the deployment (`multi/` keyspaces).
    client: redis::Client,
    /// How the subscriber connects to the same deployment.
    link: Link,
    timeout: Duration,
    batches: Arc<Batches>,
}

impl Node {
    /// Connects now, or (`lazy`) on first use so that a server that is down at start-up
    /// only fails the operations that need it.
    pub async fn connect(target: &Target, timeout: Duration, lazy: bool) -> Result<Node> {
        let client = shape::server_client(target.first_url()?)?;
        let link = Link::new(target, timeout)?;
        let conn = shape::connect(target, timeout, lazy).await?;
        Ok(Node {
            conn,
            client,
            link,
            timeout,
            batches: Arc::default(),
        })
    }

    pub fn redis_client(&self) -> &redis::Client {
        &self.client
    }

    /// How to open a subscriber connection to this deployment.
    pub fn link(&self) -> Link {
        self.link.clone()
    }

    /// The group of keys that `key` may share a script call with.
    pub fn shard(&self, key: &str) -> Shard {
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

    fn force_release_script(&self) -> &'static redis::Script {
        match self.conn {
            Conn::Server(_) => &scripts::FORCE_RELEASE,
            Conn::Cluster(_) => &shape::sharded::FORCE_RELEASE,
        }
    }

    /// Renews a batch of leases; one flag per lock, in order. Locks of one [`Shard`] go in one
    /// script call; the calls of several shards leave together (pipelined per server).
    pub async fn renew(&self, batch: &[Renewal<'_>]) -> Result<Vec<bool>> {
        let mut order: Vec<usize> = (0..batch.len()).collect();
        order.sort_by_key(|&i| self.shard(batch[i].hash));
        let mut groups: Vec<&[usize]> = Vec::new();
        let mut rest = order.as_slice();
        while let Some(&first) = rest.first() {
            let shard = self.shard(batch[first].hash);
            let len = rest
                .iter()
                .position(|&i| self.shard(batch[i].hash) != shard)
                .unwrap_or(rest.len());
            let (group, tail) = rest.split_at(len);
            groups.push(group);
            rest = tail;
        }
        if groups.len() <= 1 {
            return self.renew_group(batch).await;
        }
        let calls = groups.iter().map(|group| {
            let requests: Vec<Renewal<'_>> = group
                .iter()
                .map(|&i| Renewal {
                    hash: batch[i].hash,
                    field: batch[i].field,
                    lease_ms: batch[i].lease_ms,
                })
                .collect();
            async move { self.renew_group(&requests).await }
        });
        let replies = futures_util::future::join_all(calls).await;
        let mut flags = vec![false; batch.len()];
        for (group, reply) in groups.iter().zip(replies) {
            for (&i, flag) in group.iter().zip(reply?) {
                flags[i] = flag;
            }
        }
        Ok(flags)
    }

    /// Renews the leases of one shard in one script call.
    async fn renew_group(&self, batch: &[Renewal<'_>]) -> Result<Vec<bool>> {
        let bytes: usize = batch.iter().map(|r| r.hash.len() + r.field.len() + 8).sum();
        let mut cmd = evalsha(&scripts::RENEW, batch.len(), 2 * batch.len(), bytes);
        // KEYS: the hashes; ARGV: field and lease of each, in the same order.
        for r in batch {
            cmd.arg(r.hash);
        }
        for r in batch {
            cmd.arg(r.field).arg(r.lease_ms);
        }
        let reply: Vec<i64> = self
            .eval_retried("renew", "", &scripts::RENEW, &cmd)
            .await?;
        if reply.len() != batch.len() {
            return Err(Error::Protocol {
                script: "renew",
                reply: format!("{reply:?}"),
            });
        }
        Ok(reply.into_iter().map(|flag| flag == 1).collect())
    }

    pub async fn force_release(&self, keys: &LockKeys) -> Result<bool> {
        let script = self.force_release_script();
        let mut cmd = evalsha(script, 2, 0, 2 * keys.hash.len() + 8);
        cmd.arg(&*keys.hash).arg(keys.channel());
        let reply: i64 = self
            .eval_retried("force unlock", &keys.hash, script, &cmd)
            .await?;
        Ok(reply == 1)
    }

    /// Raises the lock's fencing counter to at least `token` (RedLock); the counter after.
    pub async fn raise_fence(&self, keys: &LockKeys, token: u64) -> Result<u64> {
        let mut cmd = evalsha(&scripts::RAISE_FENCE, 1, 1, keys.hash.len() + 16);
        cmd.arg(keys.fence()).arg(token);
        self.eval_retried("raise fence", &keys.hash, &scripts::RAISE_FENCE, &cmd)
            .await
    }

    /// Owners, remaining lease and fencing counter, read in one pipelined round trip.
    pub async fn snapshot(&self, keys: &LockKeys) -> Result<Snapshot> {
        let mut pipe = redis::pipe();
        pipe.hgetall(&*keys.hash)
            .pttl(&*keys.hash)
            .get(keys.fence());
        let (owners, ttl, fence): (Vec<(String, u64)>, i64, Option<u64>) =
            self.query_pipeline("inspect", &keys.hash, &pipe).await?;
        Ok(Snapshot {
            owners,
            ttl: (ttl >= 0).then(|| Duration::from_millis(ttl as u64)),
            fence,
        })
    }

    /// The hold count of one owner field (0 when it holds nothing).
    pub async fn hold_count(&self, keys: &LockKeys, field: &str) -> Result<u32> {
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
        Ok(count.unwrap_or(0))
    }

    /// Runs an arbitrary command (tests, tools) with the node's timeout.
    pub async fn query<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T> {
        self.through_transitions(self.timeout, |limit| {
            let mut conn = self.conn.clone();
            async move { bounded("query", "", limit, cmd.query_async(&mut conn)).await }
        })
        .await
    }

    /// Runs a pipeline with the node's timeout. Its commands leave back to back on the one
    /// connection, so another caller's commands cannot come in between (MultiLock batches).
    pub async fn query_pipeline<T: FromRedisValue>(
        &self,
        operation: &'static str,
        key: &str,
        pipe: &redis::Pipeline,
    ) -> Result<T> {
        if let Some(groups) = self.pipeline_groups(pipe) {
            return self
                .query_pipeline_split(operation, key, pipe, groups)
                .await;
        }
        self.through_transitions(self.timeout, |limit| {
            once_more_if_dropped(move || {
                let mut conn = self.conn.clone();
                async move { bounded(operation, key, limit, pipe.query_async(&mut conn)).await }
            })
        })
        .await
    }

    /// On a cluster, the commands of `pipe` grouped by slot (indexes in order), when they span
    /// more than one: redis-rs sends a pipeline to one node, and a node refuses the keys of
    /// slots it does not serve (CROSSSLOT, or MOVED).
    fn pipeline_groups(&self, pipe: &redis::Pipeline) -> Option<Vec<Vec<usize>>> {
        let Conn::Cluster(_) = self.conn else {
            return None;
        };
        let mut groups: Vec<(Option<u16>, Vec<usize>)> = Vec::new();
        for (i, cmd) in pipe.cmd_iter().enumerate() {
            let slot = shape::command_slot(cmd);
            match groups.iter_mut().find(|(s, _)| *s == slot) {
                Some((_, group)) => group.push(i),
                None => groups.push((slot, vec![i])),
            }
        }
        (groups.len() > 1).then(|| groups.into_iter().map(|(_, group)| group).collect())
    }

    /// Sends each slot's commands of `pipe` as a pipeline of its own, all at once, and answers
    /// their replies in the order of `pipe`, as one pipeline with `ignore_errors` would: a
    /// failed command's error is its own reply. A group that fails as a whole fails the call.
    async fn query_pipeline_split<T: FromRedisValue>(
        &self,
        operation: &'static str,
        key: &str,
        pipe: &redis::Pipeline,
        groups: Vec<Vec<usize>>,
    ) -> Result<T> {
        let commands: Vec<&redis::Cmd> = pipe.cmd_iter().collect();
        let calls = groups.iter().map(|group| {
            let mut part = redis::pipe();
            part.ignore_errors();
            for &i in group {
                part.add_command(commands[i].clone());
            }
            async move {
                self.through_transitions(self.timeout, |limit| {
                    let part = &part;
                    once_more_if_dropped(move || {
                        let mut conn = self.conn.clone();
                        async move {
                            let query = part.query_async::<Vec<redis::Value>>(&mut conn);
                            bounded(operation, key, limit, query).await
                        }
                    })
                })
                .await
            }
        });
        let replies = futures_util::future::join_all(calls).await;
        let mut values = vec![redis::Value::Nil; commands.len()];
        for (group, reply) in groups.iter().zip(replies) {
            let reply = reply?;
            if reply.len() != group.len() {
                return Err(Error::Protocol {
                    script: operation,
                    reply: format!("{} replies for a pipeline of {}", reply.len(), group.len()),
                });
            }
            for (&i, value) in group.iter().zip(reply) {
                values[i] = value;
            }
        }
        redis::from_redis_value(redis::Value::Array(values))
            .map_err(|e| Error::redis(operation, key, e.into()))
    }

    /// Runs an `evalsha` command, loading the script once when the server does not know it
    /// (NOSCRIPT: first use, a server restarted or flushed since, or a replica just promoted).
    async fn eval<T: FromRedisValue>(
        &self,
        operation: &'static str,
        key: &str,
        limit: Duration,
        script: &redis::Script,
        cmd: &redis::Cmd,
    ) -> Result<T> {
        self.through_transitions(limit, |limit| {
            self.eval_once(operation, key, limit, script, cmd)
        })
        .await
    }

    /// Sends `request` again, until `limit` is spent, while a cluster answers that it did not run
    /// it because a slot is moving or a primary is being elected (MOVED or ASK that redis-rs's
    /// own redirects did not settle, TRYAGAIN, CLUSTERDOWN, MASTERDOWN, or READONLY from a
    /// primary just demoted). Those answers mean the command was not applied, so sending it again
    /// is safe for every script. One server's answers are returned as they are: a READONLY there
    /// means the URL names a replica, which waiting does not change.
    async fn through_transitions<T, F, Fut>(&self, limit: Duration, mut request: F) -> Result<T>
    where
        F: FnMut(Duration) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        if matches!(self.conn, Conn::Server(_)) {
            return request(limit).await;
        }
        let deadline = tokio::time::Instant::now() + limit;
        let mut pause = Duration::from_millis(20);
        loop {
            let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
            match request(remaining).await {
                Err(e) if in_transition(&e) && remaining > pause * 2 => {
                    tracing::debug!(error = %e, "cluster in transition; sending again");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(200));
                }
                outcome => return outcome,
            }
        }
    }

    async fn eval_once<T: FromRedisValue>(
        &self,
        operation: &'static str,
        key: &str,
        limit: Duration,
        script: &redis::Script,
        cmd: &redis::Cmd,
    ) -> Result<T> {
        let mut conn = self.conn.clone();
        match bounded(operation, key, limit, cmd.query_async(&mut conn)).await {
            Err(Error::Redis { source, .. })
                if source.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
            {
                bounded(operation, key, limit, script.load_async(&mut conn)).await?;
                bounded(operation, key, limit, cmd.query_async(&mut conn)).await
            }
            other => other,
        }
    }

    /// [`eval`](Node::eval) with the node's timeout, once more after a dropped connection: for
    /// scripts whose repetition is harmless (renew, force unlock, raise fence).
    async fn eval_retried<T: FromRedisValue>(
        &self,
        operation: &'static str,
        key: &str,
        script: &redis::Script,
        cmd: &redis::Cmd,
    ) -> Result<T> {
        once_more_if_dropped(|| self.eval(operation, key, self.timeout, script, cmd)).await
    }
}

/// Whether a cluster's answer means the command was not run while a slot moves or a primary is
/// elected (see [`Node::through_transitions`]).
fn in_transition(e: &Error) -> bool {
    use redis::ServerErrorKind as Kind;
    let Error::Redis { source, .. } = e else {
        return false;
    };
    matches!(
        source.kind(),
        redis::ErrorKind::Server(
            Kind::Moved
                | Kind::Ask
                | Kind::TryAgain
                | Kind::ClusterDown
                | Kind::MasterDown
                | Kind::ReadOnly
        )
    )
}

/// Runs `request`, and once more if it failed on a dropped connection.
///
/// The connection manager notices a dead connection (server restart, `CLIENT KILL`) only when a
/// command fails on it, and reconnects then. Without this second try every restart failed one
/// command per caller: a waiter woken after a restart got `broken pipe` instead of the lock, and
/// the watchdog learned of a lost key a whole renewal period late. The retry waits for the new
/// connection within the usual timeout; a second failure is returned as it is.
async fn once_more_if_dropped<T, F, Fut>(mut request: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    match request().await {
        Err(Error::Redis { source, operation }) if source.is_connection_dropped() => {
            tracing::debug!(operation, error = %source, "connection dropped; trying once more");
            request().await
        }
        outcome => outcome,
    }
}

/// An `EVALSHA <sha> <nkeys>` command; the caller appends keys, then `args` more arguments
/// with `bytes` bytes in all (an estimate). A plain `Cmd` packs every argument into one buffer,
/// where `ScriptInvocation` allocates one per argument on the hot path; sizing it up front
/// saves the buffer's regrowth, which showed in the profile.
fn evalsha(script: &redis::Script, nkeys: usize, args: usize, bytes: usize) -> redis::Cmd {
    let mut cmd = evalsha_without_keys(script, nkeys + args, bytes);
    cmd.arg(nkeys);
    cmd
}

/// `EVALSHA <sha>`, sized for `items` more arguments (the key count included) of `bytes` bytes.
fn evalsha_without_keys(script: &redis::Script, items: usize, bytes: usize) -> redis::Cmd {
    let mut cmd = redis::Cmd::with_capacity(3 + items, 48 + bytes);
    cmd.arg("EVALSHA").arg(script.get_hash());
    cmd
}

/// Bounds a Redis future by the configured timeout and types its error.
pub(crate) async fn bounded<T>(
    operation: &'static str,
    key: &str,
    timeout: Duration,
    fut: impl Future<Output = RedisResult<T>>,
) -> Result<T> {
    match tokio::time::timeout(timeout, fut).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(Error::redis(operation, key, e)),
        Err(_) => Err(Error::Timeout { operation, timeout }),
    }
}
