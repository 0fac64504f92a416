//! Who waits, and for how long: `Lock::waiters` (and the other kinds') read the server's queue
//! without changing it; `LockOptions::metadata` travels with a hold into `status`.
//!
//! The multi-process test re-runs this test binary as children that execute only the
//! `#[ignore]`d `waiting_worker` test, configured through `REDLEASE_WW*` variables.

mod support;

use std::process::{Child, Stdio};
use std::time::Duration;

use redlease::{Client, Error, LockOptions, MAX_METADATA_LEN, Owner};
use support::workers::{self, all_succeed};
use support::{Cluster, Server, clients, exists, key_of, unique_name};

fn spawn_worker(envs: &[(&str, String)]) -> Child {
    workers::spawn_worker("waiting_worker", envs, Stdio::null())
}

/// The names in the queue's list, and the `@<name>` records (when each was listed), as the
/// server has them.
fn queue_content(server: &Server, name: &str) -> (Vec<String>, Vec<(String, String)>) {
    let hash = key_of(name);
    let mut conn = server.conn();
    let list: Vec<String> = redis::cmd("LRANGE")
        .arg(format!("{hash}:q"))
        .arg(0)
        .arg(-1)
        .query(&mut conn)
        .unwrap();
    let mut listed: Vec<(String, String)> = redis::cmd("HGETALL")
        .arg(format!("{hash}:qd"))
        .query(&mut conn)
        .unwrap();
    listed.retain(|(field, _)| field.starts_with('@'));
    listed.sort();
    (list, listed)
}

/// A lock held by this process and waited for by three others: `waiters` names each one's
/// process, in the order they came, with a wait age that grows; reading changes nothing (the
/// same queue before and after, read by a script the server runs as read-only), and the
/// waiters are then served in that order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_waiting_are_listed_in_order_and_served_in_it() {
    support::init_tracing();
    let server = Server::start();
    let name = unique_name("waited-for");
    let order = unique_name("served-order");
    let [holder, viewer] = clients(&server).await;
    let guard = holder.lock(&name).unwrap().lock().await.unwrap();
    let lock = viewer.lock(&name).unwrap();
    let mut children = Vec::new();
    for i in 0..3 {
        children.push(spawn_worker(&[
            ("REDLEASE_WW", "wait".into()),
            ("REDLEASE_WW_URL", server.url()),
            ("REDLEASE_WW_NAME", name.clone()),
            ("REDLEASE_WW_ORDER", order.clone()),
        ]));
        // The next one comes only once this one has its place.
        let queued = support::eventually_async(Duration::from_secs(20), || async {
            lock.waiters().await.unwrap().len() == i + 1
        })
        .await;
        assert!(queued, "worker {i} never took its place");
    }
    let pids: Vec<u32> = children.iter().map(Child::id).collect();

    let before = queue_content(&server, &name);
    let first = lock.waiters().await.unwrap();
    assert_eq!(first.len(), 3);
    for (i, waiter) in first.iter().enumerate() {
        assert_eq!(waiter.position, i + 1);
        let client = waiter
            .client
            .as_ref()
            .expect("each worker announced itself");
        assert_eq!(
            client.pid,
            pids[i],
            "position {} is the {i}th to come",
            i + 1
        );
        assert!(waiter.field.starts_with(&client.id), "{waiter:?}");
        assert!(waiter.place_expires_in > Duration::ZERO);
    }
    // The first came before the second, who came before the third.
    let ages: Vec<Duration> = first.iter().map(|w| w.waited.unwrap()).collect();
    assert!(ages[0] >= ages[1] && ages[1] >= ages[2], "{ages:?}");
    tokio::time::sleep(Duration::from_millis(400)).await;
    let second = lock.waiters().await.unwrap();
    for (a, b) in first.iter().zip(&second) {
        assert_eq!(a.field, b.field, "the same order");
        let grew = b.waited.unwrap() - a.waited.unwrap();
        assert!(
            grew >= Duration::from_millis(350) && grew < Duration::from_secs(5),
            "waited {:?} then {:?}",
            a.waited,
            b.waited
        );
    }
    // `status` lists the same waiters.
    let status = lock.status().await.unwrap();
    let fields = |ws: &[redlease::Waiter]| ws.iter().map(|w| w.field.clone()).collect::<Vec<_>>();
    assert_eq!(fields(&status.waiters), fields(&second));
    for _ in 0..20 {
        lock.waiters().await.unwrap();
    }
    assert_eq!(
        queue_content(&server, &name),
        before,
        "reading changed the queue"
    );
    // The script writes nothing: the server runs it as read-only (EVAL_RO refuses a write).
    let hash = key_of(&name);
    let read: redis::Value = redis::cmd("EVAL_RO")
        .arg(include_str!("../lua/waiters.lua"))
        .arg(2)
        .arg(format!("{hash}:q"))
        .arg(format!("{hash}:qd"))
        .arg(1000)
        .query(&mut server.conn())
        .unwrap();
    assert!(
        matches!(read, redis::Value::Array(ref v) if v.len() == 1 + 3 * 3),
        "{read:?}"
    );

    guard.unlock().await.unwrap();
    all_succeed(children).await;
    let served: Vec<u32> = redis::cmd("LRANGE")
        .arg(&order)
        .arg(0)
        .arg(-1)
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(served, pids, "served in the order they were listed");
    assert!(lock.waiters().await.unwrap().is_empty());
    assert!(!exists(&server, &format!("{hash}:qd")), "no record left");
}

/// A waiter that gives up leaves the queue with its record of when it came; an entry written
/// without that record (an older version) is listed with no wait age.
#[tokio::test]
async fn a_waiter_that_gives_up_leaves_no_record_and_an_old_entry_has_no_age() {
    let server = Server::start();
    let name = unique_name("gives-up");
    let [holder, waiter] = clients(&server).await;
    let guard = holder.lock(&name).unwrap().lock().await.unwrap();
    let hash = key_of(&name);
    let options = LockOptions::new().wait(Duration::from_millis(600));
    let lock = waiter.lock(&name).unwrap();
    let (got, listed) = tokio::join!(lock.try_lock_with(options), async {
        support::eventually_async(Duration::from_secs(5), || async {
            lock.waiters().await.unwrap().len() == 1
        })
        .await
    });
    assert!(got.unwrap().is_none());
    assert!(listed, "the waiter was listed while it waited");
    let gone = support::eventually(Duration::from_secs(5), || {
        !exists(&server, &format!("{hash}:qd")) && !exists(&server, &format!("{hash}:q"))
    });
    assert!(gone, "left: {:?}", queue_content(&server, &name));

    // An entry as an older version wrote it: a deadline and terms, no '@' record.
    let mut conn = server.conn();
    let (s, _): (u64, u64) = redis::cmd("TIME").query(&mut conn).unwrap();
    let _: () = redis::cmd("RPUSH")
        .arg(format!("{hash}:q"))
        .arg("old-client:1")
        .query(&mut conn)
        .unwrap();
    let _: () = redis::cmd("HSET")
        .arg(format!("{hash}:qd"))
        .arg("old-client:1")
        .arg(format!("{} 1500 - 0 7", (s + 60) * 1000))
        .query(&mut conn)
        .unwrap();
    let listed = lock.waiters().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].field, "old-client:1");
    assert_eq!(listed[0].waited, None);
    assert!(listed[0].client.is_none(), "nobody announced `old-client`");
    let left = listed[0].place_expires_in;
    assert!(
        left > Duration::from_secs(55) && left <= Duration::from_secs(60),
        "{left:?}"
    );
    guard.unlock().await.unwrap();
}

/// On a Redis Cluster the queue's keys share the lock's slot: the read goes to its primary,
/// for a lock on each primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_read_on_a_cluster() {
    let cluster = Cluster::start();
    let holder = support::cluster_client(&cluster).await;
    let waiter = support::cluster_client(&cluster).await;
    let viewer = support::cluster_client(&cluster).await;
    for (name, _) in cluster.names_per_primary("waited-cl", 1) {
        let guard = holder.lock(&name).unwrap().lock().await.unwrap();
        let waiting = support::spawn_waiter(waiter.lock(&name).unwrap());
        let lock = viewer.lock(&name).unwrap();
        let listed = support::eventually_async(Duration::from_secs(10), || async {
            lock.waiters().await.unwrap().len() == 1
        })
        .await;
        assert!(listed, "{name}: the waiter was never listed");
        let status = lock.status().await.unwrap();
        assert_eq!(status.waiters.len(), 1);
        let listed = &status.waiters[0];
        assert!(listed.field.starts_with(&waiter.id().to_string()));
        assert!(listed.waited.is_some());
        assert_eq!(listed.client.as_ref().unwrap().pid, std::process::id());
        guard.unlock().await.unwrap();
        support::join_within(vec![waiting], Duration::from_secs(10), "the waiter").await;
    }
}

/// The other kinds with a queue list their waiters the same way: a fair lock's, a read-write
/// lock's (by owner, not by wait), a semaphore's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_with_a_queue_lists_its_waiters() {
    let server = Server::start();
    let [a, b, c] = clients(&server).await;

    let name = unique_name("fair-waited");
    let held = a.fair_lock(&name).unwrap().lock().await.unwrap();
    let waiting = support::spawn_waiter(b.lock(&name).unwrap());
    let fair = c.fair_lock(&name).unwrap();
    let listed = support::eventually_async(Duration::from_secs(5), || async {
        fair.waiters().await.unwrap().len() == 1
    })
    .await;
    assert!(listed);
    let waiter = &fair.waiters().await.unwrap()[0];
    assert!(waiter.field.starts_with(&b.id().to_string()));
    assert_eq!(waiter.client.as_ref().unwrap().pid, std::process::id());
    held.unlock().await.unwrap();
    support::join_within(vec![waiting], Duration::from_secs(5), "the fair waiter").await;

    let name = unique_name("rw-waited");
    let writing = a
        .read_write_lock(&name)
        .unwrap()
        .write()
        .lock()
        .await
        .unwrap();
    let rw = b.read_write_lock(&name).unwrap();
    let reader = tokio::spawn(async move {
        let guard = rw.read().lock().await.unwrap();
        guard.unlock().await.unwrap();
    });
    let rw = c.read_write_lock(&name).unwrap();
    let listed = support::eventually_async(Duration::from_secs(5), || async {
        rw.waiters().await.unwrap().len() == 1
    })
    .await;
    assert!(listed);
    let waiter = &rw.waiters().await.unwrap()[0];
    assert!(waiter.field.starts_with(&b.id().to_string()));
    assert!(
        !waiter.field.contains('#'),
        "the owner, not the wait: {}",
        waiter.field
    );
    assert!(waiter.waited.is_some());
    writing.unlock().await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), reader)
        .await
        .unwrap()
        .unwrap();

    let name = unique_name("sem-waited");
    let slots = a.semaphore(&name).unwrap();
    slots.try_set_permits(1).await.unwrap();
    slots.acquire().await.unwrap();
    let other = b.semaphore(&name).unwrap();
    let acquiring = tokio::spawn(async move { other.acquire().await.unwrap() });
    let sem = c.semaphore(&name).unwrap();
    let listed = support::eventually_async(Duration::from_secs(5), || async {
        sem.waiters().await.unwrap().len() == 1
    })
    .await;
    assert!(listed);
    let waiter = &sem.waiters().await.unwrap()[0];
    assert!(waiter.field.starts_with(&b.id().to_string()), "{waiter:?}");
    slots.release(1).await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), acquiring)
        .await
        .unwrap()
        .unwrap();
}

/// Metadata set with the options is shown with the holder to any client, goes with the last
/// release, and is not shown for a later hold without it.
#[tokio::test]
async fn metadata_travels_with_the_hold_into_status() {
    let server = Server::start();
    let name = unique_name("with-metadata");
    let [holder, viewer] = clients(&server).await;
    let lock = holder.lock(&name).unwrap();
    let view = viewer.lock(&name).unwrap();
    let guard = lock
        .lock_with(LockOptions::new().metadata("export job 8812"))
        .await
        .unwrap();
    let status = view.status().await.unwrap();
    assert_eq!(status.holders.len(), 1);
    assert_eq!(
        status.holders[0].metadata.as_deref(),
        Some("export job 8812")
    );
    // A re-entry with other metadata replaces it; one without keeps it.
    let again = lock
        .lock_with(LockOptions::new().metadata("export job 8812, part 2"))
        .await
        .unwrap();
    let plain = lock.lock().await.unwrap();
    let status = view.status().await.unwrap();
    assert_eq!(
        status.holders[0].metadata.as_deref(),
        Some("export job 8812, part 2")
    );
    for g in [plain, again, guard] {
        g.unlock().await.unwrap();
    }
    let announcement = format!("redlease:client:{}", holder.id());
    let fields: Vec<String> = redis::cmd("HKEYS")
        .arg(&announcement)
        .query(&mut server.conn())
        .unwrap();
    assert!(
        !fields.iter().any(|f| f.starts_with("meta ")),
        "the last release leaves it: {fields:?}"
    );
    let guard = lock.lock().await.unwrap();
    let status = view.status().await.unwrap();
    assert_eq!(status.holders[0].metadata, None);
    guard.unlock().await.unwrap();
    // Dropped (released in the background) and taken again at once with new metadata: the
    // removal of the old one never takes the new one with it.
    for i in 0..20 {
        let text = format!("round {i}");
        let guard = lock
            .lock_with(LockOptions::new().metadata(&text))
            .await
            .unwrap();
        let status = view.status().await.unwrap();
        assert_eq!(status.holders[0].metadata.as_deref(), Some(text.as_str()));
        drop(guard);
    }
}

/// A hold that was lost (here: forced open) takes its metadata away when its guard goes, so
/// the owner's next hold without metadata shows none.
#[tokio::test]
async fn a_lost_hold_takes_its_metadata_away_with_its_guard() {
    let server = Server::start();
    let name = unique_name("lost-metadata");
    let [holder, viewer] = clients(&server).await;
    let lock = holder.lock(&name).unwrap().with_owner(Owner::new());
    let guard = lock
        .lock_with(LockOptions::new().metadata("job 1"))
        .await
        .unwrap();
    assert!(lock.force_unlock().await.unwrap());
    assert!(guard.is_lost());
    drop(guard);
    let announcement = format!("redlease:client:{}", holder.id());
    // Removed in the background (the guard was dropped): this runtime's thread must be free.
    let gone = support::eventually_async(Duration::from_secs(5), || async {
        let fields: Vec<String> = redis::cmd("HKEYS")
            .arg(&announcement)
            .query(&mut server.conn())
            .unwrap();
        !fields.iter().any(|f| f.starts_with("meta "))
    })
    .await;
    assert!(gone, "the lost hold's metadata stayed");
    let again = lock.lock().await.unwrap();
    let status = viewer.lock(&name).unwrap().status().await.unwrap();
    assert_eq!(status.holders.len(), 1);
    assert_eq!(status.holders[0].metadata, None);
    again.unlock().await.unwrap();
}

/// Metadata too long or with a control character is refused before anything is taken; kinds
/// that do not store it refuse it.
#[tokio::test]
async fn bad_metadata_is_a_typed_error() {
    let server = Server::start();
    let client = support::client(&server).await;
    let name = unique_name("bad-metadata");
    let lock = client.lock(&name).unwrap();
    let long = "x".repeat(MAX_METADATA_LEN + 1);
    for bad in [long.as_str(), "two\nlines"] {
        let err = lock
            .try_lock_with(LockOptions::new().metadata(bad))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::InvalidMetadata { .. }), "{err}");
    }
    assert!(!lock.is_locked().await.unwrap(), "nothing was taken");
    let longest = "y".repeat(MAX_METADATA_LEN);
    let guard = lock
        .lock_with(LockOptions::new().metadata(&longest))
        .await
        .unwrap();
    let status = lock.status().await.unwrap();
    assert_eq!(
        status.holders[0].metadata.as_deref(),
        Some(longest.as_str())
    );
    guard.unlock().await.unwrap();
    let sem = client.semaphore(&name).unwrap();
    let err = sem
        .try_acquire_with(LockOptions::new().metadata("job"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
}

/// The child side of the multi-process test. Does nothing unless `REDLEASE_WW` is set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "child process of the waiters tests; does nothing unless REDLEASE_WW is set"]
async fn waiting_worker() {
    let Ok(mode) = std::env::var("REDLEASE_WW") else {
        return;
    };
    assert_eq!(mode, "wait");
    let var = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("worker needs {k}"));
    let url = var("REDLEASE_WW_URL");
    let client = Client::builder(url.clone()).build().await.unwrap();
    let lock = client.lock(&var("REDLEASE_WW_NAME")).unwrap();
    let guard = tokio::time::timeout(Duration::from_secs(60), lock.lock())
        .await
        .expect("served within a minute")
        .unwrap();
    let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
    let _: () = redis::cmd("RPUSH")
        .arg(var("REDLEASE_WW_ORDER"))
        .arg(std::process::id())
        .query(&mut conn)
        .unwrap();
    guard.unlock().await.unwrap();
    client.shutdown().await.unwrap();
}
