//! W7 (C7 on the cluster): K separate OS processes, one task each, contend on ONE lock for a
//! fixed time, each incrementing a counter non-atomically under it (GET, then SET of the value
//! + 1, on a key in the lock's slot). Targets: redlease `Lock` (default settings), redlease
//! `FairLock` (the same engine in strict mode: every attempt queues or respects the queue),
//! rslock, and the floor: one list key holding one token, taken with `BLPOP` on a
//! connection of the waiting task's own and given back with `LPUSH` (the server hands it to
//! the longest-blocked client: FIFO, one round trip per hand-over). W7, C7 and K1 also run
//! the floor with one more reply per acquisition: each `BLPOP` pipelined behind an `EXISTS` of
//! the token's key, which the server answers at once. Its waiters get one more delivery from
//! the server, as a queued redlease waiter does (an answer at once, the token later); redis-rs
//! parses that reply without waking the caller, so the row is a lower bound on what the
//! delivery costs. `floor+call` sends the `EXISTS` as a call of its own and awaits it before the
//! `BLPOP`: the extra reply then wakes the caller, as a queued redlease waiter's does (and one
//! more send, which redlease does not pay).
//!
//! The cell's own child process (spawned by the runner like every cell) is the coordinator:
//! it starts the K processes (this binary again, with its own arguments and
//! `--w7-worker I`), waits until every one has connected and warmed up, reads the servers'
//! script calls (`INFO commandstats`), tells them all to go on their stdin, collects each
//! one's acquisitions and waits from its stdout, and reads the counts again. Each process also
//! reports its own CPU time (user + system, all its threads) and context switches over the
//! measured part (`getrusage(RUSAGE_SELF)`, read outside the timed loop); the coordinator sums
//! them over the K processes and gives them per acquisition. The K processes
//! inherit the CPU placement of the run and die with the coordinator (`PR_SET_PDEATHSIG`);
//! the coordinator kills them on any error (`kill_on_drop`).
//!
//! P2 and P3 are the lock family's F2 and F3 on the same machinery (one server): P2, a
//! `ReadWriteLock` on which every tenth acquisition of each process is a write (GET, SET of
//! the counter + 1 under the write lock) and the other nine reads (GET under the read lock),
//! against the floor's one token taken for every acquisition; P3, a `Semaphore` of 8 permits
//! (acquire 1, release 1; under the permit, INCR of a key `inside`, then DECR of it), against
//! a list of 8 tokens. Their checks: the counter equals the writes, and no acquisition
//! overlapped a write (P2: each counts itself in `inside` while it runs, a write as
//! 1,000,000, a read as 1); INCR never saw more than 8 inside (P3). The floors do the same
//! work under their tokens.

use std::io::Write as _;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::config::Config;
use crate::model::{
    ACQ_PER_SEC, ACQUISITIONS, CLIENT_CPU_PER_ACQ, CLIENT_IVCSW_PER_ACQ, CLIENT_VCSW_PER_ACQ,
    COUNTER_OFF, COUNTER_OFF_WRITES, JAIN, MOST_INSIDE, Measure, OVERLAPS, SCRIPTS_PER_ACQ, Unit,
    WAIT, WAIT_MAX, WRITES, family,
};
use crate::runner::Runner;
use crate::server::{Counters, RedisServer};
use crate::stats::{micros, p50_p99, per_sec};

/// The lock's name; the counter and the floor's token share its hash slot (`{bench:w7}`;
/// rslock's key `bench:w7` hashes as a whole to the same slot).
const LOCK: &str = "bench:w7";
const COUNTER_KEY: &str = "{bench:w7}:counter";
const TOKEN_KEY: &str = "{bench:w7}:token";
/// P3: how many hold a permit (INCR on entry, DECR on exit); P2: who is in (a write counts
/// [`A_WRITE_INSIDE`], a read 1).
const INSIDE_KEY: &str = "{bench:w7}:inside";

/// P3's permits (and its floor's tokens).
pub const PERMITS: u32 = 8;

/// Lock+unlock pairs each process makes before the measured part (connections, scripts).
const WARM_UP: usize = 20;
/// Longest a process waits for the lock (or the token) before the run fails.
const WAIT_BOUND: Duration = Duration::from_secs(30);
/// Longest the coordinator waits for the processes to be ready, and to report after the run.
const READY_BOUND: Duration = Duration::from_secs(60);
const REPORT_GRACE: Duration = Duration::from_secs(60);

/// Lines a W7 process prints.
const READY: &str = "W7READY";
const DONE: &str = "W7DONE";
const WAITS: &str = "W7WAITS";
/// The leases this process's redlease client reported lost (false losses, losses.rs).
const LOST: &str = "W7LOST";
/// This process's CPU µs (user + system) and voluntary and involuntary context switches over
/// the measured part.
const CPU: &str = "W7CPU";
const FAILED: &str = "W7ERROR";

pub const FLOOR: &str = "floor (BLPOP/LPUSH token)";
pub const FLOOR_TOKENS: &str = "floor (BLPOP/LPUSH 8 tokens)";
pub const FLOOR_REPLY: &str = "floor+reply (EXISTS answered, then BLPOP, pipelined)";
pub const FLOOR_CALL: &str = "floor+call (EXISTS awaited, then BLPOP)";
pub const LOCK_IMPL: &str = "redlease Lock";
pub const FIXED_IMPL: &str = "redlease Lock, fixed lease";
pub const FAIR_IMPL: &str = "redlease FairLock";
pub const RSLOCK_IMPL: &str = "rslock";
pub const RW_IMPL: &str = "redlease ReadWriteLock";
pub const SEMAPHORE_IMPL: &str = "redlease Semaphore(8)";

/// The workloads run on this machinery.
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Workload {
    /// One lock, one server.
    W7,
    /// W7 on the cluster.
    C7,
    /// A `ReadWriteLock`, nine reads to one write.
    P2,
    /// A `Semaphore` of 8 permits.
    P3,
    /// The waiter curve (issue 39): W7 at [`K1_PROCS`], each way of holding a `Lock`.
    K1,
}

/// K1's numbers of processes.
pub const K1_PROCS: [usize; 5] = [2, 8, 16, 32, 64];

impl Workload {
    const ALL: [Workload; 5] = [
        Workload::W7,
        Workload::C7,
        Workload::P2,
        Workload::P3,
        Workload::K1,
    ];

    /// The first word of its labels: what `--only` names.
    pub fn selector(self) -> &'static str {
        match self {
            Workload::W7 => "W7",
            Workload::C7 => "C7",
            Workload::P2 => "P2",
            Workload::P3 => "P3",
            Workload::K1 => "K1",
        }
    }

    /// Its label for K processes: `W7 4 processes`, `C7 cluster 4 processes`, `P2 8 processes`.
    pub fn label(self, k: usize) -> String {
        match self {
            Workload::C7 => format!("C7 cluster {k} processes"),
            Workload::K1 => format!("K1 waiters {k} processes"),
            w => format!("{} {k} processes", w.selector()),
        }
    }

    /// The workload of a label (by its first word).
    pub fn of(label: &str) -> Option<Workload> {
        let first = family(label);
        Workload::ALL.into_iter().find(|w| w.selector() == first)
    }

    /// Its implementations, floor first (the runner interleaves their runs).
    fn kinds(self) -> &'static [Kind] {
        match self {
            Workload::W7 | Workload::C7 => &[
                Kind::Floor,
                Kind::FloorReply,
                Kind::FloorCall,
                Kind::Lock,
                Kind::Fair,
                Kind::Rslock,
            ],
            Workload::P2 => &[Kind::Floor, Kind::ReadWrite],
            Workload::P3 => &[Kind::Tokens, Kind::Semaphore],
            Workload::K1 => &[
                Kind::Floor,
                Kind::FloorReply,
                Kind::FloorCall,
                Kind::Lock,
                Kind::Fixed,
                Kind::Fair,
                Kind::Rslock,
            ],
        }
    }

    /// What process `index` does with its acquisition number `i` (counted from 0, warm-up
    /// included): in P2 every tenth is a write, staggered over the processes.
    fn op(self, index: usize, i: usize) -> Op {
        match self {
            Workload::W7 | Workload::C7 | Workload::K1 => Op::Write,
            Workload::P2 if (index + i).is_multiple_of(10) => Op::Write,
            Workload::P2 => Op::Read,
            Workload::P3 => Op::Enter,
        }
    }
}

/// What a process does under the lock.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Op {
    /// GET the counter, SET it + 1 (P2: under the write lock).
    Write,
    /// GET the counter (P2: under the read lock).
    Read,
    /// INCR `inside`, DECR it (P3).
    Enter,
}

/// The one-server label of a C7 label (`C7 cluster 4 processes` -> `W7 4 processes`).
pub fn one_server_label(c7: &str) -> Option<String> {
    c7.strip_prefix("C7 cluster ").map(|k| format!("W7 {k}"))
}

#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Kind {
    Floor,
    Lock,
    Fair,
    Rslock,
    ReadWrite,
    Semaphore,
    /// The floor with 8 tokens in the list (P3's).
    Tokens,
    /// The floor with one more reply per acquisition, answered at once (see the module doc).
    FloorReply,
    /// The same reply awaited by the caller before its `BLPOP` (see the module doc).
    FloorCall,
    /// `Lock` with a fixed lease (`lock_with(LockOptions::new().lease(10 s))`, as most users and
    /// every peer hold a lock).
    Fixed,
}

impl Kind {
    const ALL: [Kind; 10] = [
        Kind::Fixed,
        Kind::Floor,
        Kind::FloorReply,
        Kind::FloorCall,
        Kind::Lock,
        Kind::Fair,
        Kind::Rslock,
        Kind::ReadWrite,
        Kind::Semaphore,
        Kind::Tokens,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Floor => FLOOR,
            Kind::Lock => LOCK_IMPL,
            Kind::Fair => FAIR_IMPL,
            Kind::Rslock => RSLOCK_IMPL,
            Kind::ReadWrite => RW_IMPL,
            Kind::Semaphore => SEMAPHORE_IMPL,
            Kind::Tokens => FLOOR_TOKENS,
            Kind::FloorReply => FLOOR_REPLY,
            Kind::FloorCall => FLOOR_CALL,
            Kind::Fixed => FIXED_IMPL,
        }
    }

    /// Tokens the coordinator puts in the floor's list.
    fn tokens(self) -> u32 {
        match self {
            Kind::Floor | Kind::FloorReply | Kind::FloorCall => 1,
            Kind::Tokens => PERMITS,
            _ => 0,
        }
    }

    fn of(implementation: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == implementation)
    }
}

/// Where a run goes: one server's URL, or the cluster's `redis+cluster://` URL.
#[derive(Clone, Debug)]
pub enum Target {
    One(String),
    Cluster(String),
}

impl Target {
    #[cfg(feature = "redlease")]
    fn url(&self) -> &str {
        match self {
            Target::One(u) | Target::Cluster(u) => u,
        }
    }

    /// `redis://` URLs of every node (one, or the cluster's primaries).
    fn node_urls(&self) -> Vec<String> {
        match self {
            Target::One(u) => vec![u.clone()],
            Target::Cluster(u) => crate::cluster_suite::seed_urls(u),
        }
    }
}

/// A connection to one server or to the cluster (routed by key).
enum Conn {
    One(redis::aio::MultiplexedConnection),
    Cluster(redis::cluster_async::ClusterConnection),
}

impl Conn {
    async fn open(target: &Target, response_timeout: Duration) -> Result<Conn> {
        Ok(match target {
            Target::One(url) => {
                let config = redis::AsyncConnectionConfig::new()
                    .set_response_timeout(Some(response_timeout))
                    .set_connection_timeout(Some(Duration::from_secs(5)));
                Conn::One(
                    redis::Client::open(url.as_str())?
                        .get_multiplexed_async_connection_with_config(&config)
                        .await?,
                )
            }
            Target::Cluster(_) => Conn::Cluster(
                redis::cluster::ClusterClientBuilder::new(target.node_urls())
                    .response_timeout(response_timeout)
                    .connection_timeout(Duration::from_secs(5))
                    .build()?
                    .get_async_connection()
                    .await?,
            ),
        })
    }

    async fn query<T: redis::FromRedisValue>(&mut self, cmd: &redis::Cmd) -> Result<T> {
        Ok(match self {
            Conn::One(c) => cmd.query_async(c).await?,
            Conn::Cluster(c) => cmd.query_async(c).await?,
        })
    }

    async fn query_pipe<T: redis::FromRedisValue>(&mut self, pipe: &redis::Pipeline) -> Result<T> {
        Ok(match self {
            Conn::One(c) => pipe.query_async(c).await?,
            Conn::Cluster(c) => pipe.query_async(c).await?,
        })
    }
}

/// One process's way to take and give back the lock.
enum Locker {
    #[cfg(feature = "redlease")]
    Lock(redlease::Client, redlease::Lock),
    #[cfg(feature = "redlease")]
    Fixed(redlease::Client, redlease::Lock),
    #[cfg(feature = "redlease")]
    Fair(redlease::Client, redlease::FairLock),
    #[cfg(feature = "redlease")]
    ReadWrite(redlease::Client, redlease::ReadWriteLock),
    #[cfg(feature = "redlease")]
    Semaphore(redlease::Client, redlease::Semaphore),
    Rslock(crate::peers::rslock::Rslock),
    /// The token's connection (BLPOP blocks it; this task's own), and the reply sent before
    /// each `BLPOP`, if any.
    Floor(Conn, Extra),
}

enum Held {
    #[cfg(feature = "redlease")]
    Lock(redlease::LockGuard),
    #[cfg(feature = "redlease")]
    Read(redlease::ReadGuard),
    #[cfg(feature = "redlease")]
    Write(redlease::WriteGuard),
    #[cfg(feature = "redlease")]
    Permit,
    Rslock(rslock::LockGuard),
    Token,
}

/// The reply a floor's waiter gets before its token (`floor+reply`, `floor+call`).
#[derive(Clone, Copy)]
enum Extra {
    None,
    /// An `EXISTS` pipelined with the `BLPOP`.
    Pipelined,
    /// An `EXISTS` awaited before the `BLPOP` is sent.
    Awaited,
}

impl Locker {
    async fn open(kind: Kind, target: &Target) -> Result<Locker> {
        use crate::peers::rslock::Rslock;
        Ok(match (kind, target) {
            #[cfg(feature = "redlease")]
            (Kind::Lock, t) => {
                let client = crate::redlease_impl::client(t.url()).await?;
                let lock = client.lock(LOCK)?;
                Locker::Lock(client, lock)
            }
            #[cfg(feature = "redlease")]
            (Kind::Fixed, t) => {
                let client = crate::redlease_impl::client(t.url()).await?;
                let lock = client.lock(LOCK)?;
                Locker::Fixed(client, lock)
            }
            #[cfg(feature = "redlease")]
            (Kind::Fair, t) => {
                let client = crate::redlease_impl::client(t.url()).await?;
                let lock = client.fair_lock(LOCK)?;
                Locker::Fair(client, lock)
            }
            #[cfg(feature = "redlease")]
            (Kind::ReadWrite, t) => {
                let client = crate::redlease_impl::client(t.url()).await?;
                let lock = client.read_write_lock(LOCK)?;
                Locker::ReadWrite(client, lock)
            }
            #[cfg(feature = "redlease")]
            (Kind::Semaphore, t) => {
                let client = crate::redlease_impl::client(t.url()).await?;
                let permits = client.semaphore(LOCK)?;
                // The first process sets them (the runner flushes the servers before each run).
                permits.try_set_permits(PERMITS).await?;
                Locker::Semaphore(client, permits)
            }
            #[cfg(not(feature = "redlease"))]
            (Kind::Lock | Kind::Fixed | Kind::Fair | Kind::ReadWrite | Kind::Semaphore, _) => {
                bail!("bench built without the `redlease` feature")
            }
            (Kind::Rslock, Target::One(url)) => {
                Locker::Rslock(Rslock::new(std::slice::from_ref(url)))
            }
            (Kind::Rslock, t @ Target::Cluster(_)) => {
                Locker::Rslock(Rslock::new_cluster(&t.node_urls())?)
            }
            // The server answers a BLPOP once it has the token: no response timeout below the
            // wait bound.
            (Kind::Floor | Kind::Tokens | Kind::FloorReply | Kind::FloorCall, t) => {
                let extra = match kind {
                    Kind::FloorReply => Extra::Pipelined,
                    Kind::FloorCall => Extra::Awaited,
                    _ => Extra::None,
                };
                Locker::Floor(Conn::open(t, WAIT_BOUND + WAIT_BOUND).await?, extra)
            }
        })
    }

    /// Takes the lock (`op`: which side of a `ReadWriteLock`; the others have one).
    #[cfg_attr(not(feature = "redlease"), expect(unused_variables))]
    async fn lock(&mut self, op: Op) -> Result<Held> {
        use crate::locker::AsyncLocker as _;
        let take = async {
            Ok(match self {
                #[cfg(feature = "redlease")]
                Locker::Lock(_, lock) => Held::Lock(lock.lock().await?),
                #[cfg(feature = "redlease")]
                Locker::Fixed(_, lock) => Held::Lock(
                    lock.lock_with(redlease::LockOptions::new().lease(crate::locker::LEASE))
                        .await?,
                ),
                #[cfg(feature = "redlease")]
                // A `LockGuard`: a `FairLock` is a `Lock` in strict mode.
                Locker::Fair(_, lock) => Held::Lock(lock.lock().await?),
                #[cfg(feature = "redlease")]
                Locker::ReadWrite(_, lock) => match op {
                    Op::Read => Held::Read(lock.read().lock().await?),
                    Op::Write | Op::Enter => Held::Write(lock.write().lock().await?),
                },
                #[cfg(feature = "redlease")]
                Locker::Semaphore(_, permits) => {
                    permits.acquire().await?;
                    Held::Permit
                }
                Locker::Rslock(l) => Held::Rslock(l.lock(LOCK).await?),
                Locker::Floor(conn, extra) => {
                    let secs = WAIT_BOUND.as_secs();
                    let mut blpop = redis::cmd("BLPOP");
                    blpop.arg(TOKEN_KEY).arg(secs);
                    // The extra command is made only by the rows that send it: the floor's own
                    // CPU per acquisition is the other rows' yardstick.
                    let exists = || redis::cmd("EXISTS").arg(TOKEN_KEY).to_owned();
                    let got: Option<(String, String)> = match extra {
                        Extra::None => conn.query(&blpop).await?,
                        Extra::Pipelined => {
                            let mut pipe = redis::pipe();
                            pipe.add_command(exists()).add_command(blpop);
                            conn.query_pipe::<(i64, _)>(&pipe).await?.1
                        }
                        Extra::Awaited => {
                            conn.query::<i64>(&exists()).await?;
                            conn.query(&blpop).await?
                        }
                    };
                    got.ok_or_else(|| anyhow!("no token in {secs} s"))?;
                    Held::Token
                }
            })
        };
        match tokio::time::timeout(WAIT_BOUND + Duration::from_secs(1), take).await {
            Ok(held) => held,
            Err(_) => bail!("no lock in {WAIT_BOUND:?}"),
        }
    }

    async fn unlock(&mut self, held: Held) -> Result<()> {
        use crate::locker::AsyncLocker as _;
        match (self, held) {
            #[cfg(feature = "redlease")]
            (_, Held::Lock(g)) => g.unlock().await?,
            #[cfg(feature = "redlease")]
            (_, Held::Read(g)) => g.unlock().await?,
            #[cfg(feature = "redlease")]
            (_, Held::Write(g)) => g.unlock().await?,
            #[cfg(feature = "redlease")]
            (Locker::Semaphore(_, permits), Held::Permit) => permits.release(1).await?,
            (Locker::Rslock(l), Held::Rslock(g)) => l.unlock(g).await?,
            (Locker::Floor(conn, _), Held::Token) => {
                conn.query::<i64>(redis::cmd("LPUSH").arg(TOKEN_KEY).arg("token"))
                    .await?;
            }
            _ => bail!("a guard of another kind"),
        }
        Ok(())
    }

    async fn close(self) {
        match self {
            #[cfg(feature = "redlease")]
            Locker::Lock(client, _)
            | Locker::Fixed(client, _)
            | Locker::Fair(client, _)
            | Locker::ReadWrite(client, _)
            | Locker::Semaphore(client, _) => {
                let _ = client.shutdown().await;
            }
            Locker::Rslock(_) | Locker::Floor(..) => {}
        }
    }
}

/// The target of a cell from its workload.
fn target_of(cfg: &Config, workload: Workload) -> Result<Target> {
    Ok(match workload {
        Workload::C7 => Target::Cluster(cfg.cluster_url.clone().context("no cluster URL")?),
        _ => Target::One(cfg.urls.first().context("no server URL")?.clone()),
    })
}

/// The workload and the implementation of a W7-style cell.
fn cell_of(cfg: &Config) -> Result<(Workload, Kind)> {
    let (workload, implementation) = cfg.cell.clone().context("a W7 process needs --cell")?;
    let w = Workload::of(&workload).with_context(|| format!("not a W7 workload: {workload}"))?;
    let kind = Kind::of(&implementation)
        .with_context(|| format!("no W7 implementation {implementation:?}"))?;
    Ok((w, kind))
}

/// The cells of `workload`: for every K, its floor and implementations (in that order; the
/// runner interleaves their runs).
pub async fn suite(r: &mut Runner, workload: Workload, procs: &[usize], secs: u64) {
    for &k in procs {
        let w = workload.label(k);
        for &kind in workload.kinds() {
            if cfg!(not(feature = "redlease")) && family(kind.name()) == "redlease" {
                r.not_applicable(
                    &w,
                    kind.name(),
                    "bench built without the `redlease` feature",
                );
                continue;
            }
            r.measure(&w, kind.name(), |deadline| coordinate(k, secs, deadline))
                .await;
        }
    }
}

/// A W7 process's own part (`--w7-worker I`): prints its results on stdout and exits.
pub async fn worker(cfg: &Config, index: usize) -> ! {
    let outcome = async {
        let (workload, kind) = cell_of(cfg)?;
        let target = target_of(cfg, workload)?;
        work(workload, kind, index, &target, cfg.w7_secs).await
    }
    .await;
    if let Err(e) = outcome {
        let text = format!("{e:#}").replace('\n', " ");
        println!("{FAILED} process {index}: {text}");
    }
    let _ = std::io::stdout().flush();
    // Do not wait for threads or tasks an implementation left behind.
    std::process::exit(0);
}

/// What a process saw under the lock.
#[derive(Default)]
struct Tally {
    writes: usize,
    /// P3: the most INCR of `inside` returned.
    most_inside: i64,
    /// P2: acquisitions that found a write inside with them, or (a write) anybody at all.
    overlaps: usize,
}

/// What a P2 write adds to `inside` while it is in: more than any number of readers.
const A_WRITE_INSIDE: i64 = 1_000_000;

impl Op {
    /// Its commands, under the lock. `marked` (P2): a write counts itself in `inside` as
    /// [`A_WRITE_INSIDE`] and a read as 1 while they run, so a read that meets a write, or a
    /// write that meets anybody, is counted in `overlaps`.
    async fn run(self, conn: &mut Conn, tally: &mut Tally, marked: bool) -> Result<()> {
        let mark = match self {
            Op::Write => A_WRITE_INSIDE,
            Op::Read => 1,
            Op::Enter => 0,
        };
        if marked && mark > 0 {
            let inside: i64 = conn
                .query(redis::cmd("INCRBY").arg(INSIDE_KEY).arg(mark))
                .await?;
            let alone = match self {
                Op::Write => inside == A_WRITE_INSIDE,
                _ => inside < A_WRITE_INSIDE,
            };
            if !alone {
                tally.overlaps += 1;
            }
        }
        match self {
            Op::Write => {
                let v: Option<i64> = conn.query(redis::cmd("GET").arg(COUNTER_KEY)).await?;
                let next = v.unwrap_or(0) + 1;
                conn.query::<()>(redis::cmd("SET").arg(COUNTER_KEY).arg(next))
                    .await?;
                tally.writes += 1;
            }
            Op::Read => {
                conn.query::<Option<i64>>(redis::cmd("GET").arg(COUNTER_KEY))
                    .await?;
            }
            Op::Enter => {
                let inside: i64 = conn.query(redis::cmd("INCR").arg(INSIDE_KEY)).await?;
                tally.most_inside = tally.most_inside.max(inside);
                conn.query::<i64>(redis::cmd("DECR").arg(INSIDE_KEY))
                    .await?;
            }
        }
        if marked && mark > 0 {
            conn.query::<i64>(redis::cmd("DECRBY").arg(INSIDE_KEY).arg(mark))
                .await?;
        }
        Ok(())
    }
}

async fn work(
    workload: Workload,
    kind: Kind,
    index: usize,
    target: &Target,
    secs: u64,
) -> Result<()> {
    let mut conn = Conn::open(target, Duration::from_secs(5)).await?;
    let mut locker = Locker::open(kind, target).await?;
    for i in 0..WARM_UP {
        let held = locker.lock(workload.op(index, i)).await?;
        locker.unlock(held).await?;
    }
    println!("{READY}");
    std::io::stdout().flush()?;
    let mut go = String::new();
    let mut stdin = BufReader::new(tokio::io::stdin());
    match tokio::time::timeout(READY_BOUND, stdin.read_line(&mut go)).await {
        Ok(Ok(n)) if n > 0 => {}
        Ok(Ok(_)) => bail!("the coordinator went away before the start"),
        Ok(Err(e)) => return Err(e.into()),
        Err(_) => bail!("no start within {READY_BOUND:?}"),
    }
    let mut waits: Vec<Duration> = Vec::new();
    let mut tally = Tally::default();
    let usage_before = Usage::now()?;
    let start = Instant::now();
    let end = start + Duration::from_secs(secs);
    // Bounded by time (and every wait by WAIT_BOUND).
    while Instant::now() < end {
        let op = workload.op(index, WARM_UP + waits.len());
        let t0 = Instant::now();
        let held = locker.lock(op).await?;
        waits.push(t0.elapsed());
        op.run(&mut conn, &mut tally, workload == Workload::P2)
            .await?;
        locker.unlock(held).await?;
    }
    let elapsed = start.elapsed();
    let usage = Usage::now()?.since(&usage_before);
    locker.close().await;
    let us: Vec<String> = waits.iter().map(|w| w.as_micros().to_string()).collect();
    let Tally {
        writes,
        most_inside,
        overlaps,
    } = tally;
    println!(
        "{DONE} {} {} {writes} {most_inside} {overlaps}",
        waits.len(),
        elapsed.as_micros()
    );
    println!("{WAITS} {}", us.join(","));
    println!("{LOST} {}", crate::losses::count());
    println!(
        "{CPU} {} {} {}",
        usage.cpu_us, usage.voluntary, usage.involuntary
    );
    Ok(())
}

/// A process's resource usage (`getrusage(RUSAGE_SELF)`: every thread of it), or the
/// difference of two readings.
#[derive(Clone, Copy, Default, PartialEq, Debug)]
struct Usage {
    /// User + system CPU time, µs.
    cpu_us: u64,
    /// Context switches: voluntary (`ru_nvcsw`: it blocked), involuntary (`ru_nivcsw`:
    /// preempted).
    voluntary: u64,
    involuntary: u64,
}

impl Usage {
    fn now() -> Result<Usage> {
        let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
        // SAFETY: getrusage only writes the struct it is given.
        if unsafe { libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr()) } != 0 {
            return Err(std::io::Error::last_os_error()).context("getrusage");
        }
        // SAFETY: zeroed, then filled in by getrusage; every field is plain data.
        let ru = unsafe { ru.assume_init() };
        let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
        Ok(Usage {
            cpu_us: us(ru.ru_utime) + us(ru.ru_stime),
            voluntary: ru.ru_nvcsw as u64,
            involuntary: ru.ru_nivcsw as u64,
        })
    }

    fn since(&self, before: &Usage) -> Usage {
        Usage {
            cpu_us: self.cpu_us.saturating_sub(before.cpu_us),
            voluntary: self.voluntary.saturating_sub(before.voluntary),
            involuntary: self.involuntary.saturating_sub(before.involuntary),
        }
    }
}

/// What one process reported.
struct Report {
    acquisitions: usize,
    elapsed: Duration,
    writes: usize,
    most_inside: i64,
    overlaps: usize,
    waits: Vec<Duration>,
    /// Leases its client reported lost (none reported: 0).
    lost: u64,
    /// Its CPU and context switches over the measured part.
    usage: Usage,
}

fn parse_report(lines: &[String]) -> Result<Report> {
    if let Some(err) = lines.iter().find_map(|l| l.strip_prefix(FAILED)) {
        bail!("{}", err.trim());
    }
    let done = lines
        .iter()
        .find_map(|l| l.strip_prefix(DONE))
        .context("a W7 process reported no result")?;
    let mut f = done.split_whitespace();
    let acquisitions: usize = f.next().context("no count")?.parse()?;
    let elapsed = Duration::from_micros(f.next().context("no time")?.parse()?);
    let writes = f.next().context("no writes")?.parse()?;
    let most_inside = f.next().context("no count inside")?.parse()?;
    let overlaps = f.next().context("no overlaps")?.parse()?;
    let waits = lines
        .iter()
        .find_map(|l| l.strip_prefix(WAITS))
        .context("a W7 process reported no waits")?
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().map(Duration::from_micros))
        .collect::<Result<Vec<_>, _>>()?;
    anyhow::ensure!(waits.len() == acquisitions, "waits and count differ");
    let lost = match lines.iter().find_map(|l| l.strip_prefix(LOST)) {
        Some(n) => n.trim().parse()?,
        None => 0,
    };
    let mut u = lines
        .iter()
        .find_map(|l| l.strip_prefix(CPU))
        .context("a W7 process reported no CPU")?
        .split_whitespace();
    let usage = Usage {
        cpu_us: u.next().context("no CPU time")?.parse()?,
        voluntary: u.next().context("no voluntary switches")?.parse()?,
        involuntary: u.next().context("no involuntary switches")?.parse()?,
    };
    Ok(Report {
        lost,
        usage,
        acquisitions,
        elapsed,
        writes,
        most_inside,
        overlaps,
        waits,
    })
}

/// Jain's fairness index of the processes' counts: 1 when all equal, 1/n when one has all.
pub fn jain(counts: &[usize]) -> f64 {
    let sum: f64 = counts.iter().map(|&c| c as f64).sum();
    let squares: f64 = counts.iter().map(|&c| (c as f64) * (c as f64)).sum();
    if squares == 0.0 {
        return f64::NAN;
    }
    sum * sum / (counts.len() as f64 * squares)
}

async fn counters(nodes: &[String]) -> Result<Counters> {
    let nodes = nodes.to_vec();
    tokio::task::spawn_blocking(move || {
        let mut total = Counters::default();
        for url in &nodes {
            let c = RedisServer::attach(url)?.counters()?;
            total.scripts += c.scripts;
            total.commands += c.commands;
        }
        Ok(total)
    })
    .await?
}

/// A W7 process as the coordinator sees it.
struct Proc {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

/// The coordinator's run (in the cell's child process): K processes, one result.
async fn coordinate(k: usize, secs: u64, deadline: Instant) -> Result<Vec<Measure>> {
    let cfg = Config::parse(std::env::args().skip(1));
    let (workload, kind) = cell_of(&cfg)?;
    let target = target_of(&cfg, workload)?;
    let mut admin = Conn::open(&target, Duration::from_secs(5)).await?;
    admin
        .query::<()>(
            redis::cmd("DEL")
                .arg(COUNTER_KEY)
                .arg(TOKEN_KEY)
                .arg(INSIDE_KEY),
        )
        .await?;
    if kind.tokens() > 0 {
        let tokens = vec!["token"; kind.tokens() as usize];
        admin
            .query::<()>(redis::cmd("RPUSH").arg(TOKEN_KEY).arg(tokens))
            .await?;
    }
    let exe = std::env::current_exe()?;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut procs = Vec::with_capacity(k);
    for i in 0..k {
        let mut cmd = tokio::process::Command::new(&exe);
        cmd.args(&args).args(["--w7-worker", &i.to_string()]);
        as_child(&mut cmd);
        let mut child = cmd.spawn().context("spawning a W7 process")?;
        let stdin = child.stdin.take().context("no stdin")?;
        let stdout = child.stdout.take().context("no stdout")?;
        procs.push(Proc {
            child,
            stdin,
            lines: BufReader::new(stdout).lines(),
        });
    }
    // Every process connected and warmed up.
    let ready_by = (Instant::now() + READY_BOUND).min(deadline);
    for (i, p) in procs.iter_mut().enumerate() {
        loop {
            let line = tokio::time::timeout_at(ready_by.into(), p.lines.next_line())
                .await
                .map_err(|_| anyhow!("W7 process {i} not ready in time"))??;
            match line {
                Some(l) if l == READY => break,
                Some(l) if l.starts_with(FAILED) => bail!("{}", l.trim_start_matches(FAILED)),
                Some(_) => continue,
                None => bail!("W7 process {i} exited before it was ready"),
            }
        }
    }
    let before = counters(&target.node_urls()).await?;
    for p in &mut procs {
        p.stdin.write_all(b"go\n").await?;
        p.stdin.flush().await?;
    }
    // Their results, read at once from all (a process blocked writing its waits must not
    // hold up another's).
    let report_by = Instant::now() + Duration::from_secs(secs) + REPORT_GRACE;
    let reports =
        futures::future::try_join_all(procs.iter_mut().enumerate().map(|(i, p)| async move {
            let mut lines = Vec::new();
            let read = async {
                while let Some(l) = p.lines.next_line().await? {
                    lines.push(l);
                }
                let status = p.child.wait().await?;
                anyhow::Ok(status)
            };
            let status = tokio::time::timeout_at(report_by.into(), read)
                .await
                .map_err(|_| anyhow!("W7 process {i} did not finish in time"))??;
            let report = parse_report(&lines).with_context(|| format!("W7 process {i}"))?;
            anyhow::ensure!(status.success(), "W7 process {i} exited with {status}");
            anyhow::Ok(report)
        }))
        .await?;
    let after = counters(&target.node_urls()).await?;
    let counter: Option<i64> = admin.query(redis::cmd("GET").arg(COUNTER_KEY)).await?;
    drop(procs);

    let counts: Vec<usize> = reports.iter().map(|r| r.acquisitions).collect();
    let total: usize = counts.iter().sum();
    let writes: usize = reports.iter().map(|r| r.writes).sum();
    let most_inside = reports.iter().map(|r| r.most_inside).max().unwrap_or(0);
    let overlaps: usize = reports.iter().map(|r| r.overlaps).sum();
    let lost: u64 = reports.iter().map(|r| r.lost).sum();
    let usage = reports.iter().fold(Usage::default(), |a, r| Usage {
        cpu_us: a.cpu_us + r.usage.cpu_us,
        voluntary: a.voluntary + r.usage.voluntary,
        involuntary: a.involuntary + r.usage.involuntary,
    });
    let counter = counter.unwrap_or(0);
    let elapsed = reports.iter().map(|r| r.elapsed).max().unwrap_or_default();
    let mut waits: Vec<Duration> = reports.into_iter().flat_map(|r| r.waits).collect();
    let max = waits.iter().max().copied().unwrap_or_default();
    let (p50, p99) = p50_p99(&mut waits);
    let scripts = after.scripts.saturating_sub(before.scripts) as f64;
    let per_acq = |n: u64| n as f64 / total.max(1) as f64;
    let mut measures = vec![
        Measure::new(ACQ_PER_SEC, Unit::PerSec, per_sec(total, elapsed)),
        Measure::new(ACQUISITIONS, Unit::Count, total as f64),
        Measure::new(SCRIPTS_PER_ACQ, Unit::Ratio, scripts / total.max(1) as f64),
        Measure::new(CLIENT_CPU_PER_ACQ, Unit::Micros, per_acq(usage.cpu_us)),
        Measure::new(CLIENT_VCSW_PER_ACQ, Unit::Ratio, per_acq(usage.voluntary)),
        Measure::new(
            CLIENT_IVCSW_PER_ACQ,
            Unit::Ratio,
            per_acq(usage.involuntary),
        ),
        Measure::dist(WAIT, p50, p99),
        Measure::new(WAIT_MAX, Unit::Micros, micros(max)),
        Measure::new(JAIN, Unit::Ratio, jain(&counts)),
    ];
    // Its check: no lost update (W7, C7: every acquisition increments; P2: every write), or no
    // more inside than the permits (P3).
    measures.extend(match workload {
        Workload::W7 | Workload::C7 | Workload::K1 => vec![Measure::new(
            COUNTER_OFF,
            Unit::Count,
            (counter - total as i64) as f64,
        )],
        Workload::P2 => vec![
            Measure::new(WRITES, Unit::Count, writes as f64),
            Measure::new(
                COUNTER_OFF_WRITES,
                Unit::Count,
                (counter - writes as i64) as f64,
            ),
            Measure::new(OVERLAPS, Unit::Count, overlaps as f64),
        ],
        Workload::P3 => vec![Measure::new(MOST_INSIDE, Unit::Count, most_inside as f64)],
    });
    if family(kind.name()) == "redlease" {
        // Its processes' false losses, and this one's (it holds nothing).
        measures.push(crate::losses::measure(lost));
    }
    Ok(measures)
}

/// Makes `cmd` a child the bench talks to: stdin and stdout piped, stderr shared, killed when
/// dropped, and killed by the kernel when the thread that spawned it dies (`PR_SET_PDEATHSIG`),
/// so no measuring process outlives a bench that crashed.
pub(crate) fn as_child(cmd: &mut tokio::process::Command) {
    cmd.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true);
    // SAFETY: the hook only makes the prctl system call.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jain_index() {
        assert_eq!(jain(&[5, 5, 5, 5]), 1.0);
        assert_eq!(jain(&[8, 0, 0, 0]), 0.25);
        assert!((jain(&[1, 2]) - 0.9).abs() < 1e-12);
    }

    #[test]
    fn labels() {
        assert_eq!(Workload::W7.label(4), "W7 4 processes");
        assert_eq!(Workload::C7.label(8), "C7 cluster 8 processes");
        assert_eq!(Workload::P2.label(4), "P2 4 processes");
        assert_eq!(Workload::P3.label(8), "P3 8 processes");
        for w in Workload::ALL {
            assert_eq!(family(&w.label(4)), w.selector());
            assert_eq!(Workload::of(&w.label(4)), Some(w));
        }
        assert_eq!(Workload::of("F2 read-write (90% reads)"), None);
        assert_eq!(
            one_server_label(&Workload::C7.label(8)).as_deref(),
            Some(Workload::W7.label(8).as_str())
        );
        for kind in Kind::ALL {
            assert_eq!(Kind::of(kind.name()), Some(kind));
        }
        assert_eq!(family(FLOOR_TOKENS), "floor");
        // Its own family: selected with `--impls floor+reply`, compared with the floor.
        assert_eq!(family(FLOOR_REPLY), "floor+reply");
        assert_eq!(family(FLOOR_CALL), "floor+call");
    }

    /// P2: every tenth acquisition of each process a write, the writes staggered over the
    /// processes; the others have one kind of acquisition.
    #[test]
    fn ops() {
        for index in 0..8 {
            let ops: Vec<Op> = (0..100).map(|i| Workload::P2.op(index, i)).collect();
            for tenth in ops.chunks(10) {
                assert_eq!(tenth.iter().filter(|&&o| o == Op::Write).count(), 1);
                assert_eq!(tenth.iter().filter(|&&o| o == Op::Read).count(), 9);
            }
        }
        assert_ne!(Workload::P2.op(0, 0), Workload::P2.op(1, 0));
        assert!((0..20).all(|i| Workload::W7.op(3, i) == Op::Write));
        assert!((0..20).all(|i| Workload::P3.op(3, i) == Op::Enter));
    }

    /// The readings move forward with work done, and their difference is what was done between.
    #[test]
    fn usage() {
        let before = Usage::now().expect("getrusage");
        let t = Instant::now();
        let mut x = 0u64;
        // Busy until 5 ms of CPU show (bounded: a reading that never moves fails).
        while Usage::now().expect("getrusage").since(&before).cpu_us < 5_000 {
            assert!(t.elapsed() < Duration::from_secs(10), "no CPU time counted");
            for _ in 0..10_000 {
                x = std::hint::black_box(x.wrapping_add(1));
            }
        }
        assert_eq!(before.since(&before), Usage::default());
    }

    #[test]
    fn reports() {
        let lines = [
            "noise".to_string(),
            "W7DONE 3 1000000 1 8 2".into(),
            "W7WAITS 5,6,7".into(),
            "W7LOST 2".into(),
            "W7CPU 480 9 1".into(),
        ];
        let r = parse_report(&lines).expect("parses");
        assert_eq!(r.lost, 2);
        assert_eq!(
            r.usage,
            Usage {
                cpu_us: 480,
                voluntary: 9,
                involuntary: 1
            }
        );
        assert!(parse_report(&lines[..4]).is_err(), "no CPU line");
        assert_eq!(
            (r.acquisitions, r.writes, r.most_inside, r.overlaps),
            (3, 1, 8, 2)
        );
        assert_eq!(r.elapsed, Duration::from_secs(1));
        assert_eq!(r.waits.len(), 3);
        assert!(parse_report(&["W7DONE 3 1000000".to_string(), "W7WAITS 5,6,7".into()]).is_err());
        assert!(parse_report(&["W7ERROR process 1: gone".to_string()]).is_err());
    }
}
