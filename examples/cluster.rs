//! Locks on a Redis Cluster: the same API as on one server, with a client made from some of the
//! cluster's nodes. Names hash to different slots, so these locks live on different primaries.
//!
//! Run with `bash scripts/with-cluster.sh cargo run --example cluster` (starts a private
//! 3-primary, 3-replica cluster) or with `REDIS_CLUSTER_URL` set to
//! `redis+cluster://host:port,host:port,...` for one of yours.

use std::time::{Duration, Instant};

use redlease::Client;

#[tokio::main]
async fn main() -> redlease::Result<()> {
    let url = std::env::var("REDIS_CLUSTER_URL")
        .unwrap_or_else(|_| "redis+cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002".into());
    // `Client::builder_cluster(["redis://10.0.0.1:7000", ...])` does the same from a list.
    let client = Client::builder(&url).build().await?;
    println!("connected to {url} as client {}", client.id());

    // Reentrant, watchdog-kept, on whichever primary serves the name's slot.
    let lock = client.lock("orders:42")?;
    let outer = lock.lock().await?;
    let inner = lock.lock().await?;
    println!(
        "`{}` held, hold count {}",
        lock.name(),
        lock.hold_count().await?
    );
    inner.unlock().await?;

    // Another task waits on the lock's shard channel (SSUBSCRIBE) and is woken by the release.
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move {
            let guard = lock.lock().await?;
            let at = Instant::now();
            guard.unlock().await?;
            Ok::<_, redlease::Error>(at)
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let released = Instant::now();
    outer.unlock().await?;
    let woken = waiter
        .await
        .map_err(|e| redlease::Error::InvalidArgument(e.to_string()))??;
    println!(
        "the waiter had the lock {:?} after the release",
        woken - released
    );

    // Many tasks over many names (many slots): their calls are coalesced per slot.
    let started = Instant::now();
    let tasks: Vec<_> = (0..64)
        .map(|i| {
            let client = client.clone();
            tokio::spawn(async move {
                let lock = client.lock(&format!("sku:{}", i % 16))?;
                for _ in 0..20 {
                    lock.lock().await?.unlock().await?;
                }
                Ok::<_, redlease::Error>(())
            })
        })
        .collect();
    for task in tasks {
        task.await
            .map_err(|e| redlease::Error::InvalidArgument(e.to_string()))??;
    }
    println!(
        "64 tasks x 20 lock/unlock pairs over 16 names in {:?}",
        started.elapsed()
    );

    // Fenced locks hand out rising tokens for the resource to check.
    let fenced = client.lock("ledger")?.fenced(true);
    let guard = fenced.lock().await?;
    println!("fencing token {:?}", guard.fencing_token());
    guard.unlock().await?;

    client.shutdown().await
}
