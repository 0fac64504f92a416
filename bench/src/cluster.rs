//! A private Redis Cluster for the cluster workloads: three primaries (no replicas: the rows
//! compare the client's cost of routing by slot with one server, not replication), formed with
//! `redis-cli --cluster create`, killed on drop.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::server::RedisServer;

const PRIMARIES: usize = 3;

pub struct BenchCluster {
    pub nodes: Vec<RedisServer>,
    /// Holds the nodes' cluster config files; removed on drop.
    dir: std::path::PathBuf,
}

impl BenchCluster {
    pub fn start(cpus: Option<&[usize]>) -> Result<Self> {
        let dir =
            std::env::temp_dir().join(format!("redlease-bench-cluster-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let mut nodes = Vec::new();
        for i in 0..PRIMARIES {
            let extra = [
                "--cluster-enabled".to_string(),
                "yes".into(),
                "--cluster-config-file".into(),
                dir.join(format!("nodes-{i}.conf")).display().to_string(),
                "--dir".into(),
                dir.display().to_string(),
            ];
            nodes.push(RedisServer::start_with(cpus, &extra)?);
        }
        let addresses: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .context("cannot run redis-cli (it forms the bench's cluster)")?;
        if !out.status.success() {
            bail!(
                "redis-cli --cluster create failed: {}",
                String::from_utf8_lossy(&out.stdout)
            );
        }
        let cluster = BenchCluster { nodes, dir };
        cluster.wait_ok()?;
        Ok(cluster)
    }

    /// Every node reports `cluster_state:ok` and knows all the primaries.
    fn wait_ok(&self) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        for node in &self.nodes {
            let mut conn = redis::Client::open(node.url())?.get_connection()?;
            loop {
                let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut conn)?;
                let ok = info.contains("cluster_state:ok")
                    && info.contains(&format!("cluster_known_nodes:{PRIMARIES}"));
                if ok {
                    break;
                }
                if Instant::now() > deadline {
                    bail!("the bench cluster did not settle in 30 s: {info}");
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(())
    }

    /// `redis+cluster://` URL naming every node, as redlease takes it.
    pub fn url(&self) -> String {
        cluster_url(&self.nodes.iter().map(RedisServer::url).collect::<Vec<_>>())
    }
}

/// `redis+cluster://host:port,host:port,...` from node URLs.
pub fn cluster_url(urls: &[String]) -> String {
    let hosts: Vec<&str> = urls
        .iter()
        .map(|u| u.trim_start_matches("redis://").trim_end_matches('/'))
        .collect();
    format!("redis+cluster://{}", hosts.join(","))
}

impl Drop for BenchCluster {
    fn drop(&mut self) {
        self.nodes.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
