//! The calls of the lock scripts, `acquire.lua` and `release.lua`: alone when the connection is
//! idle, coalesced with other callers' while requests are in flight (`batch.rs`). An acquisition
//! that asks for replica acknowledgement has `WAIT` pipelined behind its call, alone or
//! coalesced (one `WAIT` per batch call, for the most any of its entries wants; `replicas.rs`).

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use redis::{ErrorKind, RedisResult, ServerErrorKind, Value};

use super::batch::{Batcher, Traffic};
use super::family_calls::FamilyBatches;
use super::replicas::{Acks, ReplicaState, WaitFor};
use super::{Node, RequestId, evalsha, evalsha_without_keys};
use crate::error::{Error, Result};
use crate::keys::LockKeys;
use crate::scripts::{self, Acquire, Release};

/// When `release.lua` writes the latch that makes a retry of the release harmless.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Latch {
    /// Every time: give-backs, which may race the owner's own acquisitions.
    Always,
    /// Only while holds remain: a guard's release, during which the owner cannot take the lock
    /// again (`turns.rs`), so a retry that finds the field gone knows it was released.
    WhileHeld,
}

/// One release request, as `release.lua` takes it.
pub(crate) struct ReleaseArgs<'a> {
    pub field: &'a Arc<str>,
    pub lease_ms: u64,
    pub holds: u32,
    pub latch: Latch,
    /// The lock may have a lock-delay marker (of this many ms, 0 when unknown), which a release
    /// that frees it deletes and one that leaves holds lengthens.
    pub delay_ms: Option<u64>,
    /// This client's waiting head, to hand the lock to if this release frees it.
    pub successor: Option<&'a Successor>,
    /// The guard's last hold as the client counts it: the lean form applies
    /// (`lua/release_plain.lua`); an inner release of a re-entered lock leaves holds.
    pub last: bool,
}

/// A waiter of this client to hand the lock to if this release frees it.
#[derive(Debug, Clone)]
pub(crate) struct Successor {
    pub field: Arc<str>,
    pub lease_ms: u64,
    pub fenced: bool,
}

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
    /// A MultiLock member's attempt: when refused, it leaves the watch marker for this many
    /// milliseconds past the wait it is told (`lua/acquire_wait.lua`, `lua/queue.lua`).
    pub watch_ms: Option<u64>,
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

/// Acquire and release calls made while others are in flight, coalesced (`batch.rs`); and what
/// the node learnt about its replicas (`replicas.rs`).
#[derive(Default)]
pub(super) struct Batches {
    pub(super) traffic: Traffic,
    acquires: Arc<Batcher<AcquireEntry, Acked>>,
    releases: Arc<Batcher<ReleaseEntry>>,
    pub(super) family: FamilyBatches,
    pub(super) replicas: ReplicaState,
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

/// One release of a batch (never a hand-over: that one goes alone).
struct ReleaseEntry {
    /// Whether the entry may go in a lean batch (see `release_plain.lua`).
    lean: bool,
    hash: Arc<str>,
    latch: String,
    field: Arc<str>,
    lease_ms: u64,
    holds: u32,
    mode: Cow<'static, str>,
    client: Arc<str>,
}

impl Node {
    /// Takes (or re-enters) the lock for `field`; coalesced with other calls while some are
    /// in flight, except for fenced locks. With `wait`, `WAIT` follows the call on its
    /// connection, and its answer comes back with the grant (the caller judges it: a grant
    /// acknowledged by too few replicas is still granted here).
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
        // and retrying could count a grant twice. `Lock::attempt` decides (it knows whether the
        // owner already holds the lock).
        let (reply, acks) = if alone || terms.long_form() {
            let bytes = 2 * keys.hash.len() + field.len() + 32;
            // `acquire_args` writes the key count: how many keys depends on the lock.
            let script = self.acquire_script();
            let mut cmd = evalsha_without_keys(script, 12, bytes);
            acquire_args(&mut cmd, keys, field, terms, self.fence_grace_ms);
            let hash = &keys.hash;
            match wait {
                None => (self.eval("acquire", hash, limit, script, &cmd).await?, None),
                Some(wait) => {
                    let (reply, acks) = self
                        .eval_acked("acquire", hash, limit, script, &cmd, wait)
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

    /// Gives back `release.holds` holds; `request` makes a retry of the same request harmless
    /// (`retry`: this request was sent before).
    pub(crate) async fn release(
        &self,
        keys: &LockKeys,
        release: &ReleaseArgs<'_>,
        request: RequestId<'_>,
        retry: bool,
    ) -> Result<Release> {
        let successor = release.successor;
        let base = match (retry, release.latch) {
            (false, Latch::WhileHeld) => "-",
            (true, Latch::WhileHeld) => "r",
            (false, Latch::Always) => "a",
            (true, Latch::Always) => "ra",
        };
        let mode: Cow<'static, str> = match release.delay_ms {
            None => Cow::Borrowed(base),
            Some(delay) => Cow::Owned(format!("{}d{delay}", base.trim_start_matches('-'))),
        };
        // A guard's last hold, first attempt, no lock-delay, no hand-over: the lean form
        // (`release_plain.lua`), unless the server answers that holds would remain.
        let mut lean = release.last && successor.is_none() && mode == "-";
        let (_counted, alone) = self.batches.traffic.enter();
        if !alone && successor.is_none() {
            let entry = ReleaseEntry {
                lean,
                hash: keys.hash.clone(),
                latch: keys.latch(request.client, request.n).to_string(),
                field: release.field.clone(),
                lease_ms: release.lease_ms,
                holds: release.holds,
                mode: mode.clone(),
                client: request.client.clone(),
            };
            let sender = || self.sender(release_batch);
            let batcher = &self.batches.releases;
            let shard = self.shard(&keys.hash);
            let reply = batcher
                .call(entry, shard, self.timeout, "release", sender)
                .await?;
            match lean_reply(reply)? {
                Some(released) => return Ok(released),
                None => lean = false,
            }
        }
        let script = self.release_script();
        if lean {
            let bytes = keys.hash.len() + release.field.len() + 16;
            let mut cmd = evalsha(script, 1, 2, bytes);
            cmd.arg(&*keys.hash)
                .arg(&**release.field)
                .arg(release.holds);
            let reply: Value = self
                .eval("release", &keys.hash, self.timeout, script, &cmd)
                .await?;
            if let Some(released) = lean_reply(reply)? {
                return Ok(released);
            }
        }
        let fence_key = successor.is_some_and(|s| s.fenced);
        let bytes = 3 * keys.hash.len()
            + 2 * request.client.len()
            + release.field.len()
            + successor.map_or(0, |s| s.field.len())
            + 80;
        let mut cmd = evalsha(script, 2 + usize::from(fence_key), 9, bytes);
        cmd.arg(&*keys.hash)
            .arg(keys.latch(request.client, request.n));
        if fence_key {
            cmd.arg(keys.fence());
        }
        cmd.arg(&**release.field)
            .arg(release.lease_ms)
            .arg(self.latch_ms())
            .arg(release.holds)
            .arg(&*mode)
            .arg(&**request.client);
        if let Some(s) = successor {
            cmd.arg(&*s.field).arg(s.lease_ms);
            if fence_key {
                cmd.arg(self.fence_grace_ms);
            }
        }
        let reply: i64 = self
            .eval("release", &keys.hash, self.timeout, script, &cmd)
            .await?;
        Release::parse(reply)
    }

    /// Takes `field`'s queue entry out, and gives a grant it had not claimed to the next waiter:
    /// `true` when there was such a grant.
    pub(crate) async fn withdraw(&self, keys: &LockKeys, field: &str) -> Result<bool> {
        let script = self.withdraw_script();
        let mut cmd = evalsha(script, 1, 1, keys.hash.len() + field.len());
        cmd.arg(&*keys.hash).arg(field);
        let gave_back: i64 = self
            .eval("withdraw", &keys.hash, self.timeout, script, &cmd)
            .await?;
        Ok(gave_back == 1)
    }

    /// How long a release's latch lives: past every retry of the request (a few timeouts), and
    /// no longer.
    fn latch_ms(&self) -> u64 {
        (self.timeout.as_millis() as u64)
            .saturating_mul(5)
            .max(5_000)
    }

    /// What sends a batch with `send` on this node; made for a batch's first entry only (a
    /// node's clone allocates).
    fn sender<E, F>(
        &self,
        send: impl Fn(Node, Vec<E>, Duration) -> F + Send + Sync + 'static,
    ) -> impl Fn(Vec<E>, Duration) -> F + Send + Sync + 'static {
        let node = self.clone();
        move |batch, limit| send(node.clone(), batch, limit)
    }
}

/// A release's reply in the lean form: `None` when the server answered that holds would
/// remain (FULL: the short form, which writes the latch a retry needs, must go instead).
fn lean_reply(reply: Value) -> Result<Option<Release>> {
    match reply {
        Value::Int(n) => Release::parse(n).map(Some),
        Value::SimpleString(s) if s == "FULL" => Ok(None),
        other => Err(Error::Protocol {
            script: "release",
            reply: format!("{other:?}"),
        }),
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

/// Sends a batch of releases as one `release.lua` call; one reply per entry.
async fn release_batch(
    node: Node,
    batch: Vec<ReleaseEntry>,
    limit: Duration,
) -> Vec<Result<Value>> {
    let bytes: usize = batch
        .iter()
        .map(|e| e.hash.len() + e.latch.len() + e.field.len() + e.client.len() + 40)
        .sum();
    let script = node.release_script();
    if batch.iter().all(|e| e.lean) {
        // Every entry a guard's last hold: 1 key and 2 arguments each.
        let mut cmd = evalsha(script, batch.len(), 2 * batch.len(), bytes);
        for e in &batch {
            cmd.arg(&*e.hash);
        }
        for e in &batch {
            cmd.arg(&*e.field).arg(e.holds);
        }
        let reply = node.eval("release", "", limit, script, &cmd).await;
        return split_batch_reply("release", reply, batch.iter().map(|e| &*e.hash));
    }
    let latch_ms = node.latch_ms();
    let mut cmd = evalsha(script, 2 * batch.len(), 6 * batch.len(), bytes);
    for e in &batch {
        cmd.arg(&*e.hash).arg(&e.latch);
    }
    for e in &batch {
        cmd.arg(&*e.field)
            .arg(e.lease_ms)
            .arg(latch_ms)
            .arg(e.holds)
            .arg(&*e.mode)
            .arg(&*e.client);
    }
    let reply = node.eval("release", "", limit, script, &cmd).await;
    split_batch_reply("release", reply, batch.iter().map(|e| &*e.hash))
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
        if let Some(watch_ms) = terms.watch_ms {
            // The watch form (`acquire_wait.lua`).
            cmd.arg(watch_ms);
        }
        return;
    }
    let (slack, claim, nonce) = match (terms.queue, terms.watch_ms) {
        (Some(q), _) => (q.slack_ms.max(1) as i64, q.claim_ms.max(1), q.nonce),
        // A strict lock's single attempt respects the queue without joining it.
        (None, _) if terms.strict => (-1, 0, 0),
        // A MultiLock member's watch marker, and how long it outlives the wait.
        (None, Some(watch_ms)) => (-2, watch_ms, 0),
        (None, None) => (0, 0, 0),
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
fn split_batch_reply<'a>(
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
pub(super) fn entry_error(script: &'static str, key: &str, message: &str) -> Error {
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
    /// See [`AcquireTerms::watch_ms`].
    pub watch_ms: Option<u64>,
}

impl Node {
    /// Sends the acquisitions as one pipeline (one per slot on a cluster), each with its own
    /// answer or error, in order. Calls that meet `NOSCRIPT` (a fresh, restarted or just promoted
    /// server) are sent again together after the script is loaded the way every other script
    /// call loads it ([`Node::load_script`]).
    pub(crate) async fn acquire_pipelined(
        &self,
        calls: &[AcquireCall<'_>],
    ) -> Result<Vec<Result<Acquire>>> {
        let everything: Vec<usize> = (0..calls.len()).collect();
        let mut replies: Vec<RedisResult<Value>> = self
            .query_pipeline(
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
                .query_pipeline(
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
            watch_ms: call.watch_ms,
        };
        acquire_args(&mut cmd, call.keys, call.field, terms, fence_grace_ms);
        pipe.add_command(cmd);
    }
    pipe
}
