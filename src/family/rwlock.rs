//! [`ReadWriteLock`]: many readers or one writer, each hold with its own lease.

use std::sync::Arc;

use futures_util::FutureExt;
use redis::Value;

#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::family::queued;
use crate::family::rwlock_guard::{ReadGuard, WriteGuard};
use crate::family::rwlock_share::{ReadShares, Share};
use crate::family::{FamilyKeys, Reply};
use crate::node::FamilyScript;
use crate::options::LockOptions;
use crate::owner::Owner;
use crate::shared::Client;
use crate::task::{FinishOnDrop, spawn_from_drop};

mod acquire;

pub(crate) use acquire::Asking;

pub(crate) static SCRIPT: FamilyScript = FamilyScript::batching(
    "rwlock",
    concat!(
        include_str!("../../lua/queue.lua"),
        include_str!("../../lua/queue_permits.lua"),
        include_str!("../../lua/rwlock.lua")
    ),
);

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
/// - **First come, first served, whatever the process**: a reader or writer that finds the
///   lock taken, or others waiting before it, takes its place in a queue on the server. A
///   release that frees the lock grants it in the same call to the queue's head: the first
///   readers together, or one writer. So a waiting writer keeps new readers out, and a steady
///   stream of writers cannot keep a reader waiting either. Re-entries and the writer's own
///   downgrade never queue. A single attempt (`try_lock`) is never queued and never passes
///   anybody queued.
/// - **Waking**: a grant to a waiter of another process is told to that process alone, with
///   one message, and the grantee claims it with its next call. A waiter of the releasing
///   process is handed the lock outright, named in the release's reply (no message, no
///   claim). A grantee whose process died holds the lock for the claim lease at most
///   ([`Config::claim_lease`](crate::Config::claim_lease)); a waiter that stops waiting leaves
///   the queue at once (its place also ends a few seconds after its last attempt, should its
///   process die). A waiter also looks again when the lease it waits for runs out, and at
///   least once a second.
/// - **Shared read holds**: one client's concurrent readers without an explicit lease share
///   one hold on the server (field `<client id>:readers-<n>`): the first asks, the others that
///   come while it asks wait for the same grant without a call of their own, each guard still
///   releases only its own place, and the last one out frees the lock. A share admits the
///   readers that waited for its grant (then only their re-entries); later readers ask for
///   the next share, in the queue behind whoever came meanwhile. Members share the lease and
///   its renewal, so a lost share is lost for each of them. Readers with a fixed lease, and an
///   owner that holds the write lock, hold in their own name.
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
    /// This client's shared read holds of the lock (`rwlock_share.rs`).
    pub(crate) shares: Arc<ReadShares>,
    /// The channel on which the script tells this client's waiters of their grants.
    grants: Arc<str>,
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
            shares: client.inner.local_states.of::<ReadShares>(&keys.key),
            grants: queued::grant_channel(&client, &keys.channel),
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

    /// Who waits in its queue on the server, first to be served first, read without changing
    /// anything: as [`Lock::waiters`](crate::Lock::waiters), readers and writers in one queue.
    ///
    /// # Errors
    /// [`Error::WrongType`](crate::Error::WrongType), [`Error::Timeout`](crate::Error::Timeout)
    /// or [`Error::Redis`](crate::Error::Redis).
    ///
    /// # Cancel safety
    /// Cancel-safe: it only reads.
    pub async fn waiters(&self) -> Result<Vec<crate::lock::Waiter>> {
        crate::lock::read_waiters(&self.client, &self.keys.key, true).await
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

    /// Runs one operation of `lua/rwlock.lua` for `field` that answers an integer (a renewal).
    pub(crate) async fn call(&self, op: &str, field: &str, lease_ms: u64) -> Result<Reply> {
        self.client.inner.check_open()?;
        let lease = itoa::Buffer::new().format(lease_ms).to_owned();
        let n = self.request(&[op, field, &lease, "0", "0", "", ""]).await?;
        Ok(Reply::new(SCRIPT.name, n))
    }

    /// Gives back one `hold` of `field` (`checked`: refused once the client shuts down; a
    /// guard's own release is not): `false` when the owner held nothing of that kind. Waiters
    /// of this client the release granted the lock to are woken from its reply.
    pub(crate) async fn release(&self, hold: Hold, field: &str, checked: bool) -> Result<bool> {
        if checked {
            self.client.inner.check_open()?;
        }
        let op = hold.kind().ops().1;
        let hand_over = queued::hand_over_arg(&self.client, Some(&self.shares.handed));
        let reply = self
            .request(&[op, field, "0", "0", "0", "", &hand_over])
            .await?;
        Ok(self.resolve_handed(reply)?.holds_left()?.is_some())
    }

    /// Takes `waiter` (of owner `field`) out of the queue; a grant to the owner that it has
    /// not claimed goes to the next, and a hold a release of this client handed the waiter
    /// and it did not take is given back.
    pub(crate) async fn withdraw(self, waiter: Arc<str>, field: Arc<str>) {
        let withdraw = || async {
            let hand_over = queued::hand_over_arg(&self.client, Some(&self.shares.handed));
            let args = ["withdraw", &field, "0", "0", "0", &waiter, &hand_over];
            let reply = self.request(&args).await?;
            self.resolve_handed(reply)?.flag()
        };
        queued::withdraw_retrying(&self.client, &self.keys.name, withdraw).await;
    }

    /// The integer of a reply that may name waiters of this client handed the lock, who are
    /// woken.
    fn resolve_handed(&self, reply: Value) -> Result<Reply> {
        queued::resolve_handed(&self.client, &self.grants, SCRIPT.name, reply)
    }

    /// Gives back `share`, which nobody is in any more: queued at once, then finished in the
    /// background whatever becomes of the caller. Outside a runtime (a plain thread) it is
    /// spawned on the client's.
    pub(crate) fn give_back(&self, share: Arc<Share>) {
        share.kept.closing();
        let lock = self.clone();
        let release = async move {
            if let Err(e) = lock.release(Hold::Share, &share.field, false).await {
                tracing::debug!(lock = %lock.keys.name, error = %e, "release of a shared read hold failed; it expires with its lease");
            }
        };
        let background = &self.client.inner.background;
        if tokio::runtime::Handle::try_current().is_err() {
            return spawn_from_drop(background, release);
        }
        // One poll queues it; dropped unfinished, it finishes in the background.
        let queued = FinishOnDrop::new(release, |()| async {}).tracked(background);
        let _ = queued.now_or_never();
    }

    /// One operation of `lua/rwlock.lua` with `args` (operation, owner field, lease, place
    /// life, claim lease, waiter, hand-over), whether or not the client shuts down.
    async fn request<T: redis::FromRedisValue>(&self, args: &[&str; 7]) -> Result<T> {
        let keys = [&*self.keys.key, &*self.keys.channel];
        self.client
            .inner
            .node
            .family_call(&SCRIPT, &keys, args)
            .await
    }
}

macro_rules! side_methods {
    ($side:ident, $guard:ident, $what:literal) => {
        impl $side {
            crate::options::ways_to_ask!(
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
                /// Cancel-safe: dropped while waiting it leaves nothing (its place in the queue is
                /// withdrawn, and a grant it has not claimed goes to the next waiter); dropped while
                /// its request is on the wire (or answered after the client's timeout), a grant that
                /// arrives within the hold's lease is given back in the background.
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
