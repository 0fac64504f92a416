//! The family's waiter in the one wait loop (`wait.rs`): its attempts, and the channel it
//! listens on after its first refusal.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::error::Result;
use crate::pubsub::{HANDED, Mark, Subscription};
use crate::shared::Client;
use crate::terms::Wait;
use crate::wait::{Attempt, NAP, Then, Waiter};

/// Who a message wakes among one client's waiters on a channel.
#[derive(Debug, Clone)]
pub(crate) enum Wake {
    /// Every waiter attempts: a latch opens for all.
    All,
    /// Only a grant naming this waiter wakes it: the channel is its client's own, on which the
    /// script publishes a grant to one of the client's queued waiters (`lua/queue_permits.lua`).
    Grant(Arc<str>),
}

/// Attempts with `attempt` in the wait loop (`wait.rs`) until one succeeds or `wait` is spent
/// (`Ok(None)`), listening on `channel` after the first refusal (a grant waiter: to grants
/// naming it) and attempting once more at once, unless the client was subscribed since before
/// the attempt. `attempt(true)`: a release of this client handed a grant waiter what it waits
/// for (`queued.rs`), so the attempt answers `Done` without asking.
///
/// # Cancel safety
/// Dropping the future leaves only what `attempt` itself leaves; the subscription goes with it.
pub(crate) async fn wait_for<T, F, Fut>(
    client: &Client,
    channel: &Arc<str>,
    wait: Wait,
    wake: Wake,
    attempt: F,
) -> Result<Option<T>>
where
    T: Send,
    F: FnMut(bool) -> Fut + Send,
    Fut: Future<Output = Result<Attempt<T>>> + Send,
{
    let mut waiter = Asking {
        client,
        channel,
        wake,
        attempt,
        mark: None,
        listening: None,
    };
    crate::wait::run(wait, &mut waiter).await
}

/// A family waiter in the wait loop: its attempts, and the channel it listens on.
struct Asking<'a, F> {
    client: &'a Client,
    channel: &'a Arc<str>,
    wake: Wake,
    attempt: F,
    /// Where the channel's messages stood before the latest attempt, while not listening.
    mark: Option<Mark>,
    /// The channel, once this waiter listens (after its first refusal).
    listening: Option<Subscription>,
}

impl<F> Asking<'_, F> {
    /// Spends the grant kept for a grant waiter: its next attempt claims a grant the server
    /// told of, and takes one a release of this client handed it without asking.
    fn spend_grant(&self) -> bool {
        match (&self.wake, &self.listening) {
            (Wake::Grant(field), Some(listening)) => {
                listening.take_grant(field, Some(HANDED)).is_some()
            }
            _ => false,
        }
    }
}

impl<T, F, Fut> Waiter for Asking<'_, F>
where
    T: Send,
    F: FnMut(bool) -> Fut + Send,
    Fut: Future<Output = Result<Attempt<T>>> + Send,
{
    type Output = T;

    async fn attempt(&mut self) -> Result<Attempt<T>> {
        let inner = &self.client.inner;
        inner.check_open()?;
        if self.listening.is_none() {
            self.mark = inner.subscriber.mark(self.channel);
        }
        let handed = self.spend_grant();
        let attempt = (self.attempt)(handed).await?;
        if let Attempt::Done(_) = attempt {
            self.spend_grant();
        }
        Ok(attempt)
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
        if let Wake::Grant(field) = &self.wake {
            listening = listening.grants_to(field.clone());
        }
        self.listening = Some(listening);
        Ok(if continuous { Then::Nap } else { Then::Attempt })
    }

    fn longest_nap(&self) -> Duration {
        NAP
    }

    async fn nap(&mut self, nap: Duration) -> Result<Option<T>> {
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
