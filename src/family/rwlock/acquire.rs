//! How a [`ReadWriteLock`](super::ReadWriteLock) hold is waited for and asked: through this
//! client's shared read hold when it can (`rwlock_share.rs`), else in the owner's own name, by
//! the family's waiting loop with a writer's intent left while it waits.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use super::{Kind, ReadWriteLock, Side, WRITE_INTENT};
use crate::error::{Error, Result};
use crate::family::rwlock_guard::RwHold;
use crate::family::rwlock_local::{LocalTurns, Waiting};
use crate::family::rwlock_share::{Ahead, Join, Joined};
use crate::family::{Attempt, Taken, ask, wait_for};
use crate::scope::LockOptions;
use crate::task::spawn_from_drop;
use crate::terms::{Lease, Wait};

/// In whose name, and how, a hold is asked for.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Asking {
    /// The owner's own hold.
    Own,
    /// A shared read hold (`rwlock_share.rs`): its field holds nothing yet.
    Share,
    /// A read in the owner's own name by an owner already reading through a share: a
    /// re-entry, which passes a waiting writer's intent as one.
    Reentry,
    /// A write in the owner's own name while this client's shared read holds have the lock:
    /// the writer waits for the last of them to hand it over before it asks.
    AfterShares,
}

/// A waiter, counted locally while it waits; a writer's also withdraws its intent when its
/// wait ends without the lock (also when the wait is cancelled), so readers need not wait out
/// the intent's lease.
struct Intent {
    lock: ReadWriteLock,
    field: Arc<str>,
    kind: Kind,
    waiting: Waiting,
}

impl Drop for Intent {
    fn drop(&mut self) {
        // Armed only while waiting, which leaves a writer's intent on the server (or queues
        // it up locally, where it kept this client's readers back).
        if !self.waiting.disarm() || self.kind == Kind::Read {
            return;
        }
        let (subscriber, channel) = (&self.lock.client.inner.subscriber, &self.lock.keys.channel);
        LocalTurns::wake(subscriber, channel, Kind::Read);
        let (lock, field) = (self.lock.clone(), self.field.clone());
        let withdraw = async move {
            if let Err(e) = lock.call("withdraw", &field, 0).await {
                tracing::debug!(lock = %lock.keys.name, error = %e, "could not withdraw a write intent; it expires");
            }
        };
        spawn_from_drop(&self.lock.client.inner.background, withdraw);
    }
}

impl Side {
    pub(super) async fn acquire(&self, options: LockOptions) -> Result<Option<RwHold>> {
        let lock = &self.lock;
        let watchdog = lock.client.inner.config.watchdog_lease;
        let (lease, wait) = options.terms(watchdog)?;
        let field = lock.field();
        let shares = &lock.local.shares;
        let asking = match self.kind {
            Kind::Read => {
                if let Lease::Watchdog(_) = lease {
                    let share = match shares.join(lock, &field, wait) {
                        Join::Member(share) => Some(share),
                        Join::Wait(interest) => match interest.granted(wait).await {
                            Joined::Member(share) => Some(share),
                            Joined::TimedOut => return Ok(None),
                            Joined::Alone => None,
                        },
                        Join::Alone => None,
                    };
                    if let Some(share) = share {
                        return Ok(Some(RwHold::shared(lock.clone(), share, field)));
                    }
                }
                // A member of a share reading in its own name re-enters.
                match shares.is_member(&field) {
                    true => Asking::Reentry,
                    false => Asking::Own,
                }
            }
            Kind::Write => {
                // Readers of this client's shared holds go first: an owner among them would
                // wait for itself; a shared hold nobody uses any more goes now.
                match shares.writer_arrives(lock, &field)? {
                    Ahead::Nothing => Asking::Own,
                    Ahead::Shares => Asking::AfterShares,
                    Ahead::Release(share) => {
                        lock.give_back(share, true);
                        Asking::Own
                    }
                }
            }
        };
        let started = lock
            .wait_hold(self.kind, &field, lease, wait, asking)
            .await?;
        Ok(started.map(|started| RwHold::new(lock.clone(), self.kind, field, lease, started)))
    }
}

impl ReadWriteLock {
    /// Waits on `wait`'s terms for a hold of `kind` for `field`; when granted, the time its
    /// request was sent.
    ///
    /// A shared read hold being asked for holds nothing yet, so while a writer of this client
    /// waits, a wake-up sends no attempt: the writer goes first (its intent would hold the
    /// readers back anyway, or it waits for this client's shares to hand the lock over), and
    /// its release or withdrawal wakes the readers again.
    pub(crate) async fn wait_hold(
        &self,
        kind: Kind,
        field: &Arc<str>,
        lease: Lease,
        wait: Wait,
        asking: Asking,
    ) -> Result<Option<Instant>> {
        let intent = Intent {
            lock: self.clone(),
            field: field.clone(),
            kind,
            waiting: self.local.waiting(kind),
        };
        let intent_ref = &intent;
        // A writer that waits as long as it takes, counted while it asks or waits.
        let writer = (kind == Kind::Write && matches!(wait, Wait::Forever))
            .then(|| self.local.writer_asks(field));
        let first = AtomicBool::new(true);
        let (writer, first) = (&writer, &first);
        let granted = wait_for(
            &self.client,
            &self.keys.channel,
            wait,
            kind.wake(),
            move |_| {
                let skip = asking == Asking::Share && self.local.writers_wait_fresh();
                // A writer that comes behind a writer of another owner of this client still
                // asking or waiting (whose intent keeps readers out), or while this client's
                // shared read holds have the lock, waits for the local hand-over, a message
                // or a nap before it asks: the release hands over to a waiting writer in its
                // own script call. Never an owner that holds the lock in its own name: it
                // re-enters, or is refused an upgrade, at once.
                let queue_up = first.swap(false, Ordering::Relaxed)
                    && writer.as_ref().is_some_and(|w| {
                        (asking == Asking::AfterShares || w.behind_another())
                            && !self.local.shares.holds_own(field)
                    });
                // Only writers that will wait hold readers back (a single try leaves no intent).
                if kind == Kind::Write && !matches!(wait, Wait::Once) {
                    self.local.writer_active();
                }
                async move {
                    if skip || queue_up {
                        // Counted before it waits: a release hands over to it from now on.
                        intent_ref.waiting.arm();
                        return Ok(Attempt::Again(None));
                    }
                    let started = Instant::now();
                    let intent_ms = match wait {
                        Wait::Once => 0,
                        _ => WRITE_INTENT.as_millis() as u64,
                    };
                    match self.attempt(kind, asking, field, lease, intent_ms).await? {
                        Taken::Granted => Ok(Attempt::Done(started)),
                        Taken::WouldDeadlock => Err(Error::WouldDeadlock {
                            name: self.keys.name.to_string(),
                        }),
                        Taken::Refused(nap) => {
                            if intent_ms > 0 {
                                intent_ref.waiting.arm();
                            }
                            Ok(Attempt::Again(nap))
                        }
                    }
                }
            },
        )
        .await?;
        if granted.is_some() {
            // The grant cleared our intent on the server.
            intent.waiting.disarm();
        }
        Ok(granted)
    }

    /// One acquisition request; a grant whose caller stopped waiting is given back.
    async fn attempt(
        &self,
        kind: Kind,
        asking: Asking,
        field: &Arc<str>,
        lease: Lease,
        intent_ms: u64,
    ) -> Result<Taken> {
        let (op, unop, _) = kind.ops();
        let op = match asking {
            Asking::Reentry => "reenter",
            _ => op,
        };
        let (lock, request_field) = (self.clone(), field.clone());
        let request = async move {
            let reply = lock
                .call_with_intent(op, &request_field, lease.ms(), intent_ms)
                .await?;
            Ok(Taken::decode(reply))
        };
        let (lock, field) = (self.clone(), field.clone());
        let give_back = move || async move { lock.call(unop, &field, 0).await };
        // Refused, it took nothing: only a grant is undone.
        let withdraw = || async {};
        ask(&self.client, &self.keys.name, request, give_back, withdraw).await
    }
}
