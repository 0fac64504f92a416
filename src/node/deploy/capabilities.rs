//! What each server of the deployment is and can do, learnt once when the client connects and
//! kept with the node: its name (Redis, Valkey) and version, what follows from them (RESP3,
//! `CLIENT TRACKING`), and its `maxmemory-policy`, with the warnings it calls for
//! ([`ServerWarning`]).
//!
//! One `INFO` per server (every primary of a cluster) says it all. A user without the `INFO`
//! right (docs/acl.md) is answered by `HELLO` (which every user may run) for the name and
//! version, and by `CONFIG GET maxmemory-policy` for the policy, if it may run that; without
//! either the policy stays unknown and nothing is reported. A lazy client learns nothing (its
//! server may be down at start-up). Behind Sentinel it is the master found at connect.

use std::fmt;

use redis::cluster_routing::{MultipleNodeRoutingInfo, ResponsePolicy, RoutingInfo};
use redis::{Cmd, Value};

use crate::error::{Error, Result};
use crate::node::shape::Conn;
use crate::node::{Node, bounded};

/// The one `maxmemory-policy` under which Redis never evicts a key: every other one may evict
/// a lock's key, since every lock key has a TTL (`volatile-*`) and every key is a candidate
/// (`allkeys-*`).
const NO_EVICTION: &str = "noeviction";

/// A server version, `major.minor.patch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Version {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl Version {
    /// `7.0.15` (missing parts are 0); `None` when the major part is not a number.
    fn parse(text: &str) -> Option<Version> {
        let mut parts = text.trim().split('.').map(|p| p.parse::<u32>().ok());
        let major = parts.next()??;
        let mut next = || parts.next().flatten().unwrap_or(0);
        Some(Version {
            major,
            minor: next(),
            patch: next(),
        })
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// What one server is and can do, as learnt at connect. Fields are `None` where the server did
/// not say (a refused command, an older server).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ServerInfo {
    /// Which server: `host:port` as the cluster names it, or the deployment's own name (one
    /// server, or `sentinels .../master`).
    pub node: String,
    /// `redis`, `valkey` (Valkey's `server_name`), or what `HELLO` called it.
    pub name: Option<String>,
    /// The server's own version (Valkey's, not the Redis version it is compatible with).
    pub version: Option<Version>,
    /// `maxmemory-policy`: `noeviction`, `allkeys-lru`, `volatile-ttl`, ...
    pub maxmemory_policy: Option<String>,
}

impl ServerInfo {
    fn unknown(node: String) -> ServerInfo {
        ServerInfo {
            node,
            name: None,
            version: None,
            maxmemory_policy: None,
        }
    }

    /// Whether the server is Valkey (any version: it forked from Redis 7.2).
    fn is_valkey(&self) -> bool {
        self.name.as_deref() == Some("valkey")
    }

    /// Whether the server speaks RESP3 (`HELLO 3`): Redis 6 and later, every Valkey.
    pub(crate) fn resp3(&self) -> bool {
        self.is_valkey() || self.version.is_some_and(|v| v.major >= 6)
    }

    /// Whether the server has `CLIENT TRACKING` (client-side caching's invalidations): Redis 6
    /// and later, every Valkey. A proxy in front may still refuse it.
    pub(crate) fn tracking(&self) -> bool {
        self.resp3()
    }

    /// Whether the server's memory policy may evict a lock's key: every known policy but
    /// `noeviction`.
    pub(crate) fn evicts_locks(&self) -> bool {
        self.maxmemory_policy
            .as_deref()
            .is_some_and(|policy| !policy.eq_ignore_ascii_case(NO_EVICTION))
    }

    /// Reads what `INFO` says: `server_name`, `valkey_version` / `redis_version`,
    /// `maxmemory_policy`.
    fn read_info(&mut self, text: &str) {
        let field = |name: &str| {
            text.lines().find_map(|line| {
                let (key, value) = line.trim().split_once(':')?;
                (key == name).then(|| value.trim().to_owned())
            })
        };
        let valkey = field("valkey_version");
        self.name = field("server_name").or_else(|| {
            let named = if valkey.is_some() { "valkey" } else { "redis" };
            field("redis_version").map(|_| named.to_owned())
        });
        let version = valkey.or_else(|| field("redis_version"));
        self.version = version.as_deref().and_then(Version::parse);
        self.maxmemory_policy = field("maxmemory_policy");
    }

    /// Reads what `HELLO` says: `server` and `version`.
    fn read_hello(&mut self, reply: &Value) {
        let pairs = pairs(reply);
        let field = |name: &str| {
            pairs
                .iter()
                .find_map(|(key, value)| (key == name).then(|| value.clone()))
        };
        self.name = field("server");
        self.version = field("version").as_deref().and_then(Version::parse);
    }
}

/// Something about a server the client connected to that puts locks at risk, as
/// [`Client::server_warnings`](crate::Client::server_warnings) lists it. Each is also logged
/// (`tracing` warning) and counted (`redlease_server_warnings_total`) when the client connects.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ServerWarning {
    /// The server may evict keys when it reaches `maxmemory`, and so a held lock's key: the
    /// lock is then free on the server while its holder still believes it holds it, and
    /// another client may take it. Every policy but `noeviction` may (every lock key has a
    /// TTL, so `volatile-*` policies evict them too). The fix, on the server:
    /// `CONFIG SET maxmemory-policy noeviction` (and in its config file). See
    /// docs/guarantees.md, *Eviction*.
    Eviction {
        /// The server: `host:port`, or how the deployment was named.
        node: String,
        /// Its `maxmemory-policy`.
        policy: String,
    },
}

impl fmt::Display for ServerWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServerWarning::Eviction { node, policy } => write!(
                f,
                "the Redis server {node} has maxmemory-policy {policy}: when it is full it may \
                 evict a held lock's key, and another client then takes the lock while its \
                 holder still holds it; set `CONFIG SET maxmemory-policy noeviction`"
            ),
        }
    }
}

/// What every server of a node is and can do (empty when nothing was learnt: a lazy client).
#[derive(Debug, Default)]
pub(crate) struct Capabilities {
    servers: Vec<ServerInfo>,
}

impl Capabilities {
    /// Each server, one for one server or behind Sentinel, each primary of a cluster.
    pub(crate) fn servers(&self) -> &[ServerInfo] {
        &self.servers
    }

    /// What puts locks at risk on these servers.
    pub(crate) fn warnings(&self) -> Vec<ServerWarning> {
        self.servers
            .iter()
            .filter(|server| server.evicts_locks())
            .map(|server| ServerWarning::Eviction {
                node: server.node.clone(),
                policy: server.maxmemory_policy.clone().unwrap_or_default(),
            })
            .collect()
    }
}

impl Capabilities {
    /// One debug line per server: what it is and can do.
    fn log(&self) {
        for server in self.servers() {
            let version = server.version.map(|v| v.to_string());
            tracing::debug!(
                node = %server.node,
                server = server.name.as_deref().unwrap_or("unknown"),
                version = version.as_deref().unwrap_or("unknown"),
                resp3 = server.resp3(),
                tracking = server.tracking(),
                maxmemory_policy = server.maxmemory_policy.as_deref().unwrap_or("unknown (no INFO or CONFIG GET right)"),
                "server capabilities learnt at connect"
            );
        }
    }
}

impl Node {
    /// What the servers of this node are and can do, as learnt at connect.
    pub(crate) fn capabilities(&self) -> &Capabilities {
        &self.capabilities
    }

    /// Learns what each server is and can do: `INFO`; where refused, `HELLO` and
    /// `CONFIG GET maxmemory-policy`. Never fails: what could not be learnt stays unknown.
    pub(in crate::node) async fn learn_capabilities(&self) -> Capabilities {
        let mut servers = Vec::new();
        for (node, info) in self.ask_each(redis::cmd("INFO")).await {
            let mut server = ServerInfo::unknown(node);
            match info.as_ref().map(text) {
                Ok(Some(text)) => server.read_info(&text),
                outcome => {
                    let why = outcome.err().map(|e| e.to_string()).unwrap_or_default();
                    tracing::debug!(node = %server.node, %why, "INFO not answered; asking HELLO and CONFIG GET");
                }
            }
            servers.push(server);
        }
        if servers.iter().any(|s| s.version.is_none()) {
            for (node, reply) in self.ask_each(redis::cmd("HELLO")).await {
                if let (Some(server), Ok(reply)) = (find(&mut servers, &node), reply) {
                    server.read_hello(&reply);
                }
            }
        }
        if servers.iter().any(|s| s.maxmemory_policy.is_none()) {
            let mut get = redis::cmd("CONFIG");
            get.arg("GET").arg("maxmemory-policy");
            for (node, reply) in self.ask_each(get).await {
                let policy = reply.ok().and_then(|reply| {
                    let pairs = pairs(&reply);
                    pairs
                        .into_iter()
                        .find_map(|(k, v)| (k == "maxmemory-policy").then_some(v))
                });
                if let (Some(server), Some(policy)) = (find(&mut servers, &node), policy) {
                    server.maxmemory_policy = Some(policy);
                }
            }
        }
        let learnt = Capabilities { servers };
        learnt.log();
        learnt
    }

    /// Sends `cmd` to the one server, or to every primary of a cluster: each server's
    /// answer, named as [`ServerInfo::node`].
    async fn ask_each(&self, cmd: Cmd) -> Vec<(String, Result<Value>)> {
        let Conn::Cluster(conn) = &self.conn else {
            let name = self.keyspace.server.clone();
            return vec![(name, self.query::<Value>(&cmd).await)];
        };
        let mut conn = conn.clone();
        let all = RoutingInfo::MultiNode((
            MultipleNodeRoutingInfo::AllMasters,
            Some(ResponsePolicy::Special),
        ));
        let send = conn.route_command(cmd, all);
        let reply = match bounded("learn the servers", "", self.timeout, send).await {
            Ok(reply) => reply,
            Err(e) => return vec![(self.keyspace.server.clone(), Err(e))],
        };
        let Value::Map(each) = reply else {
            return vec![(self.keyspace.server.clone(), Ok(reply))];
        };
        each.into_iter()
            .map(|(node, reply)| {
                let node = text(&node).unwrap_or_default();
                let reply = match reply {
                    Value::ServerError(e) => Err(Error::redis("learn the servers", "", e.into())),
                    reply => Ok(reply),
                };
                (node, reply)
            })
            .collect()
    }

    /// Logs and counts what puts locks at risk on this node's servers, once, at connect; with
    /// `refuse`, a server that may evict lock keys is an error instead.
    ///
    /// # Errors
    /// [`Error::EvictingServer`] with `refuse`, for the first such server.
    pub(crate) fn report_server_warnings(&self, refuse: bool) -> Result<()> {
        for warning in self.capabilities.warnings() {
            let ServerWarning::Eviction { node, policy } = &warning;
            if refuse {
                return Err(Error::EvictingServer {
                    node: node.clone(),
                    policy: policy.clone(),
                });
            }
            crate::telemetry::server_warning("eviction", policy);
            tracing::warn!(%node, %policy, "{warning}");
        }
        Ok(())
    }
}

/// The server named `node` among `servers`.
fn find<'a>(servers: &'a mut [ServerInfo], node: &str) -> Option<&'a mut ServerInfo> {
    servers.iter_mut().find(|server| server.node == node)
}

/// A reply's text: a bulk, simple or verbatim string.
fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(text) => Some(text.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        _ => None,
    }
}

/// The text pairs of a map reply: a RESP3 map, or a RESP2 array of alternating keys and values
/// (`HELLO`, `CONFIG GET`). Values that are not text are left out.
fn pairs(value: &Value) -> Vec<(String, String)> {
    match value {
        Value::Map(pairs) => pairs
            .iter()
            .filter_map(|(k, v)| Some((text(k)?, text(v)?)))
            .collect(),
        Value::Array(items) => items
            .chunks_exact(2)
            .filter_map(|pair| Some((text(&pair[0])?, text(&pair[1])?)))
            .collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(info: &str) -> ServerInfo {
        let mut server = ServerInfo::unknown("n".into());
        server.read_info(info);
        server
    }

    #[test]
    fn info_names_redis_and_valkey_and_their_versions() {
        let redis = server(
            "# Server\r\nredis_version:7.0.15\r\n# Memory\r\nmaxmemory_policy:allkeys-lru\r\n",
        );
        assert_eq!(redis.name.as_deref(), Some("redis"));
        assert_eq!(
            redis.version.map(|v| v.to_string()).as_deref(),
            Some("7.0.15")
        );
        assert!(redis.resp3() && redis.tracking() && redis.evicts_locks());
        let valkey = server(
            "redis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:9.1.2\r\nmaxmemory_policy:noeviction\r\n",
        );
        assert_eq!(valkey.name.as_deref(), Some("valkey"));
        assert_eq!(valkey.version, Version::parse("9.1.2"));
        assert!(!valkey.evicts_locks());
        let old = server("redis_version:5.0.7\r\nmaxmemory_policy:volatile-lru\r\n");
        assert!(!old.resp3() && !old.tracking() && old.evicts_locks());
    }

    #[test]
    fn an_unknown_policy_warns_of_nothing() {
        let unknown = ServerInfo::unknown("n".into());
        assert!(!unknown.evicts_locks());
        let caps = Capabilities {
            servers: vec![unknown, server("maxmemory_policy:volatile-ttl")],
        };
        assert_eq!(
            caps.warnings(),
            [ServerWarning::Eviction {
                node: "n".into(),
                policy: "volatile-ttl".into()
            }]
        );
    }

    #[test]
    fn hello_and_config_replies_in_either_protocol() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let resp2 = Value::Array(vec![
            bulk("server"),
            bulk("redis"),
            bulk("version"),
            bulk("6.2.1"),
        ]);
        let mut server = ServerInfo::unknown("n".into());
        server.read_hello(&resp2);
        assert_eq!(server.version, Version::parse("6.2.1"));
        assert_eq!(server.name.as_deref(), Some("redis"));
        let resp3 = Value::Map(vec![(bulk("maxmemory-policy"), bulk("allkeys-lfu"))]);
        assert_eq!(
            pairs(&resp3),
            [("maxmemory-policy".into(), "allkeys-lfu".into())]
        );
        assert_eq!(Version::parse("x"), None);
        assert_eq!(Version::parse("8").map(|v| v.minor), Some(0));
    }
}
