//! The terms of an acquisition: how long to wait for a lock, and how its lease is kept.

use std::time::{Duration, Instant};

use crate::config::check_duration;
use crate::error::{Error, Result};

/// How a hold's lease is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lease {
    /// Renewed by the watchdog every third of the lease while a guard lives.
    Watchdog(Duration),
    /// Expires after the lease; never renewed.
    Fixed(Duration),
}

impl Lease {
    /// A fixed lease, checked: at least 1 ms, at most [`MAX_DURATION`](crate::config::MAX_DURATION).
    pub(crate) fn fixed(lease: Duration) -> Result<Lease> {
        crate::config::lease_ms("lease", lease)?;
        Ok(Lease::Fixed(lease))
    }

    pub(crate) fn duration(self) -> Duration {
        match self {
            Lease::Watchdog(d) | Lease::Fixed(d) => d,
        }
    }

    /// The lease in milliseconds, as the scripts take it (checked leases fit easily).
    pub(crate) fn ms(self) -> u64 {
        self.duration().as_millis() as u64
    }
}

/// How long an acquisition may wait (single locks, MultiLock and RedLock alike).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Wait {
    Once,
    Until(Instant),
    Forever,
}

impl Wait {
    /// At most `wait`; a zero wait is one attempt (as Redisson's `tryLock(0, ..)`).
    pub(crate) fn until(wait: Duration) -> Result<Wait> {
        if wait.is_zero() {
            return Ok(Wait::Once);
        }
        check_duration("wait", wait)?;
        Instant::now()
            .checked_add(wait)
            .map(Wait::Until)
            .ok_or_else(|| Error::InvalidDuration {
                what: "wait",
                reason: "overflows the clock".into(),
            })
    }

    /// Time left for another attempt: `None` when the wait is spent (or was a single try),
    /// `Some` with `None` inside when unbounded.
    pub(crate) fn remaining(self) -> Option<Option<Duration>> {
        match self {
            Wait::Once => None,
            Wait::Forever => Some(None),
            Wait::Until(at) => match at.checked_duration_since(Instant::now()) {
                Some(left) if !left.is_zero() => Some(Some(left)),
                _ => None,
            },
        }
    }
}
