//! Coalescing: one client's concurrent calls of one script leave as one script call.
//!
//! Why: every `EVALSHA` costs the server ~10k instructions before the script does anything
//! (argument tables, entering the interpreter, the reply, a GC step; callgrind, Redis 7.0),
//! about as much as the commands of our scripts, and it costs the client one request through
//! redis-rs. When many tasks lock and unlock at once (issue 5's W3: 64 tasks, a key each), one
//! call for all of them pays that once.
//!
//! When: only while another request of the node is in flight ([`Traffic`]). A request made
//! while the connection is idle goes out at once, alone, so a lone caller (W1) pays nothing for
//! this. Otherwise it joins a queue; the first to join spawns the sender, which yields once, so
//! that every task ready to run gets its turn to join, then takes the queue and sends it as one
//! call. Each caller waits for its own reply with its own time limit; the sender runs on by
//! itself, so a caller that gives up never strands the others (a reply nobody reads is then
//! lost exactly as a single call's would be when its caller's limit runs out).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use redis::Value;
use tokio::sync::oneshot;

use crate::error::{Error, Result};

/// Counts a node's requests in flight (queued or sent), to tell a lone caller from a crowd.
#[derive(Debug, Default)]
pub(crate) struct Traffic(AtomicUsize);

impl Traffic {
    /// Counts one request in until the returned guard drops; true when no other was in flight.
    pub fn enter(&self) -> (InFlight<'_>, bool) {
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

/// What sends one batch: the entries in queue order and the longest limit among their callers;
/// answers one reply per entry, in the same order.
pub(crate) trait SendBatch<E>:
    FnOnce(Vec<E>, Duration) -> Self::Sent + Send + 'static
{
    type Sent: Future<Output = Vec<Result<Value>>> + Send + 'static;
}

impl<E, S, F> SendBatch<E> for S
where
    S: FnOnce(Vec<E>, Duration) -> F + Send + 'static,
    F: Future<Output = Vec<Result<Value>>> + Send + 'static,
{
    type Sent = F;
}

struct Queued<E> {
    entry: E,
    limit: Duration,
    reply: oneshot::Sender<Result<Value>>,
}

/// The requests of one script waiting for the next batch.
pub(crate) struct Batcher<E> {
    queue: Mutex<Vec<Queued<E>>>,
}

impl<E> Default for Batcher<E> {
    fn default() -> Self {
        Batcher {
            queue: Mutex::new(Vec::new()),
        }
    }
}

impl<E: Send + 'static> Batcher<E> {
    /// Queues `entry` for the next batch and waits up to `limit` for its reply (`operation`
    /// names it in errors). The first entry of a batch brings the `send` that sends it.
    ///
    /// # Errors
    /// [`Error::Timeout`] after `limit`; otherwise whatever `send` answered for this entry.
    pub async fn call(
        self: &Arc<Self>,
        entry: E,
        limit: Duration,
        operation: &'static str,
        send: impl SendBatch<E>,
    ) -> Result<Value> {
        let (reply, answer) = oneshot::channel();
        let first = {
            let mut queue = self.queue.lock();
            queue.push(Queued {
                entry,
                limit,
                reply,
            });
            queue.len() == 1
        };
        if first {
            let batcher = self.clone();
            let flush = async move {
                // Let every task that is ready to run have its turn first: the ones about to
                // call join this batch.
                tokio::task::yield_now().await;
                batcher.flush(send).await;
            };
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => drop(runtime.spawn(flush)),
                // Not reached from the crate's async API; without a runtime to spawn on, send
                // the batch (of this one entry) from here.
                Err(_) => flush.await,
            }
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

    /// Sends everything queued as one batch and hands out the replies.
    async fn flush(&self, send: impl SendBatch<E>) {
        let queued = std::mem::take(&mut *self.queue.lock());
        let limit = queued.iter().map(|q| q.limit).max().unwrap_or_default();
        let mut entries = Vec::with_capacity(queued.len());
        let mut waiting = Vec::with_capacity(queued.len());
        for q in queued {
            entries.push(q.entry);
            waiting.push(q.reply);
        }
        let replies = send(entries, limit).await;
        for (waiter, reply) in waiting.into_iter().zip(replies) {
            // A caller that stopped waiting gets nothing, as with a single call.
            let _ = waiter.send(reply);
        }
    }
}
