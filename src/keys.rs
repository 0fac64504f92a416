//! Lock names and the Redis keys derived from them.

use std::sync::Arc;

use crate::error::{Error, Result};

/// Longest accepted lock name in bytes. Keys are copied into every script call and every
/// watchdog batch, so megabyte names would only hide a bug in the caller.
pub const MAX_NAME_LEN: usize = 4096;

/// The keys and channel of one lock. All share the hash tag `{name}`, so on Redis Cluster every
/// script touches a single slot.
///
/// Only the hash key is stored: the others are written straight into the command that needs
/// them ([`Derived`]), because a handle is often made for a single acquisition and formatting
/// four strings per handle showed in the uncontended profile.
#[derive(Debug)]
pub(crate) struct LockKeys {
    pub name: Arc<str>,
    /// `P:{N}`: the hash of owners and hold counts.
    pub hash: Arc<str>,
}

impl LockKeys {
    pub(crate) fn new(prefix: &str, name: &str) -> Result<Self> {
        validate_name(name)?;
        let mut hash = String::with_capacity(prefix.len() + name.len() + 3);
        hash.push_str(prefix);
        hash.push_str(":{");
        hash.push_str(name);
        hash.push('}');
        Ok(LockKeys {
            name: name.into(),
            hash: hash.into(),
        })
    }

    /// `P:{N}:fence`: the fencing counter.
    pub(crate) fn fence(&self) -> Derived<'_> {
        Derived::new(&self.hash, ":fence")
    }

    /// `P:{N}:delay`: the lock-delay marker (see `lua/acquire.lua`).
    pub(crate) fn delay(&self) -> Derived<'_> {
        Derived::new(&self.hash, ":delay")
    }

    /// `P:{N}:unlock`: the stem of the lock's grant channels (`grant_channel`).
    pub(crate) fn channel(&self) -> Derived<'_> {
        Derived::new(&self.hash, ":unlock")
    }

    /// `P:{N}:unlock:<client id>`: where a release tells one client that it granted the lock to
    /// one of its queued waiters (`lua/queue.lua`); only that client listens.
    pub(crate) fn grant_channel(&self, client_id: &str) -> Arc<str> {
        let mut name = self.channel().to_string();
        name.push(':');
        name.push_str(client_id);
        name.into()
    }

    /// `P:{N}:qd`: the waiter queue's entries (`lua/queue.lua`).
    pub(crate) fn queue_entries(&self) -> Derived<'_> {
        Derived::new(&self.hash, ":qd")
    }

    /// `P:{N}:latch:<client id>:<n>`: the latch of one release request; see `lua/release.lua`.
    pub(crate) fn latch<'a>(&'a self, client_id: &'a str, request: u64) -> Derived<'a> {
        Derived {
            parts: [&self.hash, ":latch:", client_id, ":"],
            number: Some(request),
        }
    }
}

/// A key made of a few parts, written into a command without building a `String` first.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Derived<'a> {
    parts: [&'a str; 4],
    number: Option<u64>,
}

impl<'a> Derived<'a> {
    fn new(base: &'a str, suffix: &'static str) -> Self {
        Derived {
            parts: [base, suffix, "", ""],
            number: None,
        }
    }
}

impl std::fmt::Display for Derived<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for part in self.parts {
            f.write_str(part)?;
        }
        match self.number {
            Some(n) => write!(f, "{n}"),
            None => Ok(()),
        }
    }
}

impl redis::ToSingleRedisArg for Derived<'_> {}

impl redis::ToRedisArgs for Derived<'_> {
    fn write_redis_args<W>(&self, out: &mut W)
    where
        W: ?Sized + redis::RedisWrite,
    {
        use std::io::Write as _;
        let mut w = out.writer_for_next_arg();
        // Writing into the command's Vec cannot fail.
        for part in self.parts {
            let _ = w.write_all(part.as_bytes());
        }
        if let Some(n) = self.number {
            let _ = w.write_all(itoa::Buffer::new().format(n).as_bytes());
        }
    }
}

/// One owner's hold of one lock as the client's maps know it (the registry of holds, the
/// owners' turns): the lock's hash key and the owner's field, hashed once when made. An
/// acquisition and its release look these maps up about ten times, and hashing both strings
/// each time, with the reference counts of the pair built for it, was about 1,000 client
/// instructions of an uncontended lock+unlock pair (`bench/scripts/client_cost.sh`).
#[derive(Clone, Debug)]
pub(crate) struct HoldKey {
    pub hash: Arc<str>,
    pub field: Arc<str>,
    code: u64,
}

/// Seeds the codes of [`HoldKey`]s: random per process, so lock names cannot be chosen to
/// collide.
static HOLD_KEY_SEED: std::sync::LazyLock<foldhash::fast::RandomState> =
    std::sync::LazyLock::new(foldhash::fast::RandomState::default);

impl HoldKey {
    pub(crate) fn new(hash: &Arc<str>, field: &Arc<str>) -> HoldKey {
        use std::hash::BuildHasher as _;
        HoldKey {
            hash: hash.clone(),
            field: field.clone(),
            code: HOLD_KEY_SEED.hash_one((&**hash, &**field)),
        }
    }
}

impl std::hash::Hash for HoldKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.code);
    }
}

impl PartialEq for HoldKey {
    fn eq(&self, other: &HoldKey) -> bool {
        let same = |a: &Arc<str>, b: &Arc<str>| Arc::ptr_eq(a, b) || a == b;
        self.code == other.code && same(&self.hash, &other.hash) && same(&self.field, &other.field)
    }
}

impl Eq for HoldKey {}

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
        assert_eq!(keys.fence().to_string(), "p:{orders:{42} x}:fence");
        assert_eq!(&*keys.grant_channel("c"), "p:{orders:{42} x}:unlock:c");
        assert_eq!(
            keys.latch("c", 7).to_string(),
            "p:{orders:{42} x}:latch:c:7"
        );
        let mut cmd = redis::cmd("X");
        cmd.arg(keys.latch("c", 7)).arg(keys.fence());
        let expected = redis::cmd("X")
            .arg("p:{orders:{42} x}:latch:c:7")
            .arg("p:{orders:{42} x}:fence")
            .get_packed_command();
        assert_eq!(cmd.get_packed_command(), expected);
    }

    #[test]
    fn bad_names_are_rejected() {
        assert!(LockKeys::new("p", "").is_err());
        assert!(LockKeys::new("p", "}x").is_err());
        assert!(LockKeys::new("p", &"a".repeat(MAX_NAME_LEN + 1)).is_err());
        assert!(LockKeys::new("p", &"a".repeat(MAX_NAME_LEN)).is_ok());
    }
}
