//! `redisson` 0.1 (feature `async`): `AsyncRedissonClient::new(
//! RedissonConfig::single_server(url))`, `client.get_lock(name)`,
//! `lock.lock().await` (fixed 30 s lease, polls every 100 ms while held
//! elsewhere), `lock.unlock().await`.
//!
//! Its `unlock()` returns `Ok(false)` after a full release (the unlock script
//! returns 0), so the bool is ignored. Its RedLock (`AsyncRRedLock`) is built
//! here from one connection manager per server through its public
//! constructor; the docs only show `client.get_red_lock(name)`, which takes
//! the client's single server.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use anyhow::Result;
use redisson::{
    AsyncRLock, AsyncRRedLock, AsyncRedisConnectionManager, AsyncRedissonClient, RedissonConfig,
};

use crate::locker::AsyncLocker;

pub struct Redisson {
    client: AsyncRedissonClient,
}

impl Redisson {
    pub async fn new(url: &str) -> Result<Self> {
        let client = AsyncRedissonClient::new(RedissonConfig::single_server(url)).await?;
        Ok(Redisson { client })
    }
}

impl AsyncLocker for Redisson {
    type Guard = AsyncRLock;

    /// Its connection pool holds 10 connections: with more acquisitions in
    /// flight, pool waits time out after 3 s.
    const MAX_IN_FLIGHT: usize = 8;

    async fn lock(&self, key: &str) -> Result<AsyncRLock> {
        let lock = self.client.get_lock(key);
        lock.lock().await?;
        Ok(lock)
    }

    async fn unlock(&self, guard: AsyncRLock) -> Result<()> {
        guard.unlock().await?;
        Ok(())
    }

    async fn close(&self) {
        let _ = self.client.shutdown().await;
    }
}

/// `AsyncRRedLock` over one connection manager per server; one lock object
/// per resource name, reused (as a long-lived `get_red_lock` object would be).
pub struct RedissonRedLock {
    managers: Vec<Arc<AsyncRedisConnectionManager>>,
    locks: Mutex<HashMap<String, Arc<AsyncRRedLock>>>,
}

impl RedissonRedLock {
    pub async fn new(urls: &[String]) -> Result<Self> {
        let mut managers = Vec::new();
        for url in urls {
            let config = RedissonConfig::single_server(url);
            managers.push(Arc::new(AsyncRedisConnectionManager::new(&config).await?));
        }
        Ok(RedissonRedLock {
            managers,
            locks: Mutex::new(HashMap::new()),
        })
    }

    fn object(&self, key: &str) -> Arc<AsyncRRedLock> {
        let mut locks = self.locks.lock().expect("poisoned");
        if let Some(lock) = locks.get(key) {
            return lock.clone();
        }
        let lease = RedissonConfig::default().watchdog_timeout; // as get_red_lock
        let lock = Arc::new(AsyncRRedLock::new(
            self.managers.clone(),
            key.to_owned(),
            lease,
        ));
        locks.insert(key.to_owned(), lock.clone());
        lock
    }
}

impl AsyncLocker for RedissonRedLock {
    type Guard = Arc<AsyncRRedLock>;

    async fn lock(&self, key: &str) -> Result<Self::Guard> {
        let lock = self.object(key);
        lock.lock().await?;
        Ok(lock)
    }

    async fn unlock(&self, guard: Self::Guard) -> Result<()> {
        guard.unlock().await?;
        Ok(())
    }
}
