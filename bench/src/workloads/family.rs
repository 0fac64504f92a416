//! The lock family against redlease's own `Lock` (no peer has all of them):
//! - F1: W2's shape (tasks share one lock, a non-atomic counter under it) over two clients,
//!   with `FairLock` and with `Lock` (the same lock on the same keys; `FairLock` is strict:
//!   every attempt respects the server's queue);
//! - F2: `tasks` tasks on one `ReadWriteLock`, nine reads to one write;
//! - F3: `tasks` tasks share a `Semaphore` of 8 permits.

use std::time::{Duration, Instant};

use anyhow::Result;
use redis::AsyncCommands;
use tokio::task::JoinSet;

use crate::model::{
    ACQ_PER_SEC, COUNTER, HANDOFFS, Measure, READS_PER_SEC, Unit, WAIT, WAIT_MAX, WRITE_WAIT_MAX,
};
use crate::stats::{micros, p50_p99, per_sec};

const COUNTER_KEY: &str = "bench:family:counter";

/// Which lock F1 runs on.
#[derive(Clone, Copy)]
pub enum Kind {
    Lock,
    Fair,
}

/// One acquisition: the counter read under the lock, the task, its wait.
type Rec = (i64, usize, Duration);

/// F1: `tasks` tasks over two clients, `rounds` rounds each of (acquire, GET, SET +1, release).
pub async fn fair(url: &str, kind: Kind, tasks: usize, rounds: usize) -> Result<Vec<Measure>> {
    let clients = [
        crate::redlease_impl::client(url).await?,
        crate::redlease_impl::client(url).await?,
    ];
    let mut conn = redis::Client::open(url)?.get_connection_manager().await?;
    let _: () = conn.del(COUNTER_KEY).await?;
    let name = "bench:family:f1";
    let start = Instant::now();
    let mut set = JoinSet::new();
    for task in 0..tasks {
        let (client, mut conn) = (clients[task % 2].clone(), conn.clone());
        set.spawn(async move {
            let (lock, fair) = (client.lock(name)?, client.fair_lock(name)?);
            let mut recs: Vec<Rec> = Vec::with_capacity(rounds);
            for _ in 0..rounds {
                let t0 = Instant::now();
                // A `LockGuard` either way: a `FairLock` is a `Lock` in strict mode.
                let guard = match kind {
                    Kind::Lock => lock.lock().await?,
                    Kind::Fair => fair.lock().await?,
                };
                let wait = t0.elapsed();
                let v: Option<i64> = conn.get(COUNTER_KEY).await?;
                let v = v.unwrap_or(0);
                let _: () = conn.set(COUNTER_KEY, v + 1).await?;
                guard.unlock().await?;
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
    let counter: Option<i64> = conn.get(COUNTER_KEY).await?;
    for client in clients {
        client.shutdown().await?;
    }
    recs.sort_by_key(|r| r.0);
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
    ])
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
