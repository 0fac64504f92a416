//! Local fairness: one queue per lock among this client's contenders.
//!
//! Without it, a task that releases a lock and asks for it again at once wins the race against
//! the waiters it just woke (its request reaches Redis a pub/sub delivery earlier), so waiters
//! starve. With it, this client's contenders for one lock line up FIFO and only the head asks
//! Redis; the holder asking again queues at the back. The gate is never held while the lock
//! is held, and Redis alone decides who holds the lock: the gate only orders local attempts.

use std::sync::Arc;

use dashmap::DashMap;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

#[derive(Default)]
pub(crate) struct Gates {
    map: DashMap<Arc<str>, Arc<Gate>, foldhash::fast::RandomState>,
}

pub(crate) struct Gate {
    head: Arc<Semaphore>,
    /// Woken by this client's own full releases: faster than the pub/sub round.
    pub released: Notify,
}

/// A contender's place in its lock's local queue; leaving is dropping it.
pub(crate) struct Ticket<'a> {
    gates: &'a Gates,
    key: Arc<str>,
    pub gate: Arc<Gate>,
    permit: Option<OwnedSemaphorePermit>,
}

impl Gates {
    /// Joins the queue of `key`; the ticket is at the head if nobody else contends.
    pub fn join(&self, key: &Arc<str>) -> Ticket<'_> {
        let gate = self
            .map
            .entry(key.clone())
            .or_insert_with(|| {
                Arc::new(Gate {
                    head: Arc::new(Semaphore::new(1)),
                    released: Notify::new(),
                })
            })
            .clone();
        let permit = gate.head.clone().try_acquire_owned().ok();
        Ticket {
            gates: self,
            key: key.clone(),
            gate,
            permit,
        }
    }

    /// Joins the queue of `key` only if this client already has contenders for it.
    pub fn join_if_contended(&self, key: &Arc<str>) -> Option<Ticket<'_>> {
        if !self.map.contains_key(key) {
            return None;
        }
        Some(self.join(key))
    }

    /// Wakes every contender (client shutdown): queued ones stop waiting for the head.
    pub fn close_all(&self) {
        for gate in self.map.iter() {
            gate.head.close();
            gate.released.notify_waiters();
        }
    }

    /// Tells this client's head contender of `key` that the lock was just freed.
    pub fn released(&self, key: &Arc<str>) {
        if let Some(gate) = self.map.get(key) {
            gate.released.notify_one();
        }
    }
}

impl Ticket<'_> {
    pub fn is_head(&self) -> bool {
        self.permit.is_some()
    }

    /// Waits to become the head. Cancel-safe: dropping the future keeps the queue intact.
    pub async fn wait_head(&mut self) {
        if self.permit.is_none() {
            // The semaphore is never closed, so an error cannot happen; stay non-head if it did.
            self.permit = self.gate.head.clone().acquire_owned().await.ok();
        }
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        self.permit.take();
        // Forget the gate once nobody uses it: the map holds one reference, we hold another.
        self.gates
            .map
            .remove_if(&self.key, |_, gate| Arc::strong_count(gate) <= 2);
    }
}
