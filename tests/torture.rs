//! The randomized fault run (`support::torture`) on one server and on RedLock over five
//! independent masters: kill -9 and restart, SIGSTOP / SIGCONT and `CLIENT PAUSE` of a server,
//! drawn at random while fenced locks are taken and used. The servers keep an fsynced
//! append-only file, as a lock server that restarts must (without it a restart forgets every
//! lock and fence; docs/guarantees.md says so).

mod support;

use redlease::LockOptions;
use std::time::Duration;

use redlease::{Client, RedLock};
use support::torture::{self, Dice, Fault, Fences};
use support::{Server, unique_names};

const NAMES: usize = 3;
const CLIENTS: usize = 3;

/// A server whose writes survive kill -9 (appendfsync always).
fn durable_server() -> Server {
    Server::builder().appendonly(true).start()
}

async fn client_of(server: &Server) -> Client {
    Client::builder(server.url())
        .watchdog_lease(Duration::from_secs(2))
        .timeout(Duration::from_millis(500))
        .build()
        .await
        .unwrap()
}

/// One fault on `server`: a crash and restart, a frozen process, or paused writes, each for
/// about 300 ms.
fn break_server(server: &mut Server, dice: &mut Dice) {
    let outage = Duration::from_millis(300);
    match dice.below(3) {
        0 => {
            server.kill();
            std::thread::sleep(outage);
            server.restart();
        }
        1 => {
            server.pause();
            std::thread::sleep(outage);
            server.resume();
        }
        _ => server.client_pause(outage.as_millis() as u64, false),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_locks_hold_their_invariants_under_random_server_faults() {
    let mut server = durable_server();
    let names = unique_names("torture-one", NAMES);
    let mut clients = Vec::new();
    let mut acquirers = Vec::new();
    for _ in 0..CLIENTS {
        let client = client_of(&server).await;
        acquirers.push(torture::fenced_lock(&client, &names));
        clients.push(client);
    }
    let fault = move |dice: &mut Dice| {
        break_server(&mut server, dice);
        Fault::KeepsWrites
    };
    torture::run("one server", Fences::Durable, names, acquirers, fault).await;
    for client in clients {
        let _ = client.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_redlocks_hold_their_invariants_under_random_master_faults() {
    let mut servers: Vec<Server> = (0..5).map(|_| durable_server()).collect();
    let names = unique_names("torture-red", NAMES);
    let mut all = Vec::new();
    let mut acquirers = Vec::new();
    for _ in 0..CLIENTS {
        // One client per master, as RedLock wants independent connections.
        let mut masters = Vec::new();
        for server in &servers {
            masters.push(client_of(server).await);
        }
        let names = names.clone();
        let nodes = masters.clone();
        acquirers.push(torture::acquire(move |i| {
            let locks: redlease::Result<Vec<_>> = nodes
                .iter()
                .map(|c| c.lock(&names[i]).map(|l| l.fenced(true)))
                .collect();
            let redlock = locks.and_then(RedLock::new);
            async move {
                let redlock = redlock?.node_timeout(Duration::from_millis(150));
                redlock
                    .try_lock_with(LockOptions::new().wait(Duration::from_secs(2)))
                    .await
            }
        }));
        all.extend(masters);
    }
    let fault = move |dice: &mut Dice| {
        let i = dice.below(servers.len() as u64) as usize;
        break_server(&mut servers[i], dice);
        Fault::KeepsWrites
    };
    torture::run("RedLock(5)", Fences::Durable, names, acquirers, fault).await;
    for client in all {
        let _ = client.shutdown().await;
    }
}

/// The overlap judge excuses an overlap only against every guard still running: a guard told
/// at its release and lost in a failover does not excuse one overlapping a guard that was not.
#[test]
fn an_overlap_is_excused_only_against_every_running_guard() {
    use std::time::Instant;
    use torture::{Interval, judge};
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    let iv = |start, end, told_at_release| Interval {
        start: at(start),
        end: at(end),
        lost: false,
        told_at_release,
    };
    // X told at its release; A overlaps X alone; B overlaps A, which was never told.
    let list = [iv(0, 50, true), iv(10, 30, false), iv(20, 25, false)];
    let failover = [(at(5), at(15))];
    let found = judge(&list, &failover, Fences::MayRegress);
    let excused: Vec<bool> = found.iter().map(|&(_, _, excused)| excused).collect();
    assert_eq!(excused, [true, false], "{found:?}");
    assert_eq!(found[1].1, 2, "B ran beside both X and A");
    // Without a failover between them, or on a durable deployment, nothing is excused.
    assert!(judge(&list, &[], Fences::MayRegress).iter().all(|f| !f.2));
    assert!(
        judge(&list, &failover, Fences::Durable)
            .iter()
            .all(|f| !f.2)
    );
}
