//! The controller's settings: the mode that decides how passes are triggered, and the
//! timers, limits and seed around it. Every field has a default ([`Config::new`]).

use std::time::Duration;

use crate::model::Cidr;
use crate::provider::Budget;

/// How passes are triggered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Mode {
    /// A full pass with a fresh list every `route_reconciliation_period` (the feature
    /// gate off; upstream's only mode before 1.35). A failed route operation or list
    /// is retried with backoff by an early pass when that comes before the next poll
    /// (unless [`Config::poll_retries`] is off); a poll never waits for a retry.
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
    /// The mode's name in logs and reports.
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
#[non_exhaustive]
pub struct Config {
    /// Passed to every cloud call (`--cluster-name`, default `kubernetes`).
    pub cluster_name: String,
    /// The ranges whose routes this controller owns (`--cluster-cidr`); routes outside
    /// them are never deleted.
    pub cluster_cidrs: Vec<Cidr>,
    /// How passes are triggered (default [`Mode::Watch`]).
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
    /// At most this many cloud operations in flight at once
    /// (`--concurrent-route-operations`, a cap). Default 200, upstream's number, as a
    /// ceiling rather than a target: within it the budget's rules decide ([`Budget`]:
    /// what full buckets pay for at once, and its `mutations_at_once`), so a cloud
    /// whose buckets take 100 creates at once gets 100, and one that takes one change
    /// at a time gets one.
    pub max_in_flight: usize,
    /// First delay before a failed route operation is retried (default 1 s); it doubles
    /// up to `retry_max` (default 5 min), with jitter.
    pub retry_initial: Duration,
    /// The longest retry delay (default 5 min).
    pub retry_max: Duration,
    /// When false the controller writes from the start; when true it waits for
    /// [`Input::Leadership`](crate::Input::Leadership).
    pub leader_election: bool,
    /// Seed for the resync draw and the jitter; `None` seeds from the OS.
    pub seed: Option<u64>,
    /// How long a shutdown waits for in-flight cloud calls and condition writes before
    /// it gives up on them (default 10 s).
    pub drain_timeout: Duration,
    /// With leader election: how long after gaining the lease the routes are listed
    /// again, so that a write the previous leader had on the wire when it lost the
    /// lease is seen and repaired. The renew deadline plus the cloud's request
    /// timeout: the previous leader's fence closed at its renew deadline at the
    /// latest, and a request it let through before gives up within the timeout.
    /// Default `None` (no such list); [`Builder`](crate::Builder) fills it in from
    /// the lease and the [`Fence`](crate::Fence).
    pub handover_relist: Option<Duration>,
    /// The provider's budget ([`Routes::budget`](crate::Routes::budget)), spent by the
    /// controller. Default `None`: [`Builder`](crate::Builder) fills it from the
    /// provider; without one only the provider's refusals pace.
    pub budget: Option<Budget>,
    /// The provider's batch size ([`Routes::batch_size`](crate::Routes::batch_size)):
    /// with one, route changes go out as [`CloudOp::Apply`](crate::CloudOp::Apply)
    /// operations of at most this many changes, one in flight at a time, and
    /// `max_in_flight` and the budget's `mutations_at_once` no longer apply. Default
    /// `None`: one operation per change; [`Builder`](crate::Builder) fills it from
    /// the provider.
    pub batch_size: Option<usize>,
    /// Delete the routes of nodes that exist but are not routed here (unselected by
    /// the node filter) as if they were gone (`--delete-routes-of-unselected-nodes`,
    /// default false: they are left alone, so that a selector typo cannot delete the
    /// routes of half the cluster).
    pub delete_routes_of_unselected_nodes: bool,
    /// Hold back creates that cannot fit in the provider's route tables
    /// ([`Routes::route_tables`](crate::Routes::route_tables)), sending deletes first
    /// when a table is near full (default true). False reproduces upstream, which
    /// sends them and lets the cloud refuse (for `simulate`'s comparison).
    pub guard_table_limits: bool,
    /// In poll mode, retry a failed route operation or list with backoff through an
    /// early pass when that comes before the next poll (default true). False
    /// reproduces upstream's poll mode, which leaves it to the next poll (for
    /// `simulate`'s comparison).
    pub poll_retries: bool,
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
            max_in_flight: crate::controller::budget::IN_FLIGHT_CEILING,
            retry_initial: Duration::from_secs(1),
            retry_max: Duration::from_secs(300),
            leader_election: false,
            handover_relist: None,
            seed: None,
            budget: None,
            batch_size: None,
            drain_timeout: Duration::from_secs(10),
            delete_routes_of_unselected_nodes: false,
            guard_table_limits: true,
            poll_retries: true,
        }
    }
}
