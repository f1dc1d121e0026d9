//! End to end: `route-controller run --cloud-provider=exec` with the reference Linux
//! router plugin (testdata/plugins/linux-router) running inside a network namespace
//! of the test's own (`ip netns exec`, as it would run on a gateway or through ssh),
//! against a real kube-apiserver. The kernel's routing table must match the nodes'
//! pod CIDRs after start-up, a node deletion, a CIDR change and a restart; a route of
//! others in the same table, inside the cluster CIDR, is never touched. It runs twice:
//! with the plugin's batching off (one create or delete per call) and on (describe
//! declares batchSize 100; the changes go out in `apply` calls, as the metrics show).
//!
//! Needs root, `ip` (iproute2) and python3: without them the test fails saying what to
//! install or how to run it (tests/support/netns.rs); it never skips in silence.

#[path = "support/controller_process.rs"]
mod controller_process;
#[path = "support/e2e_cluster.rs"]
mod e2e_cluster;
#[path = "support/kube_apiserver.rs"]
mod kube_apiserver;
#[path = "support/netns.rs"]
mod netns;
#[path = "support/tempdir.rs"]
mod tempdir;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use controller_process::{ControllerProcess, Spawn};
use e2e_cluster::{Identity, create_node, delete_node, poll_until, wait_for_network_unavailable};
use kube_apiserver::KubeApiserver;
use netns::Netns;

const PATIENCE: Duration = Duration::from_secs(30);
const TABLE: &str = "100";
const PROTO: &str = "201";
const CLUSTER_CIDR: &str = "10.244.0.0/16";
const WATCH_MODE: &str =
    "--feature-gates=CloudControllerManagerWatchBasedRoutesReconciliation=true";
/// Someone else's route in the plugin's table, inside the cluster CIDR, to no node.
const FOREIGN: (&str, &str) = ("10.244.200.0/24", "10.0.0.99");

/// The plugin's routes in the kernel's table, as `(destination, gateway)`; fails the
/// test if the route of others changed.
fn kernel_routes(ctl: &mut ControllerProcess, ns: &Netns) -> BTreeSet<(String, String)> {
    let all = ns.routes(TABLE);
    let foreign = (
        FOREIGN.0.to_string(),
        FOREIGN.1.to_string(),
        "static".to_string(),
    );
    if !all.contains(&foreign) {
        ctl.fail(&format!(
            "the route of others {FOREIGN:?} was touched; table {TABLE}: {all:?}"
        ));
    }
    all.into_iter()
        .filter(|(_, _, proto)| proto == PROTO)
        .map(|(d, g, _)| (d, g))
        .collect()
}

fn wait_for_table(ctl: &mut ControllerProcess, ns: &Netns, want: &[(&str, &str)], step: &str) {
    let want: BTreeSet<(String, String)> = want
        .iter()
        .map(|(d, g)| (d.to_string(), g.to_string()))
        .collect();
    let started = Instant::now();
    let matched = poll_until(PATIENCE, || (kernel_routes(ctl, ns) == want).then_some(()));
    if matched.is_none() {
        let have = kernel_routes(ctl, ns);
        ctl.fail(&format!(
            "{step}: table {TABLE} (proto {PROTO}) in {} is {have:?}, want {want:?} after {PATIENCE:?}",
            ns.name
        ));
    }
    eprintln!("{step}: table matches after {:?}", started.elapsed());
}

fn node(api: &KubeApiserver, name: &str, cidr: &str, ip: &str) {
    create_node(api, name, &[cidr], ip, "");
}

fn controller(identity: &Identity, config: &Path) -> Spawn {
    Spawn::new()
        .arg("--cloud-provider=exec")
        .arg(format!("--cloud-config={}", config.display()))
        .arg(format!("--cluster-cidr={CLUSTER_CIDR}"))
        .arg(WATCH_MODE)
        .args(identity.flags())
}

fn successes(ctl: &mut ControllerProcess, operation: &str) -> f64 {
    ctl.metric(
        "route_controller_cloud_requests_total",
        &[
            ("provider", "exec"),
            ("operation", operation),
            ("outcome", "success"),
        ],
    )
}

#[test]
fn the_kernel_table_follows_the_nodes_through_start_deletion_cidr_change_and_restart() {
    follow_the_nodes(Batching::Off);
}

#[test]
fn the_kernel_table_follows_the_nodes_in_apply_batches_through_start_deletion_cidr_change_and_restart()
 {
    follow_the_nodes(Batching::On);
}

/// The plugin's `LINUX_ROUTER_BATCH`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Batching {
    /// `0`: batchSize 1, one create or delete per call.
    Off,
    /// `100`: the controller sends `apply`.
    On,
}

/// The calls that made routes: `apply` with batching, `create` and `delete` without;
/// the others are not used at all. `at` names the step for the failure message.
fn check_calls(
    ctl: &mut ControllerProcess,
    batching: Batching,
    creates: f64,
    deletes: f64,
    at: &str,
) {
    let metrics = ctl
        .http_get("/metrics")
        .map(|(_, body)| body)
        .unwrap_or_default();
    let calls: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("route_controller_cloud_requests_total{"))
        .filter(|l| !l.ends_with(" 0"))
        .collect();
    let (create, delete, apply) = (
        successes(ctl, "create"),
        successes(ctl, "delete"),
        successes(ctl, "apply"),
    );
    match batching {
        Batching::On => {
            assert!(
                apply > 0.0,
                "{at}: the changes go out in apply calls: {calls:?}"
            );
            assert_eq!(
                (create, delete),
                (0.0, 0.0),
                "{at}: no single create or delete: {calls:?}"
            );
        }
        Batching::Off => {
            assert_eq!(apply, 0.0, "{at}: no apply without batching: {calls:?}");
            assert_eq!(create, creates, "{at}: creates: {calls:?}");
            assert_eq!(delete, deletes, "{at}: deletes: {calls:?}");
        }
    }
}

fn follow_the_nodes(batching: Batching) {
    let label = match batching {
        Batching::Off => "e2e",
        Batching::On => "e2eb",
    };
    let ns = Netns::new(label, "10.0.0.1/16");
    ns.ip(&[
        "route", "add", FOREIGN.0, "via", FOREIGN.1, "table", TABLE, "proto", "static",
    ]);
    let dir = tempdir::TempDir::new(&format!("{label}-exec-router"));
    // The controller's environment is cleared by the harness: the plugin gets PATH
    // (for python3) through Env=.
    let path = std::env::var("PATH").unwrap_or_default();
    let batch = match batching {
        Batching::Off => 0,
        Batching::On => 100,
    };
    let config = dir.write(
        "plugin.conf",
        ns.plugin_config(
            &dir.path().join("state.json"),
            &format!("Env=PATH={path}\nEnv=LINUX_ROUTER_BATCH={batch}\nTimeout=10s\n"),
        )
        .replace("Command=ip", "Command=/usr/sbin/ip"),
    );
    let api = KubeApiserver::start_fresh();
    let identity = Identity::provision(&api, "e2e-exec-router");
    node(&api, "n1", "10.244.1.0/24", "10.0.0.11");
    node(&api, "n2", "10.244.2.0/24", "10.0.0.12");
    node(&api, "n3", "10.244.3.0/24", "10.0.0.13");

    let mut ctl = controller(&identity, &config).spawn(&format!("{label}_exec_router_first"));
    ctl.wait_ready(PATIENCE);
    wait_for_table(
        &mut ctl,
        &ns,
        &[
            ("10.244.1.0/24", "10.0.0.11"),
            ("10.244.2.0/24", "10.0.0.12"),
            ("10.244.3.0/24", "10.0.0.13"),
        ],
        "start-up",
    );
    // Conditions work as with a built-in provider.
    let names = ["n1".to_string(), "n2".to_string(), "n3".to_string()];
    if let Err(e) = wait_for_network_unavailable(&api, &names, "False", "RouteCreated", PATIENCE) {
        ctl.fail(&e);
    }
    // The conditions are written once the calls' replies are in, so are their counts.
    check_calls(&mut ctl, batching, 3.0, 0.0, "start-up");

    delete_node(&api, "n3");
    wait_for_table(
        &mut ctl,
        &ns,
        &[
            ("10.244.1.0/24", "10.0.0.11"),
            ("10.244.2.0/24", "10.0.0.12"),
        ],
        "node deletion",
    );

    // spec.podCIDRs cannot change in place: the node is registered again with another.
    delete_node(&api, "n2");
    node(&api, "n2", "10.244.22.0/24", "10.0.0.12");
    wait_for_table(
        &mut ctl,
        &ns,
        &[
            ("10.244.1.0/24", "10.0.0.11"),
            ("10.244.22.0/24", "10.0.0.12"),
        ],
        "CIDR change",
    );
    ctl.terminate();

    // While no controller runs: one node goes, one comes.
    delete_node(&api, "n1");
    node(&api, "n4", "10.244.4.0/24", "10.0.0.14");
    let mut ctl = controller(&identity, &config).spawn(&format!("{label}_exec_router_restart"));
    ctl.wait_ready(PATIENCE);
    wait_for_table(
        &mut ctl,
        &ns,
        &[
            ("10.244.22.0/24", "10.0.0.12"),
            ("10.244.4.0/24", "10.0.0.14"),
        ],
        "restart",
    );
    // The restarted controller found n2's route with its node (the plugin's state
    // file): it made only the changes, no delete and create of a route that was right.
    // The kernel may show a route before the plugin's reply reached the controller:
    // wait for the pass to end.
    ctl.wait_for_log("routes created 1, deleted 1, kept 1,", PATIENCE);
    // Only n4's route is created and only n1's deleted.
    check_calls(&mut ctl, batching, 1.0, 1.0, "restart");
    let log = ctl.log();
    let declared = match batching {
        Batching::Off => "batch size 1 (one create or delete per call)",
        Batching::On => "batch size 100 (changes go out in apply calls)",
    };
    assert!(
        log.contains("--cloud-provider=exec: plugin linux-router (describe")
            && log.contains(declared),
        "{declared:?} missing: {log}"
    );
    ctl.terminate();
}
