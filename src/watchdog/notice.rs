//! The loss notice: the server tells the client at once when the key of a held lock changes,
//! and a hold found gone is marked lost then, not at its next renewal (up to a third of the
//! lease later). On unless [`Config::loss_notice`](crate::Config::loss_notice) is off.
//!
//! How it works. One task per client, beside the watchdog's, keeps a tracking connection
//! (`node/tracking.rs`; on a cluster one per primary, each key read where its slot is served):
//! a connection on which the server remembers every key read and pushes
//! an `invalidate` message when the key is next written, deleted, expired, evicted or flushed.
//! The task's reads are the ownership checks themselves: one `HEXISTS <lock hash> <owner>` per
//! hold, pipelined. A check answers whether the hold is still on the server and, being a read,
//! arms the next notice for its key. So:
//!
//! - the connection opens at the client's first hold;
//! - a hold is checked (and armed) [`loss_notice_delay`](crate::Config::loss_notice_delay)
//!   after its grant, in rounds at most one delay apart (so between one and two delays after
//!   it): a lock released sooner is never read, and the uncontended acquire-release path pays
//!   no round trip and no server work for the notice;
//! - on a notice for a key, every armed hold of that key is checked again, all the notices
//!   that arrived meanwhile in one pipeline; a hold found gone is read once more through the
//!   command connection, where its renewals go, and lost when that agrees (the watchdog's own
//!   path, [`super::lose`]: its guard's `lost()` resolves), the rest are armed again. Every
//!   write of the key reports, this client's own renewals and re-entries included (the
//!   connection never writes, so `NOLOOP` would not tell them apart): those checks find the
//!   hold and re-arm it. A check never marks lost a hold released or replaced meanwhile (the
//!   registry decides, as for a renewal);
//! - a flush reports no key: every armed hold is checked;
//! - the server forgets what a connection tracked when it drops. On every (re)connect,
//!   and behind Sentinel on a switch of master, every hold is checked at once. Behind
//!   Sentinel the connection follows the command connection's master, and every check also
//!   asks `ROLE`: a demoted master empties itself for a full sync, and reads there must not
//!   report holds gone that the new master still has.
//! - on a cluster, a read answered `MOVED` or `ASK` (a failover demoted its node, its slot
//!   moved or is moving) says nothing: the connections are made again from a fresh slot map
//!   and every hold is checked there. A slot moved away with a held key is heard at once: its
//!   old primary deletes the key, which it reports.
//!
//! What it does not change: renewals, and the local validity deadline, which stays the last
//! resort for a holder cut off from the server (it hears no notice).
//!
//! Every kind that keeps a hold under a lease is covered through the one registry: the
//! reentrant locks' holds (`Lock`, `FairLock`, a `MultiLock`'s members, a `Leadership`'s
//! term) by their owner field in the lock's hash, the lock family's by where each kind keeps
//! it ([`Presence`]: a permit's `p:<id>`, a reader's `r:<owner>`, the writer's name in `w`).
//!
//! Costs, per held lock: one read after the delay and one per write of its key (a renewal
//! every third of the lease, a re-entry); on the server, one entry of its tracking table
//! (`tracking-table-max-keys`: beyond it the server drops entries with a notice, which costs
//! a check each and nothing else). A hold released within the delay costs nothing on the
//! server, and the task wakes about twice per delay whatever the rate of acquisitions.
//!
//! Not covered: what holds no lease in the registry (a `Semaphore`'s counted permits, a
//! `CountDownLatch`).

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use redis::{PushInfo, PushKind, Value};
use tokio::sync::mpsc;
use tokio::time::Instant;

mod check;

use crate::backoff::{Backoff, LONGEST_RECONNECT};
use crate::hold::{Fresh, Noted};
use crate::node::{Moves, Tracked, Unavailable};
use crate::shared::Inner;
use check::{Unsettled, check};

/// The armed holds, by the key whose notice checks them.
type Armed = HashMap<Arc<str>, Vec<Noted>>;

/// The loss notice's task: runs until the client is gone (or the watchdog's task, which owns
/// it, is stopped), or for good when the server refuses tracking.
pub(super) async fn run(weak: Weak<Inner>) {
    let Some(inner) = weak.upgrade() else { return };
    if !inner.config.loss_notice {
        return;
    }
    let Some(tracking) = inner.node.tracking() else {
        return;
    };
    let timeout = inner.config.timeout;
    let fresh = inner.holds.fresh.clone();
    fresh.collect(true);
    // Connect at the first hold: a client that never holds anything (a waiter that gives up,
    // `status`, the CLI's reads) opens no tracking connection at all.
    let first = fresh.added.notified();
    let held = inner.holds.len() > 0;
    drop(inner);
    if !held {
        first.await;
        // Left for `listen`, which takes what was noted.
        fresh.added.notify_one();
    }
    let mut backoff = Backoff::reconnect();
    // Bounded by the client's life: each turn either connects or pauses.
    loop {
        let (tx, rx) = mpsc::unbounded_channel();
        match tracking.connect(timeout, tx).await {
            Ok(tracked) => {
                let served = Instant::now();
                match listen(&weak, tracked, rx).await {
                    Ok(()) => return,
                    Err(why) => tracing::debug!(%why, "loss notice connection lost; reconnecting"),
                }
                // A connection that fails at once (a server that is no master) is tried
                // again no faster than one that cannot be opened.
                if served.elapsed() > LONGEST_RECONNECT {
                    backoff.reset();
                }
            }
            Err(Unavailable::Refused(why)) => {
                tracing::warn!(
                    %why,
                    "the server refuses client-side caching (CLIENT TRACKING): lost locks are noticed at their next renewal; set loss_notice(false) to not try"
                );
                if let Some(inner) = weak.upgrade() {
                    inner.holds.fresh.collect(false);
                }
                return;
            }
            Err(why) => {
                tracing::debug!(%why, "loss notice cannot connect; trying again");
            }
        }
        // Holds noted meanwhile are not kept: the next connection checks every hold anyway,
        // and a list nobody drains would grow with every acquisition while it cannot connect.
        match weak.upgrade() {
            Some(inner) => drop(inner.holds.fresh.take()),
            None => return,
        }
        backoff.sleep().await;
    }
}

/// Serves one connection: checks every hold, then arms fresh holds and answers notices until
/// the connection is lost (an error: connect again) or the client is gone (`Ok`).
async fn listen(
    weak: &Weak<Inner>,
    mut tracked: Tracked,
    mut pushes: mpsc::UnboundedReceiver<PushInfo>,
) -> Result<(), Unavailable> {
    let mut armed = Armed::new();
    let mut unsettled = Unsettled::default();
    let Some(fresh) = check_all(weak, &mut tracked, &mut armed, &mut unsettled).await? else {
        return Ok(());
    };
    // Holds granted but not armed yet.
    let mut pending: Vec<Noted> = Vec::new();

    // Holds are armed in rounds at most one delay apart: a steady stream of short holds (W1)
    // wakes the task once per delay, not once per hold. A hold is thus armed between one and
    // two delays after its grant.
    let mut last_round = std::time::Instant::now();
    let mut moves = std::mem::replace(&mut tracked.moves, Moves::Never);
    loop {
        let Some(inner) = weak.upgrade() else {
            return Ok(());
        };
        let delay = inner.config.loss_notice_delay;
        pending.extend(fresh.take());
        let next_round = (!pending.is_empty()).then(|| Instant::from_std(last_round + delay));
        // Wait holding only the notification, not the client: a dropped client must be able
        // to end this task.
        drop(inner);
        let waiting = !pending.is_empty();
        let event = next_event(
            &fresh.added,
            waiting,
            next_round,
            &mut moves,
            &unsettled,
            &mut pushes,
        )
        .await;
        let Some(inner) = weak.upgrade() else {
            return Ok(());
        };
        match event {
            Event::Fresh => {}
            Event::Due => {
                last_round = round(
                    &inner,
                    &mut tracked,
                    &mut pending,
                    &mut armed,
                    &mut unsettled,
                )
                .await?;
            }
            Event::Moved => {
                return Err(Unavailable::Down("the master or the slot map moved".into()));
            }
            Event::Unsettled => {
                let again = unsettled.take();
                check(&inner, &mut tracked, again, &mut armed, &mut unsettled).await?;
                unsettled.after_round();
            }
            Event::Push(None) => return Err(Unavailable::Down("push channel closed".into())),
            Event::Push(Some(first)) => {
                let keys = Notices::gathered(first, &mut pushes);
                if keys.disconnected {
                    return Err(Unavailable::Down("disconnected".into()));
                }
                let holds = keys.holds(&mut armed);
                if !holds.is_empty() {
                    check(&inner, &mut tracked, holds, &mut armed, &mut unsettled).await?;
                }
            }
        }
    }
}

/// What the server tracked for an earlier connection is forgotten: checks every hold now.
/// Returns the list of fresh holds to follow, or `None` when the client is gone.
async fn check_all(
    weak: &Weak<Inner>,
    tracked: &mut Tracked,
    armed: &mut Armed,
    unsettled: &mut Unsettled,
) -> Result<Option<Arc<Fresh>>, Unavailable> {
    let Some(inner) = weak.upgrade() else {
        return Ok(None);
    };
    inner.holds.fresh.take();
    let all = inner.holds.all();
    let holds = all.len();
    let lost = check(&inner, tracked, all, armed, unsettled).await?;
    tracing::debug!(holds, lost, "loss notice connected; every hold checked");
    Ok(Some(inner.holds.fresh.clone()))
}

/// One round of arming: the pending holds granted at least a delay ago are checked (and
/// armed), those released meanwhile dropped, the younger ones kept. Returns when it was held.
async fn round(
    inner: &Inner,
    tracked: &mut Tracked,
    pending: &mut Vec<Noted>,
    armed: &mut Armed,
    unsettled: &mut Unsettled,
) -> Result<std::time::Instant, Unavailable> {
    let now = std::time::Instant::now();
    let ready = due_now(inner, pending, inner.config.loss_notice_delay, now);
    // Most rounds of short holds find them all released: nothing to send.
    if !ready.is_empty() {
        check(inner, tracked, ready, armed, unsettled).await?;
    }
    Ok(now)
}

/// Waits for what the notice acts on next: a push, fresh holds (unless some already wait for
/// `next_round`: the next round takes the fresh ones too, no wake-up per acquisition), that
/// round, a move of the servers, or the unsettled holds' next check.
async fn next_event(
    added: &tokio::sync::Notify,
    waiting: bool,
    next_round: Option<Instant>,
    moves: &mut Moves,
    unsettled: &Unsettled,
    pushes: &mut mpsc::UnboundedReceiver<PushInfo>,
) -> Event {
    let added = added.notified();
    let due = async {
        match next_round {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    };
    // Biased (no random draw per wake-up), with the pushes last: every other source is
    // ready once and then reset by its handling, so none starves the pushes, and a flood of
    // pushes (each turn drains them all) starves no round.
    tokio::select! {
        biased;
        _ = moves.next() => Event::Moved,
        _ = unsettled.due() => Event::Unsettled,
        _ = due => Event::Due,
        _ = added, if !waiting => Event::Fresh,
        push = pushes.recv() => Event::Push(push),
    }
}

enum Event {
    Push(Option<PushInfo>),
    Fresh,
    Due,
    Moved,
    Unsettled,
}

/// The notices of one round: the keys named, or every key (a flush), or a lost connection.
#[derive(Default)]
struct Notices {
    keys: Vec<String>,
    everything: bool,
    disconnected: bool,
}

impl Notices {
    /// `first` and every notice already here after it: they go in one round of checks.
    fn gathered(first: PushInfo, pushes: &mut mpsc::UnboundedReceiver<PushInfo>) -> Notices {
        let mut keys = Notices::default();
        keys.add(first);
        while let Ok(push) = pushes.try_recv() {
            keys.add(push);
        }
        keys
    }

    fn add(&mut self, push: PushInfo) {
        match push.kind {
            PushKind::Invalidate => match push.data.into_iter().next() {
                Some(Value::Array(keys)) | Some(Value::Set(keys)) => {
                    for key in keys {
                        if let Value::BulkString(bytes) = key {
                            self.keys.push(String::from_utf8_lossy(&bytes).into_owned());
                        }
                    }
                }
                // `FLUSHDB`/`FLUSHALL` (or the server dropping its whole table): every key.
                _ => self.everything = true,
            },
            PushKind::Disconnection => self.disconnected = true,
            _ => {}
        }
    }

    /// Takes the holds armed on the keys named out of `armed`: they are checked again (and
    /// armed again if still held).
    fn holds(self, armed: &mut Armed) -> Vec<Noted> {
        let lists: Vec<Vec<Noted>> = if self.everything {
            armed.drain().map(|(_, list)| list).collect()
        } else {
            self.keys
                .iter()
                .filter_map(|key| armed.remove(key.as_str()))
                .collect()
        };
        lists.into_iter().flatten().collect()
    }
}

/// Takes out of `pending` the holds granted at least `delay` before `now` (to be armed now);
/// those released or lost meanwhile are dropped, the younger ones stay.
fn due_now(
    inner: &Inner,
    pending: &mut Vec<Noted>,
    delay: Duration,
    now: std::time::Instant,
) -> Vec<Noted> {
    // In place: most rounds find the list's holds released (short holds), and moving every
    // hold out and the young ones back cost an allocation per round.
    let mut ready = Vec::new();
    pending.retain(|noted| match granted_at(inner, noted) {
        None => false,
        Some(at) if at + delay <= now => {
            ready.push(noted.clone());
            false
        }
        Some(_) => true,
    });
    ready
}

/// When the hold `noted` stands for was granted (a family hold: noted), if it is still live.
fn granted_at(inner: &Inner, noted: &Noted) -> Option<std::time::Instant> {
    match noted {
        Noted::Lock(key) => inner.holds.get(key).map(|hold| hold.granted_at),
        Noted::Family(hold, at) => hold.upgrade()?.is_live().then_some(*at),
    }
}
