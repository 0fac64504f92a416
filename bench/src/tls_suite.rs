//! T1: W1 (one caller, lock+unlock pairs) against one redis-server through its plain port and
//! through its TLS port, in the same run for the ratio: the price of TLS (`docs/tls.md`); the
//! floor (two bare EVALSHA round trips through redis-rs) both ways shows TLS's own price.

use std::path::PathBuf;

use crate::config::Counts;
use crate::runner::Runner;

pub const T1: &str = "T1 W1 over TLS";
/// The label's first word, as `--only` names it.
pub const SELECTOR: &str = "T1";

pub const PLAIN: &str = "redlease plain";
pub const TLS: &str = "redlease TLS";
pub const FLOOR_PLAIN: &str = "floor plain (2 EVALSHA)";
pub const FLOOR_TLS: &str = "floor TLS (2 EVALSHA)";

/// The server of the T1 rows, as the measuring processes reach it.
#[derive(Clone, Debug)]
pub struct Target {
    /// `redis://` on its plain port.
    pub plain_url: String,
    /// `rediss://` on its TLS port.
    pub tls_url: String,
    /// The CA certificate that makes its TLS certificate trusted.
    pub ca_file: PathBuf,
}

#[cfg(feature = "redlease")]
pub async fn tls(r: &mut Runner, c: &Counts, target: &Target) {
    use std::sync::Arc;

    use crate::redlease_impl::Redlease;
    use crate::workloads::one_caller;

    for name in [FLOOR_PLAIN, FLOOR_TLS] {
        let n = c.w1;
        r.measure(T1, name, |_| {
            let target = target.clone();
            async move {
                let client = if name == FLOOR_TLS {
                    // As redlease does (src/node/deploy/tls.rs): rustls needs a process default.
                    let _ = rustls::crypto::ring::default_provider().install_default();
                    let certs = redis::TlsCertificates {
                        client_tls: None,
                        root_cert: Some(std::fs::read(&target.ca_file)?),
                    };
                    redis::Client::build_with_tls(target.tls_url.as_str(), certs)?
                } else {
                    redis::Client::open(target.plain_url.as_str())?
                };
                crate::floor::pairs_on(vec![client], n).await
            }
        })
        .await;
    }
    for name in [PLAIN, TLS] {
        let n = c.w1;
        r.measure(T1, name, |_| {
            let target = target.clone();
            async move {
                let l = if name == TLS {
                    let ca = std::fs::read(&target.ca_file)?;
                    Redlease::with_tls(&target.tls_url, ca).await?
                } else {
                    Redlease::new(&target.plain_url).await?
                };
                one_caller::run(Arc::new(l), n).await
            }
        })
        .await;
    }
}

#[cfg(not(feature = "redlease"))]
pub async fn tls(r: &mut Runner, _: &Counts, _: &Target) {
    not_applicable(r, "bench built without the `redlease` feature");
}

/// Both rows, when the server could not be started (`why`).
pub fn not_applicable(r: &mut Runner, why: &str) {
    for name in [FLOOR_PLAIN, FLOOR_TLS, PLAIN, TLS] {
        r.not_applicable(T1, name, why);
    }
}
