//! Bad input is rejected with a typed error, before anything is sent, and leaves Redis as it
//! was; odd but valid names work.

mod support;

use redlease::LockOptions;
use std::time::Duration;

use redlease::{Client, Error, Lock, LockGuard, MAX_DURATION};
use support::{
    Server, client, clients, exists, get_string, set_string, spawn_waiter, take_and_release,
    unique_name, unlock_channel, until_subscribed, woken_after_unlock,
};

/// Everything in the database: (DBSIZE, sorted keys with their types).
fn contents(server: &Server) -> (u64, Vec<(Vec<u8>, String)>) {
    let mut conn = server.conn();
    let size: u64 = redis::cmd("DBSIZE").query(&mut conn).unwrap();
    let mut keys: Vec<Vec<u8>> = redis::cmd("KEYS").arg("*").query(&mut conn).unwrap();
    keys.sort();
    let typed = keys
        .into_iter()
        .map(|k| {
            let kind: String = redis::cmd("TYPE").arg(&k).query(&mut conn).unwrap();
            (k, kind)
        })
        .collect();
    (size, typed)
}

/// A lock held for a minute, so that "unchanged" is not trivially "empty".
async fn hold_witness(client: &Client) -> LockGuard {
    let witness = client.lock(&unique_name("witness")).unwrap();
    witness
        .lock_with(LockOptions::new().lease(Duration::from_secs(60)))
        .await
        .unwrap()
}

fn assert_invalid_name(result: redlease::Result<Lock>, what: &str) {
    match result {
        Err(Error::InvalidName { .. }) => {}
        other => panic!("{what}: expected InvalidName, got {other:?}"),
    }
}

fn assert_invalid_duration<T: std::fmt::Debug>(result: redlease::Result<T>, what: &str) {
    match result {
        Err(e @ Error::InvalidDuration { .. }) => assert!(e.is_invalid_input()),
        other => panic!("{what}: expected InvalidDuration, got {other:?}"),
    }
}

#[tokio::test]
async fn bad_names_are_rejected_and_change_nothing() {
    let server = Server::start();
    let client = client(&server).await;
    let held = hold_witness(&client).await;
    let before = contents(&server);

    assert_invalid_name(client.lock(""), "empty name");
    assert_invalid_name(client.lock("}"), "lone `}`");
    assert_invalid_name(client.lock("}orders:42"), "`}`-led name");
    assert_invalid_name(client.lock(&"a".repeat(4097)), "4097-byte name");
    assert_invalid_name(client.lock(&"é".repeat(2049)), "4098 bytes of 2-byte chars");
    assert_invalid_name(client.lock(&"x".repeat(1 << 20)), "1 MiB name");
    // The limit itself is accepted, and works.
    let longest = client.lock(&"n".repeat(4096)).unwrap();
    assert!(!longest.is_locked().await.unwrap());

    assert_eq!(contents(&server), before, "a rejected name changed Redis");
    held.unlock().await.unwrap();
}

#[tokio::test]
async fn bad_leases_and_waits_are_rejected_and_change_nothing() {
    let server = Server::start();
    let client = client(&server).await;
    let held = hold_witness(&client).await;
    let lock = client.lock(&unique_name("durations")).unwrap();
    let before = contents(&server);
    let ok = Duration::from_secs(1);
    let absurd = [
        ("365 days + 1 s", MAX_DURATION + Duration::from_secs(1)),
        ("Duration::MAX", Duration::MAX),
    ];

    assert_invalid_duration(
        lock.lock_with(LockOptions::new().lease(Duration::ZERO))
            .await,
        "zero lease",
    );
    assert_invalid_duration(
        lock.lock_with(LockOptions::new().lease(Duration::from_micros(500)))
            .await,
        "sub-millisecond lease",
    );
    assert_invalid_duration(
        lock.try_lock_with(LockOptions::new().wait(ok).lease(Duration::ZERO))
            .await,
        "zero lease with a wait",
    );
    let zero_watchdog = lock.clone().watchdog_lease(Duration::ZERO);
    assert_invalid_duration(zero_watchdog.lock().await, "zero watchdog lease");
    assert_invalid_duration(zero_watchdog.try_lock().await, "zero watchdog lease");
    for (what, d) in absurd {
        assert_invalid_duration(lock.lock_with(LockOptions::new().lease(d)).await, what);
        assert_invalid_duration(lock.try_lock_with(LockOptions::new().wait(d)).await, what);
        assert_invalid_duration(
            lock.try_lock_with(LockOptions::new().wait(d).lease(ok))
                .await,
            what,
        );
        assert_invalid_duration(
            lock.try_lock_with(LockOptions::new().wait(ok).lease(d))
                .await,
            what,
        );
        let huge = lock.clone().watchdog_lease(d);
        assert_invalid_duration(huge.lock().await, what);
        assert_invalid_duration(huge.try_lock_with(LockOptions::new().wait(ok)).await, what);
    }
    // The limit itself is accepted.
    let g = lock
        .try_lock_with(LockOptions::new().wait(ok).lease(MAX_DURATION))
        .await
        .unwrap()
        .expect("free");
    let changed = contents(&server);
    g.unlock().await.unwrap();
    assert_ne!(changed, before, "the valid acquisition did write");

    // Only the valid acquisition (now released) and its release latch may differ.
    let (_, after) = contents(&server);
    let latch_prefix = format!("{}:latch:", lock.key());
    let after: Vec<_> = after
        .into_iter()
        .filter(|(k, _)| !k.starts_with(latch_prefix.as_bytes()))
        .collect();
    assert_eq!(after, before.1, "a rejected duration changed Redis");
    assert_eq!(client.held_count(), 1, "only the witness is held");
    held.unlock().await.unwrap();
}

#[tokio::test]
async fn bad_client_settings_are_rejected() {
    let server = Server::start();
    for (what, lease) in [
        ("zero", Duration::ZERO),
        ("absurd", MAX_DURATION + Duration::from_secs(1)),
        ("Duration::MAX", Duration::MAX),
    ] {
        let built = Client::builder(server.url())
            .watchdog_lease(lease)
            .build()
            .await;
        assert_invalid_duration(built, what);
        let built = Client::builder(server.url()).timeout(lease).build().await;
        assert_invalid_duration(built, what);
        if !lease.is_zero() {
            // Zero is a valid linger: the channel is left at once.
            let built = Client::builder(server.url())
                .channel_linger(lease)
                .build()
                .await;
            assert_invalid_duration(built, what);
        }
    }
    let built = Client::builder(server.url()).prefix("").build().await;
    assert!(
        matches!(built, Err(Error::InvalidArgument(_))),
        "empty prefix: {built:?}"
    );
    for url in ["", "not a url", "http://127.0.0.1:6379", "redis://"] {
        let built = Client::builder(url)
            .timeout(Duration::from_millis(500))
            .build()
            .await;
        assert!(built.is_err(), "{url:?} was accepted");
    }
}

fn assert_wrong_type<T: std::fmt::Debug>(result: redlease::Result<T>, key: &str, what: &str) {
    match result {
        Err(Error::WrongType { key: k }) => assert_eq!(k, key, "{what}"),
        other => panic!("{what}: expected WrongType, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_key_holding_a_string_is_wrong_type_and_survives() {
    let server = Server::start();
    let client = client(&server).await;
    let lock = client.lock(&unique_name("string")).unwrap();
    let key = lock.key().to_owned();
    set_string(&server, &key, "not a lock");
    let before = contents(&server);

    assert_wrong_type(lock.try_lock().await, &key, "try_lock");
    assert_wrong_type(
        lock.try_lock_with(LockOptions::new().wait(Duration::from_secs(1)))
            .await,
        &key,
        "try_lock_with(wait)",
    );
    assert_wrong_type(
        lock.lock_with(LockOptions::new().lease(Duration::from_secs(1)))
            .await,
        &key,
        "lock_with(lease)",
    );
    // A waiting lock() reports it at once instead of waiting for a lock that cannot come.
    let waited = tokio::time::timeout(Duration::from_secs(5), lock.lock())
        .await
        .expect("lock() waited on a key of the wrong type");
    assert_wrong_type(waited, &key, "lock");
    assert_wrong_type(lock.clone().fenced(true).try_lock().await, &key, "fenced");
    assert_wrong_type(lock.is_locked().await, &key, "is_locked");
    assert_wrong_type(lock.hold_count().await, &key, "hold_count");
    assert_wrong_type(lock.remaining_lease().await, &key, "remaining_lease");
    assert_wrong_type(lock.status().await, &key, "status");
    assert_wrong_type(lock.unlock().await, &key, "unlock");
    assert_wrong_type(lock.force_unlock().await, &key, "force_unlock");

    assert_eq!(get_string(&server, &key).as_deref(), Some("not a lock"));
    assert_eq!(contents(&server), before, "a WRONGTYPE call changed Redis");
    assert_eq!(client.held_count(), 0);
    assert_eq!(client.renew_now().await.unwrap().locks, 0);
}

#[tokio::test]
async fn fence_key_holding_garbage_fails_before_anything_is_written() {
    let server = Server::start();
    let client = client(&server).await;
    let lock = client.lock(&unique_name("bad-fence")).unwrap().fenced(true);
    let fence = format!("{}:fence", lock.key());
    set_string(&server, &fence, "not a number");
    let before = contents(&server);
    let err = lock.try_lock().await.map(|g| g.is_some()).unwrap_err();
    assert!(!err.is_invalid_input(), "{err:?}");
    assert_eq!(contents(&server), before, "a failed fenced acquire wrote");
    assert_eq!(get_string(&server, &fence).as_deref(), Some("not a number"));
    assert_eq!(client.held_count(), 0);
    // Unfenced, the same name works: the garbage is only in the counter.
    take_and_release(&client.lock(lock.name()).unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_but_valid_names_work() {
    let server = Server::start();
    let [a, b] = clients(&server).await;
    let names = [
        "orders:{42}",
        "{",
        "x}}{{",
        "a}b{c",
        "with spaces  inside ",
        "line\nbreak\r\nand\ttab",
        "ünïcödé 🔒 锁",
        " ",
        "\u{0}nul",
        "*?[glob]",
    ];
    for name in names {
        let lock = a.lock(name).unwrap();
        assert_eq!(lock.name(), name);
        assert_eq!(lock.key(), format!("redlease:{{{name}}}"));
        let guard = lock.lock().await.unwrap();
        assert!(exists(&server, lock.key()), "{name:?}: no key");
        assert!(lock.is_locked().await.unwrap(), "{name:?}");
        let rival = b.lock(name).unwrap();
        assert!(
            rival.try_lock().await.unwrap().is_none(),
            "{name:?}: another client got in"
        );
        // A waiter on the same name is woken through its (oddly named) channel.
        let waiting = spawn_waiter(rival.clone());
        let subscribed = until_subscribed(&server, &unlock_channel(lock.key()), 1).await;
        assert!(subscribed, "{name:?}: the waiter did not subscribe");
        woken_after_unlock(guard, waiting, Duration::from_secs(5)).await;
        assert!(!lock.is_locked().await.unwrap(), "{name:?}");
    }
    assert_eq!(a.held_count(), 0);
    assert_eq!(b.held_count(), 0);
}

/// Every setting has one setter on the builder; an out-of-range drift factor is refused at
/// build, before anything connects.
#[tokio::test]
async fn builder_setters_are_checked_at_build() {
    let server = Server::start();
    for factor in [0.5, -0.1, f64::NAN] {
        let built = Client::builder(server.url())
            .drift_factor(factor)
            .build()
            .await;
        let err = built.expect_err("an out-of-range drift factor must be refused");
        assert!(err.is_invalid_input(), "{err}");
    }
    let client = Client::builder(server.url())
        .drift_factor(0.1)
        .release_retries(0)
        .build()
        .await
        .unwrap();
    assert_eq!(client.config().release_retries, 0);
    assert!((client.config().drift_factor - 0.1).abs() < f64::EPSILON);
}
