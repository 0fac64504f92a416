//! Who holds a lock: the reentrancy identity.

use std::cell::RefCell;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The identity that holds a lock. Acquisitions by the same owner (of the same [`Client`]) re-enter
/// the lock and count up; any other owner is excluded.
///
/// By default the owner is the current tokio task, or the current thread outside a task (the
/// [`blocking`](crate::blocking) API). An explicit owner from [`Owner::new`] gives real exclusion
/// between futures that run concurrently inside one task; see the crate docs under
/// *Reentrancy*.
///
/// [`Client`]: crate::Client
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Owner(Kind);

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Task(tokio::task::Id),
    Thread(u64),
    Explicit(u64),
}

static NEXT_EXPLICIT: AtomicU64 = AtomicU64::new(1);
static NEXT_THREAD: AtomicU64 = AtomicU64::new(1);

thread_local! {
    // std's ThreadId has no stable integer form; a counter gives short, stable field names.
    static THREAD_NUMBER: u64 = NEXT_THREAD.fetch_add(1, Ordering::Relaxed);
}

impl Owner {
    /// A fresh owner, distinct from every task, thread and other explicit owner of this process.
    #[allow(clippy::new_without_default)]
    pub fn new() -> Owner {
        Owner(Kind::Explicit(
            NEXT_EXPLICIT.fetch_add(1, Ordering::Relaxed),
        ))
    }

    /// The current tokio task, or the current thread when not inside a task.
    pub fn current() -> Owner {
        match tokio::task::try_id() {
            Some(id) => Owner(Kind::Task(id)),
            None => Owner::current_thread(),
        }
    }

    /// The current thread, even inside a tokio task.
    pub fn current_thread() -> Owner {
        Owner(Kind::Thread(THREAD_NUMBER.with(|n| *n)))
    }

    /// The hash field naming this owner of the client `client_id`: `<client uuid>:<owner>`.
    ///
    /// The last one made on each thread is kept: a task that locks again and again (through a
    /// fresh handle each time, as the docs show) gets it without formatting or allocating.
    pub(crate) fn field(&self, client_id: &Arc<str>) -> Arc<str> {
        let make = || -> Arc<str> {
            use std::fmt::Write as _;
            let mut field = String::with_capacity(client_id.len() + 24);
            field.push_str(client_id);
            field.push(':');
            // Writing into a String cannot fail.
            let _ = write!(field, "{self}");
            field.into()
        };
        LAST_FIELD
            .try_with(|last| {
                let mut last = last.borrow_mut();
                match &*last {
                    // The cache holds the client id alive, so pointer equality cannot be fooled
                    // by a new client's id allocated at a freed one's address.
                    Some((id, owner, field)) if Arc::ptr_eq(id, client_id) && owner == self => {
                        field.clone()
                    }
                    _ => {
                        let field = make();
                        *last = Some((client_id.clone(), *self, field.clone()));
                        field
                    }
                }
            })
            // Thread-local storage already torn down (thread exit): just format it.
            .unwrap_or_else(|_| make())
    }
}

/// (client id, owner, field) of the last field made on a thread.
type LastField = Option<(Arc<str>, Owner, Arc<str>)>;

thread_local! {
    static LAST_FIELD: RefCell<LastField> = const { RefCell::new(None) };
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Kind::Task(id) => write!(f, "task-{id}"),
            Kind::Thread(n) => write!(f, "thread-{n}"),
            Kind::Explicit(n) => write!(f, "owner-{n}"),
        }
    }
}

impl fmt::Debug for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Owner({self})")
    }
}
