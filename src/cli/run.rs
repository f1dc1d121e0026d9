//! `route-controller run`: the flags of the cloud-controller-manager that concern
//! routes, their validation, and the process around [`crate::run::Builder`].

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use super::cloud::{FAKE_JOURNAL_VAR, FAKE_LATENCY_VAR};
use super::flags::{Flag, Kind, Parsed};
use super::{
    CLOUD_CONFIG, CLOUD_PROVIDER, CLUSTER_CIDR, CLUSTER_NAME, DELETE_ROUTES_OF_UNSELECTED_NODES,
    KUBE_ENV, KUBECONFIG, MASTER, NODE_SELECTOR, SKIP_NODES_OF_OTHER_PROVIDERS, UsageError,
};
use crate::config::{parse_cluster_cidrs, validate_lease_name, validate_namespace};
use crate::controller::{Config, Mode};
use crate::kube::{ClientOptions, LeaseConfig, LoadOptions};
use crate::run::Serving;
use crate::serve::{AccessConfig, CertSource};

/// The feature gate of KEP-5237.
pub const WATCH_GATE: &str = "CloudControllerManagerWatchBasedRoutesReconciliation";

/// The flags of `run` that apply: the cloud-controller-manager's that concern routes,
/// spelled and typed as there, and route-controller's own. The CCM's other flags are
/// in [`super::ccm::FLAGS`].
pub(crate) const FLAGS: &[Flag] = &[
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
        "klog-style verbosity: 0-3 info, 4-5 the controller's debug records, 6-7 its trace \
         records, 8 and more the HTTP and TLS libraries' debug records too (never their trace \
         records, which hold request heads); RUST_LOG's directives override it",
    )
    .default("2")
    .short('v'),
];

/// The environment variables `run` reads, with what they are for (also
/// `check-config`'s).
pub(crate) const ENV: &[(&str, &str)] = &[
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
        "ALIBABA_CLOUD_ACCESS_KEY_ID, ALIBABA_CLOUD_ACCESS_KEY_SECRET, ACCESS_KEY_ID, ACCESS_KEY_SECRET, \
         ALIBABA_CLOUD_ROLE_ARN, ALIBABA_CLOUD_OIDC_PROVIDER_ARN, ALIBABA_CLOUD_OIDC_TOKEN_FILE, \
         ALIBABA_CLOUD_ECS_METADATA",
        "--cloud-provider=alibaba: an AccessKey pair (the SDKs' names, then the peer's), RRSA \
             (the role assumed at STS with the service account's OIDC token), else the ECS \
             instance's RAM role",
    ),
    (
        "(none for openstack)",
        "--cloud-provider=openstack: everything is in --cloud-config (cloud.conf), or in \
             the clouds.yaml it names",
    ),
    (
        "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION, AWS_PROFILE, ...",
        "--cloud-provider=aws: the AWS credential chain, in the Go SDK's order (environment \
             keys, web identity, the shared files' profile, container credentials, instance \
             metadata), and RoleARN of --cloud-config assumed on top; the routes a route table may hold are the \
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
];

/// `run`'s command line.
pub static SPEC: super::flags::Spec = super::flags::Spec {
    name: "run",
    about: "Run the route controller: watch the cluster's nodes and keep the cloud's route \
            table in step. Flags are spelled and parsed as in the cloud-controller-manager \
            (--flag=value or --flag value; booleans as --flag or --flag=false; a repeated flag's \
            last value wins), so a CCM's arguments work unchanged: the flags that concern \
            routes apply, every other CCM flag is accepted and ignored with a warning.",
    env: ENV,
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
    /// `-v` itself, which also sets the HTTP libraries' level.
    pub verbosity: crate::logging::Verbosity,
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
        if !super::cloud::PROVIDERS.contains(&provider.as_str()) {
            return Err(UsageError(format!(
                "--cloud-provider: {provider:?} is not supported; use hcloud, aws, azure, gce, openstack, alibaba, exec or fake"
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
        let verbosity = crate::logging::Verbosity(p.number("v")?);
        let log_level = verbosity.level();
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
            verbosity,
            warnings: gates.warnings,
        })
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
            Some("0.0.0.0:10270".parse().unwrap()),
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
                .contains("use hcloud, aws, azure, gce, openstack, alibaba, exec or fake")
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
                "the cloud: hcloud, aws, azure, gce, openstack, alibaba, exec (a plugin, see --cloud-config) or fake (required)"
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
}
