//! The loss notice: a holder under the watchdog (default 30 s lease, so the watchdog's next
//! renewal is ten seconds away) hears within milliseconds that its lock is gone, whatever took
//! it: a `DEL`, a `FLUSHDB`, an eviction, a force-unlock, a server restart. And no false
//! alarm: its own renewals and re-entries, and releases, never mark a hold lost.
//!
//! Each test prints the measured time from the cause to `lost()` resolving.

mod support;

use futures_util::FutureExt;
use std::time::{Duration, Instant};

use redlease::Client;
use support::notice::{NOTICE_WITHIN, SETTLE, hold, lost_after};
use support::{Server, client, client_with, exists, key_of, unique_name};

fn redis_cmd(server: &Server, args: &[&str]) {
    let mut cmd = redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    let _: redis::Value = cmd.query(&mut server.conn()).expect("redis command");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_key_is_noticed_at_once() {
    support::init_tracing();
    let server = Server::start();
    let holder = client(&server).await;
    let name = unique_name("notice-del");
    let guard = hold(&holder, &name).await;
    let key = key_of(&name);
    let took = lost_after(&guard, NOTICE_WITHIN, || redis_cmd(&server, &["DEL", &key])).await;
    println!("DEL -> lost(): {took:?}");
    assert!(
        took.is_some(),
        "lost() did not resolve within {NOTICE_WITHIN:?} of a DEL"
    );
    assert!(guard.is_lost());
    assert!(guard.unlock().await.unwrap_err().is_lease_lost());
    assert_eq!(holder.held_count(), 0);
    holder.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_notice_off_a_deletion_waits_for_the_renewal() {
    support::init_tracing();
    let server = Server::start();
    let holder = client_with(&server, |b| b.loss_notice(false)).await;
    let name = unique_name("notice-off");
    let guard = hold(&holder, &name).await;
    let key = key_of(&name);
    let took = lost_after(&guard, NOTICE_WITHIN, || redis_cmd(&server, &["DEL", &key])).await;
    assert_eq!(
        took, None,
        "with the notice off only the renewal finds the loss"
    );
    // The renewal still does.
    let stats = holder.renew_now().await.unwrap();
    assert_eq!(stats.lost, 1);
    assert!(guard.is_lost());
    holder.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flush_is_noticed_by_every_holder() {
    support::init_tracing();
    let server = Server::start();
    let holder = client(&server).await;
    let names = [unique_name("notice-flush-a"), unique_name("notice-flush-b")];
    let a = holder.lock(&names[0]).unwrap().lock().await.unwrap();
    let b = hold(&holder, &names[1]).await;
    let both = futures_util::future::join(a.lost(), b.lost());
    let started = Instant::now();
    redis_cmd(&server, &["FLUSHDB"]);
    let took = tokio::time::timeout(NOTICE_WITHIN, both)
        .await
        .ok()
        .map(|_| started.elapsed());
    println!("FLUSHDB -> lost() of both: {took:?}");
    assert!(
        took.is_some(),
        "a flush was not noticed within {NOTICE_WITHIN:?}"
    );
    assert!(a.is_lost() && b.is_lost());
    holder.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_force_unlock_from_another_client_is_noticed() {
    support::init_tracing();
    let server = Server::start();
    let holder = client(&server).await;
    let other = client(&server).await;
    let name = unique_name("notice-force");
    let guard = hold(&holder, &name).await;
    let lock = other.lock(&name).unwrap();
    let lost = guard.lost();
    let started = Instant::now();
    assert!(lock.force_unlock().await.unwrap(), "the lock was held");
    let took = tokio::time::timeout(NOTICE_WITHIN, lost)
        .await
        .ok()
        .map(|()| started.elapsed());
    println!("force_unlock -> lost(): {took:?}");
    assert!(
        took.is_some(),
        "a force-unlock was not noticed within {NOTICE_WITHIN:?}"
    );
    // And the other client may take it now, with the holder told.
    let taken = lock
        .try_lock()
        .await
        .unwrap()
        .expect("free after the force-unlock");
    assert!(guard.is_lost());
    taken.unlock().await.unwrap();
    holder.shutdown().await.unwrap();
    other.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicted_key_is_noticed_before_another_client_gets_the_lock() {
    support::init_tracing();
    let server = Server::start();
    let holder = client(&server).await;
    let name = unique_name("notice-evict");
    let guard = hold(&holder, &name).await;
    let key = key_of(&name);
    let mut conn = server.conn();
    let used: String = redis::cmd("INFO").arg("memory").query(&mut conn).unwrap();
    let used: u64 = used
        .lines()
        .find_map(|line| line.strip_prefix("used_memory:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("INFO memory has used_memory");
    let limit = (used + 2 * 1024 * 1024).to_string();
    redis_cmd(&server, &["CONFIG", "SET", "maxmemory", &limit]);
    redis_cmd(
        &server,
        &["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"],
    );
    let lost = guard.lost();
    let value = vec![b'x'; 64 * 1024];
    let mut gone_at = None;
    // 64 KiB a write: 2 MiB fill up within ~32; bounded far above that.
    for i in 0..2000 {
        let _: () = redis::cmd("SET")
            .arg(format!("fill:{i}"))
            .arg(&value)
            .query(&mut conn)
            .unwrap();
        if !exists(&server, &key) {
            gone_at = Some(Instant::now());
            break;
        }
    }
    let gone_at = gone_at.expect("the lock key was never evicted");
    let noticed = tokio::time::timeout(NOTICE_WITHIN, lost).await;
    let took = gone_at.elapsed();
    println!("evicted -> lost(): {took:?} (or less: measured from when the fill saw it gone)");
    assert!(
        noticed.is_ok(),
        "an eviction was not noticed within {NOTICE_WITHIN:?}"
    );
    assert!(guard.is_lost());
    holder.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_every_hold_is_checked_at_once() {
    support::init_tracing();
    let mut server = Server::start();
    let holder = client(&server).await;
    let names = [
        unique_name("notice-restart-a"),
        unique_name("notice-restart-b"),
    ];
    let a = holder.lock(&names[0]).unwrap().lock().await.unwrap();
    let b = hold(&holder, &names[1]).await;
    let both = futures_util::future::join(a.lost(), b.lost());
    // kill -9, then up again empty on the same port: the keys are gone without a notice.
    server.kill();
    server.restart();
    let started = Instant::now();
    let took = tokio::time::timeout(NOTICE_WITHIN, both)
        .await
        .ok()
        .map(|_| started.elapsed());
    println!("restart -> lost() of both: {took:?} after the server answered again");
    assert!(
        took.is_some(),
        "holds were not checked within {NOTICE_WITHIN:?} of the restart"
    );
    // The notice is back: a lock taken now is told of its deletion as before.
    let name = unique_name("notice-after-restart");
    let guard = hold(&holder, &name).await;
    let key = key_of(&name);
    let took = lost_after(&guard, NOTICE_WITHIN, || redis_cmd(&server, &["DEL", &key])).await;
    println!("DEL after the restart -> lost(): {took:?}");
    assert!(
        took.is_some(),
        "the notice did not come back after the restart"
    );
    holder.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_and_reentries_are_no_loss_and_keep_the_notice_armed() {
    support::init_tracing();
    let server = Server::start();
    let holder = client(&server).await;
    let name = unique_name("notice-renewed");
    let lock = holder.lock(&name).unwrap();
    let guard = hold(&holder, &name).await;
    // Each renewal and re-entry writes the key: the server reports it, the client checks it
    // finds the hold and arms the notice again.
    for round in 0..30 {
        let stats = holder.renew_now().await.unwrap();
        assert_eq!(stats.lost, 0, "renewal {round} found the hold gone");
        if round % 10 == 0 {
            let again = lock.lock().await.unwrap();
            again.unlock().await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert!(!guard.is_lost(), "marked lost after renewal {round}");
    }
    tokio::time::sleep(SETTLE).await;
    assert!(!guard.is_lost(), "marked lost after the renewals");
    let key = key_of(&name);
    let took = lost_after(&guard, NOTICE_WITHIN, || redis_cmd(&server, &["DEL", &key])).await;
    println!("DEL after 30 renewals -> lost(): {took:?}");
    assert!(
        took.is_some(),
        "the notice was not armed again after the client's own writes"
    );
    holder.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watchdog_renewing_every_few_milliseconds_never_makes_a_false_loss() {
    support::init_tracing();
    let server = Server::start();
    // A 600 ms lease: the watchdog renews every 200 ms, each renewal a notice and a check
    // (short enough for many renewals, long enough that a loaded machine still renews in time).
    // A 10 ms arming delay, so that the short holds below end both before and after theirs.
    let holder = client_with(&server, |b| {
        b.watchdog_lease(Duration::from_millis(600))
            .timeout(Duration::from_millis(200))
            .loss_notice_delay(Duration::from_millis(10))
    })
    .await;
    let names: Vec<String> = (0..20)
        .map(|i| unique_name(&format!("notice-busy-{i}")))
        .collect();
    let mut guards = Vec::new();
    for name in &names {
        guards.push(holder.lock(name).unwrap().lock().await.unwrap());
    }
    let started = Instant::now();
    let mut rounds = 0;
    // 3 s, some 15 renewals of each of the 20 holds; bounded by the count too.
    while started.elapsed() < Duration::from_secs(3) && rounds < 600 {
        for (name, guard) in names.iter().zip(&guards) {
            assert!(
                !guard.is_lost(),
                "{name} marked lost after {:?}",
                started.elapsed()
            );
        }
        // Short critical sections of other locks in between, released before and after they
        // are armed.
        let other = holder
            .lock(&format!("{}-short", names[rounds % 20]))
            .unwrap();
        let short = other.lock().await.unwrap();
        tokio::time::sleep(Duration::from_millis((rounds % 3 * 10) as u64)).await;
        short.unlock().await.unwrap();
        rounds += 1;
    }
    assert!(
        rounds >= 10,
        "only {rounds} rounds in {:?}",
        started.elapsed()
    );
    for guard in guards {
        assert!(!guard.is_lost());
        guard.unlock().await.unwrap();
    }
    holder.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_notice_keeps_one_tracking_connection_from_the_first_hold_and_none_when_off() {
    support::init_tracing();
    let server = Server::start();
    let tracking = |server: &Server| -> usize {
        let list: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query(&mut server.conn())
            .unwrap();
        // A connection with tracking on has the `t` flag.
        list.lines()
            .filter(|line| {
                line.split(' ')
                    .find_map(|field| field.strip_prefix("flags="))
                    .is_some_and(|flags| flags.contains('t'))
            })
            .count()
    };
    let on = client(&server).await;
    tokio::time::sleep(SETTLE).await;
    assert_eq!(
        tracking(&server),
        0,
        "no tracking connection before the first hold"
    );
    let guard = on
        .lock(&unique_name("notice-conn"))
        .unwrap()
        .lock()
        .await
        .unwrap();
    assert!(
        support::eventually(Duration::from_secs(2), || tracking(&server) == 1),
        "a client with the notice keeps one tracking connection once it holds a lock"
    );
    guard.unlock().await.unwrap();
    let off = client_with(&server, |b| b.loss_notice(false)).await;
    let held = off
        .lock(&unique_name("notice-conn-off"))
        .unwrap()
        .lock()
        .await
        .unwrap();
    tokio::time::sleep(SETTLE).await;
    assert_eq!(
        tracking(&server),
        1,
        "a client with the notice off tracks nothing"
    );
    held.unlock().await.unwrap();
    on.shutdown().await.unwrap();
    drop(on);
    assert!(
        support::eventually(Duration::from_secs(2), || tracking(&server) == 0),
        "the tracking connection closes with its client"
    );
    off.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_the_tracking_right_still_locks_and_is_told_at_renewal() {
    support::init_tracing();
    let server = Server::start();
    // Every right but CLIENT TRACKING.
    redis_cmd(
        &server,
        &[
            "ACL",
            "SETUSER",
            "notracking",
            "reset",
            "on",
            ">pw",
            "~*",
            "&*",
            "+@all",
            "-client|tracking",
        ],
    );
    let url = format!("redis://notracking:pw@127.0.0.1:{}", server.port());
    let holder = Client::connect(&url).await.unwrap();
    let name = unique_name("notice-refused");
    let guard = hold(&holder, &name).await;
    let key = key_of(&name);
    let took = lost_after(&guard, Duration::from_millis(300), || {
        redis_cmd(&server, &["DEL", &key])
    })
    .await;
    assert_eq!(took, None, "no notice without the right");
    assert_eq!(holder.renew_now().await.unwrap().lost, 1);
    assert!(guard.is_lost());
    holder.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_familys_holds_are_told_too() {
    support::init_tracing();
    let server = Server::start();
    let holder = client(&server).await;
    let name = unique_name("notice-family");

    // A permit: its field in the semaphore's hash, deleted with the key.
    let semaphore = holder.permit_semaphore(&name).unwrap();
    semaphore.set_permits(2).await.unwrap();
    let permit = semaphore.acquire().await.unwrap();
    tokio::time::sleep(SETTLE).await;
    let lost = permit.lost();
    let started = Instant::now();
    redis_cmd(&server, &["DEL", &format!("{}:permits", key_of(&name))]);
    let took = tokio::time::timeout(NOTICE_WITHIN, lost)
        .await
        .ok()
        .map(|()| started.elapsed());
    println!("DEL of the permits -> permit lost(): {took:?}");
    assert!(took.is_some(), "a deleted permit was not noticed");
    assert!(permit.is_lost());

    // A read and a write hold of two read-write locks, both flushed.
    let rw_a = holder.read_write_lock(&format!("{name}-a")).unwrap();
    let rw_b = holder.read_write_lock(&format!("{name}-b")).unwrap();
    let read = rw_a.read().lock().await.unwrap();
    let write = rw_b.write().lock().await.unwrap();
    tokio::time::sleep(SETTLE).await;
    assert!(!read.is_lost() && !write.is_lost());
    let both = futures_util::future::join(read.lost(), write.lost());
    let started = Instant::now();
    redis_cmd(&server, &["FLUSHDB"]);
    let took = tokio::time::timeout(NOTICE_WITHIN, both)
        .await
        .ok()
        .map(|_| started.elapsed());
    println!("FLUSHDB -> read and write holds lost(): {took:?}");
    assert!(took.is_some(), "flushed read-write holds were not noticed");
    holder.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn family_holds_renewed_by_the_watchdog_are_never_falsely_lost() {
    support::init_tracing();
    let server = Server::start();
    // A 10 ms arming delay: the holds released below, 40 ms after their grant, are armed.
    let holder = client_with(&server, |b| {
        b.watchdog_lease(Duration::from_millis(600))
            .timeout(Duration::from_millis(200))
            .loss_notice_delay(Duration::from_millis(10))
    })
    .await;
    let name = unique_name("notice-family-busy");
    let semaphore = holder.permit_semaphore(&name).unwrap();
    semaphore.set_permits(3).await.unwrap();
    let permit = semaphore.acquire().await.unwrap();
    let rw = holder.read_write_lock(&name).unwrap();
    let read = rw.read().lock().await.unwrap();
    let other = holder.read_write_lock(&format!("{name}-w")).unwrap();
    let write = other.write().lock().await.unwrap();
    let started = Instant::now();
    // 2 s, some 10 renewals of each; bounded by the count too.
    for _ in 0..200 {
        if started.elapsed() > Duration::from_secs(2) {
            break;
        }
        assert!(
            !permit.is_lost(),
            "permit lost after {:?}",
            started.elapsed()
        );
        assert!(
            !read.is_lost(),
            "read hold lost after {:?}",
            started.elapsed()
        );
        assert!(
            !write.is_lost(),
            "write hold lost after {:?}",
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    permit.release().await.unwrap();
    read.unlock().await.unwrap();
    write.unlock().await.unwrap();
    // Their own releases' writes are noticed too, and must not make a releasing hold lost:
    // armed holds (past the arming delay) released 20 times each, a lost() future taken
    // before each release must stay pending.
    for round in 0..20 {
        let permit = semaphore.acquire().await.unwrap();
        let read = rw.read().lock().await.unwrap();
        let write = other.write().lock().await.unwrap();
        tokio::time::sleep(Duration::from_millis(40)).await;
        let lost = [
            permit.lost().boxed(),
            read.lost().boxed(),
            write.lost().boxed(),
        ];
        permit.release().await.unwrap();
        read.unlock().await.unwrap();
        write.unlock().await.unwrap();
        for (kind, lost) in ["permit", "read", "write"].into_iter().zip(lost) {
            let told = tokio::time::timeout(Duration::from_millis(30), lost).await;
            assert!(
                told.is_err(),
                "round {round}: a released {kind} hold was told lost"
            );
        }
    }
    holder.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_the_notice_uses_the_clients_certificates() {
    support::init_tracing();
    let Some(server) = support::tls::TlsServer::start(false) else {
        return;
    };
    let holder = Client::builder(server.url())
        .tls(server.pki.ca_only())
        .build()
        .await
        .unwrap();
    let name = unique_name("notice-tls");
    let guard = hold(&holder, &name).await;
    let key = key_of(&name);
    let took = lost_after(&guard, NOTICE_WITHIN, || {
        redis_cmd(&server.server, &["DEL", &key])
    })
    .await;
    println!("DEL over TLS -> lost(): {took:?}");
    assert!(took.is_some(), "no notice over TLS");
    holder.shutdown().await.unwrap();
}

/// The port of the server the client's commands reach now.
async fn served_by(client: &Client) -> Option<u16> {
    let info: String = client.query(redis::cmd("INFO").arg("server")).await.ok()?;
    info.lines()
        .find_map(|line| line.strip_prefix("tcp_port:"))
        .and_then(|port| port.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_sentinel_the_notice_follows_a_failover_without_a_false_loss() {
    support::init_tracing();
    let group = support::sentinel::SentinelGroup::start();
    let holder = support::client_at(group.url(), |b| b).await;
    let name = unique_name("notice-sentinel");
    let key = key_of(&name);
    let first = unique_name("notice-sentinel-first");
    let guard = hold(&holder, &first).await;
    let old = group.master();
    let took = lost_after(&guard, NOTICE_WITHIN, || {
        redis_cmd(&group.servers[old], &["DEL", &key_of(&first)])
    })
    .await;
    println!("DEL behind Sentinel -> lost(): {took:?}");
    assert!(took.is_some(), "no notice behind Sentinel");

    // A planned failover: the replicas are in sync, the lock survives on the new master.
    let held = hold(&holder, &name).await;
    let _: () = redis::cmd("SENTINEL")
        .arg("FAILOVER")
        .arg("mymaster")
        .query(&mut group.sentinels[0].conn())
        .expect("SENTINEL FAILOVER");
    let new = tokio::task::block_in_place(|| group.until_promoted(old, Duration::from_secs(30)));
    let new_port = group.servers[new].port();
    let followed = support::eventually_async(Duration::from_secs(5), || async {
        served_by(&holder).await == Some(new_port)
    })
    .await;
    assert!(followed, "the client did not follow the new master");
    // The notice reconnects to the new master and checks every hold there: still held.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !held.is_lost(),
        "a hold that survived the failover was marked lost"
    );
    assert!(exists(&group.servers[new], &key));
    let took = lost_after(&held, NOTICE_WITHIN, || {
        redis_cmd(&group.servers[new], &["DEL", &key])
    })
    .await;
    println!("DEL on the new master after a failover -> lost(): {took:?}");
    assert!(took.is_some(), "the notice did not follow the new master");
    holder.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_hears_at_once_that_its_leadership_is_gone() {
    support::init_tracing();
    let server = Server::start();
    let holder = client(&server).await;
    let name = unique_name("notice-leader");
    let leadership = holder
        .election(&name)
        .unwrap()
        .campaign("me")
        .await
        .unwrap();
    tokio::time::sleep(SETTLE).await;
    assert!(!leadership.is_lost());
    let lost = leadership.lost();
    let started = Instant::now();
    redis_cmd(&server, &["DEL", &key_of(&name)]);
    let took = tokio::time::timeout(NOTICE_WITHIN, lost)
        .await
        .ok()
        .map(|()| started.elapsed());
    println!("DEL of the election's lock -> leadership lost(): {took:?}");
    assert!(
        took.is_some(),
        "a leader was not told within {NOTICE_WITHIN:?}"
    );
    holder.shutdown().await.unwrap();
}
