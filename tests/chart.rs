//! The Helm chart (`charts/route-controller/`) and `route-controller manifests` are one
//! source of truth: `helm template` with the chart's defaults and the same settings
//! renders the same objects, compared object by object after taking away what Helm
//! adds (its labels; comments and key order are gone once parsed). `helm lint --strict`
//! is clean for every provider, and the chart refuses what `manifests` refuses.
//! (`e2e_manifests` applies the chart to the real kube-apiserver.)

#[path = "support/helm.rs"]
mod helm;

use std::collections::BTreeMap;

use route_controller::manifests::{ManifestOptions, PROVIDERS, render};
use serde_json::Value;

/// The labels a chart adds to every object; `manifests` has none of them.
const HELM_LABELS: [&str; 3] = [
    "helm.sh/chart",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/instance",
];

/// The objects of a multi-document YAML, by (kind, namespace, name), with Helm's labels
/// taken away and every `*.json` value of a ConfigMap parsed (the chart keeps the
/// dashboard as a file of its own, indented).
fn objects(yaml: &str) -> BTreeMap<(String, String, String), Value> {
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"));
    let mut out = BTreeMap::new();
    for mut doc in docs.into_iter().filter(|d| !d.is_null()) {
        strip_helm_labels(&mut doc);
        if doc["kind"] == "ConfigMap"
            && let Some(data) = doc["data"].as_object_mut()
        {
            for (key, value) in data.iter_mut() {
                if key.ends_with(".json") {
                    let text = value.as_str().unwrap_or_default();
                    *value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{key}: {e}"));
                }
            }
        }
        let field = |v: &Value| v.as_str().unwrap_or_default().to_string();
        let key = (
            field(&doc["kind"]),
            field(&doc["metadata"]["namespace"]),
            field(&doc["metadata"]["name"]),
        );
        assert!(out.insert(key.clone(), doc).is_none(), "{key:?} twice");
    }
    out
}

/// Removes Helm's labels from every `labels` map, wherever it is (objects, pod templates).
fn strip_helm_labels(v: &mut Value) {
    match v {
        Value::Object(map) => {
            if let Some(Value::Object(labels)) = map.get_mut("labels") {
                for label in HELM_LABELS {
                    labels.remove(label);
                }
            }
            map.values_mut().for_each(strip_helm_labels);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_helm_labels),
        _ => {}
    }
}

/// The same settings, to the chart as `--set` values.
fn sets(opts: &ManifestOptions) -> Vec<String> {
    let mut sets = vec![
        format!("cloudProvider={}", opts.provider),
        // Helm's --set splits on commas; the chart takes the dual-stack CIDR escaped.
        format!("clusterCIDR={}", opts.cluster_cidr.replace(',', "\\,")),
    ];
    let defaults = ManifestOptions::default();
    if opts.namespace != defaults.namespace {
        sets.push(format!("namespace={}", opts.namespace));
    }
    if opts.monitoring {
        sets.push("monitoring.enabled=true".into());
    }
    if !opts.watch_based {
        sets.push("watchBased=false".into());
    }
    if opts.metrics_port != defaults.metrics_port {
        sets.push(format!("metricsPort={}", opts.metrics_port));
    }
    if let Some(image) = &opts.plugin_image {
        sets.push(format!("exec.pluginImage={image}"));
    }
    sets
}

fn compare(opts: &ManifestOptions) {
    let ours = objects(&render(opts));
    let chart = objects(&helm::template(&sets(opts)));
    let what = format!(
        "{} in {} (monitoring {})",
        opts.provider, opts.namespace, opts.monitoring
    );
    assert_eq!(
        ours.keys().collect::<Vec<_>>(),
        chart.keys().collect::<Vec<_>>(),
        "{what}: the same objects"
    );
    for (key, object) in &ours {
        assert_eq!(
            &chart[key], object,
            "{what}: {key:?} differs\n---- chart:\n{:#}\n---- manifests:\n{object:#}",
            chart[key]
        );
    }
}

#[test]
fn the_chart_renders_what_manifests_prints_for_every_provider() {
    for provider in PROVIDERS {
        let opts = ManifestOptions {
            provider: provider.into(),
            cluster_cidr: "10.244.0.0/16".into(),
            ..ManifestOptions::default()
        };
        compare(&opts);
        compare(&ManifestOptions {
            namespace: "routing".into(),
            monitoring: true,
            cluster_cidr: "10.244.0.0/16,fd00:10:244::/56".into(),
            ..opts.clone()
        });
    }
    for opts in [
        ManifestOptions {
            provider: "exec".into(),
            plugin_image: Some("ghcr.io/acme/router-plugin:1.2".into()),
            ..ManifestOptions::default()
        },
        ManifestOptions {
            namespace: "default".into(),
            watch_based: false,
            metrics_port: 9100,
            ..ManifestOptions::default()
        },
    ] {
        compare(&ManifestOptions {
            cluster_cidr: "10.244.0.0/16".into(),
            ..opts
        });
    }
}

#[test]
fn helm_lint_is_clean_for_every_provider() {
    let chart = helm::chart_dir();
    for provider in PROVIDERS {
        let out = helm::run(&[
            "lint",
            "--strict",
            chart.to_str().expect("a UTF-8 path"),
            "--set",
            &format!("cloudProvider={provider}"),
            "--set",
            "clusterCIDR=10.244.0.0/16",
        ]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{provider}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains("0 chart(s) failed"), "{provider}: {text}");
        assert!(
            !text.contains("[WARNING]") && !text.contains("[ERROR]"),
            "{provider}: {text}"
        );
    }
}

#[test]
fn the_chart_refuses_what_manifests_refuses() {
    let chart = helm::chart_dir();
    for (sets, message) in [
        (vec!["cloudProvider=hcloud"], "clusterCIDR is required"),
        (
            vec!["clusterCIDR=10.0.0.0/8", "cloudProvider=vultr"],
            "cloudProvider",
        ),
        (
            vec![
                "clusterCIDR=10.0.0.0/8",
                "image.repository=REGISTRY/route-controller",
            ],
            "placeholder",
        ),
        (
            vec![
                "clusterCIDR=10.0.0.0/8",
                "image.repository=registry.example.com/route-controller",
            ],
            "placeholder",
        ),
        (
            vec![
                "clusterCIDR=10.0.0.0/8",
                "exec.pluginImage=ghcr.io/acme/p:1",
            ],
            "only cloudProvider=exec",
        ),
    ] {
        let mut args = vec![
            "template",
            "route-controller",
            chart.to_str().expect("a UTF-8 path"),
        ];
        for set in &sets {
            args.extend(["--set", set]);
        }
        let out = helm::run(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{sets:?} rendered");
        assert!(stderr.contains(message), "{sets:?}: {stderr}");
    }
}

/// The Secrets an operator has already, by their names: the chart points the volumes
/// and variables at them, and a real registry with a port passes.
#[test]
fn existing_secret_names_and_a_registry_with_a_port_are_taken() {
    let yaml = helm::template(&[
        "cloudProvider=hcloud".into(),
        "clusterCIDR=10.244.0.0/16".into(),
        "hcloud.secretName=hcloud-ccm".into(),
        "image.repository=localhost:5000/route-controller".into(),
    ]);
    let deployment = &objects(&yaml)[&(
        "Deployment".to_string(),
        "kube-system".to_string(),
        "route-controller".to_string(),
    )];
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["volumes"][0]["secret"]["secretName"], "hcloud-ccm");
    let container = &pod["containers"][0];
    assert_eq!(
        container["image"],
        format!(
            "localhost:5000/route-controller:{}",
            env!("CARGO_PKG_VERSION")
        )
    );
    let network = container["env"]
        .as_array()
        .and_then(|env| env.iter().find(|e| e["name"] == "HCLOUD_NETWORK"))
        .expect("HCLOUD_NETWORK");
    assert_eq!(network["valueFrom"]["secretKeyRef"]["name"], "hcloud-ccm");

    let yaml = helm::template(&[
        "cloudProvider=openstack".into(),
        "clusterCIDR=10.244.0.0/16".into(),
        "cloudConfig.secretName=cloud-config".into(),
    ]);
    let deployment = &objects(&yaml)[&(
        "Deployment".to_string(),
        "kube-system".to_string(),
        "route-controller".to_string(),
    )];
    let volume = &deployment["spec"]["template"]["spec"]["volumes"][0];
    assert_eq!(volume["name"], "openstack-cloud-config");
    assert_eq!(volume["secret"]["secretName"], "cloud-config");
}
