//! The AWS EC2 provider: each pod CIDR is a route in one VPC route table, pointing at
//! the node's instance (`InstanceId`), as upstream's AWS cloud provider does it.
//!
//! - **Which table:** an explicit route table ID, or the one table tagged for the
//!   cluster (`kubernetes.io/cluster/<cluster name>` with any value, or the legacy
//!   `KubernetesCluster=<cluster name>`), found with server-side tag filters once and
//!   cached; it is looked up again only if EC2 says the table is gone.
//! - **Instance ↔ node:** through the node's `spec.providerID` (`aws:///ZONE/i-…`).
//!   A route to an instance that is not a known node is resolved with
//!   `DescribeInstances` (private DNS name or instance ID as the node name); a route to
//!   an instance that no longer exists is reported as a blackhole with no target, and
//!   never fails the list.
//! - **Calls:** list = one `DescribeRouteTables` (plus `DescribeInstances` only for
//!   instances that are not nodes); create = `CreateRoute`, preceded once per instance
//!   and process by `ModifyInstanceAttribute SourceDestCheck=false`; delete =
//!   `DeleteRoute`. All calls of the provider share one client-side rate limiter that
//!   backs off as a whole when EC2 throttles.
//!
//! It never decides which routes to delete (the controller does), never deletes a
//! route it was not asked to, never logs credentials, and never retries a mutation on
//! its own: an uncertain outcome is reported as ambiguous for the controller to check.

#[doc(hidden)]
pub mod credentials;
#[doc(hidden)]
pub mod ec2;
#[doc(hidden)]
pub mod query;
#[doc(hidden)]
pub mod sigv4;
#[doc(hidden)]
pub mod xml;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::RngExt;

use self::credentials::{AwsEnv, CredentialSource, Imds, resolve_region};
use self::ec2::{
    CREATE_ROUTE, CallError, CallKind, DELETE_ROUTE, DESCRIBE_INSTANCES, DESCRIBE_ROUTE_TABLES,
    Instance, LEGACY_CLUSTER_TAG, MODIFY_INSTANCE_ATTRIBUTE, REPLACE_ROUTE, RouteTable,
    ThrottleBackoff, cluster_tag_key, instance_id_from_provider_id, is_instance_id, is_throttling,
    parse_instances, parse_route_tables,
};
use self::query::{Endpoint, Params, QueryClient, QueryClientConfig, QueryError};
use self::xml::Element;
use crate::model::{Cidr, Route};
use crate::provider::{Budget, CloudError, CloudErrorKind, NodeDirectory, RouteTarget, Routes};
use crate::ratelimit::RateLimiter;
use crate::sync::lock;

/// The EC2 API version of every request.
pub const EC2_API_VERSION: &str = "2016-11-15";
/// `DescribeInstances` takes at most this many `InstanceId.N` per request here.
const INSTANCE_BATCH: usize = 100;
/// A defence against a server that never stops paging.
const MAX_PAGES: usize = 1000;
/// The per-instance memories (source/dest check done, instance gone) are forgotten
/// beyond this many instances, so that years of instance churn cannot grow them
/// without bound; forgetting costs at most one repeated call per instance.
const MAX_REMEMBERED_INSTANCES: usize = 10_000;

/// Settings of the AWS provider. Every field has a default ([`AwsConfig::default`]).
#[derive(Clone, Debug, PartialEq)]
pub struct AwsConfig {
    /// The region. Default: `AWS_REGION`, `AWS_DEFAULT_REGION`, the profile's `region`
    /// in `~/.aws/config`, then the instance's own region from IMDS.
    pub region: Option<String>,
    /// The EC2 endpoint URL. Default: `AWS_ENDPOINT_URL_EC2`, `AWS_ENDPOINT_URL`, then
    /// `https://ec2.<region>.amazonaws.com/`. Tests point it at moto.
    pub endpoint: Option<String>,
    /// The route table to manage. Default: the one table tagged for the cluster.
    pub route_table_id: Option<String>,
    /// The instance metadata endpoint. Default: `AWS_EC2_METADATA_SERVICE_ENDPOINT`,
    /// then `http://169.254.169.254`.
    pub imds_endpoint: Option<String>,
    /// Client-side limit on EC2 calls (default 5 per second): the documented refill
    /// rate of EC2's per-account bucket for mutating calls, which this controller
    /// shares with everything else in the account and region.
    pub requests_per_second: f64,
    /// Calls that may go out at once before the rate applies (default 20): enough for
    /// a node's routes and a list, small enough to leave most of the account's bucket
    /// to other tools.
    pub burst: u32,
    /// Timeout of one request (default 20 s); connecting times out after 5 s.
    pub timeout: Duration,
}

impl Default for AwsConfig {
    fn default() -> AwsConfig {
        AwsConfig {
            region: None,
            endpoint: None,
            route_table_id: None,
            imds_endpoint: None,
            requests_per_second: 5.0,
            burst: 20,
            timeout: Duration::from_secs(20),
        }
    }
}

/// The EC2 provider. Safe to share between the cloud worker threads.
pub struct AwsProvider {
    ec2: QueryClient,
    limiter: RateLimiter,
    /// Requests per second and burst, declared to the controller.
    budget: (f64, u32),
    throttle: Mutex<ThrottleBackoff>,
    configured_table: Option<String>,
    /// `(cluster name, route table ID)` found by tag.
    discovered: Mutex<Option<(String, String)>>,
    /// Instances whose source/destination check this process has disabled; one lock
    /// per instance so that concurrent creates for one node call EC2 once.
    source_dest_check: Mutex<HashMap<String, Arc<Mutex<bool>>>>,
    /// Instances known to be terminated or gone: that never changes back.
    gone: Mutex<HashSet<String>>,
    calls: Mutex<BTreeMap<&'static str, u64>>,
}

impl fmt::Debug for AwsProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AwsProvider")
            .field("ec2", &self.ec2)
            .field("route_table", &self.configured_table)
            .finish_non_exhaustive()
    }
}

impl AwsProvider {
    /// Resolves region, endpoint and credentials from `config` and `env`. When the
    /// credentials come from the instance role, they are fetched now, so that a
    /// machine without a role fails at start and not at its first route.
    pub fn new(config: AwsConfig, env: &AwsEnv) -> Result<AwsProvider, CloudError> {
        if config.requests_per_second.is_nan()
            || config.requests_per_second <= 0.0
            || config.burst == 0
        {
            return Err(CloudError::invalid(format!(
                "AWS rate limit {} per second with burst {} is unusable: both must be positive",
                config.requests_per_second, config.burst
            )));
        }
        let imds = Imds::from_env(env, config.imds_endpoint.as_deref());
        let region = resolve_region(config.region.as_deref(), env, imds.as_ref())?;
        let endpoint = resolve_endpoint(config.endpoint.as_deref(), env, &region)?;
        let credentials = CredentialSource::resolve(env, imds)?;
        if let CredentialSource::Instance(_) = &credentials {
            credentials.current(env.now())?;
        }
        let table = config
            .route_table_id
            .as_deref()
            .map(str::trim)
            .filter(|t| !t.is_empty());
        if let Some(t) = table
            && !t.starts_with("rtb-")
        {
            return Err(CloudError::invalid(format!(
                "route table ID {t:?} does not look like one (rtb-…)"
            )));
        }
        log::info!(
            "AWS provider: region {region}, endpoint {}, credentials from {}, route table {}",
            endpoint.url,
            credentials.origin(),
            table.unwrap_or("found by cluster tag")
        );
        Ok(AwsProvider {
            ec2: QueryClient::new(QueryClientConfig {
                endpoint,
                region,
                service: "ec2",
                version: EC2_API_VERSION,
                credentials,
                clock: env.clock(),
                timeout: config.timeout,
            }),
            limiter: RateLimiter::new(config.requests_per_second, config.burst),
            budget: (config.requests_per_second, config.burst),
            throttle: Mutex::new(ThrottleBackoff::new()),
            configured_table: table.map(str::to_string),
            discovered: Mutex::new(None),
            source_dest_check: Mutex::new(HashMap::new()),
            gone: Mutex::new(HashSet::new()),
            calls: Mutex::new(BTreeMap::new()),
        })
    }

    /// The region the provider signs for.
    pub fn region(&self) -> &str {
        self.ec2.region()
    }

    /// The EC2 endpoint it calls.
    pub fn endpoint(&self) -> &str {
        &self.ec2.endpoint().url
    }

    /// The limiter all calls of this provider share.
    pub fn rate_limiter(&self) -> &RateLimiter {
        &self.limiter
    }

    /// EC2 calls made so far, by action (`CreateRoute`, …), failed ones included.
    pub fn api_calls(&self) -> BTreeMap<&'static str, u64> {
        lock(&self.calls).clone()
    }

    /// The route table this provider manages for `cluster_name`, looking it up if
    /// needed (useful as a start-up check).
    pub fn route_table_id(&self, cluster_name: &str) -> Result<String, CloudError> {
        if let Some(id) = &self.configured_table {
            return Ok(id.clone());
        }
        if let Some(id) = self.cached_table(cluster_name) {
            return Ok(id);
        }
        Ok(self.discover(cluster_name)?.id)
    }

    // --- one call -----------------------------------------------------------------

    fn call(
        &self,
        action: &'static str,
        kind: CallKind,
        params: &Params,
    ) -> Result<Element, CallError> {
        *lock(&self.calls).entry(action).or_default() += 1;
        self.limiter.acquire();
        let started = Instant::now();
        match self.ec2.call(action, params) {
            Ok(root) => {
                lock(&self.throttle).on_success();
                log::debug!(
                    "EC2 {action} took {} (request {})",
                    crate::duration::format(started.elapsed()),
                    xml::request_id(&root).unwrap_or("-")
                );
                Ok(root)
            }
            Err(error) => {
                let backoff = match &error {
                    QueryError::Service { code, .. } if is_throttling(code) => {
                        let jitter = rand::rng().random_range(0.0..1.0);
                        // Reported as RateLimited: the controller holds back every
                        // call for `after`; no worker here waits for it.
                        let after = lock(&self.throttle).on_throttled(jitter);
                        log::warn!(
                            "EC2 throttled {action}; asking the controller to hold back every EC2 call for {}",
                            crate::duration::format(after)
                        );
                        Some(after)
                    }
                    _ => None,
                };
                Err(CallError {
                    action,
                    kind,
                    error: Box::new(error),
                    backoff,
                    endpoint: self.ec2.endpoint().url.clone(),
                    credentials: self.ec2.credentials().origin(),
                })
            }
        }
    }

    fn describe_route_tables(&self, params: Params) -> Result<Vec<RouteTable>, CallError> {
        let mut tables = Vec::new();
        self.paginate(DESCRIBE_ROUTE_TABLES, params, |root| {
            let (mut page, next) = parse_route_tables(root);
            tables.append(&mut page);
            next
        })?;
        Ok(tables)
    }

    fn describe_instances(&self, params: Params) -> Result<Vec<Instance>, CallError> {
        let mut instances = Vec::new();
        self.paginate(DESCRIBE_INSTANCES, params, |root| {
            let (mut page, next) = parse_instances(root);
            instances.append(&mut page);
            next
        })?;
        Ok(instances)
    }

    /// Calls a describe action page by page, following `nextToken`.
    fn paginate(
        &self,
        action: &'static str,
        params: Params,
        mut page: impl FnMut(&Element) -> Option<String>,
    ) -> Result<(), CallError> {
        let mut token: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let request = match &token {
                Some(t) => params.clone().add("NextToken", t.clone()),
                None => params.clone(),
            };
            let root = self.call(action, CallKind::Describe, &request)?;
            match page(&root) {
                Some(next) if token.as_ref() != Some(&next) => token = Some(next),
                _ => return Ok(()),
            }
        }
        log::warn!("EC2 {action} still had more pages after {MAX_PAGES}; using what was read");
        Ok(())
    }

    // --- the route table ----------------------------------------------------------

    fn cached_table(&self, cluster_name: &str) -> Option<String> {
        lock(&self.discovered)
            .as_ref()
            .filter(|(cluster, _)| cluster == cluster_name)
            .map(|(_, id)| id.clone())
    }

    fn forget_table(&self, id: &str) {
        let mut discovered = lock(&self.discovered);
        if discovered.as_ref().is_some_and(|(_, cached)| cached == id) {
            *discovered = None;
        }
    }

    /// Finds the one route table tagged for the cluster, with both tag styles
    /// filtered server-side, and caches its ID.
    fn discover(&self, cluster_name: &str) -> Result<RouteTable, CloudError> {
        let key = cluster_tag_key(cluster_name);
        let mut found = self
            .describe_route_tables(Params::new().filter(1, "tag-key", &[&key]))
            .map_err(CallError::into_cloud)?;
        let legacy_filter = format!("tag:{LEGACY_CLUSTER_TAG}");
        let legacy = self
            .describe_route_tables(Params::new().filter(1, &legacy_filter, &[cluster_name]))
            .map_err(CallError::into_cloud)?;
        for table in legacy {
            if !found.iter().any(|t| t.id == table.id) {
                found.push(table);
            }
        }
        let fix = format!(
            "tag exactly one route table with {key} (any value) or {LEGACY_CLUSTER_TAG}={cluster_name}, \
             or configure the route table ID"
        );
        match found.len() {
            0 => Err(CloudError::invalid(format!(
                "no route table in region {} is tagged for cluster {cluster_name:?}: {fix}",
                self.region()
            ))),
            1 => {
                let table = found.remove(0);
                log::info!(
                    "managing routes in route table {} (VPC {}), tagged for cluster {cluster_name}",
                    table.id,
                    table.vpc_id
                );
                *lock(&self.discovered) = Some((cluster_name.to_string(), table.id.clone()));
                Ok(table)
            }
            n => {
                let candidates: Vec<String> = found
                    .iter()
                    .map(|t| format!("{} (VPC {})", t.id, t.vpc_id))
                    .collect();
                Err(CloudError::invalid(format!(
                    "{n} route tables in region {} are tagged for cluster {cluster_name:?}: {}; {fix}",
                    self.region(),
                    candidates.join(", ")
                )))
            }
        }
    }

    fn describe_table(&self, id: &str) -> Result<Option<RouteTable>, CallError> {
        let tables =
            self.describe_route_tables(Params::new().filter(1, "route-table-id", &[id]))?;
        Ok(tables.into_iter().find(|t| t.id == id))
    }

    /// The current contents of the cluster's route table.
    fn current_table(&self, cluster_name: &str) -> Result<RouteTable, CloudError> {
        let id = match (&self.configured_table, self.cached_table(cluster_name)) {
            (Some(id), _) => id.clone(),
            (None, Some(id)) => id,
            (None, None) => return self.discover(cluster_name),
        };
        let missing = match self.describe_table(&id) {
            Ok(Some(table)) => return Ok(table),
            Ok(None) => true,
            Err(e) if e.code() == "InvalidRouteTableID.NotFound" => true,
            Err(e) => return Err(e.into_cloud()),
        };
        debug_assert!(missing);
        if self.configured_table.is_some() {
            return Err(CloudError::invalid(format!(
                "the configured route table {id} does not exist in region {}: fix the route \
                 table ID, or unset it to use the table tagged for cluster {cluster_name:?}",
                self.region()
            )));
        }
        log::warn!("route table {id} is gone; looking for the cluster's route table again");
        self.forget_table(&id);
        self.discover(cluster_name)
    }

    /// Runs a mutation on the cluster's route table. If EC2 says a discovered table
    /// is gone, finds the table again and runs it once more. Returns the table used
    /// and the call's own result, for the caller to interpret.
    fn with_table<T>(
        &self,
        cluster_name: &str,
        mut op: impl FnMut(&str) -> Result<T, CallError>,
    ) -> Result<(String, Result<T, CallError>), CloudError> {
        let id = self.route_table_id(cluster_name)?;
        match op(&id) {
            Err(e)
                if e.code() == "InvalidRouteTableID.NotFound"
                    && self.configured_table.is_none() =>
            {
                log::warn!("route table {id} is gone; looking for the cluster's route table again");
                self.forget_table(&id);
                let id = self.route_table_id(cluster_name)?;
                let result = op(&id);
                Ok((id, result))
            }
            result => Ok((id, result)),
        }
    }

    // --- instances ----------------------------------------------------------------

    /// The instance a new route must point at.
    fn instance_for(&self, target: &RouteTarget) -> Result<String, CloudError> {
        let node = &target.node_name;
        if let Some(provider_id) = target.provider_id.as_deref().filter(|p| !p.is_empty()) {
            return instance_id_from_provider_id(provider_id)
                .map(str::to_string)
                .ok_or_else(|| {
                    CloudError::invalid(format!(
                        "node {node}: providerID {provider_id:?} does not name an EC2 instance \
                         (expected aws:///ZONE/i-…)"
                    ))
                });
        }
        if let Some(id) = node.split('.').next().filter(|id| is_instance_id(id)) {
            return Ok(id.to_string());
        }
        let instances = self
            .describe_instances(Params::new().filter(1, "private-dns-name", &[node]).filter(
                2,
                "instance-state-name",
                &["pending", "running", "stopping", "stopped"],
            ))
            .map_err(CallError::into_cloud)?;
        match instances.as_slice() {
            [one] => Ok(one.id.clone()),
            [] => Err(CloudError::invalid(format!(
                "node {node} has no providerID and no instance has the private DNS name {node:?}: \
                 set the node's spec.providerID (aws:///ZONE/i-…)"
            ))),
            many => Err(CloudError::invalid(format!(
                "node {node} has no providerID and {} instances have the private DNS name \
                 {node:?} ({}): set the node's spec.providerID",
                many.len(),
                many.iter()
                    .map(|i| i.id.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
        }
    }

    /// An instance forwards pod traffic only with its source/destination check off.
    /// Done once per instance and process: it is a mutating call that spends the
    /// account's mutating budget.
    fn disable_source_dest_check(&self, instance: &str) -> Result<(), CloudError> {
        let slot = {
            let mut done = lock(&self.source_dest_check);
            if done.len() >= MAX_REMEMBERED_INSTANCES && !done.contains_key(instance) {
                done.clear();
            }
            done.entry(instance.to_string()).or_default().clone()
        };
        let mut done = lock(&slot);
        if *done {
            return Ok(());
        }
        self.call(
            MODIFY_INSTANCE_ATTRIBUTE,
            CallKind::Mutation,
            &Params::new()
                .add("InstanceId", instance)
                .add("SourceDestCheck.Value", "false"),
        )
        .map_err(CallError::into_cloud)?;
        *done = true;
        log::info!("disabled the source/destination check of instance {instance}");
        Ok(())
    }

    fn is_gone(&self, instance: &str) -> bool {
        lock(&self.gone).contains(instance)
    }

    /// What EC2 knows about instances that route targets name but no node's
    /// providerID does. Instances that do not exist any more count as gone, whether
    /// EC2 says so (`InvalidInstanceID.NotFound`, state terminated) or omits them.
    fn look_up_instances(&self, ids: &[&str]) -> Result<HashMap<String, Lookup>, CloudError> {
        let mut out = HashMap::new();
        let mut unknown = Vec::new();
        for id in ids {
            if self.is_gone(id) {
                out.insert(id.to_string(), Lookup::Gone);
            } else {
                unknown.push(*id);
            }
        }
        for batch in unknown.chunks(INSTANCE_BATCH) {
            self.look_up_batch(batch, &mut out)?;
        }
        let mut gone = lock(&self.gone);
        if gone.len() >= MAX_REMEMBERED_INSTANCES {
            gone.clear();
        }
        for (id, lookup) in &out {
            if *lookup == Lookup::Gone {
                gone.insert(id.clone());
            }
        }
        Ok(out)
    }

    /// One `DescribeInstances`; when EC2 refuses the batch because some IDs do not
    /// exist, the batch is split in halves until the missing ones are isolated.
    fn look_up_batch(
        &self,
        batch: &[&str],
        out: &mut HashMap<String, Lookup>,
    ) -> Result<(), CloudError> {
        match self.describe_instances(Params::new().list("InstanceId", batch)) {
            Ok(instances) => {
                for i in instances {
                    let lookup = if i.is_gone() {
                        Lookup::Gone
                    } else {
                        Lookup::Live {
                            private_dns_name: i.private_dns_name,
                        }
                    };
                    out.insert(i.id, lookup);
                }
                for id in batch {
                    out.entry(id.to_string()).or_insert(Lookup::Gone);
                }
                Ok(())
            }
            Err(e) if e.code() == "InvalidInstanceID.NotFound" => {
                if let [id] = batch {
                    out.insert(id.to_string(), Lookup::Gone);
                    return Ok(());
                }
                let (a, b) = batch.split_at(batch.len() / 2);
                self.look_up_batch(a, out)?;
                self.look_up_batch(b, out)
            }
            Err(e) => Err(e.into_cloud()),
        }
    }

    /// CreateRoute found a route for the destination already: settle what it is.
    fn settle_existing_route(
        &self,
        table: &str,
        cidr: Cidr,
        instance: &str,
        node: &str,
    ) -> Result<(), CloudError> {
        let current = self.describe_table(table).map_err(CallError::into_cloud)?;
        let existing = current.and_then(|t| {
            t.routes
                .into_iter()
                .find(|r| r.destination.as_deref().and_then(|d| Cidr::parse(d).ok()) == Some(cidr))
        });
        let Some(existing) = existing else {
            return Err(CloudError::new(
                CloudErrorKind::Retry { after: None },
                format!(
                    "EC2 CreateRoute said route {cidr} exists in {table}, but the table no longer \
                     lists it; try again"
                ),
            ));
        };
        let dead = existing.is_blackhole()
            || existing
                .instance_id
                .as_deref()
                .is_some_and(|i| self.is_gone(i));
        if dead {
            self.call(
                REPLACE_ROUTE,
                CallKind::Mutation,
                &Params::new()
                    .add("RouteTableId", table)
                    .add("DestinationCidrBlock", cidr.to_string())
                    .add("InstanceId", instance),
            )
            .map_err(CallError::into_cloud)?;
            log::info!(
                "replaced dead route {cidr} ({}) in {table} with one to instance {instance} (node {node})",
                existing.target()
            );
            return Ok(());
        }
        if existing.instance_id.as_deref() == Some(instance) {
            return Ok(());
        }
        Err(CloudError::new(
            CloudErrorKind::AlreadyExists,
            format!(
                "route {cidr} in {table} already points at {}, not at instance {instance} of node \
                 {node}",
                existing.target()
            ),
        ))
    }
}

/// What `DescribeInstances` said about an instance a route points at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// The instance exists; its private DNS name, if it has one.
    Live {
        /// The instance's private DNS name, if it has one.
        private_dns_name: Option<String>,
    },
    /// The instance is terminated or unknown.
    Gone,
}

fn resolve_endpoint(
    configured: Option<&str>,
    env: &AwsEnv,
    region: &str,
) -> Result<Endpoint, CloudError> {
    let chosen = [
        (
            "the configured EC2 endpoint",
            configured.filter(|e| !e.trim().is_empty()),
        ),
        ("AWS_ENDPOINT_URL_EC2", env.var("AWS_ENDPOINT_URL_EC2")),
        ("AWS_ENDPOINT_URL", env.var("AWS_ENDPOINT_URL")),
    ]
    .into_iter()
    .find_map(|(origin, url)| url.map(|u| (origin, u)));
    match chosen {
        Some((origin, url)) => {
            Endpoint::parse(url).map_err(|e| CloudError::invalid(format!("{origin}: {e}")))
        }
        None => Ok(Endpoint::for_region("ec2", region)),
    }
}

/// Routes are IPv4 only (`DestinationCidrBlock`), like upstream's AWS provider.
fn ipv4_destination(text: &str) -> Result<Cidr, CloudError> {
    crate::provider::ipv4_destination(text, "aws", "the AWS provider routes IPv4 pod CIDRs only")
}

/// Instance ID → node name, from the nodes' provider IDs.
fn instance_index(nodes: &NodeDirectory) -> HashMap<&str, &str> {
    nodes
        .provider_ids()
        .filter_map(|(provider_id, node)| Some((instance_id_from_provider_id(provider_id)?, node)))
        .collect()
}

/// The routes of `table` as the controller sees them: IPv4 routes to instances and
/// blackholes; local, gateway and interface routes are not the controller's business.
pub fn routes_from_table(
    cluster_name: &str,
    table: &RouteTable,
    nodes: &NodeDirectory,
    looked_up: &HashMap<String, Lookup>,
) -> Vec<Route> {
    let by_instance = instance_index(nodes);
    let mut routes = Vec::new();
    for entry in &table.routes {
        let Some(destination) = entry.destination.as_deref() else {
            continue;
        };
        let mut route = Route {
            name: format!("{cluster_name}-{destination}"),
            destination_cidr: destination.to_string(),
            ..Route::default()
        };
        if entry.is_blackhole() {
            route.blackhole = true;
            routes.push(route);
            continue;
        }
        let Some(instance) = entry.instance_id.as_deref() else {
            continue;
        };
        if let Some(node) = by_instance.get(instance) {
            route.target_node = node.to_string();
        } else {
            match looked_up.get(instance) {
                Some(Lookup::Live { private_dns_name }) => {
                    route.target_node = [private_dns_name.as_deref(), Some(instance)]
                        .into_iter()
                        .flatten()
                        .find(|name| nodes.has_node(name))
                        .unwrap_or_default()
                        .to_string();
                    if route.target_node.is_empty() {
                        log::debug!(
                            "route {destination} points at instance {instance}, which is no node"
                        );
                    }
                }
                Some(Lookup::Gone) | None => {
                    log::info!(
                        "route {destination} points at instance {instance}, which no longer \
                         exists; reporting it as a blackhole"
                    );
                    route.blackhole = true;
                }
            }
        }
        routes.push(route);
    }
    routes
}

impl Routes for AwsProvider {
    fn provider_name(&self) -> &'static str {
        "aws"
    }

    /// The configured request rate (EC2's mutating-action bucket); changes may run
    /// concurrently.
    fn budget(&self) -> Option<Budget> {
        Some(Budget::new(self.budget.0, self.budget.1))
    }

    fn list_routes(
        &self,
        cluster_name: &str,
        nodes: &NodeDirectory,
    ) -> Result<Vec<Route>, CloudError> {
        let table = self.current_table(cluster_name)?;
        let known = instance_index(nodes);
        let mut unknown: Vec<&str> = table
            .routes
            .iter()
            .filter(|r| r.destination.is_some() && !r.is_blackhole())
            .filter_map(|r| r.instance_id.as_deref())
            .filter(|id| !known.contains_key(id))
            .collect();
        unknown.sort_unstable();
        unknown.dedup();
        let looked_up = self.look_up_instances(&unknown)?;
        Ok(routes_from_table(cluster_name, &table, nodes, &looked_up))
    }

    fn create_route(
        &self,
        cluster_name: &str,
        _name_hint: &str,
        route: &Route,
        target: &RouteTarget,
    ) -> Result<(), CloudError> {
        let cidr = ipv4_destination(&route.destination_cidr)?;
        let instance = self.instance_for(target)?;
        // The table first: a configuration error should not cost a mutation.
        self.route_table_id(cluster_name)?;
        self.disable_source_dest_check(&instance)?;
        let (table, result) = self.with_table(cluster_name, |table| {
            self.call(
                CREATE_ROUTE,
                CallKind::Mutation,
                &Params::new()
                    .add("RouteTableId", table)
                    .add("DestinationCidrBlock", cidr.to_string())
                    .add("InstanceId", instance.as_str()),
            )
        })?;
        match result {
            Ok(reply) if reply.text_of("return") == Some("false") => Err(CloudError::ambiguous(
                format!("EC2 CreateRoute {cidr} in {table} answered return=false"),
            )),
            Ok(_) => {
                log::info!(
                    "created route {cidr} in {table} to instance {instance} (node {})",
                    target.node_name
                );
                Ok(())
            }
            Err(e) if e.code() == "RouteAlreadyExists" => {
                self.settle_existing_route(&table, cidr, &instance, &target.node_name)
            }
            Err(e) => Err(e.into_cloud()),
        }
    }

    fn delete_route(&self, cluster_name: &str, route: &Route) -> Result<(), CloudError> {
        let cidr = ipv4_destination(&route.destination_cidr)?;
        let (table, result) = self.with_table(cluster_name, |table| {
            self.call(
                DELETE_ROUTE,
                CallKind::Mutation,
                &Params::new()
                    .add("RouteTableId", table)
                    .add("DestinationCidrBlock", cidr.to_string()),
            )
        })?;
        result.map_err(CallError::into_cloud)?;
        log::info!("deleted route {cidr} from {table}");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cloud::aws::ec2::RouteEntry;

    fn entry(destination: &str, instance: Option<&str>, state: &str) -> RouteEntry {
        RouteEntry {
            destination: Some(destination.into()),
            instance_id: instance.map(str::to_string),
            other_target: None,
            state: state.into(),
        }
    }

    #[test]
    fn routes_map_to_nodes_blackholes_and_vanished_instances() {
        let table = RouteTable {
            id: "rtb-1".into(),
            vpc_id: "vpc-1".into(),
            routes: vec![
                RouteEntry {
                    other_target: Some("local".into()),
                    ..entry("10.0.0.0/16", None, "active")
                },
                entry("10.244.1.0/24", Some("i-0000000a"), "active"),
                entry("10.244.2.0/24", Some("i-0000000b"), "blackhole"),
                entry("10.244.3.0/24", Some("i-0000000c"), "active"),
                entry("10.244.4.0/24", Some("i-0000000d"), "active"),
                entry("10.244.5.0/24", Some("i-0000000e"), "active"),
                RouteEntry {
                    other_target: Some("eni-1".into()),
                    ..entry("10.244.6.0/24", None, "blackhole")
                },
            ],
        };
        let nodes = NodeDirectory::new([
            ("node-a", Some("aws:///us-east-1a/i-0000000a")),
            ("ip-10-0-1-9.ec2.internal", None),
        ]);
        let looked_up = HashMap::from([
            ("i-0000000c".to_string(), Lookup::Gone),
            (
                "i-0000000d".to_string(),
                Lookup::Live {
                    private_dns_name: Some("ip-10-0-1-9.ec2.internal".into()),
                },
            ),
            (
                "i-0000000e".to_string(),
                Lookup::Live {
                    private_dns_name: Some("ip-10-0-1-10.ec2.internal".into()),
                },
            ),
        ]);
        let routes = routes_from_table("c", &table, &nodes, &looked_up);
        let summary: Vec<(&str, &str, bool)> = routes
            .iter()
            .map(|r| {
                (
                    r.destination_cidr.as_str(),
                    r.target_node.as_str(),
                    r.blackhole,
                )
            })
            .collect();
        assert_eq!(
            summary,
            vec![
                ("10.244.1.0/24", "node-a", false),
                ("10.244.2.0/24", "", true),
                ("10.244.3.0/24", "", true),
                ("10.244.4.0/24", "ip-10-0-1-9.ec2.internal", false),
                ("10.244.5.0/24", "", false),
                ("10.244.6.0/24", "", true),
            ]
        );
        assert_eq!(routes[0].name, "c-10.244.1.0/24");
    }

    #[test]
    fn ipv6_and_garbage_destinations_are_invalid() {
        assert_eq!(
            ipv4_destination("fd00:10:244::/64").map_err(|e| e.kind),
            Err(CloudErrorKind::Invalid)
        );
        assert_eq!(
            ipv4_destination("10.244.1.0/33").map_err(|e| e.kind),
            Err(CloudErrorKind::Invalid)
        );
        assert_eq!(
            ipv4_destination("10.244.1.7/24").map(|c| c.to_string()),
            Ok("10.244.1.0/24".to_string())
        );
    }

    #[test]
    fn endpoint_precedence_is_config_then_ec2_variable_then_generic() {
        let env = AwsEnv::new()
            .with_var("AWS_ENDPOINT_URL", "http://generic:1")
            .with_var("AWS_ENDPOINT_URL_EC2", "http://ec2-only:2");
        let pick =
            |c: Option<&str>, env: &AwsEnv| resolve_endpoint(c, env, "eu-west-1").map(|e| e.host);
        assert_eq!(pick(Some("http://cfg:3"), &env), Ok("cfg:3".to_string()));
        assert_eq!(pick(None, &env), Ok("ec2-only:2".to_string()));
        let generic = AwsEnv::new().with_var("AWS_ENDPOINT_URL", "http://generic:1");
        assert_eq!(pick(None, &generic), Ok("generic:1".to_string()));
        assert_eq!(
            pick(None, &AwsEnv::new()),
            Ok("ec2.eu-west-1.amazonaws.com".to_string())
        );
        let bad = pick(Some("ftp://x"), &env).expect_err("bad scheme");
        assert!(
            bad.message.contains("configured EC2 endpoint"),
            "{}",
            bad.message
        );
    }

    #[test]
    fn debug_output_of_the_provider_shows_no_secret() {
        let env = AwsEnv::new()
            .with_var("AWS_ACCESS_KEY_ID", "AKIDDEBUGTEST")
            .with_var("AWS_SECRET_ACCESS_KEY", "super-secret-value")
            .with_var("AWS_SESSION_TOKEN", "super-secret-token")
            .with_var("AWS_REGION", "eu-west-1");
        let provider = AwsProvider::new(AwsConfig::default(), &env).expect("provider");
        let text = format!("{provider:?}");
        assert!(!text.contains("super-secret"), "{text}");
        assert!(text.contains("eu-west-1"), "{text}");
    }

    #[test]
    fn construction_fails_clearly_without_credentials_or_region() {
        let no_imds = AwsEnv::new().with_var("AWS_EC2_METADATA_DISABLED", "true");
        let err = AwsProvider::new(
            AwsConfig {
                region: Some("us-east-1".into()),
                ..AwsConfig::default()
            },
            &no_imds,
        )
        .expect_err("no credentials");
        assert!(err.message.contains("AWS_ACCESS_KEY_ID"), "{}", err.message);
        let err = AwsProvider::new(AwsConfig::default(), &no_imds).expect_err("no region");
        assert!(err.message.contains("AWS_REGION"), "{}", err.message);
        let err = AwsProvider::new(
            AwsConfig {
                region: Some("us-east-1".into()),
                route_table_id: Some("vpc-123".into()),
                ..AwsConfig::default()
            },
            &no_imds
                .clone()
                .with_var("AWS_ACCESS_KEY_ID", "a")
                .with_var("AWS_SECRET_ACCESS_KEY", "b"),
        )
        .expect_err("bad table id");
        assert!(err.message.contains("rtb-"), "{}", err.message);
    }
}
