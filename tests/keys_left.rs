//! Nothing is left behind: after every kind of lock, semaphore and latch was used (held,
//! contended, re-entered, fenced, delayed, given up on, released) and its user finished with
//! it, the server's key count returns to 0 once the longest documented grace has passed (the
//! table "Keys on the server" in the crate docs lists each key and what ends it).

mod support;

use redlease::LockOptions;
use std::time::Duration;

use redlease::{Client, MultiLock};
use support::{Server, unique_name};

fn dbsize(server: &Server) -> u64 {
    redis::cmd("DBSIZE").query(&mut server.conn()).unwrap()
}

fn keys(server: &Server) -> Vec<String> {
    redis::cmd("KEYS")
        .arg("*")
        .query(&mut server.conn())
        .unwrap()
}

/// Short leases and graces, so the longest of them (the release latch: 5 s at least) bounds
/// the test.
async fn short_lived(server: &Server) -> Client {
    Client::builder(server.url())
        .watchdog_lease(Duration::from_millis(900))
        .timeout(Duration::from_millis(300))
        .fence_grace(Duration::from_millis(200))
        .build()
        .await
        .expect("client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_leaves_no_key_behind() {
    let server = Server::start();
    let a = short_lived(&server).await;
    let b = short_lived(&server).await;
    let name = unique_name("left");
    let wait = Duration::from_millis(300);

    // The reentrant lock: fenced, re-entered (a release that leaves holds writes a latch), a
    // waiter of another client that gives up, a lock-delay, a lease that runs out.
    let lock = a.lock(&name).unwrap().fenced(true).lock_delay(wait);
    let outer = lock.lock().await.unwrap();
    let inner = lock.lock().await.unwrap();
    let contender = b.lock(&name).unwrap().lock_delay(wait);
    assert!(
        contender
            .try_lock_with(LockOptions::new().wait(wait))
            .await
            .unwrap()
            .is_none()
    );
    inner.unlock().await.unwrap();
    outer.unlock().await.unwrap();
    let lapsed = lock
        .lock_with(LockOptions::new().lease(Duration::from_millis(200)))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(lapsed);
    // A waiter cancelled mid-wait.
    let held = a.lock(&name).unwrap().lock().await.unwrap();
    let waiter = b.lock(&name).unwrap();
    let cancelled = tokio::time::timeout(Duration::from_millis(50), waiter.lock());
    assert!(cancelled.await.is_err());
    held.unlock().await.unwrap();

    // MultiLock over three names.
    let multi = MultiLock::new(
        (0..3)
            .map(|i| a.lock(&format!("{name}:m{i}")).unwrap())
            .collect(),
    )
    .unwrap();
    multi.lock().await.unwrap().unlock().await.unwrap();

    // The fair lock with a second client queued behind the holder.
    let fair = a.fair_lock(&name).unwrap().lock().await.unwrap();
    let queued = {
        let lock = b.fair_lock(&name).unwrap();
        tokio::spawn(async move { lock.lock().await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    fair.unlock().await.unwrap();
    queued.await.unwrap().unwrap().unlock().await.unwrap();
    let gave_up = b.fair_lock(&name).unwrap();
    let held = a.fair_lock(&name).unwrap().lock().await.unwrap();
    let options = redlease::LockOptions::new().wait(Duration::from_millis(100));
    assert!(gave_up.try_lock_with(options).await.unwrap().is_none());
    held.unlock().await.unwrap();

    // The read-write lock: readers of two clients, then a writer.
    let rw = a.read_write_lock(&name).unwrap();
    let r1 = rw.read().lock().await.unwrap();
    let r2 = b
        .read_write_lock(&name)
        .unwrap()
        .read()
        .lock()
        .await
        .unwrap();
    let writer = {
        let w = b.read_write_lock(&name).unwrap().write();
        tokio::spawn(async move { w.lock().await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    r1.unlock().await.unwrap();
    r2.unlock().await.unwrap();
    writer.await.unwrap().unwrap().unlock().await.unwrap();

    // Semaphores are state you set: their users delete them when done.
    let semaphore = a.semaphore(&name).unwrap();
    semaphore.set_permits(2).await.unwrap();
    semaphore.acquire().await.unwrap();
    semaphore.release(1).await.unwrap();
    assert!(semaphore.delete().await.unwrap());
    let permits = a.permit_semaphore(&name).unwrap();
    permits.set_permits(1).await.unwrap();
    permits.acquire().await.unwrap().release().await.unwrap();
    assert!(permits.delete().await.unwrap());

    // The latch is gone at zero.
    let latch = a.count_down_latch(&name).unwrap();
    assert!(latch.try_set_count(2).await.unwrap());
    latch.count_down().await.unwrap();
    latch.count_down().await.unwrap();
    latch.wait().await.unwrap();

    assert!(dbsize(&server) > 0, "the run above wrote nothing?");
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
    // The longest grace documented: a release latch lives max(5 × timeout, 5 s).
    let empty = support::eventually(Duration::from_secs(8), || dbsize(&server) == 0);
    assert!(empty, "keys left behind: {:?}", keys(&server));
}
