//! The AWS EC2 provider: each pod CIDR is a route in every route table of the cluster,
//! pointing at the node's instance (`InstanceId`), as upstream's AWS cloud provider
//! does it for its one table, or at the interface that holds the node's InternalIP
//! (`NetworkInterfaceId`) when the instance has several (`Hop`). A multi-AZ VPC has
//! a table per zone; pods in every subnet need every node's route. IPv6 pod CIDRs are
//! routed as `DestinationIpv6CidrBlock`, which upstream never did.
//!
//! - **Which tables:** the configured route table IDs, or every table tagged for the
//!   cluster (`kubernetes.io/cluster/<cluster name>` with any value, or the legacy
//!   `KubernetesCluster=<cluster name>`), found with a server-side tag filter at every
//!   list: a table gone or untagged is dropped with a log line, a new one picked up.
//!   Creates and deletes use the tables (and their routes) of the last list.
//! - **Several tables, one list:** the controller sees a destination only when every
//!   table routes it alike; [`merge_tables`] says how partial routes are reported so
//!   that a create fills the gaps and no delete removes what a node needs.
//! - **Instance ↔ node:** through the node's `spec.providerID` (`aws:///ZONE/i-…`).
//!   A route to an instance that is not a known node is resolved with
//!   `DescribeInstances` (private DNS name or instance ID as the node name); a route to
//!   an instance that no longer exists is reported as a blackhole with no target, and
//!   never fails the list.
//! - **Calls:** list = one `DescribeRouteTables` for all tables (plus
//!   `DescribeInstances` only for instances that are not nodes); create = one
//!   `CreateRoute` per table lacking the route, preceded once per instance and process
//!   by a `DescribeInstances` (the pre-flight check: VPC, interfaces, source/destination
//!   check; upstream describes the instance at every create), for an IPv6 route to an
//!   interface without an IPv6 address one `DescribeSubnets` per subnet, and, when
//!   the hop's check is on, `ModifyInstanceAttribute` (or, for an interface,
//!   `ModifyNetworkInterfaceAttribute`) `SourceDestCheck=false`; a list reads the
//!   size of prefix lists the tables route to once per list and process
//!   (`DescribeManagedPrefixLists`); delete = one `DeleteRoute` per
//!   table holding it. The controller spends the budget the provider declares, a
//!   bucket per EC2 action as EC2 keeps them ([`ec2_buckets`]), and corrects each from
//!   the calls each operation reports by action ([`Meter`]); when EC2 throttles an
//!   action, the provider asks it to hold back the operations that send that action
//!   for a backoff that grows while throttling lasts. No call here waits for budget.
//!
//! It never decides which routes to delete (the controller does), never deletes a
//! route it was not asked to, never logs credentials, and never retries a mutation on
//! its own: an uncertain outcome is reported as ambiguous for the controller to check.

#[doc(hidden)]
pub mod container;
#[doc(hidden)]
pub mod credentials;
#[doc(hidden)]
pub mod ec2;
#[doc(hidden)]
pub mod process;
#[doc(hidden)]
pub mod profile;
#[doc(hidden)]
pub mod query;
#[doc(hidden)]
pub mod quotas;
#[doc(hidden)]
pub mod sigv4;
#[doc(hidden)]
pub mod sts;
#[doc(hidden)]
pub mod xml;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use rand::RngExt;

use self::credentials::{AwsEnv, ChainSettings, CredentialSource, Imds, resolve_region};
use self::ec2::{
    CREATE_ROUTE, CallError, CallKind, DELETE_ROUTE, DESCRIBE_INSTANCES,
    DESCRIBE_MANAGED_PREFIX_LISTS, DESCRIBE_ROUTE_TABLES, DESCRIBE_SUBNETS, Instance,
    LEGACY_CLUSTER_TAG, MODIFY_INSTANCE_ATTRIBUTE, MODIFY_NETWORK_INTERFACE_ATTRIBUTE,
    REPLACE_ROUTE, RouteEntry, RouteTable, ThrottleBackoff, cluster_tag_key,
    instance_id_from_provider_id, is_instance_id, is_throttling, parse_instances,
    parse_prefix_lists, parse_route_tables, parse_subnets_with_ipv6,
};
use self::query::{Endpoint, Params, QueryClient, QueryClientConfig, QueryError};
use self::xml::Element;
use crate::credentials::Clock;
use crate::fence::Fence;
use crate::model::{Cidr, Route};
use crate::provider::{
    Budget, BudgetOp, CloudError, CloudErrorKind, Meter, NodeDirectory, RouteTarget, Routes,
    TableUsage,
};
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
    /// The route tables to manage. Default (empty): every table tagged for the cluster.
    pub route_table_ids: Vec<String>,
    /// The instance metadata endpoint. Default: `AWS_EC2_METADATA_SERVICE_ENDPOINT`,
    /// then `http://169.254.169.254`.
    pub imds_endpoint: Option<String>,
    /// Client-side limit on EC2 calls of an action without a bucket in `buckets`
    /// (default 5 per second; every action this provider sends has one).
    pub requests_per_second: f64,
    /// Calls of such an action that may go out at once (default 20).
    pub burst: u32,
    /// The bucket of each EC2 action this provider sends, spent by the controller:
    /// EC2 throttles each action in a bucket of its own, per account and region.
    /// Default: [`ec2_buckets`], EC2's documented sizes less a margin;
    /// `EC2Bucket<Action> = <per second>,<burst>` in `--cloud-config` overrides one.
    pub buckets: Vec<ActionBucket>,
    /// Timeout of one request (default 20 s); connecting times out after 5 s.
    pub timeout: Duration,
    /// Routes each route table may hold (`RouteTableRouteLimit` in `--cloud-config`):
    /// no create is sent beyond it. Default (`None`): the account's "Routes per route
    /// table" from Service Quotas, read once before the first list; when that may not
    /// be read (it needs `servicequotas:GetServiceQuota`) or fails, AWS's default of
    /// 500 ([`quotas::DEFAULT_ROUTE_TABLE_LIMIT`]; it was 50 until June 2025, and may
    /// be raised to 1000).
    pub route_table_limit: Option<usize>,
    /// The Service Quotas endpoint URL, for that one read. Default:
    /// `AWS_ENDPOINT_URL_SERVICE_QUOTAS`, `AWS_ENDPOINT_URL`, then
    /// `https://servicequotas.<region>.amazonaws.com/`. Tests point it at moto.
    pub service_quotas_endpoint: Option<String>,
    /// Turn off each node instance's source/destination check before its first route
    /// (`DisableSourceDestCheck` in `--cloud-config`; default true, as upstream's AWS
    /// provider does). False: the controller never modifies an instance; a node whose
    /// instance still checks is refused with reason `SourceDestCheckEnabled` and the
    /// fix, since EC2 would drop its pods' traffic.
    pub disable_source_dest_check: bool,
    /// The cluster ID whose tag finds the route tables when none are configured
    /// (`KubernetesClusterID`, or the legacy `KubernetesClusterTag`, of the cloud
    /// config, as cloud-provider-aws's tagging reads them). Default (`None`):
    /// `--cluster-name`.
    pub cluster_id: Option<String>,
    /// EC2 endpoints by region (`[ServiceOverride]` sections of the cloud config with
    /// `Service = EC2`): used when the region resolved at start is one of them and no
    /// endpoint is configured above. Default: none.
    pub ec2_overrides: Vec<(String, String)>,
    /// A role assumed on top of the credential chain with STS `AssumeRole`, signed
    /// with the chain's credentials (`RoleARN` in `--cloud-config`, as
    /// cloud-provider-aws assumes it). Default: none, the chain's own identity.
    pub role_arn: Option<String>,
    /// Whether EC2 and Service Quotas requests go through a proxy (default: as
    /// `HTTPS_PROXY`, `HTTP_PROXY` and `NO_PROXY` say, as the AWS SDKs read them).
    /// IMDS never does.
    pub proxying: crate::Proxying,
}

/// The client-side bucket of one EC2 action: its refill rate and size.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ActionBucket {
    /// The EC2 action (`CreateRoute`, …).
    pub action: &'static str,
    /// Requests per second, sustained.
    pub requests_per_second: f64,
    /// Requests that may go out at once after a quiet period.
    pub burst: u32,
}

/// The part of EC2's documented bucket that this controller plans to spend: requests
/// whose latencies vary arrive closer together than they were sent, and other
/// clients of the account (the CCM, Karpenter, Terraform) draw from the same buckets.
const EC2_MARGIN: f64 = 0.8;

/// EC2's buckets for the actions this provider sends, each at 80 % of its
/// documented size and refill rate. "Request throttling for the Amazon EC2 API"
/// (<https://docs.aws.amazon.com/ec2/latest/devguide/ec2-api-throttling.html>, "Request
/// token limits"): each API action is evaluated in a bucket of its own; non-mutating
/// actions (`Describe*`, with filters as all of ours have) hold 100 tokens and refill
/// 20 a second; mutating actions (`CreateRoute`, `ReplaceRoute`, `DeleteRoute`,
/// `ModifyInstanceAttribute`) hold 200 and refill 5 a second. The non-mutating
/// figures are the page's own worked example (`DescribeHosts`); the mutating ones are
/// from its table of bucket sizes as issue 26 quotes it. An account's limits may have
/// been raised, or be shared with other tools: `EC2Bucket<Action>` in
/// `--cloud-config` sets one.
pub fn ec2_buckets() -> Vec<ActionBucket> {
    let bucket = |action, per_second: f64, burst: f64| ActionBucket {
        action,
        requests_per_second: per_second * EC2_MARGIN,
        burst: (burst * EC2_MARGIN) as u32,
    };
    vec![
        bucket(DESCRIBE_ROUTE_TABLES, 20.0, 100.0),
        bucket(DESCRIBE_INSTANCES, 20.0, 100.0),
        bucket(CREATE_ROUTE, 5.0, 200.0),
        bucket(REPLACE_ROUTE, 5.0, 200.0),
        bucket(DELETE_ROUTE, 5.0, 200.0),
        bucket(MODIFY_INSTANCE_ATTRIBUTE, 5.0, 200.0),
        bucket(MODIFY_NETWORK_INTERFACE_ATTRIBUTE, 5.0, 200.0),
        bucket(DESCRIBE_SUBNETS, 20.0, 100.0),
        bucket(DESCRIBE_MANAGED_PREFIX_LISTS, 20.0, 100.0),
    ]
}

/// How long a failed read of prefix lists is not tried again.
pub const PREFIX_LIST_RETRY: Duration = Duration::from_secs(15 * 60);

/// `NetworkUnavailable` reason: the node's instance is in another VPC than a route table.
pub const INSTANCE_NOT_IN_VPC: &str = "InstanceNotInVPC";
/// `NetworkUnavailable` reason: the instance's source/destination check is on and the
/// controller was told not to turn it off.
pub const SOURCE_DEST_CHECK_ENABLED: &str = "SourceDestCheckEnabled";
/// `NetworkUnavailable` reason: an IPv6 pod CIDR, and the subnet of the node's
/// interface has no IPv6 CIDR block, so EC2 has no IPv6 path to the node.
pub const SUBNET_WITHOUT_IPV6: &str = "SubnetWithoutIPv6";
/// `NetworkUnavailable` reason: the instance has several network interfaces and none
/// holds the node's InternalIP, so the controller cannot tell which one the pods use.
pub const NO_INTERFACE_FOR_INTERNAL_IP: &str = "NoInterfaceForInternalIP";

impl Default for AwsConfig {
    fn default() -> AwsConfig {
        AwsConfig {
            region: None,
            endpoint: None,
            route_table_ids: Vec::new(),
            imds_endpoint: None,
            requests_per_second: 5.0,
            burst: 20,
            buckets: ec2_buckets(),
            timeout: Duration::from_secs(20),
            route_table_limit: None,
            service_quotas_endpoint: None,
            disable_source_dest_check: true,
            cluster_id: None,
            ec2_overrides: Vec::new(),
            role_arn: None,
            proxying: crate::Proxying::from_process(),
        }
    }
}

/// The EC2 provider. Safe to share between the cloud worker threads.
pub struct AwsProvider {
    ec2: QueryClient,
    /// Requests per second and burst of an action without a bucket, declared to the
    /// controller.
    budget: (f64, u32),
    /// Each action's bucket, declared to the controller.
    buckets: Vec<ActionBucket>,
    throttle: Mutex<ThrottleBackoff>,
    /// The configured route table IDs; empty: the tables tagged for the cluster.
    configured_tables: Vec<String>,
    /// The tables of the last list (or lookup) and the routes each held then, updated
    /// by this provider's own creates and deletes.
    managed: Mutex<Option<Managed>>,
    /// This provider's own changes made while a list was in flight, so that a list's
    /// snapshot (read before they landed) does not undo them in `managed`. Locked
    /// after `managed` when both are held.
    changes: Mutex<Changes>,
    /// Instances and interfaces whose source/destination check this process has
    /// disabled; one lock per hop so that concurrent creates for one node call EC2
    /// once.
    source_dest_check: Mutex<HashMap<String, Arc<Mutex<bool>>>>,
    /// Subnets known to have an IPv6 CIDR block (only that is remembered: an
    /// operator's fix of a subnet without one is seen at the next try).
    ipv6_subnets: Mutex<HashSet<String>>,
    /// One lock per instance or subnet being described (see [`AwsProvider::flight`]).
    flights: Mutex<HashMap<String, Arc<Mutex<()>>>>,
    /// Family (true: IPv6) and weight of the prefix lists the tables route to, read
    /// once per list ID and process: what such a route counts against the quota.
    prefix_lists: Mutex<HashMap<String, (bool, usize)>>,
    /// When a read of prefix lists last failed: none is tried again for
    /// [`PREFIX_LIST_RETRY`], so that a missing IAM action costs one call per period,
    /// not one per list. On the environment's clock ([`AwsEnv::clock`]), which
    /// tests move.
    prefix_list_failure: Mutex<Option<SystemTime>>,
    clock: Clock,
    /// The interface each instance with several interfaces is routed to (the one
    /// holding its node's InternalIP), as the last pre-flight check found it: a listed
    /// route to another interface of it is reported for replacement.
    interface_hops: Mutex<HashMap<String, String>>,
    /// Instances known to be terminated or gone: that never changes back.
    gone: Mutex<HashSet<String>>,
    calls: Mutex<BTreeMap<&'static str, u64>>,
    /// Checked right before every request goes out (see [`Fence`]).
    fence: Fence,
    /// How long one request may take, for the fence's bound.
    request_timeout: Duration,
    /// What `DescribeInstances` said of node instances (VPC, source/dest check), for
    /// the pre-flight check; one describe per instance and process, except while its
    /// check is on and the controller may not turn it off.
    facts: Mutex<HashMap<String, Instance>>,
    /// Routes each table may hold: configured, or decided once by the Service Quotas
    /// read before the first list.
    route_table_limit: OnceLock<usize>,
    /// Where that read goes; `None` when the limit is configured (no read is made).
    service_quotas: Option<Endpoint>,
    disable_source_dest_check: bool,
    /// The cluster ID whose tag finds the tables, instead of the cluster name.
    cluster_id: Option<String>,
}

impl fmt::Debug for AwsProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AwsProvider")
            .field("ec2", &self.ec2)
            .field("route_tables", &self.configured_tables)
            .finish_non_exhaustive()
    }
}

/// The CAs the AWS clients trust: the bundled roots and the machine's store, plus
/// `AWS_CA_BUNDLE`, else the profile's `ca_bundle` (`profile_ca_bundle`), as the AWS
/// SDKs read them.
pub fn trust(env: &AwsEnv, profile_ca_bundle: Option<&Path>) -> Result<crate::Trust, CloudError> {
    let mut trust = crate::Trust::new("AWS_CA_BUNDLE");
    let bundle = match env.var("AWS_CA_BUNDLE") {
        Some(path) => Some((PathBuf::from(path), "AWS_CA_BUNDLE")),
        None => profile_ca_bundle.map(|p| (p.to_path_buf(), "ca_bundle of the AWS profile")),
    };
    if let Some((path, option)) = bundle {
        trust
            .add_ca_file(&path, option)
            .map_err(|e| CloudError::invalid(e.0))?;
    }
    Ok(trust)
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
        if let Some(b) = config.buckets.iter().find(|b| {
            !(b.requests_per_second.is_finite() && b.requests_per_second > 0.0) || b.burst == 0
        }) {
            return Err(CloudError::invalid(format!(
                "EC2 bucket of {} ({} per second, burst {}) is unusable: both must be positive",
                b.action, b.requests_per_second, b.burst
            )));
        }
        let imds = Imds::from_env(env, config.imds_endpoint.as_deref());
        let region = resolve_region(config.region.as_deref(), env, imds.as_ref())?;
        let overridden = config
            .ec2_overrides
            .iter()
            .find(|(r, _)| *r == region)
            .map(|(_, url)| url.as_str());
        let endpoint = resolve_endpoint(config.endpoint.as_deref().or(overridden), env, &region)?;
        let route_table_limit = OnceLock::new();
        let service_quotas = match config.route_table_limit {
            Some(limit) => {
                let _ = route_table_limit.set(limit.max(1));
                None
            }
            None => Some(resolve_service_quotas_endpoint(
                config.service_quotas_endpoint.as_deref(),
                env,
                &region,
            )?),
        };
        let chain = ChainSettings::new(&region).with_role_arn(config.role_arn.as_deref());
        let credentials = CredentialSource::resolve(env, imds, &chain)?;
        // Temporary credentials are fetched now, so that a pod without its web
        // identity, a role it may not assume or a machine without an instance role
        // fails at start, not at its first route.
        if let CredentialSource::Temporary(_) = &credentials {
            credentials.current(env.now())?;
        }
        let mut tables: Vec<String> = Vec::new();
        for t in config.route_table_ids.iter().map(|t| t.trim()) {
            if t.is_empty() || tables.iter().any(|known| known == t) {
                continue;
            }
            if !t.starts_with("rtb-") {
                return Err(CloudError::invalid(format!(
                    "route table ID {t:?} does not look like one (rtb-…)"
                )));
            }
            tables.push(t.to_string());
        }
        log::info!(
            "AWS provider: region {region}, endpoint {}, credentials: {}, route tables {}, \
             route-table limit {}",
            endpoint.url,
            credentials.origin(),
            if tables.is_empty() {
                "found by cluster tag".to_string()
            } else {
                tables.join(", ")
            },
            match (route_table_limit.get(), &service_quotas) {
                (Some(limit), _) => format!("{limit} (RouteTableRouteLimit)"),
                (None, Some(quotas)) => format!("from Service Quotas at {}", quotas.url),
                (None, None) => "unknown".to_string(),
            }
        );
        Ok(AwsProvider {
            ec2: QueryClient::new(QueryClientConfig {
                endpoint,
                region,
                service: "ec2",
                version: EC2_API_VERSION,
                credentials: Some(credentials),
                clock: env.clock(),
                timeout: config.timeout,
                trust: trust(env, credentials::profile_ca_bundle(env).as_deref())?,
                proxying: config.proxying.clone(),
            }),
            budget: (config.requests_per_second, config.burst),
            buckets: config.buckets.clone(),
            throttle: Mutex::new(ThrottleBackoff::new()),
            configured_tables: tables,
            managed: Mutex::new(None),
            changes: Mutex::new(Changes::default()),
            source_dest_check: Mutex::new(HashMap::new()),
            ipv6_subnets: Mutex::new(HashSet::new()),
            flights: Mutex::new(HashMap::new()),
            prefix_lists: Mutex::new(HashMap::new()),
            prefix_list_failure: Mutex::new(None),
            clock: env.clock(),
            interface_hops: Mutex::new(HashMap::new()),
            gone: Mutex::new(HashSet::new()),
            calls: Mutex::new(BTreeMap::new()),
            fence: Fence::open(),
            request_timeout: config.timeout,
            facts: Mutex::new(HashMap::new()),
            route_table_limit,
            service_quotas,
            disable_source_dest_check: config.disable_source_dest_check,
            cluster_id: config.cluster_id.clone(),
        })
    }

    /// Every request from now on first passes `fence` (leader election's; see
    /// [`Fence`]): after the lease is lost nothing is sent, and a route change stops
    /// between its `ModifyInstanceAttribute` and its `CreateRoute`s.
    pub fn with_fence(mut self, fence: Fence) -> AwsProvider {
        fence.covers(self.request_timeout);
        self.fence = fence;
        self
    }

    /// The region the provider signs for.
    pub fn region(&self) -> &str {
        self.ec2.region()
    }

    /// The EC2 endpoint it calls.
    pub fn endpoint(&self) -> &str {
        &self.ec2.endpoint().url
    }

    /// AWS calls made so far, by action (`CreateRoute`, …, and Service Quotas'
    /// `GetServiceQuota`), failed ones included.
    pub fn api_calls(&self) -> BTreeMap<&'static str, u64> {
        lock(&self.calls).clone()
    }

    // --- one call -----------------------------------------------------------------

    fn call(
        &self,
        action: &'static str,
        kind: CallKind,
        params: &Params,
    ) -> Result<Element, CallError> {
        let started = Instant::now();
        // Right before the request leaves: the lease may have been lost, also between
        // the requests of one operation.
        let sent = match self.fence.check() {
            Ok(()) => {
                *lock(&self.calls).entry(action).or_default() += 1;
                // The controller spends the budget; this call only reports what it sent,
                // from the action's own bucket.
                Meter::request_in(action);
                self.ec2.call(action, params)
            }
            Err(e) => Err(QueryError::Fenced(e)),
        };
        match sent {
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
                        // Reported as RateLimited: the controller holds back the calls
                        // of this action (EC2 throttles each action on its own) for
                        // `after`; no worker here waits for it.
                        let after = lock(&self.throttle).on_throttled(jitter);
                        Meter::throttled_in(action, after);
                        log::warn!(
                            "EC2 throttled {action}; asking the controller to hold back the operations that send {action} for {}",
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
                    credentials: self.ec2.credentials_origin(),
                })
            }
        }
    }

    /// The routes each table may hold; before the first list decides it, AWS's
    /// default.
    fn route_table_limit(&self) -> usize {
        self.route_table_limit
            .get()
            .copied()
            .unwrap_or(quotas::DEFAULT_ROUTE_TABLE_LIMIT)
    }

    /// Decides the route-table limit once, before the first list: the configured one,
    /// else one `GetServiceQuota` (passing the fence like every request; not drawn
    /// from EC2's budget, which it does not spend), else AWS's default, with one log
    /// line either way. Never fails: EC2's `RouteLimitExceeded` is the backstop.
    fn settle_route_table_limit(&self) -> Result<(), CloudError> {
        let Some(endpoint) = &self.service_quotas else {
            return Ok(());
        };
        if self.route_table_limit.get().is_some() {
            return Ok(());
        }
        // A closed fence is this list's error; the read waits for the next one.
        self.fence.check()?;
        // Concurrent first lists would each read: one wins, the other waits here.
        self.route_table_limit.get_or_init(|| {
            *lock(&self.calls)
                .entry(quotas::GET_SERVICE_QUOTA)
                .or_default() += 1;
            let reply = self.ec2.call_json(
                endpoint,
                quotas::SIGNING_NAME,
                quotas::GET_SERVICE_QUOTA_TARGET,
                &quotas::request_body(),
            );
            let decision = quotas::decide(reply, self.ec2.region());
            if decision.from_account {
                log::info!("{}", decision.message);
            } else {
                log::warn!("{}", decision.message);
            }
            decision.limit
        });
        Ok(())
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

    // --- the route tables ---------------------------------------------------------

    /// The cluster's route tables as they are now, in one `DescribeRouteTables`: the
    /// configured ones by ID, or every table with either cluster tag (both tag keys
    /// in one `tag-key` filter; the legacy tag's value is checked here). The result
    /// replaces the remembered set: a table gone or untagged is dropped with a log
    /// line, a new one is picked up.
    fn fetch_tables(&self, cluster_name: &str) -> Result<Vec<RouteTable>, CloudError> {
        let since = lock(&self.changes).begin_list();
        let result = self.fetch_tables_since(cluster_name, since);
        lock(&self.changes).end_list();
        result
    }

    /// [`fetch_tables`](Self::fetch_tables), for a list that began when this
    /// provider's change counter stood at `since`.
    fn fetch_tables_since(
        &self,
        cluster_name: &str,
        since: u64,
    ) -> Result<Vec<RouteTable>, CloudError> {
        let tagged_for = self.cluster_id.as_deref().unwrap_or(cluster_name);
        let params = if self.configured_tables.is_empty() {
            let key = cluster_tag_key(tagged_for);
            Params::new().filter(1, "tag-key", &[&key, LEGACY_CLUSTER_TAG])
        } else {
            let ids: Vec<&str> = self.configured_tables.iter().map(String::as_str).collect();
            Params::new().filter(1, "route-table-id", &ids)
        };
        let mut tables = self
            .describe_route_tables(params)
            .map_err(CallError::into_cloud)?;
        if self.configured_tables.is_empty() {
            tables.retain(|t| t.is_tagged_for(tagged_for));
        } else {
            tables.retain(|t| self.configured_tables.contains(&t.id));
        }
        tables.sort_by(|a, b| a.id.cmp(&b.id));
        tables.dedup_by(|a, b| a.id == b.id);
        if tables.is_empty() {
            return Err(self.no_tables_error(tagged_for));
        }
        self.read_prefix_lists(&tables);
        self.fill_interface_owners(&mut tables);
        if !self.configured_tables.is_empty() {
            for id in &self.configured_tables {
                if !tables.iter().any(|t| t.id == *id) {
                    log::warn!(
                        "the configured route table {id} does not exist in region {}; managing \
                         the other configured tables (fix RouteTableID in --cloud-config)",
                        self.region()
                    );
                }
            }
        }
        self.remember(cluster_name, &tables, since);
        Ok(tables)
    }

    fn no_tables_error(&self, cluster_name: &str) -> CloudError {
        if !self.configured_tables.is_empty() {
            return CloudError::invalid(format!(
                "none of the configured route tables ({}) exists in region {}: fix RouteTableID \
                 in --cloud-config, or remove it to use the tables tagged for cluster \
                 {cluster_name:?}",
                self.configured_tables.join(", "),
                self.region()
            ));
        }
        let key = cluster_tag_key(cluster_name);
        let from = match self.cluster_id {
            Some(_) => "the cloud config's KubernetesClusterID/KubernetesClusterTag",
            None => "--cluster-name",
        };
        CloudError::invalid(format!(
            "no route table in region {} is tagged for cluster {cluster_name:?} (from {from}): \
             tag the cluster's route tables with {key} (any value) or \
             {LEGACY_CLUSTER_TAG}={cluster_name}, or configure the route table IDs (RouteTableID \
             in --cloud-config)",
            self.region()
        ))
    }

    /// Replaces the remembered tables with `tables`, logging each one dropped or added.
    /// The snapshot was read after the change counter stood at `since`: this
    /// provider's changes noted since then may have landed after EC2 read it (a create
    /// that succeeded in one table while the list was in flight), so they are applied
    /// on top. Without that, a retry of a partly failed create sent `CreateRoute`
    /// again to the table that already had the route.
    fn remember(&self, cluster_name: &str, tables: &[RouteTable], since: u64) {
        let mut managed = lock(&self.managed);
        let previous: Vec<TableView> = match managed.take() {
            Some(m) if m.cluster == cluster_name => m.tables,
            _ => Vec::new(),
        };
        for old in &previous {
            if !tables.iter().any(|t| t.id == old.id) {
                log::warn!(
                    "route table {} is gone or no longer tagged for cluster {cluster_name}; no \
                     longer managing it (its routes are left as they are)",
                    old.id
                );
            }
        }
        for table in tables {
            if !previous.iter().any(|old| old.id == table.id) {
                log::info!(
                    "managing routes in route table {} (VPC {}) for cluster {cluster_name}",
                    table.id,
                    table.vpc_id
                );
            }
        }
        let mut views: Vec<TableView> = tables.iter().map(|t| self.view(t)).collect();
        for change in lock(&self.changes).since(since) {
            if let Some(view) = views.iter_mut().find(|t| t.id == change.table) {
                view.apply(change.cidr, change.target.clone());
            }
        }
        *managed = Some(Managed {
            cluster: cluster_name.to_string(),
            tables: views,
        });
    }

    /// The tables a create or delete goes to: those of the last list, the configured
    /// ones (their contents unknown until a list: a create then settles a route that
    /// is there already), or the tagged ones found now.
    fn tables_for_change(&self, cluster_name: &str) -> Result<Vec<TableView>, CloudError> {
        let mut managed = lock(&self.managed);
        if let Some(m) = managed.as_ref()
            && m.cluster == cluster_name
            && !m.tables.is_empty()
        {
            return Ok(m.tables.clone());
        }
        if !self.configured_tables.is_empty() && managed.is_none() {
            let tables: Vec<TableView> = self
                .configured_tables
                .iter()
                .map(|id| TableView {
                    id: id.clone(),
                    routes: HashMap::new(),
                    vpc_id: String::new(),
                    usage: Usage::default(),
                })
                .collect();
            *managed = Some(Managed {
                cluster: cluster_name.to_string(),
                tables: tables.clone(),
            });
            return Ok(tables);
        }
        drop(managed);
        Ok(self
            .fetch_tables(cluster_name)?
            .iter()
            .map(|t| self.view(t))
            .collect())
    }

    /// What a listed table holds, as a change needs it, and its usage as the quota
    /// counts it.
    fn view(&self, table: &RouteTable) -> TableView {
        TableView::of(table, &lock(&self.prefix_lists))
    }

    /// Reads the weight of the prefix lists the tables route to that this process has
    /// not read yet, in one `DescribeManagedPrefixLists`: a route to a prefix list
    /// counts as the list's `MaxEntries` ("Maximum number of entries per prefix list",
    /// Amazon VPC quotas), an AWS-managed list's as its documented weight. Most tables
    /// have none, so this costs nothing; one with an S3 gateway endpoint costs one call
    /// per process. Every ID asked for is remembered, also one the reply leaves out
    /// (as one). A failed read (`UnauthorizedOperation` without the IAM action) counts
    /// such a route as one, with a log line, and is not tried again for
    /// [`PREFIX_LIST_RETRY`]; EC2's `RouteLimitExceeded` stays the backstop.
    fn read_prefix_lists(&self, tables: &[RouteTable]) {
        let mut ids: Vec<&str> = {
            let known = lock(&self.prefix_lists);
            tables
                .iter()
                .flat_map(|t| &t.routes)
                .filter_map(|r| r.prefix_list.as_deref())
                .filter(|id| !known.contains_key(*id))
                .collect()
        };
        if ids.is_empty() {
            return;
        }
        let now = (self.clock)();
        // A clock stepped back counts as no time passed.
        let since = |at: SystemTime| now.duration_since(at).unwrap_or_default();
        if lock(&self.prefix_list_failure).is_some_and(|at| since(at) < PREFIX_LIST_RETRY) {
            return;
        }
        ids.sort_unstable();
        ids.dedup();
        let mut lists = Vec::new();
        let read = self.paginate(
            DESCRIBE_MANAGED_PREFIX_LISTS,
            Params::new().list("PrefixListId", &ids),
            |root| {
                let (mut page, next) = parse_prefix_lists(root);
                lists.append(&mut page);
                next
            },
        );
        match read {
            Ok(()) => {
                let mut known = lock(&self.prefix_lists);
                for id in &ids {
                    known.entry(id.to_string()).or_insert((false, 1));
                }
                for l in lists {
                    known.insert(l.id, (l.address_family == "IPv6", l.weight));
                }
            }
            Err(e) => {
                *lock(&self.prefix_list_failure) = Some(now);
                log::info!(
                    "could not read the size of prefix lists {} (routes to them count as one \
                     each in the table's usage; tried again in {} minutes): {}",
                    ids.join(", "),
                    PREFIX_LIST_RETRY.as_secs() / 60,
                    e.into_cloud()
                )
            }
        }
    }

    /// Routes made to an interface of a node's instance name the instance beside the
    /// interface when EC2 lists them (EC2 does so for an attached interface), so this
    /// mostly serves moto, whose reply names the interface alone: such a route is
    /// completed from what `DescribeInstances` said of the nodes' instances, so that
    /// it is recognised as the node's. Against EC2 it changes nothing but a route to
    /// an interface detached since the describe.
    fn fill_interface_owners(&self, tables: &mut [RouteTable]) {
        let owners: HashMap<String, String> = lock(&self.facts)
            .values()
            .flat_map(|i| i.interfaces.iter().map(|n| (n.id.clone(), i.id.clone())))
            .collect();
        if owners.is_empty() {
            return;
        }
        for route in tables.iter_mut().flat_map(|t| t.routes.iter_mut()) {
            if route.instance_id.is_none()
                && let Some(owner) = route
                    .network_interface_id
                    .as_ref()
                    .and_then(|n| owners.get(n))
            {
                route.instance_id = Some(owner.clone());
            }
        }
    }

    /// Records what a successful mutation changed in one remembered table.
    fn note(&self, table: &str, cidr: Cidr, hop: Option<&Hop>) {
        let target = hop.map(Hop::listed);
        let mut managed = lock(&self.managed);
        if let Some(m) = managed.as_mut()
            && let Some(view) = m.tables.iter_mut().find(|t| t.id == table)
        {
            view.apply(cidr, target.clone());
        }
        lock(&self.changes).record(table, cidr, target);
    }

    /// EC2 said the table does not exist: stop using it until a list finds it again.
    fn drop_table(&self, table: &str) {
        let mut managed = lock(&self.managed);
        if let Some(m) = managed.as_mut()
            && let Some(at) = m.tables.iter().position(|t| t.id == table)
        {
            m.tables.remove(at);
            log::warn!("route table {table} is gone; no longer managing it");
        }
    }

    /// The IDs of the route tables this provider manages for `cluster_name`, looking
    /// them up if needed (useful as a start-up check).
    pub fn route_table_ids(&self, cluster_name: &str) -> Result<Vec<String>, CloudError> {
        Ok(self
            .tables_for_change(cluster_name)?
            .into_iter()
            .map(|t| t.id)
            .collect())
    }

    fn describe_table(&self, id: &str) -> Result<Option<RouteTable>, CallError> {
        let tables =
            self.describe_route_tables(Params::new().filter(1, "route-table-id", &[id]))?;
        Ok(tables.into_iter().find(|t| t.id == id))
    }

    /// `CreateRoute` in one table; a route already there is settled.
    fn create_in(&self, table: &str, cidr: Cidr, hop: &Hop, node: &str) -> Result<(), TableError> {
        let (target_param, target) = hop.param();
        let result = self.call(
            CREATE_ROUTE,
            CallKind::Mutation,
            &Params::new()
                .add("RouteTableId", table)
                .add(destination_param(cidr), cidr.to_string())
                .add(target_param, target),
        );
        match result {
            Ok(reply) if reply.text_of("return") == Some("false") => {
                Err(TableError::Failed(CloudError::ambiguous(format!(
                    "EC2 CreateRoute {cidr} in {table} answered return=false"
                ))))
            }
            Ok(_) => {
                log::info!("created route {cidr} in {table} to {hop} (node {node})");
                Ok(())
            }
            Err(e) if e.code() == "RouteAlreadyExists" => self
                .settle_existing_route(table, cidr, hop, node)
                .map_err(TableError::Failed),
            Err(e) => {
                if e.says_several_interfaces() {
                    // An interface was attached since the instance was described: the
                    // next try describes it again and routes to an interface.
                    self.forget_facts(hop.instance());
                }
                Err(TableError::from_call(e))
            }
        }
    }

    fn delete_in(&self, table: &str, cidr: Cidr) -> Result<(), TableError> {
        self.call(
            DELETE_ROUTE,
            CallKind::Mutation,
            &Params::new()
                .add("RouteTableId", table)
                .add(destination_param(cidr), cidr.to_string()),
        )
        .map_err(TableError::from_call)?;
        log::info!("deleted route {cidr} from {table}");
        Ok(())
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

    /// What EC2 says of a node's instance, described once and remembered. A create
    /// refused because its hop's source/destination check is on (and not ours to turn
    /// off) forgets them, so that the operator's fix is seen at the next try; a check
    /// left on elsewhere (the primary interface of a node routed to its second) costs
    /// nothing.
    fn instance_facts(&self, instance: &str) -> Result<Option<Instance>, CloudError> {
        if let Some(known) = lock(&self.facts).get(instance) {
            return Ok(Some(known.clone()));
        }
        // A dual-stack node's two creates run at once: one describes, the other
        // waits for its answer.
        let flight = self.flight(instance);
        let _describing = lock(&flight);
        if let Some(known) = lock(&self.facts).get(instance) {
            return Ok(Some(known.clone()));
        }
        let found = self
            .describe_instances(Params::new().add("InstanceId.1", instance))
            .map_err(CallError::into_cloud)?
            .into_iter()
            .find(|i| i.id == instance);
        if let Some(i) = &found {
            let mut facts = lock(&self.facts);
            if facts.len() >= MAX_REMEMBERED_INSTANCES {
                facts.clear();
            }
            facts.insert(instance.to_string(), i.clone());
        }
        Ok(found)
    }

    /// The lock under which one describe of `id` (an instance, a subnet) is in
    /// flight, so that concurrent creates send it once.
    fn flight(&self, id: &str) -> Arc<Mutex<()>> {
        let mut flights = lock(&self.flights);
        if flights.len() >= MAX_REMEMBERED_INSTANCES && !flights.contains_key(id) {
            flights.clear();
        }
        flights.entry(id.to_string()).or_default().clone()
    }

    /// Forgets what `DescribeInstances` said of `instance`, so that the next create
    /// describes it again.
    fn forget_facts(&self, instance: &str) {
        lock(&self.facts).remove(instance);
    }

    /// The pre-flight check of a create: the node names an instance, the instance is
    /// in the VPC of every table (EC2 would refuse the route), the route's hop is
    /// known (the instance, or the interface holding the node's InternalIP when it
    /// has several), an IPv6 destination has an IPv6 subnet behind it, and the hop's
    /// source/destination check is off or ours to turn off.
    fn check_create(
        &self,
        cluster_name: &str,
        route: &Route,
        target: &RouteTarget,
    ) -> Result<(Cidr, Hop, Vec<TableView>), CloudError> {
        let cidr = destination(&route.destination_cidr)?;
        let instance = self.instance_for(target)?;
        // The tables first: a configuration error should not cost a mutation.
        let tables = self.tables_for_change(cluster_name)?;
        let node = &target.node_name;
        let facts = match self.instance_facts(&instance) {
            Ok(Some(facts)) => facts,
            Ok(None) => return Ok((cidr, Hop::Instance(instance), tables)),
            // Throttled: nothing may be sent for a while, the create included.
            Err(e) if matches!(e.kind, CloudErrorKind::RateLimited { .. }) => return Err(e),
            Err(e) => {
                // A check that cannot be made does not hold the route back; EC2
                // still refuses what is wrong.
                log::info!("pre-flight check of instance {instance} skipped: {e}");
                return Ok((cidr, Hop::Instance(instance), tables));
            }
        };
        if !facts.vpc_id.is_empty()
            && let Some(other) = tables
                .iter()
                .find(|t| !t.vpc_id.is_empty() && t.vpc_id != facts.vpc_id)
        {
            return Err(CloudError::refused(
                INSTANCE_NOT_IN_VPC,
                false,
                format!(
                    "instance {instance} of node {node} is in {}, but route table {} is in {}; \
                     a route can only point at an instance of the table's VPC: run the node in \
                     the cluster's VPC, or manage only that VPC's tables (RouteTableID in \
                     --cloud-config, or the cluster tag)",
                    facts.vpc_id, other.id, other.vpc_id
                ),
            ));
        }
        let (hop, interface) = hop_for(&facts, target)?;
        self.remember_hop(&hop);
        // An interface with an IPv6 address is in a subnet with an IPv6 block (the
        // usual dual-stack node): nothing to ask.
        if !cidr.is_ipv4()
            && let Some(interface) = interface
            && interface.ipv6_addresses.is_empty()
            && !self.subnet_has_ipv6(&interface.subnet_id)?
        {
            return Err(CloudError::refused(
                SUBNET_WITHOUT_IPV6,
                false,
                format!(
                    "pod CIDR {cidr} of node {node} is IPv6, but subnet {} of its interface {} \
                     (instance {instance}) has no IPv6 CIDR block, so EC2 has no IPv6 path to \
                     the node: associate one with the VPC and the subnet (aws ec2 \
                     associate-vpc-cidr-block --vpc-id {} --amazon-provided-ipv6-cidr-block; aws \
                     ec2 associate-subnet-cidr-block --subnet-id {} --ipv6-cidr-block …), or \
                     give the cluster no IPv6 cluster CIDR",
                    interface.subnet_id, interface.id, facts.vpc_id, interface.subnet_id
                ),
            ));
        }
        let check_on = match &hop {
            Hop::Instance(_) => facts.source_dest_check,
            Hop::Interface { .. } => interface.and_then(|i| i.source_dest_check),
        };
        if !self.disable_source_dest_check && check_on == Some(true) {
            self.forget_facts(&instance);
            let command = hop.check_off_command();
            return Err(CloudError::refused(
                SOURCE_DEST_CHECK_ENABLED,
                false,
                format!(
                    "{hop} of node {node} has its source/destination check on, so EC2 drops \
                     the pod traffic routed to it: turn it off ({command}) or let the \
                     controller do it (DisableSourceDestCheck=true in --cloud-config)"
                ),
            ));
        }
        Ok((cidr, hop, tables))
    }

    /// Remembers where the routes of `hop`'s instance go, for [`routes_from_table`].
    fn remember_hop(&self, hop: &Hop) {
        let mut hops = lock(&self.interface_hops);
        match hop {
            Hop::Instance(instance) => {
                hops.remove(instance);
            }
            Hop::Interface {
                instance,
                interface,
            } => {
                if hops.len() >= MAX_REMEMBERED_INSTANCES && !hops.contains_key(instance) {
                    hops.clear();
                }
                hops.insert(instance.clone(), interface.clone());
            }
        }
    }

    /// Whether `subnet` has an IPv6 CIDR block: one `DescribeSubnets` per subnet until
    /// it has (a yes is remembered; a no is asked again at the next try, so that the
    /// operator's fix is seen). A subnet EC2 does not report is given the benefit of
    /// the doubt: EC2 still refuses what is wrong.
    fn subnet_has_ipv6(&self, subnet: &str) -> Result<bool, CloudError> {
        if subnet.is_empty() || lock(&self.ipv6_subnets).contains(subnet) {
            return Ok(true);
        }
        let flight = self.flight(subnet);
        let _describing = lock(&flight);
        if lock(&self.ipv6_subnets).contains(subnet) {
            return Ok(true);
        }
        let mut found = Vec::new();
        let read = self.paginate(
            DESCRIBE_SUBNETS,
            Params::new().add("SubnetId.1", subnet),
            |root| {
                let (mut page, next) = parse_subnets_with_ipv6(root);
                found.append(&mut page);
                next
            },
        );
        match read {
            Ok(()) => {}
            Err(e) => {
                let e = e.into_cloud();
                if matches!(e.kind, CloudErrorKind::RateLimited { .. }) {
                    return Err(e);
                }
                log::info!("IPv6 check of subnet {subnet} skipped: {e}");
                return Ok(true);
            }
        }
        match found.iter().find(|(id, _)| id == subnet) {
            Some((_, false)) => Ok(false),
            _ => {
                let mut known = lock(&self.ipv6_subnets);
                if known.len() >= MAX_REMEMBERED_INSTANCES {
                    known.clear();
                }
                known.insert(subnet.to_string());
                Ok(true)
            }
        }
    }

    /// A route's hop forwards pod traffic only with its source/destination check off.
    /// Done once per hop and process: it is a mutating call that spends the
    /// account's mutating budget. An instance with one interface is modified as
    /// upstream does it (`ModifyInstanceAttribute`); one interface of several with
    /// `ModifyNetworkInterfaceAttribute`, since EC2 refuses the instance then.
    fn disable_source_dest_check(&self, hop: &Hop) -> Result<(), CloudError> {
        let key = hop.param().1.to_string();
        let slot = {
            let mut done = lock(&self.source_dest_check);
            if done.len() >= MAX_REMEMBERED_INSTANCES && !done.contains_key(&key) {
                done.clear();
            }
            done.entry(key).or_default().clone()
        };
        let mut done = lock(&slot);
        if *done {
            return Ok(());
        }
        let (action, params) = match hop {
            Hop::Instance(instance) => (
                MODIFY_INSTANCE_ATTRIBUTE,
                Params::new().add("InstanceId", instance),
            ),
            Hop::Interface { interface, .. } => (
                MODIFY_NETWORK_INTERFACE_ATTRIBUTE,
                Params::new().add("NetworkInterfaceId", interface),
            ),
        };
        let sent = self.call(
            action,
            CallKind::Mutation,
            &params.add("SourceDestCheck.Value", "false"),
        );
        if let Err(e) = sent {
            if e.says_several_interfaces() {
                self.forget_facts(hop.instance());
            }
            return Err(e.into_cloud());
        }
        *done = true;
        if let Some(f) = lock(&self.facts).get_mut(hop.instance()) {
            match hop {
                Hop::Instance(_) => f.source_dest_check = Some(false),
                Hop::Interface { interface, .. } => {
                    for i in f.interfaces.iter_mut().filter(|i| i.id == *interface) {
                        i.source_dest_check = Some(false);
                    }
                }
            }
        }
        log::info!("disabled the source/destination check of {hop}");
        Ok(())
    }

    /// Whether the hop's source/destination check is known to be off.
    fn check_is_off(&self, hop: &Hop) -> bool {
        let facts = lock(&self.facts);
        let Some(f) = facts.get(hop.instance()) else {
            return false;
        };
        match hop {
            Hop::Instance(_) => f.source_dest_check == Some(false),
            Hop::Interface { interface, .. } => f
                .interfaces
                .iter()
                .any(|i| i.id == *interface && i.source_dest_check == Some(false)),
        }
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
        hop: &Hop,
        node: &str,
    ) -> Result<(), CloudError> {
        let current = self.describe_table(table).map_err(CallError::into_cloud)?;
        let existing = current.and_then(|t| t.routes.into_iter().find(|r| r.cidr() == Some(cidr)));
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
            let (target_param, target) = hop.param();
            self.call(
                REPLACE_ROUTE,
                CallKind::Mutation,
                &Params::new()
                    .add("RouteTableId", table)
                    .add(destination_param(cidr), cidr.to_string())
                    .add(target_param, target),
            )
            .map_err(CallError::into_cloud)?;
            log::info!(
                "replaced dead route {cidr} ({}) in {table} with one to {hop} (node {node})",
                existing.target()
            );
            return Ok(());
        }
        if hop.matches(&Listed::of(&existing)) {
            return Ok(());
        }
        Err(CloudError::new(
            CloudErrorKind::AlreadyExists,
            format!(
                "route {cidr} in {table} already points at {}, not at {hop} of node {node}",
                existing.target()
            ),
        ))
    }
}

/// Where a new route points. An instance with one network interface is routed to by
/// `InstanceId`, as upstream's AWS provider does (EC2 resolves it to that interface
/// and lists the route with both IDs): routes made upstream are the node's as they
/// stand, rolling back to upstream leaves routes it reads as its own, and the IAM
/// policy needs nothing new. An instance with several interfaces is routed to the
/// interface that holds the node's InternalIP (`NetworkInterfaceId`), since EC2
/// refuses the instance then (`InvalidInstanceID`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Hop {
    Instance(String),
    Interface { instance: String, interface: String },
}

impl Hop {
    /// The `CreateRoute` parameter naming the hop, and its value.
    fn param(&self) -> (&'static str, &str) {
        match self {
            Hop::Instance(i) => ("InstanceId", i),
            Hop::Interface { interface, .. } => ("NetworkInterfaceId", interface),
        }
    }

    /// The command that turns the hop's source/destination check off, for messages.
    fn check_off_command(&self) -> String {
        match self {
            Hop::Instance(i) => {
                format!(
                    "aws ec2 modify-instance-attribute --instance-id {i} --no-source-dest-check"
                )
            }
            Hop::Interface { interface, .. } => format!(
                "aws ec2 modify-network-interface-attribute --network-interface-id {interface} \
                 --no-source-dest-check"
            ),
        }
    }

    fn instance(&self) -> &str {
        match self {
            Hop::Instance(i) | Hop::Interface { instance: i, .. } => i,
        }
    }

    /// What a table lists for a route made to this hop.
    fn listed(&self) -> Listed {
        match self {
            Hop::Instance(i) => Listed {
                instance: Some(i.clone()),
                interface: None,
            },
            Hop::Interface {
                instance,
                interface,
            } => Listed {
                instance: Some(instance.clone()),
                interface: Some(interface.clone()),
            },
        }
    }

    /// Whether a listed route already goes where this hop would send it: to the
    /// instance (with one interface, the route to its only interface is the same
    /// route), or to the interface.
    fn matches(&self, listed: &Listed) -> bool {
        match self {
            Hop::Instance(i) => listed.instance.as_deref() == Some(i.as_str()),
            Hop::Interface { interface, .. } => {
                listed.interface.as_deref() == Some(interface.as_str())
            }
        }
    }
}

impl fmt::Display for Hop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Hop::Instance(i) => write!(f, "instance {i}"),
            Hop::Interface {
                instance,
                interface,
            } => write!(f, "interface {interface} of instance {instance}"),
        }
    }
}

/// The hop of a new route to `facts`' instance for the node `target`, and the
/// interface it goes through when known (for the IPv6 and source/destination
/// checks).
fn hop_for<'a>(
    facts: &'a Instance,
    target: &RouteTarget,
) -> Result<(Hop, Option<&'a ec2::Interface>), CloudError> {
    let instance = facts.id.clone();
    match facts.interfaces.as_slice() {
        [] => Ok((Hop::Instance(instance), None)),
        [only] => Ok((Hop::Instance(instance), Some(only))),
        several => {
            let internal: Vec<&str> = target
                .addresses
                .iter()
                .filter(|a| a.kind == "InternalIP")
                .map(|a| a.address.as_str())
                .collect();
            let holding = internal
                .iter()
                .find_map(|ip| several.iter().find(|i| i.holds(ip)));
            match holding {
                Some(interface) => Ok((
                    Hop::Interface {
                        instance,
                        interface: interface.id.clone(),
                    },
                    Some(interface),
                )),
                None => Err(CloudError::refused(
                    NO_INTERFACE_FOR_INTERNAL_IP,
                    false,
                    format!(
                        "instance {instance} of node {} has {} network interfaces ({}) and none \
                         holds the node's InternalIP ({}); EC2 routes to such an instance only \
                         by interface: make the kubelet report the address of the interface \
                         the pods use (--node-ip)",
                        target.node_name,
                        several.len(),
                        several
                            .iter()
                            .map(|i| format!("{}: {}", i.id, i.private_ips.join(" ")))
                            .collect::<Vec<_>>()
                            .join(", "),
                        if internal.is_empty() {
                            "none reported".to_string()
                        } else {
                            internal.join(", ")
                        }
                    ),
                )),
            }
        }
    }
}

/// A route's target as a table lists it: the instance and the interface (EC2 names
/// both for a route to an instance or to an attached interface).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Listed {
    instance: Option<String>,
    interface: Option<String>,
}

impl Listed {
    fn of(route: &RouteEntry) -> Listed {
        Listed {
            instance: route.instance_id.clone(),
            interface: route.network_interface_id.clone(),
        }
    }
}

/// The route tables the provider manages for one cluster, as last seen.
#[derive(Debug)]
struct Managed {
    cluster: String,
    tables: Vec<TableView>,
}

/// One managed table: its ID and, per destination, what a route to it points at
/// (`None`: a blackhole). Lets a create or delete skip the tables that already are
/// as asked.
#[derive(Clone, Debug)]
struct TableView {
    id: String,
    routes: HashMap<Cidr, Option<Listed>>,
    /// Its VPC; empty for a configured table not listed yet.
    vpc_id: String,
    /// What counts against the table's limit, as listed, then changed by our own
    /// creates and deletes.
    usage: Usage,
}

/// A table's usage as EC2's quota "Routes per route table (non-propagated routes)"
/// counts it (Amazon VPC quotas, "Route tables"): "enforced separately for IPv4 routes
/// and IPv6 routes", propagated routes apart (a quota of their own), and a route to a
/// prefix list as the list's maximum entries ("Maximum number of entries per prefix
/// list": "the maximum number of entries for the prefix lists counts against the
/// quota for the number of entries for the resource"). The local routes are counted:
/// they are not propagated, and counting one route too many only holds a create back
/// one route early, where one too few costs a refused `CreateRoute`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Usage {
    ipv4: usize,
    ipv6: usize,
}

impl Usage {
    fn of(routes: &[RouteEntry], prefix_lists: &HashMap<String, (bool, usize)>) -> Usage {
        let mut usage = Usage::default();
        for route in routes.iter().filter(|r| !r.is_propagated()) {
            let (ipv6, weight) = match (&route.prefix_list, route.cidr()) {
                (Some(list), _) => prefix_lists.get(list).copied().unwrap_or((false, 1)),
                (None, Some(cidr)) => (!cidr.is_ipv4(), 1),
                (None, None) => continue,
            };
            *usage.family(ipv6) += weight;
        }
        usage
    }

    fn family(&mut self, ipv6: bool) -> &mut usize {
        if ipv6 { &mut self.ipv6 } else { &mut self.ipv4 }
    }

    /// The count of the fuller family: the quota's size applies to each family; the
    /// controller's guard reads both ([`TableUsage::by_family`]), this is for what
    /// knows one count only (the gauge, `plan`).
    fn fuller(&self) -> usize {
        self.ipv4.max(self.ipv6)
    }
}

impl TableView {
    /// Whether the table routes `cidr` as the controller's routes look: a blackhole,
    /// or to an instance (EC2 lists the instance beside the interface of a route to an
    /// attached interface), as [`routes_from_table`] reports them.
    fn holds(&self, cidr: Cidr) -> bool {
        match self.routes.get(&cidr) {
            Some(None) => true,
            Some(Some(listed)) => listed.instance.is_some(),
            None => false,
        }
    }

    /// Records that the destination now routes to `target` (`None`: no route).
    /// The usage of its family follows.
    fn apply(&mut self, cidr: Cidr, target: Option<Listed>) {
        let had = self.routes.contains_key(&cidr);
        match target {
            Some(t) => self.routes.insert(cidr, Some(t)),
            None => self.routes.remove(&cidr),
        };
        let count = self.usage.family(!cidr.is_ipv4());
        match (had, self.routes.contains_key(&cidr)) {
            (false, true) => *count += 1,
            (true, false) => *count = count.saturating_sub(1),
            _ => {}
        }
    }

    fn of(table: &RouteTable, prefix_lists: &HashMap<String, (bool, usize)>) -> TableView {
        let routes = table
            .routes
            .iter()
            .filter_map(|r| {
                let cidr = r.cidr()?;
                let target = (!r.is_blackhole()).then(|| Listed::of(r));
                Some((cidr, target))
            })
            .collect();
        TableView {
            id: table.id.clone(),
            routes,
            vpc_id: table.vpc_id.clone(),
            usage: Usage::of(&table.routes, prefix_lists),
        }
    }
}

/// The provider's own route changes, counted, and kept while a list is in flight
/// (only then can a snapshot miss them; kept no longer, so this stays small).
#[derive(Debug, Default)]
struct Changes {
    /// How many changes have been noted, ever.
    count: u64,
    lists_in_flight: usize,
    /// `(number, change)` of the changes noted while a list was in flight.
    recent: Vec<(u64, Change)>,
}

#[derive(Debug)]
struct Change {
    table: String,
    cidr: Cidr,
    target: Option<Listed>,
}

impl Changes {
    /// A list begins: returns the count its snapshot is measured against.
    fn begin_list(&mut self) -> u64 {
        self.lists_in_flight += 1;
        self.count
    }

    fn end_list(&mut self) {
        self.lists_in_flight = self.lists_in_flight.saturating_sub(1);
        if self.lists_in_flight == 0 {
            self.recent.clear();
        }
    }

    fn record(&mut self, table: &str, cidr: Cidr, target: Option<Listed>) {
        if self.lists_in_flight > 0 {
            let change = Change {
                table: table.to_string(),
                cidr,
                target,
            };
            self.recent.push((self.count, change));
        }
        self.count += 1;
    }

    /// The changes noted since the count stood at `since`, oldest first.
    fn since(&self, since: u64) -> impl Iterator<Item = &Change> {
        self.recent
            .iter()
            .filter(move |(n, _)| *n >= since)
            .map(|(_, c)| c)
    }
}

/// How a mutation in one table ended, when it did not succeed.
enum TableError {
    /// EC2 says the table does not exist.
    Gone,
    Failed(CloudError),
}

impl TableError {
    fn from_call(e: CallError) -> TableError {
        match e.code() {
            "InvalidRouteTableID.NotFound" => TableError::Gone,
            _ => TableError::Failed(e.into_cloud()),
        }
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
    let configured = configured.map(|c| ("the configured EC2 endpoint", c));
    service_endpoint(configured, "AWS_ENDPOINT_URL_EC2", "ec2", env, region)
}

fn resolve_service_quotas_endpoint(
    configured: Option<&str>,
    env: &AwsEnv,
    region: &str,
) -> Result<Endpoint, CloudError> {
    let configured = configured.map(|c| ("the configured Service Quotas endpoint", c));
    let variable = "AWS_ENDPOINT_URL_SERVICE_QUOTAS";
    service_endpoint(configured, variable, quotas::SIGNING_NAME, env, region)
}

/// As the AWS SDKs resolve a service's endpoint: configured (`(what, url)`, `what`
/// naming it in messages), the service's variable, the generic `AWS_ENDPOINT_URL`,
/// then the public endpoint of `service` in the region.
pub(super) fn service_endpoint(
    configured: Option<(&'static str, &str)>,
    variable: &'static str,
    service: &str,
    env: &AwsEnv,
    region: &str,
) -> Result<Endpoint, CloudError> {
    let chosen = [
        configured.filter(|(_, url)| !url.trim().is_empty()),
        env.var(variable).map(|url| (variable, url)),
        env.var("AWS_ENDPOINT_URL")
            .map(|url| ("AWS_ENDPOINT_URL", url)),
    ]
    .into_iter()
    .flatten()
    .next();
    match chosen {
        Some((origin, url)) => {
            Endpoint::parse(url).map_err(|e| CloudError::invalid(format!("{origin}: {e}")))
        }
        None => Ok(Endpoint::for_region(service, region)),
    }
}

/// A route's destination, of either family: IPv4 as `DestinationCidrBlock`, IPv6 as
/// `DestinationIpv6CidrBlock` (upstream's AWS provider routes IPv4 only,
/// kubernetes/kubernetes#78089).
fn destination(text: &str) -> Result<Cidr, CloudError> {
    Cidr::parse(text).map_err(|e| CloudError::invalid(format!("aws: route destination: {e}")))
}

/// The `CreateRoute`/`DeleteRoute`/`ReplaceRoute` parameter of a destination.
fn destination_param(cidr: Cidr) -> &'static str {
    if cidr.is_ipv4() {
        "DestinationCidrBlock"
    } else {
        "DestinationIpv6CidrBlock"
    }
}

/// Instance ID → node name, from the nodes' provider IDs.
fn instance_index(nodes: &NodeDirectory) -> HashMap<&str, &str> {
    nodes
        .provider_ids()
        .filter_map(|(provider_id, node)| Some((instance_id_from_provider_id(provider_id)?, node)))
        .collect()
}

/// The routes of `table` as the controller sees them: routes of either family to
/// instances (also those made to an instance's interface, which EC2 lists with the
/// instance) and blackholes; local, gateway, prefix-list and other interface routes
/// are not the controller's business. `interface_hops` names, per instance with
/// several interfaces, the interface its node's routes go to: a route to another of
/// its interfaces (made by `InstanceId` before a second interface was attached, the
/// node's InternalIP on the new one) is reported with no target, so that the
/// controller replaces it.
pub fn routes_from_table(
    cluster_name: &str,
    table: &RouteTable,
    nodes: &NodeDirectory,
    looked_up: &HashMap<String, Lookup>,
    interface_hops: &HashMap<String, String>,
) -> Vec<Route> {
    let by_instance = instance_index(nodes);
    let mut routes = Vec::new();
    for entry in &table.routes {
        let Some(destination) = entry.cidr() else {
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
        if let Some(hop) = interface_hops.get(instance)
            && let Some(listed) = entry.network_interface_id.as_deref()
            && listed != hop
        {
            log::warn!(
                "route {destination} goes to interface {listed} of instance {instance}, but its \
                 node's InternalIP is on interface {hop}; reporting it with no target so that \
                 it is replaced"
            );
        } else if let Some(node) = by_instance.get(instance) {
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

/// The routes of several tables as one list for the controller, which knows nothing
/// of tables. A destination is reported as present only when every table has it with
/// the same target; otherwise:
///
/// - in some tables only, pointing at a node: left out, so the controller sees it
///   missing and asks for a create, which fills the tables that lack it (a create
///   skips the tables that have it already);
/// - in some tables only, pointing at no node (a blackhole, an instance that is no
///   node): reported as in the tables that have it, so the controller deletes it
///   where it is stale, as it would with one table;
/// - with different targets in different tables: reported with no target node, so
///   the controller replaces it (a delete removes it from every table, the create
///   puts the right one in every table).
///
/// Nothing is ever reported that is in no table, so nothing is deleted that is not
/// there, and a route to a node is never reported stale because one table lacks it.
pub fn merge_tables(
    cluster_name: &str,
    tables: &[RouteTable],
    nodes: &NodeDirectory,
    looked_up: &HashMap<String, Lookup>,
    interface_hops: &HashMap<String, String>,
) -> Vec<Route> {
    let mut by_destination: BTreeMap<String, Vec<Route>> = BTreeMap::new();
    for table in tables {
        for route in routes_from_table(cluster_name, table, nodes, looked_up, interface_hops) {
            by_destination
                .entry(route.destination_cidr.clone())
                .or_default()
                .push(route);
        }
    }
    let mut merged = Vec::new();
    for (destination, found) in by_destination {
        let Some(first) = found.first() else { continue };
        let agree = found
            .iter()
            .all(|r| r.target_node == first.target_node && r.blackhole == first.blackhole);
        if !agree {
            log::warn!(
                "route {destination} points at different targets in the cluster's route tables; \
                 reporting it with no target so that it is replaced in every table"
            );
            merged.push(Route {
                target_node: String::new(),
                blackhole: false,
                ..first.clone()
            });
        } else if found.len() == tables.len() || first.target_node.is_empty() {
            merged.push(first.clone());
        } else {
            log::info!(
                "route {destination} to node {} is in {} of {} route tables; reporting it \
                 missing so that it is created in the others",
                first.target_node,
                found.len(),
                tables.len()
            );
        }
    }
    merged
}

impl Routes for AwsProvider {
    fn provider_name(&self) -> &'static str {
        "aws"
    }

    /// A bucket per EC2 action ([`ec2_buckets`], or the configured ones); changes
    /// may run concurrently. Every request an operation may send is drawn before it
    /// goes (invariant 10), and what it did not send is given back from the reply:
    /// a list draws one `DescribeRouteTables` and one `DescribeManagedPrefixLists`
    /// (sent only for a prefix list not read yet); a create one `DescribeInstances`
    /// and one `DescribeSubnets` (the first create of an instance, of an IPv6 route
    /// to an interface without an IPv6 address), a `CreateRoute` per route table of
    /// the last list, and, when the controller turns source/destination checks off,
    /// one `ModifyInstanceAttribute` and one `ModifyNetworkInterfaceAttribute` (the
    /// hop is known only once the instance is described: at most one of them is
    /// sent, by the first create of a hop); a delete a `DeleteRoute` per table.
    /// Further pages and `ReplaceRoute`s are charged from the reply, to the bucket of
    /// their action.
    fn budget(&self) -> Option<Budget> {
        let budget = self
            .buckets
            .iter()
            .fold(Budget::new(self.budget.0, self.budget.1), |b, a| {
                b.bucket(a.action, a.requests_per_second, a.burst)
            });
        let budget = budget
            .draw(BudgetOp::List, DESCRIBE_ROUTE_TABLES, 1)
            .draw(BudgetOp::List, DESCRIBE_MANAGED_PREFIX_LISTS, 1)
            .draw(BudgetOp::Create, DESCRIBE_INSTANCES, 1)
            .draw(BudgetOp::Create, DESCRIBE_SUBNETS, 1)
            .draw_per_table(BudgetOp::Create, CREATE_ROUTE, 1)
            .draw_per_table(BudgetOp::Delete, DELETE_ROUTE, 1);
        Some(if self.disable_source_dest_check {
            budget
                .draw(BudgetOp::Create, MODIFY_INSTANCE_ATTRIBUTE, 1)
                .draw(BudgetOp::Create, MODIFY_NETWORK_INTERFACE_ATTRIBUTE, 1)
        } else {
            budget
        })
    }

    /// One `DescribeRouteTables` for all tables (plus `DescribeInstances` only for
    /// route targets that are no node), merged by [`merge_tables`].
    fn list_routes(
        &self,
        cluster_name: &str,
        nodes: &NodeDirectory,
    ) -> Result<Vec<Route>, CloudError> {
        self.settle_route_table_limit()?;
        let tables = self.fetch_tables(cluster_name)?;
        let known = instance_index(nodes);
        let mut unknown: Vec<&str> = tables
            .iter()
            .flat_map(|t| &t.routes)
            .filter(|r| r.cidr().is_some() && !r.is_blackhole())
            .filter_map(|r| r.instance_id.as_deref())
            .filter(|id| !known.contains_key(id))
            .collect();
        unknown.sort_unstable();
        unknown.dedup();
        let looked_up = self.look_up_instances(&unknown)?;
        let hops = lock(&self.interface_hops).clone();
        Ok(merge_tables(
            cluster_name,
            &tables,
            nodes,
            &looked_up,
            &hops,
        ))
    }

    /// Every managed table as of the last list (with our changes since) and the
    /// limit: `RouteTableRouteLimit`, else the account's from Service Quotas, else
    /// AWS's default of 500.
    fn route_tables(&self) -> Vec<TableUsage> {
        lock(&self.managed)
            .as_ref()
            .map(|m| {
                m.tables
                    .iter()
                    .filter(|t| !t.vpc_id.is_empty())
                    .map(|t| TableUsage {
                        table: t.id.clone(),
                        routes: t.usage.fuller(),
                        limit: self.route_table_limit(),
                        by_family: Some((t.usage.ipv4, t.usage.ipv6)),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The instance is in the tables' VPC, the route's hop is known (an instance with
    /// several interfaces: the one holding the node's InternalIP), an IPv6 route has an
    /// IPv6 subnet behind it, and the hop's source/destination check is off or ours to
    /// turn off.
    fn preflight(&self, route: &Route, target: &RouteTarget) -> Result<(), CloudError> {
        let cluster = lock(&self.managed)
            .as_ref()
            .map(|m| m.cluster.clone())
            .unwrap_or_else(|| "kubernetes".into());
        self.check_create(&cluster, route, target).map(|_| ())
    }

    /// One `CreateRoute` per managed table that does not already route the
    /// destination to the instance. The tables are tried one after the other, all
    /// of them even when one fails, so that one bad table does not keep the route
    /// from the others; the first failure is returned and the next pass fills the
    /// gap.
    fn create_route(
        &self,
        cluster_name: &str,
        _name_hint: &str,
        route: &Route,
        target: &RouteTarget,
    ) -> Result<(), CloudError> {
        let (cidr, hop, mut tables) = self.check_create(cluster_name, route, target)?;
        if self.disable_source_dest_check && !self.check_is_off(&hop) {
            self.disable_source_dest_check(&hop)?;
        }
        for attempt in 0..2 {
            let mut failure = None;
            let mut placed = 0;
            for table in &tables {
                if let Some(Some(listed)) = table.routes.get(&cidr)
                    && hop.matches(listed)
                {
                    placed += 1;
                    continue;
                }
                match self.create_in(&table.id, cidr, &hop, &target.node_name) {
                    Ok(()) => {
                        self.note(&table.id, cidr, Some(&hop));
                        placed += 1;
                    }
                    Err(TableError::Gone) => self.drop_table(&table.id),
                    Err(TableError::Failed(e)) => failure = Some(graver(failure, e)),
                }
            }
            if let Some(e) = failure {
                return Err(e);
            }
            if placed > 0 || attempt > 0 {
                break;
            }
            // Every table was gone: look for the cluster's tables again, once.
            tables = self
                .fetch_tables(cluster_name)?
                .iter()
                .map(|t| self.view(t))
                .collect();
        }
        Ok(())
    }

    /// One `DeleteRoute` per managed table that held the destination as a route of
    /// the controller's kind (a blackhole, or to an instance) at the last list; when
    /// none did, every table that had no route to it (the view may be stale). A table
    /// whose route to the destination goes elsewhere (a gateway, a peering, a transit
    /// gateway: another writer's) is never sent a `DeleteRoute`, which would remove
    /// that route. A table without the route counts as done; `NotFound` only when no
    /// table had it.
    fn delete_route(&self, cluster_name: &str, route: &Route) -> Result<(), CloudError> {
        let cidr = destination(&route.destination_cidr)?;
        let tables = self.tables_for_change(cluster_name)?;
        let holding: Vec<&TableView> = tables.iter().filter(|t| t.holds(cidr)).collect();
        let targets = if holding.is_empty() {
            tables
                .iter()
                .filter(|t| !t.routes.contains_key(&cidr))
                .collect()
        } else {
            holding
        };
        if targets.is_empty() {
            return Err(CloudError::new(
                CloudErrorKind::NotFound,
                format!(
                    "route {cidr} is in none of the managed route tables as a route to an \
                     instance or a blackhole; where it is, it goes elsewhere (another writer's \
                     route), so nothing was deleted"
                ),
            ));
        }
        let mut failure = None;
        let mut deleted = 0;
        for table in targets {
            match self.delete_in(&table.id, cidr) {
                Ok(()) => {
                    self.note(&table.id, cidr, None);
                    deleted += 1;
                }
                Err(TableError::Gone) => self.drop_table(&table.id),
                Err(TableError::Failed(e)) if e.kind == CloudErrorKind::NotFound => {
                    self.note(&table.id, cidr, None);
                    failure.get_or_insert(e);
                }
                Err(TableError::Failed(e)) => failure = Some(graver(failure, e)),
            }
        }
        match failure {
            Some(e) if e.kind != CloudErrorKind::NotFound || deleted == 0 => Err(e),
            _ => Ok(()),
        }
    }
}

/// Which of two failures of one route's writes (one per table) the operation
/// reports: an ambiguous one outranks every other, since the route may then be in a
/// table the provider does not know of, and only a list can tell (reported as the
/// throttle of another table, the retry wrote that table again and drew
/// `RouteAlreadyExists`); any real failure outranks a `NotFound`; else the first.
fn graver(first: Option<CloudError>, next: CloudError) -> CloudError {
    let rank = |e: &CloudError| match e.kind {
        CloudErrorKind::Ambiguous => 2,
        CloudErrorKind::NotFound => 0,
        _ => 1,
    };
    match first {
        Some(first) if rank(&first) >= rank(&next) => first,
        _ => next,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cloud::aws::ec2::RouteEntry;

    /// Guards the ranking of a route's failures across tables: a throttle in one
    /// table and a lost reply in another is ambiguous (the controller lists before its
    /// retry), a real failure outranks a `NotFound`, and among equals the first stays.
    #[test]
    fn an_ambiguous_write_outranks_a_throttle_in_another_table() {
        let e = |kind| CloudError::new(kind, format!("{kind:?}"));
        let throttled = e(CloudErrorKind::RateLimited {
            after: std::time::Duration::from_secs(1),
        });
        let lost = e(CloudErrorKind::Ambiguous);
        let gone = e(CloudErrorKind::NotFound);
        assert_eq!(graver(Some(throttled.clone()), lost.clone()), lost);
        assert_eq!(graver(Some(lost.clone()), throttled.clone()), lost);
        assert_eq!(graver(Some(gone.clone()), throttled.clone()), throttled);
        assert_eq!(graver(Some(throttled.clone()), gone.clone()), throttled);
        let conflict = e(CloudErrorKind::Conflict);
        assert_eq!(graver(Some(conflict.clone()), throttled.clone()), conflict);
        assert_eq!(graver(None, gone.clone()), gone);
    }

    /// Guards the profile's `ca_bundle` as the AWS SDKs read it: the active profile's,
    /// used when `AWS_CA_BUNDLE` is unset, and named when it cannot be read.
    #[test]
    fn the_profiles_ca_bundle_is_trusted_unless_aws_ca_bundle_is_set() {
        let dir = std::env::temp_dir().join(format!("rc-aws-ca-bundle-{}", std::process::id()));
        std::fs::create_dir_all(dir.join(".aws")).unwrap();
        std::fs::write(
            dir.join(".aws/config"),
            "[default]\nca_bundle = /nonexistent/default.pem\n[profile corp]\nca_bundle = \
             /nonexistent/corp.pem\n",
        )
        .unwrap();
        let env = AwsEnv::new().with_home(&dir);
        let bundle = credentials::profile_ca_bundle(&env);
        assert_eq!(
            bundle.as_deref(),
            Some(Path::new("/nonexistent/default.pem"))
        );
        let corp = env.clone().with_var("AWS_PROFILE", "corp");
        let e = trust(&corp, credentials::profile_ca_bundle(&corp).as_deref()).unwrap_err();
        assert!(
            e.message.contains("ca_bundle of the AWS profile") && e.message.contains("corp.pem"),
            "{}",
            e.message
        );
        let over = env
            .clone()
            .with_var("AWS_CA_BUNDLE", "/nonexistent/env.pem");
        let e = trust(&over, credentials::profile_ca_bundle(&over).as_deref()).unwrap_err();
        assert!(e.message.contains("env.pem"), "{}", e.message);
        let _ = std::fs::remove_dir_all(dir);
    }

    /// Guards the per-action budget the provider declares: a bucket per EC2 action at
    /// 80 % of EC2's documented size and refill rate, a list drawing from
    /// `DescribeRouteTables`, a create from `DescribeInstances`,
    /// `ModifyInstanceAttribute` and `CreateRoute` (one per table), a delete
    /// from `DeleteRoute` (both per table); overrides replace a bucket.
    #[test]
    fn the_budget_has_a_bucket_per_ec2_action() {
        let env = AwsEnv::new()
            .with_var("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
            .with_var("AWS_SECRET_ACCESS_KEY", "secret")
            .with_var("AWS_REGION", "us-east-1")
            .with_var("AWS_EC2_METADATA_DISABLED", "true");
        let config = AwsConfig {
            endpoint: Some("http://127.0.0.1:1/".into()),
            route_table_ids: vec!["rtb-1".into(), "rtb-2".into()],
            route_table_limit: Some(50),
            ..AwsConfig::default()
        };
        let provider = AwsProvider::new(config.clone(), &env).expect("provider");
        let budget = provider.budget().expect("a budget");
        let bucket = |name| {
            budget
                .buckets()
                .into_iter()
                .find(|b| b.name == name)
                .map(|b| (b.requests_per_second, b.burst))
        };
        assert_eq!(bucket(CREATE_ROUTE), Some((4.0, 160)));
        assert_eq!(bucket(DELETE_ROUTE), Some((4.0, 160)));
        assert_eq!(bucket(MODIFY_INSTANCE_ATTRIBUTE), Some((4.0, 160)));
        assert_eq!(bucket(DESCRIBE_ROUTE_TABLES), Some((16.0, 80)));
        assert_eq!(bucket(DESCRIBE_INSTANCES), Some((16.0, 80)));
        // Every request an operation may send is drawn before it goes (invariant 10):
        // the prefix-list and subnet reads, and either modify of the check, since the
        // hop (instance or interface) is known only once the instance is described.
        assert_eq!(
            budget.draws(BudgetOp::List),
            vec![
                (DESCRIBE_ROUTE_TABLES, 1),
                (DESCRIBE_MANAGED_PREFIX_LISTS, 1)
            ]
        );
        assert_eq!(
            budget.draws_with_tables(BudgetOp::Create, 2),
            vec![
                (DESCRIBE_INSTANCES, 1),
                (DESCRIBE_SUBNETS, 1),
                (CREATE_ROUTE, 2),
                (MODIFY_INSTANCE_ATTRIBUTE, 1),
                (MODIFY_NETWORK_INTERFACE_ATTRIBUTE, 1)
            ]
        );
        assert_eq!(
            budget.draws_with_tables(BudgetOp::Delete, 2),
            vec![(DELETE_ROUTE, 2)]
        );
        assert_eq!(budget.draws(BudgetOp::Delete), vec![(DELETE_ROUTE, 1)]);
        // 80 creates at once (DescribeInstances' 80 tokens), 160 deletes (one table),
        // where a fixed 16 stood.
        assert_eq!(budget.at_once(BudgetOp::Create), 80);
        assert_eq!(budget.operations_at_once(), 160);

        let mut shared = config;
        for b in &mut shared.buckets {
            if b.action == CREATE_ROUTE {
                (b.requests_per_second, b.burst) = (1.0, 20);
            }
        }
        let provider = AwsProvider::new(shared, &env).expect("provider");
        let budget = provider.budget().expect("a budget");
        let create = budget
            .buckets()
            .into_iter()
            .find(|b| b.name == CREATE_ROUTE);
        assert_eq!(
            create.map(|b| (b.requests_per_second, b.burst)),
            Some((1.0, 20))
        );
        // Two tables: ten creates' CreateRoutes fill the bucket of 20.
        assert_eq!(budget.at_once_with_tables(BudgetOp::Create, 2), 10);
    }

    fn entry(destination: &str, instance: Option<&str>, state: &str) -> RouteEntry {
        RouteEntry {
            destination: Some(destination.into()),
            instance_id: instance.map(str::to_string),
            other_target: None,
            state: state.into(),
            ..RouteEntry::default()
        }
    }

    #[test]
    fn routes_map_to_nodes_blackholes_and_vanished_instances() {
        let table = RouteTable {
            id: "rtb-1".into(),
            vpc_id: "vpc-1".into(),
            tags: Vec::new(),
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
        let routes = routes_from_table("c", &table, &nodes, &looked_up, &HashMap::new());
        let summary = summary(&routes);
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

    /// Destination, target node and blackhole flag of each route, for comparing lists.
    fn summary(routes: &[Route]) -> Vec<(&str, &str, bool)> {
        routes
            .iter()
            .map(|r| {
                (
                    r.destination_cidr.as_str(),
                    r.target_node.as_str(),
                    r.blackhole,
                )
            })
            .collect()
    }

    /// Guards [`merge_tables`]: present only when in every table alike; a node's route
    /// missing somewhere is left out (to be created), a route to no node is kept (to be
    /// deleted), disagreeing targets lose their target (to be replaced).
    #[test]
    fn routes_of_several_tables_merge_so_gaps_are_filled_and_nothing_needed_is_deleted() {
        let table = |id: &str, routes: Vec<RouteEntry>| RouteTable {
            id: id.into(),
            vpc_id: "vpc-1".into(),
            routes,
            tags: Vec::new(),
        };
        let a = Some("i-0000000a");
        let b = Some("i-0000000b");
        let tables = [
            table(
                "rtb-1",
                vec![
                    entry("10.244.1.0/24", a, "active"),
                    entry("10.244.2.0/24", a, "active"),
                    entry("10.244.3.0/24", Some("i-0000000c"), "active"),
                    entry("10.244.4.0/24", a, "active"),
                ],
            ),
            table(
                "rtb-2",
                vec![
                    entry("10.244.1.0/24", a, "active"),
                    entry("10.244.4.0/24", b, "active"),
                ],
            ),
        ];
        let nodes = NodeDirectory::new([
            ("node-a", Some("aws:///us-east-1a/i-0000000a")),
            ("node-b", Some("aws:///us-east-1b/i-0000000b")),
        ]);
        let looked_up = HashMap::from([("i-0000000c".to_string(), Lookup::Gone)]);
        let merged = merge_tables("c", &tables, &nodes, &looked_up, &HashMap::new());
        let summary = summary(&merged);
        assert_eq!(
            summary,
            vec![
                ("10.244.1.0/24", "node-a", false),
                ("10.244.3.0/24", "", true),
                ("10.244.4.0/24", "", false),
            ]
        );
    }

    fn listed_route(
        destination: &str,
        instance: Option<&str>,
        interface: Option<&str>,
        origin: &str,
    ) -> RouteEntry {
        let cidr = Cidr::parse(destination).expect("fixture CIDR");
        RouteEntry {
            destination: cidr.is_ipv4().then(|| destination.to_string()),
            destination_ipv6: (!cidr.is_ipv4()).then(|| destination.to_string()),
            instance_id: instance.map(str::to_string),
            network_interface_id: interface.map(str::to_string),
            origin: Some(origin.into()),
            state: "active".into(),
            ..RouteEntry::default()
        }
    }

    /// Guards the completion of routes listed with an interface alone (moto's way):
    /// an interface of an instance described before is given its instance; an
    /// unknown interface and a route naming its instance already are left alone.
    /// Seen failing with `fill_interface_owners` emptied: eni-a2's route had no
    /// instance.
    #[test]
    fn routes_listed_with_an_interface_alone_get_the_instance_described_with_it() {
        let env = AwsEnv::new()
            .with_var("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
            .with_var("AWS_SECRET_ACCESS_KEY", "secret")
            .with_var("AWS_REGION", "us-east-1")
            .with_var("AWS_EC2_METADATA_DISABLED", "true");
        let config = AwsConfig {
            endpoint: Some("http://127.0.0.1:1/".into()),
            ..AwsConfig::default()
        };
        let provider = AwsProvider::new(config, &env).expect("provider");
        let described = instance_with(vec![
            interface("eni-a1", "subnet-1", &["10.0.1.4"]),
            interface("eni-a2", "subnet-2", &["10.0.2.4"]),
        ]);
        lock(&provider.facts).insert(described.id.clone(), described);
        let mut tables = vec![RouteTable {
            id: "rtb-1".into(),
            vpc_id: "vpc-1".into(),
            routes: vec![
                listed_route("10.244.1.0/24", None, Some("eni-a2"), "CreateRoute"),
                listed_route("10.244.2.0/24", None, Some("eni-other"), "CreateRoute"),
                listed_route(
                    "10.244.3.0/24",
                    Some("i-0000000b"),
                    Some("eni-a1"),
                    "CreateRoute",
                ),
            ],
            tags: Vec::new(),
        }];
        provider.fill_interface_owners(&mut tables);
        let owners: Vec<Option<&str>> = tables[0]
            .routes
            .iter()
            .map(|r| r.instance_id.as_deref())
            .collect();
        assert_eq!(owners, vec![Some("i-0000000a"), None, Some("i-0000000b")]);
    }

    /// Guards the usage as "Routes per route table (non-propagated routes)" counts
    /// it (Amazon VPC quotas): IPv4 and IPv6 apart, propagated routes not at all, a
    /// prefix-list route as the list's maximum entries in the list's family (one
    /// when its size could not be read), local routes counted.
    #[test]
    fn table_usage_counts_as_the_quota_counts() {
        let mut routes = vec![
            listed_route("10.0.0.0/16", None, None, "CreateRouteTable"),
            listed_route("2600:1f18:aa::/56", None, None, "CreateRouteTable"),
            listed_route(
                "10.244.1.0/24",
                Some("i-0000000a"),
                Some("eni-a"),
                "CreateRoute",
            ),
            listed_route("fd00:10:244:1::/64", None, Some("eni-a"), "CreateRoute"),
            listed_route("192.168.0.0/16", None, None, "EnableVgwRoutePropagation"),
            listed_route("fd99::/48", None, None, "EnableVgwRoutePropagation"),
        ];
        for (list, origin) in [
            ("pl-v4", "CreateRoute"),
            ("pl-v6", "CreateRoute"),
            ("pl-unread", "CreateRoute"),
        ] {
            routes.push(RouteEntry {
                prefix_list: Some(list.into()),
                origin: Some(origin.into()),
                other_target: Some("vpce-1".into()),
                state: "active".into(),
                ..RouteEntry::default()
            });
        }
        let lists = HashMap::from([
            ("pl-v4".to_string(), (false, 20)),
            ("pl-v6".to_string(), (true, 30)),
        ]);
        let usage = Usage::of(&routes, &lists);
        // IPv4: local, the pod route, pl-v4's 20, the unread list's 1.
        // IPv6: local, the pod route, pl-v6's 30.
        assert_eq!(usage, Usage { ipv4: 23, ipv6: 32 });
        assert_eq!(usage.fuller(), 32);
        let table = RouteTable {
            id: "rtb-1".into(),
            vpc_id: "vpc-1".into(),
            routes,
            tags: Vec::new(),
        };
        let mut view = TableView::of(&table, &lists);
        let v6 = Cidr::parse("fd00:10:244:2::/64").expect("CIDR");
        view.apply(v6, Some(Hop::Instance("i-0000000b".into()).listed()));
        assert_eq!(view.usage, Usage { ipv4: 23, ipv6: 33 });
        view.apply(Cidr::parse("10.244.1.0/24").expect("CIDR"), None);
        assert_eq!(view.usage, Usage { ipv4: 22, ipv6: 33 });
    }

    fn interface(id: &str, subnet: &str, ips: &[&str]) -> ec2::Interface {
        ec2::Interface {
            id: id.into(),
            subnet_id: subnet.into(),
            private_ips: ips.iter().map(|s| s.to_string()).collect(),
            ipv6_addresses: Vec::new(),
            source_dest_check: Some(true),
        }
    }

    fn instance_with(interfaces: Vec<ec2::Interface>) -> Instance {
        Instance {
            id: "i-0000000a".into(),
            private_dns_name: None,
            state: "running".into(),
            vpc_id: "vpc-1".into(),
            source_dest_check: Some(true),
            interfaces,
        }
    }

    fn node_at(ip: &str) -> RouteTarget {
        RouteTarget {
            node_name: "node-a".into(),
            provider_id: Some("aws:///us-east-1a/i-0000000a".into()),
            addresses: vec![crate::model::NodeAddress::internal_ip(ip)],
        }
    }

    /// Guards the choice of hop: the instance when it has one interface (as
    /// upstream), the interface holding the node's InternalIP when it has several,
    /// refused with the fix when none holds it.
    #[test]
    fn a_route_goes_to_the_instance_or_to_the_interface_holding_the_internal_ip() {
        let one = instance_with(vec![interface("eni-a", "subnet-1", &["10.0.1.5"])]);
        let (hop, via) = hop_for(&one, &node_at("10.0.1.5")).expect("a hop");
        assert_eq!(hop, Hop::Instance("i-0000000a".into()));
        assert_eq!(via.map(|i| i.id.as_str()), Some("eni-a"));
        let two = instance_with(vec![
            interface("eni-a", "subnet-1", &["10.0.1.5"]),
            interface("eni-b", "subnet-2", &["10.0.2.7", "10.0.2.8"]),
        ]);
        let (hop, via) = hop_for(&two, &node_at("10.0.2.8")).expect("a hop");
        assert_eq!(
            hop,
            Hop::Interface {
                instance: "i-0000000a".into(),
                interface: "eni-b".into()
            }
        );
        assert_eq!(hop.param(), ("NetworkInterfaceId", "eni-b"));
        assert_eq!(via.map(|i| i.subnet_id.as_str()), Some("subnet-2"));
        let err = hop_for(&two, &node_at("10.9.9.9")).expect_err("no interface holds it");
        assert_eq!(
            err.kind,
            CloudErrorKind::Refused {
                reason: NO_INTERFACE_FOR_INTERNAL_IP,
                lasting: false
            }
        );
        assert!(
            err.message.contains("eni-b: 10.0.2.7 10.0.2.8"),
            "{}",
            err.message
        );
        assert!(err.message.contains("--node-ip"), "{}", err.message);
    }

    /// Guards adoption: a route EC2 lists with the instance and its interface (as it
    /// lists a route made upstream with `InstanceId`) is already where either hop
    /// would put it, so no write is sent; a route to another interface is not.
    #[test]
    fn routes_listed_with_instance_and_interface_are_the_nodes_as_they_stand() {
        let upstream = Listed::of(&listed_route(
            "10.244.1.0/24",
            Some("i-0000000a"),
            Some("eni-a"),
            "CreateRoute",
        ));
        assert!(Hop::Instance("i-0000000a".into()).matches(&upstream));
        let to = |interface: &str| Hop::Interface {
            instance: "i-0000000a".into(),
            interface: interface.into(),
        };
        assert!(to("eni-a").matches(&upstream));
        assert!(!to("eni-b").matches(&upstream));
        assert!(!Hop::Instance("i-0000000b".into()).matches(&upstream));
    }

    /// Guards the destination of each family: IPv6 goes as
    /// `DestinationIpv6CidrBlock` (upstream refused it), garbage is invalid.
    #[test]
    fn destinations_of_both_families_are_routed_and_garbage_is_invalid() {
        let v6 = destination("fd00:10:244::/64").expect("IPv6 is routed");
        assert_eq!(destination_param(v6), "DestinationIpv6CidrBlock");
        assert_eq!(
            destination("10.244.1.0/33").map_err(|e| e.kind),
            Err(CloudErrorKind::Invalid)
        );
        let v4 = destination("10.244.1.7/24").expect("IPv4");
        assert_eq!(v4.to_string(), "10.244.1.0/24");
        assert_eq!(destination_param(v4), "DestinationCidrBlock");
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
    fn service_quotas_endpoint_precedence_is_config_then_its_variable_then_generic() {
        let env = AwsEnv::new()
            .with_var("AWS_ENDPOINT_URL", "http://generic:1")
            .with_var("AWS_ENDPOINT_URL_EC2", "http://ec2-only:2")
            .with_var("AWS_ENDPOINT_URL_SERVICE_QUOTAS", "http://quotas-only:4");
        let pick = |c: Option<&str>, env: &AwsEnv| {
            resolve_service_quotas_endpoint(c, env, "eu-west-1").map(|e| e.host)
        };
        assert_eq!(pick(Some("http://cfg:3"), &env), Ok("cfg:3".to_string()));
        assert_eq!(pick(None, &env), Ok("quotas-only:4".to_string()));
        let generic = AwsEnv::new()
            .with_var("AWS_ENDPOINT_URL", "http://generic:1")
            .with_var("AWS_ENDPOINT_URL_EC2", "http://ec2-only:2");
        assert_eq!(pick(None, &generic), Ok("generic:1".to_string()));
        assert_eq!(
            pick(None, &AwsEnv::new()),
            Ok("servicequotas.eu-west-1.amazonaws.com".to_string())
        );
        let bad = pick(
            None,
            &AwsEnv::new().with_var("AWS_ENDPOINT_URL_SERVICE_QUOTAS", "x"),
        )
        .expect_err("bad scheme");
        assert!(
            bad.message.contains("AWS_ENDPOINT_URL_SERVICE_QUOTAS"),
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
                route_table_ids: vec!["vpc-123".into()],
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
