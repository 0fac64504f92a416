//! The peer crates, each used as its README / docs show, default retry settings.

pub mod redisson;
pub mod redlock;
pub mod rlock;
pub mod rslock;
