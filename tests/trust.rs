//! Certificates and proxies for every cloud client, as operators have them: each
//! provider's double served over HTTPS with a CA made for the test and trusted only
//! through that provider's option (or `SSL_CERT_FILE` where its peer has no option of
//! its own), a certificate failure that says `UnknownIssuer` and names the option,
//! and every provider's requests through a real forward proxy (proxy.py) as
//! `HTTPS_PROXY` and `NO_PROXY` say, while a metadata request never reaches it.

// Each double brings its own copy of the wire helpers; they are used apart.
#![allow(clippy::duplicate_mod)]

#[path = "support/arm_stub.rs"]
mod arm_stub;
#[path = "support/controller_process.rs"]
mod controller_process;
#[path = "support/fake_apiserver.rs"]
mod fake_apiserver;
#[path = "support/forward_proxy.rs"]
mod forward_proxy;
#[path = "support/gce_double.rs"]
mod gce_double;
#[path = "support/hcloud_double.rs"]
mod hcloud_double;
#[path = "support/moto.rs"]
mod moto;
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
use route_controller::{ProxyEnv, Proxying, Routes, SystemStore, Trust};
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
    let hcloud = match HcloudRoutes::connect(hcloud_config(endpoint.clone(), trusted(), via_proxy))
    {
        Ok(p) => p,
        Err(e) => panic!(
            "not reached through the proxy: {e}\nproxy log:\n{}\njournal {:?}",
            proxy.log(),
            proxy.journal()
        ),
    };
    hcloud
        .list_routes("kubernetes", &route_controller::NodeDirectory::default())
        .expect("routes listed through the proxy");
    let host = format!("hcloud.{}:{}", tls_front::TEST_DOMAIN, front.port);
    // One tunnel for every request: the per-request proxy keeps ureq's pool.
    assert!(
        double.requests().len() >= 3,
        "{:?}",
        double.requests().len()
    );
    assert_eq!(
        proxy.journal(),
        vec![host.clone()],
        "one CONNECT, kept alive"
    );

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

// ---------------------------------------------------------------- OpenStack

mod openstack {
    use super::*;
    use neutron_double::NeutronDouble;
    use route_controller::Cidr;
    use route_controller::cloud::openstack::{Config, OpenStackRoutes};

    const ROUTER: &str = "router-1";

    /// The double's cloud.conf with Keystone and Neutron at `base` (the TLS front)
    /// and `extra` lines added to `[Global]`.
    fn conf(double: &NeutronDouble, base: &str, extra: &str) -> (Config, Vec<String>) {
        let plain = double.auth_url();
        let plain_base = plain.trim_end_matches("/v3");
        let text = double.cloud_conf(ROUTER).replace(plain_base, base).replace(
            "[Route]\n",
            &format!("{extra}[Route]\nnetwork-endpoint = {base}/network\n"),
        );
        let cidrs = [Cidr::parse("10.244.0.0/16").unwrap()];
        Config::from_cloud_conf(&text, &cidrs, |_| Err("no clouds.yaml".into()))
            .expect("the cloud.conf parses")
    }

    fn double() -> NeutronDouble {
        let d = NeutronDouble::start(ROUTER, true);
        d.attach_network("net-nodes", "10.0.0.1");
        d
    }

    /// cloud-provider-openstack's `ca-file`, `cert-file`/`key-file`: Keystone and
    /// Neutron behind a front that wants a client certificate. Without `ca-file` the
    /// start fails with `UnknownIssuer` naming it; without the client certificate the
    /// front refuses the handshake; with both the provider connects.
    #[test]
    fn openstack_ca_file_and_client_certificate() {
        let ca = TestCa::new("openstack");
        let double = double();
        let front = TlsFront::start(&ca, addr_of(&double.auth_url()), true);
        let base = front.url("");
        let client = ca.client("route-controller");
        let ca_line = format!("ca-file = {}\n", ca.ca_path.display());
        let pair = format!(
            "cert-file = {}\nkey-file = {}\n",
            client.cert_path.display(),
            client.key_path.display()
        );
        let with_store = |(mut c, w): (Config, Vec<String>)| {
            c.trust = rebase(c.trust);
            (c, w)
        };

        let (config, _) = with_store(conf(&double, &base, &pair));
        let err = OpenStackRoutes::connect(config).expect_err("no ca-file, no trust");
        assert!(err.message.contains("UnknownIssuer"), "{err}");
        assert!(err.message.contains("set ca-file in cloud.conf"), "{err}");

        let (config, _) = with_store(conf(&double, &base, &ca_line));
        let err = OpenStackRoutes::connect(config).expect_err("no client certificate");
        assert!(!err.message.contains("UnknownIssuer"), "{err}");

        let (config, _) = with_store(conf(&double, &base, &format!("{ca_line}{pair}")));
        OpenStackRoutes::connect(config)
            .expect("trusted through ca-file, known by its certificate");
    }

    /// The system store of these tests is empty: the CA must come from the option.
    fn rebase(trust: Trust) -> Trust {
        trust.system_store(no_store())
    }

    /// `tls-insecure = true`: no CA needed, and a warning says what it costs.
    #[test]
    fn openstack_tls_insecure_connects_without_a_ca_and_warns() {
        let ca = TestCa::new("openstack-insecure");
        let double = double();
        let front = TlsFront::start(&ca, addr_of(&double.auth_url()), false);
        let (mut config, warnings) = conf(&double, &front.url(""), "tls-insecure = true\n");
        config.trust = rebase(config.trust);
        assert!(
            warnings
                .iter()
                .any(|w| w.contains("tls-insecure") && w.contains("NOT verified")),
            "{warnings:?}"
        );
        assert_eq!(
            config.trust.insecure(),
            Some("cloud.conf [Global] tls-insecure")
        );
        OpenStackRoutes::connect(config).expect("verification is off");
    }

    /// Keystone and Neutron through `HTTPS_PROXY`.
    #[test]
    fn openstack_goes_through_https_proxy() {
        let ca = TestCa::new("openstack-proxy");
        let double = double();
        let front = TlsFront::start(&ca, addr_of(&double.auth_url()), false);
        let proxy = ForwardProxy::start();
        let ca_line = format!("ca-file = {}\n", ca.ca_path.display());
        let (mut config, _) = conf(&double, &front.named_url("openstack", ""), &ca_line);
        config.proxying = proxy_env(&[("HTTPS_PROXY", &proxy.url())]);
        if let Err(e) = OpenStackRoutes::connect(config) {
            panic!("not through the proxy: {e}\n{}", proxy.log());
        }
        let host = format!("openstack.{}:{}", tls_front::TEST_DOMAIN, front.port);
        assert!(proxy.journal().contains(&host), "{:?}", proxy.journal());
    }
}

// ---------------------------------------------------------------- GCE

mod gce {
    use super::*;
    use gce_double::GceDouble;
    use route_controller::NodeDirectory;
    use route_controller::Routes;
    use route_controller::cloud::gce::{Config, Credentials, GceRoutes};

    fn config(api: String, metadata: String) -> Config {
        Config {
            project_id: Some("e2e-project".into()),
            network_name: Some("k8s".into()),
            api_endpoint: api,
            metadata_url: metadata,
            credentials: Credentials::Metadata,
            request_timeout: Duration::from_secs(5),
            ..Config::default()
        }
    }

    /// The Compute API path of the double's endpoint (`/compute/v1/`).
    fn api_path(double: &GceDouble) -> String {
        let api = double.api_endpoint();
        let rest = api.strip_prefix("http://").unwrap();
        rest[rest.find('/').unwrap()..].to_string()
    }

    /// cloud-provider-gcp and Google's Go libraries have no CA option: Go's
    /// `SSL_CERT_FILE` is how a private CA (a TLS-inspecting proxy, a private API
    /// endpoint) is trusted, and so it is here.
    #[test]
    fn gce_trusts_a_private_ca_through_ssl_cert_file_only() {
        let ca = TestCa::new("gce");
        let double = GceDouble::start("e2e-project", "k8s", None);
        let front = TlsFront::start(&ca, addr_of(&double.api_endpoint()), false);
        let metadata = format!("http://{}", double.metadata_host());

        let mut c = config(front.url(&api_path(&double)), metadata.clone());
        c.trust = Trust::with_system_store("SSL_CERT_FILE", no_store());
        // The start reads the project's quotas: the first request.
        let err = GceRoutes::connect(c).expect_err("a CA nobody named is not trusted");
        assert!(err.message.contains("UnknownIssuer"), "{err}");
        assert!(err.message.contains("set SSL_CERT_FILE"), "{err}");

        let mut c = config(front.url(&api_path(&double)), metadata);
        c.trust = Trust::with_system_store("SSL_CERT_FILE", store_with_cert_file(&ca.ca_path));
        let gce = GceRoutes::connect(c).expect("connects");
        gce.list_routes("e2e", &NodeDirectory::default())
            .expect("the CA in SSL_CERT_FILE is trusted");
    }

    /// The Compute API through `HTTPS_PROXY`, while the metadata server is never
    /// asked through it, though `HTTP_PROXY` names the proxy too: Google's metadata
    /// client never proxies, and the metadata server refuses proxied requests.
    #[test]
    fn gce_api_goes_through_the_proxy_and_the_metadata_server_never_does() {
        let ca = TestCa::new("gce-proxy");
        let double = GceDouble::start("e2e-project", "k8s", None);
        let front = TlsFront::start(&ca, addr_of(&double.api_endpoint()), false);
        let proxy = ForwardProxy::start();
        let both = || proxy_env(&[("HTTPS_PROXY", &proxy.url()), ("HTTP_PROXY", &proxy.url())]);
        let trusted =
            || Trust::with_system_store("SSL_CERT_FILE", store_with_cert_file(&ca.ca_path));

        let mut c = config(
            front.named_url("compute", &api_path(&double)),
            format!("http://{}", double.metadata_host()),
        );
        c.trust = trusted();
        c.proxying = both();
        let gce = GceRoutes::connect(c).expect("connects");
        if let Err(e) = gce.list_routes("e2e", &NodeDirectory::default()) {
            panic!(
                "the API is not reached through the proxy: {e}\n{}",
                proxy.log()
            );
        }
        let host = format!("compute.{}:{}", tls_front::TEST_DOMAIN, front.port);
        assert!(proxy.journal().contains(&host), "{:?}", proxy.journal());

        // The metadata server by a name only the proxy could resolve: asked directly,
        // the token request fails, and the proxy never hears of it.
        let port = addr_of(&format!("http://{}", double.metadata_host())).port();
        let metadata = format!("http://metadata.{}:{port}", tls_front::TEST_DOMAIN);
        let mut c = config(front.named_url("compute", &api_path(&double)), metadata);
        c.trust = trusted();
        c.proxying = both();
        let err =
            GceRoutes::connect(c).expect_err("the metadata server's name does not resolve here");
        assert!(
            proxy.journal().iter().all(|h| !h.starts_with("metadata.")),
            "a metadata request went to the proxy: {:?} ({err})",
            proxy.journal()
        );
        assert!(err.message.contains("metadata"), "{err}");
    }
}

// ---------------------------------------------------------------- Azure

mod azure {
    use super::*;
    use arm_stub::ArmStub;
    use route_controller::cloud::azure::{AzureRoutes, Config};

    /// The stub's azure.json, with both endpoints at `base` (the TLS front or the
    /// stub itself) in the environment file.
    fn config(stub: &ArmStub, dir: &tls_front::TempDir, base: &str) -> Config {
        let (text, vars) = stub.config(dir.path());
        let env_file = &vars[0].1;
        let plain = stub.server.url();
        let environment = std::fs::read_to_string(env_file)
            .unwrap()
            .replace(&plain, base);
        std::fs::write(env_file, environment).unwrap();
        let mut config = Config::parse(&text, &|k| {
            vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
        })
        .expect("the azure.json parses");
        config.request_timeout = Duration::from_secs(5);
        config
    }

    /// cloud-provider-azure and the Azure SDK for Go have no CA option: Azure Stack
    /// Hub's and Microsoft's own guides put a private CA in the system store, which
    /// Go reads from `SSL_CERT_FILE`; so it is here.
    #[test]
    fn azure_trusts_a_private_ca_through_ssl_cert_file_only() {
        let ca = TestCa::new("azure");
        let stub = ArmStub::start();
        let front = TlsFront::start(&ca, addr_of(&stub.server.url()), false);

        let mut c = config(&stub, &ca.dir, &front.url(""));
        c.trust = Trust::with_system_store("SSL_CERT_FILE", no_store());
        let err = AzureRoutes::connect(c).expect_err("a CA nobody named is not trusted");
        assert!(err.message.contains("UnknownIssuer"), "{err}");
        assert!(err.message.contains("set SSL_CERT_FILE"), "{err}");

        let mut c = config(&stub, &ca.dir, &front.url(""));
        c.trust = Trust::with_system_store("SSL_CERT_FILE", store_with_cert_file(&ca.ca_path));
        AzureRoutes::connect(c).expect("the CA in SSL_CERT_FILE is trusted");
    }

    /// Entra ID and Resource Manager through `HTTPS_PROXY`.
    #[test]
    fn azure_goes_through_https_proxy() {
        let ca = TestCa::new("azure-proxy");
        let stub = ArmStub::start();
        let front = TlsFront::start(&ca, addr_of(&stub.server.url()), false);
        let proxy = ForwardProxy::start();
        let mut c = config(&stub, &ca.dir, &front.named_url("management", ""));
        c.trust = Trust::with_system_store("SSL_CERT_FILE", store_with_cert_file(&ca.ca_path));
        c.proxying = proxy_env(&[("HTTPS_PROXY", &proxy.url())]);
        if let Err(e) = AzureRoutes::connect(c) {
            panic!("not through the proxy: {e}\n{}", proxy.log());
        }
        let host = format!("management.{}:{}", tls_front::TEST_DOMAIN, front.port);
        assert!(proxy.journal().contains(&host), "{:?}", proxy.journal());
    }

    /// Azure Stack Hub serves only its profile's api-versions (here the
    /// 2020-09-01-hybrid profile's Network and Compute versions) and answers others
    /// `NoRegisteredProviderFound`: the start stops with a message that says Stack Hub
    /// is not supported and what to run instead. An AD FS authority is refused when
    /// the environment file is read.
    #[test]
    fn azure_stack_hub_is_refused_at_start_with_what_to_run_instead() {
        let dir = tls_front::TempDir::new("azure-stack");
        let stub = ArmStub::start();
        stub.state().profile = Some(vec!["2018-11-01", "2020-06-01"]);
        let err = AzureRoutes::connect(config(&stub, &dir, &stub.server.url()))
            .expect_err("the public api-versions are not served");
        assert!(err.message.contains("NoRegisteredProviderFound"), "{err}");
        assert!(
            err.message.contains("Azure Stack Hub is not supported"),
            "{err}"
        );
        assert!(err.message.contains("cloud-provider-azure"), "{err}");

        let (text, vars) = stub.config(dir.path());
        let env_file = &vars[0].1;
        let adfs = format!("{}/adfs/", stub.server.url());
        let environment = std::fs::read_to_string(env_file).unwrap();
        let mut environment: serde_json::Value = serde_json::from_str(&environment).unwrap();
        environment["activeDirectoryEndpoint"] = adfs.into();
        std::fs::write(env_file, environment.to_string()).unwrap();
        let err = Config::parse(&text, &|k| {
            vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
        })
        .expect_err("AD FS is refused");
        assert!(err.message.contains("AD FS"), "{err}");
        assert!(
            err.message.contains("Azure Stack Hub is not supported"),
            "{err}"
        );
    }
}

// ---------------------------------------------------------------- AWS

mod aws {
    use super::*;
    use route_controller::cloud::aws::credentials::AwsEnv;
    use route_controller::cloud::aws::{AwsConfig, AwsProvider};
    use route_controller::{NodeDirectory, Routes};

    fn env(bundle: Option<&std::path::Path>) -> AwsEnv {
        let env = AwsEnv::new()
            .with_var("AWS_ACCESS_KEY_ID", moto::TEST_KEY_ID)
            .with_var("AWS_SECRET_ACCESS_KEY", moto::TEST_SECRET)
            .with_var("AWS_EC2_METADATA_DISABLED", "true");
        match bundle {
            Some(path) => env.with_var("AWS_CA_BUNDLE", &path.display().to_string()),
            None => env,
        }
    }

    fn provider(endpoint: String, env: &AwsEnv, proxying: Proxying) -> AwsProvider {
        AwsProvider::new(
            AwsConfig {
                region: Some(moto::REGION.into()),
                endpoint: Some(endpoint),
                route_table_limit: Some(50),
                timeout: Duration::from_secs(10),
                proxying,
                ..AwsConfig::default()
            },
            env,
        )
        .expect("the provider starts (no request yet)")
    }

    /// EC2 (moto) answered: with no table tagged for the cluster, by saying so.
    fn reached_ec2<T: std::fmt::Debug>(listed: Result<T, route_controller::CloudError>) {
        let err = listed.expect_err("moto holds no table for the cluster");
        assert!(err.message.contains("is tagged for cluster"), "{err}");
    }

    /// The AWS SDKs' `AWS_CA_BUNDLE`: moto behind HTTPS with a CA made for the test.
    /// Without it the first call fails with `UnknownIssuer` naming the variable.
    #[test]
    fn aws_trusts_a_private_ca_through_aws_ca_bundle() {
        let ca = TestCa::new("aws");
        let moto = moto::Moto::start();
        let front = TlsFront::start(&ca, addr_of(moto.url()), false);

        let untrusted = provider(front.url("/"), &env(None), Proxying::Never);
        let err = untrusted
            .list_routes("e2e", &NodeDirectory::default())
            .expect_err("a CA nobody named is not trusted");
        assert!(err.message.contains("UnknownIssuer"), "{err}");
        assert!(err.message.contains("set AWS_CA_BUNDLE"), "{err}");

        let trusted = provider(front.url("/"), &env(Some(&ca.ca_path)), Proxying::Never);
        reached_ec2(trusted.list_routes("e2e", &NodeDirectory::default()));
    }

    /// EC2 through `HTTPS_PROXY`.
    #[test]
    fn aws_goes_through_https_proxy() {
        let ca = TestCa::new("aws-proxy");
        let moto = moto::Moto::start();
        let front = TlsFront::start(&ca, addr_of(moto.url()), false);
        let proxy = ForwardProxy::start();
        let via = proxy_env(&[("HTTPS_PROXY", &proxy.url())]);
        let aws = provider(front.named_url("ec2", "/"), &env(Some(&ca.ca_path)), via);
        reached_ec2(aws.list_routes("e2e", &NodeDirectory::default()));
        let host = format!("ec2.{}:{}", tls_front::TEST_DOMAIN, front.port);
        assert!(proxy.journal().contains(&host), "{:?}", proxy.journal());
    }
}

// ---------------------------------------------------------------- the API server

mod api_server {
    use super::*;
    use fake_apiserver::FakeApiServer;
    use route_controller::kube::{Client, ClientOptions, Env, KubeConfig, LoadOptions};

    /// As client-go: without `proxy-url` in the kubeconfig, the API server is reached
    /// as the proxy variables say (here `HTTP_PROXY`, the fake API server speaking
    /// plain HTTP), by a name only the proxy resolves.
    #[test]
    fn the_api_server_goes_through_the_proxy_the_variables_name() {
        let server = FakeApiServer::start();
        let port = addr_of(&server.url()).port();
        let proxy = ForwardProxy::start();
        let kube = KubeConfig::load(
            &LoadOptions {
                master: Some(format!("http://kube.{}:{port}", tls_front::TEST_DOMAIN)),
                ..LoadOptions::default()
            },
            &Env::empty(),
        )
        .expect("the master URL is enough");
        let options = ClientOptions {
            proxying: proxy_env(&[("HTTP_PROXY", &proxy.url())]),
            ..ClientOptions::default()
        };
        let client = Client::new(&kube, options).expect("the client builds");
        if let Err(e) = client.get_json::<serde_json::Value>("/api/v1/nodes") {
            panic!("not through the proxy: {e}\n{}", proxy.log());
        }
        let host = format!("kube.{}:{port}", tls_front::TEST_DOMAIN);
        assert!(proxy.journal().contains(&host), "{:?}", proxy.journal());
    }
}

// ---------------------------------------------------------------- the binary

mod binary {
    use super::*;
    use controller_process::Spawn;
    use fake_apiserver::FakeApiServer;

    /// The process reads `SSL_CERT_FILE` and `HTTPS_PROXY` from its environment:
    /// `route-controller run` against the hcloud double behind HTTPS (its CA only in
    /// `SSL_CERT_FILE`) by a name only the proxy resolves, becomes ready, and says at
    /// start which proxy it uses.
    #[test]
    fn the_binary_takes_ssl_cert_file_and_https_proxy_from_its_environment() {
        let ca = TestCa::new("binary");
        let double = hcloud_double();
        let front = TlsFront::start(&ca, addr_of(&double.endpoint()), false);
        let proxy = ForwardProxy::start();
        let api = FakeApiServer::start();
        let mut process = Spawn::new()
            .args([
                "--cloud-provider=hcloud",
                "--cluster-cidr=10.244.0.0/16",
                &format!("--master={}", api.url()),
            ])
            .env("HCLOUD_TOKEN", TOKEN)
            .env("HCLOUD_NETWORK", "4711")
            .env("HCLOUD_ENDPOINT", front.named_url("hcloud", "/v1"))
            .env("SSL_CERT_FILE", ca.ca_path.display().to_string())
            .env("SSL_CERT_DIR", "/nonexistent-route-controller-test")
            .env("HTTPS_PROXY", proxy.url())
            .env("RUST_LOG", "info")
            .spawn("trust-binary");
        process.wait_ready(Duration::from_secs(30));
        let host = format!("hcloud.{}:{}", tls_front::TEST_DOMAIN, front.port);
        assert!(proxy.journal().contains(&host), "{:?}", proxy.journal());
        process.wait_for_log(
            &format!("https:// through {} (HTTPS_PROXY)", proxy.url()),
            Duration::from_secs(5),
        );
        process.terminate();
    }
}
