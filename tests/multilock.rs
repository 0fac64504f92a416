//! MultiLock: several locks, possibly on several servers, held all together or not at all.

mod support;

use redlease::LockOptions;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redlease::{Client, Error, Lock, MultiLock, Owner};
use support::{
    Server, client, clients, exists, increment_unprotected, join_within, key_of, node_locks,
    node_locks_with, read_counter, set_string, unique_name, unique_names, with_precise_timeout,
};
use tokio::sync::Barrier;

fn locks(client: &Client, names: &[String]) -> Vec<Lock> {
    names.iter().map(|n| client.lock(n).unwrap()).collect()
}

/// Whether no lock of `names` (default prefix) has a key on `server`.
fn all_free(server: &Server, names: &[String]) -> bool {
    names.iter().all(|n| !exists(server, &key_of(n)))
}

/// Ten contenders race one `try_lock` each for three locks of one server: exactly one wins
/// (each round's acquires reach the server back to back), all answer within a second, and the
/// winner's unlock frees all three.
async fn ten_racing_try_locks(separate_clients: bool) {
    support::init_tracing();
    let server = Server::start();
    let shared = client(&server).await;
    let names = unique_names("ten", 3);
    let mut contenders = Vec::new();
    for _ in 0..10 {
        let client = if separate_clients {
            client(&server).await
        } else {
            shared.clone()
        };
        contenders.push(MultiLock::new(locks(&client, &names)).unwrap());
    }
    let barrier = Arc::new(Barrier::new(10));
    let started = Instant::now();
    let tasks: Vec<_> = contenders
        .iter()
        .map(|multi| {
            let (multi, barrier) = (multi.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                let begun = Instant::now();
                let guard = multi.try_lock().await.unwrap();
                (guard, begun.elapsed())
            })
        })
        .collect();
    let mut winners = Vec::new();
    for task in tasks {
        let (guard, took) = task.await.unwrap();
        assert!(took < Duration::from_secs(1), "a try_lock took {took:?}");
        winners.extend(guard);
    }
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(winners.len(), 1, "exactly one contender must win");
    let winner = winners.pop().unwrap();
    let keys: Vec<String> = locks(&shared, &names)
        .iter()
        .map(|l| l.key().to_owned())
        .collect();
    for key in &keys {
        assert!(exists(&server, key));
    }
    winner.unlock().await.unwrap();
    for key in &keys {
        assert!(
            !exists(&server, key),
            "{key} still held after the winner's unlock"
        );
    }
    let again = contenders[3]
        .try_lock()
        .await
        .unwrap()
        .expect("free after unlock");
    again.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_racing_try_locks_on_one_client_have_one_winner() {
    ten_racing_try_locks(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_racing_try_locks_on_ten_clients_have_one_winner() {
    ten_racing_try_locks(true).await;
}

#[tokio::test]
async fn held_across_three_servers_other_owner_fails_twice_and_owner_reenters() {
    let servers = support::start_many(3);
    let name = unique_name("across");
    let a_locks = node_locks(&servers, &name).await;
    let b_locks = node_locks(&servers, &name).await;
    let a = MultiLock::new(a_locks.clone()).unwrap();
    let b = MultiLock::new(b_locks).unwrap();
    let guard = a.lock().await.unwrap();
    assert!(b.try_lock().await.unwrap().is_none());
    assert!(b.try_lock().await.unwrap().is_none());
    assert!(
        b.try_lock_with(LockOptions::new().wait(Duration::from_millis(150)))
            .await
            .unwrap()
            .is_none()
    );
    // Same owner (this task): re-entry on every member.
    let again = a.try_lock().await.unwrap().expect("re-entry");
    for lock in &a_locks {
        assert_eq!(lock.hold_count().await.unwrap(), 2);
    }
    again.unlock().await.unwrap();
    for lock in &a_locks {
        assert_eq!(lock.hold_count().await.unwrap(), 1);
    }
    assert!(b.try_lock().await.unwrap().is_none());
    guard.unlock().await.unwrap();
    let theirs = b
        .try_lock()
        .await
        .unwrap()
        .expect("free after the last unlock");
    theirs.unlock().await.unwrap();
}

#[tokio::test]
async fn failed_attempt_leaves_nothing_held() {
    let server = Server::start();
    let [mine, other] = clients(&server).await;
    let names = unique_names("partial", 3);
    let blocker = other.lock(&names[1]).unwrap().lock().await.unwrap();
    let multi = MultiLock::new(locks(&mine, &names)).unwrap();

    assert!(multi.try_lock().await.unwrap().is_none());
    assert!(!exists(&server, &key_of(&names[0])));
    assert!(!exists(&server, &key_of(&names[2])));
    assert_eq!(mine.held_count(), 0);

    let started = Instant::now();
    assert!(
        multi
            .try_lock_with(LockOptions::new().wait(Duration::from_millis(300)))
            .await
            .unwrap()
            .is_none()
    );
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(started.elapsed() < Duration::from_millis(900));
    assert!(!exists(&server, &key_of(&names[0])));
    assert!(!exists(&server, &key_of(&names[2])));
    assert_eq!(mine.held_count(), 0);
    blocker.unlock().await.unwrap();
}

#[tokio::test]
async fn waiter_wakes_when_the_blocking_member_is_released() {
    let server = Server::start();
    let [mine, other] = clients(&server).await;
    let names = unique_names("wake", 2);
    let blocker = other.lock(&names[1]).unwrap().lock().await.unwrap();
    let release = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        blocker.unlock().await.unwrap();
    });
    let multi = MultiLock::new(locks(&mine, &names)).unwrap();
    let started = Instant::now();
    let guard = multi
        .try_lock_with(LockOptions::new().wait(Duration::from_secs(5)))
        .await
        .unwrap()
        .expect("acquired once the blocker left");
    let took = started.elapsed();
    // The watchdog lease is 30 s: only the unlock message explains a wake this early.
    assert!(took < Duration::from_secs(2), "took {took:?}");
    release.await.unwrap();
    guard.unlock().await.unwrap();
}

#[tokio::test]
async fn member_error_is_returned_after_giving_back_the_rest() {
    let server = Server::start();
    let client = client(&server).await;
    let names = unique_names("wrongtype", 3);
    let ls = locks(&client, &names);
    set_string(&server, ls[1].key(), "not a lock");
    let multi = MultiLock::new(ls.clone()).unwrap();
    let err = multi.try_lock().await.unwrap_err();
    assert!(matches!(err, Error::WrongType { .. }), "{err:?}");
    assert!(!exists(&server, ls[0].key()));
    assert!(!exists(&server, ls[2].key()));
    assert_eq!(client.held_count(), 0);
}

#[tokio::test]
async fn watchdog_keeps_every_member_past_its_lease() {
    let servers = support::start_many(2);
    let name = unique_name("watchdog");
    let ls = node_locks_with(&servers, &name, |b| {
        b.watchdog_lease(Duration::from_millis(600))
    })
    .await;
    let guard = MultiLock::new(ls.clone()).unwrap().lock().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!guard.is_lost());
    for (lock, server) in ls.iter().zip(&servers) {
        assert!(
            exists(server, lock.key()),
            "watchdog must keep {}",
            lock.key()
        );
    }
    guard.unlock().await.unwrap();
    for (lock, server) in ls.iter().zip(&servers) {
        assert!(!exists(server, lock.key()));
    }
}

#[tokio::test]
async fn fixed_lease_expires_and_the_guard_is_lost() {
    let server = Server::start();
    let client = client(&server).await;
    let names = unique_names("fixed", 2);
    let multi = MultiLock::new(locks(&client, &names)).unwrap();
    let guard = multi
        .lock_with(LockOptions::new().lease(Duration::from_millis(300)))
        .await
        .unwrap();
    assert!(!guard.is_lost());
    let started = Instant::now();
    tokio::time::timeout(Duration::from_secs(2), guard.lost())
        .await
        .expect("lost() resolves when the lease ends");
    assert!(started.elapsed() >= Duration::from_millis(250));
    assert!(guard.is_lost());
    assert!(
        support::eventually(Duration::from_secs(1), || all_free(&server, &names)),
        "keys expire with the lease"
    );
    assert!(guard.unlock().await.unwrap_err().is_lease_lost());
}

#[tokio::test]
async fn unlock_releases_every_member_and_reports_the_failed_one() {
    let server = Server::start();
    let client = client(&server).await;
    let names = unique_names("report", 3);
    let ls = locks(&client, &names);
    let guard = MultiLock::new(ls.clone()).unwrap().lock().await.unwrap();
    // An operator deletes one member behind our back.
    assert!(ls[1].force_unlock().await.unwrap());
    let results = guard.unlock_each().await;
    assert!(results[0].is_ok());
    assert!(
        matches!(&results[1], Err(Error::LeaseLost { name }) if *name == names[1]),
        "{results:?}"
    );
    assert!(results[2].is_ok());
    for lock in &ls {
        assert!(!exists(&server, lock.key()));
    }

    let guard = MultiLock::new(ls.clone()).unwrap().lock().await.unwrap();
    ls[2].force_unlock().await.unwrap();
    assert!(guard.unlock().await.unwrap_err().is_lease_lost());
    assert!(
        !exists(&server, ls[0].key()),
        "the healthy member is released too"
    );
}

#[tokio::test]
async fn dropped_guard_releases_every_member() {
    let server = Server::start();
    let client = client(&server).await;
    let names = unique_names("drop", 3);
    let ls = locks(&client, &names);
    let guard = MultiLock::new(ls.clone()).unwrap().lock().await.unwrap();
    drop(guard);
    assert!(
        support::eventually_async(Duration::from_secs(2), || async {
            ls.iter().all(|l| !exists(&server, l.key()))
        })
        .await
    );
    assert_eq!(client.held_count(), 0);
}

#[tokio::test]
async fn cancelled_acquisitions_leave_nothing_held() {
    let server = Server::start();
    let [mine, other] = clients(&server).await;
    let names = unique_names("cancel", 3);
    let blocker = other.lock(&names[2]).unwrap().lock().await.unwrap();
    let multi = MultiLock::new(locks(&mine, &names)).unwrap();
    // Cancel at many points: before sending, with requests in flight, while giving back, while
    // waiting.
    for i in 0..60u64 {
        let limit = Duration::from_micros(50 + i * 97);
        let outcome = with_precise_timeout(limit, multi.lock()).await;
        assert!(outcome.is_none(), "lock() returned while a member was held");
    }
    blocker.unlock().await.unwrap();
    assert!(
        support::eventually_async(Duration::from_secs(3), || async {
            all_free(&server, &names)
        })
        .await,
        "a cancelled acquisition left a member held"
    );
    assert_eq!(mine.held_count(), 0);
}

#[tokio::test]
async fn explicit_owners_exclude_each_other_inside_one_task() {
    let server = Server::start();
    let client = client(&server).await;
    let names = unique_names("owners", 2);
    let a = MultiLock::new(
        locks(&client, &names)
            .into_iter()
            .map(|l| l.with_owner(Owner::new()))
            .collect(),
    )
    .unwrap();
    let b = MultiLock::new(
        locks(&client, &names)
            .into_iter()
            .map(|l| l.with_owner(Owner::new()))
            .collect(),
    )
    .unwrap();
    let guard = a.try_lock().await.unwrap().expect("free");
    assert!(b.try_lock().await.unwrap().is_none());
    guard.unlock().await.unwrap();
    b.try_lock()
        .await
        .unwrap()
        .expect("free")
        .unlock()
        .await
        .unwrap();
}

#[tokio::test]
async fn new_rejects_empty_and_repeated_locks() {
    let server = Server::start();
    let [a, b] = clients(&server).await;
    let err = MultiLock::new(vec![]).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    let name = unique_name("dup");
    let err = MultiLock::new(vec![a.lock(&name).unwrap(), a.lock(&name).unwrap()]).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    // Two clients of one server, same key: one lock.
    let err = MultiLock::new(vec![a.lock(&name).unwrap(), b.lock(&name).unwrap()]).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    let other = unique_name("dup");
    assert!(MultiLock::new(vec![a.lock(&name).unwrap(), a.lock(&other).unwrap()]).is_ok());
}

/// Four contenders, each with its own clients, move "stock" between two servers under a
/// MultiLock: a non-atomic read-modify-write that loses updates without exclusion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_across_two_servers() {
    const WORKERS: u64 = 4;
    const ROUNDS: u64 = 40;
    let servers = Arc::new(support::start_many(2));
    let names = unique_names("stock", 2);
    let counter = unique_name("stock-counter");
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..WORKERS {
        let (servers, names, counter) = (servers.clone(), names.clone(), counter.clone());
        tasks.push(tokio::spawn(async move {
            let mut ls = Vec::new();
            for (server, name) in servers.iter().zip(&names) {
                ls.push(client(server).await.lock(name).unwrap());
            }
            let tally = ls[0].client().clone();
            let multi = MultiLock::new(ls).unwrap();
            for _ in 0..ROUNDS {
                let guard = multi
                    .try_lock_with(
                        LockOptions::new()
                            .wait(Duration::from_secs(20))
                            .lease(Duration::from_secs(5)),
                    )
                    .await
                    .unwrap()
                    .expect("acquired within the wait");
                increment_unprotected(&tally, &counter).await;
                guard.unlock().await.unwrap();
            }
        }));
    }
    join_within(tasks, Duration::from_secs(40), "workers finish").await;
    assert_eq!(read_counter(&servers[0], &counter), WORKERS * ROUNDS);
    eprintln!(
        "{} MultiLock rounds over 2 servers in {:?}",
        WORKERS * ROUNDS,
        started.elapsed()
    );
}

/// A server that forgot the scripts (SCRIPT FLUSH, as after a restart): the members' pipelined
/// acquire meets NOSCRIPT, loads the script once and is sent again, and the MultiLock is held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_the_script_loads_it_once_and_grants() {
    support::init_tracing();
    let server = Server::start();
    let client = client(&server).await;
    let names = unique_names("noscript", 3);
    let multi = MultiLock::new(locks(&client, &names)).unwrap();
    multi.lock().await.unwrap().unlock().await.unwrap();
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut server.conn())
        .unwrap();
    let loads_before = support::command_calls(&server, "script|load");
    let guard = multi.lock().await.unwrap();
    assert!(names.iter().all(|n| exists(&server, &key_of(n))));
    assert_eq!(
        support::command_calls(&server, "script|load") - loads_before,
        1
    );
    guard.unlock().await.unwrap();
    assert!(all_free(&server, &names));
}

/// A waiting MultiLock with a fixed lease: the member taken first kept its lease running while
/// the busy one was awaited (long enough to run out); the guard handed out holds every member
/// with its whole lease from then on.
#[tokio::test]
async fn a_waited_multilock_with_a_fixed_lease_holds_every_member_for_the_lease() {
    let server = Server::start();
    let [a, b] = clients(&server).await;
    let names = unique_names("fixed-turn", 2);
    let busy = b.lock(&names[1]).unwrap().lock().await.unwrap();
    let release_later = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(1_200)).await;
        busy.unlock().await.unwrap();
    });
    let lease = Duration::from_millis(700);
    let multi = MultiLock::new(locks(&a, &names)).unwrap();
    let guard = multi
        .try_lock_with(LockOptions::new().lease(lease).wait(Duration::from_secs(5)))
        .await
        .unwrap()
        .expect("both members, once the busy one was released");
    for name in &names {
        let left = support::pttl(&server, &key_of(name));
        assert!(
            left > 400 && left <= 700,
            "{name}: {left} ms left of a {lease:?} lease"
        );
    }
    assert!(!guard.is_lost());
    guard.unlock().await.unwrap();
    release_later.await.unwrap();
    assert!(all_free(&server, &names));
}

/// One task acquiring a lock and a MultiLock over it at once: the acquisition that starts
/// second is refused (as two `lock()` calls of one task are), never both admitted.
#[tokio::test]
async fn a_multilock_and_a_lock_of_one_task_at_once_are_not_both_admitted() {
    let server = Server::start();
    let [a] = clients(&server).await;
    let names = unique_names("joined-multi", 2);
    let single = a.lock(&names[0]).unwrap();
    let multi = MultiLock::new(locks(&a, &names)).unwrap();
    let (one, all) = tokio::join!(single.lock(), multi.lock());
    match (one, all) {
        (Ok(guard), Err(e)) => {
            assert!(e.is_concurrent_acquisition(), "{e}");
            guard.unlock().await.unwrap();
        }
        (Err(e), Ok(guard)) => {
            assert!(e.is_concurrent_acquisition(), "{e}");
            guard.unlock().await.unwrap();
        }
        (one, all) => panic!("one guard and one refusal, got {one:?} and {all:?}"),
    }
    assert!(all_free(&server, &names));
}

/// A MultiLock acquisition given up while its request waits behind a paused server: the grant
/// that comes later is given back in the background, and the owner's next attempt waits for
/// that. Before, it reached the server first and met the grant as the owner's own hold: on a
/// non-reentrant member, `WouldDeadlock`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_after_an_abandoned_one_waits_for_its_undo() {
    let server = Server::start();
    let client = client(&server).await;
    let names = unique_names("abandoned-multi", 2);
    let members = names
        .iter()
        .map(|n| client.lock(n).unwrap().reentrant(false))
        .collect();
    let multi = MultiLock::new(members).unwrap();
    // Once first, so the client has all it learns on a first acquisition (scripts, replicas).
    multi.lock().await.unwrap().unlock().await.unwrap();
    server.client_pause(300, true);
    let abandoned = tokio::time::timeout(Duration::from_millis(50), multi.lock()).await;
    assert!(
        abandoned.is_err(),
        "the first attempt waits behind the pause"
    );
    let guard = tokio::time::timeout(Duration::from_secs(5), multi.try_lock())
        .await
        .expect("the second attempt returns")
        .expect("no error (WouldDeadlock before)")
        .expect("the locks are free once the abandoned grant is given back");
    for name in &names {
        assert_eq!(support::owners(&server, &key_of(name)), 1);
    }
    guard.unlock().await.unwrap();
    assert!(all_free(&server, &names));
}

/// The hold counts the server keeps for `key`, one per owner field.
fn server_counts(server: &Server, key: &str) -> Vec<u64> {
    redis::cmd("HVALS")
        .arg(key)
        .query(&mut server.conn())
        .expect("HVALS")
}

/// A MultiLock's acquisition whose reply is lost with its connection (a proxy forwards it and
/// closes the connection before the reply) takes each member once: the owner's unlock frees
/// every key at once. Before, the members' requests were sent again blindly and counted twice,
/// so `unlock` answered `Ok` while each key stayed held (count 1) for a whole lease, refusing
/// every other client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multilock_whose_reply_is_lost_takes_each_member_once() {
    let server = Server::start();
    let proxy = support::proxy::Proxy::start(server.port()).await;
    let mine = support::client_at(proxy.url(), |b| b).await;
    let other = client(&server).await;
    // Once first, so the scripts are loaded and the cut request is the acquisition itself.
    let warm = MultiLock::new(locks(&mine, &unique_names("lost-multi-warm", 2))).unwrap();
    warm.lock().await.unwrap().unlock().await.unwrap();
    let names = unique_names("lost-multi", 2);
    let multi = MultiLock::new(locks(&mine, &names)).unwrap();
    // A fresh member's request on the wire: the watchdog lease, then '1' (reentrant).
    proxy.cut_after("$5\r\n30000\r\n$1\r\n1\r\n", 0);
    let taken = multi
        .try_lock_with(LockOptions::new().wait(Duration::from_secs(5)))
        .await;
    let done = tokio::time::timeout(Duration::from_secs(1), proxy.cut_done()).await;
    assert!(done.is_ok(), "the acquisition was not cut");
    let guard = taken
        .expect("sent again on a new connection")
        .expect("the members are free");
    for name in &names {
        assert_eq!(server_counts(&server, &key_of(name)), [1], "{name}");
    }
    guard.unlock().await.unwrap();
    assert!(
        all_free(&server, &names),
        "a member outlived the owner: {:?}",
        names
            .iter()
            .map(|n| server_counts(&server, &key_of(n)))
            .collect::<Vec<_>>()
    );
    let next = MultiLock::new(locks(&other, &names))
        .unwrap()
        .try_lock()
        .await
        .unwrap();
    assert!(next.is_some(), "the freed members were refused");
    assert_eq!(mine.held_count(), 0);
}

/// Whether somebody queues for lock `name` within 5 s (as `client` sees its waiters).
async fn queued_for(client: &Client, name: &str) -> bool {
    let lock = client.lock(name).unwrap();
    let queued = || async { !lock.waiters().await.unwrap().is_empty() };
    support::eventually_async(Duration::from_secs(5), queued).await
}

/// Two names, in the order a waiting MultiLock takes them (by key).
fn in_key_order(prefix: &str) -> (String, String) {
    let mut names = unique_names(prefix, 2);
    names.sort_by_key(|n| key_of(n));
    (names[0].clone(), names[1].clone())
}

/// A waiting MultiLock whose first member, taken in its turn, is lost while it waits for the
/// second (the key is deleted: the loss notice marks that hold lost) never hands out a guard
/// with that member lost: it gives everything back and waits for both again. Before, `lock()`
/// returned a guard that was already lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_lost_while_waiting_is_taken_again() {
    let server = Server::start();
    let [mine, other] = clients(&server).await;
    let (first, second) = in_key_order("lost-early");
    let blocker = other.lock(&second).unwrap().lock().await.unwrap();
    let multi = MultiLock::new(locks(&mine, &[first.clone(), second.clone()])).unwrap();
    let waiting = tokio::spawn(async move { multi.lock().await });
    // Queued for the second member: the first is ours, taken in its turn.
    assert!(
        queued_for(&other, &second).await,
        "never queued for {second}"
    );
    assert_eq!(support::owners(&server, &key_of(&first)), 1);
    let _: () = redis::cmd("DEL")
        .arg(key_of(&first))
        .query(&mut server.conn())
        .unwrap();
    // The loss notice detaches the member's hold (the client holds nothing then).
    let noticed = || mine.held_count() == 0;
    assert!(support::eventually(Duration::from_secs(3), noticed));
    blocker.unlock().await.unwrap();
    let guard = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the MultiLock is granted")
        .unwrap()
        .unwrap();
    assert!(!guard.is_lost(), "handed out with a member already lost");
    for name in [&first, &second] {
        assert_eq!(support::owners(&server, &key_of(name)), 1, "{name}");
    }
    guard.unlock().await.unwrap();
    assert!(all_free(&server, &[first, second]));
}

/// A waiting MultiLock with a fixed lease over a member its owner already holds under the
/// watchdog is granted, and leaves that hold under the watchdog; over one the owner holds with
/// a longer fixed lease, leaves that lease as it was. Before, the first failed with
/// `InvalidArgument` (the member taken early was "extended", which a watchdog hold refuses),
/// and the second shortened the owner's own hold to the MultiLock's lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_held_already_keeps_its_lease() {
    let server = Server::start();
    let [mine, other] = clients(&server).await;
    for outer_lease in [None, Some(Duration::from_secs(60))] {
        let (first, second) = in_key_order("held-early");
        let outer = match outer_lease {
            None => mine.lock(&first).unwrap().lock().await.unwrap(),
            Some(lease) => {
                let options = LockOptions::new().lease(lease);
                mine.lock(&first).unwrap().lock_with(options).await.unwrap()
            }
        };
        let blocker = other.lock(&second).unwrap().lock().await.unwrap();
        let multi = MultiLock::new(locks(&mine, &[first.clone(), second.clone()])).unwrap();
        // Let go once the MultiLock waits for the second member, holding the first.
        let release = {
            let (other, second) = (other.clone(), second.clone());
            tokio::spawn(async move {
                assert!(
                    queued_for(&other, &second).await,
                    "never queued for {second}"
                );
                blocker.unlock().await.unwrap();
            })
        };
        let options = LockOptions::new()
            .lease(Duration::from_secs(5))
            .wait(Duration::from_secs(5));
        let guard = multi.try_lock_with(options).await;
        release.await.unwrap();
        let guard = guard
            .unwrap_or_else(|e| panic!("{outer_lease:?}: {e}"))
            .expect("granted once the blocker let go");
        let ttl = support::pttl(&server, &key_of(&first));
        assert!(
            ttl > 20_000,
            "{outer_lease:?}: the owner's hold was shortened to {ttl} ms"
        );
        guard.unlock().await.unwrap();
        assert!(!outer.is_lost());
        outer.unlock().await.unwrap();
        assert!(all_free(&server, &[first, second]));
    }
}
