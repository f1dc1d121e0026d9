//! End to end: route-table limits and pre-flight checks (issue 14, items 2 and 4), the
//! `route-controller` binary against a real kube-apiserver and the Hetzner double,
//! which refuses an `add_route` beyond the network's limit as the real API does.
//!
//! What these pin: a network that is full gets no create (the node gets
//! `NetworkUnavailable=True`, reason `RouteTableFull`, and one event); a scale-down
//! makes room and the waiting node's route follows; a node the network cannot route
//! to is told why before any request. Through it all, not one cloud call fails.

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

use std::time::Duration;

use controller_process::{ControllerProcess, sum};
use e2e_cluster::{
    create_node, delete_node, events_about, poll_until, wait_for_network_unavailable,
};
use e2e_hcloud::{HcloudCluster, NETWORK, TestNode, WATCH_MODE, server_ip};

/// Patience for anything the controller does in reaction to a change.
const PATIENCE: Duration = Duration::from_secs(30);

fn wait_for_condition(
    ctl: &mut ControllerProcess,
    cluster: &HcloudCluster,
    node: &str,
    status: &str,
    reason: &str,
) {
    let names = vec![node.to_string()];
    if let Err(e) = wait_for_network_unavailable(&cluster.api, &names, status, reason, PATIENCE) {
        ctl.fail(&e);
    }
}

/// Every cloud call of the run, by outcome: all must be successes.
fn failed_calls(ctl: &mut ControllerProcess) -> f64 {
    let m = ctl.scrape();
    sum(&m, "route_controller_cloud_requests_total", &[])
        - sum(
            &m,
            "route_controller_cloud_requests_total",
            &[("outcome", "success")],
        )
}

fn events_with_reason(
    cluster: &HcloudCluster,
    node: &TestNode,
    reason: &str,
) -> Vec<serde_json::Value> {
    events_about(&cluster.api, &node.uid)
        .into_iter()
        .filter(|e| e["reason"] == reason)
        .collect()
}

/// Guards item 2 end to end. With the hold removed from the controller, the third
/// node's add_route goes out and the double refuses it (route_limit_refusals > 0,
/// failed calls > 0, reason NoRouteCreated).
#[test]
fn a_full_network_holds_the_create_and_the_route_follows_a_scale_down_with_no_failed_call() {
    let cluster = HcloudCluster::start("e2e-limit", [41, 42, 43]);
    cluster.hetzner.double.set_route_limit(3);
    // Someone else's route, outside the cluster CIDR: it counts, and is never deleted.
    cluster
        .hetzner
        .double
        .put_route(NETWORK, "192.168.50.0/24", &server_ip(41));
    let mut ctl = cluster
        .controller()
        .arg(WATCH_MODE)
        .env("HCLOUD_NETWORK_ROUTE_LIMIT", "3")
        .spawn("limit");
    ctl.wait_ready(PATIENCE);
    let a = cluster.node("limit-a", 41);
    let b = cluster.node("limit-b", 42);
    wait_for_condition(&mut ctl, &cluster, &a.name, "False", "RouteCreated");
    wait_for_condition(&mut ctl, &cluster, &b.name, "False", "RouteCreated");

    let c = cluster.node("limit-c", 43);
    wait_for_condition(&mut ctl, &cluster, &c.name, "True", "RouteTableFull");
    let events = poll_until(PATIENCE, || {
        let e = events_with_reason(&cluster, &c, "RouteTableFull");
        (!e.is_empty()).then_some(e)
    })
    .unwrap_or_else(|| ctl.fail("no RouteTableFull event about the node that cannot get a route"));
    let message = events[0]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        message.contains("3 of 3 routes") && message.contains(&c.cidr),
        "{message}"
    );
    assert!(
        cluster.hetzner.add_route_requests(&c.cidr).is_empty(),
        "a create that cannot fit was sent"
    );
    let m = ctl.scrape();
    assert_eq!(
        m.value("route_controller_route_table_routes", &[("table", "k8s")]),
        3.0
    );
    assert_eq!(
        m.value("route_controller_route_table_limit", &[("table", "k8s")]),
        3.0
    );

    // Scale-down: a's route goes, c's follows.
    delete_node(&cluster.api, &a.name);
    wait_for_condition(&mut ctl, &cluster, &c.name, "False", "RouteCreated");
    assert!(
        cluster.hetzner.has_route(&c.cidr, &c.gateway),
        "{:?}",
        cluster.hetzner.routes()
    );
    assert!(
        cluster.hetzner.has_route_to("192.168.50.0/24"),
        "someone else's route survives"
    );
    assert_eq!(cluster.hetzner.add_route_requests(&c.cidr).len(), 1);
    assert_eq!(cluster.hetzner.double.route_limit_refusals(), 0);
    assert_eq!(events_with_reason(&cluster, &c, "RouteTableFull").len(), 1);
    assert_eq!(failed_calls(&mut ctl), 0.0, "no cloud call failed");
    ctl.terminate();
}

/// Guards item 4 end to end: a node whose InternalIP is outside the network, and one
/// on a Robot server (its vSwitch IP is in the range, but no cloud server holds it),
/// each get their reason and one event naming the fix, and no add_route is sent.
/// Without the pre-flight check the double answers "invalid gateway" for the first
/// and the second fails after its call, both counted as failed calls.
#[test]
fn nodes_the_network_cannot_route_to_are_told_why_before_any_call() {
    let cluster = HcloudCluster::start("e2e-preflight", [51]);
    let mut ctl = cluster.controller().arg(WATCH_MODE).spawn("preflight");
    ctl.wait_ready(PATIENCE);
    let fine = cluster.node("preflight-fine", 51);
    let outside = create_node(
        &cluster.api,
        "preflight-outside",
        &["10.244.52.0/24"],
        "192.168.9.9",
        "",
    );
    let robot = create_node(
        &cluster.api,
        "preflight-robot",
        &["10.244.53.0/24"],
        "10.0.200.2",
        "",
    );
    wait_for_condition(&mut ctl, &cluster, &fine.name, "False", "RouteCreated");
    wait_for_condition(
        &mut ctl,
        &cluster,
        "preflight-outside",
        "True",
        "InternalIPOutsideNetwork",
    );
    wait_for_condition(
        &mut ctl,
        &cluster,
        "preflight-robot",
        "True",
        "ServerNotInNetwork",
    );
    for (node, reason, fix) in [
        (&outside, "InternalIPOutsideNetwork", "--node-ip"),
        (&robot, "ServerNotInNetwork", "attach-to-network"),
    ] {
        let uid = node["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let events = poll_until(PATIENCE, || {
            let e: Vec<_> = events_about(&cluster.api, &uid)
                .into_iter()
                .filter(|e| e["reason"] == reason)
                .collect();
            (!e.is_empty()).then_some(e)
        })
        .unwrap_or_else(|| ctl.fail(&format!("no {reason} event")));
        assert_eq!(events.len(), 1, "{events:#?}");
        let message = events[0]["message"].as_str().unwrap_or_default();
        assert!(message.contains(fix), "{message}");
    }
    assert!(
        cluster
            .hetzner
            .add_route_requests("10.244.52.0/24")
            .is_empty()
    );
    assert!(
        cluster
            .hetzner
            .add_route_requests("10.244.53.0/24")
            .is_empty()
    );
    assert_eq!(failed_calls(&mut ctl), 0.0, "no cloud call failed");
    ctl.terminate();
}
