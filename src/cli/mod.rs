//! The command line: subcommands, their flags, and the `plan` and `simulate` commands.
//!
//! Flags are spelled as in the cloud-controller-manager and parsed as Go's pflag
//! parses them ([`flags`]), so that operators can copy their manifests. The flags
//! several commands share (the cloud, the cluster, the cluster's API) are declared once
//! here. Invalid input exits with status 2 and one line naming the flag or file and
//! the fix.

use std::fmt::Write as _;

use serde::Serialize;

use crate::config::parse_cluster_cidrs;
use crate::model::{LabeledNode, Node, NodeAddress, Route};
use crate::plan::{self, Plan};

pub mod ccm;
pub mod check;
pub mod cloud;
pub mod flags;
pub mod plugin_check;
pub mod run;

use flags::{Flag, Kind, Outcome, Parsed, Spec};
pub use plugin_check::{PluginCheckArgs, Report as PluginCheckReport, run_plugin_check};
pub use run::RunArgs;

/// Exit status for invalid configuration or input.
pub const EXIT_USAGE: i32 = 2;

// --- flags several commands share --------------------------------------------------------

pub(crate) const CLOUD_PROVIDER: Flag = Flag::new(
    "cloud-provider",
    Kind::String,
    "the cloud: hcloud, aws, azure, gce, openstack, alibaba, exec (a plugin, see --cloud-config) or fake",
);
pub(crate) const CLOUD_CONFIG: Flag = Flag::new(
    "cloud-config",
    Kind::String,
    "the provider's settings file, read as its cloud-controller-manager reads it: for \
     hcloud, HCLOUD_*=value lines (instead of environment variables); for aws, \
     cloud-provider-aws's cloud config ([Global] RouteTableID, repeated or comma-separated, \
     else the tables tagged with KubernetesClusterID or --cluster-name; Region or Zone; \
     RoleARN; [ServiceOverride] of EC2); for azure (required), cloud-provider-azure's \
     azure.json (JSON or YAML, keys without case); for gce, cloud-provider-gcp's gce.conf; \
     for openstack (required), cloud-provider-openstack's cloud.conf ([Global] and [Route] \
     router-id); for alibaba, cloud-provider-alibaba-cloud's cloud config (YAML or JSON: \
     Global region, vpcid, routeTableIDs, base64 accessKeyID/accessKeySecret; optional on \
     ECS); for exec, the plugin's Command=, Arg=, Env=, Timeout= lines (see \
     plugin-check --help). The peer's keys that do not concern routes, and unknown ones \
     (with the closest known key), are logged once at start; check-config shows what was \
     read",
);
pub(crate) const CLUSTER_NAME: Flag = Flag::new(
    "cluster-name",
    Kind::String,
    "the cluster name: the AWS route table tag, the first 26 characters of GCE route \
     names, passed to every cloud call",
)
.default("kubernetes");
pub(crate) const NODE_SELECTOR: Flag = Flag::new(
    "node-selector",
    Kind::String,
    "route only the nodes this Kubernetes label selector selects, as kubectl -l reads it \
     (key=value, key!=value, key, !key, key in (a,b), key notin (a,b); a comma is AND); \
     \"\" selects every node. An unselected node gets no route, no condition and no event; \
     its existing routes are left alone (see --delete-routes-of-unselected-nodes)",
);
pub(crate) const SKIP_NODES_OF_OTHER_PROVIDERS: Flag = Flag::new(
    "skip-nodes-of-other-providers",
    Kind::Bool,
    "with --cloud-provider hcloud, aws, azure, gce, openstack or alibaba, do not route nodes whose spec.providerID \
     belongs to another provider (hcloud: anything but hcloud://<id>, so Robot servers' \
     hrobot:// and hcloud://bm-; aws: anything but aws://; azure: anything but azure://; gce: anything but gce://; openstack: anything but openstack://; alibaba: anything but <region>.<instance>); a node with no providerID yet is routed. \
     Such nodes are unselected, as by --node-selector",
)
.default("true");
pub(crate) const DELETE_ROUTES_OF_UNSELECTED_NODES: Flag = Flag::new(
    "delete-routes-of-unselected-nodes",
    Kind::Bool,
    "delete the routes of nodes that exist but are unselected (--node-selector, \
     --skip-nodes-of-other-providers) as if the nodes were gone. Off by default, so that a \
     selector typo cannot delete the routes of half the cluster; a deleted node's routes \
     are deleted either way",
)
.default("false");

/// The node filter of `--node-selector` and `--skip-nodes-of-other-providers` for the
/// cloud `provider` (without one, no providerID is skipped).
pub(crate) fn node_filter(
    p: &flags::Parsed,
    provider: Option<&str>,
) -> Result<crate::node_filter::NodeFilter, UsageError> {
    let selector = crate::selector::Selector::parse(&p.string("node-selector"))
        .map_err(|e| UsageError(format!("--node-selector: {e}")))?;
    let own_provider = provider
        .filter(|_| p.bool("skip-nodes-of-other-providers"))
        .and_then(crate::node_filter::OwnProvider::of);
    Ok(crate::node_filter::NodeFilter {
        selector,
        own_provider,
    })
}

pub(crate) const CLUSTER_CIDR: Flag = Flag::new(
    "cluster-cidr",
    Kind::String,
    "the pod network: one CIDR, or an IPv4 and an IPv6 CIDR separated by a comma; \
     routes outside it are never deleted",
);
pub(crate) const KUBECONFIG: Flag = Flag::new(
    "kubeconfig",
    Kind::String,
    "path to a kubeconfig (default: $KUBECONFIG, then ~/.kube/config, then the \
     in-cluster service account)",
);
pub(crate) const MASTER: Flag = Flag::new(
    "master",
    Kind::String,
    "the API server URL, overriding the kubeconfig's",
);
const OUTPUT: Flag =
    Flag::new("output", Kind::String, "output format: table or json").default("table");

/// The environment variables of the cluster's API, for help.
pub(crate) const KUBE_ENV: (&str, &str) = (
    "KUBECONFIG",
    "the kubeconfig when --kubeconfig is not given (then ~/.kube/config, then the \
     in-cluster service account)",
);

// --- the command line as a whole -----------------------------------------------------------

/// A subcommand and its flags.
#[derive(Debug)]
pub enum Command {
    Run(RunArgs),
    Plan(PlanArgs),
    Simulate(SimulateArgs),
    Manifests(ManifestsArgs),
    PluginCheck(PluginCheckArgs),
    CheckConfig(check::CheckArgs),
}

/// What the command line asks for.
#[derive(Debug)]
pub enum Invocation {
    /// Run this command; log these warnings (flags accepted but ignored) first.
    Command(Box<Command>, Vec<String>),
    /// Print this on stdout and exit 0 (`--help`, `--version`).
    Print(String),
}

/// The subcommands, with the line the top-level help gives each.
const COMMANDS: &[(&str, &Spec, &str)] = &[
    (
        "run",
        &run::SPEC,
        "keep the cloud's route table in step with the nodes",
    ),
    (
        "check-config",
        &check::SPEC,
        "print what run would use from its flags and cloud config, with no cluster",
    ),
    (
        "plan",
        &PLAN,
        "show what one reconcile pass would do, changing nothing",
    ),
    (
        "simulate",
        &SIMULATE,
        "compare the modes in virtual time against an in-memory cloud",
    ),
    (
        "manifests",
        &MANIFESTS,
        "print the RBAC and Deployment YAML that run the controller",
    ),
    (
        "plugin-check",
        &plugin_check::SPEC,
        "check an exec plugin against the protocol's contract",
    ),
];

/// The version `--version` and the start-up log give: the package's, and the commit it
/// was built from when the build had one (build.rs), e.g. `0.1.0 (commit 8549467)`.
pub fn version() -> String {
    match option_env!("ROUTE_CONTROLLER_COMMIT") {
        Some(commit) => format!("{} (commit {commit})", env!("CARGO_PKG_VERSION")),
        None => env!("CARGO_PKG_VERSION").to_string(),
    }
}

fn top_help() -> String {
    let mut out = String::from(
        "route-controller keeps a cloud's route table in step with the cluster's nodes: every \
         node's pod CIDRs are routed to that node.\n\nUsage: route-controller COMMAND [flags]\n\nCommands:\n",
    );
    for (name, _, summary) in COMMANDS {
        let _ = writeln!(out, "  {name:<10} {summary}");
    }
    out.push_str(
        "\n  -h, --help   print this help (COMMAND --help: the command's flags, defaults and\n               environment variables)\n  --version    print the version\n",
    );
    out
}

/// Parses the arguments after the program name.
pub fn parse_args(args: &[String]) -> Result<Invocation, UsageError> {
    let Some(first) = args.first() else {
        return Err(UsageError(
            "no command given: use run, check-config, plan, simulate, manifests or plugin-check (see route-controller --help)"
                .into(),
        ));
    };
    match first.as_str() {
        "-h" | "--help" | "help" => return Ok(Invocation::Print(top_help())),
        "--version" | "version" => {
            return Ok(Invocation::Print(format!(
                "route-controller {}\n",
                version()
            )));
        }
        _ => {}
    }
    let spec = COMMANDS
        .iter()
        .find(|(name, _, _)| name == first)
        .map(|(_, spec, _)| *spec)
        .ok_or_else(|| {
            UsageError(format!(
                "{first:?} is not a command: use run, check-config, plan, simulate, manifests or plugin-check (see route-controller --help)"
            ))
        })?;
    let parsed = match flags::parse(spec, &args[1..])? {
        Outcome::Parsed(p) => p,
        Outcome::Help(text) => return Ok(Invocation::Print(text)),
        Outcome::Version(text) => return Ok(Invocation::Print(text + "\n")),
    };
    let warnings = parsed.ignored_warnings();
    let command = match spec.name {
        "run" => Command::Run(RunArgs::from_parsed(parsed)),
        "plan" => Command::Plan(PlanArgs::from_parsed(&parsed)?),
        "simulate" => Command::Simulate(SimulateArgs::from_parsed(&parsed)?),
        "plugin-check" => Command::PluginCheck(PluginCheckArgs::from_parsed(&parsed)?),
        "check-config" => Command::CheckConfig(check::CheckArgs::from_parsed(parsed)),
        _ => Command::Manifests(ManifestsArgs::from_parsed(&parsed)?),
    };
    Ok(Invocation::Command(Box::new(command), warnings))
}

/// Parses the process arguments; on `--help` or `--version` prints and exits 0, on bad
/// flags prints one line and exits 2. Returns warnings about ignored flags, for the log.
pub fn parse(args: &[String]) -> (Command, Vec<String>) {
    match parse_args(args.get(1..).unwrap_or(&[])) {
        Ok(Invocation::Command(command, warnings)) => (*command, warnings),
        Ok(Invocation::Print(text)) => {
            print!("{text}");
            std::process::exit(0);
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(EXIT_USAGE);
        }
    }
}

// --- manifests ---------------------------------------------------------------------------

static MANIFESTS: Spec = Spec {
    name: "manifests",
    about: "Print ready-to-apply YAML: a ServiceAccount with least-privilege RBAC, a \
            Deployment with leader election, probes, resources and a locked-down security \
            context, and Secret references for the provider's credentials.",
    env: &[],
    groups: &[(
        "Flags",
        &[
            CLOUD_PROVIDER.default("hcloud"),
            CLUSTER_CIDR.required(),
            CLUSTER_NAME,
            Flag::new(
                "namespace",
                Kind::String,
                "namespace of the Deployment, its ServiceAccount and the lease",
            )
            .default("kube-system"),
            Flag::new(
                "image",
                Kind::String,
                "the container image (default: route-controller:<version>, an image you \
                 build and push yourself; see the README)",
            ),
            Flag::new(
                "leader-elect-resource-name",
                Kind::String,
                "the leader election Lease's name",
            )
            .default("route-controller"),
            Flag::new(
                "watch-based",
                Kind::Bool,
                "watch-based reconciliation (true) or polling every 10 s (false)",
            )
            .default("true"),
            Flag::new(
                "metrics-port",
                Kind::Int,
                "the secure port (HTTPS) of /metrics, /healthz and /readyz on the host network; \
                 not the CCM's 10258, which the CCM beside it holds",
            )
            .default("10270"),
            Flag::new(
                "replicas",
                Kind::Int,
                "replicas; one leads, the others stand by",
            )
            .default("2"),
            Flag::new(
                "monitoring",
                Kind::Bool,
                "also a Service and a prometheus-operator ServiceMonitor for the secure port, \
                 and a Grafana dashboard ConfigMap for the Grafana sidecar",
            )
            .default("false"),
            Flag::new(
                "plugin-image",
                Kind::String,
                "--cloud-provider=exec: an image with the plugin under /plugin/ and a cp, \
                 copied by an init container into a read-only volume at \
                 /usr/local/lib/route-controller (default: none, the plugin is in --image)",
            ),
        ],
    )],
};

/// The flags of `manifests`.
#[derive(Debug)]
pub struct ManifestsArgs {
    pub cloud_provider: String,
    pub cluster_cidr: Option<String>,
    pub cluster_name: String,
    pub namespace: String,
    pub image: Option<String>,
    pub leader_elect_resource_name: String,
    pub watch_based: bool,
    pub metrics_port: u16,
    pub replicas: u32,
    pub monitoring: bool,
    pub plugin_image: Option<String>,
}

impl ManifestsArgs {
    fn from_parsed(p: &Parsed) -> Result<ManifestsArgs, UsageError> {
        Ok(ManifestsArgs {
            cloud_provider: p.string("cloud-provider"),
            cluster_cidr: p.optional("cluster-cidr"),
            cluster_name: p.string("cluster-name"),
            namespace: p.string("namespace"),
            image: p.optional("image"),
            leader_elect_resource_name: p.string("leader-elect-resource-name"),
            watch_based: p.bool("watch-based"),
            metrics_port: p.number("metrics-port")?,
            replicas: p.number("replicas")?,
            monitoring: p.bool("monitoring"),
            plugin_image: p.optional("plugin-image"),
        })
    }
}

/// Runs `manifests` and returns the YAML.
pub fn run_manifests(args: &ManifestsArgs) -> Result<String, UsageError> {
    let defaults = crate::manifests::ManifestOptions::default();
    let options = crate::manifests::ManifestOptions {
        provider: args.cloud_provider.clone(),
        namespace: args.namespace.clone(),
        image: args.image.clone().unwrap_or(defaults.image),
        cluster_cidr: args.cluster_cidr.clone().unwrap_or_default(),
        cluster_name: args.cluster_name.clone(),
        leader_elect_resource_name: args.leader_elect_resource_name.clone(),
        watch_based: args.watch_based,
        metrics_port: args.metrics_port,
        replicas: args.replicas,
        monitoring: args.monitoring,
        plugin_image: args.plugin_image.clone(),
    };
    options.validate().map_err(UsageError)?;
    Ok(crate::manifests::render(&options))
}

// --- simulate ----------------------------------------------------------------------------

static SIMULATE: Spec = Spec {
    name: "simulate",
    about: "Simulate the controller in virtual time against an in-memory cloud, in each mode \
            side by side (poll, upstream-style watch, ours), and print the cloud calls, \
            latencies and what limited each. The real controller code runs; only the cluster \
            and the cloud are simulated. The default run (all six scenarios) takes about 11 s \
            of CPU, 7 s of it the 24 h of 1000 nodes of steady (8640 passes in poll mode); \
            its runs share the machine's cores, so on two it ends in about 6 s; any other \
            single scenario takes under 1.5 s.",
    env: &[],
    groups: &[(
        "Flags",
        &[
            Flag::new(
                "cloud",
                Kind::String,
                "fake: each mode (poll, upstream-style watch, ours) against an in-memory \
                 cloud; azure: ours beside a model of cloud-provider-azure's route updater, \
                 on one Azure route table (scenarios idle-add, scale-out, rolling-upgrade, \
                 second-writer; --nodes, --duration, --latency and --chart do not apply)",
            )
            .default("fake"),
            Flag::new(
                "scenario",
                Kind::String,
                "scenario: steady, rolling-upgrade, scale-out, flaky-cloud, address-churn, \
                 full-table, or all (with --cloud azure: idle-add, scale-out, \
                 rolling-upgrade, second-writer, or all)",
            )
            .default("all"),
            Flag::new(
                "nodes",
                Kind::Int,
                "number of nodes, 1 to 60000 (default: the scenario's, 1000 or 300)",
            ),
            Flag::new(
                "duration",
                Kind::String,
                "simulated time, in Go syntax such as 24h or 90m, at most 720h (default: the \
                 scenario's, 24h or 1h)",
            ),
            Flag::new(
                "seed",
                Kind::Int,
                "random seed; one seed always gives the same numbers",
            )
            .default("1"),
            Flag::new(
                "latency",
                Kind::String,
                "time each cloud call takes, at most 1m",
            )
            .default("100ms"),
            OUTPUT,
            Flag::new(
                "wide",
                Kind::Bool,
                "with --output table: every column (list, create and delete calls, passes, \
                 trigger->pass, max latencies), past 100 columns; without it the table fits \
                 100 columns",
            )
            .default("false"),
            Flag::new(
                "chart",
                Kind::String,
                "write an SVG chart of cloud calls and node-to-route latency to FILE (with \
                 several scenarios, the scenario name is added before the extension)",
            ),
        ],
    )],
};

/// The flags of `simulate`.
#[derive(Debug)]
pub struct SimulateArgs {
    pub cloud: String,
    pub scenario: String,
    pub nodes: Option<usize>,
    pub duration: Option<String>,
    pub seed: u64,
    pub latency: String,
    pub output: String,
    pub wide: bool,
    pub chart: Option<String>,
}

impl SimulateArgs {
    fn from_parsed(p: &Parsed) -> Result<SimulateArgs, UsageError> {
        Ok(SimulateArgs {
            cloud: p.string("cloud"),
            scenario: p.string("scenario"),
            nodes: match p.last("nodes") {
                Some(_) => Some(p.number("nodes")?),
                None => None,
            },
            duration: p.optional("duration"),
            seed: p.number("seed")?,
            latency: p.string("latency"),
            output: p.string("output"),
            wide: p.bool("wide"),
            chart: p.optional("chart"),
        })
    }
}

/// An error for the user: one line naming the file or flag and the problem.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

// --- simulate ---------------------------------------------------------------------------

/// Runs `simulate`: prints progress on stderr and returns what to print on stdout.
pub fn run_simulate(args: &SimulateArgs) -> Result<String, UsageError> {
    use crate::sim::{self, Scenario, SimOptions};
    match args.cloud.as_str() {
        "fake" => {}
        "azure" => return run_simulate_azure(args),
        other => {
            return Err(UsageError(format!(
                "--cloud: {other:?} is not a simulated cloud; use fake or azure"
            )));
        }
    }
    let scenarios: Vec<Scenario> = if args.scenario == "all" {
        Scenario::ALL.to_vec()
    } else {
        vec![Scenario::parse(&args.scenario).ok_or_else(|| {
            UsageError(format!(
                "--scenario: {:?} is not a scenario; use one of steady, rolling-upgrade, scale-out, flaky-cloud, \
                 address-churn, full-table, all",
                args.scenario
            ))
        })?]
    };
    if args.output != "table" && args.output != "json" {
        return Err(UsageError(format!(
            "--output: {:?} is not a format; use table or json",
            args.output
        )));
    }
    let duration = match &args.duration {
        Some(d) => {
            Some(crate::duration::parse(d).map_err(|e| UsageError(format!("--duration: {e}")))?)
        }
        None => None,
    };
    let latency =
        crate::duration::parse(&args.latency).map_err(|e| UsageError(format!("--latency: {e}")))?;
    let options: Vec<SimOptions> = scenarios
        .iter()
        .map(|scenario| SimOptions {
            scenario: *scenario,
            nodes: args.nodes,
            duration,
            seed: args.seed,
            latency,
        })
        .collect();
    for o in &options {
        sim::check_bounds(o).map_err(UsageError)?;
    }
    // The chart files are created before the run, so that a bad path fails at once
    // rather than after minutes of simulation.
    let charts: Vec<Option<String>> = scenarios
        .iter()
        .map(|s| {
            args.chart.as_ref().map(|path| {
                if scenarios.len() > 1 {
                    chart_path(path, s.name())
                } else {
                    path.clone()
                }
            })
        })
        .collect();
    for path in charts.iter().flatten() {
        std::fs::File::create(path)
            .map_err(|e| UsageError(format!("--chart {path}: cannot write: {e}")))?;
    }
    // On a terminal, one line that counts up; in a log, a line per quarter.
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let step = if tty { 1 } else { 25 };
    let mut shown = None;
    let what = match scenarios.as_slice() {
        [one] => one.name().to_string(),
        _ => format!("{} scenarios", scenarios.len()),
    };
    let mut progress = |f: f64| {
        let pct = (f * 100.0) as u32 / step * step;
        if shown == Some(pct) {
            return;
        }
        shown = Some(pct);
        if tty {
            eprint!("\rsimulating {what:<16} {pct:>3} %");
        } else {
            eprintln!("simulating {what}: {pct} %");
        }
    };
    // Every (scenario, mode) run is independent: they share the machine's cores.
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let reports = sim::run_all(&options, threads, &mut progress);
    if tty {
        eprint!("\r{:<40}\r", "");
    }
    for (report, chart) in reports.iter().zip(&charts) {
        if let Some(path) = chart {
            std::fs::write(path, sim::chart(report))
                .map_err(|e| UsageError(format!("--chart {path}: cannot write: {e}")))?;
            eprintln!("wrote {path}");
        }
    }
    /// A scenario's report with its goals, as JSON shows it.
    #[derive(Serialize)]
    struct WithGoals<'a> {
        #[serde(flatten)]
        report: &'a sim::ScenarioReport,
        goals: Vec<sim::Goal>,
        verdict: String,
    }
    let with_goals: Vec<WithGoals> = reports
        .iter()
        .map(|report| WithGoals {
            report,
            goals: sim::goals(report),
            verdict: sim::verdict(report),
        })
        .collect();
    Ok(match args.output.as_str() {
        "json" if reports.len() == 1 => {
            serde_json::to_string_pretty(&with_goals[0]).unwrap_or_default() + "\n"
        }
        "json" => serde_json::to_string_pretty(&with_goals).unwrap_or_default() + "\n",
        _ => {
            let tables: Vec<String> = reports.iter().map(|r| sim::table(r, args.wide)).collect();
            format!("{}\n{}", tables.join("\n"), sim::legend(args.wide))
        }
    })
}

/// `simulate --cloud azure`: ours beside the model of cloud-provider-azure's updater.
fn run_simulate_azure(args: &SimulateArgs) -> Result<String, UsageError> {
    use crate::sim::azure::{self, AzureScenario, Latencies};
    for (flag, given) in [
        ("nodes", args.nodes.is_some()),
        ("duration", args.duration.is_some()),
        ("chart", args.chart.is_some()),
        ("latency", args.latency != "100ms"),
    ] {
        if given {
            return Err(UsageError(format!(
                "--{flag} does not apply with --cloud azure: its scenarios are fixed \
                 (see --help); leave it out"
            )));
        }
    }
    let scenarios: Vec<AzureScenario> = match args.scenario.as_str() {
        "all" => AzureScenario::ALL.to_vec(),
        name => vec![AzureScenario::parse(name).ok_or_else(|| {
            UsageError(format!(
                "--scenario: {name:?} is not an Azure scenario; use one of idle-add, \
                 scale-out, rolling-upgrade, second-writer, all"
            ))
        })?],
    };
    let reports: Vec<azure::AzureReport> = scenarios
        .iter()
        .map(|s| {
            eprintln!("simulating azure {}", s.name());
            azure::run(*s, Latencies::default())
        })
        .collect();
    match args.output.as_str() {
        "json" => Ok(serde_json::to_string_pretty(&reports).unwrap_or_default() + "\n"),
        "table" => Ok(azure::table(&reports)),
        other => Err(UsageError(format!(
            "--output: {other:?} is not a format; use table or json"
        ))),
    }
}

fn chart_path(path: &str, scenario: &str) -> String {
    match path.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() && !ext.contains('/') => {
            format!("{stem}-{scenario}.{ext}")
        }
        _ => format!("{path}-{scenario}"),
    }
}

// --- plan ------------------------------------------------------------------------------

static PLAN: Spec = Spec {
    name: "plan",
    about: "Show what one reconcile pass would do, changing nothing. Nodes come from a file \
            (`kubectl get nodes -o json` output, \"-\" for stdin) or, without --nodes, from the \
            cluster; routes from a file ({\"routes\":[{\"name\",\"targetNode\",\"destinationCIDR\",\
            \"blackhole\",\"targetNodeAddresses\",\"enableNodeAddresses\"}]}) or, without \
            --routes, from the cloud named by --cloud-provider. Routes outside the cluster CIDRs \
            are listed as not ours: they are never deleted.",
    env: &[
        KUBE_ENV,
        (
            "HCLOUD_TOKEN, HCLOUD_NETWORK, AWS_*, GOOGLE_APPLICATION_CREDENTIALS",
            "the provider's credentials and settings without --routes, as for run",
        ),
    ],
    groups: &[(
        "Flags",
        &[
            Flag::new(
                "nodes",
                Kind::String,
                "the nodes: a NodeList as `kubectl get nodes -o json` prints it, or \"-\" for \
                 stdin (default: list them from the cluster)",
            ),
            Flag::new(
                "allow-partial",
                Kind::Bool,
                "accept a single Node as --nodes: it is the whole cluster (without this, a \
                 plan from one node would delete every other node's route)",
            )
            .default("false"),
            Flag::new(
                "routes",
                Kind::String,
                "the cloud routes: {\"routes\":[...]}, or \"-\" for stdin (default: list them \
                 from --cloud-provider)",
            ),
            CLUSTER_CIDR.required(),
            CLUSTER_NAME,
            OUTPUT,
            Flag {
                help: "plan only for the nodes this label selector selects, as run does; the \
                       routes of unselected nodes are listed as UNSELECTED and left alone",
                ..NODE_SELECTOR
            },
            Flag {
                help: "with --cloud-provider hcloud, aws, azure, gce, openstack or alibaba, plan as run does: nodes whose \
                       providerID belongs to another provider are unselected",
                ..SKIP_NODES_OF_OTHER_PROVIDERS
            },
            DELETE_ROUTES_OF_UNSELECTED_NODES,
            Flag {
                help: "without --nodes: path to a kubeconfig (default: $KUBECONFIG, then \
                       ~/.kube/config, then the in-cluster service account)",
                ..KUBECONFIG
            },
            Flag {
                help: "without --nodes: the API server URL, overriding the kubeconfig's",
                ..MASTER
            },
            Flag {
                help: "without --routes: the cloud to list routes from: hcloud, aws, azure, gce, openstack, alibaba, exec or fake",
                ..CLOUD_PROVIDER
            },
            Flag {
                help: "without --routes: the provider settings file (see run --help)",
                ..CLOUD_CONFIG
            },
        ],
    )],
};

/// The flags of `plan`.
#[derive(Debug)]
pub struct PlanArgs {
    pub nodes: Option<String>,
    pub allow_partial: bool,
    pub routes: Option<String>,
    pub cluster_cidr: String,
    pub cluster_name: String,
    pub output: String,
    pub kubeconfig: Option<String>,
    pub master: Option<String>,
    pub cloud_provider: Option<String>,
    pub cloud_config: Option<String>,
    pub node_filter: crate::node_filter::NodeFilter,
    pub delete_routes_of_unselected_nodes: bool,
}

impl PlanArgs {
    fn from_parsed(p: &Parsed) -> Result<PlanArgs, UsageError> {
        Ok(PlanArgs {
            node_filter: node_filter(p, p.optional("cloud-provider").as_deref())?,
            delete_routes_of_unselected_nodes: p.bool("delete-routes-of-unselected-nodes"),
            nodes: p.optional("nodes"),
            allow_partial: p.bool("allow-partial"),
            routes: p.optional("routes"),
            cluster_cidr: p.string("cluster-cidr"),
            cluster_name: p.string("cluster-name"),
            output: p.string("output"),
            kubeconfig: p.optional("kubeconfig"),
            master: p.optional("master"),
            cloud_provider: p.optional("cloud-provider"),
            cloud_config: p.optional("cloud-config"),
        })
    }
}

/// `{"routes": [...]}`; anything else at the top level is a mistake (a node list
/// passed as routes, say), not something to ignore.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RouteFile {
    routes: Vec<Route>,
}

/// Runs `plan` and returns what to print on stdout.
pub fn run_plan(args: &PlanArgs) -> Result<String, UsageError> {
    let cluster_cidrs = parse_cluster_cidrs(&args.cluster_cidr).map_err(UsageError)?;
    if args.output != "table" && args.output != "json" {
        return Err(UsageError(format!(
            "--output: {:?} is not a format; use table or json",
            args.output
        )));
    }
    if args.nodes.as_deref() == Some("-") && args.routes.as_deref() == Some("-") {
        return Err(UsageError(
            "--nodes - and --routes -: stdin can carry only one of them; put the other in a file"
                .into(),
        ));
    }
    // The cloud config is read before the cluster is asked anything, so that a bad
    // one fails first; with --routes it is only checked.
    let cloud_settings = match &args.cloud_provider {
        Some(name) if args.routes.is_none() || args.cloud_config.is_some() => {
            let settings = cloud::read(
                name,
                args.cloud_config.as_deref().map(std::path::Path::new),
                &cluster_cidrs,
            )?;
            for warning in &settings.warnings {
                eprintln!("warning: {warning}");
            }
            Some(settings)
        }
        _ => None,
    };
    let FilteredNodes {
        routed: nodes,
        unselected,
    } = match &args.nodes {
        Some(path) => read_nodes(path, args.allow_partial, &args.node_filter)?,
        None => live_nodes(args)?,
    };
    let mut checks = CloudChecks::default();
    let routes = match (&args.routes, &cloud_settings) {
        (Some(path), _) => read_routes(path)?,
        (None, Some(settings)) => {
            let name = settings.provider_name();
            let cloud = settings
                .connect(None, &crate::fence::Fence::open())
                .map_err(|e| match e {
                    cloud::ProviderError::Config(e) => e,
                    cloud::ProviderError::Outage(message) => UsageError(message),
                })?;
            let directory = crate::cloud::NodeDirectory::new(
                nodes
                    .iter()
                    .map(|n| (n.name.as_str(), n.provider_id.as_deref()))
                    .chain(unselected.iter().map(|(n, id)| (n.as_str(), id.as_deref()))),
            );
            let routes = cloud
                .list_routes(&args.cluster_name, &directory)
                .map_err(|e| {
                    UsageError(format!(
                        "--cloud-provider {name}: listing routes failed: {e}"
                    ))
                })?;
            checks = CloudChecks::ask(cloud.as_ref(), &routes, &nodes, &cluster_cidrs);
            routes
        }
        (None, None) => {
            return Err(UsageError(
                "--routes or --cloud-provider is required: read routes from a file or from the cloud"
                    .into(),
            ));
        }
    };
    let unrouted = plan::UnroutedNodes {
        contains: &|name| unselected.contains_key(name),
        delete_routes: args.delete_routes_of_unselected_nodes,
    };
    let plan = plan::plan_with_unrouted(&nodes, &routes, &cluster_cidrs, unrouted);
    for p in &plan.problems {
        eprintln!("warning: {p}");
    }
    let not_ours = not_ours(&routes, &cluster_cidrs);
    Ok(match args.output.as_str() {
        "json" => plan_json_checked(&plan, &nodes, &not_ours, &checks),
        _ => plan_table_checked(&plan, &nodes, &not_ours, &checks),
    })
}

/// What `plan` learns from the provider beyond its routes: the room in its route
/// tables, and the creates its pre-flight check refuses. Empty with `--routes`.
#[derive(Debug, Default)]
pub struct CloudChecks {
    /// Each table as listed ([`Routes::route_tables`](crate::Routes::route_tables)).
    pub tables: Vec<crate::TableUsage>,
    /// Creates the pre-flight check refuses: node, destination, reason, message.
    pub refused: Vec<(String, String, &'static str, String)>,
}

impl CloudChecks {
    /// Asks `cloud` (just listed) about its tables and the plan's creates.
    fn ask(
        cloud: &dyn crate::Routes,
        routes: &[Route],
        nodes: &[Node],
        cidrs: &[crate::Cidr],
    ) -> CloudChecks {
        let plan = plan::plan(nodes, routes, cidrs);
        let refused = plan::requests(&plan, nodes)
            .into_iter()
            .filter_map(|c| {
                let target = crate::RouteTarget {
                    node_name: c.route.target_node.clone(),
                    provider_id: c.provider_id.clone(),
                    addresses: c.route.target_node_addresses.clone(),
                };
                match cloud.preflight(&c.route, &target) {
                    Err(e) => match e.kind {
                        crate::CloudErrorKind::Refused { reason, .. } => Some((
                            c.route.target_node,
                            c.route.destination_cidr,
                            reason,
                            e.message,
                        )),
                        _ => None,
                    },
                    Ok(()) => None,
                }
            })
            .collect();
        CloudChecks {
            tables: cloud.route_tables(),
            refused,
        }
    }

    /// Whether the check refuses the create of `destination` for `node`.
    fn refuses(&self, node: &str, destination: &str) -> bool {
        self.refused
            .iter()
            .any(|(n, d, _, _)| n == node && d == destination)
    }

    /// Per table: routes now, routes after the plan (deletes, then the creates that
    /// pass the check), its limit, and how many of those creates do not fit.
    fn headroom(&self, plan: &Plan) -> Vec<(&crate::TableUsage, usize, usize)> {
        let creates = plan.creates.len().saturating_sub(self.refused.len());
        self.tables
            .iter()
            .map(|t| {
                let after_deletes = t.routes.saturating_sub(plan.deletes.len());
                let room = t.limit.saturating_sub(after_deletes);
                let fitting = creates.min(room);
                (t, after_deletes + fitting, creates - fitting)
            })
            .collect()
    }
}

/// The routes outside every cluster CIDR, by upstream's rule: the planner never
/// deletes them, and the plan says so rather than leaving them out in silence.
fn not_ours<'a>(routes: &'a [Route], cluster_cidrs: &[crate::model::Cidr]) -> Vec<&'a Route> {
    routes
        .iter()
        .filter(|r| {
            crate::model::Cidr::parse(&r.destination_cidr)
                .is_ok_and(|c| !plan::is_responsible(&c, cluster_cidrs))
        })
        .collect()
}

/// Lists the nodes of the cluster that `--kubeconfig`/`--master` (or the usual
/// resolution) names.
fn live_nodes(args: &PlanArgs) -> Result<FilteredNodes, UsageError> {
    use crate::kube::{Client, ClientOptions, Env, KubeConfig, LoadOptions, WatchConfig};
    let load = LoadOptions {
        kubeconfig: args.kubeconfig.as_ref().map(std::path::PathBuf::from),
        master: args.master.clone(),
        context: None,
    };
    let kube = KubeConfig::load(&load, &Env::from_process())
        .map_err(|e| UsageError(format!("without --nodes, nodes come from the cluster: {e}")))?;
    let client = Client::new(&kube, ClientOptions::default())
        .map_err(|e| UsageError(format!("Kubernetes client: {e}")))?;
    let mut nodes = FilteredNodes::default();
    crate::kube::for_each_node(&client, &WatchConfig::default(), |item| {
        nodes.add(item, &args.node_filter)
    })
    .map_err(|e| UsageError(format!("listing nodes from {}: {e}", kube.server)))?;
    Ok(nodes)
}

/// The file, or stdin for "-", buffered: inputs are read as a stream.
fn open_input(path: &str, flag: &str) -> Result<Box<dyn std::io::BufRead>, UsageError> {
    if path == "-" {
        return Ok(Box::new(std::io::BufReader::new(std::io::stdin())));
    }
    let file = std::fs::File::open(path)
        .map_err(|e| UsageError(format!("{flag} {path}: cannot read: {e}")))?;
    Ok(Box::new(std::io::BufReader::with_capacity(1 << 16, file)))
}

/// Reads `kubectl get nodes -o json` (a `List` of Nodes) or a `NodeList` from the API,
/// as a stream: each item becomes the few fields the planner keeps as soon as it is
/// read (its labels only long enough for `filter`), so memory grows with the fields the
/// planner keeps, not with the document. A single Node is accepted only with
/// `allow_partial`, since a plan from it deletes every other node's route.
pub fn read_nodes(
    path: &str,
    allow_partial: bool,
    filter: &crate::node_filter::NodeFilter,
) -> Result<FilteredNodes, UsageError> {
    let input = open_input(path, "--nodes")?;
    let mut de = serde_json::Deserializer::from_reader(input);
    let file = serde::de::DeserializeSeed::deserialize(node_file::FileSeed(filter), &mut de)
        .and_then(|f| de.end().map(|()| f))
        .map_err(|e| {
            if e.is_syntax() || e.is_eof() {
                UsageError(format!("--nodes {path}: not valid JSON: {e}"))
            } else {
                UsageError(format!("--nodes {path}: {e}"))
            }
        })?;
    match file {
        node_file::NodeFile::List(nodes) => Ok(nodes),
        node_file::NodeFile::Single(_) if !allow_partial => Err(UsageError(format!(
            "--nodes {path}: a single Node, not the cluster's list: a plan from it would delete \
             every other node's route; give `kubectl get nodes -o json`, or --allow-partial if \
             this node is the whole cluster"
        ))),
        node_file::NodeFile::Single(node) => {
            let mut nodes = FilteredNodes::default();
            nodes.add(*node, filter);
            Ok(nodes)
        }
    }
}

/// Nodes split by the node filter, as the node watch splits them: the routed ones, and
/// the others by name and providerID.
#[derive(Debug, Default)]
pub struct FilteredNodes {
    pub routed: Vec<Node>,
    pub unselected: std::collections::BTreeMap<String, Option<String>>,
}

impl FilteredNodes {
    fn add(&mut self, item: LabeledNode, filter: &crate::node_filter::NodeFilter) {
        match filter.check(&item.node, &item.labels) {
            Ok(()) => self.routed.push(item.node),
            Err(_) => {
                self.unselected
                    .insert(item.node.name, item.node.provider_id);
            }
        }
    }

    /// How many nodes, routed or not.
    pub fn len(&self) -> usize {
        self.routed.len() + self.unselected.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The streaming reader of node files.
mod node_file {
    use std::fmt;

    use serde::Deserialize;
    use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};

    use super::FilteredNodes;
    use crate::model::LabeledNode;
    use crate::node_filter::NodeFilter;

    pub enum NodeFile {
        List(FilteredNodes),
        Single(Box<LabeledNode>),
    }

    /// One list item: a Node, which `kubectl get -o json` marks with its kind (an API
    /// server's NodeList leaves the kind out).
    #[derive(Deserialize)]
    struct Item {
        kind: Option<String>,
        #[serde(flatten)]
        node: LabeledNode,
    }

    /// The items, each checked to be a Node and filtered as it arrives.
    struct ItemsSeed<'a>(&'a NodeFilter);

    impl<'de> DeserializeSeed<'de> for ItemsSeed<'_> {
        type Value = FilteredNodes;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<FilteredNodes, D::Error> {
            d.deserialize_seq(self)
        }
    }

    impl<'de> Visitor<'de> for ItemsSeed<'_> {
        type Value = FilteredNodes;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a list of Nodes")
        }
        fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<FilteredNodes, A::Error> {
            let mut nodes = FilteredNodes::default();
            nodes.routed.reserve(seq.size_hint().unwrap_or(0));
            while let Some(item) = seq.next_element::<Item>()? {
                if let Some(kind) = item.kind.filter(|k| k != "Node") {
                    return Err(de::Error::custom(format!(
                        "expected a NodeList (kubectl get nodes -o json), but item {} is a {kind}",
                        nodes.len() + 1
                    )));
                }
                nodes.add(item.node, self.0);
            }
            Ok(nodes)
        }
    }

    /// The whole file.
    pub struct FileSeed<'a>(pub &'a NodeFilter);

    impl<'de> DeserializeSeed<'de> for FileSeed<'_> {
        type Value = NodeFile;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<NodeFile, D::Error> {
            d.deserialize_map(self)
        }
    }

    impl<'de> Visitor<'de> for FileSeed<'_> {
        type Value = NodeFile;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a NodeList (kubectl get nodes -o json)")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<NodeFile, A::Error> {
            let mut kind: Option<String> = None;
            let mut items: Option<FilteredNodes> = None;
            // A single Node's own fields: small, kept as JSON until the kind is known.
            let mut single = serde_json::Map::new();
            while let Some(key) = map.next_key::<String>()? {
                match key.as_str() {
                    "kind" => kind = Some(map.next_value()?),
                    "items" => items = Some(map.next_value_seed(ItemsSeed(self.0))?),
                    "metadata" | "spec" | "status" => {
                        single.insert(key, map.next_value()?);
                    }
                    _ => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
            }
            match (kind.as_deref(), items) {
                (Some("List" | "NodeList") | None, Some(nodes)) => Ok(NodeFile::List(nodes)),
                (Some("Node"), None) => serde_json::from_value(serde_json::Value::Object(single))
                    .map(|n| NodeFile::Single(Box::new(n)))
                    .map_err(de::Error::custom),
                (Some(other), _) => Err(de::Error::custom(format!(
                    "expected a NodeList (kubectl get nodes -o json), not a {other}"
                ))),
                (None, None) => Err(de::Error::custom(
                    "expected a NodeList with \"items\" (kubectl get nodes -o json)",
                )),
            }
        }
    }
}

pub fn read_routes(path: &str) -> Result<Vec<Route>, UsageError> {
    let input = open_input(path, "--routes")?;
    let file: RouteFile = serde_json::from_reader(input).map_err(|e| {
        UsageError(format!(
            "--routes {path}: not a route list ({{\"routes\":[...]}}): {e}"
        ))
    })?;
    Ok(file.routes)
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonPlan<'a> {
    deletes: Vec<JsonDelete<'a>>,
    creates: Vec<JsonCreate<'a>>,
    conditions: Vec<JsonCondition<'a>>,
    /// Routes outside the cluster CIDRs: never deleted, whatever they point at.
    not_ours: Vec<JsonRoute<'a>>,
    /// Routes to nodes that exist but are unselected (`--node-selector`, another
    /// provider's providerID): left alone.
    unselected: Vec<JsonRoute<'a>>,
    problems: Vec<String>,
    /// The provider's route tables and their headroom (with --cloud-provider).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tables: Vec<JsonTable<'a>>,
    /// Creates the provider's pre-flight check refuses (with --cloud-provider).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    refused: Vec<JsonRefused<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonTable<'a> {
    table: &'a str,
    routes: usize,
    limit: usize,
    after_plan: usize,
    not_fitting: usize,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonRefused<'a> {
    target_node: &'a str,
    #[serde(rename = "destinationCIDR")]
    destination_cidr: &'a str,
    reason: &'a str,
    message: &'a str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonRoute<'a> {
    name: &'a str,
    target_node: &'a str,
    #[serde(rename = "destinationCIDR")]
    destination_cidr: &'a str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonDelete<'a> {
    name: &'a str,
    target_node: &'a str,
    #[serde(rename = "destinationCIDR")]
    destination_cidr: &'a str,
    reason: &'static str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonCreate<'a> {
    target_node: &'a str,
    #[serde(rename = "destinationCIDR")]
    destination_cidr: &'a str,
    name_hint: &'a str,
    target_node_addresses: &'a [NodeAddress],
}

#[derive(Serialize)]
struct JsonCondition<'a> {
    node: &'a str,
    status: String,
    reason: String,
    message: String,
}

/// The plan as JSON: deletes in the order of the listed routes, creates in node order
/// then pod-CIDR order, and the condition writes that would follow if every operation
/// succeeded; then the routes that are not ours.
pub fn plan_json(plan: &Plan, nodes: &[Node], not_ours: &[&Route]) -> String {
    plan_json_checked(plan, nodes, not_ours, &CloudChecks::default())
}

/// [`plan_json`] with what the provider said: `tables` (routes, limit, routes after
/// the plan, creates that do not fit) and `refused` (creates the pre-flight check
/// refuses, with its reason), each left out when empty.
pub fn plan_json_checked(
    plan: &Plan,
    nodes: &[Node],
    not_ours: &[&Route],
    checks: &CloudChecks,
) -> String {
    let requests = plan::requests(plan, nodes);
    let json = JsonPlan {
        tables: checks
            .headroom(plan)
            .into_iter()
            .map(|(t, after, not_fitting)| JsonTable {
                table: &t.table,
                routes: t.routes,
                limit: t.limit,
                after_plan: after,
                not_fitting,
            })
            .collect(),
        refused: checks
            .refused
            .iter()
            .map(|(node, destination, reason, message)| JsonRefused {
                target_node: node,
                destination_cidr: destination,
                reason,
                message,
            })
            .collect(),
        deletes: plan
            .deletes
            .iter()
            .map(|d| JsonDelete {
                name: &d.route.name,
                target_node: &d.route.target_node,
                destination_cidr: &d.route.destination_cidr,
                reason: d.reason.as_str(),
            })
            .collect(),
        creates: requests
            .iter()
            .map(|c| JsonCreate {
                target_node: &c.route.target_node,
                destination_cidr: &c.route.destination_cidr,
                name_hint: &c.name_hint,
                target_node_addresses: &c.route.target_node_addresses,
            })
            .collect(),
        conditions: plan::conditions_on_success(plan)
            .into_iter()
            .map(|(n, c)| JsonCondition {
                node: n.node,
                status: c.status.into_owned(),
                reason: c.reason.into_owned(),
                message: c.message.into_owned(),
            })
            .collect(),
        not_ours: not_ours
            .iter()
            .map(|r| JsonRoute {
                name: &r.name,
                target_node: &r.target_node,
                destination_cidr: &r.destination_cidr,
            })
            .collect(),
        unselected: plan
            .unselected
            .iter()
            .map(|r| JsonRoute {
                name: &r.name,
                target_node: &r.target_node,
                destination_cidr: &r.destination_cidr,
            })
            .collect(),
        problems: plan.problems.iter().map(ToString::to_string).collect(),
    };
    let mut text = serde_json::to_string_pretty(&json).unwrap_or_default();
    text.push('\n');
    text
}

/// The plan for people.
pub fn plan_table(plan: &Plan, nodes: &[Node], not_ours: &[&Route]) -> String {
    plan_table_checked(plan, nodes, not_ours, &CloudChecks::default())
}

/// [`plan_table`] with what the provider said: a `REFUSED` line for each create its
/// pre-flight check refuses, in place of `CREATE`, and a `TABLE` line per route table
/// with its headroom.
pub fn plan_table_checked(
    plan: &Plan,
    nodes: &[Node],
    not_ours: &[&Route],
    checks: &CloudChecks,
) -> String {
    let mut out = String::new();
    for d in &plan.deletes {
        let target = if d.route.target_node.is_empty() {
            "-"
        } else {
            &d.route.target_node
        };
        let _ = writeln!(
            out,
            "DELETE     {:<18} {:<24} route {} ({})",
            target, d.route.destination_cidr, d.route.name, d.reason
        );
    }
    for c in &plan::requests(plan, nodes) {
        if checks.refuses(&c.route.target_node, &c.route.destination_cidr) {
            continue;
        }
        let addrs: Vec<String> = c
            .route
            .target_node_addresses
            .iter()
            .map(|a| format!("{}={}", a.kind, a.address))
            .collect();
        let _ = writeln!(
            out,
            "CREATE     {:<18} {:<24} name hint {}{}; addresses {}",
            c.route.target_node,
            c.route.destination_cidr,
            c.name_hint,
            if c.replaces {
                ", replaces the route to old addresses"
            } else {
                ""
            },
            if addrs.is_empty() {
                "none".to_string()
            } else {
                addrs.join(",")
            }
        );
    }
    for (node, destination, reason, message) in &checks.refused {
        let _ = writeln!(
            out,
            "REFUSED    {node:<18} {destination:<24} {reason}: {message}"
        );
    }
    for (t, after, not_fitting) in checks.headroom(plan) {
        let _ = writeln!(
            out,
            "TABLE      {:<18} {} of {} routes now, {} after this plan ({} free){}",
            t.table,
            t.routes,
            t.limit,
            after,
            t.limit.saturating_sub(after),
            if not_fitting > 0 {
                format!("; {not_fitting} creates do not fit and wait (RouteTableFull)")
            } else {
                String::new()
            }
        );
    }
    let conditions = plan::conditions_on_success(plan);
    for (n, c) in &conditions {
        let _ = writeln!(
            out,
            "CONDITION  {:<18} NetworkUnavailable={} ({})",
            n.node, c.status, c.reason
        );
    }
    for r in not_ours {
        let target = if r.target_node.is_empty() {
            "-"
        } else {
            &r.target_node
        };
        let _ = writeln!(
            out,
            "NOT OURS   {:<18} {:<24} route {} (outside the cluster CIDRs; never deleted)",
            target, r.destination_cidr, r.name
        );
    }
    for r in &plan.unselected {
        let _ = writeln!(
            out,
            "UNSELECTED {:<18} {:<24} route {} (the node is not routed here; left alone)",
            r.target_node, r.destination_cidr, r.name
        );
    }
    let _ = writeln!(
        out,
        "{} to delete, {} to create, {} kept, {} condition writes, {} not ours{}{}",
        plan.deletes.len(),
        plan.creates.len(),
        plan.kept,
        conditions.len(),
        not_ours.len(),
        if plan.unselected.is_empty() {
            String::new()
        } else {
            format!(", {} of unselected nodes left alone", plan.unselected.len())
        },
        if plan.problems.is_empty() {
            String::new()
        } else {
            format!(", {} problems (see warnings)", plan.problems.len())
        }
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Invocation, UsageError> {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        parse_args(&args)
    }

    fn printed(args: &[&str]) -> String {
        match parse(args) {
            Ok(Invocation::Print(text)) => text,
            other => panic!("{args:?}: {other:?}"),
        }
    }

    #[test]
    fn help_and_version_at_the_top_and_for_each_command() {
        assert!(printed(&["--help"]).contains("  plan       show what"));
        assert!(printed(&["-h"]).contains("Commands:"));
        assert!(printed(&["--version"]).starts_with("route-controller "));
        assert!(printed(&["run", "--version"]).starts_with("route-controller "));
        for (name, spec, _) in COMMANDS {
            let text = printed(&[name, "-h"]);
            for flag in spec.flags() {
                assert!(
                    text.contains(&format!("--{}", flag.name)),
                    "{name}: --{}",
                    flag.name
                );
            }
            assert!(!text.contains("{{"), "{name}: {text}");
        }
    }

    #[test]
    fn no_command_or_an_unknown_one_says_which_there_are() {
        for args in [&[][..], &["serve"]] {
            let Err(e) = parse(args) else {
                panic!("{args:?} parsed")
            };
            assert!(
                e.0.contains("use run, check-config, plan, simulate, manifests or plugin-check"),
                "{e}"
            );
        }
    }

    #[test]
    fn the_shared_flags_mean_the_same_in_every_command() {
        let Ok(Invocation::Command(command, _)) = parse(&[
            "plan",
            "--cluster-cidr=10.0.0.0/8",
            "--cluster-name=a",
            "--cluster-name=b",
            "--nodes=n.json",
            "--routes=r.json",
        ]) else {
            panic!("plan parses")
        };
        let Command::Plan(plan) = *command else {
            panic!("not plan")
        };
        assert_eq!(
            (plan.cluster_name.as_str(), plan.cluster_cidr.as_str()),
            ("b", "10.0.0.0/8")
        );
        let Ok(Invocation::Command(command, _)) =
            parse(&["manifests", "--cluster-cidr=10.0.0.0/8"])
        else {
            panic!("manifests parses")
        };
        let Command::Manifests(m) = *command else {
            panic!("not manifests")
        };
        assert_eq!(m.cloud_provider, "hcloud", "manifests' own default");
        assert_eq!(m.cluster_name, "kubernetes");
    }
}
