//! `rslock` 0.10 (async, tokio): `LockManager::new(uris)`, `acquire(resource,
//! ttl)` (loops over `lock()`: 3 tries, random 0..200 ms between them),
//! `guard.release().await`. Over several URIs it is its own Redlock; `new_cluster` (feature
//! `cluster`) locks on a Redis Cluster.

use anyhow::Result;
use rslock::{LockGuard, LockManager};

use crate::locker::{AsyncLocker, LEASE};

pub struct Rslock {
    manager: LockManager,
}

impl Rslock {
    pub fn new(urls: &[String]) -> Self {
        Rslock {
            manager: LockManager::new(urls.to_vec()),
        }
    }

    /// rslock's cluster mode: one lock per key on the cluster the seed URLs belong to.
    pub fn new_cluster(seeds: &[String]) -> Result<Self> {
        Ok(Rslock {
            manager: LockManager::new_cluster(seeds.to_vec())?,
        })
    }
}

impl AsyncLocker for Rslock {
    type Guard = LockGuard;

    async fn lock(&self, key: &str) -> Result<LockGuard> {
        Ok(self.manager.acquire(key, LEASE).await?)
    }

    async fn unlock(&self, guard: LockGuard) -> Result<()> {
        guard.release().await;
        Ok(())
    }
}
