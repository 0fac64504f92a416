//! One subscriber connection per client: unlock channels → local waiters.
//!
//! Channels are reference-counted: the first waiter of a lock subscribes, the last one leaving
//! unsubscribes, so no subscription outlives its waiters. A message wakes the channel's
//! listeners, which are the head of the lock's local queue (one waiter: one lock was freed, one
//! waiter can take it). After a reconnect every listener is woken,
//! since messages may have been lost meanwhile.
//!
//! A `Lock`'s waiter listens on its client's grant channel of the lock (`P:{N}:unlock:<client
//! id>`), where a release that gave the lock to it from the server's queue says so: the grant is
//! kept here for that waiter (`Subscription::take_grant`), which holds the lock from it. A
//! MultiLock's members wait the same way, one after another (`multi/multilock/acquire.rs`).
//!
//! The connection itself comes from `node/deploy/link.rs` (one server, or shard channels on a
//! cluster); its reader, and what follows a lost subscription, are in `pubsub/reader.rs`.
//! When the server ends a subscription nobody asked to end (a cluster slot moved or failed over:
//! SUNSUBSCRIBE), or a node's connection drops, the channel is subscribed again here and its
//! listeners are woken, since its messages may have been lost; a waiter's TTL-bounded nap covers
//! whatever is lost meanwhile.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::config::WaitBy;
use crate::error::{Error, Result};
use crate::node::{Link, Sink, bounded};
use crate::task::AbortOnDrop;

mod channel;
mod reader;

use reader::run_reader;

pub(crate) use channel::Subscription;
use channel::{Channel, Poll};

/// The nonce of a grant that a release of this client handed over ([`Subscriber::handed`]):
/// the server's grant messages on the semaphores' channels carry 0.
pub(crate) const HANDED: u64 = 1;

/// A channel's message count at some moment, from [`Subscriber::mark`].
pub(crate) struct Mark {
    channel: Arc<Channel>,
    epoch: u64,
}

pub(crate) struct Subscriber {
    link: Link,
    timeout: Duration,
    /// By name; hashed with foldhash (randomly seeded per map), not SipHash: a waiter looks its
    /// channel up at every acquisition, and the reader at every message.
    channels: Mutex<HashMap<Arc<str>, Arc<Channel>, foldhash::fast::RandomState>>,
    /// Serialises SUBSCRIBE/UNSUBSCRIBE so a leave and a join of one channel cannot reorder.
    commands: tokio::sync::Mutex<()>,
    /// The sink of the live connection; `None` while (re)connecting.
    sink: watch::Sender<Option<Sink>>,
    reader: Mutex<Option<AbortOnDrop>>,
    /// Set by `stop`: no reader may be started again.
    stopped: AtomicBool,
    weak_self: Weak<Subscriber>,
    /// This client's id: the payload of its own messages on a channel (the family's), which
    /// its waiters that hear of its releases directly ignore.
    own_id: Arc<str>,
    /// Polling: no subscriber connection is ever made; waiters poll with backoff.
    wait_by: WaitBy,
    /// How long a channel stays subscribed after its last waiter left (`Config::channel_linger`).
    linger: Duration,
    /// Ends the lingering channels' tasks: cancelled by `stop` and when the subscriber goes.
    lingers: CancellationToken,
}

impl Subscriber {
    pub(crate) fn new(
        link: Link,
        timeout: Duration,
        own_id: Arc<str>,
        wait_by: WaitBy,
        linger: Duration,
    ) -> Arc<Subscriber> {
        Arc::new_cyclic(|weak_self| Subscriber {
            link,
            timeout,
            channels: Mutex::new(HashMap::default()),
            commands: tokio::sync::Mutex::new(()),
            sink: watch::channel(None).0,
            reader: Mutex::new(None),
            stopped: AtomicBool::new(false),
            weak_self: weak_self.clone(),
            own_id,
            wait_by,
            linger,
            lingers: CancellationToken::new(),
        })
    }

    /// Where `name`'s messages stand, if this client is already subscribed to it: taken before
    /// an attempt, it lets a waiter that subscribes after a refusal skip the attempt that would
    /// otherwise close the race with a message sent in between ([`Subscriber::subscribe_since`]).
    pub(crate) fn mark(&self, name: &str) -> Option<Mark> {
        let channel = self.channels.lock().get(name)?.clone();
        let subscribed = self.wait_by == WaitBy::PubSub && *channel.subscribed.lock();
        subscribed.then(|| Mark {
            epoch: channel.epoch(true),
            channel,
        })
    }

    /// [`subscribe`](Subscriber::subscribe), counting messages from `mark` on. Returns whether
    /// the channel was subscribed all along since `mark`, so no message can have been missed;
    /// if not, the caller must attempt once more before it waits.
    ///
    /// # Errors
    /// As [`subscribe`](Subscriber::subscribe).
    pub(crate) async fn subscribe_since(
        self: &Arc<Self>,
        name: &Arc<str>,
        mark: Option<Mark>,
    ) -> Result<(Subscription, bool)> {
        let subscription = self.subscribe(name, true).await?;
        let Some(mark) = mark else {
            return Ok((subscription, false));
        };
        // The same channel, never resubscribed (a reconnect wakes everybody, which moves the
        // epoch too): whatever came since the mark is counted.
        let continuous = Arc::ptr_eq(&mark.channel, &subscription.channel);
        if continuous {
            subscription.seen.store(mark.epoch, Ordering::Release);
        }
        Ok((subscription, continuous))
    }

    /// Registers a waiter on `name`, subscribing on the server if it is the first; `heed_own`:
    /// whether this client's own unlock messages wake it.
    ///
    /// # Errors
    /// When the subscriber connection cannot be made or the SUBSCRIBE is not confirmed in time.
    pub(crate) async fn subscribe(
        self: &Arc<Self>,
        name: &Arc<str>,
        heed_own: bool,
    ) -> Result<Subscription> {
        let channel = {
            let mut map = self.channels.lock();
            let channel = map
                .entry(name.clone())
                .or_insert_with(|| Arc::new(Channel::new()))
                .clone();
            *channel.refs.lock() += 1;
            channel
        };
        // From here on, dropping the subscription undoes the registration.
        let subscription = Subscription {
            subscriber: self.clone(),
            name: name.clone(),
            channel: channel.clone(),
            seen: AtomicU64::new(channel.epoch(heed_own)),
            heed_own,
            field: None,
            poll: match self.wait_by {
                WaitBy::PubSub => None,
                WaitBy::Polling { first, max } => Some(Poll::new(first, max)),
            },
        };
        if subscription.poll.is_some() || *channel.subscribed.lock() {
            return Ok(subscription);
        }
        // Wait for the connection before taking the command lock: the reader task needs that
        // lock to resubscribe on a fresh connection.
        let mut sink = self.live_sink().await?;
        let _serial = self.commands.lock().await;
        if !*channel.subscribed.lock() {
            bounded("subscribe", name, self.timeout, sink.subscribe(name)).await?;
            *channel.subscribed.lock() = true;
        }
        Ok(subscription)
    }

    /// Whether this client listens on any channel (or has one lingering): when not, no
    /// [`is_live`](Subscriber::is_live) can be true, and the caller need not name a channel.
    pub(crate) fn listens(&self) -> bool {
        self.wait_by == WaitBy::PubSub && !self.channels.lock().is_empty()
    }

    /// Whether this client listens on `name` already (a waiter, or a channel lingering after its
    /// last one): subscribing again costs no round trip.
    pub(crate) fn is_live(&self, name: &str) -> bool {
        self.wait_by == WaitBy::PubSub
            && self
                .channels
                .lock()
                .get(name)
                .is_some_and(|channel| *channel.subscribed.lock())
    }

    /// Unsubscribes `name` if no waiter came back meanwhile.
    async fn leave(&self, name: &Arc<str>) {
        let _serial = self.commands.lock().await;
        {
            let mut map = self.channels.lock();
            let Some(channel) = map.get(name) else { return };
            if *channel.refs.lock() > 0 {
                return;
            }
            map.remove(name);
        }
        // Unsubscribe even when no SUBSCRIBE was confirmed: a waiter cancelled while its
        // SUBSCRIBE was on the wire never set `subscribed`, yet the server did subscribe, and
        // skipping this left the channel subscribed for the connection's lifetime. The commands
        // share one connection in order, so this UNSUBSCRIBE comes after that SUBSCRIBE; for a
        // channel never subscribed it is a no-op.
        let sink = self.sink.borrow().clone();
        if let Some(mut sink) = sink
            && let Err(e) = bounded("unsubscribe", name, self.timeout, sink.unsubscribe(name)).await
        {
            tracing::debug!(channel = %name, error = %e, "unsubscribe failed; a reconnect drops it");
        }
    }

    /// The sink of the live connection, starting the reader task on first use.
    async fn live_sink(&self) -> Result<Sink> {
        {
            let mut reader = self.reader.lock();
            if self.stopped.load(Ordering::Acquire) {
                return Err(Error::Shutdown);
            }
            if reader.is_none() {
                let weak = self.weak_self.clone();
                *reader = Some(AbortOnDrop(tokio::spawn(run_reader(weak))));
            }
        }
        let mut watch = self.sink.subscribe();
        let wait = watch.wait_for(|sink| sink.is_some());
        match tokio::time::timeout(self.timeout, wait).await {
            Ok(Ok(sink)) => sink.clone().ok_or(Error::Shutdown),
            Ok(Err(_)) => Err(Error::Shutdown),
            Err(_) => Err(Error::Timeout {
                operation: "subscriber connect",
                timeout: self.timeout,
            }),
        }
    }

    /// Stops the reader task (client shutdown).
    pub(crate) fn stop(&self) {
        let mut reader = self.reader.lock();
        self.stopped.store(true, Ordering::Release);
        reader.take();
        drop(reader);
        self.sink.send_replace(None);
        self.lingers.cancel();
    }

    pub(crate) fn wake_all(&self) {
        for channel in self.channels.lock().values() {
            channel.wake_everyone();
        }
    }

    /// A release of this client handed `field`, a waiter listening on `channel`, what it waits
    /// for (`lua/queue_permits.lua`): kept as a grant with [`HANDED`], which wakes that waiter
    /// alone. A waiter not listening yet finds the grant with the attempt it makes after
    /// subscribing.
    pub(crate) fn handed(&self, channel: &str, field: &str) {
        // Kept and woken after the map is let go, as for a message (`reader.rs`): the woken
        // waiter may at once stop listening, which takes the map's lock.
        let channel = self.channels.lock().get(channel).cloned();
        if let Some(channel) = channel {
            channel.granted_here(field.as_bytes(), HANDED, None);
        }
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        // A lingering channel's task holds no reference to us: it ends here, not a linger later.
        self.lingers.cancel();
    }
}
