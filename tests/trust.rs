//! Certificates and proxies for every cloud client, as operators have them: each
//! provider's double served over HTTPS with a CA made for the test and trusted only
//! through that provider's option (or `SSL_CERT_FILE` where its peer has no option of
//! its own), a certificate failure that says `UnknownIssuer` and names the option,
//! and every provider's requests through a real forward proxy (proxy.py) as
//! `HTTPS_PROXY` and `NO_PROXY` say, while a metadata request never reaches it.

// Each double brings its own copy of the wire helpers; they are used apart.
#![allow(clippy::duplicate_mod)]

#[path = "support/forward_proxy.rs"]
mod forward_proxy;
#[path = "support/gce_double.rs"]
mod gce_double;
#[path = "support/hcloud_double.rs"]
mod hcloud_double;
#[path = "support/neutron_double.rs"]
mod neutron_double;
#[path = "support/tls_front.rs"]
mod tls_front;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use forward_proxy::ForwardProxy;
use hcloud_double::HcloudDouble;
use route_controller::cloud::hcloud::{Config as HcloudConfig, HcloudRoutes};
use route_controller::{ProxyEnv, Proxying, SystemStore, Trust};
use tls_front::{TestCa, TlsFront};

const TOKEN: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// The `host:port` of a double's `http://host:port/...` URL.
fn addr_of(url: &str) -> SocketAddr {
    let rest = url.strip_prefix("http://").expect("a plain-HTTP double");
    let authority = rest.split('/').next().unwrap_or(rest);
    authority
        .parse()
        .expect("the double listens on an IP address")
}

/// A store as the machine would have it with `SSL_CERT_FILE` set to `path` and no
/// `SSL_CERT_DIR` directories.
fn store_with_cert_file(path: &std::path::Path) -> Arc<SystemStore> {
    let file = path.display().to_string();
    Arc::new(SystemStore::from_vars(|name| match name {
        "SSL_CERT_FILE" => Some(file.clone()),
        "SSL_CERT_DIR" => Some("/nonexistent-route-controller-test".into()),
        _ => None,
    }))
}

/// A machine without any trust store (a static image).
fn no_store() -> Arc<SystemStore> {
    Arc::new(SystemStore::from_vars(|name| match name {
        "SSL_CERT_FILE" => Some("/nonexistent-route-controller-test/ca.pem".into()),
        "SSL_CERT_DIR" => Some("/nonexistent-route-controller-test".into()),
        _ => None,
    }))
}

fn proxy_env(vars: &[(&str, &str)]) -> Proxying {
    let vars: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Proxying::Environment(ProxyEnv::from_vars(|n| vars.get(n).cloned()).expect("usable proxy"))
}

// ---------------------------------------------------------------- hcloud

fn hcloud_double() -> HcloudDouble {
    let double = HcloudDouble::start(TOKEN);
    double.add_network(4711, "k8s", "10.0.0.0/8", &["10.0.0.0/24"]);
    double
}

fn hcloud_config(endpoint: String, trust: Trust, proxying: Proxying) -> HcloudConfig {
    let env = HashMap::from([
        ("HCLOUD_TOKEN", TOKEN.to_string()),
        ("HCLOUD_NETWORK", "4711".to_string()),
        ("HCLOUD_ENDPOINT", endpoint),
    ]);
    let mut config = HcloudConfig::from_env(|k| env.get(k).cloned()).expect("valid settings");
    config.request_timeout = Duration::from_secs(5);
    config.trust = trust;
    config.proxying = proxying;
    config
}

/// hcloud-go and HCCM have no CA option of their own: Go's `SSL_CERT_FILE` is how
/// their operators trust a private CA, and so it is here. Without it the start fails
/// with `UnknownIssuer` and the variable to set; with it, the network is found.
#[test]
fn hcloud_trusts_a_private_ca_through_ssl_cert_file_only() {
    let ca = TestCa::new("hcloud");
    let double = hcloud_double();
    let front = TlsFront::start(&ca, addr_of(&double.endpoint()), false);

    let untrusted = Trust::with_system_store("SSL_CERT_FILE", no_store());
    let err = HcloudRoutes::connect(hcloud_config(front.url("/v1"), untrusted, Proxying::Never))
        .expect_err("a CA nobody named is not trusted");
    let message = err.to_string();
    assert!(message.contains("UnknownIssuer"), "{message}");
    assert!(message.contains("set SSL_CERT_FILE"), "{message}");

    let trusted = Trust::with_system_store("SSL_CERT_FILE", store_with_cert_file(&ca.ca_path));
    HcloudRoutes::connect(hcloud_config(front.url("/v1"), trusted, Proxying::Never))
        .expect("the CA in SSL_CERT_FILE is trusted");
}

/// `HTTPS_PROXY`: the API is reached through the proxy by a name only the proxy
/// resolves; with the name in `NO_PROXY` the client goes direct, cannot resolve it,
/// and the proxy never sees it.
#[test]
fn hcloud_goes_through_https_proxy_unless_no_proxy_names_the_host() {
    let ca = TestCa::new("hcloud-proxy");
    let double = hcloud_double();
    let front = TlsFront::start(&ca, addr_of(&double.endpoint()), false);
    let proxy = ForwardProxy::start();
    let trusted = || Trust::with_system_store("SSL_CERT_FILE", store_with_cert_file(&ca.ca_path));
    let endpoint = front.named_url("hcloud", "/v1");

    let via_proxy = proxy_env(&[("HTTPS_PROXY", &proxy.url())]);
    if let Err(e) = HcloudRoutes::connect(hcloud_config(endpoint.clone(), trusted(), via_proxy)) {
        panic!(
            "not reached through the proxy: {e}\nproxy log:\n{}\njournal {:?}",
            proxy.log(),
            proxy.journal()
        );
    }
    let host = format!("hcloud.{}:{}", tls_front::TEST_DOMAIN, front.port);
    assert!(proxy.journal().contains(&host), "{:?}", proxy.journal());

    let before = proxy.journal().len();
    let bypass = proxy_env(&[
        ("HTTPS_PROXY", &proxy.url()),
        ("NO_PROXY", &format!(".{}", tls_front::TEST_DOMAIN)),
    ]);
    let err = HcloudRoutes::connect(hcloud_config(endpoint, trusted(), bypass))
        .expect_err("direct, the name does not resolve");
    assert_eq!(
        proxy.journal().len(),
        before,
        "NO_PROXY kept it off the proxy: {err}"
    );
}
