//! The Hetzner Cloud provider against the test double: the `Routes` round trip, node
//! mapping, pagination, actions, error mapping, serialised network changes, what each
//! call reports to the controller's budget, and the controller driving the provider.

#[path = "support/fault_proxy.rs"]
mod fault_proxy;
#[path = "support/hcloud_double.rs"]
mod hcloud_double;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hcloud_double::{Fault, HcloudDouble};
use route_controller::Meter;
use route_controller::cloud::hcloud::{ActionClock, Config, HcloudRoutes, VirtualTime};
use route_controller::cloud::{CloudErrorKind, NodeDirectory, RouteTarget, Routes};
use route_controller::metrics::Metrics;
use route_controller::model::{Cidr, NodeAddress, Route};

const TOKEN: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const NET: u64 = 4711;
const CLUSTER: &str = "kubernetes";

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A double with network `k8s` (10.0.0.0/8, subnet 10.0.0.0/24) and `servers`
/// servers `worker-<i>` (ID 100+i) attached with IP 10.0.0.<i+1>.
fn cluster(servers: u64) -> HcloudDouble {
    let double = HcloudDouble::start(TOKEN);
    double.add_network(NET, "k8s", "10.0.0.0/8", &["10.0.0.0/24"]);
    for i in 1..=servers {
        double.add_server(100 + i, &worker(i), Some((NET, &ip(i))));
    }
    double
}

fn worker(i: u64) -> String {
    format!("worker-{i}")
}

fn ip(i: u64) -> String {
    format!("10.0.{}.{}", (i + 1) / 256, (i + 1) % 256)
}

fn pod_cidr(i: u64) -> String {
    format!("10.244.{i}.0/24")
}

/// Settings read the way the binary reads them, from an environment, with the timing
/// scaled down for tests.
fn config(double: &HcloudDouble, network: &str) -> Config {
    let env: HashMap<&str, String> = HashMap::from([
        ("HCLOUD_TOKEN", double.token().to_string()),
        ("HCLOUD_NETWORK", network.to_string()),
        ("HCLOUD_ENDPOINT", double.endpoint()),
    ]);
    let mut c = Config::from_env(|k| env.get(k).cloned()).expect("valid test configuration");
    c.action_first_poll = ms(20);
    c.action_poll_interval = ms(40);
    c.request_timeout = Duration::from_secs(3);
    c.rate_limit_per_second = 100_000.0;
    c
}

fn connect(double: &HcloudDouble) -> HcloudRoutes {
    HcloudRoutes::connect(config(double, &NET.to_string())).expect("connect to the double")
}

/// Nodes named like their servers, with providerIDs.
fn nodes(count: u64) -> NodeDirectory {
    let names: Vec<(String, String)> = (1..=count)
        .map(|i| (worker(i), format!("hcloud://{}", 100 + i)))
        .collect();
    NodeDirectory::new(names.iter().map(|(n, p)| (n.as_str(), Some(p.as_str()))))
}

fn target(i: u64) -> RouteTarget {
    RouteTarget {
        node_name: worker(i),
        provider_id: Some(format!("hcloud://{}", 100 + i)),
        addresses: vec![NodeAddress::internal_ip(&ip(i))],
    }
}

/// A route as the controller asks for it: no name.
fn wanted(i: u64, cidr: &str) -> Route {
    Route {
        target_node: worker(i),
        target_node_addresses: target(i).addresses,
        destination_cidr: cidr.to_string(),
        ..Route::default()
    }
}

fn create(p: &HcloudRoutes, i: u64, cidr: &str) -> Result<(), route_controller::cloud::CloudError> {
    p.create_route(CLUSTER, "uid", &wanted(i, cidr), &target(i))
}

fn kind_of<T: std::fmt::Debug>(
    r: Result<T, route_controller::cloud::CloudError>,
) -> CloudErrorKind {
    r.expect_err("the call should fail").kind
}

#[test]
fn round_trip_create_list_delete_through_the_routes_trait() {
    let double = cluster(2);
    let p = connect(&double);
    let routes: &dyn Routes = &p;
    assert_eq!(routes.provider_name(), "hcloud");
    create(&p, 1, &pod_cidr(1)).unwrap();
    create(&p, 2, &pod_cidr(2)).unwrap();
    assert_eq!(
        double.routes(NET),
        vec![(pod_cidr(1), ip(1)), (pod_cidr(2), ip(2)),]
    );
    let listed = routes.list_routes(CLUSTER, &nodes(2)).unwrap();
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[0].name, format!("{}-{}", ip(1), pod_cidr(1)));
    assert_eq!(listed[0].target_node, "worker-1");
    assert_eq!(listed[1].target_node, "worker-2");
    assert!(listed.iter().all(|r| !r.blackhole));

    // One delete with the listed route, one as the controller sends a route it
    // created itself (no name).
    routes.delete_route(CLUSTER, &listed[0]).unwrap();
    routes
        .delete_route(CLUSTER, &wanted(2, &pod_cidr(2)))
        .unwrap();
    assert!(double.routes(NET).is_empty());
    assert_eq!(
        kind_of(routes.delete_route(CLUSTER, &listed[0])),
        CloudErrorKind::NotFound
    );
}

#[test]
fn requests_per_create_delete_and_list_are_the_physical_minimum() {
    let double = cluster(3);
    double.set_action_duration(Duration::ZERO);
    let p = connect(&double);
    p.list_routes(CLUSTER, &nodes(3)).unwrap();
    double.clear_requests();

    create(&p, 1, &pod_cidr(1)).unwrap();
    let paths: Vec<String> = double
        .requests()
        .iter()
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert_eq!(
        paths,
        vec![
            format!("POST /networks/{NET}/actions/add_route"),
            "GET /actions".to_string()
        ],
        "a create is the action and one poll, with no reload of the network"
    );

    double.clear_requests();
    p.delete_route(CLUSTER, &wanted(1, &pod_cidr(1))).unwrap();
    assert_eq!(double.requests().len(), 2, "{:?}", double.requests());

    // A list within the server cache's age is one request; the cache is 10 s.
    double.clear_requests();
    p.list_routes(CLUSTER, &nodes(3)).unwrap();
    assert_eq!(double.requests().len(), 1, "{:?}", double.requests());
}

#[test]
fn routes_map_to_nodes_by_provider_id_even_when_node_and_server_names_differ() {
    let double = cluster(1);
    let p = connect(&double);
    let node = RouteTarget {
        node_name: "node-a".into(),
        provider_id: Some("hcloud://101".into()),
        addresses: vec![],
    };
    p.create_route(
        CLUSTER,
        "u",
        &Route {
            destination_cidr: pod_cidr(1),
            ..Route::default()
        },
        &node,
    )
    .unwrap();
    assert_eq!(double.routes(NET), vec![(pod_cidr(1), ip(1))]);
    let dir = NodeDirectory::new([("node-a", Some("hcloud://101"))]);
    let listed = p.list_routes(CLUSTER, &dir).unwrap();
    assert_eq!(
        listed[0].target_node, "node-a",
        "not the server name worker-1"
    );
}

#[test]
fn nodes_without_provider_id_map_to_the_server_of_the_same_name() {
    let double = cluster(2);
    let p = connect(&double);
    let node = RouteTarget {
        node_name: worker(2),
        provider_id: None,
        addresses: vec![],
    };
    p.create_route(CLUSTER, "u", &wanted(2, &pod_cidr(2)), &node)
        .unwrap();
    assert_eq!(double.routes(NET), vec![(pod_cidr(2), ip(2))]);
    let dir = NodeDirectory::new([(worker(2).as_str(), None)]);
    assert_eq!(
        p.list_routes(CLUSTER, &dir).unwrap()[0].target_node,
        worker(2)
    );
}

#[test]
fn route_to_a_vanished_server_is_a_blackhole_and_the_list_still_succeeds() {
    let double = cluster(2);
    let p = connect(&double);
    create(&p, 1, &pod_cidr(1)).unwrap();
    create(&p, 2, &pod_cidr(2)).unwrap();
    double.remove_server(102);
    double.put_route(NET, "10.244.9.0/24", "10.0.0.99");
    let mut config = config(&double, &NET.to_string());
    config.refresh_on_miss_after = Duration::ZERO;
    let fresh = HcloudRoutes::connect(config).unwrap();
    double.clear_requests();
    let listed = fresh.list_routes(CLUSTER, &nodes(2)).unwrap();
    assert_eq!(listed.len(), 3);
    let by_dest = |d: &str| listed.iter().find(|r| r.destination_cidr == d).unwrap();
    assert_eq!(by_dest(&pod_cidr(1)).target_node, worker(1));
    for gone in [pod_cidr(2), "10.244.9.0/24".to_string()] {
        let r = by_dest(&gone);
        assert!(r.blackhole, "{r:?}");
        assert_eq!(r.target_node, "");
    }
    // The unknown gateways made it list the servers once more, and only once.
    assert_eq!(
        double.count("GET", "/servers"),
        2,
        "{:?}",
        double.requests()
    );
}

#[test]
fn a_server_list_younger_than_the_refresh_threshold_is_not_listed_again_for_unknown_gateways() {
    let double = cluster(1);
    double.put_route(NET, "10.244.9.0/24", "10.0.0.99");
    let p = connect(&double);
    double.clear_requests();
    for _ in 0..3 {
        let listed = p.list_routes(CLUSTER, &nodes(1)).unwrap();
        assert!(listed[0].blackhole);
    }
    assert_eq!(
        double.count("GET", "/servers"),
        1,
        "{:?}",
        double.requests()
    );
}

#[test]
fn a_server_created_after_the_last_listing_is_found_by_listing_again() {
    let double = cluster(1);
    let mut config = config(&double, &NET.to_string());
    config.refresh_on_miss_after = Duration::ZERO;
    let p = HcloudRoutes::connect(config).unwrap();
    p.list_routes(CLUSTER, &nodes(1)).unwrap();
    double.add_server(102, &worker(2), Some((NET, &ip(2))));
    create(&p, 2, &pod_cidr(2)).unwrap();
    assert_eq!(double.routes(NET), vec![(pod_cidr(2), ip(2))]);
}

#[test]
fn server_list_pagination_is_followed_past_fifty_servers() {
    let double = cluster(120);
    let p = connect(&double);
    double.put_route(NET, &pod_cidr(117), &ip(117));
    let listed = p.list_routes(CLUSTER, &nodes(120)).unwrap();
    assert_eq!(listed[0].target_node, worker(117));
    let pages: Vec<String> = double
        .requests()
        .iter()
        .filter(|r| r.path == "/servers")
        .map(|r| r.query.clone())
        .collect();
    assert_eq!(
        pages,
        vec![
            "page=1&per_page=50",
            "page=2&per_page=50",
            "page=3&per_page=50"
        ]
    );
}

/// The action poller in virtual time (shared by the double, whose action runs 200 ms
/// of it): polls at 20 ms, then every 40 ms, so the sixth poll, at 220 ms, is the first
/// to see the action done. Guards the first-poll delay, the interval and the end of the
/// wait at the first `success` (a poll interval of 20 ms, a first poll at 40 ms, or a
/// wait that stops at `running` each change the count or the time).
#[test]
fn an_action_that_runs_for_several_polls_is_waited_for() {
    let double = cluster(1);
    double.set_action_duration(ms(200));
    let time = Arc::new(VirtualTime::new(Instant::now()));
    let started = time.now();
    double.set_clock({
        let time = time.clone();
        Arc::new(move || time.now())
    });
    let mut c = config(&double, &NET.to_string());
    c.action_clock = ActionClock::Virtual(time.clone());
    let p = HcloudRoutes::connect(c).expect("connect to the double");
    create(&p, 1, &pod_cidr(1)).unwrap();
    assert_eq!(double.routes(NET).len(), 1);
    let polls = double.count("GET", "/actions");
    let waited = time.now() - started;
    assert_eq!((polls, waited), (6, ms(220)));
}

#[test]
fn an_action_that_ends_in_error_maps_its_code_and_adds_nothing() {
    let double = cluster(1);
    let p = connect(&double);
    double.fail_next_action("add_route", "locked", "network is locked");
    assert_eq!(
        kind_of(create(&p, 1, &pod_cidr(1))),
        CloudErrorKind::Conflict
    );
    double.fail_next_action("add_route", "action_failed", "route could not be applied");
    let err = create(&p, 1, &pod_cidr(1)).unwrap_err();
    assert_eq!(err.kind, CloudErrorKind::Retry { after: None });
    assert!(err.message.contains("route could not be applied"), "{err}");
    assert!(double.routes(NET).is_empty());
    // The next attempt goes through.
    create(&p, 1, &pod_cidr(1)).unwrap();
}

#[test]
fn every_mapped_error_code_on_add_route_reaches_its_cloud_error_kind() {
    let double = cluster(1);
    let p = connect(&double);
    let add_route = format!("/networks/{NET}/actions/add_route");
    let cases: Vec<(Fault, CloudErrorKind)> = vec![
        (Fault::error(409, "conflict"), CloudErrorKind::Conflict),
        (Fault::error(423, "locked"), CloudErrorKind::Conflict),
        // hcloud-go: "The resource is locked. The caller should contact support".
        (
            Fault::error(423, "resource_locked"),
            CloudErrorKind::Invalid,
        ),
        (Fault::error(403, "forbidden"), CloudErrorKind::Invalid),
        (Fault::error(403, "token_readonly"), CloudErrorKind::Invalid),
        (Fault::error(401, "unauthorized"), CloudErrorKind::Invalid),
        (
            Fault::error(403, "resource_limit_exceeded"),
            CloudErrorKind::TableFull,
        ),
        (Fault::error(423, "protected"), CloudErrorKind::Invalid),
        (Fault::error(400, "invalid_input"), CloudErrorKind::Invalid),
        (Fault::error(500, "server_error"), CloudErrorKind::Ambiguous),
        (
            Fault::error(503, "service_error"),
            CloudErrorKind::Ambiguous,
        ),
        (Fault::error(502, "bad_gateway"), CloudErrorKind::Ambiguous),
        (Fault::error(504, "timeout"), CloudErrorKind::Ambiguous),
        // Refusals: nothing was applied, so the POST is not ambiguous.
        (
            Fault::error(403, "maintenance"),
            CloudErrorKind::Retry { after: None },
        ),
        (
            Fault::error(412, "resource_unavailable"),
            CloudErrorKind::Retry { after: None },
        ),
        (Fault::error(503, "unavailable"), CloudErrorKind::Ambiguous),
        (Fault::BareStatus(502), CloudErrorKind::Ambiguous),
        (Fault::Garbage, CloudErrorKind::Ambiguous),
        (Fault::Close, CloudErrorKind::Ambiguous),
        (Fault::CutShort, CloudErrorKind::Ambiguous),
    ];
    for (fault, expected) in cases {
        double.inject("POST", &add_route, 1, fault.clone());
        let err = create(&p, 1, "10.244.50.0/24").unwrap_err();
        assert_eq!(err.kind, expected, "{fault:?}: {err}");
        assert!(err.message.contains(&add_route), "{fault:?}: {err}");
    }
    double.inject(
        "POST",
        &add_route,
        1,
        Fault::error(429, "rate_limit_exceeded"),
    );
    assert!(matches!(
        kind_of(create(&p, 1, "10.244.50.0/24")),
        CloudErrorKind::RateLimited { .. }
    ));
}

#[test]
fn errors_on_reads_are_retried_not_ambiguous() {
    let double = cluster(1);
    let p = connect(&double);
    let network = format!("/networks/{NET}");
    for fault in [
        Fault::error(500, "server_error"),
        Fault::error(503, "unavailable"),
        Fault::error(504, "timeout"),
        Fault::BareStatus(503),
        Fault::Garbage,
        Fault::Close,
        Fault::CutShort,
    ] {
        double.inject("GET", &network, 1, fault.clone());
        assert_eq!(
            kind_of(p.list_routes(CLUSTER, &nodes(1))),
            CloudErrorKind::Retry { after: None },
            "{fault:?}"
        );
    }
    double.inject("GET", &network, 1, Fault::error(409, "conflict"));
    assert_eq!(
        kind_of(p.list_routes(CLUSTER, &nodes(1))),
        CloudErrorKind::Conflict
    );
    assert!(p.list_routes(CLUSTER, &nodes(1)).is_ok());
}

/// Guards that a read refused for the rate limit goes back to the controller at once,
/// with the hold-back for its budget, instead of being waited out and sent again in
/// the worker (the controller then holds every request back; tests/controller.rs).
#[test]
fn a_rate_limited_read_goes_back_to_the_controller_at_once() {
    let double = cluster(1);
    let p = connect(&double);
    double.clear_requests();
    let network = format!("/networks/{NET}");
    double.inject("GET", &network, 1, Fault::error(429, "rate_limit_exceeded"));
    let (result, usage) = Meter::measure(|| p.list_routes(CLUSTER, &nodes(1)));
    assert!(matches!(
        kind_of(result),
        CloudErrorKind::RateLimited { .. }
    ));
    assert_eq!(
        double.count("GET", &network),
        1,
        "sent again behind the controller's back"
    );
    let usage = usage.expect("the provider reports what it spent");
    assert_eq!(usage.requests, 1);
    assert!(usage.throttled.is_some(), "{usage:?}");
    assert!(p.list_routes(CLUSTER, &nodes(1)).is_ok());
}

/// Guards what a create reports to the controller's budget: every request it sent
/// (the POST and each poll of its action: as many as the double saw) and the API's
/// `RateLimit-Limit`/`-Remaining` after the last one. Drop `Meter::request` from the
/// client and the count is 0; drop `Meter::budget` and nothing is left unreported.
#[test]
fn a_create_reports_every_request_it_sent_and_the_budget_left() {
    let double = cluster(1);
    // Next to no refill while the test runs, so the count left is exact.
    double.set_rate_limit(100, 0.001);
    double.set_action_duration(ms(100));
    let p = connect(&double);
    p.list_routes(CLUSTER, &nodes(1)).unwrap(); // the server list is cached now
    double.clear_requests();
    let before = double.requests().len();
    assert_eq!(before, 0);
    let (result, usage) = Meter::measure(|| create(&p, 1, &pod_cidr(1)));
    result.expect("created");
    let sent = double.requests().len() as u32;
    assert!(
        sent >= 2,
        "the POST and at least one poll: {:?}",
        double.requests()
    );
    let usage = usage.expect("the provider reports what it spent");
    assert_eq!(usage.requests, sent, "{:?}", double.requests());
    assert_eq!(usage.limit, Some(100));
    let used_before: u64 = 100 - usage.remaining.expect("RateLimit-Remaining") - u64::from(sent);
    // Connecting and the list spent the rest; the create's own requests are counted.
    assert!(used_before >= 2, "{usage:?}");
    assert_eq!(usage.throttled, None);
}

#[test]
fn delete_of_a_route_that_is_already_gone_is_not_found() {
    let double = cluster(1);
    let p = connect(&double);
    create(&p, 1, &pod_cidr(1)).unwrap();
    let delete_route = format!("/networks/{NET}/actions/delete_route");
    double.inject("POST", &delete_route, 1, Fault::error(404, "not_found"));
    assert_eq!(
        kind_of(p.delete_route(CLUSTER, &wanted(1, &pod_cidr(1)))),
        CloudErrorKind::NotFound
    );
    // Never created and unknown to the network: no action at all.
    double.clear_requests();
    assert_eq!(
        kind_of(p.delete_route(CLUSTER, &wanted(1, "10.244.77.0/24"))),
        CloudErrorKind::NotFound
    );
    assert_eq!(
        double.count("POST", "/networks"),
        0,
        "{:?}",
        double.requests()
    );
}

#[test]
fn an_identical_existing_route_counts_as_created() {
    let double = cluster(2);
    let p = connect(&double);
    p.list_routes(CLUSTER, &nodes(2)).unwrap();
    // Another client (or an earlier attempt whose reply was lost) added it since.
    double.put_route(NET, &pod_cidr(1), &ip(1));
    double.clear_requests();
    create(&p, 1, &pod_cidr(1)).unwrap();
    assert_eq!(double.routes(NET), vec![(pod_cidr(1), ip(1))]);
    // The refusal, then one reload of the network to see why.
    assert_eq!(double.requests().len(), 2, "{:?}", double.requests());
}

#[test]
fn an_existing_route_to_another_server_is_already_exists() {
    let double = cluster(2);
    double.put_route(NET, &pod_cidr(1), &ip(2));
    let p = connect(&double);
    let err = create(&p, 1, &pod_cidr(1)).unwrap_err();
    assert_eq!(err.kind, CloudErrorKind::AlreadyExists);
    assert!(err.message.contains(&ip(2)), "{err}");
}

#[test]
fn a_destination_overlapping_a_subnet_is_invalid_and_names_the_cluster_cidr() {
    let double = cluster(1);
    let p = connect(&double);
    let err = create(&p, 1, "10.0.0.128/25").unwrap_err();
    assert_eq!(err.kind, CloudErrorKind::Invalid);
    assert!(err.message.contains("--cluster-cidr"), "{err}");
    assert!(err.message.contains("10.0.0.0/24"), "{err}");
    let problems = p.cluster_cidr_problems(&[Cidr::parse("10.0.0.0/16").unwrap()]);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        p.cluster_cidr_problems(&[Cidr::parse("10.244.0.0/16").unwrap()])
            .is_empty()
    );
}

#[test]
fn a_timeout_on_add_route_is_ambiguous() {
    let double = cluster(1);
    let mut config = config(&double, &NET.to_string());
    config.request_timeout = ms(300);
    let p = HcloudRoutes::connect(config).unwrap();
    p.list_routes(CLUSTER, &nodes(1)).unwrap();
    let add_route = format!("/networks/{NET}/actions/add_route");
    double.inject("POST", &add_route, 1, Fault::Stall(ms(800)));
    let err = create(&p, 1, &pod_cidr(1)).unwrap_err();
    assert_eq!(err.kind, CloudErrorKind::Ambiguous, "{err}");
    assert!(err.message.contains("may or may not"), "{err}");
}

#[test]
fn an_ipv6_destination_is_refused_for_good_without_any_request() {
    let double = cluster(1);
    let p = connect(&double);
    double.clear_requests();
    let err = create(&p, 1, "fd00:10:244:1::/64").unwrap_err();
    assert_eq!(
        err.kind,
        CloudErrorKind::Refused {
            reason: "IPv6NotRoutable",
            lasting: true
        }
    );
    assert!(err.message.contains("IPv4 only"), "{err}");
    assert!(double.requests().is_empty(), "{:?}", double.requests());
}

#[test]
fn robot_servers_are_refused_without_any_request() {
    let double = cluster(1);
    let p = connect(&double);
    double.clear_requests();
    for provider_id in ["hrobot://321", "hcloud://bm-321"] {
        let node = RouteTarget {
            node_name: "dedicated".into(),
            provider_id: Some(provider_id.into()),
            addresses: vec![],
        };
        let err = p
            .create_route(CLUSTER, "u", &wanted(1, &pod_cidr(1)), &node)
            .unwrap_err();
        assert_eq!(err.kind, CloudErrorKind::Invalid, "{provider_id}");
    }
    assert!(double.requests().is_empty());
}

#[test]
fn a_server_not_attached_to_the_network_is_refused_before_the_call_with_the_fix() {
    let double = cluster(1);
    double.add_server(102, &worker(2), None);
    let p = connect(&double);
    double.clear_requests();
    let err = create(&p, 2, &pod_cidr(2)).unwrap_err();
    let not_in_network = CloudErrorKind::Refused {
        reason: "ServerNotInNetwork",
        lasting: false,
    };
    assert_eq!(err.kind, not_in_network, "{err}");
    assert!(err.message.contains("attach-to-network"), "{err}");
    assert!(err.message.contains("k8s"), "{err}");
    // Without an InternalIP the server is found by providerID, and refused the same way.
    let bare = RouteTarget {
        addresses: vec![],
        ..target(2)
    };
    let err = p
        .create_route(CLUSTER, "uid", &wanted(2, &pod_cidr(2)), &bare)
        .unwrap_err();
    assert_eq!(err.kind, not_in_network, "{err}");
    assert!(err.message.contains("not attached"), "{err}");
    assert_eq!(
        double.count("POST", "/networks"),
        0,
        "{:?}",
        double.requests()
    );
    // A node whose server is not listed (yet) and has no InternalIP is retried, with
    // advice in case it never will be.
    let bare = RouteTarget {
        addresses: vec![],
        ..target(9)
    };
    let err = p
        .create_route(CLUSTER, "uid", &wanted(9, &pod_cidr(9)), &bare)
        .unwrap_err();
    assert_eq!(err.kind, CloudErrorKind::Retry { after: None }, "{err}");
    assert!(err.message.contains("check the node's providerID"), "{err}");
}

/// Guards the pre-flight checks of item 4: a node whose InternalIP lies outside the
/// network, or that no attached server holds (a Robot server on a vSwitch), is refused
/// with a reason and the fix, and no add_route is sent (the API would answer "invalid
/// gateway" after the call).
#[test]
fn a_node_address_outside_the_network_or_of_no_attached_server_is_refused_before_the_call() {
    let double = cluster(1);
    let p = connect(&double);
    double.clear_requests();
    let outside = RouteTarget {
        addresses: vec![NodeAddress::internal_ip("192.168.7.3")],
        ..target(1)
    };
    let err = p
        .create_route(CLUSTER, "uid", &wanted(1, &pod_cidr(1)), &outside)
        .unwrap_err();
    assert_eq!(
        err.kind,
        CloudErrorKind::Refused {
            reason: "InternalIPOutsideNetwork",
            lasting: false
        },
        "{err}"
    );
    assert!(
        err.message.contains("192.168.7.3") && err.message.contains("10.0.0.0/8"),
        "{err}"
    );
    // A Robot server on the vSwitch: its IP is in the range, but no cloud server has it.
    let robot = RouteTarget {
        node_name: "robot-1".into(),
        provider_id: None,
        addresses: vec![NodeAddress::internal_ip("10.0.1.2")],
    };
    let err = p
        .create_route(CLUSTER, "uid", &wanted(1, &pod_cidr(7)), &robot)
        .unwrap_err();
    assert_eq!(
        err.kind,
        CloudErrorKind::Refused {
            reason: "ServerNotInNetwork",
            lasting: false
        },
        "{err}"
    );
    assert!(err.message.contains("10.0.1.2"), "{err}");
    assert_eq!(
        double.count("POST", "/networks"),
        0,
        "{:?}",
        double.requests()
    );
    // The node as it should be goes through.
    create(&p, 1, &pod_cidr(1)).expect("a node inside the network gets its route");
}

/// Guards item 2's provider side: the network is reported with every route in it and
/// the limit of 100, and the API's refusal of a full network is `TableFull`.
#[test]
fn the_network_reports_its_routes_and_limit_and_a_full_network_is_table_full() {
    let double = cluster(2);
    double.put_route(NET, "192.168.100.0/24", "10.0.0.2"); // someone else's route
    let p = connect(&double);
    let table = |p: &HcloudRoutes| p.route_tables().into_iter().next().expect("one table");
    assert_eq!(
        (table(&p).table.as_str(), table(&p).routes, table(&p).limit),
        ("k8s", 1, 100)
    );
    create(&p, 1, &pod_cidr(1)).expect("create");
    p.list_routes(CLUSTER, &nodes(2)).expect("list");
    assert_eq!(
        table(&p).routes,
        2,
        "the list counts every route of the network"
    );
    double.set_route_limit(2);
    assert_eq!(
        kind_of(create(&p, 2, &pod_cidr(2))),
        CloudErrorKind::TableFull
    );
    assert_eq!(double.route_limit_refusals(), 1);
}

#[test]
fn a_read_only_token_fails_creates_with_advice_about_the_scope() {
    let double = cluster(1);
    double.set_read_only_token("readonly-token");
    let mut config = config(&double, "k8s");
    config.token = route_controller::cloud::hcloud::TokenSource::Value(
        route_controller::cloud::hcloud::Secret::new("readonly-token"),
    );
    let p = HcloudRoutes::connect(config).expect("reads work with a read-only token");
    let err = create(&p, 1, &pod_cidr(1)).unwrap_err();
    assert_eq!(err.kind, CloudErrorKind::Invalid);
    assert!(err.message.contains("Read & Write"), "{err}");
}

#[test]
fn connect_resolves_the_network_by_id_by_name_and_by_numeric_name() {
    let double = cluster(0);
    double.add_network(7, "12345", "10.0.0.0/8", &["10.0.0.0/24"]);
    assert_eq!(
        HcloudRoutes::connect(config(&double, "4711"))
            .unwrap()
            .network()
            .id,
        NET
    );
    assert_eq!(
        HcloudRoutes::connect(config(&double, "k8s"))
            .unwrap()
            .network()
            .id,
        NET
    );
    double.clear_requests();
    let p = HcloudRoutes::connect(config(&double, "12345")).unwrap();
    assert_eq!(p.network().id, 7);
    let queries: Vec<String> = double
        .requests()
        .iter()
        .map(|r| format!("{}?{}", r.path, r.query))
        .collect();
    assert_eq!(queries, vec!["/networks/12345?", "/networks?name=12345"]);
}

#[test]
fn a_token_file_is_read_again_when_the_secret_is_rotated() {
    let double = cluster(1);
    let dir = std::env::temp_dir().join(format!("hcloud-it-token-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("token");
    std::fs::write(&file, format!("{TOKEN}\n")).unwrap();
    let mut config = config(&double, "k8s");
    config.token = route_controller::cloud::hcloud::TokenSource::File(file.clone());
    let p = HcloudRoutes::connect(config).unwrap();
    std::fs::write(&file, "revoked-token").unwrap();
    let err = p.list_routes(CLUSTER, &nodes(1)).unwrap_err();
    assert_eq!(err.kind, CloudErrorKind::Invalid);
    assert!(err.message.contains("HCLOUD_TOKEN"), "{err}");
    std::fs::write(&file, TOKEN).unwrap();
    assert!(p.list_routes(CLUSTER, &nodes(1)).is_ok());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn connect_errors_name_the_variable_to_fix() {
    let double = cluster(0);
    let err = HcloudRoutes::connect(config(&double, "nope")).unwrap_err();
    assert_eq!(err.variable, "HCLOUD_NETWORK");
    assert!(err.to_string().contains("nope"), "{err}");

    let mut bad_token = config(&double, "k8s");
    bad_token.token = route_controller::cloud::hcloud::TokenSource::Value(
        route_controller::cloud::hcloud::Secret::new("wrong"),
    );
    let err = HcloudRoutes::connect(bad_token).unwrap_err();
    assert_eq!(err.variable, "HCLOUD_TOKEN");
    assert!(!err.to_string().contains(TOKEN));

    let mut missing_file = config(&double, "k8s");
    missing_file.token = route_controller::cloud::hcloud::TokenSource::File(
        std::env::temp_dir().join("route-controller-test-no-such-token-file"),
    );
    let err = HcloudRoutes::connect(missing_file).unwrap_err();
    assert_eq!(err.variable, "HCLOUD_TOKEN_FILE", "{err}");

    let mut unreachable = config(&double, "k8s");
    // A port nothing listens on: bind one, note it, and free it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    unreachable.endpoint = format!("http://127.0.0.1:{port}/v1");
    let err = HcloudRoutes::connect(unreachable).unwrap_err();
    assert_eq!(err.variable, "HCLOUD_ENDPOINT", "{err}");
}

#[test]
fn polls_of_concurrent_actions_share_requests() {
    let double = cluster(8);
    double.allow_concurrent_actions(true);
    double.set_action_duration(ms(300));
    let mut config = config(&double, &NET.to_string());
    config.max_concurrent_mutations = 8;
    config.action_first_poll = ms(100);
    config.action_poll_interval = ms(100);
    let p = Arc::new(HcloudRoutes::connect(config).unwrap());
    p.list_routes(CLUSTER, &nodes(8)).unwrap();
    let started = Instant::now();
    let threads: Vec<_> = (1..=8u64)
        .map(|i| {
            let p = p.clone();
            std::thread::spawn(move || create(&p, i, &pod_cidr(i)))
        })
        .collect();
    for t in threads {
        t.join().unwrap().unwrap();
    }
    let took = started.elapsed();
    assert_eq!(double.routes(NET).len(), 8);
    let polls: Vec<_> = double
        .requests()
        .into_iter()
        .filter(|r| r.path == "/actions")
        .collect();
    // Alone, each action would need about three polls: 24 requests. Shared, a poll
    // takes every action due within half an interval of it, so two polls are more
    // than 50 ms apart: at most one per 50 ms of the wall time the creates took (3 to
    // 4 polls idle; more when a loaded machine spreads the POSTs, never more than this).
    let bound = (took.as_millis() / 50 + 1) as usize;
    println!("{} polls in {took:?} (at most {bound})", polls.len());
    assert!(
        polls.len() <= bound.min(23),
        "{} polls in {took:?}: {polls:?}",
        polls.len()
    );
    assert!(
        polls.iter().any(|r| r.query.matches("id=").count() > 1),
        "{polls:?}"
    );
}

// ---------------------------------------------------------------------------------
// The controller against the double.

mod controller_against_the_double {
    use super::*;
    use route_controller::model::Node;
    use route_controller::run_op;
    use route_controller::{
        Command, Config as ControllerConfig, Controller, Input, Mode, NodeEvent,
    };

    fn node(i: u64) -> Node {
        Node {
            name: worker(i),
            uid: format!("uid-{i}"),
            resource_version: "1".into(),
            provider_id: Some(format!("hcloud://{}", 100 + i)),
            pod_cidrs: vec![pod_cidr(i)],
            addresses: vec![NodeAddress::internal_ip(&ip(i))],
            network_unavailable: None,
        }
    }

    /// Carries out the controller's commands (cloud operations against the provider,
    /// condition writes that succeed) and feeds the replies back, advancing the
    /// virtual clock to the controller's deadlines, until it is quiet for `horizon`.
    fn drive(
        c: &mut Controller,
        provider: &dyn Routes,
        metrics: &Metrics,
        commands: Vec<Command>,
        now: &mut Instant,
    ) {
        let events = drive_with_events(c, provider, metrics, commands, now);
        assert!(events.is_empty(), "unexpected events {events:?}");
    }

    /// [`drive`], returning the events the controller recorded.
    fn drive_with_events(
        c: &mut Controller,
        provider: &dyn Routes,
        metrics: &Metrics,
        mut commands: Vec<Command>,
        now: &mut Instant,
    ) -> Vec<route_controller::NodeEventRecord> {
        let mut events = Vec::new();
        let horizon = Duration::from_secs(5);
        for _ in 0..1000 {
            let mut inputs = Vec::new();
            for command in commands.drain(..) {
                match command {
                    Command::Cloud { id, op, .. } => inputs.push(Input::Cloud {
                        id,
                        reply: run_op(provider, CLUSTER, &op, metrics),
                    }),
                    Command::WriteCondition { node, .. } => inputs.push(Input::ConditionWritten {
                        node,
                        result: Ok(()),
                    }),
                    Command::RecordEvent { event, .. } => events.push(event),
                    Command::PassFinished(_) => {}
                    other => panic!("a command this test does not know: {other:?}"),
                }
            }
            if inputs.is_empty() {
                match c.next_deadline() {
                    Some(d) if d <= *now + horizon => {
                        *now = d.max(*now);
                        commands = c.handle(Input::Tick, *now);
                        continue;
                    }
                    _ => return events,
                }
            }
            for input in inputs {
                commands.extend(c.handle(input, *now));
            }
        }
        panic!("the controller did not settle");
    }

    #[test]
    fn watch_mode_controller_creates_and_deletes_routes_in_the_double() {
        let double = cluster(4);
        double.set_action_duration(Duration::ZERO);
        let provider = connect(&double);
        let metrics = Arc::new(Metrics::new());
        let mut config = ControllerConfig::new(vec![Cidr::parse("10.244.0.0/16").unwrap()]);
        config.mode = Mode::Watch;
        config.seed = Some(7);
        let mut c = Controller::new(config, metrics.clone());
        let mut now = Instant::now();

        // A foreign route outside the cluster CIDR must survive everything.
        double.put_route(NET, "192.168.0.0/24", &ip(1));
        double.clear_requests();

        let mut commands = c.handle(Input::Node(NodeEvent::Init), now);
        for i in 1..=3 {
            commands.extend(c.handle(Input::Node(NodeEvent::InitApply(node(i))), now));
        }
        commands.extend(c.handle(Input::Node(NodeEvent::InitDone), now));
        drive(&mut c, &provider, &metrics, commands, &mut now);
        let mut routes = double.routes(NET);
        routes.sort();
        assert_eq!(
            routes,
            vec![
                ("10.244.1.0/24".to_string(), ip(1)),
                ("10.244.2.0/24".to_string(), ip(2)),
                ("10.244.3.0/24".to_string(), ip(3)),
                ("192.168.0.0/24".to_string(), ip(1)),
            ]
        );
        // The start: the network and one server page, then an action and a poll per
        // route.
        assert_eq!(
            double.requests().len(),
            2 + 3 * 2,
            "{:?}",
            double.requests()
        );

        // A node joins: its route costs the action and one poll, nothing else.
        double.clear_requests();
        now += ms(100);
        let commands = c.handle(Input::Node(NodeEvent::Added(node(4))), now);
        drive(&mut c, &provider, &metrics, commands, &mut now);
        assert!(double.routes(NET).contains(&(pod_cidr(4), ip(4))));
        assert_eq!(double.requests().len(), 2, "{:?}", double.requests());

        // A node leaves: its route goes, the others and the foreign one stay. The
        // route was created in this run, so the delete needs no lookup either.
        double.clear_requests();
        now += ms(100);
        let commands = c.handle(Input::Node(NodeEvent::Deleted(node(2))), now);
        drive(&mut c, &provider, &metrics, commands, &mut now);
        let routes = double.routes(NET);
        assert!(!routes.iter().any(|(d, _)| *d == pod_cidr(2)), "{routes:?}");
        assert_eq!(routes.len(), 4, "{routes:?}");
        assert_eq!(double.requests().len(), 2, "{:?}", double.requests());
        assert_eq!(double.throttled(), 0);
        assert_eq!(double.conflicts(), 0);
    }

    /// Guards hcloud-go's meaning of `maintenance` and `resource_unavailable` on a
    /// POST (issue 36, item 6): the request was refused, not lost, so the route is
    /// simply sent again after its backoff, with no list of the network in between
    /// (as an ambiguous reply would need: one list each).
    #[test]
    fn a_post_refused_for_maintenance_is_retried_without_a_list() {
        for (status, code) in [(403, "maintenance"), (412, "resource_unavailable")] {
            let double = cluster(1);
            double.set_action_duration(Duration::ZERO);
            let provider = connect(&double);
            let metrics = Arc::new(Metrics::new());
            let mut config = ControllerConfig::new(vec![Cidr::parse("10.244.0.0/16").unwrap()]);
            config.mode = Mode::Watch;
            config.seed = Some(7);
            let mut c = Controller::new(config, metrics.clone());
            let mut now = Instant::now();
            let add_route = format!("/networks/{NET}/actions/add_route");
            double.inject("POST", &add_route, 1, Fault::error(status, code));
            double.clear_requests();
            let mut commands = c.handle(Input::Node(NodeEvent::Init), now);
            commands.extend(c.handle(Input::Node(NodeEvent::InitApply(node(1))), now));
            commands.extend(c.handle(Input::Node(NodeEvent::InitDone), now));
            let events = drive_with_events(&mut c, &provider, &metrics, commands, &mut now);
            assert_eq!(double.routes(NET), vec![(pod_cidr(1), ip(1))], "{code}");
            assert!(
                events
                    .iter()
                    .all(|e| e.message.contains("nothing was changed")),
                "{events:?}"
            );
            assert_eq!(double.count("POST", &add_route), 2, "{code}");
            assert_eq!(
                double.count("GET", &format!("/networks/{NET}")),
                1,
                "{code}: listed again: {:?}",
                double.requests()
            );
        }
    }

    /// Guards the move of Hetzner's one-change-at-a-time rule from a semaphore in the
    /// provider into the budget the controller spends: the provider declares one
    /// change at a time and the controller, given that budget, never has two changes
    /// in flight, so the double never answers `conflict` (with
    /// `mutations_at_once` ignored, eight creates go out together).
    #[test]
    fn the_controller_keeps_the_providers_one_change_at_a_time() {
        let double = cluster(8);
        double.set_action_duration(Duration::ZERO);
        let provider = connect(&double);
        let budget = provider.budget().expect("hcloud declares its budget");
        assert_eq!(budget.mutations_at_once, 1);
        let metrics = Arc::new(Metrics::new());
        let mut config = ControllerConfig::new(vec![Cidr::parse("10.244.0.0/16").unwrap()]);
        config.seed = Some(7);
        config.budget = Some(budget);
        let mut c = Controller::new(config, metrics.clone());
        let now = Instant::now();
        let mut commands = c.handle(Input::Node(NodeEvent::Init), now);
        for i in 1..=8 {
            commands.extend(c.handle(Input::Node(NodeEvent::InitApply(node(i))), now));
        }
        commands.extend(c.handle(Input::Node(NodeEvent::InitDone), now));
        let mut most_in_flight = 0;
        for _ in 0..100 {
            let ops: Vec<_> = commands
                .drain(..)
                .filter_map(|cmd| match cmd {
                    Command::Cloud { id, op, .. } => Some((id, op)),
                    _ => None,
                })
                .collect();
            if ops.is_empty() {
                break;
            }
            let changes = ops
                .iter()
                .filter(|(_, op)| !matches!(op, route_controller::CloudOp::List { .. }))
                .count();
            most_in_flight = most_in_flight.max(changes);
            for (id, op) in ops {
                let reply = run_op(&provider, CLUSTER, &op, &metrics);
                commands.extend(c.handle(Input::Cloud { id, reply }, now));
            }
        }
        assert_eq!(most_in_flight, 1, "changes dispatched together");
        assert_eq!(double.routes(NET).len(), 8);
        assert_eq!(double.conflicts(), 0);
    }
}

// --- fencing -----------------------------------------------------------------------

/// Guards the fence check in the client's one request function: a route change whose
/// POST was answered after the fence closed (the lease was lost while the reply was
/// held back) stops there, as `Fenced`, without polling its action; and nothing at all
/// is sent through a closed fence. Remove the check from `exchange` and the action is
/// polled (and a new create is sent).
#[test]
fn a_closed_fence_stops_a_route_change_between_its_post_and_its_polls() {
    use fault_proxy::{FaultProxy, Mode};
    use route_controller::Fence;
    let double = cluster(2);
    double.set_action_duration(ms(200));
    let address = double
        .endpoint()
        .trim_start_matches("http://")
        .trim_end_matches("/v1")
        .parse()
        .expect("the double's address");
    let proxy = FaultProxy::start(address);
    let mut c = config(&double, &NET.to_string());
    c.endpoint = format!("http://{}/v1", proxy.addr());
    let fence = Fence::new();
    fence.open_for_good();
    let p = Arc::new(
        HcloudRoutes::connect(c)
            .expect("connect through the proxy")
            .with_fence(fence.clone()),
    );
    assert_eq!(fence.request_bound(), Some(Duration::from_secs(3)));
    // Servers known from a list, as in a running controller: the create's first
    // request is then its POST.
    p.list_routes(CLUSTER, &nodes(2)).expect("list");
    double.clear_requests();

    proxy.set(Mode::HoldReplies);
    let creating = {
        let p = p.clone();
        std::thread::spawn(move || create(&p, 1, "10.244.1.0/24"))
    };
    let posted = (0..500).any(|_| {
        std::thread::sleep(ms(10));
        double.count("POST", "/networks") == 1
    });
    assert!(
        posted,
        "the POST reached the double: {:?}",
        double.requests()
    );
    fence.close();
    let closed = Instant::now();
    proxy.set(Mode::Pass);
    let err = creating
        .join()
        .expect("the create returns")
        .expect_err("stopped after its POST");
    println!(
        "the fenced create returned {:?} after the fence closed",
        closed.elapsed()
    );
    assert_eq!(err.kind, CloudErrorKind::Fenced, "{err}");
    assert!(err.message.contains("not followed to its end"), "{err}");
    std::thread::sleep(ms(300));
    let after: Vec<_> = double
        .requests()
        .into_iter()
        .filter(|r| r.at > closed)
        .collect();
    assert!(after.is_empty(), "sent after the fence closed: {after:?}");

    // A closed fence sends nothing at all.
    let before = double.requests().len();
    assert_eq!(
        kind_of(create(&p, 2, "10.244.2.0/24")),
        CloudErrorKind::Fenced
    );
    assert_eq!(
        kind_of(p.list_routes(CLUSTER, &nodes(2))),
        CloudErrorKind::Fenced
    );
    assert_eq!(double.requests().len(), before, "{:?}", double.requests());
}
