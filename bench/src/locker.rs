//! The two shapes a lock implementation takes in the workloads: async
//! (tokio tasks) and sync (OS threads, for the sync-only peer `redlock`).

use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::Result;

/// Lease given to implementations that need one up front (rslock, redlock,
/// the fixed-lease variants of W5). Long enough never to expire in a workload.
pub const LEASE: Duration = Duration::from_secs(10);

pub trait AsyncLocker: Send + Sync + 'static {
    type Guard: Send + 'static;

    /// Most lock / unlock calls a workload may have in flight at once on
    /// this implementation (when the workload itself chooses how many).
    const MAX_IN_FLIGHT: usize = usize::MAX;

    /// Waits until `key` is held (each implementation's own blocking acquire).
    fn lock(&self, key: &str) -> impl Future<Output = Result<Self::Guard>> + Send;

    fn unlock(&self, guard: Self::Guard) -> impl Future<Output = Result<()>> + Send;

    /// Stops background work of the implementation at the end of a run.
    fn close(&self) -> impl Future<Output = ()> + Send {
        async {}
    }
}

pub trait SyncLocker: Send + Sync + 'static {
    type Guard: Send + 'static;

    /// Waits until `key` is held; gives up with `TimedOut` after `deadline`.
    fn lock(&self, key: &str, deadline: Instant) -> Result<Self::Guard>;

    fn unlock(&self, guard: Self::Guard) -> Result<()>;
}
