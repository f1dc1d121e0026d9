//! The reconcile controller: a sans-IO state machine.
//!
//! [`Controller::handle`] takes one [`Input`] (a node event, a cloud reply, a status
//! reply, a leadership change, or just the passing of time) and the current instant,
//! and returns the [`Command`]s to carry out: cloud operations, condition writes,
//! events and pass reports. [`Controller::next_deadline`] says when it next wants to
//! be called even if nothing arrives. It never reads a clock, opens a socket or starts
//! a thread, so tests drive it step by step in virtual time.
//!
//! How a pass works:
//! 1. Triggers (node changes, timers, retries) collect in a [`Scheduler`] that decides
//!    when the next pass may start. One pass runs at a time; triggers that arrive
//!    during a pass fold into one follow-up.
//! 2. The pass lists the cloud routes unless its view of them is fresh and no
//!    ambiguous reply has been seen since the last list.
//! 3. The planner turns nodes and routes into deletes and creates. Operations queue per
//!    destination CIDR, a delete before the create that replaces it, and at most one
//!    operation per destination and `max_in_flight` in total are dispatched.
//! 4. As each node's creates resolve, its `NetworkUnavailable` condition is written
//!    from what the cloud now holds. When every operation has resolved the pass ends
//!    with a [`PassReport`].
//!
//! Safety rules kept here: no delete is dispatched while the node view is incomplete
//! (after start or during a relist), no route outside the cluster CIDRs is deleted
//! (the planner), and nothing is written unless this replica leads.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};

use crate::cloud::{CloudError, CloudErrorKind, NodeDirectory, RouteTarget};
use crate::metrics::{Metrics, TriggerKind};
use crate::model::{Cidr, Condition, Node, Route, same_addresses};
use crate::plan::{self, DeleteReason, Plan};

/// How passes are triggered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// A full pass with a fresh list every `route_reconciliation_period` (the feature
    /// gate off; upstream's only mode before 1.35).
    Poll,
    /// Passes on node add, delete, pod-CIDR or address change, plus a full resync every
    /// 12–24 h; debounced, with per-route retries and a trusted view of the routes.
    Watch,
    /// Upstream 1.35/1.36's watch mode, reproduced for comparison: one pass at most per
    /// 10 s through a token bucket, a list on every pass, no per-route retry, no pass
    /// when the cluster has no nodes.
    UpstreamWatch,
}

impl Mode {
    pub fn as_str(&self) -> &'static str {
        match self {
            Mode::Poll => "poll",
            Mode::Watch => "watch",
            Mode::UpstreamWatch => "upstream-watch",
        }
    }
}

/// The controller's settings. Every field has a default (see [`Config::new`]).
#[derive(Clone, Debug)]
pub struct Config {
    /// Passed to every cloud call (`--cluster-name`, default `kubernetes`).
    pub cluster_name: String,
    /// The ranges whose routes this controller owns (`--cluster-cidr`); routes outside
    /// them are never deleted.
    pub cluster_cidrs: Vec<Cidr>,
    pub mode: Mode,
    /// Poll period (`--route-reconciliation-period`, default 10 s).
    pub route_reconciliation_period: Duration,
    /// Watch mode's full resync is drawn once from [min, 2 × min) (`--min-resync-period`,
    /// default 12 h).
    pub min_resync_period: Duration,
    /// Watch mode: after a pass, further triggers wait until none has arrived for this
    /// long (default 50 ms). The first trigger after a quiet period starts at once.
    pub debounce: Duration,
    /// Watch mode: no trigger waits longer than this for its pass because of the
    /// debounce (default 1 s).
    pub max_wait: Duration,
    /// Watch mode: a pass lists the cloud routes again when its view is older than this
    /// (default 5 min), or whenever an ambiguous reply was seen.
    pub route_view_max_age: Duration,
    /// Cloud operations in flight at once (`--concurrent-route-operations`, default 16).
    pub max_in_flight: usize,
    /// First delay before a failed route operation is retried (default 1 s); it doubles
    /// up to `retry_max` (default 5 min), with jitter.
    pub retry_initial: Duration,
    pub retry_max: Duration,
    /// When false the controller writes from the start; when true it waits for
    /// [`Input::Leadership`].
    pub leader_election: bool,
    /// Seed for the resync draw and the jitter; `None` seeds from the OS.
    pub seed: Option<u64>,
}

impl Config {
    /// Defaults as the cloud-controller-manager has them, in watch mode.
    pub fn new(cluster_cidrs: Vec<Cidr>) -> Config {
        Config {
            cluster_name: "kubernetes".to_string(),
            cluster_cidrs,
            mode: Mode::Watch,
            route_reconciliation_period: Duration::from_secs(10),
            min_resync_period: Duration::from_secs(12 * 3600),
            debounce: Duration::from_millis(50),
            max_wait: Duration::from_secs(1),
            route_view_max_age: Duration::from_secs(300),
            max_in_flight: 16,
            retry_initial: Duration::from_secs(1),
            retry_max: Duration::from_secs(300),
            leader_election: false,
            seed: None,
        }
    }
}

/// An event from the node watch, with the relist markers of kube-rs's watcher.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeEvent {
    /// A (re)list begins; the nodes that follow replace the whole view at `InitDone`.
    Init,
    /// One node of the list.
    InitApply(Node),
    /// The list is complete; the view is whole again.
    InitDone,
    Added(Node),
    Modified(Node),
    Deleted(Node),
}

/// Identifies a cloud operation between its command and its reply.
pub type OpId = u64;

/// What the controller is told.
#[derive(Clone, Debug)]
pub enum Input {
    Node(NodeEvent),
    /// The reply to [`Command::Cloud`] with the same id.
    Cloud {
        id: OpId,
        reply: CloudReply,
    },
    /// The reply to [`Command::WriteCondition`] for `node`.
    ConditionWritten {
        node: String,
        result: Result<(), WriteError>,
    },
    /// This replica gained (true) or lost (false) the lease.
    Leadership(bool),
    /// Nothing happened; time passed (a deadline was reached).
    Tick,
    /// Stop starting passes and dispatching operations; let in-flight ones finish.
    Shutdown,
}

/// A cloud worker's answer.
#[derive(Clone, Debug)]
pub enum CloudReply {
    Listed(Result<Vec<Route>, CloudError>),
    Done(Result<(), CloudError>),
}

/// Why a condition write failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WriteError {
    /// The node no longer exists; nothing to do.
    NodeGone,
    /// Anything else; the write is retried later.
    Failed(String),
}

/// What the controller asks its drivers to do.
#[derive(Clone, Debug)]
pub enum Command {
    /// Run a cloud operation and answer with [`Input::Cloud`].
    Cloud {
        id: OpId,
        op: CloudOp,
        cause: Arc<Cause>,
    },
    /// Patch the node's `NetworkUnavailable` condition; answer with
    /// [`Input::ConditionWritten`].
    WriteCondition {
        node: String,
        uid: String,
        condition: Condition,
        cause: Arc<Cause>,
    },
    /// Record a Kubernetes event on a node (fire and forget).
    RecordEvent {
        event: NodeEventRecord,
        cause: Arc<Cause>,
    },
    /// A pass ended; log it.
    PassFinished(PassReport),
}

/// A cloud operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CloudOp {
    List {
        nodes: Arc<NodeDirectory>,
    },
    Create {
        route: Route,
        name_hint: String,
        target: RouteTarget,
    },
    Delete {
        route: Route,
        reason: DeleteReason,
    },
}

impl CloudOp {
    pub fn operation(&self) -> crate::metrics::CloudOperation {
        match self {
            CloudOp::List { .. } => crate::metrics::CloudOperation::List,
            CloudOp::Create { .. } => crate::metrics::CloudOperation::Create,
            CloudOp::Delete { .. } => crate::metrics::CloudOperation::Delete,
        }
    }
}

/// A Kubernetes event about a node, as upstream records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeEventRecord {
    pub node: String,
    pub uid: String,
    /// `Warning` or `Normal`.
    pub kind: &'static str,
    pub reason: &'static str,
    pub message: String,
}

/// One thing that asked for a pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Trigger {
    Startup,
    Relist,
    Leadership,
    Resync,
    Poll,
    NodeAdded(String),
    NodeDeleted(String),
    PodCidrsChanged(String),
    AddressesChanged(String),
    /// Upstream's watch mode only: an update with an unchanged resourceVersion (an
    /// informer resync or relist).
    NodeResynced(String),
    /// A route operation that failed is due for another attempt.
    RouteRetry(Cidr),
    /// The list of cloud routes failed and is due for another attempt.
    ListRetry,
}

impl Trigger {
    pub fn kind(&self) -> TriggerKind {
        match self {
            Trigger::Startup | Trigger::Leadership => TriggerKind::Startup,
            Trigger::Relist => TriggerKind::Relist,
            Trigger::Resync => TriggerKind::Resync,
            Trigger::Poll => TriggerKind::Poll,
            Trigger::NodeAdded(_) => TriggerKind::NodeAdd,
            Trigger::NodeDeleted(_) => TriggerKind::NodeDelete,
            Trigger::PodCidrsChanged(_)
            | Trigger::AddressesChanged(_)
            | Trigger::NodeResynced(_) => TriggerKind::NodeUpdate,
            Trigger::RouteRetry(_) | Trigger::ListRetry => TriggerKind::Retry,
        }
    }

    /// Passes for these triggers always list the cloud routes.
    fn forces_list(&self) -> bool {
        matches!(
            self,
            Trigger::Startup | Trigger::Leadership | Trigger::Resync | Trigger::Poll
        )
    }

    /// Timers start their pass as soon as they fire; node changes are debounced.
    fn is_timer(&self) -> bool {
        !matches!(
            self,
            Trigger::NodeAdded(_)
                | Trigger::NodeDeleted(_)
                | Trigger::PodCidrsChanged(_)
                | Trigger::AddressesChanged(_)
                | Trigger::NodeResynced(_)
        )
    }
}

impl fmt::Display for Trigger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Trigger::Startup => f.write_str("startup"),
            Trigger::Relist => f.write_str("node relist"),
            Trigger::Leadership => f.write_str("became leader"),
            Trigger::Resync => f.write_str("periodic resync"),
            Trigger::Poll => f.write_str("poll period"),
            Trigger::NodeAdded(n) => write!(f, "node {n} added"),
            Trigger::NodeDeleted(n) => write!(f, "node {n} deleted"),
            Trigger::PodCidrsChanged(n) => write!(f, "node {n} pod CIDRs changed"),
            Trigger::AddressesChanged(n) => write!(f, "node {n} addresses changed"),
            Trigger::NodeResynced(n) => write!(f, "node {n} resynced"),
            Trigger::RouteRetry(c) => write!(f, "retry of route {c}"),
            Trigger::ListRetry => f.write_str("retry of the route list"),
        }
    }
}

/// Why a pass runs: the triggers folded into it. Every command of the pass carries it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cause {
    /// The pass number, counting from 1.
    pub pass: u64,
    /// How many triggers of each kind.
    pub counts: BTreeMap<TriggerKind, u32>,
    /// The first few triggers, for logs.
    pub samples: Vec<Trigger>,
}

const CAUSE_SAMPLES: usize = 8;

impl Cause {
    fn add(&mut self, trigger: Trigger) {
        *self.counts.entry(trigger.kind()).or_default() += 1;
        if self.samples.len() < CAUSE_SAMPLES && !self.samples.contains(&trigger) {
            self.samples.push(trigger);
        }
    }

    /// The kind that labels the pass in metrics: the first trigger's.
    pub fn primary(&self) -> TriggerKind {
        self.samples
            .first()
            .map(Trigger::kind)
            .unwrap_or(TriggerKind::Resync)
    }

    pub fn total(&self) -> u32 {
        self.counts.values().sum()
    }

    /// Whether any of these triggers names `node`.
    pub fn mentions(&self, node: &str) -> bool {
        self.samples.iter().any(|t| t.to_string().contains(node))
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, t) in self.samples.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{t}")?;
        }
        let more = self.total() as usize - self.samples.len();
        if more > 0 {
            write!(f, " and {more} more")?;
        }
        Ok(())
    }
}

/// The summary of a pass, logged as one line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PassReport {
    pub cause: Arc<Cause>,
    pub mode: Mode,
    /// Whether this pass listed the cloud routes.
    pub listed: bool,
    /// Set when the pass could not plan (its list failed).
    pub list_error: Option<String>,
    pub created: usize,
    pub deleted: usize,
    pub kept: usize,
    pub failed: usize,
    /// Operations not attempted: waiting for a retry backoff, or cancelled (relist,
    /// lost leadership, shutdown).
    pub deferred: usize,
    pub conditions: usize,
    /// Cloud calls made by this pass, the list included.
    pub cloud_calls: usize,
    pub duration: Duration,
    pub problems: Vec<String>,
}

impl fmt::Display for PassReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "pass {} ({}) caused by {}: ",
            self.cause.pass,
            self.mode.as_str(),
            self.cause
        )?;
        if let Some(e) = &self.list_error {
            return write!(
                f,
                "listing routes failed: {e}; {} cloud calls",
                self.cloud_calls
            );
        }
        write!(
            f,
            "routes created {}, deleted {}, kept {}, failed {}, deferred {}; conditions written {}; \
             {} cloud calls{}; took {}",
            self.created,
            self.deleted,
            self.kept,
            self.failed,
            self.deferred,
            self.conditions,
            self.cloud_calls,
            if self.listed { " (listed)" } else { "" },
            crate::duration::format(self.duration)
        )?;
        for p in &self.problems {
            write!(f, "; {p}")?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------

/// The sans-IO reconcile state machine. See the module documentation.
pub struct Controller {
    config: Config,
    metrics: Arc<Metrics>,
    rng: SmallRng,

    /// The node view, by name; complete when `synced`.
    nodes: BTreeMap<String, Node>,
    /// Nodes of a relist in progress, swapped in at `InitDone`.
    relist: Option<BTreeMap<String, Node>>,
    synced: bool,
    ever_synced: bool,
    directory: Option<Arc<NodeDirectory>>,
    /// When each (node, pod CIDR) was first seen, for the node-to-route metric.
    cidr_seen: HashMap<(String, Cidr), Instant>,

    /// What the cloud holds, as of the last list plus our own successful operations.
    view: Option<RouteView>,

    leading: bool,
    shutting_down: bool,

    scheduler: Scheduler,
    pass: Option<Pass>,
    passes: u64,
    next_timer: Option<Instant>,
    resync_period: Duration,

    next_op: OpId,
    queue: VecDeque<QueuedOp>,
    in_flight: HashMap<OpId, InFlight>,
    busy: HashSet<Cidr>,
    /// The provider said to send nothing before this instant.
    paused_until: Option<Instant>,
    retries: BTreeMap<Cidr, Retry>,
    list_failures: u32,
    list_retry_at: Option<Instant>,

    conditions_in_flight: HashMap<String, Condition>,
    condition_retries: BTreeMap<String, (Instant, u32)>,
}

struct RouteView {
    routes: Vec<Route>,
    /// Destinations of usable (non-blackhole) routes by target node.
    by_node: HashMap<String, Vec<Cidr>>,
    listed_at: Instant,
    /// An ambiguous reply or a surprise (already exists) was seen since the list.
    stale: bool,
    /// The provider's listed routes carry node addresses (`enable_node_addresses`).
    /// Routes the controller creates enter the view the way the provider will list
    /// them, so that an address change replaces them before the next list too.
    reports_addresses: bool,
}

impl RouteView {
    fn new(routes: Vec<Route>, listed_at: Instant) -> RouteView {
        let reports_addresses = routes.iter().any(|r| r.enable_node_addresses);
        let mut view = RouteView {
            routes: Vec::new(),
            by_node: HashMap::new(),
            listed_at,
            stale: false,
            reports_addresses,
        };
        for r in routes {
            view.insert(r);
        }
        view
    }

    fn insert(&mut self, route: Route) {
        if !route.blackhole
            && !route.target_node.is_empty()
            && let Ok(cidr) = Cidr::parse(&route.destination_cidr)
        {
            self.by_node
                .entry(route.target_node.clone())
                .or_default()
                .push(cidr);
        }
        self.routes.push(route);
    }

    fn remove(&mut self, route: &Route, cidr: Cidr) {
        let same = |r: &Route| {
            r.target_node == route.target_node
                && Cidr::parse(&r.destination_cidr).ok() == Some(cidr)
        };
        if let Some(i) = self.routes.iter().position(same) {
            self.routes.remove(i);
        }
        if let Some(list) = self.by_node.get_mut(&route.target_node) {
            if let Some(i) = list.iter().position(|c| *c == cidr) {
                list.swap_remove(i);
            }
            if list.is_empty() {
                self.by_node.remove(&route.target_node);
            }
        }
    }

    fn routes_to(&self, node: &str) -> &[Cidr] {
        self.by_node.get(node).map(Vec::as_slice).unwrap_or(&[])
    }
}

struct Pass {
    cause: Arc<Cause>,
    started: Instant,
    listing: Option<OpId>,
    listed: bool,
    /// Operations of this pass queued or in flight.
    outstanding: usize,
    /// Creates still unresolved per node; the node's condition waits for them.
    node_creates: HashMap<String, usize>,
    report: PassReport,
}

#[derive(Clone, Debug)]
enum OpKind {
    Create(plan::Create),
    Delete(plan::Delete),
}

impl OpKind {
    fn cidr(&self) -> Cidr {
        match self {
            OpKind::Create(c) => c.cidr,
            OpKind::Delete(d) => d.cidr,
        }
    }

    fn node(&self) -> &str {
        match self {
            OpKind::Create(c) => &c.route.target_node,
            OpKind::Delete(d) => &d.route.target_node,
        }
    }
}

struct QueuedOp {
    kind: OpKind,
}

struct InFlight {
    /// `None` for the list.
    kind: Option<OpKind>,
    sent: Instant,
}

struct Retry {
    attempts: u32,
    not_before: Instant,
    fired: bool,
}

impl Controller {
    /// A controller with `config`, recording into `metrics`.
    pub fn new(config: Config, metrics: Arc<Metrics>) -> Controller {
        let mut rng = match config.seed {
            Some(seed) => SmallRng::seed_from_u64(seed),
            None => rand::make_rng(),
        };
        // Drawn once, as upstream's informer factory does: [min, 2 × min).
        let resync_period = config
            .min_resync_period
            .mul_f64(1.0 + rng.random_range(0.0..1.0));
        let leading = !config.leader_election;
        metrics.leader.set(i64::from(leading));
        let scheduler = Scheduler::new(config.mode);
        Controller {
            config,
            metrics,
            rng,
            nodes: BTreeMap::new(),
            relist: None,
            synced: false,
            ever_synced: false,
            directory: None,
            cidr_seen: HashMap::new(),
            view: None,
            leading,
            shutting_down: false,
            scheduler,
            pass: None,
            passes: 0,
            next_timer: None,
            resync_period,
            next_op: 1,
            queue: VecDeque::new(),
            in_flight: HashMap::new(),
            busy: HashSet::new(),
            paused_until: None,
            retries: BTreeMap::new(),
            list_failures: 0,
            list_retry_at: None,
            conditions_in_flight: HashMap::new(),
            condition_retries: BTreeMap::new(),
        }
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The full-resync period drawn at construction (watch mode).
    pub fn resync_period(&self) -> Duration {
        self.resync_period
    }

    /// Whether a complete node list has been seen and no relist is in progress.
    pub fn is_synced(&self) -> bool {
        self.synced
    }

    pub fn is_leading(&self) -> bool {
        self.leading
    }

    /// Nothing is in flight: after [`Input::Shutdown`], the drivers may stop.
    pub fn is_idle(&self) -> bool {
        self.in_flight.is_empty() && self.conditions_in_flight.is_empty()
    }

    /// The nodes as the controller sees them.
    pub fn nodes(&self) -> impl Iterator<Item = &Node> {
        self.nodes.values()
    }

    /// The routes the controller believes the cloud holds, if it has listed them.
    pub fn routes(&self) -> Option<&[Route]> {
        self.view.as_ref().map(|v| v.routes.as_slice())
    }

    /// Feeds one input at `now` and returns what to do.
    pub fn handle(&mut self, input: Input, now: Instant) -> Vec<Command> {
        let mut out = Vec::new();
        match input {
            Input::Node(event) => self.on_node_event(event, now),
            Input::Cloud { id, reply } => self.on_cloud_reply(id, reply, now, &mut out),
            Input::ConditionWritten { node, result } => {
                self.on_condition_written(node, result, now)
            }
            Input::Leadership(leading) => self.on_leadership(leading, now),
            Input::Tick => {}
            Input::Shutdown => {
                self.shutting_down = true;
                self.cancel_queued();
            }
        }
        self.advance(now, &mut out);
        out
    }

    /// When the controller next needs [`Input::Tick`], if ever.
    pub fn next_deadline(&self) -> Option<Instant> {
        if self.shutting_down {
            return None;
        }
        let mut deadline: Option<Instant> = None;
        let mut consider = |t: Option<Instant>| {
            if let Some(t) = t {
                deadline = Some(deadline.map_or(t, |d| d.min(t)));
            }
        };
        if self.can_write() {
            if self.pass.is_none() {
                let due = self.scheduler.due(&self.config);
                consider(due.map(|d| self.paused_until.map_or(d, |p| p.max(d))));
            }
            consider(self.next_timer);
            consider(self.list_retry_at);
            consider(
                self.retries
                    .values()
                    .filter(|r| !r.fired)
                    .map(|r| r.not_before)
                    .min(),
            );
            consider(self.condition_retries.values().map(|(t, _)| *t).min());
            if !self.queue.is_empty() {
                consider(self.paused_until);
            }
        }
        deadline
    }

    fn can_write(&self) -> bool {
        self.leading && self.synced && !self.shutting_down
    }

    // --- the node view ------------------------------------------------------------

    fn on_node_event(&mut self, event: NodeEvent, now: Instant) {
        self.metrics.watch_events.inc();
        match event {
            NodeEvent::Init => {
                // The view is incomplete until InitDone: hold every delete.
                self.relist = Some(BTreeMap::new());
                self.synced = false;
                self.metrics.synced.set(0);
                self.cancel_queued();
            }
            NodeEvent::InitApply(node) => {
                let buffer = self.relist.get_or_insert_with(BTreeMap::new);
                buffer.insert(node.name.clone(), node);
            }
            NodeEvent::InitDone => self.on_list_complete(now),
            NodeEvent::Added(node) | NodeEvent::Modified(node) => self.on_node_applied(node, now),
            NodeEvent::Deleted(node) => {
                if let Some(buffer) = &mut self.relist {
                    buffer.remove(&node.name);
                    return;
                }
                if self.nodes.remove(&node.name).is_some() {
                    self.directory = None;
                    self.cidr_seen.retain(|(n, _), _| *n != node.name);
                    self.condition_retries.remove(&node.name);
                    self.node_trigger(Trigger::NodeDeleted(node.name), now);
                }
            }
        }
    }

    fn on_node_applied(&mut self, node: Node, now: Instant) {
        if let Some(buffer) = &mut self.relist {
            buffer.insert(node.name.clone(), node);
            return;
        }
        self.note_cidrs(&node, now);
        let trigger = match self.nodes.get(&node.name) {
            None => Some(Trigger::NodeAdded(node.name.clone())),
            Some(old) => {
                if old.provider_id != node.provider_id {
                    self.directory = None;
                }
                change_trigger(old, &node, self.config.mode)
            }
        };
        if !self.nodes.contains_key(&node.name) {
            self.directory = None;
        }
        self.nodes.insert(node.name.clone(), node);
        if let Some(t) = trigger {
            self.node_trigger(t, now);
        }
    }

    /// A complete list: swap it in, work out what changed while the watch was away,
    /// and ask for a pass even if nothing did (and even with no nodes at all).
    fn on_list_complete(&mut self, now: Instant) {
        let new = self.relist.take().unwrap_or_default();
        self.metrics.watch_relists.inc();
        let first = !self.ever_synced;
        let mut changes = Vec::new();
        for (name, node) in &new {
            match self.nodes.get(name) {
                None => changes.push(Trigger::NodeAdded(name.clone())),
                Some(old) => {
                    let equal_rv = old.resource_version == node.resource_version;
                    if self.config.mode == Mode::UpstreamWatch && equal_rv {
                        // Upstream sees a relisted, unchanged node as a resync update.
                        changes.push(Trigger::NodeResynced(name.clone()));
                    } else if let Some(t) = change_trigger(old, node, Mode::Watch) {
                        changes.push(t);
                    }
                }
            }
        }
        for name in self.nodes.keys() {
            if !new.contains_key(name) {
                changes.push(Trigger::NodeDeleted(name.clone()));
            }
        }
        for node in new.values() {
            self.note_cidrs(node, now);
        }
        self.cidr_seen.retain(|(n, _), _| new.contains_key(n));
        self.nodes = new;
        self.directory = None;
        self.synced = true;
        self.ever_synced = true;
        self.metrics.synced.set(1);
        if first {
            self.arm_timer(now);
        }
        match self.config.mode {
            Mode::UpstreamWatch => {
                // Upstream has no explicit initial pass: each listed node enqueues, and
                // an empty cluster enqueues nothing.
                for t in changes {
                    self.trigger(t, now);
                }
            }
            Mode::Watch | Mode::Poll => {
                // One pass after every complete list, even an empty one; what changed
                // while the watch was away rides along as its cause.
                let trigger = if first {
                    Trigger::Startup
                } else {
                    Trigger::Relist
                };
                self.trigger(trigger, now);
                if self.config.mode == Mode::Watch {
                    for t in changes {
                        self.metrics.trigger(t.kind());
                        self.scheduler.note(t, now);
                    }
                }
            }
        }
    }

    fn note_cidrs(&mut self, node: &Node, now: Instant) {
        for text in &node.pod_cidrs {
            if let Ok(cidr) = Cidr::parse(text) {
                self.cidr_seen
                    .entry((node.name.clone(), cidr))
                    .or_insert(now);
            }
        }
    }

    fn directory(&mut self) -> Arc<NodeDirectory> {
        if let Some(d) = &self.directory {
            return d.clone();
        }
        let dir = Arc::new(NodeDirectory::new(
            self.nodes
                .values()
                .map(|n| (n.name.as_str(), n.provider_id.as_deref())),
        ));
        self.directory = Some(dir.clone());
        dir
    }

    // --- triggers and timers ------------------------------------------------------

    /// Node changes trigger passes only in the watch modes, and only once synced.
    fn node_trigger(&mut self, trigger: Trigger, now: Instant) {
        if self.config.mode == Mode::Poll || !self.synced {
            return;
        }
        self.trigger(trigger, now);
    }

    fn trigger(&mut self, trigger: Trigger, now: Instant) {
        self.metrics.trigger(trigger.kind());
        if self.scheduler.has_pending() || self.pass.is_some() {
            self.metrics.triggers_coalesced.inc();
        }
        let busy = self.pass.is_some();
        self.scheduler.trigger(trigger, now, busy, &self.config);
    }

    fn arm_timer(&mut self, now: Instant) {
        self.next_timer = match self.config.mode {
            Mode::Poll => Some(now),
            Mode::Watch | Mode::UpstreamWatch => Some(now + self.resync_period),
        };
    }

    fn on_leadership(&mut self, leading: bool, now: Instant) {
        if leading == self.leading {
            return;
        }
        self.leading = leading;
        self.metrics.leader.set(i64::from(leading));
        self.metrics.leader_transitions.inc();
        if leading {
            if self.synced {
                self.arm_timer(now);
                self.trigger(Trigger::Leadership, now);
            }
        } else {
            // Writes stop at once: nothing queued is sent; replies still update the view.
            self.cancel_queued();
            self.scheduler.clear();
        }
    }

    /// Runs whatever is due at `now`: timers, retries, the next pass, dispatch.
    fn advance(&mut self, now: Instant, out: &mut Vec<Command>) {
        if !self.can_write() {
            return;
        }
        if self.next_timer.is_some_and(|t| t <= now) {
            self.fire_timer(now);
        }
        if self.list_retry_at.is_some_and(|t| t <= now) {
            self.list_retry_at = None;
            self.trigger(Trigger::ListRetry, now);
        }
        let due: Vec<Cidr> = self
            .retries
            .iter()
            .filter(|(_, r)| !r.fired && r.not_before <= now)
            .map(|(c, _)| *c)
            .collect();
        for cidr in due {
            if let Some(r) = self.retries.get_mut(&cidr) {
                r.fired = true;
            }
            self.trigger(Trigger::RouteRetry(cidr), now);
        }
        let due: Vec<String> = self
            .condition_retries
            .iter()
            .filter(|(_, (t, _))| *t <= now)
            .map(|(n, _)| n.clone())
            .collect();
        for node in due {
            self.write_condition(&node, out, None);
        }
        self.scheduler.advance(now);
        let paused = self.paused_until.is_some_and(|t| t > now);
        if self.pass.is_none()
            && !paused
            && self.scheduler.due(&self.config).is_some_and(|d| d <= now)
        {
            self.start_pass(now, out);
        }
        self.dispatch(now, out);
    }

    fn fire_timer(&mut self, now: Instant) {
        match self.config.mode {
            Mode::Poll => {
                // Re-armed from the start of the pass it causes (see start_pass).
                self.next_timer = None;
                self.trigger(Trigger::Poll, now);
            }
            Mode::Watch => {
                self.next_timer = Some(now + self.resync_period);
                self.trigger(Trigger::Resync, now);
            }
            Mode::UpstreamWatch => {
                // An informer resync re-delivers every node; each enqueues.
                self.next_timer = Some(now + self.resync_period);
                let names: Vec<String> = self.nodes.keys().cloned().collect();
                for name in names {
                    self.trigger(Trigger::NodeResynced(name), now);
                }
            }
        }
    }

    // --- passes -------------------------------------------------------------------

    fn start_pass(&mut self, now: Instant, out: &mut Vec<Command>) {
        let Some(batch) = self.scheduler.take(now) else {
            return;
        };
        self.passes += 1;
        let mut cause = batch.cause;
        cause.pass = self.passes;
        let cause = Arc::new(cause);
        self.metrics.pass_started(cause.primary());
        for t in &batch.times {
            self.metrics
                .trigger_to_pass
                .observe(now.saturating_duration_since(*t));
        }
        if self.config.mode == Mode::Poll {
            self.next_timer = Some(now + self.config.route_reconciliation_period);
        }
        let must_list = match (&self.view, self.config.mode) {
            (_, Mode::Poll | Mode::UpstreamWatch) => true,
            (None, _) => true,
            (Some(view), Mode::Watch) => {
                batch.force_list
                    || view.stale
                    || now.saturating_duration_since(view.listed_at)
                        >= self.config.route_view_max_age
            }
        };
        let report = PassReport {
            cause: cause.clone(),
            mode: self.config.mode,
            listed: must_list,
            list_error: None,
            created: 0,
            deleted: 0,
            kept: 0,
            failed: 0,
            deferred: 0,
            conditions: 0,
            cloud_calls: 0,
            duration: Duration::ZERO,
            problems: Vec::new(),
        };
        self.pass = Some(Pass {
            cause: cause.clone(),
            started: now,
            listing: None,
            listed: false,
            outstanding: 0,
            node_creates: HashMap::new(),
            report,
        });
        if must_list {
            let id = self.op_id();
            let nodes = self.directory();
            self.in_flight.insert(
                id,
                InFlight {
                    kind: None,
                    sent: now,
                },
            );
            if let Some(p) = &mut self.pass {
                p.listing = Some(id);
                p.report.cloud_calls += 1;
            }
            out.push(Command::Cloud {
                id,
                op: CloudOp::List { nodes },
                cause,
            });
        } else {
            self.plan_and_queue(now, out);
        }
    }

    fn plan_and_queue(&mut self, now: Instant, out: &mut Vec<Command>) {
        let Some(view) = &self.view else { return };
        let plan = plan::plan(
            self.nodes.values(),
            &view.routes,
            &self.config.cluster_cidrs,
        );
        let Plan {
            deletes,
            creates,
            nodes,
            kept,
            problems,
        } = plan;
        let cause = self
            .pass
            .as_ref()
            .map(|p| p.cause.clone())
            .unwrap_or_default();
        for p in &problems {
            log::warn!("{p} (pass {})", cause.pass);
        }
        let retry_mode = self.config.mode == Mode::Watch;
        let mut wanted: HashSet<Cidr> = HashSet::new();
        let mut queued = 0;
        let mut deferred = 0;
        let mut node_creates: HashMap<String, usize> = HashMap::new();
        for op in deletes
            .into_iter()
            .map(OpKind::Delete)
            .chain(creates.into_iter().map(OpKind::Create))
        {
            let cidr = op.cidr();
            wanted.insert(cidr);
            if retry_mode && self.retries.get(&cidr).is_some_and(|r| r.not_before > now) {
                deferred += 1;
                continue;
            }
            if let OpKind::Create(c) = &op {
                *node_creates.entry(c.route.target_node.clone()).or_default() += 1;
            }
            self.queue.push_back(QueuedOp { kind: op });
            queued += 1;
        }
        // Retries for routes the plan no longer needs are moot.
        self.retries.retain(|c, _| wanted.contains(c));
        if let Some(p) = &mut self.pass {
            p.outstanding += queued;
            p.report.kept = kept;
            p.report.deferred += deferred;
            p.report.problems = problems.iter().map(ToString::to_string).collect();
            p.node_creates = node_creates;
        }
        for routing in nodes {
            let waiting = self
                .pass
                .as_ref()
                .is_some_and(|p| p.node_creates.contains_key(&routing.node));
            if !waiting {
                self.write_condition(&routing.node, out, Some(routing.routable));
            }
        }
        self.maybe_finish_pass(now, out);
    }

    fn maybe_finish_pass(&mut self, now: Instant, out: &mut Vec<Command>) {
        let done = self
            .pass
            .as_ref()
            .is_some_and(|p| p.listing.is_none() && p.outstanding == 0);
        if !done {
            return;
        }
        let Some(pass) = self.pass.take() else { return };
        let mut report = pass.report;
        report.listed = pass.listed;
        report.duration = now.saturating_duration_since(pass.started);
        self.update_route_gauges();
        out.push(Command::PassFinished(report));
    }

    fn update_route_gauges(&self) {
        let wanted: i64 = self.nodes.values().map(|n| n.pod_cidrs.len() as i64).sum();
        let pending = (self.queue.len() + self.in_flight.len()) as i64;
        let failing = self.retries.len() as i64;
        self.metrics.routes_pending.set(pending);
        self.metrics.routes_failing.set(failing);
        self.metrics
            .routes_ok
            .set((wanted - pending - failing).max(0));
    }

    // --- cloud operations ---------------------------------------------------------

    fn op_id(&mut self) -> OpId {
        let id = self.next_op;
        self.next_op += 1;
        id
    }

    /// Sends queued operations, oldest first, keeping one per destination and at most
    /// `max_in_flight` in total. A destination skipped once is skipped for the rest of
    /// the scan, so its delete always goes before its create.
    fn dispatch(&mut self, now: Instant, out: &mut Vec<Command>) {
        if self.paused_until.is_some_and(|t| t > now) {
            return;
        }
        self.paused_until = None;
        let Some(cause) = self.pass.as_ref().map(|p| p.cause.clone()) else {
            return;
        };
        let mut blocked: HashSet<Cidr> = HashSet::new();
        let mut i = 0;
        while i < self.queue.len() && self.in_flight.len() < self.config.max_in_flight {
            let cidr = self.queue[i].kind.cidr();
            let is_delete = matches!(self.queue[i].kind, OpKind::Delete(_));
            if self.busy.contains(&cidr) || blocked.contains(&cidr) || (is_delete && !self.synced) {
                blocked.insert(cidr);
                i += 1;
                continue;
            }
            let Some(queued) = self.queue.remove(i) else {
                break;
            };
            let id = self.op_id();
            let op = match &queued.kind {
                OpKind::Create(c) => CloudOp::Create {
                    route: c.route.clone(),
                    name_hint: c.name_hint.clone(),
                    target: RouteTarget {
                        node_name: c.route.target_node.clone(),
                        provider_id: c.provider_id.clone(),
                        addresses: c.route.target_node_addresses.clone(),
                    },
                },
                OpKind::Delete(d) => CloudOp::Delete {
                    route: d.route.clone(),
                    reason: d.reason,
                },
            };
            self.busy.insert(cidr);
            self.in_flight.insert(
                id,
                InFlight {
                    kind: Some(queued.kind),
                    sent: now,
                },
            );
            if let Some(p) = &mut self.pass {
                p.report.cloud_calls += 1;
            }
            out.push(Command::Cloud {
                id,
                op,
                cause: cause.clone(),
            });
        }
    }

    /// Drops everything queued and not yet sent (relist, lost lease, shutdown). The
    /// next pass plans afresh.
    fn cancel_queued(&mut self) {
        let cancelled: Vec<QueuedOp> = self.queue.drain(..).collect();
        if let Some(p) = &mut self.pass {
            p.outstanding -= cancelled.len();
            p.report.deferred += cancelled.len();
            for op in &cancelled {
                if let OpKind::Create(_) = op.kind
                    && let Some(n) = p.node_creates.get_mut(op.kind.node())
                {
                    *n -= 1;
                }
            }
        }
    }

    fn on_cloud_reply(
        &mut self,
        id: OpId,
        reply: CloudReply,
        now: Instant,
        out: &mut Vec<Command>,
    ) {
        let Some(flight) = self.in_flight.remove(&id) else {
            log::warn!("reply for unknown cloud operation {id} ignored");
            return;
        };
        match (flight.kind, reply) {
            (None, CloudReply::Listed(result)) => self.on_listed(id, result, flight.sent, now, out),
            (Some(op), CloudReply::Done(result)) => {
                self.busy.remove(&op.cidr());
                self.on_op_done(op, result, flight.sent, now, out);
            }
            (kind, _) => {
                log::error!(
                    "cloud operation {id} got a reply of the wrong shape; treating it as ambiguous"
                );
                if let Some(op) = kind {
                    self.busy.remove(&op.cidr());
                    self.on_op_done(
                        op,
                        Err(CloudError::ambiguous("mismatched reply")),
                        flight.sent,
                        now,
                        out,
                    );
                }
            }
        }
        self.maybe_finish_pass(now, out);
    }

    fn on_listed(
        &mut self,
        id: OpId,
        result: Result<Vec<Route>, CloudError>,
        sent: Instant,
        now: Instant,
        out: &mut Vec<Command>,
    ) {
        let ours = self.pass.as_ref().is_some_and(|p| p.listing == Some(id));
        match result {
            Ok(routes) => {
                // Age the view from when the list was sent: anything changed by others
                // after that instant may be missing.
                self.view = Some(RouteView::new(routes, sent));
                self.list_failures = 0;
                if ours {
                    if let Some(p) = &mut self.pass {
                        p.listing = None;
                        p.listed = true;
                    }
                    self.plan_and_queue(now, out);
                }
            }
            Err(err) => {
                if let CloudErrorKind::RateLimited { after } = err.kind {
                    self.paused_until = Some(now + after);
                }
                if let Some(p) = &mut self.pass
                    && ours
                {
                    p.listing = None;
                    p.report.list_error = Some(err.message.clone());
                }
                self.list_failed(&err, now);
            }
        }
    }

    fn list_failed(&mut self, err: &CloudError, now: Instant) {
        self.list_failures += 1;
        match self.config.mode {
            // The next poll retries.
            Mode::Poll => {}
            // Upstream requeues through its rate limiter.
            Mode::UpstreamWatch => self.trigger(Trigger::ListRetry, now),
            Mode::Watch => {
                let delay = match err.kind {
                    CloudErrorKind::RateLimited { after }
                    | CloudErrorKind::Retry { after: Some(after) } => after,
                    _ => self.backoff(self.list_failures, self.config.retry_initial),
                };
                self.list_retry_at = Some(now + delay);
            }
        }
    }

    fn on_op_done(
        &mut self,
        op: OpKind,
        result: Result<(), CloudError>,
        sent: Instant,
        now: Instant,
        out: &mut Vec<Command>,
    ) {
        let cidr = op.cidr();
        let mut resolved = true;
        match (&op, result) {
            (OpKind::Create(c), Ok(())) => {
                if let Some(view) = &mut self.view {
                    let enable_node_addresses = view.reports_addresses;
                    view.insert(Route { enable_node_addresses, ..c.route.clone() });
                }
                self.retries.remove(&cidr);
                if let Some(seen) = self.cidr_seen.remove(&(c.route.target_node.clone(), cidr)) {
                    self.metrics
                        .node_to_route
                        .observe(now.saturating_duration_since(seen));
                }
                self.count(|r| r.created += 1);
            }
            (OpKind::Delete(d), Ok(())) => {
                self.forget_route(&d.route, cidr);
                self.retries.remove(&cidr);
                self.count(|r| r.deleted += 1);
            }
            (OpKind::Delete(d), Err(e)) if e.kind == CloudErrorKind::NotFound => {
                self.forget_route(&d.route, cidr);
                self.retries.remove(&cidr);
                self.count(|r| r.deleted += 1);
            }
            (_, Err(e)) if matches!(e.kind, CloudErrorKind::RateLimited { .. }) => {
                // Not the route's fault: wait out the limit and send it again.
                if let CloudErrorKind::RateLimited { after } = e.kind {
                    self.paused_until = Some(now + after);
                }
                self.queue.push_front(QueuedOp { kind: op.clone() });
                resolved = false;
            }
            (_, Err(e)) => {
                if matches!(
                    e.kind,
                    CloudErrorKind::Ambiguous | CloudErrorKind::AlreadyExists
                ) && let Some(view) = &mut self.view
                {
                    view.stale = true;
                }
                if let OpKind::Create(c) = &op {
                    self.failed_create_event(c, &e, now.saturating_duration_since(sent), out);
                }
                if let OpKind::Delete(_) = &op {
                    self.drop_queued_create(cidr);
                }
                log::warn!(
                    "{} of route {cidr} for node {} failed ({}): {}",
                    if matches!(op, OpKind::Create(_)) {
                        "create"
                    } else {
                        "delete"
                    },
                    if op.node().is_empty() { "-" } else { op.node() },
                    e.kind.outcome(),
                    e.message
                );
                self.schedule_retry(cidr, e.kind, now);
                self.count(|r| r.failed += 1);
            }
        }
        if resolved {
            if let Some(p) = &mut self.pass {
                p.outstanding -= 1;
            }
            if let OpKind::Create(c) = &op {
                self.create_resolved(&c.route.target_node, out);
            }
        }
    }

    fn forget_route(&mut self, route: &Route, cidr: Cidr) {
        if let Some(view) = &mut self.view {
            view.remove(route, cidr);
        }
    }

    fn count(&mut self, f: impl FnOnce(&mut PassReport)) {
        if let Some(p) = &mut self.pass {
            f(&mut p.report);
        }
    }

    /// A failed delete leaves the old route in place, so the create queued behind it
    /// for the same destination would fail too; it waits for the retry instead.
    fn drop_queued_create(&mut self, cidr: Cidr) {
        let Some(i) = self
            .queue
            .iter()
            .position(|q| q.kind.cidr() == cidr && matches!(q.kind, OpKind::Create(_)))
        else {
            return;
        };
        let Some(dropped) = self.queue.remove(i) else {
            return;
        };
        if let Some(p) = &mut self.pass {
            p.outstanding -= 1;
            p.report.deferred += 1;
            if let Some(n) = p.node_creates.get_mut(dropped.kind.node()) {
                *n -= 1;
            }
        }
    }

    /// One create of `node` resolved; once all have, its condition can be written.
    fn create_resolved(&mut self, node: &str, out: &mut Vec<Command>) {
        let Some(p) = &mut self.pass else { return };
        let Some(n) = p.node_creates.get_mut(node) else {
            return;
        };
        *n = n.saturating_sub(1);
        if *n == 0 {
            p.node_creates.remove(node);
            let routable = self.nodes.get(node).map(is_routable);
            if let Some(routable) = routable {
                self.write_condition(node, out, Some(routable));
            }
        }
    }

    fn schedule_retry(&mut self, cidr: Cidr, kind: CloudErrorKind, now: Instant) {
        if self.config.mode != Mode::Watch {
            return;
        }
        let attempts = self.retries.get(&cidr).map_or(0, |r| r.attempts) + 1;
        let delay = match kind {
            CloudErrorKind::Retry { after: Some(after) } => after,
            CloudErrorKind::Conflict => self.backoff(attempts, self.config.retry_initial / 2),
            CloudErrorKind::Invalid => self.backoff(attempts, self.config.retry_initial * 30),
            _ => self.backoff(attempts, self.config.retry_initial),
        };
        self.retries.insert(
            cidr,
            Retry {
                attempts,
                not_before: now + delay,
                fired: false,
            },
        );
    }

    /// `base × 2^(attempt-1)`, capped at `retry_max`, then jittered into [½, 1] of that,
    /// so that many routes failing together do not retry in lock-step.
    fn backoff(&mut self, attempt: u32, base: Duration) -> Duration {
        let exp = base.saturating_mul(1u32 << attempt.saturating_sub(1).min(20));
        let capped = exp.min(self.config.retry_max);
        capped.mul_f64(self.rng.random_range(0.5..=1.0))
    }

    fn failed_create_event(
        &mut self,
        c: &plan::Create,
        err: &CloudError,
        took: Duration,
        out: &mut Vec<Command>,
    ) {
        if !self.leading {
            return;
        }
        let cause = self
            .pass
            .as_ref()
            .map(|p| p.cause.clone())
            .unwrap_or_default();
        out.push(Command::RecordEvent {
            event: NodeEventRecord {
                node: c.route.target_node.clone(),
                uid: c.name_hint.clone(),
                kind: "Warning",
                reason: "FailedToCreateRoute",
                message: format!(
                    "Could not create route {} {} for node {} after {}: {}",
                    c.name_hint,
                    c.route.destination_cidr,
                    c.route.target_node,
                    crate::duration::format(took),
                    err.message
                ),
            },
            cause,
        });
    }

    // --- node conditions ----------------------------------------------------------

    /// Writes `NetworkUnavailable` for `node` from what the cloud now holds, unless the
    /// node already shows that value. `routable` is the planner's verdict; `None`
    /// recomputes it (for retries of failed writes).
    fn write_condition(&mut self, node: &str, out: &mut Vec<Command>, routable: Option<bool>) {
        self.condition_retries.remove(node);
        if !self.leading || self.shutting_down {
            return;
        }
        let Some(n) = self.nodes.get(node) else {
            return;
        };
        let routes = self.view.as_ref().map(|v| v.routes_to(node)).unwrap_or(&[]);
        let managed = !n.pod_cidrs.is_empty() || !routes.is_empty();
        if !managed {
            return;
        }
        let routable = routable.unwrap_or_else(|| is_routable(n));
        let all_routed = n
            .pod_cidrs
            .iter()
            .all(|t| Cidr::parse(t).is_ok_and(|c| routes.contains(&c)));
        let created = routable && all_routed;
        if created {
            // The route exists: this node no longer counts towards node-to-route latency.
            for t in &n.pod_cidrs {
                if let Ok(c) = Cidr::parse(t) {
                    self.cidr_seen.remove(&(node.to_string(), c));
                }
            }
        }
        let current = self
            .conditions_in_flight
            .get(node)
            .or(n.network_unavailable.as_ref());
        let Some(condition) = plan::network_condition(created, current) else {
            return;
        };
        let uid = n.uid.clone();
        self.conditions_in_flight
            .insert(node.to_string(), condition.clone());
        self.count(|r| r.conditions += 1);
        let cause = self
            .pass
            .as_ref()
            .map(|p| p.cause.clone())
            .unwrap_or_default();
        out.push(Command::WriteCondition {
            node: node.to_string(),
            uid,
            condition,
            cause,
        });
    }

    fn on_condition_written(&mut self, node: String, result: Result<(), WriteError>, now: Instant) {
        let Some(written) = self.conditions_in_flight.remove(&node) else {
            return;
        };
        match result {
            Ok(()) => {
                // The watch will confirm; until then the view shows what was written, so
                // the skip rule does not write it again.
                if let Some(n) = self.nodes.get_mut(&node) {
                    n.network_unavailable = Some(written);
                }
            }
            Err(WriteError::NodeGone) => {}
            Err(WriteError::Failed(e)) => {
                let attempts = self.condition_retries.get(&node).map_or(0, |(_, a)| *a) + 1;
                let delay = self.backoff(attempts, self.config.retry_initial);
                log::warn!(
                    "writing NetworkUnavailable on node {node} failed: {e}; retrying in {delay:?}"
                );
                self.condition_retries.insert(node, (now + delay, attempts));
            }
        }
    }
}

/// Whether a node's pod CIDRs can all be routed (it has some, and they all parse).
fn is_routable(node: &Node) -> bool {
    !node.pod_cidrs.is_empty() && node.pod_cidrs.iter().all(|c| Cidr::parse(c).is_ok())
}

/// The watch-mode trigger filter for an update: pod CIDRs or addresses changed.
/// Ours compares both as sets (a reordering changes no route); upstream compares them
/// in order and also treats an equal resourceVersion as a resync.
fn change_trigger(old: &Node, new: &Node, mode: Mode) -> Option<Trigger> {
    match mode {
        Mode::UpstreamWatch => {
            if old.resource_version == new.resource_version {
                Some(Trigger::NodeResynced(new.name.clone()))
            } else if old.pod_cidrs != new.pod_cidrs {
                Some(Trigger::PodCidrsChanged(new.name.clone()))
            } else if old.addresses != new.addresses {
                Some(Trigger::AddressesChanged(new.name.clone()))
            } else {
                None
            }
        }
        Mode::Watch | Mode::Poll => {
            if old.resource_version == new.resource_version && !old.resource_version.is_empty() {
                None
            } else if !same_cidrs(&old.pod_cidrs, &new.pod_cidrs) {
                Some(Trigger::PodCidrsChanged(new.name.clone()))
            } else if !same_addresses(&old.addresses, &new.addresses) {
                Some(Trigger::AddressesChanged(new.name.clone()))
            } else {
                None
            }
        }
    }
}

fn same_cidrs(a: &[String], b: &[String]) -> bool {
    let parse = |v: &[String]| {
        let mut out: Vec<Result<Cidr, String>> = v
            .iter()
            .map(|s| Cidr::parse(s).map_err(|_| s.clone()))
            .collect();
        out.sort_by(|x, y| format!("{x:?}").cmp(&format!("{y:?}")));
        out.dedup();
        out
    };
    parse(a) == parse(b)
}

// ---------------------------------------------------------------------------------

/// Decides when the next pass starts.
///
/// Ours: the first trigger after a quiet period starts a pass at once; later ones wait
/// until `debounce` has passed without a new trigger, but never longer than
/// `max_wait` from the first. Timers (resync, poll, retries) start at once.
///
/// Upstream's: every trigger reserves a token from a bucket of one per 10 s; its delay
/// is what the reservation needs, capped at 10 s. A key ready now is queued; one that
/// must wait is parked, keeping the earliest ready time.
enum Scheduler {
    Ours {
        pending: Option<Pending>,
        /// The last node change seen, pending or not: the quiet period runs from it.
        last_node_trigger: Option<Instant>,
    },
    Upstream {
        queued: Option<Pending>,
        parked: Option<(Instant, Pending)>,
        next_token: Option<Instant>,
    },
}

struct Pending {
    cause: Cause,
    times: Vec<Instant>,
    first: Instant,
    last_node_trigger: Option<Instant>,
    immediate: bool,
    force_list: bool,
}

/// The triggers a pass serves.
struct Batch {
    cause: Cause,
    times: Vec<Instant>,
    force_list: bool,
}

/// Upstream's `minRouteResyncInterval`: bucket rate and max-wait cap.
const UPSTREAM_INTERVAL: Duration = Duration::from_secs(10);

impl Pending {
    fn new(now: Instant) -> Pending {
        Pending {
            cause: Cause::default(),
            times: Vec::new(),
            first: now,
            last_node_trigger: None,
            immediate: false,
            force_list: false,
        }
    }

    fn add(&mut self, trigger: Trigger, now: Instant) {
        if trigger.is_timer() {
            self.immediate = true;
        } else {
            self.last_node_trigger = Some(now);
        }
        self.force_list |= trigger.forces_list();
        self.times.push(now);
        self.cause.add(trigger);
    }

    fn merge(&mut self, other: Pending) {
        self.first = self.first.min(other.first);
        self.immediate |= other.immediate;
        self.force_list |= other.force_list;
        self.times.extend(other.times);
        for t in other.cause.samples {
            self.cause.add(t);
        }
    }

    fn into_batch(self) -> Batch {
        Batch {
            cause: self.cause,
            times: self.times,
            force_list: self.force_list,
        }
    }
}

impl Scheduler {
    fn new(mode: Mode) -> Scheduler {
        match mode {
            Mode::UpstreamWatch => Scheduler::Upstream {
                queued: None,
                parked: None,
                next_token: None,
            },
            Mode::Watch | Mode::Poll => Scheduler::Ours {
                pending: None,
                last_node_trigger: None,
            },
        }
    }

    fn has_pending(&self) -> bool {
        match self {
            Scheduler::Ours { pending, .. } => pending.is_some(),
            Scheduler::Upstream { queued, parked, .. } => queued.is_some() || parked.is_some(),
        }
    }

    /// Adds a trigger. `busy` says a pass is running.
    fn trigger(&mut self, trigger: Trigger, now: Instant, busy: bool, config: &Config) {
        match self {
            Scheduler::Ours {
                pending,
                last_node_trigger,
            } => {
                let fresh = pending.is_none();
                let is_timer = trigger.is_timer();
                let quiet = last_node_trigger
                    .is_none_or(|t| now.saturating_duration_since(t) >= config.debounce);
                if !is_timer {
                    *last_node_trigger = Some(now);
                }
                let p = pending.get_or_insert_with(|| Pending::new(now));
                p.add(trigger, now);
                // Leading edge: the first node change after a quiet period, into an idle
                // controller, starts a pass now.
                if fresh && !busy && !is_timer && quiet {
                    p.immediate = true;
                }
            }
            Scheduler::Upstream {
                queued,
                parked,
                next_token,
            } => {
                let token_at = next_token.map_or(now, |t| t.max(now));
                *next_token = Some(token_at + UPSTREAM_INTERVAL);
                let delay = token_at
                    .saturating_duration_since(now)
                    .min(UPSTREAM_INTERVAL);
                if delay.is_zero() {
                    let q = queued.get_or_insert_with(|| Pending::new(now));
                    q.add(trigger, now);
                    q.immediate = true;
                } else {
                    let ready = now + delay;
                    match parked {
                        Some((at, p)) => {
                            *at = (*at).min(ready);
                            p.add(trigger, now);
                        }
                        None => {
                            let mut p = Pending::new(now);
                            p.add(trigger, now);
                            *parked = Some((ready, p));
                        }
                    }
                }
            }
        }
    }

    /// Feeds a trigger into a pending batch without affecting when it runs (changes
    /// found by a relist ride along with the relist's own trigger).
    fn note(&mut self, trigger: Trigger, now: Instant) {
        if let Scheduler::Ours {
            pending: Some(p), ..
        } = self
        {
            p.times.push(now);
            p.cause.add(trigger);
        }
    }

    /// Moves parked entries whose time has come into the queue.
    fn advance(&mut self, now: Instant) {
        if let Scheduler::Upstream { queued, parked, .. } = self
            && parked.as_ref().is_some_and(|(at, _)| *at <= now)
        {
            let Some((_, mut p)) = parked.take() else {
                return;
            };
            p.immediate = true;
            match queued {
                Some(q) => q.merge(p),
                None => *queued = Some(p),
            }
        }
    }

    /// When the next pass may start, if one is pending.
    fn due(&self, config: &Config) -> Option<Instant> {
        match self {
            Scheduler::Ours { pending: None, .. } => None,
            Scheduler::Ours {
                pending: Some(p), ..
            } => {
                if p.immediate {
                    return Some(p.first);
                }
                let last = p.last_node_trigger.unwrap_or(p.first);
                Some((last + config.debounce).min(p.first + config.max_wait))
            }
            Scheduler::Upstream { queued, parked, .. } => match (queued, parked) {
                (Some(q), _) => Some(q.first),
                (None, Some((at, _))) => Some(*at),
                (None, None) => None,
            },
        }
    }

    fn take(&mut self, now: Instant) -> Option<Batch> {
        self.advance(now);
        match self {
            Scheduler::Ours { pending, .. } => pending.take().map(Pending::into_batch),
            Scheduler::Upstream { queued, .. } => queued.take().map(Pending::into_batch),
        }
    }

    fn clear(&mut self) {
        match self {
            Scheduler::Ours { pending, .. } => *pending = None,
            Scheduler::Upstream { queued, parked, .. } => {
                *queued = None;
                *parked = None;
            }
        }
    }
}
