//! TLS: a real server with a TLS port and certificates made by the test (`support/tls.rs`).
//! Every lock feature over `rediss://` (the subscriber's connection included), mutual TLS, and
//! a wrong CA or a plain URL with TLS options as typed errors at connect.

mod support;

use std::time::{Duration, Instant};

use redlease::{Client, Error, TlsOptions};
use support::tls::{Pki, TlsServer};
use support::{
    command_calls, key_of, pttl, spawn_waiter, take_and_release, unique_name, woken_after_unlock,
};

const LEASE: Duration = Duration::from_millis(900);
const TIMEOUT: Duration = Duration::from_secs(2);

async fn tls_client(server: &TlsServer, tls: TlsOptions) -> Client {
    Client::builder(server.url())
        .tls(tls)
        .watchdog_lease(LEASE)
        .timeout(LEASE / 3)
        .build()
        .await
        .unwrap_or_else(|e| panic!("TLS client of {}: {e}", server.url()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_wait_renewal_and_fencing_over_rediss() {
    let Some(server) = TlsServer::start(false) else {
        return;
    };
    let before = server.tls_connections();
    let holder = tls_client(&server, server.pki.ca_only()).await;
    let waiter = tls_client(&server, server.pki.ca_only()).await;
    let name = unique_name("tls");
    let key = key_of(&name);

    // Held across three leases: the watchdog renews over TLS.
    let guard = holder
        .lock(&name)
        .unwrap()
        .fenced(true)
        .lock()
        .await
        .unwrap();
    let first_token = guard.fencing_token();
    let waiting = spawn_waiter(waiter.lock(&name).unwrap().fenced(true));
    tokio::time::sleep(LEASE * 3).await;
    let ttl = pttl(&server.server, &key);
    assert!(
        ttl > 0,
        "PTTL {ttl} after three leases: not renewed over TLS"
    );
    assert!(!waiting.is_finished(), "the waiter got a held lock");
    assert!(
        command_calls(&server.server, "subscribe") >= 1,
        "the waiter never subscribed"
    );
    // Both clients' command and subscriber connections came in on the TLS port.
    let tls_conns = server.tls_connections() - before;
    assert!(
        tls_conns >= 3,
        "{tls_conns} connections on the TLS port: the subscriber must use TLS too"
    );

    // Woken by the unlock message (over the TLS subscriber), well before a lease would end.
    let woken = woken_after_unlock(guard, waiting, Duration::from_secs(5)).await;
    assert!(
        woken < LEASE,
        "woken {woken:?} after the unlock: not by pub/sub"
    );

    // Fencing: the next holder's token is larger.
    let again = waiter
        .lock(&name)
        .unwrap()
        .fenced(true)
        .lock()
        .await
        .unwrap();
    let (Some(first), Some(second)) = (first_token, again.fencing_token()) else {
        panic!("no fencing tokens over TLS");
    };
    assert!(second > first, "token {second} after {first}");
    again.unlock().await.unwrap();
    holder.shutdown().await.unwrap();
    waiter.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_needs_the_client_certificate() {
    let Some(server) = TlsServer::start(true) else {
        return;
    };
    let without = Client::builder(server.url())
        .tls(server.pki.ca_only())
        .timeout(TIMEOUT)
        .build()
        .await;
    let error = without.expect_err("a server requiring client certificates let us in");
    // rustls reports the server's alert: "received fatal alert: CertificateRequired".
    assert!(error.is_tls(), "refused client certificate: {error:?}");

    let client = tls_client(&server, server.pki.options()).await;
    let name = unique_name("mtls");
    let guard = client.lock(&name).unwrap().lock().await.unwrap();
    assert!(pttl(&server.server, &key_of(&name)) > 0);
    guard.unlock().await.unwrap();
    assert_eq!(pttl(&server.server, &key_of(&name)), -2, "still held");
    client.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_ca_is_a_tls_error_at_connect() {
    let Some(server) = TlsServer::start(false) else {
        return;
    };
    let stranger = Pki::new();
    let start = Instant::now();
    let error = Client::builder(server.url())
        .tls(stranger.ca_only())
        .timeout(TIMEOUT)
        .build()
        .await
        .expect_err("a server signed by another CA was trusted");
    assert!(matches!(error, Error::Tls { .. }), "{error:?}");
    assert!(!error.is_unavailable(), "{error:?}");
    assert!(
        start.elapsed() < TIMEOUT + Duration::from_secs(1),
        "took {:?}",
        start.elapsed()
    );

    // A lazy client learns it at its first call (its rights check makes the first connection).
    let lazy = support::client_at(server.url(), |b| {
        b.tls(stranger.ca_only()).timeout(TIMEOUT).lazy(true)
    })
    .await;
    let error = lazy.lock("lazy").unwrap().try_lock().await.unwrap_err();
    assert!(error.is_tls(), "{error:?}");

    // No CA given: the system's trust store does not know the test CA either.
    let error = Client::builder(server.url())
        .timeout(TIMEOUT)
        .build()
        .await
        .expect_err("the system trusted the test CA");
    assert!(error.is_tls(), "{error:?}");

    // TLS spoken to the plain port: the server waits for the end of what it takes for an
    // inline command, so this ends as a timeout; bounded all the same.
    let start = Instant::now();
    let error = Client::builder(format!("rediss://127.0.0.1:{}", server.server.port()))
        .tls(server.pki.ca_only())
        .timeout(TIMEOUT)
        .build()
        .await
        .expect_err("TLS to a plain port succeeded");
    assert!(error.is_tls() || error.is_timeout(), "{error:?}");
    assert!(start.elapsed() < TIMEOUT + Duration::from_secs(1));

    // TLS options on a plain URL: refused before connecting.
    let plain = format!("redis://127.0.0.1:{}", server.server.port());
    let error = Client::builder(plain)
        .tls(server.pki.ca_only())
        .build()
        .await
        .expect_err("TLS options on redis:// accepted");
    assert!(error.is_invalid_input(), "{error:?}");

    // Nothing was left behind by the failed clients.
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("redlease:*")
        .query(&mut server.server.conn())
        .unwrap();
    assert!(keys.is_empty(), "{keys:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valkeys_scheme_and_own_redis_client() {
    let Some(server) = TlsServer::start(false) else {
        return;
    };
    let url = format!("valkeys://127.0.0.1:{}", server.tls_port);
    let client = support::client_at(url.as_str(), |b| b.tls(server.pki.ca_only())).await;
    let name = unique_name("valkeys");
    take_and_release(&client.lock(&name).unwrap()).await;
    client.shutdown().await.unwrap();

    // A redis::Client built by the caller with its own certificates.
    let certs = redis::TlsCertificates {
        client_tls: None,
        root_cert: Some(server.pki.ca_pem.clone().into_bytes()),
    };
    let own = redis::Client::build_with_tls(server.url(), certs).unwrap();
    let client = Client::builder_from_redis(own).build().await.unwrap();
    let guard = client.lock(&name).unwrap().lock().await.unwrap();
    assert!(pttl(&server.server, &key_of(&name)) > 0);
    guard.unlock().await.unwrap();
    client.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_over_tls() {
    let Some(cluster) = support::tls::TlsCluster::start() else {
        return;
    };
    let ca = cluster.nodes[0].pki.ca_only();
    let connect = || async {
        Client::builder(cluster.url())
            .tls(ca.clone())
            .watchdog_lease(LEASE)
            .timeout(LEASE / 3)
            .build()
            .await
            .unwrap_or_else(|e| panic!("TLS cluster client: {e}"))
    };
    let (holder, waiter) = (connect().await, connect().await);
    // One name per primary, so every node's TLS connection carries a lock.
    let mut names = Vec::new();
    let mut primaries = std::collections::HashSet::new();
    for i in 0..200 {
        let name = unique_name(&format!("tls-cluster{i}"));
        let slot = support::key_slot(&key_of(&name));
        if primaries.insert(slot / 5461) {
            names.push(name);
        }
        if primaries.len() == 3 {
            break;
        }
    }
    assert_eq!(names.len(), 3, "names for every primary");
    let primary_of =
        |name: &str| &cluster.nodes[(support::key_slot(&key_of(name)) / 5461) as usize].server;
    let mut held = Vec::new();
    for name in &names {
        let guard = holder.lock(name).unwrap().lock().await.unwrap();
        let waiting = spawn_waiter(waiter.lock(name).unwrap());
        let channel = support::unlock_channel(&key_of(name));
        let subscribed = support::eventually_async(Duration::from_secs(5), || async {
            support::shard_numsub(primary_of(name), &channel) == 1
        })
        .await;
        assert!(subscribed, "the waiter never subscribed over TLS");
        held.push((name, guard, waiting));
    }
    // Two leases: the watchdog renews on every primary over TLS.
    tokio::time::sleep(LEASE * 2).await;
    for (name, guard, waiting) in held {
        assert!(pttl(primary_of(name), &key_of(name)) > 0, "not renewed");
        let woken = woken_after_unlock(guard, waiting, Duration::from_secs(5)).await;
        assert!(
            woken < LEASE,
            "woken {woken:?} after the unlock: not by pub/sub"
        );
    }
    for node in &cluster.nodes {
        assert!(node.tls_connections() >= 2, "a primary without TLS clients");
    }
    holder.shutdown().await.unwrap();
    waiter.shutdown().await.unwrap();

    // Another CA: a TLS error for the cluster too.
    let error = Client::builder(cluster.url())
        .tls(Pki::new().ca_only())
        .timeout(TIMEOUT)
        .build()
        .await
        .expect_err("a cluster signed by another CA was trusted");
    assert!(error.is_tls(), "{error:?}");
}

/// Bring your own connection settings (plain TCP here): a `redis::Client` for database 2, and
/// redis-rs's connection manager settings, whose response timeout redlease refuses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn own_redis_client_and_connection_manager_settings() {
    let server = support::Server::start();
    let own = redis::Client::open(format!("{}/2", server.url())).unwrap();
    let client = Client::builder_from_redis(own).build().await.unwrap();
    let name = unique_name("own-db");
    let guard = client.lock(&name).unwrap().lock().await.unwrap();
    let in_db = |db: u8| -> i64 {
        let mut conn = server.conn();
        let _: () = redis::cmd("SELECT").arg(db).query(&mut conn).unwrap();
        redis::cmd("EXISTS")
            .arg(key_of(&name))
            .query(&mut conn)
            .unwrap()
    };
    assert_eq!(
        (in_db(2), in_db(0)),
        (1, 0),
        "the lock is not in database 2"
    );
    guard.unlock().await.unwrap();
    client.shutdown().await.unwrap();

    let settings = redis::aio::ConnectionManagerConfig::new().set_number_of_retries(0);
    let client = support::client_at(server.url(), |b| b.connection_manager_config(settings)).await;
    take_and_release(&client.lock(&name).unwrap()).await;
    client.shutdown().await.unwrap();

    let bounded = redis::aio::ConnectionManagerConfig::new()
        .set_response_timeout(Some(Duration::from_millis(100)));
    let error = Client::builder(server.url())
        .connection_manager_config(bounded)
        .build()
        .await
        .unwrap_err();
    assert!(error.is_invalid_input(), "{error:?}");
}
