//! The subscriber connection's reader: messages to their channels' listeners, and what follows
//! a subscription the server ended or a dropped connection (subscribe again, wake everyone).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use super::{Channel, Subscriber};
use crate::backoff::Backoff;
use crate::error::Result;
use crate::node::{Event, Sink, bounded};

/// A grant message of `lua/queue.lua`: `g <claim ms> <token or -> <nonce> <owner field>`.
struct Grant<'a> {
    token: Option<u64>,
    nonce: u64,
    field: &'a [u8],
}

impl<'a> Grant<'a> {
    fn parse(payload: &'a [u8]) -> Option<Grant<'a>> {
        let mut rest = payload.strip_prefix(b"g ")?;
        // The claim lease: the waiter knows its own.
        number(&mut rest)??;
        let token = number(&mut rest)?;
        let nonce = number(&mut rest)??;
        // The rest, spaces and all.
        Some(Grant {
            token,
            nonce,
            field: rest,
        })
    }
}

/// The first word of `rest` (up to its first space, which must come), `rest` moved past that
/// space: `Some(None)` for `-`, `Some(number)` for a decimal number as `u64::from_str` reads
/// it (an optional `+`, then digits, no overflow); else `None`. Read byte by byte: parsing
/// through `str` cost a grant message several hundred instructions.
fn number(rest: &mut &[u8]) -> Option<Option<u64>> {
    let end = rest.iter().position(|&b| b == b' ')?;
    let word = &rest[..end];
    *rest = &rest[end + 1..];
    if word == b"-" {
        return Some(None);
    }
    let digits = word.strip_prefix(b"+").unwrap_or(word);
    if digits.is_empty() {
        return None;
    }
    let mut value = 0u64;
    for &b in digits {
        if !b.is_ascii_digit() {
            return None;
        }
        value = value.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    Some(Some(value))
}

impl Subscriber {
    fn deliver(&self, channel: &str, payload: &[u8]) {
        let Some(channel) = self.channels.lock().get(channel).cloned() else {
            return;
        };
        match Grant::parse(payload) {
            // A grant to one of ours: its waiter holds the lock from here on (`lock/waiter.rs`).
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
        let mut backoff = Backoff::subscriber(Duration::from_millis(20));
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
            backoff.sleep().await;
        }
    }

    /// The channels listened on now, copied out of the map's lock.
    fn every_channel(&self) -> Vec<(Arc<str>, Arc<Channel>)> {
        let channels = self.channels.lock();
        channels
            .iter()
            .map(|(name, channel)| (name.clone(), channel.clone()))
            .collect()
    }

    /// A node's connection dropped (a cluster node; redis-rs reconnects it): every channel may
    /// have lost messages and subscriptions.
    fn disconnected(&self) {
        for (name, _) in self.every_channel() {
            self.unsubscribed(&name);
        }
    }

    /// Subscribes every channel that has waiters on a fresh connection.
    async fn resubscribe(&self, sink: &mut Sink) -> Result<()> {
        let _serial = self.commands.lock().await;
        for (name, channel) in self.every_channel() {
            bounded("subscribe", &name, self.timeout, sink.subscribe(&name)).await?;
            *channel.subscribed.lock() = true;
        }
        self.sink.send_replace(Some(sink.clone()));
        Ok(())
    }
}

/// Owns the subscriber connection: reads messages, and reconnects with backoff when it drops.
pub(super) async fn run_reader(weak: Weak<Subscriber>) {
    let mut backoff = Backoff::subscriber(Duration::from_millis(50));
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
                backoff.sleep().await;
                continue;
            }
        };
        if let Err(e) = subscriber.resubscribe(&mut sink).await {
            tracing::debug!(error = %e, "resubscribe failed; reconnecting");
            // Back off: a refused SUBSCRIBE (ACL, say) would otherwise reconnect in a tight loop.
            drop(subscriber);
            backoff.sleep().await;
            continue;
        }
        backoff.reset();
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

#[cfg(test)]
mod tests {
    use super::*;

    /// What the grant parser read before it went byte by byte (through `str`).
    fn parsed_as_before(payload: &[u8]) -> Option<(Option<u64>, u64, &[u8])> {
        let mut parts = payload.strip_prefix(b"g ")?.splitn(4, |&b| b == b' ');
        let mut number = || -> Option<Option<u64>> {
            match parts.next()? {
                b"-" => Some(None),
                digits => Some(Some(std::str::from_utf8(digits).ok()?.parse().ok()?)),
            }
        };
        number()??;
        let token = number()?;
        let nonce = number()??;
        Some((token, nonce, parts.next()?))
    }

    #[test]
    fn grant_messages_parse_as_before() {
        let payloads: [&[u8]; 22] = [
            b"g 2000 - 17 abc:1",
            b"g 2000 42 17 abc:1:x y",
            b"g 2000 42 17 ",
            b"g 2000 42 17",
            b"g 2000 - -  abc",
            b"g - - 1 f",
            b"g 1 +5 +6 f",
            b"g 1 + 6 f",
            b"g 1 5 -6 f",
            b"g 18446744073709551615 18446744073709551615 18446744073709551615 f",
            b"g 18446744073709551616 1 1 f",
            b"g 1 1 18446744073709551616 f",
            b"g  1 1 1 f",
            b"g 1  1 1 f",
            b"g 1 1 1  f",
            b"g 1 x 1 f",
            b"g 1 1 1x f",
            b"g",
            b"g ",
            b"x 1 1 1 f",
            b"unlock",
            b"g 007 0 00 \xff\xfe",
        ];
        for payload in payloads {
            let now = Grant::parse(payload).map(|g| (g.token, g.nonce, g.field));
            assert_eq!(
                now,
                parsed_as_before(payload),
                "{:?}",
                String::from_utf8_lossy(payload)
            );
        }
        let Some(grant) = Grant::parse(b"g 2000 42 17 abc:1") else {
            panic!("a grant");
        };
        assert_eq!(
            (grant.token, grant.nonce, grant.field),
            (Some(42), 17, &b"abc:1"[..])
        );
    }
}
