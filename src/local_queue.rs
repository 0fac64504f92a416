//! Local fairness: one queue per lock among this client's contenders.
//!
//! Without it, a task that releases a lock and asks for it again at once wins the race against
//! the waiters it just woke (its request reaches Redis a pub/sub delivery earlier), so waiters
//! starve. With it, this client's contenders for one lock line up FIFO and only the head asks
//! Redis; the holder asking again queues at the back. A place in the queue is never kept while
//! the lock is held, and Redis alone decides who holds the lock: the queue only orders local
//! attempts.
//!
//! Hand-over: the waiting head leaves an [`Offer`] at the queue. A release of this client that
//! frees the lock takes it and asks `release.lua` to give the lock straight to the head: no
//! unlock message, no acquire round trip, and the lock is never free in between. The script
//! does so only while nothing is queued on the server ahead of the head: another client's
//! waiter (every waiter is queued there from its second attempt on, polling ones too, and a
//! MultiLock's members among them). So a busy client hands the lock among its own tasks only
//! until a waiter of another client queues; the next release that frees it is that waiter's.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use dashmap::DashMap;
use parking_lot::Mutex;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, oneshot};

use crate::node::Successor;

#[derive(Default)]
pub(crate) struct LocalQueues {
    map: DashMap<Arc<str>, Arc<LocalQueue>, foldhash::fast::RandomState>,
    /// How many queues the map holds: counted in before a queue is added and out after it
    /// went, so 0 means none. An uncontended acquisition and its release look the map up three
    /// times, each hashing the lock's key, all for nothing while no lock is contended.
    queues: AtomicUsize,
}

pub(crate) struct LocalQueue {
    head: Arc<Semaphore>,
    /// Woken by this client's own full releases: faster than the pub/sub round.
    pub released: Notify,
    /// The waiting head's offer to take the lock over from a releasing holder.
    offer: Mutex<Option<Offer>>,
    /// The owner field this client's last release of the lock handed it to, if it did.
    handed_to: Mutex<Option<Arc<str>>>,
}

/// The waiting head's offer: who it is, and where to tell it what became of the offer.
pub(crate) struct Offer {
    pub successor: Successor,
    pub reply: oneshot::Sender<OfferAnswer>,
}

/// What became of a taken offer.
#[derive(Debug)]
pub(crate) enum OfferAnswer {
    /// The lock is the waiter's: count 1, fencing token, and when the request that granted it
    /// was sent (its lease runs from no earlier than that).
    Granted { token: u64, sent: Instant },
    /// The release did not hand it over (freed it for everyone, or there was nothing to free).
    Declined,
    /// The release failed without an answer: the waiter may or may not hold the lock.
    Unknown,
}

/// An offer left at the queue; dropping it withdraws it.
pub(crate) struct Offered {
    queue: Arc<LocalQueue>,
    reply: oneshot::Receiver<OfferAnswer>,
    /// Gives back a grant that arrived after the waiter stopped listening (see `Drop`).
    give_back: Option<GiveBack>,
}

/// Takes over the answer to an offer whose waiter stopped waiting after a release took it:
/// gives back on the server the grant it may bring, which the waiter will never use.
pub(crate) type GiveBack = Box<dyn FnOnce(oneshot::Receiver<OfferAnswer>) + Send + Sync>;

/// A contender's place in its lock's local queue; leaving is dropping it.
pub(crate) struct Ticket<'a> {
    local_queues: &'a LocalQueues,
    key: Arc<str>,
    pub queue: Arc<LocalQueue>,
    permit: Option<OwnedSemaphorePermit>,
}

impl LocalQueues {
    /// Joins the queue of `key`; the ticket is at the head if nobody else contends.
    pub(crate) fn join(&self, key: &Arc<str>) -> Ticket<'_> {
        let queue = self
            .map
            .entry(key.clone())
            .or_insert_with(|| {
                self.queues.fetch_add(1, Ordering::AcqRel);
                Arc::new(LocalQueue {
                    head: Arc::new(Semaphore::new(1)),
                    released: Notify::new(),
                    offer: Mutex::new(None),
                    handed_to: Mutex::new(None),
                })
            })
            .clone();
        let permit = queue.head.clone().try_acquire_owned().ok();
        Ticket {
            local_queues: self,
            key: key.clone(),
            queue,
            permit,
        }
    }

    /// Joins the queue of `key` only if this client already has contenders for it.
    pub(crate) fn join_if_contended(&self, key: &Arc<str>) -> Option<Ticket<'_>> {
        if self.none() || !self.map.contains_key(key) {
            return None;
        }
        Some(self.join(key))
    }

    /// Wakes every contender (client shutdown): queued ones stop waiting for the head.
    pub(crate) fn close_all(&self) {
        for queue in self.map.iter() {
            queue.head.close();
            queue.released.notify_waiters();
        }
    }

    /// Tells this client's head contender of `key` that the lock was just freed.
    pub(crate) fn released(&self, key: &Arc<str>) {
        if self.none() {
            return;
        }
        if let Some(queue) = self.map.get(key) {
            *queue.handed_to.lock() = None;
            queue.released.notify_one();
        }
    }

    /// Takes the waiting head's offer for `key`, if there is one and its waiter is not the
    /// releasing owner `releasing` (tasks sharing an `Owner`): the lock cannot pass from an
    /// owner to itself, so that offer stays, and the release frees the lock and wakes its
    /// waiter. The caller must answer the offer it takes (see [`OfferAnswer`]).
    pub(crate) fn take_offer(&self, key: &Arc<str>, releasing: &str) -> Option<Offer> {
        if self.none() {
            return None;
        }
        let queue = self.map.get(key)?;
        // A head that stops waiting withdraws its offer (`Offered`'s Drop); one that stopped
        // just after this take leaves the answer to a give-back that waits for it.
        let mut offer = queue.offer.lock();
        match &*offer {
            Some(waiting) if *waiting.successor.field != *releasing => offer.take(),
            _ => None,
        }
    }

    /// Whether no lock has a queue: nothing to look up.
    fn none(&self) -> bool {
        self.queues.load(Ordering::Acquire) == 0
    }

    /// Notes that a release of this client handed the lock to its waiter `field`.
    pub(crate) fn note_handed_over(&self, key: &Arc<str>, field: &Arc<str>) {
        if let Some(queue) = self.map.get(key) {
            *queue.handed_to.lock() = Some(field.clone());
        }
    }
}

impl Ticket<'_> {
    pub(crate) fn is_head(&self) -> bool {
        self.permit.is_some()
    }

    /// Leaves the head's offer to take the lock over (replacing none: one head, one offer).
    /// `give_back` takes over the answer if the waiter stops waiting after a release took the
    /// offer, and gives back the lock it may bring.
    pub(crate) fn offer(&self, successor: Successor, give_back: GiveBack) -> Offered {
        let (tx, rx) = oneshot::channel();
        *self.queue.offer.lock() = Some(Offer {
            successor,
            reply: tx,
        });
        Offered {
            queue: self.queue.clone(),
            reply: rx,
            give_back: Some(give_back),
        }
    }

    /// Waits to become the head. Cancel-safe: dropping the future keeps the queue intact.
    pub(crate) async fn wait_head(&mut self) {
        if self.permit.is_none() {
            // The semaphore is never closed, so an error cannot happen; stay non-head if it did.
            self.permit = self.queue.head.clone().acquire_owned().await.ok();
        }
    }
}

impl LocalQueue {
    /// The owner field this client's last release of the lock handed it to, if it did.
    pub(crate) fn handed_to(&self) -> Option<Arc<str>> {
        self.handed_to.lock().clone()
    }
}

impl Offered {
    /// Resolves when a release answered the offer (never, until one takes it).
    pub(crate) async fn answered(&mut self) -> OfferAnswer {
        (&mut self.reply).await.unwrap_or(OfferAnswer::Unknown)
    }

    /// Withdraws the offer. `None` if no release took it; else what became of it (waiting for
    /// the release's answer: the lock may already be ours).
    pub(crate) async fn withdraw(mut self) -> Option<OfferAnswer> {
        let offer = self.queue.offer.lock().take();
        if offer.is_some() {
            // Nobody took it, and nobody can now. Closed before its sender goes: dropping the
            // sender would otherwise wake this waiter's task for nothing (one more poll of the
            // caller's future at its next await, every hand-over). Nothing to give back.
            self.reply.close();
            self.give_back = None;
            return None;
        }
        Some(self.answered().await)
    }
}

impl OfferAnswer {
    /// Whether the waiter may hold the lock after this answer (and must give it back if it
    /// will not use it).
    pub(crate) fn may_hold(&self) -> bool {
        !matches!(self, OfferAnswer::Declined)
    }
}

impl Drop for Offered {
    fn drop(&mut self) {
        if self.reply.is_terminated() {
            return; // the answer was read: whoever read it deals with it
        }
        if self.queue.offer.lock().take().is_some() {
            // Still at the queue: nobody took it, and nobody can now.
            self.reply.close();
            return;
        }
        // Taken by a release, whose answer is here or on its way and may be the lock: the
        // give-back takes it over. (Once the client's runtime has ended, nothing can run it:
        // the lease frees the lock.)
        if let Some(give_back) = self.give_back.take() {
            let (_, closed) = oneshot::channel();
            give_back(std::mem::replace(&mut self.reply, closed));
        }
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        self.permit.take();
        // Forget the queue once nobody uses it: the map holds one reference, we hold another.
        let gone =
            (self.local_queues.map).remove_if(&self.key, |_, queue| Arc::strong_count(queue) <= 2);
        if gone.is_some() {
            self.local_queues.queues.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A release takes the waiting head's offer, unless the head waits as the releasing owner
    /// itself (tasks sharing an `Owner`): that offer stays for the head's next look.
    #[test]
    fn a_release_never_takes_its_own_owners_offer() {
        let queues = LocalQueues::default();
        let key: Arc<str> = "lock".into();
        let ticket = queues.join(&key);
        let successor = Successor {
            field: "client:owner".into(),
            lease_ms: 1_000,
            fenced: false,
        };
        let _offered = ticket.offer(successor, Box::new(|_| {}));
        assert!(queues.take_offer(&key, "client:owner").is_none());
        let Some(offer) = queues.take_offer(&key, "client:other") else {
            panic!("another owner's release takes the offer");
        };
        assert_eq!(&*offer.successor.field, "client:owner");
        assert!(
            queues.take_offer(&key, "client:other").is_none(),
            "taken once"
        );
    }
}
