//! The workloads W1-W7 (see docs/performance.md), each written once for async
//! implementations (tokio tasks) and, where the sync peer can run it, once for OS threads.

/// K3: client processes holding a lock each, against the server's connections and memory.
#[cfg(feature = "redlease")]
pub mod clients;
/// E1, E2: leader election.
#[cfg(feature = "redlease")]
pub mod election;
/// F1-F3: the lock family against our own `Lock`.
#[cfg(feature = "redlease")]
pub mod family;
/// K2: what keeping many locks costs the server.
#[cfg(feature = "redlease")]
pub mod hold_cost;
/// L1: how soon a holder hears that its lock is gone.
#[cfg(feature = "redlease")]
pub mod loss_notice;
/// W3: many tasks, a key each.
pub mod many_keys;
/// W1 (and W5, RedLock): one task, one key, one call at a time.
pub mod one_caller;
/// W2: many tasks contend for one lock.
pub mod one_hot_lock;
/// W7 (and C7): K processes, one task each, contend on one lock; P2, P3: F2 and F3 the same way.
pub mod processes;
/// W6: how soon a waiter runs after the holder's release.
pub mod wake_up;
/// W4: one client keeps many locks renewed.
pub mod watchdog_scale;

use std::time::Instant;

use anyhow::Result;

use crate::locker::{AsyncLocker, SyncLocker};

/// Lock+unlock pairs done before measuring (connections, script caches).
const WARM_UP: usize = 20;

pub async fn warm_up<L: AsyncLocker>(l: &L, key: &str) -> Result<()> {
    for _ in 0..WARM_UP {
        let g = l.lock(key).await?;
        l.unlock(g).await?;
    }
    Ok(())
}

pub fn warm_up_sync<L: SyncLocker>(l: &L, key: &str, deadline: Instant) -> Result<()> {
    for _ in 0..WARM_UP {
        let g = l.lock(key, deadline)?;
        l.unlock(g)?;
    }
    Ok(())
}

/// Runs a blocking closure on its own OS thread and awaits it.
pub async fn on_thread<T: Send + 'static>(
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(f).await?
}
