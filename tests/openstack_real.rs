//! The OpenStack provider against a real Keystone and Neutron (PyPI's keystone 30.0.0
//! and neutron 29.0.0 on loopback, tests/support/openstack_real.rs), through the
//! library: what the Neutron double once hid.
//!
//! - another writer's allowed address pairs (a VIP of keepalived, kube-vip, Octavia)
//!   survive every write of ours, with that writer racing ours;
//! - a node on a subnet not attached to the router is refused before any write, and
//!   every other node is routed in the same batch (no `InvalidRoutes`);
//! - with `pagination_max_limit = 2`, every list is read to its end;
//! - a node gone while no controller ran loses its route and its pair;
//! - a port at `max_allowed_address_pair` refuses that node, not the router.

#[path = "support/openstack_real.rs"]
mod openstack_real;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use openstack_real::{Mode, Options, RealCloud};
use route_controller::cloud::openstack::{
    Config, NO_ROUTER_SUBNET, OpenStackRoutes, PAIRS_EXHAUSTED,
};
use route_controller::metrics::Metrics;
use route_controller::{
    Cidr, CloudError, CloudErrorKind, NodeAddress, NodeDirectory, Route, RouteChange, RouteTarget,
    Routes,
};

const CLUSTER: &str = "real";

/// A network with one subnet attached to a router of its own, and node ports on it.
struct Site {
    cloud: &'static RealCloud,
    label: String,
    network: String,
    router: String,
    /// Node index to its port.
    ports: BTreeMap<u32, String>,
}

impl Site {
    fn new(cloud: &'static RealCloud, label: &str) -> Site {
        let member = cloud.member();
        let network = member.create_network(&format!("{label}-nodes"));
        let subnet = member.create_subnet(&network, "10.0.0.0/24");
        let router = member.create_router(&format!("{label}-router"));
        member.add_router_interface(&router, &subnet);
        Site {
            cloud,
            label: label.to_string(),
            network,
            router,
            ports: BTreeMap::new(),
        }
    }

    fn instance(&self, i: u32) -> String {
        format!("{}-inst-{i}", self.label)
    }

    /// Node `i`'s port, with fixed IP `ip`.
    fn node_on(&mut self, i: u32, ip: &str) {
        let port = self
            .cloud
            .member()
            .create_instance_port(&self.network, &self.instance(i), ip);
        self.ports.insert(i, port);
    }

    fn node(&mut self, i: u32) {
        self.node_on(i, &ip(i));
    }

    fn provider(&self, metrics: Option<Arc<Metrics>>) -> OpenStackRoutes {
        let text = format!(
            "{}[Route]\nrouter-id = {}\n",
            self.cloud.cloud_conf_global(),
            self.router
        );
        let cidrs = [Cidr::parse("10.244.0.0/16").expect("the cluster CIDR")];
        let (mut config, _) = Config::from_cloud_conf(&text, &cidrs, |_| Err("no".into()))
            .expect("the real cloud's cloud.conf");
        config.metrics = metrics;
        OpenStackRoutes::connect(config).expect("the provider connects")
    }

    /// The directory of nodes `which`.
    fn directory(&self, which: impl IntoIterator<Item = u32>) -> NodeDirectory {
        let ids: Vec<(String, String)> = which
            .into_iter()
            .map(|i| (name(i), format!("openstack:///{}", self.instance(i))))
            .collect();
        NodeDirectory::new(ids.iter().map(|(n, p)| (n.as_str(), Some(p.as_str()))))
    }

    fn create(&self, i: u32, ip: &str) -> RouteChange {
        RouteChange::Create {
            route: Route {
                target_node: name(i),
                destination_cidr: cidr(i),
                ..Route::default()
            },
            name_hint: format!("uid-{i}"),
            target: RouteTarget {
                node_name: name(i),
                provider_id: Some(format!("openstack:///{}", self.instance(i))),
                addresses: vec![NodeAddress::internal_ip(ip)],
            },
        }
    }

    fn routes(&self) -> Vec<(String, String)> {
        self.cloud.member().routes(&self.router)
    }

    fn pairs(&self, i: u32) -> Vec<String> {
        self.cloud.member().pairs(&self.ports[&i])
    }
}

fn name(i: u32) -> String {
    format!("node-{i}")
}

fn cidr(i: u32) -> String {
    format!("10.244.{i}.0/24")
}

fn ip(i: u32) -> String {
    format!("10.0.0.{}", i + 10)
}

fn all_ok(outcomes: &[Result<(), CloudError>]) {
    for o in outcomes {
        assert!(o.is_ok(), "{outcomes:?}");
    }
}

/// Applies `changes` as the controller does: a change that ends in `Conflict` (the
/// provider's re-reads ran out while another writer kept changing the port) is tried
/// again, up to 10 times; every other outcome must be a success.
fn apply_retrying_conflicts(p: &OpenStackRoutes, changes: Vec<RouteChange>) -> u32 {
    let mut pending = changes;
    let mut retried = 0;
    for _ in 0..10 {
        if pending.is_empty() {
            return retried;
        }
        let outcomes = p.apply_changes(CLUSTER, &pending).expect("the batch");
        let mut again = Vec::new();
        for (change, outcome) in pending.into_iter().zip(outcomes) {
            match outcome {
                Ok(()) => {}
                Err(e) if e.kind == CloudErrorKind::Conflict => again.push(change),
                Err(e) => panic!("{e:?}"),
            }
        }
        retried += again.len() as u32;
        pending = again;
    }
    assert!(pending.is_empty(), "still in conflict after 10 tries");
    retried
}

/// Requests to `endpoint` answered with `code`, from the metrics' exposition.
fn answered(metrics: &Metrics, endpoint: &str, code: u16) -> u64 {
    let needle = format!("endpoint=\"{endpoint}\",code=\"{code}\"}} ");
    metrics
        .encode()
        .lines()
        .filter(|l| l.starts_with("route_controller_cloud_api_requests_total{"))
        .filter_map(|l| l.split_once(&needle).map(|(_, n)| n))
        .filter_map(|n| n.trim().parse::<u64>().ok())
        .sum()
}

/// A small deterministic generator (xorshift64*), one per seed.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

/// Another writer of pairs that plays by the rules (read, then write with
/// `If-Match`, read again on 412): adds and removes VIPs on the nodes' ports.
/// Returns the VIPs it left on each port and how many 412s it met.
fn vip_writer(
    cloud: &'static RealCloud,
    ports: Vec<String>,
    seed: u64,
    steps: u32,
) -> (BTreeMap<String, BTreeSet<String>>, u32) {
    let member = cloud.member();
    let mut rng = Rng::new(seed);
    let mut vips: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut refused = 0;
    for step in 0..steps {
        let port = &ports[rng.below(ports.len() as u64) as usize];
        let mine = vips.entry(port.clone()).or_default();
        let remove = !mine.is_empty() && rng.below(3) == 0;
        let vip = if remove {
            mine.iter().next().cloned().unwrap_or_default()
        } else {
            format!("10.0.0.{}/32", 200 + step % 50)
        };
        loop {
            let now = member.port(port);
            let mut pairs: Vec<String> = openstack_real::pairs_of(&now)
                .into_iter()
                .filter(|p| !(remove && *p == vip))
                .collect();
            if !remove && !pairs.contains(&vip) {
                pairs.push(vip.clone());
            }
            let put = member.put_pairs(port, &pairs, Some(member.revision(&now)));
            match put.status {
                200 => break,
                412 => refused += 1,
                s => panic!("the VIP writer's update: HTTP {s}: {}", put.body),
            }
        }
        if remove {
            mine.remove(&vip);
        } else {
            mine.insert(vip);
        }
    }
    (vips, refused)
}

#[test]
fn another_writers_vips_survive_every_write_of_ours_in_20_seeded_runs_with_it_racing() {
    let cloud = RealCloud::shared(Options::new(Mode::Atomic));
    let mut ours_refused = 0;
    let mut theirs_refused = 0;
    let mut retried = 0;
    for seed in 0..20u64 {
        let mut site = Site::new(cloud, &format!("vip-{seed}"));
        for i in 0..3 {
            site.node(i);
        }
        let metrics = Arc::new(Metrics::new());
        let p = site.provider(Some(metrics.clone()));
        let ports: Vec<String> = site.ports.values().cloned().collect();
        let writer = std::thread::spawn(move || vip_writer(cloud, ports, seed, 12));
        // Ours: every node routed, two deleted, routed again: six port writes or more.
        for round in 0..3 {
            let creates: Vec<RouteChange> = (0..3).map(|i| site.create(i, &ip(i))).collect();
            retried += apply_retrying_conflicts(&p, creates);
            if round < 2 {
                let listed = p.list_routes(CLUSTER, &site.directory(0..3)).expect("list");
                let deletes: Vec<RouteChange> = listed
                    .iter()
                    .filter(|r| r.target_node != name(0))
                    .map(|r| RouteChange::Delete { route: r.clone() })
                    .collect();
                retried += apply_retrying_conflicts(&p, deletes);
            }
        }
        let (vips, refused) = writer.join().expect("the VIP writer");
        theirs_refused += refused;
        ours_refused += answered(&metrics, "ports.update", 412);
        for (i, port) in &site.ports {
            let mut want: Vec<String> = vips
                .get(port)
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .collect();
            want.push(cidr(*i));
            want.sort();
            assert_eq!(
                site.pairs(*i),
                want,
                "seed {seed}: port of node-{i} holds other pairs than the VIPs its writer left \
                 and our pod CIDR"
            );
        }
        let mut routes: Vec<(String, String)> = (0..3).map(|i| (cidr(i), ip(i))).collect();
        routes.sort();
        assert_eq!(site.routes(), routes, "seed {seed}");
    }
    eprintln!(
        "412s: ours {ours_refused}, the other writer's {theirs_refused}; changes retried \
         after five re-reads in conflict: {retried}"
    );
    assert!(
        ours_refused + u64::from(theirs_refused) > 0,
        "the two writers never raced: the test proves nothing"
    );
}

#[test]
fn a_node_on_a_subnet_not_attached_to_the_router_is_refused_and_the_others_are_routed_in_the_same_batch()
 {
    for mode in [Mode::Atomic, Mode::WithoutAtomic] {
        let cloud = RealCloud::shared(Options::new(mode));
        let label = format!("unattached-{mode:?}").to_lowercase();
        let mut site = Site::new(cloud, &label);
        // A second subnet of the same network, not attached to the router.
        let other = cloud.member().create_subnet(&site.network, "10.0.1.0/24");
        for i in 0..5 {
            site.node(i);
        }
        site.node_on(5, "10.0.1.15");
        let metrics = Arc::new(Metrics::new());
        let p = site.provider(Some(metrics.clone()));
        let mut changes: Vec<RouteChange> = (0..5).map(|i| site.create(i, &ip(i))).collect();
        changes.insert(2, site.create(5, "10.0.1.15"));
        let outcomes = p.apply_changes(CLUSTER, &changes).expect("the batch");
        for (at, o) in outcomes.iter().enumerate() {
            if at == 2 {
                let e = o.as_ref().expect_err("node-5 is refused");
                assert!(
                    matches!(e.kind, CloudErrorKind::Refused { reason, .. } if reason == NO_ROUTER_SUBNET),
                    "{e:?}"
                );
                let fix = format!("openstack router add subnet {} {other}", site.router);
                assert!(e.message.contains(&fix), "{}", e.message);
            } else {
                assert!(o.is_ok(), "{mode:?}: {outcomes:?}");
            }
        }
        let mut want: Vec<(String, String)> = (0..5).map(|i| (cidr(i), ip(i))).collect();
        want.sort();
        assert_eq!(site.routes(), want, "{mode:?}");
        assert!(site.pairs(5).is_empty(), "no pair for the refused node");
        // Refused before any write: Neutron never answered 400.
        for endpoint in ["routers.add_extraroutes", "routers.update", "ports.update"] {
            assert_eq!(answered(&metrics, endpoint, 400), 0, "{mode:?}: {endpoint}");
        }
        // And by the pre-flight once the router's subnets are known.
        let create = site.create(5, "10.0.1.15");
        let RouteChange::Create { route, target, .. } = &create else {
            unreachable!()
        };
        let e = p
            .preflight(route, target)
            .expect_err("refused by the pre-flight");
        assert!(matches!(e.kind, CloudErrorKind::Refused { .. }), "{e:?}");
    }
}

#[test]
fn with_pagination_every_list_is_read_to_its_end_and_a_node_gone_while_down_loses_route_and_pair() {
    let mut options = Options::new(Mode::Atomic);
    options.pagination_max_limit = Some(2);
    let cloud = RealCloud::shared(options);
    let mut site = Site::new(cloud, "paged");
    for i in 0..10 {
        site.node(i);
    }
    let p = site.provider(None);
    let creates: Vec<RouteChange> = (0..10).map(|i| site.create(i, &ip(i))).collect();
    all_ok(&p.apply_changes(CLUSTER, &creates).expect("the creates"));
    let mut want: Vec<(String, String)> = (0..10).map(|i| (cidr(i), ip(i))).collect();
    want.sort();
    assert_eq!(site.routes(), want);

    // A restart: a new provider lists every route as its node's, so nothing is
    // created again.
    let metrics = Arc::new(Metrics::new());
    let restarted = site.provider(Some(metrics.clone()));
    let listed = restarted
        .list_routes(CLUSTER, &site.directory(0..10))
        .expect("list");
    let mut nodes: Vec<(String, String)> = listed
        .iter()
        .map(|r| (r.destination_cidr.clone(), r.target_node.clone()))
        .collect();
    nodes.sort();
    let mut expected: Vec<(String, String)> = (0..10).map(|i| (cidr(i), name(i))).collect();
    expected.sort();
    assert_eq!(nodes, expected, "every route recognised as its node's");
    assert!(
        metrics.cloud_api_requests("openstack", "ports.list") > 5,
        "the node ports took several pages"
    );

    // node-7 was deleted while no controller ran: its route is listed without a
    // node (its port keeps the pod-CIDR pair we gave it), and deleting it takes the
    // pair too.
    let listed = restarted
        .list_routes(CLUSTER, &site.directory((0..10).filter(|i| *i != 7)))
        .expect("list");
    let gone: Vec<&Route> = listed.iter().filter(|r| r.target_node.is_empty()).collect();
    assert_eq!(gone.len(), 1, "{listed:?}");
    assert_eq!(gone[0].destination_cidr, cidr(7));
    let delete = RouteChange::Delete {
        route: gone[0].clone(),
    };
    all_ok(
        &restarted
            .apply_changes(CLUSTER, &[delete])
            .expect("the delete"),
    );
    assert!(!site.routes().contains(&(cidr(7), ip(7))));
    assert_eq!(site.routes().len(), 9);
    assert!(site.pairs(7).is_empty(), "{:?}", site.pairs(7));
}

#[test]
fn a_port_at_max_allowed_address_pair_refuses_its_node_not_the_router() {
    let mut options = Options::new(Mode::Atomic);
    options.max_allowed_address_pair = Some(2);
    let cloud = RealCloud::shared(options);
    let mut site = Site::new(cloud, "pairs-full");
    for i in 0..3 {
        site.node(i);
    }
    // Another writer's two VIPs fill node-1's port.
    let vips = ["10.0.0.201/32".to_string(), "10.0.0.202/32".to_string()];
    let put = cloud.member().put_pairs(&site.ports[&1], &vips, None);
    assert_eq!(put.status, 200, "{}", put.body);
    let p = site.provider(None);
    let creates: Vec<RouteChange> = (0..3).map(|i| site.create(i, &ip(i))).collect();
    let outcomes = p.apply_changes(CLUSTER, &creates).expect("the batch");
    let e = outcomes[1].as_ref().expect_err("node-1 is refused");
    assert!(
        matches!(e.kind, CloudErrorKind::Refused { reason, .. } if reason == PAIRS_EXHAUSTED),
        "not a full router: {e:?}"
    );
    assert!(
        e.message.contains("max_allowed_address_pair"),
        "{}",
        e.message
    );
    assert!(outcomes[0].is_ok() && outcomes[2].is_ok(), "{outcomes:?}");
    assert_eq!(
        site.routes(),
        vec![(cidr(0), ip(0)), (cidr(2), ip(2))],
        "the other nodes are routed"
    );
    assert_eq!(site.pairs(1), vips, "the VIPs stay");
}

#[test]
fn an_auth_url_without_a_version_is_found_in_keystones_version_document() {
    let cloud = RealCloud::shared(Options::new(Mode::Atomic));
    let mut site = Site::new(cloud, "discovery");
    site.node(0);
    // cloud-provider-openstack's files often name Keystone's root; gophercloud finds
    // v3 in the version document Keystone serves there. And the catalog's internal
    // interface, as os-endpoint-type asks.
    let global = cloud.cloud_conf_global().replace(
        &format!("auth-url = {}/v3\n", cloud.keystone_url),
        &format!(
            "auth-url = {}/\nos-endpoint-type = internal\n",
            cloud.keystone_url
        ),
    );
    assert!(!global.contains("/v3"), "{global}");
    let text = format!("{global}[Route]\nrouter-id = {}\n", site.router);
    let cidrs = [Cidr::parse("10.244.0.0/16").expect("the cluster CIDR")];
    let (config, _) =
        Config::from_cloud_conf(&text, &cidrs, |_| Err("no".into())).expect("cloud.conf");
    let p = OpenStackRoutes::connect(config).expect("connects through the version document");
    all_ok(
        &p.apply_changes(CLUSTER, &[site.create(0, &ip(0))])
            .expect("a create"),
    );
    assert_eq!(site.routes(), vec![(cidr(0), ip(0))]);
}

/// Lists as the controller does once its view of the nodes is whole, and applies the
/// deletes its planner makes of what is listed: a route without a node, or to a
/// node of `nodes` whose pod CIDR it is not. Returns the deletes.
fn reconcile(p: &OpenStackRoutes, site: &Site, nodes: &[u32]) -> Vec<Route> {
    let listed = p
        .list_routes(CLUSTER, &site.directory(nodes.iter().copied()))
        .expect("list");
    let deletes: Vec<Route> = listed
        .into_iter()
        .filter(|r| {
            r.target_node.is_empty()
                || !nodes
                    .iter()
                    .any(|&i| r.target_node == name(i) && r.destination_cidr == cidr(i))
        })
        .collect();
    let changes: Vec<RouteChange> = deletes
        .iter()
        .map(|r| RouteChange::Delete { route: r.clone() })
        .collect();
    all_ok(&p.apply_changes(CLUSTER, &changes).expect("the deletes"));
    deletes
}

#[test]
fn two_next_hops_for_one_pod_cidr_never_remain_after_a_list() {
    for mode in [Mode::Atomic, Mode::WithoutAtomic] {
        let cloud = RealCloud::shared(Options::new(mode));
        let label = format!("two-hops-{mode:?}").to_lowercase();
        let mut site = Site::new(cloud, &label);
        for i in 0..3 {
            site.node(i);
        }
        let p = site.provider(None);
        let creates: Vec<RouteChange> = (0..3).map(|i| site.create(i, &ip(i))).collect();
        all_ok(&p.apply_changes(CLUSTER, &creates).expect("the creates"));
        // node-0's pod CIDR also to an address no port holds any more (its old
        // instance's), node-1's also to node-2's address (node-2's old pod CIDR);
        // beside them another writer's routes, one inside the cluster CIDR.
        let mut routes: Vec<(String, String)> = (0..3).map(|i| (cidr(i), ip(i))).collect();
        let stale = [(cidr(0), "10.0.0.99".to_string()), (cidr(1), ip(2))];
        let foreign = [
            ("10.244.50.0/24".to_string(), "10.0.0.98".to_string()),
            ("192.168.0.0/24".to_string(), "10.0.0.97".to_string()),
        ];
        routes.extend(stale.iter().cloned());
        routes.extend(foreign.iter().cloned());
        let spelled: Vec<(&str, &str)> = routes
            .iter()
            .map(|(d, n)| (d.as_str(), n.as_str()))
            .collect();
        cloud.member().set_routes(&site.router, &spelled);

        let deleted = reconcile(&p, &site, &[0, 1, 2]);
        let mut deleted: Vec<(String, String)> = deleted
            .into_iter()
            .map(|r| (r.destination_cidr, r.name))
            .collect();
        deleted.sort();
        assert_eq!(
            deleted,
            stale.to_vec(),
            "{mode:?}: the stale next hops, only"
        );
        let mut want: Vec<(String, String)> = (0..3).map(|i| (cidr(i), ip(i))).collect();
        want.extend(foreign.iter().cloned());
        want.sort();
        assert_eq!(
            site.routes(),
            want,
            "{mode:?}: one next hop for each pod CIDR"
        );
        for i in 0..3 {
            assert_eq!(site.pairs(i), vec![cidr(i)], "{mode:?}: node-{i}'s pair");
        }
    }
}

#[test]
fn pod_cidr_pairs_without_their_route_are_removed_by_a_list_and_every_other_pair_stays() {
    let cloud = RealCloud::shared(Options::new(Mode::Atomic));
    let mut site = Site::new(cloud, "stale-pairs");
    for i in 0..3 {
        site.node(i);
    }
    let metrics = Arc::new(Metrics::new());
    let p = site.provider(Some(metrics.clone()));
    let router_writes = || {
        [
            "routers.add_extraroutes",
            "routers.remove_extraroutes",
            "routers.update",
        ]
        .iter()
        .map(|e| metrics.cloud_api_requests("openstack", e))
        .sum::<u64>()
    };
    let creates: Vec<RouteChange> = (0..3).map(|i| site.create(i, &ip(i))).collect();
    all_ok(&p.apply_changes(CLUSTER, &creates).expect("the creates"));
    // What a lost reply, a replica killed between its two writes or an unwind the
    // fence stopped leaves: a pod-CIDR pair without its route (node-1's old pod
    // CIDR). Beside it other writers' pairs: a VIP, a host address inside the cluster
    // CIDR (a pod's, never a pod CIDR), a network outside it.
    let leftover = "10.244.77.0/24".to_string();
    let others = [
        "10.0.0.201/32".to_string(),
        "10.244.9.9/32".to_string(),
        "172.16.0.0/24".to_string(),
    ];
    let mut pairs = vec![cidr(1), leftover.clone()];
    pairs.extend(others.iter().cloned());
    let put = cloud.member().put_pairs(&site.ports[&1], &pairs, None);
    assert_eq!(put.status, 200, "{}", put.body);
    // The same pod-CIDR pair on a port that is no instance's (a load balancer's).
    let appliance = cloud.member().neutron(
        "POST",
        "/v2.0/ports",
        &serde_json::json!({"port": {"network_id": site.network, "device_owner": "Octavia",
            "fixed_ips": [{"ip_address": "10.0.0.150"}],
            "allowed_address_pairs": [{"ip_address": leftover}]}}),
    )["port"]["id"]
        .as_str()
        .expect("the appliance's port")
        .to_string();

    // While a node has no openstack:// providerID, nothing is taken as left behind.
    let mut partial = site.directory(0..3);
    partial = NodeDirectory::new(
        partial
            .provider_ids()
            .map(|(id, n)| (n, Some(id)))
            .chain([("node-without-id", None)])
            .collect::<Vec<_>>(),
    );
    let listed = p.list_routes(CLUSTER, &partial).expect("list");
    assert!(
        listed.iter().all(|r| !r.target_node.is_empty()),
        "{listed:?}"
    );

    let router_before = cloud.member().router(&site.router);
    let writes_before = router_writes();
    let deleted = reconcile(&p, &site, &[0, 1, 2]);
    assert_eq!(deleted.len(), 1, "{deleted:?}");
    assert_eq!(
        (
            deleted[0].destination_cidr.as_str(),
            deleted[0].name.as_str()
        ),
        (leftover.as_str(), ip(1).as_str())
    );
    let mut want = vec![cidr(1)];
    want.extend(others.iter().cloned());
    want.sort();
    assert_eq!(site.pairs(1), want, "only the left-over pod CIDR went");
    assert_eq!(cloud.member().pairs(&appliance), vec![leftover]);
    let router_after = cloud.member().router(&site.router);
    assert_eq!(
        cloud.member().revision(&router_after),
        cloud.member().revision(&router_before),
        "a pair-only delete writes nothing to the router"
    );
    assert_eq!(router_writes(), writes_before, "nor sends it anything");
    // And the next list finds nothing left.
    assert!(reconcile(&p, &site, &[0, 1, 2]).is_empty());
}

#[test]
fn a_pair_removed_by_someone_while_its_route_stays_is_given_back_by_a_list() {
    let cloud = RealCloud::shared(Options::new(Mode::Atomic));
    let mut site = Site::new(cloud, "lost-pair");
    for i in 0..2 {
        site.node(i);
    }
    let p = site.provider(None);
    let creates: Vec<RouteChange> = (0..2).map(|i| site.create(i, &ip(i))).collect();
    all_ok(&p.apply_changes(CLUSTER, &creates).expect("the creates"));
    let vip = "10.0.0.201/32".to_string();
    let put = cloud
        .member()
        .put_pairs(&site.ports[&0], std::slice::from_ref(&vip), None);
    assert_eq!(put.status, 200, "{}", put.body);
    let listed = p.list_routes(CLUSTER, &site.directory(0..2)).expect("list");
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert_eq!(
        site.pairs(0),
        vec![vip, cidr(0)],
        "the pair is back, the VIP stays"
    );
    assert_eq!(site.pairs(1), vec![cidr(1)]);
}

#[test]
fn a_node_moving_to_another_address_of_its_port_keeps_its_pair() {
    let cloud = RealCloud::shared(Options::new(Mode::Atomic));
    let mut site = Site::new(cloud, "two-ips");
    site.node(0);
    let port = site.ports[&0].clone();
    let second = "10.0.0.60";
    cloud.member().neutron(
        "PUT",
        &format!("/v2.0/ports/{port}"),
        &serde_json::json!({"port": {"fixed_ips": [{"ip_address": ip(0)},
            {"ip_address": second}]}}),
    );
    let p = site.provider(None);
    // Both addresses read before the route, as a controller that started earlier has.
    assert!(
        p.list_routes(CLUSTER, &site.directory(0..1))
            .expect("list")
            .is_empty()
    );
    all_ok(
        &p.apply_changes(CLUSTER, &[site.create(0, &ip(0))])
            .expect("the create"),
    );
    let old = p.list_routes(CLUSTER, &site.directory(0..1)).expect("list");
    assert_eq!(old.len(), 1, "{old:?}");
    // The node's InternalIP moves to the port's other address: the controller
    // creates the new route and deletes the old one, here in one batch.
    let changes = [
        site.create(0, second),
        RouteChange::Delete {
            route: old[0].clone(),
        },
    ];
    all_ok(&p.apply_changes(CLUSTER, &changes).expect("the move"));
    assert_eq!(site.routes(), vec![(cidr(0), second.to_string())]);
    assert_eq!(
        site.pairs(0),
        vec![cidr(0)],
        "the moved route keeps its pair"
    );
    // And back, in two batches: the create first.
    let moved = p.list_routes(CLUSTER, &site.directory(0..1)).expect("list");
    all_ok(
        &p.apply_changes(CLUSTER, &[site.create(0, &ip(0))])
            .expect("the create"),
    );
    all_ok(
        &p.apply_changes(
            CLUSTER,
            &[RouteChange::Delete {
                route: moved[0].clone(),
            }],
        )
        .expect("the delete"),
    );
    assert_eq!(site.routes(), vec![(cidr(0), ip(0))]);
    assert_eq!(
        site.pairs(0),
        vec![cidr(0)],
        "the moved route keeps its pair"
    );
    // And over again, the delete first: the pair goes with it, and the create finds
    // it gone under the port's other address too.
    let old = p.list_routes(CLUSTER, &site.directory(0..1)).expect("list");
    all_ok(
        &p.apply_changes(
            CLUSTER,
            &[RouteChange::Delete {
                route: old[0].clone(),
            }],
        )
        .expect("the delete"),
    );
    assert!(site.pairs(0).is_empty(), "{:?}", site.pairs(0));
    all_ok(
        &p.apply_changes(CLUSTER, &[site.create(0, second)])
            .expect("the create"),
    );
    assert_eq!(site.routes(), vec![(cidr(0), second.to_string())]);
    assert_eq!(site.pairs(0), vec![cidr(0)], "the moved route has its pair");
}

/// A provider from `[Global]` lines after `auth-url` and `region`, for `site`.
fn provider_signed_in_as(
    cloud: &RealCloud,
    site: &Site,
    identity: &str,
) -> Result<OpenStackRoutes, String> {
    let text = format!(
        "[Global]\nauth-url = {}/v3\nregion = {}\n{identity}[Route]\nrouter-id = {}\n",
        cloud.keystone_url,
        openstack_real::REGION,
        site.router
    );
    let cidrs = [Cidr::parse("10.244.0.0/16").expect("the cluster CIDR")];
    let (config, _) = Config::from_cloud_conf(&text, &cidrs, |_| Err("no".into()))
        .map_err(|e| format!("cloud.conf: {e}"))?;
    OpenStackRoutes::connect(config).map_err(|e| e.message)
}

#[test]
fn a_trust_and_an_application_credential_by_name_sign_in_as_cloud_provider_openstack_does() {
    let cloud = RealCloud::shared(Options::new(Mode::Atomic));
    let mut site = Site::new(cloud, "identities");
    for i in 0..3 {
        site.node(i);
    }
    let keystone = format!("{}/v3", cloud.keystone_url);
    // A trustee without any role of its own; the member delegates its role in the
    // project to it (as Magnum does for the clusters it makes).
    let trustee = cloud.admin().send(
        "POST",
        &keystone,
        "/users",
        &serde_json::json!({"user": {"name": "rc-trustee", "domain_id": "default",
            "password": "trustee-secret-of-the-tests"}}),
    )["user"]["id"]
        .as_str()
        .expect("the trustee's id")
        .to_string();
    let trust = cloud.member().send(
        "POST",
        &keystone,
        "/OS-TRUST/trusts",
        &serde_json::json!({"trust": {"trustor_user_id": cloud.member_id,
            "trustee_user_id": trustee, "project_id": cloud.project_id,
            "impersonation": false, "roles": [{"name": "member"}]}}),
    )["trust"]["id"]
        .as_str()
        .expect("the trust's id")
        .to_string();
    let by_trust = provider_signed_in_as(
        cloud,
        &site,
        &format!(
            "trust-id = {trust}\ntrustee-id = {trustee}\n\
             trustee-password = trustee-secret-of-the-tests\n"
        ),
    )
    .expect("signs in with the trust");
    all_ok(
        &by_trust
            .apply_changes(CLUSTER, &[site.create(0, &ip(0))])
            .expect("a create through the trust"),
    );

    // An application credential by name, with its user by name and domain, and by ID.
    cloud.member().send(
        "POST",
        &keystone,
        &format!("/users/{}/application_credentials", cloud.member_id),
        &serde_json::json!({"application_credential": {"name": "routes-by-name",
            "secret": "by-name-secret-of-the-tests"}}),
    );
    let secret = "application-credential-secret = by-name-secret-of-the-tests\n";
    let by_name = provider_signed_in_as(
        cloud,
        &site,
        &format!(
            "application-credential-name = routes-by-name\n{secret}username = {}\n\
             user-domain-name = Default\n",
            openstack_real::MEMBER
        ),
    )
    .expect("signs in with the application credential's name");
    all_ok(
        &by_name
            .apply_changes(CLUSTER, &[site.create(1, &ip(1))])
            .expect("a create by the credential's name"),
    );
    let by_user_id = provider_signed_in_as(
        cloud,
        &site,
        &format!(
            "application-credential-name = routes-by-name\n{secret}user-id = {}\n",
            cloud.member_id
        ),
    )
    .expect("signs in with the application credential's name and the user's ID");
    all_ok(
        &by_user_id
            .apply_changes(CLUSTER, &[site.create(2, &ip(2))])
            .expect("a create by the credential's name"),
    );
    let mut want: Vec<(String, String)> = (0..3).map(|i| (cidr(i), ip(i))).collect();
    want.sort();
    assert_eq!(site.routes(), want);

    // A wrong secret is a setting to fix, never shown.
    let e = match provider_signed_in_as(
        cloud,
        &site,
        &format!(
            "trust-id = {trust}\ntrustee-id = {trustee}\ntrustee-password = not-the-password\n"
        ),
    ) {
        Ok(_) => panic!("a wrong trustee password signed in"),
        Err(e) => e,
    };
    assert!(e.contains("401"), "{e}");
    assert!(!e.contains("not-the-password"), "{e}");
}

/// What the controller's pass does for nodes `nodes`, all at once in one batch: the
/// deletes of [`reconcile`] and a create for each node whose route is not listed.
fn pass(p: &OpenStackRoutes, site: &Site, nodes: &[u32]) -> Result<Vec<RouteChange>, CloudError> {
    let listed = p.list_routes(CLUSTER, &site.directory(nodes.iter().copied()))?;
    let mut changes: Vec<RouteChange> = Vec::new();
    for &i in nodes {
        if !listed
            .iter()
            .any(|r| r.target_node == name(i) && r.destination_cidr == cidr(i))
        {
            changes.push(site.create(i, &ip(i)));
        }
    }
    for r in listed {
        if r.target_node.is_empty()
            || !nodes
                .iter()
                .any(|&i| r.target_node == name(i) && r.destination_cidr == cidr(i))
        {
            changes.push(RouteChange::Delete { route: r });
        }
    }
    for outcome in p.apply_changes(CLUSTER, &changes)? {
        outcome?;
    }
    Ok(changes)
}

#[test]
fn a_pair_left_by_an_interrupted_create_serves_the_create_that_follows() {
    for mode in [Mode::Atomic, Mode::WithoutAtomic] {
        let cloud = RealCloud::shared(Options::new(mode));
        let label = format!("interrupted-{mode:?}").to_lowercase();
        let mut site = Site::new(cloud, &label);
        for i in 0..2 {
            site.node(i);
        }
        // node-1's create stopped after its port write (the fence closed, the replica
        // was killed): its pair is there, its route is not.
        let put = cloud.member().put_pairs(&site.ports[&1], &[cidr(1)], None);
        assert_eq!(put.status, 200, "{}", put.body);
        let p = site.provider(None);
        let changes = pass(&p, &site, &[0, 1]).expect("the pass");
        assert_eq!(
            changes.len(),
            3,
            "two creates and the pair's delete: {changes:?}"
        );
        let mut want: Vec<(String, String)> = (0..2).map(|i| (cidr(i), ip(i))).collect();
        want.sort();
        assert_eq!(site.routes(), want, "{mode:?}");
        assert_eq!(
            site.pairs(1),
            vec![cidr(1)],
            "{mode:?}: node-1's route has its pair"
        );
        assert_eq!(site.pairs(0), vec![cidr(0)], "{mode:?}");
        let again = pass(&p, &site, &[0, 1]).expect("the next pass");
        assert!(again.is_empty(), "{mode:?}: {again:?}");
    }
}

/// A provider whose every request passes `fence`.
fn fenced_provider(site: &Site, fence: &route_controller::Fence) -> OpenStackRoutes {
    site.provider(None).with_fence(fence.clone())
}

/// Replicas that lose the lease at a random instant of their pass (the fence closes
/// mid-batch, as after a SIGKILL or a lost lease), one after another, while nodes come
/// and go and another writer adds and removes VIPs on the nodes' ports; then one more
/// leader's passes. Afterwards the router holds exactly the nodes' routes and the
/// foreign ones, and each port exactly its node's pod CIDR and the VIPs the other
/// writer left. `OPENSTACK_RACE_SEEDS` (default 2 per mode) sets the runs.
#[test]
fn replicas_fenced_mid_batch_with_another_writer_racing_leave_exactly_the_nodes_routes_and_its_vips()
 {
    let seeds: u64 = std::env::var("OPENSTACK_RACE_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    let mut interrupted = 0;
    for mode in [Mode::Atomic, Mode::WithoutAtomic] {
        let cloud = RealCloud::shared(Options::new(mode));
        for seed in 0..seeds {
            let label = format!("race-{mode:?}-{seed}").to_lowercase();
            let mut site = Site::new(cloud, &label);
            for i in 0..6 {
                site.node(i);
            }
            let foreign = [
                ("192.168.9.0/24", "10.0.0.250"),
                ("10.244.250.0/24", "10.0.0.251"),
            ];
            cloud.member().set_routes(&site.router, &foreign);
            let ports: Vec<String> = site.ports.values().cloned().collect();
            let writer = std::thread::spawn(move || vip_writer(cloud, ports, seed, 10));
            let mut rng = Rng::new(seed + 1000);
            let mut nodes: BTreeSet<u32> = (0..3).collect();
            for _round in 0..6 {
                let i = rng.below(6) as u32;
                if !nodes.remove(&i) {
                    nodes.insert(i);
                }
                let fence = route_controller::Fence::new();
                fence.open_for_good();
                let p = fenced_provider(&site, &fence);
                let closer = {
                    let fence = fence.clone();
                    let after = std::time::Duration::from_millis(rng.below(1500));
                    std::thread::spawn(move || {
                        std::thread::sleep(after);
                        fence.close();
                    })
                };
                let list: Vec<u32> = nodes.iter().copied().collect();
                if pass(&p, &site, &list).is_err() {
                    interrupted += 1;
                }
                fence.close();
                closer.join().expect("the fence's closer");
            }
            let (vips, _) = writer.join().expect("the VIP writer");
            let list: Vec<u32> = nodes.iter().copied().collect();
            let p = site.provider(None);
            pass(&p, &site, &list).expect("the last leader's pass");
            let again = pass(&p, &site, &list).expect("its next pass");
            assert!(again.is_empty(), "{label}: {again:?}");
            let mut want: Vec<(String, String)> = list.iter().map(|&i| (cidr(i), ip(i))).collect();
            want.extend(foreign.iter().map(|(d, n)| (d.to_string(), n.to_string())));
            want.sort();
            assert_eq!(site.routes(), want, "{label}: the router");
            for (i, port) in &site.ports {
                let mut pairs: Vec<String> = vips
                    .get(port)
                    .cloned()
                    .unwrap_or_default()
                    .into_iter()
                    .collect();
                if nodes.contains(i) {
                    pairs.push(cidr(*i));
                }
                pairs.sort();
                assert_eq!(site.pairs(*i), pairs, "{label}: node-{i}'s port");
            }
        }
    }
    eprintln!("passes stopped by the fence: {interrupted}");
    assert!(
        interrupted > 0,
        "no pass was interrupted: the test proves nothing"
    );
}
