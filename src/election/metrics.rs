//! The election's metrics (the table is in the crate docs, *Observability*), kept apart from
//! the locks' `telemetry.rs`.

use std::time::Duration;

/// Terms this process won.
pub(crate) const TERMS: &str = "redlease_election_terms_total";
/// From the end of the previous term, as the server recorded it, to this candidate's win.
pub(crate) const TAKEOVER: &str = "redlease_election_takeover_seconds";
/// From the call to `campaign` to its win.
pub(crate) const CAMPAIGN_WAIT: &str = "redlease_election_campaign_wait_seconds";

pub(crate) fn won(campaign_wait: Duration, vacant_for: Option<Duration>) {
    metrics::counter!(TERMS).increment(1);
    metrics::histogram!(CAMPAIGN_WAIT).record(campaign_wait.as_secs_f64());
    if let Some(vacant_for) = vacant_for {
        metrics::histogram!(TAKEOVER).record(vacant_for.as_secs_f64());
    }
}
