//! What is done with a lock without a guard: what the server says about it, read without
//! taking it (whether and how long it is held, by whom, and who waits: [`Lock::status`]), and
//! the writes for operators and for code that gave its guard up ([`Lock::force_unlock`],
//! [`Lock::unlock`]).

use std::time::Duration;

use super::Lock;
use crate::error::{Error, Result};
use crate::hold::LocalRelease;
use crate::identity::{Announcement, ClientInfo};
use crate::keys::HoldKey;
use crate::node::QueueView;
use crate::scripts::Release;
use crate::shared::Client;

impl Lock {
    /// Whether anybody holds the lock.
    ///
    /// # Errors
    /// [`Error::WrongType`](crate::Error::WrongType), [`Error::Timeout`](crate::Error::Timeout) or [`Error::Redis`](crate::Error::Redis).
    ///
    /// # Cancel safety
    /// Cancel-safe: it only reads.
    pub async fn is_locked(&self) -> Result<bool> {
        Ok(!self.snapshot().await?.owners.is_empty())
    }

    /// How many holds the current owner has on the server (0 when it holds none).
    ///
    /// # Errors
    /// As [`Lock::is_locked`].
    ///
    /// # Cancel safety
    /// Cancel-safe: it only reads.
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
    ///
    /// # Cancel safety
    /// Cancel-safe: it only reads.
    pub async fn is_held_by_current_owner(&self) -> Result<bool> {
        Ok(self.hold_count().await? > 0)
    }

    /// The holder's remaining lease, or that the lock is free, or held without expiry (someone
    /// removed the expiry by hand).
    ///
    /// # Errors
    /// As [`Lock::is_locked`].
    ///
    /// # Cancel safety
    /// Cancel-safe: it only reads.
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

    /// The server's view: owner fields with hold counts, remaining lease, fencing counter,
    /// and who waits ([`LockStatus::waiters`], as [`Lock::waiters`] reads them).
    ///
    /// Also counts the clients waiting for the lock. Each holder and waiter is named by the
    /// process behind it ([`Holder::client`], [`Waiter::client`]: host, pid, program) when its
    /// client announced itself (every client does, while its watchdog runs), and each holder
    /// carries its [`metadata`](crate::LockOptions::metadata); that costs one more round trip
    /// when the lock is held or waited for.
    ///
    /// # Errors
    /// As [`Lock::is_locked`].
    ///
    /// # Cancel safety
    /// Cancel-safe: it only reads.
    pub async fn status(&self) -> Result<LockStatus> {
        self.client.inner.check_open()?;
        let inner = &self.client.inner;
        let (snap, queue) = futures_util::future::try_join(
            inner.node.snapshot(&self.keys),
            inner.node.read_queue(&self.keys.hash),
        )
        .await?;
        let fields = snap.owners.iter().map(|(field, _)| field.as_str());
        let fields = fields.chain(queue.entries.iter().map(|e| e.name.as_str()));
        let announced = Announced::look_up(&self.client, fields).await?;
        let holders = snap
            .owners
            .iter()
            .map(|(field, holds)| {
                let found = announced.of(field);
                Holder {
                    field: field.clone(),
                    holds: *holds,
                    client: found.and_then(|a| a.info.clone()),
                    metadata: found.and_then(|a| a.metadata(&self.keys.hash, field)),
                }
            })
            .collect();
        let waiters = waiters_of(&queue, false, |field| announced.info(field));
        // Every waiter of a lock is queued (a MultiLock's members too), one per client.
        let mut queued: Vec<&str> = snap
            .queued
            .iter()
            .map(|field| crate::identity::client_of(field))
            .collect();
        queued.sort_unstable();
        queued.dedup();
        Ok(LockStatus {
            holders,
            waiters,
            listening_clients: queued.len() as u64,
            owners: snap.owners,
            remaining_lease: snap.ttl,
            fence: snap.fence,
        })
    }

    /// Who waits for the lock in its queue on the server, first to be served first: each
    /// waiter's owner, place, how long it has waited and the process behind it. Reading
    /// changes nothing: one script call that only reads (the queue, its entries and the
    /// server's clock, at one instant), then the waiters' announcements; no waiter moves, no
    /// entry is dropped, no grant is made or delayed.
    ///
    /// For a plain `Lock`, one waiter per client and lock: a client's tasks that wait for the
    /// same lock line up in the client, and only the first of them waits in the server's queue
    /// (the next one takes its place when it is served). It takes its place at its second
    /// attempt (the first refused one subscribes; its next attempt queues), or at its first
    /// while the client still listens on the lock's channel from a recent wait. A
    /// [`FairLock`](crate::FairLock)'s waiters each take a place of their own, at their first
    /// attempt, tasks of one client included. A MultiLock waiting for a member waits in that
    /// member's queue like any waiter. A waiter whose client stopped asking (it crashed) is
    /// listed until its place lives out ([`Waiter::place_expires_in`]). At most 1,000 waiters
    /// are read, from the head.
    ///
    /// ```no_run
    /// # async fn demo(client: redlease::Client) -> redlease::Result<()> {
    /// let lock = client.lock("reports")?;
    /// for waiter in lock.waiters().await? {
    ///     let who = waiter
    ///         .client
    ///         .as_ref()
    ///         .map_or(waiter.field.clone(), |c| format!("{}:{} {}", c.host, c.pid, c.program));
    ///     println!("{}. {who}, waiting {:?}", waiter.position, waiter.waited);
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`Lock::is_locked`].
    ///
    /// # Cancel safety
    /// Cancel-safe: it only reads.
    pub async fn waiters(&self) -> Result<Vec<Waiter>> {
        read_waiters(&self.client, &self.keys.hash, false).await
    }

    /// Deletes the lock whoever holds it and wakes its waiters; `true` if it was held. For
    /// operators: a holder in another process finds out at its next renewal (its guard is
    /// then lost); this client's own guards of the lock are lost at once.
    ///
    /// # Errors
    /// As [`Lock::is_locked`].
    ///
    /// # Cancel safety
    /// Dropping the future may leave the lock forced on the server; this client's own
    /// guards of it then learn so from the loss notice or their next renewal.
    pub async fn force_unlock(&self) -> Result<bool> {
        let inner = &self.client.inner;
        inner.check_open()?;
        // Taken before the force: a hold granted after it is not the one forced.
        let ours = inner.holds.of_lock(&self.keys.hash);
        let forced = inner.node.force_release(&self.keys).await?;
        for hold in ours {
            if inner.holds.detach(&hold) {
                let why = "force_unlock through this client";
                hold.mark_lost(crate::telemetry::LostReason::Forced, why);
            }
        }
        Ok(forced)
    }

    /// Gives back one hold of the current owner without a guard, like Redisson's `unlock()`.
    ///
    /// Prefer [`LockGuard::unlock`](crate::LockGuard::unlock); this is for code that gave up its guard (for example with
    /// `std::mem::forget`). Releasing a hold whose guard is still alive makes that guard's later
    /// release fail, and the guard is told ([`LockGuard::is_lost`](crate::LockGuard::is_lost))
    /// as soon as it holds nothing: at once, or, with several guards of the hold alive, when
    /// the others are released.
    ///
    /// # Errors
    /// [`Error::NotHeld`] when the current owner holds nothing (the holder is untouched), or a
    /// Redis error.
    ///
    /// # Cancel safety
    /// Dropping the future still completes the release in the background.
    pub async fn unlock(&self) -> Result<()> {
        let inner = &self.client.inner;
        inner.check_open()?;
        let field = self.field();
        // The lease a hold of ours was taken with, else this lock's watchdog lease.
        let mut lease_ms = self.watchdog()?.ms();
        if let Some(hold) = inner.holds.get(&HoldKey::new(&self.keys.hash, &field)) {
            lease_ms = hold.lease_ms();
            // The last hold: a guard of it that lives on holds nothing any more. Not the last:
            // one of its guards will hold nothing after the others' releases, and is told then
            // (noted by the registry).
            if inner.holds.release_by_name(&hold) == LocalRelease::Last {
                hold.mark_released_by_name();
            }
        }
        match crate::release::give_back(&self.client, &self.keys, &field, lease_ms, 1).await? {
            Release::NotHeld => Err(Error::NotHeld {
                name: self.keys.name.to_string(),
            }),
            // No successor is named here, so nothing is handed over.
            Release::Released | Release::StillHeld(_) | Release::HandedOver { .. } => Ok(()),
        }
    }
}

/// The waiters of the queue of the object whose key is `key` ([`Lock::waiters`] and the
/// family's): `by_wait` when its names are `<owner field>#<wait id>` (the read-write lock).
pub(crate) async fn read_waiters(client: &Client, key: &str, by_wait: bool) -> Result<Vec<Waiter>> {
    let inner = &client.inner;
    inner.check_open()?;
    let queue = inner.node.read_queue(key).await?;
    let fields = queue.entries.iter().map(|e| e.name.as_str());
    let announced = Announced::look_up(client, fields).await?;
    Ok(waiters_of(&queue, by_wait, |field| announced.info(field)))
}

/// The announcements of the clients behind some owner fields, each client looked up once.
struct Announced<'a> {
    /// The clients, sorted.
    ids: Vec<&'a str>,
    /// Their announcements, in the same order.
    found: Vec<Announcement>,
}

impl<'a> Announced<'a> {
    async fn look_up(client: &Client, fields: impl Iterator<Item = &'a str>) -> Result<Self> {
        let inner = &client.inner;
        let mut ids: Vec<&str> = fields.map(crate::identity::client_of).collect();
        ids.sort_unstable();
        ids.dedup();
        let found = crate::identity::lookup(&inner.node, &inner.config.prefix, &ids).await?;
        Ok(Announced { ids, found })
    }

    /// The announcement of the client behind `field`, if it has one.
    fn of(&self, field: &str) -> Option<&Announcement> {
        let id = crate::identity::client_of(field);
        let at = self.ids.binary_search(&id).ok()?;
        self.found.get(at)
    }

    /// The process behind `field`'s client, if it announced itself.
    fn info(&self, field: &str) -> Option<ClientInfo> {
        self.of(field)?.info.clone()
    }
}

/// The queue's entries as [`Waiter`]s, `client` naming the process behind an owner field.
fn waiters_of(
    queue: &QueueView,
    by_wait: bool,
    client: impl Fn(&str) -> Option<ClientInfo>,
) -> Vec<Waiter> {
    let since = |ms: u64| Duration::from_millis(queue.now_ms.saturating_sub(ms));
    queue
        .entries
        .iter()
        .enumerate()
        .map(|(i, entry)| {
            let field = match entry.name.rsplit_once('#') {
                Some((field, _)) if by_wait => field,
                _ => entry.name.as_str(),
            };
            Waiter {
                position: i + 1,
                field: field.to_owned(),
                waited: entry.listed_ms.map(since),
                place_expires_in: Duration::from_millis(
                    entry.deadline_ms.saturating_sub(queue.now_ms),
                ),
                client: client(field),
            }
        })
        .collect()
}

/// The server's view of a lock, from [`Lock::status`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockStatus {
    /// Owner fields (`<client uuid>:<owner>`) and their hold counts; empty when free.
    pub owners: Vec<(String, u64)>,
    /// The same owners, each with the process behind it when known.
    pub holders: Vec<Holder>,
    /// The waiters in the lock's queue on the server, first to be served first (see
    /// [`Lock::waiters`]).
    pub waiters: Vec<Waiter>,
    /// Clients waiting for this lock in its queue on the server, counted once however many of
    /// their tasks wait.
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
    /// What the holder said about its hold ([`LockOptions::metadata`](crate::LockOptions::metadata)),
    /// if it said something and its client is still alive.
    pub metadata: Option<String>,
}

/// One waiter in a queue on the server, from [`Lock::waiters`] (and the other kinds' `waiters`)
/// and [`LockStatus::waiters`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Waiter {
    /// Its place: 1 is served next, when what it waits for is free.
    pub position: usize,
    /// The owner it waits for, `<client uuid>:<owner>` (as [`Holder::field`]); a
    /// [`Semaphore`](crate::Semaphore)'s waiter has no owner: its wait, `<client uuid>:w<n>`.
    pub field: String,
    /// How long it has waited in the queue (since it took its place, on the server's clock);
    /// `None` when its place was taken by a redlease version that did not record when.
    pub waited: Option<Duration>,
    /// How long its place lives if its client stops asking (a lock's waiter: the holder's
    /// remaining lease and a margin, set again by each of its attempts, which a live waiter
    /// makes before then); the place of a waiter that crashed goes when this runs out.
    pub place_expires_in: Duration,
    /// The process behind its client, if it announced itself and is still alive.
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
