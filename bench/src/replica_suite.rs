//! R1: W1 (one caller, lock+unlock pairs) on a primary with one replica, with replica
//! acknowledgement off and with `WAIT 1` behind every acquisition, in the same run for the
//! ratio (`docs/replicas.md`).

#[cfg(feature = "redlease")]
use std::sync::Arc;

use crate::config::Counts;
use crate::runner::Runner;

pub const R1: &str = "R1 W1 replica WAIT";
/// The label's first word, as `--only` names it.
pub const SELECTOR: &str = "R1";

pub const OFF: &str = "redlease Replicas::Off";
pub const WAIT: &str = "redlease Replicas::Wait 1";

#[cfg(feature = "redlease")]
pub async fn replicas(r: &mut Runner, c: &Counts, primary_url: &str) {
    use std::time::Duration;

    use redlease::Replicas;

    use crate::redlease_impl::Redlease;
    use crate::workloads::one_caller;

    let wait = Replicas::Wait {
        replicas: 1,
        timeout: Duration::from_millis(100),
    };
    for (name, replicas) in [(OFF, Replicas::Off), (WAIT, wait)] {
        let n = c.w1;
        r.measure(R1, name, |_| {
            let url = primary_url.to_owned();
            async move {
                let l = Redlease::with_replicas(&url, replicas).await?;
                one_caller::run(Arc::new(l), n).await
            }
        })
        .await;
    }
}

#[cfg(not(feature = "redlease"))]
pub async fn replicas(r: &mut Runner, _: &Counts, _: &str) {
    for name in [OFF, WAIT] {
        r.not_applicable(R1, name, "bench built without the `redlease` feature");
    }
}
