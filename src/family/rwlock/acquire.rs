//! How a [`ReadWriteLock`](super::ReadWriteLock) hold is waited for and asked: through this
//! client's shared read hold when it can (`rwlock_share.rs`), else in the owner's own name, in
//! the lock's queue on the server (`lua/rwlock.lua`, `queued.rs`).

use std::sync::Arc;
use std::time::Instant;

use super::{Hold, Kind, ReadWriteLock, SCRIPT, Side};
use crate::error::{Error, Result};
use crate::family::queued;
use crate::family::rwlock_guard::RwHold;
use crate::family::rwlock_share::{Join, Joined};
use crate::family::{Attempt, Taken, ask};
use crate::options::LockOptions;
use crate::telemetry;
use crate::terms::{Lease, Wait};

/// How a hold is asked for.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Asking {
    /// As a newcomer: it queues behind the waiters before it.
    Own,
    /// A read in the owner's own name by an owner already reading through a share: a
    /// re-entry, which does not queue.
    Reentry,
}

impl Side {
    pub(super) async fn acquire(&self, options: LockOptions) -> Result<Option<RwHold>> {
        let lock = &self.lock;
        let watchdog = lock.client.inner.config.watchdog_lease;
        let (lease, wait) = options.terms(watchdog)?;
        let kind = match self.kind {
            Kind::Read => telemetry::READ,
            Kind::Write => telemetry::WRITE,
        };
        let series = (lock.client.inner.config.lock_label).series(kind, &lock.keys.name);
        let measured = telemetry::Acquisition::start(series);
        let held = self.wait_for_hold(lease, wait).await;
        measured.finish_with(
            matches!(wait, Wait::Once),
            &held,
            matches!(held, Ok(Some(_))),
        );
        held
    }

    /// A hold on `lease` terms, waiting as `wait` allows.
    async fn wait_for_hold(&self, lease: Lease, wait: Wait) -> Result<Option<RwHold>> {
        let lock = &self.lock;
        let field = lock.field();
        let shares = &lock.shares;
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
                // An owner reading through a share would wait for itself.
                if shares.is_member(&field) {
                    return Err(Error::WouldDeadlock {
                        name: lock.keys.name.to_string(),
                    });
                }
                Asking::Own
            }
        };
        let started = lock
            .wait_hold(self.kind, &field, lease, wait, asking)
            .await?;
        Ok(started.map(|started| RwHold::new(lock.clone(), self.kind, field, lease, started)))
    }
}

impl ReadWriteLock {
    /// Waits on `wait`'s terms for a hold of `kind` for `field`, in the lock's queue (a wait
    /// that ends without the hold withdraws from it); when granted, a time at or before the
    /// hold's lease started.
    pub(crate) async fn wait_hold(
        &self,
        kind: Kind,
        field: &Arc<str>,
        lease: Lease,
        wait: Wait,
        asking: Asking,
    ) -> Result<Option<Instant>> {
        let terms = queued::terms(&self.client, wait);
        let waiter = queued::waiter_of(field);
        let withdrawal = self.clone().withdraw(waiter.clone(), field.clone());
        let op = match asking {
            Asking::Reentry => "reenter",
            Asking::Own => kind.ops().0,
        };
        let (terms, waiter_ref) = (&terms, &waiter);
        let handed = Some(&self.shares.handed);
        queued::wait_in_queue(
            &self.client,
            &self.grants,
            wait,
            &waiter,
            withdrawal,
            handed,
            || async move {
                match self
                    .attempt(op, kind, field, waiter_ref, lease, terms)
                    .await?
                {
                    Taken::Granted => Ok(Attempt::Done(())),
                    Taken::WouldDeadlock => Err(Error::WouldDeadlock {
                        name: self.keys.name.to_string(),
                    }),
                    Taken::Refused(nap) => Ok(Attempt::Again(nap)),
                }
            },
        )
        .await
    }

    /// One acquisition request (`op`, for a hold of `kind`) on queue `terms`; if the caller
    /// stops waiting for its answer, a grant is given back and a place it took is withdrawn.
    async fn attempt(
        &self,
        op: &'static str,
        kind: Kind,
        field: &Arc<str>,
        waiter: &Arc<str>,
        lease: Lease,
        terms: &[String; 2],
    ) -> Result<Taken> {
        self.client.inner.check_open()?;
        let (lock, request_field, request_waiter) = (self.clone(), field.clone(), waiter.clone());
        let terms = terms.clone();
        let request = async move {
            let duration = Some(lease.duration());
            let lease = lease.ms().to_string();
            let args = [
                op,
                &request_field,
                &lease,
                &terms[0],
                &terms[1],
                &request_waiter,
                "",
            ];
            let send = (lock.keys).send_acquisition(&lock.client, &SCRIPT, &args, duration);
            Ok(send.await?.taken())
        };
        let (lock, field) = (self.clone(), field.clone());
        let (this, waiter, owner) = (self.clone(), waiter.clone(), field.clone());
        let withdraw = move || this.withdraw(waiter, owner);
        let give_back = move || async move { lock.release(Hold::Own(kind), &field, false).await };
        let request = Box::pin(request);
        ask(&self.client, &self.keys.name, request, give_back, withdraw).await
    }
}
