//! W2: `tasks` tasks share one lock; each does `rounds` rounds of (acquire,
//! GET counter, SET counter+1 — a non-atomic increment — release). The GET
//! value orders the acquisitions exactly, which gives the handoffs
//! (consecutive acquisitions by different tasks).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use redis::AsyncCommands;
use tokio::task::JoinSet;

use crate::locker::{AsyncLocker, SyncLocker};
use crate::model::{ACQ_PER_SEC, COUNTER, HANDOFFS, Measure, TimedOut, Unit, WAIT, WAIT_MAX};
use crate::stats::{micros, p50_p99, per_sec};

const LOCK: &str = "bench:w2:lock";
const COUNTER_KEY: &str = "bench:w2:counter";

/// One acquisition: counter value read under the lock, task, wait for the lock.
type Rec = (i64, usize, Duration);

pub async fn run<L: AsyncLocker>(
    l: Arc<L>,
    url: &str,
    tasks: usize,
    rounds: usize,
) -> Result<Vec<Measure>> {
    let client = redis::Client::open(url)?;
    let mut conn = client.get_connection_manager().await?;
    let _: () = conn.del(COUNTER_KEY).await?;
    super::warm_up(&*l, LOCK).await?;
    let start = Instant::now();
    let mut set = JoinSet::new();
    for task in 0..tasks {
        let (l, mut conn) = (l.clone(), conn.clone());
        set.spawn(async move {
            let mut recs: Vec<Rec> = Vec::with_capacity(rounds);
            for _ in 0..rounds {
                let t0 = Instant::now();
                let g = l.lock(LOCK).await?;
                let wait = t0.elapsed();
                let v: Option<i64> = conn.get(COUNTER_KEY).await?;
                let v = v.unwrap_or(0);
                let _: () = conn.set(COUNTER_KEY, v + 1).await?;
                l.unlock(g).await?;
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
    l.close().await;
    Ok(measures(recs, elapsed, counter.unwrap_or(0)))
}

pub async fn run_sync<L: SyncLocker>(
    l: Arc<L>,
    url: &str,
    tasks: usize,
    rounds: usize,
    deadline: Instant,
) -> Result<Vec<Measure>> {
    let client = redis::Client::open(url)?;
    let mut conn = client.get_connection()?;
    redis::cmd("DEL").arg(COUNTER_KEY).query::<()>(&mut conn)?;
    let warm = l.clone();
    super::on_thread(move || super::warm_up_sync(&*warm, LOCK, deadline)).await?;
    let start = Instant::now();
    let mut handles = Vec::new();
    for task in 0..tasks {
        let (l, client) = (l.clone(), client.clone());
        handles.push(std::thread::spawn(move || -> Result<Vec<Rec>> {
            let mut conn = client.get_connection()?;
            let mut recs: Vec<Rec> = Vec::with_capacity(rounds);
            for _ in 0..rounds {
                let t0 = Instant::now();
                let g = l.lock(LOCK, deadline)?;
                let wait = t0.elapsed();
                let v: Option<i64> = redis::cmd("GET").arg(COUNTER_KEY).query(&mut conn)?;
                let v = v.unwrap_or(0);
                redis::cmd("SET")
                    .arg(COUNTER_KEY)
                    .arg(v + 1)
                    .query::<()>(&mut conn)?;
                l.unlock(g)?;
                recs.push((v, task, wait));
                if Instant::now() > deadline {
                    bail!(TimedOut);
                }
            }
            Ok(recs)
        }));
    }
    let recs = super::on_thread(move || {
        let mut recs = Vec::new();
        for h in handles {
            match h.join() {
                Ok(r) => recs.extend(r?),
                Err(_) => bail!("a W2 thread panicked"),
            }
        }
        Ok(recs)
    })
    .await?;
    let elapsed = start.elapsed();
    let counter: Option<i64> = redis::cmd("GET").arg(COUNTER_KEY).query(&mut conn)?;
    Ok(measures(recs, elapsed, counter.unwrap_or(0)))
}

fn measures(mut recs: Vec<Rec>, elapsed: Duration, counter: i64) -> Vec<Measure> {
    recs.sort_by_key(|r| r.0);
    let handoffs = recs.windows(2).filter(|w| w[0].1 != w[1].1).count();
    let mut waits: Vec<Duration> = recs.iter().map(|r| r.2).collect();
    let max = waits.iter().max().copied().unwrap_or_default();
    let (p50, p99) = p50_p99(&mut waits);
    vec![
        Measure::new(ACQ_PER_SEC, Unit::PerSec, per_sec(recs.len(), elapsed)),
        Measure::new(COUNTER, Unit::Count, counter as f64),
        Measure::new(HANDOFFS, Unit::Count, handoffs as f64),
        Measure::dist(WAIT, p50, p99),
        Measure::new(WAIT_MAX, Unit::Micros, micros(max)),
    ]
}
