//! [`CountDownLatch`]: wait until N parties have counted down.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::family::{Attempt, FamilyKeys, Reply, Wake, wait_for};
use crate::node::FamilyScript;
use crate::options::{LockOptions, positive};
use crate::shared::Client;
use crate::terms::Wait;

static SCRIPT: FamilyScript = FamilyScript::new("latch", include_str!("../../lua/latch.lua"));

/// A count-down latch (Redisson's `RCountDownLatch`): set a count with
/// [`try_set_count`](CountDownLatch::try_set_count), let workers anywhere call
/// [`count_down`](CountDownLatch::count_down), and [`wait`](CountDownLatch::wait) until the count
/// reaches zero.
///
/// Made by [`Client::count_down_latch`]; cheap to clone. A latch at zero has no key; it can be
/// set again once it reached zero. Waiters sleep on the latch's channel and are woken by the
/// count-down that reaches zero (or look again after at most a second without a message); a
/// latch set again at once still releases every waiter of the round that opened.
///
/// ```no_run
/// # async fn demo(client: redlease::Client) -> redlease::Result<()> {
/// let ready = client.count_down_latch("deploy:42:ready")?;
/// ready.try_set_count(3).await?;
/// // ... each of three workers calls `ready.count_down().await?` ...
/// ready.wait().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct CountDownLatch {
    client: Client,
    keys: Arc<FamilyKeys>,
}

impl CountDownLatch {
    pub(crate) fn new(client: Client, name: &str) -> Result<CountDownLatch> {
        let keys = FamilyKeys::new(&client, name, "countdown", "zero")?;
        Ok(CountDownLatch {
            client,
            keys: Arc::new(keys),
        })
    }

    /// The latch's name.
    pub fn name(&self) -> &str {
        &self.keys.name
    }

    /// The Redis key holding the count.
    pub fn key(&self) -> &str {
        &self.keys.key
    }

    async fn call(&self, op: &str, n: u32) -> Result<Reply> {
        self.client.inner.check_open()?;
        let n = itoa::Buffer::new().format(n).to_owned();
        self.keys.send(&self.client, &SCRIPT, &[op, &n]).await
    }

    /// Sets the count to `count` if the latch is at zero: `true` when this call set it.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a zero count; Redis failures; a key of another kind.
    ///
    /// # Cancel safety
    /// Dropping the future may leave the change made or not: it may already be on its way to
    /// the server. Nothing else is left behind.
    pub async fn try_set_count(&self, count: u32) -> Result<bool> {
        positive("count", count)?;
        self.call("try_set", count).await?.flag()
    }

    /// Counts down by one and returns the count left; the one that reaches zero wakes every
    /// waiter. At zero it stays at zero.
    ///
    /// Not retried: a reply lost with its connection leaves unknown whether it counted.
    ///
    /// # Errors
    /// Redis failures; a key of another kind.
    ///
    /// # Cancel safety
    /// Dropping the future may leave the change made or not: it may already be on its way to
    /// the server. Nothing else is left behind.
    pub async fn count_down(&self) -> Result<u64> {
        self.call("count_down", 1).await?.count()
    }

    /// The count left (0 when the latch is open).
    ///
    /// # Errors
    /// Redis failures, or a key that does not hold a count.
    ///
    /// # Cancel safety
    /// Cancel-safe: it only reads.
    pub async fn count(&self) -> Result<u64> {
        self.look().await.map(|(count, _)| count)
    }

    /// The count left and its round: when it was set, on the server's clock (`lua/latch.lua`);
    /// `(0, 0)` when the latch is open.
    async fn look(&self) -> Result<(u64, u64)> {
        self.client.inner.check_open()?;
        let Some(raw) = self.keys.get(&self.client).await? else {
            return Ok((0, 0));
        };
        let (count, round) = raw.split_once(' ').unwrap_or((&raw, "0"));
        match (count.parse(), round.parse()) {
            (Ok(count), Ok(round)) => Ok((count, round)),
            _ => Err(Error::Protocol {
                script: SCRIPT.name,
                reply: raw,
            }),
        }
    }

    /// Waits until the count is zero.
    ///
    /// # Errors
    /// Redis failures; [`Error::Shutdown`].
    ///
    /// # Cancel safety
    /// Cancel-safe: waiting changes nothing on the server.
    pub async fn wait(&self) -> Result<()> {
        self.wait_within(Wait::Forever).await.map(drop)
    }

    /// Waits as `options` say until the count is zero: `true` when it is, `false` when the
    /// [`wait`](crate::LockOptions::wait) ran out (a zero wait looks once). Only the wait
    /// applies to a latch.
    ///
    /// ```no_run
    /// # async fn demo(ready: redlease::CountDownLatch) -> redlease::Result<()> {
    /// use std::time::Duration;
    /// use redlease::LockOptions;
    ///
    /// if !ready.try_wait_with(LockOptions::new().wait(Duration::from_secs(5))).await? {
    ///     println!("not every worker is ready after 5 s");
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`wait`](CountDownLatch::wait); [`Error::InvalidDuration`] for an absurd wait;
    /// [`Error::InvalidArgument`] for a lease or a count of permits (a latch has neither).
    ///
    /// # Cancel safety
    /// Cancel-safe: waiting changes nothing on the server.
    pub async fn try_wait_with(&self, options: LockOptions) -> Result<bool> {
        self.wait_within(options.wait_only()?).await
    }

    /// Waits for the round the first look finds to open: the count reaching zero, or a later
    /// round seen (set again at once after it opened, before this waiter looked). Later, not
    /// another: a failover to a replica that missed the newest round shows an earlier one,
    /// which opened nothing.
    async fn wait_within(&self, wait: Wait) -> Result<bool> {
        let waited_for = parking_lot::Mutex::new(None);
        let open = wait_for(
            &self.client,
            &self.keys.channel,
            wait,
            Wake::All,
            || async {
                let (count, round) = self.look().await?;
                let waited_for = *waited_for.lock().get_or_insert(round);
                Ok(match count == 0 || round > waited_for {
                    true => Attempt::Done(()),
                    false => Attempt::Again(None),
                })
            },
        )
        .await?;
        Ok(open.is_some())
    }
}
