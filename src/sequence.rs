//! One owner's releases and acquisitions of one lock reach Redis in order: an acquisition waits
//! for that owner's releases of the lock that are still in flight.
//!
//! Why: a guard's release writes no latch for its last hold (one `SET` fewer per unlock, ~3.5 µs
//! of server time), so its retry after a dropped connection infers from the owner's field that
//! the first attempt ran: a missing field means it did. That holds only if the owner cannot take
//! the lock again between the two attempts. A dropped guard is released in the background while
//! its owner goes on and may lock again at once; without this, the retry could release the new
//! hold (the "known hole" of session 2, now closed).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use dashmap::DashMap;
use tokio::sync::Notify;

type Key = (Arc<str>, Arc<str>);

/// The releases in flight, per (lock hash, owner field).
#[derive(Default)]
pub(crate) struct Releases {
    /// Releases in flight in all; lets an acquisition skip the map when there are none.
    total: AtomicUsize,
    map: DashMap<Key, Arc<InFlight>, foldhash::fast::RandomState>,
}

#[derive(Default)]
struct InFlight {
    /// Changed only under the map's entry lock.
    count: AtomicUsize,
    done: Notify,
}

/// One release in flight; dropping it (when the release finished, or was given up) lets the
/// owner's acquisitions of the lock go on.
pub(crate) struct Releasing {
    releases: Arc<Releases>,
    key: Key,
}

impl Releases {
    /// Registers a release of `hash` by `field`; synchronous, so it is in place before the
    /// owner can ask for the lock again.
    pub fn start(self: &Arc<Self>, hash: &Arc<str>, field: &Arc<str>) -> Releasing {
        let key = (hash.clone(), field.clone());
        self.total.fetch_add(1, Ordering::AcqRel);
        self.map
            .entry(key.clone())
            .or_default()
            .count
            .fetch_add(1, Ordering::AcqRel);
        Releasing {
            releases: self.clone(),
            key,
        }
    }

    /// Waits until no release of `hash` by `field` registered before this call is in flight.
    /// Each is bounded by the client's timeout and retries, so this is too.
    pub async fn settled(&self, hash: &Arc<str>, field: &Arc<str>) {
        if self.total.load(Ordering::Acquire) == 0 {
            return;
        }
        let key = (hash.clone(), field.clone());
        let Some(in_flight) = self.map.get(&key).map(|e| e.value().clone()) else {
            return;
        };
        let done = in_flight.done.notified();
        tokio::pin!(done);
        // Listen before looking, so the last release finishing in between is not missed.
        done.as_mut().enable();
        if in_flight.count.load(Ordering::Acquire) == 0 {
            return;
        }
        done.await;
    }
}

impl Drop for Releasing {
    fn drop(&mut self) {
        let releases = &self.releases;
        let mut finished = None;
        releases.map.remove_if(&self.key, |_, in_flight| {
            let last = in_flight.count.fetch_sub(1, Ordering::AcqRel) == 1;
            if last {
                finished = Some(in_flight.clone());
            }
            last
        });
        releases.total.fetch_sub(1, Ordering::AcqRel);
        if let Some(in_flight) = finished {
            in_flight.done.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn an_acquisition_waits_for_the_owners_release_only() {
        let releases = Arc::new(Releases::default());
        let (hash, field, other): (Arc<str>, Arc<str>, Arc<str>) =
            ("h".into(), "f".into(), "g".into());
        let first = releases.start(&hash, &field);
        let second = releases.start(&hash, &field);
        // Another owner is not held up.
        let other_owner =
            tokio::time::timeout(Duration::from_secs(1), releases.settled(&hash, &other)).await;
        assert!(
            other_owner.is_ok(),
            "another owner's acquisition must not wait"
        );
        let waiter = {
            let (releases, hash, field) = (releases.clone(), hash.clone(), field.clone());
            tokio::spawn(async move { releases.settled(&hash, &field).await })
        };
        drop(first);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished(), "one release is still in flight");
        drop(second);
        let woken = tokio::time::timeout(Duration::from_secs(1), waiter).await;
        assert!(
            matches!(woken, Ok(Ok(()))),
            "the last release must wake the waiter"
        );
        assert_eq!(releases.total.load(Ordering::Acquire), 0);
        assert!(releases.map.is_empty());
    }
}
