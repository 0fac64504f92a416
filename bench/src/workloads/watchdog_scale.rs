//! W4: watchdog scale. Hold `n` locks in one client, then measure client heap
//! per held lock (counting allocator) and one renewal of all of them: a
//! forced tick for redlease (`renew_now`), one renewal period for rlock
//! (one renewal task per guard).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use tokio::task::JoinSet;

use crate::alloc::live_bytes;
use crate::locker::AsyncLocker;
use crate::model::{HELD, MEM, Measure, PERIOD_SCRIPTS, Unit};
use crate::server::{Counters, RedisServer};

/// Concurrent acquisitions / releases while building up the held set (fewer
/// when the implementation allows fewer: `AsyncLocker::MAX_IN_FLIGHT`).
const WORKERS: usize = 64;

pub struct Held<G> {
    pub guards: Vec<G>,
    pub bytes_per_lock: f64,
}

/// Acquires `n` distinct locks; heap growth over the acquisition, guards
/// included, divided by `n`.
pub async fn hold_many<L: AsyncLocker>(l: Arc<L>, n: usize) -> Result<Held<L::Guard>> {
    let workers = WORKERS.min(L::MAX_IN_FLIGHT);
    super::warm_up(&*l, "bench:w4:warm").await?;
    let before = live_bytes();
    let mut guards = Vec::with_capacity(n);
    let mut set = JoinSet::new();
    for w in 0..workers {
        let l = l.clone();
        set.spawn(async move {
            let mut mine = Vec::with_capacity(n / workers + 1);
            for i in (w..n).step_by(workers) {
                mine.push(l.lock(&format!("bench:w4:{i}")).await?);
            }
            anyhow::Ok(mine)
        });
    }
    while let Some(r) = set.join_next().await {
        guards.extend(r??);
    }
    drop(set);
    ensure!(guards.len() == n, "held {} of {n} locks", guards.len());
    let bytes_per_lock = (live_bytes() - before) as f64 / n as f64;
    Ok(Held {
        guards,
        bytes_per_lock,
    })
}

pub async fn release_all<L: AsyncLocker>(l: Arc<L>, guards: Vec<L::Guard>) -> Result<()> {
    let workers = WORKERS.min(L::MAX_IN_FLIGHT);
    let mut chunks: Vec<Vec<L::Guard>> = (0..workers).map(|_| Vec::new()).collect();
    for (i, g) in guards.into_iter().enumerate() {
        chunks[i % workers].push(g);
    }
    let mut set = JoinSet::new();
    for chunk in chunks {
        let l = l.clone();
        set.spawn(async move {
            for g in chunk {
                l.unlock(g).await?;
            }
            anyhow::Ok(())
        });
    }
    while let Some(r) = set.join_next().await {
        r??;
    }
    Ok(())
}

/// What the server processes while `f` runs, less the probes' own commands.
pub async fn server_counts<T>(
    server: &RedisServer,
    f: impl Future<Output = Result<T>>,
) -> Result<(T, Counters)> {
    let c0 = server.counters()?;
    let c1 = server.counters()?;
    let t = f.await?;
    let c2 = server.counters()?;
    let probe = c1.commands - c0.commands;
    let counts = Counters {
        commands: c2.commands.saturating_sub(c1.commands + probe),
        scripts: c2.scripts - c1.scripts,
    };
    Ok((t, counts))
}

/// Peers without a watchdog: heap per held lock only.
pub async fn memory_only<L: AsyncLocker>(l: Arc<L>, n: usize) -> Result<Vec<Measure>> {
    let held = hold_many(l.clone(), n).await?;
    let bytes = held.bytes_per_lock;
    release_all(l.clone(), held.guards).await?;
    l.close().await;
    Ok(vec![
        Measure::new(HELD, Unit::Count, n as f64),
        Measure::new(MEM, Unit::Bytes, bytes),
    ])
}

/// rlock renews each guard from its own task every TTL/2 (5 s by default):
/// count the renewal script calls the server sees over one such period.
pub async fn rlock(
    l: Arc<crate::peers::rlock::Rlock>,
    server: &RedisServer,
    n: usize,
) -> Result<Vec<Measure>> {
    const PERIOD: Duration = Duration::from_secs(5);
    let held = hold_many(l.clone(), n).await?;
    // Renewals come in bursts one period after the acquisitions: start the
    // window half a period later so that it does not cut a burst in two.
    tokio::time::sleep(PERIOD / 2).await;
    let started = Instant::now();
    let ((), counts) = server_counts(server, async {
        tokio::time::sleep(PERIOD).await;
        Ok(())
    })
    .await?;
    let window = started.elapsed().as_secs_f64();
    release_all(l.clone(), held.guards).await?;
    l.close().await;
    Ok(vec![
        Measure::new(HELD, Unit::Count, n as f64),
        Measure::new(MEM, Unit::Bytes, held.bytes_per_lock),
        Measure::new(
            PERIOD_SCRIPTS,
            Unit::Count,
            counts.scripts as f64 * PERIOD.as_secs_f64() / window,
        ),
    ])
}

#[cfg(feature = "redlease")]
pub async fn redlease(
    l: Arc<crate::redlease_impl::Redlease>,
    server: &RedisServer,
    n: usize,
) -> Result<Vec<Measure>> {
    use crate::model::{FAILED_BATCHES, LOST, TICK, TICK_CMDS, TICK_RT, TICK_SCRIPTS};
    use crate::stats::micros;

    let held = hold_many(l.clone(), n).await?;
    let tick = async {
        let t0 = Instant::now();
        let stats = l.renew_now().await?;
        Ok((stats, t0.elapsed()))
    };
    let ((stats, wall), counts) = server_counts(server, tick).await?;
    release_all(l.clone(), held.guards).await?;
    l.close().await;
    ensure!(
        stats.locks >= n,
        "renew_now renewed {} of {n} held locks",
        stats.locks
    );
    Ok(vec![
        Measure::new(HELD, Unit::Count, stats.locks as f64),
        Measure::new(MEM, Unit::Bytes, held.bytes_per_lock),
        Measure::new(TICK, Unit::Micros, micros(wall)),
        Measure::new(TICK_RT, Unit::Count, stats.round_trips as f64),
        Measure::new(TICK_SCRIPTS, Unit::Count, counts.scripts as f64),
        Measure::new(TICK_CMDS, Unit::Count, counts.commands as f64),
        Measure::new(LOST, Unit::Count, stats.lost as f64),
        Measure::new(FAILED_BATCHES, Unit::Count, stats.failed_batches as f64),
    ])
}
