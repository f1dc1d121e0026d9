//! End to end with the OpenStack provider: `route-controller run
//! --cloud-provider=openstack`, configured by a `cloud.conf` as
//! cloud-provider-openstack reads it (an application credential, `[Route]
//! router-id`), against a real kube-apiserver and the Keystone and Neutron double
//! (tests/support/neutron_double.rs, checked against gophercloud by
//! tests/openstack_conformance.rs). Writes are counted from the double's request log.
//!
//! - start-up with `extraroute-atomic`: one `add_extraroutes` for every node, one
//!   port update per node before it, a shared router's other routes untouched;
//! - a rolling upgrade without the extension (routes already in place): zero writes,
//!   and the new leader routes the next node with one revision-guarded update;
//! - a scale-out of 40 nodes in one pass: one router write;
//! - a second writer changing the router between our read and our write: a 412, a
//!   re-read, and nothing lost (neither its route nor ours).

#[path = "support/controller_process.rs"]
mod controller_process;
#[path = "support/e2e_cluster.rs"]
mod e2e_cluster;
#[path = "support/kube_apiserver.rs"]
mod kube_apiserver;
#[path = "support/neutron_double.rs"]
mod neutron_double;

use std::path::PathBuf;
use std::time::Duration;

use controller_process::{ControllerProcess, Spawn};
use e2e_cluster::{Identity, create_node, wait_for_network_unavailable};
use kube_apiserver::KubeApiserver;
use neutron_double::{Fault, NeutronDouble};

const PATIENCE: Duration = Duration::from_secs(60);
const ROUTER: &str = "router-e2e";
const NET: &str = "net-nodes";
const CLUSTER: &str = "e2e-openstack";
const WATCH_MODE: &str =
    "--feature-gates=CloudControllerManagerWatchBasedRoutesReconciliation=true";

/// A kube-apiserver, the controller's identity and an OpenStack project.
struct OpenStack {
    api: KubeApiserver,
    identity: Identity,
    double: NeutronDouble,
    conf: PathBuf,
}

impl OpenStack {
    fn start(namespace: &str, atomic: bool, max_routes: usize) -> OpenStack {
        let api = KubeApiserver::start_fresh();
        let identity = Identity::provision(&api, namespace);
        let double = NeutronDouble::start(ROUTER, atomic);
        double.set_max_routes(max_routes);
        double.attach_network(NET, "10.0.0.1");
        let conf = api.data_dir().join("cloud.conf");
        let text = format!(
            "{}max-routes = {max_routes}\n[LoadBalancer]\nsubnet-id = s-1\n",
            double.cloud_conf(ROUTER)
        );
        std::fs::write(&conf, text).expect("write cloud.conf");
        OpenStack {
            api,
            identity,
            double,
            conf,
        }
    }

    fn controller(&self) -> Spawn {
        Spawn::new()
            .arg("--cloud-provider=openstack")
            .arg(format!("--cloud-config={}", self.conf.display()))
            .arg(format!("--cluster-name={CLUSTER}"))
            .arg("--cluster-cidr=10.244.0.0/16")
            .arg(WATCH_MODE)
            .args(self.identity.flags())
    }

    /// Node `node-<i>` on instance `inst-<i>` (its port made first, as Nova makes it
    /// before the kubelet registers), pod CIDR 10.244.<i>.0/24.
    fn node(&self, i: u32) {
        self.double.add_instance(NET, &format!("inst-{i}"), &ip(i));
        create_node(
            &self.api,
            &format!("node-{i}"),
            &[&cidr(i)],
            &ip(i),
            &format!("openstack:///inst-{i}"),
        );
    }

    fn writes(&self) -> usize {
        [
            "routers.update",
            "routers.add_extraroutes",
            "routers.remove_extraroutes",
            "ports.update",
        ]
        .iter()
        .map(|c| self.double.count(c))
        .sum()
    }

    fn routed(&self, i: u32) -> bool {
        self.double.routes().contains(&(cidr(i), ip(i)))
            && self.double.pairs_of(&ip(i)) == [cidr(i)]
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

fn ip(i: u32) -> String {
    format!("10.0.0.{}", i + 10)
}

fn names(range: std::ops::Range<u32>) -> Vec<String> {
    range.map(|i| format!("node-{i}")).collect()
}

#[test]
fn start_up_with_extraroute_atomic_is_one_add_extraroutes_after_each_nodes_port() {
    let os = OpenStack::start("e2e-openstack-start", true, 30);
    for i in 0..4 {
        os.node(i);
    }
    // A VPN appliance's route on the shared router, inside the cluster CIDR.
    os.double.add_port(NET, "vpn", "compute:nova", "10.0.0.250");
    os.double.put_route("10.244.200.0/24", "10.0.0.250");
    let mut ctl = os.controller().spawn("openstack-start");
    ctl.wait_ready(PATIENCE);
    os.wait(&mut ctl, &names(0..4), "False", "RouteCreated");
    assert!((0..4).all(|i| os.routed(i)), "{:?}", os.double.routes());
    assert_eq!(
        os.double.count("routers.add_extraroutes"),
        1,
        "{:?}",
        os.double.requests()
    );
    assert_eq!(os.double.count("ports.update"), 4);
    assert_eq!(os.double.count("routers.remove_extraroutes"), 0);
    assert_eq!(os.double.count("routers.update"), 0);
    assert!(
        os.double
            .routes()
            .contains(&("10.244.200.0/24".into(), "10.0.0.250".into()))
    );
    assert_eq!(os.double.tokens_issued(), 1, "the token is reused");
    ctl.terminate();
}

#[test]
fn a_rolling_upgrade_without_the_extension_writes_nothing_and_the_new_leader_routes_the_next_node()
{
    let os = OpenStack::start("e2e-openstack-upgrade", false, 30);
    // As the cloud-controller-manager left them: each route and its port's pair (a
    // route whose pair is missing gets it back at the first list).
    for i in 0..3 {
        os.node(i);
        os.double.put_route(&cidr(i), &ip(i));
        os.double.put_pairs(&ip(i), &[&cidr(i)]);
    }
    let lease = [
        "--leader-elect-lease-duration=4s",
        "--leader-elect-renew-deadline=3s",
        "--leader-elect-retry-period=1s",
    ];
    let mut a = os.controller().args(lease).spawn("openstack-a");
    a.wait_ready(PATIENCE);
    os.wait(&mut a, &names(0..3), "False", "RouteCreated");
    assert_eq!(
        os.writes(),
        0,
        "the routes in place are adopted: {:?}",
        os.double.requests()
    );
    let mut b = os.controller().args(lease).spawn("openstack-b");
    b.wait_ready(PATIENCE);
    a.terminate();
    let list = [
        ("provider", "openstack"),
        ("operation", "list"),
        ("outcome", "success"),
    ];
    b.wait_for_metric(
        "route_controller_cloud_requests_total",
        &list,
        1.0,
        PATIENCE,
    );
    assert_eq!(os.writes(), 0, "{:?}", os.double.requests());
    os.node(3);
    os.wait(&mut b, &names(3..4), "False", "RouteCreated");
    assert!(os.routed(3));
    assert_eq!(os.double.count("routers.update"), 1);
    assert!(os.double.requests().iter().any(|r| {
        r.call() == "routers.update"
            && r.if_match
                .as_deref()
                .is_some_and(|m| m.starts_with("revision_number="))
    }));
    b.terminate();
}

#[test]
fn a_scale_out_of_40_nodes_is_one_router_write() {
    let os = OpenStack::start("e2e-openstack-scale", true, 100);
    for i in 0..40 {
        os.node(i);
    }
    let mut ctl = os.controller().spawn("openstack-scale");
    ctl.wait_ready(PATIENCE);
    os.wait(&mut ctl, &names(0..40), "False", "RouteCreated");
    assert!((0..40).all(|i| os.routed(i)));
    assert_eq!(
        os.double.count("routers.add_extraroutes"),
        1,
        "{:?}",
        os.double.requests()
    );
    assert_eq!(os.double.count("ports.update"), 40);
    ctl.terminate();
}

#[test]
fn a_second_writer_of_the_router_causes_a_reread_and_nothing_is_lost() {
    let os = OpenStack::start("e2e-openstack-writer", false, 30);
    os.node(0);
    let mut ctl = os.controller().spawn("openstack-writer");
    ctl.wait_ready(PATIENCE);
    os.wait(&mut ctl, &names(0..1), "False", "RouteCreated");
    // The other writer changes the router right after our next read of it.
    os.double.inject(
        "GET",
        "/v2.0/routers/",
        1,
        Fault::WriterAfter("192.168.7.0/24".into(), "10.0.0.250".into()),
    );
    os.node(1);
    os.node(2);
    os.wait(&mut ctl, &names(1..3), "False", "RouteCreated");
    assert!((0..3).all(|i| os.routed(i)), "{:?}", os.double.routes());
    assert!(
        os.double
            .routes()
            .contains(&("192.168.7.0/24".into(), "10.0.0.250".into()))
    );
    let refused = os
        .double
        .requests()
        .iter()
        .filter(|r| r.status == 412)
        .count();
    assert_eq!(refused, 1, "{:?}", os.double.requests());
    // The provider read the router again within the batch: the controller never saw
    // a conflict to retry.
    let conflicts = ctl.metric_sum(
        "route_controller_cloud_requests_total",
        &[("provider", "openstack"), ("outcome", "conflict")],
    );
    assert_eq!(conflicts, 0.0);
    let applied = ctl.metric_sum(
        "route_controller_cloud_requests_total",
        &[
            ("provider", "openstack"),
            ("operation", "apply"),
            ("outcome", "success"),
        ],
    );
    assert!(
        applied >= 2.0,
        "two batches: node-0, then node-1 and node-2 ({applied})"
    );
    ctl.terminate();
}
