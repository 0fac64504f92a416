//! The rest of the lock family on the same client: [`Semaphore`], [`PermitSemaphore`],
//! [`CountDownLatch`], [`ReadWriteLock`], [`FairLock`] (a [`Lock`](crate::Lock) in strict mode,
//! on the lock's own keys), and the [`Guard`] trait over every hold. Each other kind is one Lua
//! script (`lua/`) over keys under the kind's own suffix of the `{name}` hash tag, so a
//! semaphore, a latch and a lock may share a name, and every key of one object lives in one
//! Redis Cluster slot.
//!
//! Shared here: the keys, the input checks, and the waiting loop (attempt; on failure subscribe
//! to the object's channel on the client's one subscriber connection, attempt again, then sleep
//! until a message or a bounded nap).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::keys::LockKeys;
use crate::pubsub::{RelayClass, Subscription, Turn};
use crate::shared::Client;
use crate::task::FinishOnDrop;
use crate::terms::Wait;

mod arrivals;
mod fair;
mod guard;
mod kept;
mod latch;
mod permits;
mod rwlock;
mod rwlock_guard;
mod rwlock_local;
mod rwlock_share;
mod semaphore;

pub use fair::{FairGuard, FairLock};
pub use guard::{Guard, GuardFuture};
pub use latch::CountDownLatch;
pub use permits::{Permit, PermitSemaphore};
pub use rwlock::{ReadLock, ReadWriteLock, WriteLock};
pub use rwlock_guard::{ReadGuard, WriteGuard};
pub use semaphore::Semaphore;

/// How long a waiter sleeps at most without a message before it looks again: messages can be
/// lost (a reconnect, a failover), and a latch or semaphore has no lease to time a nap by.
pub(crate) const NAP: Duration = Duration::from_secs(1);

/// The keys of one family object: `P:{N}:<kind>` and its channel `P:{N}:<kind>:<event>`.
#[derive(Debug)]
pub(crate) struct FamilyKeys {
    pub name: Arc<str>,
    pub key: Arc<str>,
    pub channel: Arc<str>,
}

impl FamilyKeys {
    pub(crate) fn new(client: &Client, name: &str, kind: &str, event: &str) -> Result<FamilyKeys> {
        let lock = LockKeys::new(&client.inner.config.prefix, name)?;
        let key: Arc<str> = format!("{}:{kind}", lock.hash).into();
        let channel = format!("{key}:{event}").into();
        Ok(FamilyKeys {
            name: lock.name,
            key,
            channel,
        })
    }
}

/// Runs a guard's release to its end even when the caller stops waiting (tracked, so
/// `Client::shutdown` waits for it), as [`LockGuard::unlock`](crate::LockGuard::unlock) does: a
/// cancelled `unlock` leaves no hold behind.
pub(crate) async fn finish_release<T, F>(client: &Client, release: F) -> Result<T>
where
    T: Send + 'static,
    F: Future<Output = Result<T>> + Send + 'static,
{
    FinishOnDrop::new(release, |_: Result<T>| async {})
        .tracked(&client.inner.background)
        .await
}

/// Rejects a zero count of permits (or of a latch) with a typed error.
pub(crate) fn positive(what: &'static str, n: u32) -> Result<()> {
    if n == 0 {
        return Err(Error::InvalidArgument(format!("{what} must be at least 1")));
    }
    Ok(())
}

/// What one attempt found.
pub(crate) enum Attempt<T> {
    /// Done: the value to return.
    Done(T),
    /// Not yet: look again after a message, or after this long at most (`None`: [`NAP`]).
    Again(Option<Duration>),
}

/// Who a message wakes among one client's waiters on a channel.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Wake {
    /// Every waiter attempts: a latch opens for all.
    All,
    /// One waiter of the class attempts; a granted one wakes `pass` more (`pubsub/relay.rs`).
    Relay(RelayClass),
}

impl Wake {
    /// Semaphores' waiters: granted permits hint that more may be free, so a grant wakes two
    /// more local waiters.
    pub(crate) const PERMITS: Wake = Wake::relay(0, 2);

    /// Relay waiting, class `class`; a grant wakes `pass` more waiters of the class.
    pub(crate) const fn relay(class: usize, pass: usize) -> Wake {
        Wake::Relay(RelayClass { class, pass })
    }

    /// The relay class (0 for [`Wake::All`]).
    pub(crate) fn class(self) -> usize {
        match self {
            Wake::All => 0,
            Wake::Relay(relay) => relay.class,
        }
    }
}

/// Attempts until one succeeds or `wait` is spent (`Ok(None)`). After the first failed attempt
/// it subscribes to `channel` and attempts once more at once (a message sent before the
/// subscription would be missed) unless the client was subscribed since before the attempt,
/// then sleeps until a message (or, relay waiters, its turn) or the nap, whichever is first.
///
/// # Cancel safety
/// Dropping the future leaves only what `attempt` itself leaves; the subscription goes with it,
/// and a relay turn it held is passed on.
pub(crate) async fn wait_for<T, F, Fut>(
    client: &Client,
    channel: &Arc<str>,
    wait: Wait,
    wake: Wake,
    mut attempt: F,
) -> Result<Option<T>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Attempt<T>>>,
{
    let inner = &client.inner;
    let mut subscription: Option<Subscription> = None;
    // Set while this waiter holds a relay turn it has not used up.
    let mut turn: Option<Turn> = None;
    loop {
        inner.check_open()?;
        let mark = match subscription {
            None => inner.subscriber.mark(channel),
            Some(_) => None,
        };
        let nap = match attempt().await? {
            Attempt::Done(value) => {
                if let Some(turn) = turn.take() {
                    turn.granted();
                }
                return Ok(Some(value));
            }
            Attempt::Again(nap) => nap.unwrap_or(NAP).min(NAP),
        };
        // Refused: the others of the class sleep on.
        if let Some(turn) = turn.take() {
            turn.refused();
        }
        let Some(remaining) = wait.remaining() else {
            return Ok(None);
        };
        let subscribed = match subscription {
            Some(ref subscribed) => subscribed,
            None => {
                let (subscribed, continuous) =
                    inner.subscriber.subscribe_since(channel, mark).await?;
                let subscribed = subscription.insert(subscribed);
                if !continuous {
                    continue;
                }
                subscribed
            }
        };
        let nap = remaining.map_or(nap, |left| left.min(nap));
        match wake {
            Wake::All => tokio::select! {
                _ = subscribed.notified() => {}
                _ = tokio::time::sleep(nap) => {}
            },
            Wake::Relay(relay) => tokio::select! {
                mine = subscribed.turn(relay) => turn = Some(mine),
                _ = tokio::time::sleep(nap) => {}
            },
        }
    }
}
