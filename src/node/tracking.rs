//! The connections that hear from the server when a held key changes (`CLIENT TRACKING`, the
//! server's client-side caching protocol). The watchdog's loss notice (`watchdog/notice.rs`)
//! keeps one set per client and decides what to read; this file only knows how to reach the
//! servers, and `tracking/check.rs` how a read arms tracking.
//!
//! Each is a RESP3 connection of its own, beside the command connection, with tracking on in
//! the default mode: the server remembers every key this connection read and sends one
//! `invalidate` push when the key is next written, deleted, expired, evicted or flushed
//! (`FLUSHDB`/`FLUSHALL`: one push naming no key), then forgets it until it is read again. It
//! never writes, so every write of the key by anyone, this client's own renewals included,
//! reaches it: `NOLOOP` would only hide this connection's own writes. A read here arms the key;
//! the reads are the ownership checks themselves (`HEXISTS hash owner`), so one reply both
//! says whether the hold is still there and arms the next notice.
//!
//! Where the connections go:
//! - one server: one connection;
//! - behind Sentinel: one, to the master the command connection follows; a switch is reported
//!   like a disconnection, and every check also asks `ROLE` (a demoted master empties itself);
//! - a Redis Cluster: one per primary, from the slot map (`CLUSTER SLOTS`) at each connect,
//!   each read sent to the primary of its key's slot. A read a node no longer serves is answered
//!   `MOVED` or `ASK` (a slot moved, a primary demoted by a failover): the read says nothing, and
//!   the connections are made again from a fresh map, every hold checked anew. A slot moved
//!   away deletes its keys from the old primary, which pushes their invalidation: the move is
//!   heard as soon as it touches a held key.

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ErrorKind, ProtocolVersion, PushInfo, RedisError};
use tokio::sync::{mpsc, watch};

use super::Node;
use super::link::Link;
use super::sentinel::SentinelConn;

mod check;
mod cluster;

pub(crate) use check::Presence;
use cluster::Primaries;
pub(crate) use cluster::connect_cluster;

/// How to open the tracking connections of a node.
#[derive(Clone)]
pub(crate) enum Tracking {
    Server(Box<redis::Client>),
    Sentinel(SentinelConn),
    /// A cluster: the node (its command connection asks for the slot map) and a seed's
    /// settings (TLS, user), which every primary's connection takes with its own address.
    Cluster {
        node: Box<Node>,
        seed: Box<redis::Client>,
    },
}

/// Why the tracking connection could not be opened or used.
#[derive(Debug)]
pub(crate) enum Unavailable {
    /// The server (or proxy, or the user's rights) refuses RESP3 or `CLIENT TRACKING`: asking
    /// again will not help.
    Refused(String),
    /// The server could not be reached, or the connection dropped: try again later.
    Down(String),
    /// A cluster node answered `MOVED`: the slot map the connections were opened from is
    /// stale; they are all opened again from a fresh one.
    Moved(String),
}

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unavailable::Refused(why) => write!(f, "refused: {why}"),
            Unavailable::Down(why) => write!(f, "unreachable: {why}"),
            Unavailable::Moved(why) => write!(f, "the slot map moved: {why}"),
        }
    }
}

/// Refused for good only when asking again cannot help: the user lacks the right (`NOPERM`,
/// a bad password or none), the server (or a proxy) does not know RESP3 or `CLIENT TRACKING`
/// (`HELLO` unknown before Redis 6, `NOPROTO`, `ERR unknown command` or subcommand), or the
/// client's own settings are wrong. Anything else (a server restarting or loading, a cluster
/// between two maps, a full server, a dropped connection, another `ERR`) is tried again later.
fn classify(e: RedisError) -> Unavailable {
    let text = e.to_string();
    let refused = matches!(
        e.kind(),
        ErrorKind::AuthenticationFailed
            | ErrorKind::RESP3NotSupported
            | ErrorKind::InvalidClientConfig
    ) || matches!(
        e.code(),
        Some("NOPERM" | "NOPROTO" | "WRONGPASS" | "NOAUTH")
    ) || (e.code() == Some("ERR") && text.to_ascii_lowercase().contains("unknown"));
    if refused {
        Unavailable::Refused(text)
    } else {
        Unavailable::Down(text)
    }
}

impl Node {
    /// How to open this node's tracking connections.
    pub(crate) fn tracking(&self) -> Option<Tracking> {
        match &self.link {
            Link::Server(client) => Some(Tracking::Server(client.clone())),
            Link::Sentinel(conn) => Some(Tracking::Sentinel(conn.clone())),
            Link::Cluster { seeds, dial, .. } => {
                let seed = seeds.first().map(|seed| dial.server_client(seed))?;
                match seed {
                    Ok(seed) => Some(Tracking::Cluster {
                        node: Box::new(self.clone()),
                        seed: Box::new(seed),
                    }),
                    Err(e) => {
                        tracing::debug!(error = %e, "no loss notice: the seed's settings do not make a client");
                        None
                    }
                }
            }
        }
    }
}

/// What tells that a tracking connection is on the wrong server, though it is still open.
pub(crate) enum Moves {
    /// One server: nothing moves.
    Never,
    /// Behind Sentinel: changes when the command connection moved to another master.
    Sentinel(watch::Receiver<u64>),
    /// A cluster: the fingerprint of the slot map last read by anyone (the watchdog reads it
    /// at each tick), and that of the map the connections were opened from. A primary frozen
    /// or cut off without closing its connections, then replaced, is seen here.
    Cluster(watch::Receiver<u64>, u64),
}

impl Moves {
    /// Resolves when the connections must be opened again (never, for one server).
    pub(crate) async fn next(&mut self) {
        match self {
            Moves::Never => std::future::pending().await,
            Moves::Sentinel(switched) => {
                if switched.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
            Moves::Cluster(map, opened_from) => loop {
                if *map.borrow_and_update() != *opened_from {
                    return;
                }
                if map.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            },
        }
    }
}

/// Open tracking connections: one, or one per primary of a cluster.
pub(crate) struct Tracked {
    /// `None`: a cluster primary that could not be reached; its holds' checks say nothing
    /// until it is opened again ([`Primaries`]) or the map moves.
    conns: Vec<Option<MultiplexedConnection>>,
    /// On a cluster: how to open each primary's connection again, and the node whose slot
    /// map a failed attempt reads anew (a map that moved reopens everything, see [`Moves`]).
    primaries: Option<Primaries>,
    /// On a cluster, which connection serves which slots (inclusive ranges); empty elsewhere
    /// (every read goes to the one connection).
    routes: Vec<((u16, u16), usize)>,
    /// What tells that the connections are on the wrong servers; taken by the notice.
    pub moves: Moves,
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
    /// Opens the connections, with their pushes (invalidations, and redis-rs's
    /// `Disconnection` when one drops) sent to `pushes`, and turns tracking on. Bounded by
    /// `timeout`; a cluster's by its parts (the slot map's read, and each primary's open, all
    /// at once): one outer bound as long as a part would fail it whole when one primary hangs,
    /// and leave every other primary unwatched.
    pub(crate) async fn connect(
        &self,
        timeout: Duration,
        pushes: mpsc::UnboundedSender<PushInfo>,
    ) -> Result<Tracked, Unavailable> {
        match self {
            Tracking::Server(client) => {
                within(timeout, connect_server(client, timeout, pushes)).await
            }
            Tracking::Sentinel(conn) => {
                within(timeout, connect_sentinel(conn, timeout, pushes)).await
            }
            Tracking::Cluster { node, seed } => connect_cluster(node, seed, timeout, pushes).await,
        }
    }
}

/// `open`, or `Down` past `timeout`.
async fn within(
    timeout: Duration,
    open: impl std::future::Future<Output = Result<Tracked, Unavailable>>,
) -> Result<Tracked, Unavailable> {
    match tokio::time::timeout(timeout, open).await {
        Ok(result) => result,
        Err(_) => Err(Unavailable::Down(format!("no answer within {timeout:?}"))),
    }
}

/// One server: one connection.
async fn connect_server(
    client: &redis::Client,
    timeout: Duration,
    pushes: mpsc::UnboundedSender<PushInfo>,
) -> Result<Tracked, Unavailable> {
    let conn = open_tracked(&resp3(client)?, timeout, pushes).await?;
    Ok(Tracked::new(
        vec![Some(conn)],
        Vec::new(),
        Moves::Never,
        timeout,
    ))
}

/// Behind Sentinel: one connection, to the master the command connection follows (a sentinel
/// asked now may still name the old one for a while after a failover), or to the one the
/// sentinels name when the command connection has none yet.
async fn connect_sentinel(
    conn: &SentinelConn,
    timeout: Duration,
    pushes: mpsc::UnboundedSender<PushInfo>,
) -> Result<Tracked, Unavailable> {
    let switched = conn.switched();
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
    let conn = open_tracked(&resp3(&client)?, timeout, pushes).await?;
    Ok(Tracked::new(
        vec![Some(conn)],
        Vec::new(),
        Moves::Sentinel(switched),
        timeout,
    ))
}

/// Opens one tracking connection to `client`'s server, pushing to `pushes`.
async fn open_tracked(
    client: &redis::Client,
    timeout: Duration,
    pushes: mpsc::UnboundedSender<PushInfo>,
) -> Result<MultiplexedConnection, Unavailable> {
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
    Ok(conn)
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

impl Tracked {
    fn new(
        conns: Vec<Option<MultiplexedConnection>>,
        routes: Vec<((u16, u16), usize)>,
        moves: Moves,
        timeout: Duration,
    ) -> Tracked {
        Tracked {
            conns,
            primaries: None,
            routes,
            behind_sentinel: matches!(moves, Moves::Sentinel(_)),
            moves,
            timeout,
        }
    }
}
