//! `redlock` 2.0 (sync; its `acquire_async` only spins `lock()` on the
//! calling runtime thread): `RedLock::new(uris)`, the README's loop
//! `loop { if let Some(l) = rl.lock(resource, ttl_ms)? { break } }`,
//! `rl.unlock(&lock)`. Each command opens a new TCP connection (redis 0.23
//! `Client::get_connection`); `lock()` tries 3 times with a random 0..200 ms
//! sleep after each failed try. Over several URIs the servers are taken one
//! after another. Run on plain OS threads by the sync workload drivers.

use std::time::Instant;

use anyhow::{Result, bail};
use redlock::{Lock, RedLock};

use crate::locker::{LEASE, SyncLocker};
use crate::model::TimedOut;

pub struct Redlock {
    manager: RedLock,
}

pub struct Held {
    resource: Vec<u8>,
    val: Vec<u8>,
    validity_time: usize,
}

impl Redlock {
    pub fn new(urls: &[String]) -> Self {
        Redlock {
            manager: RedLock::new(urls.to_vec()),
        }
    }
}

impl SyncLocker for Redlock {
    type Guard = Held;

    fn lock(&self, key: &str, deadline: Instant) -> Result<Held> {
        loop {
            if let Some(l) = self
                .manager
                .lock(key.as_bytes(), LEASE.as_millis() as usize)?
            {
                return Ok(Held {
                    resource: l.resource,
                    val: l.val,
                    validity_time: l.validity_time,
                });
            }
            if Instant::now() > deadline {
                bail!(TimedOut);
            }
        }
    }

    fn unlock(&self, held: Held) -> Result<()> {
        let lock = Lock {
            resource: held.resource,
            val: held.val,
            validity_time: held.validity_time,
            lock_manager: &self.manager,
        };
        self.manager.unlock(&lock);
        Ok(())
    }
}
