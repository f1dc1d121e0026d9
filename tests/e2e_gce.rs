//! End to end with the GCE provider: `route-controller run --cloud-provider=gce`,
//! configured by a `gce.conf` as cloud-provider-gcp reads it and the metadata server's
//! token (`GCE_METADATA_HOST`), against a real kube-apiserver and the Compute double
//! (tests/support/gce_double.rs, checked against Google's client by
//! tests/gce_conformance.rs). Writes are counted from the double's request log.
//!
//! - start-up: N nodes, N `routes.insert`s, each followed by its operation's wait;
//! - switching over from cloud-provider-gcp (its routes already in the table) and a
//!   rolling upgrade (a second replica takes over): zero writes, and the new leader
//!   routes the next node;
//! - a scale-out past the project's `ROUTES` quota: the nodes that do not fit get
//!   `NetworkUnavailable` `RouteTableFull` and no insert is refused by GCE; a node
//!   whose instance cannot forward IP gets the pre-flight refusal.

#[path = "support/controller_process.rs"]
mod controller_process;
#[path = "support/e2e_cluster.rs"]
mod e2e_cluster;
#[path = "support/gce_double.rs"]
mod gce_double;
#[path = "support/kube_apiserver.rs"]
mod kube_apiserver;

use std::path::PathBuf;
use std::time::Duration;

use controller_process::{ControllerProcess, Spawn};
use e2e_cluster::{Identity, create_node, poll_until, wait_for_network_unavailable};
use gce_double::{GceDouble, RouteEntry};
use kube_apiserver::KubeApiserver;

const PATIENCE: Duration = Duration::from_secs(60);
const PROJECT: &str = "e2e-project";
const ZONE: &str = "europe-west1-b";
const CLUSTER: &str = "e2e-gce";
const WATCH_MODE: &str =
    "--feature-gates=CloudControllerManagerWatchBasedRoutesReconciliation=true";

/// A kube-apiserver, the controller's identity and a GCE project.
struct Gce {
    api: KubeApiserver,
    identity: Identity,
    double: GceDouble,
    conf: PathBuf,
}

impl Gce {
    fn start(namespace: &str) -> Gce {
        let api = KubeApiserver::start_fresh();
        let identity = Identity::provision(&api, namespace);
        let double = GceDouble::start(PROJECT, "k8s", None);
        // gce.conf as a cluster's would be, with the api-endpoint of the double.
        let conf = api.data_dir().join("gce.conf");
        let text = format!(
            "[global]\nproject-id = {PROJECT}\nnetwork-name = k8s\nnode-tags = {CLUSTER}-node\n\
             multizone = true\nsubnetwork-name = nodes\napi-endpoint = {}\n",
            double.api_endpoint()
        );
        std::fs::write(&conf, text).expect("write gce.conf");
        Gce {
            api,
            identity,
            double,
            conf,
        }
    }

    fn controller(&self) -> Spawn {
        Spawn::new()
            .arg("--cloud-provider=gce")
            .arg(format!("--cloud-config={}", self.conf.display()))
            .arg(format!("--cluster-name={CLUSTER}"))
            .arg("--cluster-cidr=10.244.0.0/16")
            .arg(WATCH_MODE)
            .args(self.identity.flags())
            .env("GCE_METADATA_HOST", self.double.metadata_host())
    }

    /// Node `node-<i>` on its instance (made first, as GCE makes instances before
    /// their kubelets register), with pod CIDR 10.244.<i>.0/24. Returns its UID.
    fn node(&self, i: u32, can_ip_forward: bool) -> String {
        let name = format!("node-{i}");
        self.double.add_instance(ZONE, &name, can_ip_forward);
        let object = create_node(
            &self.api,
            &name,
            &[&cidr(i)],
            &format!("10.0.0.{}", i + 2),
            &format!("gce://{PROJECT}/{ZONE}/{name}"),
        );
        object["metadata"]["uid"]
            .as_str()
            .expect("a created node has a uid")
            .to_string()
    }

    /// The route cloud-provider-gcp makes for node `i` (gce_routes.go, CreateRoute).
    fn peer_route(&self, i: u32, uid: &str) -> RouteEntry {
        RouteEntry {
            name: format!("{CLUSTER}-{uid}"),
            network: self.double.network_url("k8s"),
            dest_range: cidr(i),
            next_hop_instance: self.double.instance_url(ZONE, &format!("node-{i}")),
            priority: 1000,
            description: "k8s-node-route".into(),
            id: 0,
        }
    }

    fn writes(&self) -> usize {
        self.double.count("routes.insert") + self.double.count("routes.delete")
    }

    fn routed(&self, i: u32) -> bool {
        let hop = self.double.instance_url(ZONE, &format!("node-{i}"));
        self.double
            .routes()
            .iter()
            .any(|r| r.dest_range == cidr(i) && r.next_hop_instance == hop)
    }

    fn wait(&self, ctl: &mut ControllerProcess, names: &[String], status: &str, reason: &str) {
        if let Err(e) = wait_for_network_unavailable(&self.api, names, status, reason, PATIENCE) {
            ctl.fail(&format!("{e}\nroutes: {:?}", self.double.routes()));
        }
    }
}

fn cidr(i: u32) -> String {
    format!("10.244.{i}.0/24")
}

fn names(range: std::ops::Range<u32>) -> Vec<String> {
    range.map(|i| format!("node-{i}")).collect()
}

#[test]
fn start_up_routes_every_node_with_one_insert_each_its_operation_waited() {
    let gce = Gce::start("e2e-gce-start");
    for i in 0..4 {
        gce.node(i, true);
    }
    // A route of someone else in the network, inside the cluster CIDR: never touched.
    gce.double.put_route(RouteEntry {
        name: "vpn-gateway".into(),
        description: "made by hand".into(),
        dest_range: "10.244.200.0/24".into(),
        ..gce.peer_route(0, "x")
    });
    gce.double
        .set_operation_duration(Duration::from_millis(300));
    let mut ctl = gce.controller().spawn("gce-start");
    ctl.wait_ready(PATIENCE);
    gce.wait(&mut ctl, &names(0..4), "False", "RouteCreated");
    assert!((0..4).all(|i| gce.routed(i)), "{:?}", gce.double.routes());
    assert_eq!(
        gce.double.count("routes.insert"),
        4,
        "{:?}",
        gce.double.requests()
    );
    assert_eq!(gce.double.count("routes.delete"), 0);
    // Every insert's operation was followed to its end before the node was marked.
    assert!(gce.double.count("globalOperations.wait") >= 4);
    // The zone comes from the providerID: one instances.get per node (for its
    // canIpForward), never one per zone.
    assert_eq!(gce.double.count("instances.get"), 4);
    assert!(gce.double.route("vpn-gateway").is_some());
    assert_eq!(gce.double.unauthorized(), vec![]);
    let requests = ctl.metric_sum(
        "route_controller_cloud_requests_total",
        &[
            ("provider", "gce"),
            ("operation", "create"),
            ("outcome", "success"),
        ],
    );
    assert_eq!(requests, 4.0);
    ctl.terminate();
}

#[test]
fn switching_over_from_cloud_provider_gcp_and_a_rolling_upgrade_write_nothing() {
    let gce = Gce::start("e2e-gce-upgrade");
    for i in 0..3 {
        let uid = gce.node(i, true);
        gce.double.put_route(gce.peer_route(i, &uid));
    }
    let lease = [
        "--leader-elect-lease-duration=4s",
        "--leader-elect-renew-deadline=3s",
        "--leader-elect-retry-period=1s",
    ];
    let mut a = gce.controller().args(lease).spawn("gce-a");
    a.wait_ready(PATIENCE);
    gce.wait(&mut a, &names(0..3), "False", "RouteCreated");
    assert_eq!(
        gce.writes(),
        0,
        "the peer's routes are adopted: {:?}",
        gce.double.requests()
    );

    // The rolling upgrade: the new replica starts, the old one stops and lets go.
    let mut b = gce.controller().args(lease).spawn("gce-b");
    b.wait_ready(PATIENCE);
    a.terminate();
    let list = [
        ("provider", "gce"),
        ("operation", "list"),
        ("outcome", "success"),
    ];
    b.wait_for_metric(
        "route_controller_cloud_requests_total",
        &list,
        1.0,
        PATIENCE,
    );
    assert_eq!(gce.writes(), 0, "{:?}", gce.double.requests());

    // The new leader routes the next node: one insert.
    gce.node(3, true);
    gce.wait(&mut b, &names(3..4), "False", "RouteCreated");
    assert!(gce.routed(3));
    assert_eq!(gce.double.count("routes.insert"), 1);
    assert_eq!(gce.double.count("routes.delete"), 0);
    b.terminate();
}

#[test]
fn a_scale_out_past_the_routes_quota_is_held_back_and_an_instance_that_cannot_forward_is_refused() {
    let gce = Gce::start("e2e-gce-quota");
    // Room for three routes, one of them someone else's.
    gce.double.set_routes_quota(3);
    gce.double.put_route(RouteEntry {
        name: "vpn-gateway".into(),
        description: "made by hand".into(),
        dest_range: "192.168.0.0/24".into(),
        ..gce.peer_route(0, "x")
    });
    gce.node(0, true);
    // A node whose instance cannot forward: refused before any insert, with the fix.
    gce.node(4, false);
    let mut ctl = gce.controller().spawn("gce-quota");
    ctl.wait_ready(PATIENCE);
    gce.wait(&mut ctl, &names(0..1), "False", "RouteCreated");
    gce.wait(&mut ctl, &names(4..5), "True", "IPForwardingDisabled");
    assert!(!gce.routed(4));

    // The scale-out: three more nodes, room for one.
    for i in 1..4 {
        gce.node(i, true);
    }
    let full = poll_until(PATIENCE, || {
        let marked: Vec<u32> = (1..4)
            .filter(|&i| {
                e2e_cluster::network_unavailable(&gce.api, &format!("node-{i}"))
                    .is_some_and(|(s, r)| s == "True" && r == "RouteTableFull")
            })
            .collect();
        (marked.len() == 2 && gce.double.routes().len() == 3).then_some(marked)
    });
    let Some(full) = full else {
        ctl.fail(&format!(
            "not two nodes RouteTableFull and a full table: {:?}",
            gce.double.routes()
        ));
    };
    let routed: Vec<u32> = (1..4).filter(|i| !full.contains(i)).collect();
    assert_eq!(routed.len(), 1);
    assert!(gce.routed(routed[0]));
    assert_eq!(
        gce.double
            .requests()
            .iter()
            .filter(|r| r.status == 403)
            .count(),
        0,
        "GCE never had to refuse an insert for the quota"
    );
    assert_eq!(gce.double.count("routes.insert"), 2);
    ctl.terminate();
}
