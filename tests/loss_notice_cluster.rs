//! The loss notice on a Redis Cluster (3 primaries, 3 replicas): a holder under the watchdog
//! (default 30 s lease, so the next renewal is ten seconds away) hears within milliseconds that
//! its lock is gone, on whichever primary its key lives; and a failover or a slot moved with the
//! held key is no loss: the notice follows the key to its new primary.
//!
//! Each test prints the measured time from the cause to `lost()` resolving.

mod support;

use std::time::{Duration, Instant};

use support::notice::{NOTICE_WITHIN, hold, lost_after};
use support::{Cluster, cluster_client, key_of, key_slot};

/// After a failover or a slot move: longer than the notice's reconnection (its pauses grow to
/// 500 ms) and its check of every hold.
const FOLLOWED: Duration = Duration::from_millis(1500);

fn run(cluster: &Cluster, node: usize, args: &[&str]) {
    let mut cmd = redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    let _: redis::Value = cmd
        .query(&mut cluster.nodes[node].conn())
        .expect("redis command");
}

fn exists_on(cluster: &Cluster, node: usize, key: &str) -> bool {
    redis::cmd("EXISTS")
        .arg(key)
        .query::<i64>(&mut cluster.nodes[node].conn())
        .expect("EXISTS")
        == 1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deletion_on_each_primary_is_noticed_at_once() {
    support::init_tracing();
    let cluster = Cluster::start();
    let holder = cluster_client(&cluster).await;
    let other = cluster_client(&cluster).await;
    let names = cluster.names_per_primary("notice-cl-del", 2);
    let mut guards = Vec::new();
    for (name, primary) in &names {
        guards.push((hold(&holder, name).await, name.clone(), *primary));
    }
    for (i, (guard, name, primary)) in guards.iter().enumerate() {
        let key = key_of(name);
        // One of each primary's two holds is deleted, the other force-unlocked by another
        // client: both reach the primary that serves the key.
        let took = if i % 2 == 0 {
            lost_after(guard, NOTICE_WITHIN, || {
                run(&cluster, *primary, &["DEL", &key])
            })
            .await
        } else {
            let lost = guard.lost();
            let started = Instant::now();
            other.lock(name).unwrap().force_unlock().await.unwrap();
            tokio::time::timeout(NOTICE_WITHIN, lost)
                .await
                .ok()
                .map(|()| started.elapsed())
        };
        println!("cluster, primary {primary}, cause {i} -> lost(): {took:?}");
        assert!(
            took.is_some(),
            "lost() did not resolve within {NOTICE_WITHIN:?} on primary {primary}"
        );
    }
    assert_eq!(holder.held_count(), 0);
    holder.shutdown().await.unwrap();
    other.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flush_of_every_primary_is_noticed_by_every_holder() {
    support::init_tracing();
    let cluster = Cluster::start();
    let holder = cluster_client(&cluster).await;
    let names = cluster.names_per_primary("notice-cl-flush", 1);
    let mut guards = Vec::new();
    for (name, _) in &names {
        guards.push(hold(&holder, name).await);
    }
    let started = Instant::now();
    for primary in cluster.primaries() {
        run(&cluster, primary, &["FLUSHALL"]);
    }
    for guard in &guards {
        let notice = tokio::time::timeout(NOTICE_WITHIN, guard.lost()).await;
        assert!(notice.is_ok(), "a holder was not told of the flush");
    }
    println!(
        "FLUSHALL on every primary -> every lost(): {:?}",
        started.elapsed()
    );
    holder.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_is_no_loss_and_the_notice_follows_the_new_primary() {
    support::init_tracing();
    let cluster = Cluster::start();
    let holder = cluster_client(&cluster).await;
    let names = cluster.names_per_primary("notice-cl-failover", 1);
    let mut guards = Vec::new();
    for (name, _) in &names {
        guards.push(hold(&holder, name).await);
    }
    let (name, old) = names[0].clone();
    let key = key_of(&name);
    let new = tokio::task::block_in_place(|| cluster.failover(old));
    tokio::time::sleep(FOLLOWED).await;
    // The old primary, now a replica, answers MOVED: nothing it says is taken for a loss.
    for guard in &guards {
        assert!(
            !guard.is_lost(),
            "a hold that survived the failover was marked lost"
        );
    }
    assert!(exists_on(&cluster, new, &key));
    let took = lost_after(&guards[0], NOTICE_WITHIN, || {
        run(&cluster, new, &["DEL", &key])
    })
    .await;
    println!("DEL on the new primary after a failover -> lost(): {took:?}");
    assert!(
        took.is_some(),
        "the notice did not follow the key to its new primary"
    );
    // The other primaries' holds are still armed.
    let (other_name, other_primary) = &names[1];
    let took = lost_after(&guards[1], NOTICE_WITHIN, || {
        run(&cluster, *other_primary, &["DEL", &key_of(other_name)])
    })
    .await;
    assert!(
        took.is_some(),
        "another primary's hold was not armed after the failover"
    );
    holder.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_moved_with_its_held_key_is_no_loss_and_stays_watched() {
    support::init_tracing();
    let cluster = Cluster::start();
    let holder = cluster_client(&cluster).await;
    let names = cluster.names_per_primary("notice-cl-move", 1);
    let (name, from) = names[0].clone();
    let key = key_of(&name);
    let guard = hold(&holder, &name).await;
    let to = names.iter().map(|(_, p)| *p).find(|p| *p != from).unwrap();
    // MIGRATE deletes the key at its old primary (a notice), which then answers ASK, and
    // MOVED once the slot is handed over.
    tokio::task::block_in_place(|| cluster.migrate_slot(key_slot(&key), to));
    tokio::time::sleep(FOLLOWED).await;
    assert!(
        !guard.is_lost(),
        "a hold moved with its slot was marked lost"
    );
    assert!(exists_on(&cluster, to, &key));
    let took = lost_after(&guard, NOTICE_WITHIN, || run(&cluster, to, &["DEL", &key])).await;
    println!("DEL at the slot's new primary -> lost(): {took:?}");
    assert!(took.is_some(), "the notice did not follow the moved slot");
    holder.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_a_held_key_migrates_the_other_primaries_holds_stay_watched() {
    support::init_tracing();
    let cluster = Cluster::start();
    let holder = cluster_client(&cluster).await;
    let names = cluster.names_per_primary("notice-cl-migrating", 2);
    let mut guards = Vec::new();
    for (name, primary) in &names {
        guards.push((hold(&holder, name).await, name.clone(), *primary));
    }
    let (moving, from) = (key_of(&guards[0].1), guards[0].2);
    let to = names.iter().map(|(_, p)| *p).find(|p| *p != from).unwrap();
    let slot = key_slot(&moving);
    // The key is at `to`; its old primary answers ASK for it until the slot is handed over.
    let (_, to_id) = tokio::task::block_in_place(|| cluster.move_slot_keys(slot, to));
    tokio::time::sleep(FOLLOWED).await;
    assert!(
        !guards[0].0.is_lost(),
        "a hold whose slot is moving was marked lost"
    );
    // Meanwhile every other hold is told at once: the moving key's check answers for itself.
    for (guard, name, primary) in guards.iter().skip(1) {
        if key_slot(&key_of(name)) == slot {
            continue;
        }
        let took = lost_after(guard, NOTICE_WITHIN, || {
            run(&cluster, *primary, &["DEL", &key_of(name)])
        })
        .await;
        println!("DEL on primary {primary} while a slot migrates -> lost(): {took:?}");
        let took = took.expect("no notice while a slot migrates");
        assert!(
            took < Duration::from_millis(300),
            "a notice waited for the migration: {took:?}"
        );
    }
    tokio::task::block_in_place(|| cluster.finish_migration(slot, from, to, &to_id));
    tokio::time::sleep(FOLLOWED).await;
    assert!(
        !guards[0].0.is_lost(),
        "a hold moved with its slot was marked lost"
    );
    let took = lost_after(&guards[0].0, NOTICE_WITHIN, || {
        run(&cluster, to, &["DEL", &moving])
    })
    .await;
    println!("DEL at the slot's new primary -> lost(): {took:?}");
    assert!(took.is_some(), "the notice did not follow the moved slot");
    holder.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_a_primary_is_down_the_others_holds_stay_watched() {
    support::init_tracing();
    let mut cluster = Cluster::start();
    let holder = cluster_client(&cluster).await;
    let names = cluster.names_per_primary("notice-cl-down", 1);
    let mut guards = Vec::new();
    for (name, primary) in &names {
        guards.push((hold(&holder, name).await, name.clone(), *primary));
    }
    // Killed: its failover takes the cluster's node timeout (1 s) and more; meanwhile the slot
    // map still names it.
    let dead = guards[0].2;
    cluster.nodes[dead].kill();
    tokio::time::sleep(Duration::from_millis(300)).await;
    for (guard, name, primary) in guards.iter().skip(1) {
        let took = lost_after(guard, NOTICE_WITHIN, || {
            run(&cluster, *primary, &["DEL", &key_of(name)])
        })
        .await;
        println!("DEL on primary {primary} while primary {dead} is down -> lost(): {took:?}");
        assert!(
            took.is_some(),
            "a primary down left the others' holds unwatched"
        );
    }
    drop(guards);
    let _ = tokio::time::timeout(Duration::from_secs(10), holder.shutdown()).await;
}
