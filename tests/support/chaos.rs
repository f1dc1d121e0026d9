//! Our own chaos run (issue 11), shared by `tests/e2e_chaos.rs` (short runs in
//! `cargo test`) and `cargo bench -- chaos` (longer runs, several seeds).
//!
//! The `route-controller` binary runs as two replicas with leader election (lease
//! 4 s, renew deadline 3 s, retry 1 s) against a real kube-apiserver. Each replica
//! reaches the API server through a TCP fault proxy of its own and the cloud through
//! another, so a fault can hit one replica or both. For a bounded, seeded while the
//! run injects, one step at a time:
//!
//! - node creates and deletes;
//! - on a replica's API proxy or cloud proxy: stall, hold replies, cut, refuse;
//! - the API server stopped and restarted, and SIGKILLed and restarted, on the same
//!   data (once each, at a third and two thirds of the run, in an order the seed
//!   picks); halfway, the cloud's server restarted where it can be ([`Cloud::restart`]:
//!   a real Neutron, `tests/support/chaos_openstack.rs`);
//! - the leader partitioned: its cloud replies held, a node created, then its API
//!   proxy stalled past the renew deadline, so that the lease changes hands while a
//!   cloud reply of the old leader is outstanding (what fencing is about);
//! - the cloud's own failures ([`Cloud::inject`]): for the Hetzner double failed
//!   actions, 429, 503, garbage and closed replies; for moto, through
//!   `tests/support/http_fault.rs`, EC2's throttling, 500 and 503, and replies lost
//!   after moto made the change;
//! - replicas SIGKILLed and SIGTERMed, and started again; a replica that exits on its
//!   own (it lost the lease, as upstream's CCM does) is started again too;
//! - in runs of 60 s or more, a cloud reply held past the provider's request timeout.
//!
//! Then the faults stop, and the checker looks at the cloud's own request log (each
//! write carries the credential of the process that sent it: one token or access key
//! per process), the Lease as sampled every 50 ms, and the cloud as sampled every
//! 200 ms:
//!
//! - the foreign route (inside the network, outside the cluster CIDR) is there, with
//!   its target, at every sample, and no write names it;
//! - every write came from the process that held the lease when the cloud got it
//!   (the term of the latest `acquireTime` before it), and arrived within the lease
//!   duration of that term's last renewal seen;
//! - no create of a route that exists and no delete of one that is gone, as the
//!   cloud answered them (also when the client never saw the answer);
//! - every SIGTERM ends with exit 0 within 5 s; a replica that exits on its own says
//!   it lost the lease;
//! - the routes converge on the nodes that exist within [`CONVERGENCE`] of the
//!   faults stopping.
//!
//! No fault overlaps another and every stall or hold ends within its step, so a
//! request's arrival at the cloud is its sending time to within a step, except where
//! a step holds replies on purpose (the partition), which is the case the lease
//! check is for.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use serde_json::Value;

use crate::controller_process::{ControllerProcess, SHUTDOWN_TIMEOUT, Spawn};
use crate::e2e_cluster::{Identity, LEASE, create_node, delete_node, poll_until};
use crate::e2e_hcloud::{HcloudCluster, NETWORK, WATCH_MODE, server_ip, token};
use crate::fault_proxy::{FaultProxy, Mode};
use crate::hcloud_double::Fault;
use crate::http_fault::{Answer, HttpFaultLayer};
use crate::kube_apiserver::KubeApiserver;
use crate::moto::{self, Ec2, Moto};

/// Machines (servers, instances) nodes can run on: node `chaos-<id>` on machine `id`.
pub const MACHINES: usize = 12;
pub const LEASE_FLAGS: [&str; 3] = [
    "--leader-elect-lease-duration=4s",
    "--leader-elect-renew-deadline=3s",
    "--leader-elect-retry-period=1s",
];
const LEASE_DURATION: Duration = Duration::from_secs(4);
pub const CLUSTER_CIDR: &str = "10.244.0.0/16";
/// Outside the cluster CIDR, inside the network: never ours.
pub const FOREIGN: &str = "10.100.0.0/24";
/// After the faults stop: a takeover (lease 4 s plus retries), a list, and the
/// writes of up to twelve nodes, with retries backing off after the faults.
pub const CONVERGENCE: Duration = Duration::from_secs(60);
const PATIENCE: Duration = Duration::from_secs(30);
const REPLICAS: [&str; 2] = ["a", "b"];

/// What a run does: `CHAOS_SEED` and `CHAOS_SECONDS` override the defaults.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    pub seed: u64,
    pub seconds: u64,
}

impl Settings {
    pub fn from_env(default_seed: u64, default_seconds: u64) -> Settings {
        Settings {
            seed: env_or("CHAOS_SEED", default_seed),
            seconds: env_or("CHAOS_SECONDS", default_seconds),
        }
    }
}

pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A machine a node can run on.
#[derive(Clone, Debug)]
pub struct Machine {
    pub node_name: String,
    pub provider_id: String,
    pub ip: String,
}

/// A write as the cloud got it.
#[derive(Clone, Debug)]
pub struct CloudWrite {
    /// The token or access key ID it was sent with.
    pub credential: String,
    pub at: Instant,
    /// For the report: the operation and what it named.
    pub what: String,
    pub destination: Option<String>,
    /// The cloud answered "exists already" to a create.
    pub duplicate_create: bool,
    /// The cloud answered "not found" to a delete.
    pub double_delete: bool,
}

/// The cloud side of a run.
pub trait Cloud: Sync {
    fn name(&self) -> &'static str;
    /// Where replica `slot`'s cloud proxy forwards to.
    fn upstream(&self, slot: usize) -> SocketAddr;
    /// A credential of its own for incarnation `n` of replica `slot`, known to the
    /// cloud from now on.
    fn credential(&self, slot: usize, n: u32) -> String;
    /// The cloud's flags and environment, reaching the cloud at `endpoint`.
    fn configure(&self, spawn: Spawn, credential: &str, endpoint: SocketAddr) -> Spawn;
    fn machine(&self, id: usize) -> Machine;
    /// One failure of the cloud's own; returns its name for the figures.
    fn inject(&self, rng: &mut SmallRng) -> &'static str;
    /// Forgets injected failures not yet used.
    fn stop_faults(&self);
    /// The routes in the cluster CIDR, one string per route (and table).
    fn routes(&self) -> BTreeSet<String>;
    /// What [`Cloud::routes`] must be when nodes run on `machines`.
    fn want(&self, machines: &BTreeSet<usize>) -> BTreeSet<String>;
    /// Whether the foreign route is there, unchanged.
    fn foreign_intact(&self) -> bool;
    /// Every write the cloud got.
    fn writes(&self) -> Vec<CloudWrite>;
    /// The provider's timeout of one request.
    fn request_timeout(&self) -> Duration;
    /// Restarts the cloud's server, once, halfway through the run, where the cloud
    /// is a real server that can be (Neutron); the fault's name for the figures.
    fn restart(&self) -> Option<&'static str> {
        None
    }
}

/// What a run found.
#[derive(Debug, Default)]
pub struct Figures {
    pub cloud: &'static str,
    pub seed: u64,
    pub seconds: u64,
    pub faults: BTreeMap<&'static str, u32>,
    /// Replicas that exited by themselves after losing the lease (then restarted).
    pub lease_loss_exits: u32,
    pub sigterms: u32,
    pub writes: usize,
    pub writes_by_replica: BTreeMap<&'static str, usize>,
    pub terms: usize,
    pub foreign_samples: usize,
    pub violations: Vec<String>,
    pub converged: Option<Duration>,
    /// When not converged: what the cloud had and what it should have had.
    pub divergence: Option<String>,
    pub took: Duration,
}

impl Figures {
    pub fn injected(&self) -> u32 {
        self.faults.values().sum()
    }

    pub fn ok(&self) -> bool {
        self.violations.is_empty() && self.converged.is_some()
    }
}

impl fmt::Display for Figures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "chaos {} (seed {}, {} s): {} faults injected {:?}; {} exits on lease loss; \
             {} SIGTERMs; {} writes {:?}; {} lease terms; {} samples of the foreign route; \
             {} violations; converged {}; {:.0} s in all",
            self.cloud,
            self.seed,
            self.seconds,
            self.injected(),
            self.faults,
            self.lease_loss_exits,
            self.sigterms,
            self.writes,
            self.writes_by_replica,
            self.terms,
            self.foreign_samples,
            self.violations.len(),
            match self.converged {
                Some(t) => format!("{:.1} s after the faults stopped", t.as_secs_f64()),
                None => format!("not within {CONVERGENCE:?}"),
            },
            self.took.as_secs_f64(),
        )?;
        for v in &self.violations {
            write!(f, "\n  violation: {v}")?;
        }
        if let Some(d) = &self.divergence {
            write!(f, "\n  {d}")?;
        }
        Ok(())
    }
}

// --- the two clouds ------------------------------------------------------------------

/// A run with the Hetzner double.
pub fn hetzner(settings: Settings) -> Figures {
    let mut cluster = HcloudCluster::start("e2e-chaos", 1..=MACHINES as u64);
    let cloud = Hetzner {
        hetzner: &cluster.hetzner,
        double: cluster
            .hetzner
            .double
            .endpoint()
            .trim_start_matches("http://")
            .trim_end_matches("/v1")
            .parse()
            .expect("the double's address"),
    };
    cloud
        .hetzner
        .double
        .put_route(NETWORK, FOREIGN, &server_ip(MACHINES as u64 + 1));
    run(settings, &mut cluster.api, &cluster.identity, &cloud)
}

struct Hetzner<'a> {
    hetzner: &'a crate::e2e_hcloud::Hetzner,
    double: SocketAddr,
}

impl Cloud for Hetzner<'_> {
    fn name(&self) -> &'static str {
        "hcloud"
    }

    fn upstream(&self, _slot: usize) -> SocketAddr {
        self.double
    }

    fn credential(&self, slot: usize, n: u32) -> String {
        let t = token(&format!("chaos-{}-{n}-", REPLICAS[slot]));
        self.hetzner.double.add_token(&t);
        t
    }

    fn configure(&self, spawn: Spawn, credential: &str, endpoint: SocketAddr) -> Spawn {
        spawn
            .arg("--cloud-provider=hcloud")
            .env("HCLOUD_TOKEN", credential)
            .env("HCLOUD_NETWORK", NETWORK.to_string())
            .env("HCLOUD_ENDPOINT", format!("http://{endpoint}/v1"))
    }

    fn machine(&self, id: usize) -> Machine {
        Machine {
            node_name: format!("chaos-{id}"),
            provider_id: format!("hcloud://{id}"),
            ip: server_ip(id as u64),
        }
    }

    fn inject(&self, rng: &mut SmallRng) -> &'static str {
        let double = &self.hetzner.double;
        let command = if rng.random_bool(0.5) {
            "add_route"
        } else {
            "delete_route"
        };
        let path = format!("/networks/{NETWORK}/actions/{command}");
        match rng.random_range(0..5u32) {
            0 => {
                double.fail_next_action(command, "action_failed", "chaos");
                "cloud action failed"
            }
            1 => {
                double.inject("POST", &path, 1, Fault::error(429, "rate_limit_exceeded"));
                "cloud 429"
            }
            2 => {
                double.inject("POST", &path, 1, Fault::BareStatus(503));
                "cloud 503"
            }
            3 => {
                double.inject("POST", &path, 1, Fault::Garbage);
                "cloud garbage reply (after the change)"
            }
            _ => {
                double.inject("POST", &path, 1, Fault::Close);
                "cloud closed mid-request"
            }
        }
    }

    fn stop_faults(&self) {
        // The double's injected faults are each for one request; what is left of
        // them is used up by the next writes, which the convergence bound covers.
    }

    fn routes(&self) -> BTreeSet<String> {
        self.hetzner
            .routes()
            .into_iter()
            .filter(|(d, _)| d != FOREIGN)
            .map(|(d, g)| format!("{d} -> {g}"))
            .collect()
    }

    fn want(&self, machines: &BTreeSet<usize>) -> BTreeSet<String> {
        machines
            .iter()
            .map(|&id| format!("{} -> {}", pod_cidr(id), server_ip(id as u64)))
            .collect()
    }

    fn foreign_intact(&self) -> bool {
        let gateway = server_ip(MACHINES as u64 + 1);
        self.hetzner.has_route(FOREIGN, &gateway)
    }

    fn writes(&self) -> Vec<CloudWrite> {
        self.hetzner
            .double
            .requests()
            .into_iter()
            .filter(|r| r.method == "POST")
            .map(|r| {
                let add = r.path.ends_with("/add_route");
                CloudWrite {
                    credential: r.token.clone(),
                    at: r.at,
                    what: format!("{} {:?} ({})", r.path, r.destination, r.status),
                    destination: r.destination.clone(),
                    duplicate_create: add && r.status == 400,
                    double_delete: !add && r.status == 404,
                }
            })
            .collect()
    }

    fn request_timeout(&self) -> Duration {
        Duration::from_secs(15)
    }
}

/// A run with moto as the cloud (EC2), each replica behind a fault layer of its own.
pub fn aws(settings: Settings) -> Figures {
    const CLUSTER_NAME: &str = "e2e-chaos";
    let (moto, mut api) = std::thread::scope(|s| {
        let moto = s.spawn(Moto::start);
        let api = KubeApiserver::start_fresh();
        (moto.join().expect("moto starts"), api)
    });
    let identity = Identity::provision(&api, "e2e-chaos");
    let ec2 = moto.ec2();
    let network = moto::network(&ec2);
    let tag = format!("kubernetes.io/cluster/{CLUSTER_NAME}");
    let tables = vec![
        ec2.create_route_table(&network.vpc, &[(tag.as_str(), "owned")]),
        ec2.create_route_table(&network.vpc, &[("KubernetesCluster", CLUSTER_NAME)]),
    ];
    let instances: Vec<moto::TestInstance> = (0..=MACHINES)
        .map(|_| ec2.run_instance(&network.ami, &network.subnet))
        .collect();
    let foreign_target = instances[MACHINES].id.clone();
    ec2.create_route(&tables[0], FOREIGN, &foreign_target);
    let moto_addr: SocketAddr = moto
        .url()
        .trim_start_matches("http://")
        .parse()
        .expect("moto's address");
    let layers = [
        HttpFaultLayer::start(moto_addr),
        HttpFaultLayer::start(moto_addr),
    ];
    let cloud = Aws {
        ec2,
        tables,
        instances,
        foreign_target,
        layers,
        cluster_name: CLUSTER_NAME,
    };
    let figures = run(settings, &mut api, &identity, &cloud);
    drop(cloud);
    drop(moto);
    figures
}

struct Aws {
    ec2: Ec2,
    tables: Vec<String>,
    /// One per machine (index `id - 1`), and the foreign route's target last.
    instances: Vec<moto::TestInstance>,
    foreign_target: String,
    layers: [HttpFaultLayer; 2],
    cluster_name: &'static str,
}

const AWS_WRITES: [&str; 4] = [
    "CreateRoute",
    "DeleteRoute",
    "ReplaceRoute",
    "ModifyInstanceAttribute",
];

impl Cloud for Aws {
    fn name(&self) -> &'static str {
        "aws"
    }

    fn upstream(&self, slot: usize) -> SocketAddr {
        self.layers[slot].addr()
    }

    fn credential(&self, slot: usize, n: u32) -> String {
        format!("AKIDCHAOS{}{n}", REPLICAS[slot].to_uppercase())
    }

    fn configure(&self, spawn: Spawn, credential: &str, endpoint: SocketAddr) -> Spawn {
        spawn
            .arg("--cloud-provider=aws")
            .arg(format!("--cluster-name={}", self.cluster_name))
            .env("AWS_ACCESS_KEY_ID", credential)
            .env("AWS_SECRET_ACCESS_KEY", moto::TEST_SECRET)
            .env("AWS_REGION", moto::REGION)
            .env("AWS_ENDPOINT_URL_EC2", format!("http://{endpoint}"))
            .env("AWS_EC2_METADATA_DISABLED", "true")
    }

    fn machine(&self, id: usize) -> Machine {
        let instance = &self.instances[id - 1];
        Machine {
            node_name: instance.private_dns_name.clone(),
            provider_id: instance.provider_id(),
            ip: format!("10.0.1.{}", 10 + id),
        }
    }

    fn inject(&self, rng: &mut SmallRng) -> &'static str {
        let write =
            ["CreateRoute", "DeleteRoute", "ModifyInstanceAttribute"][rng.random_range(0..3)];
        let (action, times, answer, name) = match rng.random_range(0..5u32) {
            0 => (
                None,
                rng.random_range(1..=3),
                Answer::Throttle,
                "cloud throttled (503 RequestLimitExceeded)",
            ),
            1 => (
                Some(write),
                1,
                Answer::InternalError,
                "cloud 500 InternalError",
            ),
            2 => (Some(write), 1, Answer::Unavailable, "cloud 503 Unavailable"),
            3 => (
                Some(write),
                1,
                Answer::LoseReply,
                "cloud reply lost after the change",
            ),
            _ => (
                Some(if rng.random_bool(0.5) {
                    "CreateRoute"
                } else {
                    "DeleteRoute"
                }),
                1,
                Answer::Throttle,
                "cloud partial failure (one table's write throttled)",
            ),
        };
        for layer in &self.layers {
            layer.inject(action, times, answer);
        }
        name
    }

    fn stop_faults(&self) {
        for layer in &self.layers {
            layer.clear();
        }
    }

    fn routes(&self) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        for (i, table) in self.tables.iter().enumerate() {
            for (d, target, state) in self.ec2.routes(table) {
                if d.starts_with("10.244.") {
                    out.insert(format!("table {i} {d} -> {target:?} {state}"));
                }
            }
        }
        out
    }

    fn want(&self, machines: &BTreeSet<usize>) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        for i in 0..self.tables.len() {
            for &id in machines {
                let target = Some(self.instances[id - 1].id.clone());
                out.insert(format!("table {i} {} -> {target:?} active", pod_cidr(id)));
            }
        }
        out
    }

    fn foreign_intact(&self) -> bool {
        self.ec2
            .routes(&self.tables[0])
            .iter()
            .any(|(d, t, _)| d == FOREIGN && t.as_deref() == Some(self.foreign_target.as_str()))
    }

    fn writes(&self) -> Vec<CloudWrite> {
        self.layers
            .iter()
            .flat_map(HttpFaultLayer::log)
            .filter(|e| e.reached_cloud() && AWS_WRITES.contains(&e.action.as_str()))
            .map(|e| {
                let destination = e.params.get("DestinationCidrBlock").cloned();
                let code = e.code.as_deref();
                CloudWrite {
                    credential: e.key_id.clone(),
                    at: e.at,
                    what: format!(
                        "{} {} {} ({} {})",
                        e.action,
                        e.params
                            .get("RouteTableId")
                            .or(e.params.get("InstanceId"))
                            .map_or("", String::as_str),
                        destination.as_deref().unwrap_or(""),
                        e.status,
                        code.unwrap_or("ok")
                    ),
                    duplicate_create: e.action == "CreateRoute"
                        && code == Some("RouteAlreadyExists"),
                    double_delete: e.action == "DeleteRoute"
                        && code == Some("InvalidRoute.NotFound"),
                    destination,
                }
            })
            .collect()
    }

    fn request_timeout(&self) -> Duration {
        Duration::from_secs(20)
    }
}

/// `10.244.<id>.0/24`: the pod CIDR of the node on machine `id`.
pub fn pod_cidr(id: usize) -> String {
    format!("10.244.{id}.0/24")
}

// --- the run -------------------------------------------------------------------------

/// A server going away during a run; its time does not count against the length.
#[derive(Clone, Copy, Debug)]
enum Outage {
    /// The API server stopped (or SIGKILLed) and started again on its data.
    Api { kill: bool },
    /// The cloud's server restarted ([`Cloud::restart`]), if it can be.
    Cloud,
}

/// A replica slot: its proxies and the process now running in it.
struct Replica {
    slot: usize,
    api_proxy: FaultProxy,
    cloud_proxy: FaultProxy,
    kubeconfig: PathBuf,
    process: ControllerProcess,
    incarnation: u32,
}

/// One process that ran in a slot.
struct Incarnation {
    slot: usize,
    credential: String,
    log: PathBuf,
}

/// One sample of the Lease.
#[derive(Clone, Debug, PartialEq, Eq)]
struct LeaseSample {
    holder: String,
    acquired: SystemTime,
    renewed: SystemTime,
}

struct Run<'a> {
    api: &'a mut KubeApiserver,
    identity: &'a Identity,
    cloud: &'a dyn Cloud,
    replicas: Vec<Replica>,
    incarnations: Vec<Incarnation>,
    figures: Figures,
    nodes: BTreeMap<usize, String>,
    started: Instant,
}

pub fn run(
    settings: Settings,
    api: &mut KubeApiserver,
    identity: &Identity,
    cloud: &dyn Cloud,
) -> Figures {
    let started = Instant::now();
    let mut rng = SmallRng::seed_from_u64(settings.seed);
    let api_addr: SocketAddr = format!("127.0.0.1:{}", api.port())
        .parse()
        .expect("the API server's address");
    let mut run = Run {
        api,
        identity,
        cloud,
        replicas: Vec::new(),
        incarnations: Vec::new(),
        figures: Figures {
            cloud: cloud.name(),
            seed: settings.seed,
            seconds: settings.seconds,
            ..Figures::default()
        },
        nodes: BTreeMap::new(),
        started,
    };
    for slot in 0..REPLICAS.len() {
        let api_proxy = FaultProxy::start(api_addr);
        let kubeconfig = run.kubeconfig_through(slot, api_proxy.addr());
        let cloud_proxy = FaultProxy::start(cloud.upstream(slot));
        let process = run.spawn(slot, 0, &kubeconfig, cloud_proxy.addr());
        run.replicas.push(Replica {
            slot,
            api_proxy,
            cloud_proxy,
            kubeconfig,
            process,
            incarnation: 0,
        });
    }
    for r in &mut run.replicas {
        r.process.wait_ready(PATIENCE);
    }

    let stop = AtomicBool::new(false);
    let leases: Mutex<Vec<LeaseSample>> = Mutex::new(Vec::new());
    let foreign_samples = AtomicUsize::new(0);
    let foreign_missing: Mutex<Vec<Instant>> = Mutex::new(Vec::new());
    let lease_url = format!(
        "{}/apis/coordination.k8s.io/v1/namespaces/{}/leases/{LEASE}",
        run.api.server(),
        identity.namespace
    );
    let (agent, admin) = (run.api.agent().clone(), run.api.admin_token().to_string());
    std::thread::scope(|s| {
        // Stops the samplers when the run ends, also by a panic (a replica that never
        // gets ready): the scope would otherwise wait for them for ever.
        let _stop = StopOnDrop(&stop);
        s.spawn(|| {
            while !stop.load(Ordering::SeqCst) {
                if let Some(sample) = sample_lease(&agent, &lease_url, &admin) {
                    let mut l = leases.lock().expect("leases");
                    if l.last() != Some(&sample) {
                        l.push(sample);
                    }
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        s.spawn(|| {
            while !stop.load(Ordering::SeqCst) {
                foreign_samples.fetch_add(1, Ordering::SeqCst);
                if !cloud.foreign_intact() {
                    foreign_missing
                        .lock()
                        .expect("foreign")
                        .push(Instant::now());
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        });

        run.faults(&settings, &mut rng);
        run.quiet();
        for slot in 0..run.replicas.len() {
            run.terminate(slot);
        }
        stop.store(true, Ordering::SeqCst);
    });

    let leases = leases.into_inner().expect("leases");
    run.figures.foreign_samples = foreign_samples.load(Ordering::SeqCst);
    let missing = foreign_missing.into_inner().expect("foreign");
    if !missing.is_empty() {
        run.figures.violations.push(format!(
            "the foreign route was missing or changed at {} samples",
            missing.len()
        ));
    }
    run.check_writes(&leases);
    run.figures.took = started.elapsed();
    run.figures
}

impl Run<'_> {
    fn faults(&mut self, settings: &Settings, rng: &mut SmallRng) {
        let length = Duration::from_secs(settings.seconds);
        // The API server goes away twice: stopped cleanly and SIGKILLed, in an
        // order the seed picks; between the two, the cloud's server restarts (where
        // it can).
        let mut outages = vec![
            (length / 3, Outage::Api { kill: false }),
            (length / 2, Outage::Cloud),
            (length * 2 / 3, Outage::Api { kill: true }),
        ];
        if rng.random_bool(0.5) {
            outages[0].1 = Outage::Api { kill: true };
            outages[2].1 = Outage::Api { kill: false };
        }
        let long_holds = settings.seconds >= 60;
        // Half the machines have nodes from the start, so that there is work at once.
        for _ in 0..MACHINES {
            if self.nodes.len() < MACHINES / 2 {
                let _ = self.create_some_node(rng);
            }
        }
        let trace = std::env::var_os("CHAOS_TRACE").is_some();
        let started = Instant::now();
        // The outages' time (a restart takes seconds) does not count against the
        // length, so that the other faults get it.
        let mut paused = Duration::ZERO;
        let elapsed = |paused: Duration| started.elapsed().saturating_sub(paused);
        while elapsed(paused) < length {
            if let Some(&(at, outage)) = outages.first()
                && elapsed(paused) >= at
            {
                outages.remove(0);
                let began = Instant::now();
                match outage {
                    Outage::Api { kill } => self.outage(kill, rng),
                    Outage::Cloud => {
                        if let Some(kind) = self.cloud.restart() {
                            *self.figures.faults.entry(kind).or_default() += 1;
                        }
                    }
                }
                self.reap();
                paused += began.elapsed();
                if trace {
                    eprintln!(
                        "[chaos] {:6.1} s: {outage:?} took {:.1} s",
                        self.started.elapsed().as_secs_f64(),
                        began.elapsed().as_secs_f64()
                    );
                }
                continue;
            }
            let step = Instant::now();
            let pick = rng.random_range(0..26u32);
            let kind: &'static str = match pick {
                0..=5 => match self.create_some_node(rng) {
                    Some(()) => "node created",
                    None => continue,
                },
                6 | 7 => {
                    let Some(&id) = self
                        .nodes
                        .keys()
                        .nth(rng.random_range(0..self.nodes.len().max(1)))
                    else {
                        continue;
                    };
                    delete_node(self.api, &self.nodes[&id]);
                    self.nodes.remove(&id);
                    "node deleted"
                }
                8..=11 => self.proxy_fault(true, pick - 8, rng),
                12..=14 => self.proxy_fault(false, pick - 12, rng),
                15..=17 => self.cloud.inject(rng),
                18 => self.partition(rng),
                19 | 20 => {
                    let slot = rng.random_range(0..self.replicas.len());
                    if pick == 19 {
                        self.replicas[slot].process.kill();
                        self.respawn(slot);
                        "replica SIGKILLed"
                    } else {
                        match self.terminate(slot) {
                            true => {
                                self.respawn(slot);
                                "replica SIGTERMed"
                            }
                            false => continue,
                        }
                    }
                }
                21 if long_holds => {
                    let slot = self.leader().unwrap_or(0);
                    let proxy = &self.replicas[slot].cloud_proxy;
                    proxy.set(Mode::HoldReplies);
                    std::thread::sleep(self.cloud.request_timeout() + Duration::from_secs(1));
                    proxy.set(Mode::Pass);
                    "cloud reply held past the request timeout"
                }
                _ => {
                    std::thread::sleep(Duration::from_millis(300));
                    continue;
                }
            };
            *self.figures.faults.entry(kind).or_default() += 1;
            std::thread::sleep(Duration::from_millis(rng.random_range(50..400)));
            self.reap();
            if trace {
                eprintln!(
                    "[chaos] {:6.1} s: {kind} ({:.1} s)",
                    self.started.elapsed().as_secs_f64(),
                    step.elapsed().as_secs_f64()
                );
            }
        }
    }

    /// Faults stop; the routes must converge on the nodes that exist.
    fn quiet(&mut self) {
        for r in &self.replicas {
            r.api_proxy.set(Mode::Pass);
            r.cloud_proxy.set(Mode::Pass);
        }
        self.cloud.stop_faults();
        let quiet = Instant::now();
        let machines: BTreeSet<usize> = self.nodes.keys().copied().collect();
        let want = self.cloud.want(&machines);
        let converged = poll_until(CONVERGENCE, || {
            self.reap();
            (self.cloud.routes() == want).then(|| quiet.elapsed())
        });
        self.figures.converged = converged;
        if converged.is_none() {
            let have = self.cloud.routes();
            self.figures.divergence = Some(format!(
                "missing {:?}; extra {:?}",
                want.difference(&have).collect::<Vec<_>>(),
                have.difference(&want).collect::<Vec<_>>()
            ));
        }
    }

    fn create_some_node(&mut self, rng: &mut SmallRng) -> Option<()> {
        let id = rng.random_range(1..=MACHINES);
        if self.nodes.contains_key(&id) {
            return None;
        }
        let m = self.cloud.machine(id);
        create_node(
            self.api,
            &m.node_name,
            &[&pod_cidr(id)],
            &m.ip,
            &m.provider_id,
        );
        self.nodes.insert(id, m.node_name);
        Some(())
    }

    /// One of stall, hold replies, refuse, cut on the API or the cloud proxy of one
    /// replica or both (`which` picks the mode).
    fn proxy_fault(&mut self, cloud: bool, which: u32, rng: &mut SmallRng) -> &'static str {
        let both = rng.random_bool(0.3);
        let first = rng.random_range(0..self.replicas.len());
        let proxies: Vec<&FaultProxy> = self
            .replicas
            .iter()
            .filter(|r| both || r.slot == first)
            .map(|r| if cloud { &r.cloud_proxy } else { &r.api_proxy })
            .collect();
        let (mode, range, name) = match (cloud, which) {
            (true, 0) => (Mode::Stall, 300..2000, "cloud stalled"),
            (true, 1) => (Mode::HoldReplies, 300..2000, "cloud replies held"),
            (true, 2) => (Mode::Refuse, 200..1000, "cloud refused"),
            (true, _) => {
                proxies.iter().for_each(|p| p.cut());
                return "cloud connections cut";
            }
            // Up to 5 s: past the renew deadline (3 s) a leader loses the lease.
            (false, 0) => (Mode::Stall, 300..5000, "API stalled"),
            (false, 1) => (Mode::HoldReplies, 300..2500, "API replies held"),
            (false, _) => {
                if rng.random_bool(0.5) {
                    proxies.iter().for_each(|p| p.cut());
                    return "API connections cut";
                }
                (Mode::Refuse, 200..2000, "API refused")
            }
        };
        proxies.iter().for_each(|p| p.set(mode));
        std::thread::sleep(Duration::from_millis(rng.random_range(range)));
        proxies.iter().for_each(|p| p.set(Mode::Pass));
        name
    }

    /// The leader's cloud replies held, a node created (so that it has a write out),
    /// then its API stalled until the other replica takes the lease; then released.
    fn partition(&mut self, rng: &mut SmallRng) -> &'static str {
        let slot = self.leader().unwrap_or(0);
        self.replicas[slot].cloud_proxy.set(Mode::HoldReplies);
        let _ = self.create_some_node(rng);
        std::thread::sleep(Duration::from_millis(300));
        self.replicas[slot].api_proxy.set(Mode::Stall);
        std::thread::sleep(Duration::from_millis(rng.random_range(4500..6500)));
        self.replicas[slot].api_proxy.set(Mode::Pass);
        self.replicas[slot].cloud_proxy.set(Mode::Pass);
        "leader partitioned (cloud replies held, API stalled)"
    }

    /// The API server stopped (or SIGKILLed) and started again on its data.
    fn outage(&mut self, kill: bool, rng: &mut SmallRng) {
        if kill {
            self.api.kill();
        } else {
            self.api.stop();
        }
        std::thread::sleep(Duration::from_millis(rng.random_range(300..2000)));
        self.api.restart();
        let kind = if kill {
            "API server SIGKILLed and restarted"
        } else {
            "API server stopped and restarted"
        };
        *self.figures.faults.entry(kind).or_default() += 1;
    }

    /// The slot whose process says it leads.
    fn leader(&self) -> Option<usize> {
        self.replicas.iter().position(|r| {
            r.process
                .http_get("/metrics")
                .is_some_and(|(status, body)| {
                    status == 200
                        && body
                            .lines()
                            .any(|l| l.trim() == "route_controller_leader 1")
                })
        })
    }

    /// SIGTERM; a violation unless the process exits 0 within [`SHUTDOWN_TIMEOUT`].
    /// False if the process had already exited (then [`Run::reap`] deals with it).
    fn terminate(&mut self, slot: usize) -> bool {
        let r = &mut self.replicas[slot];
        if !r.process.is_running() {
            self.reap();
            return false;
        }
        self.figures.sigterms += 1;
        let label = r.process.label().to_string();
        r.process.send_signal("TERM");
        match r.process.wait_exit(SHUTDOWN_TIMEOUT) {
            Some(status) if status.success() => {}
            Some(status) => self.figures.violations.push(format!(
                "{label} exited with {status} after SIGTERM; log {}:\n{}",
                r.process.log_path().display(),
                r.process.log_tail()
            )),
            None => {
                self.figures.violations.push(format!(
                    "{label} did not exit within {SHUTDOWN_TIMEOUT:?} of SIGTERM; log {}:\n{}",
                    r.process.log_path().display(),
                    r.process.log_tail()
                ));
                r.process.kill();
            }
        }
        true
    }

    /// Starts replicas that exited by themselves again; an exit for another reason
    /// than a lost lease is a violation.
    fn reap(&mut self) {
        for slot in 0..self.replicas.len() {
            let r = &mut self.replicas[slot];
            if r.process.is_running() {
                continue;
            }
            let log = r.process.log();
            if log.contains("exiting because the leader lease was lost") {
                self.figures.lease_loss_exits += 1;
            } else {
                self.figures.violations.push(format!(
                    "{} exited by itself, not after losing the lease; log {}:\n{}",
                    r.process.label(),
                    r.process.log_path().display(),
                    r.process.log_tail()
                ));
            }
            self.respawn(slot);
        }
    }

    fn respawn(&mut self, slot: usize) {
        let n = self.replicas[slot].incarnation + 1;
        let (kubeconfig, endpoint) = {
            let r = &self.replicas[slot];
            (r.kubeconfig.clone(), r.cloud_proxy.addr())
        };
        let mut process = self.spawn(slot, n, &kubeconfig, endpoint);
        process.wait_ready(PATIENCE);
        let r = &mut self.replicas[slot];
        r.process = process;
        r.incarnation = n;
    }

    fn spawn(
        &mut self,
        slot: usize,
        n: u32,
        kubeconfig: &Path,
        endpoint: SocketAddr,
    ) -> ControllerProcess {
        let credential = self.cloud.credential(slot, n);
        let spawn = Spawn::new()
            .arg(format!("--cluster-cidr={CLUSTER_CIDR}"))
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg(format!(
                "--leader-elect-resource-namespace={}",
                self.identity.namespace
            ))
            .arg(format!("--leader-elect-resource-name={LEASE}"))
            .arg(WATCH_MODE)
            .args(LEASE_FLAGS);
        let process = self
            .cloud
            .configure(spawn, &credential, endpoint)
            .spawn(&format!(
                "chaos_{}_{}_{n}",
                self.cloud.name(),
                REPLICAS[slot]
            ));
        self.incarnations.push(Incarnation {
            slot,
            credential,
            log: process.log_path().to_path_buf(),
        });
        process
    }

    /// The identity's kubeconfig with the server replaced by the proxy's address
    /// (the serving certificate is for 127.0.0.1, any port).
    fn kubeconfig_through(&self, slot: usize, proxy: SocketAddr) -> PathBuf {
        let text = std::fs::read_to_string(&self.identity.kubeconfig).expect("read the kubeconfig");
        let mut config: Value = serde_json::from_str(&text).expect("the kubeconfig is JSON");
        config["clusters"][0]["cluster"]["server"] = Value::String(format!("https://{proxy}"));
        let path = self
            .api
            .data_dir()
            .join(format!("chaos-{}.kubeconfig", REPLICAS[slot]));
        std::fs::write(
            &path,
            serde_json::to_vec_pretty(&config).expect("serialise"),
        )
        .expect("write the kubeconfig");
        path
    }

    /// The write checks over the cloud's request log and the Lease samples.
    fn check_writes(&mut self, leases: &[LeaseSample]) {
        let identities: Vec<(Option<String>, &Incarnation)> = self
            .incarnations
            .iter()
            .map(|i| {
                let log = std::fs::read_to_string(&i.log).unwrap_or_default();
                (identity_in(&log), i)
            })
            .collect();
        let wall_of = {
            let (now_i, now_w) = (Instant::now(), SystemTime::now());
            move |at: Instant| now_w - now_i.saturating_duration_since(at)
        };
        let writes = self.cloud.writes();
        self.figures.writes = writes.len();
        self.figures.terms = {
            let terms: BTreeSet<(&str, SystemTime)> = leases
                .iter()
                .map(|l| (l.holder.as_str(), l.acquired))
                .collect();
            terms.len()
        };
        let started = self.started;
        let history = |w: &CloudWrite| -> String {
            writes
                .iter()
                .filter(|o| o.destination == w.destination && o.at <= w.at)
                .map(|o| {
                    format!(
                        "\n    +{:.2} s {} {}",
                        o.at.saturating_duration_since(started).as_secs_f64(),
                        o.credential,
                        o.what
                    )
                })
                .collect()
        };
        let violations = &mut self.figures.violations;
        for w in &writes {
            if w.destination.as_deref() == Some(FOREIGN) {
                violations.push(format!("the foreign route was written: {}", w.what));
            }
            if w.duplicate_create {
                violations.push(format!(
                    "a create of an existing route: {}; the writes of it so far:{}",
                    w.what,
                    history(w)
                ));
            }
            if w.double_delete {
                violations.push(format!(
                    "a delete of a route already gone: {}; the writes of it so far:{}",
                    w.what,
                    history(w)
                ));
            }
            let Some((identity, incarnation)) = identities
                .iter()
                .find(|(_, i)| i.credential == w.credential)
            else {
                violations.push(format!("a write with an unknown credential: {}", w.what));
                continue;
            };
            *self
                .figures
                .writes_by_replica
                .entry(REPLICAS[incarnation.slot])
                .or_default() += 1;
            let at = wall_of(w.at);
            let when = w.at.saturating_duration_since(started).as_secs_f64();
            let Some(term) = leases.iter().rev().find(|l| l.acquired <= at) else {
                violations.push(format!("a write before any lease term: {}", w.what));
                continue;
            };
            let name = incarnation.log.display();
            if identity.as_deref() != Some(term.holder.as_str()) {
                violations.push(format!(
                    "+{when:.2} s: {name} ({identity:?}) wrote {} while {:?} held the lease (acquired {:?} before)",
                    w.what,
                    term.holder,
                    at.duration_since(term.acquired).unwrap_or_default()
                ));
                continue;
            }
            let renewed = leases
                .iter()
                .filter(|l| {
                    l.holder == term.holder && l.acquired == term.acquired && l.renewed <= at
                })
                .map(|l| l.renewed)
                .max()
                .unwrap_or(term.acquired);
            let since = at.duration_since(renewed).unwrap_or_default();
            if since > LEASE_DURATION {
                violations.push(format!(
                    "+{when:.2} s: {name} wrote {} {since:?} after its last renewal seen: its lease had expired",
                    w.what
                ));
            }
        }
    }
}

/// The Lease's holder, acquireTime and renewTime, if it has a holder.
fn sample_lease(agent: &ureq::Agent, url: &str, token: &str) -> Option<LeaseSample> {
    let request = ureq::http::Request::builder()
        .uri(url)
        .header("Authorization", format!("Bearer {token}"))
        .body(())
        .ok()?;
    let mut response = agent.run(request).ok()?;
    let body = response.body_mut().read_to_string().ok()?;
    let lease: Value = serde_json::from_str(&body).ok()?;
    let spec = &lease["spec"];
    Some(LeaseSample {
        holder: spec["holderIdentity"].as_str()?.to_string(),
        acquired: parse_micro_time(spec["acquireTime"].as_str()?)?,
        renewed: parse_micro_time(spec["renewTime"].as_str()?)?,
    })
}

/// `2026-12-01T10:00:00.123456Z` (a MicroTime in UTC, as the API server writes it)
/// as a `SystemTime`.
pub fn parse_micro_time(s: &str) -> Option<SystemTime> {
    let s = s.strip_suffix('Z')?;
    let (date, time) = s.split_once('T')?;
    let mut d = date.split('-').map(|x| x.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let mut t = hms.split(':').map(|x| x.parse::<i64>().ok());
    let (h, min, sec) = (t.next()??, t.next()??, t.next()??);
    let micros: u64 = format!("{frac:0<6}").get(..6)?.parse().ok()?;
    // Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
    let (y, m) = if m <= 2 { (y - 1, m + 9) } else { (y, m - 3) };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = u64::try_from(days * 86_400 + h * 3600 + min * 60 + sec).ok()?;
    Some(SystemTime::UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_micros(micros))
}

/// Sets its flag when dropped: threads of a scope that loop until the flag is set
/// stop also when the scope's body panics, instead of keeping the scope open.
pub struct StopOnDrop<'a>(pub &'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// The lease identity a process logged when it acquired the lease, if it did.
fn identity_in(log: &str) -> Option<String> {
    let start = log.find("this replica (")? + "this replica (".len();
    let end = log[start..].find(')')? + start;
    Some(log[start..end].to_string())
}
