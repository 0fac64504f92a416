//! Client configuration: plain data with documented defaults.

use std::time::Duration;

use crate::error::{Error, Result};

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
}

/// How a client's waiters (of every lock kind) learn that a lock, permit or latch may be free.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WaitBy {
    /// One subscriber connection per client; a release publishes a message that wakes the
    /// waiters at once. Waiters also look again when the holder's lease would have run out, so
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
        }
    }
}

impl Config {
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
        Ok(())
    }
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
