//! Ours beside upstream's route controller with its real GCE provider, both against
//! the same Compute double, counted in Compute API requests by method.
//!
//! - [`GcePeer`]: `tests/kube-apiserver/gcp-route-controller` (upstream's
//!   `k8s.io/cloud-provider/controllers/route` with `k8s.io/cloud-provider-gcp`'s
//!   `Routes`) as a child process, or our binary with `--cloud-provider=gce`; both read
//!   the same `gce.conf` (`api-endpoint` and `token-url` on the double, the token URL
//!   authenticated with the double's metadata server through `GCE_METADATA_HOST`).
//! - [`GceCluster`]: a project of the double (network `k8s`, the three zones of
//!   `europe-west1`, `multizone = true`) with an instance per node, spread over the
//!   zones in order, and the node script against the real kube-apiserver: nodes named
//!   after their instances, with `gce://` providerIDs.
//! - [`run_gce_peer`]: one measured run with the script of `aws_peer` (start-up and a
//!   rolling replacement, or an idle period with the poll period shortened). Requests
//!   are the double's log by method (token endpoints included); a route counts as made
//!   when its operation is done in the double (the moment GCE would route).
//!
//! The script, timings, run figures and formatting are `aws_peer`'s, so that both
//! peers tables are measured alike. Include with `kube_apiserver.rs`, `moto.rs`,
//! `aws_peer.rs` and `gce_double.rs`:
//!
//! ```ignore
//! #[path = "support/kube_apiserver.rs"] mod kube_apiserver;
//! #[path = "support/moto.rs"] mod moto;
//! #[path = "support/aws_peer.rs"] mod aws_peer;
//! #[path = "support/gce_double.rs"] mod gce_double;
//! #[path = "support/gce_peer.rs"] mod gce_peer;
//! ```

// Every user of this module uses only part of it.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use crate::aws_peer::{
    Controller, PeerRun, Script, Timing, delete_all_nodes, ours_command, spawn_ours,
};
use crate::gce_double::{GceDouble, Recorded, ZONES};
use crate::kube_apiserver::{KubeApiserver, gcp_route_controller_binary};

/// How long a controller may take to be ready.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// The cluster name (routes are `peers-<node UID>`).
pub const CLUSTER: &str = "peers";
pub const CLUSTER_CIDR: &str = "10.244.0.0/16";
pub const PROJECT: &str = "peers-project";
pub const NETWORK: &str = "k8s";
/// The body cloud-provider-gcp POSTs to `token-url`.
const TOKEN_BODY: &str = "peers-token-body";

// ---- counting ----------------------------------------------------------------------

/// Requests by method (`routes.insert`, `globalOperations.wait`, `instances.get`, ...,
/// and the token endpoints' `metadata.token`, `tokenUrl`), answered in `[from, to)`.
/// A request the double does not serve counts as `other <METHOD> <path>`.
pub fn count_by_method(
    double: &GceDouble,
    from: SystemTime,
    to: SystemTime,
) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    let within = |at: SystemTime| at >= from && at < to;
    for r in double.requests().iter().filter(|r| within(r.at)) {
        *counts.entry(method_of(r)).or_insert(0) += 1;
    }
    for (endpoint, at) in double.token_calls() {
        if within(at) {
            *counts.entry(endpoint.to_string()).or_insert(0) += 1;
        }
    }
    counts
}

fn method_of(r: &Recorded) -> String {
    match r.call() {
        "other" => format!("other {} {}", r.method, r.path),
        call => call.to_string(),
    }
}

// ---- the cluster: the double's project and the node script -------------------------

/// The double's project and the script's nodes: node `k` is `node-k` on instance
/// `node-k` in zone `ZONES[k % 3]`, with pod CIDR `10.244.k.0/24`.
pub struct GceCluster {
    pub double: GceDouble,
    /// Instances (and nodes) the script may use.
    pub instances: usize,
}

impl GceCluster {
    /// A double whose operations take `operation` to finish, with `instances`
    /// instances that can forward IP.
    pub fn create(instances: usize, operation: Duration) -> GceCluster {
        let double = GceDouble::start(PROJECT, NETWORK, None);
        double.set_operation_duration(operation);
        let cluster = GceCluster { double, instances };
        cluster.renew();
        cluster
    }

    /// Puts every instance (back) in place.
    pub fn renew(&self) {
        for k in 0..self.instances {
            self.double.add_instance(zone(k), &node_name(k), true);
        }
    }

    /// Node `k`'s instance goes (a node group replacing it); its routes stay.
    pub fn terminate(&self, k: usize) {
        self.double.remove_instance(zone(k), &node_name(k));
    }

    /// The `gce.conf` both controllers read.
    pub fn gce_conf(&self) -> String {
        format!(
            "[global]\nproject-id = {PROJECT}\nlocal-zone = {}\nnetwork-name = {NETWORK}\n\
             subnetwork-name = nodes\nnode-tags = {CLUSTER}-node\nmultizone = true\n\
             api-endpoint = {}\ntoken-url = {}\ntoken-body = {TOKEN_BODY}\n",
            ZONES[0],
            self.double.api_endpoint(),
            self.double.alt_token_url(TOKEN_BODY),
        )
    }

    /// Routes in the double: (destination, next hop instance).
    pub fn routes(&self) -> Vec<(String, String)> {
        self.double
            .routes()
            .into_iter()
            .map(|r| (r.dest_range, r.next_hop_instance))
            .collect()
    }

    /// Puts node `k`'s route in place as cloud-provider-gcp names it (uncounted).
    pub fn put_route(&self, k: usize, uid: &str) {
        self.double.put_route(crate::gce_double::RouteEntry {
            name: format!("{CLUSTER}-{uid}"),
            network: self.double.network_url(NETWORK),
            dest_range: pod_cidr(k),
            next_hop_instance: self.double.instance_url(zone(k), &node_name(k)),
            priority: 1000,
            description: "k8s-node-route".into(),
            id: 0,
        });
    }

    /// Creates node `k`; returns its UID.
    pub fn create_node(&self, api: &KubeApiserver, k: usize) -> String {
        let name = node_name(k);
        let node = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name},
            "spec": {"podCIDR": pod_cidr(k), "podCIDRs": [pod_cidr(k)],
                     "providerID": format!("gce://{PROJECT}/{}/{name}", zone(k))},
            "status": {"addresses": [{"type": "InternalIP", "address": format!("10.0.{}.{}", k / 200, k % 200 + 2)},
                                      {"type": "Hostname", "address": name}]},
        });
        let created = api.post_json("/api/v1/nodes", &node);
        created["metadata"]["uid"]
            .as_str()
            .unwrap_or_else(|| panic!("node {name} created without a uid: {created}"))
            .to_string()
    }

    pub fn delete_node(&self, api: &KubeApiserver, k: usize) {
        api.delete(&format!("/api/v1/nodes/{}", node_name(k)));
    }
}

pub fn node_name(k: usize) -> String {
    format!("node-{k}")
}

pub fn zone(k: usize) -> &'static str {
    ZONES[k % ZONES.len()]
}

pub fn pod_cidr(k: usize) -> String {
    format!("10.244.{k}.0/24")
}

// ---- the controllers ---------------------------------------------------------------

/// Which controller, and in which mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GcePeer {
    /// Upstream's route controller with cloud-provider-gcp.
    Upstream { watch: bool },
    /// route-controller with its GCE provider.
    Ours { watch: bool },
}

impl GcePeer {
    pub fn label(&self) -> String {
        let mode = |watch: bool| if watch { "watch" } else { "poll" };
        match self {
            GcePeer::Upstream { watch } => format!("upstream+gcp, {}", mode(*watch)),
            GcePeer::Ours { watch } => format!("ours, {}", mode(*watch)),
        }
    }
}

/// Starts one peer, its `gce.conf` in `dir`: upstream's route controller with
/// cloud-provider-gcp, or ours. The process handle is `aws_peer`'s.
pub fn start_controller(
    peer: GcePeer,
    api: &KubeApiserver,
    cluster: &GceCluster,
    timing: Timing,
    dir: &Path,
) -> Controller {
    fs::create_dir_all(dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    let conf = dir.join("gce.conf");
    fs::write(&conf, cluster.gce_conf())
        .unwrap_or_else(|e| panic!("write {}: {e}", conf.display()));
    match peer {
        GcePeer::Upstream { watch } => start_upstream(watch, api, cluster, &conf, timing, dir),
        GcePeer::Ours { watch } => start_ours(watch, api, cluster, &conf, timing, dir),
    }
}

fn start_upstream(
    watch: bool,
    api: &KubeApiserver,
    cluster: &GceCluster,
    conf: &Path,
    timing: Timing,
    dir: &Path,
) -> Controller {
    let log = dir.join("gcp-route-controller.log");
    let log_file = File::create(&log).unwrap_or_else(|e| panic!("create {}: {e}", log.display()));
    let binary = gcp_route_controller_binary();
    let mut child = Command::new(binary)
        .arg(format!("--kubeconfig={}", api.admin_kubeconfig().display()))
        .arg(format!("--cloud-config={}", conf.display()))
        .arg(format!("--cluster-cidr={CLUSTER_CIDR}"))
        .arg(format!("--cluster-name={CLUSTER}"))
        .arg(format!("--watch={watch}"))
        .arg(format!(
            "--route-reconciliation-period={}ms",
            timing.poll_period.as_millis()
        ))
        .env("GCE_METADATA_HOST", cluster.double.metadata_host())
        // No key file and no gcloud configuration may be found instead.
        .env_remove("GOOGLE_APPLICATION_CREDENTIALS")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log_file))
        .spawn()
        .unwrap_or_else(|e| panic!("start {}: {e}", binary.display()));
    let stdin = child.stdin.take();
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if line.starts_with("READY ") {
                let _ = tx.send(());
            }
        }
    });
    let controller = Controller::spawned(child, stdin, log, SystemTime::now());
    if rx.recv_timeout(READY_TIMEOUT).is_err() {
        panic!(
            "gcp-route-controller was not ready within {READY_TIMEOUT:?}{}",
            controller.log_tail()
        );
    }
    controller
}

fn start_ours(
    watch: bool,
    api: &KubeApiserver,
    cluster: &GceCluster,
    conf: &Path,
    timing: Timing,
    dir: &Path,
) -> Controller {
    let mut command = ours_command("gce", conf, watch, api, timing);
    command
        .env("GCE_METADATA_HOST", cluster.double.metadata_host())
        .env_remove("GOOGLE_APPLICATION_CREDENTIALS");
    spawn_ours(command, dir.join("route-controller.log"))
}

// ---- one measured run --------------------------------------------------------------

/// One run of `peer` with `aws_peer`'s script: reset nodes, instances and routes,
/// create `script.nodes` nodes, start the controller, wait for every initial route,
/// then either replace nodes one by one or (with `script.idle`) stay idle, and stop.
/// With an idle script the initial routes are put in place first, named as
/// cloud-provider-gcp names them (both controllers adopt them).
pub fn run_gce_peer(
    peer: GcePeer,
    api: &KubeApiserver,
    cluster: &GceCluster,
    script: Script,
    timing: Timing,
    dir: &Path,
) -> PeerRun {
    assert!(
        cluster.instances >= script.nodes + script.replaced,
        "the cluster has {} instances, the script needs {}",
        cluster.instances,
        script.nodes + script.replaced
    );
    delete_all_nodes(api);
    cluster.double.clear_routes();
    cluster.renew();
    for k in 0..script.nodes {
        let uid = cluster.create_node(api, k);
        if script.idle > Duration::ZERO {
            cluster.put_route(k, &uid);
        }
    }
    cluster.double.clear_requests();
    let double = &cluster.double;
    let started = SystemTime::now();
    let controller = start_controller(peer, api, cluster, timing, dir);
    let mut run = PeerRun {
        label: peer.label(),
        ..PeerRun::default()
    };

    // Start-up: every initial route in the table (its operation done).
    let deadline = Instant::now() + Duration::from_secs(180);
    let initial: Vec<String> = (0..script.nodes).map(pod_cidr).collect();
    loop {
        let routes = cluster.routes();
        if initial.iter().all(|c| routes.iter().any(|(d, _)| d == c)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{}: not every initial route within 180 s: {routes:?}{}",
            run.label,
            controller.log_tail()
        );
        thread::sleep(Duration::from_millis(50));
    }
    let last_insert = double
        .applied()
        .iter()
        .filter(|a| a.kind == "insert")
        .map(|a| a.at)
        .max()
        .unwrap_or_else(SystemTime::now);
    run.startup = last_insert.duration_since(started).unwrap_or_default();

    if script.idle > Duration::ZERO {
        // Settle one poll period (the first pass), then measure.
        thread::sleep(timing.poll_period.max(Duration::from_secs(1)));
        let from = SystemTime::now();
        run.startup_requests = count_by_method(double, started, from);
        thread::sleep(script.idle);
        run.idle_requests = count_by_method(double, from, SystemTime::now());
    } else {
        // The rolling replacement starts once the controller has been quiet for
        // QUIET: upstream+gcp waits on operations long after they are done (each wait
        // goes through a 5/s limiter, at least 1 s after the last), and those waits
        // belong to start-up.
        wait_until_quiet(double, &run.label);
        let from = SystemTime::now();
        run.startup_requests = count_by_method(double, started, from);
        let mut created = Vec::new();
        for i in 0..script.replaced {
            if i > 0 {
                thread::sleep(script.spacing - script.replace_after);
            }
            // As a managed instance group replaces a node: the instance goes (its
            // route stays, next hop gone), then the node object.
            cluster.terminate(i);
            cluster.delete_node(api, i);
            thread::sleep(script.replace_after);
            cluster.create_node(api, script.nodes + i);
            created.push((pod_cidr(script.nodes + i), SystemTime::now()));
        }
        thread::sleep(script.settle);
        wait_until_quiet(double, &run.label);
        run.rolling_requests = count_by_method(double, from, SystemTime::now());
        let applied = double.applied();
        for (cidr, at) in created {
            let routed = applied
                .iter()
                .filter(|a| a.kind == "insert" && a.dest_range == cidr && a.at >= at)
                .map(|a| a.at)
                .min();
            match routed {
                Some(t) => run
                    .node_to_route
                    .push(t.duration_since(at).unwrap_or_default()),
                None => run.missing += 1,
            }
        }
    }
    (run.cpu_seconds, run.peak_rss_mib) = controller.figures();
    controller.stop();
    run
}

/// How long the double must see no request before a run's phase ends: longer than the
/// 1 s cloud-provider-gcp's operation waits keep between them, shorter than a poll
/// period (so a poll period of at least 2 s is needed).
pub const QUIET: Duration = Duration::from_millis(1500);

/// Waits until the double has answered nothing for [`QUIET`] (at most 60 s).
fn wait_until_quiet(double: &GceDouble, label: &str) {
    let quiet = QUIET;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let last = double
            .requests()
            .last()
            .map(|r| r.at)
            .into_iter()
            .chain(double.token_calls().last().map(|(_, at)| *at))
            .max();
        let idle = last.map_or(quiet, |at| at.elapsed().unwrap_or_default());
        if idle >= quiet {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{label}: the controller did not stop sending for {quiet:?} within 60 s"
        );
        thread::sleep(Duration::from_millis(50));
    }
}
