//! `ReadWriteLock` writers of one client taking turns: a write release and the grant of the
//! local writer it wakes leave in one script call, the release then publishes nothing (nobody
//! else could come in), and writers that arrive behind a writer already asking or waiting
//! queue up locally instead of each asking the server.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use redis::Commands;
use redlease::{Error, LockOptions, Owner};
use support::{Server, client, unique_name};

const SCRIPT: &str = include_str!("../lua/rwlock.lua");

fn script_calls(server: &Server) -> u64 {
    support::command_calls(server, "evalsha") + support::command_calls(server, "eval")
}

/// Runs `lua/rwlock.lua` once with a batch of `(op, owner, lease ms, intent ms)` entries on
/// one lock; the reply of each entry.
fn batch(server: &Server, key: &str, entries: &[(&str, &str, u64, u64)]) -> Vec<i64> {
    let channel = format!("{key}:unlock");
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(SCRIPT).arg(2 * entries.len());
    for _ in entries {
        cmd.arg(key).arg(&channel);
    }
    for (op, owner, lease, intent) in entries {
        cmd.arg(2)
            .arg(4)
            .arg(*op)
            .arg(*owner)
            .arg(*lease)
            .arg(*intent);
    }
    let replies: Vec<(i64, i64)> = cmd.query(&mut server.conn()).unwrap();
    replies
        .into_iter()
        .map(|(ok, reply)| {
            assert_eq!(ok, 1, "an entry failed");
            reply
        })
        .collect()
}

/// The script's own messages: a release publishes when it lets others in, not when a later
/// entry of its batch took the write lock (nobody else could come in then).
#[test]
fn a_release_taken_over_by_a_writer_in_its_batch_publishes_nothing() {
    let server = Server::start();
    let key = unique_name("rw-handover-lua");
    let published = || support::command_calls(&server, "publish");
    assert_eq!(batch(&server, &key, &[("write", "c:a", 30_000, 0)]), [1]);
    let before = published();
    let replies = batch(
        &server,
        &key,
        &[("unwrite", "c:a", 0, 0), ("write", "c:b", 30_000, 3_000)],
    );
    assert_eq!(replies, [0, 1], "released, then granted to b");
    assert_eq!(published(), before, "a message nobody could act on");
    let owner: String = server.conn().hget(&key, "w").unwrap();
    assert_eq!(owner, "c:b");
    // A release that lets readers in (or a writer that is not in the batch) publishes.
    assert_eq!(
        batch(
            &server,
            &key,
            &[("unwrite", "c:b", 0, 0), ("read", "c:r", 30_000, 0)]
        ),
        [0, 1]
    );
    assert_eq!(published(), before + 1, "the readers' message");
    assert_eq!(batch(&server, &key, &[("unread", "c:r", 0, 0)]), [0]);
    assert_eq!(published(), before + 2, "the last reader's message");
    assert!(!support::exists(&server, &key), "left behind");
}

/// 16 writers of one client, 8 writes each: about one script call per write (the release
/// and the next writer's grant in one call, no refused attempts), each writer alone (a
/// non-atomic counter in Redis).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_writers_take_turns_in_one_script_call_each() {
    support::init_tracing();
    let server = Server::start();
    let client = client(&server).await;
    let name = unique_name("rw-handover");
    let counter_key = format!("{name}:counter");
    let (tasks, rounds) = (16u64, 8u64);
    let inside = Arc::new(AtomicBool::new(false));
    let before = script_calls(&server);
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..tasks {
        let rw = client.read_write_lock(&name).unwrap();
        let (inside, counter_key, url) = (inside.clone(), counter_key.clone(), server.url());
        set.spawn(async move {
            let redis = redis::Client::open(url).unwrap();
            let mut conn = redis.get_multiplexed_async_connection().await.unwrap();
            for _ in 0..rounds {
                let guard = rw.write().lock().await.unwrap();
                assert!(!inside.swap(true, Ordering::SeqCst), "two writers at once");
                let n: Option<u64> = redis::AsyncCommands::get(&mut conn, &counter_key)
                    .await
                    .unwrap();
                let _: () = redis::AsyncCommands::set(&mut conn, &counter_key, n.unwrap_or(0) + 1)
                    .await
                    .unwrap();
                inside.store(false, Ordering::SeqCst);
                guard.unlock().await.unwrap();
            }
        });
    }
    while let Some(done) = set.join_next().await {
        done.unwrap();
    }
    let calls = script_calls(&server) - before;
    let counted: u64 = server.conn().get(&counter_key).unwrap();
    assert_eq!(counted, tasks * rounds, "writes lost: not alone");
    let rw = client.read_write_lock(&name).unwrap();
    assert!(!support::exists(&server, rw.key()), "left behind");
    // Sent one after another, a write would be two calls (its grant, its release) and a woken
    // writer's attempt a third whenever a message woke one in vain.
    let writes = tasks * rounds;
    assert!(
        calls <= writes + writes / 4,
        "{calls} script calls for {writes} writes"
    );
    client.shutdown().await.unwrap();
}

/// While another client holds the write lock and one writer of this client waits, eight more
/// writers of this client arrive one by one: they wait behind it without asking the server,
/// and all get the lock, one at a time, once the holder lets go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_behind_a_waiting_writer_wait_without_asking() {
    support::init_tracing();
    let server = Server::start();
    let [holder, waiting] = support::clients(&server).await;
    let name = unique_name("rw-queue-up");
    let held = holder
        .read_write_lock(&name)
        .unwrap()
        .write()
        .lock()
        .await
        .unwrap();
    let inside = Arc::new(AtomicBool::new(false));
    let writer = |inside: Arc<AtomicBool>| {
        let rw = waiting.read_write_lock(&name).unwrap();
        tokio::spawn(async move {
            let guard = rw.write().lock().await.unwrap();
            assert!(!inside.swap(true, Ordering::SeqCst), "two writers at once");
            tokio::time::sleep(Duration::from_millis(2)).await;
            inside.store(false, Ordering::SeqCst);
            guard.unlock().await.unwrap();
        })
    };
    let mut writers = vec![writer(inside.clone())];
    // The first one asked (refused, its intent left) and waits.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let before = script_calls(&server);
    for _ in 0..8 {
        writers.push(writer(inside.clone()));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let asked = script_calls(&server) - before;
    assert_eq!(asked, 0, "writers behind a waiting writer asked the server");
    held.unlock().await.unwrap();
    for done in writers {
        tokio::time::timeout(Duration::from_secs(5), done)
            .await
            .expect("every writer got the lock")
            .unwrap();
    }
    let rw = waiting.read_write_lock(&name).unwrap();
    assert!(!support::exists(&server, rw.key()), "left behind");
    holder.shutdown().await.unwrap();
    waiting.shutdown().await.unwrap();
}

/// Whether a shared read hold of this lock is on the server.
fn share_on_server(server: &Server, key: &str) -> bool {
    let fields: Vec<String> = redis::cmd("HKEYS")
        .arg(key)
        .query(&mut server.conn())
        .unwrap();
    fields.iter().any(|f| f.contains(":readers-"))
}

/// A writer that arrives while its own client's readers share the lock waits for the last of
/// them instead of asking (but for the one attempt any waiter makes once it listens): that
/// reader's release and the writer's grant are one script call.
// One thread: a woken task runs before the batch it joins leaves, every time.
#[tokio::test]
async fn a_writer_behind_its_own_clients_readers_is_handed_the_lock() {
    support::init_tracing();
    let server = Server::start();
    let client = client(&server).await;
    let name = unique_name("rw-after-shares");
    let rw = client.read_write_lock(&name).unwrap();
    let readers: Vec<_> = (0..4)
        .map(|_| {
            let rw = rw.clone();
            tokio::spawn(async move { rw.read().lock().await.unwrap() })
        })
        .collect();
    let mut guards = Vec::new();
    for reader in readers {
        guards.push(reader.await.unwrap());
    }
    assert!(
        share_on_server(&server, rw.key()),
        "the readers share a hold"
    );
    let before = script_calls(&server);
    let writer = {
        let rw = rw.clone();
        tokio::spawn(async move { rw.write().lock().await.unwrap() })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Once at most: nobody listened on the lock's channel before, so the writer asks once
    // after subscribing, as every waiter does, lest a release slipped in before it listened.
    let asked = script_calls(&server) - before;
    assert!(
        asked <= 1,
        "the writer asked {asked} times while its own readers held the lock"
    );
    assert!(!writer.is_finished(), "the writer got in beside readers");
    for guard in guards {
        guard.unlock().await.unwrap();
    }
    let guard = tokio::time::timeout(Duration::from_secs(2), writer)
        .await
        .expect("the last reader handed the lock over")
        .unwrap();
    assert_eq!(
        script_calls(&server) - before - asked,
        1,
        "the last reader's release and the writer's grant in one call"
    );
    let writer: String = server.conn().hget(rw.key(), "w").unwrap();
    assert!(writer.starts_with(&*client.id().to_string()), "{writer}");
    guard.unlock().await.unwrap();
    assert!(!support::exists(&server, rw.key()), "left behind");
    client.shutdown().await.unwrap();
}

/// A writer that finds its client's share empty but still on the server (within its join
/// window) releases it and asks in one script call. The window is 5 ms, so a slow machine
/// may release the share itself first: the case is tried a few times, and counted only when
/// the share was still there as the writer arrived.
// One thread: a woken task runs before the batch it joins leaves, every time.
#[tokio::test]
async fn a_writer_releases_an_empty_share_and_asks_in_one_call() {
    support::init_tracing();
    let server = Server::start();
    let client = client(&server).await;
    let mut seen = Vec::new();
    for _ in 0..5 {
        let rw = client
            .read_write_lock(&unique_name("rw-release-ahead"))
            .unwrap();
        // Two readers (two tasks) at once: their share stays, empty, until its window ends.
        let reader = || {
            let rw = rw.clone();
            tokio::spawn(async move { rw.read().lock().await.unwrap().unlock().await.unwrap() })
        };
        let (a, b) = tokio::join!(reader(), reader());
        a.unwrap();
        b.unwrap();
        let before = script_calls(&server);
        let guard = rw.write().lock().await.unwrap();
        let calls = script_calls(&server) - before;
        let fields: Vec<String> = redis::cmd("HKEYS")
            .arg(rw.key())
            .query(&mut server.conn())
            .unwrap();
        assert!(
            !fields.iter().any(|f| f.contains(":readers-")),
            "the share is still there beside the writer: {fields:?}"
        );
        guard.unlock().await.unwrap();
        assert!(!support::exists(&server, rw.key()), "left behind");
        seen.push(calls);
        if calls == 1 {
            break;
        }
    }
    assert_eq!(
        seen.last(),
        Some(&1),
        "script calls for the share's release and the write, per try: {seen:?}"
    );
    client.shutdown().await.unwrap();
}

/// Readers of a client wait behind its waiting writer without asking, counted as waiting: the
/// last writer's release hands over to them, their shared hold granted in the same call.
// One thread: a woken task runs before the batch it joins leaves, every time.
#[tokio::test]
async fn readers_behind_local_writers_are_handed_the_lock() {
    support::init_tracing();
    let server = Server::start();
    let client = client(&server).await;
    let name = unique_name("rw-readers-after");
    let rw = client.read_write_lock(&name).unwrap();
    let first = rw.write().lock().await.unwrap();
    let second = {
        let rw = rw.clone();
        tokio::spawn(async move { rw.write().lock().await.unwrap() })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let readers: Vec<_> = (0..4)
        .map(|_| {
            let rw = rw.clone();
            tokio::spawn(async move { rw.read().lock().await.unwrap() })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        readers.iter().all(|r| !r.is_finished()),
        "a reader beside the writer"
    );
    first.unlock().await.unwrap();
    let second = tokio::time::timeout(Duration::from_secs(2), second)
        .await
        .expect("the waiting writer goes before the readers")
        .unwrap();
    assert!(
        readers.iter().all(|r| !r.is_finished()),
        "a reader beside the writer"
    );
    let before = script_calls(&server);
    second.unlock().await.unwrap();
    let mut guards = Vec::new();
    for reader in readers {
        guards.push(
            tokio::time::timeout(Duration::from_secs(2), reader)
                .await
                .expect("the readers were handed the lock")
                .unwrap(),
        );
    }
    assert_eq!(
        script_calls(&server) - before,
        1,
        "the writer's release and the readers' grant in one call"
    );
    for guard in guards {
        guard.unlock().await.unwrap();
    }
    client.shutdown().await.unwrap();
}

/// Owner A holds the write lock; owner B (same client) waits for it; A takes the write lock
/// again (reentrant): it should be granted at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reentrant_write_does_not_queue_behind_a_local_writer() {
    let server = Server::start();
    let c = client(&server).await;
    let name = unique_name("rw-reenter-queue");
    let a = c.read_write_lock(&name).unwrap().with_owner(Owner::new());
    let b = c.read_write_lock(&name).unwrap().with_owner(Owner::new());
    let g1 = a.write().lock().await.unwrap();
    let bw = tokio::spawn(async move {
        let g = b.write().lock().await.unwrap();
        g.unlock().await.unwrap();
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let t = Instant::now();
    let g2 = a.write().lock().await.unwrap();
    let took = t.elapsed();
    g2.unlock().await.unwrap();
    g1.unlock().await.unwrap();
    bw.await.unwrap();
    assert!(
        took < Duration::from_millis(300),
        "reentrant write took {took:?}"
    );
}

/// Owner A reads in its own name (fixed lease); owner B waits to write; A asks to write:
/// WouldDeadlock "at once".
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_upgrade_is_refused_at_once_while_a_local_writer_waits() {
    let server = Server::start();
    let c = client(&server).await;
    let name = unique_name("rw-upgrade-queue");
    let a = c.read_write_lock(&name).unwrap().with_owner(Owner::new());
    let b = c.read_write_lock(&name).unwrap().with_owner(Owner::new());
    let r = a
        .read()
        .try_lock_with(LockOptions::new().lease(Duration::from_secs(30)))
        .await
        .unwrap()
        .unwrap();
    let bw = tokio::spawn(async move {
        let g = b.write().lock().await.unwrap();
        g.unlock().await.unwrap();
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let t = Instant::now();
    let e = a.write().lock().await;
    let took = t.elapsed();
    assert!(matches!(e, Err(Error::WouldDeadlock { .. })));
    r.unlock().await.unwrap();
    bw.await.unwrap();
    assert!(took < Duration::from_millis(300), "took {took:?}");
}

/// Eight writers of different owners of one client arrive together at a free lock, 200 times:
/// the first of them always asks (were they all to queue up behind each other, nobody would
/// ask until their 1 s nap ended).
#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn writers_arriving_together_never_all_queue_up() {
    let server = Server::start();
    let c = client(&server).await;
    let mut slow = 0;
    let mut worst = Duration::ZERO;
    for _ in 0..200 {
        let name = unique_name("rw-together");
        let barrier = Arc::new(tokio::sync::Barrier::new(8));
        let t = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let l = c.read_write_lock(&name).unwrap().with_owner(Owner::new());
            let barrier = barrier.clone();
            tasks.push(tokio::spawn(async move {
                barrier.wait().await;
                let g = l.write().lock().await.unwrap();
                g.unlock().await.unwrap();
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        let took = t.elapsed();
        worst = worst.max(took);
        if took > Duration::from_millis(500) {
            slow += 1;
        }
    }
    assert_eq!(slow, 0, "rounds over 500 ms; worst {worst:?}");
}

/// This client's readers hold back for its waiting writer only while that writer is alive: a
/// writer future parked unpolled (armed, its intent left) stops holding them back after the
/// intent's 3 s, even while another owner of the client keeps trying the write lock once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_parked_writer_holds_local_readers_back_for_its_intent_at_most() {
    let server = Server::start();
    let [c, other] = support::clients(&server).await;
    let name = unique_name("rw-parked");
    // Another client reads: the writer below is refused and leaves its intent.
    let remote = other
        .read_write_lock(&name)
        .unwrap()
        .read()
        .lock()
        .await
        .unwrap();
    let w = c.read_write_lock(&name).unwrap().with_owner(Owner::new());
    let mut parked = Box::pin(async move { w.write().lock().await });
    assert!(
        tokio::time::timeout(Duration::from_millis(300), &mut parked)
            .await
            .is_err()
    );
    let stop = Arc::new(AtomicBool::new(false));
    let trying = {
        let lock = c.read_write_lock(&name).unwrap().with_owner(Owner::new());
        let stop = stop.clone();
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let _ = lock.write().try_lock().await;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
    };
    let reader = c.read_write_lock(&name).unwrap().with_owner(Owner::new());
    let got = tokio::time::timeout(Duration::from_secs(8), reader.read().lock()).await;
    stop.store(true, Ordering::Relaxed);
    trying.await.unwrap();
    assert!(
        got.is_ok(),
        "the reader was held back past the parked writer's intent"
    );
    drop(got);
    drop(parked);
    remote.unlock().await.unwrap();
    c.shutdown().await.unwrap();
    other.shutdown().await.unwrap();
}
