//! One subscriber connection per client: unlock channels → local waiters.
//!
//! Channels are reference-counted: the first waiter of a lock subscribes, the last one leaving
//! unsubscribes, so no subscription outlives its waiters. A message wakes the channel's
//! listeners, which are the head of the lock's local queue (one waiter: one lock was freed, one
//! waiter can take it) and any MultiLock waiters. After a reconnect every listener is woken,
//! since messages may have been lost meanwhile.
//!
//! A `Lock`'s waiter listens on its client's grant channel of the lock (`P:{N}:unlock:<client
//! id>`), where a release that gave the lock to it from the server's queue says so: the grant is
//! kept here for that waiter (`Subscription::take_grant`), which holds the lock from it. MultiLock
//! waiters listen on the lock's channel (`P:{N}:unlock`), where a call that takes the lock's
//! queue past their watch marker publishes `0` (`lua/queue.lua`), and heed every message.
//!
//! The connection itself comes from `node/deploy/link.rs` (one server, or shard channels on a
//! cluster).
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

use crate::config::WaitBy;
use crate::error::{Error, Result};
use crate::node::{Event, Link, Sink, bounded};
use crate::task::AbortOnDrop;

mod channel;
mod relay;

pub(crate) use channel::Subscription;
use channel::{Channel, Poll};
pub(crate) use relay::{RelayClass, Turn};

/// A grant message of `lua/queue.lua`: `g <claim ms> <token or -> <nonce> <owner field>`.
struct Grant<'a> {
    token: Option<u64>,
    nonce: u64,
    field: &'a [u8],
}

impl<'a> Grant<'a> {
    fn parse(payload: &'a [u8]) -> Option<Grant<'a>> {
        let mut parts = payload.strip_prefix(b"g ")?.splitn(4, |&b| b == b' ');
        let mut number = || -> Option<Option<u64>> {
            match parts.next()? {
                b"-" => Some(None),
                digits => Some(Some(std::str::from_utf8(digits).ok()?.parse().ok()?)),
            }
        };
        // The claim lease: the waiter knows its own.
        number()??;
        let token = number()?;
        let nonce = number()??;
        Some(Grant {
            token,
            nonce,
            field: parts.next()?,
        })
    }
}

/// A channel's message count at some moment, from [`Subscriber::mark`].
pub(crate) struct Mark {
    channel: Arc<Channel>,
    epoch: u64,
}

pub(crate) struct Subscriber {
    link: Link,
    timeout: Duration,
    channels: Mutex<HashMap<Arc<str>, Arc<Channel>>>,
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
}

impl Subscriber {
    pub(crate) fn new(
        link: Link,
        timeout: Duration,
        own_id: Arc<str>,
        wait_by: WaitBy,
    ) -> Arc<Subscriber> {
        Arc::new_cyclic(|weak_self| Subscriber {
            link,
            timeout,
            channels: Mutex::new(HashMap::new()),
            commands: tokio::sync::Mutex::new(()),
            sink: watch::channel(None).0,
            reader: Mutex::new(None),
            stopped: AtomicBool::new(false),
            weak_self: weak_self.clone(),
            own_id,
            wait_by,
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
    }

    pub(crate) fn wake_all(&self) {
        for channel in self.channels.lock().values() {
            channel.wake_everyone();
        }
    }

    /// Gives one relay waiter of `class` on `channel` a turn now (or the next to wait), as a
    /// local release that lets one in would: its attempt then rides behind the release
    /// (`Node::family_call_then`); the release's own message still comes.
    pub(crate) fn wake_one(&self, channel: &str, class: usize) {
        if let Some(channel) = self.channels.lock().get(channel) {
            channel.wake_one(class);
        }
    }

    /// Gives every relay waiter of `class` waiting on `channel` now a turn (see
    /// [`wake_one`](Self::wake_one)).
    pub(crate) fn wake_class(&self, channel: &str, class: usize) {
        if let Some(channel) = self.channels.lock().get(channel) {
            channel.wake_class(class);
        }
    }

    fn deliver(&self, channel: &str, payload: &[u8]) {
        let Some(channel) = self.channels.lock().get(channel).cloned() else {
            return;
        };
        match Grant::parse(payload) {
            // A grant to one of ours: its waiter holds the lock from here on (`acquire.rs`).
            Some(grant)
                if grant.field.starts_with(self.own_id.as_bytes())
                    && grant.field.get(self.own_id.len()) == Some(&b':') =>
            {
                channel.granted_here(grant.field, grant.nonce, grant.token)
            }
            // A grant to another client's waiter: never sent on this client's channels.
            Some(_) => {}
            None => channel.wake(payload == self.own_id.as_bytes()),
        }
    }

    /// The server ended the subscription to `name`: when that was not our own leave (the
    /// channel still has waiters), subscribe again in the background, retrying while the
    /// cluster settles, then wake the waiters (a message may have been lost meanwhile). Waking
    /// them at once would only send their attempts into a failover still under way.
    fn unsubscribed(&self, name: &str) {
        let channel = {
            let map = self.channels.lock();
            let Some((name, channel)) = map.get_key_value(name) else {
                return;
            };
            if *channel.refs.lock() == 0 {
                // Lingering with nobody waiting: no longer subscribed, so a waiter that comes
                // back subscribes again, and a mark taken before is stale (the waiter closes
                // the race with an attempt). Kept in the map for the linger's UNSUBSCRIBE: the
                // server may still hold the subscription (a reconnect elsewhere in a cluster).
                *channel.subscribed.lock() = false;
                channel.wake_everyone();
                return;
            }
            (name.clone(), channel.clone())
        };
        tracing::debug!(channel = %channel.0, "subscription ended by the server; subscribing again");
        *channel.1.subscribed.lock() = false;
        let Some(subscriber) = self.weak_self.upgrade() else {
            return;
        };
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move { subscriber.subscribe_again(&channel.0, &channel.1).await });
        }
    }

    /// Subscribes `name` again after the server dropped it, with backoff, until it is confirmed,
    /// the channel has no waiters left, or the subscriber stops; then wakes its listeners, who
    /// look at the lock again (whatever happened, they fall back to their TTL-bounded naps).
    async fn subscribe_again(&self, name: &Arc<str>, channel: &Arc<Channel>) {
        self.try_subscribe_again(name, channel).await;
        channel.wake_everyone();
    }

    async fn try_subscribe_again(&self, name: &Arc<str>, channel: &Arc<Channel>) {
        let mut backoff = Duration::from_millis(20);
        for _ in 0..20 {
            if self.stopped.load(Ordering::Acquire) {
                return;
            }
            let Some(mut sink) = self.sink.borrow().clone() else {
                // No live connection: the reader subscribes every channel when it reconnects.
                return;
            };
            let subscribed = {
                let _serial = self.commands.lock().await;
                let current = self.channels.lock().get(name).cloned();
                match current {
                    Some(c) if Arc::ptr_eq(&c, channel) && *c.refs.lock() > 0 => {}
                    _ => return,
                }
                if *channel.subscribed.lock() {
                    true
                } else {
                    // Find the slot's current primary first (a probe answered MOVED makes
                    // redis-rs refresh its slot map): a SSUBSCRIBE sent on the stale map right
                    // after a failover lands on the demoted node, whose refusal redis-rs does
                    // not report, and the subscription is silently gone.
                    let probed = bounded("subscribe", name, self.timeout, sink.served(name)).await;
                    let attempt = match probed {
                        Ok(()) => {
                            bounded("subscribe", name, self.timeout, sink.subscribe(name)).await
                        }
                        Err(e) => Err(e),
                    };
                    match attempt {
                        Ok(()) => {
                            *channel.subscribed.lock() = true;
                            true
                        }
                        Err(e) => {
                            tracing::debug!(channel = %name, error = %e, "subscribing again failed");
                            false
                        }
                    }
                }
            };
            if subscribed {
                // Wake the waiters only once the slot has a live primary again: woken before,
                // their attempts would fail in the outage.
                match bounded("subscribe", name, self.timeout, sink.served(name)).await {
                    Ok(()) => {
                        tracing::debug!(channel = %name, "subscribed again");
                        return;
                    }
                    Err(e) => tracing::debug!(channel = %name, error = %e, "no primary yet"),
                }
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(1));
        }
    }

    /// A node's connection dropped (a cluster node; redis-rs reconnects it): every channel may
    /// have lost messages and subscriptions.
    fn disconnected(&self) {
        let channels: Vec<(Arc<str>, Arc<Channel>)> = self
            .channels
            .lock()
            .iter()
            .map(|(name, channel)| (name.clone(), channel.clone()))
            .collect();
        for (name, _) in channels {
            self.unsubscribed(&name);
        }
    }

    /// Subscribes every channel that has waiters on a fresh connection.
    async fn resubscribe(&self, sink: &mut Sink) -> Result<()> {
        let _serial = self.commands.lock().await;
        let wanted: Vec<(Arc<str>, Arc<Channel>)> = self
            .channels
            .lock()
            .iter()
            .map(|(name, channel)| (name.clone(), channel.clone()))
            .collect();
        for (name, channel) in wanted {
            bounded("subscribe", &name, self.timeout, sink.subscribe(&name)).await?;
            *channel.subscribed.lock() = true;
        }
        self.sink.send_replace(Some(sink.clone()));
        Ok(())
    }
}

/// Owns the subscriber connection: reads messages, and reconnects with backoff when it drops.
async fn run_reader(weak: Weak<Subscriber>) {
    let mut backoff = Duration::from_millis(50);
    let mut reconnect = false;
    loop {
        let Some(subscriber) = weak.upgrade() else {
            return;
        };
        let connect = bounded(
            "subscriber connect",
            "",
            subscriber.timeout,
            subscriber.link.connect(),
        )
        .await;
        let (mut sink, mut stream) = match connect {
            Ok(pair) => pair,
            Err(e) => {
                tracing::debug!(error = %e, "subscriber connection failed; retrying");
                drop(subscriber);
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
                continue;
            }
        };
        if let Err(e) = subscriber.resubscribe(&mut sink).await {
            tracing::debug!(error = %e, "resubscribe failed; reconnecting");
            // Back off: a refused SUBSCRIBE (ACL, say) would otherwise reconnect in a tight loop.
            drop(subscriber);
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(1));
            continue;
        }
        backoff = Duration::from_millis(50);
        if reconnect {
            // Unlock messages may have been lost while disconnected.
            subscriber.wake_all();
        }
        drop(subscriber);
        while let Some(event) = stream.next().await {
            let Some(subscriber) = weak.upgrade() else {
                return;
            };
            match event {
                Event::Message { channel, payload } => subscriber.deliver(&channel, &payload),
                Event::Unsubscribed { channel } => subscriber.unsubscribed(&channel),
                Event::Disconnected => subscriber.disconnected(),
            }
        }
        let Some(subscriber) = weak.upgrade() else {
            return;
        };
        tracing::debug!("subscriber connection lost; reconnecting");
        subscriber.sink.send_replace(None);
        for channel in subscriber.channels.lock().values() {
            *channel.subscribed.lock() = false;
        }
        reconnect = true;
    }
}
