//! The randomized fault run shared by every deployment shape (`tests/cluster_torture.rs`,
//! `tests/torture.rs`): clients and tasks take fenced locks on a few names and write to a fenced
//! resource on a server of its own (a Lua compare-token-and-set that also remembers who wrote
//! with each token), while a fault thread breaks the deployment at random.
//!
//! Invariants: the resource never accepts a token lower than one it accepted (it refuses them:
//! counted as late writes), nor the same token from two writers; and no two guards of one lock
//! that were not lost overlap in time while each was valid (`Guard::valid_until`). The run
//! lasts `REDLEASE_TORTURE_SECS` seconds (8 by default, inside `make test`; `make torture`
//! runs longer) and prints its counts; `REDLEASE_TORTURE_SEED` repeats a run's draws.

use redlease::LockOptions;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redlease::{Client, Guard};
use std::sync::Mutex;

use super::{Server, join_within};

/// The resource's check: returns 1 accepted, 0 stale token, -1 token reused by another writer.
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

const TASKS_PER_CLIENT: usize = 6;

/// Takes lock number `i` (of the run's names) within a bounded wait: `Ok(None)` when busy.
pub type Acquire = Arc<
    dyn Fn(usize) -> Pin<Box<dyn Future<Output = redlease::Result<Option<Box<dyn Guard>>>> + Send>>
        + Send
        + Sync,
>;

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

/// One guard's time in its critical section, and whether it was told its lease was lost:
/// while it lived, or only by its release (`Error::LeaseLost`: the hold was gone from the
/// server by then, or found lost after the torture's own `is_lost()` read).
pub struct Interval {
    pub start: Instant,
    pub end: Instant,
    pub lost: bool,
    pub told_at_release: bool,
}

/// The overlaps among one lock's guards (sorted by start, lost ones left out): for each guard
/// that started while others still ran, how long it overlapped them, with how many, and whether
/// the overlap is excused. It is only when the deployment may regress and every guard it
/// overlapped was told at its release and started before a fault that may lose writes ended,
/// the fault having begun before this guard started (`lossy`: each such fault's start and end).
pub fn judge(
    list: &[Interval],
    lossy: &[(Instant, Instant)],
    fences: Fences,
) -> Vec<(Duration, usize, bool)> {
    let mut found = Vec::new();
    let mut running: Vec<&Interval> = Vec::new();
    for iv in list {
        running.retain(|earlier| earlier.end > iv.start);
        if let Some(until) = running.iter().map(|earlier| earlier.end).max() {
            let excused = fences == Fences::MayRegress
                && running.iter().all(|earlier| {
                    earlier.told_at_release
                        && lossy
                            .iter()
                            .any(|&(began, ended)| began <= iv.start && ended >= earlier.start)
                });
            found.push((until - iv.start, running.len(), excused));
        }
        running.push(iv);
    }
    found
}

/// A tiny xorshift: the run needs variety, not quality.
pub struct Dice(u64);

impl Dice {
    pub fn new(seed: u64) -> Dice {
        Dice(seed | 1)
    }

    pub fn below(&mut self, n: u64) -> u64 {
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

/// Whether the deployment keeps every acknowledged write across its faults (an fsynced
/// append-only file): then no fence ever goes back, and a write the resource refuses as late
/// can only come from a guard that was lost. `MayRegress`: a failover may promote a replica
/// that missed the last writes (Redis replicates asynchronously), so a lock acquired just
/// before it is gone on the new master, and another client may take it while its first holder
/// still works; that holder is told so by its release at the latest (docs/guarantees.md). Such
/// an overlap is counted apart only when the earlier guard was the one told at its release and
/// a fault that may lose writes ([`Fault::MayLoseWrites`]) ran between the two acquisitions;
/// every other overlap fails the run.
/// What a fault may do to writes the deployment acknowledged: a kill -9 of a master whose
/// replica is promoted, or a failover the old master keeps taking writes through, may lose
/// them; a pause, a coordinated failover or a slot migration keeps them.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    KeepsWrites,
    MayLoseWrites,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Fences {
    Durable,
    MayRegress,
}

/// Runs the workload: one `Acquire` per client, `TASKS_PER_CLIENT` tasks each, over `names`;
/// `fault` is called every 0.7–1.5 s on a thread of its own with the run's dice and breaks
/// something. Asserts the invariants and returns the number of acquisitions.
pub async fn run<F>(
    shape: &str,
    fences: Fences,
    names: Vec<String>,
    clients: Vec<Acquire>,
    mut fault: F,
) -> u64
where
    F: FnMut(&mut Dice) -> Fault + Send + 'static,
{
    let secs: u64 = std::env::var("REDLEASE_TORTURE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8);
    let seed = seed();
    eprintln!("torture ({shape}): {secs} s, seed {seed} (REDLEASE_TORTURE_SEED repeats it)");
    let resource_server = Server::start();
    let resource = Client::connect(&resource_server.url()).await.unwrap();
    let counts = Arc::new(Counts::default());
    let intervals: Arc<Vec<Mutex<Vec<Interval>>>> =
        Arc::new(names.iter().map(|_| Mutex::new(Vec::new())).collect());
    let deadline = Instant::now() + Duration::from_secs(secs);

    let mut tasks = Vec::new();
    for (c, acquire) in clients.iter().enumerate() {
        for t in 0..TASKS_PER_CLIENT {
            let (acquire, resource) = (acquire.clone(), resource.clone());
            let (counts, intervals, n) = (counts.clone(), intervals.clone(), names.len());
            let mut dice = Dice::new(seed ^ ((c * 100 + t) as u64 + 1).wrapping_mul(0x9e37));
            tasks.push(tokio::spawn(async move {
                let writer = format!("{c}-{t}");
                while Instant::now() < deadline {
                    let i = dice.below(n as u64) as usize;
                    let guard = match acquire(i).await {
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
                    // The guard vouches for its hold until `valid_until` at most: a task
                    // descheduled past it (a loaded machine starves its renewals too) held
                    // nothing from then on, whatever the clock says when it runs again.
                    let valid_until = guard.valid_until();
                    let lost = guard.is_lost();
                    let end = Instant::now().min(valid_until);
                    if lost {
                        counts.lost_guards.fetch_add(1, Ordering::Relaxed);
                    }
                    // An unlock may fail in an outage; the lease then frees the lock.
                    let unlocked = guard.unlock().await;
                    let told_at_release = !lost && unlocked.is_err_and(|e| e.is_lease_lost());
                    intervals[i].lock().unwrap().push(Interval {
                        start,
                        end,
                        lost,
                        told_at_release,
                    });
                }
            }));
        }
    }

    let stop = Arc::new(AtomicBool::new(false));
    // When each fault that may lose acknowledged writes ran (from its start to its end).
    let lossy: Arc<Mutex<Vec<(Instant, Instant)>>> = Arc::default();
    let faults = {
        let (counts, stop, lossy) = (counts.clone(), stop.clone(), lossy.clone());
        std::thread::spawn(move || {
            let mut dice = Dice::new(seed.rotate_left(17));
            while !stop.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(700 + dice.below(800)));
                if stop.load(Ordering::Acquire) {
                    break;
                }
                let began = Instant::now();
                if fault(&mut dice) == Fault::MayLoseWrites {
                    lossy.lock().unwrap().push((began, Instant::now()));
                }
                counts.faults.fetch_add(1, Ordering::Relaxed);
            }
            // The deployment (owned by `fault`) stops here, after the tasks.
            drop(fault);
        })
    };

    join_within(tasks, Duration::from_secs(secs + 60), "a task hung").await;
    stop.store(true, Ordering::Release);
    faults.join().expect("the fault thread panicked");

    let (mut overlaps, mut told_at_release) = (0, 0);
    for (name, list) in names.iter().zip(intervals.iter()) {
        let mut list = std::mem::take(&mut *list.lock().unwrap());
        list.retain(|iv| !iv.lost);
        list.sort_by_key(|iv| iv.start);
        let lossy = lossy.lock().unwrap();
        for (overlap, with, excused) in judge(&list, &lossy, fences) {
            eprintln!(
                "overlap on {name}: {overlap:?} with {with} earlier guard(s){}",
                if excused {
                    " (each earlier guard, told at its release, lost its hold in a failover)"
                } else {
                    ""
                }
            );
            match excused {
                true => told_at_release += 1,
                false => overlaps += 1,
            }
        }
    }
    // Each loss the server reported is read again at once (`redlease::testing::false_losses`):
    // the count is final once none of those reads is in flight (each is bounded).
    let (false_losses, audited) = audit().await;
    let c = &counts;
    let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
    eprintln!(
        "torture counts ({shape}): acquisitions {}, acquire errors {}, faults {}, writes accepted {}, \
         late writes rejected {}, token reuse {}, lost guards {}, overlaps {}, \
         overlaps excused by a failover that lost writes {told_at_release}, \
         server-reported losses {audited} of which false {false_losses}",
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
    assert_eq!(
        false_losses, 0,
        "a hold was marked lost while still on the server"
    );
    if fences == Fences::Durable && load(&c.lost_guards) == 0 {
        assert_eq!(
            load(&c.late_writes_rejected),
            0,
            "a fence went back although every write was kept"
        );
    }
    load(&c.acquisitions)
}

/// An [`Acquire`] from any async function returning a guard kind.
pub fn acquire<F, Fut, G>(f: F) -> Acquire
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = redlease::Result<Option<G>>> + Send + 'static,
    G: Guard + 'static,
{
    Arc::new(move |i| {
        let fut = f(i);
        Box::pin(async move { Ok(fut.await?.map(|g| Box::new(g) as Box<dyn Guard>)) })
    })
}

/// The acquirer most runs use: `client`'s fenced lock on `names[i]`, waited for up to 2 s.
pub fn fenced_lock(client: &Client, names: &[String]) -> Acquire {
    let (client, names) = (client.clone(), names.to_vec());
    acquire(move |i| {
        let lock = client.lock(&names[i]).map(|l| l.fenced(true));
        async move {
            lock?
                .try_lock_with(LockOptions::new().wait(Duration::from_secs(2)))
                .await
        }
    })
}

/// The process's false losses and the server-reported losses read again (the `testing`
/// feature's audit; without it, none). The CLI's tests share this file and have no such
/// feature.
#[allow(unexpected_cfgs)]
async fn audit() -> (u64, u64) {
    #[cfg(feature = "testing")]
    {
        let settled = Instant::now() + Duration::from_secs(5);
        while redlease::testing::audits_in_flight() > 0 && Instant::now() < settled {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        (
            redlease::testing::false_losses(),
            redlease::testing::audited_losses(),
        )
    }
    #[cfg(not(feature = "testing"))]
    (0, 0)
}
