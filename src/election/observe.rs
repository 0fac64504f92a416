//! [`Election::observe`](crate::Election::observe): the stream of an election's changes, read
//! from its log when a message says something changed.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::Stream;

use super::state::{Calls, ChangeCause, ElectionKeys, Leader, Read, Record};
use crate::error::Result;
use crate::pubsub::Subscription;
use crate::shared::Client;

/// How long an observer sleeps at most without a message before it reads again: messages can
/// be lost (a reconnect, a failover), and a leader that crashes sends none. A leader's lease
/// running out is seen sooner: the observer sleeps until then when it is earlier.
const NAP: Duration = Duration::from_secs(1);

/// One change of an election, from [`Election::observe`](crate::Election::observe).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaderChange {
    /// The leader after the change; `None` while nobody leads.
    pub leader: Option<Leader>,
    /// What changed; `None` only for a first item of an election that never had a leader.
    pub cause: Option<ChangeCause>,
    /// The election's revision after this change: one more than the change before it. 0 for
    /// an election that never had a leader.
    pub revision: u64,
    /// How many terms the election has had (client-go's `leaseTransitions`).
    pub transitions: u64,
    /// When the change was recorded, in milliseconds since the Unix epoch by the server's clock.
    pub at_ms: u64,
    /// True for the stream's first item: the state when observing began, not a change seen
    /// happening.
    pub initial: bool,
    /// Changes before this one that the stream could not report one by one (more than the 64
    /// the election keeps happened between two reads). Normally 0.
    pub missed: u64,
    /// The election's history started over since the previous item (its state expired after a
    /// vacancy of over an hour, or was deleted): how many changes were missed is unknown.
    pub restarted: bool,
}

impl LeaderChange {
    /// Whether changes happened between the previous item and this one that the stream did
    /// not report ([`missed`](LeaderChange::missed) or [`restarted`](LeaderChange::restarted)).
    pub fn is_gap(&self) -> bool {
        self.missed > 0 || self.restarted
    }

    fn of(record: Option<&Record>) -> LeaderChange {
        match record {
            Some(record) => LeaderChange {
                leader: record.leader.clone(),
                cause: record.cause,
                revision: record.revision,
                transitions: record.transitions,
                at_ms: record.at_ms,
                initial: false,
                missed: 0,
                restarted: false,
            },
            None => LeaderChange {
                leader: None,
                cause: None,
                revision: 0,
                transitions: 0,
                at_ms: 0,
                initial: false,
                missed: 0,
                restarted: false,
            },
        }
    }
}

/// The changes of an election, as a [`Stream`]: made by
/// [`Election::observe`](crate::Election::observe). It ends only after its client was shut
/// down (with one `Err(Error::Shutdown)` item); drop it to stop.
#[must_use = "streams do nothing unless polled"]
pub struct LeaderChanges {
    inner: Pin<Box<dyn Stream<Item = Result<LeaderChange>> + Send>>,
}

impl LeaderChanges {
    /// The next item, without `StreamExt`: `changes.next_change().await?`.
    ///
    /// # Errors
    /// [`Error::Timeout`](crate::Error::Timeout) or [`Error::Redis`](crate::Error::Redis) when
    /// Redis fails; the stream goes on, so the next call tries again (after a pause of a
    /// second).
    ///
    /// # Cancel safety
    /// Cancel-safe: the stream keeps a read in progress (and changes read but not yet
    /// returned) for the next call, so dropping this future loses nothing.
    pub async fn next_change(&mut self) -> Result<LeaderChange> {
        std::future::poll_fn(|cx| self.inner.as_mut().poll_next(cx))
            .await
            .unwrap_or(Err(crate::error::Error::Shutdown))
    }
}

impl Stream for LeaderChanges {
    type Item = Result<LeaderChange>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}

impl std::fmt::Debug for LeaderChanges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderChanges").finish_non_exhaustive()
    }
}

struct Observer {
    client: Client,
    keys: Arc<ElectionKeys>,
    subscription: Option<Subscription>,
    /// The revision of the last item handed out; `None` before the first.
    seen: Option<u64>,
    pending: VecDeque<LeaderChange>,
    /// How long to sleep at most before reading again.
    nap: Duration,
    /// The last read failed: pause before the next one.
    failed: bool,
    /// The client was shut down: the stream ends.
    ended: bool,
}

pub(crate) fn observe(client: Client, keys: Arc<ElectionKeys>) -> LeaderChanges {
    let observer = Observer {
        client,
        keys,
        subscription: None,
        seen: None,
        pending: VecDeque::new(),
        nap: NAP,
        failed: false,
        ended: false,
    };
    let stream = futures_util::stream::unfold(observer, |mut observer| async move {
        if observer.ended {
            return None;
        }
        let next = observer.next().await;
        observer.failed = next.is_err();
        observer.ended = matches!(&next, Err(e) if e.is_shutdown());
        Some((next, observer))
    });
    LeaderChanges {
        inner: Box::pin(stream),
    }
}

impl Observer {
    async fn next(&mut self) -> Result<LeaderChange> {
        if self.failed {
            tokio::time::sleep(NAP).await;
        }
        // Each turn waits for a message or a nap: a stream, not a busy loop.
        loop {
            if let Some(change) = self.pending.pop_front() {
                return Ok(change);
            }
            match &self.subscription {
                // Subscribed before the first read, so no change after it goes unheard.
                None => {
                    let inner = &self.client.inner;
                    inner.check_open()?;
                    let subscription = inner.subscriber.subscribe(&self.keys.channel, true).await?;
                    self.subscription = Some(subscription);
                }
                Some(subscription) if self.seen.is_some() => {
                    tokio::select! {
                        () = subscription.notified() => {}
                        () = tokio::time::sleep(self.nap) => {}
                    }
                }
                Some(_) => {}
            }
            self.client.inner.check_open()?;
            let calls = Calls {
                client: &self.client,
                keys: &self.keys,
            };
            let read = calls.read(self.seen).await?;
            self.absorb(read);
        }
    }

    /// Turns a read into the items it adds, in order, and notes where the stream stands.
    fn absorb(&mut self, read: Read) {
        let current_revision = read.current.as_ref().map_or(0, |r| r.revision);
        self.nap = match (&read.current, read.lock_ttl) {
            (Some(record), Some(ttl)) if record.leader.is_some() => {
                (ttl + Duration::from_millis(10)).min(NAP)
            }
            _ => NAP,
        };
        let Some(seen) = self.seen else {
            let mut first = LeaderChange::of(read.current.as_ref());
            first.initial = true;
            self.pending.push_back(first);
            self.seen = Some(current_revision);
            return;
        };
        if current_revision < seen {
            let mut change = LeaderChange::of(read.current.as_ref());
            change.restarted = true;
            self.pending.push_back(change);
            self.seen = Some(current_revision);
            return;
        }
        let mut expected = seen + 1;
        for record in read.changes.iter().filter(|r| r.revision > seen) {
            let mut change = LeaderChange::of(Some(record));
            change.missed = record.revision.saturating_sub(expected);
            expected = record.revision + 1;
            self.pending.push_back(change);
        }
        if expected <= current_revision {
            let mut change = LeaderChange::of(read.current.as_ref());
            change.missed = current_revision - expected;
            self.pending.push_back(change);
        }
        self.seen = Some(current_revision);
    }
}
