//! The randomized fault run (`support::torture`) on a Redis Cluster: a manual failover, kill -9
//! of a primary (restarted later as a replica), a slot migration of a lock's slot, and
//! `CLIENT PAUSE WRITE` of a primary, drawn at random while fenced locks are taken and used.

mod support;

use std::time::Duration;

use redlease::Client;
use support::torture::{self, Dice, Fault, Fences};
use support::{Cluster, key_of, key_slot};

const NAMES: usize = 4;
const CLIENTS: usize = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_locks_hold_their_invariants_under_random_cluster_faults() {
    let mut cluster = Cluster::start();
    let names: Vec<String> = cluster
        .names_per_primary("torture", 2)
        .into_iter()
        .map(|(n, _)| n)
        .take(NAMES)
        .collect();
    let mut clients = Vec::new();
    let mut acquirers = Vec::new();
    for _ in 0..CLIENTS {
        let client = Client::builder_cluster(cluster.seeds())
            .watchdog_lease(Duration::from_secs(2))
            .timeout(Duration::from_secs(1))
            .build()
            .await
            .unwrap();
        acquirers.push(torture::fenced_lock(&client, &names));
        clients.push(client);
    }
    let mut killed: Option<usize> = None;
    let lock_names = names.clone();
    let fault = move |dice: &mut Dice| {
        if let Some(node) = killed.take() {
            // Back as a replica of the primary that took its slots.
            cluster.restart(node);
        }
        let primaries = cluster.primaries();
        let primary = primaries[dice.below(primaries.len() as u64) as usize];
        // A failover or a kill needs a replica to take over.
        let replica = cluster.try_replica_of(primary);
        match (dice.below(4), replica) {
            (0, Some(_)) => {
                // Coordinated: the replica takes over once it has every write.
                cluster.failover(primary);
            }
            (1, Some(replica)) => {
                cluster.nodes[primary].kill();
                cluster.until_promoted(replica);
                killed = Some(primary);
                return Fault::MayLoseWrites;
            }
            (2, _) => {
                let name = &lock_names[dice.below(lock_names.len() as u64) as usize];
                let key = key_of(name);
                let from = cluster.primary_of(&key);
                let to = *primaries.iter().find(|&&p| p != from).unwrap();
                cluster.migrate_slot(key_slot(&key), to);
            }
            _ => cluster.nodes[primary].client_pause(300, false),
        }
        Fault::KeepsWrites
    };
    // A failover may promote a replica that missed the last fence increments.
    torture::run("cluster", Fences::MayRegress, names, acquirers, fault).await;
    for client in clients {
        let _ = client.shutdown().await;
    }
}
