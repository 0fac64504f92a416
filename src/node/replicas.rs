//! Replica acknowledgement: `WAIT n timeout` sent in one pipeline right after a lock script, on
//! the same connection, so that it counts the replicas that have that script's write.
//!
//! On one server the pipeline leaves on the one multiplexed connection. On a cluster a lone
//! `WAIT` would go to every primary (redis-rs routes it to all and answers the minimum); in a
//! pipeline behind the script it goes where the script goes, to the key's primary: redis-rs
//! sends a pipeline to the node of its first keyed command.
//!
//! `WAIT` blocks the connection it is sent on until it answers: other commands of this client
//! queue behind it for up to the timeout (see `docs/replicas.md`). Nothing here runs when no
//! lock asks for acknowledgement ([`Replicas::Off`], the default).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::cluster_routing::{MultipleNodeRoutingInfo, ResponsePolicy, RoutingInfo};
use redis::{ErrorKind, RedisResult, ServerErrorKind, Value};
use tokio::time::Instant;

use super::sentinel::ServerConn;
use super::shape::Conn;
use super::{Node, Renewal, bounded, evalsha, once_more_if_dropped};
use crate::config::Replicas;
use crate::error::{Error, Result};
use crate::scripts;

/// What one write waits for: `replicas` acknowledgements within `timeout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WaitFor {
    pub replicas: u32,
    pub timeout: Duration,
    /// [`Replicas::Wait`]: a server without `WAIT` is an error. [`Replicas::Auto`]: a warning,
    /// and no more `WAIT`s.
    strict: bool,
}

impl WaitFor {
    /// The most demanding of two: what a call carrying the writes of both must wait for.
    pub(crate) fn max(self, other: WaitFor) -> WaitFor {
        WaitFor {
            replicas: self.replicas.max(other.replicas),
            timeout: self.timeout.max(other.timeout),
            strict: self.strict || other.strict,
        }
    }

    pub(super) fn command(self) -> redis::Cmd {
        let mut cmd = redis::cmd("WAIT");
        // Never 0: `WAIT n 0` blocks forever (validation keeps the timeout at 1 ms or more).
        let ms = (self.timeout.as_millis() as u64).max(1);
        cmd.arg(self.replicas).arg(ms);
        cmd
    }
}

/// What `WAIT` answered after a write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Acks {
    /// This many replicas acknowledged.
    Count(u32),
    /// The server answered `WAIT` with an error (strict mode only).
    Unsupported(String),
    /// The server does not know `WAIT` and the mode is [`Replicas::Auto`]: no acknowledgement
    /// is asked for.
    Skipped,
}

/// How a write fell short of what its lock wanted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Shortfall {
    /// Fewer acknowledgements than wanted.
    Acks { acknowledged: u32, wanted: u32 },
    /// The server cannot acknowledge.
    Unsupported(String),
}

impl Acks {
    /// How these acknowledgements fall short of `want`, if they do.
    pub(crate) fn short_of(&self, want: WaitFor) -> Option<Shortfall> {
        match self {
            Acks::Count(n) if *n < want.replicas => Some(Shortfall::Acks {
                acknowledged: *n,
                wanted: want.replicas,
            }),
            Acks::Count(_) | Acks::Skipped => None,
            Acks::Unsupported(reason) => Some(Shortfall::Unsupported(reason.clone())),
        }
    }
}

impl Shortfall {
    /// The typed error of an acquisition of lock `name` that fell short.
    pub(crate) fn into_error(self, name: &str) -> Error {
        match self {
            Shortfall::Acks {
                acknowledged,
                wanted,
            } => Error::ReplicasUnacknowledged {
                name: name.to_owned(),
                acknowledged,
                wanted,
            },
            Shortfall::Unsupported(reason) => Error::ReplicasUnsupported { reason },
        }
    }
}

/// How long after a master switch an `Auto` count is provisional: the other replicas are
/// still moving to the new master, so a count taken then may be short.
const SETTLING: Duration = Duration::from_secs(10);
/// How often a provisional count is taken again, at most.
const RECOUNT_EVERY: Duration = Duration::from_secs(1);

/// What a node learnt about its replicas: how many `Auto` found, whether `WAIT` is refused.
#[derive(Debug, Default)]
pub(crate) struct ReplicaState {
    /// The last count, `None` until taken.
    counted: parking_lot::Mutex<Option<Count>>,
    /// One count at a time.
    counting: tokio::sync::Mutex<()>,
    /// When a count last failed (a proxy or a user without `INFO`): the next one waits
    /// [`RECOUNT_EVERY`], so such a deployment is not sent `INFO` before every write.
    failed_at: parking_lot::Mutex<Option<Instant>>,
    unsupported: AtomicBool,
}

/// An `Auto` count of the replicas, and of which master.
#[derive(Debug, Clone, Copy)]
struct Count {
    replicas: u32,
    /// The sentinel connection's generation it was taken at (0: no sentinels).
    generation: u64,
    /// When the first count of this generation was taken (about when the master changed).
    first: Instant,
    /// When this count was taken.
    at: Instant,
    /// A write fell short of it: count again.
    stale: bool,
}

impl Count {
    /// Whether it still stands for the master of `generation`: taken there, and, shortly after
    /// a switch, not too long ago.
    fn stands(&self, generation: u64, now: Instant) -> bool {
        let provisional = generation > 1 && self.at.duration_since(self.first) < SETTLING;
        self.generation == generation
            && !self.stale
            && !(provisional && now - self.at >= RECOUNT_EVERY)
    }
}

impl Node {
    fn replica_state(&self) -> &ReplicaState {
        &self.batches.replicas
    }

    /// Which master the connection goes to: the sentinel connection's generation, which changes
    /// with each master it follows (0 when the server is named directly, or a cluster).
    fn master_generation(&self) -> u64 {
        match &self.conn {
            Conn::Server(ServerConn::Sentinel(conn)) => conn.generation(),
            _ => 0,
        }
    }

    /// What `replicas` asks of this deployment: `None` sends no `WAIT`. `Auto` counts the
    /// replicas ([`Node::replica_count`]; a failed count is taken again [`RECOUNT_EVERY`] later
    /// at the soonest, and writes meanwhile send no `WAIT`).
    pub(crate) async fn wait_for(&self, replicas: Replicas) -> Option<WaitFor> {
        match replicas {
            Replicas::Off => None,
            Replicas::Wait { replicas, timeout } => Some(WaitFor {
                replicas,
                timeout,
                strict: true,
            }),
            Replicas::Auto { timeout } => {
                let state = self.replica_state();
                if state.unsupported.load(Ordering::Acquire) {
                    return None;
                }
                let failed_lately = state
                    .failed_at
                    .lock()
                    .is_some_and(|at| at.elapsed() < RECOUNT_EVERY);
                if failed_lately {
                    return None;
                }
                match self.replica_count().await {
                    Ok(n) if n > 0 => Some(WaitFor {
                        replicas: n,
                        timeout,
                        strict: false,
                    }),
                    Ok(_) => None,
                    Err(e) => {
                        tracing::warn!(error = %e, "could not count the connected replicas (INFO replication); this write waits for none");
                        None
                    }
                }
            }
        }
    }

    /// The replicas `Auto` waits for, counted once and again only when the count may be wrong:
    /// behind sentinels, when the connection follows a new master (and, for
    /// [`SETTLING`] after that, at most every [`RECOUNT_EVERY`], while the other replicas
    /// move over), and anywhere after a write fell short of it ([`Node::read_acks`]).
    async fn replica_count(&self) -> Result<u32> {
        let state = self.replica_state();
        let generation = self.master_generation();
        let current = |now| {
            let counted = *state.counted.lock();
            counted.filter(|c| c.stands(generation, now))
        };
        if let Some(count) = current(Instant::now()) {
            return Ok(count.replicas);
        }
        let _turn = state.counting.lock().await;
        if let Some(count) = current(Instant::now()) {
            return Ok(count.replicas);
        }
        let replicas = match self.connected_replicas().await {
            Ok(replicas) => replicas,
            Err(e) => {
                *state.failed_at.lock() = Some(Instant::now());
                return Err(e);
            }
        };
        let now = Instant::now();
        let mut counted = state.counted.lock();
        let first = match *counted {
            Some(c) if c.generation == generation => c.first,
            _ => now,
        };
        *counted = Some(Count {
            replicas,
            generation,
            first,
            at: now,
            stale: false,
        });
        Ok(replicas)
    }

    /// `connected_slaves` of `INFO replication`: of the server, or the fewest of any primary
    /// of a cluster (what every key's primary can satisfy).
    async fn connected_replicas(&self) -> Result<u32> {
        let mut cmd = redis::cmd("INFO");
        cmd.arg("replication");
        // A cluster: every primary's answer. Anything else: the one server's.
        let reply = match &self.conn {
            Conn::Cluster(conn) => {
                let mut conn = conn.clone();
                let all = RoutingInfo::MultiNode((
                    MultipleNodeRoutingInfo::AllMasters,
                    Some(ResponsePolicy::Special),
                ));
                let send = conn.route_command(cmd, all);
                bounded("info replication", "", self.timeout, send).await?
            }
            _ => self.query::<Value>(&cmd).await?,
        };
        let mut texts = Vec::new();
        collect_texts(reply, &mut texts);
        let counts: Vec<u32> = texts
            .iter()
            .filter_map(|text| {
                text.lines()
                    .find_map(|line| line.trim().strip_prefix("connected_slaves:"))
                    .and_then(|n| n.trim().parse().ok())
            })
            .collect();
        let fewest = counts
            .iter()
            .copied()
            .min()
            .ok_or_else(|| Error::Protocol {
                script: "info replication",
                reply: format!("no connected_slaves in {texts:?}"),
            })?;
        tracing::debug!(replicas = fewest, "replicas counted for Replicas::Auto");
        Ok(fewest)
    }

    /// Runs the script call `cmd` with `WAIT` behind it in one pipeline: the script's reply
    /// and what `WAIT` answered. `NOSCRIPT` loads the script and sends both again; a cluster in
    /// transition sends them again (neither the script nor `WAIT` ran then).
    pub(super) async fn eval_acked(
        &self,
        operation: &'static str,
        key: &str,
        limit: Duration,
        script: &redis::Script,
        cmd: &redis::Cmd,
        wait: WaitFor,
    ) -> Result<(Value, Acks)> {
        // A lazy client's rights check, as before every other script call.
        if self.rights_pending() {
            self.rights_checked().await?;
        }
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        pipe.add_command(cmd.clone()).add_command(wait.command());
        let pipe = &pipe;
        // The server holds the reply for up to the WAIT timeout.
        let limit = limit + wait.timeout;
        self.through_transitions(limit, |limit| async move {
            let first = self.send_acked(operation, key, limit, pipe).await?;
            let (reply, acks) = match first {
                (Err(e), _) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                    self.load_script(operation, script).await?;
                    self.send_acked(operation, key, limit, pipe).await?
                }
                other => other,
            };
            let reply = reply.map_err(|e| Error::redis(operation, key, e))?;
            Ok((reply, self.read_acks(wait, acks)))
        })
        .await
    }

    /// Sends `pipe` (a script call and `WAIT`) and answers both replies.
    async fn send_acked(
        &self,
        operation: &'static str,
        key: &str,
        limit: Duration,
        pipe: &redis::Pipeline,
    ) -> Result<(RedisResult<Value>, RedisResult<Value>)> {
        let mut conn = self.conn.clone();
        let replies: Vec<RedisResult<Value>> =
            bounded(operation, key, limit, pipe.query_async(&mut conn)).await?;
        let mut replies = replies.into_iter();
        match (replies.next(), replies.next()) {
            (Some(reply), Some(acks)) => Ok((reply, acks)),
            _ => Err(Error::Protocol {
                script: operation,
                reply: "fewer than two replies to a script call and WAIT".into(),
            }),
        }
    }

    /// What a `WAIT` reply says. In `Auto` mode an error is warned about once, and no `WAIT` is
    /// sent from then on; fewer acknowledgements than counted have the replicas counted again
    /// before the next write.
    pub(super) fn read_acks(&self, wait: WaitFor, reply: RedisResult<Value>) -> Acks {
        let reason = match reply {
            Ok(Value::Int(n)) => {
                let n = u32::try_from(n.max(0)).unwrap_or(u32::MAX);
                if !wait.strict
                    && n < wait.replicas
                    && let Some(count) = self.replica_state().counted.lock().as_mut()
                {
                    count.stale = true;
                }
                return Acks::Count(n);
            }
            Ok(other) => format!("unexpected WAIT reply {other:?}"),
            Err(e) => e.to_string(),
        };
        if wait.strict {
            return Acks::Unsupported(reason);
        }
        if !self
            .replica_state()
            .unsupported
            .swap(true, Ordering::AcqRel)
        {
            tracing::warn!(%reason, "the server refuses WAIT; Replicas::Auto carries on without replica acknowledgement");
        }
        Acks::Skipped
    }

    /// Renews a batch of leases as [`Node::renew`] does, with `WAIT` behind each script call
    /// when `wait` asks for it: per lock, renewed or not and what its call's `WAIT` answered.
    pub(crate) async fn renew_acked(
        &self,
        batch: &[Renewal<'_>],
        wait: Option<WaitFor>,
    ) -> Result<Vec<(bool, Option<Acks>)>> {
        let Some(wait) = wait else {
            let flags = self.renew(batch).await?;
            return Ok(flags.into_iter().map(|f| (f, None)).collect());
        };
        let mut order: Vec<usize> = (0..batch.len()).collect();
        order.sort_by_key(|&i| self.shard(batch[i].hash));
        let mut groups: Vec<Vec<usize>> = Vec::new();
        for i in order {
            match groups.last_mut() {
                Some(group) if self.shard(batch[group[0]].hash) == self.shard(batch[i].hash) => {
                    group.push(i);
                }
                _ => groups.push(vec![i]),
            }
        }
        let calls = groups.iter().map(|group| async move {
            let requests: Vec<&Renewal<'_>> = group.iter().map(|&i| &batch[i]).collect();
            self.renew_group_acked(&requests, wait).await
        });
        let replies = futures_util::future::join_all(calls).await;
        let mut out = vec![(false, None); batch.len()];
        for (group, reply) in groups.iter().zip(replies) {
            let (flags, acks) = reply?;
            for (&i, flag) in group.iter().zip(flags) {
                out[i] = (flag, Some(acks.clone()));
            }
        }
        Ok(out)
    }

    /// `renew.lua` for the leases of one shard, as `Node::renew_group` sends it, with `WAIT`.
    async fn renew_group_acked(
        &self,
        batch: &[&Renewal<'_>],
        wait: WaitFor,
    ) -> Result<(Vec<bool>, Acks)> {
        let bytes: usize = batch.iter().map(|r| r.hash.len() + r.field.len() + 8).sum();
        let mut cmd = evalsha(&scripts::RENEW, batch.len(), 2 * batch.len(), bytes);
        for r in batch {
            cmd.arg(r.hash);
        }
        for r in batch {
            cmd.arg(r.field).arg(r.lease_ms);
        }
        let (reply, acks) = once_more_if_dropped(|| {
            self.eval_acked("renew", "", self.timeout, &scripts::RENEW, &cmd, wait)
        })
        .await?;
        let flags: Vec<i64> =
            redis::from_redis_value(reply).map_err(|e| Error::redis("renew", "", e.into()))?;
        if flags.len() != batch.len() {
            return Err(Error::Protocol {
                script: "renew",
                reply: format!("{} flags for {} locks", flags.len(), batch.len()),
            });
        }
        Ok((flags.into_iter().map(|f| f == 1).collect(), acks))
    }
}

/// Every text in a reply (`INFO` answers a string; a cluster's, a map of node to string).
fn collect_texts(value: Value, out: &mut Vec<String>) {
    match value {
        Value::BulkString(bytes) => out.push(String::from_utf8_lossy(&bytes).into_owned()),
        Value::SimpleString(text) => out.push(text),
        Value::VerbatimString { text, .. } => out.push(text),
        Value::Array(values) | Value::Set(values) => {
            for v in values {
                collect_texts(v, out);
            }
        }
        Value::Map(pairs) => {
            for (_, v) in pairs {
                collect_texts(v, out);
            }
        }
        _ => {}
    }
}
