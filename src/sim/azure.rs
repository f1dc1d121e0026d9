//! Azure, side by side in virtual time: ours (the real [`Controller`], with the batch
//! size of the Azure provider) against a **model** of cloud-provider-azure's route
//! code (`delayedRouteUpdater` behind upstream's route controller), on one route table
//! and the same node scripts.
//!
//! cloud-provider-azure's Go module is not served here, so its updater cannot run; the
//! model follows its code (`pkg/provider/azure_routes.go`, `routetable/cache.go`, see
//! the team's notes in `reference/other-clouds.md` §1):
//! - upstream's route controller lists every 10 s (`--route-reconciliation-period`,
//!   the Helm default; a pass starts 10 s after the last one started, or when it ends)
//!   and calls CreateRoute or DeleteRoute for each difference, each blocking until the
//!   updater answers; the pass ends when all have;
//! - ListRoutes and the updater read the route table through one cache with a 120 s
//!   TTL, dropped after a successful PUT and only then;
//! - the updater wakes every 30 s; with operations queued it reads the table (cached),
//!   applies them all, PUTs the whole table with the cached ETag, waits for the
//!   long-running operation, then sleeps 30 s before answering every waiting call;
//! - a PUT refused with 412 (a stale ETag) is answered as success (its error is
//!   shadowed, cloud-provider-azure #11003), and the stale cache stays until its TTL.
//!
//! Ours is not a model: the controller is the binary's. Only the cloud and the
//! provider's requests around it are: a list is one GET of the table (its ETag kept);
//! a batch is one PUT with `If-Match`, answered after its long-running operation is
//! polled to the end; a 412 reads the table again and PUTs once more. Both sides poll
//! an operation alike (every [`Latencies::poll_every`]) and count each poll.
//!
//! A second writer (cluster-api-provider-azure, an operator's script) PUTs the table
//! now and then; ARM refuses a write while another one's operation runs, so its PUT
//! waits for the table to be idle, and it bumps the ETag.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::Percentiles;
use crate::controller::{CloudOp, CloudReply, Command, Config, Controller, Input, NodeEvent};
use crate::metrics::Metrics;
use crate::model::{Cidr, Node, NodeAddress, Route};
use crate::provider::{CloudError, CloudErrorKind, RouteChange};

/// The situations compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AzureScenario {
    /// 50 nodes routed; then one node added every 5 minutes or so, ten times.
    IdleAdd,
    /// 20 nodes; then 100 join within one minute.
    ScaleOut,
    /// 50 nodes replaced one by one, one a minute (the new node joins, the old one
    /// leaves 30 s later).
    RollingUpgrade,
    /// 50 nodes; 20 join, one every 30 s, while another writer PUTs the table every
    /// 45 s.
    SecondWriter,
}

impl AzureScenario {
    pub const ALL: [AzureScenario; 4] = [
        AzureScenario::IdleAdd,
        AzureScenario::ScaleOut,
        AzureScenario::RollingUpgrade,
        AzureScenario::SecondWriter,
    ];

    pub fn name(&self) -> &'static str {
        match self {
            AzureScenario::IdleAdd => "idle-add",
            AzureScenario::ScaleOut => "scale-out",
            AzureScenario::RollingUpgrade => "rolling-upgrade",
            AzureScenario::SecondWriter => "second-writer",
        }
    }

    pub fn parse(name: &str) -> Option<AzureScenario> {
        AzureScenario::ALL.into_iter().find(|s| s.name() == name)
    }
}

/// How long ARM takes, as the ARM double is set in the end-to-end tests.
#[derive(Clone, Copy, Debug)]
pub struct Latencies {
    /// A GET of the table, or of an operation's status.
    pub read: Duration,
    /// A PUT, until ARM accepts it (201 with its operation).
    pub write: Duration,
    /// From the PUT's acceptance to its operation's success: the routes exist then.
    pub operation: Duration,
    /// How often an operation is polled.
    pub poll_every: Duration,
}

impl Default for Latencies {
    fn default() -> Latencies {
        Latencies {
            read: Duration::from_millis(100),
            write: Duration::from_millis(300),
            operation: Duration::from_secs(2),
            poll_every: Duration::from_secs(1),
        }
    }
}

/// The batch size the model gives ours: a PUT carries the whole table anyway, so a
/// batch is as large as a table may be.
const BATCH_SIZE: usize = 400;
const SIMULATED: Duration = Duration::from_secs(3600);
const CLUSTER_CIDR: &str = "10.0.0.0/8";
/// Upstream's `--route-reconciliation-period` in cloud-provider-azure's Helm chart.
const THEIR_POLL: Duration = Duration::from_secs(10);
/// `routeUpdateIntervalInSeconds`, `routeUpdateWaitingInSeconds` and the route
/// table cache's TTL, at their defaults.
const THEIR_TICK: Duration = Duration::from_secs(30);
const THEIR_WAIT: Duration = Duration::from_secs(30);
const THEIR_CACHE_TTL: Duration = Duration::from_secs(120);

/// What one side did in one scenario.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SideReport {
    pub side: &'static str,
    /// PUTs of the route table, refused ones included.
    pub writes: u64,
    /// GETs of the route table.
    pub reads: u64,
    /// GETs of a long-running operation's status.
    pub polls: u64,
    /// PUTs refused with 412.
    pub precondition_failed: u64,
    /// Creates answered as done while the table did not hold the route.
    pub reported_done_not_in_table: u64,
    /// Most PUTs of the table in flight at once.
    pub max_writes_in_flight: u64,
    /// From a node's appearance to its route existing in the table.
    pub node_to_route: Percentiles,
    /// Routes missing at the end.
    pub unserved: usize,
}

/// Both sides of one scenario.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AzureReport {
    pub scenario: &'static str,
    pub ours: SideReport,
    /// cloud-provider-azure's updater, modelled from its code.
    pub theirs_model: SideReport,
}

/// Runs `scenario` on both sides.
pub fn run(scenario: AzureScenario, latencies: Latencies) -> AzureReport {
    let script = Script::new(scenario);
    AzureReport {
        scenario: scenario.name(),
        ours: Ours::new(&script, latencies).run(),
        theirs_model: Theirs::new(&script, latencies).run(),
    }
}

/// The comparison as a table, one row per scenario and side.
pub fn table(reports: &[AzureReport]) -> String {
    let mut out = String::from(
        "Azure route table, 1 h each: ours (the real controller) beside a MODEL of \
         cloud-provider-azure's route updater\n\
         scenario         side                          PUTs  GETs  polls  412  done-not-in-table  max-PUTs-at-once  node->route p50/p99/max (s)  unserved\n",
    );
    for r in reports {
        for side in [&r.ours, &r.theirs_model] {
            let p = &side.node_to_route;
            out.push_str(&format!(
                "{:<16} {:<29} {:>4}  {:>4}  {:>5}  {:>3}  {:>17}  {:>16}  {:>27}  {:>8}\n",
                r.scenario,
                side.side,
                side.writes,
                side.reads,
                side.polls,
                side.precondition_failed,
                side.reported_done_not_in_table,
                side.max_writes_in_flight,
                format!("{:.1} / {:.1} / {:.1}", p.p50, p.p99, p.max),
                side.unserved
            ));
        }
    }
    out
}

// --- the script ---------------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
enum Change {
    Add(usize),
    Remove(usize),
    /// The other writer PUTs the table.
    OtherWrite,
}

struct Script {
    initial: Vec<usize>,
    changes: Vec<(Duration, Change)>,
}

impl Script {
    fn new(scenario: AzureScenario) -> Script {
        let secs = Duration::from_secs;
        let mut changes = Vec::new();
        let initial: Vec<usize> = match scenario {
            AzureScenario::IdleAdd => {
                for i in 0..10 {
                    let at = secs(600 + 300 * i as u64) + phase(i);
                    changes.push((at, Change::Add(50 + i)));
                }
                (0..50).collect()
            }
            AzureScenario::ScaleOut => {
                for i in 0..100 {
                    let at = Duration::from_millis(600_000 + 600 * i as u64);
                    changes.push((at, Change::Add(20 + i)));
                }
                (0..20).collect()
            }
            AzureScenario::RollingUpgrade => {
                for i in 0..50 {
                    let at = secs(300 + 60 * i as u64) + phase(i);
                    changes.push((at, Change::Add(50 + i)));
                    changes.push((at + secs(30), Change::Remove(i)));
                }
                (0..50).collect()
            }
            AzureScenario::SecondWriter => {
                for i in 0..20 {
                    changes.push((secs(300 + 30 * i as u64), Change::Add(50 + i)));
                }
                let mut at = secs(45);
                while at < SIMULATED {
                    changes.push((at, Change::OtherWrite));
                    at += secs(45);
                }
                (0..50).collect()
            }
        };
        changes.sort_by_key(|(at, _)| *at);
        Script { initial, changes }
    }
}

/// Spreads changes over the phase of the updater's 30 s tick, deterministically.
fn phase(i: usize) -> Duration {
    Duration::from_millis((i as u64 * 13_700) % 30_000)
}

fn node_name(k: usize) -> String {
    format!("aks-nodepool1-{k:05}")
}

fn pod_cidr(k: usize) -> String {
    format!("10.{}.{}.0/24", 1 + k / 256, k % 256)
}

fn node(k: usize) -> Node {
    Node {
        name: node_name(k),
        uid: format!("uid-{k}"),
        resource_version: "1".into(),
        provider_id: None,
        pod_cidrs: vec![pod_cidr(k)],
        addresses: vec![NodeAddress::internal_ip(&format!(
            "172.16.{}.{}",
            k / 250,
            4 + k % 250
        ))],
        network_unavailable: None,
    }
}

// --- the route table ----------------------------------------------------------------

/// The table as ARM holds it: routes by destination (their target node) and the ETag.
#[derive(Default)]
struct Table {
    routes: BTreeMap<String, String>,
    etag: u64,
    /// Writes whose operation runs, until when.
    busy_until: Option<Duration>,
    writes_in_flight: u64,
}

/// What both sides count, and the nodes' clocks.
#[derive(Default)]
struct Tally {
    report: SideReport,
    /// Nodes waiting for their route: since when.
    waiting: BTreeMap<String, Duration>,
    samples: Vec<Duration>,
}

impl Tally {
    fn wants(&mut self, k: usize, at: Duration) {
        self.waiting.insert(pod_cidr(k), at);
    }

    fn gone(&mut self, k: usize) {
        self.waiting.remove(&pod_cidr(k));
    }

    /// The table holds `destination` from `at`.
    fn landed(&mut self, destination: &str, at: Duration) {
        if let Some(since) = self.waiting.remove(destination) {
            self.samples.push(at.saturating_sub(since));
        }
    }

    fn finish(mut self, side: &'static str) -> SideReport {
        self.report.side = side;
        self.report.node_to_route = Percentiles::of(std::mem::take(&mut self.samples));
        self.report.unserved = self.waiting.len();
        self.report
    }
}

/// Polls of an operation that takes `operation`, polled every `every`.
fn polls(l: &Latencies) -> u64 {
    let every = l.poll_every.as_nanos().max(1);
    l.operation.as_nanos().div_ceil(every) as u64
}

/// When a polled operation is seen done: its success, rounded up to a poll.
fn seen_done(accepted: Duration, l: &Latencies) -> Duration {
    accepted + l.poll_every * polls(l) as u32 + l.read
}

/// An event queue in virtual time.
struct Queue<E> {
    heap: BinaryHeap<Reverse<(Duration, u64)>>,
    items: BTreeMap<u64, E>,
    seq: u64,
}

impl<E> Queue<E> {
    fn new() -> Queue<E> {
        Queue {
            heap: BinaryHeap::new(),
            items: BTreeMap::new(),
            seq: 0,
        }
    }

    fn push(&mut self, at: Duration, e: E) {
        self.seq += 1;
        self.items.insert(self.seq, e);
        self.heap.push(Reverse((at, self.seq)));
    }

    fn peek(&self) -> Option<Duration> {
        self.heap.peek().map(|Reverse((at, _))| *at)
    }

    fn pop(&mut self) -> Option<(Duration, E)> {
        let Reverse((at, seq)) = self.heap.pop()?;
        Some((at, self.items.remove(&seq)?))
    }
}

// --- ours -----------------------------------------------------------------------------

enum OurEvent {
    Change(Change),
    Reply(u64, CloudReply),
    /// Our PUT reaches ARM.
    Put {
        id: u64,
        changes: Vec<RouteChange>,
        retried: bool,
    },
    /// Our PUT's operation ends: the changes land.
    Land {
        id: u64,
        changes: Vec<RouteChange>,
    },
    /// The other writer's PUT reaches ARM.
    OtherPut,
}

struct Ours<'a> {
    script: &'a Script,
    l: Latencies,
    t0: Instant,
    now: Duration,
    controller: Controller,
    queue: Queue<OurEvent>,
    table: Table,
    /// The ETag of the table as the provider last read or wrote it.
    etag: u64,
    tally: Tally,
    nodes: BTreeSet<usize>,
}

impl<'a> Ours<'a> {
    fn new(script: &'a Script, l: Latencies) -> Ours<'a> {
        let mut config = Config::new(vec![Cidr::parse(CLUSTER_CIDR).expect("cluster CIDR")]);
        config.seed = Some(1);
        config.batch_size = Some(BATCH_SIZE);
        Ours {
            script,
            l,
            t0: Instant::now(),
            now: Duration::ZERO,
            controller: Controller::new(config, Arc::new(Metrics::new())),
            queue: Queue::new(),
            table: Table::default(),
            etag: 0,
            tally: Tally::default(),
            nodes: BTreeSet::new(),
        }
    }

    fn run(mut self) -> SideReport {
        let mut commands = self.feed(Input::Node(NodeEvent::Init));
        for &k in &self.script.initial {
            self.nodes.insert(k);
            self.tally.wants(k, Duration::ZERO);
            commands.extend(self.feed(Input::Node(NodeEvent::InitApply(node(k)))));
        }
        commands.extend(self.feed(Input::Node(NodeEvent::InitDone)));
        self.process(commands);
        for &(at, change) in &self.script.changes {
            self.queue.push(at, OurEvent::Change(change));
        }
        loop {
            let deadline = self
                .controller
                .next_deadline()
                .map(|d| d.saturating_duration_since(self.t0));
            let (at, tick) = match (self.queue.peek(), deadline) {
                (Some(e), Some(d)) if d < e => (d, true),
                (Some(e), _) => (e, false),
                (None, Some(d)) => (d, true),
                (None, None) => break,
            };
            if at > SIMULATED {
                break;
            }
            self.now = self.now.max(at);
            let commands = if tick {
                self.feed(Input::Tick)
            } else {
                match self.queue.pop() {
                    Some((_, event)) => self.on_event(event),
                    None => break,
                }
            };
            self.process(commands);
        }
        self.tally.finish("ours")
    }

    fn feed(&mut self, input: Input) -> Vec<Command> {
        self.controller.handle(input, self.t0 + self.now)
    }

    fn process(&mut self, commands: Vec<Command>) {
        let mut more = Vec::new();
        for command in commands {
            match command {
                Command::Cloud { id, op, .. } => self.send(id, op),
                Command::WriteCondition { node, .. } => {
                    more.extend(self.feed(Input::ConditionWritten {
                        node,
                        result: Ok(()),
                    }));
                }
                _ => {}
            }
        }
        if !more.is_empty() {
            self.process(more);
        }
    }

    fn send(&mut self, id: u64, op: CloudOp) {
        match op {
            CloudOp::List { .. } => {
                // One GET; what it returns is the table as it is when it is served.
                self.tally.report.reads += 1;
                self.etag = self.table.etag;
                let routes: Vec<Route> = self
                    .table
                    .routes
                    .iter()
                    .map(|(destination, target)| Route {
                        name: target.clone(),
                        target_node: target.clone(),
                        destination_cidr: destination.clone(),
                        ..Route::default()
                    })
                    .collect();
                let reply = CloudReply::Listed(Ok(routes.into()));
                self.queue
                    .push(self.now + self.l.read, OurEvent::Reply(id, reply));
            }
            CloudOp::Apply { changes } => {
                let at = self.now + self.l.write;
                self.queue.push(
                    at,
                    OurEvent::Put {
                        id,
                        changes,
                        retried: false,
                    },
                );
            }
            other => panic!("the Azure provider batches; the controller sent {other:?}"),
        }
    }

    fn on_event(&mut self, event: OurEvent) -> Vec<Command> {
        match event {
            OurEvent::Change(change) => self.on_change(change),
            OurEvent::Reply(id, reply) => self.feed(Input::Cloud { id, reply }),
            OurEvent::Put {
                id,
                changes,
                retried,
            } => {
                self.on_put(id, changes, retried);
                Vec::new()
            }
            OurEvent::Land { id, changes } => self.on_land(id, changes),
            OurEvent::OtherPut => {
                self.other_put();
                Vec::new()
            }
        }
    }

    fn on_change(&mut self, change: Change) -> Vec<Command> {
        match change {
            Change::Add(k) => {
                self.nodes.insert(k);
                self.tally.wants(k, self.now);
                self.feed(Input::Node(NodeEvent::Added(node(k))))
            }
            Change::Remove(k) => {
                self.nodes.remove(&k);
                self.tally.gone(k);
                self.feed(Input::Node(NodeEvent::Deleted(node(k))))
            }
            Change::OtherWrite => {
                self.other_put();
                Vec::new()
            }
        }
    }

    /// The other writer's PUT: it waits while a write's operation runs.
    fn other_put(&mut self) {
        match self.table.busy_until {
            Some(until) if until > self.now => self.queue.push(until, OurEvent::OtherPut),
            _ => self.table.etag += 1,
        }
    }

    fn on_put(&mut self, id: u64, changes: Vec<RouteChange>, retried: bool) {
        self.tally.report.writes += 1;
        if self.etag != self.table.etag {
            // 412: read the table again and PUT once more.
            self.tally.report.precondition_failed += 1;
            self.tally.report.reads += 1;
            self.etag = self.table.etag;
            if retried {
                let e = CloudError::new(CloudErrorKind::Conflict, "412 twice");
                let reply = CloudReply::Applied(vec![Err(e); changes.len()]);
                self.queue.push(self.now, OurEvent::Reply(id, reply));
                return;
            }
            let at = self.now + self.l.read + self.l.write;
            self.queue.push(
                at,
                OurEvent::Put {
                    id,
                    changes,
                    retried: true,
                },
            );
            return;
        }
        self.table.etag += 1;
        self.etag = self.table.etag;
        self.table.writes_in_flight += 1;
        self.tally.report.max_writes_in_flight = self
            .tally
            .report
            .max_writes_in_flight
            .max(self.table.writes_in_flight);
        self.table.busy_until = Some(self.now + self.l.operation);
        self.tally.report.polls += polls(&self.l);
        self.queue
            .push(self.now + self.l.operation, OurEvent::Land { id, changes });
    }

    fn on_land(&mut self, id: u64, changes: Vec<RouteChange>) -> Vec<Command> {
        self.table.writes_in_flight -= 1;
        let mut outcomes = Vec::new();
        for change in &changes {
            let route = change.route();
            match change {
                RouteChange::Create { .. } => {
                    self.table
                        .routes
                        .insert(route.destination_cidr.clone(), route.target_node.clone());
                    self.tally.landed(&route.destination_cidr, self.now);
                    outcomes.push(Ok(()));
                }
                RouteChange::Delete { .. } => {
                    outcomes.push(match self.table.routes.remove(&route.destination_cidr) {
                        Some(_) => Ok(()),
                        None => Err(CloudError::new(CloudErrorKind::NotFound, "gone")),
                    });
                }
            }
        }
        let seen = seen_done(self.now - self.l.operation, &self.l);
        self.queue
            .push(seen, OurEvent::Reply(id, CloudReply::Applied(outcomes)));
        Vec::new()
    }
}

// --- theirs (a model) -----------------------------------------------------------------

enum TheirEvent {
    Change(Change),
    /// Upstream's route controller starts a pass.
    Pass,
    /// The updater's ticker fires.
    Tick,
    /// The updater's PUT reaches ARM, with the operations it carries.
    Put,
    /// The PUT's operation ends.
    Land,
    /// The updater's 30 s sleep ends: every waiting call is answered.
    Answer,
    OtherPut,
}

#[derive(Clone, Debug)]
enum Op {
    Create(String, String),
    Delete(String),
}

struct Theirs<'a> {
    script: &'a Script,
    l: Latencies,
    now: Duration,
    queue: Queue<TheirEvent>,
    table: Table,
    /// The route table cache: the routes, their ETag and when they were read;
    /// `None`: dropped.
    cache: Option<(BTreeMap<String, String>, u64, Duration)>,
    nodes: BTreeSet<usize>,
    /// Operations queued for the updater's next run.
    queued: Vec<Op>,
    /// What the run in progress carries (its PUT, then its answer).
    running: Vec<Op>,
    /// The updater is inside `updateRoutes` (GET, PUT, operation, sleep).
    updating: bool,
    /// A tick fired while it was (Go's ticker keeps one).
    tick_missed: bool,
    /// Upstream's pass waits for this many calls.
    pass_waiting: usize,
    pass_started: Duration,
    pass_running: bool,
    /// The PUT of the run in progress was refused (412) and its error shadowed.
    put_refused: bool,
    tally: Tally,
}

impl<'a> Theirs<'a> {
    fn new(script: &'a Script, l: Latencies) -> Theirs<'a> {
        Theirs {
            script,
            l,
            now: Duration::ZERO,
            queue: Queue::new(),
            table: Table::default(),
            cache: None,
            nodes: BTreeSet::new(),
            queued: Vec::new(),
            running: Vec::new(),
            updating: false,
            tick_missed: false,
            pass_waiting: 0,
            pass_started: Duration::ZERO,
            pass_running: false,
            put_refused: false,
            tally: Tally::default(),
        }
    }

    fn run(mut self) -> SideReport {
        for &k in &self.script.initial {
            self.nodes.insert(k);
            self.tally.wants(k, Duration::ZERO);
        }
        for &(at, change) in &self.script.changes {
            self.queue.push(at, TheirEvent::Change(change));
        }
        self.queue.push(Duration::ZERO, TheirEvent::Pass);
        self.queue.push(THEIR_TICK, TheirEvent::Tick);
        while let Some((at, event)) = self.queue.pop() {
            if at > SIMULATED {
                break;
            }
            self.now = at;
            self.on_event(event);
        }
        self.tally.finish("cloud-provider-azure (model)")
    }

    fn on_event(&mut self, event: TheirEvent) {
        match event {
            TheirEvent::Change(Change::Add(k)) => {
                self.nodes.insert(k);
                self.tally.wants(k, self.now);
            }
            TheirEvent::Change(Change::Remove(k)) => {
                self.nodes.remove(&k);
                self.tally.gone(k);
            }
            TheirEvent::Change(Change::OtherWrite) | TheirEvent::OtherPut => self.other_put(),
            TheirEvent::Pass => self.pass(),
            TheirEvent::Tick => {
                self.queue.push(self.now + THEIR_TICK, TheirEvent::Tick);
                if self.updating {
                    self.tick_missed = true;
                } else {
                    self.update();
                }
            }
            TheirEvent::Put => self.put(),
            TheirEvent::Land => self.land(),
            TheirEvent::Answer => self.answer(),
        }
    }

    fn other_put(&mut self) {
        match self.table.busy_until {
            Some(until) if until > self.now => self.queue.push(until, TheirEvent::OtherPut),
            _ => self.table.etag += 1,
        }
    }

    /// The cached table, read again when dropped or older than the TTL.
    fn cached(&mut self) -> BTreeMap<String, String> {
        let fresh = self
            .cache
            .as_ref()
            .is_some_and(|(_, _, at)| self.now.saturating_sub(*at) < THEIR_CACHE_TTL);
        if !fresh {
            self.tally.report.reads += 1;
            self.cache = Some((self.table.routes.clone(), self.table.etag, self.now));
        }
        self.cache
            .as_ref()
            .map(|(routes, _, _)| routes.clone())
            .unwrap_or_default()
    }

    /// One pass of upstream's route controller over the cached ListRoutes.
    fn pass(&mut self) {
        self.pass_started = self.now;
        let listed = self.cached();
        let wanted: BTreeMap<String, String> = self
            .nodes
            .iter()
            .map(|&k| (pod_cidr(k), node_name(k)))
            .collect();
        let mut calls = 0;
        for (destination, target) in &wanted {
            if listed.get(destination) != Some(target) {
                self.queued
                    .push(Op::Create(destination.clone(), target.clone()));
                calls += 1;
            }
        }
        for destination in listed.keys() {
            if !wanted.contains_key(destination) {
                self.queued.push(Op::Delete(destination.clone()));
                calls += 1;
            }
        }
        self.pass_waiting = calls;
        self.pass_running = calls > 0;
        if !self.pass_running {
            self.next_pass();
        }
    }

    fn next_pass(&mut self) {
        let at = (self.pass_started + THEIR_POLL).max(self.now);
        self.queue.push(at, TheirEvent::Pass);
    }

    /// The updater's run: nothing to do, or read, apply, PUT.
    fn update(&mut self) {
        if self.queued.is_empty() {
            return;
        }
        self.updating = true;
        self.running = std::mem::take(&mut self.queued);
        let mut routes = self.cached();
        for op in &self.running {
            match op {
                Op::Create(d, t) => {
                    routes.insert(d.clone(), t.clone());
                }
                Op::Delete(d) => {
                    routes.remove(d);
                }
            }
        }
        if let Some(cache) = &mut self.cache {
            cache.0 = routes;
        }
        self.queue.push(self.now + self.l.write, TheirEvent::Put);
    }

    fn put(&mut self) {
        self.tally.report.writes += 1;
        let etag = self.cache.as_ref().map_or(0, |(_, etag, _)| *etag);
        if etag != self.table.etag {
            // 412, answered as success; the stale cache stays.
            self.tally.report.precondition_failed += 1;
            self.put_refused = true;
            self.queue.push(self.now + THEIR_WAIT, TheirEvent::Answer);
            return;
        }
        self.put_refused = false;
        self.table.etag += 1;
        self.table.writes_in_flight += 1;
        self.tally.report.max_writes_in_flight = self
            .tally
            .report
            .max_writes_in_flight
            .max(self.table.writes_in_flight);
        self.table.busy_until = Some(self.now + self.l.operation);
        self.tally.report.polls += polls(&self.l);
        self.queue
            .push(self.now + self.l.operation, TheirEvent::Land);
    }

    fn land(&mut self) {
        self.table.writes_in_flight -= 1;
        if let Some((routes, _, _)) = self.cache.take() {
            for (destination, target) in &routes {
                if self.table.routes.get(destination) != Some(target) {
                    self.tally.landed(destination, self.now);
                }
            }
            self.table.routes = routes;
        }
        let seen = seen_done(self.now - self.l.operation, &self.l);
        self.queue.push(seen + THEIR_WAIT, TheirEvent::Answer);
    }

    /// Every call of the run is answered success, whatever happened.
    fn answer(&mut self) {
        for op in std::mem::take(&mut self.running) {
            if let Op::Create(d, _) = &op
                && self.put_refused
                && !self.table.routes.contains_key(d)
            {
                self.tally.report.reported_done_not_in_table += 1;
            }
            self.pass_waiting = self.pass_waiting.saturating_sub(1);
        }
        self.updating = false;
        if self.pass_running && self.pass_waiting == 0 {
            self.pass_running = false;
            self.next_pass();
        }
        if std::mem::take(&mut self.tick_missed) {
            self.update();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn side(scenario: AzureScenario) -> AzureReport {
        run(scenario, Latencies::default())
    }

    /// Guards the idle latency: a node added to an idle cluster is routed by one write
    /// and its operation (2.3 s at the default latencies), where the updater waits for
    /// its tick.
    #[test]
    fn an_idle_clusters_new_node_is_routed_in_one_write() {
        let r = side(AzureScenario::IdleAdd);
        assert_eq!(r.ours.unserved, 0);
        // The first pass, then one write per node added.
        assert_eq!(r.ours.writes, 11, "{r:?}");
        assert!(r.ours.node_to_route.p99 <= 2.5, "{r:?}");
        assert!(r.theirs_model.node_to_route.p50 > 10.0, "{r:?}");
    }

    /// Guards "one write at a time, no 412 when alone", and the cost of no window: a
    /// write goes as soon as the last one is done, so a minute of joins takes about
    /// one write per operation's time (not the updater's one per minute), each node
    /// routed within two writes.
    #[test]
    fn a_scale_out_writes_one_table_at_a_time() {
        let r = side(AzureScenario::ScaleOut);
        let l = Latencies::default();
        assert_eq!(r.ours.unserved, 0);
        assert_eq!(r.ours.max_writes_in_flight, 1);
        assert_eq!(r.ours.precondition_failed, 0);
        let write = (l.write + l.poll_every * polls(&l) as u32 + l.read).as_secs_f64();
        // The first pass's write, then the minute of joins.
        let most = 1 + (60.0 / write).ceil() as u64 + 1;
        assert!(r.ours.writes <= most, "{r:?} (at most {most})");
        assert!(r.ours.node_to_route.p99 <= 2.0 * write, "{r:?}");
        assert!(r.theirs_model.node_to_route.p50 > 30.0, "{r:?}");
    }

    /// Guards the second writer: ours converges and reports nothing done that the
    /// table lacks; the model of theirs reports creates done after a 412.
    #[test]
    fn a_second_writer_costs_a_reread_never_a_lost_route() {
        let r = side(AzureScenario::SecondWriter);
        assert_eq!(r.ours.unserved, 0, "{r:?}");
        assert_eq!(r.ours.reported_done_not_in_table, 0);
        assert!(r.ours.precondition_failed > 0, "{r:?}");
        assert!(r.theirs_model.reported_done_not_in_table > 0, "{r:?}");
    }

    /// Guards the rolling upgrade bound: p99 within two operations.
    #[test]
    fn a_rolling_upgrade_routes_each_node_within_two_operations() {
        let r = side(AzureScenario::RollingUpgrade);
        assert_eq!(r.ours.unserved, 0);
        let two = 2.0 * (Latencies::default().operation + Latencies::default().write).as_secs_f64();
        assert!(r.ours.node_to_route.p99 <= two, "{r:?}");
    }
}
