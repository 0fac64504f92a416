//! Replica acknowledgement: how many replicas a write waits for, and what `WAIT` answered. The
//! calls themselves (`WAIT n timeout` in one pipeline right after a lock script, on the same
//! connection, so that it counts the replicas that have that script's write) are in
//! `calls/acked_calls.rs`. Nothing here runs when no lock asks for acknowledgement
//! ([`Replicas::Off`], the default).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::future::BoxFuture;
use redis::cluster_routing::{MultipleNodeRoutingInfo, ResponsePolicy, RoutingInfo};
use redis::{RedisResult, Value};
use tokio::time::Instant;

use crate::config::Replicas;
use crate::error::{Error, Result};
use crate::node::sentinel::ServerConn;
use crate::node::shape::Conn;
use crate::node::{Node, bounded};

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

    pub(in crate::node) fn command(self) -> redis::Cmd {
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
        &self.replicas
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
                let counted = match self.counted_replicas() {
                    Some(replicas) => Ok(replicas),
                    None => {
                        // Boxed: counting is rare (once, then after a failover or a short
                        // write), and its future (3 KB, an `INFO` round trip) would otherwise
                        // sit inline in every acquisition's future, which is copied as it is
                        // set up. Erased, so the compiler's `Send` proofs of the futures around
                        // it stay shallow.
                        let count: BoxFuture<'_, _> = Box::pin(self.replica_count());
                        count.await
                    }
                };
                match counted {
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
    /// Its caller found no count standing ([`Node::counted_replicas`]).
    async fn replica_count(&self) -> Result<u32> {
        let state = self.replica_state();
        let _turn = state.counting.lock().await;
        if let Some(replicas) = self.counted_replicas() {
            return Ok(replicas);
        }
        // Read once the turn is ours: the count is stored for the master it is taken from.
        let generation = self.master_generation();
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

    /// The replicas last counted, while that count stands (see [`Node::replica_count`]).
    fn counted_replicas(&self) -> Option<u32> {
        let generation = self.master_generation();
        let counted = *self.replica_state().counted.lock();
        counted
            .filter(|c| c.stands(generation, Instant::now()))
            .map(|c| c.replicas)
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

    /// What a `WAIT` reply says. In `Auto` mode an error is warned about once, and no `WAIT` is
    /// sent from then on; fewer acknowledgements than counted have the replicas counted again
    /// before the next write.
    pub(in crate::node) fn read_acks(&self, wait: WaitFor, reply: RedisResult<Value>) -> Acks {
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
