//! RESP3 (`?protocol=resp3`) on one server: every script reply and the subscriber's messages
//! arrive in RESP3 form, and every operation still reads them right: lock, wait woken by the
//! unlock message (two clients, so no local hand-over), re-entry, fencing, watchdog renewal,
//! status, and the family's kinds.

mod support;

use redlease::LockOptions;
use std::time::{Duration, Instant};

use redlease::Client;
use support::{Server, key_of, owners, pttl, unique_name};

async fn resp3(server: &Server) -> Client {
    Client::builder(format!("{}/?protocol=resp3", server.url()))
        .watchdog_lease(Duration::from_millis(900))
        .build()
        .await
        .expect("connect over RESP3")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_over_resp3() {
    support::init_tracing();
    let server = Server::start();
    let (a, b) = (resp3(&server).await, resp3(&server).await);
    let name = unique_name("resp3");
    let lock = a.lock(&name).unwrap().fenced(true);

    let first = lock.lock().await.unwrap();
    let again = lock.lock().await.unwrap();
    assert_eq!(lock.hold_count().await.unwrap(), 2);
    assert_eq!(owners(&server, &key_of(&name)), 1);
    let token = first
        .fencing_token()
        .expect("a fenced lock hands out tokens");
    assert!(b.lock(&name).unwrap().try_lock().await.unwrap().is_none());
    let status = b.lock(&name).unwrap().status().await.unwrap();
    assert_eq!(status.owners.len(), 1, "status read over RESP3: {status:?}");
    assert_eq!(status.owners[0].1, 2);
    assert!(status.fence.is_some() && status.remaining_lease.is_some());

    // The watchdog keeps a 900 ms lease alive well past it.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(!first.is_lost() && !again.is_lost());
    assert!(pttl(&server, &key_of(&name)) > 0);

    // A waiter of another client is woken by the unlock message, not by its nap (the holder's
    // remaining lease, up to 900 ms, renewed every 300 ms).
    let waiter = {
        let lock = b.lock(&name).unwrap().fenced(true);
        tokio::spawn(async move {
            let guard = lock.lock().await.unwrap();
            (Instant::now(), guard)
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    again.unlock().await.unwrap();
    let released = Instant::now();
    first.unlock().await.unwrap();
    let (at, guard) = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter got the lock")
        .unwrap();
    assert!(
        at.duration_since(released) < Duration::from_millis(250),
        "woken {:?} after the unlock: the RESP3 message was not read",
        at.duration_since(released)
    );
    assert!(guard.fencing_token().expect("token") > token);
    guard.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_family_over_resp3() {
    support::init_tracing();
    let server = Server::start();
    let (a, b) = (resp3(&server).await, resp3(&server).await);
    let name = unique_name("resp3-family");

    let semaphore = a.semaphore(&name).unwrap();
    assert!(semaphore.try_set_permits(1).await.unwrap());
    semaphore.acquire().await.unwrap();
    assert_eq!(semaphore.available().await.unwrap(), 0);
    let other = b.semaphore(&name).unwrap();
    assert!(
        !other
            .try_acquire_with(LockOptions::new().wait(Duration::ZERO))
            .await
            .unwrap()
    );
    semaphore.release(1).await.unwrap();
    assert!(
        other
            .try_acquire_with(LockOptions::new().wait(Duration::from_secs(2)))
            .await
            .unwrap()
    );

    let rw = a.read_write_lock(&name).unwrap();
    let reading = rw.read().lock().await.unwrap();
    let writer = b.read_write_lock(&name).unwrap();
    let write = tokio::spawn(async move { writer.write().lock().await.map(|_| ()) });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!write.is_finished(), "a writer got in beside a reader");
    reading.unlock().await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), write)
        .await
        .expect("the writer got in after the reader left")
        .unwrap()
        .unwrap();

    let latch = a.count_down_latch(&name).unwrap();
    assert!(latch.try_set_count(1).await.unwrap());
    let waiting = b.count_down_latch(&name).unwrap();
    let opened = tokio::spawn(async move {
        waiting
            .try_wait_with(LockOptions::new().wait(Duration::from_secs(5)))
            .await
    });
    latch.count_down().await.unwrap();
    assert!(opened.await.unwrap().unwrap(), "the latch opened");

    let fair = a.fair_lock(&name).unwrap();
    let held = fair.lock().await.unwrap();
    assert!(
        b.fair_lock(&name)
            .unwrap()
            .try_lock()
            .await
            .unwrap()
            .is_none()
    );
    held.unlock().await.unwrap();
}
