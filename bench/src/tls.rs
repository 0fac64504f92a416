//! A private redis-server with a plain port and a TLS port (the T1 rows), and the certificates
//! it uses: a CA and a server certificate for 127.0.0.1, made with rcgen at start into a temp
//! dir (removed on drop; the server is killed on drop through its [`RedisServer`]).

use std::fs;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

use crate::server::{RedisServer, server_bin};

pub struct TlsServer {
    pub server: RedisServer,
    pub tls_port: u16,
    /// Holds `ca.crt` (read by the measuring processes), `server.crt` and `server.key`.
    dir: PathBuf,
}

impl TlsServer {
    /// Makes the certificates and starts the server (pinned to `cpus` when given); clients
    /// need no certificate of their own (`--tls-auth-clients no`).
    pub fn start(cpus: Option<&[usize]>) -> Result<Self> {
        let bin = server_bin();
        if !has_tls(&bin) {
            bail!("{bin} was built without TLS");
        }
        let dir = temp_dir()?;
        let server = Self::start_in(cpus, &dir);
        if server.is_err() {
            let _ = fs::remove_dir_all(&dir);
        }
        let (server, tls_port) = server?;
        Ok(TlsServer {
            server,
            tls_port,
            dir,
        })
    }

    fn start_in(cpus: Option<&[usize]>, dir: &Path) -> Result<(RedisServer, u16)> {
        let pki = Pki::new()?;
        let write = |name: &str, text: &str| -> Result<String> {
            let path = dir.join(name);
            fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
            Ok(path.to_string_lossy().into_owned())
        };
        let extra = [
            "--tls-port".to_string(),
            crate::server::free_port()?.to_string(),
            "--tls-cert-file".into(),
            write("server.crt", &pki.server_cert)?,
            "--tls-key-file".into(),
            write("server.key", &pki.server_key)?,
            "--tls-ca-cert-file".into(),
            write("ca.crt", &pki.ca)?,
            "--tls-auth-clients".into(),
            "no".into(),
        ];
        let tls_port: u16 = extra[1].parse()?;
        let server = RedisServer::start_with(cpus, &extra)?;
        // The plain port answered PING; the TLS port listens by then too, checked all the same.
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", tls_port)).is_err() {
            if Instant::now() > deadline {
                bail!("redis-server's TLS port {tls_port} never listened");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok((server, tls_port))
    }

    /// `rediss://127.0.0.1:TLS_PORT/`
    pub fn tls_url(&self) -> String {
        format!("rediss://127.0.0.1:{}/", self.tls_port)
    }

    /// The CA certificate file that makes the server's certificate trusted.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// A CA and the server certificate it signed (for 127.0.0.1 and localhost), all PEM.
struct Pki {
    ca: String,
    server_cert: String,
    server_key: String,
}

impl Pki {
    fn new() -> Result<Pki> {
        let ca_key = KeyPair::generate()?;
        let mut ca = CertificateParams::new(Vec::<String>::new())?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "redlease bench CA");
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_cert = ca.self_signed(&ca_key)?;
        let issuer = Issuer::new(ca, ca_key);
        let server_key = KeyPair::generate()?;
        let mut server = CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()])?;
        server
            .distinguished_name
            .push(DnType::CommonName, "redlease bench server");
        server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let server_cert = server.signed_by(&server_key, &issuer)?;
        Ok(Pki {
            ca: ca_cert.pem(),
            server_cert: server_cert.pem(),
            server_key: server_key.serialize_pem(),
        })
    }
}

/// A fresh private directory under the system's temp dir.
fn temp_dir() -> Result<PathBuf> {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let dir =
        std::env::temp_dir().join(format!("redlease-bench-tls-{}-{nanos}", std::process::id()));
    fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// Whether the server binary was built with TLS: it names OpenSSL's `SSL_CTX_new` (linked
/// dynamically or statically). A name without a slash is looked up on `PATH`.
fn has_tls(bin: &str) -> bool {
    let path = if bin.contains('/') {
        Some(PathBuf::from(bin))
    } else {
        std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join(bin))
                .find(|candidate| candidate.is_file())
        })
    };
    path.and_then(|p| fs::read(p).ok())
        .is_some_and(|bytes| bytes.windows(11).any(|w| w == b"SSL_CTX_new"))
}
