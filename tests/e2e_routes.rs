//! End to end: the `route-controller` binary against a real kube-apiserver (with a
//! real etcd) and the Hetzner Cloud test double, running as the ServiceAccount bound
//! to exactly the generated RBAC.
//!
//! Each test has its own API server, identity and Hetzner project (see
//! `support/e2e_hcloud.rs` for why), so the tests run in parallel without seeing each
//! other. Every controller is stopped with SIGTERM at the end, which must exit 0
//! within a few seconds: that is the signal handling test.
//!
//! The scale test is here rather than in a file of its own because it takes about
//! 100 s (Hetzner route actions run one at a time, each at least the 500 ms to its
//! first poll); the other tests run meanwhile on the second test thread.

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

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use controller_process::{ControllerProcess, sum};
use e2e_cluster::{
    Access, condition, create_node, delete_node, events_about, get_node, heartbeat,
    list_conditions, poll_until, set_internal_ip, set_label, wait_for_network_unavailable,
};
use e2e_hcloud::{HcloudCluster, TestNode, WATCH_MODE, pod_cidr, server_ip};
use kube_apiserver::Version;

/// Patience for anything the controller does in reaction to a change: generous, since
/// two cores are shared with other builds; the tests finish as soon as it happens.
const PATIENCE: Duration = Duration::from_secs(30);

fn wait_for_route(ctl: &mut ControllerProcess, cluster: &HcloudCluster, node: &TestNode) {
    let found = poll_until(PATIENCE, || {
        cluster
            .hetzner
            .has_route(&node.cidr, &node.gateway)
            .then_some(())
    });
    if found.is_none() {
        ctl.fail(&format!(
            "no route {} via {} for node {} in the network after {PATIENCE:?}; routes: {:?}",
            node.cidr,
            node.gateway,
            node.name,
            cluster.hetzner.routes()
        ));
    }
}

fn wait_for_condition(
    ctl: &mut ControllerProcess,
    cluster: &HcloudCluster,
    nodes: &[&TestNode],
    status: &str,
    reason: &str,
) {
    let names: Vec<String> = nodes.iter().map(|n| n.name.clone()).collect();
    if let Err(e) = wait_for_network_unavailable(&cluster.api, &names, status, reason, PATIENCE) {
        ctl.fail(&e);
    }
}

#[test]
fn node_with_pod_cidr_gets_its_route_and_network_unavailable_false() {
    route_created(Version::Current);
}

/// The same on Kubernetes 1.31 (the version matrix, README "Supported Kubernetes
/// versions").
#[test]
fn node_with_pod_cidr_gets_its_route_and_network_unavailable_false_on_1_31() {
    route_created(Version::V1_31);
}

fn route_created(version: Version) {
    let cluster = HcloudCluster::start_on(version, "e2e-route-created", [11]);
    let mut ctl = cluster
        .controller()
        .arg(WATCH_MODE)
        .spawn(&format!("route_created-1.{}", version.minor()));
    ctl.wait_ready(PATIENCE);

    let node = cluster.node("route-created-1", 11);
    wait_for_route(&mut ctl, &cluster, &node);
    wait_for_condition(&mut ctl, &cluster, &[&node], "False", "RouteCreated");

    let stored = get_node(&cluster.api, &node.name).expect("the node exists");
    let network = condition(&stored, "NetworkUnavailable").expect("NetworkUnavailable");
    assert_eq!(network["message"], "RouteController created a route");
    // The condition is merged into the list, not written over it: the kubelet's
    // Ready condition is still there, unchanged.
    let ready = condition(&stored, "Ready").unwrap_or_else(|| {
        ctl.fail(&format!(
            "the Ready condition is gone after the controller wrote NetworkUnavailable: {}",
            stored["status"]["conditions"]
        ))
    });
    assert_eq!(ready["status"], "True", "{ready}");
    assert_eq!(ready["reason"], "KubeletReady", "{ready}");
    assert_eq!(
        ready["lastHeartbeatTime"],
        condition(&node.object, "Ready").expect("created with Ready")["lastHeartbeatTime"]
    );

    assert_eq!(cluster.hetzner.add_route_requests(&node.cidr).len(), 1);
    let m = ctl.scrape();
    let create = |outcome| {
        m.value(
            "route_controller_cloud_requests_total",
            &[
                ("provider", "hcloud"),
                ("operation", "create"),
                ("outcome", outcome),
            ],
        )
    };
    assert_eq!(create("success"), 1.0);
    assert_eq!(
        sum(&m, "route_controller_cloud_requests_total", &[]),
        2.0,
        "the startup pass's list, then the one create: no list for a node add"
    );
    assert_eq!(m.value("route_controller_leader", &[]), 1.0);
    assert!(m.value("route_controller_condition_writes_total", &[]) >= 1.0);
    assert_eq!(cluster.api.reported_minor(), version.minor());
    let took = ctl.terminate();
    eprintln!("route_created: SIGTERM to exit 0 in {took:.2?}");
}

#[test]
fn only_adds_deletes_and_address_changes_trigger_passes_in_watch_mode() {
    let cluster = HcloudCluster::start("e2e-triggers", 21..=23);
    let a = cluster.node("triggers-a", 21);
    let b = cluster.node("triggers-b", 22);
    let mut ctl = cluster.controller().arg(WATCH_MODE).spawn("triggers");
    ctl.wait_ready(PATIENCE);
    wait_for_route(&mut ctl, &cluster, &a);
    wait_for_route(&mut ctl, &cluster, &b);
    wait_for_condition(&mut ctl, &cluster, &[&a, &b], "False", "RouteCreated");

    let passes = |m: &controller_process::prometheus::Exposition, trigger: &str| {
        m.value("route_controller_passes_total", &[("trigger", trigger)])
    };
    let triggers = |m: &controller_process::prometheus::Exposition, trigger: &str| {
        m.value("route_controller_triggers_total", &[("trigger", trigger)])
    };
    let before = ctl.scrape();

    // A label and two heartbeats, then a node that does trigger a pass. The watch
    // delivers events in order and the actor handles them in order, so once the new
    // node's trigger is counted, the three changes before it have been handled.
    set_label(&cluster.api, &a.name, "e2e.example.com/touched", "yes");
    heartbeat(&cluster.api, &a.name);
    heartbeat(&cluster.api, &b.name);
    let c = cluster.node("triggers-c", 23);
    ctl.wait_for_metric(
        "route_controller_triggers_total",
        &[("trigger", "node_add")],
        triggers(&before, "node_add") + 1.0,
        PATIENCE,
    );
    wait_for_route(&mut ctl, &cluster, &c);
    wait_for_condition(&mut ctl, &cluster, &[&c], "False", "RouteCreated");
    let after_noise = ctl.scrape();
    assert!(
        after_noise.value("route_controller_watch_events_total", &[])
            >= before.value("route_controller_watch_events_total", &[]) + 4.0,
        "the controller saw the label change, both heartbeats and the new node"
    );
    for trigger in [
        "node_update",
        "node_delete",
        "relist",
        "retry",
        "resync",
        "poll",
    ] {
        assert_eq!(
            triggers(&after_noise, trigger),
            triggers(&before, trigger),
            "trigger {trigger} counted after a label change, heartbeats and a node add"
        );
    }
    let new_passes = sum(&after_noise, "route_controller_passes_total", &[])
        - sum(&before, "route_controller_passes_total", &[]);
    assert!(new_passes >= 1.0);
    assert_eq!(
        new_passes,
        passes(&after_noise, "node_add") - passes(&before, "node_add"),
        "every pass since the label change was for the new node"
    );

    // A changed address triggers a pass; the route (to the server's private IP) stays.
    set_internal_ip(&cluster.api, &a.name, "192.0.2.21");
    ctl.wait_for_metric(
        "route_controller_passes_total",
        &[("trigger", "node_update")],
        passes(&before, "node_update") + 1.0,
        PATIENCE,
    );

    // A deleted node loses its route.
    delete_node(&cluster.api, &b.name);
    if poll_until(PATIENCE, || {
        (!cluster.hetzner.has_route_to(&b.cidr)).then_some(())
    })
    .is_none()
    {
        ctl.fail(&format!(
            "the route of deleted node {} is still there: {:?}",
            b.name,
            cluster.hetzner.routes()
        ));
    }
    ctl.wait_for_metric(
        "route_controller_passes_total",
        &[("trigger", "node_delete")],
        passes(&before, "node_delete") + 1.0,
        PATIENCE,
    );
    let end = ctl.scrape();
    assert_eq!(
        triggers(&end, "node_update") - triggers(&before, "node_update"),
        1.0,
        "exactly one node update (the address change) triggered anything"
    );
    assert_eq!(
        passes(&end, "node_update") - passes(&before, "node_update"),
        1.0
    );
    assert_eq!(cluster.hetzner.delete_route_requests(&b.cidr).len(), 1);
    for node in [&a, &b, &c] {
        assert_eq!(
            cluster.hetzner.add_route_requests(&node.cidr).len(),
            1,
            "one add_route for {} ({})",
            node.name,
            node.cidr
        );
    }
    assert!(cluster.hetzner.has_route(&a.cidr, &a.gateway));
    assert!(cluster.hetzner.has_route(&c.cidr, &c.gateway));
    ctl.terminate();
}

#[test]
fn refused_route_gives_one_aggregated_failed_to_create_route_event_and_no_route_created() {
    refused_route_event(Version::Current);
}

/// The same on Kubernetes 1.31 (the version matrix, README "Supported Kubernetes
/// versions").
#[test]
fn refused_route_gives_one_aggregated_failed_to_create_route_event_and_no_route_created_on_1_31() {
    refused_route_event(Version::V1_31);
}

fn refused_route_event(version: Version) {
    let cluster = HcloudCluster::start_on(version, "e2e-refused", [31, 32]);
    let refused_cidr = pod_cidr(31);
    cluster.hetzner.double.refuse_routes_to(
        &refused_cidr,
        400,
        "invalid_input",
        "invalid input in field 'destination'",
    );
    let mut ctl = cluster
        .controller()
        .arg(WATCH_MODE)
        .spawn(&format!("refused-1.{}", version.minor()));
    ctl.wait_ready(PATIENCE);
    let refused = cluster.node("refused-1", 31);
    let fine = cluster.node("refused-neighbour", 32);

    wait_for_condition(&mut ctl, &cluster, &[&refused], "True", "NoRouteCreated");
    wait_for_route(&mut ctl, &cluster, &fine);
    wait_for_condition(&mut ctl, &cluster, &[&fine], "False", "RouteCreated");

    // The controller retries the route with backoff; after the second refusal the
    // event must be one event with a count, not one event per attempt. An invalid
    // request is retried after 15–30 s.
    let retried = Duration::from_secs(60);
    if poll_until(retried, || {
        (cluster.hetzner.add_route_requests(&refused_cidr).len() >= 2).then_some(())
    })
    .is_none()
    {
        ctl.fail(&format!(
            "the refused route was not tried again within {retried:?}"
        ));
    }
    let attempts_seen = cluster.hetzner.add_route_requests(&refused_cidr).len();
    let events = poll_until(PATIENCE, || {
        let events: Vec<_> = events_about(&cluster.api, &refused.uid)
            .into_iter()
            .filter(|e| e["reason"] == "FailedToCreateRoute")
            .collect();
        let total: u64 = events.iter().filter_map(|e| e["count"].as_u64()).sum();
        (total >= 2).then_some(events)
    })
    .unwrap_or_else(|| {
        ctl.fail(&format!(
            "after {attempts_seen} refused attempts, the FailedToCreateRoute events of {} do not add up to 2: {:#?}",
            refused.name,
            events_about(&cluster.api, &refused.uid)
        ))
    });
    if events.len() != 1 {
        ctl.fail(&format!(
            "{} FailedToCreateRoute events for one failing route instead of one with a count: {:#?}",
            events.len(),
            events
        ));
    }
    let event = &events[0];
    assert!(event["count"].as_u64() >= Some(2), "{event:#}");
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["metadata"]["namespace"], "default");
    assert_eq!(event["involvedObject"]["apiVersion"], "v1");
    assert_eq!(event["involvedObject"]["kind"], "Node");
    assert_eq!(event["involvedObject"]["name"], refused.name.as_str());
    assert_eq!(event["involvedObject"]["uid"], refused.uid.as_str());
    let message = event["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&refused_cidr) && message.contains("invalid input"),
        "{message}"
    );
    assert!(
        events_about(&cluster.api, &fine.uid).is_empty(),
        "no events about the node whose route was created"
    );
    // Still refused, still True: the neighbour's success did not overwrite it.
    assert_eq!(
        e2e_cluster::network_unavailable(&cluster.api, &refused.name),
        Some(("True".to_string(), "NoRouteCreated".to_string()))
    );
    assert!(!cluster.hetzner.has_route_to(&refused_cidr));

    let m = ctl.scrape();
    assert!(
        m.value(
            "route_controller_cloud_requests_total",
            &[("operation", "create"), ("outcome", "invalid")]
        ) >= 2.0
    );
    assert_eq!(
        m.value("route_controller_routes", &[("state", "failing")]),
        1.0
    );
    ctl.terminate();
}

#[test]
fn poll_mode_without_the_gate_converges() {
    let cluster = HcloudCluster::start("e2e-poll", [41, 42]);
    let early = cluster.node("poll-early", 41);
    let mut ctl = cluster
        .controller()
        .arg("--route-reconciliation-period=1s")
        .spawn("poll");
    ctl.wait_ready(PATIENCE);
    ctl.wait_for_log("mode poll", PATIENCE);
    wait_for_route(&mut ctl, &cluster, &early);
    let late = cluster.node("poll-late", 42);
    wait_for_route(&mut ctl, &cluster, &late);
    wait_for_condition(
        &mut ctl,
        &cluster,
        &[&early, &late],
        "False",
        "RouteCreated",
    );

    delete_node(&cluster.api, &early.name);
    if poll_until(PATIENCE, || {
        (!cluster.hetzner.has_route_to(&early.cidr)).then_some(())
    })
    .is_none()
    {
        ctl.fail(&format!(
            "the route of the deleted node is still there: {:?}",
            cluster.hetzner.routes()
        ));
    }
    let m = ctl.scrape();
    assert!(m.value("route_controller_passes_total", &[("trigger", "poll")]) >= 2.0);
    assert_eq!(
        m.value(
            "route_controller_triggers_total",
            &[("trigger", "node_add")]
        ),
        0.0,
        "poll mode reconciles on its timer only"
    );
    assert!(
        m.value(
            "route_controller_cloud_requests_total",
            &[("operation", "list"), ("outcome", "success")]
        ) >= 2.0,
        "every poll pass lists the routes"
    );
    for node in [&early, &late] {
        assert_eq!(cluster.hetzner.add_route_requests(&node.cidr).len(), 1);
    }
    ctl.terminate();
}

#[test]
fn without_the_nodes_status_rule_the_condition_is_never_written() {
    let cluster = HcloudCluster::start_with_rules("e2e-rbac-negative", [51], |rules| {
        let before = rules.len();
        rules.retain(|r| r.resources != ["nodes/status"]);
        assert_eq!(
            rules.len(),
            before - 1,
            "rbac_rules has a nodes/status rule"
        );
    });
    let patch_status = Access {
        namespace: None,
        group: String::new(),
        resource: "nodes/status".into(),
        verb: "patch".into(),
        name: None,
    };
    assert!(!cluster.identity.can(&cluster.api, &patch_status));

    let mut ctl = cluster.controller().arg(WATCH_MODE).spawn("rbac_negative");
    ctl.wait_ready(PATIENCE);
    let started = Instant::now();
    let node = cluster.node("rbac-negative-1", 51);
    // The cloud side works: the route is created.
    wait_for_route(&mut ctl, &cluster, &node);
    // The write is refused, and refused again when retried.
    ctl.wait_for_metric(
        "route_controller_condition_write_failures_total",
        &[],
        2.0,
        PATIENCE,
    );
    ctl.wait_for_log("writing NetworkUnavailable failed", PATIENCE);
    let log = ctl.log();
    let line = log
        .lines()
        .find(|l| l.contains("writing NetworkUnavailable failed"))
        .unwrap_or_default()
        .to_string();
    assert!(
        line.contains(&node.name) && line.to_lowercase().contains("forbidden"),
        "the log names the node and the refusal: {line}"
    );
    assert_eq!(
        ctl.metric("route_controller_condition_writes_total", &[]),
        0.0
    );
    let stored = get_node(&cluster.api, &node.name).expect("the node exists");
    assert_eq!(
        condition(&stored, "NetworkUnavailable"),
        None,
        "no condition without the rule ({:.1?} after the node was created)",
        started.elapsed()
    );
    ctl.terminate();
}

// --- at scale --------------------------------------------------------------------
//
// 200 nodes registered at once converge, and the cloud calls it took stay within what
// the Hetzner provider documents (README, "API requests"): a route costs `add_route`
// plus one poll of its action when the action finishes before the first poll; a list
// costs the network plus ⌈servers/50⌉ server pages.

/// The scale test: nodes registered at once.
const NODES: u64 = 200;
/// Creates run one at a time on a network, each at least the 500 ms to its action's
/// first poll: about 100 s for 200 routes.
const CONVERGENCE: Duration = Duration::from_secs(300);

#[test]
fn two_hundred_nodes_created_at_once_converge_with_the_documented_cloud_calls() {
    let cluster = HcloudCluster::start("e2e-scale", 1..=NODES);
    // More routes than a network's default limit of 100: a project whose limit
    // Hetzner raised, told to the controller (see tests/e2e_limits.rs for the limit).
    cluster.hetzner.double.set_route_limit(NODES as usize + 50);
    let mut ctl = cluster
        .controller()
        .arg(WATCH_MODE)
        .env("HCLOUD_NETWORK_ROUTE_LIMIT", (NODES + 50).to_string())
        .spawn("scale");
    ctl.wait_ready(Duration::from_secs(30));
    // The startup pass (an empty cluster) lists the network and the servers; count
    // from after its list has returned.
    ctl.wait_for_metric(
        "route_controller_cloud_requests_total",
        &[("operation", "list")],
        1.0,
        Duration::from_secs(30),
    );
    let double = &cluster.hetzner.double;
    let logged_before = double.requests().len();
    let before = ctl.scrape();

    let started = Instant::now();
    std::thread::scope(|s| {
        for worker in 0..8 {
            let api = &cluster.api;
            s.spawn(move || {
                for id in (1..=NODES).filter(|id| id % 8 == worker) {
                    let cidr = pod_cidr(id as u32);
                    create_node(
                        api,
                        &format!("scale-{id:03}"),
                        &[&cidr],
                        &server_ip(id),
                        &format!("hcloud://{id}"),
                    );
                }
            });
        }
    });
    let created = started.elapsed();

    let routes_done = poll_until(CONVERGENCE, || {
        let routes = cluster.hetzner.routes();
        let all = (1..=NODES).all(|id| {
            routes
                .iter()
                .any(|(d, g)| *d == pod_cidr(id as u32) && *g == server_ip(id))
        });
        all.then(|| started.elapsed())
    })
    .unwrap_or_else(|| {
        ctl.fail(&format!(
            "{} of {NODES} routes after {CONVERGENCE:?}",
            cluster.hetzner.routes().len()
        ))
    });
    let conditions_done = poll_until(CONVERGENCE, || {
        let want = Some(("False".to_string(), "RouteCreated".to_string()));
        let done = list_conditions(&cluster.api)
            .iter()
            .filter(|(n, c)| n.starts_with("scale-") && *c == want)
            .count();
        (done == NODES as usize).then(|| started.elapsed())
    })
    .unwrap_or_else(|| ctl.fail("not every node shows NetworkUnavailable=False/RouteCreated"));

    // Every request the double saw since the startup pass, by endpoint.
    let requests = &double.requests()[logged_before..];
    let mut by_endpoint: BTreeMap<String, usize> = BTreeMap::new();
    for r in requests {
        let endpoint = if r.path.starts_with("/networks/") && r.path.contains("/actions/") {
            r.path.rsplit('/').next().unwrap_or_default().to_string()
        } else {
            format!("{} {}", r.method, r.path)
        };
        *by_endpoint.entry(endpoint).or_default() += 1;
    }
    let after = ctl.scrape();
    let grew = |name: &str, labels: &[(&str, &str)]| {
        sum(&after, name, labels) - sum(&before, name, labels)
    };
    let http_counted = grew(
        "route_controller_cloud_api_requests_total",
        &[("provider", "hcloud")],
    );
    let route_calls = grew("route_controller_cloud_requests_total", &[]);
    eprintln!(
        "scale: {NODES} nodes created in {:.1} s; all routes after {:.1} s, all conditions after {:.1} s",
        created.as_secs_f64(),
        routes_done.as_secs_f64(),
        conditions_done.as_secs_f64()
    );
    eprintln!(
        "scale: {} HTTP requests to the double ({by_endpoint:?}); /metrics counted {http_counted} HTTP requests and {route_calls} route calls ({} creates, {} lists), {} passes",
        requests.len(),
        grew(
            "route_controller_cloud_requests_total",
            &[("operation", "create")]
        ),
        grew(
            "route_controller_cloud_requests_total",
            &[("operation", "list")]
        ),
        grew("route_controller_route_sync_total", &[]),
    );

    // One add_route per route: no duplicates, nothing refused or throttled.
    let adds = cluster.hetzner.actions("add_route", None);
    assert_eq!(adds.len(), NODES as usize, "{by_endpoint:?}");
    let mut destinations: Vec<_> = adds.iter().filter_map(|r| r.destination.clone()).collect();
    destinations.sort();
    destinations.dedup();
    assert_eq!(
        destinations.len(),
        NODES as usize,
        "an add_route was sent twice"
    );
    assert!(
        requests.iter().all(|r| r.status < 400),
        "{:?}",
        requests
            .iter()
            .filter(|r| r.status >= 400)
            .collect::<Vec<_>>()
    );
    assert_eq!(double.throttled(), 0);
    assert_eq!(double.conflicts(), 0);

    // The documented costs: per route add_route + one poll (the double's actions end
    // after 50 ms, before the first poll at 500 ms); the server list (⌈200/50⌉ = 4
    // pages) again whenever the one the creates look up in is more than 60 s old;
    // and the network read of the list a new leader makes once a previous leader's
    // last request has timed out (renew deadline + request timeout after it took the
    // lease, 25 s here: fencing's dual protection); nothing else (the startup list is
    // fresh).
    let polls = by_endpoint.get("GET /actions").copied().unwrap_or(0);
    assert!(polls <= NODES as usize, "{polls} polls for {NODES} actions");
    let server_lists = routes_done.as_secs() / 60 + 1;
    let handover_list = 1;
    let bound = 2 * NODES as usize + (server_lists * NODES.div_ceil(50)) as usize + handover_list;
    assert!(
        requests.len() <= bound,
        "{} requests for {NODES} routes; the documented cost is at most {bound}: {by_endpoint:?}",
        requests.len()
    );
    // /metrics counts exactly what reached the cloud.
    assert_eq!(http_counted, requests.len() as f64);
    assert_eq!(
        grew(
            "route_controller_cloud_requests_total",
            &[("operation", "create")]
        ),
        NODES as f64
    );
    assert_eq!(cluster.hetzner.routes().len(), NODES as usize);
    ctl.terminate();
}
