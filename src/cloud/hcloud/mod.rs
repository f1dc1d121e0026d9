//! The Hetzner Cloud provider: the routes of one private network, each sending a pod
//! CIDR to the private IP of a node's server.
//!
//! - **List**: `GET /networks/{id}` for the routes, plus the server list (cached for
//!   a few seconds) to map each gateway IP to its server and the server to its node,
//!   by providerID `hcloud://<id>` first and by name second. A gateway that matches no
//!   server is reported as a blackhole with no target; it never fails the list.
//! - **Create**: the node's server by providerID (or name) from the cached server
//!   list, then `add_route` and a wait for its action. Nothing else: the controller
//!   holds a fresh view of the routes, so the network is reloaded only when the API
//!   refuses the route.
//! - **Delete**: `delete_route` with the destination and the gateway the route was
//!   listed or created with, and a wait for its action.
//!
//! Route actions on the network run one at a time (see
//! [`Config::max_concurrent_mutations`]): the API refuses a change with `conflict` while
//! another one is running on the same network, so running them in parallel would only
//! turn into refusals and retries, each paid from the request budget. The provider
//! declares that limit in its [`Routes::budget`] and the controller keeps it: no worker
//! waits on a semaphore here, so the controller's count of calls in flight is real. A
//! caller that drives the provider from several threads itself gets `conflict`s.
//!
//! The request budget is the controller's: the provider declares it (3600 requests an
//! hour; a change costs its request and a poll of its action) and reports, with each
//! reply, the requests it really sent and the API's rate-limit headers, so that the
//! API never has to refuse a request for its budget. No worker waits for budget here;
//! only for the cloud's actions, whose polls count against the budget.
//!
//! This provider never decides which routes to delete (the controller's cluster-CIDR
//! rule does), never changes a route of another network, and never logs the token.

mod actions;
mod api;
mod config;
mod servers;

use std::borrow::Cow;
use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::Serialize;

pub use config::{
    Config, ConfigError, DEFAULT_ENDPOINT, ENV_ENDPOINT, ENV_NETWORK, ENV_NETWORK_ROUTE_LIMIT,
    ENV_SERVER_CACHE_MAX_AGE, ENV_TOKEN, ENV_TOKEN_FILE, NetworkRef, Secret, TokenSource,
};

pub use actions::{ActionClock, VirtualTime};
use actions::{ActionEnd, ActionPoller};
use api::{
    ActionEnvelope, ApiError, Client, NetworkEnvelope, NetworkJson, NetworksEnvelope, Request,
    RouteJson, ServersEnvelope,
};
use servers::{Server, ServerCache, ServerList, ServerSnapshot};

use crate::fence::Fence;
use crate::model::{Cidr, Route};
use crate::provider::{
    Budget, CloudError, CloudErrorKind, NodeDirectory, RouteTarget, Routes, TableUsage,
};

/// Servers per page when listing (the API's maximum).
const SERVERS_PER_PAGE: u32 = 50;

/// A guard against a server list whose pagination never ends.
const MAX_SERVER_PAGES: u64 = 10_000;

/// `NetworkUnavailable` reasons of the pre-flight checks.
pub const IPV6_NOT_ROUTABLE: &str = "IPv6NotRoutable";
/// The node's InternalIP is outside the network's IP range.
pub const INTERNAL_IP_OUTSIDE_NETWORK: &str = "InternalIPOutsideNetwork";
/// No server attached to the network holds the node's InternalIP.
pub const SERVER_NOT_IN_NETWORK: &str = "ServerNotInNetwork";

/// The managed network as resolved at start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetworkInfo {
    /// The network's ID.
    pub id: u64,
    /// The network's name.
    pub name: String,
    /// The network's IP range, e.g. `10.0.0.0/8`.
    pub ip_range: String,
    /// The IP ranges of its subnets; route destinations must not overlap them.
    pub subnets: Vec<String>,
}

/// The Hetzner Cloud implementation of [`Routes`]. Safe to share between threads.
#[derive(Debug)]
pub struct HcloudRoutes {
    client: Client,
    network: NetworkInfo,
    server_cache_max_age: Duration,
    server_lookup_max_age: Duration,
    refresh_on_miss_after: Duration,
    servers: ServerCache,
    actions: ActionPoller,
    /// Requests per second, burst and route changes at once, declared to the controller.
    budget: (f64, u32, usize),
    /// The gateway of each route this provider created since the last list: a delete
    /// needs it, and a route the controller created carries no name (a listed one
    /// carries it in its name, `<gateway>-<destination>`).
    gateways: Mutex<HashMap<Cidr, Ipv4Addr>>,
    /// Routes in the network at the last load, for [`Routes::route_tables`].
    routes_in_network: Mutex<usize>,
    /// Routes the network may hold ([`Config::network_route_limit`]).
    route_limit: usize,
}

impl HcloudRoutes {
    /// Builds the provider and resolves the network once (one or two requests): a
    /// numeric network is looked up by ID and then by name, anything else by name. The
    /// error names the variable to fix.
    pub fn connect(config: Config) -> Result<HcloudRoutes, ConfigError> {
        let client = Client::new(&config);
        client
            .check_token()
            .map_err(|e| ConfigError::new(ENV_TOKEN_FILE, e.message))?;
        let network = resolve_network(&client, &config.network)?;
        let info = NetworkInfo {
            id: network.id,
            name: network.name.clone(),
            ip_range: network.ip_range.clone(),
            subnets: network.subnets.iter().map(|s| s.ip_range.clone()).collect(),
        };
        log::info!(
            "hcloud: managing the routes of network {} ({}, {}); {} routes in it now",
            info.name,
            info.id,
            info.ip_range,
            network.routes.len()
        );
        let provider = HcloudRoutes {
            client,
            servers: ServerCache::new(),
            network: info,
            server_cache_max_age: config.server_cache_max_age,
            server_lookup_max_age: config.server_lookup_max_age,
            refresh_on_miss_after: config.refresh_on_miss_after,
            actions: ActionPoller::new(
                config.action_first_poll,
                config.action_poll_interval,
                config.action_timeout,
                config.action_clock.clone(),
            ),
            budget: (
                config.rate_limit_per_second,
                config.rate_limit_burst,
                config.max_concurrent_mutations.max(1),
            ),
            gateways: Mutex::new(HashMap::new()),
            routes_in_network: Mutex::new(network.routes.len()),
            route_limit: config.network_route_limit,
        };
        Ok(provider)
    }

    /// Every request from now on first passes `fence` (leader election's; see
    /// [`Fence`]): after the lease is lost nothing is sent, and a route change stops
    /// between its POST and the polls of its action. Call it after `connect`, whose
    /// requests precede leader election.
    pub fn with_fence(mut self, fence: Fence) -> HcloudRoutes {
        self.client.set_fence(fence);
        self
    }

    /// The network this provider manages.
    pub fn network(&self) -> &NetworkInfo {
        &self.network
    }

    /// Problems with the cluster CIDRs for this network: the API refuses a route whose
    /// destination overlaps a subnet, so a pod CIDR inside one can never be routed.
    pub fn cluster_cidr_problems(&self, cluster_cidrs: &[Cidr]) -> Vec<String> {
        let mut problems = Vec::new();
        for cidr in cluster_cidrs {
            if !cidr.is_ipv4() {
                problems.push(format!(
                    "cluster CIDR {cidr} is IPv6; Hetzner Cloud networks route IPv4 only"
                ));
                continue;
            }
            for subnet in &self.network.subnets {
                if Cidr::parse(subnet).is_ok_and(|s| overlaps(&s, cidr)) {
                    problems.push(format!(
                        "cluster CIDR {cidr} overlaps subnet {subnet} of network {}; routes into it \
                         will be refused: choose a --cluster-cidr outside the network's subnets",
                        self.network.name
                    ));
                }
            }
        }
        problems
    }
}

impl Routes for HcloudRoutes {
    fn provider_name(&self) -> &'static str {
        "hcloud"
    }

    /// The API's 3600 requests per hour; one route action at a time (the API answers
    /// `conflict` to a second). A list costs its `GET /networks/{id}` (the server list
    /// is cached), a change its request and a poll of its action; refreshing the
    /// server list or polling longer is charged when the reply says so.
    fn budget(&self) -> Option<Budget> {
        Some(
            Budget::new(self.budget.0, self.budget.1)
                .mutations_at_once(self.budget.2)
                .requests_per_op(1, 2, 2),
        )
    }

    /// The network, with every route in it (foreign ones too) and its limit (100 per
    /// network unless `HCLOUD_NETWORK_ROUTE_LIMIT` says otherwise).
    fn route_tables(&self) -> Vec<TableUsage> {
        vec![TableUsage {
            table: self.network.name.clone(),
            routes: *crate::sync::lock(&self.routes_in_network),
            limit: self.route_limit,
            by_family: None,
        }]
    }

    /// The destination is IPv4, and the node's InternalIP is in the network and held
    /// by a server attached to it.
    fn preflight(&self, route: &Route, target: &RouteTarget) -> Result<(), CloudError> {
        self.check_create(route, target).map(|_| ())
    }

    fn list_routes(
        &self,
        cluster_name: &str,
        nodes: &NodeDirectory,
    ) -> Result<Vec<Route>, CloudError> {
        let mut routes = Vec::new();
        self.list_routes_each(cluster_name, nodes, &mut |r| routes.push(r))?;
        Ok(routes)
    }

    /// The network's routes are read whole (one `GET`), kept compact while the server
    /// list is checked, and handed over one by one as they are mapped to nodes.
    fn list_routes_each(
        &self,
        _cluster_name: &str,
        nodes: &NodeDirectory,
        route: &mut dyn FnMut(Route),
    ) -> Result<(), CloudError> {
        let network = self.load_network()?;
        let gateway_unknown = |s: &ServerSnapshot| {
            network
                .routes
                .iter()
                .any(|r| r.gateway_ip().is_none_or(|ip| s.by_gateway(ip).is_none()))
        };
        let servers = self.servers_unless_missing(self.server_cache_max_age, gateway_unknown)?;
        // Every route listed carries its gateway in its name from now on.
        self.gateways().clear();
        *crate::sync::lock(&self.routes_in_network) = network.routes.len();
        for r in &network.routes {
            route(self.to_route(r, &servers, nodes));
        }
        Ok(())
    }

    fn create_route(
        &self,
        _cluster_name: &str,
        _name_hint: &str,
        route: &Route,
        target: &RouteTarget,
    ) -> Result<(), CloudError> {
        let destination = self.check_create(route, target)?;
        let gateway = self.gateway_for(target)?;
        let body = RouteBody::new(destination, gateway);
        match self.route_action("add_route", &body) {
            Ok(()) => {
                self.gateways().insert(destination, gateway);
                Ok(())
            }
            // The network holds its 100 routes (another writer filled it since the
            // list): the controller holds its creates until there is room.
            Err(e) if e.is("resource_limit_exceeded") => {
                Err(CloudError::new(CloudErrorKind::TableFull, e.message))
            }
            Err(e) if e.is("invalid_input") || e.is("uniqueness_error") => {
                self.explain_refused_create(destination, gateway, e)
            }
            Err(e) => Err(e.into()),
        }
    }

    fn delete_route(&self, _cluster_name: &str, route: &Route) -> Result<(), CloudError> {
        let destination = Cidr::parse(&route.destination_cidr).map_err(|e| {
            CloudError::invalid(format!("hcloud: cannot delete route {:?}: {e}", route.name))
        })?;
        let gone = || {
            CloudError::new(
                CloudErrorKind::NotFound,
                format!(
                    "hcloud: network {} has no route {destination} to node {:?}",
                    self.network.name, route.target_node
                ),
            )
        };
        if !destination.is_ipv4() {
            return Err(gone());
        }
        let Some(gateway) = self.gateway_of(route, destination)? else {
            return Err(gone());
        };
        let body = RouteBody::new(destination, gateway);
        match self.route_action("delete_route", &body) {
            Ok(()) => {
                self.gateways().remove(&destination);
                Ok(())
            }
            Err(e) if e.is("not_found") => {
                self.gateways().remove(&destination);
                Err(CloudError::new(CloudErrorKind::NotFound, e.message))
            }
            Err(e) => Err(e.into()),
        }
    }
}

impl HcloudRoutes {
    // --- reading the network and the servers ------------------------------------

    fn network_path(&self) -> String {
        format!("/networks/{}", self.network.id)
    }

    fn load_network(&self) -> Result<NetworkJson, ApiError> {
        let request = Request::get(self.network_path(), "/networks/-");
        self.client
            .get::<NetworkEnvelope>(&request)
            .map(|e| e.network)
    }

    fn servers(&self, max_age: Duration) -> Result<Arc<ServerSnapshot>, ApiError> {
        self.servers
            .get(max_age, || list_servers(&self.client, self.network.id))
    }

    /// The server list, refreshed once if `missing` holds for it and it is older than
    /// `refresh_on_miss_after`: a server created a moment ago may not be in it.
    fn servers_unless_missing(
        &self,
        max_age: Duration,
        missing: impl Fn(&ServerSnapshot) -> bool,
    ) -> Result<Arc<ServerSnapshot>, ApiError> {
        let snapshot = self.servers(max_age)?;
        if missing(&snapshot) && snapshot.age(Instant::now()) > self.refresh_on_miss_after {
            // Let the old snapshot go before the new one is listed (see ServerCache::get).
            drop(snapshot);
            return self.servers(self.refresh_on_miss_after);
        }
        Ok(snapshot)
    }

    fn gateways(&self) -> MutexGuard<'_, HashMap<Cidr, Ipv4Addr>> {
        crate::sync::lock(&self.gateways)
    }

    // --- mapping routes to nodes and nodes to servers ----------------------------

    fn to_route(&self, r: &RouteJson, servers: &ServerSnapshot, nodes: &NodeDirectory) -> Route {
        let server = r.gateway_ip().and_then(|ip| servers.by_gateway(ip));
        let name = format!("{}-{}", r.gateway(), r.destination());
        match server {
            Some(server) => Route {
                name,
                target_node: node_of(nodes, &server),
                destination_cidr: r.destination().into_owned(),
                ..Route::default()
            },
            None => {
                log::debug!(
                    "hcloud: route {} via {}: no server has that IP in network {}; \
                     reported as a blackhole",
                    r.destination(),
                    r.gateway(),
                    self.network.name
                );
                Route {
                    name,
                    destination_cidr: r.destination().into_owned(),
                    blackhole: true,
                    ..Route::default()
                }
            }
        }
    }

    /// What the API would refuse, checked before any change is sent: an IPv6
    /// destination (networks route IPv4 only: lasting), a node whose InternalIP lies
    /// outside the network, or that no server attached to the network holds (a Robot
    /// server on a vSwitch, a server not attached yet). A node without an InternalIP
    /// is found by its server alone. Returns the destination.
    fn check_create(&self, route: &Route, target: &RouteTarget) -> Result<Cidr, CloudError> {
        let node = &target.node_name;
        if let Ok(cidr) = Cidr::parse(&route.destination_cidr)
            && !cidr.is_ipv4()
        {
            return Err(CloudError::refused(
                IPV6_NOT_ROUTABLE,
                true,
                format!(
                    "hcloud: pod CIDR {cidr} of node {node} is IPv6, and Hetzner Cloud networks \
                     route IPv4 only; it is not tried again: route IPv6 pod traffic another way \
                     (native routing over the servers' public /64) or drop the IPv6 pod CIDR"
                ),
            ));
        }
        let destination = ipv4_destination(&route.destination_cidr)?;
        let internal: Vec<Ipv4Addr> = target
            .addresses
            .iter()
            .filter(|a| a.kind == "InternalIP")
            .filter_map(|a| a.address.parse().ok())
            .collect();
        if internal.is_empty() {
            return Ok(destination);
        }
        let range = Cidr::parse(&self.network.ip_range).ok();
        let in_range: Vec<Ipv4Addr> = internal
            .iter()
            .copied()
            .filter(|ip| range.is_none_or(|r| r.contains(std::net::IpAddr::V4(*ip))))
            .collect();
        let shown = |ips: &[Ipv4Addr]| {
            ips.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        };
        if in_range.is_empty() {
            return Err(CloudError::refused(
                INTERNAL_IP_OUTSIDE_NETWORK,
                false,
                format!(
                    "hcloud: node {node}'s InternalIP {} is outside network {} ({}), so no route \
                     can point at it: attach the node's server to the network and make its \
                     private IP the node's InternalIP (kubelet --node-ip)",
                    shown(&internal),
                    self.network.name,
                    self.network.ip_range
                ),
            ));
        }
        let attached = |s: &ServerSnapshot| in_range.iter().any(|ip| s.by_gateway(*ip).is_some());
        let snapshot = self.servers_unless_missing(self.server_lookup_max_age, |s| !attached(s))?;
        if !attached(&snapshot) {
            return Err(CloudError::refused(
                SERVER_NOT_IN_NETWORK,
                false,
                format!(
                    "hcloud: no server attached to network {} has node {node}'s InternalIP {} \
                     (a Robot server on a vSwitch cannot be a route's gateway): attach the \
                     node's cloud server (hcloud server attach-to-network --network {} \
                     <server>), or leave the node out of the routes",
                    self.network.name,
                    shown(&in_range),
                    self.network.id
                ),
            ));
        }
        Ok(destination)
    }

    /// The private IP of the node's server in the network: the gateway of its routes.
    fn gateway_for(&self, target: &RouteTarget) -> Result<Ipv4Addr, CloudError> {
        let key = ServerKey::of(target)?;
        let snapshot = self.servers_unless_missing(self.server_lookup_max_age, |s| {
            key.find(s, &target.node_name)
                .and_then(|server| server.ip)
                .is_none()
        })?;
        match key.find(&snapshot, &target.node_name) {
            Some(Server { ip: Some(ip), .. }) => Ok(ip),
            Some(server) => Err(CloudError::refused(
                SERVER_NOT_IN_NETWORK,
                false,
                format!(
                    "hcloud: server {} ({}) of node {} is not attached to network {} ({}) yet; \
                     attach it (hcloud server attach-to-network) and the route follows",
                    server.name, server.id, target.node_name, self.network.name, self.network.id
                ),
            )),
            // A server created a moment ago may not be listed yet, so this is retried
            // with the usual backoff; if the node names a server of another project, the
            // backoff grows to minutes and the message says what to check.
            None => Err(CloudError::new(
                CloudErrorKind::Retry { after: None },
                format!(
                    "hcloud: no server for node {} ({}) among the {} servers of the token's project; \
                     check the node's providerID and that the token belongs to the servers' project",
                    target.node_name,
                    key,
                    snapshot.len()
                ),
            )),
        }
    }

    // --- changing the network -----------------------------------------------------

    /// Sends one route action and waits for it to end.
    fn route_action(&self, command: &'static str, body: &RouteBody) -> Result<(), ApiError> {
        let endpoint = match command {
            "add_route" => "/networks/-/actions/add_route",
            _ => "/networks/-/actions/delete_route",
        };
        let path = format!("{}/actions/{command}", self.network_path());
        let what = format!("POST {path} {} via {}", body.destination, body.gateway);
        let payload = serde_json::to_vec(body)
            .map_err(|e| ApiError::new(CloudErrorKind::Invalid, format!("hcloud: {what}: {e}")))?;
        let request = Request::post(path, endpoint, payload);
        let action = self.client.post::<ActionEnvelope>(&request)?.action;
        let end = self
            .actions
            .wait(&self.client, &action, &what)
            .map_err(|e| {
                if e.kind != CloudErrorKind::Fenced {
                    return e;
                }
                let message = format!(
                    "hcloud: {what}: action {} was started and not followed to its end ({}); \
                 the new leader lists and repairs",
                    action.id, e.message
                );
                ApiError { message, ..e }
            })?;
        match end {
            ActionEnd::Success => Ok(()),
            ActionEnd::Failed { code, message } => Err(ApiError {
                kind: api::action_failure_kind(&code),
                message: format!(
                    "hcloud: {what}: action {} failed: {message} ({code})",
                    action.id
                ),
                code: Some(code),
            }),
        }
    }

    /// The API refused to add the route (`invalid_input`, `uniqueness_error`): most
    /// often because a route for the destination exists. One reload tells: the same
    /// gateway means the route is there as wanted.
    fn explain_refused_create(
        &self,
        destination: Cidr,
        gateway: Ipv4Addr,
        refusal: ApiError,
    ) -> Result<(), CloudError> {
        let network = self.load_network()?;
        let existing = network
            .routes
            .iter()
            .find(|r| r.destination_cidr() == Some(destination));
        if let Some(r) = existing {
            if r.gateway_ip() == Some(gateway) {
                return Ok(());
            }
            return Err(CloudError::new(
                CloudErrorKind::AlreadyExists,
                format!(
                    "hcloud: network {} already routes {destination} via {}, not {gateway}",
                    self.network.name,
                    r.gateway()
                ),
            ));
        }
        let overlapping = network
            .subnets
            .iter()
            .map(|s| ("subnet", Cow::Borrowed(s.ip_range.as_str())))
            .chain(network.routes.iter().map(|r| ("route", r.destination())))
            .find(|(_, range)| Cidr::parse(range).is_ok_and(|c| overlaps(&c, &destination)));
        match overlapping {
            Some((kind, range)) => Err(CloudError::invalid(format!(
                "hcloud: {destination} overlaps {kind} {range} of network {}; route destinations \
                 must lie outside the network's subnets and other routes (check --cluster-cidr) \
                 [{}]",
                self.network.name, refusal.message
            ))),
            None => Err(refusal.into()),
        }
    }

    /// The gateway a route to delete was created with: from its name
    /// (`<gateway>-<destination>`, every listed route's), from the routes this provider
    /// created since the last list, or from a reload of the network, where it must
    /// point at the route's node. `None`: no such route.
    fn gateway_of(&self, route: &Route, destination: Cidr) -> Result<Option<Ipv4Addr>, CloudError> {
        if let Some((gateway, dest)) = route.name.split_once('-')
            && let (Ok(g), Ok(d)) = (gateway.parse::<Ipv4Addr>(), Cidr::parse(dest))
            && d == destination
        {
            return Ok(Some(g));
        }
        if let Some(g) = self.gateways().get(&destination) {
            return Ok(Some(*g));
        }
        let network = self.load_network()?;
        let Some(gateway) = network
            .routes
            .iter()
            .find(|r| r.destination_cidr() == Some(destination))
            .and_then(RouteJson::gateway_ip)
        else {
            return Ok(None);
        };
        if route
            .target_node_addresses
            .iter()
            .any(|a| a.address.parse::<Ipv4Addr>().ok() == Some(gateway))
        {
            return Ok(Some(gateway));
        }
        let servers = self.servers(self.server_cache_max_age)?;
        let points_at_node = servers
            .by_gateway(gateway)
            .is_some_and(|s| !route.target_node.is_empty() && s.name == route.target_node);
        if points_at_node {
            return Ok(Some(gateway));
        }
        log::info!(
            "hcloud: {destination} is routed via {gateway}, which is not node {}; the route to \
             delete is already gone",
            route.target_node
        );
        Ok(None)
    }
}

/// The body of `add_route` and `delete_route`.
#[derive(Serialize, Debug)]
struct RouteBody {
    destination: String,
    gateway: String,
}

impl RouteBody {
    fn new(destination: Cidr, gateway: Ipv4Addr) -> RouteBody {
        RouteBody {
            destination: destination.to_string(),
            gateway: gateway.to_string(),
        }
    }
}

/// How to find a node's server.
#[derive(Clone, Debug, PartialEq, Eq)]
enum ServerKey {
    /// From `spec.providerID` `hcloud://<id>`.
    Id(u64),
    /// The node has no providerID: the server named like the node.
    Name,
}

impl ServerKey {
    fn of(target: &RouteTarget) -> Result<ServerKey, CloudError> {
        let Some(provider_id) = target.provider_id.as_deref().filter(|p| !p.is_empty()) else {
            return Ok(ServerKey::Name);
        };
        let robot = || {
            CloudError::invalid(format!(
                "hcloud: node {} is a Robot (dedicated) server ({provider_id}); network routes \
                 can only point at cloud servers",
                target.node_name
            ))
        };
        if provider_id.starts_with("hrobot://") {
            return Err(robot());
        }
        match provider_id.strip_prefix("hcloud://") {
            Some(id) if id.starts_with("bm-") => Err(robot()),
            Some(id) => id.parse().map(ServerKey::Id).map_err(|_| {
                CloudError::invalid(format!(
                    "hcloud: node {} has a malformed providerID {provider_id:?} (want hcloud://<id>)",
                    target.node_name
                ))
            }),
            None => Err(CloudError::invalid(format!(
                "hcloud: node {} has providerID {provider_id:?}, which is not a Hetzner Cloud \
                 server",
                target.node_name
            ))),
        }
    }

    /// The server by ID, or by the node's name when it has no providerID or no server
    /// has that ID.
    fn find<'a>(&self, servers: &'a ServerSnapshot, node_name: &str) -> Option<Server<'a>> {
        match self {
            ServerKey::Id(id) => servers.by_id(*id).or_else(|| servers.by_name(node_name)),
            ServerKey::Name => servers.by_name(node_name),
        }
    }
}

impl std::fmt::Display for ServerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServerKey::Id(id) => write!(f, "server ID {id} from its providerID, or by name"),
            ServerKey::Name => f.write_str("no providerID; looked up by name"),
        }
    }
}

/// The node of a server: by providerID first, so that a node named differently from
/// its server is still found (HCCM maps by server name, and churns such routes); then
/// a node with the server's name, unless that node's providerID names another server.
/// A server with no node keeps its own name, so the controller sees a route to a node
/// that does not exist; a server whose name belongs to another server's node gets no
/// target at all.
fn node_of(nodes: &NodeDirectory, server: &Server) -> String {
    let provider_id = server.provider_id();
    if let Some(node) = nodes.node_by_provider_id(&provider_id) {
        return node.to_string();
    }
    match nodes.provider_id_of(server.name) {
        Some(other) if other != provider_id => String::new(),
        _ => server.name.to_string(),
    }
}

/// The destination of a new route, which must be IPv4: private networks route IPv4
/// only, and the API would refuse anything else after a request.
fn ipv4_destination(text: &str) -> Result<Cidr, CloudError> {
    crate::provider::ipv4_destination(
        text,
        "hcloud",
        "Hetzner Cloud networks route IPv4 only (give this cluster's IPv6 pod CIDRs another \
         route provider or none)",
    )
}

/// Whether two networks share an address (one contains the other's first address).
fn overlaps(a: &Cidr, b: &Cidr) -> bool {
    a.contains(b.network()) || b.contains(a.network())
}

/// Resolves `HCLOUD_NETWORK` to a network, naming the variable to fix on failure.
fn resolve_network(client: &Client, network: &NetworkRef) -> Result<NetworkJson, ConfigError> {
    let by_name = |name: &str| -> Result<NetworkJson, ConfigError> {
        let request = Request::get("/networks".to_string(), "/networks").query("name", name);
        let found = client
            .get::<NetworksEnvelope>(&request)
            .map_err(setup_error)?;
        found.networks.into_iter().next().ok_or_else(|| {
            ConfigError::new(
                ENV_NETWORK,
                format!(
                    "no network with the ID or name {name:?} in the project of the token; \
                     `hcloud network list` shows the networks"
                ),
            )
        })
    };
    match network {
        NetworkRef::Name(name) => by_name(name),
        NetworkRef::Id(id) => {
            let request = Request::get(format!("/networks/{id}"), "/networks/-");
            match client.get::<NetworkEnvelope>(&request) {
                Ok(e) => Ok(e.network),
                Err(e) if e.is("not_found") => by_name(&id.to_string()),
                Err(e) => Err(setup_error(e)),
            }
        }
    }
}

/// A failure while resolving the network, blamed on the setting most likely wrong.
/// An outage (nothing answered, a timeout, a 5xx, the rate limit) is told apart from
/// a refusal, so that `run` waits for the API instead of exiting as if misconfigured.
fn setup_error(e: ApiError) -> ConfigError {
    let outage = matches!(
        e.kind,
        CloudErrorKind::Ambiguous
            | CloudErrorKind::Retry { .. }
            | CloudErrorKind::RateLimited { .. }
    );
    let variable = match e.code.as_deref() {
        Some("unauthorized" | "forbidden" | "token_readonly") => ENV_TOKEN,
        _ if outage => ENV_ENDPOINT,
        Some(_) => ENV_NETWORK,
        None if e.kind == CloudErrorKind::Invalid => ENV_TOKEN,
        None => ENV_ENDPOINT,
    };
    if outage {
        ConfigError::outage(variable, e.message)
    } else {
        ConfigError::new(variable, e.message)
    }
}

/// Every server of the project, page by page.
/// Every server of the project, each page added to the list as it arrives.
fn list_servers(client: &Client, network_id: u64) -> Result<ServerList, ApiError> {
    let mut all = ServerList::default();
    let mut page = 1u64;
    loop {
        let request = Request::get("/servers".to_string(), "/servers")
            .query("page", page)
            .query("per_page", SERVERS_PER_PAGE);
        let reply = client.get::<ServersEnvelope>(&request)?;
        for server in reply.servers {
            all.push(server, network_id);
        }
        let next = reply
            .meta
            .and_then(|m| m.pagination)
            .and_then(|p| p.next_page);
        match next {
            Some(n) if n > page && n <= MAX_SERVER_PAGES => page = n,
            Some(n) if n <= page => {
                return Err(ApiError::new(
                    CloudErrorKind::Retry { after: None },
                    format!("hcloud: GET /servers?page={page}: next_page {n} does not advance"),
                ));
            }
            _ => return Ok(all),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::NodeAddress;

    fn target(node: &str, provider_id: Option<&str>) -> RouteTarget {
        RouteTarget {
            node_name: node.into(),
            provider_id: provider_id.map(str::to_string),
            addresses: vec![NodeAddress::internal_ip("10.0.0.2")],
        }
    }

    #[test]
    fn provider_ids_pick_the_server_lookup() {
        assert_eq!(
            ServerKey::of(&target("n", Some("hcloud://42"))),
            Ok(ServerKey::Id(42))
        );
        assert_eq!(ServerKey::of(&target("n", None)), Ok(ServerKey::Name));
        assert_eq!(ServerKey::of(&target("n", Some(""))), Ok(ServerKey::Name));
        for robot in ["hrobot://1234", "hcloud://bm-1234"] {
            let e = ServerKey::of(&target("n", Some(robot))).unwrap_err();
            assert_eq!(e.kind, CloudErrorKind::Invalid);
            assert!(e.message.contains("Robot"), "{e}");
        }
        for bad in ["hcloud://x", "aws:///eu-west-1a/i-0abc"] {
            assert_eq!(
                ServerKey::of(&target("n", Some(bad))).unwrap_err().kind,
                CloudErrorKind::Invalid
            );
        }
    }

    fn server(id: u64, name: &str) -> Server<'_> {
        Server { id, name, ip: None }
    }

    #[test]
    fn servers_map_to_nodes_by_provider_id_before_name() {
        let dir = NodeDirectory::new([
            ("node-a", Some("hcloud://2")),
            ("srv-1", None),
            ("srv-3", Some("hcloud://4")),
        ]);
        assert_eq!(node_of(&dir, &server(2, "srv-2")), "node-a");
        assert_eq!(node_of(&dir, &server(1, "srv-1")), "srv-1");
        // Named like a node that is another server: not that node's route.
        assert_eq!(node_of(&dir, &server(3, "srv-3")), "");
        // No node at all: the server's name, which the controller finds is no node.
        assert_eq!(node_of(&dir, &server(5, "srv-5")), "srv-5");
    }

    #[test]
    fn ipv6_and_garbage_destinations_are_invalid() {
        assert!(ipv4_destination("10.244.1.0/24").is_ok());
        for bad in ["fd00::/64", "10.244.1.0", "x"] {
            assert_eq!(
                ipv4_destination(bad).unwrap_err().kind,
                CloudErrorKind::Invalid
            );
        }
    }

    #[test]
    fn overlap_is_symmetric_and_adjacent_ranges_do_not_overlap() {
        let c = |s: &str| Cidr::parse(s).unwrap();
        assert!(overlaps(&c("10.0.0.0/8"), &c("10.244.0.0/16")));
        assert!(overlaps(&c("10.244.0.0/16"), &c("10.0.0.0/8")));
        assert!(!overlaps(&c("10.0.0.0/24"), &c("10.0.1.0/24")));
    }

    #[test]
    fn setup_errors_blame_the_likely_setting() {
        let coded = |code: &str| ApiError {
            kind: CloudErrorKind::Invalid,
            code: Some(code.into()),
            message: "m".into(),
        };
        assert_eq!(setup_error(coded("unauthorized")).variable, ENV_TOKEN);
        assert_eq!(setup_error(coded("not_found")).variable, ENV_NETWORK);
        let unreachable = ApiError::new(CloudErrorKind::Retry { after: None }, "refused");
        assert_eq!(setup_error(unreachable).variable, ENV_ENDPOINT);
    }
}
