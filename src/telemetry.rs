//! Metrics and spans: every name in one place, the labels an operator acts on, and the
//! lock-name label a user may opt into.
//!
//! The table of names and meanings is in the crate docs (*Observability*).

use std::borrow::Cow;
use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use metrics::{Key, Label, Level, Metadata};

use crate::error::Result;

pub(crate) const ACQUIRE_WAIT: &str = "redlease_acquire_wait_seconds";
pub(crate) const ACQUIRE_ATTEMPTS: &str = "redlease_acquire_attempts";
pub(crate) const CONTENDED: &str = "redlease_acquire_contended_total";
pub(crate) const WAITING: &str = "redlease_waiting";
pub(crate) const HELD: &str = "redlease_held";
pub(crate) const HOLD_TIME: &str = "redlease_hold_seconds";
pub(crate) const HANDOVERS: &str = "redlease_handovers_total";
pub(crate) const LEASES_LOST: &str = "redlease_leases_lost_total";
pub(crate) const RENEWAL_LAG: &str = "redlease_renewal_lag_seconds";
pub(crate) const LEASE_LEFT_AT_RENEWAL: &str = "redlease_lease_left_at_renewal_seconds";
pub(crate) const BATCH_SIZE: &str = "redlease_batch_size";
pub(crate) const REDLOCK_VOTES: &str = "redlease_redlock_node_votes_total";
/// Writes (acquisitions, renewals) that fewer replicas acknowledged than wanted.
pub(crate) const REPLICAS_SHORT: &str = "redlease_replica_acks_short_total";
/// What a server the client connected to puts at risk (`ServerWarning`), counted at connect.
pub(crate) const SERVER_WARNINGS: &str = "redlease_server_warnings_total";

/// The `kind` label of [`Lock`](crate::Lock) (and of the members of `MultiLock` and `RedLock`).
pub(crate) const LOCK: &str = "lock";
/// The `kind` labels of the family: the read and write sides of a `ReadWriteLock`, a
/// `Semaphore`'s permits, a `PermitSemaphore`'s.
pub(crate) const READ: &str = "read";
pub(crate) const WRITE: &str = "write";
pub(crate) const SEMAPHORE: &str = "semaphore";
pub(crate) const PERMIT: &str = "permit";

/// Records `value` in the histogram `name`.
pub(crate) fn observe(name: &'static str, value: Duration) {
    metrics::histogram!(name).record(value.as_secs_f64());
}

/// Adds one to the counter `name`.
pub(crate) fn count(name: &'static str) {
    metrics::counter!(name).increment(1);
}

/// Counts one server warning of kind `warning` (`eviction`) at connect, labelled with the
/// server's `maxmemory-policy` (a handful of values).
pub(crate) fn server_warning(warning: &'static str, policy: &str) {
    let labels = [
        ("warning", warning.to_owned()),
        ("policy", policy.to_owned()),
    ];
    metrics::counter!(SERVER_WARNINGS, &labels).increment(1);
}

/// What an operator may see of a lock's name in the metrics: nothing (the default), or the
/// group a function maps it to, as the label `lock`.
///
/// Every distinct label value is one more series per labelled metric in your metrics
/// backend, kept for as long as the process lives. Map names to a small, fixed set of groups
/// (`orders:42` → `orders`), never to the name itself when names carry ids. Set it with
/// [`ClientBuilder::lock_label`](crate::ClientBuilder::lock_label).
#[derive(Clone, Default)]
pub struct LockLabel(Option<Arc<Group>>);

/// A user's function from a lock name to its group.
type Group = dyn Fn(&str) -> String + Send + Sync;

impl LockLabel {
    /// No `lock` label (the default): one series per kind and outcome, whatever the names.
    pub fn off() -> LockLabel {
        LockLabel(None)
    }

    /// The label `lock` set to `group(name)` for every lock of the client.
    pub fn mapped(group: impl Fn(&str) -> String + Send + Sync + 'static) -> LockLabel {
        LockLabel(Some(Arc::new(group)))
    }

    /// The series of a lock named `name`, of `kind`.
    pub(crate) fn series(&self, kind: &'static str, name: &str) -> Series {
        Series {
            kind,
            lock: self.0.as_ref().map(|group| group(name)),
        }
    }
}

impl fmt::Debug for LockLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.0 {
            None => "LockLabel::off()",
            Some(_) => "LockLabel::mapped(..)",
        })
    }
}

/// Why a lease was lost: the `reason` label of `redlease_leases_lost_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LostReason {
    /// A fixed lease ran out while its guard lived (or `testing` made a lease lapse).
    Expired,
    /// `force_unlock` through this client took it.
    Forced,
    /// The server no longer had the hold when it was renewed, extended, released or taken
    /// again: deleted or forced by another process, a restart without persistence, a failover.
    ServerLost,
    /// A watchdog lease's validity ran out before a renewal was confirmed: Redis unreachable,
    /// too few replicas acknowledging, or this process stalled.
    RenewalFailed,
    /// `Client::shutdown` gave it back while its guard lived.
    Shutdown,
}

impl LostReason {
    fn label(self) -> &'static str {
        match self {
            LostReason::Expired => "expired",
            LostReason::Forced => "forced",
            LostReason::ServerLost => "server_lost",
            LostReason::RenewalFailed => "renewal_failed",
            LostReason::Shutdown => "shutdown",
        }
    }
}

/// How an acquisition ended: the `outcome` label of `redlease_acquire_wait_seconds`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Acquired,
    /// A single attempt found it held.
    Busy,
    /// The wait ran out.
    Timeout,
    Error,
    /// The caller dropped the future.
    Cancelled,
}

impl Outcome {
    /// Every outcome, in the order of [`Outcome::index`].
    const ALL: [Outcome; 5] = [
        Outcome::Acquired,
        Outcome::Busy,
        Outcome::Timeout,
        Outcome::Error,
        Outcome::Cancelled,
    ];

    fn index(self) -> usize {
        self as usize
    }

    fn label(self) -> &'static str {
        match self {
            Outcome::Acquired => "acquired",
            Outcome::Busy => "busy",
            Outcome::Timeout => "timeout",
            Outcome::Error => "error",
            Outcome::Cancelled => "cancelled",
        }
    }
}

/// Every `kind` label.
const KINDS: [&str; 5] = [LOCK, READ, WRITE, SEMAPHORE, PERMIT];

/// What the metrics macros would give a call in this module.
static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

/// The keys of one kind's per-lock metrics without a `lock` label (the default), made once:
/// a key made at every call allocated its labels and hashed them, several times per
/// acquisition.
struct KindKeys {
    held: Key,
    hold_time: Key,
    contended: Key,
    waiting: Key,
    /// By [`Outcome::index`].
    acquire_wait: [Key; 5],
}

impl KindKeys {
    fn new(kind: &'static str) -> KindKeys {
        let key = |name: &'static str, extra: Option<(&'static str, &'static str)>| {
            Key::from_parts(name, Series { kind, lock: None }.labels(extra))
        };
        KindKeys {
            held: key(HELD, None),
            hold_time: key(HOLD_TIME, None),
            contended: key(CONTENDED, None),
            waiting: key(WAITING, None),
            acquire_wait: Outcome::ALL
                .map(|outcome| key(ACQUIRE_WAIT, Some(("outcome", outcome.label())))),
        }
    }

    /// The keys of `kind`, if it is one of [`KINDS`].
    fn of(kind: &'static str) -> Option<&'static KindKeys> {
        static KEYS: OnceLock<[KindKeys; 5]> = OnceLock::new();
        let i = KINDS.iter().position(|k| *k == kind)?;
        KEYS.get_or_init(|| KINDS.map(KindKeys::new)).get(i)
    }
}

/// The labels every per-lock metric of one lock carries: `kind`, and `lock` when mapped.
#[derive(Debug, Clone)]
pub(crate) struct Series {
    kind: &'static str,
    lock: Option<String>,
}

impl Series {
    /// The made keys of this series, when it has no `lock` label.
    fn keys(&self) -> Option<&'static KindKeys> {
        match self.lock {
            None => KindKeys::of(self.kind),
            Some(_) => None,
        }
    }

    /// The key of metric `name` (with the `extra` label) of this series: `made`'s when the
    /// keys are made, else one made now, as the macros would.
    fn key(
        &self,
        name: &'static str,
        extra: Option<(&'static str, &'static str)>,
        made: impl Fn(&'static KindKeys) -> &'static Key,
    ) -> Cow<'static, Key> {
        match self.keys() {
            Some(keys) => Cow::Borrowed(made(keys)),
            None => Cow::Owned(Key::from_parts(name, self.labels(extra))),
        }
    }

    fn gauge(&self, name: &'static str, made: fn(&KindKeys) -> &Key) -> metrics::Gauge {
        let key = self.key(name, None, made);
        metrics::with_recorder(|r| r.register_gauge(&key, &METADATA))
    }

    fn counter(&self, name: &'static str, made: fn(&KindKeys) -> &Key) -> metrics::Counter {
        let key = self.key(name, None, made);
        metrics::with_recorder(|r| r.register_counter(&key, &METADATA))
    }

    fn histogram(
        &self,
        name: &'static str,
        extra: Option<(&'static str, &'static str)>,
        made: impl Fn(&'static KindKeys) -> &'static Key,
    ) -> metrics::Histogram {
        let key = self.key(name, extra, made);
        metrics::with_recorder(|r| r.register_histogram(&key, &METADATA))
    }

    fn labels(&self, extra: Option<(&'static str, &'static str)>) -> Vec<Label> {
        let mut labels = Vec::with_capacity(3);
        labels.push(Label::from_static_parts("kind", self.kind));
        if let Some(lock) = &self.lock {
            labels.push(Label::new("lock", lock.clone()));
        }
        if let Some((key, value)) = extra {
            labels.push(Label::from_static_parts(key, value));
        }
        labels
    }

    /// A hold began: `held` goes up until [`let_go`](Series::let_go).
    pub(crate) fn hold_began(&self) {
        self.gauge(HELD, |k| &k.held).increment(1.0);
    }

    /// A hold ended (released, lost or given back at shutdown), `held_for` after its grant.
    pub(crate) fn let_go(&self, released_after: Option<Duration>) {
        self.gauge(HELD, |k| &k.held).decrement(1.0);
        if let Some(held_for) = released_after {
            self.histogram(HOLD_TIME, None, |k| &k.hold_time)
                .record(held_for.as_secs_f64());
        }
    }

    /// A lease was lost while its guard lived.
    pub(crate) fn lost(&self, reason: LostReason) {
        let labels = self.labels(Some(("reason", reason.label())));
        metrics::counter!(LEASES_LOST, labels).increment(1);
    }
}

/// One acquisition being measured: started when called, finished with its outcome (or
/// recorded as cancelled when dropped first). While it [`waits`](Acquisition::waits) it counts
/// in `waiting`.
pub(crate) struct Acquisition {
    series: Series,
    called: Instant,
    waiting: bool,
    done: bool,
}

impl Acquisition {
    pub(crate) fn start(series: Series) -> Acquisition {
        Acquisition {
            series,
            called: Instant::now(),
            waiting: false,
            done: false,
        }
    }

    /// The acquisition could not be granted at once and waits: counted as contended once, and
    /// in `waiting` until it ends.
    pub(crate) fn waits(&mut self) {
        if !self.waiting {
            self.waiting = true;
            self.series
                .counter(CONTENDED, |k| &k.contended)
                .increment(1);
            self.series.gauge(WAITING, |k| &k.waiting).increment(1.0);
        }
    }

    /// Records the wait with its outcome; the time from the call.
    pub(crate) fn finish(mut self, outcome: Outcome) -> Duration {
        self.record(outcome)
    }

    /// Records how an acquisition ended, from what it answered: an error, granted (`got`), or
    /// not granted (busy for a `single` attempt, else the wait ran out).
    pub(crate) fn finish_with<T>(self, single: bool, granted: &Result<T>, got: bool) {
        let outcome = match granted {
            Err(_) => Outcome::Error,
            Ok(_) if got => Outcome::Acquired,
            Ok(_) if single => Outcome::Busy,
            Ok(_) => Outcome::Timeout,
        };
        self.finish(outcome);
    }

    fn record(&mut self, outcome: Outcome) -> Duration {
        self.done = true;
        let waited = self.called.elapsed();
        let outcome_label = Some(("outcome", outcome.label()));
        self.series
            .histogram(ACQUIRE_WAIT, outcome_label, |k| {
                &k.acquire_wait[outcome.index()]
            })
            .record(waited.as_secs_f64());
        waited
    }
}

impl Drop for Acquisition {
    fn drop(&mut self) {
        if !self.done {
            self.record(Outcome::Cancelled);
        }
        if self.waiting {
            self.series.gauge(WAITING, |k| &k.waiting).decrement(1.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The made keys are the ones the macros make from the labels.
    #[test]
    fn made_keys_match_the_labels() {
        for kind in KINDS {
            let series = Series { kind, lock: None };
            let Some(keys) = series.keys() else {
                panic!("no keys for {kind}");
            };
            assert_eq!(keys.held, Key::from_parts(HELD, series.labels(None)));
            assert_eq!(
                keys.hold_time,
                Key::from_parts(HOLD_TIME, series.labels(None))
            );
            assert_eq!(
                keys.contended,
                Key::from_parts(CONTENDED, series.labels(None))
            );
            assert_eq!(keys.waiting, Key::from_parts(WAITING, series.labels(None)));
            for outcome in Outcome::ALL {
                let labels = series.labels(Some(("outcome", outcome.label())));
                let key = Key::from_parts(ACQUIRE_WAIT, labels);
                assert_eq!(keys.acquire_wait[outcome.index()], key);
            }
        }
        let mapped = LockLabel::mapped(|name| name.to_string()).series(LOCK, "a");
        assert!(mapped.keys().is_none());
    }
}
