//! W3: `tasks` tasks, each on its own key, `rounds` lock+unlock pairs each;
//! aggregate pairs per second.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{Result, bail};
use tokio::task::JoinSet;

use crate::locker::{AsyncLocker, SyncLocker};
use crate::model::{Measure, PAIRS_PER_SEC, TimedOut, Unit};
use crate::stats::per_sec;

fn key(task: usize) -> String {
    format!("bench:w3:{task}")
}

pub async fn run<L: AsyncLocker>(l: Arc<L>, tasks: usize, rounds: usize) -> Result<Vec<Measure>> {
    super::warm_up(&*l, &key(tasks)).await?;
    let start = Instant::now();
    let mut set = JoinSet::new();
    for task in 0..tasks {
        let l = l.clone();
        set.spawn(async move {
            let key = key(task);
            for _ in 0..rounds {
                let g = l.lock(&key).await?;
                l.unlock(g).await?;
            }
            anyhow::Ok(())
        });
    }
    while let Some(r) = set.join_next().await {
        r??;
    }
    let elapsed = start.elapsed();
    l.close().await;
    Ok(vec![Measure::new(
        PAIRS_PER_SEC,
        Unit::PerSec,
        per_sec(tasks * rounds, elapsed),
    )])
}

pub async fn run_sync<L: SyncLocker>(
    l: Arc<L>,
    tasks: usize,
    rounds: usize,
    deadline: Instant,
) -> Result<Vec<Measure>> {
    super::on_thread(move || {
        super::warm_up_sync(&*l, &key(tasks), deadline)?;
        let start = Instant::now();
        let handles: Vec<_> = (0..tasks)
            .map(|task| {
                let l = l.clone();
                std::thread::spawn(move || -> Result<()> {
                    let key = key(task);
                    for _ in 0..rounds {
                        let g = l.lock(&key, deadline)?;
                        l.unlock(g)?;
                        if Instant::now() > deadline {
                            bail!(TimedOut);
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        for h in handles {
            match h.join() {
                Ok(r) => r?,
                Err(_) => bail!("a W3 thread panicked"),
            }
        }
        let pairs = per_sec(tasks * rounds, start.elapsed());
        Ok(vec![Measure::new(PAIRS_PER_SEC, Unit::PerSec, pairs)])
    })
    .await
}
