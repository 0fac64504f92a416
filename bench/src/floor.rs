//! The floor: a bare EVALSHA of a trivial script through redis-rs on a
//! `ConnectionManager` (the library's connection type), one round trip.

use std::time::Instant;

use anyhow::Result;
use futures::future::try_join_all;
use redis::Script;
use redis::aio::ConnectionManager;

use crate::model::{Measure, RTT, RTT_IDLE};
use crate::stats::p50_p99;
use crate::workloads::w1;

async fn connect(url: &str) -> Result<ConnectionManager> {
    Ok(redis::Client::open(url)?.get_connection_manager().await?)
}

/// One EVALSHA on every connection at once (one round trip when there is one).
async fn fan_out(script: &Script, conns: &mut [ConnectionManager]) -> Result<()> {
    try_join_all(conns.iter_mut().map(|c| script.invoke_async::<_, i64>(c))).await?;
    Ok(())
}

/// `n` times two round trips in a row (the shape of a lock+unlock pair);
/// with several URLs each round trip fans out to all servers at once.
pub async fn pairs(urls: Vec<String>, n: usize) -> Result<Vec<Measure>> {
    tokio::spawn(async move {
        let mut conns = Vec::new();
        for url in &urls {
            conns.push(connect(url).await?);
        }
        let script = Script::new("return 1");
        for _ in 0..100 {
            fan_out(&script, &mut conns).await?;
        }
        let mut lat = Vec::with_capacity(n);
        let start = Instant::now();
        for _ in 0..n {
            let t0 = Instant::now();
            fan_out(&script, &mut conns).await?;
            fan_out(&script, &mut conns).await?;
            lat.push(t0.elapsed());
        }
        Ok(w1::measures(lat, start.elapsed()))
    })
    .await?
}

/// `n` single round trips: p50/p99.
pub async fn round_trip(url: String, n: usize) -> Result<Vec<Measure>> {
    tokio::spawn(async move {
        let mut conn = connect(&url).await?;
        let script = Script::new("return 1");
        for _ in 0..100 {
            script.invoke_async::<_, i64>(&mut conn).await?;
        }
        let mut lat = Vec::with_capacity(n);
        for _ in 0..n {
            let t0 = Instant::now();
            script.invoke_async::<_, i64>(&mut conn).await?;
            lat.push(t0.elapsed());
        }
        let (p50, p99) = p50_p99(&mut lat);
        // The same round trip after the idle gap W6's holder keeps the lock (2-8 ms): the
        // machine goes idle in between, and waking it costs more than a back-to-back call.
        let mut idle = Vec::with_capacity(n.min(100));
        for round in 0..n.min(100) {
            tokio::time::sleep(crate::workloads::w6::hold_time(round)).await;
            let t0 = Instant::now();
            script.invoke_async::<_, i64>(&mut conn).await?;
            idle.push(t0.elapsed());
        }
        let (idle50, idle99) = p50_p99(&mut idle);
        Ok(vec![
            Measure::dist(RTT, p50, p99),
            Measure::dist(RTT_IDLE, idle50, idle99),
        ])
    })
    .await?
}
