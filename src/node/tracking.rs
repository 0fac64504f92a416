//! The connection that hears from the server when a held key changes (`CLIENT TRACKING`, the
//! server's client-side caching protocol). The watchdog's loss notice (`watchdog/notice.rs`)
//! keeps one per client and decides what to read; this file only knows how to reach the
//! server and how a read arms tracking.
//!
//! It is a RESP3 connection of its own, beside the command connection, with tracking on in the
//! default mode: the server remembers every key this connection read and sends one
//! `invalidate` push when the key is next written, deleted, expired, evicted or flushed
//! (`FLUSHDB`/`FLUSHALL`: one push naming no key), then forgets it until it is read again. It
//! never writes, so every write of the key by anyone, this client's own renewals included,
//! reaches it: `NOLOOP` would only hide this connection's own writes. A read here arms the key;
//! the reads are the ownership checks themselves (`HEXISTS hash owner`), so one reply both
//! says whether the hold is still there and arms the next notice.
//!
//! One server and a master behind Sentinel only: a cluster has no such connection yet (its
//! holds are known lost at their next renewal, as before). Behind Sentinel the connection
//! follows the command connection's master, and a switch is reported like a disconnection.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ErrorKind, ProtocolVersion, PushInfo, RedisError};
use tokio::sync::{mpsc, watch};

use super::Node;
use super::link::Link;
use super::sentinel::SentinelConn;

/// Keys read per pipeline: as the watchdog's renewal batches, a call that does not stall the
/// server for long.
const CHECKS_PER_CALL: usize = 1000;

/// How to open the tracking connection of a node.
#[derive(Clone)]
pub(crate) enum Tracking {
    Server(Box<redis::Client>),
    Sentinel(SentinelConn),
}

/// Why the tracking connection could not be opened or used.
#[derive(Debug)]
pub(crate) enum Unavailable {
    /// The server (or proxy, or the user's rights) refuses RESP3 or `CLIENT TRACKING`: asking
    /// again will not help.
    Refused(String),
    /// The server could not be reached, or the connection dropped: try again later.
    Down(String),
}

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unavailable::Refused(why) => write!(f, "refused: {why}"),
            Unavailable::Down(why) => write!(f, "unreachable: {why}"),
        }
    }
}

fn classify(e: RedisError) -> Unavailable {
    let transient = e.is_io_error()
        || e.is_connection_refusal()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.kind() == ErrorKind::Io
        // Restarting, loading its data, or a replica promoted a moment ago.
        || matches!(e.code(), Some("LOADING" | "BUSY" | "MASTERDOWN" | "READONLY"));
    if transient {
        Unavailable::Down(e.to_string())
    } else {
        Unavailable::Refused(e.to_string())
    }
}

impl Node {
    /// How to open this node's tracking connection; `None` on a cluster (not covered yet).
    pub(crate) fn tracking(&self) -> Option<Tracking> {
        match &self.link {
            Link::Server(client) => Some(Tracking::Server(client.clone())),
            Link::Sentinel(conn) => Some(Tracking::Sentinel(conn.clone())),
            Link::Cluster { .. } => None,
        }
    }
}

/// An open tracking connection.
pub(crate) struct Tracked {
    conn: MultiplexedConnection,
    /// Behind Sentinel: changes when the command connection moved to another master; this
    /// connection is then on the wrong server and must be opened again.
    pub switched: Option<watch::Receiver<u64>>,
    /// Behind Sentinel: every check also asks `ROLE`.
    behind_sentinel: bool,
    timeout: Duration,
}

/// `ROLE`'s first word, from its reply.
fn role_of(reply: &redis::Value) -> Option<&[u8]> {
    match reply {
        redis::Value::Array(parts) => match parts.first() {
            Some(redis::Value::BulkString(role)) => Some(role),
            Some(redis::Value::SimpleString(role)) => Some(role.as_bytes()),
            _ => None,
        },
        _ => None,
    }
}

impl Tracking {
    /// Opens the connection, with its pushes (invalidations, and redis-rs's `Disconnection`
    /// when it drops) sent to `pushes`, and turns tracking on. Bounded by `timeout`.
    pub(crate) async fn connect(
        &self,
        timeout: Duration,
        pushes: mpsc::UnboundedSender<PushInfo>,
    ) -> Result<Tracked, Unavailable> {
        let open = async {
            let (client, switched) = match self {
                Tracking::Server(client) => (resp3(client)?, None),
                Tracking::Sentinel(conn) => {
                    let switched = conn.switched();
                    // The master the command connection follows (a sentinel asked now may
                    // still name the old one for a while after a failover), or the one the
                    // sentinels name when the command connection has none yet.
                    let client = match conn.master_url() {
                        Some(url) => redis::Client::open(url).map_err(classify)?,
                        None => {
                            let (_, client) = conn
                                .resolver()
                                .resolve()
                                .await
                                .map_err(|e| Unavailable::Down(e.to_string()))?;
                            client
                        }
                    };
                    tracing::debug!(master = %client.get_connection_info().addr(), "loss notice follows the master");
                    (resp3(&client)?, Some(switched))
                }
            };
            let config = AsyncConnectionConfig::new()
                .set_connection_timeout(Some(timeout))
                .set_response_timeout(Some(timeout))
                .set_push_sender(pushes);
            let mut conn = client
                .get_multiplexed_async_connection_with_config(&config)
                .await
                .map_err(classify)?;
            let mut on = redis::cmd("CLIENT");
            on.arg("TRACKING").arg("ON");
            let () = on.query_async(&mut conn).await.map_err(classify)?;
            Ok(Tracked {
                conn,
                behind_sentinel: switched.is_some(),
                switched,
                timeout,
            })
        };
        match tokio::time::timeout(timeout, open).await {
            Ok(result) => result,
            Err(_) => Err(Unavailable::Down(format!("no answer within {timeout:?}"))),
        }
    }
}

/// The same client, speaking RESP3 (pushes need it).
fn resp3(client: &redis::Client) -> Result<redis::Client, Unavailable> {
    let info = client.get_connection_info().clone();
    let settings = info
        .redis_settings()
        .clone()
        .set_protocol(ProtocolVersion::RESP3);
    redis::Client::open(info.set_redis_settings(settings)).map_err(classify)
}

/// Where the server keeps one hold: a field of a hash, and the value that field must have when
/// the field alone does not name the holder (a read-write lock's writer, `w`).
#[derive(Debug, Clone)]
pub(crate) struct Presence {
    pub key: Arc<str>,
    pub field: Arc<str>,
    pub value: Option<Arc<str>>,
}

impl Tracked {
    /// Whether each hold is still on the server (`HEXISTS key field`, or `HGET key field`
    /// compared with its value), in order. Each read arms tracking of its key: any later
    /// change of it is pushed.
    pub(crate) async fn check(&mut self, holds: &[&Presence]) -> Result<Vec<bool>, Unavailable> {
        let mut out = Vec::with_capacity(holds.len());
        for chunk in holds.chunks(CHECKS_PER_CALL) {
            let mut pipe = redis::pipe();
            // A read refused (WRONGTYPE) answers for its hold only, not for the batch.
            pipe.ignore_errors();
            for hold in chunk {
                let name = if hold.value.is_some() {
                    "HGET"
                } else {
                    "HEXISTS"
                };
                pipe.cmd(name).arg(&*hold.key).arg(&*hold.field);
            }
            // Behind Sentinel, a master demoted to a replica in a failover empties itself for a
            // full sync: reads there would report holds gone that the new master has. The
            // reads count only if the server was still a master after them.
            if self.behind_sentinel {
                pipe.cmd("ROLE");
            }
            let read = pipe.query_async::<Vec<redis::Value>>(&mut self.conn);
            let mut replies = match tokio::time::timeout(self.timeout, read).await {
                Ok(replies) => replies.map_err(classify)?,
                Err(_) => {
                    return Err(Unavailable::Down(format!(
                        "no answer within {:?}",
                        self.timeout
                    )));
                }
            };
            if self.behind_sentinel {
                let role = replies.pop();
                if role.as_ref().and_then(role_of) != Some(b"master".as_slice()) {
                    return Err(Unavailable::Down(format!(
                        "the server is no longer the master: ROLE answered {role:?}"
                    )));
                }
            }
            if replies.len() != chunk.len() {
                return Err(Unavailable::Down(format!(
                    "{} replies to {} reads",
                    replies.len(),
                    chunk.len()
                )));
            }
            for (hold, reply) in chunk.iter().zip(replies) {
                out.push(match (&hold.value, reply) {
                    (None, redis::Value::Int(n)) => n == 1,
                    (None, redis::Value::Boolean(held)) => held,
                    (Some(value), redis::Value::BulkString(bytes)) => {
                        bytes.as_slice() == value.as_bytes()
                    }
                    (Some(_), redis::Value::Nil) => false,
                    // Somebody wrote another type at the key: no lock's hash any more.
                    (_, redis::Value::ServerError(e)) if e.code() == "WRONGTYPE" => false,
                    // A refused read (LOADING after a restart, BUSY behind a slow script,
                    // NOPERM) armed nothing: the server does not track a key it did not read.
                    // The connection is made again and every hold checked anew.
                    (_, redis::Value::ServerError(e)) => {
                        return Err(Unavailable::Down(format!(
                            "a check of {} was refused: {e:?}",
                            hold.key
                        )));
                    }
                    // Anything else: not known gone (the renewal will tell).
                    (_, other) => {
                        tracing::debug!(key = %hold.key, reply = ?other, "unexpected check reply");
                        true
                    }
                });
            }
        }
        Ok(out)
    }
}
