//! What the server says about a lock, read without taking it: whether and how long it is held,
//! by whom, and who waits ([`Lock::status`]).

use std::time::Duration;

use super::Lock;
use crate::error::Result;

impl Lock {
    /// Whether anybody holds the lock.
    ///
    /// # Errors
    /// [`Error::WrongType`](crate::Error::WrongType), [`Error::Timeout`](crate::Error::Timeout) or [`Error::Redis`](crate::Error::Redis).
    pub async fn is_locked(&self) -> Result<bool> {
        Ok(!self.snapshot().await?.owners.is_empty())
    }

    /// How many holds the current owner has on the server (0 when it holds none).
    ///
    /// # Errors
    /// As [`Lock::is_locked`].
    pub async fn hold_count(&self) -> Result<u32> {
        self.client.inner.check_open()?;
        self.client
            .inner
            .node
            .hold_count(&self.keys, &self.field())
            .await
    }

    /// Whether the current owner holds the lock.
    ///
    /// # Errors
    /// As [`Lock::is_locked`].
    pub async fn is_held_by_current_owner(&self) -> Result<bool> {
        Ok(self.hold_count().await? > 0)
    }

    /// The holder's remaining lease, or that the lock is free, or held without expiry (someone
    /// removed the expiry by hand).
    ///
    /// # Errors
    /// As [`Lock::is_locked`].
    pub async fn remaining_lease(&self) -> Result<RemainingLease> {
        let snapshot = self.snapshot().await?;
        Ok(match snapshot.ttl {
            _ if snapshot.owners.is_empty() => RemainingLease::Free,
            Some(ttl) => RemainingLease::Expires(ttl),
            None => RemainingLease::Persistent,
        })
    }

    pub(crate) async fn snapshot(&self) -> Result<crate::node::Snapshot> {
        self.client.inner.check_open()?;
        self.client.inner.node.snapshot(&self.keys).await
    }

    /// The server's view: owner fields with hold counts, remaining lease, fencing counter.
    ///
    /// # Errors
    /// As [`Lock::is_locked`].
    ///
    /// Also counts the clients waiting for the lock. Each holder is named by the process behind it ([`Holder::client`]: host, pid, program)
    /// when its client announced itself (every client does, while its watchdog runs); that
    /// costs one more round trip when the lock is held.
    pub async fn status(&self) -> Result<LockStatus> {
        let snap = self.snapshot().await?;
        let inner = &self.client.inner;
        let mut ids: Vec<&str> = snap
            .owners
            .iter()
            .map(|(field, _)| crate::identity::client_of(field))
            .collect();
        ids.sort_unstable();
        ids.dedup();
        let channel = self.keys.channel_name();
        let (infos, listening) = futures_util::future::try_join(
            crate::identity::lookup(&inner.node, &inner.config.prefix, &ids),
            inner.node.listeners(&channel),
        )
        .await?;
        let holders = snap
            .owners
            .iter()
            .map(|(field, holds)| {
                let id = crate::identity::client_of(field);
                let client = ids
                    .iter()
                    .position(|known| *known == id)
                    .and_then(|i| infos.get(i).cloned().flatten());
                Holder {
                    field: field.clone(),
                    holds: *holds,
                    client,
                }
            })
            .collect();
        // Waiters of a `Lock` are queued (and listen on their own client's grant channel);
        // others (MultiLock members) listen on the lock's channel.
        let mut queued: Vec<&str> = snap
            .queued
            .iter()
            .map(|field| crate::identity::client_of(field))
            .collect();
        queued.sort_unstable();
        queued.dedup();
        Ok(LockStatus {
            holders,
            listening_clients: listening + queued.len() as u64,
            owners: snap.owners,
            remaining_lease: snap.ttl,
            fence: snap.fence,
        })
    }
}

/// The server's view of a lock, from [`Lock::status`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockStatus {
    /// Owner fields (`<client uuid>:<owner>`) and their hold counts; empty when free.
    pub owners: Vec<(String, u64)>,
    /// The same owners, each with the process behind it when known.
    pub holders: Vec<Holder>,
    /// Clients waiting for this lock: queued on the server (a `Lock` waiter), or listening for
    /// its release (a MultiLock member), counted once however many of their tasks wait.
    pub listening_clients: u64,
    /// Remaining lease; `None` when free or without expiry.
    pub remaining_lease: Option<Duration>,
    /// The fencing counter (the last token handed out), when the lock is fenced.
    pub fence: Option<u64>,
}

impl LockStatus {
    /// Whether somebody held the lock when it was read (it has at least one owner).
    pub fn is_held(&self) -> bool {
        !self.owners.is_empty()
    }
}

/// One owner of a lock, from [`LockStatus::holders`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// The owner field, `<client uuid>:<owner>`.
    pub field: String,
    /// Its hold count.
    pub holds: u64,
    /// The process behind the client, if it announced itself and is still alive.
    pub client: Option<crate::identity::ClientInfo>,
}

/// The lease left on a lock, from [`Lock::remaining_lease`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemainingLease {
    /// Nobody holds the lock.
    Free,
    /// Held; the lease runs out after this long unless renewed.
    Expires(Duration),
    /// Held with no expiry: somebody removed it by hand (`PERSIST`). It stays until released
    /// or force-unlocked.
    Persistent,
}

impl RemainingLease {
    /// The time left, when the lock is held with an expiry.
    pub fn duration(self) -> Option<Duration> {
        match self {
            RemainingLease::Expires(left) => Some(left),
            RemainingLease::Free | RemainingLease::Persistent => None,
        }
    }

    /// Whether somebody holds the lock.
    pub fn is_held(self) -> bool {
        !matches!(self, RemainingLease::Free)
    }
}
