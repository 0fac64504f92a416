//! Coalescing: one client's concurrent calls of one script leave as one script call.
//!
//! Why: every `EVALSHA` costs the server ~10k instructions before the script does anything
//! (argument tables, entering the interpreter, the reply, a GC step; callgrind, Redis 7.0),
//! about as much as the commands of our scripts, and it costs the client one request through
//! redis-rs. When many tasks lock and unlock at once (64 tasks, a key each), one
//! call for all of them pays that once.
//!
//! When: only while another request of the node is in flight ([`Traffic`]). A request made
//! while the connection is idle goes out at once, alone, so a lone caller (W1) pays nothing for
//! this. Otherwise it joins a queue; the first to join spawns the sender, which yields once, so
//! that every task ready to run gets its turn to join, then takes the queue and sends it as one
//! call. Each caller waits for its own reply with its own time limit; the sender runs on by
//! itself, so a caller that gives up never strands the others (a reply nobody reads is then
//! lost exactly as a single call's would be when its caller's limit runs out). The batcher owns
//! its senders: one that is dropped (its node gone, so every caller too) aborts them.
//!
//! The entries of a batch run one after another in the script, in queue order, exactly as the
//! same calls sent back to back would; an entry's error (a key of another type) is its own.
//! Measured with callgrind on redis-server (2,048 lock+unlock pairs): 75k server instructions
//! per pair sent alone, 52k in batches of 32.
//!
//! On a Redis Cluster a script call may only carry keys of one slot, so each entry names its
//! [`Shard`] and a flush sends one call per shard (the calls leave together, pipelined per node).
//! Entries of one lock share a shard, so their order is kept.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use redis::Value;
use tokio::sync::oneshot;

use crate::error::{Error, Result};
use crate::node::Shard;
use crate::task::OwnedTasks;

/// The most entries one script call carries: a call holds the server (single-threaded) for its
/// whole run, ~5 µs per entry, so a crowd of callers goes out as several calls (pipelined on
/// the one connection) rather than as one that makes every other client wait.
pub(crate) const MAX_BATCH: usize = 64;

/// Counts a node's requests in flight (queued or sent), to tell a lone caller from a crowd.
#[derive(Debug, Default)]
pub(crate) struct Traffic(AtomicUsize);

impl Traffic {
    /// Counts one request in until the returned guard drops; true when no other was in flight.
    pub(in crate::node) fn enter(&self) -> (InFlight<'_>, bool) {
        let before = self.0.fetch_add(1, Ordering::AcqRel);
        (InFlight(&self.0), before == 0)
    }
}

/// One request counted in [`Traffic`]; counted out when dropped.
pub(crate) struct InFlight<'a>(&'a AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

struct Queued<E, R> {
    entry: E,
    shard: Shard,
    limit: Duration,
    reply: oneshot::Sender<Result<R>>,
}

/// The requests of one script waiting for the next batch; each is answered an `R` (the
/// script's reply, and for acquisitions what `WAIT` said after it).
pub(crate) struct Batcher<E, R = Value> {
    queue: Mutex<Vec<Queued<E, R>>>,
    /// The tasks sending batches, which hold the batcher weakly: aborted with it (its callers
    /// borrow it while they wait, so by then nobody waits for their replies).
    senders: OwnedTasks,
}

impl<E, R> Default for Batcher<E, R> {
    fn default() -> Self {
        Batcher {
            queue: Mutex::new(Vec::new()),
            senders: OwnedTasks::default(),
        }
    }
}

impl<E: Send + 'static, R: Send + 'static> Batcher<E, R> {
    /// Queues `entry` for the next batch and waits up to `limit` for its reply (`operation`
    /// names it in errors). The first entry of a batch makes (`sender`) the `send` that sends
    /// it: that takes at most [`MAX_BATCH`] entries of one `shard` in queue order and the
    /// longest limit among their callers, and answers one reply per entry, in the same order.
    ///
    /// # Errors
    /// [`Error::Timeout`] after `limit`; otherwise whatever `send` answered for this entry.
    pub(in crate::node) async fn call<S, F>(
        self: &Arc<Self>,
        entry: E,
        shard: Shard,
        limit: Duration,
        operation: &'static str,
        sender: impl FnOnce() -> S,
    ) -> Result<R>
    where
        S: Fn(Vec<E>, Duration) -> F + Send + Sync + 'static,
        F: Future<Output = Vec<Result<R>>> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let queued = {
            let mut queue = self.queue.lock();
            queue.push(Queued {
                entry,
                shard,
                limit,
                reply,
            });
            queue.len()
        };
        if queued == 1 {
            let (batcher, send) = (Arc::downgrade(self), sender());
            let flush = async move {
                // Let every task that is ready to run have its turn first: the ones about to
                // call join this batch.
                tokio::task::yield_now().await;
                let Some(queued) = batcher
                    .upgrade()
                    .map(|b| std::mem::take(&mut *b.queue.lock()))
                else {
                    return;
                };
                Self::flush(queued, send).await;
            };
            // Always inside a tokio runtime here: the crate's async API needs one (its
            // timeouts too), and the blocking API runs it on its own.
            self.senders.spawn(flush);
        }
        match tokio::time::timeout(limit, answer).await {
            Ok(Ok(reply)) => reply,
            Ok(Err(_)) => Err(Error::Protocol {
                script: operation,
                reply: "the batch was dropped before its reply".into(),
            }),
            Err(_) => Err(Error::Timeout {
                operation,
                timeout: limit,
            }),
        }
    }

    /// Sends everything `queued`, in calls of at most [`MAX_BATCH`] entries of one shard that
    /// leave together, and hands out the replies.
    async fn flush<S, F>(mut queued: Vec<Queued<E, R>>, send: S)
    where
        S: Fn(Vec<E>, Duration) -> F,
        F: Future<Output = Vec<Result<R>>>,
    {
        // Stable: the entries of one shard stay in queue order.
        queued.sort_by_key(|q| q.shard);
        let mut calls = Vec::with_capacity(queued.len().div_ceil(MAX_BATCH));
        while let Some(first) = queued.first() {
            let shard = first.shard;
            let same = queued
                .iter()
                .take(MAX_BATCH)
                .take_while(|q| q.shard == shard);
            let rest = queued.split_off(same.count());
            calls.push(Self::send_one(std::mem::replace(&mut queued, rest), &send));
        }
        futures_util::future::join_all(calls).await;
    }

    async fn send_one<S, F>(queued: Vec<Queued<E, R>>, send: &S)
    where
        S: Fn(Vec<E>, Duration) -> F,
        F: Future<Output = Vec<Result<R>>>,
    {
        let limit = queued.iter().map(|q| q.limit).max().unwrap_or_default();
        let mut entries = Vec::with_capacity(queued.len());
        let mut waiting = Vec::with_capacity(queued.len());
        for q in queued {
            entries.push(q.entry);
            waiting.push(q.reply);
        }
        metrics::histogram!(crate::telemetry::BATCH_SIZE).record(entries.len() as f64);
        let replies = send(entries, limit).await;
        for (waiter, reply) in waiting.into_iter().zip(replies) {
            // A caller that stopped waiting gets nothing, as with a single call.
            let _ = waiter.send(reply);
        }
    }
}
