//! `route-controller manifests` applied to the real kube-apiserver with a server-side
//! dry run (`kubectl apply --server-side --dry-run=server`): every object, for each
//! provider, in `kube-system` and in a namespace of its own, with `--monitoring`, is
//! validated by the API server itself (schemas, defaulting, admission, unknown fields
//! refused), not only parsed as YAML. Nothing is stored. The Helm chart's objects
//! (`helm template`, Helm built by tests/support/helm.rs) are applied the same way.

#[path = "support/helm.rs"]
mod helm;
#[path = "support/kube_apiserver.rs"]
mod kube_apiserver;

use std::time::{Duration, Instant};

use kube_apiserver::KubeApiserver;
use route_controller::manifests::{ManifestOptions, PROVIDERS, render};
use serde_json::{Value, json};

/// The ServiceMonitor CRD of prometheus-operator (monitoring.coreos.com/v1), cut down
/// to the subset of its schema that the manifests use: the fields and types are the
/// real CRD's, every other field is left out, so that a misspelt or misplaced field
/// is refused by the strict field validation below as it would be by the real CRD.
fn service_monitor_crd() -> Value {
    let string = json!({ "type": "string" });
    let label_selector = json!({
        "type": "object",
        "properties": {
            "matchLabels": { "type": "object", "additionalProperties": { "type": "string" } },
            "matchExpressions": { "type": "array", "items": {
                "type": "object", "required": ["key", "operator"],
                "properties": {
                    "key": string, "operator": string,
                    "values": { "type": "array", "items": string },
                },
            } },
        },
        "x-kubernetes-map-type": "atomic",
    });
    let endpoint = json!({
        "type": "object",
        "properties": {
            "port": string,
            "targetPort": { "anyOf": [{ "type": "integer" }, { "type": "string" }], "x-kubernetes-int-or-string": true },
            "scheme": { "type": "string", "enum": ["http", "https", "HTTP", "HTTPS"] },
            "path": string,
            "interval": { "type": "string", "pattern": "^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$" },
            "scrapeTimeout": { "type": "string", "pattern": "^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$" },
            "bearerTokenFile": string,
            "honorLabels": { "type": "boolean" },
            "tlsConfig": { "type": "object", "properties": {
                "insecureSkipVerify": { "type": "boolean" },
                "serverName": string,
                "caFile": string,
            } },
        },
    });
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": { "name": "servicemonitors.monitoring.coreos.com" },
        "spec": {
            "group": "monitoring.coreos.com",
            "scope": "Namespaced",
            "names": {
                "kind": "ServiceMonitor", "listKind": "ServiceMonitorList",
                "plural": "servicemonitors", "singular": "servicemonitor",
                "categories": ["prometheus-operator"], "shortNames": ["smon"],
            },
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": { "openAPIV3Schema": {
                    "type": "object",
                    "required": ["spec"],
                    "properties": {
                        "apiVersion": string, "kind": string,
                        "metadata": { "type": "object" },
                        "spec": {
                            "type": "object",
                            "required": ["selector"],
                            "properties": {
                                "selector": label_selector,
                                "namespaceSelector": { "type": "object", "properties": {
                                    "any": { "type": "boolean" },
                                    "matchNames": { "type": "array", "items": string },
                                } },
                                "jobLabel": string,
                                "endpoints": { "type": "array", "items": endpoint },
                            },
                        },
                    },
                } },
            }],
        },
    })
}

/// Installs the CRD (once per API server) and waits until it serves.
fn install_service_monitor_crd(api: &KubeApiserver) {
    let crd = service_monitor_crd();
    let r = api.request(
        "POST",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        api.admin_token(),
        Some("application/json"),
        Some(crd.to_string().as_bytes()),
    );
    assert!(
        r.status == 201 || r.status == 409,
        "create the CRD: {} {}",
        r.status,
        r.body
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = api.request(
            "GET",
            "/apis/monitoring.coreos.com/v1/servicemonitors",
            api.admin_token(),
            None,
            None,
        );
        if r.status == 200 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the ServiceMonitor CRD does not serve: {} {}",
            r.status,
            r.body
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The API path of `object`: `/api/v1/...` or `/apis/GROUP/VERSION/...`, namespaced
/// or not, ending in its name.
fn path_of(object: &Value) -> String {
    let api_version = object["apiVersion"].as_str().expect("apiVersion");
    let kind = object["kind"].as_str().expect("kind");
    let name = object["metadata"]["name"].as_str().expect("a name");
    let base = match api_version {
        "v1" => "/api/v1".to_string(),
        other => format!("/apis/{other}"),
    };
    let plural = format!("{}s", kind.to_ascii_lowercase());
    match object["metadata"]["namespace"].as_str() {
        Some(ns) => format!("{base}/namespaces/{ns}/{plural}/{name}"),
        None => format!("{base}/{plural}/{name}"),
    }
}

/// Applies every object of `opts`' manifests with a server-side dry run and strict
/// field validation; returns the kinds applied.
fn dry_run_apply(api: &KubeApiserver, opts: &ManifestOptions) -> Vec<String> {
    dry_run_apply_yaml(api, &render(opts))
}

/// Applies every object of `yaml` as [`dry_run_apply`] does.
fn dry_run_apply_yaml(api: &KubeApiserver, yaml: &str) -> Vec<String> {
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"));
    let mut kinds = Vec::new();
    for doc in docs.into_iter().filter(|d| !d.is_null()) {
        let path = format!(
            "{}?dryRun=All&fieldManager=route-controller-e2e&fieldValidation=Strict",
            path_of(&doc)
        );
        let r = api.request(
            "PATCH",
            &path,
            api.admin_token(),
            Some("application/apply-patch+yaml"),
            Some(doc.to_string().as_bytes()),
        );
        assert!(
            r.is_success(),
            "{} {} refused by the API server: {} {}\n{doc:#}",
            doc["kind"],
            doc["metadata"]["name"],
            r.status,
            r.body
        );
        kinds.push(doc["kind"].as_str().unwrap_or_default().to_string());
    }
    kinds
}

#[test]
fn manifests_with_monitoring_apply_to_the_real_api_server_in_a_dry_run() {
    let api = kube_apiserver::shared();
    install_service_monitor_crd(api);
    // A dry run does not create the Namespace, so the objects in it need a real one.
    let namespace = "e2e-manifests-routing";
    api.ensure_namespace(namespace);
    // The exec provider twice: its plugin in the image, and copied from a plugin image
    // by an init container.
    let renderings = PROVIDERS
        .into_iter()
        .map(|p| (p, None))
        .chain([("exec", Some("ghcr.io/acme/router-plugin:1.2"))]);
    for (provider, plugin_image) in renderings {
        for (ns, monitoring) in [
            ("kube-system", false),
            ("kube-system", true),
            (namespace, true),
        ] {
            let opts = ManifestOptions {
                provider: provider.into(),
                namespace: ns.into(),
                monitoring,
                cluster_cidr: "10.244.0.0/16".into(),
                plugin_image: plugin_image.map(String::from),
                ..ManifestOptions::default()
            };
            let kinds = dry_run_apply(api, &opts);
            assert!(kinds.contains(&"Deployment".to_string()), "{kinds:?}");
            assert_eq!(
                kinds.contains(&"ServiceMonitor".to_string()),
                monitoring,
                "{kinds:?}"
            );
            assert_eq!(
                kinds.contains(&"Namespace".to_string()),
                ns != "kube-system",
                "{kinds:?}"
            );
        }
    }
    // Nothing was stored.
    let r = api.request(
        "GET",
        &format!("/apis/apps/v1/namespaces/{namespace}/deployments/route-controller"),
        api.admin_token(),
        None,
        None,
    );
    assert_eq!(r.status, 404, "{}", r.body);
}

/// Shows the dry run validates: a field the ServiceMonitor does not have is refused.
#[test]
fn the_dry_run_refuses_a_field_the_service_monitor_does_not_have() {
    let api = kube_apiserver::shared();
    install_service_monitor_crd(api);
    let monitor = json!({
        "apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
        "metadata": { "name": "bogus", "namespace": "kube-system" },
        "spec": { "selector": {}, "endpoints": [{ "port": "https", "bearerTokenFiles": "/x" }] },
    });
    let r = api.request(
        "PATCH",
        &format!(
            "{}?dryRun=All&fieldManager=route-controller-e2e&fieldValidation=Strict",
            path_of(&monitor)
        ),
        api.admin_token(),
        Some("application/apply-patch+yaml"),
        Some(monitor.to_string().as_bytes()),
    );
    assert!(!r.is_success(), "a misspelt field passed: {}", r.body);
    assert!(r.body.contains("bearerTokenFiles"), "{}", r.body);
}

/// The Helm chart applies as the manifests do: `helm template` for every provider, with
/// monitoring, in kube-system and in a namespace of its own, every object accepted by the
/// real API server with strict field validation. Its RBAC is the manifests' (tests/chart.rs
/// compares them object by object), which the end-to-end tests of routes bind to the
/// controller's identity and so prove sufficient.
#[test]
fn the_chart_applies_to_the_real_api_server_in_a_dry_run() {
    let api = kube_apiserver::shared();
    install_service_monitor_crd(api);
    let namespace = "e2e-chart-routing";
    api.ensure_namespace(namespace);
    for provider in PROVIDERS {
        for ns in ["kube-system", namespace] {
            let mut sets = vec![
                format!("cloudProvider={provider}"),
                "clusterCIDR=10.244.0.0/16".to_string(),
                format!("namespace={ns}"),
                "monitoring.enabled=true".to_string(),
            ];
            if provider == "exec" {
                sets.push("exec.pluginImage=ghcr.io/acme/router-plugin:1.2".into());
            }
            let kinds = dry_run_apply_yaml(api, &helm::template(&sets));
            for kind in [
                "Deployment",
                "ClusterRole",
                "Role",
                "ServiceMonitor",
                "ConfigMap",
            ] {
                assert!(kinds.contains(&kind.to_string()), "{provider}: {kinds:?}");
            }
        }
    }
}
