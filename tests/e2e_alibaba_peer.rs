//! The peer, run for real: cloud-provider-alibaba-cloud's `cloud-controller-manager`
//! (its route controller only) against the Alibaba double and a real kube-apiserver,
//! counted in VPC API requests by action, for the side-by-side table in
//! benches/README.md ("Alibaba Cloud: the peer").
//!
//! Ignored by default: the peer cannot be built on a fresh machine. Its module
//! (`k8s.io/cloud-provider-alibaba-cloud`) and two of its dependencies
//! (`alibabacloud-go/eflo-controller-20221215/v2`, `nlb-20220430/v4`) are not served by
//! the Go module proxy (403), so it builds only from a checkout of its source with its
//! `vendor/` (`go build -mod=vendor ./cmd/manager`). To run it, set
//! `RC_ALIBABA_PEER=/path/to/cloud-controller-manager` and
//! `cargo test --test e2e_alibaba_peer -- --ignored --nocapture`; without the variable
//! it fails saying so.

#[path = "support/alibaba_double.rs"]
mod alibaba_double;
#[path = "support/kube_apiserver.rs"]
mod kube_apiserver;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use alibaba_double::{
    AlibabaDouble, DEFAULT_TABLE, DEFAULT_VPC, DEFAULT_VSWITCH, Instance, REGION,
};
use base64::Engine as _;
use kube_apiserver::{KubeApiserver, scratch_dir};
use serde_json::json;

const NODES: usize = 100;
const CLUSTER_CIDR: &str = "10.244.0.0/16";

fn instance(k: usize) -> String {
    format!("i-peer{k:04}")
}

fn pod_cidr(k: usize) -> String {
    format!("10.244.{k}.0/24")
}

fn create_node(api: &KubeApiserver, name: &str, k: usize, cidr: &str) {
    let node = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name},
        "spec": {"podCIDR": cidr, "podCIDRs": [cidr],
                 "providerID": format!("{REGION}.{}", instance(k))},
        "status": {"addresses": [{"type": "InternalIP", "address": format!("192.168.0.{}", 10 + k % 200)}]},
    });
    api.post_json("/api/v1/nodes", &node);
}

struct Peer(Child);

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits (polling the double, the peer being a real process) until `done` holds;
/// returns how long it took.
fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) -> Duration {
    let started = Instant::now();
    while !done() {
        assert!(
            started.elapsed() < limit,
            "the peer did not {what} within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    started.elapsed()
}

fn delta(
    before: &BTreeMap<String, usize>,
    after: &BTreeMap<String, usize>,
) -> BTreeMap<String, usize> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0)))
        .filter(|(_, v)| *v > 0)
        .collect()
}

#[test]
#[ignore = "needs the peer's binary (RC_ALIBABA_PEER), which the Go proxy cannot build; see the module doc"]
fn the_peer_routes_nodes_in_the_double() {
    let binary = PathBuf::from(std::env::var_os("RC_ALIBABA_PEER").expect(
        "set RC_ALIBABA_PEER to cloud-provider-alibaba-cloud's cloud-controller-manager, built from its \
         source with `go build -mod=vendor ./cmd/manager` (its module is not on the Go proxy)",
    ));
    let api = KubeApiserver::start_fresh();
    let double = AlibabaDouble::start();
    for k in 0..NODES + 2 {
        double.add_instance(Instance::new(
            &instance(k),
            DEFAULT_VPC,
            &format!("192.168.0.{}", 10 + k % 200),
        ));
    }
    let dir = scratch_dir("alibaba-peer");
    let (id, secret) = double.access_key();
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let config = json!({"Global": {
        "region": REGION, "vpcid": DEFAULT_VPC, "vswitchid": DEFAULT_VSWITCH,
        "routeTableIDs": DEFAULT_TABLE,
        "accessKeyID": b64(id), "accessKeySecret": b64(secret),
    }});
    let config_path = dir.join("cloud-config");
    std::fs::write(&config_path, config.to_string()).expect("write the cloud config");
    let log = std::fs::File::create(dir.join("peer.log")).expect("create the peer's log");

    for k in 0..NODES {
        create_node(&api, &format!("node-{k}"), k, &pod_cidr(k));
    }
    let _peer = Peer(
        Command::new(&binary)
            .arg(format!("--kubeconfig={}", api.admin_kubeconfig().display()))
            .arg(format!("--cloud-config={}", config_path.display()))
            .args([
                "--controllers=route",
                "--configure-cloud-routes=true",
                "--allocate-node-cidrs=true",
                &format!("--cluster-cidr={CLUSTER_CIDR}"),
                "--leader-elect=false",
                "--metrics-bind-addr=0",
                "--health-probe-bind-addr=0",
                "--route-reconciliation-period=1m",
                "--v=2",
            ])
            .env("VPC_ENDPOINT", double.host())
            .env("ECS_ENDPOINT", double.host())
            .env("ALICLOUD_CLIENT_SCHEME", "HTTP")
            .env("METADATA_ENDPOINT", double.endpoint())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", binary.display())),
    );

    // The test plays the cloud's clock: a batch settles BATCH after the double accepted
    // it (the peer never reads an entry's state, so reads cannot drive it).
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                double.settle_older_than(BATCH);
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        let result =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| scenario(&api, &double)));
        stop.store(true, Ordering::Relaxed);
        if let Err(e) = result {
            std::panic::resume_unwind(e);
        }
    });
}

/// How long the double takes to carry out a batch in this run.
const BATCH: Duration = Duration::from_secs(1);

fn refusals(double: &AlibabaDouble, from: usize) -> Vec<String> {
    double
        .requests()
        .into_iter()
        .skip(from)
        .filter(|r| r.status != 200)
        .map(|r| format!("{} {} {}", r.action, r.status, r.code))
        .collect()
}

fn scenario(api: &KubeApiserver, double: &AlibabaDouble) {
    let all = || double.available(DEFAULT_TABLE).len() == NODES;
    let took = wait_for("route 100 nodes", Duration::from_secs(120), all);
    let routes = double.available(DEFAULT_TABLE);
    for k in 0..NODES {
        assert!(
            routes.contains(&(pod_cidr(k), instance(k))),
            "no route for node-{k}"
        );
    }
    eprintln!(
        "start-up, {NODES} nodes: all routes Available {took:.1?} after the peer started; calls {:?}; refused {:?}",
        double.calls(),
        refusals(double, 0)
    );

    // The peer patches each node's NetworkUnavailable condition after its batch, one
    // node at a time, and remembers a node's route only then; a node deleted before
    // that loses its route to no one (its route stays: seen in a first run). So the
    // next step waits for the peer's start-up to end.
    let patched = wait_for(
        "patch every node's condition",
        Duration::from_secs(120),
        || {
            let nodes = api.get_json("/api/v1/nodes");
            let items = nodes["items"].as_array().cloned().unwrap_or_default();
            items.len() == NODES
                && items.iter().all(|n| {
                    n["status"]["conditions"].as_array().is_some_and(|c| {
                        c.iter()
                            .any(|c| c["type"] == "NetworkUnavailable" && c["status"] == "False")
                    })
                })
        },
    );
    eprintln!("the peer's start-up ended (every node's condition patched) {patched:.1?} later");

    // A rolling replacement: node-0 goes, node-100 (a new instance) comes.
    let (before, seen) = (double.calls(), double.requests().len());
    api.delete("/api/v1/nodes/node-0");
    create_node(api, &format!("node-{NODES}"), NODES, &pod_cidr(NODES));
    let took = wait_for("replace node-0", Duration::from_secs(90), || {
        let r = double.available(DEFAULT_TABLE);
        r.contains(&(pod_cidr(NODES), instance(NODES)))
            && !r.iter().any(|(_, hop)| hop == &instance(0))
            && double.entries(DEFAULT_TABLE).len() == NODES
    });
    eprintln!(
        "replacement of one node: {took:.1?}; calls {:?}; refused {:?}",
        delta(&before, &double.calls()),
        refusals(double, seen)
    );

    // A node re-registered under its name with another pod CIDR (podCIDR is immutable,
    // so a change of CIDR is a new Node object: a new UID, which the peer watches).
    let (before, seen) = (double.calls(), double.requests().len());
    api.delete("/api/v1/nodes/node-1");
    create_node(api, "node-1", 1, "10.244.201.0/24");
    let took = wait_for("route node-1's new CIDR", Duration::from_secs(90), || {
        double
            .available(DEFAULT_TABLE)
            .contains(&("10.244.201.0/24".into(), instance(1)))
    });
    let old_left = double
        .available(DEFAULT_TABLE)
        .contains(&(pod_cidr(1), instance(1)));
    eprintln!(
        "node-1's CIDR changed (re-registered): new route after {took:.1?}, old route still there: {old_left}; calls {:?}; refused {:?}",
        delta(&before, &double.calls()),
        refusals(double, seen)
    );

    // Idle across one periodic reconciliation (--route-reconciliation-period=1m).
    let before = double.calls();
    std::thread::sleep(Duration::from_secs(65));
    let old_left = double
        .available(DEFAULT_TABLE)
        .contains(&(pod_cidr(1), instance(1)));
    eprintln!(
        "idle 65 s: calls {:?}; node-1's old route still there after a periodic pass: {old_left}",
        delta(&before, &double.calls())
    );
}
