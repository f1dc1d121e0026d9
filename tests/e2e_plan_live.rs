//! `route-controller plan` against live systems: nodes read from a real kube-apiserver,
//! routes from the Hetzner provider talking to the test double. It must print what a
//! pass would do and change nothing.

#[path = "support/hcloud_double.rs"]
mod hcloud_double;
#[path = "support/kube_apiserver.rs"]
mod kube_apiserver;

use std::process::Command;

use hcloud_double::HcloudDouble;

const NETWORK: u64 = 4711;

#[test]
fn plan_reads_the_cluster_and_the_cloud_and_changes_nothing() {
    let api = kube_apiserver::shared();
    let node = |name: &str, id: u64, cidr: &str, ip: &str| {
        let created = api.create_node(name, &[cidr], &[("InternalIP", ip)]);
        let path = format!("/api/v1/nodes/{name}");
        api.patch(
            &path,
            "application/merge-patch+json",
            &serde_json::json!({"spec": {"providerID": format!("hcloud://{id}")}}),
        );
        created
    };
    node("plan-live-a", 101, "10.244.1.0/24", "10.0.0.11");
    node("plan-live-b", 102, "10.244.2.0/24", "10.0.0.12");

    let double = HcloudDouble::start("plan-live-token-0123456789");
    double.add_network(NETWORK, "k8s", "10.0.0.0/8", &["10.0.0.0/24"]);
    double.add_server(101, "plan-live-a", Some((NETWORK, "10.0.0.11")));
    double.add_server(102, "plan-live-b", Some((NETWORK, "10.0.0.12")));
    // a's route exists; a stale route to a server that is gone; a foreign route.
    double.put_route(NETWORK, "10.244.1.0/24", "10.0.0.11");
    double.put_route(NETWORK, "10.244.9.0/24", "10.0.0.99");
    double.put_route(NETWORK, "192.168.0.0/24", "10.0.0.11");
    double.clear_requests();

    let out = Command::new(env!("CARGO_BIN_EXE_route-controller"))
        .args([
            "plan",
            "--kubeconfig",
            api.admin_kubeconfig().to_str().unwrap(),
            "--cloud-provider",
            "hcloud",
            "--cluster-cidr",
            "10.244.0.0/16",
            "--output",
            "json",
        ])
        .env_clear()
        .env("HOME", std::env::temp_dir())
        .env("HCLOUD_TOKEN", double.token())
        .env("HCLOUD_NETWORK", NETWORK.to_string())
        .env("HCLOUD_ENDPOINT", double.endpoint())
        .output()
        .expect("run the binary");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();

    let creates: Vec<(String, String)> = plan["creates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["targetNode"].as_str().unwrap().into(),
                c["destinationCIDR"].as_str().unwrap().into(),
            )
        })
        .filter(|(n, _): &(String, String)| n.starts_with("plan-live-"))
        .collect();
    assert_eq!(
        creates,
        vec![("plan-live-b".to_string(), "10.244.2.0/24".to_string())],
        "{plan}"
    );
    let deletes: Vec<&str> = plan["deletes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["destinationCIDR"].as_str().unwrap())
        .collect();
    assert!(
        deletes.contains(&"10.244.9.0/24"),
        "the route to a vanished server goes: {plan}"
    );
    assert!(
        !deletes.contains(&"192.168.0.0/24"),
        "outside the cluster CIDR: {plan}"
    );
    assert!(
        !deletes.contains(&"10.244.1.0/24"),
        "a's route is right: {plan}"
    );

    // Nothing was changed: only reads reached the cloud, and the routes are as before.
    let writes: Vec<_> = double
        .requests()
        .into_iter()
        .filter(|r| r.method != "GET")
        .collect();
    assert!(writes.is_empty(), "plan wrote to the cloud: {writes:?}");
    assert_eq!(double.routes(NETWORK).len(), 3);
    let b = api.get_json("/api/v1/nodes/plan-live-b");
    let conditions = b["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        !conditions.iter().any(|c| c["type"] == "NetworkUnavailable"),
        "plan wrote a condition: {conditions:?}"
    );
}
