//! `rlock` 0.2 (async API, default feature): `RLock::new(url)`,
//! `acquire_mutex(key)` with `AcquireOptions::default()` (10 s TTL, retry every
//! 100 ms, automatic renewal at TTL/2 by one spawned task per guard),
//! `guard.release().await`. Single server only.

use anyhow::Result;
use rlock::async_lock::{RLock, RLockGuard};

use crate::locker::AsyncLocker;

pub struct Rlock {
    manager: RLock,
}

impl Rlock {
    pub async fn new(url: &str) -> Result<Self> {
        Ok(Rlock {
            manager: RLock::new(url).await?,
        })
    }
}

impl AsyncLocker for Rlock {
    type Guard = RLockGuard;

    async fn lock(&self, key: &str) -> Result<RLockGuard> {
        Ok(self.manager.acquire_mutex(key).await?)
    }

    async fn unlock(&self, mut guard: RLockGuard) -> Result<()> {
        Ok(guard.release().await?)
    }

    async fn close(&self) {
        self.manager.shutdown().await;
    }
}
