//! `ReadWriteLock`: readers share, a writer excludes; reentrancy, downgrade, no upgrade; every
//! reader's lease counts on its own (Redisson's case, scaled down); writers are not starved by
//! a stream of readers; guards without a lease are renewed; a cancelled writer leaves nothing.

mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use redlease::{LockOptions, Owner};
use support::{Server, clients, unique_name};

fn fields(server: &Server, key: &str) -> HashMap<String, String> {
    redis::cmd("HGETALL")
        .arg(key)
        .query(&mut server.conn())
        .unwrap()
}

/// The owners queued for the lock (`<key>:qd`).
fn queued(server: &Server, key: &str) -> Vec<String> {
    redis::cmd("HKEYS")
        .arg(format!("{key}:qd"))
        .query(&mut server.conn())
        .unwrap()
}

fn once() -> LockOptions {
    LockOptions::new().wait(Duration::ZERO)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_share_and_a_writer_excludes() {
    support::init_tracing();
    let server = Server::start();
    let [a, b] = clients(&server).await;
    let name = unique_name("rw");
    let on_a = a.read_write_lock(&name).unwrap();
    let on_b = b.read_write_lock(&name).unwrap();
    let r1 = on_a.read().lock().await.unwrap();
    let r2 = on_b
        .read()
        .try_lock()
        .await
        .unwrap()
        .expect("readers share");
    // The reader itself may not upgrade; another owner of the same client waits.
    assert!(
        on_b.write()
            .try_lock()
            .await
            .unwrap_err()
            .is_would_deadlock()
    );
    let writer_b = b.read_write_lock(&name).unwrap().with_owner(Owner::new());
    assert!(
        writer_b.write().try_lock().await.unwrap().is_none(),
        "a writer got in beside readers"
    );
    r1.unlock().await.unwrap();
    assert!(
        writer_b.write().try_lock().await.unwrap().is_none(),
        "a writer got in beside a reader"
    );
    r2.unlock().await.unwrap();
    let w = on_b
        .write()
        .try_lock()
        .await
        .unwrap()
        .expect("free for a writer");
    assert!(
        on_a.read().try_lock().await.unwrap().is_none(),
        "a reader got in beside the writer"
    );
    assert!(
        on_a.write().try_lock().await.unwrap().is_none(),
        "two writers"
    );
    // Reentrancy of the writer.
    let w2 = on_b
        .write()
        .try_lock()
        .await
        .unwrap()
        .expect("the writer re-enters");
    assert_eq!(fields(&server, on_b.key())["wn"], "2");
    w2.unlock().await.unwrap();
    assert!(
        on_a.read().try_lock().await.unwrap().is_none(),
        "freed with a hold left"
    );
    w.unlock().await.unwrap();
    assert!(
        !support::exists(&server, on_a.key()),
        "a free lock left its key"
    );
    // A waiting reader is woken by the write release, not by its nap.
    let w = on_b.write().lock().await.unwrap();
    let waiting = tokio::spawn(async move {
        let guard = on_a.read().lock().await.unwrap();
        (Instant::now(), guard)
    });
    let channel = format!("{}:unlock", on_b.key());
    assert!(support::until_subscribed(&server, &channel, 1).await);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let released = Instant::now();
    w.unlock().await.unwrap();
    let (at, guard) = waiting.await.unwrap();
    let latency = at.duration_since(released);
    assert!(
        latency < Duration::from_millis(100),
        "woken {latency:?} after the release"
    );
    guard.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_gets_in_just_after_the_last_reader_lease() {
    // Redisson's case (readers with leases of 10 s and 3 s), scaled down: 2 s and 600 ms.
    support::init_tracing();
    let server = Server::start();
    let [a, b] = clients(&server).await;
    let name = unique_name("rw-leases");
    let long = a.read_write_lock(&name).unwrap().with_owner(Owner::new());
    let short = a.read_write_lock(&name).unwrap().with_owner(Owner::new());
    let granted = Instant::now();
    let r_long = long
        .read()
        .try_lock_with(once().lease(Duration::from_secs(2)))
        .await
        .unwrap()
        .unwrap();
    let r_short = short
        .read()
        .try_lock_with(once().lease(Duration::from_millis(600)))
        .await
        .unwrap()
        .unwrap();
    // Crashed holders: nobody releases.
    std::mem::forget(r_long);
    std::mem::forget(r_short);
    let writer = b.read_write_lock(&name).unwrap();
    let w = tokio::time::timeout(Duration::from_secs(5), writer.write().lock())
        .await
        .unwrap()
        .unwrap();
    let took = granted.elapsed();
    assert!(
        took >= Duration::from_millis(1950) && took < Duration::from_millis(2300),
        "the writer got the lock {took:?} after the readers (their leases: 2 s and 600 ms)"
    );
    w.unlock().await.unwrap();

    // An expired reader does not keep the lock for the others: one that crashed with 300 ms
    // left, one still holding and releasing at 700 ms.
    let crashed = a.read_write_lock(&name).unwrap().with_owner(Owner::new());
    let alive = a.read_write_lock(&name).unwrap().with_owner(Owner::new());
    let started = Instant::now();
    std::mem::forget(
        crashed
            .read()
            .try_lock_with(once().lease(Duration::from_millis(300)))
            .await
            .unwrap()
            .unwrap(),
    );
    let held = alive.read().lock().await.unwrap();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(700)).await;
        held.unlock().await.unwrap();
    });
    let w = writer
        .write()
        .try_lock_with(LockOptions::new().wait(Duration::from_secs(3)))
        .await
        .unwrap()
        .unwrap();
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(690) && took < Duration::from_millis(900),
        "{took:?}"
    );
    w.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn downgrade_yes_upgrade_no() {
    support::init_tracing();
    let server = Server::start();
    let client = support::client(&server).await;
    let name = unique_name("rw-grade");
    let me = client
        .read_write_lock(&name)
        .unwrap()
        .with_owner(Owner::new());
    let other = client
        .read_write_lock(&name)
        .unwrap()
        .with_owner(Owner::new());
    // Downgrade: the writer reads too, then lets the write lock go and stays a reader.
    let w = me.write().lock().await.unwrap();
    let r = me
        .read()
        .try_lock()
        .await
        .unwrap()
        .expect("the writer may read");
    assert!(other.read().try_lock().await.unwrap().is_none());
    w.unlock().await.unwrap();
    let r_other = other
        .read()
        .try_lock()
        .await
        .unwrap()
        .expect("after the downgrade, readers share");
    let err = other.write().try_lock().await.unwrap_err();
    assert!(err.is_would_deadlock(), "{err}");
    r_other.unlock().await.unwrap();
    // No upgrade: a reader asking for the write lock is told at once, even with `lock()`.
    let started = Instant::now();
    let err = tokio::time::timeout(Duration::from_secs(2), me.write().lock())
        .await
        .unwrap()
        .unwrap_err();
    assert!(err.is_would_deadlock(), "{err}");
    assert!(started.elapsed() < Duration::from_millis(200));
    // Reentrant reads count.
    let r2 = me.read().lock().await.unwrap();
    r.unlock().await.unwrap();
    assert!(
        other.write().try_lock().await.unwrap().is_none(),
        "freed with a read hold left"
    );
    r2.unlock().await.unwrap();
    let w = other.write().try_lock().await.unwrap().expect("free");
    w.unlock().await.unwrap();
    // A second release of a hold that is gone is reported.
    let short = me
        .read()
        .try_lock_with(once().lease(Duration::from_millis(50)))
        .await
        .unwrap()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(120)).await;
    assert!(short.unlock().await.unwrap_err().is_lease_lost());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_is_not_starved_by_a_stream_of_readers() {
    support::init_tracing();
    let server = Server::start();
    let [a, b] = clients(&server).await;
    let name = unique_name("rw-starve");
    // Two readers that overlap: the lock is never free of readers while they run.
    let stop = Instant::now() + Duration::from_secs(3);
    let mut readers = Vec::new();
    for i in 0..2u64 {
        let lock = a.read_write_lock(&name).unwrap();
        readers.push(tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(60 * i)).await;
            let mut rounds = 0;
            while Instant::now() < stop {
                let options = LockOptions::new().wait(Duration::from_secs(2));
                if let Some(guard) = lock.read().try_lock_with(options).await.unwrap() {
                    rounds += 1;
                    tokio::time::sleep(Duration::from_millis(120)).await;
                    guard.unlock().await.unwrap();
                }
            }
            rounds
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let writer = b.read_write_lock(&name).unwrap();
    let asked = Instant::now();
    let options = LockOptions::new().wait(Duration::from_secs(2));
    let w = writer
        .write()
        .try_lock_with(options)
        .await
        .unwrap()
        .expect("the writer starved");
    let waited = asked.elapsed();
    assert!(
        waited < Duration::from_millis(400),
        "the writer waited {waited:?} (a read hold is 120 ms)"
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    w.unlock().await.unwrap();
    for reader in readers {
        assert!(reader.await.unwrap() >= 3, "the readers barely ran");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guards_are_renewed_and_report_loss() {
    support::init_tracing();
    let server = Server::start();
    let a = support::client_with_lease(&server, Duration::from_millis(600)).await;
    let b = support::client(&server).await;
    let name = unique_name("rw-renew");
    let lock = a.read_write_lock(&name).unwrap();
    let r = lock.read().lock().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let ttl = support::pttl(&server, lock.key());
    assert!(ttl > 0 && ttl <= 600, "PTTL {ttl}");
    assert!(
        b.read_write_lock(&name)
            .unwrap()
            .write()
            .try_lock()
            .await
            .unwrap()
            .is_none(),
        "the renewed read lock expired"
    );
    assert!(!r.is_lost());
    // The key goes: the next renewal finds the hold gone.
    redis::cmd("DEL")
        .arg(lock.key())
        .query::<()>(&mut server.conn())
        .unwrap();
    let lost = tokio::time::timeout(Duration::from_millis(600), r.lost()).await;
    assert!(lost.is_ok(), "lost() never resolved");
    assert!(r.unlock().await.unwrap_err().is_lease_lost());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_writer_leaves_nothing() {
    support::init_tracing();
    let server = Server::start();
    let [a, b] = clients(&server).await;
    let name = unique_name("rw-cancel");
    let lock = a.read_write_lock(&name).unwrap();
    let r = lock.read().lock().await.unwrap();
    let writer = b.read_write_lock(&name).unwrap();
    let gave_up = tokio::time::timeout(Duration::from_millis(200), writer.write().lock()).await;
    assert!(gave_up.is_err());
    // Its place is withdrawn: a new reader need not wait out the place's life.
    let withdrawn = support::eventually_async(Duration::from_millis(500), || async {
        queued(&server, lock.key()).is_empty()
    })
    .await;
    assert!(withdrawn, "place left: {:?}", queued(&server, lock.key()));
    let other = a.read_write_lock(&name).unwrap().with_owner(Owner::new());
    assert!(
        other.read().try_lock().await.unwrap().is_some(),
        "a reader kept out by a writer that left"
    );
    // A writer that times out withdraws too.
    let timed_out = writer
        .write()
        .try_lock_with(LockOptions::new().wait(Duration::from_millis(100)))
        .await
        .unwrap();
    assert!(timed_out.is_none());
    assert!(
        other.read().try_lock_with(once()).await.unwrap().is_some() || {
            support::eventually_async(Duration::from_millis(500), || async {
                other.read().try_lock().await.unwrap().is_some()
            })
            .await
        }
    );
    // A reader held back by a waiting writer comes in as soon as the writer gives up.
    let writer = b.read_write_lock(&name).unwrap();
    let giving_up = tokio::spawn(async move {
        let options = LockOptions::new().wait(Duration::from_millis(300));
        writer
            .write()
            .try_lock_with(options)
            .await
            .unwrap()
            .is_none()
    });
    let intent = support::eventually_async(Duration::from_secs(1), || async {
        !queued(&server, lock.key()).is_empty()
    })
    .await;
    assert!(intent, "the writer did not queue");
    let late = a.read_write_lock(&name).unwrap().with_owner(Owner::new());
    let asked = Instant::now();
    let late_guard = late.read().lock().await.unwrap();
    let waited = asked.elapsed();
    assert!(giving_up.await.unwrap());
    assert!(
        waited < Duration::from_millis(450),
        "the reader waited {waited:?} (the writer gave up at 300 ms)"
    );
    late_guard.unlock().await.unwrap();
    r.unlock().await.unwrap();
    // Cut off at every point of a request in flight: a grant that arrives is given back.
    drop(b);
    let writer = a.read_write_lock(&name).unwrap().with_owner(Owner::new());
    for i in 0..100u64 {
        let cut = Duration::from_micros(i * 13 % 500);
        if let Ok(Ok(w)) = tokio::time::timeout(cut, writer.write().lock()).await {
            w.unlock().await.unwrap();
        }
    }
    let freed = support::eventually_async(Duration::from_secs(3), || async {
        !fields(&server, lock.key()).contains_key("w")
    })
    .await;
    assert!(
        freed,
        "a cut-off acquisition kept the write lock: {:?}",
        fields(&server, lock.key())
    );
    let left = support::eventually_async(Duration::from_secs(3), || async {
        queued(&server, lock.key()).is_empty()
    })
    .await;
    assert!(
        left,
        "a cut-off wait left its place: {:?}",
        queued(&server, lock.key())
    );
}

/// An owner that holds one side with a fixed lease and enters it again under the watchdog
/// keeps the longer lease on the server while its fixed guard is valid: the watchdog's
/// renewals never shorten it. Before, each renewal set the side's deadline to the watchdog's
/// lease from now, so once the watchdog guard was released the server let another client in
/// while the fixed guard still counted itself valid for seconds: a writer and a reader (or two
/// writers) inside at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_never_shortens_a_longer_hold_of_its_owner() {
    let server = Server::start();
    let mine = support::client_with_lease(&server, Duration::from_millis(1500)).await;
    let [other] = clients(&server).await;
    let fixed = LockOptions::new().lease(Duration::from_secs(6));
    for write in [true, false] {
        let name = unique_name("rw-renew-short");
        let lock = mine.read_write_lock(&name).unwrap();
        let theirs = other.read_write_lock(&name).unwrap();
        let (long, valid_until) = if write {
            let guard = lock.write().lock_with(fixed).await.unwrap();
            let again = lock.write().lock().await.unwrap();
            // A few renewals of the watchdog guard, then it goes.
            tokio::time::sleep(Duration::from_millis(1200)).await;
            // Its own lease may lapse on a loaded machine: the server's state is what counts.
            let released = again.unlock().await;
            assert!(released.is_ok() || released.is_err_and(|e| e.is_lease_lost()));
            let until = guard.valid_until();
            (Box::new(guard) as Box<dyn std::any::Any + Send>, until)
        } else {
            let guard = lock.read().lock_with(fixed).await.unwrap();
            let again = lock.read().lock().await.unwrap();
            tokio::time::sleep(Duration::from_millis(1200)).await;
            // Its own lease may lapse on a loaded machine: the server's state is what counts.
            let released = again.unlock().await;
            assert!(released.is_ok() || released.is_err_and(|e| e.is_lease_lost()));
            let until = guard.valid_until();
            (Box::new(guard) as Box<dyn std::any::Any + Send>, until)
        };
        // Past the watchdog's lease, well inside the fixed guard's validity.
        assert!(
            valid_until > Instant::now() + Duration::from_secs(2),
            "write {write}"
        );
        let inside = theirs
            .write()
            .try_lock_with(LockOptions::new().wait(Duration::from_secs(2)))
            .await
            .unwrap();
        assert!(
            inside.is_none() || Instant::now() >= valid_until,
            "write {write}: another client wrote while the fixed guard was valid for {:?} more",
            valid_until.saturating_duration_since(Instant::now())
        );
        drop(inside);
        drop(long);
    }
}

/// A write hold and a permit released while their client shuts down (after `shutdown` began,
/// before its drain) are released on the server, and the caller hears `Shutdown`. Before, the
/// release was refused before it was sent and the guard left the registry, so the drain did
/// not see it either: the hold stayed for its whole lease.
#[tokio::test(flavor = "current_thread")]
async fn a_hold_released_while_its_client_shuts_down_is_released() {
    use futures_util::FutureExt;
    let server = Server::start();
    let client = support::client(&server).await;
    let name = unique_name("rw-shutdown-window");
    let lock = client.read_write_lock(&name).unwrap();
    let key = lock.key().to_owned();
    let guard = lock.write().lock().await.unwrap();
    let permits = client
        .permit_semaphore(&unique_name("permit-shutdown-window"))
        .unwrap();
    assert!(permits.try_set_permits(1).await.unwrap());
    let permit = permits.acquire().await.unwrap();
    let permits_key = permits.key().to_owned();
    // Shutdown begins: the client is closed from here; its drain runs once this task yields.
    let shutdown = client.shutdown();
    tokio::pin!(shutdown);
    assert!((&mut shutdown).now_or_never().is_none());
    assert!(!permit.is_lost(), "the drain has not run yet");
    // Both releases begin in this one poll, before the drain can run.
    let (unlocked, released) = tokio::join!(guard.unlock(), permit.release());
    assert!(
        matches!(&unlocked, Err(e) if e.is_shutdown()),
        "{unlocked:?}"
    );
    assert!(
        matches!(&released, Err(e) if e.is_shutdown()),
        "{released:?}"
    );
    shutdown.await.unwrap();
    assert!(
        !fields(&server, &key).contains_key("w"),
        "the write hold outlived the shutdown: {:?}",
        fields(&server, &key)
    );
    let out: Vec<String> = redis::cmd("HKEYS")
        .arg(&permits_key)
        .query(&mut server.conn())
        .unwrap();
    assert!(
        !out.iter().any(|field| field.starts_with("p:")),
        "the permit outlived the shutdown: {out:?}"
    );
}
