//! The metrics registry: counters, gauges and histograms on atomics, shared read-only
//! with the metrics server and written by the controller, the cloud workers and the
//! Kubernetes client threads. It is the only state shared between threads.
//!
//! Label sets are closed enums, so every series exists from the start (a scrape shows
//! zeros rather than missing series) and recording is a single atomic add.

use std::collections::BTreeMap;
use std::fmt;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

/// A monotonically increasing count.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds one.
    pub fn inc(&self) {
        self.add(1);
    }
    /// Adds `n`.
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    /// The current count.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A value that goes up and down.
#[derive(Debug, Default)]
pub struct Gauge(AtomicI64);

impl Gauge {
    /// Sets the value.
    pub fn set(&self, v: i64) {
        self.0.store(v, Ordering::Relaxed);
    }
    /// The current value.
    pub fn get(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A histogram with fixed upper bounds, in seconds.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    buckets: Vec<AtomicU64>,
    count: AtomicU64,
    /// The sum in nanoseconds, so that it stays an integer atomic.
    sum_nanos: AtomicU64,
}

/// Buckets for latencies between milliseconds and a day: the trigger-to-pass and
/// node-to-route times span both a 50 ms debounce and a 24 h resync.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 3600.0,
    86400.0,
];

/// Buckets for single cloud requests.
pub const REQUEST_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

impl Histogram {
    /// An empty histogram with these upper bounds, in seconds.
    pub fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            buckets: bounds.iter().map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            sum_nanos: AtomicU64::new(0),
        }
    }

    /// Records one observation.
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        if let Some(i) = self.bounds.iter().position(|b| secs <= *b) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_nanos.fetch_add(
            u64::try_from(d.as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    fn encode(&self, out: &mut String, name: &str, labels: &str) {
        let mut cumulative = 0;
        let sep = if labels.is_empty() { "" } else { "," };
        for (b, n) in self.bounds.iter().zip(&self.buckets) {
            cumulative += n.load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{b}\"}} {cumulative}");
        }
        let count = self.count();
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {count}");
        let sum = self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let _ = writeln!(out, "{name}_sum{braces} {sum}");
        let _ = writeln!(out, "{name}_count{braces} {count}");
    }
}

/// What started a reconcile pass; the label of `route_controller_passes_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TriggerKind {
    /// The first complete node list (or gaining leadership).
    Startup,
    /// A relist of the nodes after the watch broke.
    Relist,
    /// A node was added.
    NodeAdd,
    /// A node was deleted.
    NodeDelete,
    /// A change of `spec.podCIDRs` or `status.addresses`.
    NodeUpdate,
    /// The 12–24 h full resync (watch mode).
    Resync,
    /// The `--route-reconciliation-period` timer (poll mode).
    Poll,
    /// A failed route operation or list being retried.
    Retry,
}

impl TriggerKind {
    /// Every kind, in the order the series are exported.
    pub const ALL: [TriggerKind; 8] = [
        TriggerKind::Startup,
        TriggerKind::Relist,
        TriggerKind::NodeAdd,
        TriggerKind::NodeDelete,
        TriggerKind::NodeUpdate,
        TriggerKind::Resync,
        TriggerKind::Poll,
        TriggerKind::Retry,
    ];

    /// The label value.
    pub fn as_str(&self) -> &'static str {
        match self {
            TriggerKind::Startup => "startup",
            TriggerKind::Relist => "relist",
            TriggerKind::NodeAdd => "node_add",
            TriggerKind::NodeDelete => "node_delete",
            TriggerKind::NodeUpdate => "node_update",
            TriggerKind::Resync => "resync",
            TriggerKind::Poll => "poll",
            TriggerKind::Retry => "retry",
        }
    }

    fn index(&self) -> usize {
        *self as usize
    }
}

/// How a pass ended, the label `outcome` of `route_controller_route_sync_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncOutcome {
    /// The routes could not be listed.
    Error,
    /// At least one route was created or deleted.
    Changed,
    /// The pass found nothing to change.
    Noop,
}

impl SyncOutcome {
    /// Every outcome, in the order the series are exported.
    pub const ALL: [SyncOutcome; 3] = [SyncOutcome::Error, SyncOutcome::Changed, SyncOutcome::Noop];

    /// The label value.
    pub fn as_str(&self) -> &'static str {
        match self {
            SyncOutcome::Error => "error",
            SyncOutcome::Changed => "changed",
            SyncOutcome::Noop => "noop",
        }
    }
}

/// The `trigger` label of `route_controller_route_sync_total`: upstream 1.37 knows
/// `periodic` (poll and resync) and `node_change`; retries are this controller's own.
const SYNC_TRIGGERS: [&str; 3] = ["periodic", "node_change", "retry"];

fn sync_trigger(kind: TriggerKind) -> usize {
    match kind {
        TriggerKind::Poll | TriggerKind::Resync => 0,
        TriggerKind::Startup
        | TriggerKind::Relist
        | TriggerKind::NodeAdd
        | TriggerKind::NodeDelete
        | TriggerKind::NodeUpdate => 1,
        TriggerKind::Retry => 2,
    }
}

/// A cloud call, the label `operation`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CloudOperation {
    /// A list of the routes.
    List,
    /// A route create.
    Create,
    /// A route delete.
    Delete,
    /// Several creates and deletes in one request (a provider that batches).
    Apply,
}

impl CloudOperation {
    /// Every operation, in the order the series are exported.
    pub const ALL: [CloudOperation; 4] = [
        CloudOperation::List,
        CloudOperation::Create,
        CloudOperation::Delete,
        CloudOperation::Apply,
    ];

    /// The label value.
    pub fn as_str(&self) -> &'static str {
        match self {
            CloudOperation::List => "list",
            CloudOperation::Create => "create",
            CloudOperation::Delete => "delete",
            CloudOperation::Apply => "apply",
        }
    }
}

/// How a cloud call ended, the label `outcome`: success, or the class of failure
/// that calls for its own reaction (the provider interface maps its error kinds here).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CloudOutcome {
    /// The call did what was asked.
    Success,
    /// Refused without effect; to be retried.
    Retry,
    /// Refused for the provider's rate limit.
    RateLimited,
    /// The resource was busy with another change.
    Conflict,
    /// The route to delete was already gone.
    NotFound,
    /// A route with that destination already existed.
    AlreadyExists,
    /// The request was wrong and retrying will not fix it.
    Invalid,
    /// The call may or may not have taken effect.
    Ambiguous,
    /// Not sent (or stopped between its requests): the leader lease was lost.
    Fenced,
}

impl CloudOutcome {
    /// Every outcome, in the order the series are exported.
    pub const ALL: [CloudOutcome; 9] = [
        CloudOutcome::Success,
        CloudOutcome::Retry,
        CloudOutcome::RateLimited,
        CloudOutcome::Conflict,
        CloudOutcome::NotFound,
        CloudOutcome::AlreadyExists,
        CloudOutcome::Invalid,
        CloudOutcome::Ambiguous,
        CloudOutcome::Fenced,
    ];

    /// The label value.
    pub fn as_str(&self) -> &'static str {
        match self {
            CloudOutcome::Success => "success",
            CloudOutcome::Retry => "retry",
            CloudOutcome::RateLimited => "rate_limited",
            CloudOutcome::Conflict => "conflict",
            CloudOutcome::NotFound => "not_found",
            CloudOutcome::AlreadyExists => "already_exists",
            CloudOutcome::Invalid => "invalid",
            CloudOutcome::Ambiguous => "ambiguous",
            CloudOutcome::Fenced => "fenced",
        }
    }
}

impl fmt::Display for CloudOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Every metric the process exports.
#[derive(Debug)]
pub struct Metrics {
    /// Upstream's `route_controller_route_sync_total{outcome,trigger}` (its 1.37 form):
    /// passes finished, by outcome and by trigger.
    route_sync: [[Counter; 3]; 3],
    passes: [Counter; 8],
    triggers: [Counter; 8],
    /// Triggers that joined a pass already pending instead of starting one.
    pub triggers_coalesced: Counter,
    /// From a trigger (a node change, a timer) to the start of the pass serving it.
    pub trigger_to_pass: Histogram,
    /// From a node first showing a pod CIDR to its route existing in the cloud.
    pub node_to_route: Histogram,
    provider: Mutex<&'static str>,
    cloud_requests: [[Counter; 9]; CloudOperation::ALL.len()],
    cloud_duration: [Histogram; CloudOperation::ALL.len()],
    /// HTTP requests to a provider's API by (provider, endpoint, status); status 0 is
    /// "no reply". Endpoints carry `-` for IDs, so the set stays small.
    cloud_api: Mutex<BTreeMap<(&'static str, &'static str, u16), u64>>,
    /// Routes by state: `ok` (in the cloud as wanted), `pending` (an operation is
    /// queued or in flight) and `failing` (the last operation failed; a retry waits).
    pub routes_ok: Gauge,
    /// `route_controller_routes{state="pending"}`: wanted routes queued or in flight.
    pub routes_pending: Gauge,
    /// `route_controller_routes{state="failing"}`: wanted routes waiting for a retry.
    pub routes_failing: Gauge,
    /// `route_controller_condition_writes_total`.
    pub condition_writes: Counter,
    /// `route_controller_condition_write_failures_total`.
    pub condition_write_failures: Counter,
    /// `route_controller_events_total`: Kubernetes events recorded.
    pub events: Counter,
    /// `route_controller_watch_relists_total`: complete node lists.
    pub watch_relists: Counter,
    /// `route_controller_watch_streaming_lists_total`: complete node lists that came as
    /// a streaming list (watch-list), a subset of `watch_relists`.
    pub watch_streaming_lists: Counter,
    /// `route_controller_watch_list_fallbacks_total`: times the node watch gave up
    /// streaming lists for paginated ones because the API server refused or ignored
    /// one (at most once per process: the fallback is for good).
    pub watch_list_fallbacks: Counter,
    /// `route_controller_watch_restarts_total`: watch streams started again.
    pub watch_restarts: Counter,
    /// `route_controller_watch_events_total`: node events after the lists.
    pub watch_events: Counter,
    /// 1 while the watch is connected or listing successfully.
    pub watch_healthy: Gauge,
    /// 1 once a complete node list has been seen.
    pub synced: Gauge,
    /// 1 while this replica holds the lease (or runs without leader election).
    pub leader: Gauge,
    /// `route_controller_leader_transitions_total`.
    pub leader_transitions: Counter,
    /// `route_controller_route_table_routes{table}` and `…_limit{table}`: routes in each
    /// route table (anyone's) and how many it may hold, from the provider.
    route_tables: Mutex<BTreeMap<String, (usize, usize)>>,
    /// `route_controller_route_refusals_total{reason}`: route changes refused for
    /// their node alone, by the rule they broke (the provider's pre-check, or the
    /// cloud refusing a batch for them); the reasons are the providers' constants, so
    /// the set stays small.
    route_refusals: Mutex<BTreeMap<&'static str, u64>>,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

impl Metrics {
    /// A registry with every series at zero.
    pub fn new() -> Metrics {
        Metrics {
            route_sync: Default::default(),
            passes: Default::default(),
            triggers: Default::default(),
            triggers_coalesced: Counter::default(),
            trigger_to_pass: Histogram::new(LATENCY_BUCKETS),
            node_to_route: Histogram::new(LATENCY_BUCKETS),
            provider: Mutex::new(""),
            cloud_requests: Default::default(),
            cloud_duration: std::array::from_fn(|_| Histogram::new(REQUEST_BUCKETS)),
            cloud_api: Mutex::new(BTreeMap::new()),
            routes_ok: Gauge::default(),
            routes_pending: Gauge::default(),
            routes_failing: Gauge::default(),
            condition_writes: Counter::default(),
            condition_write_failures: Counter::default(),
            events: Counter::default(),
            watch_relists: Counter::default(),
            watch_streaming_lists: Counter::default(),
            watch_list_fallbacks: Counter::default(),
            watch_restarts: Counter::default(),
            watch_events: Counter::default(),
            watch_healthy: Gauge::default(),
            synced: Gauge::default(),
            leader: Gauge::default(),
            leader_transitions: Counter::default(),
            route_tables: Mutex::new(BTreeMap::new()),
            route_refusals: Mutex::new(BTreeMap::new()),
        }
    }

    /// The provider's name for the `provider` label.
    pub fn set_provider(&self, name: &'static str) {
        *crate::sync::lock(&self.provider) = name;
    }

    /// Counts a pass started by `trigger`.
    pub fn pass_started(&self, trigger: TriggerKind) {
        self.passes[trigger.index()].inc();
    }

    /// A pass finished (upstream counts `route_sync_total` when a reconcile ends).
    pub fn pass_finished(&self, trigger: TriggerKind, outcome: SyncOutcome) {
        self.route_sync[outcome as usize][sync_trigger(trigger)].inc();
    }

    /// Passes finished with this outcome, any trigger.
    pub fn route_syncs(&self, outcome: SyncOutcome) -> u64 {
        self.route_sync[outcome as usize]
            .iter()
            .map(Counter::get)
            .sum()
    }

    /// Passes started by this trigger kind.
    pub fn passes(&self, trigger: TriggerKind) -> u64 {
        self.passes[trigger.index()].get()
    }

    /// Passes started, any trigger.
    pub fn passes_total(&self) -> u64 {
        self.passes.iter().map(Counter::get).sum()
    }

    /// Counts one trigger.
    pub fn trigger(&self, kind: TriggerKind) {
        self.triggers[kind.index()].inc();
    }

    /// Triggers of this kind so far.
    pub fn triggers(&self, kind: TriggerKind) -> u64 {
        self.triggers[kind.index()].get()
    }

    /// Records one cloud request: its operation, outcome and duration.
    pub fn cloud_request(&self, op: CloudOperation, outcome: CloudOutcome, took: Duration) {
        self.cloud_requests[op as usize][outcome as usize].inc();
        self.cloud_duration[op as usize].observe(took);
    }

    /// Cloud requests of one operation, all outcomes.
    pub fn cloud_requests(&self, op: CloudOperation) -> u64 {
        self.cloud_requests[op as usize]
            .iter()
            .map(Counter::get)
            .sum()
    }

    /// Records one HTTP request to a provider's API: `endpoint` with IDs replaced by
    /// `-` (e.g. `/networks/-/actions/add_route`), `status` `None` when no reply came.
    pub fn cloud_api_request(
        &self,
        provider: &'static str,
        endpoint: &'static str,
        status: Option<u16>,
    ) {
        let mut map = crate::sync::lock(&self.cloud_api);
        *map.entry((provider, endpoint, status.unwrap_or(0)))
            .or_default() += 1;
    }

    /// HTTP requests to `endpoint` of `provider`'s API, all statuses.
    pub fn cloud_api_requests(&self, provider: &str, endpoint: &str) -> u64 {
        let map = crate::sync::lock(&self.cloud_api);
        map.iter()
            .filter(|((p, e, _), _)| *p == provider && *e == endpoint)
            .map(|(_, n)| n)
            .sum()
    }

    /// Sets the routes and the limit of route table `table`.
    pub fn set_route_table(&self, table: &str, routes: usize, limit: usize) {
        let mut map = crate::sync::lock(&self.route_tables);
        match map.get_mut(table) {
            Some(v) => *v = (routes, limit),
            None => {
                map.insert(table.to_string(), (routes, limit));
            }
        }
    }

    /// Routes and limit of route table `table`, if the provider reported it.
    pub fn route_table(&self, table: &str) -> Option<(usize, usize)> {
        crate::sync::lock(&self.route_tables).get(table).copied()
    }

    /// Counts a route change refused for its node alone, by the rule it broke.
    pub fn route_refused(&self, reason: &'static str) {
        *crate::sync::lock(&self.route_refusals)
            .entry(reason)
            .or_default() += 1;
    }

    /// Route changes refused for the rule `reason`.
    pub fn route_refusals(&self, reason: &str) -> u64 {
        crate::sync::lock(&self.route_refusals)
            .get(reason)
            .copied()
            .unwrap_or(0)
    }

    /// The Prometheus text exposition format (version 0.0.4).
    pub fn encode(&self) -> String {
        let mut out = String::with_capacity(8192);
        let provider = *crate::sync::lock(&self.provider);
        header(
            &mut out,
            "route_controller_route_sync_total",
            "counter",
            "A metric counting the number of route reconciles with the cloud provider, labeled by the \
             trigger (periodic or node_change; retry for this controller's own retries) and the outcome \
             (error if the reconcile failed, changed if at least one route was created or deleted, \
             otherwise noop).",
        );
        for outcome in SyncOutcome::ALL {
            for (i, trigger) in SYNC_TRIGGERS.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "route_controller_route_sync_total{{outcome=\"{}\",trigger=\"{trigger}\"}} {}",
                    outcome.as_str(),
                    self.route_sync[outcome as usize][i].get()
                );
            }
        }
        header(
            &mut out,
            "route_controller_passes_total",
            "counter",
            "Reconcile passes by what triggered them.",
        );
        for k in TriggerKind::ALL {
            let _ = writeln!(
                out,
                "route_controller_passes_total{{trigger=\"{}\"}} {}",
                k.as_str(),
                self.passes(k)
            );
        }
        header(
            &mut out,
            "route_controller_triggers_total",
            "counter",
            "Triggers received, by kind.",
        );
        for k in TriggerKind::ALL {
            let _ = writeln!(
                out,
                "route_controller_triggers_total{{trigger=\"{}\"}} {}",
                k.as_str(),
                self.triggers(k)
            );
        }
        counter(
            &mut out,
            "route_controller_triggers_coalesced_total",
            "Triggers folded into a pass that was already pending.",
            self.triggers_coalesced.get(),
        );
        header(
            &mut out,
            "route_controller_trigger_to_pass_seconds",
            "histogram",
            "Time from a trigger (node change, timer) to the start of the pass that serves it.",
        );
        self.trigger_to_pass
            .encode(&mut out, "route_controller_trigger_to_pass_seconds", "");
        header(
            &mut out,
            "route_controller_node_to_route_seconds",
            "histogram",
            "Time from a node showing a pod CIDR to its route existing in the cloud; for a \
             route lost later, from the pass that found it missing.",
        );
        self.node_to_route
            .encode(&mut out, "route_controller_node_to_route_seconds", "");
        header(
            &mut out,
            "route_controller_cloud_requests_total",
            "counter",
            "Cloud route calls by operation and outcome.",
        );
        for op in CloudOperation::ALL {
            for (i, outcome) in CloudOutcome::ALL
                .iter()
                .map(CloudOutcome::as_str)
                .enumerate()
            {
                let _ = writeln!(
                    out,
                    "route_controller_cloud_requests_total{{provider=\"{provider}\",operation=\"{}\",outcome=\"{outcome}\"}} {}",
                    op.as_str(),
                    self.cloud_requests[op as usize][i].get()
                );
            }
        }
        header(
            &mut out,
            "route_controller_cloud_request_duration_seconds",
            "histogram",
            "Duration of cloud route calls, including the provider's rate-limit waits.",
        );
        for op in CloudOperation::ALL {
            let labels = format!("provider=\"{provider}\",operation=\"{}\"", op.as_str());
            self.cloud_duration[op as usize].encode(
                &mut out,
                "route_controller_cloud_request_duration_seconds",
                &labels,
            );
        }
        header(
            &mut out,
            "route_controller_cloud_api_requests_total",
            "counter",
            "HTTP requests to the cloud provider's API by endpoint and status code (code 0: no reply).",
        );
        for ((provider, endpoint, code), n) in crate::sync::lock(&self.cloud_api).iter() {
            let _ = writeln!(
                out,
                "route_controller_cloud_api_requests_total{{provider=\"{provider}\",endpoint=\"{endpoint}\",code=\"{code}\"}} {n}"
            );
        }
        header(
            &mut out,
            "route_controller_route_refusals_total",
            "counter",
            "Route changes refused for their node alone, by the cloud's rule they broke (the \
             node's NetworkUnavailable reason): by the provider's check before any write, or by \
             the cloud refusing a batch for them.",
        );
        for (reason, n) in crate::sync::lock(&self.route_refusals).iter() {
            let _ = writeln!(
                out,
                "route_controller_route_refusals_total{{reason=\"{}\"}} {n}",
                label_value(reason)
            );
        }
        let tables = crate::sync::lock(&self.route_tables).clone();
        header(
            &mut out,
            "route_controller_route_table_routes",
            "gauge",
            "Routes in each route table, the cluster's and others', as of the last list plus this \
             controller's changes since.",
        );
        for (table, (routes, _)) in &tables {
            let _ = writeln!(
                out,
                "route_controller_route_table_routes{{table=\"{}\"}} {routes}",
                label_value(table)
            );
        }
        header(
            &mut out,
            "route_controller_route_table_limit",
            "gauge",
            "Routes each route table may hold, as the provider reports it.",
        );
        for (table, (_, limit)) in &tables {
            let _ = writeln!(
                out,
                "route_controller_route_table_limit{{table=\"{}\"}} {limit}",
                label_value(table)
            );
        }
        header(
            &mut out,
            "route_controller_routes",
            "gauge",
            "Wanted routes by state: ok, pending, failing.",
        );
        for (state, g) in [
            ("ok", &self.routes_ok),
            ("pending", &self.routes_pending),
            ("failing", &self.routes_failing),
        ] {
            let _ = writeln!(
                out,
                "route_controller_routes{{state=\"{state}\"}} {}",
                g.get()
            );
        }
        counter(
            &mut out,
            "route_controller_condition_writes_total",
            "NetworkUnavailable condition patches sent.",
            self.condition_writes.get(),
        );
        counter(
            &mut out,
            "route_controller_condition_write_failures_total",
            "NetworkUnavailable condition patches that failed.",
            self.condition_write_failures.get(),
        );
        counter(
            &mut out,
            "route_controller_events_total",
            "Kubernetes events recorded.",
            self.events.get(),
        );
        counter(
            &mut out,
            "route_controller_watch_relists_total",
            "Complete node lists (start and relists).",
            self.watch_relists.get(),
        );
        counter(
            &mut out,
            "route_controller_watch_streaming_lists_total",
            "Complete node lists that came as a streaming list (watch-list).",
            self.watch_streaming_lists.get(),
        );
        counter(
            &mut out,
            "route_controller_watch_list_fallbacks_total",
            "Times the node watch fell back from streaming lists to paginated lists.",
            self.watch_list_fallbacks.get(),
        );
        counter(
            &mut out,
            "route_controller_watch_restarts_total",
            "Node watch streams restarted.",
            self.watch_restarts.get(),
        );
        counter(
            &mut out,
            "route_controller_watch_events_total",
            "Node watch events received.",
            self.watch_events.get(),
        );
        gauge(
            &mut out,
            "route_controller_watch_healthy",
            "1 while the node watch is connected.",
            self.watch_healthy.get(),
        );
        gauge(
            &mut out,
            "route_controller_synced",
            "1 once a complete node list has been seen.",
            self.synced.get(),
        );
        gauge(
            &mut out,
            "route_controller_leader",
            "1 while this replica may write (holds the lease).",
            self.leader.get(),
        );
        counter(
            &mut out,
            "route_controller_leader_transitions_total",
            "Times this replica gained or lost leadership.",
            self.leader_transitions.get(),
        );
        out
    }
}

/// A label value as the text format needs it: backslash, quote and newline escaped.
fn label_value(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn counter(out: &mut String, name: &str, help: &str, v: u64) {
    header(out, name, "counter", help);
    let _ = writeln!(out, "{name} {v}");
}

fn gauge(out: &mut String, name: &str, help: &str, v: i64) {
    header(out, name, "gauge", help);
    let _ = writeln!(out, "{name} {v}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative() {
        let h = Histogram::new(&[0.1, 1.0]);
        h.observe(Duration::from_millis(50));
        h.observe(Duration::from_millis(500));
        h.observe(Duration::from_secs(5));
        let mut out = String::new();
        h.encode(&mut out, "x", "");
        assert!(out.contains("x_bucket{le=\"0.1\"} 1\n"), "{out}");
        assert!(out.contains("x_bucket{le=\"1\"} 2\n"), "{out}");
        assert!(out.contains("x_bucket{le=\"+Inf\"} 3\n"), "{out}");
        assert!(out.contains("x_count 3\n"), "{out}");
        assert!(out.contains("x_sum 5.55\n"), "{out}");
    }

    #[test]
    fn cloud_requests_are_labelled_by_operation_and_outcome() {
        let m = Metrics::new();
        m.set_provider("fake");
        m.cloud_request(
            CloudOperation::Create,
            CloudOutcome::Conflict,
            Duration::from_millis(3),
        );
        m.cloud_request(
            CloudOperation::Create,
            CloudOutcome::Success,
            Duration::from_millis(3),
        );
        let text = m.encode();
        assert!(text.contains(
            "route_controller_cloud_requests_total{provider=\"fake\",operation=\"create\",outcome=\"conflict\"} 1"
        ));
        assert_eq!(m.cloud_requests(CloudOperation::Create), 2);
    }

    #[test]
    fn cloud_api_requests_are_labelled_by_endpoint_and_status() {
        let m = Metrics::new();
        m.cloud_api_request("hcloud", "/networks/-", Some(200));
        m.cloud_api_request("hcloud", "/networks/-", Some(200));
        m.cloud_api_request("hcloud", "/networks/-", None);
        let text = m.encode();
        assert!(text.contains(
            "route_controller_cloud_api_requests_total{provider=\"hcloud\",endpoint=\"/networks/-\",code=\"200\"} 2"
        ), "{text}");
        assert!(text.contains("code=\"0\"} 1"), "{text}");
        assert_eq!(m.cloud_api_requests("hcloud", "/networks/-"), 3);
    }
}
