//! Which implementation runs which workload, with what; and why not.

use std::sync::Arc;

use crate::config::Counts;
use crate::floor;
use crate::peers::redisson::{Redisson, RedissonRedLock};
use crate::peers::redlock::Redlock;
use crate::peers::rlock::Rlock;
use crate::peers::rslock::Rslock;
use crate::runner::Runner;
use crate::workloads::{w1, w2, w3, w4, w6};

const NO_MULTI_SERVER: &str = "single Redis server only (no Redlock / multi-server lock)";

#[cfg(not(feature = "redlease"))]
fn no_redlease(r: &mut Runner, workload: &str, implementation: &str) {
    r.not_applicable(
        workload,
        implementation,
        "bench built without the `redlease` feature",
    );
}

pub async fn w1(r: &mut Runner, c: &Counts) {
    let (url, n) = (r.url(0), c.w1);
    r.measure("W1", "floor (2 EVALSHA)", |_| {
        floor::pairs(vec![url.clone()], n)
    })
    .await;
    #[cfg(feature = "redlease")]
    r.measure("W1", "redlease", |_| {
        let url = url.clone();
        async move {
            w1::run(
                Arc::new(crate::redlease_impl::Redlease::new(&url).await?),
                n,
            )
            .await
        }
    })
    .await;
    #[cfg(not(feature = "redlease"))]
    no_redlease(r, "W1", "redlease");
    r.measure("W1", "rslock", |_| {
        w1::run(Arc::new(Rslock::new(std::slice::from_ref(&url))), n)
    })
    .await;
    r.measure("W1", "redlock", |d| {
        w1::run_sync(Arc::new(Redlock::new(std::slice::from_ref(&url))), n, d)
    })
    .await;
    r.measure("W1", "rlock", |_| {
        let url = url.clone();
        async move { w1::run(Arc::new(Rlock::new(&url).await?), n).await }
    })
    .await;
    r.measure("W1", "redisson", |_| {
        let url = url.clone();
        async move { w1::run(Arc::new(Redisson::new(&url).await?), n).await }
    })
    .await;
}

pub async fn w2(r: &mut Runner, c: &Counts) {
    let (url, t, n) = (r.url(0), c.w2_tasks, c.w2_rounds);
    #[cfg(feature = "redlease")]
    r.measure("W2", "redlease", |_| {
        let url = url.clone();
        async move {
            w2::run(
                Arc::new(crate::redlease_impl::Redlease::new(&url).await?),
                &url,
                t,
                n,
            )
            .await
        }
    })
    .await;
    #[cfg(not(feature = "redlease"))]
    no_redlease(r, "W2", "redlease");
    r.measure("W2", "rslock", |_| {
        let url = url.clone();
        async move {
            w2::run(
                Arc::new(Rslock::new(std::slice::from_ref(&url))),
                &url,
                t,
                n,
            )
            .await
        }
    })
    .await;
    r.measure("W2", "redlock", |d| {
        let url = url.clone();
        async move {
            w2::run_sync(
                Arc::new(Redlock::new(std::slice::from_ref(&url))),
                &url,
                t,
                n,
                d,
            )
            .await
        }
    })
    .await;
    r.measure("W2", "rlock", |_| {
        let url = url.clone();
        async move { w2::run(Arc::new(Rlock::new(&url).await?), &url, t, n).await }
    })
    .await;
    r.measure("W2", "redisson", |_| {
        let url = url.clone();
        async move { w2::run(Arc::new(Redisson::new(&url).await?), &url, t, n).await }
    })
    .await;
}

pub async fn w3(r: &mut Runner, c: &Counts) {
    let (url, t, n) = (r.url(0), c.w3_tasks, c.w3_rounds);
    #[cfg(feature = "redlease")]
    r.measure("W3", "redlease", |_| {
        let url = url.clone();
        async move {
            w3::run(
                Arc::new(crate::redlease_impl::Redlease::new(&url).await?),
                t,
                n,
            )
            .await
        }
    })
    .await;
    #[cfg(not(feature = "redlease"))]
    no_redlease(r, "W3", "redlease");
    r.measure("W3", "rslock", |_| {
        w3::run(Arc::new(Rslock::new(std::slice::from_ref(&url))), t, n)
    })
    .await;
    r.measure("W3", "redlock", |d| {
        w3::run_sync(Arc::new(Redlock::new(std::slice::from_ref(&url))), t, n, d)
    })
    .await;
    r.measure("W3", "rlock", |_| {
        let url = url.clone();
        async move { w3::run(Arc::new(Rlock::new(&url).await?), t, n).await }
    })
    .await;
    r.measure("W3", "redisson", |_| {
        let url = url.clone();
        async move { w3::run(Arc::new(Redisson::new(&url).await?), t, n).await }
    })
    .await;
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
                w4::redlease(l, &servers[0], n).await
            }
        })
        .await;
        #[cfg(not(feature = "redlease"))]
        no_redlease(r, &w, "redlease");
        r.measure(&w, "rlock", |_| {
            let (url, servers) = (url.clone(), servers.clone());
            async move { w4::rlock(Arc::new(Rlock::new(&url).await?), &servers[0], n).await }
        })
        .await;
        r.not_applicable(&w, "rslock", "no watchdog: `using()` renews one lock per running routine, one EXTEND round trip per lock; heap below is for plain held guards");
        r.measure(&w, "rslock", |_| {
            w4::memory_only(
                Arc::new(Rslock::new(std::slice::from_ref(&url))),
                n,
                w4::WORKERS,
            )
        })
        .await;
        r.not_applicable(&w, "redisson", "no usable watchdog: `lock()` takes the fixed 30 s lease (watchdog starts only for lease 0, which expires the key at once); heap below is for plain held locks");
        r.measure(&w, "redisson", |_| {
            let url = url.clone();
            async move { w4::memory_only(Arc::new(Redisson::new(&url).await?), n, 8).await }
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
                async move { w1::run(Arc::new(RedleaseMulti::new(&urls, mode).await?), n).await }
            })
            .await;
        }
    }
    #[cfg(not(feature = "redlease"))]
    no_redlease(r, "W5", "redlease");
    r.measure("W5", "rslock single-node", |_| {
        w1::run(Arc::new(Rslock::new(&one)), n)
    })
    .await;
    r.measure("W5", "rslock RedLock(5)", |_| {
        w1::run(Arc::new(Rslock::new(&urls)), n)
    })
    .await;
    r.measure("W5", "redlock single-node", |d| {
        w1::run_sync(Arc::new(Redlock::new(&one)), n, d)
    })
    .await;
    r.measure("W5", "redlock RedLock(5)", |d| {
        w1::run_sync(Arc::new(Redlock::new(&urls)), n, d)
    })
    .await;
    r.measure("W5", "redisson single-node", |_| {
        let url = one[0].clone();
        async move { w1::run(Arc::new(Redisson::new(&url).await?), n).await }
    })
    .await;
    r.measure("W5", "redisson RedLock(5)", |_| {
        let urls = urls.clone();
        async move { w1::run(Arc::new(RedissonRedLock::new(&urls).await?), n).await }
    })
    .await;
    r.not_applicable("W5", "rlock", NO_MULTI_SERVER);
}

pub async fn w6(r: &mut Runner, c: &Counts) {
    let (url, n) = (r.url(0), c.w6);
    r.measure("W6", "floor (1 EVALSHA)", |_| {
        floor::round_trip(url.clone(), c.rtt)
    })
    .await;
    #[cfg(feature = "redlease")]
    r.measure("W6", "redlease", |_| {
        let url = url.clone();
        async move {
            w6::run(
                Arc::new(crate::redlease_impl::Redlease::new(&url).await?),
                n,
            )
            .await
        }
    })
    .await;
    #[cfg(not(feature = "redlease"))]
    no_redlease(r, "W6", "redlease");
    r.measure("W6", "rslock", |_| {
        w6::run(Arc::new(Rslock::new(std::slice::from_ref(&url))), n)
    })
    .await;
    r.measure("W6", "redlock", |d| {
        w6::run_sync(Arc::new(Redlock::new(std::slice::from_ref(&url))), n, d)
    })
    .await;
    r.measure("W6", "rlock", |_| {
        let url = url.clone();
        async move { w6::run(Arc::new(Rlock::new(&url).await?), n).await }
    })
    .await;
    r.measure("W6", "redisson", |_| {
        let url = url.clone();
        async move { w6::run(Arc::new(Redisson::new(&url).await?), n).await }
    })
    .await;
}
