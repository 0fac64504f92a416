//! Leader election beyond one server: a Redis Cluster with three primaries (an election on
//! each, observed with sharded pub/sub, and a failover of one primary under its leader), and
//! a Sentinel group whose master is killed under a leader with a candidate waiting.

mod support;

use std::time::{Duration, Instant};

use redlease::{ChangeCause, Client, LeaderChange, LeaderChanges, Leadership};
use support::sentinel::SentinelGroup;
use support::{Cluster, cluster_client_with_lease, exists, key_of, unique_name};

const SECOND: Duration = Duration::from_secs(1);
/// Sentinels here fail over within a few seconds of a kill (`down-after-milliseconds 1000`).
const FAILOVER_LIMIT: Duration = Duration::from_secs(15);

async fn next_change(changes: &mut LeaderChanges) -> LeaderChange {
    tokio::time::timeout(10 * SECOND, changes.next_change())
        .await
        .expect("a change within 10 s")
        .expect("no error")
}

/// The next change: one revision after the last, no gap, caused by `cause`.
async fn expect_change(
    changes: &mut LeaderChanges,
    revision: &mut u64,
    cause: ChangeCause,
) -> LeaderChange {
    let change = next_change(changes).await;
    assert_eq!(change.revision, *revision + 1, "{change:?}");
    assert!(!change.is_gap(), "{change:?}");
    assert_eq!(change.cause, Some(cause), "{change:?}");
    *revision = change.revision;
    change
}

/// `campaign` by another client, started now; resolves when it wins.
fn spawn_campaign(
    client: &Client,
    name: &str,
    value: &'static str,
) -> tokio::task::JoinHandle<(Instant, Leadership)> {
    let election = client.election(name).unwrap();
    tokio::spawn(async move {
        let leadership = election.campaign(value).await.unwrap();
        (Instant::now(), leadership)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elections_on_three_primaries_hand_over_and_survive_a_failover() {
    support::init_tracing();
    let cluster = tokio::task::block_in_place(Cluster::start);
    let names = cluster.names_per_primary("cluster-elect", 1);
    assert_eq!(names.len(), 3);
    let lease = 6 * SECOND;
    let a = cluster_client_with_lease(&cluster, lease).await;
    let b = cluster_client_with_lease(&cluster, lease).await;
    let watcher = cluster_client_with_lease(&cluster, lease).await;
    let mut kept = Vec::new();
    for (name, _) in &names {
        let mut changes = watcher.election(name).unwrap().observe();
        let first = next_change(&mut changes).await;
        assert!(first.initial && first.leader.is_none());
        let mut revision = first.revision;
        let leading = a.election(name).unwrap().campaign("a").await.unwrap();
        let elected = expect_change(&mut changes, &mut revision, ChangeCause::Elected).await;
        assert_eq!(elected.leader.unwrap().term, leading.term());
        let waiting = spawn_campaign(&b, name, "b");
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!waiting.is_finished(), "b won while a led");
        let resigned_at = Instant::now();
        let first_term = leading.term();
        leading.resign().await.unwrap();
        let (won_at, second) = tokio::time::timeout(5 * SECOND, waiting)
            .await
            .expect("b won after the resignation")
            .unwrap();
        assert!(
            won_at.duration_since(resigned_at) < SECOND,
            "the hand-over waited for the lease"
        );
        assert!(second.term() > first_term);
        expect_change(&mut changes, &mut revision, ChangeCause::Resigned).await;
        let elected = expect_change(&mut changes, &mut revision, ChangeCause::Elected).await;
        let leader = elected.leader.unwrap();
        assert_eq!((leader.value.as_str(), leader.term), ("b", second.term()));
        kept.push((second, changes, revision));
    }

    // A planned failover of the first election's primary: the state was replicated, so its
    // leader goes on leading on the new primary, and its resignation there is observed.
    let (name, primary) = &names[0];
    let (leading, mut changes, mut revision) = kept.remove(0);
    let acked: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(5000)
        .query(&mut cluster.nodes[*primary].conn())
        .unwrap();
    assert_eq!(acked, 1, "the election reached the replica");
    tokio::task::block_in_place(|| cluster.failover(*primary));
    // A renewal period and a second on the new primary.
    tokio::time::sleep(lease / 3 + SECOND).await;
    assert!(!leading.is_lost(), "the replicated leadership was kept");
    let leader = watcher.election(name).unwrap().leader().await.unwrap();
    assert_eq!(leader.map(|l| l.term), Some(leading.term()));
    let term = leading.term();
    leading.resign().await.unwrap();
    expect_change(&mut changes, &mut revision, ChangeCause::Resigned).await;
    let next = a.election(name).unwrap().campaign("a2").await.unwrap();
    assert!(next.term() > term);
    let elected = expect_change(&mut changes, &mut revision, ChangeCause::Elected).await;
    assert_eq!(elected.leader.map(|l| l.term), Some(next.term()));
    next.resign().await.unwrap();
    for (leading, _, _) in kept {
        leading.resign().await.unwrap();
    }
}

/// The master is killed under a leader, with a candidate waiting: the leader's replicated term
/// goes on on the new master (not reported lost), the candidate does not win meanwhile, wins at
/// once when the leader resigns there with a greater term, and an observer sees every change
/// in order across the failover.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_and_its_candidate_follow_a_sentinel_failover() {
    support::init_tracing();
    let mut group = tokio::task::block_in_place(SentinelGroup::start);
    let lease = 6 * SECOND;
    let connect = |lease| support::client_at(group.url(), move |b| b.watchdog_lease(lease));
    let a = connect(lease).await;
    let b = connect(lease).await;
    let watcher = connect(lease).await;
    let name = unique_name("sentinel-elect");
    let mut changes = watcher.election(&name).unwrap().observe();
    let first = next_change(&mut changes).await;
    let mut revision = first.revision;
    let leading = a.election(&name).unwrap().campaign("a").await.unwrap();
    expect_change(&mut changes, &mut revision, ChangeCause::Elected).await;
    let old = group.master();
    let state_key = format!("{}:election", key_of(&name));
    let replicated = support::eventually(5 * SECOND, || {
        (0..3).filter(|&i| i != old).all(|i| {
            exists(&group.servers[i], &key_of(&name)) && exists(&group.servers[i], &state_key)
        })
    });
    assert!(replicated, "the election reached both replicas");
    let waiting = spawn_campaign(&b, &name, "b");
    tokio::time::sleep(Duration::from_millis(300)).await;

    let killed_at = Instant::now();
    tokio::task::block_in_place(|| group.kill_master());
    let new = tokio::task::block_in_place(|| group.until_promoted(old, FAILOVER_LIMIT));
    eprintln!("promoted {:?} after the kill", killed_at.elapsed());
    // One renewal period and a second on the new master.
    tokio::time::sleep(lease / 3 + SECOND).await;
    assert!(!leading.is_lost(), "the replicated leadership was kept");
    assert!(!waiting.is_finished(), "b won while a still led");
    let leader = watcher.election(&name).unwrap().leader().await.unwrap();
    assert_eq!(leader.map(|l| l.term), Some(leading.term()));
    assert!(exists(&group.servers[new], &key_of(&name)));

    let resigned_at = Instant::now();
    let first_term = leading.term();
    leading.resign().await.unwrap();
    let (won_at, second) = tokio::time::timeout(5 * SECOND, waiting)
        .await
        .expect("b won after the resignation")
        .unwrap();
    assert!(
        won_at.duration_since(resigned_at) < 2 * SECOND,
        "the hand-over waited for the lease"
    );
    assert!(
        second.term() > first_term,
        "the fence counter was replicated"
    );
    expect_change(&mut changes, &mut revision, ChangeCause::Resigned).await;
    let elected = expect_change(&mut changes, &mut revision, ChangeCause::Elected).await;
    assert_eq!(elected.leader.map(|l| l.term), Some(second.term()));
    second.resign().await.unwrap();
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
    watcher.shutdown().await.unwrap();
}
