//! The calls of `release.lua` and `withdraw.lua`: a guard's last hold in the lean form, other
//! releases (retries, give-backs, lock-delays, hand-overs to this client's waiter) in the short
//! form; alone when the connection is idle, coalesced with other callers' while requests are in
//! flight (`batch.rs`).

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use redis::Value;

use crate::error::{Error, Result};
use crate::keys::LockKeys;
use crate::node::lock_calls::split_batch_reply;
use crate::node::{Node, RequestId, evalsha};
use crate::scripts::Release;

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
    /// An unclaimed grant to the field (count 0) is left for the owner's next attempt to claim,
    /// not given back as one hold: the undo of a waiter's attempt whose connection dropped,
    /// while the waiter still waits (it keeps its turn).
    pub keep_grant: bool,
}

/// A waiter of this client to hand the lock to if this release frees it.
#[derive(Debug, Clone)]
pub(crate) struct Successor {
    pub field: Arc<str>,
    pub lease_ms: u64,
    pub fenced: bool,
}

/// One release of a batch (never a hand-over: that one goes alone).
pub(in crate::node) struct ReleaseEntry {
    /// Whether the entry may go in a lean batch (see `release_plain.lua`).
    lean: bool,
    hash: Arc<str>,
    latch: String,
    field: Arc<str>,
    lease_ms: u64,
    holds: u32,
    mode: Cow<'static, str>,
}

impl Node {
    /// Gives back `release.holds` holds; `request` makes a retry of the same request harmless
    /// (`retry`: this request was sent before).
    pub(crate) async fn release(
        &self,
        keys: &LockKeys,
        release: &ReleaseArgs<'_>,
        request: RequestId<'_>,
        retry: bool,
    ) -> Result<Release> {
        let mode = release_mode(release, retry);
        // A guard's last hold, first attempt, no lock-delay, no hand-over: the lean form
        // (`release_plain.lua`), unless the server answers that holds would remain.
        let mut lean = release.last && release.successor.is_none() && mode == "-";
        let (_counted, alone) = self.batches.traffic.enter();
        if !alone && release.successor.is_none() {
            let entry = ReleaseEntry {
                lean,
                hash: keys.hash.clone(),
                latch: keys.latch(request.client, request.n).to_string(),
                field: release.field.clone(),
                lease_ms: release.lease_ms,
                holds: release.holds,
                mode: mode.clone(),
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
        if lean && let Some(released) = self.release_lean(keys, release).await? {
            return Ok(released);
        }
        self.release_short(keys, release, request, &mode).await
    }

    /// One release alone in the lean form; `None` when the server answered that holds would
    /// remain.
    async fn release_lean(
        &self,
        keys: &LockKeys,
        release: &ReleaseArgs<'_>,
    ) -> Result<Option<Release>> {
        let script = self.release_script();
        let bytes = keys.hash.len() + release.field.len() + 16;
        let mut cmd = evalsha(script, 1, 2, bytes);
        cmd.arg(&*keys.hash)
            .arg(&**release.field)
            .arg(release.holds);
        let reply: Value = self
            .eval("release", &keys.hash, self.timeout, script, &cmd)
            .await?;
        lean_reply(reply)
    }

    /// One release alone in the short form, which writes the latch a retry needs and may hand
    /// the lock over to this client's waiter (with the fence key when the waiter is fenced).
    async fn release_short(
        &self,
        keys: &LockKeys,
        release: &ReleaseArgs<'_>,
        request: RequestId<'_>,
        mode: &str,
    ) -> Result<Release> {
        let (script, successor) = (self.release_script(), release.successor);
        let fence_key = successor.is_some_and(|s| s.fenced);
        let bytes = 3 * keys.hash.len()
            + request.client.len()
            + release.field.len()
            + successor.map_or(0, |s| s.field.len())
            + 80;
        let mut cmd = evalsha(script, 2 + usize::from(fence_key), 8, bytes);
        cmd.arg(&*keys.hash)
            .arg(keys.latch(request.client, request.n));
        if fence_key {
            cmd.arg(keys.fence());
        }
        cmd.arg(&**release.field)
            .arg(release.lease_ms)
            .arg(self.latch_ms())
            .arg(release.holds)
            .arg(mode);
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
    /// `true` when there was such a grant. Sent once more when the connection dropped (often
    /// the first command on a dead connection: a waiter cancelled as its connection went):
    /// a repeat finds nothing left to do, unless a wait of the same owner (tasks sharing an
    /// explicit `Owner`) queued in between, which then loses its place but nothing else (the
    /// withdrawal counts as the owner's release in flight, `queue_place.rs`, so a grant to it
    /// is claimed by an attempt, never taken from its message).
    pub(crate) async fn withdraw(&self, keys: &LockKeys, field: &str) -> Result<bool> {
        let script = self.withdraw_script();
        let mut cmd = evalsha(script, 1, 1, keys.hash.len() + field.len());
        cmd.arg(&*keys.hash).arg(field);
        let gave_back: i64 = self
            .eval_retried("withdraw", &keys.hash, script, &cmd)
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
}

/// The `mode` argument of `release.lua`: when the latch is written, whether this is a retry,
/// and the lock-delay marker to handle.
fn release_mode(release: &ReleaseArgs<'_>, retry: bool) -> Cow<'static, str> {
    let base = match (retry, release.latch) {
        (false, Latch::WhileHeld) => "-",
        (true, Latch::WhileHeld) => "r",
        (false, Latch::Always) => "a",
        (true, Latch::Always) => "ra",
    };
    if release.delay_ms.is_none() && !release.keep_grant {
        return Cow::Borrowed(base);
    }
    let keep = if release.keep_grant { "g" } else { "" };
    let delay = release
        .delay_ms
        .map(|d| format!("d{d}"))
        .unwrap_or_default();
    Cow::Owned(format!("{}{keep}{delay}", base.trim_start_matches('-')))
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

/// Sends a batch of releases as one `release.lua` call; one reply per entry.
async fn release_batch(
    node: Node,
    batch: Vec<ReleaseEntry>,
    limit: Duration,
) -> Vec<Result<Value>> {
    let bytes: usize = batch
        .iter()
        .map(|e| e.hash.len() + e.latch.len() + e.field.len() + 40)
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
    let mut cmd = evalsha(script, 2 * batch.len(), 5 * batch.len(), bytes);
    for e in &batch {
        cmd.arg(&*e.hash).arg(&e.latch);
    }
    for e in &batch {
        cmd.arg(&*e.field)
            .arg(e.lease_ms)
            .arg(latch_ms)
            .arg(e.holds)
            .arg(&*e.mode);
    }
    let reply = node.eval("release", "", limit, script, &cmd).await;
    split_batch_reply("release", reply, batch.iter().map(|e| &*e.hash))
}
