//! TLS: connect to a `rediss://` server with your own CA (and, for mutual TLS, a client
//! certificate), take a lock, release it.
//!
//! ```text
//! REDIS_URL=rediss://127.0.0.1:6380 REDLEASE_CA=ca.crt \
//!   [REDLEASE_CLIENT_CERT=client.crt REDLEASE_CLIENT_KEY=client.key] \
//!   cargo run --example tls
//! ```
//!
//! Without `REDLEASE_CA` the system's trust store decides. docs/tls.md shows how to start a
//! TLS redis-server to try it.

use redlease::{Client, Error, TlsOptions};

fn read(var: &str) -> redlease::Result<Option<Vec<u8>>> {
    let Ok(path) = std::env::var(var) else {
        return Ok(None);
    };
    std::fs::read(&path)
        .map(Some)
        .map_err(|e| Error::InvalidArgument(format!("{var}={path}: {e}")))
}

#[tokio::main]
async fn main() -> redlease::Result<()> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "rediss://127.0.0.1:6380".into());
    let mut tls = TlsOptions::new();
    if let Some(ca) = read("REDLEASE_CA")? {
        tls = tls.root_ca_pem(ca);
    }
    if let (Some(cert), Some(key)) = (read("REDLEASE_CLIENT_CERT")?, read("REDLEASE_CLIENT_KEY")?) {
        tls = tls.client_identity_pem(cert, key);
    }
    let client = match Client::builder(url.as_str()).tls(tls).build().await {
        Ok(client) => client,
        Err(e) if e.is_tls() => {
            eprintln!("TLS handshake with {url} failed (check REDLEASE_CA): {e}");
            return Err(e);
        }
        Err(e) => return Err(e),
    };
    println!("connected to {url} over TLS as client {}", client.id());
    let lock = client.lock("tls-example")?;
    let guard = lock.lock().await?;
    println!("holding `{}`", lock.name());
    guard.unlock().await?;
    println!("released");
    client.shutdown().await
}
