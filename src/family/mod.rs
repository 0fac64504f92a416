//! The rest of the lock family on the same client: [`Semaphore`], [`PermitSemaphore`],
//! [`CountDownLatch`], [`ReadWriteLock`], [`FairLock`] (a [`Lock`](crate::Lock) in strict mode,
//! on the lock's own keys), and the [`Guard`] trait over every hold. Each other kind is one Lua
//! script (`lua/`) over keys under the kind's own suffix of the `{name}` hash tag, so a
//! semaphore, a latch and a lock may share a name, and every key of one object lives in one
//! Redis Cluster slot.
//!
//! Shared here: the keys, the input checks, and the family's waiter in the one wait loop
//! (`wait.rs`: attempt; on failure subscribe to the object's channel on the client's one
//! subscriber connection, attempt again, then sleep until a message or a bounded nap). The
//! waiters of the semaphores and the read-write lock queue on the server and hear of their own
//! grants only (`queued.rs`); the latch's wake on the object's channel.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::keys::LockKeys;
use crate::node::FamilyScript;
use crate::pubsub::{HANDED, Mark, Subscription};
use crate::shared::Client;
use crate::task::{FinishOnDrop, spawn_from_drop};
use crate::terms::Wait;
pub(crate) use crate::wait::{Attempt, NAP};
use crate::wait::{Then, Waiter};

mod fair;
mod guard;
mod kept;
mod latch;
mod permits;
mod queued;
mod rwlock;
mod rwlock_guard;
mod rwlock_share;
mod semaphore;

pub use fair::{FairGuard, FairLock};
pub(crate) use guard::guard_by_methods;
pub use guard::{Guard, GuardFuture};
pub use latch::CountDownLatch;
pub use permits::{Permit, PermitSemaphore};
pub use rwlock::{ReadLock, ReadWriteLock, WriteLock};
pub use rwlock_guard::{ReadGuard, WriteGuard};
pub use semaphore::Semaphore;

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

    /// Runs `script` on the key and the channel with `args`, even while the client shuts down
    /// (its own releases).
    pub(crate) async fn send(
        &self,
        client: &Client,
        script: &'static FamilyScript,
        args: &[&str],
    ) -> Result<Reply> {
        let n = self.send_as(client, script, args).await?;
        Ok(Reply::new(script.name, n))
    }

    /// [`send`](Self::send), for a reply of another type.
    pub(crate) async fn send_as<T: redis::FromRedisValue>(
        &self,
        client: &Client,
        script: &'static FamilyScript,
        args: &[&str],
    ) -> Result<T> {
        let keys = [&*self.key, &*self.channel];
        client.inner.node.family_call(script, &keys, args).await
    }

    /// The count the key holds, 0 when it is absent (`script` names its kind in errors).
    pub(crate) async fn count(&self, client: &Client, script: &'static str) -> Result<u64> {
        let raw: Option<String> = client
            .inner
            .node
            .query(redis::cmd("GET").arg(&*self.key))
            .await?;
        let Some(raw) = raw else { return Ok(0) };
        raw.parse()
            .map_err(|_| Error::Protocol { script, reply: raw })
    }

    /// Deletes the key and the keys under it named by `suffixes` (`<key>:<suffix>`, a queue's):
    /// `true` when any existed.
    pub(crate) async fn delete(&self, client: &Client, suffixes: &[&str]) -> Result<bool> {
        let under = suffixes
            .iter()
            .map(|suffix| format!("{}:{suffix}", self.key));
        let delete = redis::cmd("DEL")
            .arg(&*self.key)
            .arg(under.collect::<Vec<_>>())
            .clone();
        let deleted: u64 = client.inner.node.query(&delete).await?;
        Ok(deleted > 0)
    }
}

/// `Debug` for handles by their name alone.
macro_rules! debug_by_name {
    ($($kind:ident),*) => {$(
        impl std::fmt::Debug for $kind {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($kind))
                    .field("name", &self.name())
                    .finish_non_exhaustive()
            }
        }
    )*};
}

debug_by_name!(
    CountDownLatch,
    FairLock,
    PermitSemaphore,
    ReadWriteLock,
    Semaphore
);

/// A family script's integer reply, typed here for every kind: each script says what its
/// answers mean, and an answer outside them is one error, [`Error::Protocol`] naming the
/// script, instead of a guess at each call site.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reply {
    script: &'static str,
    n: i64,
}

impl Reply {
    pub(crate) fn new(script: &'static str, n: i64) -> Reply {
        Reply { script, n }
    }

    /// A yes or no (set, renewed, released, withdrawn, taken): 1 or 0.
    ///
    /// # Errors
    /// [`Error::Protocol`] for any other answer.
    pub(crate) fn flag(self) -> Result<bool> {
        match self.n {
            1 => Ok(true),
            0 => Ok(false),
            _ => Err(self.unexpected()),
        }
    }

    /// A count (permits, a latch's count, holds left), never negative.
    ///
    /// # Errors
    /// [`Error::Protocol`] for a negative answer.
    pub(crate) fn count(self) -> Result<u64> {
        u64::try_from(self.n).map_err(|_| self.unexpected())
    }

    /// A release's answer: the holds left (`Some`), or `None` when the owner held nothing
    /// (`-1`).
    ///
    /// # Errors
    /// [`Error::Protocol`] for any other negative answer.
    pub(crate) fn holds_left(self) -> Result<Option<u64>> {
        match self.n {
            -1 => Ok(None),
            _ => self.count().map(Some),
        }
    }

    /// An acquisition's answer (`lua/permits.lua`, `lua/rwlock.lua`): a hold count `n >= 1`
    /// granted, `0` an upgrade refused, `-1` refused, `n <= -2` refused until `-n - 2` ms from
    /// now at the latest. Every integer is one of these.
    pub(crate) fn taken(self) -> Taken {
        match self.n {
            1.. => Taken::Granted,
            0 => Taken::WouldDeadlock,
            -1 => Taken::Refused(None),
            n => Taken::Refused(Some(Duration::from_millis((-2 - n) as u64 + 1))),
        }
    }

    fn unexpected(self) -> Error {
        Error::Protocol {
            script: self.script,
            reply: self.n.to_string(),
        }
    }
}

/// What a family script answered to an acquisition ([`Reply::taken`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Taken {
    Granted,
    /// Not now: worth asking again after this long at most (`None`: no deadline known).
    Refused(Option<Duration>),
    /// A write asked by an owner that reads and does not write: an upgrade would deadlock.
    WouldDeadlock,
}

/// Sends one acquisition `request` for the object `name`. If the caller stops waiting for its
/// answer, the outcome is undone once it is in, in the background (tracked, so
/// `Client::shutdown` waits for it): a grant by `give_back`, anything else by `withdraw` (a
/// place in a server queue the request may have taken, `queued.rs`).
pub(crate) async fn ask<F, G, GF, R, W, WF>(
    client: &Client,
    name: &Arc<str>,
    request: F,
    give_back: G,
    withdraw: W,
) -> Result<Taken>
where
    F: Future<Output = Result<Taken>> + Send + 'static,
    G: FnOnce() -> GF + Send + 'static,
    GF: Future<Output = Result<R>> + Send,
    W: FnOnce() -> WF + Send + 'static,
    WF: Future<Output = ()> + Send,
{
    let name = name.clone();
    let abandoned = move |taken: Result<Taken>| async move {
        match taken {
            Ok(Taken::Granted) => {
                tracing::debug!(lock = %name, "acquire abandoned after the grant; giving it back");
                if let Err(e) = give_back().await {
                    tracing::warn!(lock = %name, error = %e, "could not give back an abandoned grant");
                }
            }
            _ => withdraw().await,
        }
    };
    FinishOnDrop::new(request, abandoned)
        .tracked(&client.inner.background)
        .await
}

/// A family guard's release, as [`LockGuard::unlock`](crate::LockGuard::unlock)'s: `release`
/// (`None`: nothing to send) runs to its end even when the caller stops waiting (tracked, so
/// `Client::shutdown` waits for it) and answers whether the hold was still there; a hold gone
/// then, or known `lost` before, is [`Error::LeaseLost`].
pub(crate) async fn finish_unlock<F>(
    client: &Client,
    name: &str,
    lost: bool,
    release: Option<F>,
) -> Result<()>
where
    F: Future<Output = Result<bool>> + Send + 'static,
{
    let background = &client.inner.background;
    let held = match release {
        Some(release) => {
            FinishOnDrop::new(release, |_| async {})
                .tracked(background)
                .await?
        }
        None => true,
    };
    if lost || !held {
        let name = name.to_string();
        return Err(Error::LeaseLost { name });
    }
    Ok(())
}

/// A dropped family guard's `release`, spawned on the current runtime (see
/// [`spawn_from_drop`]); outside one, the lease frees the hold.
pub(crate) fn release_dropped<F>(client: &Client, name: Arc<str>, release: F)
where
    F: Future<Output = Result<bool>> + Send + 'static,
{
    let release = async move {
        if let Err(e) = release.await {
            tracing::warn!(lock = %name, error = %e, "release of a dropped guard failed; it expires with its lease");
        }
    };
    spawn_from_drop(&client.inner.background, release);
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(n: i64) -> Reply {
        Reply::new("test", n)
    }

    #[test]
    fn a_reply_outside_what_the_script_answers_is_a_protocol_error() {
        assert!(matches!(reply(1).flag(), Ok(true)));
        assert!(matches!(reply(0).flag(), Ok(false)));
        for n in [2, -1, i64::MIN] {
            let answer = reply(n).flag();
            assert!(
                matches!(&answer, Err(Error::Protocol { script: "test", reply }) if *reply == n.to_string()),
                "{answer:?}"
            );
        }
        assert!(matches!(reply(7).count(), Ok(7)));
        assert!(matches!(reply(-1).count(), Err(Error::Protocol { .. })));
        assert!(matches!(reply(-1).holds_left(), Ok(None)));
        assert!(matches!(reply(0).holds_left(), Ok(Some(0))));
        assert!(matches!(
            reply(-2).holds_left(),
            Err(Error::Protocol { .. })
        ));
    }

    #[test]
    fn every_acquisition_answer_is_taken_or_refused() {
        assert_eq!(reply(3).taken(), Taken::Granted);
        assert_eq!(reply(0).taken(), Taken::WouldDeadlock);
        assert_eq!(reply(-1).taken(), Taken::Refused(None));
        assert_eq!(
            reply(-2 - 40).taken(),
            Taken::Refused(Some(Duration::from_millis(41)))
        );
    }
}
