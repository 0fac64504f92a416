//! How to ask for any hold: [`LockOptions`] (wait, lease, permits), the terms every kind
//! takes, and the ways to ask a kind derives from them (`lock`, `lock_with`, `try_lock`).

use std::time::Duration;

use crate::error::{Error, Result};
use crate::terms::{Lease, Wait};

/// How to take a lock: how long to wait, how the lease is kept, and (semaphores) how many
/// permits. The one set of terms every kind takes: `lock_with` / `try_lock_with` on
/// [`Lock`](crate::Lock), [`FairLock`](crate::FairLock), the
/// [`ReadWriteLock`](crate::ReadWriteLock)'s sides,
/// [`MultiLock`](crate::MultiLock), [`RedLock`](crate::RedLock) and
/// [`blocking::Lock`](crate::blocking::Lock); `acquire_with` / `try_acquire_with` on the
/// semaphores; [`CountDownLatch::try_wait_with`](crate::CountDownLatch::try_wait_with) (a wait
/// only).
///
/// The default waits as long as it takes, keeps the lease with the watchdog (renewed while
/// the lock is held) and takes one permit, like [`Lock::lock`](crate::Lock::lock).
///
/// ```
/// use std::time::Duration;
/// use redlease::LockOptions;
///
/// // One attempt; if it succeeds, hold for at most 10 s without renewal.
/// let once = LockOptions::new().wait(Duration::ZERO).lease(Duration::from_secs(10));
/// // Wait up to 2 s; the watchdog keeps the lease while held.
/// let patient = LockOptions::new().wait(Duration::from_secs(2));
/// // Three permits of a `Semaphore`, waiting up to 1 s.
/// let three = LockOptions::new().permits(3).wait(Duration::from_secs(1));
/// # let _ = (once, patient, three);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[must_use]
pub struct LockOptions {
    wait: Option<Duration>,
    lease: Option<Duration>,
    permits: Option<u32>,
    metadata: Option<Metadata>,
}

/// Longest [`LockOptions::metadata`] accepted, in bytes: room for a job id, a request id and a
/// trace id, kept inline so that [`LockOptions`] stays `Copy`, and short enough to show on one
/// line of `redlease status` and `list`.
pub const MAX_METADATA_LEN: usize = 128;

/// The text of [`LockOptions::metadata`], inline (so the options stay `Copy`); or why it was
/// refused, reported when the options are used.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Metadata {
    Text {
        len: u8,
        bytes: [u8; MAX_METADATA_LEN],
    },
    TooLong(usize),
    ControlCharacter,
}

const _: () = assert!(MAX_METADATA_LEN <= u8::MAX as usize);

impl Metadata {
    fn new(text: &str) -> Metadata {
        if text.len() > MAX_METADATA_LEN {
            return Metadata::TooLong(text.len());
        }
        if text.chars().any(char::is_control) {
            return Metadata::ControlCharacter;
        }
        let mut bytes = [0; MAX_METADATA_LEN];
        bytes[..text.len()].copy_from_slice(text.as_bytes());
        Metadata::Text {
            // At most MAX_METADATA_LEN, checked above.
            len: text.len() as u8,
            bytes,
        }
    }

    fn checked(&self) -> Result<&str> {
        match self {
            Metadata::Text { len, bytes } => std::str::from_utf8(&bytes[..usize::from(*len)])
                .map_err(|e| Error::InvalidMetadata {
                    reason: e.to_string(),
                }),
            Metadata::TooLong(n) => Err(Error::InvalidMetadata {
                reason: format!("{n} bytes; at most {MAX_METADATA_LEN}"),
            }),
            Metadata::ControlCharacter => Err(Error::InvalidMetadata {
                reason: "a control character (line break, tab, ...)".into(),
            }),
        }
    }
}

impl std::fmt::Debug for Metadata {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.checked() {
            Ok(text) => write!(f, "{text:?}"),
            Err(e) => write!(f, "<{e}>"),
        }
    }
}

impl LockOptions {
    /// Wait as long as it takes; lease kept by the watchdog; one permit.
    pub fn new() -> LockOptions {
        LockOptions::default()
    }

    /// Wait at most `wait` for the lock. `Duration::ZERO` makes one attempt (Redisson's
    /// `tryLock(0, ...)`). Defaults to waiting without limit.
    ///
    /// When the wait runs out, `try_lock_with` answers `None` and `lock_with` fails with
    /// [`Error::Busy`].
    pub fn wait(mut self, wait: Duration) -> LockOptions {
        self.wait = Some(wait);
        self
    }

    /// Hold the lock for `lease` at most, with no renewal: it expires by itself. Defaults to
    /// the watchdog lease, renewed while the lock is held.
    ///
    /// A re-entry (the owner holds the lock already) on other terms never shortens the hold:
    /// a longer fixed lease extends it, and a re-entry under the watchdog makes it renewed
    /// until its last guard is released, so no guard of one hold expires while another one is
    /// renewed. A hold the watchdog renews stays renewed, on its lease, until its last guard
    /// is released, whatever lease a re-entry asks for.
    ///
    /// A [`Semaphore`](crate::Semaphore)'s permits and a
    /// [`CountDownLatch`](crate::CountDownLatch) have no lease: they refuse one with
    /// [`Error::InvalidArgument`].
    pub fn lease(mut self, lease: Duration) -> LockOptions {
        self.lease = Some(lease);
        self
    }

    /// Take `permits` permits at once, for a [`Semaphore`](crate::Semaphore). Defaults to 1.
    ///
    /// Zero permits, and more than one for any other kind (a lock, a
    /// [`PermitSemaphore`](crate::PermitSemaphore)'s single permit), are refused with
    /// [`Error::InvalidArgument`] when the options are used.
    pub fn permits(mut self, permits: u32) -> LockOptions {
        self.permits = Some(permits);
        self
    }

    /// A short text stored with the hold while it lasts: a job id, a request id, who runs
    /// what. [`Lock::status`](crate::Lock::status) shows it with the holder
    /// ([`Holder::metadata`](crate::Holder::metadata)), and so do `redlease status`, `list`
    /// and `watch`. For a [`Lock`](crate::Lock) and a [`FairLock`](crate::FairLock); the other
    /// kinds refuse it with [`Error::InvalidArgument`]. Defaults to none, which costs nothing.
    ///
    /// Stored in the holding client's announcement (beside its host, pid and program) by one
    /// more round trip after the lock is taken (and one before the owner's last release,
    /// which removes it), so it lives while the hold does, and goes with the announcement
    /// when the process ends. A re-entry with metadata replaces the owner's. A hold that was
    /// lost (its lease ran out) takes its metadata away when its guard is dropped.
    ///
    /// # Errors
    /// Using the options fails with [`Error::InvalidMetadata`] when `text` is longer than
    /// [`MAX_METADATA_LEN`] bytes or has a control character. Acquiring fails with the error
    /// of the write when the text could not be stored (the lock is given back).
    ///
    /// ```
    /// use redlease::LockOptions;
    ///
    /// let options = LockOptions::new().metadata("export job 8812, request 5f1c");
    /// # let _ = options;
    /// ```
    pub fn metadata(mut self, text: &str) -> LockOptions {
        self.metadata = Some(Metadata::new(text));
        self
    }

    /// The checked metadata of these options, for the kinds that store it.
    pub(crate) fn checked_metadata(&self) -> Result<Option<&str>> {
        self.metadata.as_ref().map(Metadata::checked).transpose()
    }

    /// Refuses metadata, for kinds that do not store it.
    fn no_metadata(&self) -> Result<()> {
        match self.metadata {
            Some(_) => Err(Error::InvalidArgument(
                "LockOptions::metadata applies to a Lock and a FairLock only".into(),
            )),
            None => Ok(()),
        }
    }

    /// One attempt: `wait(Duration::ZERO)`, what every `try_lock()` asks for.
    pub(crate) fn once() -> LockOptions {
        LockOptions::new().wait(Duration::ZERO)
    }

    /// The lease as given (`None`: the watchdog's), for kinds that check it themselves
    /// (MultiLock, RedLock), with the checked wait; one permit only.
    pub(crate) fn lease_and_wait(&self) -> Result<(Option<Duration>, Wait)> {
        self.one_permit()?;
        self.no_metadata()?;
        Ok((self.lease, self.checked_wait()?))
    }

    /// The checked lease and wait of these options, `watchdog` being the lease kept by renewal
    /// when no lease is given (the lock family's kinds, which have no lease of their own); one
    /// permit only, no metadata.
    pub(crate) fn terms(&self, watchdog: Duration) -> Result<(Lease, Wait)> {
        self.no_metadata()?;
        self.lock_terms(watchdog)
    }

    /// [`terms`](Self::terms), metadata allowed (a [`Lock`](crate::Lock) stores it).
    pub(crate) fn lock_terms(&self, watchdog: Duration) -> Result<(Lease, Wait)> {
        self.one_permit()?;
        let lease = match self.lease {
            Some(lease) => Lease::fixed(lease)?,
            None => {
                crate::config::lease_ms("watchdog lease", watchdog)?;
                Lease::Watchdog(watchdog)
            }
        };
        Ok((lease, self.checked_wait()?))
    }

    /// The checked permits and wait of options for a [`Semaphore`](crate::Semaphore), whose
    /// permits have no lease.
    pub(crate) fn permits_and_wait(&self) -> Result<(u32, Wait)> {
        self.no_lease("a Semaphore's permits have")?;
        self.no_metadata()?;
        let permits = self.permits.unwrap_or(1);
        positive("permits", permits)?;
        Ok((permits, self.checked_wait()?))
    }

    /// The checked wait of options for a [`CountDownLatch`](crate::CountDownLatch), which
    /// takes nothing: no lease, no permits.
    pub(crate) fn wait_only(&self) -> Result<Wait> {
        self.no_lease("a CountDownLatch has")?;
        self.one_permit()?;
        self.no_metadata()?;
        self.checked_wait()
    }

    /// Refuses a lease, for kinds that hold nothing with one (`what` says so in the error).
    fn no_lease(&self, what: &str) -> Result<()> {
        match self.lease {
            Some(_) => Err(Error::InvalidArgument(format!(
                "{what} no lease; LockOptions::lease does not apply"
            ))),
            None => Ok(()),
        }
    }

    /// Refuses a count of permits other than one, for kinds that hold one thing.
    fn one_permit(&self) -> Result<()> {
        match self.permits {
            None | Some(1) => Ok(()),
            Some(0) => positive("permits", 0),
            Some(n) => Err(Error::InvalidArgument(format!(
                "permits ({n}) apply to a Semaphore only; this kind holds one"
            ))),
        }
    }

    /// The checked wait of these options.
    fn checked_wait(&self) -> Result<Wait> {
        match self.wait {
            Some(wait) => Wait::until(wait),
            None => Ok(Wait::Forever),
        }
    }

    /// What `lock_with` answers for an acquisition that ended with `got`: the guard, else
    /// [`Error::Busy`] when the wait ran out (a bounded wait) or [`Error::Shutdown`] (an
    /// unbounded wait ends without the lock only when the client shuts down).
    pub(crate) fn held<G>(&self, name: impl FnOnce() -> String, got: Option<G>) -> Result<G> {
        got.ok_or_else(|| match self.wait {
            Some(waited) => Error::Busy {
                name: name(),
                waited,
            },
            None => Error::Shutdown,
        })
    }
}

/// The ways to ask that a kind derives from its `try_lock_with` (`$try_with`, which does the
/// work and carries the kind's documentation): `lock` (as long as it takes, with the doc
/// comments given), `lock_with` (on `options`' terms, [`Error::Busy`] for `None`) and
/// `try_lock` (one attempt), under the kind's names; `$name` names the object in the error.
macro_rules! ways_to_ask {
    ($guard:ty, $name:ident, [$lock:ident, $with:ident, $try:ident, $try_with:ident] $(#[$doc:meta])*) => {
        $(#[$doc])*
        pub async fn $lock(&self) -> $crate::error::Result<$guard> {
            self.$with($crate::options::LockOptions::new()).await
        }

        #[doc = concat!("The same as [`", stringify!($try_with), "`](Self::", stringify!($try_with), "), but a bounded wait that runs out is an error.")]
        ///
        /// # Errors
        #[doc = concat!("As [`", stringify!($try_with), "`](Self::", stringify!($try_with), "), plus [`Error::Busy`](crate::Error::Busy) when a bounded wait ran out.")]
        ///
        /// # Cancel safety
        #[doc = concat!("As [`", stringify!($lock), "`](Self::", stringify!($lock), ").")]
        pub async fn $with(&self, options: $crate::options::LockOptions) -> $crate::error::Result<$guard> {
            let got = self.$try_with(options).await?;
            options.held(|| self.$name().to_string(), got)
        }

        #[doc = concat!("One attempt: the same as `", stringify!($try_with), "` with a zero wait.")]
        ///
        /// # Errors
        #[doc = concat!("As [`", stringify!($try_with), "`](Self::", stringify!($try_with), ").")]
        ///
        /// # Cancel safety
        #[doc = concat!("As [`", stringify!($lock), "`](Self::", stringify!($lock), ").")]
        pub async fn $try(&self) -> $crate::error::Result<Option<$guard>> {
            self.$try_with($crate::options::LockOptions::once()).await
        }
    };
}
pub(crate) use ways_to_ask;

/// Rejects a zero count of permits (or of a latch) with a typed error.
pub(crate) fn positive(what: &'static str, n: u32) -> Result<()> {
    if n == 0 {
        return Err(Error::InvalidArgument(format!("{what} must be at least 1")));
    }
    Ok(())
}
