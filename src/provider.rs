//! The provider interface: the [`Routes`] trait every cloud implements and the words
//! it speaks (the [`RouteTarget`] of a new route, the [`NodeDirectory`] that maps
//! cloud targets back to nodes, the [`CloudError`] whose kind tells the controller
//! what to do next).
//!
//! It sits at the core's level, beside the controller, so the controller and the
//! providers (in `cloud/`) both depend on it and never on each other. Providers are
//! blocking and are called from the cloud worker threads, never from the controller.
//! They must be safe to call from several threads at once. They never decide which
//! routes to delete: ownership is the controller's job (the cluster-CIDR rule).

use std::fmt;
use std::time::Duration;

use crate::metrics::CloudOutcome;
use crate::model::{Cidr, NodeAddress, Route};

/// The cloud interface of upstream's `cloudprovider.Routes`, blocking.
pub trait Routes: Send + Sync {
    /// A short name for logs and metrics: `hcloud`, `aws`, `fake`.
    fn provider_name(&self) -> &'static str;

    /// All routes the provider manages for `cluster_name`. `nodes` lets the provider
    /// map a cloud target (server, instance) to the node name through the node's
    /// `spec.providerID`. A route whose target matches no known server or instance is
    /// reported as a blackhole with an empty target; it must never fail the whole list.
    fn list_routes(
        &self,
        cluster_name: &str,
        nodes: &NodeDirectory,
    ) -> Result<Vec<Route>, CloudError>;

    /// [`Routes::list_routes`], with each route handed to `route` as it is read
    /// instead of collected. The controller keeps a list compactly ([`crate::RouteList`]),
    /// so a provider that reads its routes piece by piece (a page, a table, a network's
    /// JSON) implements this and `list_routes` on top of it: a list of 50 000 routes is
    /// then never held as [`Route`]s whole. On `Err` the routes already handed over are
    /// dropped. The default collects [`Routes::list_routes`].
    fn list_routes_each(
        &self,
        cluster_name: &str,
        nodes: &NodeDirectory,
        route: &mut dyn FnMut(Route),
    ) -> Result<(), CloudError> {
        for r in self.list_routes(cluster_name, nodes)? {
            route(r);
        }
        Ok(())
    }

    /// Creates a route to `target`. `name_hint` is the node UID (the same for both
    /// CIDRs of a dual-stack node); `route.name` must be ignored. An identical route
    /// that already exists counts as created.
    fn create_route(
        &self,
        cluster_name: &str,
        name_hint: &str,
        route: &Route,
        target: &RouteTarget,
    ) -> Result<(), CloudError>;

    /// Deletes a route that `list_routes` returned, or one the controller created
    /// since the last list (then `route.name` is empty): identify it by its destination
    /// and target, not by name. A route that is already gone is reported as
    /// [`CloudErrorKind::NotFound`], which the controller counts as done.
    fn delete_route(&self, cluster_name: &str, route: &Route) -> Result<(), CloudError>;

    /// What the provider's API allows, for the controller to spend: it dispatches an
    /// operation only when the budget lets it go out at once, so that everything
    /// waiting stays in its queue, where a new plan can still change or drop it.
    /// `None` (the default): no limit is known; only the provider's refusals pace.
    fn budget(&self) -> Option<Budget> {
        None
    }

    /// The route tables this provider writes, each with its limit and the routes it
    /// held at the last successful [`Routes::list_routes`] (every route, the cluster's
    /// and others'), in a stable order. The controller reads it after each list and
    /// sends no create that cannot fit. Empty (the default): no limit is known.
    fn route_tables(&self) -> Vec<TableUsage> {
        Vec::new()
    }

    /// How many route changes the provider applies to its route tables in one request
    /// ([`Routes::apply_changes`]): Azure writes a route table whole (one PUT with its
    /// ETag), Neutron takes a list of routes in one `add_extraroutes`. The controller
    /// then sends a pass's creates and deletes as one operation of at most this many
    /// changes, with one such write in flight at a time; changes planned meanwhile
    /// join the next one. `None` (the default): one change a request, through
    /// [`Routes::create_route`] and [`Routes::delete_route`].
    fn batch_size(&self) -> Option<usize> {
        None
    }

    /// Applies `changes` to the provider's route tables in one request, when
    /// [`Routes::batch_size`] says it can. Every change has passed
    /// [`Routes::precheck`] (the worker leaves out those it refuses). `Ok` carries one
    /// outcome per change, in order, with the same meaning as the outcome of a single
    /// create or delete (`NotFound` for a delete of a route that is gone). `Err` means
    /// the request as a whole failed, and stands for every change: a refused write
    /// (`Conflict` for another writer's change of the table, `RateLimited`) changed
    /// nothing; `Ambiguous` may have changed everything;
    /// [`CloudErrorKind::BatchRefused`] says the cloud held one of the changes invalid
    /// and applied none (name the change at fault when the cloud's message does: the
    /// controller then needs one more write instead of a search). Never report a
    /// change done that the table does not hold. The default applies the changes one
    /// by one.
    fn apply_changes(
        &self,
        cluster_name: &str,
        changes: &[RouteChange],
    ) -> Result<Vec<Result<(), CloudError>>, CloudError> {
        Ok(changes
            .iter()
            .map(|change| match change {
                RouteChange::Create {
                    route,
                    name_hint,
                    target,
                } => self.create_route(cluster_name, name_hint, route, target),
                RouteChange::Delete { route } => self.delete_route(cluster_name, route),
            })
            .collect())
    }

    /// Checks a create against what the provider already knows, sending nothing that
    /// changes anything: `Err` with [`CloudErrorKind::Refused`] (a reason and the fix)
    /// when the create cannot succeed. `create_route` runs the same check first; `plan`
    /// runs it alone. Default: no check.
    fn preflight(&self, _route: &Route, _target: &RouteTarget) -> Result<(), CloudError> {
        Ok(())
    }

    /// Checks one change of a batch against the rules its cloud would refuse it for
    /// (name rules, next-hop rules, per-port limits), before the batch is written:
    /// `Err` with [`CloudErrorKind::Refused`] (the rule as the node's reason, the
    /// fix in the message) keeps the change out of [`Routes::apply_changes`], so one
    /// bad node never fails the write of the others. The worker calls it for every
    /// change of a batch; a [`CloudErrorKind::Fenced`] answer stops the whole batch,
    /// any other error is that change's outcome alone. Default: a create is
    /// [`Routes::preflight`]ed, a delete passes.
    fn precheck(&self, change: &RouteChange) -> Result<(), CloudError> {
        match change {
            RouteChange::Create { route, target, .. } => self.preflight(route, target),
            RouteChange::Delete { .. } => Ok(()),
        }
    }
}

/// A single create as a batch of one, for a provider whose cloud writes its table
/// only in batches (its `create_route` is this).
pub fn create_as_batch<R: Routes + ?Sized>(
    provider: &R,
    cluster_name: &str,
    name_hint: &str,
    route: &Route,
    target: &RouteTarget,
) -> Result<(), CloudError> {
    let change = RouteChange::Create {
        route: route.clone(),
        name_hint: name_hint.to_string(),
        target: target.clone(),
    };
    apply_one(provider, cluster_name, change)
}

/// A single delete as a batch of one (such a provider's `delete_route`).
pub fn delete_as_batch<R: Routes + ?Sized>(
    provider: &R,
    cluster_name: &str,
    route: &Route,
) -> Result<(), CloudError> {
    let change = RouteChange::Delete {
        route: route.clone(),
    };
    apply_one(provider, cluster_name, change)
}

fn apply_one<R: Routes + ?Sized>(
    provider: &R,
    cluster_name: &str,
    change: RouteChange,
) -> Result<(), CloudError> {
    let mut outcomes = provider.apply_changes(cluster_name, std::slice::from_ref(&change))?;
    outcomes.pop().unwrap_or(Ok(()))
}

/// One change of a batch ([`Routes::apply_changes`]): what a single
/// [`Routes::create_route`] or [`Routes::delete_route`] would be given.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RouteChange {
    /// Create `route` to `target`; `name_hint` is the node UID.
    Create {
        /// The route: destination and target node.
        route: Route,
        /// The node's UID, upstream's name hint.
        name_hint: String,
        /// The node the route points at, as the provider needs it.
        target: RouteTarget,
    },
    /// Delete `route`, as listed (or as created, with an empty name).
    Delete {
        /// The route.
        route: Route,
    },
}

impl RouteChange {
    /// The route the change is about.
    pub fn route(&self) -> &Route {
        match self {
            RouteChange::Create { route, .. } | RouteChange::Delete { route } => route,
        }
    }
}

/// One route table's size and limit, from [`Routes::route_tables`]: a Hetzner network,
/// an AWS route table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableUsage {
    /// The table's name for logs and the `table` label (network name, `rtb-…`).
    pub table: String,
    /// Routes it holds, anyone's, as the cloud counts them against `limit`; with
    /// `by_family`, the fuller family's count.
    pub routes: usize,
    /// Routes it may hold.
    pub limit: usize,
    /// `(IPv4, IPv6)` counts, for a cloud that applies `limit` to each address family
    /// apart (EC2's "Routes per route table" is "enforced separately for IPv4 routes
    /// and IPv6 routes"): a create then needs room in its own family only. `None`:
    /// one count for both.
    pub by_family: Option<(usize, usize)>,
}

impl TableUsage {
    /// The count a create or delete of `ipv6`'s family is measured against.
    pub fn routes_of(&self, ipv6: bool) -> usize {
        match self.by_family {
            Some((v4, v6)) => {
                if ipv6 {
                    v6
                } else {
                    v4
                }
            }
            None => self.routes,
        }
    }

    /// Changes the count of `ipv6`'s family (the only count without `by_family`).
    pub fn set_routes_of(&mut self, ipv6: bool, routes: usize) {
        match &mut self.by_family {
            Some((v4, v6)) => {
                if ipv6 {
                    *v6 = routes;
                } else {
                    *v4 = routes;
                }
                self.routes = (*v4).max(*v6);
            }
            None => self.routes = routes,
        }
    }
}

/// `NetworkUnavailable` reason and event reason of a node whose route does not fit in
/// the route table: the controller holds the create back until a delete or a list
/// shows room.
pub const ROUTE_TABLE_FULL: &str = "RouteTableFull";

/// A provider's budget, declared through [`Routes::budget`] and spent by the
/// controller. Declare it with a margin below the API's hard limit: requests whose
/// latencies vary arrive closer together than they were sent.
///
/// Its simplest form is one bucket ([`Budget::DEFAULT_BUCKET`]) of
/// `requests_per_second` and `burst`, from which each operation draws its
/// `requests_per_*`. A cloud that limits each kind of request on its own (EC2 keeps a
/// bucket per API action) declares a bucket of each ([`Budget::bucket`]) and says
/// which an operation draws from ([`Budget::draw`]): the controller then sends an
/// operation only when every bucket it draws from can pay at once, and a refusal in
/// one bucket holds back only the operations that draw from it.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct Budget {
    /// Requests per second, sustained, of the default bucket.
    pub requests_per_second: f64,
    /// Requests that may go out at once after a quiet period, of the default bucket.
    pub burst: u32,
    /// Route changes (creates, deletes) that may run at the same time; Hetzner runs
    /// one action on a network at a time, EC2 many.
    pub mutations_at_once: usize,
    /// Requests a list is charged when it is sent (default 1). What it really cost,
    /// reported in its [`Usage`], corrects the charge when it is answered.
    pub requests_per_list: u32,
    /// Requests a create is charged when it is sent (default 1; Hetzner: the change
    /// and one poll of its action).
    pub requests_per_create: u32,
    /// Requests a delete is charged when it is sent (default 1).
    pub requests_per_delete: u32,
    /// Requests a batch of changes ([`Routes::apply_changes`]) is charged when it is
    /// sent, whatever its size (default 1; Azure: the PUT and one poll of its
    /// long-running operation).
    pub requests_per_batch: u32,
    /// Named buckets besides the default one, in the order declared. A fixed array
    /// keeps `Budget` `Copy`, as embedders have it.
    buckets: [Option<Bucket>; Budget::MAX_BUCKETS],
    /// What an operation of each kind draws from the named buckets; a kind with no
    /// draw here draws its `requests_per_*` from the default bucket.
    draws: [Option<Draw>; Budget::MAX_DRAWS],
}

/// What an operation of one kind draws from one named bucket.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Draw {
    op: BudgetOp,
    bucket: &'static str,
    n: u32,
    /// `n` for each route table ([`Routes::route_tables`]), as EC2 takes one
    /// `CreateRoute` per table.
    per_table: bool,
}

/// One bucket of a [`Budget`]: a name (EC2's API action, or
/// [`Budget::DEFAULT_BUCKET`]), its refill rate and its size.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct Bucket {
    /// The name requests are recorded under ([`Meter::request_in`]).
    pub name: &'static str,
    /// Tokens added per second.
    pub requests_per_second: f64,
    /// The bucket's size: requests that may go out at once after a quiet period.
    pub burst: u32,
}

/// The kinds of operation a [`Budget`] prices.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum BudgetOp {
    /// [`Routes::list_routes`].
    List,
    /// [`Routes::create_route`].
    Create,
    /// [`Routes::delete_route`].
    Delete,
    /// [`Routes::apply_changes`], whatever its size.
    Batch,
}

impl Budget {
    /// The bucket of a budget declared with [`Budget::new`] alone, and the one a
    /// request recorded without a bucket ([`Meter::request`]) is charged to.
    pub const DEFAULT_BUCKET: &'static str = "requests";
    /// Named buckets a budget holds at most, besides the default one.
    pub const MAX_BUCKETS: usize = 16;
    /// Draws ([`Budget::draw`]) a budget holds at most, over all kinds.
    pub const MAX_DRAWS: usize = 16;

    /// `requests_per_second` with `burst`, any number of changes at once, one request
    /// per change.
    pub fn new(requests_per_second: f64, burst: u32) -> Budget {
        Budget {
            requests_per_second,
            burst,
            mutations_at_once: usize::MAX,
            requests_per_list: 1,
            requests_per_create: 1,
            requests_per_delete: 1,
            requests_per_batch: 1,
            buckets: [None; Budget::MAX_BUCKETS],
            draws: [None; Budget::MAX_DRAWS],
        }
    }

    /// The same, with at most `n` route changes at once.
    pub fn mutations_at_once(mut self, n: usize) -> Budget {
        self.mutations_at_once = n.max(1);
        self
    }

    /// The same, with each route change (create or delete) costing `n` requests.
    pub fn requests_per_mutation(mut self, n: u32) -> Budget {
        self.requests_per_create = n.max(1);
        self.requests_per_delete = n.max(1);
        self
    }

    /// The same, with a batch of changes charged `n` requests (at least 1).
    pub fn requests_per_batch(mut self, n: u32) -> Budget {
        self.requests_per_batch = n.max(1);
        self
    }

    /// The same, with a list charged `list`, a create `create` and a delete `delete`
    /// requests (each at least 1).
    pub fn requests_per_op(mut self, list: u32, create: u32, delete: u32) -> Budget {
        self.requests_per_list = list.max(1);
        self.requests_per_create = create.max(1);
        self.requests_per_delete = delete.max(1);
        self
    }

    /// The same, with a bucket `name` of `burst` tokens refilling at
    /// `requests_per_second` (declared again: replaced). Naming
    /// [`Budget::DEFAULT_BUCKET`] sets the default bucket.
    pub fn bucket(mut self, name: &'static str, requests_per_second: f64, burst: u32) -> Budget {
        if name == Budget::DEFAULT_BUCKET {
            self.requests_per_second = requests_per_second;
            self.burst = burst;
            return self;
        }
        let bucket = Bucket {
            name,
            requests_per_second,
            burst,
        };
        let slot = match self
            .buckets
            .iter()
            .position(|b| b.is_some_and(|b| b.name == name))
        {
            Some(i) => Some(i),
            None => self.buckets.iter().position(Option::is_none),
        };
        match slot {
            Some(i) => self.buckets[i] = Some(bucket),
            None => log::warn!(
                "budget: more than {} buckets; {name} is left out, and what draws from it \
                 draws from the default bucket",
                Budget::MAX_BUCKETS
            ),
        }
        self
    }

    /// The same, with an operation of kind `op` drawing `n` requests from the bucket
    /// `name` when it is sent (added to what it draws already). Once a kind draws
    /// from a named bucket, its `requests_per_*` no longer apply.
    pub fn draw(self, op: BudgetOp, name: &'static str, n: u32) -> Budget {
        self.add_draw(op, name, n, false)
    }

    /// The same as [`Budget::draw`], with `n` requests for each route table the
    /// provider reported at its last list ([`Routes::route_tables`]; one before the
    /// first): EC2 takes one `CreateRoute` per table.
    pub fn draw_per_table(self, op: BudgetOp, name: &'static str, n: u32) -> Budget {
        self.add_draw(op, name, n, true)
    }

    fn add_draw(mut self, op: BudgetOp, name: &'static str, n: u32, per_table: bool) -> Budget {
        let existing = self
            .draws
            .iter_mut()
            .flatten()
            .find(|d| d.op == op && d.bucket == name && d.per_table == per_table);
        if let Some(draw) = existing {
            draw.n = draw.n.saturating_add(n);
            return self;
        }
        let draw = Draw {
            op,
            bucket: name,
            n,
            per_table,
        };
        match self.draws.iter_mut().find(|d| d.is_none()) {
            Some(slot) => *slot = Some(draw),
            None => log::warn!(
                "budget: more than {} draws; {op:?} from {name} is left out",
                Budget::MAX_DRAWS
            ),
        }
        self
    }

    /// Every bucket: the default one first, then the named ones as declared.
    pub fn buckets(&self) -> Vec<Bucket> {
        let default = Bucket {
            name: Budget::DEFAULT_BUCKET,
            requests_per_second: self.requests_per_second,
            burst: self.burst,
        };
        std::iter::once(default)
            .chain(self.buckets.iter().flatten().copied())
            .collect()
    }

    /// What an operation of kind `op` draws when it is sent, by bucket: its declared
    /// draws, or its `requests_per_*` from the default bucket. A draw from a bucket
    /// that was never declared is charged to the default bucket. With one route
    /// table; [`Budget::draws_with_tables`] for more.
    pub fn draws(&self, op: BudgetOp) -> Vec<(&'static str, u32)> {
        self.draws_with_tables(op, 1)
    }

    /// [`Budget::draws`] when the provider writes `tables` route tables.
    pub fn draws_with_tables(&self, op: BudgetOp, tables: usize) -> Vec<(&'static str, u32)> {
        let tables = u32::try_from(tables.max(1)).unwrap_or(u32::MAX);
        let mut named: Vec<(&'static str, u32)> = Vec::new();
        for d in self.draws.iter().flatten().filter(|d| d.op == op) {
            let n = if d.per_table {
                d.n.saturating_mul(tables)
            } else {
                d.n
            };
            let bucket = self.known(d.bucket);
            match named.iter_mut().find(|(b, _)| *b == bucket) {
                Some(entry) => entry.1 = entry.1.saturating_add(n),
                None => named.push((bucket, n)),
            }
        }
        if !named.is_empty() {
            return named;
        }
        let n = match op {
            BudgetOp::List => self.requests_per_list,
            BudgetOp::Create => self.requests_per_create,
            BudgetOp::Delete => self.requests_per_delete,
            BudgetOp::Batch => self.requests_per_batch,
        };
        vec![(Budget::DEFAULT_BUCKET, n)]
    }

    /// `name` if it is a declared bucket, else the default bucket.
    pub fn known(&self, name: &'static str) -> &'static str {
        if self.buckets.iter().flatten().any(|b| b.name == name) {
            name
        } else {
            Budget::DEFAULT_BUCKET
        }
    }

    /// How many route changes this budget lets run at once: as many creates (or
    /// deletes, if more) as full buckets pay for at once, and no more than
    /// `mutations_at_once`. The controller keeps no more operations in flight than
    /// this, and never more than its ceiling (upstream's 200).
    pub fn operations_at_once(&self) -> usize {
        self.at_once(BudgetOp::Create)
            .max(self.at_once(BudgetOp::Delete))
            .min(self.mutations_at_once)
            .max(1)
    }

    /// How many operations of kind `op` full buckets let go out at once: the
    /// smallest bucket's burst over what the operation draws from it.
    pub fn at_once(&self, op: BudgetOp) -> usize {
        self.at_once_with_tables(op, 1)
    }

    /// [`Budget::at_once`] when the provider writes `tables` route tables.
    pub fn at_once_with_tables(&self, op: BudgetOp, tables: usize) -> usize {
        let buckets = self.buckets();
        self.draws_with_tables(op, tables)
            .iter()
            .filter(|(_, n)| *n > 0)
            .filter_map(|(name, n)| {
                let b = buckets.iter().find(|b| b.name == *name)?;
                Some((b.burst / n).max(1) as usize)
            })
            .min()
            .unwrap_or(usize::MAX)
    }
}

/// What one call of a provider spent of the cloud's budget and what the cloud said
/// about it: the controller charges an operation its declared cost when it sends it
/// ([`Budget`]) and corrects the charge and its buckets from this when it is answered
/// ([`CloudReply::Spent`](crate::CloudReply::Spent)).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Usage {
    /// HTTP requests the call sent (pages, action polls and lookups included).
    pub requests: u32,
    /// Of those, the ones recorded in a named bucket ([`Meter::request_in`]), by
    /// bucket; the rest were drawn from the default bucket.
    pub by_bucket: Vec<(&'static str, u32)>,
    /// Requests left in the cloud's budget (the default bucket) after the last reply
    /// that said so (Hetzner's `RateLimit-Remaining`), less this process's requests
    /// that were still on their way then.
    pub remaining: Option<u64>,
    /// The budget's size, as the cloud reported it (Hetzner's `RateLimit-Limit`).
    pub limit: Option<u64>,
    /// A request was refused for the rate limit (HTTP 429, EC2's
    /// `RequestLimitExceeded`): nothing should be sent for this long.
    pub throttled: Option<Duration>,
    /// The bucket the refusal was for ([`Meter::throttled_in`]); `None`: every bucket
    /// the operation draws from.
    pub throttled_bucket: Option<&'static str>,
}

impl Usage {
    /// `requests` sent, with nothing seen of the budget.
    pub fn new(requests: u32) -> Usage {
        Usage {
            requests,
            ..Usage::default()
        }
    }

    /// The same, with `n` more requests sent, recorded in the bucket `name`.
    pub fn in_bucket(mut self, name: &'static str, n: u32) -> Usage {
        self.requests = self.requests.saturating_add(n);
        self.add_to(name, n);
        self
    }

    fn add_to(&mut self, name: &'static str, n: u32) {
        match self.by_bucket.iter_mut().find(|(b, _)| *b == name) {
            Some(entry) => entry.1 = entry.1.saturating_add(n),
            None => self.by_bucket.push((name, n)),
        }
    }

    /// The same, with the cloud reporting `remaining` of a budget of `limit`.
    pub fn remaining(mut self, limit: Option<u64>, remaining: u64) -> Usage {
        self.limit = limit;
        self.remaining = Some(remaining);
        self
    }

    /// The same, with a refusal for the rate limit asking to wait `after`.
    pub fn throttled(mut self, after: Duration) -> Usage {
        self.throttled = Some(after);
        self
    }

    /// The same, with a refusal in the bucket `name` asking to wait `after`.
    pub fn throttled_in(mut self, name: &'static str, after: Duration) -> Usage {
        self.throttled = Some(after);
        self.throttled_bucket = Some(name);
        self
    }

    /// The requests sent, by bucket of `budget`: those recorded in a bucket it does
    /// not declare, and those recorded in none, count in the default bucket.
    pub fn spent_by_bucket(&self, budget: &Budget) -> Vec<(&'static str, u32)> {
        let named: u32 = self.by_bucket.iter().map(|(_, n)| *n).sum();
        let mut spent = Usage::default();
        spent.add_to(Budget::DEFAULT_BUCKET, self.requests.saturating_sub(named));
        for &(name, n) in &self.by_bucket {
            spent.add_to(budget.known(name), n);
        }
        spent.by_bucket
    }
}

/// Records, for the call running on this thread, the requests a provider sends and
/// what the cloud says about its budget. A provider is called on one thread per
/// operation and sends its requests from that thread, so what is recorded between
/// the start and the end of [`Meter::measure`] belongs to that call alone, even with
/// several calls in flight on other threads. A provider that records nothing is
/// charged its declared cost.
pub struct Meter;

thread_local! {
    static METERED: std::cell::RefCell<Option<Usage>> = const { std::cell::RefCell::new(None) };
}

impl Meter {
    /// Runs `call` and returns what it recorded, if anything.
    pub fn measure<T>(call: impl FnOnce() -> T) -> (T, Option<Usage>) {
        let outer = METERED.take();
        let result = call();
        let usage = METERED.replace(outer);
        (result, usage)
    }

    fn update(f: impl FnOnce(&mut Usage)) {
        METERED.with_borrow_mut(|metered| f(metered.get_or_insert_with(Usage::default)));
    }

    /// One HTTP request is about to be sent, drawn from the default bucket.
    pub fn request() {
        Meter::update(|u| u.requests = u.requests.saturating_add(1));
    }

    /// One HTTP request is about to be sent, drawn from the bucket `name` (EC2: its
    /// action).
    pub fn request_in(name: &'static str) {
        Meter::update(|u| {
            u.requests = u.requests.saturating_add(1);
            u.add_to(name, 1);
        });
    }

    /// A reply said how much of the budget is left (and, if it did, its size).
    pub fn budget(limit: Option<u64>, remaining: u64) {
        Meter::update(|u| {
            u.remaining = Some(remaining);
            u.limit = limit.or(u.limit);
        });
    }

    /// A request was refused for the rate limit; send nothing for `after`.
    pub fn throttled(after: Duration) {
        Meter::update(|u| u.throttled = Some(u.throttled.map_or(after, |t| t.max(after))));
    }

    /// A request was refused for the rate limit of the bucket `name`: send nothing
    /// that draws from it for `after`.
    pub fn throttled_in(name: &'static str, after: Duration) {
        Meter::update(|u| {
            u.throttled = Some(u.throttled.map_or(after, |t| t.max(after)));
            u.throttled_bucket = Some(name);
        });
    }
}

/// The node a new route points at, with what a provider needs to find its server or
/// instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteTarget {
    /// The node's name.
    pub node_name: String,
    /// The node's `spec.providerID`, if set.
    pub provider_id: Option<String>,
    /// The node's addresses.
    pub addresses: Vec<NodeAddress>,
}

/// Node names by provider ID, for mapping cloud targets back to nodes. Built for a
/// list and dropped after it, but built of every node: at 50 000 nodes a map of
/// copied names and IDs was the largest thing a list held (about 200 bytes a node).
/// Here the names and IDs share one string, and two sorted indexes find them (about
/// 50 bytes a node).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeDirectory {
    /// Every node's name and provider ID, end to end.
    text: String,
    /// Each node's name and provider ID, as spans of `text`, sorted by name.
    by_name: Vec<(Span, Option<Span>)>,
    /// The nodes with a provider ID: positions in `by_name`, sorted by provider ID
    /// (stably: among nodes that claim one ID, the last given comes last and wins).
    by_provider_id: Vec<u32>,
}

/// Where a string lies in [`NodeDirectory::text`].
type Span = (u32, u32);

impl NodeDirectory {
    /// Builds the directory from `(node name, provider ID)` pairs. If several nodes
    /// claim one provider ID, the last of them has it.
    pub fn new<'a>(nodes: impl IntoIterator<Item = (&'a str, Option<&'a str>)>) -> NodeDirectory {
        let mut dir = NodeDirectory::default();
        let mut given: Vec<(Span, Option<Span>)> = Vec::new();
        for (name, provider_id) in nodes {
            let name = dir.push(name);
            let id = provider_id.map(|id| dir.push(id));
            given.push((name, id));
        }
        // Provider IDs in the order given, before the names are sorted. Both sorts are
        // in place (no scratch copy of the vector, megabytes at 50 000 nodes) and
        // stable all the same: spans grow with the order given, so they break ties.
        let mut by_id: Vec<(Span, Span)> = given
            .iter()
            .filter_map(|&(name, id)| Some((id?, name)))
            .collect();
        by_id.sort_unstable_by(|a, b| dir.at(a.0).cmp(dir.at(b.0)).then(a.0.cmp(&b.0)));
        // The controller gives its nodes in name order: then no sort at all.
        if !given.is_sorted_by(|a, b| (dir.at(a.0), a.0) <= (dir.at(b.0), b.0)) {
            given.sort_unstable_by(|a, b| dir.at(a.0).cmp(dir.at(b.0)).then(a.0.cmp(&b.0)));
        }
        // Each name's place in `by_name`, found by where its span starts (a number)
        // rather than by comparing names.
        let mut by_start: Vec<(u32, u32)> = (0..)
            .zip(&given)
            .map(|(position, &(name, _))| (name.0, position))
            .collect();
        by_start.sort_unstable();
        dir.by_name = given;
        dir.by_provider_id = by_id
            .iter()
            .filter_map(|&(_, name)| {
                let i = by_start
                    .binary_search_by_key(&name.0, |&(start, _)| start)
                    .ok()?;
                Some(by_start[i].1)
            })
            .collect();
        dir.text.shrink_to_fit();
        dir
    }

    fn push(&mut self, s: &str) -> Span {
        // A directory of 4 GiB of names is not a cluster.
        let at = |len: usize| u32::try_from(len).unwrap_or(u32::MAX);
        let start = at(self.text.len());
        self.text.push_str(s);
        (start, at(self.text.len()))
    }

    fn at(&self, (start, end): Span) -> &str {
        self.text.get(start as usize..end as usize).unwrap_or("")
    }

    /// Where the node `name` is in `by_name`.
    fn position_of(&self, name: &str) -> Option<u32> {
        let i = self
            .by_name
            .binary_search_by(|&(n, _)| self.at(n).cmp(name))
            .ok()?;
        u32::try_from(i).ok()
    }

    /// The provider ID of the node at `position` of `by_name`.
    fn id_at(&self, position: u32) -> &str {
        self.by_name[position as usize]
            .1
            .map_or("", |id| self.at(id))
    }

    fn name_at(&self, position: u32) -> &str {
        self.at(self.by_name[position as usize].0)
    }

    /// The positions in `by_provider_id` of the nodes that claim `provider_id`.
    fn claiming(&self, provider_id: &str) -> &[u32] {
        let start = self
            .by_provider_id
            .partition_point(|&p| self.id_at(p) < provider_id);
        let len = self.by_provider_id[start..]
            .iter()
            .take_while(|&&p| self.id_at(p) == provider_id)
            .count();
        &self.by_provider_id[start..start + len]
    }

    /// The node whose `spec.providerID` is exactly `provider_id`.
    pub fn node_by_provider_id(&self, provider_id: &str) -> Option<&str> {
        let &winner = self.claiming(provider_id).last()?;
        Some(self.name_at(winner))
    }

    /// The provider ID that maps to the node `name`, if one does (a node that lost
    /// its provider ID to another node claiming it has none here).
    pub fn provider_id_of(&self, name: &str) -> Option<&str> {
        let position = self.position_of(name)?;
        let id = self.by_name[position as usize].1.map(|id| self.at(id))?;
        (self.claiming(id).last() == Some(&position)).then_some(id)
    }

    /// Every `(provider ID, node name)` pair, for providers that parse provider IDs
    /// (AWS accepts several spellings of one instance); one pair for each ID.
    pub fn provider_ids(&self) -> impl Iterator<Item = (&str, &str)> {
        self.by_provider_id
            .iter()
            .enumerate()
            .filter(|&(i, &p)| {
                self.by_provider_id
                    .get(i + 1)
                    .is_none_or(|&next| self.id_at(next) != self.id_at(p))
            })
            .map(|(_, &p)| (self.id_at(p), self.name_at(p)))
    }

    /// Every node's name, in order (Azure reads a shortened route name back to the
    /// node it was made from).
    pub fn names(&self) -> impl Iterator<Item = &str> {
        (0..self.by_name.len()).map(|i| self.at(self.by_name[i].0))
    }

    /// Whether a node of that name exists (a fallback when a node has no provider ID).
    pub fn has_node(&self, name: &str) -> bool {
        self.position_of(name).is_some()
    }

    /// How many nodes.
    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    /// Whether there are no nodes.
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }
}

/// A failed cloud call, with what the controller should do about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CloudError {
    /// What the controller should do about it.
    pub kind: CloudErrorKind,
    /// What happened, for logs and events: the provider's code and message, and the
    /// URL or resource involved. Never contains credentials.
    pub message: String,
}

/// The classes of cloud failure that call for different reactions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CloudErrorKind {
    /// The call did not happen (a clear refusal: a 4xx that is not about the input,
    /// a server saying "try later"); retry after the delay, or with backoff if none.
    /// Retry after this delay, or with backoff if none.
    Retry {
        /// When the provider said to come back, if it did.
        after: Option<Duration>,
    },
    /// The provider's rate limit is exhausted; nothing should be sent before `after`.
    /// How long to send nothing.
    RateLimited {
        /// When the provider's budget allows a request again.
        after: Duration,
    },
    /// The resource is busy with another change (`conflict`, `locked`); retry soon.
    Conflict,
    /// The route (on delete) is already gone.
    NotFound,
    /// A route with that destination already exists (on create), possibly to another
    /// target; the controller's view of the routes is out of date.
    AlreadyExists,
    /// The request is wrong and retrying will not fix it (invalid CIDR for this cloud,
    /// no server for the node, missing permission). Retried only slowly.
    Invalid,
    /// The call may or may not have taken effect: a timeout, a 5xx, a reply that could
    /// not be read. The controller must list before trusting its view again.
    Ambiguous,
    /// Not sent: this replica lost the leader lease, or its renew deadline passed
    /// ([`Fence`](crate::Fence)). An operation of several requests may have stopped
    /// between two of them, so its effect is unknown; it is never retried here: the
    /// new leader lists and repairs.
    Fenced,
    /// The cloud refused a create because the route table is full (another writer
    /// filled it since the last list). The controller holds its creates back until a
    /// delete or a list shows room.
    TableFull,
    /// Refused by the provider's pre-flight check before any request: the create
    /// cannot succeed as the node is (its address is outside the network, its
    /// instance in another VPC). `reason` is the node's `NetworkUnavailable` reason,
    /// the message names the fix. No request left, so it is not counted as a call.
    /// Tried again only when the node changes or after the next list (the provider's
    /// knowledge is refreshed); when `lasting` (an IPv6 pod CIDR on an IPv4-only
    /// cloud), only when the node changes.
    Refused {
        /// The `NetworkUnavailable` reason, e.g. `InternalIPOutsideNetwork`.
        reason: &'static str,
        /// Nothing but a change of the node can fix it.
        lasting: bool,
    },
    /// The cloud refused a batch ([`Routes::apply_changes`]) as a whole because it
    /// holds one of its changes invalid (ARM's `400 InvalidResourceName`, Neutron's
    /// `400 InvalidRoutes`): nothing of it was applied. The controller refuses the
    /// change at fault for its node alone (`reason` as its `NetworkUnavailable`
    /// reason, the message as the fix) and applies the rest; when the cloud does not
    /// say which change it is, the controller splits the batch until it finds it. A
    /// single create or delete refused this way is refused for its node the same way.
    BatchRefused {
        /// The cloud's rule, as the node's `NetworkUnavailable` reason
        /// (e.g. `InvalidResourceName`).
        reason: &'static str,
        /// The change the cloud's message names, by its position in the changes
        /// given to [`Routes::apply_changes`]; `None` when the cloud does not say.
        at_fault: Option<usize>,
    },
}

impl CloudError {
    /// An error of `kind`.
    pub fn new(kind: CloudErrorKind, message: impl Into<String>) -> CloudError {
        CloudError {
            kind,
            message: message.into(),
        }
    }

    /// An [`CloudErrorKind::Ambiguous`] error.
    pub fn ambiguous(message: impl Into<String>) -> CloudError {
        CloudError::new(CloudErrorKind::Ambiguous, message)
    }

    /// An [`CloudErrorKind::Invalid`] error.
    pub fn invalid(message: impl Into<String>) -> CloudError {
        CloudError::new(CloudErrorKind::Invalid, message)
    }

    /// A [`CloudErrorKind::Refused`] error: the pre-flight check's verdict.
    pub fn refused(reason: &'static str, lasting: bool, message: impl Into<String>) -> CloudError {
        CloudError::new(CloudErrorKind::Refused { reason, lasting }, message)
    }

    /// A [`CloudErrorKind::BatchRefused`] error: the cloud refused the whole batch for
    /// the change at position `at_fault` of it (`None`: it did not say which).
    pub fn batch_refused(
        reason: &'static str,
        at_fault: Option<usize>,
        message: impl Into<String>,
    ) -> CloudError {
        CloudError::new(CloudErrorKind::BatchRefused { reason, at_fault }, message)
    }

    /// The outcome label used in metrics and logs.
    pub fn outcome(&self) -> &'static str {
        self.kind.outcome().as_str()
    }
}

impl CloudErrorKind {
    /// The metrics outcome of a call that failed this way.
    pub fn outcome(&self) -> CloudOutcome {
        match self {
            CloudErrorKind::Retry { .. } => CloudOutcome::Retry,
            CloudErrorKind::RateLimited { .. } => CloudOutcome::RateLimited,
            CloudErrorKind::Conflict => CloudOutcome::Conflict,
            CloudErrorKind::NotFound => CloudOutcome::NotFound,
            CloudErrorKind::AlreadyExists => CloudOutcome::AlreadyExists,
            CloudErrorKind::Invalid => CloudOutcome::Invalid,
            CloudErrorKind::Ambiguous => CloudOutcome::Ambiguous,
            CloudErrorKind::Fenced => CloudOutcome::Fenced,
            CloudErrorKind::TableFull
            | CloudErrorKind::Refused { .. }
            | CloudErrorKind::BatchRefused { .. } => CloudOutcome::Invalid,
        }
    }
}

/// The destination of a new route on a cloud that routes IPv4 only (Hetzner networks,
/// EC2's `DestinationCidrBlock`): refused before any request, as
/// [`CloudErrorKind::Invalid`], naming the provider and, in `ipv6_hint`, what the
/// operator can do about an IPv6 pod CIDR.
pub(crate) fn ipv4_destination(
    text: &str,
    provider: &str,
    ipv6_hint: &str,
) -> Result<Cidr, CloudError> {
    let cidr = Cidr::parse(text)
        .map_err(|e| CloudError::invalid(format!("{provider}: route destination: {e}")))?;
    if !cidr.is_ipv4() {
        return Err(CloudError::invalid(format!(
            "{provider}: route destination {cidr} is IPv6; {ipv6_hint}"
        )));
    }
    Ok(cidr)
}

impl fmt::Display for CloudError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CloudError {}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// Guards the budget's vocabulary: `Budget::new` alone is one bucket that every
    /// kind draws its `requests_per_*` from; named draws replace that for their
    /// kind, draws per table scale with the tables, an undeclared bucket is the
    /// default one, and `at_once` is the tightest bucket's burst over its draw.
    #[test]
    fn draws_name_their_buckets_and_scale_with_the_tables() {
        let one = Budget::new(5.0, 20).requests_per_op(1, 2, 1);
        assert_eq!(one.buckets().len(), 1);
        assert_eq!(
            one.draws(BudgetOp::Create),
            vec![(Budget::DEFAULT_BUCKET, 2)]
        );
        assert_eq!(one.at_once(BudgetOp::Create), 10);

        let ec2 = Budget::new(5.0, 20)
            .bucket("DescribeInstances", 16.0, 80)
            .bucket("CreateRoute", 4.0, 160)
            .draw(BudgetOp::Create, "DescribeInstances", 1)
            .draw_per_table(BudgetOp::Create, "CreateRoute", 1)
            .draw(BudgetOp::Delete, "NoSuchBucket", 1);
        assert_eq!(
            ec2.draws_with_tables(BudgetOp::Create, 3),
            vec![("DescribeInstances", 1), ("CreateRoute", 3)]
        );
        assert_eq!(ec2.draws(BudgetOp::List), vec![(Budget::DEFAULT_BUCKET, 1)]);
        assert_eq!(
            ec2.draws(BudgetOp::Delete),
            vec![(Budget::DEFAULT_BUCKET, 1)]
        );
        assert_eq!(ec2.at_once_with_tables(BudgetOp::Create, 1), 80);
        assert_eq!(ec2.at_once_with_tables(BudgetOp::Create, 4), 40);
        // Declared again: replaced, not added.
        let again = ec2.bucket("CreateRoute", 1.0, 10);
        assert_eq!(again.buckets().len(), 3);
        assert_eq!(again.at_once(BudgetOp::Create), 10);
    }

    /// Guards what a report says by bucket: requests recorded in a bucket count
    /// there, the rest (and those of an undeclared bucket) in the default one.
    #[test]
    fn a_report_counts_its_requests_by_bucket() {
        let budget = Budget::new(1.0, 1).bucket("CreateRoute", 1.0, 1);
        let (_, usage) = Meter::measure(|| {
            Meter::request();
            Meter::request_in("CreateRoute");
            Meter::request_in("CreateRoute");
            Meter::request_in("Undeclared");
            Meter::throttled_in("CreateRoute", Duration::from_secs(2));
        });
        let usage = usage.expect("recorded");
        assert_eq!(usage.requests, 4);
        assert_eq!(usage.throttled_bucket, Some("CreateRoute"));
        assert_eq!(
            usage.spent_by_bucket(&budget),
            vec![(Budget::DEFAULT_BUCKET, 2), ("CreateRoute", 2)]
        );
    }

    #[test]
    fn directory_maps_provider_ids_and_names() {
        let dir = NodeDirectory::new([("b", Some("hcloud://2")), ("a", None)]);
        assert_eq!(dir.node_by_provider_id("hcloud://2"), Some("b"));
        assert_eq!(dir.node_by_provider_id("hcloud://1"), None);
        assert!(dir.has_node("a") && dir.has_node("b") && !dir.has_node("c"));
        assert_eq!(dir.len(), 2);
        assert_eq!(dir.provider_id_of("b"), Some("hcloud://2"));
        assert_eq!(dir.provider_id_of("a"), None);
    }

    /// Guards the sorted indexes against the map they replace (a name by provider
    /// ID, the last claim winning, and a provider ID by name for the winners), over
    /// random directories with shared IDs, empty IDs and names out of order.
    #[test]
    fn the_directory_answers_as_a_map_of_its_pairs_would() {
        let mut seed = 11u64;
        let mut next = |n: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        for _ in 0..200 {
            let count = next(12) as usize;
            // Distinct names, out of order.
            let mut names: Vec<String> = (0..count).map(|i| format!("n{}", (i * 7) % 13)).collect();
            names.rotate_left(next(count.max(1) as u64) as usize);
            let pairs: Vec<(String, Option<String>)> = names
                .iter()
                .map(|n| {
                    let id = match next(4) {
                        0 => None,
                        1 => Some(String::new()),
                        _ => Some(format!("fake://{}", next(5))),
                    };
                    (n.clone(), id)
                })
                .collect();
            let dir = NodeDirectory::new(pairs.iter().map(|(n, id)| (n.as_str(), id.as_deref())));
            let mut map: HashMap<&str, &str> = HashMap::new();
            for (n, id) in &pairs {
                if let Some(id) = id {
                    map.insert(id, n);
                }
            }
            for k in 0..6 {
                let id = format!("fake://{k}");
                assert_eq!(
                    dir.node_by_provider_id(&id),
                    map.get(id.as_str()).copied(),
                    "{pairs:?}"
                );
            }
            assert_eq!(
                dir.node_by_provider_id(""),
                map.get("").copied(),
                "{pairs:?}"
            );
            let mut listed: Vec<(&str, &str)> = dir.provider_ids().collect();
            let mut expected: Vec<(&str, &str)> = map.iter().map(|(i, n)| (*i, *n)).collect();
            listed.sort();
            expected.sort();
            assert_eq!(listed, expected, "{pairs:?}");
            for (n, _) in &pairs {
                assert!(dir.has_node(n));
                let winner = map.iter().find(|(_, w)| **w == n.as_str()).map(|(i, _)| *i);
                assert_eq!(dir.provider_id_of(n), winner, "{n} in {pairs:?}");
            }
            assert!(!dir.has_node("other"));
            assert_eq!(dir.len(), pairs.len());
        }
    }
}
