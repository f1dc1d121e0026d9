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
#[path = "support/scale_cluster.rs"]
mod scale_cluster;

use std::time::{Duration, Instant};

use controller_process::ControllerProcess;
use e2e_cluster::{delete_node, poll_until, wait_for_network_unavailable};
use e2e_hcloud::{HcloudCluster, TestNode, WATCH_MODE};
use kube_apiserver::Version;

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

/// Guards the relist after 410 on each server of the version matrix: the API server
/// crashes after a write the node watch does not see and a compaction of etcd's
/// history past the controller's resourceVersion, so the resumed watch is refused
/// with 410 (as an ERROR event or a status). The controller lists again (one more
/// complete list, a log line naming the 410), serves the changes made meanwhile and
/// creates no route twice. Broken by a watch that retries its old resourceVersion for
/// ever (no convergence) or by a relist that is not a complete list.
fn a_watch_refused_with_410_relists_and_misses_no_change(version: Version) {
    let mut cluster = HcloudCluster::start_on(version, "e2e-relist-410", 91..=93);
    let n1 = cluster.node("relist-1", 91);
    let n2 = cluster.node("relist-2", 92);
    let mut ctl = cluster
        .controller()
        .args([WATCH_MODE, "--leader-elect=false"])
        .spawn(&format!("relist-410-1.{}", version.minor()));
    ctl.wait_ready(PATIENCE);
    converged(&mut ctl, &cluster, &[&n1, &n2], &[]);
    let relists = ctl.metric("route_controller_watch_relists_total", &[]);

    cluster.api.ensure_namespace("relist-bump");
    scale_cluster::compact_etcd(&cluster.api);
    cluster.api.kill();
    wait_disconnected(&mut ctl);
    cluster.api.restart();
    let n3 = cluster.node("relist-3", 93);
    delete_node(&cluster.api, &n1.name);
    converged(&mut ctl, &cluster, &[&n2, &n3], &[&n1]);
    ctl.wait_for_metric(
        "route_controller_watch_relists_total",
        &[],
        relists + 1.0,
        PATIENCE,
    );
    let log = ctl.log();
    if !log
        .lines()
        .any(|l| l.contains("410") && l.contains("relisting"))
    {
        ctl.fail("no log line of a 410 and the relist");
    }
    for node in [&n1, &n2, &n3] {
        assert_eq!(
            cluster.hetzner.add_route_requests(&node.cidr).len(),
            1,
            "one add_route for {}",
            node.name
        );
    }
    ctl.terminate();
}

#[test]
fn a_watch_refused_with_410_relists_and_misses_no_change_on_1_37() {
    a_watch_refused_with_410_relists_and_misses_no_change(Version::Current);
}

#[test]
fn a_watch_refused_with_410_relists_and_misses_no_change_on_1_31() {
    a_watch_refused_with_410_relists_and_misses_no_change(Version::V1_31);
}
