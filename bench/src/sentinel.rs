//! A private Sentinel deployment for the L1S rows, as the library's tests start one
//! (tests/support/sentinel.rs): a master, one replica (`--replicaof`) and three sentinels
//! (`redis-server <conf> --sentinel`, quorum 2), every process killed on drop. Its
//! `down-after-milliseconds` is 5 s, so a busy machine does not make the sentinels fail it over
//! in the middle of a row.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::server::{RedisServer, free_port, server_bin};

/// The name the sentinels monitor the master under.
pub const MASTER_NAME: &str = "benchmaster";
const SENTINELS: usize = 3;

pub struct SentinelGroup {
    pub master: RedisServer,
    pub replica: RedisServer,
    sentinels: Vec<(u16, Child)>,
    /// Holds the sentinels' config files; removed on drop.
    dir: std::path::PathBuf,
}

impl SentinelGroup {
    /// Starts the group and waits (at most 20 s) until the replica is linked and every sentinel
    /// names the master.
    pub fn start(cpus: Option<&[usize]>) -> Result<Self> {
        let diskless = ["--repl-diskless-sync-delay".to_string(), "0".into()];
        let master = RedisServer::start_with(cpus, &diskless)?;
        let mut extra = diskless.to_vec();
        extra.extend([
            "--replicaof".into(),
            "127.0.0.1".into(),
            master.port().to_string(),
        ]);
        let replica = RedisServer::start_with(cpus, &extra)?;
        let dir =
            std::env::temp_dir().join(format!("redlease-bench-sentinel-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let mut group = SentinelGroup {
            master,
            replica,
            sentinels: Vec::new(),
            dir,
        };
        for i in 0..SENTINELS {
            let port = free_port()?;
            let conf = group.dir.join(format!("sentinel-{i}.conf"));
            std::fs::write(
                &conf,
                format!(
                    "port {port}\nbind 127.0.0.1\ndaemonize no\ndir {dir}\n\
                     sentinel monitor {MASTER_NAME} 127.0.0.1 {master} 2\n\
                     sentinel down-after-milliseconds {MASTER_NAME} 5000\n\
                     sentinel failover-timeout {MASTER_NAME} 10000\n",
                    dir = group.dir.display(),
                    master = group.master.port(),
                ),
            )?;
            let mut cmd = Command::new(server_bin());
            if let Some(cpus) = cpus {
                let cpus = cpus.to_vec();
                // SAFETY: the hook only makes the sched_setaffinity system call.
                unsafe {
                    std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
                        crate::affinity::pin(&cpus)
                    })
                };
            }
            let child = cmd
                .arg(&conf)
                .arg("--sentinel")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .context("cannot start redis-server --sentinel")?;
            group.sentinels.push((port, child));
        }
        group.wait_formed()?;
        Ok(group)
    }

    fn wait_formed(&self) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let linked = info(&self.replica.url(), "replication")
                .is_ok_and(|i| i.contains("master_link_status:up"));
            let named = self
                .sentinels
                .iter()
                .all(|(port, _)| master_port(*port).is_ok_and(|p| p == Some(self.master.port())));
            if linked && named {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("the bench Sentinel group did not form in 20 s (replica linked: {linked})");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `redis+sentinel://127.0.0.1:S1,127.0.0.1:S2,127.0.0.1:S3/benchmaster`, as redlease
    /// takes it.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|(port, _)| format!("127.0.0.1:{port}"))
            .collect();
        format!("redis+sentinel://{}/{MASTER_NAME}", hosts.join(","))
    }
}

fn info(url: &str, section: &str) -> Result<String> {
    let mut c = redis::Client::open(url)?.get_connection()?;
    Ok(redis::cmd("INFO").arg(section).query(&mut c)?)
}

/// The master's port as the sentinel on `port` names it.
fn master_port(port: u16) -> Result<Option<u16>> {
    let url = format!("redis://127.0.0.1:{port}/");
    let mut c = redis::Client::open(url)?.get_connection()?;
    let addr: Option<(String, u16)> = redis::cmd("SENTINEL")
        .arg("get-master-addr-by-name")
        .arg(MASTER_NAME)
        .query(&mut c)?;
    Ok(addr.map(|(_, p)| p))
}

impl Drop for SentinelGroup {
    fn drop(&mut self) {
        for (_, child) in &mut self.sentinels {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
