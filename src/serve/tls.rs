//! TLS for the secure port: the serving certificate (from files, or self-signed at
//! start as the CCM makes one with `--cert-dir`), and a non-blocking rustls stream
//! that the connection state machine reads and writes like a socket.

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ServerConfig, ServerConnection};

/// Where the serving certificate comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CertSource {
    /// `--tls-cert-file` (a PEM chain, leaf first) and `--tls-private-key-file`.
    Files {
        /// The certificate chain.
        cert: PathBuf,
        /// Its private key (PKCS#1, PKCS#8 or SEC1).
        key: PathBuf,
    },
    /// Self-signed for `localhost`, `127.0.0.1` and `hosts`, made at start. With
    /// `--cert-dir`, kept in `route-controller.crt` and `.key` there and reused at the
    /// next start; without, in memory only.
    SelfSigned {
        /// `--cert-dir`, if given.
        cert_dir: Option<PathBuf>,
        /// Names and addresses besides `localhost` and `127.0.0.1`.
        hosts: Vec<String>,
    },
}

/// The self-signed certificate's file name in `--cert-dir`.
pub const SELF_SIGNED_CERT: &str = "route-controller.crt";
/// The self-signed key's file name in `--cert-dir` (mode 0600).
pub const SELF_SIGNED_KEY: &str = "route-controller.key";

/// The rustls configuration for `source`. Errors name the file or flag to fix.
pub fn server_config(source: &CertSource) -> Result<Arc<ServerConfig>, String> {
    let (chain, key) = match source {
        CertSource::Files { cert, key } => (read_chain(cert, "--tls-cert-file")?, read_key(key)?),
        CertSource::SelfSigned { cert_dir, hosts } => self_signed(cert_dir.as_deref(), hosts)?,
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup failed: {e}"))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| {
            format!(
                "the serving certificate and key cannot be used together: {e} (does the key belong to the certificate?)"
            )
        })?;
    // Only HTTP/1.1 is served; a client offering h2 must not pick it.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

fn read_chain(path: &Path, flag: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let pem =
        std::fs::read(path).map_err(|e| format!("{flag} {}: cannot read: {e}", path.display()))?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{flag} {}: not valid PEM: {e}", path.display()))?;
    if chain.is_empty() {
        return Err(format!("{flag} {}: no certificate in it", path.display()));
    }
    Ok(chain)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    let pem = std::fs::read(path).map_err(|e| {
        format!(
            "--tls-private-key-file {}: cannot read: {e}",
            path.display()
        )
    })?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
        format!(
            "--tls-private-key-file {}: not a PEM PKCS#1, PKCS#8 or SEC1 key: {e}",
            path.display()
        )
    })
}

type Pair = (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>);

/// A self-signed pair, reused from `cert_dir` if it holds one.
fn self_signed(cert_dir: Option<&Path>, hosts: &[String]) -> Result<Pair, String> {
    if let Some(dir) = cert_dir {
        let (cert, key) = (dir.join(SELF_SIGNED_CERT), dir.join(SELF_SIGNED_KEY));
        if cert.exists() && key.exists() {
            log::info!(
                "serving with the self-signed certificate {}",
                cert.display()
            );
            return Ok((read_chain(&cert, "--cert-dir")?, read_key(&key)?));
        }
    }
    let mut names = vec!["localhost".to_string(), "127.0.0.1".to_string()];
    names.extend(hosts.iter().filter(|h| !h.is_empty()).cloned());
    names.dedup();
    let mut params = rcgen::CertificateParams::new(names.clone())
        .map_err(|e| format!("cannot make a self-signed certificate for {names:?}: {e}"))?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "route-controller (self-signed)");
    let key = rcgen::KeyPair::generate()
        .map_err(|e| format!("cannot make a key for the self-signed certificate: {e}"))?;
    let cert = params
        .self_signed(&key)
        .map_err(|e| format!("cannot sign the self-signed certificate: {e}"))?;
    if let Some(dir) = cert_dir {
        write_pair(dir, &cert.pem(), &key.serialize_pem())?;
        log::info!(
            "serving with a new self-signed certificate for {}, written to {}",
            names.join(", "),
            dir.join(SELF_SIGNED_CERT).display()
        );
    } else {
        log::info!(
            "serving with a self-signed certificate for {} made at start (give --tls-cert-file for a real one)",
            names.join(", ")
        );
    }
    let der_key = PrivateKeyDer::try_from(key.serialize_der())
        .map_err(|e| format!("the generated key cannot be used: {e}"))?;
    Ok((vec![cert.der().clone()], der_key))
}

fn write_pair(dir: &Path, cert_pem: &str, key_pem: &str) -> Result<(), String> {
    let fail =
        |path: &Path, e: io::Error| format!("--cert-dir {}: cannot write: {e}", path.display());
    std::fs::create_dir_all(dir).map_err(|e| fail(dir, e))?;
    let key_path = dir.join(SELF_SIGNED_KEY);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options
        .open(&key_path)
        .and_then(|mut f| f.write_all(key_pem.as_bytes()))
        .map_err(|e| fail(&key_path, e))?;
    let cert_path = dir.join(SELF_SIGNED_CERT);
    std::fs::write(&cert_path, cert_pem).map_err(|e| fail(&cert_path, e))
}

/// A TLS connection over a non-blocking socket. `read` and `write` behave as on the
/// socket itself (`WouldBlock` when nothing can be done now), and `flush` is
/// `WouldBlock` while encrypted bytes wait for the socket, so the state machine
/// knows when the response has really left.
pub(super) struct TlsStream<S> {
    tls: ServerConnection,
    tcp: S,
}

impl<S: Read + Write> TlsStream<S> {
    pub(super) fn new(config: Arc<ServerConfig>, tcp: S) -> io::Result<TlsStream<S>> {
        let tls = ServerConnection::new(config).map_err(io::Error::other)?;
        Ok(TlsStream { tls, tcp })
    }

    pub(super) fn socket_mut(&mut self) -> &mut S {
        &mut self.tcp
    }

    /// Encrypted bytes still waiting for the socket.
    pub(super) fn wants_write(&self) -> bool {
        self.tls.wants_write()
    }

    /// Sends what rustls has queued until the socket blocks.
    fn send_queued(&mut self) -> io::Result<()> {
        while self.tls.wants_write() {
            match self.tls.write_tls(&mut self.tcp) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Our side is done: a close_notify, then the TCP half-close.
    pub(super) fn close_write(&mut self, shutdown: impl FnOnce(&mut S)) {
        self.tls.send_close_notify();
        let _ = self.send_queued();
        shutdown(&mut self.tcp);
    }
}

impl<S: Read + Write> Read for TlsStream<S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.tls.reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // The peer closed without a close_notify: an end all the same.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
                Err(e) => return Err(e),
            }
            // Handshake messages go out as soon as they are made.
            self.send_queued()?;
            match self.tls.read_tls(&mut self.tcp) {
                Ok(0) => return Ok(0),
                Ok(_) => {
                    if let Err(e) = self.tls.process_new_packets() {
                        // Tell the client why (an alert) before the connection closes.
                        let _ = self.send_queued();
                        return Err(io::Error::new(io::ErrorKind::InvalidData, e));
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }
}

impl<S: Read + Write> Write for TlsStream<S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.send_queued()?;
        if self.tls.wants_write() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = self.tls.writer().write(buf)?;
        self.send_queued()?;
        if n == 0 && !buf.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send_queued()?;
        if self.tls.wants_write() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(())
    }
}
