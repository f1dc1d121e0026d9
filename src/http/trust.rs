//! The certificates a cloud client trusts and presents: the bundled roots, the
//! machine's trust store when it has one, the CA files an operator names, a client
//! certificate where the peer takes one, and an insecure switch where the peer has
//! one.
//!
//! The system store is read as Go's `crypto/x509` reads it on Linux, since the
//! cloud-controller-managers and SDKs an operator compares us with are Go programs:
//! `SSL_CERT_FILE`, else the first distribution bundle that exists; plus every file
//! in `SSL_CERT_DIR` (colon-separated), else in `/etc/ssl/certs` and
//! `/etc/pki/tls/certs`. A static image has none of these, and the bundled roots
//! (Mozilla's, as ureq's default) keep it working. Unreadable files are skipped, as
//! in Go.
//!
//! Nothing here reads the process environment except [`SystemStore::from_process`].

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use ureq::tls::{Certificate, ClientCert, PrivateKey, RootCerts, TlsConfig};

/// Go's `certFiles` for Linux, in its order: the first that exists is read.
const BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt", // Debian, Ubuntu, Gentoo
    "/etc/pki/tls/certs/ca-bundle.crt",   // Fedora, RHEL 6
    "/etc/ssl/ca-bundle.pem",             // OpenSUSE
    "/etc/pki/tls/cacert.pem",            // OpenELEC
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", // CentOS, RHEL 7
    "/etc/ssl/cert.pem",                  // Alpine
];

/// Go's `certDirectories` for Linux: every file in each is read.
const DIRECTORIES: &[&str] = &["/etc/ssl/certs", "/etc/pki/tls/certs"];

/// A CA, client certificate or key that cannot be used, with the file and the option
/// that named it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrustError(pub String);

impl fmt::Display for TrustError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TrustError {}

/// The machine's trust store: the CA certificates found where Go looks for them.
#[derive(Clone, Debug, Default)]
pub struct SystemStore {
    certs: Vec<Certificate<'static>>,
    /// The files and directories certificates came from, for the start-up log.
    sources: Vec<PathBuf>,
}

impl SystemStore {
    /// The store of this process, read once.
    pub fn from_process() -> Arc<SystemStore> {
        static STORE: OnceLock<Arc<SystemStore>> = OnceLock::new();
        STORE
            .get_or_init(|| Arc::new(SystemStore::from_vars(|name| std::env::var(name).ok())))
            .clone()
    }

    /// The store as Go finds it with these `SSL_CERT_FILE` and `SSL_CERT_DIR` values.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> SystemStore {
        let mut store = SystemStore::default();
        let file = get("SSL_CERT_FILE").filter(|v| !v.is_empty());
        let files: Vec<PathBuf> = match &file {
            Some(f) => vec![PathBuf::from(f)],
            None => BUNDLES.iter().map(PathBuf::from).collect(),
        };
        for file in files {
            if let Ok(pem) = std::fs::read(&file) {
                store.add_pem(&pem, file);
                break;
            }
        }
        let dirs: Vec<PathBuf> = match get("SSL_CERT_DIR").filter(|v| !v.is_empty()) {
            Some(d) => d.split(':').map(PathBuf::from).collect(),
            None => DIRECTORIES.iter().map(PathBuf::from).collect(),
        };
        for dir in dirs {
            for file in unique_entries(&dir) {
                if let Ok(pem) = std::fs::read(&file) {
                    store.add_pem(&pem, dir.clone());
                }
            }
        }
        store
    }

    /// How many distinct CA certificates the store holds.
    pub fn len(&self) -> usize {
        self.certs.len()
    }

    /// Whether the machine has no trust store (a static image).
    pub fn is_empty(&self) -> bool {
        self.certs.is_empty()
    }

    fn add_pem(&mut self, pem: &[u8], source: PathBuf) {
        let before = self.certs.len();
        // As Go's AppendCertsFromPEM: blocks that are not certificates are skipped.
        for cert in CertificateDer::pem_slice_iter(pem).map_while(Result::ok) {
            if !self.certs.iter().any(|c| c.der() == cert.as_ref()) {
                self.certs
                    .push(Certificate::from_der(cert.as_ref()).to_owned());
            }
        }
        if self.certs.len() > before && !self.sources.contains(&source) {
            self.sources.push(source);
        }
    }
}

/// Go's `readUniqueDirectoryEntries`: the files of `dir`, less the symbolic links that
/// point into `dir` itself (OpenSSL's hash links to the same certificates).
fn unique_entries(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        // Go's isSameDirSymlink: a link whose target has no `/` is in the directory.
        .filter(|path| match std::fs::read_link(path) {
            Ok(target) => target.to_string_lossy().contains('/'),
            Err(_) => true,
        })
        .filter(|path| path.is_file())
        .collect()
}

/// What one cloud client trusts and presents. Cheap to clone.
///
/// [`Trust::new`] trusts the bundled roots and the machine's store; a provider adds
/// the CA files, client certificate and insecure switch its options name.
#[derive(Clone)]
pub struct Trust {
    system: Arc<SystemStore>,
    /// CA certificates from the files an option named.
    extra: Vec<Certificate<'static>>,
    identity: Option<ClientCert>,
    /// The option that turned verification off, when one did.
    insecure: Option<String>,
    /// The option an operator sets to trust a private CA, named when a certificate
    /// fails to verify.
    ca_option: String,
}

impl fmt::Debug for Trust {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Trust")
            .field("system", &self.system.len())
            .field("extra", &self.extra.len())
            .field("identity", &self.identity.is_some())
            .field("insecure", &self.insecure)
            .field("ca_option", &self.ca_option)
            .finish()
    }
}

impl Trust {
    /// The bundled roots and this machine's store. `ca_option` is what an operator
    /// sets to trust a private CA for this client (`ca-file in cloud.conf`,
    /// `AWS_CA_BUNDLE`), named in the message when a certificate fails to verify.
    pub fn new(ca_option: impl Into<String>) -> Trust {
        Trust::with_system_store(ca_option, SystemStore::from_process())
    }

    /// As [`Trust::new`] with a given system store (tests).
    pub fn with_system_store(ca_option: impl Into<String>, system: Arc<SystemStore>) -> Trust {
        Trust {
            system,
            extra: Vec::new(),
            identity: None,
            insecure: None,
            ca_option: ca_option.into(),
        }
    }

    /// The same trust on another system store (tests: a machine without one).
    pub fn system_store(mut self, system: Arc<SystemStore>) -> Trust {
        self.system = system;
        self
    }

    /// Also trusts the CA certificates of the PEM file `path`, which `option` named.
    pub fn add_ca_file(&mut self, path: &Path, option: &str) -> Result<(), TrustError> {
        let pem = std::fs::read(path).map_err(|e| {
            TrustError(format!(
                "{option}: cannot read the CA file {}: {e}",
                path.display()
            ))
        })?;
        let mut found = 0;
        for cert in CertificateDer::pem_slice_iter(&pem) {
            let cert = cert.map_err(|e| {
                TrustError(format!(
                    "{option}: the CA file {} is not valid PEM: {e}",
                    path.display()
                ))
            })?;
            // What ureq would ignore silently: a CA the client cannot use.
            rustls::RootCertStore::empty()
                .add(cert.clone())
                .map_err(|e| {
                    TrustError(format!(
                        "{option}: certificate #{} in {} cannot be used as a CA: {e}",
                        found + 1,
                        path.display()
                    ))
                })?;
            self.extra
                .push(Certificate::from_der(cert.as_ref()).to_owned());
            found += 1;
        }
        if found == 0 {
            return Err(TrustError(format!(
                "{option}: the CA file {} holds no PEM certificate",
                path.display()
            )));
        }
        Ok(())
    }

    /// Presents the certificate chain and key of these PEM files, which `option`
    /// named. The pair is checked now: ureq would panic on a mismatch at the first
    /// request.
    pub fn set_client_identity(
        &mut self,
        cert: &Path,
        key: &Path,
        option: &str,
    ) -> Result<(), TrustError> {
        let read = |path: &Path| {
            std::fs::read(path)
                .map_err(|e| TrustError(format!("{option}: cannot read {}: {e}", path.display())))
        };
        let (cert_pem, key_pem) = (read(cert)?, read(key)?);
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
            .collect::<Result<_, _>>()
            .map_err(|e| {
                TrustError(format!(
                    "{option}: {} is not valid PEM: {e}",
                    cert.display()
                ))
            })?;
        if chain.is_empty() {
            return Err(TrustError(format!(
                "{option}: {} holds no PEM certificate",
                cert.display()
            )));
        }
        let private = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
            TrustError(format!(
                "{option}: {} holds no usable private key (PKCS#1, SEC1 or PKCS#8 PEM): {e}",
                key.display()
            ))
        })?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| TrustError(format!("TLS setup failed: {e}")))?
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_client_auth_cert(chain.clone(), private)
            .map_err(|e| {
                TrustError(format!(
                    "{option}: the certificate {} and the key {} cannot be used together: {e} \
                     (does the key belong to the certificate?)",
                    cert.display(),
                    key.display()
                ))
            })?;
        let certs: Vec<Certificate<'static>> = chain
            .iter()
            .map(|c| Certificate::from_der(c.as_ref()).to_owned())
            .collect();
        let key = PrivateKey::from_pem(&key_pem).map_err(|e| {
            TrustError(format!(
                "{option}: the key {} cannot be read: {e}",
                key.display()
            ))
        })?;
        self.identity = Some(ClientCert::new_with_certs(&certs, key));
        Ok(())
    }

    /// Turns verification off, because `option` said so. Only for a peer that has
    /// such a switch; the start and `/readyz` say so.
    pub fn set_insecure(&mut self, option: &str) {
        self.insecure = Some(option.to_string());
    }

    /// The option that turned verification off, if one did.
    pub fn insecure(&self) -> Option<&str> {
        self.insecure.as_deref()
    }

    /// What an operator sets to trust a private CA for this client.
    pub fn ca_option(&self) -> &str {
        &self.ca_option
    }

    /// Where the trusted CAs come from, for the start-up log.
    pub fn describe(&self) -> String {
        let system = match self.system.sources.is_empty() {
            true => "no system store".to_string(),
            false => format!(
                "{} from {}",
                self.system.len(),
                self.system
                    .sources
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        let mut out = format!("bundled roots, {system}");
        if !self.extra.is_empty() {
            out.push_str(&format!(", {} from {}", self.extra.len(), self.ca_option));
        }
        if self.identity.is_some() {
            out.push_str(", a client certificate");
        }
        if let Some(option) = &self.insecure {
            out = format!("NONE: verification is off ({option})");
        }
        out
    }

    /// The ureq TLS settings: the bundled, system and extra roots together.
    pub(crate) fn tls_config(&self) -> TlsConfig {
        let mut builder = TlsConfig::builder().client_cert(self.identity.clone());
        if self.insecure.is_some() {
            return builder.disable_verification(true).build();
        }
        if !self.system.is_empty() || !self.extra.is_empty() {
            let roots: Vec<Certificate<'static>> = webpki_root_certs::TLS_SERVER_ROOT_CERTS
                .iter()
                .map(|c| Certificate::from_der(c.as_ref()))
                .chain(self.system.certs.iter().cloned())
                .chain(self.extra.iter().cloned())
                .collect();
            builder = builder.root_certs(RootCerts::from(roots));
        }
        // Else the bundled roots alone: ureq's default, RootCerts::WebPki.
        builder.build()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ca_pem(name: &str) -> String {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let key = rcgen::KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().pem()
    }

    fn dir(label: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("rc-trust-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn vars(pairs: &[(&str, &Path)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.display().to_string()))
            .collect();
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        }
    }

    /// As Go: `SSL_CERT_FILE` replaces the list of bundles, `SSL_CERT_DIR` the list
    /// of directories, every file of a directory is read, and a link to a file of the
    /// same directory (OpenSSL's hash names) is not read twice. Fails if either
    /// variable is ignored or the directory is not read.
    #[test]
    fn ssl_cert_file_and_ssl_cert_dir_are_read_as_go_reads_them() {
        let d = dir("store");
        let file = d.join("bundle.pem");
        std::fs::write(&file, ca_pem("in the file")).unwrap();
        let certs = d.join("certs");
        std::fs::create_dir_all(&certs).unwrap();
        std::fs::write(certs.join("a.pem"), ca_pem("in the directory")).unwrap();
        std::os::unix::fs::symlink("a.pem", certs.join("0a1b2c3d.0")).unwrap();
        std::fs::write(certs.join("README"), "not a certificate").unwrap();

        let store =
            SystemStore::from_vars(vars(&[("SSL_CERT_FILE", &file), ("SSL_CERT_DIR", &certs)]));
        assert_eq!(store.len(), 2, "one from the file, one from the directory");
        assert_eq!(store.sources, vec![file.clone(), certs.clone()]);
        assert_eq!(unique_entries(&certs).len(), 2, "the hash link is skipped");

        let missing = d.join("missing.pem");
        let only_dir = SystemStore::from_vars(vars(&[
            ("SSL_CERT_FILE", &missing),
            ("SSL_CERT_DIR", &certs),
        ]));
        assert_eq!(only_dir.len(), 1);
        let none = SystemStore::from_vars(vars(&[
            ("SSL_CERT_FILE", &missing),
            ("SSL_CERT_DIR", &missing),
        ]));
        assert!(none.is_empty());
    }

    /// A machine without a store (a static image) keeps ureq's bundled roots; with
    /// one, the bundled roots are still there beside it. Fails if a store or a CA
    /// file replaced the bundled roots.
    #[test]
    fn the_bundled_roots_stay_beside_the_store_and_the_ca_files() {
        let static_image = Trust::with_system_store("X", Arc::new(SystemStore::default()));
        assert!(matches!(
            static_image.tls_config().root_certs(),
            RootCerts::WebPki
        ));
        let d = dir("bundled");
        let file = d.join("ca.pem");
        std::fs::write(&file, ca_pem("private")).unwrap();
        let mut with_ca = static_image.clone();
        with_ca.add_ca_file(&file, "ca-file").unwrap();
        match with_ca.tls_config().root_certs() {
            RootCerts::Specific(certs) => assert_eq!(
                certs.len(),
                webpki_root_certs::TLS_SERVER_ROOT_CERTS.len() + 1
            ),
            other => panic!("{other:?}"),
        }
    }

    /// Every unusable file is named with the option that named it.
    #[test]
    fn unusable_files_are_named_with_their_option() {
        let d = dir("bad");
        let mut trust = Trust::with_system_store("X", Arc::new(SystemStore::default()));
        let missing = trust
            .add_ca_file(&d.join("nope.pem"), "ca-file")
            .unwrap_err();
        assert!(missing.0.starts_with("ca-file: cannot read"), "{missing}");
        let text = d.join("text.pem");
        std::fs::write(&text, "hello").unwrap();
        let empty = trust.add_ca_file(&text, "AWS_CA_BUNDLE").unwrap_err();
        assert!(
            empty.0.contains("AWS_CA_BUNDLE") && empty.0.contains("no PEM certificate"),
            "{empty}"
        );

        let cert = rcgen::generate_simple_self_signed(vec!["client".to_string()]).unwrap();
        let other = rcgen::KeyPair::generate().unwrap();
        let cert_path = d.join("client.crt");
        let key_path = d.join("other.key");
        std::fs::write(&cert_path, cert.cert.pem()).unwrap();
        std::fs::write(&key_path, other.serialize_pem()).unwrap();
        let mismatch = trust
            .set_client_identity(&cert_path, &key_path, "cert-file/key-file")
            .unwrap_err();
        assert!(
            mismatch.0.contains("cert-file/key-file") && mismatch.0.contains("does the key belong"),
            "{mismatch}"
        );
        std::fs::write(&key_path, cert.signing_key.serialize_pem()).unwrap();
        trust
            .set_client_identity(&cert_path, &key_path, "cert-file/key-file")
            .expect("the matching key");
    }
}
