//! Client configuration: plain data with documented defaults.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::telemetry::LockLabel;

/// The longest lease, wait or timeout accepted anywhere (365 days).
///
/// Anything longer is almost certainly a unit mistake, and far-future deadlines overflow
/// `Instant` arithmetic on some platforms.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

/// Settings shared by every lock of a [`Client`](crate::Client), as read back from
/// [`Client::config`](crate::Client::config).
///
/// There is one way to set them: the [`ClientBuilder`](crate::ClientBuilder) setter of the same
/// name (`Client::builder(url).timeout(..).watchdog_lease(..)`); every field has a default.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Config {
    /// Prefix of every key and channel. Defaults to `"redlease"`.
    pub prefix: String,
    /// Lease of locks taken without an explicit lease; the watchdog renews them every third of it.
    /// Defaults to 30 seconds.
    ///
    /// Keep it at least three times [`timeout`](Config::timeout): a renewal may take up to the
    /// timeout, and one that lands after the lease ran out finds the lock gone. A shorter lease
    /// is accepted (tests use sub-second leases) and logged as a warning when the client is
    /// built. A grant that arrives with less than half its lease left is renewed before it is
    /// handed out, so even then `lock()` never returns a guard that is already lost.
    pub watchdog_lease: Duration,
    /// Limit for connecting and for each command round trip. Defaults to 2 seconds.
    pub timeout: Duration,
    /// How many times a release is retried when its reply was lost (the retry is idempotent).
    /// Defaults to 2.
    pub release_retries: u32,
    /// Safety margin subtracted from every lease when computing how long a lock is known valid,
    /// as a fraction of the lease; 2 ms are added on top. Defaults to 0.01.
    pub drift_factor: f64,
    /// How waiters learn that what they wait for may be free. Defaults to [`WaitBy::PubSub`].
    pub wait_by: WaitBy,
    /// Whether acquisitions and renewals of plain locks wait until replicas acknowledged the
    /// write (`WAIT`). Defaults to [`Replicas::Off`]. See
    /// [the replicas guide](crate::guide::replicas).
    pub replicas: Replicas,
    /// How long a fencing counter (`P:{N}:fence`) outlives the lease it was last written with.
    /// Defaults to 60 seconds.
    ///
    /// Tokens follow the server's clock (see [`Lock::fenced`](crate::Lock::fenced)), so a token
    /// made after the counter expired is still above every earlier one; the counter only has to
    /// outlive a backwards step of the server's clock. A step back by more than the grace, with
    /// the lock idle for the whole grace, can hand out a token below an earlier one. Zero lets
    /// the counter expire with the lease.
    pub fence_grace: Duration,
    /// How long a lock (or a semaphore's permits, or a read-write lock's hold) given to a
    /// queued waiter stays that waiter's before it claims it. Defaults to 2 seconds.
    ///
    /// Waiters queue on the server, and a release gives what it frees to the first of them at
    /// once. A waiter whose process died holds a grant for this long at most; a live one claims
    /// it within a round trip. A waiter with a fixed lease
    /// ([`LockOptions::lease`](crate::LockOptions::lease)) is granted its whole lease instead
    /// (it needs no claim, so a hand-over costs one script call fewer), and one that died while
    /// queued keeps a granted lock for that lease, as a holder that died does.
    ///
    /// With [`timeout`](Config::timeout) it also bounds how long a waiter's place in the queue
    /// outlives the waiter's last attempt (a live waiter attempts again before it ends): a
    /// [`Lock`](crate::Lock)'s or [`FairLock`](crate::FairLock)'s waiter keeps its place for the
    /// wait that attempt was told (the holder's lease left, or 1 s for a key without expiry),
    /// a semaphore's or read-write lock's waiter for 2 s, each plus the longer of the claim
    /// lease and the timeout.
    pub claim_lease: Duration,
    /// The `lock` label of the per-lock metrics. Defaults to none ([`LockLabel::off`]).
    pub lock_label: LockLabel,
    /// How long this client stays subscribed to a lock's channel after its last waiter for
    /// that lock stopped waiting. Defaults to 500 milliseconds; zero unsubscribes at once.
    ///
    /// A process that waits for the same lock again and again (every few milliseconds, when
    /// several processes take turns on it) then finds the channel subscribed: no SUBSCRIBE
    /// and UNSUBSCRIBE per wait, and no second attempt to cover a message sent before the
    /// subscription. Measured with `make bench` (W7, one CPU, 4 / 8 processes taking turns on
    /// one lock): without it 0.59× / 0.46× the floor's acquisitions per second and 2.27 script
    /// calls per acquisition at 8, with it 0.64× / 0.58× and 2.00. Longer than the pause
    /// between two waits of a process, it makes no difference; each lingering channel costs
    /// one subscription on the server for that long.
    pub channel_linger: Duration,
    /// Whether connecting to a server whose `maxmemory-policy` may evict lock keys (any policy
    /// but `noeviction`) fails with [`Error::EvictingServer`] instead of a warning
    /// ([`Client::server_warnings`](crate::Client::server_warnings)). Defaults to `false`.
    /// See docs/guarantees.md, *Eviction*.
    pub refuse_evicting_servers: bool,
    /// Whether the server tells this client at once when a held lock's key is changed by
    /// someone else: deleted, flushed, evicted, expired or forced. Defaults to `true`.
    ///
    /// On, the client keeps one more connection to the server, and the server pushes a notice
    /// when such a key is written (Redis's client-side caching, `CLIENT TRACKING`, which needs
    /// Redis 6 or Valkey). The client then reads whether the hold is still there and, if not,
    /// marks its guard lost once the command connection confirms it:
    /// [`LockGuard::lost`](crate::LockGuard::lost) resolves within about a millisecond instead
    /// of at the next renewal (up to a third of the lease later). Measured (`make bench` L1, L1C,
    /// L1S; loopback, 300 trials per cause) after a `DEL`, a `FLUSHDB`, an eviction or a
    /// force-unlock by another process: p99 240–340 µs on one server, at most 395 µs on a
    /// cluster, 458 µs behind Sentinel. A reconnect of that connection (a restart, a Sentinel
    /// switch, a cluster's new slot map) checks every hold at once.
    /// The renewals stay as they are, and so does the local validity deadline: a holder cut
    /// off from the server hears nothing and still learns it at the deadline.
    ///
    /// Covers every hold under a lease: [`Lock`](crate::Lock), `FairLock`, a `MultiLock`'s
    /// members, a `PermitSemaphore`'s permits, read and write holds, a `Leadership`; on one
    /// server (TLS included), behind Sentinel, where it follows the master, and on a Redis
    /// Cluster, with one connection per primary that follows failovers and slot moves. The
    /// connections open at the client's first hold. A server, proxy or user that refuses `HELLO 3` or `CLIENT TRACKING` (the
    /// ACL right `+client|tracking`) is logged once (`tracing` warning) and the client goes on
    /// without it. Off, the client behaves as without it: no extra connection, no reads.
    ///
    /// Cost: one `HEXISTS` per held lock shortly after its grant (see
    /// [`loss_notice_delay`](Config::loss_notice_delay)) and after each of its renewals (the
    /// renewal is a write, which the server reports too), sent in batches; and one more read,
    /// through the command connection, of a hold found gone before it is marked lost.
    pub loss_notice: bool,
    /// How long after its grant a hold is first checked and armed for the loss notice, at the
    /// least: holds are armed in rounds at most this far apart, so each between one and two
    /// delays after its grant (a client's first holds sooner: every hold is checked when the
    /// notice's connection opens, at the first hold). Defaults to 100 milliseconds; zero arms each hold as soon as the
    /// notice sees it.
    ///
    /// A lock released sooner is never read at all: short critical sections (the common case)
    /// cost the server nothing more. The notice's task wakes at most about twice per delay
    /// (one wake-up to schedule a round, one for the round), whatever the rate of
    /// acquisitions: at 100 ms, some 20 wake-ups a second at most. A hold lost before it is
    /// armed is told when it is first checked, so up to two delays after its grant (200 ms);
    /// once armed, at once.
    ///
    /// Why 100 ms and not shorter: a client that acquires less often than once per delay pays
    /// both wake-ups for each acquisition, and the second finds a short hold already released.
    /// With 32 processes taking turns on one lock, each acquires every 10 ms or so; at 10 ms
    /// (the earlier default) that cost the processes about a fifth more CPU per acquisition,
    /// and the rate fell from 0.83–0.87× the `BLPOP` floor to 0.68–0.78×
    /// (docs/performance.md, "The loss notice's delay").
    pub loss_notice_delay: Duration,
}

/// The default of [`Config::claim_lease`].
pub(crate) const DEFAULT_CLAIM_LEASE: Duration = Duration::from_secs(2);

/// The default of [`Config::channel_linger`].
pub(crate) const DEFAULT_CHANNEL_LINGER: Duration = Duration::from_millis(500);

/// The default of [`Config::loss_notice_delay`].
pub(crate) const DEFAULT_LOSS_NOTICE_DELAY: Duration = Duration::from_millis(100);

/// The default of [`Config::fence_grace`].
pub(crate) const DEFAULT_FENCE_GRACE: Duration = Duration::from_secs(60);

/// Whether a write of a lock waits for replicas to acknowledge it (`WAIT n timeout`, sent in
/// one pipeline with the script, on the same connection, to the key's primary).
///
/// What it does not promise: an acknowledged replica may not be the one promoted at a
/// failover, and `WAIT` does not make Redis strongly consistent (see
/// [the replicas guide](crate::guide::replicas)).
///
/// ```
/// use std::time::Duration;
/// use redlease::Replicas;
///
/// // Every acquisition waits up to 50 ms for one replica; fewer acknowledgements fail it.
/// let strict = Replicas::Wait { replicas: 1, timeout: Duration::from_millis(50) };
/// // Waits for every connected replica, counted again after a shortfall or a failover
/// // (none: no WAIT at all).
/// let auto = Replicas::Auto { timeout: Duration::from_millis(50) };
/// # let _ = (strict, auto);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Replicas {
    /// No `WAIT` is ever sent. The default.
    #[default]
    Off,
    /// Wait for `replicas` acknowledgements, at most `timeout` (never 0: `WAIT n 0` blocks
    /// forever). Fewer acknowledgements fail an acquisition with
    /// [`Error::ReplicasUnacknowledged`] (the grant is given back first); a server that does not
    /// know `WAIT` fails it with [`Error::ReplicasUnsupported`].
    Wait {
        /// How many replicas must acknowledge (at least 1).
        replicas: u32,
        /// How long to wait for them.
        timeout: Duration,
    },
    /// Count the replicas (`INFO replication`, `connected_slaves`; on a cluster the fewest of
    /// any primary), again after a write fell short or a Sentinel failover, and wait for that
    /// many; no `WAIT` at all when there are none. A server that
    /// answers `WAIT` with an error is warned about once and then written to without `WAIT`.
    /// Too few acknowledgements fail as with [`Replicas::Wait`].
    Auto {
        /// How long to wait for the replicas.
        timeout: Duration,
    },
}

/// How a client's waiters (of every lock kind) learn that a lock, permit or latch may be free.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WaitBy {
    /// One subscriber connection per client; a release that gives the lock to a waiter (or
    /// frees a permit, a latch) publishes a message that wakes it at once. Waiters also look again when the holder's lease would have run out, so
    /// a lost message costs time, never correctness. The default.
    PubSub,
    /// No pub/sub at all, for proxies and managed services without it: a waiter tries again
    /// after a pause that doubles from `first` up to `max`, drawn at random from the pause's
    /// upper half (Redisson's spin lock). Costs a round trip per attempt and wakes later than a
    /// message would; releases within this client still wake its own waiters at once.
    Polling {
        /// The first pause.
        first: Duration,
        /// The longest pause.
        max: Duration,
    },
}

impl WaitBy {
    /// Polling with pauses from 5 ms up to 500 ms.
    pub const POLLING: WaitBy = WaitBy::Polling {
        first: Duration::from_millis(5),
        max: Duration::from_millis(500),
    };
}

impl Default for Config {
    fn default() -> Self {
        Config {
            prefix: "redlease".to_owned(),
            watchdog_lease: Duration::from_secs(30),
            timeout: Duration::from_secs(2),
            release_retries: 2,
            drift_factor: 0.01,
            wait_by: WaitBy::PubSub,
            replicas: Replicas::Off,
            fence_grace: DEFAULT_FENCE_GRACE,
            claim_lease: DEFAULT_CLAIM_LEASE,
            lock_label: LockLabel::off(),
            channel_linger: DEFAULT_CHANNEL_LINGER,
            refuse_evicting_servers: false,
            loss_notice: true,
            loss_notice_delay: DEFAULT_LOSS_NOTICE_DELAY,
        }
    }
}

impl Config {
    /// How long a waiter's queue entry outlives the wait it is told: the time its next attempt may take to land.
    pub(crate) fn queue_slack(&self) -> Duration {
        self.claim_lease.max(self.timeout)
    }

    /// The clock drift allowance for a lease: `lease × drift_factor + 2 ms`.
    pub(crate) fn drift(&self, lease: Duration) -> Duration {
        lease.mul_f64(self.drift_factor.clamp(0.0, 0.5)) + Duration::from_millis(2)
    }

    /// Settings that work but invite lost leases, as a sentence for the log.
    pub(crate) fn risks(&self) -> Option<String> {
        (self.watchdog_lease < self.timeout * 3).then(|| {
            format!(
                "watchdog lease {:?} is under three times the timeout {:?}: a slow renewal may land after the lease ran out",
                self.watchdog_lease, self.timeout
            )
        })
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if self.prefix.is_empty() {
            return Err(Error::InvalidArgument(
                "the key prefix must not be empty".into(),
            ));
        }

        // A brace in the prefix would change the Redis Cluster hash tag of the lock's keys
        // (`a{}:{name}` has an empty tag), scattering one lock's keys over several slots.
        if self.prefix.contains(['{', '}']) {
            return Err(Error::InvalidArgument(
                "the key prefix must not contain `{` or `}`".into(),
            ));
        }
        lease_ms("watchdog lease", self.watchdog_lease)?;
        check_duration("timeout", self.timeout)?;
        if !(0.0..0.5).contains(&self.drift_factor) {
            return Err(Error::InvalidArgument(format!(
                "drift factor {} is outside 0.0..0.5",
                self.drift_factor
            )));
        }
        if let WaitBy::Polling { first, max } = self.wait_by {
            check_duration("polling pause", first)?;
            check_duration("longest polling pause", max)?;
            if max < first {
                return Err(Error::InvalidArgument(format!(
                    "the longest polling pause {max:?} is shorter than the first {first:?}"
                )));
            }
        }
        self.replicas.validate()?;
        lease_ms("claim lease", self.claim_lease)?;
        if self.claim_lease < Duration::from_millis(100) {
            // A grant must outlive its message and the grantee's claim, or it passes from
            // waiter to waiter unclaimed.
            return Err(Error::InvalidDuration {
                what: "claim lease",
                reason: format!("{:?} is under the minimum of 100 ms", self.claim_lease),
            });
        }
        if self.claim_lease > Duration::from_secs(3600) {
            return Err(Error::InvalidDuration {
                what: "claim lease",
                reason: format!("{:?} exceeds the maximum of 1 hour", self.claim_lease),
            });
        }
        if let WaitBy::Polling { max, .. } = self.wait_by
            && max * 2 > self.claim_lease
        {
            // A polling waiter claims a lock given to it at its next poll: within the claim
            // lease, or the grant passes on and the lock idles for a claim lease each time.
            return Err(Error::InvalidArgument(format!(
                "the longest polling pause {max:?} must be at most half the claim lease {:?}",
                self.claim_lease
            )));
        }
        // Zero is fine for these: no grace, no linger.
        for (what, value) in [
            ("channel linger", self.channel_linger),
            ("fence grace", self.fence_grace),
            ("loss notice delay", self.loss_notice_delay),
        ] {
            if value > MAX_DURATION {
                return Err(Error::InvalidDuration {
                    what,
                    reason: format!("{value:?} exceeds the maximum of {MAX_DURATION:?}"),
                });
            }
        }
        Ok(())
    }
}

impl Replicas {
    /// Rejects a zero (blocks forever) or absurd timeout and a `Wait` for no replica.
    pub(crate) fn validate(&self) -> Result<()> {
        match *self {
            Replicas::Off => Ok(()),
            Replicas::Wait { replicas, timeout } => {
                if replicas == 0 {
                    return Err(Error::InvalidArgument(
                        "Replicas::Wait needs at least one replica; use Replicas::Off for none"
                            .into(),
                    ));
                }
                check_timeout(timeout)
            }
            Replicas::Auto { timeout } => check_timeout(timeout),
        }
    }
}

/// A WAIT timeout: whole milliseconds, at least 1 (`WAIT n 0` would block forever).
fn check_timeout(timeout: Duration) -> Result<()> {
    lease_ms("replica wait timeout", timeout).map(|_| ())
}

/// Rejects zero and absurd durations with an error naming the argument.
pub(crate) fn check_duration(what: &'static str, value: Duration) -> Result<Duration> {
    if value.is_zero() {
        return Err(Error::InvalidDuration {
            what,
            reason: "must be greater than zero".into(),
        });
    }
    if value > MAX_DURATION {
        return Err(Error::InvalidDuration {
            what,
            reason: format!("{value:?} exceeds the maximum of {MAX_DURATION:?}"),
        });
    }
    Ok(value)
}

/// Validates a lease and converts it to the whole milliseconds PEXPIRE takes (at least 1 ms).
pub(crate) fn lease_ms(what: &'static str, lease: Duration) -> Result<u64> {
    check_duration(what, lease)?;
    let ms = lease.as_millis();
    if ms == 0 {
        return Err(Error::InvalidDuration {
            what,
            reason: "must be at least 1 millisecond".into(),
        });
    }
    // MAX_DURATION keeps this far below u64::MAX.
    Ok(ms as u64)
}
