//! One options value for every lock kind: `try_lock_with(LockOptions)` on `Lock`, `MultiLock`,
//! `RedLock` and the blocking `Lock` makes one attempt, waits a bounded time, or holds for a
//! fixed lease, and refuses a bad duration, the same way on each.

mod support;

use std::time::{Duration, Instant};

use redlease::{Error, LockOptions, MAX_DURATION, MultiLock};
use support::{Server, client, exists, key_of, patient, pttl, redlock, unique_name};

const ONCE: Duration = Duration::ZERO;
const SHORT: Duration = Duration::from_millis(200);
const LEASE: Duration = Duration::from_secs(2);

/// A bounded wait that ran out: it took at least the wait, and not much longer.
fn ran_out(started: Instant, wait: Duration) {
    let took = started.elapsed();
    assert!(
        took >= wait,
        "gave up after {took:?}, before the wait {wait:?}"
    );
    assert!(
        took < wait + Duration::from_secs(2),
        "gave up only after {took:?}"
    );
}

/// The lock's key expires within the fixed lease (no watchdog renews it to 30 s).
fn leased(server: &Server, name: &str) {
    let ttl = pttl(server, &key_of(name));
    assert!(
        ttl > 0 && ttl <= LEASE.as_millis() as i64,
        "PTTL {ttl} ms is not within the {LEASE:?} lease"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_and_multilock_take_the_same_options() {
    let server = Server::start();
    let (holder, other) = (client(&server).await, client(&server).await);
    let [a, b] = [unique_name("opt-a"), unique_name("opt-b")];
    let held = holder.lock(&b).unwrap().lock().await.unwrap();

    let lock = other.lock(&b).unwrap();
    let started = Instant::now();
    assert!(
        lock.try_lock_with(LockOptions::new().wait(ONCE))
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        started.elapsed() < SHORT,
        "one attempt took {:?}",
        started.elapsed()
    );
    let started = Instant::now();
    assert!(
        lock.try_lock_with(LockOptions::new().wait(SHORT))
            .await
            .unwrap()
            .is_none()
    );
    ran_out(started, SHORT);

    let both = MultiLock::new(vec![other.lock(&a).unwrap(), other.lock(&b).unwrap()]).unwrap();
    let started = Instant::now();
    assert!(
        both.try_lock_with(LockOptions::new().wait(SHORT))
            .await
            .unwrap()
            .is_none()
    );
    ran_out(started, SHORT);
    assert!(
        !exists(&server, &key_of(&a)),
        "a failed MultiLock kept a member"
    );

    held.unlock().await.unwrap();
    let options = LockOptions::new().wait(SHORT).lease(LEASE);
    let guard = both
        .try_lock_with(options)
        .await
        .unwrap()
        .expect("both free");
    leased(&server, &a);
    leased(&server, &b);
    guard.unlock().await.unwrap();
    let guard = lock.try_lock_with(options).await.unwrap().expect("free");
    leased(&server, &b);
    guard.unlock().await.unwrap();

    for bad in [
        LockOptions::new().wait(MAX_DURATION * 2),
        LockOptions::new().lease(ONCE),
    ] {
        let err = lock.try_lock_with(bad).await.unwrap_err();
        assert!(
            matches!(err, Error::InvalidDuration { .. }),
            "Lock {bad:?}: {err:?}"
        );
        let err = both.try_lock_with(bad).await.unwrap_err();
        assert!(
            matches!(err, Error::InvalidDuration { .. }),
            "MultiLock {bad:?}: {err:?}"
        );
    }
    assert!(!exists(&server, &key_of(&a)) && !exists(&server, &key_of(&b)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_takes_the_same_options() {
    let servers: Vec<Server> = (0..3).map(|_| Server::start()).collect();
    let name = unique_name("opt-red");
    let first = patient(redlock(&servers, &name).await);
    let second = patient(redlock(&servers, &name).await);
    let held = first.lock().await.unwrap();
    let started = Instant::now();
    assert!(
        second
            .try_lock_with(LockOptions::new().wait(SHORT))
            .await
            .unwrap()
            .is_none()
    );
    ran_out(started, SHORT);
    held.unlock().await.unwrap();
    let options = LockOptions::new().wait(SHORT).lease(LEASE);
    let guard = second.try_lock_with(options).await.unwrap().expect("free");
    for server in &servers {
        leased(server, &name);
    }
    guard.unlock().await.unwrap();
    let err = second
        .try_lock_with(LockOptions::new().lease(ONCE))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidDuration { .. }), "{err:?}");
}

#[test]
fn the_blocking_lock_takes_the_same_options() {
    let server = Server::start();
    let client = redlease::blocking::Client::connect(&server.url()).unwrap();
    let name = unique_name("opt-blocking");
    let lock = client.lock(&name).unwrap();
    let guard = lock
        .try_lock_with(LockOptions::new().lease(LEASE))
        .unwrap()
        .expect("free");
    leased(&server, &name);
    let other = redlease::blocking::Client::connect(&server.url()).unwrap();
    let started = Instant::now();
    let busy = other
        .lock(&name)
        .unwrap()
        .try_lock_with(LockOptions::new().wait(SHORT));
    assert!(busy.unwrap().is_none());
    ran_out(started, SHORT);
    guard.unlock().unwrap();
}
