//! Lock-delay: after a lease that ran out without a release, the lock stays refused for the
//! delay (decided on the server's clock); a release or a force-unlock frees it at once; waiters
//! sleep until the delay ends instead of polling; a watchdog-kept hold keeps its marker alive.

mod support;

use redlease::LockOptions;
use std::time::{Duration, Instant};

use redlease::{Client, Error, Lock};
use support::{Server, clients, command_calls, exists, key_of, pttl, unique_name};

fn delayed(client: &Client, name: &str, delay: Duration) -> Lock {
    client.lock(name).expect("a valid name").lock_delay(delay)
}

fn marker(name: &str) -> String {
    format!("{}:delay", key_of(name))
}

#[tokio::test]
async fn a_lease_that_ran_out_keeps_the_lock_refused_for_the_delay() {
    let server = Server::start();
    let [a, b] = clients(&server).await;
    let name = unique_name("delay-lapsed");
    let (lease, delay) = (Duration::from_millis(300), Duration::from_millis(700));
    let taken = Instant::now();
    let stale = delayed(&a, &name, delay)
        .lock_with(LockOptions::new().lease(lease))
        .await
        .unwrap();
    let calls_before = command_calls(&server, "evalsha");
    let next = delayed(&b, &name, delay)
        .try_lock_with(LockOptions::new().wait(Duration::from_secs(5)))
        .await
        .unwrap()
        .expect("granted once the delay ended");
    let waited = taken.elapsed();
    assert!(
        waited >= lease + delay && waited < lease + delay + Duration::from_millis(500),
        "granted {waited:?} after the grant of a {lease:?} lease with a {delay:?} delay"
    );
    // One refusal by the holder, one by the delay, the grant (and a race-closing attempt
    // after subscribing): sleeping until each deadline, not polling.
    let attempts = command_calls(&server, "evalsha") - calls_before;
    assert!(attempts <= 5, "{attempts} script calls while waiting");
    assert!(stale.is_lost());
    assert!(matches!(stale.unlock().await, Err(Error::LeaseLost { .. })));
    // The late release found nothing of its own, so the next holder's marker is kept.
    assert!(exists(&server, &marker(&name)));
    next.unlock().await.unwrap();
    assert!(
        !exists(&server, &marker(&name)),
        "a release ends the marker"
    );
}

#[tokio::test]
async fn a_release_frees_the_lock_at_once() {
    let server = Server::start();
    let [a, b] = clients(&server).await;
    let name = unique_name("delay-released");
    let delay = Duration::from_secs(5);
    let held = delayed(&a, &name, delay).lock().await.unwrap();
    let ttl = pttl(&server, &marker(&name));
    let lease = a.config().watchdog_lease;
    assert!(
        ttl > (lease + delay - Duration::from_secs(1)).as_millis() as i64,
        "the marker lives for the lease plus the delay: {ttl} ms"
    );
    let waiter = {
        let lock = delayed(&b, &name, delay);
        tokio::spawn(async move {
            lock.try_lock_with(LockOptions::new().wait(Duration::from_secs(3)))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let released = Instant::now();
    held.unlock().await.unwrap();
    let next = waiter.await.unwrap().unwrap().expect("granted at once");
    assert!(
        released.elapsed() < Duration::from_millis(500),
        "{:?} after the release",
        released.elapsed()
    );
    next.unlock().await.unwrap();
    assert!(!exists(&server, &marker(&name)));
}

#[tokio::test]
async fn a_force_unlock_ends_the_delay() {
    let server = Server::start();
    let [a, b] = clients(&server).await;
    let name = unique_name("delay-forced");
    let delay = Duration::from_secs(30);
    let lapsed = delayed(&a, &name, delay)
        .lock_with(LockOptions::new().lease(Duration::from_millis(100)))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let lock = delayed(&b, &name, delay);
    assert!(
        lock.try_lock().await.unwrap().is_none(),
        "refused in the delay"
    );
    assert!(
        !lock.force_unlock().await.unwrap(),
        "nobody held the lock itself"
    );
    let taken = lock
        .try_lock()
        .await
        .unwrap()
        .expect("free after a force-unlock");
    taken.unlock().await.unwrap();
    drop(lapsed);
}

#[tokio::test]
async fn the_watchdog_keeps_the_marker_alive_with_the_lease() {
    let server = Server::start();
    let lease = Duration::from_millis(600);
    let client = Client::builder(server.url())
        .watchdog_lease(lease)
        .build()
        .await
        .unwrap();
    let name = unique_name("delay-renewed");
    let delay = Duration::from_millis(400);
    let held = delayed(&client, &name, delay).lock().await.unwrap();
    // Past both the lease and the lease plus the delay: only renewals explain a live marker.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!held.is_lost());
    let ttl = pttl(&server, &marker(&name));
    assert!(
        ttl > 0 && ttl <= (lease + delay).as_millis() as i64,
        "marker renewed to the lease plus the delay: {ttl} ms"
    );
    held.unlock().await.unwrap();
    assert!(!exists(&server, &marker(&name)));
}

#[tokio::test]
async fn plain_locks_write_no_marker_and_an_absurd_delay_is_refused() {
    let server = Server::start();
    let [a] = clients(&server).await;
    let name = unique_name("delay-none");
    let plain = a.lock(&name).unwrap().lock().await.unwrap();
    assert!(!exists(&server, &marker(&name)));
    plain.unlock().await.unwrap();
    let off = delayed(&a, &name, Duration::ZERO).lock().await.unwrap();
    assert!(!exists(&server, &marker(&name)), "a zero delay is none");
    off.unlock().await.unwrap();
    let absurd = delayed(&a, &name, Duration::from_secs(400 * 24 * 3600));
    assert!(matches!(
        absurd.try_lock().await,
        Err(Error::InvalidDuration { .. })
    ));
    assert!(!exists(&server, &key_of(&name)), "nothing written");
}

/// A RedLock or a MultiLock with an absurd lock-delay on one of its locks is refused with the
/// typed error before anything is sent (a RedLock counted it as a failed node: acquired on the
/// others, or `Quorum` after retrying for a lease; a MultiLock took its other members first).
#[tokio::test]
async fn an_absurd_delay_on_a_member_is_refused_before_anything_is_sent() {
    let servers = support::start_many(3);
    let name = unique_name("delay-member");
    let absurd = Duration::from_secs(400 * 24 * 3600);
    let nodes = support::node_locks(&servers, &name).await;
    let mut nodes: Vec<Lock> = nodes.into_iter().map(|l| l.fenced(true)).collect();
    nodes[2] = nodes[2].clone().lock_delay(absurd);
    let redlock = redlease::RedLock::new(nodes.clone()).unwrap();
    let refused = redlock.try_lock().await;
    assert!(
        matches!(refused, Err(Error::InvalidDuration { .. })),
        "{:?}",
        refused.map(|g| g.is_some())
    );
    let multi = redlease::MultiLock::new(vec![nodes[0].clone(), nodes[2].clone()]).unwrap();
    let refused = multi.try_lock().await;
    assert!(
        matches!(refused, Err(Error::InvalidDuration { .. })),
        "{:?}",
        refused.map(|g| g.is_some())
    );
    for server in &servers {
        assert!(!exists(server, &key_of(&name)), "a lock was taken");
        let fence = format!("{}:fence", key_of(&name));
        assert!(!exists(server, &fence), "a fencing token was drawn");
    }
}

/// The kinds that share a lock's keys, each acquiring the name once with a wait and no
/// lock-delay of its own; answers how long the acquisition took, having released it.
async fn acquire_without_delay(kind: &str, client: &Client, name: &str) -> Duration {
    let wait = LockOptions::new().wait(Duration::from_secs(5));
    let started = Instant::now();
    match kind {
        "lock" => {
            let held = client.lock(name).unwrap().try_lock_with(wait).await;
            let held = held.unwrap().expect("granted within the wait");
            let took = started.elapsed();
            held.unlock().await.unwrap();
            took
        }
        "fair lock" => {
            let held = client.fair_lock(name).unwrap().try_lock_with(wait).await;
            let held = held.unwrap().expect("granted within the wait");
            let took = started.elapsed();
            held.unlock().await.unwrap();
            took
        }
        "multilock member" => {
            let other = client.lock(&format!("{name}-other")).unwrap();
            let multi = redlease::MultiLock::new(vec![client.lock(name).unwrap(), other]).unwrap();
            let held = multi.try_lock_with(wait).await.unwrap().expect("granted");
            let took = started.elapsed();
            held.unlock().await.unwrap();
            took
        }
        "redlock member" => {
            let red = redlease::RedLock::new(vec![client.lock(name).unwrap()]).unwrap();
            let held = red.try_lock_with(wait).await.unwrap().expect("granted");
            let took = started.elapsed();
            held.unlock().await.unwrap();
            took
        }
        "election" => {
            let election = client.election(name).unwrap();
            let leads = election
                .try_campaign_for("next", Duration::from_secs(5))
                .await;
            let leads = leads.unwrap().expect("elected within the wait");
            let took = started.elapsed();
            leads.resign().await.unwrap();
            took
        }
        other => unreachable!("no kind {other}"),
    }
}

const KINDS: [&str; 5] = [
    "lock",
    "fair lock",
    "multilock member",
    "redlock member",
    "election",
];

/// A holder with a lock-delay whose lease ran out binds every kind that acquires the name next,
/// whatever that acquirer asked for itself (none here), and a normal release frees it at once.
async fn every_acquirer_waits_out_a_lapsed_holders_delay(a: &Client, b: &Client, tag: &str) {
    let (lease, delay) = (Duration::from_millis(300), Duration::from_millis(900));
    for kind in KINDS {
        let name = unique_name(&format!("delay-binds-{tag}-{}", kind.replace(' ', "-")));
        let taken = Instant::now();
        let stale = delayed(a, &name, delay)
            .lock_with(LockOptions::new().lease(lease))
            .await
            .unwrap();
        let refused = b.lock(&name).unwrap();
        // A single attempt after the lease, inside the delay: refused.
        tokio::time::sleep(lease + Duration::from_millis(100)).await;
        assert!(
            refused.try_lock().await.unwrap().is_none(),
            "{kind}: a single attempt is refused in the delay"
        );
        acquire_without_delay(kind, b, &name).await;
        let waited = taken.elapsed();
        assert!(
            waited >= lease + delay && waited < lease + delay + Duration::from_millis(700),
            "{kind}: acquired {waited:?} after a {lease:?} lease with a {delay:?} delay"
        );
        drop(stale);

        // A release ends the marker: the next acquirer, again without a delay, is not held up.
        let held = delayed(a, &name, Duration::from_secs(30))
            .lock()
            .await
            .unwrap();
        held.unlock().await.unwrap();
        let took = acquire_without_delay(kind, b, &name).await;
        assert!(
            took < Duration::from_millis(500),
            "{kind}: {took:?} after a released hold with a delay"
        );
    }
}

#[tokio::test]
async fn a_lapsed_holders_delay_binds_every_kind_whatever_its_own_setting() {
    let server = Server::start();
    let [a, b] = clients(&server).await;
    every_acquirer_waits_out_a_lapsed_holders_delay(&a, &b, "one").await;
}

#[tokio::test]
async fn a_lapsed_holders_delay_binds_every_kind_on_a_cluster() {
    let cluster = support::Cluster::start();
    let connect = || async {
        Client::builder_cluster(cluster.seeds())
            .build()
            .await
            .expect("connecting to the cluster")
    };
    let (a, b) = (connect().await, connect().await);
    every_acquirer_waits_out_a_lapsed_holders_delay(&a, &b, "cluster").await;
}

/// Many owners of one client attempting at once are coalesced into one batch call: each entry
/// honours the marker too.
#[tokio::test]
async fn coalesced_attempts_are_refused_in_the_delay() {
    let server = Server::start();
    let [a, b] = clients(&server).await;
    let name = unique_name("delay-batch");
    let stale = delayed(&a, &name, Duration::from_secs(30))
        .lock_with(LockOptions::new().lease(Duration::from_millis(100)))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(250)).await;
    let attempts = (0..16).map(|_| {
        let lock = b.lock(&name).unwrap().with_owner(redlease::Owner::new());
        async move { lock.try_lock().await }
    });
    for taken in futures_util::future::join_all(attempts).await {
        assert!(taken.unwrap().is_none(), "refused in the delay");
    }
    assert!(!exists(&server, &key_of(&name)), "nobody took the lock");
    drop(stale);
}

/// A full server under `noeviction` refuses a script's first write that needs memory. A
/// renewal needs none (it extends the lock and its marker), so the holder of a lock with a
/// lock-delay is renewed there rather than told a false loss, and its release frees the lock.
#[tokio::test]
async fn a_renewal_on_a_full_server_keeps_the_hold_and_its_marker() {
    let server = Server::start();
    let [client] = clients(&server).await;
    let name = unique_name("delay-full");
    let delay = Duration::from_millis(400);
    let held = delayed(&client, &name, delay).lock().await.unwrap();
    let mut conn = server.conn();
    let set = |conn: &mut redis::Connection, name: &str, value: &str| {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg(name)
            .arg(value)
            .query(conn)
            .unwrap();
    };
    // Short, so only a renewal explains a marker that lives the lease plus the delay.
    let _: () = redis::cmd("PEXPIRE")
        .arg(marker(&name))
        .arg(1_000)
        .query(&mut conn)
        .unwrap();
    set(&mut conn, "maxmemory-policy", "noeviction");
    // Below what the server uses already: every write that needs memory is refused.
    set(&mut conn, "maxmemory", "1");
    let refused: redis::RedisResult<()> = redis::cmd("SET").arg("probe").arg("1").query(&mut conn);
    let renewed = client.renew_now().await;
    set(&mut conn, "maxmemory", "0");
    assert!(
        refused.is_err_and(|e| e.to_string().contains("OOM")),
        "the server was not full"
    );
    let renewed = renewed.unwrap();
    assert_eq!((renewed.locks, renewed.lost), (1, 0), "{renewed:?}");
    assert!(!held.is_lost());
    let ttl = pttl(&server, &marker(&name));
    assert!(
        ttl > 30_000 - 1_000,
        "marker renewed to the lease plus the delay: {ttl} ms"
    );
    held.unlock().await.unwrap();
    assert!(!exists(&server, &key_of(&name)));
}
