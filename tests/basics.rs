//! The reentrant lock's core semantics against a real server.

mod support;

use redlease::LockOptions;
use std::time::{Duration, Instant};

use redlease::{Client, Error, Owner};
use support::{
    Server, client, client_with, clients, command_calls, exists, locked_out, owners,
    try_lock_retrying, unique_name, until_free,
};

#[tokio::test]
async fn lock_is_locked_unlock() {
    let server = Server::start();
    let client = client(&server).await;
    let lock = client.lock(&unique_name("basic")).unwrap();
    assert!(!lock.is_locked().await.unwrap());
    let guard = lock.lock().await.unwrap();
    assert!(lock.is_locked().await.unwrap());
    assert_eq!(owners(&server, lock.key()), 1);
    guard.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
    assert!(
        !exists(&server, lock.key()),
        "the hash must be gone after the last release"
    );
}

#[tokio::test]
async fn reentrant_acquire_counts_up_and_down() {
    let server = Server::start();
    let client = client(&server).await;
    let lock = client.lock(&unique_name("reentrant")).unwrap();
    assert_eq!(lock.hold_count().await.unwrap(), 0);
    let g1 = lock.lock().await.unwrap();
    assert_eq!(lock.hold_count().await.unwrap(), 1);
    g1.unlock().await.unwrap();
    assert_eq!(lock.hold_count().await.unwrap(), 0);
    let g1 = lock.lock().await.unwrap();
    let g2 = lock.lock().await.unwrap();
    assert_eq!(lock.hold_count().await.unwrap(), 2);
    assert!(lock.is_held_by_current_owner().await.unwrap());
    g2.unlock().await.unwrap();
    assert_eq!(lock.hold_count().await.unwrap(), 1);
    assert!(lock.is_locked().await.unwrap());
    g1.unlock().await.unwrap();
    assert_eq!(lock.hold_count().await.unwrap(), 0);
    assert!(!lock.is_locked().await.unwrap());
}

/// Each release of a re-entered lock is one script call: an inner one (holds remain) goes in the
/// short form, the last in the lean form. (The lean form once went for every release, and an
/// inner one, answered FULL, went again in the short form: two calls.)
#[tokio::test]
async fn every_release_of_a_reentered_lock_is_one_script_call() {
    let server = Server::start();
    let client = client(&server).await;
    let lock = client.lock(&unique_name("one-call")).unwrap();
    // The scripts loaded first: NOSCRIPT's load and resend are not what is counted.
    lock.lock().await.unwrap().unlock().await.unwrap();
    let outer = lock.lock().await.unwrap();
    let inner = lock.lock().await.unwrap();
    let before = command_calls(&server, "evalsha");
    inner.unlock().await.unwrap();
    assert_eq!(
        command_calls(&server, "evalsha"),
        before + 1,
        "the inner release"
    );
    assert_eq!(lock.hold_count().await.unwrap(), 1);
    outer.unlock().await.unwrap();
    assert_eq!(
        command_calls(&server, "evalsha"),
        before + 2,
        "the last release"
    );
    assert!(!lock.is_locked().await.unwrap());
}

#[tokio::test]
async fn other_task_and_other_client_are_excluded_until_last_release() {
    let server = Server::start();
    let [a, b] = clients(&server).await;
    let name = unique_name("exclude");
    let lock = a.lock(&name).unwrap();
    let g1 = lock.lock().await.unwrap();
    let g2 = lock.lock().await.unwrap();

    let same_client_other_task = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.try_lock().await.unwrap().is_some() })
    };
    assert!(
        !same_client_other_task.await.unwrap(),
        "another task must be excluded"
    );
    let other = b.lock(&name).unwrap();
    assert!(
        other.try_lock().await.unwrap().is_none(),
        "another client must be excluded"
    );

    g2.unlock().await.unwrap();
    assert!(
        other.try_lock().await.unwrap().is_none(),
        "one hold remains"
    );
    g1.unlock().await.unwrap();
    let g = other
        .try_lock()
        .await
        .unwrap()
        .expect("free after the last release");
    assert_eq!(other.hold_count().await.unwrap(), 1);
    g.unlock().await.unwrap();
}

#[tokio::test]
async fn non_owner_unlock_is_rejected() {
    let server = Server::start();
    let [a, b] = clients(&server).await;
    let name = unique_name("nonowner");
    let held = a.lock(&name).unwrap().lock().await.unwrap();
    let err = b.lock(&name).unwrap().unlock().await.unwrap_err();
    assert!(err.is_not_held(), "{err}");
    // Another task of the holder's own client is not the owner either.
    let lock = a.lock(&name).unwrap();
    let err = tokio::spawn(async move { lock.unlock().await })
        .await
        .unwrap()
        .unwrap_err();
    assert!(err.is_not_held(), "{err}");
    let lock = a.lock(&name).unwrap();
    assert_eq!(
        lock.hold_count().await.unwrap(),
        1,
        "the holder keeps its hold"
    );
    held.unlock().await.unwrap();
}

/// `Lock::unlock` by the owner releases its last hold from under a guard that still lives:
/// the guard is told at once that it holds nothing (before, only when its lease ran out), and
/// its own unlock says so.
#[tokio::test]
async fn unlock_by_name_under_a_live_guard_tells_that_guard() {
    let server = Server::start();
    let [a] = clients(&server).await;
    let lock = a.lock(&unique_name("by-name")).unwrap();
    let guard = lock.lock().await.unwrap();
    lock.unlock().await.unwrap();
    assert!(
        guard.is_lost(),
        "the guard still claims a hold released by name"
    );
    assert!(guard.unlock().await.unwrap_err().is_lease_lost());
}

#[tokio::test]
async fn fixed_lease_expires_and_late_unlock_reports_it() {
    let server = Server::start();
    let [a, b] = clients(&server).await;
    let name = unique_name("lease");
    let start = Instant::now();
    let guard = a
        .lock(&name)
        .unwrap()
        .lock_with(LockOptions::new().lease(Duration::from_secs(2)))
        .await
        .unwrap();
    let other = b.lock(&name).unwrap();
    let g = other
        .try_lock_with(
            LockOptions::new()
                .wait(Duration::from_secs(5))
                .lease(Duration::from_secs(10)),
        )
        .await
        .unwrap()
        .expect("acquired after the lease expired");
    let took = start.elapsed();
    assert!(took < Duration::from_millis(2100), "took {took:?}");
    assert!(
        took >= Duration::from_millis(1900),
        "took {took:?}: acquired before expiry?"
    );
    assert!(guard.is_lost());
    let err = guard.unlock().await.unwrap_err();
    assert!(err.is_lease_lost(), "{err}");
    assert_eq!(
        other.hold_count().await.unwrap(),
        1,
        "the new holder is untouched"
    );
    g.unlock().await.unwrap();
}

#[tokio::test]
async fn partial_unlock_resets_ttl_to_the_lease() {
    let server = Server::start();
    let client = client(&server).await;
    let lock = client.lock(&unique_name("ttl")).unwrap();
    let lease = Duration::from_secs(5);
    let g1 = lock
        .lock_with(LockOptions::new().lease(lease))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let left = lock.remaining_lease().await.unwrap().duration().unwrap();
    assert!(left < Duration::from_millis(4000), "{left:?}");
    let g2 = lock
        .lock_with(LockOptions::new().lease(lease))
        .await
        .unwrap();
    let left = lock.remaining_lease().await.unwrap().duration().unwrap();
    assert!(
        left > Duration::from_millis(4800),
        "re-entry resets the TTL: {left:?}"
    );
    tokio::time::sleep(Duration::from_millis(1200)).await;
    g2.unlock().await.unwrap();
    let left = lock.remaining_lease().await.unwrap().duration().unwrap();
    assert!(
        left > Duration::from_millis(4800),
        "partial unlock resets the TTL: {left:?}"
    );
    g1.unlock().await.unwrap();
    assert_eq!(
        lock.remaining_lease().await.unwrap(),
        redlease::RemainingLease::Free
    );
}

#[tokio::test]
async fn try_lock_with_a_wait_gives_up_after_the_wait() {
    let server = Server::start();
    let [a, b] = clients(&server).await;
    let name = unique_name("wait");
    let held = a.lock(&name).unwrap().lock().await.unwrap();
    let start = Instant::now();
    let got = b
        .lock(&name)
        .unwrap()
        .try_lock_with(LockOptions::new().wait(Duration::from_secs(1)))
        .await
        .unwrap();
    let took = start.elapsed();
    assert!(got.is_none());
    assert!(
        took >= Duration::from_secs(1) && took <= Duration::from_millis(1300),
        "{took:?}"
    );
    held.unlock().await.unwrap();
}

#[tokio::test]
async fn non_reentrant_lock_rejects_reentry() {
    let server = Server::start();
    let client = client(&server).await;
    let lock = client.lock(&unique_name("plain")).unwrap().reentrant(false);
    let g = lock.lock().await.unwrap();
    let err = lock.try_lock().await.unwrap_err();
    assert!(matches!(err, Error::WouldDeadlock { .. }), "{err}");
    assert_eq!(
        lock.hold_count().await.unwrap(),
        1,
        "the failed re-entry changed nothing"
    );
    g.unlock().await.unwrap();
}

#[tokio::test]
async fn explicit_owners_exclude_each_other_inside_one_task() {
    let server = Server::start();
    let client = client(&server).await;
    let name = unique_name("owners");
    let first = client.lock(&name).unwrap().with_owner(Owner::new());
    let second = client.lock(&name).unwrap().with_owner(Owner::new());
    let g = first.lock().await.unwrap();
    assert!(
        second.try_lock().await.unwrap().is_none(),
        "a second owner in the same task is excluded"
    );
    // The default owner (this task) is a third owner.
    assert!(locked_out(&client, &name).await);
    g.unlock().await.unwrap();
    let g = second.try_lock().await.unwrap().expect("free again");
    g.unlock().await.unwrap();
}

#[tokio::test]
async fn fencing_tokens_increase_across_clients_and_keep_on_reentry() {
    let server = Server::start();
    let name = unique_name("fence");
    let mut last = 0;
    for _ in 1..=5u64 {
        let c = client(&server).await;
        let lock = c.lock(&name).unwrap().fenced(true);
        let g = lock.lock().await.unwrap();
        let token = g.fencing_token().unwrap();
        assert!(token > last);
        last = token;
        let again = lock.lock().await.unwrap();
        assert_eq!(
            again.fencing_token(),
            Some(token),
            "re-entry keeps the token"
        );
        again.unlock().await.unwrap();
        g.unlock().await.unwrap();
    }
}

#[tokio::test]
async fn guard_moved_to_another_task_unlocks_its_own_hold() {
    let server = Server::start();
    let client = client(&server).await;
    let lock = client.lock(&unique_name("moved")).unwrap();
    let g = lock.lock().await.unwrap();
    tokio::spawn(async move { g.unlock().await })
        .await
        .unwrap()
        .unwrap();
    assert!(!lock.is_locked().await.unwrap());
}

#[tokio::test]
async fn dropped_guard_releases_in_the_background() {
    let server = Server::start();
    let client = client(&server).await;
    let lock = client.lock(&unique_name("drop")).unwrap();
    drop(lock.lock().await.unwrap());
    assert!(
        until_free(&lock, Duration::from_secs(2)).await,
        "the drop fallback must release the lock"
    );
    assert_eq!(
        client.held_count(),
        0,
        "and the hold left the registry at once"
    );
}

#[tokio::test]
async fn lazy_client_builds_while_the_server_is_down_and_works_once_it_is_up() {
    let mut server = Server::start();
    server.kill();
    let client = Client::builder(server.url())
        .timeout(Duration::from_millis(300))
        .lazy(true)
        .build()
        .await
        .expect("a lazy client does not connect in build");
    let lock = client.lock(&unique_name("lazy")).unwrap();
    let started = Instant::now();
    let err = lock.try_lock().await.unwrap_err();
    assert!(err.is_unavailable(), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    server.restart();
    let guard = try_lock_retrying(&lock, Duration::from_secs(5))
        .await
        .expect("locks work once the server is up");
    assert_eq!(owners(&server, lock.key()), 1);
    guard.unlock().await.unwrap();
}

#[tokio::test]
async fn shutdown_wakes_waiters_and_none_of_them_takes_the_lock() {
    let server = Server::start();
    let holder = client(&server).await;
    let name = unique_name("shutdown");
    let lock = holder.lock(&name).unwrap();
    let guard = lock.lock().await.unwrap();
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let lock = lock.clone();
            tokio::spawn(async move { lock.lock().await.map(std::mem::forget) })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    holder.shutdown().await.unwrap();
    for waiter in waiters {
        let outcome = tokio::time::timeout(Duration::from_secs(3), waiter)
            .await
            .expect("a waiter must be woken by shutdown")
            .unwrap();
        assert!(matches!(outcome, Err(Error::Shutdown)), "{outcome:?}");
    }
    assert!(
        guard.unlock().await.is_err(),
        "shutdown released it already"
    );
    assert!(
        !exists(&server, lock.key()),
        "nobody may hold the lock after shutdown"
    );
}

#[tokio::test]
async fn reentry_with_a_shorter_lease_does_not_shorten_the_outer_hold() {
    let server = Server::start();
    let a = client(&server).await;
    let name = unique_name("shorter");
    let outer = a.lock(&name).unwrap().lock().await.unwrap();
    let inner = a
        .lock(&name)
        .unwrap()
        .lock_with(LockOptions::new().lease(Duration::from_secs(1)))
        .await
        .unwrap();
    let ttl = a
        .lock(&name)
        .unwrap()
        .remaining_lease()
        .await
        .unwrap()
        .duration()
        .unwrap();
    assert!(
        ttl > Duration::from_secs(20),
        "re-entry shortened the lease to {ttl:?}"
    );
    inner.unlock().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let b = client(&server).await;
    assert!(locked_out(&b, &name).await, "still held");
    assert!(!outer.is_lost());
    outer.unlock().await.unwrap();
}

#[tokio::test]
async fn lost_resolves_when_validity_runs_out_while_redis_is_frozen() {
    let server = Server::start();
    let a = client_with(&server, |b| {
        b.watchdog_lease(Duration::from_secs(3))
            .timeout(Duration::from_millis(500))
    })
    .await;
    let lock = a.lock(&unique_name("frozen")).unwrap();
    let started = Instant::now();
    let guard = lock.lock().await.unwrap();
    server.pause();
    let lost = tokio::time::timeout(Duration::from_secs(6), guard.lost()).await;
    let after = started.elapsed();
    server.resume();
    assert!(
        lost.is_ok(),
        "lost() must resolve while Redis cannot confirm the lease"
    );
    // Validity is the lease minus drift from the acquisition; the holder must hear of the
    // loss then, not a renewal period (plus a timeout) later.
    assert!(
        after >= Duration::from_millis(2500),
        "lost too early: {after:?}"
    );
    assert!(
        after < Duration::from_millis(3600),
        "lost too late: {after:?}"
    );
    assert!(guard.is_lost());
    assert!(guard.unlock().await.unwrap_err().is_lease_lost());
}

/// `force_unlock` through the holder's own client loses its guards at once (every owner's),
/// rather than at the next renewal; another client's guard learns it at its next renewal.
#[tokio::test]
async fn force_unlock_loses_this_clients_guards_at_once() {
    let server = Server::start();
    let [a, b] = clients(&server).await;
    let name = unique_name("forced");
    let lock = a.lock(&name).unwrap();
    let outer = lock.lock().await.unwrap();
    let inner = lock.lock().await.unwrap();
    assert!(!outer.is_lost());
    assert!(lock.force_unlock().await.unwrap());
    assert!(outer.is_lost() && inner.is_lost());
    tokio::time::timeout(Duration::from_millis(100), outer.lost())
        .await
        .expect("lost() resolves at once");
    assert_eq!(a.held_count(), 0);
    assert!(outer.unlock().await.unwrap_err().is_lease_lost());
    // Free: the same owner takes it afresh, and it counts from one.
    let again = lock.lock().await.unwrap();
    assert_eq!(lock.hold_count().await.unwrap(), 1);
    drop(inner);
    again.unlock().await.unwrap();
    // Forced from another client: not lost here until this client looks.
    let theirs = b.lock(&name).unwrap().lock().await.unwrap();
    assert!(a.lock(&name).unwrap().force_unlock().await.unwrap());
    assert!(!theirs.is_lost());
    drop(theirs);
}

/// Two guards of one hold, and one of its holds released by name: after the other guard's
/// release, the guard left holds nothing on the server, and is told so (it used to keep
/// claiming the lock while another client could take it).
#[tokio::test]
async fn unlock_by_name_under_two_guards_tells_the_one_left() {
    let server = Server::start();
    let [a, b] = clients(&server).await;
    let name = unique_name("by-name-two");
    let lock = a.lock(&name).unwrap();
    let first = lock.lock().await.unwrap();
    let second = lock.lock().await.unwrap();
    lock.unlock().await.unwrap();
    assert!(!first.is_lost() && !second.is_lost(), "a hold remains");
    first.unlock().await.unwrap();
    assert!(
        b.lock(&name).unwrap().try_lock().await.unwrap().is_some(),
        "the lock is free on the server"
    );
    assert!(second.is_lost(), "the guard left still claims the lock");
    assert!(second.unlock().await.unwrap_err().is_lease_lost());
}
