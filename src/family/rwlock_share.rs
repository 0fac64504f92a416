//! Shared read holds of a [`ReadWriteLock`](crate::ReadWriteLock): one client's concurrent
//! readers of one lock (watchdog leases only) share one read hold on the server, under a field
//! of their own (`<client id>:readers-<n>`), instead of a hold and two script calls each.
//!
//! - **Forming**: the first reader that finds no share open starts a background task that
//!   waits for a read hold like any reader (in the lock's queue); readers that come meanwhile
//!   wait for the same grant. When nobody waits any more the task stops (a grant
//!   on the wire is given back).
//! - **Joining**: a share admits the readers that waited for its grant, then only re-entries
//!   of its members; later readers form the next share, behind whoever queued on the server
//!   meanwhile. (It used to stay open to newcomers for 5 ms after its grant: `make bench`
//!   measured F2 and P2 faster without that window.)
//! - **Leaving**: the last member out releases the share on the server (its unlock waits for
//!   that), which grants the lock to the queue's head.
//! - **Not shared**: fixed-lease readers (their lease is theirs), and an owner that holds the
//!   lock in its own name (a fixed-lease read, or the write lock): its next read is a re-entry
//!   or a downgrade, which passes the queue only in its own name. A member's own fixed-lease
//!   read is asked for as a re-entry for the same reason.
//! - **What members share**: the lease, its renewal, and so `lost()` and `valid_until()`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::task::AbortHandle;

use super::kept::Kept;
use super::queued;
use super::rwlock::ReadWriteLock;
use crate::terms::Wait;

mod forming;

use forming::form;
pub(crate) use forming::{Interest, Joined};

/// Numbers the shares' fields (unique within the process; the client id makes them unique
/// on the server).
static NEXT_SHARE: AtomicU64 = AtomicU64::new(1);

/// One lock's shared read holds in one client (kept in the client's `LocalStates`, so every
/// handle of the lock sees the same).
#[derive(Default)]
pub(crate) struct ReadShares {
    state: Arc<Mutex<State>>,
    /// This client's waiters that took a hold a release of this client handed them.
    pub(crate) handed: queued::HandedWaiters,
}

#[derive(Default)]
struct State {
    /// Granted and not yet released, oldest first.
    live: Vec<Slot>,
    forming: Option<Forming>,
    /// Owners holding a read or write hold in their own name through this client, once per
    /// hold: such an owner reads in its own name too (a re-entry, or a downgrade, passes the
    /// queue only in the owner's own name).
    holding: Vec<Arc<str>>,
}

struct Slot {
    share: Arc<Share>,
    /// Members and their hold counts (re-entries count).
    owners: Vec<(Arc<str>, u32)>,
    /// Readers that waited for the grant and have not taken their place yet.
    pending: usize,
}

impl State {
    fn slot_mut(&mut self, share: &Arc<Share>) -> Option<&mut Slot> {
        self.live.iter_mut().find(|s| Arc::ptr_eq(&s.share, share))
    }
}

impl Slot {
    /// Whether readers may still enter: not lost, and known valid (a renewal that fails stops
    /// confirming the hold before it reports it lost).
    fn usable(&self) -> bool {
        !self.share.kept.is_lost() && Instant::now() < self.share.kept.valid_until()
    }

    fn members(&self) -> usize {
        self.owners.len() + self.pending
    }

    fn position(&self, owner: &str) -> Option<usize> {
        self.owners.iter().position(|(o, _)| &**o == owner)
    }

    fn enter(&mut self, owner: &Arc<str>) {
        match self.position(owner) {
            Some(i) => self.owners[i].1 += 1,
            None => self.owners.push((owner.clone(), 1)),
        }
    }
}

/// A share being asked for.
struct Forming {
    id: u64,
    /// Readers waiting for its grant.
    interest: usize,
    outcome: watch::Sender<Outcome>,
    task: AbortHandle,
}

#[derive(Clone)]
enum Outcome {
    Pending,
    Granted(Arc<Share>),
    /// The task ended without a grant (an error, shutdown): the readers try alone.
    Failed,
}

/// One shared read hold on the server.
pub(crate) struct Share {
    pub(crate) field: Arc<str>,
    pub(crate) kept: Kept,
}

/// Where a reader goes.
pub(crate) enum Join {
    Member(Arc<Share>),
    /// A share is being asked for: wait for its grant.
    Wait(Interest),
    Alone,
}

impl ReadShares {
    /// Places a reader `owner` who may wait on `wait`'s terms.
    pub(crate) fn join(&self, lock: &ReadWriteLock, owner: &Arc<str>, wait: Wait) -> Join {
        let mut state = self.state.lock();
        if state.holding.contains(owner) {
            return Join::Alone;
        }
        let reentry = state
            .live
            .iter_mut()
            .find(|slot| slot.usable() && slot.position(owner).is_some());
        if let Some(slot) = reentry {
            slot.enter(owner);
            return Join::Member(slot.share.clone());
        }
        if matches!(wait, Wait::Once) {
            return Join::Alone;
        }
        let forming = state.forming.get_or_insert_with(|| {
            let id = NEXT_SHARE.fetch_add(1, Ordering::Relaxed);
            let task = lock.client.inner.background.spawn(form(lock.clone(), id));
            Forming {
                id,
                interest: 0,
                outcome: watch::channel(Outcome::Pending).0,
                task: task.abort_handle(),
            }
        });
        forming.interest += 1;
        Join::Wait(Interest {
            lock: lock.clone(),
            id: forming.id,
            outcome: forming.outcome.subscribe(),
            owner: owner.clone(),
            done: false,
        })
    }

    /// Whether `owner` reads through one of this client's shares.
    pub(crate) fn is_member(&self, owner: &str) -> bool {
        let state = self.state.lock();
        state.live.iter().any(|slot| slot.position(owner).is_some())
    }

    /// A member `owner` leaves `share`; the share to release when it was the last one out.
    pub(crate) fn leave(&self, share: &Arc<Share>, owner: &str) -> Option<Arc<Share>> {
        let mut state = self.state.lock();
        let slot = state.slot_mut(share)?;
        let i = slot.position(owner)?;
        slot.owners[i].1 -= 1;
        if slot.owners[i].1 == 0 {
            slot.owners.swap_remove(i);
        }
        take_if_done(&mut state, share)
    }

    /// A hold of `owner` in its own name in this client, counted until dropped.
    pub(crate) fn own_held(&self, owner: &Arc<str>) -> OwnHeld {
        self.state.lock().holding.push(owner.clone());
        OwnHeld(self.state.clone(), owner.clone())
    }
}

/// Removes `share` when nobody is in it (members, or readers yet to take their place); the
/// caller releases it.
fn take_if_done(state: &mut State, share: &Arc<Share>) -> Option<Arc<Share>> {
    let i = state
        .live
        .iter()
        .position(|s| Arc::ptr_eq(&s.share, share))?;
    let slot = &state.live[i];
    if slot.members() > 0 {
        return None;
    }
    Some(state.live.remove(i).share)
}

/// One hold of an owner in its own name in this client, counted in [`ReadShares`] while it
/// lives.
pub(crate) struct OwnHeld(Arc<Mutex<State>>, Arc<str>);

impl Drop for OwnHeld {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        if let Some(i) = state.holding.iter().position(|w| *w == self.1) {
            state.holding.swap_remove(i);
        }
    }
}
