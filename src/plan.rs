//! The route planner: a pure function from nodes, cloud routes and cluster CIDRs to the
//! routes to delete, the routes to create and the node conditions to write.
//!
//! It holds the semantics of upstream's `reconcile` (k8s.io/cloud-provider
//! `controllers/route`, v1.36) with two deliberate differences: CIDRs compare as parsed
//! networks instead of strings, and node addresses compare as sets. It does no IO and
//! knows nothing about time, retries or what is in flight; the controller does.

use std::cell::Cell;
use std::collections::HashMap;
use std::fmt;

use crate::model::{Cidr, Condition, Node, NodeAddress, Route, same_address_set};

/// What the planner reads of a node: a [`Node`] as decoded, or the controller's
/// compact copy of one (which keeps its strings in one allocation).
pub trait NodeFacts {
    /// `metadata.name`.
    fn name(&self) -> &str;
    /// `metadata.uid`, the name hint of its routes.
    fn uid(&self) -> &str;
    /// `spec.providerID`.
    fn provider_id(&self) -> Option<&str>;
    /// `spec.podCIDRs` as written, in order.
    fn pod_cidr_texts(&self) -> impl Iterator<Item = &str> + Clone;
    /// `spec.podCIDRs` in order, each the network it parses to or what is wrong with
    /// its text.
    fn pod_cidrs(&self) -> impl Iterator<Item = Result<Cidr, &'static str>> + Clone;
    /// `status.addresses` as (type, address), in the order the kubelet reported them.
    fn addresses(&self) -> impl Iterator<Item = (&str, &str)> + Clone;
    /// `NetworkUnavailable`, if the node has it.
    fn network_unavailable(&self) -> Option<Condition>;
    /// The name's bytes, for ordering and finding nodes by name: UTF-8's byte order is
    /// `str`'s, and a compact node hands them over without checking them as text again
    /// (the planner compares names a dozen times a node and pass).
    fn name_bytes(&self) -> &[u8] {
        self.name().as_bytes()
    }
}

impl NodeFacts for Node {
    fn name(&self) -> &str {
        &self.name
    }

    fn uid(&self) -> &str {
        &self.uid
    }

    fn provider_id(&self) -> Option<&str> {
        self.provider_id.as_deref()
    }

    fn pod_cidr_texts(&self) -> impl Iterator<Item = &str> + Clone {
        self.pod_cidrs.iter().map(String::as_str)
    }

    /// Parsed on every call: a decoded node is planned once (`route-controller plan`);
    /// the controller's own nodes keep theirs parsed.
    fn pod_cidrs(&self) -> impl Iterator<Item = Result<Cidr, &'static str>> + Clone {
        self.pod_cidrs
            .iter()
            .map(|t| Cidr::parse(t).map_err(|e| e.problem))
    }

    fn addresses(&self) -> impl Iterator<Item = (&str, &str)> + Clone {
        self.addresses
            .iter()
            .map(|a| (&*a.kind, a.address.as_str()))
    }

    fn network_unavailable(&self) -> Option<Condition> {
        self.network_unavailable.clone()
    }
}

/// Reason and message written when every pod CIDR of a node has its route.
pub const ROUTE_CREATED: (&str, &str) = ("RouteCreated", "RouteController created a route");
/// Reason and message written when a node lacks a route.
pub const NO_ROUTE_CREATED: (&str, &str) =
    ("NoRouteCreated", "RouteController failed to create a route");

/// What the planner reads of a cloud route: a [`Route`] as listed, or the controller's
/// compact copy of one (its strings in one allocation, its destination parsed once).
pub trait RouteFacts {
    /// The provider's name for the route.
    fn name(&self) -> &str;
    /// The node the route points at; empty for none.
    fn target_node(&self) -> &str;
    /// The destination as the provider reports it.
    fn destination_text(&self) -> &str;
    /// The destination, parsed; the error says what is wrong with the text.
    fn destination(&self) -> Result<Cidr, crate::model::CidrError>;
    /// The provider reports that the route's target is gone.
    fn blackhole(&self) -> bool;
    /// The route's addresses count ([`Route::enable_node_addresses`]).
    fn enable_node_addresses(&self) -> bool;
    /// The node addresses the route points at, as (type, address).
    fn target_node_addresses(&self) -> impl Iterator<Item = (&str, &str)> + Clone;
    /// The route as a [`Route`] again, for a delete or a report.
    fn to_route(&self) -> Route;
    /// The target node's bytes, for ordering routes by node (as [`NodeFacts::name_bytes`]).
    fn target_node_bytes(&self) -> &[u8] {
        self.target_node().as_bytes()
    }
}

impl RouteFacts for Route {
    fn name(&self) -> &str {
        &self.name
    }

    fn target_node(&self) -> &str {
        &self.target_node
    }

    fn destination_text(&self) -> &str {
        &self.destination_cidr
    }

    fn destination(&self) -> Result<Cidr, crate::model::CidrError> {
        Cidr::parse(&self.destination_cidr)
    }

    fn blackhole(&self) -> bool {
        self.blackhole
    }

    fn enable_node_addresses(&self) -> bool {
        self.enable_node_addresses
    }

    fn target_node_addresses(&self) -> impl Iterator<Item = (&str, &str)> + Clone {
        self.target_node_addresses
            .iter()
            .map(|a| (&*a.kind, a.address.as_str()))
    }

    fn to_route(&self) -> Route {
        self.clone()
    }
}

/// What one reconcile pass should do. It borrows the names of the nodes it was
/// planned from (`'a`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan<'a> {
    /// Routes to delete, in the order the cloud listed them.
    pub deletes: Vec<Delete>,
    /// Routes to create, in node order, then pod-CIDR order.
    pub creates: Vec<Create>,
    /// Every node whose `NetworkUnavailable` condition the controller is responsible
    /// for, in node order.
    pub nodes: Vec<NodeRouting<'a>>,
    /// Pod CIDRs already routed correctly.
    pub kept: usize,
    /// Input the planner had to pass over: invalid pod CIDRs, unparsable routes.
    pub problems: Vec<Problem>,
    /// Routes to nodes that exist but are not routed here (see [`UnroutedNodes`]),
    /// left alone, in list order.
    pub unselected: Vec<Route>,
}

/// The nodes that exist but that this controller does not route (unselected by the
/// node filter: `--node-selector`, another provider's providerID), and what becomes of
/// their routes: left alone by default; deleted like a gone node's with
/// `delete_routes`.
#[derive(Clone, Copy)]
pub struct UnroutedNodes<'a> {
    /// Whether the node of this name is one of them.
    pub contains: &'a dyn Fn(&str) -> bool,
    /// Delete their routes (`--delete-routes-of-unselected-nodes`).
    pub delete_routes: bool,
}

impl UnroutedNodes<'_> {
    /// No such node: every node is routed or gone.
    pub fn none() -> UnroutedNodes<'static> {
        UnroutedNodes {
            contains: &|_| false,
            delete_routes: false,
        }
    }
}

/// A route to delete and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delete {
    /// The route to delete, as listed.
    pub route: Route,
    /// Its destination, parsed.
    pub cidr: Cidr,
    /// Why it goes.
    pub reason: DeleteReason,
}

/// Why a route is deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeleteReason {
    /// The provider reports the route's target as gone.
    Blackhole,
    /// The route has no target node.
    NoTarget,
    /// The target node does not exist.
    NodeGone,
    /// The target node exists but has no pod CIDRs.
    NodeHasNoPodCidrs,
    /// The target node exists but this CIDR is not among its pod CIDRs.
    CidrNotAssigned,
    /// The route points at addresses the node no longer has; it is recreated.
    AddressesChanged,
    /// The target node exists but is not routed here, and the controller deletes
    /// such nodes' routes (`--delete-routes-of-unselected-nodes`).
    NodeUnselected,
}

impl DeleteReason {
    /// The reason as logs and `plan` print it.
    pub fn as_str(&self) -> &'static str {
        match self {
            DeleteReason::Blackhole => "blackhole",
            DeleteReason::NoTarget => "no target node",
            DeleteReason::NodeGone => "node gone",
            DeleteReason::NodeHasNoPodCidrs => "node has no pod CIDRs",
            DeleteReason::CidrNotAssigned => "CIDR not assigned to the node",
            DeleteReason::AddressesChanged => "node addresses changed",
            DeleteReason::NodeUnselected => "node not selected",
        }
    }
}

impl fmt::Display for DeleteReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A route to create: which node and pod CIDR. It is small on purpose: thousands of
/// them can wait behind a cloud's rate limit, and the request is built from the node
/// as it is when the route is created ([`Create::request`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Create {
    /// The node the route points at.
    pub node: String,
    /// The destination: one of the node's pod CIDRs.
    pub cidr: Cidr,
    /// True when an existing route to old addresses is deleted first (upstream's
    /// "update" action).
    pub replaces: bool,
}

impl Create {
    /// The request for the cloud, as upstream builds it: the route to the node with
    /// the node's addresses and the pod CIDR, the node UID as name hint.
    pub fn request(&self, node: &impl NodeFacts) -> CreateRequest {
        CreateRequest {
            route: Route {
                target_node: node.name().to_string(),
                target_node_addresses: node
                    .addresses()
                    .map(|(kind, address)| NodeAddress::new(kind, address))
                    .collect(),
                destination_cidr: self.cidr.to_string(),
                ..Route::default()
            },
            cidr: self.cidr,
            name_hint: node.uid().to_string(),
            provider_id: node.provider_id().map(str::to_string),
            replaces: self.replaces,
        }
    }
}

/// A route creation as the cloud gets it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreateRequest {
    /// Target node, node addresses and destination; name empty, flags false.
    pub route: Route,
    /// The destination, parsed.
    pub cidr: Cidr,
    /// The node UID, passed to the provider as the name hint.
    pub name_hint: String,
    /// The node's `spec.providerID`, for the provider to find its server or instance.
    pub provider_id: Option<String>,
    /// Whether it replaces a route deleted first (address change).
    pub replaces: bool,
}

/// A node the controller writes `NetworkUnavailable` for, and whether it can be
/// routed at all. Small on purpose: a pass plans one for every node (50 000 of them
/// at once in a large cluster).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeRouting<'a> {
    /// The node's name.
    pub node: &'a str,
    /// The node has pod CIDRs and all of them are valid; if false the node gets
    /// `NetworkUnavailable=True` whatever happens to the creates.
    pub routable: bool,
    /// Creates planned for this node; the node is fully routed once they succeed.
    pub creates: usize,
    /// What the node's condition shows now, for the skip rule: `Some(true)` the
    /// controller's "routes created" (`False`, `RouteCreated`), `Some(false)` its "no
    /// route" (`True`, `NoRouteCreated`), `None` anything else or no condition.
    pub shows_routed: Option<bool>,
}

impl NodeRouting<'_> {
    /// The condition to write once the node's creates are done, `None` when the node
    /// already shows it (upstream's reason-aware skip rule).
    pub fn condition_write(&self, creates_failed: bool) -> Option<Condition> {
        let routed = self.routable && !creates_failed;
        if self.shows_routed == Some(routed) {
            return None;
        }
        network_condition(routed, None)
    }
}

/// What `current` shows, in [`NodeRouting::shows_routed`]'s terms.
fn shows_routed(current: Option<&Condition>) -> Option<bool> {
    [true, false]
        .into_iter()
        .find(|&routed| network_condition(routed, current).is_none())
}

/// Input the planner could not use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    /// A node's pod CIDR does not parse; that CIDR gets no route.
    InvalidPodCidr {
        /// The node.
        node: String,
        /// The pod CIDR as written.
        cidr: String,
        /// Why it does not parse.
        error: String,
    },
    /// A cloud route's destination does not parse; it is never deleted.
    UnparsableRoute {
        /// The route's name.
        route: String,
        /// Its destination as listed.
        destination: String,
        /// Why it does not parse.
        error: String,
    },
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::InvalidPodCidr { node, cidr, error } => {
                write!(
                    f,
                    "node {node}: pod CIDR {cidr:?} is invalid ({error}); it gets no route"
                )
            }
            Problem::UnparsableRoute {
                route,
                destination,
                error,
            } => write!(
                f,
                "cloud route {route:?}: destination {destination:?} does not parse ({error}); it is left alone"
            ),
        }
    }
}

/// Plans one pass. `nodes` in the order their creates and conditions should be
/// listed; `routes` as the cloud listed them.
pub fn plan<'a>(
    nodes: impl IntoIterator<Item = &'a Node>,
    routes: &[Route],
    cluster_cidrs: &[Cidr],
) -> Plan<'a> {
    plan_with_unrouted(nodes, routes, cluster_cidrs, UnroutedNodes::none())
}

/// [`plan`] for a cluster with nodes that exist but are not routed here: `nodes` are
/// the routed ones, `unrouted` the others.
///
/// What a pass holds while it plans is a few bytes a node and route: the nodes'
/// references (by name, sorted only when they do not come sorted), the routes'
/// positions by target node, and a [`NodeRouting`] a node. Nothing of a node is
/// copied; a sort's scratch is positions (4 bytes each) and, for the routes, a
/// reference to each target's name (24 bytes a route, while sorting), never nodes or
/// routes.
pub fn plan_with_unrouted<'a, N: NodeFacts + 'a, R: RouteFacts>(
    nodes: impl IntoIterator<Item = &'a N>,
    routes: &[R],
    cluster_cidrs: &[Cidr],
    unrouted: UnroutedNodes<'_>,
) -> Plan<'a> {
    let mut plan = Plan::default();

    // Step 1: the routes by target node. (What cannot be parsed is found in step 3,
    // which parses every route anyway, and reported first.)
    let routes_by_node = RoutesByNode::new(routes);

    // Step 2: an action per node and pod CIDR.
    let nodes = NodesByName::new(nodes.into_iter().collect());
    plan.nodes.reserve(nodes.len());
    // A node's pod CIDRs, parsed once for all the questions below (a plain `Node`
    // parses its strings each time it is asked).
    let mut pod_cidrs = Vec::new();
    for &node in nodes.in_order() {
        let mut creates = 0;
        let mut valid = true;
        pod_cidrs.clear();
        pod_cidrs.extend(node.pod_cidrs());
        for (k, &entry) in pod_cidrs.iter().enumerate() {
            let cidr = match entry {
                Ok(c) => c,
                Err(problem) => {
                    valid = false;
                    let text = node.pod_cidr_texts().nth(k).unwrap_or_default();
                    plan.problems.push(Problem::InvalidPodCidr {
                        node: node.name().to_string(),
                        cidr: text.to_string(),
                        error: problem.to_string(),
                    });
                    continue;
                }
            };
            if pod_cidrs[..k].contains(&Ok(cidr)) {
                continue; // a duplicated pod CIDR is one route
            }
            let action = routes_by_node.action(node, cidr, None);
            if action == Action::Keep {
                plan.kept += 1;
                continue;
            }
            creates += 1;
            plan.creates.push(Create {
                node: node.name().to_string(),
                cidr,
                replaces: action == Action::Update,
            });
        }
        let has_cidrs = !pod_cidrs.is_empty();
        // Upstream writes the condition for nodes with pod CIDRs and for nodes some
        // cloud route targets; it leaves every other node alone.
        if has_cidrs || !routes_by_node.of_node(node.name()).is_empty() {
            plan.nodes.push(NodeRouting {
                node: node.name(),
                routable: valid && has_cidrs,
                creates,
                shows_routed: shows_routed(node.network_unavailable().as_ref()),
            });
        }
    }

    // Step 3: deletions, in list order, only inside the cluster CIDRs.
    let mut unparsable = Vec::new();
    for (at, route) in routes.iter().enumerate() {
        let cidr = match route.destination() {
            Ok(cidr) => cidr,
            Err(e) => {
                unparsable.push(Problem::UnparsableRoute {
                    route: route.name().to_string(),
                    destination: route.destination_text().to_string(),
                    error: e.problem.to_string(),
                });
                continue;
            }
        };
        if !is_responsible(&cidr, cluster_cidrs) {
            continue;
        }
        let reason = if route.blackhole() {
            Some(DeleteReason::Blackhole)
        } else if route.target_node().is_empty() {
            Some(DeleteReason::NoTarget)
        } else {
            match nodes.last_named(route.target_node()) {
                None if (unrouted.contains)(route.target_node()) => {
                    if unrouted.delete_routes {
                        Some(DeleteReason::NodeUnselected)
                    } else {
                        plan.unselected.push(route.to_route());
                        None
                    }
                }
                None => Some(DeleteReason::NodeGone),
                Some(node) => {
                    // One look at the node's pod CIDRs: any valid one, and this one.
                    let (any_valid, has_this) =
                        node.pod_cidrs().fold((false, false), |(v, h), c| {
                            (v || c.is_ok(), h || c == Ok(cidr))
                        });
                    if !any_valid {
                        Some(DeleteReason::NodeHasNoPodCidrs)
                    } else if !has_this {
                        Some(DeleteReason::CidrNotAssigned)
                    } else {
                        // The node keeps this CIDR: the action planned for it (from
                        // the first route to the node with this destination) says
                        // whether this route stays.
                        match routes_by_node.action(node, cidr, Some(position(at))) {
                            Action::Update => Some(DeleteReason::AddressesChanged),
                            Action::Add | Action::Keep => None,
                        }
                    }
                }
            }
        };
        if let Some(reason) = reason {
            plan.deletes.push(Delete {
                route: route.to_route(),
                cidr,
                reason,
            });
        }
    }
    plan.problems.splice(0..0, unparsable);
    plan
}

/// The nodes given to the planner, found by name. The controller gives them sorted
/// (its view is), so usually no index is built.
struct NodesByName<'a, N> {
    /// In the order given.
    nodes: Vec<&'a N>,
    /// Positions in `nodes` sorted by name (then position), when `nodes` is not
    /// sorted by name.
    index: Option<Vec<u32>>,
}

impl<'a, N: NodeFacts> NodesByName<'a, N> {
    fn new(nodes: Vec<&'a N>) -> NodesByName<'a, N> {
        let sorted = nodes.is_sorted_by(|a, b| a.name_bytes() <= b.name_bytes());
        let index = (!sorted).then(|| {
            let mut index: Vec<u32> = (0..position(nodes.len())).collect();
            // Stable, so the order among nodes of one name is the order given. Its
            // scratch is at most one position a node, and it takes a third fewer
            // instructions than the unstable sort with the position as tie-breaker
            // (benches/planner-instructions.sh).
            index.sort_by(|&a, &b| {
                nodes[a as usize]
                    .name_bytes()
                    .cmp(nodes[b as usize].name_bytes())
            });
            index
        });
        NodesByName { nodes, index }
    }

    fn len(&self) -> usize {
        self.nodes.len()
    }

    fn in_order(&self) -> &[&'a N] {
        &self.nodes
    }

    /// The last node given of this name (several of one name: the last counts).
    fn last_named(&self, name: &str) -> Option<&'a N> {
        let node = |i: usize| match &self.index {
            Some(index) => self.nodes[index[i] as usize],
            None => self.nodes[i],
        };
        let name = name.as_bytes();
        let end = partition_point(self.nodes.len(), |i| node(i).name_bytes() <= name);
        let last = node(end.checked_sub(1)?);
        (last.name_bytes() == name).then_some(last)
    }
}

/// The first `i` in `0..len` for which `before(i)` is false (it is true for a prefix).
fn partition_point(len: usize, before: impl Fn(usize) -> bool) -> usize {
    let (mut low, mut high) = (0, len);
    while low < high {
        let mid = low + (high - low) / 2;
        if before(mid) {
            low = mid + 1;
        } else {
            high = mid;
        }
    }
    low
}

/// The listed routes that have a target node, by node: positions in the list,
/// sorted by target node and then position (list order among one node's routes).
struct RoutesByNode<'r, R> {
    routes: &'r [R],
    positions: Vec<u32>,
    /// Where the last node's routes ended: the planner asks for the nodes in name
    /// order, so the next node's routes usually start here, and two comparisons
    /// confirm it where a search takes a dozen.
    next: Cell<usize>,
}

impl<'r, R: RouteFacts> RoutesByNode<'r, R> {
    fn new(routes: &'r [R]) -> RoutesByNode<'r, R> {
        let mut positions: Vec<u32> = (0..position(routes.len()))
            .filter(|&i| !routes[i as usize].target_node().is_empty())
            .collect();
        let target = |i: u32| routes[i as usize].target_node_bytes();
        if !positions.is_sorted_by(|&a, &b| target(a) <= target(b)) {
            // Stable: list order among one node's routes (see the nodes' index). Each
            // target decoded once, not at every comparison (a compact route decodes
            // its fields to find its target).
            positions.sort_by_cached_key(|&i| target(i));
        }
        RoutesByNode {
            routes,
            positions,
            next: Cell::new(0),
        }
    }

    /// The positions of the routes to `node`, in list order.
    fn of_node(&self, node: &str) -> &[u32] {
        let node = node.as_bytes();
        let target = |i: u32| self.routes[i as usize].target_node_bytes();
        let p = &self.positions;
        let hint = self.next.get().min(p.len());
        // The first position whose target is not before `node`: the hint if the one
        // before it is before `node` and it is not, else searched.
        let starts_at_hint = (hint == 0 || target(p[hint - 1]) < node)
            && p.get(hint).is_none_or(|&i| target(i) >= node);
        let start = if starts_at_hint {
            hint
        } else {
            p.partition_point(|&i| target(i) < node)
        };
        // A node has one or two routes: walking them beats a second search.
        let len = p[start..]
            .iter()
            .take_while(|&&i| target(i) == node)
            .count();
        self.next.set(start + len);
        &p[start..start + len]
    }

    /// What the plan does for `node`'s pod CIDR `cidr`, from the first route to the
    /// node with that destination. `at`: the position of a route to the node with that
    /// destination, known to the caller; no route after it needs to be parsed.
    fn action(&self, node: &impl NodeFacts, cidr: Cidr, at: Option<u32>) -> Action {
        let existing = self
            .of_node(node.name())
            .iter()
            .find(|&&i| Some(i) == at || self.routes[i as usize].destination().ok() == Some(cidr))
            .map(|&i| &self.routes[i as usize]);
        match existing {
            None => Action::Add,
            Some(r) if !r.enable_node_addresses() => Action::Keep,
            Some(r) if same_address_set(node.addresses(), r.target_node_addresses()) => {
                Action::Keep
            }
            Some(_) => Action::Update,
        }
    }
}

/// A position in a list the planner indexes: no cluster has four billion nodes or
/// routes.
fn position(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Action {
    Add,
    Keep,
    Update,
}

/// Whether the controller may delete a route to `destination`: its first or last
/// address lies inside one of the cluster CIDRs (upstream's `isResponsibleForRoute`).
pub fn is_responsible(destination: &Cidr, cluster_cidrs: &[Cidr]) -> bool {
    cluster_cidrs
        .iter()
        .any(|cc| cc.contains(destination.network()) || cc.contains(destination.last()))
}

/// The `NetworkUnavailable` condition to write, or `None` when the node already
/// carries the controller's own value (status and reason both match).
pub fn network_condition(routes_created: bool, current: Option<&Condition>) -> Option<Condition> {
    let (status, (reason, message)) = if routes_created {
        ("False", ROUTE_CREATED)
    } else {
        ("True", NO_ROUTE_CREATED)
    };
    if let Some(c) = current
        && c.status == status
        && c.reason == reason
    {
        return None;
    }
    Some(Condition {
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
    })
}

/// `NetworkUnavailable=True` with a reason of its own (a full route table, a failed
/// pre-flight check) and a message naming the fix; `None` when the node already shows
/// that status and reason (the same skip rule).
pub fn network_condition_because(
    reason: &str,
    message: &str,
    current: Option<&Condition>,
) -> Option<Condition> {
    if let Some(c) = current
        && c.status == "True"
        && c.reason == reason
    {
        return None;
    }
    Some(Condition::new("True", reason, message))
}

/// The create requests of a plan, in plan order, built from `nodes` (the nodes the
/// plan was made from).
pub fn requests<'a, N: NodeFacts + 'a>(
    plan: &Plan<'_>,
    nodes: impl IntoIterator<Item = &'a N>,
) -> Vec<CreateRequest> {
    let by_name: HashMap<&str, &N> = nodes.into_iter().map(|n| (n.name(), n)).collect();
    plan.creates
        .iter()
        .filter_map(|c| by_name.get(c.node.as_str()).map(|n| c.request(*n)))
        .collect()
}

/// The conditions a pass writes if every create and delete succeeds, in node order,
/// without those the skip rule skips. This is what `route-controller plan` prints.
pub fn conditions_on_success<'p, 'a>(plan: &'p Plan<'a>) -> Vec<(&'p NodeRouting<'a>, Condition)> {
    plan.nodes
        .iter()
        .filter_map(|n| n.condition_write(false).map(|c| (n, c)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::NodeAddress;

    fn cidrs(list: &[&str]) -> Vec<Cidr> {
        list.iter().map(|c| Cidr::parse(c).unwrap()).collect()
    }

    fn node(name: &str, pod_cidrs: &[&str], ip: &str) -> Node {
        Node {
            name: name.into(),
            uid: format!("uid-{name}"),
            pod_cidrs: pod_cidrs.iter().map(|s| s.to_string()).collect(),
            addresses: vec![NodeAddress::internal_ip(ip)],
            ..Node::default()
        }
    }

    fn route(name: &str, target: &str, cidr: &str) -> Route {
        Route {
            name: name.into(),
            target_node: target.into(),
            destination_cidr: cidr.into(),
            ..Route::default()
        }
    }

    /// Guards the walk of the routes by node (each node's routes start where the last
    /// node's ended, when the nodes come in name order): nodes in any order, one without
    /// routes between two with, one whose route is its only trace, each find their own
    /// routes, and the plan is the same as for the nodes sorted.
    #[test]
    fn each_node_finds_its_routes_whatever_the_order() {
        let cluster = cidrs(&["10.0.0.0/16"]);
        let nodes = [
            node("c", &["10.0.3.0/24"], "192.168.0.3"),
            node("a", &["10.0.1.0/24"], "192.168.0.1"),
            node("b", &["10.0.2.0/24"], "192.168.0.2"),
            node("d", &[], "192.168.0.4"),
        ];
        let routes = [
            route("r-c", "c", "10.0.3.0/24"),
            route("r-d", "d", "10.0.4.0/24"),
            route("r-a", "a", "10.0.1.0/24"),
        ];
        let mut sorted = nodes.to_vec();
        sorted.sort_by(|x, y| x.name.cmp(&y.name));
        for given in [&nodes[..], &sorted[..]] {
            let p = plan(given, &routes, &cluster);
            let created: Vec<&str> = p.creates.iter().map(|c| c.node.as_str()).collect();
            let deleted: Vec<&str> = p.deletes.iter().map(|d| d.route.name.as_str()).collect();
            assert_eq!((created, deleted, p.kept), (vec!["b"], vec!["r-d"], 2));
            let routed: Vec<&str> = p.nodes.iter().map(|n| n.node).collect();
            assert_eq!(
                routed.len(),
                4,
                "d has a route, so its condition is written"
            );
        }
    }

    #[test]
    fn non_canonical_route_destination_is_kept_not_churned() {
        let nodes = [node("n1", &["fd00:1::/64"], "10.0.0.1")];
        let routes = [route("r", "n1", "fd00:1:0::/64")];
        let p = plan(&nodes[..], &routes, &cidrs(&["fd00::/48"]));
        assert!(p.deletes.is_empty() && p.creates.is_empty(), "{p:?}");
        assert_eq!(p.kept, 1);
    }

    #[test]
    fn invalid_pod_cidr_is_reported_and_other_nodes_are_planned() {
        let nodes = [
            node("bad", &["10.0.0.0/33"], "10.1.0.1"),
            node("good", &["10.0.1.0/24"], "10.1.0.2"),
        ];
        let p = plan(&nodes[..], &[], &cidrs(&["10.0.0.0/16"]));
        assert_eq!(p.creates.len(), 1);
        assert_eq!(p.creates[0].node, "good");
        assert!(matches!(&p.problems[0], Problem::InvalidPodCidr { node, .. } if node == "bad"));
        let bad = &p.nodes[0];
        assert!(!bad.routable);
        assert_eq!(bad.condition_write(false).unwrap().status, "True");
    }

    #[test]
    fn unparsable_route_is_never_deleted() {
        let routes = [route("weird", "", "not-a-cidr")];
        let p = plan(&[] as &[Node], &routes, &cidrs(&["0.0.0.0/0"]));
        assert!(p.deletes.is_empty());
        assert_eq!(p.problems.len(), 1);
    }

    #[test]
    fn route_partially_overlapping_the_cluster_cidr_counts_as_ours() {
        // First address outside, last address inside.
        let cc = cidrs(&["10.244.0.0/16"]);
        assert!(is_responsible(&Cidr::parse("10.244.0.0/15").unwrap(), &cc));
        // Larger than the cluster CIDR on both sides: not ours.
        assert!(!is_responsible(&Cidr::parse("10.0.0.0/8").unwrap(), &cc));
    }

    /// Kills (cargo-mutants): the `same_addresses` guard replaced by false (every
    /// address-carrying route churned), and `replaces` inverted.
    #[test]
    fn a_route_carrying_node_addresses_is_kept_while_they_match_and_replaced_when_they_change() {
        let mut r = route("r", "n1", "10.0.1.0/24");
        r.enable_node_addresses = true;
        r.target_node_addresses = vec![NodeAddress::internal_ip("10.1.0.1")];
        let cc = cidrs(&["10.0.0.0/16"]);
        let n1 = [node("n1", &["10.0.1.0/24"], "10.1.0.1")];
        let same = plan(&n1, &[r.clone()], &cc);
        assert!(
            same.deletes.is_empty() && same.creates.is_empty(),
            "{same:?}"
        );
        assert_eq!(same.kept, 1);
        let n1_moved = [node("n1", &["10.0.1.0/24"], "10.1.0.9")];
        let moved = plan(&n1_moved, &[r], &cc);
        assert_eq!(moved.deletes.len(), 1, "{moved:?}");
        assert_eq!(moved.deletes[0].reason, DeleteReason::AddressesChanged);
        assert_eq!(moved.creates.len(), 1);
        assert!(moved.creates[0].replaces, "{moved:?}");
    }

    /// Kills (cargo-mutants): the `a.is_empty()` guard replaced by false (the reason
    /// would read "CIDR not assigned to the node").
    #[test]
    fn a_route_to_a_node_without_pod_cidrs_is_deleted_for_that_reason() {
        let n1 = [node("n1", &[], "10.1.0.1")];
        let p = plan(
            &n1,
            &[route("r", "n1", "10.0.1.0/24")],
            &cidrs(&["10.0.0.0/16"]),
        );
        assert_eq!(p.deletes.len(), 1);
        assert_eq!(p.deletes[0].reason, DeleteReason::NodeHasNoPodCidrs);
        assert!(p.creates.is_empty() && p.nodes.len() == 1, "{p:?}");
    }

    /// A random cluster: nodes with unique names (some without pod CIDRs, some with an
    /// invalid one or a duplicate), and routes with unique (target, destination) to
    /// nodes, to unknown names, to nobody, outside the cluster CIDR, unparsable, as
    /// blackholes, and carrying addresses.
    fn random_cluster(seed: &mut u64) -> (Vec<Node>, Vec<Route>) {
        let mut next = |n: usize| {
            *seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (*seed >> 33) as usize % n
        };
        let cidr = |k: usize| match k {
            0 => "bogus".to_string(),
            1 => "192.168.0.0/24".to_string(),
            _ => format!("10.0.{k}.0/24"),
        };
        let mut nodes = Vec::new();
        for i in 0..next(12) {
            let cidrs: Vec<String> = (0..next(3)).map(|_| cidr(next(12))).collect();
            let cidrs: Vec<&str> = cidrs.iter().map(String::as_str).collect();
            let ip = format!("10.1.0.{}", next(3));
            nodes.push(node(&format!("n{i}"), &cidrs, &ip));
        }
        let mut routes: Vec<Route> = Vec::new();
        for k in 0..next(20) {
            let target = match next(5) {
                0 => String::new(),
                1 => format!("gone{}", next(3)),
                _ => format!("n{}", next(12)),
            };
            let mut r = route(&format!("r{k}"), &target, &cidr(next(12)));
            r.blackhole = next(8) == 0;
            if next(3) == 0 {
                r.enable_node_addresses = true;
                r.target_node_addresses =
                    vec![NodeAddress::internal_ip(&format!("10.1.0.{}", next(3)))];
            }
            let dup = routes.iter().any(|o| {
                o.target_node == r.target_node && o.destination_cidr == r.destination_cidr
            });
            if !dup {
                routes.push(r);
            }
        }
        (nodes, routes)
    }

    fn shuffled<T: Clone>(items: &[T], seed: &mut u64) -> Vec<T> {
        let mut out = items.to_vec();
        for i in (1..out.len()).rev() {
            *seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            out.swap(i, (*seed >> 33) as usize % (i + 1));
        }
        out
    }

    fn sorted<T: fmt::Debug>(items: &[T]) -> Vec<String> {
        let mut out: Vec<String> = items.iter().map(|x| format!("{x:?}")).collect();
        out.sort();
        out
    }

    /// Guards the planner's lookups: nodes given in name order (the controller's, no
    /// index) and shuffled (an index), routes listed in any order (sorted by target or
    /// not), plan the same deletes, creates, conditions and problems. Looking nodes up
    /// without the index fails the shuffled nodes; looking routes up in list order
    /// fails the shuffled routes.
    #[test]
    fn the_order_of_nodes_and_routes_changes_nothing_but_order() {
        let cc = cidrs(&["10.0.0.0/16"]);
        let mut seed = 11u64;
        for round in 0..500 {
            let (nodes, routes) = random_cluster(&mut seed);
            let base = plan(&nodes, &routes, &cc);
            let other_nodes = shuffled(&nodes, &mut seed);
            let other_routes = shuffled(&routes, &mut seed);
            for (n, r) in [(&other_nodes, &routes), (&nodes, &other_routes)] {
                let p = plan(n, r, &cc);
                assert_eq!(sorted(&p.deletes), sorted(&base.deletes), "round {round}");
                assert_eq!(sorted(&p.creates), sorted(&base.creates), "round {round}");
                assert_eq!(sorted(&p.nodes), sorted(&base.nodes), "round {round}");
                assert_eq!(sorted(&p.problems), sorted(&base.problems), "round {round}");
                assert_eq!(sorted(&p.unselected), sorted(&base.unselected));
                assert_eq!(p.kept, base.kept, "round {round}");
            }
            let p = plan(&nodes, &routes, &cc);
            assert_eq!(p.deletes, base.deletes, "deletes in list order");
        }
    }

    /// Guards "the last node given of a name counts": with two nodes of one name, the
    /// routes to it are judged by the second, sorted or not.
    #[test]
    fn of_two_nodes_of_one_name_the_last_given_counts() {
        let cc = cidrs(&["10.0.0.0/16"]);
        let routes = [route("r", "a", "10.0.1.0/24")];
        for first in ["a", "b", "c"] {
            let nodes = [
                node(first, &[], "10.1.0.1"),
                node("a", &["10.0.2.0/24"], "10.1.0.1"),
                node("a", &["10.0.1.0/24"], "10.1.0.1"),
            ];
            let p = plan(&nodes, &routes, &cc);
            assert!(p.deletes.is_empty(), "{first}: {p:?}");
            let nodes = [
                node(first, &[], "10.1.0.1"),
                node("a", &["10.0.1.0/24"], "10.1.0.1"),
                node("a", &["10.0.2.0/24"], "10.1.0.1"),
            ];
            let p = plan(&nodes, &routes, &cc);
            assert_eq!(p.deletes.len(), 1, "{first}: {p:?}");
            assert_eq!(p.deletes[0].reason, DeleteReason::CidrNotAssigned);
        }
    }

    #[test]
    fn node_without_pod_cidr_gets_no_route_and_no_condition() {
        let n = [node("n", &[], "10.0.0.1")];
        let p = plan(&n, &[], &cidrs(&["10.0.0.0/8"]));
        assert!(p.creates.is_empty() && p.nodes.is_empty());
    }
}
