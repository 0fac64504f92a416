//! Who a client is, written where operators can read it: one small hash per client,
//! `P:client:<uuid>` = {host, pid, program, started_ms, version}, kept alive by the watchdog.
//! `Lock::status` (and the CLI's `status` and `list`) turn an owner field's uuid into the
//! process that holds the lock. The same hash carries the metadata of the client's holds
//! ([`LockOptions::metadata`](crate::LockOptions::metadata)), one field
//! `meta <lock hash> <owner field>` each, so it lives exactly as long as the announcement.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::error::Result;
use crate::node::Node;

/// The process behind a client id, as it announced itself.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientInfo {
    /// The client's id (the first part of its owner fields).
    pub id: String,
    /// Host name of the machine it runs on.
    pub host: String,
    /// Its process id.
    pub pid: u32,
    /// The program's file name.
    pub program: String,
    /// When the client was built, in milliseconds since the Unix epoch.
    pub started_ms: u64,
    /// The redlease version it runs.
    pub version: String,
}

impl ClientInfo {
    /// This process, as the client `id`.
    pub(crate) fn this_process(id: &str) -> ClientInfo {
        let program = std::env::current_exe()
            .ok()
            .and_then(|path| path.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "unknown".into());
        ClientInfo {
            id: id.to_owned(),
            host: gethostname::gethostname().to_string_lossy().into_owned(),
            pid: std::process::id(),
            program,
            started_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            version: env!("CARGO_PKG_VERSION").to_owned(),
        }
    }

    fn from_fields(id: &str, fields: HashMap<String, String>) -> Option<ClientInfo> {
        Some(ClientInfo {
            id: id.to_owned(),
            host: fields.get("host")?.clone(),
            pid: fields.get("pid")?.parse().ok()?,
            program: fields.get("program").cloned().unwrap_or_default(),
            started_ms: fields
                .get("started_ms")
                .and_then(|s| s.parse().ok())
                .unwrap_or(0),
            version: fields.get("version").cloned().unwrap_or_default(),
        })
    }
}

/// The key of client `id`'s announcement: no `{`, so it never collides with a lock's keys.
pub(crate) fn key(prefix: &str, id: &str) -> String {
    format!("{prefix}:client:{id}")
}

/// Writes (or refreshes) this client's announcement, expiring after `ttl` unless refreshed.
pub(crate) async fn announce(
    node: &Node,
    prefix: &str,
    me: &ClientInfo,
    ttl: Duration,
) -> Result<()> {
    let key = key(prefix, &me.id);
    let mut pipe = redis::pipe();
    pipe.hset_multiple(
        &key,
        &[
            ("host", me.host.clone()),
            ("pid", me.pid.to_string()),
            ("program", me.program.clone()),
            ("started_ms", me.started_ms.to_string()),
            ("version", me.version.clone()),
        ],
    )
    .ignore()
    .pexpire(&key, ttl.as_millis().max(1) as i64)
    .ignore();
    node.query_pipeline("announce client", &key, &pipe).await
}

/// Withdraws this client's announcement (shutdown).
pub(crate) async fn withdraw(node: &Node, prefix: &str, me: &ClientInfo) -> Result<()> {
    let mut cmd = redis::cmd("DEL");
    cmd.arg(key(prefix, &me.id));
    node.query::<()>(&cmd).await
}

/// What one client's announcement says: the process (`None` when it has none: gone, or a
/// client of another version) and the metadata of its holds.
#[derive(Debug, Clone, Default)]
pub(crate) struct Announcement {
    pub info: Option<ClientInfo>,
    /// `meta <lock hash> <owner field>` -> metadata ([`metadata_field`]).
    metadata: HashMap<String, String>,
}

impl Announcement {
    /// The metadata of `field`'s hold of the lock whose hash is `hash`, if it set some.
    pub(crate) fn metadata(&self, hash: &str, field: &str) -> Option<String> {
        self.metadata.get(&metadata_field(hash, field)).cloned()
    }
}

/// The announcements of the clients `ids`, in order.
pub(crate) async fn lookup(node: &Node, prefix: &str, ids: &[&str]) -> Result<Vec<Announcement>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let mut pipe = redis::pipe();
    for id in ids {
        pipe.hgetall(key(prefix, id));
    }
    let all: Vec<HashMap<String, String>> =
        node.query_pipeline("look up clients", "", &pipe).await?;
    Ok(ids
        .iter()
        .zip(all)
        .map(|(id, mut fields)| {
            let mut metadata = HashMap::new();
            fields.retain(|name, value| {
                let is_metadata = name.starts_with(METADATA);
                if is_metadata {
                    metadata.insert(name.clone(), std::mem::take(value));
                }
                !is_metadata
            });
            Announcement {
                info: ClientInfo::from_fields(id, fields),
                metadata,
            }
        })
        .collect())
}

/// How a metadata field of an announcement starts.
const METADATA: &str = "meta ";

/// The announcement field of the metadata of `field`'s hold of the lock `hash`.
fn metadata_field(hash: &str, field: &str) -> String {
    format!("{METADATA}{hash} {field}")
}

/// Stores `text` as the metadata of `field`'s hold of the lock `hash`, in this client's
/// announcement, which lives `ttl` from now at least (as long as the watchdog keeps it).
pub(crate) async fn store_metadata(
    node: &Node,
    prefix: &str,
    me: &ClientInfo,
    ttl: Duration,
    (hash, field): (&str, &str),
    text: &str,
) -> Result<()> {
    let key = key(prefix, &me.id);
    let mut pipe = redis::pipe();
    pipe.hset(&key, metadata_field(hash, field), text)
        .ignore()
        .pexpire(&key, ttl.as_millis().max(1) as i64)
        .ignore();
    node.query_pipeline("store lock metadata", &key, &pipe)
        .await
}

/// Removes the metadata of `field`'s hold of the lock `hash` (its last release).
pub(crate) async fn drop_metadata(
    node: &Node,
    prefix: &str,
    me: &ClientInfo,
    (hash, field): (&str, &str),
) -> Result<()> {
    let mut cmd = redis::cmd("HDEL");
    cmd.arg(key(prefix, &me.id))
        .arg(metadata_field(hash, field));
    node.query::<()>(&cmd).await
}

/// The client id of an owner field `<client uuid>:<owner>`.
pub(crate) fn client_of(field: &str) -> &str {
    field.split_once(':').map_or(field, |(client, _)| client)
}
