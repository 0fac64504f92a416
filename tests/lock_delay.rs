//! Lock-delay: after a lease that ran out without a release, the lock stays refused for the
//! delay (decided on the server's clock); a release or a force-unlock frees it at once; waiters
//! sleep until the delay ends instead of polling; a watchdog-kept hold keeps its marker alive.

mod support;

use redlease::LockOptions;
use std::time::{Duration, Instant};

use redlease::{Client, Error, Lock};
use support::{Server, clients, command_calls, exists, key_of, pttl, unique_name};

fn delayed(client: &Client, name: &str, delay: Duration) -> Lock {
    client.lock(name).expect("a valid name").lock_delay(delay)
}

fn marker(name: &str) -> String {
    format!("{}:delay", key_of(name))
}

#[tokio::test]
async fn a_lease_that_ran_out_keeps_the_lock_refused_for_the_delay() {
    let server = Server::start();
    let [a, b] = clients(&server).await;
    let name = unique_name("delay-lapsed");
    let (lease, delay) = (Duration::from_millis(300), Duration::from_millis(700));
    let taken = Instant::now();
    let stale = delayed(&a, &name, delay)
        .lock_with(LockOptions::new().lease(lease))
        .await
        .unwrap();
    let calls_before = command_calls(&server, "evalsha");
    let next = delayed(&b, &name, delay)
        .try_lock_with(LockOptions::new().wait(Duration::from_secs(5)))
        .await
        .unwrap()
        .expect("granted once the delay ended");
    let waited = taken.elapsed();
    assert!(
        waited >= lease + delay && waited < lease + delay + Duration::from_millis(500),
        "granted {waited:?} after the grant of a {lease:?} lease with a {delay:?} delay"
    );
    // One refusal by the holder, one by the delay, the grant (and a race-closing attempt
    // after subscribing): sleeping until each deadline, not polling.
    let attempts = command_calls(&server, "evalsha") - calls_before;
    assert!(attempts <= 5, "{attempts} script calls while waiting");
    assert!(stale.is_lost());
    assert!(matches!(stale.unlock().await, Err(Error::LeaseLost { .. })));
    // The late release found nothing of its own, so the next holder's marker is kept.
    assert!(exists(&server, &marker(&name)));
    next.unlock().await.unwrap();
    assert!(
        !exists(&server, &marker(&name)),
        "a release ends the marker"
    );
}

#[tokio::test]
async fn a_release_frees_the_lock_at_once() {
    let server = Server::start();
    let [a, b] = clients(&server).await;
    let name = unique_name("delay-released");
    let delay = Duration::from_secs(5);
    let held = delayed(&a, &name, delay).lock().await.unwrap();
    let ttl = pttl(&server, &marker(&name));
    let lease = a.config().watchdog_lease;
    assert!(
        ttl > (lease + delay - Duration::from_secs(1)).as_millis() as i64,
        "the marker lives for the lease plus the delay: {ttl} ms"
    );
    let waiter = {
        let lock = delayed(&b, &name, delay);
        tokio::spawn(async move {
            lock.try_lock_with(LockOptions::new().wait(Duration::from_secs(3)))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let released = Instant::now();
    held.unlock().await.unwrap();
    let next = waiter.await.unwrap().unwrap().expect("granted at once");
    assert!(
        released.elapsed() < Duration::from_millis(500),
        "{:?} after the release",
        released.elapsed()
    );
    next.unlock().await.unwrap();
    assert!(!exists(&server, &marker(&name)));
}

#[tokio::test]
async fn a_force_unlock_ends_the_delay() {
    let server = Server::start();
    let [a, b] = clients(&server).await;
    let name = unique_name("delay-forced");
    let delay = Duration::from_secs(30);
    let lapsed = delayed(&a, &name, delay)
        .lock_with(LockOptions::new().lease(Duration::from_millis(100)))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let lock = delayed(&b, &name, delay);
    assert!(
        lock.try_lock().await.unwrap().is_none(),
        "refused in the delay"
    );
    assert!(
        !lock.force_unlock().await.unwrap(),
        "nobody held the lock itself"
    );
    let taken = lock
        .try_lock()
        .await
        .unwrap()
        .expect("free after a force-unlock");
    taken.unlock().await.unwrap();
    drop(lapsed);
}

#[tokio::test]
async fn the_watchdog_keeps_the_marker_alive_with_the_lease() {
    let server = Server::start();
    let lease = Duration::from_millis(600);
    let client = Client::builder(server.url())
        .watchdog_lease(lease)
        .build()
        .await
        .unwrap();
    let name = unique_name("delay-renewed");
    let delay = Duration::from_millis(400);
    let held = delayed(&client, &name, delay).lock().await.unwrap();
    // Past both the lease and the lease plus the delay: only renewals explain a live marker.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!held.is_lost());
    let ttl = pttl(&server, &marker(&name));
    assert!(
        ttl > 0 && ttl <= (lease + delay).as_millis() as i64,
        "marker renewed to the lease plus the delay: {ttl} ms"
    );
    held.unlock().await.unwrap();
    assert!(!exists(&server, &marker(&name)));
}

#[tokio::test]
async fn plain_locks_write_no_marker_and_an_absurd_delay_is_refused() {
    let server = Server::start();
    let [a] = clients(&server).await;
    let name = unique_name("delay-none");
    let plain = a.lock(&name).unwrap().lock().await.unwrap();
    assert!(!exists(&server, &marker(&name)));
    plain.unlock().await.unwrap();
    let off = delayed(&a, &name, Duration::ZERO).lock().await.unwrap();
    assert!(!exists(&server, &marker(&name)), "a zero delay is none");
    off.unlock().await.unwrap();
    let absurd = delayed(&a, &name, Duration::from_secs(400 * 24 * 3600));
    assert!(matches!(
        absurd.try_lock().await,
        Err(Error::InvalidDuration { .. })
    ));
    assert!(!exists(&server, &key_of(&name)), "nothing written");
}
