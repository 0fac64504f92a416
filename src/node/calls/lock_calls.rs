//! The calls of `acquire.lua` (the release's are in `release_calls.rs`): alone when the
//! connection is idle, coalesced with other callers' while requests are in flight (`batch.rs`).
//! An acquisition that asks for replica acknowledgement has `WAIT` pipelined behind its call,
//! alone or coalesced (one `WAIT` per batch call, for the most any of its entries wants;
//! `deploy/replicas.rs`).

use std::sync::Arc;
use std::time::Duration;

use redis::{ErrorKind, RedisResult, ServerErrorKind, Value};

use crate::error::{Error, Result};
use crate::keys::LockKeys;
use crate::node::batch::{Batcher, Traffic};
use crate::node::family_calls::FamilyBatches;
use crate::node::release_calls::ReleaseEntry;
use crate::node::replicas::{Acks, WaitFor};
use crate::node::{Node, UNBOUNDED, evalsha, evalsha_without_keys};
use crate::scripts::{self, Acquire};

/// The terms of one acquisition, as `acquire.lua` takes them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AcquireTerms {
    pub lease_ms: u64,
    pub reentrant: bool,
    /// The owner holds the lock already (a re-entry): a grant from the queue it holds counts
    /// as one hold (`lua/acquire.lua`).
    pub held: bool,
    pub fenced: bool,
    /// The lock-delay in milliseconds, 0 for none.
    pub delay_ms: u64,
    /// A waiter's attempt: queue it when refused (`lua/queue.lua`).
    pub queue: Option<QueueTerms>,
    /// A strict lock's attempt (a `FairLock`): even unqueued, it never takes a free lock while
    /// anybody live is queued (`lua/acquire.lua`, ARGV[6] '-1').
    pub strict: bool,
}

/// How a waiter is queued on the server: its entry outlives the wait it is told by `slack_ms`,
/// a grant to it lasts `claim_ms` until its lease takes over, and the grant's message carries
/// `nonce` (unique to this attempt) back.
#[derive(Debug, Clone, Copy)]
pub(crate) struct QueueTerms {
    pub slack_ms: u64,
    pub claim_ms: u64,
    pub nonce: u64,
}

impl AcquireTerms {
    /// Whether the call needs the script's long form (fence, lock-delay, queue, a strict lock),
    /// which is never coalesced.
    fn long_form(&self) -> bool {
        self.fenced || self.delay_ms > 0 || self.queue.is_some() || self.strict
    }
}

/// An acquisition's reply, and what `WAIT` answered after it when one was asked for.
type Acked = (Value, Option<Acks>);

/// Acquire and release calls made while others are in flight, coalesced (`batch.rs`).
#[derive(Default)]
pub(in crate::node) struct Batches {
    pub(in crate::node) traffic: Traffic,
    acquires: Arc<Batcher<AcquireEntry, Acked>>,
    pub(in crate::node) releases: Arc<Batcher<ReleaseEntry>>,
    pub(in crate::node) family: FamilyBatches,
}

/// One acquisition of a batch (unfenced locks only: a fenced one answers a table).
struct AcquireEntry {
    hash: Arc<str>,
    field: Arc<str>,
    lease_ms: u64,
    reentrant: bool,
    held: bool,
    wait: Option<WaitFor>,
}

impl Node {
    /// Takes (or re-enters) the lock for `field`; coalesced with other calls while some are
    /// in flight, except for fenced locks. With `wait`, `WAIT` follows the call on its
    /// connection, and its answer comes back with the grant (the caller judges it: a grant
    /// acknowledged by too few replicas is still granted here).
    ///
    /// A call of the caller's own arms no timer: its caller bounds the wait, first by its
    /// timeout, then, should it stop waiting, by `limit` (`lock/attempt.rs`); one timer less
    /// per acquisition. A batch, shared with other callers, waits at most `limit`.
    pub(crate) async fn acquire(
        &self,
        keys: &LockKeys,
        field: &Arc<str>,
        terms: AcquireTerms,
        limit: Duration,
        wait: Option<WaitFor>,
    ) -> Result<(Acquire, Option<Acks>)> {
        let (_counted, alone) = self.batches.traffic.enter();
        // No blind retry here: a reply lost with its connection leaves the outcome unknown,
        // and retrying could count a grant twice. `lock/attempt.rs` decides (it knows whether the
        // owner already holds the lock).
        let (reply, acks) = if alone || terms.long_form() {
            let bytes = 2 * keys.hash.len() + field.len() + 32;
            // `acquire_args` writes the key count: how many keys depends on the lock.
            let script = self.acquire_script();
            let mut cmd = evalsha_without_keys(script, 12, bytes);
            acquire_args(&mut cmd, keys, field, terms, self.fence_grace_ms);
            let hash = &keys.hash;
            match wait {
                None => (
                    self.eval("acquire", hash, UNBOUNDED, script, &cmd).await?,
                    None,
                ),
                Some(wait) => {
                    let (reply, acks) = self
                        .eval_acked("acquire", hash, UNBOUNDED, script, &cmd, wait)
                        .await?;
                    (reply, Some(acks))
                }
            }
        } else {
            let entry = AcquireEntry {
                hash: keys.hash.clone(),
                field: field.clone(),
                lease_ms: terms.lease_ms,
                reentrant: terms.reentrant,
                held: terms.held,
                wait,
            };
            let sender = || self.sender(acquire_batch);
            let batcher = &self.batches.acquires;
            let shard = self.shard(&keys.hash);
            // The sender waits up to the longest WAIT timeout of its entries past `limit`.
            let limit = limit + wait.map_or(Duration::ZERO, |w| w.timeout);
            batcher.call(entry, shard, limit, "acquire", sender).await?
        };
        Ok((Acquire::parse(&reply)?, acks))
    }

    /// What sends a batch with `send` on this node; made for a batch's first entry only (a
    /// node's clone allocates).
    pub(in crate::node) fn sender<E, F>(
        &self,
        send: impl Fn(Node, Vec<E>, Duration) -> F + Send + Sync + 'static,
    ) -> impl Fn(Vec<E>, Duration) -> F + Send + Sync + 'static {
        let node = self.clone();
        move |batch, limit| send(node.clone(), batch, limit)
    }
}

/// Sends a batch of acquisitions as one `acquire.lua` call; one reply per entry. When entries
/// ask for replica acknowledgement, one `WAIT` follows the call, for the most any of them wants,
/// and every entry gets its answer.
async fn acquire_batch(
    node: Node,
    batch: Vec<AcquireEntry>,
    limit: Duration,
) -> Vec<Result<Acked>> {
    let bytes: usize = batch
        .iter()
        .map(|e| e.hash.len() + e.field.len() + 16)
        .sum();
    let mut cmd = evalsha(&scripts::ACQUIRE, batch.len(), 3 * batch.len(), bytes);
    for e in &batch {
        cmd.arg(&*e.hash);
    }
    for e in &batch {
        cmd.arg(&*e.field)
            .arg(e.lease_ms)
            .arg(reentry_arg(e.reentrant, e.held));
    }
    let wait = batch.iter().filter_map(|e| e.wait).reduce(WaitFor::max);
    let (reply, acks) = match wait {
        None => {
            let reply = node.eval("acquire", "", limit, &scripts::ACQUIRE, &cmd);
            (reply.await, None)
        }
        // `limit` already covers the longest WAIT timeout (see `Node::acquire`).
        Some(wait) => {
            let limit = limit.saturating_sub(wait.timeout);
            match node
                .eval_acked("acquire", "", limit, &scripts::ACQUIRE, &cmd, wait)
                .await
            {
                Ok((reply, acks)) => (Ok(reply), Some(acks)),
                Err(e) => (Err(e), None),
            }
        }
    };
    split_batch_reply("acquire", reply, batch.iter().map(|e| &*e.hash))
        .into_iter()
        .map(|reply| reply.map(|reply| (reply, acks.clone())))
        .collect()
}

/// Appends the key count, keys and arguments of `acquire.lua` to a command that already names
/// the script (`EVALSHA <sha>` or `EVAL <source>`): the short form for a plain lock, the long
/// one (fencing counter, lock-delay marker) for a fenced lock or one with a lock-delay.
fn acquire_args(
    cmd: &mut redis::Cmd,
    keys: &LockKeys,
    field: &str,
    terms: AcquireTerms,
    fence_grace_ms: u64,
) {
    let reentrant = reentry_arg(terms.reentrant, terms.held);
    if !terms.long_form() {
        cmd.arg(1)
            .arg(&*keys.hash)
            .arg(field)
            .arg(terms.lease_ms)
            .arg(reentrant);
        return;
    }
    let (slack, claim, nonce) = match terms.queue {
        Some(q) => (q.slack_ms.max(1) as i64, q.claim_ms.max(1), q.nonce),
        // A strict lock's single attempt respects the queue without joining it.
        None if terms.strict => (-1, 0, 0),
        None => (0, 0, 0),
    };
    if !terms.fenced && terms.delay_ms == 0 {
        // The waiter form: no fencing counter, no lock-delay marker, no terms of theirs.
        cmd.arg(1)
            .arg(&*keys.hash)
            .arg(field)
            .arg(terms.lease_ms)
            .arg(reentrant)
            .arg(slack)
            .arg(claim)
            .arg(nonce);
        return;
    }
    cmd.arg(3)
        .arg(&*keys.hash)
        .arg(keys.fence())
        .arg(keys.delay())
        .arg(field)
        .arg(terms.lease_ms)
        .arg(reentrant);
    if terms.fenced {
        cmd.arg(fence_grace_ms);
    } else {
        cmd.arg("-");
    }
    cmd.arg(terms.delay_ms).arg(slack).arg(claim).arg(nonce);
}

/// `acquire.lua`'s ARGV[3]: whether the lock is reentrant, and whether the owner holds it
/// already.
fn reentry_arg(reentrant: bool, held: bool) -> &'static str {
    match (reentrant, held) {
        (false, false) => "0",
        (true, false) => "1",
        (true, true) => "2",
        (false, true) => "3",
    }
}

/// One reply per entry of a batch sent as one script call (see `lua/acquire.lua`): a batch of
/// one is answered like a single call; a longer one with a table, where a string is the error
/// of that entry alone. A failure of the call is every entry's failure.
pub(in crate::node) fn split_batch_reply<'a>(
    script: &'static str,
    reply: Result<Value>,
    hashes: impl ExactSizeIterator<Item = &'a str>,
) -> Vec<Result<Value>> {
    let n = hashes.len();
    match reply {
        Ok(reply) if n == 1 => vec![Ok(reply)],
        Ok(Value::Array(replies)) if replies.len() == n => replies
            .into_iter()
            .zip(hashes)
            .map(|(reply, hash)| match reply {
                Value::BulkString(message) => Err(entry_error(
                    script,
                    hash,
                    &String::from_utf8_lossy(&message),
                )),
                reply => Ok(reply),
            })
            .collect(),
        Ok(reply) => {
            let error = Error::Protocol {
                script,
                reply: format!("{reply:?} for a batch of {n}"),
            };
            vec![Err(error); n]
        }
        Err(e) => vec![Err(e); n],
    }
}

/// The error of one entry of a batch, from the message the script answered for it (`WRONGTYPE
/// Operation against a key ...`), typed as if the entry had been sent alone.
pub(in crate::node) fn entry_error(script: &'static str, key: &str, message: &str) -> Error {
    let (code, detail) = message.split_once(' ').unwrap_or((message, ""));
    let error = redis::make_extension_error(code.into(), Some(detail.into()));
    Error::redis(script, key, error)
}

/// One acquisition of a pipelined set (the members of a MultiLock or RedLock on one node).
pub(crate) struct AcquireCall<'a> {
    pub keys: &'a LockKeys,
    pub field: &'a str,
    pub lease_ms: u64,
    pub reentrant: bool,
    /// The owner holds the lock already (see [`AcquireTerms::held`]).
    pub held: bool,
    pub fenced: bool,
    pub delay_ms: u64,
}

impl Node {
    /// Sends the acquisitions as one pipeline (one per slot on a cluster), each with its own
    /// answer or error, in order. Calls that meet `NOSCRIPT` (a fresh, restarted or just promoted
    /// server) are sent again together after the script is loaded the way every other script
    /// call loads it ([`Node::load_script`]). Not sent again after a dropped connection: a call
    /// that ran would count twice (`multi/member.rs` decides).
    pub(crate) async fn acquire_pipelined(
        &self,
        calls: &[AcquireCall<'_>],
    ) -> Result<Vec<Result<Acquire>>> {
        let everything: Vec<usize> = (0..calls.len()).collect();
        let mut replies: Vec<RedisResult<Value>> = self
            .query_pipeline_once(
                "acquire",
                "",
                &acquire_pipeline(calls, &everything, self.fence_grace_ms),
            )
            .await?;
        let no_script = |r: &RedisResult<Value>| matches!(r, Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript));
        let missing: Vec<usize> = (0..replies.len())
            .filter(|&i| no_script(&replies[i]))
            .collect();
        if !missing.is_empty() {
            self.load_script("acquire", &scripts::ACQUIRE).await?;
            let again: Vec<RedisResult<Value>> = self
                .query_pipeline_once(
                    "acquire",
                    "",
                    &acquire_pipeline(calls, &missing, self.fence_grace_ms),
                )
                .await?;
            for (i, reply) in missing.into_iter().zip(again) {
                replies[i] = reply;
            }
        }
        if replies.len() != calls.len() {
            return Err(Error::Protocol {
                script: "acquire",
                reply: format!("{} replies to {} calls", replies.len(), calls.len()),
            });
        }
        Ok(replies
            .into_iter()
            .zip(calls)
            .map(|(reply, call)| match reply {
                Ok(value) => Acquire::parse(&value),
                Err(e) => Err(Error::redis("acquire", &call.keys.hash, e)),
            })
            .collect())
    }
}

/// `EVALSHA acquire` for the calls at `which`, in one pipeline that keeps going past a failed
/// call.
fn acquire_pipeline(
    calls: &[AcquireCall<'_>],
    which: &[usize],
    fence_grace_ms: u64,
) -> redis::Pipeline {
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    for call in which.iter().map(|&i| &calls[i]) {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(scripts::ACQUIRE.get_hash());
        // Members of a MultiLock or RedLock never queue: a member queued on some nodes would
        // be granted holds its lock never claims.
        let terms = AcquireTerms {
            lease_ms: call.lease_ms,
            reentrant: call.reentrant,
            held: call.held,
            fenced: call.fenced,
            delay_ms: call.delay_ms,
            queue: None,
            strict: false,
        };
        acquire_args(&mut cmd, call.keys, call.field, terms, fence_grace_ms);
        pipe.add_command(cmd);
    }
    pipe
}
