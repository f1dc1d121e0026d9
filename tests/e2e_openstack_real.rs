//! End to end with the OpenStack provider against a real Keystone and Neutron (PyPI's
//! keystone 30.0.0 and neutron 29.0.0 on loopback, tests/support/openstack_real.rs)
//! and a real kube-apiserver: `route-controller run --cloud-provider=openstack`
//! configured by a `cloud.conf` with the project member's application credential.
//!
//! Each case runs in both modes: the stock L3 plugin (`extraroute-atomic`) and a
//! plugin without it (a Neutron older than Train: the whole route list, guarded by
//! `If-Match`). One Keystone and Neutron per mode serve the tests of this binary;
//! each test builds its own network, subnet and router in the project.
//!
//! Writes are counted twice: by the controller (`route_controller_cloud_api_requests_total`
//! by Neutron call) and by the server (the `revision_number` Neutron bumps on every
//! change of a router or a port).
//!
//! The double (tests/e2e_openstack.rs) keeps what a real server cannot be made to do
//! on demand: a reply lost after the change, a slow server, a 5xx.

#[path = "support/controller_process.rs"]
mod controller_process;
#[path = "support/e2e_cluster.rs"]
mod e2e_cluster;
#[path = "support/kube_apiserver.rs"]
mod kube_apiserver;
#[path = "support/openstack_real.rs"]
mod openstack_real;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use controller_process::{ControllerProcess, Spawn};
use e2e_cluster::{Identity, create_node, delete_node, poll_until, wait_for_network_unavailable};
use kube_apiserver::KubeApiserver;
use openstack_real::{Mode, Options, RealCloud};

const PATIENCE: Duration = Duration::from_secs(90);
const CLUSTER_CIDR: &str = "10.244.0.0/16";
const WATCH_MODE: &str =
    "--feature-gates=CloudControllerManagerWatchBasedRoutesReconciliation=true";
/// Neutron's calls that change something.
const WRITES: &[&str] = &[
    "routers.update",
    "routers.add_extraroutes",
    "routers.remove_extraroutes",
    "ports.update",
];
/// A VPN appliance's routes on the shared router: one outside the cluster CIDR, one
/// inside it; neither is ever ours.
const FOREIGN: [(&str, &str); 2] = [
    ("192.168.7.0/24", "10.0.0.250"),
    ("10.244.200.0/24", "10.0.0.250"),
];

/// A kube-apiserver, the controller's identity, and a router of its own in the
/// shared cloud of its mode.
struct Site {
    cloud: &'static RealCloud,
    api: KubeApiserver,
    identity: Identity,
    label: String,
    network: String,
    router: String,
    conf: PathBuf,
    /// Node index to its port.
    ports: Mutex<BTreeMap<u32, String>>,
}

impl Site {
    fn start(label: &str, options: Options) -> Site {
        let cloud = RealCloud::shared(options);
        let api = KubeApiserver::start_fresh();
        let identity = Identity::provision(&api, label);
        let member = cloud.member();
        let network = member.create_network(&format!("{label}-nodes"));
        let subnet = member.create_subnet(&network, "10.0.0.0/24");
        let router = member.create_router(&format!("{label}-router"));
        member.add_router_interface(&router, &subnet);
        let conf = api.data_dir().join("cloud.conf");
        let text = format!(
            "{}[Route]\nrouter-id = {router}\n[LoadBalancer]\nsubnet-id = {subnet}\n",
            cloud.cloud_conf_global()
        );
        std::fs::write(&conf, text).expect("write cloud.conf");
        Site {
            cloud,
            api,
            identity,
            label: label.to_string(),
            network,
            router,
            conf,
            ports: Mutex::new(BTreeMap::new()),
        }
    }

    fn controller(&self) -> Spawn {
        Spawn::new()
            .arg("--cloud-provider=openstack")
            .arg(format!("--cloud-config={}", self.conf.display()))
            .arg(format!("--cluster-name={}", self.label))
            .arg(format!("--cluster-cidr={CLUSTER_CIDR}"))
            .arg(WATCH_MODE)
            .args(self.identity.flags())
    }

    fn instance(&self, i: u32) -> String {
        format!("{}-inst-{i}", self.label)
    }

    /// The instance's port, made as Nova makes it before the kubelet registers.
    fn port(&self, i: u32) -> String {
        let mut ports = self.ports.lock().unwrap_or_else(|e| e.into_inner());
        ports
            .entry(i)
            .or_insert_with(|| {
                self.cloud
                    .member()
                    .create_instance_port(&self.network, &self.instance(i), &ip(i))
            })
            .clone()
    }

    /// Node `node-<i>` with pod CIDR `cidr`, on its instance's port.
    fn node_with(&self, i: u32, cidr: &str) {
        self.port(i);
        create_node(
            &self.api,
            &format!("node-{i}"),
            &[cidr],
            &ip(i),
            &format!("openstack:///{}", self.instance(i)),
        );
    }

    fn node(&self, i: u32) {
        self.node_with(i, &cidr(i));
    }

    fn routes(&self) -> Vec<(String, String)> {
        self.cloud.member().routes(&self.router)
    }

    fn pairs(&self, i: u32) -> Vec<String> {
        self.cloud.member().pairs(&self.port(i))
    }

    /// The router's revision and every node port's: what Neutron bumps on a write.
    fn revisions(&self) -> Vec<u64> {
        let member = self.cloud.member();
        let mut all = vec![member.revision(&member.router(&self.router))];
        let ports: Vec<String> = self
            .ports
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        all.extend(ports.iter().map(|p| member.revision(&member.port(p))));
        all
    }

    /// Waits until the router holds exactly `expected` plus the foreign routes, and
    /// each node in it has exactly its pod CIDR as its port's pairs.
    fn wait_for_routes(&self, ctl: &mut ControllerProcess, expected: &[(u32, String)], at: &str) {
        let mut want: Vec<(String, String)> =
            expected.iter().map(|(i, c)| (c.clone(), ip(*i))).collect();
        want.extend(FOREIGN.iter().map(|(d, n)| (d.to_string(), n.to_string())));
        want.sort();
        let done = poll_until(PATIENCE, || {
            (self.routes() == want && expected.iter().all(|(i, c)| self.pairs(*i) == [c.clone()]))
                .then_some(())
        });
        if done.is_none() {
            let pairs: Vec<_> = expected.iter().map(|(i, _)| self.pairs(*i)).collect();
            ctl.fail(&format!(
                "{at}: the router holds {:?}, want {want:?}; pairs {pairs:?}\n{}",
                self.routes(),
                self.cloud.logs()
            ));
        }
    }

    fn wait(&self, ctl: &mut ControllerProcess, names: &[String], reason: &str) {
        if let Err(e) = wait_for_network_unavailable(&self.api, names, "False", reason, PATIENCE) {
            ctl.fail(&format!("{e}\nroutes: {:?}", self.routes()));
        }
    }

    /// A VPN appliance on the router's network with the foreign routes.
    fn foreign_routes(&self) {
        let member = self.cloud.member();
        member.create_instance_port(&self.network, &format!("{}-vpn", self.label), "10.0.0.250");
        member.set_routes(&self.router, &FOREIGN);
    }
}

fn cidr(i: u32) -> String {
    format!("10.244.{i}.0/24")
}

fn ip(i: u32) -> String {
    format!("10.0.0.{}", i + 10)
}

fn names(range: impl IntoIterator<Item = u32>) -> Vec<String> {
    range.into_iter().map(|i| format!("node-{i}")).collect()
}

/// The controller's Neutron calls of `endpoint`, all statuses.
fn calls(ctl: &mut ControllerProcess, endpoint: &str) -> f64 {
    ctl.metric_sum(
        "route_controller_cloud_api_requests_total",
        &[("provider", "openstack"), ("endpoint", endpoint)],
    )
}

fn writes(ctl: &mut ControllerProcess) -> BTreeMap<&'static str, f64> {
    WRITES
        .iter()
        .map(|w| (*w, calls(ctl, w)))
        .filter(|(_, n)| *n > 0.0)
        .collect()
}

fn mode_label(mode: Mode) -> &'static str {
    match mode {
        Mode::Atomic => "atomic",
        Mode::WithoutAtomic => "whole",
    }
}

/// The router write of one batch: `add_extraroutes` or `remove_extraroutes` with
/// the extension, a revision-guarded update without.
fn router_writes(ctl: &mut ControllerProcess, mode: Mode) -> f64 {
    match mode {
        Mode::Atomic => {
            calls(ctl, "routers.add_extraroutes") + calls(ctl, "routers.remove_extraroutes")
        }
        Mode::WithoutAtomic => calls(ctl, "routers.update"),
    }
}

#[test]
fn start_up_deletion_cidr_change_and_restart_with_extraroute_atomic() {
    follow_the_nodes(Mode::Atomic);
}

#[test]
fn start_up_deletion_cidr_change_and_restart_without_extraroute_atomic() {
    follow_the_nodes(Mode::WithoutAtomic);
}

fn follow_the_nodes(mode: Mode) {
    let site = Site::start(
        &format!("os-real-follow-{}", mode_label(mode)),
        Options::new(mode),
    );
    site.foreign_routes();
    for i in 0..4 {
        site.node(i);
    }
    let mut ctl = site.controller().spawn(&format!("{}-first", site.label));
    ctl.wait_ready(PATIENCE);
    let all: Vec<(u32, String)> = (0..4).map(|i| (i, cidr(i))).collect();
    site.wait_for_routes(&mut ctl, &all, "start-up");
    site.wait(&mut ctl, &names(0..4), "RouteCreated");
    // One router write for the four nodes, after one port update each.
    assert_eq!(router_writes(&mut ctl, mode), 1.0, "{:?}", writes(&mut ctl));
    assert_eq!(
        calls(&mut ctl, "ports.update"),
        4.0,
        "{:?}",
        writes(&mut ctl)
    );

    delete_node(&site.api, "node-3");
    site.wait_for_routes(&mut ctl, &all[..3], "node deletion");
    poll_until(PATIENCE, || site.pairs(3).is_empty().then_some(()))
        .unwrap_or_else(|| ctl.fail(&format!("node-3's pairs stay: {:?}", site.pairs(3))));

    // spec.podCIDRs cannot change in place: the node is registered again with another.
    delete_node(&site.api, "node-2");
    site.node_with(2, "10.244.22.0/24");
    let changed = [
        (0, cidr(0)),
        (1, cidr(1)),
        (2, "10.244.22.0/24".to_string()),
    ];
    site.wait_for_routes(&mut ctl, &changed, "pod CIDR change");
    site.wait(&mut ctl, &names([2]), "RouteCreated");
    ctl.terminate();

    // A restart with nothing changed writes nothing: by its own count and the server's.
    let before = site.revisions();
    let mut ctl = site.controller().spawn(&format!("{}-restart", site.label));
    ctl.wait_ready(PATIENCE);
    ctl.wait_for_log("routes created 0, deleted 0, kept 3,", PATIENCE);
    assert_eq!(writes(&mut ctl), BTreeMap::new(), "the restart wrote");
    assert_eq!(site.revisions(), before, "Neutron saw a write");
    site.wait_for_routes(&mut ctl, &changed, "restart");
    ctl.terminate();
}

#[test]
fn a_rolling_upgrade_with_extraroute_atomic_writes_nothing_and_the_new_leader_routes_the_next_node()
{
    rolling_upgrade(Mode::Atomic);
}

#[test]
fn a_rolling_upgrade_without_extraroute_atomic_writes_nothing_and_the_new_leader_routes_the_next_node()
 {
    rolling_upgrade(Mode::WithoutAtomic);
}

/// Routes and pairs in place as the cloud-controller-manager left them; replica A
/// adopts them, B takes over, and only the next node is written.
fn rolling_upgrade(mode: Mode) {
    let site = Site::start(
        &format!("os-real-upgrade-{}", mode_label(mode)),
        Options::new(mode),
    );
    let member = site.cloud.member();
    member.create_instance_port(&site.network, &format!("{}-vpn", site.label), "10.0.0.250");
    let mut held: Vec<(String, String)> = FOREIGN
        .iter()
        .map(|(d, n)| (d.to_string(), n.to_string()))
        .collect();
    for i in 0..3 {
        site.node(i);
        let port = site.port(i);
        let put = member.put_pairs(&port, &[cidr(i)], None);
        assert_eq!(put.status, 200, "{}", put.body);
        held.push((cidr(i), ip(i)));
    }
    let refs: Vec<(&str, &str)> = held.iter().map(|(d, n)| (d.as_str(), n.as_str())).collect();
    member.set_routes(&site.router, &refs);
    let before = site.revisions();
    let lease = [
        "--leader-elect-lease-duration=4s",
        "--leader-elect-renew-deadline=3s",
        "--leader-elect-retry-period=1s",
    ];
    let mut a = site
        .controller()
        .args(lease)
        .spawn(&format!("{}-a", site.label));
    a.wait_ready(PATIENCE);
    site.wait(&mut a, &names(0..3), "RouteCreated");
    a.wait_for_log("routes created 0, deleted 0, kept 3,", PATIENCE);
    assert_eq!(
        writes(&mut a),
        BTreeMap::new(),
        "the routes in place are adopted"
    );
    let mut b = site
        .controller()
        .args(lease)
        .spawn(&format!("{}-b", site.label));
    b.wait_ready(PATIENCE);
    a.terminate();
    b.wait_for_log("routes created 0, deleted 0, kept 3,", PATIENCE);
    assert_eq!(writes(&mut b), BTreeMap::new(), "the new leader wrote");
    assert_eq!(site.revisions(), before, "Neutron saw a write");
    site.node(3);
    let all: Vec<(u32, String)> = (0..4).map(|i| (i, cidr(i))).collect();
    site.wait_for_routes(&mut b, &all, "the next node");
    site.wait(&mut b, &names([3]), "RouteCreated");
    assert_eq!(router_writes(&mut b, mode), 1.0, "{:?}", writes(&mut b));
    assert_eq!(calls(&mut b, "ports.update"), 1.0, "{:?}", writes(&mut b));
    b.terminate();
}

/// Neutron with `pagination_max_limit = 2` (every list in pages) and 10 node ports:
/// every node routed, a restart writes nothing, and what was left while no
/// controller ran (a node deleted, a pod-CIDR pair without its route, as an unwind
/// stopped by the fence leaves it) is gone after the next start, another writer's
/// VIP staying.
#[test]
fn with_pagination_ten_nodes_are_routed_a_restart_writes_nothing_and_what_was_left_while_down_is_removed()
 {
    let mut options = Options::new(Mode::Atomic);
    options.pagination_max_limit = Some(2);
    let site = Site::start("os-real-paged", options);
    site.foreign_routes();
    for i in 0..10 {
        site.node(i);
    }
    let mut ctl = site.controller().spawn(&format!("{}-first", site.label));
    ctl.wait_ready(PATIENCE);
    let all: Vec<(u32, String)> = (0..10).map(|i| (i, cidr(i))).collect();
    site.wait_for_routes(&mut ctl, &all, "start-up");
    site.wait(&mut ctl, &names(0..10), "RouteCreated");
    assert_eq!(
        router_writes(&mut ctl, Mode::Atomic),
        1.0,
        "{:?}",
        writes(&mut ctl)
    );
    assert_eq!(
        calls(&mut ctl, "ports.update"),
        10.0,
        "{:?}",
        writes(&mut ctl)
    );
    assert!(
        calls(&mut ctl, "ports.list") > 5.0,
        "the ports took several pages: {}",
        calls(&mut ctl, "ports.list")
    );
    ctl.terminate();

    let before = site.revisions();
    let mut ctl = site.controller().spawn(&format!("{}-restart", site.label));
    ctl.wait_ready(PATIENCE);
    ctl.wait_for_log("routes created 0, deleted 0, kept 10,", PATIENCE);
    assert_eq!(writes(&mut ctl), BTreeMap::new(), "the restart wrote");
    assert_eq!(site.revisions(), before, "Neutron saw a write");
    ctl.terminate();

    // While no controller runs: node-9 is deleted (its route and pair stay), another
    // writer puts a VIP on its port, and node-0's port holds a pod CIDR no route uses.
    delete_node(&site.api, "node-9");
    let member = site.cloud.member();
    let vip = "10.0.0.201/32".to_string();
    let put = member.put_pairs(&site.port(9), &[cidr(9), vip.clone()], None);
    assert_eq!(put.status, 200, "{}", put.body);
    let leftover = "10.244.99.0/24".to_string();
    let put = member.put_pairs(&site.port(0), &[cidr(0), leftover], None);
    assert_eq!(put.status, 200, "{}", put.body);

    let mut ctl = site.controller().spawn(&format!("{}-after", site.label));
    ctl.wait_ready(PATIENCE);
    site.wait_for_routes(&mut ctl, &all[..9], "after the restart");
    poll_until(PATIENCE, || (site.pairs(9) == [vip.clone()]).then_some(())).unwrap_or_else(|| {
        ctl.fail(&format!(
            "node-9's port holds {:?}, want the VIP only",
            site.pairs(9)
        ))
    });
    assert_eq!(
        calls(&mut ctl, "routers.add_extraroutes"),
        0.0,
        "{:?}",
        writes(&mut ctl)
    );
    ctl.terminate();
}
