//! The lock family against redlease's own `Lock` (no peer has all of them):
//! - F1: W2's shape (tasks share one lock, a non-atomic counter under it) over two clients,
//!   with `FairLock` and with `Lock` (the same lock on the same keys; `FairLock` is strict:
//!   every attempt respects the server's queue);
//! - F2: `tasks` tasks on one `ReadWriteLock`, nine reads to one write;
//! - F3: `tasks` tasks share a `Semaphore` of 8 permits;
//! - F4: W2's shape on one client, with the exclusive kinds of each in-client hand-over: the
//!   `Lock` (a release hands the lock to the waiting head it names) and the read-write lock's
//!   write side and a `Semaphore` of 1 (every waiter queues on the server; a release names the
//!   client's waiters it granted), with the server's script calls per acquisition.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use redis::AsyncCommands;
use redis::aio::ConnectionManager;
use tokio::task::JoinSet;

use crate::model::{
    ACQ_PER_SEC, COUNTER, HANDOFFS, Measure, READS_PER_SEC, SCRIPT_US_PER_ACQ, SCRIPTS_PER_ACQ,
    Unit, WAIT, WAIT_MAX, WRITE_WAIT_MAX,
};
use crate::stats::{micros, p50_p99, per_sec};

const COUNTER_KEY: &str = "bench:family:counter";

/// Which lock F1 and F4 run on.
#[derive(Clone, Copy)]
pub enum Kind {
    Lock,
    Fair,
    /// The write side of a `ReadWriteLock`.
    Write,
    /// A `Semaphore` of one permit.
    Semaphore1,
}

/// One acquisition: the counter read under the lock, the task, its wait.
type Rec = (i64, usize, Duration);

/// F1 (`clients` 2) and F4 (1): `tasks` tasks over `clients` clients, `rounds` rounds each of
/// (acquire, GET, SET +1, release).
pub async fn fair(
    url: &str,
    kind: Kind,
    clients: usize,
    tasks: usize,
    rounds: usize,
) -> Result<Vec<Measure>> {
    let mut all = Vec::with_capacity(clients);
    for _ in 0..clients.max(1) {
        all.push(crate::redlease_impl::client(url).await?);
    }
    let mut conn = redis::Client::open(url)?.get_connection_manager().await?;
    let _: () = conn.del(COUNTER_KEY).await?;
    let name = "bench:family:f1";
    if let Kind::Semaphore1 = kind {
        all[0].semaphore(name)?.set_permits(1).await?;
    }
    let scripts_before = script_calls(&mut conn).await?;
    let start = Instant::now();
    let mut set = JoinSet::new();
    for task in 0..tasks {
        let (client, mut conn) = (all[task % all.len()].clone(), conn.clone());
        set.spawn(async move {
            let (lock, fair) = (client.lock(name)?, client.fair_lock(name)?);
            let (rw, semaphore) = (client.read_write_lock(name)?, client.semaphore(name)?);
            let mut recs: Vec<Rec> = Vec::with_capacity(rounds);
            for _ in 0..rounds {
                let t0 = Instant::now();
                // Each arm: acquire, the wait, the counter's round, release.
                let (wait, v) = match kind {
                    // A `LockGuard` either way: a `FairLock` is a `Lock` in strict mode.
                    Kind::Lock | Kind::Fair => {
                        let guard = match kind {
                            Kind::Fair => fair.lock().await?,
                            _ => lock.lock().await?,
                        };
                        let wait = t0.elapsed();
                        let v = count_up(&mut conn).await?;
                        guard.unlock().await?;
                        (wait, v)
                    }
                    Kind::Write => {
                        let guard = rw.write().lock().await?;
                        let wait = t0.elapsed();
                        let v = count_up(&mut conn).await?;
                        guard.unlock().await?;
                        (wait, v)
                    }
                    Kind::Semaphore1 => {
                        semaphore.acquire().await?;
                        let wait = t0.elapsed();
                        let v = count_up(&mut conn).await?;
                        semaphore.release(1).await?;
                        (wait, v)
                    }
                };
                recs.push((v, task, wait));
            }
            anyhow::Ok(recs)
        });
    }
    let mut recs = Vec::with_capacity(tasks * rounds);
    while let Some(r) = set.join_next().await {
        recs.extend(r??);
    }
    let elapsed = start.elapsed();
    let (calls, usec) = script_calls(&mut conn).await?;
    let scripts = calls.saturating_sub(scripts_before.0);
    let script_us = usec - scripts_before.1;
    let counter: Option<i64> = conn.get(COUNTER_KEY).await?;
    for client in all {
        client.shutdown().await?;
    }
    recs.sort_by_key(|r| r.0);
    let n = recs.len().max(1) as f64;
    let handoffs = recs.windows(2).filter(|w| w[0].1 != w[1].1).count();
    let mut waits: Vec<Duration> = recs.iter().map(|r| r.2).collect();
    let max = waits.iter().max().copied().unwrap_or_default();
    let (p50, p99) = p50_p99(&mut waits);
    Ok(vec![
        Measure::new(ACQ_PER_SEC, Unit::PerSec, per_sec(recs.len(), elapsed)),
        Measure::new(COUNTER, Unit::Count, counter.unwrap_or(0) as f64),
        Measure::new(HANDOFFS, Unit::Count, handoffs as f64),
        Measure::dist(WAIT, p50, p99),
        Measure::new(WAIT_MAX, Unit::Micros, micros(max)),
        Measure::new(SCRIPTS_PER_ACQ, Unit::Ratio, scripts as f64 / n),
        Measure::new(SCRIPT_US_PER_ACQ, Unit::Ratio, script_us / n),
    ])
}

/// The counter's round under the hold (GET, SET +1, not atomic): the value read.
async fn count_up(conn: &mut ConnectionManager) -> Result<i64> {
    let v: Option<i64> = conn.get(COUNTER_KEY).await?;
    let v = v.unwrap_or(0);
    let _: () = conn.set(COUNTER_KEY, v + 1).await?;
    Ok(v)
}

/// The script calls (EVAL, EVALSHA, FCALL) the server has run so far, and the µs it spent in
/// them (INFO commandstats).
async fn script_calls(conn: &mut ConnectionManager) -> Result<(u64, f64)> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await?;
    let (mut calls, mut usec) = (0, 0.0);
    for line in info.lines() {
        let Some((name, stats)) = line.split_once(':') else {
            continue;
        };
        if ![
            "cmdstat_eval",
            "cmdstat_evalsha",
            "cmdstat_evalsha_ro",
            "cmdstat_fcall",
        ]
        .contains(&name)
        {
            continue;
        }
        let field = |key: &str| {
            let value = stats.split(',').find_map(|f| f.strip_prefix(key));
            value.with_context(|| format!("no {key} in commandstats"))
        };
        calls += field("calls=")?.parse::<u64>()?;
        usec += field("usec=")?.parse::<f64>()?;
    }
    Ok((calls, usec))
}

/// F2: `tasks` tasks, `rounds` acquisitions each; every tenth is a write.
pub async fn read_mostly(url: &str, tasks: usize, rounds: usize) -> Result<Vec<Measure>> {
    let client = crate::redlease_impl::client(url).await?;
    let rw = client.read_write_lock("bench:family:f2")?;
    let start = Instant::now();
    let mut set = JoinSet::new();
    for task in 0..tasks {
        let rw = rw.clone();
        set.spawn(async move {
            let (mut reads, mut write_waits) = (0usize, Vec::new());
            for round in 0..rounds {
                if (task + round) % 10 == 0 {
                    let t0 = Instant::now();
                    let g = rw.write().lock().await?;
                    write_waits.push(t0.elapsed());
                    g.unlock().await?;
                } else {
                    rw.read().lock().await?.unlock().await?;
                    reads += 1;
                }
            }
            anyhow::Ok((reads, write_waits))
        });
    }
    let (mut reads, mut write_max) = (0, Duration::ZERO);
    while let Some(r) = set.join_next().await {
        let (n, waits) = r??;
        reads += n;
        write_max = waits.into_iter().fold(write_max, Duration::max);
    }
    let elapsed = start.elapsed();
    client.shutdown().await?;
    Ok(vec![
        Measure::new(READS_PER_SEC, Unit::PerSec, per_sec(reads, elapsed)),
        Measure::new(WRITE_WAIT_MAX, Unit::Micros, micros(write_max)),
    ])
}

/// F3: `tasks` tasks, `rounds` rounds each of acquire(1) / release(1) on 8 permits.
pub async fn semaphore(url: &str, tasks: usize, rounds: usize) -> Result<Vec<Measure>> {
    let client = crate::redlease_impl::client(url).await?;
    let permits = client.semaphore("bench:family:f3")?;
    permits.set_permits(8).await?;
    let start = Instant::now();
    let mut set = JoinSet::new();
    for _ in 0..tasks {
        let permits = permits.clone();
        set.spawn(async move {
            let mut waits = Vec::with_capacity(rounds);
            for _ in 0..rounds {
                let t0 = Instant::now();
                permits.acquire().await?;
                waits.push(t0.elapsed());
                permits.release(1).await?;
            }
            anyhow::Ok(waits)
        });
    }
    let mut waits = Vec::with_capacity(tasks * rounds);
    while let Some(r) = set.join_next().await {
        waits.extend(r??);
    }
    let elapsed = start.elapsed();
    client.shutdown().await?;
    let max = waits.iter().max().copied().unwrap_or_default();
    let (p50, p99) = p50_p99(&mut waits);
    Ok(vec![
        Measure::new(ACQ_PER_SEC, Unit::PerSec, per_sec(waits.len(), elapsed)),
        Measure::dist(WAIT, p50, p99),
        Measure::new(WAIT_MAX, Unit::Micros, micros(max)),
    ])
}
