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
///
/// The roles `floor-holder` and `floor-waiter` do the same with the bench's floor instead: a
/// token taken with `BLPOP` and given back with `LPUSH` on one multiplexed redis-rs connection
/// (W7's floor row), for the floor's instructions per hand-over beside redlease's.
#[cfg(feature = "redlease")]
pub async fn handovers_only(role: &str, url: &str, n: usize) -> Result<()> {
    let (floor, hold) = match role {
        "holder" => (false, HOLDER_HOLDS),
        "waiter" => (false, Duration::ZERO),
        "floor-holder" => (true, HOLDER_HOLDS),
        "floor-waiter" => (true, Duration::ZERO),
        other => anyhow::bail!(
            "--handover-cost: no role {other:?} (holder, waiter, floor-holder, floor-waiter)"
        ),
    };
    if floor {
        return floor_handovers(role == "floor-holder", url, n, hold).await;
    }
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

/// How long a floor process waits for the token before it gives up.
#[cfg(feature = "redlease")]
const FLOOR_WAIT: Duration = Duration::from_secs(30);

/// [`handovers_only`] with the floor: the holder puts the one token in the list first.
#[cfg(feature = "redlease")]
async fn floor_handovers(holder: bool, url: &str, n: usize, hold: Duration) -> Result<()> {
    // A BLPOP is answered when the token comes: no response timeout below its own.
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(Some(FLOOR_WAIT * 2));
    let mut conn = redis::Client::open(url)?
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    if holder {
        let _: () = redis::pipe()
            .del(HANDOVER_KEY)
            .ignore()
            .lpush(HANDOVER_KEY, "token")
            .ignore()
            .query_async(&mut conn)
            .await?;
    }
    let mut waited = 0usize;
    for _ in 0..n {
        let t0 = Instant::now();
        let got: Option<(String, String)> = redis::cmd("BLPOP")
            .arg(HANDOVER_KEY)
            .arg(FLOOR_WAIT.as_secs())
            .query_async(&mut conn)
            .await?;
        got.ok_or_else(|| anyhow::anyhow!("no token in {FLOOR_WAIT:?}"))?;
        if t0.elapsed() >= HOLDER_HOLDS / 10 {
            waited += 1;
        }
        if !hold.is_zero() {
            tokio::time::sleep(hold).await;
        }
        let _: i64 = redis::cmd("LPUSH")
            .arg(HANDOVER_KEY)
            .arg("token")
            .query_async(&mut conn)
            .await?;
    }
    if !holder {
        println!("waited: {waited} of {n}");
    }
    Ok(())
}
