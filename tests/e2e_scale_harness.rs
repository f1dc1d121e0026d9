//! The parts of `cargo bench -- scale` that can break without the bench saying so:
//! the bulk loader must leave realistic nodes in the real kube-apiserver (a node that
//! lost its images or conditions on the way would make the bench's memory figures
//! flattering), the status reports must change what the kubelet changes, and the
//! proxy must count every byte a client reads (the bench's "MiB read" columns).

#[path = "support/fault_proxy.rs"]
mod fault_proxy;
#[path = "support/kube_apiserver.rs"]
mod kube_apiserver;
#[path = "support/scale_cluster.rs"]
mod scale_cluster;

use std::time::Duration;

use kube_apiserver::KubeApiserver;
use serde_json::Value;

const NODES: usize = 50;

fn ready_heartbeat(node: &Value) -> String {
    node["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready")
        .and_then(|c| c["lastHeartbeatTime"].as_str())
        .unwrap_or_default()
        .to_string()
}

/// Guards `load_nodes` and `node`: every node arrives with its status (5 conditions,
/// 40 images, addresses), its pod CIDR and provider ID, at about 10 KiB as stored;
/// and `play_heartbeats`: each report moves the Ready heartbeat of its node by the
/// kubelet's 5 minutes and leaves NetworkUnavailable alone.
#[test]
fn loader_creates_realistic_nodes_and_reports_move_the_heartbeat() {
    let api = KubeApiserver::start_fresh();
    scale_cluster::load_nodes(&api, NODES, 4);
    let list = api.get_json("/api/v1/nodes");
    let items = list["items"].as_array().expect("a node list");
    assert_eq!(items.len(), NODES, "every node was created");
    for node in items {
        let name = node["metadata"]["name"].as_str().unwrap_or_default();
        assert_eq!(
            node["status"]["images"].as_array().map_or(0, Vec::len),
            40,
            "{name}: images"
        );
        assert_eq!(
            node["status"]["conditions"].as_array().map_or(0, Vec::len),
            5,
            "{name}: conditions"
        );
        assert!(
            node["status"]["addresses"]
                .as_array()
                .is_some_and(|a| a.len() == 2),
            "{name}: addresses"
        );
        assert!(
            node["metadata"]["managedFields"]
                .as_array()
                .is_some_and(|m| !m.is_empty()),
            "{name}: managedFields"
        );
        assert!(
            node["spec"]["providerID"]
                .as_str()
                .is_some_and(|p| p.starts_with("hcloud://")),
            "{name}: providerID"
        );
    }
    let size = items[0].to_string().len();
    assert!(
        (8 << 10..16 << 10).contains(&size),
        "a stored node is about 10 KiB of JSON, not {size} bytes"
    );

    let before =
        ready_heartbeat(&api.get_json(&format!("/api/v1/nodes/{}", scale_cluster::node_name(7))));
    scale_cluster::play_heartbeats(&api, NODES, 2 * NODES, Duration::from_millis(500), 4, 1);
    let node = api.get_json(&format!("/api/v1/nodes/{}", scale_cluster::node_name(7)));
    let after = ready_heartbeat(&node);
    // Rounds 1 and 2 were played: the last heartbeat is 2 × 5 min after registration.
    assert_eq!(
        (before.as_str(), after.as_str()),
        ("2026-11-18T11:06:40Z", "2026-11-18T11:16:40Z"),
        "the Ready heartbeat moved by two reports"
    );
    let network = node["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "NetworkUnavailable")
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        network["status"], "False",
        "the reports keep NetworkUnavailable: {network}"
    );
}

/// Guards the proxy's byte counters: a client that lists the nodes through it reads
/// at least the list's JSON (TLS adds to it, never takes away), and the count grows by
/// that much again for a second list.
#[test]
fn proxy_counts_every_byte_a_client_reads() {
    let api = KubeApiserver::start_fresh();
    scale_cluster::load_nodes(&api, 10, 2);
    let proxy =
        fault_proxy::FaultProxy::start(std::net::SocketAddr::from(([127, 0, 0, 1], api.port())));
    let list = |url: &str| -> usize {
        let request = ureq::http::Request::builder()
            .uri(url)
            .header("Authorization", format!("Bearer {}", api.admin_token()))
            .header("Accept", "application/json")
            .body(())
            .expect("a request");
        let mut response = api
            .agent()
            .run(request)
            .unwrap_or_else(|e| panic!("GET {url}: {e}"));
        assert_eq!(response.status().as_u16(), 200);
        response
            .body_mut()
            .read_to_string()
            .expect("the list")
            .len()
    };
    let url = format!("https://{}/api/v1/nodes", proxy.addr());
    let body = list(&url);
    let first = wait_for_bytes(&proxy, body as u64);
    assert!(
        first >= body as u64,
        "the proxy counted {first} bytes for a {body}-byte list"
    );
    let second_body = list(&url);
    let second = wait_for_bytes(&proxy, first + second_body as u64);
    assert!(
        second - first >= second_body as u64,
        "a second list added {} bytes, not {second_body}+",
        second - first
    );
    assert!(proxy.bytes().0 > 0, "the requests were counted too");
}

/// The proxy's client-bound count once it reaches `at_least` (its pump may lag the
/// client's read by a moment), or what it is after 5 s.
fn wait_for_bytes(proxy: &fault_proxy::FaultProxy, at_least: u64) -> u64 {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while proxy.bytes().1 < at_least && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    proxy.bytes().1
}

/// Guards the bench's relist trigger: after nodes change, etcd's history is compacted
/// and the API server restarts, a watch from the resource version a controller had
/// before is refused with 410 Gone, so the controller must list again (without it the
/// bench's "relist" column would measure a plain resume). Seen failing: it fails
/// without the restart; with the restart alone a plain watch already gets 410 (the
/// compaction is there for a watch that the server hands to etcd, e.g. while its
/// cache initialises, which upstream's client met in a run without it).
#[test]
fn a_watch_from_before_compaction_and_restart_gets_410() {
    let mut api = KubeApiserver::start_fresh();
    scale_cluster::load_nodes(&api, 5, 1);
    let rv = api.get_json("/api/v1/nodes")["metadata"]["resourceVersion"]
        .as_str()
        .expect("a list resource version")
        .to_string();
    scale_cluster::play_heartbeats(&api, 5, 5, Duration::ZERO, 1, 1);
    scale_cluster::compact_etcd(&api);
    api.restart();
    let mut watch = api.watch(
        &format!("/api/v1/nodes?watch=1&resourceVersion={rv}&allowWatchBookmarks=true"),
        api.admin_token(),
        Duration::from_secs(30),
    );
    let event = watch.next_event().expect("an event");
    assert_eq!(
        (event["type"].as_str(), event["object"]["code"].as_u64()),
        (Some("ERROR"), Some(410)),
        "the resumed watch is refused: {event}"
    );
}
