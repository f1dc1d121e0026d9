//! Serving as the cloud-controller-manager serves, against the real kube-apiserver:
//! `/metrics` on the secure port answers 200 to a ServiceAccount bound to the
//! metrics-reader ClusterRole of `manifests`, 403 to one without it and 401 without a
//! token, while the probes stay open; the controller's own identity has exactly the
//! RBAC of `manifests` (TokenReview and SubjectAccessReview included). Also: a cloud
//! that is down at start is waited for (visible in `/readyz`), not a configuration
//! error, and a port in use names its flag and address.

#[path = "support/controller_process.rs"]
mod controller_process;
#[path = "support/e2e_cluster.rs"]
mod e2e_cluster;
#[path = "support/e2e_hcloud.rs"]
mod e2e_hcloud;
#[path = "support/hcloud_double.rs"]
mod hcloud_double;
#[path = "support/kube_apiserver.rs"]
mod kube_apiserver;
#[path = "support/tempdir.rs"]
mod tempdir;

use std::time::{Duration, Instant};

use controller_process::{Spawn, prometheus};
use e2e_cluster::{Identity, poll_until};
use kube_apiserver::{KubeApiserver, Version};
use route_controller::manifests::{METRICS_READER, metrics_reader_rule};
use serde_json::json;
use ureq::tls::{PemItem, RootCerts, TlsConfig};

/// How long the authorizer may take to see a new binding.
const RBAC_PROPAGATION: Duration = Duration::from_secs(30);

/// An HTTPS client that trusts only `ca_pem` (the controller's self-signed
/// certificate): verification stays on.
fn trusting(ca_pem: &str) -> ureq::Agent {
    let certs: Vec<_> = ureq::tls::parse_pem(ca_pem.as_bytes())
        .filter_map(|item| match item {
            Ok(PemItem::Certificate(cert)) => Some(cert),
            _ => None,
        })
        .collect();
    assert!(!certs.is_empty(), "no certificate in {ca_pem}");
    let tls = TlsConfig::builder()
        .root_certs(RootCerts::new_with_certs(&certs))
        .build();
    ureq::Agent::new_with_config(
        ureq::Agent::config_builder()
            .tls_config(tls)
            .http_status_as_error(false)
            .proxy(None)
            .timeout_global(Some(Duration::from_secs(20)))
            .build(),
    )
}

/// `GET url` with an optional bearer token: (status, body).
fn get(agent: &ureq::Agent, url: &str, token: Option<&str>) -> (u16, String) {
    let mut request = agent.get(url);
    if let Some(t) = token {
        request = request.header("Authorization", format!("Bearer {t}"));
    }
    let mut response = request.call().unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let status = response.status().as_u16();
    let body = response.body_mut().read_to_string().unwrap_or_default();
    (status, body)
}

/// Binds the metrics-reader ClusterRole (as `manifests` renders it) to
/// ServiceAccount `namespace/name`, and waits until the authorizer allows it.
fn bind_metrics_reader(api: &KubeApiserver, namespace: &str, name: &str) {
    let role = format!("{METRICS_READER}-{namespace}");
    api.post_json(
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        &json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": { "name": role },
            "rules": [serde_json::to_value(metrics_reader_rule()).unwrap()],
        }),
    );
    api.post_json(
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        &json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": { "name": role },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role },
            "subjects": [{ "kind": "ServiceAccount", "name": name, "namespace": namespace }],
        }),
    );
    let user = format!("system:serviceaccount:{namespace}:{name}");
    let allowed = poll_until(RBAC_PROPAGATION, || {
        let answer = api.post_json(
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            &json!({
                "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                "spec": {
                    "user": user,
                    "groups": ["system:serviceaccounts", format!("system:serviceaccounts:{namespace}"), "system:authenticated"],
                    "nonResourceAttributes": { "path": "/metrics", "verb": "get" },
                },
            }),
        );
        (answer["status"]["allowed"] == true).then_some(())
    });
    assert!(
        allowed.is_some(),
        "{user} is not allowed /metrics after {RBAC_PROPAGATION:?}"
    );
}

/// A port the OS chose and freed just now: `--secure-port=0` turns the port off (as
/// the CCM's), so a test cannot ask the controller for port 0 itself.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    listener.local_addr().expect("its address").port()
}

/// Guards issue 13's secure metrics: 200 for a token allowed `get /metrics`, 403 for a
/// valid token without that RBAC, 401 without a token or with a made-up one; the
/// probes need no token; the certificate is the one in `--cert-dir` and verifies.
#[test]
fn secure_metrics_need_an_authorized_token_and_probes_stay_open() {
    secure_metrics(Version::Current);
}

/// The same on Kubernetes 1.31 (the version matrix): its TokenReview and
/// SubjectAccessReview answer as the current server's do.
#[test]
fn secure_metrics_need_an_authorized_token_and_probes_stay_open_on_1_31() {
    secure_metrics(Version::V1_31);
}

fn secure_metrics(version: Version) {
    let api = kube_apiserver::shared_version(version);
    let namespace = "e2e-secure-metrics";
    let identity = Identity::provision(api, namespace);
    let scraper = api.service_account_token(namespace, "prometheus");
    let stranger = api.service_account_token(namespace, "stranger");
    bind_metrics_reader(api, namespace, "prometheus");

    let cert_dir = tempdir::TempDir::new("e2e-secure-metrics-certs");
    let mut controller = Spawn::new()
        .args(identity.flags())
        .args([
            "--cloud-provider=fake",
            "--cluster-cidr=10.244.0.0/16",
            "--bind-address=127.0.0.1",
        ])
        .arg(format!("--secure-port={}", free_port()))
        .arg(format!("--cert-dir={}", cert_dir.path().display()))
        .spawn(&format!("secure-metrics-1.{}", version.minor()));
    controller.wait_ready(Duration::from_secs(30));
    let addr = controller.secure_address();
    let cert = std::fs::read_to_string(cert_dir.path().join("route-controller.crt"))
        .expect("the self-signed certificate is kept in --cert-dir");
    let https = trusting(&cert);
    let url = |path: &str| format!("https://{addr}{path}");

    let (status, body) = get(&https, &url("/metrics"), Some(&scraper));
    assert_eq!(status, 200, "{body}");
    let exposition = prometheus::parse(&body).unwrap_or_else(|e| panic!("{e}\n{body}"));
    assert!(
        !exposition
            .family("route_controller_passes_total")
            .samples
            .is_empty()
    );

    let (status, body) = get(&https, &url("/metrics"), Some(&stranger));
    assert_eq!(status, 403, "{body}");
    assert!(
        body.contains(&format!("system:serviceaccount:{namespace}:stranger")),
        "{body}"
    );

    let (status, body) = get(&https, &url("/metrics"), None);
    assert_eq!(status, 401, "{body}");
    let (status, body) = get(&https, &url("/metrics"), Some("made-up-token"));
    assert_eq!(status, 401, "{body}");

    for probe in ["/healthz", "/readyz", "/livez"] {
        let (status, body) = get(&https, &url(probe), None);
        assert_eq!(status, 200, "{probe}: {body}");
    }
    // The answers are cached: a second scrape is served without asking again.
    let started = Instant::now();
    assert_eq!(get(&https, &url("/metrics"), Some(&scraper)).0, 200);
    println!("a cached, authorized scrape took {:?}", started.elapsed());
    controller.assert_running();
}

/// Guards issue 13's start-up outage: with the Hetzner API answering 503 (as a
/// proxy in front of it does while it is down) at start, `run` keeps running, says in `/readyz` what it waits for, and starts
/// once the API answers, instead of exiting 2 as if configured wrongly.
#[test]
fn a_cloud_that_is_down_at_start_is_waited_for_not_a_configuration_error() {
    let api = kube_apiserver::shared();
    let namespace = "e2e-start-outage";
    let identity = Identity::provision(api, namespace);
    let hetzner = e2e_hcloud::Hetzner::start();
    let network = format!("/networks/{}", e2e_hcloud::NETWORK);
    hetzner
        .double
        .inject("GET", &network, 3, hcloud_double::Fault::BareStatus(503));
    let token = e2e_hcloud::token("controller");
    let spawn = Spawn::new()
        .args(identity.flags())
        .args(["--cloud-provider=hcloud", "--cluster-cidr=10.244.0.0/16"]);
    let mut controller = hetzner.env(spawn, &token).spawn("start-outage");
    controller.wait_for_log("trying again in", Duration::from_secs(20));
    let (status, body) = controller.http_get("/readyz").expect("/readyz answers");
    assert_eq!(status, 503, "{body}");
    assert!(
        body.contains("waiting for the cloud: hcloud: the API is unreachable or failing"),
        "{body}"
    );
    assert_eq!(controller.http_get("/healthz").map(|r| r.0), Some(200));
    // Three refusals, then the API answers: 1 + 2 + 4 s of backoff at most.
    controller.wait_ready(Duration::from_secs(30));
    controller.assert_running();
    assert!(hetzner.double.count("GET", &network) >= 4);
}

/// A port that is taken is a configuration error that names the flag and address.
#[test]
fn a_secure_port_in_use_names_the_flag_and_the_address() {
    let api = kube_apiserver::shared();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_route-controller"))
        .args([
            "run",
            "--cloud-provider=fake",
            "--cluster-cidr=10.244.0.0/16",
            "--bind-address=127.0.0.1",
        ])
        .arg(format!("--secure-port={port}"))
        .arg(format!("--kubeconfig={}", api.admin_kubeconfig().display()))
        .env_clear()
        .env("HOME", std::env::temp_dir())
        .output()
        .expect("run the binary");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "--secure-port/--bind-address: cannot listen on 127.0.0.1:{port}"
        )),
        "{stderr}"
    );
}

/// Guards the other half of the start-up outage: an API server that does not answer
/// at start is waited for (the node watch retries), not a configuration error; the
/// process stays live and says in `/readyz` that it is not synced.
#[test]
fn an_api_server_that_is_down_at_start_is_waited_for() {
    let api = kube_apiserver::shared();
    let identity = Identity::provision(api, "e2e-start-api-outage");
    let closed = free_port();
    let mut controller = Spawn::new()
        .args(identity.flags())
        .args(["--cloud-provider=fake", "--cluster-cidr=10.244.0.0/16"])
        .arg(format!("--master=https://127.0.0.1:{closed}"))
        .spawn("start-api-outage");
    let waited = poll_until(Duration::from_secs(20), || {
        let log = controller.log();
        // "starting the streaming list of nodes failed" (watch-list, the default) or
        // "listing nodes failed" (paginated lists): either is the node watch retrying.
        (log.matches("nodes failed").count() >= 3).then_some(())
    });
    let (status, body) = controller.http_get("/readyz").expect("/readyz answers");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("not synced yet"), "{body}");
    assert_eq!(controller.http_get("/healthz").map(|r| r.0), Some(200));
    assert!(
        waited.is_some(),
        "no retry logged:\n{}",
        controller.log_tail()
    );
    controller.assert_running();
}
