//! Lock names and the Redis keys derived from them.

use std::sync::Arc;

use crate::error::{Error, Result};

/// Longest accepted lock name in bytes. Keys are copied into every script call and every
/// watchdog batch, so megabyte names would only hide a bug in the caller.
pub const MAX_NAME_LEN: usize = 4096;

/// The keys and channel of one lock. All share the hash tag `{name}`, so on Redis Cluster every
/// script touches a single slot.
#[derive(Debug)]
pub(crate) struct LockKeys {
    pub name: Arc<str>,
    /// `P:{N}`: the hash of owners and hold counts.
    pub hash: Arc<str>,
    /// `P:{N}:fence`: the fencing counter.
    pub fence: String,
    /// `P:{N}:unlock`: the channel waiters listen on.
    pub channel: Arc<str>,
}

impl LockKeys {
    pub fn new(prefix: &str, name: &str) -> Result<Self> {
        validate_name(name)?;
        let hash: Arc<str> = format!("{prefix}:{{{name}}}").into();
        Ok(LockKeys {
            name: name.into(),
            fence: format!("{hash}:fence"),
            channel: format!("{hash}:unlock").into(),
            hash,
        })
    }

    /// A key for one release request; see `lua/release.lua`.
    pub fn latch(&self, request_id: &str) -> String {
        format!("{}:latch:{request_id}", self.hash)
    }
}

fn validate_name(name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::InvalidName {
            reason: "the name is empty",
        });
    }
    if name.len() > MAX_NAME_LEN {
        return Err(Error::InvalidName {
            reason: "the name is longer than 4096 bytes",
        });
    }
    // `P:{}x}` would make the hash tag empty, and Redis Cluster would then hash each key of the
    // lock whole, scattering them over different slots.
    if name.starts_with('}') {
        return Err(Error::InvalidName {
            reason: "the name must not start with `}`",
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_share_one_hash_tag() {
        let Ok(keys) = LockKeys::new("p", "orders:{42} x") else {
            panic!("a name with braces and a space is valid");
        };
        assert_eq!(&*keys.hash, "p:{orders:{42} x}");
        assert_eq!(keys.fence, "p:{orders:{42} x}:fence");
        assert_eq!(&*keys.channel, "p:{orders:{42} x}:unlock");
    }

    #[test]
    fn bad_names_are_rejected() {
        assert!(LockKeys::new("p", "").is_err());
        assert!(LockKeys::new("p", "}x").is_err());
        assert!(LockKeys::new("p", &"a".repeat(MAX_NAME_LEN + 1)).is_err());
        assert!(LockKeys::new("p", &"a".repeat(MAX_NAME_LEN)).is_ok());
    }
}
