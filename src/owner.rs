//! Who holds a lock: the reentrancy identity, and the lock scopes of `Lock::run`.

use std::cell::RefCell;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The identity that holds a lock. Acquisitions by the same owner (of the same [`Client`]) re-enter
/// the lock and count up; any other owner is excluded.
///
/// Which owner an acquisition is made for, first match wins:
/// 1. an explicit owner given with [`Lock::with_owner`](crate::Lock::with_owner);
/// 2. inside the body of [`Lock::run`](crate::Lock::run) (a *lock scope*): the nearest enclosing
///    scope that already holds this lock (so nested acquisitions re-enter), else the innermost
///    scope (so concurrent bodies exclude each other);
/// 3. the current tokio task;
/// 4. the current thread outside a task (the [`blocking`](crate::blocking) API).
///
/// See the crate docs under *Owners* for what each re-enters and excludes.
///
/// [`Client`]: crate::Client
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Owner(Kind);

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Task(tokio::task::Id),
    Thread(u64),
    Explicit(u64),
    Scope(u64),
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

    /// The innermost lock scope ([`Lock::run`](crate::Lock::run)) around the caller, else the
    /// current tokio task, else the current thread.
    pub fn current() -> Owner {
        if let Ok(owner) = SCOPE.try_with(|scope| scope.owner) {
            return owner;
        }
        Owner::current_task_or_thread()
    }

    /// The current tokio task, or the current thread when not inside a task.
    pub(crate) fn current_task_or_thread() -> Owner {
        match tokio::task::try_id() {
            Some(id) => Owner(Kind::Task(id)),
            None => Owner::current_thread(),
        }
    }

    /// Whether this owner is implied by where the code runs (task, thread, scope), rather than
    /// given by the caller with [`Owner::new`].
    pub(crate) fn is_implicit(&self) -> bool {
        !matches!(self.0, Kind::Explicit(_))
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
            Kind::Scope(n) => write!(f, "scope-{n}"),
        }
    }
}

impl fmt::Debug for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Owner({self})")
    }
}

/// One lock scope: its owner, inside the scope that was current where it began.
struct Scope {
    owner: Owner,
    outer: Option<Arc<Scope>>,
}

tokio::task_local! {
    // Task-local, not thread-local: a scope follows its future across worker threads, and a task
    // spawned from the body is a new task with no scope (its own owner).
    static SCOPE: Arc<Scope>;
}

/// Runs `body` as a new lock scope with its own owner, nested in the current one (if any).
pub(crate) fn in_new_scope<F: Future>(body: F) -> impl Future<Output = F::Output> {
    let outer = SCOPE.try_with(Arc::clone).ok();
    let owner = Owner(Kind::Scope(NEXT_EXPLICIT.fetch_add(1, Ordering::Relaxed)));
    SCOPE.scope(Arc::new(Scope { owner, outer }), body)
}

/// Inside lock scopes: the owner of the nearest scope for which `holds` is true, else the
/// innermost scope's owner. `None` outside any scope.
pub(crate) fn scope_owner(holds: impl Fn(Owner) -> bool) -> Option<Owner> {
    SCOPE
        .try_with(|innermost| {
            let mut scope = Some(innermost);
            while let Some(current) = scope {
                if holds(current.owner) {
                    return current.owner;
                }
                scope = current.outer.as_ref();
            }
            innermost.owner
        })
        .ok()
}
