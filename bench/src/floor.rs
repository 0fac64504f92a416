//! The floor: a bare EVALSHA of a trivial script through redis-rs on a
//! `ConnectionManager` (the library's connection type), one round trip.

use std::time::{Duration, Instant};

use anyhow::Result;
use futures::future::try_join_all;
use redis::Script;
use redis::aio::ConnectionManager;

use crate::model::{Measure, RTT, RTT_IDLE, RTT_WAKE};
use crate::stats::p50_p99;
use crate::workloads::one_caller;

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
    let clients = urls
        .iter()
        .map(|url| redis::Client::open(url.as_str()))
        .collect::<Result<Vec<_>, _>>()?;
    pairs_on(clients, n).await
}

/// [`pairs`] through clients made by the caller (e.g. with TLS certificates).
pub async fn pairs_on(clients: Vec<redis::Client>, n: usize) -> Result<Vec<Measure>> {
    tokio::spawn(async move {
        let mut conns = Vec::new();
        for client in &clients {
            conns.push(client.get_connection_manager().await?);
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
        Ok(one_caller::measures(lat, start.elapsed()))
    })
    .await?
}

/// W6's own shape with a trivial script in place of the lock, and no lock at all: after the
/// idle gap W6's holder keeps the lock (2-8 ms) a "holder" task makes one round trip (its
/// unlock) and then wakes a "waiter" task, which makes one round trip (its acquisition), on
/// the same connection. Returns the holder's round trips (the machine goes idle in the gap,
/// and waking it costs more than a back-to-back call) and the waiter's, timed from the
/// holder's round trip returning: the least any lock needs in W6 (one round trip for the
/// waiter), with the machine as cold or warm as it is there.
async fn wake_shaped(
    conn: &ConnectionManager,
    script: &Script,
    rounds: usize,
) -> Result<(Vec<Duration>, Vec<Duration>)> {
    let (to_waiter, mut waiter_rx) = tokio::sync::mpsc::channel::<Instant>(1);
    let (to_holder, mut holder_rx) = tokio::sync::mpsc::channel::<Duration>(1);
    let (mut waiter_conn, waiter_script) = (conn.clone(), script.clone());
    let waiter = tokio::spawn(async move {
        while let Some(t0) = waiter_rx.recv().await {
            waiter_script
                .invoke_async::<_, i64>(&mut waiter_conn)
                .await?;
            if to_holder.send(t0.elapsed()).await.is_err() {
                break;
            }
        }
        anyhow::Ok(())
    });
    let mut conn = conn.clone();
    let mut idle = Vec::with_capacity(rounds);
    let mut wake = Vec::with_capacity(rounds);
    for round in 0..rounds {
        tokio::time::sleep(crate::workloads::wake_up::hold_time(round)).await;
        let t0 = Instant::now();
        script.invoke_async::<_, i64>(&mut conn).await?;
        let returned = Instant::now();
        idle.push(returned - t0);
        to_waiter.send(returned).await?;
        wake.push(
            holder_rx
                .recv()
                .await
                .ok_or_else(|| anyhow::anyhow!("floor waiter gone"))?,
        );
    }
    drop(to_waiter);
    waiter.await??;
    Ok((idle, wake))
}

/// `n` single round trips: p50/p99; then (at most 100 rounds) the same round trip in W6's
/// shape (see `wake_shaped`).
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
        let (mut idle, mut wake) = wake_shaped(&conn, &script, n.min(100)).await?;
        let (idle50, idle99) = p50_p99(&mut idle);
        let (wake50, wake99) = p50_p99(&mut wake);
        Ok(vec![
            Measure::dist(RTT, p50, p99),
            Measure::dist(RTT_IDLE, idle50, idle99),
            Measure::dist(RTT_WAKE, wake50, wake99),
        ])
    })
    .await?
}
