//! Cancelled futures leave nothing behind: no key, no hold, no renewal, no subscription.

mod support;

use std::time::{Duration, Instant};

use redlease::{Client, Lock};
use support::{
    Server, channels, client, clients, eventually_async, exists, spawn_waiter, unique_name,
    until_free, until_no_channels, with_precise_timeout, woken_after_unlock,
};

/// After the holder releases, nothing of the cancelled waiter may appear: the key stays absent
/// (a leftover hold or renewal would recreate or keep it), and the waiter's client holds
/// nothing and listens on nothing.
async fn assert_nothing_left(server: &Server, waiter: &Client, key: &str) {
    assert_eq!(waiter.held_count(), 0, "the cancelled waiter keeps a hold");
    let stats = waiter.renew_now().await.unwrap();
    assert_eq!(
        stats.locks, 0,
        "the cancelled waiter still renews {stats:?}"
    );
    // Longer than any in-flight request could take to land.
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(
        !exists(server, key),
        "the key reappeared after the cancelled acquisition"
    );
    assert_eq!(waiter.held_count(), 0);
    let unsubscribed = until_no_channels(server, Duration::from_secs(2)).await;
    assert!(unsubscribed, "left subscribed: {:?}", channels(server));
}

/// After a storm of cancelled acquisitions of `lock`, its client soon holds nothing and the lock
/// is free.
async fn assert_left_clean(client: &Client, lock: &Lock) {
    let clean = eventually_async(Duration::from_secs(3), || async {
        client.held_count() == 0 && !lock.is_locked().await.unwrap()
    })
    .await;
    assert!(
        clean,
        "left behind: held_count {}, status {:?}",
        client.held_count(),
        lock.status().await.unwrap()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timed_out_lock_leaves_no_hold_and_no_renewal() {
    support::init_tracing();
    let server = Server::start();
    let [holder, waiter] = clients(&server).await;
    let name = unique_name("timeout");
    let held = holder.lock(&name).unwrap().lock().await.unwrap();
    let lock = waiter.lock(&name).unwrap();
    let start = Instant::now();
    let outcome = tokio::time::timeout(Duration::from_millis(500), lock.lock()).await;
    assert!(
        outcome.is_err(),
        "lock() returned while another client held it"
    );
    assert!(start.elapsed() < Duration::from_secs(2));
    assert_eq!(waiter.held_count(), 0);
    held.unlock().await.unwrap();
    assert_nothing_left(&server, &waiter, lock.key()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aborted_lock_task_leaves_no_hold_and_no_renewal() {
    let server = Server::start();
    let [holder, waiter] = clients(&server).await;
    let name = unique_name("abort");
    let held = holder.lock(&name).unwrap().lock().await.unwrap();
    let lock = waiter.lock(&name).unwrap();
    let task = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.lock().await.map(std::mem::forget) })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    task.abort();
    let joined = task.await;
    assert!(
        joined.as_ref().is_err_and(|e| e.is_cancelled()),
        "the task was not cancelled: {joined:?}"
    );
    held.unlock().await.unwrap();
    assert_nothing_left(&server, &waiter, lock.key()).await;
}

/// The nasty case: the future is dropped while the acquire request is on the wire, so the
/// server may grant the lock to a caller who is gone. That grant must be given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_cancelled_around_grant_time_leaves_nothing() {
    support::init_tracing();
    let server = Server::start();
    let client = client(&server).await;
    let lock = client.lock(&unique_name("grant-race")).unwrap();
    let (mut granted, mut cancelled) = (0, 0);
    for _ in 0..200 {
        let budget = Duration::from_micros(rand::random_range(0..300));
        match with_precise_timeout(budget, lock.lock()).await {
            Some(guard) => {
                granted += 1;
                guard.unwrap().unlock().await.unwrap();
            }
            None => cancelled += 1,
        }
    }
    eprintln!("{granted} acquisitions completed, {cancelled} cancelled");
    assert!(
        cancelled > 0,
        "no attempt was cancelled; the test proves nothing"
    );
    assert_left_clean(&client, &lock).await;
    // Nothing renews it back into existence either.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!exists(&server, lock.key()));
    assert_eq!(client.renew_now().await.unwrap().locks, 0);
}

/// The same from fresh tasks, aborted at random moments, each a different owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_tasks_aborted_around_grant_time_leave_nothing() {
    let server = Server::start();
    let client = client(&server).await;
    let lock = client.lock(&unique_name("abort-race")).unwrap();
    // How long a task takes to get and give back the free lock here: the abort budgets straddle
    // it, so that some tasks are aborted before the grant and some after, however loaded the
    // machine is.
    let mut took = Vec::new();
    for _ in 0..10 {
        let started = Instant::now();
        spawn_waiter(lock.clone()).await.unwrap();
        took.push(started.elapsed());
    }
    took.sort();
    // A low quantile: the first, cold attempts are the slowest.
    let max_budget = (2 * took[2]).max(Duration::from_micros(300));
    let (mut completed, mut aborted) = (0, 0);
    for _ in 0..100 {
        let mut task = {
            let lock = lock.clone();
            tokio::spawn(async move {
                let guard = lock.lock().await.unwrap();
                guard.unlock().await.unwrap();
            })
        };
        // Aborted after `budget`, timed precisely: tokio's sleep would round it up to a whole
        // millisecond, by which time almost every task has finished.
        let budget = rand::random_range(Duration::ZERO..max_budget);
        let joined = match with_precise_timeout(budget, &mut task).await {
            Some(joined) => joined,
            None => {
                task.abort();
                task.await
            }
        };
        match joined {
            Ok(()) => completed += 1,
            Err(e) if e.is_cancelled() => aborted += 1,
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }
    eprintln!("{completed} tasks completed, {aborted} aborted (budgets below {max_budget:?})");
    assert!(aborted > 0, "no task was aborted; the test proves nothing");
    assert!(
        completed > 0,
        "no task got the lock before its abort; the grant-time race was never reached"
    );
    assert_left_clean(&client, &lock).await;
}

/// Drop cannot await, but it must update the local state at once: the watchdog stops renewing
/// the hold right away, not whenever the spawned release gets to run.
#[tokio::test(flavor = "current_thread")]
async fn dropped_guard_leaves_the_registry_at_once() {
    let server = Server::start();
    let client = client(&server).await;
    let lock = client.lock(&unique_name("drop-local")).unwrap();
    let guard = lock.lock().await.unwrap();
    assert_eq!(client.held_count(), 1);
    drop(guard);
    // No await in between: on a current-thread runtime the spawned release has not run yet.
    assert_eq!(
        client.held_count(),
        0,
        "the dropped guard's hold is still registered (and renewed)"
    );
    assert!(
        until_free(&lock, Duration::from_secs(2)).await,
        "the background release did not happen"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_unlock_still_releases() {
    let server = Server::start();
    let client = client(&server).await;
    let lock = client.lock(&unique_name("unlock-cancel")).unwrap();
    let guard = lock.lock().await.unwrap();
    // Dropped after its first poll, with the release on the wire or not yet sent.
    let _ = tokio::time::timeout(Duration::from_micros(1), guard.unlock()).await;
    assert_eq!(client.held_count(), 0);
    assert!(
        until_free(&lock, Duration::from_secs(2)).await,
        "the cancelled unlock did not finish in the background"
    );
}

/// A waiter cancelled while waiting must not swallow the wake-up meant for another waiter of
/// the same client (the other would then sleep until the 30 s lease ran out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_waiter_does_not_swallow_the_wake_up() {
    let server = Server::start();
    let [holder, waiters] = clients(&server).await;
    let name = unique_name("swallow");
    let held = holder.lock(&name).unwrap().lock().await.unwrap();
    let first = {
        let lock = waiters.lock(&name).unwrap();
        tokio::spawn(async move { lock.lock().await.map(std::mem::forget) })
    };
    let second = spawn_waiter(waiters.lock(&name).unwrap());
    tokio::time::sleep(Duration::from_millis(300)).await;
    first.abort();
    assert!(first.await.unwrap_err().is_cancelled());
    let took = woken_after_unlock(held, second, Duration::from_secs(5)).await;
    assert!(took < Duration::from_secs(1), "woken only after {took:?}");
    assert_eq!(waiters.held_count(), 0);
}

/// Waiters cancelled at random moments of their first wait, many while their SUBSCRIBE is on
/// the wire: once they are all gone, the server must hold no subscription for them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_cancelled_while_subscribing_leave_no_channel() {
    let server = Server::start();
    let [holder, waiters] = clients(&server).await;
    let mut held = Vec::new();
    let mut locks = Vec::new();
    // A fresh name per round, so every round subscribes anew.
    for _ in 0..100 {
        let name = unique_name("sub-cancel");
        held.push(holder.lock(&name).unwrap().lock().await.unwrap());
        let lock = waiters.lock(&name).unwrap();
        let budget = Duration::from_micros(rand::random_range(0..1500));
        let outcome = with_precise_timeout(budget, lock.lock()).await;
        assert!(outcome.is_none(), "lock() returned while the lock was held");
        locks.push(lock);
    }
    assert_eq!(waiters.held_count(), 0);
    let clean = until_no_channels(&server, Duration::from_secs(3)).await;
    let left = channels(&server);
    assert!(clean, "{} channels left subscribed: {:?}", left.len(), left);
    for guard in held {
        guard.unlock().await.unwrap();
    }
}

/// A shutdown dropped half-way (here while it waits for a release already in the background)
/// still gives every hold back: once begun, a later shutdown would do nothing, so it must end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_shutdown_still_gives_everything_back() {
    let server = Server::start();
    let client = client(&server).await;
    let kept_name = unique_name("shutdown-cancel-kept");
    let guard = client.lock(&kept_name).unwrap().lock().await.unwrap();
    let dropped = client
        .lock(&unique_name("shutdown-cancel-dropped"))
        .unwrap();
    let dropped = dropped.lock().await.unwrap();
    // Every command waits 600 ms: the dropped guard's release is still in flight when the
    // shutdown begins, and the shutdown waits for it first.
    server.client_pause(600, true);
    drop(dropped);
    let cancelled = tokio::time::timeout(Duration::from_millis(100), client.shutdown()).await;
    assert!(cancelled.is_err(), "the shutdown ended within the pause");
    let given_back = support::eventually(Duration::from_secs(3), || {
        !exists(&server, &support::key_of(&kept_name))
    });
    assert!(given_back, "a shutdown dropped half-way left a hold");
    assert!(guard.is_lost(), "the kept guard was not told");
    assert_eq!(client.held_count(), 0);
}

/// A second shutdown while the first still gives holds back answers only once they are back,
/// even when the first call's future is kept but no longer polled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_shutdown_answers_once_the_first_has_ended() {
    let server = Server::start();
    let client = client(&server).await;
    let name = unique_name("shutdown-twice");
    let guard = client.lock(&name).unwrap().lock().await.unwrap();
    server.client_pause(400, true);
    let first = client.shutdown();
    tokio::pin!(first);
    let polled = tokio::time::timeout(Duration::from_millis(50), &mut first).await;
    assert!(polled.is_err(), "the first shutdown ended within the pause");
    let second = tokio::time::timeout(Duration::from_secs(5), client.shutdown()).await;
    second
        .expect("the second shutdown hung while the first was not polled")
        .unwrap();
    assert!(guard.is_lost(), "answered before the guard was told");
    assert!(
        !exists(&server, &support::key_of(&name)),
        "answered before the hold was given back"
    );
    first.await.unwrap();
}
