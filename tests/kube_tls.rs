//! TLS against the fake API server with throwaway certificates: a custom CA, client
//! certificates in every key format, and startup errors for bad material.

#[path = "support/certs.rs"]
mod certs;
#[path = "support/fake_apiserver.rs"]
mod fake_apiserver;
#[path = "support/tempdir.rs"]
mod tempdir;

use base64::Engine as _;
use certs::{KeyFormat, Pki};
use fake_apiserver::{FakeApiServer, TlsOptions, node_json};
use route_controller::kube::{Client, ClientOptions, Env, KubeConfig, KubeError, LoadOptions};
use route_controller::model::NodeList;
use tempdir::TempDir;

fn load(path: &std::path::Path) -> Result<KubeConfig, route_controller::kube::ConfigError> {
    KubeConfig::load(
        &LoadOptions {
            kubeconfig: Some(path.to_path_buf()),
            ..LoadOptions::default()
        },
        &Env::empty(),
    )
}

fn kubeconfig(server: &str, cluster_extra: &str, user: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: test\nclusters:\n- name: c\n  cluster:\n    server: {server}\n{cluster_extra}\
         contexts:\n- name: test\n  context:\n    cluster: c\n    user: u\nusers:\n- name: u\n  user:\n{user}"
    )
}

fn list_nodes(client: &Client) -> Result<NodeList, KubeError> {
    client.get_json("/api/v1/nodes")
}

fn b64(data: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(data)
}

#[test]
fn a_custom_ca_is_trusted_and_public_roots_are_not() {
    let dir = TempDir::new("tls-ca");
    let pki = Pki::new(dir.path());
    let server = FakeApiServer::start_tls(TlsOptions {
        cert_pem: pki.server_cert_pem.clone(),
        key_pem: pki.server_key_pem.clone(),
        client_ca_pem: None,
    });
    server.put_node(node_json("n1", 3, &["10.244.1.0/24"], "10.0.0.1"));
    // certificate-authority as a path relative to the kubeconfig's directory.
    let path = dir.write(
        "kubeconfig",
        kubeconfig(
            &server.url(),
            "    certificate-authority: ca.crt\n",
            "    token: t\n",
        ),
    );
    let client = Client::new(&load(&path).unwrap(), ClientOptions::default()).unwrap();
    assert_eq!(list_nodes(&client).unwrap().items[0].name, "n1");

    let path = dir.write("no-ca", kubeconfig(&server.url(), "", "    token: t\n"));
    let client = Client::new(&load(&path).unwrap(), ClientOptions::default()).unwrap();
    match list_nodes(&client) {
        Err(KubeError::Transport { message, .. }) => {
            assert!(message.contains("UnknownIssuer"), "{message}")
        }
        other => panic!("expected a TLS failure, got {other:?}"),
    }
}

#[test]
fn client_certificates_with_rsa_and_ec_keys_in_every_encoding_are_presented() {
    let dir = TempDir::new("tls-client");
    let pki = Pki::new(dir.path());
    let server = FakeApiServer::start_tls(TlsOptions {
        cert_pem: pki.server_cert_pem.clone(),
        key_pem: pki.server_key_pem.clone(),
        client_ca_pem: Some(pki.ca_pem.clone()),
    });
    let ca_data = format!("    certificate-authority-data: {}\n", b64(&pki.ca_pem));
    for (i, format) in [
        KeyFormat::RsaPkcs1,
        KeyFormat::RsaPkcs8,
        KeyFormat::EcSec1,
        KeyFormat::EcPkcs8,
    ]
    .into_iter()
    .enumerate()
    {
        let pair = pki.client(&format!("client{i}"), format);
        // Alternate between file paths and inline base64 data.
        let user = if i % 2 == 0 {
            format!(
                "    client-certificate: {}\n    client-key: {}\n",
                pair.cert_path.display(),
                pair.key_path.display()
            )
        } else {
            format!(
                "    client-certificate-data: {}\n    client-key-data: {}\n",
                b64(&pair.cert_pem),
                b64(&pair.key_pem)
            )
        };
        let path = dir.write(
            &format!("kc{i}"),
            kubeconfig(&server.url(), &ca_data, &user),
        );
        let client = Client::new(&load(&path).unwrap(), ClientOptions::default())
            .unwrap_or_else(|e| panic!("{format:?}: {e}"));
        list_nodes(&client).unwrap_or_else(|e| panic!("{format:?}: {e}"));
    }
    // Without a certificate the server refuses the handshake: an error, not a panic.
    let path = dir.write(
        "anon",
        kubeconfig(&server.url(), &ca_data, "    token: t\n"),
    );
    let client = Client::new(&load(&path).unwrap(), ClientOptions::default()).unwrap();
    assert!(matches!(
        list_nodes(&client),
        Err(KubeError::Transport { .. })
    ));
}

#[test]
fn a_certificate_and_key_that_do_not_match_fail_at_startup_not_at_the_first_request() {
    let dir = TempDir::new("tls-mismatch");
    let pki = Pki::new(dir.path());
    let a = pki.client("a", KeyFormat::EcPkcs8);
    let b = pki.client("b", KeyFormat::EcSec1);
    let user = format!(
        "    client-certificate: {}\n    client-key: {}\n",
        a.cert_path.display(),
        b.key_path.display()
    );
    let path = dir.write("kc", kubeconfig("https://127.0.0.1:1", "", &user));
    let err = Client::new(&load(&path).unwrap(), ClientOptions::default()).unwrap_err();
    assert!(err.to_string().contains("cannot be used together"), "{err}");

    let user = "    client-certificate-data: bm90IGEgY2VydA==\n    client-key-data: bm90IGEga2V5\n";
    let path = dir.write("garbage", kubeconfig("https://127.0.0.1:1", "", user));
    let err = Client::new(&load(&path).unwrap(), ClientOptions::default()).unwrap_err();
    assert!(
        err.to_string().contains("client certificate of user \"u\""),
        "{err}"
    );
}

#[test]
fn unreadable_files_and_empty_ca_bundles_are_startup_errors_naming_the_file() {
    let dir = TempDir::new("tls-files");
    let missing = dir.path().join("missing.key");
    let user = format!(
        "    client-certificate: {}\n    client-key: {}\n",
        dir.path().join("missing.crt").display(),
        missing.display()
    );
    let path = dir.write("kc", kubeconfig("https://127.0.0.1:1", "", &user));
    let err = load(&path).unwrap_err().to_string();
    assert!(err.contains("missing.crt"), "{err}");

    dir.write("empty-ca.crt", "not a certificate\n");
    let path = dir.write(
        "kc2",
        kubeconfig(
            "https://127.0.0.1:1",
            "    certificate-authority: empty-ca.crt\n",
            "    token: t\n",
        ),
    );
    let err = Client::new(&load(&path).unwrap(), ClientOptions::default()).unwrap_err();
    assert!(
        err.to_string().contains("empty-ca.crt") && err.to_string().contains("no certificate"),
        "{err}"
    );
}

#[test]
fn insecure_skip_tls_verify_connects_without_a_ca_and_refuses_to_combine_with_one() {
    let dir = TempDir::new("tls-insecure");
    let pki = Pki::new(dir.path());
    let server = FakeApiServer::start_tls(TlsOptions {
        cert_pem: pki.server_cert_pem.clone(),
        key_pem: pki.server_key_pem.clone(),
        client_ca_pem: None,
    });
    let path = dir.write(
        "kc",
        kubeconfig(
            &server.url(),
            "    insecure-skip-tls-verify: true\n",
            "    token: t\n",
        ),
    );
    let client = Client::new(&load(&path).unwrap(), ClientOptions::default()).unwrap();
    list_nodes(&client).unwrap();
    let path = dir.write(
        "kc2",
        kubeconfig(
            &server.url(),
            "    insecure-skip-tls-verify: true\n    certificate-authority: ca.crt\n",
            "    token: t\n",
        ),
    );
    assert!(
        load(&path)
            .unwrap_err()
            .to_string()
            .contains("insecure-skip-tls-verify")
    );
}
