//! Metrics and spans: every name in one place.
//!
//! The table of names and meanings is in the crate docs (*Observability*).

use std::time::Duration;

pub(crate) const ACQUIRE_WAIT: &str = "redlease_acquire_wait_seconds";
pub(crate) const ACQUIRE_ATTEMPTS: &str = "redlease_acquire_attempts";
pub(crate) const HOLD_TIME: &str = "redlease_hold_seconds";
pub(crate) const HANDOVERS: &str = "redlease_handovers_total";
pub(crate) const LEASES_LOST: &str = "redlease_leases_lost_total";
pub(crate) const RENEWAL_LAG: &str = "redlease_renewal_lag_seconds";
pub(crate) const LEASE_LEFT_AT_RENEWAL: &str = "redlease_lease_left_at_renewal_seconds";
pub(crate) const BATCH_SIZE: &str = "redlease_batch_size";
pub(crate) const REDLOCK_VOTES: &str = "redlease_redlock_node_votes_total";
/// Writes (acquisitions, renewals) that fewer replicas acknowledged than wanted.
pub(crate) const REPLICAS_SHORT: &str = "redlease_replica_acks_short_total";

/// Records `value` in the histogram `name`.
pub(crate) fn observe(name: &'static str, value: Duration) {
    metrics::histogram!(name).record(value.as_secs_f64());
}

/// Adds one to the counter `name`.
pub(crate) fn count(name: &'static str) {
    metrics::counter!(name).increment(1);
}
