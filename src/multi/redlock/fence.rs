//! Fencing for a RedLock: one token for the whole lock, raised on a majority of nodes.

use std::time::Duration;

use futures_util::future::join_all;

use crate::guard::LockGuard;

/// The largest fencing counter among the granting nodes, once a majority of nodes have been
/// raised to it; `None` when too few confirmed.
pub(super) async fn raise_fence(
    slots: &[Option<LockGuard>],
    quorum: usize,
    limit: Duration,
) -> Option<u64> {
    let token = slots
        .iter()
        .flatten()
        .filter_map(|h| h.hold().token)
        .max()?;
    let raised = join_all(slots.iter().flatten().map(|held| async move {
        let node = &held.client().inner.node;
        let hold = held.hold();
        let raise = node.raise_fence(&hold.keys, token, hold.lease_ms());
        let reply = tokio::time::timeout(limit, raise).await;
        matches!(reply, Ok(Ok(counter)) if counter >= token)
    }))
    .await;
    let confirmed = raised.into_iter().filter(|ok| *ok).count();
    (confirmed >= quorum).then_some(token)
}
