//! The AWS EC2 provider against moto's EC2 emulator (round trips, route table
//! discovery, source/destination check, signature checking, the controller driving
//! it) and against scripted HTTP stubs for what moto never produces (blackholes,
//! paging, throttling, timeouts, IMDSv2).

#[path = "support/fault_proxy.rs"]
mod fault_proxy;
#[path = "support/moto.rs"]
mod moto;
#[path = "support/stub_http.rs"]
mod stub_http;

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use route_controller::cloud::aws::credentials::AwsEnv;
use route_controller::cloud::aws::query::Params;
use route_controller::cloud::aws::quotas::DEFAULT_ROUTE_TABLE_LIMIT;
use route_controller::cloud::aws::sigv4::{self, RequestParts, SigningKey};
use route_controller::cloud::aws::{AwsConfig, AwsProvider};
use route_controller::cloud::{CloudErrorKind, NodeDirectory, RouteTarget, Routes};
use route_controller::metrics::Metrics;
use route_controller::model::{Cidr, Node, NodeAddress, Route};
use route_controller::{Command, Config, Controller, Input, NodeEvent, PassReport};
use route_controller::{Meter, run_op};
use stub_http::{Reply, Request, StubServer};

const CLUSTER: &str = "test-cluster";

/// An environment with the dummy keys and nothing else: no home directory, no
/// instance metadata service.
fn test_env() -> AwsEnv {
    AwsEnv::new()
        .with_var("AWS_ACCESS_KEY_ID", moto::TEST_KEY_ID)
        .with_var("AWS_SECRET_ACCESS_KEY", moto::TEST_SECRET)
        .with_var("AWS_EC2_METADATA_DISABLED", "true")
}

fn provider_at(url: &str, config: AwsConfig, env: &AwsEnv) -> AwsProvider {
    // No test reaches the public Service Quotas endpoint: a test of the quota read
    // names its endpoint, every other one has the default limit set.
    let route_table_limit = match config.service_quotas_endpoint {
        Some(_) => config.route_table_limit,
        None => config.route_table_limit.or(Some(DEFAULT_ROUTE_TABLE_LIMIT)),
    };
    AwsProvider::new(
        AwsConfig {
            region: Some(moto::REGION.into()),
            endpoint: Some(url.into()),
            route_table_limit,
            ..config
        },
        env,
    )
    .expect("provider")
}

fn route(destination: &str) -> Route {
    Route {
        destination_cidr: destination.into(),
        ..Route::default()
    }
}

fn target(node: &str, provider_id: Option<&str>) -> RouteTarget {
    RouteTarget {
        node_name: node.into(),
        provider_id: provider_id.map(str::to_string),
        addresses: vec![NodeAddress::internal_ip("10.0.1.10")],
    }
}

/// `(destination, target node, blackhole)` of listed routes, sorted.
fn summary(routes: &[Route]) -> Vec<(String, String, bool)> {
    let mut s: Vec<_> = routes
        .iter()
        .map(|r| {
            (
                r.destination_cidr.clone(),
                r.target_node.clone(),
                r.blackhole,
            )
        })
        .collect();
    s.sort();
    s
}

fn calls_delta(
    before: &BTreeMap<&'static str, u64>,
    after: &BTreeMap<&'static str, u64>,
) -> BTreeMap<&'static str, u64> {
    after
        .iter()
        .filter_map(|(k, v)| {
            let d = v - before.get(k).copied().unwrap_or(0);
            (d > 0).then_some((*k, d))
        })
        .collect()
}

#[test]
fn list_create_delete_round_trip_against_moto() {
    let moto = moto::shared();
    let ec2 = moto.ec2();
    let net = moto::network(&ec2);
    let table = ec2.create_route_table(
        &net.vpc,
        &[(&format!("kubernetes.io/cluster/{CLUSTER}"), "owned")],
    );
    let a = ec2.run_instance(&net.ami, &net.subnet);
    let b = ec2.run_instance(&net.ami, &net.subnet);
    let provider = provider_at(moto.url(), AwsConfig::default(), &test_env());
    let nodes = NodeDirectory::new([
        ("node-a", Some(a.provider_id().as_str())),
        ("node-b", Some(b.provider_id().as_str())),
    ]);

    let before = provider.api_calls();
    assert_eq!(provider.list_routes(CLUSTER, &nodes).expect("list"), vec![]);
    let first_list = calls_delta(&before, &provider.api_calls());

    let before = provider.api_calls();
    provider
        .create_route(
            CLUSTER,
            "uid-a",
            &route("10.244.1.0/24"),
            &target("node-a", Some(&a.provider_id())),
        )
        .expect("create a");
    let first_create = calls_delta(&before, &provider.api_calls());
    provider
        .create_route(
            CLUSTER,
            "uid-b",
            &route("10.244.2.0/24"),
            &target("node-b", Some(&b.provider_id())),
        )
        .expect("create b");

    let before = provider.api_calls();
    let started = Instant::now();
    let listed = provider.list_routes(CLUSTER, &nodes).expect("list");
    let list_took = started.elapsed();
    let warm_list = calls_delta(&before, &provider.api_calls());
    assert_eq!(
        summary(&listed),
        vec![
            ("10.244.1.0/24".into(), "node-a".into(), false),
            ("10.244.2.0/24".into(), "node-b".into(), false),
        ]
    );
    assert!(
        listed
            .iter()
            .any(|r| r.name == format!("{CLUSTER}-10.244.1.0/24"))
    );
    // The local route of the VPC is not the controller's business.
    assert!(listed.iter().all(|r| r.destination_cidr != "10.0.0.0/16"));
    let in_moto = ec2.routes(&table);
    assert!(in_moto.contains(&("10.244.1.0/24".into(), Some(a.id.clone()), "active".into())));
    assert!(in_moto.contains(&("10.244.2.0/24".into(), Some(b.id.clone()), "active".into())));

    let before = provider.api_calls();
    let b_route = listed
        .iter()
        .find(|r| r.target_node == "node-b")
        .expect("b's route");
    let started = Instant::now();
    provider.delete_route(CLUSTER, b_route).expect("delete");
    let delete_took = started.elapsed();
    let delete = calls_delta(&before, &provider.api_calls());
    assert_eq!(
        summary(&provider.list_routes(CLUSTER, &nodes).expect("list")),
        vec![("10.244.1.0/24".into(), "node-a".into(), false)]
    );
    let again = provider
        .delete_route(CLUSTER, b_route)
        .expect_err("already gone");
    assert_eq!(again.kind, CloudErrorKind::NotFound, "{}", again.message);

    // The physical minimum: one call per operation (plus the once-per-instance
    // source/dest check); the list finds the tables and reads them in one call.
    let m = |pairs: &[(&'static str, u64)]| pairs.iter().copied().collect::<BTreeMap<_, _>>();
    assert_eq!(first_list, m(&[("DescribeRouteTables", 1)]));
    assert_eq!(
        first_create,
        m(&[
            ("CreateRoute", 1),
            ("DescribeInstances", 1),
            ("ModifyInstanceAttribute", 1)
        ])
    );
    assert_eq!(warm_list, m(&[("DescribeRouteTables", 1)]));
    assert_eq!(delete, m(&[("DeleteRoute", 1)]));
    eprintln!(
        "[aws] calls: first list {first_list:?}; first create {first_create:?}; list {warm_list:?}; delete {delete:?}"
    );
    eprintln!("[aws] against moto: list took {list_took:?}, delete took {delete_took:?}");
}

fn owned_tag() -> (String, &'static str) {
    (format!("kubernetes.io/cluster/{CLUSTER}"), "owned")
}

/// The shared moto server (reset), a VPC with a subnet, and a route table tagged for
/// the cluster: what most tests start from.
fn tagged_table() -> (moto::MotoGuard, moto::Ec2, moto::Network, String) {
    let moto = moto::shared();
    let ec2 = moto.ec2();
    let net = moto::network(&ec2);
    let (key, value) = owned_tag();
    let table = ec2.create_route_table(&net.vpc, &[(&key, value)]);
    (moto, ec2, net, table)
}

#[test]
fn route_table_is_found_by_the_legacy_cluster_tag() {
    let moto = moto::shared();
    let ec2 = moto.ec2();
    let net = moto::network(&ec2);
    let _untagged = ec2.create_route_table(&net.vpc, &[]);
    let _other_cluster = ec2.create_route_table(&net.vpc, &[("KubernetesCluster", "other")]);
    let table = ec2.create_route_table(&net.vpc, &[]);
    ec2.tag(&table, "KubernetesCluster", CLUSTER);
    let a = ec2.run_instance(&net.ami, &net.subnet);
    let provider = provider_at(moto.url(), AwsConfig::default(), &test_env());

    assert_eq!(
        provider.route_table_ids(CLUSTER).expect("found"),
        vec![table.clone()]
    );
    provider
        .create_route(
            CLUSTER,
            "uid",
            &route("10.244.7.0/24"),
            &target("a", Some(&a.provider_id())),
        )
        .expect("create");
    assert!(
        ec2.routes(&table)
            .iter()
            .any(|(d, i, _)| d == "10.244.7.0/24" && i.as_deref() == Some(a.id.as_str()))
    );
}

#[test]
fn route_table_is_found_by_the_cluster_tag_key_with_any_value() {
    let moto = moto::shared();
    let ec2 = moto.ec2();
    let net = moto::network(&ec2);
    let _other = ec2.create_route_table(&net.vpc, &[("kubernetes.io/cluster/other", "owned")]);
    let (key, _) = owned_tag();
    let table = ec2.create_route_table(&net.vpc, &[(&key, "shared")]);
    let provider = provider_at(moto.url(), AwsConfig::default(), &test_env());
    assert_eq!(
        provider.route_table_ids(CLUSTER).expect("found"),
        vec![table.clone()]
    );
}

#[test]
fn route_table_given_by_id_needs_no_tag_and_no_discovery() {
    let moto = moto::shared();
    let ec2 = moto.ec2();
    let net = moto::network(&ec2);
    let table = ec2.create_route_table(&net.vpc, &[]);
    let a = ec2.run_instance(&net.ami, &net.subnet);
    let provider = provider_at(
        moto.url(),
        AwsConfig {
            route_table_ids: vec![table.clone()],
            ..AwsConfig::default()
        },
        &test_env(),
    );
    provider
        .create_route(
            CLUSTER,
            "uid",
            &route("10.244.8.0/24"),
            &target("a", Some(&a.provider_id())),
        )
        .expect("create");
    let nodes = NodeDirectory::new([("a", Some(a.provider_id().as_str()))]);
    assert_eq!(
        summary(&provider.list_routes(CLUSTER, &nodes).expect("list")),
        vec![("10.244.8.0/24".into(), "a".into(), false)]
    );
    // One describe for the list, none for the create: no discovery at all.
    assert_eq!(provider.api_calls().get("DescribeRouteTables"), Some(&1));
}

#[test]
fn no_tagged_route_table_is_an_error_that_says_how_to_tag_one() {
    let moto = moto::shared();
    let ec2 = moto.ec2();
    let net = moto::network(&ec2);
    ec2.create_route_table(&net.vpc, &[("kubernetes.io/cluster/other", "owned")]);
    let provider = provider_at(moto.url(), AwsConfig::default(), &test_env());
    let err = provider
        .list_routes(CLUSTER, &NodeDirectory::default())
        .expect_err("nothing tagged");
    assert_eq!(err.kind, CloudErrorKind::Invalid);
    assert!(err.message.contains("no route table"), "{}", err.message);
    assert!(
        err.message
            .contains(&format!("kubernetes.io/cluster/{CLUSTER}")),
        "{}",
        err.message
    );
    assert!(
        err.message
            .contains(&format!("KubernetesCluster={CLUSTER}")),
        "{}",
        err.message
    );
    assert!(err.message.contains("route table ID"), "{}", err.message);
}

/// Guards that both tag styles count and that several tagged tables are all managed
/// (upstream refuses more than one).
#[test]
fn tables_with_either_tag_are_all_managed_and_others_are_not() {
    let moto = moto::shared();
    let ec2 = moto.ec2();
    let net = moto::network(&ec2);
    let (key, value) = owned_tag();
    let new_style = ec2.create_route_table(&net.vpc, &[(&key, value)]);
    let legacy = ec2.create_route_table(&net.vpc, &[("KubernetesCluster", CLUSTER)]);
    let _other = ec2.create_route_table(&net.vpc, &[("KubernetesCluster", "other")]);
    let _untagged = ec2.create_route_table(&net.vpc, &[]);
    let provider = provider_at(moto.url(), AwsConfig::default(), &test_env());
    let mut want = vec![new_style, legacy];
    want.sort();
    assert_eq!(provider.route_table_ids(CLUSTER).expect("tables"), want);
    assert_eq!(provider.api_calls().get("DescribeRouteTables"), Some(&1));
}

#[test]
fn source_dest_check_is_disabled_once_per_instance() {
    let moto = moto::shared();
    let ec2 = moto.ec2();
    let net = moto::network(&ec2);
    let (key, value) = owned_tag();
    ec2.create_route_table(&net.vpc, &[(&key, value)]);
    let a = ec2.run_instance(&net.ami, &net.subnet);
    let b = ec2.run_instance(&net.ami, &net.subnet);
    assert!(
        ec2.source_dest_check(&a.id),
        "moto starts with the check on"
    );
    let provider = provider_at(moto.url(), AwsConfig::default(), &test_env());
    provider.route_table_ids(CLUSTER).expect("table");

    // Four routes to a (concurrently, as the worker pool would) and one to b.
    std::thread::scope(|s| {
        for i in 0..4 {
            let (provider, a) = (&provider, &a);
            s.spawn(move || {
                provider
                    .create_route(
                        CLUSTER,
                        "uid-a",
                        &route(&format!("10.244.{}.0/24", 20 + i)),
                        &target("node-a", Some(&a.provider_id())),
                    )
                    .expect("create for a")
            });
        }
    });
    provider
        .create_route(
            CLUSTER,
            "uid-b",
            &route("10.244.30.0/24"),
            &target("node-b", Some(&b.provider_id())),
        )
        .expect("create for b");

    assert!(!ec2.source_dest_check(&a.id));
    assert!(!ec2.source_dest_check(&b.id));
    let calls = provider.api_calls();
    assert_eq!(calls.get("ModifyInstanceAttribute"), Some(&2), "{calls:?}");
    assert_eq!(calls.get("CreateRoute"), Some(&5), "{calls:?}");
}

#[test]
fn route_to_a_terminated_instance_is_a_blackhole_and_does_not_fail_the_list() {
    let (moto, ec2, net, table) = tagged_table();
    let a = ec2.run_instance(&net.ami, &net.subnet);
    let b = ec2.run_instance(&net.ami, &net.subnet);
    ec2.create_route(&table, "10.244.1.0/24", &a.id);
    ec2.create_route(&table, "10.244.2.0/24", &b.id);
    ec2.terminate(&b.id);
    // moto keeps the route active; real AWS would say blackhole.
    assert!(ec2.routes(&table).contains(&(
        "10.244.2.0/24".into(),
        Some(b.id.clone()),
        "active".into()
    )));
    let provider = provider_at(moto.url(), AwsConfig::default(), &test_env());
    // Node b is gone from the cluster too.
    let nodes = NodeDirectory::new([("node-a", Some(a.provider_id().as_str()))]);

    let listed = provider
        .list_routes(CLUSTER, &nodes)
        .expect("the list succeeds");
    assert_eq!(
        summary(&listed),
        vec![
            ("10.244.1.0/24".into(), "node-a".into(), false),
            ("10.244.2.0/24".into(), "".into(), true),
        ]
    );
    assert_eq!(provider.api_calls().get("DescribeInstances"), Some(&1));
    // A gone instance stays gone: the next list does not ask again.
    provider.list_routes(CLUSTER, &nodes).expect("list");
    assert_eq!(provider.api_calls().get("DescribeInstances"), Some(&1));
}

#[test]
fn create_replaces_a_route_to_a_terminated_instance() {
    let (moto, ec2, net, table) = tagged_table();
    let a = ec2.run_instance(&net.ami, &net.subnet);
    let old = ec2.run_instance(&net.ami, &net.subnet);
    ec2.create_route(&table, "10.244.2.0/24", &old.id);
    ec2.terminate(&old.id);
    let provider = provider_at(moto.url(), AwsConfig::default(), &test_env());
    let nodes = NodeDirectory::new([("node-a", Some(a.provider_id().as_str()))]);
    provider
        .list_routes(CLUSTER, &nodes)
        .expect("list learns the instance is gone");

    provider
        .create_route(
            CLUSTER,
            "uid-a",
            &route("10.244.2.0/24"),
            &target("node-a", Some(&a.provider_id())),
        )
        .expect("the dead route is replaced");
    assert!(ec2.routes(&table).contains(&(
        "10.244.2.0/24".into(),
        Some(a.id.clone()),
        "active".into()
    )));
    let calls = provider.api_calls();
    assert_eq!(calls.get("ReplaceRoute"), Some(&1), "{calls:?}");
}

#[test]
fn existing_route_to_the_same_instance_counts_as_created_and_to_another_is_already_exists() {
    let (moto, ec2, net, table) = tagged_table();
    let a = ec2.run_instance(&net.ami, &net.subnet);
    let b = ec2.run_instance(&net.ami, &net.subnet);
    ec2.create_route(&table, "10.244.1.0/24", &a.id);
    let provider = provider_at(moto.url(), AwsConfig::default(), &test_env());

    provider
        .create_route(
            CLUSTER,
            "uid-a",
            &route("10.244.1.0/24"),
            &target("node-a", Some(&a.provider_id())),
        )
        .expect("identical route counts as created");
    let err = provider
        .create_route(
            CLUSTER,
            "uid-b",
            &route("10.244.1.0/24"),
            &target("node-b", Some(&b.provider_id())),
        )
        .expect_err("the destination belongs to a");
    assert_eq!(err.kind, CloudErrorKind::AlreadyExists);
    assert!(
        err.message.contains(&a.id) && err.message.contains(&b.id),
        "{}",
        err.message
    );
    // Nothing was replaced.
    assert!(ec2.routes(&table).contains(&(
        "10.244.1.0/24".into(),
        Some(a.id.clone()),
        "active".into()
    )));
    assert_eq!(provider.api_calls().get("ReplaceRoute"), None);
}

#[test]
fn node_without_provider_id_is_found_by_its_private_dns_name() {
    let (moto, ec2, net, table) = tagged_table();
    let a = ec2.run_instance(&net.ami, &net.subnet);
    let _b = ec2.run_instance(&net.ami, &net.subnet);
    let provider = provider_at(moto.url(), AwsConfig::default(), &test_env());
    let node = a.private_dns_name.as_str();

    provider
        .create_route(CLUSTER, "uid", &route("10.244.3.0/24"), &target(node, None))
        .expect("create by DNS name");
    assert!(ec2.routes(&table).contains(&(
        "10.244.3.0/24".into(),
        Some(a.id.clone()),
        "active".into()
    )));
    // Listing maps the instance back to that node by its private DNS name.
    let nodes = NodeDirectory::new([(node, None)]);
    assert_eq!(
        summary(&provider.list_routes(CLUSTER, &nodes).expect("list")),
        vec![("10.244.3.0/24".into(), node.to_string(), false)]
    );

    let err = provider
        .create_route(
            CLUSTER,
            "uid",
            &route("10.244.4.0/24"),
            &target("ip-10-9-9-9.ec2.internal", None),
        )
        .expect_err("no such instance");
    assert_eq!(err.kind, CloudErrorKind::Invalid);
    assert!(err.message.contains("providerID"), "{}", err.message);
}

/// Guards the provider's record of its own changes against a list read before they
/// landed (`Changes` in src/cloud/aws/mod.rs). A create succeeds in one table and is
/// throttled in the other while a list is in flight; that list's snapshot has
/// neither route. The retry must go to the second table only: with the snapshot
/// replacing the provider's record (the code before the fix), it sent `CreateRoute`
/// to the first table again and drew `RouteAlreadyExists`, a duplicate create that
/// the chaos run with moto caught (seed 2).
#[test]
fn a_list_read_before_a_partial_create_does_not_make_its_retry_repeat_the_done_table() {
    let (release, gate) = std::sync::mpsc::channel::<()>();
    let gate = std::sync::Mutex::new(gate);
    let throttled_once = std::sync::atomic::AtomicBool::new(false);
    let describes = AtomicU32::new(0);
    let stub = StubServer::start(move |req| match req.action().as_str() {
        "DescribeRouteTables" => {
            // The second list is held until the create has been answered, and then
            // answers what EC2 read when it arrived: no route yet.
            if describes.fetch_add(1, Ordering::SeqCst) == 1 {
                let _ = gate
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .recv_timeout(Duration::from_secs(30));
            }
            Reply::xml(
                200,
                route_tables_xml(&[("rtb-1", &[]), ("rtb-2", &[])], None),
            )
        }
        "ModifyInstanceAttribute" => Reply::xml(200, ok_xml("ModifyInstanceAttribute")),
        "CreateRoute"
            if req.form("RouteTableId").as_deref() == Some("rtb-2")
                && !throttled_once.swap(true, Ordering::SeqCst) =>
        {
            Reply::ec2_error(503, "RequestLimitExceeded", "Request limit exceeded.")
        }
        "CreateRoute" => Reply::xml(200, ok_xml("CreateRoute")),
        other => panic!("unexpected {other}"),
    });
    let provider = Arc::new(provider_at(&stub.url(), AwsConfig::default(), &test_env()));
    let nodes = NodeDirectory::new([("node-a", Some("aws:///us-east-1a/i-0000000a"))]);
    provider
        .list_routes(CLUSTER, &nodes)
        .expect("the first list");

    let held_list = {
        let (provider, nodes) = (provider.clone(), nodes.clone());
        std::thread::spawn(move || provider.list_routes(CLUSTER, &nodes))
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while stub
        .actions()
        .iter()
        .filter(|a| *a == "DescribeRouteTables")
        .count()
        < 2
    {
        assert!(
            Instant::now() < deadline,
            "the second list never reached the stub"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let route_a = route("10.244.1.0/24");
    let target_a = target("node-a", Some("aws:///us-east-1a/i-0000000a"));
    let first = provider.create_route(CLUSTER, "hint", &route_a, &target_a);
    assert!(first.is_err(), "the second table throttled the create");
    release.send(()).expect("release the held list");
    held_list
        .join()
        .expect("list thread")
        .expect("the held list succeeds");

    provider
        .create_route(CLUSTER, "hint", &route_a, &target_a)
        .expect("the retry");
    let creates: Vec<String> = stub
        .requests()
        .iter()
        .filter(|r| r.action() == "CreateRoute")
        .filter_map(|r| r.form("RouteTableId"))
        .collect();
    assert_eq!(creates, vec!["rtb-1", "rtb-2", "rtb-2"]);
}

#[test]
fn route_table_is_found_again_after_the_cached_one_is_deleted() {
    let moto = moto::shared();
    let ec2 = moto.ec2();
    let net = moto::network(&ec2);
    let (key, value) = owned_tag();
    let first = ec2.create_route_table(&net.vpc, &[(&key, value)]);
    let a = ec2.run_instance(&net.ami, &net.subnet);
    let provider = provider_at(moto.url(), AwsConfig::default(), &test_env());
    assert_eq!(
        provider.route_table_ids(CLUSTER).expect("first"),
        vec![first.clone()]
    );

    ec2.delete_route_table(&first);
    let second = ec2.create_route_table(&net.vpc, &[(&key, value)]);
    provider
        .create_route(
            CLUSTER,
            "uid",
            &route("10.244.5.0/24"),
            &target("a", Some(&a.provider_id())),
        )
        .expect("create after rediscovery");
    assert_eq!(
        provider.route_table_ids(CLUSTER).expect("second"),
        vec![second.clone()]
    );
    assert!(
        ec2.routes(&second)
            .iter()
            .any(|(d, _, _)| d == "10.244.5.0/24")
    );
}

// --- signature checking ---------------------------------------------------------------

/// Exactly the actions the README's IAM policy grants.
const README_POLICY_ACTIONS: &[&str] = &[
    "ec2:DescribeRouteTables",
    "ec2:DescribeInstances",
    "ec2:CreateRoute",
    "ec2:ReplaceRoute",
    "ec2:DeleteRoute",
    "ec2:ModifyInstanceAttribute",
    "ec2:ModifyNetworkInterfaceAttribute",
    "ec2:DescribeSubnets",
    "ec2:DescribeManagedPrefixLists",
];

/// What the README's policy marks optional: the account's route-table quota.
const README_OPTIONAL_ACTION: &str = "servicequotas:GetServiceQuota";

struct AuthMoto {
    moto: moto::Moto,
    /// ec2:* for test setup.
    admin: (String, String),
    /// The README policy.
    controller: (String, String),
    /// The README policy without ec2:CreateRoute.
    no_create: (String, String),
    /// The README policy with its optional servicequotas:GetServiceQuota.
    with_quotas: (String, String),
}

/// One server with signature checking for all tests of this section; each test works
/// in its own region, so they need no reset (which would also drop the IAM users).
fn auth_moto() -> &'static AuthMoto {
    static SERVER: std::sync::OnceLock<AuthMoto> = std::sync::OnceLock::new();
    SERVER.get_or_init(|| {
        // Three IAM actions per user run before the checks start.
        let moto = moto::Moto::start_with_auth(12);
        let admin = moto::create_iam_user(&moto, "admin", &moto::allow_policy(&["ec2:*"]));
        let controller = moto::create_iam_user(
            &moto,
            "route-controller",
            &moto::allow_policy(README_POLICY_ACTIONS),
        );
        let without: Vec<&str> = README_POLICY_ACTIONS
            .iter()
            .copied()
            .filter(|a| *a != "ec2:CreateRoute")
            .collect();
        let no_create = moto::create_iam_user(&moto, "no-create", &moto::allow_policy(&without));
        let mut optional = README_POLICY_ACTIONS.to_vec();
        optional.push(README_OPTIONAL_ACTION);
        let with_quotas =
            moto::create_iam_user(&moto, "with-quotas", &moto::allow_policy(&optional));
        AuthMoto {
            moto,
            admin,
            controller,
            no_create,
            with_quotas,
        }
    })
}

fn env_with_keys((key_id, secret): &(String, String)) -> AwsEnv {
    AwsEnv::new()
        .with_var("AWS_ACCESS_KEY_ID", key_id)
        .with_var("AWS_SECRET_ACCESS_KEY", secret)
        .with_var("AWS_EC2_METADATA_DISABLED", "true")
}

fn auth_provider(server: &AuthMoto, keys: &(String, String), region: &str) -> AwsProvider {
    AwsProvider::new(
        AwsConfig {
            region: Some(region.into()),
            endpoint: Some(server.moto.url().into()),
            service_quotas_endpoint: Some(server.moto.url().into()),
            ..AwsConfig::default()
        },
        &env_with_keys(keys),
    )
    .expect("provider")
}

#[test]
fn signed_requests_pass_moto_signature_checks_with_the_readme_iam_policy() {
    let server = auth_moto();
    let region = "eu-west-1";
    let ec2 = server.moto.ec2_as(&server.admin.0, &server.admin.1, region);
    let vpc = ec2.create_vpc("10.1.0.0/16");
    let subnet = ec2.create_subnet(&vpc, "10.1.1.0/24", "eu-west-1a");
    let ami = ec2.any_ami();
    let (key, value) = owned_tag();
    let table = ec2.create_route_table(&vpc, &[(&key, value)]);
    let a = ec2.run_instance(&ami, &subnet);
    let provider = auth_provider(server, &server.controller, region);
    let nodes = NodeDirectory::new([("node-a", Some(a.provider_id().as_str()))]);

    provider
        .create_route(
            CLUSTER,
            "uid",
            &route("10.244.1.0/24"),
            &target("node-a", Some(&a.provider_id())),
        )
        .expect("create under the README policy");
    assert_eq!(
        summary(&provider.list_routes(CLUSTER, &nodes).expect("list")),
        vec![("10.244.1.0/24".into(), "node-a".into(), false)]
    );
    provider
        .delete_route(CLUSTER, &route("10.244.1.0/24"))
        .expect("delete");
    assert!(
        ec2.routes(&table)
            .iter()
            .all(|(d, _, _)| d != "10.244.1.0/24")
    );
}

/// Guards the README's optional permission under moto's IAM checks: the README policy
/// alone may not read the quota, so the limit is AWS's default of 500 and the list
/// succeeds; with servicequotas:GetServiceQuota the account's value (moto's 50) is
/// read.
#[test]
fn the_quota_is_read_only_with_the_optional_permission_and_the_list_works_either_way() {
    let server = auth_moto();
    let region = "ca-central-1";
    let ec2 = server.moto.ec2_as(&server.admin.0, &server.admin.1, region);
    let vpc = ec2.create_vpc("10.3.0.0/16");
    let (key, value) = owned_tag();
    ec2.create_route_table(&vpc, &[(&key, value)]);
    for (keys, limit) in [(&server.controller, 500), (&server.with_quotas, 50)] {
        let provider = auth_provider(server, keys, region);
        provider
            .list_routes(CLUSTER, &NodeDirectory::default())
            .expect("list");
        let tables = provider.route_tables();
        assert_eq!(tables.len(), 1, "{tables:?}");
        assert_eq!(tables[0].limit, limit, "{}", keys.0);
        assert_eq!(provider.api_calls().get("GetServiceQuota"), Some(&1));
    }
}

#[test]
fn wrong_secret_is_rejected_as_auth_failure_and_reported_as_invalid() {
    let server = auth_moto();
    let wrong = (server.admin.0.clone(), "not-the-secret".to_string());
    let provider = auth_provider(server, &wrong, "ap-south-1");
    let err = provider
        .list_routes(CLUSTER, &NodeDirectory::default())
        .expect_err("bad signature");
    assert_eq!(err.kind, CloudErrorKind::Invalid, "{}", err.message);
    assert!(err.message.contains("AuthFailure"), "{}", err.message);
    assert!(
        err.message.contains("DescribeRouteTables"),
        "{}",
        err.message
    );
    assert!(!err.message.contains("not-the-secret"), "{}", err.message);
}

#[test]
fn missing_iam_permission_is_invalid_and_names_the_action_to_allow() {
    let server = auth_moto();
    let region = "eu-central-1";
    let ec2 = server.moto.ec2_as(&server.admin.0, &server.admin.1, region);
    let vpc = ec2.create_vpc("10.2.0.0/16");
    let subnet = ec2.create_subnet(&vpc, "10.2.1.0/24", "eu-central-1a");
    let ami = ec2.any_ami();
    let (key, value) = owned_tag();
    ec2.create_route_table(&vpc, &[(&key, value)]);
    let a = ec2.run_instance(&ami, &subnet);
    let provider = auth_provider(server, &server.no_create, region);

    let err = provider
        .create_route(
            CLUSTER,
            "uid",
            &route("10.244.1.0/24"),
            &target("node-a", Some(&a.provider_id())),
        )
        .expect_err("not allowed");
    assert_eq!(err.kind, CloudErrorKind::Invalid, "{}", err.message);
    assert!(err.message.contains("ec2:CreateRoute"), "{}", err.message);
}

// --- what moto never produces: scripted EC2 replies --------------------------------------

const NS: &str = "http://ec2.amazonaws.com/doc/2016-11-15/";

/// A route as `(destination, instance, other target, state)`.
type FixtureRoute<'a> = (&'a str, Option<&'a str>, Option<&'a str>, &'a str);

fn route_tables_xml(tables: &[(&str, &[FixtureRoute])], next: Option<&str>) -> String {
    let mut xml = format!(
        "<DescribeRouteTablesResponse xmlns=\"{NS}\"><requestId>stub-rt</requestId><routeTableSet>"
    );
    for (id, routes) in tables {
        xml.push_str(&format!(
            "<item><routeTableId>{id}</routeTableId><vpcId>vpc-stub</vpcId><routeSet>"
        ));
        for (dest, instance, other, state) in routes.iter() {
            let dest_tag = if dest.contains(':') {
                "destinationIpv6CidrBlock"
            } else {
                "destinationCidrBlock"
            };
            xml.push_str(&format!("<item><{dest_tag}>{dest}</{dest_tag}>"));
            if let Some(i) = instance {
                xml.push_str(&format!(
                    "<instanceId>{i}</instanceId><instanceOwnerId>123456789012</instanceOwnerId>"
                ));
            }
            if let Some(o) = other {
                let tag = if o.starts_with("eni-") {
                    "networkInterfaceId"
                } else {
                    "gatewayId"
                };
                xml.push_str(&format!("<{tag}>{o}</{tag}>"));
            }
            xml.push_str(&format!(
                "<origin>CreateRoute</origin><state>{state}</state></item>"
            ));
        }
        // Tagged for the cluster, as the server-side tag filter would have chosen it.
        xml.push_str(&format!(
            "</routeSet><tagSet><item><key>kubernetes.io/cluster/{CLUSTER}</key>\
             <value>owned</value></item></tagSet></item>"
        ));
    }
    xml.push_str("</routeTableSet>");
    if let Some(n) = next {
        xml.push_str(&format!("<nextToken>{n}</nextToken>"));
    }
    xml.push_str("</DescribeRouteTablesResponse>");
    xml
}

fn instances_xml(instances: &[(&str, &str, &str)]) -> String {
    let mut xml = format!(
        "<DescribeInstancesResponse xmlns=\"{NS}\"><requestId>stub-i</requestId><reservationSet>"
    );
    for (id, dns, state) in instances {
        xml.push_str(&format!(
            "<item><reservationId>r-1</reservationId><instancesSet><item><instanceId>{id}</instanceId>\
             <privateDnsName>{dns}</privateDnsName><instanceState><code>16</code><name>{state}</name>\
             </instanceState></item></instancesSet></item>"
        ));
    }
    xml.push_str("</reservationSet></DescribeInstancesResponse>");
    xml
}

fn ok_xml(action: &str) -> String {
    format!(
        "<{action}Response xmlns=\"{NS}\"><requestId>stub-ok</requestId><return>true</return></{action}Response>"
    )
}

/// The `InstanceId.N` values of a request.
fn instance_ids(req: &Request) -> Vec<String> {
    (1..)
        .map_while(|n| req.form(&format!("InstanceId.{n}")))
        .collect()
}

fn is_tag_key_query(req: &Request) -> bool {
    req.form("Filter.1.Name").as_deref() == Some("tag-key")
}

#[test]
fn blackholes_and_routes_to_vanished_instances_are_blackholes_and_the_list_succeeds() {
    let stub = StubServer::start(|req| match req.action().as_str() {
        "DescribeRouteTables" if is_tag_key_query(req) => Reply::xml(
            200,
            route_tables_xml(
                &[(
                    "rtb-0stub",
                    &[
                        ("10.0.0.0/16", None, Some("local"), "active"),
                        ("10.244.1.0/24", Some("i-0000000a"), None, "active"),
                        ("10.244.2.0/24", None, Some("eni-0dead"), "blackhole"),
                        (
                            "10.244.3.0/24",
                            Some("i-0000000b"),
                            Some("eni-0b"),
                            "blackhole",
                        ),
                        ("10.244.4.0/24", Some("i-0000000c"), None, "active"),
                        ("10.244.5.0/24", Some("i-0000000d"), None, "active"),
                        ("10.244.6.0/24", Some("i-0000000e"), None, "active"),
                        ("2001:db8::/64", Some("i-0000000a"), None, "active"),
                    ],
                )],
                None,
            ),
        ),
        "DescribeRouteTables" => Reply::xml(200, route_tables_xml(&[], None)),
        "DescribeInstances" => {
            let ids = instance_ids(req);
            if ids.iter().any(|i| i == "i-0000000c") {
                return Reply::ec2_error(
                    400,
                    "InvalidInstanceID.NotFound",
                    "The instance ID 'i-0000000c' does not exist",
                );
            }
            let known = [
                ("i-0000000d", "ip-10-0-1-5.ec2.internal", "running"),
                ("i-0000000e", "ip-10-0-1-6.ec2.internal", "terminated"),
            ];
            let found: Vec<_> = known
                .into_iter()
                .filter(|(id, _, _)| ids.iter().any(|i| i == id))
                .collect();
            Reply::xml(200, instances_xml(&found))
        }
        other => Reply::ec2_error(400, "InvalidAction", &format!("unexpected {other}")),
    });
    let provider = provider_at(&stub.url(), AwsConfig::default(), &test_env());
    let nodes = NodeDirectory::new([
        ("node-a", Some("aws:///us-east-1a/i-0000000a")),
        ("ip-10-0-1-5.ec2.internal", None),
    ]);

    let listed = provider
        .list_routes(CLUSTER, &nodes)
        .expect("the list succeeds");
    assert_eq!(
        summary(&listed),
        vec![
            ("10.244.1.0/24".into(), "node-a".into(), false),
            ("10.244.2.0/24".into(), "".into(), true),
            ("10.244.3.0/24".into(), "".into(), true),
            ("10.244.4.0/24".into(), "".into(), true),
            (
                "10.244.5.0/24".into(),
                "ip-10-0-1-5.ec2.internal".into(),
                false
            ),
            ("10.244.6.0/24".into(), "".into(), true),
            // An IPv6 route to a node is the node's (upstream skipped it).
            ("2001:db8::/64".into(), "node-a".into(), false),
        ]
    );
    // Blackholes and known nodes are never looked up; the batch that EC2 refused is
    // split until the missing instance is isolated: [c d e] -> [c] + [d e].
    let lookups: Vec<Vec<String>> = stub
        .requests()
        .iter()
        .filter(|r| r.action() == "DescribeInstances")
        .map(instance_ids)
        .collect();
    assert_eq!(
        lookups,
        vec![
            vec![
                "i-0000000c".to_string(),
                "i-0000000d".into(),
                "i-0000000e".into()
            ],
            vec!["i-0000000c".to_string()],
            vec!["i-0000000d".to_string(), "i-0000000e".into()],
        ]
    );
}

#[test]
fn route_table_pages_are_followed_with_next_token() {
    let stub = StubServer::start(|req| {
        let token = req.form("NextToken");
        match (req.action().as_str(), token.as_deref()) {
            ("DescribeRouteTables", None) if is_tag_key_query(req) => {
                Reply::xml(200, route_tables_xml(&[], Some("page-2")))
            }
            ("DescribeRouteTables", Some("page-2")) if is_tag_key_query(req) => Reply::xml(
                200,
                route_tables_xml(
                    &[(
                        "rtb-0paged",
                        &[("10.244.9.0/24", Some("i-0000000a"), None, "active")],
                    )],
                    None,
                ),
            ),
            ("DescribeRouteTables", None) => Reply::xml(200, route_tables_xml(&[], None)),
            _ => Reply::ec2_error(400, "InvalidParameterValue", "unexpected request"),
        }
    });
    let provider = provider_at(&stub.url(), AwsConfig::default(), &test_env());
    let nodes = NodeDirectory::new([("node-a", Some("i-0000000a"))]);
    assert_eq!(
        summary(&provider.list_routes(CLUSTER, &nodes).expect("list")),
        vec![("10.244.9.0/24".into(), "node-a".into(), false)]
    );
    let tokens: Vec<Option<String>> = stub
        .requests()
        .iter()
        .map(|r| r.form("NextToken"))
        .collect();
    // Both tag styles are asked for in one (paged) DescribeRouteTables.
    assert_eq!(tokens, vec![None, Some("page-2".into())]);
}

#[test]
fn throttling_is_rate_limited_for_the_controller_to_hold_back_and_no_worker_waits() {
    let stub = StubServer::start(|_| {
        Reply::ec2_error(503, "RequestLimitExceeded", "Request limit exceeded.")
    });
    let provider = provider_at(
        &stub.url(),
        AwsConfig {
            route_table_ids: vec!["rtb-0stub".into()],
            requests_per_second: 1000.0,
            burst: 1000,
            ..AwsConfig::default()
        },
        &test_env(),
    );
    let (result, usage) =
        Meter::measure(|| provider.delete_route(CLUSTER, &route("10.244.1.0/24")));
    let err = result.expect_err("throttled");
    let CloudErrorKind::RateLimited { after } = err.kind else {
        panic!("expected RateLimited, got {:?}: {}", err.kind, err.message);
    };
    // The first throttle holds back for a jittered [0.5, 1] s.
    assert!(
        (Duration::from_millis(500)..=Duration::from_secs(1)).contains(&after),
        "{after:?}"
    );
    assert!(
        err.message.contains("RequestLimitExceeded") && err.message.contains("DeleteRoute"),
        "{}",
        err.message
    );
    // The reply tells the controller's budget what was sent and seen: one request
    // of DeleteRoute's bucket, and the hold-back of that bucket alone (EC2 throttles
    // each action on its own; see tests/controller_budgets.rs).
    let usage = usage.expect("the provider reports what it spent");
    assert_eq!(usage.requests, 1);
    assert_eq!(usage.by_bucket, vec![("DeleteRoute", 1)]);
    assert_eq!(usage.throttled, Some(after));
    assert_eq!(usage.throttled_bucket, Some("DeleteRoute"));
    // No retry behind the controller's back.
    assert_eq!(stub.actions(), vec!["DeleteRoute".to_string()]);
    // Nothing in the provider waits for the hold-back: a call the controller sends
    // anyway goes out at once (a limiter here would sleep at least `after`).
    let start = Instant::now();
    let _ = provider.delete_route(CLUSTER, &route("10.244.1.0/24"));
    assert!(
        start.elapsed() < after,
        "a worker waited {:?}",
        start.elapsed()
    );
    assert_eq!(stub.actions().len(), 2);
}

#[test]
fn timeout_after_sending_create_route_is_ambiguous() {
    let stub = StubServer::start(|req| match req.action().as_str() {
        "ModifyInstanceAttribute" => Reply::xml(200, ok_xml("ModifyInstanceAttribute")),
        "CreateRoute" => Reply::Hang(Duration::from_secs(5)),
        _ => Reply::ec2_error(400, "InvalidAction", "unexpected"),
    });
    let provider = provider_at(
        &stub.url(),
        AwsConfig {
            route_table_ids: vec!["rtb-0stub".into()],
            timeout: Duration::from_millis(400),
            ..AwsConfig::default()
        },
        &test_env(),
    );
    let started = Instant::now();
    let err = provider
        .create_route(
            CLUSTER,
            "uid",
            &route("10.244.1.0/24"),
            &target("a", Some("i-0000000a")),
        )
        .expect_err("timed out");
    assert_eq!(err.kind, CloudErrorKind::Ambiguous, "{}", err.message);
    assert!(err.message.contains("CreateRoute"), "{}", err.message);
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "the timeout did not apply"
    );
}

#[test]
fn timeout_of_a_describe_is_retry_not_ambiguous() {
    let stub = StubServer::start(|_| Reply::Hang(Duration::from_secs(5)));
    let provider = provider_at(
        &stub.url(),
        AwsConfig {
            route_table_ids: vec!["rtb-0stub".into()],
            timeout: Duration::from_millis(300),
            ..AwsConfig::default()
        },
        &test_env(),
    );
    let err = provider
        .list_routes(CLUSTER, &NodeDirectory::default())
        .expect_err("timed out");
    assert_eq!(
        err.kind,
        CloudErrorKind::Retry { after: None },
        "{}",
        err.message
    );
}

#[test]
fn server_errors_are_ambiguous_for_mutations_and_retry_for_describes() {
    // moto answers unimplemented things with an HTML 500; real EC2 with XML.
    for reply in [
        || {
            Reply::text(
                500,
                "<!doctype html><title>500 Internal Server Error</title>",
            )
        },
        || Reply::ec2_error(503, "Unavailable", "The server is overloaded"),
    ] {
        let stub = StubServer::start(move |_| reply());
        let provider = provider_at(
            &stub.url(),
            AwsConfig {
                route_table_ids: vec!["rtb-0stub".into()],
                ..AwsConfig::default()
            },
            &test_env(),
        );
        let delete = provider
            .delete_route(CLUSTER, &route("10.244.1.0/24"))
            .expect_err("5xx");
        assert_eq!(delete.kind, CloudErrorKind::Ambiguous, "{}", delete.message);
        let list = provider
            .list_routes(CLUSTER, &NodeDirectory::default())
            .expect_err("5xx");
        assert_eq!(
            list.kind,
            CloudErrorKind::Retry { after: None },
            "{}",
            list.message
        );
    }
}

#[test]
fn refused_connection_is_retry_even_for_a_mutation() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let provider = provider_at(
        &format!("http://127.0.0.1:{port}"),
        AwsConfig {
            route_table_ids: vec!["rtb-0stub".into()],
            ..AwsConfig::default()
        },
        &test_env(),
    );
    let err = provider
        .delete_route(CLUSTER, &route("10.244.1.0/24"))
        .expect_err("nothing listens");
    assert_eq!(
        err.kind,
        CloudErrorKind::Retry { after: None },
        "{}",
        err.message
    );
    assert!(
        err.message.contains(&format!("127.0.0.1:{port}")),
        "{}",
        err.message
    );
}

// --- credentials ------------------------------------------------------------------------

/// Recomputes the signature of a captured request with `secret` and checks it, and
/// returns the `Credential=` scope it was signed for.
fn verify_signature(req: &Request, secret: &str) -> String {
    let auth = req.header("authorization").expect("signed");
    let field = |name: &str| {
        auth.split(", ")
            .find_map(|p| {
                p.split_once(&format!("{name}="))
                    .map(|(_, v)| v.to_string())
            })
            .unwrap_or_else(|| panic!("{name} missing in {auth}"))
    };
    let credential = field("Credential");
    let signed = field("SignedHeaders");
    let parts: Vec<&str> = credential.split('/').collect();
    let headers: Vec<(&str, &str)> = signed
        .split(';')
        .map(|h| {
            (
                h,
                req.header(h)
                    .unwrap_or_else(|| panic!("signed header {h} not sent")),
            )
        })
        .collect();
    let date = req.header("x-amz-date").expect("x-amz-date");
    let expected = sigv4::sign(
        SigningKey {
            access_key_id: parts[0],
            secret_access_key: secret,
            region: parts[2],
            service: parts[3],
        },
        RequestParts {
            method: &req.method,
            path: &req.path,
            query: &[],
            headers: &headers,
            payload: req.body.as_bytes(),
        },
        date,
    );
    assert_eq!(auth, expected.authorization, "signature does not verify");
    credential
}

fn tagged_table_stub() -> StubServer {
    StubServer::start(|req| match req.action().as_str() {
        "DescribeRouteTables" if is_tag_key_query(req) => {
            Reply::xml(200, route_tables_xml(&[("rtb-0stub", &[])], None))
        }
        "DescribeRouteTables" => Reply::xml(200, route_tables_xml(&[], None)),
        _ => Reply::ec2_error(400, "InvalidAction", "unexpected"),
    })
}

fn temp_home(name: &str) -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("aws-home-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join(".aws")).expect("create temp home");
    std::fs::write(
        dir.join(".aws/credentials"),
        "[default]\naws_access_key_id = AKIDDEFAULT\naws_secret_access_key = default-secret\n\n\
         [dev]\naws_access_key_id=AKIDDEV\naws_secret_access_key=dev-secret\n\
         aws_session_token = dev-session-token\n",
    )
    .expect("write credentials");
    std::fs::write(
        dir.join(".aws/config"),
        "[default]\nregion = us-west-2\n[profile dev]\nregion = eu-north-1\n",
    )
    .expect("write config");
    dir
}

#[test]
fn shared_credentials_file_profile_signs_requests_with_its_session_token() {
    let stub = tagged_table_stub();
    let env = AwsEnv::new()
        .with_home(temp_home("dev"))
        .with_var("AWS_PROFILE", "dev")
        .with_var("AWS_EC2_METADATA_DISABLED", "true");
    let provider = AwsProvider::new(
        AwsConfig {
            endpoint: Some(stub.url()),
            ..AwsConfig::default()
        },
        &env,
    )
    .expect("provider from the dev profile");
    assert_eq!(
        provider.region(),
        "eu-north-1",
        "region from [profile dev] in ~/.aws/config"
    );
    provider
        .list_routes(CLUSTER, &NodeDirectory::default())
        .expect("list");

    let req = &stub.requests()[0];
    let scope = verify_signature(req, "dev-secret");
    assert!(
        scope.starts_with("AKIDDEV/") && scope.ends_with("/eu-north-1/ec2/aws4_request"),
        "{scope}"
    );
    assert_eq!(
        req.header("x-amz-security-token"),
        Some("dev-session-token")
    );
    let auth = req.header("authorization").unwrap_or_default();
    assert!(
        auth.contains("SignedHeaders=content-type;host;x-amz-date;x-amz-security-token"),
        "{auth}"
    );
}

#[test]
fn default_profile_is_used_when_aws_profile_is_unset() {
    let stub = tagged_table_stub();
    let env = AwsEnv::new()
        .with_home(temp_home("default"))
        .with_var("AWS_EC2_METADATA_DISABLED", "true");
    let provider = AwsProvider::new(
        AwsConfig {
            endpoint: Some(stub.url()),
            ..AwsConfig::default()
        },
        &env,
    )
    .expect("provider from the default profile");
    provider
        .list_routes(CLUSTER, &NodeDirectory::default())
        .expect("list");
    let req = &stub.requests()[0];
    let scope = verify_signature(req, "default-secret");
    assert!(
        scope.starts_with("AKIDDEFAULT/") && scope.contains("/us-west-2/"),
        "{scope}"
    );
    assert_eq!(req.header("x-amz-security-token"), None);
}

#[test]
fn environment_variables_win_over_the_shared_file_and_carry_the_session_token() {
    let stub = tagged_table_stub();
    let env = AwsEnv::new()
        .with_home(temp_home("env"))
        .with_var("AWS_ACCESS_KEY_ID", "AKIDFROMENV")
        .with_var("AWS_SECRET_ACCESS_KEY", "env-secret")
        .with_var("AWS_SESSION_TOKEN", "env-token")
        .with_var("AWS_REGION", "ap-southeast-2")
        .with_var("AWS_ENDPOINT_URL_EC2", &stub.url())
        .with_var("AWS_EC2_METADATA_DISABLED", "true");
    let provider = AwsProvider::new(AwsConfig::default(), &env).expect("provider");
    assert_eq!(provider.endpoint(), format!("{}/", stub.url()));
    provider
        .list_routes(CLUSTER, &NodeDirectory::default())
        .expect("list");
    let req = &stub.requests()[0];
    let scope = verify_signature(req, "env-secret");
    assert!(
        scope.starts_with("AKIDFROMENV/") && scope.contains("/ap-southeast-2/"),
        "{scope}"
    );
    assert_eq!(req.header("x-amz-security-token"), Some("env-token"));
}

/// An IMDSv2 emulator: a session token from PUT, required on every GET; role
/// credentials that expire an hour after each fetch's slot.
fn imds_stub(fetches: Arc<AtomicU32>) -> StubServer {
    StubServer::start(move |req| {
        const TOKEN: &str = "imds-session-token";
        if req.method == "PUT" && req.path == "/latest/api/token" {
            return match req.header("x-aws-ec2-metadata-token-ttl-seconds") {
                Some(_) => Reply::text(200, TOKEN),
                None => Reply::text(400, "missing TTL"),
            };
        }
        if req.method != "GET" || req.header("x-aws-ec2-metadata-token") != Some(TOKEN) {
            return Reply::text(401, "IMDSv2 token required");
        }
        match req.path.as_str() {
            "/latest/meta-data/placement/region" => Reply::text(200, "eu-north-1"),
            "/latest/meta-data/iam/security-credentials/" => Reply::text(200, "node-role\n"),
            "/latest/meta-data/iam/security-credentials/node-role" => {
                let n = fetches.fetch_add(1, Ordering::SeqCst) + 1;
                Reply::text(
                    200,
                    format!(
                        "{{\"Code\":\"Success\",\"LastUpdated\":\"2030-01-01T00:00:00Z\",\"Type\":\"AWS-HMAC\",\
                         \"AccessKeyId\":\"ASIAROLE{n}\",\"SecretAccessKey\":\"role-secret-{n}\",\
                         \"Token\":\"role-token-{n}\",\"Expiration\":\"2030-01-01T0{n}:00:00Z\"}}"
                    ),
                )
            }
            _ => Reply::text(404, "not found"),
        }
    })
}

#[test]
fn instance_role_credentials_come_from_imds_v2_and_are_refreshed_before_expiry() {
    let fetches = Arc::new(AtomicU32::new(0));
    let imds = imds_stub(fetches.clone());
    let ec2 = tagged_table_stub();
    // A virtual wall clock, starting at 2030-01-01T00:00:00Z.
    let clock_secs = Arc::new(AtomicU64::new(1_893_456_000));
    let clock = {
        let secs = clock_secs.clone();
        Arc::new(move || UNIX_EPOCH + Duration::from_secs(secs.load(Ordering::SeqCst)))
            as Arc<dyn Fn() -> SystemTime + Send + Sync>
    };
    let env = AwsEnv::new()
        .with_var("AWS_EC2_METADATA_SERVICE_ENDPOINT", &imds.url())
        .with_var("AWS_ENDPOINT_URL_EC2", &ec2.url())
        .with_clock(clock);
    let provider = AwsProvider::new(AwsConfig::default(), &env).expect("provider on an 'instance'");
    assert_eq!(provider.region(), "eu-north-1", "region from IMDS");
    assert_eq!(
        fetches.load(Ordering::SeqCst),
        1,
        "credentials fetched at start"
    );

    let key_used = |i: usize| {
        let req = &ec2.requests()[i];
        let n = scope_key(req).trim_start_matches("ASIAROLE").to_string();
        let scope = verify_signature(req, &format!("role-secret-{n}"));
        (
            scope.split('/').next().unwrap_or_default().to_string(),
            req.header("x-amz-security-token").map(str::to_string),
        )
    };
    provider
        .list_routes(CLUSTER, &NodeDirectory::default())
        .expect("list 1");
    let n = ec2.requests().len();
    assert_eq!(
        key_used(n - 1),
        ("ASIAROLE1".into(), Some("role-token-1".into()))
    );

    // Ten minutes before expiry: still the same credentials, IMDS not asked.
    clock_secs.fetch_add(50 * 60, Ordering::SeqCst);
    provider
        .list_routes(CLUSTER, &NodeDirectory::default())
        .expect("list 2");
    assert_eq!(fetches.load(Ordering::SeqCst), 1);
    assert_eq!(key_used(ec2.requests().len() - 1).0, "ASIAROLE1");

    // Four minutes before expiry: refreshed before use.
    clock_secs.fetch_add(6 * 60, Ordering::SeqCst);
    provider
        .list_routes(CLUSTER, &NodeDirectory::default())
        .expect("list 3");
    assert_eq!(fetches.load(Ordering::SeqCst), 2);
    assert_eq!(
        key_used(ec2.requests().len() - 1),
        ("ASIAROLE2".into(), Some("role-token-2".into()))
    );

    // One IMDSv2 session token served every metadata request (it lives six hours).
    let puts = imds.requests().iter().filter(|r| r.method == "PUT").count();
    assert_eq!(puts, 1);
    assert!(
        imds.requests()
            .iter()
            .all(|r| r.method == "PUT" || r.header("x-aws-ec2-metadata-token").is_some())
    );
}

/// The access key ID a request was signed with.
fn scope_key(req: &Request) -> String {
    let auth = req.header("authorization").unwrap_or_default();
    auth.split("Credential=")
        .nth(1)
        .and_then(|c| c.split('/').next())
        .unwrap_or_default()
        .to_string()
}

// --- the controller against moto ------------------------------------------------------

/// Drives a [`Controller`] by hand in virtual time, running its cloud operations
/// against a real provider and answering condition writes with success.
struct Drive<'a> {
    controller: Controller,
    provider: &'a AwsProvider,
    metrics: Arc<Metrics>,
    now: Instant,
    reports: Vec<PassReport>,
}

impl Drive<'_> {
    fn input(&mut self, input: Input) {
        let commands = self.controller.handle(input, self.now);
        self.run(commands);
        self.settle();
    }

    fn run(&mut self, commands: Vec<Command>) {
        let mut queue = VecDeque::from(commands);
        while let Some(command) = queue.pop_front() {
            let next = match command {
                Command::Cloud { id, op, .. } => {
                    let reply = run_op(self.provider, CLUSTER, &op, &self.metrics);
                    self.controller.handle(Input::Cloud { id, reply }, self.now)
                }
                Command::WriteCondition { node, .. } => self.controller.handle(
                    Input::ConditionWritten {
                        node,
                        result: Ok(()),
                    },
                    self.now,
                ),
                Command::PassFinished(report) => {
                    self.reports.push(report);
                    Vec::new()
                }
                _ => Vec::new(),
            };
            queue.extend(next);
        }
    }

    /// Lets virtual time run to every deadline due within a few seconds (debounce,
    /// retries), not to the 12–24 h resync.
    fn settle(&mut self) {
        for _ in 0..100 {
            match self.controller.next_deadline() {
                Some(at) if at <= self.now + Duration::from_secs(5) => {
                    self.now = self.now.max(at);
                    let commands = self.controller.handle(Input::Tick, self.now);
                    self.run(commands);
                }
                _ => return,
            }
        }
        panic!("the controller kept asking to be woken");
    }
}

fn node(name: &str, uid: &str, provider_id: &str, pod_cidr: &str) -> Node {
    Node {
        name: name.into(),
        uid: uid.into(),
        resource_version: "1".into(),
        provider_id: Some(provider_id.into()),
        pod_cidrs: vec![pod_cidr.into()],
        addresses: vec![NodeAddress::internal_ip("10.0.1.10")],
        network_unavailable: None,
    }
}

#[test]
fn controller_in_watch_mode_creates_routes_in_moto_and_deletes_them_when_a_node_goes() {
    let (moto, ec2, net, table) = tagged_table();
    let a = ec2.run_instance(&net.ami, &net.subnet);
    let b = ec2.run_instance(&net.ami, &net.subnet);
    // A foreign route outside the cluster CIDR must survive everything below.
    ec2.create_route(&table, "192.168.0.0/24", &a.id);
    let provider = provider_at(moto.url(), AwsConfig::default(), &test_env());
    let metrics = Arc::new(Metrics::new());
    let mut config = Config::new(vec![Cidr::parse("10.244.0.0/16").expect("cidr")]);
    config.cluster_name = CLUSTER.into();
    config.seed = Some(7);
    let mut drive = Drive {
        controller: Controller::new(config, metrics.clone()),
        provider: &provider,
        metrics,
        now: Instant::now(),
        reports: Vec::new(),
    };
    let node_a = node("node-a", "uid-a", &a.provider_id(), "10.244.1.0/24");
    let node_b = node("node-b", "uid-b", &b.provider_id(), "10.244.2.0/24");

    drive.input(Input::Node(NodeEvent::Init));
    drive.input(Input::Node(NodeEvent::InitApply(node_a.clone())));
    drive.input(Input::Node(NodeEvent::InitApply(node_b.clone())));
    drive.input(Input::Node(NodeEvent::InitDone));
    let routes = ec2.routes(&table);
    assert!(
        routes.contains(&("10.244.1.0/24".into(), Some(a.id.clone()), "active".into())),
        "{routes:?}"
    );
    assert!(
        routes.contains(&("10.244.2.0/24".into(), Some(b.id.clone()), "active".into())),
        "{routes:?}"
    );
    let startup = drive.reports.last().expect("a pass ran").clone();
    assert_eq!((startup.created, startup.deleted), (2, 0), "{startup}");

    // A node joins: one route, no list (the view is fresh).
    let c = ec2.run_instance(&net.ami, &net.subnet);
    drive.now += Duration::from_secs(10);
    let before = provider.api_calls();
    drive.input(Input::Node(NodeEvent::Added(node(
        "node-c",
        "uid-c",
        &c.provider_id(),
        "10.244.3.0/24",
    ))));
    assert!(ec2.routes(&table).contains(&(
        "10.244.3.0/24".into(),
        Some(c.id.clone()),
        "active".into()
    )));
    let added = calls_delta(&before, &provider.api_calls());

    // A node leaves: its route goes, with one DeleteRoute and nothing else.
    drive.now += Duration::from_secs(10);
    let before = provider.api_calls();
    drive.input(Input::Node(NodeEvent::Deleted(node_b)));
    let deleted = calls_delta(&before, &provider.api_calls());
    let routes = ec2.routes(&table);
    assert!(
        routes.iter().all(|(d, _, _)| d != "10.244.2.0/24"),
        "{routes:?}"
    );
    assert!(
        routes.iter().any(|(d, _, _)| d == "10.244.1.0/24"),
        "{routes:?}"
    );
    assert!(
        routes.iter().any(|(d, _, _)| d == "192.168.0.0/24"),
        "foreign route deleted: {routes:?}"
    );
    let last = drive.reports.last().expect("a pass ran");
    assert_eq!(
        (last.created, last.deleted, last.failed),
        (0, 1, 0),
        "{last}"
    );

    let m = |pairs: &[(&'static str, u64)]| pairs.iter().copied().collect::<BTreeMap<_, _>>();
    assert_eq!(
        added,
        m(&[
            ("CreateRoute", 1),
            ("DescribeInstances", 1),
            ("ModifyInstanceAttribute", 1)
        ])
    );
    assert_eq!(deleted, m(&[("DeleteRoute", 1)]));
    eprintln!("[aws] controller: node added {added:?}; node deleted {deleted:?}");
}

// --- several route tables ---------------------------------------------------------------

/// A VPC with one subnet and one route table tagged for the cluster in each of three
/// zones (one with the legacy tag), and one instance per subnet.
struct ThreeZones {
    ec2: moto::Ec2,
    net: moto::Network,
    tables: Vec<String>,
    instances: Vec<moto::TestInstance>,
}

fn three_zones(ec2: moto::Ec2) -> ThreeZones {
    let net = moto::network(&ec2);
    let (key, value) = owned_tag();
    let subnets = [
        net.subnet.clone(),
        ec2.create_subnet(&net.vpc, "10.0.2.0/24", "us-east-1b"),
        ec2.create_subnet(&net.vpc, "10.0.3.0/24", "us-east-1c"),
    ];
    let mut tables = vec![
        ec2.create_route_table(&net.vpc, &[(&key, value)]),
        ec2.create_route_table(&net.vpc, &[(&key, "shared")]),
        ec2.create_route_table(&net.vpc, &[("KubernetesCluster", CLUSTER)]),
    ];
    tables.sort();
    let instances = subnets
        .iter()
        .map(|s| ec2.run_instance(&net.ami, s))
        .collect();
    ThreeZones {
        ec2,
        net,
        tables,
        instances,
    }
}

fn has_route(ec2: &moto::Ec2, table: &str, destination: &str, instance: &str) -> bool {
    ec2.routes(table)
        .iter()
        .any(|(d, i, _)| d == destination && i.as_deref() == Some(instance))
}

fn has_destination(ec2: &moto::Ec2, table: &str, destination: &str) -> bool {
    ec2.routes(table).iter().any(|(d, _, _)| d == destination)
}

/// Guards the deliverable: every table gets the route of every node, a node change
/// costs one call per table and nothing else, a list one DescribeRouteTables.
#[test]
fn controller_puts_every_node_route_in_each_of_three_zone_tables_with_one_call_per_table() {
    let moto = moto::shared();
    let z = three_zones(moto.ec2());
    let provider = provider_at(moto.url(), AwsConfig::default(), &test_env());
    let metrics = Arc::new(Metrics::new());
    let mut config = Config::new(vec![Cidr::parse("10.244.0.0/16").expect("cidr")]);
    config.cluster_name = CLUSTER.into();
    config.seed = Some(7);
    let mut drive = Drive {
        controller: Controller::new(config, metrics.clone()),
        provider: &provider,
        metrics,
        now: Instant::now(),
        reports: Vec::new(),
    };
    let [a, b, c] = [0, 1, 2].map(|i| &z.instances[i]);
    let node_a = node("node-a", "uid-a", &a.provider_id(), "10.244.1.0/24");
    let node_b = node("node-b", "uid-b", &b.provider_id(), "10.244.2.0/24");

    let before = provider.api_calls();
    drive.input(Input::Node(NodeEvent::Init));
    drive.input(Input::Node(NodeEvent::InitApply(node_a)));
    drive.input(Input::Node(NodeEvent::InitApply(node_b.clone())));
    drive.input(Input::Node(NodeEvent::InitDone));
    let startup = calls_delta(&before, &provider.api_calls());
    for table in &z.tables {
        assert!(has_route(&z.ec2, table, "10.244.1.0/24", &a.id), "{table}");
        assert!(has_route(&z.ec2, table, "10.244.2.0/24", &b.id), "{table}");
    }
    let report = drive.reports.last().expect("a pass ran");
    assert_eq!((report.created, report.failed), (2, 0), "{report}");

    drive.now += Duration::from_secs(10);
    let before = provider.api_calls();
    drive.input(Input::Node(NodeEvent::Added(node(
        "node-c",
        "uid-c",
        &c.provider_id(),
        "10.244.3.0/24",
    ))));
    let added = calls_delta(&before, &provider.api_calls());
    for table in &z.tables {
        assert!(has_route(&z.ec2, table, "10.244.3.0/24", &c.id), "{table}");
    }

    drive.now += Duration::from_secs(10);
    let before = provider.api_calls();
    drive.input(Input::Node(NodeEvent::Deleted(node_b)));
    let deleted = calls_delta(&before, &provider.api_calls());
    for table in &z.tables {
        assert!(!has_destination(&z.ec2, table, "10.244.2.0/24"), "{table}");
        assert!(has_route(&z.ec2, table, "10.244.1.0/24", &a.id), "{table}");
    }

    let before = provider.api_calls();
    let nodes = NodeDirectory::new([
        ("node-a", Some(a.provider_id().as_str())),
        ("node-c", Some(c.provider_id().as_str())),
    ]);
    let listed = provider.list_routes(CLUSTER, &nodes).expect("list");
    let list = calls_delta(&before, &provider.api_calls());
    assert_eq!(
        summary(&listed),
        vec![
            ("10.244.1.0/24".into(), "node-a".into(), false),
            ("10.244.3.0/24".into(), "node-c".into(), false),
        ]
    );

    let m = |pairs: &[(&'static str, u64)]| pairs.iter().copied().collect::<BTreeMap<_, _>>();
    assert_eq!(
        startup,
        m(&[
            ("CreateRoute", 6),
            ("DescribeInstances", 2),
            ("DescribeRouteTables", 1),
            ("ModifyInstanceAttribute", 2)
        ])
    );
    assert_eq!(
        added,
        m(&[
            ("CreateRoute", 3),
            ("DescribeInstances", 1),
            ("ModifyInstanceAttribute", 1)
        ])
    );
    assert_eq!(deleted, m(&[("DeleteRoute", 3)]));
    assert_eq!(list, m(&[("DescribeRouteTables", 1)]));
    eprintln!(
        "[aws] 3 tables: startup with 2 nodes {startup:?}; node added {added:?}; node deleted \
         {deleted:?}; list {list:?}"
    );
}

/// Guards review finding 1 of aws6: a stale route is deleted only from the tables
/// where it is the controller's kind (a blackhole, a route to an instance); a table
/// where the same destination goes to an internet gateway (another writer's route) is
/// never sent a `DeleteRoute`, neither with the stale route nor once it is gone. Seen
/// failing with `delete_route` back to every table holding the destination: the
/// gateway route was deleted.
#[test]
fn a_stale_route_is_deleted_where_it_is_ours_and_another_writers_gateway_route_is_kept() {
    let moto = moto::shared();
    let z = three_zones(moto.ec2());
    let gone = z.ec2.run_instance(&z.net.ami, &z.net.subnet);
    z.ec2.create_route(&z.tables[0], "10.244.9.0/24", &gone.id);
    z.ec2.terminate(&gone.id);
    let igw = z
        .ec2
        .call("CreateInternetGateway", Params::new())
        .child("internetGateway")
        .and_then(|g| g.text_of("internetGatewayId"))
        .expect("internet gateway")
        .to_string();
    z.ec2.call(
        "AttachInternetGateway",
        Params::new()
            .add("InternetGatewayId", &igw)
            .add("VpcId", &z.net.vpc),
    );
    z.ec2.call(
        "CreateRoute",
        Params::new()
            .add("RouteTableId", &z.tables[1])
            .add("DestinationCidrBlock", "10.244.9.0/24")
            .add("GatewayId", &igw),
    );
    let provider = provider_at(moto.url(), AwsConfig::default(), &test_env());
    let nodes = NodeDirectory::new([("node-a", Some(z.instances[0].provider_id().as_str()))]);
    let listed = provider.list_routes(CLUSTER, &nodes).expect("list");
    let stale = listed
        .iter()
        .find(|r| r.destination_cidr == "10.244.9.0/24" && r.blackhole)
        .expect("the dead route is reported as a blackhole")
        .clone();

    let before = provider.api_calls();
    provider.delete_route(CLUSTER, &stale).expect("delete");
    let gateway_route = |ec2: &moto::Ec2| {
        ec2.routes(&z.tables[1])
            .iter()
            .any(|(d, _, _)| d == "10.244.9.0/24")
    };
    assert!(!has_destination(&z.ec2, &z.tables[0], "10.244.9.0/24"));
    assert!(gateway_route(&z.ec2), "{:?}", z.ec2.routes(&z.tables[1]));
    let m = |pairs: &[(&'static str, u64)]| pairs.iter().copied().collect::<BTreeMap<_, _>>();
    assert_eq!(
        calls_delta(&before, &provider.api_calls()),
        m(&[("DeleteRoute", 1)])
    );

    // Asked again (the controller's view may be stale): no table holds it as ours,
    // so it is tried in the two tables without a route to it (this provider's view
    // may be stale too), never in the gateway's.
    let before = provider.api_calls();
    let err = provider
        .delete_route(CLUSTER, &stale)
        .expect_err("nothing of ours to delete");
    assert_eq!(err.kind, CloudErrorKind::NotFound, "{}", err.message);
    assert!(gateway_route(&z.ec2), "{:?}", z.ec2.routes(&z.tables[1]));
    assert_eq!(
        calls_delta(&before, &provider.api_calls()).get("DeleteRoute"),
        Some(&2)
    );
}

/// Guards the merge: a route to a node missing from one table is reported missing and
/// the create fills only that table; a stale route in one table only is reported so
/// that it is deleted there, and the other tables are not called.
#[test]
fn a_route_in_some_tables_only_is_filled_where_missing_and_a_stale_one_is_deleted_where_present() {
    let moto = moto::shared();
    let z = three_zones(moto.ec2());
    let a = &z.instances[0];
    let gone = z.ec2.run_instance(&z.net.ami, &z.net.subnet);
    z.ec2.create_route(&z.tables[0], "10.244.1.0/24", &a.id);
    z.ec2.create_route(&z.tables[1], "10.244.1.0/24", &a.id);
    z.ec2.create_route(&z.tables[2], "10.244.9.0/24", &gone.id);
    z.ec2.terminate(&gone.id);
    let provider = provider_at(moto.url(), AwsConfig::default(), &test_env());
    let nodes = NodeDirectory::new([("node-a", Some(a.provider_id().as_str()))]);

    let listed = provider.list_routes(CLUSTER, &nodes).expect("list");
    assert_eq!(
        summary(&listed),
        vec![("10.244.9.0/24".into(), "".into(), true)],
        "a's route is not in every table, so it is missing; the dead one is a blackhole"
    );

    let before = provider.api_calls();
    provider
        .create_route(
            CLUSTER,
            "uid-a",
            &route("10.244.1.0/24"),
            &target("node-a", Some(&a.provider_id())),
        )
        .expect("create fills the gap");
    let create = calls_delta(&before, &provider.api_calls());
    let stale = listed.first().expect("the stale route");
    let before = provider.api_calls();
    provider.delete_route(CLUSTER, stale).expect("delete");
    let delete = calls_delta(&before, &provider.api_calls());

    for table in &z.tables {
        assert!(has_route(&z.ec2, table, "10.244.1.0/24", &a.id), "{table}");
        assert!(!has_destination(&z.ec2, table, "10.244.9.0/24"), "{table}");
    }
    assert_eq!(
        summary(&provider.list_routes(CLUSTER, &nodes).expect("list")),
        vec![("10.244.1.0/24".into(), "node-a".into(), false)]
    );
    let m = |pairs: &[(&'static str, u64)]| pairs.iter().copied().collect::<BTreeMap<_, _>>();
    assert_eq!(
        create,
        m(&[
            ("CreateRoute", 1),
            ("DescribeInstances", 1),
            ("ModifyInstanceAttribute", 1)
        ])
    );
    assert_eq!(delete, m(&[("DeleteRoute", 1)]));
}

/// Guards that a table deleted or untagged while running is dropped (the others still
/// get their routes) and a newly tagged one is picked up by the next list and filled.
#[test]
fn a_table_that_disappears_is_dropped_and_a_new_one_is_picked_up_at_the_next_list() {
    let moto = moto::shared();
    let z = three_zones(moto.ec2());
    let [a, b] = [0, 1].map(|i| &z.instances[i]);
    let provider = provider_at(moto.url(), AwsConfig::default(), &test_env());
    let nodes = NodeDirectory::new([
        ("node-a", Some(a.provider_id().as_str())),
        ("node-b", Some(b.provider_id().as_str())),
    ]);
    provider.list_routes(CLUSTER, &nodes).expect("list");

    // Deleted under the provider's feet: the create learns it from EC2.
    z.ec2.delete_route_table(&z.tables[2]);
    provider
        .create_route(
            CLUSTER,
            "uid-a",
            &route("10.244.1.0/24"),
            &target("node-a", Some(&a.provider_id())),
        )
        .expect("the other tables get the route");
    assert!(has_route(&z.ec2, &z.tables[0], "10.244.1.0/24", &a.id));
    assert!(has_route(&z.ec2, &z.tables[1], "10.244.1.0/24", &a.id));
    assert_eq!(
        provider.route_table_ids(CLUSTER).expect("tables"),
        z.tables[..2].to_vec()
    );

    // Untagged (both tag styles: the zones' tables carry one each), and a new table
    // tagged: the next list sees both changes.
    let (key, value) = owned_tag();
    z.ec2.call(
        "DeleteTags",
        Params::new()
            .add("ResourceId.1", z.tables[1].as_str())
            .add("Tag.1.Key", key.as_str())
            .add("Tag.2.Key", "KubernetesCluster"),
    );
    let fresh = z.ec2.create_route_table(&z.net.vpc, &[(&key, value)]);
    let listed = provider.list_routes(CLUSTER, &nodes).expect("list");
    let mut want = vec![z.tables[0].clone(), fresh.clone()];
    want.sort();
    assert_eq!(provider.route_table_ids(CLUSTER).expect("tables"), want);
    assert_eq!(
        summary(&listed),
        vec![],
        "a's route is not in the new table yet"
    );

    let before = provider.api_calls();
    provider
        .create_route(
            CLUSTER,
            "uid-a",
            &route("10.244.1.0/24"),
            &target("node-a", Some(&a.provider_id())),
        )
        .expect("create fills the new table");
    assert_eq!(
        calls_delta(&before, &provider.api_calls()),
        [("CreateRoute", 1)].into_iter().collect()
    );
    assert!(has_route(&z.ec2, &fresh, "10.244.1.0/24", &a.id));
    assert_eq!(
        summary(&provider.list_routes(CLUSTER, &nodes).expect("list")),
        vec![("10.244.1.0/24".into(), "node-a".into(), false)]
    );
}

/// Guards configured tables: all of them are used without tags, a missing one is
/// skipped, and none existing is an error naming the setting to fix.
#[test]
fn configured_tables_are_used_without_tags_and_a_missing_one_is_skipped() {
    let moto = moto::shared();
    let ec2 = moto.ec2();
    let net = moto::network(&ec2);
    let mut tables = vec![
        ec2.create_route_table(&net.vpc, &[]),
        ec2.create_route_table(&net.vpc, &[]),
    ];
    tables.sort();
    let a = ec2.run_instance(&net.ami, &net.subnet);
    let config = |ids: Vec<String>| AwsConfig {
        route_table_ids: ids,
        ..AwsConfig::default()
    };
    let mut ids = tables.clone();
    ids.push("rtb-00000000deadbeef0".into());
    let provider = provider_at(moto.url(), config(ids), &test_env());
    let nodes = NodeDirectory::new([("node-a", Some(a.provider_id().as_str()))]);
    provider.list_routes(CLUSTER, &nodes).expect("list");
    assert_eq!(provider.route_table_ids(CLUSTER).expect("ids"), tables);
    provider
        .create_route(
            CLUSTER,
            "uid-a",
            &route("10.244.1.0/24"),
            &target("node-a", Some(&a.provider_id())),
        )
        .expect("create");
    for table in &tables {
        assert!(has_route(&ec2, table, "10.244.1.0/24", &a.id), "{table}");
    }
    assert_eq!(provider.api_calls().get("CreateRoute"), Some(&2));

    let none = provider_at(
        moto.url(),
        config(vec!["rtb-00000000deadbeef0".into()]),
        &test_env(),
    );
    let err = none
        .list_routes(CLUSTER, &NodeDirectory::default())
        .expect_err("no table");
    assert_eq!(err.kind, CloudErrorKind::Invalid);
    assert!(err.message.contains("RouteTableID"), "{}", err.message);
}

// --- fencing -----------------------------------------------------------------------

/// Guards the fence check in the provider's one request function: a create whose
/// `ModifyInstanceAttribute` was answered after the fence closed (the lease was lost
/// while the reply was held back) stops there, as `Fenced`: no `CreateRoute` reaches
/// moto and no route appears; a closed fence sends nothing at all. Remove the check
/// from `call` and moto gets the `CreateRoute` and holds the route.
#[test]
fn a_closed_fence_stops_a_create_between_modify_instance_attribute_and_create_route() {
    use fault_proxy::{FaultProxy, Mode};
    use route_controller::Fence;
    let moto = moto::shared();
    let ec2 = moto.ec2();
    let net = moto::network(&ec2);
    let table = ec2.create_route_table(
        &net.vpc,
        &[(&format!("kubernetes.io/cluster/{CLUSTER}"), "owned")],
    );
    let instance = ec2.run_instance(&net.ami, &net.subnet);
    let address = moto
        .url()
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .parse()
        .expect("moto's address");
    let proxy = FaultProxy::start(address);
    let fence = Fence::new();
    fence.open_for_good();
    let provider = Arc::new(
        provider_at(
            &format!("http://{}/", proxy.addr()),
            AwsConfig::default(),
            &test_env(),
        )
        .with_fence(fence.clone()),
    );
    assert_eq!(fence.request_bound(), Some(AwsConfig::default().timeout));
    // The tables are known from a list and the instance from the pre-flight check,
    // as in a running controller: the create's first request is then its
    // ModifyInstanceAttribute.
    let nodes = NodeDirectory::new([("node-a", Some(instance.provider_id().as_str()))]);
    provider.list_routes(CLUSTER, &nodes).expect("list");
    provider
        .preflight(
            &route("10.244.1.0/24"),
            &target("node-a", Some(&instance.provider_id())),
        )
        .expect("the instance passes the pre-flight check");

    proxy.set(Mode::HoldReplies);
    let creating = {
        let (provider, id) = (provider.clone(), instance.provider_id());
        std::thread::spawn(move || {
            provider.create_route(
                CLUSTER,
                "uid",
                &route("10.244.1.0/24"),
                &target("node-a", Some(&id)),
            )
        })
    };
    let modified = (0..1000).any(|_| {
        std::thread::sleep(Duration::from_millis(10));
        proxy
            .requests()
            .iter()
            .any(|(_, action)| action == "ModifyInstanceAttribute")
    });
    assert!(
        modified,
        "ModifyInstanceAttribute went out: {:?}",
        proxy.requests()
    );
    fence.close();
    let closed = Instant::now();
    proxy.set(Mode::Pass);
    let err = creating
        .join()
        .expect("the create returns")
        .expect_err("stopped after its first mutation");
    println!(
        "the fenced create returned {:?} after the fence closed",
        closed.elapsed()
    );
    assert_eq!(err.kind, CloudErrorKind::Fenced, "{err}");
    let actions: Vec<String> = proxy.requests().into_iter().map(|(_, a)| a).collect();
    assert_eq!(
        actions,
        vec![
            "DescribeRouteTables",
            "DescribeInstances",
            "ModifyInstanceAttribute"
        ],
        "no CreateRoute after the fence closed"
    );
    assert!(
        !ec2.source_dest_check(&instance.id),
        "the first request took effect"
    );
    assert!(
        ec2.routes(&table)
            .iter()
            .all(|(d, _, _)| d != "10.244.1.0/24")
    );

    // A closed fence sends nothing at all.
    assert_eq!(
        provider.list_routes(CLUSTER, &nodes).unwrap_err().kind,
        CloudErrorKind::Fenced
    );
    assert_eq!(proxy.requests().len(), 3, "{:?}", proxy.requests());
}

// --- route-table limits and pre-flight checks (issue 14, items 2 and 4) -------------

/// Guards the AWS side of item 2: each table reports every route in it (moto's local
/// route included) and the configured limit, and our own creates count into it.
#[test]
fn each_table_reports_its_routes_and_the_configured_limit() {
    let (moto, ec2, net, table) = tagged_table();
    let a = ec2.run_instance(&net.ami, &net.subnet);
    let provider = provider_at(
        moto.url(),
        AwsConfig {
            route_table_limit: Some(7),
            ..AwsConfig::default()
        },
        &test_env(),
    );
    let nodes = NodeDirectory::new([("node-a", Some(a.provider_id().as_str()))]);
    provider.list_routes(CLUSTER, &nodes).expect("list");
    let in_table = ec2.routes(&table).len();
    let reported = provider.route_tables();
    assert_eq!(reported.len(), 1, "{reported:?}");
    assert_eq!(
        (
            reported[0].table.as_str(),
            reported[0].routes,
            reported[0].limit
        ),
        (table.as_str(), in_table, 7)
    );
    provider
        .create_route(
            CLUSTER,
            "uid",
            &route("10.244.1.0/24"),
            &target("node-a", Some(&a.provider_id())),
        )
        .expect("create");
    assert_eq!(provider.route_tables()[0].routes, in_table + 1);
    let calls = provider.api_calls();
    assert_eq!(calls.get("GetServiceQuota"), None, "configured: {calls:?}");
    assert_eq!(
        AwsConfig::default().route_table_limit,
        None,
        "read from Service Quotas"
    );
    assert_eq!(
        DEFAULT_ROUTE_TABLE_LIMIT, 500,
        "AWS's default since June 2025"
    );
}

/// Guards the quota read against moto: without `RouteTableRouteLimit` the limit is
/// the account's "Routes per route table" from one `GetServiceQuota` before the first
/// list. moto's account holds that quota at 50 (its data predates AWS's new default
/// of 500), so the value used is the account's, not the default.
#[test]
fn without_a_configured_limit_the_accounts_routes_per_route_table_is_read_once() {
    let (moto, ec2, _net, table) = tagged_table();
    let provider = provider_at(
        moto.url(),
        AwsConfig {
            service_quotas_endpoint: Some(moto.url().into()),
            ..AwsConfig::default()
        },
        &test_env(),
    );
    for _ in 0..2 {
        provider
            .list_routes(CLUSTER, &NodeDirectory::default())
            .expect("list");
    }
    let reported = provider.route_tables();
    assert_eq!(
        (
            reported[0].table.as_str(),
            reported[0].routes,
            reported[0].limit
        ),
        (table.as_str(), ec2.routes(&table).len(), 50),
        "{reported:?}"
    );
    let calls = provider.api_calls();
    assert_eq!(calls.get("GetServiceQuota"), Some(&1), "{calls:?}");
    assert_eq!(calls.get("DescribeRouteTables"), Some(&2), "{calls:?}");
}

/// Guards the request's wire form (JSON 1.1, signed for `servicequotas`) and the
/// fallback: a Service Quotas that says AccessDenied leaves the limit at AWS's
/// default of 500, and the list goes on.
#[test]
fn a_quota_read_that_is_denied_leaves_the_default_of_500() {
    let stub = StubServer::start(|req| match req.header("X-Amz-Target") {
        Some(_) => Reply::text(
            400,
            r#"{"__type":"com.amazonaws.servicequotas#AccessDeniedException","Message":"User is not authorized to perform: servicequotas:GetServiceQuota"}"#,
        ),
        None => Reply::xml(200, route_tables_xml(&[("rtb-1", &[])], None)),
    });
    let provider = provider_at(
        &stub.url(),
        AwsConfig {
            service_quotas_endpoint: Some(stub.url()),
            ..AwsConfig::default()
        },
        &test_env(),
    );
    provider
        .list_routes(CLUSTER, &NodeDirectory::default())
        .expect("the list goes on");
    assert_eq!(provider.route_tables()[0].limit, 500);
    let requests = stub.requests();
    let quota = &requests[0];
    assert_eq!(
        quota.header("X-Amz-Target"),
        Some("ServiceQuotasV20190624.GetServiceQuota")
    );
    assert_eq!(
        quota.header("Content-Type"),
        Some("application/x-amz-json-1.1")
    );
    let body: serde_json::Value = serde_json::from_str(&quota.body).expect("JSON body");
    assert_eq!(
        body,
        serde_json::json!({"ServiceCode": "vpc", "QuotaCode": "L-93826ACB"})
    );
    let credential = verify_signature(quota, moto::TEST_SECRET);
    assert!(
        credential.ends_with(&format!("/{}/servicequotas/aws4_request", moto::REGION)),
        "{credential}"
    );
    assert_eq!(requests[1].action(), "DescribeRouteTables");
    assert_eq!(requests.len(), 2, "one quota read, one list");
}

/// Guards the VPC pre-flight check: an instance of another VPC is refused with the
/// reason and the fix, and no CreateRoute (which EC2 would refuse) is sent.
#[test]
fn an_instance_in_another_vpc_is_refused_before_any_create() {
    let (moto, ec2, _net, _table) = tagged_table();
    let other_vpc = ec2.create_vpc("10.1.0.0/16");
    let other_subnet = ec2.create_subnet(&other_vpc, "10.1.1.0/24", "us-east-1a");
    let stranger = ec2.run_instance(&ec2.any_ami(), &other_subnet);
    let provider = provider_at(moto.url(), AwsConfig::default(), &test_env());
    provider
        .list_routes(CLUSTER, &NodeDirectory::default())
        .expect("list");
    let before = provider.api_calls();
    let err = provider
        .create_route(
            CLUSTER,
            "uid",
            &route("10.244.9.0/24"),
            &target("stranger", Some(&stranger.provider_id())),
        )
        .expect_err("refused");
    assert_eq!(
        err.kind,
        CloudErrorKind::Refused {
            reason: "InstanceNotInVPC",
            lasting: false
        },
        "{err}"
    );
    assert!(err.message.contains(&other_vpc), "{err}");
    let calls = calls_delta(&before, &provider.api_calls());
    assert_eq!(calls.get("CreateRoute"), None, "{calls:?}");
    assert_eq!(calls.get("ModifyInstanceAttribute"), None, "{calls:?}");
}

/// Guards DisableSourceDestCheck=false: the controller does not modify the instance;
/// while its check is on the create is refused (EC2 would drop the pods' traffic),
/// once the operator turns it off the route follows.
#[test]
fn with_the_source_dest_check_left_to_the_operator_an_instance_that_checks_is_refused() {
    let (moto, ec2, net, table) = tagged_table();
    let a = ec2.run_instance(&net.ami, &net.subnet);
    let provider = provider_at(
        moto.url(),
        AwsConfig {
            disable_source_dest_check: false,
            ..AwsConfig::default()
        },
        &test_env(),
    );
    provider
        .list_routes(CLUSTER, &NodeDirectory::default())
        .expect("list");
    let create = || {
        provider.create_route(
            CLUSTER,
            "uid",
            &route("10.244.1.0/24"),
            &target("node-a", Some(&a.provider_id())),
        )
    };
    let err = create().expect_err("refused while the check is on");
    assert_eq!(
        err.kind,
        CloudErrorKind::Refused {
            reason: "SourceDestCheckEnabled",
            lasting: false
        },
        "{err}"
    );
    assert!(err.message.contains("--no-source-dest-check"), "{err}");
    ec2.call(
        "ModifyInstanceAttribute",
        Params::new()
            .add("InstanceId", &a.id)
            .add("SourceDestCheck.Value", "false"),
    );
    create().expect("the route follows the operator's fix");
    assert!(
        ec2.routes(&table)
            .iter()
            .any(|(d, i, _)| d == "10.244.1.0/24" && i.as_deref() == Some(a.id.as_str()))
    );
    let calls = provider.api_calls();
    assert_eq!(calls.get("ModifyInstanceAttribute"), None, "{calls:?}");
    assert_eq!(calls.get("CreateRoute"), Some(&1), "{calls:?}");
}
