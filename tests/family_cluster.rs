//! The read-write lock, the count-down latch and the expiring permits on a real Redis Cluster
//! (3 primaries, 3 replicas): every key of one object in one slot, waiters woken by sharded
//! pub/sub messages on each primary. The semaphore's cluster test is in `semaphore.rs`; a fair
//! lock is a `Lock` in strict mode, on the lock's keys, whose cluster tests are in `cluster.rs`.

mod support;

use std::time::{Duration, Instant};

use redlease::{Client, Owner};
use support::{Cluster, shard_numsub};

async fn until_shard_subscribed(cluster: &Cluster, key: &str, channel: &str) -> bool {
    support::eventually_async(Duration::from_secs(5), || async {
        shard_numsub(cluster.server_of(key), channel) == 1
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_family_on_a_cluster() {
    support::init_tracing();
    let cluster = Cluster::start();
    let connect = || async {
        Client::builder_cluster(cluster.seeds())
            .build()
            .await
            .expect("connecting to the cluster")
    };
    let (a, b) = (connect().await, connect().await);
    for (name, _) in cluster.names_per_primary("family", 1) {
        // A writer on one client waits for a reader on the other, woken by its release.
        let lock = a.read_write_lock(&name).unwrap();
        let reading = lock.read().lock().await.unwrap();
        let writer = b.read_write_lock(&name).unwrap().with_owner(Owner::new());
        let waiting = tokio::spawn(async move {
            let guard = writer.write().lock().await.unwrap();
            (Instant::now(), guard)
        });
        let channel = format!("{}:unlock", lock.key());
        assert!(
            until_shard_subscribed(&cluster, lock.key(), &channel).await,
            "{name}: the writer never listened"
        );
        let released = Instant::now();
        reading.unlock().await.unwrap();
        let (at, guard) = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .unwrap()
            .unwrap();
        let latency = at.duration_since(released);
        assert!(
            latency < Duration::from_millis(300),
            "{name}: woken {latency:?} after the release"
        );
        assert!(
            lock.read().try_lock().await.unwrap().is_none(),
            "{name}: read beside the writer"
        );
        guard.unlock().await.unwrap();

        // A latch's waiter is woken by the count-down that reaches zero.
        let latch = a.count_down_latch(&name).unwrap();
        assert!(latch.try_set_count(1).await.unwrap());
        let waiter = b.count_down_latch(&name).unwrap();
        let waiting = tokio::spawn(async move {
            waiter.wait().await.unwrap();
            Instant::now()
        });
        let channel = format!("{}:zero", latch.key());
        assert!(
            until_shard_subscribed(&cluster, latch.key(), &channel).await,
            "{name}: the latch waiter never listened"
        );
        let opened = Instant::now();
        assert_eq!(latch.count_down().await.unwrap(), 0);
        let at = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .unwrap()
            .unwrap();
        assert!(
            at.duration_since(opened) < Duration::from_millis(300),
            "{name}: woken by the nap"
        );
    }
}
