//! Errors that name their cause, against real servers: a server that wants a password, a wrong
//! password, a server that is down under a lazy client, a zero election lease, a future polled
//! outside tokio, and whether a status says the lock is held.

mod support;

use std::future::Future;
use std::net::{Ipv4Addr, TcpListener};
use std::sync::Arc;
use std::task::{Context, Poll, Wake};
use std::time::{Duration, Instant};

use redlease::{Client, Error};
use support::{Server, unique_name};

/// Makes the server ask for `password` from now on (a server started with `--requirepass`
/// would not answer the readiness probe's PING).
fn require_password(server: &Server, password: &str) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg(password)
        .query(&mut server.conn())
        .expect("CONFIG SET requirepass");
}

/// A port nothing listens on (bound by the OS a moment ago and released).
fn closed_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .expect("binding 127.0.0.1:0")
        .port()
}

/// Polls `fut` to completion on a plain thread, outside any tokio runtime (as another executor
/// would), for at most 10 s: `Ok(None)` when it did not finish, `Err` with the panic's message
/// when it panicked.
fn poll_on_plain_thread<F>(fut: F) -> Result<Option<F::Output>, String>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    std::thread::spawn(move || {
        let waker = Arc::new(Unpark(std::thread::current())).into();
        let mut cx = Context::from_waker(&waker);
        let mut fut = std::pin::pin!(fut);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
                return Some(out);
            }
            std::thread::park_timeout(Duration::from_millis(20));
        }
        None
    })
    .join()
    .map_err(|panic| {
        panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_default()
    })
}

#[tokio::test]
async fn a_server_that_needs_a_password_is_an_auth_error_not_an_acl_check() {
    let server = Server::start();
    require_password(&server, "s3cret");
    let error = Client::connect(&server.url()).await.unwrap_err();
    assert!(error.is_auth(), "{error:?}");
    let text = error.to_string();
    assert!(text.contains("NOAUTH"), "{text}");
    assert!(!text.contains("ACL"), "{text}");
    // The same when the rights are not checked at connect: the first lock says so.
    let client = Client::builder(server.url())
        .check_rights(false)
        .build()
        .await
        .unwrap();
    let error = client.lock("report").unwrap().try_lock().await.unwrap_err();
    assert!(error.is_auth(), "{error:?}");
    assert!(!error.is_unavailable(), "{error:?}");
    client.shutdown().await.unwrap();
    // With the password in the URL, it works.
    let url = format!("redis://:s3cret@127.0.0.1:{}", server.port());
    let client = Client::connect(&url).await.unwrap();
    let guard = client.lock("report").unwrap().try_lock().await.unwrap();
    assert!(guard.is_some());
    drop(guard);
    client.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_wrong_password_is_an_auth_error() {
    let server = Server::start();
    require_password(&server, "s3cret");
    let url = format!("redis://:wrong@127.0.0.1:{}", server.port());
    let error = Client::connect(&url).await.unwrap_err();
    assert!(error.is_auth(), "{error:?}");
    assert!(!error.to_string().contains("ACL"), "{error}");
}

#[tokio::test]
async fn a_lazy_client_whose_server_is_down_says_it_could_not_connect() {
    let url = format!("redis://127.0.0.1:{}", closed_port());
    let client = Client::builder(&url).lazy(true).build().await.unwrap();
    let lock = client.lock("report").unwrap();
    let error = lock.try_lock().await.unwrap_err();
    assert!(error.is_unavailable(), "{error:?}");
    let text = error.to_string();
    assert!(!text.contains("ACL"), "{text}");
    assert!(text.contains("connect"), "{text}");
    client.shutdown().await.unwrap();
}

#[tokio::test]
async fn an_election_lease_of_zero_names_the_election_lease() {
    let server = Server::start();
    let client = support::client(&server).await;
    let election = client
        .election(&unique_name("zero-lease"))
        .unwrap()
        .lease(Duration::ZERO);
    let error = election.campaign("a").await.unwrap_err();
    let Error::InvalidDuration { what, .. } = &error else {
        panic!("{error:?}");
    };
    assert_eq!(*what, "election lease", "{error}");
    let error = election
        .try_campaign_for("a", Duration::ZERO)
        .await
        .unwrap_err();
    assert!(error.to_string().contains("election lease"), "{error}");
    client.shutdown().await.unwrap();
}

#[test]
fn a_future_polled_outside_tokio_is_an_error_not_a_panic() {
    let server = Server::start();
    let url = server.url();
    let connected = poll_on_plain_thread(async move { Client::connect(&url).await.map(drop) })
        .expect("connecting outside tokio panicked")
        .expect("connecting outside tokio finished");
    let error = connected.unwrap_err();
    assert!(error.is_no_runtime(), "{error:?}");
    assert!(error.to_string().contains("tokio runtime"), "{error}");

    // A client made in a runtime, its lock polled outside one.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = rt.block_on(support::client(&server));
    let lock = client.lock(&unique_name("outside")).unwrap();
    let tried = poll_on_plain_thread(async move { lock.try_lock().await.map(|g| g.is_some()) })
        .expect("a lock polled outside tokio panicked")
        .expect("a lock polled outside tokio finished");
    assert!(tried.unwrap_err().is_no_runtime());
    let lock = client.lock(&unique_name("outside")).unwrap();
    let status = poll_on_plain_thread(async move { lock.status().await.map(drop) })
        .expect("a status read outside tokio panicked")
        .expect("a status read outside tokio finished");
    assert!(status.unwrap_err().is_no_runtime());
    let members = ["a", "b"].map(|m| client.lock(&unique_name(&format!("outside-{m}"))).unwrap());
    let both = redlease::MultiLock::new(members.into()).unwrap();
    let tried = poll_on_plain_thread(async move { both.try_lock().await.map(|g| g.is_some()) })
        .expect("a MultiLock polled outside tokio panicked")
        .expect("a MultiLock polled outside tokio finished");
    let error = tried.unwrap_err();
    assert!(error.is_no_runtime(), "{error:?}");
    // A RedLock over three independent masters.
    let masters = [Server::start(), Server::start(), Server::start()];
    let name = unique_name("outside-redlock");
    let mut locks = Vec::new();
    for master in &masters {
        locks.push(rt.block_on(support::client(master)).lock(&name).unwrap());
    }
    let redlock = redlease::RedLock::new(locks).unwrap();
    let tried = poll_on_plain_thread(async move { redlock.try_lock().await.map(|g| g.is_some()) })
        .unwrap_or_else(|panic| panic!("a RedLock polled outside tokio panicked: {panic}"))
        .expect("a RedLock polled outside tokio finished");
    let error = tried.unwrap_err();
    assert!(error.is_no_runtime(), "{error:?}");
    // Its guard, taken in a runtime and unlocked outside one: an error, and released on every
    // master all the same.
    let mut locks = Vec::new();
    for master in &masters {
        locks.push(rt.block_on(support::client(master)).lock(&name).unwrap());
    }
    let redlock = redlease::RedLock::new(locks).unwrap();
    let guard = rt
        .block_on(redlock.try_lock())
        .unwrap()
        .expect("a free RedLock");
    let unlocked = poll_on_plain_thread(async move { guard.unlock().await })
        .unwrap_or_else(|panic| panic!("a RedLock guard unlocked outside tokio panicked: {panic}"))
        .expect("a RedLock guard unlocked outside tokio finished");
    let error = unlocked.unwrap_err();
    assert!(error.is_no_runtime(), "{error:?}");
    let released = support::eventually(Duration::from_secs(2), || {
        masters
            .iter()
            .all(|master| !support::exists(master, &support::key_of(&name)))
    });
    assert!(released, "the RedLock's holds outlived its guard's unlock");
    // A guard taken in a runtime, given back outside one: the caller hears of it, and the
    // hold is released all the same (on the client's runtime), not left until shutdown.
    let name = unique_name("outside");
    let lock = client.lock(&name).unwrap();
    let guard = rt.block_on(lock.lock()).unwrap();
    let unlocked = poll_on_plain_thread(async move { guard.unlock().await })
        .expect("an unlock outside tokio panicked")
        .expect("an unlock outside tokio finished");
    assert!(unlocked.unwrap_err().is_no_runtime());
    let released = support::eventually(Duration::from_secs(2), || {
        !support::exists(&server, &support::key_of(&name))
    });
    assert!(released, "the hold outlived its guard's unlock");
    assert_eq!(client.held_count(), 0);
    // A shutdown outside tokio is refused before it starts: asked again in the runtime, it
    // still gives back what the client holds.
    let guard = rt.block_on(client.lock(&name).unwrap().lock()).unwrap();
    let remote = client.clone();
    let shut = poll_on_plain_thread(async move { remote.shutdown().await })
        .unwrap_or_else(|panic| panic!("a shutdown outside tokio panicked: {panic}"))
        .expect("a shutdown outside tokio finished");
    assert!(shut.unwrap_err().is_no_runtime());
    rt.block_on(client.shutdown()).unwrap();
    assert!(
        guard.is_lost(),
        "the shutdown in the runtime did not end the guard"
    );
    assert!(
        !support::exists(&server, &support::key_of(&name)),
        "the shutdown in the runtime left the hold"
    );
}

/// The lock family's guards given back outside a tokio runtime: as a `LockGuard`'s unlock, the
/// caller hears `is_no_runtime` (no panic), and the hold is given back all the same on the
/// client's runtime.
#[test]
fn a_family_guard_given_back_outside_tokio_is_an_error_not_a_panic() {
    let server = Server::start();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = rt.block_on(support::client(&server));
    let name = unique_name("outside-family");

    let rw = client.read_write_lock(&format!("{name}-rw")).unwrap();
    let key = rw.key().to_owned();
    for side in ["write", "read"] {
        let unlocked = if side == "write" {
            let guard = rt.block_on(rw.write().lock()).unwrap();
            poll_on_plain_thread(async move { guard.unlock().await })
        } else {
            let guard = rt.block_on(rw.read().lock()).unwrap();
            poll_on_plain_thread(async move { guard.unlock().await })
        };
        let unlocked = unlocked
            .unwrap_or_else(|panic| panic!("a {side} unlock outside tokio panicked: {panic}"))
            .expect("the unlock outside tokio finished");
        assert!(unlocked.unwrap_err().is_no_runtime(), "{side}");
        let released =
            support::eventually(Duration::from_secs(2), || !support::exists(&server, &key));
        assert!(released, "the {side} hold outlived its guard's unlock");
    }

    let permits = client.permit_semaphore(&format!("{name}-permits")).unwrap();
    rt.block_on(permits.set_permits(1)).unwrap();
    let permit = rt.block_on(permits.acquire()).unwrap();
    let released = poll_on_plain_thread(async move { permit.release().await })
        .unwrap_or_else(|panic| panic!("a permit's release outside tokio panicked: {panic}"))
        .expect("the release outside tokio finished");
    assert!(released.unwrap_err().is_no_runtime());
    let freed = rt.block_on(support::eventually_async(
        Duration::from_secs(2),
        || async { permits.available().await.unwrap() == 1 },
    ));
    assert!(freed, "the permit outlived its release");
    assert_eq!(client.held_count(), 0);
    rt.block_on(client.shutdown()).unwrap();
}

#[tokio::test]
async fn a_status_says_whether_the_lock_is_held() {
    let server = Server::start();
    let client = support::client(&server).await;
    let lock = client.lock(&unique_name("held")).unwrap();
    assert!(!lock.status().await.unwrap().is_held());
    let guard = lock.lock().await.unwrap();
    assert!(lock.status().await.unwrap().is_held());
    guard.unlock().await.unwrap();
    assert!(!lock.status().await.unwrap().is_held());
    client.shutdown().await.unwrap();
}
