//! The argument lists of real Hetzner CCM deployments (`testdata/ccm-args/`, each with
//! where it came from) start `route-controller run` unchanged: against a real
//! kube-apiserver and the Hetzner Cloud test double, with the environment those
//! deployments give the CCM, the controller routes a node's pod CIDR.
//!
//! What it guards: the promise that an operator swaps the CCM for route-controller by
//! editing one image name. It fails if any flag of these lists is refused, if a flag
//! that applies is misread (the cluster CIDR, the period, leader election off), or if
//! the controller does not do its job with them.

#[path = "support/controller_process.rs"]
mod controller_process;
#[path = "support/e2e_cluster.rs"]
mod e2e_cluster;
#[path = "support/e2e_hcloud.rs"]
mod e2e_hcloud;
#[path = "support/hcloud_double.rs"]
mod hcloud_double;
#[path = "support/kube_apiserver.rs"]
mod kube_apiserver;

use std::time::Duration;

use controller_process::Spawn;
use e2e_cluster::{create_node, poll_until};
use e2e_hcloud::{HcloudCluster, server_ip};

/// Patience for the first route: the machine is shared with other builds.
const PATIENCE: Duration = Duration::from_secs(60);

/// The arguments of a testdata file, without comments and the program's path.
fn args(file: &str) -> Vec<String> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata/ccm-args")
        .join(file);
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .skip(1)
        .map(String::from)
        .collect()
}

/// Starts the controller with `file`'s arguments and waits for the route of one node
/// whose pod CIDR is `pod_cidr`; every flag the list gives that is not ours must be
/// named in a warning.
fn routes_with(file: &str, pod_cidr: &str) {
    let args = args(file);
    let cluster = HcloudCluster::start("ccm-args", [1]);
    create_node(
        &cluster.api,
        "worker-1",
        &[pod_cidr],
        &server_ip(1),
        "hcloud://1",
    );
    // As the Deployment's pod gets them: the token and network from the Secret, the
    // cluster from the environment (in-cluster config there, a kubeconfig here), and
    // the double's URL. The harness adds only its port choices (port 0, never a fixed
    // port on a shared machine), after the list, where the last value wins.
    let spawn = Spawn::new()
        .args(args.iter().cloned())
        .arg("--secure-port=0")
        .env(
            "KUBECONFIG",
            cluster.identity.kubeconfig.to_string_lossy().into_owned(),
        );
    let spawn = cluster.hetzner.env(spawn, cluster.hetzner.double.token());
    let mut ctl = spawn.spawn(&format!("ccm-args-{file}"));
    let gateway = server_ip(1);
    let routed = poll_until(PATIENCE, || {
        cluster.hetzner.has_route(pod_cidr, &gateway).then_some(())
    });
    if routed.is_none() {
        ctl.fail(&format!(
            "{file}: no route {pod_cidr} via {gateway} after {PATIENCE:?}; routes: {:?}",
            cluster.hetzner.routes()
        ));
    }
    let log = ctl.log();
    for ignored in ["--allow-untagged-cloud", "--allocate-node-cidrs"] {
        if args.iter().any(|a| a.starts_with(ignored)) {
            assert!(
                log.lines()
                    .any(|l| l.contains(&format!("{ignored} is a cloud-controller-manager flag"))),
                "{file}: no warning about {ignored}:\n{log}"
            );
        }
    }
    assert!(
        log.contains("leader election off"),
        "{file}: --leader-elect=false must turn leader election off:\n{log}"
    );
    ctl.terminate();
}

#[test]
fn the_hetzner_charts_arguments_start_the_controller_unchanged() {
    routes_with("hcloud-chart.args", "10.244.1.0/24");
}

#[test]
fn kube_hetzners_arguments_start_the_controller_unchanged() {
    routes_with("kube-hetzner.args", "10.42.1.0/24");
}

#[test]
fn kube_hetzners_helm_values_start_the_controller_unchanged() {
    routes_with("kube-hetzner-helm.args", "10.244.1.0/24");
}
