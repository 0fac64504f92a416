//! The operator's view on a cluster: held locks listed from every primary, holders named.

mod support;

use redlease::Client;
use support::Cluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_locks_and_holders_on_every_primary() {
    let cluster = Cluster::start();
    let client = Client::builder_cluster(cluster.seeds())
        .build()
        .await
        .unwrap();
    let names = cluster.names_per_primary("ops", 2);
    let mut guards = Vec::new();
    for (name, _) in &names {
        guards.push(client.lock(name).unwrap().lock().await.unwrap());
    }
    let mut expected: Vec<String> = names.iter().map(|(name, _)| name.clone()).collect();
    expected.sort();
    assert_eq!(client.held_locks("ops*", 100).await.unwrap(), expected);
    let status = client.lock(&names[0].0).unwrap().status().await.unwrap();
    let holder = status.holders[0]
        .client
        .as_ref()
        .expect("named on a cluster too");
    assert_eq!(holder.pid, std::process::id());
    let waiters = Client::builder_cluster(cluster.seeds())
        .build()
        .await
        .unwrap();
    let waiter = support::spawn_waiter(waiters.lock(&names[0].0).unwrap());
    let lock = client.lock(&names[0].0).unwrap();
    let listening = support::eventually_async(std::time::Duration::from_secs(5), || async {
        lock.status().await.unwrap().listening_clients == 1
    })
    .await;
    assert!(
        listening,
        "the other client's waiter listens in the lock's shard"
    );
    for guard in guards {
        guard.unlock().await.unwrap();
    }
    support::join_within([waiter], std::time::Duration::from_secs(5), "woken").await;
    assert!(client.held_locks("ops*", 100).await.unwrap().is_empty());
    client.shutdown().await.unwrap();
}
