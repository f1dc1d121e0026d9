//! End to end at scale: 200 nodes registered at once converge, and the cloud calls it
//! took stay within what the Hetzner provider documents (README, "API requests"):
//! a route costs `add_route` plus one poll of its action when the action finishes
//! before the first poll; a list costs the network plus ⌈servers/50⌉ server pages.

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

use controller_process::sum;
use e2e_cluster::{create_node, list_conditions, poll_until};
use e2e_hcloud::{HcloudCluster, WATCH_MODE, pod_cidr, server_ip};

const NODES: u64 = 200;
/// Creates run one at a time on a network, each at least the 500 ms to its action's
/// first poll: about 100 s for 200 routes.
const CONVERGENCE: Duration = Duration::from_secs(300);

#[test]
fn two_hundred_nodes_created_at_once_converge_with_the_documented_cloud_calls() {
    let cluster = HcloudCluster::start("e2e-scale", 1..=NODES);
    let mut ctl = cluster.controller().arg(WATCH_MODE).spawn("scale");
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
    // nothing else (the startup list is fresh, so no list and no network read).
    let polls = by_endpoint.get("GET /actions").copied().unwrap_or(0);
    assert!(polls <= NODES as usize, "{polls} polls for {NODES} actions");
    let server_lists = routes_done.as_secs() / 60 + 1;
    let bound = 2 * NODES as usize + (server_lists * NODES.div_ceil(50)) as usize;
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
