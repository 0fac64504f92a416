//! Owner identity under async concurrency: one owner's concurrent operations keep the server's
//! count equal to its live guards; a returned guard is never already lost.

mod support;

use std::time::Duration;

use redlease::{Lock, Owner};
use support::Server;

/// `rounds` × (lock, read the counter, yield, sleep 1 ms, write it back + 1, unlock) on `lock`;
/// how many unlocks reported a lost lease.
async fn locked_increments(lock: &Lock, counter: &str, rounds: usize) -> usize {
    let mut false_losses = 0;
    for _ in 0..rounds {
        let guard = acquire_taking_turns(lock).await;
        let client = lock.client();
        let value: Option<u64> = client.query(redis::cmd("GET").arg(counter)).await.unwrap();
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(1)).await;
        let next = value.unwrap_or(0) + 1;
        client
            .query::<()>(redis::cmd("SET").arg(counter).arg(next))
            .await
            .unwrap();
        if let Err(e) = guard.unlock().await {
            assert!(e.is_lease_lost(), "unexpected unlock error: {e}");
            false_losses += 1;
        }
    }
    false_losses
}

/// `lock.lock()`, retried (after a yield) while it is refused because another acquisition of
/// the same implicit owner is in progress (loops joined in one task share its owner).
async fn acquire_taking_turns(lock: &Lock) -> redlease::LockGuard {
    for _ in 0..100_000 {
        match lock.lock().await {
            Ok(guard) => return guard,
            Err(e) if e.is_concurrent_acquisition() => tokio::task::yield_now().await,
            Err(e) => panic!("lock(): {e}"),
        }
    }
    panic!("the other loop's acquisition never finished")
}

/// The join! signature: two loops of one task share the task owner. An acquisition that starts
/// while the other loop's is in progress is refused; one that starts while the other loop holds
/// the lock re-enters it (that is what the task owner means). Either way the server's count
/// must follow the guards exactly: no false `LeaseLost`, and nothing left held afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joined_loops_of_one_task_leave_nothing_held() {
    let server = Server::start();
    let client = support::client(&server).await;
    let lock = client.lock("joined").unwrap();
    let task = {
        let lock = lock.clone();
        tokio::spawn(async move {
            let (a, b) = tokio::join!(
                locked_increments(&lock, "joined:counter", 100),
                locked_increments(&lock, "joined:counter", 100)
            );
            a + b
        })
    };
    let false_losses = tokio::time::timeout(Duration::from_secs(60), task)
        .await
        .expect("the joined loops finish")
        .unwrap();
    assert_eq!(false_losses, 0, "no lease was lost, yet unlock said so");
    assert!(
        !support::exists(&server, &support::key_of("joined")),
        "the key outlived every guard (count {} left)",
        support::owners(&server, &support::key_of("joined"))
    );
    assert_eq!(client.held_count(), 0, "no hold may stay registered");
}

/// Two tasks sharing one explicit owner: the same contract.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_sharing_an_owner_leave_nothing_held() {
    let server = Server::start();
    let client = support::client(&server).await;
    let lock = client
        .lock("shared-owner")
        .unwrap()
        .with_owner(Owner::new());
    let tasks = (0..4).map(|_| {
        let lock = lock.clone();
        tokio::spawn(async move { locked_increments(&lock, "shared-owner:counter", 50).await })
    });
    let losses: usize = support::join_within(tasks, Duration::from_secs(60), "tasks finish")
        .await
        .into_iter()
        .sum();
    assert_eq!(losses, 0, "no lease was lost, yet unlock said so");
    assert!(!support::exists(&server, &support::key_of("shared-owner")));
    assert_eq!(client.held_count(), 0);
}

/// Many concurrent acquisitions and releases of one owner, some cancelled at random points:
/// afterwards no key, no renewal, and every unlock that completed was not a false loss.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_owners_concurrent_operations_with_cancellation_leave_nothing() {
    let server = Server::start();
    let client = support::client(&server).await;
    let lock = client.lock("churn").unwrap().with_owner(Owner::new());
    let mut tasks = Vec::new();
    for i in 0..32u64 {
        let lock = lock.clone();
        tasks.push(tokio::spawn(async move {
            let mut false_losses = 0;
            for round in 0..20u64 {
                // Cut some acquisitions short at varying points (in flight, or just answered).
                let budget = Duration::from_micros(50 + (i * 37 + round * 101) % 900);
                let guard = if (i + round) % 3 == 0 {
                    match tokio::time::timeout(budget, lock.lock()).await {
                        Ok(guard) => guard.unwrap(),
                        Err(_) => continue,
                    }
                } else {
                    lock.lock().await.unwrap()
                };
                tokio::task::yield_now().await;
                if round % 4 == 0 {
                    drop(guard); // the background release path
                } else if let Err(e) = guard.unlock().await {
                    assert!(e.is_lease_lost(), "unexpected unlock error: {e}");
                    false_losses += 1;
                }
            }
            false_losses
        }));
    }
    let losses: usize = support::join_within(tasks, Duration::from_secs(60), "tasks finish")
        .await
        .into_iter()
        .sum();
    assert_eq!(losses, 0, "no lease was lost, yet unlock said so");
    let key = support::key_of("churn");
    // Dropped guards and abandoned grants are given back in the background.
    assert!(
        support::until_gone(std::slice::from_ref(&server), &key, Duration::from_secs(5)).await,
        "the key outlived every guard (count {} left)",
        support::owners(&server, &key)
    );
    assert_eq!(client.held_count(), 0, "no hold may stay registered");
}

/// A grant that arrives after its validity was spent (the server stalled past the lease) is
/// confirmed by a renewal before `lock()` returns it: the guard is valid and kept alive.
#[tokio::test]
async fn a_grant_from_a_stalled_server_is_confirmed_before_it_is_returned() {
    let server = Server::start();
    let lease = Duration::from_secs(1);
    let client = support::client_with(&server, |b| {
        b.watchdog_lease(lease).timeout(Duration::from_secs(3))
    })
    .await;
    let lock = client.lock("stalled").unwrap();
    server.pause();
    let resume = {
        let pid = server.pid();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(1500));
            // SIGCONT by pid, as Server::resume does.
            let _ = std::process::Command::new("kill")
                .args(["-CONT", &pid.to_string()])
                .status();
        })
    };
    let guard = tokio::time::timeout(Duration::from_secs(10), lock.lock())
        .await
        .expect("lock() returns once the server resumes")
        .unwrap();
    resume.join().unwrap();
    assert!(
        !guard.is_lost(),
        "lock() returned a guard that was already lost"
    );
    // The watchdog keeps it: still ours after two more leases.
    tokio::time::sleep(2 * lease).await;
    assert!(
        !guard.is_lost(),
        "the watchdog did not keep the returned guard"
    );
    assert_eq!(support::owners(&server, &support::key_of("stalled")), 1);
    guard.unlock().await.unwrap();
    assert!(!support::exists(&server, &support::key_of("stalled")));
}

/// `join!` of two acquisitions of one lock in one task: both would hold it at once under the
/// task's owner, so the one that starts second fails at once with a typed error, and the
/// server counts one hold. A nested acquisition (the outer one finished) still re-enters.
#[tokio::test]
async fn joined_acquisitions_of_one_task_are_refused_not_both_admitted() {
    let server = Server::start();
    let client = support::client(&server).await;
    let lock = client.lock("joined-acquire").unwrap();
    let (a, b) = tokio::join!(lock.lock(), lock.lock());
    let (guard, refused) = match (a, b) {
        (Ok(guard), Err(e)) | (Err(e), Ok(guard)) => (guard, e),
        (a, b) => panic!("one guard and one refusal, got {a:?} and {b:?}"),
    };
    assert!(refused.is_concurrent_acquisition(), "{refused}");
    assert!(
        refused.to_string().contains("Lock::run"),
        "says what to do: {refused}"
    );
    let key = support::key_of("joined-acquire");
    assert_eq!(support::owners(&server, &key), 1, "one hold on the server");
    let nested = lock.lock().await.expect("a nested acquisition re-enters");
    assert_eq!(hold_count(&server, &key), 2);
    nested.unlock().await.unwrap();
    guard.unlock().await.unwrap();
    assert!(!support::exists(&server, &key));

    // Waiting: the lock is busy elsewhere; the first waits, the second is refused at once.
    let other = support::client(&server).await;
    let busy = other.lock("joined-acquire").unwrap().lock().await.unwrap();
    let wait = redlease::LockOptions::new().wait(Duration::from_secs(5));
    let started = std::time::Instant::now();
    let release_soon = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        busy.unlock().await.unwrap();
    };
    let (a, b, ()) = tokio::join!(
        lock.try_lock_with(wait),
        lock.try_lock_with(wait),
        release_soon
    );
    let refused_after = started.elapsed();
    let (guard, refused) = match (a, b) {
        (Ok(Some(guard)), Err(e)) | (Err(e), Ok(Some(guard))) => (guard, e),
        (a, b) => panic!("one guard and one refusal, got {a:?} and {b:?}"),
    };
    assert!(refused.is_concurrent_acquisition(), "{refused}");
    assert!(refused_after < Duration::from_secs(2), "{refused_after:?}");
    guard.unlock().await.unwrap();

    // An explicit owner shared on purpose keeps its meaning: both acquisitions re-enter.
    let shared = lock.clone().with_owner(Owner::new());
    let (a, b) = tokio::join!(shared.lock(), shared.lock());
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(hold_count(&server, &key), 2);
    a.unlock().await.unwrap();
    b.unlock().await.unwrap();
    assert!(!support::exists(&server, &key));
}

/// The holds the server counts on the lock at `key`, over every owner.
fn hold_count(server: &Server, key: &str) -> u64 {
    let counts: Vec<u64> = redis::cmd("HVALS")
        .arg(key)
        .query(&mut server.conn())
        .expect("HVALS");
    counts.iter().sum()
}

/// Two tasks of one explicit owner wait behind another owner's hold, one behind the other in
/// the client. The first is handed the lock; the second, now at the head of the client's
/// queue, must not be handed the lock by its own owner's release: the lock cannot pass from
/// an owner to itself, and that release deleted the key while the waiter got a guard (anyone
/// could then take the lock beside it). It re-enters the lock its owner holds instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_never_hands_the_lock_to_itself() {
    let server = Server::start();
    let [client, other] = support::clients(&server).await;
    let name = "self-handed";
    let key = support::key_of(name);
    let held = client.lock(name).unwrap().lock().await.unwrap();
    let shared = client.lock(name).unwrap().with_owner(Owner::new());
    let first = {
        let shared = shared.clone();
        tokio::spawn(async move {
            let guard = shared.lock().await.unwrap();
            tokio::time::sleep(Duration::from_millis(100)).await;
            guard.unlock().await.unwrap();
        })
    };
    // The first waits at the head of the client's queue, then the second behind it.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let second = {
        let shared = shared.clone();
        tokio::spawn(async move { shared.lock().await.unwrap() })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    held.unlock().await.unwrap();
    let guard = tokio::time::timeout(Duration::from_secs(5), second)
        .await
        .expect("the second task gets the lock")
        .unwrap();
    tokio::time::timeout(Duration::from_secs(5), first)
        .await
        .expect("the first task finishes")
        .unwrap();
    // The first task's hold is gone; the second's is still on the server, and only its.
    assert!(!guard.is_lost());
    assert!(
        support::exists(&server, &key),
        "the second task's hold left the server"
    );
    assert_eq!(support::owners(&server, &key), 1);
    let intruder = other.lock(name).unwrap().try_lock().await.unwrap();
    assert!(
        intruder.is_none(),
        "another client took a lock the second task holds"
    );
    guard.unlock().await.unwrap();
    assert!(!support::exists(&server, &key));
    assert_eq!(client.held_count(), 0);
}
