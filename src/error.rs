//! The one error type of the crate.

use std::time::Duration;

/// A specialised `Result` for lock operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong while taking, keeping or giving back a lock.
///
/// Errors are information: a Redis failure is never turned into "not acquired". Use the `is_*`
/// predicates rather than matching on variants when you only need the category.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The lock name is empty or too long.
    #[error("invalid lock name: {reason}")]
    InvalidName {
        /// Why the name was rejected.
        reason: &'static str,
    },
    /// A lease, wait or timeout is zero or too large to be represented.
    #[error("invalid {what}: {reason}")]
    InvalidDuration {
        /// Which argument was rejected (`"lease"`, `"wait"`, ...).
        what: &'static str,
        /// Why it was rejected.
        reason: String,
    },
    /// Any other argument that cannot be used (an empty node list, a bad URL, ...).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The text given to [`LockOptions::metadata`](crate::LockOptions::metadata) cannot be
    /// stored: longer than [`MAX_METADATA_LEN`](crate::MAX_METADATA_LEN) bytes, or with a
    /// control character (a line break would split the CLI's lines).
    #[error("invalid lock metadata: {reason}")]
    InvalidMetadata {
        /// Why it was rejected.
        reason: String,
    },
    /// The current owner holds no hold of this lock, so there is nothing to release.
    #[error("lock `{name}` is not held by this owner")]
    NotHeld {
        /// The lock name.
        name: String,
    },
    /// The lease expired or the key was deleted while the guard was alive.
    #[error("the lease of lock `{name}` was lost")]
    LeaseLost {
        /// The lock name.
        name: String,
    },
    /// A non-reentrant lock was taken again by the owner that already holds it.
    #[error("lock `{name}` is already held by this owner and is not reentrant")]
    WouldDeadlock {
        /// The lock name.
        name: String,
    },
    /// The lock's key exists in Redis with a type other than the lock hash.
    #[error("key `{key}` holds a value that is not a redlease lock (WRONGTYPE)")]
    WrongType {
        /// The Redis key.
        key: String,
    },
    /// Redis did not answer within the configured timeout.
    #[error("{operation} timed out after {timeout:?}")]
    Timeout {
        /// What was being done.
        operation: &'static str,
        /// The limit that was exceeded.
        timeout: Duration,
    },
    /// Redis answered with an error or the connection failed.
    #[error("redis error during {operation}: {source}")]
    Redis {
        /// What was being done.
        operation: &'static str,
        /// The redis-rs error.
        #[source]
        source: redis::RedisError,
    },
    /// A script answered something this version does not understand.
    #[error("unexpected reply from the {script} script: {reply}")]
    Protocol {
        /// The script's name.
        script: &'static str,
        /// The reply, formatted for humans.
        reply: String,
    },
    /// Not enough RedLock nodes granted the lock within the wait.
    #[error(
        "quorum not reached for `{name}`: {acquired} of {nodes} nodes acquired, {held_elsewhere} held elsewhere, {failed} failed or timed out (needed {needed})"
    )]
    Quorum {
        /// The lock name.
        name: String,
        /// How many nodes there are.
        nodes: usize,
        /// How many acquisitions were needed.
        needed: usize,
        /// How many nodes granted the lock in the last attempt.
        acquired: usize,
        /// How many nodes answered that another owner holds it.
        held_elsewhere: usize,
        /// How many nodes failed or timed out.
        failed: usize,
    },
    /// The client was shut down.
    #[error("the client is shut down")]
    Shutdown,
    /// Too few replicas acknowledged an acquisition within the `WAIT` timeout
    /// ([`Replicas`](crate::Replicas)); the grant was given back, so nothing is held.
    #[error(
        "lock `{name}`: {acknowledged} of {wanted} replicas acknowledged the acquisition in time; it was given back"
    )]
    ReplicasUnacknowledged {
        /// The lock name.
        name: String,
        /// How many replicas acknowledged.
        acknowledged: u32,
        /// How many were wanted.
        wanted: u32,
    },
    /// The server answered `WAIT` with an error (some proxies do) while
    /// [`Replicas::Wait`](crate::Replicas::Wait) asked for acknowledgements; the grant was
    /// given back.
    #[error("the server does not support WAIT: {reason}")]
    ReplicasUnsupported {
        /// The server's answer.
        reason: String,
    },
    /// No sentinel knows a master of this name (`SENTINEL MASTER` answered "no such master"):
    /// a wrong name, or sentinels that monitor other masters.
    #[error("no sentinel knows a Redis master named `{name}`")]
    UnknownMaster {
        /// The master name asked for.
        name: String,
    },
    /// The TLS handshake failed: the server's certificate is not vouched for by the CA given
    /// (or the system's), does not name the host, or the server refused our client
    /// certificate. A setting to fix, not an outage.
    #[error("TLS handshake failed during {operation}: {reason}")]
    Tls {
        /// What was being done.
        operation: &'static str,
        /// What the TLS library reported.
        reason: String,
    },
    /// The Redis user (ACL) may not run a command, or touch a key or channel, that this crate
    /// needs: found when the client connects, before any lock is taken.
    #[error("the Redis user lacks the right to {right}: {reason}")]
    NoPermission {
        /// The missing right: a command (`PUBLISH`, `EVALSHA`, ...), or a key or channel pattern.
        right: String,
        /// The server's answer.
        reason: String,
    },
    /// The server refused this client's credentials: it needs a password and none was given
    /// (`NOAUTH`), or the user name or password is wrong (`WRONGPASS`). Put them in the URL
    /// (`redis://user:password@host:port`, or `redis://:password@host:port` for the default
    /// user). A setting to fix, not an outage.
    #[error(
        "authentication failed during {operation}: {reason} (give the user and password in the URL: redis://user:password@host:port)"
    )]
    Auth {
        /// What was being done.
        operation: &'static str,
        /// The server's answer.
        reason: String,
    },
    /// A future of this crate was polled outside a tokio runtime (by another executor, or by
    /// a plain thread): its timers and connections need one. Run it inside a tokio runtime
    /// (`#[tokio::main]`, `#[tokio::test]`, `Runtime::block_on`), or use
    /// `redlease::blocking` (the `blocking` feature), which brings its own.
    #[error(
        "a redlease future was polled outside a tokio runtime; run it in one (#[tokio::main], Runtime::block_on) or use redlease::blocking"
    )]
    NoRuntime,
    /// `redlease::testing::TestServer` (the `testing` feature) could not start a
    /// server: no `redis-server` or `valkey-server` binary was found (the message says how to
    /// install one), or the one found did not start or answer in time (the message has the
    /// end of its log).
    #[error("test server: {reason}")]
    TestServer {
        /// What went wrong, and what to do about it.
        reason: String,
    },
    /// The lock stayed held by another owner for as long as the caller chose to wait: a
    /// `lock_with` (or `acquire_with`) whose [`LockOptions::wait`](crate::LockOptions::wait)
    /// ran out, or `#[redlease::locked(busy = error)]`. Not an outage: Redis answered.
    #[error("lock `{name}` stayed busy for {waited:?}")]
    Busy {
        /// The lock name.
        name: String,
        /// How long each attempt waited for it.
        waited: std::time::Duration,
    },
    /// An acquisition of a lock started while another acquisition of the same lock by the same
    /// implicit owner (this tokio task, or this thread) was still in progress: futures polled
    /// concurrently in one task (`join!`, `select!`, `FuturesUnordered`, ...) share the task's
    /// owner, so admitting both would let them hold the lock at once. Nothing was sent. Run
    /// each critical section under [`Lock::run`](crate::Lock::run) (its own owner, so they
    /// exclude each other), or give each an explicit [`Owner`](crate::Owner). A nested
    /// acquisition (inside the critical section, after the outer one returned) is not this.
    #[error(
        "lock `{name}` is already being acquired by this {owner}: futures polled concurrently in \
         one task share its owner; run each under `Lock::run`, or give each an explicit `Owner`"
    )]
    ConcurrentAcquisition {
        /// The lock name.
        name: String,
        /// The implicit owner both acquisitions had (`task-12`, `thread-3`, `scope-4`).
        owner: String,
    },
    /// The server's `maxmemory-policy` may evict a held lock's key, and the client was built
    /// with [`refuse_evicting_servers`](crate::ClientBuilder::refuse_evicting_servers): found
    /// when the client connects. Fix the server (`CONFIG SET maxmemory-policy noeviction`).
    #[error(
        "the Redis server {node} has maxmemory-policy {policy}, which may evict held locks; set `CONFIG SET maxmemory-policy noeviction`"
    )]
    EvictingServer {
        /// The server: `host:port`, or how the deployment was named.
        node: String,
        /// Its `maxmemory-policy`.
        policy: String,
    },
}

impl Error {
    /// True when Redis could not be reached or did not answer in time.
    pub fn is_unavailable(&self) -> bool {
        match self {
            Error::Timeout { .. } => true,
            Error::Redis { source, .. } => {
                source.is_io_error()
                    || source.is_timeout()
                    || source.is_connection_dropped()
                    || source.is_connection_refusal()
            }
            _ => false,
        }
    }

    /// True when the lock stayed held by another owner for the whole wait ([`Error::Busy`]).
    pub fn is_busy(&self) -> bool {
        matches!(self, Error::Busy { .. })
    }

    /// True when the lease was lost while held.
    pub fn is_lease_lost(&self) -> bool {
        matches!(self, Error::LeaseLost { .. })
    }

    /// True when the lock's key holds a value of another Redis type ([`Error::WrongType`]).
    pub fn is_wrong_type(&self) -> bool {
        matches!(self, Error::WrongType { .. })
    }

    /// True when a non-reentrant lock was taken again by its holder ([`Error::WouldDeadlock`]).
    pub fn is_would_deadlock(&self) -> bool {
        matches!(self, Error::WouldDeadlock { .. })
    }

    /// True when Redis did not answer within the client's timeout ([`Error::Timeout`]).
    pub fn is_timeout(&self) -> bool {
        matches!(self, Error::Timeout { .. })
    }

    /// True when too few RedLock nodes could be reached for a majority ([`Error::Quorum`]).
    pub fn is_quorum(&self) -> bool {
        matches!(self, Error::Quorum { .. })
    }

    /// True when the TLS handshake failed ([`Error::Tls`]).
    pub fn is_tls(&self) -> bool {
        matches!(self, Error::Tls { .. })
    }

    /// True when the Redis user lacks an ACL right the crate needs ([`Error::NoPermission`]).
    pub fn is_no_permission(&self) -> bool {
        matches!(self, Error::NoPermission { .. })
    }

    /// True when the server refused the credentials ([`Error::Auth`]): none given to a server
    /// that needs them (`NOAUTH`), or a wrong user name or password (`WRONGPASS`).
    pub fn is_auth(&self) -> bool {
        matches!(self, Error::Auth { .. })
    }

    /// True when a future of this crate was polled outside a tokio runtime
    /// ([`Error::NoRuntime`]).
    pub fn is_no_runtime(&self) -> bool {
        matches!(self, Error::NoRuntime)
    }

    /// True when a `redlease::testing::TestServer` could not start
    /// ([`Error::TestServer`]).
    pub fn is_test_server(&self) -> bool {
        matches!(self, Error::TestServer { .. })
    }

    /// True when the client was shut down ([`Error::Shutdown`]).
    pub fn is_shutdown(&self) -> bool {
        matches!(self, Error::Shutdown)
    }

    /// True when a script answered something this version does not understand
    /// ([`Error::Protocol`]): a server or version mismatch.
    pub fn is_protocol(&self) -> bool {
        matches!(self, Error::Protocol { .. })
    }

    /// True when too few replicas acknowledged an acquisition, or the server cannot tell
    /// ([`Error::ReplicasUnacknowledged`], [`Error::ReplicasUnsupported`]).
    pub fn is_replicas(&self) -> bool {
        matches!(
            self,
            Error::ReplicasUnacknowledged { .. } | Error::ReplicasUnsupported { .. }
        )
    }

    /// True when an acquisition was refused because the same implicit owner was already
    /// acquiring the lock ([`Error::ConcurrentAcquisition`]).
    pub fn is_concurrent_acquisition(&self) -> bool {
        matches!(self, Error::ConcurrentAcquisition { .. })
    }

    /// True when the caller does not hold the lock it tried to release.
    pub fn is_not_held(&self) -> bool {
        matches!(self, Error::NotHeld { .. })
    }

    /// True when an argument was rejected before anything was sent to Redis.
    pub fn is_invalid_input(&self) -> bool {
        matches!(
            self,
            Error::InvalidName { .. } | Error::InvalidDuration { .. } | Error::InvalidArgument(_)
        )
    }

    /// Wraps a redis-rs error, recognising WRONGTYPE so callers get [`Error::WrongType`], and
    /// a refusal of the credentials ([`Error::Auth`]).
    pub(crate) fn redis(operation: &'static str, key: &str, source: redis::RedisError) -> Self {
        let wrong_type =
            source.code() == Some("WRONGTYPE") || source.to_string().contains("WRONGTYPE");
        if wrong_type {
            Error::WrongType {
                key: key.to_owned(),
            }
        } else {
            Error::Redis { operation, source }.named()
        }
    }

    /// A Redis error that is a refusal of the credentials becomes [`Error::Auth`]; anything
    /// else is unchanged. `NOAUTH` comes from a server asked without a password, `WRONGPASS`
    /// (or redis-rs's own "authentication failed") from a wrong one, in a reply or at connect.
    pub(crate) fn named(self) -> Self {
        let Error::Redis { operation, source } = &self else {
            return self;
        };
        let text = source.to_string();
        let refused = source.kind() == redis::ErrorKind::AuthenticationFailed
            || matches!(source.code(), Some("NOAUTH" | "WRONGPASS"))
            || text.contains("NOAUTH")
            || text.contains("WRONGPASS");
        if refused {
            Error::Auth {
                operation,
                reason: text,
            }
        } else {
            self
        }
    }
}
