//! # redlease
//!
//! Reentrant distributed locks on Redis, in the style of Redisson's `RLock`.
//!
//! ```no_run
//! # async fn demo() -> redlease::Result<()> {
//! let client = redlease::Client::connect("redis://127.0.0.1:6379").await?;
//! let lock = client.lock("orders:42")?;
//! let guard = lock.lock().await?; // waits; the watchdog renews the lease while `guard` lives
//! // ... critical section ...
//! guard.unlock().await?;
//! # Ok(()) }
//! ```

mod acquire;
pub mod blocking;
mod client;
mod config;
mod error;
mod guard;
mod hold;
mod keys;
mod lock;
mod node;
mod owner;
mod pubsub;
mod scripts;
mod task;
mod watchdog;

pub use client::{Client, ClientBuilder};
pub use config::{Config, MAX_DURATION};
pub use error::{Error, Result};
pub use guard::LockGuard;
pub use keys::MAX_NAME_LEN;
pub use lock::{Lock, LockStatus};
pub use owner::Owner;
pub use watchdog::RenewStats;
