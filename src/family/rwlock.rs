//! [`ReadWriteLock`]: many readers or one writer, each hold with its own lease.

use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;

#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::family::rwlock_guard::{ReadGuard, WriteGuard};
use crate::family::rwlock_local::LocalTurns;
use crate::family::rwlock_share::Share;
use crate::family::{FamilyKeys, Wake};
use crate::node::FamilyScript;
use crate::owner::Owner;
use crate::scope::LockOptions;
use crate::shared::Client;
use crate::task::FinishOnDrop;

mod acquire;

pub(crate) use acquire::Asking;

pub(crate) static SCRIPT: FamilyScript =
    FamilyScript::batching("rwlock", include_str!("../../lua/rwlock.lua"));

/// How long a waiting writer keeps new readers out without asking again: a writer asks at
/// least once a second while it waits, so only a writer that crashed while waiting holds
/// readers up, for this long at most.
pub(crate) const WRITE_INTENT: Duration = Duration::from_secs(3);

/// A read-write lock (Redisson's `RReadWriteLock`): many readers at once, or one writer.
///
/// Made by [`Client::read_write_lock`]; cheap to clone. [`read`](ReadWriteLock::read) and
/// [`write`](ReadWriteLock::write) give the two sides, each with `lock`, `try_lock` and
/// `try_lock_with`.
///
/// - **Owners and reentrancy**: holds belong to an [`Owner`], as for [`Lock`](crate::Lock) (the
///   current task by default, or [`with_owner`](ReadWriteLock::with_owner)); both sides are
///   reentrant per owner.
/// - **Downgrade**: the writer may take the read lock too; after it releases the write lock it
///   is a reader like the others.
/// - **No upgrade**: an owner that reads and asks for the write lock gets
///   [`Error::WouldDeadlock`] at once (two readers upgrading would wait for each other forever).
/// - **Leases per hold**: every reader's hold has its own deadline on the server's clock, so a
///   reader whose lease ran out (a crashed process) stops counting at once, whatever the other
///   readers do. Without an explicit lease the client's watchdog renews each guard's hold
///   every third of the client's watchdog lease while it lives, and [`lost`](ReadGuard::lost) resolves if a
///   renewal finds it gone. The deadlines are fields of the lock's hash, checked by the script
///   (`TIME`), the same on every server version: per-field expiry (`HPEXPIRE`, Redis 7.4 and
///   Valkey 9) is not used, as it would add a second script path (and, on Valkey 9.0, a
///   replication fault) for what the deadlines already give; the client picks nothing at
///   connect.
/// - **Writers are not starved**: a writer that waits keeps *new* readers out (re-entries and
///   the writer's own downgrade still pass) until it gets the lock or stops waiting; a writer
///   that crashed while waiting holds readers up for 3 s at most. A steady stream of writers
///   can in turn keep readers waiting.
/// - **Waking**: a write release wakes the waiting readers and writers; a read release wakes
///   them when it was the last reader. Each waiter also looks again when the lease it waits
///   for runs out (a writer waiting for readers looks again at each reader's deadline, so it
///   gets the lock just after the last reader's lease), and at least once a second.
/// - **Turns within one client**: a write release hands over at once to a waiting writer of
///   the same client, or else to all its waiting readers, and the last of its shared read
///   holds out hands over to a waiting writer: the woken waiters' attempts go out in the same
///   script call as the release (no message is published when a writer took the lock in
///   it). A writer that arrives behind a writer of another owner of the client, still asking
///   or waiting, queues up behind it instead of asking the server (that writer's intent
///   already keeps new readers out); a writer that arrives while the client's own shared read
///   holds have the lock waits for their hand-over instead, so readers of other clients may
///   still come in until this client's readers are out, and its intent holds them back from
///   then on. (A waiter that has to subscribe to the lock's channel first asks once right
///   after, as every waiter does, lest a release slipped in before it listened.) Readers of a
///   client wait without asking while a writer of that client waits (for 3 s at most after
///   that writer last asked, as its intent on the server would).
/// - **Shared read holds**: one client's concurrent readers without an explicit lease share
///   one hold on the server (field `<client id>:readers-<n>`): the first asks, the others join
///   it without a round trip, each guard still releases only its own place, and the last one
///   out frees the lock. A share admits new readers for 5 ms after its grant (then only
///   re-entries); a writer of the same client closes it at once, so a writer of another
///   client waits at most those 5 ms longer than for separate holds. A share that had several
///   readers at once stays, empty, until its 5 ms end; one that only ever had one reader goes
///   with that reader's unlock. Members share the lease and its renewal, so a lost share is
///   lost for each of them. Readers with a fixed lease, and an owner that holds the write
///   lock, hold in their own name.
/// - **Cost**: one client's concurrent calls go out together as one script call, and a call
///   reads a dozen fields of the lock whatever the number of readers (the whole hash only when
///   some deadline may have passed). `make bench` F2 measures 64 tasks on one lock.
///
/// ```no_run
/// # async fn demo(client: redlease::Client) -> redlease::Result<()> {
/// let prices = client.read_write_lock("prices")?;
/// let reading = prices.read().lock().await?;
/// // ... any number of readers, no writer ...
/// reading.unlock().await?;
/// let writing = prices.write().lock().await?;
/// // ... alone ...
/// writing.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ReadWriteLock {
    pub(crate) client: Client,
    pub(crate) keys: Arc<FamilyKeys>,
    /// This client's waiters of the lock, for local hand-over (`rwlock_local.rs`), and its
    /// shared read holds (`rwlock_share.rs`).
    pub(crate) local: Arc<LocalTurns>,
    owner: Option<Owner>,
}

/// The read side of a [`ReadWriteLock`].
#[derive(Clone, Debug)]
pub struct ReadLock(Side);

/// The write side of a [`ReadWriteLock`].
#[derive(Clone, Debug)]
pub struct WriteLock(Side);

/// A hold as a release or renewal sees it: an owner's own, of either side, or this client's
/// shared read hold (`rwlock_share.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Hold {
    Own(Kind),
    Share,
}

impl Hold {
    /// The side it holds.
    pub(crate) fn kind(self) -> Kind {
        match self {
            Hold::Own(kind) => kind,
            Hold::Share => Kind::Read,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Read,
    Write,
}

impl Kind {
    /// How this side's local waiters take turns: a granted reader lets the next readers try
    /// (they are likely to get in too); a granted writer leaves nothing for the other writers.
    fn wake(self) -> Wake {
        match self {
            Kind::Read => Wake::relay(0, 2),
            Kind::Write => Wake::relay(1, 0),
        }
    }

    /// This side's relay class.
    pub(crate) fn class(self) -> usize {
        self.wake().class()
    }

    pub(crate) fn ops(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Kind::Read => ("read", "unread", "renew_read"),
            Kind::Write => ("write", "unwrite", "renew_write"),
        }
    }
}

#[derive(Clone)]
struct Side {
    lock: ReadWriteLock,
    kind: Kind,
}

impl std::fmt::Debug for Side {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Side")
            .field("name", &self.lock.keys.name)
            .field("kind", &self.kind)
            .finish()
    }
}

impl ReadWriteLock {
    pub(crate) fn new(client: Client, name: &str) -> Result<ReadWriteLock> {
        let keys = FamilyKeys::new(&client, name, "rw", "unlock")?;
        Ok(ReadWriteLock {
            local: client.inner.local_states.of::<LocalTurns>(&keys.key),
            client,
            keys: Arc::new(keys),
            owner: None,
        })
    }

    /// This handle acquires for `owner` (from any task) instead of the current task.
    pub fn with_owner(mut self, owner: Owner) -> Self {
        self.owner = Some(owner);
        self
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.keys.name
    }

    /// The Redis hash holding the lock's holders.
    pub fn key(&self) -> &str {
        &self.keys.key
    }

    /// The read side.
    pub fn read(&self) -> ReadLock {
        ReadLock(Side {
            lock: self.clone(),
            kind: Kind::Read,
        })
    }

    /// The write side.
    pub fn write(&self) -> WriteLock {
        WriteLock(Side {
            lock: self.clone(),
            kind: Kind::Write,
        })
    }

    fn field(&self) -> Arc<str> {
        let owner = self.owner.unwrap_or_else(Owner::current);
        owner.field(&self.client.inner.id_text)
    }

    /// Runs one operation of `lua/rwlock.lua` for `field`.
    pub(crate) async fn call(&self, op: &str, field: &str, lease_ms: u64) -> Result<i64> {
        self.call_with_intent(op, field, lease_ms, 0).await
    }

    /// [`call`](Self::call) for a writer that will wait: a refusal leaves its intent for
    /// `intent_ms`.
    async fn call_with_intent(
        &self,
        op: &str,
        field: &str,
        lease_ms: u64,
        intent_ms: u64,
    ) -> Result<i64> {
        self.client.inner.check_open()?;
        self.request(op, field, lease_ms, intent_ms, None::<fn()>)
            .await
    }

    /// Gives back one `hold` of `field` (`checked`: refused once the client shuts down; a
    /// guard's own release is not): `false` when the owner held nothing of that kind. As soon
    /// as the release is queued, it wakes the local waiters it is likely to let in
    /// (`rwlock_local.rs`).
    pub(crate) async fn release(&self, hold: Hold, field: &str, checked: bool) -> Result<bool> {
        Ok(self.release_then(hold, field, checked, false).await? >= 0)
    }

    /// [`release`](Self::release); with `rider`, the calling task's next call rides behind it
    /// in the same script call even when it wakes nobody.
    async fn release_then(
        &self,
        hold: Hold,
        field: &str,
        checked: bool,
        rider: bool,
    ) -> Result<i64> {
        if checked {
            self.client.inner.check_open()?;
        }
        let whom = self.local.to_wake(hold);
        let wake = (whom.is_some() || rider).then_some(move || {
            if let Some(whom) = whom {
                let (subscriber, channel) = (&self.client.inner.subscriber, &self.keys.channel);
                LocalTurns::wake(subscriber, channel, whom);
            }
        });
        self.request(hold.kind().ops().1, field, 0, 0, wake).await
    }

    /// Gives back `share`, which nobody is in any more: queued at once (`rider`: the calling
    /// task's next call rides behind it, as a writer asking right after does), then finished
    /// in the background whatever becomes of the caller. Outside a runtime the share ends with
    /// its lease.
    pub(crate) fn give_back(&self, share: Arc<Share>, rider: bool) {
        if tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        let lock = self.clone();
        let release = async move {
            if let Err(e) = lock
                .release_then(Hold::Share, &share.field, false, rider)
                .await
            {
                tracing::debug!(lock = %lock.keys.name, error = %e, "release of a shared read hold failed; it expires with its lease");
            }
        };
        let background = &self.client.inner.background;
        // One poll queues it; dropped unfinished, it finishes in the background.
        let queued = FinishOnDrop::new(release, |()| async {}).tracked(background);
        let _ = queued.now_or_never();
    }

    /// One operation of `lua/rwlock.lua` for `field`, whether or not the client shuts down;
    /// `wake` runs once the request is queued, and the calls of the tasks it wakes ride behind
    /// it (`Node::family_call_then`).
    async fn request(
        &self,
        op: &str,
        field: &str,
        lease_ms: u64,
        intent_ms: u64,
        wake: Option<impl FnOnce()>,
    ) -> Result<i64> {
        let lease = itoa::Buffer::new().format(lease_ms).to_owned();
        let intent = itoa::Buffer::new().format(intent_ms).to_owned();
        let keys = [&*self.keys.key, &*self.keys.channel];
        let args = [op, field, &lease, &intent];
        let node = &self.client.inner.node;
        node.family_call_then(&SCRIPT, &keys, &args, wake).await
    }
}

macro_rules! side_methods {
    ($side:ident, $guard:ident, $what:literal) => {
        impl $side {
            crate::scope::ways_to_ask!(
                $guard,
                name,
                [lock, lock_with, try_lock, try_lock_with]
                #[doc = concat!("Takes the ", $what, " lock, waiting as long as it takes; the guard renews its lease while it lives.")]
                ///
                /// # Errors
                /// Redis failures, a key of another kind, [`Error::Shutdown`]; for the write lock,
                /// [`Error::WouldDeadlock`] when this owner holds the read lock but not the write lock.
                ///
                /// # Cancel safety
                /// Cancel-safe: dropped while waiting it leaves nothing (a waiting writer's intent is
                /// withdrawn); dropped while its request is on the wire, a grant that arrives is given
                /// back in the background.
            );

            #[doc = concat!("Takes the ", $what, " lock on `options`' terms: wait at most `wait`, hold at most `lease` (no renewal); `None` when the wait ran out (a zero wait: when it is not free for this owner now).")]
            ///
            /// # Errors
            /// As [`lock`](Self::lock), [`Error::InvalidDuration`] for a zero or absurd lease or
            /// wait, and [`Error::InvalidArgument`] for permits other than one.
            ///
            /// # Cancel safety
            /// As [`lock`](Self::lock).
            pub async fn try_lock_with(&self, options: LockOptions) -> Result<Option<$guard>> {
                Ok(self.0.acquire(options).await?.map($guard))
            }

            /// The lock's name.
            pub fn name(&self) -> &str {
                &self.0.lock.keys.name
            }
        }
    };
}

side_methods!(ReadLock, ReadGuard, "read");
side_methods!(WriteLock, WriteGuard, "write");
