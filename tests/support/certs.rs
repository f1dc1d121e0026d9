#![allow(dead_code)]
//! Throwaway certificates for TLS tests, made with the `openssl` command-line tool:
//! a CA, a server certificate for 127.0.0.1, and client certificates with RSA and EC
//! keys in PKCS#1, SEC1 and PKCS#8. Each test binary uses only part of it.
//!
//! The openssl CLI (rather than a Rust crate) because it writes every key format a
//! kubeconfig may contain, including RSA PKCS#1, which pure-Rust generators with
//! `ring` cannot produce. Without it the tests fail with a message saying to install it.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A key type and encoding for a client certificate.
#[derive(Clone, Copy, Debug)]
pub enum KeyFormat {
    RsaPkcs1,
    RsaPkcs8,
    EcSec1,
    EcPkcs8,
}

pub struct Pki {
    dir: PathBuf,
    pub ca_pem: Vec<u8>,
    pub ca_path: PathBuf,
    pub server_cert_pem: Vec<u8>,
    pub server_key_pem: Vec<u8>,
}

pub struct ClientPair {
    pub cert_path: PathBuf,
    pub key_path: PathBuf,
    pub cert_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
}

fn openssl(dir: &Path, args: &[&str]) {
    let output = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run `openssl` ({e}): the TLS tests make throwaway certificates with \
                 the openssl command-line tool; install it (Debian: apt-get install openssl)"
            )
        });
    assert!(
        output.status.success(),
        "openssl {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

const CA_CNF: &str = "[req]\ndistinguished_name = dn\nprompt = no\n[dn]\nCN = route-controller-test-ca\n\
[v3_ca]\nbasicConstraints = critical,CA:TRUE\nkeyUsage = critical,keyCertSign,cRLSign\n\
subjectKeyIdentifier = hash\n";
const SERVER_EXT: &str = "[ext]\nbasicConstraints = CA:FALSE\nkeyUsage = critical,digitalSignature,keyEncipherment\n\
extendedKeyUsage = serverAuth\nsubjectAltName = IP:127.0.0.1\n";
const CLIENT_EXT: &str = "[ext]\nbasicConstraints = CA:FALSE\nkeyUsage = critical,digitalSignature,keyEncipherment\n\
extendedKeyUsage = clientAuth\n";

impl Pki {
    /// A new CA and a server certificate for 127.0.0.1, in `dir`.
    pub fn new(dir: &Path) -> Pki {
        std::fs::write(dir.join("ca.cnf"), CA_CNF).unwrap();
        std::fs::write(dir.join("server.ext"), SERVER_EXT).unwrap();
        std::fs::write(dir.join("client.ext"), CLIENT_EXT).unwrap();
        openssl(
            dir,
            &[
                "genpkey",
                "-algorithm",
                "EC",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-out",
                "ca.key",
            ],
        );
        openssl(
            dir,
            &[
                "req",
                "-x509",
                "-new",
                "-key",
                "ca.key",
                "-config",
                "ca.cnf",
                "-extensions",
                "v3_ca",
                "-days",
                "2",
                "-out",
                "ca.crt",
            ],
        );
        openssl(
            dir,
            &[
                "genpkey",
                "-algorithm",
                "EC",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-out",
                "server.key",
            ],
        );
        openssl(
            dir,
            &[
                "req",
                "-new",
                "-key",
                "server.key",
                "-subj",
                "/CN=127.0.0.1",
                "-out",
                "server.csr",
            ],
        );
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                "server.csr",
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-set_serial",
                "2",
                "-days",
                "2",
                "-extfile",
                "server.ext",
                "-extensions",
                "ext",
                "-out",
                "server.crt",
            ],
        );
        Pki {
            dir: dir.to_path_buf(),
            ca_pem: std::fs::read(dir.join("ca.crt")).unwrap(),
            ca_path: dir.join("ca.crt"),
            server_cert_pem: std::fs::read(dir.join("server.crt")).unwrap(),
            server_key_pem: std::fs::read(dir.join("server.key")).unwrap(),
        }
    }

    /// A client certificate signed by the CA, with its key in `format`.
    pub fn client(&self, name: &str, format: KeyFormat) -> ClientPair {
        let dir = &self.dir;
        let key = format!("{name}.key");
        let raw = format!("{name}.raw.key");
        match format {
            KeyFormat::RsaPkcs1 | KeyFormat::RsaPkcs8 => openssl(
                dir,
                &[
                    "genpkey",
                    "-algorithm",
                    "RSA",
                    "-pkeyopt",
                    "rsa_keygen_bits:2048",
                    "-out",
                    &raw,
                ],
            ),
            KeyFormat::EcSec1 | KeyFormat::EcPkcs8 => openssl(
                dir,
                &[
                    "genpkey",
                    "-algorithm",
                    "EC",
                    "-pkeyopt",
                    "ec_paramgen_curve:P-256",
                    "-out",
                    &raw,
                ],
            ),
        }
        match format {
            KeyFormat::RsaPkcs1 => {
                openssl(dir, &["rsa", "-in", &raw, "-traditional", "-out", &key])
            }
            KeyFormat::EcSec1 => openssl(dir, &["ec", "-in", &raw, "-out", &key]),
            KeyFormat::RsaPkcs8 | KeyFormat::EcPkcs8 => {
                std::fs::copy(dir.join(&raw), dir.join(&key)).unwrap();
            }
        }
        let csr = format!("{name}.csr");
        let crt = format!("{name}.crt");
        openssl(
            dir,
            &[
                "req",
                "-new",
                "-key",
                &key,
                "-subj",
                &format!("/CN={name}"),
                "-out",
                &csr,
            ],
        );
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-set_serial",
                "3",
                "-days",
                "2",
                "-extfile",
                "client.ext",
                "-extensions",
                "ext",
                "-out",
                &crt,
            ],
        );
        let key_pem = std::fs::read(dir.join(&key)).unwrap();
        let header = String::from_utf8_lossy(&key_pem)
            .lines()
            .next()
            .unwrap_or("")
            .to_string();
        let expected = match format {
            KeyFormat::RsaPkcs1 => "-----BEGIN RSA PRIVATE KEY-----",
            KeyFormat::EcSec1 => "-----BEGIN EC PRIVATE KEY-----",
            KeyFormat::RsaPkcs8 | KeyFormat::EcPkcs8 => "-----BEGIN PRIVATE KEY-----",
        };
        assert_eq!(
            header, expected,
            "openssl wrote an unexpected key format for {format:?}"
        );
        ClientPair {
            cert_path: dir.join(&crt),
            key_path: dir.join(&key),
            cert_pem: std::fs::read(dir.join(&crt)).unwrap(),
            key_pem,
        }
    }
}
