//! A guard dropped anywhere gives its hold back: on a plain `std::thread` (no runtime there) the
//! release runs on the runtime the client was built on; once that runtime has ended, the client
//! says so once instead of leaving the key silently.

mod support;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::{Server, unique_name};

/// How soon a guard dropped on a plain thread must be gone from the server.
const RELEASED_WITHIN: Duration = Duration::from_secs(1);

/// Drops `guard` on a fresh `std::thread`, outside any runtime, and waits for that thread.
fn drop_on_a_plain_thread<G: Send + 'static>(guard: G) {
    std::thread::spawn(move || drop(guard))
        .join()
        .expect("the dropping thread ended");
}

/// Waits (bounded) until `key` is gone from `server`; answers how long it took.
async fn gone_within(server: &Server, key: &str) -> Option<Duration> {
    let start = Instant::now();
    let servers = std::slice::from_ref(server);
    support::until_gone(servers, key, RELEASED_WITHIN)
        .await
        .then(|| start.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_guard_dropped_on_a_plain_thread_is_released() {
    support::init_tracing();
    let server = Server::start();
    let [holder, next] = support::clients(&server).await;
    let name = unique_name("dropped-thread");
    let lock = holder.lock(&name).unwrap();
    let guard = lock.lock().await.unwrap();
    assert!(support::exists(&server, lock.key()));

    drop_on_a_plain_thread(guard);
    let took = gone_within(&server, lock.key()).await;
    assert!(took.is_some(), "the dropped guard's key is still held");
    assert_eq!(holder.held_count(), 0);
    let taken = next.lock(&name).unwrap().try_lock().await.unwrap();
    assert!(taken.is_some(), "the next acquirer did not get the lock");
    taken.unwrap().unlock().await.unwrap();
}

#[tokio::test]
async fn on_a_current_thread_runtime_too() {
    support::init_tracing();
    let server = Server::start();
    let client = support::client(&server).await;
    let lock = client.lock(&unique_name("dropped-current")).unwrap();
    let guard = lock.lock().await.unwrap();
    drop_on_a_plain_thread(guard);
    // The runtime's one thread runs the release while this test waits.
    assert!(gone_within(&server, lock.key()).await.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_guard_kind_dropped_on_a_plain_thread_is_released() {
    support::init_tracing();
    let server = Server::start();
    let [holder, next] = support::clients(&server).await;
    let name = unique_name("dropped-kinds");

    let fair = holder.fair_lock(&format!("{name}-fair")).unwrap();
    drop_on_a_plain_thread(fair.lock().await.unwrap());
    assert!(
        gone_within(&server, fair.key()).await.is_some(),
        "fair lock"
    );
    let again = next
        .fair_lock(fair.name())
        .unwrap()
        .try_lock()
        .await
        .unwrap();
    assert!(
        again.is_some(),
        "fair lock: the next acquirer did not get it"
    );
    again.unwrap().unlock().await.unwrap();

    let rw = holder.read_write_lock(&format!("{name}-rw")).unwrap();
    drop_on_a_plain_thread(rw.write().lock().await.unwrap());
    assert!(gone_within(&server, rw.key()).await.is_some(), "write lock");
    drop_on_a_plain_thread(rw.read().lock().await.unwrap());
    assert!(gone_within(&server, rw.key()).await.is_some(), "read lock");
    let writer = next.read_write_lock(rw.name()).unwrap();
    let again = writer.write().try_lock().await.unwrap();
    assert!(
        again.is_some(),
        "write lock: the next acquirer did not get it"
    );
    again.unwrap().unlock().await.unwrap();

    let permits = holder.permit_semaphore(&format!("{name}-permits")).unwrap();
    permits.set_permits(1).await.unwrap();
    drop_on_a_plain_thread(permits.acquire().await.unwrap());
    let freed = support::eventually_async(RELEASED_WITHIN, || async {
        permits.available().await.unwrap() == 1
    })
    .await;
    assert!(
        freed,
        "permit semaphore: the dropped permit was not given back"
    );

    let members = ["a", "b"].map(|m| holder.lock(&format!("{name}-{m}")).unwrap());
    let keys = members.clone().map(|m| m.key().to_owned());
    let both = redlease::MultiLock::new(members.into()).unwrap();
    drop_on_a_plain_thread(both.lock().await.unwrap());
    for key in &keys {
        assert!(
            gone_within(&server, key).await.is_some(),
            "multilock member {key}"
        );
    }
    assert_eq!(holder.held_count(), 0);
}

/// Log lines written by `tracing` while a test's subscriber is the thread's default.
#[derive(Clone, Default)]
struct Logged(Arc<Mutex<Vec<u8>>>);

impl Logged {
    fn count(&self, needle: &str) -> usize {
        let bytes = self.0.lock().unwrap();
        String::from_utf8_lossy(&bytes).matches(needle).count()
    }
}

impl Write for Logged {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_guard_dropped_after_its_runtime_ended_is_reported_once() {
    let server = Server::start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let name = unique_name("dropped-late");
    let (client, guards) = runtime.block_on(async {
        let client = support::client(&server).await;
        let mut guards = Vec::new();
        for i in 0..2 {
            let lock = client.lock(&format!("{name}-{i}")).unwrap();
            guards.push(lock.lock().await.unwrap());
        }
        (client, guards)
    });
    drop(runtime);

    let logged = Logged::default();
    let writer = logged.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_max_level(tracing::Level::WARN)
        .finish();
    tracing::subscriber::with_default(subscriber, || {
        for guard in guards {
            drop(guard);
        }
        drop(client);
    });
    let needle = "runtime this client was built on has ended";
    assert_eq!(logged.count(needle), 1, "warned other than once");
    // Not released (nothing is left to run it), but said so: the key waits for its lease.
    assert!(support::exists(
        &server,
        &support::key_of(&format!("{name}-0"))
    ));
}
