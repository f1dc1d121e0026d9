//! Virtual-time simulation: the real [`Controller`] driven by a simulated cluster and the
//! in-memory cloud, once per mode, so that the cost of each mode shows side by side.
//!
//! Nothing here models the controller: the same `Controller::handle` the binary runs
//! decides everything. The simulation only plays the world around it — node changes on
//! a script, cloud calls that take time, a provider rate limit and failures — in
//! virtual time, so a 24-hour scenario takes seconds and every run with one seed gives
//! the same numbers.
//!
//! Modes:
//! - `poll`: the gate off; a full pass with a list every 10 s (upstream ≤ 1.34, and the
//!   default of 1.35/1.36);
//! - `upstream-watch`: upstream 1.35/1.36's watch mode (a 10 s token bucket, a list on
//!   every pass, no per-route retry, up to 200 calls in flight, no client-side rate
//!   limiting: a refused call just fails);
//! - `watch`: ours (debounced passes, a trusted view of the routes, per-route retries,
//!   16 calls in flight, a client-side token bucket matching the provider's limit).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use serde::Serialize;

use crate::cloud::fake::{Call, FakeCloud};
use crate::controller::{
    CloudOp, CloudReply, Command, Config, Controller, Input, Mode, NodeEvent, OpId,
};
use crate::metrics::Metrics;
use crate::model::{Cidr, Condition, Node, NodeAddress, Route};
use crate::provider::{CloudErrorKind, RouteChange, Routes};
use crate::workers::run_op_metered;

pub mod azure;

/// The scenarios `simulate` knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    /// 1000 nodes for 24 h; nothing changes but node heartbeats.
    Steady,
    /// 300 nodes replaced one by one over an hour.
    RollingUpgrade,
    /// 1000 nodes join within a minute, against an API allowing 1 request/s.
    ScaleOut,
    /// A rolling upgrade of 300 nodes in an hour while 10 % of cloud calls fail.
    FlakyCloud,
    /// 300 nodes whose InternalIP changes, one every 10 s, for an hour; the provider's
    /// routes carry node addresses, so each change replaces a route.
    AddressChurn,
    /// A route table at its limit (one route per node and 5 of others, as many as it
    /// may hold): a scale-down leaves it near the limit, a scale-out brings twice as
    /// many nodes as fit, and a second scale-down 8 minutes later makes room.
    FullTable,
}

impl Scenario {
    pub const ALL: [Scenario; 6] = [
        Scenario::Steady,
        Scenario::RollingUpgrade,
        Scenario::ScaleOut,
        Scenario::FlakyCloud,
        Scenario::AddressChurn,
        Scenario::FullTable,
    ];

    pub fn name(&self) -> &'static str {
        match self {
            Scenario::Steady => "steady",
            Scenario::RollingUpgrade => "rolling-upgrade",
            Scenario::ScaleOut => "scale-out",
            Scenario::FlakyCloud => "flaky-cloud",
            Scenario::AddressChurn => "address-churn",
            Scenario::FullTable => "full-table",
        }
    }

    pub fn parse(name: &str) -> Option<Scenario> {
        Scenario::ALL.into_iter().find(|s| s.name() == name)
    }

    /// Default node count and duration.
    pub fn defaults(&self) -> (usize, Duration) {
        match self {
            Scenario::Steady => (1000, Duration::from_secs(24 * 3600)),
            Scenario::RollingUpgrade | Scenario::FlakyCloud | Scenario::AddressChurn => {
                (300, Duration::from_secs(3600))
            }
            Scenario::ScaleOut => (1000, Duration::from_secs(3600)),
            Scenario::FullTable => (95, Duration::from_secs(3600)),
        }
    }
}

/// What to simulate.
#[derive(Clone, Debug)]
pub struct SimOptions {
    pub scenario: Scenario,
    /// Overrides the scenario's node count.
    pub nodes: Option<usize>,
    /// Overrides the scenario's duration.
    pub duration: Option<Duration>,
    pub seed: u64,
    /// Time each cloud call takes.
    pub latency: Duration,
}

/// p50, p99 and max of a set of durations, in seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Percentiles {
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
    #[serde(skip)]
    pub count: usize,
}

impl Percentiles {
    fn of(mut samples: Vec<Duration>) -> Percentiles {
        if samples.is_empty() {
            return Percentiles::default();
        }
        samples.sort();
        let at = |q: f64| {
            let i = ((q * samples.len() as f64).ceil() as usize).clamp(1, samples.len()) - 1;
            round3(samples[i].as_secs_f64())
        };
        Percentiles {
            p50: at(0.5),
            p99: at(0.99),
            max: at(1.0),
            count: samples.len(),
        }
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Cloud calls by operation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CloudCalls {
    pub list: u64,
    pub create: u64,
    pub delete: u64,
}

impl CloudCalls {
    pub fn total(&self) -> u64 {
        self.list + self.create + self.delete
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Latencies {
    /// From a node change (add, delete, pod CIDRs, addresses) to the start of the next
    /// pass. `null` in JSON when nothing changed.
    #[serde(serialize_with = "measured")]
    pub trigger_to_pass: Percentiles,
    /// From a node getting a pod CIDR (or new addresses, where routes carry them) to its
    /// route existing in the cloud. `null` in JSON when no route was wanted.
    #[serde(serialize_with = "measured")]
    pub node_to_route: Percentiles,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Percentiles of no samples are not zero: JSON says `null`, as the table says `-`.
fn measured<S: serde::Serializer>(p: &Percentiles, s: S) -> Result<S::Ok, S::Error> {
    if p.count == 0 {
        s.serialize_none()
    } else {
        s.serialize_some(p)
    }
}

/// The largest run `simulate` accepts: the script holds every node heartbeat (one per
/// node every 5 minutes) in memory, about 100 bytes each.
pub const MAX_HEARTBEATS: u64 = 3_000_000;
/// The longest simulated time.
pub const MAX_DURATION: Duration = Duration::from_secs(30 * 24 * 3600);
/// The most nodes.
pub const MAX_NODES: usize = 60_000;
/// The longest cloud call.
pub const MAX_LATENCY: Duration = Duration::from_secs(60);

/// Checks that a run fits in memory and time before it starts; the error names the
/// flag and what fits.
pub fn check_bounds(options: &SimOptions) -> Result<(), String> {
    let (default_nodes, default_duration) = options.scenario.defaults();
    let nodes = options.nodes.unwrap_or(default_nodes);
    let duration = options.duration.unwrap_or(default_duration);
    if nodes == 0 || nodes > MAX_NODES {
        return Err(format!("--nodes: give between 1 and {MAX_NODES} nodes"));
    }
    if duration.is_zero() {
        return Err("--duration: must be more than 0".into());
    }
    if duration > MAX_DURATION {
        return Err(format!(
            "--duration: {} is longer than the {} a simulation may cover",
            crate::duration::format(duration),
            crate::duration::format(MAX_DURATION)
        ));
    }
    if options.latency > MAX_LATENCY {
        return Err(format!(
            "--latency: {} is longer than {} (a cloud call that slow is an outage)",
            crate::duration::format(options.latency),
            crate::duration::format(MAX_LATENCY)
        ));
    }
    let heartbeats = nodes as u64 * (duration.as_secs() / 300);
    if heartbeats > MAX_HEARTBEATS {
        let hours = (MAX_HEARTBEATS * 300 / nodes as u64 / 3600).max(1);
        return Err(format!(
            "--nodes {nodes} for {} means {heartbeats} node heartbeats to simulate, more than \
             the {MAX_HEARTBEATS} that fit in memory; with {nodes} nodes give at most --duration {hours}h",
            crate::duration::format(duration)
        ));
    }
    Ok(())
}

/// The outcome of one mode.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ModeReport {
    pub mode: &'static str,
    pub cloud_calls: CloudCalls,
    pub route_mutations: u64,
    pub passes: u64,
    /// Calls the provider refused for its rate limit (429s).
    pub rate_limited: u64,
    /// Creates the provider refused because the route table was full (only the
    /// scenarios with a route-table limit report it).
    #[serde(skip_serializing_if = "is_zero")]
    pub refused_creates: u64,
    pub latency_seconds: Latencies,
    /// Routes still missing at the end of the run.
    pub unserved: usize,
    /// From the first node change to the last route created, in seconds.
    pub completion_seconds: Option<f64>,
    /// What bounded node-to-route latency in this run, or left routes missing: the
    /// API's rate, the cloud's latency, the poll period... `-` when no route was wanted.
    pub limited_by: String,
    #[serde(skip)]
    pub calls_per_minute: Vec<u64>,
    #[serde(skip)]
    pub resync_period: Duration,
}

/// The outcome of one scenario, in every mode.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ScenarioReport {
    pub scenario: &'static str,
    pub nodes: usize,
    pub duration_seconds: u64,
    pub modes: Vec<ModeReport>,
    #[serde(skip)]
    pub seed: u64,
    #[serde(skip)]
    pub latency: Duration,
    #[serde(skip)]
    pub rate_limit: Option<(f64, u32)>,
    #[serde(skip)]
    pub failure_rate: f64,
}

/// The modes every scenario is played in, in the order reports list them.
const MODES: [Mode; 3] = [Mode::Poll, Mode::UpstreamWatch, Mode::Watch];

/// Runs one scenario in the three modes. `progress` is called with the fraction done.
pub fn run(options: &SimOptions, progress: &mut dyn FnMut(f64)) -> ScenarioReport {
    let planned = script_of(options);
    let (script, _, duration) = &planned;
    let mut reports = Vec::new();
    for (i, mode) in MODES.into_iter().enumerate() {
        let mut sub = |f: f64| progress((i as f64 + f) / MODES.len() as f64);
        reports.push(World::new(script, mode, options, *duration).run(&mut sub));
    }
    scenario_report(options, &planned, reports)
}

/// Runs several scenarios, each in the three modes, on up to `threads` threads; the
/// reports are those [`run`] gives, in the order of `scenarios`. Every (scenario,
/// mode) run is independent and deterministic, so threads change only how long it
/// takes: the longest runs (by simulated node-seconds, poll mode first) start first so
/// that no thread is left with a long one at the end. `progress` is called on the
/// calling thread with the fraction done, at most every 100 ms.
pub fn run_all(
    scenarios: &[SimOptions],
    threads: usize,
    progress: &mut dyn FnMut(f64),
) -> Vec<ScenarioReport> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;

    let scripts: Vec<(Script, usize, Duration)> = scenarios.iter().map(script_of).collect();
    let mut jobs: Vec<(usize, usize)> = (0..scenarios.len())
        .flat_map(|s| (0..MODES.len()).map(move |m| (s, m)))
        .collect();
    let cost = |&(s, m): &(usize, usize)| {
        let (_, nodes, duration) = &scripts[s];
        let poll_weight = if MODES[m] == Mode::Poll { 4 } else { 1 };
        *nodes as u128 * duration.as_secs() as u128 * poll_weight
    };
    jobs.sort_by_key(|job| std::cmp::Reverse(cost(job)));
    let next = AtomicUsize::new(0);
    // Each job's fraction done, in thousandths.
    let done: Vec<AtomicUsize> = jobs.iter().map(|_| AtomicUsize::new(0)).collect();
    let (finished, reports) = mpsc::channel::<((usize, usize), ModeReport)>();
    let mut by_scenario: Vec<Vec<Option<ModeReport>>> = scenarios
        .iter()
        .map(|_| MODES.iter().map(|_| None).collect())
        .collect();
    std::thread::scope(|scope| {
        for _ in 0..threads.clamp(1, jobs.len().max(1)) {
            let finished = finished.clone();
            let (jobs, next, done, scripts) = (&jobs, &next, &done, &scripts);
            scope.spawn(move || {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&(s, m)) = jobs.get(i) else { return };
                    let (script, _, duration) = &scripts[s];
                    let mut mark = |f: f64| done[i].store((f * 1000.0) as usize, Ordering::Relaxed);
                    let report =
                        World::new(script, MODES[m], &scenarios[s], *duration).run(&mut mark);
                    done[i].store(1000, Ordering::Relaxed);
                    if finished.send(((s, m), report)).is_err() {
                        return;
                    }
                }
            });
        }
        drop(finished);
        let fraction = || {
            let sum: usize = done.iter().map(|d| d.load(Ordering::Relaxed)).sum();
            sum as f64 / (1000.0 * jobs.len().max(1) as f64)
        };
        loop {
            match reports.recv_timeout(Duration::from_millis(100)) {
                Ok(((s, m), report)) => by_scenario[s][m] = Some(report),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
            progress(fraction());
        }
    });
    scenarios
        .iter()
        .zip(&scripts)
        .zip(by_scenario)
        .map(|((options, planned), modes)| {
            let modes = modes
                .into_iter()
                .map(|m| m.expect("every job reports (a thread that panicked ends the scope)"))
                .collect();
            scenario_report(options, planned, modes)
        })
        .collect()
}

/// The scenario's script, node count and duration, bounded.
fn script_of(options: &SimOptions) -> (Script, usize, Duration) {
    let (default_nodes, default_duration) = options.scenario.defaults();
    let nodes = options.nodes.unwrap_or(default_nodes).clamp(1, MAX_NODES);
    let duration = options
        .duration
        .unwrap_or(default_duration)
        .min(MAX_DURATION);
    (
        Script::new(options.scenario, nodes, duration, options.seed),
        nodes,
        duration,
    )
}

fn scenario_report(
    options: &SimOptions,
    (script, nodes, duration): &(Script, usize, Duration),
    reports: Vec<ModeReport>,
) -> ScenarioReport {
    let (nodes, duration) = (*nodes, *duration);
    ScenarioReport {
        scenario: options.scenario.name(),
        nodes,
        duration_seconds: duration.as_secs(),
        modes: reports,
        seed: options.seed,
        latency: options.latency,
        rate_limit: script.rate_limit,
        failure_rate: script.failure_rate,
    }
}

/// A rolling replacement on a fixed timeline: the scenario `cargo bench -- upstream`
/// plays in real time against upstream's real controller and ours, so that the
/// emulation can be set beside them. Times count from the controller's first complete
/// node list.
#[derive(Clone, Debug)]
pub struct Replacement {
    /// Nodes with pod CIDRs when the controller starts; it creates their routes.
    pub nodes: usize,
    /// How many of them are replaced, `node-0` first.
    pub replaced: usize,
    /// When the first node is deleted.
    pub first: Duration,
    /// From one deletion to the next.
    pub spacing: Duration,
    /// From a deletion to the creation of its replacement, which has its pod CIDR
    /// from the start.
    pub replace_after: Duration,
    /// When the run ends.
    pub duration: Duration,
    /// Time each cloud call takes.
    pub latency: Duration,
    pub seed: u64,
}

/// The outcome of [`run_replacement`].
#[derive(Clone, Debug, PartialEq)]
pub struct ReplacementReport {
    /// Cloud calls from the start to just before the first deletion (creating the
    /// initial routes).
    pub startup_calls: CloudCalls,
    pub startup_passes: u64,
    /// The scripted part, from the first deletion on: its calls, passes, and the
    /// node-to-route latencies of the replacement nodes.
    pub scripted: ModeReport,
}

/// Plays `replacement` against the controller in `mode`. The simulation is
/// deterministic, so the run that stops just before the first deletion is exactly
/// the start of the full run; the difference is the scripted part.
pub fn run_replacement(replacement: &Replacement, mode: Mode) -> ReplacementReport {
    let script = Script::replacement(replacement);
    let options = SimOptions {
        scenario: Scenario::RollingUpgrade,
        nodes: Some(replacement.nodes),
        duration: Some(replacement.duration),
        seed: replacement.seed,
        latency: replacement.latency,
    };
    let before = replacement.first.saturating_sub(Duration::from_nanos(1));
    let startup = World::new(&script, mode, &options, before).run(&mut |_| {});
    let mut full = World::new(&script, mode, &options, replacement.duration).run(&mut |_| {});
    full.cloud_calls = CloudCalls {
        list: full.cloud_calls.list - startup.cloud_calls.list,
        create: full.cloud_calls.create - startup.cloud_calls.create,
        delete: full.cloud_calls.delete - startup.cloud_calls.delete,
    };
    full.passes -= startup.passes;
    full.rate_limited -= startup.rate_limited;
    ReplacementReport {
        startup_calls: startup.cloud_calls,
        startup_passes: startup.passes,
        scripted: full,
    }
}

// --- the scenario script ------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Change {
    Add(Node),
    Delete(String),
    PodCidrs(String, Vec<String>),
    Addresses(String, Vec<NodeAddress>),
    Heartbeat(String),
}

struct Script {
    initial: Vec<Node>,
    /// Routes for the initial nodes already exist in the cloud.
    seeded: bool,
    changes: Vec<(Duration, Change)>,
    route_mutations: u64,
    rate_limit: Option<(f64, u32)>,
    failure_rate: f64,
    report_addresses: bool,
    /// The route table's limit, if it has one, and the routes of others in it.
    route_limit: Option<(usize, usize)>,
}

/// Routes of others in the route table of `full-table` (a VPN, a gateway).
const FOREIGN_ROUTES: usize = 5;

const CLUSTER_CIDR: &str = "10.0.0.0/8";

fn sim_node(k: usize, with_cidr: bool) -> Node {
    Node {
        name: format!("node-{k}"),
        uid: format!("00000000-0000-4000-8000-{k:012}"),
        resource_version: "1".into(),
        provider_id: Some(format!("fake://{k}")),
        pod_cidrs: if with_cidr {
            vec![pod_cidr(k)]
        } else {
            Vec::new()
        },
        addresses: vec![
            NodeAddress::internal_ip(&node_ip(k, 0)),
            NodeAddress::new("Hostname", &format!("node-{k}")),
        ],
        network_unavailable: None,
    }
}

fn pod_cidr(k: usize) -> String {
    format!("10.{}.{}.0/24", (k >> 8) & 255, k & 255)
}

fn node_ip(k: usize, generation: usize) -> String {
    format!(
        "172.{}.{}.{}",
        16 + (generation % 16),
        (k >> 8) & 255,
        k & 255
    )
}

impl Script {
    fn new(scenario: Scenario, n: usize, duration: Duration, seed: u64) -> Script {
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut script = Script {
            initial: (0..n).map(|k| sim_node(k, true)).collect(),
            seeded: true,
            changes: Vec::new(),
            route_mutations: 0,
            rate_limit: None,
            failure_rate: 0.0,
            report_addresses: false,
            route_limit: None,
        };
        match scenario {
            Scenario::Steady => {}
            Scenario::RollingUpgrade | Scenario::FlakyCloud => {
                let step = duration.as_secs_f64() / (n as f64 + 1.0);
                for i in 0..n {
                    let t = step * (i as f64 + 0.5);
                    script.replace(i, n + i, t);
                }
                script.route_mutations = 2 * n as u64;
                if scenario == Scenario::FlakyCloud {
                    script.failure_rate = 0.1;
                }
            }
            Scenario::ScaleOut => {
                let base = 3.min(n);
                script.initial.truncate(base);
                for k in base..n {
                    let t = 10.0 + rng.random_range(0.0..60.0);
                    script.join(k, t);
                }
                script.route_mutations = (n - base) as u64;
                script.rate_limit = Some((1.0, 10));
            }
            Scenario::AddressChurn => {
                script.report_addresses = true;
                let changes = (duration.as_secs() / 10).max(1) as usize;
                let mut generation = vec![0usize; n];
                for c in 0..changes {
                    let k = rng.random_range(0..n);
                    generation[k] += 1;
                    let t = 10.0 * c as f64 + rng.random_range(0.0..10.0);
                    let addrs = vec![
                        NodeAddress::internal_ip(&node_ip(k, generation[k])),
                        NodeAddress::new("Hostname", &format!("node-{k}")),
                    ];
                    script.at(t, Change::Addresses(format!("node-{k}"), addrs));
                }
                script.route_mutations = 2 * changes as u64;
            }
            Scenario::FullTable => {
                script.route_limit = Some((n + FOREIGN_ROUTES, FOREIGN_ROUTES));
                let step = (n / 10).max(1).min(n / 2);
                // Scale-down: the table is left `step` below its limit.
                for k in 0..step {
                    script.at(60.0 + k as f64 * 0.5, Change::Delete(format!("node-{k}")));
                }
                // Scale-out of twice as many: half of them fit.
                for j in 0..2 * step {
                    script.join(n + j, 120.0 + j as f64 * 0.5);
                }
                // A second scale-down makes room for the rest.
                for k in step..2 * step {
                    script.at(
                        600.0 + (k - step) as f64 * 0.5,
                        Change::Delete(format!("node-{k}")),
                    );
                }
                script.route_mutations = 4 * step as u64;
            }
        }
        // Node status updates every 5 minutes (nodeStatusReportFrequency), which must
        // not cause passes.
        let live: Vec<String> = script.initial.iter().map(|n| n.name.clone()).collect();
        let beats = (duration.as_secs() / 300) as usize;
        for name in live {
            let phase = rng.random_range(0.0..300.0);
            for b in 0..beats {
                script.at(phase + 300.0 * b as f64, Change::Heartbeat(name.clone()));
            }
        }
        script.changes.sort_by_key(|c| c.0);
        script
    }

    fn replacement(r: &Replacement) -> Script {
        let mut script = Script {
            initial: (0..r.nodes).map(|k| sim_node(k, true)).collect(),
            seeded: false,
            changes: Vec::new(),
            route_mutations: 2 * r.replaced as u64,
            rate_limit: None,
            failure_rate: 0.0,
            report_addresses: false,
            route_limit: None,
        };
        for i in 0..r.replaced.min(r.nodes) {
            let t = (r.first + r.spacing * i as u32).as_secs_f64();
            script.at(t, Change::Delete(format!("node-{i}")));
            let replacement = sim_node(r.nodes + i, true);
            script.at(t + r.replace_after.as_secs_f64(), Change::Add(replacement));
        }
        script.changes.sort_by_key(|c| c.0);
        script
    }

    fn at(&mut self, secs: f64, change: Change) {
        self.changes.push((Duration::from_secs_f64(secs), change));
    }

    /// A new node registers without a pod CIDR; the IPAM controller assigns one shortly
    /// after.
    fn join(&mut self, k: usize, t: f64) {
        self.at(t, Change::Add(sim_node(k, false)));
        self.at(
            t + 0.2,
            Change::PodCidrs(format!("node-{k}"), vec![pod_cidr(k)]),
        );
    }

    fn replace(&mut self, old: usize, new: usize, t: f64) {
        self.at(t, Change::Delete(format!("node-{old}")));
        self.join(new, t + 2.0);
    }
}

// --- the world around the controller ---------------------------------------------------

enum Event {
    Change(usize),
    Arrive {
        id: OpId,
        op: CloudOp,
        reply_at: u64,
    },
    Reply {
        id: OpId,
        reply: CloudReply,
    },
    /// The API server has stored a node's condition: the watch will show it.
    ConditionWritten(String, Condition),
}

struct World<'a> {
    script: &'a Script,
    mode: Mode,
    t0: Instant,
    now: u64,
    end: u64,
    clock: Arc<AtomicU64>,
    cloud: Arc<FakeCloud>,
    metrics: Arc<Metrics>,
    controller: Controller,
    latency: u64,
    events: BinaryHeap<Reverse<(u64, u64, usize)>>,
    payloads: HashMap<usize, Event>,
    seq: u64,
    cluster: BTreeMap<String, Node>,
    rv: u64,
    /// Node changes that should start a pass, by time.
    changes: Vec<u64>,
    pass_starts: Vec<u64>,
    /// Routes that should come to exist, with the time they became wanted.
    wanted: HashMap<(String, Cidr), u64>,
    node_to_route: Vec<Duration>,
    first_change: Option<u64>,
    last_fulfilled: Option<u64>,
    calls_per_minute: Vec<u64>,
}

const NANOS: u64 = 1_000_000_000;

impl<'a> World<'a> {
    fn new(script: &'a Script, mode: Mode, options: &SimOptions, duration: Duration) -> World<'a> {
        let t0 = Instant::now();
        let clock = Arc::new(AtomicU64::new(0));
        let reader = clock.clone();
        let cloud = Arc::new(FakeCloud::with_clock(Box::new(move || {
            t0 + Duration::from_nanos(reader.load(Ordering::Relaxed))
        })));
        if let Some((rate, burst)) = script.rate_limit {
            cloud.set_rate_limit(rate, burst);
        }
        if script.failure_rate > 0.0 {
            cloud.set_failure_rate(script.failure_rate, options.seed);
        }
        cloud.set_report_node_addresses(script.report_addresses);
        if let Some((limit, foreign)) = script.route_limit {
            cloud.set_route_limit(Some(limit));
            cloud.seed((0..foreign).map(|i| Route {
                name: format!("other-{i}"),
                destination_cidr: format!("192.168.{i}.0/24"),
                ..Route::default()
            }));
        }
        if script.seeded {
            cloud.seed(script.initial.iter().map(|n| Route {
                name: format!("kubernetes-{}-{}", n.name, n.pod_cidrs[0]),
                target_node: n.name.clone(),
                target_node_addresses: n.addresses.clone(),
                destination_cidr: n.pod_cidrs[0].clone(),
                ..Route::default()
            }));
        }
        let mut config = Config::new(vec![Cidr::parse(CLUSTER_CIDR).expect("cluster CIDR")]);
        config.mode = mode;
        config.seed = Some(options.seed);
        // Upstream has a 200-slot semaphore; ours bounds calls in flight to 16.
        config.max_in_flight = if mode == Mode::Watch { 16 } else { 200 };
        // Ours spends the provider's budget in the controller, as the binary does
        // (run::Builder); upstream has no client-side limit.
        if mode == Mode::Watch {
            config.budget = cloud.budget();
            config.batch_size = cloud.batch_size();
        }
        // Upstream sends every create and lets the cloud refuse it.
        config.guard_table_limits = mode == Mode::Watch;
        // Upstream's poll mode leaves a failed route to the next poll.
        config.poll_retries = false;
        let metrics = Arc::new(Metrics::new());
        let controller = Controller::new(config, metrics.clone());
        World {
            script,
            mode,
            t0,
            now: 0,
            end: duration.as_nanos() as u64,
            clock,
            cloud,
            metrics,
            controller,
            latency: options.latency.as_nanos() as u64,
            events: BinaryHeap::new(),
            payloads: HashMap::new(),
            seq: 0,
            cluster: BTreeMap::new(),
            rv: 1,
            changes: Vec::new(),
            pass_starts: Vec::new(),
            wanted: HashMap::new(),
            node_to_route: Vec::new(),
            first_change: None,
            last_fulfilled: None,
            calls_per_minute: vec![0; (duration.as_secs() / 60 + 1) as usize],
        }
    }

    fn instant(&self, t: u64) -> Instant {
        self.t0 + Duration::from_nanos(t)
    }

    fn push(&mut self, at: u64, event: Event) {
        self.seq += 1;
        let key = self.seq as usize;
        self.payloads.insert(key, event);
        self.events.push(Reverse((at, self.seq, key)));
    }

    fn run(mut self, progress: &mut dyn FnMut(f64)) -> ModeReport {
        // The initial list at time 0, then the script.
        let initial = self.script.initial.clone();
        let mut commands = self.handle(Input::Node(NodeEvent::Init));
        for node in initial {
            self.cluster.insert(node.name.clone(), node.clone());
            commands.extend(self.handle(Input::Node(NodeEvent::InitApply(node))));
        }
        commands.extend(self.handle(Input::Node(NodeEvent::InitDone)));
        self.process(commands);
        for (i, (t, _)) in self.script.changes.iter().enumerate() {
            self.push(t.as_nanos() as u64, Event::Change(i));
        }
        let mut reported = 0u64;
        let mut stuck = 0u32;
        loop {
            let next_event = self.events.peek().map(|Reverse((t, _, _))| *t);
            let deadline = self
                .controller
                .next_deadline()
                .map(|d| d.saturating_duration_since(self.t0).as_nanos() as u64);
            let (t, tick) = match (next_event, deadline) {
                (Some(e), Some(d)) if d < e => (d, true),
                (Some(e), _) => (e, false),
                (None, Some(d)) => (d, true),
                (None, None) => break,
            };
            if t > self.end {
                break;
            }
            stuck = if tick && t <= self.now { stuck + 1 } else { 0 };
            assert!(
                stuck < 10_000,
                "controller keeps asking to be woken at {t} ns without progress"
            );
            self.now = self.now.max(t);
            self.clock.store(self.now, Ordering::Relaxed);
            let commands = if tick {
                self.handle(Input::Tick)
            } else {
                let Some(Reverse((_, _, key))) = self.events.pop() else {
                    break;
                };
                let Some(event) = self.payloads.remove(&key) else {
                    continue;
                };
                self.on_event(event)
            };
            self.process(commands);
            let percent = self.now * 100 / self.end.max(1);
            if percent > reported {
                reported = percent;
                progress(percent as f64 / 100.0);
            }
        }
        progress(1.0);
        self.report()
    }

    fn handle(&mut self, input: Input) -> Vec<Command> {
        let now = self.instant(self.now);
        self.controller.handle(input, now)
    }

    fn on_event(&mut self, event: Event) -> Vec<Command> {
        match event {
            Event::Change(i) => self.apply_change(i),
            Event::Arrive { id, op, reply_at } => {
                let (reply, spent) = self.execute(&op);
                if let Some(spent) = spent {
                    self.push(reply_at, Event::Reply { id, reply: spent });
                }
                if let Some(tables) = crate::workers::tables_after(self.cloud.as_ref(), &reply) {
                    // Just before the list's reply, as the cloud workers send it.
                    self.push(reply_at, Event::Reply { id, reply: tables });
                }
                self.push(reply_at, Event::Reply { id, reply });
                Vec::new()
            }
            Event::Reply { id, reply } => self.handle(Input::Cloud { id, reply }),
            Event::ConditionWritten(node, condition) => {
                // The node as the API server now holds it, as the next watch event of
                // it (a heartbeat) will show it; else each heartbeat would take back
                // what was written, and the next pass write it again.
                if let Some(n) = self.cluster.get_mut(&node) {
                    n.network_unavailable = Some(condition);
                }
                self.handle(Input::ConditionWritten {
                    node,
                    result: Ok(()),
                })
            }
        }
    }

    /// A cloud call reaching the provider.
    fn execute(&mut self, op: &CloudOp) -> (CloudReply, Option<CloudReply>) {
        let minute = (self.now / (60 * NANOS)) as usize;
        if let Some(c) = self.calls_per_minute.get_mut(minute) {
            *c += 1;
        }
        let (mut reply, spent) =
            run_op_metered(self.cloud.as_ref(), "kubernetes", op, &self.metrics);
        match op {
            CloudOp::Create { route, .. } => self.check_fulfilled(route),
            CloudOp::Apply { changes } => {
                for change in changes {
                    if let RouteChange::Create { route, .. } = change {
                        self.check_fulfilled(route);
                    }
                }
            }
            _ => {}
        }
        if let CloudReply::Done(Err(e)) | CloudReply::Listed(Err(e)) = &mut reply
            && let CloudErrorKind::RateLimited { .. } = e.kind
            && self.mode != Mode::Watch
        {
            // Upstream has no notion of a rate limit: the call simply failed.
            e.kind = CloudErrorKind::Retry { after: None };
        }
        // Upstream reads no rate-limit headers either.
        let spent = spent.filter(|_| self.mode == Mode::Watch);
        (reply, spent)
    }

    /// Whether the cloud now holds the route a create asked for (whatever the reply
    /// said: a lost reply may hide a success), with the node's current addresses.
    fn check_fulfilled(&mut self, asked: &Route) {
        let Ok(cidr) = Cidr::parse(&asked.destination_cidr) else {
            return;
        };
        let key = (asked.target_node.clone(), cidr);
        let Some(&since) = self.wanted.get(&key) else {
            return;
        };
        let Some(node) = self.cluster.get(&asked.target_node) else {
            return;
        };
        let holds = self.cloud.route(&cidr).is_some_and(|r| {
            r.target_node == node.name
                && crate::model::same_addresses(&r.target_node_addresses, &node.addresses)
        });
        if holds {
            self.wanted.remove(&key);
            self.node_to_route
                .push(Duration::from_nanos(self.now - since));
            self.last_fulfilled = Some(self.now);
        }
    }

    fn apply_change(&mut self, i: usize) -> Vec<Command> {
        let (_, change) = &self.script.changes[i];
        self.rv += 1;
        let rv = self.rv.to_string();
        let now = self.now;
        let event = match change.clone() {
            Change::Add(mut node) => {
                node.resource_version = rv;
                for c in &node.pod_cidrs {
                    self.want(&node.name, c, now);
                }
                self.cluster.insert(node.name.clone(), node.clone());
                self.note_change();
                NodeEvent::Added(node)
            }
            Change::Delete(name) => {
                let Some(node) = self.cluster.remove(&name) else {
                    return Vec::new();
                };
                self.wanted.retain(|(n, _), _| *n != name);
                self.note_change();
                NodeEvent::Deleted(node)
            }
            Change::PodCidrs(name, cidrs) => {
                for c in &cidrs {
                    self.want(&name, c, now);
                }
                let Some(node) = self.cluster.get_mut(&name) else {
                    return Vec::new();
                };
                node.pod_cidrs = cidrs;
                node.resource_version = rv;
                let node = node.clone();
                self.note_change();
                NodeEvent::Modified(node)
            }
            Change::Addresses(name, addresses) => {
                let Some(node) = self.cluster.get_mut(&name) else {
                    return Vec::new();
                };
                node.addresses = addresses;
                node.resource_version = rv;
                let node = node.clone();
                if self.script.report_addresses {
                    for c in &node.pod_cidrs {
                        self.want(&node.name, c, now);
                    }
                }
                self.note_change();
                NodeEvent::Modified(node)
            }
            Change::Heartbeat(name) => {
                let Some(node) = self.cluster.get_mut(&name) else {
                    return Vec::new();
                };
                node.resource_version = rv;
                NodeEvent::Modified(node.clone())
            }
        };
        self.handle(Input::Node(event))
    }

    fn want(&mut self, node: &str, cidr: &str, now: u64) {
        if let Ok(c) = Cidr::parse(cidr) {
            self.wanted.insert((node.to_string(), c), now);
        }
    }

    fn note_change(&mut self) {
        self.changes.push(self.now);
        self.first_change.get_or_insert(self.now);
    }

    fn process(&mut self, commands: Vec<Command>) {
        for command in commands {
            match command {
                Command::Cloud { id, op, .. } => {
                    // Sent at once: the controller dispatched it because the budget
                    // allows it now.
                    let send = self.now;
                    let arrive = send + self.latency / 2;
                    self.push(
                        arrive,
                        Event::Arrive {
                            id,
                            op,
                            reply_at: send + self.latency,
                        },
                    );
                }
                Command::WriteCondition {
                    node, condition, ..
                } => {
                    self.push(
                        self.now + 10_000_000,
                        Event::ConditionWritten(node, condition),
                    );
                }
                // The simulation neither shuts down nor loses a lease.
                Command::RecordEvent { .. } | Command::Exit(_) => {}
                Command::PassFinished(report) => {
                    let took = report.duration.as_nanos() as u64;
                    self.pass_starts.push(self.now.saturating_sub(took));
                }
            }
        }
    }

    fn report(self) -> ModeReport {
        let mut starts = self.pass_starts.clone();
        starts.sort_unstable();
        let mut trigger_to_pass = Vec::new();
        for &t in &self.changes {
            let i = starts.partition_point(|&s| s < t);
            if let Some(&s) = starts.get(i) {
                trigger_to_pass.push(Duration::from_nanos(s - t));
            }
        }
        let counters = self.cloud.counters();
        let node_to_route = Percentiles::of(self.node_to_route);
        let completion_seconds = match (self.first_change, self.last_fulfilled) {
            (Some(a), Some(b)) if b >= a => Some(round3((b - a) as f64 / NANOS as f64)),
            _ => None,
        };
        let limited_by = Limits {
            mode: self.mode,
            config: self.controller.config(),
            script: self.script,
            latency: Duration::from_nanos(self.latency),
        }
        .limited_by(
            &node_to_route,
            self.wanted.len(),
            counters.rate_limited.load(Ordering::Relaxed),
            counters.table_full.load(Ordering::Relaxed),
            completion_seconds,
        );
        ModeReport {
            mode: self.mode.as_str(),
            cloud_calls: CloudCalls {
                list: counters.get(Call::List),
                create: counters.get(Call::Create),
                delete: counters.get(Call::Delete),
            },
            route_mutations: self.script.route_mutations,
            passes: self.metrics.passes_total(),
            rate_limited: counters.rate_limited.load(Ordering::Relaxed),
            refused_creates: counters.table_full.load(Ordering::Relaxed),
            latency_seconds: Latencies {
                trigger_to_pass: Percentiles::of(trigger_to_pass),
                node_to_route,
            },
            unserved: self.wanted.len(),
            completion_seconds,
            limited_by,
            calls_per_minute: self.calls_per_minute,
            resync_period: self.controller.resync_period(),
        }
    }
}

/// What a mode's run was up against, to say what bounded it.
struct Limits<'a> {
    mode: Mode,
    config: &'a Config,
    script: &'a Script,
    latency: Duration,
}

impl Limits<'_> {
    /// The first that applies: routes left missing; nothing wanted; the API's rate
    /// (429s, or a completion near the least its rate allows); room in a full table;
    /// calls that failed and waited for their retry; else the mode's own pace.
    fn limited_by(
        &self,
        node_to_route: &Percentiles,
        missing: usize,
        refused_for_rate: u64,
        refused_for_room: u64,
        completion: Option<f64>,
    ) -> String {
        let period = crate::duration::format(self.config.route_reconciliation_period);
        if missing > 0 {
            let routes = if missing == 1 { "route" } else { "routes" };
            return format!("{missing} {routes} missing");
        }
        if node_to_route.count == 0 {
            return "-".into();
        }
        if let Some((rate, burst)) = self.script.rate_limit {
            let beyond_burst = self.script.route_mutations.saturating_sub(u64::from(burst));
            let least = beyond_burst as f64 / rate;
            let near_least = least > 0.0 && completion.is_some_and(|c| c >= 0.9 * least);
            // Held by it: routes waited longer than the mode's own pace allows (a poll
            // period, upstream's token bucket; ours' goal of a second).
            let pace = match self.mode {
                Mode::Watch => 1.0,
                Mode::Poll | Mode::UpstreamWatch => {
                    self.config.route_reconciliation_period.as_secs_f64()
                }
            };
            if (refused_for_rate > 0 || near_least) && node_to_route.p99 > pace {
                return format!("the API's {rate} request/s");
            }
        }
        if self.script.route_limit.is_some() && (refused_for_room > 0 || node_to_route.max > 60.0) {
            return "room in the route table".into();
        }
        if self.script.failure_rate > 0.0 {
            return match self.mode {
                Mode::Poll => "failed calls: next poll".into(),
                Mode::UpstreamWatch => "failed calls: next pass".into(),
                Mode::Watch => "failed calls, retried".into(),
            };
        }
        match self.mode {
            Mode::Poll => format!("the {period} poll period"),
            Mode::UpstreamWatch => format!("its {period} token bucket"),
            Mode::Watch => format!(
                "the cloud's latency ({})",
                crate::duration::format(self.latency)
            ),
        }
    }
}

// --- goals and output ------------------------------------------------------------------------

/// A goal of the project, checked against a scenario's numbers.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Goal {
    pub goal: String,
    pub measured: String,
    /// `None` when the run could not show it either way (too short, too few nodes):
    /// a goal is met or missed only when it was measured.
    pub met: Option<bool>,
}

/// The goals that apply to this scenario (issue 7), evaluated on our mode.
pub fn goals(report: &ScenarioReport) -> Vec<Goal> {
    let Some(ours) = report.modes.iter().find(|m| m.mode == "watch") else {
        return Vec::new();
    };
    let poll = report.modes.iter().find(|m| m.mode == "poll");
    let mut goals = Vec::new();
    let unmeasured = |goal: String, why: &str| Goal {
        goal,
        measured: why.to_string(),
        met: None,
    };
    match report.scenario {
        "steady" => {
            let resyncs = report.duration_seconds / ours.resync_period.as_secs().max(1);
            let allowed = 1 + resyncs;
            let goal =
                format!("at most 1 list per resync (+1 at start: {allowed}) and nothing else");
            // Nothing happens in a steady cluster but heartbeats, every 5 minutes.
            if report.duration_seconds < 300 {
                goals.push(unmeasured(
                    goal,
                    "not measured: no node heartbeat in under 5m; give --duration 5m or more",
                ));
            } else {
                goals.push(Goal {
                    goal,
                    measured: format!(
                        "{} lists, {} creates, {} deletes (poll: {} lists)",
                        ours.cloud_calls.list,
                        ours.cloud_calls.create,
                        ours.cloud_calls.delete,
                        poll.map_or(0, |p| p.cloud_calls.list)
                    ),
                    met: Some(
                        ours.cloud_calls.list <= allowed
                            && ours.cloud_calls.create + ours.cloud_calls.delete == 0,
                    ),
                });
            }
        }
        "rolling-upgrade" => {
            let limit = 1.1 * ours.route_mutations as f64;
            let goal = format!("cloud calls at most 1.1 x route mutations ({limit:.0})");
            goals.push(if ours.route_mutations == 0 {
                unmeasured(goal, "not measured: no route changed")
            } else {
                Goal {
                    goal,
                    measured: format!("{} calls", ours.cloud_calls.total()),
                    met: Some((ours.cloud_calls.total() as f64) <= limit),
                }
            });
            let goal = format!(
                "p99 node change to route created under 1 s with {} cloud latency",
                crate::duration::format(report.latency)
            );
            let latency = &ours.latency_seconds.node_to_route;
            goals.push(if latency.count == 0 {
                unmeasured(goal, "not measured: no route was created")
            } else {
                Goal {
                    goal,
                    measured: format!("p99 {:.3} s", latency.p99),
                    met: Some(latency.p99 < 1.0 && ours.unserved == 0),
                }
            });
        }
        "scale-out" => {
            let (rate, burst) = report.rate_limit.unwrap_or((1.0, 0));
            let beyond_burst = ours.route_mutations.saturating_sub(u64::from(burst));
            let minimum = beyond_burst as f64 / rate;
            let why = format!(
                "not measured: {} route creates fit in the burst of {burst}; give --nodes {} or more",
                ours.route_mutations,
                u64::from(burst) + 4
            );
            goals.push(if beyond_burst == 0 {
                unmeasured("zero 429s".into(), &why)
            } else {
                Goal {
                    goal: "zero 429s".into(),
                    measured: format!("{} 429s", ours.rate_limited),
                    met: Some(ours.rate_limited == 0),
                }
            });
            let goal = format!(
                "completion within 5 % of the minimum the rate limit allows ({minimum:.0} s)"
            );
            goals.push(match ours.completion_seconds {
                _ if beyond_burst == 0 => unmeasured(goal, &why),
                Some(took) if ours.unserved == 0 => Goal {
                    goal,
                    measured: format!("{took:.0} s ({:+.1} %)", (took / minimum - 1.0) * 100.0),
                    met: Some(took <= minimum * 1.05),
                },
                _ => Goal {
                    goal,
                    measured: format!(
                        "{} routes still missing at the end; a longer --duration shows the completion time",
                        ours.unserved
                    ),
                    met: Some(false),
                },
            });
        }
        "full-table" => {
            let refused: Vec<String> = report
                .modes
                .iter()
                .filter(|m| m.mode != "watch")
                .map(|m| format!("{}: {}", m.mode, m.refused_creates))
                .collect();
            goals.push(Goal {
                goal: "no create sent that the full route table refuses".into(),
                measured: format!(
                    "{} refused ({}), {} routes missing",
                    ours.refused_creates,
                    refused.join(", "),
                    ours.unserved
                ),
                met: Some(ours.refused_creates == 0 && ours.unserved == 0),
            });
        }
        _ => {}
    }
    goals
}

/// What the table calls a mode: ours is marked, since the other two are references.
pub fn mode_label(mode: &str) -> String {
    match mode {
        "watch" => "watch (ours)".to_string(),
        other => other.to_string(),
    }
}

/// One line that sums a scenario up: our calls and latency beside the references, what
/// held ours, and the goals' tally (left out when the scenario has no goal).
pub fn verdict(report: &ScenarioReport) -> String {
    let find = |name: &str| report.modes.iter().find(|m| m.mode == name);
    let Some(ours) = find("watch") else {
        return "verdict: our mode did not run".into();
    };
    let others: Vec<String> = report
        .modes
        .iter()
        .filter(|m| m.mode != "watch")
        .map(|m| format!("{} {}", m.mode, m.cloud_calls.total()))
        .collect();
    let latency = &ours.latency_seconds.node_to_route;
    let mut verdict = format!(
        "verdict: watch (ours) made {} cloud calls ({}), {} routes missing",
        ours.cloud_calls.total(),
        others.join(", "),
        ours.unserved,
    );
    if latency.count > 0 {
        let _ = write!(
            verdict,
            ", node->route p99 {} (limited by {})",
            short(latency.p99),
            ours.limited_by
        );
    }
    let goals = goals(report);
    let tally: Vec<String> = [
        (Some(true), "met"),
        (Some(false), "not met"),
        (None, "not measured"),
    ]
    .into_iter()
    .filter_map(|(met, word)| {
        let n = goals.iter().filter(|g| g.met == met).count();
        (n > 0).then(|| format!("{n} {word}"))
    })
    .collect();
    if !tally.is_empty() {
        let _ = write!(verdict, "; goals: {}", tally.join(", "));
    }
    verdict
}

/// The width the table keeps to by default; `--wide` has every column and may exceed it.
pub const TABLE_WIDTH: usize = 100;

/// The report as the people-readable table: by default the columns that tell the modes
/// apart, within [`TABLE_WIDTH`] columns; `wide`, every column.
pub fn table(report: &ScenarioReport, wide: bool) -> String {
    let mut out = String::new();
    let header = format!(
        "scenario {}: {} nodes, {}, seed {}, cloud latency {}{}{}",
        report.scenario,
        report.nodes,
        crate::duration::format(Duration::from_secs(report.duration_seconds)),
        report.seed,
        crate::duration::format(report.latency),
        report.rate_limit.map_or(String::new(), |(r, b)| format!(
            ", API limit {r}/s burst {b}"
        )),
        if report.failure_rate > 0.0 {
            format!(", {:.0} % of calls fail", report.failure_rate * 100.0)
        } else {
            String::new()
        },
    );
    wrap(&mut out, "", &header);
    let columns = if wide { WIDE } else { NARROW };
    let cells =
        |m: Option<&ModeReport>| -> Vec<String> { columns.iter().map(|c| (c.cell)(m)).collect() };
    let mut rows = vec![cells(None)];
    rows.extend(report.modes.iter().map(|m| cells(Some(m))));
    for row in rows {
        let mut line = String::from(" ");
        for (c, cell) in columns.iter().zip(row) {
            line.push_str(&" ".repeat(c.gap));
            if c.right {
                let _ = write!(line, "{cell:>w$}", w = c.width);
            } else {
                let _ = write!(line, "{cell:<w$}", w = c.width);
            }
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
    for g in goals(report) {
        let line = format!(
            "goal {}: {} -> {}",
            match g.met {
                Some(true) => "met",
                Some(false) => "NOT MET",
                None => "not measured",
            },
            g.goal,
            g.measured
        );
        wrap(&mut out, "  ", &line);
    }
    wrap(&mut out, "  ", &verdict(report));
    out
}

/// The lines under the tables: what a dash and "limited by" mean, and where the other
/// columns are.
pub fn legend(wide: bool) -> String {
    let mut out = String::new();
    wrap(
        &mut out,
        "",
        "-: nothing to measure (no node changed, no route was wanted). limited by: what held \
         node->route latency back, or left routes missing at the end. at once: the pass \
         started on the trigger.",
    );
    if !wide {
        wrap(
            &mut out,
            "",
            "--wide adds list, create and delete calls, passes, trigger->pass and the max.",
        );
    }
    out
}

/// Appends `text` in lines of at most [`TABLE_WIDTH`] columns, the first indented by
/// `indent`, the rest by two more (a word longer than a line stays whole).
fn wrap(out: &mut String, indent: &str, text: &str) {
    let mut line = String::from(indent);
    let mut first_word = true;
    for word in text.split(' ').filter(|w| !w.is_empty()) {
        let len = line.chars().count() + 1 + word.chars().count();
        if !first_word && len > TABLE_WIDTH {
            let _ = writeln!(out, "{line}");
            line = format!("{indent}  ");
            first_word = true;
        }
        if !first_word {
            line.push(' ');
        }
        line.push_str(word);
        first_word = false;
    }
    let _ = writeln!(out, "{line}");
}

/// A column of the table: its heading, its width, and its cell for a mode (`None`:
/// the heading).
struct Column {
    gap: usize,
    width: usize,
    right: bool,
    cell: fn(Option<&ModeReport>) -> String,
}

const fn column(
    gap: usize,
    width: usize,
    right: bool,
    cell: fn(Option<&ModeReport>) -> String,
) -> Column {
    Column {
        gap,
        width,
        right,
        cell,
    }
}

fn mode_cell(m: Option<&ModeReport>) -> String {
    m.map_or("mode".into(), |m| mode_label(m.mode))
}

fn calls_cell(m: Option<&ModeReport>) -> String {
    m.map_or("calls".into(), |m| m.cloud_calls.total().to_string())
}

fn lists_cell(m: Option<&ModeReport>) -> String {
    m.map_or("lists".into(), |m| m.cloud_calls.list.to_string())
}

fn creates_cell(m: Option<&ModeReport>) -> String {
    m.map_or("creates".into(), |m| m.cloud_calls.create.to_string())
}

fn deletes_cell(m: Option<&ModeReport>) -> String {
    m.map_or("deletes".into(), |m| m.cloud_calls.delete.to_string())
}

fn mutations_cell(m: Option<&ModeReport>) -> String {
    m.map_or("mutations".into(), |m| m.route_mutations.to_string())
}

fn passes_cell(m: Option<&ModeReport>) -> String {
    m.map_or("passes".into(), |m| m.passes.to_string())
}

fn refused_cell(m: Option<&ModeReport>) -> String {
    m.map_or("429s".into(), |m| m.rate_limited.to_string())
}

fn trigger_cell(m: Option<&ModeReport>) -> String {
    m.map_or("trigger->pass p50/p99/max".into(), |m| {
        triple(&m.latency_seconds.trigger_to_pass)
    })
}

fn node_to_route_cell(m: Option<&ModeReport>) -> String {
    m.map_or("node->route p50/p99".into(), |m| {
        pair(&m.latency_seconds.node_to_route)
    })
}

fn node_to_route_wide_cell(m: Option<&ModeReport>) -> String {
    m.map_or("node->route p50/p99/max".into(), |m| {
        triple(&m.latency_seconds.node_to_route)
    })
}

fn missing_cell(m: Option<&ModeReport>) -> String {
    m.map_or("missing".into(), |m| m.unserved.to_string())
}

fn limited_cell(m: Option<&ModeReport>) -> String {
    m.map_or("limited by".into(), |m| m.limited_by.clone())
}

/// The default columns: 2 + 14 + 8 + 7 + 7 + 22 + 8 + 2 = 70, which leaves 30 for
/// "limited by", whose longest text ("the cloud's latency (100ms)") is 27.
const NARROW: &[Column] = &[
    column(1, 14, false, mode_cell),
    column(1, 7, true, calls_cell),
    column(1, 6, true, lists_cell),
    column(1, 6, true, refused_cell),
    column(2, 20, false, node_to_route_cell),
    column(1, 7, true, missing_cell),
    column(2, 0, false, limited_cell),
];

const WIDE: &[Column] = &[
    column(1, 14, false, mode_cell),
    column(1, 7, true, calls_cell),
    column(1, 6, true, lists_cell),
    column(1, 7, true, creates_cell),
    column(1, 7, true, deletes_cell),
    column(1, 9, true, mutations_cell),
    column(1, 6, true, passes_cell),
    column(1, 6, true, refused_cell),
    column(2, 25, false, trigger_cell),
    column(2, 23, false, node_to_route_wide_cell),
    column(1, 7, true, missing_cell),
    column(2, 0, false, limited_cell),
];

/// p50/p99/max, `-` when nothing was measured and "at once" when all three are zero.
fn triple(p: &Percentiles) -> String {
    if p.count == 0 {
        return "-".into();
    }
    if p.max == 0.0 {
        return "at once".into();
    }
    format!("{}/{}/{}", short(p.p50), short(p.p99), short(p.max))
}

/// p50/p99, as [`triple`].
fn pair(p: &Percentiles) -> String {
    if p.count == 0 {
        return "-".into();
    }
    if p.max == 0.0 {
        return "at once".into();
    }
    format!("{}/{}", short(p.p50), short(p.p99))
}

fn short(secs: f64) -> String {
    if secs < 1.0 {
        format!("{:.0}ms", secs * 1000.0)
    } else {
        format!("{secs:.1}s")
    }
}

/// An SVG chart in two panels: cumulative cloud calls over time, one line per mode, on
/// a log axis (poll's thousands and ours' handful both stay readable); below it the
/// node-to-route latency of each mode (p50, p99, max), also on a log axis.
pub fn chart(report: &ScenarioReport) -> String {
    let (w, left, right) = (760.0, 70.0, 20.0);
    let (calls_top, calls_bottom) = (30.0, 330.0);
    let (lat_top, row) = (390.0, 24.0);
    let h = lat_top + row * report.modes.len() as f64 + 50.0;
    let plot_w = w - left - right;
    let colours = ["#d62728", "#ff7f0e", "#2ca02c"];
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{left}\" y=\"16\">{}: cumulative cloud calls over {} ({} nodes), log scale</text>\n",
        report.scenario,
        crate::duration::format(Duration::from_secs(report.duration_seconds)),
        report.nodes,
    );

    // Calls: a log axis from 1 to the next power of ten above the largest total.
    let minutes = report
        .modes
        .iter()
        .map(|m| m.calls_per_minute.len())
        .max()
        .unwrap_or(1)
        .max(2);
    let cumulative: Vec<Vec<u64>> = report
        .modes
        .iter()
        .map(|m| {
            m.calls_per_minute
                .iter()
                .scan(0, |acc, c| {
                    *acc += c;
                    Some(*acc)
                })
                .collect()
        })
        .collect();
    let top = cumulative
        .iter()
        .filter_map(|c| c.last().copied())
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let decades = top.log10().ceil().max(1.0);
    let x = |i: usize| left + plot_w * i as f64 / (minutes - 1) as f64;
    // Zero calls sit on the axis, one call one step above it.
    let y = |v: u64| {
        let level = if v == 0 { 0.0 } else { (v as f64).log10() };
        calls_bottom - (calls_bottom - calls_top) * level / decades
    };
    axes(&mut svg, left, calls_top, calls_bottom, w - right);
    for d in 0..=decades as u32 {
        let v = 10u64.pow(d);
        let _ = writeln!(
            svg,
            "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{v}</text><line x1=\"{left}\" y1=\"{:.1}\" x2=\"{}\" y2=\"{:.1}\" stroke=\"#ddd\"/>",
            left - 4.0,
            y(v) + 4.0,
            y(v),
            w - right,
            y(v)
        );
    }
    let _ = writeln!(
        svg,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">minutes: {}</text>",
        w - right,
        calls_bottom + 16.0,
        minutes - 1
    );
    for (i, (m, c)) in report.modes.iter().zip(&cumulative).enumerate() {
        let points: Vec<String> = c
            .iter()
            .enumerate()
            .map(|(j, v)| format!("{:.1},{:.1}", x(j), y(*v)))
            .collect();
        let colour = colours[i % colours.len()];
        let _ = writeln!(
            svg,
            "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\" points=\"{}\"/>",
            points.join(" ")
        );
        let _ = writeln!(
            svg,
            "<text x=\"{}\" y=\"{}\" fill=\"{colour}\">{} ({} calls)</text>",
            left + 10.0,
            calls_top + 16.0 + 16.0 * i as f64,
            mode_label(m.mode),
            m.cloud_calls.total()
        );
    }

    // Latency: p50, p99 and max as marks on a log axis of seconds, 1 ms to the next
    // power of ten above the slowest.
    let _ = writeln!(
        svg,
        "<text x=\"{left}\" y=\"{}\">node change to route created: a bar from p50 to max, a dot at p99; seconds, log scale</text>",
        lat_top - 20.0
    );
    let slowest = report
        .modes
        .iter()
        .map(|m| m.latency_seconds.node_to_route.max)
        .fold(0.001, f64::max);
    let (low, high) = (-3.0, slowest.log10().ceil().max(-2.0));
    let lx = |secs: f64| left + plot_w * (secs.max(0.001).log10() - low) / (high - low);
    let lat_bottom = lat_top + row * report.modes.len() as f64;
    axes(&mut svg, left, lat_top, lat_bottom, w - right);
    for d in low as i32..=high as i32 {
        let secs = 10f64.powi(d);
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            lx(secs),
            lat_bottom + 16.0,
            short(secs)
        );
    }
    for (i, m) in report.modes.iter().enumerate() {
        let colour = colours[i % colours.len()];
        let cy = lat_top + row * (i as f64 + 0.5);
        let l = &m.latency_seconds.node_to_route;
        if l.count == 0 {
            let _ = writeln!(
                svg,
                "<text x=\"{}\" y=\"{:.1}\" fill=\"{colour}\">{}: no route created</text>",
                left + 6.0,
                cy + 4.0,
                mode_label(m.mode)
            );
            continue;
        }
        let _ = writeln!(
            svg,
            "<g class=\"latency\"><line x1=\"{:.1}\" y1=\"{cy:.1}\" x2=\"{:.1}\" y2=\"{cy:.1}\" stroke=\"{colour}\" stroke-width=\"6\"/>\
             <circle cx=\"{:.1}\" cy=\"{cy:.1}\" r=\"5\" fill=\"{colour}\"/><line x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"black\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" fill=\"{colour}\">{}: {}</text></g>",
            lx(l.p50),
            lx(l.max),
            lx(l.p99),
            lx(l.p50),
            cy - 8.0,
            lx(l.p50),
            cy + 8.0,
            lx(l.max) + 8.0,
            cy + 4.0,
            mode_label(m.mode),
            triple(l)
        );
    }
    svg.push_str("</svg>\n");
    svg
}

fn axes(svg: &mut String, left: f64, top: f64, bottom: f64, right: f64) {
    let _ = writeln!(
        svg,
        "<line x1=\"{left}\" y1=\"{bottom}\" x2=\"{right}\" y2=\"{bottom}\" stroke=\"black\"/>\
         <line x1=\"{left}\" y1=\"{top}\" x2=\"{left}\" y2=\"{bottom}\" stroke=\"black\"/>"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let samples: Vec<Duration> = (1..=100).map(|i| Duration::from_millis(i * 10)).collect();
        let p = Percentiles::of(samples);
        assert_eq!((p.p50, p.p99, p.max, p.count), (0.5, 0.99, 1.0, 100));
        assert_eq!(Percentiles::of(vec![Duration::from_secs(3)]).p50, 3.0);
        assert_eq!(Percentiles::of(Vec::new()).count, 0);
    }

    fn bench_replacement() -> Replacement {
        Replacement {
            nodes: 20,
            replaced: 8,
            first: Duration::from_millis(12_500),
            spacing: Duration::from_secs(4),
            replace_after: Duration::from_secs(1),
            duration: Duration::from_millis(56_500),
            latency: Duration::from_millis(100),
            seed: 1,
        }
    }

    #[test]
    fn replacement_counts_only_the_scripted_part() {
        // Poll: passes at 20, 30, 40 and 50 s fall in [12.5 s, 56.5 s); the start-up
        // pass at 0 s (which creates the 20 routes) and the one at 10 s do not.
        let report = run_replacement(&bench_replacement(), Mode::Poll);
        assert_eq!(
            (report.startup_calls, report.startup_passes),
            (
                CloudCalls {
                    list: 2,
                    create: 20,
                    delete: 0
                },
                2
            )
        );
        let poll = report.scripted;
        assert_eq!(
            poll.cloud_calls,
            CloudCalls {
                list: 4,
                create: 8,
                delete: 8
            }
        );
        assert_eq!((poll.passes, poll.unserved), (4, 0));
        assert_eq!(poll.latency_seconds.node_to_route.count, 8);
        // Ours: one call per route mutation, nothing listed, each route well within
        // a second.
        let watch = run_replacement(&bench_replacement(), Mode::Watch).scripted;
        assert_eq!(
            watch.cloud_calls,
            CloudCalls {
                list: 0,
                create: 8,
                delete: 8
            }
        );
        assert!(watch.latency_seconds.node_to_route.max < 1.0);
        // Upstream's watch mode: the 20 start-up adds leave the token bucket 200 s in
        // debt, so every change of the script waits the full 10 s cap.
        let upstream = run_replacement(&bench_replacement(), Mode::UpstreamWatch).scripted;
        assert_eq!(
            (upstream.cloud_calls.create, upstream.cloud_calls.delete),
            (8, 8)
        );
        assert_eq!(upstream.cloud_calls.list, upstream.passes);
        assert!(upstream.latency_seconds.node_to_route.max >= 9.0);
    }

    #[test]
    fn a_rolling_upgrade_script_deletes_and_joins_each_node_once() {
        let script = Script::new(Scenario::RollingUpgrade, 10, Duration::from_secs(600), 1);
        let deletes = script
            .changes
            .iter()
            .filter(|(_, c)| matches!(c, Change::Delete(_)))
            .count();
        let adds = script
            .changes
            .iter()
            .filter(|(_, c)| matches!(c, Change::Add(_)))
            .count();
        assert_eq!((deletes, adds, script.route_mutations), (10, 10, 20));
        assert!(
            script.changes.windows(2).all(|w| w[0].0 <= w[1].0),
            "changes are in time order"
        );
    }
}
