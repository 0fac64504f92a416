//! Slots and shard channels of a test cluster: which slot a key hashes to, and who listens on
//! a shard channel (`PUBSUB SHARDNUMSUB`) on one node or over the whole cluster; clients of a
//! cluster, waits for their shard subscriptions, and a lock held with a waiter on it.

use std::time::Duration;

use redlease::Client;

use super::cluster::Cluster;
use super::locks::{key_of, unlock_channel};
use super::server::Server;

/// The cluster slot of `key` (CRC16/XMODEM of its hash tag, mod 16384).
pub fn key_slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let tagged = bytes
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &bytes[open + 1..];
            let close = rest.iter().position(|&b| b == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(bytes);
    let mut crc: u16 = 0;
    for &byte in tagged {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

/// Subscribers of the shard channel `channel` on `server` (`PUBSUB SHARDNUMSUB`).
pub fn shard_numsub(server: &Server, channel: &str) -> u64 {
    super::probe::listeners(server, ("SHARDCHANNELS", "SHARDNUMSUB"), channel)
}

impl Cluster {
    /// Subscribers of the shard channel `channel` over every node that answers: a shard
    /// channel's subscribers may sit on the slot's primary or on one of its replicas (a
    /// SPUBLISH reaches both).
    pub fn shard_subscribers(&self, channel: &str) -> u64 {
        self.nodes
            .iter()
            .filter_map(|node| {
                let client = redis::Client::open(node.url()).ok()?;
                let mut conn = client
                    .get_connection_with_timeout(Duration::from_millis(300))
                    .ok()?;
                super::probe::listeners_on(&mut conn, ("SHARDCHANNELS", "SHARDNUMSUB"), channel)
            })
            .sum()
    }
}

pub async fn cluster_client(cluster: &Cluster) -> Client {
    Client::builder_cluster(cluster.seeds())
        .build()
        .await
        .expect("connecting to the cluster")
}

pub async fn cluster_client_with_lease(cluster: &Cluster, lease: Duration) -> Client {
    Client::builder_cluster(cluster.seeds())
        .watchdog_lease(lease)
        .build()
        .await
        .expect("connecting to the cluster")
}

/// Waits (at most 5 s) until `n` connections subscribe to the shard channel of lock `key` on
/// the primary that serves it now.
pub async fn until_shard_subscribed(cluster: &Cluster, key: &str, n: u64) -> bool {
    let channel = unlock_channel(key);
    super::eventually_async(Duration::from_secs(5), || async {
        shard_numsub(cluster.server_of(key), &channel) == n
    })
    .await
}

/// Waits (at most 10 s: a loaded machine re-forms slowly) until at least `n` connections subscribe to the shard channel of lock
/// `key` over the whole cluster: after a failover the client may subscribe again on the slot's
/// former primary, now a replica of the shard, which SPUBLISH reaches too (and Valkey may count
/// one client there and on the new primary).
pub async fn until_shard_subscribed_anywhere(cluster: &Cluster, key: &str, n: u64) -> bool {
    let channel = unlock_channel(key);
    super::eventually_async(Duration::from_secs(10), || async {
        tokio::task::block_in_place(|| cluster.shard_subscribers(&channel)) >= n
    })
    .await
}

/// A held lock, a waiter of another client on it, and the holder's guard.
pub struct Contended {
    pub name: String,
    pub key: String,
    pub held: redlease::LockGuard,
    pub waiter: tokio::task::JoinHandle<std::time::Instant>,
}

pub async fn contend(cluster: &Cluster, holder: &Client, waiter: &Client, name: &str) -> Contended {
    let key = key_of(name);
    let held = holder.lock(name).unwrap().lock().await.unwrap();
    let waiter = super::spawn_waiter(waiter.lock(name).unwrap());
    assert!(
        until_shard_subscribed(cluster, &key, 1).await,
        "waiter subscribed"
    );
    Contended {
        name: name.to_owned(),
        key,
        held,
        waiter,
    }
}

/// After the holder's unlock, the waiter gets the lock within `limit`, much sooner than the
/// holder's lease (the unlock message reached it on the slot's new primary).
pub async fn unlock_wakes(c: Contended, limit: Duration) {
    assert!(
        !c.waiter.is_finished(),
        "{}: the waiter got a held lock",
        c.name
    );
    let woken = super::woken_after_unlock(c.held, c.waiter, Duration::from_secs(15)).await;
    assert!(
        woken < limit,
        "{}: woken {woken:?} after the unlock",
        c.name
    );
}
