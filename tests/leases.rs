//! Single attempts with fixed leases, zero waits, extending a lease, and reading what is left.

mod support;

use redlease::LockOptions;
use std::time::Duration;

use redlease::{MultiLock, RemainingLease};
use support::Server;

/// `try_lock_with` a zero wait and a lease: one attempt, a fixed lease, no renewal; `None` when
/// held elsewhere.
#[tokio::test]
async fn zero_wait_with_a_lease_is_one_attempt_with_a_fixed_lease() {
    let server = Server::start();
    let [a, b] = support::clients::<2>(&server).await;
    let key = support::key_of("single-leased");
    let guard = a
        .lock("single-leased")
        .unwrap()
        .try_lock_with(
            LockOptions::new()
                .wait(Duration::ZERO)
                .lease(Duration::from_secs(4)),
        )
        .await
        .unwrap()
        .expect("free");
    let ttl = support::pttl(&server, &key);
    assert!((3_000..=4_000).contains(&ttl), "pttl {ttl}");
    let started = std::time::Instant::now();
    let other = b.lock("single-leased").unwrap();
    assert!(
        other
            .try_lock_with(
                LockOptions::new()
                    .wait(Duration::ZERO)
                    .lease(Duration::from_secs(4))
            )
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "a single attempt must not wait"
    );
    guard.unlock().await.unwrap();
    assert!(!support::exists(&server, &key));
}

/// A zero wait is one attempt for Lock, MultiLock and RedLock (not an invalid duration).
#[tokio::test]
async fn a_zero_wait_is_one_attempt_everywhere() {
    let servers = support::start_many(3);
    let server = &servers[0];
    let [a, b] = support::clients::<2>(server).await;
    let lock = a.lock("zero-wait").unwrap();
    let guard = lock
        .try_lock_with(LockOptions::new().wait(Duration::ZERO))
        .await
        .unwrap()
        .expect("free");
    let other = b.lock("zero-wait").unwrap();
    assert!(
        other
            .try_lock_with(LockOptions::new().wait(Duration::ZERO))
            .await
            .unwrap()
            .is_none()
    );
    let leased = other.try_lock_with(
        LockOptions::new()
            .wait(Duration::ZERO)
            .lease(Duration::from_secs(1)),
    );
    assert!(leased.await.unwrap().is_none());

    let multi = MultiLock::new(vec![
        b.lock("zero-wait-free").unwrap(),
        b.lock("zero-wait").unwrap(),
    ])
    .unwrap();
    assert!(
        multi
            .try_lock_with(LockOptions::new().wait(Duration::ZERO))
            .await
            .unwrap()
            .is_none()
    );
    assert!(!support::exists(server, &support::key_of("zero-wait-free")));
    guard.unlock().await.unwrap();
    let held = multi
        .try_lock_with(
            LockOptions::new()
                .wait(Duration::ZERO)
                .lease(Duration::from_secs(3)),
        )
        .await
        .unwrap();
    let held = held.expect("both free now");
    let ttl = support::pttl(server, &support::key_of("zero-wait-free"));
    assert!((2_000..=3_000).contains(&ttl), "pttl {ttl}");
    held.unlock().await.unwrap();

    let redlock = support::patient(support::redlock(&servers, "zero-wait-red").await);
    let red = redlock
        .try_lock_with(LockOptions::new().wait(Duration::ZERO))
        .await
        .unwrap()
        .expect("free");
    red.unlock().await.unwrap();
    let red = redlock
        .try_lock_with(
            LockOptions::new()
                .wait(Duration::ZERO)
                .lease(Duration::from_secs(2)),
        )
        .await
        .unwrap();
    red.expect("free again").unlock().await.unwrap();
}

/// `extend` sets a fixed lease anew from now, longer or shorter; it refuses watchdog locks and
/// reports a lease that is already gone.
#[tokio::test]
async fn extend_sets_a_fixed_lease_anew() {
    let server = Server::start();
    let client = support::client(&server).await;
    let key = support::key_of("extended");
    let lock = client.lock("extended").unwrap();
    let guard = lock
        .lock_with(LockOptions::new().lease(Duration::from_secs(2)))
        .await
        .unwrap();
    guard.extend(Duration::from_secs(20)).await.unwrap();
    let ttl = support::pttl(&server, &key);
    assert!(
        (19_000..=20_000).contains(&ttl),
        "pttl {ttl} after extending to 20 s"
    );
    let valid = guard.valid_until() - std::time::Instant::now();
    assert!(
        valid > Duration::from_secs(18),
        "validity follows: {valid:?}"
    );
    guard.extend(Duration::from_secs(5)).await.unwrap();
    let ttl = support::pttl(&server, &key);
    assert!(
        (4_000..=5_000).contains(&ttl),
        "pttl {ttl} after shortening to 5 s"
    );
    // Gone behind our back: extending reports the loss and the guard knows it.
    let _: u64 = redis::cmd("DEL")
        .arg(&key)
        .query(&mut server.conn())
        .unwrap();
    let err = guard.extend(Duration::from_secs(5)).await.unwrap_err();
    assert!(err.is_lease_lost(), "{err}");
    assert!(guard.is_lost());
    assert!(
        !support::exists(&server, &key),
        "extend must not bring the key back"
    );
    drop(guard);

    let watched = lock.lock().await.unwrap();
    let err = watched.extend(Duration::from_secs(5)).await.unwrap_err();
    assert!(err.is_invalid_input(), "{err}");
    let err = watched.extend(Duration::ZERO).await.unwrap_err();
    assert!(err.is_invalid_input(), "{err}");
    watched.unlock().await.unwrap();
}

/// `remaining_lease` tells free, expiring and persistent apart.
#[tokio::test]
async fn remaining_lease_tells_free_from_held_without_expiry() {
    let server = Server::start();
    let client = support::client(&server).await;
    let key = support::key_of("remaining");
    let lock = client.lock("remaining").unwrap();
    assert_eq!(lock.remaining_lease().await.unwrap(), RemainingLease::Free);
    let guard = lock
        .lock_with(LockOptions::new().lease(Duration::from_secs(9)))
        .await
        .unwrap();
    let left = lock.remaining_lease().await.unwrap();
    let ttl = left.duration().expect("expires");
    assert!(
        ttl > Duration::from_secs(8) && ttl <= Duration::from_secs(9),
        "{left:?}"
    );
    let _: u64 = redis::cmd("PERSIST")
        .arg(&key)
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(
        lock.remaining_lease().await.unwrap(),
        RemainingLease::Persistent
    );
    assert!(lock.remaining_lease().await.unwrap().is_held());
    guard.unlock().await.unwrap();
    assert_eq!(lock.remaining_lease().await.unwrap(), RemainingLease::Free);
}

/// Every error kind users branch on has a predicate.
#[tokio::test]
async fn error_kinds_have_predicates() {
    let server = Server::start();
    let client = support::client(&server).await;
    support::set_string(&server, &support::key_of("a-string"), "x");
    let err = client
        .lock("a-string")
        .unwrap()
        .try_lock()
        .await
        .unwrap_err();
    assert!(err.is_wrong_type() && !err.is_unavailable(), "{err}");

    let plain = client.lock("plain").unwrap().reentrant(false);
    let guard = plain.lock().await.unwrap();
    let err = plain.try_lock().await.unwrap_err();
    assert!(err.is_would_deadlock() && !err.is_wrong_type(), "{err}");
    guard.unlock().await.unwrap();

    client.shutdown().await.unwrap();
    let err = client.lock("plain").unwrap().try_lock().await.unwrap_err();
    assert!(err.is_shutdown() && !err.is_timeout(), "{err}");

    let mut down = Server::start();
    let lazy = support::client_with(&down, |b| b.timeout(Duration::from_millis(300))).await;
    down.pause();
    let err = lazy.lock("frozen").unwrap().try_lock().await.unwrap_err();
    down.resume();
    assert!(err.is_timeout() && err.is_unavailable(), "{err}");
    down.kill();
}

/// A hold re-entered on other terms lives as long as the server keeps it: a re-entry under the
/// watchdog makes a fixed-lease hold renewed until its last release, and a re-entry with a
/// longer fixed lease extends it (the server keeps the longer expiry). Neither guard is told a
/// false loss, and the last release frees the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reentry_on_longer_terms_extends_the_hold() {
    let server = Server::start();
    let client = redlease::Client::builder(server.url())
        .watchdog_lease(Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    let short = LockOptions::new().lease(Duration::from_millis(300));
    for (tag, longer) in [
        ("watchdog", None),
        ("fixed", Some(Duration::from_millis(2_500))),
    ] {
        let name = support::unique_name(&format!("reentry-{tag}"));
        let lock = client.lock(&name).unwrap();
        let first = lock.lock_with(short).await.unwrap();
        let second = match longer {
            None => lock.lock().await.unwrap(),
            Some(lease) => lock
                .lock_with(LockOptions::new().lease(lease))
                .await
                .unwrap(),
        };
        // Past the first lease twice over; under the watchdog, past its lease too.
        tokio::time::sleep(Duration::from_millis(if longer.is_some() {
            900
        } else {
            2_200
        }))
        .await;
        let key = support::key_of(&name);
        assert!(
            support::exists(&server, &key),
            "{tag}: the server dropped the hold"
        );
        assert!(
            !first.is_lost() && !second.is_lost(),
            "{tag}: a guard was told its hold is lost while the server keeps it"
        );
        second.unlock().await.unwrap();
        first.unlock().await.unwrap();
        assert!(
            !support::exists(&server, &key),
            "{tag}: the last release left the key"
        );
    }
    client.shutdown().await.unwrap();
}

/// A re-entry whose reply comes late (the server froze past half its lease) joins the hold as
/// it is: before, it was confirmed with a renewal on its own short lease, which cut the key's
/// expiry under the earlier guard (kept 30 s by the watchdog) to 300 ms: the key went while
/// that guard still counted on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_reentry_never_shortens_the_hold() {
    let server = Server::start();
    let client = support::client(&server).await;
    let name = support::unique_name("late-reentry");
    let key = support::key_of(&name);
    let lock = client.lock(&name).unwrap();
    let held = lock.lock().await.unwrap();
    let short = LockOptions::new().lease(Duration::from_millis(300));
    server.pause();
    let (reentry, ()) = tokio::join!(lock.lock_with(short), async {
        tokio::time::sleep(Duration::from_millis(250)).await;
        server.resume();
    });
    let reentry = reentry.unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(
        support::exists(&server, &key),
        "the late re-entry shortened the key under the renewed hold"
    );
    assert!(!held.is_lost() && !reentry.is_lost());
    reentry.unlock().await.unwrap();
    held.unlock().await.unwrap();
    assert!(!support::exists(&server, &key));
}
