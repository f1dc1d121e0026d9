//! The Alibaba Cloud provider: custom route entries of a VPC's route tables, each
//! sending a pod CIDR to a node's ECS instance, configured by
//! cloud-provider-alibaba-cloud's cloud config and written as that peer writes them
//! (no name, no description, next hop type `Instance`), so that a cluster switching
//! over adopts its entries with zero writes.
//!
//! - **Ownership**: an entry is ours when it is custom, inside the cluster CIDRs, and
//!   its one next hop is an ECS instance that is a node's (`spec.providerID`
//!   `<region>.<instance>` or `alicloud://<region>.<instance>`, as the peer writes
//!   it), or an instance that no longer exists (a dead entry, listed without a node
//!   for the controller to delete once its view of the nodes is whole). An entry to
//!   an instance that exists but is no node (an appliance, another cluster's router)
//!   is never touched; it still counts against the table's quota, and a node's create
//!   on its destination is refused naming that instance ([`DESTINATION_HELD`]).
//! - **Tables**: `Global.routeTableIDs` (several, comma-separated, as the peer takes
//!   them), else the VPC's one route table. A route is listed when every table holds
//!   it; a create writes the tables that lack it, a delete every table that holds it.
//! - **Batches**: a pass's deletes are one `DeleteRouteEntries` and its creates one
//!   `CreateRouteEntries` per table (at most [`BATCH_SIZE`] entries a call), one call
//!   at a time: the VPC takes one batch at a time (`TaskConflict` otherwise). Both
//!   calls are asynchronous; the table is read again every `pollInterval` until each
//!   entry is `Created` (or gone), and only then is the change reported done. The
//!   controller keeps one batch in flight ([`Routes::budget`]'s one mutation at once),
//!   so our own writes never meet each other.
//! - **Refusals**: what the API would refuse for one entry is refused for its node
//!   alone before the batch ([`Routes::precheck`]): a destination in 100.64.0.0/10,
//!   one that overlaps a vSwitch's CIDR, an IPv6 destination in a VPC without IPv6, a
//!   node whose instance is unknown or in another VPC (the pre-flight).
//!
//! Every request is counted for the controller's budget (the polls too). Keys and
//! tokens are never logged.

mod api;
mod auth;
mod config;
mod quota;
pub mod sign;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use serde_json::Value;

pub use crate::credentials::Clock;
/// Temporary keys are fetched again this long before they expire.
pub use crate::credentials::REFRESH_BEFORE_EXPIRY as REFRESH_BEFORE;
pub use config::{
    Config, ConfigError, Credentials, DEFAULT_METADATA_ENDPOINT, DEFAULT_ROUTE_ENTRY_QUOTA,
    ENV_ACCESS_KEY_ID, ENV_ACCESS_KEY_SECRET, ENV_ECS_METADATA, ENV_OIDC_PROVIDER_ARN,
    ENV_OIDC_TOKEN_FILE, ENV_PEER_ACCESS_KEY_ID, ENV_PEER_ACCESS_KEY_SECRET, ENV_ROLE_ARN,
    ENV_ROLE_SESSION_NAME, ENV_SECURITY_TOKEN, KEYS, OTHER_KEYS,
};

use api::{Api, ECS_VERSION, Failure, Service, VPC_VERSION};
use auth::Identity;

use crate::fence::Fence;
use crate::model::{Cidr, Route};
use crate::provider::{
    Budget, BudgetOp, CloudError, CloudErrorKind, NodeDirectory, RouteChange, RouteTarget, Routes,
    TableUsage,
};
use crate::sync::lock;

/// The RAM actions the provider calls: the policy the manifests' header and the
/// README give.
pub const RAM_ACTIONS: &[&str] = &[
    "vpc:DescribeRouteTableList",
    "vpc:DescribeRouteEntryList",
    "vpc:CreateRouteEntries",
    "vpc:DeleteRouteEntries",
    "vpc:DescribeVSwitches",
    "vpc:DescribeVpcs",
    "ecs:DescribeInstances",
];
/// RAM actions the provider calls when allowed, and does without: Quota Center's
/// read of the table's quota (without it, 200 or `Global.routeEntryQuota`).
pub const OPTIONAL_RAM_ACTIONS: &[&str] = &["quotas:ListProductQuotas"];
/// Quota Center's code of the route table's quota, as the warning and the README
/// name it.
pub use quota::ROUTE_ENTRY_QUOTA;
/// Entries one `CreateRouteEntries` or `DeleteRouteEntries` takes (the API's limit).
pub const BATCH_SIZE: usize = 50;
/// `NetworkUnavailable` reason: the node's providerID names no ECS instance.
pub const NO_INSTANCE: &str = "NoECSInstance";
/// `NetworkUnavailable` reason: the node's instance is not in the VPC (or gone).
pub const INSTANCE_NOT_IN_VPC: &str = "InstanceNotInVPC";
/// `NetworkUnavailable` reason: the pod CIDR lies in 100.64.0.0/10, which the VPC
/// refuses as a destination.
pub const RESERVED_DESTINATION: &str = "DestinationInReservedRange";
/// `NetworkUnavailable` reason: the pod CIDR overlaps a vSwitch's CIDR.
pub const OVERLAPS_VSWITCH: &str = "DestinationOverlapsVSwitch";
/// `NetworkUnavailable` reason: an IPv6 pod CIDR in a VPC without IPv6.
pub const NO_IPV6: &str = "VPCWithoutIPv6";
/// `NetworkUnavailable` reason: the table holds the node's pod CIDR already, leading
/// to a live instance that is no node (left by a node deleted while its instance
/// lives on); never deleted by us, so named for the operator to delete.
pub const DESTINATION_HELD: &str = "DestinationHeldByOtherInstance";
/// `NetworkUnavailable` reason of a node whose entry the API refused in a batch for
/// a reason of its own (`FailedRouteEntries[].FailedCode`).
pub const ENTRY_REFUSED: &str = "RouteEntryRefused";
/// Reads of a table while a batch's entries are `Creating` or `Deleting`, at most;
/// then those entries are reported ambiguous and the controller lists.
const MAX_POLLS: usize = 120;
/// Entries a page of `DescribeRouteEntryList` holds (the API's maximum).
const PAGE: usize = 100;
/// Pages of one list, at most: a server that pages on past this is not trusted.
const MAX_PAGES: usize = 1000;
/// How long the vSwitch CIDRs and the VPC's IPv6 are trusted between lists.
const NETWORK_MAX_AGE: Duration = Duration::from_secs(600);
/// How long the quota read from Quota Center (or a refusal to read it, or a reply
/// without it) holds: read again at the first list after, which in watch mode is
/// the periodic full resync, and at most hourly in periodic mode, where a list
/// comes every period.
const QUOTA_MAX_AGE: Duration = Duration::from_secs(3600);
/// How long a read that failed for the moment (throttled, no reply, a 5xx, the
/// fence) holds, and the fallback when a table is at it: the fallback may be far
/// below the account's quota, and the controller holds nodes above it locally
/// (no create is sent, so no `QuotaExceeded` comes to correct it), so it is not
/// kept an hour on a failure that says nothing about the quota.
const QUOTA_RETRY: Duration = Duration::from_secs(300);
/// Pages of the quota list without dimensions, at most.
const QUOTA_MAX_PAGES: usize = 20;
/// Instance IDs one `DescribeInstances` takes.
const INSTANCES_PER_CALL: usize = 100;

/// The outcome of each change of a batch, by its index.
type Outcomes = Vec<(usize, Result<(), CloudError>)>;

/// One of our entries (or a candidate) of a table, as last read.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    instance: String,
    status: String,
}

#[derive(Debug, Default)]
struct State {
    /// Custom entries each table held at the last list or poll (anyone's).
    held: HashMap<String, usize>,
    /// Entries to an instance, inside the cluster CIDRs, by destination and table.
    entries: HashMap<Cidr, BTreeMap<String, Entry>>,
    /// The VPC's vSwitch CIDRs (IPv4 and IPv6), at start and at each list.
    vswitches: Vec<Cidr>,
    /// The VPC has an IPv6 CIDR.
    ipv6: bool,
    /// When the vSwitches and the VPC were read; read again at a list when older
    /// than [`NETWORK_MAX_AGE`], or when a create was refused for them since.
    network_read: Option<SystemTime>,
    /// What `DescribeInstances` said of each instance: its VPC, `None` when gone.
    instances: HashMap<String, Option<String>>,
    /// Entries inside the cluster CIDRs to a live instance that no node claims, by
    /// destination: (table, instance). Never ours; a create on one is refused.
    foreign: HashMap<Cidr, (String, String)>,
    /// Custom entries a table may hold: configured, read, or the default.
    quota: usize,
    /// When Quota Center was last asked (whatever came of it); `None`: ask at the
    /// next list (at first, and after the VPC said a table was full).
    quota_read: Option<SystemTime>,
    /// How long that read holds: [`QUOTA_MAX_AGE`], or [`QUOTA_RETRY`] after a
    /// failure of the moment.
    quota_holds: Duration,
    /// Times the VPC said a table was full (`QuotaExceeded.*`): one said while a
    /// read was in flight keeps the quota due after that read.
    tables_found_full: u64,
    /// What the last line logged about the quota said: `Some(true)` the account's
    /// value, `Some(false)` a failed read (a warning). A line repeating it is logged
    /// at debug level: one warning, not one an hour.
    quota_said: Option<bool>,
}

/// The Alibaba Cloud implementation of [`Routes`]. Safe to share between threads.
#[derive(Debug)]
pub struct AlibabaRoutes {
    api: Api,
    vpc: Service,
    ecs: Service,
    /// Quota Center; `None` when `Global.routeEntryQuota` sets the quota.
    quotas: Option<Service>,
    region: String,
    vpc_id: String,
    tables: Vec<String>,
    cluster_cidrs: Vec<Cidr>,
    budget: (f64, u32),
    poll_interval: Duration,
    state: Mutex<State>,
}

impl AlibabaRoutes {
    /// Builds the provider: the region and VPC (from the metadata service when the
    /// cloud config does not name them), the route tables (which must be the VPC's),
    /// and the vSwitches (the destinations the API refuses).
    pub fn connect(config: Config) -> Result<AlibabaRoutes, ConfigError> {
        let at_start = |e: CloudError| ConfigError {
            outage: matches!(
                e.kind,
                CloudErrorKind::Retry { .. }
                    | CloudErrorKind::Ambiguous
                    | CloudErrorKind::RateLimited { .. }
                    | CloudErrorKind::Conflict
            ),
            message: e.message,
        };
        let metadata = api::metadata_agent();
        let from_metadata = |value: &Option<String>, path: &str| match value {
            Some(v) => Ok(v.clone()),
            None => auth::metadata_get(&metadata, &config.metadata_endpoint, path),
        };
        let region = from_metadata(&config.region, "/latest/meta-data/region-id")
            .map_err(|e| at_start(named(e, "Global.region")))?;
        let vpc_id = from_metadata(&config.vpc_id, "/latest/meta-data/vpc-id")
            .map_err(|e| at_start(named(e, "Global.vpcid")))?;
        let agent = api::agent(config.request_timeout, &config.trust, &config.proxying);
        let endpoint = |given: &Option<String>, product: &str| {
            given
                .clone()
                .unwrap_or_else(|| format!("https://{product}.{region}.aliyuncs.com"))
        };
        let identity = Identity::new(
            config.credentials.clone(),
            agent.clone(),
            metadata.clone(),
            endpoint(&config.sts_endpoint, "sts"),
            config.metadata_endpoint.clone(),
        );
        let api = Api::new(
            agent,
            identity,
            config.metrics.clone(),
            config.request_timeout,
        );
        let mut provider = AlibabaRoutes {
            api,
            vpc: Service {
                url: endpoint(&config.vpc_endpoint, "vpc"),
                version: VPC_VERSION,
            },
            ecs: Service {
                url: endpoint(&config.ecs_endpoint, "ecs"),
                version: ECS_VERSION,
            },
            quotas: match config.route_entry_quota {
                Some(_) => None,
                None => Some(Service {
                    url: config
                        .quotas_endpoint
                        .clone()
                        .unwrap_or_else(|| quota::DEFAULT_ENDPOINT.to_string()),
                    version: quota::VERSION,
                }),
            },
            region,
            vpc_id,
            tables: Vec::new(),
            cluster_cidrs: config.cluster_cidrs.clone(),
            budget: (config.requests_per_second, config.burst),
            poll_interval: config.poll_interval,
            state: Mutex::new(State {
                quota: config
                    .route_entry_quota
                    .unwrap_or(DEFAULT_ROUTE_ENTRY_QUOTA),
                quota_holds: QUOTA_MAX_AGE,
                ..State::default()
            }),
        };
        provider.tables = provider
            .route_tables_of_vpc(&config.route_table_ids)
            .map_err(|e| match e.kind {
                CloudErrorKind::Invalid | CloudErrorKind::NotFound => ConfigError::new(e.message),
                _ => at_start(e),
            })?;
        provider.read_network().map_err(at_start)?;
        let quota = match (&provider.quotas, config.route_entry_quota) {
            (_, Some(q)) => format!("at most {q} each (Global.routeEntryQuota)"),
            (Some(q), None) => format!("their quota read from Quota Center at {}", q.url),
            (None, None) => String::new(),
        };
        log::info!(
            "alibaba: managing the custom entries of route table(s) {} in VPC {} ({}), {quota}; \
             one batch at a time",
            provider.tables.join(", "),
            provider.vpc_id,
            provider.region,
        );
        Ok(provider)
    }

    /// Every request from now on first passes `fence`: after the lease is lost
    /// nothing is sent, and a batch stops between its calls and polls.
    pub fn with_fence(mut self, fence: Fence) -> AlibabaRoutes {
        self.api.set_fence(fence);
        self
    }

    /// Temporary keys (RRSA, the ECS RAM role) expire against `clock` from now on,
    /// and the quota's and the network's ages are measured on it: tests pass a
    /// virtual one to reach a refresh or a re-read without waiting an hour.
    pub fn with_clock(mut self, clock: Clock) -> AlibabaRoutes {
        self.api.identity.set_clock(clock);
        self
    }

    /// The route tables written, in order.
    pub fn tables(&self) -> &[String] {
        &self.tables
    }

    fn call(
        &self,
        service: &Service,
        action: &'static str,
        params: Vec<(String, String)>,
        write: bool,
    ) -> Result<Value, Failure> {
        let mut params = params;
        params.push(("RegionId".into(), self.region.clone()));
        let result = self.api.call(service, action, &params, write);
        if let Err(f) = &result
            && f.error.kind == CloudErrorKind::TableFull
        {
            self.table_found_full();
        }
        result
    }

    /// The VPC's word against the quota in use: ask Quota Center again at the next
    /// list (a quota lowered, or one of ours read wrong).
    fn table_found_full(&self) {
        let mut state = lock(&self.state);
        state.quota_read = None;
        state.tables_found_full += 1;
    }

    /// Reads the tables' quota from Quota Center when due (the first list; then an
    /// hour after a read or a refusal, [`QUOTA_RETRY`] after a failure of the moment
    /// or while a table is at the fallback; and after a table was found full),
    /// unless `Global.routeEntryQuota` sets it. Never fails: a refused or failed read
    /// keeps the value in use, with one warning naming the RAM permission. The
    /// request passes the fence and is counted for the budget like every other.
    fn refresh_quota(&self) {
        let Some(service) = &self.quotas else {
            return;
        };
        let now = self.api.identity.now();
        let (due, fallback, found_full) = {
            let state = lock(&self.state);
            let fallback_full = state.quota_said != Some(true)
                && self
                    .tables
                    .iter()
                    .any(|t| state.held.get(t).is_some_and(|&n| n >= state.quota));
            let due = state.quota_read.is_none_or(|at| {
                let age = now.duration_since(at).unwrap_or_default();
                age >= state.quota_holds || (fallback_full && age >= QUOTA_RETRY)
            });
            (due, state.quota, state.tables_found_full)
        };
        if !due {
            return;
        }
        let (read, lasting) = match self.read_quota(service) {
            Ok(limit) => (Ok(limit), true),
            Err((why, lasting)) => (Err(why), lasting),
        };
        let decision = quota::decide(read, &self.region, fallback);
        let mut state = lock(&self.state);
        // A table found full while the read was out: its reply may predate the
        // change, so the next list asks again.
        state.quota_read = (state.tables_found_full == found_full).then_some(now);
        state.quota_holds = if lasting { QUOTA_MAX_AGE } else { QUOTA_RETRY };
        let new = state.quota_said != Some(decision.from_account);
        match (decision.from_account, new || decision.limit != state.quota) {
            (true, true) => log::info!("{}", decision.message),
            (false, true) => log::warn!("{}", decision.message),
            (_, false) => log::debug!("{}", decision.message),
        }
        state.quota_said = Some(decision.from_account);
        state.quota = decision.limit;
    }

    /// The quota of the tables in our region: asked for with the dimension
    /// `regionId`, then, if that lists nothing, once more without dimensions (all
    /// pages). Quota Center takes no `RegionId`, so [`Api::call`] directly. `Err`:
    /// what failed, and whether it lasts (a refusal of the permission, or an answer
    /// without the quota) rather than being of the moment.
    fn read_quota(&self, service: &Service) -> Result<usize, (String, bool)> {
        let ask = |params: Vec<(String, String)>| {
            self.api
                .call(service, quota::ACTION, &params, false)
                .map_err(|f| (f.error.message, f.denied))
        };
        let about = format!(
            "Quota Center's {}/{} in {}",
            quota::PRODUCT,
            quota::ROUTE_ENTRY_QUOTA,
            self.region
        );
        let unusable = |e: String| (format!("{about}: {e}"), true);
        let reply = ask(quota::request(&self.region))?;
        if let Some(limit) = quota::parse(&reply, &self.region).map_err(unusable)? {
            return Ok(limit);
        }
        let mut items = Vec::new();
        let mut token = String::new();
        let mut tokens = HashSet::new();
        for _ in 0..QUOTA_MAX_PAGES {
            let reply = ask(quota::request_without_dimensions(&token))?;
            let (page, next) = quota::page(&reply).map_err(unusable)?;
            items.extend(page);
            match next {
                Some(t) if tokens.insert(t.clone()) => token = t,
                _ => break,
            }
        }
        quota::parse(&serde_json::json!({ "Quotas": items }), &self.region)
            .map_err(unusable)?
            .ok_or_else(|| unusable(quota::none_listed(&self.region)))
    }

    /// The tables to write: those configured, checked to be the VPC's, or the VPC's
    /// only one (as the peer: several are an error naming the key to set).
    fn route_tables_of_vpc(&self, configured: &[String]) -> Result<Vec<String>, CloudError> {
        let mut found = Vec::new();
        for page in 1..=MAX_PAGES {
            let reply = self.call(
                &self.vpc,
                "DescribeRouteTableList",
                vec![
                    ("VpcId".into(), self.vpc_id.clone()),
                    ("PageSize".into(), "50".into()),
                    ("PageNumber".into(), page.to_string()),
                ],
                false,
            )?;
            let tables = array(&reply, "RouterTableList", "RouterTableListType");
            let n = tables.len();
            found.extend(tables.iter().filter_map(|t| text(t, "RouteTableId")));
            if n == 0 || found.len() >= count(&reply, "TotalCount") {
                break;
            }
        }
        if configured.is_empty() {
            return match found.len() {
                1 => Ok(found),
                0 => Err(CloudError::invalid(format!(
                    "alibaba: VPC {} has no route table (check Global.vpcid)",
                    self.vpc_id
                ))),
                _ => Err(CloudError::invalid(format!(
                    "alibaba: VPC {} has {} route tables ({}): name the ones to write in \
                     Global.routeTableIDs, comma-separated",
                    self.vpc_id,
                    found.len(),
                    found.join(", ")
                ))),
            };
        }
        let missing: Vec<&str> = configured
            .iter()
            .filter(|t| !found.contains(t))
            .map(String::as_str)
            .collect();
        if !missing.is_empty() {
            return Err(CloudError::invalid(format!(
                "alibaba: Global.routeTableIDs names {} not in VPC {} (its tables: {})",
                missing.join(", "),
                self.vpc_id,
                found.join(", ")
            )));
        }
        Ok(configured.to_vec())
    }

    /// The VPC's vSwitch CIDRs (`DescribeVSwitches`), and whether it has IPv6
    /// (`DescribeVpcs`).
    fn read_network(&self) -> Result<(), CloudError> {
        let mut cidrs = Vec::new();
        let vpcs = self.call(
            &self.vpc,
            "DescribeVpcs",
            vec![("VpcId".into(), self.vpc_id.clone())],
            false,
        )?;
        let ipv6 = array(&vpcs, "Vpcs", "Vpc")
            .iter()
            .filter(|v| text(v, "VpcId").as_deref() == Some(self.vpc_id.as_str()))
            .any(|v| text(v, "Ipv6CidrBlock").is_some());
        let mut seen = 0;
        for page in 1..=MAX_PAGES {
            let reply = self.call(
                &self.vpc,
                "DescribeVSwitches",
                vec![
                    ("VpcId".into(), self.vpc_id.clone()),
                    ("PageSize".into(), "50".into()),
                    ("PageNumber".into(), page.to_string()),
                ],
                false,
            )?;
            let switches = array(&reply, "VSwitches", "VSwitch");
            seen += switches.len();
            for s in &switches {
                for key in ["CidrBlock", "Ipv6CidrBlock"] {
                    if let Some(c) = text(s, key).and_then(|t| Cidr::parse(&t).ok()) {
                        cidrs.push(c);
                    }
                }
            }
            if switches.is_empty() || seen >= count(&reply, "TotalCount") {
                break;
            }
        }
        let mut state = lock(&self.state);
        state.vswitches = cidrs;
        state.ipv6 = ipv6;
        state.network_read = Some(self.api.identity.now());
        Ok(())
    }

    /// Every custom entry of `table`, every page: (destination text, one instance
    /// next hop if that is what it has, status). Also records how many it holds.
    fn read_table(&self, table: &str) -> Result<Vec<(String, Option<String>, String)>, CloudError> {
        let mut out = Vec::new();
        let mut token = String::new();
        let mut tokens = HashSet::new();
        for _ in 0..MAX_PAGES {
            let mut params = vec![
                ("RouteTableId".to_string(), table.to_string()),
                ("RouteEntryType".to_string(), "Custom".to_string()),
                ("MaxResult".to_string(), PAGE.to_string()),
            ];
            if !token.is_empty() {
                params.push(("NextToken".into(), token.clone()));
            }
            let reply = self.call(&self.vpc, "DescribeRouteEntryList", params, false)?;
            for e in array(&reply, "RouteEntrys", "RouteEntry") {
                if text(&e, "Type").is_some_and(|t| t != "Custom") {
                    continue;
                }
                let Some(destination) = text(&e, "DestinationCidrBlock") else {
                    continue;
                };
                let hops = array(&e, "NextHops", "NextHop");
                let instance = match hops.as_slice() {
                    [hop] if text(hop, "NextHopType").as_deref() == Some("Instance") => {
                        text(hop, "NextHopId")
                    }
                    _ => None,
                };
                out.push((
                    destination,
                    instance,
                    text(&e, "Status").unwrap_or_default(),
                ));
            }
            token = text(&reply, "NextToken").unwrap_or_default();
            if token.is_empty() {
                lock(&self.state).held.insert(table.to_string(), out.len());
                return Ok(out);
            }
            if !tokens.insert(token.clone()) {
                break;
            }
        }
        // A partial list must never pass for a whole one: the entries on pages not
        // read would look gone.
        Err(CloudError::new(
            CloudErrorKind::Retry { after: None },
            format!(
                "alibaba: DescribeRouteEntryList of {table}: a NextToken seen before, or more \
                 than {MAX_PAGES} pages; the list is not trusted"
            ),
        ))
    }

    fn ours(&self, destination: &Cidr) -> bool {
        self.cluster_cidrs.iter().any(|c| {
            c.is_ipv4() == destination.is_ipv4()
                && c.prefix() <= destination.prefix()
                && c.contains(destination.network())
        })
    }

    /// Looks up the instances not known yet (`DescribeInstances`, a hundred a call).
    fn learn_instances(&self, ids: &[String]) -> Result<(), CloudError> {
        let unknown: Vec<String> = {
            let state = lock(&self.state);
            let mut unknown: Vec<String> = ids
                .iter()
                .filter(|i| !state.instances.contains_key(*i))
                .cloned()
                .collect();
            unknown.sort();
            unknown.dedup();
            unknown
        };
        for chunk in unknown.chunks(INSTANCES_PER_CALL) {
            let reply = self.call(
                &self.ecs,
                "DescribeInstances",
                vec![
                    (
                        "InstanceIds".into(),
                        serde_json::to_string(chunk).unwrap_or_default(),
                    ),
                    ("PageSize".into(), INSTANCES_PER_CALL.to_string()),
                ],
                false,
            )?;
            let found = instances_of(chunk, &reply)?;
            lock(&self.state).instances.extend(found);
        }
        Ok(())
    }

    /// What the API would refuse of a create, from what is known: `Err` with
    /// [`CloudErrorKind::Refused`]. Sends nothing.
    fn check_create(
        &self,
        route: &Route,
        target: &RouteTarget,
    ) -> Result<(Cidr, String), CloudError> {
        let node = &target.node_name;
        let destination = Cidr::parse(&route.destination_cidr).map_err(|e| {
            CloudError::invalid(format!("alibaba: node {node}: route destination: {e}"))
        })?;
        let instance = target
            .provider_id
            .as_deref()
            .and_then(instance_id)
            .ok_or_else(|| {
                CloudError::refused(
                    NO_INSTANCE,
                    false,
                    format!(
                        "alibaba: node {node}: its providerID {:?} names no ECS instance \
                         (<region>.<instance-id> or alicloud://<region>.<instance-id>, as the \
                         cloud-controller-manager sets it)",
                        target.provider_id.as_deref().unwrap_or("")
                    ),
                )
            })?
            .to_string();
        let reserved = Cidr::parse("100.64.0.0/10").ok();
        if destination.is_ipv4() && reserved.is_some_and(|r| overlaps(&r, &destination)) {
            return Err(CloudError::refused(
                RESERVED_DESTINATION,
                true,
                format!(
                    "alibaba: node {node}: its pod CIDR {destination} lies in 100.64.0.0/10, \
                     which the VPC refuses as a route destination; give the cluster a pod \
                     CIDR outside it"
                ),
            ));
        }
        let mut state = lock(&self.state);
        if !destination.is_ipv4() && !state.ipv6 {
            // Tried again after the next list, which reads the VPC again.
            state.network_read = None;
            return Err(CloudError::refused(
                NO_IPV6,
                false,
                format!(
                    "alibaba: node {node}: its pod CIDR {destination} is IPv6 and VPC {} has \
                     no IPv6 CIDR: enable IPv6 on the VPC and its vSwitches",
                    self.vpc_id
                ),
            ));
        }
        if let Some(v) = state
            .vswitches
            .iter()
            .find(|v| overlaps(v, &destination))
            .copied()
        {
            state.network_read = None;
            return Err(CloudError::refused(
                OVERLAPS_VSWITCH,
                false,
                format!(
                    "alibaba: node {node}: its pod CIDR {destination} overlaps the vSwitch \
                     CIDR {v} of VPC {}, which the VPC refuses; give the cluster a pod CIDR \
                     apart from the vSwitches",
                    self.vpc_id
                ),
            ));
        }
        if let Some((table, other)) = state.foreign.get(&destination)
            && other != &instance
        {
            return Err(CloudError::refused(
                DESTINATION_HELD,
                false,
                format!(
                    "alibaba: node {node}: route table {table} holds its pod CIDR {destination} \
                     already, leading to instance {other}, which is no node of the cluster (a \
                     node deleted while its instance lives on?): delete that entry if it is \
                     stale (aliyun vpc DeleteRouteEntry --RegionId {} --RouteTableId {table} \
                     --DestinationCidrBlock {destination} --NextHopId {other}); the \
                     controller never deletes nor replaces another writer's entry to a live \
                     instance",
                    self.region
                ),
            ));
        }
        match state.instances.get(&instance) {
            Some(Some(vpc)) if vpc != &self.vpc_id => {
                Err(self.not_in_vpc(node, &instance, Some(vpc)))
            }
            Some(None) => Err(self.not_in_vpc(node, &instance, None)),
            _ => Ok((destination, instance)),
        }
    }

    fn not_in_vpc(&self, node: &str, instance: &str, vpc: Option<&str>) -> CloudError {
        let fact = match vpc {
            Some(v) => format!("is in VPC {v}"),
            None => format!("was not found in region {}", self.region),
        };
        CloudError::refused(
            INSTANCE_NOT_IN_VPC,
            false,
            format!(
                "alibaba: node {node}: its instance {instance} {fact}, not in VPC {}: a route \
                 can only lead to an instance of the table's VPC",
                self.vpc_id
            ),
        )
    }

    /// Writes one table's creates (`create`) or deletes and follows each entry until
    /// it is `Created` or gone. `entries`: (change index, destination, instance).
    /// Returns the outcome of each index.
    fn write_table(
        &self,
        table: &str,
        create: bool,
        entries: &[(usize, Cidr, String)],
    ) -> Result<Outcomes, Failure> {
        let action = if create {
            "CreateRouteEntries"
        } else {
            "DeleteRouteEntries"
        };
        let mut params = Vec::new();
        for (n, (_, destination, instance)) in entries.iter().enumerate() {
            let p = |k: &str| format!("RouteEntries.{}.{k}", n + 1);
            params.push((p("RouteTableId"), table.to_string()));
            params.push((p("DstCidrBlock"), destination.to_string()));
            params.push((p("NextHop"), instance.clone()));
            if create {
                params.push((p("NextHopType"), "Instance".to_string()));
                // An int32 in the SDK's request model, sent as `6`.
                if !destination.is_ipv4() {
                    params.push((p("IpVersion"), "6".to_string()));
                }
            }
        }
        let reply = self.call(&self.vpc, action, params, true)?;
        let mut outcomes: HashMap<usize, Result<(), CloudError>> = HashMap::new();
        for failed in array_or_list(&reply, "FailedRouteEntries", "FailedRouteEntry") {
            let code = text(&failed, "FailedCode").unwrap_or_default();
            let message = text(&failed, "FailedMessage").unwrap_or_default();
            let Some(&(index, destination, _)) = failed_entry(entries, &failed) else {
                log::warn!(
                    "alibaba: {action} in {table}: a failure matching no entry sent ({code}: \
                     {message}); its entry is read at the next poll"
                );
                continue;
            };
            let kind = api::kind_of(&code).unwrap_or(CloudErrorKind::BatchRefused {
                reason: ENTRY_REFUSED,
                at_fault: None,
            });
            if kind == CloudErrorKind::TableFull {
                self.table_found_full();
            }
            let kind = match kind {
                // One entry refused among others: its node's alone.
                CloudErrorKind::BatchRefused { .. } => CloudErrorKind::Refused {
                    reason: ENTRY_REFUSED,
                    lasting: false,
                },
                k => k,
            };
            outcomes.insert(
                index,
                Err(CloudError::new(
                    kind,
                    format!("alibaba: {action} in {table}: entry {destination}: {code}: {message}"),
                )),
            );
        }
        let pending: Vec<&(usize, Cidr, String)> = entries
            .iter()
            .filter(|(i, _, _)| !outcomes.contains_key(i))
            .collect();
        let followed = self.follow(table, create, &pending);
        for (index, outcome) in followed {
            outcomes.insert(index, outcome);
        }
        Ok(outcomes.into_iter().collect())
    }

    /// Reads `table` until every entry of `pending` is `Created` (creates) or gone
    /// (deletes), at most [`MAX_POLLS`] times.
    fn follow(&self, table: &str, create: bool, pending: &[&(usize, Cidr, String)]) -> Outcomes {
        let mut left: Vec<&(usize, Cidr, String)> = pending.to_vec();
        let mut done = Vec::new();
        for _ in 0..MAX_POLLS {
            if left.is_empty() {
                return done;
            }
            if !self.poll_interval.is_zero() {
                std::thread::sleep(self.poll_interval);
            }
            let listed = match self.read_table(table) {
                Ok(l) => l,
                Err(e) => {
                    // The write was accepted; what became of it is unknown.
                    let e = CloudError::ambiguous(format!(
                        "alibaba: following the entries written to {table}: {}",
                        e.message
                    ));
                    done.extend(left.iter().map(|(i, _, _)| (*i, Err(e.clone()))));
                    return done;
                }
            };
            let mut still = Vec::new();
            for &entry in &left {
                let (index, destination, instance) = entry;
                let found = listed.iter().find(|(d, hop, _)| {
                    Cidr::parse(d).ok() == Some(*destination) && hop.as_deref() == Some(instance)
                });
                match (create, found) {
                    (true, Some((_, _, status)))
                        if status == "Created" || status == "Available" =>
                    {
                        done.push((*index, Ok(())))
                    }
                    (true, Some(_)) | (false, Some(_)) => still.push(entry),
                    (true, None) => done.push((
                        *index,
                        Err(CloudError::new(
                            CloudErrorKind::Retry { after: None },
                            format!(
                                "alibaba: CreateRouteEntries in {table}: entry {destination} was \
                                 accepted, then never listed (the VPC dropped it)"
                            ),
                        )),
                    )),
                    (false, None) => done.push((*index, Ok(()))),
                }
            }
            left = still;
        }
        done.extend(left.iter().map(|(i, d, _)| {
            (
                *i,
                Err(CloudError::ambiguous(format!(
                    "alibaba: entry {d} of {table} still {} after {MAX_POLLS} reads",
                    if create { "Creating" } else { "Deleting" }
                ))),
            )
        }));
        done
    }

    /// Takes in what a write did to the entries known.
    fn remember(&self, table: &str, create: bool, destination: Cidr, instance: &str) {
        let mut state = lock(&self.state);
        if create {
            state.entries.entry(destination).or_default().insert(
                table.to_string(),
                Entry {
                    instance: instance.to_string(),
                    status: "Created".into(),
                },
            );
        } else if let Some(tables) = state.entries.get_mut(&destination) {
            tables.remove(table);
            if tables.is_empty() {
                state.entries.remove(&destination);
            }
        }
    }
}

impl Routes for AlibabaRoutes {
    fn provider_name(&self) -> &'static str {
        "alibaba"
    }

    /// The budget: one mutation at once (the VPC takes one batch at a time), a batch
    /// charged, for each table, its write and two reads of the table; what it really
    /// sent (each poll, the instance lookup) corrects the charge.
    fn budget(&self) -> Option<Budget> {
        Some(
            Budget::new(self.budget.0, self.budget.1)
                .mutations_at_once(1)
                .requests_per_op(2, 3, 3)
                .draw_per_table(BudgetOp::Batch, Budget::DEFAULT_BUCKET, 3),
        )
    }

    fn route_tables(&self) -> Vec<TableUsage> {
        let state = lock(&self.state);
        self.tables
            .iter()
            .filter_map(|t| {
                Some(TableUsage {
                    table: t.clone(),
                    routes: *state.held.get(t)?,
                    limit: state.quota,
                    // The quota is one number of custom entries; that IPv6 entries
                    // count apart is documented nowhere we could read, so both count
                    // together (on the safe side for creates).
                    by_family: None,
                })
            })
            .collect()
    }

    fn batch_size(&self) -> Option<usize> {
        Some(BATCH_SIZE)
    }

    fn preflight(&self, route: &Route, target: &RouteTarget) -> Result<(), CloudError> {
        if let Some(instance) = target.provider_id.as_deref().and_then(instance_id) {
            // Not found before is not refused here: the create looks it up again.
            let mut state = lock(&self.state);
            if matches!(state.instances.get(instance), Some(None)) {
                state.instances.remove(instance);
            }
        }
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

    fn list_routes_each(
        &self,
        _cluster_name: &str,
        nodes: &NodeDirectory,
        each: &mut dyn FnMut(Route),
    ) -> Result<(), CloudError> {
        self.refresh_quota();
        let now = self.api.identity.now();
        let stale = lock(&self.state)
            .network_read
            .is_none_or(|at| now.duration_since(at).unwrap_or_default() >= NETWORK_MAX_AGE);
        if stale {
            self.read_network()?;
        }
        let by_instance: HashMap<&str, &str> = nodes
            .provider_ids()
            .filter_map(|(id, name)| Some((instance_id(id)?, name)))
            .collect();
        let mut entries: HashMap<Cidr, BTreeMap<String, Entry>> = HashMap::new();
        for table in &self.tables {
            for (destination, instance, status) in self.read_table(table)? {
                let (Ok(destination), Some(instance)) = (Cidr::parse(&destination), instance)
                else {
                    continue;
                };
                if !self.ours(&destination) || status == "Deleting" {
                    continue;
                }
                entries
                    .entry(destination)
                    .or_default()
                    .insert(table.clone(), Entry { instance, status });
            }
        }
        // Instances no node claims: gone (a dead entry, ours) or someone else's.
        let strangers: Vec<String> = entries
            .values()
            .flat_map(|t| t.values())
            .filter(|e| !by_instance.contains_key(e.instance.as_str()))
            .map(|e| e.instance.clone())
            .collect();
        {
            // A list is the moment to forget what was learnt of instances: one may
            // have been deleted since.
            lock(&self.state).instances.clear();
        }
        self.learn_instances(&strangers)?;
        let state_instances = lock(&self.state).instances.clone();
        let gone = |i: &str| matches!(state_instances.get(i), Some(None));
        let mut kept = HashMap::new();
        let mut foreign = HashMap::new();
        for (destination, tables) in entries {
            let node = tables
                .values()
                .find_map(|e| by_instance.get(e.instance.as_str()).copied());
            let dead = tables.values().any(|e| gone(&e.instance));
            // A dead entry's delete touches the tables where it is dead alone: another
            // table's entry to a live instance on the destination is not ours.
            let tables = if node.is_none() && dead {
                tables
                    .into_iter()
                    .filter(|(_, e)| gone(&e.instance))
                    .collect()
            } else {
                tables
            };
            let everywhere = tables.len() == self.tables.len()
                && tables
                    .values()
                    .all(|e| Some(&e.instance) == tables.values().next().map(|f| &f.instance));
            let target = match (node, dead) {
                (Some(node), _) if everywhere => Some(node.to_string()),
                // In some tables only: listed as absent, so that the create writes
                // the tables that lack it.
                (Some(_), _) => None,
                (None, true) => Some(String::new()),
                // Another instance's entry inside the cluster CIDR: never ours.
                (None, false) => {
                    if let Some((table, e)) = tables.iter().next() {
                        foreign.insert(destination, (table.clone(), e.instance.clone()));
                    }
                    continue;
                }
            };
            if let Some(target_node) = target {
                each(Route {
                    name: String::new(),
                    // A dead entry leads nowhere (as aws's and hcloud's): the plan's
                    // reason for its delete is Blackhole.
                    blackhole: node.is_none(),
                    target_node,
                    destination_cidr: destination.to_string(),
                    ..Route::default()
                });
            }
            kept.insert(destination, tables);
        }
        let mut state = lock(&self.state);
        state.entries = kept;
        state.foreign = foreign;
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
        // The instances of the creates, looked up in one call before anything is written.
        let instances: Vec<String> = changes
            .iter()
            .filter_map(|c| match c {
                RouteChange::Create { target, .. } => target
                    .provider_id
                    .as_deref()
                    .and_then(instance_id)
                    .map(String::from),
                RouteChange::Delete { .. } => None,
            })
            .collect();
        {
            // An instance not found is looked up again at each try: a new node's
            // instance may not be listed yet, and a list may be 12-24 h away.
            let mut state = lock(&self.state);
            for i in &instances {
                if matches!(state.instances.get(i), Some(None)) {
                    state.instances.remove(i);
                }
            }
        }
        self.learn_instances(&instances)?;
        // (table, index, destination, instance) of every write.
        let mut creates: Vec<(String, usize, Cidr, String)> = Vec::new();
        let mut deletes: Vec<(String, usize, Cidr, String)> = Vec::new();
        for (index, change) in changes.iter().enumerate() {
            match change {
                RouteChange::Create { route, target, .. } => match self.check_create(route, target)
                {
                    Ok((destination, instance)) => {
                        let state = lock(&self.state);
                        let held = state.entries.get(&destination);
                        for table in &self.tables {
                            let there = held.and_then(|t| t.get(table));
                            if there.is_some_and(|e| e.instance == instance) {
                                continue; // the table holds it already
                            }
                            creates.push((table.clone(), index, destination, instance.clone()));
                        }
                    }
                    Err(e) => outcomes[index] = Err(e),
                },
                RouteChange::Delete { route } => {
                    let destination = Cidr::parse(&route.destination_cidr).map_err(|e| {
                        CloudError::invalid(format!("alibaba: route destination: {e}"))
                    });
                    let destination = match destination {
                        Ok(d) => d,
                        Err(e) => {
                            outcomes[index] = Err(e);
                            continue;
                        }
                    };
                    let state = lock(&self.state);
                    let held: Vec<(String, String)> = state
                        .entries
                        .get(&destination)
                        .map(|t| {
                            t.iter()
                                .map(|(t, e)| (t.clone(), e.instance.clone()))
                                .collect()
                        })
                        .unwrap_or_default();
                    if held.is_empty() {
                        outcomes[index] = Err(CloudError::new(
                            CloudErrorKind::NotFound,
                            format!(
                                "alibaba: no entry to {destination} of ours in {}",
                                self.tables.join(", ")
                            ),
                        ));
                    }
                    for (table, instance) in held {
                        deletes.push((table, index, destination, instance));
                    }
                }
            }
        }
        let mut written = false;
        // Deletes first: they free the table's quota and the destinations.
        for (create, list) in [(false, &deletes), (true, &creates)] {
            for table in &self.tables {
                let of_table: Vec<(usize, Cidr, String)> = list
                    .iter()
                    .filter(|(t, ..)| t == table)
                    .map(|(_, i, d, n)| (*i, *d, n.clone()))
                    .collect();
                for chunk in of_table.chunks(BATCH_SIZE) {
                    match self.write_table(table, create, chunk) {
                        Ok(results) => {
                            for (index, outcome) in results {
                                if outcome.is_ok()
                                    && let Some((_, d, n)) =
                                        chunk.iter().find(|(i, ..)| *i == index)
                                {
                                    self.remember(table, create, *d, n);
                                }
                                // A change's outcome is its worst table's.
                                if outcomes[index].is_ok() {
                                    outcomes[index] = outcome;
                                }
                            }
                        }
                        Err(failure) if !create && gone_entry(&failure, chunk) => {
                            // One entry, and the code names it: that entry is gone.
                            let (index, destination, instance) = &chunk[0];
                            self.remember(table, create, *destination, instance);
                            if outcomes[*index].is_ok() {
                                outcomes[*index] = Err(failure.error);
                            }
                        }
                        Err(failure) if !written => {
                            return Err(refused_whole(failure, chunk, changes.len()));
                        }
                        Err(failure) => {
                            let error = unknown_after_write(failure.error);
                            for (index, ..) in chunk {
                                if outcomes[*index].is_ok() {
                                    outcomes[*index] = Err(error.clone());
                                }
                            }
                        }
                    }
                    written = true;
                }
            }
        }
        // A delete whose entry was gone already is done.
        for (index, outcome) in outcomes.iter_mut().enumerate() {
            if matches!(changes[index], RouteChange::Delete { .. })
                && matches!(outcome, Err(e) if e.kind == CloudErrorKind::NotFound)
                && deletes.iter().any(|(_, i, ..)| *i == index)
            {
                *outcome = Ok(());
            }
        }
        Ok(outcomes)
    }
}

/// Whether a whole call's failure says its one entry is gone: a not-found code of an
/// entry (not of the table, nor a bare 404) for a call of one entry. A call of many
/// that fails whole says nothing of any one of them.
fn gone_entry(failure: &Failure, chunk: &[(usize, Cidr, String)]) -> bool {
    chunk.len() == 1 && api::kind_of(&failure.code) == Some(CloudErrorKind::NotFound)
}

/// A whole call that failed after another of the pass was written: a not-found is
/// not "done" (nothing of these entries is known), so it is ambiguous and the
/// controller lists.
fn unknown_after_write(e: CloudError) -> CloudError {
    if e.kind == CloudErrorKind::NotFound {
        CloudError::ambiguous(format!(
            "{} (the whole call failed; what became of its entries is read at the next list)",
            e.message
        ))
    } else {
        e
    }
}

/// A whole call refused before anything of the batch was written: for an entry the
/// API holds invalid, the batch refused (naming the entry when its message does).
fn refused_whole(failure: Failure, chunk: &[(usize, Cidr, String)], _changes: usize) -> CloudError {
    let mut e = failure.error;
    if e.kind == CloudErrorKind::NotFound {
        // A whole call not found (the table, the action, a bare 404) is no entry's
        // "done": nothing was written, and the configuration is at fault.
        e.kind = CloudErrorKind::Invalid;
        return e;
    }
    if e.kind != CloudErrorKind::Invalid || !about_one_entry(&failure.code) {
        // Permissions, keys, signatures, parameters of the call, unknown codes: no
        // node is at fault, and splitting the batch would only repeat the refusal.
        return e;
    }
    let named: Vec<usize> = chunk
        .iter()
        .filter(|(_, d, _)| e.message.contains(&d.to_string()))
        .map(|(i, ..)| *i)
        .collect();
    let at_fault = match named.as_slice() {
        [one] => Some(*one),
        _ => None,
    };
    CloudError::batch_refused(ENTRY_REFUSED, at_fault, e.message)
}

/// What a `DescribeInstances` reply for `asked` says of each: its VPC, or `None`
/// when it is gone. Gone is concluded from silence only in a well-formed reply (the
/// instance list present, every instance one asked for, `TotalCount` agreeing):
/// anything else is a retry, since a gone instance's entries are deleted.
fn instances_of(
    asked: &[String],
    reply: &Value,
) -> Result<HashMap<String, Option<String>>, CloudError> {
    let odd = |why: &str| {
        CloudError::new(
            CloudErrorKind::Retry { after: None },
            format!(
                "alibaba: DescribeInstances: {why}; no instance is taken for gone from this reply"
            ),
        )
    };
    let listed = reply
        .get("Instances")
        .and_then(|o| o.get("Instance"))
        .and_then(Value::as_array)
        .ok_or_else(|| odd("the reply has no Instances.Instance list"))?;
    if reply.get("TotalCount").is_none() || count(reply, "TotalCount") != listed.len() {
        return Err(odd(&format!(
            "TotalCount {:?} disagrees with the {} instances listed",
            reply.get("TotalCount"),
            listed.len()
        )));
    }
    let mut found: HashMap<String, Option<String>> =
        asked.iter().map(|i| (i.clone(), None)).collect();
    for i in listed {
        let id = text(i, "InstanceId").ok_or_else(|| odd("an instance without InstanceId"))?;
        if !found.contains_key(&id) {
            return Err(odd(&format!("instance {id} was not asked for")));
        }
        let vpc = i.get("VpcAttributes").and_then(|v| text(v, "VpcId"));
        found.insert(id, Some(vpc.unwrap_or_default()));
    }
    Ok(found)
}

/// The entry a `FailedRouteEntries` item is about: by its destination, else (one
/// missing or unreadable) by its next hop when one entry alone has it, as the peer
/// matches them.
fn failed_entry<'a>(
    entries: &'a [(usize, Cidr, String)],
    failed: &Value,
) -> Option<&'a (usize, Cidr, String)> {
    if let Some(cidr) = text(failed, "DstCidrBlock").and_then(|c| Cidr::parse(&c).ok()) {
        return entries.iter().find(|(_, d, _)| *d == cidr);
    }
    let hop = text(failed, "NextHop")?;
    let mut to_hop = entries.iter().filter(|(_, _, i)| *i == hop);
    match (to_hop.next(), to_hop.next()) {
        (Some(one), None) => Some(one),
        _ => None,
    }
}

/// Whether a code refusing a whole call is about one entry's destination or next
/// hop (e.g. `OperationUnsupported.DestinationCidrBlockOverlapWithVSwitch`,
/// `InvalidNextHop.NotFound`), so that splitting the batch finds the node at fault.
fn about_one_entry(code: &str) -> bool {
    let code = code.to_ascii_lowercase();
    [
        "cidrblock",
        "cidr_block",
        "destination",
        "nexthop",
        "next_hop",
    ]
    .iter()
    .any(|k| code.contains(k))
}

/// The ECS instance of a providerID (the node filter's parser, one for both).
pub use crate::node_filter::alibaba_instance as instance_id;

fn overlaps(a: &Cidr, b: &Cidr) -> bool {
    a.is_ipv4() == b.is_ipv4() && (a.contains(b.network()) || b.contains(a.network()))
}

/// A string field.
fn text(v: &Value, key: &str) -> Option<String> {
    match v.get(key)? {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// A count field (`TotalCount`), 0 when absent.
fn count(v: &Value, key: &str) -> usize {
    match v.get(key) {
        Some(Value::Number(n)) => n.as_u64().unwrap_or(0) as usize,
        Some(Value::String(s)) => s.parse().unwrap_or(0),
        _ => 0,
    }
}

/// The RPC APIs' list shape: `{outer: {inner: [...]}}`.
fn array(v: &Value, outer: &str, inner: &str) -> Vec<Value> {
    v.get(outer)
        .and_then(|o| o.get(inner))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// A list given either directly (`{outer: [...]}`, as the V3 SDK models the batch
/// replies) or in the RPC shape.
fn array_or_list(v: &Value, outer: &str, inner: &str) -> Vec<Value> {
    match v.get(outer) {
        Some(Value::Array(a)) => a.clone(),
        _ => array(v, outer, inner),
    }
}

fn named(e: CloudError, key: &str) -> CloudError {
    CloudError::new(
        e.kind,
        format!("{} (set {key} in the cloud config outside ECS)", e.message),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_ids_name_their_instance() {
        assert_eq!(instance_id("cn-hangzhou.i-abc"), Some("i-abc"));
        assert_eq!(instance_id("alicloud://cn-hangzhou.i-abc"), Some("i-abc"));
        assert_eq!(instance_id("i-abc"), None);
        assert_eq!(instance_id("aws:///us-east-1a/i-1"), None);
        assert_eq!(instance_id(".i-abc"), None);
        // Another provider's ID with a dot in it is no instance of ours.
        assert_eq!(instance_id("azure://rg.vm-1"), None);
    }

    /// Guards "an undecodable reply never deletes": gone is concluded only from a
    /// well-formed reply.
    #[test]
    fn instances_are_gone_only_by_a_well_formed_reply() {
        let asked = vec!["i-a".to_string(), "i-b".to_string()];
        let vpc =
            |id: &str| serde_json::json!({"InstanceId": id, "VpcAttributes": {"VpcId": "vpc-1"}});
        let good = serde_json::json!({"TotalCount": 1, "Instances": {"Instance": [vpc("i-a")]}});
        let found = instances_of(&asked, &good).unwrap();
        assert_eq!(found["i-a"].as_deref(), Some("vpc-1"));
        assert_eq!(found["i-b"], None);
        for odd in [
            serde_json::json!({}),
            serde_json::json!({"TotalCount": 0, "Instances": {}}),
            serde_json::json!({"Instances": {"Instance": [vpc("i-a")]}}),
            serde_json::json!({"TotalCount": 5, "Instances": {"Instance": [vpc("i-a")]}}),
            serde_json::json!({"TotalCount": 1, "Instances": {"Instance": [vpc("i-z")]}}),
        ] {
            let e = instances_of(&asked, &odd).expect_err(&odd.to_string());
            assert!(matches!(e.kind, CloudErrorKind::Retry { .. }), "{e}");
        }
    }

    /// Guards "whole-call errors are blamed on no node": only a code about one
    /// entry's destination or next hop makes the batch refused (and split).
    #[test]
    fn only_codes_about_one_entry_refuse_the_batch() {
        let chunk = [(0, Cidr::parse("10.244.1.0/24").unwrap(), "i-1".to_string())];
        let refused = |code: &str| {
            let failure = Failure {
                code: code.into(),
                error: CloudError::invalid(format!("alibaba: X: HTTP 400 {code}")),
                denied: false,
            };
            matches!(
                refused_whole(failure, &chunk, 1).kind,
                CloudErrorKind::BatchRefused { .. }
            )
        };
        for code in [
            "OperationUnsupported.DestinationCidrBlockOverlapWithVSwitch",
            "InvalidDestinationCidrBlock.Malformed",
            "InvalidNextHop.NotFound",
            "VPC_ROUTE_ENTRY_CIDR_BLOCK_RESERVED",
        ] {
            assert!(refused(code), "{code}");
        }
        for code in [
            "NoPermission.RouteEntry",
            "Forbbiden",
            "Forbidden.RAM",
            "IncompleteSignature",
            "InvalidSecurityToken.Expired",
            "InvalidParameter.RouteEntries",
            "MissingRegionId",
            "SomethingNew",
        ] {
            assert!(!refused(code), "{code}");
        }
    }

    /// Guards the mapping of per-entry failures: by destination, else by next hop
    /// when it names one entry alone, else none (never a guess).
    #[test]
    fn a_failed_entry_is_matched_by_destination_else_by_its_next_hop() {
        let c = |s: &str| Cidr::parse(s).unwrap();
        let entries = [
            (0, c("10.244.1.0/24"), "i-1".to_string()),
            (1, c("10.244.2.0/24"), "i-2".to_string()),
            (2, c("10.244.3.0/24"), "i-2".to_string()),
        ];
        let index = |failed: Value| failed_entry(&entries, &failed).map(|e| e.0);
        use serde_json::json as j;
        assert_eq!(
            index(j!({"DstCidrBlock": "10.244.2.0/24", "NextHop": "i-1"})),
            Some(1)
        );
        assert_eq!(index(j!({"NextHop": "i-1"})), Some(0));
        assert_eq!(
            index(j!({"DstCidrBlock": "garbage", "NextHop": "i-1"})),
            Some(0)
        );
        assert_eq!(index(j!({"NextHop": "i-2"})), None);
        assert_eq!(
            index(j!({"DstCidrBlock": "10.244.9.0/24", "NextHop": "i-1"})),
            None
        );
    }

    #[test]
    fn overlap_is_either_way_and_per_family() {
        let c = |s: &str| Cidr::parse(s).unwrap();
        assert!(overlaps(&c("10.0.0.0/16"), &c("10.0.5.0/24")));
        assert!(overlaps(&c("10.0.5.0/24"), &c("10.0.0.0/8")));
        assert!(!overlaps(&c("10.1.0.0/16"), &c("10.0.5.0/24")));
        assert!(!overlaps(&c("::/0"), &c("10.0.5.0/24")));
    }
}
