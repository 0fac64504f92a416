//! The typed script calls on a deployment: acquisitions (`lock_calls.rs`), releases and
//! withdrawals (`release_calls.rs`), the family's scripts (`family_calls.rs`), acquisitions
//! that wait for replicas (`acked_calls.rs`), renewals by node (`renew_by_node.rs`), scans
//! (`scan.rs`), and reads of a waiter queue (`queue_read.rs`); calls of many callers coalesce
//! into batches (`batch.rs`). They reach the server through `deploy/`; the ones that group
//! keys by node or slot (renewals, scans, the family's batches) ask whether it is a cluster.

pub(in crate::node) mod acked_calls;
pub(in crate::node) mod batch;
pub(in crate::node) mod family_calls;
pub(in crate::node) mod lock_calls;
pub(in crate::node) mod queue_read;
pub(in crate::node) mod release_calls;
pub(in crate::node) mod renew_by_node;
pub(in crate::node) mod scan;
