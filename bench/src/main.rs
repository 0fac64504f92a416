//! `redlease-bench`: the workloads W1-W7 for redlease, its peers (rslock,
//! redlock, rlock, redisson) and the EVALSHA floor, in one run against
//! private redis-server processes; prints one Markdown table of medians and
//! ratios and writes it to `target/bench-report.md`.

mod affinity;
mod alloc;
mod cluster;
mod cluster_suite;
mod config;
mod cost_suite;
mod election_suite;
mod family_suite;
mod floor;
mod locker;
mod losses;
mod model;
mod notice_suite;
mod peers;
#[cfg(feature = "redlease")]
mod redlease_impl;
mod replica;
mod replica_suite;
mod report;
mod runner;
mod sentinel;
mod server;
mod server_time;
mod server_time_suite;
mod stats;
mod suite;
mod targets;
mod tls;
mod tls_suite;
mod workloads;

use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context as _, Result};

use config::Config;
use runner::{Mode, Runner};
use server::RedisServer;
use workloads::processes::Workload;

#[global_allocator]
static ALLOC: alloc::Counting = alloc::Counting;

/// W5 needs five servers; the other workloads use the first.
const SERVERS: usize = 5;

fn main() -> Result<()> {
    // Every process counts the leases the library reports lost (false losses, losses.rs).
    losses::install();
    // E2's leader process: this binary again, told so by its environment.
    #[cfg(feature = "redlease")]
    if let Ok(spec) = std::env::var(workloads::election::CANDIDATE_VAR) {
        return workloads::election::candidate(&spec);
    }
    // L1's forcing process and K3's holding processes, the same way.
    #[cfg(feature = "redlease")]
    if let Ok(url) = std::env::var(workloads::loss_notice::FORCER_VAR) {
        return workloads::loss_notice::forcer(&url);
    }
    #[cfg(feature = "redlease")]
    if let Ok(spec) = std::env::var(workloads::clients::HOLDER_VAR) {
        return workloads::clients::holder(&spec);
    }
    let mut cfg = Config::parse(std::env::args().skip(1));
    // S1 puts its servers on one CPU and its measuring processes on the others, whatever the
    // placement of the rest: taken before this process pins itself below.
    let s1_split = match cfg.cell {
        None if cfg.wants(server_time_suite::SELECTOR) => {
            affinity::cpus(affinity::Placement::Split)
        }
        _ => None,
    };
    if cfg.cell.is_some()
        && cfg.wants(server_time_suite::SELECTOR)
        && !cfg.s1_client_cpus.is_empty()
    {
        // An S1 cell's process (its runtime's threads inherit this).
        if let Err(e) = affinity::pin(&cfg.s1_client_cpus) {
            eprintln!(
                "S1: not pinning the client to {:?}: {e}",
                cfg.s1_client_cpus
            );
        }
    }
    // The parent pins itself, hence the measuring processes it spawns (they
    // inherit it), and the redis-servers (see affinity.rs).
    let mut server_cpus = None;
    let split = match cfg.cell {
        None => affinity::cpus(cfg.placement),
        Some(_) => None,
    };
    if let Some((servers, clients)) = split {
        match affinity::pin(&clients) {
            Ok(()) => {
                cfg.workers.get_or_insert(clients.len());
                cfg.placed =
                    format!("redis-servers pinned to CPU {servers:?}, clients to {clients:?}");
                server_cpus = Some(servers);
            }
            Err(e) => eprintln!("not pinning CPUs: {e}"),
        }
    }
    let workers = *cfg
        .workers
        .get_or_insert_with(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    cfg.placed += &format!(", {workers} tokio worker thread(s) per client process");
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()?
        .block_on(run(cfg, server_cpus, s1_split))
}

async fn run(
    mut cfg: Config,
    server_cpus: Option<Vec<usize>>,
    s1_split: Option<(Vec<usize>, Vec<usize>)>,
) -> Result<()> {
    if let Some(index) = cfg.w7_worker {
        // One of a W7 cell's processes (workloads/processes.rs).
        workloads::processes::worker(&cfg, index).await;
    }
    if let Some((implementation, pairs)) = cfg.client_cost.clone() {
        let url = cfg.urls.first().context("--client-cost needs --urls")?;
        return workloads::one_caller::pairs_only(&implementation, url, pairs).await;
    }
    #[cfg(feature = "redlease")]
    if let Some((role, n)) = cfg.handover_cost.clone() {
        let url = cfg.urls.first().context("--handover-cost needs --urls")?;
        return workloads::one_caller::handovers_only(&role, url, n).await;
    }
    let started = Instant::now();
    let wants_cluster = cluster_suite::SELECTORS.iter().any(|w| cfg.wants(w))
        || cfg.wants(notice_suite::L1C_SELECTOR);
    // The parent starts the cluster (kept alive until the report is written); children get
    // its URL on their command line.
    let _cluster = match (&cfg.cell, wants_cluster) {
        (None, true) => {
            let cluster = cluster::BenchCluster::start(server_cpus.as_deref())?;
            cfg.cluster_url = Some(cluster.url());
            Some(cluster)
        }
        _ => None,
    };
    // The same for the primary with a replica of the R1 rows.
    let _replicas = match (&cfg.cell, cfg.wants(replica_suite::SELECTOR)) {
        (None, true) => {
            let pair = replica::ReplicaPair::start(server_cpus.as_deref())?;
            cfg.replica_url = Some(pair.primary.url());
            Some(pair)
        }
        _ => None,
    };
    // And the Sentinel deployment of the L1S rows; without one, L1S says why.
    let mut sentinel_missing = None;
    let _sentinel = match (&cfg.cell, cfg.wants(notice_suite::L1S_SELECTOR)) {
        (None, true) => match sentinel::SentinelGroup::start(server_cpus.as_deref()) {
            Ok(group) => {
                cfg.sentinel = Some((group.url(), group.master.url()));
                Some(group)
            }
            Err(e) => {
                eprintln!("L1S not run: {e:#}");
                sentinel_missing = Some(format!("{e:#}"));
                None
            }
        },
        _ => None,
    };
    // And the server with a TLS port of the T1 rows; without one, T1 says why.
    let mut tls_missing = None;
    let _tls = match (&cfg.cell, cfg.wants(tls_suite::SELECTOR)) {
        (None, true) => match tls::TlsServer::start(server_cpus.as_deref()) {
            Ok(server) => {
                cfg.tls = Some(tls_suite::Target {
                    plain_url: server.server.url(),
                    tls_url: server.tls_url(),
                    ca_file: server.ca_file(),
                });
                Some(server)
            }
            Err(e) => {
                eprintln!("T1 not run: {e:#}");
                tls_missing = Some(format!("{e:#}"));
                None
            }
        },
        _ => None,
    };
    // And S1's Redis and Valkey, on a CPU of their own; without them, S1 says why.
    let mut s1_missing = Vec::new();
    let _s1 = match (&cfg.cell, cfg.wants(server_time_suite::SELECTOR)) {
        (None, true) => match server_time_suite::Servers::start(s1_split) {
            Ok(servers) => {
                cfg.s1_servers = servers.args();
                cfg.s1_client_cpus = servers.client_cpus.clone();
                cfg.placed += &format!(
                    "; S1's servers pinned to CPU {:?}, its clients to {:?}",
                    servers.server_cpus, servers.client_cpus
                );
                s1_missing = servers.missing.clone();
                Some(servers)
            }
            Err(e) => {
                let why = format!("{e:#}");
                eprintln!("S1 not run: {why}");
                s1_missing = vec![("Redis".into(), why.clone()), ("Valkey".into(), why)];
                None
            }
        },
        _ => None,
    };
    let load_before = loadavg();
    let (servers, mode) = match &cfg.cell {
        Some((workload, implementation)) => {
            let servers = cfg
                .urls
                .iter()
                .map(|u| RedisServer::attach(u))
                .collect::<Result<Vec<_>>>()?;
            let mode = Mode::Child {
                workload: workload.clone(),
                implementation: implementation.clone(),
            };
            (servers, mode)
        }
        None => {
            let servers = (0..SERVERS)
                .map(|_| RedisServer::start(server_cpus.as_deref()))
                .collect::<Result<Vec<_>>>()?;
            let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
            let mode = Mode::Parent {
                exe: std::env::current_exe()?,
                args: cfg.child_args(&urls),
            };
            (servers, mode)
        }
    };
    let mut runner = Runner {
        mode,
        runs: cfg.runs,
        cap: cfg.cap,
        servers: Arc::new(servers),
        entries: Vec::new(),
        impls: cfg.impls.clone(),
        queued: Vec::new(),
    };
    let c = &cfg.counts;
    if cfg.wants("W1") {
        suite::w1(&mut runner, c).await;
        runner.run_queued().await;
    }
    if cfg.wants("W2") {
        suite::w2(&mut runner, c).await;
        runner.run_queued().await;
    }
    if cfg.wants("W3") {
        suite::w3(&mut runner, c).await;
        runner.run_queued().await;
    }
    if cfg.wants("W4") {
        suite::w4(&mut runner, c).await;
        runner.run_queued().await;
    }
    if cfg.wants("W5") {
        suite::w5(&mut runner, c).await;
        runner.run_queued().await;
    }
    if cfg.wants("W6") {
        suite::w6(&mut runner, c).await;
        runner.run_queued().await;
    }
    for w in [Workload::W7, Workload::P2, Workload::P3] {
        if cfg.wants(w.selector()) {
            workloads::processes::suite(&mut runner, w, &cfg.w7_procs, cfg.w7_secs).await;
            runner.run_queued().await;
        }
    }
    if cfg.wants("K1") {
        let (k1, procs) = (Workload::K1, workloads::processes::K1_PROCS);
        workloads::processes::suite(&mut runner, k1, &procs, cfg.w7_secs).await;
        runner.run_queued().await;
    }
    if cfg.wants("K2") {
        cost_suite::holds(&mut runner, c).await;
        runner.run_queued().await;
    }
    if cfg.wants("K3") {
        cost_suite::clients(&mut runner, c).await;
        runner.run_queued().await;
    }
    if let (true, Some(url)) = (wants_cluster, cfg.cluster_url.clone()) {
        cluster_suite::cluster(&mut runner, c, &url, |w| cfg.wants(w)).await;
        runner.run_queued().await;
    }
    if let (true, Some(_)) = (cfg.wants("C7"), &cfg.cluster_url) {
        let c7 = Workload::C7;
        workloads::processes::suite(&mut runner, c7, &cfg.w7_procs, cfg.w7_secs).await;
        runner.run_queued().await;
    }
    if let (true, Some(url)) = (cfg.wants(replica_suite::SELECTOR), cfg.replica_url.clone()) {
        replica_suite::replicas(&mut runner, c, &url).await;
        runner.run_queued().await;
    }
    if cfg.wants(tls_suite::SELECTOR) {
        match (&cfg.tls, &tls_missing) {
            (Some(target), _) => tls_suite::tls(&mut runner, c, target).await,
            (None, Some(why)) => tls_suite::not_applicable(&mut runner, why),
            (None, None) => {}
        }
        runner.run_queued().await;
    }
    if cfg.wants(server_time_suite::SELECTOR) {
        let servers = cfg.s1_servers.clone();
        server_time_suite::suite(&mut runner, c, &servers, &s1_missing).await;
        runner.run_queued().await;
    }
    if ["F1", "F2", "F3", "F4"].iter().any(|f| cfg.wants(f)) {
        family_suite::family(&mut runner, c, |w| cfg.wants(w)).await;
        runner.run_queued().await;
    }
    if ["E1", "E2"].iter().any(|e| cfg.wants(e)) {
        election_suite::election(&mut runner, c).await;
        runner.run_queued().await;
    }
    if notice_suite::SELECTORS.iter().any(|w| cfg.wants(w)) {
        let deployments = notice_suite::Deployments {
            cluster_url: cfg.cluster_url.clone(),
            sentinel: cfg.sentinel.clone(),
            sentinel_missing,
        };
        notice_suite::loss_notice(&mut runner, c, |w| cfg.wants(w), &deployments).await;
        runner.run_queued().await;
    }
    if cfg.cell.is_some() {
        // Do not wait for threads or tasks an implementation left behind.
        use std::io::Write as _;
        std::io::stdout().flush()?;
        std::process::exit(0);
    }
    let load = format!("load average {load_before} before, {} after", loadavg());
    let markdown = document(&cfg, &runner, started.elapsed().as_secs_f64(), &load);
    println!("{markdown}");
    report::write(&cfg.out, &markdown)?;
    eprintln!("report written to {}", cfg.out.display());
    Ok(())
}

fn document(cfg: &Config, runner: &Runner, seconds: f64, load: &str) -> String {
    let c = &cfg.counts;
    let ctx = targets::Context {
        entries: &runner.entries,
        expected_counter: (c.w2_tasks * c.w2_rounds) as f64,
        w4_target: suite::w4_label(c.w4[1]),
    };
    let mode = if cfg.quick {
        "quick (smoke counts, targets not meaningful)"
    } else {
        "full"
    };
    format!(
        "# redlease benchmark ({mode})\n\n\
         {runs} run(s) per cell (each a fresh process, cells interleaved), median reported; \
         {cores} cores, loopback, private redis-server {ver}; total {seconds:.0} s; {load}.\n\
         Placement: {placement}.\n\
         Counts: W1 {w1} pairs; W2 {t2} tasks × {r2} rounds; W3 {t3} tasks × {r3} pairs; \
         W4 {a} and {b} held locks; W5 {w5} pairs; W6 {w6} handoffs; \
         W7/C7/P2/P3 {w7} s of contention per run; S1 W1 {s1} pairs, W3 as W3.\n\n{table}\n{w7_table}{s1_table}{l1_table}{k_tables}{losses}{notes}",
        runs = cfg.runs,
        // SAFETY: sysconf has no preconditions.
        cores = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) },
        ver = redis_version(),
        w1 = c.w1,
        t2 = c.w2_tasks,
        r2 = c.w2_rounds,
        t3 = c.w3_tasks,
        r3 = c.w3_rounds,
        a = c.w4[0],
        b = c.w4[1],
        w5 = c.w5,
        w6 = c.w6,
        w7 = cfg.w7_secs,
        s1 = c.s1_w1,
        table = report::table(&ctx),
        w7_table = report::w7_table(&ctx),
        s1_table = server_time_suite::report(&ctx),
        l1_table = notice_suite::report(&ctx),
        k_tables = cost_suite::report(&ctx),
        losses = losses::summary(&runner.entries),
        notes = NOTES,
        placement = cfg.placed,
    )
}

/// The 1-minute load average and the 5-minute one: other work on the machine
/// skews every number here.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| s.split_whitespace().take(2).collect::<Vec<_>>().join(" / "))
        .unwrap_or_else(|| "?".into())
}

fn redis_version() -> String {
    std::process::Command::new(server::server_bin())
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| {
            s.split_whitespace()
                .find_map(|w| w.strip_prefix("v=").map(String::from))
        })
        .unwrap_or_else(|| "?".into())
}

const NOTES: &str = "\
Notes:
- Floor: a bare EVALSHA of `return 1` through redis-rs on a `ConnectionManager`. W1 compares a \
lock+unlock pair with two floor round trips in a row, W6 the wake-up with one; W5's \
\"floor 5 nodes in parallel\" fans each round trip out to the 5 servers at once.
- Ratios: redlease against the floor or rslock (the targets); peers against redlease (same \
metric, same variant); W5 rows against the same implementation's single-node lock.
- Peers use default retry settings, as their docs show: rslock `acquire` (3 tries, random \
0–200 ms between), redlock's README loop over `lock()` (same, sync, a new TCP connection per \
command, run on OS threads), rlock `acquire_mutex` (polls every 100 ms), redisson `lock()` \
(polls every 100 ms, a pooled connection checked with PING on every checkout). \
Fixed leases where one is required: 10 s (rslock, redlock, redlease W5), redisson's 30 s default.
- rslock over several servers sends to all of them at once (join_all); redlock takes them one \
after another. redisson's RedLock is built with its public `AsyncRRedLock::new` over one \
connection manager per server (its docs only show the single-server `get_red_lock`).
- W2: the counter is a GET then SET on a separate key through a plain redis-rs connection; it \
shows the worst run. Handoffs: consecutive acquisitions by different tasks, ordered by the \
counter value read under the lock. The polling peers are unfair: the releasing task takes the \
lock straight back while the others sleep, hence few handoffs, short median waits, long max waits.
- W3: redisson fails with more tasks than its connection pool (default 10): pool waits time \
out after 3 s (also seen with 20 tasks; a pool of 64 still stalls for seconds).
- W4: heap measured by a counting global allocator around the acquisitions (guards included). \
Round trips of a redlease tick: as reported by `RenewStats`, and as EVAL/EVALSHA/FCALL calls \
counted by the server (INFO commandstats); the server's command count includes the commands \
run inside the scripts. rlock has one renewal task per guard, so its row counts the renewal \
script calls over one 5 s renewal period instead of a tick. Peers without renewal: heap only.
- W5: with the default placement the 5 servers and the client share one CPU, so a fan-out to \
5 servers costs the 5 servers' CPU time in series; the floor row \"5 nodes in parallel\" shows \
that bound for every RedLock(5) here (`--placement split` moves the servers to another CPU).
- W6: the holder keeps the lock 2–8 ms while the waiter is blocked in its lock call; latency = \
waiter's lock call returning − holder's unlock call returning. Its target floor has W6's shape \
without a lock: after the same 2–8 ms idle gap one task's EVALSHA returns and wakes another task, \
whose EVALSHA is timed (the least any lock needs: one round trip for the waiter, on a machine as \
cold as W6's). A lone EVALSHA after the gap and a back-to-back one are shown for scale.
- C1-C6: W1, W3, W4 and W6 on a Redis Cluster of 3 primaries (no replicas) on the same \
machine, each beside redlease on one server in the same run. C4 counts round trips as the \
client reports them (`RenewStats`): a cluster has no single server to count on.
- F1-F4, the lock family (redlease only; no peer has these locks): F1 is W2 over two clients \
(tasks alternate between them) with `FairLock` (`Lock`'s engine in strict mode: every attempt \
respects the server's queue) and with `Lock`; F2 is W3's tasks on one \
`ReadWriteLock`, every tenth acquisition a write; F3 is W3's tasks sharing a `Semaphore` of 8 \
permits. F2 and F3 run a fifth of W3's rounds. F4 is W2 on one client with the exclusive kinds \
of each in-client hand-over: `Lock` (a release hands the lock to the waiting head it names), the \
`ReadWriteLock`'s write side and a `Semaphore` of 1 (every waiter queues on the server, and a \
release names the client's waiters it granted); script calls per acquisition from the server's \
INFO commandstats.
- R1: W1 on a primary with one replica on the same machine, with `Replicas::Off` and with \
`Replicas::Wait { replicas: 1, timeout: 100ms }` (`WAIT 1 100` pipelined behind every acquire) \
in the same run: the ratio is the price of the replica's acknowledgement (docs/replicas.md).
- T1: W1 and its floor against one redis-server with a plain port and a TLS port (certificates made with rcgen \
at start; server authentication only, no client certificate), through each port in the same \
run: \"× plain\" is the price of TLS (rustls, ring) on loopback, where encryption is all it adds; \
the floor rows (two bare EVALSHA through redis-rs, with the same rustls) show that price without \
a lock, and \"× own floor\" what redlease adds over the same transport.
- E1, E2, leader election (redlease only): E1 passes the leadership back and forth between \
two clients by `resign()`, the candidate waiting in `campaign` (latency = the candidate's \
`campaign` returning − the `resign()` call); E2 kills a leader process (this binary, 1 s lease, \
renewed every third of it) with SIGKILL while a candidate waits: the takeover is bounded by the \
lease and at least two thirds of it.
- L1 (L1C: on the cluster; L1S: behind Sentinel), the loss notice (redlease only): a holder \
under the watchdog (default 30 s lease) holds a lock, armed for the notice; its key is then \
deleted (`DEL`), flushed (`FLUSHDB`; on the cluster on every primary), evicted (`maxmemory` \
2 MiB above use, `allkeys-lru`, 64 KiB writes in its slot until `EXISTS` answers 0) or \
force-unlocked by another process: the time from the reply saying the key is gone to the \
holder's `lost()` resolving, 100 trials of each cause per run (10 with `--quick`; on the \
cluster and behind Sentinel at most 40 s of trials per run). Without the notice it is the next \
renewal, up to 10 s.
- K1, the waiter curve: W7 (as below) at 2, 8, 16, 32 and 64 processes (not `--w7-procs`), with \
`Lock` under a fixed 10 s lease beside the watchdog's, `FairLock`, rslock, the floor, \
floor+reply and floor+call; the \
bars are issue 39's (≥ 0.8× the floor at the same K). `bench/scripts/waiter_curve.py` plots it.
- K2, the holds curve: one client holds N locks under the watchdog (default lease; 3 s with \
`--quick`); over two renewal periods, the script calls and their commandstats usec per second, \
the server process's CPU per second (`used_cpu_sys` + `used_cpu_user`) beside an idle baseline \
(client connected, nothing held), the longest call (SLOWLOG from 100 µs for the window; 0 = \
none that long), the calls of 1 ms or more, and the client heap per hold (as W4).
- K3, the clients curve: N processes (this binary) hold one lock each (redlease under the \
watchdog, rslock with a 10 s lease); the server's `connected_clients` and `used_memory` once all \
hold, against before they started, per process.
- False losses: every process counts `redlease_leases_lost_total` (reason `shutdown` excluded); \
in the fault-free workloads (W1–W7, K1–K3) each redlease cell reports its count, 0 expected.
- W7 (C7: the same on the cluster): K separate OS processes (one task and one client each, \
started by the cell's process, which inherits the run's CPU placement) contend on one lock for \
a fixed time, each incrementing a counter non-atomically under it (GET, then SET, on a key of \
the lock's hash slot). Wait: from asking for the lock to getting it. Script calls: EVAL, \
EVALSHA (and FCALL) counted by the server(s) (INFO commandstats) between the processes' start \
and their end, per acquisition. Fairness: Jain's index over the processes' acquisition counts \
(1 = equal). Client CPU: each process reads its own `getrusage` (user + system time of all \
its threads, voluntary and involuntary context switches) just before and just after its \
measured part; the sums over the K processes, per acquisition (\"CPU ÷ floor\": over the \
floor's at the same K). The floor: one list key holding one token, taken with BLPOP (a connection per \
waiting task) and given back with LPUSH: the server hands it to the longest-blocked client. \
floor+reply (W7, C7, K1): the floor with each BLPOP pipelined behind an EXISTS of the token's \
key, answered at once: one more delivery per acquisition from the server, as a queued redlease \
waiter gets (parsed by the connection's driver, without waking the caller: a lower bound on \
what that delivery costs); floor+call awaits the EXISTS before it sends the BLPOP (the reply \
then wakes the caller, as a queued redlease waiter's does). \"counter − acquisitions\" is the \
worst run's (0 = no lost update).
- P2, P3: F2 and F3 across processes, on W7's machinery (K processes, one task and one client \
each, one server): P2 on one `ReadWriteLock`, every tenth acquisition of each process a write \
(GET, SET of the counter + 1; \"counter − writes\" must be 0) and the other nine reads (GET); \
every acquisition counts itself in a key `inside` while it runs (a write as 1,000,000, a read \
as 1), and one that meets a write, or a write that meets anybody, is an overlap (must be 0); \
P3 on a `Semaphore` of 8 permits, acquire 1 / release 1, with INCR of a key on entry and DECR \
on exit (the most INCR returned must be ≤ 8; with K ≤ 8 processes at most K are inside, so \
only K > 8 tests the bound). Their floors are W7's tokens, doing the same work under them: for \
P2 the one token, every acquisition exclusive; for P3 8 tokens in the list. No peer has these locks; no targets.
- S1: W1 and W3 (as above) for redlease `Lock` and rslock on Redis and on Valkey, each server \
pinned to a CPU of its own and the measuring processes to the others, whatever `--placement` says. \
Each run: MONITOR over a few calibration pairs (which commands the clients send, which the \
scripts run), a warm-up, then `CONFIG RESETSTAT`, the pairs, `INFO commandstats`. Server µs per \
pair: the commandstats usec of the commands the clients sent (a script's `redis.call`s are inside \
its own usec, so they are not added again); CPU µs: the server's main thread (user + system, \
`INFO cpu`) over the same pairs, reading and replying included. The targets are issue 25's.
- Other work on the machine (see the load average above) skews every number; run it on an idle machine.
";
