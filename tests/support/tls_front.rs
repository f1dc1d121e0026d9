#![allow(dead_code)]
//! HTTPS in front of a plain-HTTP test double: a CA made for the test (with rcgen, as
//! the serving certificate of `src/serve/tls.rs` is made), a server certificate it
//! signs for 127.0.0.1, `localhost` and every name under `route-controller.test`, and
//! a front that ends TLS and pipes the bytes to the double. So every provider's
//! double is reached over HTTPS without changing it, and a client trusts it only
//! through what the test gives it. With `require_client_cert`, the front also asks
//! for a client certificate the CA signed (OpenStack's `cert-file`/`key-file`).

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use rustls::pki_types::{CertificateDer, PrivateKeyDer};

#[path = "tempdir.rs"]
mod tempdir;
pub use tempdir::TempDir;

/// The domain whose names the server certificate covers (and the proxy of
/// `support/forward_proxy.rs` resolves to 127.0.0.1).
pub const TEST_DOMAIN: &str = "route-controller.test";

/// A CA made for one test, with its PEM written to `ca_path`.
pub struct TestCa {
    pub dir: TempDir,
    pub ca_path: PathBuf,
    pub ca_pem: String,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    server_chain: Vec<CertificateDer<'static>>,
    server_key: Vec<u8>,
}

/// A client certificate the CA signed, written as PEM files.
pub struct ClientFiles {
    pub cert_path: PathBuf,
    pub key_path: PathBuf,
}

impl TestCa {
    pub fn new(label: &str) -> TestCa {
        let dir = TempDir::new(label);
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.distinguished_name.push(
            rcgen::DnType::CommonName,
            format!("route-controller test CA {label}"),
        );
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
        ];
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let ca_cert = params.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::new(params, ca_key);
        let ca_pem = ca_cert.pem();
        let ca_path = dir.write("ca.pem", &ca_pem);

        let mut server = rcgen::CertificateParams::new(vec![
            "127.0.0.1".to_string(),
            "localhost".to_string(),
            format!("*.{TEST_DOMAIN}"),
        ])
        .unwrap();
        server
            .distinguished_name
            .push(rcgen::DnType::CommonName, "test double");
        let server_key = rcgen::KeyPair::generate().unwrap();
        let server_cert = server.signed_by(&server_key, &issuer).unwrap();
        TestCa {
            dir,
            ca_path,
            ca_pem,
            issuer,
            server_chain: vec![server_cert.der().clone()],
            server_key: server_key.serialize_der(),
        }
    }

    /// A client certificate for `name`, signed by this CA.
    pub fn client(&self, name: &str) -> ClientFiles {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        ClientFiles {
            cert_path: self.dir.write(&format!("{name}.crt"), cert.pem()),
            key_path: self.dir.write(&format!("{name}.key"), key.serialize_pem()),
        }
    }

    fn server_config(&self, require_client_cert: bool) -> rustls::ServerConfig {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .unwrap();
        let builder = if require_client_cert {
            let mut roots = rustls::RootCertStore::empty();
            let ca =
                rustls::pki_types::pem::PemObject::from_pem_slice(self.ca_pem.as_bytes()).unwrap();
            roots.add(ca).unwrap();
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .unwrap();
            builder.with_client_cert_verifier(verifier)
        } else {
            builder.with_no_client_auth()
        };
        builder
            .with_single_cert(
                self.server_chain.clone(),
                PrivateKeyDer::try_from(self.server_key.clone()).unwrap(),
            )
            .unwrap()
    }
}

/// A TLS front on 127.0.0.1 for a plain-HTTP backend. Stops accepting when dropped.
pub struct TlsFront {
    pub port: u16,
    stop: Arc<AtomicBool>,
}

impl TlsFront {
    pub fn start(ca: &TestCa, backend: SocketAddr, require_client_cert: bool) -> TlsFront {
        let config = Arc::new(ca.server_config(require_client_cert));
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        thread::spawn(move || {
            for stream in listener.incoming() {
                if stopped.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(stream) = stream else { continue };
                let config = config.clone();
                thread::spawn(move || pipe(stream, config, backend));
            }
        });
        TlsFront { port, stop }
    }

    /// `https://127.0.0.1:<port>` followed by `path`.
    pub fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.port)
    }

    /// `https://<name>.route-controller.test:<port>` followed by `path`: a name only
    /// the test's proxy resolves.
    pub fn named_url(&self, name: &str, path: &str) -> String {
        format!("https://{name}.{TEST_DOMAIN}:{}{path}", self.port)
    }
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop so that it sees the flag.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// Ends TLS on `client` and copies bytes both ways with one backend connection, until
/// either side closes. A failed handshake (a client that does not trust the CA)
/// just closes.
fn pipe(client: TcpStream, config: Arc<rustls::ServerConfig>, backend: SocketAddr) {
    let _ = client.set_read_timeout(Some(Duration::from_millis(20)));
    let mut conn = match rustls::ServerConnection::new(config) {
        Ok(c) => c,
        Err(_) => return,
    };
    let mut client = client;
    let mut tls = rustls::Stream::new(&mut conn, &mut client);
    let Ok(mut upstream) = TcpStream::connect(backend) else {
        return;
    };
    let _ = upstream.set_read_timeout(Some(Duration::from_millis(20)));
    let mut buf = vec![0u8; 64 << 10];
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while std::time::Instant::now() < deadline {
        let mut idle = true;
        match tls.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                idle = false;
                if upstream.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            Err(e) if is_timeout(&e) => {}
            Err(_) => break,
        }
        match upstream.read(&mut buf) {
            Ok(0) => {
                let _ = tls.flush();
                break;
            }
            Ok(n) => {
                idle = false;
                if tls.write_all(&buf[..n]).is_err() || tls.flush().is_err() {
                    break;
                }
            }
            Err(e) if is_timeout(&e) => {}
            Err(_) => break,
        }
        let _ = idle;
    }
    tls.conn.send_close_notify();
    let _ = tls.flush();
    let _ = client.shutdown(Shutdown::Both);
}

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}
