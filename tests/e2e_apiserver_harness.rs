//! Proves the end-to-end harness: a real kube-apiserver with a real etcd,
//! its identities (admin, the controller user, ServiceAccount tokens), RBAC,
//! watches, and restarts that keep the stored objects.

#[path = "support/kube_apiserver.rs"]
mod kube_apiserver;

use std::thread;
use std::time::{Duration, Instant};

use kube_apiserver::{KubeApiserver, shared};
use serde_json::{Value, json};

#[test]
fn node_with_pod_cidrs_and_addresses_reads_back() {
    let api = shared();
    let created = api.create_node(
        "harness-node-readback",
        &["10.244.1.0/24", "fd00:10:244:1::/64"],
        &[
            ("InternalIP", "10.0.0.11"),
            ("Hostname", "harness-node-readback"),
        ],
    );
    assert!(
        created["metadata"]["uid"]
            .as_str()
            .is_some_and(|u| !u.is_empty())
    );

    let node = api.get_json("/api/v1/nodes/harness-node-readback");
    assert_eq!(node["metadata"]["uid"], created["metadata"]["uid"]);
    assert_eq!(node["spec"]["podCIDR"], "10.244.1.0/24");
    assert_eq!(
        node["spec"]["podCIDRs"],
        json!(["10.244.1.0/24", "fd00:10:244:1::/64"])
    );
    assert_eq!(
        node["status"]["addresses"],
        json!([
            { "type": "InternalIP", "address": "10.0.0.11" },
            { "type": "Hostname", "address": "harness-node-readback" },
        ])
    );
    // The server really validates: a malformed pod CIDR is rejected.
    let bad = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": { "name": "harness-node-bad-cidr" },
        "spec": { "podCIDR": "10.244.300.0/24", "podCIDRs": ["10.244.300.0/24"] },
    });
    let r = api.request(
        "POST",
        "/api/v1/nodes",
        api.admin_token(),
        Some("application/json"),
        Some(bad.to_string().as_bytes()),
    );
    assert_eq!(r.status, 422, "{}", r.body);
    assert_eq!(r.reason().as_deref(), Some("Invalid"));
}

#[test]
fn controller_user_is_forbidden_to_list_nodes_until_rbac_allows_it() {
    let api = shared();
    api.create_node(
        "harness-node-rbac",
        &["10.244.2.0/24"],
        &[("InternalIP", "10.0.0.12")],
    );

    // Authenticated (not 401) but not authorized.
    let r = api.request("GET", "/api/v1/nodes", api.controller_token(), None, None);
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(r.reason().as_deref(), Some("Forbidden"));
    let message = r.json()["message"].as_str().unwrap_or_default().to_string();
    assert!(message.contains(api.controller_user()), "{message}");

    // An unknown token is not authenticated at all.
    let r = api.request("GET", "/api/v1/nodes", "not-a-valid-token", None, None);
    assert_eq!(r.status, 401, "{}", r.body);

    api.post_json(
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        &json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": { "name": "harness-node-reader" },
            "rules": [{ "apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"] }],
        }),
    );
    api.post_json(
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        &json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": { "name": "harness-node-reader" },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "harness-node-reader" },
            "subjects": [{ "apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": api.controller_user() }],
        }),
    );

    // The RBAC authorizer reads through an informer, so the grant takes
    // effect after a short delay.
    let deadline = Instant::now() + Duration::from_secs(20);
    let list = loop {
        let r = api.request("GET", "/api/v1/nodes", api.controller_token(), None, None);
        if r.status == 200 {
            break r.json();
        }
        assert_eq!(r.status, 403, "{}", r.body);
        assert!(
            Instant::now() < deadline,
            "still forbidden 20 s after the binding: {}",
            r.body
        );
        thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(list["kind"], "NodeList");
    assert!(
        names(&list).contains(&"harness-node-rbac".to_string()),
        "{list}"
    );

    // The grant is exactly what the role says: no writes.
    let r = api.request(
        "DELETE",
        "/api/v1/nodes/harness-node-rbac",
        api.controller_token(),
        None,
        None,
    );
    assert_eq!(r.status, 403, "{}", r.body);
}

#[test]
fn service_account_token_from_token_request_authenticates() {
    let api = shared();
    let token = api.service_account_token("harness-sa", "route-controller");
    // A second call reuses the existing ServiceAccount.
    let again = api.service_account_token("harness-sa", "route-controller");
    assert_ne!(token, again, "each TokenRequest issues a new token");

    let body = json!({ "apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview" });
    let r = api.request(
        "POST",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        &token,
        Some("application/json"),
        Some(body.to_string().as_bytes()),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let user = &r.json()["status"]["userInfo"];
    assert_eq!(
        user["username"],
        "system:serviceaccount:harness-sa:route-controller"
    );
    let groups: Vec<&str> = user["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        groups.contains(&"system:serviceaccounts:harness-sa"),
        "{groups:?}"
    );
}

#[test]
fn private_instance_keeps_objects_across_stop_restart_and_kill() {
    let mut api = KubeApiserver::start_fresh();
    let port = api.port();
    let admin_token = api.admin_token().to_string();
    let ca = api.ca_pem().to_string();
    let uid = api.create_node(
        "harness-node-persist",
        &["10.244.3.0/24"],
        &[("InternalIP", "10.0.0.13")],
    )["metadata"]["uid"]
        .clone();

    api.stop();
    assert!(!api.is_running());
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "port {port} still accepts connections after stop"
    );

    api.restart();
    assert_eq!(api.port(), port);
    assert_eq!(api.admin_token(), admin_token);
    assert_eq!(api.ca_pem(), ca);
    let node = api.get_json("/api/v1/nodes/harness-node-persist");
    assert_eq!(node["metadata"]["uid"], uid);
    assert_eq!(node["spec"]["podCIDRs"], json!(["10.244.3.0/24"]));

    // A crash (SIGKILL, no clean shutdown) keeps acknowledged writes too.
    api.create_node("harness-node-crash", &["10.244.4.0/24"], &[]);
    api.kill();
    assert!(!api.is_running());
    api.restart();
    let list = api.get_json("/api/v1/nodes");
    let names = names(&list);
    assert!(
        names.contains(&"harness-node-persist".to_string()),
        "{names:?}"
    );
    assert!(
        names.contains(&"harness-node-crash".to_string()),
        "{names:?}"
    );
}

#[test]
fn watch_streams_added_event_for_node_created_after_it_starts() {
    let api = shared();
    let list = api.get_json("/api/v1/nodes");
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .expect("list resourceVersion");

    let mut watch = api.watch(
        &format!("/api/v1/nodes?watch=1&resourceVersion={rv}"),
        api.admin_token(),
        Duration::from_secs(30),
    );
    api.create_node(
        "harness-node-watched",
        &["10.244.5.0/24"],
        &[("InternalIP", "10.0.0.15")],
    );

    let event = watch.wait_for(|e| e["object"]["metadata"]["name"] == "harness-node-watched");
    assert_eq!(event["type"], "ADDED", "{event}");
    assert_eq!(
        event["object"]["spec"]["podCIDRs"],
        json!(["10.244.5.0/24"])
    );
    let event_rv: u64 = event["object"]["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("numeric resourceVersion");
    assert!(event_rv > rv.parse::<u64>().expect("numeric list resourceVersion"));
}

fn names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|i| i["metadata"]["name"].as_str().map(str::to_string))
        .collect()
}
