//! The semaphores' waiter queue on the server (`lua/queue.lua`, `lua/queue_permits.lua`), across
//! processes: a release grants its permits to the first queued waiters that fit in the same call
//! and tells only them, so processes take turns without a herd of attempts; a waiter for many
//! permits is not passed by takers of one; a grant to a waiter that died passes on after the claim
//! lease. `Semaphore` and `PermitSemaphore` alike.
//!
//! The multi-process tests re-run this test binary as children that execute only the
//! `#[ignore]`d `semaphore_worker` test, configured through `REDLEASE_SW*` variables.

mod support;

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use redlease::{Client, LockOptions};
use support::workers::{self, all_succeed, signal};
use support::{Server, command_calls, exists, unique_name};

const CLAIM: Duration = Duration::from_millis(800);

fn spawn_worker(envs: &[(&str, String)]) -> Child {
    workers::spawn_worker("semaphore_worker", envs, Stdio::piped())
}

/// Which semaphore a test runs on.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Semaphore,
    Permits,
}

impl Kind {
    fn key_of(self, name: &str) -> String {
        match self {
            Kind::Semaphore => format!("redlease:{{{name}}}:semaphore"),
            Kind::Permits => format!("redlease:{{{name}}}:permits"),
        }
    }

    fn env(self) -> String {
        format!("{self:?}")
    }

    fn from_env(value: &str) -> Kind {
        match value {
            "Semaphore" => Kind::Semaphore,
            "Permits" => Kind::Permits,
            other => panic!("unknown kind {other}"),
        }
    }
}

/// A semaphore of either kind, as the tests use it: a taken permit is given back by `release`.
enum Either {
    Semaphore(redlease::Semaphore),
    Permits(redlease::PermitSemaphore),
}

enum Taken {
    Count(redlease::Semaphore),
    Permit(redlease::Permit),
}

impl Either {
    fn of(kind: Kind, client: &Client, name: &str) -> Either {
        match kind {
            Kind::Semaphore => Either::Semaphore(client.semaphore(name).unwrap()),
            Kind::Permits => Either::Permits(client.permit_semaphore(name).unwrap()),
        }
    }

    async fn set(&self, permits: u32) {
        match self {
            Either::Semaphore(s) => s.set_permits(permits).await.unwrap(),
            Either::Permits(s) => s.set_permits(permits).await.unwrap(),
        }
    }

    async fn available(&self) -> u64 {
        match self {
            Either::Semaphore(s) => s.available().await.unwrap(),
            Either::Permits(s) => s.available().await.unwrap(),
        }
    }

    async fn acquire(&self) -> Taken {
        match self {
            Either::Semaphore(s) => {
                s.acquire().await.unwrap();
                Taken::Count(s.clone())
            }
            Either::Permits(s) => Taken::Permit(s.acquire().await.unwrap()),
        }
    }
}

impl Taken {
    async fn release(self) {
        match self {
            Taken::Count(s) => s.release(1).await.unwrap(),
            Taken::Permit(p) => p.release().await.unwrap(),
        }
    }
}

/// The waiters queued on semaphore `name`, first first.
fn queued(server: &Server, name: &str) -> Vec<String> {
    queued_on(server, Kind::Semaphore, name)
}

/// Waits (at most `within`) until `n` waiters are queued on semaphore `name`; whether they were.
async fn until_queued(server: &Server, kind: Kind, name: &str, n: usize, within: Duration) -> bool {
    support::eventually_async(within, || async {
        queued_on(server, kind, name).len() == n
    })
    .await
}

fn queued_on(server: &Server, kind: Kind, name: &str) -> Vec<String> {
    redis::cmd("LRANGE")
        .arg(format!("{}:q", kind.key_of(name)))
        .arg(0)
        .arg(-1)
        .query(&mut server.conn())
        .unwrap()
}

/// Whether any of the queue's keys is left.
fn queue_left(server: &Server, name: &str) -> bool {
    queue_left_on(server, Kind::Semaphore, name)
}

fn queue_left_on(server: &Server, kind: Kind, name: &str) -> bool {
    let key = kind.key_of(name);
    ["q", "qd", "g"]
        .iter()
        .any(|suffix| exists(server, &format!("{key}:{suffix}")))
}

async fn claiming_client(server: &Server) -> Client {
    Client::builder(server.url())
        .claim_lease(CLAIM)
        .build()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_processes_share_three_permits_without_a_herd() {
    processes_share_permits_without_a_herd(Kind::Semaphore).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_processes_share_three_expiring_permits_without_a_herd() {
    processes_share_permits_without_a_herd(Kind::Permits).await;
}

async fn processes_share_permits_without_a_herd(kind: Kind) {
    let server = Server::start();
    let name = unique_name("sem-turns");
    let (processes, rounds, permits) = (8, 100, 3);
    let setter = claiming_client(&server).await;
    let semaphore = Either::of(kind, &setter, &name);
    semaphore.set(permits).await;
    let calls_before = command_calls(&server, "evalsha");
    let children: Vec<Child> = (0..processes)
        .map(|_| {
            spawn_worker(&[
                ("REDLEASE_SW", "take".into()),
                ("REDLEASE_SW_KIND", kind.env()),
                ("REDLEASE_SW_URL", server.url()),
                ("REDLEASE_SW_NAME", name.clone()),
                ("REDLEASE_SW_ROUNDS", rounds.to_string()),
                ("REDLEASE_SW_PERMITS", permits.to_string()),
            ])
        })
        .collect();
    all_succeed(children).await;
    let total = processes * rounds;
    let calls = command_calls(&server, "evalsha") - calls_before;
    let per = calls as f64 / total as f64;
    eprintln!("{kind:?}: {processes} processes x {rounds}: {per:.2} script calls per acquisition");
    // The release, the waiter's queueing attempt, its claim: about 3 when every acquisition
    // waits, fewer when some find a permit free. A release that woke every waiting process to
    // ask cost about one call per waiting process (5 here).
    assert!(per < 3.2, "{per:.2} script calls per acquisition");
    assert_eq!(semaphore.available().await, u64::from(permits));
    assert!(queued_on(&server, kind, &name).is_empty());
    assert!(
        !queue_left_on(&server, kind, &name),
        "queue keys left behind"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_for_many_permits_is_not_passed_by_takers_of_one() {
    let server = Server::start();
    let name = unique_name("sem-fifo");
    let [owner, big, small, newcomer] = support::clients(&server).await;
    let semaphore = owner.semaphore(&name).unwrap();
    semaphore.set_permits(0).await.unwrap();
    let big_wait = {
        let semaphore = big.semaphore(&name).unwrap();
        tokio::spawn(async move {
            semaphore
                .acquire_with(LockOptions::new().permits(2))
                .await
                .unwrap();
            Instant::now()
        })
    };
    let first = until_queued(&server, Kind::Semaphore, &name, 1, Duration::from_secs(5)).await;
    assert!(first, "the waiter for 2 never queued");
    let small_wait = {
        let semaphore = small.semaphore(&name).unwrap();
        tokio::spawn(async move {
            semaphore.acquire().await.unwrap();
            Instant::now()
        })
    };
    let second = until_queued(&server, Kind::Semaphore, &name, 2, Duration::from_secs(5)).await;
    assert!(second, "the waiter for 1 never queued");

    // One permit: the head needs two, and nobody behind it passes it.
    semaphore.release(1).await.unwrap();
    let newcomer = newcomer.semaphore(&name).unwrap();
    assert!(
        !newcomer.try_acquire().await.unwrap(),
        "a single attempt passed the queue"
    );
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(
        !small_wait.is_finished(),
        "the waiter for 1 passed the waiter for 2"
    );
    assert!(
        !big_wait.is_finished(),
        "the waiter for 2 got in with 1 permit"
    );
    assert_eq!(semaphore.available().await.unwrap(), 1);

    // The second permit: the head gets both at once, the next waits on.
    let released = Instant::now();
    semaphore.release(1).await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(5), big_wait)
        .await
        .expect("the waiter for 2 was not granted")
        .unwrap();
    assert!(
        got - released < Duration::from_millis(300),
        "granted {:?} after the release",
        got - released
    );
    assert!(!small_wait.is_finished());
    semaphore.release(1).await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), small_wait)
        .await
        .expect("the waiter for 1 was not granted")
        .unwrap();
    assert_eq!(semaphore.available().await.unwrap(), 0);
    assert!(!queue_left(&server, &name), "queue keys left behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_that_stops_waiting_lets_the_waiters_behind_it_in_at_once() {
    let server = Server::start();
    let name = unique_name("sem-head-leaves");
    let [owner, big, small] = support::clients(&server).await;
    let semaphore = owner.semaphore(&name).unwrap();
    semaphore.set_permits(1).await.unwrap();
    // The head wants 2 of the 1 free, and gives up after 400 ms.
    let big_wait = {
        let semaphore = big.semaphore(&name).unwrap();
        tokio::spawn(async move {
            let options = LockOptions::new()
                .permits(2)
                .wait(Duration::from_millis(400));
            let taken = semaphore.try_acquire_with(options).await.unwrap();
            (taken, Instant::now())
        })
    };
    let first = until_queued(&server, Kind::Semaphore, &name, 1, Duration::from_secs(5)).await;
    assert!(first, "the waiter for 2 never queued");
    let small_wait = {
        let semaphore = small.semaphore(&name).unwrap();
        tokio::spawn(async move {
            semaphore.acquire().await.unwrap();
            Instant::now()
        })
    };
    let (taken, gave_up) = big_wait.await.unwrap();
    assert!(!taken, "the waiter for 2 got in with 1 permit");
    let got = tokio::time::timeout(Duration::from_secs(5), small_wait)
        .await
        .expect("the waiter behind was never granted")
        .unwrap();
    // Its withdrawal grants the free permit to the next waiter in the same call, rather than
    // leaving it to that waiter's next look (up to a second later).
    let after = got.saturating_duration_since(gave_up);
    assert!(
        after < Duration::from_millis(300),
        "granted {after:?} after the head left"
    );
    assert!(!queue_left(&server, &name), "queue keys left behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_to_a_frozen_then_killed_waiter_passes_on_after_the_claim_lease() {
    a_grant_to_a_dead_waiter_passes_on(Kind::Semaphore).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_granted_to_a_frozen_then_killed_waiter_passes_on_after_the_claim_lease() {
    a_grant_to_a_dead_waiter_passes_on(Kind::Permits).await;
}

async fn a_grant_to_a_dead_waiter_passes_on(kind: Kind) {
    let server = Server::start();
    let name = unique_name("sem-dead");
    let owner = claiming_client(&server).await;
    let semaphore = Either::of(kind, &owner, &name);
    semaphore.set(1).await;
    let held = semaphore.acquire().await;
    // The doomed waiter queues first.
    let mut doomed = spawn_worker(&[
        ("REDLEASE_SW", "wait".into()),
        ("REDLEASE_SW_KIND", kind.env()),
        ("REDLEASE_SW_URL", server.url()),
        ("REDLEASE_SW_NAME", name.clone()),
    ]);
    let first = until_queued(&server, kind, &name, 1, Duration::from_secs(10)).await;
    assert!(first, "the worker never queued");
    let next = {
        let semaphore = Either::of(kind, &owner, &name);
        tokio::spawn(async move {
            let taken = semaphore.acquire().await;
            let at = Instant::now();
            taken.release().await;
            at
        })
    };
    let both = until_queued(&server, kind, &name, 2, Duration::from_secs(10)).await;
    assert!(both, "the second waiter never queued");
    // Freeze the first waiter and release: the permit goes to the frozen one, which cannot
    // claim it.
    signal(&doomed, "STOP");
    let released = Instant::now();
    held.release().await;
    signal(&doomed, "KILL");
    let _ = doomed.wait();
    let granted = tokio::time::timeout(Duration::from_secs(10), next)
        .await
        .expect("the next waiter was never granted")
        .unwrap();
    let after = granted - released;
    eprintln!("{kind:?}: granted {after:?} after the release to a dead waiter");
    assert!(
        after >= CLAIM - Duration::from_millis(50) && after <= CLAIM + Duration::from_secs(1),
        "granted {after:?} after the release; claim lease {CLAIM:?}"
    );
    assert_eq!(semaphore.available().await, 1);
    // The dead waiter's place and grant are gone.
    assert!(
        !queue_left_on(&server, kind, &name),
        "queue keys left behind"
    );
}

/// Within one client a release hands the permit to the waiting task in its reply; the server
/// keeps a record of it for a waiter that missed the reply, and that client's next release
/// deletes it: nothing is left once the permits are back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_over_leaves_no_record_after_the_next_release() {
    let server = Server::start();
    let name = unique_name("sem-handed");
    let client = claiming_client(&server).await;
    let semaphore = client.semaphore(&name).unwrap();
    semaphore.set_permits(1).await.unwrap();
    semaphore.acquire().await.unwrap();
    let waiting = {
        let semaphore = semaphore.clone();
        tokio::spawn(async move { semaphore.acquire().await.unwrap() })
    };
    assert!(until_queued(&server, Kind::Semaphore, &name, 1, Duration::from_secs(5)).await);
    // It listens by now (the attempt it makes once subscribed is over).
    tokio::time::sleep(Duration::from_millis(200)).await;
    semaphore.release(1).await.unwrap();
    tokio::time::timeout(Duration::from_secs(2), waiting)
        .await
        .expect("the waiter was handed the permit")
        .unwrap();
    let key = Kind::Semaphore.key_of(&name);
    assert!(
        exists(&server, &format!("{key}:g")),
        "no record of the hand-over"
    );
    semaphore.release(1).await.unwrap();
    assert!(
        !queue_left(&server, &name),
        "the record outlived the next release"
    );
    assert_eq!(semaphore.available().await.unwrap(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_waits_leave_no_place_and_no_permit() {
    let server = Server::start();
    let name = unique_name("sem-cancels");
    let [owner, waiter] = support::clients(&server).await;
    let semaphore = owner.semaphore(&name).unwrap();
    semaphore.set_permits(2).await.unwrap();
    let waiting = waiter.semaphore(&name).unwrap();
    // Permits come and go while waits are cut at every point: in the first attempt, in the
    // queue, while a grant is on its way.
    let churn = {
        let semaphore = owner.semaphore(&name).unwrap();
        tokio::spawn(async move {
            for _ in 0..150 {
                semaphore.acquire().await.unwrap();
                tokio::time::sleep(Duration::from_millis(2)).await;
                semaphore.release(1).await.unwrap();
            }
        })
    };
    let mut taken = 0;
    for i in 0..300u64 {
        let cut = Duration::from_micros(i * 37 % 3_000);
        let options = LockOptions::new().permits(1 + (i % 2) as u32);
        if let Ok(Ok(())) = tokio::time::timeout(cut, waiting.acquire_with(options)).await {
            taken += 1;
            waiting.release(1 + (i % 2) as u32).await.unwrap();
        }
    }
    tokio::time::timeout(Duration::from_secs(30), churn)
        .await
        .expect("the churn starved")
        .unwrap();
    let settled = support::eventually_async(Duration::from_secs(5), || async {
        semaphore.available().await.unwrap() == 2 && !queue_left(&server, &name)
    })
    .await;
    assert!(
        settled,
        "{} of 2 permits, queue {:?} ({taken} acquisitions completed)",
        semaphore.available().await.unwrap(),
        queued(&server, &name)
    );
    // And the semaphore still works for everybody.
    assert!(semaphore.try_acquire().await.unwrap());
}

/// A worker process (run by the tests above, never on its own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn semaphore_worker() {
    let Ok(mode) = std::env::var("REDLEASE_SW") else {
        return;
    };
    let var = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("worker needs {k}"));
    let client = Client::builder(var("REDLEASE_SW_URL"))
        .claim_lease(CLAIM)
        .build()
        .await
        .unwrap();
    let kind = Kind::from_env(&var("REDLEASE_SW_KIND"));
    let name = var("REDLEASE_SW_NAME");
    let semaphore = Either::of(kind, &client, &name);
    let inside = format!("{}:inside", kind.key_of(&name));
    match mode.as_str() {
        "take" => {
            let rounds: usize = var("REDLEASE_SW_ROUNDS").parse().unwrap();
            let permits: i64 = var("REDLEASE_SW_PERMITS").parse().unwrap();
            for _ in 0..rounds {
                let taken = semaphore.acquire().await;
                let now: i64 = client.query(redis::cmd("INCR").arg(&inside)).await.unwrap();
                assert!(now <= permits, "{now} holders with {permits} permits");
                tokio::task::yield_now().await;
                let _: i64 = client.query(redis::cmd("DECR").arg(&inside)).await.unwrap();
                taken.release().await;
            }
        }
        "wait" => {
            // Killed by the parent while it waits; the bound only ends an orphan.
            let _ = tokio::time::timeout(Duration::from_secs(60), semaphore.acquire()).await;
        }
        other => panic!("unknown worker mode {other}"),
    }
    client.shutdown().await.unwrap();
}

/// `lua/semaphore.lua` as `src/family/semaphore.rs` sends it.
const SEMAPHORE_SCRIPT: &str = concat!(
    include_str!("../lua/queue.lua"),
    include_str!("../lua/queue_permits.lua"),
    include_str!("../lua/semaphore.lua")
);

/// An entry at the queue's head that is live but not a waiter's (a damaged write) is dropped
/// like a dead one, even when it names the caller: the caller's acquisition then asks for what
/// it wants against what is free, and is refused, instead of taking 3 permits of 1.
#[test]
fn a_damaged_entry_of_the_caller_does_not_let_it_take_more_than_is_free() {
    let server = Server::start();
    let mut conn = server.conn();
    let key = format!("redlease:{{{}}}:semaphore", unique_name("sem-damaged"));
    let channel = format!("{key}:released");
    redis::cmd("SET").arg(&key).arg(1).exec(&mut conn).unwrap();
    redis::cmd("RPUSH")
        .arg(format!("{key}:q"))
        .arg("c:w1")
        .exec(&mut conn)
        .unwrap();
    redis::cmd("HSET")
        .arg(format!("{key}:qd"))
        .arg("c:w1")
        .arg("9999999999999 damaged")
        .exec(&mut conn)
        .unwrap();
    let script = redis::Script::new(SEMAPHORE_SCRIPT);
    let took: i64 = script
        .key(&key)
        .key(&channel)
        .arg("acquire")
        .arg(3)
        .arg("c:w1")
        .arg(10_000)
        .arg(2_000)
        .invoke(&mut conn)
        .unwrap();
    assert_eq!(took, 0, "took 3 permits with 1 free");
    let left: i64 = redis::cmd("GET").arg(&key).query(&mut conn).unwrap();
    assert_eq!(left, 1);
    let queue: Vec<String> = redis::cmd("LRANGE")
        .arg(format!("{key}:q"))
        .arg(0)
        .arg(-1)
        .query(&mut conn)
        .unwrap();
    assert_eq!(queue, ["c:w1"], "queued anew, with a whole entry");
}
