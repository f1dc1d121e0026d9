//! The OpenStack provider: the extra routes of one Neutron router, each sending a pod
//! CIDR to a node's InternalIP, configured by cloud-provider-openstack's `cloud.conf`
//! (or a clouds.yaml entry), so that a cluster switching over adopts its routes.
//!
//! - **Ownership**: only routes inside the cluster CIDRs are ever ours, and of those
//!   only the ones the rule of `owner` names: a next hop on a current node's port (its
//!   `device_id` is the instance of the node's providerID `openstack:///<id>`); a
//!   next hop on an instance's port that holds the route's destination as an allowed
//!   address pair (a node gone while no controller ran: those pairs are ours); any
//!   other next hop for a pod CIDR the router also sends to a current node's port
//!   (two next hops for one pod CIDR: the other one is stale). The last two are
//!   listed without a node, for the controller to delete once its view of the nodes
//!   is whole. A shared router's other routes (operators', other clusters', VPN
//!   appliances') are never touched; they still count against the router's
//!   `max_routes` ([`Routes::route_tables`]).
//! - **Pairs, at each list**: a route of a current node whose port lost its pair
//!   (another writer replaced the list) gets it back. A pod-CIDR pair no route uses
//!   (a lost reply, a replica killed between its two writes, an unwind the fence
//!   stopped) is listed as a route without a node, its next hop the port's address,
//!   once every node has an `openstack://` providerID; deleting it removes the pair
//!   and sends nothing to the router. Such a pair is ours only when it is a network
//!   (never a host address: VIPs are) inside a cluster CIDR, on an instance's port
//!   (`compute:*`) of a router network with port security on: where this controller
//!   puts pod CIDRs. A pair on a load balancer's or router's port is never touched.
//! - **List**: `GET /v2.0/routers/{id}`, `GET /v2.0/ports?device_id={router}` (its
//!   networks and subnets; a subnet's CIDR is read once, it never changes) and one
//!   `GET /v2.0/ports?network_id=…` per network (the nodes' ports), each followed
//!   through every page (`*_links` `rel=next`, Neutron's `pagination_max_limit`).
//! - **Next hops**: Neutron refuses a router's whole route set for one next hop
//!   outside the subnets attached to it, or on the router's own address
//!   (`InvalidRoutes`); such a node is refused before any write
//!   ([`NO_ROUTER_SUBNET`], [`NEXTHOP_IS_ROUTER`]) and never enters a batch.
//! - **Batches**: a pass's changes are one write. With the `extraroute-atomic`
//!   extension: one `add_extraroutes` of every create and one `remove_extraroutes`
//!   of every delete, which names each route as the router spells it (Neutron
//!   removes by exact strings and ignores a miss). Without it: the whole route list,
//!   `PUT /v2.0/routers/{id}` with `If-Match: revision_number=N`; another writer's
//!   change in between (412) causes a re-read and a new write, never a lost route.
//!   That mode needs `revision-if-match`: without it the provider refuses to start.
//! - **Ports**: a node's pod CIDR is added to its port's `allowed_address_pairs`
//!   before its route (else Neutron's port security drops the routed packets) and
//!   removed after the route is gone. Neutron replaces the pair list whole, so the
//!   port is read right before each write, only our pod CIDRs are added or removed,
//!   and the write carries `If-Match`; a 412 reads and merges again: another
//!   writer's pairs (keepalived's, kube-vip's, Octavia's VIPs) are never lost. A
//!   router write that is refused after the port update is unwound (the pairs it
//!   added removed again); a port update that fails after a delete fails that
//!   delete, which is retried.
//!
//! Every request is counted for the controller's budget. Tokens and secrets are never
//! logged.

mod config;
mod keystone;
mod neutron;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Mutex;

pub use config::{Config, ConfigError, Credentials, DEFAULT_MAX_ROUTES, ProjectRef, UserRef};
pub use keystone::REFRESH_BEFORE;

use keystone::Keystone;
use neutron::{AddressPair, Neutron, Port, RouteJson, Router};

use crate::fence::Fence;
use crate::model::{Cidr, Route};
use crate::provider::{
    Budget, CloudError, CloudErrorKind, NodeDirectory, RouteChange, RouteTarget, Routes, TableUsage,
};
use crate::sync::lock;

/// The Neutron extension that adds and removes routes one list at a time.
pub const EXTRAROUTE_ATOMIC: &str = "extraroute-atomic";
/// The Neutron extension that honours `If-Match: revision_number=N` on updates.
pub const REVISION_IF_MATCH: &str = "revision-if-match";
pub use neutron::PAIRS_EXHAUSTED;
/// `NetworkUnavailable` reason: the node's InternalIP is no port on a network
/// attached to the router, so the router cannot reach it.
pub const NO_ROUTER_PORT: &str = "NoPortOnRouterNetwork";
/// `NetworkUnavailable` reason: the node has no InternalIP of the pod CIDR's family.
pub const NO_INTERNAL_IP: &str = "NoInternalIP";
/// `NetworkUnavailable` reason: the node's InternalIP is on no subnet attached to the
/// router (its network may be), so Neutron refuses a route through it.
pub const NO_ROUTER_SUBNET: &str = "SubnetNotOnRouter";
/// `NetworkUnavailable` reason: the node's InternalIP is one of the router's own.
pub const NEXTHOP_IS_ROUTER: &str = "InternalIPIsRouterAddress";
/// How many changes one write carries.
pub const BATCH_SIZE: usize = 250;
/// Writes of the whole list tried in one batch when other writers keep changing the
/// router; then the batch is a conflict, retried with backoff.
const REVISION_ATTEMPTS: usize = 5;

/// A port of a router network, as last read.
#[derive(Clone, Debug)]
struct PortInfo {
    id: String,
    device_id: String,
    /// `compute:nova` and the like: an instance's port.
    device_owner: String,
    /// The subnet of the fixed IP this entry is keyed by.
    subnet_id: String,
    pairs: Vec<AddressPair>,
    /// Port security is off: any source address passes, no pair is needed.
    open: bool,
}

#[derive(Debug, Default)]
struct State {
    /// The router's networks, at the last list.
    networks: Option<HashSet<String>>,
    /// The ports of those networks by fixed IP, at the last list or looked up since.
    ports: HashMap<IpAddr, PortInfo>,
    /// InternalIPs looked up and found on no router network: refused by the
    /// pre-flight until the next list.
    portless: HashSet<IpAddr>,
    /// Routes the router held at the last list or write (anyone's).
    routes_held: Option<usize>,
    /// The next hop of each of our routes, by destination.
    nexthops: HashMap<Cidr, IpAddr>,
    /// Each route the router held at the last list, as it spells it: Neutron's
    /// `remove_extraroutes` removes by exact strings and ignores a route it does not
    /// hold, so a remove names the route as the router holds it.
    spelled: HashMap<(Cidr, IpAddr), RouteJson>,
    /// Pod-CIDR pairs the last list found on a port with no route of theirs, listed
    /// as routes without a node (next hop: the port's address): deleting one removes
    /// the pair and writes nothing to the router.
    pairs_only: HashSet<(Cidr, IpAddr)>,
    /// The router's own addresses and the CIDRs of their subnets (with the subnet's
    /// ID), at the last list: where Neutron accepts a next hop.
    router_ips: HashSet<IpAddr>,
    router_subnets: Option<Vec<(Cidr, String)>>,
    /// Subnet CIDRs by ID, kept for good: Neutron never changes a subnet's CIDR.
    subnet_cidrs: HashMap<String, Cidr>,
}

/// What the router is attached to, as read by [`OpenStackRoutes::read_ports`].
struct Topology {
    networks: HashSet<String>,
    ports: HashMap<IpAddr, PortInfo>,
    router_ips: HashSet<IpAddr>,
    /// `None` when a subnet of the router's ports cannot be read (another project's,
    /// invisible to these credentials): then no next hop is judged by subnet.
    router_subnets: Option<Vec<(Cidr, String)>>,
}

/// The OpenStack implementation of [`Routes`]. Safe to share between threads.
#[derive(Debug)]
pub struct OpenStackRoutes {
    neutron: Neutron,
    router_id: String,
    atomic: bool,
    /// Neutron honours `If-Match` (`revision-if-match`): port writes are guarded.
    if_match: bool,
    max_routes: usize,
    cluster_cidrs: Vec<Cidr>,
    budget: (f64, u32),
    state: Mutex<State>,
}

impl OpenStackRoutes {
    /// Builds the provider: a first token (which checks the credentials and finds the
    /// network endpoint), the extensions (which mode) and the router (which must
    /// exist).
    pub fn connect(config: Config) -> Result<OpenStackRoutes, ConfigError> {
        let agent = neutron::agent(config.request_timeout, &config.trust, &config.proxying);
        let at_start = |e: CloudError| ConfigError {
            outage: matches!(
                e.kind,
                CloudErrorKind::Retry { .. }
                    | CloudErrorKind::Ambiguous
                    | CloudErrorKind::RateLimited { .. }
            ),
            message: e.message,
        };
        let auth_url = keystone::discover(&agent, &config.auth_url).map_err(at_start)?;
        let keystone = Keystone::new(
            agent.clone(),
            &auth_url,
            config.region.clone(),
            config.interface.clone(),
            config.credentials.clone(),
        );
        let neutron = Neutron::new(
            agent,
            keystone,
            config.network_endpoint.clone(),
            config.request_timeout,
            config.metrics.clone(),
        );
        let extensions = neutron.extensions().map_err(at_start)?;
        let atomic = extensions.iter().any(|a| a == EXTRAROUTE_ATOMIC);
        let if_match = extensions.iter().any(|a| a == REVISION_IF_MATCH);
        if !atomic && !if_match {
            // The whole-list update would replace another writer's routes unseen.
            return Err(ConfigError::new(format!(
                "openstack: Neutron has neither {EXTRAROUTE_ATOMIC} nor {REVISION_IF_MATCH}: \
                 its routes can only be written as a whole list, and without If-Match that \
                 write would erase any route another writer added since our read; enable \
                 the revision plugin (service_plugins = ...,revisions) or upgrade Neutron \
                 to Train or later"
            )));
        }
        if !if_match {
            log::warn!(
                "openstack: Neutron lacks {REVISION_IF_MATCH}: a port's address pairs are \
                 read right before each write, but the write is not guarded; another \
                 writer's pair added in between is lost"
            );
        }
        let router = neutron.router(&config.router_id).map_err(|e| {
            let hint = if e.kind == CloudErrorKind::NotFound {
                "; check [Route] router-id (openstack router list)"
            } else {
                ""
            };
            at_start(CloudError::new(e.kind, format!("{}{hint}", e.message)))
        })?;
        log::info!(
            "openstack: managing the routes of router {} ({} routes of at most {}), {}",
            config.router_id,
            router.routes.len(),
            config.max_routes,
            if atomic {
                "extraroute-atomic: one add_extraroutes and one remove_extraroutes a batch"
            } else {
                "no extraroute-atomic: the whole list a batch, guarded by revision_number"
            }
        );
        Ok(OpenStackRoutes {
            neutron,
            router_id: config.router_id,
            atomic,
            if_match,
            max_routes: config.max_routes,
            cluster_cidrs: config.cluster_cidrs,
            budget: (config.requests_per_second, config.burst),
            state: Mutex::new(State {
                routes_held: Some(router.routes.len()),
                ..State::default()
            }),
        })
    }

    /// Every request from now on first passes `fence`: after the lease is lost
    /// nothing is sent, and a batch stops between its port and router writes.
    pub fn with_fence(mut self, fence: Fence) -> OpenStackRoutes {
        self.neutron.set_fence(fence);
        self
    }

    /// Whether the router is written with `add_extraroutes`/`remove_extraroutes`.
    pub fn atomic(&self) -> bool {
        self.atomic
    }

    fn ours(&self, destination: &Cidr) -> bool {
        self.cluster_cidrs.iter().any(|c| {
            c.is_ipv4() == destination.is_ipv4()
                && c.prefix() <= destination.prefix()
                && c.contains(destination.network())
        })
    }

    /// The router's networks and subnets (from its ports, as Neutron's extraroute
    /// validation reads them) and the networks' ports by fixed IP.
    fn read_ports(&self) -> Result<Topology, CloudError> {
        let interfaces = self
            .neutron
            .ports(&format!("device_id={}", encode(&self.router_id)))?;
        let mut router_ips = HashSet::new();
        let mut subnet_ids = BTreeSet::new();
        for ip in interfaces.iter().flat_map(|p| &p.fixed_ips) {
            if let Ok(a) = ip.ip_address.parse::<IpAddr>() {
                router_ips.insert(a);
            }
            subnet_ids.insert(ip.subnet_id.clone());
        }
        let networks: HashSet<String> = interfaces.into_iter().map(|p| p.network_id).collect();
        let unknown: Vec<&str> = {
            let state = lock(&self.state);
            subnet_ids
                .iter()
                .filter(|id| !id.is_empty() && !state.subnet_cidrs.contains_key(*id))
                .map(String::as_str)
                .collect()
        };
        if !unknown.is_empty() {
            let found = self.neutron.subnets(&unknown)?;
            let mut state = lock(&self.state);
            for subnet in found {
                if let Ok(cidr) = Cidr::parse(&subnet.cidr) {
                    state.subnet_cidrs.insert(subnet.id, cidr);
                }
            }
        }
        let router_subnets = {
            let state = lock(&self.state);
            subnet_ids
                .iter()
                .map(|id| Some((*state.subnet_cidrs.get(id)?, id.clone())))
                .collect()
        };
        let mut ports = HashMap::new();
        for network in networks.iter().collect::<BTreeSet<_>>() {
            for port in self
                .neutron
                .ports(&format!("network_id={}", encode(network)))?
            {
                if port.device_id == self.router_id {
                    continue;
                }
                insert_port(&mut ports, port);
            }
        }
        Ok(Topology {
            networks,
            ports,
            router_ips,
            router_subnets,
        })
    }

    /// Takes in what [`OpenStackRoutes::read_ports`] read.
    fn learn(state: &mut State, topology: Topology, replace: bool) {
        state.networks = Some(topology.networks);
        if replace {
            state.ports = topology.ports;
        } else {
            state.ports.extend(topology.ports);
        }
        state.router_ips = topology.router_ips;
        state.router_subnets = topology.router_subnets;
    }

    /// The pod-CIDR pairs of ours that no route of the router uses, by the port's
    /// address (of the pair's family): a pair is ours when it is a network inside a
    /// cluster CIDR, spelled as this controller writes it (`10.244.3.0/24`; never a
    /// host address, as VIPs are), on an instance's port (`compute:*`) of a router
    /// network with port security on, which is where this controller puts them. A
    /// pair the router routes to any address of its port is in use.
    fn stale_pairs(
        &self,
        topology: &Topology,
        spelled: &HashMap<(Cidr, IpAddr), RouteJson>,
    ) -> HashSet<(Cidr, IpAddr)> {
        let mut by_port: HashMap<&str, Vec<IpAddr>> = HashMap::new();
        for (ip, port) in &topology.ports {
            by_port.entry(port.id.as_str()).or_default().push(*ip);
        }
        let mut stale = HashSet::new();
        for ips in by_port.values_mut() {
            ips.sort();
            let Some(port) = topology.ports.get(&ips[0]) else {
                continue;
            };
            if port.open || !port.device_owner.starts_with("compute:") {
                continue;
            }
            for cidr in port.pairs.iter().filter_map(pod_cidr_pair) {
                if !self.ours(&cidr) || ips.iter().any(|ip| spelled.contains_key(&(cidr, *ip))) {
                    continue;
                }
                let hop = ips
                    .iter()
                    .find(|ip| ip.is_ipv4() == cidr.is_ipv4())
                    .unwrap_or(&ips[0]);
                stale.insert((cidr, *hop));
            }
        }
        stale
    }

    /// Neutron's rule for a next hop (`extraroute_db`): inside the CIDR of a subnet
    /// with a port on the router, and none of the router's own addresses. Neutron
    /// refuses a whole route set for one hop that breaks it, so such a node is
    /// refused here, before any write; unknown until the router's ports are read.
    fn check_hop(&self, target: &RouteTarget, hop: IpAddr) -> Result<(), CloudError> {
        let state = lock(&self.state);
        if state.router_ips.contains(&hop) {
            return Err(CloudError::refused(
                NEXTHOP_IS_ROUTER,
                false,
                format!(
                    "openstack: node {}: its InternalIP {hop} is an address of router {} \
                     itself, which Neutron refuses as a next hop; fix the node's InternalIP",
                    target.node_name, self.router_id
                ),
            ));
        }
        let Some(subnets) = &state.router_subnets else {
            return Ok(());
        };
        if subnets.iter().any(|(cidr, _)| cidr.contains(hop)) {
            return Ok(());
        }
        let subnet = state
            .ports
            .get(&hop)
            .map(|p| p.subnet_id.clone())
            .filter(|s| !s.is_empty());
        let attached: Vec<String> = subnets
            .iter()
            .map(|(c, id)| format!("{id} ({c})"))
            .collect();
        Err(CloudError::refused(
            NO_ROUTER_SUBNET,
            false,
            format!(
                "openstack: node {}: its InternalIP {hop} is on {}, which is not attached to \
                 router {} (attached: {}), so Neutron refuses a route through it (InvalidRoutes: \
                 the nexthop is not connected with router); attach it: openstack router add \
                 subnet {} {}",
                target.node_name,
                subnet
                    .as_deref()
                    .map_or("a subnet".to_string(), |s| format!("subnet {s}")),
                self.router_id,
                if attached.is_empty() {
                    "none".to_string()
                } else {
                    attached.join(", ")
                },
                self.router_id,
                subnet.as_deref().unwrap_or("<subnet>")
            ),
        ))
    }

    /// The port of `ip` on a router network: as last read, or looked up.
    fn port_of(&self, ip: IpAddr) -> Result<Option<PortInfo>, CloudError> {
        if let Some(p) = lock(&self.state).ports.get(&ip) {
            return Ok(Some(p.clone()));
        }
        // Bound first: a guard in the match's scrutinee would live through its arms.
        let known = lock(&self.state).networks.clone();
        let networks = match known {
            Some(n) => n,
            None => {
                let topology = self.read_ports()?;
                let n = topology.networks.clone();
                let mut state = lock(&self.state);
                OpenStackRoutes::learn(&mut state, topology, false);
                if let Some(p) = state.ports.get(&ip) {
                    return Ok(Some(p.clone()));
                }
                n
            }
        };
        let found = self
            .neutron
            .ports(&format!(
                "fixed_ips={}",
                encode(&format!("ip_address={ip}"))
            ))?
            .into_iter()
            .find(|p| networks.contains(&p.network_id));
        let mut state = lock(&self.state);
        match found {
            Some(port) => {
                state.portless.remove(&ip);
                insert_port(&mut state.ports, port);
                Ok(state.ports.get(&ip).cloned())
            }
            None => {
                state.portless.insert(ip);
                Ok(None)
            }
        }
    }

    fn refuse_portless(&self, target: &RouteTarget, ip: IpAddr) -> CloudError {
        CloudError::refused(
            NO_ROUTER_PORT,
            false,
            format!(
                "openstack: node {}: its InternalIP {ip} is no port on a network attached to \
                 router {}, so the router cannot reach it; attach the node's subnet to the \
                 router (openstack router add subnet {} <subnet>) or fix the node's InternalIP",
                target.node_name, self.router_id, self.router_id
            ),
        )
    }

    /// The destination and next hop of a create: an InternalIP of the same family.
    fn create_hop(
        &self,
        route: &Route,
        target: &RouteTarget,
    ) -> Result<(Cidr, IpAddr), CloudError> {
        let destination = Cidr::parse(&route.destination_cidr)
            .map_err(|e| CloudError::invalid(format!("openstack: route destination: {e}")))?;
        let hop = target
            .addresses
            .iter()
            .filter(|a| a.kind == "InternalIP")
            .filter_map(|a| a.address.parse::<IpAddr>().ok())
            .find(|ip| ip.is_ipv4() == destination.is_ipv4());
        match hop {
            Some(ip) => Ok((destination, ip)),
            None => Err(CloudError::refused(
                NO_INTERNAL_IP,
                false,
                format!(
                    "openstack: node {} has no {} InternalIP for pod CIDR {destination}; the \
                     route's next hop is the node's InternalIP (set by the cloud-controller-\
                     manager's node controller or kubelet --node-ip)",
                    target.node_name,
                    if destination.is_ipv4() {
                        "IPv4"
                    } else {
                        "IPv6"
                    }
                ),
            )),
        }
    }

    /// The next hop of a delete: as listed (the route's name), as created, or the
    /// node's InternalIP.
    fn delete_hop(&self, route: &Route) -> Result<(Cidr, Option<IpAddr>), CloudError> {
        let destination = Cidr::parse(&route.destination_cidr)
            .map_err(|e| CloudError::invalid(format!("openstack: route destination: {e}")))?;
        let hop = route
            .name
            .parse::<IpAddr>()
            .ok()
            .or_else(|| lock(&self.state).nexthops.get(&destination).copied())
            .or_else(|| {
                route
                    .target_node_addresses
                    .iter()
                    .filter(|a| a.kind == "InternalIP")
                    .filter_map(|a| a.address.parse::<IpAddr>().ok())
                    .find(|ip| ip.is_ipv4() == destination.is_ipv4())
            });
        Ok((destination, hop))
    }

    /// Adds `add` to and removes `remove` from the pairs of port `port_id` (of `ip`),
    /// leaving every other pair (another writer's VIPs) as Neutron holds it now: the
    /// port is read right before the write, which Neutron applies as a whole
    /// replacement, so the write is guarded by the port's revision (`If-Match`) and a
    /// 412 reads and merges again. Returns the pod CIDRs this call added.
    fn update_pairs(
        &self,
        ip: IpAddr,
        port_id: &str,
        add: &[Cidr],
        remove: &[Cidr],
    ) -> Result<Vec<Cidr>, CloudError> {
        let mut last = None;
        for _ in 0..REVISION_ATTEMPTS {
            let port = self.neutron.port(port_id)?;
            if port.port_security_enabled == Some(false) {
                // Neutron checks no source address on it: no pair is needed.
                self.cache_port(ip, port);
                return Ok(Vec::new());
            }
            let held = &port.allowed_address_pairs;
            let mut pairs: Vec<AddressPair> = held
                .iter()
                .filter(|p| !remove.iter().any(|r| same_pair(p, r)))
                .cloned()
                .collect();
            let mut added = Vec::new();
            for a in add {
                if !pairs.iter().any(|p| same_pair(p, a)) {
                    pairs.push(AddressPair {
                        ip_address: a.to_string(),
                        mac_address: None,
                    });
                    added.push(*a);
                }
            }
            if pairs == *held {
                self.cache_port(ip, port);
                return Ok(added);
            }
            let guard = self.if_match.then_some(port.revision_number);
            match self.neutron.set_address_pairs(port_id, &pairs, guard) {
                Ok(written) => {
                    self.cache_port(ip, written);
                    return Ok(added);
                }
                // Another writer changed the port since it was read: read it again.
                Err(e) if e.kind == CloudErrorKind::Conflict => {
                    log::debug!("openstack: port {port_id}: {e}; reading it again");
                    last = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(last
            .unwrap_or_else(|| CloudError::new(CloudErrorKind::Conflict, "openstack: conflict")))
    }

    /// Keeps the cache of the port of `ip` in step with what Neutron answered, under
    /// each of its fixed IPs: a node that moves to another IP of its port finds the
    /// pairs as they are, not as they were when that IP was last read.
    fn cache_port(&self, ip: IpAddr, port: Port) {
        let mut state = lock(&self.state);
        let id = match state.ports.get(&ip) {
            Some(p) => p.id.clone(),
            None => return,
        };
        let open = port.port_security_enabled == Some(false);
        for p in state.ports.values_mut().filter(|p| p.id == id) {
            p.pairs = port.allowed_address_pairs.clone();
            p.open = open;
        }
    }

    /// Whether a route of ours sends `destination` to an address of port `port_id`
    /// (the same node at another of its port's addresses, or created since the list
    /// that found the pair unused): then its pair stays.
    fn routed_to_port(&self, destination: &Cidr, port_id: &str) -> bool {
        let state = lock(&self.state);
        state
            .nexthops
            .get(destination)
            .and_then(|hop| state.ports.get(hop))
            .is_some_and(|p| p.id == port_id)
    }

    /// The router write of a batch; `Ok` is the router as written, `None` when the
    /// batch has nothing for the router.
    fn write_router(
        &self,
        adds: &[RouteJson],
        removes: &[RouteJson],
    ) -> Result<Option<Router>, WriteFailure> {
        if adds.is_empty() && removes.is_empty() {
            return Ok(None);
        }
        if self.atomic {
            let mut router = None;
            if !adds.is_empty() {
                router = Some(self.neutron.extraroutes(&self.router_id, true, adds)?);
            }
            if !removes.is_empty() {
                match self.neutron.extraroutes(&self.router_id, false, removes) {
                    Ok(r) => router = Some(r),
                    Err(e) if router.is_some() => return Err(WriteFailure::Removes(e)),
                    Err(e) => return Err(WriteFailure::Whole(e)),
                }
            }
            return Ok(router);
        }
        let mut last = None;
        for _ in 0..REVISION_ATTEMPTS {
            let router = self.neutron.router(&self.router_id)?;
            // Compared as parsed networks and addresses: the router may spell a
            // route otherwise than we do.
            let remove: HashSet<(Cidr, IpAddr)> = removes.iter().filter_map(parsed).collect();
            let mut routes: Vec<RouteJson> = router
                .routes
                .iter()
                .filter(|r| parsed(r).is_none_or(|p| !remove.contains(&p)))
                .cloned()
                .collect();
            for add in adds {
                if !routes
                    .iter()
                    .any(|r| parsed(r).is_some() && parsed(r) == parsed(add))
                {
                    routes.push(add.clone());
                }
            }
            if routes.len() > self.max_routes && routes.len() > router.routes.len() {
                return Err(WriteFailure::Whole(CloudError::new(
                    CloudErrorKind::TableFull,
                    format!(
                        "openstack: router {} would hold {} routes, more than max-routes {}; \
                         raise Neutron's max_routes and [Route] max-routes",
                        self.router_id,
                        routes.len(),
                        self.max_routes
                    ),
                )));
            }
            match self
                .neutron
                .set_routes(&self.router_id, &routes, router.revision_number)
            {
                Ok(written) => return Ok(Some(written)),
                // Another writer changed the router since it was read: read it again.
                Err(e) if e.kind == CloudErrorKind::Conflict => {
                    log::debug!(
                        "openstack: router {}: {e}; reading it again",
                        self.router_id
                    );
                    last = Some(e);
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(WriteFailure::Whole(last.unwrap_or_else(|| {
            CloudError::new(CloudErrorKind::Conflict, "openstack: conflict")
        })))
    }
}

/// Neutron's `400 InvalidRoutes` of a router write: it validates the router's route
/// set and refuses the request for any one route (a next hop on no subnet of the
/// router), so the batch is refused whole ([`CloudErrorKind::BatchRefused`]). Its
/// message lists routes (`Invalid format for routes: [{'destination': ..., 'nexthop':
/// ...}], <reason>`), sometimes all of them: a create is named at fault only when it
/// is the one create of the batch the message lists; else the controller splits the
/// batch to find it.
fn invalid_routes(e: CloudError, creates: &[Create]) -> CloudError {
    if e.kind != CloudErrorKind::Invalid || !e.message.contains(" InvalidRoutes:") {
        return e;
    }
    let mut listed = creates.iter().filter(|c| {
        e.message.contains(&format!("'{}'", c.destination))
            && e.message.contains(&format!("'{}'", c.hop))
    });
    let at_fault = match (listed.next(), listed.next()) {
        (Some(c), None) => Some(c.index),
        _ => None,
    };
    CloudError::batch_refused("InvalidRoutes", at_fault, e.message)
}

/// How a batch's router write failed.
enum WriteFailure {
    /// Nothing of the batch went in (or, if ambiguous, anything may have).
    Whole(CloudError),
    /// The batch's `add_extraroutes` went in; its `remove_extraroutes` failed.
    Removes(CloudError),
}

impl From<CloudError> for WriteFailure {
    fn from(e: CloudError) -> WriteFailure {
        WriteFailure::Whole(e)
    }
}

/// A route's destination and next hop, parsed; `None` for one Neutron should never
/// hold, which is then kept as it is.
fn parsed(r: &RouteJson) -> Option<(Cidr, IpAddr)> {
    Some((Cidr::parse(&r.destination).ok()?, r.nexthop.parse().ok()?))
}

fn insert_port(ports: &mut HashMap<IpAddr, PortInfo>, port: Port) {
    let info = PortInfo {
        id: port.id,
        device_id: port.device_id,
        device_owner: port.device_owner,
        subnet_id: String::new(),
        pairs: port.allowed_address_pairs,
        open: port.port_security_enabled == Some(false),
    };
    for fixed in port.fixed_ips {
        if let Ok(ip) = fixed.ip_address.parse::<IpAddr>() {
            ports.insert(
                ip,
                PortInfo {
                    subnet_id: fixed.subnet_id,
                    ..info.clone()
                },
            );
        }
    }
}

fn encode(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// Whose a route inside the cluster CIDR is.
enum Owner<'a> {
    /// A current node's: its next hop is the node's port.
    Node(&'a str),
    /// A node's that is gone (deleted while no replica led, or its delete's reply
    /// was lost): the controller deletes it.
    Gone,
}

/// The ownership rule for a route inside the cluster CIDR (README, OpenStack):
///
/// - its next hop is a port of a current node's instance: that node's;
/// - its next hop is an instance's port (`compute:*`) that holds the destination as
///   an allowed address pair, while every current node is known by its instance (an
///   `openstack://` providerID): a node's that is gone, since pod-CIDR pairs are what
///   this controller gives the ports it routes to. Without every node's instance a
///   live node's port would look like a gone node's, so then it is left alone;
/// - anything else (a port without the pair, an address no port of ours holds):
///   someone else's, never touched, unless the router also sends the same pod CIDR
///   to a current node (the list takes that one as gone). A next hop that no port
///   holds is not taken as dead by itself: a VIP held only as a pair, a device
///   outside Neutron and another project's port look the same from here.
fn owner<'a>(
    topology: &Topology,
    by_instance: &HashMap<&str, &'a str>,
    every_node_known: bool,
    destination: &Cidr,
    hop: IpAddr,
) -> Option<Owner<'a>> {
    let port = topology.ports.get(&hop)?;
    if let Some(node) = by_instance.get(port.device_id.as_str()) {
        return Some(Owner::Node(node));
    }
    let paired = port.pairs.iter().any(|p| same_pair(p, destination));
    (every_node_known && port.device_owner.starts_with("compute:") && paired).then_some(Owner::Gone)
}

/// The instance of a providerID: `openstack:///<id>` or `openstack://<region>/<id>`.
fn instance_id(provider_id: &str) -> Option<&str> {
    let rest = provider_id.strip_prefix("openstack://")?;
    let id = rest.rsplit('/').next()?;
    (!id.is_empty()).then_some(id)
}

/// The pod CIDR a pair is, if it is one this controller could have written: a
/// network (its address the network's own, not a host's), wider than one address.
fn pod_cidr_pair(pair: &AddressPair) -> Option<Cidr> {
    let cidr = Cidr::parse(&pair.ip_address).ok()?;
    (cidr.prefix() < host_prefix(&cidr) && same_pair(pair, &cidr)).then_some(cidr)
}

/// Whether `pair` is exactly `cidr`: its address is the network's, not one of its
/// hosts (`10.0.0.5/24` is a host's address with its subnet's length, not
/// `10.0.0.0/24`), and a bare address is a host route.
fn same_pair(pair: &AddressPair, cidr: &Cidr) -> bool {
    let (address, prefix) = match pair.ip_address.split_once('/') {
        Some((a, p)) => (a, p.parse::<u8>().ok()),
        None => (pair.ip_address.as_str(), Some(host_prefix(cidr))),
    };
    prefix == Some(cidr.prefix()) && address.parse::<IpAddr>().ok() == Some(cidr.network())
}

/// The prefix length of one address of `cidr`'s family.
fn host_prefix(cidr: &Cidr) -> u8 {
    if cidr.is_ipv4() { 32 } else { 128 }
}

/// One delete of a batch, resolved.
struct Delete {
    index: usize,
    destination: Cidr,
    hop: IpAddr,
    /// A pod-CIDR pair the router holds no route for ([`State::pairs_only`]): only
    /// the pair goes.
    pair_only: bool,
}

/// One create of a batch, resolved.
struct Create {
    index: usize,
    destination: Cidr,
    hop: IpAddr,
    port: PortInfo,
}

impl Routes for OpenStackRoutes {
    fn provider_name(&self) -> &'static str {
        "openstack"
    }

    /// A list costs the router, its interfaces and a port list per network (3 with
    /// one network, more pages with Neutron's `pagination_max_limit`); a batch its
    /// router write (two in atomic mode with creates and deletes, a read and a write
    /// without) and a read and an update of each node's port changed, charged when
    /// the reply says so.
    fn budget(&self) -> Option<Budget> {
        Some(
            Budget::new(self.budget.0, self.budget.1)
                .requests_per_op(3, 3, 3)
                .requests_per_batch(if self.atomic { 2 } else { 3 }),
        )
    }

    /// The router's routes, anyone's, against Neutron's `max_routes`.
    fn route_tables(&self) -> Vec<TableUsage> {
        match lock(&self.state).routes_held {
            Some(routes) => vec![TableUsage {
                table: format!("router/{}", self.router_id),
                routes,
                limit: self.max_routes,
                by_family: None,
            }],
            None => Vec::new(),
        }
    }

    fn batch_size(&self) -> Option<usize> {
        Some(BATCH_SIZE)
    }

    /// The node has an InternalIP of the route's family, and it was not found
    /// portless since the last list.
    fn preflight(&self, route: &Route, target: &RouteTarget) -> Result<(), CloudError> {
        let (_, hop) = self.create_hop(route, target)?;
        if lock(&self.state).portless.contains(&hop) {
            return Err(self.refuse_portless(target, hop));
        }
        self.check_hop(target, hop)
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

    fn list_routes_each(
        &self,
        _cluster_name: &str,
        nodes: &NodeDirectory,
        each: &mut dyn FnMut(Route),
    ) -> Result<(), CloudError> {
        let router = self.neutron.router(&self.router_id)?;
        let topology = self.read_ports()?;
        let by_instance: HashMap<&str, &str> = nodes
            .provider_ids()
            .filter_map(|(id, name)| Some((instance_id(id)?, name)))
            .collect();
        let every_node_known = nodes
            .names()
            .all(|n| nodes.provider_id_of(n).and_then(instance_id).is_some());
        let mut spelled = HashMap::new();
        let mut held = Vec::new();
        for r in &router.routes {
            let (Ok(destination), Ok(hop)) =
                (Cidr::parse(&r.destination), r.nexthop.parse::<IpAddr>())
            else {
                continue;
            };
            spelled.insert((destination, hop), r.clone());
            if self.ours(&destination) {
                let owner = owner(&topology, &by_instance, every_node_known, &destination, hop);
                held.push((destination, hop, r, owner));
            }
        }
        // A pod CIDR routed to a current node is that node's alone: any other next hop
        // for it (a node's old address, a port since deleted) is a stale route of ours.
        let routed_to_node: HashSet<Cidr> = held
            .iter()
            .filter(|h| matches!(h.3, Some(Owner::Node(_))))
            .map(|h| h.0)
            .collect();
        let mut nexthops = HashMap::new();
        let mut lost_pairs: HashMap<String, (IpAddr, Vec<Cidr>)> = HashMap::new();
        for (destination, hop, r, owner) in held {
            let owner = match owner {
                Some(o) => o,
                None if routed_to_node.contains(&destination) => Owner::Gone,
                // Someone else's route (a VPN appliance, another cluster): never ours
                // to delete.
                None => continue,
            };
            // Someone removed the pair the route needs: given back below.
            if let (Owner::Node(_), Some(port)) = (&owner, topology.ports.get(&hop))
                && !port.open
                && !port.pairs.iter().any(|p| same_pair(p, &destination))
            {
                let lost = lost_pairs
                    .entry(port.id.clone())
                    .or_insert((hop, Vec::new()));
                lost.1.push(destination);
            }
            if matches!(owner, Owner::Node(_)) || !nexthops.contains_key(&destination) {
                nexthops.insert(destination, hop);
            }
            each(Route {
                name: hop.to_string(),
                // No node: the controller deletes it once its view of the nodes is
                // whole, as it deletes the route of a node that is gone.
                target_node: match owner {
                    Owner::Node(node) => node.to_string(),
                    Owner::Gone => String::new(),
                },
                destination_cidr: r.destination.clone(),
                ..Route::default()
            });
        }
        let pairs_only = if every_node_known {
            self.stale_pairs(&topology, &spelled)
        } else {
            HashSet::new()
        };
        for (destination, hop) in &pairs_only {
            each(Route {
                name: hop.to_string(),
                target_node: String::new(),
                destination_cidr: destination.to_string(),
                ..Route::default()
            });
        }
        {
            let mut state = lock(&self.state);
            OpenStackRoutes::learn(&mut state, topology, true);
            state.portless.clear();
            state.routes_held = Some(router.routes.len());
            state.nexthops = nexthops;
            state.spelled = spelled;
            state.pairs_only = pairs_only;
        }
        for (port, (hop, destinations)) in lost_pairs {
            match self.update_pairs(hop, &port, &destinations, &[]) {
                Ok(added) if !added.is_empty() => log::info!(
                    "openstack: port {port} had lost the allowed address pairs {} of its \
                     routes (removed by another writer); given back",
                    added
                        .iter()
                        .map(Cidr::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                Ok(_) => {}
                // The lease was lost meanwhile: the next leader's list gives it back.
                Err(e) if e.kind == CloudErrorKind::Fenced => {}
                Err(e) => log::warn!(
                    "openstack: port {port} lacks the allowed address pairs of its routes \
                     ({}), so their packets are dropped; the next list tries again: {e}",
                    destinations
                        .iter()
                        .map(Cidr::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }
        }
        Ok(())
    }

    fn create_route(
        &self,
        cluster_name: &str,
        name_hint: &str,
        route: &Route,
        target: &RouteTarget,
    ) -> Result<(), CloudError> {
        crate::provider::create_as_batch(self, cluster_name, name_hint, route, target)
    }

    fn delete_route(&self, cluster_name: &str, route: &Route) -> Result<(), CloudError> {
        crate::provider::delete_as_batch(self, cluster_name, route)
    }

    fn apply_changes(
        &self,
        _cluster_name: &str,
        changes: &[RouteChange],
    ) -> Result<Vec<Result<(), CloudError>>, CloudError> {
        let mut outcomes: Vec<Result<(), CloudError>> = vec![Ok(()); changes.len()];
        let mut creates = Vec::new();
        let mut deletes = Vec::new();
        for (index, change) in changes.iter().enumerate() {
            match change {
                RouteChange::Create { route, target, .. } => {
                    let resolved = self
                        .create_hop(route, target)
                        .and_then(|(destination, hop)| match self.port_of(hop)? {
                            Some(port) => {
                                self.check_hop(target, hop)?;
                                Ok(Create {
                                    index,
                                    destination,
                                    hop,
                                    port,
                                })
                            }
                            None => Err(self.refuse_portless(target, hop)),
                        });
                    match resolved {
                        Ok(c) => creates.push(c),
                        Err(e)
                            if matches!(
                                e.kind,
                                CloudErrorKind::Refused { .. } | CloudErrorKind::Invalid
                            ) =>
                        {
                            outcomes[index] = Err(e)
                        }
                        // A lookup that failed for the cloud's reasons fails the batch.
                        Err(e) => return Err(e),
                    }
                }
                RouteChange::Delete { route } => match self.delete_hop(route)? {
                    (destination, Some(hop)) => {
                        let pair_only = lock(&self.state).pairs_only.contains(&(destination, hop));
                        deletes.push(Delete {
                            index,
                            destination,
                            hop,
                            pair_only,
                        })
                    }
                    // No next hop known: the route is in no list of ours.
                    (_, None) => {
                        outcomes[index] = Err(CloudError::new(
                            CloudErrorKind::NotFound,
                            format!(
                                "openstack: no route to {} of ours on router {}",
                                route.destination_cidr, self.router_id
                            ),
                        ))
                    }
                },
            }
        }
        // 1. The pod CIDRs into the ports' pairs, before any route sends traffic there.
        let mut unwind: Vec<(IpAddr, String, Vec<Cidr>)> = Vec::new();
        let mut by_port: HashMap<String, Vec<usize>> = HashMap::new();
        for (i, c) in creates.iter().enumerate().filter(|(_, c)| !c.port.open) {
            by_port.entry(c.port.id.clone()).or_default().push(i);
        }
        let mut ready = vec![true; creates.len()];
        for members in by_port.values() {
            let first = &creates[members[0]];
            let wanted: Vec<Cidr> = members.iter().map(|&m| creates[m].destination).collect();
            if wanted
                .iter()
                .all(|d| first.port.pairs.iter().any(|p| same_pair(p, d)))
            {
                continue; // as last read; a list reconciles a pair lost since
            }
            match self.update_pairs(first.hop, &first.port.id, &wanted, &[]) {
                Ok(added) => unwind.push((first.hop, first.port.id.clone(), added)),
                Err(e) => {
                    for &m in members {
                        ready[m] = false;
                        outcomes[creates[m].index] = Err(CloudError::new(
                            e.kind,
                            format!(
                                "openstack: node route {}: {} (port {})",
                                creates[m].destination, e.message, first.port.id
                            ),
                        ));
                    }
                }
            }
        }
        // 2. The router: every create and delete in one write.
        let adds: Vec<RouteJson> = creates
            .iter()
            .zip(&ready)
            .filter(|(_, r)| **r)
            .map(|(c, _)| RouteJson {
                destination: c.destination.to_string(),
                nexthop: c.hop.to_string(),
            })
            .collect();
        let removes: Vec<RouteJson> = {
            let state = lock(&self.state);
            deletes
                .iter()
                .filter(|d| !d.pair_only)
                .map(|d| {
                    state
                        .spelled
                        .get(&(d.destination, d.hop))
                        .cloned()
                        .unwrap_or_else(|| RouteJson {
                            destination: d.destination.to_string(),
                            nexthop: d.hop.to_string(),
                        })
                })
                .collect()
        };
        let mut deletes_done = true;
        match self.write_router(&adds, &removes) {
            Ok(Some(router)) => lock(&self.state).routes_held = Some(router.routes.len()),
            // Nothing for the router: pairs only.
            Ok(None) => {}
            Err(WriteFailure::Removes(e)) => {
                // The creates are in; the deletes are retried (a pair-only delete
                // with them: its pair goes once no route of the batch may use it).
                deletes_done = false;
                for d in &deletes {
                    outcomes[d.index] = Err(e.clone());
                }
            }
            Err(WriteFailure::Whole(e)) => {
                let e = invalid_routes(e, &creates);
                // Refused as a whole: nothing changed, so the pairs go again. After an
                // ambiguous write the routes may be in; their pairs stay for the retry.
                if e.kind != CloudErrorKind::Ambiguous {
                    for (ip, port, added) in unwind.iter().filter(|u| !u.2.is_empty()) {
                        if let Err(u) = self.update_pairs(*ip, port, &[], added) {
                            log::warn!(
                                "openstack: port {port} keeps a pod CIDR in its allowed address \
                                 pairs after the router write failed; the retry uses it: {u}"
                            );
                        }
                    }
                }
                return Err(e);
            }
        }
        {
            let mut state = lock(&self.state);
            for (c, _) in creates.iter().zip(&ready).filter(|(_, r)| **r) {
                state.nexthops.insert(c.destination, c.hop);
            }
        }
        if !deletes_done {
            return Ok(outcomes);
        }
        // 3. The pairs out of the ports, once no route sends traffic there.
        for d in &deletes {
            let (index, destination, hop) = (&d.index, &d.destination, &d.hop);
            {
                let mut state = lock(&self.state);
                state.pairs_only.remove(&(*destination, *hop));
                // A pair-only delete removed no route: a next hop to the same address
                // is a create's of this batch, whose pair must stay.
                if !d.pair_only && state.nexthops.get(destination) == Some(hop) {
                    state.nexthops.remove(destination);
                }
            }
            let port = match self.port_of(*hop) {
                Ok(Some(p)) => p,
                // The node's port is gone with its instance: nothing to remove.
                Ok(None) => continue,
                Err(e) => {
                    outcomes[*index] = Err(e);
                    continue;
                }
            };
            if port.open
                || !port.pairs.iter().any(|p| same_pair(p, destination))
                || self.routed_to_port(destination, &port.id)
            {
                continue;
            }
            match self.update_pairs(*hop, &port.id, &[], std::slice::from_ref(destination)) {
                Ok(_)
                | Err(CloudError {
                    kind: CloudErrorKind::NotFound,
                    ..
                }) => {}
                Err(e) => {
                    outcomes[*index] = Err(CloudError::new(
                        e.kind,
                        format!(
                            "{} (the route to {destination} is gone; its pair stays on port {} \
                             until the delete is retried)",
                            e.message, port.id
                        ),
                    ))
                }
            }
        }
        Ok(outcomes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards the mapping of Neutron's `400 InvalidRoutes` to a batch refused whole:
    /// the one create its message lists is named at fault; a message listing several
    /// (Neutron may list the router's whole route set) names none, and the controller
    /// splits the batch instead of refusing a healthy route.
    #[test]
    fn invalid_routes_names_a_create_only_when_it_is_the_one_listed() {
        let create = |index: usize, i: u8| Create {
            index,
            destination: Cidr::parse(&format!("10.244.{i}.0/24")).unwrap(),
            hop: format!("10.0.0.{i}").parse().unwrap(),
            port: PortInfo {
                id: format!("port-{i}"),
                device_id: String::new(),
                device_owner: String::new(),
                subnet_id: String::new(),
                pairs: Vec::new(),
                open: true,
            },
        };
        let creates = [create(0, 1), create(2, 2)];
        let refusal = |routes: &str| {
            CloudError::invalid(format!(
                "openstack: PUT add_extraroutes: HTTP 400 InvalidRoutes: Invalid format for \
                 routes: [{routes}], the nexthop is not connected with router"
            ))
        };
        let one = "{'destination': '10.244.2.0/24', 'nexthop': '10.0.0.2'}";
        let e = invalid_routes(refusal(one), &creates);
        assert_eq!(
            e.kind,
            CloudErrorKind::BatchRefused {
                reason: "InvalidRoutes",
                at_fault: Some(2)
            }
        );
        let both = format!("{one}, {{'destination': '10.244.1.0/24', 'nexthop': '10.0.0.1'}}");
        let e = invalid_routes(refusal(&both), &creates);
        assert_eq!(
            e.kind,
            CloudErrorKind::BatchRefused {
                reason: "InvalidRoutes",
                at_fault: None
            }
        );
        let other = CloudError::invalid("openstack: HTTP 403 Forbidden: policy");
        assert_eq!(
            invalid_routes(other, &creates).kind,
            CloudErrorKind::Invalid
        );
    }

    /// Guards the pairs taken as pod CIDRs: a host's address with its subnet's
    /// length (`10.0.0.5/24`, a VIP as some tools write it) is not the network
    /// `10.0.0.0/24`, so it is never removed or counted as a pod CIDR's pair.
    #[test]
    fn a_pair_is_a_pod_cidr_only_when_it_is_the_network_itself() {
        let pair = |a: &str| AddressPair {
            ip_address: a.to_string(),
            mac_address: None,
        };
        let net = Cidr::parse("10.0.0.0/24").unwrap();
        assert!(same_pair(&pair("10.0.0.0/24"), &net));
        assert!(!same_pair(&pair("10.0.0.5/24"), &net));
        assert!(!same_pair(&pair("10.0.0.0/25"), &net));
        assert!(!same_pair(&pair("10.0.0.0"), &net));
        let host = Cidr::parse("10.0.0.5/32").unwrap();
        assert!(same_pair(&pair("10.0.0.5"), &host));
        assert!(same_pair(&pair("10.0.0.5/32"), &host));
        let v6 = Cidr::parse("fd00:10:244:1::/64").unwrap();
        assert!(same_pair(&pair("fd00:10:244:1:0::/64"), &v6));
        assert!(!same_pair(&pair("fd00:10:244:1::5/64"), &v6));
        assert_eq!(
            pod_cidr_pair(&pair("10.244.1.0/24")),
            Cidr::parse("10.244.1.0/24").ok()
        );
        assert_eq!(pod_cidr_pair(&pair("10.244.1.5/24")), None);
        assert_eq!(pod_cidr_pair(&pair("10.244.1.5/32")), None);
        assert_eq!(pod_cidr_pair(&pair("10.244.1.5")), None);
    }

    #[test]
    fn provider_ids_name_their_instance() {
        assert_eq!(instance_id("openstack:///abc-1"), Some("abc-1"));
        assert_eq!(instance_id("openstack://RegionOne/abc-1"), Some("abc-1"));
        assert_eq!(instance_id("aws:///abc"), None);
        assert_eq!(instance_id("openstack:///"), None);
    }
}
