//! The one wait loop under every kind that waits for a hold (the lock, the fair lock, the
//! semaphores, both sides of the read-write lock) and under the latch: attempt; refused with
//! time left, listen and attempt again at once (a message sent before listening would be
//! missed); then nap until a message, the kind's own wake-ups or the nap's end, and attempt
//! again; until done or the wait is spent.
//!
//! What a kind adds is a [`Waiter`]: how it attempts (and takes a grant its messages told of),
//! how it listens, what it does after a refusal (the lock takes turns with this client's other
//! contenders there), and how it naps (the lock may be handed over by a release of this
//! client meanwhile).

use std::future::Future;
use std::time::Duration;

use crate::error::Result;
use crate::pubsub::Subscription;
use crate::shared::Client;
use crate::terms::Wait;

/// How long a waiter sleeps at most when its refusal named no deadline: messages can be lost (a
/// reconnect, a failover), a key may have no expiry (PERSISTed), and a latch or semaphore has
/// no lease to time a nap by.
pub(crate) const NAP: Duration = Duration::from_secs(1);

/// What one attempt found.
pub(crate) enum Attempt<T> {
    /// Done: the value to return.
    Done(T),
    /// Refused: look again after a message, or after this long at most (`None`: [`NAP`]),
    /// never longer than [`Waiter::longest_nap`].
    Again(Option<Duration>),
    /// Refused in a way that calls for another attempt at once, if the wait has time left.
    AgainNow,
}

/// After a refusal with time left, what the waiter does next ([`Waiter::refused`]).
pub(crate) enum Then {
    /// Listen, then nap.
    Nap,
    /// Attempt again at once.
    Attempt,
    /// The wait ran out meanwhile.
    GiveUp,
}

/// One waiter's part of the loop. Each method is called from the loop only, in its order.
pub(crate) trait Waiter: Send {
    type Output: Send;

    /// One attempt. `listening`: the waiter's subscription, once it listens (a grant it told
    /// of is taken from it).
    fn attempt(
        &mut self,
        listening: Option<&Subscription>,
    ) -> impl Future<Output = Result<Attempt<Self::Output>>> + Send;

    /// Starts listening: the subscription, and whether it heard every message since before
    /// the latest attempt (else the loop attempts once more before it naps).
    fn listen(&mut self) -> impl Future<Output = Result<(Subscription, bool)>> + Send;

    /// After a refusal with time left, before listening; may start listening itself.
    fn refused(
        &mut self,
        _listening: &mut Option<Subscription>,
    ) -> impl Future<Output = Result<Then>> + Send {
        async { Ok(Then::Nap) }
    }

    /// The longest nap between attempts (a queued waiter must attempt often enough to keep
    /// its place).
    fn longest_nap(&self) -> Duration;

    /// Sleeps until a message or `nap` has passed. A waiter may end the wait here with the
    /// value (the lock handed over by a release of this client).
    fn nap(
        &mut self,
        listening: &Subscription,
        nap: Duration,
    ) -> impl Future<Output = Result<Option<Self::Output>>> + Send {
        async move {
            tokio::select! {
                _ = listening.notified() => {}
                _ = tokio::time::sleep(nap) => {}
            }
            Ok(None)
        }
    }
}

/// Runs `waiter` until an attempt is done (`Some`) or `wait` is spent (`None`). `listening`:
/// a subscription the waiter already has. Stops with [`Error::Shutdown`](crate::Error) when
/// the client shuts down (shutdown wakes every waiter).
///
/// # Cancel safety
/// Dropping the future leaves only what the waiter's own calls leave; the subscription goes
/// with it.
pub(crate) async fn run<W: Waiter>(
    client: &Client,
    wait: Wait,
    mut listening: Option<Subscription>,
    waiter: &mut W,
) -> Result<Option<W::Output>> {
    loop {
        client.inner.check_open()?;
        let again = waiter.attempt(listening.as_ref()).await?;
        let nap = match again {
            Attempt::Done(value) => return Ok(Some(value)),
            Attempt::Again(nap) => Some(nap.unwrap_or(NAP)),
            Attempt::AgainNow => None,
        };
        if wait.remaining().is_none() {
            return Ok(None);
        }
        let Some(nap) = nap else { continue };
        match waiter.refused(&mut listening).await? {
            Then::Nap => {}
            Then::Attempt => continue,
            Then::GiveUp => return Ok(None),
        }
        let subscribed = match listening {
            Some(ref subscribed) => subscribed,
            None => {
                let (subscribed, continuous) = waiter.listen().await?;
                let subscribed = listening.insert(subscribed);
                if !continuous {
                    continue;
                }
                subscribed
            }
        };
        // Bounded now, not at the refusal: `refused` may have waited, and changed the waiter.
        let nap = nap.min(waiter.longest_nap());
        let nap = match wait.remaining() {
            None => return Ok(None),
            Some(left) => left.map_or(nap, |left| left.min(nap)),
        };
        if let Some(value) = waiter.nap(subscribed, nap).await? {
            return Ok(Some(value));
        }
    }
}
