//! redlease, written against the planned public API (/tmp/api.md):
//! `Client::connect`, `client.lock(name)?.lock().await` (watchdog lease,
//! owner = current task), `guard.unlock().await`, `RedLock::new(locks)?
//! .lock_with(LockOptions::new().lease(lease))`, and `client.renew_now().await -> RenewStats`
//! (exposed for benchmarks).

use anyhow::Result;
use redlease::LockOptions;
use redlease::{Client, LockGuard, RedLock, RenewStats};

use crate::locker::{AsyncLocker, LEASE};

/// The default lock: watchdog lease, waits through pub/sub.
pub struct Redlease {
    pub client: Client,
}

impl Redlease {
    /// A client as [`client`] makes it.
    pub async fn new(url: &str) -> Result<Self> {
        Ok(Redlease {
            client: client(url).await?,
        })
    }

    /// A client whose locks wait for `replicas` to acknowledge them (the R1 rows).
    pub async fn with_replicas(url: &str, replicas: redlease::Replicas) -> Result<Self> {
        let client = builder(url).replicas(replicas).build().await?;
        Ok(Redlease { client })
    }

    /// A client of a `rediss://` server whose certificate `ca_pem` (PEM) signed (the T1 rows).
    pub async fn with_tls(url: &str, ca_pem: Vec<u8>) -> Result<Self> {
        let tls = redlease::TlsOptions::new().root_ca_pem(ca_pem);
        let client = builder(url).tls(tls).build().await?;
        Ok(Redlease { client })
    }

    /// One renewal tick of every watchdog-leased hold of this client.
    pub async fn renew_now(&self) -> Result<RenewStats> {
        Ok(self.client.renew_now().await?)
    }
}

impl AsyncLocker for Redlease {
    type Guard = LockGuard;

    async fn lock(&self, key: &str) -> Result<LockGuard> {
        Ok(self.client.lock(key)?.lock().await?)
    }

    async fn unlock(&self, guard: LockGuard) -> Result<()> {
        Ok(guard.unlock().await?)
    }

    async fn close(&self) {
        let _ = self.client.shutdown().await;
    }
}

/// W5 variants over several servers (one client per server), fixed lease.
#[derive(Clone, Copy)]
pub enum Multi {
    /// One server, `lock_with` a fixed lease.
    Single,
    /// `RedLock` over all servers.
    RedLock,
    /// The single-server locks taken one after another, released after.
    Sequential,
}

pub struct RedleaseMulti {
    clients: Vec<Client>,
    mode: Multi,
}

impl RedleaseMulti {
    pub async fn new(urls: &[String], mode: Multi) -> Result<Self> {
        let mut clients = Vec::new();
        for url in urls {
            clients.push(client(url).await?);
        }
        Ok(RedleaseMulti { clients, mode })
    }
}

pub enum MultiGuard {
    Single(LockGuard),
    RedLock(redlease::RedLockGuard),
    Sequential(Vec<LockGuard>),
}

impl AsyncLocker for RedleaseMulti {
    type Guard = MultiGuard;

    async fn lock(&self, key: &str) -> Result<MultiGuard> {
        Ok(match self.mode {
            Multi::Single => MultiGuard::Single(
                self.clients[0]
                    .lock(key)?
                    .lock_with(LockOptions::new().lease(LEASE))
                    .await?,
            ),
            Multi::RedLock => {
                let locks = self
                    .clients
                    .iter()
                    .map(|c| c.lock(key))
                    .collect::<Result<Vec<_>, _>>()?;
                MultiGuard::RedLock(
                    RedLock::new(locks)?
                        .lock_with(LockOptions::new().lease(LEASE))
                        .await?,
                )
            }
            Multi::Sequential => {
                let mut held = Vec::with_capacity(self.clients.len());
                for c in &self.clients {
                    held.push(
                        c.lock(key)?
                            .lock_with(LockOptions::new().lease(LEASE))
                            .await?,
                    );
                }
                MultiGuard::Sequential(held)
            }
        })
    }

    async fn unlock(&self, guard: MultiGuard) -> Result<()> {
        match guard {
            MultiGuard::Single(g) => g.unlock().await?,
            MultiGuard::RedLock(g) => g.unlock().await?,
            MultiGuard::Sequential(gs) => {
                for g in gs {
                    g.unlock().await?;
                }
            }
        }
        Ok(())
    }

    async fn close(&self) {
        for c in &self.clients {
            let _ = c.shutdown().await;
        }
    }
}

/// A client of `url` with the library's defaults, but for two knobs read from the environment
/// (inherited by the cells' processes, W7's included), so that the price of the loss notice is
/// the ratio of two runs. Every bench client is made here or with [`builder`], but L1's, which
/// measure the notice itself: `REDLEASE_BENCH_LOSS_NOTICE=off` runs without the notice, and
/// `REDLEASE_BENCH_LOSS_NOTICE_DELAY_MS=N` sets its delay.
pub async fn client(url: &str) -> Result<Client> {
    Ok(builder(url).build().await?)
}

/// The builder of [`client`], for a workload that sets more (K2's watchdog lease): the loss
/// notice as the environment asks.
pub fn builder(url: &str) -> redlease::ClientBuilder {
    let notice = std::env::var("REDLEASE_BENCH_LOSS_NOTICE").map_or(true, |v| v != "off");
    let mut builder = Client::builder(url).loss_notice(notice);
    if let Some(ms) = std::env::var("REDLEASE_BENCH_LOSS_NOTICE_DELAY_MS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        builder = builder.loss_notice_delay(std::time::Duration::from_millis(ms));
    }
    builder
}
