//! Keeps the GCE peer of `cargo bench -- peers` building and working: upstream's route
//! controller with cloud-provider-gcp's real `Routes`
//! (`tests/kube-apiserver/gcp-route-controller`) against the Compute double and a real
//! kube-apiserver, briefly, in poll mode with the period shortened (to 3 s). It guards the
//! wiring the benchmark depends on (`gce.conf`'s `api-endpoint` and `token-url` on the
//! double, the metadata server behind the token URL, the zones the peer searches, the
//! node names it resolves, the double's count by method): if any of them breaks, the
//! peer makes no route, makes it elsewhere, or the counts differ, and this fails.

#[path = "support/aws_peer.rs"]
mod aws_peer;
// aws_peer and the double each bring their own copy of http_wire.rs.
#[allow(clippy::duplicate_mod)]
#[path = "support/gce_double.rs"]
mod gce_double;
#[path = "support/gce_peer.rs"]
mod gce_peer;
#[path = "support/kube_apiserver.rs"]
mod kube_apiserver;
#[path = "support/moto.rs"]
mod moto;

use std::time::Duration;

use aws_peer::{Script, Timing};
use gce_peer::{GceCluster, GcePeer, node_name, pod_cidr, run_gce_peer, zone};
use kube_apiserver::{KubeApiserver, scratch_dir};

#[test]
fn upstream_with_cloud_provider_gcp_routes_nodes_in_the_double_waiting_on_each_operation() {
    let api = KubeApiserver::start_fresh();
    // Nodes 0, 1 and 2 are in the first, second and third zone; node 3 (the
    // replacement) in the first again.
    let cluster = GceCluster::create(4, Duration::from_millis(300));
    let script = Script {
        nodes: 3,
        replaced: 1,
        spacing: Duration::from_secs(1),
        replace_after: Duration::from_millis(500),
        settle: Duration::from_secs(4),
        idle: Duration::ZERO,
    };
    let run = run_gce_peer(
        GcePeer::Upstream { watch: false },
        &api,
        &cluster,
        script,
        // A poll period longer than gce_peer::QUIET, so that a phase can end.
        Timing {
            poll_period: Duration::from_secs(3),
            route_list_max_age: Duration::from_secs(30),
        },
        &scratch_dir("gce-peer"),
    );
    eprintln!(
        "upstream+gcp: start-up {:.2} s, {}; replacement {}; node→route {:?}; {:.2} CPU s, {:.1} MiB",
        run.startup.as_secs_f64(),
        aws_peer::by_action(&run.startup_requests),
        aws_peer::by_action(&run.rolling_requests),
        run.node_to_route,
        run.cpu_seconds,
        run.peak_rss_mib
    );
    let start = |m: &str| run.startup_requests.get(m).copied().unwrap_or(0);
    let rolling = |m: &str| run.rolling_requests.get(m).copied().unwrap_or(0);

    // Everything it asked for is something the double serves.
    let unknown: Vec<&String> = run
        .startup_requests
        .keys()
        .chain(run.rolling_requests.keys())
        .filter(|m| m.starts_with("other"))
        .collect();
    assert!(unknown.is_empty(), "{unknown:?}\n{run:#?}");
    // The token came from token-url, authenticated by the metadata server's token, and
    // was reused.
    assert_eq!(start("tokenUrl"), 1, "{run:#?}");
    assert_eq!(start("metadata.token"), 1, "{run:#?}");
    // multizone: the region's zones once, at start.
    assert_eq!(start("zones.list"), 1, "{run:#?}");
    // One insert per node, each waited on (at least once; waits end when done).
    assert_eq!(start("routes.insert"), 3, "{run:#?}");
    assert!(start("globalOperations.wait") >= 3, "{run:#?}");
    assert_eq!(start("globalOperations.get"), 0, "{run:#?}");
    // instances.get in each managed zone, in order, until the instance answers: 1 for
    // the first zone's node, 2 for the second's, 3 for the third's.
    assert_eq!(start("instances.get"), 1 + 2 + 3, "{run:#?}");
    assert!(start("routes.list") >= 1, "{run:#?}");
    // The replacement: one insert (its node is in the first zone: one get), one
    // delete of the replaced node's route, both waited on.
    assert_eq!(rolling("routes.insert"), 1, "{run:#?}");
    assert_eq!(rolling("routes.delete"), 1, "{run:#?}");
    assert_eq!(rolling("instances.get"), 1, "{run:#?}");
    assert!(rolling("globalOperations.wait") >= 2, "{run:#?}");
    assert_eq!(run.missing, 0, "{run:#?}");
    assert_eq!(run.node_to_route.len(), 1, "{run:#?}");
    // A route is only in place when its operation is: at least the operation's time.
    assert!(
        run.node_to_route[0] >= Duration::from_millis(300),
        "{run:#?}"
    );

    // The routes it made are cloud-provider-gcp's: named after the cluster and the
    // node's UID, to the node's instance in its zone, priority 1000, tagged.
    let routes = cluster.double.routes();
    let mut destinations: Vec<&str> = routes.iter().map(|r| r.dest_range.as_str()).collect();
    destinations.sort();
    assert_eq!(
        destinations,
        vec![pod_cidr(1), pod_cidr(2), pod_cidr(3)],
        "{routes:#?}"
    );
    for r in &routes {
        let k: usize = r
            .dest_range
            .split('.')
            .nth(2)
            .and_then(|n| n.parse().ok())
            .unwrap_or(99);
        let uid = api.get_json(&format!("/api/v1/nodes/{}", node_name(k)))["metadata"]["uid"]
            .as_str()
            .map(str::to_string);
        assert_eq!(
            Some(r.name.clone()),
            uid.map(|u| format!("peers-{u}")),
            "{r:#?}"
        );
        assert_eq!(
            r.next_hop_instance,
            cluster.double.instance_url(zone(k), &node_name(k)),
            "{r:#?}"
        );
        assert_eq!(
            (r.priority, r.description.as_str()),
            (1000, "k8s-node-route"),
            "{r:#?}"
        );
        assert_eq!(r.network, cluster.double.network_url("k8s"), "{r:#?}");
    }
    assert!(run.cpu_seconds > 0.0 && run.peak_rss_mib > 1.0, "{run:#?}");
}
