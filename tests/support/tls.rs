//! A TLS-speaking test server: certificates made here with `rcgen` ([`Pki`]: a CA, a server
//! certificate for 127.0.0.1 and localhost, a client certificate), and a [`Server`] with a TLS
//! port beside its plain one. The plain port serves the readiness check and every probe of
//! `support` (`exists`, `pttl`, `command_calls`, ...); clients under test use the TLS port.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

use super::binary::{default_binary, valkey_binary};
use super::host::make_temp_dir;
use super::server::{Builder, Server};

/// A TLS server's port, and a TLS cluster node's bus port: picked free at each start attempt
/// ([`Builder::port_arg`]).
const TLS_PORT: &str = "--tls-port";
const BUS_PORT: &str = "--cluster-port";

/// A CA with one server and one client certificate it signed, all PEM.
#[derive(Clone)]
pub struct Pki {
    pub ca_pem: String,
    pub server_cert_pem: String,
    pub server_key_pem: String,
    pub client_cert_pem: String,
    pub client_key_pem: String,
}

impl Pki {
    /// A fresh CA (so two `Pki`s never trust each other's certificates).
    pub fn new() -> Pki {
        let ca_key = KeyPair::generate().expect("CA key");
        let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "redlease test CA");
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_cert = ca.self_signed(&ca_key).expect("CA certificate");
        let issuer = Issuer::new(ca, ca_key);

        let server_key = KeyPair::generate().expect("server key");
        let mut server = CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()])
            .expect("server params");
        server
            .distinguished_name
            .push(DnType::CommonName, "redlease test server");
        // ClientAuth too: cluster nodes present it to each other on the TLS bus.
        server.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let server_cert = server
            .signed_by(&server_key, &issuer)
            .expect("server certificate");

        let client_key = KeyPair::generate().expect("client key");
        let mut client = CertificateParams::new(Vec::<String>::new()).expect("client params");
        client
            .distinguished_name
            .push(DnType::CommonName, "redlease test client");
        client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let client_cert = client
            .signed_by(&client_key, &issuer)
            .expect("client certificate");

        Pki {
            ca_pem: ca_cert.pem(),
            server_cert_pem: server_cert.pem(),
            server_key_pem: server_key.serialize_pem(),
            client_cert_pem: client_cert.pem(),
            client_key_pem: client_key.serialize_pem(),
        }
    }

    /// Trust this CA; present the client certificate.
    pub fn options(&self) -> redlease::TlsOptions {
        redlease::TlsOptions::new()
            .root_ca_pem(self.ca_pem.clone())
            .client_identity_pem(self.client_cert_pem.clone(), self.client_key_pem.clone())
    }

    /// Trust this CA only (no client certificate).
    pub fn ca_only(&self) -> redlease::TlsOptions {
        redlease::TlsOptions::new().root_ca_pem(self.ca_pem.clone())
    }
}

/// A server listening on a plain port and a TLS port; stopped (by pid) on Drop.
pub struct TlsServer {
    pub server: Server,
    pub tls_port: u16,
    pub pki: Pki,
    /// Its certificate files, while it may read them (a cluster's go once it has started).
    _files: Option<ServerFiles>,
}

/// The server's certificate and key and the CA, in files of a temporary directory removed on
/// drop.
struct ServerFiles {
    dir: PathBuf,
    cert: PathBuf,
    key: PathBuf,
    ca: PathBuf,
}

impl ServerFiles {
    fn write(pki: &Pki) -> ServerFiles {
        let dir = make_temp_dir();
        let write = |name: &str, text: &str| {
            let path = dir.join(name);
            fs::write(&path, text).expect("writing a test certificate");
            path
        };
        ServerFiles {
            cert: write("server.crt", &pki.server_cert_pem),
            key: write("server.key", &pki.server_key_pem),
            ca: write("ca.crt", &pki.ca_pem),
            dir,
        }
    }

    /// `builder` with these files, letting in only clients with a certificate of the CA when
    /// `require_client_cert`.
    fn args(&self, builder: Builder, require_client_cert: bool) -> Builder {
        builder
            .arg("--tls-cert-file")
            .arg(&self.cert)
            .arg("--tls-key-file")
            .arg(&self.key)
            .arg("--tls-ca-cert-file")
            .arg(&self.ca)
            .arg("--tls-auth-clients")
            .arg(if require_client_cert { "yes" } else { "no" })
    }
}

impl Drop for ServerFiles {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

impl TlsServer {
    /// Starts a server with TLS on its own port; with `require_client_cert`, only clients
    /// presenting a certificate of the CA are let in (`--tls-auth-clients yes`). `None`, with
    /// the reason printed, when neither redis-server nor a valkey-server has TLS built in.
    pub fn start(require_client_cert: bool) -> Option<TlsServer> {
        let binary = tls_binary()?;
        let pki = Pki::new();
        let files = ServerFiles::write(&pki);
        let builder = Server::builder().binary(binary).port_arg(TLS_PORT);
        let server = files.args(builder, require_client_cert).start();
        let tls_port = server.port_of(TLS_PORT).expect("the TLS port");
        Some(TlsServer {
            server,
            tls_port,
            pki,
            _files: Some(files),
        })
    }

    /// `rediss://127.0.0.1:TLS_PORT`
    pub fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.tls_port)
    }

    /// How many client connections came in on the TLS port (`CLIENT LIST`, read on the plain
    /// port: its own connection is not counted).
    pub fn tls_connections(&self) -> usize {
        let list: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query(&mut self.server.conn())
            .expect("CLIENT LIST");
        let needle = format!("laddr=127.0.0.1:{} ", self.tls_port);
        list.lines().filter(|line| line.contains(&needle)).count()
    }
}

/// Three primaries (no replicas) formed into a Redis Cluster whose clients and bus speak TLS
/// (`--tls-cluster yes`); plain ports stay open for the probes.
pub struct TlsCluster {
    pub nodes: Vec<TlsServer>,
}

impl TlsCluster {
    /// `None` (reason printed) without a TLS-capable server binary.
    pub fn start() -> Option<TlsCluster> {
        let binary = tls_binary()?;
        let pki = Pki::new();
        let files = ServerFiles::write(&pki);
        let mut nodes = Vec::new();
        let mut bus_ports = Vec::new();
        for _ in 0..3 {
            let builder = Server::builder()
                .binary(&binary)
                .arg("--cluster-enabled")
                .arg("yes")
                .arg("--cluster-node-timeout")
                .arg("1000")
                .port_arg(BUS_PORT)
                .port_arg(TLS_PORT)
                .arg("--tls-cluster")
                .arg("yes");
            let server = files.args(builder, false).start();
            let tls_port = server.port_of(TLS_PORT).expect("the TLS port");
            let bus_port = server.port_of(BUS_PORT).expect("the bus port");
            bus_ports.push(bus_port);
            nodes.push(TlsServer {
                server,
                tls_port,
                pki: pki.clone(),
                _files: None,
            });
        }
        // Slots in three ranges, then every node meets the first (on its TLS port and bus).
        let ranges = [(0, 5460), (5461, 10922), (10923, 16383)];
        for (node, (first, last)) in nodes.iter().zip(ranges) {
            let _: () = redis::cmd("CLUSTER")
                .arg("ADDSLOTSRANGE")
                .arg(first)
                .arg(last)
                .query(&mut node.server.conn())
                .expect("CLUSTER ADDSLOTSRANGE");
        }
        for (node, bus) in nodes.iter().zip(&bus_ports).skip(1) {
            let _: () = redis::cmd("CLUSTER")
                .arg("MEET")
                .arg("127.0.0.1")
                .arg(node.tls_port)
                .arg(*bus)
                .query(&mut nodes[0].server.conn())
                .expect("CLUSTER MEET");
        }
        let settled = super::eventually(Duration::from_secs(10), || {
            nodes.iter().all(|node| {
                let info: String = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query(&mut node.server.conn())
                    .unwrap_or_default();
                info.contains("cluster_state:ok") && info.contains("cluster_known_nodes:3")
            })
        });
        assert!(settled, "the TLS cluster did not settle within 10 s");
        // The servers read their certificates at start.
        drop(files);
        Some(TlsCluster { nodes })
    }

    /// `rediss+cluster://127.0.0.1:T1,127.0.0.1:T2,127.0.0.1:T3`
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|node| format!("127.0.0.1:{}", node.tls_port))
            .collect();
        format!("rediss+cluster://{}", hosts.join(","))
    }
}

/// The first server binary with TLS built in: the default one (`$REDLEASE_SERVER_BIN` or
/// redis-server), else a valkey-server.
fn tls_binary() -> Option<PathBuf> {
    let default = default_binary();
    if has_tls(&default) {
        return Some(default);
    }
    if let Some(valkey) = valkey_binary().filter(|bin| has_tls(bin)) {
        return Some(valkey);
    }
    eprintln!(
        "skipped: neither {default:?} nor a valkey-server has TLS built in (no OpenSSL symbols)"
    );
    None
}

/// Whether `binary` was built with TLS: it names OpenSSL's `SSL_CTX_new` (linked dynamically
/// or statically). A binary not found by path is looked up on `PATH`.
fn has_tls(binary: &Path) -> bool {
    let path = if binary.components().count() > 1 {
        binary.to_path_buf()
    } else {
        match std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join(binary))
                .find(|candidate| candidate.is_file())
        }) {
            Some(found) => found,
            None => return false,
        }
    };
    let Ok(bytes) = fs::read(path) else {
        return false;
    };
    bytes.windows(11).any(|window| window == b"SSL_CTX_new")
}
