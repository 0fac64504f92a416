//! E1 and E2, leader election (redlease only: no peer has one):
//! - E1: a leader resigns while a candidate of another client waits; the time from the
//!   `resign()` call to the candidate's `campaign` returning, leadership passing back and forth;
//! - E2: a leader process (this binary as a candidate, see [`candidate`]) is killed with
//!   SIGKILL while a candidate waits; the time from the kill to the candidate's `campaign`
//!   returning, against the lease (renewed every third of it, so between 2/3 and all of it).

use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::model::{LEASE, Measure, TAKEOVER_KILL, TAKEOVER_RESIGN, Unit};
use crate::stats::{micros, p50_p99};

/// Set in a candidate process's environment: `URL NAME LEASE_MS`.
pub const CANDIDATE_VAR: &str = "REDLEASE_BENCH_CANDIDATE";
const LEADING: &str = "LEADING";

/// E1: `rounds` hand-overs by resignation between two clients.
pub async fn resign_takeover(url: &str, rounds: usize) -> Result<Vec<Measure>> {
    let clients = [
        crate::redlease_impl::client(url).await?,
        crate::redlease_impl::client(url).await?,
    ];
    let name = "bench:election:e1";
    let elections = [clients[0].election(name)?, clients[1].election(name)?];
    let mut leader = elections[0].campaign("0").await?;
    let mut samples = Vec::with_capacity(rounds);
    for round in 0..rounds {
        let next = elections[(round + 1) % 2].clone();
        let waiting = tokio::spawn(async move {
            let won = next.campaign("x").await;
            (won, Instant::now())
        });
        // The candidate is waiting (tried once, subscribed) before the leader resigns.
        tokio::time::sleep(Duration::from_millis(10)).await;
        if waiting.is_finished() {
            bail!("a candidate won while the leader led");
        }
        let resigned = Instant::now();
        leader.resign().await?;
        let (won, at) = waiting.await?;
        leader = won?;
        samples.push(at.duration_since(resigned));
    }
    leader.resign().await?;
    for client in clients {
        client.shutdown().await?;
    }
    let (p50, p99) = p50_p99(&mut samples);
    Ok(vec![Measure::dist(TAKEOVER_RESIGN, p50, p99)])
}

/// E2: `rounds` leaders killed with SIGKILL, each replaced by a candidate of this process.
pub async fn kill_takeover(url: &str, rounds: usize, lease: Duration) -> Result<Vec<Measure>> {
    let client = crate::redlease_impl::builder(url)
        .watchdog_lease(lease)
        .build()
        .await?;
    let name = "bench:election:e2";
    let election = client.election(name)?;
    let exe = std::env::current_exe()?;
    let mut samples = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let mut leader = tokio::process::Command::new(&exe)
            .env(CANDIDATE_VAR, format!("{url} {name} {}", lease.as_millis()))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("spawning a leader process")?;
        let stdout = leader.stdout.take().context("its stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let leading = tokio::time::timeout(Duration::from_secs(30), async {
            // Bounded: the candidate prints one line.
            for _ in 0..10 {
                match lines.next_line().await? {
                    Some(line) if line == LEADING => return Ok(()),
                    Some(_) => continue,
                    None => break,
                }
            }
            Err(anyhow::anyhow!("the leader process ended before leading"))
        });
        leading
            .await
            .context("the leader process did not lead within 30 s")??;
        let candidate = election.clone();
        let waiting = tokio::spawn(async move {
            let won = candidate.campaign("bench").await;
            (won, Instant::now())
        });
        // Some renewals, so the kill lands anywhere in a renewal period.
        tokio::time::sleep(lease / 2 + Duration::from_millis(fastrand_ms(lease))).await;
        if waiting.is_finished() {
            bail!("the candidate won while the leader lived");
        }
        leader.start_kill()?;
        let killed = Instant::now();
        leader.wait().await?;
        let (won, at) = waiting.await?;
        samples.push(at.duration_since(killed));
        won?.resign().await?;
    }
    client.shutdown().await?;
    let (p50, p99) = p50_p99(&mut samples);
    Ok(vec![
        Measure::dist(TAKEOVER_KILL, p50, p99),
        Measure::new(LEASE, Unit::Micros, micros(lease)),
    ])
}

/// A pseudo-random number of milliseconds below a third of `lease` (no rand dependency).
fn fastrand_ms(lease: Duration) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::from(d.subsec_nanos()));
    nanos % (lease.as_millis() as u64 / 3).max(1)
}

/// The leader process of E2: campaigns, says so, and leads until it is killed (10 minutes at
/// most).
pub fn candidate(spec: &str) -> Result<()> {
    let mut words = spec.split_whitespace();
    let (Some(url), Some(name), Some(lease)) = (words.next(), words.next(), words.next()) else {
        bail!("{CANDIDATE_VAR} is `URL NAME LEASE_MS`, not {spec:?}");
    };
    let lease = Duration::from_millis(lease.parse()?);
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(async {
            let client = crate::redlease_impl::builder(url)
                .watchdog_lease(lease)
                .build()
                .await?;
            let leadership = client.election(name)?.campaign("leader").await?;
            println!("{LEADING}");
            tokio::time::sleep(Duration::from_secs(600)).await;
            drop(leadership);
            anyhow::Ok(())
        })
}
