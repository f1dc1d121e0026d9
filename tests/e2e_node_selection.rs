//! End to end: a Hetzner cluster that mixes cloud servers with a dedicated Robot
//! server, run with `--node-selector`, against a real kube-apiserver and the Hetzner
//! Cloud double. The setup of the README's "Robot servers and other nodes that get no
//! route" section.
//!
//! What it guards: the cloud nodes the selector selects converge; the Robot node
//! (`hrobot://`, no server in the double) and the node the selector leaves out get no
//! route, no `NetworkUnavailable` and no event, and cost no cloud call: the double's
//! request log shows no failed request and none for their pod CIDRs; the route that
//! the unselected node already has is left alone, as is the route of a node that
//! becomes unselected; a label change that selects a node gives it its route at once.

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

use controller_process::ControllerProcess;
use e2e_cluster::{
    create_node, events_about, network_unavailable, poll_until, set_label,
    wait_for_network_unavailable,
};
use e2e_hcloud::{HcloudCluster, NETWORK, TestNode, WATCH_MODE, pod_cidr, server_ip};

const PATIENCE: Duration = Duration::from_secs(30);

/// The label the operator puts on the nodes that get routes.
const ROUTED: &str = "example.com/routes";

fn wait_for_route(ctl: &mut ControllerProcess, cluster: &HcloudCluster, node: &TestNode) {
    let found = poll_until(PATIENCE, || {
        cluster
            .hetzner
            .has_route(&node.cidr, &node.gateway)
            .then_some(())
    });
    if found.is_none() {
        ctl.fail(&format!(
            "no route {} via {} for node {} after {PATIENCE:?}; routes: {:?}",
            node.cidr,
            node.gateway,
            node.name,
            cluster.hetzner.routes()
        ));
    }
}

fn wait_for_created(ctl: &mut ControllerProcess, cluster: &HcloudCluster, nodes: &[&TestNode]) {
    let names: Vec<String> = nodes.iter().map(|n| n.name.clone()).collect();
    if let Err(e) =
        wait_for_network_unavailable(&cluster.api, &names, "False", "RouteCreated", PATIENCE)
    {
        ctl.fail(&e);
    }
}

/// Fails unless the double saw no failed request and none about `cidrs`.
fn assert_no_failed_call_and_none_for(
    ctl: &mut ControllerProcess,
    cluster: &HcloudCluster,
    cidrs: &[&str],
) {
    let requests = cluster.hetzner.double.requests();
    let failed: Vec<String> = requests
        .iter()
        .filter(|r| r.status == 0 || r.status >= 400)
        .map(|r| format!("{} {} -> {}", r.method, r.path, r.status))
        .collect();
    if !failed.is_empty() {
        ctl.fail(&format!("failed cloud calls: {failed:?}"));
    }
    let about: Vec<String> = requests
        .iter()
        .filter(|r| r.destination.as_deref().is_some_and(|d| cidrs.contains(&d)))
        .map(|r| format!("{} {} {:?}", r.method, r.path, r.destination))
        .collect();
    if !about.is_empty() {
        ctl.fail(&format!("requests about unselected nodes: {about:?}"));
    }
}

/// Fails if the node shows `NetworkUnavailable` or has an event.
fn assert_untouched(ctl: &mut ControllerProcess, cluster: &HcloudCluster, name: &str, uid: &str) {
    if let Some(c) = network_unavailable(&cluster.api, name) {
        ctl.fail(&format!(
            "node {name} is not routed here, yet shows NetworkUnavailable {c:?}"
        ));
    }
    let events = events_about(&cluster.api, uid);
    if !events.is_empty() {
        ctl.fail(&format!(
            "node {name} is not routed here, yet has events: {events:?}"
        ));
    }
}

#[test]
fn a_hetzner_cluster_with_a_robot_node_and_an_unselected_node_converges_without_a_failed_call() {
    let cluster = HcloudCluster::start("e2e-node-selection", [31, 32, 33, 34]);
    // The selected cloud nodes.
    let a = cluster.node("cloud-a", 31);
    let b = cluster.node("cloud-b", 32);
    for n in [&a, &b] {
        set_label(&cluster.api, &n.name, ROUTED, "on");
    }
    // A dedicated server on the vSwitch: labelled like the others (so only its
    // providerID keeps it out), with an address no cloud server has.
    let robot_cidr = pod_cidr(200);
    let robot = create_node(
        &cluster.api,
        "robot-1",
        &[&robot_cidr],
        "10.1.0.2",
        "hrobot://2401",
    );
    set_label(&cluster.api, "robot-1", ROUTED, "on");
    let robot_uid = robot["metadata"]["uid"].as_str().unwrap().to_string();
    // Cloud servers the selector leaves out; c already has a route, made by hand.
    let c = cluster.node("cloud-c", 33);
    let d = cluster.node("cloud-d", 34);
    cluster
        .hetzner
        .double
        .put_route(NETWORK, &c.cidr, &server_ip(33));

    let mut ctl = cluster
        .controller()
        .arg(WATCH_MODE)
        .arg(format!("--node-selector={ROUTED}=on"))
        .spawn("node_selection");
    ctl.wait_ready(PATIENCE);
    wait_for_route(&mut ctl, &cluster, &a);
    wait_for_route(&mut ctl, &cluster, &b);
    wait_for_created(&mut ctl, &cluster, &[&a, &b]);
    assert!(
        cluster.hetzner.has_route(&c.cidr, &c.gateway),
        "cloud-c's route is left alone: {:?}",
        cluster.hetzner.routes()
    );
    assert!(!cluster.hetzner.has_route_to(&d.cidr));
    assert!(!cluster.hetzner.has_route_to(&robot_cidr));
    assert_untouched(&mut ctl, &cluster, "robot-1", &robot_uid);
    assert_untouched(&mut ctl, &cluster, &c.name, &c.uid);
    assert_untouched(&mut ctl, &cluster, &d.name, &d.uid);
    assert_no_failed_call_and_none_for(&mut ctl, &cluster, &[&robot_cidr, &c.cidr, &d.cidr]);

    // b stops being selected: a pass runs and its route stays.
    let node_updates = |ctl: &mut ControllerProcess| {
        ctl.scrape().value(
            "route_controller_triggers_total",
            &[("trigger", "node_update")],
        )
    };
    let before = node_updates(&mut ctl);
    set_label(&cluster.api, &b.name, ROUTED, "off");
    ctl.wait_for_metric(
        "route_controller_triggers_total",
        &[("trigger", "node_update")],
        before + 1.0,
        PATIENCE,
    );
    // d is selected by a label change: its route appears, and its condition.
    set_label(&cluster.api, &d.name, ROUTED, "on");
    wait_for_route(&mut ctl, &cluster, &d);
    wait_for_created(&mut ctl, &cluster, &[&d]);
    assert!(
        cluster.hetzner.has_route(&b.cidr, &b.gateway),
        "the unselected node's route is left alone: {:?}",
        cluster.hetzner.routes()
    );
    assert!(
        cluster.hetzner.actions("delete_route", None).is_empty(),
        "nothing was deleted"
    );
    assert_eq!(cluster.hetzner.add_route_requests(&d.cidr).len(), 1);
    assert_untouched(&mut ctl, &cluster, "robot-1", &robot_uid);
    assert_no_failed_call_and_none_for(&mut ctl, &cluster, &[&robot_cidr, &c.cidr]);
    let log = ctl.log();
    assert!(
        log.contains("node cloud-b is no longer routed here: its labels do not match --node-selector; its routes are left alone"),
        "the log says why b's route stays"
    );
    assert!(
        log.contains(
            "routing the nodes that --node-selector \"example.com/routes=on\" selects with \
             providerID hcloud://<server> or none (not Robot's); the routes of other nodes are \
             left alone"
        ),
        "the start-up line says what is routed"
    );
    let took = ctl.terminate();
    eprintln!("node_selection: SIGTERM to exit 0 in {took:.2?}");
}
