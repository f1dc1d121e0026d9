//! End to end: the node watch's streaming list (watch-list) against the real
//! kube-apiserver (v1.37.2: its `WatchList` gate is beta and on by default since
//! 1.34, so the harness sets no gate), and `--watch-list=false` on the same cluster;
//! on Kubernetes 1.31 (`WatchList` alpha, off), the fallback to a paginated list.
//!
//! What it guards: with the default flags the controller's initial list is a
//! streaming list, which the API server itself counts in
//! `apiserver_watch_list_duration_seconds{resource="nodes"}` (recorded when it sends
//! the end bookmark), and the controller converges on it: every node gets its route
//! and its condition. With `--watch-list=false` the next controller gets its nodes
//! by a paginated list, the API server counts no streaming list, and a node added
//! then is served as well. Broken by a reflector that never streams (the first
//! phase fails) or by a flag that is not plumbed into `WatchConfig` (the second).

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

use std::time::Duration;

use controller_process::ControllerProcess;
use e2e_cluster::{poll_until, wait_for_network_unavailable};
use e2e_hcloud::{HcloudCluster, TestNode, WATCH_MODE};
use kube_apiserver::{KubeApiserver, Version};

const PATIENCE: Duration = Duration::from_secs(60);

/// The API server's count of streaming lists of nodes it completed (read from its
/// `/metrics` line by line: only this family is needed).
fn watch_lists_of_nodes(api: &KubeApiserver) -> f64 {
    let response = api.request("GET", "/metrics", api.admin_token(), None, None);
    assert!(
        response.is_success(),
        "GET /metrics of the API server answered {}",
        response.status
    );
    response
        .body
        .lines()
        .filter(|l| l.starts_with("apiserver_watch_list_duration_seconds_count{"))
        .filter(|l| l.contains("resource=\"nodes\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn converged(ctl: &mut ControllerProcess, cluster: &HcloudCluster, nodes: &[&TestNode]) {
    let done = poll_until(PATIENCE, || {
        nodes
            .iter()
            .all(|n| cluster.hetzner.has_route(&n.cidr, &n.gateway))
            .then_some(())
    });
    if done.is_none() {
        ctl.fail(&format!(
            "after {PATIENCE:?} the network's routes are {:?}",
            cluster.hetzner.routes()
        ));
    }
    let names: Vec<String> = nodes.iter().map(|n| n.name.clone()).collect();
    if let Err(e) =
        wait_for_network_unavailable(&cluster.api, &names, "False", "RouteCreated", PATIENCE)
    {
        ctl.fail(&e);
    }
}

#[test]
fn the_controller_syncs_by_a_streaming_list_and_with_watch_list_false_by_a_paginated_one() {
    let cluster = HcloudCluster::start("e2e-watch-list", 41..=44);
    let nodes: Vec<TestNode> = (41..=43)
        .map(|id| cluster.node(&format!("wl-{id}"), id))
        .collect();
    let before = watch_lists_of_nodes(&cluster.api);

    let mut ctl = cluster
        .controller()
        .args([WATCH_MODE, "--leader-elect=false"])
        .spawn("watch-list");
    ctl.wait_ready(PATIENCE);
    converged(&mut ctl, &cluster, &nodes.iter().collect::<Vec<_>>());
    let streamed = ctl.metric("route_controller_watch_streaming_lists_total", &[]);
    let lists = ctl.metric("route_controller_watch_relists_total", &[]);
    let by_server = watch_lists_of_nodes(&cluster.api) - before;
    println!(
        "watch-list on: {streamed} streaming lists of {lists} lists; the API server counted \
         {by_server} streaming lists of nodes"
    );
    let fallbacks = ctl.metric("route_controller_watch_list_fallbacks_total", &[]);
    if streamed != 1.0 || lists != 1.0 || fallbacks != 0.0 {
        ctl.fail(&format!(
            "{streamed} streaming lists of {lists} lists, {fallbacks} fallbacks; expected the \
             one list to stream"
        ));
    }
    if by_server < 1.0 {
        ctl.fail("the API server counted no streaming list of nodes");
    }
    let log = ctl.log();
    if !log.contains("node list complete: 3 nodes by a streaming list") {
        ctl.fail("no log line of the streaming list's completion");
    }
    ctl.terminate();

    // The same cluster with --watch-list=false: a paginated list, no streaming one.
    let before = watch_lists_of_nodes(&cluster.api);
    let mut ctl = cluster
        .controller()
        .args([WATCH_MODE, "--leader-elect=false", "--watch-list=false"])
        .spawn("watch-list-off");
    ctl.wait_ready(PATIENCE);
    let late = cluster.node("wl-44", 44);
    let mut all: Vec<&TestNode> = nodes.iter().collect();
    all.push(&late);
    converged(&mut ctl, &cluster, &all);
    let streamed = ctl.metric("route_controller_watch_streaming_lists_total", &[]);
    let lists = ctl.metric("route_controller_watch_relists_total", &[]);
    let by_server = watch_lists_of_nodes(&cluster.api) - before;
    println!(
        "watch-list off: {streamed} streaming lists of {lists} lists; the API server counted \
         {by_server} streaming lists of nodes"
    );
    if streamed != 0.0 || lists != 1.0 || by_server != 0.0 {
        ctl.fail(&format!(
            "with --watch-list=false: {streamed} streaming lists of {lists} lists, {by_server} \
             counted by the API server; expected one paginated list"
        ));
    }
    if !ctl
        .log()
        .contains("node list complete: 3 nodes by a paginated list")
    {
        ctl.fail("no log line of the paginated list's completion");
    }
    ctl.terminate();
}

/// Guards the fallback on an older server (the version matrix): Kubernetes 1.31 has the
/// `WatchList` gate alpha and off, so it refuses `sendInitialEvents` with 422. The
/// controller falls back once (one log line, `route_controller_watch_list_fallbacks_total`
/// 1), syncs by a paginated list and converges; a relist later is paginated too, with
/// no second try and no second log line. Broken by a fallback that is not counted, one
/// logged per list, or a refusal that is retried as a streaming list.
#[test]
fn on_1_31_the_refused_streaming_list_falls_back_once_logged_once_and_counted() {
    let mut cluster = HcloudCluster::start_on(Version::V1_31, "e2e-watch-list-1-31", 51..=54);
    assert_eq!(cluster.api.reported_minor(), "31");
    let nodes: Vec<TestNode> = (51..=53)
        .map(|id| cluster.node(&format!("wl131-{id}"), id))
        .collect();
    let mut ctl = cluster
        .controller()
        .args([WATCH_MODE, "--leader-elect=false"])
        .spawn("watch-list-1.31");
    ctl.wait_ready(PATIENCE);
    converged(&mut ctl, &cluster, &nodes.iter().collect::<Vec<_>>());
    let fallbacks = ctl.metric("route_controller_watch_list_fallbacks_total", &[]);
    let streamed = ctl.metric("route_controller_watch_streaming_lists_total", &[]);
    let lists = ctl.metric("route_controller_watch_relists_total", &[]);
    println!("1.31: {fallbacks} fallbacks, {streamed} streaming lists of {lists} lists");
    if fallbacks != 1.0 || streamed != 0.0 || lists != 1.0 {
        ctl.fail(&format!(
            "{fallbacks} fallbacks, {streamed} streaming lists of {lists} lists; expected one \
             fallback to one paginated list"
        ));
    }
    let fallback_line = "streaming lists of nodes (watch-list) are off from now on";
    let log = ctl.log();
    if log.matches(fallback_line).count() != 1 || !log.contains("sendInitialEvents") {
        ctl.fail("not exactly one log line of the fallback, naming the refusal");
    }
    if !log.contains("node list complete: 3 nodes by a paginated list") {
        ctl.fail("no log line of the paginated list's completion");
    }

    // A relist (the API server crashes, etcd's history is compacted past the
    // controller's resourceVersion): paginated again, no second fallback.
    // A write the node watch does not see, so that its resourceVersion is older
    // than the compacted revision.
    cluster.api.ensure_namespace("wl131-bump");
    scale_cluster::compact_etcd(&cluster.api);
    cluster.api.kill();
    cluster.api.restart();
    let late = cluster.node("wl131-54", 54);
    let mut all: Vec<&TestNode> = nodes.iter().collect();
    all.push(&late);
    converged(&mut ctl, &cluster, &all);
    ctl.wait_for_metric("route_controller_watch_relists_total", &[], 2.0, PATIENCE);
    let log = ctl.log();
    if log.matches(fallback_line).count() != 1 {
        ctl.fail("the fallback was logged again after the relist");
    }
    assert_eq!(
        ctl.metric("route_controller_watch_list_fallbacks_total", &[]),
        1.0
    );
    assert_eq!(
        ctl.metric("route_controller_watch_streaming_lists_total", &[]),
        0.0
    );
    ctl.terminate();
}
