//! Keeps the Go program that runs upstream's real route controller
//! (`tests/kube-apiserver/upstream-route-controller`, used by
//! `cargo bench -- upstream`) building and working: against a real
//! kube-apiserver, in watch mode, it creates a route for each node and reports
//! what its cloud saw.

#[path = "support/kube_apiserver.rs"]
mod kube_apiserver;
#[path = "support/upstream_controller.rs"]
mod upstream_controller;

use std::thread;
use std::time::{Duration, Instant, UNIX_EPOCH};

use kube_apiserver::{KubeApiserver, scratch_dir, shared};
use upstream_controller::{
    UpstreamController, UpstreamOptions, UpstreamReport, go_duration, parse_rfc3339_utc,
};

/// The node's `NetworkUnavailable` condition as `(status, reason)`, if set.
fn network_unavailable(api: &KubeApiserver, node: &str) -> Option<(String, String)> {
    let node = api.get_json(&format!("/api/v1/nodes/{node}"));
    node["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "NetworkUnavailable")
        .map(|c| {
            (
                c["status"].as_str().unwrap_or_default().to_string(),
                c["reason"].as_str().unwrap_or_default().to_string(),
            )
        })
}

#[test]
fn upstream_watch_mode_creates_a_route_for_each_node_and_marks_its_network_available() {
    let api = shared();
    let nodes = [
        ("upstream-smoke-a", "10.244.1.0/24", "10.0.1.1"),
        ("upstream-smoke-b", "10.244.2.0/24", "10.0.2.1"),
    ];
    for (name, cidr, ip) in nodes {
        api.create_node(name, &[cidr], &[("InternalIP", ip)]);
    }
    let dir = scratch_dir("upstream-controller");
    let mut options = UpstreamOptions::new(api.admin_kubeconfig(), "10.244.0.0/16");
    options.watch = true;
    options.cloud_latency = Duration::from_millis(10);
    let controller = UpstreamController::start(&options, &dir);

    // Upstream patches the condition after the pass's creates have finished.
    let deadline = Instant::now() + Duration::from_secs(30);
    let available = Some(("False".to_string(), "RouteCreated".to_string()));
    while nodes
        .iter()
        .any(|(name, _, _)| network_unavailable(api, name) != available)
    {
        assert!(
            Instant::now() < deadline,
            "no NetworkUnavailable=False/RouteCreated on both nodes within 30 s; see {}",
            controller.log_file().display()
        );
        thread::sleep(Duration::from_millis(100));
    }

    let report = controller.stop();
    let expected: Vec<(String, String)> = nodes
        .iter()
        .map(|(name, cidr, _)| (name.to_string(), cidr.to_string()))
        .collect();
    assert_eq!(report.current, expected, "routes held at the end");
    assert_eq!(
        report.routes.keys().cloned().collect::<Vec<_>>(),
        expected,
        "routes created"
    );
    assert_eq!((report.create, report.delete), (2, 0));
    assert!(report.list >= 1, "a pass lists the routes first");
    assert_eq!(
        report.calls.len() as u64,
        report.list + report.create + report.delete,
        "the call log matches the counts"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn report_times_parse_as_go_writes_them() {
    let at = |s: &str| {
        parse_rfc3339_utc(s)
            .unwrap_or_else(|| panic!("{s} does not parse"))
            .duration_since(UNIX_EPOCH)
            .unwrap()
    };
    assert_eq!(at("1970-01-01T00:00:00Z"), Duration::ZERO);
    assert_eq!(at("2000-02-29T00:00:00Z"), Duration::from_secs(951_782_400));
    assert_eq!(
        at("2026-11-30T22:12:08.585311Z"),
        Duration::new(1_796_076_728, 585_311_000)
    );
    assert_eq!(
        at("2026-11-30T22:12:08.000000001Z"),
        Duration::new(1_796_076_728, 1)
    );
    for bad in [
        "2026-11-30T22:12:08+01:00",
        "2026-13-01T00:00:00Z",
        "2026-11-30 22:12:08Z",
        "2026-11-30T22:12:08.1234567890Z",
    ] {
        assert!(parse_rfc3339_utc(bad).is_none(), "{bad} parsed");
    }
    assert_eq!(go_duration(Duration::from_millis(100)), "100ms");
    assert_eq!(go_duration(Duration::from_secs(43_200)), "43200s");
    assert_eq!(go_duration(Duration::from_micros(1500)), "1500us");

    let report = UpstreamReport::parse(
        r#"{"list":1,"create":1,"delete":0,
            "routes":{"n1 10.244.1.0/24":"2026-11-30T22:12:08.5Z"},
            "calls":[{"op":"list","at":"2026-11-30T22:12:08.3Z"},{"op":"create","at":"2026-11-30T22:12:08.4Z"}],
            "current":["n1 10.244.1.0/24"]}"#,
    )
    .unwrap();
    let from = parse_rfc3339_utc("2026-11-30T22:12:08.35Z").unwrap();
    let to = parse_rfc3339_utc("2026-11-30T22:12:09Z").unwrap();
    assert_eq!(
        (
            report.calls_between("list", from, to),
            report.calls_between("create", from, to)
        ),
        (0, 1)
    );
    assert_eq!(
        report.current,
        vec![("n1".to_string(), "10.244.1.0/24".to_string())]
    );
}
