//! Which implementation runs which workload, with what; and why not.

use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;

use crate::config::Counts;
use crate::floor;
use crate::locker::{AsyncLocker, SyncLocker};
use crate::model::Measure;
use crate::peers::redisson::{Redisson, RedissonRedLock};
use crate::peers::redlock::Redlock;
use crate::peers::rlock::Rlock;
use crate::peers::rslock::Rslock;
use crate::runner::Runner;
use crate::workloads::{many_keys, one_caller, one_hot_lock, wake_up, watchdog_scale};

const NO_MULTI_SERVER: &str = "single Redis server only (no Redlock / multi-server lock)";

#[cfg(not(feature = "redlease"))]
fn no_redlease(r: &mut Runner, workload: &str, implementation: &str) {
    r.not_applicable(
        workload,
        implementation,
        "bench built without the `redlease` feature",
    );
}

/// A workload every implementation runs the same way on the first server:
/// its async driver, and its sync one (OS threads) for `redlock`.
trait Workload: Copy {
    async fn run<L: AsyncLocker>(self, l: Arc<L>, url: &str) -> Result<Vec<Measure>>;

    async fn run_sync<L: SyncLocker>(
        self,
        l: Arc<L>,
        url: &str,
        deadline: Instant,
    ) -> Result<Vec<Measure>>;
}

/// Lock+unlock pairs.
#[derive(Clone, Copy)]
struct W1(usize);

/// Tasks, rounds.
#[derive(Clone, Copy)]
struct W2(usize, usize);

/// Tasks, rounds.
#[derive(Clone, Copy)]
struct W3(usize, usize);

/// Handoffs.
#[derive(Clone, Copy)]
struct W6(usize);

impl Workload for W1 {
    async fn run<L: AsyncLocker>(self, l: Arc<L>, _: &str) -> Result<Vec<Measure>> {
        one_caller::run(l, self.0).await
    }

    async fn run_sync<L: SyncLocker>(self, l: Arc<L>, _: &str, d: Instant) -> Result<Vec<Measure>> {
        one_caller::run_sync(l, self.0, d).await
    }
}

impl Workload for W2 {
    async fn run<L: AsyncLocker>(self, l: Arc<L>, url: &str) -> Result<Vec<Measure>> {
        one_hot_lock::run(l, url, self.0, self.1).await
    }

    async fn run_sync<L: SyncLocker>(
        self,
        l: Arc<L>,
        url: &str,
        d: Instant,
    ) -> Result<Vec<Measure>> {
        one_hot_lock::run_sync(l, url, self.0, self.1, d).await
    }
}

impl Workload for W3 {
    async fn run<L: AsyncLocker>(self, l: Arc<L>, _: &str) -> Result<Vec<Measure>> {
        many_keys::run(l, self.0, self.1).await
    }

    async fn run_sync<L: SyncLocker>(self, l: Arc<L>, _: &str, d: Instant) -> Result<Vec<Measure>> {
        many_keys::run_sync(l, self.0, self.1, d).await
    }
}

impl Workload for W6 {
    async fn run<L: AsyncLocker>(self, l: Arc<L>, _: &str) -> Result<Vec<Measure>> {
        wake_up::run(l, self.0).await
    }

    async fn run_sync<L: SyncLocker>(self, l: Arc<L>, _: &str, d: Instant) -> Result<Vec<Measure>> {
        wake_up::run_sync(l, self.0, d).await
    }
}

/// `w` on the first server for redlease, rslock, redlock, rlock and redisson,
/// in that order.
async fn single_server<W: Workload>(r: &mut Runner, name: &str, w: W) {
    let url = r.url(0);
    #[cfg(feature = "redlease")]
    r.measure(name, "redlease", |_| {
        let url = url.clone();
        async move {
            let l = Arc::new(crate::redlease_impl::Redlease::new(&url).await?);
            w.run(l, &url).await
        }
    })
    .await;
    #[cfg(not(feature = "redlease"))]
    no_redlease(r, name, "redlease");
    r.measure(name, "rslock", |_| {
        let url = url.clone();
        async move {
            let l = Arc::new(Rslock::new(std::slice::from_ref(&url)));
            w.run(l, &url).await
        }
    })
    .await;
    r.measure(name, "redlock", |d| {
        let url = url.clone();
        async move {
            let l = Arc::new(Redlock::new(std::slice::from_ref(&url)));
            w.run_sync(l, &url, d).await
        }
    })
    .await;
    r.measure(name, "rlock", |_| {
        let url = url.clone();
        async move { w.run(Arc::new(Rlock::new(&url).await?), &url).await }
    })
    .await;
    r.measure(name, "redisson", |_| {
        let url = url.clone();
        async move { w.run(Arc::new(Redisson::new(&url).await?), &url).await }
    })
    .await;
}

pub async fn w1(r: &mut Runner, c: &Counts) {
    let (url, n) = (r.url(0), c.w1);
    r.measure("W1", "floor (2 EVALSHA)", |_| {
        floor::pairs(vec![url.clone()], n)
    })
    .await;
    single_server(r, "W1", W1(n)).await;
}

pub async fn w2(r: &mut Runner, c: &Counts) {
    single_server(r, "W2", W2(c.w2_tasks, c.w2_rounds)).await;
}

/// redisson fails W3: more tasks than its connection pool (see the report's notes).
pub async fn w3(r: &mut Runner, c: &Counts) {
    single_server(r, "W3", W3(c.w3_tasks, c.w3_rounds)).await;
}

pub fn w4_label(n: usize) -> String {
    format!(
        "W4 ({})",
        crate::report::fmt_value(crate::model::Unit::Count, n as f64)
    )
}

pub async fn w4(r: &mut Runner, c: &Counts) {
    let url = r.url(0);
    let servers = r.servers.clone();
    for n in c.w4 {
        let w = w4_label(n);
        #[cfg(feature = "redlease")]
        r.measure(&w, "redlease", |_| {
            let (url, servers) = (url.clone(), servers.clone());
            async move {
                let l = Arc::new(crate::redlease_impl::Redlease::new(&url).await?);
                watchdog_scale::redlease(l, &servers[0], n).await
            }
        })
        .await;
        #[cfg(not(feature = "redlease"))]
        no_redlease(r, &w, "redlease");
        r.measure(&w, "rlock", |_| {
            let (url, servers) = (url.clone(), servers.clone());
            async move { watchdog_scale::rlock(Arc::new(Rlock::new(&url).await?), &servers[0], n).await }
        })
        .await;
        r.not_applicable(&w, "rslock", "no watchdog: `using()` renews one lock per running routine, one EXTEND round trip per lock; heap below is for plain held guards");
        r.measure(&w, "rslock", |_| {
            watchdog_scale::memory_only(Arc::new(Rslock::new(std::slice::from_ref(&url))), n)
        })
        .await;
        r.not_applicable(&w, "redisson", "no usable watchdog: `lock()` takes the fixed 30 s lease (watchdog starts only for lease 0, which expires the key at once); heap below is for plain held locks");
        r.measure(&w, "redisson", |_| {
            let url = url.clone();
            async move { watchdog_scale::memory_only(Arc::new(Redisson::new(&url).await?), n).await }
        })
        .await;
        r.not_applicable(
            &w,
            "redlock",
            "no renewal at all (sync, fixed TTL, a new TCP connection per command)",
        );
    }
}

/// Pairs over the 5 servers: Redlock-style vs one node (vs one after another).
pub async fn w5(r: &mut Runner, c: &Counts) {
    let (urls, one, n) = (r.urls(), vec![r.url(0)], c.w5);
    r.measure("W5", "floor single-node", |_| floor::pairs(one.clone(), n))
        .await;
    r.measure("W5", "floor 5 nodes in parallel", |_| {
        floor::pairs(urls.clone(), n)
    })
    .await;
    #[cfg(feature = "redlease")]
    {
        use crate::redlease_impl::{Multi, RedleaseMulti};
        for (name, mode) in [
            ("redlease single-node", Multi::Single),
            ("redlease RedLock(5)", Multi::RedLock),
            ("redlease 5 nodes sequential", Multi::Sequential),
        ] {
            r.measure("W5", name, |_| {
                let urls = urls.clone();
                async move { one_caller::run(Arc::new(RedleaseMulti::new(&urls, mode).await?), n).await }
            })
            .await;
        }
    }
    #[cfg(not(feature = "redlease"))]
    no_redlease(r, "W5", "redlease");
    r.measure("W5", "rslock single-node", |_| {
        one_caller::run(Arc::new(Rslock::new(&one)), n)
    })
    .await;
    r.measure("W5", "rslock RedLock(5)", |_| {
        one_caller::run(Arc::new(Rslock::new(&urls)), n)
    })
    .await;
    r.measure("W5", "redlock single-node", |d| {
        one_caller::run_sync(Arc::new(Redlock::new(&one)), n, d)
    })
    .await;
    r.measure("W5", "redlock RedLock(5)", |d| {
        one_caller::run_sync(Arc::new(Redlock::new(&urls)), n, d)
    })
    .await;
    r.measure("W5", "redisson single-node", |_| {
        let url = one[0].clone();
        async move { one_caller::run(Arc::new(Redisson::new(&url).await?), n).await }
    })
    .await;
    r.measure("W5", "redisson RedLock(5)", |_| {
        let urls = urls.clone();
        async move { one_caller::run(Arc::new(RedissonRedLock::new(&urls).await?), n).await }
    })
    .await;
    r.not_applicable("W5", "rlock", NO_MULTI_SERVER);
}

pub async fn w6(r: &mut Runner, c: &Counts) {
    let url = r.url(0);
    r.measure("W6", "floor (1 EVALSHA)", |_| {
        floor::round_trip(url.clone(), c.rtt)
    })
    .await;
    single_server(r, "W6", W6(c.w6)).await;
}
