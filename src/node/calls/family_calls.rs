//! The script calls of the lock family (semaphores, latches, read-write locks, elections): one
//! door for every family script, which picks the script's variant for this deployment (sharded
//! pub/sub on a cluster), loads it on NOSCRIPT, and coalesces concurrent calls of one script
//! into one script call the way the lock's calls are (`batch.rs`).

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::Mutex;
use redis::{FromRedisValue, Script, Value};

use crate::error::{Error, Result};
use crate::node::batch::Batcher;
use crate::node::lock_calls::entry_error;
use crate::node::shape::{Conn, sharded};
use crate::node::{Node, evalsha};

/// A family script, in the variants for one server and for a cluster, each alone and as a
/// batch, each made on first use.
pub(crate) struct FamilyScript {
    /// The script's name, for errors and spans.
    pub name: &'static str,
    source: &'static str,
    batching: Batching,
    /// Indexed by [`variant`]: plain, sharded, plain batch, sharded batch.
    variants: [OnceLock<Script>; 4],
}

/// Whether and how a family script's concurrent calls are coalesced.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Batching {
    /// In the wrapper [`batched`] makes, which runs the script once per entry.
    Wrapped,
    /// The source takes batches itself (and only batches): no wrapper around it, and a call
    /// made alone goes as a batch of one.
    Native,
}

/// The index of a script's variant in [`FamilyScript::variants`].
fn variant(cluster: bool, batch: bool) -> usize {
    usize::from(cluster) + 2 * usize::from(batch)
}

impl FamilyScript {
    const fn with(name: &'static str, source: &'static str, batching: Batching) -> Self {
        FamilyScript {
            name,
            source,
            batching,
            variants: [const { OnceLock::new() }; 4],
        }
    }

    /// A script whose concurrent calls are coalesced, in a wrapper that runs it per entry.
    pub(crate) const fn new(name: &'static str, source: &'static str) -> Self {
        Self::with(name, source, Batching::Wrapped)
    }

    /// A script written for batches (the shape [`batched`] gives others), which can share its
    /// reads and writes among the entries of a batch.
    pub(crate) const fn batching(name: &'static str, source: &'static str) -> Self {
        Self::with(name, source, Batching::Native)
    }

    fn get(&self, cluster: bool, batch: bool) -> &Script {
        self.variants[variant(cluster, batch)].get_or_init(|| {
            let source = match cluster {
                false => self.source.to_string(),
                true => sharded::variant(self.source),
            };
            match batch && self.batching == Batching::Wrapped {
                false => Script::new(&source),
                true => Script::new(&batched(&source)),
            }
        })
    }
}

/// `source` run once per entry of a batch: the script becomes a function of its own `KEYS` and
/// `ARGV`, and a loop hands it each entry's. `ARGV` is, per entry, its key count, its argument
/// count and its arguments; `KEYS` is every entry's keys in order. The reply has one pair per
/// entry: `{1, reply}`, or `{0, error message}` for an entry that failed (the others go on; the
/// family scripts fail before they write anything).
fn batched(source: &str) -> String {
    format!(
        "local function entry(KEYS, ARGV)\n{source}\nend\n\
local out, k, a = {{}}, 1, 1
while a <= #ARGV do
    local nkeys, nargs = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
    local keys, args = {{}}, {{}}
    for i = 1, nkeys do keys[i] = KEYS[k + i - 1] end
    for i = 1, nargs do args[i] = ARGV[a + 1 + i] end
    k, a = k + nkeys, a + 2 + nargs
    local ok, reply = pcall(entry, keys, args)
    if ok then
        out[#out + 1] = {{1, reply}}
    elseif type(reply) == 'table' and reply.err then
        out[#out + 1] = {{0, reply.err}}
    else
        out[#out + 1] = {{0, tostring(reply)}}
    end
end
return out
"
    )
}

/// One family call waiting in a batch.
pub(in crate::node) struct FamilyEntry {
    keys: Vec<String>,
    args: Vec<String>,
}

/// Each family script's batcher on one node, made on its first coalesced call.
#[derive(Default)]
pub(in crate::node) struct FamilyBatches(Mutex<HashMap<BatchesOf, Arc<Batcher<FamilyEntry>>>>);

/// A script, and whether its batcher carries acquisition requests ([`FamilyBatches::of`]).
type BatchesOf = (&'static str, bool);

impl FamilyBatches {
    /// The batcher of `script`'s acquisition requests (`requests`), or of its other calls:
    /// apart, since a batch waits as long as its most patient entry (`Batcher::call`), and a
    /// release must not be sent on long after its caller gave up on it.
    fn of(&self, script: &'static FamilyScript, requests: bool) -> Arc<Batcher<FamilyEntry>> {
        let mut batchers = self.0.lock();
        batchers.entry((script.name, requests)).or_default().clone()
    }
}

impl Node {
    /// Runs `script` on `keys` (all of one lock, so of one cluster slot) with `args`, within the
    /// node's timeout; coalesced with other calls of the same script while requests are in
    /// flight. Not sent again after a lost reply: most family scripts count, and a second run
    /// would count twice. A cluster's answers that mean "not run" (a moving slot, an election)
    /// are sent again, as for every script.
    pub(crate) async fn family_call<T: FromRedisValue>(
        &self,
        script: &'static FamilyScript,
        keys: &[&str],
        args: &[&str],
    ) -> Result<T> {
        let limit = self.timeout;
        self.family_call_within(script, keys, args, limit, false)
            .await
    }

    /// [`family_call`](Self::family_call) for an acquisition request, which waits for its
    /// reply up to `patience`: its caller waits the timeout
    /// and, should it stop waiting, lets the request finish in the background
    /// (`family::ask`), since only the reply tells what the request took.
    pub(crate) async fn family_request<T: FromRedisValue>(
        &self,
        script: &'static FamilyScript,
        keys: &[&str],
        args: &[&str],
        patience: Duration,
    ) -> Result<T> {
        self.family_call_within(script, keys, args, patience, true)
            .await
    }

    async fn family_call_within<T: FromRedisValue>(
        &self,
        script: &'static FamilyScript,
        keys: &[&str],
        args: &[&str],
        limit: Duration,
        request: bool,
    ) -> Result<T> {
        let cluster = matches!(self.conn, Conn::Cluster(_));
        let key = keys.first().copied().unwrap_or("");
        let (_counted, idle) = self.batches.traffic.enter();
        let alone = idle;
        let entry = || FamilyEntry {
            keys: keys.iter().map(|k| k.to_string()).collect(),
            args: args.iter().map(|a| a.to_string()).collect(),
        };
        let typed = |reply: Value| {
            T::from_redis_value(reply).map_err(|e| Error::redis(script.name, key, e.into()))
        };
        if alone && script.batching == Batching::Native {
            let mut replies = self.family_batch(script, vec![entry()], limit).await;
            return match replies.pop() {
                Some(reply) => typed(reply?),
                None => Err(Error::Protocol {
                    script: script.name,
                    reply: "no reply for a batch of one".into(),
                }),
            };
        }
        if !alone {
            let entry = entry();
            let batcher = self.batches.family.of(script, request);
            // Made for a batch's first entry only (a node's clone allocates).
            let sender = || {
                let node = self.clone();
                move |batch: Vec<FamilyEntry>, limit| {
                    let node = node.clone();
                    async move { node.family_batch(script, batch, limit).await }
                }
            };
            let shard = self.shard(key);
            let reply = batcher
                .call(entry, shard, limit, script.name, sender)
                .await?;
            return typed(reply);
        }
        let script_variant = script.get(cluster, false);
        let bytes = keys.iter().chain(args).map(|s| s.len()).sum::<usize>();
        let mut cmd = evalsha(script_variant, keys.len(), args.len(), bytes);
        for key in keys {
            cmd.arg(*key);
        }
        for arg in args {
            cmd.arg(*arg);
        }
        self.eval(script.name, key, limit, script_variant, &cmd)
            .await
    }

    /// Sends a batch of one script's calls (all of one shard) as one call; one reply per entry.
    async fn family_batch(
        &self,
        script: &'static FamilyScript,
        batch: Vec<FamilyEntry>,
        limit: Duration,
    ) -> Vec<Result<Value>> {
        let cluster = matches!(self.conn, Conn::Cluster(_));
        let script_variant = script.get(cluster, true);
        let nkeys: usize = batch.iter().map(|e| e.keys.len()).sum();
        let nargs: usize = batch.iter().map(|e| e.args.len() + 2).sum();
        let bytes: usize = batch
            .iter()
            .flat_map(|e| e.keys.iter().chain(&e.args))
            .map(|s| s.len() + 1)
            .sum();
        let mut cmd = evalsha(script_variant, nkeys, nargs, bytes);
        for key in batch.iter().flat_map(|e| &e.keys) {
            cmd.arg(key);
        }
        for e in &batch {
            cmd.arg(e.keys.len()).arg(e.args.len());
            for arg in &e.args {
                cmd.arg(arg);
            }
        }
        let key = batch.first().and_then(|e| e.keys.first()).map_or("", |k| k);
        let reply: Result<Value> = self
            .eval(script.name, key, limit, script_variant, &cmd)
            .await;
        let keys = batch
            .iter()
            .map(|e| e.keys.first().map_or("", |k| k.as_str()));
        split_replies(script.name, reply, keys)
    }
}

/// One reply per entry of a family batch (see [`batched`]). A failure of the call, or a reply
/// of the wrong shape, is every entry's failure.
fn split_replies<'a>(
    script: &'static str,
    reply: Result<Value>,
    keys: impl ExactSizeIterator<Item = &'a str>,
) -> Vec<Result<Value>> {
    let n = keys.len();
    let replies = match reply {
        Ok(Value::Array(replies)) if replies.len() == n => replies,
        Ok(reply) => {
            let error = Error::Protocol {
                script,
                reply: format!("{reply:?} for a batch of {n}"),
            };
            return vec![Err(error); n];
        }
        Err(e) => return vec![Err(e); n],
    };
    replies
        .into_iter()
        .zip(keys)
        .map(|(reply, key)| {
            let Value::Array(pair) = reply else {
                return Err(Error::Protocol {
                    script,
                    reply: format!("{reply:?} for one entry"),
                });
            };
            match <[Value; 2]>::try_from(pair) {
                Ok([Value::Int(1), reply]) => Ok(reply),
                Ok([Value::Int(0), message]) => {
                    let message = String::from_redis_value(message).unwrap_or_default();
                    Err(entry_error(script, key, &message))
                }
                other => Err(Error::Protocol {
                    script,
                    reply: format!("{other:?} for one entry"),
                }),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::sharded;

    #[test]
    fn every_family_publish_is_rewritten_for_a_cluster() {
        for source in [
            include_str!("../../../lua/queue_permits.lua"),
            include_str!("../../../lua/latch.lua"),
            include_str!("../../../lua/election.lua"),
        ] {
            assert!(
                source.contains("redis.call('PUBLISH', "),
                "nothing to rewrite"
            );
            let rewritten = sharded::variant(source);
            // Only the prelude's own fallback is left.
            let plain = rewritten.matches("redis.call('PUBLISH'").count();
            assert_eq!(plain, 1, "{rewritten}");
        }
    }
}
