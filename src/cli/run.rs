//! `route-controller run`: the flags of the cloud-controller-manager that concern
//! routes, their validation, and the process around [`crate::run::Builder`].

use std::io::Write as _;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use argh::FromArgs;

use super::UsageError;
use crate::cloud::Routes;
use crate::config::parse_cluster_cidrs;
use crate::controller::{Config, Mode};
use crate::kube::{ClientOptions, LeaseConfig, LoadOptions};
use crate::run::Serving;
use crate::serve::{AccessConfig, CertSource};

/// The feature gate of KEP-5237.
pub const WATCH_GATE: &str = "CloudControllerManagerWatchBasedRoutesReconciliation";

/// Feature gates this program knows, with their defaults (upstream's: the watch-based
/// gate is alpha and off, so poll mode is the default, as in the CCM).
const KNOWN_GATES: &[(&str, bool)] = &[(WATCH_GATE, false)];

#[derive(FromArgs, Debug)]
/// Run the route controller: watch the cluster's nodes and keep the cloud's route table
/// in step. Flags are spelled as in the cloud-controller-manager; `--flag=value` and
/// `--flag value` both work, booleans also as `--flag` and `--flag=false`.
#[argh(subcommand, name = "run")]
pub struct RunArgs {
    /// path to a kubeconfig (default: $KUBECONFIG, then ~/.kube/config, then the
    /// in-cluster service account)
    #[argh(option)]
    pub kubeconfig: Option<String>,
    /// the API server URL, overriding the kubeconfig's (default: none)
    #[argh(option)]
    pub master: Option<String>,
    /// the cloud: hcloud, aws or fake (required)
    #[argh(option)]
    pub cloud_provider: Option<String>,
    /// provider settings file: for hcloud, HCLOUD_*=value lines (instead of environment
    /// variables); for aws, the AWS cloud config's [Global] RouteTableID (default: none)
    #[argh(option)]
    pub cloud_config: Option<String>,
    /// the cluster name: the AWS route table tag, passed to every cloud call (default:
    /// kubernetes)
    #[argh(option, default = "String::from(\"kubernetes\")")]
    pub cluster_name: String,
    /// the pod network: one CIDR, or an IPv4 and an IPv6 CIDR separated by a comma;
    /// routes outside it are never deleted (required)
    #[argh(option)]
    pub cluster_cidr: Option<String>,
    /// whether to manage routes at all; with false the process only serves health and
    /// metrics (default: true)
    #[argh(option, default = "true")]
    pub configure_cloud_routes: bool,
    /// poll period when the watch-based gate is off (default: 10s)
    #[argh(option, default = "String::from(\"10s\")")]
    pub route_reconciliation_period: String,
    /// alias of --route-reconciliation-period (the name KEP-5237 uses)
    #[argh(option)]
    pub route_reconcile_period: Option<String>,
    /// the full resync runs every [min, 2 x min), drawn once at start (default: 12h)
    #[argh(option, default = "String::from(\"12h\")")]
    pub min_resync_period: String,
    /// feature gates, NAME=true|false,... ; known:
    /// CloudControllerManagerWatchBasedRoutesReconciliation (watch-based reconciliation;
    /// default: false, as upstream, which means polling every
    /// --route-reconciliation-period)
    #[argh(option)]
    pub feature_gates: Option<String>,
    /// write only while holding the leader lease (default: true)
    #[argh(option, default = "true")]
    pub leader_elect: bool,
    /// how long a lease is valid after its last renewal (default: 15s)
    #[argh(option, default = "String::from(\"15s\")")]
    pub leader_elect_lease_duration: String,
    /// how long the leader tries to renew before giving up (default: 10s)
    #[argh(option, default = "String::from(\"10s\")")]
    pub leader_elect_renew_deadline: String,
    /// time between leader election attempts (default: 2s)
    #[argh(option, default = "String::from(\"2s\")")]
    pub leader_elect_retry_period: String,
    /// the lock type; only leases is supported (default: leases)
    #[argh(option, default = "String::from(\"leases\")")]
    pub leader_elect_resource_lock: String,
    /// the Lease's name (default: route-controller; the CCM uses
    /// cloud-controller-manager)
    #[argh(option, default = "String::from(\"route-controller\")")]
    pub leader_elect_resource_name: String,
    /// the Lease's namespace (default: kube-system)
    #[argh(option, default = "String::from(\"kube-system\")")]
    pub leader_elect_resource_namespace: String,
    /// writes per second to the Kubernetes API (default: 20)
    #[argh(option, default = "20.0")]
    pub kube_api_qps: f64,
    /// writes to the Kubernetes API allowed in a burst (default: 30)
    #[argh(option, default = "30")]
    pub kube_api_burst: u32,
    /// cloud route operations in flight at once (default: 16; upstream uses 200)
    #[argh(option, default = "16")]
    pub concurrent_route_operations: usize,
    /// the HTTPS port of /metrics (authorized), /healthz, /readyz and /livez, as the
    /// CCM's; 0 turns it off (default: 10258)
    #[argh(option, default = "10258")]
    pub secure_port: u16,
    /// the address the secure port listens on (default: 0.0.0.0)
    #[argh(option, default = "String::from(\"0.0.0.0\")")]
    pub bind_address: String,
    /// the serving certificate (PEM, leaf first) of the secure port; without it a
    /// self-signed one is made at start (default: none)
    #[argh(option)]
    pub tls_cert_file: Option<String>,
    /// the key of --tls-cert-file (default: none)
    #[argh(option)]
    pub tls_private_key_file: Option<String>,
    /// where the self-signed certificate is kept and reused; ignored with
    /// --tls-cert-file (default: none, in memory)
    #[argh(option)]
    pub cert_dir: Option<String>,
    /// kubeconfig of the API server that checks tokens (TokenReview) on the secure
    /// port (default: the --kubeconfig connection)
    #[argh(option)]
    pub authentication_kubeconfig: Option<String>,
    /// kubeconfig of the API server that authorizes requests (SubjectAccessReview)
    /// on the secure port (default: the --kubeconfig connection)
    #[argh(option)]
    pub authorization_kubeconfig: Option<String>,
    /// paths served on the secure port without a token, comma-separated; a trailing
    /// * is a prefix (default: /healthz,/readyz,/livez)
    #[argh(option, default = "String::from(\"/healthz,/readyz,/livez\")")]
    pub authorization_always_allow_paths: String,
    /// plain HTTP, without authentication, for local use: where /metrics, /healthz
    /// and /readyz are also served; "" or 0 is off (default: off)
    #[argh(option, default = "String::new()")]
    pub metrics_bind_address: String,
    /// watch mode lists the cloud's routes again when its view is older than this,
    /// at the next pass with nothing in flight (default: 5m)
    #[argh(option, default = "String::from(\"5m\")")]
    pub route_list_max_age: String,
    /// log format: text or json (default: text); RUST_LOG sets levels
    #[argh(option, default = "String::from(\"text\")")]
    pub log_format: String,
    /// klog-style verbosity, accepted for compatibility: 0-3 info, 4-5 debug, 6+ trace
    /// (default: 2)
    #[argh(option, default = "2")]
    pub v: u8,
}

/// Everything `run` needs, validated.
#[derive(Debug)]
pub struct RunSettings {
    pub controller: Config,
    pub load: LoadOptions,
    pub client: ClientOptions,
    pub lease: Option<LeaseConfig>,
    pub provider: String,
    pub cloud_config: Option<PathBuf>,
    pub serving: Serving,
    pub configure_cloud_routes: bool,
}

fn duration(flag: &str, value: &str) -> Result<Duration, UsageError> {
    crate::duration::parse(value).map_err(|e| UsageError(format!("{flag}: {e}")))
}

fn positive(flag: &str, value: &str) -> Result<Duration, UsageError> {
    let d = duration(flag, value)?;
    if d.is_zero() {
        return Err(UsageError(format!(
            "{flag}: must be more than 0 (e.g. {flag}=10s)"
        )));
    }
    Ok(d)
}

/// Parses `--feature-gates`: `NAME=true|false` pairs separated by commas.
pub fn parse_feature_gates(value: &str) -> Result<Vec<(String, bool)>, UsageError> {
    let known = || {
        KNOWN_GATES
            .iter()
            .map(|(n, _)| *n)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut gates = Vec::new();
    for part in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, setting) = part.split_once('=').ok_or_else(|| {
            UsageError(format!(
                "--feature-gates: {part:?} needs a value, as in {WATCH_GATE}=true"
            ))
        })?;
        if !KNOWN_GATES.iter().any(|(n, _)| *n == name) {
            return Err(UsageError(format!(
                "--feature-gates: unknown gate {name:?}; known gates: {}",
                known()
            )));
        }
        let on = match setting.to_ascii_lowercase().as_str() {
            "true" => true,
            "false" => false,
            _ => {
                return Err(UsageError(format!(
                    "--feature-gates: {name} must be true or false, not {setting:?}"
                )));
            }
        };
        gates.push((name.to_string(), on));
    }
    Ok(gates)
}

/// Parses `--metrics-bind-address`: `host:port`, `:port`, or "" / "0" for off.
pub fn parse_bind_address(value: &str) -> Result<Option<SocketAddr>, UsageError> {
    let value = value.trim();
    if value.is_empty() || value == "0" {
        return Ok(None);
    }
    let full = if value.starts_with(':') {
        format!("0.0.0.0{value}")
    } else {
        value.to_string()
    };
    let bad = || {
        UsageError(format!(
            "--metrics-bind-address: {value:?} is not HOST:PORT (e.g. 0.0.0.0:8080, :8080)"
        ))
    };
    let mut addrs = full.to_socket_addrs().map_err(|_| bad())?;
    addrs.next().map(Some).ok_or_else(bad)
}

impl RunArgs {
    /// Validates the flags; every error names its flag and the fix.
    pub fn settings(&self) -> Result<RunSettings, UsageError> {
        let provider = self.cloud_provider.clone().ok_or_else(|| {
            UsageError("--cloud-provider is required: one of hcloud, aws, fake".into())
        })?;
        if !["hcloud", "aws", "fake"].contains(&provider.as_str()) {
            return Err(UsageError(format!(
                "--cloud-provider: {provider:?} is not supported; use hcloud, aws or fake"
            )));
        }
        let cidr = self.cluster_cidr.as_deref().unwrap_or("");
        let cluster_cidrs = parse_cluster_cidrs(cidr).map_err(UsageError)?;
        if self.cluster_name.trim().is_empty() {
            return Err(UsageError(
                "--cluster-name must not be empty (default: kubernetes)".into(),
            ));
        }
        let mut watch = KNOWN_GATES
            .iter()
            .find(|(n, _)| *n == WATCH_GATE)
            .is_some_and(|(_, on)| *on);
        if let Some(gates) = &self.feature_gates {
            for (name, on) in parse_feature_gates(gates)? {
                if name == WATCH_GATE {
                    watch = on;
                }
            }
        }
        let period = match &self.route_reconcile_period {
            Some(alias) => positive("--route-reconcile-period", alias)?,
            None => positive(
                "--route-reconciliation-period",
                &self.route_reconciliation_period,
            )?,
        };
        let min_resync = positive("--min-resync-period", &self.min_resync_period)?;
        let list_max_age = positive("--route-list-max-age", &self.route_list_max_age)?;
        if self.concurrent_route_operations == 0 || self.concurrent_route_operations > 1000 {
            return Err(UsageError(
                "--concurrent-route-operations: give between 1 and 1000".into(),
            ));
        }
        if !(self.kube_api_qps > 0.0 && self.kube_api_qps.is_finite()) {
            return Err(UsageError(
                "--kube-api-qps: must be more than 0 (default 20)".into(),
            ));
        }
        if self.kube_api_burst == 0 {
            return Err(UsageError(
                "--kube-api-burst: must be at least 1 (default 30)".into(),
            ));
        }
        if self.log_format != "text" && self.log_format != "json" {
            return Err(UsageError(format!(
                "--log-format: {:?} is not a format; use text or json",
                self.log_format
            )));
        }
        let lease = if self.leader_elect {
            if self.leader_elect_resource_lock != "leases" {
                return Err(UsageError(format!(
                    "--leader-elect-resource-lock: {:?} is not supported; only leases (the default) is",
                    self.leader_elect_resource_lock
                )));
            }
            let mut lease = LeaseConfig::new(crate::kube::default_identity());
            lease.name = self.leader_elect_resource_name.clone();
            lease.namespace = self.leader_elect_resource_namespace.clone();
            lease.lease_duration = positive(
                "--leader-elect-lease-duration",
                &self.leader_elect_lease_duration,
            )?;
            lease.renew_deadline = positive(
                "--leader-elect-renew-deadline",
                &self.leader_elect_renew_deadline,
            )?;
            lease.retry_period = positive(
                "--leader-elect-retry-period",
                &self.leader_elect_retry_period,
            )?;
            lease.validate().map_err(UsageError)?;
            Some(lease)
        } else {
            None
        };
        let mut controller = Config::new(cluster_cidrs);
        controller.cluster_name = self.cluster_name.clone();
        controller.mode = if watch { Mode::Watch } else { Mode::Poll };
        controller.route_reconciliation_period = period;
        controller.min_resync_period = min_resync;
        controller.route_view_max_age = list_max_age;
        controller.max_in_flight = self.concurrent_route_operations;
        controller.leader_election = lease.is_some();
        let client = ClientOptions {
            qps: self.kube_api_qps,
            burst: self.kube_api_burst,
            ..ClientOptions::default()
        };
        Ok(RunSettings {
            controller,
            load: LoadOptions {
                kubeconfig: self.kubeconfig.as_ref().map(PathBuf::from),
                master: self.master.clone(),
                context: None,
            },
            client,
            lease,
            provider,
            cloud_config: self.cloud_config.as_ref().map(PathBuf::from),
            serving: self.serving()?,
            configure_cloud_routes: self.configure_cloud_routes,
        })
    }

    /// The serving flags: the secure port's address, certificate and authorization,
    /// and the opt-in plain port.
    fn serving(&self) -> Result<Serving, UsageError> {
        let secure_address = match self.secure_port {
            0 => None,
            port => {
                let host = self.bind_address.trim();
                let ip = host.parse::<std::net::IpAddr>().map_err(|_| {
                    UsageError(format!(
                        "--bind-address: {host:?} is not an IP address (e.g. 0.0.0.0, ::, 127.0.0.1)"
                    ))
                })?;
                Some(SocketAddr::new(ip, port))
            }
        };
        let cert = match (&self.tls_cert_file, &self.tls_private_key_file) {
            (Some(cert), Some(key)) => CertSource::Files {
                cert: PathBuf::from(cert),
                key: PathBuf::from(key),
            },
            (None, None) => CertSource::SelfSigned {
                cert_dir: self.cert_dir.as_ref().map(PathBuf::from),
                hosts: Vec::new(),
            },
            _ => {
                return Err(UsageError(
                    "--tls-cert-file and --tls-private-key-file go together: give both, or neither for a self-signed certificate".into(),
                ));
            }
        };
        let mut access = AccessConfig::new();
        access.always_allow_paths = self
            .authorization_always_allow_paths
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(String::from)
            .collect();
        if let Some(bad) = access
            .always_allow_paths
            .iter()
            .find(|p| !p.starts_with('/'))
        {
            return Err(UsageError(format!(
                "--authorization-always-allow-paths: {bad:?} is not a path (it must start with /)"
            )));
        }
        Ok(Serving {
            secure_address,
            cert,
            authentication_kubeconfig: self.authentication_kubeconfig.as_ref().map(PathBuf::from),
            authorization_kubeconfig: self.authorization_kubeconfig.as_ref().map(PathBuf::from),
            access,
            plain_address: parse_bind_address(&self.metrics_bind_address)?,
        })
    }

    /// The default log level from `--v`.
    pub fn log_level(&self) -> log::LevelFilter {
        match self.v {
            0..=3 => log::LevelFilter::Info,
            4..=5 => log::LevelFilter::Debug,
            _ => log::LevelFilter::Trace,
        }
    }
}

/// Reads `--cloud-config`: `KEY=VALUE` or `KEY: VALUE` lines (`[Section]` headers and
/// `#`/`;` comments are skipped), as both an env file and the AWS INI use them.
pub fn read_cloud_config(path: &PathBuf) -> Result<Vec<(String, String)>, UsageError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        UsageError(format!(
            "--cloud-config {}: cannot read: {e}",
            path.display()
        ))
    })?;
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

/// Builds the cloud provider named by `--cloud-provider`, recording its HTTP requests
/// in `metrics` if given (the registry the metrics server shows). Errors name the
/// setting to fix; they are configuration errors (exit 2), an outage included.
pub fn provider(
    name: &str,
    cloud_config: Option<&PathBuf>,
    cluster_cidrs: &[crate::model::Cidr],
    metrics: Option<Arc<crate::metrics::Metrics>>,
) -> Result<Arc<dyn Routes>, UsageError> {
    connect_provider(name, cloud_config, cluster_cidrs, metrics).map_err(|e| match e {
        ProviderError::Config(e) => e,
        ProviderError::Outage(message) => UsageError(message),
    })
}

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

/// As [`provider`], telling an outage of the cloud's API apart from a wrong setting,
/// so that `run` waits for the cloud instead of exiting.
pub fn connect_provider(
    name: &str,
    cloud_config: Option<&PathBuf>,
    cluster_cidrs: &[crate::model::Cidr],
    metrics: Option<Arc<crate::metrics::Metrics>>,
) -> Result<Arc<dyn Routes>, ProviderError> {
    let file = match cloud_config {
        Some(path) => read_cloud_config(path)?,
        None => Vec::new(),
    };
    let from_file = |key: &str| {
        file.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v.clone())
    };
    match name {
        "fake" => {
            log::warn!(
                "--cloud-provider=fake: routes live in this process's memory only; for trying things out"
            );
            Ok(fake_provider(
                std::env::var(FAKE_LATENCY_VAR).ok().as_deref(),
                std::env::var_os(FAKE_JOURNAL_VAR).map(PathBuf::from),
            )?)
        }
        "hcloud" => {
            use crate::cloud::hcloud::{Config as HcloudConfig, HcloudRoutes};
            let mut config =
                HcloudConfig::from_env(|k| from_file(k).or_else(|| std::env::var(k).ok()))
                    .map_err(|e| UsageError(e.to_string()))?;
            config.metrics = metrics;
            let provider = HcloudRoutes::connect(config).map_err(|e| match e.outage {
                true => ProviderError::Outage(e.to_string()),
                false => ProviderError::Config(UsageError(e.to_string())),
            })?;
            for problem in provider.cluster_cidr_problems(cluster_cidrs) {
                log::warn!("--cluster-cidr: {problem}");
            }
            Ok(Arc::new(provider))
        }
        "aws" => {
            use crate::cloud::aws::{AwsConfig, AwsProvider, credentials::AwsEnv};
            let config = AwsConfig {
                route_table_id: from_file("RouteTableID"),
                ..AwsConfig::default()
            };
            let provider = AwsProvider::new(config, &AwsEnv::from_process()).map_err(|e| {
                match e.kind {
                    crate::cloud::CloudErrorKind::Invalid => {
                        ProviderError::Config(UsageError(format!("aws: {}", e.message)))
                    }
                    // The instance metadata service or STS did not answer in time.
                    _ => ProviderError::Outage(format!("aws: {}", e.message)),
                }
            })?;
            Ok(Arc::new(provider))
        }
        other => Err(ProviderError::Config(UsageError(format!(
            "--cloud-provider: {other:?} is not supported; use hcloud, aws or fake"
        )))),
    }
}

/// How long each call of `--cloud-provider=fake` takes (a Go duration; default 0).
pub const FAKE_LATENCY_VAR: &str = "ROUTE_CONTROLLER_FAKE_LATENCY";
/// A file to which `--cloud-provider=fake` appends one JSON line per route it creates,
/// with the wall-clock time: how benchmarks measure node-to-route latency from
/// outside the process.
pub const FAKE_JOURNAL_VAR: &str = "ROUTE_CONTROLLER_FAKE_JOURNAL";

/// The in-memory cloud, with the latency and journal the environment asks for.
fn fake_provider(
    latency: Option<&str>,
    journal: Option<PathBuf>,
) -> Result<Arc<dyn Routes>, UsageError> {
    let cloud = crate::cloud::fake::FakeCloud::new();
    if let Some(value) = latency {
        let latency = crate::duration::parse(value)
            .map_err(|e| UsageError(format!("{FAKE_LATENCY_VAR}: {e}")))?;
        cloud.set_latency(latency);
    }
    let Some(path) = journal else {
        return Ok(Arc::new(cloud));
    };
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| UsageError(format!("{FAKE_JOURNAL_VAR}: {}: {e}", path.display())))?;
    Ok(Arc::new(JournaledFake {
        cloud,
        journal: std::sync::Mutex::new(file),
    }))
}

/// The fake cloud, writing each route it creates to a journal.
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

    fn args(extra: &[&str]) -> RunArgs {
        let mut v = vec![
            "--cloud-provider",
            "fake",
            "--cluster-cidr",
            "10.244.0.0/16",
        ];
        v.extend_from_slice(extra);
        RunArgs::from_args(&["run"], &v).expect("flags parse")
    }

    #[test]
    fn defaults_are_the_ccm_defaults() {
        let s = args(&[]).settings().unwrap();
        assert_eq!(
            s.controller.mode,
            Mode::Poll,
            "the gate is off by default, as upstream"
        );
        assert_eq!(
            s.controller.route_reconciliation_period,
            Duration::from_secs(10)
        );
        assert_eq!(
            s.controller.min_resync_period,
            Duration::from_secs(12 * 3600)
        );
        assert_eq!(s.controller.cluster_name, "kubernetes");
        let lease = s.lease.expect("leader election on by default");
        assert_eq!(
            (lease.name.as_str(), lease.namespace.as_str()),
            ("route-controller", "kube-system")
        );
        assert_eq!(lease.lease_duration, Duration::from_secs(15));
        assert_eq!((s.client.qps, s.client.burst), (20.0, 30));
        assert_eq!(
            s.serving.secure_address,
            Some("0.0.0.0:10258".parse().unwrap()),
            "the CCM's secure port"
        );
        assert_eq!(s.serving.plain_address, None, "plain HTTP is opt-in");
        assert_eq!(
            s.serving.access.always_allow_paths,
            ["/healthz", "/readyz", "/livez"]
        );
        assert!(matches!(
            s.serving.cert,
            CertSource::SelfSigned { cert_dir: None, .. }
        ));
    }

    #[test]
    fn the_gate_on_means_watch_mode_and_the_kep_alias_sets_the_period() {
        let s = args(&[
            "--feature-gates",
            "CloudControllerManagerWatchBasedRoutesReconciliation=true",
            "--route-reconcile-period",
            "30s",
        ])
        .settings()
        .unwrap();
        assert_eq!(s.controller.mode, Mode::Watch);
        assert_eq!(
            s.controller.route_reconciliation_period,
            Duration::from_secs(30)
        );
    }

    #[test]
    fn every_invalid_setting_names_its_flag() {
        let cases: &[(&[&str], &str)] = &[
            (
                &["--feature-gates", "Bogus=true"],
                "unknown gate \"Bogus\"; known gates: CloudControllerManager",
            ),
            (
                &[
                    "--feature-gates",
                    "CloudControllerManagerWatchBasedRoutesReconciliation",
                ],
                "needs a value",
            ),
            (
                &[
                    "--feature-gates",
                    "CloudControllerManagerWatchBasedRoutesReconciliation=yes",
                ],
                "true or false",
            ),
            (
                &["--route-reconciliation-period", "10"],
                "--route-reconciliation-period",
            ),
            (&["--route-reconciliation-period", "0s"], "more than 0"),
            (&["--min-resync-period", "soon"], "--min-resync-period"),
            (
                &["--leader-elect-lease-duration", "5s"],
                "--leader-elect-lease-duration",
            ),
            (
                &["--leader-elect-resource-lock", "configmaps"],
                "only leases",
            ),
            (
                &["--concurrent-route-operations", "0"],
                "--concurrent-route-operations",
            ),
            (&["--kube-api-qps", "0"], "--kube-api-qps"),
            (
                &["--metrics-bind-address", "nonsense"],
                "--metrics-bind-address",
            ),
            (&["--log-format", "xml"], "--log-format"),
            (&["--bind-address", "localhost:1"], "--bind-address"),
            (
                &["--tls-cert-file", "/c.pem"],
                "--tls-private-key-file go together",
            ),
            (
                &["--authorization-always-allow-paths", "healthz"],
                "--authorization-always-allow-paths",
            ),
            (&["--cluster-name", " "], "--cluster-name"),
        ];
        for (extra, needle) in cases {
            let err = args(extra).settings().unwrap_err().0;
            assert!(err.contains(needle), "{extra:?}: {err}");
            assert!(!err.contains('\n'), "{err}");
        }
        let no_provider = RunArgs::from_args(&["run"], &["--cluster-cidr", "10.0.0.0/8"]).unwrap();
        assert!(
            no_provider
                .settings()
                .unwrap_err()
                .0
                .starts_with("--cloud-provider is required")
        );
        let no_cidr = RunArgs::from_args(&["run"], &["--cloud-provider", "fake"]).unwrap();
        assert!(
            no_cidr
                .settings()
                .unwrap_err()
                .0
                .starts_with("--cluster-cidr is required")
        );
        let bad_provider = RunArgs::from_args(
            &["run"],
            &["--cloud-provider", "gce", "--cluster-cidr", "10.0.0.0/8"],
        );
        assert!(
            bad_provider
                .unwrap()
                .settings()
                .unwrap_err()
                .0
                .contains("use hcloud, aws or fake")
        );
    }

    #[test]
    fn fake_provider_sleeps_the_given_latency_and_journals_created_routes() {
        use crate::cloud::{NodeDirectory, RouteTarget};
        let dir = std::env::temp_dir().join(format!("rc-fake-journal-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let journal = dir.join("journal.jsonl");
        let cloud = fake_provider(Some("30ms"), Some(journal.clone())).unwrap();
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

        let err = fake_provider(Some("fast"), None).err().unwrap().0;
        assert!(err.starts_with(FAKE_LATENCY_VAR), "{err}");
    }

    #[test]
    fn bind_addresses_in_every_spelling() {
        assert_eq!(
            parse_bind_address(":9090").unwrap(),
            Some("0.0.0.0:9090".parse().unwrap())
        );
        assert_eq!(
            parse_bind_address("127.0.0.1:0").unwrap(),
            Some("127.0.0.1:0".parse().unwrap())
        );
        assert_eq!(
            parse_bind_address("[::1]:8080").unwrap(),
            Some("[::1]:8080".parse().unwrap())
        );
        assert_eq!(parse_bind_address("").unwrap(), None);
        assert_eq!(parse_bind_address("0").unwrap(), None);
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
}
