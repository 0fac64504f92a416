//! One options value for every lock kind: `lock_with` / `try_lock_with(LockOptions)` on `Lock`,
//! `MultiLock`, `RedLock`, the blocking `Lock` and the family (the semaphores' `acquire_with`)
//! makes one attempt, waits a bounded time, or holds for a fixed lease, and refuses a bad
//! duration or count of permits, the same way on each.

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

/// `lock_with` is `try_lock_with` that must end with the lock: a bounded wait that runs out is
/// `Error::Busy` naming the lock, on every kind, and a lease given is a fixed lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_with_a_wait_that_runs_out_is_busy_on_every_kind() {
    let server = Server::start();
    let (holder, other) = (client(&server).await, client(&server).await);
    let busy = |err: Error, name: &str, kind: &str| match err {
        Error::Busy { name: busy, waited } => {
            assert_eq!(busy, name, "{kind}");
            assert_eq!(waited, SHORT, "{kind}");
        }
        other => panic!("{kind}: {other:?}"),
    };
    let wait = LockOptions::new().wait(SHORT);

    let name = unique_name("opt-busy-lock");
    let held = holder.lock(&name).unwrap().lock().await.unwrap();
    let started = Instant::now();
    let err = other
        .lock(&name)
        .unwrap()
        .lock_with(wait)
        .await
        .unwrap_err();
    ran_out(started, SHORT);
    assert!(err.is_busy());
    busy(err, &name, "Lock");
    let free = unique_name("opt-free");
    let both =
        MultiLock::new(vec![other.lock(&free).unwrap(), other.lock(&name).unwrap()]).unwrap();
    let err = both.lock_with(wait).await.unwrap_err();
    busy(err, &format!("{free}+{name}"), "MultiLock");
    assert!(!exists(&server, &key_of(&free)), "MultiLock kept a member");
    held.unlock().await.unwrap();
    let guard = other
        .lock(&name)
        .unwrap()
        .lock_with(LockOptions::new().lease(LEASE))
        .await
        .unwrap();
    leased(&server, &name);
    guard.unlock().await.unwrap();

    let name = unique_name("opt-busy-fair");
    let held = holder.fair_lock(&name).unwrap().lock().await.unwrap();
    let err = other
        .fair_lock(&name)
        .unwrap()
        .lock_with(wait)
        .await
        .unwrap_err();
    busy(err, &name, "FairLock");
    held.unlock().await.unwrap();

    let name = unique_name("opt-busy-rw");
    let held = holder
        .read_write_lock(&name)
        .unwrap()
        .write()
        .lock()
        .await
        .unwrap();
    let rw = other.read_write_lock(&name).unwrap();
    busy(rw.read().lock_with(wait).await.unwrap_err(), &name, "read");
    busy(
        rw.write().lock_with(wait).await.unwrap_err(),
        &name,
        "write",
    );
    held.unlock().await.unwrap();

    let name = unique_name("opt-busy-permits");
    let permits = holder.permit_semaphore(&name).unwrap();
    permits.try_set_permits(1).await.unwrap();
    let held = permits.acquire().await.unwrap();
    let err = other
        .permit_semaphore(&name)
        .unwrap()
        .acquire_with(wait)
        .await
        .unwrap_err();
    busy(err, &name, "PermitSemaphore");
    held.release().await.unwrap();

    let name = unique_name("opt-busy-semaphore");
    let slots = other.semaphore(&name).unwrap();
    slots.try_set_permits(2).await.unwrap();
    let three = wait.permits(3);
    busy(
        slots.acquire_with(three).await.unwrap_err(),
        &name,
        "Semaphore",
    );
    assert!(!slots.try_acquire_with(three).await.unwrap());
    slots
        .acquire_with(LockOptions::new().permits(2))
        .await
        .unwrap();
    assert_eq!(slots.available().await.unwrap(), 0);
}

/// Permits are a semaphore's: zero is refused everywhere, more than one by every kind that holds
/// one thing, and a lease by the kinds that have none; each with `InvalidArgument` before
/// anything is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_and_leases_are_refused_where_they_do_not_apply() {
    let server = Server::start();
    let client = client(&server).await;
    let invalid = |result: redlease::Result<()>, what: &str| match result {
        Err(err) => assert!(
            matches!(err, Error::InvalidArgument(_)) && err.is_invalid_input(),
            "{what}: {err:?}"
        ),
        Ok(()) => panic!("{what}: accepted"),
    };
    let name = unique_name("opt-permits");
    let lock = client.lock(&name).unwrap();
    for permits in [0, 2] {
        let options = LockOptions::new().permits(permits);
        invalid(lock.lock_with(options).await.map(drop), "Lock");
        invalid(lock.try_lock_with(options).await.map(drop), "Lock try");
        let both = MultiLock::new(vec![lock.clone()]).unwrap();
        invalid(both.try_lock_with(options).await.map(drop), "MultiLock");
        let fair = client.fair_lock(&name).unwrap();
        invalid(fair.try_lock_with(options).await.map(drop), "FairLock");
        let rw = client.read_write_lock(&name).unwrap();
        invalid(rw.read().try_lock_with(options).await.map(drop), "read");
        let permit = client.permit_semaphore(&name).unwrap();
        invalid(permit.try_acquire_with(options).await.map(drop), "Permit");
    }
    assert!(!exists(&server, &key_of(&name)));
    // One permit is what every kind takes anyway.
    let guard = lock
        .try_lock_with(LockOptions::new().permits(1))
        .await
        .unwrap()
        .expect("free");
    guard.unlock().await.unwrap();

    let slots = client.semaphore(&name).unwrap();
    slots.try_set_permits(5).await.unwrap();
    invalid(
        slots
            .try_acquire_with(LockOptions::new().permits(0))
            .await
            .map(drop),
        "Semaphore zero",
    );
    invalid(
        slots.acquire_with(LockOptions::new().lease(LEASE)).await,
        "Semaphore lease",
    );
    assert_eq!(
        slots.available().await.unwrap(),
        5,
        "a refused ask took permits"
    );
    let latch = client.count_down_latch(&name).unwrap();
    invalid(
        latch
            .try_wait_with(LockOptions::new().lease(LEASE))
            .await
            .map(drop),
        "latch lease",
    );
    invalid(
        latch
            .try_wait_with(LockOptions::new().permits(2))
            .await
            .map(drop),
        "latch permits",
    );
    assert!(
        latch
            .try_wait_with(LockOptions::new().wait(ONCE))
            .await
            .unwrap()
    );
}
