//! The least-privilege check at connect: every kind of command the crate sends, run once,
//! harmlessly, on a probe key and channel under the prefix, so a Redis user (ACL) that lacks a
//! right fails [`build`](crate::ClientBuilder::build) with [`Error::NoPermission`] naming it,
//! before any lock is taken, instead of failing some later call (docs/acl.md lists the rights).
//!
//! `ACL DRYRUN` would say the same without running anything, but only to administrators. So:
//! one script runs every command the scripts call, under `redis.pcall` (a refused one is
//! reported by name; the probe key is deleted at the end); a pipeline sends the commands sent
//! outside scripts; and, when waiters listen on pub/sub, a subscriber connection subscribes
//! the probe channel and unsubscribes it.

use std::sync::{Arc, LazyLock};

use futures_util::future::BoxFuture;
use tokio::sync::OnceCell;

use redis::Script;

use crate::error::{Error, Result};
use crate::node::Node;
use crate::node::transport::evalsha;

/// The lock name of the probe key and channel: no lock of a user's can have it, it has
/// characters a lock name may have but nobody would choose.
const PROBE_NAME: &str = "redlease acl probe";

/// Runs, on `KEYS[1]`, every command the crate's scripts call; answers `''`, or the first
/// refused one as `COMMAND\nerror`. `ARGV[1]` is a channel in the key's slot; `ARGV[2]` is
/// `'1'` on a cluster (sharded pub/sub too).
static PROBE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local key, channel = KEYS[1], ARGV[1]
local calls = {
    {'HSET', key, 'f', '1'}, {'HSETNX', key, 'f', '1'}, {'HGET', key, 'f'},
    {'HEXISTS', key, 'f'}, {'HGETALL', key}, {'HMGET', key, 'f'}, {'HINCRBY', key, 'f', 1},
    {'HDEL', key, 'f'},
    {'SET', key, '1'}, {'GET', key}, {'INCR', key}, {'INCRBY', key, 1}, {'DECR', key},
    {'DECRBY', key, 1}, {'RPUSH', key, 'x'}, {'LINDEX', key, 0}, {'LREM', key, 0, 'x'},
    {'LPOP', key}, {'EXISTS', key}, {'TYPE', key}, {'PEXPIRE', key, 1000}, {'PTTL', key},
    {'TIME'}, {'PUBLISH', channel, ''}, {'PUBSUB', 'NUMSUB', channel}, {'DEL', key},
}
if ARGV[2] == '1' then
    table.insert(calls, {'SPUBLISH', channel, ''})
    table.insert(calls, {'PUBSUB', 'SHARDNUMSUB', channel})
end
for _, call in ipairs(calls) do
    local reply = redis.pcall(unpack(call))
    if type(reply) == 'table' and reply.err then
        local err = reply.err
        -- Redis 7 in a script: 'The user executing the script can't ...'; else NOPERM.
        local lower = string.lower(err)
        if string.find(err, 'NOPERM', 1, true) or string.find(lower, 'no permission', 1, true)
            or string.find(lower, 'user executing the script', 1, true) then
            redis.pcall('DEL', key)
            local name = call[1]
            if name == 'PUBSUB' then name = 'PUBSUB ' .. call[2] end
            return name .. '\n' .. err
        end
    end
end
redis.pcall('DEL', key)
return ''
",
    )
});

/// A lazy client's check, run once it succeeded, before the first script call or pipeline.
pub(crate) struct Pending {
    prefix: String,
    pubsub: bool,
    passed: OnceCell<()>,
}

impl Node {
    /// Checks the rights (as [`check_rights`](Node::check_rights)) before the first script
    /// call or pipeline instead of now: for a lazy client, whose server may be down yet.
    pub(crate) fn check_rights_on_first_use(&mut self, prefix: &str, pubsub: bool) {
        self.rights = Some(Arc::new(Pending {
            prefix: prefix.to_owned(),
            pubsub,
            passed: OnceCell::new(),
        }));
    }

    /// Whether a lazy client's check has yet to pass: one atomic read, for every call.
    pub(crate) fn rights_pending(&self) -> bool {
        self.rights
            .as_ref()
            .is_some_and(|pending| !pending.passed.initialized())
    }

    /// Runs a lazy client's pending check, until it passes once (a failure is tried again on
    /// the next call). Boxed: the check's own calls are the ones that lead here.
    pub(crate) fn rights_checked(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let Some(pending) = &self.rights else {
                return Ok(());
            };
            // The check's own calls go through a node without the pending check.
            let unchecked = Node {
                rights: None,
                ..self.clone()
            };
            pending
                .passed
                .get_or_try_init(|| async {
                    unchecked
                        .check_rights(&pending.prefix, pending.pubsub)
                        .await
                })
                .await
                .map(|_| ())
                // The first connection of a lazy client is made here: a failed handshake shows.
                .map_err(crate::node::tls::classify)
        })
    }

    /// Checks that the user may do everything the crate does under `prefix` (with `pubsub`:
    /// subscribe too).
    ///
    /// # Errors
    /// [`Error::NoPermission`] naming the first missing right; any other failure as it came.
    pub(crate) async fn check_rights(&self, prefix: &str, pubsub: bool) -> Result<()> {
        let key = format!("{prefix}:{{{PROBE_NAME}}}");
        let channel = format!("{key}:unlock");
        let mut cmd = evalsha(&PROBE, 1, 2, key.len() + channel.len() + 1);
        cmd.arg(&key)
            .arg(&channel)
            .arg(if self.is_cluster() { "1" } else { "0" });
        // Loaded every time: another client's load would hide a missing SCRIPT LOAD right,
        // which the first lock script after a restart or a SCRIPT FLUSH needs.
        self.load_script("check ACL rights", &PROBE)
            .await
            .map_err(|e| denied(e, prefix))?;
        let refused: String = self
            .eval("check ACL rights", &key, self.timeout, &PROBE, &cmd)
            .await
            .map_err(|e| denied(e, prefix))?;
        if let Some((command, reason)) = refused.split_once('\n') {
            return Err(Error::NoPermission {
                right: right_of(reason, command, prefix),
                reason: reason.to_owned(),
            });
        }
        // What is sent outside scripts: status and fence reads, the client's announcement.
        let mut pipe = redis::pipe();
        pipe.get(&key)
            .hget(&key, "f")
            .hgetall(&key)
            .hset_multiple(&key, &[("f", "1")])
            .pexpire(&key, 1000)
            .pttl(&key)
            .exists(&key)
            .del(&key);
        match self
            .query_pipeline::<redis::Value>("check ACL rights", &key, &pipe)
            .await
        {
            // A replica refuses the writes whatever the user's rights: the rights cannot be
            // checked there, and every lock call will answer with the typed READONLY error.
            Err(e) if on_a_replica(&e) => {
                tracing::debug!(error = %e, "connected to a replica: ACL rights not checked");
                return Ok(());
            }
            outcome => outcome.map_err(|e| denied(e, prefix))?,
        };
        if self.is_cluster() {
            // The watchdog's renewal per node is a plain EVAL (`calls/renew_by_node.rs`); redis-rs
            // checks its cluster connections with PING.
            let mut eval = redis::cmd("EVAL");
            eval.arg("return 0").arg(0);
            for cmd in [redis::cmd("PING"), eval] {
                self.query::<redis::Value>(&cmd)
                    .await
                    .map_err(|e| denied(e, prefix))?;
            }
        }
        if pubsub {
            self.check_subscribe(&channel, prefix).await?;
        }
        Ok(())
    }

    /// Subscribes `channel` on a fresh subscriber connection, then unsubscribes it.
    async fn check_subscribe(&self, channel: &str, prefix: &str) -> Result<()> {
        let limit = self.timeout;
        let probe = async {
            let (mut sink, _events) = self.link.connect().await?;
            sink.subscribe(channel).await?;
            sink.unsubscribe(channel).await
        };
        crate::node::bounded("check ACL rights", "", limit, probe)
            .await
            .map_err(|e| denied(e, prefix))
    }
}

/// Whether `error` is a replica's refusal to write (READONLY), alone or in a pipeline's failures.
fn on_a_replica(error: &Error) -> bool {
    let Error::Redis { source, .. } = error else {
        return false;
    };
    source.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly)
        || source.to_string().contains("ReadOnly:")
}

/// A refusal (NOPERM) becomes [`Error::NoPermission`], a refusal of the credentials
/// [`Error::Auth`], a server that could not be reached an error of `connect`; anything else is
/// unchanged. Also for the errors of connecting (a cluster's topology reads, `CLUSTER SLOTS`).
pub(crate) fn denied(error: Error, prefix: &str) -> Error {
    let error = match error.named() {
        // The check runs first on a new connection: the refusal is the connection's.
        Error::Auth { reason, .. } => {
            return Error::Auth {
                operation: "connect",
                reason,
            };
        }
        other => other,
    };
    let Error::Redis { source, .. } = &error else {
        return error;
    };
    if unreachable(source) {
        // The check's first call is a lazy client's first connection: a server that cannot be
        // reached says so, not that rights are missing.
        let Error::Redis { source, .. } = error else {
            return error;
        };
        return Error::Redis {
            operation: "connect",
            source,
        };
    }
    let text = source.to_string();
    let refused = source.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm)
        || text.contains("NOPERM")
        || text.to_ascii_lowercase().contains("no permission");
    if !refused {
        return error;
    }
    // "... no permissions to run the 'script|load' command"
    let command = text
        .split('\'')
        .nth(1)
        .map(|name| name.replace('|', " ").to_ascii_uppercase())
        .unwrap_or_else(|| "a command".to_owned());
    Error::NoPermission {
        right: right_of(&text, &command, prefix),
        reason: text,
    }
}

/// Whether `source` says the server could not be reached (refused, reset, dropped, timed out).
fn unreachable(source: &redis::RedisError) -> bool {
    source.is_io_error()
        || source.is_connection_refusal()
        || source.is_connection_dropped()
        || source.is_timeout()
}

/// The right a refusal names: keys or channels under the prefix, or the command.
fn right_of(reason: &str, command: &str, prefix: &str) -> String {
    let lower = reason.to_ascii_lowercase();
    if lower.contains("channel") {
        format!("use channels under the prefix (&{prefix}:*), for {command}")
    } else if lower.contains("key") {
        format!("use keys under the prefix (~{prefix}:*), for {command}")
    } else {
        format!("run {command}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noperm(text: &str) -> Error {
        let source = redis::RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm),
            "NOPERM",
            text.to_owned(),
        ));
        Error::Redis {
            operation: "check ACL rights",
            source,
        }
    }

    #[test]
    fn a_refusal_names_the_command_or_the_pattern() {
        let error = denied(
            noperm("this user has no permissions to run the 'script|load' command"),
            "app",
        );
        let Error::NoPermission { right, .. } = error else {
            panic!("{error:?}")
        };
        assert_eq!(right, "run SCRIPT LOAD");
        let error = denied(
            noperm("this user has no permissions to access one of the keys used as arguments"),
            "app",
        );
        let Error::NoPermission { right, .. } = error else {
            panic!("{error:?}")
        };
        assert!(right.contains("~app:*"), "{right}");
    }
}
