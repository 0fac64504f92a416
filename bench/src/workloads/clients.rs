//! K3, the clients curve (issue 39): N client processes (this binary again, one client each,
//! `REDLEASE_BENCH_HOLDER` in their environment), each holding one lock of its own under its
//! implementation's usual hold (redlease: the watchdog, armed for the loss notice; rslock: a
//! 10 s lease). Once every process holds its lock (and 200 ms more, for the connections a
//! client opens after its first hold), the server's `INFO clients` (`connected_clients`) and
//! `INFO memory` (`used_memory`) against their values before the processes started, per
//! process: the connections each client keeps open, and the server memory each costs
//! (connection buffers and the held key).

use std::time::Duration;

use anyhow::{Context as _, Result, anyhow, bail};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::model::{CLIENT_PROCS, CONNS_PER_CLIENT, Measure, SERVER_MEM_PER_CLIENT, Unit};

/// Set in a holding process's environment: `IMPLEMENTATION URL NAME`.
pub const HOLDER_VAR: &str = "REDLEASE_BENCH_HOLDER";
const HOLDING: &str = "K3HOLDING";
const LOST: &str = "K3LOST";
const FAILED: &str = "K3ERROR";

pub const REDLEASE: &str = "redlease Lock";
pub const RSLOCK: &str = "rslock";

/// Past the loss notice's arming delays: the tracking connection is open.
const SETTLE: Duration = Duration::from_millis(200);
const READY_BOUND: Duration = Duration::from_secs(60);

async fn clients_and_memory(admin: &mut redis::aio::MultiplexedConnection) -> Result<(f64, f64)> {
    let info: String = redis::cmd("INFO")
        .arg("clients")
        .arg("memory")
        .query_async(admin)
        .await?;
    let field = |name: &str| -> Result<f64> {
        let v = info.lines().find_map(|l| l.strip_prefix(name));
        Ok(v.with_context(|| format!("no {name} in INFO"))?
            .trim()
            .parse()?)
    };
    Ok((field("connected_clients:")?, field("used_memory:")?))
}

struct Holder {
    _child: tokio::process::Child,
    stdin: Option<tokio::process::ChildStdin>,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

/// K3 with `n` processes of `implementation` on the server at `url`.
pub async fn run(implementation: &str, url: &str, n: usize) -> Result<Vec<Measure>> {
    let mut admin = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    let (conns0, mem0) = clients_and_memory(&mut admin).await?;
    let exe = std::env::current_exe()?;
    let mut holders = Vec::with_capacity(n);
    for i in 0..n {
        let mut cmd = tokio::process::Command::new(&exe);
        let kind = crate::model::family(implementation);
        cmd.env(HOLDER_VAR, format!("{kind} {url} bench:k3:{i}"))
            .env_remove(crate::workloads::loss_notice::FORCER_VAR);
        super::processes::as_child(&mut cmd);
        let mut child = cmd.spawn().context("spawning a K3 process")?;
        let stdin = child.stdin.take().context("no stdin")?;
        let stdout = child.stdout.take().context("no stdout")?;
        holders.push(Holder {
            _child: child,
            stdin: Some(stdin),
            lines: BufReader::new(stdout).lines(),
        });
    }
    for (i, h) in holders.iter_mut().enumerate() {
        let line = tokio::time::timeout(READY_BOUND, h.lines.next_line())
            .await
            .map_err(|_| anyhow!("K3 process {i} did not hold its lock in time"))??;
        match line {
            Some(l) if l == HOLDING => {}
            Some(l) => bail!("K3 process {i}: {}", l.trim_start_matches(FAILED).trim()),
            None => bail!("K3 process {i} ended before holding its lock"),
        }
    }
    tokio::time::sleep(SETTLE).await;
    let (conns1, mem1) = clients_and_memory(&mut admin).await?;
    // Let them release and report.
    let mut lost = 0;
    for h in &mut holders {
        drop(h.stdin.take());
    }
    for (i, h) in holders.iter_mut().enumerate() {
        let read = async {
            while let Some(l) = h.lines.next_line().await? {
                if let Some(n) = l.strip_prefix(LOST) {
                    lost += n.trim().parse::<u64>()?;
                } else if let Some(e) = l.strip_prefix(FAILED) {
                    bail!("K3 process {i}: {}", e.trim());
                }
            }
            anyhow::Ok(())
        };
        tokio::time::timeout(READY_BOUND, read)
            .await
            .map_err(|_| anyhow!("K3 process {i} did not end in time"))??;
    }
    let mut measures = vec![
        Measure::new(CLIENT_PROCS, Unit::Count, n as f64),
        Measure::new(CONNS_PER_CLIENT, Unit::Ratio, (conns1 - conns0) / n as f64),
        Measure::new(SERVER_MEM_PER_CLIENT, Unit::Bytes, (mem1 - mem0) / n as f64),
    ];
    if crate::model::family(implementation) == "redlease" {
        measures.push(crate::losses::measure(lost));
    }
    Ok(measures)
}

/// A holding process: holds its lock until its stdin closes, then releases it and reports.
pub fn holder(spec: &str) -> Result<()> {
    let mut words = spec.split_whitespace();
    let (Some(kind), Some(url), Some(name)) = (words.next(), words.next(), words.next()) else {
        bail!("{HOLDER_VAR} is `IMPLEMENTATION URL NAME`, not {spec:?}");
    };
    let kind = match kind {
        "redlease" => REDLEASE,
        _ => RSLOCK,
    };
    let outcome = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(hold(kind, url, name));
    if let Err(e) = outcome {
        println!("{FAILED} {}", format!("{e:#}").replace('\n', " "));
    }
    Ok(())
}

async fn hold(kind: &str, url: &str, name: &str) -> Result<()> {
    use crate::locker::AsyncLocker as _;
    use std::io::Write as _;
    let wait_eof = async {
        let mut lines = BufReader::new(tokio::io::stdin()).lines();
        while lines.next_line().await?.is_some() {}
        anyhow::Ok(())
    };
    let holding = || -> Result<()> {
        println!("{HOLDING}");
        std::io::stdout().flush()?;
        Ok(())
    };
    if kind == REDLEASE {
        let client = crate::redlease_impl::client(url).await?;
        let guard = client.lock(name)?.lock().await?;
        tokio::time::sleep(SETTLE).await;
        holding()?;
        wait_eof.await?;
        guard.unlock().await?;
        client.shutdown().await?;
        println!("{LOST} {}", crate::losses::count());
    } else {
        let l = crate::peers::rslock::Rslock::new(&[url.to_string()]);
        let guard = l.lock(name).await?;
        holding()?;
        wait_eof.await?;
        l.unlock(guard).await?;
    }
    std::io::stdout().flush()?;
    Ok(())
}
