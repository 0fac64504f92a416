//! Listening for `+switch-master` on every sentinel, so that a failover is followed when the
//! sentinels announce it, not only when a command fails. That matters for a planned failover
//! (`SENTINEL FAILOVER`, or a master that was only cut off): the old master keeps answering as
//! a master until the sentinels reconfigure it, seconds later, and renewals sent there would
//! let the lock's key expire on the new master meanwhile.
//!
//! One task per sentinel, holding the connection holder weakly and owned by it: each ends when
//! the client's last handle goes away.

use crate::backoff::Backoff;
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::StreamExt;

use super::{Holder, Resolver, SentinelConn, refused_credentials};

/// `<master-name> <old ip> <old port> <new ip> <new port>`: every sentinel, once it knows.
const SWITCH: &str = "+switch-master";
/// `slave <ip>:<port> <ip> <port> @ <master-name> <ip> <port>`: the sentinel that leads a
/// failover, the moment the replica answers as a master.
const PROMOTED: &str = "+promoted-slave";

/// `slave ...` as for [`PROMOTED`]: the sentinel leading a failover chose the replica, and is
/// about to make it a master. From then on, writes to the old master would be lost.
const SELECTED: &str = "+selected-slave";
/// `master <name> <ip> <port>`: the failover is over, or given up.
const ENDED: [&str; 5] = [
    "+failover-end",
    "+failover-end-for-timeout",
    "-failover-abort-no-good-slave",
    "-failover-abort-slave-timeout",
    "-failover-abort-not-elected",
];
/// The longest commands are held back between [`SELECTED`] and [`PROMOTED`] (normally about a
/// tenth of a second apart).
const PAUSE_LIMIT: Duration = Duration::from_secs(2);

/// How often an idle listener checks that its client still exists.
const IDLE_CHECK: Duration = Duration::from_secs(1);

/// Starts a listener on every sentinel of `holder`, owned by it.
pub(super) fn spawn(holder: &Arc<Holder>) {
    for i in 0..holder.resolver.spec.sentinels.len() {
        holder.listeners.spawn(listen(Arc::downgrade(holder), i));
    }
}

/// Listens on sentinel `i` while the holder exists, connecting again with backoff.
async fn listen(holder: Weak<Holder>, i: usize) {
    let mut backoff = Backoff::patient();
    loop {
        let Some(resolver) = holder.upgrade().map(|h| h.resolver.clone()) else {
            return;
        };
        match announcements(&resolver, i).await {
            Ok(mut stream) => {
                backoff.reset();
                loop {
                    let next = tokio::time::timeout(IDLE_CHECK, stream.next()).await;
                    let Some(strong) = holder.upgrade() else {
                        return;
                    };
                    match next {
                        Err(_) => {}
                        Ok(None) => break,
                        Ok(Some(msg)) => {
                            let payload: String = msg.get_payload().unwrap_or_default();
                            let master = resolver.spec.master.as_str();
                            match msg.get_channel_name() {
                                SWITCH if payload.split(' ').next() == Some(master) => {
                                    follow(SentinelConn(strong), &payload).await;
                                }
                                PROMOTED => {
                                    if let Some(addr) = promoted_addr(&payload, master) {
                                        promoted(SentinelConn(strong), &addr).await;
                                    }
                                }
                                SELECTED if promoted_addr(&payload, master).is_some() => {
                                    tracing::debug!(%payload, "a sentinel is promoting a replica");
                                    SentinelConn(strong).pause(PAUSE_LIMIT);
                                }
                                _ if about_master(&payload, master) => {
                                    // The failover ended or was given up.
                                    SentinelConn(strong).resume();
                                }
                                _ => {}
                            }
                        }
                    }
                }
            }
            Err(e) => tracing::debug!(sentinel = i, error = %e, "cannot listen to a sentinel"),
        }
        backoff.sleep().await;
    }
}

/// Swaps the connection after an announced failover (a no-op when a command got there first).
async fn follow(conn: SentinelConn, announcement: &str) {
    tracing::debug!(announcement, "sentinel announced a new master");
    let seen = conn.generation();
    let limit = conn.0.resolver.timeout;
    match tokio::time::timeout(limit, conn.refresh(seen)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::debug!(error = %e, "could not follow the announced master yet"),
        Err(_) => tracing::debug!("following the announced master timed out"),
    }
}

/// The promoted replica's `ip:port` from a `+promoted-slave` payload about `master`.
fn promoted_addr(payload: &str, master: &str) -> Option<String> {
    let words: Vec<&str> = payload.split(' ').collect();
    match words.as_slice() {
        [_, _, ip, port, "@", name, ..] if *name == master => Some(format!("{ip}:{port}")),
        _ => None,
    }
}

/// Whether an `ENDED` payload (`master <name> <ip> <port>`) is about `master`.
fn about_master(payload: &str, master: &str) -> bool {
    let mut words = payload.split(' ');
    words.next() == Some("master") && words.next() == Some(master)
}

/// Moves to the replica a sentinel announced it promoted.
async fn promoted(conn: SentinelConn, addr: &str) {
    tracing::debug!(addr, "sentinel promoted a replica");
    let limit = conn.0.resolver.timeout;
    match tokio::time::timeout(limit, conn.promoted(addr)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::debug!(error = %e, "could not move to the promoted replica"),
        Err(_) => tracing::debug!("moving to the promoted replica timed out"),
    }
}

/// A subscription to `+switch-master` and `+promoted-slave` on sentinel `i` (with the master's credentials, or none
/// if it refuses them).
async fn announcements(
    resolver: &Resolver,
    i: usize,
) -> redis::RedisResult<redis::aio::PubSubStream> {
    match subscribe(resolver, i, true).await {
        Err(e) if !resolver.spec.credentials.is_empty() && refused_credentials(&e) => {
            subscribe(resolver, i, false).await
        }
        other => other,
    }
}

async fn subscribe(
    resolver: &Resolver,
    i: usize,
    with_credentials: bool,
) -> redis::RedisResult<redis::aio::PubSubStream> {
    let urls = resolver.spec.sentinel_urls(with_credentials);
    let url = urls.get(i).map_or("", String::as_str);
    let client = redis::Client::open(url)?;
    let subscribe = async {
        let mut pubsub = client.get_async_pubsub().await?;
        pubsub.subscribe(&[SWITCH, PROMOTED, SELECTED]).await?;
        pubsub.subscribe(&ENDED).await?;
        Ok(pubsub.into_on_message())
    };
    match tokio::time::timeout(resolver.timeout, subscribe).await {
        Ok(subscribed) => subscribed,
        Err(_) => Err(redis::RedisError::from((
            redis::ErrorKind::Io,
            "sentinel subscribe timed out",
        ))),
    }
}
