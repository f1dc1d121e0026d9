//! An in-memory cloud for `simulate`, the benchmarks and tests: a route table keyed by
//! destination, with configurable latency, failure injection, a server-side rate
//! limit and call counters.
//!
//! It behaves like a real route table rather than like upstream's fake: one route per
//! destination, a create for a destination that exists with another target fails with
//! "already exists", an identical create succeeds, and errors are never sticky.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};

use crate::model::{Cidr, Route};
use crate::provider::{
    Budget, CloudError, CloudErrorKind, Meter, NodeDirectory, RouteChange, RouteTarget, Routes,
    TableUsage,
};

/// Which call a counter or an injected failure applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Call {
    /// A list of routes.
    List,
    /// A route create.
    Create,
    /// A route delete.
    Delete,
    /// A batch of creates and deletes in one request (with a batch size set).
    Apply,
}

/// Call counters, readable while the cloud is in use.
#[derive(Debug, Default)]
pub struct Counters {
    /// Lists made.
    pub list: AtomicU64,
    /// Creates made.
    pub create: AtomicU64,
    /// Deletes made.
    pub delete: AtomicU64,
    /// Batches applied (each one request, whatever its size).
    pub apply: AtomicU64,
    /// Batches refused because another was still being applied (the table takes one
    /// write at a time, as an Azure route table does).
    pub concurrent_applies: AtomicU64,
    /// Calls refused by the server-side rate limit.
    pub rate_limited: AtomicU64,
    /// Calls that failed through injection.
    pub injected_failures: AtomicU64,
    /// Creates refused because the table held its limit of routes.
    pub table_full: AtomicU64,
}

impl Counters {
    /// Calls of one kind so far.
    pub fn get(&self, call: Call) -> u64 {
        match call {
            Call::List => self.list.load(Ordering::Relaxed),
            Call::Create => self.create.load(Ordering::Relaxed),
            Call::Delete => self.delete.load(Ordering::Relaxed),
            Call::Apply => self.apply.load(Ordering::Relaxed),
        }
    }

    /// Calls of every kind so far.
    pub fn total(&self) -> u64 {
        self.get(Call::List)
            + self.get(Call::Create)
            + self.get(Call::Delete)
            + self.get(Call::Apply)
    }
}

/// A source of the current time, so that the fake's rate limit works in virtual time.
pub type Clock = Box<dyn Fn() -> Instant + Send + Sync>;

/// The in-memory cloud.
pub struct FakeCloud {
    state: Mutex<State>,
    counters: Counters,
    latency: Mutex<Duration>,
    clock: Clock,
    /// List routes with `enable_node_addresses`, as a provider whose routes carry the
    /// target's addresses does; the controller then replaces routes whose node
    /// addresses changed.
    report_node_addresses: std::sync::atomic::AtomicBool,
    /// Changes applied in one request ([`Routes::apply_changes`]); 0: none, one
    /// change a request.
    batch_size: std::sync::atomic::AtomicUsize,
    /// Batches being applied now.
    applying: std::sync::atomic::AtomicUsize,
}

struct State {
    /// Routes by destination network.
    routes: BTreeMap<Cidr, Route>,
    /// Failures to return on the next calls of a kind, in order.
    scripted: Vec<(Call, VecDeque<CloudErrorKind>)>,
    /// Destinations whose creates and deletes always fail.
    broken: BTreeMap<Cidr, CloudErrorKind>,
    /// Probability that any call fails (ambiguously or with a retryable error).
    failure_rate: f64,
    rng: SmallRng,
    limit: Option<ServerRateLimit>,
    /// Routes the table may hold; `None`: no limit.
    route_limit: Option<usize>,
    /// The limit applies to each address family apart, as EC2 applies it.
    limit_per_family: bool,
    /// Destinations whose creates the pre-flight check refuses: reason and whether
    /// for good.
    refused: BTreeMap<Cidr, (&'static str, bool)>,
    /// Destinations whose create makes the cloud refuse the whole batch it is in
    /// ([`CloudErrorKind::BatchRefused`]): the rule, and whether the refusal names
    /// the change.
    poisoned: BTreeMap<Cidr, (&'static str, bool)>,
}

/// A token bucket on the "server" side: calls beyond it get `RateLimited`.
struct ServerRateLimit {
    per_second: f64,
    burst: f64,
    tokens: f64,
    at: Instant,
}

impl Default for FakeCloud {
    fn default() -> FakeCloud {
        FakeCloud::new()
    }
}

impl FakeCloud {
    /// An empty cloud with no latency, no failures and no rate limit.
    pub fn new() -> FakeCloud {
        FakeCloud::with_clock(Box::new(Instant::now))
    }

    /// An empty cloud that reads time from `clock` (virtual time in simulations).
    pub fn with_clock(clock: Clock) -> FakeCloud {
        FakeCloud {
            state: Mutex::new(State {
                routes: BTreeMap::new(),
                scripted: Vec::new(),
                broken: BTreeMap::new(),
                failure_rate: 0.0,
                rng: SmallRng::seed_from_u64(1),
                limit: None,
                route_limit: None,
                limit_per_family: false,
                refused: BTreeMap::new(),
                poisoned: BTreeMap::new(),
            }),
            counters: Counters::default(),
            latency: Mutex::new(Duration::ZERO),
            clock,
            report_node_addresses: std::sync::atomic::AtomicBool::new(false),
            batch_size: std::sync::atomic::AtomicUsize::new(0),
            applying: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// Applies up to `size` changes in one request, declared through
    /// [`Routes::batch_size`]; `None` (the default): one change a request. A batch
    /// that arrives while another is being applied is refused with
    /// [`CloudErrorKind::Conflict`], as a route table that takes one write at a time.
    pub fn set_batch_size(&self, size: Option<usize>) {
        self.batch_size
            .store(size.map_or(0, |n| n.max(1)), Ordering::Relaxed);
    }

    /// Limits the table to `limit` routes, reported by [`Routes::route_tables`] as
    /// table `fake`; a create beyond it is refused with [`CloudErrorKind::TableFull`].
    pub fn set_route_limit(&self, limit: Option<usize>) {
        self.lock().route_limit = limit;
    }

    /// Applies the route limit to each address family apart, as EC2 does, and
    /// reports the table's usage per family.
    pub fn set_limit_per_family(&self, per_family: bool) {
        self.lock().limit_per_family = per_family;
    }

    /// Makes the pre-flight check refuse creates to `destination` with `reason` (for
    /// good when `lasting`), before any call; `None` lifts it.
    pub fn refuse(&self, destination: Cidr, refusal: Option<(&'static str, bool)>) {
        let mut s = self.lock();
        match refusal {
            Some(r) => s.refused.insert(destination, r),
            None => s.refused.remove(&destination),
        };
    }

    /// Makes the cloud refuse, as a whole, any batch (or single create) with a change
    /// to `destination` (a create, or in a batch a delete), for the rule `reason`, naming the change at fault when
    /// `named` (as ARM's and Neutron's messages name the route): nothing of such a
    /// batch is applied. `None` lifts it.
    pub fn poison(&self, destination: Cidr, poison: Option<(&'static str, bool)>) {
        let mut s = self.lock();
        match poison {
            Some(p) => s.poisoned.insert(destination, p),
            None => s.poisoned.remove(&destination),
        };
    }

    /// Puts routes in the table as they are (for seeding a test).
    pub fn seed(&self, routes: impl IntoIterator<Item = Route>) {
        let mut s = self.lock();
        for r in routes {
            let cidr =
                Cidr::parse(&r.destination_cidr).expect("seeded routes need a valid destination");
            s.routes.insert(cidr, r);
        }
    }

    /// The routes in the table, by destination.
    pub fn routes(&self) -> Vec<Route> {
        self.lock().routes.values().cloned().collect()
    }

    /// The route for `destination`, if any.
    pub fn route(&self, destination: &Cidr) -> Option<Route> {
        self.lock().routes.get(destination).cloned()
    }

    /// The call counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Real time each call sleeps before answering (for the threaded runtime).
    pub fn set_latency(&self, latency: Duration) {
        *crate::sync::lock(&self.latency) = latency;
    }

    /// Whether listed routes carry `enable_node_addresses` (default false; seeded
    /// routes keep their own flag).
    pub fn set_report_node_addresses(&self, on: bool) {
        self.report_node_addresses.store(on, Ordering::Relaxed);
    }

    /// The next calls of kind `call` fail with these errors, one each, in order.
    pub fn fail_next(&self, call: Call, errors: impl IntoIterator<Item = CloudErrorKind>) {
        let mut s = self.lock();
        let errors: VecDeque<_> = errors.into_iter().collect();
        match s.scripted.iter_mut().find(|(c, _)| *c == call) {
            Some((_, q)) => q.extend(errors),
            None => s.scripted.push((call, errors)),
        }
    }

    /// Every create and delete for `destination` fails with `kind` until healed.
    pub fn break_destination(&self, destination: Cidr, kind: CloudErrorKind) {
        self.lock().broken.insert(destination, kind);
    }

    /// Stops failing calls for `destination` (see the failure injection above).
    pub fn heal_destination(&self, destination: Cidr) {
        self.lock().broken.remove(&destination);
    }

    /// Each call fails with this probability: half of the failures are ambiguous
    /// (the call took effect but the reply was lost), half are clean refusals.
    pub fn set_failure_rate(&self, rate: f64, seed: u64) {
        let mut s = self.lock();
        s.failure_rate = rate;
        s.rng = SmallRng::seed_from_u64(seed);
    }

    /// Refuse calls beyond `per_second` with a bucket of `burst`, as a provider's API
    /// rate limit does.
    pub fn set_rate_limit(&self, per_second: f64, burst: u32) {
        let now = (self.clock)();
        self.lock().limit = Some(ServerRateLimit {
            per_second,
            burst: f64::from(burst),
            tokens: f64::from(burst),
            at: now,
        });
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        crate::sync::lock(&self.state)
    }

    fn count(&self, call: Call) {
        let c = match call {
            Call::List => &self.counters.list,
            Call::Create => &self.counters.create,
            Call::Delete => &self.counters.delete,
            Call::Apply => &self.counters.apply,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    fn sleep(&self) {
        let latency = *crate::sync::lock(&self.latency);
        if !latency.is_zero() {
            std::thread::sleep(latency);
        }
    }

    /// Applies the rate limit and the injected failures that decide a call's fate
    /// before it touches the table. `Err` means the call must not take effect;
    /// `Ok(true)` means it takes effect but its reply is lost (ambiguous).
    fn admit(
        &self,
        s: &mut State,
        call: Call,
        destination: Option<&Cidr>,
    ) -> Result<bool, CloudError> {
        // Each call is one request; with a limit, its reply reports what is left, as
        // Hetzner's `RateLimit-Remaining` does.
        Meter::request();
        if let Some(limit) = &mut s.limit {
            let now = (self.clock)();
            let elapsed = now.saturating_duration_since(limit.at).as_secs_f64();
            limit.tokens = (limit.tokens + elapsed * limit.per_second).min(limit.burst);
            limit.at = now;
            if limit.tokens < 1.0 {
                self.counters.rate_limited.fetch_add(1, Ordering::Relaxed);
                let wait = Duration::from_secs_f64((1.0 - limit.tokens) / limit.per_second);
                Meter::budget(None, 0);
                Meter::throttled(wait);
                return Err(CloudError::new(
                    CloudErrorKind::RateLimited { after: wait },
                    "fake cloud: rate limit exceeded",
                ));
            }
            limit.tokens -= 1.0;
            Meter::budget(None, limit.tokens as u64);
        }
        if let Some((_, q)) = s.scripted.iter_mut().find(|(c, _)| *c == call)
            && let Some(kind) = q.pop_front()
        {
            self.counters
                .injected_failures
                .fetch_add(1, Ordering::Relaxed);
            if kind == CloudErrorKind::Ambiguous {
                return Ok(true);
            }
            return Err(CloudError::new(
                kind,
                format!("fake cloud: injected {} failure", kind.outcome()),
            ));
        }
        if let Some(kind) = destination.and_then(|d| s.broken.get(d)) {
            self.counters
                .injected_failures
                .fetch_add(1, Ordering::Relaxed);
            return Err(CloudError::new(
                *kind,
                format!("fake cloud: destination refused ({})", kind.outcome()),
            ));
        }
        if s.failure_rate > 0.0 && s.rng.random_bool(s.failure_rate) {
            self.counters
                .injected_failures
                .fetch_add(1, Ordering::Relaxed);
            if s.rng.random_bool(0.5) {
                return Ok(true);
            }
            return Err(CloudError::new(
                CloudErrorKind::Retry { after: None },
                "fake cloud: injected transient failure",
            ));
        }
        Ok(false)
    }
}

fn lost_reply() -> CloudError {
    CloudError::ambiguous("fake cloud: injected timeout; the call may have taken effect")
}

impl Routes for FakeCloud {
    fn provider_name(&self) -> &'static str {
        "fake"
    }

    /// With a rate limit set, the budget a client should spend: one token and 2 % of
    /// the rate below it (see [`Budget`]).
    fn budget(&self) -> Option<Budget> {
        let limit = self
            .lock()
            .limit
            .as_ref()
            .map(|l| (l.per_second, l.burst))?;
        let (per_second, burst) = limit;
        Some(Budget::new(
            per_second * 0.98,
            (burst as u32).saturating_sub(1),
        ))
    }

    /// The refusals set with [`FakeCloud::refuse`].
    fn preflight(&self, route: &Route, _target: &RouteTarget) -> Result<(), CloudError> {
        let Ok(cidr) = Cidr::parse(&route.destination_cidr) else {
            return Ok(());
        };
        match self.lock().refused.get(&cidr) {
            Some(&(reason, lasting)) => Err(CloudError::refused(
                reason,
                lasting,
                format!(
                    "fake cloud: route {cidr} for node {} refused before the call",
                    route.target_node
                ),
            )),
            None => Ok(()),
        }
    }

    /// Table `fake` with every route in it, when a limit is set.
    fn route_tables(&self) -> Vec<TableUsage> {
        let s = self.lock();
        let ipv6 = s.routes.keys().filter(|c| !c.is_ipv4()).count();
        let ipv4 = s.routes.len() - ipv6;
        s.route_limit
            .map(|limit| TableUsage {
                table: "fake".into(),
                routes: if s.limit_per_family {
                    ipv4.max(ipv6)
                } else {
                    s.routes.len()
                },
                limit,
                by_family: s.limit_per_family.then_some((ipv4, ipv6)),
            })
            .into_iter()
            .collect()
    }

    fn list_routes(
        &self,
        _cluster_name: &str,
        _nodes: &NodeDirectory,
    ) -> Result<Vec<Route>, CloudError> {
        self.sleep();
        self.count(Call::List);
        let mut s = self.lock();
        if self.admit(&mut s, Call::List, None)? {
            return Err(lost_reply());
        }
        let with_addresses = self.report_node_addresses.load(Ordering::Relaxed);
        Ok(s.routes
            .values()
            .map(|r| Route {
                enable_node_addresses: r.enable_node_addresses || with_addresses,
                ..r.clone()
            })
            .collect())
    }

    fn create_route(
        &self,
        cluster_name: &str,
        _name_hint: &str,
        route: &Route,
        _target: &RouteTarget,
    ) -> Result<(), CloudError> {
        self.preflight(route, _target)?;
        let cidr =
            Cidr::parse(&route.destination_cidr).map_err(|e| CloudError::invalid(e.to_string()))?;
        self.sleep();
        self.count(Call::Create);
        let mut s = self.lock();
        let lost = self.admit(&mut s, Call::Create, Some(&cidr))?;
        poisoned(
            &s,
            &[RouteChange::Create {
                route: route.clone(),
                name_hint: String::new(),
                target: _target.clone(),
            }],
        )?;
        let made = self.create_in(&mut s, cluster_name, route, cidr);
        if lost && made.is_ok() {
            return Err(lost_reply());
        }
        made
    }

    fn delete_route(&self, _cluster_name: &str, route: &Route) -> Result<(), CloudError> {
        self.sleep();
        self.count(Call::Delete);
        let cidr =
            Cidr::parse(&route.destination_cidr).map_err(|e| CloudError::invalid(e.to_string()))?;
        let mut s = self.lock();
        let lost = self.admit(&mut s, Call::Delete, Some(&cidr))?;
        let deleted = delete_in(&mut s, route, cidr);
        if lost && deleted.is_ok() {
            return Err(lost_reply());
        }
        deleted
    }

    fn batch_size(&self) -> Option<usize> {
        let size = self.batch_size.load(Ordering::Relaxed);
        (size > 0).then_some(size)
    }

    /// One request for the whole batch (one call, one token of the rate limit, one
    /// injected failure of [`Call::Apply`] for all of it), then each change as a
    /// create or delete would make it: a pre-flight refusal or a broken destination
    /// fails that change alone. A lost reply loses every change's outcome.
    fn apply_changes(
        &self,
        cluster_name: &str,
        changes: &[RouteChange],
    ) -> Result<Vec<Result<(), CloudError>>, CloudError> {
        if self.applying.fetch_add(1, Ordering::SeqCst) > 0 {
            self.applying.fetch_sub(1, Ordering::SeqCst);
            self.counters
                .concurrent_applies
                .fetch_add(1, Ordering::Relaxed);
            return Err(CloudError::new(
                CloudErrorKind::Conflict,
                "fake cloud: another batch is being applied to the table",
            ));
        }
        self.sleep();
        self.count(Call::Apply);
        let mut s = self.lock();
        let outcomes = self.admit(&mut s, Call::Apply, None).and_then(|lost| {
            poisoned(&s, changes)?;
            let outcomes: Vec<_> = changes
                .iter()
                .map(|change| self.apply_in(&mut s, cluster_name, change))
                .collect();
            Ok((lost, outcomes))
        });
        drop(s);
        self.applying.fetch_sub(1, Ordering::SeqCst);
        match outcomes? {
            (true, _) => Err(lost_reply()),
            (false, outcomes) => Ok(outcomes),
        }
    }
}

impl FakeCloud {
    /// Makes a route after the call was admitted: an identical one counts as made.
    fn create_in(
        &self,
        s: &mut State,
        cluster_name: &str,
        route: &Route,
        cidr: Cidr,
    ) -> Result<(), CloudError> {
        if let Some(existing) = s.routes.get(&cidr) {
            if existing.target_node == route.target_node && !existing.blackhole {
                return Ok(());
            }
            return Err(CloudError::new(
                CloudErrorKind::AlreadyExists,
                format!(
                    "fake cloud: a route for {cidr} already exists (to {:?})",
                    existing.target_node
                ),
            ));
        }
        let counted = if s.limit_per_family {
            s.routes
                .keys()
                .filter(|c| c.is_ipv4() == cidr.is_ipv4())
                .count()
        } else {
            s.routes.len()
        };
        if s.route_limit.is_some_and(|limit| counted >= limit) {
            self.counters.table_full.fetch_add(1, Ordering::Relaxed);
            return Err(CloudError::new(
                CloudErrorKind::TableFull,
                format!("fake cloud: the table holds its limit of routes; {cidr} refused"),
            ));
        }
        let stored = Route {
            name: format!("{cluster_name}-{}-{cidr}", route.target_node),
            target_node: route.target_node.clone(),
            target_node_addresses: route.target_node_addresses.clone(),
            destination_cidr: route.destination_cidr.clone(),
            blackhole: false,
            enable_node_addresses: false,
        };
        s.routes.insert(cidr, stored);
        Ok(())
    }

    /// One change of an admitted batch.
    fn apply_in(
        &self,
        s: &mut State,
        cluster_name: &str,
        change: &RouteChange,
    ) -> Result<(), CloudError> {
        let route = change.route();
        let cidr =
            Cidr::parse(&route.destination_cidr).map_err(|e| CloudError::invalid(e.to_string()))?;
        if let RouteChange::Create { .. } = change
            && let Some(&(reason, lasting)) = s.refused.get(&cidr)
        {
            return Err(CloudError::refused(
                reason,
                lasting,
                format!(
                    "fake cloud: route {cidr} for node {} refused before the call",
                    route.target_node
                ),
            ));
        }
        if let Some(kind) = s.broken.get(&cidr) {
            self.counters
                .injected_failures
                .fetch_add(1, Ordering::Relaxed);
            return Err(CloudError::new(
                *kind,
                format!("fake cloud: destination refused ({})", kind.outcome()),
            ));
        }
        match change {
            RouteChange::Create { .. } => self.create_in(s, cluster_name, route, cidr),
            RouteChange::Delete { .. } => delete_in(s, route, cidr),
        }
    }
}

/// Removes a route after the call was admitted, if it is there to that target.
/// The refusal of a batch with a change to a poisoned destination, naming the first
/// such change if the poison says so.
fn poisoned(s: &State, changes: &[RouteChange]) -> Result<(), CloudError> {
    let first = changes.iter().enumerate().find_map(|(i, c)| {
        let (RouteChange::Create { route, .. } | RouteChange::Delete { route }) = c;
        let cidr = Cidr::parse(&route.destination_cidr).ok()?;
        Some((i, cidr, *s.poisoned.get(&cidr)?))
    });
    match first {
        None => Ok(()),
        Some((i, cidr, (reason, named))) => Err(CloudError::batch_refused(
            reason,
            named.then_some(i),
            if named {
                format!("fake cloud: {reason}: route {cidr} is invalid; nothing was applied")
            } else {
                format!(
                    "fake cloud: {reason}: a route of the batch is invalid; nothing was applied"
                )
            },
        )),
    }
}

fn delete_in(s: &mut State, route: &Route, cidr: Cidr) -> Result<(), CloudError> {
    match s.routes.get(&cidr) {
        Some(existing) if existing.target_node == route.target_node => {
            s.routes.remove(&cidr);
            Ok(())
        }
        _ => Err(CloudError::new(
            CloudErrorKind::NotFound,
            format!("fake cloud: no route for {cidr} to {:?}", route.target_node),
        )),
    }
}

impl FakeCloud {
    /// Marks the route to `destination` as a blackhole (its target is gone), as AWS
    /// does when an instance is terminated.
    pub fn make_blackhole(&self, destination: Cidr) {
        if let Some(r) = self.lock().routes.get_mut(&destination) {
            r.blackhole = true;
            r.target_node.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::NodeAddress;

    fn target(node: &str) -> RouteTarget {
        RouteTarget {
            node_name: node.into(),
            provider_id: None,
            addresses: vec![],
        }
    }

    fn route(node: &str, cidr: &str) -> Route {
        Route {
            target_node: node.into(),
            destination_cidr: cidr.into(),
            target_node_addresses: vec![NodeAddress::internal_ip("10.0.0.1")],
            ..Route::default()
        }
    }

    #[test]
    fn create_list_delete_round_trip() {
        let cloud = FakeCloud::new();
        cloud
            .create_route("c", "uid", &route("n1", "10.1.0.0/24"), &target("n1"))
            .unwrap();
        let listed = cloud.list_routes("c", &NodeDirectory::default()).unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].name, "c-n1-10.1.0.0/24");
        cloud.delete_route("c", &listed[0]).unwrap();
        assert!(cloud.routes().is_empty());
        assert_eq!(
            cloud.delete_route("c", &listed[0]).unwrap_err().kind,
            CloudErrorKind::NotFound
        );
        assert_eq!(
            (
                cloud.counters().get(Call::Create),
                cloud.counters().get(Call::Delete)
            ),
            (1, 2)
        );
    }

    #[test]
    fn identical_create_succeeds_and_conflicting_create_reports_already_exists() {
        let cloud = FakeCloud::new();
        cloud
            .create_route("c", "u", &route("n1", "10.1.0.0/24"), &target("n1"))
            .unwrap();
        cloud
            .create_route("c", "u", &route("n1", "10.1.0.0/24"), &target("n1"))
            .unwrap();
        let err = cloud
            .create_route("c", "u", &route("n2", "10.1.0.0/24"), &target("n2"))
            .unwrap_err();
        assert_eq!(err.kind, CloudErrorKind::AlreadyExists);
    }

    #[test]
    fn scripted_ambiguous_failure_takes_effect_but_reports_an_error() {
        let cloud = FakeCloud::new();
        cloud.fail_next(Call::Create, [CloudErrorKind::Ambiguous]);
        let err = cloud
            .create_route("c", "u", &route("n1", "10.1.0.0/24"), &target("n1"))
            .unwrap_err();
        assert_eq!(err.kind, CloudErrorKind::Ambiguous);
        assert_eq!(cloud.routes().len(), 1);
    }

    #[test]
    fn server_rate_limit_refuses_beyond_the_burst() {
        let cloud = FakeCloud::new();
        cloud.set_rate_limit(0.001, 2);
        let dir = NodeDirectory::default();
        assert!(cloud.list_routes("c", &dir).is_ok());
        assert!(cloud.list_routes("c", &dir).is_ok());
        let err = cloud.list_routes("c", &dir).unwrap_err();
        assert!(matches!(err.kind, CloudErrorKind::RateLimited { .. }));
        assert_eq!(cloud.counters().rate_limited.load(Ordering::Relaxed), 1);
    }
}
