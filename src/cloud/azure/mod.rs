//! The Azure provider: the routes of one route table, each sending a pod CIDR to the
//! private IP of a node's VM (`VirtualAppliance` next hop), named as
//! cloud-provider-azure names them so that a cluster switching over adopts its routes
//! with zero writes.
//!
//! - **List**: one `GET` of the route table. The table (its ETag and every route, the
//!   cluster's and others') is kept for the next write. A route's node is read from its
//!   name ([`node_of_route_name`]); a route whose next hop is `None` is a blackhole.
//! - **Apply** ([`Routes::apply_changes`]): the batch's creates and deletes are merged
//!   into the table last read, and the table is written whole in one `PUT` with
//!   `If-Match: <ETag>`, its long-running operation polled to the end, and the table
//!   read back: a change is reported done only if the table read back holds it. A 412
//!   (another writer changed the table since our read) re-reads the table and merges
//!   again once; a second 412 fails the batch as a conflict, and the controller lists
//!   and re-plans. A batch whose changes the table already holds writes nothing.
//! - **Pre-flight**: a create needs the node VM's NIC to have IP forwarding on, or
//!   Azure drops the pod traffic the route sends there without a word (cloud-provider-
//!   azure does not check). The NIC is found from the node's providerID (VM `GET`, NIC
//!   `GET`) and cached, so steady state sends no lookup.
//!
//! The request budget is the controller's: the provider declares it (a share of ARM's
//! per-subscription token buckets) and reports ARM's `x-ms-ratelimit-remaining-*` and
//! `Retry-After` with every reply. Writes to the table run one at a time, as ARM
//! serialises them anyway (`RetryableErrorDueToAnotherOperation`).
//!
//! This provider never decides which routes to delete (the controller's cluster-CIDR
//! rule does), never changes a route it was not asked to change (others' routes are
//! written back byte for byte as read), and never logs a token or secret.

mod arm;
mod auth;
mod config;
mod table;

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

pub use config::{
    Config, ConfigError, DEFAULT_ROUTE_TABLE_LIMIT, ENV_AUTHORITY_HOST, ENV_CLIENT_ID,
    ENV_CLIENT_SECRET, ENV_ENVIRONMENT_FILEPATH, ENV_FEDERATED_TOKEN_FILE, ENV_IMDS_ENDPOINT,
    ENV_TENANT_ID, Endpoints, Identity, KEYS,
};

use arm::{Arm, ArmError};
use table::{Outcome, Prepared, Table, merge, text};
pub use table::{is_valid_route_name, node_of_route_name, route_name, short_node_name};

use crate::fence::Fence;
use crate::model::{Cidr, Route};
use crate::provider::{
    Budget, CloudError, CloudErrorKind, NodeDirectory, RouteChange, RouteTarget, Routes, TableUsage,
};

/// The Microsoft.Network API version of route tables and NICs (armnetwork v9's, the
/// SDK cloud-provider-azure builds on).
pub const NETWORK_API_VERSION: &str = "2025-05-01";

/// Why a cloud that does not serve [`NETWORK_API_VERSION`] is refused at start.
/// Azure Stack Hub serves only its profile's older api-versions and signs in through
/// AD FS or Entra ID's v1 path; this provider sends the public cloud's versions and
/// the v2.0 token path, and no Stack Hub was at hand to prove a switch to its profile
/// (as cloud-provider-azure makes), so it says so instead of failing at every pass.
pub const AZURE_STACK_HUB: &str = "this cloud does not serve the public cloud's \
    api-versions this provider sends (Azure Stack Hub serves only its profile's): Azure \
    Stack Hub is not supported; run cloud-provider-azure's route controller there";

/// ARM's codes for an api-version or resource type the cloud does not serve.
fn is_unserved_api_version(code: &str) -> bool {
    matches!(
        code,
        "NoRegisteredProviderFound" | "InvalidApiVersionParameter" | "InvalidResourceType"
    )
}
/// The Microsoft.Compute API version of VMs and scale-set VMs (armcompute v8's).
pub const COMPUTE_API_VERSION: &str = "2026-04-01";
/// Scale-set VM NICs live under Microsoft.Compute, served at this version only.
const VMSS_NIC_API_VERSION: &str = "2018-10-01";

/// cloud-provider-azure's separator between the node name and the CIDR in a route
/// name (`consts.RouteNameSeparator`).
pub const ROUTE_NAME_SEPARATOR: &str = "____";

/// `NetworkUnavailable` reason: the node's NIC has IP forwarding off.
pub const IP_FORWARDING_DISABLED: &str = "IPForwardingDisabled";
/// `NetworkUnavailable` reason: the node's InternalIP is not on its VM's NIC.
pub const INTERNAL_IP_NOT_ON_NIC: &str = "InternalIPNotOnNIC";
/// `NetworkUnavailable` reason: the node has no InternalIP of the pod CIDR's family.
pub const NO_INTERNAL_IP: &str = "NoInternalIPOfFamily";
/// `NetworkUnavailable` reason: ARM refused the route's name (`InvalidResourceName`).
pub const INVALID_ROUTE_NAME: &str = "InvalidRouteName";
/// `NetworkUnavailable` reason: the node's providerID names no Azure VM (yet).
pub const NOT_AN_AZURE_VM: &str = "ProviderIDNotAzureVM";

/// How long a NIC that passed the check is trusted (its forwarding flag could be
/// turned off, which a later lookup would notice).
const NIC_MAX_AGE: Duration = Duration::from_secs(600);

/// What is known of a node VM's primary NIC.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Nic {
    id: String,
    ip_forwarding: bool,
    private_ips: Vec<IpAddr>,
}

impl Nic {
    fn name(&self) -> &str {
        self.id.rsplit('/').next().unwrap_or(&self.id)
    }

    fn resource_group(&self) -> &str {
        segment_after(&self.id, "resourceGroups").unwrap_or("<resource group>")
    }
}

/// The Azure implementation of [`Routes`]. Safe to share between threads.
#[derive(Debug)]
pub struct AzureRoutes {
    arm: Arm,
    table_path: String,
    table_name: String,
    route_limit: usize,
    budget: (f64, u32),
    /// The table as last read (list, or the read-back after a write); `None` after a
    /// write whose outcome is unknown.
    table: Mutex<Option<Table>>,
    /// Routes in the table at the last read, for [`Routes::route_tables`].
    routes_in_table: Mutex<usize>,
    /// NICs that forward, by node VM (lower case), with when they were looked up.
    nics: Mutex<HashMap<String, (Nic, Instant)>>,
}

impl AzureRoutes {
    /// Builds the provider: gets a token (a wrong identity fails here, naming its
    /// keys) and reads the route table once. Errors name the key to fix; an outage of
    /// Azure is marked as such.
    pub fn connect(config: Config) -> Result<AzureRoutes, ConfigError> {
        for (what, url) in [
            (
                "resourceManagerEndpoint",
                &config.endpoints.resource_manager,
            ),
            ("activeDirectoryEndpoint", &config.endpoints.authority),
        ] {
            if !url.starts_with("https://") && !is_loopback(url) {
                log::warn!(
                    "azure: {what} {url} is not HTTPS: tokens and secrets would cross the \
                     network in the clear; use an https:// endpoint"
                );
            }
        }
        let arm = Arm::new(&config);
        let at_start = |key: &'static str, e: CloudError| match e.kind {
            CloudErrorKind::Invalid | CloudErrorKind::Refused { .. } => {
                ConfigError::new(key, e.message)
            }
            _ => ConfigError::outage(key, e.message),
        };
        arm.check_identity().map_err(|e| at_start("identity", e))?;
        let provider = AzureRoutes {
            arm,
            table_path: config.route_table_id(),
            table_name: config.route_table_name.clone(),
            route_limit: config.route_table_limit,
            budget: (config.rate_limit_per_second, config.rate_limit_burst),
            table: Mutex::new(None),
            routes_in_table: Mutex::new(0),
            nics: Mutex::new(HashMap::new()),
        };
        let table = provider
            .read_table()
            .map_err(|e| at_start("routeTableName", e.into()))?;
        log::info!(
            "azure: managing the routes of route table {} ({} in {}, cloud {}, as {}); {} routes \
             in it now, limit {}",
            provider.table_name,
            config.route_table_resource_group,
            if config.location.is_empty() {
                "its location"
            } else {
                &config.location
            },
            config.endpoints.name,
            config.identity.describe(),
            table.routes().len(),
            provider.route_limit
        );
        Ok(provider)
    }

    /// Every request from now on first passes `fence` (leader election's): after the
    /// lease is lost nothing is sent, and a write stops between its PUT and the polls
    /// of its operation. Call it after `connect`, whose requests precede the election.
    pub fn with_fence(mut self, fence: Fence) -> AzureRoutes {
        self.arm.set_fence(fence);
        self
    }

    // --- the table ----------------------------------------------------------------

    /// Reads the table and keeps it for the next write.
    fn read_table(&self) -> Result<Table, ArmError> {
        let reply = self
            .arm
            .get(&self.table_path, NETWORK_API_VERSION, "routeTables")
            .map_err(|e| {
                if e.is_not_found() {
                    ArmError {
                        kind: CloudErrorKind::Invalid,
                        message: format!(
                            "{}; the route table must exist (cloud-provider-azure or the \
                             cluster's installer creates it)",
                            e.message
                        ),
                        ..e
                    }
                } else if e.code.as_deref().is_some_and(is_unserved_api_version) {
                    ArmError {
                        kind: CloudErrorKind::Invalid,
                        message: format!("{}; {AZURE_STACK_HUB}", e.message),
                        ..e
                    }
                } else {
                    e
                }
            })?;
        let table = Table {
            etag: reply.etag,
            body: reply.body,
        };
        *crate::sync::lock(&self.routes_in_table) = table.routes().len();
        *crate::sync::lock(&self.table) = Some(table.clone());
        Ok(table)
    }

    /// The table as last read, or a fresh read if none is kept.
    fn current_table(&self) -> Result<Table, ArmError> {
        if let Some(t) = crate::sync::lock(&self.table).clone() {
            return Ok(t);
        }
        self.read_table()
    }

    fn forget_table(&self) {
        *crate::sync::lock(&self.table) = None;
    }

    // --- writing ------------------------------------------------------------------

    /// Merges `changes` into the table and writes it, once more on a fresh read after
    /// a 412. The outcome of each change that needed the write is decided by the table
    /// read back.
    fn write(&self, changes: &[Prepared]) -> Result<Vec<Result<(), CloudError>>, CloudError> {
        for attempt in 0..2 {
            let table = if attempt == 0 {
                self.current_table()?
            } else {
                self.read_table()?
            };
            let merged = merge(table.routes(), changes, self.route_limit, &self.table_name);
            if !merged.changed {
                return Ok(merged.outcomes.into_iter().map(Outcome::settled).collect());
            }
            // Without an ETag the write could overwrite another writer's change.
            let Some(etag) = table.etag.as_deref() else {
                self.forget_table();
                return Err(CloudError::new(
                    CloudErrorKind::Retry { after: None },
                    format!(
                        "azure: route table {} was read without an ETag; it is not written \
                         without If-Match, which could undo another writer's change",
                        self.table_name
                    ),
                ));
            };
            let body = table.with_routes(merged.routes);
            match self.arm.put_and_wait(
                &self.table_path,
                NETWORK_API_VERSION,
                &body,
                Some(etag),
                "routeTables",
            ) {
                Ok(_) => return self.read_back(changes, merged.outcomes),
                Err(e) if e.is_precondition_failed() => {
                    self.forget_table();
                    log::info!(
                        "azure: route table {} changed since it was read (412); reading it \
                         again and merging the {} changes anew",
                        self.table_name,
                        changes.len()
                    );
                }
                Err(e) => {
                    self.forget_table();
                    return Err(e.into());
                }
            }
        }
        Err(CloudError::new(
            CloudErrorKind::Conflict,
            format!(
                "azure: route table {}: another writer changed it between our read and our \
                 write twice (412 PreconditionFailed); nothing of this batch was written, it \
                 is planned again from a fresh list",
                self.table_name
            ),
        ))
    }

    /// After a write Azure reported done: reads the table back and reports each
    /// change done only if the table holds it.
    fn read_back(
        &self,
        changes: &[Prepared],
        outcomes: Vec<Outcome>,
    ) -> Result<Vec<Result<(), CloudError>>, CloudError> {
        let table = self.read_table().map_err(|e| {
            CloudError::ambiguous(format!(
                "azure: route table {}: written, but it could not be read back ({}); the \
                 changes are confirmed by the next list",
                self.table_name, e.message
            ))
        })?;
        Ok(changes
            .iter()
            .zip(outcomes)
            .map(|(change, outcome)| match outcome {
                Outcome::Written if change.is_held_by(table.routes()) => Ok(()),
                Outcome::Written => Err(CloudError::ambiguous(format!(
                    "azure: route table {}: Azure reported the write done, but the table read \
                     back does not hold {}; not counted as done",
                    self.table_name,
                    change.describe()
                ))),
                other => other.settled(),
            })
            .collect())
    }

    // --- the pre-flight check -----------------------------------------------------

    /// What a create sends as its next hop, once the node passed the checks: the
    /// node's InternalIP of the CIDR's family, on a NIC that forwards.
    fn check_create(&self, route: &Route, target: &RouteTarget) -> Result<Prepared, CloudError> {
        let cidr = Cidr::parse(&route.destination_cidr).map_err(|e| {
            CloudError::invalid(format!("azure: route for node {}: {e}", target.node_name))
        })?;
        let next_hop = target
            .addresses
            .iter()
            .filter(|a| a.kind == "InternalIP")
            .filter_map(|a| a.address.parse::<IpAddr>().ok())
            .find(|ip| ip.is_ipv4() == cidr.is_ipv4())
            .ok_or_else(|| {
                CloudError::refused(
                    NO_INTERNAL_IP,
                    false,
                    format!(
                        "azure: node {} has no InternalIP of the family of {cidr} to route it \
                         to; for an IPv6 pod CIDR the VM's NIC needs an IPv6 address and the \
                         kubelet must report it",
                        target.node_name
                    ),
                )
            })?;
        let nic = self.nic_of(target)?;
        if !nic.ip_forwarding {
            return Err(CloudError::refused(
                IP_FORWARDING_DISABLED,
                false,
                format!(
                    "azure: NIC {} of node {} has IP forwarding off, so Azure would drop the \
                     pod traffic a route to {next_hop} sends it; turn it on: az network nic \
                     update -g {} -n {} --ip-forwarding true (for a scale set: set \
                     enableIPForwarding in its network profile and update the instances)",
                    nic.name(),
                    target.node_name,
                    nic.resource_group(),
                    nic.name()
                ),
            ));
        }
        if !nic.private_ips.contains(&next_hop) {
            return Err(CloudError::refused(
                INTERNAL_IP_NOT_ON_NIC,
                false,
                format!(
                    "azure: node {}'s InternalIP {next_hop} is not an address of its VM's \
                     primary NIC {} ({:?}); a route to it would not reach the node: check the \
                     kubelet's --node-ip",
                    target.node_name,
                    nic.name(),
                    nic.private_ips
                ),
            ));
        }
        let name = route_name(&target.node_name, &route.destination_cidr);
        if !is_valid_route_name(&name) {
            // route_name always makes a valid name; this guards a change of it.
            return Err(CloudError::refused(
                INVALID_ROUTE_NAME,
                true,
                format!(
                    "azure: route name {name:?} for node {} breaks ARM's rule (1 to 80 \
                     characters of letters, digits, '_', '.' and '-', beginning with a letter \
                     or digit, ending with one or '_')",
                    target.node_name
                ),
            ));
        }
        Ok(Prepared::Create {
            cidr,
            name,
            node: target.node_name.clone(),
            prefix: route.destination_cidr.clone(),
            next_hop,
        })
    }

    /// The primary NIC of the node's VM: cached, else VM `GET` and NIC `GET`.
    fn nic_of(&self, target: &RouteTarget) -> Result<Nic, CloudError> {
        let vm = target
            .provider_id
            .as_deref()
            .and_then(vm_path)
            .ok_or_else(|| {
                CloudError::refused(
                    NOT_AN_AZURE_VM,
                    false,
                    format!(
                        "azure: node {} has providerID {:?}, not an Azure VM's \
                         (azure:///subscriptions/…/virtualMachines/…); cloud-node-manager sets \
                         it when the node registers",
                        target.node_name,
                        target.provider_id.as_deref().unwrap_or("")
                    ),
                )
            })?;
        let key = vm.to_ascii_lowercase();
        if let Some((nic, at)) = crate::sync::lock(&self.nics).get(&key)
            && at.elapsed() < NIC_MAX_AGE
        {
            return Ok(nic.clone());
        }
        let nic = self.look_up_nic(vm, &target.node_name)?;
        // Only a NIC that passes is kept: one refused is looked at again whenever the
        // controller tries the node again (after a list or a change of the node), so
        // that turning forwarding on is noticed without a restart.
        if nic.ip_forwarding {
            crate::sync::lock(&self.nics).insert(key, (nic.clone(), Instant::now()));
        }
        Ok(nic)
    }

    fn look_up_nic(&self, vm: &str, node: &str) -> Result<Nic, CloudError> {
        let reply = self
            .arm
            .get(vm, COMPUTE_API_VERSION, "virtualMachines")
            .map_err(|e| self.lookup_error(e, node, "VM"))?;
        let nics = reply
            .body
            .pointer("/properties/networkProfile/networkInterfaces")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let primary = nics
            .iter()
            .find(|n| n.pointer("/properties/primary").and_then(Value::as_bool) == Some(true))
            .or_else(|| nics.first())
            .map(|n| text(n, "/id").to_string())
            .filter(|id| id.starts_with("/subscriptions/"))
            .ok_or_else(|| {
                CloudError::invalid(format!(
                    "azure: VM {vm} of node {node} lists no network interface"
                ))
            })?;
        let version = if primary.contains("/virtualMachineScaleSets/") {
            VMSS_NIC_API_VERSION
        } else {
            NETWORK_API_VERSION
        };
        let reply = self
            .arm
            .get(&primary, version, "networkInterfaces")
            .map_err(|e| self.lookup_error(e, node, "NIC"))?;
        Ok(parse_nic(&primary, &reply.body))
    }

    fn lookup_error(&self, e: ArmError, node: &str, what: &str) -> CloudError {
        if e.is_not_found() {
            return CloudError::refused(
                NOT_AN_AZURE_VM,
                false,
                format!(
                    "azure: the {what} of node {node} does not exist ({}); is the node's \
                     providerID current?",
                    e.message
                ),
            );
        }
        e.into()
    }
}

impl Routes for AzureRoutes {
    fn provider_name(&self) -> &'static str {
        "azure"
    }

    /// A share of ARM's per-subscription buckets (2024 throttling: writes 200 tokens,
    /// refilled 10 a second; reads 250 and 25), which the CCM's other controllers
    /// share. A list is one `GET`; a batch is charged its `PUT`, one poll of its
    /// operation and the read back, and corrected by what it really sent.
    fn budget(&self) -> Option<Budget> {
        Some(
            Budget::new(self.budget.0, self.budget.1)
                .mutations_at_once(1)
                .requests_per_batch(3),
        )
    }

    /// The whole table goes in one write; a batch never holds more changes than a
    /// full table's deletes and creates.
    fn batch_size(&self) -> Option<usize> {
        Some(self.route_limit.saturating_mul(2).max(1))
    }

    /// The table, with every route in it (others' too) and its limit
    /// (`routeTableRouteLimit`, default [`DEFAULT_ROUTE_TABLE_LIMIT`]).
    fn route_tables(&self) -> Vec<TableUsage> {
        vec![TableUsage {
            table: self.table_name.clone(),
            routes: *crate::sync::lock(&self.routes_in_table),
            limit: self.route_limit,
            by_family: None,
        }]
    }

    /// The node has an InternalIP of the CIDR's family, and its VM's primary NIC holds
    /// that address and forwards IP traffic.
    fn preflight(&self, route: &Route, target: &RouteTarget) -> Result<(), CloudError> {
        self.check_create(route, target).map(|_| ())
    }

    fn list_routes(
        &self,
        _cluster_name: &str,
        nodes: &NodeDirectory,
    ) -> Result<Vec<Route>, CloudError> {
        let table = self.read_table()?;
        let names = table::NodeNames::new(nodes.names());
        Ok(table
            .routes()
            .iter()
            .map(|r| table::to_route(r, &names))
            .collect())
    }

    fn create_route(
        &self,
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
        single(self.apply_changes(cluster_name, std::slice::from_ref(&change)))
    }

    fn delete_route(&self, cluster_name: &str, route: &Route) -> Result<(), CloudError> {
        let change = RouteChange::Delete {
            route: route.clone(),
        };
        single(self.apply_changes(cluster_name, std::slice::from_ref(&change)))
    }

    fn apply_changes(
        &self,
        _cluster_name: &str,
        changes: &[RouteChange],
    ) -> Result<Vec<Result<(), CloudError>>, CloudError> {
        let mut outcomes: Vec<Option<Result<(), CloudError>>> = vec![None; changes.len()];
        let mut prepared = Vec::new();
        let mut positions = Vec::new();
        for (i, change) in changes.iter().enumerate() {
            let ready = match change {
                RouteChange::Create { route, target, .. } => self.check_create(route, target),
                RouteChange::Delete { route } => Prepared::delete(route),
                #[allow(unreachable_patterns)]
                _ => Err(CloudError::invalid(
                    "azure: a kind of change this provider does not know",
                )),
            };
            match ready {
                Ok(p) => {
                    prepared.push(p);
                    positions.push(i);
                }
                // A fenced lookup stops the batch: nothing more may be sent.
                Err(e) if e.kind == CloudErrorKind::Fenced => return Err(e),
                Err(e) => outcomes[i] = Some(Err(e)),
            }
        }
        if !prepared.is_empty() {
            let written = self
                .write(&prepared)
                .map_err(|e| at_fault(e, &prepared, &positions))?;
            for (i, outcome) in positions.into_iter().zip(written) {
                outcomes[i] = Some(outcome);
            }
        }
        Ok(outcomes
            .into_iter()
            .map(|o| o.unwrap_or_else(|| Err(CloudError::ambiguous("azure: change not applied"))))
            .collect())
    }
}

/// ARM refuses the whole table for one route it holds invalid, and its message names
/// the route (`Resource name <name> is invalid. ...`): the change that made that route,
/// by its position in the batch, is the one at fault.
fn at_fault(e: CloudError, prepared: &[Prepared], positions: &[usize]) -> CloudError {
    let CloudErrorKind::BatchRefused { reason, .. } = e.kind else {
        return e;
    };
    let named = prepared
        .iter()
        .position(|p| matches!(p, Prepared::Create { name, .. } if e.message.contains(&format!(" {name} "))))
        .and_then(|i| positions.get(i).copied());
    CloudError::batch_refused(reason, named, e.message)
}

/// The one outcome of a batch of one.
fn single(result: Result<Vec<Result<(), CloudError>>, CloudError>) -> Result<(), CloudError> {
    result?
        .into_iter()
        .next()
        .unwrap_or_else(|| Err(CloudError::ambiguous("azure: no outcome")))
}

/// Whether `url` is on this host (a test double, a local proxy).
fn is_loopback(url: &str) -> bool {
    let host = url
        .split("://")
        .nth(1)
        .unwrap_or("")
        .split(['/', ':'])
        .next()
        .unwrap_or("");
    host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The VM's resource path of a node's providerID: `azure:///subscriptions/…/
/// virtualMachines/<vm>`, or a scale set's `…/virtualMachineScaleSets/<ss>/
/// virtualMachines/<n>`.
fn vm_path(provider_id: &str) -> Option<&str> {
    let path = provider_id.strip_prefix("azure://")?;
    let lower = path.to_ascii_lowercase();
    (lower.starts_with("/subscriptions/")
        && lower.contains("/providers/microsoft.compute/")
        && lower.contains("/virtualmachines/")
        && !path.contains(['?', '#', ' ']))
    .then_some(path)
}

fn segment_after<'a>(id: &'a str, key: &str) -> Option<&'a str> {
    let mut parts = id.split('/');
    while let Some(p) = parts.next() {
        if p.eq_ignore_ascii_case(key) {
            return parts.next();
        }
    }
    None
}

fn parse_nic(id: &str, body: &Value) -> Nic {
    let private_ips = body
        .pointer("/properties/ipConfigurations")
        .and_then(Value::as_array)
        .map(|configs| {
            configs
                .iter()
                .filter_map(|c| text(c, "/properties/privateIPAddress").parse().ok())
                .collect()
        })
        .unwrap_or_default();
    Nic {
        id: id.to_string(),
        ip_forwarding: body
            .pointer("/properties/enableIPForwarding")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        private_ips,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn provider_ids_of_vms_and_scale_set_vms_are_read() {
        let vm = "azure:///subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/vm-0";
        assert_eq!(
            vm_path(vm),
            Some(
                "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/vm-0"
            )
        );
        let ss = "azure:///subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/ss/virtualMachines/3";
        assert!(vm_path(ss).is_some());
        assert_eq!(vm_path("aws:///i-1"), None);
        assert_eq!(vm_path("azure:///subscriptions/s/x?y"), None);
        let nic = parse_nic(
            "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/networkInterfaces/nic-0",
            &json!({"properties": {"enableIPForwarding": true, "ipConfigurations": [
                {"properties": {"privateIPAddress": "10.240.0.4"}},
                {"properties": {"privateIPAddress": "fd00::4"}}]}}),
        );
        assert!(nic.ip_forwarding);
        assert_eq!(nic.private_ips.len(), 2);
        assert_eq!((nic.name(), nic.resource_group()), ("nic-0", "rg"));
    }
}
