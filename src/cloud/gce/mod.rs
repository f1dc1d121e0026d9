//! The Google Compute Engine provider: routes of one VPC network, each sending a pod
//! CIDR to a node's instance, made exactly as cloud-provider-gcp makes them
//! (`providers/gce/gce_routes.go`), so that a cluster switching over adopts its
//! routes with zero writes:
//!
//! - **Name**: the cluster name cut to 26 characters, `-`, the name hint (the node's
//!   UID). **Description**: `k8s-node-route`. **Priority**: 1000. **Next hop**: the
//!   node's instance.
//! - **List**: one filtered `routes.list` (paged, 500 a page) for this cluster's
//!   names, this network and that description, and one `projects.get` of the
//!   network's project for its `ROUTES` quota ([`Routes::route_tables`]). The node of
//!   a route is the instance of its `nextHopInstance`, by providerID
//!   `gce://<project>/<zone>/<name>` first and by name second (on GCE the node name
//!   is the instance name); a route whose instance is gone (GCE's warning
//!   `NEXT_HOP_INSTANCE_NOT_FOUND`) is a blackhole.
//! - **Create**: the instance's zone comes from the node's providerID, so no zone is
//!   searched (the peer calls `instances.get` in each zone until one answers). The
//!   instance is read once (`instances.get`, then cached) for its `canIpForward`:
//!   without it GCE drops the routed traffic, so such a create is refused before any
//!   write, with the fix. Then `routes.insert` and `globalOperations.wait` until the
//!   operation is done; `409 alreadyExists` counts as done, as the peer counts it.
//! - **Delete**: `routes.delete` by the listed name, and its operation waited on;
//!   `404` counts as done.
//!
//! GCE's rate quotas count each group of methods apart, per project and minute
//! ([`QuotaGroup`]): the provider declares a bucket of each group its requests fall in
//! ([`Routes::budget`]), every request (waits included) is recorded in its group's
//! bucket, and a `403 rateLimitExceeded` or `429` holds back that group alone
//! ([`Meter::throttled_in`](crate::provider::Meter::throttled_in)): a refused insert
//! stops the changes while lists go on.
//! Routes of others in the network (other names, other descriptions) are never
//! listed, so never touched; a delete of a name outside this cluster's prefix is
//! refused. Tokens are never logged.

mod auth;
mod compute;
pub(crate) mod config;

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

pub use auth::{COMPUTE_SCOPE, METADATA_TOKEN_PATH, REFRESH_BEFORE};
pub use config::{
    Config, ConfigError, Credentials, DEFAULT_API_ENDPOINT, DEFAULT_METADATA_HOST, ENV_CREDENTIALS,
    ENV_METADATA_HOST, OTHER_KEYS, QUOTA_MARGIN, QuotaBucket, QuotaGroup, ROUTE_KEYS,
    default_rate_quotas,
};

/// `token-body` and the tokens are held as this, redacted in `Debug`.
pub use crate::secret::Secret;

use auth::TokenSource;
use compute::{ApiCall, ApiError, Compute, Instance, Operation, Project, RouteJson, RouteList};

use crate::fence::Fence;
use crate::model::{Cidr, Route};
use crate::provider::{
    Budget, BudgetOp, CloudError, CloudErrorKind, NodeDirectory, RouteTarget, Routes, TableUsage,
};

/// The description cloud-provider-gcp gives its routes, and lists them by.
pub const ROUTE_DESCRIPTION: &str = "k8s-node-route";
/// The priority cloud-provider-gcp gives its routes.
pub const ROUTE_PRIORITY: u32 = 1000;
/// How much of the cluster name goes into a route's name (GCE names are at most 63
/// characters: 26, a dash and a 36-character UID).
pub const CLUSTER_NAME_PREFIX_LEN: usize = 26;
/// The quota metric of routes in a project.
pub const ROUTES_QUOTA: &str = "ROUTES";
/// Routes per page of `routes.list` (the API's maximum).
const PAGE_SIZE: &str = "500";
/// A guard against a list whose page tokens never end.
const MAX_PAGES: usize = 10_000;

/// `NetworkUnavailable` reason: the node's instance was created without
/// `canIpForward`, so GCE drops packets routed to it.
pub const IP_FORWARDING_DISABLED: &str = "IPForwardingDisabled";
/// `NetworkUnavailable` reason: an IPv6 pod CIDR (this provider routes IPv4).
pub const IPV6_NOT_ROUTABLE: &str = "IPv6NotRoutable";

/// The route name cloud-provider-gcp gives the route of `name_hint` (the node UID).
pub fn route_name(cluster_name: &str, name_hint: &str) -> String {
    format!("{}-{name_hint}", cluster_prefix(cluster_name))
}

/// The cluster name cut to [`CLUSTER_NAME_PREFIX_LEN`] bytes, as the peer cuts it.
fn cluster_prefix(cluster_name: &str) -> &str {
    let mut end = cluster_name.len().min(CLUSTER_NAME_PREFIX_LEN);
    while !cluster_name.is_char_boundary(end) {
        end -= 1;
    }
    &cluster_name[..end]
}

/// What is known of a node's instance.
#[derive(Clone, Debug)]
struct InstanceInfo {
    self_link: String,
    can_ip_forward: bool,
}

/// The GCE implementation of [`Routes`]. Safe to share between threads.
#[derive(Debug)]
pub struct GceRoutes {
    compute: Compute,
    /// The project of the instances.
    project: String,
    /// The project of the network, its routes and their quota.
    network_project: String,
    network_name: String,
    /// The network's URL, as routes are inserted with it (the peer's form).
    network_url: String,
    multizone: bool,
    local_zone: Option<String>,
    operation_timeout: Duration,
    /// The bucket of each quota group, declared to the controller.
    rate_quotas: Vec<QuotaBucket>,
    mutations_at_once: usize,
    /// Instances read for a create, by `projects/<p>/zones/<z>/instances/<n>`. One
    /// that cannot forward is read again after the next list (it may have been
    /// recreated); one that can is kept, since `canIpForward` is fixed at creation.
    instances: Mutex<HashMap<String, InstanceInfo>>,
    /// The name of each route created since the last list, for a delete of it.
    created: Mutex<HashMap<Cidr, String>>,
    /// The `ROUTES` quota as last read, kept up to date with this provider's own
    /// creates and deletes.
    quota: Mutex<Quota>,
}

/// The network project's `ROUTES` quota between readings.
#[derive(Debug, Default)]
struct Quota {
    /// (usage, limit) at the last `projects.get`, moved by our creates and deletes
    /// since; `None` before the first reading or when the project has no such quota.
    routes: Option<(usize, usize)>,
    /// Lists since that reading.
    lists_since: u32,
}

/// A list reads the quota again when it is this many lists old: every 5 minutes at
/// the poll period's default of 10 s. Others' routes count against the quota too,
/// and this is how soon theirs are seen while there is room.
const QUOTA_LISTS: u32 = 30;

impl Quota {
    /// Whether a list should read the quota: never read, read `QUOTA_LISTS` lists
    /// ago, or with less room than a tenth of the limit (at least 50 routes) left,
    /// where others' routes could fill it before the next reading.
    fn stale(&self) -> bool {
        match self.routes {
            None => true,
            Some((usage, limit)) => {
                self.lists_since >= QUOTA_LISTS || usage + (limit / 10).max(50) >= limit
            }
        }
    }

    /// A route of ours made or gone since the reading.
    fn moved(&mut self, created: bool) {
        if let Some((usage, _)) = &mut self.routes {
            *usage = if created {
                *usage + 1
            } else {
                usage.saturating_sub(1)
            };
        }
    }
}

impl GceRoutes {
    /// Builds the provider: loads the credentials, fills what `gce.conf` left out
    /// from the metadata server (project, network, zone), and reads the network
    /// project's quotas once, which checks the token and the permission to read them.
    pub fn connect(config: Config) -> Result<GceRoutes, ConfigError> {
        if let Some(b) = config.rate_quotas.iter().find(|b| {
            !(b.requests_per_second.is_finite() && b.requests_per_second > 0.0) || b.burst == 0
        }) {
            return Err(ConfigError::new(format!(
                "gce: the bucket of {} ({} per second, burst {}) is unusable: both must be \
                 positive",
                b.group.key(),
                b.requests_per_second,
                b.burst
            )));
        }
        let tokens = TokenSource::new(
            config.credentials.clone(),
            &config.metadata_url,
            config.request_timeout,
            (&config.trust, &config.proxying),
        )
        .map_err(|e| ConfigError::new(e.message))?;
        // A setting error, not an outage, even when nothing answered: on GCE the
        // metadata server always answers, so no answer means "not on GCE" (its name
        // does not resolve), and waiting would never end.
        let metadata = |path: &str, field: &str| {
            tokens.metadata_text(path).map_err(|e| {
                ConfigError::new(format!(
                    "gce.conf: {field} is not set and the metadata server did not tell it: {}",
                    e.message
                ))
            })
        };
        let project = match config.project_id.clone() {
            Some(p) => p,
            None => metadata("/computeMetadata/v1/project/project-id", "project-id")?,
        };
        let network_name = match config.network_name.clone() {
            Some(n) => n,
            None => last_component(&metadata(
                "/computeMetadata/v1/instance/network-interfaces/0/network",
                "network-name",
            )?)
            .to_string(),
        };
        let local_zone = match (&config.local_zone, config.multizone) {
            (Some(z), _) => Some(z.clone()),
            // Only a node without providerID needs it, so its absence is no error.
            (None, false) => tokens
                .metadata_text("/computeMetadata/v1/instance/zone")
                .ok()
                .map(|z| last_component(&z).to_string()),
            (None, true) => None,
        };
        let network_project = config
            .network_project_id
            .clone()
            .unwrap_or_else(|| project.clone());
        let network_url = format!(
            "{}projects/{network_project}/global/networks/{network_name}",
            config.api_endpoint
        );
        let compute = Compute::new(
            &config.api_endpoint,
            tokens,
            config.request_timeout,
            config.metrics.clone(),
            (&config.trust, &config.proxying),
        );
        let provider = GceRoutes {
            compute,
            project,
            network_project,
            network_name,
            network_url,
            multizone: config.multizone,
            local_zone,
            operation_timeout: config.operation_timeout,
            rate_quotas: config.rate_quotas.clone(),
            mutations_at_once: config.mutations_at_once.max(1),
            instances: Mutex::new(HashMap::new()),
            created: Mutex::new(HashMap::new()),
            quota: Mutex::new(Quota::default()),
        };
        provider.refresh_quota().map_err(|e| {
            let message = format!(
                "gce: cannot read project {}'s quotas: {}",
                provider.network_project, e.message
            );
            match e.kind {
                CloudErrorKind::Invalid | CloudErrorKind::NotFound => ConfigError::new(message),
                _ => ConfigError::outage(message),
            }
        })?;
        let quota = lock(&provider.quota).routes;
        log::info!(
            "gce: managing the routes of network {} in project {} (instances in {}{}); ROUTES \
             quota {}",
            provider.network_name,
            provider.network_project,
            provider.project,
            if provider.multizone {
                ", multizone"
            } else {
                ""
            },
            quota.map_or("unknown".to_string(), |(u, l)| format!("{u} of {l} used")),
        );
        Ok(provider)
    }

    /// Every request from now on first passes `fence` (leader election's): after the
    /// lease is lost nothing is sent, and a change stops between its insert or
    /// delete and the waits for its operation.
    pub fn with_fence(mut self, fence: Fence) -> GceRoutes {
        self.compute.set_fence(fence);
        self
    }

    /// The network whose routes are managed, as `project/network`.
    pub fn network(&self) -> String {
        format!("{}/{}", self.network_project, self.network_name)
    }

    fn routes_path(&self) -> String {
        format!("projects/{}/global/routes", self.network_project)
    }

    /// The filter of `routes.list`: this cluster's names, this network, the peer's
    /// description. The network is matched by its path, whatever host its URL names.
    fn list_filter(&self, cluster_name: &str) -> String {
        format!(
            "(name eq {}-.*) (network eq .*/projects/{}/global/networks/{}) (description eq {ROUTE_DESCRIPTION})",
            cluster_prefix(cluster_name),
            self.network_project,
            self.network_name
        )
    }

    fn refresh_quota(&self) -> Result<(), ApiError> {
        let path = format!("projects/{}", self.network_project);
        let project: Project = self.compute.get(&path, &[], ApiCall::ProjectsGet)?;
        let quota = project
            .quotas
            .iter()
            .find(|q| q.metric == ROUTES_QUOTA)
            .map(|q| (q.usage.max(0.0) as usize, q.limit.max(0.0) as usize));
        *lock(&self.quota) = Quota {
            routes: quota,
            lists_since: 0,
        };
        Ok(())
    }

    /// Every route of this cluster in the network, page by page.
    fn list_pages(&self, filter: &str, each: &mut dyn FnMut(RouteJson)) -> Result<(), ApiError> {
        let path = self.routes_path();
        let mut token: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let mut query = vec![("filter", filter), ("maxResults", PAGE_SIZE)];
            if let Some(t) = token.as_deref() {
                query.push(("pageToken", t));
            }
            let page: RouteList = self.compute.get(&path, &query, ApiCall::RoutesList)?;
            page.items.into_iter().for_each(&mut *each);
            match page.next_page_token.filter(|t| !t.is_empty()) {
                Some(next) if Some(&next) == token.as_ref() => {
                    return Err(ApiError::new(
                        CloudErrorKind::Retry { after: None },
                        format!("gce: GET {path}: nextPageToken {next:?} does not advance"),
                    ));
                }
                Some(next) => token = Some(next),
                None => return Ok(()),
            }
        }
        Err(ApiError::new(
            CloudErrorKind::Retry { after: None },
            format!("gce: GET {path}: more than {MAX_PAGES} pages"),
        ))
    }

    /// Follows an operation to its end with `globalOperations.wait` (a server-side
    /// long poll; each call counts against the budget). A wait that fails is tried
    /// again until the operation timeout: the change was accepted, only its end is
    /// not known yet.
    fn wait(&self, mut op: Operation, what: &str) -> Result<Operation, ApiError> {
        let deadline = Instant::now() + self.operation_timeout;
        let path = format!(
            "projects/{}/global/operations/{}/wait",
            self.network_project, op.name
        );
        while !op.done() {
            if Instant::now() >= deadline {
                return Err(ApiError::new(
                    CloudErrorKind::Ambiguous,
                    format!(
                        "gce: {what}: operation {} not done after {:?}; the next list tells",
                        op.name, self.operation_timeout
                    ),
                ));
            }
            match self
                .compute
                .post::<Operation>(&path, None, ApiCall::OperationsWait)
            {
                Ok(next) => op = next,
                Err(e) if e.kind == CloudErrorKind::Fenced => {
                    return Err(ApiError::new(
                        CloudErrorKind::Fenced,
                        format!(
                            "gce: {what}: operation {} was started and not followed to its end \
                             ({}); the new leader lists and repairs",
                            op.name, e.message
                        ),
                    ));
                }
                // No reply, or GCE failed: the operation goes on; ask again.
                Err(e)
                    if matches!(
                        e.kind,
                        CloudErrorKind::Retry { .. } | CloudErrorKind::Ambiguous
                    ) =>
                {
                    log::debug!("gce: {what}: waiting for operation {}: {e}", op.name);
                    std::thread::sleep(Duration::from_secs(1));
                }
                // Throttled (recorded for the budget: nothing is sent for a while) or
                // refused: the change was accepted and its end is unknown, so the
                // controller lists before it trusts its view again.
                Err(e) => {
                    return Err(ApiError::new(
                        CloudErrorKind::Ambiguous,
                        format!(
                            "gce: {what}: operation {} was started, and waiting for it failed: {}",
                            op.name, e.message
                        ),
                    ));
                }
            }
        }
        Ok(op)
    }

    /// The instance of a node: `(project, zone, name)` from its providerID, or the
    /// node's name in the local zone of a single-zone cluster.
    fn instance_of(&self, target: &RouteTarget) -> Result<(String, String, String), CloudError> {
        let node = &target.node_name;
        match target.provider_id.as_deref().filter(|p| !p.is_empty()) {
            Some(id) => parse_provider_id(id).ok_or_else(|| {
                CloudError::invalid(format!(
                    "gce: node {node} has providerID {id:?}, which is not a GCE instance \
                     (gce://<project>/<zone>/<instance>)"
                ))
            }),
            None if self.multizone => Err(CloudError::invalid(format!(
                "gce: node {node} has no providerID; in a multizone cluster its zone comes from \
                 it (gce://<project>/<zone>/<instance>), which the cloud-controller-manager's \
                 node controller sets"
            ))),
            None => match &self.local_zone {
                Some(zone) => Ok((self.project.clone(), zone.clone(), node.clone())),
                None => Err(CloudError::invalid(format!(
                    "gce: node {node} has no providerID and the local zone is unknown; set \
                     local-zone in gce.conf or the node's providerID"
                ))),
            },
        }
    }

    /// The node's instance, read once and then cached.
    fn instance(&self, target: &RouteTarget) -> Result<InstanceInfo, CloudError> {
        let (project, zone, name) = self.instance_of(target)?;
        let path = format!("projects/{project}/zones/{zone}/instances/{name}");
        if let Some(info) = lock(&self.instances).get(&path) {
            return Ok(info.clone());
        }
        let instance: Instance = match self.compute.get(&path, &[], ApiCall::InstancesGet) {
            Ok(i) => i,
            Err(e) if e.kind == CloudErrorKind::NotFound => {
                return Err(CloudError::invalid(format!(
                    "gce: node {}: no instance {name} in zone {zone} of project {project} ({})",
                    target.node_name, e.message
                )));
            }
            Err(e) => return Err(e.into()),
        };
        let info = InstanceInfo {
            self_link: match instance.self_link.as_str() {
                "" => path.clone(),
                link => link.to_string(),
            },
            can_ip_forward: instance.can_ip_forward,
        };
        lock(&self.instances).insert(path, info.clone());
        Ok(info)
    }

    fn refuse_forwarding(&self, target: &RouteTarget, instance: &str) -> CloudError {
        CloudError::refused(
            IP_FORWARDING_DISABLED,
            false,
            format!(
                "gce: node {}: instance {instance} has canIpForward false, so GCE drops the \
                 packets routed to it; recreate it with IP forwarding on (gcloud compute \
                 instances create --can-ip-forward, or canIpForward: true in its instance \
                 template)",
                target.node_name
            ),
        )
    }

    fn check_destination(&self, route: &Route, target: &RouteTarget) -> Result<Cidr, CloudError> {
        if let Ok(cidr) = Cidr::parse(&route.destination_cidr)
            && !cidr.is_ipv4()
        {
            return Err(CloudError::refused(
                IPV6_NOT_ROUTABLE,
                true,
                format!(
                    "gce: pod CIDR {cidr} of node {} is IPv6; this provider routes IPv4 pod \
                     CIDRs only (cloud-provider-gcp's route names cannot tell a node's two \
                     CIDRs apart); route IPv6 pods with alias IP ranges instead",
                    target.node_name
                ),
            ));
        }
        crate::provider::ipv4_destination(&route.destination_cidr, "gce", "route IPv4 only")
    }

    /// An insert the quota refused: the next list reads the quota again, since
    /// others' routes filled it where ours did not.
    fn full_reads_quota(&self, e: CloudError) -> CloudError {
        if e.kind == CloudErrorKind::TableFull {
            lock(&self.quota).lists_since = QUOTA_LISTS;
        }
        e
    }

    /// The name of a route to delete: as listed, as created since the list, or from
    /// a list of this cluster's routes to that destination.
    fn name_to_delete(
        &self,
        cluster_name: &str,
        route: &Route,
        destination: Cidr,
    ) -> Result<Option<String>, CloudError> {
        if !route.name.is_empty() {
            return Ok(Some(route.name.clone()));
        }
        if let Some(name) = lock(&self.created).get(&destination) {
            return Ok(Some(name.clone()));
        }
        let filter = self.list_filter(cluster_name);
        let mut found = None;
        self.list_pages(&filter, &mut |r| {
            if Cidr::parse(&r.dest_range).ok() == Some(destination) {
                found = Some(r.name);
            }
        })?;
        Ok(found)
    }
}

impl Routes for GceRoutes {
    fn provider_name(&self) -> &'static str {
        "gce"
    }

    /// A bucket per rate-quota group ([`default_rate_quotas`], or the configured
    /// ones). A list draws one `routes.list` page and one `projects.get` (the
    /// `ROUTES` quota, read at one list in `QUOTA_LISTS` or when room runs short;
    /// given back when not read: the budget is declared once, the quota's staleness
    /// changes); a create one `routes.insert`, one `globalOperations.wait` and one
    /// `instances.get` (the first create of an instance sends it, later ones get it
    /// back); a delete one `routes.delete` and one wait. More pages and longer waits
    /// are charged from the reply, to their group's bucket. At most
    /// [`Config::mutations_at_once`] changes run at once: the buckets alone would let
    /// a burst of 300 go, more than is useful to have waiting on GCE at once.
    fn budget(&self) -> Option<Budget> {
        let ungrouped = QuotaBucket::default_for(QuotaGroup::Mutations);
        // Every request is recorded in its group's bucket; the default bucket, which
        // nothing draws from, gets a group's default size.
        let budget = self.rate_quotas.iter().fold(
            Budget::new(ungrouped.requests_per_second, ungrouped.burst),
            |b, q| b.bucket(q.group.bucket(), q.requests_per_second, q.burst),
        );
        Some(
            budget
                .mutations_at_once(self.mutations_at_once)
                .draw(BudgetOp::List, QuotaGroup::Lists.bucket(), 1)
                .draw(BudgetOp::List, QuotaGroup::Reads.bucket(), 1)
                .draw(BudgetOp::Create, QuotaGroup::Mutations.bucket(), 1)
                .draw(BudgetOp::Create, QuotaGroup::OperationReads.bucket(), 1)
                .draw(BudgetOp::Create, QuotaGroup::ZonalReads.bucket(), 1)
                .draw(BudgetOp::Delete, QuotaGroup::Mutations.bucket(), 1)
                .draw(BudgetOp::Delete, QuotaGroup::OperationReads.bucket(), 1),
        )
    }

    /// The network project's `ROUTES` quota: every route of the project counts
    /// against it, anyone's.
    fn route_tables(&self) -> Vec<TableUsage> {
        match lock(&self.quota).routes {
            Some((routes, limit)) => vec![TableUsage {
                table: format!("{}/{ROUTES_QUOTA}", self.network_project),
                routes,
                limit,
                by_family: None,
            }],
            None => Vec::new(),
        }
    }

    /// The destination is IPv4 and the instance, if it was read, can forward.
    fn preflight(&self, route: &Route, target: &RouteTarget) -> Result<(), CloudError> {
        self.check_destination(route, target)?;
        let Ok((project, zone, name)) = self.instance_of(target) else {
            return Ok(());
        };
        let path = format!("projects/{project}/zones/{zone}/instances/{name}");
        match lock(&self.instances).get(&path) {
            Some(info) if !info.can_ip_forward => Err(self.refuse_forwarding(target, &path)),
            _ => Ok(()),
        }
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
        cluster_name: &str,
        nodes: &NodeDirectory,
        route: &mut dyn FnMut(Route),
    ) -> Result<(), CloudError> {
        // Read again only when it may matter (`Quota::stale`): in poll mode a list is
        // every pass, and a `projects.get` each time would double an idle cluster's
        // requests.
        let stale = {
            let mut quota = lock(&self.quota);
            quota.lists_since += 1;
            quota.stale()
        };
        if stale {
            self.refresh_quota()?;
        }
        let filter = self.list_filter(cluster_name);
        let prefix = format!("{}-", cluster_prefix(cluster_name));
        let mut listed = Vec::new();
        self.list_pages(&filter, &mut |r| {
            // The filter is the API's; a route outside it is never ours to hand over.
            if r.name.starts_with(&prefix) && r.description == ROUTE_DESCRIPTION {
                listed.push(to_route(r, nodes));
            }
        })?;
        lock(&self.created).clear();
        lock(&self.instances).retain(|_, i| i.can_ip_forward);
        listed.into_iter().for_each(route);
        Ok(())
    }

    fn create_route(
        &self,
        cluster_name: &str,
        name_hint: &str,
        route: &Route,
        target: &RouteTarget,
    ) -> Result<(), CloudError> {
        let destination = self.check_destination(route, target)?;
        let instance = self.instance(target)?;
        if !instance.can_ip_forward {
            return Err(self.refuse_forwarding(target, &instance.self_link));
        }
        let name = route_name(cluster_name, name_hint);
        let body = serde_json::json!({
            "name": name,
            "network": self.network_url,
            "destRange": destination.to_string(),
            "nextHopInstance": instance.self_link,
            "priority": ROUTE_PRIORITY,
            "description": ROUTE_DESCRIPTION,
        });
        let what = format!(
            "insert route {name} ({destination} to node {})",
            target.node_name
        );
        let op = match self.compute.post::<Operation>(
            &self.routes_path(),
            Some(&body),
            ApiCall::RoutesInsert,
        ) {
            Ok(op) => op,
            Err(e) if e.kind == CloudErrorKind::AlreadyExists => {
                log::info!("gce: route {name} already exists; counted as created");
                lock(&self.created).insert(destination, name);
                return Ok(());
            }
            Err(e) => return Err(self.full_reads_quota(e.into())),
        };
        let op = self.wait(op, &what)?;
        if let Some((code, message)) = op.failure() {
            return match code.as_str() {
                "ALREADY_EXISTS" | "RESOURCE_ALREADY_EXISTS" => {
                    lock(&self.created).insert(destination, name);
                    Ok(())
                }
                _ => Err(self.full_reads_quota(operation_error(&op, &what, &code, &message))),
            };
        }
        lock(&self.created).insert(destination, name);
        lock(&self.quota).moved(true);
        Ok(())
    }

    fn delete_route(&self, cluster_name: &str, route: &Route) -> Result<(), CloudError> {
        let destination = Cidr::parse(&route.destination_cidr).map_err(|e| {
            CloudError::invalid(format!("gce: cannot delete route {:?}: {e}", route.name))
        })?;
        let gone = || {
            CloudError::new(
                CloudErrorKind::NotFound,
                format!(
                    "gce: network {} has no route {destination} of this cluster",
                    self.network_name
                ),
            )
        };
        let Some(name) = self.name_to_delete(cluster_name, route, destination)? else {
            return Err(gone());
        };
        let prefix = format!("{}-", cluster_prefix(cluster_name));
        if !name.starts_with(&prefix) {
            return Err(CloudError::invalid(format!(
                "gce: route {name} is not this cluster's (its name lacks {prefix:?}); not deleted"
            )));
        }
        let what = format!("delete route {name} ({destination})");
        let path = format!("{}/{name}", self.routes_path());
        let op = match self
            .compute
            .delete::<Operation>(&path, ApiCall::RoutesDelete)
        {
            Ok(op) => op,
            Err(e) if e.kind == CloudErrorKind::NotFound => {
                lock(&self.created).remove(&destination);
                return Err(CloudError::new(CloudErrorKind::NotFound, e.message));
            }
            Err(e) => return Err(e.into()),
        };
        let op = self.wait(op, &what)?;
        lock(&self.created).remove(&destination);
        match op.failure() {
            Some((code, message)) if code == "RESOURCE_NOT_FOUND" => Err(CloudError::new(
                CloudErrorKind::NotFound,
                format!("gce: {what}: {message}"),
            )),
            Some((code, message)) => Err(operation_error(&op, &what, &code, &message)),
            None => {
                lock(&self.quota).moved(false);
                Ok(())
            }
        }
    }
}

/// The error of an operation that ended in error.
fn operation_error(op: &Operation, what: &str, code: &str, message: &str) -> CloudError {
    let kind = match (code, op.http_error_status_code) {
        ("QUOTA_EXCEEDED", _) => CloudErrorKind::TableFull,
        ("RESOURCE_NOT_READY" | "RESOURCE_IN_USE_BY_ANOTHER_RESOURCE", _) => {
            CloudErrorKind::Conflict
        }
        (_, Some(429)) | ("RATE_LIMIT_EXCEEDED", _) => CloudErrorKind::Retry { after: None },
        (_, Some(s)) if s >= 500 => CloudErrorKind::Retry { after: None },
        _ => CloudErrorKind::Invalid,
    };
    CloudError::new(
        kind,
        format!(
            "gce: {what}: operation {} failed: {code}: {message}",
            op.name
        ),
    )
}

/// A listed route as the controller sees it.
fn to_route(r: RouteJson, nodes: &NodeDirectory) -> Route {
    let gone = r
        .warnings
        .iter()
        .any(|w| w.code == "NEXT_HOP_INSTANCE_NOT_FOUND");
    let target = if gone || r.next_hop_instance.is_empty() {
        String::new()
    } else {
        node_of(nodes, &r.next_hop_instance)
    };
    Route {
        name: r.name,
        blackhole: target.is_empty(),
        target_node: target,
        destination_cidr: r.dest_range,
        ..Route::default()
    }
}

/// The node of an instance URL: by providerID `gce://<project>/<zone>/<name>` first,
/// then a node named like the instance (the peer's rule, `path.Base`), unless that
/// node's providerID names another instance.
fn node_of(nodes: &NodeDirectory, instance_url: &str) -> String {
    let name = last_component(instance_url);
    let provider_id = instance_provider_id(instance_url);
    if let Some(id) = &provider_id
        && let Some(node) = nodes.node_by_provider_id(id)
    {
        return node.to_string();
    }
    match (nodes.provider_id_of(name), &provider_id) {
        (Some(other), Some(id)) if other != id => String::new(),
        _ => name.to_string(),
    }
}

/// `gce://<project>/<zone>/<name>` of an instance URL `…/projects/<p>/zones/<z>/instances/<n>`.
fn instance_provider_id(url: &str) -> Option<String> {
    let parts: Vec<&str> = url.split('/').collect();
    let at = parts.iter().rposition(|p| *p == "projects")?;
    match parts.get(at..at + 6)? {
        [_, project, "zones", zone, "instances", name] => {
            Some(format!("gce://{project}/{zone}/{name}"))
        }
        _ => None,
    }
}

/// `(project, zone, name)` of a providerID `gce://<project>/<zone>/<name>`.
fn parse_provider_id(id: &str) -> Option<(String, String, String)> {
    let rest = id.strip_prefix("gce://")?;
    let mut parts = rest.split('/');
    let (project, zone, name) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || [project, zone, name].iter().any(|p| p.is_empty()) {
        return None;
    }
    Some((project.to_string(), zone.to_string(), name.to_string()))
}

fn last_component(url: &str) -> &str {
    url.trim_end_matches('/').rsplit('/').next().unwrap_or(url)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    crate::sync::lock(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_names_are_the_peers_cluster_prefix_and_the_node_uid() {
        let uid = "0f6d3c1e-52a4-4d1e-9d25-1a3c5f7e9b20";
        assert_eq!(route_name("kubernetes", uid), format!("kubernetes-{uid}"));
        let long = "a-cluster-name-longer-than-26-characters";
        let name = route_name(long, uid);
        assert_eq!(name, format!("a-cluster-name-longer-than-{uid}"));
        assert_eq!(name.len(), 63, "GCE's longest name");
    }

    #[test]
    fn provider_ids_and_instance_urls_name_the_same_instance() {
        assert_eq!(
            parse_provider_id("gce://p/europe-west1-b/node-1"),
            Some(("p".into(), "europe-west1-b".into(), "node-1".into()))
        );
        for bad in ["gce://p/z", "gce://p//n", "aws:///z/i-1", "gce://p/z/n/x"] {
            assert_eq!(parse_provider_id(bad), None, "{bad}");
        }
        let url = "https://www.googleapis.com/compute/v1/projects/p/zones/z/instances/n";
        assert_eq!(instance_provider_id(url).as_deref(), Some("gce://p/z/n"));
        assert_eq!(
            instance_provider_id("projects/p/zones/z/instances/n").as_deref(),
            Some("gce://p/z/n")
        );
        assert_eq!(instance_provider_id("zones/z/instances/n"), None);
    }

    #[test]
    fn listed_routes_map_to_nodes_by_provider_id_then_name_and_gone_instances_are_blackholes() {
        let dir = NodeDirectory::new([
            ("node-a", Some("gce://p/z/instance-a")),
            ("instance-b", None),
            ("instance-c", Some("gce://p/z/other")),
        ]);
        let url = |n: &str| {
            format!("https://www.googleapis.com/compute/v1/projects/p/zones/z/instances/{n}")
        };
        assert_eq!(node_of(&dir, &url("instance-a")), "node-a");
        assert_eq!(node_of(&dir, &url("instance-b")), "instance-b");
        assert_eq!(
            node_of(&dir, &url("instance-c")),
            "",
            "named like another instance's node"
        );
        assert_eq!(node_of(&dir, &url("instance-d")), "instance-d");
        let listed = RouteJson {
            name: "k-1".into(),
            dest_range: "10.244.1.0/24".into(),
            next_hop_instance: url("instance-a"),
            warnings: vec![compute::Warning {
                code: "NEXT_HOP_INSTANCE_NOT_FOUND".into(),
                message: "gone".into(),
            }],
            ..RouteJson::default()
        };
        let route = to_route(listed.clone(), &dir);
        assert!(route.blackhole && route.target_node.is_empty(), "{route:?}");
        let route = to_route(
            RouteJson {
                warnings: vec![],
                ..listed
            },
            &dir,
        );
        assert_eq!(
            (route.target_node.as_str(), route.blackhole),
            ("node-a", false)
        );
    }

    #[test]
    fn operation_errors_map_quota_to_a_full_table() {
        let op = Operation {
            name: "op-1".into(),
            ..Operation::default()
        };
        let e = operation_error(&op, "insert", "QUOTA_EXCEEDED", "Quota 'ROUTES' exceeded");
        assert_eq!(e.kind, CloudErrorKind::TableFull);
        assert!(
            e.message.contains("op-1") && e.message.contains("ROUTES"),
            "{e}"
        );
        assert_eq!(
            operation_error(&op, "x", "INVALID_FIELD_VALUE", "m").kind,
            CloudErrorKind::Invalid
        );
    }
}
