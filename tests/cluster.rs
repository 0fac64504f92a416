//! Redis Cluster: every lock feature on a real 3-primary, 3-replica cluster started by the test.

mod support;

use std::time::Duration;

use redlease::Client;
use support::Cluster;

async fn cluster_client(cluster: &Cluster) -> Client {
    Client::builder_cluster(cluster.seeds())
        .build()
        .await
        .expect("connecting to the cluster")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_on_every_primary_are_exclusive_and_reentrant() {
    support::init_tracing();
    let cluster = Cluster::start();
    let [a, b] = [
        cluster_client(&cluster).await,
        cluster_client(&cluster).await,
    ];
    for (name, primary) in cluster.names_per_primary("reent", 2) {
        let key = support::key_of(&name);
        let lock = a.lock(&name).unwrap();
        let outer = lock.lock().await.unwrap();
        let inner = lock.lock().await.unwrap();
        assert_eq!(lock.hold_count().await.unwrap(), 2, "{name}");
        assert_eq!(cluster.primary_of(&key), primary);
        assert!(
            support::exists(&cluster.nodes[primary], &key),
            "key on its primary"
        );
        assert!(support::locked_out(&b, &name).await, "{name} is held by a");
        inner.unlock().await.unwrap();
        assert_eq!(lock.hold_count().await.unwrap(), 1);
        outer.unlock().await.unwrap();
        assert!(!support::exists(&cluster.nodes[primary], &key));
        support::take_and_release(&b.lock(&name).unwrap()).await;
    }
    let _ = Duration::ZERO;
}
