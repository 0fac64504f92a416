//! The deployment shape: one standalone server or a Redis Cluster. Everything that differs
//! between them lives here: how to connect, which connection type carries the commands, how keys
//! group into shards (cluster slots), and which variant of the publishing scripts runs.

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};

use crate::error::{Error, Result};
use crate::node::dial::Dial;
use crate::node::sentinel::{Resolver, SENTINEL_SCHEME, SentinelConn, SentinelSpec, ServerConn};
use crate::node::tls;

/// The schemes whose `+cluster` form names a cluster by its seed nodes:
/// `redis+cluster://[user:pass@]host:port[,host:port...][/?query]`; each seed gets the scheme
/// (`rediss+cluster://` → `rediss://` seeds: TLS).
const CLUSTER_SCHEMES: [&str; 4] = ["redis", "rediss", "valkey", "valkeys"];

/// Where to connect, as the user named it.
#[derive(Debug, Clone)]
pub(crate) enum Target {
    /// One server: `redis://...`.
    Server(String),
    /// A Redis Cluster, by the URLs of some of its nodes (any node will do: the rest are found).
    Cluster(Vec<String>),
    /// A master found through Redis Sentinel, by name: `redis+sentinel://...`.
    Sentinel(Box<SentinelSpec>),
}

impl Target {
    /// Reads a URL: a `redis+cluster://` URL (or `rediss+cluster://` for TLS, `valkey+cluster`,
    /// `valkeys+cluster`) names a cluster, anything else one server.
    pub(crate) fn parse(url: &str) -> Target {
        if let Some(rest) = url.strip_prefix(SENTINEL_SCHEME) {
            return Target::Sentinel(Box::new(SentinelSpec::parse(rest)));
        }
        for scheme in CLUSTER_SCHEMES {
            let head = url.get(..scheme.len() + "+cluster://".len());
            if head.is_some_and(|head| head.eq_ignore_ascii_case(&format!("{scheme}+cluster://"))) {
                let rest = &url[scheme.len() + "+cluster://".len()..];
                return Target::Cluster(split_cluster_url(scheme, rest));
            }
        }
        Target::Server(url.to_owned())
    }

    /// A master through sentinels, as `Client::builder_sentinel` names it.
    pub(crate) fn sentinel(master: String, sentinels: Vec<String>) -> Target {
        Target::Sentinel(Box::new(SentinelSpec::from_parts(master, sentinels)))
    }

    /// The URL of the server named, or a cluster's first seed (sentinels have none).
    pub(crate) fn first_url(&self) -> Result<&str> {
        match self {
            Target::Server(url) => Ok(url),
            Target::Cluster(seeds) => seeds.first().map(String::as_str).ok_or_else(|| {
                Error::InvalidArgument("a Redis Cluster needs at least one seed URL".into())
            }),
            Target::Sentinel(_) => Err(Error::InvalidArgument(
                "a master found through sentinels has no URL of its own".into(),
            )),
        }
    }
}

/// `a:1,b:2/?x` with the credentials of `user:pass@` → `redis://user:pass@a:1/?x`,
/// `redis://user:pass@b:2/?x` (for `scheme` `redis`).
fn split_cluster_url(scheme: &str, rest: &str) -> Vec<String> {
    let (authority, path) = match rest.find(['/', '?']) {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let (credentials, hosts) = match authority.rfind('@') {
        Some(i) => (&authority[..=i], &authority[i + 1..]),
        None => ("", authority),
    };
    hosts
        .split(',')
        .filter(|host| !host.is_empty())
        .map(|host| format!("{scheme}://{credentials}{host}{path}"))
        .collect()
}

/// The connection that carries commands: cheap to clone, reconnects by itself.
#[derive(Clone)]
pub(crate) enum Conn {
    /// One server, named directly or found through sentinels (`sentinel.rs`).
    Server(ServerConn),
    /// Routes each command to the primary of its key's slot, follows MOVED/ASK, refreshes the
    /// slot map and reconnects (redis-rs `cluster-async`). Never reads from replicas.
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Server(conn) => conn.req_packed_command(cmd),
            Conn::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Server(conn) => conn.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Server(conn) => conn.get_db(),
            Conn::Cluster(conn) => conn.get_db(),
        }
    }
}

/// Opens the command connection to `target`: now, or (`lazy`) on first use. A failed TLS
/// handshake is [`Error::Tls`].
pub(crate) async fn connect(
    target: &Target,
    timeout: Duration,
    lazy: bool,
    dial: &Dial,
) -> Result<Conn> {
    match target {
        Target::Server(url) => {
            let client = dial.server_client(url)?;
            // Our own settings (or the caller's): no response timeout, a short retry chain.
            let config = dial.manager(timeout)?;
            let conn = if lazy {
                ConnectionManager::new_lazy_with_config(client, config)
                    .map_err(|e| Error::redis("connect", "", e))?
            } else {
                let connect = ConnectionManager::new_with_config(client, config);
                crate::node::bounded("connect", "", timeout, connect)
                    .await
                    .map_err(tls::classify)?
            };
            Ok(Conn::Server(ServerConn::Direct(conn)))
        }
        Target::Sentinel(spec) => {
            if !dial.is_plain() {
                return Err(Error::InvalidArgument(
                    "TLS options, your own redis::Client and connection manager settings do not apply behind Sentinel yet".into(),
                ));
            }
            let resolver = Resolver::new(spec, timeout)?;
            let conn = SentinelConn::connect(resolver, lazy).await?;
            Ok(Conn::Server(ServerConn::Sentinel(conn)))
        }
        Target::Cluster(seeds) => {
            let client = cluster_builder(seeds, timeout, dial)?
                .build()
                .map_err(|e| bad_url(seeds, e))?;
            let conn = if lazy {
                // The config replaces the builder's timeouts; the same ones again.
                let config = redis::cluster::ClusterConfig::new()
                    .set_connection_timeout(timeout)
                    .set_response_timeout(RESPONSE_TIMEOUT);
                client.get_pending_async_connection_with_config(config)
            } else {
                let connect = client.get_async_connection();
                crate::node::bounded("connect", "", timeout, connect)
                    .await
                    .map_err(tls::classify)?
            };
            Ok(Conn::Cluster(conn))
        }
    }
}

/// A plain client of one server (the sentinels, and a master found through them).
pub(crate) fn server_client(url: &str) -> Result<redis::Client> {
    redis::Client::open(url)
        .map_err(|e| Error::InvalidArgument(format!("bad Redis URL `{url}`: {e}")))
}

fn bad_url(seeds: &[String], e: redis::RedisError) -> Error {
    // The seeds are not shown: they may carry a password.
    Error::InvalidArgument(format!(
        "bad Redis Cluster seed URLs ({}): {e}",
        seeds.len()
    ))
}

/// redis-rs's limit per request to a cluster node: far beyond any caller's (see below).
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(3600);

/// The cluster settings every connection of the client shares.
pub(crate) fn cluster_builder(
    seeds: &[String],
    timeout: Duration,
    dial: &Dial,
) -> Result<ClusterClientBuilder> {
    if seeds.is_empty() {
        return Err(Error::InvalidArgument(
            "a Redis Cluster needs at least one seed URL".into(),
        ));
    }
    for seed in seeds {
        redis::Client::open(seed.as_str()).map_err(|e| bad_url(seeds, e))?;
    }
    let builder = ClusterClientBuilder::new(seeds.to_vec())
        .connection_timeout(timeout)
        // As for one server: each call is bounded by the caller's own limit (`bounded`), and a
        // request may outlive its caller to give back a late grant. Within that limit redis-rs
        // retries MOVED, ASK, READONLY and TRYAGAIN after refreshing the slot map, which is what
        // carries a lock call across a failover or a slot migration.
        .response_timeout(RESPONSE_TIMEOUT)
        .overall_response_timeout(None)
        .retries(16)
        .min_retry_wait(10)
        .max_retry_wait(200);
    dial.cluster(seeds, builder)
}

/// The slot of the key a command is routed by: the first key of `EVAL`/`EVALSHA` (none when it
/// has no keys), else its first argument. Covers the commands this crate pipelines.
pub(crate) fn command_slot(cmd: &Cmd) -> Option<u16> {
    let args: Vec<&[u8]> = cmd
        .args_iter()
        .filter_map(|arg| match arg {
            redis::Arg::Simple(bytes) => Some(bytes),
            _ => None,
        })
        .collect();
    let name = args.first()?;
    let key = if name.eq_ignore_ascii_case(b"EVAL") || name.eq_ignore_ascii_case(b"EVALSHA") {
        let keys: usize = std::str::from_utf8(args.get(2)?).ok()?.parse().ok()?;
        if keys == 0 {
            return None;
        }
        args.get(3)?
    } else {
        args.get(1)?
    };
    Some(slot_of_bytes(key))
}

/// Cluster hash slot of `key` (CRC16 of its hash tag, mod 16384), as the server computes it.
pub(crate) fn slot(key: &str) -> u16 {
    slot_of_bytes(key.as_bytes())
}

fn slot_of_bytes(bytes: &[u8]) -> u16 {
    let tagged = bytes
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &bytes[open + 1..];
            let close = rest.iter().position(|&b| b == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(bytes);
    crc16::State::<crc16::XMODEM>::calculate(tagged) % 16384
}

/// The scripts that publish (grants), in the variant for a
/// cluster: sharded pub/sub (`SPUBLISH`), falling back to the plain command on a server without
/// it (before Redis 7). Derived from the standalone sources, so both stay one text.
pub(crate) mod sharded {
    use std::sync::LazyLock;

    use redis::Script;

    /// Lua helpers put before a script: the sharded command, or the plain one where the server
    /// does not know it. A plain PUBLISH in a cluster reaches every node; the subscriber falls
    /// back to SUBSCRIBE on such servers too (`node/deploy/link.rs`).
    const PRELUDE: &str = "\
local function publish(channel, message)
    local sent = redis.pcall('SPUBLISH', channel, message)
    if type(sent) == 'table' and sent.err then
        return redis.call('PUBLISH', channel, message)
    end
    return sent
end
";

    /// `source` with its PUBLISH calls sent through the prelude's helper.
    pub(crate) fn variant(source: &str) -> String {
        let body = source.replace("redis.call('PUBLISH', ", "publish(");
        format!("{PRELUDE}{body}")
    }

    pub(crate) static RELEASE: LazyLock<Script> =
        LazyLock::new(|| Script::new(&variant(crate::scripts::RELEASE_SOURCE)));
    pub(crate) static ACQUIRE: LazyLock<Script> =
        LazyLock::new(|| Script::new(&variant(crate::scripts::ACQUIRE_SOURCE)));
    pub(crate) static WITHDRAW: LazyLock<Script> =
        LazyLock::new(|| Script::new(&variant(crate::scripts::WITHDRAW_SOURCE)));
    pub(crate) static FORCE_RELEASE: LazyLock<Script> =
        LazyLock::new(|| Script::new(&variant(crate::scripts::FORCE_RELEASE_SOURCE)));

    #[cfg(test)]
    mod tests {
        #[test]
        fn every_publish_is_rewritten() {
            for source in [
                crate::scripts::RELEASE_SOURCE,
                crate::scripts::ACQUIRE_SOURCE,
                crate::scripts::WITHDRAW_SOURCE,
                crate::scripts::FORCE_RELEASE_SOURCE,
            ] {
                let rewritten = super::variant(source);
                let body = &rewritten[super::PRELUDE.len()..];
                assert!(!body.contains("'PUBLISH'"), "{body}");
                assert_ne!(
                    body, source,
                    "nothing to rewrite: the helpers would be dead"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_url_names_every_seed_with_shared_credentials() {
        let Target::Cluster(seeds) = Target::parse("redis+cluster://u:p@a:1,b:2/?protocol=2")
        else {
            panic!("not a cluster")
        };
        assert_eq!(
            seeds,
            ["redis://u:p@a:1/?protocol=2", "redis://u:p@b:2/?protocol=2"]
        );
        let Target::Cluster(seeds) = Target::parse("rediss+cluster://a:1,b:2") else {
            panic!("not a cluster")
        };
        assert_eq!(seeds, ["rediss://a:1", "rediss://b:2"]);
        assert!(matches!(Target::parse("redis://a:1"), Target::Server(_)));
    }

    #[test]
    fn a_command_is_routed_by_its_first_key() {
        let mut eval = redis::cmd("EVALSHA");
        eval.arg("sha").arg(2).arg("redlease:{foo}").arg("b");
        assert_eq!(command_slot(&eval), Some(12182));
        let mut keyless = redis::cmd("EVAL");
        keyless.arg("return 1").arg(0);
        assert_eq!(command_slot(&keyless), None);
        let mut get = redis::cmd("GET");
        get.arg("x:{foo}:fence");
        assert_eq!(command_slot(&get), Some(12182));
    }

    #[test]
    fn slot_follows_the_hash_tag() {
        // Values from `CLUSTER KEYSLOT`.
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("redlease:{foo}"), 12182);
        assert_eq!(slot("x{}y"), slot("x{}y"));
        assert_eq!(slot("{user1000}.following"), slot("{user1000}.followers"));
    }
}
