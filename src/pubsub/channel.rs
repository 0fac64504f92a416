//! A channel's local listeners and a waiter's handle on them; and the polling a waiter does
//! instead when the client waits without pub/sub.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::Subscriber;

pub(super) struct Channel {
    pub(super) notify: Notify,
    /// Messages (and reconnects) seen on this channel; listeners compare it with what they saw.
    pub(super) epoch: AtomicU64,
    /// The same, without this client's own messages.
    pub(super) foreign_epoch: AtomicU64,
    /// Local waiters; changed under `Subscriber::channels`.
    pub(super) refs: Mutex<usize>,
    /// How many times the last local waiter left; a lingering channel stays while this moves.
    leaves: AtomicU64,
    /// Whether a task waits to unsubscribe the channel once it has been idle for its linger
    /// (`Config::channel_linger`).
    lingering: AtomicBool,
    /// Whether the server has confirmed our SUBSCRIBE on the live connection.
    pub(super) subscribed: Mutex<bool>,
    /// Grants to this client's waiters not yet taken, newest last: (owner field, nonce, token).
    /// A waiter takes only the one naming its latest queued attempt, so a stale one is never
    /// taken; the oldest go when there are more than [`GRANTS_KEPT`].
    granted: Mutex<Vec<GrantHere>>,
    /// The waiters that hear of grants, by the field they wait as: a grant wakes those of its
    /// field alone, however many others wait on the channel. Counted, since waits of one owner
    /// (tasks sharing an `Owner`) share a field.
    grant_waiters: Mutex<HashMap<Arc<str>, GrantWaiters, foldhash::fast::RandomState>>,
}

/// What wakes the waiters of one field, and how many there are.
type GrantWaiters = (Arc<Notify>, usize);

/// A grant to one of this client's waiters, from its message (`lua/queue.lua`).
struct GrantHere {
    field: Box<[u8]>,
    nonce: u64,
    token: Option<u64>,
}

/// Grants to this client's waiters kept until taken. A `Lock` has at most one live grant per
/// waiting owner (only the head of a client's local queue waits in the server's queue); a
/// semaphore or read-write lock one per waiting task of the client. A grant whose waiter left
/// stays until it is pushed out: this bounds them.
const GRANTS_KEPT: usize = 1024;

impl Channel {
    pub(super) fn new() -> Channel {
        Channel {
            notify: Notify::new(),
            epoch: AtomicU64::new(0),
            foreign_epoch: AtomicU64::new(0),
            refs: Mutex::new(0),
            leaves: AtomicU64::new(0),
            lingering: AtomicBool::new(false),
            subscribed: Mutex::new(false),
            granted: Mutex::new(Vec::new()),
            grant_waiters: Mutex::new(HashMap::default()),
        }
    }

    /// A release gave the lock to a waiter of this client (`field`), queued by its attempt
    /// `nonce`: kept for that waiter, which is woken; this client's other waiters of the lock
    /// sleep on.
    pub(super) fn granted_here(&self, field: &[u8], nonce: u64, token: Option<u64>) {
        {
            let mut granted = self.granted.lock();
            if granted.len() >= GRANTS_KEPT {
                granted.remove(0);
            }
            granted.push(GrantHere {
                field: field.into(),
                nonce,
                token,
            });
        }
        let Ok(field) = std::str::from_utf8(field) else {
            return;
        };
        // Woken after the lock is let go: the woken waiter takes it at once to forget its
        // field, and would otherwise spin (and yield its thread) until this one lets go.
        let wake = self
            .grant_waiters
            .lock()
            .get(field)
            .map(|(wake, _)| wake.clone());
        if let Some(wake) = wake {
            wake.notify_waiters();
        }
    }

    /// Wakes every listener: the client shuts down, or messages may have been lost (a
    /// reconnect, a subscription the server ended).
    pub(super) fn wake_everyone(&self) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
        self.foreign_epoch.fetch_add(1, Ordering::AcqRel);
        self.notify.notify_waiters();
    }

    /// Wakes every listener. A listener between two attempts is not lost: `notified` compares
    /// the epoch with the one it last saw, so a message that came meanwhile wakes it at once,
    /// and no stale permit wakes anybody later for nothing.
    ///
    /// Within one client only the head of a lock's local queue (see `local_queue.rs`) listens on
    /// a lock's channel, so this still wakes one waiter per message.
    pub(super) fn wake(&self, own: bool) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
        if !own {
            self.foreign_epoch.fetch_add(1, Ordering::AcqRel);
        }
        self.notify.notify_waiters();
    }

    pub(super) fn epoch(&self, heed_own: bool) -> u64 {
        match heed_own {
            true => self.epoch.load(Ordering::Acquire),
            false => self.foreign_epoch.load(Ordering::Acquire),
        }
    }
}

/// A waiter's interest in one channel; leaving is dropping it.
pub(crate) struct Subscription {
    pub(super) subscriber: Arc<Subscriber>,
    pub(super) name: Arc<str>,
    pub(super) channel: Arc<Channel>,
    /// The channel's epoch when this waiter last woke (or subscribed).
    pub(super) seen: AtomicU64,
    /// Whether this client's own unlock messages wake this waiter.
    pub(super) heed_own: bool,
    /// The owner field whose grants wake this waiter (`grants_to`), and what they wake.
    pub(super) field: Option<(Arc<str>, Arc<Notify>)>,
    /// Set when the client waits by polling: no server subscription, `notified` sleeps.
    pub(super) poll: Option<Poll>,
}

impl Subscription {
    /// Resolves on the next unlock message, or at once if one arrived since this subscription
    /// was made or last woke, or on a grant to its field. When the client waits by polling,
    /// resolves after the next backoff pause instead (or on a local wake-up, such as shutdown,
    /// or a hold a release of this client handed its field).
    pub(crate) async fn notified(&self) {
        if let Some(poll) = &self.poll {
            tokio::select! {
                () = tokio::time::sleep(poll.next_pause()) => return,
                () = self.on_message() => return,
                () = self.on_grant() => return,
            }
        }
        tokio::select! {
            () = self.on_message() => {}
            () = self.on_grant() => {}
        }
    }

    /// This waiter's grants wake it from [`notified`](Subscription::notified): those naming
    /// `field`.
    pub(crate) fn grants_to(mut self, field: Arc<str>) -> Self {
        let wake = {
            let mut waiters = self.channel.grant_waiters.lock();
            let (wake, count) = waiters
                .entry(field.clone())
                .or_insert_with(|| (Arc::new(Notify::new()), 0));
            *count += 1;
            wake.clone()
        };
        self.forget_field();
        self.field = Some((field, wake));
        self
    }

    /// Stops hearing of grants to its field.
    fn forget_field(&mut self) {
        let Some((field, _)) = self.field.take() else {
            return;
        };
        let mut waiters = self.channel.grant_waiters.lock();
        if let Some((_, count)) = waiters.get_mut(&field) {
            *count -= 1;
            if *count == 0 {
                waiters.remove(&field);
            }
        }
    }

    /// Resolves once a grant naming this waiter's field is kept; never without a field.
    async fn on_grant(&self) {
        let Some((field, wake)) = &self.field else {
            return std::future::pending().await;
        };
        loop {
            let notified = wake.notified();
            tokio::pin!(notified);
            // Register before looking, so a grant in between cannot be missed.
            notified.as_mut().enable();
            let kept = {
                let granted = self.channel.granted.lock();
                granted
                    .iter()
                    .any(|grant| *grant.field == *field.as_bytes())
            };
            if kept {
                return;
            }
            notified.await;
        }
    }

    /// The grant to `field` whose message names the attempt `nonce`, taken: `Some(token)` (the
    /// token the grant made, `None` for none). Every other grant kept for `field` goes too: it
    /// names an earlier attempt (or, without a `nonce`, no attempt that may take it).
    pub(crate) fn take_grant(&self, field: &str, nonce: Option<u64>) -> Option<Option<u64>> {
        let mut granted = self.channel.granted.lock();
        let mut taken = None;
        granted.retain(|grant| {
            let ours = *grant.field == *field.as_bytes();
            if ours && Some(grant.nonce) == nonce {
                taken = Some(grant.token);
            }
            !ours
        });
        taken
    }

    pub(super) async fn on_message(&self) {
        loop {
            let notified = self.channel.notify.notified();
            tokio::pin!(notified);
            // Register before reading the epoch so a message in between cannot be missed.
            notified.as_mut().enable();
            let now = self.channel.epoch(self.heed_own);
            if self.seen.swap(now, Ordering::AcqRel) != now {
                return;
            }
            notified.await;
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.forget_field();
        let last = {
            let _map = self.subscriber.channels.lock();
            let mut refs = self.channel.refs.lock();
            *refs -= 1;
            *refs == 0
        };
        if !last {
            return;
        }
        let channel = &self.channel;
        channel.leaves.fetch_add(1, Ordering::AcqRel);
        // One lingering task per channel, not one per departure.
        if channel.lingering.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            channel.lingering.store(false, Ordering::Release);
            return;
        };
        // The channel stays subscribed for `Config::channel_linger` after its last waiter
        // left, so a waiter that comes back meanwhile (a process waiting for the same lock
        // again and again) finds it subscribed. Every departure starts the period again.
        // The task holds the subscriber only weakly, and ends when the client stops.
        let subscriber = Arc::downgrade(&self.subscriber);
        let (name, channel) = (self.name.clone(), channel.clone());
        let (linger, ended) = (self.subscriber.linger, self.subscriber.lingers.clone());
        handle.spawn(async move {
            // Cleared when the task ends, also when its runtime drops it mid-sleep (the client
            // may live on in another runtime): a later departure then starts its own linger.
            let lingering = Lingering(channel.clone());
            // Bounded: each round ends the wait unless a waiter left during the round, and
            // rounds stop with the runtime or the client.
            loop {
                let seen = channel.leaves.load(Ordering::Acquire);
                tokio::select! {
                    () = tokio::time::sleep(linger) => {}
                    () = ended.cancelled() => return,
                }
                if channel.leaves.load(Ordering::Acquire) == seen {
                    break;
                }
            }
            // Cleared first: a departure from now on starts its own linger.
            drop(lingering);
            // Unsubscribes only if no waiter is back.
            if let Some(subscriber) = subscriber.upgrade() {
                subscriber.leave(&name).await;
            }
        });
    }
}

/// A channel's linger task, while it runs (see `Config::channel_linger`).
struct Lingering(Arc<Channel>);

impl Drop for Lingering {
    fn drop(&mut self) {
        self.0.lingering.store(false, Ordering::Release);
    }
}

/// A polling waiter's backoff: the pause doubles from `first` up to `max`, each drawn at
/// random from its upper half, so waiters that started together do not poll together.
pub(super) struct Poll {
    first: Duration,
    max: Duration,
    attempts: AtomicU32,
}

impl Poll {
    pub(super) fn new(first: Duration, max: Duration) -> Poll {
        Poll {
            first,
            max: max.max(first),
            attempts: AtomicU32::new(0),
        }
    }

    fn next_pause(&self) -> Duration {
        let n = self.attempts.fetch_add(1, Ordering::Relaxed).min(20);
        let ceiling = self.first.saturating_mul(1 << n).min(self.max);
        let micros = ceiling.as_micros().min(u64::MAX as u128) as u64;
        Duration::from_micros(rand::random_range(micros / 2..=micros.max(1)))
    }
}
