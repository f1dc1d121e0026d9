//! `route-controller plan --cloud-provider hcloud` against the Hetzner double: the
//! network's headroom and the creates the pre-flight check refuses (issue 14, items 2
//! and 4), as an operator sees them before anything is changed.

#[path = "support/hcloud_double.rs"]
mod hcloud_double;

use std::process::Command;

use hcloud_double::HcloudDouble;
use serde_json::{Value, json};

const TOKEN: &str = "plan-limits-token-0123456789012345678901234567890123456789012345";

fn node(name: &str, cidr: &str, ip: &str, provider_id: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "uid": format!("uid-{name}")},
        "spec": {"podCIDR": cidr, "podCIDRs": [cidr], "providerID": provider_id},
        "status": {"addresses": [{"type": "InternalIP", "address": ip}]}
    })
}

/// Runs `plan` with the nodes given and the double's network as the cloud.
fn plan(double: &HcloudDouble, nodes: &[Value], output: &str) -> String {
    let dir = std::env::temp_dir().join(format!("plan-limits-{}-{output}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("nodes.json");
    let list = json!({"apiVersion": "v1", "kind": "NodeList", "items": nodes});
    std::fs::write(&file, list.to_string()).expect("write the node list");
    let out = Command::new(env!("CARGO_BIN_EXE_route-controller"))
        .args([
            "plan",
            "--cloud-provider=hcloud",
            "--cluster-cidr=10.244.0.0/16",
        ])
        .arg(format!("--output={output}"))
        .arg(format!("--nodes={}", file.display()))
        .env("HCLOUD_TOKEN", TOKEN)
        .env("HCLOUD_NETWORK", "1")
        .env("HCLOUD_ENDPOINT", double.endpoint())
        .env("HCLOUD_NETWORK_ROUTE_LIMIT", "3")
        .output()
        .expect("run the binary");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "plan failed: {}{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Guards "plan prints the headroom" and "each check shows in plan": without them the
/// table shows neither a TABLE nor a REFUSED line, and the refused node's route is
/// listed as a CREATE.
#[test]
fn plan_shows_the_networks_headroom_and_the_creates_the_checks_refuse() {
    let double = HcloudDouble::start(TOKEN);
    double.add_network(1, "k8s", "10.0.0.0/8", &["10.0.0.0/16"]);
    for id in 1..=3 {
        double.add_server(
            id,
            &format!("w{id}"),
            Some((1, &format!("10.0.0.{}", id + 1))),
        );
    }
    double.put_route(1, "10.244.1.0/24", "10.0.0.2");
    let nodes = [
        node("w1", "10.244.1.0/24", "10.0.0.2", "hcloud://1"),
        node("w2", "10.244.2.0/24", "10.0.0.3", "hcloud://2"),
        node("w3", "10.244.3.0/24", "10.0.0.4", "hcloud://3"),
        node("outside", "10.244.4.0/24", "192.168.9.9", ""),
    ];
    let table = plan(&double, &nodes, "table");
    assert!(
        table.contains(
            "TABLE      k8s                1 of 3 routes now, 3 after this plan (0 free)"
        ),
        "{table}"
    );
    assert!(table.contains("REFUSED    outside"), "{table}");
    assert!(table.contains("InternalIPOutsideNetwork"), "{table}");
    assert!(!table.contains("CREATE     outside"), "{table}");

    let json: Value = serde_json::from_str(&plan(&double, &nodes, "json")).expect("JSON");
    assert_eq!(
        json["tables"],
        json!([{"table": "k8s", "routes": 1, "limit": 3, "afterPlan": 3, "notFitting": 0}])
    );
    assert_eq!(json["refused"][0]["reason"], "InternalIPOutsideNetwork");
    // One more node than fits: the plan says it waits.
    let mut more = nodes.to_vec();
    double.add_server(5, "w5", Some((1, "10.0.0.6")));
    more.push(node("w5", "10.244.5.0/24", "10.0.0.6", "hcloud://5"));
    let table = plan(&double, &more, "table");
    assert!(
        table.contains("1 creates do not fit and wait (RouteTableFull)"),
        "{table}"
    );
    assert_eq!(double.count("POST", "/networks"), 0, "plan changes nothing");
}
