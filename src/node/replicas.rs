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
use tokio::sync::OnceCell;

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

/// What a node learnt about its replicas: how many `Auto` found, whether `WAIT` is refused.
#[derive(Debug, Default)]
pub(crate) struct ReplicaState {
    detected: OnceCell<u32>,
    unsupported: AtomicBool,
}

impl Node {
    fn replica_state(&self) -> &ReplicaState {
        &self.batches.replicas
    }

    /// What `replicas` asks of this deployment: `None` sends no `WAIT`. `Auto` asks the server
    /// once (a failed question is asked again next time, and sends no `WAIT` meanwhile).
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
                let detected = state
                    .detected
                    .get_or_try_init(|| self.connected_replicas())
                    .await;
                match detected {
                    Ok(&n) if n > 0 => Some(WaitFor {
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
    /// sent from then on.
    pub(super) fn read_acks(&self, wait: WaitFor, reply: RedisResult<Value>) -> Acks {
        let reason = match reply {
            Ok(Value::Int(n)) => return Acks::Count(u32::try_from(n.max(0)).unwrap_or(u32::MAX)),
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
