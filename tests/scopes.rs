//! Lock scopes (`Lock::run`): each body is its own owner, nested bodies re-enter, concurrent
//! bodies in one task exclude each other, a lost lease cancels the body.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use redlease::{Client, LockOptions};
use support::Server;

/// Marks a critical section of one lock name as entered; counts entries that found it taken.
#[derive(Default)]
struct Overlaps {
    inside: [AtomicBool; 4],
    overlaps: AtomicUsize,
}

impl Overlaps {
    fn enter(&self, i: usize) {
        if self.inside[i].swap(true, Ordering::SeqCst) {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn leave(&self, i: usize) {
        self.inside[i].store(false, Ordering::SeqCst);
    }
}

/// Ordinary service code: `for_each_concurrent(16, ..)` over 1,000 orders in ONE task, each
/// locking its account (4 names) with `run` and updating a counter non-atomically.
#[tokio::test]
async fn for_each_concurrent_under_run_keeps_exact_counts() {
    let server = Server::start();
    let client = support::client(&server).await;
    let overlaps = Arc::new(Overlaps::default());
    futures_util::stream::iter(0..1_000usize)
        .for_each_concurrent(16, |order| {
            let (client, overlaps) = (client.clone(), overlaps.clone());
            async move {
                let account = order % 4;
                let lock = client.lock(&format!("account:{account}")).unwrap();
                lock.run(|_held| async {
                    overlaps.enter(account);
                    let counter = format!("counter:{account}");
                    support::increment_unprotected(&client, &counter).await;
                    overlaps.leave(account);
                })
                .await
                .unwrap();
            }
        })
        .await;
    assert_eq!(
        overlaps.overlaps.load(Ordering::SeqCst),
        0,
        "bodies overlapped"
    );
    for account in 0..4 {
        let counter = support::read_counter(&server, &format!("counter:{account}"));
        assert_eq!(counter, 250, "account {account} lost updates");
        assert!(!support::exists(
            &server,
            &support::key_of(&format!("account:{account}"))
        ));
    }
    assert_eq!(client.held_count(), 0);
}

/// `join!` of two bodies in one task: the second waits for the first.
#[tokio::test]
async fn joined_run_bodies_exclude_each_other() {
    let server = Server::start();
    let client = support::client(&server).await;
    let lock = client.lock("joined-run").unwrap();
    let inside = AtomicBool::new(false);
    let body = |_held| async {
        assert!(
            !inside.swap(true, Ordering::SeqCst),
            "the other body is inside"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        inside.store(false, Ordering::SeqCst);
    };
    let (a, b) = tokio::join!(lock.run(body), lock.run(body));
    a.unwrap();
    b.unwrap();
    // A single attempt from a body while the other body holds it fails, too.
    let (first, second) = tokio::join!(
        lock.run(|_| tokio::time::sleep(Duration::from_millis(100))),
        async {
            tokio::time::sleep(Duration::from_millis(30)).await;
            lock.try_run(LockOptions::new().wait(Duration::ZERO), |_| async {})
                .await
        }
    );
    first.unwrap();
    assert_eq!(second.unwrap(), None, "a concurrent body got in");
}

/// Nested acquisitions inside a body re-enter: a nested `run`, `lock()` on another handle of
/// the same lock, and a nested `run` inside a nested `run` of another lock.
#[tokio::test]
async fn nested_acquisitions_inside_a_body_reenter() {
    let server = Server::start();
    let client = support::client(&server).await;
    let lock = client.lock("nested-run").unwrap();
    let other = client.lock("nested-other").unwrap();
    let key = support::key_of("nested-run");
    let (c, k) = (&client, key.as_str());
    let server = &server;
    lock.run(|outer| async move {
        assert_eq!(support::owners(server, k), 1);
        let again = c.lock("nested-run").unwrap();
        let guard = tokio::time::timeout(Duration::from_secs(2), again.lock())
            .await
            .expect("lock() inside the body must re-enter, not wait")
            .unwrap();
        assert_eq!(again.hold_count().await.unwrap(), 2);
        guard.unlock().await.unwrap();
        let inner = c.lock("nested-other").unwrap();
        inner
            .run(|_| async {
                // Two scopes deep: the outer scope holds `nested-run`, so this re-enters.
                let deep = c.lock("nested-run").unwrap();
                let n = tokio::time::timeout(
                    Duration::from_secs(2),
                    deep.run(|_| async { deep.hold_count().await.unwrap() }),
                )
                .await
                .expect("a nested run must re-enter, not wait")
                .unwrap();
                assert_eq!(n, 2, "the nested run counts on the outer hold");
            })
            .await
            .unwrap();
        assert!(!outer.is_lost());
    })
    .await
    .unwrap();
    assert!(!support::exists(server, &key));
    assert!(!other.is_locked().await.unwrap());
}

/// A lost lease cancels the body and `run` says so; the body's work after the loss never runs.
#[tokio::test]
async fn a_lost_lease_cancels_the_body() {
    let server = Server::start();
    let client = support::client_with_lease(&server, Duration::from_millis(600)).await;
    let lock = client.lock("lost-run").unwrap();
    let finished = AtomicBool::new(false);
    let outcome = tokio::time::timeout(
        Duration::from_secs(10),
        lock.run(|_held| async {
            // Deleted behind our back: the next renewal (every 200 ms) finds it gone.
            let deleted: u64 = redis::cmd("DEL")
                .arg(support::key_of("lost-run"))
                .query(&mut server.conn())
                .unwrap();
            assert_eq!(deleted, 1);
            tokio::time::sleep(Duration::from_secs(5)).await;
            finished.store(true, Ordering::SeqCst);
        }),
    )
    .await
    .expect("run returns once the loss is seen");
    assert!(
        outcome.as_ref().is_err_and(|e| e.is_lease_lost()),
        "{outcome:?}"
    );
    assert!(
        !finished.load(Ordering::SeqCst),
        "the body ran on after the loss"
    );
    assert_eq!(client.held_count(), 0);
}

/// A busy lock: `try_run` with a zero wait is one attempt and returns `None` without running
/// the body; with a lease, the body runs under a fixed lease that is not renewed.
#[tokio::test]
async fn try_run_returns_none_when_busy_and_honours_a_fixed_lease() {
    let server = Server::start();
    let [holder, other] = support::clients::<2>(&server).await;
    let guard = holder.lock("busy-run").unwrap().lock().await.unwrap();
    let lock = other.lock("busy-run").unwrap();
    let ran = AtomicBool::new(false);
    let once = LockOptions::new().wait(Duration::ZERO);
    let outcome = lock
        .try_run(once, |_| async { ran.store(true, Ordering::SeqCst) })
        .await
        .unwrap();
    assert_eq!(outcome, None);
    assert!(!ran.load(Ordering::SeqCst));
    guard.unlock().await.unwrap();
    let leased = LockOptions::new().lease(Duration::from_secs(7));
    let server = &server;
    let ttl = lock
        .try_run(leased, |held| async move {
            assert!(held.fencing_token().is_none());
            support::pttl(server, &support::key_of("busy-run"))
        })
        .await
        .unwrap()
        .expect("free now");
    assert!(
        (5_000..=7_000).contains(&ttl),
        "fixed lease of 7 s, pttl {ttl}"
    );
    assert!(!support::exists(server, &support::key_of("busy-run")));
}

/// Bodies in different tasks exclude each other as before, and `run` inside a spawned task of
/// a body is that task's own owner (it does not re-enter the body's hold).
#[tokio::test]
async fn a_task_spawned_from_a_body_is_its_own_owner() {
    let server = Server::start();
    let client: Client = support::client(&server).await;
    let lock = client.lock("spawned-run").unwrap();
    lock.run(|_| async {
        let inner = lock.clone();
        let spawned = tokio::spawn(async move { inner.try_lock().await.unwrap().is_none() });
        assert!(
            spawned.await.unwrap(),
            "a spawned task re-entered the body's hold"
        );
    })
    .await
    .unwrap();
}

/// Work the body hands to another task stops when the body is over: the scope's `lost()`
/// resolves once the lock is released, as at a loss (before, it waited for the lease, and a
/// task looping while `!is_lost()` ran on without the lock).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_handed_off_by_the_body_stops_when_the_scope_ends() {
    let server = Server::start();
    let client = support::client(&server).await;
    let lock = client.lock(&support::unique_name("scope-handed")).unwrap();
    // The task's handle comes back in a tuple: the body's output is not itself awaited.
    let (worker,) = lock
        .run(|held| async move {
            assert!(!held.is_lost());
            let worker = tokio::spawn(async move {
                held.lost().await;
                held.is_lost()
            });
            (worker,)
        })
        .await
        .unwrap();
    let stopped = tokio::time::timeout(Duration::from_secs(1), worker).await;
    assert!(
        matches!(stopped, Ok(Ok(true))),
        "the handed-off work went on after the scope ended: {stopped:?}"
    );
}
