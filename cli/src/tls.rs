//! `--tls-ca`, `--tls-cert` and `--tls-key`: the certificates read from their files, checked
//! against the URLs they are meant for, before any connection is made.

use std::path::Path;

use redlease::TlsOptions;

use crate::args::Target;
use crate::exit::{self, Failure};
use crate::nodes::redact;

/// The TLS settings `target` asks for: `None` without any `--tls-*` option (the system's trust
/// store, no client certificate). Exit 64 when a file cannot be read or holds no PEM block of
/// the right kind, or when a URL does not speak TLS (the options would be silently unused).
pub fn options(target: &Target, urls: &[String]) -> Result<Option<TlsOptions>, Failure> {
    if target.tls_ca.is_none() && target.tls_cert.is_none() && target.tls_key.is_none() {
        return Ok(None);
    }
    if let Some(url) = urls.iter().find(|url| !is_tls_url(url)) {
        return Err(Failure::new(
            exit::USAGE,
            format!(
                "--tls-ca, --tls-cert and --tls-key need TLS URLs (rediss://, \
                 rediss+cluster://), not {}",
                redact(url)
            ),
        ));
    }
    let mut options = TlsOptions::new();
    if let Some(ca) = &target.tls_ca {
        options = options.root_ca_pem(read_pem("--tls-ca", ca, "CERTIFICATE")?);
    }
    match (&target.tls_cert, &target.tls_key) {
        (Some(cert), Some(key)) => {
            let cert = read_pem("--tls-cert", cert, "CERTIFICATE")?;
            let key = read_pem("--tls-key", key, "PRIVATE KEY")?;
            options = options.client_identity_pem(cert, key);
        }
        (None, None) => {}
        // clap's `requires` refuses one without the other; kept for a caller that does not.
        _ => {
            return Err(Failure::new(
                exit::USAGE,
                "--tls-cert and --tls-key go together (the client certificate and its key)",
            ));
        }
    }
    Ok(Some(options))
}

/// Whether `url` connects with TLS: `rediss://`, `valkeys://` and their `+cluster` forms.
fn is_tls_url(url: &str) -> bool {
    let scheme = url
        .split_once("://")
        .map(|(scheme, _)| scheme.to_ascii_lowercase())
        .unwrap_or_default();
    matches!(
        scheme.as_str(),
        "rediss" | "valkeys" | "rediss+cluster" | "valkeys+cluster"
    )
}

/// The contents of `path` (given as `flag`), which must hold a PEM block whose label ends with
/// `label` (`CERTIFICATE`; `PRIVATE KEY` also matches `RSA PRIVATE KEY`, `EC PRIVATE KEY`).
fn read_pem(flag: &str, path: &Path, label: &str) -> Result<Vec<u8>, Failure> {
    let text = std::fs::read(path).map_err(|e| {
        Failure::new(
            exit::USAGE,
            format!("{flag}: cannot read {}: {e}", path.display()),
        )
    })?;
    let has_block = String::from_utf8_lossy(&text).lines().any(|line| {
        line.trim()
            .strip_prefix("-----BEGIN ")
            .and_then(|rest| rest.strip_suffix("-----"))
            .is_some_and(|found| found.ends_with(label))
    });
    if !has_block {
        return Err(Failure::new(
            exit::USAGE,
            format!(
                "{flag}: {} holds no PEM {label} (-----BEGIN ...{label}-----)",
                path.display()
            ),
        ));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_schemes() {
        for url in [
            "rediss://h:1",
            "REDISS://h:1",
            "valkeys://h:1",
            "rediss+cluster://a:1,b:2",
            "valkeys+cluster://a:1",
        ] {
            assert!(is_tls_url(url), "{url}");
        }
        for url in [
            "redis://h:1",
            "redis+cluster://a:1",
            "redis+sentinel://a:1/m",
            "rediss",
            "h:1",
        ] {
            assert!(!is_tls_url(url), "{url}");
        }
    }
}
