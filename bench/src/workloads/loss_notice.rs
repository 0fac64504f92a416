//! L1: how soon a holder hears that its lock is gone. A holder under the watchdog (the default
//! 30 s lease: its next renewal is ten seconds away) holds a lock; the key is then deleted
//! (`DEL`), flushed (`FLUSHDB`) or force-unlocked from another client; the time from that
//! command's reply to the holder's `lost()` resolving, per cause.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use redlease::Client;

use crate::model::{
    Measure, NOTICE_DEL, NOTICE_DEL_MAX, NOTICE_FLUSH, NOTICE_FLUSH_MAX, NOTICE_FORCE,
    NOTICE_FORCE_MAX, Unit,
};
use crate::stats::{micros, p50_p99};

/// Past two of the loss notice's arming delays (10 ms by default; a hold is armed one to two
/// delays after its grant), so each trial's hold is armed.
const SETTLE: Duration = Duration::from_millis(30);
/// A trial that takes longer failed: the watchdog alone would take seconds.
const LIMIT: Duration = Duration::from_secs(5);

#[derive(Clone, Copy)]
enum Cause {
    Del,
    Flush,
    Force,
}

/// `trials` of each cause on the server at `url`.
pub async fn loss_notice(url: &str, trials: usize) -> Result<Vec<Measure>> {
    let holder = Client::connect(url).await?;
    let other = Client::connect(url).await?;
    let admin = redis::Client::open(url)?;
    let mut admin = admin.get_multiplexed_async_connection().await?;
    let mut out = Vec::new();
    for (cause, p50_name, max_name) in [
        (Cause::Del, NOTICE_DEL, NOTICE_DEL_MAX),
        (Cause::Flush, NOTICE_FLUSH, NOTICE_FLUSH_MAX),
        (Cause::Force, NOTICE_FORCE, NOTICE_FORCE_MAX),
    ] {
        let mut samples = Vec::with_capacity(trials);
        for trial in 0..trials {
            let name = format!("bench:notice:{trial}");
            let guard = holder.lock(&name)?.lock().await?;
            tokio::time::sleep(SETTLE).await;
            let lost = guard.lost();
            let key = format!("redlease:{{{name}}}");
            let caused = match cause {
                Cause::Del => {
                    let _: i64 = redis::cmd("DEL").arg(&key).query_async(&mut admin).await?;
                    Instant::now()
                }
                Cause::Flush => {
                    let _: () = redis::cmd("FLUSHDB").query_async(&mut admin).await?;
                    Instant::now()
                }
                Cause::Force => {
                    other.lock(&name)?.force_unlock().await?;
                    Instant::now()
                }
            };
            if tokio::time::timeout(LIMIT, lost).await.is_err() {
                bail!("lost() did not resolve within {LIMIT:?}");
            }
            samples.push(caused.elapsed());
            drop(guard);
        }
        let max = samples.iter().max().copied().unwrap_or_default();
        let (p50, p99) = p50_p99(&mut samples);
        out.push(Measure::dist(p50_name, p50, p99));
        out.push(Measure::new(max_name, Unit::Micros, micros(max)));
    }
    holder.shutdown().await?;
    other.shutdown().await?;
    Ok(out)
}
