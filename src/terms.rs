//! The terms of an acquisition: how long to wait for a lock, how its lease is kept, and until
//! when a hold is known valid.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::Notify;

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

/// Until when a hold is known valid, and whether it is known lost: the state behind every
/// guard's `valid_until`, `is_lost` and `lost()` (a lock's hold, a family hold, a RedLock).
/// Lost is sticky: a renewal that lands late does not bring a hold back. A released hold is
/// ended: valid no longer, and not lost by its validity running out (a `lost()` future that
/// outlives the release stays pending, rather than raising an alarm when the lease would have
/// run out); only a loss heard of after the release (a release that found the key gone)
/// still marks it.
pub(crate) struct Validity {
    until: Mutex<Instant>,
    lost: AtomicBool,
    ended: AtomicBool,
    /// Marks, ends and wakes seen (see [`changed_since`](Validity::changed_since)).
    changes: AtomicU64,
    notify: Notify,
}

impl Validity {
    pub(crate) fn new(until: Instant) -> Validity {
        Validity {
            until: Mutex::new(until),
            lost: AtomicBool::new(false),
            ended: AtomicBool::new(false),
            changes: AtomicU64::new(0),
            notify: Notify::new(),
        }
    }

    pub(crate) fn until(&self) -> Instant {
        *self.until.lock()
    }

    /// Sets the validity to `until`, earlier or later (not once ended: a renewal that lands
    /// after the release must not bring it back).
    pub(crate) fn set(&self, until: Instant) {
        let mut valid = self.until.lock();
        if !self.is_ended() {
            *valid = until;
        }
    }

    /// Moves the validity to `until` if that is later (a confirmed renewal); not once ended.
    pub(crate) fn extend(&self, until: Instant) {
        let mut valid = self.until.lock();
        if self.is_ended() {
            return;
        }
        *valid = (*valid).max(until);
    }

    /// Moves the validity to `until` if that is earlier.
    pub(crate) fn cap(&self, until: Instant) {
        let mut valid = self.until.lock();
        *valid = (*valid).min(until);
    }

    /// Ends it (its hold was released): valid until now at most, and from now on it never runs
    /// out ([`ran_out`](Self::ran_out)), so only a mark makes it lost.
    pub(crate) fn end(&self) {
        {
            // Under the lock `set` and `extend` check it under: none moves it after this.
            let mut valid = self.until.lock();
            *valid = (*valid).min(Instant::now());
            self.ended.store(true, Ordering::Release);
        }
        self.changes.fetch_add(1, Ordering::AcqRel);
        self.notify.notify_waiters();
    }

    /// Whether its hold was released.
    pub(crate) fn is_ended(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }

    /// Whether it was marked lost.
    pub(crate) fn is_marked(&self) -> bool {
        self.lost.load(Ordering::Acquire)
    }

    /// Whether the validity has run out; never once ended (a released hold is not lost to
    /// its lease, so every kind's `is_lost` needs no case of its own for it).
    pub(crate) fn ran_out(&self) -> bool {
        !self.is_ended() && Instant::now() >= self.until()
    }

    /// Marks it lost; the first time only, runs `first` (logs, metrics), then wakes every
    /// [`until_lost`](Self::until_lost). True the first time.
    pub(crate) fn mark(&self, first: impl FnOnce()) -> bool {
        if self.lost.swap(true, Ordering::AcqRel) {
            return false;
        }
        first();
        self.changes.fetch_add(1, Ordering::AcqRel);
        self.notify.notify_waiters();
        true
    }

    /// Wakes every [`until_lost`](Self::until_lost) and [`changed_since`](Self::changed_since)
    /// without marking: something they look at besides the mark changed.
    pub(crate) fn wake(&self) {
        self.changes.fetch_add(1, Ordering::AcqRel);
        self.notify.notify_waiters();
    }

    /// How many marks, ends and [`wake`](Self::wake)s it has seen.
    pub(crate) fn changes(&self) -> u64 {
        self.changes.load(Ordering::Acquire)
    }

    /// Resolves once it has seen more than `seen` [`changes`](Self::changes).
    pub(crate) async fn changed_since(&self, seen: u64) {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.changes() != seen {
                return;
            }
            notified.await;
        }
    }

    /// Resolves once `is_lost` says so, asked again at each mark, each time a future of `also`
    /// resolves, and each time the validity runs out (a renewal may have moved it meanwhile).
    pub(crate) async fn until_lost<W>(
        &self,
        is_lost: impl Fn() -> bool,
        mut also: impl FnMut() -> W,
    ) where
        W: Future<Output = ()>,
    {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            // Registered before the check, so a concurrent mark cannot be missed.
            notified.as_mut().enable();
            if is_lost() {
                return;
            }
            if self.is_ended() {
                // Released, not lost: nobody is to be told, unless a loss is heard of later
                // (a release that found the key gone marks it).
                notified.await;
                continue;
            }
            let deadline = tokio::time::Instant::from_std(self.until());
            tokio::select! {
                _ = notified => {}
                _ = also() => {}
                _ = tokio::time::sleep_until(deadline) => {}
            }
        }
    }
}
