//! Locks over several locks or several servers: [`MultiLock`] (all of them) and [`RedLock`]
//! (a majority of independent masters).
//!
//! Both are built from ordinary [`Lock`](crate::Lock) handles, acquire every member at once
//! rather than one after another, give back partial grants before retrying, and hand out one
//! guard for the whole set.
//!
//! | | [`MultiLock`] | [`RedLock`] |
//! |---|---|---|
//! | members | different resources, any clients | one resource, one lock per independent master |
//! | success | every member granted | `N/2 + 1` granted, with validity left |
//! | renewal | each client's watchdog | the guard's own task; a majority must confirm |
//! | lost when | any member is lost | fewer than a majority hold it, or validity runs out |

mod member;
mod multilock;
mod redlock;

pub use multilock::{MultiLock, MultiLockGuard};
pub use redlock::{RedLock, RedLockGuard};
