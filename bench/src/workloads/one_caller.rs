//! W1 (and W5): one task locks and unlocks one key `n` times; latency of a
//! pair (p50/p99) and pairs per second.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;

use super::{on_thread, warm_up, warm_up_sync};
use crate::locker::{AsyncLocker, SyncLocker};
use crate::model::{Measure, PAIR, PAIRS_PER_SEC, TimedOut, Unit};
use crate::stats::{p50_p99, per_sec};

pub const KEY: &str = "bench:w1";

pub async fn run<L: AsyncLocker>(l: Arc<L>, n: usize) -> Result<Vec<Measure>> {
    let task = tokio::spawn(async move {
        warm_up(&*l, KEY).await?;
        let mut lat = Vec::with_capacity(n);
        let start = Instant::now();
        for _ in 0..n {
            let t0 = Instant::now();
            let g = l.lock(KEY).await?;
            l.unlock(g).await?;
            lat.push(t0.elapsed());
        }
        let elapsed = start.elapsed();
        l.close().await;
        Ok(measures(lat, elapsed))
    });
    task.await?
}

pub async fn run_sync<L: SyncLocker>(
    l: Arc<L>,
    n: usize,
    deadline: Instant,
) -> Result<Vec<Measure>> {
    on_thread(move || {
        warm_up_sync(&*l, KEY, deadline)?;
        let mut lat = Vec::with_capacity(n);
        let start = Instant::now();
        for _ in 0..n {
            let t0 = Instant::now();
            let g = l.lock(KEY, deadline)?;
            l.unlock(g)?;
            lat.push(t0.elapsed());
            if Instant::now() > deadline {
                anyhow::bail!(TimedOut);
            }
        }
        Ok(measures(lat, start.elapsed()))
    })
    .await
}

pub fn measures(mut lat: Vec<Duration>, elapsed: Duration) -> Vec<Measure> {
    let n = lat.len();
    let (p50, p99) = p50_p99(&mut lat);
    vec![
        Measure::dist(PAIR, p50, p99),
        Measure::new(PAIRS_PER_SEC, Unit::PerSec, per_sec(n, elapsed)),
    ]
}

/// `pairs` lock+unlock pairs of one task with `implementation` (`redlease` or `rslock`) on
/// [`KEY`], nothing measured: the client's own instructions per pair are what callgrind
/// counts around it (bench/scripts/client_cost.sh runs it twice and takes the difference).
pub async fn pairs_only(implementation: &str, url: &str, pairs: usize) -> Result<()> {
    async fn go<L: AsyncLocker>(l: L, pairs: usize) -> Result<()> {
        for _ in 0..pairs {
            let g = l.lock(KEY).await?;
            l.unlock(g).await?;
        }
        l.close().await;
        Ok(())
    }
    match implementation {
        #[cfg(feature = "redlease")]
        "redlease" => go(crate::redlease_impl::Redlease::new(url).await?, pairs).await,
        "rslock" => go(crate::peers::rslock::Rslock::new(&[url.to_string()]), pairs).await,
        other => anyhow::bail!("--client-cost: no implementation {other:?} (redlease, rslock)"),
    }
}

/// The lock of the hand-over runs (bench/scripts/handover_cost.sh).
#[cfg(feature = "redlease")]
const HANDOVER_KEY: &str = "bench:handover";

/// How long the holder keeps each hold: longer than the waiter (under callgrind) takes from
/// its release to its next, queued, attempt, so every acquisition of the waiter is a
/// hand-over (the server's queue is FIFO).
#[cfg(feature = "redlease")]
const HOLDER_HOLDS: Duration = Duration::from_millis(50);

/// `n` acquisitions of one redlease `Lock` (default settings, as a W7 process takes it) on
/// [`HANDOVER_KEY`]: as `holder`, each kept [`HOLDER_HOLDS`]; as `waiter`, each given back at
/// once. With a holder running, every acquisition of a waiter is handed over by the holder's
/// release, and the waiter's own release hands the lock back: callgrind counts the waiter's
/// instructions per hand-over (bench/scripts/handover_cost.sh runs it twice and takes the
/// difference). The waiter prints how many of its acquisitions waited (all of them should).
#[cfg(feature = "redlease")]
pub async fn handovers_only(role: &str, url: &str, n: usize) -> Result<()> {
    let hold = match role {
        "holder" => HOLDER_HOLDS,
        "waiter" => Duration::ZERO,
        other => anyhow::bail!("--handover-cost: no role {other:?} (holder, waiter)"),
    };
    // REDLEASE_BENCH_LOSS_NOTICE=off runs the client without the loss notice (its price per
    // hand-over is the difference).
    let client = crate::redlease_impl::client(url).await?;
    let lock = client.lock(HANDOVER_KEY)?;
    let mut waited = 0usize;
    for _ in 0..n {
        let t0 = Instant::now();
        let guard = lock.lock().await?;
        if t0.elapsed() >= HOLDER_HOLDS / 10 {
            waited += 1;
        }
        if !hold.is_zero() {
            tokio::time::sleep(hold).await;
        }
        guard.unlock().await?;
    }
    let _ = client.shutdown().await;
    if role == "waiter" {
        println!("waited: {waited} of {n}");
    }
    Ok(())
}
