//! Shared read holds: one client's concurrent watchdog readers of a `ReadWriteLock` share one
//! hold on the server. What must hold: one field for many readers, each reader still released
//! on its own (the last one out frees the lock), a writer of another client not starved by a
//! client that keeps reading, a downgrade through another handle of the same lock, a fixed-lease
//! reader alone, and a reader that stops waiting for a share leaving nothing behind.

mod support;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redlease::{LockOptions, Owner};
use support::{Server, clients, unique_name};

fn fields(server: &Server, key: &str) -> HashMap<String, String> {
    redis::cmd("HGETALL")
        .arg(key)
        .query(&mut server.conn())
        .unwrap()
}

/// The reader fields (`r:<owner field>`) of the lock's hash.
fn readers(server: &Server, key: &str) -> Vec<String> {
    let mut readers: Vec<String> = fields(server, key)
        .into_keys()
        .filter_map(|f| f.strip_prefix("r:").map(str::to_owned))
        .collect();
    readers.sort();
    readers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_clients_readers_share_one_hold() {
    support::init_tracing();
    let server = Server::start();
    let [a, b] = clients(&server).await;
    let name = unique_name("rw-share");
    let lock = a.read_write_lock(&name).unwrap();
    // A writer of `b` holds the lock while `a`'s readers come: they all wait for one share's
    // grant (readers that come after a grant ask for the next share).
    let other = b.read_write_lock(&name).unwrap();
    let blocker = other.write().lock().await.unwrap();
    // 16 readers of `a` at once, each through a handle of its own.
    let barrier = Arc::new(tokio::sync::Barrier::new(17));
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..16 {
        let (lock, barrier) = (a.read_write_lock(&name).unwrap(), barrier.clone());
        set.spawn(async move {
            let guard = lock.read().lock().await.unwrap();
            barrier.wait().await;
            barrier.wait().await;
            guard
        });
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    blocker.unlock().await.unwrap();
    barrier.wait().await;
    let shared = readers(&server, lock.key());
    assert_eq!(shared.len(), 1, "one hold for 16 readers: {shared:?}");
    assert!(shared[0].contains(":readers-"), "{shared:?}");
    // Another client's reader holds in its own name.
    let theirs = other.read().lock().await.unwrap();
    assert_eq!(readers(&server, lock.key()).len(), 2);
    // No writer while any of them reads.
    let writer = b.read_write_lock(&name).unwrap().with_owner(Owner::new());
    barrier.wait().await;
    let mut guards = Vec::new();
    while let Some(guard) = set.join_next().await {
        guards.push(guard.unwrap());
    }
    theirs.unlock().await.unwrap();
    let last = guards.pop().unwrap();
    for guard in guards {
        assert!(!guard.is_lost());
        guard.unlock().await.unwrap();
        assert!(
            writer.write().try_lock().await.unwrap().is_none(),
            "a writer got in beside a reader"
        );
    }
    // The last one out frees the lock.
    last.unlock().await.unwrap();
    let got = support::eventually_async(Duration::from_secs(1), || async {
        match writer.write().try_lock().await.unwrap() {
            Some(w) => w.unlock().await.is_ok(),
            None => false,
        }
    })
    .await;
    assert!(
        got,
        "the lock stayed read-locked: {:?}",
        fields(&server, lock.key())
    );
    assert!(!support::exists(&server, lock.key()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_reader_is_released_by_its_unlock() {
    support::init_tracing();
    let server = Server::start();
    let [a, b] = clients(&server).await;
    let name = unique_name("rw-lone");
    let lock = a.read_write_lock(&name).unwrap();
    let writer = b.read_write_lock(&name).unwrap();
    for _ in 0..3 {
        let r = lock.read().lock().await.unwrap();
        assert_eq!(readers(&server, lock.key()).len(), 1);
        r.unlock().await.unwrap();
        // Nothing lingers after a share that only ever had one reader.
        let w = writer
            .write()
            .try_lock()
            .await
            .unwrap()
            .expect("freed by the unlock");
        w.unlock().await.unwrap();
    }
    // A fixed lease is the reader's own: it holds in its own name, and so does its owner's
    // next read (a re-entry); another owner's reader forms a share.
    let fixed = LockOptions::new().lease(Duration::from_secs(5));
    let r = lock.read().try_lock_with(fixed).await.unwrap().unwrap();
    let again = lock.read().lock().await.unwrap();
    let names = readers(&server, lock.key());
    assert_eq!(names.len(), 1, "{names:?}");
    assert_eq!(fields(&server, lock.key())[&format!("r:{}", names[0])], "2");
    let other = lock.clone().with_owner(Owner::new());
    let shared = other.read().lock().await.unwrap();
    let names = readers(&server, lock.key());
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names.iter().any(|n| n.contains(":readers-")));
    r.unlock().await.unwrap();
    again.unlock().await.unwrap();
    shared.unlock().await.unwrap();
    assert!(!support::exists(&server, lock.key()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_keeps_reading_does_not_starve_a_writer() {
    support::init_tracing();
    let server = Server::start();
    let [a, b] = clients(&server).await;
    let name = unique_name("rw-stream");
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut set = tokio::task::JoinSet::new();
    // Eight readers of `a` overlapping without pause: the share never empties.
    for _ in 0..8 {
        let (lock, stop) = (a.read_write_lock(&name).unwrap(), stop.clone());
        set.spawn(async move {
            let mut reads = 0u64;
            let deadline = Instant::now() + Duration::from_secs(5);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && Instant::now() < deadline {
                let r = lock.read().lock().await.unwrap();
                tokio::time::sleep(Duration::from_millis(2)).await;
                r.unlock().await.unwrap();
                reads += 1;
            }
            reads
        });
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let writer = b.read_write_lock(&name).unwrap();
    let t0 = Instant::now();
    let options = LockOptions::new().wait(Duration::from_secs(3));
    let w = writer.write().try_lock_with(options).await.unwrap();
    let waited = t0.elapsed();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let w = w.expect("the writer starved behind one client's readers");
    assert!(
        waited < Duration::from_secs(1),
        "the writer waited {waited:?}"
    );
    w.unlock().await.unwrap();
    let mut reads = 0;
    while let Some(n) = set.join_next().await {
        reads += n.unwrap();
    }
    assert!(reads > 8, "the readers did not read ({reads})");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_downgrades_through_another_handle() {
    support::init_tracing();
    let server = Server::start();
    let a = support::client(&server).await;
    let name = unique_name("rw-downgrade");
    let owner = Owner::new();
    let first = a.read_write_lock(&name).unwrap().with_owner(owner);
    let second = a.read_write_lock(&name).unwrap().with_owner(owner);
    let w = first.write().lock().await.unwrap();
    // The owner's read lock is granted in its own name, not through a share it would wait for.
    let options = LockOptions::new().wait(Duration::from_secs(2));
    let r = second.read().try_lock_with(options).await.unwrap();
    let r = r.expect("a downgrade through another handle waited for itself");
    assert!(readers(&server, first.key())[0].contains(":owner-"));
    w.unlock().await.unwrap();
    // Still reading: a writer of another owner waits.
    let other = a.read_write_lock(&name).unwrap().with_owner(Owner::new());
    assert!(other.write().try_lock().await.unwrap().is_none());
    r.unlock().await.unwrap();
    assert!(other.write().try_lock().await.unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_that_stop_waiting_for_a_share_leave_nothing() {
    support::init_tracing();
    let server = Server::start();
    let [a, b] = clients(&server).await;
    let name = unique_name("rw-give-up");
    let writer = b.read_write_lock(&name).unwrap();
    let w = writer.write().lock().await.unwrap();
    let lock = a.read_write_lock(&name).unwrap();
    // One reader times out, another is cancelled: both waited for the same share.
    let timed = LockOptions::new().wait(Duration::from_millis(200));
    let (read_a, read_b) = (lock.read(), lock.read());
    let cancelled = tokio::time::timeout(Duration::from_millis(100), read_a.lock());
    let (timed_out, cancelled) = tokio::join!(read_b.try_lock_with(timed), cancelled);
    assert!(timed_out.unwrap().is_none());
    assert!(cancelled.is_err());
    w.unlock().await.unwrap();
    // Nobody asks for the share any more: nothing is granted to nobody.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !support::exists(&server, writer.key()),
        "left behind: {:?}",
        fields(&server, writer.key())
    );
    // And the next reader gets in at once.
    let r = lock.read().try_lock().await.unwrap().expect("free");
    r.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_held_back_by_a_local_writer_come_in_when_it_gives_up() {
    support::init_tracing();
    let server = Server::start();
    let [a, b] = clients(&server).await;
    let name = unique_name("rw-held-back");
    let theirs = b
        .read_write_lock(&name)
        .unwrap()
        .read()
        .lock()
        .await
        .unwrap();
    let lock = a.read_write_lock(&name).unwrap();
    // A writer of `a` waits for `b`'s reader, keeping new readers out; a reader of `a` waits
    // for a share (its wake-ups send nothing while the writer waits).
    let writer = lock.clone().with_owner(Owner::new());
    let reader = lock.clone().with_owner(Owner::new());
    let t0 = Instant::now();
    let give_up = LockOptions::new().wait(Duration::from_millis(300));
    let write = writer.write();
    let (written, read) = tokio::join!(write.try_lock_with(give_up), async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let r = reader.read().lock().await.unwrap();
        (r, t0.elapsed())
    });
    assert!(
        written.unwrap().is_none(),
        "the writer got in beside a reader"
    );
    let (r, waited) = read;
    assert!(
        waited >= Duration::from_millis(250) && waited < Duration::from_millis(900),
        "the reader came in after {waited:?}"
    );
    r.unlock().await.unwrap();
    theirs.unlock().await.unwrap();
}

/// A writer of another client waits (queued, it keeps new readers out) while `owner` reads
/// again: a re-entry, in whatever name the first read holds, is never held back.
async fn reenters_past_a_waiting_writer(first_fixed: bool) {
    support::init_tracing();
    let server = Server::start();
    let [a, b] = clients(&server).await;
    let name = unique_name("rw-reenter");
    let lock = a.read_write_lock(&name).unwrap();
    let fixed = LockOptions::new().lease(Duration::from_secs(10));
    let first = match first_fixed {
        // In its own name: a single attempt forms no share.
        true => lock.read().try_lock().await.unwrap().unwrap(),
        false => lock.read().lock().await.unwrap(),
    };
    let writer = b.read_write_lock(&name).unwrap();
    let waiting = tokio::spawn(async move {
        let w = writer.write().lock().await.unwrap();
        w.unlock().await.unwrap();
    });
    let queued = support::eventually(Duration::from_secs(1), || {
        support::exists(&server, &format!("{}:q", lock.key()))
    });
    assert!(queued, "the writer never waited");
    let options = match first_fixed {
        true => LockOptions::new().wait(Duration::from_secs(2)),
        false => fixed.wait(Duration::from_secs(2)),
    };
    let again = lock.read().try_lock_with(options).await.unwrap();
    let again = again.expect("a re-entry was held back by the writer that waits for it");
    again.unlock().await.unwrap();
    first.unlock().await.unwrap();
    tokio::time::timeout(Duration::from_secs(2), waiting)
        .await
        .expect("the writer never got in")
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_reading_in_its_own_name_reenters_past_a_waiting_writer() {
    reenters_past_a_waiting_writer(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_share_member_reenters_with_a_fixed_lease_past_a_waiting_writer() {
    reenters_past_a_waiting_writer(false).await;
}

/// A reader through a share asking for the write lock would wait for its own share: it is told
/// at once, and the share is untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_share_member_asking_to_write_is_told_it_would_deadlock() {
    let server = Server::start();
    let [a] = clients(&server).await;
    let name = unique_name("rw-share-upgrade");
    let lock = a.read_write_lock(&name).unwrap().with_owner(Owner::new());
    let read = lock.read().lock().await.unwrap();
    let shared = readers(&server, lock.key());
    assert!(
        shared.len() == 1 && shared[0].contains(":readers-"),
        "the read is a share's: {shared:?}"
    );
    let started = Instant::now();
    let err = tokio::time::timeout(Duration::from_secs(2), lock.write().lock())
        .await
        .expect("the upgrade waited for its own share")
        .unwrap_err();
    assert!(err.is_would_deadlock(), "{err}");
    assert!(started.elapsed() < Duration::from_millis(500));
    assert_eq!(readers(&server, lock.key()), shared);
    assert!(!read.is_lost());
    read.unlock().await.unwrap();
    assert!(!support::exists(&server, lock.key()));
}
