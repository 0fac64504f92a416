//! Hand-over within one client: a release that frees a lock gives it straight to this client's
//! waiting task (no unlock message, the lock never free in between), unless a waiter of another
//! client is queued for it; fencing tokens still grow; a waiter that stops waiting as the lock is
//! handed to it leaves nothing behind.

mod support;

use redlease::{Client, LockOptions};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use support::{
    Server, client, client_with, clients, command_calls, eventually, exists, join_within, key_of,
    numsub, owners, pttl, unique_name, unlock_channel, until_gone, until_subscribed,
};

/// Waits until `n` connections listen for `name`'s unlock messages, and a little more so the
/// waiters are past their attempts and into their wait.
async fn until_waiting(server: &Server, name: &str, n: u64) {
    let channel = unlock_channel(&key_of(name));
    assert!(
        until_subscribed(server, &channel, n).await,
        "{n} waiter(s) never subscribed to {channel}"
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
}

/// One wait of `waiting` for `name`, which `holder` holds until the waiter waits; `waits` runs
/// then. The waiter gets the lock and gives it back.
async fn wait_once(
    server: &Server,
    [holder, waiting]: &[redlease::Client; 2],
    name: &str,
    waits: impl FnOnce(),
) {
    let held = holder.lock(name).unwrap().lock().await.unwrap();
    let waiter = {
        let lock = waiting.lock(name).unwrap();
        tokio::spawn(async move { lock.lock().await.unwrap() })
    };
    until_waiting(server, name, 1).await;
    waits();
    held.unlock().await.unwrap();
    for guard in join_within([waiter], Duration::from_secs(2), "the waiter").await {
        guard.unlock().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_hands_the_lock_to_a_waiting_task_of_the_same_client() {
    let server = Server::start();
    let client = client(&server).await;
    let name = unique_name("handover");
    for round in 0..3 {
        let held = client.lock(&name).unwrap().lock().await.unwrap();
        let waiter = {
            let lock = client.lock(&name).unwrap();
            tokio::spawn(async move {
                let guard = lock.lock().await.unwrap();
                // Seen from the waiter's own task: it holds exactly one hold.
                let count = lock.hold_count().await.unwrap();
                (guard, count)
            })
        };
        until_waiting(&server, &name, 1).await;
        let published = command_calls(&server, "publish");
        held.unlock().await.unwrap();
        let (guard, count) = join_within([waiter], Duration::from_secs(5), "never handed over")
            .await
            .remove(0);
        assert_eq!(count, 1, "round {round}: the waiter's hold count");
        assert_eq!(
            command_calls(&server, "publish"),
            published,
            "round {round}: a hand-over publishes nothing: the lock was never free"
        );
        let key = key_of(&name);
        assert_eq!(owners(&server, &key), 1, "round {round}: one owner");
        // The waiter's watchdog lease (30 s) was set by the hand-over itself.
        assert!(
            pttl(&server, &key) > 20_000,
            "round {round}: the waiter's lease"
        );
        guard.unlock().await.unwrap();
        assert!(!exists(&server, &key), "round {round}: released at the end");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_hand_over_while_another_client_waits() {
    let server = Server::start();
    let [a, b] = clients(&server).await;
    let name = unique_name("fair");
    let held = a.lock(&name).unwrap().lock().await.unwrap();
    let remote = {
        let lock = b.lock(&name).unwrap();
        tokio::spawn(async move { lock.lock().await.unwrap().unlock().await.unwrap() })
    };
    until_waiting(&server, &name, 1).await;
    let local = {
        let lock = a.lock(&name).unwrap();
        tokio::spawn(async move { lock.lock().await.unwrap().unlock().await.unwrap() })
    };
    until_waiting(&server, &name, 2).await;
    let published = command_calls(&server, "publish");
    held.unlock().await.unwrap();
    join_within(
        [remote, local],
        Duration::from_secs(5),
        "a waiter never got the lock",
    )
    .await;
    // The first release freed the lock and told everybody (the remote waiter listens), instead
    // of passing it to the local waiter.
    assert!(
        command_calls(&server, "publish") > published,
        "the release published no unlock message"
    );
    assert!(!exists(&server, &key_of(&name)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_client_hands_the_lock_to_another_clients_waiter_once_it_queued() {
    let server = Server::start();
    let [a, b] = clients(&server).await;
    let name = unique_name("starve");
    let stop = Arc::new(AtomicBool::new(false));
    // Lock/unlock rounds of client A's tasks, ended once their guard was unlocked.
    let rounds = Arc::new(AtomicU64::new(0));
    // Two tasks of client A take turns on the lock as fast as they can (bounded in rounds), so
    // every release of A has a waiter of A to hand the lock to.
    let busy: Vec<_> = (0..2)
        .map(|_| {
            let (lock, stop, rounds) = (a.lock(&name).unwrap(), stop.clone(), rounds.clone());
            tokio::spawn(async move {
                let mut mine = 0u32;
                while !stop.load(Ordering::Relaxed) && mine < 20_000 {
                    let guard = lock.lock().await.unwrap();
                    // Long against a round trip, so B's first attempts come within one hold.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    guard.unlock().await.unwrap();
                    rounds.fetch_add(1, Ordering::Relaxed);
                    mine += 1;
                }
                mine
            })
        })
        .collect();
    let published = command_calls(&server, "publish");
    tokio::time::sleep(Duration::from_millis(100)).await;
    // A's tasks hand the lock to each other: no grant from the queue, so no message.
    assert_eq!(
        command_calls(&server, "publish"),
        published,
        "client A's releases did not hand the lock over among its own tasks"
    );
    let rounds_before = rounds.load(Ordering::Relaxed);
    let got = b
        .lock(&name)
        .unwrap()
        .try_lock_with(LockOptions::new().wait(Duration::from_secs(10)))
        .await
        .unwrap();
    // Read while B holds the lock: A's tasks wait for it.
    let rounds_during = rounds.load(Ordering::Relaxed) - rounds_before;
    stop.store(true, Ordering::Relaxed);
    let guard = got.expect("client B's waiter was starved for 10 s by client A's hand-overs");
    guard.unlock().await.unwrap();
    let per_task = join_within(busy, Duration::from_secs(10), "a busy task hung").await;
    assert!(
        per_task.iter().all(|&r| r > 0),
        "client A's tasks ran: {per_task:?}"
    );
    // B's waiter queues with its second attempt, a round trip or two after it starts (its first
    // wait also connects the subscriber), and A's next release that frees the lock is then B's:
    // A ends the round it was in, maybe one more while B's first attempts are on their way
    // (each of A's rounds holds the lock 10 ms); the rest is room for a loaded machine. A busy
    // client handing the lock on among its own tasks would make this thousands, or 64 with a
    // bound on hand-overs in a row instead of the queue's rule.
    assert!(
        rounds_during <= 16,
        "client A completed {rounds_during} rounds while B's waiter waited"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_overs_keep_fencing_tokens_growing() {
    let server = Server::start();
    let client = client(&server).await;
    let name = unique_name("fenced-handover");
    let last_token = Arc::new(AtomicU64::new(0));
    let published = command_calls(&server, "publish");
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let lock = client.lock(&name).unwrap().fenced(true);
            let last_token = last_token.clone();
            tokio::spawn(async move {
                for _ in 0..50 {
                    let guard = lock.lock().await.unwrap();
                    let token = guard.fencing_token().expect("a fenced lock has a token");
                    // Under the lock nobody else moves `last_token`: a plain load and store.
                    let before = last_token.load(Ordering::SeqCst);
                    assert!(token > before, "token {token} after {before}");
                    // Held long enough for the next head to be waiting with its offer when we
                    // release (a hand-over needs a waiter; with a shorter hold the release can
                    // land during the next head's attempt, which then publishes).
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    last_token.store(token, Ordering::SeqCst);
                    guard.unlock().await.unwrap();
                }
            })
        })
        .collect();
    join_within(tasks, Duration::from_secs(30), "fenced tasks hung").await;
    let counter: u64 = redis::cmd("GET")
        .arg(format!("{}:fence", key_of(&name)))
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(
        counter,
        last_token.load(Ordering::SeqCst),
        "the last token is the counter"
    );
    assert!(
        counter >= 200,
        "200 acquisitions, each with a new token: {counter}"
    );
    // Most of the 200 acquisitions came by hand-over, which publishes nothing.
    let messages = command_calls(&server, "publish") - published;
    assert!(
        messages < 100,
        "{messages} unlock messages for 200 acquisitions"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_gives_up_as_the_lock_is_handed_to_it_leaves_nothing_behind() {
    let server = Server::start();
    let client = client(&server).await;
    let name = unique_name("give-up");
    let key = key_of(&name);
    let (mut got, mut gave_up) = (0, 0);
    for round in 0..60u64 {
        let held = client.lock(&name).unwrap().lock().await.unwrap();
        let lock = client.lock(&name).unwrap();
        // The waiter's patience ends around the moment the holder releases (after 20 ms): from
        // 3 ms before to 4.7 ms after, so that a loaded machine's slower hand-overs still let
        // some waiters in.
        let patience = Duration::from_micros(17_000 + (round % 12) * 700);
        let waiter = tokio::spawn(async move {
            match tokio::time::timeout(patience, lock.lock()).await {
                Ok(guard) => {
                    drop(guard.unwrap());
                    true
                }
                Err(_) => false,
            }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        held.unlock().await.unwrap();
        let took = join_within([waiter], Duration::from_secs(5), "the waiter hung").await[0];
        if took {
            got += 1
        } else {
            gave_up += 1
        }
        // Whatever happened, the lock ends up free (a stray grant would live for its 30 s lease).
        assert!(
            until_gone(std::slice::from_ref(&server), &key, Duration::from_secs(5)).await,
            "round {round}: a hold was left behind (waiter took it: {took})"
        );
    }
    assert!(
        got > 0 && gave_up > 0,
        "both paths ran: got {got}, gave up {gave_up}"
    );
}

/// A channel stays subscribed for a moment after its last waiter left: the same client waiting
/// again right away sends no SUBSCRIBE (nor an UNSUBSCRIBE before it), and the subscription
/// goes once nobody came back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_comes_back_at_once_finds_the_channel_subscribed() {
    let server = Server::start();
    let both = clients(&server).await;
    let name = unique_name("linger");
    let channel = unlock_channel(&key_of(name.as_str()));
    // Both commands, counted from the first wait on (building a client tries them too).
    let subscribes = || command_calls(&server, "subscribe") + command_calls(&server, "unsubscribe");
    let mut before = None;
    for round in 0..2 {
        wait_once(&server, &both, &name, || {
            if round == 0 {
                before = Some(subscribes());
            }
        })
        .await;
    }
    assert_eq!(
        Some(subscribes()),
        before,
        "the channel was left and subscribed again between the waits"
    );
    assert!(
        until_subscribed(&server, &channel, 0).await,
        "the channel stayed subscribed with nobody waiting"
    );
    for client in both {
        client.shutdown().await.unwrap();
    }
}

/// A lock waited for again and again keeps its channel: the linger counts from the last waiter
/// that left, not the first, so a client that waits again within 150-300 ms each time, for
/// about 4 s (eight lingers), subscribes once. (Each departure once started its own 500 ms
/// timer, and any that ended while nobody waited unsubscribed: a contending process paid a
/// SUBSCRIBE, an UNSUBSCRIBE and one attempt more every few waits. The pauses vary so that
/// some such timer ends in a pause whatever a wait takes.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_waited_for_again_and_again_keeps_its_channel() {
    let server = Server::start();
    let both = clients(&server).await;
    let name = unique_name("linger-again");
    let channel = unlock_channel(&key_of(name.as_str()));
    let subscribes = || command_calls(&server, "subscribe") + command_calls(&server, "unsubscribe");
    let mut before = None;
    for (round, pause_ms) in [150, 250, 300, 200]
        .into_iter()
        .cycle()
        .take(12)
        .enumerate()
    {
        wait_once(&server, &both, &name, || {
            if round == 0 {
                before = Some(subscribes());
            }
        })
        .await;
        // Nobody waits now: the channel lingers.
        tokio::time::sleep(Duration::from_millis(pause_ms)).await;
    }
    assert_eq!(
        Some(subscribes()),
        before,
        "the channel was left and subscribed again between waits at most 300 ms apart"
    );
    assert!(
        until_subscribed(&server, &channel, 0).await,
        "the channel stayed subscribed with nobody waiting"
    );
    for client in both {
        client.shutdown().await.unwrap();
    }
}

/// `channel_linger` sets how long a lock's channel stays subscribed after its last waiter left:
/// zero leaves it at once, two seconds keep it for two seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_channel_lingers_as_long_as_the_client_says() {
    let server = Server::start();
    let holder = client(&server).await;
    for (linger, still_at, gone_by) in [
        (Duration::ZERO, None, Duration::from_millis(400)),
        (
            Duration::from_secs(2),
            Some(Duration::from_millis(1200)),
            Duration::from_millis(3000),
        ),
    ] {
        let waiting = client_with(&server, |b| b.channel_linger(linger)).await;
        assert_eq!(waiting.config().channel_linger, linger);
        let name = unique_name("linger-set");
        let channel = unlock_channel(&key_of(name.as_str()));
        let both = [holder.clone(), waiting.clone()];
        wait_once(&server, &both, &name, || {}).await;
        let left = std::time::Instant::now();
        if let Some(still_at) = still_at {
            tokio::time::sleep(still_at).await;
            assert_eq!(
                numsub(&server, &channel),
                1,
                "a {linger:?} linger ended before {still_at:?}"
            );
        }
        assert!(
            until_subscribed(&server, &channel, 0).await,
            "the channel stayed subscribed past its {linger:?} linger"
        );
        let took = left.elapsed();
        assert!(
            took <= gone_by,
            "a {linger:?} linger left the channel after {took:?}"
        );
        waiting.shutdown().await.unwrap();
    }
}

/// The tasks a waiter's client and a holder's leave alive once both are shut down (their
/// clones kept, so the clients themselves live on), after one wait with `linger`, looked at
/// until there are at most `expected` (for up to 3 s); and the clones.
async fn tasks_left_by_shutdown(
    server: &Server,
    linger: Duration,
    expected: usize,
) -> (usize, [Client; 2]) {
    let metrics = tokio::runtime::Handle::current().metrics();
    let before = metrics.num_alive_tasks();
    let both = [
        client(server).await,
        client_with(server, |b| b.channel_linger(linger)).await,
    ];
    let name = unique_name("linger-shutdown");
    wait_once(server, &both, &name, || {}).await;
    if linger.is_zero() {
        let channel = unlock_channel(&key_of(name.as_str()));
        assert!(until_subscribed(server, &channel, 0).await);
    }
    let kept = both.clone();
    for client in both {
        client.shutdown().await.unwrap();
    }
    // Bounded: 30 looks, 100 ms apart.
    let mut left = usize::MAX;
    for _ in 0..30 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        left = metrics.num_alive_tasks().saturating_sub(before);
        if left <= expected {
            break;
        }
    }
    (left, kept)
}

/// A channel lingering when its client shuts down keeps no task alive for the rest of its
/// linger: a 60 s linger leaves no more tasks behind than none at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shut_down_client_leaves_no_lingering_task_behind() {
    let server = Server::start();
    let (without, _kept) = tasks_left_by_shutdown(&server, Duration::ZERO, 0).await;
    let (lingering, _kept) =
        tasks_left_by_shutdown(&server, Duration::from_secs(60), without).await;
    assert!(
        lingering <= without,
        "{lingering} tasks left by a shut-down client with a 60 s linger, {without} without"
    );
}

/// Two tasks of one client wait for a lock another holds; it is handed to one, and the other,
/// next in line, waits for that task's release rather than asking Redis. When the key is
/// deleted under the first task (its hold lost), the second must ask at once: before, it slept
/// through the holder's remaining lease as its last refusal told it (about 30 s), with the
/// lock free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_lost_after_a_hand_over_wakes_the_next_waiter() {
    let server = Server::start();
    let client = client(&server).await;
    let name = unique_name("lost-after-hand-over");
    let key = key_of(&name);
    let held = client.lock(&name).unwrap().lock().await.unwrap();
    // Both ask while the lock is held (each refused, told of a ~30 s lease), then line up.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for task in 0..2 {
        let (lock, tx) = (client.lock(&name).unwrap(), tx.clone());
        tokio::spawn(async move {
            let guard = lock.lock().await.unwrap();
            let _ = tx.send((task, guard, std::time::Instant::now()));
        });
    }
    until_waiting(&server, &name, 1).await;
    held.unlock().await.unwrap();
    let next = tokio::time::timeout(Duration::from_secs(5), rx.recv());
    let (first, first_guard, _) = next.await.expect("one task is handed the lock").unwrap();
    // Past the loss notice's arming delay, then the key goes.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let deleted = std::time::Instant::now();
    redis::cmd("DEL")
        .arg(&key)
        .query::<()>(&mut server.conn())
        .unwrap();
    let next = tokio::time::timeout(Duration::from_secs(10), rx.recv());
    let (second, second_guard, at) = next.await.expect("the other task gets the lock").unwrap();
    assert_ne!(first, second);
    assert!(
        at - deleted < Duration::from_secs(3),
        "the next waiter took {:?} to ask after the hold was lost",
        at - deleted
    );
    assert!(first_guard.is_lost());
    assert!(!second_guard.is_lost());
    assert_eq!(owners(&server, &key), 1);
    drop(first_guard);
    second_guard.unlock().await.unwrap();
    assert!(until_gone(std::slice::from_ref(&server), &key, Duration::from_secs(5)).await);
}

/// The same with a fixed lease that runs out: the task handed the lock keeps its guard past
/// its lease, and the next one in line must get the lock soon after the key expires, not
/// sleep through the ~30 s its last refusal told it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handed_fixed_lease_that_runs_out_wakes_the_next_waiter() {
    let server = Server::start();
    let client = client(&server).await;
    let name = unique_name("expired-after-hand-over");
    let key = key_of(&name);
    let lease = Duration::from_millis(500);
    let held = client.lock(&name).unwrap().lock().await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for task in 0..2 {
        let (lock, tx) = (client.lock(&name).unwrap(), tx.clone());
        let calls = command_calls(&server, "evalsha");
        tokio::spawn(async move {
            let guard = lock
                .lock_with(LockOptions::new().lease(lease))
                .await
                .unwrap();
            let _ = tx.send((task, guard, std::time::Instant::now()));
        });
        // Each refused (the first then queued on the server, the second behind it in the
        // client's queue) before the next starts.
        let asked = || command_calls(&server, "evalsha") > calls;
        assert!(
            eventually(Duration::from_secs(5), asked),
            "task {task} never asked"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    until_waiting(&server, &name, 1).await;
    held.unlock().await.unwrap();
    let next = tokio::time::timeout(Duration::from_secs(5), rx.recv());
    let (first, first_guard, granted) = next.await.expect("one task is handed the lock").unwrap();
    let next = tokio::time::timeout(Duration::from_secs(10), rx.recv());
    let (second, second_guard, at) = next.await.expect("the other task gets the lock").unwrap();
    assert_ne!(first, second);
    assert!(
        at - granted < lease + Duration::from_secs(2),
        "the next waiter got the lock {:?} after a {lease:?} hold was handed over",
        at - granted
    );
    assert!(first_guard.is_lost());
    assert!(!second_guard.is_lost());
    drop(first_guard);
    second_guard.unlock().await.unwrap();
    assert!(until_gone(std::slice::from_ref(&server), &key, Duration::from_secs(5)).await);
}

/// A waiter that stops waiting while a release is handing it the lock: the grant is given back
/// in the background, and its owner's next acquisition waits for that give-back. Before, the
/// give-back counted as the owner's release only once the release's reply was in, so the next
/// acquisition could reach the server first and meet the handed hold as its own: on a
/// non-reentrant lock, `WouldDeadlock`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_asking_again_waits_for_the_give_back_of_a_hand_over_it_left() {
    let server = Server::start();
    let client = client(&server).await;
    let name = unique_name("left-hand-over");
    let key = key_of(&name);
    let owner = redlease::Owner::new();
    let lock = client
        .lock(&name)
        .unwrap()
        .reentrant(false)
        .with_owner(owner);
    let held = client.lock(&name).unwrap().lock().await.unwrap();
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.lock().await })
    };
    until_waiting(&server, &name, 1).await;
    // The release takes the waiting task's offer and is sent; the server answers nothing yet.
    server.pause();
    let release = tokio::spawn(async move { held.unlock().await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    waiter.abort();
    assert!(waiter.await.is_err(), "the waiter was still waiting");
    let again = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.lock().await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    server.resume();
    let guard = tokio::time::timeout(Duration::from_secs(10), again)
        .await
        .expect("the owner's next acquisition returns")
        .unwrap()
        .expect("the owner's next acquisition gets the lock");
    release.await.unwrap().unwrap();
    assert!(!guard.is_lost());
    assert_eq!(owners(&server, &key), 1);
    guard.unlock().await.unwrap();
    assert!(until_gone(std::slice::from_ref(&server), &key, Duration::from_secs(5)).await);
}
