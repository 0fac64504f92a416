//! L1 (L1C on the cluster, L1S behind Sentinel): how soon a holder hears that its lock is gone.
//! A holder under the watchdog (the default 30 s lease: its next renewal is up to ten seconds
//! away) holds a lock; then its key goes, by one cause per cell:
//!
//! - `DEL` of the key from an admin connection to the node that holds it;
//! - `FLUSHDB` (on the cluster: on every primary, the key's own last);
//! - eviction: the node that holds the key gets `maxmemory` = its `used_memory` + 2 MiB and
//!   `maxmemory-policy allkeys-lru`, and an admin connection writes 64 KiB values in the key's
//!   hash slot, each followed by `EXISTS` of the key (it does not touch the key's LRU clock),
//!   until `EXISTS` answers 0; the node's `maxmemory` and policy are then put back and the fill
//!   is flushed once the trial is over. The server evicts before it runs a command, so the key
//!   went while it ran that last write or that `EXISTS`: after the previous `EXISTS` answered
//!   1, and at the latest one round trip after the last write's reply;
//! - `force_unlock` from another process: a child process of this binary (its own redlease
//!   client of the same deployment) forces the lock when told on its stdin.
//!
//! Measured: from the cause to the holder's `lost()` resolving (seen by a task of the holder's
//! process). The origin is the reply of the command that removed the key: the `DEL`'s, the
//! `FLUSHDB`'s (the key's node's), the forcing process's `force_unlock` returning, and for an
//! eviction the reply of the fill's last write (the write after which `EXISTS` found the key
//! gone: the key went during that write, or during that `EXISTS`, in which case the figure
//! counts up to one round trip too many, never too few). Both sides read `CLOCK_MONOTONIC`,
//! which is one clock for every process of the machine; a holder told before the reply reached
//! the side that sent the command counts as 0 (the push and the reply leave the server
//! together).
//!
//! Each trial is bounded: 5 s on one server, 12 s on the cluster and behind Sentinel (where,
//! without the server-pushed notice, the next watchdog renewal tells the holder: up to 10 s).
//! A trial past its bound fails the cell. On the cluster and behind Sentinel the trials also
//! stop after [`SLOW_BUDGET`] (or the run's cap), so a row measured at the renewal's pace (a
//! few seconds a trial) still ends; the row says how many trials it has.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use redis::aio::MultiplexedConnection;
use redlease::Client;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::model::{Measure, NOTICE, NOTICE_MAX, NOTICE_TRIALS, Unit};
use crate::stats::{micros, p50_p99};

/// How long a trial waits after its grant: past two of the holder's loss-notice arming delays
/// (a hold is armed one to two delays after its grant), so each trial's hold is armed.
fn settle(holder: &Client) -> Duration {
    2 * holder.config().loss_notice_delay + Duration::from_millis(10)
}
/// A trial that takes longer failed: on one server the watchdog alone would take seconds.
const LIMIT_ONE: Duration = Duration::from_secs(5);
/// On the cluster and behind Sentinel: past the watchdog's renewal (10 s with the default lease).
const LIMIT_SLOW: Duration = Duration::from_secs(12);
/// Time given to one cell's trials on the cluster and behind Sentinel (each trial may take a
/// renewal period there).
pub const SLOW_BUDGET: Duration = Duration::from_secs(40);
/// The eviction's room above the node's memory in use, and one fill write.
const EVICT_ROOM: u64 = 2 * 1024 * 1024;
const FILL_VALUE: usize = 64 * 1024;
/// Fill writes before the trial fails (2 MiB of room fill within ~32).
const FILL_BOUND: usize = 2000;

/// Set in a forcing process's environment: the deployment's URL.
pub const FORCER_VAR: &str = "REDLEASE_BENCH_FORCER";
const FORCED: &str = "FORCED";

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Deployment {
    One,
    Cluster,
    Sentinel,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Cause {
    Del,
    Flush,
    Evict,
    Force,
}

impl Cause {
    pub const ALL: [Cause; 4] = [Cause::Del, Cause::Flush, Cause::Evict, Cause::Force];

    /// Its implementation column.
    pub fn name(self, deployment: Deployment) -> &'static str {
        match (self, deployment) {
            (Cause::Del, _) => "redlease Lock: DEL",
            (Cause::Flush, Deployment::Cluster) => "redlease Lock: FLUSHDB on every primary",
            (Cause::Flush, _) => "redlease Lock: FLUSHDB",
            (Cause::Evict, _) => "redlease Lock: evicted (allkeys-lru)",
            (Cause::Force, _) => "redlease Lock: force_unlock from another process",
        }
    }
}

/// Where a cell runs: the URL the clients connect to, and the `redis://` URL of every node that
/// may hold the key (one server; the cluster's primaries; the Sentinel deployment's master).
#[derive(Clone, Debug)]
pub struct Target {
    pub deployment: Deployment,
    pub client_url: String,
    pub nodes: Vec<String>,
}

/// `CLOCK_MONOTONIC` in nanoseconds: the same clock in every process of the machine.
fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Up to `trials` trials of `cause` at `target`, within `deadline` (and, on the cluster and
/// behind Sentinel, [`SLOW_BUDGET`]).
pub async fn loss_notice(
    target: &Target,
    cause: Cause,
    trials: usize,
    deadline: Instant,
) -> Result<Vec<Measure>> {
    let (limit, stop) = match target.deployment {
        Deployment::One => (LIMIT_ONE, deadline),
        _ => (LIMIT_SLOW, deadline.min(Instant::now() + SLOW_BUDGET)),
    };
    let holder = Client::connect(&target.client_url).await?;
    let mut nodes = Vec::with_capacity(target.nodes.len());
    for url in &target.nodes {
        let client = redis::Client::open(url.as_str())?;
        nodes.push(client.get_multiplexed_async_connection().await?);
    }
    let mut forcer = match cause {
        Cause::Force => Some(Forcer::spawn(&target.client_url).await?),
        _ => None,
    };
    let mut samples = Vec::with_capacity(trials);
    for trial in 0..trials {
        if trial > 0 && Instant::now() + limit > stop {
            break;
        }
        let name = format!("bench:notice:{trial}");
        let key = format!("redlease:{{{name}}}");
        let guard = holder.lock(&name)?.lock().await?;
        let owner = owner_of(&mut nodes, &key).await?;
        tokio::time::sleep(settle(&holder)).await;
        if guard.is_lost() {
            bail!("the hold was lost before anything happened to it");
        }
        let lost = guard.lost();
        let watcher = tokio::spawn(async move {
            lost.await;
            mono_ns()
        });
        let caused = match cause {
            Cause::Del => {
                let _: i64 = redis::cmd("DEL")
                    .arg(&key)
                    .query_async(&mut nodes[owner])
                    .await?;
                mono_ns()
            }
            Cause::Flush => {
                // The key's own node last: the others' replies are not waited for after it.
                let order = (0..nodes.len()).filter(|&i| i != owner).chain([owner]);
                for i in order {
                    let _: () = redis::cmd("FLUSHDB").query_async(&mut nodes[i]).await?;
                }
                mono_ns()
            }
            Cause::Evict => evict(&mut nodes[owner], &name, &key).await?,
            Cause::Force => {
                let forcer = forcer.as_mut().context("no forcing process")?;
                forcer.force(&name).await?
            }
        };
        let told = match tokio::time::timeout(limit, watcher).await {
            Ok(at) => at?,
            Err(_) => bail!("lost() did not resolve within {limit:?} (trial {trial})"),
        };
        samples.push(Duration::from_nanos(told.saturating_sub(caused)));
        drop(guard);
        if cause == Cause::Evict {
            // The fill, now that the trial is over.
            let _: () = redis::cmd("FLUSHDB").query_async(&mut nodes[owner]).await?;
        }
    }
    if let Some(forcer) = forcer {
        forcer.close().await;
    }
    holder.shutdown().await?;
    let n = samples.len();
    let max = samples.iter().max().copied().unwrap_or_default();
    let (p50, p99) = p50_p99(&mut samples);
    Ok(vec![
        Measure::dist(NOTICE, p50, p99),
        Measure::new(NOTICE_MAX, Unit::Micros, micros(max)),
        Measure::new(NOTICE_TRIALS, Unit::Count, n as f64),
    ])
}

/// Which of `nodes` holds `key` (a cluster node that does not answers MOVED).
async fn owner_of(nodes: &mut [MultiplexedConnection], key: &str) -> Result<usize> {
    for (i, node) in nodes.iter_mut().enumerate() {
        let exists: redis::RedisResult<i64> = redis::cmd("EXISTS").arg(key).query_async(node).await;
        if let Ok(1) = exists {
            return Ok(i);
        }
    }
    bail!("no node holds {key}")
}

/// Evicts `key` from `node` (see the module docs); the instant the first `EXISTS` answered 0.
/// The node's `maxmemory` and policy are put back whatever happens.
async fn evict(node: &mut MultiplexedConnection, name: &str, key: &str) -> Result<u64> {
    let memory: String = redis::cmd("INFO").arg("memory").query_async(node).await?;
    let used: u64 = memory
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .context("no used_memory in INFO memory")?;
    let policy: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .query_async(node)
        .await?;
    let policy = policy
        .get(1)
        .cloned()
        .unwrap_or_else(|| "noeviction".into());
    let fill = async {
        let set = |param: &str, value: String| {
            let mut cmd = redis::cmd("CONFIG");
            cmd.arg("SET").arg(param).arg(value);
            cmd
        };
        let _: () = set("maxmemory-policy", "allkeys-lru".into())
            .query_async(node)
            .await?;
        let _: () = set("maxmemory", (used + EVICT_ROOM).to_string())
            .query_async(node)
            .await?;
        let value = vec![b'x'; FILL_VALUE];
        for i in 0..FILL_BOUND {
            let _: () = redis::cmd("SET")
                .arg(format!("fill:{{{name}}}:{i}"))
                .arg(&value)
                .query_async(node)
                .await?;
            let written = mono_ns();
            let exists: i64 = redis::cmd("EXISTS").arg(key).query_async(node).await?;
            if exists == 0 {
                return Ok(written);
            }
        }
        bail!("{key} was not evicted after {FILL_BOUND} writes of {FILL_VALUE} B")
    };
    let gone = fill.await;
    let restored: redis::RedisResult<()> = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(0)
        .arg("maxmemory-policy")
        .arg(&policy)
        .query_async(node)
        .await;
    let gone = gone?;
    restored.context("putting maxmemory back")?;
    Ok(gone)
}

/// The forcing process, as its parent sees it.
struct Forcer {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl Forcer {
    async fn spawn(url: &str) -> Result<Forcer> {
        let mut cmd = tokio::process::Command::new(std::env::current_exe()?);
        cmd.env(FORCER_VAR, url);
        super::processes::as_child(&mut cmd);
        let mut child = cmd.spawn().context("spawning the forcing process")?;
        let stdin = child.stdin.take().context("no stdin")?;
        let stdout = child.stdout.take().context("no stdout")?;
        let mut forcer = Forcer {
            child,
            stdin,
            lines: BufReader::new(stdout).lines(),
        };
        // Connected (its answer to a name nobody holds).
        forcer.force("bench:notice:nobody").await?;
        Ok(forcer)
    }

    /// Has the process force `name`; the instant its `force_unlock` returned.
    async fn force(&mut self, name: &str) -> Result<u64> {
        self.stdin.write_all(format!("{name}\n").as_bytes()).await?;
        self.stdin.flush().await?;
        let line = tokio::time::timeout(Duration::from_secs(10), self.lines.next_line())
            .await
            .context("the forcing process did not answer in 10 s")??
            .context("the forcing process ended")?;
        let at = line
            .strip_prefix(FORCED)
            .with_context(|| format!("the forcing process said {line:?}"))?;
        Ok(at.trim().parse()?)
    }

    async fn close(mut self) {
        drop(self.stdin);
        let _ = tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await;
    }
}

/// The forcing process (`REDLEASE_BENCH_FORCER=URL`): forces each lock named on its stdin and
/// prints `FORCED <CLOCK_MONOTONIC ns>` once its `force_unlock` returned; ends at EOF.
pub fn forcer(url: &str) -> Result<()> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(async {
            let client = Client::connect(url).await?;
            let mut lines = BufReader::new(tokio::io::stdin()).lines();
            while let Some(name) = lines.next_line().await? {
                client.lock(name.trim())?.force_unlock().await?;
                println!("{FORCED} {}", mono_ns());
                use std::io::Write as _;
                std::io::stdout().flush()?;
            }
            client.shutdown().await?;
            anyhow::Ok(())
        })
}
