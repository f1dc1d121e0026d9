//! End to end: the API server goes away under a running `route-controller` (a clean
//! stop, then a crash) and comes back on the same etcd data. The controller must keep
//! running, resume its node watch, serve the changes made right after the restart
//! (before it reconnects), and create no route twice.

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

use std::time::{Duration, Instant};

use controller_process::ControllerProcess;
use e2e_cluster::{delete_node, poll_until, wait_for_network_unavailable};
use e2e_hcloud::{HcloudCluster, TestNode, WATCH_MODE};

const PATIENCE: Duration = Duration::from_secs(60);

fn converged(
    ctl: &mut ControllerProcess,
    cluster: &HcloudCluster,
    present: &[&TestNode],
    gone: &[&TestNode],
) {
    let hetzner = &cluster.hetzner;
    let done = poll_until(PATIENCE, || {
        let ok = present
            .iter()
            .all(|n| hetzner.has_route(&n.cidr, &n.gateway))
            && gone.iter().all(|n| !hetzner.has_route_to(&n.cidr));
        ok.then_some(())
    });
    if done.is_none() {
        ctl.fail(&format!(
            "after {PATIENCE:?} the network's routes are {:?}; wanted {:?}, not {:?}",
            hetzner.routes(),
            present.iter().map(|n| &n.cidr).collect::<Vec<_>>(),
            gone.iter().map(|n| &n.cidr).collect::<Vec<_>>()
        ));
    }
    let names: Vec<String> = present.iter().map(|n| n.name.clone()).collect();
    if let Err(e) =
        wait_for_network_unavailable(&cluster.api, &names, "False", "RouteCreated", PATIENCE)
    {
        ctl.fail(&e);
    }
}

/// Waits until the controller's watch has noticed that the API server is gone.
fn wait_disconnected(ctl: &mut ControllerProcess) {
    ctl.wait_for_metrics("the node watch to notice the outage", PATIENCE, |m| {
        m.value("route_controller_watch_healthy", &[]) == 0.0
    });
}

#[test]
fn controller_resumes_its_watch_after_api_server_restarts_and_misses_no_change() {
    let mut cluster = HcloudCluster::start("e2e-restart", 81..=86);
    let n1 = cluster.node("restart-1", 81);
    let n2 = cluster.node("restart-2", 82);
    // A lease that outlives the outages: this test is about the watch; losing the
    // lease during a long outage ends the process by design (as upstream).
    let mut ctl = cluster
        .controller()
        .arg(WATCH_MODE)
        .args([
            "--leader-elect-lease-duration=90s",
            "--leader-elect-renew-deadline=60s",
        ])
        .spawn("restart");
    ctl.wait_ready(PATIENCE);
    converged(&mut ctl, &cluster, &[&n1, &n2], &[]);
    let before = ctl.scrape();

    // A clean stop and a restart; changes at once, before the watch is back (its
    // reconnect backoff is at least 0.6 s).
    cluster.api.stop();
    wait_disconnected(&mut ctl);
    let outage = Instant::now();
    cluster.api.restart();
    let n3 = cluster.node("restart-3", 83);
    delete_node(&cluster.api, &n1.name);
    let still_away = ctl.metric("route_controller_watch_healthy", &[]) == 0.0;
    eprintln!(
        "restart: API server back {:.2} s after the stop; changes made {} the controller reconnected",
        outage.elapsed().as_secs_f64(),
        if still_away { "before" } else { "after" }
    );
    converged(&mut ctl, &cluster, &[&n2, &n3], &[&n1]);
    ctl.assert_running();

    // A crash (SIGKILL: etcd and the apiserver die mid-flight) and a restart.
    cluster.api.kill();
    wait_disconnected(&mut ctl);
    cluster.api.restart();
    let n4 = cluster.node("restart-4", 84);
    delete_node(&cluster.api, &n2.name);
    let still_away = ctl.metric("route_controller_watch_healthy", &[]) == 0.0;
    eprintln!(
        "restart: after the crash, changes made {} the controller reconnected",
        if still_away { "before" } else { "after" }
    );
    converged(&mut ctl, &cluster, &[&n3, &n4], &[&n1, &n2]);
    ctl.assert_running();

    // Back to normal: a node added now is served as usual.
    let n5 = cluster.node("restart-5", 85);
    converged(&mut ctl, &cluster, &[&n3, &n4, &n5], &[&n1, &n2]);

    for node in [&n1, &n2, &n3, &n4, &n5] {
        assert_eq!(
            cluster.hetzner.add_route_requests(&node.cidr).len(),
            1,
            "one add_route for {} ({})",
            node.name,
            node.cidr
        );
    }
    for node in [&n1, &n2] {
        assert_eq!(cluster.hetzner.delete_route_requests(&node.cidr).len(), 1);
    }
    let after = ctl.scrape();
    let grew = |name: &str| after.value(name, &[]) - before.value(name, &[]);
    assert!(
        grew("route_controller_watch_restarts_total") >= 2.0,
        "the watch was restarted after each outage"
    );
    assert_eq!(after.value("route_controller_watch_healthy", &[]), 1.0);
    assert_eq!(
        after.value("route_controller_leader", &[]),
        1.0,
        "the lease survived"
    );
    let took = ctl.terminate();
    eprintln!(
        "restart: {} watch restarts, {} relists; SIGTERM to exit in {took:.2?}",
        grew("route_controller_watch_restarts_total"),
        grew("route_controller_watch_relists_total")
    );
}
