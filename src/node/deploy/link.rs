//! The subscriber's connection, for either deployment shape: subscribe and unsubscribe on one
//! side, a stream of [`Event`]s on the other. `pubsub.rs` keeps the channels and waiters and
//! never learns which shape it talks to.
//!
//! On one server: a RESP2 pub/sub connection (SUBSCRIBE, PUBLISH from the scripts); its stream
//! ends when the connection drops, and the subscriber connects again.
//!
//! On a cluster: a RESP3 cluster connection whose pushes come through a channel. Unlock channels
//! are shard channels (SSUBSCRIBE on the primary of the lock's slot, SPUBLISH in the scripts;
//! `shape::sharded`). redis-rs reconnects by itself and re-subscribes what its tracker holds, but
//! when a slot moves (migration, failover) the server answers with an unrequested SUNSUBSCRIBE,
//! the tracker drops the channel, and nobody subscribes it again (redis 1.8.1). Both that push and
//! a disconnection surface here as events, and the subscriber subscribes again itself.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::PubSubSink;
use redis::cluster_async::ClusterConnection;
use redis::{ErrorKind, ProtocolVersion, PushInfo, PushKind, RedisResult, ServerErrorKind, Value};
use tokio::sync::mpsc;

use crate::error::{Error, Result};
use crate::node::dial::Dial;
use crate::node::sentinel::{SentinelConn, ServerConn, into_redis};
use crate::node::shape::{Conn, Target, cluster_builder};

/// What the subscriber connection reports.
#[derive(Debug)]
pub(crate) enum Event {
    /// A message on `channel`.
    Message { channel: String, payload: Vec<u8> },
    /// The server ended the subscription to `channel` (or confirmed an UNSUBSCRIBE of ours).
    Unsubscribed { channel: String },
    /// A connection to one of the nodes dropped; messages may have been lost meanwhile.
    Disconnected,
}

/// How to open a subscriber connection: with the same settings (TLS included) as the
/// command connection.
#[derive(Clone)]
pub(crate) enum Link {
    // Boxed: a `redis::Client` is several times the size of the cluster variant.
    Server(Box<redis::Client>),
    Cluster {
        seeds: Vec<String>,
        timeout: Duration,
        dial: Box<Dial>,
    },
    /// The master the sentinels name at each connect (`sentinel.rs`); then as one server,
    /// until the command connection moves to a new master.
    Sentinel(SentinelConn),
}

impl Link {
    /// How to subscribe on `target`, whose command connection is `conn`: behind sentinels the
    /// subscriber follows that connection's master.
    pub(crate) fn new(
        target: &Target,
        conn: &Conn,
        timeout: Duration,
        dial: &Dial,
    ) -> Result<Link> {
        if let Conn::Server(ServerConn::Sentinel(conn)) = conn {
            return Ok(Link::Sentinel(conn.clone()));
        }
        Ok(match target {
            Target::Server(url) => Link::Server(Box::new(dial.server_client(url)?)),
            Target::Cluster(seeds) => Link::Cluster {
                seeds: seeds.clone(),
                timeout,
                dial: Box::new(dial.clone()),
            },
            Target::Sentinel(_) => {
                return Err(Error::InvalidArgument(
                    "a sentinel target needs its sentinel connection".into(),
                ));
            }
        })
    }

    /// Opens a fresh connection (the caller bounds the wait).
    pub(crate) async fn connect(&self) -> RedisResult<(Sink, Events)> {
        match self {
            Link::Server(client) => {
                let (sink, stream) = client.get_async_pubsub().await?.split();
                Ok((Sink::Server(sink), Events::Server(stream)))
            }
            Link::Sentinel(conn) => {
                let switched = conn.switched();
                let (_, client) = conn.resolver().resolve().await.map_err(into_redis)?;
                let (sink, stream) = client.get_async_pubsub().await?.split();
                Ok((Sink::Server(sink), Events::Sentinel(stream, switched)))
            }
            Link::Cluster {
                seeds,
                timeout,
                dial,
            } => {
                let (tx, rx) = mpsc::unbounded_channel();
                let client = cluster_builder(seeds, *timeout, dial)
                    .map_err(|e| redis::RedisError::from((ErrorKind::Io, "seeds", e.to_string())))?
                    .use_protocol(ProtocolVersion::RESP3)
                    .push_sender(tx)
                    .build()?;
                let conn = client.get_async_connection().await?;
                let sink = Sink::Cluster {
                    conn,
                    sharded: Arc::new(AtomicBool::new(true)),
                };
                Ok((sink, Events::Cluster(rx)))
            }
        }
    }
}

/// Sends SUBSCRIBE and UNSUBSCRIBE; clones share the connection.
#[derive(Clone)]
pub(crate) enum Sink {
    Server(PubSubSink),
    /// `sharded`: SSUBSCRIBE, until a server refuses it as unknown (before Redis 7); then plain
    /// SUBSCRIBE, which a cluster broadcasts to every node.
    Cluster {
        conn: ClusterConnection,
        sharded: Arc<AtomicBool>,
    },
}

impl Sink {
    pub(crate) async fn subscribe(&mut self, channel: &str) -> RedisResult<()> {
        match self {
            Sink::Server(sink) => sink.subscribe(channel).await,
            Sink::Cluster { conn, sharded } => {
                if sharded.load(Ordering::Acquire) {
                    match conn.ssubscribe(channel).await {
                        Err(e) if unknown_command(&e) => sharded.store(false, Ordering::Release),
                        other => return other,
                    }
                }
                conn.subscribe(channel).await
            }
        }
    }

    pub(crate) async fn unsubscribe(&mut self, channel: &str) -> RedisResult<()> {
        match self {
            Sink::Server(sink) => sink.unsubscribe(channel).await,
            Sink::Cluster { conn, sharded } if sharded.load(Ordering::Acquire) => {
                conn.sunsubscribe(channel).await
            }
            Sink::Cluster { conn, .. } => conn.unsubscribe(channel).await,
        }
    }
}

impl Sink {
    /// Answers once a live primary serves the slot of `channel`: after a primary died, the
    /// replica that takes its slots is found by redis-rs's slot refresh, and waiters woken
    /// before that would only send their attempts into the outage. The probe is a read of a
    /// key in that slot (the channel's name, which is no key of ours): a node that does not own
    /// the slot answers MOVED, where a PING would be answered by any node redis-rs falls back
    /// to when the slot's own connection is gone.
    pub(crate) async fn served(&mut self, channel: &str) -> RedisResult<()> {
        match self {
            Sink::Server(_) => Ok(()),
            Sink::Cluster { conn, .. } => {
                let mut probe = redis::cmd("EXISTS");
                probe.arg(channel);
                let _: i64 = probe.query_async(conn).await?;
                Ok(())
            }
        }
    }
}

fn unknown_command(e: &redis::RedisError) -> bool {
    e.kind() == ErrorKind::Server(ServerErrorKind::ResponseError)
        && e.to_string().contains("unknown command")
}

/// The incoming side of a subscriber connection.
pub(crate) enum Events {
    Server(redis::aio::PubSubStream),
    /// As one server's, ended when the command connection moved to a new master.
    Sentinel(redis::aio::PubSubStream, tokio::sync::watch::Receiver<u64>),
    Cluster(mpsc::UnboundedReceiver<PushInfo>),
}

impl Events {
    /// The next event; `None` when the connection is gone for good (one server: connect again).
    pub(crate) async fn next(&mut self) -> Option<Event> {
        match self {
            Events::Server(stream) => Some(server_event(stream.next().await?)),
            Events::Sentinel(stream, switched) => tokio::select! {
                msg = stream.next() => Some(server_event(msg?)),
                // A swap (or the holder gone): connect again, to the master named now.
                _ = switched.changed() => None,
            },
            Events::Cluster(pushes) => loop {
                let push = pushes.recv().await?;
                if let Some(event) = cluster_event(push) {
                    return Some(event);
                }
            },
        }
    }
}

fn server_event(msg: redis::Msg) -> Event {
    Event::Message {
        channel: msg.get_channel_name().to_owned(),
        payload: msg.get_payload_bytes().to_vec(),
    }
}

/// The event a RESP3 push from a cluster node means, if it means one.
fn cluster_event(push: PushInfo) -> Option<Event> {
    let text = |value: Option<&Value>| match value {
        Some(Value::BulkString(bytes)) => Some(String::from_utf8_lossy(bytes).into_owned()),
        _ => None,
    };
    match push.kind {
        PushKind::Message | PushKind::SMessage => {
            let channel = text(push.data.first())?;
            let payload = match push.data.get(1) {
                Some(Value::BulkString(bytes)) => bytes.clone(),
                _ => Vec::new(),
            };
            Some(Event::Message { channel, payload })
        }
        PushKind::SUnsubscribe | PushKind::Unsubscribe => Some(Event::Unsubscribed {
            channel: text(push.data.first())?,
        }),
        PushKind::Disconnection => Some(Event::Disconnected),
        _ => None,
    }
}
