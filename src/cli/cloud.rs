//! The cloud as `run` is told of it: `--cloud-provider`, `--cloud-config` and the
//! provider's environment, read in two steps.
//!
//! [`read`] turns them into settings with no request to anyone: files and variables
//! only. So a bad cloud config fails before `run` touches the cluster, `check-config`
//! shows what was understood on a machine with no cluster and no cloud, and every
//! warning about the file is made once per start ([`CloudSettings::warnings`]), not
//! once per attempt to reach the cloud. [`CloudSettings::connect`] then builds the
//! provider, which asks the cloud for what it must know before the first pass (a
//! token, the route table, the network); `run` repeats only this step while the cloud
//! is down.
//!
//! Each provider's file is read as its peer reads it: the AWS cloud config and
//! `gce.conf`/`cloud.conf` as gcfg (names without case), `azure.json` as Go's
//! `encoding/json` (keys without case). A key that changes which table, network,
//! project, region or identity is used is honoured; a key of the peer's other
//! controllers is accepted with one line saying it does not concern routes; an unknown
//! key is a warning naming the closest known one. Nothing here may log or print a
//! secret.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::UsageError;
use crate::cloud::Routes;
use crate::fence::Fence;
use crate::model::Cidr;

/// Why the provider could not be built.
#[derive(Debug)]
pub enum ProviderError {
    /// A setting is wrong; the message names it (exit 2).
    Config(UsageError),
    /// The cloud's API could not be reached or failed; trying again may work.
    Outage(String),
}

impl From<UsageError> for ProviderError {
    fn from(e: UsageError) -> ProviderError {
        ProviderError::Config(e)
    }
}

/// Every value `--cloud-provider` takes.
pub const PROVIDERS: [&str; 8] = [
    "hcloud",
    "aws",
    "azure",
    "gce",
    "openstack",
    "alibaba",
    "exec",
    "fake",
];

/// The cloud's settings, read and checked; nothing has been asked of the cloud yet.
#[derive(Clone, Debug)]
pub struct CloudSettings {
    /// `--cloud-config`, when given.
    pub path: Option<PathBuf>,
    /// What was accepted but does not apply, or looks like a typo; each is a line for
    /// the log, made once.
    pub warnings: Vec<String>,
    provider: Provider,
}

/// One provider's settings.
#[derive(Clone, Debug)]
enum Provider {
    Fake {
        latency: Option<Duration>,
        journal: Option<PathBuf>,
    },
    Hcloud(Box<crate::cloud::hcloud::Config>),
    Aws(Box<crate::cloud::aws::AwsConfig>, Box<AwsIdentity>),
    Azure(Box<crate::cloud::azure::Config>),
    Gce(Box<crate::cloud::gce::Config>),
    OpenStack(Box<crate::cloud::openstack::Config>),
    Alibaba(Box<crate::cloud::alibaba::Config>),
    Exec(Box<crate::cloud::exec::Config>),
}

/// Where the AWS provider's identity comes from: the credential chain's environment,
/// and the role the CCM's cloud config names to assume on top of it (`RoleARN`).
#[derive(Clone)]
struct AwsIdentity {
    env: crate::cloud::aws::credentials::AwsEnv,
}

impl std::fmt::Debug for AwsIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsIdentity").finish_non_exhaustive()
    }
}

/// Reads the cloud's settings as `run` does, with no request: `--cloud-provider`
/// `name`, `--cloud-config` `cloud_config`, and the process environment. Errors name
/// the file, key or variable and the fix.
pub fn read(
    name: &str,
    cloud_config: Option<&Path>,
    cluster_cidrs: &[Cidr],
) -> Result<CloudSettings, UsageError> {
    let path = cloud_config.map(Path::to_path_buf);
    // Every cloud client reads the proxy variables; one that cannot be used stops the
    // start here, named, rather than being ignored as Go would.
    crate::ProxyEnv::from_process().map_err(|e| UsageError(e.0))?;
    let (provider, warnings) = match name {
        "fake" => (fake_settings()?, Vec::new()),
        "hcloud" => hcloud_settings(cloud_config)?,
        "aws" => aws_settings(cloud_config)?,
        "azure" => azure_settings(cloud_config)?,
        "gce" => gce_settings(cloud_config)?,
        "openstack" => openstack_settings(cloud_config, cluster_cidrs)?,
        "alibaba" => alibaba_settings(cloud_config, cluster_cidrs)?,
        "exec" => exec_settings(cloud_config)?,
        other => {
            return Err(UsageError(format!(
                "--cloud-provider: {other:?} is not supported; use {}",
                PROVIDERS.join(", ")
            )));
        }
    };
    Ok(CloudSettings {
        path,
        warnings,
        provider,
    })
}

impl CloudSettings {
    /// The provider's name, as `--cloud-provider` gives it.
    pub fn provider_name(&self) -> &'static str {
        match self.provider {
            Provider::Fake { .. } => "fake",
            Provider::Hcloud(_) => "hcloud",
            Provider::Aws(..) => "aws",
            Provider::Azure(_) => "azure",
            Provider::Gce(_) => "gce",
            Provider::OpenStack(_) => "openstack",
            Provider::Alibaba(_) => "alibaba",
            Provider::Exec(_) => "exec",
        }
    }

    /// Builds the provider: it asks the cloud what it must know before the first
    /// pass. `metrics` records its HTTP requests; it checks `fence` before every
    /// request once built. An outage is told apart from a wrong setting, so that `run`
    /// waits for the cloud instead of exiting.
    pub fn connect(
        &self,
        metrics: Option<Arc<crate::metrics::Metrics>>,
        fence: &Fence,
    ) -> Result<Arc<dyn Routes>, ProviderError> {
        match &self.provider {
            Provider::Fake { latency, journal } => Ok(fake_provider(*latency, journal.as_deref())?),
            Provider::Hcloud(config) => {
                let mut config = (**config).clone();
                config.metrics = metrics;
                let provider = crate::cloud::hcloud::HcloudRoutes::connect(config);
                let provider = started(provider, |e| e.outage)?;
                Ok(Arc::new(provider.with_fence(fence.clone())))
            }
            Provider::Aws(config, identity) => {
                use crate::cloud::aws::AwsProvider;
                let provider =
                    AwsProvider::new((**config).clone(), &identity.env).map_err(|e| {
                        match e.kind {
                            crate::cloud::CloudErrorKind::Invalid => {
                                ProviderError::Config(UsageError(format!("aws: {}", e.message)))
                            }
                            // The instance metadata service or STS did not answer in time.
                            _ => ProviderError::Outage(format!("aws: {}", e.message)),
                        }
                    })?;
                Ok(Arc::new(provider.with_fence(fence.clone())))
            }
            Provider::Azure(config) => {
                let mut config = (**config).clone();
                config.metrics = metrics;
                let provider = crate::cloud::azure::AzureRoutes::connect(config);
                let provider = started(provider, |e| e.outage)?;
                Ok(Arc::new(provider.with_fence(fence.clone())))
            }
            Provider::Gce(config) => {
                let mut config = (**config).clone();
                config.metrics = metrics;
                let provider = crate::cloud::gce::GceRoutes::connect(config);
                let provider = started(provider, |e| e.outage)?;
                Ok(Arc::new(provider.with_fence(fence.clone())))
            }
            Provider::OpenStack(config) => {
                let mut config = (**config).clone();
                config.metrics = metrics;
                let provider = crate::cloud::openstack::OpenStackRoutes::connect(config);
                let provider = started(provider, |e| e.outage)?;
                Ok(Arc::new(provider.with_fence(fence.clone())))
            }
            Provider::Alibaba(config) => {
                let mut config = (**config).clone();
                config.metrics = metrics;
                let provider = crate::cloud::alibaba::AlibabaRoutes::connect(config);
                let provider = started(provider, |e| e.outage)?;
                Ok(Arc::new(provider.with_fence(fence.clone())))
            }
            Provider::Exec(config) => {
                Ok(Arc::new(exec_provider(config)?.with_fence(fence.clone())))
            }
        }
    }

    /// What was understood, one `(what, value)` a line, for `check-config` and the
    /// start-up log: the provider, what it will manage, where its identity comes
    /// from, its limits and budgets. No secret is ever part of it.
    pub fn describe(&self) -> Vec<(&'static str, String)> {
        let mut lines = vec![("provider", self.provider_name().to_string())];
        if let Some(path) = &self.path {
            lines.push(("cloud config", path.display().to_string()));
        }
        match &self.provider {
            Provider::Fake { latency, journal } => {
                lines.push(("routes", "in this process's memory only".into()));
                if let Some(latency) = latency {
                    lines.push(("latency", format!("{latency:?} per call")));
                }
                if let Some(journal) = journal {
                    lines.push(("journal", journal.display().to_string()));
                }
            }
            Provider::Hcloud(c) => describe_hcloud(c, &mut lines),
            Provider::Aws(c, identity) => describe_aws(c, &identity.env, &mut lines),
            Provider::Azure(c) => describe_azure(c, &mut lines),
            Provider::Gce(c) => describe_gce(c, &mut lines),
            Provider::OpenStack(c) => describe_openstack(c, &mut lines),
            Provider::Alibaba(c) => describe_alibaba(c, &mut lines),
            Provider::Exec(c) => {
                let command = std::iter::once(c.command.as_str())
                    .chain(c.args.iter().map(String::as_str))
                    .collect::<Vec<_>>()
                    .join(" ");
                lines.push(("plugin", format!("{} ({command})", c.name)));
                let env: Vec<&str> = c.env.iter().map(|(k, _)| k.as_str()).collect();
                if !env.is_empty() {
                    lines.push(("plugin environment", env.join(", ")));
                }
                lines.push((
                    "limits",
                    format!(
                        "{:?} a call, {} bytes of output at most",
                        c.timeout, c.max_output_bytes
                    ),
                ));
            }
        }
        lines
    }
}

fn describe_hcloud(c: &crate::cloud::hcloud::Config, lines: &mut Vec<(&'static str, String)>) {
    use crate::cloud::hcloud::TokenSource;
    lines.push(("network", c.network.to_string()));
    lines.push(("API", c.endpoint.clone()));
    lines.push(("TLS trust", c.trust.describe()));
    lines.push((
        "identity",
        match &c.token {
            TokenSource::Value(_) => "the API token in HCLOUD_TOKEN".to_string(),
            TokenSource::File(path) => format!(
                "the API token in the file {} (HCLOUD_TOKEN_FILE; read again when it changes)",
                path.display()
            ),
        },
    ));
    lines.push((
        "limits",
        format!("{} routes in the network", c.network_route_limit),
    ));
    lines.push((
        "budget",
        format!(
            "{} requests a second, a burst of {} (corrected from the API's RateLimit headers), \
             {} route change(s) at once",
            c.rate_limit_per_second, c.rate_limit_burst, c.max_concurrent_mutations
        ),
    ));
}

fn describe_aws(
    c: &crate::cloud::aws::AwsConfig,
    env: &crate::cloud::aws::credentials::AwsEnv,
    lines: &mut Vec<(&'static str, String)>,
) {
    lines.push((
        "route tables",
        if c.route_table_ids.is_empty() {
            match &c.cluster_id {
                Some(id) => format!(
                    "every table tagged kubernetes.io/cluster/{id} (or the legacy \
                     KubernetesCluster={id}), from the cloud config's cluster ID"
                ),
                None => "every table tagged kubernetes.io/cluster/<--cluster-name> (or the \
                         legacy KubernetesCluster=<--cluster-name>)"
                    .to_string(),
            }
        } else {
            c.route_table_ids.join(", ")
        },
    ));
    lines.push((
        "region",
        c.region.clone().unwrap_or_else(|| {
            "from AWS_REGION, AWS_DEFAULT_REGION, the profile, then the instance metadata".into()
        }),
    ));
    let overridden = c
        .ec2_overrides
        .iter()
        .find(|(region, _)| Some(region) == c.region.as_ref());
    if let Some(endpoint) = c.endpoint.as_ref().or(overridden.map(|(_, url)| url)) {
        lines.push(("EC2 endpoint", endpoint.clone()));
    }
    lines.push((
        "TLS trust",
        match crate::cloud::aws::trust(
            env,
            crate::cloud::aws::credentials::profile_ca_bundle(env).as_deref(),
        ) {
            Ok(trust) => trust.describe(),
            Err(e) => format!("unusable: {}", e.message),
        },
    ));
    // The chain is walked without a request: temporary credentials are fetched on
    // first use, which here never comes.
    use crate::cloud::aws::credentials::{ChainSettings, CredentialSource, Imds};
    let settings = ChainSettings::new(c.region.as_deref().unwrap_or("us-east-1"))
        .with_role_arn(c.role_arn.as_deref());
    let imds = Imds::from_env(env, c.imds_endpoint.as_deref());
    lines.push((
        "identity",
        match CredentialSource::resolve(env, imds, &settings) {
            Ok(source) => source.origin(),
            Err(e) => format!("none found: {}", e.message),
        },
    ));
    lines.push((
        "limits",
        match c.route_table_limit {
            Some(n) => format!("{n} routes a table (RouteTableRouteLimit)"),
            None => "routes a table: the account's quota from Service Quotas, read at start \
                     (else 500)"
                .to_string(),
        },
    ));
    let buckets: Vec<String> = c
        .buckets
        .iter()
        .map(|b| format!("{} {}/s burst {}", b.action, b.requests_per_second, b.burst))
        .collect();
    lines.push(("budget", buckets.join("; ")));
    lines.push((
        "source/destination check",
        if c.disable_source_dest_check {
            "turned off on each node's instance before its first route".to_string()
        } else {
            "left alone; a node whose instance checks is refused".to_string()
        },
    ));
}

fn describe_azure(c: &crate::cloud::azure::Config, lines: &mut Vec<(&'static str, String)>) {
    lines.push(("route table", c.route_table_id()));
    lines.push(("TLS trust", c.trust.describe()));
    lines.push((
        "cloud",
        format!(
            "{} (Resource Manager {}, sign-in at {})",
            c.endpoints.name, c.endpoints.resource_manager, c.endpoints.authority
        ),
    ));
    lines.push(("identity", c.identity.describe()));
    lines.push((
        "limits",
        format!("{} routes in the table", c.route_table_limit),
    ));
    lines.push((
        "budget",
        format!(
            "{} requests a second, a burst of {}",
            c.rate_limit_per_second, c.rate_limit_burst
        ),
    ));
}

fn describe_gce(c: &crate::cloud::gce::Config, lines: &mut Vec<(&'static str, String)>) {
    use crate::cloud::gce::Credentials;
    let from_metadata = "from the metadata server".to_string();
    lines.push((
        "project",
        c.project_id
            .clone()
            .unwrap_or_else(|| from_metadata.clone()),
    ));
    lines.push((
        "network",
        format!(
            "{} in project {}",
            c.network_name
                .clone()
                .unwrap_or_else(|| from_metadata.clone()),
            c.network_project_id
                .clone()
                .or_else(|| c.project_id.clone())
                .unwrap_or_else(|| "of the instances".into())
        ),
    ));
    lines.push(("API", c.api_endpoint.clone()));
    lines.push(("TLS trust", c.trust.describe()));
    lines.push((
        "identity",
        match &c.credentials {
            Credentials::Metadata => {
                "the instance's service account, from the metadata server".to_string()
            }
            Credentials::KeyFile(path) => format!(
                "the service-account key file {} (GOOGLE_APPLICATION_CREDENTIALS)",
                path.display()
            ),
            Credentials::TokenUrl { url, .. } => format!("tokens from token-url {url}"),
            Credentials::None => "no token (token-url = nil)".to_string(),
        },
    ));
    let buckets: Vec<String> = c
        .rate_quotas
        .iter()
        .map(|b| {
            format!(
                "{} {}/s burst {}",
                b.group.key(),
                b.requests_per_second,
                b.burst
            )
        })
        .collect();
    lines.push(("budget", buckets.join("; ")));
    lines.push((
        "limits",
        format!("{} route changes at once", c.mutations_at_once),
    ));
}

fn describe_openstack(
    c: &crate::cloud::openstack::Config,
    lines: &mut Vec<(&'static str, String)>,
) {
    use crate::cloud::openstack::{Credentials, ProjectRef, UserRef};
    lines.push(("router", c.router_id.clone()));
    lines.push(("Keystone", c.auth_url.clone()));
    lines.push(("TLS trust", c.trust.describe()));
    if let Some(region) = &c.region {
        lines.push(("region", region.clone()));
    }
    if let Some(endpoint) = &c.network_endpoint {
        lines.push(("network endpoint", endpoint.clone()));
    }
    let domain = |(kind, value): &(&str, String)| format!("domain {kind} {value}");
    let user_of = |user: &UserRef| match user {
        UserRef::Id(id) => format!("user {id}"),
        UserRef::Name { name, domain: d } => format!("user {name} ({})", domain(d)),
    };
    lines.push((
        "identity",
        match &c.credentials {
            Credentials::ApplicationCredential { id, .. } => {
                format!("application credential {id}")
            }
            Credentials::ApplicationCredentialByName { name, user, .. } => {
                format!("application credential {name} of {}", user_of(user))
            }
            Credentials::Trust {
                trust_id, trustee, ..
            } => format!("trust {trust_id}, trustee {}, password", user_of(trustee)),
            Credentials::Password { user, project, .. } => {
                let user = user_of(user);
                let project = match project {
                    ProjectRef::Id(id) => format!("project {id}"),
                    ProjectRef::Name { name, domain: d } => {
                        format!("project {name} ({})", domain(d))
                    }
                };
                format!("{user}, password, {project}")
            }
        },
    ));
    lines.push(("limits", format!("{} routes on the router", c.max_routes)));
    lines.push((
        "budget",
        format!(
            "{} requests a second, a burst of {}",
            c.requests_per_second, c.burst
        ),
    ));
}

fn describe_alibaba(c: &crate::cloud::alibaba::Config, lines: &mut Vec<(&'static str, String)>) {
    let from_metadata = "from the instance metadata service".to_string();
    lines.push((
        "route tables",
        if c.route_table_ids.is_empty() {
            "the VPC's one route table (DescribeRouteTableList)".to_string()
        } else {
            c.route_table_ids.join(", ")
        },
    ));
    lines.push((
        "region",
        c.region.clone().unwrap_or_else(|| from_metadata.clone()),
    ));
    lines.push(("VPC", c.vpc_id.clone().unwrap_or(from_metadata)));
    for (what, url) in [
        ("VPC endpoint", &c.vpc_endpoint),
        ("ECS endpoint", &c.ecs_endpoint),
        ("STS endpoint", &c.sts_endpoint),
        ("Quota Center endpoint", &c.quotas_endpoint),
    ] {
        if let Some(url) = url {
            lines.push((what, url.clone()));
        }
    }
    lines.push(("TLS trust", c.trust.describe()));
    lines.push(("identity", c.credentials.describe()));
    lines.push((
        "limits",
        format!(
            "custom entries a table: {}; {} entries a batch, one batch at a time",
            match c.route_entry_quota {
                Some(q) => format!("{q} (Global.routeEntryQuota)"),
                None => format!(
                    "the account's quota {}, read from Quota Center ({} without \
                     quotas:ListProductQuotas)",
                    crate::cloud::alibaba::ROUTE_ENTRY_QUOTA,
                    crate::cloud::alibaba::DEFAULT_ROUTE_ENTRY_QUOTA
                ),
            },
            crate::cloud::alibaba::BATCH_SIZE
        ),
    ));
    lines.push((
        "budget",
        format!(
            "{} requests a second, a burst of {}; entries followed every {:?} until Created",
            c.requests_per_second, c.burst, c.poll_interval
        ),
    ));
}

/// A provider's start: an error that says the cloud did not answer is an outage to
/// wait out, any other a setting to fix.
fn started<P, E: std::fmt::Display>(
    result: Result<P, E>,
    outage: impl Fn(&E) -> bool,
) -> Result<P, ProviderError> {
    result.map_err(|e| match outage(&e) {
        true => ProviderError::Outage(e.to_string()),
        false => ProviderError::Config(UsageError(e.to_string())),
    })
}

// --- reading each provider's settings ------------------------------------------------

/// The in-memory cloud's settings, from its variables.
fn fake_settings() -> Result<Provider, UsageError> {
    Ok(Provider::Fake {
        latency: fake_latency(std::env::var(FAKE_LATENCY_VAR).ok().as_deref())?,
        journal: std::env::var_os(FAKE_JOURNAL_VAR).map(PathBuf::from),
    })
}

/// [`FAKE_LATENCY_VAR`]'s value, a Go duration.
fn fake_latency(value: Option<&str>) -> Result<Option<Duration>, UsageError> {
    value
        .map(|v| {
            crate::duration::parse(v).map_err(|e| UsageError(format!("{FAKE_LATENCY_VAR}: {e}")))
        })
        .transpose()
}

/// Hetzner: `HCLOUD_*` variables, or the same names as `KEY=VALUE` lines of
/// `--cloud-config` (the file wins). The Hetzner CCM has no file of its own; its
/// variables are its configuration.
fn hcloud_settings(path: Option<&Path>) -> Result<(Provider, Vec<String>), UsageError> {
    use crate::cloud::hcloud::Config as HcloudConfig;
    let (file, warnings) = match path {
        Some(path) => {
            let pairs = read_cloud_config(path)?;
            let warnings = check_cloud_config_keys("hcloud", path, &pairs);
            (pairs, warnings)
        }
        None => (Vec::new(), Vec::new()),
    };
    let from_file = |key: &str| {
        file.iter()
            .rev()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v.clone())
    };
    let config = HcloudConfig::from_env(|k| from_file(k).or_else(|| std::env::var(k).ok()))
        .map_err(|e| UsageError(e.to_string()))?;
    Ok((Provider::Hcloud(Box::new(config)), warnings))
}

/// AWS: cloud-provider-aws's cloud config (gcfg: `[Global]`, `[ServiceOverride "n"]`)
/// and the AWS SDKs' environment.
fn aws_settings(path: Option<&Path>) -> Result<(Provider, Vec<String>), UsageError> {
    use crate::cloud::aws::credentials::AwsEnv;
    let (config, warnings) = match path {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                UsageError(format!(
                    "--cloud-config {}: cannot read: {e}",
                    path.display()
                ))
            })?;
            let (config, warnings) = aws_config(&text)
                .map_err(|e| UsageError(format!("--cloud-config {}: {e}", path.display())))?;
            let shown = path.display();
            let warnings = warnings
                .into_iter()
                .map(|w| format!("--cloud-config {shown}: {w}"))
                .collect();
            (config, warnings)
        }
        None => (crate::cloud::aws::AwsConfig::default(), Vec::new()),
    };
    let identity = AwsIdentity {
        env: AwsEnv::from_process(),
    };
    Ok((
        Provider::Aws(Box::new(config), Box::new(identity)),
        warnings,
    ))
}

/// Reads an AWS cloud config as cloud-provider-aws does (gcfg, names without case;
/// `gcfg.FatalOnly`, so an unknown name does not stop it, and here gives a warning).
/// Returns the settings and the warnings, each without the file's name.
pub fn aws_config(text: &str) -> Result<(crate::cloud::aws::AwsConfig, Vec<String>), String> {
    let entries = crate::cloud::gce::config::parse_gcfg(text)
        .map_err(|e| e.message.replace("gce.conf ", ""))?;
    let mut config = crate::cloud::aws::AwsConfig::default();
    let mut warnings = Vec::new();
    let mut route_tables: Vec<String> = Vec::new();
    let mut cluster_id = None;
    let mut legacy_cluster_tag = None;
    let mut region = None;
    let mut zone = None;
    let mut overrides: std::collections::BTreeMap<String, ServiceOverride> = Default::default();
    for entry in &entries {
        let value = entry.value.clone().unwrap_or_default();
        let at = format!("line {}", entry.line);
        match entry.section.as_str() {
            "global" => {}
            "serviceoverride" => {
                let name = canonical(&entry.name, AWS_OVERRIDE_KEYS);
                let key = entry.subsection.clone().unwrap_or_default();
                let o = overrides.entry(key).or_default();
                match name {
                    Some("Service") => o.service = value.trim().to_string(),
                    Some("Region") => o.region = value.trim().to_string(),
                    Some("URL") => o.url = value.trim().to_string(),
                    Some("SigningRegion") => o.signing_region = value.trim().to_string(),
                    Some("SigningMethod" | "SigningName") => {}
                    _ => warnings.push(unknown_key(
                        &at,
                        &entry.name,
                        "[ServiceOverride]",
                        AWS_OVERRIDE_KEYS,
                    )),
                }
                continue;
            }
            other => {
                warnings.push(format!(
                    "{at}: section [{other}] is not read by cloud-provider-aws; ignored"
                ));
                continue;
            }
        }
        let Some(name) =
            canonical(&entry.name, AWS_KEYS).or(canonical(&entry.name, AWS_OTHER_KEYS))
        else {
            let known: Vec<&str> = AWS_KEYS.iter().chain(AWS_OTHER_KEYS).copied().collect();
            warnings.push(unknown_key(&at, &entry.name, "[Global]", &known));
            continue;
        };
        let nonempty = (!value.trim().is_empty()).then(|| value.trim().to_string());
        match name {
            "RouteTableID" => route_tables.extend(
                value
                    .split(',')
                    .map(str::trim)
                    .filter(|id| !id.is_empty())
                    .map(str::to_string),
            ),
            "Region" => region = nonempty,
            "Zone" => zone = nonempty,
            "KubernetesClusterID" => cluster_id = nonempty,
            "KubernetesClusterTag" => legacy_cluster_tag = nonempty,
            "RoleARN" => config.role_arn = nonempty,
            "RouteTableRouteLimit" => {
                config.route_table_limit = Some(
                    value
                        .trim()
                        .parse::<usize>()
                        .ok()
                        .filter(|n| *n > 0)
                        .ok_or_else(|| {
                            format!(
                                "{at}: RouteTableRouteLimit={value:?} is not a positive number of \
                             routes (leave it out to use the account's \"Routes per route \
                             table\" from Service Quotas, or AWS's default of 500)"
                            )
                        })?,
                );
            }
            "DisableSourceDestCheck" => {
                config.disable_source_dest_check = match value.trim().to_ascii_lowercase().as_str()
                {
                    "true" => true,
                    "false" => false,
                    _ => {
                        return Err(format!(
                            "{at}: DisableSourceDestCheck={value:?} is not true or false"
                        ));
                    }
                };
            }
            bucket if bucket.starts_with("EC2Bucket") => {
                let action = &bucket["EC2Bucket".len()..];
                let Some(b) = config.buckets.iter_mut().find(|b| b.action == action) else {
                    continue;
                };
                let (per_second, burst) = parse_ec2_bucket(&value).ok_or_else(|| {
                    format!(
                        "{at}: {bucket}={value:?} is not <requests per second>,<burst> with \
                         both positive (the default is {},{}: EC2's documented bucket for {}, \
                         less a margin)",
                        b.requests_per_second, b.burst, b.action
                    )
                })?;
                b.requests_per_second = per_second;
                b.burst = burst;
            }
            other => warnings.push(format!(
                "{at}: {other} does not concern routes; ignored (it is cloud-provider-aws's \
                 for its other controllers)"
            )),
        }
    }
    config.route_table_ids = route_tables;
    // cloud-provider-aws's tagging: the legacy tag's value is the cluster ID, and
    // both given must agree (pkg/providers/v1/tags.go, awsTagging.init).
    config.cluster_id = match (cluster_id, legacy_cluster_tag) {
        (Some(id), Some(tag)) if id != tag => {
            return Err(format!(
                "KubernetesClusterID {id:?} and KubernetesClusterTag {tag:?} disagree; \
                 cloud-provider-aws refuses that too: give one, or the same value"
            ));
        }
        (id, tag) => id.or(tag),
    };
    // cloud-provider-aws: a Zone wins over Region, its region being the zone's name
    // without the zone letter (aws.go, azToRegion); with neither, the region comes
    // from the environment or the instance metadata at start.
    config.region = match zone {
        Some(zone) => Some(zone_region(&zone)?),
        None => region,
    };
    let mut seen = std::collections::BTreeSet::new();
    for (name, o) in &overrides {
        // ValidateOverrides: every override names its service, region, URL and
        // signing region, and one service is overridden once per region.
        for (key, value) in [
            ("Service", &o.service),
            ("Region", &o.region),
            ("URL", &o.url),
            ("SigningRegion", &o.signing_region),
        ] {
            if value.is_empty() {
                return Err(format!(
                    "[ServiceOverride {name:?}]: {key} is missing; cloud-provider-aws refuses an \
                     override without it"
                ));
            }
        }
        if !seen.insert((o.service.clone(), o.region.clone())) {
            return Err(format!(
                "[ServiceOverride {name:?}]: a second override of {} in {}; give each service \
                 one override per region",
                o.service, o.region
            ));
        }
        // The AWS SDK's service IDs: "EC2" and "ec2imds". cloud-provider-aws's own
        // documentation spells EC2 `ec2`, so the case is not held against it here.
        if o.service.eq_ignore_ascii_case("ec2") {
            config.ec2_overrides.push((o.region.clone(), o.url.clone()));
        } else if o.service == "ec2imds" {
            config.imds_endpoint = Some(o.url.clone());
        } else {
            warnings.push(format!(
                "[ServiceOverride {name:?}]: {} is not a service the route controller calls; \
                 ignored",
                o.service
            ));
        }
    }
    Ok((config, warnings))
}

/// The region of an availability zone, as cloud-provider-aws's azToRegion reads it:
/// `eu-west-1a` and `us-west-2-lax-1a` are in `eu-west-1` and `us-west-2`.
fn zone_region(zone: &str) -> Result<String, String> {
    // The longest prefix of the form (letters '-')+ digits.
    let mut end = None;
    let mut i = 0;
    let bytes = zone.as_bytes();
    loop {
        let letters = bytes[i..]
            .iter()
            .take_while(|b| b.is_ascii_alphabetic())
            .count();
        if letters == 0 || bytes.get(i + letters) != Some(&b'-') {
            break;
        }
        let after = i + letters + 1;
        let digits = bytes[after..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count();
        if digits > 0 {
            end = Some(after + digits);
            break;
        }
        i = after;
    }
    end.map(|e| zone[..e].to_string()).ok_or_else(|| {
        format!(
            "Zone {zone:?} is not an availability zone (e.g. eu-west-1a); cloud-provider-aws \
             refuses it too"
        )
    })
}

/// One `[ServiceOverride "n"]` section.
#[derive(Default)]
struct ServiceOverride {
    service: String,
    region: String,
    url: String,
    signing_region: String,
}

/// The known spelling of `name`, matched without case (gcfg's rule).
fn canonical(name: &str, known: &[&'static str]) -> Option<&'static str> {
    known.iter().copied().find(|k| k.eq_ignore_ascii_case(name))
}

/// The warning for a name the peer does not know either.
fn unknown_key(at: &str, name: &str, section: &str, known: &[&str]) -> String {
    match super::flags::closest(name, known.iter().copied()) {
        Some(c) => format!("{at}: unknown name {name:?} in {section}; ignored (did you mean {c}?)"),
        None => format!("{at}: unknown name {name:?} in {section}; ignored"),
    }
}

/// Azure: cloud-provider-azure's `azure.json` (required) and its variables.
fn azure_settings(path: Option<&Path>) -> Result<(Provider, Vec<String>), UsageError> {
    use crate::cloud::azure::Config as AzureConfig;
    let path = path.ok_or_else(|| {
        UsageError(
            "--cloud-provider=azure needs --cloud-config: the azure.json that \
             cloud-provider-azure reads (e.g. --cloud-config=/etc/kubernetes/azure.json)"
                .into(),
        )
    })?;
    let text = read_text(path)?;
    let (config, warnings) = AzureConfig::parse_with_warnings(&text, &|k| std::env::var(k).ok())
        .map_err(|e| UsageError(format!("--cloud-config {}: {e}", path.display())))?;
    let shown = path.display();
    let warnings = warnings
        .into_iter()
        .map(|w| format!("--cloud-config {shown}: {w}"))
        .collect();
    Ok((Provider::Azure(Box::new(config)), warnings))
}

/// GCE: `gce.conf` (optional) and the environment of Google's libraries.
fn gce_settings(path: Option<&Path>) -> Result<(Provider, Vec<String>), UsageError> {
    use crate::cloud::gce::Config as GceConfig;
    let text = path.map(read_text).transpose()?;
    let shown = path.map_or(String::new(), |p| {
        format!("--cloud-config {}: ", p.display())
    });
    let (config, warnings) = GceConfig::from_gce_conf(text.as_deref(), |k| std::env::var(k).ok())
        .map_err(|e| UsageError(format!("{shown}{e}")))?;
    let warnings = warnings
        .into_iter()
        .map(|w| format!("{shown}{w}"))
        .collect();
    Ok((Provider::Gce(Box::new(config)), warnings))
}

/// OpenStack: cloud-provider-openstack's `cloud.conf` (required), and the clouds.yaml
/// it names with `use-clouds = true`.
fn openstack_settings(
    path: Option<&Path>,
    cluster_cidrs: &[Cidr],
) -> Result<(Provider, Vec<String>), UsageError> {
    use crate::cloud::openstack::Config as OpenStackConfig;
    let Some(path) = path else {
        return Err(UsageError(
            "--cloud-provider=openstack needs --cloud-config: cloud-provider-openstack's \
             cloud.conf with [Global] auth-url and credentials and [Route] router-id"
                .into(),
        ));
    };
    let shown = format!("--cloud-config {}: ", path.display());
    let text = read_text(path)?;
    let (config, warnings) = OpenStackConfig::from_cloud_conf(&text, cluster_cidrs, |f| {
        std::fs::read_to_string(f).map_err(|e| e.to_string())
    })
    .map_err(|e| UsageError(format!("{shown}{e}")))?;
    if cluster_cidrs.is_empty() {
        return Err(UsageError(
            "--cloud-provider=openstack needs --cluster-cidr: only the router's routes inside \
             the cluster CIDRs are this cluster's"
                .into(),
        ));
    }
    let warnings = warnings
        .into_iter()
        .map(|w| format!("{shown}{w}"))
        .collect();
    Ok((Provider::OpenStack(Box::new(config)), warnings))
}

/// Alibaba Cloud: cloud-provider-alibaba-cloud's cloud config (optional: region and
/// VPC then come from the instance metadata) and the SDKs' and the peer's variables.
fn alibaba_settings(
    path: Option<&Path>,
    cluster_cidrs: &[Cidr],
) -> Result<(Provider, Vec<String>), UsageError> {
    use crate::cloud::alibaba::Config as AlibabaConfig;
    let text = path.map(read_text).transpose()?;
    let shown = path.map_or(String::new(), |p| {
        format!("--cloud-config {}: ", p.display())
    });
    let (config, warnings) =
        AlibabaConfig::from_cloud_config(text.as_deref(), cluster_cidrs, |k| std::env::var(k).ok())
            .map_err(|e| UsageError(format!("{shown}{e}")))?;
    if cluster_cidrs.is_empty() {
        return Err(UsageError(
            "--cloud-provider=alibaba needs --cluster-cidr: only the route tables' entries \
             inside the cluster CIDRs are this cluster's"
                .into(),
        ));
    }
    let warnings = warnings
        .into_iter()
        .map(|w| format!("{shown}{w}"))
        .collect();
    Ok((Provider::Alibaba(Box::new(config)), warnings))
}

/// A plugin: `Command=`, `Arg=`, `Env=` … lines of `--cloud-config`.
fn exec_settings(path: Option<&Path>) -> Result<(Provider, Vec<String>), UsageError> {
    let (pairs, warnings) = match path {
        Some(path) => {
            let pairs = read_cloud_config(path)?;
            let warnings = check_cloud_config_keys("exec", path, &pairs);
            (pairs, warnings)
        }
        None => (Vec::new(), Vec::new()),
    };
    let config = crate::cloud::exec::Config::from_pairs(&pairs).map_err(UsageError)?;
    // What run's first call would find: a plugin that is not there (the call itself,
    // `describe`, is left to run and to check-config --probe).
    if !plugin_exists(&config.command) {
        return Err(UsageError(format!(
            "--cloud-provider=exec: the plugin {:?} is not there (Command= in \
             --cloud-config): give a path to an executable, or a name found in PATH",
            config.command
        )));
    }
    Ok((Provider::Exec(Box::new(config)), warnings))
}

/// Whether `command` names a file: a path as given, or a name in one of `PATH`'s
/// directories, as the process start will look it up.
fn plugin_exists(command: &str) -> bool {
    if command.contains('/') {
        return Path::new(command).is_file();
    }
    std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).any(|dir| dir.join(command).is_file()))
        .unwrap_or(false)
}

fn read_text(path: &Path) -> Result<String, UsageError> {
    std::fs::read_to_string(path).map_err(|e| {
        UsageError(format!(
            "--cloud-config {}: cannot read: {e}",
            path.display()
        ))
    })
}

// --- the key=value files (Hetzner's variables, a plugin's settings) ------------------

/// Reads a `KEY=VALUE` settings file (`KEY: VALUE` too; `[Section]` headers and
/// `#`/`;` comments are skipped), as Hetzner's variables and a plugin's settings are
/// given in `--cloud-config`.
pub fn read_cloud_config(path: &Path) -> Result<Vec<(String, String)>, UsageError> {
    let text = read_text(path)?;
    let mut pairs = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty()
            || line.starts_with('#')
            || line.starts_with(';')
            || line.starts_with('[')
        {
            continue;
        }
        let (k, v) = line
            .split_once('=')
            .or_else(|| line.split_once(':'))
            .ok_or_else(|| {
                UsageError(format!(
                    "--cloud-config {}: line {} is not KEY=VALUE",
                    path.display(),
                    i + 1
                ))
            })?;
        let v = v.trim().trim_matches('"');
        pairs.push((k.trim().to_string(), v.to_string()));
    }
    Ok(pairs)
}

/// `EC2Bucket<Action>`'s value, `<requests per second>,<burst>` (`2.5,100`), both
/// positive.
fn parse_ec2_bucket(value: &str) -> Option<(f64, u32)> {
    let (rate, burst) = value.split_once(',')?;
    let rate: f64 = rate.trim().parse().ok()?;
    let burst: u32 = burst.trim().parse().ok()?;
    (rate.is_finite() && rate > 0.0 && burst > 0).then_some((rate, burst))
}

/// The variables the Hetzner provider reads, from the environment or the file.
const HCLOUD_KEYS: &[&str] = &[
    crate::cloud::hcloud::ENV_TOKEN,
    crate::cloud::hcloud::ENV_TOKEN_FILE,
    crate::cloud::hcloud::ENV_NETWORK,
    crate::cloud::hcloud::ENV_ENDPOINT,
    crate::cloud::hcloud::ENV_SERVER_CACHE_MAX_AGE,
    crate::cloud::hcloud::ENV_NETWORK_ROUTE_LIMIT,
];

/// The Hetzner CCM's other variables (hcloud-cloud-controller-manager
/// `internal/config/config.go`): accepted in the file, with a warning, so that the
/// CCM's environment can be written to it as it is.
const HCLOUD_OTHER_KEYS: &[&str] = &[
    "HCLOUD_DEBUG",
    "HCLOUD_INSTANCES_ADDRESS_FAMILY",
    "HCLOUD_NETWORK_DISABLE_ATTACHED_CHECK",
    "HCLOUD_NETWORK_ROUTES_ENABLED",
    "HCLOUD_LOAD_BALANCERS_ENABLED",
    "HCLOUD_LOAD_BALANCERS_LOCATION",
    "HCLOUD_LOAD_BALANCERS_NETWORK_ZONE",
    "HCLOUD_LOAD_BALANCERS_DISABLE_PRIVATE_INGRESS",
    "HCLOUD_LOAD_BALANCERS_USE_PRIVATE_IP",
    "HCLOUD_LOAD_BALANCERS_DISABLE_IPV6",
    "HCLOUD_LOAD_BALANCERS_PRIVATE_SUBNET_IP_RANGE",
    "HCLOUD_LOAD_BALANCERS_ALGORITHM_TYPE",
    "HCLOUD_LOAD_BALANCERS_TYPE",
    "HCLOUD_LOAD_BALANCERS_HEALTH_CHECK_INTERVAL",
    "HCLOUD_LOAD_BALANCERS_HEALTH_CHECK_RETRIES",
    "HCLOUD_LOAD_BALANCERS_HEALTH_CHECK_TIMEOUT",
    "HCLOUD_LOAD_BALANCERS_DISABLE_PUBLIC_NETWORK",
    "HCLOUD_METRICS_ENABLED",
    "HCLOUD_METRICS_ADDRESS",
    "HCLOUD_POLL_INTERVAL_SECONDS",
    "ROBOT_ENABLED",
    "ROBOT_USER",
    "ROBOT_PASSWORD",
    "ROBOT_CACHE_TIMEOUT",
    "ROBOT_RATE_LIMIT_WAIT_TIME",
    "ROBOT_FORWARD_INTERNAL_IPS",
];

/// The `[Global]` names of the AWS cloud config this provider reads.
const AWS_KEYS: &[&str] = &[
    "RouteTableID",
    "Region",
    "Zone",
    "KubernetesClusterID",
    "KubernetesClusterTag",
    "RoleARN",
    "RouteTableRouteLimit",
    "DisableSourceDestCheck",
    "EC2BucketDescribeRouteTables",
    "EC2BucketDescribeInstances",
    "EC2BucketCreateRoute",
    "EC2BucketReplaceRoute",
    "EC2BucketDeleteRoute",
    "EC2BucketModifyInstanceAttribute",
    "EC2BucketModifyNetworkInterfaceAttribute",
    "EC2BucketDescribeSubnets",
    "EC2BucketDescribeManagedPrefixLists",
];

/// `[Global]` names of cloud-provider-aws (v1.37) that concern its other controllers:
/// accepted, so that a CCM's file works, with a warning.
const AWS_OTHER_KEYS: &[&str] = &[
    "VPC",
    "SubnetID",
    "SourceARN",
    "DisableSecurityGroupIngress",
    "ElbSecurityGroup",
    "NodeIPFamilies",
    "ClusterServiceLoadBalancerHealthProbeMode",
    "ClusterServiceSharedLoadBalancerHealthProbePort",
    "ClusterServiceSharedLoadBalancerHealthProbePath",
    "SupportedTopologyInstanceTypePattern",
    "NLBSecurityGroupMode",
    "TagNameKubernetesClusterPrefix",
    "TagNameKubernetesClusterLegacy",
];

/// The names of a `[ServiceOverride "n"]` section.
const AWS_OVERRIDE_KEYS: &[&str] = &[
    "Service",
    "Region",
    "URL",
    "SigningRegion",
    "SigningMethod",
    "SigningName",
];

/// Checks the keys of a `KEY=VALUE` file against what `provider` reads: a key of the
/// peer's other controllers gives a line saying so; an unknown key gives a warning
/// naming the closest known one (the peer would not stop for it either, but a typo
/// would otherwise be lost in silence).
pub(crate) fn check_cloud_config_keys(
    provider: &str,
    path: &Path,
    pairs: &[(String, String)],
) -> Vec<String> {
    let (applies, others): (&[&str], &[&str]) = match provider {
        "hcloud" => (HCLOUD_KEYS, HCLOUD_OTHER_KEYS),
        "exec" => (crate::cloud::exec::config::KEYS, &[]),
        _ => (&[], &[]),
    };
    let is = |list: &[&str], key: &str| list.iter().any(|k| k.eq_ignore_ascii_case(key));
    let mut warnings = Vec::new();
    for (key, _) in pairs {
        if is(applies, key) {
            continue;
        }
        if is(others, key) {
            warnings.push(format!(
                "--cloud-config {}: {key} does not concern routes; ignored",
                path.display()
            ));
            continue;
        }
        let known = applies.iter().chain(others).copied();
        let hint = match super::flags::closest(key, known) {
            Some(c) => format!("did you mean {c}?"),
            None => format!("known keys: {}", applies.join(", ")),
        };
        warnings.push(format!(
            "--cloud-config {}: unknown key {key:?} for --cloud-provider={provider}; ignored ({hint})",
            path.display()
        ));
    }
    warnings
}

// --- building the providers that need more than their settings -----------------------

/// The exec provider, after the plugin's `describe`: a plugin that cannot start or
/// speaks wrongly is a setting to fix; one that failed this once (a timeout, a crash)
/// is an outage that `run` waits out.
pub fn exec_provider(
    config: &crate::cloud::exec::Config,
) -> Result<crate::cloud::exec::ExecRoutes, ProviderError> {
    use crate::cloud::exec::ExecRoutes;
    let provider = ExecRoutes::connect(config.clone()).map_err(|e| match e.kind {
        crate::cloud::CloudErrorKind::Invalid => ProviderError::Config(UsageError(e.message)),
        _ => ProviderError::Outage(e.message),
    })?;
    let d = provider.description();
    let budget = match &d.budget {
        Some(b) => format!(
            "{} requests a second, a burst of {}, {} changes at once",
            b.requests_per_second, b.burst, b.mutations_at_once
        ),
        None => "none declared".to_string(),
    };
    let tables: Vec<String> = d
        .tables
        .iter()
        .map(|(name, limit)| match limit {
            Some(n) => format!("{name} ({n} routes)"),
            None => name.clone(),
        })
        .collect();
    log::info!(
        "--cloud-provider=exec: plugin {} ({}describe; budget {budget}; batch size {} ({}); \
         tables {})",
        provider.plugin_name(),
        if d.implemented { "" } else { "no " },
        d.batch_size,
        if d.batch_size > 1 {
            "changes go out in apply calls"
        } else {
            "one create or delete per call"
        },
        if tables.is_empty() {
            "not named".to_string()
        } else {
            tables.join(", ")
        }
    );
    Ok(provider)
}

/// How long each call of `--cloud-provider=fake` takes (a Go duration; default 0).
pub const FAKE_LATENCY_VAR: &str = "ROUTE_CONTROLLER_FAKE_LATENCY";
/// A file to which `--cloud-provider=fake` appends one JSON line per route it creates,
/// with the wall-clock time: how benchmarks measure node-to-route latency from
/// outside the process.
pub const FAKE_JOURNAL_VAR: &str = "ROUTE_CONTROLLER_FAKE_JOURNAL";

/// The in-memory cloud, with the latency and journal the environment asks for.
fn fake_provider(
    latency: Option<Duration>,
    journal: Option<&Path>,
) -> Result<Arc<dyn Routes>, UsageError> {
    let cloud = crate::cloud::fake::FakeCloud::new();
    if let Some(latency) = latency {
        cloud.set_latency(latency);
    }
    let Some(path) = journal else {
        return Ok(Arc::new(cloud));
    };
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| UsageError(format!("{FAKE_JOURNAL_VAR}: {}: {e}", path.display())))?;
    Ok(Arc::new(JournaledFake {
        cloud,
        journal: std::sync::Mutex::new(file),
    }))
}
struct JournaledFake {
    cloud: crate::cloud::fake::FakeCloud,
    journal: std::sync::Mutex<std::fs::File>,
}

impl Routes for JournaledFake {
    fn provider_name(&self) -> &'static str {
        self.cloud.provider_name()
    }

    fn list_routes(
        &self,
        cluster_name: &str,
        nodes: &crate::cloud::NodeDirectory,
    ) -> Result<Vec<crate::model::Route>, crate::cloud::CloudError> {
        self.cloud.list_routes(cluster_name, nodes)
    }

    fn create_route(
        &self,
        cluster_name: &str,
        name_hint: &str,
        route: &crate::model::Route,
        target: &crate::cloud::RouteTarget,
    ) -> Result<(), crate::cloud::CloudError> {
        self.cloud
            .create_route(cluster_name, name_hint, route, target)?;
        let at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let line = serde_json::json!({
            "node": route.target_node,
            "cidr": route.destination_cidr,
            "createdUnixNanos": at.as_nanos() as u64,
        });
        let mut file = self.journal.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = writeln!(file, "{line}") {
            log::warn!("{FAKE_JOURNAL_VAR}: cannot append to the journal: {e}");
        }
        Ok(())
    }

    fn delete_route(
        &self,
        cluster_name: &str,
        route: &crate::model::Route,
    ) -> Result<(), crate::cloud::CloudError> {
        self.cloud.delete_route(cluster_name, route)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards `EC2Bucket<Action>`'s syntax: `<per second>,<burst>`, both positive;
    /// anything else is refused rather than read as some other budget.
    #[test]
    fn an_ec2_bucket_is_a_rate_and_a_burst() {
        assert_eq!(parse_ec2_bucket("2.5,100"), Some((2.5, 100)));
        assert_eq!(parse_ec2_bucket(" 1 , 20 "), Some((1.0, 20)));
        for bad in [
            "", "5", "5/200", "0,10", "1,0", "-1,5", "NaN,5", "inf,5", "1,2,3", "a,b",
        ] {
            assert_eq!(parse_ec2_bucket(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn exec_without_a_command_is_a_setting_to_fix_and_its_keys_are_checked() {
        let e = exec_settings(None).unwrap_err();
        assert!(e.0.contains("Command=/path/to/plugin"), "{e}");
        let pairs = vec![("Comand".to_string(), "x".to_string())];
        let warnings = check_cloud_config_keys("exec", Path::new("p.conf"), &pairs);
        assert!(
            warnings[0].contains("did you mean Command?"),
            "{warnings:?}"
        );
        let missing = crate::cloud::exec::Config::new("/nonexistent/plugin");
        let Err(ProviderError::Config(e)) = exec_provider(&missing) else {
            panic!("a plugin that cannot start must be a configuration error");
        };
        assert!(
            e.0.contains("cannot start") && e.0.contains("Command="),
            "{e}"
        );
    }

    /// Guards the rule for a key of a KEY=VALUE file: the peer's other variables and
    /// unknown keys are warnings (never silence, never a refusal the peer would not
    /// make), the unknown ones naming the closest known key.
    #[test]
    fn cloud_config_keys_that_nobody_reads_are_warnings_naming_the_closest() {
        let path = Path::new("cloud.conf");
        let pairs = |k: &str| vec![(k.to_string(), "x".to_string())];
        let w = check_cloud_config_keys("hcloud", path, &pairs("HCLOUD_NETWROK"));
        assert!(w[0].contains("did you mean HCLOUD_NETWORK?"), "{w:?}");
        let w = check_cloud_config_keys("hcloud", path, &pairs("HCLOUD_LOAD_BALANCERS_ENABLED"));
        assert!(
            w[0].contains("HCLOUD_LOAD_BALANCERS_ENABLED does not concern routes"),
            "{w:?}"
        );
        assert!(check_cloud_config_keys("hcloud", path, &pairs("hcloud_network")).is_empty());
    }

    /// The AWS cloud config as cloud-provider-aws reads it (gcfg, names without
    /// case): the keys that choose the region, the tables and the identity apply; the
    /// others are accepted with a line each; unknown names are warnings.
    #[test]
    fn the_aws_cloud_config_is_read_as_cloud_provider_aws_reads_it() {
        let (c, w) = aws_config(
            "[global]\nregion = eu-central-1\nkubernetesclusterid = prod\nRoleARN = \
             arn:aws:iam::1:role/r\nRouteTableID = rtb-1\nRouteTableID = rtb-2,rtb-3\n\
             VPC = vpc-1\nRouteTableId2 = x\n[Other]\nx = 1\n",
        )
        .unwrap();
        assert_eq!(c.region.as_deref(), Some("eu-central-1"));
        assert_eq!(c.cluster_id.as_deref(), Some("prod"));
        assert_eq!(c.role_arn.as_deref(), Some("arn:aws:iam::1:role/r"));
        assert_eq!(c.route_table_ids, ["rtb-1", "rtb-2", "rtb-3"]);
        assert_eq!(w.len(), 3, "{w:?}");
        assert!(w[0].contains("VPC does not concern routes"), "{w:?}");
        assert!(w[1].contains("did you mean RouteTableID?"), "{w:?}");
        assert!(w[2].contains("[other] is not read"), "{w:?}");
        // The legacy tag is the cluster ID too, and both given must agree (tags.go).
        let (c, _) = aws_config("[Global]\nKubernetesClusterTag = old\n").unwrap();
        assert_eq!(c.cluster_id.as_deref(), Some("old"));
        let e = aws_config("[Global]\nKubernetesClusterTag = a\nKubernetesClusterID = b\n")
            .unwrap_err();
        assert!(e.contains("disagree"), "{e}");
        // gcfg: '_' is no character of a name (fatal there too).
        assert!(aws_config("[Global]\nKubernetes_Cluster_ID = a\n").is_err());
        // An empty file is every default.
        let (c, w) = aws_config("").unwrap();
        assert_eq!((c.region, c.cluster_id, w.len()), (None, None, 0));
    }

    /// cloud-provider-aws's own cases (aws_test.go TestNewAWSCloud, TestAzToRegion,
    /// TestGetRegionFromMetadata): a Zone wins over Region, and gives its region.
    #[test]
    fn a_zone_gives_the_region_as_cloud_provider_aws_reads_it() {
        let (c, _) = aws_config("[global]\nzone = eu-west-1a\nregion = us-east-1\n").unwrap();
        assert_eq!(c.region.as_deref(), Some("eu-west-1"));
        for (zone, region) in [
            ("us-west-2a", "us-west-2"),
            ("us-west-2-lax-1a", "us-west-2"),
            ("ap-northeast-2a", "ap-northeast-2"),
            ("us-gov-east-1a", "us-gov-east-1"),
            ("us-iso-east-1a", "us-iso-east-1"),
            ("us-isob-east-1a", "us-isob-east-1"),
        ] {
            assert_eq!(zone_region(zone).as_deref(), Ok(region), "{zone}");
        }
        assert!(zone_region("some-fake-zone").is_err());
        assert!(zone_region("").is_err());
    }

    /// cloud-provider-aws's TestValidateOverridesActiveConfig: an override names its
    /// service, region, URL and signing region, once per service and region; an EC2
    /// override sets the endpoint of its region.
    #[test]
    fn service_overrides_are_checked_as_cloud_provider_aws_checks_them() {
        let full = |n: &str, service: &str, region: &str| {
            format!(
                "[ServiceOverride \"{n}\"]\nService = {service}\nRegion = {region}\nURL = \
                 https://{service}.foo.bar\nSigningRegion = {region}\nSigningMethod = v4\n"
            )
        };
        let ok = [
            "[global]\n".to_string(),
            "[Global]\n".to_string() + &full("1", "\"s3      \"", "sregion"),
            format!(
                "{}{}",
                full("1", "s3", "sregion1"),
                full("2", "ec2", "sregion2")
            ),
            format!(
                "{}{}",
                full("1", "s3", "region1"),
                full("2", "s3", "region2")
            ),
        ];
        for text in &ok {
            assert!(aws_config(text).is_ok(), "{text}");
        }
        let missing = [
            "[ServiceOverride \"1\"]\nRegion = r\nURL = https://x\nSigningRegion = r\n",
            "[ServiceOverride \"1\"]\nService = s3\nURL = https://x\nSigningRegion = r\n",
            "[ServiceOverride \"1\"]\nService = s3\nRegion = r\nSigningRegion = r\n",
            "[ServiceOverride \"1\"]\nService = s3\nRegion = r\nURL = https://x\n",
        ];
        for text in missing {
            assert!(
                aws_config(text).unwrap_err().contains("is missing"),
                "{text}"
            );
        }
        let twice = format!(
            "{}{}",
            full("1", "s3", "sregion1"),
            full("2", "s3", "sregion1")
        );
        assert!(aws_config(&twice).unwrap_err().contains("second override"));
        let (c, _) = aws_config(&full("1", "EC2", "eu-west-1")).unwrap();
        assert_eq!(
            c.ec2_overrides,
            [("eu-west-1".to_string(), "https://EC2.foo.bar".to_string())]
        );
        let (c, _) = aws_config(&full("1", "ec2imds", "any")).unwrap();
        assert_eq!(c.imds_endpoint.as_deref(), Some("https://ec2imds.foo.bar"));
    }

    #[test]
    fn cloud_config_reads_env_files_and_ini() {
        let dir = std::env::temp_dir().join(format!("rc-cloud-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("cloud.conf");
        std::fs::write(
            &path,
            "[Global]\n# comment\nRouteTableID = rtb-123\nHCLOUD_NETWORK=\"k8s\"\n",
        )
        .unwrap();
        let pairs = read_cloud_config(&path).unwrap();
        assert_eq!(
            pairs,
            vec![
                ("RouteTableID".into(), "rtb-123".into()),
                ("HCLOUD_NETWORK".into(), "k8s".into())
            ]
        );
        std::fs::write(&path, "garbage line\n").unwrap();
        assert!(
            read_cloud_config(&path)
                .unwrap_err()
                .0
                .contains("line 1 is not KEY=VALUE")
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn fake_provider_sleeps_the_given_latency_and_journals_created_routes() {
        use crate::cloud::{NodeDirectory, RouteTarget};
        let dir = std::env::temp_dir().join(format!("rc-fake-journal-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let journal = dir.join("journal.jsonl");
        let latency = fake_latency(Some("30ms")).unwrap();
        let cloud = fake_provider(latency, Some(&journal)).unwrap();
        let route = crate::model::Route {
            target_node: "n1".into(),
            destination_cidr: "10.244.1.0/24".into(),
            ..crate::model::Route::default()
        };
        let target = RouteTarget {
            node_name: "n1".into(),
            provider_id: None,
            addresses: vec![],
        };
        let started = std::time::Instant::now();
        cloud.create_route("c", "uid", &route, &target).unwrap();
        assert!(started.elapsed() >= Duration::from_millis(30));
        assert_eq!(
            cloud
                .list_routes("c", &NodeDirectory::default())
                .unwrap()
                .len(),
            1
        );
        let text = std::fs::read_to_string(&journal).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 1, "{text}");
        assert_eq!(lines[0]["node"], "n1");
        assert_eq!(lines[0]["cidr"], "10.244.1.0/24");
        assert!(lines[0]["createdUnixNanos"].as_u64().unwrap() > 1_600_000_000_000_000_000);
        let _ = std::fs::remove_dir_all(dir);

        let err = fake_latency(Some("fast")).unwrap_err().0;
        assert!(err.starts_with(FAKE_LATENCY_VAR), "{err}");
    }
}
