//! End to end with the Alibaba Cloud provider: `route-controller run
//! --cloud-provider=alibaba` in watch mode, configured by the peer's cloud config
//! (cloud-provider-alibaba-cloud's `Global` section) and an AccessKey pair in the
//! SDKs' variables, against a real kube-apiserver and the VPC/ECS double
//! (tests/support/alibaba_double.rs, checked against the official Go SDK by
//! tests/alibaba_conformance.rs). Requests are counted from the double's log.
//!
//! - a hundred nodes joining back to back: at most three batch writes beyond the
//!   minimum of two (fifty entries a call), no `TaskConflict` (our writes never
//!   meet each other); then idle: no request at all; then a node's pod CIDR changed
//!   (the node registered again, as `spec.podCIDRs` cannot change in place): one
//!   delete batch and one create batch;
//! - a rolling upgrade from a table filled as the peer fills it: zero writes, and the
//!   new leader routes the next node with one batch; a second writer's batch in
//!   flight (begun after our list, its entry `Pending`) makes the VPC refuse ours with
//!   `TaskConflict` until it settles: ours is held back and retried with backoff (a
//!   few requests, no storm), the other writer's entries stay, and the route is made;
//! - a `DescribeInstances` reply that says nothing usable (no instance list) never
//!   makes an entry's instance gone: nothing is deleted, the failure is logged, and
//!   the next well-formed reply lets the dead entry go and the live one stay;
//! - a node whose pod CIDR another writer's entry holds (to a live instance that is
//!   no node): refused, its condition and event naming that instance and the fix,
//!   nothing written, the entry kept;
//! - an account whose route tables hold 7 custom entries (Quota Center's quota, read
//!   at start): the eighth node's create is held as `RouteTableFull`, never sent.

#[path = "support/alibaba_double.rs"]
mod alibaba_double;
#[path = "support/controller_process.rs"]
mod controller_process;
#[path = "support/e2e_cluster.rs"]
mod e2e_cluster;
#[path = "support/kube_apiserver.rs"]
mod kube_apiserver;

use std::path::PathBuf;
use std::time::Duration;

use alibaba_double::{
    ACCESS_KEY_ID, ACCESS_KEY_SECRET, AlibabaDouble, DEFAULT_TABLE, DEFAULT_VPC, EntryStatus,
    Fault, Instance, REGION,
};
use controller_process::{ControllerProcess, Spawn};
use e2e_cluster::{
    Identity, condition, create_node, delete_node, events_about, get_node,
    wait_for_network_unavailable,
};
use kube_apiserver::KubeApiserver;

const PATIENCE: Duration = Duration::from_secs(90);
const CLUSTER: &str = "e2e-alibaba";
const WATCH_MODE: &str =
    "--feature-gates=CloudControllerManagerWatchBasedRoutesReconciliation=true";

/// A kube-apiserver, the controller's identity and a VPC.
struct Alibaba {
    api: KubeApiserver,
    identity: Identity,
    double: AlibabaDouble,
    conf: PathBuf,
}

impl Alibaba {
    fn start(namespace: &str) -> Alibaba {
        let api = KubeApiserver::start_fresh();
        let identity = Identity::provision(&api, namespace);
        let double = AlibabaDouble::start();
        let conf = api.data_dir().join("cloud-config.conf");
        // The peer's file, with the endpoints of the double; entries are followed
        // every 200 ms (the double settles a batch at the second read after it).
        let text = format!(
            "{{\"Global\": {{\"region\": \"{REGION}\", \"vpcid\": \"{DEFAULT_VPC}\", \
             \"routeTableIDs\": \"{DEFAULT_TABLE}\", \"vpcEndpoint\": \"{e}\", \
             \"ecsEndpoint\": \"{e}\", \"quotasEndpoint\": \"{e}\", \
             \"pollInterval\": \"200ms\", \
             \"serviceBackendType\": \"eni\"}}}}",
            e = double.endpoint()
        );
        std::fs::write(&conf, text).expect("write the cloud config");
        Alibaba {
            api,
            identity,
            double,
            conf,
        }
    }

    fn controller(&self) -> Spawn {
        Spawn::new()
            .arg("--cloud-provider=alibaba")
            .arg(format!("--cloud-config={}", self.conf.display()))
            .arg(format!("--cluster-name={CLUSTER}"))
            .arg("--cluster-cidr=10.244.0.0/16")
            .arg(WATCH_MODE)
            .args(self.identity.flags())
            .env("ALIBABA_CLOUD_ACCESS_KEY_ID", ACCESS_KEY_ID)
            .env("ALIBABA_CLOUD_ACCESS_KEY_SECRET", ACCESS_KEY_SECRET)
    }

    /// The instance `i-node<i>` (made before the kubelet registers), then node
    /// `node-<i>` with the peer's providerID and pod CIDR `cidr`.
    fn node_with(&self, i: u32, cidr: &str) {
        self.double
            .add_instance(Instance::new(&format!("i-node{i}"), DEFAULT_VPC, &ip(i)));
        create_node(
            &self.api,
            &format!("node-{i}"),
            &[cidr],
            &ip(i),
            &format!("{REGION}.i-node{i}"),
        );
    }

    fn node(&self, i: u32) {
        self.node_with(i, &cidr(i));
    }

    fn routed(&self, i: u32, cidr: &str) -> bool {
        self.double
            .available(DEFAULT_TABLE)
            .contains(&(cidr.to_string(), format!("i-node{i}")))
    }

    fn conflicts(&self) -> usize {
        self.double
            .requests()
            .iter()
            .filter(|r| r.code == "TaskConflict")
            .count()
    }

    fn wait(&self, ctl: &mut ControllerProcess, names: &[String]) {
        if let Err(e) =
            wait_for_network_unavailable(&self.api, names, "False", "RouteCreated", PATIENCE)
        {
            ctl.fail(&format!(
                "{e}\nentries: {:?}\ncalls: {:?}",
                self.double.available(DEFAULT_TABLE),
                self.double.calls()
            ));
        }
    }
}

fn cidr(i: u32) -> String {
    format!("10.244.{i}.0/24")
}

fn ip(i: u32) -> String {
    format!("192.168.{}.{}", 100 + i / 200, 10 + i % 200)
}

fn names(range: std::ops::Range<u32>) -> Vec<String> {
    range.map(|i| format!("node-{i}")).collect()
}

#[test]
fn a_hundred_nodes_joining_then_idle_then_a_cidr_change() {
    const NODES: u32 = 100;
    let ali = Alibaba::start("e2e-alibaba-hundred");
    let mut ctl = ali.controller().spawn("alibaba-hundred");
    ctl.wait_ready(PATIENCE);
    ali.double.reset_calls();
    for i in 0..NODES {
        ali.node(i);
    }
    ali.wait(&mut ctl, &names(0..NODES));
    assert!((0..NODES).all(|i| ali.routed(i, &cidr(i))));
    let writes = ali.double.calls_of("CreateRouteEntries");
    let calls = ali.double.calls();
    eprintln!("{NODES} nodes joining: {writes} CreateRouteEntries, calls {calls:?}");
    assert!(writes <= 2 + 3, "{writes} batch writes: {calls:?}");
    assert_eq!(ali.double.writes(), writes, "{calls:?}");
    assert_eq!(ali.conflicts(), 0, "our own writes met: {calls:?}");
    // Node to route, for the record (a batch's round trip here: a write and two reads
    // 200 ms apart); not asserted, as this machine's load sets it.
    let mut latency = |le: &str| {
        ctl.metric_sum(
            "route_controller_node_to_route_seconds_bucket",
            &[("le", le)],
        )
    };
    let (within_1s, within_2_5s, all) = (latency("1"), latency("2.5"), latency("+Inf"));
    let sum = ctl.metric_sum("route_controller_node_to_route_seconds_sum", &[]);
    eprintln!(
        "node to route: {all} routes, mean {:.2} s, {within_1s} within 1 s, {within_2_5s} \
         within 2.5 s",
        sum / all.max(1.0)
    );

    // Idle in watch mode: nothing is asked of the cloud. Observed over a few seconds
    // of real time, the only way to see that nothing happens.
    ali.double.reset_calls();
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(ali.double.calls(), Default::default(), "idle requests");

    // node-7's pod CIDR changes: it registers again with another.
    delete_node(&ali.api, "node-7");
    create_node(
        &ali.api,
        "node-7",
        &["10.244.207.0/24"],
        &ip(7),
        &format!("{REGION}.i-node7"),
    );
    ali.wait(&mut ctl, &names(7..8));
    let moved = e2e_cluster::poll_until(PATIENCE, || {
        (ali.routed(7, "10.244.207.0/24") && !ali.routed(7, &cidr(7))).then_some(())
    });
    if moved.is_none() {
        ctl.fail(&format!("{:?}", ali.double.available(DEFAULT_TABLE)));
    }
    let calls = ali.double.calls();
    eprintln!("a CIDR change: calls {calls:?}");
    assert_eq!(ali.double.calls_of("DeleteRouteEntries"), 1, "{calls:?}");
    assert_eq!(ali.double.calls_of("CreateRouteEntries"), 1, "{calls:?}");
    assert_eq!(ali.conflicts(), 0, "{calls:?}");
    ctl.terminate();
}

#[test]
fn a_rolling_upgrade_from_the_peers_table_writes_nothing_and_a_second_writer_is_waited_out() {
    let ali = Alibaba::start("e2e-alibaba-upgrade");
    for i in 0..3 {
        ali.node(i);
    }
    let peer: Vec<(String, String)> = (0..3).map(|i| (cidr(i), format!("i-node{i}"))).collect();
    let peer: Vec<(&str, &str)> = peer.iter().map(|(c, n)| (c.as_str(), n.as_str())).collect();
    ali.double.fill_as_peer(DEFAULT_TABLE, &peer);
    // A second writer's entry inside the cluster CIDR, to a live instance that is no
    // node: both replicas list it, and only the ownership rule keeps it.
    ali.double
        .add_instance(Instance::new("i-vpn", DEFAULT_VPC, "192.168.0.250"));
    ali.double.put_entry(
        DEFAULT_TABLE,
        "10.244.250.0/24",
        "Instance",
        "i-vpn",
        "vpn",
        "",
    );
    let lease = [
        "--leader-elect-lease-duration=4s",
        "--leader-elect-renew-deadline=3s",
        "--leader-elect-retry-period=1s",
    ];
    let mut a = ali.controller().args(lease).spawn("alibaba-a");
    a.wait_ready(PATIENCE);
    ali.wait(&mut a, &names(0..3));
    assert_eq!(
        ali.double.writes(),
        0,
        "the peer's entries are adopted: {:?}",
        ali.double.calls()
    );
    let mut b = ali.controller().args(lease).spawn("alibaba-b");
    b.wait_ready(PATIENCE);
    a.terminate();
    let list = [
        ("provider", "alibaba"),
        ("operation", "list"),
        ("outcome", "success"),
    ];
    b.wait_for_metric(
        "route_controller_cloud_requests_total",
        &list,
        1.0,
        PATIENCE,
    );
    assert_eq!(ali.double.writes(), 0, "{:?}", ali.double.calls());

    // A second writer's batch, accepted after our list and still in flight when ours
    // comes: the VPC (one batch at a time) refuses ours with TaskConflict until the
    // other settles, which it does here when the test says (the double settles no
    // batch of its own accord meanwhile, so the wait is as long as the test makes it).
    ali.double.set_settle_after_reads(None);
    ali.double
        .begin_foreign_batch(DEFAULT_TABLE, &[("10.244.251.0/24", "i-vpn")]);
    ali.double.set_settle_after_reads(Some(1));
    ali.double.reset_calls();
    ali.node(3);
    let refused = e2e_cluster::poll_until(PATIENCE, || (ali.conflicts() >= 2).then_some(()));
    if refused.is_none() {
        b.fail(&format!(
            "our batch was not refused twice: {:?}",
            ali.double.calls()
        ));
    }
    // Held back: nothing of ours is made, the other writer's entry is untouched.
    assert!(!ali.routed(3, &cidr(3)));
    assert!(ali.double.in_flight(DEFAULT_VPC));
    let pending: Vec<_> = ali
        .double
        .entries(DEFAULT_TABLE)
        .into_iter()
        .filter(|e| e.destination == "10.244.251.0/24")
        .map(|e| (e.next_hop, e.status))
        .collect();
    assert_eq!(pending, [("i-vpn".to_string(), EntryStatus::Pending)]);
    let held = ali.double.requests();
    ali.double.settle();
    ali.wait(&mut b, &names(3..4));
    assert!(ali.routed(3, &cidr(3)));
    for other in ["10.244.250.0/24", "10.244.251.0/24"] {
        assert!(
            ali.double
                .available(DEFAULT_TABLE)
                .contains(&(other.to_string(), "i-vpn".to_string())),
            "the other writer's entry {other} stays: {:?}",
            ali.double.available(DEFAULT_TABLE)
        );
    }
    // Retried through the budget, backing off: no storm of writes while held back,
    // and once the VPC is free the one write goes through.
    let conflicts = ali.conflicts();
    let writes = ali.double.calls_of("CreateRouteEntries");
    eprintln!(
        "a second writer's batch in flight: {conflicts} TaskConflict, {} requests while \
         held back, then {:?}",
        held.len(),
        ali.double.calls()
    );
    assert!(
        (2..=4).contains(&conflicts),
        "{conflicts} refusals: {:?}",
        ali.double.calls()
    );
    assert_eq!(writes, conflicts + 1, "{:?}", ali.double.calls());
    assert!(
        held.len() <= 2 * conflicts + 2,
        "requests while held back: {:?}",
        held.iter().map(|r| r.action.as_str()).collect::<Vec<_>>()
    );
    assert_eq!(ali.double.calls_of("DeleteRouteEntries"), 0);
    b.terminate();
}

/// Guards the quota read at start end to end: Quota Center says the account's tables
/// hold 7 custom entries; seven nodes are routed, the eighth is held with
/// `NetworkUnavailable=True` (`RouteTableFull`) and its create never sent (the VPC
/// answers no `QuotaExceeded`), where the default of 200 would have sent it.
#[test]
fn a_table_fills_at_the_accounts_quota_read_from_quota_center() {
    let ali = Alibaba::start("e2e-alibaba-quota");
    ali.double.set_account_quota(7);
    let mut ctl = ali.controller().spawn("alibaba-quota");
    ctl.wait_ready(PATIENCE);
    for i in 0..7 {
        ali.node(i);
    }
    ali.wait(&mut ctl, &names(0..7));
    ali.node(7);
    if let Err(e) =
        wait_for_network_unavailable(&ali.api, &names(7..8), "True", "RouteTableFull", PATIENCE)
    {
        ctl.fail(&format!("{e}\ncalls: {:?}", ali.double.calls()));
    }
    assert!(!ali.routed(7, &cidr(7)));
    let refused: Vec<String> = ali
        .double
        .requests()
        .iter()
        .filter(|r| r.code.starts_with("QuotaExceeded"))
        .map(|r| r.action.clone())
        .collect();
    assert!(
        refused.is_empty(),
        "a create beyond the quota was sent: {refused:?}"
    );
    assert_eq!(
        ali.double.calls_of("ListProductQuotas"),
        1,
        "{:?}",
        ali.double.calls()
    );
    ctl.terminate();
}

/// Guards "an undecodable reply never deletes" end to end: the table holds an entry
/// to a live instance that is no node (another writer's) and one to an instance that
/// is gone (a dead entry, ours to delete). The first `DescribeInstances` answers 200
/// with no instance list, as if no instance existed: the list fails, saying so, and
/// nothing is deleted. The next, well-formed, reply lets the dead entry go and keeps
/// the live one.
#[test]
fn a_malformed_describe_instances_reply_deletes_nothing_and_is_reported() {
    let ali = Alibaba::start("e2e-alibaba-malformed");
    ali.node(1);
    ali.double
        .add_instance(Instance::new("i-vpn", DEFAULT_VPC, "192.168.0.250"));
    ali.double.fill_as_peer(
        DEFAULT_TABLE,
        &[
            ("10.244.1.0/24", "i-node1"),
            ("10.244.250.0/24", "i-vpn"),
            ("10.244.99.0/24", "i-gone"),
        ],
    );
    ali.double.inject(
        "DescribeInstances",
        Fault::Reply(
            r#"{"RequestId":"0ED8D006-F706-4D23-88ED-00000000A1B2","PageSize":100,"PageNumber":1}"#
                .into(),
        ),
    );
    let mut ctl = ali.controller().spawn("alibaba-malformed");
    let gone = e2e_cluster::poll_until(PATIENCE, || {
        (!ali
            .double
            .available(DEFAULT_TABLE)
            .iter()
            .any(|(c, _)| c == "10.244.99.0/24"))
        .then_some(())
    });
    if gone.is_none() {
        ctl.fail(&format!(
            "the dead entry stays: {:?}",
            ali.double.available(DEFAULT_TABLE)
        ));
    }
    let requests = ali.double.requests();
    let describes: Vec<u16> = requests
        .iter()
        .filter(|r| r.action == "DescribeInstances")
        .map(|r| r.status)
        .collect();
    let first_delete = requests
        .iter()
        .position(|r| r.action == "DeleteRouteEntries")
        .expect("the dead entry's delete");
    let second_describe = requests
        .iter()
        .enumerate()
        .filter(|(_, r)| r.action == "DescribeInstances")
        .nth(1)
        .map_or(usize::MAX, |(i, _)| i);
    assert!(
        first_delete > second_describe,
        "a delete came before a well-formed DescribeInstances: {describes:?}"
    );
    let deleted: Vec<&String> = requests
        .iter()
        .filter(|r| r.action == "DeleteRouteEntries")
        .flat_map(|r| r.params.iter())
        .filter(|(k, _)| k.ends_with(".DstCidrBlock"))
        .map(|(_, v)| v)
        .collect();
    assert_eq!(deleted, ["10.244.99.0/24"], "only the dead entry goes");
    let available = ali.double.available(DEFAULT_TABLE);
    for kept in [("10.244.1.0/24", "i-node1"), ("10.244.250.0/24", "i-vpn")] {
        assert!(
            available.contains(&(kept.0.to_string(), kept.1.to_string())),
            "{kept:?} gone: {available:?}"
        );
    }
    // Reported: the failed list says what was wrong with the reply.
    let log = ctl.log();
    assert!(
        log.contains("DescribeInstances: the reply has no Instances.Instance list"),
        "{log}"
    );
    ctl.terminate();
}

/// Guards item 3's refusal as the operator sees it: an entry on node-1's pod CIDR
/// leading to a live instance that is no node is another writer's, never replaced;
/// node-1 shows `NetworkUnavailable=True` (`DestinationHeldByOtherInstance`) with a
/// message, and an event, that name the instance and what to do; nothing is written.
#[test]
fn a_pod_cidr_held_by_another_writers_instance_is_refused_naming_it_and_the_fix() {
    let ali = Alibaba::start("e2e-alibaba-held");
    ali.double
        .add_instance(Instance::new("i-was-a-node", DEFAULT_VPC, "192.168.0.201"));
    ali.double
        .fill_as_peer(DEFAULT_TABLE, &[("10.244.1.0/24", "i-was-a-node")]);
    let mut ctl = ali.controller().spawn("alibaba-held");
    ctl.wait_ready(PATIENCE);
    ali.node(1);
    if let Err(e) = wait_for_network_unavailable(
        &ali.api,
        &names(1..2),
        "True",
        "DestinationHeldByOtherInstance",
        PATIENCE,
    ) {
        ctl.fail(&e);
    }
    let node = get_node(&ali.api, "node-1").expect("node-1");
    let message = condition(&node, "NetworkUnavailable")
        .and_then(|c| c["message"].as_str().map(String::from))
        .unwrap_or_default();
    let fix = format!(
        "aliyun vpc DeleteRouteEntry --RegionId {REGION} --RouteTableId {DEFAULT_TABLE} \
         --DestinationCidrBlock 10.244.1.0/24 --NextHopId i-was-a-node"
    );
    for said in [
        "i-was-a-node",
        "10.244.1.0/24",
        "delete that entry",
        fix.as_str(),
    ] {
        assert!(
            message.contains(said),
            "{said:?} not in the condition: {message}"
        );
    }
    let uid = node["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let mut events: Vec<String> = Vec::new();
    let evented = e2e_cluster::poll_until(PATIENCE, || {
        events = events_about(&ali.api, &uid)
            .iter()
            .filter_map(|e| e["message"].as_str().map(String::from))
            .collect();
        events
            .iter()
            .any(|m| m.contains("i-was-a-node") && m.contains("delete that entry"))
            .then_some(())
    });
    assert!(
        evented.is_some(),
        "no event names the instance and the fix: {events:?}"
    );
    assert_eq!(ali.double.writes(), 0, "{:?}", ali.double.calls());
    assert_eq!(
        ali.double.available(DEFAULT_TABLE),
        [("10.244.1.0/24".to_string(), "i-was-a-node".to_string())]
    );
    ctl.terminate();
}
