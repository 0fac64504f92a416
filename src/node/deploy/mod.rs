//! How the client reaches a deployment: one server, a Redis Cluster or a Sentinel group
//! (`shape.rs`, `sentinel.rs`), over TLS (`tls.rs`) as an ACL user (`acl.rs`), dialled by
//! `dial.rs`; what each server is and can do, learnt at connect (`capabilities.rs`); how each
//! command is sent, with its timeouts, retries, NOSCRIPT and cluster
//! transitions (`transport.rs`); the subscriber's connection (`link.rs`); and the replicas'
//! acknowledgements (`replicas.rs`). It knows the lock scripts only as scripts to send (and to
//! rewrite for a cluster's shard channels, `shape.rs`), never the calls made with them.

pub(in crate::node) mod acl;
pub(in crate::node) mod capabilities;
pub(in crate::node) mod dial;
pub(in crate::node) mod link;
pub(in crate::node) mod replicas;
pub(in crate::node) mod sentinel;
pub(in crate::node) mod shape;
pub(in crate::node) mod tls;
pub(in crate::node) mod transport;
