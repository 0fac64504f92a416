//! `Semaphore`: permits are never over-granted across clients, waiters are woken by a release
//! (not by their nap), cancelled acquisitions leave nothing, bad input is a typed error, and it
//! works on a Redis Cluster.

mod support;

use redlease::LockOptions;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use redlease::Client;
use support::{
    Cluster, Server, clients, numsub, set_string, shard_numsub, unique_name, until_subscribed,
};

/// Every semaphore tells its waiters of their grants on `<key>:released:<client id>` (the
/// probes count the channels under this one).
fn channel_of(key: &str) -> String {
    format!("{key}:released")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_are_never_over_granted() {
    support::init_tracing();
    let server = Server::start();
    let [a, b] = clients(&server).await;
    let name = unique_name("sem");
    const PERMITS: usize = 3;
    assert!(
        a.semaphore(&name)
            .unwrap()
            .try_set_permits(PERMITS as u32)
            .await
            .unwrap()
    );
    assert!(
        !b.semaphore(&name)
            .unwrap()
            .try_set_permits(9)
            .await
            .unwrap(),
        "set twice"
    );
    let holders = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..12 {
        let semaphore = [&a, &b][i % 2].semaphore(&name).unwrap();
        let (holders, most) = (holders.clone(), most.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..5 {
                semaphore.acquire().await.unwrap();
                let now = holders.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(5)).await;
                holders.fetch_sub(1, Ordering::SeqCst);
                semaphore.release(1).await.unwrap();
            }
        }));
    }
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(20), task)
            .await
            .expect("a task starved")
            .unwrap();
    }
    let most = most.load(Ordering::SeqCst);
    assert!(
        most <= PERMITS,
        "{most} holders at once with {PERMITS} permits"
    );
    assert_eq!(
        most, PERMITS,
        "the test never filled the semaphore, so it proves nothing"
    );
    assert_eq!(
        a.semaphore(&name).unwrap().available().await.unwrap(),
        PERMITS as u64
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_a_waiter_at_once() {
    support::init_tracing();
    let server = Server::start();
    let [holder, waiter] = clients(&server).await;
    let name = unique_name("sem-wake");
    let held = holder.semaphore(&name).unwrap();
    held.set_permits(2).await.unwrap();
    held.acquire_with(LockOptions::new().permits(2))
        .await
        .unwrap();
    assert!(
        !held.try_acquire().await.unwrap(),
        "took a permit of an empty semaphore"
    );
    for round in 0..3 {
        let waiting = waiter.semaphore(&name).unwrap();
        let task = tokio::spawn(async move {
            let granted = waiting
                .try_acquire_with(LockOptions::new().permits(2).wait(Duration::from_secs(10)))
                .await
                .unwrap();
            (granted, Instant::now())
        });
        assert!(
            until_subscribed(&server, &channel_of(held.key()), 1).await,
            "never waited"
        );
        // Past the attempt that follows the subscription: now it sleeps (a nap is 1 s).
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert!(
            !task.is_finished(),
            "round {round}: acquired without permits"
        );
        held.release(1).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            !task.is_finished(),
            "round {round}: took 2 permits when 1 was free"
        );
        let released = Instant::now();
        held.release(1).await.unwrap();
        let (granted, at) = task.await.unwrap();
        assert!(granted);
        let latency = at.duration_since(released);
        assert!(
            latency < Duration::from_millis(100),
            "round {round}: woken {latency:?} after the release"
        );
        assert_eq!(held.available().await.unwrap(), 0);
        // Give them back to the holder's side for the next round.
        held.set_permits(0).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_acquire_leaves_nothing() {
    support::init_tracing();
    let server = Server::start();
    let [a, b] = clients(&server).await;
    let name = unique_name("sem-cancel");
    let semaphore = a.semaphore(&name).unwrap();
    semaphore.set_permits(0).await.unwrap();
    // Cancelled while waiting: no permit taken, no subscription left.
    let waiting = b.semaphore(&name).unwrap();
    let gave_up = tokio::time::timeout(Duration::from_millis(300), waiting.acquire()).await;
    assert!(gave_up.is_err(), "acquired from an empty semaphore");
    assert!(
        until_subscribed(&server, &channel_of(semaphore.key()), 0).await,
        "subscription left behind"
    );
    semaphore.release(1).await.unwrap();
    assert_eq!(semaphore.available().await.unwrap(), 1);

    // Cancelled at every point of a request in flight: whatever the server granted comes back.
    semaphore.set_permits(2).await.unwrap();
    let mut taken = 0;
    for i in 0..200u64 {
        let cut = Duration::from_micros(i * 7 % 400);
        if let Ok(Ok(())) = tokio::time::timeout(cut, waiting.acquire()).await {
            taken += 1;
            waiting.release(1).await.unwrap();
        }
    }
    let settled = support::eventually_async(Duration::from_secs(3), || async {
        semaphore.available().await.unwrap() == 2
    })
    .await;
    assert!(
        settled,
        "permits leaked: {} of 2 left ({taken} acquisitions completed)",
        semaphore.available().await.unwrap()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_a_typed_error() {
    support::init_tracing();
    let server = Server::start();
    let client = support::client(&server).await;
    assert!(client.semaphore("").unwrap_err().is_invalid_input());
    let semaphore = client.semaphore(&unique_name("sem-bad")).unwrap();
    semaphore.set_permits(1).await.unwrap();
    assert!(
        semaphore
            .acquire_with(LockOptions::new().permits(0))
            .await
            .unwrap_err()
            .is_invalid_input()
    );
    assert!(
        semaphore
            .try_acquire_with(LockOptions::new().permits(0).wait(Duration::ZERO))
            .await
            .unwrap_err()
            .is_invalid_input()
    );
    assert!(semaphore.release(0).await.unwrap_err().is_invalid_input());
    let absurd = Duration::from_secs(u64::MAX / 4);
    assert!(
        semaphore
            .try_acquire_with(LockOptions::new().wait(absurd))
            .await
            .unwrap_err()
            .is_invalid_input()
    );
    assert_eq!(
        semaphore.available().await.unwrap(),
        1,
        "bad input changed the permits"
    );
    // A negative count written by someone else is refused, not used.
    set_string(&server, semaphore.key(), "-3");
    let err = semaphore.try_acquire().await.unwrap_err();
    assert!(err.to_string().contains("non-negative integer"), "{err}");
    let err = semaphore.available().await.unwrap_err();
    assert!(err.to_string().contains("non-negative integer"), "{err}");
    // A key of another type.
    redis::cmd("DEL")
        .arg(semaphore.key())
        .query::<()>(&mut server.conn())
        .unwrap();
    redis::cmd("HSET")
        .arg(semaphore.key())
        .arg("f")
        .arg("1")
        .query::<()>(&mut server.conn())
        .unwrap();
    assert!(semaphore.try_acquire().await.unwrap_err().is_wrong_type());
    assert!(semaphore.release(1).await.unwrap_err().is_wrong_type());
    // A semaphore and a lock of one name do not collide.
    let name = unique_name("shared");
    let guard = client.lock(&name).unwrap().lock().await.unwrap();
    let semaphore = client.semaphore(&name).unwrap();
    assert!(semaphore.try_set_permits(1).await.unwrap());
    assert!(semaphore.try_acquire().await.unwrap());
    guard.unlock().await.unwrap();
    assert_eq!(numsub(&server, &channel_of(semaphore.key())), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn works_on_a_cluster() {
    support::init_tracing();
    let cluster = Cluster::start();
    let connect = || async {
        Client::builder_cluster(cluster.seeds())
            .build()
            .await
            .expect("connecting to the cluster")
    };
    let (a, b) = (connect().await, connect().await);
    for (name, _) in cluster.names_per_primary("sem", 1) {
        let semaphore = a.semaphore(&name).unwrap();
        assert!(semaphore.try_set_permits(1).await.unwrap());
        assert!(semaphore.try_acquire().await.unwrap());
        let waiting = b.semaphore(&name).unwrap();
        let task = tokio::spawn(async move {
            waiting
                .try_acquire_with(LockOptions::new().wait(Duration::from_secs(10)))
                .await
        });
        let channel = channel_of(semaphore.key());
        let subscribed = support::eventually_async(Duration::from_secs(5), || async {
            shard_numsub(cluster.server_of(semaphore.key()), &channel) == 1
        })
        .await;
        assert!(subscribed, "the waiter never listened on {channel}");
        let released = Instant::now();
        semaphore.release(1).await.unwrap();
        assert!(task.await.unwrap().unwrap());
        assert!(
            released.elapsed() < Duration::from_millis(500),
            "woken by the nap, not the release"
        );
        assert_eq!(semaphore.available().await.unwrap(), 0);
    }
}

/// An acquisition answered after the client's timeout: the caller hears `Timeout`, and the
/// permit the late reply took goes back. A semaphore's permits have no lease: before, the
/// reply was dropped with the timeout, and the permit stayed taken for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_take_answered_after_the_timeout_is_given_back() {
    let server = Server::start();
    let client = support::client_with(&server, |b| b.timeout(Duration::from_millis(200))).await;
    let semaphore = client
        .semaphore(&support::unique_name("late-take"))
        .unwrap();
    assert!(semaphore.try_set_permits(1).await.unwrap());
    // The server stalls; the attempt is answered once it resumes, after the client's timeout.
    server.pause();
    let resume = {
        let pid = server.pid();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(600));
            let _ = std::process::Command::new("kill")
                .args(["-CONT", &pid.to_string()])
                .status();
        })
    };
    let outcome = semaphore.try_acquire().await;
    assert!(
        matches!(&outcome, Err(e) if e.is_timeout()),
        "the caller hears the timeout: {outcome:?}"
    );
    resume.join().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut available = semaphore.available().await.unwrap();
    while available != 1 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
        available = semaphore.available().await.unwrap();
    }
    assert_eq!(available, 1, "the permit the late reply took is back");
    assert_eq!(client.held_count(), 0);
}

/// What a semaphore's call sends first: its operation, as one argument of the request.
fn operation(op: &str) -> String {
    format!("${}\r\n{op}\r\n", op.len())
}

/// The permits available, once they are `want` (within 5 s), else as they are then.
async fn available_once(semaphore: &redlease::Semaphore, want: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut available = semaphore.available().await.unwrap();
    while available != want && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
        available = semaphore.available().await.unwrap();
    }
    available
}

/// A semaphore of `permits` on a client that reaches its server through a proxy, with the
/// server (bind it: dropped, it stops) and the proxy.
struct Proxied {
    _server: Server,
    proxy: support::proxy::Proxy,
    client: Client,
    semaphore: redlease::Semaphore,
}

async fn proxied(name: &str, permits: u32) -> Proxied {
    let server = Server::start();
    let proxy = support::proxy::Proxy::start(server.port()).await;
    let client = support::client_at(proxy.url(), |b| b).await;
    let semaphore = client.semaphore(&unique_name(name)).unwrap();
    assert!(semaphore.try_set_permits(permits).await.unwrap());
    Proxied {
        _server: server,
        proxy,
        client,
        semaphore,
    }
}

/// Waits for the armed cuts of `proxy` to have happened, at most a second.
async fn cut(proxy: &support::proxy::Proxy, what: &str) {
    proxy.assert_cut(what).await;
}

/// An acquisition the server ran, whose reply was lost with its connection (a proxy forwards
/// it and closes the connection before the reply): it is sent again and answers what the first
/// send did, taking its permit once. Before, the caller heard `Error::Redis` and the permit
/// stayed out for good (nobody knew it was taken).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquisition_whose_reply_is_lost_takes_its_permit_once() {
    let Proxied {
        _server,
        proxy,
        semaphore,
        ..
    } = proxied("lost-take", 2).await;
    for (round, wait) in [LockOptions::new().wait(Duration::ZERO), LockOptions::new()]
        .into_iter()
        .enumerate()
    {
        proxy.cut_after(&operation("acquire"), 0);
        let taken = semaphore.try_acquire_with(wait).await;
        assert!(matches!(taken, Ok(true)), "round {round}: {taken:?}");
        cut(&proxy, "acquisition").await;
        let left = 1 - round as u64;
        assert_eq!(semaphore.available().await.unwrap(), left, "round {round}");
    }
    semaphore.release(2).await.unwrap();
    assert_eq!(semaphore.available().await.unwrap(), 2);
}

/// A release the server ran, whose reply was lost with its connection: sent again, it adds its
/// permit once (twice would let one holder too many in). Before, the caller heard
/// `Error::Redis` and could not tell whether to release again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_whose_reply_is_lost_adds_its_permit_once() {
    let Proxied {
        _server,
        proxy,
        semaphore,
        ..
    } = proxied("lost-release", 1).await;
    assert!(semaphore.try_acquire().await.unwrap());
    proxy.cut_after(&operation("release"), 0);
    let released = semaphore.release(1).await;
    assert!(released.is_ok(), "{released:?}");
    cut(&proxy, "release").await;
    assert_eq!(semaphore.available().await.unwrap(), 1);
}

/// An acquisition that took its permit unheard, and whose second send was cut before the
/// server (so the caller hears the error): the permit comes back in the background, for a
/// single attempt (which has no place in the queue to withdraw) as for a wait. Before, it
/// stayed out for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_acquisition_gives_back_what_it_took_unheard() {
    let Proxied {
        _server,
        proxy,
        client,
        semaphore,
        ..
    } = proxied("failed-take", 1).await;
    for (round, wait) in [LockOptions::new().wait(Duration::ZERO), LockOptions::new()]
        .into_iter()
        .enumerate()
    {
        proxy.cut_after(&operation("acquire"), 0);
        proxy.cut_at(&operation("acquire"), 0);
        let taken = semaphore.try_acquire_with(wait).await;
        assert!(
            matches!(&taken, Err(e) if e.is_unavailable()),
            "round {round}: {taken:?}"
        );
        assert_eq!(available_once(&semaphore, 1).await, 1, "round {round}");
    }
    assert_eq!(client.held_count(), 0);
}

/// The server's records of a client's calls (kept so a call sent again does nothing twice) go
/// once the client has their replies: after many takes and releases through one handle a
/// record or two is left; through a new handle each time, they end within three minutes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_of_calls_do_not_pile_up() {
    let server = Server::start();
    let client = support::client(&server).await;
    let name = unique_name("records");
    let semaphore = client.semaphore(&name).unwrap();
    assert!(semaphore.try_set_permits(3).await.unwrap());
    let pattern = format!("{}:t:*", semaphore.key());
    // The records' hashes, and how many records they hold in all.
    let records = || -> (Vec<String>, usize) {
        let mut conn = server.conn();
        let hashes: Vec<String> = redis::cmd("KEYS").arg(&pattern).query(&mut conn).unwrap();
        let count = hashes
            .iter()
            .map(|h| -> usize { redis::cmd("HLEN").arg(h).query(&mut conn).unwrap() });
        let count = count.sum();
        (hashes, count)
    };
    for _ in 0..100 {
        let options = LockOptions::new().permits(2);
        semaphore.acquire_with(options).await.unwrap();
        semaphore.release(2).await.unwrap();
    }
    let (_, left) = records();
    assert!((1..=2).contains(&left), "{left} records left");
    drop(semaphore);
    for _ in 0..20 {
        let fresh = client.semaphore(&name).unwrap();
        fresh.acquire().await.unwrap();
        drop(fresh);
        client.semaphore(&name).unwrap().release(1).await.unwrap();
    }
    let (hashes, left) = records();
    assert!(left <= 42, "{left} records left");
    for hash in &hashes {
        let ttl = support::pttl(&server, hash);
        assert!((1..=180_000).contains(&ttl), "{hash} ends in {ttl} ms");
    }
    let semaphore = client.semaphore(&name).unwrap();
    assert_eq!(semaphore.available().await.unwrap(), 3);
    assert!(semaphore.delete().await.unwrap());
    assert!(records().0.is_empty(), "deleted with the semaphore");
}

/// `delete` deletes whatever the key holds: a semaphore whose count was overwritten by
/// something else can still be deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_semaphore_can_be_deleted() {
    let server = Server::start();
    let client = support::client(&server).await;
    let semaphore = client.semaphore(&unique_name("damaged")).unwrap();
    set_string(&server, semaphore.key(), "not a count");
    assert!(semaphore.available().await.is_err());
    assert!(semaphore.delete().await.unwrap());
    assert!(!support::exists(&server, semaphore.key()));
    assert!(semaphore.try_set_permits(1).await.unwrap());
}
