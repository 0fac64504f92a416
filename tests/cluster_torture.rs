//! A randomized fault run on a Redis Cluster, with a resource-side fencing oracle.
//!
//! Clients and tasks take fenced locks on a few names (spread over the primaries) and write to
//! a fenced resource on a server of its own (a Lua compare-token-and-set that also remembers who
//! wrote with each token), while a fault thread draws at random: a manual failover, kill -9 of
//! a primary (restarted later as a replica), a slot migration of a lock's slot, and
//! `CLIENT PAUSE WRITE` of a primary.
//!
//! Invariants: the resource never accepts a token lower than one it accepted, nor the same
//! token from two holders; and no two guards of one lock that were not lost overlap in time.
//! The run prints its counts. It lasts `REDLEASE_TORTURE_SECS` seconds (8 by default, inside
//! `make test`; `make torture` runs it for longer).

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redlease::Client;
use support::{Cluster, Server, key_of, key_slot};

/// The resource's check: a write is accepted only with a token at least as high as the last
/// accepted one, and a token once used by one writer is refused to another (that would be two
/// holders fenced alike). Returns 1 accepted, 0 stale token, -1 token reused by another writer.
const FENCED_WRITE: &str = r#"
local token = tonumber(ARGV[1])
local last = tonumber(redis.call('HGET', KEYS[1], 'token') or '0')
if token < last then
    return 0
end
if token == last and redis.call('HGET', KEYS[1], 'writer') ~= ARGV[2] then
    return -1
end
redis.call('HSET', KEYS[1], 'token', ARGV[1], 'writer', ARGV[2])
return 1
"#;

const NAMES: usize = 4;
const CLIENTS: usize = 3;
const TASKS_PER_CLIENT: usize = 6;

#[derive(Default)]
struct Counts {
    acquisitions: AtomicU64,
    acquire_errors: AtomicU64,
    writes_accepted: AtomicU64,
    late_writes_rejected: AtomicU64,
    token_reuse: AtomicU64,
    lost_guards: AtomicU64,
    faults: AtomicU64,
}

/// One guard's time in its critical section, and whether it was told its lease was lost.
struct Interval {
    start: Instant,
    end: Instant,
    lost: bool,
}

/// A tiny xorshift: the run needs variety, not quality.
struct Dice(u64);

impl Dice {
    fn new(seed: u64) -> Dice {
        Dice(seed | 1)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(7);
    std::env::var("REDLEASE_TORTURE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(nanos)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_locks_hold_their_invariants_under_random_cluster_faults() {
    support::init_tracing();
    let secs: u64 = std::env::var("REDLEASE_TORTURE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8);
    let seed = seed();
    eprintln!("torture: {secs} s, seed {seed} (REDLEASE_TORTURE_SEED to repeat the faults)");
    let cluster = Cluster::start();
    let resource_server = Server::start();
    let resource = Client::connect(&resource_server.url()).await.unwrap();
    let names: Vec<String> = cluster
        .names_per_primary("torture", 2)
        .into_iter()
        .map(|(n, _)| n)
        .take(NAMES)
        .collect();
    let counts = Arc::new(Counts::default());
    let intervals: Arc<Vec<Mutex<Vec<Interval>>>> =
        Arc::new(names.iter().map(|_| Mutex::new(Vec::new())).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let deadline = Instant::now() + Duration::from_secs(secs);

    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let client = Client::builder_cluster(cluster.seeds())
            .watchdog_lease(Duration::from_secs(2))
            .timeout(Duration::from_secs(1))
            .build()
            .await
            .unwrap();
        clients.push(client);
    }
    let mut tasks = Vec::new();
    for (c, client) in clients.iter().enumerate() {
        for t in 0..TASKS_PER_CLIENT {
            let (client, names, resource) = (client.clone(), names.clone(), resource.clone());
            let (counts, intervals) = (counts.clone(), intervals.clone());
            let mut dice = Dice::new(seed ^ ((c * 100 + t) as u64 + 1).wrapping_mul(0x9e37));
            tasks.push(tokio::spawn(async move {
                let writer = format!("{c}-{t}");
                while Instant::now() < deadline {
                    let i = dice.below(NAMES as u64) as usize;
                    let lock = client.lock(&names[i]).unwrap().fenced(true);
                    let guard = match lock.try_lock_for(Duration::from_secs(2)).await {
                        Ok(Some(guard)) => guard,
                        Ok(None) => continue,
                        Err(_) => {
                            counts.acquire_errors.fetch_add(1, Ordering::Relaxed);
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    };
                    let start = Instant::now();
                    counts.acquisitions.fetch_add(1, Ordering::Relaxed);
                    let token = guard.fencing_token().unwrap_or(0);
                    let mut write = redis::cmd("EVAL");
                    write
                        .arg(FENCED_WRITE)
                        .arg(1)
                        .arg(format!("resource:{i}"))
                        .arg(token)
                        .arg(&writer);
                    match resource.query::<i64>(&write).await {
                        Ok(1) => counts.writes_accepted.fetch_add(1, Ordering::Relaxed),
                        Ok(0) => counts.late_writes_rejected.fetch_add(1, Ordering::Relaxed),
                        Ok(_) => counts.token_reuse.fetch_add(1, Ordering::Relaxed),
                        Err(e) => panic!("the resource server failed: {e}"),
                    };
                    tokio::time::sleep(Duration::from_millis(dice.below(5))).await;
                    let lost = guard.is_lost();
                    let end = Instant::now();
                    if lost {
                        counts.lost_guards.fetch_add(1, Ordering::Relaxed);
                    }
                    intervals[i].lock().push(Interval { start, end, lost });
                    // An unlock may fail in an outage; the lease then frees the lock.
                    let _ = guard.unlock().await;
                }
            }));
        }
    }

    let faults = {
        let (counts, stop, names) = (counts.clone(), stop.clone(), names.clone());
        std::thread::spawn(move || {
            let mut cluster = cluster;
            let mut dice = Dice::new(seed.rotate_left(17));
            let mut killed: Option<usize> = None;
            while !stop.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(700 + dice.below(800)));
                if stop.load(Ordering::Acquire) {
                    break;
                }
                if let Some(node) = killed.take() {
                    // Back as a replica of the primary that took its slots.
                    cluster.restart(node);
                }
                let primaries = cluster.primaries();
                let primary = primaries[dice.below(primaries.len() as u64) as usize];
                // A failover or a kill needs a replica to take over.
                let replica = cluster.try_replica_of(primary);
                match (dice.below(4), replica) {
                    (0, Some(_)) => {
                        cluster.failover(primary);
                    }
                    (1, Some(replica)) => {
                        cluster.nodes[primary].kill();
                        cluster.until_promoted(replica);
                        killed = Some(primary);
                    }
                    (2, _) => {
                        let name = &names[dice.below(names.len() as u64) as usize];
                        let key = key_of(name);
                        let from = cluster.primary_of(&key);
                        let to = *primaries.iter().find(|&&p| p != from).unwrap();
                        cluster.migrate_slot(key_slot(&key), to);
                    }
                    _ => cluster.nodes[primary].client_pause(300, false),
                }
                counts.faults.fetch_add(1, Ordering::Relaxed);
            }
            cluster
        })
    };

    support::join_within(tasks, Duration::from_secs(secs + 60), "a task hung").await;
    stop.store(true, Ordering::Release);
    let _cluster = faults.join().expect("the fault thread panicked");

    let mut overlaps = 0;
    for (name, list) in names.iter().zip(intervals.iter()) {
        let mut list = std::mem::take(&mut *list.lock());
        list.retain(|iv| !iv.lost);
        list.sort_by_key(|iv| iv.start);
        let mut busy_until: Option<Instant> = None;
        for iv in &list {
            if let Some(until) = busy_until.filter(|&until| iv.start < until) {
                overlaps += 1;
                eprintln!("overlap on {name}: {:?}", until - iv.start);
            }
            busy_until = Some(busy_until.map_or(iv.end, |until| until.max(iv.end)));
        }
    }
    let c = &counts;
    let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
    eprintln!(
        "torture counts: acquisitions {}, acquire errors {}, faults {}, writes accepted {}, \
         late writes rejected {}, token reuse {}, lost guards {}, overlaps {}",
        load(&c.acquisitions),
        load(&c.acquire_errors),
        load(&c.faults),
        load(&c.writes_accepted),
        load(&c.late_writes_rejected),
        load(&c.token_reuse),
        load(&c.lost_guards),
        overlaps
    );
    assert!(load(&c.acquisitions) > 0, "nothing was acquired");
    assert!(load(&c.faults) > 0, "no fault was injected");
    assert_eq!(
        load(&c.token_reuse),
        0,
        "two holders were given the same token"
    );
    assert_eq!(overlaps, 0, "guards that were not lost overlapped");
    for client in clients {
        let _ = client.shutdown().await;
    }
}
