//! `route-controller run`: the flags of the cloud-controller-manager that concern
//! routes, their validation, and the process around [`crate::run::Builder`].

use std::io::Write as _;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::flags::{Flag, Kind, Parsed};
use super::{
    CLOUD_CONFIG, CLOUD_PROVIDER, CLUSTER_CIDR, CLUSTER_NAME, DELETE_ROUTES_OF_UNSELECTED_NODES,
    KUBE_ENV, KUBECONFIG, MASTER, NODE_SELECTOR, SKIP_NODES_OF_OTHER_PROVIDERS, UsageError,
};
use crate::cloud::Routes;
use crate::config::{parse_cluster_cidrs, validate_lease_name, validate_namespace};
use crate::controller::{Config, Mode};
use crate::fence::Fence;
use crate::kube::{ClientOptions, LeaseConfig, LoadOptions};
use crate::run::Serving;
use crate::serve::{AccessConfig, CertSource};

/// The feature gate of KEP-5237.
pub const WATCH_GATE: &str = "CloudControllerManagerWatchBasedRoutesReconciliation";

/// The flags of `run` that apply: the cloud-controller-manager's that concern routes,
/// spelled and typed as there, and route-controller's own. The CCM's other flags are
/// in [`super::ccm::FLAGS`].
const FLAGS: &[Flag] = &[
    CLOUD_PROVIDER.required(),
    CLOUD_CONFIG,
    CLUSTER_NAME,
    CLUSTER_CIDR.required(),
    KUBECONFIG,
    MASTER,
    NODE_SELECTOR,
    SKIP_NODES_OF_OTHER_PROVIDERS,
    DELETE_ROUTES_OF_UNSELECTED_NODES,
    Flag::new(
        "configure-cloud-routes",
        Kind::Bool,
        "whether to manage routes at all; with false the process only serves health and metrics",
    )
    .default("true"),
    Flag::new(
        "route-reconciliation-period",
        Kind::Duration,
        "poll period when the watch-based gate is off; at least 1s",
    )
    .default("10s"),
    Flag::new(
        "route-reconcile-period",
        Kind::Duration,
        "the name KEP-5237 uses for --route-reconciliation-period; give one of the two",
    ),
    Flag::new(
        "min-resync-period",
        Kind::Duration,
        "the full resync runs every [min, 2 x min), drawn once at start; at least 1s",
    )
    .default("12h"),
    Flag::new(
        "feature-gates",
        Kind::Map,
        "feature gates, NAME=BOOL,... . CloudControllerManagerWatchBasedRoutesReconciliation \
         turns on watch-based reconciliation (default false, as upstream: polling every \
         --route-reconciliation-period); AllAlpha and AllBeta turn on every gate of that stage. \
         Every other gate the cloud-controller-manager knows is accepted and ignored with a \
         warning; an unknown gate is an error",
    ),
    Flag::new(
        "leader-elect",
        Kind::Bool,
        "write only while holding the leader lease",
    )
    .default("true"),
    Flag::new(
        "leader-elect-lease-duration",
        Kind::Duration,
        "how long a lease is valid after its last renewal",
    )
    .default("15s"),
    Flag::new(
        "leader-elect-renew-deadline",
        Kind::Duration,
        "how long the leader tries to renew before giving up; past it no cloud request \
         leaves the process (a request already sent ends within the cloud's request \
         timeout: 15 s on Hetzner, 20 s on AWS), and a new leader lists \
         the routes again this long plus that timeout after it took the lease",
    )
    .default("10s"),
    Flag::new(
        "leader-elect-retry-period",
        Kind::Duration,
        "time between leader election attempts",
    )
    .default("2s"),
    Flag::new(
        "leader-elect-resource-lock",
        Kind::String,
        "the lock type; only leases is supported",
    )
    .default("leases"),
    Flag::new(
        "leader-elect-resource-name",
        Kind::String,
        "the Lease's name (the CCM's default is cloud-controller-manager; a different one \
         lets both run side by side)",
    )
    .default("route-controller"),
    Flag::new(
        "leader-elect-resource-namespace",
        Kind::String,
        "the Lease's namespace",
    )
    .default("kube-system"),
    Flag::new(
        "kube-api-qps",
        Kind::Float,
        "writes per second to the Kubernetes API",
    )
    .default("20"),
    Flag::new(
        "kube-api-burst",
        Kind::Int,
        "writes to the Kubernetes API allowed in a burst",
    )
    .default("30"),
    Flag::new(
        "concurrent-route-operations",
        Kind::Int,
        "cap on cloud route operations in flight at once, 1 to 1000; default: as many as the \
         cloud's budget pays for at once (its buckets' bursts, changes it runs at once), at most \
         upstream's 200",
    ),
    Flag::new(
        "metrics-bind-address",
        Kind::String,
        "plain HTTP, without authentication, for local use: where /metrics, /healthz and \
         /readyz are also served (HOST:PORT or :PORT); \"\" or 0 is off",
    ),
    Flag::new(
        "route-list-max-age",
        Kind::Duration,
        "watch mode lists the cloud's routes again when its view is older than this, at \
         the next pass with nothing in flight",
    )
    .default("5m"),
    Flag::new(
        "watch-list",
        Kind::Bool,
        "start and relist the node watch with a streaming list (a watch with \
         sendInitialEvents=true, KEP-3157) where the API server allows it, so that no page of \
         nodes is held in memory; a server that refuses or ignores it gets paginated lists of \
         500 for the rest of the process. false: paginated lists only. \
         KUBE_FEATURE_WatchListClient=false turns it off too, as in client-go",
    )
    .default("true"),
    Flag::new(
        "logging-format",
        Kind::String,
        "log format: text or json; RUST_LOG sets levels",
    )
    .default("text"),
    Flag::new(
        "log-format",
        Kind::String,
        "route-controller's older name for --logging-format",
    ),
    Flag::new(
        "v",
        Kind::Int,
        "klog-style verbosity: 0-3 info, 4-5 debug, 6 and more trace",
    )
    .default("2")
    .short('v'),
];

/// `run`'s command line.
pub static SPEC: super::flags::Spec = super::flags::Spec {
    name: "run",
    about: "Run the route controller: watch the cluster's nodes and keep the cloud's route \
            table in step. Flags are spelled and parsed as in the cloud-controller-manager \
            (--flag=value or --flag value; booleans as --flag or --flag=false; a repeated flag's \
            last value wins), so a CCM's arguments work unchanged: the flags that concern \
            routes apply, every other CCM flag is accepted and ignored with a warning.",
    env: &[
        KUBE_ENV,
        (
            "HCLOUD_TOKEN, HCLOUD_TOKEN_FILE, HCLOUD_NETWORK, HCLOUD_ENDPOINT, \
             HCLOUD_SERVER_CACHE_MAX_AGE, HCLOUD_NETWORK_ROUTE_LIMIT",
            "--cloud-provider=hcloud: the API token (or a file holding it), the network's ID \
             or name (both required), the API URL, how long the server list is reused, the \
             routes the network may hold (default 100); --cloud-config may set them instead",
        ),
        (
            "GOOGLE_APPLICATION_CREDENTIALS, GCE_METADATA_HOST",
            "--cloud-provider=gce: a service-account key file (default: the metadata server's \
             token, unless gce.conf sets token-url), the metadata server's host",
        ),
        (
            "(none for openstack)",
            "--cloud-provider=openstack: everything is in --cloud-config (cloud.conf), or in \
             the clouds.yaml it names",
        ),
        (
            "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION, AWS_PROFILE, ...",
            "--cloud-provider=aws: the usual AWS credential chain (environment, shared files, \
             web identity, instance metadata); the routes a route table may hold are the \
             account's \"Routes per route table\" from Service Quotas (needs \
             servicequotas:GetServiceQuota; else AWS's default, 500), unless \
             RouteTableRouteLimit in --cloud-config sets them",
        ),
        (
            "AZURE_FEDERATED_TOKEN_FILE, AZURE_CLIENT_ID, AZURE_TENANT_ID, AZURE_AUTHORITY_HOST, \
             AZURE_CLIENT_SECRET, AZURE_ENVIRONMENT_FILEPATH",
            "--cloud-provider=azure (with --cloud-config=azure.json): workload identity as its \
             webhook injects it (before the file's identity), a client secret outside the file, \
             the Azure Stack environment file of \"cloud\": \"AzureStackCloud\"",
        ),
        (
            WATCH_LIST_CLIENT_VAR,
            "false turns streaming lists off, as --watch-list=false does (client-go's switch)",
        ),
        (
            "RUST_LOG",
            "log levels per module, as env_logger reads them (default from --v)",
        ),
        (
            FAKE_LATENCY_VAR,
            "--cloud-provider=fake: how long each call takes (a Go duration)",
        ),
        (
            FAKE_JOURNAL_VAR,
            "--cloud-provider=fake: a file that gets one JSON line per route created",
        ),
    ],
    groups: &[
        ("Flags", FLAGS),
        (
            "The cloud-controller-manager's other flags: the serving ones apply, the rest are \
             accepted and ignored with a warning",
            super::ccm::FLAGS,
        ),
        (
            "Flags of other controllers that CCM templates pass (accepted, ignored with a warning)",
            super::ccm::EXTRA_FLAGS,
        ),
    ],
};

/// `run`'s flags, parsed; [`RunArgs::settings`] validates them.
#[derive(Debug)]
pub struct RunArgs(Parsed);

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
    /// Which nodes get routes (`--node-selector`, `--skip-nodes-of-other-providers`).
    pub node_filter: crate::node_filter::NodeFilter,
    pub configure_cloud_routes: bool,
    /// `--watch-list`: streaming lists for the node watch (see [`watch_list`]).
    pub watch_list: bool,
    /// `--kube-api-content-type`: the node watch in protobuf (the CCM's default) or
    /// in JSON.
    pub watch_protobuf: bool,
    pub log_format: crate::logging::LogFormat,
    /// The default log level, from `-v`.
    pub log_level: log::LevelFilter,
    /// Settings accepted but without effect here (feature gates that do not apply), for
    /// the log.
    pub warnings: Vec<String>,
}

/// `--kube-api-content-type`: whether the node watch asks for protobuf. The CCM
/// sends every request in that type; here only the node watch is big enough to gain
/// by it (the rest are small JSON objects), so it is what the flag sets.
fn content_type(value: &str) -> Result<bool, UsageError> {
    match value.split(';').next().unwrap_or_default().trim() {
        "application/vnd.kubernetes.protobuf" => Ok(true),
        "application/json" => Ok(false),
        _ => Err(UsageError(format!(
            "--kube-api-content-type={value}: use application/vnd.kubernetes.protobuf (the \
             default) or application/json"
        ))),
    }
}

/// client-go's switch for streaming lists (its `WatchListClient` feature, read from
/// the environment as client-go reads it).
pub const WATCH_LIST_CLIENT_VAR: &str = "KUBE_FEATURE_WatchListClient";

/// Whether the node watch uses streaming lists: `--watch-list`, unless
/// [`WATCH_LIST_CLIENT_VAR`] (its value `env`) says false. A value that is not a
/// boolean is ignored with the warning returned, as client-go does.
pub fn watch_list(flag: bool, env: Option<&str>) -> (bool, Option<String>) {
    match env.map(|v| (v, super::flags::parse_bool(v.trim()))) {
        None => (flag, None),
        Some((_, Some(on))) => (flag && on, None),
        Some((value, None)) => (
            flag,
            Some(format!(
                "{WATCH_LIST_CLIENT_VAR}={value:?} is not a boolean (true or false); ignored"
            )),
        ),
    }
}

/// A period the controller runs on: a Go duration of at least a second (a shorter
/// one is almost always a unit typo, `500` for `500s`, and would spin the process).
fn period(flag: &str, value: &str) -> Result<Duration, UsageError> {
    let d = crate::duration::parse(value).map_err(|e| UsageError(format!("--{flag}: {e}")))?;
    if d < Duration::from_secs(1) {
        return Err(UsageError(format!(
            "--{flag}: {value} is shorter than 1s; give a period such as --{flag}=10s"
        )));
    }
    Ok(d)
}

/// `--feature-gates`, read as component-base reads it: every `NAME=BOOL` of every
/// occurrence, later ones winning, booleans as Go's `strconv.ParseBool` takes them.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct FeatureGates {
    /// Watch-based reconciliation (KEP-5237).
    pub watch: bool,
    /// One line per gate that was set but means nothing here.
    pub warnings: Vec<String>,
}

/// Parses the items of `--feature-gates`.
pub fn parse_feature_gates(items: &[String]) -> Result<FeatureGates, UsageError> {
    use super::ccm::{GATES, Stage};
    let mut set: Vec<(&'static str, bool)> = Vec::new();
    for item in items {
        let (name, value) = item.split_once('=').ok_or_else(|| {
            UsageError(format!(
                "--feature-gates: {item:?} needs a value, as in {WATCH_GATE}=true"
            ))
        })?;
        let (name, value) = (name.trim(), value.trim());
        let Some(gate) = GATES.iter().find(|g| g.name == name) else {
            let known: Vec<&str> = GATES.iter().map(|g| g.name).collect();
            return Err(UsageError(format!(
                "--feature-gates: unknown gate {name:?}{}; known gates: {}",
                super::flags::closest(name, known.iter().copied())
                    .map(|c| format!(" (did you mean {c}?)"))
                    .unwrap_or_default(),
                known.join(", ")
            )));
        };
        let on = super::flags::parse_bool(value).ok_or_else(|| {
            UsageError(format!(
                "--feature-gates: {name} must be true or false (or 1, 0, t, f), not {value:?}"
            ))
        })?;
        if gate.locked && on != gate.default {
            return Err(UsageError(format!(
                "--feature-gates: {name} is locked to {} in this Kubernetes version; remove it",
                gate.default
            )));
        }
        set.retain(|(n, _)| *n != gate.name);
        set.push((gate.name, on));
    }
    let value = |name: &str| set.iter().find(|(n, _)| *n == name).map(|(_, on)| *on);
    let watch_gate = GATES
        .iter()
        .find(|g| g.name == WATCH_GATE)
        .expect("the CCM knows the watch-based routes gate");
    let stage_all = match watch_gate.stage {
        Stage::Alpha => value("AllAlpha"),
        Stage::Beta => value("AllBeta"),
        _ => None,
    };
    let watch = value(WATCH_GATE)
        .or(stage_all)
        .unwrap_or(watch_gate.default);
    let warnings = set
        .iter()
        .filter(|(n, _)| *n != WATCH_GATE)
        .map(|(n, on)| match *n {
            "AllAlpha" | "AllBeta" => format!(
                "--feature-gates {n}={on}: of the gates it covers, only {WATCH_GATE} applies to \
                 route-controller"
            ),
            _ => format!(
                "--feature-gates {n}={on}: a cloud-controller-manager gate that does not apply \
                 to route-controller; ignored"
            ),
        })
        .collect();
    Ok(FeatureGates { watch, warnings })
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

/// The serving flags: the secure port's address, certificate and authorization, and
/// the opt-in plain port.
fn serving(p: &Parsed) -> Result<Serving, UsageError> {
    let port: u16 = p.number("secure-port")?;
    let secure_address = match port {
        0 => None,
        port => {
            let host = p.string("bind-address");
            let ip = host.trim().parse::<std::net::IpAddr>().map_err(|_| {
                UsageError(format!(
                    "--bind-address: {host:?} is not an IP address (e.g. 0.0.0.0, ::, 127.0.0.1)"
                ))
            })?;
            Some(SocketAddr::new(ip, port))
        }
    };
    let cert = match (
        p.optional("tls-cert-file"),
        p.optional("tls-private-key-file"),
    ) {
        (Some(cert), Some(key)) => CertSource::Files {
            cert: PathBuf::from(cert),
            key: PathBuf::from(key),
        },
        (None, None) => CertSource::SelfSigned {
            cert_dir: p.optional("cert-dir").map(PathBuf::from),
            hosts: Vec::new(),
        },
        _ => {
            return Err(UsageError(
                "--tls-cert-file and --tls-private-key-file go together: give both, or neither for a self-signed certificate".into(),
            ));
        }
    };
    let mut access = AccessConfig::new();
    // Upstream's default, as pflag shows a list: [/healthz,/readyz,/livez].
    access.always_allow_paths = if p.given("authorization-always-allow-paths") {
        p.items("authorization-always-allow-paths")
    } else {
        vec!["/healthz".into(), "/readyz".into(), "/livez".into()]
    };
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
        authentication_kubeconfig: p.optional("authentication-kubeconfig").map(PathBuf::from),
        authorization_kubeconfig: p.optional("authorization-kubeconfig").map(PathBuf::from),
        access,
        plain_address: parse_bind_address(&p.string("metrics-bind-address"))?,
    })
}

impl RunArgs {
    pub(super) fn from_parsed(parsed: Parsed) -> RunArgs {
        RunArgs(parsed)
    }

    /// Parses `run`'s flags (the arguments after `run`), without the process-level
    /// handling of `--help` and errors: for tests and tools that check a command line.
    pub fn parse(args: &[&str]) -> Result<RunArgs, UsageError> {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        match super::flags::parse(&SPEC, &args)? {
            super::flags::Outcome::Parsed(p) => Ok(RunArgs(p)),
            _ => Err(UsageError("--help or --version given".into())),
        }
    }

    /// One line per flag that was accepted but does not apply, in the order given.
    pub fn ignored_warnings(&self) -> Vec<String> {
        self.0.ignored_warnings()
    }

    /// Validates the flags; every error names its flag and the fix.
    pub fn settings(&self) -> Result<RunSettings, UsageError> {
        let p = &self.0;
        let provider = p.string("cloud-provider");
        if !["hcloud", "aws", "azure", "gce", "openstack", "exec", "fake"]
            .contains(&provider.as_str())
        {
            return Err(UsageError(format!(
                "--cloud-provider: {provider:?} is not supported; use hcloud, aws, azure, gce, openstack, exec or fake"
            )));
        }
        let cluster_cidrs = parse_cluster_cidrs(&p.string("cluster-cidr")).map_err(UsageError)?;
        let node_filter = super::node_filter(p, Some(&provider))?;
        let cluster_name = p.string("cluster-name");
        if cluster_name.trim().is_empty() {
            return Err(UsageError(
                "--cluster-name must not be empty (default: kubernetes)".into(),
            ));
        }
        let gates = parse_feature_gates(&p.items("feature-gates"))?;
        let reconcile_period = match (
            p.last("route-reconcile-period"),
            p.last("route-reconciliation-period"),
        ) {
            (Some(a), Some(b)) if a != b => {
                return Err(UsageError(format!(
                    "--route-reconcile-period={a} and --route-reconciliation-period={b}: one \
                     setting under two names; give one of them"
                )));
            }
            (Some(alias), _) => period("route-reconcile-period", alias)?,
            (None, _) => period(
                "route-reconciliation-period",
                &p.string("route-reconciliation-period"),
            )?,
        };
        let min_resync = period("min-resync-period", &p.string("min-resync-period"))?;
        let list_max_age = period("route-list-max-age", &p.string("route-list-max-age"))?;
        // Unset: the budget decides, within upstream's 200.
        let in_flight: Option<usize> = match p.optional("concurrent-route-operations") {
            None => None,
            Some(v) => match v.trim().parse::<usize>() {
                Ok(n) if (1..=1000).contains(&n) => Some(n),
                _ => {
                    return Err(UsageError(format!(
                        "--concurrent-route-operations: {v:?}: give between 1 and 1000"
                    )));
                }
            },
        };
        let qps: f64 = p.number("kube-api-qps")?;
        if !(qps > 0.0 && qps.is_finite()) {
            return Err(UsageError(
                "--kube-api-qps: must be more than 0 (default 20)".into(),
            ));
        }
        let burst: u32 = p.number("kube-api-burst")?;
        if burst == 0 {
            return Err(UsageError(
                "--kube-api-burst: must be at least 1 (default 30)".into(),
            ));
        }
        let format = p
            .last("logging-format")
            .or(p.last("log-format"))
            .unwrap_or("text");
        let log_format = format.parse().map_err(|_| {
            UsageError(format!(
                "--logging-format: {format:?} is not a format; use text or json"
            ))
        })?;
        let verbosity: i64 = p.number("v")?;
        let log_level = match verbosity {
            ..=3 => log::LevelFilter::Info,
            4..=5 => log::LevelFilter::Debug,
            _ => log::LevelFilter::Trace,
        };
        let lease = if p.bool("leader-elect") {
            let lock = p.string("leader-elect-resource-lock");
            if lock != "leases" {
                return Err(UsageError(format!(
                    "--leader-elect-resource-lock: {lock:?} is not supported; only leases (the default) is"
                )));
            }
            let mut lease = LeaseConfig::new(crate::kube::default_identity());
            lease.name = p.string("leader-elect-resource-name");
            lease.namespace = p.string("leader-elect-resource-namespace");
            validate_lease_name("--leader-elect-resource-name", &lease.name).map_err(UsageError)?;
            validate_namespace("--leader-elect-resource-namespace", &lease.namespace)
                .map_err(UsageError)?;
            lease.lease_duration = period(
                "leader-elect-lease-duration",
                &p.string("leader-elect-lease-duration"),
            )?;
            lease.renew_deadline = period(
                "leader-elect-renew-deadline",
                &p.string("leader-elect-renew-deadline"),
            )?;
            lease.retry_period = period(
                "leader-elect-retry-period",
                &p.string("leader-elect-retry-period"),
            )?;
            lease.validate().map_err(UsageError)?;
            Some(lease)
        } else {
            None
        };
        let mut controller = Config::new(cluster_cidrs);
        controller.cluster_name = cluster_name;
        controller.mode = if gates.watch { Mode::Watch } else { Mode::Poll };
        controller.route_reconciliation_period = reconcile_period;
        controller.min_resync_period = min_resync;
        controller.route_view_max_age = list_max_age;
        if let Some(cap) = in_flight {
            controller.max_in_flight = cap;
        }
        controller.leader_election = lease.is_some();
        controller.delete_routes_of_unselected_nodes = p.bool("delete-routes-of-unselected-nodes");
        let client = ClientOptions {
            qps,
            burst,
            ..ClientOptions::default()
        };
        Ok(RunSettings {
            controller,
            load: LoadOptions {
                kubeconfig: p.optional("kubeconfig").map(PathBuf::from),
                master: p.optional("master"),
                context: None,
            },
            client,
            lease,
            provider,
            cloud_config: p.optional("cloud-config").map(PathBuf::from),
            serving: serving(p)?,
            node_filter,
            configure_cloud_routes: p.bool("configure-cloud-routes"),
            watch_list: p.bool("watch-list"),
            watch_protobuf: content_type(&p.string("kube-api-content-type"))?,
            log_format,
            log_level,
            warnings: gates.warnings,
        })
    }
}

/// The route tables of an AWS cloud config: `RouteTableID` given once with one ID
/// (as upstream's), repeated (gcfg's way of giving a list), or with IDs separated by
/// commas.
pub fn route_table_ids(file: &[(String, String)]) -> Vec<String> {
    file.iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("RouteTableID"))
        .flat_map(|(_, v)| v.split(','))
        .map(str::trim)
        .filter(|id| !id.is_empty())
        .map(str::to_string)
        .collect()
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

/// `EC2Bucket<Action>`'s value, `<requests per second>,<burst>` (`2.5,100`), both
/// positive.
fn parse_ec2_bucket(value: &str) -> Option<(f64, u32)> {
    let (rate, burst) = value.split_once(',')?;
    let rate: f64 = rate.trim().parse().ok()?;
    let burst: u32 = burst.trim().parse().ok()?;
    (rate.is_finite() && rate > 0.0 && burst > 0).then_some((rate, burst))
}

/// The `--cloud-config` keys each provider reads.
const HCLOUD_KEYS: &[&str] = &[
    crate::cloud::hcloud::ENV_TOKEN,
    crate::cloud::hcloud::ENV_TOKEN_FILE,
    crate::cloud::hcloud::ENV_NETWORK,
    crate::cloud::hcloud::ENV_ENDPOINT,
    crate::cloud::hcloud::ENV_SERVER_CACHE_MAX_AGE,
    crate::cloud::hcloud::ENV_NETWORK_ROUTE_LIMIT,
];
const AWS_KEYS: &[&str] = &[
    "RouteTableID",
    "RouteTableRouteLimit",
    "DisableSourceDestCheck",
    "EC2BucketDescribeRouteTables",
    "EC2BucketDescribeInstances",
    "EC2BucketCreateRoute",
    "EC2BucketReplaceRoute",
    "EC2BucketDeleteRoute",
    "EC2BucketModifyInstanceAttribute",
];
/// Keys of the AWS cloud config (`[Global]` and `[ServiceOverride]`, cloud-provider-aws
/// v1.37) that concern other controllers: accepted, so that a CCM's file works, with a
/// warning.
const AWS_OTHER_KEYS: &[&str] = &[
    "Zone",
    "Region",
    "VPC",
    "SubnetID",
    "RoleARN",
    "SourceARN",
    "KubernetesClusterTag",
    "KubernetesClusterID",
    "DisableSecurityGroupIngress",
    "ElbSecurityGroup",
    "NodeIPFamilies",
    "ClusterServiceLoadBalancerHealthProbeMode",
    "ClusterServiceSharedLoadBalancerHealthProbePort",
    "ClusterServiceSharedLoadBalancerHealthProbePath",
    "SupportedTopologyInstanceTypePattern",
    "NLBSecurityGroupMode",
    "Service",
    "URL",
    "SigningRegion",
    "SigningMethod",
    "SigningName",
];

/// Checks `--cloud-config`'s keys against what `provider` reads: an unknown key is an
/// error naming the closest known one (a typo would otherwise be ignored in silence);
/// a key of the provider's other controllers gives a warning, returned for the log.
pub(crate) fn check_cloud_config_keys(
    provider: &str,
    path: &std::path::Path,
    pairs: &[(String, String)],
) -> Result<Vec<String>, UsageError> {
    let (applies, others): (&[&str], &[&str]) = match provider {
        "hcloud" => (HCLOUD_KEYS, &[]),
        "aws" => (AWS_KEYS, AWS_OTHER_KEYS),
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
            None if applies.is_empty() => {
                format!("--cloud-provider={provider} reads no settings file")
            }
            None => format!("known keys: {}", applies.join(", ")),
        };
        return Err(UsageError(format!(
            "--cloud-config {}: unknown key {key:?} for --cloud-provider={provider}; {hint}",
            path.display()
        )));
    }
    Ok(warnings)
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
    connect_provider(name, cloud_config, cluster_cidrs, metrics, &Fence::open()).map_err(
        |e| match e {
            ProviderError::Config(e) => e,
            ProviderError::Outage(message) => UsageError(message),
        },
    )
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
/// so that `run` waits for the cloud instead of exiting. The provider checks `fence`
/// before every request once it is built (the start's own requests precede it).
pub fn connect_provider(
    name: &str,
    cloud_config: Option<&PathBuf>,
    cluster_cidrs: &[crate::model::Cidr],
    metrics: Option<Arc<crate::metrics::Metrics>>,
    fence: &Fence,
) -> Result<Arc<dyn Routes>, ProviderError> {
    // Every cloud client reads the proxy variables; one that cannot be used stops the
    // start here, named, rather than being ignored as Go would.
    match crate::ProxyEnv::from_process() {
        Ok(env) if env.is_set() => log::info!("cloud and API server requests: {env}"),
        Ok(_) => {}
        Err(e) => return Err(ProviderError::Config(UsageError(e.0))),
    }
    if name == "azure" {
        return azure_provider(cloud_config, metrics, fence);
    }
    if name == "gce" {
        // gce.conf is gcfg (quoted values, repeated names), read by the provider.
        return gce_provider(cloud_config, metrics, fence);
    }
    if name == "openstack" {
        // cloud.conf is gcfg too, read by the provider; the cluster CIDRs decide
        // which of a shared router's routes are ours.
        return openstack_provider(cloud_config, cluster_cidrs, metrics, fence);
    }
    let file = match cloud_config {
        Some(path) => {
            let pairs = read_cloud_config(path)?;
            for warning in check_cloud_config_keys(name, path, &pairs)? {
                log::warn!("{warning}");
            }
            pairs
        }
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
            Ok(Arc::new(provider.with_fence(fence.clone())))
        }
        "aws" => {
            use crate::cloud::aws::{AwsConfig, AwsProvider, credentials::AwsEnv};
            let defaults = AwsConfig::default();
            let route_table_limit = match from_file("RouteTableRouteLimit") {
                None => defaults.route_table_limit,
                Some(v) => Some(v.trim().parse::<usize>().ok().filter(|n| *n > 0).ok_or_else(
                    || {
                        UsageError(format!(
                            "--cloud-config: RouteTableRouteLimit={v:?} is not a positive number \
                             of routes (leave it out to use the account's \"Routes per route \
                             table\" from Service Quotas, or AWS's default of 500)"
                        ))
                    },
                )?),
            };
            let disable_source_dest_check = match from_file("DisableSourceDestCheck") {
                None => defaults.disable_source_dest_check,
                Some(v) => match v.trim().to_ascii_lowercase().as_str() {
                    "true" => true,
                    "false" => false,
                    _ => {
                        return Err(ProviderError::Config(UsageError(format!(
                            "--cloud-config: DisableSourceDestCheck={v:?} is not true or false"
                        ))));
                    }
                },
            };
            let mut buckets = defaults.buckets.clone();
            for bucket in &mut buckets {
                let key = format!("EC2Bucket{}", bucket.action);
                if let Some(v) = from_file(&key) {
                    let (per_second, burst) = parse_ec2_bucket(&v).ok_or_else(|| {
                        UsageError(format!(
                            "--cloud-config: {key}={v:?} is not <requests per second>,<burst> \
                             with both positive (the default is {},{}: EC2's documented bucket \
                             for {}, less a margin)",
                            bucket.requests_per_second, bucket.burst, bucket.action
                        ))
                    })?;
                    bucket.requests_per_second = per_second;
                    bucket.burst = burst;
                }
            }
            let config = AwsConfig {
                route_table_ids: route_table_ids(&file),
                route_table_limit,
                disable_source_dest_check,
                buckets,
                ..defaults
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
            Ok(Arc::new(provider.with_fence(fence.clone())))
        }
        "exec" => Ok(Arc::new(exec_provider(&file)?.with_fence(fence.clone()))),
        other => Err(ProviderError::Config(UsageError(format!(
            "--cloud-provider: {other:?} is not supported; use hcloud, aws, azure, gce, openstack, exec or fake"
        )))),
    }
}

/// The exec provider of `--cloud-config`'s pairs, after the plugin's `describe`: a
/// plugin that cannot start or speaks wrongly is a setting to fix; one that failed
/// this once (a timeout, a crash) is an outage that `run` waits out.
pub fn exec_provider(
    file: &[(String, String)],
) -> Result<crate::cloud::exec::ExecRoutes, ProviderError> {
    use crate::cloud::exec::{Config, ExecRoutes};
    let config = Config::from_pairs(file).map_err(UsageError)?;
    let provider = ExecRoutes::connect(config).map_err(|e| match e.kind {
        crate::cloud::CloudErrorKind::Invalid => ProviderError::Config(UsageError(e.message)),
        _ => ProviderError::Outage(e.message),
    })?;
    let d = provider.description();
    log::info!(
        "--cloud-provider=exec: plugin {} ({}describe; budget {:?}, batch size {} ({}), tables \
         {:?})",
        provider.plugin_name(),
        if d.implemented { "" } else { "no " },
        d.budget,
        d.batch_size,
        if d.batch_size > 1 {
            "changes go out in apply calls"
        } else {
            "one create or delete per call"
        },
        d.tables
    );
    Ok(provider)
}

/// `--cloud-provider=azure`: reads `azure.json` (`--cloud-config`, required) and
/// connects (a token and one read of the route table).
fn azure_provider(
    cloud_config: Option<&PathBuf>,
    metrics: Option<Arc<crate::metrics::Metrics>>,
    fence: &Fence,
) -> Result<Arc<dyn Routes>, ProviderError> {
    use crate::cloud::azure::{AzureRoutes, Config as AzureConfig};
    let path = cloud_config.ok_or_else(|| {
        UsageError(
            "--cloud-provider=azure needs --cloud-config: the azure.json that \
             cloud-provider-azure reads (e.g. --cloud-config=/etc/kubernetes/azure.json)"
                .into(),
        )
    })?;
    let text = std::fs::read_to_string(path).map_err(|e| {
        UsageError(format!(
            "--cloud-config {}: cannot read: {e}",
            path.display()
        ))
    })?;
    let mut config = AzureConfig::parse(&text, &|k| std::env::var(k).ok())
        .map_err(|e| UsageError(format!("--cloud-config {}: {e}", path.display())))?;
    config.metrics = metrics;
    let provider = AzureRoutes::connect(config).map_err(|e| match e.outage {
        true => ProviderError::Outage(e.to_string()),
        false => ProviderError::Config(UsageError(e.to_string())),
    })?;
    Ok(Arc::new(provider.with_fence(fence.clone())))
}

/// `--cloud-provider=gce`: `gce.conf` and the environment of Google's libraries.
fn gce_provider(
    cloud_config: Option<&PathBuf>,
    metrics: Option<Arc<crate::metrics::Metrics>>,
    fence: &Fence,
) -> Result<Arc<dyn Routes>, ProviderError> {
    use crate::cloud::gce::{Config as GceConfig, GceRoutes};
    let text = match cloud_config {
        Some(path) => Some(std::fs::read_to_string(path).map_err(|e| {
            UsageError(format!(
                "--cloud-config {}: cannot read: {e}",
                path.display()
            ))
        })?),
        None => None,
    };
    let shown = cloud_config.map_or(String::new(), |p| {
        format!("--cloud-config {}: ", p.display())
    });
    let (mut config, warnings) =
        GceConfig::from_gce_conf(text.as_deref(), |k| std::env::var(k).ok())
            .map_err(|e| UsageError(format!("{shown}{e}")))?;
    for warning in warnings {
        log::warn!("{shown}{warning}");
    }
    config.metrics = metrics;
    let provider = GceRoutes::connect(config).map_err(|e| match e.outage {
        true => ProviderError::Outage(e.to_string()),
        false => ProviderError::Config(UsageError(e.to_string())),
    })?;
    Ok(Arc::new(provider.with_fence(fence.clone())))
}

/// `--cloud-provider=openstack`: cloud-provider-openstack's `cloud.conf` (required),
/// and the clouds.yaml it names with `use-clouds = true`.
fn openstack_provider(
    cloud_config: Option<&PathBuf>,
    cluster_cidrs: &[crate::model::Cidr],
    metrics: Option<Arc<crate::metrics::Metrics>>,
    fence: &Fence,
) -> Result<Arc<dyn Routes>, ProviderError> {
    use crate::cloud::openstack::{Config as OpenStackConfig, OpenStackRoutes};
    let Some(path) = cloud_config else {
        return Err(ProviderError::Config(UsageError(
            "--cloud-provider=openstack needs --cloud-config: cloud-provider-openstack's \
             cloud.conf with [Global] auth-url and credentials and [Route] router-id"
                .into(),
        )));
    };
    let shown = format!("--cloud-config {}: ", path.display());
    let text = std::fs::read_to_string(path)
        .map_err(|e| UsageError(format!("{shown}cannot read: {e}")))?;
    let (mut config, warnings) = OpenStackConfig::from_cloud_conf(&text, cluster_cidrs, |f| {
        std::fs::read_to_string(f).map_err(|e| e.to_string())
    })
    .map_err(|e| UsageError(format!("{shown}{e}")))?;
    for warning in warnings {
        log::warn!("{shown}{warning}");
    }
    if cluster_cidrs.is_empty() {
        return Err(ProviderError::Config(UsageError(
            "--cloud-provider=openstack needs --cluster-cidr: only the router's routes inside \
             the cluster CIDRs are this cluster's"
                .into(),
        )));
    }
    config.metrics = metrics;
    let provider = OpenStackRoutes::connect(config).map_err(|e| match e.outage {
        true => ProviderError::Outage(e.to_string()),
        false => ProviderError::Config(UsageError(e.to_string())),
    })?;
    Ok(Arc::new(provider.with_fence(fence.clone())))
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
        RunArgs::parse(&v).expect("flags parse")
    }

    /// The error of a command line, from parsing or validation.
    fn error(extra: &[&str]) -> String {
        let mut v = vec!["--cloud-provider=fake", "--cluster-cidr=10.244.0.0/16"];
        v.extend_from_slice(extra);
        match RunArgs::parse(&v).and_then(|a| a.settings()) {
            Err(e) => e.0,
            Ok(_) => panic!("{extra:?} was accepted"),
        }
    }

    /// Guards `--watch-list` and client-go's switch: streaming lists by default, off
    /// with the flag or with KUBE_FEATURE_WatchListClient=false; a bad value of the
    /// variable is a warning and changes nothing.
    /// Guards `--kube-api-content-type`: the node watch in protobuf by default, as
    /// the CCM's requests are, JSON when asked, anything else refused.
    #[test]
    fn kube_api_content_type_sets_the_node_watchs_encoding() {
        assert!(args(&[]).settings().unwrap().watch_protobuf);
        let json = args(&["--kube-api-content-type=application/json"]);
        assert!(!json.settings().unwrap().watch_protobuf);
        let protobuf = args(&["--kube-api-content-type=application/vnd.kubernetes.protobuf"]);
        assert!(protobuf.settings().unwrap().watch_protobuf);
        assert!(
            args(&["--kube-api-content-type=text/yaml"])
                .settings()
                .is_err()
        );
    }

    #[test]
    fn watch_list_is_on_by_default_and_off_with_the_flag_or_client_gos_variable() {
        assert!(args(&[]).settings().unwrap().watch_list);
        assert!(!args(&["--watch-list=false"]).settings().unwrap().watch_list);
        assert_eq!(watch_list(true, None), (true, None));
        assert_eq!(watch_list(true, Some("false")), (false, None));
        assert_eq!(watch_list(true, Some("true")), (true, None));
        assert_eq!(watch_list(false, Some("true")), (false, None));
        let (on, warning) = watch_list(true, Some("nope"));
        assert!(on);
        assert!(
            warning
                .unwrap()
                .contains("KUBE_FEATURE_WatchListClient=\"nope\"")
        );
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

    /// Guards the node-selection flags: their defaults (every node, other providers'
    /// nodes skipped for hcloud, aws and azure only, routes of unselected nodes kept) and that
    /// each one reaches the settings.
    #[test]
    fn node_selection_flags_set_the_filter_and_the_delete_switch() {
        use crate::node_filter::OwnProvider;
        let s = args(&[]).settings().unwrap();
        assert!(s.node_filter.is_everything(), "fake: no providerID scheme");
        assert!(!s.controller.delete_routes_of_unselected_nodes);
        let hcloud = |extra: &[&str]| {
            let mut v = vec!["--cloud-provider=hcloud", "--cluster-cidr=10.244.0.0/16"];
            v.extend_from_slice(extra);
            RunArgs::parse(&v).unwrap().settings().unwrap()
        };
        let s = hcloud(&[]);
        assert_eq!(s.node_filter.own_provider, Some(OwnProvider::Hcloud));
        assert!(s.node_filter.selector.is_everything());
        let s = hcloud(&[
            "--skip-nodes-of-other-providers=false",
            "--node-selector",
            "!instance.hetzner.cloud/is-root-server, role in (worker,edge)",
            "--delete-routes-of-unselected-nodes",
        ]);
        assert_eq!(s.node_filter.own_provider, None);
        assert_eq!(
            s.node_filter.selector.to_string(),
            "!instance.hetzner.cloud/is-root-server,role in (edge,worker)"
        );
        assert!(s.controller.delete_routes_of_unselected_nodes);
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
                "unknown gate \"Bogus\"; known gates: ",
            ),
            (
                &[
                    "--feature-gates",
                    "CloudControllerManagerWatchBasedRoutesReconciliation",
                ],
                "is not KEY=VALUE",
            ),
            (
                &[
                    "--feature-gates",
                    "CloudControllerManagerWatchBasedRoutesReconciliation=yes",
                ],
                "true or false",
            ),
            (&["--route-reconciliation-period", "0s"], "shorter than 1s"),
            (
                &["--route-reconciliation-period", "500ms"],
                "shorter than 1s",
            ),
            (&["--min-resync-period", "100ms"], "--min-resync-period"),
            (
                &[
                    "--route-reconcile-period=30s",
                    "--route-reconciliation-period=1m",
                ],
                "give one of them",
            ),
            (
                &["--leader-elect-lease-duration", "5s"],
                "--leader-elect-lease-duration",
            ),
            (&["--leader-elect-retry-period", "200ms"], "shorter than 1s"),
            (
                &["--leader-elect-resource-lock", "configmaps"],
                "only leases",
            ),
            (
                &["--leader-elect-resource-name="],
                "--leader-elect-resource-name: \"\" is not a Lease name",
            ),
            (
                &["--leader-elect-resource-namespace", "Kube_System"],
                "is not a namespace name",
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
            (&["--logging-format", "xml"], "--logging-format"),
            (&["--log-format", "xml"], "--logging-format"),
            (&["--cluster-name", " "], "--cluster-name"),
            (&["--cluster-cidr", "010.244.0.0/16"], "leading zero"),
            (
                &["--node-selector", "role=worker,zone in (fsn1"],
                "--node-selector: label selector \"role=worker,zone in (fsn1\": found the end",
            ),
            (
                &["--node-selector", "node-role.kubernetes.io/-worker"],
                "invalid label key",
            ),
            (
                &["--skip-nodes-of-other-providers=maybe"],
                "--skip-nodes-of-other-providers",
            ),
        ];
        for (extra, needle) in cases {
            let err = error(extra);
            assert!(err.contains(needle), "{extra:?}: {err}");
            assert!(!err.contains('\n'), "{err}");
        }
        let no_provider = RunArgs::parse(&["--cluster-cidr", "10.0.0.0/8"]).unwrap_err();
        assert!(
            no_provider.0.starts_with("--cloud-provider is required"),
            "{no_provider}"
        );
        let no_cidr = RunArgs::parse(&["--cloud-provider", "fake"]).unwrap_err();
        assert!(
            no_cidr.0.starts_with("--cluster-cidr is required"),
            "{no_cidr}"
        );
        assert!(
            error(&["--cloud-provider=vsphere"])
                .contains("use hcloud, aws, azure, gce, openstack, exec or fake")
        );
    }

    #[test]
    fn the_last_of_a_repeated_flag_wins_as_in_pflag() {
        let s = args(&["--cluster-cidr=10.0.0.0/8", "--cluster-cidr", "10.1.0.0/16"])
            .settings()
            .unwrap();
        assert_eq!(s.controller.cluster_cidrs[0].to_string(), "10.1.0.0/16");
        let s = args(&["--leader-elect=True", "--leader-elect=FALSE"])
            .settings()
            .unwrap();
        assert!(s.lease.is_none());
        let s = args(&["-v=6", "--logging-format=json"]).settings().unwrap();
        assert_eq!(s.log_level, log::LevelFilter::Trace);
        assert_eq!(s.log_format, crate::logging::LogFormat::Json);
    }

    /// cloud-provider-azure's Helm chart, rendered with its default values
    /// (helm/cloud-provider-azure/templates/cloud-provider-azure.yaml at 7b31c76), and
    /// the two flags of its own that operators add: `run` takes them unchanged.
    #[test]
    fn cloud_provider_azures_chart_arguments_are_valid_for_run() {
        let chart = [
            "--allocate-node-cidrs=true",
            "--cloud-config=/etc/kubernetes/azure.json",
            "--cloud-provider=azure",
            "--cluster-cidr=10.244.0.0/16",
            "--cluster-name=kubernetes",
            "--configure-cloud-routes=true",
            "--controllers=*,-cloud-node",
            "--leader-elect=true",
            "--route-reconciliation-period=10s",
            "--secure-port=10268",
            "--v=2",
        ];
        let parsed = RunArgs::parse(&chart).unwrap_or_else(|e| panic!("{e}"));
        let s = parsed.settings().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            s.cloud_config.as_deref(),
            Some(std::path::Path::new("/etc/kubernetes/azure.json"))
        );
        let mut more = chart.to_vec();
        more.extend([
            "--cloud-config-secret-name=azure-cloud-provider",
            "--enable-dynamic-reloading=false",
        ]);
        let parsed = RunArgs::parse(&more).unwrap_or_else(|e| panic!("{e}"));
        parsed.settings().unwrap_or_else(|e| panic!("{e}"));
    }

    /// What `manifests` prints, `run` takes: the container's arguments pass `run`'s
    /// parser and validation for every provider, with no warning.
    #[test]
    fn the_arguments_manifests_writes_are_valid_for_run() {
        for provider in crate::manifests::PROVIDERS {
            let options = crate::manifests::ManifestOptions {
                provider: provider.to_string(),
                cluster_cidr: "10.244.0.0/16".into(),
                ..crate::manifests::ManifestOptions::default()
            };
            let args = crate::manifests::container_args(&options);
            assert_eq!(args[0], "run");
            let args: Vec<&str> = args[1..].iter().map(String::as_str).collect();
            let parsed = RunArgs::parse(&args).unwrap_or_else(|e| panic!("{provider}: {e}"));
            parsed
                .settings()
                .unwrap_or_else(|e| panic!("{provider}: {e}"));
            assert!(parsed.ignored_warnings().is_empty(), "{provider}");
        }
    }

    #[test]
    fn node_ipam_flags_of_kops_and_kube_hetzner_templates_are_accepted_with_a_warning() {
        let a = args(&[
            "--node-cidr-mask-size=24",
            "--service-cluster-ip-range=10.96.0.0/12",
        ]);
        a.settings().unwrap();
        assert_eq!(a.ignored_warnings().len(), 2, "{:?}", a.ignored_warnings());
    }

    #[test]
    fn help_names_every_flag_with_its_default_the_required_ones_and_the_environment() {
        let text = super::super::flags::help(&SPEC);
        for flag in SPEC.flags() {
            assert!(
                text.contains(&format!("--{}", flag.name)),
                "--{} missing",
                flag.name
            );
        }
        let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            one_line.contains(
                "the cloud: hcloud, aws, azure, gce, openstack, exec (a plugin, see --cloud-config) or fake (required)"
            ),
            "{text}"
        );
        assert!(text.contains("(default: 10s)"), "{text}");
        assert!(text.contains("HCLOUD_TOKEN"), "{text}");
        assert!(text.contains("GOOGLE_APPLICATION_CREDENTIALS"), "{text}");
        assert!(text.contains("--webhook-secure-port=10260"), "{text}");
        assert!(
            text.contains("--secure-port int"),
            "the serving flags in full: {text}"
        );
        assert!(!text.contains("{{") && !text.contains("}}"), "{text}");
    }

    #[test]
    fn feature_gates_take_every_ccm_gate_and_parse_bool_spellings() {
        let on = |items: &[&str]| {
            let items: Vec<String> = items.iter().map(|s| s.to_string()).collect();
            parse_feature_gates(&items).unwrap()
        };
        assert!(on(&[&format!("{WATCH_GATE}=1")]).watch);
        assert!(!on(&[&format!("{WATCH_GATE}=True"), &format!("{WATCH_GATE}=f")]).watch);
        let stage = super::super::ccm::GATES
            .iter()
            .find(|g| g.name == WATCH_GATE)
            .unwrap()
            .stage;
        let all = match stage {
            super::super::ccm::Stage::Alpha => "AllAlpha",
            _ => "AllBeta",
        };
        let gates = on(&[&format!("{all}=true")]);
        assert!(gates.watch, "{all}=true turns on the {stage:?} watch gate");
        assert!(gates.warnings[0].contains(all), "{:?}", gates.warnings);
        assert!(!on(&[&format!("{all}=true"), &format!("{WATCH_GATE}=false")]).watch);
        let other = super::super::ccm::GATES
            .iter()
            .find(|g| g.name != WATCH_GATE && !g.name.starts_with("All") && !g.locked)
            .unwrap();
        let gates = on(&[&format!("{}=false", other.name)]);
        assert_eq!(gates.warnings.len(), 1);
        assert!(gates.warnings[0].contains(other.name));
        let items = vec!["WatchBasedRoutes=true".to_string()];
        let err = parse_feature_gates(&items).unwrap_err().0;
        assert!(err.contains(WATCH_GATE), "lists the known gates: {err}");
    }

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
        let Err(ProviderError::Config(e)) = exec_provider(&[]) else {
            panic!("no Command= must be a configuration error");
        };
        assert!(e.0.contains("Command=/path/to/plugin"), "{e}");
        let pairs = vec![("Comand".to_string(), "x".to_string())];
        let e =
            check_cloud_config_keys("exec", std::path::Path::new("p.conf"), &pairs).unwrap_err();
        assert!(e.0.contains("did you mean Command?"), "{e}");
        let missing = vec![("Command".to_string(), "/nonexistent/plugin".to_string())];
        let Err(ProviderError::Config(e)) = exec_provider(&missing) else {
            panic!("a plugin that cannot start must be a configuration error");
        };
        assert!(
            e.0.contains("cannot start") && e.0.contains("Command="),
            "{e}"
        );
    }

    #[test]
    fn cloud_config_keys_that_nobody_reads_are_errors_naming_the_closest() {
        let path = std::path::Path::new("cloud.conf");
        let pairs = |k: &str| vec![(k.to_string(), "x".to_string())];
        let err = check_cloud_config_keys("aws", path, &pairs("RouteTableId2")).unwrap_err();
        assert!(err.0.contains("did you mean RouteTableID?"), "{err}");
        let err = check_cloud_config_keys("hcloud", path, &pairs("HCLOUD_NETWROK")).unwrap_err();
        assert!(err.0.contains("did you mean HCLOUD_NETWORK?"), "{err}");
        let warnings = check_cloud_config_keys("aws", path, &pairs("Zone")).unwrap();
        assert!(
            warnings[0].contains("Zone does not concern routes"),
            "{warnings:?}"
        );
        assert!(
            check_cloud_config_keys("aws", path, &pairs("routetableid"))
                .unwrap()
                .is_empty()
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

    /// Guards that several route tables can be configured, both ways the docs name.
    #[test]
    fn route_table_ids_are_read_repeated_and_comma_separated() {
        let file: Vec<(String, String)> = [
            ("RouteTableID", "rtb-1"),
            ("HCLOUD_NETWORK", "k8s"),
            ("routetableid", " rtb-2 , rtb-3,"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(route_table_ids(&file), vec!["rtb-1", "rtb-2", "rtb-3"]);
        assert_eq!(route_table_ids(&[]), Vec::<String>::new());
    }
}
