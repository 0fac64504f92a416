//! # redlease
//!
//! Reentrant distributed locks on Redis, in the style of Redisson's `RLock`: a lock is a Redis
//! hash whose field `<client uuid>:<owner>` counts the owner's holds; acquire, release and
//! renewal are Lua scripts (`lua/`), so each is one atomic round trip.
//!
//! ```no_run
//! # async fn demo() -> redlease::Result<()> {
//! use std::time::Duration;
//! use redlease::LockOptions;
//!
//! let client = redlease::Client::connect("redis://127.0.0.1:6379").await?;
//! let lock = client.lock("orders:42")?;
//!
//! // Run a body under the lock: waits as long as it takes, the watchdog renews the 30 s lease
//! // while the body runs, the lock goes when it ends. The body is its own owner, so this is
//! // safe inside `join!` and `for_each_concurrent` too.
//! let total = lock.run(|_held| async { /* critical section */ 42 }).await?;
//!
//! // Or: wait at most 200 ms, hold at most 5 s, no renewal; `None` when busy.
//! let options = LockOptions::new().wait(Duration::from_millis(200)).lease(Duration::from_secs(5));
//! if lock.try_run(options, |_held| async { /* ... */ }).await?.is_none() {
//!     println!("busy");
//! }
//!
//! // Guards, for locks that outlive one block of code: unlock reports errors.
//! let guard = lock.lock().await?;
//! guard.unlock().await?;
//! client.shutdown().await?;
//! # let _ = total;
//! # Ok(()) }
//! ```
//!
//! ## Guides
//! The pages of the repository's `docs/`, here as modules of [`guide`]:
//! [kinds of lock in depth](guide::locks), [guarantees and failure modes](guide::guarantees),
//! [leader election](guide::election), [the `redlease` command](guide::cli),
//! [observability](guide::observability), [performance](guide::performance),
//! [internals](guide::internals), [`#[locked]`](guide::macros), [TLS](guide::tls),
//! [ACL users](guide::acl), [Sentinel](guide::sentinel), [replicas](guide::replicas).
//!
//! ## What you get
//! - [`Client`]: one connection, one watchdog task and one pub/sub connection shared by all
//!   its locks. [`blocking::Client`] is the same for synchronous code.
//! - [`Lock`]: [`run`](Lock::run) / [`try_run`](Lock::try_run) (a body under the lock, as its
//!   own owner), and one way to ask for a guard, the same on every kind: `lock()` (wait as long
//!   as it takes, watchdog lease), `try_lock()` (one attempt), and
//!   [`lock_with`](Lock::lock_with) / [`try_lock_with`](Lock::try_lock_with) taking
//!   [`LockOptions`] (`wait`, `lease`; `permits` for a semaphore); then `is_locked`,
//!   `hold_count`, `remaining_lease`, `force_unlock`.
//! - [`LockGuard`]: `unlock().await`, a non-blocking Drop fallback, [`LockGuard::lost`] (a
//!   future that resolves when the lease is lost), [`LockGuard::valid_until`] and
//!   [`LockGuard::fencing_token`].
//! - [`MultiLock`]: several locks held together (all or nothing), acquired concurrently.
//! - [`RedLock`]: one lock over N independent masters, held when a majority granted it with
//!   validity left (lease − elapsed − drift); nodes are contacted concurrently.
//!
//! | | [`MultiLock`] | [`RedLock`] |
//! |---|---|---|
//! | members | different resources, any clients | one resource, one lock per independent master |
//! | success | every member granted | `N/2 + 1` granted, with validity left |
//! | renewal | each client's watchdog | the guard's own task; a majority must confirm |
//! | lost when | any member is lost | fewer than a majority hold it, or validity runs out |
//!
//! ## Deployments
//! One Redis server (`redis://host:6379`), a Redis Cluster or Valkey cluster
//! (`redis+cluster://host1:6379,host2:6379`, or [`Client::builder_cluster`]), and independent
//! masters through [`RedLock`] (each member may itself be a cluster). The API is the same on all
//! of them. On a cluster each lock's keys share its `{name}` hash tag, so every script touches
//! one slot; waiters listen with sharded pub/sub; renewals and coalesced calls are grouped per
//! slot; locks go to primaries only. redis-rs drops a shard subscription when its slot moves or
//! fails over: redlease subscribes again by itself, and a waiter that misses a message still
//! wakes when the holder's remaining lease runs out.
//!
//! ## The rest of the family
//! - [`Semaphore`] ([`Client::semaphore`]): permits shared by every client; `acquire()`,
//!   `try_acquire()`, `acquire_with` / `try_acquire_with(LockOptions)` (`permits`, `wait`),
//!   `release(n)`, `available()`. Permits have no owner and no lease: a holder that crashes
//!   keeps its permits. Waiters queue on the server, first come first served across
//!   processes, and a release grants the first that fit (one message, to that waiter's client).
//! - [`PermitSemaphore`] ([`Client::permit_semaphore`]): each permit has an id and a lease
//!   (renewed while its [`Permit`] lives), so a crashed holder's permit comes back; asked for
//!   like a semaphore's, `acquire_with(LockOptions)` with a `wait` and a `lease`; its waiters
//!   queue as a semaphore's do.
//! - [`CountDownLatch`] ([`Client::count_down_latch`]): `try_set_count(n)`, `count_down()`,
//!   `count()`, `wait()`, `try_wait_with(LockOptions)` (a wait only).
//! - [`ReadWriteLock`] ([`Client::read_write_lock`]): `read()` and `write()` sides with `lock`,
//!   `try_lock`, `lock_with` and `try_lock_with(LockOptions)`; reentrant per owner, downgrade allowed,
//!   upgrade refused with [`Error::WouldDeadlock`], a lease per reader, and waiting writers
//!   keep new readers out so they are not starved.
//! - [`FairLock`] ([`Client::fair_lock`]): first come, first served across clients, newcomers
//!   included: a [`Lock`] in strict mode, on the same keys (`P:{N}` and its queue), whose every
//!   attempt respects the server's waiter queue; a release tells only the first waiter, and a
//!   crashed waiter holds the others up for the claim lease ([`Config::claim_lease`], 2 s) at
//!   most (one that asked for a fixed lease: for that lease, as a crashed holder does). Its
//!   guard is a [`LockGuard`] ([`FairGuard`] is an alias).
//! - [`Election`] ([`Client::election`]): leader election on a fenced lock, after etcd's
//!   `concurrency.Election` and client-go's `leaderelection`. [`Election::campaign`] waits to
//!   lead and returns a [`Leadership`] whose [`term`](Leadership::term) is its fencing token;
//!   `proclaim`, `resign` (hands over at once), `lost()`; [`Election::leader`];
//!   [`Election::observe`], a stream of every change; [`Election::lead`], a body run while
//!   leading and cancelled on loss ([`LeadOptions::rejoin`] campaigns again). See
//!   [`election`] and [the election guide](guide::election).
//! - [`Guard`]: one object-safe trait over [`LockGuard`] (a [`FairLock`]'s too), [`ReadGuard`],
//!   [`WriteGuard`] and [`Permit`].
//!
//! All wait on the client's one subscriber connection (no polling; at most a second between
//! looks when no message comes) and are cancel-safe.
//!
//! ## Leases and the watchdog
//! A lock taken without a lease is kept by the client's watchdog: its lease (30 s by default,
//! [`Config::watchdog_lease`]) is renewed every third of the lease, in batches of 200 locks
//! per round trip, while a guard lives. If the key is found gone (expired, deleted, the server
//! restarted without persistence), or Redis stays unreachable past the guard's
//! [`valid_until`](LockGuard::valid_until), the guard is *lost*: [`LockGuard::lost`] resolves,
//! a `tracing` warning names the lock, and `unlock` reports [`Error::LeaseLost`]. Long jobs
//! should race their work against `lost()`.
//!
//! A lock taken with an explicit lease is never renewed; it expires after the lease.
//!
//! ## Waiting
//! A waiter tries once; only if the lock is held does it subscribe to its client's channel of
//! the lock and try again, which queues it on the server. The release that frees the lock gives
//! it to the first waiter queued there, in the same script call, and one message tells that
//! waiter alone, which holds the lock from it (no call of its own). A waiter also looks again
//! when the holder's lease would have run out, so a lost message costs time, never correctness.
//! A queued waiter also looks again once per claim lease ([`Config::claim_lease`], 2 s), which
//! keeps its place alive and passes over a grantee that died: a lock held long by one process
//! while others wait costs the server one script call per waiting process every 2 s.
//!
//! Within one client, waiters for a lock queue FIFO, and a release that frees the lock hands it
//! straight to the first of them (one script: the holder's field goes, the waiter's comes, with
//! the waiter's lease and a new fencing token): no unlock message, no acquire round trip after
//! it, and the lock is never free in between. It does so only while no waiter of another
//! client is queued for the lock: the first release after such a waiter queued is that waiter's.
//! (Single attempts and `MultiLock`/`RedLock` members never queue, so they get no such turn.)
//!
//! Behind a proxy without pub/sub, build the client with
//! [`wait_by(WaitBy::POLLING)`](ClientBuilder::wait_by): waiters of every lock kind then try
//! again after a pause that doubles from 5 ms to 500 ms (with jitter) and never subscribe. A
//! polling waiter queues on the server like any other, so a busy client's releases pass the lock
//! to it in turn; it only hears of its grant at its next look.
//!
//! ## Many tasks at once
//! A call made while the client's connection is idle goes out at once. Acquisitions (and
//! releases) made while others are in flight are sent together, as one script call of up to 64
//! locks that the server runs one after another: the script's fixed cost is paid once (64
//! tasks locking a key each ran 1.3–1.6× as many lock/unlock pairs per second as with one call
//! each; see [the performance guide](guide::performance)). Each caller still gets its own
//! answer, error and timeout.
//!
//! ## Owners: what re-enters, what excludes
//! A lock is held by an *owner*. The same owner taking the same lock again counts up (each
//! guard counts down; the key goes at zero); any other owner waits. Which owner an acquisition
//! is made for, first match wins:
//!
//! | owner | set by | re-enters | excludes |
//! |---|---|---|---|
//! | explicit [`Owner`] | [`Lock::with_owner`] | every acquisition through a handle with that owner, from any task | everyone else |
//! | lock scope | the body of [`Lock::run`] / [`Lock::try_run`] | nested acquisitions inside the body (nested `run`s, `lock()` on any handle of the lock): a scope re-enters a lock that an enclosing scope holds | other bodies, also ones polled concurrently in the same task (`join!`, `select!`, `for_each_concurrent`, `buffer_unordered`), and tasks spawned from the body |
//! | tokio task | default in async code outside any scope | everything in the task, **including futures polled concurrently in it** once one holds the lock (two acquisitions in progress at once: the second fails with [`Error::ConcurrentAcquisition`]) | other tasks |
//! | thread | the [`blocking`] API (and code outside any tokio task) | everything on the thread | other threads |
//!
//! **Use [`Lock::run`] in async code.** With the task as the owner, futures polled
//! concurrently inside *one* task share its id, so they re-enter each other's lock and their
//! critical sections interleave. redlease cannot tell that from nesting in every case, but it
//! refuses the clearest sign: an acquisition that starts while the same task's (or thread's, or
//! scope's) other acquisition of the lock is still in progress — a nested one starts only after
//! the outer one returned — fails at once with [`Error::ConcurrentAcquisition`], nothing sent.
//! An explicit [`Owner`] shared on purpose keeps its meaning: its acquisitions re-enter. The
//! server's hold count stays exact either way: one owner's acquisitions take turns, so its
//! count always equals its live guards.
//!
//! ```no_run
//! # async fn demo(client: redlease::Client) -> redlease::Result<()> {
//! let lock = client.lock("stock:move")?;
//! let (a, b) = tokio::join!(
//!     lock.run(|_| async { /* one at a time */ }),
//!     lock.run(|_| async { /* ... with this one */ }),
//! );
//! a?;
//! b?;
//! # Ok(()) }
//! ```
//!
//! Tokio reuses a task's id once the task has ended. A guard leaked with `std::mem::forget`
//! keeps its hold (and its watchdog renewal) after its task is gone, and a later task that
//! happens to get the same id would re-enter it. Don't leak guards; if you must, release the
//! hold with [`Lock::unlock`] from an owner you control.
//!
//! Use [`Lock::reentrant(false)`](Lock::reentrant) for a plain mutex: a second acquisition by
//! the holder fails with [`Error::WouldDeadlock`].
//!
//! ## Cancellation
//! Every waiting method is cancel-safe: dropping a `lock()` future (a `timeout` around it, an
//! aborted task) leaves neither a hold nor a renewal behind, even if the server granted the
//! lock just as the future was dropped — that grant is observed in the background and given
//! back. Dropping an `unlock()` future still completes the release.
//!
//! ## Observability
//! Metrics go through the [`metrics`](https://docs.rs/metrics) facade: nothing is recorded
//! until the application installs a recorder (Prometheus, StatsD, ...; see
//! `examples/prometheus.rs`), and then each update is a few atomic operations. No metric is
//! labelled by lock name unless the client maps names to a few groups with
//! [`ClientBuilder::lock_label`] (label `lock`): every distinct value is a series of its own.
//! Spans carry the name instead. The full table, with what to alert on:
//! [the observability guide](guide::observability).
//!
//! | metric | kind | labels | what |
//! |---|---|---|---|
//! | `redlease_acquire_wait_seconds` | histogram | `kind`, `outcome` | from the call to its end; `outcome`: `acquired`, `busy` (one attempt, held), `timeout` (the wait ran out), `error`, `cancelled` (the future was dropped) |
//! | `redlease_acquire_contended_total` | counter | `kind` | acquisitions that could not be granted at once and waited |
//! | `redlease_waiting` | gauge | `kind` | acquisitions waiting now |
//! | `redlease_held` | gauge | `kind` | locks held now (one per lock and owner) |
//! | `redlease_hold_seconds` | histogram | `kind` | from the grant to the release |
//! | `redlease_leases_lost_total` | counter | `kind`, `reason` | leases lost while a guard lived; `reason`: `expired` (a fixed lease ran out), `forced` (`force_unlock` through this client), `server_lost` (gone from the server at renewal, extension or release), `renewal_failed` (no renewal confirmed within the validity), `shutdown` (`Client::shutdown` gave it back) |
//! | `redlease_acquire_attempts` | histogram | | script attempts one successful acquisition took (hand-overs count as one) |
//! | `redlease_handovers_total` | counter | | releases that handed the lock straight to a waiter of the same client |
//! | `redlease_renewal_lag_seconds` | histogram | | how late a watchdog round started after its schedule |
//! | `redlease_lease_left_at_renewal_seconds` | histogram | | the validity a hold had left when its renewal was confirmed: near zero means leases nearly ran out |
//! | `redlease_batch_size` | histogram | | acquisitions or releases coalesced into one script call |
//! | `redlease_redlock_node_votes_total` | counter | `node`, `vote` | RedLock acquisition answers per node (`node` is its index; `vote`: `granted`, `held`, `failed`) |
//! | `redlease_election_terms_total` | counter | | election terms this process won |
//! | `redlease_election_campaign_wait_seconds` | histogram | | from `campaign` to its win |
//! | `redlease_election_takeover_seconds` | histogram | | from the end of the previous term, as the server recorded it, to the win |
//! | `redlease_replica_acks_short_total` | counter | `write` | acquisitions and renewals (`acquire`, `renew`) that fewer replicas acknowledged than [`Replicas`] wanted |
//! | `redlease_server_warnings_total` | counter | `warning`, `policy` | at connect, per [`ServerWarning`] of a server: `eviction` with the server's `maxmemory-policy` |
//!
//! `kind` is `lock` for [`Lock`] and [`FairLock`] (and the members of [`MultiLock`] and
//! [`RedLock`] in `held`, hold time and leases lost), `read` and `write` for the sides of a
//! [`ReadWriteLock`] (readers of one client sharing one read hold count once in `held`),
//! `permit` for a [`PermitSemaphore`]'s permits, and `semaphore` for a [`Semaphore`]'s
//! acquisitions (its permits are not holds: no `held`, hold time or leases lost).
//!
//! Spans (at `DEBUG`, target `redlease`): `acquire` (fields `lock`, `owner`, and on success
//! `attempts` and `wait_ms`), `release` (`lock`, `owner`, `outcome`), `renew` (one watchdog
//! round: `locks`, `renewed`, `lost`); elections add `campaign` (`election`, and on success
//! `term` and `wait_ms`), `proclaim` and `resign` (`election`, `term`).
//!
//! ## Testing your code
//! With the `testing` feature, `redlease::testing` makes a guard's lease lapse, pauses a client's
//! renewals, or holds a lock from another client, against a real server, so your code's
//! reactions to a lost lease, a slow grant and a busy lock can be tested; its `TestServer`
//! starts a private `redis-server` for a test in one line (no URL to set) and kills it after.
//!
//! ## What a lease-based lock can and cannot promise
//! A lease lock cannot by itself protect a resource from a holder that is paused past its
//! lease (GC, swap, SIGSTOP, a slow network): when it resumes it may still believe it holds
//! the lock. redlease gives you the tools to handle it:
//! - **fencing tokens** ([`Lock::fenced`]): every first acquisition gets a strictly larger
//!   number; the resource rejects writes carrying an older token. A token is the server's
//!   clock in microseconds (or one more than the last token), such as `1796468123456789`
//!   (about 1.8 × 10¹⁵), and so is an election's term: store them in 64-bit integers (`u64`,
//!   SQL `BIGINT`), never in a 32-bit column;
//! - the **lost-lease signal** ([`LockGuard::lost`]) to stop work promptly;
//! - the **local validity deadline** ([`LockGuard::valid_until`]): the lease minus a drift
//!   allowance, measured from the *start* of the last successful acquisition or renewal. A
//!   guard is never handed out with its validity already spent: a grant that arrives with less
//!   than half its lease left (a stalled server answering late) is renewed first, and given
//!   back if that fails;
//! - independent masters with a quorum (Redlock) where one Redis master is not trusted.
//!
//! Without persistence, a Redis restart forgets every lock; with replication, a failover can
//! lose a fresh lock whose write had not reached the replica yet.
//!
//! ## Errors
//! One [`Error`] type. Redis failures are never turned into "not acquired": `try_lock`
//! returns `Ok(None)` only when another owner holds the lock. A server that is down yields
//! an error within the configured [`Config::timeout`], never a hang. Bad input (empty names,
//! zero or absurd leases, a key of another Redis type) is rejected with a clear error before
//! anything is written.
//!
//! ## Redis data model
//! For a lock named `N` and the prefix `P` (default `redlease`). Every key either expires or
//! is deleted by its last user, so nothing piles up (`tests/keys_left.rs` runs every kind of
//! lock, semaphore and latch and checks that the server is empty afterwards; an election's
//! record is kept an hour past its lock's lease by design, so it is left out there):
//!
//! | key | type | contents | gone when |
//! |---|---|---|---|
//! | `P:{N}` | hash | field `<client uuid>:<owner>` → hold count (0: one hold, given from the queue) | the last release; else the lease (PEXPIRE), or the claim lease for a hold given from the queue until its holder's watchdog lengthens it |
//! | `P:{N}:fence` | string | the last fencing token (fenced locks only) | the lease it was last written with plus [`Config::fence_grace`] (60 s) |
//! | `P:{N}:delay` | string | lock-delay marker of a holder that set [`Lock::lock_delay`]; every acquirer honours it | a release; else the lease plus the delay |
//! | `P:{N}:q`, `P:{N}:qd` | list, hash | the lock's waiters across processes, first come first; each one's deadline, claim lease, fence grace, lock-delay and the nonce of the attempt that queued it, and (`@<owner field>`) when it took its place ([`Lock::waiters`]) | the last waiter leaves; else the latest waiter deadline |
//! | `P:{N}:latch:<request>` | string | makes a retried release idempotent (written when holds remain, or for a give-back) | max(5 × [`Config::timeout`], 5 s) |
//! | `P:{N}:semaphore` | string | available permits of the semaphore `N` | [`Semaphore::delete`] (permits are state you set) |
//! | `P:{N}:semaphore:g` | hash | `<client uuid>:w<n>` → a grant to a queued waiter: permits set aside until it claims them (`s`, a claim deadline), or handed over by a release of its own client (`t`, kept for a waiter that missed the reply) | the calls that claim or withdraw them, the client's next release (`t`), or their deadline |
//! | `P:{N}:semaphore:t:<client uuid>:<minute>` | hash | `<client uuid>:w<n>` (an acquisition, by its wait) or `:r<n>` (a release) → the permits the call changed the count by, so the call sent again after its connection dropped does nothing twice | that client's next release, once it has the reply; a withdrawal (`w`); [`Semaphore::delete`] (its own); else the hash ends a few minutes after its last write (3 with the default timeout and watchdog lease: longer than an acquisition's reply is waited for and its withdrawal is tried) |
//! | `P:{N}:permits` | hash | `total`, and `p:<id>` → deadline of each permit given out (server clock; a grant to a queued waiter, `p:<client uuid>:w<n>`, has its claim lease until claimed) | [`PermitSemaphore::delete`]; a permit's entry at its deadline |
//! | `P:{N}:semaphore:q`, `:qd`; `P:{N}:permits:q`, `:qd` | list, hash | the semaphore's waiters across processes, first come first; each one's deadline, permits wanted and claim lease | the last waiter leaves; else the latest waiter deadline |
//! | `P:{N}:countdown` | string | count left of the latch `N`, and its round (`<count> <server µs when set>`) | it reaches zero |
//! | `P:{N}:rw` | hash | read-write lock `N`: writer `w`/`wn`/`wd`, readers `r:<owner>`/`rd:<owner>` (deadlines on the server's clock; a hold count of 0 is a grant to a queued waiter, held for it until its claim lease ends) | the last release; else the latest deadline in it |
//! | `P:{N}:rw:q`, `:qd` | list, hash | the read-write lock's waiters across processes (owner fields), first come first; each one's deadline, side wanted and claim lease | the last waiter leaves; else the latest waiter deadline |
//! | `P:{N}:election`, `P:{N}:election:log` | hash, list | election `N` (its leader holds the fenced lock `N`): state, term, value and process of the leader, revision, transitions; the last 64 changes | an hour after the lock's lease (a leader keeps pushing it back) |
//! | `P:client:<uuid>` | hash | the client's process (host, pid, program), for `status` and `list`; `meta <lock key> <owner field>` → the [`LockOptions::metadata`] of a hold, until its last release | [`Client::shutdown`]; else the watchdog lease plus 1 s |
//!
//! Channels (no memory when nobody listens): `P:{N}:unlock:<client uuid>` (a release gave the
//! lock to a queued waiter of that client: `g <claim ms> <token> <nonce> <owner field>`; a
//! release with nobody queued publishes nothing), `P:{N}:semaphore:released:<client uuid>` and
//! `P:{N}:permits:released:<client uuid>` (permits granted to a queued waiter of that client:
//! `g <claim ms> - 0 <waiter>`), `P:{N}:rw:unlock:<client uuid>` (the read-write lock granted
//! to a queued owner of that client: `g <claim ms> - 0 <owner field>`), `P:{N}:countdown:zero`,
//! `P:{N}:election:changed`.
//!
//! The `{N}` hash tag keeps all keys of one lock in one Redis Cluster slot.

#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]
// docs.rs (`[package.metadata.docs.rs]`) builds with `--cfg docsrs` on nightly: items behind a
// cargo feature show which one.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod backoff;
#[cfg(feature = "blocking")]
#[cfg_attr(docsrs, doc(cfg(feature = "blocking")))]
pub mod blocking;
mod client;
mod config;
pub mod election;
mod error;
mod family;
mod guard;
mod hold;
mod identity;
mod keys;
mod local_queue;
mod lock;
mod multi;
mod node;
mod options;
mod owner;
mod pubsub;
mod queue_place;
mod release;
mod scripts;
mod shared;
mod task;
mod telemetry;
mod terms;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;
mod turns;
mod wait;
mod watchdog;

pub use client::ClientBuilder;
pub use config::{Config, MAX_DURATION, Replicas, WaitBy};
pub use election::{
    ChangeCause, Election, ElectionStatus, LeadOptions, Leader, LeaderChange, LeaderChanges,
    Leadership, Leading,
};
pub use error::{Error, Result};
pub use family::{
    CountDownLatch, FairGuard, FairLock, Guard, GuardFuture, Permit, PermitSemaphore, ReadGuard,
    ReadLock, ReadWriteLock, Semaphore, WriteGuard, WriteLock,
};
pub use guard::LockGuard;
pub use identity::ClientInfo;
pub use keys::MAX_NAME_LEN;
pub use lock::{HeldLock, Holder, Lock, LockStatus, RemainingLease, Waiter};
pub use multi::{MultiLock, MultiLockGuard, RedLock, RedLockGuard};
pub use node::ServerWarning;
#[cfg(feature = "tls-rustls")]
pub use node::TlsOptions;
pub use options::{LockOptions, MAX_METADATA_LEN};
pub use owner::Owner;
pub use shared::Client;
pub use telemetry::LockLabel;
pub use watchdog::RenewStats;

#[cfg(feature = "macros")]
#[cfg_attr(docsrs, doc(cfg(feature = "macros")))]
pub use redlease_macros::locked;
/// What `#[locked]`'s expansion names; not public API.
#[cfg(feature = "macros")]
#[doc(hidden)]
pub mod __macro_support {
    pub use tokio::time::sleep;
}

/// The guides under `docs/` in the repository, one page each, so that they read (and link) on
/// docs.rs as the rest of this documentation does. Their Rust examples are compiled by
/// `cargo test --doc`, so they stay true.
///
/// Links from one guide to another name the file (`replicas.md`): they work where the files
/// are read as files (the repository, the package's `docs/`), not on these pages; each page is
/// listed here. A new page under `docs/` gets a module here (the package ships `docs/`).
pub mod guide {
    #[doc = include_str!("../docs/locks.md")]
    pub mod locks {}
    #[doc = include_str!("../docs/guarantees.md")]
    pub mod guarantees {}
    #[doc = include_str!("../docs/election.md")]
    pub mod election {}
    #[doc = include_str!("../docs/cli.md")]
    pub mod cli {}
    #[doc = include_str!("../docs/observability.md")]
    pub mod observability {}
    #[doc = include_str!("../docs/performance.md")]
    pub mod performance {}
    #[doc = include_str!("../docs/internals.md")]
    pub mod internals {}
    // Its examples need the `macros` feature to compile.
    #[cfg(any(feature = "macros", not(doctest)))]
    #[doc = include_str!("../docs/macros.md")]
    pub mod macros {}
    #[doc = include_str!("../docs/tls.md")]
    pub mod tls {}
    #[doc = include_str!("../docs/acl.md")]
    pub mod acl {}
    #[doc = include_str!("../docs/sentinel.md")]
    pub mod sentinel {}
    #[doc = include_str!("../docs/replicas.md")]
    pub mod replicas {}
}

/// The README's Rust examples, compiled by `cargo test --doc` so they stay true (the guides'
/// are, as [`guide`]).
#[cfg(doctest)]
mod doc_examples {
    #[doc = include_str!("../README.md")]
    pub struct Readme;
}
