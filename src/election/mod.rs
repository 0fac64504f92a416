//! Leader election on a lock: [`Election`], [`Leadership`], [`Election::lead`] and
//! [`Election::observe`], after etcd's `concurrency.Election` and client-go's `leaderelection`.
//!
//! An election named `N` *is* the fenced lock `N`: its holder leads, and its fencing token is
//! the term. Candidates wait for it as lock waiters do (woken by the release, without polling),
//! the watchdog keeps the leader's lease, and a lost lease is a lost leadership. Beside the lock,
//! under the same `{N}` hash tag (so in one cluster slot), the election keeps what the lock does
//! not: the leader's value and process, a revision counted up on every change, the number of
//! terms so far, the last 64 changes, and a channel with one message per change. See
//! `docs/election.md` for the comparison with etcd and client-go.
//!
//! ```no_run
//! # async fn demo() -> redlease::Result<()> {
//! # async fn serve_as_leader(term: u64) {}
//! let client = redlease::Client::connect("redis://127.0.0.1:6379").await?;
//! let election = client.election("billing-scheduler")?;
//!
//! // Wait until this instance leads; the value tells the others where to find it.
//! let leadership = election.campaign("10.0.0.7:8080").await?;
//! tokio::select! {
//!     _ = serve_as_leader(leadership.term()) => leadership.resign().await?,
//!     _ = leadership.lost() => eprintln!("no longer the leader; stop at once"),
//! }
//!
//! // Anyone can ask who leads.
//! if let Some(leader) = election.leader().await? {
//!     println!("{} leads in term {} ({}, pid {})", leader.value, leader.term,
//!              leader.process.host, leader.process.pid);
//! }
//! # Ok(()) }
//! ```
//!
//! # Terms and fencing
//! A term is the fencing token of the leader's hold on the lock: strictly greater than every
//! earlier term of the election. On one server two leaders never hold valid terms at
//! overlapping times (a term is valid until its [`valid_until`](Leadership::valid_until)).
//! A leader paused past its lease (GC, swap, SIGSTOP) may still *believe* it leads when it
//! resumes: its [`is_lost`](Leadership::is_lost) turns true as soon as it looks (its validity
//! ran out), and the watchdog's next renewal finds the lock gone; but a write it had already
//! sent is only stopped by the resource. So give every side effect the term, and let the
//! resource refuse terms lower than one it has seen.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::Instrument;

use crate::error::{Error, Result};
use crate::lock::Lock;
use crate::owner::Owner;
use crate::shared::Client;
use crate::terms::Wait;

mod lead;
mod leadership;
mod metrics;
mod observe;
mod state;

pub use lead::LeadOptions;
pub use leadership::{Leadership, Leading};
pub use observe::{LeaderChange, LeaderChanges};
pub use state::{ChangeCause, Leader};

use leadership::{Term, check_value};
use state::{Calls, ElectionKeys, Won};

/// How many times in a row a campaign may win the lock yet fail to record its win (its lease
/// vanished in between, or the fencing counter was found behind the recorded term) before it
/// gives up: either means someone is deleting the election's keys.
const RECORD_ATTEMPTS: u32 = 8;

/// A handle on one election of a [`Client`]: made by [`Client::election`], cheap to clone,
/// holds nothing by itself.
///
/// - [`campaign`](Election::campaign): wait to lead; a [`Leadership`] guard with the term.
/// - [`lead`](Election::lead) / [`lead_with`](Election::lead_with): run a body while leading.
/// - [`leader`](Election::leader) / [`status`](Election::status): who leads now.
/// - [`observe`](Election::observe): a stream of every change, woken by messages.
///
/// See the [module docs](crate::election) for terms and fencing.
#[derive(Clone)]
pub struct Election {
    client: Client,
    keys: Arc<ElectionKeys>,
    lease: Option<Duration>,
    lock_delay: Option<Duration>,
}

/// The state of an election, from [`Election::status`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ElectionStatus {
    /// Who leads now; `None` while nobody does.
    pub leader: Option<Leader>,
    /// The revision: how many changes the election recorded (0: never had a leader).
    pub revision: u64,
    /// How many terms the election has had (client-go's `leaseTransitions`).
    pub transitions: u64,
    /// What changed last.
    pub last_change: Option<ChangeCause>,
    /// When it changed last, in milliseconds since the Unix epoch by the server's clock.
    pub changed_at_ms: u64,
    /// The leader's remaining lease, when somebody holds the election's lock.
    pub remaining_lease: Option<Duration>,
}

impl Election {
    pub(crate) fn new(client: Client, name: &str) -> Result<Election> {
        let lock = Lock::new(client.clone(), name)?;
        Ok(Election {
            keys: Arc::new(ElectionKeys::new(lock.keys.clone())),
            client,
            lease: None,
            lock_delay: None,
        })
    }

    /// The leader's lease, renewed by the watchdog every third of it, instead of the client's
    /// [`Config::watchdog_lease`](crate::Config::watchdog_lease) (30 s by default). A leader
    /// that crashes is replaced at most this long after its last renewal.
    #[must_use]
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// After a leader whose lease ran out without a resignation (it crashed, froze or lost
    /// Redis), keep the election closed for `delay` more, so that writes the old leader still
    /// had in flight land before the next leader starts: Chubby's lock-delay, for resources
    /// that cannot check a term. A resignation (or a dropped [`Leadership`]) hands over at
    /// once, as always. The delay binds every next candidate, whatever its own setting: it is the
    /// leader's (see [`Lock::lock_delay`](crate::Lock::lock_delay)). Defaults to none.
    #[must_use]
    pub fn lock_delay(mut self, delay: Duration) -> Self {
        self.lock_delay = Some(delay);
        self
    }

    /// The election's name (also the name of its lock).
    pub fn name(&self) -> &str {
        &self.keys.lock.name
    }

    fn calls(&self) -> Calls<'_> {
        Calls {
            client: &self.client,
            keys: &self.keys,
        }
    }

    /// Waits until this candidate leads, publishing `value` (an address, an id: what followers
    /// need), and returns the [`Leadership`]. Each campaign is its own owner of the election's
    /// lock, so two campaigns of one process compete like any two candidates.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a value over 64 KiB; [`Error::InvalidDuration`] naming
    /// the `election lease` set on the election when it is zero or absurd (or the `election lock
    /// delay` when absurd); [`Error::WrongType`] when the
    /// election's lock key holds something else; [`Error::Timeout`] or [`Error::Redis`] when
    /// Redis fails (waiting does not hide errors); [`Error::Shutdown`]; [`Error::LeaseLost`]
    /// when the win could not be recorded 8 times in a row (someone deletes the election's
    /// keys).
    ///
    /// # Cancel safety
    /// Cancel-safe: dropping the future leaves nothing behind. A waiting candidate leaves no
    /// hold and no subscription; one dropped just as it won resigns in the background.
    pub async fn campaign(&self, value: &str) -> Result<Leadership> {
        self.campaign_within(value, Wait::Forever)
            .await?
            .ok_or(Error::Shutdown)
    }

    /// [`campaign`](Election::campaign), waiting at most `wait`: `None` when another candidate
    /// led all along. A zero `wait` makes one attempt.
    ///
    /// # Errors
    /// As [`campaign`](Election::campaign), and [`Error::InvalidDuration`] for an absurd wait.
    ///
    /// # Cancel safety
    /// As [`campaign`](Election::campaign).
    pub async fn try_campaign_for(
        &self,
        value: &str,
        wait: Duration,
    ) -> Result<Option<Leadership>> {
        self.campaign_within(value, Wait::until(wait)?).await
    }

    async fn campaign_within(&self, value: &str, wait: Wait) -> Result<Option<Leadership>> {
        check_value(value)?;
        // Named as the election's settings, before the lock's checks would name the lock's.
        if let Some(lease) = self.lease {
            crate::config::lease_ms("election lease", lease)?;
        }
        if let Some(delay) = self.lock_delay.filter(|d| !d.is_zero()) {
            crate::config::check_duration("election lock delay", delay)?;
        }
        let span = tracing::debug_span!(
            "campaign",
            election = %self.name(),
            term = tracing::field::Empty,
            wait_ms = tracing::field::Empty,
        );
        let called = Instant::now();
        let won = self.win(value, wait).instrument(span.clone()).await;
        if let Ok(Some((leadership, vacant_for))) = &won {
            let waited = called.elapsed();
            span.record("term", leadership.term());
            span.record("wait_ms", waited.as_secs_f64() * 1e3);
            metrics::won(waited, *vacant_for);
        }
        won.map(|won| won.map(|(leadership, _)| leadership))
    }

    /// Takes the lock, then records the win; again when the win cannot be recorded.
    async fn win(&self, value: &str, wait: Wait) -> Result<Option<(Leadership, Option<Duration>)>> {
        for _ in 0..RECORD_ATTEMPTS {
            let mut lock = Lock::new(self.client.clone(), self.name())?
                .fenced(true)
                .reentrant(false)
                // A fresh owner per campaign: a term is one hold, never re-entered.
                .with_owner(Owner::new());
            if let Some(lease) = self.lease {
                lock = lock.watchdog_lease(lease);
            }
            if let Some(delay) = self.lock_delay {
                lock = lock.lock_delay(delay);
            }
            let lease = lock.watchdog()?;
            let Some(guard) = lock.acquire(lease, wait).await? else {
                return Ok(None);
            };
            let hold = guard.hold().clone();
            let term = hold.token.ok_or_else(|| Error::Protocol {
                script: "acquire",
                reply: "no fencing token for a fenced lock".into(),
            })?;
            let field = hold.key.field.clone();
            let shared = Arc::new(Term::new(
                self.client.clone(),
                self.keys.clone(),
                hold,
                term,
                value.to_owned(),
            ));
            // From here on, dropping the leadership (a cancelled campaign) resigns.
            let leadership = Leadership::new(shared, guard);
            match self.calls().won(&field, term, value).await? {
                Won::Recorded { vacant_for, .. } => return Ok(Some((leadership, vacant_for))),
                Won::NotHeld => {
                    tracing::debug!(election = %self.name(), term, "the lease was gone before the win was recorded; campaigning again");
                }
                Won::StaleTerm { recorded } => {
                    tracing::warn!(election = %self.name(), term, recorded, "the fencing counter is behind the recorded term; raising it");
                    self.client
                        .inner
                        .node
                        .raise_fence(&self.keys.lock, recorded, lease.ms())
                        .await?;
                }
            }
            drop(leadership);
        }
        Err(Error::LeaseLost {
            name: self.name().to_owned(),
        })
    }

    /// The current leader (value, term, process), or `None` while nobody leads. A leader whose
    /// lease ran out is recorded as gone by this call.
    ///
    /// # Errors
    /// [`Error::Timeout`] or [`Error::Redis`] when Redis fails; [`Error::Protocol`] when the
    /// election's keys hold something this version does not understand.
    ///
    /// # Cancel safety
    /// Cancel-safe: it may tidy expired state on the server, as any later call would.
    pub async fn leader(&self) -> Result<Option<Leader>> {
        Ok(self.status().await?.leader)
    }

    /// The election's state: the leader, the revision, the number of terms, the last change.
    ///
    /// # Errors
    /// As [`leader`](Election::leader).
    ///
    /// # Cancel safety
    /// Cancel-safe: it may tidy expired state on the server, as any later call would.
    pub async fn status(&self) -> Result<ElectionStatus> {
        let read = self.calls().read(None).await?;
        let current = read.current;
        Ok(ElectionStatus {
            leader: current.as_ref().and_then(|r| r.leader.clone()),
            revision: current.as_ref().map_or(0, |r| r.revision),
            transitions: current.as_ref().map_or(0, |r| r.transitions),
            last_change: current.as_ref().and_then(|r| r.cause),
            changed_at_ms: current.as_ref().map_or(0, |r| r.at_ms),
            remaining_lease: read.lock_ttl,
        })
    }

    /// A stream of the election's changes: first the state now ([`LeaderChange::initial`]),
    /// then every change in order (a win, a proclaimed value, a resignation, a lost or
    /// expired lease), each with the election's revision. It is woken by the election's
    /// messages on the client's one subscriber connection, and reads again after at most a
    /// second without one (or when the leader's lease runs out, if sooner), so a lost message
    /// delays a change but does not lose it. Changes come from a log of the last 64: should
    /// more happen between two reads, the next item says how many were
    /// [missed](LeaderChange::missed).
    ///
    /// ```no_run
    /// # async fn demo(client: redlease::Client) -> redlease::Result<()> {
    /// use futures_util::StreamExt;
    ///
    /// let mut changes = client.election("billing-scheduler")?.observe();
    /// while let Some(change) = changes.next().await {
    ///     let change = change?;
    ///     match &change.leader {
    ///         Some(leader) => println!("term {}: {}", leader.term, leader.value),
    ///         None => println!("no leader"),
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// Items are `Err` when Redis fails; the stream goes on (pausing a second after an error),
    /// so stop on errors or skip them as suits you. It ends only when the client is shut down,
    /// after one [`Error::Shutdown`] item.
    ///
    /// # Cancel safety
    /// Dropping the stream unsubscribes; it leaves nothing on the server.
    pub fn observe(&self) -> LeaderChanges {
        observe::observe(self.client.clone(), self.keys.clone())
    }
}

impl std::fmt::Debug for Election {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Election")
            .field("name", &self.keys.lock.name)
            .field("lease", &self.lease)
            .field("lock_delay", &self.lock_delay)
            .finish_non_exhaustive()
    }
}
