//! Finding the master: every sentinel asked `SENTINEL MASTER`, newest config epoch first, and
//! the answer checked with `ROLE` (see `sentinel.rs`).

use std::sync::Arc;
use std::time::Duration;

use redis::{Cmd, ErrorKind, RedisError, Value};

use super::SentinelSpec;
use crate::error::{Error, Result};
use crate::node::bounded;
use crate::node::shape::server_client;

/// Finds the master: what the command holder and the subscriber share.
#[derive(Debug, Clone)]
pub(crate) struct Resolver {
    pub(super) spec: Arc<SentinelSpec>,
    pub(super) timeout: Duration,
}

impl Resolver {
    pub(crate) fn new(spec: &SentinelSpec, timeout: Duration) -> Result<Resolver> {
        spec.check()?;
        Ok(Resolver {
            spec: Arc::new(spec.clone()),
            timeout,
        })
    }

    /// Asks every sentinel at once for the master (`SENTINEL MASTER`), and answers the first
    /// address that `ROLE` confirms is a master, with a client for it: the address of the
    /// newest configuration (highest config epoch) first, then the one most sentinels name.
    /// Right after a failover the sentinel that led it still names the old master until the
    /// failover ends (seconds), and the others switch one by one as they hear of it; the old
    /// master meanwhile still answers as one. The newest epoch names the new master as soon as
    /// any sentinel knows it. [`Error::UnknownMaster`] when every sentinel that answered knows
    /// no master of that name.
    pub(crate) async fn resolve(&self) -> Result<(String, redis::Client)> {
        let asks = (0..self.spec.sentinels.len()).map(|i| self.ask(i));
        let answers = futures_util::future::join_all(asks).await;
        // (address, newest epoch naming it, votes)
        let mut named: Vec<(String, u64, usize)> = Vec::new();
        let (mut unknown, mut last) = (0, None);
        for answer in answers {
            match answer {
                Ok(Some((addr, epoch))) => match named.iter_mut().find(|(a, ..)| *a == addr) {
                    Some((_, newest, votes)) => {
                        *newest = (*newest).max(epoch);
                        *votes += 1;
                    }
                    None => named.push((addr, epoch, 1)),
                },
                Ok(None) => unknown += 1,
                Err(e) => last = Some(e),
            }
        }
        if named.is_empty() && unknown > 0 {
            return Err(Error::UnknownMaster {
                name: self.spec.master.clone(),
            });
        }
        named.sort_by_key(|&(_, epoch, votes)| std::cmp::Reverse((epoch, votes)));
        for (addr, ..) in named {
            match self.verify(&addr).await {
                Ok(client) => return Ok((addr, client)),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| no_master(&self.spec.master, "no sentinel answered")))
    }

    /// Sentinel `i`'s answer: the master's `host:port` and the config epoch it knows it by, or
    /// `None` when it knows no such name.
    async fn ask(&self, i: usize) -> Result<Option<(String, u64)>> {
        let mut cmd = redis::cmd("SENTINEL");
        cmd.arg("MASTER").arg(&self.spec.master);
        let reply = match self.ask_with(i, true, &cmd).await {
            Err(Error::Redis { source, .. })
                if !self.spec.credentials.is_empty() && refused_credentials(&source) =>
            {
                self.ask_with(i, false, &cmd).await
            }
            other => other,
        };
        let fields = match reply {
            Err(Error::Redis { source, .. })
                if source.to_string().contains("No such master with that name") =>
            {
                return Ok(None);
            }
            other => other?,
        };
        let field = |name: &str| fields.get(name).map(String::as_str);
        match (field("ip"), field("port")) {
            (Some(ip), Some(port)) => {
                let epoch = field("config-epoch").and_then(|e| e.parse().ok());
                Ok(Some((format!("{ip}:{port}"), epoch.unwrap_or(0))))
            }
            _ => Err(Error::Protocol {
                script: "sentinel master",
                reply: "no ip and port".into(),
            }),
        }
    }

    async fn ask_with(
        &self,
        i: usize,
        with_credentials: bool,
        cmd: &Cmd,
    ) -> Result<std::collections::HashMap<String, String>> {
        let urls = self.spec.sentinel_urls(with_credentials);
        let url = urls.get(i).map_or("", String::as_str);
        let client = server_client(url)?;
        let ask = async {
            let mut conn = client.get_multiplexed_async_connection().await?;
            cmd.query_async(&mut conn).await
        };
        bounded("ask sentinel", "", self.timeout, ask).await
    }

    /// A client of `addr` if it answers `ROLE` as a master.
    pub(crate) async fn verify(&self, addr: &str) -> Result<redis::Client> {
        let client = server_client(&self.spec.master_url(addr))?;
        let role = async {
            let mut conn = client.get_multiplexed_async_connection().await?;
            redis::cmd("ROLE")
                .query_async::<Vec<Value>>(&mut conn)
                .await
        };
        let role = bounded("check master role", "", self.timeout, role).await?;
        match role.first() {
            Some(Value::BulkString(role)) if role.as_slice() == b"master" => Ok(client),
            _ => Err(no_master(
                &self.spec.master,
                "the address the sentinels name is not a master (yet)",
            )),
        }
    }
}

/// Whether a sentinel refused the credentials (it has no password, or other ones).
pub(super) fn refused_credentials(e: &RedisError) -> bool {
    let text = e.to_string();
    e.kind() == ErrorKind::AuthenticationFailed
        || text.contains("WRONGPASS")
        || text.contains("without any password configured")
        || text.contains("NOAUTH")
}

/// The error of a resolution that found no master this time (a failover under way, say).
pub(super) fn no_master(master: &str, why: &str) -> Error {
    let source = RedisError::from((ErrorKind::Io, "no Redis master", format!("{master}: {why}")));
    Error::Redis {
        operation: "resolve master",
        source,
    }
}
