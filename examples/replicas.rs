//! Replica acknowledgement: take a lock only once a replica has the write, so that a failover
//! right after the acquisition is less likely to forget it.
//!
//! `Replicas::Wait { replicas: 1, .. }` sends `WAIT 1 <timeout>` right behind the acquire
//! script on the same connection. Fewer acknowledgements give the grant back and fail the
//! acquisition with `Error::ReplicasUnacknowledged`; `Replicas::Auto` waits for however many
//! replicas the server has, counted again after a shortfall or a failover (none: no `WAIT` at
//! all). See `docs/replicas.md`
//! for what this does and does not promise.
//!
//! Run it against the primary at `$REDIS_URL` (default `redis://127.0.0.1:6379`):
//!
//! ```text
//! cargo run --example replicas
//! ```
//!
//! Against a server without replicas the strict lock fails (0 of 1 acknowledged) and the
//! `Auto` one succeeds without waiting.

use std::time::Duration;

use redlease::{Client, Error, Replicas};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    // Every lock of this client waits for whatever replicas the primary has.
    let client = Client::builder(&url)
        .replicas(Replicas::Auto {
            timeout: Duration::from_millis(100),
        })
        .build()
        .await?;

    let guard = client.lock("example:replicas:auto")?.lock().await?;
    println!("auto: acquired (acknowledged by every replica connected, if any)");
    guard.unlock().await?;

    // This one insists on one replica, whatever the client's setting.
    let strict = client
        .lock("example:replicas:strict")?
        .replicas(Replicas::Wait {
            replicas: 1,
            timeout: Duration::from_millis(100),
        });
    match strict.try_lock().await {
        Ok(Some(guard)) => {
            println!("strict: acquired and acknowledged by a replica");
            // The watchdog's renewals wait too; a renewal the replica misses puts the guard at
            // risk, and it is lost if none is acknowledged before its validity runs out.
            println!("at risk: {}", guard.is_at_risk());
            guard.unlock().await?;
        }
        Ok(None) => println!("strict: held by someone else"),
        Err(Error::ReplicasUnacknowledged {
            acknowledged,
            wanted,
            ..
        }) => {
            println!("strict: {acknowledged} of {wanted} replicas acknowledged; nothing is held");
        }
        Err(e) => return Err(e.into()),
    }
    client.shutdown().await?;
    Ok(())
}
