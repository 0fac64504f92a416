//! Redis Sentinel against real processes: a master, two replicas and three sentinels per test
//! (`support::sentinel`), the master killed with SIGKILL where a test needs a failover.

mod support;

use redlease::LockOptions;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use redlease::{Client, Error};
use support::sentinel::{MASTER_NAME, SentinelGroup};
use support::{exists, key_of, owners, pttl, unique_name};

/// Sentinels here fail over within a few seconds of a kill (`down-after-milliseconds 1000`).
const FAILOVER_LIMIT: Duration = Duration::from_secs(15);

fn start_group() -> SentinelGroup {
    tokio::task::block_in_place(SentinelGroup::start)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connects_by_url_and_by_builder_and_refuses_a_wrong_master_name() {
    let group = start_group();
    let master = &group.servers[group.master()];
    let by_url = Client::connect(&group.url()).await.unwrap();
    let by_builder = Client::connect_sentinel(MASTER_NAME, group.sentinel_addrs())
        .await
        .unwrap();

    let name = unique_name("sentinel-basic");
    let guard = by_url.lock(&name).unwrap().lock().await.unwrap();
    assert!(
        exists(master, &key_of(&name)),
        "the lock is on the master the sentinels name"
    );
    let other = by_builder.lock(&name).unwrap();
    assert!(
        other.try_lock().await.unwrap().is_none(),
        "both clients talk to the same master"
    );
    guard.unlock().await.unwrap();
    let second = other.try_lock().await.unwrap().expect("free after unlock");
    second.unlock().await.unwrap();
    assert!(!exists(master, &key_of(&name)));

    // Lazy: nothing is resolved at build; the first command finds the master.
    let lazy = support::client_at(group.url(), |b| b.lazy(true)).await;
    let guard = lazy.lock(&name).unwrap().lock().await.unwrap();
    assert!(exists(master, &key_of(&name)));
    guard.unlock().await.unwrap();
    lazy.shutdown().await.unwrap();

    match Client::connect_sentinel("no-such-master", group.sentinel_addrs()).await {
        Err(Error::UnknownMaster { name }) => assert_eq!(name, "no-such-master"),
        other => panic!("expected UnknownMaster, got {other:?}"),
    }
    let no_name = format!("redis+sentinel://{}", group.sentinel_addrs().join(","));
    assert!(matches!(
        Client::connect(&no_name).await,
        Err(Error::InvalidArgument(_))
    ));
    let none: [&str; 0] = [];
    assert!(matches!(
        Client::connect_sentinel(MASTER_NAME, none).await,
        Err(Error::InvalidArgument(_))
    ));
    by_url.shutdown().await.unwrap();
    by_builder.shutdown().await.unwrap();
}

/// A watchdog-kept lock, replicated before the master dies: after the failover the holder's
/// renewal lands on the new master within the failover time plus one renewal period, the
/// holder is not told it lost the lock, the waiter does not get it meanwhile, and the waiter is
/// woken (through the subscriber, now on the new master) as soon as the holder unlocks. The
/// fence counter was replicated with the lock, so the waiter's token is above the holder's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_lock_and_its_waiter_follow_the_new_master() {
    let mut group = start_group();
    let lease = Duration::from_secs(9);
    let renewal_period = lease / 3;
    let holder = support::client_at(group.url(), |b| b.watchdog_lease(lease)).await;
    let waiting = support::client_at(group.url(), |b| b.watchdog_lease(lease)).await;
    let name = unique_name("sentinel-failover");
    let key = key_of(&name);
    let held = holder
        .lock(&name)
        .unwrap()
        .fenced(true)
        .lock()
        .await
        .unwrap();
    let first_token = held.fencing_token().expect("a fenced lock has a token");
    let old = group.master();
    let replicated = support::eventually(Duration::from_secs(5), || {
        (0..3)
            .filter(|&i| i != old)
            .all(|i| exists(&group.servers[i], &key))
    });
    assert!(replicated, "the lock reached both replicas");
    let lock = waiting.lock(&name).unwrap().fenced(true);
    let waiter = tokio::spawn(async move {
        let guard = lock.lock().await;
        (guard, Instant::now())
    });
    tokio::time::sleep(Duration::from_millis(200)).await;

    let killed_at = Instant::now();
    tokio::task::block_in_place(|| group.kill_master());
    let new = tokio::task::block_in_place(|| group.until_promoted(old, FAILOVER_LIMIT));
    let promoted_after = killed_at.elapsed();
    // Renewed on the new master: its lease starts again from a renewal made there.
    let renewed = support::eventually_async(renewal_period + Duration::from_secs(3), || {
        let server = &group.servers[new];
        let key = &key;
        async move { pttl(server, key) > (lease - Duration::from_millis(1500)).as_millis() as i64 }
    })
    .await;
    let followed_after = killed_at.elapsed();
    assert!(
        renewed,
        "no renewal on the new master {followed_after:?} after the kill (promoted after {promoted_after:?})"
    );
    let bound = promoted_after + renewal_period + Duration::from_secs(1);
    assert!(
        followed_after <= bound,
        "followed after {followed_after:?}, bound {bound:?}"
    );
    eprintln!("promoted {promoted_after:?} after the kill; renewed there {followed_after:?} after");
    assert_eq!(owners(&group.servers[new], &key), 1);
    assert!(
        !held.is_lost(),
        "the key was replicated: the holder keeps it"
    );
    assert!(!waiter.is_finished(), "the waiter got a lock still held");

    let unlocked = Instant::now();
    held.unlock().await.unwrap();
    let (guard, at) = tokio::time::timeout(Duration::from_secs(3), waiter)
        .await
        .expect("the waiter was woken after the unlock, not by its lease-long nap")
        .unwrap();
    let guard = guard.expect("the waiter got the lock");
    eprintln!(
        "waiter woken {:?} after the unlock",
        at.duration_since(unlocked)
    );
    assert!(exists(&group.servers[new], &key));
    let token = guard.fencing_token().expect("a fenced lock has a token");
    assert!(
        token > first_token,
        "the replicated fence counter goes on: {token} after {first_token}"
    );
    guard.unlock().await.unwrap();
    holder.shutdown().await.unwrap();
    waiting.shutdown().await.unwrap();
}

/// One critical section: when it ran and whether its guard was reported lost.
struct Section {
    start: Instant,
    end: Instant,
    lost: bool,
}

/// Tasks of two clients increment an in-process counter with a non-atomic read-modify-write
/// under the lock while the master is killed. What holds: two sections overlap only if one of
/// their guards was reported lost (its key missed the failover; `is_lost()` or `unlock`'s error
/// says so); without any lost guard no update is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_across_a_failover_is_kept_by_every_guard_not_reported_lost() {
    let mut group = start_group();
    let lease = Duration::from_secs(3);
    let mut clients = Vec::new();
    for _ in 0..2 {
        let client = support::client_at(group.url(), |b| {
            b.watchdog_lease(lease).timeout(Duration::from_secs(1))
        })
        .await;
        clients.push(client);
    }
    let name = unique_name("sentinel-exclusion");
    let counter = Arc::new(AtomicU64::new(0));
    let inside = Arc::new(AtomicUsize::new(0));
    let sections = Arc::new(std::sync::Mutex::new(Vec::<Section>::new()));
    let stop_at = Arc::new(std::sync::Mutex::new(None::<Instant>));
    let mut tasks = Vec::new();
    for t in 0..4 {
        let lock = clients[t % 2].lock(&name).unwrap();
        let (counter, inside, sections, stop_at) = (
            counter.clone(),
            inside.clone(),
            sections.clone(),
            stop_at.clone(),
        );
        tasks.push(tokio::spawn(async move {
            for _ in 0..2_000 {
                let stop = *stop_at.lock().unwrap();
                if stop.is_some_and(|at| Instant::now() > at) {
                    break;
                }
                let guard = match lock
                    .try_lock_with(LockOptions::new().wait(Duration::from_secs(2)))
                    .await
                {
                    Ok(Some(guard)) => guard,
                    Ok(None) | Err(_) => {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                };
                let start = Instant::now();
                inside.fetch_add(1, Ordering::SeqCst);
                let value = counter.load(Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(5)).await;
                counter.store(value + 1, Ordering::SeqCst);
                inside.fetch_sub(1, Ordering::SeqCst);
                let end = Instant::now();
                let lost_now = guard.is_lost();
                let released = guard.unlock().await;
                sections.lock().unwrap().push(Section {
                    start,
                    end,
                    lost: lost_now || released.is_err(),
                });
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let old = group.master();
    let killed_at = Instant::now();
    tokio::task::block_in_place(|| group.kill_master());
    tokio::task::block_in_place(|| group.until_promoted(old, FAILOVER_LIMIT));
    let promoted_at = Instant::now();
    *stop_at.lock().unwrap() = Some(Instant::now() + Duration::from_secs(3));
    support::join_within(tasks, Duration::from_secs(20), "a task hung").await;

    let sections = std::mem::take(&mut *sections.lock().unwrap());
    let before = sections.iter().filter(|s| s.end < killed_at).count();
    let after = sections.iter().filter(|s| s.start > promoted_at).count();
    let lost = sections.iter().filter(|s| s.lost).count();
    eprintln!(
        "{} sections: {before} before the kill, {after} after the promotion, {lost} lost",
        sections.len()
    );
    let first_after = sections
        .iter()
        .filter(|s| s.start > promoted_at)
        .map(|s| s.start.duration_since(promoted_at))
        .min();
    eprintln!("first section on the new master {first_after:?} after the promotion");
    assert!(before > 0, "no section ran before the kill");
    assert!(after > 0, "no section ran on the new master");
    for (i, a) in sections.iter().enumerate() {
        for b in &sections[i + 1..] {
            let overlap = a.start < b.end && b.start < a.end;
            assert!(
                !overlap || a.lost || b.lost,
                "two sections overlapped and neither guard was reported lost"
            );
        }
    }
    if lost == 0 {
        assert_eq!(
            counter.load(Ordering::SeqCst),
            sections.len() as u64,
            "an update was lost though no guard was"
        );
    }
    for client in clients {
        let _ = client.shutdown().await;
    }
}

/// A planned failover (`SENTINEL FAILOVER`): the old master is not killed and goes on answering
/// as a master for seconds after the promotion, so no command fails to tell the client; the
/// sentinels' `+switch-master` announcement does. A watchdog-kept lock is renewed on the new
/// master and never reported lost (a planned failover waits for the replica to catch up).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planned_failover_is_followed_and_keeps_the_lock() {
    let group = start_group();
    let lease = Duration::from_secs(3);
    let client = support::client_at(group.url(), |b| b.watchdog_lease(lease)).await;
    let name = unique_name("sentinel-planned");
    let key = key_of(&name);
    let held = client.lock(&name).unwrap().lock().await.unwrap();
    let old = group.master();

    let started = Instant::now();
    redis::cmd("SENTINEL")
        .arg("FAILOVER")
        .arg(MASTER_NAME)
        .query::<()>(&mut group.sentinels[0].conn())
        .expect("SENTINEL FAILOVER");
    let new = tokio::task::block_in_place(|| group.until_promoted(old, FAILOVER_LIMIT));
    let promoted_after = started.elapsed();
    // The old master still answers as one (the sentinels reconfigure it seconds later), yet the
    // client moves to the new master soon after the announcement.
    let new_port = group.servers[new].port();
    let followed = support::eventually_async(Duration::from_secs(2), || async {
        served_by(&client).await == Some(new_port)
    })
    .await;
    let followed_after = started.elapsed();
    assert!(
        followed,
        "not on the new master {followed_after:?} after SENTINEL FAILOVER (promoted after {promoted_after:?})"
    );
    eprintln!(
        "planned failover: promoted after {promoted_after:?}, followed after {followed_after:?}"
    );
    // Usually still "master" here: nothing but the announcement told the client.
    eprintln!(
        "the old master's role meanwhile: {}",
        support::sentinel::role(&group.servers[old])
    );
    let other = unique_name("sentinel-planned-other");
    let guard = tokio::time::timeout(Duration::from_secs(5), client.lock(&other).unwrap().lock())
        .await
        .expect("a lock taken after the failover")
        .unwrap();
    assert!(exists(&group.servers[new], &key_of(&other)));
    assert!(!exists(&group.servers[old], &key_of(&other)));
    guard.unlock().await.unwrap();

    // Two renewal periods later the held lock was renewed there and is not lost.
    tokio::time::sleep(lease * 2 / 3).await;
    let renewed = pttl(&group.servers[new], &key);
    eprintln!("planned failover: lease left {renewed} ms on the new master");
    assert!(
        renewed > (lease / 3).as_millis() as i64,
        "renewed on the new master: {renewed} ms left"
    );
    assert!(!held.is_lost());
    held.unlock().await.unwrap();
    assert!(!exists(&group.servers[new], &key));
    client.shutdown().await.unwrap();
}

/// The port of the server the client's commands reach now.
async fn served_by(client: &Client) -> Option<u16> {
    let info: String = client.query(redis::cmd("INFO").arg("server")).await.ok()?;
    info.lines()
        .find_map(|line| line.strip_prefix("tcp_port:"))
        .and_then(|port| port.trim().parse().ok())
}
