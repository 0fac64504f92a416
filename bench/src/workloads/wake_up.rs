//! W6: wake-up latency. A holder task holds the lock while a waiter task is
//! blocked in its lock call; the holder unlocks and records the instant its
//! unlock returned; the waiter records the instant its lock call returned.
//! The holder keeps the lock 2..8 ms per round so that the waiter is already
//! waiting (subscribed or polling) when the lock is released.

use std::sync::Arc;
use std::sync::mpsc as std_mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use tokio::sync::mpsc;

use crate::locker::{AsyncLocker, SyncLocker};
use crate::model::{Measure, TimedOut, WAKE};
use crate::stats::p50_p99;

pub const KEY: &str = "bench:w6";

pub fn hold_time(round: usize) -> Duration {
    Duration::from_millis(2 + (round * 5 % 7) as u64)
}

pub async fn run<L: AsyncLocker>(l: Arc<L>, rounds: usize) -> Result<Vec<Measure>> {
    super::warm_up(&*l, KEY).await?;
    let (to_waiter, mut waiter_rx) = mpsc::channel::<()>(1);
    let (to_holder, mut holder_rx) = mpsc::channel::<Option<Instant>>(1);
    let waiter_lock = l.clone();
    let waiter = tokio::spawn(async move {
        while waiter_rx.recv().await.is_some() {
            to_holder.send(None).await?; // about to wait
            let g = waiter_lock.lock(KEY).await?;
            let acquired = Instant::now();
            waiter_lock.unlock(g).await?;
            to_holder.send(Some(acquired)).await?;
        }
        anyhow::Ok(())
    });
    let holder_lock = l.clone();
    let holder = tokio::spawn(async move {
        let mut lat = Vec::with_capacity(rounds);
        for round in 0..rounds {
            let g = holder_lock.lock(KEY).await?;
            to_waiter.send(()).await?;
            holder_rx.recv().await.context("waiter gone")?;
            tokio::time::sleep(hold_time(round)).await;
            holder_lock.unlock(g).await?;
            let released = Instant::now();
            let acquired = holder_rx.recv().await.flatten().context("waiter gone")?;
            lat.push(acquired.saturating_duration_since(released));
        }
        anyhow::Ok(lat)
    });
    let mut lat = holder.await??;
    waiter.await??;
    l.close().await;
    let (p50, p99) = p50_p99(&mut lat);
    Ok(vec![Measure::dist(WAKE, p50, p99)])
}

pub async fn run_sync<L: SyncLocker>(
    l: Arc<L>,
    rounds: usize,
    deadline: Instant,
) -> Result<Vec<Measure>> {
    super::on_thread(move || {
        super::warm_up_sync(&*l, KEY, deadline)?;
        let (to_waiter, waiter_rx) = std_mpsc::channel::<()>();
        let (to_holder, holder_rx) = std_mpsc::channel::<Option<Instant>>();
        let waiter_lock = l.clone();
        let waiter = std::thread::spawn(move || -> Result<()> {
            while waiter_rx.recv().is_ok() {
                to_holder.send(None)?;
                let g = waiter_lock.lock(KEY, deadline)?;
                let acquired = Instant::now();
                waiter_lock.unlock(g)?;
                to_holder.send(Some(acquired))?;
            }
            Ok(())
        });
        let mut lat = Vec::with_capacity(rounds);
        for round in 0..rounds {
            let g = l.lock(KEY, deadline)?;
            to_waiter.send(())?;
            holder_rx.recv().map_err(|_| waiter_gone(deadline))?;
            std::thread::sleep(hold_time(round));
            l.unlock(g)?;
            let released = Instant::now();
            let acquired = holder_rx
                .recv()
                .ok()
                .flatten()
                .ok_or_else(|| waiter_gone(deadline))?;
            lat.push(acquired.saturating_duration_since(released));
        }
        drop(to_waiter);
        waiter
            .join()
            .map_err(|_| anyhow::anyhow!("W6 waiter panicked"))??;
        let (p50, p99) = p50_p99(&mut lat);
        Ok(vec![Measure::dist(WAKE, p50, p99)])
    })
    .await
}

fn waiter_gone(deadline: Instant) -> anyhow::Error {
    if Instant::now() > deadline {
        anyhow::Error::new(TimedOut)
    } else {
        anyhow::anyhow!("W6 waiter gone")
    }
}
