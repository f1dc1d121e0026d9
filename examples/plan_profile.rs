use route_controller::model::{Cidr, Node, NodeAddress, Route};
use route_controller::plan;

fn main() {
    let n: usize = std::env::var("NODES").ok().and_then(|v| v.parse().ok()).unwrap_or(5000);
    let k: usize = std::env::var("PLANS").ok().and_then(|v| v.parse().ok()).unwrap_or(10);
    let nodes: Vec<Node> = (0..n)
        .map(|i| Node {
            name: format!("node-{i}"),
            uid: format!("uid-{i}"),
            resource_version: "1".into(),
            provider_id: Some(format!("fake://{i}")),
            pod_cidrs: vec![format!("10.{}.{}.0/24", (i >> 8) & 255, i & 255)],
            addresses: vec![NodeAddress::internal_ip(&format!("172.16.{}.{}", (i >> 8) & 255, i & 255))],
            network_unavailable: None,
        })
        .collect();
    let routes: Vec<Route> = nodes
        .iter()
        .map(|node| Route {
            name: format!("r-{}", node.name),
            target_node: node.name.clone(),
            target_node_addresses: node.addresses.clone(),
            destination_cidr: node.pod_cidrs[0].clone(),
            ..Route::default()
        })
        .collect();
    let cidrs = vec![Cidr::parse("10.0.0.0/8").unwrap()];
    let mut kept = 0;
    for _ in 0..k {
        kept += plan::plan(&nodes, &routes, &cidrs).kept;
    }
    println!("{kept}");
}
