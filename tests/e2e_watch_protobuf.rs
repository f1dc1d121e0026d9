//! End to end: the node watch in protobuf against the real kube-apiserver, beside the
//! same watch in JSON. Both watches of one cluster must deliver the same events with the
//! same nodes (name, uid, resourceVersion, providerID, pod CIDRs, addresses, the
//! NetworkUnavailable condition, and the labels a `--node-selector` reads), over a
//! streaming list and the watch after it, and a change and a deletion.
//!
//! It guards `kube::protobuf`'s field numbers against the server's own encoding: a
//! wrong number reads nothing or the wrong field, and the two watches differ. Seen
//! failing with the uid read from field 4 (selfLink) instead of 5, and with the
//! NetworkUnavailable condition's reason read from its message (6).

#[path = "support/kube_apiserver.rs"]
mod kube_apiserver;

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, unbounded};
use kube_apiserver::KubeApiserver;
use route_controller::NodeEvent;
use route_controller::kube::watch::{NodeWatch, WatchConfig, spawn_node_watch};
use route_controller::kube::{Client, ClientOptions, Env, KubeConfig, LoadOptions};
use route_controller::metrics::Metrics;
use route_controller::node_filter::NodeFilter;
use route_controller::selector::Selector;
use serde_json::json;

const PATIENCE: Duration = Duration::from_secs(60);

fn watch(api: &KubeApiserver, protobuf: bool) -> (NodeWatch, Receiver<NodeEvent>) {
    let config = KubeConfig::load(
        &LoadOptions {
            kubeconfig: Some(api.admin_kubeconfig().to_path_buf()),
            ..LoadOptions::default()
        },
        &Env::empty(),
    )
    .expect("the admin kubeconfig");
    let client = Client::new(&config, ClientOptions::default()).expect("a client");
    let (tx, rx) = unbounded();
    let config = WatchConfig {
        protobuf,
        // A selector, so that both read the labels (and nodes without the label come
        // as Unselected).
        filter: NodeFilter {
            selector: Selector::parse("pool!=edge").expect("a selector"),
            ..NodeFilter::everything()
        },
        ..WatchConfig::default()
    };
    let watch = spawn_node_watch(&client, config, tx, Arc::new(Metrics::new())).expect("spawn");
    (watch, rx)
}

/// Events until one matches `last`, in order.
fn events_until(rx: &Receiver<NodeEvent>, last: impl Fn(&NodeEvent) -> bool) -> Vec<NodeEvent> {
    let deadline = Instant::now() + PATIENCE;
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let event = rx
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("no matching event within {PATIENCE:?}; seen {seen:#?}"));
        let done = last(&event);
        seen.push(event);
        if done {
            return seen;
        }
    }
}

fn node(name: &str, pool: &str, cidrs: &[&str]) -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"pool": pool, "kubernetes.io/hostname": name}},
        "spec": {"podCIDR": cidrs[0], "podCIDRs": cidrs, "providerID": format!("hcloud://{name}")},
    })
}

#[test]
fn the_protobuf_watch_delivers_what_the_json_watch_delivers() {
    let api = KubeApiserver::start_fresh();
    for (name, pool, cidrs) in [
        ("pb-1", "a", vec!["10.244.1.0/24", "fd00:1::/64"]),
        ("pb-2", "b", vec!["10.244.2.0/24"]),
        ("pb-edge", "edge", vec!["10.244.3.0/24"]),
    ] {
        api.post_json("/api/v1/nodes", &node(name, pool, &cidrs));
    }
    // Addresses and conditions live in the status.
    api.patch(
        "/api/v1/nodes/pb-1/status",
        "application/merge-patch+json",
        &json!({"status": {
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}, {"type": "Hostname", "address": "pb-1"}],
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ready"},
                {"type": "NetworkUnavailable", "status": "False", "reason": "RouteCreated", "message": "a route"}],
            "images": [{"names": ["registry.k8s.io/pause:3.10"], "sizeBytes": 320368}],
        }}),
    );

    let (json_watch, json_rx) = watch(&api, false);
    let (proto_watch, proto_rx) = watch(&api, true);
    let listed = |rx: &Receiver<NodeEvent>| events_until(rx, |e| *e == NodeEvent::InitDone);
    let (from_json, from_proto) = (listed(&json_rx), listed(&proto_rx));
    assert_eq!(
        from_json.len(),
        5,
        "Init, three nodes, InitDone: {from_json:#?}"
    );
    assert_eq!(from_proto, from_json, "the streaming lists differ");
    let pb1 = from_proto
        .iter()
        .find_map(|e| match e {
            NodeEvent::InitApply(n) if n.name == "pb-1" => Some(n.clone()),
            _ => None,
        })
        .expect("pb-1 listed");
    assert_eq!(pb1.pod_cidrs, ["10.244.1.0/24", "fd00:1::/64"]);
    assert_eq!(pb1.addresses.len(), 2);
    assert_eq!(pb1.provider_id.as_deref(), Some("hcloud://pb-1"));
    assert!(!pb1.uid.is_empty() && !pb1.resource_version.is_empty());
    let condition = pb1.network_unavailable.expect("the condition");
    assert_eq!(
        (&*condition.status, &*condition.reason),
        ("False", "RouteCreated")
    );
    assert!(
        from_proto
            .iter()
            .any(|e| matches!(e, NodeEvent::InitUnselected { name, .. } if name == "pb-edge")),
        "the selector read the labels: {from_proto:#?}"
    );

    // A change and a deletion, after the list: the watch itself.
    api.patch(
        "/api/v1/nodes/pb-2",
        "application/merge-patch+json",
        &json!({"metadata": {"labels": {"pool": "edge"}}}),
    );
    api.delete("/api/v1/nodes/pb-1");
    let gone = |e: &NodeEvent| matches!(e, NodeEvent::Deleted(n) if n.name == "pb-1");
    let (from_json, from_proto) = (events_until(&json_rx, gone), events_until(&proto_rx, gone));
    assert_eq!(from_proto, from_json, "the watches differ");
    assert!(
        from_proto
            .iter()
            .any(|e| matches!(e, NodeEvent::Unselected { name, .. } if name == "pb-2")),
        "{from_proto:#?}"
    );
    json_watch.stop();
    proto_watch.stop();
}
