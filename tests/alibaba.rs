//! The Alibaba Cloud provider against the VPC/ECS/STS double
//! (tests/support/alibaba_double.rs, itself checked against the official Go SDK by
//! tests/alibaba_conformance.rs): a pass's creates in one `CreateRouteEntries`
//! followed until the entries are done, a CIDR change in one delete and one create
//! batch, adoption of the peer's entries with zero writes, several tables, what the
//! VPC would refuse refused per node, each fault mapped to what the controller must
//! do, and the three identities (AccessKey, RRSA, ECS RAM role) against STS and the
//! metadata service of the double.

#[path = "support/alibaba_double.rs"]
mod alibaba_double;
#[path = "support/tempdir.rs"]
mod tempdir;

use std::sync::{Mutex, Once};

use alibaba_double::{
    ACCESS_KEY_ID, ACCESS_KEY_SECRET, AlibabaDouble, DEFAULT_TABLE, DEFAULT_VPC, Fault, Gate,
    Instance, StatusWords,
};
use route_controller::cloud::alibaba::{
    AlibabaRoutes, Config, DESTINATION_HELD, INSTANCE_NOT_IN_VPC, NO_IPV6, OVERLAPS_VSWITCH,
    RESERVED_DESTINATION,
};
use route_controller::{
    Budget, BudgetOp, Cidr, CloudError, CloudErrorKind, Meter, NodeDirectory, Route, RouteChange,
    RouteTarget, Routes,
};

const CLUSTER: &str = "e2e";
const REGION: &str = "cn-hangzhou";

/// A double with `n` node instances `i-node{i}` in the default VPC.
fn double(n: u32) -> AlibabaDouble {
    let d = AlibabaDouble::start();
    for i in 1..=n {
        d.add_instance(Instance::new(
            &format!("i-node{i}"),
            DEFAULT_VPC,
            &format!("192.168.0.{}", 10 + i),
        ));
    }
    d
}

/// The peer's cloud config for the double, with `extra` lines in `Global`.
fn cloud_config(d: &AlibabaDouble, extra: &str) -> String {
    format!(
        "Global:\n  region: {REGION}\n  vpcid: {DEFAULT_VPC}\n  vpcEndpoint: {e}\n  \
         ecsEndpoint: {e}\n  stsEndpoint: {e}\n  quotasEndpoint: {e}\n  metadataEndpoint: {e}\n  \
         pollInterval: 0s\n{extra}",
        e = d.endpoint()
    )
}

fn access_key_env(name: &str) -> Option<String> {
    match name {
        "ALIBABA_CLOUD_ACCESS_KEY_ID" => Some(ACCESS_KEY_ID.into()),
        "ALIBABA_CLOUD_ACCESS_KEY_SECRET" => Some(ACCESS_KEY_SECRET.into()),
        _ => None,
    }
}

fn provider_with(
    d: &AlibabaDouble,
    extra: &str,
    env: impl Fn(&str) -> Option<String>,
) -> Result<AlibabaRoutes, route_controller::cloud::alibaba::ConfigError> {
    let cidrs = [
        Cidr::parse("10.244.0.0/16").unwrap(),
        Cidr::parse("fd00:10:244::/56").unwrap(),
    ];
    let (config, warnings) =
        Config::from_cloud_config(Some(&cloud_config(d, extra)), &cidrs, env).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    AlibabaRoutes::connect(config)
}

fn provider(d: &AlibabaDouble) -> AlibabaRoutes {
    provider_with(d, "", access_key_env).expect("the provider connects to the double")
}

/// `n` nodes, `node-{i}` on instance `i-node{i}`, with the providerID the peer sets.
fn directory(n: u32) -> NodeDirectory {
    let ids: Vec<(String, String)> = (1..=n)
        .map(|i| (format!("node-{i}"), format!("{REGION}.i-node{i}")))
        .collect();
    NodeDirectory::new(ids.iter().map(|(n, p)| (n.as_str(), Some(p.as_str()))))
}

fn create_to(node: u32, destination: &str) -> RouteChange {
    RouteChange::Create {
        route: Route {
            target_node: format!("node-{node}"),
            destination_cidr: destination.to_string(),
            ..Route::default()
        },
        name_hint: format!("uid-{node}"),
        target: RouteTarget {
            node_name: format!("node-{node}"),
            provider_id: Some(format!("alicloud://{REGION}.i-node{node}")),
            addresses: Vec::new(),
        },
    }
}

fn create(node: u32) -> RouteChange {
    create_to(node, &format!("10.244.{node}.0/24"))
}

fn delete(route: &Route) -> RouteChange {
    RouteChange::Delete {
        route: route.clone(),
    }
}

fn all_ok(outcomes: &[Result<(), CloudError>]) {
    for o in outcomes {
        assert!(o.is_ok(), "{outcomes:?}");
    }
}

fn listed(p: &AlibabaRoutes, nodes: &NodeDirectory) -> Vec<(String, String)> {
    let mut routes: Vec<(String, String)> = p
        .list_routes(CLUSTER, nodes)
        .expect("the list")
        .into_iter()
        .map(|r| (r.destination_cidr, r.target_node))
        .collect();
    routes.sort();
    routes
}

/// Guards item 1's batch: fifty creates are one `CreateRouteEntries` (with one
/// `DescribeInstances` for the pre-flight), reported done only once a read of the
/// table shows them done (the first read after the batch still sees them
/// `Pending`), and every request is counted for the budget.
#[test]
fn a_pass_of_creates_is_one_batch_followed_until_its_entries_are_done() {
    let d = double(60);
    let p = provider(&d);
    assert_eq!(p.tables(), [DEFAULT_TABLE]);
    assert!(listed(&p, &directory(60)).is_empty());
    d.reset_calls();
    let changes: Vec<RouteChange> = (1..=50).map(create).collect();
    let (outcomes, usage) = Meter::measure(|| p.apply_changes(CLUSTER, &changes));
    all_ok(&outcomes.expect("the batch"));
    assert_eq!(d.calls_of("CreateRouteEntries"), 1, "{:?}", d.calls());
    assert_eq!(d.calls_of("DescribeInstances"), 1, "{:?}", d.calls());
    assert_eq!(d.calls_of("DescribeRouteEntryList"), 2, "{:?}", d.calls());
    assert_eq!(usage.expect("metered").requests, 4);
    assert_eq!(d.available(DEFAULT_TABLE).len(), 50);
    assert!(
        !d.in_flight(DEFAULT_VPC),
        "reported done with the batch in flight"
    );
    // What the table holds, against its quota, for the controller's RouteTableFull.
    let tables = p.route_tables();
    assert_eq!((tables[0].routes, tables[0].limit), (50, 200));
    // The entries are written as the peer writes them: no name, no description.
    let entries = d.entries(DEFAULT_TABLE);
    let ours: Vec<_> = entries
        .iter()
        .filter(|e| e.next_hop_type == "Instance")
        .collect();
    assert!(
        ours.iter()
            .all(|e| e.name.is_empty() && e.description.is_empty())
    );
    // With the other words of the API's documents the same.
    d.set_status_words(StatusWords::Description);
    all_ok(&p.apply_changes(CLUSTER, &[create(51)]).unwrap());
    assert_eq!(d.available(DEFAULT_TABLE).len(), 51);
}

/// Guards the switch-over: a table filled as cloud-provider-alibaba-cloud fills it
/// is listed as this cluster's routes with zero writes; an entry inside the cluster
/// CIDR to an instance that is gone is listed without a node (for the controller to
/// delete), one to an instance that exists but is no node is not listed at all, nor
/// is one outside the cluster CIDR.
#[test]
fn entries_filled_as_the_peer_fills_them_are_adopted_with_zero_writes() {
    let d = double(3);
    d.add_instance(Instance::new("i-appliance", DEFAULT_VPC, "192.168.0.200"));
    d.fill_as_peer(
        DEFAULT_TABLE,
        &[
            ("10.244.1.0/24", "i-node1"),
            ("10.244.2.0/24", "i-node2"),
            ("10.244.3.0/24", "i-node3"),
            ("10.244.9.0/24", "i-gone"),
            ("10.244.200.0/24", "i-appliance"),
            ("172.16.0.0/24", "i-node1"),
        ],
    );
    let p = provider(&d);
    d.reset_calls();
    assert_eq!(
        listed(&p, &directory(3)),
        [
            ("10.244.1.0/24".to_string(), "node-1".to_string()),
            ("10.244.2.0/24".into(), "node-2".into()),
            ("10.244.3.0/24".into(), "node-3".into()),
            ("10.244.9.0/24".into(), String::new()),
        ]
    );
    assert_eq!(d.writes(), 0);
    // The dead entry is a blackhole, the nodes' are not.
    for r in p.list_routes(CLUSTER, &directory(3)).unwrap() {
        assert_eq!(r.blackhole, r.target_node.is_empty(), "{r:?}");
    }
    // The dead entry goes in one delete batch; the appliance's stays.
    let dead = Route {
        destination_cidr: "10.244.9.0/24".into(),
        ..Route::default()
    };
    all_ok(&p.apply_changes(CLUSTER, &[delete(&dead)]).unwrap());
    let left: Vec<String> = d
        .available(DEFAULT_TABLE)
        .into_iter()
        .map(|(destination, _)| destination)
        .collect();
    assert!(!left.contains(&"10.244.9.0/24".to_string()), "{left:?}");
    assert!(left.contains(&"10.244.200.0/24".to_string()), "{left:?}");
    assert!(left.contains(&"172.16.0.0/24".to_string()), "{left:?}");
}

/// Guards item 4's number for a CIDR change: the old entry goes in one
/// `DeleteRouteEntries` and the new one comes in one `CreateRouteEntries`, the
/// delete first (it frees the quota), each followed until done.
#[test]
fn a_cidr_change_is_one_delete_batch_and_one_create_batch() {
    let d = double(2);
    d.fill_as_peer(
        DEFAULT_TABLE,
        &[("10.244.1.0/24", "i-node1"), ("10.244.2.0/24", "i-node2")],
    );
    let p = provider(&d);
    let routes = p.list_routes(CLUSTER, &directory(2)).unwrap();
    let old = routes
        .iter()
        .find(|r| r.target_node == "node-1")
        .expect("node-1's route");
    d.reset_calls();
    let outcomes = p
        .apply_changes(CLUSTER, &[delete(old), create_to(1, "10.244.101.0/24")])
        .unwrap();
    all_ok(&outcomes);
    assert_eq!(d.calls_of("DeleteRouteEntries"), 1, "{:?}", d.calls());
    assert_eq!(d.calls_of("CreateRouteEntries"), 1, "{:?}", d.calls());
    let actions: Vec<String> = d.requests().into_iter().map(|r| r.action).collect();
    let first = |a: &str| actions.iter().position(|x| x == a).unwrap();
    assert!(
        first("DeleteRouteEntries") < first("CreateRouteEntries"),
        "{actions:?}"
    );
    let mut held = d.available(DEFAULT_TABLE);
    held.sort();
    assert_eq!(
        held,
        [
            ("10.244.101.0/24".to_string(), "i-node1".to_string()),
            ("10.244.2.0/24".into(), "i-node2".into()),
        ]
    );
    // A delete of an entry that is gone already is `NotFound`, which the controller
    // counts as done, with no request.
    d.reset_calls();
    let outcomes = p.apply_changes(CLUSTER, &[delete(old)]).unwrap();
    assert_eq!(
        outcomes[0].as_ref().unwrap_err().kind,
        CloudErrorKind::NotFound
    );
    assert_eq!(d.writes(), 0);
}

/// Guards "never reported done when nothing was deleted": a delete batch refused
/// whole with a not-found code (of the table, or of an entry in a call of many)
/// reports none of its entries done, and they stay; only a call of one entry whose
/// code names the entry makes that entry done.
#[test]
fn a_delete_batch_refused_whole_as_not_found_is_never_done() {
    let d = double(2);
    d.fill_as_peer(
        DEFAULT_TABLE,
        &[("10.244.1.0/24", "i-node1"), ("10.244.2.0/24", "i-node2")],
    );
    let p = provider(&d);
    let routes = p.list_routes(CLUSTER, &directory(2)).unwrap();
    let deletes: Vec<RouteChange> = routes.iter().map(delete).collect();
    for (status, code) in [
        (404, "InvalidRouteTableId.NotFound"),
        (404, "InvalidAction.NotFound"),
        (400, "InvalidRouteEntry.NotFound"),
    ] {
        d.inject(
            "DeleteRouteEntries",
            Fault::error(status, code, "not found"),
        );
        match p.apply_changes(CLUSTER, &deletes) {
            Err(e) => assert_ne!(e.kind, CloudErrorKind::NotFound, "{code}: {e}"),
            Ok(outcomes) => {
                for o in &outcomes {
                    let e = o.as_ref().expect_err(code);
                    assert_ne!(e.kind, CloudErrorKind::NotFound, "{code}: {e}");
                }
            }
        }
        assert_eq!(d.available(DEFAULT_TABLE).len(), 2, "{code}");
    }
    d.inject(
        "DeleteRouteEntries",
        Fault::error(400, "InvalidRouteEntry.NotFound", "not found"),
    );
    let one = p.apply_changes(CLUSTER, &deletes[..1]).unwrap();
    all_ok(&one);
}

/// Guards "delete only what is dead": a destination whose entry is dead in one
/// table and leads to a live instance that is no node in another loses the dead
/// entry alone.
#[test]
fn a_dead_entry_is_deleted_from_its_table_alone() {
    let d = double(1);
    d.add_custom_table(DEFAULT_VPC, "vtb-custom");
    d.add_instance(Instance::new("i-appliance", DEFAULT_VPC, "192.168.0.200"));
    d.fill_as_peer(DEFAULT_TABLE, &[("10.244.9.0/24", "i-gone")]);
    d.fill_as_peer("vtb-custom", &[("10.244.9.0/24", "i-appliance")]);
    let p = provider_with(
        &d,
        &format!("  routeTableIDs: \"{DEFAULT_TABLE}, vtb-custom\"\n"),
        access_key_env,
    )
    .expect("connects");
    assert_eq!(
        listed(&p, &directory(1)),
        [("10.244.9.0/24".to_string(), String::new())]
    );
    let dead = Route {
        destination_cidr: "10.244.9.0/24".into(),
        ..Route::default()
    };
    all_ok(&p.apply_changes(CLUSTER, &[delete(&dead)]).unwrap());
    assert!(d.available(DEFAULT_TABLE).is_empty());
    assert_eq!(
        d.available("vtb-custom"),
        [("10.244.9.0/24".to_string(), "i-appliance".to_string())]
    );
}

/// Guards a leaked entry: the node's pod CIDR held by a live instance that is no
/// node (a node deleted while its instance lives on) refuses the node's create with
/// a reason naming that instance, before any write, and the entry stays.
#[test]
fn a_pod_cidr_held_by_a_live_stranger_refuses_the_create_naming_it() {
    let d = double(1);
    d.add_instance(Instance::new("i-was-a-node", DEFAULT_VPC, "192.168.0.201"));
    d.fill_as_peer(DEFAULT_TABLE, &[("10.244.1.0/24", "i-was-a-node")]);
    let p = provider(&d);
    assert!(listed(&p, &directory(1)).is_empty());
    d.reset_calls();
    let outcomes = p.apply_changes(CLUSTER, &[create(1)]).unwrap();
    let e = outcomes[0].as_ref().expect_err("refused");
    assert!(
        matches!(
            e.kind,
            CloudErrorKind::Refused {
                reason: DESTINATION_HELD,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.message.contains("i-was-a-node"), "{e}");
    assert!(
        e.message.contains(&format!(
            "aliyun vpc DeleteRouteEntry --RegionId {REGION} --RouteTableId {DEFAULT_TABLE} \
             --DestinationCidrBlock 10.244.1.0/24 --NextHopId i-was-a-node"
        )),
        "the fix, ready to run: {e}"
    );
    assert_eq!(d.writes(), 0);
    assert_eq!(
        d.available(DEFAULT_TABLE),
        [("10.244.1.0/24".to_string(), "i-was-a-node".to_string())]
    );
}

/// Guards item 3: a busy VPC (any of its codes) is a conflict, flow control rate
/// limits (and is reported for the budget), a full table is `TableFull`, a 5xx or a
/// lost reply of a write is ambiguous, and a duplicate destination is
/// `AlreadyExists`.
#[test]
fn each_fault_maps_to_what_the_controller_must_do() {
    let d = double(3);
    let p = provider(&d);
    p.list_routes(CLUSTER, &directory(3)).unwrap();
    for code in [
        "TaskConflict",
        "IncorrectRouteEntryStatus",
        "IncorrectStatus.RouteEntry",
    ] {
        d.inject("CreateRouteEntries", Fault::error(400, code, "busy"));
        let e = p.apply_changes(CLUSTER, &[create(1)]).unwrap_err();
        assert_eq!(e.kind, CloudErrorKind::Conflict, "{code}: {e}");
    }
    d.inject("CreateRouteEntries", Fault::throttling());
    let (result, usage) = Meter::measure(|| p.apply_changes(CLUSTER, &[create(1)]));
    assert!(
        matches!(result.unwrap_err().kind, CloudErrorKind::RateLimited { .. }),
        "Throttling.User"
    );
    assert!(usage.expect("metered").throttled.is_some());
    d.inject("CreateRouteEntries", Fault::unavailable());
    let e = p.apply_changes(CLUSTER, &[create(1)]).unwrap_err();
    assert_eq!(e.kind, CloudErrorKind::Ambiguous, "{e}");
    d.inject("CreateRouteEntries", Fault::LostReply);
    let e = p.apply_changes(CLUSTER, &[create(1)]).unwrap_err();
    assert_eq!(e.kind, CloudErrorKind::Ambiguous, "{e}");
    // The lost reply's change was made: the controller's list finds it.
    assert_eq!(listed(&p, &directory(3)).len(), 1);
    // Another writer's entry on the destination: already exists, for that node alone.
    d.put_entry(
        DEFAULT_TABLE,
        "10.244.2.0/24",
        "Instance",
        "i-node3",
        "",
        "",
    );
    let outcomes = p.apply_changes(CLUSTER, &[create(2), create(3)]).unwrap();
    assert_eq!(
        outcomes[0].as_ref().unwrap_err().kind,
        CloudErrorKind::AlreadyExists
    );
    assert!(outcomes[1].is_ok(), "{outcomes:?}");
    // A full table, its quota read from the table's size as the API counts it.
    d.set_quota(DEFAULT_TABLE, 3);
    let e = p
        .apply_changes(CLUSTER, &[create_to(1, "10.244.50.0/24")])
        .unwrap_err();
    assert_eq!(e.kind, CloudErrorKind::TableFull, "{e}");
}

/// Guards isolation: what the VPC refuses of one entry (100.64.0.0/10, an overlap
/// with a vSwitch, IPv6 in a VPC without it, an instance of another VPC) is refused
/// for its node alone before the batch, which carries the healthy entry only.
#[test]
fn what_the_vpc_would_refuse_is_refused_per_node_before_the_batch() {
    let d = double(5);
    d.add_vpc("vpc-other", "172.31.0.0/16", "vtb-other");
    d.add_instance(Instance::new("i-node5", "vpc-other", "172.31.0.5"));
    let p = provider(&d);
    p.list_routes(CLUSTER, &directory(5)).unwrap();
    d.reset_calls();
    let changes = [
        create_to(1, "100.64.1.0/24"),
        create_to(2, "192.168.0.128/25"),
        create_to(3, "fd00:10:244:3::/64"),
        create(4),
        create(5),
    ];
    let reason = |o: &Result<(), CloudError>| match o {
        Err(CloudError {
            kind: CloudErrorKind::Refused { reason, .. },
            ..
        }) => *reason,
        other => panic!("not refused: {other:?}"),
    };
    for (i, change) in changes.iter().enumerate() {
        let expected = [
            Some(RESERVED_DESTINATION),
            Some(OVERLAPS_VSWITCH),
            Some(NO_IPV6),
            None,
            None,
        ][i];
        match (p.precheck(change), expected) {
            (Err(e), Some(r)) => assert_eq!(reason(&Err(e)), r),
            (Ok(()), None) => {}
            (other, _) => panic!("change {i}: {other:?}"),
        }
    }
    let outcomes = p.apply_changes(CLUSTER, &changes).unwrap();
    assert_eq!(reason(&outcomes[0]), RESERVED_DESTINATION);
    assert_eq!(reason(&outcomes[1]), OVERLAPS_VSWITCH);
    assert_eq!(reason(&outcomes[2]), NO_IPV6);
    assert!(outcomes[3].is_ok(), "{outcomes:?}");
    assert_eq!(reason(&outcomes[4]), INSTANCE_NOT_IN_VPC);
    assert_eq!(d.calls_of("CreateRouteEntries"), 1);
    assert_eq!(d.available(DEFAULT_TABLE).len(), 1);
    // Once known, the instance of another VPC is refused by the pre-flight alone.
    assert_eq!(reason(&p.precheck(&create(5))), INSTANCE_NOT_IN_VPC);
    // With IPv6 on the VPC (read again at the next list, since a node was refused
    // for it), the IPv6 pod CIDR is routed.
    d.set_vpc_ipv6(DEFAULT_VPC, "2408:4000::/56");
    p.list_routes(CLUSTER, &directory(5)).unwrap();
    let v6 = create_to(3, "fd00:10:244:3::/64");
    assert_eq!(p.precheck(&v6), Ok(()));
    all_ok(&p.apply_changes(CLUSTER, &[v6]).unwrap());
    assert!(
        d.available(DEFAULT_TABLE)
            .contains(&("fd00:10:244:3::/64".to_string(), "i-node3".to_string())),
        "{:?}",
        d.available(DEFAULT_TABLE)
    );
}

/// Guards several tables (`routeTableIDs`, comma-separated, as the peer takes them):
/// a create writes each table in its own batch, a route is listed only when every
/// table holds it, and a create then writes only the table that lacks it.
#[test]
fn several_route_tables_are_written_each_and_listed_when_all_hold_the_route() {
    let d = double(3);
    d.add_custom_table(DEFAULT_VPC, "vtb-custom");
    let p = provider_with(
        &d,
        &format!("  routeTableIDs: \"{DEFAULT_TABLE}, vtb-custom\"\n"),
        access_key_env,
    )
    .expect("connects");
    assert_eq!(p.tables(), [DEFAULT_TABLE, "vtb-custom"]);
    // A batch is a write and two reads in each table: charged so when it is sent.
    let budget = p.budget().expect("a budget");
    assert_eq!(
        budget.draws_with_tables(BudgetOp::Batch, p.tables().len()),
        [(Budget::DEFAULT_BUCKET, 6)]
    );
    assert_eq!(budget.mutations_at_once, 1);
    p.list_routes(CLUSTER, &directory(3)).unwrap();
    d.reset_calls();
    all_ok(&p.apply_changes(CLUSTER, &[create(1), create(2)]).unwrap());
    assert_eq!(d.calls_of("CreateRouteEntries"), 2, "{:?}", d.calls());
    assert_eq!(d.available(DEFAULT_TABLE).len(), 2);
    assert_eq!(d.available("vtb-custom").len(), 2);
    assert_eq!(listed(&p, &directory(3)).len(), 2);
    // Lost from one table: not listed, and its create writes that table only.
    let id = d
        .entries("vtb-custom")
        .into_iter()
        .find(|e| e.destination == "10.244.1.0/24")
        .expect("the entry")
        .id;
    d.remove_entry(&id);
    assert_eq!(listed(&p, &directory(3)).len(), 1);
    d.reset_calls();
    all_ok(&p.apply_changes(CLUSTER, &[create(1)]).unwrap());
    let writes: Vec<_> = d
        .requests()
        .into_iter()
        .filter(|r| r.action == "CreateRouteEntries")
        .collect();
    assert_eq!(writes.len(), 1);
    assert_eq!(
        writes[0]
            .params
            .get("RouteEntries.1.RouteTableId")
            .map(String::as_str),
        Some("vtb-custom")
    );
    // Without routeTableIDs, a VPC of two tables is a setting to fix, named.
    let e = provider_with(&d, "", access_key_env).unwrap_err();
    assert!(e.message.contains("Global.routeTableIDs"), "{e}");
    assert!(!e.outage);
}

/// Guards RRSA: the service account's token is exchanged at STS for keys that sign
/// the requests, and the token file is read again at each refresh (here when the
/// virtual clock reaches five minutes before the hour's keys expire).
#[test]
fn rrsa_keys_come_from_sts_with_the_token_read_again_at_each_refresh() {
    let d = double(1);
    let dir = tempdir::TempDir::new("rrsa");
    let token = dir.write("token", "oidc-token-1\n");
    let role = "acs:ram::1234567890123456:role/route-controller";
    let oidc = "acs:ram::1234567890123456:oidc-provider/ack-rrsa-double";
    d.set_oidc(oidc, role, "oidc-token-1");
    let (clock, advance) = virtual_clock();
    let token_path = token.display().to_string();
    let env = move |name: &str| match name {
        "ALIBABA_CLOUD_ROLE_ARN" => Some(role.to_string()),
        "ALIBABA_CLOUD_OIDC_PROVIDER_ARN" => Some(oidc.to_string()),
        "ALIBABA_CLOUD_OIDC_TOKEN_FILE" => Some(token_path.clone()),
        _ => None,
    };
    let p = provider_with(&d, "", env)
        .expect("connects with RRSA keys")
        .with_clock(clock);
    assert!(d.calls_of("AssumeRoleWithOIDC") >= 1, "{:?}", d.calls());
    // The kubelet rotates the token: the next refresh sends the new one.
    std::fs::write(&token, "oidc-token-2\n").unwrap();
    d.set_oidc(oidc, role, "oidc-token-2");
    let before = d.calls_of("AssumeRoleWithOIDC");
    p.list_routes(CLUSTER, &directory(1))
        .expect("the hour's keys are still good");
    assert_eq!(
        d.calls_of("AssumeRoleWithOIDC"),
        before,
        "kept, not fetched"
    );
    advance(56 * 60);
    p.list_routes(CLUSTER, &directory(1))
        .expect("signed with keys from the rotated token");
    assert!(d.calls_of("AssumeRoleWithOIDC") > before, "{:?}", d.calls());
    let last = d
        .requests()
        .into_iter()
        .rev()
        .find(|r| r.action == "AssumeRoleWithOIDC")
        .expect("an STS request");
    assert_eq!(
        last.params.get("OIDCToken").map(String::as_str),
        Some("oidc-token-2")
    );
    assert!(d.issued_keys().iter().all(|k| k.starts_with("STS.OIDC")));
}

/// Guards the ECS RAM role: with no key anywhere, the role the metadata service
/// names gives the keys, fetched with the hardened mode's token; with no region or
/// VPC in the cloud config, the metadata service's are used.
/// Guards "a failed lookup is not cached": a node whose instance DescribeInstances
/// does not show yet is refused, and its create's next try, with no list between,
/// looks the instance up again and writes the entry.
#[test]
fn an_instance_not_found_yet_is_looked_up_again_at_the_next_try() {
    let d = double(1);
    let p = provider(&d);
    p.list_routes(CLUSTER, &directory(2)).unwrap();
    let outcomes = p.apply_changes(CLUSTER, &[create(2)]).unwrap();
    let e = outcomes[0].as_ref().expect_err("no instance yet");
    assert!(
        matches!(
            e.kind,
            CloudErrorKind::Refused {
                reason: INSTANCE_NOT_IN_VPC,
                ..
            }
        ),
        "{e}"
    );
    d.add_instance(Instance::new("i-node2", DEFAULT_VPC, "192.168.0.12"));
    let RouteChange::Create { route, target, .. } = create(2) else {
        unreachable!()
    };
    p.preflight(&route, &target)
        .expect("the pre-flight leaves the lookup to the create");
    all_ok(&p.apply_changes(CLUSTER, &[create(2)]).unwrap());
    assert_eq!(d.available(DEFAULT_TABLE).len(), 1);
}

/// Guards the RAM policy the manifests and the README give: every action a connect,
/// a list, a create and a delete call is in it (Quota Center's among the optional).
#[test]
fn every_action_called_is_in_the_ram_policy() {
    let d = double(1);
    let p = provider(&d);
    p.list_routes(CLUSTER, &directory(1)).unwrap();
    all_ok(&p.apply_changes(CLUSTER, &[create(1)]).unwrap());
    let routes = p.list_routes(CLUSTER, &directory(1)).unwrap();
    all_ok(&p.apply_changes(CLUSTER, &[delete(&routes[0])]).unwrap());
    let required = route_controller::cloud::alibaba::RAM_ACTIONS;
    let optional = route_controller::cloud::alibaba::OPTIONAL_RAM_ACTIONS;
    for r in d.requests() {
        let named = |product: &str| {
            let action = format!("{product}:{}", r.action);
            required.contains(&action.as_str()) || optional.contains(&action.as_str())
        };
        assert!(
            named("vpc") || named("ecs") || named("quotas"),
            "{} is in no RAM policy",
            r.action
        );
    }
    assert!(d.calls_of("DescribeVpcs") > 0, "{:?}", d.calls());
}

/// Guards the lease fence before the keys: a replica that lost its lease asks
/// neither STS nor anything else (its keys having expired), and an oversized token
/// file is refused, not read whole.
#[test]
fn no_keys_are_fetched_behind_a_closed_fence_nor_from_an_oversized_token() {
    let d = double(1);
    let dir = tempdir::TempDir::new("rrsa-fence");
    let token = dir.write("token", "oidc-token-1\n");
    let role = "acs:ram::1234567890123456:role/route-controller";
    let oidc = "acs:ram::1234567890123456:oidc-provider/ack-rrsa-double";
    d.set_oidc(oidc, role, "oidc-token-1");
    let token_path = token.display().to_string();
    let env = move |name: &str| match name {
        "ALIBABA_CLOUD_ROLE_ARN" => Some(role.to_string()),
        "ALIBABA_CLOUD_OIDC_PROVIDER_ARN" => Some(oidc.to_string()),
        "ALIBABA_CLOUD_OIDC_TOKEN_FILE" => Some(token_path.clone()),
        _ => None,
    };
    let fence = route_controller::Fence::new();
    let (clock, advance) = virtual_clock();
    let p = provider_with(&d, "", env)
        .expect("connects with RRSA keys")
        .with_clock(clock)
        .with_fence(fence.clone());
    // Past the hour's expiry: a failed refresh has no valid keys to fall back on.
    advance(61 * 60);
    d.reset_calls();
    assert!(p.list_routes(CLUSTER, &directory(1)).is_err());
    assert!(d.calls().is_empty(), "{:?}", d.calls());
    fence.open_for_good();
    std::fs::write(&token, "x".repeat(1 << 20)).unwrap();
    let e = p.list_routes(CLUSTER, &directory(1)).unwrap_err();
    assert!(e.message.contains("larger than"), "{e}");
    assert_eq!(d.calls_of("AssumeRoleWithOIDC"), 0, "{:?}", d.calls());
}

#[test]
fn the_ecs_ram_role_gives_the_keys_through_the_metadata_service() {
    let d = double(1);
    d.set_metadata_token_required(true);
    d.set_metadata_instance("i-node1");
    let text = format!(
        "Global:\n  vpcEndpoint: {e}\n  ecsEndpoint: {e}\n  metadataEndpoint: {e}\n",
        e = d.endpoint()
    );
    let cidrs = [Cidr::parse("10.244.0.0/16").unwrap()];
    let (config, _) = Config::from_cloud_config(Some(&text), &cidrs, |_| None).unwrap();
    let p = AlibabaRoutes::connect(config).expect("connects with the RAM role's keys");
    assert_eq!(p.tables(), [DEFAULT_TABLE], "the metadata's VPC's table");
    p.list_routes(CLUSTER, &directory(1)).unwrap();
    let calls = d.calls();
    assert!(
        calls.contains_key("metadata:/latest/meta-data/region-id"),
        "{calls:?}"
    );
    assert!(
        calls.contains_key("metadata:/latest/meta-data/vpc-id"),
        "{calls:?}"
    );
    let calls = d.calls();
    assert!(
        calls.contains_key("metadata:/latest/api/token"),
        "{calls:?}"
    );
    assert!(
        calls.contains_key(
            "metadata:/latest/meta-data/ram/security-credentials/route-controller-role"
        ),
        "{calls:?}"
    );
    let issued = d.issued_keys();
    assert_eq!(
        issued.len(),
        1,
        "the keys are kept until they near expiry: {issued:?}"
    );
    assert!(issued[0].starts_with("STS.ECS"), "{issued:?}");
}

/// A clock `advance(seconds)` moves ahead of the real one: the double stamps the
/// keys' Expiration with the real time, the provider reads it against this.
fn virtual_clock() -> (route_controller::cloud::alibaba::Clock, impl Fn(u64)) {
    let offset = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let read = offset.clone();
    let clock: route_controller::cloud::alibaba::Clock = std::sync::Arc::new(move || {
        std::time::SystemTime::now()
            + std::time::Duration::from_secs(read.load(std::sync::atomic::Ordering::SeqCst))
    });
    let advance = move |seconds: u64| {
        offset.fetch_add(seconds, std::sync::atomic::Ordering::SeqCst);
    };
    (clock, advance)
}

/// An RRSA identity against the double's STS, the token in a file under `dir`.
fn rrsa_provider(
    d: &AlibabaDouble,
    dir: &tempdir::TempDir,
) -> Result<AlibabaRoutes, route_controller::cloud::alibaba::ConfigError> {
    let token = dir.write("token", "oidc-token-1\n");
    let role = "acs:ram::1234567890123456:role/route-controller";
    let oidc = "acs:ram::1234567890123456:oidc-provider/ack-rrsa-double";
    d.set_oidc(oidc, role, "oidc-token-1");
    let token_path = token.display().to_string();
    provider_with(d, "", move |name: &str| match name {
        "ALIBABA_CLOUD_ROLE_ARN" => Some(role.to_string()),
        "ALIBABA_CLOUD_OIDC_PROVIDER_ARN" => Some(oidc.to_string()),
        "ALIBABA_CLOUD_OIDC_TOKEN_FILE" => Some(token_path.clone()),
        _ => None,
    })
}

/// Guards the refresh of temporary keys when STS fails: the keys, valid five more
/// minutes, keep signing; STS is not asked again at every request but after a
/// pause of 1 s, then 2 s; new keys replace the old once STS answers.
#[test]
fn a_failed_key_refresh_keeps_the_valid_keys_and_pauses_before_asking_again() {
    let d = double(1);
    let dir = tempdir::TempDir::new("rrsa-refresh");
    let (clock, advance) = virtual_clock();
    let p = rrsa_provider(&d, &dir)
        .expect("connects with RRSA keys")
        .with_clock(clock);
    let sts = || d.calls_of("AssumeRoleWithOIDC");
    let first = sts();
    assert_eq!(d.issued_keys().len(), 1, "{:?}", d.issued_keys());
    advance(56 * 60);
    for _ in 0..2 {
        d.inject(
            "AssumeRoleWithOIDC",
            Fault::error(503, "ServiceUnavailable", "down"),
        );
    }
    p.list_routes(CLUSTER, &directory(1))
        .expect("signed with the keys still valid for four minutes");
    assert_eq!(sts(), first + 1, "one refresh tried");
    p.list_routes(CLUSTER, &directory(1))
        .expect("the old keys again");
    assert_eq!(
        sts(),
        first + 1,
        "no refresh during the first second's pause"
    );
    advance(1);
    p.list_routes(CLUSTER, &directory(1))
        .expect("the old keys again");
    assert_eq!(
        sts(),
        first + 2,
        "asked again after the pause, failed again"
    );
    advance(1);
    p.list_routes(CLUSTER, &directory(1))
        .expect("the old keys again");
    assert_eq!(sts(), first + 2, "the second pause is 2 s");
    advance(1);
    p.list_routes(CLUSTER, &directory(1)).expect("new keys");
    assert_eq!(sts(), first + 3);
    assert_eq!(d.issued_keys().len(), 2, "{:?}", d.issued_keys());
}

/// Guards keys that arrive already expired: refused with a message saying so, not
/// used to earn an InvalidSecurityToken for every request.
#[test]
fn keys_that_arrive_expired_are_refused() {
    let d = double(1);
    d.set_credential_lifetime(std::time::Duration::ZERO);
    let dir = tempdir::TempDir::new("rrsa-expired");
    let e = rrsa_provider(&d, &dir).expect_err("no usable keys");
    assert!(e.message.contains("had expired"), "{e:?}");
    assert!(e.message.contains("Alibaba Cloud RRSA"), "{e:?}");
}

/// Guards the answer to InvalidSecurityToken (keys revoked or expired early): the
/// temporary keys are forgotten and the same request is sent again with new ones.
#[test]
fn a_refused_security_token_brings_new_keys_for_the_same_request() {
    let d = double(1);
    let dir = tempdir::TempDir::new("rrsa-refused");
    let p = rrsa_provider(&d, &dir).expect("connects with RRSA keys");
    let before = d.calls_of("AssumeRoleWithOIDC");
    d.inject(
        "DescribeRouteEntryList",
        Fault::error(
            400,
            "InvalidSecurityToken.Expired",
            "Specified SecurityToken is expired.",
        ),
    );
    p.list_routes(CLUSTER, &directory(1))
        .expect("listed with new keys");
    assert_eq!(
        d.calls_of("AssumeRoleWithOIDC"),
        before + 1,
        "{:?}",
        d.calls()
    );
    assert_eq!(d.issued_keys().len(), 2, "{:?}", d.issued_keys());
}

/// The warnings logged in this test binary (every test's: a test looks for its own
/// by a word only it uses).
static WARNINGS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// From now on, warnings are kept for [`warnings_with`].
fn capture_warnings() {
    struct Capture;
    impl log::Log for Capture {
        fn enabled(&self, metadata: &log::Metadata) -> bool {
            metadata.level() <= log::Level::Warn
        }
        fn log(&self, record: &log::Record) {
            if record.level() == log::Level::Warn {
                let mut w = WARNINGS.lock().unwrap_or_else(|e| e.into_inner());
                w.push(record.args().to_string());
            }
        }
        fn flush(&self) {}
    }
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        log::set_boxed_logger(Box::new(Capture)).expect("no other logger in this test binary");
        log::set_max_level(log::LevelFilter::Warn);
    });
}

/// The warnings logged since [`capture_warnings`] that contain `needle`.
fn warnings_with(needle: &str) -> Vec<String> {
    WARNINGS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|w| w.contains(needle))
        .cloned()
        .collect()
}

/// Guards item 3's "the table's quota read at start": without
/// `Global.routeEntryQuota` a table holds what the account's Quota Center says
/// (`ListProductQuotas`, product `vpc`, the route entry quota in our region, signed
/// V3 like every call), read once at the first list and counted for the budget with
/// the list's requests; set explicitly, the key wins and Quota Center is not asked.
#[test]
fn the_tables_quota_is_the_accounts_from_quota_center_unless_set() {
    let d = double(2);
    d.set_account_quota(7);
    let p = provider(&d);
    assert_eq!(d.calls_of("ListProductQuotas"), 0, "read at the list");
    d.reset_calls();
    let (list, usage) = Meter::measure(|| p.list_routes(CLUSTER, &directory(2)));
    list.expect("the list");
    assert_eq!(d.calls_of("ListProductQuotas"), 1, "{:?}", d.calls());
    assert_eq!(
        usage.expect("metered").requests as usize,
        d.requests().len(),
        "every request of the list is charged, the quota's too"
    );
    let read = d
        .requests()
        .into_iter()
        .find(|r| r.action == "ListProductQuotas")
        .expect("the quota read");
    assert_eq!(read.version, "2020-05-10");
    for (k, v) in [
        ("ProductCode", "vpc"),
        (
            "QuotaActionCode",
            route_controller::cloud::alibaba::ROUTE_ENTRY_QUOTA,
        ),
        ("Dimensions.1.Key", "regionId"),
        ("Dimensions.1.Value", REGION),
    ] {
        assert_eq!(
            read.params.get(k).map(String::as_str),
            Some(v),
            "{:?}",
            read.params
        );
    }
    assert!(!read.params.contains_key("SignatureMethod"), "V3, not V1");
    // Quota Center is central: it takes no RegionId (the double refuses it).
    assert!(!read.params.contains_key("RegionId"), "{:?}", read.params);
    assert_eq!(p.route_tables()[0].limit, 7);
    // Read once: the next list does not ask again.
    p.list_routes(CLUSTER, &directory(2)).expect("the list");
    assert_eq!(d.calls_of("ListProductQuotas"), 1, "{:?}", d.calls());

    let set = provider_with(&d, "  routeEntryQuota: 12\n", access_key_env).expect("connect");
    set.list_routes(CLUSTER, &directory(2)).expect("the list");
    assert_eq!(set.route_tables()[0].limit, 12, "the key wins");
    assert_eq!(d.calls_of("ListProductQuotas"), 1, "{:?}", d.calls());
}

/// Guards the fallback: Quota Center refusing the read (no RAM permission) or not
/// answering never fails the list; the table keeps 200, and one warning names
/// what failed and the permission to grant.
#[test]
fn a_quota_read_refused_or_lost_keeps_200_with_one_warning() {
    capture_warnings();
    let d = double(1);
    d.set_account_quota(7);
    d.inject(
        "ListProductQuotas",
        Fault::error(403, "NoPermission", "quota-read-refused-in-this-test"),
    );
    let p = provider(&d);
    p.list_routes(CLUSTER, &directory(1))
        .expect("the list goes on");
    assert_eq!(p.route_tables()[0].limit, 200);
    let said = warnings_with("quota-read-refused-in-this-test");
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(said[0].contains("quotas:ListProductQuotas"), "{said:?}");
    assert!(said[0].contains("NoPermission"), "{said:?}");

    d.inject("ListProductQuotas", Fault::LostReply);
    let p = provider(&d);
    p.list_routes(CLUSTER, &directory(1))
        .expect("the list goes on");
    assert_eq!(p.route_tables()[0].limit, 200);
    assert_eq!(d.calls_of("ListProductQuotas"), 2, "{:?}", d.calls());
}

/// Guards the re-read: when the VPC says a table is full (`QuotaExceeded.*`) the
/// next list asks Quota Center again, so that a quota changed since start is the
/// one the controller plans with.
#[test]
fn a_table_found_full_makes_the_next_list_read_the_quota_again() {
    let d = double(4);
    let p = provider(&d);
    p.list_routes(CLUSTER, &directory(4)).expect("the list");
    assert_eq!(p.route_tables()[0].limit, 200);
    d.set_account_quota(3);
    let changes: Vec<RouteChange> = (1..=4).map(create).collect();
    let full = match p.apply_changes(CLUSTER, &changes) {
        Err(e) => e.kind == CloudErrorKind::TableFull,
        Ok(outcomes) => outcomes
            .iter()
            .any(|o| matches!(o, Err(e) if e.kind == CloudErrorKind::TableFull)),
    };
    assert!(full, "{:?}", d.calls());
    p.list_routes(CLUSTER, &directory(4)).expect("the list");
    assert_eq!(d.calls_of("ListProductQuotas"), 2, "{:?}", d.calls());
    assert_eq!(p.route_tables()[0].limit, 3);
}

/// A clock that moves only when the test says (`advance(seconds)`): the AccessKey
/// identity has no expiry, so every age the provider measures is the test's.
fn frozen_clock() -> (route_controller::cloud::alibaba::Clock, impl Fn(u64)) {
    let start = std::time::SystemTime::now();
    let offset = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let read = offset.clone();
    let clock: route_controller::cloud::alibaba::Clock = std::sync::Arc::new(move || {
        start + std::time::Duration::from_secs(read.load(std::sync::atomic::Ordering::SeqCst))
    });
    let advance = move |seconds: u64| {
        offset.fetch_add(seconds, std::sync::atomic::Ordering::SeqCst);
    };
    (clock, advance)
}

const MINUTE: u64 = 60;

/// Guards the quota's re-read on the provider's clock: refused at the first list
/// (no permission), it is not asked again 59 minutes later, is asked at 60, and the
/// second refusal logs nothing at warn level; once granted, the value read holds
/// an hour too.
#[test]
fn a_refused_quota_read_is_tried_again_an_hour_later_without_a_second_warning() {
    capture_warnings();
    let d = double(1);
    d.set_account_quota(7);
    for _ in 0..2 {
        d.inject(
            "ListProductQuotas",
            Fault::error(403, "NoPermission", "quota-refused-hourly-in-this-test"),
        );
    }
    let (clock, advance) = frozen_clock();
    let p = provider(&d).with_clock(clock);
    let list = || p.list_routes(CLUSTER, &directory(1)).expect("the list");
    let reads = || d.calls_of("ListProductQuotas");
    list();
    assert_eq!((reads(), p.route_tables()[0].limit), (1, 200));
    let vswitches = d.calls_of("DescribeVSwitches");
    advance(59 * MINUTE);
    list();
    assert_eq!(reads(), 1, "read again before the hour: {:?}", d.calls());
    // The vSwitches, trusted ten minutes, on the same clock.
    assert_eq!(
        d.calls_of("DescribeVSwitches"),
        vswitches + 1,
        "{:?}",
        d.calls()
    );
    advance(MINUTE);
    list();
    assert_eq!((reads(), p.route_tables()[0].limit), (2, 200));
    let said = warnings_with("quota-refused-hourly-in-this-test");
    assert_eq!(said.len(), 1, "the second refusal warned again: {said:?}");
    // Granted since: the next hour's read gives the account's value, which holds.
    advance(60 * MINUTE);
    list();
    assert_eq!((reads(), p.route_tables()[0].limit), (3, 7));
    advance(59 * MINUTE);
    list();
    assert_eq!(reads(), 3, "{:?}", d.calls());
    advance(MINUTE);
    list();
    assert_eq!(reads(), 4, "{:?}", d.calls());
}

/// Guards the short retry: a read lost on the way (no reply) says nothing about
/// the quota, so the next list five minutes later asks again and gets the
/// account's 300, instead of keeping 200 an hour (nodes above 200 would be held
/// `RouteTableFull` by the controller with no create sent to correct it).
#[test]
fn a_lost_quota_read_is_tried_again_at_a_list_five_minutes_later() {
    let d = double(1);
    d.inject("ListProductQuotas", Fault::LostReply);
    let (clock, advance) = frozen_clock();
    let p = provider(&d).with_clock(clock);
    let list = || p.list_routes(CLUSTER, &directory(1)).expect("the list");
    list();
    assert_eq!(p.route_tables()[0].limit, 200);
    d.set_account_quota(300);
    advance(4 * MINUTE);
    list();
    assert_eq!(d.calls_of("ListProductQuotas"), 1, "{:?}", d.calls());
    advance(MINUTE);
    list();
    assert_eq!(d.calls_of("ListProductQuotas"), 2, "{:?}", d.calls());
    assert_eq!(p.route_tables()[0].limit, 300);
}

/// Guards the fallback at its limit: even after a refusal (which otherwise holds an
/// hour), a table holding the 200 assumed makes the quota due every five minutes,
/// as the controller sends no create beyond it that could say otherwise.
#[test]
fn a_table_at_the_assumed_quota_makes_a_refused_read_due_every_five_minutes() {
    let d = double(1);
    d.set_account_quota(300);
    let others: Vec<(String, &str)> = (0..200)
        .map(|i| (format!("172.16.{i}.0/24"), "i-vpn"))
        .collect();
    let others: Vec<(&str, &str)> = others.iter().map(|(c, i)| (c.as_str(), *i)).collect();
    d.begin_foreign_batch(DEFAULT_TABLE, &others);
    d.settle();
    d.inject(
        "ListProductQuotas",
        Fault::error(403, "Forbidden.RAM", "not allowed"),
    );
    let (clock, advance) = frozen_clock();
    let p = provider(&d).with_clock(clock);
    let list = || p.list_routes(CLUSTER, &directory(1)).expect("the list");
    list();
    let usage = &p.route_tables()[0];
    assert_eq!((usage.routes, usage.limit), (200, 200), "{usage:?}");
    advance(4 * MINUTE);
    list();
    assert_eq!(d.calls_of("ListProductQuotas"), 1, "{:?}", d.calls());
    advance(MINUTE);
    list();
    assert_eq!(d.calls_of("ListProductQuotas"), 2, "{:?}", d.calls());
    assert_eq!(p.route_tables()[0].limit, 300);
}

/// A `CreateRouteEntries` reply that accepted nothing and refused node 1's entry
/// with `code` (`FailedRouteEntries`, as the API reports a refusal per entry).
fn refused_entry_reply(code: &str) -> String {
    serde_json::json!({
        "RequestId": "refused-entry",
        "SuccessCount": 0,
        "FailedCount": 1,
        "RouteEntryIds": [],
        "FailedRouteEntries": [{
            "DstCidrBlock": "10.244.1.0/24",
            "NextHop": "i-node1",
            "FailedCode": code,
            "FailedMessage": "The route entries of the route table reach the quota.",
        }],
    })
    .to_string()
}

/// Guards the re-read after one entry of a batch was refused for the quota
/// (`FailedRouteEntries[].FailedCode` `QuotaExceeded.*`, the whole call a success):
/// that entry is `TableFull`, and the next list asks Quota Center again.
#[test]
fn an_entry_refused_for_the_quota_makes_the_next_list_read_it_again() {
    let d = double(1);
    let p = provider(&d);
    p.list_routes(CLUSTER, &directory(1)).expect("the list");
    assert_eq!(d.calls_of("ListProductQuotas"), 1);
    d.inject(
        "CreateRouteEntries",
        Fault::Reply(refused_entry_reply("QuotaExceeded.RouteEntryNum")),
    );
    let outcomes = p.apply_changes(CLUSTER, &[create(1)]).expect("the batch");
    assert!(
        matches!(&outcomes[..], [Err(e)] if e.kind == CloudErrorKind::TableFull),
        "{outcomes:?}"
    );
    p.list_routes(CLUSTER, &directory(1)).expect("the list");
    assert_eq!(d.calls_of("ListProductQuotas"), 2, "{:?}", d.calls());
}

/// Guards a table found full while the quota's read is in flight: that read's
/// reply may predate the change, so the next list asks again (the quota's read
/// time is not set over the VPC's word).
#[test]
fn a_table_found_full_during_the_quota_read_keeps_the_quota_due() {
    let d = double(1);
    let gate = Gate::new();
    d.inject("ListProductQuotas", Fault::Held(gate.clone()));
    let p = std::sync::Arc::new(provider(&d));
    let listing = {
        let p = p.clone();
        std::thread::spawn(move || p.list_routes(CLUSTER, &directory(1)).map(|_| ()))
    };
    gate.wait_reached();
    d.inject(
        "CreateRouteEntries",
        Fault::Reply(refused_entry_reply("QuotaExceeded.RouteEntryNum")),
    );
    let outcomes = p.apply_changes(CLUSTER, &[create(1)]).expect("the batch");
    assert!(
        matches!(&outcomes[..], [Err(e)] if e.kind == CloudErrorKind::TableFull),
        "{outcomes:?}"
    );
    gate.open();
    listing
        .join()
        .expect("the listing thread")
        .expect("the list");
    assert_eq!(d.calls_of("ListProductQuotas"), 1);
    p.list_routes(CLUSTER, &directory(1)).expect("the list");
    assert_eq!(d.calls_of("ListProductQuotas"), 2, "{:?}", d.calls());
}

/// Guards the second ask: when the quota filtered by the dimension `regionId` lists
/// nothing (the account's quota has no dimension), the same quota is asked for
/// without dimensions, 100 a page, every page followed, and the one that applies
/// to our region (no dimension; not another region's) is used.
#[test]
fn a_quota_without_the_region_dimension_is_found_in_the_list_without_dimensions() {
    let d = double(1);
    d.set_account_quota(300);
    d.serve_quota_without_dimensions(1);
    let p = provider(&d);
    p.list_routes(CLUSTER, &directory(1)).expect("the list");
    assert_eq!(p.route_tables()[0].limit, 300);
    let reads: Vec<_> = d
        .requests()
        .into_iter()
        .filter(|r| r.action == "ListProductQuotas")
        .collect();
    assert_eq!(reads.len(), 3, "filtered, then two pages: {reads:?}");
    assert!(reads[0].params.contains_key("Dimensions.1.Key"));
    for r in &reads[1..] {
        assert!(
            !r.params.keys().any(|k| k.starts_with("Dimensions")),
            "{:?}",
            r.params
        );
        assert_eq!(r.params.get("MaxResults").map(String::as_str), Some("100"));
    }
    assert!(!reads[1].params.contains_key("NextToken"));
    assert!(reads[2].params.contains_key("NextToken"), "{reads:?}");
}
