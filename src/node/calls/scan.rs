//! What operators ask of a deployment beyond one lock's keys: the held locks (`SCAN` on a
//! server, on every primary of a cluster).

use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{Cmd, Value};

use crate::error::{Error, Result};
use crate::node::{Node, bounded, shape::Conn};

/// Keys asked for per `SCAN` call.
const SCAN_COUNT: usize = 1_000;
/// `SCAN` calls per server at most, so a huge keyspace cannot keep a listing going forever.
const MAX_CALLS: usize = 10_000;

impl Node {
    /// The keys matching the glob `pattern` that hold a hash, at most `limit` of them: on a
    /// server, or on every primary of a cluster.
    ///
    /// # Errors
    /// [`Error::Timeout`] or [`Error::Redis`] from any server.
    pub(crate) async fn scan_hashes(&self, pattern: &str, limit: usize) -> Result<Vec<String>> {
        let mut found = Vec::new();
        match &self.conn {
            Conn::Server(_) => self.scan_one(None, pattern, limit, &mut found).await?,
            Conn::Cluster(_) => {
                for (host, port) in self.primaries().await? {
                    let at = Some(SingleNodeRoutingInfo::ByAddress { host, port });
                    self.scan_one(at, pattern, limit, &mut found).await?;
                }
            }
        }
        Ok(found)
    }

    /// `SCAN ... TYPE hash` through one server (`at` on a cluster) until done or `limit`.
    async fn scan_one(
        &self,
        at: Option<SingleNodeRoutingInfo>,
        pattern: &str,
        limit: usize,
        found: &mut Vec<String>,
    ) -> Result<()> {
        let mut cursor = 0u64;
        for _ in 0..MAX_CALLS {
            let mut cmd = redis::cmd("SCAN");
            cmd.arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(SCAN_COUNT)
                .arg("TYPE")
                .arg("hash");
            let reply = self.routed(cmd, at.clone()).await?;
            let (next, keys): (u64, Vec<String>) = redis::from_redis_value(reply)
                .map_err(|e| Error::redis("list locks", "", e.into()))?;
            for key in keys {
                if found.len() >= limit {
                    return Ok(());
                }
                found.push(key);
            }
            cursor = next;
            if cursor == 0 {
                return Ok(());
            }
        }
        Ok(())
    }

    /// The host and port of every primary of the cluster (`CLUSTER NODES`).
    async fn primaries(&self) -> Result<Vec<(String, u16)>> {
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg("NODES");
        let reply = self
            .routed(cmd, Some(SingleNodeRoutingInfo::Random))
            .await?;
        let text: String =
            redis::from_redis_value(reply).map_err(|e| Error::redis("list locks", "", e.into()))?;
        Ok(text
            .lines()
            .filter_map(|line| {
                let fields: Vec<&str> = line.split(' ').collect();
                let flags = fields.get(2)?;
                if !flags.contains("master") || flags.contains("fail") {
                    return None;
                }
                // `host:port@cport[,hostname]`
                let address = fields.get(1)?.split('@').next()?;
                let (host, port) = address.rsplit_once(':')?;
                Some((host.to_owned(), port.parse().ok()?))
            })
            .collect())
    }

    /// Sends `cmd` to the server, or on a cluster to the node `at` names.
    async fn routed(&self, cmd: Cmd, at: Option<SingleNodeRoutingInfo>) -> Result<Value> {
        match (&self.conn, at) {
            (Conn::Cluster(conn), Some(at)) => {
                let mut conn = conn.clone();
                let send = conn.route_command(cmd, RoutingInfo::SingleNode(at));
                bounded("list locks", "", self.timeout, send).await
            }
            _ => self.query(&cmd).await,
        }
    }
}
