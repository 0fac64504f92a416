//! The family's waiter in the one wait loop (`wait.rs`): its attempts, and the channel it
//! listens on after its first refusal.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::queued::HandedWaiters;
use crate::error::Result;
use crate::pubsub::{HANDED, Mark, Subscription};
use crate::shared::Client;
use crate::terms::Wait;
use crate::wait::{Attempt, NAP, Then, Waiter};

/// Who a message wakes among one client's waiters on a channel.
pub(crate) enum Wake<'a> {
    /// Every waiter attempts: a latch opens for all.
    All,
    /// Only a grant naming `waiter` wakes it: the channel is its client's own, on which the
    /// script publishes a grant to one of the client's queued waiters (`lua/queue_permits.lua`).
    /// A release of this client that hands the waiter what it waits for ends the wait without
    /// an attempt (noted in `handed`, for the kinds whose script keeps a record of it).
    Grant {
        waiter: Arc<str>,
        handed: Option<&'a HandedWaiters>,
    },
}

/// Attempts with `attempt` in the wait loop (`wait.rs`) until one succeeds or `wait` is spent
/// (`Ok(None)`), listening on `channel` after the first refusal (a grant waiter: to grants
/// naming it) and attempting once more at once, unless the client was subscribed since before
/// the attempt. Done, returns when the latest attempt was sent: what it was granted, or handed
/// over since, came no earlier, so a lease runs from no earlier.
///
/// # Cancel safety
/// Dropping the future leaves only what `attempt` itself leaves; the subscription goes with it.
pub(crate) async fn wait_for<F, Fut>(
    client: &Client,
    channel: &Arc<str>,
    wait: Wait,
    wake: Wake<'_>,
    attempt: F,
) -> Result<Option<Instant>>
where
    F: FnMut() -> Fut + Send,
    Fut: Future<Output = Result<Attempt<()>>> + Send,
{
    let mut waiter = Asking {
        client,
        channel,
        wake,
        attempt,
        sent: Instant::now(),
        mark: None,
        listening: None,
    };
    crate::wait::run(wait, &mut waiter).await
}

/// A family waiter in the wait loop: its attempts, and the channel it listens on.
struct Asking<'a, F> {
    client: &'a Client,
    channel: &'a Arc<str>,
    wake: Wake<'a>,
    attempt: F,
    /// When the latest attempt was sent.
    sent: Instant,
    /// Where the channel's messages stood before the latest attempt, while not listening.
    mark: Option<Mark>,
    /// The channel, once this waiter listens (after its first refusal).
    listening: Option<Subscription>,
}

impl<F> Asking<'_, F> {
    /// Spends the grant kept for a grant waiter: its next attempt claims a grant the server
    /// told of; true for one a release of this client handed it, taken without asking.
    fn spend_grant(&self) -> bool {
        match (&self.wake, &self.listening) {
            (Wake::Grant { waiter, .. }, Some(listening)) => {
                listening.take_grant(waiter, Some(HANDED)).is_some()
            }
            _ => false,
        }
    }
}

impl<F, Fut> Waiter for Asking<'_, F>
where
    F: FnMut() -> Fut + Send,
    Fut: Future<Output = Result<Attempt<()>>> + Send,
{
    type Output = Instant;

    async fn attempt(&mut self) -> Result<Attempt<Instant>> {
        let inner = &self.client.inner;
        inner.check_open()?;
        if self.listening.is_none() {
            self.mark = inner.subscriber.mark(self.channel);
        }
        if self.spend_grant() {
            if let Wake::Grant {
                waiter,
                handed: Some(handed),
            } = &self.wake
            {
                handed.push(waiter.clone());
            }
            return Ok(Attempt::Done(self.sent));
        }
        self.sent = Instant::now();
        Ok(match (self.attempt)().await? {
            Attempt::Done(()) => {
                self.spend_grant();
                Attempt::Done(self.sent)
            }
            Attempt::Again(nap) => Attempt::Again(nap),
        })
    }

    /// Listens, and attempts once more at once unless the channel was subscribed all along
    /// since before the attempt (a message sent before would be missed).
    async fn refused(&mut self) -> Result<Then> {
        if self.listening.is_some() {
            return Ok(Then::Nap);
        }
        let subscriber = &self.client.inner.subscriber;
        let mark = self.mark.take();
        let (mut listening, continuous) = subscriber.subscribe_since(self.channel, mark).await?;
        if let Wake::Grant { waiter, .. } = &self.wake {
            listening = listening.grants_to(waiter.clone());
        }
        self.listening = Some(listening);
        Ok(if continuous { Then::Nap } else { Then::Attempt })
    }

    fn longest_nap(&self) -> Duration {
        NAP
    }

    async fn nap(&mut self, nap: Duration) -> Result<Option<Instant>> {
        match &self.listening {
            Some(listening) => tokio::select! {
                _ = listening.notified() => {}
                _ = tokio::time::sleep(nap) => {}
            },
            // Not reached: `refused` made it listen before any nap.
            None => tokio::time::sleep(nap).await,
        }
        Ok(None)
    }
}
